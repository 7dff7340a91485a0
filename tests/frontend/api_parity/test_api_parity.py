"""tinygrad/torch API parity (issue 15, "Behaviours to match"): the edge cases ported code relies on, each checked
against torch, or against tinygrad's documented result where tinygrad differs from torch (said so at the test)."""
import math
import warnings
import numpy as np
import pytest
import torch
from frontend import Tensor, dtypes

def close(t: Tensor, ref, atol=1e-6, rtol=1e-5):
  ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
  got = t.numpy()
  assert got.shape == ref.shape, f"shape {got.shape} != {ref.shape}"
  np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), atol=atol, rtol=rtol, equal_nan=True)

# ***** bitwise ops on bool and int tensors *****
@pytest.mark.parametrize("dt", [np.bool_, np.int32, np.uint8, np.int64])
def test_bitwise_bool_and_int(dt):
  rng = np.random.default_rng(0)
  a = rng.integers(0, 2 if dt is np.bool_ else 100, 12).astype(dt)
  b = rng.integers(0, 2 if dt is np.bool_ else 100, 12).astype(dt)
  A, B, TA, TB = Tensor(a), Tensor(b), torch.tensor(a), torch.tensor(b)
  for ours, theirs in ((A & B, TA & TB), (A | B, TA | TB), (A ^ B, TA ^ TB), (~A, ~TA), (A.bitwise_and(B), TA.bitwise_and(TB)),
                       (A.bitwise_or(B), TA.bitwise_or(TB)), (A.bitwise_xor(B), TA.bitwise_xor(TB)), (A.bitwise_not(), TA.bitwise_not())):
    assert ours.numpy().dtype == theirs.numpy().dtype
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
  if dt is np.bool_:
    np.testing.assert_array_equal((A & True).numpy(), a & True)
    np.testing.assert_array_equal((False | A).numpy(), a | False)
  with pytest.raises(RuntimeError, match='BitwiseAnd'): Tensor([1.0]) & Tensor([2.0])
  with pytest.raises(RuntimeError, match='bitwise_not'): ~Tensor([1.0])

# ***** zero-size axes *****
def test_reductions_over_empty_axes():
  z, tz = Tensor.zeros(0, 3), torch.zeros(0, 3)
  close(z.sum(0), tz.sum(0))
  close(z.prod(0), tz.prod(0))
  close(z.any(0), tz.any(0))
  close(z.all(0), tz.all(0))
  close(z.any(), tz.any())
  close(z.all(), tz.all())
  close(z.max(1), tz.amax(1))       # a non-empty reduce axis: an empty result
  # max/min have no identity: over an empty dim they raise, naming the op and shape, as numpy and torch do
  for f, op in ((lambda: z.max(0), "max"), (lambda: z.min(0), "min"), (lambda: z.max(), "max"),
                (lambda: Tensor.zeros(0, dtype=dtypes.int32).max(), "max"), (lambda: Tensor.zeros(0, dtype=dtypes.uint8).min(), "min"),
                (lambda: Tensor.zeros(0, dtype=dtypes.bool).min(), "min"), (lambda: Tensor.zeros(2, 0).max(1, keepdim=True), "max")):
    with pytest.raises(RuntimeError, match=rf"{op}\(\).*empty dim.*shape \("): f()
  with pytest.raises((RuntimeError, IndexError)): tz.amax(0)   # (the oracle agrees)

@pytest.mark.parametrize("op", ["cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"])
@pytest.mark.parametrize("shape,axis", [((0, 3), 0), ((0, 3), 1), ((3, 0), 1), ((0,), 0)])
def test_scans_over_empty(op, shape, axis):
  ours, ref = getattr(Tensor.zeros(*shape), op)(axis), getattr(torch.zeros(*shape), op)(axis)
  if op in ("cummax", "cummin"):
    close(ours[0], ref[0])
    assert ours[1].shape == tuple(ref[1].shape)
  else: close(ours, ref)

