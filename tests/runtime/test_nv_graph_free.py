"""A dropped NV graph (hcqrt/hcq.py _release_graph, hcqrt/nv/device.py free_persistent): its finalizer never waits, on
any thread, and its pushbuffers and argument blocks are handed to a new graph only once the GPU is past the last replay.

The finalizer runs wherever a GC runs it, the mock GPU's own front-end thread included ("nvmock-pbdma" in latency mode,
hcqrt/mock/nv/gpfifo.py): a wait there waits for itself. The mock reads a pushbuffer as it is when the GPU gets to it
(held or late doorbells), so memory handed out too early runs the new owner's commands in the old graph's place."""
import gc
import numpy as np
import pytest
from conftest import mock_nv_device
from hcqrt import hcq
from hcqrt.interface import GraphCopy
from tests.held_gpu import wait_until_idle
from tests.runtime.test_nv_allocator_free import _free_inside_the_gpu

N = 4096

def _buffers(nv, k: int) -> list:
  a = nv.allocator
  bufs = [a.alloc(N) for _ in range(k)]
  for i, b in enumerate(bufs): a.copyin(b, memoryview(np.full(N, i + 1, np.uint8)))
  return bufs

def _read(nv, b) -> np.ndarray:
  out = np.empty(N, np.uint8); nv.allocator.copyout(memoryview(out), b)
  return out

def _nfree(nv) -> int: return sum(len(v) for v in nv._persistent_free.values())

@pytest.fixture
def short_waits(monkeypatch):
  # a wait that should not happen ends after 15 s instead of 30 (then the old code's recovery runs): shorter, yet far
  # above what the waits that must happen take on a loaded 2-core box (2 s timed out there in a full run)
  monkeypatch.setattr(hcq, "DEFAULT_TIMEOUT_S", 15.0)

def test_nv_graph_dropped_on_the_gpus_own_thread_never_waits(short_waits):
  """The last reference to a replayed graph goes inside the mock GPU's front end, before it runs the replay. Waiting
  there for the graph signal waits for this very thread: it timed out, recovered on the GPU's thread (whose bring-up
  waited for itself again), and the recovery filled in the timeline from the CPU, so the main thread's synchronize
  returned with no error while the copy never ran. The finalizer must return at once, list nothing free before the
  GPU is past the graph, and the copy must run."""
  with mock_nv_device() as nv:
    nv.wait_timeout_s = 15.0
    engine = nv.drv.gpus[0].engine
    x, y = _buffers(nv, 2)
    holder = [nv.graph([GraphCopy(y, x, N)])]
    seen = {}
    def drop():
      before = _nfree(nv)
      holder.clear(); gc.collect()
      seen["listed_free"] = _nfree(nv) - before
    engine.latency_s = 1e-3   # the doorbell runs later, on the pbdma thread
    errors = _free_inside_the_gpu(engine, drop)
    holder[0].replay()
    nv.synchronize()
    engine.latency_s = 0.0
    assert errors == [], errors[:1]
    assert seen == {"listed_free": 0}, "the graph's memory was listed free before the GPU ran the graph"
    assert (_read(nv, y) == 1).all(), "the replay's copy did not run"

def test_nv_dropped_graph_memory_is_reused_only_after_the_gpu_passed_it(short_waits):
  """A graph replayed while the GPU holds its doorbell, then dropped: a new graph of the same shape built meanwhile gets
  other memory (were it handed the old pushbuffer, its commands would run in the old replay's place, as the mock reads
  the pushbuffer when the doorbell is taken up); once the GPU is past, the next graph reuses the freed memory."""
  with mock_nv_device() as nv:
    engine = nv.drv.gpus[0].engine
    x, y, w, z = _buffers(nv, 4)
    g = nv.graph([GraphCopy(y, x, N)])
    with engine.held():
      g.replay()
      old = g.copyq._bound[1]   # (a copy-only graph: one pushbuffer, on the copy queue)
      del g; gc.collect()       # (the old code waited here for a GPU that cannot run: timeout, recovery)
      g2 = nv.graph([GraphCopy(z, w, N)])
      assert g2.copyq._bound[1] != old, "the dropped graph's pushbuffer was reused before the GPU ran it"
    nv.synchronize()
    assert (_read(nv, y) == 1).all(), "the dropped graph's replay did not run its own copy"
    g3 = nv.graph([GraphCopy(z, w, N)])
    assert g3.copyq._bound[1] == old, "the freed pushbuffer was not reused once the GPU was past it"
    g3.replay(wait=True)
    assert (_read(nv, z) == 3).all()
    del g2

def test_nv_graph_memory_is_freed_when_its_graph_signal_went_first():
  """A MultiGraph hands each graph its signal and frees it itself (multi_graph._free_graph_signals, once reached); a
  new_signal may then hand the slot out again (value 0) before the graph's blocks are reaped. The blocks' condition on
  that signal must count it as reached (it was freed only once reached), not read the new owner's value: they would
  never be listed free (a leak per dropped multi-device graph)."""
  with mock_nv_device() as nv:
    x, y = _buffers(nv, 2)
    sig = nv.new_signal(name="graph")
    g = hcq.GraphReplay(nv, [GraphCopy(y, x, N)], sig=sig)
    g.replay(wait=True)
    wait_until_idle(nv.drv)   # (the graph signal is released after the timeline that wait=True waits for)
    last, before = g._last[0], _nfree(nv)
    assert sig.reached(last)
    del g; gc.collect()
    nv.signals.free_when([sig], [(sig, last)])   # (what the MultiGraph's finalizer does)
    again = nv.new_signal(name="next owner")     # reaps: the graph signal's slot goes to a new owner, value 0
    assert again.base == sig.base and again.value == 0
    nv.synchronize()
    assert _nfree(nv) > before, "the graph's memory was never listed free"

def test_signal_freed_by_one_deferred_entry_counts_as_reached_by_another():
  """SignalPool.free_when entries that wait on the same graph signal (a graph's timestamp signals, its MultiGraph's
  graph signals): once one entry freed it and its slot went to a new owner, the other must not read that owner's value."""
  from hcqrt.cpu.hcq import CPUHCQDevice
  pool = CPUHCQDevice().signals
  g, ts = pool.new(name="graph"), pool.new(name="ts")
  g.value = 5   # the graph's last replay ended
  pool.free_when([g], [(g, 5)])
  again = pool.new()   # reaps: g freed, its slot handed out again (value 0)
  assert again.base == g.base and again.value == 0
  pool.free_when([ts], [(g, 5)])
  in_use = pool.count
  pool.new()
  assert pool.count == in_use, "a signal waiting on a freed (reached) graph signal was never freed"

def test_two_frees_of_one_signal_at_once_give_its_slot_back_once():
  """A MultiGraph's free_when entry sits in every device's pool: two threads' new_signal may reap it at once, and a
  finalizer may free a signal again on the thread already freeing it. The second free arriving while the first gives
  the slot back (here: from inside the pool's release) must do nothing; the old test-then-reset listed the slot twice,
  so the next two new signals shared one slot."""
  from hcqrt.cpu.hcq import CPUHCQDevice
  pool = CPUHCQDevice().signals
  s = pool.new(name="graph")
  release, calls = s._release, []
  def racing(sig):
    calls.append(sig)
    if len(calls) == 1: sig.free()   # the second free, inside the first
    release(sig)
  s._release = racing
  s.free()
  a, b = pool.new(), pool.new()
  assert a.base != b.base, "one signal slot handed to two owners"
