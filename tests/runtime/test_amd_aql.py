"""The AQL compute queue (audit row 7): on the mock KFD's AQL packet processor, gfx942 spreads a launch over its 8 XCCs
(a PM4 queue leaves 7 idle), gfx1100 with AMD_AQL=1 runs real code through it, and each packet-processor rule of
hcqrt/mock/amd/aql.py has a test here."""
import ctypes, errno, struct
import numpy as np
import pytest
from hcqrt.interface import GraphExec
from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd, set_executor, GPUError
from hcqrt.amd.device import AMDDevice, AMDError, AMDProgram
from hcqrt.amd.aql_queue import AQLQueue
from ioctl_defs.amd import aql, kfd as K, pm4

def _device(monkeypatch, arch, aql_env=None):
  if aql_env is None: monkeypatch.delenv("AMD_AQL", raising=False)
  else: monkeypatch.setenv("AMD_AQL", aql_env)
  drv = install_mock_amd(arch)
  d = AMDDevice("AMD"); d.drv = drv; d.wait_timeout_s = 5.0
  return d

@pytest.fixture
def mi300(monkeypatch):
  d = _device(monkeypatch, "gfx942")
  yield d
  uninstall_mock_amd(d.drv)

@pytest.fixture
def rx(monkeypatch):
  d = _device(monkeypatch, "gfx1100", "1")
  yield d
  uninstall_mock_amd(d.drv)

def _store_program(dev, code: bytes = b"\x00\x00\x81\xbf" * 16):
  """A program (gfx942 s_endpgm, unless `code`) the recording executor below stands in for: kernarg pointer in s[0:1]."""
  props = (1 << 3) | ((1 << 10) if dev.gfx.wave32 else 0)
  desc = struct.pack("<III4xq20xIIIHH4x", 0, 0, 8, 0, 0, 0, 2 << 1, props, 0)
  return AMDProgram(dev, "k", code, desc, [(0, 8)])

ILLEGAL = b"\x00\x00\x00\xf0" * 16   # MIMG: an encoding the gfx9 emulator refuses, so the wave traps

def _launch_recorded(dev, groups):
  seen = []
  def executor(d, vm):   # a stand-in for the machine-code executor: record the dispatch, store 42 at the kernarg pointer
    seen.append(d); vm.write(struct.unpack("<Q", bytes(vm.read(d.kernarg, 8)))[0], struct.pack("<I", 42))
  prev = set_executor(executor)
  try:
    prog, buf = _store_program(dev), dev.allocator.alloc(64)
    prog(buf, global_size=(groups, 1, 1), local_size=(dev.wave_size, 1, 1), wait=True)
  finally: set_executor(prev)
  out = bytearray(4); dev.allocator.copyout(memoryview(out), buf)
  return seen, struct.unpack("<I", out)[0]

def test_gfx942_launches_through_an_aql_queue_over_all_8_xccs(mi300):
  assert isinstance(mi300.compute, AQLQueue)
  seen, v = _launch_recorded(mi300, 16)
  assert v == 42 and len(seen) == 1
  d = seen[0]
  assert d.grid == (16, 1, 1) and d.block == (64, 1, 1) and d.kernarg != 0 and d.queue.startswith("AQL")
  assert d.xcc_workgroups == (2,) * 8   # TG chunk size 1 over logical XCCs 0..7: every XCC runs its share

def test_pm4_queue_on_gfx942_runs_the_grid_on_one_xcc(monkeypatch):
  """The old backend (one PM4 queue) on an MI300X: the MQDs give the dispatch to one XCC, 7 of 8 stay idle."""
  d = _device(monkeypatch, "gfx942", "0")
  try:
    assert not isinstance(d.compute, AQLQueue)
    seen, v = _launch_recorded(d, 16)
    assert v == 42 and seen[0].xcc_workgroups == (16, 0, 0, 0, 0, 0, 0, 0)
  finally: uninstall_mock_amd(d.drv)

def test_gfx942_illegal_code_traps_by_name_after_the_xcc_split(mi300):
  prog, buf = _store_program(mi300, ILLEGAL), mi300.allocator.alloc(64)
  q = mi300.drv.queues[mi300.compute.queue_id]   # (the failed launch makes the device recreate its queues)
  # the host sees what the kernel reports (the wave trap, through the CWSR header); the mock's queue keeps why
  with pytest.raises(AMDError, match="EC_QUEUE_WAVE_ILLEGAL_INSTRUCTION"):
    prog(buf, global_size=(8, 1, 1), local_size=(64, 1, 1), wait=True)
  assert "MIMG encoding" in q.error and q.dispatches[-1].xcc_workgroups == (1,) * 8

