"""PM4 type-3 packets for a KFD compute queue (MEC), as small builders returning lists of dwords.

Facts from the kernel's nvd.h (gfx10/11), soc15d.h (gfx9 incl. 9.4.3) and kfd_pm4_headers_ai.h, as
recorded in ../shared/abi/amd_packets.json. A packet is a header dword (type 3, count = body dwords - 1,
opcode) followed by its body. `gfx` is the GC major version (9, 10, 11): ACQUIRE_MEM and the cache bits of
RELEASE_MEM differ between gfx9 and gfx10+.

  >>> [hex(x) for x in set_sh_reg(0x2E0C, 0x12345678, 0x9)]
  ['0xc0027600', '0x20c', '0x12345678', '0x9']
  >>> decode_header(dispatch_direct(4, 1, 1, 1)[0])
  (3, 3, 21)
"""
from __future__ import annotations

PACKET_TYPE3 = 3
CP_PACKET2 = 0x80000000   # one-dword type-2 filler
COUNT_MASK = 0x3FFF       # header bits 29:16
SHADER_TYPE_COMPUTE = 1 << 1   # header bit 1: nvd.h's PACKET3_COMPUTE(op, n) sets it

# opcodes (identical in nvd.h and soc15d.h for everything used here)
NOP, DISPATCH_DIRECT, PRED_EXEC, WRITE_DATA, WAIT_REG_MEM = 0x10, 0x15, 0x23, 0x37, 0x3C
INDIRECT_BUFFER, COPY_DATA, EVENT_WRITE, RELEASE_MEM, ACQUIRE_MEM = 0x3F, 0x40, 0x46, 0x49, 0x58
SET_SH_REG, SET_UCONFIG_REG = 0x76, 0x79
OPCODES: dict[str, int] = {"NOP": NOP, "DISPATCH_DIRECT": DISPATCH_DIRECT, "PRED_EXEC": PRED_EXEC, "WRITE_DATA": WRITE_DATA,
  "WAIT_REG_MEM": WAIT_REG_MEM, "INDIRECT_BUFFER": INDIRECT_BUFFER, "COPY_DATA": COPY_DATA, "EVENT_WRITE": EVENT_WRITE,
  "RELEASE_MEM": RELEASE_MEM, "ACQUIRE_MEM": ACQUIRE_MEM, "SET_SH_REG": SET_SH_REG, "SET_UCONFIG_REG": SET_UCONFIG_REG}

# register windows (dword addresses)
SET_SH_REG_START, SET_SH_REG_END = 0x2C00, 0x3000
SET_UCONFIG_REG_START, SET_UCONFIG_REG_END = 0xC000, 0xC400

# VGT event types (soc21_enum.h; same numbers on gfx9) and EVENT_INDEX values
CACHE_FLUSH_TS, CS_PARTIAL_FLUSH, CACHE_FLUSH_AND_INV_TS_EVENT = 4, 7, 0x14
CACHE_FLUSH_AND_INV_EVENT, BOTTOM_OF_PIPE_TS, CS_DONE = 0x16, 0x28, 0x2F
EVENT_INDEX_CS_PARTIAL_FLUSH = 4   # as the kernel emits EVENT_WRITE(CS_PARTIAL_FLUSH)
EVENT_INDEX_END_OF_PIPE, EVENT_INDEX_SHADER_DONE = 5, 6   # RELEASE_MEM event_index

# RELEASE_MEM dword 1 / dword 2 fields (kfd_pm4_headers_ai.h pm4_mec_release_mem)
RM_EVENT_TYPE_SHIFT, RM_EVENT_INDEX_SHIFT, RM_CACHE_POLICY_SHIFT = 0, 8, 25
RM_DST_SEL_SHIFT, RM_INT_SEL_SHIFT, RM_DATA_SEL_SHIFT = 16, 24, 29
DST_SEL_MEMORY_CONTROLLER, DST_SEL_TC_L2 = 0, 1
INT_SEL_NONE, INT_SEL_SEND_INTERRUPT_ONLY, INT_SEL_SEND_INTERRUPT_AFTER_WRITE_CONFIRM, INT_SEL_SEND_DATA_AFTER_WRITE_CONFIRM = 0, 1, 2, 3
DATA_SEL_NONE, DATA_SEL_32_BIT_LOW, DATA_SEL_64_BIT_DATA, DATA_SEL_GPU_CLOCK_COUNTER, DATA_SEL_CP_PERFCOUNTER = 0, 1, 2, 3, 4
# gfx10/11 RELEASE_MEM cache actions (nvd.h PACKET3_RELEASE_MEM_GCR_*)
RM_GCR_GLM_WB, RM_GCR_GLM_INV, RM_GCR_GLV_INV, RM_GCR_GL1_INV = 1 << 12, 1 << 13, 1 << 14, 1 << 15
RM_GCR_GL2_US, RM_GCR_GL2_RANGE, RM_GCR_GL2_DISCARD = 1 << 16, 1 << 17, 1 << 19
RM_GCR_GL2_INV, RM_GCR_GL2_WB, RM_GCR_SEQ, RM_EXECUTE = 1 << 20, 1 << 21, 1 << 22, 1 << 28
# gfx9 RELEASE_MEM cache actions (soc15d.h EOP_*)
EOP_TCL1_VOL_ACTION_EN, EOP_TC_VOL_ACTION_EN, EOP_TC_WB_ACTION_EN = 1 << 12, 1 << 13, 1 << 15
EOP_TCL1_ACTION_EN, EOP_TC_ACTION_EN, EOP_TC_NC_ACTION_EN, EOP_TC_MD_ACTION_EN = 1 << 16, 1 << 17, 1 << 19, 1 << 21
EOP_EXEC = 1 << 28

