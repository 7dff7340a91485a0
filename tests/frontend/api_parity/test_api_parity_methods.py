"""The public Tensor methods tinygrad programs use that were missing (issue 15): sequential, allclose, empty_like,
pad_to, shrink_to, rearrange, randperm, bfloat16()/short(), from_blob, qr/svd, const_like — same names, arguments
and errors as tinygrad v0.12; results against torch/numpy."""
import numpy as np
import pytest
import torch
from frontend import Tensor, dtypes, nn

def test_sequential_builds_a_model():
  # tinygrad's beautiful_mnist style: a list of layers and functions applied in turn
  Tensor.manual_seed(0)
  layers = [nn.Linear(4, 8), Tensor.relu, lambda x: x * 2, nn.Linear(8, 3)]
  x = Tensor.rand(5, 4)
  out = x.sequential(layers)
  ref = x
  for f in layers: ref = f(ref)
  assert out.shape == (5, 3)
  np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-6)
  assert x.sequential([]) is x

def test_allclose_returns_bool():
  a = np.array([1.0, 2.0, np.nan], np.float32)
  for b, kw in ((a + 1e-7, {}), (a + 1e-3, {}), (a, {"equal_nan": True}), (a + 0.05, {"atol": 0.1})):
    got = Tensor(a).allclose(Tensor(b.astype(np.float32)), **kw)
    assert isinstance(got, bool)
    assert got == torch.allclose(torch.tensor(a), torch.tensor(b.astype(np.float32)), **kw)

def test_empty_like_and_const_like():
  x = Tensor.ones(2, 3, dtype=dtypes.int16)
  e = x.empty_like()
  assert e.shape == (2, 3) and e.dtype == dtypes.int16 and e.device == x.device
  assert x.empty_like(dtype=dtypes.float32).dtype == dtypes.float32
  c = x.const_like(7)
  assert c.shape == (2, 3) and c.dtype == dtypes.int16 and c.tolist() == [[7] * 3] * 2
  assert Tensor([1.5, 2.5]).const_like(2).tolist() == [2.0, 2.0]
  with pytest.raises(TypeError): x.const_like(Tensor(1))

def test_pad_to_shrink_to():
  a = np.arange(6, dtype=np.float32).reshape(2, 3)
  np.testing.assert_array_equal(Tensor(a).pad_to(4, 5).numpy(), np.pad(a, ((0, 2), (0, 2))))
  np.testing.assert_array_equal(Tensor(a).pad_to((None, 4)).numpy(), np.pad(a, ((0, 0), (0, 1))))
  np.testing.assert_array_equal(Tensor(a).shrink_to(1, 2).numpy(), a[:1, :2])
  np.testing.assert_array_equal(Tensor(a).shrink_to((None, 1)).numpy(), a[:, :1])
  # gradient flows back through both
  x = Tensor(a, requires_grad=True)
  x.pad_to(3, 3).shrink_to(2, 2).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), np.pad(np.ones((2, 2), np.float32), ((0, 0), (0, 1))))
  with pytest.raises(ValueError, match="pad_to"): Tensor(a).pad_to(4)
  with pytest.raises(ValueError, match="shrink_to"): Tensor(a).shrink_to(1, 2, 3)

REARRANGE = [
  ("a b -> b a", (2, 3), {}, lambda x: x.T),
  ("b c h w -> b h w c", (2, 3, 4, 5), {}, lambda x: x.transpose(0, 2, 3, 1)),
  ("b (h w) c -> b c h w", (2, 12, 3), {"h": 3}, lambda x: x.reshape(2, 3, 4, 3).transpose(0, 3, 1, 2)),
  ("b h w c -> b (h w c)", (2, 3, 4, 5), {}, lambda x: x.reshape(2, 60)),
  ("(b1 b2) h w c -> (b1 h) (b2 w) c", (4, 2, 3, 1), {"b1": 2}, lambda x: x.reshape(2, 2, 2, 3, 1).transpose(0, 2, 1, 3, 4).reshape(4, 6, 1)),
  ("... c -> c ...", (2, 3, 4), {}, lambda x: x.transpose(2, 0, 1)),
  ("b ... -> (b ...)", (2, 3, 4), {}, lambda x: x.reshape(24)),
  ("a 1 b -> a b", (2, 1, 3), {}, lambda x: x.reshape(2, 3)),
  ("a b -> a 1 b", (2, 3), {}, lambda x: x.reshape(2, 1, 3)),
  ("a b -> (b a) 1", (2, 3), {}, lambda x: x.T.reshape(6, 1)),
]
@pytest.mark.parametrize("formula,shape,sizes,ref", REARRANGE, ids=[r[0] for r in REARRANGE])
def test_rearrange(formula, shape, sizes, ref):
  a = np.arange(np.prod(shape)).reshape(shape)
  np.testing.assert_array_equal(Tensor(a).rearrange(formula, **sizes).numpy(), ref(a))

