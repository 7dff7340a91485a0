"""Semantics of the vector ALU ops: name -> (source types, result type, numpy function over whole waves).

Types: 'b32'/'u32'/'i32'/'f32' one VGPR, 'u64'/'i64'/'f64' a pair, 'u16'/'i16'/'f16' the low (or op_sel'd)
half. Functions get arrays already viewed as their type and return the result type; ops that produce a
lane mask (carry, compare) are listed separately. Numbers follow AMD's RDNA3 ISA guide.
"""
from __future__ import annotations
import numpy as np

NP = {"u32": np.uint32, "b32": np.uint32, "i32": np.int32, "f32": np.float32, "u64": np.uint64, "i64": np.int64,
      "f64": np.float64, "u16": np.uint16, "i16": np.int16, "f16": np.float16, "b16": np.uint16}
BITS = {t: np.dtype(d).itemsize * 8 for t, d in NP.items()}

def _u(x): return x.astype(np.uint32, copy=False)
def _sh(x, n=31): return _u(x) & np.uint32(n)
def _f32(x): return np.asarray(x, np.float32)
def _fmax(a, b): return np.fmax(a, b)
def _fmin(a, b): return np.fmin(a, b)
def _trans(fn, dt):
  def f(a):
    with np.errstate(all="ignore"): return fn(a.astype(np.float64)).astype(dt)
  return f
def _bfe(a, off, w, signed):
  off, w = _sh(off), _sh(w)
  v = (a.astype(np.uint64) >> off.astype(np.uint64)) & ((np.uint64(1) << w.astype(np.uint64)) - np.uint64(1))
  if signed:
    sign = np.where(w > 0, (v >> np.maximum(w, 1).astype(np.uint64) - np.uint64(1)) & np.uint64(1), 0).astype(np.uint64)
    v = np.where(sign != 0, v | ~((np.uint64(1) << w.astype(np.uint64)) - np.uint64(1)), v)
  return v.astype(np.uint32)
def _med3(a, b, c): return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))
def _fmed3(a, b, c): return np.fmax(np.fmin(a, b), np.fmin(np.fmax(a, b), c))
def _ldexp(a, e):
  with np.errstate(all="ignore"): return np.ldexp(a, np.clip(e.astype(np.int64), -400, 400).astype(np.int32)).astype(a.dtype)
def _fma(a, b, c):  # exact fma for f32 through f64 (product of two f32 is exact in f64)
  with np.errstate(all="ignore"): return (a.astype(np.float64) * b + c).astype(a.dtype) if a.dtype != np.float64 else a * b + c
def _div_fixup(q, d, n):
  with np.errstate(all="ignore"):
    exact = (n / d).astype(q.dtype)
  special = np.isnan(n) | np.isnan(d) | (d == 0) | np.isinf(d) | np.isinf(n) | (n == 0) | np.isnan(q)
  return np.where(special, exact, q)
def _div_fmas(a, b, c, vcc):
  r = _fma(a, b, c)
  scale = np.float32(2.0 ** 64) if r.dtype == np.float32 else np.float64(2.0 ** 128)
  big = np.abs(c) >= np.asarray(2.0, r.dtype)  # ISA: 2**+-64 (f64: 2**+-128) chosen by exponent(S2) > bias
  with np.errstate(all="ignore"): return np.where(vcc, np.where(big, r * scale, r / scale), r).astype(r.dtype)
def _rsq(a):
  with np.errstate(all="ignore"): return (1.0 / np.sqrt(a.astype(np.float64))).astype(a.dtype)
def _rcp(a):
  with np.errstate(all="ignore"): return (1.0 / a.astype(np.float64)).astype(a.dtype)
def _cvt_i(dt, lo, hi):
  def f(a):
    with np.errstate(all="ignore"): return np.nan_to_num(np.clip(np.trunc(a.astype(np.float64)), lo, hi), nan=0).astype(dt)
  return f
def _fract(a):
  with np.errstate(all="ignore"): return np.where(np.isinf(a), np.asarray(np.nan, a.dtype), a - np.floor(a)).astype(a.dtype)
