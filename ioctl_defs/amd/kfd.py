"""The /dev/kfd ABI: argument structs (cffi), request numbers and the constants a compute client uses.

Layouts come from include/uapi/linux/kfd_ioctl.h. Only the compute-client subset is declared. Two
things changed inside it between the header versions that matter (facts: ../shared/abi/amd_kfd.json):
kfd_ioctl_create_queue_args grew from 88 to 96 bytes in KFD 1.17 (sdma_engine_id + pad appended), so
AMDKFD_IOC_CREATE_QUEUE is 0xC0584B02 on a <= 1.16 driver and 0xC0604B02 after; and kfd_event_data
gained a signal_event_data union member in 1.14 (same size). Requests are therefore computed from the
layouts of the version the driver reports with AMDKFD_IOC_GET_VERSION.

  >>> abi = abi_for_version(1, 11)
  >>> abi.sizeof("struct kfd_ioctl_create_queue_args"), hex(abi.request("AMDKFD_IOC_CREATE_QUEUE"))
  (88, '0xc0584b02')
  >>> hex(abi_for_version(1, 17).request("AMDKFD_IOC_CREATE_QUEUE"))
  '0xc0604b02'
"""
from __future__ import annotations
import re
from functools import cache
from typing import Any
import cffi

# --- _IOC encoding (asm-generic/ioctl.h, x86-64): nr 8 bits, type 8 bits, size 14 bits, dir 2 bits ---
IOC_NRSHIFT, IOC_TYPESHIFT, IOC_SIZESHIFT, IOC_DIRSHIFT = 0, 8, 16, 30
IOC_NONE, IOC_WRITE, IOC_READ = 0, 1, 2
IOC_SIZEBITS = 14
AMDKFD_IOCTL_BASE = ord("K")   # 75
# kfd_ioctl() accepts nr in [START, END); ROCm DKMS kernels also [START_2, END_2) (ROCm-only ioctls, unused here)
AMDKFD_COMMAND_START, AMDKFD_COMMAND_END_1_11, AMDKFD_COMMAND_END_1_17 = 0x01, 0x24, 0x27

def ioc(direction: int, typ: int, nr: int, size: int) -> int:
  """_IOC(dir, type, nr, size); raises if `size` does not fit the 14-bit size field."""
  if not 0 <= size < (1 << IOC_SIZEBITS): raise ValueError(f"ioctl size {size} does not fit the 14-bit _IOC size field")
  return (direction << IOC_DIRSHIFT) | (size << IOC_SIZESHIFT) | (typ << IOC_TYPESHIFT) | (nr << IOC_NRSHIFT)

def ioc_decode(request: int) -> tuple[int, int, int, int]:
  """(direction, type, nr, size) of an _IOC-encoded request."""
  return (request >> IOC_DIRSHIFT) & 3, (request >> IOC_TYPESHIFT) & 0xFF, request & 0xFF, (request >> IOC_SIZESHIFT) & ((1 << IOC_SIZEBITS) - 1)

# --- versions ---
KFD_IOCTL_MAJOR_VERSION = 1
OLDEST_KNOWN, NEWEST_KNOWN = (1, 11), (1, 17)   # the compiled headers; newer minors keep the 1.17 compute layouts
CREATE_QUEUE_96_BYTES_FROM = (1, 17)             # "1.17 - Add SDMA queue creation with target SDMA engine ID"
SIGNAL_EVENT_DATA_FROM = (1, 14)                 # "1.14 - Update kfd_event_data"

