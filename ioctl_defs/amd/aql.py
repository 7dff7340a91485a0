"""AQL (HSA architected queuing language) packets: 64-byte slots, layouts as cffi declarations, and builders.

Facts: hsa.h / hsa_ext_amd.h / amd_hsa_signal.h / amd_aql_pm4_ib_packet.h as recorded in
../shared/abi/amd_packets.json (aql). The header is the low 16 bits of dword 0; a producer writes the
rest of the packet first and the header last (release), because the packet processor may read the slot
as soon as the header stops saying INVALID.

  >>> hex(header(PACKET_TYPE_KERNEL_DISPATCH, barrier=True, acquire=FENCE_SCOPE_SYSTEM, release=FENCE_SCOPE_SYSTEM))
  '0x1502'
"""
from __future__ import annotations
import struct

PACKET_SIZE = 64
PACKET_TYPE_VENDOR_SPECIFIC, PACKET_TYPE_INVALID, PACKET_TYPE_KERNEL_DISPATCH = 0, 1, 2
PACKET_TYPE_BARRIER_AND, PACKET_TYPE_AGENT_DISPATCH, PACKET_TYPE_BARRIER_OR = 3, 4, 5
HEADER_TYPE_SHIFT, HEADER_BARRIER_SHIFT, HEADER_ACQUIRE_FENCE_SCOPE_SHIFT, HEADER_RELEASE_FENCE_SCOPE_SHIFT = 0, 8, 9, 11
FENCE_SCOPE_NONE, FENCE_SCOPE_AGENT, FENCE_SCOPE_SYSTEM = 0, 1, 2
SETUP_DIMENSIONS_SHIFT, SETUP_DIMENSIONS_WIDTH = 0, 2
AMD_PACKET_TYPE_BARRIER_VALUE = 2        # AmdFormat of a vendor-specific packet
AMD_AQL_PM4_IB_FORMAT, AMD_AQL_PM4_IB_DW_COUNT_REMAIN = 1, 10
SIGNAL_CONDITION_EQ, SIGNAL_CONDITION_NE, SIGNAL_CONDITION_LT, SIGNAL_CONDITION_GTE = 0, 1, 2, 3
AMD_SIGNAL_KIND_INVALID, AMD_SIGNAL_KIND_USER, AMD_SIGNAL_KIND_DOORBELL, AMD_SIGNAL_KIND_LEGACY_DOORBELL = 0, 1, -1, -2

