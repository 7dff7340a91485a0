"""Bring-up as Linux 6.12 and 6.1 do it: the sysfs each kernel prints, CREATE_QUEUE's buffer checks (6.12), the
context-save sizes the backend must compute itself (6.1), a box with many GPU nodes and one the cgroup hides."""
import errno, os
import pytest
from hcqrt import syscalls
from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd, GPUError
from hcqrt.mock.amd.topology import GPU_ID, TOPOLOGY
from hcqrt.amd.device import AMDDevice, AMDError
from ioctl_defs.amd import kfd as K

# the kernel formula's numbers (linux@v6.12.117 kfd_queue.c:450-490), worked out by hand in ../shared/audits/amd.md row 1/17
KERNEL_SIZES = {"gfx1100": (0xA000, 0x2BEA000, 0x2C02000), "gfx942": (0x3000, 0x1621000, 0xB167000)}

@pytest.fixture
def mock(request):
  drvs = []
  def make(*a, **k):
    drvs.append(drv := install_mock_amd(*a, **k)); return drv
  yield make
  for d in drvs: uninstall_mock_amd(d)

def props(node: int) -> list[tuple[str, int]]:
  return [(k, int(v)) for k, v in (l.split() for l in syscalls.read_text(f"{TOPOLOGY}/nodes/{node}/properties").splitlines())]

@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
def test_sysfs_as_each_kernel_prints_it(mock, arch):
  drv = mock(arch, kernel="6.12")
  p = props(1); names = [k for k, _ in p]
  ctl, cwsr, _ = KERNEL_SIZES[arch]
  assert dict(p)["cwsr_size"] == cwsr and dict(p)["ctl_stack_size"] == ctl
  assert names.index("cwsr_size") == names.index("num_cp_queues") + 1 and names.index("ctl_stack_size") == names.index("cwsr_size") + 1
  assert "eop_buffer_size" not in names and "debug_memory_size" not in names   # never printed
  uninstall_mock_amd(drv)
  if arch == "gfx942":   # 6.1 has no GC 9.4.3 (linux@v6.1.192:drivers/gpu/drm/amd/amdkfd/kfd_device.c:137): refused
    with pytest.raises(ValueError, match="6.1 cannot drive gfx942"): mock(arch, kernel="6.1")
    return
  mock(arch, kernel="6.1")
  names = [k for k, _ in props(1)]
  assert "cwsr_size" not in names and "ctl_stack_size" not in names

@pytest.mark.parametrize("arch,kernel", [("gfx1100", "6.12"), ("gfx1100", "6.1"), ("gfx942", "6.12")])   # (no gfx942 on 6.1)
def test_backend_sizes_the_cwsr_area_as_the_kernel_requires(mock, arch, kernel):
  drv = mock(arch, kernel=kernel)
  d = AMDDevice("AMD")
  ctl, cwsr, bo = KERNEL_SIZES[arch]
  assert d.compute.cwsr.size == bo and drv.calls.count("CREATE_QUEUE") == 2 and ctl == drv.node_sizes["ctl_stack_size"]
  q = drv.queues[d.compute.queue_id]
  assert q.ctx_save == (d.compute.cwsr.va, cwsr)
  drv.preempt()   # a full-occupancy wave save fits every XCC's area
  assert q.error is None
  d.synchronize()