# Struct bodies (x86-64, natural alignment, as gcc lays out the uapi header). A member line ending in
# `@1.NN` exists only from KFD 1.NN on. set_memory_policy's last u32 is `pad` here for every version
# (renamed misc_process_flag in 1.18 / the ROCm copy; same offset and size).
STRUCTS: list[tuple[str, str]] = [
  ("kfd_ioctl_get_version_args", "uint32_t major_version; uint32_t minor_version;"),
  ("kfd_ioctl_acquire_vm_args", "uint32_t drm_fd; uint32_t gpu_id;"),
  ("kfd_ioctl_alloc_memory_of_gpu_args", "uint64_t va_addr; uint64_t size; uint64_t handle; uint64_t mmap_offset; uint32_t gpu_id; uint32_t flags;"),
  ("kfd_ioctl_free_memory_of_gpu_args", "uint64_t handle;"),
  ("kfd_ioctl_map_memory_to_gpu_args", "uint64_t handle; uint64_t device_ids_array_ptr; uint32_t n_devices; uint32_t n_success;"),
  ("kfd_ioctl_unmap_memory_from_gpu_args", "uint64_t handle; uint64_t device_ids_array_ptr; uint32_t n_devices; uint32_t n_success;"),
  ("kfd_ioctl_create_queue_args", """uint64_t ring_base_address; uint64_t write_pointer_address; uint64_t read_pointer_address;
    uint64_t doorbell_offset; uint32_t ring_size; uint32_t gpu_id; uint32_t queue_type; uint32_t queue_percentage;
    uint32_t queue_priority; uint32_t queue_id; uint64_t eop_buffer_address; uint64_t eop_buffer_size;
    uint64_t ctx_save_restore_address; uint32_t ctx_save_restore_size; uint32_t ctl_stack_size;
    uint32_t sdma_engine_id; @1.17
    uint32_t pad; @1.17"""),
  ("kfd_ioctl_destroy_queue_args", "uint32_t queue_id; uint32_t pad;"),
  ("kfd_ioctl_update_queue_args", "uint64_t ring_base_address; uint32_t queue_id; uint32_t ring_size; uint32_t queue_percentage; uint32_t queue_priority;"),
  ("kfd_ioctl_create_event_args", """uint64_t event_page_offset; uint32_t event_trigger_data; uint32_t event_type; uint32_t auto_reset;
    uint32_t node_id; uint32_t event_id; uint32_t event_slot_index;"""),
  ("kfd_ioctl_destroy_event_args", "uint32_t event_id; uint32_t pad;"),
  ("kfd_ioctl_set_event_args", "uint32_t event_id; uint32_t pad;"),
  ("kfd_ioctl_reset_event_args", "uint32_t event_id; uint32_t pad;"),
  ("kfd_ioctl_wait_events_args", "uint64_t events_ptr; uint32_t num_events; uint32_t wait_for_all; uint32_t timeout; uint32_t wait_result;"),
  ("kfd_memory_exception_failure", "uint32_t NotPresent; uint32_t ReadOnly; uint32_t NoExecute; uint32_t imprecise;"),
  ("kfd_hsa_memory_exception_data", "struct kfd_memory_exception_failure failure; uint64_t va; uint32_t gpu_id; uint32_t ErrorType;"),
  ("kfd_hsa_hw_exception_data", "uint32_t reset_type; uint32_t reset_cause; uint32_t memory_lost; uint32_t gpu_id;"),
  ("kfd_hsa_signal_event_data", "uint64_t last_event_age; @1.14"),
  ("kfd_event_data", """union { struct kfd_hsa_memory_exception_data memory_exception_data; struct kfd_hsa_hw_exception_data hw_exception_data;
    struct kfd_hsa_signal_event_data signal_event_data; @1.14
    };
    uint64_t kfd_event_data_ext; uint32_t event_id; uint32_t pad;"""),
  ("kfd_ioctl_set_memory_policy_args", """uint64_t alternate_aperture_base; uint64_t alternate_aperture_size; uint32_t gpu_id;
    uint32_t default_policy; uint32_t alternate_policy; uint32_t pad;"""),
  ("kfd_process_device_apertures", """uint64_t lds_base; uint64_t lds_limit; uint64_t scratch_base; uint64_t scratch_limit;
    uint64_t gpuvm_base; uint64_t gpuvm_limit; uint32_t gpu_id; uint32_t pad;"""),
  ("kfd_ioctl_get_process_apertures_args", "struct kfd_process_device_apertures process_apertures[7]; uint32_t num_of_nodes; uint32_t pad;"),
  ("kfd_ioctl_get_process_apertures_new_args", "uint64_t kfd_process_device_apertures_ptr; uint32_t num_of_nodes; uint32_t pad;"),
  ("kfd_ioctl_set_scratch_backing_va_args", "uint64_t va_addr; uint32_t gpu_id; uint32_t pad;"),
  ("kfd_ioctl_set_trap_handler_args", "uint64_t tba_addr; uint64_t tma_addr; uint32_t gpu_id; uint32_t pad;"),
  ("kfd_ioctl_runtime_enable_args", "uint64_t r_debug; uint32_t mode_mask; uint32_t capabilities_mask;"),
  ("kfd_runtime_info", "uint64_t r_debug; uint32_t runtime_state; uint32_t ttmp_setup;"),
  ("kfd_ioctl_set_xnack_mode_args", "int32_t xnack_enabled;"),
  ("kfd_ioctl_get_clock_counters_args", """uint64_t gpu_clock_counter; uint64_t cpu_clock_counter; uint64_t system_clock_counter;
    uint64_t system_clock_freq; uint32_t gpu_id; uint32_t pad;"""),
  ("kfd_ioctl_get_available_memory_args", "uint64_t available; uint32_t gpu_id; uint32_t pad;"),
  ("kfd_ioctl_set_cu_mask_args", "uint32_t queue_id; uint32_t num_cu_mask; uint64_t cu_mask_ptr;"),
  ("kfd_ioctl_get_queue_wave_state_args", "uint64_t ctl_stack_address; uint32_t ctl_stack_used_size; uint32_t save_area_used_size; uint32_t queue_id; uint32_t pad;"),
  ("kfd_ioctl_get_tile_config_args", """uint64_t tile_config_ptr; uint64_t macro_tile_config_ptr; uint32_t num_tile_configs;
    uint32_t num_macro_tile_configs; uint32_t gpu_id; uint32_t gb_addr_config; uint32_t num_banks; uint32_t num_ranks;"""),
  ("kfd_ioctl_alloc_queue_gws_args", "uint32_t queue_id; uint32_t num_gws; uint32_t first_gws; uint32_t pad;"),
  ("kfd_ioctl_get_dmabuf_info_args", "uint64_t size; uint64_t metadata_ptr; uint32_t metadata_size; uint32_t gpu_id; uint32_t flags; uint32_t dmabuf_fd;"),
  ("kfd_ioctl_import_dmabuf_args", "uint64_t va_addr; uint64_t handle; uint32_t gpu_id; uint32_t dmabuf_fd;"),
  ("kfd_ioctl_export_dmabuf_args", "uint64_t handle; uint32_t flags; uint32_t dmabuf_fd;"),
  ("kfd_context_save_area_header", """struct { uint32_t control_stack_offset; uint32_t control_stack_size; uint32_t wave_state_offset;
    uint32_t wave_state_size; } wave_state; uint32_t debug_offset; uint32_t debug_size; uint64_t err_payload_addr;
    uint32_t err_event_id; uint32_t reserved1;"""),
]

