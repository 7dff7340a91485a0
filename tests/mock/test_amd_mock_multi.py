"""The AMD mock with several GPUs behind one KFD (MockKFD(gpus=n), MOCKGPU_COUNT): one KFD process for every /dev/kfd
fd, a VM per GPU bound through its own render node, peer VRAM refused, GTT shared (issue 26 stage 1)."""
import errno, os
import numpy as np
import pytest
from hcqrt import syscalls
from hcqrt.amd.device import AMDDevice
from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd
from hcqrt.mock.amd.topology import GPU_ID, TOPOLOGY
from ioctl_defs.amd import kfd as K

ABI = K.abi_for_version(1, 17)
def call(fd, name, **f):
  a = ABI.new(name, **f); syscalls.ioctl(fd, ABI.request(name), a); return a
def refused(e, fn, *a, **k):
  with pytest.raises(OSError) as ei: fn(*a, **k)
  assert ei.value.errno == e, ei.value
  return str(ei.value)
def mapm(fd, handle, gpu_ids, name="AMDKFD_IOC_MAP_MEMORY_TO_GPU"):
  ids = ABI.ffi.new(f"uint32_t[{len(gpu_ids)}]", gpu_ids)
  a = ABI.new(name, handle=handle, device_ids_array_ptr=int(ABI.ffi.cast("uintptr_t", ids)), n_devices=len(gpu_ids))
  try: syscalls.ioctl(fd, ABI.request(name), a)
  except OSError as e: return a, e
  return a, None

@pytest.fixture
def drv():
  d = install_mock_amd("gfx1100", kernel="6.12", gpus=2, p2p="none")
  yield d
  uninstall_mock_amd(d)

G0, G1 = GPU_ID["gfx1100"], GPU_ID["gfx1100"] + 1

def test_each_gpu_has_its_render_node_and_slot(drv):
  props = [dict(l.split() for l in syscalls.read_text(f"{TOPOLOGY}/nodes/{n}/properties").splitlines()) for n in (1, 2)]
  assert [p["drm_render_minor"] for p in props] == ["128", "129"]
  assert props[0]["location_id"] != props[1]["location_id"]
  assert sorted(drv.nodes) == [G0, G1]

def test_acquire_vm_binds_any_render_node_once(drv):
  """Audit m26 row 4: the kernel does not check whose render node the file is (kfd_process.c:1704-1714,
  amdgpu_drv.c:2987-2999): GPU 1 binds GPU 0's file; that VM is then a compute VM, so GPU 0 gets EINVAL for it
  (amdgpu_amdkfd_gpuvm.c:1556-1558). A GPU with no VM answers ALLOC with ENODEV (kfd_bind_process_to_device,
  kfd_process.c:1770-1771); an unknown gpu_id is EINVAL."""
  fd = syscalls.open("/dev/kfd", os.O_RDWR)
  r0, r1 = syscalls.open_render_node(128), syscalls.open_render_node(129)
  refused(errno.ENODEV, call, fd, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=0x7e0000000000, size=4096, gpu_id=G0, flags=K.ALLOC_MEM_FLAGS_VRAM)
  refused(errno.EINVAL, call, fd, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=0x7e0000000000, size=4096, gpu_id=G0 + 7, flags=K.ALLOC_MEM_FLAGS_VRAM)
  call(fd, "AMDKFD_IOC_ACQUIRE_VM", drm_fd=r0, gpu_id=G1)
  assert drv.nodes[G1].foreign_vm
  assert "already a compute VM" in refused(errno.EINVAL, call, fd, "AMDKFD_IOC_ACQUIRE_VM", drm_fd=r0, gpu_id=G0)
  refused(errno.EBUSY, call, fd, "AMDKFD_IOC_ACQUIRE_VM", drm_fd=r1, gpu_id=G1)
  call(fd, "AMDKFD_IOC_ACQUIRE_VM", drm_fd=r1, gpu_id=G0)
  call(fd, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=0x7e0000000000, size=4096, gpu_id=G1, flags=K.ALLOC_MEM_FLAGS_VRAM)
  n = call(fd, "AMDKFD_IOC_GET_PROCESS_APERTURES_NEW", num_of_nodes=0).num_of_nodes
  assert n == 2

