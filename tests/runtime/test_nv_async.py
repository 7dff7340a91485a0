"""The NV mock in latency mode (`drv.engine.latency_s`): a doorbell only queues the work, the front end runs it later
on its own thread and reads the pushbuffers, QMDs and cbufs as they are then. A graph replay that rewrites its
stream before the previous replay's last release has landed (issue 22, N3) gives wrong results or a hang here. Held
mode (`drv.engine.held()`) is latency mode without the timer: doorbells wait until the test releases them."""
import time
import numpy as np
import pytest
from conftest import mock_nv_device, registry_on_mock
from frontend import Tensor, TinyJit
from hcqrt.hcq import GraphReplay, SignalTimeout
from hcqrt.interface import GraphCopy, GraphExec
from hcqrt.nv.device import NVComputeQueue, SUBC_COMPUTE
from hcqrt.nv.rmclient import NVError
from compiler.assemble.ptx_assembler import assemble_ptx
from hw_tests import kernels as K
from tests.held_gpu import held_until_the_host_waits

@pytest.fixture
def nv():
  with mock_nv_device() as dev: yield dev

def upload(dev, arr):
  b = dev.allocator.alloc(arr.nbytes); dev.allocator.copyin(b, memoryview(arr)); return b
def download(dev, b, n):
  out = np.empty(n, np.float32); dev.allocator.copyout(memoryview(out), b); return out

def rewrites_early(monkeypatch):
  """The mutation issue 22 N3 guards against: GraphReplay.replay without its wait before it rewrites the stream."""
  real = GraphReplay.replay
  def replay(self, *a, **kw):
    self.dev.wait_signal = lambda *_a, **_kw: None   # (instance attribute: only this replay's own waits go)
    try: return real(self, *a, **kw)
    finally: del self.dev.wait_signal
  monkeypatch.setattr(GraphReplay, "replay", replay)

def test_the_doorbell_only_queues_work(nv):
  import time
  nv.drv.engine.latency_s = 0.2
  s = nv.new_signal(0)
  t0 = time.perf_counter()
  nv.hw_compute_queue().signal(s, 1).submit(nv)
  v = s.value
  # not run yet: the host must wait for it (a host stalled past the latency, on a loaded machine, can't tell)
  if time.perf_counter() - t0 < 0.2: assert v == 0
  s.wait(1, 5.0)
  assert s.value == 1

def test_latency_order_picks_which_due_channel_runs_first(nv):
  """gpfifo.py Engine.latency_order (a TSG's channels have no defined order: dev_pbdma.ref.txt:3738-3740, 3811-3816):
  "latest" takes up the last-rung doorbell first, "earliest" the first (the rest later), an int shuffles by seed."""
  e = nv.drv.engine
  assert e._in_order([1, 2, 3]) == [3, 2, 1]
  e.latency_order = "earliest"
  assert e._in_order([1, 2, 3]) == [1, 2, 3]
  e.latency_order = 7
  got = [e._in_order(list(range(8))) for _ in range(4)]
  assert all(sorted(g) == list(range(8)) for g in got) and len({tuple(g) for g in got}) > 1
  e.latency_order = "bogus"
  with pytest.raises(ValueError, match="latency_order"): e._in_order([1])
  for order in ("earliest", 3):   # the doorbells put off are still taken up: both channels' work completes
    e.latency_order, e.latency_s = order, 0.02
    s, c = nv.new_signal(0), nv.new_signal(0)
    nv.hw_compute_queue().signal(s, 1).submit(nv); nv.hw_copy_queue().signal(c, 1).submit(nv)
    s.wait(1, 5.0); c.wait(1, 5.0)
  e.latency_order, e.latency_s = "latest", 0.0

