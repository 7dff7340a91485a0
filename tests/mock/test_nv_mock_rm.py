"""The NV mock kernel driver (RM + UVM), driven only through hcqrt.syscalls with ioctl_defs structs."""
import ctypes, errno, os
import pytest
from hcqrt import syscalls
from hcqrt.mock.nv.rm import MockNV
from hcqrt.mock.nv.chips import CHIPS
from ioctl_defs.nv import abi_for_version, CLASSES as C, arch_from_classlist, status_name
from ioctl_defs.nv import flags as F

RW = os.O_RDWR | os.O_CLOEXEC
PROT = syscalls.PROT_READ | syscalls.PROT_WRITE

class Client:
  """The smallest RM/UVM client: what a backend does, spelled out."""
  def __init__(self, version="580.142"):
    self.abi = a = abi_for_version(version)
    self.ffi = a.ffi
    self.ctl = syscalls.open("/dev/nvidiactl", RW)
    self.dev = self.new_dev_fd()
    p = a.new("NVOS21_PARAMETERS", hClass=C["NV01_ROOT_CLIENT"])
    syscalls.ioctl(self.ctl, a.escape("NV_ESC_RM_ALLOC"), p)
    assert p.status == 0
    self.root = p.hObjectNew

  def new_dev_fd(self):
    fd = syscalls.open("/dev/nvidia0", RW)
    syscalls.ioctl(fd, self.abi.escape("NV_ESC_REGISTER_FD"), self.abi.new("nv_ioctl_register_fd_t", ctl_fd=self.ctl))
    return fd

  def alloc_status(self, cls, parent, struct=None, handle=0, root=None, **fields):
    prm = self.abi.new(struct, **fields) if struct else None
    p = self.abi.new("NVOS21_PARAMETERS", hRoot=self.root if root is None else root, hObjectParent=parent, hObjectNew=handle, hClass=cls,
                     pAllocParms=int(self.ffi.cast("uintptr_t", prm)) if prm is not None else 0,
                     paramsSize=self.abi.sizeof(struct) if struct else 0)
    assert syscalls.ioctl(self.ctl, self.abi.escape("NV_ESC_RM_ALLOC"), p) == 0
    return p.status, p.hObjectNew, prm

  def alloc(self, cls, parent, struct=None, **fields):
    st, h, prm = self.alloc_status(cls, parent, struct, **fields)
    assert st == 0, f"alloc of {cls:#x} failed: {status_name(st)}"
    return (h, prm) if struct else h

  def ctrl_status(self, obj, name, size=None, root=None, **fields):
    cmd, struct, sz = self.abi.ctrl(name)
    prm = self.abi.new(struct, **fields)
    p = self.abi.new("NVOS54_PARAMETERS", hClient=self.root if root is None else root, hObject=obj, cmd=cmd,
                     params=int(self.ffi.cast("uintptr_t", prm)), paramsSize=sz if size is None else size)
    assert syscalls.ioctl(self.ctl, self.abi.escape("NV_ESC_RM_CONTROL"), p) == 0
    return p.status, prm

  def ctrl(self, obj, name, **fields):
    st, prm = self.ctrl_status(obj, name, **fields)
    assert st == 0, f"{name} failed: {status_name(st)}"
    return prm

  def free_status(self, parent, h):
    p = self.abi.new("NVOS00_PARAMETERS", hRoot=self.root, hObjectParent=parent, hObjectOld=h)
    syscalls.ioctl(self.ctl, self.abi.escape("NV_ESC_RM_FREE"), p)
    return p.status

  def map_to_cpu(self, dev_handle, mem, size, system=False, target=None):
    fd = syscalls.open("/dev/nvidiactl", RW) if system else self.new_dev_fd()
    w = self.abi.new("nv_ioctl_nvos33_parameters_with_fd", fd=fd)
    w.params.hClient, w.params.hDevice, w.params.hMemory, w.params.length = self.root, dev_handle, mem, size
    syscalls.ioctl(self.ctl, self.abi.escape("NV_ESC_RM_MAP_MEMORY"), w)
    assert w.params.status == 0, status_name(w.params.status)
    addr = syscalls.mmap(fd, size, PROT, syscalls.MAP_SHARED, 0, target)
    syscalls.close(fd)
    return addr

  def uvm(self, fd, name, **fields):
    cmd, struct, _ = self.abi.uvm(name)
    p = self.abi.new(struct)
    for k, v in fields.items():
      if k.endswith("uid") and isinstance(v, bytes): self.ffi.memmove(getattr(p, k).uuid, v, 16)
      else: setattr(p, k, v)
    assert syscalls.ioctl(fd, cmd, p) == 0
    return p

