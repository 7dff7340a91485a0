"""The PTX interpreter's `.approx` instructions are exactly as inexact as NVIDIA's PTX ISA allows (hcqrt/mock/ptx/approx.py),
and the renderer's refined sequences (reciprocal, division, sqrt, sin's range reduction) still give the right results
on them. Every bound below is restated from the ISA section named next to it, not read from the mock."""
import math, struct
from fractions import Fraction
import numpy as np
import pytest
from hcqrt.mock.ptx import PTXModule
from hcqrt.mock.ptx.numerics import bf16_to_f32, f32_to_bf16
from compiler.render_ptx import _Renderer
from frontend import engine
from tests.mock.test_ptx_interpreter import Dev, HDR
from tests.compiler.test_ptx_render import run

rng = np.random.default_rng(41)
PI = np.pi

def ptx(ins: str, *xs: np.ndarray) -> np.ndarray:
  """`ins %d, %a0, %a1...` on each element (one thread each); registers .b16/.b32/.b64 by the arrays' width."""
  n, w = xs[0].size, xs[0].itemsize
  b = {2: "b16", 4: "b32", 8: "b64"}[w]
  ops = ", ".join(f"%a{i}" for i in range(len(xs)))
  loads = "".join(f"add.s64 %rd5, %rd{10 + i}, %rd3; ld.global.{b} %a{i}, [%rd5];\n" for i in range(len(xs)))
  params = ", ".join(f".param .u64 a{i}" for i in range(len(xs)))
  src = HDR + f""".visible .entry k({params}, .param .u64 o, .param .u32 n)
{{
  .reg .pred %p; .reg .b32 %t<4>; .reg .b64 %rd<20>; .reg .{b} %d, {ops};
  {"".join(f"ld.param.u64 %rd{10 + i}, [a{i}]; " for i in range(len(xs)))}ld.param.u64 %rd2, [o]; ld.param.u32 %t3, [n];
  mov.u32 %t0, %ctaid.x; mov.u32 %t1, %ntid.x; mov.u32 %t2, %tid.x; mad.lo.s32 %t0, %t0, %t1, %t2;
  setp.ge.u32 %p, %t0, %t3; @%p bra $end;
  mul.wide.u32 %rd3, %t0, {w};
  {loads}  {ins} %d, {ops};
  add.s64 %rd6, %rd2, %rd3; st.global.{b} [%rd6], %d;
$end:
  ret;
}}"""
  d = Dev(); out = np.zeros_like(xs[0])
  PTXModule(src).launch("k", d.mem, ((n + 127) // 128, 1, 1), (128, 1, 1), struct.pack("<" + "Q" * (len(xs) + 1) + "I", *[d.buf(x) for x in xs], d.buf(out), n))
  return out

def ulp32(v) -> np.ndarray:
  """Spacing of float32 at |v| (the smallest subnormal below the normal range)."""
  return np.exp2(np.floor(np.log2(np.maximum(np.abs(v), 2.0 ** -126))) - 23)

def steps32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """How many float32 values apart a and b are (same sign)."""
  return np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))

# (built at import, in a fixed order: the same data whichever tests run)
def spread(lo: float, hi: float, n: int = 2000) -> np.ndarray: return rng.uniform(lo, hi, n).astype(np.float32)
def logspread(lo: float, hi: float, n: int = 2000) -> np.ndarray: return np.exp2(rng.uniform(np.log2(lo), np.log2(hi), n)).astype(np.float32)
def as_bf16(x) -> np.ndarray: return f32_to_bf16(np.asarray(x, np.float32))

