"""The C renderer's exp2/log2 (scalar and vector forms) against numpy, including special values and subnormals."""
import numpy as np
import pytest
from compiler.uop import Ops
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