def vidmem_params(size, huge=False):
  attr = F.drf("NVOS32_ATTR_PHYSICALITY", "ALLOW_NONCONTIGUOUS") | (F.drf("NVOS32_ATTR_PAGE_SIZE", "HUGE") if huge else 0)
  fl = F.VALUES["NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE"] | F.VALUES["NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED"] | F.VALUES["NVOS32_ALLOC_FLAGS_PERSISTENT_VIDMEM"]
  return dict(size=size, alignment=(2 << 20) if huge else 4096, attr=attr, flags=fl, format=6, limit=size - 1,
              attr2=F.drf("NVOS32_ATTR2_GPU_CACHEABLE", "YES") | (F.drf("NVOS32_ATTR2_PAGE_SIZE_HUGE", "2MB") if huge else 0))

@pytest.fixture
def mock():
  drv = MockNV()
  with syscalls.installed(drv): yield drv

@pytest.fixture
def cl(mock): return Client()

def mv(addr, n): return (ctypes.c_char * n).from_address(addr)

def test_bringup_sequence(mock):
  a = abi_for_version("580.142")
  ctl = syscalls.open("/dev/nvidiactl", RW)
  v = a.new("nv_ioctl_rm_api_version_t", cmd=ord("2"))
  syscalls.ioctl(ctl, a.escape("NV_ESC_CHECK_VERSION_STR"), v)
  assert a.ffi.string(v.versionString) == b"580.142" and v.reply == 1
  cards = a.ffi.new("nv_ioctl_card_info_t[4]")
  syscalls.ioctl(ctl, a.escape("NV_ESC_CARD_INFO", count=4), cards)
  assert cards[0].valid == 1 and cards[0].pci_info.vendor_id == 0x10DE and [cards[i].valid for i in range(1, 4)] == [0, 0, 0]
  syscalls.close(ctl)

  c = Client()
  ids = c.ctrl(c.root, "NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS")
  info = c.ctrl(c.root, "NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2", gpuId=ids.gpuIds[0])
  assert ids.gpuIds[0] == cards[0].gpu_id and info.deviceInstance == 0
  bv = c.ctrl(c.root, "NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2")
  assert c.ffi.string(bv.driverVersionBuffer) == b"580.142"

  dev = c.alloc(C["NV01_DEVICE_0"], c.root, "NV0080_ALLOC_PARAMETERS", hClientShare=c.root,
                vaMode=F.VALUES["NV_DEVICE_ALLOCATION_VAMODE_MULTIPLE_VASPACES"])
  dev = dev[0]
  sub = c.alloc(C["NV20_SUBDEVICE_0"], dev)
  cls = c.ctrl(dev, "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2")
  arch = arch_from_classlist([cls.classList[i] for i in range(cls.numClasses)])
  assert arch.name == "hopper" and arch.qmd == "V04_00"
  gr = c.ffi.new("NV2080_CTRL_GR_INFO[2]")
  gr[0].index, gr[1].index = F.VALUES["NV2080_CTRL_GR_INFO_INDEX_SM_VERSION"], F.VALUES["NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_GPCS"]
  c.ctrl(sub, "NV2080_CTRL_CMD_GR_GET_INFO", grInfoListSize=2, grInfoList=int(c.ffi.cast("uintptr_t", gr)))
  assert gr[0].data == F.VALUES["NV2080_CTRL_GR_INFO_SM_VERSION_9_00"] and gr[1].data == CHIPS["hopper"].gpcs
  st, fb = c.ctrl_status(sub, "NV2080_CTRL_CMD_FB_GET_INFO_V2", fbInfoListSize=1, fbInfoList=[{"index": F.VALUES["NV2080_CTRL_FB_INFO_INDEX_RAM_SIZE"]}])
  assert st == 0 and fb.fbInfoList[0].data == (80 << 30) >> 10
  gid = c.ctrl(sub, "NV2080_CTRL_CMD_GPU_GET_GID_INFO", flags=F.VALUES["NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY"], length=16)
  uuid = bytes(c.ffi.buffer(gid.data, 16))
  assert uuid == mock.uuid and gid.length == 16
  c.ctrl(sub, "NV2080_CTRL_CMD_PERF_BOOST", duration=0xFFFFFFFF, flags=F.drf("NV2080_CTRL_PERF_BOOST_FLAGS_CMD", "BOOST_TO_MAX"))

  # usermode (doorbell) page mapped to the CPU
  um = c.alloc(arch.usermode, sub)
  um_cpu = c.map_to_cpu(sub, um, 0x10000)
  mv(um_cpu, 0x10000)[0x90:0x94] = (7).to_bytes(4, "little")
  assert mock.clients[c.root][um].data["backing"].view()[0x90] == 7

  vs, _vsp = c.alloc(C["FERMI_VASPACE_A"], dev, "NV_VASPACE_ALLOCATION_PARAMETERS", vaBase=0x1000, vaSize=0x1FFFFFB000000,
                    flags=F.VALUES["NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING"] | F.VALUES["NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED"])
  # UVM: initialize, second fd MM_INITIALIZE, register GPU + vaspace
  uvm, uvm2 = syscalls.open("/dev/nvidia-uvm", RW), syscalls.open("/dev/nvidia-uvm", RW)
  assert c.uvm(uvm, "UVM_INITIALIZE").rmStatus == 0
  assert status_name(c.uvm(uvm2, "UVM_MM_INITIALIZE", uvmFd=uvm).rmStatus) == "NV_WARN_NOTHING_TO_DO"   # no mm needed: a warning
  assert c.uvm(uvm, "UVM_REGISTER_GPU", gpu_uuid=uuid, rmCtrlFd=-1).rmStatus == 0
  assert c.uvm(uvm, "UVM_REGISTER_GPU_VASPACE", gpuUuid=uuid, rmCtrlFd=c.ctl, hClient=c.root, hVaSpace=vs).rmStatus == 0

  def uvm_map(va, size, mem):
    assert c.uvm(uvm, "UVM_CREATE_EXTERNAL_RANGE", base=va, length=size).rmStatus == 0
    p = c.uvm(uvm, "UVM_MAP_EXTERNAL_ALLOCATION", base=va, length=size, rmCtrlFd=c.ctl, hClient=c.root, hMemory=mem, gpuAttributesCount=1)
    c.ffi.memmove(p.perGpuAttributes[0].gpuUuid.uuid, uuid, 16); p.perGpuAttributes[0].gpuMappingType = 1
    assert syscalls.ioctl(uvm, c.abi.uvm("UVM_MAP_EXTERNAL_ALLOCATION")[0], p) == 0 and p.rmStatus == 0, status_name(p.rmStatus)

  gva = mock.clients[c.root][vs].data["va"]
  # video memory: CPU mapping at a chosen address, GPU mapping at the same VA through UVM
  size, va = 2 << 20, 0x7F00_0000_0000
  mem, mp = c.alloc(C["NV01_MEMORY_LOCAL_USER"], dev, "NV_MEMORY_ALLOCATION_PARAMS", owner=c.root, **vidmem_params(size, huge=True))
  assert mp.size == size
  cpu = c.map_to_cpu(dev, mem, size)
  uvm_map(va, size, mem)
  mv(cpu, size)[100:105] = b"hello"
  assert gva.read(va + 100, 5) == b"hello"
  gva.write(va + size - 4, b"GPU!")
  assert bytes(mv(cpu, size)[size - 4:size]) == b"GPU!"

  # system memory mapped through /dev/nvidiactl
  smem, _ = c.alloc(C["NV01_MEMORY_SYSTEM"], dev, "NV_MEMORY_ALLOCATION_PARAMS", owner=c.root, type=13, size=0x10000, limit=0xFFFF,
                    attr=F.drf("NVOS32_ATTR_LOCATION", "PCI"), flags=F.VALUES["NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED"])
  scpu = c.map_to_cpu(dev, smem, 0x10000, system=True)
  uvm_map(va + size, 0x10000, smem)
  mv(scpu, 16)[0:4] = b"sig!"
  assert gva.read(va + size, 4) == b"sig!"

  # host memory the client owns, described to RM (RM_ALLOC_MEMORY on /dev/nvidia0) and mapped for the GPU
  host = syscalls.mmap(-1, 0x4000, PROT, syscalls.MAP_PRIVATE | syscalls.MAP_ANONYMOUS, 0)
  p = c.abi.new("nv_ioctl_nvos02_parameters_with_fd", fd=-1)
  p.params.hRoot, p.params.hObjectParent, p.params.hClass, p.params.pMemory, p.params.limit = c.root, dev, C["NV01_MEMORY_SYSTEM_OS_DESCRIPTOR"], host, 0x3FFF
  p.params.flags = F.drf("NVOS02_FLAGS_PHYSICALITY", "NONCONTIGUOUS") | F.drf("NVOS02_FLAGS_COHERENCY", "CACHED") | F.drf("NVOS02_FLAGS_MAPPING", "NO_MAP")
  syscalls.ioctl(c.dev, c.abi.escape("NV_ESC_RM_ALLOC_MEMORY"), p)
  assert p.params.status == 0
  uvm_map(host, 0x4000, p.params.hObjectNew)
  mv(host, 8)[0:8] = b"hostmem!"
  assert gva.read(host, 8) == b"hostmem!"

  # RM-managed virtual range + RM_MAP_MEMORY_DMA: RM picks the GPU VA inside the vaspace
  virt, vp = c.alloc(C["NV01_MEMORY_VIRTUAL"], dev, "NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS", hVASpace=vs)
  dma = c.abi.new("NVOS46_PARAMETERS", hClient=c.root, hDevice=dev, hDma=virt, hMemory=smem, length=0x10000)
  syscalls.ioctl(c.ctl, c.abi.escape("NV_ESC_RM_MAP_MEMORY_DMA"), dma)
  assert dma.status == 0 and vp.offset <= dma.dmaOffset < vp.limit and gva.read(dma.dmaOffset, 4) == b"sig!"

  # scheduling objects and a GPFIFO channel with its compute object; a second channel with the copy object
  grp = c.alloc(C["KEPLER_CHANNEL_GROUP_A"], dev, "NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS", engineType=F.VALUES["NV2080_ENGINE_TYPE_GRAPHICS"])[0]
  ctx, _ctxp = c.alloc(C["FERMI_CONTEXT_SHARE_A"], grp, "NV_CTXSHARE_ALLOCATION_PARAMETERS", hVASpace=vs,
                      flags=F.VALUES["NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC"])
  chans = []
  for i, engine in enumerate((arch.compute, arch.copy)):
    # both channels inherit the group's engine (engineType 0); engine object, then UVM registration, then the token
    ch, _chp = c.alloc(arch.gpfifo, grp, "NV_CHANNEL_ALLOC_PARAMS", hObjectError=0, hObjectBuffer=mem, gpFifoOffset=va + i * 0x80000,
                      gpFifoEntries=0x400, hContextShare=ctx, hUserdMemory=[mem], userdOffset=[i * 0x80000 + 0x400 * 8], engineType=0)
    c.alloc(engine, ch)
    assert c.uvm(uvm, "UVM_REGISTER_CHANNEL", gpuUuid=uuid, rmCtrlFd=c.ctl, hClient=c.root, hChannel=ch,
                 base=0x7E00_0000_0000 + i * (64 << 20), length=64 << 20).rmStatus == 0
    tok = c.ctrl(ch, "NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN").workSubmitToken
    chans.append((ch, tok))
  assert chans[0][1] != chans[1][1]
  c.ctrl(grp, "NVA06C_CTRL_CMD_GPFIFO_SCHEDULE", bEnable=1)
  chan = mock.channel_by_token(chans[0][1])
  assert chan.data["enabled"] and chan.data["vaspace"].handle == vs and chan.data["ring_va"] == va
  # USERD is the memory the client also sees: GPPut written by the CPU is visible to the mock
  mv(cpu, size)[0x2000 + 0x8C:0x2000 + 0x90] = (5).to_bytes(4, "little")
  assert ctypes.c_uint32.from_address(chan.data["userd"] + 0x8C).value == 5

  c.ctrl(sub, "NV2080_CTRL_CMD_FB_FLUSH_GPU_CACHE", flags=F.drf("NV2080_CTRL_FB_FLUSH_GPU_CACHE_FLAGS_WRITE_BACK", "YES"))
  # free: channel objects first, then the whole client (mappings disappear from the GPU VA space)
  assert c.free_status(grp, chans[1][0]) == 0 and chans[1][0] not in mock.clients[c.root]
  assert c.free_status(c.root, c.root) == 0 and c.root not in mock.clients
  with pytest.raises(MemoryError, match="page fault"): gva.read(dma.dmaOffset, 4)
  syscalls.munmap(cpu, size); syscalls.munmap(scpu, 0x10000); syscalls.munmap(um_cpu, 0x10000); syscalls.munmap(host, 0x4000)
  for fd in (uvm2, uvm, c.dev, c.ctl): syscalls.close(fd)