F32_CASES = {   # instruction: (inputs, exact, allowed |error| given exact, ISA corner cases (input, result))
  "sin.approx.f32": (spread(-2 * PI, 2 * PI), np.sin, lambda e: 2 ** -20.5,            # 9.7.3.18, on [-2pi, 2pi]
                     [(-np.inf, np.nan), (-0.0, -0.0), (0.0, 0.0), (np.inf, np.nan), (np.nan, np.nan)]),
  "sin.approx.ftz.f32": (spread(2 * PI, 100 * PI), np.sin, lambda e: 2 ** -14.7, []),     # 9.7.3.18, on [-100pi, 100pi]
  "cos.approx.f32": (spread(-100 * PI, 100 * PI), np.cos, lambda e: 2 ** -14.7,        # 9.7.3.19
                     [(-np.inf, np.nan), (-0.0, 1.0), (0.0, 1.0), (np.inf, np.nan)]),
  "lg2.approx.f32": (spread(0.5, 2), np.log2, lambda e: 2 ** -22,                      # 9.7.3.20: absolute on (0.5, 2)
                     [(-np.inf, np.nan), (-1.0, np.nan), (-0.0, -np.inf), (0.0, -np.inf), (np.inf, np.inf)]),
  "lg2.approx.ftz.f32": (logspread(2, 1e30), np.log2, lambda e: 2 ** -22 * np.abs(e), []),   # 9.7.3.20: relative elsewhere
  "tanh.approx.f32": (spread(-5, 5), np.tanh, lambda e: 2 ** -11 * np.abs(e),          # 9.7.3.22
                      [(-np.inf, -1.0), (-0.0, -0.0), (0.0, 0.0), (np.inf, 1.0), (1e-40, 1e-40)]),   # subnormals pass through
  "rsqrt.approx.f32": (logspread(1e-30, 1e30), lambda x: 1 / np.sqrt(x), lambda e: 2 ** -22.9 * e,   # 9.7.3.16
                       [(-np.inf, np.nan), (-1.0, np.nan), (-0.0, -np.inf), (0.0, np.inf), (np.inf, 0.0)]),
  "sqrt.approx.f32": (logspread(1e-30, 1e30), np.sqrt, lambda e: 2 ** -23 * e,        # 9.7.3.15
                      [(-np.inf, np.nan), (-1.0, np.nan), (-0.0, -0.0), (0.0, 0.0), (np.inf, np.inf)]),
  "rcp.approx.f32": (logspread(1e-30, 1e30) * np.sign(spread(-1, 1)), lambda x: 1 / x, lambda e: ulp32(e),   # 9.7.3.13: 1 ulp
                     [(-np.inf, -0.0), (-0.0, -np.inf), (0.0, np.inf), (np.inf, 0.0)]),
}

def same_special(got, want) -> bool:
  want = np.float32(want)
  return bool(np.isnan(got) if np.isnan(want) else (got == want and np.signbit(got) == np.signbit(want)))

@pytest.mark.parametrize("ins", list(F32_CASES))
def test_f32_approx_is_off_by_the_documented_bound(ins):
  x, exact_fn, bound_fn, corners = F32_CASES[ins]
  got = ptx(ins, x).astype(np.float64)
  exact = exact_fn(x.astype(np.float64)); bound = bound_fn(exact)
  ratio = np.abs(got - exact) / bound
  assert ratio.max() <= 1, (ins, ratio.max())        # never worse than the ISA's bound
  assert ratio.max() > 0.75, (ins, ratio.max())      # ...but as bad as it allows (an exact mock gives ratio 0)
  assert (got > exact).any() and (got < exact).any()   # errors in both directions
  if corners:
    cx = np.array([c[0] for c in corners], np.float32)
    for (xi, want), g in zip(corners, ptx(ins, cx)): assert same_special(g, want), (ins, xi, g, want)

def test_ex2_is_two_ulp_from_the_rounded_result():
  x = np.random.default_rng(12).uniform(-125, 127, 2000).astype(np.float32)   # 9.7.3.21: "maximum ulp error is 2 ulp from correctly rounded result across the full range"
  got, rn = ptx("ex2.approx.f32", x), np.exp2(x.astype(np.float64)).astype(np.float32)
  assert steps32(got, rn).max() == 2 and (got > rn).any() and (got < rn).any()
  cx = np.array([-np.inf, -0.0, 0.0, np.inf, 200.0], np.float32)
  assert ptx("ex2.approx.f32", cx).tolist() == [0.0, 1.0, 1.0, np.inf, np.inf]