def _frexp_mant(a): return np.frexp(a)[0].astype(a.dtype)
def _frexp_exp(a): return np.where(np.isfinite(a), np.frexp(a)[1], 0).astype(np.int32)
def _clz(a):
  a = _u(a); out = np.full(a.shape, 0xFFFFFFFF, np.uint32); nz = a != 0
  out[nz] = (31 - np.floor(np.log2(a[nz].astype(np.float64)))).astype(np.uint32)
  return out
def _cls(a):
  """Leading bits equal to the sign bit, the sign bit included (V_CLS_I32 / S_CLS_I32; -1 for 0 and -1)."""
  a = _u(a); return _clz(a ^ (a.view(np.int32) >> 31).view(np.uint32))
def _ctz(a):
  a = _u(a); out = np.full(a.shape, 0xFFFFFFFF, np.uint32); nz = a != 0
  out[nz] = np.log2((a[nz] & (~a[nz] + np.uint32(1))).astype(np.float64)).astype(np.uint32)
  return out
def _bfrev(a):
  bits = np.unpackbits(np.ascontiguousarray(_u(a)).reshape(-1, 1).view(np.uint8), axis=1, bitorder="little")
  return np.packbits(bits[:, ::-1], axis=1, bitorder="little").view(np.uint32).reshape(np.shape(a))
_LANES_BELOW = ((np.uint64(1) << np.arange(32, dtype=np.uint64)) - np.uint64(1)).astype(np.uint32)
def _popc(a): return np.unpackbits(np.ascontiguousarray(_u(a)).reshape(-1, 1).view(np.uint8), axis=1).sum(1).astype(np.uint32).reshape(np.shape(a))
def _perm(a, b, sel):
  src = (b.astype(np.uint64) | (a.astype(np.uint64) << np.uint64(32)))
  out = np.zeros(np.broadcast(a, b, sel).shape, np.uint32)
  for k in range(4):
    s = (_u(sel) >> np.uint32(8 * k)) & np.uint32(0xFF)
    byte = ((src >> (np.minimum(s, 7).astype(np.uint64) * np.uint64(8))) & np.uint64(0xFF)).astype(np.uint32)
    byte = np.where(s >= 13, np.uint32(0xFF), np.where(s == 12, np.uint32(0), byte))
    out |= byte << np.uint32(8 * k)
  return out
def dot4(a, b, c, signed_a: bool, signed_b: bool):
  """The integer 4-way byte dot product: c + sum of a.byte[k] * b.byte[k] (each byte sign- or zero-extended), wrapping
  in 32 bits. RDNA3 ISA VOP3P V_DOT4_U32_U8 / V_DOT4_I32_IU8 (NEG[0]/NEG[1] say which input is signed), MI300 ISA
  V_DOT4_U32_U8 / V_DOT4_I32_I8: "tmp = S2; tmp += A[0] * B[0]; ... D0 = tmp"."""
  acc = _u(c).astype(np.int64)
  for k in range(4):
    x, y = (((_u(v) >> np.uint32(8 * k)) & np.uint32(0xFF)).astype(np.int64) for v in (a, b))
    if signed_a: x = np.where(x >= 128, x - 256, x)
    if signed_b: y = np.where(y >= 128, y - 256, y)
    acc = acc + x * y
  return acc.astype(np.uint32)   # (int64 -> uint32 keeps the low 32 bits: the wrap of the pseudocode's 32-bit tmp)
def _mul24(signed):
  def f(a, b):
    a, b = _u(a) & np.uint32(0xFFFFFF), _u(b) & np.uint32(0xFFFFFF)
    if signed: a, b = ((a << np.uint32(8)).view(np.int32) >> 8), ((b << np.uint32(8)).view(np.int32) >> 8)
    return (a.astype(np.int64) * b.astype(np.int64)).astype(np.int64)
  return f
