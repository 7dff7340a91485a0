"""float64 exp2/log2/sin written as plain arithmetic UOps, for renderers without double-precision versions (PTX
has only f32 `.approx` instructions). Bit tricks go through BITCAST to int64, so any renderer that has adds,
multiplies, shifts and selects can run them; accuracy is within a few ulp of libm. Also float32 sin/cos/log2 for PTX
(rewrite_float32_trig), whose sin.approx/lg2.approx are accurate only in absolute terms.

>>> from compiler.uop import UOp, Ops
>>> from compiler.dtypes import dtypes
>>> x = UOp(Ops.DEFINE_VAR, dtypes.float64, (), ("x", 0, 1))
>>> rewrite_float64(UOp(Ops.EXP2, dtypes.float64, (x,))).op is Ops.EXP2
False
"""
from __future__ import annotations
import math
from compiler.dtypes import dtypes
from compiler.uop import UOp, Ops, PatternMatcher, UPat, graph_rewrite

F64, I64 = dtypes.float64, dtypes.int64
def _c(v) -> UOp: return UOp.const(F64, v)
def _i(v) -> UOp: return UOp.const(I64, v)
def _alu(op: Ops, *s: UOp) -> UOp: return UOp(op, dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE) else s[0].dtype, s)
def _add(a, b): return _alu(Ops.ADD, a, b)
def _mul(a, b): return _alu(Ops.MUL, a, b)
def _lt(a, b): return _alu(Ops.CMPLT, a, b)
def _where(c, a, b): return UOp(Ops.WHERE, a.dtype, (c, a, b))
def _isnan(x): return _alu(Ops.CMPNE, x, x)
def _bits(x): return UOp(Ops.BITCAST, I64, (x,))
def _float(i): return UOp(Ops.BITCAST, F64, (i,))
def _poly(x: UOp, coefs: list[float]) -> UOp:
  acc = _c(coefs[0])
  for c in coefs[1:]: acc = _add(_mul(acc, x), _c(c))
  return acc
def _rint(x: UOp) -> UOp:   # round to nearest even for |x| < 2^51: add and subtract 1.5 * 2^52
  m = _c(6755399441055744.0)
  return _add(_add(x, m), _mul(m, _c(-1.0)))
def _pow2(n: UOp) -> UOp:   # 2^n for an integral double n in [-1022, 1023]
  return _float(_alu(Ops.SHL, _add(UOp(Ops.CAST, I64, (n,)), _i(1023)), _i(52)))

_EXP2_COEFS = [math.log(2) ** k / math.factorial(k) for k in range(14, -1, -1)]

def exp2_f64(x: UOp) -> UOp:
  xc = _where(_lt(_c(1100.0), x), _c(1100.0), _where(_lt(x, _c(-1100.0)), _c(-1100.0), x))
  xc = _where(_isnan(x), _c(0.0), xc)
  n = _rint(xc)
  p = _poly(_add(xc, _mul(n, _c(-1.0))), _EXP2_COEFS)
  half = _rint(_mul(n, _c(0.5)))            # two factors keep each power of two a normal double
  r = _mul(_mul(p, _pow2(half)), _pow2(_add(n, _mul(half, _c(-1.0)))))
  r = _where(_lt(_c(1023.9999999999999), x), _c(math.inf), r)
  r = _where(_lt(x, _c(-1075.0)), _c(0.0), r)
  return _where(_isnan(x), x, r)

_LN_COEFS = [2 / (2 * k + 1) for k in range(11, -1, -1)]   # ln m = s*(2 + 2/3 s^2 + 2/5 s^4 ...), s = (m-1)/(m+1)

def log2_f64(x: UOp) -> UOp:
  sub = _lt(x, _c(2.2250738585072014e-308))
  xs = _where(sub, _mul(x, _c(2.0 ** 52)), x)
  b = _bits(xs)
  e = _add(_alu(Ops.AND, _alu(Ops.SHR, b, _i(52)), _i(0x7FF)), _where(sub, _i(-1075), _i(-1023)))
  m = _float(_alu(Ops.OR, _alu(Ops.AND, b, _i(0x000FFFFFFFFFFFFF)), _i(0x3FF0000000000000)))
  big = _lt(_c(math.sqrt(2)), m)
  m = _where(big, _mul(m, _c(0.5)), m)
  e = _where(big, _add(e, _i(1)), e)
  s = _alu(Ops.FDIV, _add(m, _c(-1.0)), _add(m, _c(1.0)))
  r = _add(_mul(_mul(s, _poly(_mul(s, s), _LN_COEFS)), _c(1 / math.log(2))), UOp(Ops.CAST, F64, (e,)))
  r = _where(_lt(x, _c(0.0)), _c(math.nan), r)
  r = _where(_alu(Ops.CMPNE, x, _c(0.0)), r, _c(-math.inf))
  r = _where(_alu(Ops.CMPNE, x, _c(math.inf)), r, x)
  return _where(_isnan(x), x, r)