IDS_IR = """declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
define amdgpu_kernel void @ids(ptr addrspace(1) noalias %out) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %b = mul i32 %g, 64
  %i = add i32 %b, %t
  %v = mul i32 %g, 1000
  %w = add i32 %v, %t
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %w, ptr addrspace(1) %p
  ret void
}"""

def _run_ids(dev) -> tuple[int, ...]:
  """Run IDS_IR (gfx942 code) over 16 workgroups of 64; check every work-item's store; the dispatch's XCC shares."""
  from compiler.assemble.llvm import compile_llvm
  prog, buf = dev.program("ids", compile_llvm(IDS_IR, "ids", "gfx942")), dev.allocator.alloc(64 * 16 * 4)
  prog(buf, global_size=(16, 1, 1), local_size=(64, 1, 1), wait=True)
  out = np.zeros(64 * 16, np.int32); dev.allocator.copyout(memoryview(out), buf)
  g, t = np.divmod(np.arange(64 * 16), 64)
  np.testing.assert_array_equal(out, g * 1000 + t)
  return dev.drv.queues[dev.compute.queue_id].dispatches[-1].xcc_workgroups

def test_gfx942_machine_code_runs_over_the_xcc_split(mi300):
  """A real gfx942 kernel through the AQL queue: every workgroup of the grid, dealt over the 8 XCCs, stores its ids."""
  assert _run_ids(mi300) == (2,) * 8

def test_gfx942_machine_code_runs_on_a_pm4_queue(monkeypatch):
  """The same code through a PM4 queue (AMD_AQL=0): the whole grid on the target XCC."""
  d = _device(monkeypatch, "gfx942", "0")
  try: assert _run_ids(d) == (16,) + (0,) * 7
  finally: uninstall_mock_amd(d.drv)

def test_create_queue_is_aql_with_amd_queue_dispatch_ids(mi300):
  q = mi300.drv.queues[mi300.compute.queue_id]
  c = mi300.compute
  assert q.kind == K.QUEUE_TYPE_COMPUTE_AQL and q.ring_va == c.ring.va and q.ring_size == c.slots * 64
  assert q.rptr_va == c.amd_queue.va + 128 and q.wptr_va == c.amd_queue.va + 56

def test_ring_starts_invalid_and_consumed_slots_go_back_to_invalid(rx):
  c = rx.compute
  hdrs = lambda n: [ctypes.c_uint16.from_address(c.ring.host + 64 * i).value for i in range(n)]
  assert set(hdrs(c.slots)) == {aql.PACKET_TYPE_INVALID}
  s = rx.new_signal(0)
  rx.hw_compute_queue().signal(s, 5).submit(rx); rx.wait_signal(s, 5)
  rx.drv.settle()
  assert c.put == 1 and c.read_id.value == 1 and c.write_id.value == 1 and hdrs(2) == [aql.PACKET_TYPE_INVALID] * 2

def _signal_packet(dev, s, v):
  host, va = dev.kernargs.alloc(64, 256)
  dws = pm4.release_mem(s.va, v)
  ctypes.memmove(host, struct.pack(f"<{len(dws)}I", *dws), 4 * len(dws))
  return aql.pm4_ib(pm4.indirect_buffer(va, len(dws)))

def test_invalid_header_stops_the_processor_until_the_header_is_stored(rx):
  c, s = rx.compute, rx.new_signal(0)
  pkt = _signal_packet(rx, s, 9)
  c.submit_packets([struct.pack("<H", aql.PACKET_TYPE_INVALID) + pkt[2:]])   # body written, header not yet
  rx.drv.settle()
  assert s.value == 0 and c.read_id.value == 0
  slot = c.ring.host
  ctypes.c_uint32.from_address(slot).value = int.from_bytes(pkt[:4], "little")   # now the header
  from hcqrt import syscalls
  syscalls.mmio_write64(c.doorbell, 0)   # the doorbell again, with the same packet index
  rx.wait_signal(s, 9)
  assert c.read_id.value == 1

