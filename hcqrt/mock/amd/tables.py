"""The mock KFD's own reading of the ABI: ioctl argument layouts (Python struct formats with field names), PM4
and SDMA opcodes, and the COMPUTE_* registers a dispatch reads. Written from kfd_ioctl.h / nvd.h / soc15d.h /
sdma_v6_0_0_pkt_open.h / gc_11_0_0_offset.h / gc_9_4_3_offset.h independently of ioctl_defs/amd (a wrong
shared table must not pass both sides); tests/mock/test_amd_mock_kfd.py checks these against ../shared/abi.
"""
from __future__ import annotations
import struct

class Layout:
  """A C struct as the kernel sees it: field names and one little-endian struct format (x86-64 alignment spelled out)."""
  def __init__(self, fmt: str, names: str):
    self.st, self.names = struct.Struct("<" + fmt), [n for n in names.split() if n != "_"]
    self._fields = names.split()
    self.size = self.st.size
  def unpack(self, data: bytes) -> dict[str, int]:
    return {n: v for n, v in zip(self._fields, self.st.unpack_from(data)) if n != "_"}
  def pack(self, d: dict[str, int]) -> bytes:
    return self.st.pack(*(d.get(n, 0) for n in self._fields))

CREATE_QUEUE_88 = "QQQQIIIIIIQQQII"
CREATE_QUEUE_FIELDS = ("ring_base_address write_pointer_address read_pointer_address doorbell_offset ring_size gpu_id queue_type "
                       "queue_percentage queue_priority queue_id eop_buffer_address eop_buffer_size ctx_save_restore_address "
                       "ctx_save_restore_size ctl_stack_size")
# nr -> (name, layout of the newest header the mock serves (1.17), sizes any known header gives it)
IOCTLS: dict[int, tuple[str, Layout, tuple[int, ...]]] = {
  0x01: ("GET_VERSION", Layout("II", "major_version minor_version"), (8,)),
  0x02: ("CREATE_QUEUE", Layout(CREATE_QUEUE_88 + "II", CREATE_QUEUE_FIELDS + " sdma_engine_id pad"), (88, 96)),
  0x03: ("DESTROY_QUEUE", Layout("II", "queue_id pad"), (8,)),
  0x05: ("GET_CLOCK_COUNTERS", Layout("QQQQII", "gpu_clock_counter cpu_clock_counter system_clock_counter system_clock_freq gpu_id pad"), (40,)),
  0x08: ("CREATE_EVENT", Layout("QIIIIII", "event_page_offset event_trigger_data event_type auto_reset node_id event_id event_slot_index"), (32,)),
  0x09: ("DESTROY_EVENT", Layout("II", "event_id pad"), (8,)),
  0x0A: ("SET_EVENT", Layout("II", "event_id pad"), (8,)),
  0x0B: ("RESET_EVENT", Layout("II", "event_id pad"), (8,)),
  0x0C: ("WAIT_EVENTS", Layout("QIIII", "events_ptr num_events wait_for_all timeout wait_result"), (24,)),
  0x14: ("GET_PROCESS_APERTURES_NEW", Layout("QII", "kfd_process_device_apertures_ptr num_of_nodes pad"), (16,)),
  0x15: ("ACQUIRE_VM", Layout("II", "drm_fd gpu_id"), (8,)),
  0x16: ("ALLOC_MEMORY_OF_GPU", Layout("QQQQII", "va_addr size handle mmap_offset gpu_id flags"), (40,)),
  0x17: ("FREE_MEMORY_OF_GPU", Layout("Q", "handle"), (8,)),
  0x18: ("MAP_MEMORY_TO_GPU", Layout("QQII", "handle device_ids_array_ptr n_devices n_success"), (24,)),
  0x19: ("UNMAP_MEMORY_FROM_GPU", Layout("QQII", "handle device_ids_array_ptr n_devices n_success"), (24,)),
  0x21: ("SET_XNACK_MODE", Layout("i", "xnack_enabled"), (4,)),
  0x23: ("AVAILABLE_MEMORY", Layout("QII", "available gpu_id pad"), (16,)),
  0x25: ("RUNTIME_ENABLE", Layout("QII", "r_debug mode_mask capabilities_mask"), (16,)),
}
COMMAND_END = {(1, 11): 0x24, (1, 17): 0x27}   # AMDKFD_COMMAND_END per header
APERTURE = Layout("QQQQQQII", "lds_base lds_limit scratch_base scratch_limit gpuvm_base gpuvm_limit gpu_id pad")
EVENT_DATA = Layout("32xQII", "kfd_event_data_ext event_id pad")   # the 32-byte union is written back as zeros (no exceptions)

