"""The process-global state a test may change only for itself, and the checks of tests/conftest.py that fail a test (or
a test module) that leaves it changed, then put it back so that later tests in the same process are unaffected.

Why: under `python -m pytest -n 12` one worker runs hundreds of tests one after another, and a test that leaves
`Device.DEFAULT` on "CPU" makes a later, unrelated test fail with "tensors on different devices: NV and CPU" (the H200
run), far from the cause. The checks name the test that changed the state instead.

What is checked (`snapshot` / `changes`):
- `Device.DEFAULT` (hcqrt/device.py `_Registry._default`; None = not chosen yet, and a later lazy choice is no change),
  the registry's opened devices (one replaced or dropped: a leak; one opened: its cache at work), and the fake drivers
  behind the syscall seam (hcqrt/syscalls.py `_drivers`) other than the registry's own MOCKGPU ones;
- `os.environ`, which also holds every setting read through compiler/settings.py and hcqrt/settings.py (DEBUG, BEAM,
  NOOPT, ...: `Context` writes there);
- every public UPPERCASE module global of frontend, compiler and hcqrt (the switches and limits: engine.LAUNCH_CACHE,
  schedule.SCHEDULE_CACHE, hcq.DEFAULT_TIMEOUT_S, profile.ENABLED, pack.PACK_MIN, cp.EXECUTOR, ...), and every public
  scalar class attribute of their classes (Tensor.training, Tensor.no_grad, AMDDevice.wait_timeout_s, ...);
- the working directory, numpy's floating-point error handling (np.seterr), torch's default dtype and grad mode.
What is put back without failing: the random generators (numpy's, `random`'s, torch's, Tensor's `_seed` and
`_rng_counter`): drawing a number changes them as seeding does, so a change cannot tell use from a leak; each test
starts from the generators' state before it instead, whatever ran before it in its process.

A test changes any of these for itself with monkeypatch (its undo runs before the check: the check's fixture is set
up first, so it is torn down last), a fixture that puts the old value back, or try/finally.
"""
from __future__ import annotations
import os, random, sys
from typing import Any

PACKAGES = ("frontend", "compiler", "hcqrt")   # (ioctl_defs: ABI numbers only, thousands of them, none a setting)
# classes whose attributes are statistics every realize updates (tests reset them before they read them), not settings
STATISTICS = {"frontend.buffer.GlobalCounters"}
# environment variables set by others than the tests, left as they are: pytest's name of the running test, and the cache
# directory torch writes into os.environ on its first optimizer step (torch/_inductor/runtime/cache_dir_utils.py:19,
# torch 2.13), which the first test to use torch.optim would be blamed for
NOT_THE_TESTS_ENV = {"PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR"}
SCALARS = (bool, int, float, str, bytes, type(None))
_MISSING = object()

def _is_knob(name: str) -> bool: return name[:1].isalpha() and name.isupper()
def _is_class_setting(name: str, value: Any) -> bool: return not name.startswith("_") and isinstance(value, SCALARS)

class _Knobs:
  """The (owner, name) pairs of the module globals and class attributes checked, found once per module (looked for
  again when sys.modules grew): a snapshot then reads ~2000 attributes, not every module's namespace."""
  def __init__(self): self.seen, self.nmodules = {}, 0
  def pairs(self) -> list[tuple[Any, str]]:
    if len(sys.modules) != self.nmodules:
      self.nmodules = len(sys.modules)
      for mname, mod in list(sys.modules.items()):
        if mname.split(".")[0] not in PACKAGES or mod is None or (mname in self.seen and self.seen[mname][0] is mod): continue
        found: list[tuple[Any, str]] = []
        for name, value in list(vars(mod).items()):
          if _is_knob(name) and not isinstance(value, type(os)): found.append((mod, name))
          elif isinstance(value, type) and value.__module__ == mname and f"{mname}.{value.__qualname__}" not in STATISTICS:   # a class defined here (not an import of one)
            found += [(value, n) for n, v in list(vars(value).items()) if _is_class_setting(n, v)]
        self.seen[mname] = (mod, found)
      self.all = [p for _, ps in self.seen.values() for p in ps]
    return self.all
_knobs = _Knobs()

def _label(owner: Any, name: str) -> str:
  return f"{owner.__name__}.{name}" if isinstance(owner, type(os)) else f"{owner.__module__}.{owner.__qualname__}.{name}"

def _registry():
  return sys.modules["hcqrt.device"].Device if "hcqrt.device" in sys.modules else None

def snapshot() -> dict[str, Any]:
  """The checked state now: label -> value (module globals and class attributes by (owner, name))."""
  snap: dict[str, Any] = {"os.environ": dict(os.environ)}
  if (reg := _registry()) is not None:
    snap["Device.DEFAULT"] = reg._default
    snap["Device opened"] = dict(reg._opened)
    own = [id(d) for d in reg._mocks.values()]
    sc = sys.modules.get("hcqrt.syscalls")
    snap["syscalls drivers"] = [d for d in sc._drivers if id(d) not in own] if sc is not None else []
  snap["other"] = _other()
  snap["knobs"] = {(owner, name): vars(owner).get(name, _MISSING) for owner, name in _knobs.pairs()}
  return snap

def _other() -> dict[str, Any]:
  """The process's working directory, numpy's floating-point error handling and torch's defaults (the tests' oracle)."""
  import numpy as np
  out = {"os.getcwd()": os.getcwd(), "numpy.geterr()": np.geterr()}
  if (torch := sys.modules.get("torch")) is not None and hasattr(torch, "get_default_dtype"):
    out |= {"torch.get_default_dtype()": torch.get_default_dtype(), "torch.is_grad_enabled()": torch.is_grad_enabled()}
  return out

