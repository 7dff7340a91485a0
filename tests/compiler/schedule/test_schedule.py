"""Kernel counts: fusion of elementwise chains, reductions with their elementwise inputs and epilogues, values used
twice realized at most once, movement ops free. Counted with GlobalCounters (inputs are realized first) and checked
on the schedule (Tensor.schedule()) where the count alone could hide a wasted kernel."""
import numpy as np
import pytest
from frontend import Tensor, GlobalCounters
from compiler.uop import Ops

rng = np.random.default_rng(11)
def rt(*shape) -> Tensor: return Tensor(rng.standard_normal(shape).astype(np.float32)).realize()

def kernels(fn) -> tuple[int, np.ndarray]:
  """Run fn(), realize its result, and return (kernels launched, value)."""
  GlobalCounters.reset()
  out = fn().realize()
  n = GlobalCounters.kernel_count
  return n, out.numpy()

def walk(u):
  yield u
  for s in u.src: yield from walk(s)

def stored_values(t: Tensor) -> list:
  """The value each kernel of t's schedule stores."""
  return [st.src[0] for si in t.schedule() if si.kind == "kernel" for st in walk(si.ast) if st.op is Ops.STORE]

def test_elementwise_chain_is_one_kernel():
  a, b, c = rt(4, 5), rt(4, 5), rt(4, 5)
  n, v = kernels(lambda: (a + b) * c)
  assert n == 1
  np.testing.assert_allclose(v, (a.numpy() + b.numpy()) * c.numpy(), rtol=1e-6)
  n, v = kernels(lambda: ((a + b) * c - a / (b.abs() + 1)).relu().sqrt() + 2.5)
  assert n == 1
  an, bn, cn = a.numpy(), b.numpy(), c.numpy()
  np.testing.assert_allclose(v, np.sqrt(np.maximum((an + bn) * cn - an / (np.abs(bn) + 1), 0)) + 2.5, rtol=1e-5)

def test_broadcast_and_views_fuse():
  a, b = rt(4, 5), rt(5)
  n, v = kernels(lambda: a.T.flip(0)[1:, ::2] * b[1::2].reshape(1, 2) + a[0, :2])
  assert n == 1
  an, bn = a.numpy(), b.numpy()
  np.testing.assert_allclose(v, an.T[::-1][1:, ::2] * bn[1::2].reshape(1, 2) + an[0, :2], rtol=1e-6)
  n, v = kernels(lambda: a.pad(((1, 1), (0, 2)), value=3.0) + 1)
  assert n == 1
  np.testing.assert_allclose(v, np.pad(an, ((1, 1), (0, 2)), constant_values=3.0) + 1)

def test_reduce_fuses_elementwise_input():
  x = rt(6, 7)
  n, v = kernels(lambda: ((x * 2) + 1).sum(axis=1))
  assert n == 1
  np.testing.assert_allclose(v, (x.numpy() * 2 + 1).sum(1), rtol=1e-5)

def test_reduce_fuses_elementwise_epilogue():
  x, y = rt(6, 7), rt(6)
  n, v = kernels(lambda: (x * x).sum(axis=1).sqrt() * y + 1)
  assert n == 1
  np.testing.assert_allclose(v, np.sqrt((x.numpy() ** 2).sum(1)) * y.numpy() + 1, rtol=1e-5, atol=1e-6)
  n, v = kernels(lambda: x.max() * 2)
  assert n == 1

def test_value_used_twice_is_computed_once():
  x = rt(4, 8)
  n, v = kernels(lambda: x.exp().sum() / x.exp())
  assert n <= 2
  e = np.exp(x.numpy())
  np.testing.assert_allclose(v, e.sum() / e, rtol=1e-5)
  # and x.exp() is not stored on its own: every kernel stores a reduction or the final quotient
  for val in stored_values(x.exp().sum() / x.exp()):
    assert val.op is not Ops.EXP2 and not (val.op is Ops.MUL and any(s.op is Ops.EXP2 for s in val.src)), f"exp(x) stored alone: {val}"
  # the same tensor object used twice
  e_t = x.exp()
  n, v = kernels(lambda: e_t.sum() / e_t)
  assert n <= 2
  np.testing.assert_allclose(v, e.sum() / e, rtol=1e-5)

