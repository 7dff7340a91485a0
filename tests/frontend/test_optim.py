"""Optimizers against torch.optim (CPU, as an oracle) on a small problem, LAMB against a numpy reference, and the
one-realize-per-step contract."""
import numpy as np
import pytest
import torch
import frontend.engine as engine
from frontend import Tensor
from frontend.optim import SGD, Adam, AdamW, LAMB

def _data(seed=0):
  rng = np.random.default_rng(seed)
  return [rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3,), (5, 4))]   # w, b, x

def _loss(w, b, x): return ((x @ w + b).relu() - 0.5).square().mean() + (w * w).sum() * 0.01

def run_ours(make_opt, steps=4):
  w0, b0, x = _data()
  w, b, xt = Tensor(w0, requires_grad=True), Tensor(b0, requires_grad=True), Tensor(x)
  opt = make_opt([w, b])
  for _ in range(steps):
    opt.zero_grad()
    _loss(w, b, xt).backward()
    opt.step()
  return w.numpy(), b.numpy()

def run_torch(make_opt, steps=4):
  w0, b0, x = _data()
  w, b, xt = torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True), torch.tensor(x)
  opt = make_opt([w, b])
  for _ in range(steps):
    opt.zero_grad()
    _loss(w, b, xt).backward()
    opt.step()
  return w.detach().numpy(), b.detach().numpy()

@pytest.mark.parametrize("ours,theirs", [
  (lambda p: SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
  (lambda p: SGD(p, lr=0.1, momentum=0.9, weight_decay=0.05), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.05)),
  (lambda p: SGD(p, lr=0.05, momentum=0.8, nesterov=True), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True)),
  (lambda p: Adam(p, lr=0.05), lambda p: torch.optim.Adam(p, lr=0.05)),
  (lambda p: Adam(p, lr=0.05, b1=0.8, b2=0.99, weight_decay=0.1), lambda p: torch.optim.Adam(p, lr=0.05, betas=(0.8, 0.99), weight_decay=0.1)),
  (lambda p: AdamW(p, lr=0.05, weight_decay=0.1), lambda p: torch.optim.AdamW(p, lr=0.05, weight_decay=0.1)),
], ids=["sgd", "sgd_momentum_wd", "sgd_nesterov", "adam", "adam_l2", "adamw"])
def test_against_torch(ours, theirs):
  for a, r in zip(run_ours(ours), run_torch(theirs)): np.testing.assert_allclose(a, r, atol=1e-5, rtol=1e-4)

def _lamb_reference(lr, b1, b2, eps, wd, steps=4):
  """LAMB written out in numpy (no torch implementation exists): trust ratio ||p|| / ||update|| per tensor."""
  w0, b0, x = _data()
  ps = [w0.astype(np.float64), b0.astype(np.float64)]
  m, v = [np.zeros_like(p) for p in ps], [np.zeros_like(p) for p in ps]
  for t in range(1, steps + 1):
    wt, bt = torch.tensor(ps[0], requires_grad=True), torch.tensor(ps[1], requires_grad=True)
    _loss(wt, bt, torch.tensor(x, dtype=torch.float64)).backward()
    for i, g in enumerate((wt.grad.numpy(), bt.grad.numpy())):
      m[i] = b1 * m[i] + (1 - b1) * g
      v[i] = b2 * v[i] + (1 - b2) * g * g
      up = (m[i] / (1 - b1 ** t)) / (np.sqrt(v[i] / (1 - b2 ** t)) + eps) + wd * ps[i]
      r1, r2 = np.linalg.norm(ps[i]), np.linalg.norm(up)
      ps[i] = ps[i] - lr * (r1 / r2 if r1 > 0 and r2 > 0 else 1.0) * up
  return ps

def test_lamb():
  got = run_ours(lambda p: LAMB(p, lr=0.02, weight_decay=0.01))
  for a, r in zip(got, _lamb_reference(0.02, 0.9, 0.999, 1e-6, 0.01)): np.testing.assert_allclose(a, r, atol=1e-5, rtol=1e-4)