# pi/2 in three parts whose products with k stay exact for |k| < 2^20 (Cody-Waite)
_PIO2 = (1.5707963267341256, 6.077100506506192e-11, 2.0222662487959506e-21)
_SIN = [(-1) ** k / math.factorial(2 * k + 1) for k in range(9, -1, -1)]
_COS = [(-1) ** k / math.factorial(2 * k) for k in range(9, -1, -1)]

def sin_f64(x: UOp) -> UOp:
  k = _rint(_mul(x, _c(2 / math.pi)))
  r = x
  for p in _PIO2: r = _add(r, _mul(k, _c(-p)))
  r2 = _mul(r, r)
  s, c = _mul(r, _poly(r2, _SIN)), _poly(r2, _COS)
  q = _alu(Ops.AND, UOp(Ops.CAST, I64, (k,)), _i(3))
  v = _where(_alu(Ops.CMPNE, q, _i(0)), _where(_alu(Ops.CMPNE, q, _i(1)), _where(_alu(Ops.CMPNE, q, _i(2)), _mul(c, _c(-1.0)), _mul(s, _c(-1.0))), c), s)
  finite = _lt(_alu(Ops.MAX, x, _mul(x, _c(-1.0))), _c(math.inf))
  return _where(finite, v, _c(math.nan))

_f64 = PatternMatcher([
  (UPat(Ops.EXP2, dtype=F64, src=(UPat.var("x"),)), exp2_f64),
  (UPat(Ops.LOG2, dtype=F64, src=(UPat.var("x"),)), log2_f64),
  (UPat(Ops.SIN, dtype=F64, src=(UPat.var("x"),)), sin_f64),
])

def rewrite_float64(sink: UOp) -> UOp:
  """Every float64 EXP2/LOG2/SIN under `sink` replaced by its arithmetic form."""
  return graph_rewrite(sink, _f64)

# ***** float32 exp2/log2 as float32 arithmetic (the C renderer's hc_exp2f/hc_log2f as UOps): lane-wide, no calls *****
F32, I32 = dtypes.float32, dtypes.int32
def _f(v) -> UOp: return UOp.const(F32, v)
def _j(v) -> UOp: return UOp.const(I32, v)
def _fma(a: UOp, b: UOp, c: UOp) -> UOp: return UOp(Ops.MULACC, a.dtype, (a, b, c))
def _polyf(x: UOp, coefs: list[float], fused: bool = False) -> UOp:
  """Horner's rule in float32; `fused`: each step one fma (one rounding: fma.rn on PTX) instead of a multiply and an add."""
  acc = _f(coefs[0])
  for c in coefs[1:]: acc = _fma(acc, x, _f(c)) if fused else _add(_mul(acc, x), _f(c))
  return acc

def exp2_f32(x: UOp) -> UOp:
  """2**x for float32 x within a few ulp: 2^n * p(f), n = rint(x), the power split in two so each factor is normal."""
  xc = _where(_lt(_f(128.0), x), _f(128.0), _where(_lt(x, _f(-150.0)), _f(-150.0), x))
  xc = _where(_isnan(x), _f(0.0), xc)
  n = _add(_add(xc, _f(12582912.0)), _f(-12582912.0))   # rint: add and subtract 1.5 * 2^23
  p = _polyf(_add(xc, _mul(n, _f(-1.0))), [1.5252734e-05, 0.00015403530, 0.0013333558, 0.0096181291, 0.055504109, 0.24022650, 0.69314718, 1.0])
  ni = UOp(Ops.CAST, I32, (n,))
  a = _alu(Ops.SHR, ni, _j(1))
  b = _add(ni, _mul(a, _j(-1)))
  pw = lambda e: UOp(Ops.BITCAST, F32, (_alu(Ops.SHL, _add(e, _j(127)), _j(23)),))
  r = _mul(_mul(p, pw(a)), pw(b))
  r = _where(_lt(x, _f(128.0)), r, _f(math.inf))
  r = _where(_lt(_f(-150.0), x), r, _f(0.0))
  return _where(_isnan(x), x, r)

