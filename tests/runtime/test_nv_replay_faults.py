"""Graph replay against a front end that runs later than the doorbell (issue 22, N3), and channel faults reported as
they happen, with the device usable afterwards (N4)."""
import re, time
import numpy as np
import pytest
from conftest import mock_nv_device
from hcqrt.interface import GraphExec
from hcqrt import syscalls
from hcqrt.hcq import GraphReplay, SignalTimeout
from hcqrt.mock.nv import MockNV, GPUError
from hcqrt.mock.nv import gpfifo as G
from hcqrt.nv.device import NVDevice
from hcqrt.nv.rmclient import NVError
from compiler.assemble.ptx_assembler import assemble_ptx
from hw_tests import kernels as K

@pytest.fixture
def nv():
  with mock_nv_device() as dev: yield dev

def prog(dev, name, src): return dev.program(name, assemble_ptx(K.head(dev.arch) + src, dev.arch))

def test_mock_front_end_refetches_after_a_mid_segment_release(nv, monkeypatch):
  """The mock's model: after a release in the middle of a pushbuffer segment, what follows is fetched again later, so
  a CPU rewrite made once the release is visible changes what runs."""
  monkeypatch.setattr(G, "RELEASE_STALL_S", 0.05)
  a, b = nv.new_signal(name="a"), nv.new_signal(name="b")
  q = nv.hw_compute_queue().signal(a, 1).signal(b, 5)
  q.bind(nv); q.submit(nv)
  a.wait(1)
  q.update_signal(1, value=7)           # the GPU has not fetched the second release yet
  b.wait(7, 2.0)
  assert b.value == 7

def test_graph_replay_never_releases_the_timeline_early(nv, monkeypatch):
  """Replay k+1 rewrites the bound pushbuffer once replay k's graph signal lands. If the device timeline were released
  after that signal (the old order), replay k's tail would release replay k+1's timeline value before k+1 ran."""
  monkeypatch.setattr(G, "RELEASE_STALL_S", 0.1)
  inc = prog(nv, "inc", K.INC)
  buf = nv.allocator.alloc(4)
  nv.allocator.copyin(buf, memoryview(np.zeros(1, np.uint32)))
  releases = []   # (value the timeline got, kernels launched by then)
  real = G.Channel.semaphore
  def spy(self, data, at):
    real(self, data, at)
    releases.append((nv.timeline_signal.value, self.engine.launches))
  monkeypatch.setattr(G.Channel, "semaphore", spy)
  g = GraphReplay(nv, [GraphExec(inc, [buf], [], (1, 1, 1), (1, 1, 1))])
  g.replay()
  v1 = nv.timeline_value - 1
  g.replay()
  v2 = nv.timeline_value - 1
  nv.synchronize()
  got = np.zeros(1, np.uint32); nv.allocator.copyout(memoryview(got), buf)
  assert got[0] == 2
  first = {}
  for v, n in releases: first.setdefault(v, n)
  assert v1 in first and v2 in first
  assert first[v2] > first[v1]   # the timeline reached v2 only after replay 2's kernel launched (and, RELEASE_WFI, ran)

# ---------------------------------------------------------------- N4: faults reported as they happen, recovery
BAD = """.visible .entry bad()
{
  .reg .b64 %rd<2>; .reg .b32 %r<2>;
  mov.u64 %rd1, 4096; mov.u32 %r1, 1; st.global.u32 [%rd1], %r1;
  ret;
}"""

# spins until *flag != 0 (a kernel that never completes unless the CPU writes the flag)
SPIN = """.visible .entry spin(.param .u64 flag)
{
  .reg .pred %p<2>; .reg .b32 %r<2>; .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [flag];
LOOP:
  ld.volatile.global.u32 %r1, [%rd1]; setp.eq.u32 %p1, %r1, 0; @%p1 bra LOOP;
  ret;
}"""