EMPTY_OPS = {
  "exp": lambda x: x.exp(), "relu": lambda x: x.relu(), "add": lambda x: x + 1, "mul_bcast": lambda x: x * x[:1],
  "where": lambda x: (x > 0).where(x, 2.0) if isinstance(x, Tensor) else torch.where(x > 0, x, 2.0), "matmul": lambda x: x @ (Tensor.ones(3, 2) if isinstance(x, Tensor) else torch.ones(3, 2)),
  "sum1": lambda x: x.sum(1), "mean1": lambda x: x.mean(1), "softmax": lambda x: x.softmax(1), "log_softmax0": lambda x: x.log_softmax(0),
  "transpose": lambda x: x.transpose(0, 1) * 2, "reshape": lambda x: x.reshape(3, 0) + 1, "flip": lambda x: x.flip(0),
  "pad": lambda x: x.pad((1, 1)) if isinstance(x, Tensor) else torch.nn.functional.pad(x, (1, 1)),
  "cat": lambda x: x.cat(x) if isinstance(x, Tensor) else torch.cat([x, x]), "sort": lambda x: x.sort(1)[0],
  "cumsum1": lambda x: x.cumsum(1), "max1": lambda x: x.amax(1) if isinstance(x, torch.Tensor) else x.max(1),
  "argmax1": lambda x: x.argmax(1), "getitem": lambda x: x[:, 1], "unsqueeze": lambda x: x.unsqueeze(0).expand(2, 0, 3),
}
@pytest.mark.parametrize("name", list(EMPTY_OPS))
def test_zero_size_tensors_through_ops(name):
  f = EMPTY_OPS[name]
  out = f(Tensor.zeros(0, 3))
  ref = f(torch.zeros(0, 3))
  assert out.shape == tuple(ref.shape)
  assert out.numpy().shape == tuple(ref.shape)
  e = Tensor.empty(0)
  assert (e + 1).tolist() == [] and e.sum().item() == 0 and e.exp().shape == (0,)

def test_zero_size_more_ops_and_gradients():
  z, tz = Tensor.zeros(0, 3), torch.zeros(0, 3)
  assert [c.shape for c in z.chunk(2)] == [tuple(c.shape) for c in tz.chunk(2)]
  close(Tensor.einsum("ij,jk->ik", z, Tensor.ones(3, 2)), torch.einsum("ij,jk->ik", tz, torch.ones(3, 2)))
  close(Tensor.einsum("ij,jk->ik", Tensor.ones(2, 0), Tensor.ones(0, 2)), torch.einsum("ij,jk->ik", torch.ones(2, 0), torch.ones(0, 2)))
  close(z.std(1), tz.std(1))
  close(z.layernorm(), torch.nn.functional.layer_norm(tz, (3,)))
  close(z.topk(2, 1)[0], tz.topk(2, 1)[0])
  close(z.reshape(0, 1, 3, 1).conv2d(Tensor.ones(2, 1, 2, 1)), torch.nn.functional.conv2d(tz.reshape(0, 1, 3, 1), torch.ones(2, 1, 2, 1)))
  close(z.cross_entropy(Tensor.zeros(0, dtype=dtypes.int32), reduction="sum"), torch.nn.functional.cross_entropy(tz, torch.zeros(0, dtype=torch.long), reduction="sum"))
  # gradients flow through reductions over empty axes (zeros of the input's shape)
  for fn in (lambda x: x.sum(), lambda x: x.max(1).sum(), lambda x: x.prod(0).sum(), lambda x: x.mean(1).sum(), lambda x: x.softmax(0).sum()):
    x = Tensor.zeros(0, 3, requires_grad=True)
    fn(x * 2).backward()
    assert x.grad.shape == (0, 3)
  with pytest.raises(RuntimeError, match="max"): Tensor.rand(4, 3).realize()[:0].max(0)   # a realized buffer's empty slice too

# ***** dims *****
@pytest.mark.parametrize("fn", [lambda x: x.squeeze(2), lambda x: x.squeeze(-3), lambda x: x.cumsum(2), lambda x: x.cumprod(-3),
                                lambda x: x.unsqueeze(3), lambda x: x.transpose(0, 2), lambda x: x.flatten(2), lambda x: x.sum(2),
                                lambda x: x.softmax(2), lambda x: x.flip(2), lambda x: x.permute(0, 2), lambda x: x.argmax(-3),
                                lambda x: x.cummax(2), lambda x: x.roll(1, 2)])
def test_dim_out_of_range_is_index_error(fn):
  with pytest.raises(IndexError):
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      fn(torch.zeros(2, 1))
  with pytest.raises(IndexError, match=r"\(2, 1\)|out of range"): fn(Tensor.zeros(2, 1))