# ---- errors: ioctl level (errno) ----
def test_wrong_sizes_and_fds(cl):
  a = cl.abi
  p = a.new("NVOS64_PARAMETERS", hClass=C["NV01_ROOT_CLIENT"])
  syscalls.ioctl(cl.ctl, a.escape("NV_ESC_RM_ALLOC", alt=True), p)   # the NVOS64 size is accepted too
  assert p.status == 0
  big = a.ffi.new("char[40]")
  with pytest.raises(OSError) as e: syscalls.ioctl(cl.ctl, 0xC028462B, big)
  assert e.value.errno == errno.EINVAL and "NV_ESC_RM_ALLOC" in str(e.value) and "/dev/nvidiactl" in str(e.value)
  with pytest.raises(OSError) as e: syscalls.ioctl(cl.ctl, a.escape("NV_ESC_RM_CONTROL") + (8 << 16), a.ffi.new("char[40]"))
  assert e.value.errno == errno.EINVAL
  with pytest.raises(OSError) as e: syscalls.ioctl(cl.dev, a.escape("NV_ESC_RM_ALLOC"), a.new("NVOS21_PARAMETERS"))
  assert e.value.errno == errno.EINVAL            # ctl-only escape on /dev/nvidia0
  with pytest.raises(OSError) as e: syscalls.ioctl(cl.ctl, a.escape("NV_ESC_REGISTER_FD"), a.new("nv_ioctl_register_fd_t", ctl_fd=cl.ctl))
  assert e.value.errno == errno.EINVAL            # device-only escape on /dev/nvidiactl
  with pytest.raises(OSError) as e: syscalls.ioctl(cl.new_dev_fd(), a.escape("NV_ESC_REGISTER_FD"), a.new("nv_ioctl_register_fd_t", ctl_fd=cl.dev))
  assert e.value.errno == errno.EINVAL            # ctl_fd is not /dev/nvidiactl
  with pytest.raises(OSError) as e: syscalls.ioctl(cl.ctl, 0xC0104699, a.ffi.new("char[16]"))
  assert e.value.errno == errno.EINVAL            # unknown escape
  with pytest.raises(FileNotFoundError): syscalls.open("/dev/nvidia3", RW)

