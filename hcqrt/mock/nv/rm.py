"""A fake NVIDIA kernel driver (RM side): /dev/nvidiactl and /dev/nvidiaN behind hcqrt.syscalls.

It keeps RM's object tree per client with RM's checks and status codes (as read from
open-gpu-kernel-modules resserv / rmapi: unknown class -> NV_ERR_INVALID_CLASS, unknown parent ->
NV_ERR_OBJECT_NOT_FOUND, parent of the wrong class -> NV_ERR_INVALID_OBJECT_PARENT, taken handle ->
NV_ERR_INSERT_DUPLICATE_NAME, control paramsSize != the control's struct size -> NV_ERR_INVALID_ARGUMENT,
...); statuses go in the params' status field while ioctl() returns 0, and malformed requests (bad
size, wrong device file, unknown escape) fail with EINVAL like nvidia.ko. Memory objects are backed
by host memory (see vmem.py), GPU virtual addresses come from the vaspace objects, and the mock
reports an H100 (or another chip from chips.py) with a configurable 580-series version string.

  >>> from hcqrt import syscalls
  >>> with syscalls.installed(MockNV()) as drv:
  ...   fd = syscalls.open("/dev/nvidiactl", 2); syscalls.close(fd)
"""
from __future__ import annotations
import ctypes, errno, os, re, struct, time
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable
from ioctl_defs.nv.abi import abi_for_version, NVABI
from ioctl_defs.nv.ioctl import ESCAPES, ESCAPE_BY_NR, NV_IOCTL_MAGIC, ioc_decode, NV_RM_API_VERSION_CMD_QUERY, \
  NV_RM_API_VERSION_CMD_RELAXED, NV_RM_API_VERSION_REPLY_RECOGNIZED
from ioctl_defs.nv.ctrl import CTRL, CTRL_BY_CMD
from ioctl_defs.nv import classes as C, flags as F
from ioctl_defs.nv.status import NV_STATUS
from hcqrt import syscalls
from hcqrt.mock.nv.chips import CHIPS, Chip, GENERIC_CLASSES
from hcqrt.mock.nv.vmem import HostMemory, GPUVASpace, round_up, PAGE

S = NV_STATUS
CLIENT_HANDLE_BASE, OBJECT_HANDLE_BASE = 0xC1D00000, 0xCAF00000   # RM's generated-handle ranges (resserv)
# NVOS32_ATTR2_GPU_CACHEABLE (attr2 bits 3:2; nvos.h): DEFAULT 0, YES 1, NO 2 -- RM maps sysmem GPU-uncached unless YES
ATTR2_GPU_CACHEABLE_SHIFT, GPU_CACHEABLE_YES = 2, 1
# NV2080_ENGINE_TYPE_* (cl2080_notification.h): GRAPHICS is 1, COPY0.. are 9..; 0 (NULL) means "inherit the TSG's"
ENGINE_NULL, ENGINE_GR0, ENGINE_COPY0, ENGINE_COPY9 = 0, 1, 9, 0x12
# RC error codes RM writes into a channel's error notifier (nverror.h; they are also the Xid numbers)
ROBUST_CHANNEL_GR_EXCEPTION, ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT = 13, 31
NOTIFIER_SIZE = 16   # NvNotification: timeStamp (u64 ns), info32, info16, status (u16)
# NV2080 engine types RM writes as a notifier's info16 (OGKM@580.142 src/common/sdk/nvidia/inc/class/cl2080_notification.h:
# NV2080_ENGINE_TYPE_GRAPHICS 0x1 = GR0, NV2080_ENGINE_TYPE_COPY0 0x9)
NV2080_ENGINE_TYPE_GR0, NV2080_ENGINE_TYPE_COPY0 = 0x1, 0x9

# NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2, the mock's own copy of the header's numbers (OGKM@595.45.04
# src/common/sdk/nvidia/inc/ctrl/ctrl0000/ctrl0000system.h:1016-1094): p2pCaps bits, p2pCapsStatus indices and values
P2P_WRITES, P2P_READS, P2P_PROP, P2P_NVLINK, P2P_ATOMICS, P2P_LOOPBACK, P2P_PCI = (1 << i for i in range(7))
P2P_PCI_BAR1 = 1 << 13
P2P_IDX_READ, P2P_IDX_WRITE, P2P_IDX_NVLINK, P2P_IDX_ATOMICS, P2P_IDX_PROP, P2P_IDX_LOOPBACK, P2P_IDX_PCI, P2P_IDX_PCI_BAR1 = 0, 1, 2, 3, 4, 5, 6, 8
P2P_IDX_TABLE = 9
P2P_STATUS_OK, P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED, P2P_STATUS_DISABLED_BY_REGKEY, P2P_STATUS_NOT_SUPPORTED = 0, 3, 4, 5
P2P_INVALID_PEER, MAX_ATTACHED_GPUS = 0xFFFFFFFF, 32
P2P_LINKS = ("pcie", "bar1", "writes", "nvlink", "none")

def parse_p2p(spec: str, count: int) -> dict[frozenset[int], str]:
  """MOCKGPU_P2P: one link kind for every pair ("pcie", "nvlink", "none") or per pair ("0-1:nvlink,0-2:none"; pairs not
  named are "pcie"). What each kind models: "pcie" GPUs behind one PCIe switch (RM: P2P_CONNECTIVITY_PCIE_PROPRIETARY,
  UVM: UVM_GPU_LINK_PCIE), "bar1" the same pair with RMPcieP2PType=BAR1 (RM: P2P_CONNECTIVITY_PCIE_BAR1, chosen by the
  regkey, OGKM@595.45.04 src/nvidia/src/kernel/platform/p2p/p2p_caps.c:719-726; UVM: a BAR1 peer, enabled when both GPUs
  are registered), "writes" the "pcie" pair with P2P reads turned off by the ForceP2P regkey (READ_DISABLE,
  OGKM@595.45.04 src/nvidia/interface/nvrm_registry.h:1073-1081; p2p_caps.c:336-345 sets the read status
  DISABLED_BY_REGKEY and leaves writes OK), "nvlink" an NVLink pair, "none" GPUs whose root ports sit on two I/O hubs
  (RM answers IOH_TOPOLOGY_NOT_SUPPORTED, UVM sees UVM_LINK_TYPE_NONE).

  >>> parse_p2p("0-1:nvlink", 3)[frozenset((0, 1))], parse_p2p("none", 2)[frozenset((0, 1))]
  ('nvlink', 'none')
  """
  pairs = {frozenset((a, b)): "pcie" for a in range(count) for b in range(a + 1, count)}
  spec = (spec or "pcie").strip().lower()
  if spec in P2P_LINKS: return dict.fromkeys(pairs, spec)
  for item in spec.split(","):
    m = re.fullmatch(r"\s*(\d+)-(\d+):(\w+)\s*", item)
    if m is None or m.group(3) not in P2P_LINKS or (k := frozenset((int(m.group(1)), int(m.group(2))))) not in pairs:
      raise ValueError(f"MOCKGPU_P2P={spec!r}: expected one of {', '.join(P2P_LINKS)} or pairs like 0-1:nvlink,0-2:none "
                       f"between GPUs 0..{count - 1}")
    pairs[k] = m.group(3)
  return pairs

def runlist_of(engine: int) -> int:
  """The runlist an engine's channels are scheduled on. The mock gives every copy engine its own runlist
  (chips where GRCEs share the GR runlist accept more; a client must not rely on that)."""
  return 0 if engine == ENGINE_GR0 else 1 + engine - ENGINE_COPY0

class RMError(Exception):
  """An RM status to put into the params' status field."""
  def __init__(self, status: str, why: str = ""):
    super().__init__(f"{status}: {why}"); self.status, self.why = S[status], why

def _fail(status: str, why: str = "") -> RMError: return RMError(status, why)

@dataclass
class RMObject:
  handle: int
  cls: int
  kind: str
  parent: RMObject | None
  client: int
  children: list[RMObject] = field(default_factory=list)
  data: dict[str, Any] = field(default_factory=dict)

@dataclass
class FileState:
  kind: str                 # 'ctl' | 'dev' | 'uvm'
  path: str
  minor: int = -1
  map_ctx: tuple | None = None       # (backing HostMemory, offset, length) set by RM_MAP_MEMORY
  registered_ctl: int | None = None  # /dev/nvidiaN: the ctl fd given to REGISTER_FD
  attached: bool = False
  uvm: Any = None                     # UVM per-fd state (uvm.py)