def test_negative_dims_everywhere():
  a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  x, t = Tensor(a), torch.tensor(a)
  close(x.sum(-1), t.sum(-1))
  close(x.cumsum(-2), t.cumsum(-2))
  close(x.cumprod(-1), t.cumprod(-1))
  close(x.softmax(-3), t.softmax(-3))
  close(x.unsqueeze(-1), t.unsqueeze(-1))
  close(x.transpose(-1, -3), t.transpose(-1, -3))
  close(x.permute(-1, 0, -2), t.permute(-1, 0, -2))
  close(x.flatten(-2), t.flatten(-2))
  close(x.argmax(-1), t.argmax(-1))
  close(x.std(-2), t.std(-2))
  close(x.gather(-1, Tensor([[[1, 0]] * 3] * 2)), t.gather(-1, torch.tensor([[[1, 0]] * 3] * 2)))
  close(x.unfold(-1, 2, 2), t.unfold(-1, 2, 2))
  close(x.roll(1, -1), t.roll(1, -1))
  close(x.flip(-1), t.flip(-1))
  close(x.cat(x, dim=-1), torch.cat([t, t], -1))
  close(Tensor.stack(x, x, dim=-1), torch.stack([t, t], -1))
  close(x.split(2, dim=-1)[1], t.split(2, dim=-1)[1])
  close(x.chunk(3, dim=-2)[2], t.chunk(3, dim=-2)[2])
  close(x.repeat_interleave(2, dim=-1), t.repeat_interleave(2, dim=-1))
  close(x.diagonal(0, -2, -1), t.diagonal(0, -2, -1))
  close(x.sort(-2, descending=True)[0], t.sort(-2, descending=True)[0])
  close(x.topk(2, dim=-2)[1], t.topk(2, dim=-2)[1])
  close(x.logcumsumexp(-1), t.logcumsumexp(-1), atol=1e-5)
  close(x.unflatten(-1, (2, 2)), t.unflatten(-1, (2, 2)))
  close(x.argmin(-2), t.argmin(-2))
  close(x.scatter(-1, Tensor([[[0, 1]] * 3] * 2), 5.0), t.scatter(-1, torch.tensor([[[0, 1]] * 3] * 2), 5.0))
  close(x.mean((-1, 0)), t.mean((-1, 0)))
  close((x > 5).all((-1, -2)), (t > 5).all(-1).all(-1))

def test_permute_reshape_args_and_errors():
  x = Tensor.zeros(2, 3, 4)
  assert x.permute(2, 0, 1).shape == x.permute((2, 0, 1)).shape == x.permute([2, 0, 1]).shape == (4, 2, 3)
  assert x.reshape(4, 6).shape == x.reshape((4, 6)).shape == x.reshape([4, 6]).shape == (4, 6)
  assert x.reshape(-1, 6).shape == (4, 6) and x.reshape(2, -1).shape == (2, 12) and x.reshape(-1).shape == (24,)
  assert x.view(3, -1).shape == (3, 8)
  # tinygrad and torch: RuntimeError for a bad permutation and for two -1
  for bad in ((0, 0, 1), (0, 1), (0, 1, 2, 0)):
    with pytest.raises(RuntimeError, match="permut"): x.permute(bad)
    with pytest.raises(RuntimeError): torch.zeros(2, 3, 4).permute(bad)
  with pytest.raises(IndexError): x.permute(0, 1, 3)   # a dim out of range: IndexError first (tinygrad's _resolve_dim)
  with pytest.raises(RuntimeError, match="only one dimension"): x.reshape(-1, -1)
  with pytest.raises(RuntimeError): torch.zeros(2, 3, 4).reshape(-1, -1)
  with pytest.raises(RuntimeError, match="-1"): Tensor.zeros(0, 3).reshape(0, -1)
  with pytest.raises(RuntimeError): torch.zeros(0, 3).reshape(0, -1)
  with pytest.raises(ValueError, match=r"\(2, 3, 4\)"): x.reshape(5, 5)

