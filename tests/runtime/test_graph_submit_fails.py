"""A graph replay whose submit raises (hcqrt/hcq.py GraphReplay._submit_failed), a MultiGraph replay with a device that
cannot take work (hcqrt/multi_graph.py), and a dropped graph's memory at synchronize (HCQDevice.wait_own_frees).

A submit fails here the way it does on a live system: the ring stays full for the whole wait (NV: GPFIFO.push, AMD:
KFDQueue.submit raise TimeoutError without touching the GPU's pointers), or the device is lost (NV recover with a channel
group RM would not free). What the graph records must be what the GPU may run: the old code recorded a replay that
never reached the GPU, so the next replay waited for a graph signal value no GPU would write."""
import gc, re, struct, types
import numpy as np
import pytest
from conftest import mock_nv_device
from hcqrt import hcq
from hcqrt.interface import GraphCopy, GraphExec
from hcqrt.multi_graph import MultiGraph, PeerCopy
import hcqrt.nv.device as D
import hcqrt.mock.nv.gpfifo as G
from tests.runtime.test_multi_graph import _add, _down, _nv_pair, _up, N as MN

N = 4096
pytestmark = pytest.mark.usefixtures("gc_walks_only_this_modules_objects")   # (tests gc.collect() to run finalizers)

@pytest.fixture
def short_waits(monkeypatch):
  # the old code's wrong wait ends after 5 s (then its SignalTimeout fails the test) instead of 30; the fixed code
  # never waits for it, and its own waits are for work the GPU can do at once
  monkeypatch.setattr(hcq, "DEFAULT_TIMEOUT_S", 5.0)

def _bufs(dev, *fill):
  out = []
  for v in fill:
    b = dev.allocator.alloc(N); dev.allocator.copyin(b, memoryview(np.full(N, v, np.uint8))); out.append(b)
  return out

def _read(dev, b) -> np.ndarray:
  out = np.empty(N, np.uint8); dev.allocator.copyout(memoryview(out), b); return out

def _nv_ring_full(monkeypatch, dev, ch):
  """`ch`'s GPFIFO ring reads as full for the whole (short) wait: push raises TimeoutError with nothing pushed."""
  monkeypatch.setattr(dev, "wait_timeout_s", 0.3)
  monkeypatch.setattr(ch, "pending", lambda: D.GPFIFO_ENTRIES - 1)

def test_nv_replay_that_reached_no_gpu_leaves_the_graph_as_before(short_waits):
  """The second replay's only queue never reached the GPU: the graph, the device timeline and the signal's promise
  are as before it, so the next replay runs at once (the old code waited there for the failed replay's end: timeout)."""
  with mock_nv_device() as nv:
    x, y, z = _bufs(nv, 1, 0, 7)
    g = nv.graph([GraphCopy(y, x, N)])
    g.replay(wait=True)
    state, tv = (g.base, g.submitted, list(g._last)), nv.timeline_value
    with pytest.MonkeyPatch.context() as m:
      _nv_ring_full(m, nv, nv.copy_ch)
      with pytest.raises(TimeoutError, match="ring stays full") as e: g.replay(bufs={(0, 1): z})
    assert (g.base, g.submitted, list(g._last)) == state and nv.timeline_value == tv
    g.replay(wait=True)   # (the patched source stays patched)
    assert (_read(nv, y) == 7).all()
    assert "reached no GPU queue: the graph is as before it" in str(e.value)

def test_nv_graph_whose_only_replay_failed_frees_its_memory_at_once(short_waits):
  """Never submitted after all: dropping it gives its pushbuffer back at once (the old code deferred it until a graph
  signal value no GPU writes: a leak)."""
  with mock_nv_device() as nv:
    x, y = _bufs(nv, 1, 0)
    g = nv.graph([GraphCopy(y, x, N)])
    with pytest.MonkeyPatch.context() as m:
      _nv_ring_full(m, nv, nv.copy_ch)
      with pytest.raises(TimeoutError): g.replay()
    before = sum(len(v) for v in nv._persistent_free.values())
    del g; gc.collect()
    assert sum(len(v) for v in nv._persistent_free.values()) > before, "the graph's memory was not given back"
    assert not nv._persistent_later

