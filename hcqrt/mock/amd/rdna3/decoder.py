"""Decode gfx1100 (RDNA3) machine code into `Inst` records, and print them the way llvm-objdump does.

Encodings (field layouts from AMD's RDNA3 ISA guide, opcodes in `optables`): SOP1/SOP2/SOPC/SOPK/SOPP,
SMEM, VOP1/VOP2/VOPC (32-bit), VOP3/VOP3SD/VOP3P (64-bit), VOPD (dual issue), DS, FLAT/GLOBAL/SCRATCH.
Anything else is refused by name with its address and raw dword, never guessed.
"""
from __future__ import annotations
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from hcqrt.mock.amd.rdna3 import optables as T

class DecodeError(Exception): pass

@dataclass
class Inst:
  addr: int
  size: int
  enc: str            # encoding name: "SOP2", "VOP3", ...
  op: int
  name: str           # mnemonic as llvm-objdump prints it (with _e32/_e64 where it adds one)
  base: str           # semantic name without the encoding suffix
  f: dict = field(default_factory=dict)   # decoded fields
  lit: int | None = None                  # the 32-bit literal that follows, if any

# VOP3 ops whose destination is an SGPR carry/mask (VOP3SD layout: sdst in bits [14:8])
VOP3SD = {"v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_add_co_ci_u32", "v_sub_co_ci_u32",
          "v_subrev_co_ci_u32", "v_div_scale_f32", "v_div_scale_f64", "v_mad_u64_u32", "v_mad_i64_i32"}
# VOP1/VOP2 ops that llvm-objdump prints without the _e32 suffix
NO_SUFFIX = {"v_nop", "v_readfirstlane_b32", "v_swap_b32", "v_fmamk_f32", "v_fmaak_f32", "v_fmamk_f16",
             "v_fmaak_f16", "v_dot2acc_f32_f16", "v_pk_fmac_f16"}
LITERAL = 255

def _bits(w: int, lo: int, n: int) -> int: return (w >> lo) & ((1 << n) - 1)

def dword_reader(code: bytes, addr: int) -> Callable[[int], int]:
  """dw(i): dword i of the instruction at byte offset `addr` of `code`; DecodeError where the code ends first."""
  def dw(i: int) -> int:
    if addr + 4 * i + 4 > len(code): raise DecodeError(f"truncated instruction at 0x{addr:x}")
    return struct.unpack_from("<I", code, addr + 4 * i)[0]
  return dw

def _lookup(table: dict, op: int, enc: str, addr: int, w: int) -> str:
  if op not in table: raise DecodeError(f"unknown {enc} opcode {op} (0x{op:x}) at 0x{addr:x}, dword 0x{w:08x}")
  return table[op]