CDEF = """
typedef struct { uint64_t handle; } hsa_signal_t;
typedef struct {
  union { struct { uint16_t header; uint16_t setup; }; uint32_t full_header; }; uint16_t workgroup_size_x; uint16_t workgroup_size_y; uint16_t workgroup_size_z;
  uint16_t reserved0; uint32_t grid_size_x; uint32_t grid_size_y; uint32_t grid_size_z; uint32_t private_segment_size;
  uint32_t group_segment_size; uint64_t kernel_object; uint64_t kernarg_address; uint64_t reserved2; hsa_signal_t completion_signal;
} hsa_kernel_dispatch_packet_t;
typedef struct {
  uint16_t header; uint16_t reserved0; uint32_t reserved1; hsa_signal_t dep_signal[5]; uint64_t reserved2; hsa_signal_t completion_signal;
} hsa_barrier_and_packet_t;
typedef hsa_barrier_and_packet_t hsa_barrier_or_packet_t;
typedef struct { uint16_t header; uint8_t AmdFormat; uint8_t reserved; } hsa_amd_vendor_packet_header_t;
typedef struct {
  hsa_amd_vendor_packet_header_t header; uint32_t reserved0; hsa_signal_t signal; int64_t value; int64_t mask; uint32_t cond;
  uint32_t reserved1; uint64_t reserved2; uint64_t reserved3; hsa_signal_t completion_signal;
} hsa_amd_barrier_value_packet_t;
typedef struct {
  uint16_t header; uint16_t pm4_ib_format; uint32_t pm4_ib_command[4]; uint32_t dw_count_remain; uint32_t reserved[8];
  hsa_signal_t completion_signal;
} amd_aql_pm4_ib_packet_t;
typedef struct {
  int64_t kind; union { int64_t value; uint64_t hardware_doorbell_ptr; }; uint64_t event_mailbox_ptr; uint32_t event_id;
  uint32_t reserved1; uint64_t start_ts; uint64_t end_ts; union { uint64_t queue_ptr; uint64_t reserved2; }; uint32_t reserved3[2];
} amd_signal_t;
"""
# amd_queue_t (begins with hsa_queue_t, 64-byte aligned): the 64-bit packet indices an AQL queue's rptr/wptr point at
AMD_QUEUE_WRITE_DISPATCH_ID_OFFSET, AMD_QUEUE_READ_DISPATCH_ID_OFFSET, AMD_QUEUE_ALIGN = 56, 128, 64
# more amd_queue_t fields ROCr fills (ROCm/ROCR-Runtime@c7785a6:runtime/hsa-runtime/inc/amd_hsa_queue.h:75-98)
AMD_QUEUE_MAX_CU_ID_OFFSET, AMD_QUEUE_MAX_WAVE_ID_OFFSET, AMD_QUEUE_READ_DISPATCH_ID_FIELD_BASE_BYTE_OFFSET_OFFSET = 72, 76, 136
AMD_QUEUE_PROPERTIES_OFFSET, AMD_QUEUE_INACTIVE_SIGNAL_OFFSET, AMD_QUEUE_BYTES = 180, 192, 256
AMD_QUEUE_PROPERTIES_IS_PTR64 = 1 << 1   # amd_hsa_queue.h:53
# its scratch fields (amd_hsa_queue.h:88-93): compute_tmpring_size, scratch_resource_descriptor[4],
# scratch_backing_memory_location, scratch_backing_memory_byte_size, scratch_wave64_lane_byte_size
AMD_QUEUE_COMPUTE_TMPRING_SIZE_OFFSET, AMD_QUEUE_SCRATCH_RESOURCE_DESCRIPTOR_OFFSET = 140, 144
AMD_QUEUE_SCRATCH_BACKING_MEMORY_LOCATION_OFFSET, AMD_QUEUE_SCRATCH_BACKING_MEMORY_BYTE_SIZE_OFFSET = 160, 168
AMD_QUEUE_SCRATCH_WAVE64_LANE_BYTE_SIZE_OFFSET = 176
# The scratch buffer resource ROCr's InitScratchSRD puts in scratch_resource_descriptor[4] (ROCm/ROCR-Runtime@c7785a6:
# runtime/hsa-runtime/core/runtime/amd_aql_queue.cpp:1578-1686, 1843-1871), fields from core/inc/registers.h:169-320
# and its enums (:51-100). W1: BASE_ADDRESS_HI [15:0], SWIZZLE_ENABLE bit 31 on gfx9 (a 1-bit field) and bits 31:30
# on gfx11 (a 2-bit field, set to 1). W3 gfx9: DST_SEL X/Y/Z/W = 4/5/6/7 [11:0], NUM_FORMAT UINT (4) [14:12],
# DATA_FORMAT 32 (4) [18:15], ELEMENT_SIZE 1 [20:19], INDEX_STRIDE 3 [22:21], ADD_TID_ENABLE [23], ATC__CI__VI [24],
# TYPE BUF (0) [31:30]. ROCr sets ATC when the agent's profile is HSA_PROFILE_FULL (amd_aql_queue.cpp:1642
# FillBufRsrcWord3), which is an APU node: KFD reports CPU cores on it (amd_gpu_agent.cpp:121-122, NumCPUCores > 0), as
# on MI300A; a dGPU such as MI300X (HSA_PROFILE_BASE) gets 0. The field is named for CI/VI, so GC 9.4.3 very likely
# ignores it; it is written as ROCr writes it (audit x30 row 7). W3 gfx11: DST_SEL [11:0], FORMAT 32_UINT (0x14)
# [17:12], INDEX_STRIDE 0 ("filled in by CP"), ADD_TID_ENABLE [23], OOB_SELECT 2 [29:28]; ROCr's gfx11 word 3 has no ATC.
SRD_DST_SEL_XYZW = 4 | 5 << 3 | 6 << 6 | 7 << 9
SRD_WORD3 = {9: SRD_DST_SEL_XYZW | 4 << 12 | 4 << 15 | 1 << 19 | 3 << 21 | 1 << 23,
             11: SRD_DST_SEL_XYZW | 0x14 << 12 | 1 << 23 | 2 << 28}