def test_nv_replay_cut_in_half_is_dropped_by_a_recovery(short_waits):
  """The compute queue (it runs the launch after the copy, and the replay's end) reached the GPU, the copy queue did
  not: the compute channel waits for a hand-over no GPU will release. The failed replay recovers the device at once
  (the error says so), so the next replay runs; the old code left the channel blocked and the next replay waited."""
  with mock_nv_device() as nv:
    from tests.runtime.test_nv_replay_faults import prog
    from hw_tests import kernels as K
    inc = prog(nv, "inc", K.INC)
    x, y = _bufs(nv, 1, 0)
    g = nv.graph([GraphCopy(y, x, N), GraphExec(inc, [y], [], (1, 1, 1), (1, 1, 1))])
    assert [q is g.compute for q in g.used] == [True, False]   # (compute first: it is pushed, then the copy fails)
    with pytest.MonkeyPatch.context() as m:
      _nv_ring_full(m, nv, nv.copy_ch)
      with pytest.raises(TimeoutError, match="ring stays full") as e: g.replay()
    g.replay(wait=True)
    got = _read(nv, y).view(np.uint32)
    assert got[0] == 0x01010101 + 1 and (_read(nv, y)[4:] == 1).all()
    assert "part of the graph replay reached the GPU and can never finish; the device recovered" in str(e.value)

def test_nv_lost_device_replay_names_the_device_once():
  """A lost device refuses the replay before any push: the graph stays unsubmitted, and the message names the device
  once ("NV: ... NV did not come back" before)."""
  with mock_nv_device() as nv:
    x, y = _bufs(nv, 1, 0)
    g = nv.graph([GraphCopy(y, x, N)])
    nv.drv.fail_free["group"] = "NV_ERR_GPU_IN_FULLCHIP_RESET"
    nv.recover()
    with pytest.raises(D.NVError, match=r"^NV: submitting NVCopyQueue: ") as e: g.replay()
    assert g.submitted is False and g._last == [0, 0]
    assert "the device did not come back" in str(e.value) and str(e.value).count("NV ") + str(e.value).count("NV:") == 1, str(e.value)

# ---------------------------------------------------------------- AMD (the same shared code)
@pytest.fixture(params=["gfx1100", "gfx942"])   # a PM4 compute queue, an AQL one
def amd(request):
  from tests.runtime.test_amd_async import _store42, mock_amd_device
  with mock_amd_device(request.param, _store42) as d: yield d

def _amd_sdma_full(m, dev):
  m.setattr(dev, "wait_timeout_s", 0.3)
  m.setattr(dev.sdma, "rptr", types.SimpleNamespace(value=dev.sdma.put + 4))   # (SDMA counts bytes: one dword short)

def test_amd_replay_that_reached_no_gpu_leaves_the_graph_as_before(amd, short_waits):
  x, y = _bufs(amd, 1, 0)
  g = amd.graph([GraphCopy(y, x, N)])
  g.replay(wait=True)
  state, tv = (g.base, g.submitted, list(g._last)), amd.timeline_value
  with pytest.MonkeyPatch.context() as m:
    _amd_sdma_full(m, amd)
    with pytest.raises(TimeoutError, match="ring stays full") as e: g.replay()
  assert (g.base, g.submitted, list(g._last)) == state and amd.timeline_value == tv
  amd.allocator.copyin(y, memoryview(np.zeros(N, np.uint8)))
  g.replay(wait=True)
  assert (_read(amd, y) == 1).all()
  assert "reached no GPU queue" in str(e.value)

def test_amd_replay_cut_in_half_is_dropped_by_a_recovery(amd, short_waits):
  from tests.runtime.test_amd_async import _program
  prog, out = _program(amd), amd.allocator.alloc(64)
  x, y = _bufs(amd, 1, 0)
  g = amd.graph([GraphCopy(y, x, N), GraphExec(prog, [out], [], (1, 1, 1), (amd.wave_size, 1, 1))])
  assert [q is g.compute for q in g.used] == [True, False]
  with pytest.MonkeyPatch.context() as m:
    _amd_sdma_full(m, amd)
    with pytest.raises(TimeoutError, match="ring stays full") as e: g.replay()
  g.replay(wait=True)
  got = bytearray(4); amd.allocator.copyout(memoryview(got), out)
  assert struct.unpack("<I", got)[0] == 42 and (_read(amd, y) == 1).all()
  assert "can never finish; the device recovered" in str(e.value)

