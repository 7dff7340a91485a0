"""bench/run.py measures numpy at its best (issue 28): its numpy and torch children run without the OpenBLAS variables
that pin a kernel, and the numpy child names the BLAS kernel it ran."""
import importlib.util, os, subprocess, sys
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def _load(name: str):
  spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(ROOT, "bench", f"{name}.py"))
  mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
  return mod

def test_children_run_without_blas_pins(monkeypatch):
  run = _load("run")
  monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell"); monkeypatch.setenv("OPENBLAS_L2_SIZE", "262144")
  cmd = [sys.executable, "-c", "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('OPENBLAS_CORETYPE', 'OPENBLAS_L2_SIZE')}))"]
  got = run.run_child(cmd, {}, 60, False, drop=run.BLAS_PINS)
  assert got["OPENBLAS_CORETYPE"] is None and got["OPENBLAS_L2_SIZE"] is None
  # (without the drop the child would see them: the test can fail)
  assert run.run_child(cmd, {}, 60, False)["OPENBLAS_CORETYPE"] == "Haswell"

def test_peak_names_its_isa():
  run = _load("run")
  assert run.peak_isa("avx2 fma avx512f").startswith("AVX-512") and run.fma_flop_per_cycle("avx2 fma avx512f") == 64
  assert run.peak_isa("avx2 fma").startswith("AVX2") and run.fma_flop_per_cycle("avx2 fma") == 32

def test_numpy_child_names_the_kernel_it_runs():
  code = "import sys; sys.path.insert(0, 'bench'); import _oracle; print(_oracle.blas_kernel())"
  env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
  pinned = subprocess.run([sys.executable, "-c", code], env=env | {"OPENBLAS_CORETYPE": "Haswell"}, cwd=ROOT, capture_output=True, text=True, timeout=120)
  # (threadpoolctl, where installed, names the library "openblas"; OpenBLAS itself "OpenBLAS")
  if "openblas" not in pinned.stdout.lower(): pytest.skip(f"numpy does not run OpenBLAS here: {pinned.stdout.strip() or pinned.stderr[-200:]}")
  assert "Haswell" in pinned.stdout   # the kernel OpenBLAS was told to use, read back from the library
  free = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert "openblas" in free.stdout.lower() and "kernel" in free.stdout

def test_fma_peak_is_measured():
  run = _load("run")
  simd = run.cpu_info().get("simd", "")
  got = run.measure_fma_peak(simd, 1)
  if got is None: pytest.skip(f"no x86 FMA or C compiler here (simd flags: {simd!r})")
  assert got > 0   # (a count of FMAs over the thread's CPU time; no speed is asserted)
  assert run.measure_fma_peak("", 1) is None   # no FMA: nothing to measure

def test_matmul_share_is_judged_against_the_measured_peak():
  run = _load("run")
  row = {"key": "matmul:1024", "bench": "matmul", "n": 1024, "median_s": 2 * 1024**3 / 300e9, "ok": True}
  lines = run.table({"ours": {"rows": [row]}, "numpy": {"rows": [dict(row, median_s=2 * 1024**3 / 250e9)]}}, 400.0, 64, "AVX-512", 375.0)
  note = next(l for l in lines if l.startswith("FMA peak"))
  assert "nominal 400" in note and "measured 375" in note and "ours 80%" in note and "numpy 67%" in note   # 300/375, 250/375
  note = next(l for l in run.table({"ours": {"rows": [row]}}, 400.0, 64) if l.startswith("FMA peak"))
  assert "ours 75%" in note and "nominal" in note   # no measurement: the nominal peak judges