def test_held_doorbells_run_only_when_released(nv):
  """gpfifo.py GPFIFOEngine.held: a held doorbell is queued, not run, for as long as the hold lasts; leaving the block
  releases it and the front end's thread runs it."""
  e, s = nv.drv.engine, nv.new_signal(0)
  with e.held():
    nv.hw_compute_queue().signal(s, 1).submit(nv)
    time.sleep(0.2)   # (only a broken hold can make this fail: the front end's thread would have run it by now)
    assert s.value == 0 and len(e._queued) == 1
  s.wait(1, 5.0)
  assert e._queued == [] and not e.hold

@pytest.mark.parametrize("order,last", [("latest", 1), ("earliest", 2)])
def test_release_takes_held_doorbells_up_in_latency_order(nv, order, last):
  """Released doorbells follow Engine.latency_order: the compute channel (rung first) writes 1 into s, the copy channel
  (rung second) writes 2; "latest" runs the copy channel first (s ends 1), "earliest" the compute channel (s ends 2).
  release(keep_holding=True) holds the doorbells rung after it again."""
  e = nv.drv.engine
  e.latency_order = order
  s, done = nv.new_signal(0), nv.new_signal(0)
  e.hold = True
  try:
    nv.hw_compute_queue().signal(s, 1).submit(nv); nv.hw_copy_queue().signal(s, 2).submit(nv)
    assert e.release(keep_holding=True) == 2 and e.hold
    s.wait(1, 5.0)
    nv.hw_compute_queue().wait(s, 1).signal(done, 1).submit(nv)   # (held again: taken up by the release below)
    assert len(e._queued) == 1
  finally: e.hold = False   # (ends the hold and releases what it held)
  done.wait(1, 5.0)
  assert s.value == last

def test_a_parked_channel_does_not_run_into_held_work(nv):
  """A channel parked on an acquire when a doorbell on it is held: once the acquire passes it finishes the work taken
  up, and stops at the GP_PUT of its last doorbell taken up (Channel.put_seen), not at USERD's newer one, which the
  host wrote before the held doorbell; the held work runs at release()."""
  e = nv.drv.engine
  gate, a, s = nv.new_signal(0), nv.new_signal(0), nv.new_signal(0)
  nv.hw_compute_queue().wait(gate, 1).signal(a, 1).submit(nv)   # taken up at the doorbell; parks on the acquire
  with e.held():
    nv.hw_compute_queue().signal(s, 1).submit(nv)                # same channel: GP_PUT moves on, the doorbell is held
    gate.value = 1                                                # (a CPU write: the poller resumes the parked channel)
    a.wait(1, 5.0)
    deadline = time.perf_counter() + 5.0
    while not e.idle(): assert time.perf_counter() < deadline, "the channel never went idle"
    assert s.value == 0, "held work ran before release()"
  s.wait(1, 5.0)

def test_held_gpus_are_released_only_when_all_are_idle_at_once(nv):
  """tests/held_gpu.py asks the GPUs idle() one after the other: GPU 0 is idle (parked on an acquire) when asked, then
  GPU 1's last step, landing while GPU 1 is asked, releases what GPU 0 waits for. GPU 1's held work must not be
  released until GPU 0 has run what that unblocked (GPFIFOEngine.steps says something moved while they were asked)."""
  s, log = nv.new_signal(0), []
  class Engine:   # (scripted stand-ins for GPFIFOEngine: the interleaving is the test's, not the scheduler's)
    def __init__(self): self.steps, self.hold, self.runnable = 0, False, False
    def release(self, keep_holding: bool = False) -> int:
      if keep_holding: log.append(("release", g0.runnable)); s.value = 1
      return 0
  g0, g1 = Engine(), Engine()
  def idle0() -> bool:
    if g0.runnable: g0.runnable = False; g0.steps += 1; log.append("GPU 0 ran"); return False   # (as idle() runs it)
    return True
  def idle1() -> bool:
    if not log: g1.steps += 1; g0.runnable = True; log.append("GPU 1 unblocked GPU 0")   # its last release, now
    return True
  g0.idle, g1.idle = idle0, idle1
  drv = type("Drv", (), {"gpus": [type("G", (), {"engine": g})() for g in (g0, g1)]})()
  with held_until_the_host_waits(drv, 1): s.wait(1, 5.0)
  assert log == ["GPU 1 unblocked GPU 0", "GPU 0 ran", ("release", False)]