# gfx10/11 ACQUIRE_MEM GCR_CNTL (nvd.h PACKET3_ACQUIRE_MEM_GCR_CNTL_*: field shifts; GLI_INV/GL1_RANGE/GL2_RANGE/SEQ are 2 bits)
GCR_GLI_INV_SHIFT, GCR_GL1_RANGE_SHIFT, GCR_GL2_RANGE_SHIFT, GCR_SEQ_SHIFT = 0, 2, 11, 16
GCR_GLM_WB, GCR_GLM_INV, GCR_GLK_WB, GCR_GLK_INV = 1 << 4, 1 << 5, 1 << 6, 1 << 7
GCR_GLV_INV, GCR_GL1_INV, GCR_GL2_US, GCR_GL2_DISCARD = 1 << 8, 1 << 9, 1 << 10, 1 << 13
GCR_GL2_INV, GCR_GL2_WB = 1 << 14, 1 << 15
GCR_GLI_INV_ALL = 1 << GCR_GLI_INV_SHIFT   # CP_GCR_CNTL GLI_INV = 1: invalidate the whole instruction cache
# gfx9 ACQUIRE_MEM CP_COHER_CNTL (soc15d.h PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_*_ACTION_ENA)
COHER_TC_NC_ACTION_ENA, COHER_TC_WC_ACTION_ENA, COHER_TC_INV_METADATA_ACTION_ENA = 1 << 3, 1 << 4, 1 << 5
COHER_TCL1_VOL_ACTION_ENA, COHER_TC_WB_ACTION_ENA, COHER_TCL1_ACTION_ENA, COHER_TC_ACTION_ENA = 1 << 15, 1 << 18, 1 << 22, 1 << 23
COHER_CB_ACTION_ENA, COHER_DB_ACTION_ENA = 1 << 25, 1 << 26
COHER_SH_KCACHE_ACTION_ENA, COHER_SH_KCACHE_VOL_ACTION_ENA, COHER_SH_ICACHE_ACTION_ENA = 1 << 27, 1 << 28, 1 << 29
COHER_SH_KCACHE_WB_ACTION_ENA = 1 << 30

# WAIT_REG_MEM dword 1
WRM_FUNCTION_SHIFT, WRM_MEM_SPACE_SHIFT, WRM_OPERATION_SHIFT, WRM_ENGINE_SHIFT = 0, 4, 6, 8
WRM_ALWAYS, WRM_LT, WRM_LE, WRM_EQ, WRM_NE, WRM_GE, WRM_GT = 0, 1, 2, 3, 4, 5, 6
WRM_SPACE_REGISTER, WRM_SPACE_MEMORY = 0, 1
WRM_ENGINE_ME, WRM_ENGINE_PFP = 0, 1

# WRITE_DATA dword 1
WD_DST_SEL_SHIFT, WD_CACHE_POLICY_SHIFT, WD_ENGINE_SEL_SHIFT = 8, 25, 30
WD_DST_SEL_REGISTER, WD_DST_SEL_MEMORY = 0, 5
WR_ONE_ADDR, WR_CONFIRM = 1 << 16, 1 << 20

# INDIRECT_BUFFER dword 3
IB_SIZE_MASK = (1 << 20) - 1
IB_CHAIN, IB_PRE_ENB, IB_VALID = 1 << 20, 1 << 21, 1 << 23
IB_VMID_SHIFT, IB_CACHE_POLICY_SHIFT, IB_PRE_RESUME, IB_PRIV = 24, 28, 1 << 30, 1 << 31

