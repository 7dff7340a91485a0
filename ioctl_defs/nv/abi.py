"""The NVIDIA ABI of one driver version: struct layouts (cffi), request numbers and control sizes.

Structs and therefore request sizes differ between driver branches (535, 570, 580), so everything
size-dependent is computed from the layouts of the branch the running driver reports.

  >>> abi = abi_for_version("580.95.05")
  >>> abi.series, hex(abi.escape("NV_ESC_RM_MAP_MEMORY_DMA")), abi.ctrl_size("NVA06C_CTRL_CMD_GPFIFO_SCHEDULE")
  ('580', '0xc0404657', 3)
  >>> hex(abi_for_version("535.288.01").escape("NV_ESC_RM_MAP_MEMORY_DMA"))
  '0xc0384657'
"""
from __future__ import annotations
import re
from functools import cache
from typing import Any
import cffi
from ioctl_defs.nv.structs import cdef_for, SERIES
from ioctl_defs.nv.ioctl import ESCAPES, ESCAPE_BY_NR, NV_IOCTL_MAGIC, NV_ESC_RM_ALLOC_ALT_STRUCT, UVM_IOCTLS, UVM_BY_CMD, iowr, ioc_decode
from ioctl_defs.nv.ctrl import CTRL

class UnsupportedDriverVersion(ValueError):
  """The running NVIDIA driver's version has no known ABI here."""

@cache
def _ffi(series: str) -> cffi.FFI:
  ffi = cffi.FFI()
  ffi.cdef(cdef_for(series))
  return ffi

class NVABI:
  """Layouts and numbers for one driver version. `ffi` holds the structs of its branch."""
  def __init__(self, version: str, series: str):
    self.version, self.series, self.ffi = version, series, _ffi(series)

  def __repr__(self) -> str: return f"NVABI({self.version!r}, series {self.series})"

  def sizeof(self, struct: str) -> int: return self.ffi.sizeof(struct)

  def new(self, struct: str, **fields: Any) -> Any:
    """A zeroed `struct *` (owned by Python) with the given top-level fields set."""
    p = self.ffi.new(f"{struct} *")
    for k, v in fields.items(): setattr(p, k, v)
    return p

  def escape(self, name: str, count: int = 1, alt: bool = False) -> int:
    """The _IOWR request of an RM escape; `count` entries for array escapes, `alt` for RM_ALLOC with NVOS64."""
    nr, struct, _ = ESCAPES[name]
    if alt:
      if name != "NV_ESC_RM_ALLOC": raise ValueError(f"{name} has no alternative parameter struct")
      struct = NV_ESC_RM_ALLOC_ALT_STRUCT
    return iowr(NV_IOCTL_MAGIC, nr, self.sizeof(struct) * count)

  def ctrl(self, name: str) -> tuple[int, str, int]:
    """(command id, params struct, exact paramsSize) of a control command."""
    cmd, struct = CTRL[name]
    return cmd, struct, self.sizeof(struct)

  def ctrl_size(self, name: str) -> int: return self.ctrl(name)[2]

  def uvm(self, name: str) -> tuple[int, str | None, int]:
    """(command, params struct, params size) of a UVM ioctl."""
    cmd, struct = UVM_IOCTLS[name]
    return cmd, struct, self.sizeof(struct) if struct else 0

  def describe_request(self, request: int) -> str:
    """Human-readable name of an nvidia or UVM request number (for error messages)."""
    if request in UVM_BY_CMD: return UVM_BY_CMD[request]
    _d, typ, nr, size = ioc_decode(request)
    if typ == NV_IOCTL_MAGIC and nr in ESCAPE_BY_NR: return f"{ESCAPE_BY_NR[nr]} (size {size})"
    return f"request {request:#x}"

_SERIES_OF_MAJOR = {int(s): s for s in SERIES}

def parse_version(version: str) -> tuple[int, ...]:
  """'580.95.05' -> (580, 95, 5); raises UnsupportedDriverVersion on text that is not a driver version."""
  m = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.(\d+))?\s*", version)
  if not m: raise UnsupportedDriverVersion(f"not an NVIDIA driver version string: {version!r}")
  return tuple(int(x) for x in m.groups() if x is not None)

def abi_for_version(version: str) -> NVABI:
  """The ABI of an NVIDIA driver version string as the kernel module reports it (e.g. '580.95.05')."""
  major = parse_version(version)[0]
  if major not in _SERIES_OF_MAJOR:
    raise UnsupportedDriverVersion(f"NVIDIA driver {version.strip()} is not supported: struct layouts are known for the "
                                   f"{', '.join(SERIES)} branches only (install a {SERIES[-1]}-series driver)")
  return NVABI(version.strip(), _SERIES_OF_MAJOR[major])
