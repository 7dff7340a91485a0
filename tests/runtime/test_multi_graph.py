"""hcqrt/multi_graph.py: one graph replay across devices. Segment packing follows the items' buffer dependencies (an
item never runs before one that touched its buffers earlier in the capture, a write after a read included), each
device's launches go to its own sub-graph, replay patches reach the right sub-graph item or copy. Fake devices record
the order things ran in; the real devices are in tests/frontend/multi/test_data_parallel.py and test_multi_device.py.
"""
import numpy as np
import pytest
from hcqrt.interface import GraphExec
from hcqrt.hcq import HCQDevice
from hcqrt.multi_graph import MultiGraph, PeerCopy
from tests.held_gpu import held_until_the_host_waits, wait_until_idle

pytestmark = pytest.mark.usefixtures("gc_walks_only_this_modules_objects")   # (its tests gc.collect() to run finalizers)

class Buf:
  def __init__(self, name: str, n: int = 4): self.name, self.data = name, np.zeros(n, np.uint8)
  def __repr__(self) -> str: return self.name

class Prog:
  def __init__(self, name: str, log: list): self.name, self.log = name, log
  def __call__(self, *bufs, global_size=(1, 1, 1), local_size=(1, 1, 1), threads=1, vals=(), wait=False):
    self.log.append((self.name, list(bufs), list(vals)))

class Alloc:
  def __init__(self, dev): self.dev = dev
  def copyout(self, dst: memoryview, src: Buf) -> None:
    self.dev.log.append(("copyout", src)); dst[:] = src.data[:len(dst)]
  def copyin(self, dst: Buf, src: memoryview) -> None:
    self.dev.log.append(("copyin", dst)); dst.data[:len(src)] = np.frombuffer(src, np.uint8)

class SubGraph:
  completes_on_return = True
  def __init__(self, dev, items): self.dev, self.items = dev, items
  def replay(self, bufs=None, vals=None, wait=False):
    self.dev.log.append(("graph", self.dev.name, [it.prog.name for it in self.items], dict(bufs or {}), dict(vals or {})))

class Dev:
  def __init__(self, name: str, log: list, graphs: bool):
    self.name, self.log, self.graphs, self.allocator, self.synced = name, log, graphs, None, 0
    self.allocator = Alloc(self)
  def graph(self, items, timestamps=False): return SubGraph(self, items) if self.graphs else None
  def synchronize(self, timeout_s=None): self.synced += 1

@pytest.fixture
def devs():
  log: list = []
  return log, Dev("A", log, graphs=False), Dev("B", log, graphs=False)

def launch(dev, name, *bufs, vals=()): return (dev, GraphExec(Prog(name, dev.log), list(bufs), list(vals)))

def names(log) -> list[str]: return [e[0] if e[0] not in ("copyout", "copyin") else f"{e[0]} {e[1]}" for e in log]

def test_independent_launches_pack_per_device(devs):
  log, a, b = devs
  x, y = Buf("x"), Buf("y")
  g = MultiGraph([launch(a, "a1", x), launch(b, "b1", y), launch(a, "a2", x), launch(b, "b2", y)])
  assert [(s.device.name, s.items) for s in g.segments] == [("A", [0, 2]), ("B", [1, 3])]
  g.replay()
  assert names(log) == ["a1", "a2", "b1", "b2"]

def test_copy_orders_reader_after_it_and_writer_of_its_source_after_it(devs):
  log, a, b = devs
  x, y, z = Buf("x"), Buf("y"), Buf("z")
  x.data[:] = 7
  items = [launch(a, "a1", x), PeerCopy(b, a, y, x, 4), launch(b, "b1", z, y), launch(a, "a2", x)]
  g = MultiGraph(items)
  # a2 writes x, which the copy reads: it may not join a1's segment (it would run before the copy)
  assert [s.items for s in g.segments] == [[0], [1], [2], [3]]
  g.replay()
  assert names(log) == ["a1", "copyout x", "copyin y", "b1", "a2"]
  assert (y.data == 7).all() and g.completes_on_return

def test_unrelated_launch_moves_before_a_copy(devs):
  log, a, b = devs
  x, y, w = Buf("x"), Buf("y"), Buf("w")
  g = MultiGraph([launch(a, "a1", x), PeerCopy(b, a, y, x, 4), launch(a, "a2", w)])
  assert [s.items for s in g.segments] == [[0, 2], [1]]   # a2 touches nothing the copy does: one sub-graph on A
  g.replay()
  assert names(log) == ["a1", "a2", "copyout x", "copyin y"]

