"""NV allocator frees (hcqrt/nv/device.py NVAllocator) from where finalizers run: any thread, inside any call.

A frontend Buffer's finalizer (frontend/buffer.py) calls allocator.free wherever a GC runs it, including the thread
that executes the mock GPU's command stream (hcqrt/mock/nv/gpfifo.py: the "nvmock-pbdma" thread in latency mode, or
the host's own thread inside a doorbell). Memory going back to RM/UVM must wait for the GPU; a free there must not
(the GPU it would wait for is the caller), so the release waits for the next allocator call or synchronize."""
import numpy as np
import pytest
from conftest import mock_nv_device
from hcqrt.nv.device import NVBuffer
from hcqrt.nv.rmclient import NVError

def _free_inside_the_gpu(engine, frees) -> list:
  """Run `frees()` once, inside the next doorbell the mock GPU acts on (on whatever thread runs it), before its work;
  returns the list that collects what it raised."""
  errors, real = [], engine.run_all
  def run_all(*a, **kw):
    nonlocal frees
    if frees is not None:
      f, frees = frees, None
      try: f()
      except BaseException as e: errors.append(e)
    return real(*a, **kw)
  engine.run_all = run_all
  return errors

@pytest.mark.parametrize("late", [True, False], ids=["pbdma-thread", "inside-doorbell"])
@pytest.mark.parametrize("evicted", [False, True], ids=["too-big-to-cache", "evicted"])
def test_nv_free_on_the_gpus_own_thread_never_waits_and_releases_after_the_gpu(late, evicted):
  """A buffer still read by a queued copy is freed by a finalizer run inside the mock GPU's front end (lock free, no
  allocator call under way). Giving it back to RM/UVM there synchronizes with the GPU that is waiting for this very
  free (a 30 s timeout, then the memory unmapped under the copy); the free must return at once, the copy must still
  read the buffer (the mock faults on unmapped memory), and the memory goes back to the driver at the next call."""
  with mock_nv_device() as nv:
    a, gpu, engine = nv.allocator, nv.drv.gpus[0], nv.drv.gpus[0].engine
    n = 2 << 20
    a.cache_limit = n if evicted else n - 1   # evicted: one buffer fits, the second free evicts the first (src)
    src, out = a.alloc(n), a.alloc(n)
    other = a.alloc(n) if evicted else None
    data = np.arange(n, dtype=np.uint8)
    a.copyin(src, memoryview(data))
    baseline = gpu.vidmem_used
    engine.latency_s = 1e-3 if late else 0.0   # late: the pbdma thread runs the doorbell; else the host, inside it
    errors = _free_inside_the_gpu(engine, lambda: [a.free(b) for b in (src, other) if b is not None])
    a.transfer(out, src, n)
    nv.synchronize()
    assert errors == [], errors[:1]
    engine.latency_s = 0.0
    got = np.empty(n, np.uint8); a.copyout(memoryview(got), out)   # (an allocator call: the release happens by now)
    assert (got == data).all(), "the copy read memory freed under it"
    assert src.freed and gpu.vidmem_used == baseline - n, "the freed buffer did not go back to the driver"
    if evicted: assert a.cached_bytes == n and a.alloc(n).va == other.va

def _inside_an_allocation(monkeypatch, a, during) -> None:
  """Patch the NV allocator `a` so that its next cache lookup runs `during()` (as a finalizer a GC ran there would)."""
  real_take = a._take
  def take(key):
    monkeypatch.setattr(a, "_take", real_take)
    during()
    return real_take(key)
  monkeypatch.setattr(a, "_take", take)

@pytest.mark.parametrize("second", ["free", "free_later"])
def test_nv_double_free_while_both_frees_are_deferred_is_reported(monkeypatch, second):
  """Both frees land inside an allocator call (deferred: a Buffer's finalizer then a second free, or a program's
  finalizer's free_later): the second is a double free and says so, as an inline one does; the first still counts
  (the memory is cached once, and reused once)."""
  with mock_nv_device() as nv:
    a = nv.allocator
    buf = a.alloc(4096)
    def frees():
      a.free(buf)
      with pytest.raises(RuntimeError, match="double free of <NVBuffer 4096 bytes"): getattr(a, second)(buf)
    _inside_an_allocation(monkeypatch, a, frees)
    a.alloc(4)
    nv.synchronize()
    held = [b.va for items in a.cache.values() for b in items]
    assert held.count(buf.va) == 1 and a.cached_bytes == sum(b.size for items in a.cache.values() for b in items)
    first, again = a.alloc(4096), a.alloc(4096)
    assert first.va == buf.va and again.va != buf.va