# name -> (direction, nr, argument struct, first KFD version that has it). The 28 compute-client ioctls.
# First versions of RUNTIME_ENABLE / EXPORT_DMABUF are from the header's version history (1.12 "Add DMA buf
# export ioctl"; runtime_enable came with "1.13 - Add debugger API", linux@v6.12.117:include/uapi/linux/kfd_ioctl.h:41);
# the JSON only establishes "absent in 1.11, present in 1.17".
_R, _W, _RW = IOC_READ, IOC_WRITE, IOC_READ | IOC_WRITE
IOCTLS: dict[str, tuple[int, int, str, tuple[int, int]]] = {
  "AMDKFD_IOC_GET_VERSION":              (_R,  0x01, "kfd_ioctl_get_version_args", (1, 0)),
  "AMDKFD_IOC_CREATE_QUEUE":             (_RW, 0x02, "kfd_ioctl_create_queue_args", (1, 0)),
  "AMDKFD_IOC_DESTROY_QUEUE":            (_RW, 0x03, "kfd_ioctl_destroy_queue_args", (1, 0)),
  "AMDKFD_IOC_SET_MEMORY_POLICY":        (_W,  0x04, "kfd_ioctl_set_memory_policy_args", (1, 0)),
  "AMDKFD_IOC_GET_CLOCK_COUNTERS":       (_RW, 0x05, "kfd_ioctl_get_clock_counters_args", (1, 0)),
  "AMDKFD_IOC_UPDATE_QUEUE":             (_W,  0x07, "kfd_ioctl_update_queue_args", (1, 0)),
  "AMDKFD_IOC_CREATE_EVENT":             (_RW, 0x08, "kfd_ioctl_create_event_args", (1, 0)),
  "AMDKFD_IOC_DESTROY_EVENT":            (_W,  0x09, "kfd_ioctl_destroy_event_args", (1, 0)),
  "AMDKFD_IOC_SET_EVENT":                (_W,  0x0A, "kfd_ioctl_set_event_args", (1, 0)),
  "AMDKFD_IOC_RESET_EVENT":              (_W,  0x0B, "kfd_ioctl_reset_event_args", (1, 0)),
  "AMDKFD_IOC_WAIT_EVENTS":              (_RW, 0x0C, "kfd_ioctl_wait_events_args", (1, 0)),
  "AMDKFD_IOC_SET_SCRATCH_BACKING_VA":   (_RW, 0x11, "kfd_ioctl_set_scratch_backing_va_args", (1, 0)),
  "AMDKFD_IOC_GET_TILE_CONFIG":          (_RW, 0x12, "kfd_ioctl_get_tile_config_args", (1, 0)),
  "AMDKFD_IOC_SET_TRAP_HANDLER":         (_W,  0x13, "kfd_ioctl_set_trap_handler_args", (1, 0)),
  "AMDKFD_IOC_GET_PROCESS_APERTURES_NEW": (_RW, 0x14, "kfd_ioctl_get_process_apertures_new_args", (1, 0)),
  "AMDKFD_IOC_ACQUIRE_VM":               (_W,  0x15, "kfd_ioctl_acquire_vm_args", (1, 0)),
  "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU":       (_RW, 0x16, "kfd_ioctl_alloc_memory_of_gpu_args", (1, 0)),
  "AMDKFD_IOC_FREE_MEMORY_OF_GPU":        (_W,  0x17, "kfd_ioctl_free_memory_of_gpu_args", (1, 0)),
  "AMDKFD_IOC_MAP_MEMORY_TO_GPU":         (_RW, 0x18, "kfd_ioctl_map_memory_to_gpu_args", (1, 0)),
  "AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU":     (_RW, 0x19, "kfd_ioctl_unmap_memory_from_gpu_args", (1, 0)),
  "AMDKFD_IOC_SET_CU_MASK":              (_W,  0x1A, "kfd_ioctl_set_cu_mask_args", (1, 0)),
  "AMDKFD_IOC_GET_QUEUE_WAVE_STATE":     (_RW, 0x1B, "kfd_ioctl_get_queue_wave_state_args", (1, 0)),
  "AMDKFD_IOC_GET_DMABUF_INFO":          (_RW, 0x1C, "kfd_ioctl_get_dmabuf_info_args", (1, 0)),
  "AMDKFD_IOC_IMPORT_DMABUF":            (_RW, 0x1D, "kfd_ioctl_import_dmabuf_args", (1, 0)),
  "AMDKFD_IOC_SET_XNACK_MODE":           (_RW, 0x21, "kfd_ioctl_set_xnack_mode_args", (1, 0)),
  "AMDKFD_IOC_AVAILABLE_MEMORY":         (_RW, 0x23, "kfd_ioctl_get_available_memory_args", (1, 0)),
  "AMDKFD_IOC_EXPORT_DMABUF":            (_RW, 0x24, "kfd_ioctl_export_dmabuf_args", (1, 12)),
  "AMDKFD_IOC_RUNTIME_ENABLE":           (_RW, 0x25, "kfd_ioctl_runtime_enable_args", (1, 13)),
}
IOCTL_BY_NR = {nr: name for name, (_, nr, _, _) in IOCTLS.items()}