# ***** integer arithmetic, stable activations, clip gradient *****
def test_integer_division_semantics():
  a = np.array([-7, 7, -7, 7, 0, -1, -8, 2**30 + 1, -(2**30 + 1), 13], np.int32)
  b = np.array([2, -2, -2, 2, 3, 4, 4, 3, 3, -4], np.int32)
  A, B, TA, TB = Tensor(a), Tensor(b), torch.tensor(a), torch.tensor(b)
  np.testing.assert_array_equal((A // B).numpy(), (TA // TB).numpy())
  np.testing.assert_array_equal((A % B).numpy(), (TA % TB).numpy())
  np.testing.assert_array_equal(A.div(B, rounding_mode="trunc").numpy(), TA.div(TB, rounding_mode="trunc").numpy())
  np.testing.assert_array_equal(A.div(B, rounding_mode="floor").numpy(), TA.div(TB, rounding_mode="floor").numpy())
  for p in (1, 2, 4, 8, 16):   # powers of two (shift rewrites) by a Python int, both signs of the dividend
    np.testing.assert_array_equal((A // p).numpy(), (TA // p).numpy())
    np.testing.assert_array_equal((A % p).numpy(), (TA % p).numpy())
    np.testing.assert_array_equal(A.div(p, rounding_mode="trunc").numpy(), TA.div(p, rounding_mode="trunc").numpy())
  assert A.div(B, rounding_mode="trunc").dtype == dtypes.int32
  with pytest.raises(RuntimeError, match="rounding_mode"): A.div(B, rounding_mode="round")
  f = np.array([-7.5, 7.5, -0.5], np.float32)
  close(Tensor(f).div(2, rounding_mode="trunc"), torch.tensor(f).div(2, rounding_mode="trunc"))
  close(Tensor(f).div(2, rounding_mode="floor"), torch.tensor(f).div(2, rounding_mode="floor"))

def test_int_pow_stays_integer():
  a, b = np.array([2, 3, -2, 5, 0], np.int32), np.array([3, 2, 3, 0, 4], np.int32)
  for ours, ref in ((Tensor(a) ** Tensor(b), torch.tensor(a) ** torch.tensor(b)), (Tensor(a) ** 3, torch.tensor(a) ** 3),
                    (2 ** Tensor(b), 2 ** torch.tensor(b))):
    assert ours.dtype == dtypes.int32
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())

def _fwd_bwd(fn_ours, fn_torch, x: np.ndarray, atol=1e-6):
  xt = torch.tensor(x, requires_grad=True)
  xo = Tensor(x, requires_grad=True)
  yo, yt = fn_ours(xo), fn_torch(xt)
  close(yo, yt, atol=atol)
  yo.sum().backward()
  yt.sum().backward()
  close(xo.grad, xt.grad, atol=atol)

BIG = np.array([-1000.0, -100.0, -30.0, -1.0, 0.0, 1e-3, 1.0, 15.0, 30.0, 100.0, 1000.0], np.float32)
def test_sigmoid_softplus_stable():
  _fwd_bwd(lambda x: x.sigmoid(), torch.sigmoid, BIG)
  _fwd_bwd(lambda x: x.softplus(), torch.nn.functional.softplus, BIG)
  _fwd_bwd(lambda x: x.softplus(beta=2.0, threshold=3.0), lambda x: torch.nn.functional.softplus(x, beta=2.0, threshold=3.0), BIG)
  _fwd_bwd(lambda x: x.softplus(beta=0.5), lambda x: torch.nn.functional.softplus(x, beta=0.5), BIG)
  _fwd_bwd(lambda x: x.logsigmoid(), torch.nn.functional.logsigmoid, BIG)
  _fwd_bwd(lambda x: x.mish(), torch.nn.functional.mish, BIG[2:-2], atol=1e-5)

def test_clip_gradient_at_bounds():
  x = np.array([-1.0, 0.0, 0.5, 1.0, 2.0, math.nan], np.float32)
  _fwd_bwd(lambda t: t.clip(0.0, 1.0), lambda t: t.clamp(0.0, 1.0), x)
  _fwd_bwd(lambda t: t.clip(0.0, None), lambda t: t.clamp(0.0, None), x)
  _fwd_bwd(lambda t: t.clip(None, 1.0), lambda t: t.clamp(None, 1.0), x)
  _fwd_bwd(lambda t: t.clip(1.0, 0.0), lambda t: t.clamp(1.0, 0.0), x)    # min > max: all max, as torch
  close(Tensor([1, 5, -3]).clip(0, 2), torch.tensor([1, 5, -3]).clamp(0, 2))
  with pytest.raises(RuntimeError): Tensor([1.0]).clip()

def test_comparisons_with_nan():
  a = np.array([math.nan, 1.0, 2.0, math.nan], np.float32)
  b = np.array([1.0, math.nan, 2.0, math.nan], np.float32)
  A, B, TA, TB = Tensor(a), Tensor(b), torch.tensor(a), torch.tensor(b)
  for ours, ref in ((A <= B, TA <= TB), (A >= B, TA >= TB), (A < B, TA < TB), (A > B, TA > TB), (A == B, TA == TB), (A != B, TA != TB)):
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())

# ***** softmax family, var/std, isclose, linspace *****
@pytest.mark.parametrize("axis", [0, -1])
def test_softmax_family_0d(axis):
  t = torch.tensor(3.0)
  close(Tensor(3.0).softmax(axis), t.softmax(axis))
  close(Tensor(3.0).log_softmax(axis), t.log_softmax(axis))
  close(Tensor(3.0).logsumexp(axis), t.logsumexp(axis))
  close(Tensor(3.0).logsumexp(), t.logsumexp(()))

@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3, (0, 2)])
def test_softmax_family_any_axis(axis):
  a = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
  if not isinstance(axis, tuple):
    close(Tensor(a).softmax(axis), torch.tensor(a).softmax(axis))
    close(Tensor(a).log_softmax(axis), torch.tensor(a).log_softmax(axis))
  close(Tensor(a).logsumexp(axis), torch.tensor(a).logsumexp(axis))
  close(Tensor(a).logsumexp(axis, keepdim=True), torch.tensor(a).logsumexp(axis, keepdim=True))