def header(opcode: int, count: int, shader_type: int = 0) -> int:
  """PACKET3(op, count): count is the number of body dwords minus one; shader_type=SHADER_TYPE_COMPUTE gives PACKET3_COMPUTE."""
  if not 0 <= count <= COUNT_MASK: raise ValueError(f"PM4 packet {opcode:#x}: count {count} does not fit 14 bits")
  if not 0 <= opcode <= 0xFF: raise ValueError(f"PM4 opcode {opcode:#x} does not fit 8 bits")
  return (PACKET_TYPE3 << 30) | (count << 16) | (opcode << 8) | shader_type

def decode_header(dw: int) -> tuple[int, int, int]:
  """(type, count, opcode) of a PM4 header dword."""
  return (dw >> 30) & 3, (dw >> 16) & COUNT_MASK, (dw >> 8) & 0xFF

def packet(opcode: int, *body: int) -> list[int]:
  """A type-3 packet with the given body dwords (each must fit 32 bits)."""
  if not body: raise ValueError(f"PM4 packet {opcode:#x} needs at least one body dword")
  for d in body:
    if not 0 <= d <= 0xFFFFFFFF: raise ValueError(f"PM4 packet {opcode:#x}: body dword {d:#x} does not fit 32 bits")
  return [header(opcode, len(body) - 1), *body]

def _lo(x: int) -> int: return x & 0xFFFFFFFF
def _hi(x: int) -> int: return (x >> 32) & 0xFFFFFFFF

def nop(body_dwords: int = 1) -> list[int]:
  """A NOP of 1 + body_dwords dwords (the CP skips the body)."""
  return packet(NOP, *([0] * body_dwords))

def set_sh_reg(reg: int, *values: int) -> list[int]:
  """Write consecutive SH registers starting at absolute dword address `reg` (0x2C00 <= reg < 0x3000)."""
  if not values: raise ValueError("SET_SH_REG needs at least one value")
  if not (SET_SH_REG_START <= reg and reg + len(values) <= SET_SH_REG_END):
    raise ValueError(f"SET_SH_REG: registers {reg:#x}..{reg + len(values) - 1:#x} are outside the SH window {SET_SH_REG_START:#x}..{SET_SH_REG_END:#x}")
  return packet(SET_SH_REG, reg - SET_SH_REG_START, *values)

def set_uconfig_reg(reg: int, *values: int) -> list[int]:
  """Write consecutive UCONFIG registers starting at absolute dword address `reg` (0xC000 <= reg < 0xC400)."""
  if not values or not (SET_UCONFIG_REG_START <= reg and reg + len(values) <= SET_UCONFIG_REG_END):
    raise ValueError(f"SET_UCONFIG_REG: register {reg:#x} (+{len(values)}) is outside {SET_UCONFIG_REG_START:#x}..{SET_UCONFIG_REG_END:#x}")
  return packet(SET_UCONFIG_REG, reg - SET_UCONFIG_REG_START, *values)

def dispatch_direct(x: int, y: int, z: int, initiator: int) -> list[int]:
  """Launch an x*y*z grid of workgroups; `initiator` is the COMPUTE_DISPATCH_INITIATOR value (see regs.py)."""
  return packet(DISPATCH_DIRECT, x, y, z, initiator)

def event_write(event_type: int, event_index: int = 0) -> list[int]:
  """EVENT_WRITE, e.g. event_write(CS_PARTIAL_FLUSH, EVENT_INDEX_CS_PARTIAL_FLUSH) = wait for prior dispatches."""
  return packet(EVENT_WRITE, (event_type & 0x3F) | ((event_index & 0xF) << 8))

def release_mem(addr: int, value: int, *, event_type: int = CACHE_FLUSH_AND_INV_TS_EVENT, event_index: int = EVENT_INDEX_END_OF_PIPE,
                cache: int = 0, data_sel: int = DATA_SEL_64_BIT_DATA, int_sel: int = INT_SEL_NONE,
                dst_sel: int = DST_SEL_MEMORY_CONTROLLER, ctxid: int = 0) -> list[int]:
  """At end of pipe: do the cache actions in `cache` (RM_GCR_* on gfx10+, EOP_* on gfx9), write `value`
  (64- or 32-bit per data_sel) to `addr`, and with int_sel != 0 raise an interrupt carrying `ctxid` (an event id)."""
  align = 8 if data_sel == DATA_SEL_64_BIT_DATA else 4
  if data_sel in (DATA_SEL_32_BIT_LOW, DATA_SEL_64_BIT_DATA) and addr % align:
    raise ValueError(f"RELEASE_MEM: address {addr:#x} is not {align}-byte aligned for data_sel {data_sel}")
  dw1 = (event_type & 0x3F) | ((event_index & 0xF) << RM_EVENT_INDEX_SHIFT) | cache
  dw2 = (dst_sel << RM_DST_SEL_SHIFT) | (int_sel << RM_INT_SEL_SHIFT) | (data_sel << RM_DATA_SEL_SHIFT)
  return packet(RELEASE_MEM, dw1, dw2, _lo(addr), _hi(addr), _lo(value), _hi(value), ctxid)

