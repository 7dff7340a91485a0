"""Shared test fixtures."""
import pytest
import state_guard

# ***** no test leaves process-global state changed for the tests after it (tests/state_guard.py says what and why) *****
# These two fixtures come first among the autouse ones of their scope, so they are set up before any other fixture of
# a test (monkeypatch, on_cpu, a module's own) and torn down after all of them: what those undo is undone by then.

@pytest.fixture(autouse=True, scope="module")
def _module_leaves_global_state_as_found(request):
  """Fails the module's last test at teardown where the module's module- or class-scoped fixtures (or a session-scoped
  one first set up in it that changes global state for everyone after) left global state changed; puts it back."""
  before = state_guard.snapshot()
  yield
  if changed := state_guard.revert(before):
    pytest.fail(f"{request.node.nodeid}: its module/class-scoped fixtures left global state changed (now put back):\n  " + "\n  ".join(changed), pytrace=False)

@pytest.fixture(autouse=True)
def _test_leaves_global_state_as_found(request):
  """Fails the test at teardown where it (or one of its function-scoped fixtures) left global state changed, naming
  what (old -> new); puts it back. The random generators are put back without failing (state_guard.restore_rng)."""
  before, rng = state_guard.snapshot(), state_guard.rng_state()
  yield
  state_guard.restore_rng(rng)
  if changed := state_guard.revert(before):
    pytest.fail(f"{request.node.nodeid} left global state changed (now put back; use monkeypatch or try/finally):\n  " + "\n  ".join(changed), pytrace=False)

@pytest.fixture(autouse=True)
def _mock_kfd_processes_end_with_their_test():
  """Each mock KFD a test makes stands for a process of its own, which ends with the test: `MockKFD.exit` frees what
  the kernel frees when a process ends (its BOs, their memfds), which closing the device files never does (MockKFD.close).
  The registry's mocks (MOCKGPU=1) serve the whole session and stay; so do those made before the test."""
  import sys
  before = {id(d) for d in kfd.MockKFD.alive} if (kfd := sys.modules.get("hcqrt.mock.amd.kfd")) else set()
  yield
  if (kfd := sys.modules.get("hcqrt.mock.amd.kfd")) is None: return   # (no mock was made)
  from hcqrt.device import Device
  keep = before | {id(d) for d in Device._mocks.values()}
  for drv in [d for d in kfd.MockKFD.alive if id(d) not in keep]: drv.exit()

# The README's test command runs the suite with `-n auto --dist loadfile` (pytest-xdist): a worker a core, each test file
# in one worker (a file's last test may read what its others compiled: test_amdemu.py). Past 8 workers a big box gains
# little (the longest files set the wall time) while every worker holds torch and its own kernel caches (~1 GB).
# `--max-worker-restart 0`: a worker that crashes ends the run, naming the test it ran; pytest-xdist 3.8 replacing it
# under loadfile can hang for good (pytest-xdist issues #784, #1378: its finished files are queued again, empty).
AUTO_WORKERS_MAX = 8

@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
  """How many workers `-n auto` starts: the cores this process may run on, at most AUTO_WORKERS_MAX."""
  import os
  return max(1, min(AUTO_WORKERS_MAX, len(os.sched_getaffinity(0))))

@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
  """A test module whose import (its module-level code) changes global state fails to collect: that change would hold
  for every test collected after it in the process, which under xdist is every test of the worker."""
  if not isinstance(collector, pytest.Module): return (yield)
  before = state_guard.snapshot()
  report = yield
  if changed := state_guard.revert(before):
    report.outcome, report.result = "failed", []
    report.longrepr = f"importing {collector.nodeid} changed global state (now put back):\n  " + "\n  ".join(changed)
  return report

@pytest.fixture(scope="module")
def gc_walks_only_this_modules_objects():
  """For a module whose tests drop an object and gc.collect() to run its finalizer there: a full collection walks every
  object of the process, and an xdist worker that ran hundreds of test files holds millions (torch, kernel caches,
  compiled programs), about a second a collect on the CI host under load. Collect once, then gc.freeze() what is alive
  (CPython keeps it in a permanent generation that no collection walks) until the module ends: a test's collect then
  walks only what the module's tests made, and frees the same garbage as before, since every object these tests drop
  is made in the module. (Garbage from before the module is freed by the one collect here, not left behind.)"""
  import gc
  gc.collect(); gc.freeze()
  try: yield
  finally: gc.unfreeze()

@pytest.fixture
def on_cpu():
  """Keep every tensor of the test on the CPU, also under MOCKGPU=1 NV=1: for tests of C code generation and of
  CPU-only opts (BEAM timing C candidates, vector tiles, loop peeling checked in the C source)."""
  from frontend import Device
  old, Device.DEFAULT = Device.DEFAULT, "CPU"
  yield
  Device.DEFAULT = old

# The CPU targets every structure test of the opts runs for, on any host: AVX2 (16 registers of 8 floats) and AVX-512
# (32 of 16). Their kernels are built and inspected everywhere; tests execute them only where the host can
# (`cpu_target.isa_info.runnable`).
CPU_TARGETS = ("x86-64-v3", "x86-64-v4")

@pytest.fixture(params=CPU_TARGETS)
def cpu_target(request):
  """The compile Target of a CPU device for each ISA (hcqrt/cpu/isa.py): its simd_bytes, vector_registers and cc_flags."""
  return cpu_target_for(request.param)

# Core counts the structure tests build for besides the host's: the GPU boxes users run this stack on have 16-128 cores,
# where the thread split (compiler/opt/heuristic.py thread_axis) takes other loops than on a 2-core CI host, and the
# opts after it (peel, tile rows) see another kernel. The Target is the host's report with ncores replaced (the host is
# not faked: kernels are only built for it), so a heuristic that spills or loses a peel at 16 cores fails here too.
MANY_CORES = (16, 64)

