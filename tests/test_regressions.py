"""Named regression tests: each reproduces one wrong result or crash found by hand or by tests/test_fuzz_ops.py
(issue 16) and checks the value torch/numpy give."""
import math
import numpy as np
import pytest
import torch
from frontend import Tensor

def _grad_pair(fn, vals, tfn=None):
  x, xt = Tensor(vals, requires_grad=True), torch.tensor(vals, requires_grad=True)
  fn(x).sum().backward()
  (tfn or fn)(xt).sum().backward()
  return x.grad.numpy(), xt.grad.numpy()

# ***** item 5: gradients at exactly 0 *****
@pytest.mark.parametrize("name,fn,tfn", [
  ("gelu", lambda x: x.gelu(), lambda x: torch.nn.functional.gelu(x, approximate="tanh")),
  ("cube", lambda x: x ** 3, None), ("pow1.5", lambda x: x ** 1.5, None), ("pow2.5", lambda x: x ** 2.5, None),
  ("pow0", lambda x: x ** 0, None), ("pow4", lambda x: x ** 4, None), ("pow1", lambda x: x ** 1.0, None),
  ("pow20", lambda x: x ** 20, None), ("cube_neg", lambda x: x ** -3, None), ("pow-0.5", lambda x: x ** -0.5, None)])
def test_grad_at_zero(name, fn, tfn):
  ours, theirs = _grad_pair(fn, [0.0, 0.5, 1.5, -0.0] if "-0.5" not in name else [0.0, 0.5, 1.5], tfn)
  np.testing.assert_allclose(ours, theirs, rtol=1e-5)

def test_grad_pow_tensor_exponent_at_zero_base():
  # base 0 with exponents 0, 1, 3, 0.5, 2.5, -1 and a negative base with an integral exponent
  b, e = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -2.0, 3.0], [0.0, 1.0, 3.0, 0.5, 2.5, -1.0, 3.0, 1.5]
  x, y = Tensor(b, requires_grad=True), Tensor(e, requires_grad=True)
  xt, yt = torch.tensor(b, requires_grad=True), torch.tensor(e, requires_grad=True)
  (x ** y).sum().backward(); (xt ** yt).sum().backward()
  np.testing.assert_allclose((x ** y).numpy(), (xt ** yt).detach().numpy(), rtol=1e-5)
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5)
  np.testing.assert_allclose(y.grad.numpy(), yt.grad.numpy(), rtol=1e-5)

def test_grad_rpow_and_one_zero_activation_keeps_weights_finite():
  x = Tensor([0.0, 1.0, 2.0], requires_grad=True)
  (2.0 ** x).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [math.log(2) * 2 ** v for v in (0, 1, 2)], rtol=1e-5)
  w = Tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
  (Tensor([[0.0, 1.0]]) @ w).gelu().sum().backward()
  assert np.isfinite(w.grad.numpy()).all()
