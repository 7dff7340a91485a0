"""SDMA packets for a KFD SDMA queue, as builders returning lists of dwords.

Facts (not in ../shared/abi): the kernel's sdma_v6_0_0_pkt_open.h (SDMA 6.0, gfx11) and
vega10_sdma_pkt_open.h (SDMA 4.x, gfx9), recorded with their commits in tests/abi_facts/amd_sdma.json.
Every packet starts with a header dword: op in bits 7:0, sub_op in 15:8. The layouts used here are the
same in both generations except where `gfx` is consulted (FENCE's cache bits and GCR_REQ are SDMA 6 only;
the COPY_LINEAR count field is 30 bits on SDMA 6 and 22 bits on SDMA 4).

  >>> [hex(x) for x in copy_linear(0x2000, 0x1000, 256, gfx=11)]
  ['0x1', '0xff', '0x0', '0x1000', '0x0', '0x2000', '0x0']
"""
from __future__ import annotations

OP_NOP, OP_COPY, OP_WRITE, OP_INDIRECT, OP_FENCE, OP_TRAP, OP_SEM, OP_POLL_REGMEM = 0, 1, 2, 4, 5, 6, 7, 8
OP_COND_EXE, OP_ATOMIC, OP_CONST_FILL, OP_PTEPDE, OP_TIMESTAMP, OP_SRBM_WRITE, OP_PRE_EXE = 9, 10, 11, 12, 13, 14, 15
OP_GCR_REQ = 17                                    # SDMA 6 only
OP_DUMMY_TRAP = {11: 32, 9: 16}                    # renumbered between SDMA 4 and 6
SUBOP_COPY_LINEAR, SUBOP_WRITE_LINEAR = 0, 0
SUBOP_USER_GCR = 1   # GCR_REQ from a user-mode queue (ROCR@c7785a6:runtime/hsa-runtime/core/inc/sdma_registers.h:66)
OP_SHIFT, SUB_OP_SHIFT = 0, 8

COPY_COUNT_MASK = {11: 0x3FFFFFFF, 9: 0x003FFFFF}   # COUNT holds bytes - 1
COPY_MAX_BYTES = {11: COPY_COUNT_MASK[11] + 1, 9: COPY_COUNT_MASK[9] + 1}
NOP_COUNT_SHIFT, NOP_COUNT_MASK = 16, 0x3FFF
TRAP_INT_CONTEXT_MASK = 0x0FFFFFFF
# POLL_REGMEM header fields
POLL_HDP_FLUSH_SHIFT, POLL_FUNC_SHIFT, POLL_MEM_POLL_SHIFT = 26, 28, 31
POLL_CACHE_POLICY_SHIFT_V6, POLL_CPV_SHIFT_V6 = 20, 24
POLL_INTERVAL_MASK, POLL_RETRY_SHIFT, POLL_RETRY_MASK = 0xFFFF, 16, 0xFFF
FUNC_ALWAYS, FUNC_LT, FUNC_LE, FUNC_EQ, FUNC_NE, FUNC_GE, FUNC_GT = 0, 1, 2, 3, 4, 5, 6
# FENCE header (SDMA 6)
FENCE_MTYPE_SHIFT, FENCE_GCC_SHIFT, FENCE_SYS_SHIFT, FENCE_SNP_SHIFT, FENCE_GPA_SHIFT = 16, 19, 20, 22, 23
FENCE_L2_POLICY_SHIFT, FENCE_LLC_POLICY_SHIFT, FENCE_CPV_SHIFT = 24, 26, 28
# GCR_REQ gcr_control bits (SDMA_GCR_*; 19-bit control split over PAYLOAD2[31:16] and PAYLOAD3[2:0])
GCR_GLI_INV_SHIFT, GCR_GL1_RANGE_SHIFT, GCR_GL2_RANGE_SHIFT, GCR_SEQ_SHIFT = 0, 2, 11, 16
GCR_GLM_WB, GCR_GLM_INV, GCR_GLK_WB, GCR_GLK_INV, GCR_GLV_INV, GCR_GL1_INV = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8, 1 << 9
GCR_GL2_US, GCR_GL2_DISCARD, GCR_GL2_INV, GCR_GL2_WB, GCR_RANGE_IS_PA = 1 << 10, 1 << 13, 1 << 14, 1 << 15, 1 << 18

def _check_gfx(gfx: int) -> None:
  if gfx not in COPY_COUNT_MASK: raise ValueError(f"SDMA packets are defined here for gfx9 (SDMA 4) and gfx11 (SDMA 6), not gfx{gfx}")

def header(op: int, sub_op: int = 0, extra: int = 0) -> int:
  """An SDMA header dword: op, sub_op and the packet's own header bits."""
  return (op & 0xFF) | ((sub_op & 0xFF) << SUB_OP_SHIFT) | extra

def _lo(x: int) -> int: return x & 0xFFFFFFFF
def _hi(x: int) -> int: return (x >> 32) & 0xFFFFFFFF

def copy_linear(dst: int, src: int, nbytes: int, *, gfx: int) -> list[int]:
  """One COPY_LINEAR of `nbytes` (1..COPY_MAX_BYTES[gfx]) from `src` to `dst` (GPU virtual addresses)."""
  _check_gfx(gfx)
  if not 0 < nbytes <= COPY_MAX_BYTES[gfx]: raise ValueError(f"SDMA COPY_LINEAR on gfx{gfx}: {nbytes} bytes is outside 1..{COPY_MAX_BYTES[gfx]}")
  return [header(OP_COPY, SUBOP_COPY_LINEAR), nbytes - 1, 0, _lo(src), _hi(src), _lo(dst), _hi(dst)]