def acquire_mem(gfx: int, *, gcr_cntl: int = 0, coher_cntl: int = 0, poll_interval: int = 0x0A) -> list[int]:
  """Make caches coherent for what follows, over the whole address range as the kernel's emit_mem_sync does
  (COHER_SIZE 0xFFFFFFFF, COHER_SIZE_HI 0x00FFFFFF, base 0). gfx10+: count 6, CP_COHER_CNTL 0 and the
  GCR_CNTL dword last; gfx9: count 5 with CP_COHER_CNTL."""
  body = [coher_cntl if gfx < 10 else 0, 0xFFFFFFFF, 0x00FFFFFF, 0, 0, poll_interval]
  if gfx >= 10: body.append(gcr_cntl)
  elif gcr_cntl: raise ValueError("ACQUIRE_MEM on gfx9 has no GCR_CNTL dword; use coher_cntl")
  if gfx >= 10 and coher_cntl: raise ValueError("ACQUIRE_MEM on gfx10+ takes its cache actions in gcr_cntl; CP_COHER_CNTL is 0")
  return packet(ACQUIRE_MEM, *body)

def wait_reg_mem(addr: int, ref: int, mask: int = 0xFFFFFFFF, *, function: int = WRM_GE, mem_space: int = WRM_SPACE_MEMORY,
                 engine: int = WRM_ENGINE_ME, interval: int = 4) -> list[int]:
  """Stall the queue until (mem32[addr] & mask) <function> ref (memory address must be dword aligned)."""
  if mem_space == WRM_SPACE_MEMORY and addr % 4: raise ValueError(f"WAIT_REG_MEM: address {addr:#x} is not dword aligned")
  dw1 = (function << WRM_FUNCTION_SHIFT) | (mem_space << WRM_MEM_SPACE_SHIFT) | (engine << WRM_ENGINE_SHIFT)
  return packet(WAIT_REG_MEM, dw1, _lo(addr), _hi(addr), _lo(ref), _lo(mask), interval & 0xFFFF)

def write_data(addr: int, *values: int, dst_sel: int = WD_DST_SEL_MEMORY, confirm: bool = True, cache_policy: int = 0) -> list[int]:
  """Write dwords to memory (dst_sel 5) or a register (dst_sel 0), incrementing the address per dword."""
  if not values: raise ValueError("WRITE_DATA needs at least one value")
  if dst_sel == WD_DST_SEL_MEMORY and addr % 4: raise ValueError(f"WRITE_DATA: address {addr:#x} is not dword aligned")
  ctl = (dst_sel << WD_DST_SEL_SHIFT) | (WR_CONFIRM if confirm else 0) | (cache_policy << WD_CACHE_POLICY_SHIFT)
  return packet(WRITE_DATA, ctl, _lo(addr), _hi(addr), *values)

def pred_exec(xcc_mask: int, body: list[int]) -> list[int]:
  """`body` runs only on the XCCs in `xcc_mask` (bits 31:24 of dword 1, the predicated dword count in bits 13:0;
  ../shared/abi/amd_packets.json PRED_EXEC; tinygrad@a9069c1:tinygrad/runtime/ops_amd.py:72-77). It works in IBs only
  (ops_amd.py:409).

  >>> [hex(x) for x in pred_exec(1, nop(1))]
  ['0xc0002300', '0x1000002', '0xc0001000', '0x0']
  """
  if not 0 < xcc_mask <= 0xFF: raise ValueError(f"PRED_EXEC: xcc mask {xcc_mask:#x} does not fit 8 bits")
  if not 0 < len(body) <= COUNT_MASK: raise ValueError(f"PRED_EXEC: {len(body)} predicated dwords do not fit 14 bits")
  return packet(PRED_EXEC, (xcc_mask << 24) | len(body)) + body

def indirect_buffer(addr: int, ndwords: int, *, vmid: int = 0, chain: bool = False, cache_policy: int = 0) -> list[int]:
  """Execute `ndwords` dwords of PM4 at `addr` (dword aligned), then continue here (or not, with chain)."""
  if addr % 4: raise ValueError(f"INDIRECT_BUFFER: address {addr:#x} is not dword aligned")
  if not 0 < ndwords <= IB_SIZE_MASK: raise ValueError(f"INDIRECT_BUFFER: size {ndwords} dwords does not fit 20 bits")
  dw3 = ndwords | IB_VALID | (IB_CHAIN if chain else 0) | ((vmid & 0xF) << IB_VMID_SHIFT) | ((cache_policy & 3) << IB_CACHE_POLICY_SHIFT)
  return packet(INDIRECT_BUFFER, _lo(addr), _hi(addr), dw3)
