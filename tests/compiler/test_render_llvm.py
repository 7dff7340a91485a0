"""The LLVM renderer and assembler (compiler/render_llvm.py, compiler/assemble/llvm.py): CPU kernels built by LLVM in-process
(CPU_LLVM=1) on a representative subset of the ops against torch/numpy, LLVM-only properties (total integer division, no
libm calls, the disk cache, the missing-extra error), and AMD code objects for gfx1100 and gfx942 checked with
llvm-objdump-19 (kernel + descriptor, one R_AMDGPU_REL64 at kd+16, a clean disassembly)."""
import math
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

from compiler.lazy import LazyBuffer
from compiler.pipeline import compile_kernel
from compiler.schedule import create_schedule
from compiler.target import AMD_TARGETS, Target
from compiler.uop import Ops
from frontend import Tensor, devices, dtypes
from hcqrt.cpu.elf_loader import load_elf
from tests.needs import need_llvm_objdump_19
from tests.child_env import pythonpath


@pytest.fixture
def cpu_llvm(monkeypatch):
  """The CPU device with renderer "llvm" (as CPU_LLVM=1 at start-up), for one test."""
  monkeypatch.setenv("CPU_LLVM", "1")
  monkeypatch.delitem(devices._targets, "CPU", raising=False)
  assert devices.target_of("CPU").renderer == "llvm"
  yield
  devices._targets.pop("CPU", None)

rng = np.random.default_rng(7)
def _r(*shape, lo=-2.0, hi=2.0): return rng.uniform(lo, hi, shape).astype(np.float32)