def test_logsumexp_infinities():
  a = np.array([[-math.inf, -math.inf], [math.inf, 1.0], [-math.inf, 0.0]], np.float32)
  close(Tensor(a).logsumexp(1), torch.tensor(a).logsumexp(1))

@pytest.mark.parametrize("shape,axis,correction", [((1, 4), 0, 1), ((1, 4), 0, 0), ((2, 3), 0, 2), ((2, 3), 0, 3), ((5,), 0, 1),
                                                   ((1,), None, 1), ((), None, 1), ((3, 1), 1, 1), ((2, 3), (0, 1), 5)])
def test_var_std_correction(shape, axis, correction):
  a = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
  t = torch.tensor(a)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    close(Tensor(a).var(axis, correction=correction), t.var(axis, correction=correction), atol=1e-5)
    close(Tensor(a).std(axis, correction=correction), t.std(axis, correction=correction), atol=1e-5)
    close(Tensor(a).std_mean(axis, correction=correction)[0], torch.std_mean(t, axis, correction=correction)[0], atol=1e-5)

def test_isclose_allclose():
  a = np.array([math.nan, 1.0, math.inf, -math.inf, math.inf, 1.0, 1e-9, 0.0], np.float32)
  b = np.array([math.nan, 1.0 + 1e-6, math.inf, math.inf, 1e38, 1.1, 0.0, -0.0], np.float32)
  for eq in (False, True):
    np.testing.assert_array_equal(Tensor(a).isclose(Tensor(b), equal_nan=eq).numpy(), torch.isclose(torch.tensor(a), torch.tensor(b), equal_nan=eq).numpy())
  np.testing.assert_array_equal(Tensor(a).isclose(Tensor(b), rtol=0.2, atol=0).numpy(), torch.isclose(torch.tensor(a), torch.tensor(b), rtol=0.2, atol=0).numpy())
  np.testing.assert_array_equal(Tensor([1, 2]).isclose(Tensor([1, 3])).numpy(), [True, False])
  assert Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0 + 1e-6])) is True
  assert Tensor([1.0, math.nan]).allclose(Tensor([1.0, math.nan])) is False
  assert Tensor([1.0, math.nan]).allclose(Tensor([1.0, math.nan]), equal_nan=True) is True

@pytest.mark.parametrize("start,stop,steps,dt", [(0, 1, 0, None), (0, 1, 1, None), (3, 7, 1, None), (0, 10, 5, None), (-1, 1, 7, None),
                                                 (0, 10, 4, "int32"), (-10, 10, 4, "int32"), (5, -5, 3, "int64"), (0.5, 2.5, 1, "int32")])
def test_linspace_edges(start, stop, steps, dt):
  ours = Tensor.linspace(start, stop, steps, dtype=dt)
  ref = torch.linspace(start, stop, steps, dtype=getattr(torch, dt) if dt else None)
  assert ours.numpy().dtype == ref.numpy().dtype
  close(ours, ref)

def test_linspace_errors():
  with pytest.raises(ValueError): Tensor.linspace(0, 1, -1)
  with pytest.raises(ValueError): Tensor.linspace(0, 1, 3, dtype=dtypes.bool)   # tinygrad refuses bool

# ***** sum/prod dtype, roll, meshgrid, unfold, einsum, interpolate, pad, cummax *****
def test_sum_prod_dtype():
  a = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
  for dt, tdt in (("float32", torch.float32), (dtypes.int64, torch.int64), (dtypes.float64, torch.float64)):
    for axis in (None, 1):
      s, p = Tensor(a).sum(axis, dtype=dt), Tensor(a).prod(axis, dtype=dt)
      rs = torch.tensor(a).sum(axis, dtype=tdt) if axis is not None else torch.tensor(a).sum(dtype=tdt)
      rp = torch.tensor(a).prod(axis, dtype=tdt) if axis is not None else torch.tensor(a).prod(dtype=tdt)
      assert s.numpy().dtype == rs.numpy().dtype and p.numpy().dtype == rp.numpy().dtype
      close(s, rs)
      close(p, rp)
  assert Tensor([1.0, 2.0], dtype=dtypes.float16).sum(dtype=dtypes.float32).dtype == dtypes.float32

@pytest.mark.parametrize("shifts,dims", [(1, None), (-3, None), (7, None), (1, 0), ((1, -1), (0, 1)), (2, -1)])
def test_roll(shifts, dims):
  a = np.arange(12).reshape(3, 4)
  ours = Tensor(a).roll(shifts) if dims is None else Tensor(a).roll(shifts, dims)
  ref = torch.tensor(a).roll(shifts) if dims is None else torch.tensor(a).roll(shifts, dims)
  close(ours, ref)
  with pytest.raises(RuntimeError): Tensor(a).roll((1, 2), 0)

