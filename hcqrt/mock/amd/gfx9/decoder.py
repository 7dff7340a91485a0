"""Decode gfx942 (GFX9 family) machine code into the RDNA3 emulator's `Inst` records.

Field layouts: AMD "AMD Instinct MI300 ISA" reference, chapter 12 (microcode formats), the same as LLVM's GFX9
encodings (llvm-objdump-19 --mcpu=gfx942 is the oracle in tests/mock/test_gfx942_emu.py). `Inst.name` is the mnemonic
llvm-objdump prints (with _e32/_e64/_sdwa/_dpp where it adds one); `Inst.base` names the operation the way the shared
executor (rdna3/executor.py) knows it: the gfx11 name of the same semantics (global_load_dword -> global_load_b32,
v_add_u32 -> v_add_nc_u32, ...). Fields that mean "no register" (FLAT saddr off, SMEM without soffset) hold `OFF`.
Anything not in the tables is refused by name with its address and raw dword, never guessed.
"""
from __future__ import annotations
import re
from hcqrt.mock.amd.rdna3.decoder import DecodeError, Inst, _bits, dword_reader
from hcqrt.mock.amd.gfx9 import optables as T

OFF = 0x1FF          # no register: outside every 7/8/9-bit operand field, so it never aliases one
LITERAL, SDWA, DPP = 255, 0xF9, 0xFA
SADDR_OFF = 0x7F     # GFX9 FLAT/GLOBAL: saddr 0x7F disables the scalar base
VOP3B = {"v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_addc_co_u32", "v_subb_co_u32", "v_subbrev_co_u32",
         "v_div_scale_f32", "v_div_scale_f64", "v_mad_u64_u32", "v_mad_i64_i32"}
# VOP1/VOP2 ops llvm-objdump prints without the _e32 suffix
NO_SUFFIX = {"v_nop", "v_readfirstlane_b32", "v_swap_b32", "v_madmk_f32", "v_madak_f32", "v_fmamk_f32", "v_fmaak_f32",
             "v_madmk_f16", "v_madak_f16", "v_accvgpr_mov_b32", "v_dot2c_f32_f16", "v_dot2c_i32_i16", "v_dot4c_i32_i8",
             "v_dot8c_i32_i4", "v_pk_fmac_f16", "v_clrexcp"}

