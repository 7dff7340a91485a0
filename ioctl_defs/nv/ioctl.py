"""Request numbers of the NVIDIA device files.

/dev/nvidiactl and /dev/nvidiaN take `_IOWR('F', nr, <param struct>)`: the kernel reads only the nr
and the size fields, so the size must be the exact sizeof of the struct for that driver branch (the
request numbers are therefore computed per branch in abi.NVABI). /dev/nvidia-uvm takes plain integer
commands (not _IOC-encoded).

  >>> hex(iowr(ord('F'), 0x2B, 32))
  '0xc020462b'
  >>> ioc_decode(0xc020462b)
  (3, 70, 43, 32)
"""
from __future__ import annotations

# Linux asm-generic/ioctl.h encoding (x86-64): nr 8 bits, type 8 bits, size 14 bits, dir 2 bits.
IOC_NRSHIFT, IOC_TYPESHIFT, IOC_SIZESHIFT, IOC_DIRSHIFT = 0, 8, 16, 30
IOC_NONE, IOC_WRITE, IOC_READ = 0, 1, 2
IOC_SIZEMASK = (1 << 14) - 1

def ioc(direction: int, typ: int, nr: int, size: int) -> int:
  """Encode an ioctl request; raises if the size does not fit the 14-bit size field."""
  if not 0 <= size <= IOC_SIZEMASK: raise ValueError(f"ioctl size {size} does not fit the 14-bit _IOC size field")
  return (direction << IOC_DIRSHIFT) | (size << IOC_SIZESHIFT) | (typ << IOC_TYPESHIFT) | (nr << IOC_NRSHIFT)

def iowr(typ: int, nr: int, size: int) -> int: return ioc(IOC_READ | IOC_WRITE, typ, nr, size)

def ioc_decode(request: int) -> tuple[int, int, int, int]:
  """(direction, type, nr, size) of an _IOC-encoded request."""
  return (request >> IOC_DIRSHIFT) & 3, (request >> IOC_TYPESHIFT) & 0xFF, request & 0xFF, (request >> IOC_SIZESHIFT) & IOC_SIZEMASK

NV_IOCTL_MAGIC = ord('F')
NV_IOCTL_BASE = 200
NV_ABSOLUTE_MAX_IOCTL_SIZE = 16384

# escape name -> (nr, param struct, fd kind). fd kind: 'ctl' = only on /dev/nvidiactl, 'device' = only on
# /dev/nvidiaN, 'any' = either. Array-argument escapes (CARD_INFO, ATTACH_GPUS_TO_FD) name their element type.
ESCAPES: dict[str, tuple[int, str, str]] = {
  "NV_ESC_RM_ALLOC_MEMORY":     (0x27, "nv_ioctl_nvos02_parameters_with_fd", "device"),
  "NV_ESC_RM_FREE":             (0x29, "NVOS00_PARAMETERS", "ctl"),
  "NV_ESC_RM_CONTROL":          (0x2A, "NVOS54_PARAMETERS", "ctl"),
  "NV_ESC_RM_ALLOC":            (0x2B, "NVOS21_PARAMETERS", "ctl"),   # NVOS64_PARAMETERS is accepted too
  "NV_ESC_RM_MAP_MEMORY":       (0x4E, "nv_ioctl_nvos33_parameters_with_fd", "ctl"),
  "NV_ESC_RM_UNMAP_MEMORY":     (0x4F, "NVOS34_PARAMETERS", "ctl"),
  "NV_ESC_RM_MAP_MEMORY_DMA":   (0x57, "NVOS46_PARAMETERS", "ctl"),
  "NV_ESC_RM_UNMAP_MEMORY_DMA": (0x58, "NVOS47_PARAMETERS", "ctl"),
  "NV_ESC_CARD_INFO":           (200, "nv_ioctl_card_info_t", "ctl"),
  "NV_ESC_REGISTER_FD":         (201, "nv_ioctl_register_fd_t", "device"),
  "NV_ESC_ALLOC_OS_EVENT":      (206, "nv_ioctl_alloc_os_event_t", "any"),
  "NV_ESC_CHECK_VERSION_STR":   (210, "nv_ioctl_rm_api_version_t", "ctl"),
  "NV_ESC_ATTACH_GPUS_TO_FD":   (212, "NvU32", "ctl"),
}
NV_ESC_RM_ALLOC_ALT_STRUCT = "NVOS64_PARAMETERS"
ESCAPE_BY_NR = {nr: name for name, (nr, _, _) in ESCAPES.items()}

# nv_ioctl_rm_api_version_t.cmd / .reply (nv-ioctl.h)
NV_RM_API_VERSION_CMD_STRICT, NV_RM_API_VERSION_CMD_RELAXED, NV_RM_API_VERSION_CMD_QUERY = 0, ord('1'), ord('2')
NV_RM_API_VERSION_REPLY_UNRECOGNIZED, NV_RM_API_VERSION_REPLY_RECOGNIZED = 0, 1
NV_RM_API_VERSION_STRING_LENGTH = 64

# UVM command -> params struct (uvm_ioctl.h / uvm_linux_ioctl.h); None = no params.
UVM_IOCTLS: dict[str, tuple[int, str | None]] = {
  "UVM_INITIALIZE":             (0x30000001, "UVM_INITIALIZE_PARAMS"),
  "UVM_DEINITIALIZE":           (0x30000002, None),
  "UVM_REGISTER_GPU_VASPACE":   (25, "UVM_REGISTER_GPU_VASPACE_PARAMS"),
  "UVM_UNREGISTER_GPU_VASPACE": (26, "UVM_UNREGISTER_GPU_VASPACE_PARAMS"),
  "UVM_REGISTER_CHANNEL":       (27, "UVM_REGISTER_CHANNEL_PARAMS"),
  "UVM_UNREGISTER_CHANNEL":     (28, "UVM_UNREGISTER_CHANNEL_PARAMS"),
  "UVM_ENABLE_PEER_ACCESS":     (29, "UVM_ENABLE_PEER_ACCESS_PARAMS"),
  "UVM_DISABLE_PEER_ACCESS":    (30, "UVM_DISABLE_PEER_ACCESS_PARAMS"),
  "UVM_MAP_EXTERNAL_ALLOCATION": (33, "UVM_MAP_EXTERNAL_ALLOCATION_PARAMS"),
  "UVM_FREE":                   (34, "UVM_FREE_PARAMS"),
  "UVM_REGISTER_GPU":           (37, "UVM_REGISTER_GPU_PARAMS"),
  "UVM_UNREGISTER_GPU":         (38, "UVM_UNREGISTER_GPU_PARAMS"),
  "UVM_UNMAP_EXTERNAL":         (66, "UVM_UNMAP_EXTERNAL_PARAMS"),
  "UVM_CREATE_EXTERNAL_RANGE":  (73, "UVM_CREATE_EXTERNAL_RANGE_PARAMS"),
  "UVM_MM_INITIALIZE":          (75, "UVM_MM_INITIALIZE_PARAMS"),
}
UVM_BY_CMD = {cmd: name for name, (cmd, _) in UVM_IOCTLS.items()}

# UvmGpuMappingAttributes enums (uvm_types.h)
UVM_GPU_MAPPING_TYPE = {"DEFAULT": 0, "READ_WRITE_ATOMIC": 1, "READ_WRITE": 2, "READ_ONLY": 3}
UVM_GPU_CACHING_TYPE = {"DEFAULT": 0, "FORCE_UNCACHED": 1, "FORCE_CACHED": 2}