def test_a_timed_wait_on_held_work_times_out(nv, monkeypatch):
  """A host wait that needs held work does not hang: its timeout raises the runtime's SignalTimeout (naming the signal,
  the value and the last one completed), and the held work is still there to run once released. (The runtime's recovery
  after a timeout rings new channels, whose doorbells the hold would keep too: it is the runtime's part, not tested here.)"""
  monkeypatch.setattr(nv, "recover", lambda: "recovery skipped by the test")
  e, s = nv.drv.engine, nv.new_signal(0)
  with e.held():
    nv.hw_compute_queue().signal(s, 1).submit(nv)
    with pytest.raises(SignalTimeout, match=r"timed out after 0.2 s waiting for .* to reach 1; last completed value is 0"): s.wait(1, 0.2)
  s.wait(1, 5.0)

def test_idle_only_when_nothing_runs_without_held_work(nv, monkeypatch):
  """GPFIFOEngine.idle, which tests/held_gpu.py waits for before it takes held work up: not while a channel waits out
  the stall after a release mid-segment (RELEASE_STALL_S, made long here); yes once the channel is parked on an acquire
  nothing satisfies, with a held doorbell left or not."""
  import hcqrt.mock.nv.gpfifo as G
  e = nv.drv.engine
  gate, s, t, u = (nv.new_signal(0) for _ in range(4))
  monkeypatch.setattr(G, "RELEASE_STALL_S", 60.0)
  nv.hw_compute_queue().signal(s, 1).wait(gate, 1).signal(t, 1).submit(nv)
  assert s.value == 1 and not e.idle()   # stalled after the release of s, before the acquire
  for c in e.channels.values(): c.stall_until = 0.0   # the stall is over: the channel goes on to the acquire and parks
  deadline = time.perf_counter() + 5.0
  while not e.idle(): assert time.perf_counter() < deadline, "the parked channel never counted as idle"
  assert t.value == 0
  with e.held():
    nv.hw_copy_queue().signal(u, 1).submit(nv)
    assert e.idle() and u.value == 0
  u.wait(1, 5.0)
  gate.value = 1   # (a CPU write the parked acquire sees: the channel finishes)
  t.wait(1, 5.0)

def test_the_front_end_reads_the_pushbuffer_when_it_runs(nv):
  """The harmful reading of a late fetch: a pushbuffer rewritten after the doorbell runs as rewritten."""
  nv.drv.engine.latency_s = 0.05
  s = nv.new_signal(0)
  q = nv.hw_compute_queue().signal(s, 5)
  q.bind(nv); q.submit(nv)
  q.update_signal(0, value=9)   # before the GPU got to it
  s.wait(9, 5.0)
  assert s.value == 9

def test_a_fault_found_later_is_reported_by_the_wait(nv):
  """The doorbell returns before the front end sees the bad method; RM's error notifier (Xid 13) reports it to the waiter."""
  nv.drv.engine.latency_s = 0.05
  s = nv.new_signal(0)
  q = NVComputeQueue(); q.method(SUBC_COMPUTE, 0x1230, 1); q.signal(s, 1)
  q.submit(nv)   # no error yet: nothing has run
  with pytest.raises(NVError, match="compute channel faulted: ROBUST_CHANNEL_GR_EXCEPTION"): s.wait(1, 5.0)
  t = nv.new_signal(0)   # the device recreated its channels: later work runs (late, too)
  nv.hw_compute_queue().signal(t, 1).submit(nv); t.wait(1, 5.0)

