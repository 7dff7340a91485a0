"""The AMD backend on the mock KFD: bring-up, SDMA copies, signals and waits, a PM4 dispatch as the CP decodes it,
and KFD refusals surfaced as errors naming the ioctl and errno."""
import ctypes, struct, threading, time
import numpy as np
import pytest
from hcqrt.interface import GraphCopy, GraphExec
from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd, set_executor, GPUError
from hcqrt.amd.device import AMDBuffer, AMDDevice, AMDError, AMDProgram
from hcqrt.amd.targets import target_for, UnsupportedTarget
from ioctl_defs.amd import kd as KD

@pytest.fixture(params=["gfx1100", "gfx942"])
def dev(request):
  drv = install_mock_amd(request.param)
  d = AMDDevice("AMD"); d.drv = drv
  yield d
  uninstall_mock_amd(drv)

def test_bring_up(dev):
  assert dev.drv.calls[:7] == ["GET_VERSION", "ACQUIRE_VM", "RUNTIME_ENABLE", "GET_PROCESS_APERTURES_NEW", "GET_PROCESS_APERTURES_NEW",
                               "AVAILABLE_MEMORY", "ALLOC_MEMORY_OF_GPU"]
  assert dev.gpuvm[0] <= dev.va_base < dev.gpuvm[1]
  assert dev.wave_size == (32 if dev.arch == "gfx1100" else 64)
  assert dev.cu_count == (96 if dev.arch == "gfx1100" else 304)

def test_unsupported_target_is_named():
  with pytest.raises(UnsupportedTarget, match="gfx1030"): target_for(100300)

def test_sdma_copies_round_trip(dev):
  x = np.random.default_rng(0).standard_normal(3 << 18).astype(np.float32)   # 3 MiB: more than one staging chunk
  a, b = dev.allocator.alloc(x.nbytes), dev.allocator.alloc(x.nbytes)
  dev.allocator.copyin(a, memoryview(x.tobytes()))
  dev.allocator.transfer(b, a, x.nbytes)
  out = bytearray(x.nbytes); dev.allocator.copyout(memoryview(out), b)
  assert np.array_equal(np.frombuffer(out, np.float32), x)
  dev.allocator.free(a); dev.allocator.free(b)

def test_queue_waits_for_a_host_signal_and_wait_sleeps_in_wait_events(dev):
  gate, done = dev.new_signal(0), dev.new_signal(0)
  dev.hw_compute_queue().wait(gate, 1).signal(done, 7).submit(dev)
  dev.hw_copy_queue().wait(done, 7).signal(gate, 2).submit(dev)   # the copy engine waits for the compute queue
  assert done.value == 0
  threading.Timer(0.05, lambda: setattr(gate, "value", 1)).start()
  n = dev.drv.calls.count("WAIT_EVENTS")
  dev.wait_signal(done, 7, timeout_s=5)
  dev.wait_signal(gate, 2, timeout_s=5)
  assert dev.drv.calls.count("WAIT_EVENTS") > n

def test_signal_values_patch_and_resubmit(dev):
  s = dev.new_signal(0)
  q = dev.hw_compute_queue().signal(s, 1)
  q.submit(dev); dev.wait_signal(s, 1, 5)
  q.update_signal(0, value=(1 << 33) + 5).submit(dev); dev.wait_signal(s, (1 << 33) + 5, 5)
  c = dev.hw_copy_queue().signal(s, (1 << 34) + 1)
  c.submit(dev); dev.wait_signal(s, (1 << 34) + 1, 5)
  assert s.value == (1 << 34) + 1

def _program(dev, kernarg_ptrs=1):
  props = (1 << 3) | ((1 << 10) if dev.gfx.wave32 else 0)
  rsrc1, rsrc2 = 0x60AF0041, 2 << 1 | 1 << 7
  desc = struct.pack("<III4xq20xIIIHH4x", 0, 0, 8 * kernarg_ptrs, 0, 0, rsrc1, rsrc2, props, 0)
  return AMDProgram(dev, "k", b"\x00\x00\x80\xbf" * 16, desc, [(8 * i, 8) for i in range(kernarg_ptrs)])

