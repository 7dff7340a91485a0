"""A column sum of a product with a per-row value (x * m).sum(0), m of shape (rows, 1), as the backward of a per-column
scale through a row max computes (found by bench/perf_fuzz.py, issue 28): m's load is contiguous along the reduction
loop, x's is not. Vectors along the reduction would walk down x's columns, one cache line per element (~18x slower at
4096x4096); the heuristic vectorizes the output loop instead, as for a plain column sum."""
import numpy as np
import pytest
from frontend import Tensor
from compiler.dtypes import dtypes
from compiler.lazy import LazyBuffer
from compiler.lower import lower
from compiler.opt.heuristic import optimize
from compiler.schedule import create_schedule
from compiler.target import Target
from compiler.uop import Ops

def _opts(lanes: int, rows: int = 256, cols: int = 512) -> list:
  x = LazyBuffer.empty((rows, cols), dtypes.float32, "CPU"); x.buffer = object()
  m = LazyBuffer.empty((rows, 1), dtypes.float32, "CPU"); m.buffer = object()
  out = x.alu(Ops.MUL, m.expand((rows, cols))).r(Ops.ADD, (0,))
  (si,) = create_schedule([out])
  return optimize(lower(si.ast), Target("CPU", "c", ncores=2, simd_bytes=4 * lanes)).applied_opts

@pytest.mark.parametrize("lanes", [8, 16])   # AVX2 and AVX-512 widths, whatever this host has
def test_column_sum_with_row_factor_vectorizes_outputs(lanes):
  opts = _opts(lanes)
  assert not any(o[0] == "REDUCE_VECTOR" for o in opts), opts
  assert opts, "no vectors at all"

@pytest.mark.parametrize("shape", [(64, 48), (33, 16), (128, 256)])
def test_column_sum_with_row_factor_values(shape):
  g = np.random.default_rng(5)
  xn, mn = g.standard_normal(shape, dtype=np.float32), g.standard_normal((shape[0], 1), dtype=np.float32)
  x, m = Tensor(xn).realize(), Tensor(mn).realize()
  np.testing.assert_allclose((x * m).sum(0).numpy(), (xn.astype(np.float64) * mn).sum(0), rtol=1e-4, atol=1e-4)
  # the backward of a column scale through a row max: the same column sum of a product with per-row values
  s = Tensor(np.ones(shape[1], np.float32), requires_grad=True)
  (x * s).max(axis=1).sum().backward()
  want = np.zeros(shape[1]); want_idx = xn.argmax(1)
  for i, j in enumerate(want_idx): want[j] += xn[i, j]
  np.testing.assert_allclose(s.grad.numpy(), want, rtol=1e-5, atol=1e-5)