def _graph_replays(dev, copy=True, n=64, reps=4):
  """`reps` back-to-back replays (no host wait between them) of add (+ copy), each with its own output and k."""
  add = dev.program("add", assemble_ptx(K.head(dev.arch) + K.ADD, dev.arch))
  x = np.arange(n, dtype=np.float32)
  a, b = upload(dev, x), upload(dev, np.ones(n, np.float32))
  outs = [(dev.allocator.alloc(4 * n), dev.allocator.alloc(4 * n)) for _ in range(reps)]
  items = [GraphExec(add, [outs[0][0], a, b], [1, n], (1, 1, 1), (n, 1, 1))]   # o = a + k b
  items += [GraphCopy(outs[0][1], outs[0][0], 4 * n)] if copy else [GraphExec(add, [outs[0][1], outs[0][0], b], [0, n], (1, 1, 1), (n, 1, 1))]
  g = GraphReplay(dev, items)   # o2 = o: on the copy engine (a hand-over between channels) or by a second launch
  for k, (o, o2) in enumerate(outs): g.replay(bufs={(0, 0): o, (1, 0): o2, (1, 1): o}, vals={(0, 0): k + 2})
  dev.synchronize()
  return [(download(dev, o, n), download(dev, o2, n)) for o, o2 in outs], [x + k + 2 for k in range(reps)]

@pytest.mark.parametrize("copy", [False, True], ids=["compute", "compute+copy"])
def test_graph_replays_back_to_back_on_an_async_gpu(nv, copy):
  nv.drv.engine.latency_s = 0.02
  nv.wait_timeout_s = 10.0   # (a replay that rewrote early leaves a wait nothing releases)
  got, want = _graph_replays(nv, copy)
  for (o, o2), w in zip(got, want):
    np.testing.assert_array_equal(o, w)
    np.testing.assert_array_equal(o2, w)

def test_a_replay_that_rewrites_early_is_caught(nv, monkeypatch):
  """The mock must be able to fail the mutation: replays that rewrite the stream while the GPU has yet to fetch it."""
  rewrites_early(monkeypatch)
  nv.wait_timeout_s = 2.0   # (the rewritten waits ask for a timeline value nothing releases)
  try:   # held until the host waits: every replay is rewritten before the first one runs
    with held_until_the_host_waits(nv.drv, 0): got, want = _graph_replays(nv)
  except SignalTimeout: return
  assert any(not np.array_equal(o, w) or not np.array_equal(o2, w) for (o, o2), w in zip(got, want))

@pytest.fixture
def nv_jit():
  """The registry's NV device on its mock driver in latency mode (reset to 0 afterwards)."""
  dev, drv = registry_on_mock("NV")
  dev.synchronize()
  drv.engine.latency_s, dev.wait_timeout_s = 0.05, 10.0   # (a replay that rewrote early leaves a wait nothing releases)
  try: yield dev
  finally: drv.engine.latency_s = 0.0; del dev.wait_timeout_s

def _jit_calls(reps=5):
  w = Tensor(np.random.default_rng(1).standard_normal((8, 5)).astype(np.float32), device="NV").realize()
  @TinyJit
  def f(x: Tensor) -> Tensor: return ((x @ w).relu() * 2 + x.sum(1, keepdim=True)).contiguous()
  xs = [np.random.default_rng(10 + i).standard_normal((3, 8)).astype(np.float32) for i in range(reps)]
  ins = [Tensor(x, device="NV").realize() for x in xs]   # (uploaded first: an upload waits for the GPU)
  outs = [f(t) for t in ins]   # calls 3.. replay the graph back to back, no host read in between
  assert isinstance(f.graph, GraphReplay)
  return [o.numpy() for o in outs], [np.maximum(x @ w.numpy(), 0) * 2 + x.sum(1, keepdims=True) for x in xs]

def test_tinyjit_replays_with_changing_inputs_on_an_async_gpu(nv_jit):
  got, want = _jit_calls()
  for g, w in zip(got, want): np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