def test_pm4_dispatch_is_decoded(dev):
  seen = []
  def executor(d, vm):   # a stand-in for the emulator: store 42 through the first kernarg pointer
    seen.append(d)
    ptr = struct.unpack("<Q", vm.read(d.kernarg, 8))[0]
    vm.write(ptr, struct.pack("<I", 42))
  prev = set_executor(executor)
  try:
    prog, buf = _program(dev), dev.allocator.alloc(64)
    prog(buf, global_size=(3, 2, 1), local_size=(dev.wave_size, 1, 1), wait=True)
  finally: set_executor(prev)
  d = seen[0]
  assert d.program == prog.code_va and d.grid == (3, 2, 1) and d.block == (dev.wave_size, 1, 1)
  assert d.wave32 == (dev.arch == "gfx1100")
  assert d.rsrc2 == prog.kd.rsrc2 and d.user_sgprs == 2
  priv = 1 << KD.RSRC1["PRIV"][0]
  # gfx11 CWSR erratum on PM4; an AQL packet processor loads RSRC1 from the descriptor itself
  assert d.rsrc1 == prog.kd.rsrc1 | (priv if dev.arch == "gfx1100" and not dev.aql else 0)
  assert struct.unpack("<Q", bytes(dev.drv.vm.read(d.kernarg, 8)))[0] == buf.va
  out = bytearray(4); dev.allocator.copyout(memoryview(out), buf)
  assert struct.unpack("<I", out)[0] == 42

def test_unmapped_buffer_in_a_dispatch_faults(dev):
  def executor(d, vm):
    ptr = struct.unpack("<Q", vm.read(d.kernarg, 8))[0]
    vm.write(ptr, b"\0" * 4)
  prev = set_executor(executor)
  try:
    prog, buf = _program(dev), dev.allocator.alloc(64)
    dev.gpu_free(buf)   # (past the allocator's cache) unmapped; the queue runs later: the fault shows at the wait
    with pytest.raises(AMDError, match=f"GPU memory fault at {buf.va:#x}"): prog(buf.va, global_size=(1, 1, 1), local_size=(1, 1, 1), wait=True)
  finally: set_executor(prev)