F32, U32, I32, F64, F16, U64, I64 = "f32", "u32", "i32", "f64", "f16", "u64", "i64"
# name: (source types, result type, fn)
OPS: dict[str, tuple[tuple[str, ...], str, object]] = {
  "v_mov_b32": ((U32,), U32, lambda a: a), "v_mov_b16": (("u16",), "u16", lambda a: a), "v_not_b32": ((U32,), U32, lambda a: ~a),
  "v_cvt_f32_i32": ((I32,), F32, lambda a: a.astype(np.float32)), "v_cvt_f32_u32": ((U32,), F32, lambda a: a.astype(np.float32)),
  "v_cvt_u32_f32": ((F32,), U32, _cvt_i(np.uint32, 0, 2**32 - 1)), "v_cvt_i32_f32": ((F32,), I32, _cvt_i(np.int32, -2**31, 2**31 - 1)),
  "v_cvt_f16_f32": ((F32,), F16, lambda a: a.astype(np.float16)), "v_cvt_f32_f16": ((F16,), F32, lambda a: a.astype(np.float32)),
  "v_cvt_f32_f64": ((F64,), F32, lambda a: a.astype(np.float32)), "v_cvt_f64_f32": ((F32,), F64, lambda a: a.astype(np.float64)),
  "v_cvt_f64_i32": ((I32,), F64, lambda a: a.astype(np.float64)), "v_cvt_f64_u32": ((U32,), F64, lambda a: a.astype(np.float64)),
  "v_cvt_i32_f64": ((F64,), I32, _cvt_i(np.int32, -2**31, 2**31 - 1)), "v_cvt_u32_f64": ((F64,), U32, _cvt_i(np.uint32, 0, 2**32 - 1)),
  "v_cvt_f16_u16": (("u16",), F16, lambda a: a.astype(np.float16)), "v_cvt_f16_i16": (("i16",), F16, lambda a: a.astype(np.float16)),
  "v_cvt_u16_f16": ((F16,), "u16", _cvt_i(np.uint16, 0, 65535)), "v_cvt_i16_f16": ((F16,), "i16", _cvt_i(np.int16, -32768, 32767)),
  "v_cvt_floor_i32_f32": ((F32,), I32, lambda a: _cvt_i(np.int32, -2**31, 2**31 - 1)(np.floor(a))),
  "v_cvt_nearest_i32_f32": ((F32,), I32, lambda a: _cvt_i(np.int32, -2**31, 2**31 - 1)(np.floor(a + np.float32(0.5)))),
  "v_cvt_i32_i16": (("i16",), I32, lambda a: a.astype(np.int32)), "v_cvt_u32_u16": (("u16",), U32, lambda a: a.astype(np.uint32)),
  "v_cvt_f32_ubyte0": ((U32,), F32, lambda a: (a & np.uint32(0xFF)).astype(np.float32)),
  "v_cvt_f32_ubyte1": ((U32,), F32, lambda a: ((a >> np.uint32(8)) & np.uint32(0xFF)).astype(np.float32)),
  "v_cvt_f32_ubyte2": ((U32,), F32, lambda a: ((a >> np.uint32(16)) & np.uint32(0xFF)).astype(np.float32)),
  "v_cvt_f32_ubyte3": ((U32,), F32, lambda a: (a >> np.uint32(24)).astype(np.float32)),
  "v_bfrev_b32": ((U32,), U32, _bfrev), "v_clz_i32_u32": ((U32,), U32, _clz), "v_cls_i32": ((U32,), U32, _cls), "v_ctz_i32_b32": ((U32,), U32, _ctz),
  "v_frexp_mant_f32": ((F32,), F32, _frexp_mant), "v_frexp_exp_i32_f32": ((F32,), I32, _frexp_exp),
  "v_frexp_mant_f64": ((F64,), F64, _frexp_mant), "v_frexp_exp_i32_f64": ((F64,), I32, _frexp_exp),
  # binary (VOP2 and VOP3 forms share these)
  "v_add_f32": ((F32, F32), F32, np.add), "v_sub_f32": ((F32, F32), F32, np.subtract), "v_subrev_f32": ((F32, F32), F32, lambda a, b: b - a),
  "v_mul_f32": ((F32, F32), F32, np.multiply), "v_min_f32": ((F32, F32), F32, _fmin), "v_max_f32": ((F32, F32), F32, _fmax),
  "v_mul_dx9_zero_f32": ((F32, F32), F32, lambda a, b: np.where((a == 0) | (b == 0), np.float32(0), a * b)),
  "v_add_f16": ((F16, F16), F16, np.add), "v_sub_f16": ((F16, F16), F16, np.subtract), "v_subrev_f16": ((F16, F16), F16, lambda a, b: b - a),
  "v_mul_f16": ((F16, F16), F16, np.multiply), "v_min_f16": ((F16, F16), F16, _fmin), "v_max_f16": ((F16, F16), F16, _fmax),
  "v_ldexp_f16": ((F16, "i16"), F16, _ldexp),
  "v_add_f64": ((F64, F64), F64, np.add), "v_mul_f64": ((F64, F64), F64, np.multiply), "v_min_f64": ((F64, F64), F64, _fmin),
  "v_max_f64": ((F64, F64), F64, _fmax), "v_ldexp_f64": ((F64, I32), F64, _ldexp), "v_ldexp_f32": ((F32, I32), F32, _ldexp),
  "v_min_i32": ((I32, I32), I32, np.minimum), "v_max_i32": ((I32, I32), I32, np.maximum),
  "v_min_u32": ((U32, U32), U32, np.minimum), "v_max_u32": ((U32, U32), U32, np.maximum),
  "v_lshlrev_b32": ((U32, U32), U32, lambda a, b: b << _sh(a)), "v_lshrrev_b32": ((U32, U32), U32, lambda a, b: b >> _sh(a)),
  "v_ashrrev_i32": ((U32, I32), I32, lambda a, b: b >> _sh(a).astype(np.int32)),
  "v_lshlrev_b64": ((U32, U64), U64, lambda a, b: b << _sh(a, 63).astype(np.uint64)),
  "v_lshrrev_b64": ((U32, U64), U64, lambda a, b: b >> _sh(a, 63).astype(np.uint64)),
  "v_ashrrev_i64": ((U32, I64), I64, lambda a, b: b >> _sh(a, 63).astype(np.int64)),
  "v_lshlrev_b16": (("u16", "u16"), "u16", lambda a, b: b << (a & np.uint16(15))),
  "v_lshrrev_b16": (("u16", "u16"), "u16", lambda a, b: b >> (a & np.uint16(15))),
  # RDNA3 ISA guide, VOP3 opcode 826 (and MI300 ISA VOP2 44 / VOP3 300): D0.i16 = (S1.i16 >> S0[3 : 0].u32): an
  # arithmetic shift of the (op_sel-picked) low half by the low 4 bits of S0's half only, so a shift of 16..31 wraps to
  # 0..15 and never fills the result with sign bits. The 16-bit write keeps the other half of the VGPR on gfx11
  # (vwrite; LLVM AMDGPUSubtarget.cpp zeroesHigh16BitsOfDest: "On gfx10, all 16-bit instructions preserve the high
  # bits") and zeroes it on gfx9 (gfx9/executor.py ZERO_HI16)
  "v_ashrrev_i16": (("u16", "i16"), "i16", lambda a, b: b >> (a & np.uint16(15)).astype(np.int16)),
  "v_and_b32": ((U32, U32), U32, np.bitwise_and), "v_or_b32": ((U32, U32), U32, np.bitwise_or),
  "v_xor_b32": ((U32, U32), U32, np.bitwise_xor), "v_xnor_b32": ((U32, U32), U32, lambda a, b: ~(a ^ b)),
  "v_add_nc_u32": ((U32, U32), U32, np.add), "v_sub_nc_u32": ((U32, U32), U32, np.subtract),
  "v_subrev_nc_u32": ((U32, U32), U32, lambda a, b: b - a), "v_add_nc_i32": ((I32, I32), I32, np.add),
  "v_sub_nc_i32": ((I32, I32), I32, np.subtract), "v_add_nc_u16": (("u16", "u16"), "u16", np.add),
  "v_sub_nc_u16": (("u16", "u16"), "u16", np.subtract), "v_mul_lo_u16": (("u16", "u16"), "u16", np.multiply),
  "v_mul_lo_u32": ((U32, U32), U32, np.multiply),
  "v_mul_hi_u32": ((U32, U32), U32, lambda a, b: ((a.astype(np.uint64) * b) >> np.uint64(32)).astype(np.uint32)),
  "v_mul_hi_i32": ((I32, I32), I32, lambda a, b: ((a.astype(np.int64) * b) >> 32).astype(np.int32)),
  "v_mul_i32_i24": ((U32, U32), U32, lambda a, b: _mul24(True)(a, b).astype(np.uint32)),
  "v_mul_u32_u24": ((U32, U32), U32, lambda a, b: _mul24(False)(a, b).astype(np.uint32)),
  "v_mul_hi_i32_i24": ((U32, U32), U32, lambda a, b: (_mul24(True)(a, b) >> 32).astype(np.uint32)),
  "v_mul_hi_u32_u24": ((U32, U32), U32, lambda a, b: (_mul24(False)(a, b) >> 32).astype(np.uint32)),
  "v_max_u16": (("u16", "u16"), "u16", np.maximum), "v_min_u16": (("u16", "u16"), "u16", np.minimum),
  "v_max_i16": (("i16", "i16"), "i16", np.maximum), "v_min_i16": (("i16", "i16"), "i16", np.minimum),
  "v_and_b16": (("u16", "u16"), "u16", np.bitwise_and), "v_or_b16": (("u16", "u16"), "u16", np.bitwise_or),
  "v_xor_b16": (("u16", "u16"), "u16", np.bitwise_xor),
  "v_cvt_pk_rtz_f16_f32": ((F32, F32), U32, lambda a, b: a.astype(np.float16).view(np.uint16).astype(np.uint32) |
                           (b.astype(np.float16).view(np.uint16).astype(np.uint32) << np.uint32(16))),
  "v_pack_b32_f16": ((F16, F16), U32, lambda a, b: a.view(np.uint16).astype(np.uint32) | (b.view(np.uint16).astype(np.uint32) << np.uint32(16))),
  "v_bcnt_u32_b32": ((U32, U32), U32, lambda a, b: _popc(a) + b),
  # mbcnt: count the mask bits of lower lanes (wave32: lanes 0..31 live in the lo half, so _hi adds nothing)
  "v_mbcnt_lo_u32_b32": ((U32, U32), U32, lambda a, b: _popc(np.broadcast_to(a, np.broadcast(a, b).shape) & _LANES_BELOW) + b),
  "v_mbcnt_hi_u32_b32": ((U32, U32), U32, lambda a, b: b + np.uint32(0)),
  # ternary
  "v_fma_f32": ((F32, F32, F32), F32, _fma), "v_fma_f64": ((F64, F64, F64), F64, _fma), "v_fma_f16": ((F16, F16, F16), F16, _fma),
  "v_fmac_f32": ((F32, F32, F32), F32, _fma), "v_fmac_f16": ((F16, F16, F16), F16, _fma),
  "v_fmamk_f32": ((F32, F32, F32), F32, _fma), "v_fmaak_f32": ((F32, F32, F32), F32, _fma),
  "v_fmamk_f16": ((F16, F16, F16), F16, _fma), "v_fmaak_f16": ((F16, F16, F16), F16, _fma),
  "v_lshl_add_u32": ((U32, U32, U32), U32, lambda a, b, c: (a << _sh(b)) + c),
  "v_add_lshl_u32": ((U32, U32, U32), U32, lambda a, b, c: (a + b) << _sh(c)),
  "v_lshl_or_b32": ((U32, U32, U32), U32, lambda a, b, c: (a << _sh(b)) | c),
  "v_and_or_b32": ((U32, U32, U32), U32, lambda a, b, c: (a & b) | c),
  "v_or3_b32": ((U32, U32, U32), U32, lambda a, b, c: a | b | c), "v_xor3_b32": ((U32, U32, U32), U32, lambda a, b, c: a ^ b ^ c),
  "v_add3_u32": ((U32, U32, U32), U32, lambda a, b, c: a + b + c), "v_xad_u32": ((U32, U32, U32), U32, lambda a, b, c: (a ^ b) + c),
  "v_bfe_u32": ((U32, U32, U32), U32, lambda a, b, c: _bfe(a, b, c, False)),
  "v_bfe_i32": ((U32, U32, U32), U32, lambda a, b, c: _bfe(a, b, c, True)),
  "v_bfi_b32": ((U32, U32, U32), U32, lambda a, b, c: (a & b) | (~a & c)),
  "v_alignbit_b32": ((U32, U32, U32), U32, lambda a, b, c: (((a.astype(np.uint64) << np.uint64(32)) | b) >> _sh(c).astype(np.uint64)).astype(np.uint32)),
  "v_alignbyte_b32": ((U32, U32, U32), U32, lambda a, b, c: (((a.astype(np.uint64) << np.uint64(32)) | b) >> (8 * (_u(c) & np.uint32(3))).astype(np.uint64)).astype(np.uint32)),
  "v_perm_b32": ((U32, U32, U32), U32, _perm),
  "v_mad_u32_u24": ((U32, U32, U32), U32, lambda a, b, c: _mul24(False)(a, b).astype(np.uint32) + c),
  "v_mad_i32_i24": ((U32, U32, U32), U32, lambda a, b, c: _mul24(True)(a, b).astype(np.uint32) + c),
  "v_mad_u32_u16": (("u16", "u16", U32), U32, lambda a, b, c: a.astype(np.uint32) * b + c),
  "v_mad_i32_i16": (("i16", "i16", I32), I32, lambda a, b, c: a.astype(np.int32) * b + c),
  "v_mad_u16": (("u16", "u16", "u16"), "u16", lambda a, b, c: a * b + c),
  "v_min3_f32": ((F32, F32, F32), F32, lambda a, b, c: np.fmin(np.fmin(a, b), c)),
  "v_max3_f32": ((F32, F32, F32), F32, lambda a, b, c: np.fmax(np.fmax(a, b), c)),
  "v_min3_i32": ((I32, I32, I32), I32, lambda a, b, c: np.minimum(np.minimum(a, b), c)),
  "v_max3_i32": ((I32, I32, I32), I32, lambda a, b, c: np.maximum(np.maximum(a, b), c)),
  "v_min3_u32": ((U32, U32, U32), U32, lambda a, b, c: np.minimum(np.minimum(a, b), c)),
  "v_max3_u32": ((U32, U32, U32), U32, lambda a, b, c: np.maximum(np.maximum(a, b), c)),
  # gfx11 fused min/max pairs: maxmin = min(max(a, b), c), minmax = max(min(a, b), c)
  "v_maxmin_f32": ((F32, F32, F32), F32, lambda a, b, c: np.fmin(np.fmax(a, b), c)),
  "v_minmax_f32": ((F32, F32, F32), F32, lambda a, b, c: np.fmax(np.fmin(a, b), c)),
  "v_maxmin_f16": ((F16, F16, F16), F16, lambda a, b, c: np.fmin(np.fmax(a, b), c)),
  "v_minmax_f16": ((F16, F16, F16), F16, lambda a, b, c: np.fmax(np.fmin(a, b), c)),
  "v_maxmin_i32": ((I32, I32, I32), I32, lambda a, b, c: np.minimum(np.maximum(a, b), c)),
  "v_minmax_i32": ((I32, I32, I32), I32, lambda a, b, c: np.maximum(np.minimum(a, b), c)),
  "v_maxmin_u32": ((U32, U32, U32), U32, lambda a, b, c: np.minimum(np.maximum(a, b), c)),
  "v_minmax_u32": ((U32, U32, U32), U32, lambda a, b, c: np.maximum(np.minimum(a, b), c)),
  # the 16-bit forms (gfx11 VOP3 0x249..0x251): LLVM picks them for max/min of i8/u8/i16/f16 values
  **{f"v_{k}3_{t}": ((t, t, t), t, f) for t in ("f16", "i16", "u16") for k, f in
     (("min", lambda a, b, c: np.fmin(np.fmin(a, b), c) if a.dtype.kind == "f" else np.minimum(np.minimum(a, b), c)),
      ("max", lambda a, b, c: np.fmax(np.fmax(a, b), c) if a.dtype.kind == "f" else np.maximum(np.maximum(a, b), c)),
      ("med", lambda a, b, c: _fmed3(a, b, c) if a.dtype.kind == "f" else _med3(a, b, c)))},
  "v_med3_f32": ((F32, F32, F32), F32, _fmed3), "v_med3_i32": ((I32, I32, I32), I32, _med3), "v_med3_u32": ((U32, U32, U32), U32, _med3),
  "v_div_fixup_f32": ((F32, F32, F32), F32, _div_fixup), "v_div_fixup_f64": ((F64, F64, F64), F64, _div_fixup),
  "v_div_fixup_f16": ((F16, F16, F16), F16, _div_fixup),
}
for _n, _fn in [("exp", np.exp2), ("log", np.log2), ("rcp", None), ("rsq", None), ("sqrt", np.sqrt), ("sin", lambda x: np.sin(x * 2 * np.pi)),
                ("cos", lambda x: np.cos(x * 2 * np.pi)), ("floor", np.floor), ("ceil", np.ceil), ("trunc", np.trunc), ("rndne", np.rint),
                ("fract", None)]:
  for _t in ("f32", "f16", "f64"):
    if _t == "f64" and _n in ("exp", "log", "sin", "cos"): continue
    f = {"rcp": _rcp, "rsq": _rsq, "fract": _fract}.get(_n) or _trans(_fn, NP[_t])
    OPS[f"v_{_n}_{_t}"] = ((_t,), _t, f)
