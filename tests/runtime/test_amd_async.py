"""The mock GPU runs queued work later, on its own engine thread, and wakes WAIT_EVENTS only with the interrupts the
hardware raises: the backend must wait before freeing, and ask for interrupts it will get."""
import contextlib, struct, time
import numpy as np
import pytest
from hcqrt.hcq import SignalTimeout
from hcqrt.interface import GraphExec
from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd, set_executor
from hcqrt.amd.device import AMDDevice, AMDProgram

@contextlib.contextmanager
def mock_amd_device(arch: str, executor=None):
  """An AMDDevice on a mock `arch` GPU under Linux 6.12's KFD; `executor` (e.g. _store42) stands in for the emulator
  while it lives."""
  drv = install_mock_amd(arch, kernel="6.12")
  d = AMDDevice("AMD"); d.drv = drv
  prev = set_executor(executor) if executor is not None else None
  try: yield d
  finally:
    if executor is not None: set_executor(prev)
    uninstall_mock_amd(drv)

@pytest.fixture(params=["gfx1100", "gfx942"])
def dev(request):
  with mock_amd_device(request.param) as d: yield d

def _store42(d, vm):   # stand-in executor: the kernel stores 42 through its first argument
  vm.write(struct.unpack("<Q", bytes(vm.read(d.kernarg, 8)))[0], struct.pack("<I", 42))

def _program(dev):
  props = (1 << 3) | ((1 << 10) if dev.gfx.wave32 else 0)
  desc = struct.pack("<III4xq20xIIIHH4x", 0, 0, 8, 0, 0, 0x60AF0041, 2 << 1 | 1 << 7, props, 0)
  return AMDProgram(dev, "k", b"\x00\x00\xb0\xbf" * 16, desc, [(0, 8)])

@pytest.fixture
def store42():
  prev = set_executor(_store42); yield; set_executor(prev)

def test_the_doorbell_only_queues_work(dev):
  """Held (MockKFD.held: the CP sees the doorbell only at release) the work has not run when submit returns; released,
  the engine thread runs it and the host's wait sees it."""
  s = dev.new_signal(0)
  with dev.drv.held():
    dev.hw_compute_queue().signal(s, 1).submit(dev)
    time.sleep(0.1)   # (only a broken hold can make this fail: the engine thread would have run it by now)
    assert s.value == 0   # not run yet: the host must wait for it
  dev.wait_signal(s, 1, 5)

def test_release_keeps_holding_later_doorbells_when_asked(dev):
  """MockKFD.release(keep_holding=True) lets the CP see what was held, and holds the doorbells rung after it."""
  s, t = dev.new_signal(0), dev.new_signal(0)
  dev.drv.hold = True
  try:
    dev.hw_compute_queue().signal(s, 1).submit(dev)
    assert dev.drv.release(keep_holding=True) == 1 and dev.drv.hold
    dev.wait_signal(s, 1, 5)
    dev.hw_compute_queue().signal(t, 1).submit(dev)
    time.sleep(0.1)   # (as above)
    assert t.value == 0
  finally: dev.drv.hold = False   # (ends the hold and releases what it held)
  dev.wait_signal(t, 1, 5)

def test_a_timed_wait_on_held_work_times_out(dev, monkeypatch):
  """A host wait that needs held work does not hang: AMDDevice.wait_signal's timeout raises the runtime's SignalTimeout
  (naming the signal and the last value), and the work still runs once released. (The runtime's recovery after a
  timeout is its own part: skipped here, its new queues' doorbells would be held too.)"""
  monkeypatch.setattr(dev, "recover", lambda: "recovery skipped by the test")
  s = dev.new_signal(0)
  with dev.drv.held():
    dev.hw_compute_queue().signal(s, 1).submit(dev)
    with pytest.raises(SignalTimeout, match=r"timed out after 0.2 s waiting for .* to reach 1; last completed value is 0"): dev.wait_signal(s, 1, 0.2)
  dev.wait_signal(s, 1, 5)

def test_synchronize_is_woken_by_the_interrupt_not_the_timeout(dev, store42):
  dev.drv.latency_s = 0.002   # the CP starts after the host is asleep in WAIT_EVENTS
  prog, buf = _program(dev), dev.allocator.alloc(64)
  for _ in range(20): prog(buf, global_size=(1, 1, 1), local_size=(dev.wave_size, 1, 1), wait=True)
  assert dev.event_id == 1 and "WAIT_EVENTS" in dev.drv.calls   # the first signal event (the kernel reserves id 0)
  assert dev.drv.missed_wakeups == 0   # INT_SEL 3 (no interrupt): the slot is written, nothing wakes the wait

