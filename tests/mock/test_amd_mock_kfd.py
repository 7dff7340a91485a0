"""The mock KFD refuses what amdkfd refuses (same errno), keeps its own tables (checked against ../shared/abi), and its
command processors do the harmful legal thing: unflushed releases stay in the L2, unbarriered dispatches reorder."""
import ctypes, errno, os, struct
import pytest
from hcqrt import syscalls
from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd, set_executor, GPUError
from hcqrt.mock.amd import tables as T
from hcqrt.mock.amd.topology import GPU_ID
from ioctl_defs.amd import kfd as K, pm4
from tests.abi_facts import load


def test_mock_tables_match_the_header_facts():
  heads = load("amd_kfd")["kfd_headers"]
  old, new = heads["linux_uapi_6.1_debian"], heads["rocm_libhsakmt_2025_08"]
  for nr, (name, layout, sizes) in T.IOCTLS.items():
    for h in (old, new):
      ent = next((i for i in h["ioctls"] if i["name"] == f"AMDKFD_IOC_{name}"), None)
      if ent is None: continue
      assert ent["nr"] == nr, name
      assert ent["size"] in sizes, (name, ent["size"], sizes)
    rec = new["records"][next(i for i in new["ioctls"] if i["name"] == f"AMDKFD_IOC_{name}")["arg"].split()[-1]]
    assert rec["size"] == layout.size, name
    assert [f["name"] for f in rec["fields"]] == layout.names, name

@pytest.fixture
def kfd():
  drv = install_mock_amd(kernel="6.12")
  fd = syscalls.open("/dev/kfd", os.O_RDWR)
  yield drv, fd
  syscalls.close(fd); uninstall_mock_amd(drv)

ABI17 = K.abi_for_version(1, 17)
def call(fd, name, **f):
  a = ABI17.new(name, **f); syscalls.ioctl(fd, ABI17.request(name), a); return a
def refused(e, fn, *a, **k):
  with pytest.raises(OSError) as ei: fn(*a, **k)
  assert ei.value.errno == e, ei.value
  return str(ei.value)

def acquire(drv, fd):
  r = syscalls.open_render_node(128)
  call(fd, "AMDKFD_IOC_ACQUIRE_VM", drm_fd=r, gpu_id=drv.gpu_id)
  return r

VA = 0x7e0000000000
def alloc(fd, drv, va, size, flags, mapit=True):
  a = call(fd, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=va, size=size, gpu_id=drv.gpu_id, flags=flags)
  if mapit: mapm(fd, drv, a.handle)
  return a
def mapm(fd, drv, h, name="AMDKFD_IOC_MAP_MEMORY_TO_GPU", n=1, succ=0):
  ids = ABI17.ffi.new("uint32_t[1]", [drv.gpu_id])
  return call(fd, name, handle=h, device_ids_array_ptr=int(ABI17.ffi.cast("uintptr_t", ids)), n_devices=n, n_success=succ)

def test_version_topology_and_ioctl_numbers(kfd):
  _, fd = kfd
  v = call(fd, "AMDKFD_IOC_GET_VERSION"); assert (v.major_version, v.minor_version) == (1, 17)
  assert syscalls.read_text("/sys/devices/virtual/kfd/kfd/topology/nodes/1/gpu_id").strip() == str(GPU_ID["gfx1100"])
  bad = K.ioc(K.IOC_READ | K.IOC_WRITE, K.AMDKFD_IOCTL_BASE, 0x30, 8)
  assert "nr" in refused(errno.EINVAL, syscalls.ioctl, fd, bad, bytearray(8))
  # a size no header produces: refused (stricter than the kernel, which would zero-fill)
  wrong = K.ioc(K.IOC_READ | K.IOC_WRITE, K.AMDKFD_IOCTL_BASE, 0x16, 32)
  assert "ALLOC_MEMORY_OF_GPU" in refused(errno.EINVAL, syscalls.ioctl, fd, wrong, bytearray(32))
  # the 88-byte create_queue of <= 1.16 headers is accepted (the kernel zero-fills)
  assert 88 in T.IOCTLS[0x02][2]