OPS["v_rcp_iflag_f32"] = OPS["v_rcp_f32"]
# ops with an extra lane-mask input and/or output: name -> (types, result type, fn(a, b, [c], carry_in) -> (result, carry_out))
# every operand is cast to one 64-bit type: numpy turns int64 - uint64 into float64, which loses the borrow and wraps wrongly
def _addc(a, b, ci):
  if np.ndim(a) and np.ndim(b) and a.dtype == b.dtype == np.uint32:   # arrays: wrapping 32-bit adds, a carry is a wrap (s < a)
    s = a + b; co = s < a
    if np.ndim(ci): c = ci.astype(np.uint32); s2 = s + c; co = co | (s2 < s); s = s2
    return s, co
  s = a.astype(np.uint64) + b.astype(np.uint64) + np.asarray(ci).astype(np.uint64); return s.astype(np.uint32), s >> np.uint64(32) != 0
def _subc(a, b, ci): s = a.astype(np.int64) - b.astype(np.int64) - np.asarray(ci).astype(np.int64); return s.astype(np.uint32), s < 0
CARRY = {"v_add_co_u32": lambda a, b, ci: _addc(a, b, 0), "v_sub_co_u32": lambda a, b, ci: _subc(a, b, 0),
         "v_subrev_co_u32": lambda a, b, ci: _subc(b, a, 0), "v_add_co_ci_u32": _addc, "v_sub_co_ci_u32": _subc,
         "v_subrev_co_ci_u32": lambda a, b, ci: _subc(b, a, ci)}
