"""bench/run.py measures numpy at its best (issue 28): its numpy and torch children run without the OpenBLAS variables
that pin a kernel, and the numpy child names the BLAS kernel it ran."""
import importlib.util, os, subprocess, sys
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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
  if "OpenBLAS" not in pinned.stdout: pytest.skip(f"numpy does not run OpenBLAS here: {pinned.stdout.strip() or pinned.stderr[-200:]}")
  assert "Haswell" in pinned.stdout   # the kernel OpenBLAS was told to use, read back from the library
  free = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert "OpenBLAS" in free.stdout and "kernel" in free.stdout