# KFD_IOC_ALLOC_MEM_FLAGS_*
VRAM, GTT, USERPTR, DOORBELL, MMIO_REMAP = 1 << 0, 1 << 1, 1 << 2, 1 << 3, 1 << 4
WRITABLE, EXECUTABLE, PUBLIC, NO_SUBSTITUTE, AQL_QUEUE_MEM, COHERENT, UNCACHED = 1 << 31, 1 << 30, 1 << 29, 1 << 28, 1 << 27, 1 << 26, 1 << 25
QUEUE_COMPUTE, QUEUE_SDMA, QUEUE_COMPUTE_AQL = 0, 1, 2
EVENT_SIGNAL, EVENT_MEMORY = 0, 8
FIRST_NONSIGNAL_EVENT_ID = (0x7FFFFFFF >> 1) + 1   # kfd_events.h: signal events use small ids (= their slot)
MEMORY_EXCEPTION = Layout("IIIIQII", "NotPresent ReadOnly NoExecute imprecise va gpu_id ErrorType")   # 32-byte union member
MMAP_DOORBELL, MMAP_EVENTS = 3, 2
UNSIGNALED_EVENT_SLOT = (1 << 64) - 1
# what CREATE_EVENT returns in event_page_offset for a signal event: KFD_MMAP_TYPE_EVENTS, type 2 << KFD_MMAP_TYPE_SHIFT
# 62 (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_priv.h, KFD_MMAP_TYPE_EVENTS; kfd_events.c kfd_event_create)
MMAP_TYPE_EVENTS = 2 << 62
KERNEL_EVENT_PAGE_SLOTS = 256   # signal_mapped_size of a page the kernel allocated: "Oldest user mode expects 256 event slots"
# struct kfd_context_save_area_header (kfd_ioctl.h, KFD >= 1.13; ../../../shared/abi/amd_kfd.json): 40 bytes,
# err_payload_addr at 24, err_event_id at 32
CWSR_HEADER_BYTES, CWSR_HEADER_ERR_PAYLOAD, CWSR_HEADER_ERR_EVENT = 40, 24, 32
# enum kfd_dbg_trap_exception_code (kfd_ioctl.h): what the mock CP raises
EC_QUEUE_WAVE_ILLEGAL_INSTRUCTION, EC_QUEUE_PACKET_UNSUPPORTED = 4, 20

# --- PM4 (type-3 opcodes) ---
PM4_OPCODES = {0x10: "NOP", 0x15: "DISPATCH_DIRECT", 0x37: "WRITE_DATA", 0x3C: "WAIT_REG_MEM", 0x3F: "INDIRECT_BUFFER",
               0x46: "EVENT_WRITE", 0x49: "RELEASE_MEM", 0x58: "ACQUIRE_MEM", 0x76: "SET_SH_REG", 0x23: "PRED_EXEC",
               # known to the CP but not executed by the mock (fail loudly by name)
               0x40: "COPY_DATA", 0x79: "SET_UCONFIG_REG", 0x16: "DISPATCH_INDIRECT", 0x22: "COND_EXEC"}
SH_REG_BASE = 0x2C00
# COMPUTE_* absolute dword addresses a dispatch reads; PGM_RSRC3 moved between gfx9.4.3 and gfx11
COMPUTE = {"DISPATCH_INITIATOR": 0x2E00, "NUM_THREAD_X": 0x2E07, "NUM_THREAD_Y": 0x2E08, "NUM_THREAD_Z": 0x2E09,
           "START_X": 0x2E04, "START_Y": 0x2E05, "START_Z": 0x2E06, "PGM_LO": 0x2E0C, "PGM_HI": 0x2E0D,
           "PGM_RSRC1": 0x2E12, "PGM_RSRC2": 0x2E13, "RESOURCE_LIMITS": 0x2E15, "TMPRING_SIZE": 0x2E18, "USER_DATA_0": 0x2E40,
           "DISPATCH_SCRATCH_BASE_LO": 0x2E10, "DISPATCH_SCRATCH_BASE_HI": 0x2E11}
