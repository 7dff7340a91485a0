"""DEBUG levels print their stage for the README's quickstart program (examples/quickstart.py): 2 memory, 3 the
schedule (ops, source lines, why a kernel is separate), 5 UOps before/after optimization and the opts, 6 each rewrite
pass, 7 disassembly (or a note naming the missing tool)."""
import os, re, shutil, subprocess, sys
import pytest
from tests.child_env import pythonpath

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_out: dict[int, str] = {}

def _run(level: int) -> str:
  if level not in _out:
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "quickstart.py")], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": pythonpath(ROOT), "CPU": "1", "DEBUG": str(level)}, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    _out[level] = r.stderr
  return _out[level]

def test_debug2_memory():
  err = _run(2)
  lines = [ln for ln in err.splitlines() if " kernel " in ln]
  assert lines and all(re.search(r"[\d.]+ MB moved +live [\d.]+ MB \(peak [\d.]+\)", ln) for ln in lines)
  assert "schedule:" not in err and "UOps before" not in err

def test_debug3_schedule():
  err = _run(3)
  assert re.search(r"schedule: \d+ items", err)
  # the loss's reduction kernel: its ops, the quickstart lines that built them, and why it is a kernel of its own
  assert re.search(r"\[\d+\] kernel r_256_1_3: out \(256, 1\) dtypes.float", err)
  assert "ops: " in err and "REDUCE_AXIS" in err
  assert re.search(r"from: .*examples/quickstart.py:1[0-7]", err)
  assert "separate because its output is read by kernel" in err and "separate because its output was asked for" in err
  assert "separate because an in-place write (assign)" in err
  assert "UOps before optimization" not in err

def test_debug5_uops_and_opts():
  err = _run(5)
  assert re.search(r"\*\*\* r_256_1_3: UOps before optimization\n +0 ", err)
  # a kernel the opts changed (which opts depends on the host's vector width): its UOps differ before and after
  m = re.search(r"\*\*\* (\w+): opts applied \[(.+)\]\n", err)
  assert m, "no kernel with opts applied"
  name = m.group(1)
  before = err.split(f"*** {name}: UOps before optimization")[1].split("***")[0]
  after = err[m.end():].split(f"*** {name}: UOps after optimization")[1].split("***")[0]
  assert "RANGE" in before and before != after
  assert "pass registered rewrites" not in err

def test_debug6_passes():
  err = _run(6)
  assert re.search(r"\*\*\* \w+: pass registered rewrites: (no change|\d+ UOps new, \d+ gone)", err)

def test_debug7_disassembly():
  err = _run(7)
  if shutil.which("objdump"): assert "Disassembly of section .text" in err and re.search(r"<r_256_1_3>:", err)
  else: assert "(no disassembly: objdump is not installed)" in err

def test_disassembly_note_names_missing_tool(monkeypatch):
  from compiler.pipeline import disassemble
  from compiler.target import Target
  monkeypatch.setenv("PATH", "/nonexistent")
  assert disassemble(b"\x7fELF", Target("NV", "ptx", arch="sm_90")) == "(no disassembly: nvdisasm is not installed)"

def test_disassembly_of_amd_code_object():
  if shutil.which("llvm-objdump-19") is None: pytest.skip("llvm-objdump-19 is not installed: apt-get install llvm-19")
  pytest.importorskip("llvmlite")
  from compiler.lazy import LazyBuffer
  from compiler.schedule import create_schedule
  from compiler.dtypes import dtypes
  from compiler.uop import Ops
  from compiler.target import AMD_TARGETS
  from compiler.pipeline import compile_kernel, disassemble
  x = LazyBuffer.empty((64,), dtypes.float32, "AMD"); x.buffer = object()
  ck = compile_kernel(create_schedule([x.alu(Ops.MUL, x)])[0].ast, AMD_TARGETS["gfx1100"], name="sq")
  asm = disassemble(ck.binary, AMD_TARGETS["gfx1100"])
  assert "<sq>:" in asm and "mul_f32" in asm and "s_endpgm" in asm