# --- kfd_ioctl_alloc_memory_of_gpu_args.flags (KFD_IOC_ALLOC_MEM_FLAGS_*) ---
ALLOC_MEM_FLAGS_VRAM, ALLOC_MEM_FLAGS_GTT, ALLOC_MEM_FLAGS_USERPTR = 1 << 0, 1 << 1, 1 << 2
ALLOC_MEM_FLAGS_DOORBELL, ALLOC_MEM_FLAGS_MMIO_REMAP = 1 << 3, 1 << 4
ALLOC_MEM_FLAGS_WRITABLE, ALLOC_MEM_FLAGS_EXECUTABLE = 1 << 31, 1 << 30
ALLOC_MEM_FLAGS_PUBLIC, ALLOC_MEM_FLAGS_NO_SUBSTITUTE = 1 << 29, 1 << 28
ALLOC_MEM_FLAGS_AQL_QUEUE_MEM, ALLOC_MEM_FLAGS_COHERENT = 1 << 27, 1 << 26
ALLOC_MEM_FLAGS_UNCACHED, ALLOC_MEM_FLAGS_EXT_COHERENT = 1 << 25, 1 << 24   # EXT_COHERENT: not in the 1.11 header
ALLOC_MEM_FLAGS_CONTIGUOUS = 1 << 23   # 1.16 (ROCm's copy calls it CONTIGUOUS_BEST_EFFORT)
ALLOC_MEM_FLAGS: dict[str, int] = {   # by the header's name without the KFD_IOC_ALLOC_MEM_FLAGS_ prefix
  "VRAM": ALLOC_MEM_FLAGS_VRAM, "GTT": ALLOC_MEM_FLAGS_GTT, "USERPTR": ALLOC_MEM_FLAGS_USERPTR, "DOORBELL": ALLOC_MEM_FLAGS_DOORBELL,
  "MMIO_REMAP": ALLOC_MEM_FLAGS_MMIO_REMAP, "WRITABLE": ALLOC_MEM_FLAGS_WRITABLE, "EXECUTABLE": ALLOC_MEM_FLAGS_EXECUTABLE,
  "PUBLIC": ALLOC_MEM_FLAGS_PUBLIC, "NO_SUBSTITUTE": ALLOC_MEM_FLAGS_NO_SUBSTITUTE, "AQL_QUEUE_MEM": ALLOC_MEM_FLAGS_AQL_QUEUE_MEM,
  "COHERENT": ALLOC_MEM_FLAGS_COHERENT, "UNCACHED": ALLOC_MEM_FLAGS_UNCACHED, "EXT_COHERENT": ALLOC_MEM_FLAGS_EXT_COHERENT,
  "CONTIGUOUS": ALLOC_MEM_FLAGS_CONTIGUOUS}