def test_sin_outside_its_range_has_no_guarantee():
  x = np.random.default_rng(13).uniform(100 * PI, 1e4, 2000).astype(np.float32)   # 9.7.3.18: "Outside of the range [-100pi .. +100pi] ... no defined error guarantees"
  got = ptx("sin.approx.f32", x).astype(np.float64)
  assert np.abs(got - np.sin(x.astype(np.float64))).max() > 0.5 and np.abs(got).max() <= 1

HALF_CASES = {   # instruction: (element type, inputs, exact, allowed |error| given exact)
  "ex2.approx.f16": ("f16", spread(-14, 15).astype(np.float16), np.exp2, lambda e: 2 ** -9.9 * e),        # 9.7.4.10: relative
  "tanh.approx.f16": ("f16", spread(-4, 4).astype(np.float16), np.tanh, lambda e: 2 ** -10.987 + 0 * e),  # 9.7.4.9: absolute
  "ex2.approx.ftz.bf16": ("bf16", as_bf16(spread(-100, 100)), np.exp2, lambda e: 2 ** -7 * e),           # 9.7.4.10: relative
  "tanh.approx.bf16": ("bf16", as_bf16(spread(-4, 4)), np.tanh, lambda e: 2 ** -8 + 0 * e),              # 9.7.4.9: absolute
}

@pytest.mark.parametrize("ins", list(HALF_CASES))
def test_half_approx_is_off_by_the_documented_bound(ins):
  kind, x, exact_fn, bound_fn = HALF_CASES[ins]
  got = ptx(ins, x)
  val = (lambda v: v.astype(np.float64)) if kind == "f16" else (lambda v: bf16_to_f32(v).astype(np.float64))
  exact = exact_fn(val(x)); ratio = np.abs(val(got) - exact) / bound_fn(exact)
  assert ratio.max() <= 1 and ratio.max() > 0.6, (ins, ratio.max())

SMALL_RESULT_CASES = {   # absolute bounds where the result is near 0, so a relative bound of the same size would be far smaller
  "lg2.approx.f32": ("f32", np.random.default_rng(14).uniform(0.99, 1.01, 2000).astype(np.float32), np.log2, 2 ** -22),   # 9.7.3.20: abs on (0.5, 2)
  "tanh.approx.f16": ("f16", np.random.default_rng(15).uniform(-0.05, 0.05, 2000).astype(np.float16), np.tanh, 2 ** -10.987),   # 9.7.4.9
  "tanh.approx.bf16": ("bf16", as_bf16(np.random.default_rng(16).uniform(-0.05, 0.05, 2000)), np.tanh, 2 ** -8),   # 9.7.4.9
}

@pytest.mark.parametrize("ins", list(SMALL_RESULT_CASES))
def test_absolute_bounds_apply_near_zero_results(ins):
  """|log2 x| < 0.015 near x = 1 and |tanh x| < 0.05 near 0: only an absolute bound lets the error reach its full size here."""
  kind, x, exact_fn, bound = SMALL_RESULT_CASES[ins]
  got = ptx(ins, x)
  val = (lambda v: bf16_to_f32(v).astype(np.float64)) if kind == "bf16" else (lambda v: v.astype(np.float64))
  exact = exact_fn(val(x)); ratio = np.abs(val(got) - exact) / bound
  assert ratio.max() <= 1 and ratio.max() > 0.75, (ins, ratio.max())
  assert (val(got) > exact).any() and (val(got) < exact).any()

