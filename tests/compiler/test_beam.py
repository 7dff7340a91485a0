"""BEAM search: finds a correct kernel, caches it on disk (the second search builds and times nothing, and the engine
then runs no C compiler), never returns a candidate whose output differs from the heuristic kernel's, keeps the
heuristic for kernels too fast to search, and stays within its bounds (candidates per round, rounds, time budget)."""
import json
import numpy as np
import pytest
from frontend import Tensor
import frontend.engine as engine
from frontend.devices import open_device, target_of
from frontend.beam_runner import beam_runner
from compiler.schedule import create_schedule
from compiler.lower import lower
from compiler import beam
from compiler.beam import beam_search, cache_key, cache_path

DEV = open_device("CPU")
DI = target_of("CPU")

@pytest.fixture(autouse=True)
def on_cpu():
  """These tests time C candidates on the CPU: keep every tensor there, also under MOCKGPU=1 NV=1."""
  from frontend import Device
  old, Device.DEFAULT = Device.DEFAULT, "CPU"
  yield
  Device.DEFAULT = old

@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv("HCQRT_CACHE", str(tmp_path))
  return tmp_path

def mm_kernel(n: int = 32):
  a, b = (Tensor(np.zeros((n, n), np.float32)).realize() for _ in range(2))
  return [si for si in create_schedule([(a @ b).lazydata]) if si.kind == "kernel"][-1]

def test_beam_search_caches_its_winner(cache):
  si = mm_kernel()
  run = beam_runner(si, DEV)
  st: dict = {}
  k = beam_search(lower(si.ast, si.name), DI, run, 2, stats=st, max_depth=2, min_s=0, budget_s=1e9)
  assert not st["cache_hit"] and st["built"] > 4 and st["timed"] > 4
  entry = json.loads(cache_path(cache_key(lower(si.ast, si.name), DI, 2)).read_text())
  assert entry["opts"] == (None if st["best_opts"] is None else [o.to_json() for o in st["best_opts"]])
  def no_run(b): raise AssertionError("the second search must not time anything")
  st2: dict = {}
  k2 = beam_search(lower(si.ast, si.name), DI, no_run, 2, stats=st2)
  assert st2["cache_hit"] and st2["built"] == 0 and st2["best_opts"] == st["best_opts"]
  assert k2 == k

def test_wrong_candidates_are_never_chosen(cache):
  """Every candidate but the heuristic's kernel returns wrong outputs and looks 100x faster: none may win (nor be
  expanded), the heuristic is kept."""
  si = mm_kernel()
  real = beam_runner(si, DEV)
  def run(b):
    t, out = real(b)
    if b.opts is not None: return t / 100, [out[0] + 1.0]
    return t, out
  st: dict = {}
  assert beam_search(lower(si.ast, si.name), DI, run, 2, stats=st, max_depth=2, min_s=0, budget_s=1e9) is None
  assert st["wrong"] > 0 and st["best_opts"] is None and st["rounds"] <= 1

def test_stale_cache_entry_is_searched_again(cache):
  si = mm_kernel(16)
  k = lower(si.ast, si.name)
  p = cache_path(cache_key(k, DI, 1))
  p.parent.mkdir(parents=True)
  p.write_text(json.dumps({"opts": [["UPCAST", 0, 5]]}))   # not legal on a 16x16 kernel
  st: dict = {}
  beam_search(k, DI, beam_runner(si, DEV), 1, stats=st, max_depth=1, min_s=0)
  assert not st["cache_hit"] and st["built"] > 0