# --- queue types, limits, cache policies ---
QUEUE_TYPE_COMPUTE, QUEUE_TYPE_SDMA, QUEUE_TYPE_COMPUTE_AQL, QUEUE_TYPE_SDMA_XGMI, QUEUE_TYPE_SDMA_BY_ENG_ID = 0, 1, 2, 3, 4
MAX_QUEUE_PERCENTAGE, MAX_QUEUE_PRIORITY = 100, 15
CACHE_POLICY_COHERENT, CACHE_POLICY_NONCOHERENT = 0, 1
MIN_QUEUE_RING_SIZE = 1024   # KFD 1.22 header; older kernels check only power-of-two-ness

# --- events ---
EVENT_SIGNAL, EVENT_NODECHANGE, EVENT_DEVICESTATECHANGE, EVENT_HW_EXCEPTION = 0, 1, 2, 3
EVENT_SYSTEM_EVENT, EVENT_DEBUG_EVENT, EVENT_PROFILE_EVENT, EVENT_QUEUE_EVENT, EVENT_MEMORY = 4, 5, 6, 7, 8
WAIT_RESULT_COMPLETE, WAIT_RESULT_TIMEOUT, WAIT_RESULT_FAIL = 0, 1, 2
SIGNAL_EVENT_LIMIT = 4096                 # slots in the event page; each slot is a u64 -> 32 KiB page
EVENT_PAGE_SIZE = SIGNAL_EVENT_LIMIT * 8

# --- topology: properties.gfx_target_version = major*10000 + minor*100 + stepping (kfd_device.c) ---
GFX_TARGET_VERSION: dict[int, str] = {110000: "gfx1100", 90402: "gfx942"}   # the targets this project supports

# --- runtime enable ---
RUNTIME_ENABLE_MODE_ENABLE_MASK, RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK = 1, 2
RUNTIME_ENABLE_CAPS_SUPPORTS_CORE_DUMP_MASK = 1 << 31

# --- mmap offsets on /dev/kfd (kernel-internal kfd_priv.h; the doorbell_offset create_queue returns uses it) ---
MMAP_TYPE_SHIFT, MMAP_GPU_ID_SHIFT, GPU_ID_HASH_WIDTH = 62, 46, 16
MMAP_TYPE_DOORBELL, MMAP_TYPE_EVENTS, MMAP_TYPE_RESERVED_MEM, MMAP_TYPE_MMIO = 3, 2, 1, 0
DOORBELL_PROCESS_FRAME_SIZE = 0x2000   # 2 pages of 64-bit doorbells per process and device (SOC15+)

