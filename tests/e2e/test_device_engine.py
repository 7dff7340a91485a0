"""Device choice, DEBUG output, the README/CI contract, and the engine's behaviour on failure."""
import os, pathlib, re, subprocess, sys
import numpy as np
import pytest
from hcqrt import syscalls
from frontend import Tensor, GlobalCounters
from frontend.devices import target_of
from hcqrt.device import _Registry

ROOT = pathlib.Path(__file__).resolve().parents[2]

def test_default_choice_is_cheap_and_env_selects(monkeypatch):
  for name in ("CPU", "NV", "AMD", "PTXEMU"): monkeypatch.delenv(name, raising=False)
  r = _Registry()
  opened = []
  monkeypatch.setattr(syscalls, "open", lambda *a, **k: opened.append(a) or (_ for _ in ()).throw(AssertionError("opened a device file")))
  choice = r.DEFAULT
  assert not opened   # choosing opens no driver (a path check, not an ioctl)
  assert choice in ("CPU", "NV", "AMD")
  monkeypatch.setenv("PTXEMU", "1")
  assert _Registry().DEFAULT == "PTXEMU"
  r.DEFAULT = "cpu"
  assert r.DEFAULT == "CPU"
  with pytest.raises(ValueError, match="unknown device"): r.DEFAULT = "TPU"

def test_default_choice_in_a_fresh_process_is_fast():
  code = ("import sys; from hcqrt.device import Device; d=Device.DEFAULT; "
          "print(d, [m for m in ('hcqrt.nv.device', 'hcqrt.amd.device', 'hcqrt.cpu.device', 'compiler') if m in sys.modules])")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env={**os.environ, "DEBUG": "1"}, check=True)
  dev, loaded = out.stdout.split(maxsplit=1)
  assert loaded.strip() == "[]", loaded   # no backend or compiler is even imported to choose
  assert f"device: {dev}" in out.stderr   # DEBUG=1 names the device chosen

def test_debug_levels_print_kernels_and_source():
  code = "from frontend import Tensor; (Tensor([1.0, 2.0, 3.0]) * 7 + 0.25).realize()"
  env = {**os.environ, "DEBUG": "4", "CACHE": "0", "CPU": "1"}   # the CPU's source (CPU=1 wins over NV=1)
  err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, check=True).stderr
  assert re.search(r"kernel\s+1 E_3\s", err)            # DEBUG>=2: one line per kernel with its name
  # DEBUG>=4: the generated source, C or (CPU_LLVM=1) LLVM IR
  assert ("define void @E_3(" if os.environ.get("CPU_LLVM") == "1" else "void E_3(") in err

def test_readme_commands_match_ci():
  readme = (ROOT / "README.md").read_text()
  block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1).strip().splitlines()
  assert len(block) == 2, "the README states exactly two set-up commands"
  test_cmd = block[1].split("#")[0].strip()
  assert test_cmd in (ROOT / ".ci" / "run").read_text()

def test_readme_runs_the_suite_on_a_worker_a_core_at_most_8(monkeypatch):
  """`-n auto` (the README's test command) starts a pytest-xdist worker per core this process may use, at most 8
  (tests/conftest.py), and `--dist loadfile` keeps each file in one worker."""
  import conftest
  cmd = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1).strip().splitlines()[1]
  assert "-n auto" in cmd and "--dist loadfile" in cmd and "--max-worker-restart 0" in cmd and "pytest-xdist" in (ROOT / "pyproject.toml").read_text()
  for cores, want in ((1, 1), (2, 2), (8, 8), (128, 8)):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
    assert conftest.pytest_xdist_auto_num_workers(None) == want

def test_failed_compile_leaves_nothing_half_realized(monkeypatch):
  import compiler.assemble.c_compiler as cc, compiler.assemble.llvm as cl
  a = Tensor([1.0, 2.0], device="CPU").realize()   # a compile failure: pinned to the CPU (also under NV=1)
  y = a * 123.5 + 0.125        # a kernel never compiled before in this process
  # the CPU's compiler: the C compiler, or LLVM in-process (CPU_LLVM=1)
  mod, fn, err = (cl, "compile_llvm", cl.LLVMCompileError) if target_of("CPU").renderer == "llvm" else (cc, "compile_c", cc.CompileError)
  def broken(src, name="kernel", *_): raise err(f"simulated failure compiling {name}")
  monkeypatch.setattr(mod, fn, broken)
  with pytest.raises(err, match="simulated"): y.realize()
  assert not y.lazydata.realized
  monkeypatch.undo()
  np.testing.assert_allclose(y.numpy(), [123.625, 247.125])

def test_global_counters_count_kernels_flops_bytes():
  a, b = Tensor.rand(64, 64).realize(), Tensor.rand(64, 64).realize()
  GlobalCounters.reset()
  (a @ b).realize()
  assert GlobalCounters.kernel_count == 1
  assert GlobalCounters.global_ops >= 2 * 64 ** 3
  assert GlobalCounters.global_mem >= 3 * 64 * 64 * 4

def test_readme_quickstart_runs_and_fuses():
  code = re.search(r"## Quickstart\n\n```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env={**os.environ, "CPU": "1"}, check=True)
  assert out.stdout.splitlines()[1] == "1"   # the printed kernel count of the fused (x + y) * z