def test_refusals_name_the_ioctl_and_errno(dev):
  with pytest.raises(AMDError, match=r"AMDKFD_IOC_FREE_MEMORY_OF_GPU failed with EINVAL"):
    dev.ioctl("AMDKFD_IOC_FREE_MEMORY_OF_GPU", handle=(dev.gpu_id << 32) | 0xFFFF)
  b = dev.allocator.alloc(64)
  with pytest.raises(AMDError, match=r"AMDKFD_IOC_FREE_MEMORY_OF_GPU failed with EBUSY"):
    dev.ioctl("AMDKFD_IOC_FREE_MEMORY_OF_GPU", handle=b.handle)
  with pytest.raises(AMDError, match=r"AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU failed with EBUSY"):
    dev._map(dev.compute.ring, unmap=True)
  with pytest.raises(AMDError, match=r"AMDKFD_IOC_CREATE_QUEUE failed with EINVAL"):
    dev.ioctl("AMDKFD_IOC_CREATE_QUEUE", ring_base_address=dev.compute.ring.va, ring_size=0x3000, gpu_id=dev.gpu_id)
  # an overlapping VA allocates; the GPU's VM refuses it when it is mapped (linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/amdgpu_vm.c:1742-1748)
  h = dev.ioctl("AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=b.va, size=4096, gpu_id=dev.gpu_id, flags=1).handle
  with pytest.raises(AMDError, match=r"AMDKFD_IOC_MAP_MEMORY_TO_GPU failed with EINVAL"):
    dev._map(AMDBuffer(b.va, 4096, 4096, h, None, "vram"))
  dev.ioctl("AMDKFD_IOC_FREE_MEMORY_OF_GPU", handle=h)

def test_graph_replay_copies(dev):
  x = np.arange(256, dtype=np.float32)
  a, b = dev.allocator.alloc(x.nbytes), dev.allocator.alloc(x.nbytes)
  dev.allocator.copyin(a, memoryview(x.tobytes()))
  g = dev.graph([GraphCopy(b, a, x.nbytes)])
  for _ in range(2): g.replay(); dev.synchronize()
  out = bytearray(x.nbytes); dev.allocator.copyout(memoryview(out), b)
  assert np.array_equal(np.frombuffer(out, np.float32), x)

def test_tensor_ops_run_on_the_mock_through_llvm(monkeypatch):
  # the frontend's kernels: LLVM IR from compiler/render_llvm.py, a code object from llvmlite, run by the mock's emulator
  pytest.importorskip("llvmlite")
  monkeypatch.setenv("MOCKGPU", "1")
  from frontend.tensor import Tensor
  x, y = np.random.default_rng(3).random((33, 17), np.float32), np.random.default_rng(4).random((17, 9), np.float32)
  np.testing.assert_allclose((Tensor(x, device="AMD") @ Tensor(y, device="AMD")).numpy(), x @ y, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal((Tensor([1.0, 2.0], device="AMD") * 2 + 1).numpy(), np.array([3.0, 5.0], np.float32))

def test_graph_replay_is_one_indirect_buffer_with_patched_pointers(dev):
  seen = []
  prev = set_executor(lambda d, vm: seen.append(struct.unpack("<Q", bytes(vm.read(d.kernarg, 8)))[0]))
  try:
    prog = _program(dev)
    a, b = dev.allocator.alloc(64), dev.allocator.alloc(64)
    g = dev.graph([GraphExec(prog, [a], [], (1, 1, 1), (dev.wave_size, 1, 1)), GraphExec(prog, [a], [], (2, 1, 1), (dev.wave_size, 1, 1))])
    cq = next(q for q in dev.drv.queues.values() if not q.sdma)
    ibs = cq.ib_count
    g.replay(); dev.synchronize()
    g.replay(bufs={(1, 0): b}); dev.synchronize()
    assert seen == [a.va, a.va, a.va, b.va]
    # PM4: one INDIRECT_BUFFER per replay; AQL: one PM4-IB packet before the launches (the wait) and one after (the signals)
    assert cq.ib_count == ibs + (4 if dev.aql else 2)
  finally: set_executor(prev)

def test_kfd_1_11_layouts_and_no_runtime_enable():
  drv = install_mock_amd(version=(1, 11))
  try:
    d = AMDDevice("AMD")
    assert "RUNTIME_ENABLE" not in drv.calls
    assert {sz for n, sz in zip(drv.calls, drv.sizes) if n == "CREATE_QUEUE"} == {88}   # the <= 1.16 struct
    s = d.new_signal(0); d.hw_compute_queue().signal(s, 3).submit(d); d.wait_signal(s, 3, 5)
  finally: uninstall_mock_amd(drv)
  drv = install_mock_amd()
  try:
    AMDDevice("AMD")
    assert {sz for n, sz in zip(drv.calls, drv.sizes) if n == "CREATE_QUEUE"} == {96}
  finally: uninstall_mock_amd(drv)

def test_timed_launch_reports_seconds(dev):
  prev = set_executor(lambda d, vm: time.sleep(0.02))
  try: t = _program(dev)(dev.allocator.alloc(64), global_size=(1, 1, 1), local_size=(1, 1, 1), wait=True)
  finally: set_executor(prev)
  assert 0.015 < t < 5

# ---- HCQ semantics shared with NV, with a stand-in executor that recognises a kernel by its code bytes ----
ADD_CODE = b"ADD!" + b"\x00\x00\x80\xbf" * 15   # out[i] = a[i] + k * b[i] for i < n (args: out, a, b, k, n)

def add_executor(d, vm):
  code = bytes(vm.read(d.program, 4))
  if code != ADD_CODE[:4]: raise AssertionError(f"unknown kernel {code!r}")
  out, a, b, k, n = struct.unpack("<QQQiI", bytes(vm.read(d.kernarg, 32)))
  m = min(n, d.grid[0] * d.block[0])
  x = np.frombuffer(bytes(vm.read(a, 4 * m)), np.float32)
  y = np.frombuffer(bytes(vm.read(b, 4 * m)), np.float32)
  vm.write(out, (x + k * y).astype(np.float32).tobytes())

@pytest.fixture
def add(dev):
  prev = set_executor(add_executor)
  props = (1 << 3) | ((1 << 10) if dev.gfx.wave32 else 0)
  desc = struct.pack("<III4xq20xIIIHH4x", 0, 0, 32, 0, 0, 0, 2 << 1 | 1 << 7, props, 0)
  yield AMDProgram(dev, "add", ADD_CODE, desc, [(0, 8), (8, 8), (16, 8), (24, 4), (28, 4)])
  set_executor(prev)

def upload(dev, x):
  b = dev.allocator.alloc(x.nbytes); dev.allocator.copyin(b, memoryview(x.tobytes())); return b
def download(dev, b, n):
  out = bytearray(4 * n); dev.allocator.copyout(memoryview(out), b); return np.frombuffer(out, np.float32)

def test_signals_and_timeout(dev):
  from hcqrt.hcq import SignalTimeout
  s = dev.new_signal(name="sigA")
  big = (1 << 40) + 7
  dev.hw_compute_queue().timestamp(s).signal(s, big).submit(dev)   # (the GPU runs on: the timestamp must come first)
  s.wait(big, 1.0)
  assert s.timestamp > 0
  with pytest.raises(SignalTimeout, match=r"AMD.*sigA.*reach 1099511627784.*last completed value is 1099511627783.*AMD(AQL)?ComputeQueue"):
    s.wait(big + 1, 0.05)

def test_launch_after_cpu_and_other_queue(dev, add):
  gate, done = dev.new_signal(name="gate"), dev.new_signal(name="done")
  x = np.arange(64, dtype=np.float32)
  a, o = upload(dev, x), dev.allocator.alloc(256)
  args = add.fill_kernargs([o, a, a], [1, 64])
  dev.hw_compute_queue().wait(gate, 2).exec(add, args, (1, 1, 1), (64, 1, 1)).signal(done, 1).submit(dev)
  time.sleep(0.02)
  assert done.value == 0
  dev.hw_copy_queue().signal(gate, 1).submit(dev)
  time.sleep(0.02)
  assert done.value == 0   # 1 < 2: still parked
  gate.value = 2           # a CPU write: the mock's poller notices
  dev.wait_signal(done, 1, 2.0)
  assert np.array_equal(download(dev, o, 64), 2 * x)

def test_patch_and_resubmit(dev, add):
  n = 128
  x = np.arange(n, dtype=np.float32)
  a, o1, o2 = upload(dev, x), dev.allocator.alloc(4 * n), dev.allocator.alloc(4 * n)
  s = dev.new_signal()
  args = add.fill_kernargs([o1, a, a], [1, n], persistent=True)
  q = dev.hw_compute_queue().exec(add, args, (1, 1, 1), (n // 2, 1, 1)).signal(s, 1)
  q.submit(dev); dev.wait_signal(s, 1, 5)
  assert np.array_equal(download(dev, o1, n)[: n // 2], 2 * x[: n // 2]) and not download(dev, o1, n)[n // 2:].any()
  args.set_buffer(0, o2.va); args.set_int(0, 4)
  q.update_exec(0, global_size=(2, 1, 1)).update_signal(1, value=2)
  q.submit(dev); dev.wait_signal(s, 2, 5)
  assert np.array_equal(download(dev, o2, n), 5 * x)
  q.bind(dev)
  q.update_signal(1, value=3).submit(dev); dev.wait_signal(s, 3, 5)
  with pytest.raises(IndexError, match="not a wait"): q.update_wait(1, value=1)
  c = dev.hw_copy_queue().copy(o1.va, o2.va, 16).signal(s, 4)
  c.submit(dev); dev.wait_signal(s, 4, 5)
  c.update_copy(0, dst=o2.va, src=a.va).update_signal(1, value=5).submit(dev); dev.wait_signal(s, 5, 5)
  assert np.array_equal(download(dev, o2, n)[:4], x[:4])

def test_graph_replay_matches_numpy(dev, add):
  n = 256
  x = np.arange(n, dtype=np.float32)
  b = [upload(dev, x) for _ in range(2)] + [dev.allocator.alloc(4 * n) for _ in range(4)]
  items = [GraphExec(add, [b[2], b[0], b[1]], [1, n], (1, 1, 1), (n, 1, 1)),      # b2 = b0 + b1
           GraphCopy(b[3], b[2], 4 * n),                                          # b3 = b2
           GraphExec(add, [b[4], b[3], b[2]], [2, n], (1, 1, 1), (n, 1, 1)),      # b4 = b3 + 2 b2
           GraphExec(add, [b[5], b[4], b[0]], [1, n], (1, 1, 1), (n, 1, 1))]      # b5 = b4 + b0
  g = dev.graph(items)
  g.replay(wait=True)
  assert np.array_equal(download(dev, b[5], n), 7 * x) and np.array_equal(download(dev, b[4], n), 6 * x)
  g.replay(bufs={(0, 1): b[5]}, vals={(0, 0): 3}, wait=True)
  np.testing.assert_array_equal(download(dev, b[2], n), 7 * x + 3 * x)
  np.testing.assert_array_equal(download(dev, b[5], n), 3 * 10 * x + x)

def test_release_writes_back_the_l2(dev):
  """A signal in cached memory is seen by the host only because the backend's RELEASE_MEM writes the L2 back
  (the mock keeps unflushed CP writes in its L2)."""
  from hcqrt.hcq import Signal
  buf = dev.gpu_alloc(4096, "gtt", host=True)
  s = Signal(dev, buf.host, buf.va, "cached")
  dev.hw_compute_queue().signal(s, 9).submit(dev)
  dev.wait_signal(s, 9, 2)

def test_lds_size_programmed_from_the_descriptor(dev):
  seen = []
  prev = set_executor(lambda d, vm: seen.append(d.lds_bytes))
  try:
    props = (1 << 3) | ((1 << 10) if dev.gfx.wave32 else 0)
    desc = struct.pack("<III4xq20xIIIHH4x", 1000, 0, 8, 0, 0, 0, 2 << 1, props, 0)
    AMDProgram(dev, "lds", b"\x00\x00\x80\xbf" * 16, desc, [(0, 8)])(0, global_size=(1, 1, 1), local_size=(1, 1, 1), wait=True)
  finally: set_executor(prev)
  assert seen == [1024]
  big = struct.pack("<III4xq20xIIIHH4x", 70000, 0, 8, 0, 0, 0, 2 << 1, 1 << 3, 0)
  with pytest.raises(ValueError, match="LDS"): AMDProgram(dev, "big", b"\0" * 64, big, [(0, 8)])

def test_sdma_fault_and_flat_map(dev):
  b = dev.allocator.alloc(4096)
  assert any(va <= b.va < va + n for va, n, _ in dev.drv.vm.flat_map())
  dev.hw_copy_queue().copy(b.va, 0x1000, 64).signal(dev.timeline_signal, dev.timeline_value).submit(dev)
  dev.timeline_value += 1
  with pytest.raises(AMDError, match="GPU memory fault at 0x1000"): dev.synchronize()

def test_fault_behind_a_wait_is_an_error_not_a_timeout(dev):
  def executor(d, vm): vm.write(0x1000, b"\0" * 4)   # nothing is mapped at 0x1000
  prev = set_executor(executor)
  try:
    gate, done = dev.new_signal(0, "gate"), dev.new_signal(0, "done")
    dev.hw_compute_queue().wait(gate, 1).exec(_program(dev), _program(dev).fill_kernargs([0]), (1, 1, 1), (1, 1, 1)).signal(done, 1).submit(dev)
    gate.value = 1   # the mock's poller runs the dispatch, which faults off the submitting thread
    with pytest.raises(AMDError, match=r"GPU memory fault at 0x1000"): dev.wait_signal(done, 1, 5)
  finally: set_executor(prev)

def test_unsupported_gpu_in_the_topology_is_refused_by_name():
  drv = install_mock_amd()
  try:
    props = "/sys/devices/virtual/kfd/kfd/topology/nodes/1/properties"
    drv.files[props] = drv.files[props].replace("gfx_target_version 110000", "gfx_target_version 100300")
    with pytest.raises(UnsupportedTarget, match=r"gfx1030 \(gfx_target_version 100300\) is not supported; supported: gfx1100"):
      AMDDevice("AMD")
  finally: uninstall_mock_amd(drv)

def test_probe_reports_amd(monkeypatch):
  from hcqrt import probe
  p = probe.probe_amd("gfx942")
  assert p.usable and p.props["arch"] == "gfx942" and p.props["wave_size"] == 64 and p.props["mock"]
  monkeypatch.setattr(probe.os.path, "exists", lambda path: False)
  p = probe.probe_amd(None)
  assert not p.usable and "no /dev/kfd" in p.reason and "MOCKGPU=1 AMD=1" in p.fix

# ---- after a GPU error the device recovers: one failure must not leave later work waiting for a dead queue
def test_usable_after_a_queue_error_seen_by_a_wait(dev, add):
  def broken(d, vm): raise GPUError("mock AMD: the program cannot run: v_bogus at 0x24: VALU op not implemented")
  x = np.arange(64, dtype=np.float32)
  a, o = upload(dev, x), dev.allocator.alloc(256)
  set_executor(broken)
  promised = dev.new_signal(name="promised")
  dev.hw_compute_queue().exec(add, add.fill_kernargs([o, a, a], [1, 64]), (1, 1, 1), (64, 1, 1)).signal(promised, 5).submit(dev)
  t0 = time.perf_counter()
  with pytest.raises(AMDError, match=r"EC_QUEUE_WAVE_ILLEGAL_INSTRUCTION.*recovered: its compute and SDMA queues were recreated.*usable again"):
    dev.wait_signal(promised, 5, 60)
  assert time.perf_counter() - t0 < 30   # woken by the CWSR header's error event, not the 60 s timeout (a loaded CI box)
  assert promised.value == 5   # what the dropped work promised is written from the CPU, so nobody waits for it
  set_executor(add_executor)
  t0 = time.perf_counter()
  dev.hw_compute_queue().exec(add, add.fill_kernargs([o, a, a], [1, 64]), (1, 1, 1), (64, 1, 1)).signal(dev.timeline_signal, dev.timeline_value).submit(dev)
  dev.timeline_value += 1
  dev.synchronize(60.0)
  assert np.array_equal(download(dev, o, 64), 2 * x) and time.perf_counter() - t0 < 30
  assert "DESTROY_QUEUE" in dev.drv.calls

def test_usable_after_a_fault_seen_by_a_wait(dev):
  def executor(d, vm): vm.write(0x1000, b"\0" * 4)   # nothing is mapped at 0x1000
  prev = set_executor(executor)
  try:
    gate, done = dev.new_signal(0, "gate"), dev.new_signal(0, "done")
    dev.hw_compute_queue().wait(gate, 1).exec(_program(dev), _program(dev).fill_kernargs([0]), (1, 1, 1), (1, 1, 1)).signal(done, 1).submit(dev)
    gate.value = 1
    with pytest.raises(AMDError, match=r"GPU memory fault at 0x1000.*recovered"): dev.wait_signal(done, 1, 5)
    assert done.value == 1
  finally: set_executor(prev)
  x = np.arange(1000, dtype=np.float32); b = upload(dev, x)   # an SDMA round trip on the new queues
  assert np.array_equal(download(dev, b, 1000), x)

def test_usable_after_a_wait_timeout(dev, monkeypatch):
  from hcqrt import hcq
  monkeypatch.setattr(dev, "wait_timeout_s", 0.2); monkeypatch.setattr(hcq, "DEFAULT_TIMEOUT_S", 0.2)
  never = dev.new_signal(name="never")
  dev.hw_compute_queue().wait(never, 1).signal(dev.timeline_signal, dev.timeline_value).submit(dev)
  dev.timeline_value += 1
  with pytest.raises(hcq.SignalTimeout, match=r"timed out after 0\.2 s .*recovered"): dev.synchronize()   # (the time waited, not 0)
  x = np.arange(64, dtype=np.float32); b = upload(dev, x)
  assert np.array_equal(download(dev, b, 64), x)

# ---- queue exceptions reach the host through the CWSR header (kfd_send_exception_to_runtime), not a timeout
@pytest.fixture(params=["gfx1100", "gfx942"])
def dev612(request):
  drv = install_mock_amd(request.param, kernel="6.12")   # KFD 1.17: RUNTIME_ENABLE, so the kernel reports to the runtime
  d = AMDDevice("AMD"); d.drv = drv
  yield d
  uninstall_mock_amd(drv)

def _bad_packet(dev):
  from ioctl_defs.amd import aql, pm4
  bad = pm4.packet(pm4.COPY_DATA, 0, 0, 0, 0, 0)   # a packet the mock CP rejects (CP bad opcode)
  if not dev.aql: return dev.compute.submit(bad)
  host, va = dev.kernargs.alloc(4 * len(bad), 256)   # an AQL queue runs PM4 from an IB named by a PM4-IB packet
  for i, w in enumerate(bad): ctypes.c_uint32.from_address(host + 4 * i).value = w
  dev.compute.submit_packets([aql.pm4_ib(pm4.indirect_buffer(va, len(bad)))])

def test_cwsr_headers_are_filled_as_the_thunk_does(dev612):
  from ioctl_defs.amd import kfd as K
  from hcqrt.amd.cwsr import queue_sizes
  d, sz = dev612, queue_sizes(dev612.props)
  assert d.compute.cwsr.kind == "gtt" and d.compute.cwsr.host == d.compute.cwsr.va   # CPU-visible at the address the kernel gets
  for xcc in range(sz.num_xcc):
    hdr = ctypes.string_at(d.compute.cwsr.host + xcc * sz.cwsr, K.CWSR_HEADER_BYTES)
    assert struct.unpack_from("<IIQI", hdr, 16) == ((sz.num_xcc - xcc) * sz.cwsr, sz.debug * sz.num_xcc, d.error_payload.host, d.error_event)

def test_bad_packet_is_reported_by_name_at_once(dev612):
  _bad_packet(dev612)
  t0 = time.perf_counter()
  with pytest.raises(AMDError, match=r"GPU exception \(EC_QUEUE_PACKET_UNSUPPORTED\).*recovered"):
    dev612.wait_signal(dev612.timeline_signal, dev612.timeline_value, 60)
  assert time.perf_counter() - t0 < 30 and dev612.drv.wait_timeouts == 0   # the error event woke it, not the 60 s timeout
  x = np.arange(64, dtype=np.float32); b = upload(dev612, x)   # usable again
  assert np.array_equal(download(dev612, b, 64), x)

def test_unfilled_cwsr_header_wakes_nobody(monkeypatch):
  # the old backend: the kernel's get_user finds no error event (0, reserved) and nothing wakes the host
  from hcqrt import hcq
  from hcqrt.amd import device as D
  from hcqrt.amd import aql_queue
  for m in (D, aql_queue): monkeypatch.setattr(m, "fill_cwsr_headers", lambda *a: None)
  drv = install_mock_amd("gfx1100", kernel="6.12")
  try:
    d = AMDDevice("AMD")
    q = drv.queues[d.compute.queue_id]
    _bad_packet(d)
    with pytest.raises(hcq.SignalTimeout): d.wait_signal(d.timeline_signal, d.timeline_value, 0.3)
    assert drv.wait_timeouts >= 1 and "COPY_DATA" in q.error   # the queue did stop; the host only timed out
  finally: uninstall_mock_amd(drv)

def test_queue_exception_needs_a_cpu_mapped_header():
  # a CWSR area the CPU cannot read (VRAM without PUBLIC, as before): get_user faults, nothing is signalled
  drv = install_mock_amd("gfx1100", kernel="6.12")
  try:
    d = AMDDevice("AMD")
    q = drv.queues[d.compute.queue_id]
    assert drv.user_read(q.ctx_save[0], 40) is not None
    q.ctx_save = (d.kernargs.buf.va + (16 << 20) + 0x100000000, q.ctx_save[1])   # no CPU mapping there
    q.fail("test", ec=20)
    assert not drv.events[d.error_event]["signaled"] and d._take_queue_exceptions() == []
  finally: uninstall_mock_amd(drv)

def test_mock_only_error_report_is_behind_a_switch():
  drv = install_mock_amd("gfx1100", kernel="6.12", report_queue_errors=True)
  try:
    d = AMDDevice("AMD")
    d.error_event = d.event_id   # (no header channel: only the mock's own report can end the wait early)
    _bad_packet(d)
    with pytest.raises(GPUError, match="COPY_DATA"): d.wait_signal(d.timeline_signal, d.timeline_value, 5)
  finally: uninstall_mock_amd(drv)

def test_kernel_6_1_has_no_runtime_channel_so_a_bad_packet_times_out():
  from hcqrt import hcq
  drv = install_mock_amd("gfx1100", kernel="6.1")
  try:
    d = AMDDevice("AMD")
    _bad_packet(d)
    with pytest.raises(hcq.SignalTimeout): d.wait_signal(d.timeline_signal, d.timeline_value, 0.3)
  finally: uninstall_mock_amd(drv)

# ---- finalizers free from any thread
def test_concurrent_gpu_free_of_one_buffer_frees_it_once(dev, monkeypatch):
  buf = dev.gpu_alloc(4096, "gtt", host=True)
  entered, go, real = threading.Event(), threading.Event(), dev._map
  def slow_map(b, unmap=False, **kw):
    if unmap and b is buf and not entered.is_set(): entered.set(); go.wait(2)
    return real(b, unmap, **kw)
  monkeypatch.setattr(dev, "_map", slow_map)
  errors = []
  def free():
    try: dev.gpu_free(buf)
    except Exception as e: errors.append(e)
  t = threading.Thread(target=free); t.start()
  entered.wait(2)
  t2 = threading.Thread(target=free); t2.start()
  time.sleep(0.05); go.set(); t.join(); t2.join()
  assert errors == [] and buf.freed and dev.va.take(4096, 4096) is not None

def test_deferred_frees_from_other_threads_are_all_done(dev):
  # finalizers append to the deferred list from any thread while this one reaps it: nothing may be lost or freed twice
  bufs = [dev.gpu_alloc(4096, "gtt", host=True) for _ in range(200)]
  dev.timeline_value += 1   # work "in flight": free_after_gpu defers
  def finalizer(chunk):
    for b in chunk: dev.free_after_gpu(b)
  ts = [threading.Thread(target=finalizer, args=(bufs[i::4],)) for i in range(4)]
  for t in ts: t.start()
  for _ in range(200): dev._reap()
  for t in ts: t.join()
  dev.timeline_signal.value = dev.timeline_value - 1   # the GPU passes it
  dev._reap()
  assert all(b.freed for b in bufs) and not dev._deferred

def test_free_after_gpu_never_takes_the_memory_lock(dev):
  """Audit amd23b row 4: a finalizer (another thread, e.g. the mock GPU's engine thread holding the mock KFD's lock,
  or GC inside our own allocator) only queues the buffer; the next allocation or synchronize frees it."""
  buf = dev.gpu_alloc(4096, "gtt", host=True)
  done = threading.Event()
  with dev._mem_lock:   # another thread is inside gpu_free / _reap
    t = threading.Thread(target=lambda: (dev.free_after_gpu(buf), done.set()), daemon=True); t.start()
    assert done.wait(10), "free_after_gpu blocked on the memory lock"
  assert not buf.freed   # only queued
  dev.synchronize()
  assert buf.freed and not dev._freed_later and not dev._deferred

def test_gpu_free_never_leaves_a_hole_in_the_reservation(dev, monkeypatch):
  """Freeing a host-mapped BO gives its range back to the VA reservation. Unmapping it first and reserving again after
  left a moment where the range was free: another thread's mmap could take it, and the re-reservation (MAP_FIXED)
  then mapped over that thread's memory. After every mmap/munmap free makes, a probe tries to take the range as that
  thread would (MAP_FIXED_NOREPLACE: it fails while anything is mapped there)."""
  from hcqrt import syscalls
  buf = dev.gpu_alloc(3 * 4096, "gtt", host=True)
  holes, real_mmap, real_munmap = [], syscalls.mmap, syscalls.munmap
  def probe():
    a = syscalls._libc.mmap(buf.va, 4096, 3, syscalls.MAP_PRIVATE | syscalls.MAP_ANONYMOUS | 0x100000, -1, 0)
    if a in (None, syscalls._MAP_FAILED): return
    syscalls._libc.munmap(a, 4096)
    if a == buf.va: holes.append(a)   # (a kernel before 4.17 ignores the flag and places the page elsewhere: no hole)
  def mmap(*a, **kw): r = real_mmap(*a, **kw); probe(); return r
  def munmap(*a, **kw): r = real_munmap(*a, **kw); probe(); return r
  monkeypatch.setattr(syscalls, "mmap", mmap); monkeypatch.setattr(syscalls, "munmap", munmap)
  dev.gpu_free(buf)
  monkeypatch.undo()
  assert holes == [], f"the freed range {buf.va:#x} was free to take during gpu_free"
  probe(); assert holes == []   # still reserved after it
  # the mock KFD saw the mapping go (syscalls.mmap -> forget_mapping): the freed BO holds no memory for a CPU mapping
  assert dev.drv.freed_mapped == [], "the freed BO is still taken for mapped on the CPU"
  again = dev.gpu_alloc(3 * 4096, "gtt", host=True)
  ctypes.memmove(again.host, b"ok!!", 4); assert ctypes.string_at(again.host, 4) == b"ok!!"

def test_gpu_free_after_part_of_the_mapping_was_replaced_releases_the_bo(dev):
  """A MAP_FIXED over one page of a host buffer splits the BO's mapping; the pages around it still hold the BO (one GEM
  reference per VMA). gpu_free's MAP_FIXED over the whole range then drops them: the mock must see that, or the freed
  BO stays taken for mapped (its memory never released)."""
  from hcqrt import syscalls
  buf = dev.gpu_alloc(3 * 4096, "gtt", host=True)
  syscalls.mmap(-1, 4096, 0, syscalls.MAP_PRIVATE | syscalls.MAP_ANONYMOUS | syscalls.MAP_FIXED, 0, buf.va + 4096)
  dev.gpu_free(buf)
  assert dev.drv.freed_mapped == [], "the freed BO is still taken for mapped on the CPU"

def test_doorbells_ring_after_part_of_their_frame_was_replaced(dev):
  """A MAP_FIXED over one page of the two-page doorbell frame leaves the other page mapped (the kernel splits the VMA,
  its pgoff kept): a doorbell there must still reach the CP, not land in plain memory."""
  from hcqrt import syscalls
  q = dev.sdma
  off = q.doorbell - q.doorbell_page
  other = q.doorbell_page + (0x1000 if off < 0x1000 else 0)
  syscalls.mmap(-1, 4096, 0, syscalls.MAP_PRIVATE | syscalls.MAP_ANONYMOUS | syscalls.MAP_FIXED, 0, other)
  n = dev.drv.doorbell_writes
  syscalls.mmio_write64(q.doorbell, q.put)   # the same write pointer again: no new work, only the doorbell
  assert dev.drv.doorbell_writes == n + 1, "the doorbell in the frame's mapped page no longer rings"

def test_gpu_free_when_the_range_cannot_be_reserved_again(dev, monkeypatch):
  """The re-reserving MAP_FIXED can fail (ENOMEM: past vm.max_map_count, linux@v6.12.117:mm/mmap.c:325-326, or after the
  old VMAs were closed, leaving a hole: mm/vma.h:263-271). The BO is freed in the KFD by then: the error names gpu_free
  and the buffer, a second free does not UNMAP/FREE the dead handle again, and the range is not handed out again."""
  import errno
  from hcqrt import syscalls
  from hcqrt.amd.device import AMDError
  buf, real_mmap = dev.gpu_alloc(3 * 4096, "gtt", host=True), syscalls.mmap
  def mmap(fd, length, prot, flags, offset, addr=None):
    if fd == -1 and addr == buf.va: raise OSError(errno.ENOMEM, "mmap failed: Cannot allocate memory")
    return real_mmap(fd, length, prot, flags, offset, addr)
  monkeypatch.setattr(syscalls, "mmap", mmap)
  with pytest.raises(AMDError, match=f"gpu_free of the host-mapped buffer at {buf.va:#x}"): dev.gpu_free(buf)
  monkeypatch.undo()
  dev.gpu_free(buf)   # already freed: nothing to do, no ioctl on the dead handle
  assert not any(s <= buf.va < s + n for s, n in dev.va.free), "the range went back to the allocator"