# (name, numpy inputs, torch fn, our fn, atol): elementwise with odd sizes (vector tails), reductions, matmul,
# softmax, conv, transcendentals, casts across every dtype family, views
CASES = [
  ("add_mul", [_r(7, 33), _r(7, 33)], lambda a, b: a * b + a, None, 1e-6),
  ("exp_log_sin", [_r(1000, lo=0.1, hi=8.0)], lambda a: a.exp() + a.log() + a.sin(), None, 1e-4),
  ("exp2_big_range", [_r(257, lo=-160.0, hi=130.0)], lambda a: torch.exp2(a), lambda a: a.exp2(), 1e-5),
  ("log2_exp2_special", [np.array([0.0, -0.0, -1.0, np.inf, -np.inf, np.nan, 1e-40, 1e-30, 3.5, 1e30, 1.4142135, 0.70710677], np.float32)],
   lambda a: torch.stack([torch.log2(a), torch.exp2(a / 8)]), lambda a: Tensor.stack(a.log2(), (a / 8).exp2()), 4e-7),
  ("sqrt_recip_trunc", [_r(33, lo=0.5, hi=9.0)], lambda a: a.sqrt() + 1 / a + a.trunc(), None, 1e-5),
  ("max_nan", [np.array([1.0, np.nan, -3.0, 2.0], np.float32)], lambda a: a.max(), None, 0),
  ("sum_rows", [_r(33, 1000)], lambda a: a.sum(1), None, 1e-3),
  ("mean_cols_view", [_r(64, 48)], lambda a: a.permute(1, 0)[::2].mean(1), None, 1e-5),
  ("matmul", [_r(65, 96), _r(96, 40)], lambda a, b: a @ b, None, 1e-4),
  ("softmax", [_r(32, 100)], lambda a: a.softmax(-1), None, 1e-6),
  ("conv2d", [_r(2, 3, 9, 9), _r(4, 3, 3, 3)], lambda x, w: TF.conv2d(x, w, padding=1), lambda x, w: x.conv2d(w, padding=1), 1e-4),
  ("where_cmp", [_r(100), _r(100)], lambda a, b: torch.where(a < b, a, b * 2), lambda a, b: (a < b).where(a, b * 2), 0),
  ("half", [_r(77)], lambda a: (a.half() * 3 + 1).exp().float(), None, 1e-2),
  ("bfloat16", [_r(77, lo=-100, hi=100)], lambda a: a.bfloat16().float() * 2, lambda a: a.cast(dtypes.bfloat16).float() * 2, 0),
  ("bfloat16_math", [_r(64, lo=-30, hi=30), _r(64)], lambda a, b: torch.stack([(a.bfloat16() * b.bfloat16() + a.bfloat16()).float(), (a.bfloat16() < b.bfloat16()).float()]),
   lambda a, b: Tensor.stack((a.cast(dtypes.bfloat16) * b.cast(dtypes.bfloat16) + a.cast(dtypes.bfloat16)).float(), (a.cast(dtypes.bfloat16) < b.cast(dtypes.bfloat16)).float()), 0),
  ("int64_bool", [_r(50, lo=-1e6, hi=1e6)], lambda a: (a.long() * 3 + (a > 0).long()).double(), lambda a: (a.cast(dtypes.int64) * 3 + (a > 0).cast(dtypes.int64)).cast(dtypes.float64), 0),
  ("int_floordiv_mod", [_r(90, lo=-50, hi=50), _r(90, lo=1, hi=7)],
   lambda a, b: torch.stack([a.int() // b.int(), a.int() % b.int()]), lambda a, b: Tensor.stack(a.int() // b.int(), a.int() % b.int()), 0),
  ("uint8_wrap", [_r(40, lo=0, hi=255)], lambda a: a.to(torch.uint8) * 7 + 13, lambda a: a.cast(dtypes.uint8) * 7 + 13, 0),
  ("float64_transcendental", [_r(50, lo=0.1, hi=5)], lambda a: (a.double().exp() + a.double().log()).float(), lambda a: (a.cast(dtypes.float64).exp() + a.cast(dtypes.float64).log()).float(), 1e-6),
  ("argmax_cumsum", [_r(9, 33)], lambda a: a.argmax(1).float() + a.cumsum(1)[:, -1], lambda a: a.argmax(1).float() + a.cumsum(1)[:, -1], 1e-4),
]

@pytest.mark.parametrize("name,xs,tfn,ofn,atol", CASES, ids=[c[0] for c in CASES])
def test_cpu_llvm_ops(cpu_llvm, name, xs, tfn, ofn, atol):
  exp = tfn(*[torch.from_numpy(x) for x in xs]).numpy()
  out = (ofn or tfn)(*[Tensor(x) for x in xs]).numpy()
  np.testing.assert_allclose(out, exp, atol=atol, rtol=max(atol, 1e-6) if atol else 0)

def test_cpu_llvm_backward(cpu_llvm):
  x, w = _r(8, 20), _r(20, 5)
  tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
  (tx @ tw).relu().log_softmax(-1).sum().backward()
  ox, ow = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  (ox @ ow).relu().log_softmax(-1).sum().backward()
  np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), atol=1e-5)
  np.testing.assert_allclose(ow.grad.numpy(), tw.grad.numpy(), atol=1e-5)

def test_integer_division_is_total(cpu_llvm):
  # x/0 and x%0 give 0, INT_MIN/-1 wraps: no trap (x86 idiv faults on both), the same values constant folding gives
  a = Tensor(np.array([7, -7, -2**31, -2**31, 5], np.int32))
  b = Tensor(np.array([0, 0, -1, 0, -1], np.int32))
  assert a.div(b, rounding_mode="trunc").tolist() == [0, 0, -2**31, 0, -5]
  assert a.fmod(b).tolist() == [0, 0, 0, 0, 0]
  assert Tensor(np.array([9, 9], np.uint32)).div(Tensor(np.array([0, 2], np.uint32)), rounding_mode="trunc").tolist() == [0, 4]

def test_a_nan_cast_to_bfloat16_stays_nan(cpu_llvm):
  """A float32 NaN (log of a negative) cast to bfloat16 is bf16's quiet NaN; the select once took 0x7FC0 as the number
  32704.0 and stored its bf16 bits (0x4700, 32768.0): found on the AMD mock, whose kernels this renderer builds too."""
  out = Tensor(np.array([-1.0, 4.0, np.nan], np.float32)).log().cast(dtypes.bfloat16).bitcast(dtypes.uint16).numpy()
  assert out[0] == out[2] == 0x7FC0 and out[1] == 0x3FB1   # log(4) = 1.386 -> bf16 0x3FB1

def _ast(lb): return create_schedule([lb])[0].ast
def _buf(shape, dt=dtypes.float32):
  x = LazyBuffer.empty(shape, dt, "CPU"); x.buffer = object(); return x

CPU_LLVM_TARGET = Target("CPU", "llvm", arch="native", ncores=2, simd_bytes=16)

def test_cpu_objects_call_nothing():
  # transcendentals are inline arithmetic: the object has no undefined symbols (no libm), loads with our loader
  x = _buf((64, 64))
  for lb in (x.alu(Ops.EXP2), x.alu(Ops.LOG2), x.alu(Ops.SIN), x.cast(dtypes.float64).alu(Ops.SIN), x.cast(dtypes.float16).alu(Ops.EXP2)):
    ck = compile_kernel(_ast(lb), CPU_LLVM_TARGET, name="k")
    img = load_elf(ck.binary)
    assert img.externals == {} and "k" in img.symbols, (ck.src, img.externals)

def test_threaded_kernel_splits_outer_loop():
  ck = compile_kernel(_ast(_buf((1 << 12, 64)).alu(Ops.ADD, _buf((1 << 12, 64)))), CPU_LLVM_TARGET, name="big")
  assert ck.threads == 2 and "%core" in ck.src.split("entry:")[1]

def test_disk_cache_and_errors(tmp_path, monkeypatch):
  import compiler.assemble.llvm as L
  monkeypatch.setenv("HCQRT_CACHE", str(tmp_path))
  ir = "define void @f(ptr %p) {\n  store i32 7, ptr %p\n  ret void\n}\n"
  obj = L.compile_llvm(ir, "f")
  assert [p.suffix for p in (tmp_path / "llvm").iterdir()] == [".o"] and L.compile_llvm(ir, "f") == obj
  with pytest.raises(L.LLVMCompileError, match="kernel 'bad'"): L.compile_llvm("define void @f() { ret i32 0 }", "bad")
  with pytest.raises(ValueError, match="unknown arch 'sm_90'"): L.compile_llvm(ir, "f", "sm_90")
  assert load_elf(L.compile_llvm(ir, "f", "x86-64-v3")).symbols.keys() == {"f"}   # a CPU_ISA level is an LLVM CPU name

def test_missing_llvmlite_names_the_extra():
  code = ("import sys; sys.modules['llvmlite'] = None; sys.modules['llvmlite.binding'] = None\n"
          "from compiler.assemble.llvm import compile_llvm\n"
          "try: compile_llvm('', 'k', 'gfx1100')\n"
          "except ImportError as e: print(e)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
  assert "llvmlite>=0.50" in out and "hcqrt[llvm]" in out

# ***** AMD code objects *****

def _objdump(path, *flags) -> str:
  return subprocess.run([need_llvm_objdump_19(), *flags, str(path)], capture_output=True, text=True, check=True).stdout

def _amd_kernels():
  x, y, h = _buf((64, 96)), _buf((96, 40)), _buf((1000,), dtypes.float16)
  i, g = _buf((333,), dtypes.int32), _buf((8, 1000))
  prod = x.reshape((64, 96, 1)).expand((64, 96, 40)).alu(Ops.MUL, y.reshape((1, 96, 40)).expand((64, 96, 40)))
  return {"elementwise": x.alu(Ops.ADD, x).alu(Ops.EXP2), "reduction": x.r(Ops.MAX, (1,)), "grouped_sum": g.r(Ops.ADD, (1,)), "matmul": prod.r(Ops.ADD, (1,)),
          "half_sin": h.alu(Ops.SIN), "f64_log": x.cast(dtypes.float64).alu(Ops.LOG2), "int_div": i.alu(Ops.IDIV, i.alu(Ops.ADD, i))}

@pytest.mark.parametrize("arch", sorted(AMD_TARGETS))
def test_amd_code_objects(arch, tmp_path):
  t = AMD_TARGETS[arch]
  for name, lb in _amd_kernels().items():
    ck = compile_kernel(_ast(lb), t, name=name)
    blocks, threads = math.prod(ck.launch.global_size), math.prod(ck.launch.local_size)   # (the grid of compiler/gpudims.py)
    assert 1 <= threads <= 4 * t.warp_size and blocks * threads >= math.prod(ck.global_size), ck.launch
    p = tmp_path / f"{name}.o"; p.write_bytes(ck.binary)
    syms = _objdump(p, "-t")
    assert re.search(rf"\sF \.text\s+\w+ (\.protected )?{name}\n", syms) and re.search(rf"\sO \.rodata\s+0+40 {name}\.kd\n", syms), syms
    relocs = re.findall(r"^([0-9a-f]{16}) (R_\w+)\s+(\S+)$", _objdump(p, "-r"), re.MULTILINE)
    assert relocs == [("0000000000000010", "R_AMDGPU_REL64", f"{name}+0x10")], relocs   # kd+16: the entry offset
    dis = _objdump(p, "-d", f"--mcpu={arch}")
    insts = [l for l in dis.splitlines() if l.startswith("\t")]
    assert insts and not any("<unknown>" in l or ".long" in l for l in insts), dis
    assert any("s_endpgm" in l for l in insts) and any("global_load" in l for l in insts) and any("global_store" in l for l in insts)
    assert not any("scratch_" in l or "buffer_store" in l for l in insts), f"{name} on {arch} spills to scratch"
    if name == "grouped_sum":   # few outputs, a long reduction: a workgroup per output, lanes combined in LDS between barriers
      assert ck.launch.global_size[0] == 8 and "addrspace(3)" in ck.src
      assert any("s_barrier" in l for l in insts) and any(l.split()[0].startswith(("ds_store", "ds_write")) for l in insts)

def test_cpu_llvm_needs_no_c_compiler(tmp_path):
  # a machine without a C compiler: PATH holds only stand-ins for every compiler name we look for, each recording
  # that it was run (and failing). CPU_LLVM=1 builds every kernel and the thread-pool runner in-process: the main
  # job (examples/train_digits.py) trains, its kernels launch through the LLVM-built native runner, nothing spawns one.
  import os, pathlib
  from compiler.assemble.c_compiler import CLANGS
  repo, fake, log = pathlib.Path(__file__).parents[2], tmp_path / "bin", tmp_path / "spawned.txt"
  fake.mkdir()
  for n in ["cc", "gcc", "c99", *CLANGS]:
    (fake / n).write_text(f'#!/bin/sh\necho "$0 $*" >> {log}\nexit 1\n'); (fake / n).chmod(0o755)
  env = {k: v for k, v in os.environ.items() if k not in ("HCQRT_CC", "CC", "NV", "AMD", "MOCKGPU")}
  env |= {"PATH": str(fake), "CPU_LLVM": "1", "CPU": "1", "HCQRT_CACHE": str(tmp_path / "cache"), "PYTHONPATH": pythonpath(repo)}
  run = lambda *args: subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=repo, timeout=900)
  code = ("from frontend import Tensor; import numpy as np; import hcqrt.cpu.device as d\n"
          "x = Tensor(np.arange(4096, dtype=np.float32).reshape(64, 64) * 1e-3)\n"
          "print(((x @ x).sum(1) * 1e-4).exp2().log2().tolist()); print(d._runner is not None)")
  r = run("-c", code)
  assert r.returncode == 0, r.stderr
  vals, native = r.stdout.splitlines()
  a = np.arange(4096, dtype=np.float64).reshape(64, 64) * 1e-3
  np.testing.assert_allclose(eval(vals), (a @ a).sum(1) * 1e-4, rtol=1e-5)
  assert native == "True"   # multi-core launches go through the native runner, not the Python pool
  r = run("examples/train_digits.py", "--steps", "20")
  assert r.returncode == 0, r.stderr[-3000:]
  assert not log.exists(), log.read_text()
  # the stand-ins do catch a compiler spawn: the C path (CPU_LLVM=0) runs one (and fails)
  env["CPU_LLVM"] = "0"
  r = run("-c", "from frontend import Tensor; (Tensor([1.0]) + 1).realize()")
  assert r.returncode != 0 and log.exists()