def test_version_check(cl):
  a = cl.abi
  v = a.new("nv_ioctl_rm_api_version_t", cmd=0)
  cl.ffi.memmove(v.versionString, b"580.95.05\0", 10)
  with pytest.raises(OSError) as e: syscalls.ioctl(cl.ctl, a.escape("NV_ESC_CHECK_VERSION_STR"), v)
  assert e.value.errno == errno.EINVAL and cl.ffi.string(v.versionString) == b"580.142"   # RM's version is copied back
  v = a.new("nv_ioctl_rm_api_version_t", cmd=ord("1"))
  cl.ffi.memmove(v.versionString, b"580.95.05\0", 10)
  assert syscalls.ioctl(cl.ctl, a.escape("NV_ESC_CHECK_VERSION_STR"), v) == 0   # relaxed: same branch

# ---- errors: RM status codes ----
def test_alloc_errors(cl):
  dev = cl.alloc(C["NV01_DEVICE_0"], cl.root)
  sub = cl.alloc(C["NV20_SUBDEVICE_0"], dev)
  def st(*a, **k): return status_name(cl.alloc_status(*a, **k)[0])
  assert st(0x1234, dev) == "NV_ERR_INVALID_CLASS"
  assert st(C["ADA_COMPUTE_A"], dev) == "NV_ERR_INVALID_CLASS"                 # not an H100 class
  assert st(C["NV20_SUBDEVICE_0"], cl.root) == "NV_ERR_INVALID_OBJECT_PARENT"    # subdevice under the client
  assert st(C["HOPPER_USERMODE_A"], dev) == "NV_ERR_INVALID_OBJECT_PARENT"       # usermode under the device
  assert st(C["HOPPER_COMPUTE_A"], dev) == "NV_ERR_INVALID_OBJECT_PARENT"        # engine object outside a channel
  assert st(C["NV20_SUBDEVICE_0"], 0xBADBAD) == "NV_ERR_OBJECT_NOT_FOUND"
  assert st(C["NV20_SUBDEVICE_0"], dev, root=0xC1D0FFFF) == "NV_ERR_INVALID_CLIENT"
  assert st(C["HOPPER_USERMODE_A"], sub, handle=sub) == "NV_ERR_INSERT_DUPLICATE_NAME"
  assert st(C["HOPPER_USERMODE_A"], sub, handle=cl.root) == "NV_ERR_INVALID_OBJECT_HANDLE"
  assert st(C["FERMI_VASPACE_A"], dev) == "NV_ERR_INVALID_ARGUMENT"              # required params missing
  assert st(C["NV01_MEMORY_LOCAL_USER"], dev, "NV_MEMORY_ALLOCATION_PARAMS") == "NV_ERR_INVALID_ARGUMENT"   # size 0
  assert st(C["NV20_SUBDEVICE_0"], dev) == "NV_ERR_STATE_IN_USE"                 # one subdevice per device
  vs = cl.alloc(C["FERMI_VASPACE_A"], dev, "NV_VASPACE_ALLOCATION_PARAMETERS")[0]
  grp = cl.alloc(C["KEPLER_CHANNEL_GROUP_A"], dev, "NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS", engineType=1)[0]
  ctx = cl.alloc(C["FERMI_CONTEXT_SHARE_A"], grp, "NV_CTXSHARE_ALLOCATION_PARAMETERS", hVASpace=vs)[0]
  mem = cl.alloc(C["NV01_MEMORY_LOCAL_USER"], dev, "NV_MEMORY_ALLOCATION_PARAMS", **vidmem_params(1 << 20))[0]
  chan = dict(hUserdMemory=[mem], userdOffset=[0x1000], hContextShare=ctx, gpFifoOffset=0x100000, engineType=1)
  assert st(C["HOPPER_CHANNEL_GPFIFO_A"], grp, "NV_CHANNEL_ALLOC_PARAMS", gpFifoEntries=1000, **chan) == "NV_ERR_INVALID_ARGUMENT"
  assert st(C["HOPPER_CHANNEL_GPFIFO_A"], grp, "NV_CHANNEL_ALLOC_PARAMS", gpFifoEntries=1024, **{**chan, "userdOffset": [0x1100]}) == "NV_ERR_INVALID_ARGUMENT"
  assert st(C["HOPPER_CHANNEL_GPFIFO_A"], grp, "NV_CHANNEL_ALLOC_PARAMS", gpFifoEntries=1024, **{**chan, "hUserdMemory": [0xBAD]}) == "NV_ERR_INVALID_OBJECT_HANDLE"
  assert st(C["BLACKWELL_CHANNEL_GPFIFO_A"], grp, "NV_CHANNEL_ALLOC_PARAMS", gpFifoEntries=1024, **chan) == "NV_ERR_INVALID_CLASS"
  ch = cl.alloc(C["HOPPER_CHANNEL_GPFIFO_A"], grp, "NV_CHANNEL_ALLOC_PARAMS", gpFifoEntries=1024, **chan)[0]
  cl.alloc(C["HOPPER_COMPUTE_A"], ch)
  assert st(C["HOPPER_COMPUTE_A"], ch) == "NV_ERR_STATE_IN_USE"
  assert status_name(cl.free_status(dev, 0xBADBAD)) == "NV_ERR_OBJECT_NOT_FOUND"

