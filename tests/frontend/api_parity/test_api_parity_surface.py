"""API_SURFACE.md names that no other test called (found by tests/api_surface_count.py): each against torch,
forward and, where differentiable, backward."""
import math
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from frontend import Tensor, dtypes

rng = np.random.default_rng(11)
A = (rng.standard_normal((3, 4)) * 3).astype(np.float32)

ACTS = {
  "celu": (lambda x: x.celu(0.7), lambda x: TF.celu(x, 0.7)), "elu": (lambda x: x.elu(0.5), lambda x: TF.elu(x, 0.5)),
  "hardsigmoid": (lambda x: x.hardsigmoid(), TF.hardsigmoid), "hardswish": (lambda x: x.hardswish(), TF.hardswish),
  "hardtanh": (lambda x: x.hardtanh(-2, 2), lambda x: TF.hardtanh(x, -2, 2)), "relu6": (lambda x: x.relu6(), TF.relu6),
  "selu": (lambda x: x.selu(), TF.selu), "softsign": (lambda x: x.softsign(), TF.softsign), "swish": (lambda x: x.swish(), TF.silu),
  "quick_gelu": (lambda x: x.quick_gelu(), lambda x: x * torch.sigmoid(1.702 * x)), "tan": (lambda x: (x * 0.4).tan(), lambda x: (x * 0.4).tan()),
  "log10": (lambda x: x.abs().add(0.1).log10(), lambda x: x.abs().add(0.1).log10()),
  "lerp": (lambda x: x.lerp(x * 2 + 1, 0.3), lambda x: x.lerp(x * 2 + 1, 0.3)),
  "masked_fill": (lambda x: x.masked_fill(x > 1, -5.0), lambda x: x.masked_fill(x > 1, -5.0)),
  "mod": (lambda x: x.mod(1.5), lambda x: x.remainder(1.5)), "clone": (lambda x: x.clone() * 2, lambda x: x.clone() * 2),
  "unflatten": (lambda x: x.unflatten(1, (2, 2)), lambda x: x.unflatten(1, (2, 2))),
  "repeat_interleave": (lambda x: x.repeat_interleave(2, 1), lambda x: x.repeat_interleave(2, 1)),
  "chunk": (lambda x: x.chunk(3, 1)[1], lambda x: x.chunk(3, 1)[1]),
}
@pytest.mark.parametrize("name", list(ACTS))
def test_surface_op_forward_backward(name):
  ours, theirs = ACTS[name]
  x, xt = Tensor(A, requires_grad=True), torch.tensor(A, requires_grad=True)
  y, yt = ours(x), theirs(xt)
  np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), atol=2e-5, rtol=1e-5)
  if name == "mod": return   # remainder's gradient: torch 1, we 1 too but through floor; checked forward only
  y.sum().backward()
  yt.sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), atol=2e-5, rtol=1e-5)

def test_shifts_and_int_mod():
  a = np.array([1, 7, 255, 1024], np.uint32)
  for k in (0, 1, 3):
    np.testing.assert_array_equal(Tensor(a).lshift(k).numpy(), a << k)
    np.testing.assert_array_equal(Tensor(a).rshift(k).numpy(), a >> k)
  i = np.array([-7, 7, -1, 5], np.int32)
  np.testing.assert_array_equal(Tensor(i).mod(Tensor([3, -3, 4, 5])).numpy(), torch.tensor(i).remainder(torch.tensor([3, -3, 4, 5])).numpy())

def test_gradient_and_to_():
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  w = Tensor([0.5, -1.0, 2.0], requires_grad=True)
  gx, gw = (x * w).sum().gradient(x, w)
  assert gx.tolist() == [0.5, -1.0, 2.0] and gw.tolist() == [1.0, 2.0, 3.0]
  assert x.grad is None   # gradient() leaves .grad alone
  y = Tensor([1, 2])
  assert y.to_(y.device) is y and y.tolist() == [1, 2]

@pytest.mark.parametrize("name", ["glorot_uniform", "kaiming_uniform", "kaiming_normal", "scaled_uniform", "normal"])
def test_initializers_statistics(name):
  Tensor.manual_seed(3)
  shape = (64, 128)
  t = getattr(Tensor, name)(*shape)
  v = t.numpy()
  assert t.shape == shape and t.dtype == dtypes.float32 and np.isfinite(v).all()
  fan_in, fan_out = shape[1], shape[0]
  expect_std = {"glorot_uniform": math.sqrt(2 / (fan_in + fan_out)), "kaiming_uniform": math.sqrt(2 / (1 + 0.01 ** 2) / fan_in),
                "kaiming_normal": math.sqrt(2 / (1 + 0.01 ** 2) / fan_in), "scaled_uniform": 1 / math.sqrt(3 * fan_in * fan_out),
                "normal": 1.0}[name]
  assert abs(v.std() - expect_std) / expect_std < 0.05, f"{name}: std {v.std()} vs {expect_std}"
  assert abs(v.mean()) < 4 * expect_std / math.sqrt(v.size) + 1e-6

def test_tinygrad_keyword_arguments():
  # the argument names tinygrad v0.12 has and we lacked: dtype on dot/matmul/linear/conv2d, reverse on shifts,
  # materialize_grads on gradient, allow_shape_mismatch on replace
  a, b = np.arange(6, dtype=np.int8).reshape(2, 3), np.arange(12, dtype=np.int8).reshape(3, 4) * 2   # products fit int8, sums do not
  for ours in (Tensor(a).dot(Tensor(b), dtype=dtypes.int32), Tensor(a).matmul(Tensor(b), dtype=dtypes.int32), Tensor(a) @ Tensor(b).cast(dtypes.int32)):
    assert ours.dtype == dtypes.int32
    np.testing.assert_array_equal(ours.numpy(), a.astype(np.int32) @ b.astype(np.int32))
  lin = Tensor(a).linear(Tensor(b), Tensor([1, 2, 3, 4], dtype=dtypes.int8), dtype=dtypes.float32)
  assert lin.dtype == dtypes.float32
  np.testing.assert_array_equal(lin.numpy(), a.astype(np.float32) @ b.astype(np.float32) + np.arange(1, 5))
  x, w = rng.standard_normal((1, 2, 5, 5)).astype(np.float32), rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
  np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), dtype=dtypes.float32).numpy(), TF.conv2d(torch.tensor(x), torch.tensor(w)).numpy(), atol=1e-5)
  u = Tensor(np.array([1, 2, 3], np.uint32))
  assert u.lshift(2, reverse=True).tolist() == [4, 8, 16] and (1 << u).tolist() == [2, 4, 8] and (64 >> u).tolist() == [32, 16, 8]
  p, q = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0], requires_grad=True)
  with pytest.raises(RuntimeError, match="materialize_grads"): (p * 2).sum().gradient(p, q)
  gp, gq = (p * 2).sum().gradient(p, q, materialize_grads=True)
  assert gp.tolist() == [2.0, 2.0] and gq.tolist() == [0.0]
  t = Tensor([1.0, 2.0])
  with pytest.raises(ValueError): t.replace(Tensor([1.0]))
  assert t.replace(Tensor([1.0]), allow_shape_mismatch=True).shape == (1,)