def test_a_gpu_bound_through_another_gpus_render_node_fails_later(drv, monkeypatch):
  """...and the failure shows later: AMD:1 bound through GPU 0's file gets its BOs, but their mmap offsets live in GPU
  1's DRM device, which GPU 0's file does not reach (EINVAL; the backend's error is that first one, not the EBUSY of
  freeing a BO still mapped); its engines walk none of that VM, so a queue faults on its first packet."""
  monkeypatch.setattr(syscalls, "open_render_node", lambda minor, _o=syscalls.open_render_node: _o(128))
  with pytest.raises(OSError, match="render node mmap: offset .* names no BO of gpu_id") as e: AMDDevice("AMD:1")
  assert e.value.errno == errno.EINVAL
  from hcqrt.mock.amd.memory import GPUFault
  fd = syscalls.open("/dev/kfd", os.O_RDWR)
  h = call(fd, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=0x7e0000000000, size=4096, gpu_id=G1, flags=K.ALLOC_MEM_FLAGS_GTT).handle
  assert mapm(fd, h, [G1])[1] is None and drv.nodes[G1].vm.find(0x7e0000000000)
  with pytest.raises(GPUFault): drv.nodes[G1].engine_vm.find(0x7e0000000000)

def test_alloc_and_map_without_acquire_vm_are_enodev(drv):
  """kfd_bind_process_to_device answers ENODEV for a known GPU without a VM, for the owner and for each peer of a MAP
  (kfd_chardev.c:1120-1123, :1292-1296, :1314-1318; kfd_process.c:1770-1771)."""
  fd = syscalls.open("/dev/kfd", os.O_RDWR)
  call(fd, "AMDKFD_IOC_ACQUIRE_VM", drm_fd=syscalls.open_render_node(128), gpu_id=G0)
  h = call(fd, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=0x7e0000000000, size=4096, gpu_id=G0, flags=K.ALLOC_MEM_FLAGS_GTT).handle
  a, err = mapm(fd, h, [G0, G1])
  assert err is not None and err.errno == errno.ENODEV and a.n_success == 1
  a, err = mapm(fd, h, [G0 + 7])
  assert err is not None and err.errno == errno.EINVAL

def test_overlapping_vas_are_refused_per_gpu_vm_at_map(drv):
  """Audit m26 row 6a: the VM finds a VA conflict when a BO is mapped (amdgpu_vm.c:1742-1748), per GPU: two GPUs' BOs
  may share a VA; a second BO at that VA on the same GPU allocates, but does not map."""
  fd = syscalls.open("/dev/kfd", os.O_RDWR)
  for g, minor in ((G0, 128), (G1, 129)): call(fd, "AMDKFD_IOC_ACQUIRE_VM", drm_fd=syscalls.open_render_node(minor), gpu_id=g)
  h0 = call(fd, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=0x7e0000000000, size=8192, gpu_id=G0, flags=K.ALLOC_MEM_FLAGS_VRAM).handle
  h1 = call(fd, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=0x7e0000000000, size=4096, gpu_id=G1, flags=K.ALLOC_MEM_FLAGS_VRAM).handle
  h2 = call(fd, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=0x7e0000001000, size=4096, gpu_id=G0, flags=K.ALLOC_MEM_FLAGS_VRAM).handle
  assert mapm(fd, h0, [G0])[1] is None and mapm(fd, h1, [G1])[1] is None
  a, err = mapm(fd, h2, [G0])
  assert err is not None and err.errno == errno.EINVAL and "overlaps" in str(err) and a.n_success == 0

def test_peer_vram_refused_gtt_shared_partial_success(drv):
  fd = syscalls.open("/dev/kfd", os.O_RDWR)
  for g, minor in ((G0, 128), (G1, 129)): call(fd, "AMDKFD_IOC_ACQUIRE_VM", drm_fd=syscalls.open_render_node(minor), gpu_id=g)
  vram = call(fd, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=0x7e0000000000, size=4096, gpu_id=G0, flags=K.ALLOC_MEM_FLAGS_VRAM).handle
  gtt = call(fd, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=0x7e0000100000, size=4096, gpu_id=G0, flags=K.ALLOC_MEM_FLAGS_GTT).handle
  a, err = mapm(fd, vram, [G0, G1])   # maps on its own GPU, then EINVAL on the peer; n_success counts the first
  assert err is not None and err.errno == errno.EINVAL and "no XGMI or PCIe peer path" in str(err) and a.n_success == 1
  a, err = mapm(fd, gtt, [G0, G1])
  assert err is None and a.n_success == 2
  assert drv.nodes[G0].vm.find(0x7e0000100000) is drv.nodes[G1].vm.find(0x7e0000100000)
  assert drv.nodes[G0].vram_used == 4096 and drv.nodes[G1].vram_used == 0

def test_render_node_mmap_only_of_its_own_gpus_bo(drv):
  fd = syscalls.open("/dev/kfd", os.O_RDWR)
  r0, r1 = syscalls.open_render_node(128), syscalls.open_render_node(129)
  call(fd, "AMDKFD_IOC_ACQUIRE_VM", drm_fd=r0, gpu_id=G0)
  a = call(fd, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=0x7e0000000000, size=4096, gpu_id=G0, flags=K.ALLOC_MEM_FLAGS_GTT)
  refused(errno.EINVAL, syscalls.mmap, r1, 4096, 3, 1, a.mmap_offset)
  assert syscalls.mmap(r0, 4096, 3, 1, a.mmap_offset)