def test_control_errors(cl):
  dev = cl.alloc(C["NV01_DEVICE_0"], cl.root)
  sub = cl.alloc(C["NV20_SUBDEVICE_0"], dev)
  size = cl.abi.ctrl_size("NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2")
  def st(*a, **k): return status_name(cl.ctrl_status(*a, **k)[0])
  assert st(dev, "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2", size=size - 4) == "NV_ERR_INVALID_ARGUMENT"
  assert st(dev, "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2", size=404) == "NV_ERR_INVALID_ARGUMENT"   # a 570 client's size
  assert st(0xBADBAD, "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2") == "NV_ERR_OBJECT_NOT_FOUND"
  assert st(sub, "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2") == "NV_ERR_NOT_SUPPORTED"              # device control on a subdevice
  assert st(dev, "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2", root=0xC1D0FFFF) == "NV_ERR_INVALID_CLIENT"
  assert st(cl.root, "NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2", gpuId=0x999) == "NV_ERR_INVALID_ARGUMENT"
  assert st(sub, "NV2080_CTRL_CMD_GR_GET_INFO", grInfoListSize=0) == "NV_ERR_INVALID_ARGUMENT"
  grp = cl.alloc(C["KEPLER_CHANNEL_GROUP_A"], dev, "NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS", engineType=1)[0]
  assert st(grp, "NVA06C_CTRL_CMD_GPFIFO_SCHEDULE", bEnable=1) == "NV_ERR_INVALID_STATE"           # no channels yet
  p = cl.abi.new("NVOS54_PARAMETERS", hClient=cl.root, hObject=dev, cmd=0x00800292, params=0, paramsSize=size)
  syscalls.ioctl(cl.ctl, cl.abi.escape("NV_ESC_RM_CONTROL"), p)
  assert status_name(p.status) == "NV_ERR_INVALID_ARGUMENT"                                      # size without params

