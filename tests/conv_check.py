"""Shared check of a conv's forward and both gradients, in a TinyJit step, against float64 torch (tests of the conv
tiles and their vector-width variants)."""
from __future__ import annotations
import numpy as np
from frontend import Tensor, TinyJit

def torch_conv_grads(xn: np.ndarray, wn: np.ndarray, kw: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """float64 torch: y = conv2d(x, w, **kw) (a 4-tuple padding is F.pad's, per side) and the gradients of sum(y * y)."""
  import torch
  tx, tw = torch.tensor(xn, dtype=torch.float64, requires_grad=True), torch.tensor(wn, dtype=torch.float64, requires_grad=True)
  kw = dict(kw)
  pad = kw.pop("padding", 0)
  if isinstance(pad, tuple) and len(pad) == 4: ty = torch.nn.functional.conv2d(torch.nn.functional.pad(tx, pad), tw, **kw)
  else: ty = torch.nn.functional.conv2d(tx, tw, padding=pad, **kw)
  (ty * ty).sum().backward()
  return ty.detach().numpy(), tx.grad.numpy(), tw.grad.numpy()

def jit_conv_grads_match_torch(xn: np.ndarray, wn: np.ndarray, kw: dict, realized: bool = False, gw_atol: float = 1e-3):
  """A TinyJit step of y = conv2d(x, w, **kw) and the gradients of sum(y * y), run, captured and replayed, equals
  float64 torch's (parameters `realized` first or left lazy). Returns torch's y and the step (its kernels in .items)."""
  want_y, want_gx, want_gw = torch_conv_grads(xn, wn, kw)
  x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
  if realized: x, w = x.realize(), w.realize()
  @TinyJit
  def step():
    x.grad = w.grad = None
    y = x.conv2d(w, **kw)
    (y * y).sum().backward()
    return y.realize(), x.grad.realize(), w.grad.realize()
  for _ in range(3): y, gx, gw = step()
  np.testing.assert_allclose(y.numpy(), want_y, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(gx.numpy(), want_gx, rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(gw.numpy(), want_gw, rtol=1e-4, atol=gw_atol)
  return want_y, step