# gfx9 name -> the executor's (gfx11) name for the same operation
RENAME = {
  "s_andn2_b32": "s_and_not1_b32", "s_andn2_b64": "s_and_not1_b64", "s_orn2_b32": "s_or_not1_b32", "s_orn2_b64": "s_or_not1_b64",
  "s_andn2_saveexec_b64": "s_and_not1_saveexec_b64", "s_andn1_saveexec_b64": "s_and_not0_saveexec_b64",
  "s_orn2_saveexec_b64": "s_or_not1_saveexec_b64", "s_andn2_wrexec_b64": "s_and_not1_wrexec_b64",
  "s_andn1_wrexec_b64": "s_and_not0_wrexec_b64",
  "s_ff1_i32_b32": "s_ctz_i32_b32", "s_flbit_i32_b32": "s_clz_i32_u32", "s_flbit_i32": "s_cls_i32",
  "v_add_u32": "v_add_nc_u32", "v_sub_u32": "v_sub_nc_u32", "v_subrev_u32": "v_subrev_nc_u32",
  "v_add_i32": "v_add_nc_i32", "v_sub_i32": "v_sub_nc_i32", "v_add_u16": "v_add_nc_u16", "v_sub_u16": "v_sub_nc_u16",
  # MI300 ISA VOP2 40 / VOP3 296 V_SUBREV_U16: D0.u16 = S1.u16 - S0.u16 (gfx9/executor.py adds it as v_subrev_nc_u16)
  "v_subrev_u16": "v_subrev_nc_u16",
  "v_addc_co_u32": "v_add_co_ci_u32", "v_subb_co_u32": "v_sub_co_ci_u32", "v_subbrev_co_u32": "v_subrev_co_ci_u32",
  "v_ffbh_u32": "v_clz_i32_u32", "v_ffbl_b32": "v_ctz_i32_b32", "v_ffbh_i32": "v_cls_i32",
  "v_cvt_pkrtz_f16_f32": "v_cvt_pk_rtz_f16_f32", "v_cvt_flr_i32_f32": "v_cvt_floor_i32_f32",
  "v_cvt_rpi_i32_f32": "v_cvt_nearest_i32_f32", "v_cvt_pknorm_i16_f32": "v_cvt_pk_norm_i16_f32",
  "v_cvt_pknorm_u16_f32": "v_cvt_pk_norm_u16_f32",
  "ds_write2_b32": "ds_store_2addr_b32", "ds_write2st64_b32": "ds_store_2addr_stride64_b32", "ds_write2_b64": "ds_store_2addr_b64",
  "ds_write2st64_b64": "ds_store_2addr_stride64_b64", "ds_read2_b32": "ds_load_2addr_b32",
  "ds_read2st64_b32": "ds_load_2addr_stride64_b32", "ds_read2_b64": "ds_load_2addr_b64", "ds_read2st64_b64": "ds_load_2addr_stride64_b64",
  "ds_write_b8_d16_hi": "ds_store_b8_d16_hi", "ds_write_b16_d16_hi": "ds_store_b16_d16_hi",
}
_MEM_SIZE = {"dword": "b32", "dwordx2": "b64", "dwordx3": "b96", "dwordx4": "b128", "dwordx8": "b256", "dwordx16": "b512",
             "ubyte": "u8", "sbyte": "i8", "ushort": "u16", "sshort": "i16", "byte": "b8", "short": "b16"}
_ATOMIC = {"swap": "swap_b32", "cmpswap": "cmpswap_b32", "add": "add_u32", "sub": "sub_u32", "smin": "min_i32", "umin": "min_u32",
           "smax": "max_i32", "umax": "max_u32", "and": "and_b32", "or": "or_b32", "xor": "xor_b32", "inc": "inc_u32",
           "dec": "dec_u32", "add_f32": "add_f32", "swap_x2": "swap_b64", "cmpswap_x2": "cmpswap_b64", "add_x2": "add_u64",
           "add_f64": "add_f64", "min_f64": "min_f64", "max_f64": "max_f64"}

def base_name(name: str) -> str:
  """The executor's name for gfx9 mnemonic `name` (without encoding suffix).

  >>> base_name("global_load_dwordx2"), base_name("s_andn2_b64"), base_name("ds_read_u16_d16_hi")
  ('global_load_b64', 's_and_not1_b64', 'ds_load_u16_d16_hi')
  """
  if name in RENAME: return RENAME[name]
  if m := re.fullmatch(r"s_(load|buffer_load)_(dword\w*)", name): return f"s_{m[1]}_{_MEM_SIZE[m[2]]}"
  if m := re.fullmatch(r"(global|flat|scratch)_(load|store)_(\w+?)(_d16(?:_hi)?)?", name):
    seg, op, what, d16 = m.groups()
    if d16: return f"{seg}_{op}_{d16[1:]}_{_MEM_SIZE[what]}" if what in _MEM_SIZE else name   # load_short_d16_hi -> load_d16_hi_b16
    return f"{seg}_{op}_{_MEM_SIZE.get(what, what)}"
  if m := re.fullmatch(r"(global|flat)_atomic_(\w+)", name): return f"{m[1]}_atomic_{_ATOMIC.get(m[2], m[2])}"
  if m := re.fullmatch(r"ds_(read|write)_(b\d+|u8|i8|u16|i16)(_d16(?:_hi)?)?", name):
    return f"ds_{'load' if m[1] == 'read' else 'store'}_{m[2]}{m[3] or ''}"
  return name


def _lookup(table: dict, op: int, enc: str, addr: int, w: int) -> str:
  if op not in table: raise DecodeError(f"unknown gfx942 {enc} opcode {op} (0x{op:x}) at 0x{addr:x}, dword 0x{w:08x}")
  return table[op]