@pytest.mark.parametrize("formula,sizes", [("a b c -> a b", {}), ("a b -> a b c", {}), ("a a -> a", {}), ("a b", {}), ("a b -> b a", {"c": 2}),
                                           ("(a b) -> a b", {"a": 5}), ("a (b -> a b", {}), ("a b c -> a (b c)", {}), ("... a ... -> a", {})])
def test_rearrange_errors(formula, sizes):
  with pytest.raises((ValueError, RuntimeError), match="rearrange|reshape|size"): Tensor.zeros(2, 6).rearrange(formula, **sizes)

def test_randperm():
  Tensor.manual_seed(1)
  for n in (1, 5, 37):
    p = Tensor.randperm(n)
    assert p.dtype == dtypes.int32 and sorted(p.tolist()) == list(range(n))
  assert Tensor.randperm(0).shape == (0,)
  assert Tensor.randperm(4, dtype=dtypes.int64).dtype == dtypes.int64
  draws = {tuple(Tensor.randperm(6).tolist()) for _ in range(5)}
  assert len(draws) > 1, "randperm gave the same permutation every time"
  with pytest.raises(ValueError): Tensor.randperm(-1)

def test_bfloat16_and_short_casts():
  x = Tensor([1.5, -2.25, 3.0, 1000.0])
  s = x.short()
  assert s.dtype == dtypes.int16 and s.tolist() == torch.tensor([1.5, -2.25, 3.0, 1000.0]).short().tolist()
  b = x.bfloat16()
  assert b.dtype == dtypes.bfloat16
  assert b.float().tolist() == torch.tensor([1.5, -2.25, 3.0, 1000.0]).bfloat16().float().tolist()
  assert Tensor([1.0 + 2 ** -10]).bfloat16().float().item() == 1.0   # 8 mantissa bits

def test_from_blob_copies_host_memory():
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  t = Tensor.from_blob(a.ctypes.data, (3, 4), dtype=dtypes.float32)
  np.testing.assert_array_equal(t.numpy(), a)
  i = np.array([7, -8, 9], np.int16)
  assert Tensor.from_blob(i.ctypes.data, (3,), dtype=dtypes.int16).tolist() == [7, -8, 9]
  with pytest.raises(ValueError, match="from_blob"): Tensor.from_blob(0, (2,))

@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (3, 5), (2, 4, 3), (1, 1)])
def test_qr(shape):
  a = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
  q, r = Tensor(a).qr()
  qn, rn = q.numpy(), r.numpy()
  m = shape[-2]
  assert qn.shape == shape[:-2] + (m, m) and rn.shape == shape
  np.testing.assert_allclose(qn @ rn, a, atol=1e-5)
  np.testing.assert_allclose(np.swapaxes(qn, -1, -2) @ qn, np.broadcast_to(np.eye(m), qn.shape), atol=1e-5)
  np.testing.assert_allclose(np.tril(rn, -1), 0, atol=1e-5)
  # R's diagonal agrees with torch up to sign (Householder conventions differ)
  rt = torch.linalg.qr(torch.tensor(a), mode="complete")[1].numpy()
  np.testing.assert_allclose(np.abs(np.diagonal(rn, axis1=-2, axis2=-1)), np.abs(np.diagonal(rt, axis1=-2, axis2=-1)), atol=1e-4)
  with pytest.raises(ValueError, match="qr"): Tensor([1.0, 2.0]).qr()

@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (3, 5), (2, 4, 3), (4, 4)])
@pytest.mark.parametrize("full", [True, False])
def test_svd(shape, full):
  rng = np.random.default_rng(6)
  a = rng.standard_normal(shape).astype(np.float32)
  if shape == (4, 4): a[:, 3] = a[:, 0] * 2   # rank-deficient
  u, s, vh = Tensor(a).svd(full_matrices=full)
  tu, ts, tvh = torch.linalg.svd(torch.tensor(a), full_matrices=full)
  assert u.shape == tuple(tu.shape) and s.shape == tuple(ts.shape) and vh.shape == tuple(tvh.shape)
  un, sn, vn = u.numpy(), s.numpy(), vh.numpy()
  np.testing.assert_allclose(sn, ts.numpy(), atol=1e-4)
  k = sn.shape[-1]
  np.testing.assert_allclose((un[..., :, :k] * sn[..., None, :]) @ vn[..., :k, :], a, atol=1e-4)
  np.testing.assert_allclose(np.swapaxes(vn, -1, -2)[..., :, :k].swapaxes(-1, -2) @ np.swapaxes(vn, -1, -2)[..., :, :k], np.broadcast_to(np.eye(k), sn.shape[:-1] + (k, k)), atol=1e-4)
  with pytest.raises(ValueError, match="svd"): Tensor([1.0]).svd()
