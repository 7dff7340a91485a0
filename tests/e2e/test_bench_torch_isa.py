"""The benches compare ours with torch at the same ISA (issue 28): with CPU_ISA narrower than the host's vectors
(x86-64-v3 on an AVX-512 host) the torch children run as on an AVX2 host, ATen and oneDNN both, and torch at the host's
own ISA is shown next to it for reference."""
import importlib.util, os, subprocess, sys
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AVX512 = frozenset({"avx", "avx2", "fma", "avx512f"})

def _load(name: str):
  sys.path.insert(0, os.path.join(ROOT, "bench"))
  spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(ROOT, "bench", f"{name}.py"))
  mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
  return mod

def test_torch_env_follows_ours_isa():
  env_of = _load("_common").torch_isa_env
  assert env_of("x86-64-v3", AVX512) == ("AVX2", {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"})
  # ours at the host's own width (native, v4 on AVX-512, v3 on an AVX2 host): torch runs natively too
  for isa, flags in (("native", AVX512), ("x86-64-v4", AVX512), ("x86-64-v3", frozenset({"avx", "avx2", "fma"})), ("", AVX512)):
    assert env_of(isa, flags) == ("native", {}), isa
  assert env_of("x86-64-v2", AVX512)[1]["ONEDNN_MAX_CPU_ISA"] == "SSE41"

def test_torch_env_from_cpu_isa_variable(monkeypatch):
  env_of = _load("_common").torch_isa_env
  monkeypatch.setenv("CPU_ISA", "x86-64-v3")
  assert env_of(host_flags=AVX512)[0] == "AVX2"
  monkeypatch.delenv("CPU_ISA")
  assert env_of(host_flags=AVX512) == ("native", {})

def test_torch_child_runs_its_convs_at_avx2():
  """The environment really moves torch's convolutions (oneDNN's, not only ATen's kernels) to AVX2: ATEN_CPU_CAPABILITY
  alone leaves oneDNN at AVX-512 (bench/README.md)."""
  if importlib.util.find_spec("torch") is None: pytest.skip("torch not installed")
  _, env = _load("_common").torch_isa_env("x86-64-v3", AVX512)
  code = ("import torch; torch.nn.functional.conv2d(torch.randn(4, 3, 16, 16), torch.randn(16, 3, 3, 3)); "
          "import json; print(json.dumps({'aten': torch.backends.cpu.get_cpu_capability()}))")
  p = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env, "ONEDNN_VERBOSE": "1"}, capture_output=True, text=True, timeout=120)
  assert p.returncode == 0, p.stderr[-500:]
  assert '"aten": "AVX2"' in p.stdout
  execs = [line for line in (p.stdout + p.stderr).splitlines() if "primitive,exec" in line and "convolution" in line]
  if not execs: pytest.skip("torch's conv ran without oneDNN here")
  assert all("avx512" not in line for line in execs) and any("avx2" in line for line in execs), execs

def test_native_torch_table_shows_both():
  run = _load("run")
  row = {"bench": "conv", "key": "conv", "shape": [32, 3, 32, 32, 32, 64]}
  res = {"ours": {"rows": [row | {"median_s": 0.010}]}, "torch": {"rows": [row | {"median_s": 0.012}]},
         "torch_native": {"rows": [row | {"median_s": 0.008}], "info": {"isa": "AVX512"}}}
  lines = run.native_torch_table(res, "AVX2")
  body = next(line for line in lines if line.startswith("conv2d"))
  assert body.split()[2:] == ["10.00", "12.00", "8.00", "0.80x"], body

def test_numpy_runs_the_openblas_kernel_of_ours_isa():
  """Every ISA torch can be put at has numpy's OpenBLAS kernel for it (run.py's numpy child), and that kernel is what
  OpenBLAS then reports running (read back from the library)."""
  common = _load("_common")
  assert {isa for isa, _ in common.TORCH_AT_ISA.values()} <= set(common.BLAS_AT_ISA)
  code = "import sys; sys.path.insert(0, 'bench'); from _oracle import blas_kernel; print(blas_kernel())"
  env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")} | common.BLAS_AT_ISA["AVX2"]
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
  # (threadpoolctl, where installed, names the library "openblas"; OpenBLAS itself "OpenBLAS")
  if "openblas" not in out.stdout.lower(): pytest.skip(f"numpy does not run OpenBLAS here: {out.stdout.strip() or out.stderr[-200:]}")
  assert "Haswell" in out.stdout, out.stdout