def test_one_realize_per_step(monkeypatch):
  w, b = Tensor(_data()[0], requires_grad=True), Tensor(_data()[1], requires_grad=True)
  opt = Adam([w, b], lr=0.01)
  _loss(w, b, Tensor(_data()[2])).backward()
  calls = []
  real = engine.realize
  monkeypatch.setattr(engine, "realize", lambda lbs, live: (calls.append(len(lbs)), real(lbs, live))[1])
  opt.step()
  # one call covering params (2) + moments (4) + b1_t, b2_t
  assert calls == [8]
  assert w.lazydata.realized and not w.lazydata.is_view and opt.m[0].lazydata.realized

def test_state_is_updated_in_place_and_lr_is_a_tensor():
  w = Tensor([1.0, -1.0], requires_grad=True)
  opt = SGD([w], lr=0.5, momentum=0.5)
  buf_w, buf_b = w.lazydata.base.buffer, opt.b[0].lazydata.base.buffer
  for _ in range(2):
    opt.zero_grad()
    (w * w).sum().backward()
    opt.step()
  assert w.lazydata.base.buffer is buf_w and opt.b[0].lazydata.base.buffer is buf_b
  assert opt.lr.shape == ()
  opt.lr.assign(opt.lr * 0).realize()   # a schedule changes lr in place: with lr 0 nothing moves
  opt.zero_grad(); (w * w).sum().backward(); before = w.numpy(); opt.step()
  np.testing.assert_array_equal(w.numpy(), before)

def test_errors_and_param_selection():
  with pytest.raises(ValueError, match="empty"): SGD([Tensor([1.0], requires_grad=False)])
  a, frozen = Tensor([1.0]), Tensor([2.0], requires_grad=False)
  opt = SGD([a, a, frozen], lr=0.1)
  assert opt.params == [a] and opt.buffers == [frozen] and a.requires_grad is True
  with pytest.raises(RuntimeError, match="no gradient"): opt.step()
  with pytest.raises(ValueError, match="nesterov"): SGD([Tensor([1.0])], nesterov=True)