@pytest.mark.parametrize("indexing", ["ij", "xy"])
@pytest.mark.parametrize("sizes", [(3,), (3, 2), (3, 2, 4), (1, 5)])
def test_meshgrid(indexing, sizes):
  ts = [np.arange(n) + 10 * i for i, n in enumerate(sizes)]
  ours = Tensor(ts[0]).meshgrid(*[Tensor(t) for t in ts[1:]], indexing=indexing)
  ref = torch.meshgrid(*[torch.tensor(t) for t in ts], indexing=indexing)
  assert len(ours) == len(ref)
  for o, r in zip(ours, ref): close(o, r)
  with pytest.raises(RuntimeError, match="indexing"): Tensor([1]).meshgrid(Tensor([2]), indexing="ab")

@pytest.mark.parametrize("shape,dim,size,step", [((5,), 0, 0, 1), ((5,), 0, 0, 2), ((2, 4), 1, 0, 3), ((5,), 0, 5, 1), ((2, 6), -1, 2, 2), ((3, 4), 0, 1, 1)])
def test_unfold(shape, dim, size, step):
  a = np.arange(np.prod(shape)).reshape(shape)
  close(Tensor(a).unfold(dim, size, step), torch.tensor(a).unfold(dim, size, step))

def test_unfold_errors():
  for args in ((0, 6, 1), (0, -1, 1), (0, 2, 0)):
    with pytest.raises(RuntimeError): torch.arange(5).unfold(*args)
    with pytest.raises(RuntimeError, match="unfold"): Tensor.arange(5).unfold(*args)

EINSUM = [("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]), ("...ij,jk", [(2, 3, 4), (4, 5)]), ("i...,i...->...", [(3, 2, 2), (3, 2, 2)]),
          ("...i,...i->...", [(2, 3), (3,)]), ("b...,b->...", [(2, 3, 4), (2,)]), ("ii", [(3, 3)]), ("ii->i", [(3, 3)]),
          ("iij->j", [(3, 3, 2)]), ("ij,jj->i", [(2, 3), (3, 3)]), ("i,i->", [(4,), (1,)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 2)])]
@pytest.mark.parametrize("formula,shapes", EINSUM)
def test_einsum_ellipsis_and_repeats(formula, shapes):
  rng = np.random.default_rng(3)
  xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  close(Tensor.einsum(formula, *[Tensor(x) for x in xs]), torch.einsum(formula, *[torch.tensor(x) for x in xs]), atol=1e-5)
  close(Tensor.einsum(formula, [Tensor(x) for x in xs]), torch.einsum(formula, *[torch.tensor(x) for x in xs]), atol=1e-5)

@pytest.mark.parametrize("formula,shapes", [("ij,jk->ik", [(2, 3), (4, 5)]), ("ijk->ij", [(2, 3)]), ("ij->k", [(2, 3)]), ("ij->ii", [(2, 3)]),
                                            ("ii->i", [(2, 3)]), ("...i,...i->...", [(2, 3), (4, 3)])])
def test_einsum_shape_errors(formula, shapes):
  with pytest.raises(RuntimeError): torch.einsum(formula, *[torch.ones(s) for s in shapes])
  with pytest.raises(RuntimeError, match="einsum"): Tensor.einsum(formula, *[Tensor.ones(*s) for s in shapes])
  with pytest.raises(ValueError, match="einsum"): Tensor.einsum("ij,jk->ik", Tensor.ones(2, 3))   # operand count: ValueError as tinygrad

@pytest.mark.parametrize("mode,tmode", [("linear", "bilinear"), ("nearest", "nearest"), ("nearest-exact", "nearest-exact")])
@pytest.mark.parametrize("dt,tdt", [(np.uint8, torch.uint8), (np.float32, torch.float32)])
def test_interpolate_integer_dtypes(mode, tmode, dt, tdt):
  a = np.random.default_rng(4).integers(0, 255, (1, 2, 3, 4)).astype(dt)
  for size in ((6, 7), (2, 3), (5, 4)):
    ours = Tensor(a).interpolate(size, mode=mode)
    ref = torch.nn.functional.interpolate(torch.tensor(a, dtype=tdt), size=size, mode=tmode)
    assert ours.numpy().dtype == ref.numpy().dtype
    close(ours, ref, atol=1 if dt is np.uint8 else 1e-4)   # torch rounds uint8 bilinear in fixed point

