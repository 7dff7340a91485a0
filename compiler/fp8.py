"""Casts to and from the 8-bit floats (dtypes.fp8e4m3, dtypes.fp8e5m2) in a kernel: `lower_fp8` rewrites them, right
after lowering, into what every renderer can say.

An fp8 value is only ever loaded, stored or cast (arithmetic promotes it to a wider float in the frontend). A cast goes
through float32 (exact for every fp8 value), so a kernel holds at most two fp8 conversions: fp8 -> float32 and
float32 -> fp8. On a target with conversion instructions (PTX for sm_89+: cvt.rn.satfinite.e4m3x2.f32 and
cvt.rn.f16x2.e4m3x2) those two stay CASTs for the renderer; elsewhere they become integer arithmetic on the bits here.

Rounding is torch's (`tensor.to(torch.float8_e4m3fn / float8_e5m2)`, c10/util/Float8_e4m3fn.h and Float8_e5m2.h):
round to nearest even; e4m3 has no inf, so a finite overflow and +-inf saturate to +-448; e5m2 overflows to +-inf (from
61440, the halfway point past 57344, up); NaN becomes sign|0x7f in both. `compiler.dtypes.float_to_fp8` is the same
rule for one Python value.

>>> from compiler.uop import UOp, Ops
>>> x = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("x", 0, 1))
>>> lower_fp8(x.cast(dtypes.fp8e4m3), native=False).op.name, lower_fp8(x.cast(dtypes.fp8e4m3), native=True).op.name
('BITCAST', 'CAST')
"""
from __future__ import annotations
import struct
from compiler.dtypes import DType, dtypes, FP8_FORMAT, float_to_fp8
from compiler.uop import UOp, Ops, ALU

NAN_BITS = 0x7f                                                   # torch's NaN for both formats (with the sign)
SAT_BITS = {"fp8e4m3": 0x7e, "fp8e5m2": 0x7c}                     # where a large value ends: 448 (e4m3), inf (e5m2)

def _u32(v: int) -> UOp: return UOp.const(dtypes.uint32, v)
def _i32(v: int) -> UOp: return UOp.const(dtypes.int32, v)
def _alu(op: Ops, *s: UOp) -> UOp: return UOp(op, dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE) else s[0].dtype, s)

def fp8_to_f32(b: UOp, dt: DType) -> UOp:
  """The float32 value of fp8 byte `b` (a uint32 UOp holding 0..255) of dtype `dt`: exact, as integer ops."""
  e, m, bias = FP8_FORMAT[dt.name]
  sign, ex, man = _alu(Ops.SHL, _alu(Ops.SHR, b, _u32(7)), _u32(31)), _alu(Ops.AND, _alu(Ops.SHR, b, _u32(m)), _u32((1 << e) - 1)), _alu(Ops.AND, b, _u32((1 << m) - 1))
  # a normal number: the exponent rebiased to float32's, the mantissa moved to the top of float32's 23 bits
  normal = _alu(Ops.OR, _alu(Ops.OR, sign, _alu(Ops.SHL, _alu(Ops.ADD, ex, _u32(127 - bias)), _u32(23))), _alu(Ops.SHL, man, _u32(23 - m)))
  top = _alu(Ops.CMPNE, ex, _u32((1 << e) - 1)).logical_not()
  if dt is dtypes.fp8e5m2: special = _alu(Ops.OR, _alu(Ops.OR, sign, _u32(0x7f800000)), _alu(Ops.SHL, man, _u32(21)))   # inf and NaN, as IEEE
  else: top, special = top.logical_and(_alu(Ops.CMPNE, man, _u32(7)).logical_not()), _alu(Ops.OR, sign, _u32(0x7fc00000))   # S.1111.111 only
  bits = UOp(Ops.WHERE, dtypes.uint32, (top, special, normal))
  # a subnormal: man units of 2^(1-bias-m), exactly (a float32 product of a small int and a power of two)
  sub = UOp(Ops.MUL, dtypes.float32, (UOp(Ops.CAST, dtypes.float32, (man,)), UOp.const(dtypes.float32, 2.0 ** (1 - bias - m))))
  sub = UOp(Ops.BITCAST, dtypes.float32, (_alu(Ops.OR, UOp(Ops.BITCAST, dtypes.uint32, (sub,)), sign),))
  return UOp(Ops.WHERE, dtypes.float32, (_alu(Ops.CMPNE, ex, _u32(0)).logical_not(), sub, UOp(Ops.BITCAST, dtypes.float32, (bits,))))

