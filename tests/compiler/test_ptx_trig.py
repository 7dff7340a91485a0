"""float32 sin/cos/log2 on NV are within a few ulp of the correctly rounded result (like CUDA's sinf/cosf/log2f), not
only within the absolute bounds of sin.approx/lg2.approx (2^-20.5 and 2^-22, PTX ISA 9.7.3.18/9.7.3.20), which the PTX
interpreter models at their worst case (hcqrt/mock/ptx/approx.py). The renderer spells them out in fma arithmetic
(compiler/transcendental.py sincos_f32, log2_f32). Each is checked against float64 numpy, in float32 ulps."""
import numpy as np
import pytest
from compiler.transcendental import SIN_F32_MAX
from tests.compiler.test_ptx_render import run

rng = np.random.default_rng(4141)

def ulps(got: np.ndarray, want: np.ndarray, dt=np.float32) -> np.ndarray:
  """|got - want| in units of dt's spacing at |want| (the smallest normal's below the normal range)."""
  sp = np.spacing(np.maximum(np.abs(want), np.finfo(dt).tiny).astype(dt)).astype(np.float64)
  return np.abs(got.astype(np.float64) - want) / sp

def assert_within_ulps(fn: str, x: np.ndarray, bound: float, what: str) -> None:
  """Tensor.fn on PTXEMU against float64 numpy's fn: at most `bound` float32 ulps anywhere (the worst input named)."""
  got = run(lambda t: getattr(t, fn)(), [x], "PTXEMU")
  err = ulps(got, getattr(np, fn)(x.astype(np.float64)))
  i = int(np.argmax(err))
  assert err[i] <= bound, (fn, what, float(x[i]), float(got[i]), float(err[i]))

def f32(*parts) -> np.ndarray: return np.concatenate([np.asarray(p, np.float64).ravel() for p in parts]).astype(np.float32)
TINY = f32([1e-30, -1e-30, 1e-10, -1e-10, 1e-5, -1e-5, 3e-4, 2.0 ** -12, 1e-38, 1e-44], rng.uniform(-1e-3, 1e-3, 200))
MODERATE = f32(rng.uniform(-10, 10, 3000))
LARGE = f32(rng.uniform(-SIN_F32_MAX, SIN_F32_MAX, 3000), 10.0 ** rng.uniform(1, np.log10(SIN_F32_MAX), 1000))
# the float32s nearest each multiple of pi/2 up to the range (and their neighbours): where the reduction cancels most
_K = np.float32(np.arange(1, SIN_F32_MAX * 2 / np.pi) * (np.pi / 2))
NEAR_KPI2 = f32(_K, np.nextafter(_K, np.float32(np.inf)), np.nextafter(_K, np.float32(-np.inf)))
RANGES = {"tiny": TINY, "moderate": MODERATE, "large": LARGE, "near_k_pi/2": NEAR_KPI2}

# measured (PTXEMU, worst-case .approx mock): sin, cos <= 1.6 ulp on these; before: up to 7e30 (tiny sin) / 3e11
@pytest.mark.parametrize("rng_name", list(RANGES))
@pytest.mark.parametrize("fn", ["sin", "cos"])
def test_trig_f32_within_2_ulp(fn, rng_name):
  assert_within_ulps(fn, RANGES[rng_name], 2.0, rng_name)

def test_sin_special_values():
  x = f32([0.0, -0.0, np.inf, -np.inf, np.nan, 2e6, -3e7, 1e38])
  got = run(lambda t: t.sin(), [x], "PTXEMU")
  assert np.signbit(got[:2]).tolist() == [False, True] and got[:2].tolist() == [0.0, 0.0]   # sin(-0) = -0
  assert np.isnan(got[2:5]).all()
  assert (np.abs(got[5:]) <= 1.0).all()   # past SIN_F32_MAX: the old sin.approx path, inexact but a sine-sized value

def test_half_sin_via_f32():
  x = rng.uniform(-50, 50, 500).astype(np.float16)
  got = run(lambda t: t.sin(), [x], "PTXEMU")
  assert got.dtype == np.float16
  assert ulps(got, np.sin(x.astype(np.float64)), np.float16).max() <= 1.0

# measured: log2 <= 3.7 ulp, ln <= 2.7 ulp; before: log2(1) = 2.4e-7 (lg2.approx's 2^-22 absolute), 256 ulp near 1.0057
LOG_RANGES = {"near_1": f32(1 + np.arange(-400, 400) * 2.0 ** -23, rng.uniform(0.99, 1.01, 2000)),
              "half_to_2": f32(rng.uniform(0.5, 2, 3000)),
              "wide": f32(np.exp(rng.uniform(-87, 88, 3000)), [1e-40, 1e-45, 3e38])}
@pytest.mark.parametrize("rng_name", list(LOG_RANGES))
@pytest.mark.parametrize("fn", ["log2", "log"])
def test_log_f32_within_4_ulp(fn, rng_name):
  assert_within_ulps(fn, LOG_RANGES[rng_name], 4.0, rng_name)

def test_log_of_one_is_zero():
  x = f32([1.0, 1.0, 2.0 ** -24 + 1, 1 - 2.0 ** -24])
  assert run(lambda t: t.log(), [x], "PTXEMU")[:2].tolist() == [0.0, 0.0]

def test_vectorized_cos_is_read_as_cos():
  """A vectorized sin(pi/2 - x) is rewritten lane by lane, each lane as cos(x) (quadrant + 1 on x itself), not sin of the
  rounded pi/2 - x (the opts may vectorize before the target rewrites)."""
  from compiler.uop import UOp, Ops
  from compiler.dtypes import dtypes
  from compiler.transcendental import rewrite_float32_trig
  v2 = dtypes.float32.vec(2)
  x = UOp(Ops.DEFINE_VAR, v2, (), ("x", 0, 1))
  r = rewrite_float32_trig(UOp(Ops.SIN, v2, (UOp(Ops.ADD, v2, (UOp(Ops.NEG, v2, (x,)), UOp.const(v2, 1.5707963267948966))),)))
  assert r.op is Ops.VECTORIZE and len(r.src) == 2
  for lane in r.src:   # the quadrant offset: CAST(j) + 1
    assert any(u.op is Ops.ADD and u.dtype == dtypes.int32 and any(s.op is Ops.CONST and s.arg == 1 for s in u.src) for u in lane.toposort())
