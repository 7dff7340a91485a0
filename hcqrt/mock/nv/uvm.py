"""The UVM side of the NV mock: /dev/nvidia-uvm.

UVM commands are plain integers; the kernel copies sizeof(params) in and out, returns 0 and puts the
status in params.rmStatus. Behaviour mirrored from nvidia-uvm (uvm.c, uvm_api.h): UVM_INITIALIZE must
come first on an fd (else NV_ERR_ILLEGAL_ACTION), MM_INITIALIZE is issued on a second fd naming the
first, GPUs and their RM vaspaces are registered by UUID, external ranges must be page aligned and
must not overlap (NV_ERR_UVM_ADDRESS_IN_USE), and MAP_EXTERNAL_ALLOCATION maps an RM memory object into
the registered vaspace at the range's address (the GPU VA equals the CPU VA the client chose).
"""
from __future__ import annotations
import errno
from dataclasses import dataclass, field
from typing import Any
from ioctl_defs.nv.ioctl import UVM_IOCTLS, UVM_BY_CMD
from ioctl_defs.nv.status import NV_STATUS
from hcqrt.mock.nv.vmem import PAGE
from hcqrt.mock.nv.rm import RMError

S = NV_STATUS
UVM_INIT_FLAGS_MASK = 0x3   # UVM_INIT_FLAGS_DISABLE_HMM (1) | UVM_INIT_FLAGS_MULTI_PROCESS_SHARING_MODE (2); from uvm_ioctl.h, not in the JSON

@dataclass
class UVMFile:
  initialized: bool = False
  flags: int = 0
  mm_of: int | None = None                          # MM_INITIALIZE: the uvm fd this one serves
  gpus: dict[bytes, dict] = field(default_factory=dict)       # uuid -> {'vaspace': RMObject | None}
  ranges: dict[int, int] = field(default_factory=dict)        # external range base -> length
  maps: dict[int, tuple[Any, int, Any]] = field(default_factory=dict)  # base -> (GPUVASpace, length, memory RMObject)
  channels: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)

class UVMError(Exception):
  def __init__(self, status: str, why: str = ""): super().__init__(f"{status}: {why}"); self.status = S[status]