def test_a_header_stored_before_the_body_is_taken_with_the_body_unwritten(rx):
  """The header-first race: the processor takes a slot as soon as its header is valid, so a dispatch whose body has not
  arrived yet is read as zero sizes and the queue stops."""
  c = rx.compute
  from hcqrt import syscalls
  slot = c.ring.host + (c.put % c.slots) * 64
  ctypes.memset(slot, 0, 64)
  ctypes.c_uint32.from_address(slot).value = aql.header(aql.PACKET_TYPE_KERNEL_DISPATCH, True) | (1 << 16)
  syscalls.mmio_write64(c.doorbell, c.put)   # any doorbell (another producer's) wakes the processor
  with pytest.raises(GPUError, match="breaks hsa.h's size rules"): rx.drv.settle()

def _bad_dispatch(dev, field, value):
  prog, buf = _store_program(dev), dev.allocator.alloc(64)
  f = dict(setup=1, wx=32, wy=1, wz=1, reserved0=0, gx=64, gy=1, gz=1, kobj=prog.kd_va, kernarg=buf.va)
  f[field] = value if field != "kobj" else prog.kd_va + 8
  return struct.pack("<HHHHHHIIIIIQQQQ", aql.header(aql.PACKET_TYPE_KERNEL_DISPATCH, True), f["setup"], f["wx"], f["wy"], f["wz"],
                     f["reserved0"], f["gx"], f["gy"], f["gz"], 0, 0, f["kobj"], f["kernarg"], 0, 0)

@pytest.mark.parametrize("field,value,msg,cp_error", [("setup", 0, "0 dimensions", "invalid dimensions"),
                         ("reserved0", 1, "reserved", "invalid packet format"), ("wy", 2, "size rules", "invalid dimensions"),
                         ("kobj", 0x40 + 8, "64-byte aligned", "invalid \\(or NULL\\) code object"), ("gx", 33, "partial workgroups", None)])
def test_kernel_dispatch_packet_rules(rx, field, value, msg, cp_error):
  """Each rule stops the queue; a packet error the CP detects is reported through amd_queue_t's queue_inactive_signal
  (audit amd23c rows 2 and 4), so a wait on the device ends at once naming ROCr's meaning of the error bit."""
  import time
  rx.compute.submit_packets([_bad_dispatch(rx, field, value)])
  with pytest.raises(GPUError, match=msg): rx.drv.settle()
  if cp_error is None: return   # a mock limitation, reported as before
  # (a 60 s timeout: ending in well under half of it can only be the inactive signal ending the wait; 0.5 s, as before,
  # failed a full run on 2 cores at 2.1 s)
  t0 = time.perf_counter()
  with pytest.raises(AMDError, match=f"AQL {cp_error}"): rx.wait_signal(rx.new_signal(0), 1, 60.0)
  assert time.perf_counter() - t0 < 30

def test_aql_packet_errors_reach_a_runtime_that_reads_the_inactive_signal_only(rx, monkeypatch):
  """The mock's default is the harmful one: the CP reports a packet error only through queue_inactive_signal, so a
  backend that looks only at KFD's CWSR payload word sleeps out its whole timeout. With `aql_errors_via_kfd` (what
  firmware may also do) the kernel's packet exception code reaches the payload word too."""
  from hcqrt.hcq import SignalTimeout
  rx.wait_timeout_s = 1.0
  monkeypatch.setattr(AQLQueue, "take_errors", lambda self: [])
  rx.compute.submit_packets([_bad_dispatch(rx, "setup", 0)])
  with pytest.raises(SignalTimeout): rx.wait_signal(rx.new_signal(0), 1)
  monkeypatch.undo()
  rx.recover()   # (what a timed-out synchronize does: new queues, the stopped one and its inactive signal gone)
  rx.drv.aql_errors_via_kfd = True
  rx.compute.submit_packets([_bad_dispatch(rx, "setup", 0)])
  with pytest.raises(AMDError, match="EC_QUEUE_PACKET_DISPATCH_DIM_INVALID.*AQL invalid dimensions"): rx.wait_signal(rx.new_signal(0), 1)

def _amd_signal(dev, value, mailbox=0, event_id=0):
  host, va = dev.persistent(64, 64)
  ctypes.memset(host, 0, 64)
  struct.pack_into("<qqQI", (ctypes.c_char * 64).from_address(host), 0, aql.AMD_SIGNAL_KIND_USER, value, mailbox, event_id)
  return host, va

