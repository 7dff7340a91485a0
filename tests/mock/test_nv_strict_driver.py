"""The NV mock refuses what the real RM/UVM refuse during bring-up, with the real status codes, and models GPU-cached
system memory. Each rule has a test that replays the OLD (wrong) behaviour of the backend and shows the refusal; the
backend's fixed bring-up is covered by every NVDevice test (and checked here where a rule has a backend side)."""
import re, ctypes, os, struct
import pytest
from hcqrt import syscalls
from hcqrt.hcq import Signal, SignalTimeout
from hcqrt.mock.nv import MockNV, GPUError
from hcqrt.mock.nv.chips import CHIPS
from hcqrt.mock.nv.vmem import GPUVASpace, HostMemory, MEM_OP_D_L2_FLUSH_DIRTY
from hcqrt.nv.device import NVDevice, NVComputeQueue, _H, PAGE
from hcqrt.nv.rmclient import NVError
from ioctl_defs.nv import CLASSES as C, arch_from_classlist, status_name
from ioctl_defs.nv import flags as F
from tests.mock.test_nv_mock_rm import Client, vidmem_params

RW = os.O_RDWR | os.O_CLOEXEC
GR, COPY0 = F.VALUES["NV2080_ENGINE_TYPE_GRAPHICS"], F.VALUES["NV2080_ENGINE_TYPE_COPY0"]
EXT = F.VALUES["NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED"]
FAULTING = F.VALUES["NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING"]

class Rig:
  """Client, device, externally owned vaspace registered with UVM, a GRAPHICS channel group with a context share,
  and USERD/ring memory: the state in which the backend creates its channels."""
  def __init__(self, mock: MockNV, vaspace_flags: int = FAULTING | EXT):
    self.mock, self.c = mock, Client()
    c = self.c
    self.dev = c.alloc(C["NV01_DEVICE_0"], c.root)
    cls = c.ctrl(self.dev, "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2")
    self.arch = arch_from_classlist([cls.classList[i] for i in range(cls.numClasses)])
    self.vs = c.alloc(C["FERMI_VASPACE_A"], self.dev, "NV_VASPACE_ALLOCATION_PARAMETERS", vaBase=0x1000, vaSize=(1 << 48), flags=vaspace_flags)[0]
    self.uvm = syscalls.open("/dev/nvidia-uvm", RW)
    assert c.uvm(self.uvm, "UVM_INITIALIZE").rmStatus == 0
    assert c.uvm(self.uvm, "UVM_REGISTER_GPU", gpu_uuid=mock.uuid, rmCtrlFd=-1).rmStatus == 0
    self.mem = c.alloc(C["NV01_MEMORY_LOCAL_USER"], self.dev, "NV_MEMORY_ALLOCATION_PARAMS", owner=c.root, **vidmem_params(2 << 20, huge=True))[0]
    self.grp = c.alloc(C["KEPLER_CHANNEL_GROUP_A"], self.dev, "NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS", engineType=GR)[0]
    self.ctx = c.alloc(C["FERMI_CONTEXT_SHARE_A"], self.grp, "NV_CTXSHARE_ALLOCATION_PARAMETERS", hVASpace=self.vs,
                       flags=F.VALUES["NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC"])[0]
    self.nch = 0

  def register_vaspace(self) -> str:
    return status_name(self.c.uvm(self.uvm, "UVM_REGISTER_GPU_VASPACE", gpuUuid=self.mock.uuid, rmCtrlFd=self.c.ctl, hClient=self.c.root,
                                  hVaSpace=self.vs).rmStatus)

  def channel(self, engine_type: int) -> tuple[str, int]:
    i, self.nch = self.nch, self.nch + 1
    st, h, _ = self.c.alloc_status(self.arch.gpfifo, self.grp, "NV_CHANNEL_ALLOC_PARAMS", hObjectBuffer=self.mem, gpFifoOffset=0x10_0000_0000 + i * 0x10000,
                                   gpFifoEntries=0x400, hContextShare=self.ctx, hUserdMemory=[self.mem], userdOffset=[i * 0x10000 + 0x2000],
                                   engineType=engine_type)
    return status_name(st), h

  def register_channel(self, ch: int, base: int = 0x7E00_0000_0000, length: int = 64 << 20) -> str:
    return status_name(self.c.uvm(self.uvm, "UVM_REGISTER_CHANNEL", gpuUuid=self.mock.uuid, rmCtrlFd=self.c.ctl, hClient=self.c.root,
                                  hChannel=ch, base=base, length=length).rmStatus)

  def schedule(self) -> str: return status_name(self.c.ctrl_status(self.grp, "NVA06C_CTRL_CMD_GPFIFO_SCHEDULE", bEnable=1)[0])

