"""frontend.nn layers and nn.state against torch.nn (CPU, as an oracle): outputs, gradients, running stats."""
import numpy as np
import pytest
import torch
from frontend import Tensor, nn
from frontend.nn.state import get_state_dict, get_parameters, load_state_dict

def _copy_into_torch(ours, theirs):
  """Give the torch module our parameters (same names)."""
  with torch.no_grad():
    for k, v in get_state_dict(ours).items():
      getattr_path(theirs, k).copy_(torch.tensor(v.numpy()))

def getattr_path(o, path):
  for p in path.split("."): o = getattr(o, p)
  return o

def run_both(ours, theirs, x: np.ndarray, atol=1e-4, grad_input=True, seed=0):
  """Forward both on x, backward a random upstream gradient; compare outputs, input grad and every parameter grad."""
  _copy_into_torch(ours, theirs)
  for t in get_parameters(ours):   # as an optimizer would: None means "yes once optimized"
    if t.requires_grad is None: t.requires_grad = True
  xt = Tensor(x, requires_grad=grad_input) if x.dtype.kind == "f" else Tensor(x)
  xr = torch.tensor(x, requires_grad=grad_input) if x.dtype.kind == "f" else torch.tensor(x)
  out, ref = ours(xt), theirs(xr)
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=atol, rtol=1e-4)
  g = np.random.default_rng(seed).standard_normal(ref.shape).astype(np.float32)
  (out * Tensor(g)).sum().backward()
  (ref * torch.tensor(g)).sum().backward()
  if grad_input and x.dtype.kind == "f": np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), atol=atol * 10, rtol=1e-3)
  for k, v in get_state_dict(ours).items():
    r = getattr_path(theirs, k)
    if r.requires_grad: np.testing.assert_allclose(v.grad.numpy(), r.grad.numpy(), atol=atol * 10, rtol=1e-3, err_msg=k)
  return out

def rnd(*shape, seed=0): return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def test_linear():
  run_both(nn.Linear(5, 3), torch.nn.Linear(5, 3), rnd(4, 5))
  l = nn.Linear(4, 2, bias=False)
  assert l.bias is None and len(get_parameters(l)) == 1
  w = nn.Linear(1000, 10).weight.numpy()
  assert abs(w).max() <= 1 / np.sqrt(1000) and w.std() > 0.5 / np.sqrt(3000)   # torch's bound, and not degenerate

@pytest.mark.parametrize("kw", [dict(stride=2, padding=1), dict(groups=2, dilation=2, padding="same"), dict(padding=(1, 0), bias=False)])
def test_conv2d(kw):
  run_both(nn.Conv2d(4, 6, 3, **kw), torch.nn.Conv2d(4, 6, 3, **kw), rnd(2, 4, 7, 6))

def test_conv1d_and_transpose():
  run_both(nn.Conv1d(3, 4, 3, stride=2, padding=1), torch.nn.Conv1d(3, 4, 3, stride=2, padding=1), rnd(2, 3, 9))
  run_both(nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1, groups=2),
           torch.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1, groups=2), rnd(2, 4, 4, 3))

def test_batchnorm_train_eval():
  ours, theirs = nn.BatchNorm2d(3, momentum=0.2), torch.nn.BatchNorm2d(3, momentum=0.2)
  with torch.no_grad(): theirs.weight.copy_(torch.tensor([0.5, 1.0, 2.0])); theirs.bias.copy_(torch.tensor([0.1, 0.0, -0.3]))
  ours.weight, ours.bias = Tensor([0.5, 1.0, 2.0]), Tensor([0.1, 0.0, -0.3])
  theirs.train()
  with Tensor.train():
    for seed in range(2):
      for t in (ours.weight, ours.bias): t.grad = None
      theirs.zero_grad()
      run_both(ours, theirs, rnd(4, 3, 3, 2, seed=seed) * 2 + 1, seed=seed)
      Tensor.realize(ours.running_mean, ours.running_var, ours.num_batches_tracked)
  np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(), atol=1e-5)
  np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), atol=1e-5)
  assert ours.num_batches_tracked.item() == theirs.num_batches_tracked.item() == 2
  theirs.eval()
  x = rnd(2, 3, 2, 2, seed=7)
  np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), atol=1e-5)
  assert sorted(get_state_dict(ours)) == sorted(theirs.state_dict())