def f32_to_fp8(x: UOp, dt: DType) -> UOp:
  """The fp8 byte (a uint32 UOp, 0..255) of dtype `dt` nearest to float32 `x`, with torch's rounding, as integer ops.
  (Signed 32-bit math that never wraps: the simplifier folds comparisons by value ranges, which a wrapping unsigned
  add would make wrong.)"""
  _, m, bias = FP8_FORMAT[dt.name]
  u = UOp(Ops.BITCAST, dtypes.uint32, (x,))
  sign = _alu(Ops.SHL, _alu(Ops.SHR, u, _u32(31)), _u32(7))
  a = UOp(Ops.CAST, dtypes.int32, (_alu(Ops.AND, u, _u32(0x7fffffff)),))   # |x|'s bits, 0..0x7fffffff
  am = UOp(Ops.WHERE, dtypes.int32, (_alu(Ops.CMPLT, a, _i32(0x7f800000)), a, _i32(0x7f800000)))   # (NaNs: taken care of below)
  # normal: drop float32's low 23-m mantissa bits rounding to nearest even (a carry into the exponent is right)
  r = _alu(Ops.SHR, _alu(Ops.ADD, _alu(Ops.ADD, am, _i32((1 << (22 - m)) - 1)), _alu(Ops.AND, _alu(Ops.SHR, am, _i32(23 - m)), _i32(1))), _i32(23 - m))
  normal = _alu(Ops.ADD, r, _i32(-((127 - bias) << m)))
  # subnormal: |x| + C with C = 2^23 units of the smallest subnormal rounds |x| to a whole number of units (IEEE add,
  # nearest even); the bits past C's are that number (up to 2^m: the smallest normal, which is also its encoding)
  c = 2.0 ** (23 + 1 - bias - m)
  s = UOp(Ops.ADD, dtypes.float32, (UOp(Ops.BITCAST, dtypes.float32, (am,)), UOp.const(dtypes.float32, c)))
  sub = _alu(Ops.ADD, UOp(Ops.BITCAST, dtypes.int32, (s,)), _i32(-struct.unpack("<i", struct.pack("<f", c))[0]))
  bits = UOp(Ops.WHERE, dtypes.int32, (_alu(Ops.CMPLT, a, _i32((127 + 1 - bias) << 23)), sub, normal))
  sat = _i32(SAT_BITS[dt.name])
  bits = UOp(Ops.WHERE, dtypes.int32, (_alu(Ops.CMPLT, bits, sat), bits, sat))   # past the largest finite, and inf
  bits = UOp(Ops.WHERE, dtypes.int32, (_alu(Ops.CMPLT, _i32(0x7f800000), a), _i32(NAN_BITS), bits))
  return _alu(Ops.OR, sign, UOp(Ops.CAST, dtypes.uint32, (bits,)))

def _to_f32(x: UOp) -> UOp: return x if x.dtype.scalar is dtypes.float32 else UOp(Ops.CAST, dtypes.float32.vec(x.dtype.count), (x,))

def lower_fp8(sink: UOp, native: bool) -> UOp:
  """`sink` with its fp8 casts, constants and arithmetic in renderable form. Casts go through float32: with `native`,
  the two float32 conversions stay CASTs (the renderer has instructions), else they are integer ops on the bits (a
  uint8 BITCAST to fp8 for a store). Arithmetic on fp8 values runs in float32, its result rounded to fp8 once (exact
  for + - * /: float32 has more than twice fp8's precision, so the double rounding never differs)."""
  topo = sink.toposort()
  if not any(u.dtype is not None and u.dtype.scalar in dtypes.fp8s for u in topo): return sink
  def dec(x: UOp) -> UOp:   # an fp8 value as float32 (others unchanged)
    if x.dtype.scalar not in dtypes.fp8s: return x
    if x.dtype.count != 1: raise NotImplementedError(f"fp8: a vector of {x.dtype} (lower_fp8 runs before the opts vectorize)")
    return UOp(Ops.CAST, dtypes.float32, (x,)) if native else fp8_to_f32(UOp(Ops.CAST, dtypes.uint32, (UOp(Ops.BITCAST, dtypes.uint8, (x,)),)), x.dtype.scalar)
  def enc(x: UOp, dt: DType) -> UOp:   # a float32 value rounded to fp8 dtype dt
    return UOp(Ops.CAST, dt, (x,)) if native else UOp(Ops.BITCAST, dt, (UOp(Ops.CAST, dtypes.uint8, (f32_to_fp8(x, dt),)),))
  memo: dict[UOp, UOp] = {}
  for u in topo:
    srcs = tuple(memo[s] for s in u.src)
    dt = u.dtype.scalar if u.dtype is not None else None
    if u.op is Ops.CONST and dt in dtypes.fp8s:   # its bits, computed here
      memo[u] = UOp(Ops.BITCAST, dt, (UOp.const(dtypes.uint8, float_to_fp8(float(u.arg), dt)),))
    elif u.op is Ops.CAST and (dt in dtypes.fp8s or srcs[0].dtype.scalar in dtypes.fp8s):
      x = dec(srcs[0])
      memo[u] = enc(_to_f32(x), dt) if dt in dtypes.fp8s else x if u.dtype == x.dtype else UOp(Ops.CAST, u.dtype, (x,))
    elif u.op in ALU and u.op is not Ops.WHERE and (dt in dtypes.fp8s or any(s.dtype.scalar in dtypes.fp8s for s in srcs)):
      r = UOp(u.op, u.dtype if dt not in dtypes.fp8s else dtypes.float32, tuple(dec(s) for s in srcs))   # (comparisons: bool)
      memo[u] = enc(r, dt) if dt in dtypes.fp8s else r
    else: memo[u] = u if srcs == u.src else u.replace(src=srcs)
  return memo[sink]