def _queue_args(drv, fd, **over):
  """Allocate and map the buffers of one compute queue the way the kernel wants them; returns CREATE_QUEUE's fields."""
  abi = K.abi_for_version(*drv.version)
  r = syscalls.open_render_node(128)
  call = lambda name, **f: syscalls.ioctl(fd, abi.request(name), a := abi.new(name, **f)) or a
  call("AMDKFD_IOC_ACQUIRE_VM", drm_fd=r, gpu_id=drv.gpu_id)
  ids = abi.ffi.new("uint32_t[1]", [drv.gpu_id])
  va = 0x7e0000000000
  def bo(size, flags, at):
    h = call("AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=va + at, size=size, gpu_id=drv.gpu_id, flags=flags).handle
    call("AMDKFD_IOC_MAP_MEMORY_TO_GPU", handle=h, device_ids_array_ptr=int(abi.ffi.cast("uintptr_t", ids)), n_devices=1)
    return va + at
  n, gtt = drv.node_sizes, K.ALLOC_MEM_FLAGS_GTT | K.ALLOC_MEM_FLAGS_UNCACHED
  sizes = {"ring": 0x10000, "ptrs": 0x1000, "eop": 0x1000, "cwsr": -(-(n["cwsr_size"] + n["debug_memory_size"]) * drv.props["num_xcc"] // 4096) * 4096}
  sizes.update({k[5:]: v for k, v in over.items() if k.startswith("size_")})
  ring, ptrs = bo(sizes["ring"], gtt, 0), bo(sizes["ptrs"], gtt, 0x100000)
  eop, cw = bo(sizes["eop"], K.ALLOC_MEM_FLAGS_VRAM, 0x200000), bo(sizes["cwsr"], K.ALLOC_MEM_FLAGS_VRAM, 0x10000000)
  args = dict(ring_base_address=ring, ring_size=0x10000, gpu_id=drv.gpu_id, queue_type=0, queue_percentage=100, queue_priority=7,
              read_pointer_address=ptrs, write_pointer_address=ptrs + 8, eop_buffer_address=eop, eop_buffer_size=0x1000,
              ctx_save_restore_address=cw, ctx_save_restore_size=n["cwsr_size"], ctl_stack_size=n["ctl_stack_size"])
  args.update({k: v for k, v in over.items() if not k.startswith("size_")})
  return lambda: call("AMDKFD_IOC_CREATE_QUEUE", **args)

@pytest.mark.parametrize("bad", [dict(size_cwsr=KERNEL_SIZES["gfx1100"][1]),   # the old backend's BO: cwsr_size alone
                                 dict(size_ring=0x20000), dict(size_ptrs=0x2000), dict(size_eop=0x2000),
                                 dict(ctx_save_restore_size=0x1000), dict(ctl_stack_size=0x3000), dict(eop_buffer_size=0x2000),
                                 dict(write_pointer_address=0x7e0000100000 + 0x1000)])
def test_create_queue_checks_buffers_like_kfd_queue_c(mock, bad):
  drv = mock("gfx1100", kernel="6.12")
  fd = syscalls.open("/dev/kfd", os.O_RDWR)
  with pytest.raises(OSError) as e: _queue_args(drv, fd, **bad)()
  assert e.value.errno == errno.EINVAL
  uninstall_mock_amd(drv)   # (only this mock: a MOCKGPU=1 run's own drivers stay)
  drv = mock("gfx1100", kernel="6.12")   # and the same buffers, done right, are accepted
  fd = syscalls.open("/dev/kfd", os.O_RDWR)
  assert _queue_args(drv, fd)().queue_id == 0

@pytest.mark.parametrize("bad", [dict(size_ptrs=0x2000), dict(write_pointer_address=0x7e0000100000 + 0x1000),
                                 dict(write_pointer_address=0x7e0000200000)])   # two pages; no BO; the EOP buffer (VRAM)
def test_6_1_still_checks_the_mes_wptr(mock, bad):
  # 6.1 skips kfd_queue_acquire_buffers but keeps the MES wptr lookup, the one-page limit and the GART (GTT) mapping
  # (linux@v6.1.192:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c:345-376)
  drv = mock("gfx1100", kernel="6.1")
  fd = syscalls.open("/dev/kfd", os.O_RDWR)
  with pytest.raises(OSError) as e: _queue_args(drv, fd, **bad)()
  assert e.value.errno == errno.EINVAL and "write_pointer_address" in str(e.value)

def test_pre_6_12_takes_anything_but_a_preemption_faults_a_short_cwsr_area(mock):
  drv = mock("gfx1100", kernel="6.1")
  fd = syscalls.open("/dev/kfd", os.O_RDWR)
  q = _queue_args(drv, fd, size_cwsr=0x1000, ctx_save_restore_size=0, ctl_stack_size=0)()   # what the old backend passed
  with pytest.raises(GPUError, match="CWSR save"): drv.preempt(q.queue_id)

def test_many_nodes_sort_numerically_and_a_hidden_node_is_skipped(mock):
  # 11 GPU nodes (1..11) after the CPU; the cgroup hides node 3; the mock serves node 11, the 10th visible GPU
  drv = mock("gfx1100", kernel="6.12", gpus=11, serve=11, hidden=(3,))
  with pytest.raises(PermissionError): syscalls.read_text(f"{TOPOLOGY}/nodes/3/gpu_id")
  d = AMDDevice("AMD:9")
  assert d.gpu_id == drv.gpu_id == GPU_ID["gfx1100"] + 10 and d.gpu_count == 10
  d.synchronize()

def test_runtime_enable_from_kfd_1_13_and_never_after_a_queue(mock):
  drv = mock("gfx1100", version=(1, 13), kernel="6.12")
  d = AMDDevice("AMD")
  assert "RUNTIME_ENABLE" in drv.calls
  with pytest.raises(AMDError, match="EBUSY"): d.ioctl("AMDKFD_IOC_RUNTIME_ENABLE", mode_mask=1)
  drv.runtime_enabled = False
  with pytest.raises(AMDError, match="EEXIST"): d.ioctl("AMDKFD_IOC_RUNTIME_ENABLE", mode_mask=1)

def test_small_bar_code_goes_through_sdma_and_public_vram_names_resizable_bar(mock):
  from hcqrt.mock.amd import set_executor
  import struct
  drv = mock("gfx1100", kernel="6.12", small_bar=True)
  d = AMDDevice("AMD")
  code = b"\x00\x00\xb0\xbf" * 16
  desc = struct.pack("<III4xq20xIIIHH4x", 0, 0, 8, 0, 0, 0x60AF0041, 2 << 1 | 1 << 7, (1 << 3) | (1 << 10), 0)
  from hcqrt.amd.device import AMDProgram
  seen = []
  prev = set_executor(lambda disp, vm: seen.append(bytes(vm.read(disp.program, len(code)))))
  try: AMDProgram(d, "k", code, desc, [(0, 8)])(0, global_size=(1, 1, 1), local_size=(32, 1, 1), wait=True)
  finally: set_executor(prev)
  assert seen == [code]   # the CP fetched the code the SDMA engine put into (CPU-invisible) VRAM
  assert not any(b.flags & K.ALLOC_MEM_FLAGS_PUBLIC for b in drv.bos.values())
  with pytest.raises(AMDError, match="EINVAL.*Resizable BAR"): d.gpu_alloc(4096, "vram", host=True)

@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
def test_va_range_covers_vram_and_coalesces(mock, arch):
  from hcqrt.mock.amd.topology import VRAM_BYTES
  mock(arch, kernel="6.12")
  d = AMDDevice("AMD")
  assert d.va_size >= VRAM_BYTES[arch]   # an MI300X's 192 GiB fit
  holes = len(d.va.free)
  for k in range(300):   # 19 GiB of ever-changing sizes with nothing live (exhausted a 16 GiB, same-size-only free list)
    b = d.gpu_alloc((64 << 20) + k * 4096); d.gpu_free(b)
  assert len(d.va.free) == holes
  a = d.allocator
  b = a.alloc(1 << 20); va = b.va; a.free(b)
  b2 = a.alloc(1 << 20)                 # the size-keyed cache hands the same memory back
  assert b2.va == va and b2.handle == b.handle and b.freed and not b2.freed

def test_mes_wptr_and_event_page_must_be_gtt(mock):
  drv = mock("gfx1100", kernel="6.12")
  fd = syscalls.open("/dev/kfd", os.O_RDWR)
  create = _queue_args(drv, fd)
  drv.bos[next(h for h, b in drv.bos.items() if b.va == 0x7e0000100000)].flags = K.ALLOC_MEM_FLAGS_VRAM   # the pointers' BO in VRAM
  with pytest.raises(OSError, match="GTT") as e: create()
  assert e.value.errno == errno.EINVAL
  abi = K.abi_for_version(*drv.version)
  vram = next(h for h, b in drv.bos.items() if b.va == 0x7e0000200000)
  with pytest.raises(OSError, match="GTT"):
    syscalls.ioctl(fd, abi.request("AMDKFD_IOC_CREATE_EVENT"), abi.new("AMDKFD_IOC_CREATE_EVENT", event_page_offset=vram, event_type=0))