def test_barrier_and_waits_for_zero_and_completion_signal_writes_the_mailbox(rx):
  dep_host, dep = _amd_signal(rx, 1)
  done_host, done = _amd_signal(rx, 1, rx.event_slot, rx.event_id)
  rx.compute.submit_packets([aql.barrier_and([dep], completion_signal=done)])
  rx.drv.settle()
  value = lambda h: ctypes.c_int64.from_address(h + 8).value
  assert value(done_host) == 1 and rx.compute.read_id.value == 0   # the dependency is not 0 yet: the barrier waits
  ctypes.c_int64.from_address(dep_host + 8).value = 0
  import time
  deadline = time.time() + 5
  while value(done_host) != 0 and time.time() < deadline: time.sleep(0.001)
  assert value(done_host) == 0 and rx.compute.read_id.value == 1   # completion: decremented by one
  assert rx.drv.events[rx.event_id]["signaled"]                    # and the interrupt woke the event of its mailbox

def test_aql_create_queue_ring_rules(rx):
  r, p = rx.gpu_alloc(1 << 16, "uncached", host=True), rx.gpu_alloc(0x1000, "uncached", host=True)
  def create(ring_size):
    return rx.ioctl("AMDKFD_IOC_CREATE_QUEUE", ring_base_address=r.va, ring_size=ring_size, gpu_id=rx.gpu_id, queue_type=K.QUEUE_TYPE_COMPUTE_AQL,
             queue_percentage=100, queue_priority=7, write_pointer_address=p.va + 56, read_pointer_address=p.va + 128,
             eop_buffer_address=rx.compute.eop.va, eop_buffer_size=0x1000, ctx_save_restore_address=rx.compute.cwsr.va,
             ctx_save_restore_size=rx.compute.sizes.cwsr, ctl_stack_size=rx.compute.sizes.ctl_stack)
  # kfd_queue_acquire_buffers (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_queue.c:233-345): the ring BO is exactly ring_size
  # bytes on gfx9+ (only gfx7/8 AQL rings count twice); a ring under 1 KiB is clamped to KFD_MIN_QUEUE_RING_SIZE
  with pytest.raises(AMDError, match="CREATE_QUEUE.*EINVAL") as e: create(1 << 15)
  assert e.value.errno == errno.EINVAL
  q = rx.drv.queues[create(32).queue_id]
  assert q.slots == 1024 // 64

def test_gfx1100_aql_runs_a_compiled_kernel_on_the_emulator(rx):
  pytest.importorskip("llvmlite")
  from rdna3_kernels import KERNELS, compile_ir
  prog = rx.program("add_f32", compile_ir(KERNELS["add_f32"]))
  a = np.arange(256, dtype=np.float32); b = np.full(256, 3, np.float32)
  ba, bb, bo = (rx.allocator.alloc(1024) for _ in range(3))
  rx.allocator.copyin(ba, memoryview(a.tobytes())); rx.allocator.copyin(bb, memoryview(b.tobytes()))
  prog(bo, ba, bb, global_size=(4, 1, 1), local_size=(64, 1, 1), wait=True)
  out = bytearray(1024); rx.allocator.copyout(memoryview(out), bo)
  np.testing.assert_array_equal(np.frombuffer(out, np.float32), a + b)
  q = rx.drv.queues[rx.compute.queue_id]
  assert q.kind == K.QUEUE_TYPE_COMPUTE_AQL and q.dispatches[-1].program == prog.code_va and q.dispatches[-1].xcc_workgroups == (4,)

@pytest.mark.parametrize("arch,env", [("gfx942", None), ("gfx1100", "1")])
def test_a_submit_of_more_packets_than_ring_slots_completes(monkeypatch, arch, env):
  """Audit amd23b row 1: a batch larger than the free slots publishes what it stored before it waits for room (the CP
  reads only up to the doorbell), so it completes instead of waiting on itself."""
  d = _device(monkeypatch, arch, env)
  try:
    c = d.compute
    done_host, done = _amd_signal(d, 1)
    n = c.slots + 76
    c.submit_packets([aql.barrier_and([])] * (n - 1) + [aql.barrier_and([], completion_signal=done)])
    d.drv.settle()
    assert ctypes.c_int64.from_address(done_host + 8).value == 0
    assert c.put == c.write_id.value == c.read_id.value == n
    assert d.drv.queues[c.queue_id].target == n - 1   # the last doorbell carries the last packet's index
  finally: uninstall_mock_amd(d.drv)