def copy(dst: int, src: int, nbytes: int, *, gfx: int) -> list[int]:
  """As many COPY_LINEAR packets as `nbytes` needs."""
  out, off = [], 0
  while off < nbytes:
    n = min(nbytes - off, COPY_MAX_BYTES[gfx])
    out += copy_linear(dst + off, src + off, n, gfx=gfx)
    off += n
  return out

def fence(addr: int, value: int, *, gfx: int, mtype: int = 0) -> list[int]:
  """Write the 32-bit `value` to `addr` (dword aligned) once everything before it has completed.
  `mtype` (SDMA 6 only) selects the memory type of the write; 3 is uncached."""
  _check_gfx(gfx)
  if addr % 4: raise ValueError(f"SDMA FENCE: address {addr:#x} is not dword aligned")
  if mtype and gfx < 11: raise ValueError("SDMA FENCE mtype exists on SDMA 6 (gfx11) only")
  return [header(OP_FENCE, 0, mtype << FENCE_MTYPE_SHIFT), _lo(addr), _hi(addr), _lo(value)]

def poll_regmem(addr: int, ref: int, mask: int = 0xFFFFFFFF, *, func: int = FUNC_GE, interval: int = 10, retry: int = 0xFFF,
                mem_poll: bool = True, gfx: int) -> list[int]:
  """Stall the SDMA queue until (mem32[addr] & mask) <func> ref; retry 0xFFF = forever."""
  _check_gfx(gfx)
  if mem_poll and addr % 4: raise ValueError(f"SDMA POLL_REGMEM: address {addr:#x} is not dword aligned")
  hdr = header(OP_POLL_REGMEM, 0, ((func & 7) << POLL_FUNC_SHIFT) | (int(mem_poll) << POLL_MEM_POLL_SHIFT))
  return [hdr, _lo(addr), _hi(addr), _lo(ref), _lo(mask), (interval & POLL_INTERVAL_MASK) | ((retry & POLL_RETRY_MASK) << POLL_RETRY_SHIFT)]

def trap(int_context: int = 0, *, gfx: int) -> list[int]:
  """Raise an SDMA trap interrupt carrying `int_context` (28 bits)."""
  _check_gfx(gfx)
  if not 0 <= int_context <= TRAP_INT_CONTEXT_MASK: raise ValueError(f"SDMA TRAP int_context {int_context:#x} does not fit 28 bits")
  return [header(OP_TRAP), int_context]

SUBOP_TIMESTAMP_GET_GLOBAL = 2

def timestamp(addr: int) -> list[int]:
  """TIMESTAMP / GET_GLOBAL_TIMESTAMP: write the 64-bit GPU clock to `addr` (8-byte aligned)."""
  if addr % 8: raise ValueError(f"SDMA timestamp address {addr:#x} must be 8-byte aligned")
  return [header(OP_TIMESTAMP, SUBOP_TIMESTAMP_GET_GLOBAL), _lo(addr), _hi(addr)]

def nop(ndwords: int = 1) -> list[int]:
  """`ndwords` dwords of padding as one NOP packet (header count = ndwords - 1)."""
  if not 1 <= ndwords <= NOP_COUNT_MASK + 1: raise ValueError(f"SDMA NOP of {ndwords} dwords does not fit the 14-bit count")
  return [header(OP_NOP, 0, (ndwords - 1) << NOP_COUNT_SHIFT)] + [0] * (ndwords - 1)

def gcr_req(gcr_control: int, base: int = 0, limit: int = 0, vmid: int = 0, sub_op: int = 0) -> list[int]:
  """SDMA 6 cache control over [base, limit] (128-byte granules), e.g. GCR_GL2_WB | GCR_GL2_INV | GCR_GLV_INV
  (sub_op SUBOP_USER_GCR on a user-mode queue, as ROCr issues it). The range matters only with a GL1/GL2 RANGE field
  other than 0 (ALL); with ALL, ROCr and the kernel leave BASE_VA and LIMIT_VA 0 (ROCR@c7785a6:runtime/hsa-runtime/
  core/runtime/amd_blit_sdma.cpp:1093 memsets the packet; linux@v6.12.117 sdma_v6_0.c:304-310 writes 0), as the
  defaults here do.

  >>> hex(gcr_req(GCR_GL2_WB | GCR_GLK_WB, sub_op=SUBOP_USER_GCR)[0]), hex(gcr_req(GCR_GL2_WB)[2] >> 16)
  ('0x111', '0x8000')
  """
  if not 0 <= gcr_control < (1 << 19): raise ValueError(f"SDMA GCR_REQ control {gcr_control:#x} does not fit 19 bits")
  b, lim = base >> 7, limit >> 7
  return [header(OP_GCR_REQ, sub_op), (b & 0x1FFFFFF) << 7, ((b >> 25) & 0xFFFF) | ((gcr_control & 0xFFFF) << 16),
          ((gcr_control >> 16) & 7) | ((lim & 0x1FFFFFF) << 7), ((lim >> 25) & 0xFFFF) | ((vmid & 0xF) << 24)]