def test_cpu_mapping_rules(cl):
  dev = cl.alloc(C["NV01_DEVICE_0"], cl.root)
  mem = cl.alloc(C["NV01_MEMORY_LOCAL_USER"], dev, "NV_MEMORY_ALLOCATION_PARAMS", **vidmem_params(0x10000))[0]
  fd = cl.new_dev_fd()
  w = cl.abi.new("nv_ioctl_nvos33_parameters_with_fd", fd=fd)
  w.params.hClient, w.params.hDevice, w.params.hMemory, w.params.length = cl.root, dev, mem, 0x10000
  with pytest.raises(OSError) as e: syscalls.mmap(fd, 0x10000, PROT, syscalls.MAP_SHARED, 0)
  assert e.value.errno == errno.EINVAL                          # no mapping context yet
  syscalls.ioctl(cl.ctl, cl.abi.escape("NV_ESC_RM_MAP_MEMORY"), w)
  assert w.params.status == 0
  syscalls.ioctl(cl.ctl, cl.abi.escape("NV_ESC_RM_MAP_MEMORY"), w)
  assert status_name(w.params.status) == "NV_ERR_STATE_IN_USE"  # one context per fd
  with pytest.raises(OSError) as e: syscalls.mmap(fd, 0x8000, PROT, syscalls.MAP_SHARED, 0)
  assert e.value.errno == errno.ENXIO
  with pytest.raises(OSError) as e: syscalls.mmap(fd, 0x10000, PROT, syscalls.MAP_SHARED, 0x1000)
  assert e.value.errno == errno.EINVAL
  addr = syscalls.mmap(fd, 0x10000, PROT, syscalls.MAP_SHARED, 0)
  syscalls.munmap(addr, 0x10000)
  w2 = cl.abi.new("nv_ioctl_nvos33_parameters_with_fd", fd=cl.ctl)   # video memory through nvidiactl is refused
  w2.params.hClient, w2.params.hDevice, w2.params.hMemory, w2.params.length = cl.root, dev, mem, 0x10000
  syscalls.ioctl(cl.ctl, cl.abi.escape("NV_ESC_RM_MAP_MEMORY"), w2)
  assert status_name(w2.params.status) == "NV_ERR_INVALID_ARGUMENT"
  w2.params.length = 0x20000
  syscalls.ioctl(cl.ctl, cl.abi.escape("NV_ESC_RM_MAP_MEMORY"), w2)
  assert status_name(w2.params.status) == "NV_ERR_INVALID_LIMIT"
  syscalls.close(fd)