def test_amd_queue_t_is_filled_as_rocr_fills_it(mi300):
  """Audit amd23b row 2: read_dispatch_id's offset, IS_PTR64, max_cu_id / max_wave_id and a queue_inactive_signal whose
  mailbox is the error event (ROCR@c7785a6:amd_aql_queue.cpp:159-176, 255-270)."""
  c, p = mi300.compute, mi300.props
  u32 = lambda off: ctypes.c_uint32.from_address(c.amd_queue.host + off).value
  assert u32(136) == 128 and u32(180) & 2 and u32(72) == p["simd_count"] // p["simd_per_cu"] - 1 == 303
  assert u32(76) == p["max_waves_per_simd"] * p["simd_per_cu"] - 1
  sig = ctypes.c_uint64.from_address(c.amd_queue.host + 192).value
  assert sig and sig % aql.AMD_SIGNAL_ALIGN == 0 and c.amd_queue.va <= sig < c.amd_queue.va + 0x1000
  kind, value, mailbox, event = struct.unpack_from("<qqQI", (ctypes.c_char * 0x1000).from_address(c.amd_queue.host), sig - c.amd_queue.va)
  assert (kind, value, mailbox, event) == (aql.AMD_SIGNAL_KIND_USER, 0, mi300.error_slot, mi300.error_event)

def _signal_interrupts(dev):
  s, before = dev.new_signal(0), len(dev.drv.interrupts)
  dev.hw_compute_queue().timestamp(s).signal(s, 5).submit(dev); dev.wait_signal(s, 5)
  dev.drv.settle()
  return s, dev.drv.interrupts[before:].count(dev.event_id)

def test_pm4_ib_runs_on_every_xcc_and_signals_are_predicated_to_xcc_0(mi300, monkeypatch):
  """Audit amd23b rows 3 and 7: each of gfx942's 8 XCCs runs a PM4-IB, so a signal's event interrupt would come 8
  times; PRED_EXEC(xcc_mask=1) around signals and timestamps keeps them on XCC 0."""
  s, n = _signal_interrupts(mi300)
  assert s.value == 5 and n == 1 and mi300.drv.queues[mi300.compute.queue_id].num_xcc == 8
  from ioctl_defs.amd import pm4 as pm4_mod
  monkeypatch.setattr(pm4_mod, "pred_exec", lambda mask, body: body)   # the unpredicated stream: every XCC interrupts
  assert _signal_interrupts(mi300)[1] == 8

def test_pred_exec_skips_its_dwords_on_other_xccs(rx):
  """One XCC (gfx1100): mask 1 runs the body, mask 2 skips it."""
  c, s = rx.compute, rx.new_signal(0)
  host, va = rx.kernargs.alloc(256, 256)
  dws = pm4.pred_exec(2, pm4.release_mem(s.va, 7)) + pm4.pred_exec(1, pm4.release_mem(s.va, 3))
  ctypes.memmove(host, struct.pack(f"<{len(dws)}I", *dws), 4 * len(dws))
  c.submit_packets([aql.pm4_ib(pm4.indirect_buffer(va, len(dws)))])
  rx.wait_signal(s, 3); rx.drv.settle()
  assert s.value == 3

def test_pred_exec_on_the_pm4_ring_is_refused(monkeypatch):
  d = _device(monkeypatch, "gfx1100", "0")
  try:
    d.compute.submit(pm4.pred_exec(1, pm4.nop(1)))
    with pytest.raises(GPUError, match="PRED_EXEC on the ring"): d.drv.settle()
  finally: uninstall_mock_amd(d.drv)

def test_processor_reads_only_up_to_the_doorbell_index(rx):
  """Audit amd23b row 5: valid packets past the last doorbell value wait for the next doorbell (SLOT_BASED_WPTR)."""
  from hcqrt import syscalls
  c = rx.compute
  done_host, done = _amd_signal(rx, 1)
  pkts = [aql.barrier_and([])] * 4 + [aql.barrier_and([], completion_signal=done)]
  for i, p in enumerate(pkts):   # stored as submit_packets stores them, but published by hand
    slot = c.ring.host + i * 64
    ctypes.memmove(slot + 4, p[4:], 60); ctypes.c_uint32.from_address(slot).value = int.from_bytes(p[:4], "little")
  c.put = c.write_id.value = 5
  syscalls.mmio_write64(c.doorbell, 1)   # packets 0 and 1 only
  rx.drv.settle()
  assert c.read_id.value == 2 and ctypes.c_int64.from_address(done_host + 8).value == 1
  syscalls.mmio_write64(c.doorbell, 4)
  rx.drv.settle()
  assert c.read_id.value == 5 and ctypes.c_int64.from_address(done_host + 8).value == 0

