"""The C renderer's exp2/log2 (scalar and vector forms) against numpy, including special values and subnormals."""
import numpy as np
import pytest
from compiler.uop import Ops
from compiler.dtypes import dtypes
from frontend import Tensor

SPECIAL_EXP = np.array([0, 1, -1, np.inf, -np.inf, np.nan, 200, -200, 127.9, -149, -126.5, 0.5, -0.5, 1e-8, 64.25, -64.75], np.float32)
SPECIAL_LOG = np.array([0, 1, -1, np.inf, -np.inf, np.nan, 1e-40, 2, 8, 0.5, 1.41421356, 0.70710678, 3e38, 1.17549435e-38, 5, 1e-45], np.float32)

def raw(x: np.ndarray, op: Ops) -> np.ndarray:
  return Tensor(Tensor(x).lazydata.alu(op)).numpy()

@pytest.mark.parametrize("n", [7, 16 * 64])   # 7: scalar code; 1024: vector lanes
def test_exp2(n):
  x = np.concatenate([SPECIAL_EXP, np.linspace(-160, 130, n, dtype=np.float32)])[:max(n, 16)] if n > 16 else SPECIAL_EXP[:n]
  got, ref = raw(x, Ops.EXP2), np.exp2(x.astype(np.float64))
  with np.errstate(all="ignore"):
    finite = np.isfinite(ref) & (ref < 3.4e38) & (ref > 1.2e-38)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=3e-7)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    assert np.all(got[np.isinf(ref)] == np.inf)

@pytest.mark.parametrize("n", [7, 16 * 64])
def test_log2(n):
  x = np.concatenate([SPECIAL_LOG, np.exp(np.linspace(-100, 88, n)).astype(np.float32)])[:max(n, 16)] if n > 16 else SPECIAL_LOG[:n]
  got = raw(x, Ops.LOG2)
  with np.errstate(all="ignore"): ref = np.log2(x.astype(np.float64))
  ok = np.isfinite(ref)
  np.testing.assert_allclose(got[ok], ref[ok], rtol=3e-7, atol=2e-6)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
  np.testing.assert_array_equal(got[np.isinf(ref)], ref[np.isinf(ref)])

def test_float64_transcendentals_as_arithmetic():
  """compiler.transcendental (used where a renderer has no f64 exp2/log2/sin, e.g. PTX) run on the CPU."""
  from compiler.transcendental import rewrite_float64
  from compiler.schedule import create_schedule
  from compiler.lower import lower
  from compiler.linearize import linearize
  from compiler.render_c import render_c
  from compiler.assemble.c_compiler import compile_c
  from frontend.engine import from_host, Buffer
  from frontend.devices import open_device
  x = np.concatenate([np.linspace(-1080, 1030, 501), np.exp(np.linspace(-700, 700, 501)), [np.inf, -np.inf, np.nan, 0.0, 5e-324]])
  for op, ref in ((Ops.EXP2, np.exp2), (Ops.LOG2, np.log2), (Ops.SIN, np.sin)):
    xs = x if op is not Ops.SIN else np.clip(x, -1e5, 1e5)
    src = from_host(xs, dtypes.float64, "CPU")
    si = create_schedule([src.alu(op)])[0]
    k = lower(si.ast, "f64_" + op.name.lower())
    k.sink = rewrite_float64(k.sink)
    assert all(u.op is not op for u in k.sink.toposort())
    prog = open_device("CPU").program(k.name, compile_c(render_c(k, 1, linearize(k)), k.name))
    out = Buffer("CPU", xs.nbytes)
    prog(out.raw, src.buffer.raw)
    got = np.frombuffer(bytes(out.raw.view()), np.float64)
    with np.errstate(all="ignore"): want = ref(xs)
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=2e-15, atol=2e-15)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])