def test_interpolate_argument_errors():
  x = Tensor.ones(1, 1, 2, 2)
  with pytest.raises(ValueError): torch.nn.functional.interpolate(torch.ones(1, 1, 2, 2), size=(3, 3), mode="nearest", align_corners=True)
  with pytest.raises(ValueError, match="align_corners"): x.interpolate((3, 3), mode="nearest", align_corners=True)
  with pytest.raises(ValueError, match="mode"): x.interpolate((3, 3), mode="bicubic")
  with pytest.raises(ValueError, match="size"): x.interpolate((3, 3, 3, 3, 3))
  with pytest.raises(ValueError, match="size"): x.interpolate((0, 3))

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular", "constant"])
@pytest.mark.parametrize("pads", [(1, 1, 0, 0), (2, 0, 1, 2), (0, 3, 2, 1), (1, -1, -1, 2), (-2, 3, 1, -1), (0, 0, 0, 0)])
def test_pad_modes(mode, pads):
  a = np.arange(1 * 2 * 4 * 5, dtype=np.float32).reshape(1, 2, 4, 5)
  _fwd_bwd(lambda t: t.pad(pads, mode=mode), lambda t: torch.nn.functional.pad(t, pads, mode=mode), a)

def test_pad_negative_crop_and_errors():
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  close(Tensor(a).pad((-1, 2, 0, -2), value=5.0), torch.nn.functional.pad(torch.tensor(a), (-1, 2, 0, -2), value=5.0))
  close(Tensor(a).pad(((-1, 0), (1, -2))), torch.nn.functional.pad(torch.tensor(a), (1, -2, -1, 0)))
  with pytest.raises(ValueError, match="reflect"): Tensor(a).pad((4, 0), mode="reflect")
  with pytest.raises(ValueError, match="circular"): Tensor(a).pad((5, 0), mode="circular")
  with pytest.raises(NotImplementedError): Tensor(a).pad((1, 1), mode="wrap")

def test_cummax_cummin():
  # tinygrad >= 0.13 and torch return (values, indices); the index is the last position reaching the running max (torch)
  a = np.array([[1, 3, 3, 2, 5, 5], [0, -1, 4, 4, -2, 6]], np.int32)
  for name in ("cummax", "cummin"):
    for axis in (0, 1, -1):
      v, i = getattr(Tensor(a), name)(axis)
      rv, ri = getattr(torch.tensor(a), name)(axis)
      np.testing.assert_array_equal(v.numpy(), rv.numpy())
      np.testing.assert_array_equal(i.numpy(), ri.numpy())

# ***** indexing *****
X = np.arange(120).reshape(2, 3, 4, 5)
IDX = [[0, 1], (0, 1), [-1, 0], (0, slice(None), [1, 2]), ([0, 1], 0, [1, 2]), ([0, 1], slice(None), 0, [1, 2]), (1, [[0], [2]], slice(None), [1, 2]),
       (slice(None), 0, [0, 2], slice(None)), (Ellipsis, 0, [1, 2]), ([1], Ellipsis, 2), (None, 0, [0, 1], None, [1, 2]), (0, [2, 0, 1])]
@pytest.mark.parametrize("idx", IDX, ids=[repr(i) for i in IDX])
def test_index_lists_tuples_and_ints_next_to_fancy(idx):
  # torch (and tinygrad): an int index removes its dim first; it never joins the fancy indices as numpy's rule has it
  ours, ref = Tensor(X)[idx], torch.tensor(X)[idx]
  assert ours.shape == tuple(ref.shape)
  np.testing.assert_array_equal(ours.numpy(), ref.numpy())

def test_index_list_mixing_tensors_and_ints():
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for ours, ref in ((Tensor(X)[[Tensor([0, 1]), 1]], torch.tensor(X)[[torch.tensor([0, 1]), 1]]),
                      (Tensor(X)[[slice(None), Tensor([2, 0])]], torch.tensor(X)[[slice(None), torch.tensor([2, 0])]]),
                      (Tensor(X)[[1, Tensor([[0], [2]]), Tensor([1, 3])]], torch.tensor(X)[[1, torch.tensor([[0], [2]]), torch.tensor([1, 3])]])):
      assert ours.shape == tuple(ref.shape)
      np.testing.assert_array_equal(ours.numpy(), ref.numpy())

@pytest.mark.parametrize("idx,exc", [(2, IndexError), ((0, 3), IndexError), ([0, 2], IndexError), (1.5, IndexError), ("a", IndexError),
                                     ((0, 0, 0, 0, 0), IndexError), ([0.5], IndexError), ((Ellipsis, Ellipsis), IndexError),
                                     (slice(None, None, 0), ValueError), (slice(0.5, 2), TypeError), ([[0, 1], [2]], IndexError),
                                     ((Tensor([0.5]),), IndexError), (object(), IndexError)])