def test_batchnorm1d_no_affine_and_errors():
  run_both(nn.BatchNorm1d(4, affine=False, track_running_stats=False), torch.nn.BatchNorm1d(4, affine=False, track_running_stats=False), rnd(5, 4))
  with pytest.raises(ValueError, match="channels"): nn.BatchNorm2d(3)(Tensor.rand(2, 4, 2, 2))

def test_layernorm_groupnorm_rmsnorm():
  ln, tln = nn.LayerNorm((3, 4)), torch.nn.LayerNorm((3, 4))
  ln.weight, ln.bias = Tensor(rnd(3, 4, seed=1)), Tensor(rnd(3, 4, seed=2))
  run_both(ln, tln, rnd(2, 3, 4))
  gn, tgn = nn.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4)
  gn.weight, gn.bias = Tensor(rnd(4, seed=3)), Tensor(rnd(4, seed=4))
  run_both(gn, tgn, rnd(2, 4, 3, 3))
  rn, trn = nn.RMSNorm(6), torch.nn.RMSNorm(6, eps=1e-6)
  rn.weight = Tensor(rnd(6, seed=5))
  run_both(rn, trn, rnd(3, 6))
  with pytest.raises(ValueError): nn.LayerNorm(5)(Tensor.rand(2, 4))
  with pytest.raises(ValueError): nn.GroupNorm(3, 4)

def test_embedding_dropout():
  emb, temb = nn.Embedding(7, 3), torch.nn.Embedding(7, 3)
  run_both(emb, temb, np.array([[1, 6, 1], [0, 2, 3]]), grad_input=False)
  with pytest.raises(TypeError): emb(Tensor([1.0]))
  d = nn.Dropout(0.5)
  x = Tensor.rand(32, 32) + 1
  assert (d(x) == x).all().item()
  with Tensor.train(): assert 0.35 < (d(x) == 0).float().mean().item() < 0.65

class Net:
  def __init__(self):
    self.conv = nn.Conv2d(1, 2, 3)
    self.bn = nn.BatchNorm2d(2)
    self.layers = [nn.Linear(8, 4), nn.Linear(4, 2)]
    self.shared = self.layers[0].weight

def test_state_dict_keys_and_parameters():
  keys = set(get_state_dict(Net()))
  assert keys == {"conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked",
                  "layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias", "shared"}
  assert len(get_parameters(Net())) == 11   # shared once
  assert list(get_state_dict({"a": [nn.LayerNorm(2)]}, prefix="m.")) == ["m.a.0.weight", "m.a.0.bias"]

def test_load_state_dict_and_errors():
  a, b = Net(), Net()
  Tensor.realize(*get_parameters(b))
  w_before = b.conv.weight
  missing, unexpected = load_state_dict(b, get_state_dict(a))
  assert missing == unexpected == []
  assert b.conv.weight is w_before   # loaded into the same tensor object
  for k, v in get_state_dict(a).items(): np.testing.assert_array_equal(get_state_dict(b)[k].numpy(), v.numpy(), err_msg=k)
  sd = get_state_dict(a)
  del sd["bn.bias"]
  with pytest.raises(RuntimeError, match="missing keys.*bn.bias"): load_state_dict(b, sd)
  assert load_state_dict(b, sd, strict=False) == (["bn.bias"], [])
  with pytest.raises(RuntimeError, match="unexpected keys.*extra"): load_state_dict(b, {**get_state_dict(a), "extra": Tensor([1.0])})
  bad = {**get_state_dict(a), "layers.1.weight": Tensor.zeros(3, 4)}
  with pytest.raises(RuntimeError, match=r"shape mismatch for layers.1.weight: checkpoint \(3, 4\) vs model \(2, 4\)"): load_state_dict(b, bad)
  sd = dict(get_state_dict(a).items())
  load_state_dict(b, sd, consume=True)
  assert sd == {}