@pytest.fixture
def mock():
  drv = MockNV()
  with syscalls.installed(drv): yield drv

@pytest.fixture
def rig(mock):
  r = Rig(mock)
  assert r.register_vaspace() == "NV_OK"
  return r

# ---- defect 1: a channel's engine type must be its channel group's ----
def test_copy_channel_in_graphics_group_refused(rig):
  assert rig.channel(COPY0)[0] == "NV_ERR_INVALID_ARGUMENT"     # the old copy channel (engineType COPY0 in the GRAPHICS TSG)
  st, ch = rig.channel(0)                                          # inheriting the TSG's engine is accepted ...
  assert st == "NV_OK" and rig.mock.clients[rig.c.root][ch].data["engine"] == GR
  assert rig.channel(GR)[0] == "NV_OK"                             # ... and so is naming the same engine
  assert rig.c.alloc(rig.arch.copy, ch)                            # a copy engine object lives on that GR-runlist channel

# ---- defect 3: no BIND for grouped channels (their runlist is fixed by the TSG) ----
def test_bind_of_grouped_channel_to_another_engine_refused(rig):
  _, ch = rig.channel(0)
  st, _ = rig.c.ctrl_status(ch, "NVA06F_CTRL_CMD_BIND", engineType=COPY0)
  assert status_name(st) == "NV_ERR_INVALID_STATE"                # kfifoRunlistSetId: runlist already set by the TSG
  assert status_name(rig.c.ctrl_status(ch, "NVA06F_CTRL_CMD_BIND", engineType=0)[0]) == "NV_ERR_INVALID_ARGUMENT"

# ---- defect 2: channels of an externally owned vaspace are scheduled only once UVM registered them ----
def test_schedule_refused_until_every_channel_is_uvm_registered(rig):
  _, a = rig.channel(0); rig.c.alloc(rig.arch.compute, a)
  _, b = rig.channel(0); rig.c.alloc(rig.arch.copy, b)
  assert rig.schedule() == "NV_ERR_INVALID_STATE"                  # the old bring-up: never registered
  assert rig.register_channel(a) == "NV_OK"
  assert rig.schedule() == "NV_ERR_INVALID_STATE"                  # one channel of the group is still unregistered
  assert rig.register_channel(b, base=0x7E00_1000_0000) == "NV_OK"
  assert rig.schedule() == "NV_OK"
  assert all(c.data["enabled"] for c in rig.mock.channels())

def test_register_channel_before_its_engine_object_leaves_it_unschedulable(rig):
  _, a = rig.channel(0)
  assert rig.register_channel(a) == "NV_OK"
  rig.c.alloc(rig.arch.compute, a)                                  # context buffers appear after UVM bound the channel
  assert rig.schedule() == "NV_ERR_INVALID_STATE"
  st, _ = rig.c.ctrl_status(a, "NVA06F_CTRL_CMD_GPFIFO_SCHEDULE", bEnable=1)
  assert status_name(st) == "NV_ERR_INVALID_STATE"

def test_register_channel_errors(rig):
  _, a = rig.channel(0); rig.c.alloc(rig.arch.compute, a)
  assert rig.register_channel(a, base=0x7E00_0000_0800) == "NV_ERR_INVALID_ADDRESS"       # not page aligned
  assert rig.register_channel(a, length=0x100000) == "NV_ERR_INVALID_ADDRESS"              # no room for the context buffers
  assert rig.c.uvm(rig.uvm, "UVM_CREATE_EXTERNAL_RANGE", base=0x7D00_0000_0000, length=64 << 20).rmStatus == 0
  assert rig.register_channel(a, base=0x7D00_0000_0000) == "NV_ERR_INVALID_ADDRESS"        # the range is taken
  assert rig.register_channel(a) == "NV_OK"
  assert rig.register_channel(a) == "NV_ERR_INVALID_CHANNEL"                               # twice
  st = rig.c.uvm(rig.uvm, "UVM_CREATE_EXTERNAL_RANGE", base=0x7E00_0000_0000, length=0x200000).rmStatus
  assert status_name(st) == "NV_ERR_UVM_ADDRESS_IN_USE"                                     # over the channel's buffers
  uvm2 = syscalls.open("/dev/nvidia-uvm", RW)
  assert rig.c.uvm(uvm2, "UVM_INITIALIZE").rmStatus == 0
  assert status_name(rig.c.uvm(uvm2, "UVM_REGISTER_CHANNEL", gpuUuid=rig.mock.uuid, rmCtrlFd=rig.c.ctl, hClient=rig.c.root, hChannel=a,
                                base=0x7E00_0000_0000, length=64 << 20).rmStatus) == "NV_ERR_INVALID_DEVICE"   # GPU not registered there
  syscalls.close(uvm2)