# ---------------------------------------------------------------- MultiGraph
@pytest.fixture
def pair():
  from hcqrt import syscalls
  drv, d0, d1 = _nv_pair("pcie")
  try: yield drv, d0, d1
  finally: syscalls.uninstall(drv)

def _there_and_back(d0, d1):
  """GPU 0: p = 2x, pushed into t on GPU 1; GPU 1: o = t + y, pushed into r on GPU 0; GPU 0: q = r + x (= 3x + y).
  GPU 0's graph waits for GPU 1's (the second half), GPU 1's for GPU 0's (the first)."""
  x, y = np.arange(MN, dtype=np.float32), np.full(MN, 100.0, np.float32)
  z = np.zeros(MN, np.float32)
  b = {"x": _up(d0, x), "p": _up(d0, z), "r": _up(d0, z), "q": _up(d0, z), "t": _up(d1, z), "y": _up(d1, y), "o": _up(d1, z)}
  a0, a1 = _add(d0), _add(d1)
  g = MultiGraph([a0(b["p"], b["x"], b["x"], 1), PeerCopy(d1, d0, b["t"], b["p"], MN * 4), a1(b["o"], b["t"], b["y"], 1),
                  PeerCopy(d0, d1, b["r"], b["o"], MN * 4), a0(b["q"], b["r"], b["x"], 1)])
  assert g.graphs is not None and g.devices == [d0, d1]
  return g, b, 3 * x + y

def test_multigraph_with_a_lost_device_submits_nowhere(pair):
  """GPU 1 is lost: the replay is refused before GPU 0's graph is submitted (the old code submitted it, then failed on
  GPU 1, leaving GPU 0's part waiting for GPU 1 for good)."""
  drv, d0, d1 = pair
  g, b, want = _there_and_back(d0, d1)
  g.replay(wait=True)
  np.testing.assert_array_equal(_down(d0, b["q"]), want)
  last0, tv0 = list(g.graphs[0]._last), d0.timeline_value
  drv.fail_free["group"] = "NV_ERR_GPU_IN_FULLCHIP_RESET"
  d1.recover()
  with pytest.raises(D.NVError, match=r"^NV:1: ") as e: g.replay()
  assert g.graphs[0]._last == last0 and d0.timeline_value == tv0, "GPU 0's graph was submitted"
  assert "NV:1: the device did not come back" in str(e.value)

def test_multigraph_submit_failing_midway_recovers_the_parts_waiting_for_it(pair, short_waits, monkeypatch):
  """GPU 1's graph reaches no GPU (its compute ring stays full): GPU 0's graph, already submitted, waits for GPU 1's
  push. The error names GPU 1 first; GPU 0 is recovered (dropped), so the next replay runs (the old code's waited for
  GPU 0's graph end: timeout)."""
  _, d0, d1 = pair
  g, b, want = _there_and_back(d0, d1)
  g.replay(wait=True)
  with pytest.MonkeyPatch.context() as m:
    _nv_ring_full(m, d1, d1.compute_ch)
    with pytest.raises(TimeoutError, match=r"^NV:1: ") as e: g.replay()
  g.replay(wait=True)
  np.testing.assert_array_equal(_down(d0, b["q"]), want)
  assert re.search(r"reached no GPU queue.*MultiGraph replay stopped at this device's graph \(submitted before it: NV\); "
                   r"NV's graph, submitted before it, waits for a graph that got nothing: the device recovered", str(e.value)), str(e.value)

# ---------------------------------------------------------------- synchronize and a dropped graph's memory
def test_nv_dropped_graph_memory_is_free_right_after_synchronize(monkeypatch):
  """The graph signal is released after the timeline, in a release stall (gpfifo.py RELEASE_STALL_S): synchronize waits
  for it too (same device), so the dropped graph's pushbuffer is free when synchronize returns, not one reap later."""
  monkeypatch.setattr(G, "RELEASE_STALL_S", 0.2)
  with mock_nv_device() as nv:
    x, y = _bufs(nv, 1, 0)
    g = nv.graph([GraphCopy(y, x, N)])
    g.replay()
    before = sum(len(v) for v in nv._persistent_free.values())
    del g; gc.collect()
    nv.synchronize()
    assert sum(len(v) for v in nv._persistent_free.values()) > before, "the dropped graph's memory was not free after synchronize"