def test_runtime_enable_needs_1_14_and_only_once():
  drv = install_mock_amd(version=(1, 11)); fd = syscalls.open("/dev/kfd", os.O_RDWR)
  try: refused(errno.EINVAL, call, fd, "AMDKFD_IOC_RUNTIME_ENABLE", mode_mask=1)
  finally: syscalls.close(fd); uninstall_mock_amd(drv)
  drv = install_mock_amd(); fd = syscalls.open("/dev/kfd", os.O_RDWR)
  try:
    call(fd, "AMDKFD_IOC_RUNTIME_ENABLE", mode_mask=1)
    refused(errno.EBUSY, call, fd, "AMDKFD_IOC_RUNTIME_ENABLE", mode_mask=1)
  finally: syscalls.close(fd); uninstall_mock_amd(drv)

def test_memory_rules(kfd):
  drv, fd = kfd
  refused(errno.ENODEV, call, fd, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=VA, size=4096, gpu_id=drv.gpu_id, flags=K.ALLOC_MEM_FLAGS_VRAM)  # no VM
  # (ENODEV: kfd_bind_process_to_device without a VM, linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_process.c:1770-1771)
  refused(errno.EINVAL, call, fd, "AMDKFD_IOC_ACQUIRE_VM", drm_fd=fd, gpu_id=drv.gpu_id)   # not a render node
  r = acquire(drv, fd)
  # bound: the kernel compares the bound file before asking whether this one is amdgpu's (kfd_process.c:1703-1705)
  refused(errno.EBUSY, call, fd, "AMDKFD_IOC_ACQUIRE_VM", drm_fd=fd, gpu_id=drv.gpu_id)
  refused(errno.EINVAL, call, fd, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=VA, size=4096, gpu_id=1234, flags=K.ALLOC_MEM_FLAGS_VRAM)
  refused(errno.EINVAL, call, fd, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=VA, size=0, gpu_id=drv.gpu_id, flags=K.ALLOC_MEM_FLAGS_VRAM)
  refused(errno.EINVAL, call, fd, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=VA + 8, size=4096, gpu_id=drv.gpu_id, flags=K.ALLOC_MEM_FLAGS_VRAM)
  a = alloc(fd, drv, VA, 8192, K.ALLOC_MEM_FLAGS_VRAM, mapit=False)
  # an overlapping VA allocates; the GPU's VM refuses it at map time (amdgpu_vm.c:1742-1748)
  b = alloc(fd, drv, VA + 4096, 4096, K.ALLOC_MEM_FLAGS_VRAM, mapit=False)
  refused(errno.EINVAL, mapm, fd, drv, a.handle, "AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU")          # not mapped
  refused(errno.EINVAL, mapm, fd, drv, a.handle, n=0)
  refused(errno.EINVAL, mapm, fd, drv, a.handle, n=1, succ=2)
  refused(errno.ENOMEM, mapm, fd, drv, (drv.gpu_id << 32) | 999)
  assert mapm(fd, drv, a.handle).n_success == 1
  assert "overlaps" in refused(errno.EINVAL, mapm, fd, drv, b.handle)
  call(fd, "AMDKFD_IOC_FREE_MEMORY_OF_GPU", handle=b.handle)
  refused(errno.EBUSY, call, fd, "AMDKFD_IOC_FREE_MEMORY_OF_GPU", handle=a.handle)           # still mapped
  # VRAM without PUBLIC cannot be CPU-mapped (through the bound file: another is EACCES first, drm_gem.c:1185-1188)
  refused(errno.EPERM, syscalls.mmap, r, 8192, 3, syscalls.MAP_SHARED, a.mmap_offset)
  assert mapm(fd, drv, a.handle, "AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU").n_success == 1
  call(fd, "AMDKFD_IOC_FREE_MEMORY_OF_GPU", handle=a.handle)
  refused(errno.EINVAL, call, fd, "AMDKFD_IOC_FREE_MEMORY_OF_GPU", handle=a.handle)   # free: unknown handle is EINVAL
  refused(errno.ENOMEM, mapm, fd, drv, a.handle)                                       # map: unknown handle is ENOMEM

