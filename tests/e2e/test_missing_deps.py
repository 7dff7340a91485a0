"""`python -m hcqrt` / `python -m hw_tests` in an environment with only numpy: they say exactly what to install
(and how, offline) instead of dying at an import with a traceback. The missing packages are simulated with a
meta-path finder that refuses them, as in a fresh venv."""
import os, subprocess, sys
import pytest
from hcqrt.deps import install_hint, missing

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def _run_without(blocked, module, *args):
  code = (f"import sys, runpy\n"
          f"class _Block:\n"
          f"  def find_spec(self, name, path=None, target=None):\n"
          f"    if name.split('.')[0] in {tuple(blocked)!r}: raise ModuleNotFoundError(f'No module named {{name!r}}', name=name)\n"
          f"sys.meta_path.insert(0, _Block())\n"
          f"sys.argv = [{module!r}, *{list(args)!r}]\n"
          f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")
  env = {k: v for k, v in os.environ.items() if k not in ("MOCKGPU", "NV")}
  return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

@pytest.mark.parametrize("module,args,rc", [("hw_tests", ("--device", "NV", "--mock"), 2), ("hcqrt", (), 1)])
def test_only_numpy_says_what_to_install(module, args, rc):
  r = _run_without(("cffi", "pycparser", "elftools"), module, *args)
  out = r.stdout + r.stderr
  assert r.returncode == rc, out
  assert "Traceback" not in out
  assert f"python -m {module}: missing Python package(s): cffi, pycparser, pyelftools" in out
  assert f"{sys.executable} -m pip install cffi pycparser pyelftools" in out
  assert "pip download --no-deps --only-binary=:all:" in out and "-d .whl cffi pycparser pyelftools" in out
  assert "pip install -q --no-index --no-deps --target .site .whl/*.whl" in out

def test_one_missing_package():
  r = _run_without(("elftools",), "hw_tests", "--device", "NV", "--mock")
  assert r.returncode == 2 and "missing Python package(s): pyelftools" in r.stderr and "pip install pyelftools\n" in r.stderr
  assert "Traceback" not in r.stderr

def test_hint_adds_pycparser_for_cffi():
  assert "pip install cffi pycparser\n" in install_hint(["cffi"]) and missing() == []