def test_multigraph_with_a_stopped_amd_queue_submits_nowhere():
  """AMD: GPU 1's compute queue stopped on a bad packet (KFD reports it in the CWSR header's payload word). The replay
  asks every device first (raise_if_faulted: recovers GPU 1 and names the exception) and submits nothing; the old code
  submitted GPU 0's graph into a replay GPU 1 could not run. The next replay runs on both."""
  import ctypes, time
  from hcqrt.amd.device import AMDError
  from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd
  from tests.runtime.test_amd_device import _bad_packet
  from tests.runtime.test_amd_p2p import read
  from tests.runtime.test_multi_graph import _amd_push_then_add
  drv = install_mock_amd("gfx1100", gpus=2, kernel="6.12")
  try:
    d0, d1, g, x, out = _amd_push_then_add()
    g.replay(wait=True)
    last0, tv0 = list(g.graphs[0]._last), d0.timeline_value
    _bad_packet(d1)
    t = time.perf_counter()
    while not ctypes.c_uint64.from_address(d1.error_payload.host).value and time.perf_counter() - t < 20: time.sleep(0.001)
    with pytest.raises(AMDError, match=r"^AMD:1: ") as e: g.replay()
    assert g.graphs[0]._last == last0 and d0.timeline_value == tv0, "GPU 0's graph was submitted"
    assert "EC_QUEUE_PACKET_UNSUPPORTED" in str(e.value) and "the device recovered" in str(e.value)
    g.replay(wait=True)
    np.testing.assert_array_equal(read(d1, out, x), x)
  finally: uninstall_mock_amd(drv)

def test_nv_replay_with_a_bad_patch_leaves_the_graph_as_before(short_waits):
  """A patch that raises (an item index the graph lacks) comes before any push: the graph is as before it, so the next
  replay runs (the old code had already moved the graph's base on, and the next replay waited for an end no GPU writes)."""
  with mock_nv_device() as nv:
    x, y, z = _bufs(nv, 1, 0, 7)
    g = nv.graph([GraphCopy(y, x, N)])
    g.replay(wait=True)
    state, tv = (g.base, g.submitted, list(g._last)), nv.timeline_value
    with pytest.raises(IndexError): g.replay(bufs={(3, 1): z})
    assert (g.base, g.submitted, list(g._last)) == state and nv.timeline_value == tv
    g.replay(bufs={(0, 1): z}, wait=True)
    assert (_read(nv, y) == 7).all()

def test_multigraph_part_pushed_on_a_device_lost_meanwhile_recovers_the_parts_waiting_for_it(pair, short_waits, monkeypatch):
  """GPU 1's compute queue is pushed, its copy ring stays full, and its recovery fails (RM keeps the channel group): GPU 1
  is lost and its graph never finishes. GPU 0's graph, submitted before, waits for GPU 1's push: it is recovered, so
  GPU 0 synchronizes (the old code recovered only for a graph that got nothing: GPU 0 stayed blocked, a timeout)."""
  drv, d0, d1 = pair
  g, b, want = _there_and_back(d0, d1)
  g.replay(wait=True)
  np.testing.assert_array_equal(_down(d0, b["q"]), want)
  assert [q is g.graphs[1].compute for q in g.graphs[1].used] == [True, False]   # (compute pushed first, then the copy)
  drv.fail_free["group"] = "NV_ERR_GPU_IN_FULLCHIP_RESET"
  with pytest.MonkeyPatch.context() as m:
    _nv_ring_full(m, d1, d1.copy_ch)
    with pytest.raises(TimeoutError, match=r"^NV:1: ") as e: g.replay()
  assert d1.lost and not drv.fail_free
  monkeypatch.setattr(d0, "wait_timeout_s", 5.0)
  d0.synchronize()
  assert "NV's graph, submitted before it, waits for a graph that can never finish: the device recovered" in str(e.value), str(e.value)