def test_cnn_training_steps_match_torch():
  """nn + optim together: a small conv net (16 channels: the size at which the compiler tiles the weight-gradient
  reduction) trained 3 Adam steps in training mode, parameters and BN running stats compared with torch. (No conv
  bias before the BN: its true gradient is 0, and Adam would turn float noise into full-size steps.) Seeded: Adam's
  first steps are +-lr wherever a gradient is near 0, so some draws of the initial weights amplify float noise."""
  from frontend import nn
  Tensor.manual_seed(0)
  from frontend.nn.state import get_state_dict, get_parameters
  class Net:
    def __init__(self): self.c, self.bn, self.fc = nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.Linear(16 * 4 * 4, 10)
    def __call__(self, x): return self.fc(self.bn(self.c(x)).relu().max_pool2d().flatten(1))
  tnet = torch.nn.Sequential(torch.nn.Conv2d(1, 16, 3, padding=1, bias=False), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                             torch.nn.Flatten(), torch.nn.Linear(256, 10))
  net = Net()
  names = {"c": "0", "bn": "1", "fc": "5"}
  tsd = {f"{names[k.split('.')[0]]}.{k.split('.', 1)[1]}": v for k, v in get_state_dict(net).items()}
  with torch.no_grad():
    for k, v in tsd.items(): tnet.state_dict()[k].copy_(torch.tensor(v.numpy()))
  rng = np.random.default_rng(0)
  X, Y = rng.standard_normal((3, 8, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, (3, 8))
  opt, topt = Adam(get_parameters(net), lr=0.01), torch.optim.Adam(tnet.parameters(), lr=0.01)
  with Tensor.train():
    for i in range(3):
      opt.zero_grad(); net(Tensor(X[i])).sparse_categorical_crossentropy(Tensor(Y[i])).backward(); opt.step()
      topt.zero_grad(); torch.nn.functional.cross_entropy(tnet(torch.tensor(X[i])), torch.tensor(Y[i])).backward(); topt.step()
  for k, v in tsd.items(): np.testing.assert_allclose(v.numpy(), tnet.state_dict()[k].numpy(), atol=2e-4, rtol=1e-3, err_msg=k)

def test_adam_update_is_one_kernel_per_parameter():
  """Each Adam step updates a parameter and its two moments with ONE kernel (three outputs): the new moments are computed
  in it, not written by kernels of their own and read back; the backward pass reading the weight at shifted positions
  (a conv) does not force the update into a separate buffer copied back. b1^t and b2^t: one kernel for both."""
  from frontend import TinyJit, nn
  Tensor.manual_seed(0)
  conv, lin = nn.Conv2d(1, 4, 3, padding=1), nn.Linear(4 * 16, 3)
  params = [conv.weight, conv.bias, lin.weight, lin.bias]
  opt = Adam(params, lr=1e-2)
  @TinyJit
  def step(x):
    opt.zero_grad(); loss = lin(conv(x).relu().flatten(1)).square().mean(); loss.backward(); opt.step()
    return loss.realize()
  x = Tensor(np.random.default_rng(0).standard_normal((2, 1, 4, 4)).astype(np.float32)).realize()
  for _ in range(3): step(x)
  assigns = [ei for ei in step.items if ei.kind == "kernel" and not ei.fresh_out]
  buf = lambda t: t.lazydata.base.buffer
  assert len(assigns) == len(params) + 1
  for p, m, v in zip(params, opt.m, opt.v):
    (upd,) = [ei for ei in assigns if ei.bufs[0] is buf(p)]
    assert upd.nout == 3 and {id(b) for b in upd.bufs[1:3]} == {id(buf(m)), id(buf(v))}
  (powers,) = [ei for ei in assigns if ei.nout == 2]   # b1^t and b2^t (one shape): one kernel
  assert {id(b) for b in powers.bufs[:2]} == {id(buf(opt.b1_t)), id(buf(opt.b2_t))}

@pytest.mark.parametrize("make", [lambda ps: Adam(ps, lr=3e-3), lambda ps: AdamW(ps, lr=1e-2, weight_decay=0.0)])
def test_lazy_adam_update_builds_the_tensor_ops_graph(make, monkeypatch):
  # LAMB._adam_lazy builds the update on the lazy buffers: the graph (the schedule cache's key, which names every node,
  # edge, view and constant, and the held tensors in the order they were made) and the values are the Tensor ops'
  from frontend import nn
  from frontend.nn.state import get_parameters
  from conftest import record_graph_keys
  runs = {}
  for lazy in (True, False):
    monkeypatch.setattr(LAMB, "LAZY_UPDATE", lazy)
    keys = record_graph_keys(monkeypatch)
    Tensor.manual_seed(1)
    layers = [nn.Conv2d(1, 4, 3, padding=1), nn.Linear(4 * 5 * 5, 3)]
    opt = make(get_parameters(layers))
    x, y = Tensor(np.linspace(-1, 1, 50, dtype=np.float32).reshape(2, 1, 5, 5)), Tensor(np.array([0, 2], np.int32))
    for _ in range(3):
      with Tensor.train():
        opt.zero_grad()
        loss = layers[1](layers[0](x).relu().flatten(1)).sparse_categorical_crossentropy(y)
        loss.backward(); opt.step()
    runs[lazy] = (keys, [p.numpy() for p in get_parameters(layers)], loss.item())
  assert runs[True][0] and runs[True][0] == runs[False][0]
  for a, b in zip(runs[True][1], runs[False][1]): np.testing.assert_array_equal(a, b)
  assert runs[True][2] == runs[False][2]

def test_lazy_adam_update_is_used_only_where_it_applies():
  w = Tensor([1.0, 2.0], requires_grad=True)
  w.grad = Tensor([0.5, 0.5])
  assert Adam([w])._lazy_ok() and not Adam([w], weight_decay=0.1)._lazy_ok() and not AdamW([w], weight_decay=0.1)._lazy_ok()
  h = Tensor([1.0, 2.0], dtype="float16", requires_grad=True)
  h.grad = Tensor([0.5, 0.5], dtype="float16")
  assert not Adam([h])._lazy_ok() and not LAMB([w])._lazy_ok()
