"""Gradients of the foundation ops against torch autograd, on random inputs, with broadcasting and views."""
import numpy as np
import pytest
import torch
from frontend import Tensor

def check(fn, *shapes, tfn=None, low=-2.0, high=2.0, seed=0, atol=1e-4, rtol=1e-3, positive=False):
  rng = np.random.default_rng(seed)
  xs = [rng.uniform(0.1 if positive else low, high, s).astype(np.float32) for s in shapes]
  ours = [Tensor(x, requires_grad=True) for x in xs]
  theirs = [torch.tensor(x, requires_grad=True) for x in xs]
  out = fn(*ours)
  tout = (tfn or fn)(*theirs)
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), atol=atol, rtol=rtol)
  # a random upstream gradient so every output element matters
  g = rng.standard_normal(tuple(tout.shape)).astype(np.float32)
  (out * Tensor(g)).sum().backward()
  (tout * torch.tensor(g)).sum().backward()
  for o, t in zip(ours, theirs):
    assert o.grad is not None, "no gradient reached an input"
    np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), atol=atol, rtol=rtol)

UNARY = {
  "neg": lambda x: -x, "exp": lambda x: x.exp(), "sqrt": lambda x: x.sqrt(), "rsqrt": lambda x: x.rsqrt(),
  "sin": lambda x: x.sin(), "cos": lambda x: x.cos(), "relu": lambda x: x.relu(), "sigmoid": lambda x: x.sigmoid(),
  "tanh": lambda x: x.tanh(), "abs": lambda x: x.abs(), "square": lambda x: x.square(), "reciprocal": lambda x: x.reciprocal(),
  "silu": lambda x: x * x.sigmoid(),
}

@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
  check(UNARY[name], (3, 5), positive=name in ("sqrt", "rsqrt", "reciprocal"))

def test_log():
  check(lambda x: x.log(), (4, 3), positive=True)

def test_gelu():
  check(lambda x: x.gelu(), (6,), tfn=lambda x: torch.nn.functional.gelu(x, approximate="tanh"))

def test_clip():
  check(lambda x: x.clip(-0.5, 0.7), (20,), tfn=lambda x: x.clamp(-0.5, 0.7))

def test_pow():
  check(lambda x, y: x ** y, (3, 4), (3, 4), positive=True)
  check(lambda x: x ** 3, (5,))

@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "minimum"])
def test_binary_broadcast(op):
  fns = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
         "maximum": lambda a, b: a.maximum(b), "minimum": lambda a, b: a.minimum(b)}
  check(fns[op], (4, 1, 3), (5, 1), positive=op == "div")

def test_where():
  rng = np.random.default_rng(1)
  c = rng.random((4, 5)) > 0.5
  check(lambda a, b: Tensor(c).where(a, b) if isinstance(a, Tensor) else torch.where(torch.tensor(c), a, b), (4, 5), (1, 5))

@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2)])
def test_reductions(axis):
  check(lambda x: x.sum(axis=axis) if isinstance(x, Tensor) else (x.sum(dim=axis) if axis is not None else x.sum()), (3, 4, 5))
  check(lambda x: x.mean(axis=axis) if isinstance(x, Tensor) else (x.mean(dim=axis) if axis is not None else x.mean()), (3, 4, 5))

def test_max_min_var_std():
  check(lambda x: x.max(axis=1) if isinstance(x, Tensor) else x.max(dim=1).values, (4, 6))
  check(lambda x: x.min(axis=0) if isinstance(x, Tensor) else x.min(dim=0).values, (4, 6))
  check(lambda x: x.var(axis=1) if isinstance(x, Tensor) else x.var(dim=1), (4, 6))
  check(lambda x: x.std(), (4, 6))

def test_softmax_log_softmax():
  check(lambda x: x.softmax(-1), (3, 7))
  check(lambda x: x.log_softmax(1), (3, 7))

def test_matmul_shapes():
  check(lambda a, b: a @ b, (5, 7), (7, 3))
  check(lambda a, b: a @ b, (2, 5, 7), (7, 3))
  check(lambda a, b: a @ b, (7,), (7, 4))

def test_movement_views():
  check(lambda x: x.permute(2, 0, 1) * 2, (2, 3, 4))
  check(lambda x: x.reshape(6, 4).transpose(0, 1), (2, 3, 4))
  check(lambda x: x.expand(3, 4, 5), (4, 1))
  check(lambda x: x[1:, ::-1] * 3 if isinstance(x, Tensor) else x[1:].flip(1) * 3, (3, 4))
  check(lambda x: x.flip(0), (5, 2))
  check(lambda x: x.pad(((1, 2), (0, 1))) if isinstance(x, Tensor) else torch.nn.functional.pad(x, (0, 1, 1, 2)), (3, 2))
  check(lambda x: x.flatten().unsqueeze(0).squeeze(0), (2, 3))
  check(lambda x: x.repeat(2, 3), (2, 2))

def test_cat_stack():
  check(lambda a, b: a.cat(b, dim=1) if isinstance(a, Tensor) else torch.cat([a, b], 1), (2, 3), (2, 4))
  check(lambda a, b: Tensor.stack(a, b, dim=0) if isinstance(a, Tensor) else torch.stack([a, b], 0), (2, 3), (2, 3))

def test_advanced_indexing_grad():
  idx = [2, 0, 2]
  check(lambda x: x[idx] if isinstance(x, Tensor) else x[torch.tensor(idx)], (4, 3))

def test_shared_subexpression_accumulates():
  check(lambda x: x * x + x.exp() * x, (5,))

@pytest.mark.parametrize("name,lo,hi", [("sinh", -2, 2), ("cosh", -2, 2), ("asinh", -3, 3), ("acosh", 1.1, 3), ("atanh", -0.9, 0.9),
                                        ("asin", -0.95, 0.95), ("acos", -0.95, 0.95), ("atan", -4, 4)])
def test_inverse_and_hyperbolic(name, lo, hi):
  rng = np.random.default_rng(5)
  x = rng.uniform(lo, hi, (64,)).astype(np.float32)
  t, r = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  out, ref = getattr(t, name)(), getattr(torch, name)(r)
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=2e-6, rtol=1e-5)
  out.sum().backward(); ref.sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), atol=1e-4, rtol=2e-3)

def test_logaddexp_softmin():
  check(lambda a, b: a.logaddexp(b) if isinstance(a, Tensor) else torch.logaddexp(a, b), (3, 4), (4,))
  check(lambda x: x.softmin(1) if isinstance(x, Tensor) else torch.nn.functional.softmin(x, 1), (3, 5))