def test_reduction_used_twice_is_realized_once():
  x = rt(5, 6)
  s = x.sum(axis=1, keepdim=True)
  n, v = kernels(lambda: (x - s) * s)
  assert n == 2
  sn = x.numpy().sum(1, keepdims=True)
  np.testing.assert_allclose(v, (x.numpy() - sn) * sn, rtol=1e-5, atol=1e-5)
  s2 = x.sum(axis=1, keepdim=True)
  reduce_kernels = [si for si in ((x - s2) * s2).schedule() if any(u.op is Ops.REDUCE_AXIS for u in walk(si.ast))]
  assert len(reduce_kernels) == 1

def test_softmax_three_kernels():
  # max, sum of exp, exp/sum: exp(x - max) is recomputed, never stored on its own
  x = rt(8, 16)
  n, v = kernels(lambda: x.softmax(-1))
  assert n == 3
  e = np.exp(x.numpy() - x.numpy().max(-1, keepdims=True))
  np.testing.assert_allclose(v, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
  for val in stored_values(x.softmax(-1)): assert val.op is not Ops.EXP2, f"exp stored alone: {val}"
  n, _ = kernels(lambda: x.log_softmax(-1))
  assert n <= 3

def test_matmul_epilogue_one_kernel():
  x, w = rt(8, 16), rt(16, 4)
  n, v = kernels(lambda: (x @ w).relu() + 1)
  assert n == 1
  np.testing.assert_allclose(v, np.maximum(x.numpy() @ w.numpy(), 0) + 1, rtol=1e-4, atol=1e-5)

def test_cat_stack_one_kernel():
  a, b, c = rt(2, 3), rt(4, 3), rt(1, 3)
  n, v = kernels(lambda: a.cat(b, c))
  assert n == 1
  np.testing.assert_array_equal(v, np.concatenate([a.numpy(), b.numpy(), c.numpy()]))
  n, _ = kernels(lambda: Tensor.stack(a, a * 2, a + 1))
  assert n == 1

def test_no_kernels_for_realized_and_empty():
  x = rt(3, 4)
  GlobalCounters.reset()
  x.realize()
  assert GlobalCounters.kernel_count == 0
  y = (x + 1).realize()
  GlobalCounters.reset()
  y.realize()
  _ = y.numpy()
  assert GlobalCounters.kernel_count == 0, "realizing twice or reading a contiguous buffer must not launch kernels"
  GlobalCounters.reset()
  (Tensor.zeros(0, 4) + 1).realize()
  assert GlobalCounters.kernel_count == 0
  GlobalCounters.reset()
  _ = x.permute(1, 0).numpy()            # a view needs one copy kernel to read back
  assert GlobalCounters.kernel_count == 1

def test_counters_ops_and_memory():
  a, b = rt(64, 64), rt(64, 64)
  GlobalCounters.reset()
  assert GlobalCounters.kernel_count == 0 and GlobalCounters.global_ops == 0 and GlobalCounters.global_mem == 0
  (a + b).realize()
  assert GlobalCounters.kernel_count == 1
  assert GlobalCounters.global_ops >= 64 * 64
  assert GlobalCounters.global_mem >= 3 * 64 * 64 * 4
  GlobalCounters.reset()
  (a @ b).realize()
  assert GlobalCounters.global_ops >= 2 * 64 ** 3 * 0.9 and GlobalCounters.kernel_count == 1

def test_schedule_does_not_run():
  x = rt(3, 3)
  GlobalCounters.reset()
  sched = ((x + 1) * 2).sum().schedule()
  assert GlobalCounters.kernel_count == 0 and len(sched) == 1 and sched[0].kind == "kernel"

@pytest.mark.parametrize("shape", [(1,), (7,), (33, 65), (2, 3, 4)])
def test_chain_one_kernel_many_shapes(shape):
  a, b = rt(*shape), rt(*shape)
  n, v = kernels(lambda: (a * b + a).exp2() - b)
  assert n == 1
  np.testing.assert_allclose(v, np.exp2(a.numpy() * b.numpy() + a.numpy()) - b.numpy(), rtol=1e-5, atol=1e-6)
