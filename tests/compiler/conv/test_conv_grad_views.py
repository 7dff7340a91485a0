"""The conv gradients' movement chains as one memoized view (frontend/nn_ops.py _view_chain): the same graphs, node for
node, as the movement ops one by one; and the memo answers only for the tracker it was made from."""
import numpy as np
import pytest
from conftest import record_graph_keys
from frontend import Tensor, nn
from frontend import nn_ops
from frontend.nn.state import get_parameters
from frontend.optim import Adam

@pytest.mark.parametrize("conv", [dict(cin=1, cout=8, k=3, padding=1), dict(cin=4, cout=8, k=3, padding=0),
                                  dict(cin=16, cout=16, k=3, padding=1, groups=2), dict(cin=4, cout=16, k=3, padding=1, stride=2)])
def test_view_chains_build_the_same_graphs(monkeypatch, conv):
  runs = {}
  cin, cout, k = conv.pop("cin"), conv.pop("cout"), conv.pop("k")
  for chains in (True, False):
    monkeypatch.setattr(nn_ops, "VIEW_CHAINS", chains)
    nn_ops._chain_sts.clear()
    keys = record_graph_keys(monkeypatch)
    Tensor.manual_seed(2)
    c = nn.Conv2d(cin, cout, k, **conv)
    opt = Adam(get_parameters(c), lr=1e-2)
    rng = np.random.default_rng(0)
    for _ in range(3):   # (the second and third steps: the chains from the memo)
      x = Tensor(rng.standard_normal((2, cin, 7, 7)).astype(np.float32))
      with Tensor.train():
        opt.zero_grad()
        loss = c(x).relu().square().mean()
        loss.backward(); opt.step()
    runs[chains] = (keys, [p.numpy() for p in get_parameters(c)], loss.item())
    if chains: assert nn_ops._chain_sts   # (the memo was used)
  assert runs[True][0] and runs[True][0] == runs[False][0]
  for a, b in zip(runs[True][1], runs[False][1]): np.testing.assert_array_equal(a, b)
  assert runs[True][2] == runs[False][2]

def test_view_chain_memo_is_per_tracker():
  # the same key over two inputs of other layouts: each its own view (a memo keyed by the key alone would give the
  # second the first one's tracker)
  a = Tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4)).realize()
  b = a.permute(0, 2, 1).reshape(2, 3, 4)   # (the same shape, another tracker over the same base)
  build = lambda t: t.permute(2, 0, 1).flip(0)
  for t in (a, b, a, b):
    got = nn_ops._view_chain(t, ("test-chain",), build)
    want = build(t)
    assert got.lazydata.base is want.lazydata.base and got.lazydata.st == want.lazydata.st
    np.testing.assert_array_equal(got.numpy(), want.numpy())

def test_view_chain_records_gradients():
  # a tensor that needs a gradient outside no_grad: the ops themselves, with their autograd nodes
  w = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
  y = nn_ops._view_chain(w, ("test-grad",), lambda t: t.transpose(0, 1).flip(0))
  assert y._ctx is not None
  (y * Tensor(np.arange(6, dtype=np.float32).reshape(3, 2))).sum().backward()
  np.testing.assert_array_equal(w.grad.numpy(), np.arange(6, dtype=np.float32).reshape(3, 2)[::-1].T)