# ---- UVM_REGISTER_GPU_VASPACE only for externally owned VA spaces ----
def test_register_gpu_vaspace_needs_externally_owned(mock):
  r = Rig(mock, vaspace_flags=0)
  assert r.register_vaspace() == "NV_ERR_INVALID_FLAGS"            # nvGpuOpsDupAddressSpace
  st = r.c.alloc_status(C["FERMI_VASPACE_A"], r.dev, "NV_VASPACE_ALLOCATION_PARAMETERS", flags=FAULTING)[0]
  assert status_name(st) == "NV_ERR_INVALID_ARGUMENT"              # vaspace_api.c: faulting without external ownership

# ---- external mappings aligned to the allocation's page size ----
def test_external_mapping_must_be_aligned_to_the_page_size(rig):
  def map_(base, length, offset=0):
    c = rig.c
    p = c.uvm(rig.uvm, "UVM_MAP_EXTERNAL_ALLOCATION", base=base, length=length, offset=offset, rmCtrlFd=c.ctl, hClient=c.root, hMemory=rig.mem,
              gpuAttributesCount=1)
    c.ffi.memmove(p.perGpuAttributes[0].gpuUuid.uuid, rig.mock.uuid, 16); p.perGpuAttributes[0].gpuMappingType = 1
    syscalls.ioctl(rig.uvm, c.abi.uvm("UVM_MAP_EXTERNAL_ALLOCATION")[0], p)
    return status_name(p.rmStatus)
  assert rig.c.uvm(rig.uvm, "UVM_CREATE_EXTERNAL_RANGE", base=0x20_0000_0000, length=8 << 20).rmStatus == 0
  assert map_(0x20_0000_1000, 2 << 20) == "NV_ERR_INVALID_ADDRESS"      # 2 MiB pages at a 4 KiB-aligned address
  assert map_(0x20_0020_0000, 1 << 20) == "NV_ERR_INVALID_ADDRESS"      # a partial huge page
  assert map_(0x20_0020_0000, 2 << 20) == "NV_OK"

# ---- defect 11: UVM_MM_INITIALIZE may warn; SM count from the enabled units; error notifier ----
@pytest.mark.parametrize("mm", [False, True])
def test_backend_accepts_mm_initialize_warning(mm):
  drv = MockNV(); drv.uvm_mm_enabled = mm
  with syscalls.installed(drv): NVDevice("NV")

def test_mock_answers_mm_initialize_with_a_warning(mock):
  c = Client()
  u1, u2 = syscalls.open("/dev/nvidia-uvm", RW), syscalls.open("/dev/nvidia-uvm", RW)
  assert c.uvm(u1, "UVM_INITIALIZE").rmStatus == 0
  assert status_name(c.uvm(u2, "UVM_MM_INITIALIZE", uvmFd=u1).rmStatus) == "NV_WARN_NOTHING_TO_DO"
  from hcqrt.nv.rmclient import RMClient
  rm = RMClient(c.ctl, c.abi)
  with pytest.raises(NVError, match="UVM_MM_INITIALIZE failed: NV_WARN_NOTHING_TO_DO"):   # what the old bring-up did with it
    rm.uvm(syscalls.open("/dev/nvidia-uvm", RW), "UVM_MM_INITIALIZE", uvmFd=u1)

@pytest.mark.parametrize("arch,sms", [("hopper", 132), ("ampere", 82), ("ada", 128), ("blackwell", 148), ("blackwell_b", 170)])
def test_sm_count_is_the_enabled_count(arch, sms):
  chip = CHIPS[arch]
  assert chip.sm_count == sms and chip.gpcs * chip.tpc_per_gpc * chip.sm_per_tpc > sms   # LITTER (full die) would be wrong
  with syscalls.installed(MockNV(arch=arch)):
    assert NVDevice("NV").sm_count == sms

