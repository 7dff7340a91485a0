"""Kernels per training step (issue 17): what a step's capture launches, counted, so fusions that were won stay won.
Correctness of the same steps is tested against torch in test_optim.py, test_nn.py and test_train_digits.py."""
import numpy as np
import pytest
import torch
from frontend import Tensor, TinyJit, nn
from frontend.optim import Adam

def _capture(step, *args):
  for _ in range(2): step(*args)
  return [ei for ei in step.items if ei.kind == "kernel"]

def test_conv_padded_input_is_copied_once():
  """A padded conv's forward and its weight gradient read the same padded copy of the input (one kernel, not two)."""
  x = Tensor(np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32)).realize()
  w = Tensor(np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32), requires_grad=True).realize()
  @TinyJit
  def step(x):
    w.grad = None
    loss = x.conv2d(w, padding=1).square().mean(); loss.backward()
    return loss.realize(), w.grad.realize()
  items = _capture(step, x)
  pads = [ei for ei in items if ei.kernel.name == "E_2_3_8_8" and len(ei.bufs) == 2]   # (bs, cin, h+2, w+2) from x alone
  assert len(pads) == 1, [ei.kernel.name for ei in items]
  tx, tw = torch.tensor(x.numpy()), torch.tensor(w.numpy(), requires_grad=True)
  (torch.nn.functional.conv2d(tx, tw, padding=1) ** 2).mean().backward()
  np.testing.assert_allclose(step(x)[1].numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-6)

@pytest.mark.parametrize("lanes,most", [(8, 47), (16, 53)])
def test_digits_step_kernel_count(lanes, most, monkeypatch):
  """The digits CNN's Adam step (examples/train_digits.py), built as for a CPU of 8 lanes: at most 47 kernels (70
  before: each parameter's update was a fresh buffer copied back, its moments kernels of their own, the padded inputs
  were copied twice and each conv weight gradient was copied once more into (cout, cin, kh, kw)). On 16 lanes its
  8-wide rows run along the channels (frontend/nn_ops.py _short_odd_rows): the two forwards and conv 2's input
  gradient each add a weight copy and a transpose of their output, 6 more."""
  import importlib.util, pathlib
  import frontend.nn_ops as nn_ops
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: lanes)
  spec = importlib.util.spec_from_file_location("td", pathlib.Path(__file__).parents[3] / "examples/train_digits.py")
  td = importlib.util.module_from_spec(spec); spec.loader.exec_module(td)
  Tensor.manual_seed(0)
  model = td.DigitsNet(8)
  opt = Adam(nn.state.get_parameters(model), lr=3e-3)
  step = TinyJit(td.make_train_step(model, opt))
  rng = np.random.default_rng(0)
  x, y = Tensor(rng.standard_normal((8, 1, 8, 8)).astype(np.float32)).realize(), Tensor(rng.integers(0, 10, 8).astype(np.int32)).realize()
  assert len(_capture(step, x, y)) <= most

def test_fused_assigns_and_the_shifted_read_fallback():
  """Assigns whose values chain (SGD momentum: the weight reads its new momentum) run as one kernel with two outputs;
  when one of them reads a written buffer at another element (here the momentum reads the weight reversed), fusing
  would race, so they stay two kernels, ordered. Values equal numpy in both cases."""
  rng = np.random.default_rng(0)
  p0, b0, g0 = (rng.standard_normal(16).astype(np.float32) for _ in range(3))
  for shifted in (False, True):
    p, b, g = (Tensor(a).realize() for a in (p0, b0, g0))
    @TinyJit
    def step(g):
      b.assign(b * 0.9 + g + (p.flip(0) if shifted else 0))
      p.assign(p - 0.1 * b)
      return Tensor.realize(p, b)
    pn, bn = p0.copy(), b0.copy()
    for _ in range(4):
      step(g)
      bn = bn * 0.9 + g0 + (pn[::-1] if shifted else 0)
      pn = pn - 0.1 * bn
    np.testing.assert_allclose(p.numpy(), pn, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.numpy(), bn, rtol=1e-5, atol=1e-6)
    assert [ei.nout for ei in step.items] == ([1, 1] if shifted else [2])

def test_same_shape_updates_share_a_kernel():
  """SGD momentum on two layers of one shape: both weights (and both biases) are written by one kernel (their momentum
  kernels hold the gradient's matmul, so they stay apart); the values equal torch's."""
  Tensor.manual_seed(0)
  l1, l2 = nn.Linear(8, 8), nn.Linear(8, 8)
  params = [l1.weight, l1.bias, l2.weight, l2.bias]
  init = [p.numpy().copy() for p in params]
  from frontend.optim import SGD
  opt = SGD(params, lr=0.1, momentum=0.9)
  x = Tensor(np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)).realize()
  @TinyJit
  def step(x):
    opt.zero_grad(); loss = l2(l1(x).relu()).square().mean(); loss.backward(); opt.step()
    return loss.realize()
  for _ in range(4): step(x)
  def writer(t): return next(ei for ei in step.items if not ei.fresh_out and any(b is t.lazydata.base.buffer for b in ei.bufs[:ei.nout]))
  assert writer(l1.weight) is writer(l2.weight) and writer(l1.bias) is writer(l2.bias)
  tp = [torch.tensor(a, requires_grad=True) for a in init]
  topt = torch.optim.SGD(tp, lr=0.1, momentum=0.9)
  for _ in range(4):
    topt.zero_grad()
    h = torch.relu(torch.tensor(x.numpy()) @ tp[0].T + tp[1])
    ((h @ tp[2].T + tp[3]) ** 2).mean().backward(); topt.step()
  for p, t in zip(params, tp): np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=1e-4, atol=1e-6)

def test_batchnorm_step_computes_nothing_twice():
  """A conv + BatchNorm (training statistics) + maxpool Adam step: no kernel runs twice on the same inputs (the
  normalized output reuses the statistics' x - mean instead of building it again); the output equals torch's."""
  Tensor.manual_seed(0)
  conv, bn = nn.Conv2d(4, 8, 3), nn.BatchNorm(8)
  opt = Adam(nn.state.get_parameters([conv, bn]))
  @TinyJit
  def step(x):
    with Tensor.train():
      opt.zero_grad(); out = bn(conv(x).relu()); loss = out.max_pool2d().square().mean(); loss.backward(); opt.step()
      return out.realize()
  xn = np.random.default_rng(0).standard_normal((2, 4, 10, 10)).astype(np.float32)
  w0, b0 = conv.weight.numpy().copy(), conv.bias.numpy().copy()
  out = step(Tensor(xn).realize())
  items = _capture(step, Tensor(xn).realize())
  keys = [(ei.kernel.ast, tuple(id(b) for b in ei.bufs[ei.nout:])) for ei in items]
  assert len(set(keys)) == len(keys), [ei.kernel.name for ei in items]
  tbn = torch.nn.BatchNorm2d(8).train()
  want = tbn(torch.relu(torch.nn.functional.conv2d(torch.tensor(xn), torch.tensor(w0), torch.tensor(b0))))
  np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)