def log2_f32(x: UOp) -> UOp:
  """log2(x) for float32 x within a few ulp: exponent + atanh series of the mantissa in [sqrt(1/2), sqrt(2))."""
  sub = _lt(x, _f(1.17549435e-38))
  bits = UOp(Ops.BITCAST, I32, (_where(sub, _mul(x, _f(8388608.0)), x),))
  e = _add(_alu(Ops.AND, _alu(Ops.SHR, bits, _j(23)), _j(0xFF)), _where(sub, _j(-150), _j(-127)))
  m = UOp(Ops.BITCAST, F32, (_alu(Ops.OR, _alu(Ops.AND, bits, _j(0x007FFFFF)), _j(0x3F800000)),))
  big = _lt(_f(1.41421356), m)
  m = _where(big, _mul(m, _f(0.5)), m)
  e = _where(big, _add(e, _j(1)), e)
  s = _alu(Ops.FDIV, _add(m, _f(-1.0)), _add(m, _f(1.0)))
  r = _add(_mul(s, _polyf(_mul(s, s), [0.3205988979, 0.4121985831, 0.5770780164, 0.9617966939, 2.8853900818])), UOp(Ops.CAST, F32, (e,)))
  r = _where(_lt(x, _f(0.0)), _f(math.nan), r)
  r = _where(_alu(Ops.CMPNE, x, _f(0.0)), r, _f(-math.inf))
  r = _where(_alu(Ops.CMPNE, x, _f(math.inf)), r, x)
  return _where(_isnan(x), x, r)

# ***** float32 sin/cos as float32 arithmetic, for PTX: sin.approx.f32 is off by up to 2^-20.5 ABSOLUTE (PTX ISA 9.7.3.18),
# which is no relative accuracy at all for small results (sin(1e-30) may come out -6.7e-7). CUDA's sinf is ~1 ulp. *****

# pi/2 = _PIO2F[0] + _PIO2F[1] + _PIO2F[2] + ~1e-23: each float32-rounded remainder of the last (mpmath, 200 bits). With the
# products exact inside fma, x - j*C1 is exact and x - j*pi/2 keeps ~24 good bits while |j| * 1e-23 stays far below the
# closest approach of a float32 to a multiple of pi/2: checked on every float32 next to j*pi/2 for |x| < SIN_F32_MAX, which
# is the worst case of the cancellation (tests/compiler/test_ptx_trig.py NEAR_KPI2; measured <= 2 ulp up to 3e6 too). The bound
# also keeps |r| <= pi/4 + 0.05 (x*2/pi is rounded to 2^-4 there), where the polynomials below still hold.
_PIO2F = (1.5707963705062866, -4.371138828673793e-08, -1.7151245100059164e-15)
SIN_F32_MAX = 2.0 ** 20   # |x| past this goes to the old path (Cody-Waite by 2*pi + sin.approx): 2^-20.5 absolute at best
# minimax polynomials on [-pi/4, pi/4] (Cephes sinf.c / cosf.c coefficients): sin r = r + r^3 S(r^2), cos r = 1 - r^2/2 + r^4 C(r^2)
_SINF = [-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1]
_COSF = [2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2]

def sincos_f32(x: UOp, quadrant: int = 0, fallback: UOp | None = None) -> UOp:
  """sin(x + quadrant*pi/2) for float32 x, within ~1 ulp of the correctly rounded result for |x| <= SIN_F32_MAX (tiny x
  included: j = 0 leaves r = x and sin = r + r^3*..., i.e. x). Past that range (and inf/NaN) the value is `fallback`."""
  y = _mul(x, _f(2 / math.pi))
  j = UOp(Ops.TRUNC, F32, (_add(y, _where(_lt(y, _f(0.0)), _f(-0.5), _f(0.5))),))   # nearest integer (ties away)
  r = x
  for p in _PIO2F: r = _fma(j, _f(-p), r)   # exact products: only the final subtraction of each step rounds
  r2 = _mul(r, r)
  s = _fma(_mul(r, r2), _polyf(r2, _SINF, fused=True), r)
  c = _fma(r2, _fma(r2, _polyf(r2, _COSF, fused=True), _f(-0.5)), _f(1.0))
  q = _alu(Ops.AND, _add(UOp(Ops.CAST, I32, (j,)), _j(quadrant)), _j(3))
  v = _where(_alu(Ops.CMPNE, _alu(Ops.AND, q, _j(1)), _j(0)), c, s)
  v = _where(_alu(Ops.CMPNE, _alu(Ops.AND, q, _j(2)), _j(0)), _mul(v, _f(-1.0)), v)
  if quadrant == 0: v = _where(_alu(Ops.CMPNE, x, _f(0.0)), v, x)   # sin(-0) = -0 (r + (-0)*... rounds to +0)
  if fallback is None: return v
  return _where(_lt(_alu(Ops.MAX, x, _mul(x, _f(-1.0))), _f(SIN_F32_MAX)), v, fallback)