def test_uvm_errors(cl, mock):
  uvm = syscalls.open("/dev/nvidia-uvm", RW)
  assert status_name(cl.uvm(uvm, "UVM_CREATE_EXTERNAL_RANGE", base=0x200000, length=0x1000).rmStatus) == "NV_ERR_ILLEGAL_ACTION"
  assert cl.uvm(uvm, "UVM_INITIALIZE").rmStatus == 0
  assert status_name(cl.uvm(uvm, "UVM_REGISTER_GPU", gpu_uuid=b"\x01" * 16, rmCtrlFd=-1).rmStatus) == "NV_ERR_GPU_UUID_NOT_FOUND"
  assert status_name(cl.uvm(uvm, "UVM_REGISTER_GPU_VASPACE", gpuUuid=mock.uuid, rmCtrlFd=cl.ctl).rmStatus) == "NV_ERR_INVALID_DEVICE"
  assert cl.uvm(uvm, "UVM_REGISTER_GPU", gpu_uuid=mock.uuid, rmCtrlFd=-1).rmStatus == 0
  # registered twice: uvm_va_space.c:769-771
  assert status_name(cl.uvm(uvm, "UVM_REGISTER_GPU", gpu_uuid=mock.uuid, rmCtrlFd=-1).rmStatus) == "NV_ERR_INVALID_DEVICE"
  assert status_name(cl.uvm(uvm, "UVM_CREATE_EXTERNAL_RANGE", base=0x200100, length=0x1000).rmStatus) == "NV_ERR_INVALID_ADDRESS"
  assert cl.uvm(uvm, "UVM_CREATE_EXTERNAL_RANGE", base=0x200000, length=0x10000).rmStatus == 0
  assert status_name(cl.uvm(uvm, "UVM_CREATE_EXTERNAL_RANGE", base=0x208000, length=0x10000).rmStatus) == "NV_ERR_UVM_ADDRESS_IN_USE"
  assert status_name(cl.uvm(uvm, "UVM_MAP_EXTERNAL_ALLOCATION", base=0x400000, length=0x1000, gpuAttributesCount=1).rmStatus) == "NV_ERR_INVALID_ADDRESS"
  assert status_name(cl.uvm(uvm, "UVM_FREE", base=0x300000, length=0x1000).rmStatus) == "NV_ERR_INVALID_ADDRESS"
  assert cl.uvm(uvm, "UVM_FREE", base=0x200000, length=0x10000).rmStatus == 0
  uvm2 = syscalls.open("/dev/nvidia-uvm", RW)
  assert status_name(cl.uvm(uvm2, "UVM_MM_INITIALIZE", uvmFd=cl.ctl).rmStatus) == "NV_ERR_INVALID_ARGUMENT"
  with pytest.raises(OSError) as e: syscalls.ioctl(uvm, 0x7777, cl.ffi.new("char[8]"))
  assert e.value.errno == errno.EINVAL
  syscalls.close(uvm2); syscalls.close(uvm)