def test_replay_patches_launches_and_copies(devs):
  log, a, b = devs
  x, y, x2, y2 = Buf("x"), Buf("y"), Buf("x2"), Buf("y2")
  x2.data[:] = 3
  g = MultiGraph([launch(a, "a1", x, vals=(5,)), PeerCopy(b, a, y, x, 4)])
  g.replay(bufs={(0, 0): x2, (1, 1): x2, (1, 0): y2}, vals={(0, 0): 6})
  assert log[0] == ("a1", [x2], [6]) and names(log)[1:] == ["copyout x2", "copyin y2"]
  assert (y2.data == 3).all() and (y.data == 0).all()
  assert a.synced == 1   # a segment run one launch at a time waits for its device

def test_sub_graphs_get_local_indices():
  log: list = []
  a, b = Dev("A", log, graphs=True), Dev("B", log, graphs=True)
  x, y, n = Buf("x"), Buf("y"), Buf("n")
  g = MultiGraph([launch(a, "a1", x), launch(b, "b1", y), launch(b, "b2", y, vals=(1,)), launch(a, "a2", x)])
  g.replay(bufs={(2, 0): n, (3, 0): n}, vals={(2, 0): 9}, wait=True)
  assert log == [("graph", "A", ["a1", "a2"], {(1, 0): n}, {}), ("graph", "B", ["b1", "b2"], {(1, 0): n}, {(1, 0): 9})]
  assert a.synced == b.synced == 1   # wait=True: every device

def test_bad_item_is_named():
  with pytest.raises(TypeError, match="MultiGraph: item 0 is 'x'"): MultiGraph(["x"])

def test_reads_do_not_order_each_other(devs):
  _, a, b = devs
  x, y, w = Buf("x"), Buf("y"), Buf("w")
  # a2 only reads x, which the copy reads too: no dependency, so a2 stays in a1's sub-graph
  g = MultiGraph([launch(a, "a1", x), PeerCopy(b, a, y, x, 4), launch(a, "a2", w, x)])
  assert g.deps == [set(), {0}, {0}]
  assert [s.items for s in g.segments] == [[0, 2], [1]]

def test_dependencies_raw_war_waw():
  x, y, z = Buf("x"), Buf("y"), Buf("z")
  a = Dev("A", [], graphs=False)
  items = [launch(a, "w1", x), launch(a, "r1", y, x), launch(a, "r2", z, x), launch(a, "w2", x), launch(a, "w3", x, z)]
  from hcqrt.multi_graph import dependencies
  # r1, r2 read x after w1 (RAW); w2 writes x after both reads (WAR) and w1 (WAW); w3 after w2 (WAW) and r2's z (RAW)
  assert dependencies(items) == [set(), {0}, {0}, {0, 1, 2}, {2, 3}]

def test_launch_with_several_outputs_writes_them_all(devs):
  log, a, b = devs
  x, m, y, g_ = Buf("x"), Buf("m"), Buf("y"), Buf("g")
  # an optimizer update fused with its moment: it writes x and m (nout=2), reads g; the copy of m must wait for it
  items = [(a, launch(a, "adam", x, m, g_)[1], 2), PeerCopy(b, a, y, m, 4), launch(a, "r", g_)]
  g = MultiGraph(items)
  assert g.deps == [set(), {0}, {0}]
  # r rewrites g, which adam read (WAR): after adam on A; nothing orders it against the copy of m
  assert [s.items for s in g.segments] == [[0, 2], [1]]
  g.replay()
  assert names(log) == ["adam", "r", "copyout m", "copyin y"]
  assert MultiGraph([(a, items[0][1], 1), items[1]]).deps == [set(), set()]   # (m read only: the copy need not wait)

def test_independent_work_joins_the_segment_after_a_copy(devs):
  log, a, b = devs
  x, y, z, r = Buf("x"), Buf("y"), Buf("z"), Buf("r")
  # b0 depends on nothing: it waits for the phase of b1 (which needs the copy) instead of opening a segment of its own
  g = MultiGraph([launch(b, "b0", r), launch(a, "a0", x), PeerCopy(b, a, y, x, 4), launch(b, "b1", z, y)])
  assert [(s.device.name if s.device else None, s.items) for s in g.segments] == [("A", [1]), (None, [2]), ("B", [0, 3])]
  g.replay()
  assert names(log) == ["a0", "copyout x", "copyin y", "b0", "b1"]

