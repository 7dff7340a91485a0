"""hcqrt/multi_graph.py: one graph replay across devices. Segment packing follows the items' buffer dependencies (an
item never runs before one that touched its buffers earlier in the capture, a write after a read included), each
device's launches go to its own sub-graph, replay patches reach the right sub-graph item or copy. Fake devices record
the order things ran in; the real devices are in tests/test_data_parallel.py and test_multi_device.py.
"""
import numpy as np
import pytest
from hcqrt.interface import GraphExec
from hcqrt.multi_graph import MultiGraph, PeerCopy

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