def _sdwa(w1: int, vopc: bool) -> dict:
  """The SDWA dword (ISA 12.7, "SDWA"): operand selects, extension and modifiers, destination select (VOPC: sdst)."""
  f = dict(src0=_bits(w1, 0, 8) + (0 if _bits(w1, 23, 1) else 256), src0_sel=_bits(w1, 16, 3), src0_sext=_bits(w1, 19, 1),
           src0_neg=_bits(w1, 20, 1), src0_abs=_bits(w1, 21, 1), src1_sel=_bits(w1, 24, 3), src1_sext=_bits(w1, 27, 1),
           src1_neg=_bits(w1, 28, 1), src1_abs=_bits(w1, 29, 1), s1=_bits(w1, 31, 1))
  if vopc: f.update(sdst=_bits(w1, 8, 7) if _bits(w1, 15, 1) else None, clamp=_bits(w1, 13, 1))
  else: f.update(dst_sel=_bits(w1, 8, 3), dst_unused=_bits(w1, 11, 2), clamp=_bits(w1, 13, 1), omod=_bits(w1, 14, 2))
  return f

def _dpp(w1: int) -> dict:
  """The DPP dword (ISA 12.7, "DPP"): source VGPR, lane pattern, bound_ctrl, modifiers, bank and row masks."""
  return dict(src0=_bits(w1, 0, 8) + 256, dpp_ctrl=_bits(w1, 8, 9), bound_ctrl=_bits(w1, 19, 1), src0_neg=_bits(w1, 20, 1),
              src0_abs=_bits(w1, 21, 1), src1_neg=_bits(w1, 22, 1), src1_abs=_bits(w1, 23, 1), bank_mask=_bits(w1, 24, 4),
              row_mask=_bits(w1, 28, 4))