def cpu_target_for(isa: str, ncores: int | None = None):
  """The compile Target of a CPU device of ISA `isa` with `ncores` cores (None: the host's count, at least 2: the
  structure tests describe kernels split across cores, which a 1-core host builds too, for a 2-core target; its own
  kernels run unsplit)."""
  from hcqrt.cpu.device import CPUDevice
  from compiler.target import Target
  report = CPUDevice(isa=isa).target
  return Target.from_report({**report, "ncores": max(2, report["ncores"]) if ncores is None else ncores})

@pytest.fixture(params=[(isa, n) for isa in CPU_TARGETS for n in (None, *MANY_CORES)], ids=lambda p: f"{p[0]}-{p[1] or 'host'}c")
def cpu_target_cores(request):
  """cpu_target for each ISA on this host's cores and on MANY_CORES cores (16, 64): for the structure tests whose
  kernels' shape depends on the cores (a thread split over a loop the peel or the tile also wants)."""
  return cpu_target_for(*request.param)

def host_runs(target) -> bool:
  """Whether this host can execute kernels built for CPU `target` (its ISA's features are all present)."""
  from hcqrt.cpu.isa import cpu_isa
  return cpu_isa(target.arch).runnable

# (.ci/run allows exactly the skips with this reason on a CI machine without AVX-512: keep the words in step with it)
def skip_unless_host_runs(target) -> None:
  """Skip the test where this host can't execute kernels built for CPU `target` (an AVX-512 target on an AVX2 host)."""
  if not host_runs(target): pytest.skip(f"this host can't run {target.arch} kernels")

@pytest.fixture(autouse=True, scope="session")
def _short_gpu_waits_on_the_amd_mock():
  """On `MOCKGPU=1 AMD=1` the mock runs each dispatch when its doorbell rings, so a wait that lasts seconds means
  stuck work: time out after 10 s (not 30) so the device recovers and one broken kernel fails one test, quickly."""
  import os
  if not (os.environ.get("MOCKGPU") and os.environ.get("AMD")): yield; return
  from hcqrt import hcq
  from hcqrt.amd.device import AMDDevice
  old = hcq.DEFAULT_TIMEOUT_S, AMDDevice.wait_timeout_s
  hcq.DEFAULT_TIMEOUT_S = AMDDevice.wait_timeout_s = 10.0
  yield
  hcq.DEFAULT_TIMEOUT_S, AMDDevice.wait_timeout_s = old

def registry_on_mock(name: str):
  """(device, driver): the registry's `name` ("NV" / "AMD") device, opened through its mock driver (MOCKGPU=1 for the
  open), for tests of the mock's behaviour (its doorbell counts, latency, injected faults). Where the registry already
  holds `name` open on this machine's real driver (the suite under NV=1 on a GPU box, where the default device is the
  GPU), those tests skip saying so; anywhere else a device not on its mock fails them. CI has no GPU device file, so
  it cannot skip there (and .ci/run fails on any skip in its full run)."""
  import os
  from hcqrt import syscalls
  from hcqrt.device import Device, PROBE_FILES
  old = os.environ.get("MOCKGPU")
  os.environ["MOCKGPU"] = "1"   # the registry opens the device through its mock driver (no-op if it is already open)
  try: dev = Device[name]
  finally:
    if old is None: del os.environ["MOCKGPU"]
    else: os.environ["MOCKGPU"] = old
  if (drv := syscalls.driver_of(dev.ctl if name == "NV" else dev.kfd)) is not None: return dev, drv
  real = dict(PROBE_FILES)[name]
  if os.path.exists(real):
    pytest.skip(f"{name} is open on this machine's GPU ({real}), not on its mock driver: these tests check the mock's behaviour "
                f"(they get the mock where nothing opened {name} before them, e.g. CPU=1 python -m pytest <this file>)")
  raise AssertionError(f"these tests need {name} on its mock driver, and the registry's {name} is not on it")

def mock_nv_device(arch: str | None = None):
  """A fresh NVDevice on its own mock driver (`dev.drv`), removed again on exit: the tests' per-test NV fixtures.
  A refused launch leaves its channel in an error state, as on hardware, so tests that break one get their own."""
  import contextlib
  from hcqrt import syscalls
  from hcqrt.mock.nv import MockNV
  from hcqrt.nv.device import NVDevice
  @contextlib.contextmanager
  def cm():
    with syscalls.installed(MockNV() if arch is None else MockNV(arch=arch)) as drv:
      dev = NVDevice("NV")
      dev.drv = drv
      yield dev
  return cm()

@pytest.fixture
def fresh_schedule_cache(monkeypatch):
  """An empty, enabled schedule cache (compiler/schedule.py) for the test, with its counters at 0."""
  from compiler import schedule as S
  monkeypatch.setattr(S, "_schedule_cache", {})
  monkeypatch.setattr(S, "cache_stats", {"hits": 0, "misses": 0})
  monkeypatch.setattr(S, "SCHEDULE_CACHE", True)
  monkeypatch.setattr(S, "_cached_nodes", 0)

def record_graph_keys(monkeypatch) -> list:
  """From now on, append every schedule-cache key built (compiler/schedule.py _GraphKey.extend) to the returned list;
  a later call starts a new list (keys then go to that one only)."""
  from compiler import schedule as S
  real = getattr(S._GraphKey.extend, "unrecorded", S._GraphKey.extend)
  keys: list = []
  def extend(self, outs):
    real(self, outs)
    keys.append(self.key)
  extend.unrecorded = real   # type: ignore[attr-defined]
  monkeypatch.setattr(S._GraphKey, "extend", extend)
  return keys