def test_free_of_a_buffer_in_flight_waits_for_the_gpu(dev, store42):
  prog, buf, keep = _program(dev), dev.allocator.alloc(64), dev.allocator.alloc(64)
  with dev.drv.held():   # (the CP sees the launch only after the free)
    prog(buf, global_size=(1, 1, 1), local_size=(dev.wave_size, 1, 1))   # no wait: the kernel is still queued
    dev.allocator.free(buf)   # unmapping now would fault the kernel's store
  prog(keep, global_size=(1, 1, 1), local_size=(dev.wave_size, 1, 1), wait=True)
  out = bytearray(4); dev.allocator.copyout(memoryview(out), keep)
  assert struct.unpack("<I", out)[0] == 42 and all(q.error is None for q in dev.drv.queues.values())

def test_graph_replays_back_to_back_on_an_async_gpu(dev, store42):
  dev.drv.latency_s = 0.01
  prog = _program(dev)
  bufs = [dev.allocator.alloc(64) for _ in range(3)]
  g = dev.graph([GraphExec(prog, [bufs[0]], [], (1, 1, 1), (dev.wave_size, 1, 1))])
  for b in bufs: g.replay(bufs={(0, 0): b})
  dev.synchronize()
  for b in bufs:
    out = bytearray(4); dev.allocator.copyout(memoryview(out), b)
    assert struct.unpack("<I", out)[0] == 42
  assert np.all([q.error is None for q in dev.drv.queues.values()])

def test_the_dispatch_acquire_writes_the_l2_back_before_invalidating(dev, store42):
  # a dirty line in the L2 (an earlier GPU write to cached memory) must survive the next launch's cache invalidate
  buf = dev.allocator.alloc(64)
  dev.drv.vm.write_cached(buf.va + 32, struct.pack("<I", 7))
  _program(dev)(buf, global_size=(1, 1, 1), local_size=(dev.wave_size, 1, 1), wait=True)
  assert dev.drv.vm.read32(buf.va + 32) == 7

def test_gpu_waits_past_2_pow_32_are_refused_by_name(dev):
  s = dev.new_signal(0)
  for q in (dev.hw_compute_queue(), dev.hw_copy_queue()):
    with pytest.raises(ValueError, match=r"2\*\*32.*low 32 bits"): q.wait(s, 1 << 32)
    q.wait(s, 5)
    with pytest.raises(ValueError, match=r"2\*\*32"): q.update_wait(0, value=(1 << 32) + 5)

def test_graph_replay_waits_for_the_value_its_stream_writes_last(dev, store42):
  # The CP stalls after each release: the graph signal is visible while the previous replay's stream still has its
  # timeline release to run. A replay that rewrote the stream then would let that release write the new timeline value.
  dev.drv.release_stall_s = 0.05
  prog = _program(dev)
  bufs = [dev.allocator.alloc(64) for _ in range(2)]
  g = dev.graph([GraphExec(prog, [bufs[0]], [], (1, 1, 1), (dev.wave_size, 1, 1))])
  for b in bufs: g.replay(bufs={(0, 0): b})
  dev.synchronize()   # must mean the second replay has run
  assert [dev.drv.vm.read32(b.va) for b in bufs] == [42, 42]   # (read as the GPU sees memory now, while the CP may stall)
  dev.drv.release_stall_s = 0

@pytest.fixture
def gfx11_pm4(monkeypatch):
  """An RX 7900 XTX on a PM4 compute queue (the gfx11 cache rule is about PM4's ACQUIRE_MEM; AQL packets' fences do
  that work, and gfx9 keeps its full write-back + invalidate before every launch)."""
  monkeypatch.setenv("AMD_AQL", "0")
  drv = install_mock_amd("gfx1100", kernel="6.12")
  d = AMDDevice("AMD"); d.drv = drv
  yield d
  uninstall_mock_amd(drv)

def test_gfx11_invalidates_gl2_and_icache_only_after_a_wait(gfx11_pm4):
  dev = gfx11_pm4
  assert not dev.aql
  from ioctl_defs.amd import pm4
  prog, s = _program(dev), dev.new_signal(0)
  q = dev.hw_compute_queue().exec(prog, prog.fill_kernargs([0]), (1, 1, 1), (32, 1, 1)).exec(prog, prog.fill_kernargs([0]), (1, 1, 1), (32, 1, 1))
  q.wait(s, 0).exec(prog, prog.fill_kernargs([0]), (1, 1, 1), (32, 1, 1))
  hdr = pm4.packet(pm4.ACQUIRE_MEM, *([0] * 7))[0]
  gcrs = [q.q[i + 7] for i in range(len(q.q)) if q.q[i] == hdr]
  full = pm4.GCR_GLI_INV_ALL | pm4.GCR_GL2_INV | pm4.GCR_GL2_WB
  assert [g & full for g in gcrs] == [full, 0, full]   # GL2 written back with every invalidate, and only where needed
  assert all(g & pm4.GCR_GLK_INV and g & pm4.GCR_GLV_INV for g in gcrs)