@pytest.mark.parametrize("op", ["rcp", "rsqrt"])
def test_f64_gross_approximations_use_the_upper_word(op):
  """rcp.approx.ftz.f64 (9.7.3.14), rsqrt.approx.ftz.f64 (9.7.3.17): only a[63:32] is read, d[31:0] is zero, subnormal
  inputs flush to zero, NaN is 0x7fffffff00000000."""
  x = np.exp2(np.random.default_rng(10).uniform(-900, 900, 2000))
  got = ptx(f"{op}.approx.ftz.f64", x)
  assert ((got.view(np.uint64) & np.uint64(0xFFFFFFFF)) == 0).all()
  exact = 1 / x if op == "rcp" else 1 / np.sqrt(x)
  rel = np.abs(got / exact - 1)
  # 20 mantissa bits in, 20 out: not a full double. The ISA promises no accuracy (9.7.3.14/17: "a fast, gross
  # approximation"); within one 1.11.20 step of the upper word's exact result is the mock's assumption, pinned here
  assert rel.max() < 2 ** -19 and rel.max() > 2 ** -21
  low = x.view(np.uint64) | np.uint64(0xFFFFFFFF)   # the ignored low word makes no difference
  np.testing.assert_array_equal(ptx(f"{op}.approx.ftz.f64", low.view(np.float64)), got)
  sp = ptx(f"{op}.approx.ftz.f64", np.array([1e-310, -1e-310, np.nan]))
  assert sp[0] == np.inf and sp[1] == -np.inf and sp.view(np.uint64)[2] == 0x7FFFFFFF00000000

@pytest.mark.parametrize("ins", ["div.approx.f32", "div.full.f32"])
def test_div_approx_is_two_ulp(ins):
  g = np.random.default_rng(11)   # 9.7.3.8: 2 ulp
  a, b = g.uniform(-10, 10, 2000).astype(np.float32), (np.exp2(g.uniform(-10, 10, 2000)) * g.choice([-1, 1], 2000)).astype(np.float32)
  got = ptx(ins, a, b).astype(np.float64); exact = a.astype(np.float64) / b
  ratio = np.abs(got - exact) / ulp32(exact)
  assert ratio.max() <= 2 and ratio.max() > 1.5
  if ins == "div.approx.f32":   # 9.7.3.8: for 2^126 < |b| < 2^128, NaN when a is infinite, else a sign-preserving zero
    big = ptx(ins, np.array([1.0, -1.0, np.inf], np.float32), np.array([2.0 ** 127] * 3, np.float32))
    assert big[0] == 0 and np.signbit(big[1]) and np.isnan(big[2])

# ***** the renderer's sequences on the inexact mock *****
def _normal(n, dt, seed):   # normal values over a wide range of exponents, random mantissas and signs
  g = np.random.default_rng(seed)
  return (np.exp2(g.integers(-60, 60, n)) * g.uniform(1, 2, n) * np.sign(g.uniform(-1, 1, n))).astype(dt)

def test_fma_f64_rounds_once():
  """The refinements' residuals (1 - b*y, a - q*b) cancel almost all of a*b: fma.rn.f64 must round a*b+c once (PTX ISA
  9.7.3.6), which long double's 64-bit product alone cannot do."""
  a, b = _normal(4000, np.float64, 1), _normal(4000, np.float64, 2)
  c = -(a * b) * (1 + np.random.default_rng(3).integers(-4, 5, a.size) * 2.0 ** -52)   # a*b+c: a few ulps of a*b, or 0
  exact = [Fraction(x) * Fraction(y) + Fraction(z) for x, y, z in zip(a, b, c)]
  for mode in ("rn", "rz", "rm", "rp"):
    want = np.array([_round(x, mode) for x in exact])
    np.testing.assert_array_equal(ptx(f"fma.{mode}.f64", a, b, c).view(np.uint64), want.view(np.uint64), err_msg=mode)