def test_bad_indices(idx, exc):
  with pytest.raises(exc): Tensor(X)[idx]

def test_scatter_tensor_src_and_errors():
  base = np.zeros((3, 5), np.float32)
  idx = np.array([[0, 1, 2, 0], [1, 4, 3, 3]])
  src = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
  ours = Tensor(base).scatter(1, Tensor(idx), Tensor(src))
  ref = torch.tensor(base).scatter(1, torch.tensor(idx), torch.tensor(src))
  # the duplicated index (row 0: 0 twice; row 1: 3 twice) makes torch's choice unspecified: compare the others
  mask = np.ones_like(base, bool); mask[0, 0] = mask[1, 3] = False
  np.testing.assert_array_equal(ours.numpy()[mask], ref.numpy()[mask])
  close(Tensor(base).scatter(0, Tensor([[2, 0, 1]]), 9.0), torch.tensor(base).scatter(0, torch.tensor([[2, 0, 1]]), 9.0))
  close(Tensor(base).scatter(1, Tensor(idx), Tensor(src), reduce="add"), torch.tensor(base).scatter(1, torch.tensor(idx), torch.tensor(src), reduce="add"))
  with pytest.raises(RuntimeError, match="dtype"): Tensor(base).scatter(1, Tensor(idx), Tensor(src.astype(np.int32)))
  with pytest.raises(RuntimeError, match="index"): Tensor(base).scatter(1, Tensor(idx.astype(np.float32)), 1.0)
  with pytest.raises(RuntimeError, match="dims"): Tensor(base).scatter(1, Tensor([0, 1]), 1.0)
  with pytest.raises(TypeError, match="reduce"): Tensor(base).scatter(1, Tensor(idx), 1.0, reduce="max")

def test_scatter_reduce_argument_errors():
  x, i, s = Tensor.zeros(3), Tensor([0, 0, 2]), Tensor([1.0, 2.0, 3.0])
  for reduce in ("sum", "prod", "mean", "amax", "amin"):
    for inc in (True, False):
      close(x.scatter_reduce(0, i, s, reduce, include_self=inc), torch.zeros(3).scatter_reduce(0, torch.tensor([0, 0, 2]), torch.tensor([1.0, 2.0, 3.0]), reduce, include_self=inc))
  with pytest.raises(RuntimeError, match="reduce"): x.scatter_reduce(0, i, s, "median")
  with pytest.raises(TypeError, match="src"): x.scatter_reduce(0, i, 1.0, "sum")
  with pytest.raises(RuntimeError): x.scatter_reduce(0, Tensor([[0]]), Tensor([[1.0]]), "sum")
  with pytest.raises(RuntimeError): x.scatter_reduce(0, i, Tensor([1, 2, 3]), "sum")
  with pytest.raises(IndexError): x.scatter_reduce(1, i, s, "sum")

# ***** conv2d argument errors *****
@pytest.mark.parametrize("xs,ws,kw,match", [((1, 4, 5, 5), (6, 2, 3, 3), dict(groups=3), "6 channels"), ((1, 3, 5, 5), (6, 2, 3, 3), {}, "2 channels"),
                                            ((1, 4, 5, 5), (5, 2, 3, 3), dict(groups=2), "divisible by groups"), ((1, 2, 5), (6, 2, 3, 3), {}, "dims"),
                                            ((1, 2, 2, 2), (6, 2, 3, 3), {}, "smaller than the kernel"), ((1, 2, 5, 5), (6, 2, 3, 3), dict(groups=0), "groups"),
                                            ((1, 2, 5, 5), (6, 2, 3, 3), dict(bias=Tensor.ones(5)), "bias")])
def test_conv2d_argument_errors(xs, ws, kw, match):
  tkw = {k: (torch.ones(v.shape) if isinstance(v, Tensor) else v) for k, v in kw.items()}
  with pytest.raises(RuntimeError): torch.nn.functional.conv2d(torch.ones(xs), torch.ones(ws), **tkw)
  with pytest.raises(RuntimeError, match=match): Tensor.ones(*xs).conv2d(Tensor.ones(*ws), **kw)

def test_conv2d_padding_shape_error():
  with pytest.raises(ValueError, match="padding"): Tensor.ones(1, 2, 5, 5).conv2d(Tensor.ones(6, 2, 3, 3), padding=(1, 2, 3))
  # the accepted forms still work: int, per dim, per side
  for p, tp in ((1, 1), ((1, 2), (1, 2))):
    close(Tensor.ones(1, 2, 5, 5).conv2d(Tensor.ones(6, 2, 3, 3), padding=p), torch.nn.functional.conv2d(torch.ones(1, 2, 5, 5), torch.ones(6, 2, 3, 3), padding=tp))
