"""Tensor.dot's path for two matrices with no gradient to record (frontend/tensor_reduce.py): it makes the lazy ops of
the general path directly, so it must give the very graph, and so the very kernels, the general path gives."""
import numpy as np
import pytest
from compiler.dtypes import dtypes
from compiler.schedule import create_schedule
from frontend import Tensor

def general(a: Tensor, b: Tensor) -> Tensor:
  """The general path of dot for 2-D operands, written out (what dot did for every product before the short path)."""
  (m, k), n = a.shape, b.shape[1]
  return (a.reshape(m, 1, k) * b.reshape(1, k, n).transpose(-1, -2)).sum(-1)

def asts(t: Tensor) -> list:
  return [si.ast for si in create_schedule([t.lazydata]) if si.kind == "kernel"]

@pytest.mark.parametrize("m,k,n", [(3, 4, 5), (1, 4, 5), (3, 4, 1), (1, 1, 1), (1, 7, 1), (64, 33, 48)])
@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64])
def test_short_path_makes_the_general_graph(m, k, n, dt):
  rng = np.random.default_rng(m * 100 + k * 10 + n)
  an, bn = rng.standard_normal((m, k)), rng.standard_normal((k, n))
  a, b = Tensor(an, dtype=dt).realize(), Tensor(bn, dtype=dt).realize()
  fast, slow = a @ b, general(a, b)
  assert fast.shape == slow.shape == (m, n) and fast.dtype == slow.dtype == dt
  assert fast.lazydata.st == slow.lazydata.st
  assert asts(fast) == asts(slow) and asts(fast)
  np.testing.assert_allclose(fast.numpy(), an @ bn, rtol=1e-4 if dt is dtypes.float32 else 1e-12, atol=1e-5)

@pytest.mark.parametrize("ra,rb,want", [(None, None, None), (None, False, None), (False, False, False)])
def test_short_path_requires_grad_as_the_general_path(ra, rb, want):
  """requires_grad of the result: None (undecided) if either operand is undecided, else False, as Function.apply gives."""
  a, b = Tensor.ones(2, 3, requires_grad=ra), Tensor.ones(3, 4, requires_grad=rb)
  assert (a @ b).requires_grad is want and general(a, b).requires_grad is want and (a @ b)._ctx is None

def test_operands_needing_gradients_take_the_general_path():
  a, b = Tensor([[1.0, 2.0]], requires_grad=True), Tensor([[3.0], [4.0]])
  (a @ b).sum().backward()
  assert a.grad.tolist() == [[3.0, 4.0]]

def test_half_accumulates_in_float32_and_mixed_dtypes_promote():
  """float16 sums accumulate in float32 (the general path's casts), and an int @ float promotes: neither is the short path."""
  a, b = Tensor([[1.0, 2.0]], dtype=dtypes.float16), Tensor([[3.0], [4.0]], dtype=dtypes.float16)
  c = a @ b
  assert c.dtype == dtypes.float16 and c.tolist() == [[11.0]]
  assert (Tensor([[1, 2]]) @ Tensor([[0.5], [0.25]])).tolist() == [[1.0]]

def test_devices_and_shapes_are_still_checked():
  with pytest.raises(RuntimeError, match="don't match"): Tensor.ones(2, 3) @ Tensor.ones(4, 2)

@pytest.mark.parametrize("m,k,n", [(3, 4, 5), (1, 4, 5), (3, 4, 1), (1, 1, 1)])
@pytest.mark.parametrize("view", [False, True])
def test_short_path_views_remembered_make_the_same_graph(m, k, n, view):
  """The short path remembers its final views by the operands' trackers (tensor_reduce._dot_views): the second product
  of the same operands, and of others with the same trackers (a transposed view too), is the general path's graph, and
  its operands are marked viewed as LazyBuffer._view marks them."""
  from frontend import tensor_reduce
  rng = np.random.default_rng(m + k + n)
  tensor_reduce._dot_views.clear()
  for _ in range(3):
    an, bn = rng.standard_normal((k, m) if view else (m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    a, b = Tensor(an).realize(), Tensor(bn).realize()
    if view: a, an = a.T, an.T
    fast = a @ b
    assert a.lazydata.base.viewed and b.lazydata.base.viewed and a.lazydata.base.buffer.viewed and b.lazydata.base.buffer.viewed
    slow = general(a, b)
    assert fast.lazydata.st == slow.lazydata.st and asts(fast) == asts(slow)
    np.testing.assert_allclose(fast.numpy(), an @ bn, rtol=1e-4, atol=1e-5)
  assert len(tensor_reduce._dot_views) == 1