class UVM:
  def __init__(self, rm: Any): self.rm = rm

  def uuid(self, u: Any) -> bytes: return bytes(self.rm.ffi.buffer(u.uuid, 16))

  def ioctl(self, fd: int, st: Any, request: int, argp: int) -> int:
    if st.uvm is None: st.uvm = UVMFile()
    if request not in UVM_BY_CMD: raise OSError(errno.EINVAL, f"unknown UVM command {request:#x}")
    name = UVM_BY_CMD[request]
    struct = UVM_IOCTLS[name][1]
    if struct is None:
      if name == "UVM_DEINITIALIZE": st.uvm.initialized = False
      return 0
    if not argp: raise OSError(errno.EFAULT, f"{name}: NULL params")
    p = self.rm.ffi.cast(f"{struct} *", argp)
    f: UVMFile = st.uvm
    try:
      if name == "UVM_INITIALIZE": self.initialize(f, p)
      elif name == "UVM_MM_INITIALIZE": self.mm_initialize(fd, f, p)
      elif not f.initialized: raise UVMError("NV_ERR_ILLEGAL_ACTION", "UVM_INITIALIZE must be the first ioctl on this fd")
      else: getattr(self, name[4:].lower())(f, p)
      p.rmStatus = S["NV_OK"]
    except UVMError as e: p.rmStatus = e.status
    except RMError as e: p.rmStatus = e.status
    return 0

  def mmap(self, fd, st, length, prot, flags, offset, addr) -> int:
    raise OSError(errno.EINVAL, "mmap of /dev/nvidia-uvm is not supported by the mock (use external ranges)")

  def close(self, fd: int, st: Any) -> None:
    f: UVMFile | None = st.uvm
    if f is None: return
    for base in list(f.maps): self._unmap(f, base)

  def forget_memory(self, mem: Any) -> None:
    """An RM memory object is being freed: drop UVM mappings of it (RM revokes them)."""
    for st in self.rm.files.values():
      if st.uvm is None: continue
      for base, (vs, ln, m) in list(st.uvm.maps.items()):
        if m is mem: self._unmap(st.uvm, base)

  # ---- commands ----
  def initialize(self, f: UVMFile, p: Any) -> None:
    if p.flags & ~UVM_INIT_FLAGS_MASK: raise UVMError("NV_ERR_INVALID_ARGUMENT", f"flags {p.flags:#x}")
    if f.initialized and p.flags != f.flags: raise UVMError("NV_ERR_INVALID_ARGUMENT", "re-initialized with different flags")
    if f.mm_of is not None: raise UVMError("NV_ERR_INVALID_STATE", "fd was used for MM_INITIALIZE")
    f.initialized, f.flags = True, p.flags

  def mm_initialize(self, fd: int, f: UVMFile, p: Any) -> None:
    other = self.rm.files.get(p.uvmFd)
    if other is None or other.kind != "uvm" or other.uvm is None or not other.uvm.initialized or p.uvmFd == fd:
      raise UVMError("NV_ERR_INVALID_ARGUMENT", f"uvmFd {p.uvmFd} is not an initialized /dev/nvidia-uvm fd")
    if f.initialized or f.mm_of is not None: raise UVMError("NV_ERR_INVALID_STATE", "fd already initialized")
    f.mm_of = p.uvmFd

  def register_gpu(self, f: UVMFile, p: Any) -> None:
    u = self.uuid(p.gpu_uuid)
    if u != self.rm.uuid: raise UVMError("NV_ERR_GPU_UUID_NOT_FOUND", u.hex())
    if u in f.gpus: raise UVMError("NV_ERR_IN_USE", "GPU already registered")
    if p.rmCtrlFd != -1: self.rm.client(p.hClient)   # with an RM fd, the client must exist
    f.gpus[u] = {"vaspace": None}
    p.numaEnabled, p.numaNodeId = 0, -1

  def unregister_gpu(self, f: UVMFile, p: Any) -> None:
    u = self.uuid(p.gpu_uuid)
    if u not in f.gpus: raise UVMError("NV_ERR_INVALID_DEVICE", "GPU not registered")
    for base, (vs, _, _) in list(f.maps.items()):
      if f.gpus[u]["vaspace"] is not None and vs is f.gpus[u]["vaspace"].data["va"]: self._unmap(f, base)
    del f.gpus[u]

  def _gpu(self, f: UVMFile, u: Any) -> dict:
    key = self.uuid(u)
    if key not in f.gpus: raise UVMError("NV_ERR_INVALID_DEVICE", f"GPU {key.hex()} is not registered with UVM")
    return f.gpus[key]

  def register_gpu_vaspace(self, f: UVMFile, p: Any) -> None:
    g = self._gpu(f, p.gpuUuid)
    if g["vaspace"] is not None: raise UVMError("NV_ERR_INVALID_DEVICE", "GPU already has a registered vaspace")
    ctl = self.rm.files.get(p.rmCtrlFd)
    if ctl is None or ctl.kind != "ctl": raise UVMError("NV_ERR_INVALID_ARGUMENT", f"rmCtrlFd {p.rmCtrlFd} is not /dev/nvidiactl")
    g["vaspace"] = self.rm.obj(p.hClient, p.hVaSpace, ("vaspace",), missing="NV_ERR_OBJECT_NOT_FOUND")

  def unregister_gpu_vaspace(self, f: UVMFile, p: Any) -> None:
    g = self._gpu(f, p.gpuUuid)
    if g["vaspace"] is None: raise UVMError("NV_ERR_INVALID_DEVICE", "no vaspace registered")
    g["vaspace"] = None

  def register_channel(self, f: UVMFile, p: Any) -> None:
    self._gpu(f, p.gpuUuid)
    ch = self.rm.obj(p.hClient, p.hChannel, ("channel",), missing="NV_ERR_OBJECT_NOT_FOUND")
    if p.base % PAGE or p.length == 0: raise UVMError("NV_ERR_INVALID_ADDRESS", "channel range")
    f.channels[(p.hClient, p.hChannel)] = (p.base, p.length)
    ch.data["uvm_registered"] = True

  def unregister_channel(self, f: UVMFile, p: Any) -> None:
    if f.channels.pop((p.hClient, p.hChannel), None) is None: raise UVMError("NV_ERR_INVALID_CHANNEL", "channel not registered")

  def create_external_range(self, f: UVMFile, p: Any) -> None:
    base, ln = p.base, p.length
    if base % PAGE or ln % PAGE or ln == 0 or base + ln > 1 << 57: raise UVMError("NV_ERR_INVALID_ADDRESS", f"{base:#x}+{ln:#x}")
    for b, l in f.ranges.items():
      if b < base + ln and base < b + l: raise UVMError("NV_ERR_UVM_ADDRESS_IN_USE", f"{base:#x}+{ln:#x} overlaps {b:#x}+{l:#x}")
    f.ranges[base] = ln

  def _range_of(self, f: UVMFile, base: int, ln: int) -> int:
    for b, l in f.ranges.items():
      if b <= base and base + ln <= b + l: return b
    raise UVMError("NV_ERR_INVALID_ADDRESS", f"{base:#x}+{ln:#x} is not inside an external range")

  def map_external_allocation(self, f: UVMFile, p: Any) -> None:
    base, ln, off = p.base, p.length, p.offset
    if base % PAGE or ln % PAGE or off % PAGE or ln == 0: raise UVMError("NV_ERR_INVALID_ADDRESS", f"{base:#x}+{ln:#x} offset {off:#x}")
    self._range_of(f, base, ln)
    n = p.gpuAttributesCount
    if n == 0 or n > len(p.perGpuAttributes): raise UVMError("NV_ERR_INVALID_ARGUMENT", f"gpuAttributesCount {n}")
    ctl = self.rm.files.get(p.rmCtrlFd)
    if ctl is None or ctl.kind != "ctl": raise UVMError("NV_ERR_INVALID_ARGUMENT", f"rmCtrlFd {p.rmCtrlFd} is not /dev/nvidiactl")
    mem = self.rm.obj(p.hClient, p.hMemory, ("sysmem", "vidmem", "osdesc"), missing="NV_ERR_OBJECT_NOT_FOUND")
    if off + ln > mem.data["size"]: raise UVMError("NV_ERR_INVALID_LIMIT", f"offset {off:#x}+{ln:#x} beyond the {mem.data['size']:#x}-byte allocation")
    for i in range(n):
      g = self._gpu(f, p.perGpuAttributes[i].gpuUuid)
      if g["vaspace"] is None: raise UVMError("NV_ERR_INVALID_DEVICE", "GPU has no registered vaspace")
      vs = g["vaspace"].data["va"]
      if base in f.maps: self._unmap(f, base)   # remapping replaces the old mapping
      try: vs.map(base, ln, mem.data["host"] + off)
      except ValueError as e: raise UVMError("NV_ERR_UVM_ADDRESS_IN_USE", str(e))
      f.maps[base] = (vs, ln, mem)

  def _unmap(self, f: UVMFile, base: int) -> None:
    vs, ln, mem = f.maps.pop(base)
    try: vs.unmap(base)
    except KeyError: pass

  def unmap_external(self, f: UVMFile, p: Any) -> None:
    self._gpu(f, p.gpuUuid)
    if p.base not in f.maps: raise UVMError("NV_ERR_INVALID_ADDRESS", f"nothing mapped at {p.base:#x}")
    self._unmap(f, p.base)

  def free(self, f: UVMFile, p: Any) -> None:
    if p.base not in f.ranges: raise UVMError("NV_ERR_INVALID_ADDRESS", f"no range at {p.base:#x}")
    ln = f.ranges.pop(p.base)
    for b in [b for b in f.maps if p.base <= b < p.base + ln]: self._unmap(f, b)

  def enable_peer_access(self, f: UVMFile, p: Any) -> None:
    self._gpu(f, p.gpuUuidA); self._gpu(f, p.gpuUuidB)
    raise UVMError("NV_ERR_INVALID_DEVICE", "peer access needs two different GPUs")
