"""A dropped AMD graph (hcqrt/hcq.py _release_graph, hcqrt/amd/device.py free_persistent): its IBs and argument blocks
are unmapped only once the CP no longer reads them. The CP goes on through an IB after a release the host can see (a
RELEASE_MEM only queues its end-of-pipe write; the mock stalls the CP right after each release, kfd.py stall), so a
graph whose last releases sat inside its IB was freed while the CP still had to fetch them: a GPU page fault (or, with
the pages reused, another graph's packets run in its place)."""
import gc, struct
import pytest
from hcqrt.interface import GraphExec
from tests.runtime.test_amd_async import _program, _store42, mock_amd_device

@pytest.fixture(params=["gfx1100", "gfx942"])   # a PM4 compute queue, an AQL one (PM4-IBs between its dispatches)
def dev(request):
  with mock_amd_device(request.param, _store42) as d: yield d

def test_amd_dropped_graph_is_freed_only_after_the_cp_read_its_last_packet(dev):
  prog, buf = _program(dev), dev.allocator.alloc(64)
  g = dev.graph([GraphExec(prog, [buf], [], (1, 1, 1), (dev.wave_size, 1, 1))])
  dev.drv.release_stall_s = 0.3   # the CP falls behind after each release: the host frees meanwhile
  try:
    with dev.drv.held():   # (the CP sees the replay only once the graph is gone)
      g.replay()
      sig, last = g.sig, g._last[0]
      del g; gc.collect()
    dev.synchronize()   # the timeline is reached (the replay's first end release) while the CP is still at its tail
    # the graph signal, polled (not woken by its interrupt, which comes from the packet after it): reached while the CP
    # may still fetch what follows its release; were that in the graph's memory, this reap freed it under the CP
    sig.wait(last, 20.0)
    dev.synchronize()
  finally: dev.drv.release_stall_s = 0
  dev.drv.settle()   # raises the error a queue stopped on: the old code unmapped the IB under the CP (a page fault)
  assert all(q.error is None for q in dev.drv.queues.values()), [q.error for q in dev.drv.queues.values()]
  dev.synchronize()
  out = bytearray(4); dev.allocator.copyout(memoryview(out), buf)
  assert struct.unpack("<I", out)[0] == 42
  assert not dev._persistent_later, "the graph's memory was never freed once the GPU was past it"
