"""The NV mock with several GPUs behind one driver (MockNV(count=n), MOCKGPU_COUNT): what nvidia.ko shows for each GPU,
per-GPU state, and the refusals a second GPU brings (issue 26 stage 1)."""
import os
import numpy as np
import pytest
from hcqrt import syscalls
from hcqrt.mock.nv import MockNV, GPUError
from hcqrt.nv.device import NVDevice
from hcqrt.nv.rmclient import NVError

@pytest.fixture
def two():
  with syscalls.installed(MockNV(count=2)) as drv:
    d0, d1 = NVDevice("NV"), NVDevice("NV:1")
    yield drv, d0, d1

def test_count_bounds():
  with pytest.raises(ValueError, match="33 GPUs"): MockNV(count=33)

def test_each_gpu_as_the_driver_lists_it(two):
  drv, d0, d1 = two
  assert d0.card_count == d1.card_count == 2
  # gpuId = domain << 16 | bus << 8 | device (gpuGenerate32BitId); GPU i on bus i + 1; minors 0 and 1
  assert (d0.gpu_id, d1.gpu_id) == (0x100, 0x200) and (d0.minor, d1.minor) == (0, 1)
  assert d0.uuid != d1.uuid and {d0.uuid, d1.uuid} == {g.uuid for g in drv.gpus}
  ids = d0.rm.control(d0.rm.root, "NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS")
  assert [ids.gpuIds[i] for i in range(3)] == [0x100, 0x200, 0xFFFFFFFF]
  assert d0.rm.control(d0.rm.root, "NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2", gpuId=0x200).deviceInstance == 1
  with pytest.raises(NVError, match="NV_ERR_INVALID_ARGUMENT"): d0.rm.control(d0.rm.root, "NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2", gpuId=0x300)

def test_one_gpu_driver_has_no_second_device():
  with syscalls.installed(MockNV()):
    with pytest.raises(FileNotFoundError, match="1 GPU"): syscalls.open("/dev/nvidia1", os.O_RDWR)
    with pytest.raises(RuntimeError, match="reports 1 NVIDIA GPU"): NVDevice("NV:1")

def test_video_memory_is_per_gpu(two):
  drv, _d0, d1 = two
  before = [g.vidmem_used for g in drv.gpus]
  buf = d1.allocator.alloc(8 << 20)
  assert drv.gpus[0].vidmem_used == before[0] and drv.gpus[1].vidmem_used > before[1]
  d1.allocator.free(buf)

def test_data_stays_on_its_gpu(two):
  _, d0, d1 = two
  a, b = d0.allocator.alloc(4096), d1.allocator.alloc(4096)
  d0.allocator.copyin(a, memoryview(np.full(1024, 1.0, np.float32).view(np.uint8)))
  d1.allocator.copyin(b, memoryview(np.full(1024, 2.0, np.float32).view(np.uint8)))
  out = np.empty(1024, np.float32)
  d0.allocator.copyout(memoryview(out.view(np.uint8)), a)
  assert (out == 1.0).all()
  d1.allocator.copyout(memoryview(out.view(np.uint8)), b)
  assert (out == 2.0).all()

def test_doorbell_rings_only_its_own_gpu(two):
  drv, _d0, d1 = two
  # a work-submit token of a GPU 0 channel written to GPU 1's doorbell names no channel there
  token = next(c.data["token"] for c in drv.channels(0))
  with pytest.raises(GPUError, match=f"unknown work-submit token {token}"): syscalls.mmio_write32(d1.doorbell, token)
  assert drv.gpus[1].engine is not drv.gpus[0].engine

def test_peer_video_memory_map_refused(two):
  _drv, d0, d1 = two
  # GPU 0's video memory mapped into GPU 1's VA space, no peer access enabled: NV_ERR_INVALID_DEVICE (uvm_map_external.c)
  src = d0.allocator.alloc(2 << 20)
  va = d1._reserve_va(2 << 20, 2 << 20)
  d1.rm.uvm(d1.uvmfd, "UVM_CREATE_EXTERNAL_RANGE", base=va, length=2 << 20)
  attrs = {"gpuUuid": {"uuid": list(d1.uuid)}, "gpuMappingType": 1, "gpuCachingType": 0}
  with pytest.raises(NVError, match="UVM_MAP_EXTERNAL_ALLOCATION failed: NV_ERR_INVALID_DEVICE"):
    d1.rm.uvm(d1.uvmfd, "UVM_MAP_EXTERNAL_ALLOCATION", base=va, length=2 << 20, rmCtrlFd=d0.ctl, hClient=d0.rm.root,
              hMemory=src.handle, gpuAttributesCount=1, perGpuAttributes=[attrs])
  # system memory allocated under GPU 0's device: GPU 0 owns it, and it is not registered in GPU 1's VA space
  # (uvm_map_external.c:648-652): refused too (audit m26 row 3; the mock used to map it)
  sysbuf = d0.gpu_alloc(2 << 20, sysmem=True)
  va2 = d1._reserve_va(2 << 20, 2 << 20)
  d1.rm.uvm(d1.uvmfd, "UVM_CREATE_EXTERNAL_RANGE", base=va2, length=2 << 20)
  with pytest.raises(NVError, match="UVM_MAP_EXTERNAL_ALLOCATION failed: NV_ERR_INVALID_DEVICE"):
    d1.rm.uvm(d1.uvmfd, "UVM_MAP_EXTERNAL_ALLOCATION", base=va2, length=2 << 20, rmCtrlFd=d0.ctl, hClient=d0.rm.root,
              hMemory=sysbuf.handle, gpuAttributesCount=1, perGpuAttributes=[attrs])

def test_registry_installs_one_driver_for_all_gpus(monkeypatch):
  from hcqrt.device import _Registry, mock_gpu_count
  monkeypatch.setenv("MOCKGPU", "1")
  monkeypatch.setenv("MOCKGPU_COUNT", "2")
  reg = _Registry()
  try:
    a, b = reg["NV"], reg["NV:1"]
    assert syscalls.driver_of(a.ctl) is syscalls.driver_of(b.ctl) is reg._mocks["NV"]
    assert len(reg._mocks["NV"].gpus) == 2
  finally: syscalls.uninstall(reg._mocks.get("NV"))
  monkeypatch.setenv("MOCKGPU_COUNT", "x")
  with pytest.raises(ValueError, match="MOCKGPU_COUNT='x'"): mock_gpu_count()
  monkeypatch.setenv("MOCKGPU_COUNT", "0")
  with pytest.raises(ValueError, match="1 to 32"): mock_gpu_count()

def test_copy_engine_faults_on_another_gpus_memory(two):
  drv, d0, d1 = two
  # GPU 0's buffer is not mapped in GPU 1's VA space: GPU 1's copy engine reading it is an MMU fault naming GPU 1 and the VA
  a, b = d0.allocator.alloc(4096), d1.allocator.alloc(4096)
  with pytest.raises(GPUError, match=rf"mock GPU 1: .*GPU page fault: {a.va:#x}\+0x1000 is not mapped"):
    d1.allocator.transfer(b, a, 4096); d1.synchronize()
  assert any("GPU page fault" in f for f in drv.faults)