def test_nv_release_that_meets_a_fault_is_retried_not_lost():
  """Memory the cache let go waits on `_evicted` for a caller that may wait; that caller's gpu_free synchronizes first,
  and where the device faulted meanwhile (a copy from an unmapped address: an MMU fault, the mock's "GPU page fault")
  the synchronize raises the fault. The memory must still go back to the driver at a later call, not be dropped."""
  with mock_nv_device() as nv:
    a, gpu, engine = nv.allocator, nv.drv.gpus[0], nv.drv.gpus[0].engine
    baseline = gpu.vidmem_used
    a.cache_limit = 0   # nothing is cached: every free is a release
    dst, big = a.alloc(4096), a.alloc(2 << 20)
    a.free(big)   # queued on _evicted (a free never waits)
    engine.latency_s = 1e-3   # the fault comes on the GPU's own thread, after the doorbell returned
    nv.submit_timeline(nv.after_timeline(nv.hw_copy_queue()).copy(dst.va, 0x7000_0000_0000, 4096))
    assert a._evicted, "the test needs the release still pending when the fault comes"
    with pytest.raises(NVError, match="faulted"): nv.synchronize()   # (the release's own synchronize reports it)
    engine.latency_s = 0.0
    nv.synchronize()   # recovered: the release goes through now
    assert gpu.vidmem_used == baseline + 4096, "memory released while the device faulted was never given back"

class _RacyBuffer(NVBuffer):
  """A record whose first `freed` check lets another free of it land before the mark: what a thread switch right after
  the check does when two threads free one record (frees come from finalizers and callers on any thread)."""
  def __init__(self, *a, other_free=None, **kw):
    self._freed, self._other_free = False, other_free
    super().__init__(*a, **kw)
  @property   # type: ignore[override]
  def freed(self) -> bool:
    seen = self._freed
    if (f := self._other_free) is not None: self._other_free = None; f(self)
    return seen
  @freed.setter
  def freed(self, v: bool) -> None: self._freed = v

def test_nv_two_frees_of_one_record_at_once_hand_the_memory_out_once():
  """Two frees of one record interleaved (check, other free, mark): one must fail as a double free; the memory is cached
  once, so two later allocations do not share it (both passing would cache it twice: two owners of one memory)."""
  with mock_nv_device() as nv:
    a = nv.allocator
    b = a.alloc(4096)
    errors = []
    def other(buf):
      try: a.free(buf)
      except RuntimeError as e: errors.append(e)
    racy = _RacyBuffer(b.va, b.nbytes, b.size, b.handle, b.host, b.sysmem, other_free=other)
    try: a.free(racy)
    except RuntimeError as e: errors.append(e)
    nv.synchronize()
    assert len(errors) == 1 and "double free" in str(errors[0]), errors
    assert a.alloc(4096).va != a.alloc(4096).va, "one memory handed to two allocations"

def test_nv_synchronize_timeout_bounds_the_waits_of_its_releases():
  """synchronize(timeout_s) first gives back what the cache let go (reap), and each release waits for the GPU: those
  waits must end at the caller's timeout too, not the device's own (30 s by default), when the GPU does not finish."""
  from hcqrt.hcq import SignalTimeout
  with mock_nv_device() as nv:
    a = nv.allocator
    a.cache_limit = 0   # nothing is cached: the free below is a release, queued for a caller that may wait
    nv.wait_timeout_s = 5.0   # (the device's own timeout: what the releases waited for before)
    gate = nv.new_signal(name="gate")
    nv.submit_timeline(nv.after_timeline(nv.hw_compute_queue()).wait(gate, 1))   # the GPU does not finish
    a.free(a.alloc(4096))
    assert a._evicted, "the test needs the release still pending"
    try:
      with pytest.raises(SignalTimeout, match=r"timed out after 0\.25 s"): nv.synchronize(timeout_s=0.25)
    finally: gate.value = 1