def test_data_parallel_shape_is_five_segments(devs):
  log, a, b = devs
  xa, xb, ga, gb, ta, tb, wa, wb = (Buf(n) for n in ("xa", "xb", "ga", "gb", "ta", "tb", "wa", "wb"))
  # forward/backward per device, the gradients crossed both ways, the sums and the optimizer per device; interleaved
  # in capture order as the frontend records it
  items = [launch(a, "fa", ga, xa, wa), launch(b, "fb", gb, xb, wb), PeerCopy(b, a, tb, ga, 4), PeerCopy(a, b, ta, gb, 4),
           launch(a, "sa", ga, ga, ta), launch(b, "sb", gb, gb, tb), launch(a, "oa", wa, ga), launch(b, "ob", wb, gb)]
  g = MultiGraph(items)
  assert [s.items for s in g.segments] == [[0], [1], [2, 3], [4, 6], [5, 7]]
  g.replay()
  n = names(log)
  assert n.index("sa") > n.index("copyin ta") and n.index("sb") > n.index("copyin tb") and n.index("copyout ga") > n.index("fa")

# ---------------------------------------------------------------- HCQ devices: one graph per device (NV mock)
def _nv_pair(p2p: str):
  from hcqrt import syscalls
  from hcqrt.mock.nv import MockNV
  from hcqrt.nv.device import NVDevice
  drv = syscalls.install(MockNV(count=2, p2p=p2p))
  return drv, NVDevice("NV"), NVDevice("NV:1")

@pytest.fixture(params=["latest", "earliest"])
def nv(request):
  """An NV mock pair, once per late channel order (gpfifo.py Engine.latency_order, held mode's too): "latest" runs a GPU's copy
  channel before its compute channel, "earliest" the compute first, so a release misplaced on either fails one."""
  from hcqrt import syscalls
  by_order = request.param in ("latest", "earliest")   # (else a test's indirect parameter: the topology)
  drv, d0, d1 = _nv_pair("pcie" if by_order else request.param)
  order = request.param if by_order else "latest"
  for g in drv.gpus: g.engine.latency_order = order
  try: yield drv, d0, d1
  finally:
    for g in drv.gpus: g.engine.release()   # (a test that failed inside a hold leaves nothing queued)
    syscalls.uninstall(drv)

N = 256
# A late GPU is a held one (tests/held_gpu.py): its doorbells wait until the host blocks and no other GPU can go on, so a
# race stays open while the host issues the next replay however loaded the machine is (a 0.3 s latency-mode timer once
# closed under two xdist workers on two cores: a dropped start wait went unseen, 1 in 6 runs).
def _up(dev, arr):
  b = dev.allocator.alloc(arr.nbytes); dev.allocator.copyin(b, memoryview(arr.view(np.uint8))); return b
def _down(dev, b):
  out = np.empty(N, np.float32); dev.allocator.copyout(memoryview(out.view(np.uint8)), b); return out