def test_a_graph_of_1100_kernels_runs_on_gfx942(mi300):
  """Audit amd23b row 1's reproduction: 1100 launches are one AQL batch of ~1102 packets, more than the 1024 slots."""
  from hcqrt.hcq import GraphReplay
  seen = []
  prev = set_executor(lambda d, vm: seen.append(d))
  try:
    prog, buf = _store_program(mi300), mi300.allocator.alloc(64)
    g = GraphReplay(mi300, [GraphExec(prog, [buf], [], (1, 1, 1), (64, 1, 1))] * 1100)
    g.replay(wait=True)
  finally: set_executor(prev)
  assert len(seen) == 1100 and mi300.compute.put > mi300.compute.slots

def test_waits_on_any_signal_and_for_ring_room_end_at_a_stopped_queue(mi300):
  """A queue exception stops the queue for good: a wait on a plain signal (Signal.wait, not the device's timeline
  wait) and a submit waiting for ring room both see the kernel's exception word at once instead of their timeouts."""
  import time
  prog, buf, s = _store_program(mi300, ILLEGAL), mi300.allocator.alloc(64), mi300.new_signal(0)
  q = mi300.hw_compute_queue().exec(prog, prog.fill_kernargs([buf]), (8, 1, 1), (64, 1, 1)).signal(s, 1)
  q.submit(mi300)   # an illegal instruction: the wave traps, the queue stops
  # (the waits' timeouts are 60 s: ending in well under half of that can only be the exception word ending them; a bound
  # of 2 s, as before, failed a loaded 2-core run at 2.08 s)
  mi300.wait_timeout_s = 60.0
  t0 = time.perf_counter()
  with pytest.raises(AMDError, match="EC_QUEUE_WAVE_ILLEGAL_INSTRUCTION"): s.wait(1, 60)
  assert time.perf_counter() - t0 < 30
  mi300.hw_compute_queue().exec(prog, prog.fill_kernargs([buf]), (8, 1, 1), (64, 1, 1)).submit(mi300)   # stops the new queue too
  t0 = time.perf_counter()
  with pytest.raises(AMDError, match="EC_QUEUE_WAVE_ILLEGAL_INSTRUCTION"):
    mi300.compute.submit_packets([aql.barrier_and([])] * (mi300.compute.slots + 8))
  assert time.perf_counter() - t0 < 30

def test_a_long_submit_times_out_only_when_the_cp_stops_reading(mi300):
  """Audit amd23c row 1: the ring-room wait is a no-progress timeout. A submit of 4x the ring's slots whose GPU work
  takes longer than wait_timeout_s in all (the mock CP answers each doorbell after 0.4 s, the timeout is 1 s) still
  completes, because read_dispatch_id keeps moving; the old single deadline cut it in half."""
  mi300.wait_timeout_s, mi300.drv.latency_s = 1.0, 0.4
  c = mi300.compute
  c.submit_packets([aql.barrier_and([])] * (4 * c.slots))
  mi300.drv.settle()
  assert c.put == c.write_id.value == c.read_id.value == 4 * c.slots

def test_a_wait_after_a_failed_recover_reads_no_freed_queue_page(rx):
  """Audit hw4 row 1: every wait reads the AQL queue's inactive signal. When recover() closed the queue and then failed
  to create a new one, that page is unmapped: the wait must not touch it (it segfaulted), and the error bits the page
  held at close are still reported once."""
  real = rx._compute_queue
  def broken(): raise AMDError("CREATE_QUEUE failed (simulated)", errno.ENOMEM)
  q = rx.compute
  ctypes.c_int64.from_address(q.amd_queue.host + aql.AMD_QUEUE_BYTES + 8).value = 0x2   # the CP reported a bad dispatch
  rx._compute_queue = broken
  with pytest.raises(AMDError, match="simulated"): rx.recover()
  assert q.closed and q.amd_queue.freed
  assert q.take_errors() == ["AQL invalid dimensions (0x2)"] and q.take_errors() == []
  rx.raise_if_faulted()   # reads nothing freed
  rx._compute_queue = real