def test_channel_fault_is_reported_by_name():
  drv = MockNV()
  with syscalls.installed(drv):
    dev = NVDevice("NV")
    q = NVComputeQueue()
    q.method(0, _H["SEM_ADDR_LO"].offset, 0, 0x7, 1, 0, _H["SEM_EXECUTE"].data(OPERATION="RELEASE"))   # release to unmapped 0x7_00000000
    q.signal(dev.timeline_signal, dev.timeline_value); dev.timeline_value += 1
    ch, old_notifier = dev.compute_ch, dev.compute_ch.notifier
    fault = r"compute channel faulted: ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT \(Xid 31.*recovered"
    try: q.submit(dev)
    except GPUError as e: assert "page fault" in str(e) and re.search(fault, str(e)), e   # the mock may report it at the doorbell
    else:
      with pytest.raises(NVError, match=fault): dev.synchronize(timeout_s=0.2)        # not a bare signal timeout
    # RM also put the work-submit token into notifier entry 1 (the new channel's: recover() gave the old notifier back)
    assert old_notifier.freed and ch.notifier is None   # and the old channel can no longer read it
    assert struct.unpack_from("<I", ctypes.string_at(dev.compute_ch.notifier.host + 24, 4))[0] == dev.compute_ch.token
    assert dev.compute_ch is not ch and dev.compute_ch.error() is None and dev.copy_ch.error() is None   # new channels
    dev.synchronize(timeout_s=1.0)                                        # and the device works again

# ---- defect 4 + memory attributes: GPU-cached sysmem is not coherent with the CPU ----
def _sysmem(dev: NVDevice, cacheable: str, caching_type: int = 0) -> tuple[int, int]:
  """PAGE bytes of system memory allocated GPU_CACHEABLE=`cacheable` and UVM-mapped with `caching_type`; (host, va)."""
  rm = dev.rm
  h, _ = rm.alloc(dev.hdev, C["NV01_MEMORY_SYSTEM"], "NV_MEMORY_ALLOCATION_PARAMS", owner=rm.root, type=13, size=PAGE, limit=PAGE - 1,
                  attr=F.drf("NVOS32_ATTR_LOCATION", "PCI") | F.drf("NVOS32_ATTR_COHERENCY", "CACHED") | F.drf("NVOS32_ATTR_PHYSICALITY", "NONCONTIGUOUS"),
                  flags=F.VALUES["NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED"], attr2=F.drf("NVOS32_ATTR2_GPU_CACHEABLE", cacheable))
  va = dev._reserve_va(PAGE, PAGE)
  host = rm.map_to_cpu(dev._dev_fd, dev.hdev, h, PAGE, va, system=True)
  rm.uvm(dev.uvmfd, "UVM_CREATE_EXTERNAL_RANGE", base=va, length=PAGE)
  rm.uvm(dev.uvmfd, "UVM_MAP_EXTERNAL_ALLOCATION", base=va, length=PAGE, rmCtrlFd=dev.ctl, hClient=rm.root, hMemory=h, gpuAttributesCount=1,
         perGpuAttributes=[{"gpuUuid": {"uuid": list(dev.uuid)}, "gpuMappingType": 1, "gpuCachingType": caching_type}])
  return host, va

def _mem_op_d(operation: int) -> NVComputeQueue:
  q = NVComputeQueue()   # MEM_OP_A..C then MEM_OP_D (OPERATION in bits 31:27), which triggers the operation
  q.method(0, _H["MEM_OP_A"].offset, 0, 0, 0, operation << 27)
  return q

@pytest.fixture(scope="module")
def nv():
  drv = MockNV()
  with syscalls.installed(drv):
    dev = NVDevice("NV"); dev.drv = drv
    yield dev

def test_signal_in_gpu_cached_sysmem_never_reaches_the_host(nv):
  host, va = _sysmem(nv, "YES")                                      # the old signal memory
  sig = Signal(nv, host, va, "cached-signal")
  nv.hw_compute_queue().signal(sig, 5).submit(nv)
  with pytest.raises(SignalTimeout, match="cached-signal at .* to reach 5; last completed value is 0"): sig.wait(5, 0.3)
  _mem_op_d(MEM_OP_D_L2_FLUSH_DIRTY).submit(nv)                      # an L2 flush (clc86f.h L2_FLUSH_DIRTY) writes the line back
  sig.wait(5, 5)