CMP_F = {"f": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool), "lt": np.less, "eq": np.equal, "le": np.less_equal,
         "gt": np.greater, "lg": lambda a, b: (a < b) | (a > b), "ge": np.greater_equal, "o": lambda a, b: ~np.isnan(a) & ~np.isnan(b),
         "u": lambda a, b: np.isnan(a) | np.isnan(b), "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)),
         "ngt": lambda a, b: ~(a > b), "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b),
         "t": lambda a, b: np.ones(np.broadcast(a, b).shape, bool)}
CMP_I = {"f": CMP_F["f"], "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater, "ne": np.not_equal,
         "ge": np.greater_equal, "t": CMP_F["t"]}
def cmp_class(a, mask):
  m = mask.astype(np.uint32); neg = np.signbit(a); fin = np.isfinite(a)
  tiny = np.finfo(a.dtype).tiny; den = fin & (a != 0) & (np.abs(a) < tiny); norm = fin & (np.abs(a) >= tiny)
  qnan = np.isnan(a)  # numpy cannot tell signalling from quiet NaNs apart reliably; treat them as quiet
  classes = [np.zeros(a.shape, bool), qnan, np.isneginf(a), norm & neg, den & neg, (a == 0) & neg, (a == 0) & ~neg,
             den & ~neg, norm & ~neg, np.isposinf(a)]
  out = np.zeros(np.broadcast(a, m).shape, bool)
  for k, c in enumerate(classes): out |= c & (((m >> np.uint32(k)) & np.uint32(1)) != 0)
  return out
def compare(base: str):
  """v_cmp[x]_<cond>_<type> -> (type, fn(a, b) -> bool lanes)."""
  parts = base.split("_"); cond, t = parts[2], parts[3]
  if cond == "class": return t, cmp_class
  return t, (CMP_F if t[0] == "f" else CMP_I)[cond]