def decode_one(code: bytes, addr: int) -> Inst:
  """Decode the gfx942 instruction at byte offset `addr` of `code`.

  >>> decode_one(bytes.fromhex("0000 81bf".replace(" ", "")), 0).name
  's_endpgm'
  """
  dw = dword_reader(code, addr)
  w = dw(0)
  top9, top6 = w >> 23, w >> 26
  if w >> 30 == 2:   # scalar ALU
    if top9 == 0x17D: enc, op, f = "SOP1", _bits(w, 8, 8), dict(sdst=_bits(w, 16, 7), ssrc0=_bits(w, 0, 8))
    elif top9 == 0x17E: enc, op, f = "SOPC", _bits(w, 16, 7), dict(ssrc0=_bits(w, 0, 8), ssrc1=_bits(w, 8, 8))
    elif top9 == 0x17F: enc, op, f = "SOPP", _bits(w, 16, 7), dict(simm16=_bits(w, 0, 16))
    elif w >> 28 == 0xB: enc, op, f = "SOPK", _bits(w, 23, 5), dict(sdst=_bits(w, 16, 7), simm16=_bits(w, 0, 16))
    else: enc, op, f = "SOP2", _bits(w, 23, 7), dict(sdst=_bits(w, 16, 7), ssrc0=_bits(w, 0, 8), ssrc1=_bits(w, 8, 8))
    name = _lookup(getattr(T, enc), op, enc, addr, w)
    lit = dw(1) if LITERAL in (f.get("ssrc0"), f.get("ssrc1")) else None
    return Inst(addr, 8 if lit is not None else 4, enc, op, name, base_name(name), f, lit)
  if w >> 31 == 0:   # VOP1 / VOPC / VOP2
    if w >> 25 == 0x3F: enc, op, f = "VOP1", _bits(w, 9, 8), dict(vdst=_bits(w, 17, 8), src0=_bits(w, 0, 9))
    elif w >> 25 == 0x3E: enc, op, f = "VOPC", _bits(w, 17, 8), dict(src0=_bits(w, 0, 9), vsrc1=_bits(w, 9, 8))
    else: enc, op, f = "VOP2", _bits(w, 25, 6), dict(vdst=_bits(w, 17, 8), src0=_bits(w, 0, 9), vsrc1=_bits(w, 9, 8))
    base = _lookup(getattr(T, enc), op, enc, addr, w)
    if f["src0"] == SDWA:
      f.update(_sdwa(dw(1), enc == "VOPC"), sdwa=True)
      return Inst(addr, 8, enc, op, base + "_sdwa", base_name(base), f)
    if f["src0"] == DPP:
      f.update(_dpp(dw(1)), dpp=True)
      return Inst(addr, 8, enc, op, base + "_dpp", base_name(base), f)
    lit = dw(1) if f["src0"] == LITERAL or base in ("v_madmk_f32", "v_madak_f32", "v_fmamk_f32", "v_fmaak_f32", "v_madmk_f16", "v_madak_f16") else None
    return Inst(addr, 8 if lit is not None else 4, enc, op, base if base in NO_SUFFIX else base + "_e32", base_name(base), f, lit)
  if top6 == 0x30:   # SMEM
    w1 = dw(1); op = _bits(w, 18, 8); name = _lookup(T.SMEM, op, "SMEM", addr, w)
    imm, soe = _bits(w, 17, 1), _bits(w, 14, 1)
    off = _bits(w1, 0, 21); off -= (1 << 21) if off >> 20 else 0
    soffset = _bits(w1, 25, 7) if soe else OFF
    if not imm: off, soffset = 0, _bits(w1, 0, 7)   # the offset field names an SGPR holding the offset
    f = dict(sdata=_bits(w, 6, 7), sbase=_bits(w, 0, 6) * 2, glc=_bits(w, 16, 1), offset=off, soffset=soffset, imm=imm, soe=soe)
    return Inst(addr, 8, "SMEM", op, name, base_name(name), f)
  if top9 == 0x1A7:  # VOP3P
    w1 = dw(1); op = _bits(w, 16, 7); name = _lookup(T.VOP3P, op, "VOP3P", addr, w)
    f = dict(vdst=_bits(w, 0, 8), neg_hi=_bits(w, 8, 3), opsel=_bits(w, 11, 3), opsel_hi2=_bits(w, 14, 1), clamp=_bits(w, 15, 1),
             src0=_bits(w1, 0, 9), src1=_bits(w1, 9, 9), src2=_bits(w1, 18, 9), opsel_hi=_bits(w1, 27, 2), neg=_bits(w1, 29, 3))
    return Inst(addr, 8, "VOP3P", op, name, base_name(name), f)
  if top6 == 0x34:   # VOP3 / VOP3b: promoted VOPC (0-255), VOP2 (256-319), VOP1 (320-447), VOP3-only (448-)
    w1 = dw(1); op = _bits(w, 16, 10); name = _lookup(T.VOP3, op, "VOP3", addr, w)
    f = dict(vdst=_bits(w, 0, 8), clamp=_bits(w, 15, 1), src0=_bits(w1, 0, 9), src1=_bits(w1, 9, 9), src2=_bits(w1, 18, 9),
             omod=_bits(w1, 27, 2), neg=_bits(w1, 29, 3))
    sd = name in VOP3B
    if sd: f.update(sdst=_bits(w, 8, 7), abs=0, opsel=0)
    else: f.update(abs=_bits(w, 8, 3), opsel=_bits(w, 11, 4))
    if any(f[s] in (LITERAL, SDWA, DPP) for s in ("src0", "src1", "src2")):   # GFX9 VOP3 has no literal, SDWA or DPP operand
      raise DecodeError(f"{name}: operand code {LITERAL}/{SDWA}/{DPP} in a gfx942 VOP3 at 0x{addr:x} is not valid")
    return Inst(addr, 8, "VOP3SD" if sd else "VOP3", op, name + "_e64" if op < 448 else name, base_name(name), f)
  if top6 == 0x36:   # DS
    w1 = dw(1); op = _bits(w, 17, 8); name = _lookup(T.DS, op, "DS", addr, w)
    f = dict(offset0=_bits(w, 0, 8), offset1=_bits(w, 8, 8), gds=_bits(w, 16, 1), acc=_bits(w, 25, 1), addr=_bits(w1, 0, 8),
             data0=_bits(w1, 8, 8), data1=_bits(w1, 16, 8), vdst=_bits(w1, 24, 8))
    if f["gds"]: raise DecodeError(f"{name}: GDS at 0x{addr:x} not supported")
    if f["acc"]: raise DecodeError(f"{name}: AGPR data (acc) at 0x{addr:x} not supported")
    return Inst(addr, 8, "DS", op, name, base_name(name), f)
  if top6 == 0x37:   # FLAT / SCRATCH / GLOBAL: seg picks the address space
    w1 = dw(1); op, seg = _bits(w, 18, 7), _bits(w, 14, 2)
    if seg == 3: raise DecodeError(f"reserved FLAT segment 3 at 0x{addr:x}, dword 0x{w:08x}")
    enc = ("FLAT", "SCRATCH", "GLOBAL")[seg]; name = _lookup(getattr(T, enc), op, enc, addr, w)
    off = _bits(w, 0, 13)
    if seg: off -= (1 << 13) if off >> 12 else 0     # global/scratch: 13-bit signed; flat: 12-bit unsigned
    else: off &= 0xFFF
    saddr = _bits(w1, 16, 7)
    f = dict(offset=off, glc=_bits(w, 16, 1), slc=_bits(w, 17, 1), sc1=_bits(w, 25, 1), lds=_bits(w, 13, 1), addr=_bits(w1, 0, 8),
             data=_bits(w1, 8, 8), saddr=OFF if saddr == SADDR_OFF else saddr, vdst=_bits(w1, 24, 8), acc=_bits(w1, 23, 1))
    if seg == 1: f["sve"], f["lds"] = f.pop("lds"), 0   # gfx940 scratch: bit 13 is SVE, the VGPR address is used
    if seg == 1 and "atomic" in name: raise DecodeError(f"{name} at 0x{addr:x}: scratch atomics are not supported")
    if f["lds"]: raise DecodeError(f"{name}: LDS-direct load at 0x{addr:x} not supported")
    if f["acc"]: raise DecodeError(f"{name}: AGPR data (acc) at 0x{addr:x} not supported")
    return Inst(addr, 8, enc, op, name, base_name(name), f)
  if top6 == 0x38:   # MUBUF: only the cache maintenance ops (no buffer resource is ever set up by our kernels)
    op = _bits(w, 18, 7); name = _lookup(T.MUBUF, op, "MUBUF", addr, w)
    if name not in ("buffer_wbl2", "buffer_inv", "buffer_wbinvl1", "buffer_wbinvl1_vol"):
      raise DecodeError(f"{name} (MUBUF) at 0x{addr:x} not supported: the emulator models no buffer resources")
    return Inst(addr, 8, "MUBUF", op, name, name, dict(glc=_bits(w, 14, 1), slc=_bits(w, 17, 1), sc1=_bits(w, 15, 1)))
  kind = {0x3A: "MTBUF", 0x3C: "MIMG", 0x31: "EXP", 0x32: "VINTRP"}.get(top6, "unknown")
  raise DecodeError(f"{kind} encoding at 0x{addr:x} (dword 0x{w:08x}) not supported by the gfx942 emulator")

def decode(code: bytes, start: int = 0, end: int | None = None) -> list[Inst]:
  """Decode a straight run of instructions from `start` to `end` (a kernel symbol's extent).

  >>> [i.name for i in decode(bytes.fromhex("0000 80bf 0000 81bf".replace(" ", "")))]
  ['s_nop', 's_endpgm']
  """
  out, pc, end = [], start, len(code) if end is None else end
  while pc < end:
    i = decode_one(code, pc); out.append(i); pc += i.size
  return out