def test_rm_cache_flush_control_writes_dirty_lines_back(nv):
  host, va = _sysmem(nv, "YES")
  sig = Signal(nv, host, va, "cached-signal")
  nv.hw_compute_queue().signal(sig, 9).submit(nv)
  with pytest.raises(SignalTimeout): sig.wait(9, 0.1)
  nv.rm.control(nv.hsub, "NV2080_CTRL_CMD_FB_FLUSH_GPU_CACHE", flags=F.drf("NV2080_CTRL_FB_FLUSH_GPU_CACHE_FLAGS_WRITE_BACK", "YES"))
  sig.wait(9, 5)

def test_copy_engine_writes_to_cached_sysmem_stay_in_l2(nv):
  host, va = _sysmem(nv, "YES")
  src = nv.allocator.alloc(64)
  nv.allocator.copyin(src, memoryview(bytes(range(64))))
  nv.allocator.transfer(type(src)(va, 64, PAGE, 0, host), src, 64)   # CE copy into the cached page
  nv.synchronize()
  assert ctypes.string_at(host, 64) == bytes(64)                    # the CPU still sees zeros
  _mem_op_d(MEM_OP_D_L2_FLUSH_DIRTY).submit(nv); nv.synchronize()
  assert ctypes.string_at(host, 64) == bytes(range(64))

@pytest.mark.parametrize("cacheable,caching", [("NO", 0), ("YES", 1)])
def test_uncached_sysmem_signal_is_seen_at_once(nv, cacheable, caching):
  host, va = _sysmem(nv, cacheable, caching)                         # attr2 GPU_CACHEABLE_NO, or a ForceUncached UVM mapping
  sig = Signal(nv, host, va, "uncached")
  nv.hw_compute_queue().signal(sig, 7).submit(nv)
  sig.wait(7, 5)

def test_backend_allocates_sysmem_uncached(nv):
  vs = nv.drv.channels()[0].data["vaspace"].data["va"]
  assert not any(vs.is_gpu_cached(va) for va in (nv.signals.va, *(b.va for b in nv.staging), nv.compute_ch.notifier.va))
  assert vs.is_gpu_cached(_sysmem(nv, "YES")[1])                    # what the old allocation flags gave

def test_l2_model():
  m = HostMemory(2 * PAGE)
  vs = GPUVASpace(0x1000, 1 << 40)
  vs.map(0x10000, m.size, m.addr, gpu_cached=True)
  host = m.view()
  vs.write(0x10008, b"gpu")                                          # a GPU write stays in the L2
  assert bytes(host[8:11]) == b"\0\0\0" and vs.read(0x10008, 3) == b"gpu"
  host[0x1000:0x1004] = b"cpu1"
  assert vs.read(0x11000, 4) == b"cpu1"                              # first GPU read fills the line ...
  host[0x1000:0x1004] = b"cpu2"
  assert vs.read(0x11000, 4) == b"cpu1"                              # ... which then hides later CPU writes
  vs.flush_l2()
  assert bytes(host[8:11]) == b"gpu" and vs.read(0x11000, 4) == b"cpu1"
  vs.mem_op(0x0E << 27)                                              # MEM_OP_D L2_SYSMEM_INVALIDATE drops the lines
  assert vs.read(0x11000, 4) == b"cpu2"
  with vs.kernel_access():                                           # kernel stores go to the shadow the interpreter sees
    shadow = next(a for v, _, a in vs.mappings() if v == 0x10000)
    ctypes.memmove(shadow + 0x20, b"kern", 4)
  assert bytes(host[0x20:0x24]) == b"\0" * 4
  vs.mem_op(0x10 << 27)                                              # L2_FLUSH_DIRTY
  assert bytes(host[0x20:0x24]) == b"kern"
  u = HostMemory(PAGE)
  vs.map(0x20000, u.size, u.addr)                                    # uncached: coherent at once
  vs.write(0x20000, b"now")
  assert bytes(u.view()[:3]) == b"now"
  vs.unmap(0x10000); vs.unmap(0x20000); m.close(); u.close()
