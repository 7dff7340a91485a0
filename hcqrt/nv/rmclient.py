"""A thin RM + UVM client: allocs, controls, frees and UVM calls through hcqrt.syscalls, with NV_STATUS
decoding into NVError messages that name the call, the class/control and the status.

  >>> from hcqrt.mock.nv import MockNV
  >>> import os; from ioctl_defs.nv import abi_for_version
  >>> with syscalls.installed(drv := MockNV()):
  ...   c = RMClient(syscalls.open("/dev/nvidiactl", os.O_RDWR), abi_for_version(drv.version))
  ...   try: c.alloc(c.root, CLASSES["NV01_DEVICE_0"], "NV0080_ALLOC_PARAMETERS", deviceId=7)
  ...   except NVError as e: print(e.status_name)
  NV_ERR_INVALID_CLASS
"""
from __future__ import annotations
from typing import Any
from hcqrt import syscalls
from ioctl_defs.nv.abi import NVABI
from ioctl_defs.nv.classes import CLASSES, class_name
from ioctl_defs.nv.status import status_name

class NVError(RuntimeError):
  """An RM or UVM call failed; `status` is the NV_STATUS value (0 when the ioctl itself failed)."""
  def __init__(self, msg: str, status: int = 0):
    super().__init__(msg); self.status = status
  @property
  def status_name(self) -> str: return status_name(self.status)

def _set(abi: NVABI, p: Any, fields: dict[str, Any]) -> None:
  for k, v in fields.items():
    if isinstance(v, bytes): abi.ffi.memmove(getattr(p, k), v, len(v))
    else: setattr(p, k, v)

class RMClient:
  """One RM client on an open /dev/nvidiactl fd (`root` is its handle)."""
  def __init__(self, ctl: int, abi: NVABI):
    self.ctl, self.abi, self.ffi = ctl, abi, abi.ffi
    self.root = 0
    self.root = self.alloc(0, CLASSES["NV01_ROOT_CLIENT"])[0]

  def ptr(self, cdata: Any) -> int: return int(self.ffi.cast("uintptr_t", cdata))

  def alloc(self, parent: int, cls: int, struct: str | None = None, handle: int = 0, **fields: Any) -> tuple[int, Any]:
    """RM_ALLOC of class `cls` under `parent` with `struct` params; returns (new handle, params)."""
    prm = self.abi.new(struct) if struct else None
    if prm is not None: _set(self.abi, prm, fields)
    p = self.abi.new("NVOS21_PARAMETERS", hRoot=self.root, hObjectParent=parent or self.root, hObjectNew=handle, hClass=cls,
                     pAllocParms=self.ptr(prm) if prm is not None else 0, paramsSize=self.abi.sizeof(struct) if struct else 0)
    syscalls.ioctl(self.ctl, self.abi.escape("NV_ESC_RM_ALLOC"), p)
    if p.status != 0:
      raise NVError(f"RM_ALLOC of {class_name(cls)} under handle {parent:#x} failed: {status_name(p.status)}", p.status)
    return p.hObjectNew, prm

  def control(self, obj: int, name: str, **fields: Any) -> Any:
    """RM_CONTROL `name` (a key of ioctl_defs.nv.CTRL) on object `obj`; returns the params struct."""
    cmd, struct, size = self.abi.ctrl(name)
    prm = self.abi.new(struct)
    _set(self.abi, prm, fields)
    p = self.abi.new("NVOS54_PARAMETERS", hClient=self.root, hObject=obj, cmd=cmd, params=self.ptr(prm), paramsSize=size)
    syscalls.ioctl(self.ctl, self.abi.escape("NV_ESC_RM_CONTROL"), p)
    if p.status != 0: raise NVError(f"RM_CONTROL {name} ({cmd:#x}) on handle {obj:#x} failed: {status_name(p.status)}", p.status)
    return prm

  def free(self, parent: int, h: int) -> None:
    p = self.abi.new("NVOS00_PARAMETERS", hRoot=self.root, hObjectParent=parent, hObjectOld=h)
    syscalls.ioctl(self.ctl, self.abi.escape("NV_ESC_RM_FREE"), p)
    if p.status != 0: raise NVError(f"RM_FREE of handle {h:#x} failed: {status_name(p.status)}", p.status)

  def map_to_cpu(self, dev_fd_factory: Any, hdevice: int, hmem: int, size: int, addr: int, system: bool) -> int:
    """RM_MAP_MEMORY of `hmem` into a fresh fd (nvidiactl for system memory, nvidiaN otherwise), then mmap it
    at `addr` (MAP_FIXED over our reservation). Returns the CPU address."""
    fd = syscalls.open("/dev/nvidiactl", 2) if system else dev_fd_factory()
    try:
      w = self.abi.new("nv_ioctl_nvos33_parameters_with_fd", fd=fd)
      w.params.hClient, w.params.hDevice, w.params.hMemory, w.params.length = self.root, hdevice, hmem, size
      syscalls.ioctl(self.ctl, self.abi.escape("NV_ESC_RM_MAP_MEMORY"), w)
      if w.params.status != 0: raise NVError(f"RM_MAP_MEMORY of handle {hmem:#x} ({size:#x} bytes) failed: {status_name(w.params.status)}", w.params.status)
      return syscalls.mmap(fd, size, syscalls.PROT_READ | syscalls.PROT_WRITE, syscalls.MAP_SHARED | (syscalls.MAP_FIXED if addr else 0), 0, addr or None)
    finally: syscalls.close(fd)

  def uvm(self, fd: int, name: str, accept: tuple[str, ...] = (), **fields: Any) -> Any:
    """A UVM ioctl; raises NVError naming the command and its rmStatus unless it is NV_OK or named in `accept`
    (e.g. NV_WARN_NOTHING_TO_DO from UVM_MM_INITIALIZE when UVM needs no mm)."""
    cmd, struct, _ = self.abi.uvm(name)
    p = self.abi.new(struct)
    _set(self.abi, p, fields)
    syscalls.ioctl(fd, cmd, p)
    if p.rmStatus != 0 and status_name(p.rmStatus) not in accept: raise NVError(f"{name} failed: {status_name(p.rmStatus)}", p.rmStatus)
    return p