# kind of object each class makes, and the kinds its parent may be (RM resource_list.h parent lists)
_PARENTS = {"device": ("client",), "subdevice": ("device",), "usermode": ("subdevice",), "vaspace": ("device", "subdevice"),
  "sysmem": ("device",), "vidmem": ("device", "subdevice"), "virtual": ("device",), "osdesc": ("device",),
  "group": ("device",), "ctxshare": ("group",), "channel": ("device", "group"), "compute": ("channel",), "copy": ("channel",)}
_ALLOC_STRUCT = {"device": ("NV0080_ALLOC_PARAMETERS", False), "subdevice": ("NV2080_ALLOC_PARAMETERS", False),
  "usermode": ("NV_HOPPER_USERMODE_A_PARAMS", False), "vaspace": ("NV_VASPACE_ALLOCATION_PARAMETERS", True),
  "sysmem": ("NV_MEMORY_ALLOCATION_PARAMS", True), "vidmem": ("NV_MEMORY_ALLOCATION_PARAMS", True),
  "virtual": ("NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS", True), "osdesc": ("NV_OS_DESC_MEMORY_ALLOCATION_PARAMS", True),
  "group": ("NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS", True), "ctxshare": ("NV_CTXSHARE_ALLOCATION_PARAMETERS", True),
  "channel": ("NV_CHANNEL_ALLOC_PARAMS", True), "compute": ("NV_GR_ALLOCATION_PARAMETERS", False),
  "copy": ("NVB0B5_ALLOCATION_PARAMETERS", False)}
_CTRL_KIND = {0x0000: ("client",), 0x0080: ("device",), 0x2080: ("subdevice",), 0xA06C: ("group",), 0xA06F: ("channel",), 0xC36F: ("channel",)}

def _class_kind(cls: int) -> str | None:
  fixed = {C.CLASSES["NV01_ROOT_CLIENT"]: "client", C.CLASSES["NV01_DEVICE_0"]: "device", C.CLASSES["NV20_SUBDEVICE_0"]: "subdevice", C.CLASSES["FERMI_VASPACE_A"]: "vaspace",
           C.CLASSES["NV01_MEMORY_SYSTEM"]: "sysmem", C.CLASSES["NV01_MEMORY_LOCAL_USER"]: "vidmem", C.CLASSES["NV01_MEMORY_VIRTUAL"]: "virtual",
           C.CLASSES["NV01_MEMORY_SYSTEM_OS_DESCRIPTOR"]: "osdesc", C.CLASSES["KEPLER_CHANNEL_GROUP_A"]: "group", C.CLASSES["FERMI_CONTEXT_SHARE_A"]: "ctxshare"}
  if cls in fixed: return fixed[cls]
  return {0x61: "usermode", 0x6F: "channel", 0xC0: "compute", 0xB5: "copy"}.get(cls & 0xFF) if cls >= 0xC300 else None

@dataclass
class MockGPU:
  """One GPU of the box: where it sits on PCI and what RM and UVM name it by. RM derives the 32-bit gpuId from the PCI
  address, (domain & 0xffff) << 16 | bus << 8 | device (OGKM@580.142 src/nvidia/src/kernel/gpu/gpu.c gpuGenerate32BitId,
  called through nv_generate_id_from_pci_info in src/nvidia/arch/nvalloc/unix/include/nv.h); the mock puts GPU i alone
  on bus i + 1, device 0. Its device instance (NV0000_CTRL_GPU_GET_ID_INFO_V2 deviceInstance, the NV01_DEVICE_0
  deviceId) and /dev/nvidia minor are its probe order, i."""
  index: int
  uuid: bytes
  engine: Any = None       # its GPFIFO engine (gpfifo.py): each GPU runs its own channels
  vidmem_used: int = 0
  @property
  def bus(self) -> int: return self.index + 1
  @property
  def gpu_id(self) -> int: return self.bus << 8