APPROX = "approx"   # arg of a SIN left to the renderer's own (inexact) sequence: the fallback past SIN_F32_MAX

def _is_pio2(c: UOp) -> bool: return c.op is Ops.CONST and abs(c.arg - math.pi / 2) < 1e-7
def _unlane(u: UOp) -> UOp:
  """GEP(i) of a vector ADD/MUL/NEG/CONST as the scalar op on lane i (to see the pi/2 - x of a vectorized cos)."""
  if u.op is not Ops.GEP: return u
  v = u.src[0]
  if v.op is Ops.CONST: return UOp.const(v.dtype.scalar, v.arg)
  if v.op not in (Ops.ADD, Ops.MUL, Ops.NEG): return u
  return UOp(v.op, v.dtype.scalar, tuple(_unlane(UOp(Ops.GEP, s.dtype.scalar, (s,), u.arg)) if s.dtype.count > 1 else s for s in v.src))
def _lanes(s: UOp, x: UOp, fn) -> UOp:
  """fn on each lane of a vector op (the opts vectorize before the target rewrites; PTX runs lanes one by one anyway)."""
  if s.dtype.count == 1: return fn(s, x)
  return UOp(Ops.VECTORIZE, s.dtype, tuple(fn(s.replace(dtype=s.dtype.scalar, src=(g,)), g)
                                           for g in (UOp(Ops.GEP, x.dtype.scalar, (x,), i) for i in range(s.dtype.count))))

def _trig_f32(s: UOp, x: UOp) -> UOp | None:
  if s.arg is not None: return None
  if s.dtype.count != 1: return _lanes(s, x, _trig_f32)
  fb = UOp(Ops.SIN, F32, (x,), APPROX)
  # Tensor.cos is sin(pi/2 - x): rounding pi/2 - x costs up to half an ulp of x ABSOLUTE, which near cos's zeros (and for
  # any large x) is no accuracy left; reading the subtraction back as cos(x) = sin(x + pi/2) keeps x exact
  if (a := _unlane(x)).op is Ops.ADD and len(a.src) == 2:
    for c, m in (a.src, a.src[::-1]):
      if _is_pio2(c) and m.op is Ops.MUL and any(o.op is Ops.CONST and o.arg == -1.0 for o in m.src):
        return sincos_f32(m.src[0] if m.src[1].op is Ops.CONST and m.src[1].arg == -1.0 else m.src[1], 1, fb)
      if _is_pio2(c) and m.op is Ops.NEG: return sincos_f32(m.src[0], 1, fb)
  return sincos_f32(x, 0, fb)

def _half_via_f32(s: UOp, x: UOp) -> UOp | None:
  if s.arg is not None: return None
  if s.dtype.count != 1: return _lanes(s, x, _half_via_f32)
  return UOp(Ops.CAST, s.dtype, (UOp(s.op, F32, (UOp(Ops.CAST, F32, (x,)),)),))

_f32_ptx = PatternMatcher([
  (UPat(Ops.SIN, dtype=F32, src=(UPat.var("x"),), name="s"), _trig_f32),
  (UPat(Ops.LOG2, dtype=F32, src=(UPat.var("x"),), name="s"), lambda s, x: _lanes(s, x, lambda s, x: log2_f32(x))),
  (UPat((Ops.SIN, Ops.LOG2), dtype=(dtypes.float16, dtypes.bfloat16), src=(UPat.var("x"),), name="s"), _half_via_f32),
])

def rewrite_float32_trig(sink: UOp) -> UOp:
  """Every scalar float32 (and half) SIN/LOG2 under `sink` replaced by its arithmetic form (PTX: see sincos_f32)."""
  return graph_rewrite(sink, _f32_ptx)