SRD_SWIZZLE_ENABLE = {9: 1 << 31, 11: 1 << 30}
SRD_ATC_GFX9 = 1 << 24

def scratch_srd(gfx_major: int, base: int, per_xcc_bytes: int, apu: bool = False) -> tuple[int, int, int, int]:
  """amd_queue_t.scratch_resource_descriptor for scratch at `base`, NUM_RECORDS the size of one XCC's part ("report
  size per XCC", amd_aql_queue.cpp:1624-1625), as ROCr builds it for a gfx9 or gfx11 agent; `apu`: the node is an APU
  (HSA_PROFILE_FULL: ATC set in the gfx9 word 3).

    >>> [hex(w) for w in scratch_srd(9, 0x7f0012345600, 11206656)], hex(scratch_srd(9, 0, 0, apu=True)[3])
    (['0x12345600', '0x80007f00', '0xab0000', '0xea4fac'], '0x1ea4fac')
  """
  if gfx_major not in SRD_WORD3: raise ValueError(f"scratch_srd: no scratch buffer resource layout for gfx{gfx_major} (gfx9, gfx11 only)")
  w3 = SRD_WORD3[gfx_major] | (SRD_ATC_GFX9 if apu and gfx_major == 9 else 0)
  return (base & 0xFFFFFFFF, (base >> 32) & 0xFFFF | SRD_SWIZZLE_ENABLE[gfx_major], per_xcc_bytes & 0xFFFFFFFF, w3)
# The bits the AQL CP ORs into queue_inactive_signal's value when it stops the queue on a packet or wave error, as ROCr
# decodes them (ROCm/ROCR-Runtime@c7785a6:runtime/hsa-runtime/core/runtime/amd_aql_queue.cpp:1167-1206); 512 (a
# large-scratch reclaim, :1143) and bit 63 (a scratch retry, :1137-1139) are requests to the runtime, not errors.
QUEUE_ERROR_BITS: dict[int, str] = {
  0x1: "insufficient scratch (wave64)", 0x400: "insufficient scratch (wave32)", 0x2: "invalid dimensions",
  0x4: "invalid group memory", 0x8: "invalid (or NULL) code object", 0x20: "invalid packet format",
  0x100: "invalid vendor packet format", 0x40: "group too large", 0x80: "out of VGPRs",
  0x20000000: "memory violation (>48-bit address)", 0x40000000: "illegal instruction", 0x80000000: "debug trap"}

def queue_error_names(value: int) -> list[str]:
  """Name the error bits of a queue_inactive_signal value.

  >>> queue_error_names(0x2 | 0x100)
  ['AQL invalid dimensions (0x2)', 'AQL invalid vendor packet format (0x100)']
  """
  names = [f"AQL {n} ({b:#x})" for b, n in QUEUE_ERROR_BITS.items() if value & b]
  rest = value & ~sum(QUEUE_ERROR_BITS) & ~(1 << 63) & ~512
  return names + ([f"AQL queue error bits {rest:#x}"] if rest else [])
# amd_signal_t is 64-byte aligned in the header (the cdef cannot say so; allocate signals 64-byte aligned)
AMD_SIGNAL_ALIGN = 64

def header(packet_type: int, barrier: bool = False, acquire: int = FENCE_SCOPE_NONE, release: int = FENCE_SCOPE_NONE) -> int:
  """The 16-bit AQL packet header."""
  return (packet_type << HEADER_TYPE_SHIFT) | (int(barrier) << HEADER_BARRIER_SHIFT) | \
         (acquire << HEADER_ACQUIRE_FENCE_SCOPE_SHIFT) | (release << HEADER_RELEASE_FENCE_SCOPE_SHIFT)

_DISPATCH = struct.Struct("<HHHHHHIIIIIQQQQ")
_BARRIER = struct.Struct("<HHI5QQQ")