def _set_other(what: str, value: Any) -> None:
  import numpy as np
  torch = sys.modules.get("torch")
  {"os.getcwd()": os.chdir, "numpy.geterr()": lambda v: np.seterr(**v), "torch.get_default_dtype()": lambda v: torch.set_default_dtype(v),
   "torch.is_grad_enabled()": lambda v: torch.set_grad_enabled(v)}[what](value)

def _same(a: Any, b: Any) -> bool: return a is b or (type(a) is type(b) and isinstance(a, SCALARS) and a == b)
def _short(v: Any) -> str:
  s = "(unset)" if v is _MISSING else repr(v)
  return s if len(s) <= 80 else s[:77] + "..."

def changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
  """What differs from `before` in `after`, each as 'what: old -> new'. A default the registry chose lazily meanwhile
  (None -> what `_choose()` picks now) is no change."""
  out = []
  eb, ea = before["os.environ"], after["os.environ"]
  if eb != ea:
    out += [f"os.environ[{k!r}]: {_short(eb.get(k, _MISSING))} -> {_short(ea.get(k, _MISSING))}"
            for k in sorted(eb.keys() | ea.keys()) if k not in NOT_THE_TESTS_ENV and eb.get(k) != ea.get(k)]
  if "Device.DEFAULT" in before and "Device.DEFAULT" in after:
    db, da = before["Device.DEFAULT"], after["Device.DEFAULT"]
    if db != da and not (db is None and da == _registry()._choose()): out.append(f"Device.DEFAULT: {db!r} -> {da!r}")
    ob, oa = before["Device opened"], after["Device opened"]
    out += [f"Device opened[{k!r}]: {_short(v)} -> {_short(oa.get(k, _MISSING))}" for k, v in ob.items() if oa.get(k) is not v]
    if (fb := before["syscalls drivers"]) != (fa := after["syscalls drivers"]):
      out.append(f"hcqrt.syscalls._drivers (besides the registry's mocks): {_short(fb)} -> {_short(fa)}")
  ob, oa = before["other"], after["other"]
  out += [f"{k}: {_short(v)} -> {_short(oa[k])}" for k, v in ob.items() if k in oa and v != oa[k]]
  kb, ka = before["knobs"], after["knobs"]
  out += [f"{_label(*k)}: {_short(v)} -> {_short(ka[k])}" for k, v in kb.items() if k in ka and not _same(v, ka[k])]
  return out

def restore(before: dict[str, Any], after: dict[str, Any]) -> None:
  """Put back what `changes(before, after)` names, so the next test starts as this one did."""
  eb, ea = before["os.environ"], after["os.environ"]
  for k in ea.keys() - eb.keys():
    if k not in NOT_THE_TESTS_ENV: del os.environ[k]
  for k, v in eb.items():
    if ea.get(k) != v and k not in NOT_THE_TESTS_ENV: os.environ[k] = v
  if (reg := _registry()) is not None and "Device.DEFAULT" in before:
    if before["Device.DEFAULT"] is not None: reg._default = before["Device.DEFAULT"]
    elif reg._default is not None and reg._default != reg._choose(): reg._default = None
    for k, v in before["Device opened"].items(): reg._opened[k] = v
    drivers = sys.modules["hcqrt.syscalls"]._drivers if "hcqrt.syscalls" in sys.modules else []
    for d in [d for d in after["syscalls drivers"] if not any(d is b for b in before["syscalls drivers"])]: drivers.remove(d)
  for k, v in before["other"].items():
    if k in after["other"] and v != after["other"][k]: _set_other(k, v)
  ka = after["knobs"]
  for (owner, name), v in before["knobs"].items():
    if (owner, name) in ka and not _same(v, ka[(owner, name)]):
      if v is _MISSING: delattr(owner, name)
      else: setattr(owner, name, v)

def revert(before: dict[str, Any]) -> list[str]:
  """What changed since the snapshot `before` (`changes`), put back (`restore`)."""
  after = snapshot()
  if changed := changes(before, after): restore(before, after)
  return changed

def rng_state() -> tuple:
  """The random generators' states (numpy's, random's, torch's where imported, Tensor's seed and counters)."""
  import numpy as np
  t = sys.modules.get("frontend.tensor")
  torch = sys.modules.get("torch")
  return (np.random.get_state(), random.getstate(), torch.random.get_rng_state() if torch is not None and hasattr(torch, "random") else None,
          (t.Tensor._seed, t.Tensor._rng_counter, not t.Tensor._rng_counter) if t is not None else None)

def restore_rng(state: tuple) -> None:
  """Put the generators back as `rng_state()` saw them. Tensor's per-device counters are device buffers that a draw
  advances in place: where the test drew any, the counters start again from a new, empty table (as after
  `Tensor.manual_seed`), which draws what the first test of a process draws."""
  import numpy as np
  np.random.set_state(state[0]); random.setstate(state[1])
  if state[2] is not None and (torch := sys.modules.get("torch")) is not None: torch.random.set_rng_state(state[2])
  if state[3] is not None and (t := sys.modules.get("frontend.tensor")) is not None:
    seed, table, empty = state[3]
    if t.Tensor._seed != seed or t.Tensor._rng_counter is not table or (empty and t.Tensor._rng_counter):
      t.Tensor._seed, t.Tensor._rng_counter = seed, {}