def test_two_devices_share_one_kfd_process(drv):
  d0, d1 = AMDDevice("AMD"), AMDDevice("AMD:1")
  assert (d0.gpu_id, d1.gpu_id) == (G0, G1) and d0.gpu_count == d1.gpu_count == 2
  # the runtime is enabled once for the process, the event page is registered once and mapped on both GPUs
  assert drv.calls.count("RUNTIME_ENABLE") == 1
  assert d1.event_page is d0.event_page and drv.bos[d0.event_page.handle].gpu_mapped == {G0, G1}
  for dev, val in ((d0, 3.0), (d1, 5.0)):
    buf = dev.allocator.alloc(256)
    dev.allocator.copyin(buf, memoryview(np.full(64, val, np.float32).view(np.uint8)))
  d0.synchronize(); d1.synchronize()
  assert drv.nodes[G0].vram_used > 0 and drv.nodes[G1].vram_used > 0

def test_one_gpu_serving_a_many_node_topology_claims_only_its_render_node():
  d = install_mock_amd("gfx1100", kernel="6.12", gpus=3, serve=2)
  try:
    assert list(d.nodes) == [G1] and d.claims("/dev/dri/renderD129") and not d.claims("/dev/dri/renderD128")
  finally: uninstall_mock_amd(d)

def test_a_fault_on_one_gpu_leaves_the_other_gpus_work_alone(drv):
  """Audit m26 row 1: the kernel fires every memory event of the process and names the faulting GPU
  (kfd_events.c:1213-1247). A VM fault on AMD:1 must not make AMD:0 raise and recover (dropping its healthy work);
  AMD:1's own wait reports it."""
  from hcqrt.amd.device import AMDError
  from hcqrt.hcq import SignalTimeout
  d0, d1 = AMDDevice("AMD"), AMDDevice("AMD:1")
  b1 = d1.allocator.alloc(4096)
  d1.hw_copy_queue().copy(b1.va, 0x1000, 64).signal(d1.timeline_signal, d1.timeline_value).submit(d1); d1.timeline_value += 1
  gate = d0.new_signal(0, "gate")
  d0.hw_compute_queue().wait(gate, 1).signal(d0.timeline_signal, d0.timeline_value).submit(d0); d0.timeline_value += 1
  with pytest.raises(SignalTimeout): d0.wait_signal(gate, 1, 0.5)   # no error: GPU 0 did not fault
  with pytest.raises(AMDError, match="AMD:1: GPU memory fault at 0x1000"): d1.synchronize(5)
  gate.value = 1
  d0.synchronize(5)   # its queued work was never dropped

def test_a_second_gpu_opens_after_the_first_device_is_gone(drv):
  """Audit m26 row 2: the runtime and the event page belong to the KFD process until it exits, not to the device that
  set them up: AMD:1 opened after AMD:0 was collected neither enables the runtime again (EBUSY) nor registers a
  second event page (EINVAL), and its signals still wake it."""
  import gc
  d0 = AMDDevice("AMD"); del d0; gc.collect()
  d1 = AMDDevice("AMD:1")
  x = np.arange(64, dtype=np.float32); b = d1.allocator.alloc(x.nbytes)
  d1.allocator.copyin(b, memoryview(x.view(np.uint8))); out = np.empty_like(x)
  d1.allocator.copyout(memoryview(out.view(np.uint8)), b)
  assert np.array_equal(out, x)

def test_two_threads_open_two_gpus_at_once(drv, monkeypatch):
  """Audit final row 1: the per-process state (RUNTIME_ENABLE, the event page) is set up under one lock, and the page
  is published only once the kernel has it. Two threads opening AMD:0 and AMD:1 together, with the lookup slowed so
  they overlap, both come up (it raced into EINVAL/EBUSY before)."""
  import threading, time
  import hcqrt.amd.device as D
  real = D._kfd_process
  def slow(kfd):
    p = real(kfd); time.sleep(0.2); return p
  monkeypatch.setattr(D, "_kfd_process", slow)
  devs, errs = {}, []
  def op(name):
    try: devs[name] = D.AMDDevice(name)
    except Exception as e: errs.append(f"{name}: {e}")
  ts = [threading.Thread(target=op, args=(n,)) for n in ("AMD", "AMD:1")]
  for t in ts: t.start()
  for t in ts: t.join()
  assert not errs, errs
  assert devs["AMD"].event_page is devs["AMD:1"].event_page