# COMPUTE_TMPRING_SIZE: WAVES [11:0] (gfx11: per shader engine), WAVESIZE from bit 12, 13 bits on GC 9.4.3 and 15 on
# GC 11 (../shared/abi/amd_packets.json), counting granules of 1024 bytes (gfx9) or 256 (gfx11+), as ROCr sizes them
# (ROCm/ROCR-Runtime@c7785a6:runtime/hsa-runtime/core/runtime/amd_aql_queue.cpp:211-214, 1723-1735, 1787-1800)
TMPRING_WAVESIZE_BITS = {9: 13, 11: 15}
SCRATCH_GRANULE = {9: 1024, 11: 256}
PGM_RSRC3 = {"gfx1100": 0x2E28, "gfx942": 0x2E2D}
DI_COMPUTE_SHADER_EN, DI_CS_W32_EN = 1 << 0, 1 << 15
EVENT_CS_PARTIAL_FLUSH = 7
# RELEASE_MEM EVENT_INDEX: 5 end of pipe, 6 shader done (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/
# kfd_pm4_headers_ai.h:465-466); the end-of-shader events are CS_DONE / PS_DONE (soc21_enum.h VGT_EVENT_TYPE, ioctl_defs/amd/pm4.py)
RM_EOP, RM_EOS, EOS_EVENTS = 5, 6, (0x2F, 0x30)
# RELEASE_MEM dword1 cache-action bits: gfx11 PACKET3_RELEASE_MEM_GCR_* (bits 12-22), gfx9 EOP_*_ACTION_EN (12-21)
RM_CACHE_ACTIONS = ((1 << 23) - 1) & ~0xFFF
# RELEASE_MEM dword1 cache-action bits that write dirty L2 lines back: gfx11 GCR_GL2_WB, gfx9 EOP_TC_WB_ACTION_EN / TC_ACTION_EN
RM_WRITEBACK = {11: 1 << 21, 9: (1 << 15) | (1 << 17)}
ACQ_WRITEBACK_GFX11, ACQ_GL2_INV_GFX11 = 1 << 15, 1 << 14   # ACQUIRE_MEM GCR_CNTL GL2_WB / GL2_INV (nvd.h PACKET3_ACQUIRE_MEM_GCR_CNTL_*)
COHER_TC_WB_ACTION, COHER_TC_ACTION = 1 << 18, 1 << 23          # gfx9 ACQUIRE_MEM CP_COHER_CNTL (soc15d.h PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_*)
# the per-CU vector cache invalidates: gfx9 CP_COHER_CNTL TCL1_ACTION_ENA (soc15d.h, (x) << 22), gfx10+ GCR_CNTL
# GLV_INV (nvd.h PACKET3_ACQUIRE_MEM_GCR_CNTL_GLV_INV, (x) << 8)
COHER_TCL1_ACTION, ACQ_GLV_INV_GFX11 = 1 << 22, 1 << 8
# the instruction cache invalidates: gfx9 CP_COHER_CNTL SH_ICACHE_ACTION_ENA (linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/
# soc15d.h:286, (x) << 29), gfx10+ GCR_CNTL GLI_INV, a 2-bit field (nvd.h:269, (x) << 0) whose 1 is "all"
COHER_SH_ICACHE_ACTION, ACQ_GLI_INV_MASK_GFX11, ACQ_GLI_INV_ALL_GFX11 = 1 << 29, 3, 1
# ... and RELEASE_MEM's end-of-pipe ones: gfx11 PACKET3_RELEASE_MEM_GCR_GLV_INV (nvd.h, 0x4000), gfx9 EOP_TCL1_ACTION_EN
# (soc15d.h, 0x10000) (../shared/abi/amd_packets.json); SDMA 6 GCR_REQ GCR_CONTROL GLV_INV (bit 8, ioctl_defs/amd/sdma.py)
RM_L1_INV = {11: 1 << 14, 9: 1 << 16}
SDMA_GCR_GLV_INV = 1 << 8
# gfx11's GL1 (one per shader array) invalidates: ACQUIRE_MEM GCR_CNTL GL1_INV (nvd.h, (x) << 9), RELEASE_MEM
# PACKET3_RELEASE_MEM_GCR_GL1_INV (0x8000), SDMA 6 GCR_CONTROL GL1_INV (bit 9, ioctl_defs/amd/sdma.py)
ACQ_GL1_INV_GFX11, RM_GL1_INV_GFX11, SDMA_GCR_GL1_INV = 1 << 9, 1 << 15, 1 << 9
WD_DST_MEMORY, WD_DST_REGISTER = 5, 0

# --- SDMA (header op in bits 7:0, sub_op 15:8) ---
SDMA_OPCODES = {0: "NOP", 1: "COPY", 2: "WRITE", 4: "INDIRECT", 5: "FENCE", 6: "TRAP", 7: "SEM", 8: "POLL_REGMEM",
                9: "COND_EXE", 10: "ATOMIC", 11: "CONST_FILL", 13: "TIMESTAMP", 17: "GCR_REQ"}
SDMA_SUBOP_USER_GCR = 1   # GCR_REQ from a user-mode queue (ROCR@c7785a6:runtime/hsa-runtime/core/inc/sdma_registers.h:66)
SDMA_COPY_COUNT_MASK = {11: 0x3FFFFFFF, 9: 0x003FFFFF}