def _add(dev):
  from compiler.assemble.ptx_assembler import assemble_ptx
  from hw_tests import kernels as K
  prog = dev.program("add", assemble_ptx(K.head(dev.arch) + K.ADD, dev.arch))
  # out = a + k * b over N floats
  return lambda out, a, b, k: (dev, GraphExec(prog, [out, a, b], [k, N], (N // 64, 1, 1), (64, 1, 1)))

def _step(d0, d1):
  """GPU 0: p = x + x; copy p into t on GPU 1; GPU 1: o = t + y. Returns the graph and its buffers."""
  x, y = np.arange(N, dtype=np.float32), np.full(N, 100.0, np.float32)
  b = {"x": _up(d0, x), "p": _up(d0, np.zeros(N, np.float32)), "t": _up(d1, np.full(N, -1.0, np.float32)), "y": _up(d1, y),
       "o": _up(d1, np.zeros(N, np.float32))}
  a0, a1 = _add(d0), _add(d1)
  g = MultiGraph([a0(b["p"], b["x"], b["x"], 1), PeerCopy(d1, d0, b["t"], b["p"], N * 4), a1(b["o"], b["t"], b["y"], 1)])
  return g, b, x, y

def test_hcq_replay_is_one_submission_per_queue_and_no_host_copy(nv, monkeypatch):
  import hcqrt.multi_graph as mg
  from hcqrt.hcq import HWQueue
  _, d0, d1 = nv
  g, b, x, y = _step(d0, d1)
  assert g.graphs is not None and "one graph per device" in repr(g)
  subs, host = [], []
  sub = HWQueue.submit
  monkeypatch.setattr(HWQueue, "submit", lambda self, dev: (subs.append(dev.name), sub(self, dev))[1])
  monkeypatch.setattr(mg, "copy_between", lambda *a: host.append(a))
  g.replay(wait=True)
  assert host == [] and sorted(subs) == ["NV", "NV", "NV:1"]   # GPU 0: compute + copy queue; GPU 1: compute
  np.testing.assert_array_equal(_down(d1, b["o"]), 2 * x + y)
  # a replay patches a launch's input and the copy's destination (mapped on GPU 0 at its new address)
  x2, t2 = _up(d0, np.full(N, 5.0, np.float32)), _up(d1, np.zeros(N, np.float32))
  g.replay(bufs={(0, 1): x2, (0, 2): x2, (1, 0): t2, (2, 1): t2}, wait=True)
  np.testing.assert_array_equal(_down(d1, b["o"]), 10.0 + y)
  np.testing.assert_array_equal(_down(d1, t2), np.full(N, 10.0, np.float32))

def test_hcq_refused_enable_bounces_inside_the_graphs(nv, monkeypatch):
  """A pair RM reports as P2P whose UVM_ENABLE_PEER_ACCESS is refused (e.g. nvGpuOpsP2pObjectCreate NOT_SUPPORTED):
  _link makes it "no-p2p", so the graph must bounce the copy, not build peer pushes that fail to map (review g26 row
  2)."""
  from hcqrt.mock.nv import uvm as U
  from hcqrt.hcq import GraphPeerCopy
  def refuse(self, f, p): raise U.UVMError("NV_ERR_NOT_SUPPORTED", "refused by the test")
  monkeypatch.setattr(U.UVM, "enable_peer_access", refuse)
  _, d0, d1 = nv
  assert d0.peer_status(d1) == "ok: pcie"
  g, b, x, y = _step(d0, d1)
  assert g.graphs is not None and list(g.bounces) == [1] and d0.peer_status(d1).startswith("no-p2p:")
  assert not any(isinstance(it, GraphPeerCopy) for gr in g.graphs for it in gr.items)
  g.replay(wait=True)
  np.testing.assert_array_equal(_down(d1, b["o"]), 2 * x + y)

@pytest.mark.parametrize("drop", [False, True])
def test_hcq_start_wait_orders_a_push_after_the_previous_replays_read(nv, monkeypatch, drop):
  """Replay k's kernel on GPU 1 reads t late; replay k+1's push into t comes from GPU 0, whose graph is submitted first
  (so GPU 1's host wait for its own previous replay does not order it). Only the start wait (GPU 0's graph waits for
  GPU 1's timeline as it was before the replay) keeps replay k from reading replay k+1's data (review g26 row 3)."""
  drv, d0, d1 = nv
  x1, x2 = np.arange(N, dtype=np.float32), np.full(N, 9.0, np.float32)
  p, p2, t = _up(d0, x1), _up(d0, x2), _up(d1, np.zeros(N, np.float32))
  o1, o2, s0 = _up(d1, np.zeros(N, np.float32)), _up(d1, np.zeros(N, np.float32)), _up(d0, np.zeros(N, np.float32))
  g = MultiGraph([_add(d0)(s0, s0, s0, 0), PeerCopy(d1, d0, t, p, N * 4), _add(d1)(o1, t, t, 0)])   # d0's graph first
  assert g.graphs is not None and g.devices[0] is d0
  g.replay(wait=True)
  if drop: monkeypatch.setattr(MultiGraph, "skip_waits", frozenset({"start"}))
  with held_until_the_host_waits(drv, 1):
    g.replay(bufs={(2, 0): o1})               # replay k: GPU 1 reads t late (when replay k+1 waits for it on the host)
    g.replay(bufs={(1, 1): p2, (2, 0): o2})   # replay k+1: pushes x2 into t, then GPU 1 writes o2
    g.synchronize()
  assert (_down(d1, o2) == x2).all()   # (k = 0: o = t)
  assert (_down(d1, o1) == x1).all() != drop

@pytest.mark.parametrize("drop", [False, True])
def test_hcq_tail_wait_covers_a_push_nothing_in_the_graph_reads(nv, monkeypatch, drop):
  """GPU 0 pushes into t on GPU 1 and nothing in GPU 1's graph reads t; GPU 1's own later work (a copyout, which waits
  for GPU 1's timeline only) must still see the push: the tail wait makes GPU 1's graph end after it (review g26 row 4)."""
  drv, d0, d1 = nv
  x = np.arange(N, dtype=np.float32) + 1
  p, t, s1 = _up(d0, x), _up(d1, np.zeros(N, np.float32)), _up(d1, np.zeros(N, np.float32))
  g = MultiGraph([_add(d1)(s1, s1, s1, 0), PeerCopy(d1, d0, t, p, N * 4)])
  assert g.graphs is not None
  d0.synchronize(); d1.synchronize()
  if drop: monkeypatch.setattr(MultiGraph, "skip_waits", frozenset({"tail"}))
  with held_until_the_host_waits(drv, 0):   # (GPU 0 pushes only once the host blocks on it)
    g.replay()
    got = _down(d1, t)
    g.synchronize()
  assert (got == x).all() != drop

@pytest.mark.parametrize("drop", [False, True])
def test_hcq_replay_orders_a_late_copy_by_semaphores(nv, monkeypatch, drop):
  """GPU 0 runs late (the mock's held mode: a doorbell's work runs later, as the PBDMA may): GPU 1's add must wait on
  GPU 0's graph signal for the pushed copy. With the cross-device waits dropped (the test hook) it reads the old t."""
  drv, d0, d1 = nv
  g, b, x, y = _step(d0, d1)
  g.replay(wait=True)
  d0.allocator.copyin(b["x"], memoryview(np.full(N, 7.0, np.float32).view(np.uint8)))
  if drop: monkeypatch.setattr(HCQDevice, "skip_cross_wait", True)
  with held_until_the_host_waits(drv, 0): g.replay(); g.synchronize()
  got = _down(d1, b["o"])
  if drop: assert (got == 2 * x + y).all()   # the previous replay's t: the harmful result a missing wait gives
  else: np.testing.assert_array_equal(got, 14.0 + y)

def test_hcq_copy_waits_for_the_destinations_earlier_reader(nv, monkeypatch):
  """GPU 1 reads t late (held mode); the copy into t that follows in the graph (on GPU 0's copy engine) must wait
  for that read (write after read across GPUs): the first add sees the old t, the second the new one."""
  drv, d0, d1 = nv
  t_old = np.full(N, -1.0, np.float32)
  x = np.arange(N, dtype=np.float32)
  p, t, o1, o2 = _up(d0, x), _up(d1, t_old), _up(d1, np.zeros(N, np.float32)), _up(d1, np.zeros(N, np.float32))
  a1 = _add(d1)
  g = MultiGraph([a1(o1, t, t, 0), PeerCopy(d1, d0, t, p, N * 4), a1(o2, t, t, 0)])
  assert g.graphs is not None and g.deps == [set(), {0}, {1}]
  d0.synchronize(); d1.synchronize()
  with held_until_the_host_waits(drv, 1): g.replay(); g.synchronize()
  np.testing.assert_array_equal(_down(d1, o1), t_old)
  np.testing.assert_array_equal(_down(d1, o2), x)

def test_hcq_graph_signals_are_freed_with_the_graph(nv):
  """Each one-kick MultiGraph takes a graph signal per device, and a GraphReplay that makes its own takes one: both go
  back to the pool once the graph is gone and the GPU is past its last replay (the last replay here is left running
  when the graph is dropped), so building graphs again and again does not run the pool dry."""
  import gc
  drv, d0, d1 = nv
  def used() -> tuple[int, int]:
    # past the last replay: the GPUs idle, not just the timelines reached (each graph signal is released after its
    # timeline value, in a release stall the mock's thread ends later: counted then, a free_when entry was still waiting)
    d0.synchronize(); d1.synchronize(); wait_until_idle(drv); gc.collect()
    for d in (d0, d1): d.new_signal().free()   # (a new_signal frees what waited for the GPU)
    return d0.signals.count, d1.signals.count
  def build_and_drop() -> None:
    g, b, x, y = _step(d0, d1)
    assert g.graphs is not None
    g.replay(wait=True); g.replay()
    np.testing.assert_array_equal(_down(d1, b["o"]), 2 * x + y)
    one = d0.graph([_add(d0)(b["p"], b["x"], b["x"], 1)[1]]); one.replay()
  build_and_drop(); before = used()
  for _ in range(4): build_and_drop()
  assert used() == before

def _amd_push_then_add():
  """On an installed 2-GPU AMD mock: a MultiGraph that copies x from GPU 0 into dst on GPU 1, then adds dst + 0 into
  out on GPU 1. Returns (d0, d1, graph, x, out)."""
  from hcqrt.amd.device import AMDDevice
  from tests.runtime.test_amd_p2p import _add_program, filled
  d0, d1 = AMDDevice("AMD"), AMDDevice("AMD:1")
  prog = _add_program(d1)
  n, x = 256, np.arange(256, dtype=np.float32) + 1
  src, dst, zero, out = filled(d0, x), filled(d1, np.full(n, -1, np.float32)), filled(d1, np.zeros(n, np.float32)), d1.allocator.alloc(4 * n)
  g = MultiGraph([PeerCopy(d1, d0, dst, src, x.nbytes), (d1, GraphExec(prog, [out, dst, zero], (), (n // 64, 1, 1), (64, 1, 1)))])
  return d0, d1, g, x, out

def test_hcq_graph_signals_of_a_queued_replay_are_kept():
  """Audit hw row 3: a MultiGraph dropped while its replay is still queued (the AMD mock's engines held off by the
  driver lock) must not give its graph signals' slots to new signals: the replay would later write its values into
  their new owners' signals."""
  import gc
  from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd
  drv = install_mock_amd("gfx1100", gpus=2, p2p="pcie")
  try:
    d0, d1, g, _, _ = _amd_push_then_add()
    assert g.graphs is not None
    g.replay(wait=True); d0.synchronize(); d1.synchronize()   # (a replay the GPUs are past: its signals may be reused)
    with drv.lock:
      g.replay()
      sigs = {gr.sig.va for gr in g.graphs}
      del g; gc.collect()
      new = [d.new_signal(name="user") for d in (d0, d1) for _ in range(3)]
      assert not [s for s in new if s.va in sigs]
    d0.synchronize(); d1.synchronize()
    assert [s.value for s in new] == [0] * len(new)
  finally: uninstall_mock_amd(drv)

@pytest.fixture(params=["latest", "earliest"])
def nv_none(request):
  """An NV mock pair without P2P (IOH_TOPOLOGY_NOT_SUPPORTED: copies bounce), once per latency-mode channel order."""
  from hcqrt import syscalls
  drv, d0, d1 = _nv_pair("none")
  for gpu in drv.gpus: gpu.engine.latency_order = request.param
  try: yield drv, d0, d1
  finally:
    for gpu in drv.gpus: gpu.engine.release()
    syscalls.uninstall(drv)

def test_hcq_without_p2p_bounces_inside_the_graphs(nv_none, monkeypatch):
  """No P2P: the copy is a bounce inside the graphs (fill on GPU 0's copy engine, drain on GPU 1's), so a replay is
  still one submission per used queue and no host copy; replays patch the bounce's src and dst per chunk."""
  import hcqrt.multi_graph as mg
  from hcqrt.hcq import HWQueue
  _, d0, d1 = nv_none
  monkeypatch.setattr(type(d0), "BOUNCE_CHUNK", 256)   # 4 chunks through the 2 slots
  g, b, x, y = _step(d0, d1)
  assert g.graphs is not None and list(g.bounces) == [1] and len(g.bounces[1][1]) == 4
  subs, host = [], []
  sub = HWQueue.submit
  monkeypatch.setattr(HWQueue, "submit", lambda self, dev: (subs.append(dev.name), sub(self, dev))[1])
  monkeypatch.setattr(mg, "copy_between", lambda *a: host.append(a))
  g.replay(wait=True)
  assert host == [] and sorted(subs) == ["NV", "NV", "NV:1", "NV:1"]   # each GPU: compute + copy queue
  np.testing.assert_array_equal(_down(d1, b["o"]), 2 * x + y)
  x2, t2 = _up(d0, np.full(N, 5.0, np.float32)), _up(d1, np.zeros(N, np.float32))
  p2 = _up(d0, np.zeros(N, np.float32))
  g.replay(bufs={(0, 0): p2, (0, 1): x2, (0, 2): x2, (1, 0): t2, (1, 1): p2, (2, 1): t2}, wait=True)
  np.testing.assert_array_equal(_down(d1, t2), np.full(N, 10.0, np.float32))
  np.testing.assert_array_equal(_down(d1, b["o"]), 10.0 + y)

@pytest.mark.parametrize("drop", [False, True])
def test_hcq_bounce_drain_waits_for_its_fill(nv_none, monkeypatch, drop):
  """GPU 0 runs late: each drain on GPU 1 must wait on GPU 0's graph signal for its chunk's fill. Without the
  cross-device waits GPU 1 drains what the previous replay left in the slots."""
  drv, d0, d1 = nv_none
  g, b, x, y = _step(d0, d1)
  g.replay(wait=True)
  d0.allocator.copyin(b["x"], memoryview(np.full(N, 7.0, np.float32).view(np.uint8)))
  if drop: monkeypatch.setattr(MultiGraph, "skip_waits", frozenset({"cross"}))
  with held_until_the_host_waits(drv, 0): g.replay(); g.synchronize()
  got = _down(d1, b["o"])
  if drop: assert (got == 2 * x + y).all()   # the previous replay's chunks
  else: np.testing.assert_array_equal(got, 14.0 + y)

@pytest.mark.parametrize("drop", [False, True])
def test_hcq_bounce_fill_waits_for_the_slots_previous_drain(nv_none, monkeypatch, drop):
  """4 chunks through 2 slots with GPU 1 (the drains) late: the fill of chunk 2 into slot 0 must wait for chunk 0's
  drain. Without that wait chunk 0 of dst gets chunk 2's bytes."""
  drv, d0, d1 = nv_none
  monkeypatch.setattr(type(d0), "BOUNCE_CHUNK", 256)
  x = np.arange(N, dtype=np.float32)
  p, t = _up(d0, x), _up(d1, np.zeros(N, np.float32))
  g = MultiGraph([PeerCopy(d1, d0, t, p, N * 4)])
  assert g.graphs is not None and len(g.slot_waits) == 2
  d0.synchronize(); d1.synchronize()
  if drop: monkeypatch.setattr(MultiGraph, "skip_waits", frozenset({"slot"}))
  with held_until_the_host_waits(drv, 1): g.replay(); g.synchronize()
  got = _down(d1, t)
  if drop: assert (got[:64] == x[128:192]).all()
  else: np.testing.assert_array_equal(got, x)

def test_hcq_eager_bounce_after_a_replay_waits_for_the_graphs_drains(nv_none, monkeypatch):
  """An eager transfer_to bounce right after a replay reuses the source's slots: its fill must wait for the graph's
  drain of the slot (MultiGraph records the graph's drains as the slots' last ones), or the graph's dst gets its bytes."""
  drv, d0, d1 = nv_none
  x, z = np.arange(N, dtype=np.float32), np.full(N, -3.0, np.float32)
  p, t, p2, t2 = _up(d0, x), _up(d1, np.zeros(N, np.float32)), _up(d0, z), _up(d1, np.zeros(N, np.float32))
  g = MultiGraph([PeerCopy(d1, d0, t, p, N * 4)])
  d0.synchronize(); d1.synchronize()
  with held_until_the_host_waits(drv, 1):
    g.replay()
    d0.transfer_to(d1, t2, p2, N * 4)
    d0.synchronize(); d1.synchronize()
  np.testing.assert_array_equal(_down(d1, t), x)
  np.testing.assert_array_equal(_down(d1, t2), z)

@pytest.fixture
def nv3(request):
  """Three NV mock GPUs with the P2P topology `request.param` (MockNV's p2p string)."""
  from hcqrt import syscalls
  from hcqrt.mock.nv import MockNV
  from hcqrt.nv.device import NVDevice
  drv = syscalls.install(MockNV(count=3, p2p=request.param))
  try: yield drv, NVDevice("NV"), NVDevice("NV:1"), NVDevice("NV:2")
  finally:
    for gpu in drv.gpus: gpu.engine.release()
    syscalls.uninstall(drv)

@pytest.mark.parametrize("nv3", ["0-1:none"], indirect=True)
def test_hcq_bounce_fill_waits_for_a_third_devices_push_into_its_source(nv3):
  """Audit hw row 4: GPU 2 pushes into src on GPU 0 (P2P), then src bounces GPU 0 -> GPU 1 (no P2P between them). The
  bounce's fill on GPU 0 must wait for GPU 2's push (MultiGraph's fill waits), or with GPU 2 late it copies src's old
  bytes (-5) to GPU 1."""
  drv, d0, d1, d2 = nv3
  new = np.arange(N, dtype=np.float32)
  b2, src, t = _up(d2, new), _up(d0, np.full(N, -5.0, np.float32)), _up(d1, np.zeros(N, np.float32))
  g = MultiGraph([PeerCopy(d0, d2, src, b2, N * 4), PeerCopy(d1, d0, t, src, N * 4)])
  assert g.graphs is not None and list(g.bounces) == [1]   # (item 1, the 0 -> 1 copy, bounces; 2 -> 0 is a push)
  for d in (d0, d1, d2): d.synchronize()
  with held_until_the_host_waits(drv, 2): g.replay(); g.synchronize()
  np.testing.assert_array_equal(_down(d1, t), new)

@pytest.mark.parametrize("nv3", ["none"], indirect=True)
def test_hcq_replay_waits_for_an_eager_bounces_drain_by_a_device_outside_the_graph(nv3):
  """Audit hw row 5: an eager bounce GPU 0 -> GPU 2 fills GPU 0's slot 0 and GPU 2 (late) drains it; a graph of GPUs
  0 and 1 bouncing through the same slot must wait for that drain on the host (GPU 2 is not in the graph), or the
  eager copy's dst gets the graph's bytes (-7)."""
  drv, d0, d1, d2 = nv3
  a, z = np.arange(N, dtype=np.float32), np.full(N, -7.0, np.float32)
  pa, pz, t1, t2 = _up(d0, a), _up(d0, z), _up(d1, np.zeros(N, np.float32)), _up(d2, np.zeros(N, np.float32))
  g = MultiGraph([PeerCopy(d1, d0, t1, pz, N * 4)])
  assert g.graphs is not None and list(g.bounces) == [0]
  for d in (d0, d1, d2): d.synchronize()
  with held_until_the_host_waits(drv, 2):   # (GPU 2 drains once the replay waits for it on the host)
    d0.transfer_to(d2, t2, pa, N * 4)
    g.replay(); g.synchronize(); d2.synchronize()
  np.testing.assert_array_equal(_down(d2, t2), a)
  np.testing.assert_array_equal(_down(d1, t1), z)

@pytest.mark.parametrize("p2p", ["pcie", "none"])
@pytest.mark.parametrize("skip", [False, True])
def test_hcq_replay_on_amd_needs_its_cross_device_wait(monkeypatch, skip, p2p):
  """AMD mock: a copy into memory another GPU maps lands after every other queue ran (mock/amd/cp.py lands_late). The
  pushed copy sits in GPU 0's graph, the add reading it in GPU 1's: only GPU 1's graph wait on GPU 0's graph signal
  orders them. With the cross-device waits dropped (the test hook) the add reads dst's old bytes. Without P2P the fill
  into GPU 0's bounce slot (GTT GPU 1 maps) lands late the same way: GPU 1's drain must wait for it."""
  from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd
  from tests.runtime.test_amd_p2p import read
  drv = install_mock_amd("gfx1100", gpus=2, p2p=p2p)
  try:
    d0, d1, g, x, out = _amd_push_then_add()
    assert g.graphs is not None and list(g.bounces) == ([0] if p2p == "none" else [])
    d0.synchronize(); d1.synchronize()
    monkeypatch.setattr(HCQDevice, "skip_cross_wait", skip)
    with drv.lock:   # (both graphs queued before the engines look at either)
      g.replay()
    got = read(d1, out, x)
    g.synchronize()
    if skip: assert not np.array_equal(got, x) and (p2p == "none" or (got == -1).all())
    else: np.testing.assert_array_equal(got, x)
  finally: uninstall_mock_amd(drv)