def test_cache_key_depends_on_kernel_and_device():
  k1, k2 = lower(mm_kernel(16).ast), lower(mm_kernel(32).ast)
  assert cache_key(k1, DI, 2) == cache_key(lower(mm_kernel(16).ast), DI, 2)
  assert len({cache_key(k1, DI, 2), cache_key(k2, DI, 2), cache_key(k1, DI, 3),
              cache_key(k1, DI.replace(simd_bytes=DI.simd_bytes // 2), 2)}) == 4

def test_engine_beam_second_run_compiles_and_searches_nothing(cache, monkeypatch):
  monkeypatch.setenv("BEAM", "1")
  monkeypatch.setattr(beam, "MAX_DEPTH", 2)
  x = np.random.default_rng(3).standard_normal((24, 40)).astype(np.float32)
  y = np.random.default_rng(4).standard_normal((40, 16)).astype(np.float32)
  engine._kernel_cache.clear()   # a kernel another test built under BEAM=1 would skip this run's search
  np.testing.assert_allclose((Tensor(x) @ Tensor(y)).numpy(), x @ y, rtol=1e-4, atol=1e-4)
  assert list((cache / "beam").glob("*.json"))
  engine._kernel_cache.clear()
  def fail(*a, **kw): raise AssertionError("nothing may be built on the second run")
  monkeypatch.setattr(beam, "build", fail)
  import compiler.assemble.c_compiler as cc
  monkeypatch.setattr(cc.subprocess, "run", fail)   # the objects come from the disk cache
  np.testing.assert_allclose((Tensor(x) @ Tensor(y)).numpy(), x @ y, rtol=1e-4, atol=1e-4)

def test_fast_kernels_keep_the_heuristic_and_cache_that(cache):
  """A kernel the heuristic runs faster than min_s is not searched: one build (the heuristic's), result None (the
  pipeline then applies the default opts), and the cache remembers it: the next search runs nothing."""
  si = mm_kernel(16)
  st: dict = {}
  assert beam_search(lower(si.ast, si.name), DI, beam_runner(si, DEV), 2, stats=st, min_s=10.0) is None
  assert st["skipped"] and st["built"] == 1 and st["best_opts"] is None
  assert json.loads(cache_path(cache_key(lower(si.ast, si.name), DI, 2)).read_text())["opts"] is None
  def no_run(b): raise AssertionError("a cached 'keep the heuristic' must not time anything")
  st2: dict = {}
  assert beam_search(lower(si.ast, si.name), DI, no_run, 2, stats=st2, min_s=10.0) is None
  assert st2["cache_hit"] and st2["built"] == 0

def test_search_is_bounded(cache):
  """At most max_candidates compiled per round, at most max_depth rounds; with no time budget only the baseline and
  the seeds are built and nothing after them is timed."""
  si = mm_kernel(32)
  st: dict = {}
  beam_search(lower(si.ast, si.name), DI, beam_runner(si, DEV), 2, stats=st, max_depth=2, min_s=0, budget_s=1e9, max_candidates=3)
  assert 1 <= st["rounds"] <= 2 and st["built"] <= 1 + 2 + 3 * st["rounds"] and st["timed"] <= st["built"]
  assert st["offered"] > st["built"]   # more candidates than the cap: the cap did bound the compiles
  st2: dict = {}
  beam_search(lower(si.ast, si.name), DI, beam_runner(si, DEV), 2, stats=st2, use_cache=False, min_s=0, budget_s=0.0)
  assert st2["rounds"] == 0 and st2["timed"] == 1 and st2["built"] <= 3   # the baseline timed; the seeds past the budget

def test_interleave_lets_kinds_take_turns():
  from compiler.opt.base import Opt
  seqs = [(0, (Opt("UPCAST", 0, a),)) for a in (2, 4, 8)] + [(0, (Opt("UNROLL", 0, 2),)), (1, (Opt("SWAP", 0, 1),))]
  kinds = [s[-1].kind.value for s in beam.interleave(seqs)]
  assert kinds[:3] == ["UPCAST", "UNROLL", "SWAP"] and kinds[3:] == ["UPCAST", "UPCAST"]

class _Recording:
  """A device whose programs and output copies are logged in order (the real CPU device underneath)."""
  def __init__(self, dev):
    self.dev, self.log = dev, []
    rec, alloc = self, dev.allocator
    class Alloc:
      def copyin(self, dst, src): rec.log.append("copyin"); alloc.copyin(dst, src)
      def __getattr__(self, name): return getattr(alloc, name)
    self.allocator = Alloc()
  def program(self, name, binary):
    prog = self.dev.program(name, binary)
    def launch(*a, **kw):
      self.log.append("launch")
      return prog(*a, **kw)
    return launch

def test_runner_launches_once_untimed_right_before_the_timed_launch():
  """The Python work between two timed launches (NaN garbage into the outputs, outputs copied out) outlasts the worker
  threads' spin: the runner launches once untimed after the garbage copy, so the timed launch finds the workers awake.
  The outputs still come out right (each launch writes every element), and warm=False launches once."""
  x = np.random.default_rng(0).standard_normal((16, 24)).astype(np.float32)
  si = [s for s in create_schedule([(Tensor(x).realize() * 2 + 1).lazydata]) if s.kind == "kernel"][-1]
  b = beam.build(lower(si.ast, si.name), None, DI)
  for warm, launches in ((True, ["launch", "launch"]), (False, ["launch"])):
    dev = _Recording(DEV)
    run = beam_runner(si, dev) if warm else beam_runner(si, dev, warm=False)   # (warm by default)
    run(b)   # (the first run also fills the inputs)
    dev.log.clear()
    t, outs = run(b)
    run.release()
    assert dev.log == ["copyin"] + launches and t > 0
    np.testing.assert_allclose(outs[0].reshape(x.shape), x * 2 + 1, rtol=1e-6)
  # a kernel that writes nothing leaves the NaN garbage in place, warm launch or not (so BEAM sees an unwritten element)
  class Lazy(_Recording):
    def program(self, name, binary): return lambda *a, **kw: 1e-6
  run = beam_runner(si, Lazy(DEV))
  outs = run(b)[1]
  run.release()
  assert np.isnan(outs[0]).all()

def test_runner_runs_each_candidate_s_own_code_when_ids_are_reused():
  """Candidates are temporaries: one freed after its run leaves its id to the next. The runner's programs are keyed by
  the candidate's code, so a kernel cut for one core never runs the code cut for two (which, launched on one core,
  leaves the second core's half of the outputs as NaN garbage)."""
  import dataclasses
  x = np.random.default_rng(0).standard_normal((64, 64, 32)).astype(np.float32)
  si = [s for s in create_schedule([(Tensor(x).realize() * 2 + 1).lazydata]) if s.kind == "kernel"][-1]
  two = dataclasses.replace(DI, ncores=2)
  run, ids = beam_runner(si, DEV), []
  try:
    for _ in range(20):
      for opts in ((beam.Opt("THREAD", 0),), ()):
        b = beam.build(lower(si.ast, si.name), opts, two)
        assert b.launch.threads == (2 if opts else 1)
        ids.append(id(b))
        outs = run(b)[1]
        del b
        np.testing.assert_allclose(outs[0].reshape(x.shape), x * 2 + 1, rtol=1e-6)
  finally: run.release()

def test_confirm_accepts_a_steady_small_gain_and_rejects_noise():
  """confirm's rule on scripted times (no clock): a steady 3% gain wins; equal speeds whose runs interleave don't, nor
  does a winner that was fast once (one lucky run, also after the second round of runs it earns); a 30% gain on runs
  spread by load still wins; a 3% gain with two of its first 7 runs slowed by load wins in the second round; the
  order of the runs alternates."""
  def script(tw, tb):
    it, order = {"w": iter(tw), "b": iter(tb)}, []
    def run(b):
      order.append(b)
      return next(it[b]), []
    return run, order
  steady = [100.0, 100.4, 100.2, 100.6, 100.1, 100.3, 100.5]
  run, order = script([t * 0.97 for t in steady], steady)
  won, tw, tb = beam.confirm(run, "w", "b")
  assert won and len(tw) == len(tb) == 7 and order[:4] == ["w", "b", "b", "w"]
  same_w, same_b = [100.0, 101.5, 100.2, 102.0, 100.9, 101.1, 100.4], [100.6, 100.1, 101.8, 100.3, 101.2, 100.8, 102.2]
  won, tw, _ = beam.confirm(script(same_w, same_b)[0], "w", "b")
  assert not won and len(tw) == 7   # (not even its fastest run 2% ahead: no second round)
  won, tw, _ = beam.confirm(script([90.0] + steady[1:] + steady, steady * 2)[0], "w", "b")
  assert not won and len(tw) == 14   # one fast run: noise, also after 7 more runs
  loaded_b = [100.0, 130.0, 104.0, 160.0, 101.0, 120.0, 102.0]
  assert beam.confirm(script([70.0, 95.0, 71.0, 140.0, 72.0, 90.0, 75.0], loaded_b)[0], "w", "b")[0]
  slowed = [97.0, 150.0, 97.2, 97.1, 130.0, 97.3, 97.0] + [97.1, 97.0, 97.2, 97.0, 97.3, 97.1, 97.0]
  won, tw, _ = beam.confirm(script(slowed, steady * 2)[0], "w", "b")
  assert won and len(tw) == 14

@pytest.mark.parametrize("ratio, wins", [(0.97, True), (0.99, False)])
def test_search_takes_a_steady_small_gain_only_past_small_gain(cache, ratio, wins):
  """With steady timings (scripted: the heuristic 100 us, one candidate `ratio` of it, the rest 2x), the search keeps a
  3% gain (below SMALL_GAIN) and drops a 1% one."""
  si = mm_kernel(32)
  real = beam_runner(si, DEV)
  fast: list = []
  def run(b):
    _, outs = real(b)
    if b.opts is not None and not fast: fast.append(b.opts)
    return (100e-6 if b.opts is None else ratio * 100e-6 if b.opts == fast[0] else 200e-6), outs
  st: dict = {}
  got = beam_search(lower(si.ast, si.name), DI, run, 2, stats=st, max_depth=1, min_s=0, budget_s=1e9)
  real.release()
  assert (got == fast[0]) if wins else got is None
  assert st["confirm"] if wins else True

def test_default_threshold_searches_kernels_of_ten_microseconds(monkeypatch):
  """Kernels of 10-100 us are half a small model's step: searched by default; BEAM_MIN_US still overrides."""
  monkeypatch.delenv("BEAM_MIN_US", raising=False)
  assert beam.min_seconds() == pytest.approx(10e-6)
  monkeypatch.setenv("BEAM_MIN_US", "250")
  assert beam.min_seconds() == pytest.approx(250e-6)

# ***** the worker pool never hangs the search *****

STRESS = r"""
import queue, sys, threading, warnings
import numpy as np
warnings.simplefilter("error")   # a fallback to the default opts (a worker that hung or died) fails this run too
from frontend import Tensor, Device
from frontend.devices import open_device, target_of
from frontend.beam_runner import beam_runner
from compiler.schedule import create_schedule
from compiler.lower import lower
from compiler.beam import beam_search
Device.DEFAULT = "CPU"
stop = threading.Event()
def churn():   # threads that hold locks all the time (a queue's, the GIL's, stderr's): what a fork copies held
  q = queue.Queue()
  while not stop.is_set(): q.put(np.ones(64).sum()); q.get(); print(end="", file=sys.stderr, flush=True)
threads = [threading.Thread(target=churn, daemon=True) for _ in range(2)]
for t in threads: t.start()
a, b = (Tensor(np.ones((32, 32), np.float32)).realize() for _ in range(2))
si = [si for si in create_schedule([(a @ b).lazydata]) if si.kind == "kernel"][-1]
dev, di = open_device("CPU"), target_of("CPU")
for i in range(SEARCHES):   # in turns: a whole round, a budget spent before the seeds (all jobs dropped), one spent mid-way
  st, budget = {}, (1e9, 0.0, 0.02)[i % 3]
  beam_search(lower(si.ast, si.name), di, beam_runner(si, dev), 2, stats=st, use_cache=False, min_s=0, budget_s=budget, max_depth=1, max_candidates=2)
  assert "worker_error" not in st and (st["rounds"] == 1 and st["built"] >= 2 if budget > 1 else st["rounds"] <= 1), st
stop.set()
print("searches done:", SEARCHES)
"""

def test_search_never_hangs_with_busy_threads(tmp_path):
  """Repeated searches, some whose budget runs out with jobs still queued, while other threads of the process hold
  locks all the time, all finish with no worker timing out (Python 3.11.2's ProcessPoolExecutor over forked workers
  waited forever in shutdown after such a search, its workers stuck in Queue.get). Run in a child process, so a hang
  fails the test instead of stopping the suite."""
  import os, subprocess, sys
  env = dict(os.environ, HCQRT_CACHE=str(tmp_path), CPU="1")
  p = subprocess.run([sys.executable, "-c", STRESS.replace("SEARCHES", "6")], capture_output=True, text=True, timeout=150, env=env)
  assert p.returncode == 0 and "searches done: 6" in p.stdout, p.stderr[-3000:]

def test_a_worker_that_never_answers_ends_the_wait():
  """A job with no answer raises WorkerError after the pool's job timeout, and the workers are gone."""
  from compiler.beam_pool import WorkerPool, WorkerError
  pool = WorkerPool(2, "compiler.beam_pool:echo", "x", job_timeout_s=2.0)
  procs = list(pool.procs)
  with pytest.raises(WorkerError, match="gave no answer to compiler.beam_pool:echo"):
    with pool: pool.map("compiler.beam_pool:echo", [1, "sleep", 2])
  assert all(p.poll() is not None for p in procs)

def test_a_dead_worker_ends_the_wait():
  from compiler.beam_pool import WorkerPool, WorkerError
  with pytest.raises(WorkerError, match="exited"), WorkerPool(1, "compiler.beam_pool:echo", "x", job_timeout_s=60) as pool:
    pool.map("os:_exit", [3])

def test_worker_failure_keeps_the_default_opts_with_a_warning(cache, monkeypatch):
  """When the pool fails (a hung or dead worker) the search returns None (the default opts), warns, and caches nothing,
  so the next run searches again."""
  from compiler.beam_pool import WorkerError
  class Hung(beam.WorkerPool):
    def map(self, *a, **kw): raise WorkerError("BEAM: compile worker 1 gave no answer")
  monkeypatch.setattr(beam, "WorkerPool", Hung)
  si = mm_kernel(32)
  k, st = lower(si.ast, si.name), {}
  with pytest.warns(RuntimeWarning, match="gave no answer.*keeps the default opts"):
    assert beam_search(k, DI, beam_runner(si, DEV), 2, stats=st, min_s=0, budget_s=1e9) is None
  assert "gave no answer" in st["worker_error"] and not cache_path(cache_key(k, DI, 2)).exists()

def test_pool_works_in_a_process_with_many_files_open():
  """The full suite has over 1024 files open by the time BEAM runs: the pool waits with poll(), which takes any fd
  (select() raised 'filedescriptor out of range')."""
  import os, resource
  from compiler.beam_pool import WorkerPool
  soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
  if soft < 1200: resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
  fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
  try:
    with WorkerPool(1, "compiler.beam_pool:echo", "p", job_timeout_s=60) as pool: assert pool.map("compiler.beam_pool:echo", [1, 2]) == ["p1", "p2"]
  finally:
    for fd in fds: os.close(fd)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
