"""The stride-1 input gradient skips the zero rows of its padded output gradient (frontend/nn_ops.py _dgrad_bands,
issue 28): row bands, each a conv with only the kernel rows that reach G. Exact against torch for odd sizes, kernels
5x5 / 7x7 / 5x3 / 3x3, padding 0-2, stride 2 and dilation 2 (their phase convs' gradients are _ConvFn's too), groups,
and both vector widths' conv paths (8 lanes: vectorized along the output row; 16: along the output channels)."""
import numpy as np
import pytest
from frontend import Tensor, GlobalCounters
import frontend.nn_ops as nn_ops

pytestmark = [pytest.mark.usefixtures("on_cpu")]

CASES = [  # (batch, cin, h, w, cout, kh, kw, stride, padding, dilation, groups)
  (2, 3, 13, 11, 8, 5, 5, 1, 0, 1, 1),
  (2, 4, 12, 17, 16, 5, 5, 1, 1, 1, 1),
  (1, 3, 15, 9, 8, 7, 7, 1, 0, 1, 1),
  (2, 2, 11, 10, 8, 5, 3, 1, (0, 1), 1, 1),
  (2, 8, 10, 10, 16, 3, 3, 1, 0, 1, 1),
  (2, 3, 17, 13, 6, 5, 5, 2, 1, 1, 1),
  (2, 3, 19, 14, 8, 5, 5, 1, 2, 2, 1),
  (2, 4, 13, 11, 8, 5, 5, 1, 0, 1, 2),
]

@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])) + f"_k{c[5]}{c[6]}_s{c[7]}_p{c[8]}_d{c[9]}_g{c[10]}")
def test_input_gradient_matches_torch(case, lanes, monkeypatch):
  import torch
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: lanes)
  bs, ci, h, w, co, kh, kw, s, p, d, grp = case
  rng = np.random.default_rng(sum(case[:7]))
  xn = rng.standard_normal((bs, ci, h, w)).astype(np.float32)
  wn = (rng.standard_normal((co, ci // grp, kh, kw)) * 0.3).astype(np.float32)
  x, wt = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
  out = x.conv2d(wt, stride=s, padding=p, dilation=d, groups=grp)
  gn = rng.standard_normal(out.shape).astype(np.float32)
  (out * Tensor(gn)).sum().backward()
  tx, tw = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
  tout = torch.nn.functional.conv2d(tx, tw, stride=s, padding=p, dilation=d, groups=grp)
  (tout * torch.tensor(gn)).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(wt.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-3)

def _dgrad_ops(lanes: int, monkeypatch, saving_min: float) -> float:
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: lanes)
  monkeypatch.setattr(nn_ops, "BAND_SAVING_MIN", saving_min)
  bs, ci, co, hg = 2, 8, 16, 20
  g = Tensor(np.random.default_rng(0).standard_normal((bs, co, hg, hg)).astype(np.float32)).realize()
  w = Tensor(np.random.default_rng(1).standard_normal((co, ci, 5, 5)).astype(np.float32)).realize()
  x = Tensor.zeros(bs, ci, hg + 4, hg + 4, requires_grad=True).contiguous().realize()
  out = x.conv2d(w)
  GlobalCounters.reset()
  (out * g).sum().backward(); x.grad.realize()
  return GlobalCounters.global_ops

@pytest.mark.parametrize("lanes", [8, 16])
def test_input_gradient_skips_the_padding_rows(lanes, monkeypatch):
  """A 5x5 conv's input gradient (no padding: G padded by 4 rows each side) computes 104 row taps of 120: its kernels'
  FLOPs drop by about 13% against the one conv over the padded G (bands off: BAND_SAVING_MIN above 1)."""
  banded, whole = _dgrad_ops(lanes, monkeypatch, 0.1), _dgrad_ops(lanes, monkeypatch, 1.1)
  assert 0.8 < banded / whole < 0.92, (banded, whole)
