"""Casts to and from the 8-bit floats (dtypes.fp8e4m3, dtypes.fp8e5m2), as integer arithmetic on their bits.

No renderer has an fp8 type, so a kernel never computes in one: it only loads or stores the byte (as `unsigned char`),
and the conversion is ordinary int/float ops in the generated kernel (OCP OFP8 rev 1.0 formats, compiler/dtypes.py).
Round to nearest even, finite overflow saturating to the largest finite value, inf becoming NaN in e4m3 (it has no
inf): what `compiler.dtypes.float_to_fp8` does for one value, and what tinygrad does.

>>> from frontend import Tensor, dtypes
>>> Tensor([1.0, 0.3, -500.0, 1e-3]).cast(dtypes.fp8e4m3).float().tolist()
[1.0, 0.3125, -448.0, 0.001953125]
"""
from __future__ import annotations
from typing import TYPE_CHECKING
from compiler.dtypes import dtypes, DType, FP8_FORMAT
if TYPE_CHECKING: from frontend.tensor import Tensor

def fp8_to_float32(x: Tensor) -> Tensor:
  """The float32 values of fp8 tensor `x` (exact: every fp8 value is a float32)."""
  e, m, bias = FP8_FORMAT[x.dtype.name]
  b = x.bitcast(dtypes.uint8).cast(dtypes.uint32)
  sign, exp, man = b >> 7, (b >> m) & ((1 << e) - 1), b & ((1 << m) - 1)
  # a normal number: its exponent rebiased and its mantissa moved to the top of float32's 23 bits
  normal = (sign << 31) | ((exp + (127 - bias)) << 23) | (man << (23 - m))
  if x.dtype is dtypes.fp8e5m2: normal = (exp == 31).where((sign << 31) | 0x7f800000 | (man << 21), normal)   # inf, NaN
  else: normal = ((exp == 15) & (man == 7)).where(0x7fc00000, normal)   # e4m3's only NaN
  sub = man.cast(dtypes.float32) * 2.0 ** (1 - bias - m)   # subnormal: man units of the last place, exactly
  return (exp == 0).where((sign == 1).where(-sub, sub), normal.cast(dtypes.uint32).bitcast(dtypes.float32))

def float32_to_fp8(x: Tensor, dt: DType) -> Tensor:
  """Float32 tensor `x` rounded to fp8 dtype `dt`."""
  _, m, bias = FP8_FORMAT[dt.name]
  u = x.bitcast(dtypes.uint32)
  sign, a = (u >> 31) << 7, u & 0x7fffffff
  # normal: drop float32's low 23-m mantissa bits, rounding to nearest even (a carry moves into the exponent, right)
  r = (a + ((1 << (22 - m)) - 1) + ((a >> (23 - m)) & 1)) >> (23 - m)
  normal = r - ((127 - bias) << m)
  # subnormal: |x| in units of the smallest subnormal (exact: a power-of-two scale), rounded to nearest even
  y = x.abs() * 2.0 ** (bias + m - 1)
  f = y.floor()
  d = y - f
  fi = f.cast(dtypes.uint32)
  q = fi + ((d > 0.5) | ((d == 0.5) & ((fi & 1) == 1))).cast(dtypes.uint32)
  maxbits = 0x7e if dt is dtypes.fp8e4m3 else 0x7b   # the largest finite: 448 and 57344
  bits = (a < ((127 + 1 - bias) << 23)).where(q, normal).minimum(maxbits)   # below the smallest normal: subnormal
  nan, inf = (0x7f, 0x7f) if dt is dtypes.fp8e4m3 else (0x7e, 0x7c)
  bits = (a > 0x7f800000).where(nan, (a == 0x7f800000).where(inf, bits))
  return (sign | bits).cast(dtypes.uint8).bitcast(dt)

def cast_fp8(x: Tensor, dt: DType) -> Tensor:
  """`x.cast(dt)` where x's dtype or dt is an fp8: through float32 (other dtypes convert to and from it as usual)."""
  if x.dtype in dtypes.fp8s: x = fp8_to_float32(x)
  if dt not in dtypes.fp8s: return x.cast(dt)
  return float32_to_fp8(x.cast(dtypes.float32), dt)