def mmap_offset(kind: int, gpu_id: int, offset: int = 0) -> int:
  """The /dev/kfd mmap offset of `kind` (MMAP_TYPE_*) for a gpu_id, plus a byte offset.

    >>> hex(mmap_offset(MMAP_TYPE_DOORBELL, 0x1234))
    '0xc48d000000000000'
  """
  if not 0 <= gpu_id < (1 << GPU_ID_HASH_WIDTH): raise ValueError(f"gpu_id {gpu_id:#x} does not fit {GPU_ID_HASH_WIDTH} bits")
  return (kind << MMAP_TYPE_SHIFT) | (gpu_id << MMAP_GPU_ID_SHIFT) | offset

def make_handle(gpu_id: int, idr: int) -> int:
  """An alloc_memory_of_gpu handle as the kernel builds it: gpu_id in bits 63:32, IDR index in 31:0."""
  return (gpu_id << 32) | idr

# --- the ABI of one driver version ---
class UnsupportedKFDVersion(ValueError):
  """The KFD version the driver reports has no known ABI here."""

def _has(marker: str | None, version: tuple[int, int]) -> bool:
  return marker is None or version >= tuple(int(x) for x in marker.split("."))

def cdef_for(version: tuple[int, int]) -> str:
  """C declarations of every struct in STRUCTS as laid out for KFD `version`."""
  out = []
  for name, body in STRUCTS:
    members = []
    for line in body.strip().splitlines():
      m = re.fullmatch(r"(.*?)\s*@(\d+\.\d+)\s*", line)
      text, marker = (m.group(1), m.group(2)) if m else (line, None)
      if _has(marker, version): members.append(text.strip())
    inner = " ".join(members).strip()
    if name == "kfd_hsa_signal_event_data" and not inner: continue   # the struct does not exist before 1.14
    out.append(f"struct {name} {{ {inner} }};")
  return "\n".join(out)

@cache
def _ffi(version: tuple[int, int]) -> cffi.FFI:
  ffi = cffi.FFI()
  ffi.cdef(cdef_for(version))
  return ffi

def _layout_version(version: tuple[int, int]) -> tuple[int, int]:
  # every layout change inside the subset happened at one of these versions
  return max(v for v in ((1, 0), SIGNAL_EVENT_DATA_FROM, CREATE_QUEUE_96_BYTES_FROM) if v <= version)

class KFDABI:
  """Layouts and request numbers for one KFD version (as AMDKFD_IOC_GET_VERSION reports it)."""
  def __init__(self, major: int, minor: int):
    self.version = (major, minor)
    self.ffi = _ffi(_layout_version(self.version))

  def __repr__(self) -> str: return f"KFDABI({self.version[0]}.{self.version[1]})"

  def sizeof(self, struct: str) -> int:
    return self.ffi.sizeof(struct if struct.startswith("struct ") else f"struct {struct}")

  def has(self, name: str) -> bool:
    """Whether the ioctl exists in this KFD version."""
    return self.version >= IOCTLS[name][3]

  def request(self, name: str) -> int:
    """The _IOC request number of an AMDKFD_IOC_* ioctl for this version (size = sizeof its argument struct)."""
    direction, nr, struct, since = IOCTLS[name]
    if self.version < since:
      raise UnsupportedKFDVersion(f"{name} needs KFD {since[0]}.{since[1]} or newer; the driver reports {self.version[0]}.{self.version[1]}")
    return ioc(direction, AMDKFD_IOCTL_BASE, nr, self.sizeof(struct))

  def new(self, name: str, **fields: Any) -> Any:
    """A zeroed argument struct (cffi `struct X *`) for an ioctl name or a struct name, with fields set."""
    struct = IOCTLS[name][2] if name in IOCTLS else name
    p = self.ffi.new(f"struct {struct} *")
    for k, v in fields.items(): setattr(p, k, v)
    return p

def abi_for_version(major: int, minor: int) -> KFDABI:
  """The ABI for the KFD version a driver reports. Newer 1.x minors than the headers known here keep the
  1.17 compute layouts (the 1.22 header still has the 96-byte create_queue)."""
  if major != KFD_IOCTL_MAJOR_VERSION or (major, minor) < OLDEST_KNOWN:
    raise UnsupportedKFDVersion(f"KFD {major}.{minor} is not supported: layouts are known for KFD "
                                f"{OLDEST_KNOWN[0]}.{OLDEST_KNOWN[1]} and newer 1.x (Linux 6.1 ships 1.11)")
  return KFDABI(major, minor)