def run_add(dev):
  add = prog(dev, "add", K.ADD)
  x = np.arange(256, dtype=np.float32)
  a, o = dev.allocator.alloc(1024), dev.allocator.alloc(1024)
  dev.allocator.copyin(a, memoryview(x))
  add(o, a, a, vals=(1, 256), global_size=(1, 1, 1), local_size=(256, 1, 1), wait=True)
  out = np.zeros(256, np.float32); dev.allocator.copyout(memoryview(out), o)
  return out, 2 * x

def test_fault_is_reported_by_name_before_the_wait_times_out(nv, monkeypatch):
  """A kernel that page-faults after the doorbell returned (the GPU runs it later): the wait loop finds RM's notifier.
  The fault ends the wait itself (Signal.wait polls raise_if_faulted): no timeout came first, which synchronize would
  also turn into this NVError, chained to the SignalTimeout (`from e`)."""
  monkeypatch.setattr(G, "RELEASE_STALL_S", 0.05)   # the launch runs after the doorbell, on the mock's own thread
  bad = prog(nv, "bad", BAD)
  nv.wait_timeout_s = 20.0   # (were the notifier not polled, the wait would end by this timeout)
  with pytest.raises(NVError, match=r"compute channel faulted: ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT \(Xid 31, info16 0x1") as e:
    bad(global_size=(1, 1, 1), local_size=(1, 1, 1), wait=True)
  chain = [e.value.__cause__, e.value.__context__]
  assert not any(isinstance(c, TimeoutError) for c in chain), f"the fault was found only after the wait timed out: {chain}"
  assert "page fault" in nv.drv.faults[-1] and "kernel bad" in nv.drv.faults[-1]
  got, want = run_add(nv)   # the device recovered
  assert np.array_equal(got, want)

def test_wait_polls_the_notifier(nv, monkeypatch):
  """Without the poll in Signal.wait the same fault only surfaces at the wait timeout."""
  import hcqrt.hcq as H
  monkeypatch.setattr(G, "RELEASE_STALL_S", 0.05)
  monkeypatch.setattr(type(nv), "raise_if_faulted", lambda self: None)   # the old wait loop
  bad = prog(nv, "bad", BAD)
  nv.wait_timeout_s = 0.6
  t = time.perf_counter()
  with pytest.raises((NVError, H.SignalTimeout)): bad(global_size=(1, 1, 1), local_size=(1, 1, 1), wait=True)
  assert time.perf_counter() - t >= 0.6

def test_hung_kernel_times_out_and_the_device_recovers(nv):
  spin = prog(nv, "spin", SPIN)
  flag = nv.allocator.alloc(4)
  nv.allocator.copyin(flag, memoryview(np.zeros(1, np.uint32)))
  gate = nv.new_signal(name="gate")
  q = nv.hw_compute_queue().wait(nv.timeline_signal, nv.timeline_value - 1).wait(gate, 1)
  q.exec(spin, spin.fill_kernargs([flag]), (1, 1, 1), (1, 1, 1)).signal(nv.timeline_signal, nv.timeline_value).submit(nv)
  nv.timeline_value += 1
  gate.value = 1            # the GPU (the mock's poller) starts the kernel, which never ends
  t = time.perf_counter()
  with pytest.raises(SignalTimeout, match="recovered"): nv.synchronize(timeout_s=0.5)
  assert time.perf_counter() - t < 10
  got, want = run_add(nv)   # new work on the same device runs, correctly
  assert np.array_equal(got, want)

def test_notifier_carries_the_engine_and_every_channel_of_the_group_is_told(nv):
  with pytest.raises(GPUError, match="compute channel faulted.*copy channel faulted"):   # recover() read both notifiers
    nv.hw_copy_queue().copy(0x12340000, nv.timeline_signal.va, 8).submit(nv)
  assert "page fault" in nv.drv.faults[-1]