CW = VA + 0x10000000   # the CWSR area (44 MiB on gfx1100, 186 MiB on gfx942) after everything else
def cwsr_bytes(drv): n = drv.node_sizes; return -(-(n["cwsr_size"] + n["debug_memory_size"]) * drv.props["num_xcc"] // 4096) * 4096
GTT_UC = K.ALLOC_MEM_FLAGS_GTT | K.ALLOC_MEM_FLAGS_UNCACHED | K.ALLOC_MEM_FLAGS_WRITABLE
def test_queue_parameter_rules(kfd):
  drv, fd = kfd
  acquire(drv, fd)
  ring = alloc(fd, drv, VA, 0x10000, GTT_UC); ptrs = alloc(fd, drv, VA + 0x10000, 4096, GTT_UC)
  eop = alloc(fd, drv, VA + 0x20000, 0x1000, K.ALLOC_MEM_FLAGS_VRAM)
  cw = alloc(fd, drv, CW, cwsr_bytes(drv), K.ALLOC_MEM_FLAGS_VRAM)
  good = dict(ring_base_address=VA, ring_size=0x10000, gpu_id=drv.gpu_id, queue_type=0, queue_percentage=100, queue_priority=7,
              read_pointer_address=VA + 0x10000, write_pointer_address=VA + 0x10008, eop_buffer_address=VA + 0x20000, eop_buffer_size=0x1000,
              ctx_save_restore_address=CW, ctx_save_restore_size=drv.props["cwsr_size"], ctl_stack_size=drv.props["ctl_stack_size"])
  for bad, e in [(dict(queue_percentage=101), errno.EINVAL), (dict(queue_priority=16), errno.EINVAL), (dict(ring_size=0x3000), errno.EINVAL),
                 (dict(queue_type=9), 524), (dict(ring_base_address=VA + 0x40000000), errno.EINVAL), (dict(eop_buffer_size=0x800), errno.EINVAL),
                 (dict(ctx_save_restore_size=0x1000), errno.EINVAL), (dict(gpu_id=7), errno.EINVAL)]:
    refused(e, call, fd, "AMDKFD_IOC_CREATE_QUEUE", **{**good, **bad})
  q = call(fd, "AMDKFD_IOC_CREATE_QUEUE", **good)
  assert q.doorbell_offset >> 62 == K.MMAP_TYPE_DOORBELL
  refused(errno.EBUSY, mapm, fd, drv, ring.handle, "AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU")   # the queue still uses it
  refused(errno.EINVAL, syscalls.mmap, fd, 0x1000, 3, syscalls.MAP_SHARED, q.doorbell_offset & ~0x1FFF)   # frame is 0x2000
  call(fd, "AMDKFD_IOC_DESTROY_QUEUE", queue_id=q.queue_id)
  refused(errno.EINVAL, call, fd, "AMDKFD_IOC_DESTROY_QUEUE", queue_id=q.queue_id)
  del ptrs, eop, cw

def test_event_page_rules(kfd):
  drv, fd = kfd
  acquire(drv, fd)
  page = alloc(fd, drv, VA, 0x8000, GTT_UC)
  ev = call(fd, "AMDKFD_IOC_CREATE_EVENT", event_page_offset=page.handle, event_type=0, auto_reset=1)
  refused(errno.EINVAL, call, fd, "AMDKFD_IOC_CREATE_EVENT", event_page_offset=page.handle, event_type=0, auto_reset=1)
  mapm(fd, drv, page.handle, "AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU")
  refused(errno.EPERM, call, fd, "AMDKFD_IOC_FREE_MEMORY_OF_GPU", handle=page.handle)
  evd = ABI17.new("kfd_event_data", event_id=ev.event_id)
  w = call(fd, "AMDKFD_IOC_WAIT_EVENTS", events_ptr=int(ABI17.ffi.cast("uintptr_t", evd)), num_events=1, wait_for_all=1, timeout=5)
  assert w.wait_result == K.WAIT_RESULT_TIMEOUT
  call(fd, "AMDKFD_IOC_SET_EVENT", event_id=ev.event_id)
  w = call(fd, "AMDKFD_IOC_WAIT_EVENTS", events_ptr=int(ABI17.ffi.cast("uintptr_t", evd)), num_events=1, wait_for_all=1, timeout=5)
  assert w.wait_result == K.WAIT_RESULT_COMPLETE
  refused(errno.EINVAL, call, fd, "AMDKFD_IOC_SET_EVENT", event_id=ev.event_id + 50)

# ---- the command processor, driven directly ----
class Rig:
  """A mock KFD with one compute queue whose ring the test writes."""
  def __init__(self, drv, fd):
    self.drv, self.fd = drv, fd
    self.r = acquire(drv, fd)
    self.ring = alloc(fd, drv, VA, 0x10000, GTT_UC); alloc(fd, drv, VA + 0x10000, 4096, GTT_UC)
    alloc(fd, drv, VA + 0x20000, 0x1000, K.ALLOC_MEM_FLAGS_VRAM); alloc(fd, drv, CW, cwsr_bytes(drv), K.ALLOC_MEM_FLAGS_VRAM)
    self.cached = alloc(fd, drv, VA + 0x800000, 0x10000, K.ALLOC_MEM_FLAGS_GTT | K.ALLOC_MEM_FLAGS_WRITABLE)
    self.code = alloc(fd, drv, VA + 0x900000, 0x1000, K.ALLOC_MEM_FLAGS_VRAM | K.ALLOC_MEM_FLAGS_EXECUTABLE)
    q = call(fd, "AMDKFD_IOC_CREATE_QUEUE", ring_base_address=VA, ring_size=0x10000, gpu_id=drv.gpu_id, queue_type=0, queue_percentage=100,
             read_pointer_address=VA + 0x10000, write_pointer_address=VA + 0x10008, eop_buffer_address=VA + 0x20000, eop_buffer_size=0x1000,
             ctx_save_restore_address=CW, ctx_save_restore_size=drv.props["cwsr_size"], ctl_stack_size=drv.props["ctl_stack_size"])
    page = syscalls.mmap(fd, 0x2000, 3, syscalls.MAP_SHARED, q.doorbell_offset & ~0x1FFF)
    self.doorbell, self.put = page + (q.doorbell_offset & 0x1FFF), 0
    self.map = syscalls.mmap(self.r, 0x10000, 3, syscalls.MAP_SHARED | syscalls.MAP_FIXED, self.cached.mmap_offset,
                             syscalls.mmap(-1, 0x10000, 0, syscalls.MAP_PRIVATE | syscalls.MAP_ANONYMOUS, 0))
  def submit(self, dws):
    for i, d in enumerate(dws): self.drv.vm.write(VA + 4 * ((self.put + i) % 0x4000), struct.pack("<I", d))
    self.put += len(dws)
    syscalls.mmio_write64(self.doorbell, self.put)
    self.drv.settle()   # the CP runs the work later, on its engine thread: wait for it (and for the error it stopped on)
  def host64(self, off): return ctypes.c_uint64.from_address(self.map + off).value

@pytest.fixture
def rig(kfd): return Rig(*kfd)

def test_release_without_writeback_stays_in_l2(rig):
  rig.submit(pm4.release_mem(rig.cached.va_addr, 5))
  assert rig.host64(0) == 0                                  # invisible to the host
  assert rig.drv.vm.read32(rig.cached.va_addr) == 5               # the GPU sees its L2
  rig.submit(pm4.release_mem(rig.cached.va_addr + 8, 6, cache=pm4.RM_GCR_GL2_WB))
  assert (rig.host64(0), rig.host64(8)) == (5, 6)

def test_wait_reg_mem_blocks_until_the_host_writes(rig):
  rig.submit(pm4.wait_reg_mem(rig.cached.va_addr + 64, 3) + pm4.release_mem(rig.cached.va_addr, 9, cache=pm4.RM_GCR_GL2_WB))
  assert rig.host64(0) == 0
  ctypes.c_uint32.from_address(rig.map + 64).value = 3
  rig.drv.run_all()
  assert rig.host64(0) == 9

def _dispatch(rig, tag):
  regs = {"PGM_LO": 0x2E0C, "USER_DATA_0": 0x2E40, "NUM_THREAD_X": 0x2E07, "PGM_RSRC1": 0x2E12}
  return (pm4.set_sh_reg(regs["PGM_LO"], (rig.code.va_addr >> 8) & 0xFFFFFFFF, rig.code.va_addr >> 40) +
          pm4.set_sh_reg(regs["PGM_RSRC1"], 0, 2 << 1) + pm4.set_sh_reg(regs["USER_DATA_0"], tag, 0) +
          pm4.set_sh_reg(regs["NUM_THREAD_X"], 32, 1, 1) + pm4.dispatch_direct(4, 1, 1, 1 | 4 | (1 << 15)))

def test_unbarriered_dispatches_reorder_and_barriers_order(rig):
  ran = []
  prev = set_executor(lambda d, vm: ran.append(d.user_data[0]))
  try:
    rig.submit(_dispatch(rig, 1) + _dispatch(rig, 2) + pm4.release_mem(rig.cached.va_addr, 1))
    assert ran == [2, 1]                                     # launched together: newest first
    ran.clear()
    rig.submit(_dispatch(rig, 1) + pm4.event_write(pm4.CS_PARTIAL_FLUSH, 4) + _dispatch(rig, 2) + pm4.release_mem(rig.cached.va_addr, 2))
    assert ran == [1, 2]
    d = rig.drv.queues[0].dispatches[-1]
    assert (d.program, d.grid, d.block, d.wave32, d.user_sgprs) == (rig.code.va_addr, (4, 1, 1), (32, 1, 1), True, 2)
  finally: set_executor(prev)

def test_unknown_packets_and_faults_fail_loudly(rig):
  with pytest.raises(GPUError, match="COPY_DATA"): rig.submit(pm4.packet(pm4.COPY_DATA, 0, 0, 0, 0, 0))
  assert "COPY_DATA" in rig.drv.queues[0].error

def test_default_executor_runs_the_code_in_gpu_memory(rig):
  prev = set_executor(None)   # the default: the RDNA3 emulator over the mock's own GPU memory
  try:
    rig.drv.vm.write(rig.code.va_addr, bytes(16))   # not an instruction stream: the emulator refuses, the queue stops
    with pytest.raises(GPUError, match=f"program at {rig.code.va_addr:#x} cannot run on the RDNA3 emulator"):
      rig.submit(_dispatch(rig, 1) + pm4.release_mem(rig.cached.va_addr, 1))
    assert "RDNA3 emulator" in rig.drv.queues[0].error
  finally: set_executor(prev)

@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
def test_only_int_sel_2_interrupts_event_ids_from_1_and_gfx942_drops_context_id_0(arch):
  drv = install_mock_amd(arch, kernel="6.12"); fd = syscalls.open("/dev/kfd", os.O_RDWR)
  try:
    rig = Rig(drv, fd)
    page = alloc(fd, drv, VA + 0x2000000, 0x8000, GTT_UC)
    ev0 = call(fd, "AMDKFD_IOC_CREATE_EVENT", event_page_offset=page.handle, event_type=0, auto_reset=1).event_id
    ev1 = call(fd, "AMDKFD_IOC_CREATE_EVENT", event_type=0, auto_reset=1).event_id
    assert (ev0, ev1) == (1, 2)   # id 0 is reserved at process creation (kfd_events.c:245-262)
    def release(ev, int_sel, ctxid=None):
      drv.events[ev]["signaled"] = False
      rig.submit(pm4.release_mem(VA + 0x2000000 + 8 * ev, ev, data_sel=pm4.DATA_SEL_32_BIT_LOW, int_sel=int_sel, ctxid=ev if ctxid is None else ctxid,
                                 event_type=pm4.BOTTOM_OF_PIPE_TS))
      return drv.events[ev]["signaled"]
    assert not release(ev1, pm4.INT_SEL_SEND_DATA_AFTER_WRITE_CONFIRM)   # data only, no interrupt
    assert release(ev1, pm4.INT_SEL_SEND_INTERRUPT_AFTER_WRITE_CONFIRM)
    # context id 0 names no event: gfx11 scans every written slot, GC 9.4.x drops the interrupt in the top half
    assert release(ev0, pm4.INT_SEL_SEND_INTERRUPT_AFTER_WRITE_CONFIRM, ctxid=0) == (arch != "gfx942")
  finally: syscalls.close(fd); uninstall_mock_amd(drv)

@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
def test_l2_invalidate_without_writeback_loses_dirty_lines(arch):
  drv = install_mock_amd(arch, kernel="6.12"); fd = syscalls.open("/dev/kfd", os.O_RDWR)
  gfx = 11 if arch == "gfx1100" else 9
  inv_only = dict(gcr_cntl=pm4.GCR_GL2_INV) if gfx == 11 else dict(coher_cntl=pm4.COHER_TC_ACTION_ENA)
  inv_wb = dict(gcr_cntl=pm4.GCR_GL2_INV | pm4.GCR_GL2_WB) if gfx == 11 else dict(coher_cntl=pm4.COHER_TC_ACTION_ENA | pm4.COHER_TC_WB_ACTION_ENA)
  try:
    rig = Rig(drv, fd)
    rig.submit(pm4.release_mem(rig.cached.va_addr, 5) + pm4.acquire_mem(gfx, **inv_only))   # dirty in L2, then invalidated
    assert rig.host64(0) == 0 and drv.vm.read32(rig.cached.va_addr) == 0                     # gone for host and GPU
    rig.submit(pm4.release_mem(rig.cached.va_addr, 6) + pm4.acquire_mem(gfx, **inv_wb))
    assert rig.host64(0) == 6                                                                  # written back first
  finally: syscalls.close(fd); uninstall_mock_amd(drv)

def _memfds() -> tuple[int, int]:
  """(memfds open, mappings of memfds) of the mock's BO memory in this process."""
  n = 0
  for fd in os.listdir("/proc/self/fd"):
    try: n += os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:amdmock")
    except OSError: pass
  with open("/proc/self/maps") as f: return n, sum("/memfd:amdmock" in line for line in f)

def test_closing_the_device_files_frees_nothing_the_process_end_frees_all():
  """Closing every /dev/kfd fd and the render node leaves the KFD process, its BOs and their memory (the MMU notifier's
  reference, the PDD's drm_file: MockKFD.close): a new fd reaches the same BOs. The process's end frees every BO, the
  pool's pages with them, and closes every memfd (MockKFD.exit); a BO the process still maps keeps its memory, valid,
  until munmap (the mapping holds the memfd); a call on the ended process's fds is EBADF. (Before, a BO never freed
  kept its memfd for good: 2751 were open after 5 AMD test files.)"""
  import gc
  gc.collect()   # (an earlier test's garbage, its memfds with it, goes now: not mid-test, changing the counts)
  base = _memfds()
  drv = install_mock_amd(kernel="6.12")
  fd = syscalls.open("/dev/kfd", os.O_RDWR); r = acquire(drv, fd)
  try:
    gtt = K.ALLOC_MEM_FLAGS_GTT | K.ALLOC_MEM_FLAGS_WRITABLE
    kept = alloc(fd, drv, VA, 8192, gtt, mapit=False)
    at = syscalls.mmap(r, 8192, 3, syscalls.MAP_SHARED, kept.mmap_offset); ctypes.memmove(at, b"kept", 4)
    pooled = alloc(fd, drv, VA + 8192, 4096, gtt)
    drv.vm.write_cached(VA + 8192, b"L2!!")   # (a dirty line: its pages go to the pool when freed)
    mapm(fd, drv, pooled.handle, "AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU"); call(fd, "AMDKFD_IOC_FREE_MEMORY_OF_GPU", handle=pooled.handle)
    used = _memfds()
    syscalls.close(fd); syscalls.close(r)
    fd = syscalls.open("/dev/kfd", os.O_RDWR)
    assert _memfds() == used and drv.freed_pages[("gtt", 0)] and ctypes.string_at(drv.bos[kept.handle].host, 4) == b"kept"
    mapm(fd, drv, kept.handle)   # (the same process: its BO, its VM)
    drv.exit()
    assert _memfds() == (base[0], base[1] + 1)   # (one mapping left: the process's own of `kept`)
    assert ctypes.string_at(at, 4) == b"kept"
    ctypes.memmove(at, b"mine", 4)
    refused(errno.EBADF, call, fd, "AMDKFD_IOC_GET_VERSION")
    syscalls.munmap(at, 8192)
    assert _memfds() == base
  finally: syscalls.close(fd); uninstall_mock_amd(drv)

def test_a_bo_nothing_holds_closes_its_memfd_and_its_view():
  """A BO dropped without close (a mock dropped whole) takes its memory with it: its memfd closes and the mock's own
  mappings go, its view of pages of several memfds too (memory.py Pages, BO). Before, each leaked an fd and a mapping."""
  import gc
  from hcqrt.mock.amd.memory import BO, Pages
  gc.collect()   # (an earlier test's garbage goes now, not at the gc.collect below: the count would drop)
  base = _memfds()
  bo = BO(1, 0x10000, 3 * 4096, 0)
  assert _memfds() == (base[0] + 1, base[1] + 1)
  del bo; gc.collect()
  assert _memfds() == base
  p, q = Pages(4096), Pages(4096)
  bo = BO(1, 0x10000, 2 * 4096, 0, given=[(p, 0, 1), (q, 0, 1)])
  assert _memfds() == (base[0] + 2, base[1] + 4)   # (each memfd's own mapping, and the view's two)
  del bo, p, q; gc.collect()
  assert _memfds() == base

def test_a_dropped_mocks_memory_goes_even_inside_the_syscall_seams_lock(monkeypatch):
  """The cyclic GC runs finalizers on whatever thread allocates, one inside hcqrt.syscalls' lock (a plain Lock) too: a
  dropped mock's memfds must close without that lock (memory.py _unmap). Before, the finalizer's syscalls.munmap took
  it again: here an error, on a real thread a deadlock, and the memfd stayed open."""
  import gc
  from hcqrt.mock.amd.memory import Pages
  class Taken:   # the lock as this thread holds it: taking it again never returns
    def __enter__(self): raise AssertionError("hcqrt.syscalls._lock taken inside itself")
    def __exit__(self, *a): return False
  gc.collect()
  base = _memfds()
  p = Pages(4096); p.cycle = p   # (only the cyclic GC frees it)
  del p
  monkeypatch.setattr(syscalls, "_lock", Taken())
  gc.collect()
  monkeypatch.undo()
  assert _memfds() == base

VIEW_AT_EXIT_CHILD = """
import atexit, ctypes
seen = []
atexit.register(lambda: seen and print(ctypes.string_at(seen[0].host, 4)))   # (first registered: runs last)
from hcqrt.mock.amd.memory import BO, Pages
p, q = Pages(4096), Pages(4096)
bo = BO(1, 0x10000, 2 * 4096, 0, given=[(p, 0, 1), (q, 0, 1)]); seen.append(bo)
ctypes.memmove(bo.host, b"view", 4)
"""

def test_a_bo_view_stays_mapped_while_the_interpreter_exits():
  """atexit runs while daemon threads still run: the mock's engine (kfd.py _kick, daemon=True) may be reading a BO's
  view then. The view's finalizer must not unmap it at exit (the OS does, after), as Pages' does not: here the last
  atexit hook stands for the engine's read. Before, weakref.finalize's atexit hook unmapped it first: SIGSEGV."""
  import pathlib, subprocess, sys
  from tests.child_env import pythonpath
  repo = pathlib.Path(__file__).resolve().parents[2]
  r = subprocess.run([sys.executable, "-c", VIEW_AT_EXIT_CHILD], capture_output=True, text=True, timeout=120, cwd=repo,
                     env={**os.environ, "PYTHONPATH": pythonpath(repo)})
  assert r.returncode == 0 and r.stdout.strip() == "b'view'", f"rc {r.returncode}:\n{r.stdout}\n{r.stderr[-2000:]}"

def test_a_render_fd_is_a_file_not_a_number_for_acquire_vm_and_mmap():
  """ACQUIRE_VM's PDD keeps the render node's file past its fd's close (MockKFD.close), and the kernel compares files:
  a new render fd, here given the closed one's number again, is EBUSY at ACQUIRE_VM (kfd_chardev.c:996-997), and a
  BO's mmap offset is allowed to the bound file only, so mmap through any other render fd is EACCES (drm_gem.c:1185).
  Before, the mock compared numbers and let both through, and mapped a BO through any render fd of its GPU."""
  drv = install_mock_amd(kernel="6.12")
  fd = syscalls.open("/dev/kfd", os.O_RDWR); r = acquire(drv, fd)
  try:
    a = alloc(fd, drv, VA, 8192, K.ALLOC_MEM_FLAGS_GTT | K.ALLOC_MEM_FLAGS_WRITABLE)
    other = syscalls.open_render_node(128)
    refused(errno.EACCES, syscalls.mmap, other, 8192, 3, syscalls.MAP_SHARED, a.mmap_offset)
    syscalls.close(other); syscalls.close(r)
    r = syscalls.open_render_node(128)   # (the lowest free number: the closed one's)
    refused(errno.EBUSY, call, fd, "AMDKFD_IOC_ACQUIRE_VM", drm_fd=r, gpu_id=drv.gpu_id)
    refused(errno.EACCES, syscalls.mmap, r, 8192, 3, syscalls.MAP_SHARED, a.mmap_offset)
    mapm(fd, drv, a.handle, "AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU"); mapm(fd, drv, a.handle)   # (the VM is still there)
  finally: syscalls.close(r); syscalls.close(fd); uninstall_mock_amd(drv)

def test_a_wait_the_process_exit_interrupts_fails_and_never_completes(kfd):
  """A thread waiting for all of its events when another ends the process (MockKFD.exit) gets an error, not
  COMPLETE: the events are gone and none of them was signalled. Before, the wait found no event left unsignalled
  (an empty `all`), took the wait as complete and died on the gone event (KeyError)."""
  import threading
  drv, fd = kfd
  acquire(drv, fd)
  page = alloc(fd, drv, VA, 0x8000, GTT_UC)
  ev = call(fd, "AMDKFD_IOC_CREATE_EVENT", event_page_offset=page.handle, event_type=0, auto_reset=1)
  evd = ABI17.new("kfd_event_data", event_id=ev.event_id)
  waiting, out = threading.Event(), []
  class SeenWaiting(threading.Condition):   # (the waiter is asleep in the wait, lock released: exit may run now)
    def wait(self, timeout=None): waiting.set(); return super().wait(timeout)
  drv.work = SeenWaiting(drv.lock)
  def waiter():
    try: out.append(call(fd, "AMDKFD_IOC_WAIT_EVENTS", events_ptr=int(ABI17.ffi.cast("uintptr_t", evd)), num_events=1, wait_for_all=1, timeout=60_000).wait_result)
    except OSError as e: out.append(e.errno)
    except Exception as e: out.append(e)   # (the old mock's KeyError)
  t = threading.Thread(target=waiter); t.start()
  assert waiting.wait(60)
  drv.exit(); t.join()
  assert out == [errno.EBADF], out