def decode_one(code: bytes, addr: int) -> Inst:
  """Decode the instruction at byte offset `addr` of `code`."""
  dw = dword_reader(code, addr)
  w = dw(0)
  top9, top6 = w >> 23, w >> 26
  if top9 in (0x17D, 0x17E, 0x17F) or w >> 28 == 0xB or w >> 30 == 2:
    if top9 == 0x17D: enc, op, f = "SOP1", _bits(w, 8, 8), dict(sdst=_bits(w, 16, 7), ssrc0=_bits(w, 0, 8))
    elif top9 == 0x17E: enc, op, f = "SOPC", _bits(w, 16, 7), dict(ssrc0=_bits(w, 0, 8), ssrc1=_bits(w, 8, 8))
    elif top9 == 0x17F: enc, op, f = "SOPP", _bits(w, 16, 7), dict(simm16=_bits(w, 0, 16))
    elif w >> 28 == 0xB: enc, op, f = "SOPK", _bits(w, 23, 5), dict(sdst=_bits(w, 16, 7), simm16=_bits(w, 0, 16))
    else: enc, op, f = "SOP2", _bits(w, 23, 7), dict(sdst=_bits(w, 16, 7), ssrc0=_bits(w, 0, 8), ssrc1=_bits(w, 8, 8))
    name = _lookup(getattr(T, enc), op, enc, addr, w)
    lit = dw(1) if LITERAL in (f.get("ssrc0"), f.get("ssrc1")) or name == "s_setreg_imm32_b32" else None
    return Inst(addr, 8 if lit is not None else 4, enc, op, name, name, f, lit)
  if top6 == 0x3D:  # SMEM
    w1 = dw(1); op = _bits(w, 18, 8); name = _lookup(T.SMEM, op, "SMEM", addr, w)
    off = _bits(w1, 0, 21); off -= (1 << 21) if off >> 20 else 0
    f = dict(sdata=_bits(w, 6, 7), sbase=_bits(w, 0, 6) * 2, glc=_bits(w, 14, 1), dlc=_bits(w, 13, 1),
             offset=off, soffset=_bits(w1, 25, 7))
    return Inst(addr, 8, "SMEM", op, name, name, f)
  if w >> 31 == 0:  # VOP1 / VOPC / VOP2
    if w >> 25 == 0x3F: enc, op, f = "VOP1", _bits(w, 9, 8), dict(vdst=_bits(w, 17, 8), src0=_bits(w, 0, 9))
    elif w >> 25 == 0x3E: enc, op, f = "VOPC", _bits(w, 17, 8), dict(src0=_bits(w, 0, 9), vsrc1=_bits(w, 9, 8))
    else: enc, op, f = "VOP2", _bits(w, 25, 6), dict(vdst=_bits(w, 17, 8), src0=_bits(w, 0, 9), vsrc1=_bits(w, 9, 8))
    base = _lookup(getattr(T, enc), op, enc, addr, w)
    if f["src0"] in (0xF9, 0xFA, 0xE9, 0xEA): raise DecodeError(f"{base}: SDWA/DPP operand {f['src0']} at 0x{addr:x} not supported")
    lit = dw(1) if f["src0"] == LITERAL or base in ("v_fmamk_f32", "v_fmaak_f32", "v_fmamk_f16", "v_fmaak_f16") else None
    name = base if base in NO_SUFFIX else base + "_e32"
    return Inst(addr, 8 if lit is not None else 4, enc, op, name, base, f, lit)
  if top6 == 0x35:  # VOP3 / VOP3SD
    w1 = dw(1); op = _bits(w, 16, 10)
    if op < 0x100: base, promoted = _lookup(T.VOPC, op, "VOP3(VOPC)", addr, w), True
    elif op < 0x180: base, promoted = _lookup(T.VOP2, op - 0x100, "VOP3(VOP2)", addr, w), True
    elif op < 0x200: base, promoted = _lookup(T.VOP1, op - 0x180, "VOP3(VOP1)", addr, w), True
    else: base, promoted = _lookup(T.VOP3, op, "VOP3", addr, w), False
    f = dict(vdst=_bits(w, 0, 8), clamp=_bits(w, 15, 1), src0=_bits(w1, 0, 9), src1=_bits(w1, 9, 9),
             src2=_bits(w1, 18, 9), omod=_bits(w1, 27, 2), neg=_bits(w1, 29, 3))
    sd = base in VOP3SD
    if sd: f.update(sdst=_bits(w, 8, 7), abs=0, opsel=0)
    else: f.update(abs=_bits(w, 8, 3), opsel=_bits(w, 11, 4))
    if any(f[s] in (0xF9, 0xFA, 0xE9, 0xEA) for s in ("src0", "src1", "src2")): raise DecodeError(f"{base}: DPP operand at 0x{addr:x} not supported")
    lit = dw(2) if LITERAL in (f["src0"], f["src1"], f["src2"]) else None
    name = base + "_e64" if promoted and base not in NO_SUFFIX else base
    return Inst(addr, 12 if lit is not None else 8, "VOP3SD" if sd else "VOP3", op, name, base, f, lit)
  if w >> 24 == 0xCC:  # VOP3P
    w1 = dw(1); op = _bits(w, 16, 7); name = _lookup(T.VOP3P, op, "VOP3P", addr, w)
    f = dict(vdst=_bits(w, 0, 8), neg_hi=_bits(w, 8, 3), opsel=_bits(w, 11, 3), opsel_hi2=_bits(w, 14, 1), clamp=_bits(w, 15, 1),
             src0=_bits(w1, 0, 9), src1=_bits(w1, 9, 9), src2=_bits(w1, 18, 9), opsel_hi=_bits(w1, 27, 2), neg=_bits(w1, 29, 3))
    lit = dw(2) if LITERAL in (f["src0"], f["src1"], f["src2"]) else None
    return Inst(addr, 12 if lit is not None else 8, "VOP3P", op, name, name, f, lit)
  if top6 == 0x32:  # VOPD: two VALU ops issued together
    w1 = dw(1); opx, opy = _bits(w, 22, 4), _bits(w, 17, 5)
    x, y = _lookup(T.VOPD, opx, "VOPDX", addr, w), _lookup(T.VOPD, opy, "VOPDY", addr, w)
    vdstx = _bits(w1, 24, 8)
    f = dict(opx="v_" + x, opy="v_" + y, src0x=_bits(w, 0, 9), vsrc1x=_bits(w, 9, 8), src0y=_bits(w1, 0, 9),
             vsrc1y=_bits(w1, 9, 8), vdstx=vdstx, vdsty=(_bits(w1, 17, 7) << 1) | ((vdstx & 1) ^ 1))
    lit = dw(2) if LITERAL in (f["src0x"], f["src0y"]) or any(o in (x, y) for o in ("fmaak_f32", "fmamk_f32")) else None
    return Inst(addr, 12 if lit is not None else 8, "VOPD", (opx << 5) | opy, f"v_dual_{x}", "vopd", f, lit)
  if top6 == 0x36:  # DS
    w1 = dw(1); op = _bits(w, 18, 8); name = _lookup(T.DS, op, "DS", addr, w)
    f = dict(offset0=_bits(w, 0, 8), offset1=_bits(w, 8, 8), gds=_bits(w, 17, 1), addr=_bits(w1, 0, 8),
             data0=_bits(w1, 8, 8), data1=_bits(w1, 16, 8), vdst=_bits(w1, 24, 8))
    if f["gds"]: raise DecodeError(f"{name}: GDS at 0x{addr:x} not supported")
    return Inst(addr, 8, "DS", op, name, name, f)
  if top6 == 0x37:  # FLAT / SCRATCH / GLOBAL share one layout; seg picks the address space
    w1 = dw(1); op, seg = _bits(w, 18, 7), _bits(w, 16, 2)
    if seg == 3: raise DecodeError(f"reserved FLAT segment 3 at 0x{addr:x}, dword 0x{w:08x}")
    enc = ("FLAT", "SCRATCH", "GLOBAL")[seg]
    name = _lookup(T.GLOBAL if seg else T.FLAT, op, enc, addr, w).replace("global_", "scratch_" if seg == 1 else "global_")
    if seg == 1 and "atomic" in name: raise DecodeError(f"{name} at 0x{addr:x}: scratch atomics are not supported")
    off = _bits(w, 0, 13); off -= (1 << 13) if off >> 12 else 0
    f = dict(offset=off, glc=_bits(w, 14, 1), slc=_bits(w, 15, 1), dlc=_bits(w, 13, 1), addr=_bits(w1, 0, 8),
             data=_bits(w1, 8, 8), saddr=_bits(w1, 16, 7), vdst=_bits(w1, 24, 8), sve=_bits(w1, 23, 1))   # SVE: scratch VGPR address on
    return Inst(addr, 8, enc, op, name, name, f)
  if top6 == 0x38 and _bits(w, 18, 8) in MUBUF_CACHE_OPS:   # cache invalidations a workgroup-scope acquire emits
    return Inst(addr, 8, "MUBUF", _bits(w, 18, 8), MUBUF_CACHE_OPS[_bits(w, 18, 8)], MUBUF_CACHE_OPS[_bits(w, 18, 8)], {})
  kind = {0x38: "MUBUF", 0x3A: "MTBUF", 0x3C: "MIMG", 0x3E: "EXP", 0x33: "VINTERP/LDSDIR"}.get(top6, "unknown")
  raise DecodeError(f"{kind} encoding at 0x{addr:x} (dword 0x{w:08x}) not supported by the RDNA3 emulator")

MUBUF_CACHE_OPS = {0x2B: "buffer_gl0_inv", 0x2C: "buffer_gl1_inv"}   # gfx11 MUBUF opcodes (LLVM's gfx11 MUBUF table)

def decode(code: bytes, start: int = 0, end: int | None = None) -> list[Inst]:
  """Decode a straight run of instructions; stops at the first s_code_end (padding after the kernel).

  >>> [i.name for i in decode(bytes.fromhex("0000b0bf"))]
  ['s_endpgm']
  """
  out, pc, end = [], start, len(code) if end is None else end
  while pc < end:
    i = decode_one(code, pc)
    if i.name == "s_code_end": break
    out.append(i); pc += i.size
  return out