class MockNV:
  """The fake NVIDIA driver. `arch` picks the GPU (chips.CHIPS), `version` the driver version it reports;
  struct layouts follow `layout_version` (default: `version`, so a mismatched client sees EINVAL/status errors).
  `count` GPUs of that chip sit behind the one driver (one /dev/nvidiactl, /dev/nvidia0..count-1), as nvidia.ko
  presents every GPU of the box."""
  def __init__(self, arch: str = "hopper", version: str = "580.142", layout_version: str | None = None, count: int = 1,
               p2p: str = "pcie"):
    if not 1 <= count <= 32: raise ValueError(f"MockNV: {count} GPUs (RM lists at most 32: NV0000_CTRL_GPU_MAX_ATTACHED_GPUS)")
    self.chip: Chip = CHIPS[arch]
    self.version = version
    self.abi: NVABI = abi_for_version(layout_version or version)
    self.ffi = self.abi.ffi
    self.files: dict[int, FileState] = {}
    self.clients: dict[int, dict[int, RMObject]] = {}
    self.init_sysmem = True                       # NVreg_InitializeSystemMemoryAllocations (see _memory)
    self.faults: list[str] = []                   # what each RC error was (for tests; RM itself only writes the notifiers)
    # kind -> status for the next RM free of an object of that kind (tests): Nv01Free fails before anything is freed
    # when its prologue or top/client lock fails (OGKM@580.142 src/nvidia/src/kernel/rmapi/alloc_free.c:1497-1546,
    # src/nvidia/src/libraries/resserv/src/rs_server.c:1222-1231 `goto done` before the tree free), e.g. with
    # NV_ERR_GPU_IN_FULLCHIP_RESET (alloc_free.c:1539) or NV_ERR_GPU_IS_LOST; the object and its children stay alive
    self.fail_free: dict[str, str] = {}
    self.gpus = [MockGPU(i, bytes([0x4A, 0x1C, 0x90, 0x07 + i] + [0x5E] * 12)) for i in range(count)]
    self.links = parse_p2p(p2p, count)            # the box's GPU-GPU links (MOCKGPU_P2P)
    self.log: list[tuple[str, dict]] = []         # peer ioctls as the driver saw them (UVM peer access and peer maps)
    self.next_client, self.next_chid = 0, 0
    from hcqrt.mock.nv.uvm import UVM
    from hcqrt.mock.nv.gpfifo import GPFIFOEngine
    self.uvm = UVM(self)
    for g in self.gpus: g.engine = GPFIFOEngine(self, g.index)
    self.doorbell_pages: dict[int, tuple[int, int]] = {}   # CPU address of a mapped usermode page -> (its length, its GPU)
    self.doorbells = 0                          # doorbell writes seen (tests and benchmarks count submissions)
    self.uvm_mm_enabled = False                 # False: UVM_MM_INITIALIZE answers NV_WARN_NOTHING_TO_DO (as without HMM/ATS)

  # GPU 0's state under the names the one-GPU mock had (tests and benchmarks read them)
  @property
  def gpu_id(self) -> int: return self.gpus[0].gpu_id
  @property
  def uuid(self) -> bytes: return self.gpus[0].uuid
  @property
  def engine(self) -> Any: return self.gpus[0].engine
  @property
  def vidmem_used(self) -> int: return sum(g.vidmem_used for g in self.gpus)

  def gpu_of(self, o: RMObject) -> MockGPU:
    """The GPU an object belongs to: its device's (a client-level object has none)."""
    while o.kind != "device":
      if o.parent is None: raise _fail("NV_ERR_INVALID_OBJECT_PARENT", f"{o.kind} {o.handle:#x} is not under a device")
      o = o.parent
    return self.gpus[o.data["gpu"]]
  def link(self, a: int, b: int) -> str:
    """The link between GPUs a and b ("pcie", "bar1", "writes", "nvlink", "none"; one GPU with itself: "pcie", the loopback path)."""
    return "pcie" if a == b else self.links[frozenset((a, b))]
  def gpu_by_id(self, gpu_id: int) -> MockGPU | None: return next((g for g in self.gpus if g.gpu_id == gpu_id), None)

  # ---- the syscall seam interface ----
  def claims(self, path: str) -> bool: return re.fullmatch(r"/dev/nvidia(ctl|-uvm|\d+)", path) is not None

  def open(self, path: str, flags: int) -> int:
    if path == "/dev/nvidiactl": st = FileState("ctl", path)
    elif path == "/dev/nvidia-uvm": st = FileState("uvm", path)
    elif (m := re.fullmatch(r"/dev/nvidia(\d+)", path)) and int(m.group(1)) < len(self.gpus): st = FileState("dev", path, minor=int(m.group(1)))
    else: raise FileNotFoundError(errno.ENOENT, f"No such device: {path} (the mock has {len(self.gpus)} GPU(s), /dev/nvidia0..{len(self.gpus) - 1})")
    fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)   # a real, unique fd number the client can hold
    self.files[fd] = st
    return fd

  def close(self, fd: int) -> None:
    st = self.files.pop(fd, None)
    if st is None: raise OSError(errno.EBADF, f"fd {fd} is not open on the NV mock")
    if st.kind == "uvm": self.uvm.close(fd, st)
    os.close(fd)

  def ioctl(self, fd: int, request: int, argp: int) -> int:
    st = self.files.get(fd)
    if st is None: raise OSError(errno.EBADF, f"fd {fd} is not open on the NV mock")
    if st.kind == "uvm": return self.uvm.ioctl(fd, st, request, argp)
    _, typ, nr, size = ioc_decode(request)
    if typ != NV_IOCTL_MAGIC or nr not in ESCAPE_BY_NR: raise OSError(errno.EINVAL, f"unknown nvidia escape nr {nr:#x}")
    name = ESCAPE_BY_NR[nr]
    _, struct, where = ESCAPES[name]
    if (where == "ctl" and st.kind != "ctl") or (where == "device" and st.kind != "dev"):
      raise OSError(errno.EINVAL, f"{name} must be issued on {'/dev/nvidiactl' if where == 'ctl' else '/dev/nvidiaN'}, not {st.path}")
    if name == "NV_ESC_CARD_INFO": ok = size > 0 and size % self.abi.sizeof(struct) == 0
    elif name == "NV_ESC_ATTACH_GPUS_TO_FD": ok = size > 0 and size % 4 == 0
    elif name == "NV_ESC_RM_ALLOC": ok = size in (self.abi.sizeof("NVOS21_PARAMETERS"), self.abi.sizeof("NVOS64_PARAMETERS"))
    else: ok = size == self.abi.sizeof(struct)
    if not ok: raise OSError(errno.EINVAL, f"{name}: argument size {size} is not what this driver expects")
    if not argp: raise OSError(errno.EFAULT, f"{name}: NULL argument")
    getattr(self, "_esc_" + name[7:].lower())(fd, st, argp, size)
    return 0

  def mmap(self, fd: int, length: int, prot: int, flags: int, offset: int, addr: int | None) -> int:
    st = self.files.get(fd)
    if st is None: raise OSError(errno.EBADF, f"fd {fd} is not open on the NV mock")
    if st.kind == "uvm": return self.uvm.mmap(fd, st, length, prot, flags, offset, addr)
    if st.map_ctx is None: raise OSError(errno.EINVAL, f"mmap of {st.path}: no RM_MAP_MEMORY context on this fd")
    if offset != 0: raise OSError(errno.EINVAL, f"mmap of {st.path}: offset must be 0, got {offset:#x}")
    backing, off, ln = st.map_ctx
    if (st.kind == "dev" and length != ln) or length > ln:
      raise OSError(errno.ENXIO, f"mmap of {st.path}: length {length:#x} differs from the mapped size {ln:#x}")
    a = backing.map_into(length, prot, addr, off)
    um = next((o for objs in self.clients.values() for o in objs.values() if o.kind == "usermode" and o.data.get("backing") is backing), None)
    if um is not None: self.doorbell_pages[a] = (length, self.gpu_of(um).index)
    return a

  def mmio_write32(self, addr: int, value: int) -> None:
    """A register write into one of our mappings: the doorbell (usermode + 0x90) runs the GPFIFO engine of the GPU whose
    usermode region it is (a token rung on another GPU's doorbell names no channel there)."""
    ctypes.c_uint32.from_address(addr).value = value
    for base, (_, gpu) in self.doorbell_pages.items():
      if addr == base + 0x90: self.doorbells += 1; self.gpus[gpu].engine.ring(value); return

  def munmap(self, addr: int, length: int) -> None:
    self.forget_mapping(addr, length)
    syscalls.munmap(addr, length)   # our mappings are plain MAP_SHARED maps of memfds; the seam no longer routes this address

  def forget_mapping(self, addr: int, length: int) -> None:
    """[addr, addr+length) is unmapped (munmap, or a MAP_FIXED mmap over it: syscalls.mmap): no doorbell page there."""
    for base in [b for b in self.doorbell_pages if addr <= b < addr + length]: del self.doorbell_pages[base]

  # ---- memory access helpers (the kernel's copy_from_user / copy_to_user) ----
  def cast(self, struct: str, addr: int) -> Any:
    if not addr: raise _fail("NV_ERR_INVALID_POINTER", f"NULL {struct}")
    return self.ffi.cast(f"{struct} *", addr)

  def client(self, h: int) -> dict[int, RMObject]:
    if h not in self.clients: raise _fail("NV_ERR_INVALID_CLIENT", f"client {h:#x}")
    return self.clients[h]

  def obj(self, hclient: int, h: int, kinds: tuple[str, ...] | None = None, missing: str = "NV_ERR_OBJECT_NOT_FOUND") -> RMObject:
    objs = self.client(hclient)
    if h not in objs: raise _fail(missing, f"handle {h:#x} in client {hclient:#x}")
    o = objs[h]
    if kinds is not None and o.kind not in kinds: raise _fail("NV_ERR_INVALID_OBJECT_HANDLE", f"{h:#x} is a {o.kind}, expected {kinds}")
    return o

  def device_of(self, o: RMObject) -> RMObject:
    while o.kind != "device":
      assert o.parent is not None
      o = o.parent
    return o

  # ---- escapes ----
  def _esc_check_version_str(self, fd, st, argp, size):
    p = self.cast("nv_ioctl_rm_api_version_t", argp)
    want = self.ffi.string(p.versionString).decode(errors="replace")
    mine = self.version.encode()[:63]
    if p.cmd == NV_RM_API_VERSION_CMD_QUERY: ok = True
    elif p.cmd == NV_RM_API_VERSION_CMD_RELAXED: ok = want.split(".")[0] == self.version.split(".")[0]
    else: ok = want == self.version
    p.reply = NV_RM_API_VERSION_REPLY_RECOGNIZED
    self.ffi.memmove(p.versionString, mine + b"\0", len(mine) + 1)   # RM copies its version back in every case
    if not ok: raise OSError(errno.EINVAL, f"NVIDIA driver version mismatch: client {want!r}, driver {self.version!r}")

  def _esc_card_info(self, fd, st, argp, size):
    cards = self.ffi.cast("nv_ioctl_card_info_t *", argp)
    # (nvidia.ko fills one entry per probed GPU: OGKM@580.142 kernel-open/nvidia/nv.c nvidia_ioctl NV_ESC_CARD_INFO ->
    # nvidia_read_card_info(arg_copy, arg_size / sizeof(nv_ioctl_card_info_t))); it refuses an array with fewer entries
    # than probed GPUs (OGKM@595.45.04 kernel-open/nvidia/nv.c:2366-2374: num_entries < num_nv_devices -> -EINVAL; the
    # clearing before it is of the kernel's copy, which a failed ioctl does not copy back)
    if size // self.abi.sizeof("nv_ioctl_card_info_t") < len(self.gpus):
      raise OSError(errno.EINVAL, f"NV_ESC_CARD_INFO: {size // self.abi.sizeof('nv_ioctl_card_info_t')} entries for {len(self.gpus)} GPUs")
    self.ffi.memmove(cards, b"\0" * size, size)
    for g in self.gpus:
      c = cards[g.index]
      c.valid, c.gpu_id, c.minor_number, c.fb_size = 1, g.gpu_id, g.index, self.chip.fb_size
      c.pci_info.domain, c.pci_info.bus, c.pci_info.vendor_id, c.pci_info.device_id = 0, g.bus, 0x10DE, self.chip.pci_device_id
      c.reg_address, c.reg_size, c.fb_address = 0xFB000000 - (g.index << 25), 16 << 20, 0xC000000000 + (g.index << 36)

  def _esc_register_fd(self, fd, st, argp, size):
    ctl = self.cast("nv_ioctl_register_fd_t", argp).ctl_fd
    if ctl not in self.files or self.files[ctl].kind != "ctl": raise OSError(errno.EINVAL, f"REGISTER_FD: fd {ctl} is not /dev/nvidiactl")
    st.registered_ctl = ctl

  def _esc_attach_gpus_to_fd(self, fd, st, argp, size):
    if st.attached: raise OSError(errno.EINVAL, "ATTACH_GPUS_TO_FD may only be done once per fd")
    ids = self.ffi.cast("NvU32 *", argp)
    for i in range(size // 4):
      if self.gpu_by_id(ids[i]) is None: raise OSError(errno.EINVAL, f"ATTACH_GPUS_TO_FD: unknown gpu id {ids[i]:#x}")
    st.attached = True

  def _esc_alloc_os_event(self, fd, st, argp, size):
    p = self.cast("nv_ioctl_alloc_os_event_t", argp)
    p.Status = S["NV_OK"] if p.hClient in self.clients else S["NV_ERR_INVALID_CLIENT"]

  def _status_call(self, p: Any, fn: Callable[[], None], field: str = "status") -> None:
    try: fn(); setattr(p, field, S["NV_OK"])
    except RMError as e: setattr(p, field, e.status)

  def _esc_rm_alloc(self, fd, st, argp, size):
    p = self.cast("NVOS64_PARAMETERS" if size == self.abi.sizeof("NVOS64_PARAMETERS") else "NVOS21_PARAMETERS", argp)
    self._status_call(p, lambda: self._alloc(p.hRoot, p.hObjectParent, p, p.hClass, p.pAllocParms))

  def _esc_rm_alloc_memory(self, fd, st, argp, size):
    p = self.cast("nv_ioctl_nvos02_parameters_with_fd", argp).params
    def go():
      if p.hClass != C.CLASSES["NV01_MEMORY_SYSTEM_OS_DESCRIPTOR"]: raise _fail("NV_ERR_INVALID_CLASS", f"RM_ALLOC_MEMORY of class {p.hClass:#x}")
      parent = self.obj(p.hRoot, p.hObjectParent)
      self._check_parent("osdesc", parent)
      h = self._new_handle(p.hRoot, p.hObjectNew)
      self._make_osdesc(p.hRoot, parent, h, p.hClass, p.pMemory, p.limit + 1)
      p.hObjectNew = h
    self._status_call(p, go)

  def _esc_rm_free(self, fd, st, argp, size):
    p = self.cast("NVOS00_PARAMETERS", argp)
    self._status_call(p, lambda: self._free(p.hRoot, p.hObjectOld))

  def _esc_rm_control(self, fd, st, argp, size):
    p = self.cast("NVOS54_PARAMETERS", argp)
    self._status_call(p, lambda: self._control(p))

  def _esc_rm_map_memory(self, fd, st, argp, size):
    w = self.cast("nv_ioctl_nvos33_parameters_with_fd", argp)
    p = w.params
    def go():
      self.client(p.hClient)
      self.obj(p.hClient, p.hDevice, ("device", "subdevice"), missing="NV_ERR_INVALID_OBJECT_HANDLE")
      m = self.obj(p.hClient, p.hMemory)
      backing = m.data.get("backing")
      if m.kind not in ("sysmem", "vidmem", "usermode") or backing is None: raise _fail("NV_ERR_INVALID_ARGUMENT", f"{m.kind} object cannot be CPU-mapped")
      if p.length == 0 or p.offset + p.length > m.data["size"]: raise _fail("NV_ERR_INVALID_LIMIT", f"map {p.offset:#x}+{p.length:#x} of {m.data['size']:#x}")
      if p.offset % PAGE: raise _fail("NV_ERR_INVALID_OFFSET", f"offset {p.offset:#x} not page aligned")
      tgt = self.files.get(w.fd)
      if tgt is None or tgt.kind not in ("ctl", "dev"): raise _fail("NV_ERR_INVALID_ARGUMENT", f"fd {w.fd} is not an nvidia device file")
      if m.kind != "sysmem" and tgt.kind != "dev": raise _fail("NV_ERR_INVALID_ARGUMENT", "video memory must be mapped through /dev/nvidiaN")
      if tgt.map_ctx is not None: raise _fail("NV_ERR_STATE_IN_USE", f"fd {w.fd} already holds a mapping context")
      tgt.map_ctx = (backing, p.offset, round_up(p.length, PAGE))
      p.pLinearAddress = 0
      p.flags = p.flags & ~(((1 << 3) - 1) << 23) | F.drf("NVOS33_FLAGS_CACHING_TYPE", "DEFAULT")
    self._status_call(p, go)

  def _esc_rm_unmap_memory(self, fd, st, argp, size):
    p = self.cast("NVOS34_PARAMETERS", argp)
    self._status_call(p, lambda: self.obj(p.hClient, p.hMemory))

  def _esc_rm_map_memory_dma(self, fd, st, argp, size):
    p = self.cast("NVOS46_PARAMETERS", argp)
    def go():
      virt = self.obj(p.hClient, p.hDma, ("virtual",), missing="NV_ERR_INVALID_OBJECT_HANDLE")
      m = self.obj(p.hClient, p.hMemory, ("sysmem", "vidmem", "osdesc"), missing="NV_ERR_INVALID_OBJECT_HANDLE")
      length = p.length or m.data["size"] - p.offset
      if p.offset % PAGE or p.offset + length > m.data["size"]: raise _fail("NV_ERR_INVALID_LIMIT", f"{p.offset:#x}+{length:#x} of {m.data['size']:#x}")
      vs: GPUVASpace = virt.data["vaspace"].data["va"]
      lo, hi = virt.data["range"]
      if F.field_get("NVOS46_FLAGS_DMA_OFFSET_FIXED", p.flags):
        va = p.dmaOffset
        if va % PAGE or va < lo or va + length > hi: raise _fail("NV_ERR_INVALID_OFFSET", f"fixed offset {va:#x} outside the virtual range")
      else: va = vs.alloc(round_up(length, PAGE), max(PAGE, m.data.get("align", PAGE)))
      try: vs.map(va, round_up(length, PAGE), m.data["host"] + p.offset)
      except ValueError as e: raise _fail("NV_ERR_INVALID_OFFSET", str(e)) from None
      m.data.setdefault("gpu_maps", []).append((vs, va))
      p.dmaOffset = va
    self._status_call(p, go)

  def _esc_rm_unmap_memory_dma(self, fd, st, argp, size):
    p = self.cast("NVOS47_PARAMETERS", argp)
    def go():
      virt = self.obj(p.hClient, p.hDma, ("virtual",), missing="NV_ERR_INVALID_OBJECT_HANDLE")
      m = self.obj(p.hClient, p.hMemory, missing="NV_ERR_INVALID_OBJECT_HANDLE")
      vs = virt.data["vaspace"].data["va"]
      if (vs, p.dmaOffset) not in m.data.get("gpu_maps", []): raise _fail("NV_ERR_INVALID_OFFSET", f"{p.dmaOffset:#x} is not mapped")
      vs.unmap(p.dmaOffset); m.data["gpu_maps"].remove((vs, p.dmaOffset))
    self._status_call(p, go)

  # ---- object tree ----
  def _new_handle(self, hclient: int, h: int) -> int:
    objs = self.client(hclient)
    if h == 0:   # RM generates a handle
      h = OBJECT_HANDLE_BASE + len(objs)
      while h in objs: h += 1
      return h
    if h == hclient: raise _fail("NV_ERR_INVALID_OBJECT_HANDLE", "object handle equals the client handle")
    if h in objs: raise _fail("NV_ERR_INSERT_DUPLICATE_NAME", f"handle {h:#x} is in use")
    return h

  def _check_parent(self, kind: str, parent: RMObject) -> None:
    if parent.kind not in _PARENTS[kind]:
      raise _fail("NV_ERR_INVALID_OBJECT_PARENT", f"a {kind} cannot be a child of a {parent.kind}")

  def supported(self, cls: int) -> bool: return cls in GENERIC_CLASSES or cls in self.chip.classes

  def _alloc(self, hroot: int, hparent: int, p: Any, cls: int, pparams: int) -> None:
    kind = _class_kind(cls)
    if kind is None or not self.supported(cls): raise _fail("NV_ERR_INVALID_CLASS", f"class {cls:#x} ({C.class_name(cls)}) on {self.chip.name}")
    if kind == "client":
      h = p.hObjectNew or (self.ffi.cast("NvHandle *", pparams)[0] if pparams else 0)
      if h == 0:
        h = CLIENT_HANDLE_BASE + self.next_client; self.next_client += 1
      if h in self.clients: raise _fail("NV_ERR_INSERT_DUPLICATE_NAME", f"client {h:#x} exists")
      self.clients[h] = {h: RMObject(h, cls, "client", None, h)}
      p.hObjectNew = h
      return
    objs = self.client(hroot)
    parent = self.obj(hroot, hparent or hroot)
    self._check_parent(kind, parent)
    struct, required = _ALLOC_STRUCT[kind]
    if required and not pparams: raise _fail("NV_ERR_INVALID_ARGUMENT", f"{C.class_name(cls)} needs {struct}")
    params = self.ffi.cast(f"{struct} *", pparams) if pparams else self.ffi.new(f"{struct} *")
    h = self._new_handle(hroot, p.hObjectNew)
    o = RMObject(h, cls, kind, parent, hroot)
    getattr(self, "_alloc_" + kind)(o, params)
    parent.children.append(o); objs[h] = o
    p.hObjectNew = h

  def _alloc_device(self, o, prm):
    # a device instance with no GPU behind it: gpumgrIsDeviceInstanceValid fails and deviceConstruct answers
    # NV_ERR_INVALID_CLASS; past NV_MAX_DEVICES (32) it is NV_ERR_INVALID_ARGUMENT (OGKM@595.45.04
    # src/nvidia/src/kernel/gpu/device.c:119-122, gpu_mgr/gpu_mgr.c:627-644). The same instance twice under one client
    # is accepted on bare metal (only a vGPU guest refuses it: device.c:368-377), so the mock accepts it.
    if prm.deviceId >= MAX_ATTACHED_GPUS: raise _fail("NV_ERR_INVALID_ARGUMENT", f"deviceId {prm.deviceId} >= {MAX_ATTACHED_GPUS}")
    if prm.deviceId >= len(self.gpus): raise _fail("NV_ERR_INVALID_CLASS", f"deviceId {prm.deviceId}: the mock has {len(self.gpus)} GPU(s)")
    o.data["gpu"] = prm.deviceId
  def _alloc_subdevice(self, o, prm):
    if prm.subDeviceId != 0: raise _fail("NV_ERR_INVALID_ARGUMENT", f"subDeviceId {prm.subDeviceId}")
    if any(c.kind == "subdevice" for c in o.parent.children): raise _fail("NV_ERR_STATE_IN_USE", "subdevice already allocated")
  def _alloc_usermode(self, o, prm):
    o.data.update(backing=(b := HostMemory(0x10000, "nv-usermode")), size=b.size, host=b.addr)

  def _alloc_vaspace(self, o, prm):
    base = prm.vaBase or 0x200000
    size = prm.vaSize or ((1 << 49) - base)
    if prm.index != 0: raise _fail("NV_ERR_INVALID_ARGUMENT", f"vaspace index {prm.index}")
    V = F.VALUES
    if prm.flags & V["NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING"] and not prm.flags & V["NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED"]:
      # vaspace_api.c (bug 1766112): a fault-capable VA space must be externally owned (registered with UVM)
      raise _fail("NV_ERR_INVALID_ARGUMENT", "ENABLE_PAGE_FAULTING without IS_EXTERNALLY_OWNED")
    o.data.update(va=GPUVASpace(base, size), flags=prm.flags, external=bool(prm.flags & V["NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED"]))
    prm.vaStartInternal, prm.vaLimitInternal = base, base + size - 1

  def _memory(self, o, prm, vid: bool):
    if prm.size == 0: raise _fail("NV_ERR_INVALID_ARGUMENT", "memory size 0")
    huge = F.field_get("NVOS32_ATTR_PAGE_SIZE", prm.attr) == F.VALUES["NVOS32_ATTR_PAGE_SIZE_HUGE"] or \
      F.field_get("NVOS32_ATTR2_PAGE_SIZE_HUGE", prm.attr2) != 0
    align = prm.alignment if prm.flags & F.VALUES["NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE"] else 0
    if align & (align - 1): raise _fail("NV_ERR_INVALID_ARGUMENT", f"alignment {align:#x} is not a power of two")
    page = (2 << 20) if huge else PAGE
    size = round_up(prm.size, max(page, align))
    gpu = self.gpu_of(o.parent)
    if vid and gpu.vidmem_used + size > self.chip.fb_size: raise _fail("NV_ERR_NO_MEMORY", f"video memory of GPU {gpu.index} exhausted ({size:#x} bytes)")
    if prm.flags & F.VALUES["NVOS32_ALLOC_FLAGS_VIRTUAL"]: raise _fail("NV_ERR_NOT_SUPPORTED", "virtual allocation through a memory class")
    b = HostMemory(size, "nv-vidmem" if vid else "nv-sysmem")
    # RM zeroes new system memory only while NVreg_InitializeSystemMemoryAllocations=1 (OGKM@580.142
    # src/nvidia/arch/nvalloc/unix/src/os.c:1013-1021, default in src/nvidia/arch/nvalloc/unix/include/nv-reg.h:960);
    # with it 0 the pages hold whatever was there before
    if not vid and not self.init_sysmem: ctypes.memset(b.addr, 0xA5, size)
    if vid: gpu.vidmem_used += size
    cacheable = (prm.attr2 >> ATTR2_GPU_CACHEABLE_SHIFT) & 3 == GPU_CACHEABLE_YES
    o.data.update(backing=b, size=size, host=b.addr, align=max(page, align), page=page, vid=vid, gpu_cacheable=not vid and cacheable, gpu=gpu.index)
    prm.size, prm.limit, prm.offset = size, size - 1, 0
    prm.attr = (prm.attr & ~(3 << 25)) | F.drf("NVOS32_ATTR_LOCATION", "VIDMEM" if vid else "PCI")
  def _alloc_sysmem(self, o, prm): self._memory(o, prm, vid=False)
  def _alloc_vidmem(self, o, prm): self._memory(o, prm, vid=True)

  def _alloc_osdesc(self, o, prm):
    self._fill_osdesc(o, prm.descriptor, prm.limit + 1)
  def _fill_osdesc(self, o, addr, size):
    if not addr or addr % PAGE or size <= 0 or size % PAGE: raise _fail("NV_ERR_INVALID_ARGUMENT", f"OS descriptor {addr:#x}+{size:#x} must be page aligned")
    o.data.update(size=size, host=addr, align=PAGE)
  def _make_osdesc(self, hclient, parent, h, cls, addr, size):
    o = RMObject(h, cls, "osdesc", parent, hclient)
    self._fill_osdesc(o, addr, size)
    parent.children.append(o); self.clients[hclient][h] = o

  def _vaspace_for(self, o: RMObject, h: int) -> RMObject:
    dev = self.device_of(o.parent)
    if h: return self.obj(o.client, h, ("vaspace",), missing="NV_ERR_INVALID_OBJECT_HANDLE")
    vs = [c for c in dev.children if c.kind == "vaspace"]
    if not vs: raise _fail("NV_ERR_INVALID_ARGUMENT", "no vaspace on this device")
    return vs[0]

  def _alloc_virtual(self, o, prm):
    vso = self._vaspace_for(o, prm.hVASpace)
    vs: GPUVASpace = vso.data["va"]
    lo, hi = (prm.offset, prm.limit + 1) if prm.limit else (vs.base, vs.limit)
    if lo < vs.base or hi > vs.limit or lo >= hi: raise _fail("NV_ERR_INVALID_LIMIT", f"virtual range {lo:#x}..{hi:#x} outside the vaspace")
    o.data.update(vaspace=vso, range=(lo, hi))
    prm.offset, prm.limit = lo, hi - 1

  def _alloc_group(self, o, prm):
    if prm.engineType not in (F.VALUES["NV2080_ENGINE_TYPE_GRAPHICS"], F.VALUES["NV2080_ENGINE_TYPE_COPY0"],
                              F.VALUES["NV2080_ENGINE_TYPE_COPY1"], F.VALUES["NV2080_ENGINE_TYPE_COPY2"]):
      raise _fail("NV_ERR_INVALID_ARGUMENT", f"channel group engineType {prm.engineType}")
    o.data.update(engine=prm.engineType, enabled=False, vaspace=self._vaspace_for(o, prm.hVASpace) if prm.hVASpace else None, subctx=0,
                  runlist=runlist_of(prm.engineType))

  def _alloc_ctxshare(self, o, prm):
    vso = self._vaspace_for(o, prm.hVASpace)
    mode = F.field_get("NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT", prm.flags)
    grp = o.parent
    if mode == F.VALUES["NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SPECIFIED"]: sub = prm.subctxId
    else: sub = grp.data["subctx"]; grp.data["subctx"] += 1
    if sub >= 64: raise _fail("NV_ERR_INSUFFICIENT_RESOURCES", "no free subcontext in the channel group")
    o.data.update(vaspace=vso, subctx=sub)
    prm.subctxId = sub

  def _alloc_channel(self, o, prm):
    n = prm.gpFifoEntries
    if n == 0 or n & (n - 1): raise _fail("NV_ERR_INVALID_ARGUMENT", f"gpFifoEntries {n} is not a power of two")
    engine = prm.engineType
    if o.parent.kind == "group":
      grp = o.parent.data["engine"]
      # kernel_channel.c kchannelConstruct: with per-runlist channel RAM (Ampere on) a channel's engine must be its
      # TSG's ("not compatible with engine type of TSG"); engineType 0 inherits the TSG's
      if engine != ENGINE_NULL and engine != grp:
        raise _fail("NV_ERR_INVALID_ARGUMENT", f"channel engineType {engine:#x} is not the engine type of its channel group ({grp:#x})")
      engine = grp
      if not prm.hContextShare: raise _fail("NV_ERR_INVALID_ARGUMENT", "a channel in a channel group needs hContextShare")
      ctx = self.obj(o.client, prm.hContextShare, ("ctxshare",), missing="NV_ERR_INVALID_OBJECT_HANDLE")
      if ctx.parent is not o.parent: raise _fail("NV_ERR_INVALID_ARGUMENT", "context share belongs to another channel group")
      vso = ctx.data["vaspace"]
    else: ctx, vso = None, self._vaspace_for(o, prm.hVASpace)
    userd = self.obj(o.client, prm.hUserdMemory[0], ("sysmem", "vidmem"), missing="NV_ERR_INVALID_OBJECT_HANDLE")
    uoff = prm.userdOffset[0]
    if uoff % 512 or uoff + 512 > userd.data["size"]: raise _fail("NV_ERR_INVALID_ARGUMENT", f"userdOffset {uoff:#x} (512-byte aligned, inside the memory)")
    notifier = None
    if prm.hObjectError:
      notifier = self.obj(o.client, prm.hObjectError, missing="NV_ERR_INVALID_OBJECT_HANDLE")
      if notifier.kind not in ("sysmem", "vidmem") or notifier.data["size"] < NOTIFIER_SIZE:
        raise _fail("NV_ERR_INVALID_ARGUMENT", f"hObjectError {prm.hObjectError:#x} is not memory that holds a notifier")
    if prm.hObjectBuffer: self.obj(o.client, prm.hObjectBuffer, missing="NV_ERR_INVALID_OBJECT_HANDLE")
    chid = self.next_chid; self.next_chid += 1
    o.data.update(chid=chid, token=chid, entries=n, ring_va=prm.gpFifoOffset, userd=userd.data["host"] + uoff,
                  vaspace=vso, ctxshare=ctx, engine=engine, runlist=runlist_of(engine) if engine else None, bound=False, enabled=False,
                  notifier=notifier, uvm_bound=False)
    prm.cid = chid

  def _alloc_engine_object(self, o, kind):
    ch = o.parent
    if any(c.kind == kind for c in ch.children): raise _fail("NV_ERR_STATE_IN_USE", f"channel already has a {kind} object")
    ch.data["uvm_bound"] = False   # new engine context buffers: UVM must (re)bind the channel (UVM_REGISTER_CHANNEL after this)
  def _alloc_compute(self, o, prm): self._alloc_engine_object(o, "compute")
  def _alloc_copy(self, o, prm): self._alloc_engine_object(o, "copy")

  def _free(self, hroot: int, h: int) -> None:
    objs = self.client(hroot)
    if h == hroot:
      self._release(objs[hroot]); del self.clients[hroot]; return
    if h not in objs: raise _fail("NV_ERR_OBJECT_NOT_FOUND", f"handle {h:#x}")
    o = objs[h]
    if (st := self.fail_free.pop(o.kind, None)) is not None: raise _fail(st, f"free of {o.kind} {h:#x} refused; it stays allocated")
    o.parent.children.remove(o)
    self._release(o)

  def _release(self, o: RMObject) -> None:
    o.data["freed"] = True   # a running grid of a freed channel is preempted (gpfifo.py)
    for c in list(o.children): self._release(c)
    for vs, va in o.data.get("gpu_maps", []): vs.unmap(va)
    self.uvm.forget_memory(o)
    if (b := o.data.get("backing")) is not None:
      if o.data.get("vid"): self.gpus[o.data["gpu"]].vidmem_used -= o.data["size"]
      b.close()
    if o.kind != "client": self.clients[o.client].pop(o.handle, None)

  # ---- controls ----
  def _control(self, p: Any) -> None:
    objs = self.client(p.hClient)
    name = CTRL_BY_CMD.get(p.cmd)
    if (p.paramsSize and not p.params) or (not p.paramsSize and p.params): raise _fail("NV_ERR_INVALID_ARGUMENT", "params/paramsSize mismatch")
    if name is not None and p.paramsSize != self.abi.ctrl_size(name):
      raise _fail("NV_ERR_INVALID_ARGUMENT", f"{name}: paramsSize {p.paramsSize}, expected {self.abi.ctrl_size(name)}")
    if p.hObject not in objs: raise _fail("NV_ERR_OBJECT_NOT_FOUND", f"object {p.hObject:#x}")
    o = objs[p.hObject]
    if o.kind not in _CTRL_KIND.get(p.cmd >> 16, ()) or name is None or not hasattr(self, "_ctrl_" + name.lower()):
      raise _fail("NV_ERR_NOT_SUPPORTED", f"control {p.cmd:#x} on a {o.kind}")
    getattr(self, "_ctrl_" + name.lower())(o, self.ffi.cast(f"{CTRL[name][1]} *", p.params))

  def _set_str(self, arr: Any, s: str) -> None:
    b = s.encode()[: self.ffi.sizeof(arr) - 1]
    self.ffi.memmove(arr, b + b"\0", len(b) + 1)

  def _ctrl_nv0000_ctrl_cmd_system_get_build_version_v2(self, o, prm):
    for f in ("driverVersionBuffer", "versionBuffer"): self._set_str(getattr(prm, f), self.version)
    if hasattr(prm, "driverBranch"): self._set_str(prm.driverBranch, "r" + self.version.split(".")[0] + "_00")
    self._set_str(prm.titleBuffer, f"NVIDIA UNIX Open Kernel Module for x86_64  {self.version}  (hcqrt mock)")
    prm.changelistNumber = prm.officialChangelistNumber = 0

  def _ctrl_nv0000_ctrl_cmd_gpu_get_attached_ids(self, o, prm):
    for i in range(32): prm.gpuIds[i] = self.gpus[i].gpu_id if i < len(self.gpus) else F.VALUES["NV0000_CTRL_GPU_INVALID_ID"]
  def _ctrl_nv0000_ctrl_cmd_gpu_get_probed_ids(self, o, prm):
    for i in range(32):
      prm.gpuIds[i] = self.gpus[i].gpu_id if i < len(self.gpus) else F.VALUES["NV0000_CTRL_GPU_INVALID_ID"]
      prm.excludedGpuIds[i] = F.VALUES["NV0000_CTRL_GPU_INVALID_ID"]
  def _ctrl_nv0000_ctrl_cmd_system_get_p2p_caps_v2(self, o, prm):
    """What RM answers (OGKM@595.45.04 src/nvidia/src/kernel/rmapi/client_resource.c): gpuCount 0 or > 32 and an
    unknown gpuId -> NV_ERR_INVALID_ARGUMENT (:4261-4271, :383-390); the same id twice is a loopback query of one GPU
    (:4255, :4296); caps start empty and every status NOT_SUPPORTED (:364-378); then by connectivity
    (platform/p2p/p2p_caps.c p2pGetCapsStatus): NVLink -> NVLINK|READS|WRITES|ATOMICS, statuses NVLINK and ATOMICS OK
    (client_resource.c:453-471); PCIe through a switch (PCIE_PROPRIETARY, mailbox: never atomics, p2p_caps.c:417) ->
    READS|WRITES|PCI|PROP, statuses PCI and PROP OK, LOOPBACK for one GPU (:497-538); root ports on two I/O hubs ->
    READ/WRITE status IOH_TOPOLOGY_NOT_SUPPORTED and no caps (p2p_caps.c:488-493); READ/WRITE statuses last (:613-617).
    PCIe through BAR1 (PCIE_BAR1) -> READS|WRITES|PCI|PCI_BAR1 (no PROP), statuses PCI and PCI_BAR1 OK (:496-530).
    READS and WRITES are set each from its own status (:499-502): with reads disabled by regkey ("writes") -> WRITES|PCI|
    PROP, READ status DISABLED_BY_REGKEY, WRITE status OK.
    busPeerIds come from kbusGetPeerId, which answers the invalid peer until a P2P mapping is made; the mock makes
    none, so every entry is INVALID_PEER."""
    n = prm.gpuCount
    if n == 0 or n > MAX_ATTACHED_GPUS: raise _fail("NV_ERR_INVALID_ARGUMENT", f"gpuCount {n}")
    gpus = [self._gpu_by_id_or_fail(prm.gpuIds[i]) for i in range(n)]
    if n == 2 and gpus[0] is gpus[1]: n, gpus = 1, gpus[:1]
    caps, st = 0, [P2P_STATUS_NOT_SUPPORTED] * P2P_IDX_TABLE
    egm = hasattr(prm, "busEgmPeerIds")   # (550 and newer; the 535 struct ends at busPeerIds)
    for i in range(n * n):
      prm.busPeerIds[i] = P2P_INVALID_PEER
      if egm: prm.busEgmPeerIds[i] = P2P_INVALID_PEER
    kinds = {self.link(a.index, b.index) for a in gpus for b in gpus if a is not b}
    if "none" in kinds: rw = P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
    elif kinds == {"nvlink"}:
      rw, caps = P2P_STATUS_OK, P2P_NVLINK | P2P_ATOMICS | P2P_READS | P2P_WRITES
      st[P2P_IDX_NVLINK] = st[P2P_IDX_ATOMICS] = P2P_STATUS_OK
    elif kinds == {"bar1"}:
      rw, caps = P2P_STATUS_OK, P2P_READS | P2P_WRITES | P2P_PCI | P2P_PCI_BAR1
      st[P2P_IDX_PCI] = st[P2P_IDX_PCI_BAR1] = P2P_STATUS_OK
    else:
      rw, caps = P2P_STATUS_OK, P2P_READS | P2P_WRITES | P2P_PCI | P2P_PROP
      st[P2P_IDX_PCI] = st[P2P_IDX_PROP] = P2P_STATUS_OK
      if n == 1: caps |= P2P_LOOPBACK; st[P2P_IDX_LOOPBACK] = P2P_STATUS_OK
    st[P2P_IDX_READ] = st[P2P_IDX_WRITE] = rw
    if "writes" in kinds and "none" not in kinds: caps &= ~P2P_READS; st[P2P_IDX_READ] = P2P_STATUS_DISABLED_BY_REGKEY
    prm.p2pCaps, prm.p2pOptimalReadCEs, prm.p2pOptimalWriteCEs = caps, 0, 0
    for i, v in enumerate(st): prm.p2pCapsStatus[i] = v

  def _gpu_by_id_or_fail(self, gpu_id: int) -> MockGPU:
    if (g := self.gpu_by_id(gpu_id)) is None: raise _fail("NV_ERR_INVALID_ARGUMENT", f"gpuId {gpu_id:#x}")
    return g
  def _ctrl_nv0000_ctrl_cmd_gpu_get_id_info_v2(self, o, prm):
    g = self._gpu_by_id_or_fail(prm.gpuId)
    prm.gpuFlags, prm.deviceInstance, prm.subDeviceInstance, prm.sliStatus, prm.boardId, prm.gpuInstance, prm.numaId = 1, g.index, 0, 0, 0, 0, -1
  def _ctrl_nv0000_ctrl_cmd_gpu_get_uuid_from_gpu_id(self, o, prm):
    g = self._gpu_by_id_or_fail(prm.gpuId)
    self.ffi.memmove(prm.gpuUuid, g.uuid, 16); prm.uuidStrLen = 16

  def _ctrl_nv0080_ctrl_cmd_gpu_get_classlist(self, o, prm):
    cl = self.chip.classes
    if prm.classList:
      if prm.numClasses < len(cl): raise _fail("NV_ERR_INVALID_PARAM_STRUCT", f"classList holds {prm.numClasses}, need {len(cl)}")
      out = self.ffi.cast("NvU32 *", prm.classList)
      for i, c in enumerate(cl): out[i] = c
    prm.numClasses = len(cl)
  def _ctrl_nv0080_ctrl_cmd_gpu_get_classlist_v2(self, o, prm):
    cl = self.chip.classes
    if len(cl) > len(prm.classList): raise _fail("NV_ERR_INVALID_STATE", f"{len(cl)} classes do not fit the V2 list")
    prm.numClasses = len(cl)
    for i, c in enumerate(cl): prm.classList[i] = c

  def _gr_value(self, index: int) -> int:
    c, V = self.chip, F.VALUES
    table = {V["NV2080_CTRL_GR_INFO_INDEX_SM_VERSION"]: c.sm_version, V["NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_GPCS"]: c.gpcs,
      V["NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_TPC_PER_GPC"]: c.tpc_per_gpc, V["NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_SM_PER_TPC"]: c.sm_per_tpc,
      V["NV2080_CTRL_GR_INFO_INDEX_MAX_WARPS_PER_SM"]: c.max_warps_per_sm,
      V["NV2080_CTRL_GR_INFO_INDEX_SHADER_PIPE_COUNT"]: c.enabled_gpcs, V["NV2080_CTRL_GR_INFO_INDEX_SHADER_PIPE_SUB_COUNT"]: c.enabled_tpcs}
    if index >= V["NV2080_CTRL_GR_INFO_MAX_SIZE"]: raise _fail("NV_ERR_INVALID_ARGUMENT", f"GR info index {index}")
    return table.get(index, 0)
  def _ctrl_nv2080_ctrl_cmd_gr_get_info(self, o, prm):
    n = prm.grInfoListSize
    if n == 0 or n > F.VALUES["NV2080_CTRL_GR_INFO_MAX_SIZE"] or not prm.grInfoList: raise _fail("NV_ERR_INVALID_ARGUMENT", f"grInfoListSize {n}")
    lst = self.ffi.cast("NV2080_CTRL_GR_INFO *", prm.grInfoList)
    for i in range(n): lst[i].data = self._gr_value(lst[i].index)

  def _ctrl_nv2080_ctrl_cmd_gr_get_sm_to_gpc_tpc_mappings(self, o, prm):
    # one entry per enabled SM (the count a product enables, not the die's LITTER maximum)
    c = self.chip
    if c.sm_count > len(prm.smId): raise _fail("NV_ERR_INVALID_STATE", f"{c.sm_count} SMs do not fit the mapping table")
    per_gpc = -(-c.enabled_tpcs // c.enabled_gpcs)
    for i in range(c.sm_count):
      tpc = i // c.sm_per_tpc
      prm.smId[i].gpcId, prm.smId[i].tpcId = tpc // per_gpc, tpc % per_gpc
    prm.smCount = c.sm_count

  def _ctrl_nv2080_ctrl_cmd_fb_get_info_v2(self, o, prm):
    n, V, kb = prm.fbInfoListSize, F.VALUES, self.chip.fb_size >> 10
    if n > len(prm.fbInfoList): raise _fail("NV_ERR_INVALID_ARGUMENT", f"fbInfoListSize {n}")
    table = {V["NV2080_CTRL_FB_INFO_INDEX_RAM_SIZE"]: kb, V["NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE"]: kb,
      V["NV2080_CTRL_FB_INFO_INDEX_HEAP_SIZE"]: kb, V["NV2080_CTRL_FB_INFO_INDEX_USABLE_RAM_SIZE"]: kb,
      V["NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE"]: (self.chip.fb_size - self.gpu_of(o).vidmem_used) >> 10,
      V["NV2080_CTRL_FB_INFO_INDEX_BUS_WIDTH"]: self.chip.bus_width, V["NV2080_CTRL_FB_INFO_INDEX_L2CACHE_SIZE"]: self.chip.l2_size}
    for i in range(n): prm.fbInfoList[i].data = table.get(prm.fbInfoList[i].index, 0)

  def _ctrl_nv2080_ctrl_cmd_fb_flush_gpu_cache(self, o, prm):
    if prm.addressArraySize > 500: raise _fail("NV_ERR_INVALID_ARGUMENT", "addressArraySize > 500")
    wb, inv = (prm.flags >> 2) & 1, (prm.flags >> 3) & 1   # FLAGS_WRITE_BACK (2:2), FLAGS_INVALIDATE (3:3)
    if wb or inv:
      for vs in self.vaspaces(self.gpu_of(o).index): vs.flush_l2(invalidate=bool(inv))

  def _ctrl_nv2080_ctrl_cmd_gpu_get_gid_info(self, o, prm):
    fmt = F.field_get("NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT", prm.flags)
    uuid = self.gpu_of(o).uuid
    if fmt == F.VALUES["NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY"]: data = uuid
    elif fmt == F.VALUES["NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_ASCII"]:
      u = uuid.hex(); data = f"GPU-{u[:8]}-{u[8:12]}-{u[12:16]}-{u[16:20]}-{u[20:]}".encode() + b"\0"
    else: raise _fail("NV_ERR_INVALID_ARGUMENT", f"GID format {fmt}")
    self.ffi.memmove(prm.data, data, len(data)); prm.length = len(data)

  def _ctrl_nv2080_ctrl_cmd_gpu_get_name_string(self, o, prm):
    kind, V = prm.gpuNameStringFlags, F.VALUES
    if kind == V["NV2080_CTRL_GPU_GET_NAME_STRING_FLAGS_TYPE_ASCII"]: self._set_str(prm.gpuNameString.ascii, self.chip.name)
    elif kind == V["NV2080_CTRL_GPU_GET_NAME_STRING_FLAGS_TYPE_UNICODE"]:
      u = self.chip.name[:63] + "\0"
      for i, ch in enumerate(u): prm.gpuNameString.unicode[i] = ord(ch)
    else: raise _fail("NV_ERR_INVALID_ARGUMENT", f"name string type {kind}")

  def _ctrl_nv2080_ctrl_cmd_mc_get_arch_info(self, o, prm):
    prm.architecture, prm.implementation, prm.revision, prm.subRevision = self.chip.mc_architecture, self.chip.mc_implementation, 0xA1, 0
  def _ctrl_nv2080_ctrl_cmd_perf_boost(self, o, prm): pass

  def _check_schedulable(self, ch: RMObject) -> None:
    # kernel_channel.c kchannelIsSchedulable: a GR channel in an externally owned VA space runs only once UVM has
    # bound its context (UVM_REGISTER_CHANNEL after the engine object); the schedule controls fail NV_ERR_INVALID_STATE
    vso = ch.data["vaspace"]
    if vso.data.get("external") and ch.data["engine"] == ENGINE_GR0 and not ch.data["uvm_bound"]:
      raise _fail("NV_ERR_INVALID_STATE", f"channel {ch.handle:#x} is in an externally owned VA space and not registered with UVM "
                  "(UVM_REGISTER_CHANNEL after its engine object)")
  def _ctrl_nva06c_ctrl_cmd_gpfifo_schedule(self, o, prm):
    chans = [c for c in o.children if c.kind == "channel"]
    if prm.bEnable and not chans: raise _fail("NV_ERR_INVALID_STATE", "channel group has no channels")
    if prm.bEnable:
      for c in chans: self._check_schedulable(c)
    o.data["enabled"] = bool(prm.bEnable)
    for c in chans: c.data["enabled"] = bool(prm.bEnable)
  def _ctrl_nva06f_ctrl_cmd_gpfifo_schedule(self, o, prm):
    if prm.bEnable: self._check_schedulable(o)
    o.data["enabled"] = bool(prm.bEnable)
  def _ctrl_nva06f_ctrl_cmd_bind(self, o, prm):
    if prm.engineType == ENGINE_NULL or prm.engineType > ENGINE_COPY9: raise _fail("NV_ERR_INVALID_ARGUMENT", f"BIND engineType {prm.engineType:#x}")
    want = runlist_of(prm.engineType)
    # kernel_fifo_gm107.c kfifoRunlistSetId: a channel whose runlist is already set (every channel of a TSG on chips with
    # per-runlist channel RAM) cannot move to another engine's runlist
    if o.data["runlist"] is not None and want != o.data["runlist"]:
      raise _fail("NV_ERR_INVALID_STATE", f"BIND to engine {prm.engineType:#x} (runlist {want}): the channel is on runlist {o.data['runlist']} (its channel group's)")
    o.data.update(bound=True, engine=prm.engineType, runlist=want)
  def _ctrl_nvc36f_ctrl_cmd_gpfifo_get_work_submit_token(self, o, prm):
    prm.workSubmitToken = o.data["token"]
    n = o.data.get("notifier")   # kchannelNotifyWorkSubmitToken: RM also writes it into notifier entry 1 (TYPE_WORK_SUBMIT_TOKEN)
    if n is not None and n.data["size"] >= 2 * NOTIFIER_SIZE:
      ctypes.memmove(n.data["host"] + NOTIFIER_SIZE, struct.pack("<QIHH", time.time_ns(), o.data["token"], 0, 0), NOTIFIER_SIZE)

  # ---- lookups for the GPFIFO engine / tests ----
  def vaspaces(self, gpu: int | None = None) -> list[GPUVASpace]:
    """The VA spaces of every GPU (or of GPU `gpu`)."""
    return [o.data["va"] for objs in self.clients.values() for o in objs.values() if o.kind == "vaspace" and (gpu is None or self.gpu_of(o).index == gpu)]

  def channel_error(self, ch: RMObject, msg: str, engine: int = NV2080_ENGINE_TYPE_GR0) -> None:
    """A channel hit an RC error (robust channel recovery): RM fills the error notifier (hObjectError) of every channel
    of the faulting channel's TSG (krcErrorSetNotifier with TSG scope when subcontexts are supported, OGKM@580.142
    src/nvidia/src/kernel/gpu/rc/kernel_rc_notification.c:234-340) with NvNotification[0] = {time, info32 = the RC
    error code, info16 = the NV2080 engine type of the faulting engine, status 0xFFFF} (notifyFillNvNotification,
    src/nvidia/src/kernel/gpu/mem_mgr/method_notification.c:154-185; timestamp halves swapped, :183-184)."""
    self.faults.append(msg)
    code = ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT if "page fault" in msg else ROBUST_CHANNEL_GR_EXCEPTION
    t = time.time_ns()
    group = ch.parent if ch.parent is not None and ch.parent.kind == "group" else None
    for c in ([c for c in group.children if c.kind == "channel"] if group is not None else [ch]):
      n = c.data.get("notifier")
      if n is None or n.data.get("backing") is None: continue
      ctypes.memmove(n.data["host"], struct.pack("<IIIHH", t >> 32, t & 0xFFFFFFFF, code, engine, 0xFFFF), NOTIFIER_SIZE)

  def channels(self, gpu: int | None = None) -> list[RMObject]:
    """The channels of every GPU (or of GPU `gpu`)."""
    return [o for objs in self.clients.values() for o in objs.values() if o.kind == "channel" and (gpu is None or self.gpu_of(o).index == gpu)]
  def channel_by_token(self, token: int, gpu: int | None = None) -> RMObject:
    for c in self.channels(gpu):
      if c.data["token"] == token: return c
    raise KeyError(f"no channel with work-submit token {token}{'' if gpu is None else f' on GPU {gpu}'}")