# ---- versions and chips ----
def test_570_driver_layouts():
  drv = MockNV(version="570.211.01")
  with syscalls.installed(drv):
    c = Client("570.211.01")
    dev = c.alloc(C["NV01_DEVICE_0"], c.root)
    cls = c.ctrl(dev, "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2")
    assert cls.numClasses == len(CHIPS["hopper"].classes) and c.abi.ctrl_size("NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2") == 404
    bv = c.ctrl(c.root, "NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2")
    assert c.ffi.string(bv.versionBuffer) == b"570.211.01"
    a580 = abi_for_version("580.142")   # a client built for 580 sends a 64-byte NVOS46: EINVAL on a 570 driver
    with pytest.raises(OSError) as e: syscalls.ioctl(c.ctl, a580.escape("NV_ESC_RM_MAP_MEMORY_DMA"), a580.new("NVOS46_PARAMETERS"))
    assert e.value.errno == errno.EINVAL
    assert status_name(c.alloc_status(C["FERMI_VASPACE_A"], dev, "NV_VASPACE_ALLOCATION_PARAMETERS")[0]) == "NV_OK"

@pytest.mark.parametrize("arch", ["ada", "blackwell_b"])
def test_other_chips(arch):
  with syscalls.installed(MockNV(arch=arch)):
    c = Client()
    dev = c.alloc(C["NV01_DEVICE_0"], c.root)
    cls = c.ctrl(dev, "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2")
    a = arch_from_classlist([cls.classList[i] for i in range(cls.numClasses)])
    assert a.name == arch
    assert status_name(c.alloc_status(C["HOPPER_COMPUTE_A"], dev)[0]) == "NV_ERR_INVALID_CLASS"

def test_chip_class_tables_match_json():
  from tests.abi_facts import load as load_facts
  rm = load_facts("nvidia_rm")
  for chip in CHIPS.values():
    t = rm["chip_class_lists"][chip.arch.chip]
    assert set(chip.classes) == {v["id"] for v in t["engine_classes"].values()} | set(t["no_engine_classes"].values())