def _round(x: Fraction, mode: str) -> float:
  """x (finite, in range) rounded to float64: to nearest, or to the neighbour toward zero / -inf / +inf."""
  v = float(x)   # int / int: correctly rounded to nearest
  if x == 0: return -0.0 if mode == "rm" else 0.0   # IEEE 754 6.3: an exact zero sum of nonzero terms
  if mode == "rn" or Fraction(v) == x: return v
  up = {"rz": x < 0, "rp": True, "rm": False}[mode]
  return v if (Fraction(v) > x) == up else math.nextafter(v, math.inf if up else -math.inf)

@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_refined_sequences_are_correctly_rounded(dt):
  a, b = _normal(3001, dt, 4), _normal(3001, dt, 5)
  if dt == np.float64: a, b = a * _normal(3001, dt, 6), b * _normal(3001, dt, 7)   # full 53-bit mantissas
  # tiny and subnormal inputs to sqrt too: its residual x - s*s drops below the subnormal grid unless x is lifted
  tiny = np.array([1e-40, 3e-39, 1e-35, 2.0 ** -110, 7e-45, 2.0 ** -101] if dt == np.float32 else [1e-310, 2.0 ** -1000, 5e-324, 1e-300], dt)
  for fn, args in ((lambda x, y: x / y, (a, b)), (lambda x, y: x.reciprocal(), (a, b)), (lambda x, y: x.abs().sqrt(), (a, b)),
                   (lambda x, y: x.sqrt(), (np.concatenate([tiny, np.abs(a)]), np.concatenate([tiny, b])))):
    got = run(fn, args, "PTXEMU")
    want = run(fn, args, "CPU")   # the CPU's / and sqrt are IEEE: correctly rounded
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))

def test_the_refinement_matters(monkeypatch):
  """With the fma refinement steps removed, the bare .approx results are no longer correctly rounded on the mock."""
  def bare_recip(self, d, b, t, keep=True):
    self.emit(f"rcp.approx.f32 {d}, {b}"); return d
  def bare_fdiv(self, d, a, b, t):
    y = self.reg("f"); self.emit(f"rcp.approx.f32 {y}, {b}"); self.emit(f"mul.rn.f32 {d}, {a}, {y}")
  def bare_sqrt(self, d, x, t): self.emit(f"sqrt.approx.f32 {d}, {x}")
  monkeypatch.setattr(_Renderer, "recip", bare_recip); monkeypatch.setattr(_Renderer, "fdiv", bare_fdiv)
  monkeypatch.setattr(_Renderer, "sqrt", bare_sqrt)
  monkeypatch.setattr(engine, "_kernel_cache", {})   # compile anew with the bare sequences
  a, b = _normal(2999, np.float32, 8), _normal(2999, np.float32, 9)
  for fn in (lambda x, y: x / y, lambda x, y: x.reciprocal(), lambda x, y: x.abs().sqrt()):
    got, want = run(fn, (a, b), "PTXEMU"), run(fn, (a, b), "CPU")
    assert (got != want).mean() > 0.1

def test_sin_range_reduction_matters(monkeypatch):
  """Tensor.sin past SIN_F32_MAX (where compiler/transcendental.py sincos_f32 hands over to the renderer's sin_f32):
  accurate with its Cody-Waite reduction, wrong without it."""
  from compiler.transcendental import SIN_F32_MAX
  x = np.concatenate([np.linspace(SIN_F32_MAX * 1.01, 1e7, 2000), -np.linspace(SIN_F32_MAX * 1.01, 1e7, 2000)]).astype(np.float32)
  exact = np.sin(x.astype(np.float64))
  assert np.abs(run(lambda t: t.sin(), (x,), "PTXEMU") - exact).max() < 2 ** -20.5 + 2e-6   # measured 9e-7 up to 1e7
  monkeypatch.setattr(_Renderer, "sin_f32", lambda self, d, x: self.emit(f"sin.approx.f32 {d}, {x}"))
  monkeypatch.setattr(engine, "_kernel_cache", {})
  assert np.abs(run(lambda t: t.sin(), (x,), "PTXEMU") - exact).max() > 0.5