def test_notifier_info16_and_tsg_scope_in_the_mock():
  from hcqrt.mock.nv import rm as R
  with syscalls.installed(MockNV()):
    dev = NVDevice("NV")
    seen = []
    real = NVDevice.recover
    def spy(self):
      seen.extend(self.channel_errors()); return real(self)
    dev.recover = spy.__get__(dev)
    with pytest.raises(GPUError): dev.hw_copy_queue().copy(0x12340000, dev.timeline_signal.va, 8).submit(dev)
    assert len(seen) == 2 and all("Xid 31" in e and "status 0xffff" in e for e in seen)
    assert all(f"info16 {R.NV2080_ENGINE_TYPE_COPY0:#x}" in e for e in seen)

def test_notifier_is_zeroed_when_rm_does_not_clear_sysmem():
  drv = MockNV(); drv.init_sysmem = False   # NVreg_InitializeSystemMemoryAllocations=0: new sysmem holds old bytes
  with syscalls.installed(drv):
    dev = NVDevice("NV")
    assert dev.channel_errors() == []
    got, want = run_add(dev)
    assert np.array_equal(got, want)

def test_recover_gives_back_the_old_channels_memory(nv):
  def live(): return sum(1 for objs in nv.drv.clients.values() for o in objs.values() if o.kind in ("sysmem", "vidmem"))
  before, unmapped = live(), []
  real = syscalls.munmap
  def spy(addr, n): unmapped.append(n); return real(addr, n)
  import hcqrt.nv.device as D
  old = D.syscalls.munmap
  D.syscalls.munmap = spy
  try: nv.recover()
  finally: D.syscalls.munmap = old
  assert live() == before
  assert unmapped.count(D.CHANNEL_VA_BYTES) == 2

def test_sm_version_decoding():
  from hcqrt.nv.device import sm_from_version
  assert [sm_from_version(v) for v in (0x800, 0x806, 0x809, 0x900, 0xA00, 0xA03, 0xC00, 0xA04)] == [80, 86, 89, 90, 100, 103, 120, 120]
  for bad in (0x350, 0x0, 0x90A):
    with pytest.raises(RuntimeError, match="SM_VERSION"): sm_from_version(bad)

def _recover_counting(nv) -> tuple[str, list[int]]:
  import hcqrt.nv.device as D
  unmapped, real = [], D.syscalls.munmap
  def spy(addr, n): unmapped.append(n); return real(addr, n)
  D.syscalls.munmap = spy
  try: return nv.recover(), unmapped
  finally: D.syscalls.munmap = real

def test_recover_keeps_notifiers_when_the_group_free_fails(nv):
  import hcqrt.nv.device as D
  old_notifiers = [n.handle for n, _ in nv._chan_memory]
  old_group = nv.hgroup
  nv.drv.fail_free["group"] = "NV_ERR_GPU_IN_FULLCHIP_RESET"   # RM refuses the free: the old channels live on
  msg, unmapped = _recover_counting(nv)
  assert "freeing the channel group failed" in msg and "NV_ERR_GPU_IN_FULLCHIP_RESET" in msg and "kept (leaked)" in msg
  objs = nv.drv.clients[nv.rm.root]
  assert old_group in objs and all(h in objs and not objs[h].data.get("freed") for h in old_notifiers)
  assert D.CHANNEL_VA_BYTES not in unmapped
  # the old channels may live on: no new channels (they would share nothing, but their first release would move the
  # timeline past the old channels' work), and a second recovery says so again
  assert nv.chan_slot == 0 and nv.chan_handles and "did not come back" in nv.recover()

