"""NNOpsMixin ops against torch (CPU, as an oracle): forward values and gradients through .backward()."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from frontend import Tensor

def _inputs(shapes, seed, low, high):
  rng = np.random.default_rng(seed)
  return [rng.uniform(low, high, s).astype(np.float32) for s in shapes]

def check(ours, theirs, *shapes, atol=1e-4, rtol=1e-4, grad=True, low=-2.0, high=2.0, seed=0, xs=None):
  """Run `ours` on Tensors and `theirs` on torch tensors made from the same random data; compare outputs and,
  with a random upstream gradient, the input gradients."""
  xs = xs if xs is not None else _inputs(shapes, seed, low, high)
  ts = [Tensor(x, requires_grad=grad) for x in xs]
  tt = [torch.tensor(x, requires_grad=grad) for x in xs]
  out, ref = ours(*ts), theirs(*tt)
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=atol, rtol=rtol)
  if grad:
    g = np.random.default_rng(seed + 1).standard_normal(ref.shape).astype(np.float32)
    (out * Tensor(g)).sum().backward()
    (ref * torch.tensor(g)).sum().backward()
    for i, (t, r) in enumerate(zip(ts, tt)):
      assert t.grad is not None, f"no gradient for input {i}"
      np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), atol=atol * 10, rtol=rtol * 10, err_msg=f"grad of input {i}")

# ***** convolution *****
@pytest.mark.parametrize("stride,padding,dilation,groups", [(1, 0, 1, 1), (2, 1, 1, 1), (1, 2, 2, 2), (2, (1, 0), 1, 1)])
def test_conv2d(stride, padding, dilation, groups):
  check(lambda x, w, b: x.conv2d(w, b, groups=groups, stride=stride, dilation=dilation, padding=padding),
        lambda x, w, b: TF.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups),
        (2, 4, 7, 6), (4, 4 // groups, 3, 3), (4,))

def test_conv2d_per_side_padding():
  # torch pad order (left, right, top, bottom)
  check(lambda x, w: x.conv2d(w, padding=(1, 0, 2, 1)),
        lambda x, w: TF.conv2d(TF.pad(x, (1, 0, 2, 1)), w), (1, 2, 5, 5), (3, 2, 3, 2))

def test_conv1d_and_stride_bigger_than_kernel():
  check(lambda x, w: x.conv2d(w, stride=3), lambda x, w: TF.conv1d(x, w, stride=3), (2, 3, 11), (2, 3, 2))

def test_conv2d_errors():
  with pytest.raises(RuntimeError, match="conv2d"): Tensor.rand(1, 3, 5, 5).conv2d(Tensor.rand(2, 2, 3, 3))

@pytest.mark.parametrize("stride,padding,output_padding,groups,dilation", [(1, 0, 0, 1, 1), (2, 1, 1, 2, 1), (3, 0, 0, 1, 2)])
def test_conv_transpose2d(stride, padding, output_padding, groups, dilation):
  check(lambda x, w, b: x.conv_transpose2d(w, b, groups=groups, stride=stride, padding=padding, output_padding=output_padding, dilation=dilation),
        lambda x, w, b: TF.conv_transpose2d(x, w, b, stride=stride, padding=padding, output_padding=output_padding, groups=groups, dilation=dilation),
        (2, 4, 4, 3), (4, 6 // groups, 3, 3), (6,))

# ***** pooling *****
@pytest.mark.parametrize("k,stride,padding,dilation,ceil", [(2, None, 0, 1, False), (3, 2, 1, 1, False), (3, 2, 1, 2, True), ((2, 3), 1, 0, 1, False)])
def test_max_pool2d(k, stride, padding, dilation, ceil):
  check(lambda x: x.max_pool2d(k, stride, dilation, padding, ceil_mode=ceil),
        lambda x: TF.max_pool2d(x, k, stride, padding, dilation, ceil_mode=ceil), (2, 3, 7, 8))

# windows that tile the (padded) input: the max over the input's own (o, k) split dims, no permuted view
@pytest.mark.parametrize("shape,k,padding", [((2, 3, 8, 6), 2, 0), ((2, 3, 6, 9), (2, 3), 0), ((1, 2, 6, 6), 2, 1), ((2, 1, 4, 12), (1, 4), 0)])
def test_max_pool2d_tiling_windows(shape, k, padding):
  check(lambda x: x.max_pool2d(k, padding=padding), lambda x: TF.max_pool2d(x, k, padding=padding), shape)

def test_max_pool2d_indices_and_unpool():
  x = _inputs([(2, 3, 6, 6)], 3, -2, 2)[0]
  v, i = Tensor(x).max_pool2d(2, return_indices=True)
  tv, ti = TF.max_pool2d(torch.tensor(x), 2, return_indices=True)
  np.testing.assert_allclose(v.numpy(), tv.numpy())
  np.testing.assert_equal(i.numpy(), ti.numpy())
  check(lambda v: v.max_unpool2d(i, 2), lambda v: TF.max_unpool2d(v, ti, 2), xs=[tv.numpy()])

@pytest.mark.parametrize("k,stride,padding,ceil,include", [(2, None, 0, False, True), (3, 2, 1, False, False), (3, 2, 1, True, True), (3, 2, 1, True, False)])
def test_avg_pool2d(k, stride, padding, ceil, include):
  check(lambda x: x.avg_pool2d(k, stride, padding=padding, ceil_mode=ceil, count_include_pad=include),
        lambda x: TF.avg_pool2d(x, k, stride, padding, ceil_mode=ceil, count_include_pad=include), (1, 2, 8, 7))

# ***** losses *****
def test_cross_entropy_indices_and_probs():
  y = np.array([0, 3, 1, 4])
  check(lambda x: x.cross_entropy(Tensor(y), label_smoothing=0.1),
        lambda x: TF.cross_entropy(x, torch.tensor(y), label_smoothing=0.1), (4, 5))
  p = np.random.default_rng(5).dirichlet(np.ones(5), 4).astype(np.float32)
  check(lambda x: x.cross_entropy(Tensor(p), reduction="sum"), lambda x: TF.cross_entropy(x, torch.tensor(p), reduction="sum"), (4, 5))
  y2 = np.array([[0, 1, 2], [2, 2, 0]])   # (N, C, d) logits
  check(lambda x: x.cross_entropy(Tensor(y2), reduction="none"), lambda x: TF.cross_entropy(x, torch.tensor(y2), reduction="none"), (2, 3, 3))

def test_nll_loss():
  y, w = np.array([0, 2, 1, 2, 0]), np.array([0.5, 2.0, 1.0], np.float32)
  check(lambda x: x.log_softmax(1).nll_loss(Tensor(y), weight=Tensor(w), ignore_index=1),
        lambda x: TF.nll_loss(x.log_softmax(1), torch.tensor(y), weight=torch.tensor(w), ignore_index=1), (5, 3))
  check(lambda x: x.nll_loss(Tensor(y)), lambda x: TF.nll_loss(x, torch.tensor(y)), (5, 3))

def test_sparse_categorical_crossentropy():
  y = np.array([[0, 3, -1], [2, 1, 1]])
  check(lambda x: x.sparse_categorical_crossentropy(Tensor(y), label_smoothing=0.2),
        lambda x: TF.cross_entropy(x.permute(0, 2, 1), torch.tensor(y), ignore_index=-1, label_smoothing=0.2), (2, 3, 4))
  with pytest.raises(RuntimeError, match="labels"): Tensor.rand(3, 4).sparse_categorical_crossentropy(Tensor([1, 2]))

def test_binary_crossentropy():
  y = np.random.default_rng(1).uniform(0, 1, (3, 4)).astype(np.float32)
  check(lambda x: x.binary_crossentropy(Tensor(y)), lambda x: TF.binary_cross_entropy(x, torch.tensor(y)), (3, 4), low=0.05, high=0.95)
  pw = np.array([1.0, 2.0, 0.5, 3.0], np.float32)
  check(lambda x: x.binary_crossentropy_logits(Tensor(y), pos_weight=Tensor(pw)),
        lambda x: TF.binary_cross_entropy_with_logits(x, torch.tensor(y), pos_weight=torch.tensor(pw)), (3, 4), low=-30, high=30)

# ***** normalization, attention *****
def test_layernorm_batchnorm():
  check(lambda x: x.layernorm(axis=(-2, -1)), lambda x: TF.layer_norm(x, (3, 4)), (2, 3, 4))
  m, v = np.array([0.1, -0.2, 0.3], np.float32), np.array([1.5, 0.5, 2.0], np.float32)
  check(lambda x, w, b: x.batchnorm(w, b, Tensor(m), (Tensor(v) + 1e-5).rsqrt()),
        lambda x, w, b: TF.batch_norm(x, torch.tensor(m), torch.tensor(v), w, b, training=False), (2, 3, 4, 4), (3,), (3,))

@pytest.mark.parametrize("causal,mask", [(False, None), (True, None), (False, "bool"), (False, "float")])
def test_scaled_dot_product_attention(causal, mask):
  mk = {None: None, "bool": np.random.default_rng(2).uniform(0, 1, (4, 5)) > 0.3, "float": np.random.default_rng(2).uniform(-1, 1, (4, 5)).astype(np.float32)}[mask]
  if mk is not None and mk.dtype == bool: mk[:, 0] = True  # no fully masked rows
  S = 4 if causal else 5
  check(lambda q, k, v: q.scaled_dot_product_attention(k, v, None if mk is None else Tensor(mk), is_causal=causal),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, None if mk is None else torch.tensor(mk), is_causal=causal),
        (2, 4, 8), (2, S, 8), (2, S, 3))

def test_dropout():
  x = Tensor.rand(64, 64) + 1
  assert (x.dropout(0.5) == x).all().item()   # not training: identity
  with Tensor.train():
    y = x.dropout(0.25).numpy()
  kept = y != 0
  assert 0.65 < kept.mean() < 0.85
  np.testing.assert_allclose(y[kept], x.numpy()[kept] / 0.75, rtol=1e-6)
  with pytest.raises(ValueError): x.dropout(1.5)

# ***** gather / scatter / one_hot *****
def test_one_hot_gather():
  assert Tensor([1, 0, 3]).one_hot(4).tolist() == TF.one_hot(torch.tensor([1, 0, 3]), 4).tolist()
  assert Tensor([[1], [2]]).one_hot().shape == (2, 1, 3)
  idx = np.random.default_rng(0).integers(0, 4, (3, 2, 5))
  check(lambda x: x.gather(1, Tensor(idx)), lambda x: torch.gather(x, 1, torch.tensor(idx)), (3, 4, 6))
  check(lambda x: x.gather(-1, Tensor(idx)), lambda x: torch.gather(x, -1, torch.tensor(idx)), (3, 2, 4))

def test_scatter():
  idx = np.array([[0, 2, 1], [1, 1, 0]])   # row 0 unique; row 1 repeats with equal src below
  check(lambda x, s: x.scatter(1, Tensor(idx[:1]), s), lambda x, s: x.scatter(1, torch.tensor(idx[:1]), s), (2, 4), (1, 3))
  assert Tensor.zeros(2, 3).scatter(0, Tensor([[1, 0, 1]]), 5.0).tolist() == [[0, 5, 0], [5, 0, 5]]
  got = Tensor.ones(2, 3).scatter(1, Tensor(idx), Tensor([[1.0, 2, 3], [4, 5, 6]]), reduce="add").numpy()
  ref = torch.ones(2, 3).scatter_add(1, torch.tensor(idx), torch.tensor([[1.0, 2, 3], [4, 5, 6]])).numpy()
  np.testing.assert_allclose(got, ref)

@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
  idx = np.array([[0, 2, 0, 2], [3, 3, 3, 1]])
  check(lambda x, s: x.scatter_reduce(1, Tensor(idx), s, reduce, include_self=include_self),
        lambda x, s: x.scatter_reduce(1, torch.tensor(idx), s, reduce, include_self=include_self), (2, 5), (2, 4), low=0.5, high=2.0)

def test_masked_select_nonzero():
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  m = (x % 3) == 1
  assert Tensor(x).masked_select(Tensor(m)).tolist() == torch.tensor(x).masked_select(torch.tensor(m)).tolist()
  assert Tensor(m).nonzero().tolist() == torch.tensor(m).nonzero().tolist()

# ***** cumulative *****
def test_cumulative():
  check(lambda x: x.cumsum(1), lambda x: x.cumsum(1), (3, 7))
  check(lambda x: x.cumprod(0), lambda x: x.cumprod(0), (5, 3), low=0.5, high=1.5)
  check(lambda x: x.logcumsumexp(1), lambda x: x.logcumsumexp(1), (2, 6), low=-20, high=20)
  check(lambda x: x.cummax(1)[0], lambda x: x.cummax(1)[0], (3, 6))
  check(lambda x: x.cummin(0)[0], lambda x: x.cummin(0)[0], (6, 2))
  x = np.array([[1, 3, 3, 2, 5, 0]], np.float32)
  assert Tensor(x).cummax(1)[1].tolist() == torch.tensor(x).cummax(1)[1].tolist()
  assert Tensor(x).cummin(1)[1].tolist() == torch.tensor(x).cummin(1)[1].tolist()

def test_cumsum_long_axis_blocks():
  x = np.random.default_rng(0).uniform(-1, 1, (2, 1000)).astype(np.float32)
  np.testing.assert_allclose(Tensor(x).cumsum(1).numpy(), np.cumsum(x, 1), atol=2e-4)
  assert Tensor.arange(600).cumsum().numpy()[-1] == 599 * 600 // 2

# ***** sorting *****
def test_sort_argsort_topk():
  check(lambda x: x.sort(1)[0], lambda x: x.sort(1)[0], (3, 6))
  check(lambda x: x.sort(0, descending=True)[0], lambda x: x.sort(0, descending=True)[0], (5, 2))
  x = np.array([[3, 1, 2, 1, 3, 0]], np.int32)
  assert Tensor(x).argsort().tolist() == torch.tensor(x).sort(stable=True)[1].tolist()
  assert Tensor(x).argsort(descending=True).tolist() == torch.tensor(x).sort(descending=True, stable=True)[1].tolist()
  check(lambda x: x.topk(3)[0], lambda x: x.topk(3)[0], (4, 7))
  v, i = Tensor([[1.0, 9.0, 4.0, 7.0]]).topk(2, largest=False)
  assert v.tolist() == [[1.0, 4.0]] and i.tolist() == [[0, 2]]

# ***** triangles, diagonals, grids, unfold, normalize *****
def test_tril_triu_diag():
  for d in (-1, 0, 2):
    check(lambda x: x.tril(d), lambda x: x.tril(d), (2, 3, 4))
    check(lambda x: x.triu(d), lambda x: x.triu(d), (4, 3))
  check(lambda x: x.diagonal(1, 0, 2), lambda x: x.diagonal(1, 0, 2), (4, 2, 3))
  check(lambda x: x.diagonal(-1), lambda x: x.diagonal(-1), (4, 3))
  check(lambda x: x.diag(), lambda x: x.diag(), (3,))
  check(lambda x: x.diag(1), lambda x: x.diag(1), (3,))
  assert Tensor.ones(2, 2, dtype="bool").tril().tolist() == [[True, False], [True, True]]

def test_meshgrid_unfold_normalize():
  a, b = Tensor([1, 2, 3]), Tensor([4, 5])
  for ind in ("ij", "xy"):
    for o, r in zip(a.meshgrid(b, indexing=ind), torch.meshgrid(torch.tensor([1, 2, 3]), torch.tensor([4, 5]), indexing=ind)):
      assert o.tolist() == r.tolist()
  check(lambda x: x.unfold(1, 3, 2), lambda x: x.unfold(1, 3, 2), (2, 8, 3))
  check(lambda x: x.normalize(dim=1), lambda x: TF.normalize(x, dim=1), (3, 4))
  check(lambda x: x.normalize(p=3, dim=0), lambda x: TF.normalize(x, p=3, dim=0), (3, 4))

# ***** einsum, interpolate, multinomial *****
@pytest.mark.parametrize("formula,shapes", [("ij,jk->ik", [(2, 3), (3, 4)]), ("bij,bjk", [(2, 2, 3), (2, 3, 2)]),
                                            ("ii->i", [(3, 3)]), ("i,j->ij", [(2,), (3,)]), ("...ij,...jk->...ik", [(2, 2, 3), (3, 2)]),
                                            ("ijk->kj", [(2, 3, 4)])])
def test_einsum(formula, shapes):
  check(lambda *xs: Tensor.einsum(formula, *xs), lambda *xs: torch.einsum(formula, *xs), *shapes)

@pytest.mark.parametrize("mode,align", [("nearest", False), ("nearest-exact", False), ("bilinear", False), ("bilinear", True)])
def test_interpolate(mode, align):
  kw = {"align_corners": align} if mode == "bilinear" else {}
  for size in ((7, 3), (2, 5)):
    check(lambda x: x.interpolate(size, mode=mode, **kw), lambda x: TF.interpolate(x, size, mode=mode, **kw), (1, 2, 4, 5))

def test_interpolate_linear_1d():
  check(lambda x: x.interpolate((9,)), lambda x: TF.interpolate(x, 9, mode="linear"), (2, 3, 4))

def test_multinomial():
  Tensor.manual_seed(1)
  w = Tensor([0.0, 1.0, 3.0])
  s = w.multinomial(2000, replacement=True).numpy()
  assert set(np.unique(s)) <= {1, 2} and 0.68 < (s == 2).mean() < 0.82