def kernel_dispatch(kernel_object: int, kernarg_address: int, grid: tuple[int, int, int], workgroup: tuple[int, int, int], *,
                    group_segment_size: int = 0, private_segment_size: int = 0, completion_signal: int = 0,
                    hdr: int | None = None) -> bytes:
  """A 64-byte kernel dispatch packet. `grid` is in work-items (not workgroups). `hdr` defaults to a barrier
  dispatch with system-scope acquire and release; the caller stores dword 0 last (see module doc)."""
  dims = 3 if grid[2] > 1 or workgroup[2] > 1 else 2 if grid[1] > 1 or workgroup[1] > 1 else 1
  if any(not 0 < w <= 0xFFFF for w in workgroup): raise ValueError(f"workgroup size {workgroup} must be 1..65535 per dimension")
  if any(not 0 < g <= 0xFFFFFFFF for g in grid): raise ValueError(f"grid size {grid} must be 1..2^32-1 work-items per dimension")
  if kernel_object % 64: raise ValueError(f"kernel_object {kernel_object:#x} (a kernel descriptor address) must be 64-byte aligned")
  h = header(PACKET_TYPE_KERNEL_DISPATCH, True, FENCE_SCOPE_SYSTEM, FENCE_SCOPE_SYSTEM) if hdr is None else hdr
  return _DISPATCH.pack(h, dims << SETUP_DIMENSIONS_SHIFT, *workgroup, 0, *grid, private_segment_size, group_segment_size,
                        kernel_object, kernarg_address, 0, completion_signal)

def barrier_and(deps: list[int], completion_signal: int = 0, hdr: int | None = None) -> bytes:
  """A BARRIER_AND packet waiting for up to 5 signal handles (0 = unused slot)."""
  if len(deps) > 5: raise ValueError(f"a barrier packet holds at most 5 dependent signals, got {len(deps)}")
  h = header(PACKET_TYPE_BARRIER_AND, True, FENCE_SCOPE_SYSTEM, FENCE_SCOPE_SYSTEM) if hdr is None else hdr
  return _BARRIER.pack(h, 0, 0, *(list(deps) + [0] * (5 - len(deps))), 0, completion_signal)

def barrier_or(deps: list[int], completion_signal: int = 0) -> bytes:
  """A BARRIER_OR packet (completes when any dependent signal reaches 0)."""
  return barrier_and(deps, completion_signal, header(PACKET_TYPE_BARRIER_OR, True, FENCE_SCOPE_SYSTEM, FENCE_SCOPE_SYSTEM))

_PM4_IB = struct.Struct("<HH4II8IQ")

def pm4_ib(ib_command: list[int], completion_signal: int = 0, hdr: int | None = None) -> bytes:
  """A 64-byte amd_aql_pm4_ib_packet_t: the packet processor runs the 4-dword PM4 INDIRECT_BUFFER `ib_command`
  (ROCm/ROCR-Runtime@c7785a6:runtime/hsa-runtime/core/runtime/amd_aql_queue.cpp:1513-1543 builds it so for gfx9+).
  The layout is ROCr's; the default header sets the barrier bit as tinygrad does (tinygrad@a9069c1:tinygrad/runtime/
  ops_amd.py:433-435; ROCr's has none, :1531-1533): our waits and signals must not overlap earlier packets.

  >>> len(pm4_ib([0xC0023F00, 0x1000, 0, 0x800004])), hex(int.from_bytes(pm4_ib([0, 0, 0, 0])[:4], "little"))
  (64, '0x11500')
  """
  if len(ib_command) != 4: raise ValueError(f"a PM4-IB AQL packet carries one 4-dword INDIRECT_BUFFER, got {len(ib_command)} dwords")
  h = header(PACKET_TYPE_VENDOR_SPECIFIC, True, FENCE_SCOPE_SYSTEM, FENCE_SCOPE_SYSTEM) if hdr is None else hdr
  return _PM4_IB.pack(h, AMD_AQL_PM4_IB_FORMAT, *ib_command, AMD_AQL_PM4_IB_DW_COUNT_REMAIN, *([0] * 8), completion_signal)