def test_recover_with_a_leaked_group_completes_nothing_and_later_waits_fail(nv):
  """RM would not free the channel group, so its channels may still run the work queued on them and write the buffers
  it names. Filling in its promised values from the CPU (the old recovery) made a wait pass over that work, and a
  gpu_free or a cache reuse could then hand its memory to a new owner: the values stay as the GPU left them, and every
  later wait, synchronize, submit and allocation fails naming the device and that it did not come back."""
  a = nv.allocator
  kept = a.alloc(4096)
  gate = nv.new_signal(name="gate")
  nv.submit_timeline(nv.after_timeline(nv.hw_copy_queue()).wait(gate, 1).copy(kept.va, nv.timeline_signal.va, 8))   # parked
  v, done = nv.timeline_value - 1, nv.timeline_signal.value
  a.free(kept)   # (in the cache: a later alloc of this size would hand it over)
  nv.drv.fail_free["group"] = "NV_ERR_GPU_IN_FULLCHIP_RESET"
  try:
    msg = nv.recover()
    assert nv.timeline_signal.value == done < v   # not filled in from the CPU
    assert "did not come back" in msg and not re.search(r"\bNV\b", msg)   # (callers put the name first: one name, once)
    lost = r"^NV: (?!.*\bNV\b).*did not come back: RM would not free its channel group"
    with pytest.raises(NVError, match=lost): nv.timeline_signal.wait(v, 20.0)   # at once, not a timeout, not a pass
    with pytest.raises(NVError, match=lost): nv.synchronize()
    with pytest.raises(NVError, match=lost): a.alloc(4096)
    with pytest.raises(NVError, match=lost): nv.hw_compute_queue().signal(gate, 2).submit(nv)
  finally: gate.value = 1   # (let the parked copy finish on the mock)

def test_recover_keeps_ctx_va_when_uvm_unregister_fails(nv):
  import hcqrt.nv.device as D
  h = nv.chan_handles[0]   # unregister it behind recover's back: UVM then refuses with NV_ERR_INVALID_CHANNEL
  nv.rm.uvm(nv.uvmfd, "UVM_UNREGISTER_CHANNEL", gpuUuid={"uuid": list(nv.uuid)}, hClient=nv.rm.root, hChannel=h)
  msg, unmapped = _recover_counting(nv)
  assert "UVM_UNREGISTER_CHANNEL" in msg and "kept (leaked)" in msg
  assert unmapped.count(D.CHANNEL_VA_BYTES) == 1   # only the other channel's range is given back

def test_full_ring_wait_reports_a_fault_without_the_whole_timeout(nv, monkeypatch):
  """A faulted channel never drains its GPFIFO: push's ring-full wait reads the error notifiers as Signal.wait does."""
  nv.wait_timeout_s = 20.0
  bad = prog(nv, "bad", ".visible .entry bad()\n{\n  .reg .b64 %rd<2>; .reg .b32 %r<2>;\n  mov.u64 %rd1, 4096; mov.u32 %r1, 1;\n"
                        "  st.global.u32 [%rd1], %r1;\n  ret;\n}")
  ch, gate = nv.compute_ch, nv.new_signal(name="gate")
  nv.hw_compute_queue().wait(gate, 1).submit(nv)           # the channel parks here ...
  bad(global_size=(1, 1, 1), local_size=(1, 1, 1))          # ... so this launch faults later, not at its doorbell
  gate.value = 1
  t = time.perf_counter()
  while not nv.channel_errors() and time.perf_counter() - t < 10: time.sleep(0.001)   # the mock's poller ran it
  assert nv.channel_errors()
  import hcqrt.nv.device as D
  monkeypatch.setattr(ch, "pending", lambda: D.GPFIFO_ENTRIES - 1)   # as if the ring stays full
  with pytest.raises(NVError, match="faulted"): ch.push(0, 0)   # not a TimeoutError after wait_timeout_s

def test_a_recovery_that_fails_midway_leaves_no_channel_reading_freed_notifiers(nv, monkeypatch):
  """recover() gives the old notifiers back once the group is freed; if opening new channels then fails, the old
  channel objects are still the device's: reading their (unmapped) notifiers would be a segfault, not an error."""
  def fail(slot): raise NVError("NV: no channels (test)")
  monkeypatch.setattr(nv, "_open_channels", fail)
  with pytest.raises(NVError, match="no channels"): nv.recover()
  assert nv.channel_errors() == []   # read nothing freed (before the fix: a read of unmapped memory)
