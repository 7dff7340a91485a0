"""The checks of tests/conftest.py that fail a test leaving process-global state changed (tests/state_guard.py): what a
leak reports, that the next test sees the state as before, and no report for what monkeypatch undoes."""
import os, pathlib, subprocess, sys, textwrap
import numpy as np
import state_guard
from child_env import pythonpath
from hcqrt.device import Device
from frontend import Tensor
from frontend import engine

TESTS = pathlib.Path(__file__).resolve().parents[1]

def other_device(name: str) -> str:
  """A valid default that is not `name` (setting it opens nothing)."""
  return "AMDEMU" if name != "AMDEMU" else "PTXEMU"

def test_changes_names_each_kind_and_restore_puts_it_back():
  _ = Device.DEFAULT   # (chosen now, if no test did before)
  before = state_guard.snapshot()
  old_default, old_cache, old_training = Device.DEFAULT, engine.LAUNCH_CACHE, Tensor.training
  try:
    Device.DEFAULT, engine.LAUNCH_CACHE, Tensor.training = other_device(Device.DEFAULT), not old_cache, not old_training
    os.environ["HCQRT_GUARD_PROBE"] = "1"
    old_err = np.seterr(over="raise")
    after = state_guard.snapshot()
    got = state_guard.changes(before, after)
    assert got == ["os.environ['HCQRT_GUARD_PROBE']: (unset) -> '1'", f"Device.DEFAULT: {old_default!r} -> {Device.DEFAULT!r}",
                   f"numpy.geterr(): {old_err!r} -> {np.geterr()!r}", f"frontend.engine.LAUNCH_CACHE: {old_cache!r} -> {not old_cache!r}",
                   f"frontend.tensor.Tensor.training: {old_training!r} -> {not old_training!r}"], got
    state_guard.restore(before, after)
    assert (Device.DEFAULT, engine.LAUNCH_CACHE, Tensor.training, "HCQRT_GUARD_PROBE" in os.environ, np.geterr()) == (old_default, old_cache, old_training, False, old_err)
    assert state_guard.changes(before, state_guard.snapshot()) == []
  finally:
    Device.DEFAULT, engine.LAUNCH_CACHE, Tensor.training = old_default, old_cache, old_training
    os.environ.pop("HCQRT_GUARD_PROBE", None); np.seterr(**old_err)

def test_a_default_chosen_lazily_is_no_change(monkeypatch):
  monkeypatch.setattr(Device, "_default", None)
  before = state_guard.snapshot()
  _ = Device.DEFAULT   # the registry's first read chooses it (hcqrt/device.py _Registry.DEFAULT)
  assert state_guard.changes(before, state_guard.snapshot()) == []

def test_random_generators_are_put_back():
  state = state_guard.rng_state()
  want = np.random.random()
  state_guard.restore_rng(state)
  Tensor.manual_seed(1234)
  assert np.random.random() == want and Tensor._seed == 1234
  state_guard.restore_rng(state)
  assert np.random.random() == want and Tensor._seed == state[3][0]
  state_guard.restore_rng(state)

LEAKY = '''
import os
import pytest
from hcqrt.device import Device
from frontend import engine
ORIG = {}

@pytest.fixture(scope="module")
def module_flips_launch_cache():
  engine.LAUNCH_CACHE = not engine.LAUNCH_CACHE   # (never put back)
  yield

def test_1_leaks_the_default():
  ORIG["default"] = Device.DEFAULT
  Device.DEFAULT = "AMDEMU" if Device.DEFAULT != "AMDEMU" else "PTXEMU"

def test_2_sees_the_original_default():
  assert Device.DEFAULT == ORIG["default"]

def test_3_leaks_an_environment_setting():
  os.environ["NOOPT"] = "1"

def test_4_monkeypatch_is_no_leak(monkeypatch):
  assert "NOOPT" not in os.environ
  monkeypatch.setenv("BEAM", "2"); monkeypatch.setattr(Device, "DEFAULT", "PTXEMU"); monkeypatch.setattr(engine, "LAUNCH_CACHE", False)

def test_5_module_fixture(module_flips_launch_cache):
  ORIG["cache"] = engine.LAUNCH_CACHE

def test_6_last():
  assert Device.DEFAULT == ORIG["default"] and engine.LAUNCH_CACHE == ORIG["cache"]
'''

def run_pytest(tmp_path: pathlib.Path, files: dict[str, str], *flags: str) -> str:
  """pytest's report of `files` run in a child, under a conftest that holds tests/conftest.py's checks."""
  (tmp_path / "pytest.ini").write_text("[pytest]\n")
  (tmp_path / "conftest.py").write_text(textwrap.dedent(f'''
    import importlib.util, sys
    sys.path.insert(0, {str(TESTS)!r})
    spec = importlib.util.spec_from_file_location("hcqrt_tests_conftest", {str(TESTS / "conftest.py")!r})
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    _module_leaves_global_state_as_found, _test_leaves_global_state_as_found = m._module_leaves_global_state_as_found, m._test_leaves_global_state_as_found
    pytest_make_collect_report = m.pytest_make_collect_report
  '''))
  for name, text in files.items(): (tmp_path / name).write_text(text)
  env = {**os.environ, "PYTHONPATH": pythonpath(TESTS.parent)}
  r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:benchmark", "-rfE", *flags, "."],
                     cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
  return r.stdout + r.stderr

def test_a_leak_fails_its_test_and_the_next_sees_the_original(tmp_path):
  out = run_pytest(tmp_path, {"test_leaky.py": LEAKY})
  assert "6 passed, 3 errors" in out, out
  assert "ERROR at teardown of test_1_leaks_the_default" in out and "Device.DEFAULT: " in out, out
  assert "ERROR at teardown of test_3_leaks_an_environment_setting" in out and "os.environ['NOOPT']: (unset) -> '1'" in out, out
  assert "test_leaky.py: its module/class-scoped fixtures left global state changed" in out and "frontend.engine.LAUNCH_CACHE: True -> False" in out, out
  assert "test_4_monkeypatch_is_no_leak" not in out, out

def test_a_module_whose_import_leaks_fails_to_collect(tmp_path):
  out = run_pytest(tmp_path, {"test_import_leaks.py": "import os\nos.environ['DEBUG'] = '7'\ndef test_x(): pass\n",
                              "test_after.py": "import os\ndef test_y(): assert os.environ.get('DEBUG') != '7'\n"}, "--continue-on-collection-errors")
  assert "importing test_import_leaks.py changed global state" in out and "os.environ['DEBUG']: (unset) -> '7'" in out, out
  assert "1 passed, 1 error" in out, out
