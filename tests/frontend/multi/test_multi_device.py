"""Tensors on several devices (issue 26, stage 1): placement, shape ops and their errors, allreduce, matmul and conv on
sharded operands. A port of the behaviours of tinygrad v0.12 test/test_multitensor.py (groups 1-5 of
shared/designs/multi-device.md A.7), checked against numpy.

The devices come from the environment: `CPU:1,CPU:2` by default; `MOCKGPU=1 MOCKGPU_COUNT=2 NV=1` (or `AMD=1`) uses
the first two mock GPUs.
"""
import numpy as np
import pytest
from frontend import Tensor, Device, dtypes, nn
from frontend import engine

def _devices() -> tuple[str, str]:
  base = Device.DEFAULT.split(":")[0]
  return ("CPU:1", "CPU:2") if base == "CPU" else (base, f"{base}:1")

D = _devices()
d0, d1 = D
N = 16

@pytest.fixture(autouse=True, scope="module")
def _two_devices():
  try: Device[d1]
  except Exception as e: pytest.skip(f"needs two devices ({d0}, {d1}): {e}")
  yield

def rng(*shape, seed=0) -> np.ndarray: return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def shard_np(n: np.ndarray, axis) -> Tensor: return Tensor(n).shard(D, axis)

# ***** group 1: placement *****
def test_to_tuple_replicates():
  x = Tensor.ones(N).contiguous().realize()
  x.to_(D)
  assert x.device == D and [lb.shape for lb in x.lazydata.lbs] == [(N,), (N,)] and x.lazydata.axis is None
  assert (x + x).tolist() == [2.0] * N

def test_shard_splits_axis0():
  n = rng(N, 4)
  x = Tensor(n).shard_(D, 0)
  assert [lb.shape for lb in x.lazydata.lbs] == [(N // 2, 4), (N // 2, 4)]
  assert [lb.device for lb in x.lazydata.lbs] == list(D) and x.shape == (N, 4)
  # each device holds its own piece: read each shard's buffer on its device
  x.realize()
  for lb, part in zip(x.lazydata.lbs, np.split(n, 2)): np.testing.assert_equal(Tensor(lb).numpy(), part)
  np.testing.assert_equal((x + 1).numpy(), n + 1)

def test_shard_negative_axis():
  x = Tensor(rng(4, 6)).shard(D, -1)
  assert x.lazydata.axis == 1 and [lb.shape for lb in x.lazydata.lbs] == [(4, 3), (4, 3)]

def test_shard_same_device_twice():
  n = rng(N)
  x = Tensor(n, device=d0).shard((d0, d0), 0)
  np.testing.assert_equal((x * 2).numpy(), n * 2)
  np.testing.assert_allclose(x.sum().numpy(), n.sum(), rtol=1e-5)

def test_shard_plus_one_sum():
  x = Tensor.ones(N).contiguous().realize().shard(D, 0)
  assert (x + 1).sum().item() == 2 * N

def test_numpy_gathers_and_to_one_device():
  n = rng(8, 4)
  x = shard_np(n, 0)
  np.testing.assert_equal(x.numpy(), n)
  y = x.to(d1)
  assert y.device == d1
  np.testing.assert_equal(y.numpy(), n)

def test_gather_keeps_negative_zero_and_nan():
  # shards are concatenated bit-exactly (not added to zeros, which would turn -0.0 into 0.0)
  n = np.array([-0.0, np.nan, np.inf, -np.inf, 1.0, -0.0, 2.5, np.nan], np.float32)
  got = Tensor(n).shard(D, 0).numpy()
  np.testing.assert_equal(got, n)
  assert np.signbit(got[0]) and np.signbit(got[5])

def test_tensor_from_multi_lazybuffer():
  x = shard_np(rng(4, 4), 1)
  y = Tensor(x.lazydata)
  assert y.device == D
  np.testing.assert_equal(y.numpy(), x.numpy())

def test_empty_tensor():
  x = Tensor.empty(0, 4).shard(D, 0)
  assert x.shape == (0, 4) and x.numpy().shape == (0, 4)

def test_arange_on_a_tuple_of_devices():
  a = Tensor.arange(N, device=D)
  assert a.device == D and a.lazydata.axis is None
  assert a.tolist() == list(range(N))
  b = Tensor.arange(N).shard(D, 0)
  assert (b * 2).tolist() == [2 * i for i in range(N)]

def test_full_and_zeros_on_a_tuple_of_devices():
  assert Tensor.full((2, 2), 3.0, device=D).device == D
  assert Tensor.zeros(2, 3, device=D).tolist() == [[0.0] * 3] * 2
  assert Tensor([1, 2], device=D).tolist() == [1, 2]

def test_shard_like_placement():
  x = Tensor(rng(8, 2)).shard(D, 0)
  y = Tensor(rng(8, 2, seed=1)).shard(x.device, x.lazydata.axis)
  np.testing.assert_allclose((x + y).numpy(), rng(8, 2) + rng(8, 2, seed=1))

def test_no_recompile_when_sharding_again():
  x = Tensor(rng(8, 4)).shard(D, 0)
  (x * 3 + 1).realize()
  before = len(engine._kernel_cache)
  y = Tensor(rng(8, 4, seed=2)).shard(D, 0)
  z = (y * 3 + 1).realize()
  assert len(engine._kernel_cache) == before
  np.testing.assert_allclose(z.numpy(), rng(8, 4, seed=2) * 3 + 1, rtol=1e-6, atol=1e-6)

def test_kernels_run_on_each_device():
  x = Tensor(rng(8, 4)).shard(D, 0).realize()
  items = [si for si in (x * 2 + 1).schedule() if si.kind == "kernel"]
  assert sorted(si.outputs[0].device for si in items) == sorted(D)

def test_shard_errors():
  x = Tensor(rng(4, 4)).shard(D, 0)
  with pytest.raises(RuntimeError, match="already on"): x.shard(D, 1)
  with pytest.raises(RuntimeError, match="different devices"): x + Tensor(rng(4, 4), device=d0)
  with pytest.raises(RuntimeError, match="different devices"): x + Tensor(rng(4, 4)).shard((d1, d0), 0)
  with pytest.raises(ValueError, match="rand"): Tensor.rand(4, device=D)

def test_one_device_is_to():
  x = Tensor(rng(4)).shard((d1,), 0)
  assert x.device == d1

# ***** group 2 and 3: shape ops on sharded tensors, and their errors *****
def test_uneven_shard_raises():
  with pytest.raises(ValueError, match=r"axis 0 of shape \(5, 2\) has 5 elements.*2 devices"): Tensor(rng(5, 2)).shard(D, 0)
  with pytest.raises(ValueError, match=r"axis 1 of shape \(4, 3\)"): Tensor(rng(4, 3)).shard_(D, 1)

@pytest.mark.parametrize("axis", [None, 0, 1, 2])
def test_reshape_within_shards(axis):
  n = rng(4, 6, 2)
  x = shard_np(n, axis)
  for shape in [(4, 12), (2, 2, 6, 2), (4, 6, 2, 1)]:
    if axis is not None and axis >= 1 and shape == (4, 12) and axis == 2: continue
    np.testing.assert_equal(x.reshape(shape).numpy(), n.reshape(shape))

def test_reshape_across_shards_raises():
  x = shard_np(rng(4, 6), 1)   # each device holds 3 columns of every row
  with pytest.raises(RuntimeError, match=r"reshape \(4, 6\) -> \(24,\): would move elements between the shards of axis 1"): x.reshape(24)
  with pytest.raises(RuntimeError, match="move elements between the shards"): x.reshape(6, 4)
  y = shard_np(rng(4, 6), 0)
  np.testing.assert_equal(y.reshape(24).numpy(), rng(4, 6).reshape(24))   # axis 0: rows stay on their device

@pytest.mark.parametrize("axis", [None, 0, 1])
def test_elementwise_mixed_shardings(axis):
  a, b = rng(4, 4), rng(4, 4, seed=1)
  for other in (None, 0, 1):
    np.testing.assert_allclose((shard_np(a, axis) * shard_np(b, other) - 1).numpy(), a * b - 1, rtol=1e-6, atol=1e-6)

def test_four_add_axis1_with_replicated():
  x, w = shard_np(np.ones((8, 8), np.float32), 1), shard_np(np.ones((8, 8), np.float32), None)
  np.testing.assert_equal((x + w).numpy(), 2)

@pytest.mark.parametrize("shard_axis", [None, 0, 1])
@pytest.mark.parametrize("reduce_axis", [None, 0, 1])
@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
def test_reduce(shard_axis, reduce_axis, op):
  n = rng(4, 6)
  got = getattr(shard_np(n, shard_axis), op)(reduce_axis).numpy()
  np.testing.assert_allclose(got, getattr(n, op)(reduce_axis), rtol=1e-5, atol=1e-6)

def test_reduce_keeps_sharding_on_other_axes():
  x = shard_np(rng(4, 6), 0).sum(1)
  assert x.lazydata.axis == 0 and [lb.shape for lb in x.lazydata.lbs] == [(2,), (2,)]

def test_permute_moves_the_axis():
  n = rng(2, 4, 6)
  x = shard_np(n, 2).permute(2, 0, 1)
  assert x.lazydata.axis == 0
  np.testing.assert_equal(x.numpy(), n.transpose(2, 0, 1))

def test_expand_rank_and_pad_unsharded_axis():
  n = rng(4, 1)
  x = shard_np(n, 0)
  np.testing.assert_equal(x.expand(4, 5).numpy(), np.broadcast_to(n, (4, 5)))
  np.testing.assert_equal(x.pad(((0, 0), (1, 2))).numpy(), np.pad(n, ((0, 0), (1, 2))))
  with pytest.raises(RuntimeError, match="can't pad the sharded axis 0"): x.pad(((1, 0), (0, 0))).realize()
  with pytest.raises(RuntimeError, match=r"expand \(4, 1\) -> \(8, 1\): can't expand the sharded axis 0"): x.lazydata.expand((8, 1))

def test_movement_of_one_shard():
  """Shrunk to one shard, the value lives on one device: its sharded axis expands (size 1), flips, shrinks, pads and
  reshapes there (was refused: FUZZ_SEED=102950), and the pad back around the shard still makes every device hold its
  shard."""
  m = rng(2, 3)
  one = shard_np(m, 0).shrink(((1, 2), None))   # one shard of size 1 left on the sharded axis
  e = one.expand(4, 3)
  assert e.lazydata.real == [False, True] and e.lazydata.axis == 0
  np.testing.assert_equal(e.numpy(), np.broadcast_to(m[1:], (4, 3)))
  n = rng(8, 4)
  p1 = shard_np(n, 0).shrink(((4, 8), None))
  np.testing.assert_equal(p1.flip(0).numpy(), n[4:][::-1])
  np.testing.assert_equal(p1.shrink(((1, 3), None)).numpy(), n[5:7])
  np.testing.assert_equal(p1.pad(((0, 2), (1, 0))).numpy(), np.pad(n[4:], ((0, 2), (1, 0))))
  q = shard_np(n, 1).shrink((None, (2, 4)))   # split on axis 1: merging it with axis 0 leaves it no axis to be
  assert q.reshape(16).lazydata.axis is None and q.reshape(16).lazydata.real == [False, True]
  np.testing.assert_equal(q.reshape(16).numpy(), n[:, 2:].reshape(16))
  back = p1.pad(((4, 0), (1, 0)))   # the pad back, with another axis: every device holds its shard again
  assert back.lazydata.real == [True, True]
  np.testing.assert_equal(back.numpy(), np.pad(n[4:], ((4, 0), (1, 0))))

def test_flip():
  n = rng(4, 6)
  np.testing.assert_equal(shard_np(n, 0).flip(1).numpy(), n[:, ::-1])
  with pytest.raises(RuntimeError, match="can't flip the sharded axis 0"): shard_np(n, 0).flip(0)

def test_shrink_on_unsharded_axis():
  n = rng(4, 6)
  np.testing.assert_equal(shard_np(n, 0)[:, 1:4].numpy(), n[:, 1:4])

class TestShrinkShardedAxis:
  n = rng(8, 4)
  def test_exact_shard_bounds(self):
    x = shard_np(self.n, 0)
    p0, p1 = x.shrink(((0, 4), None)), x.shrink(((4, 8), None))
    assert p0.lazydata.real == [True, False] and p1.lazydata.real == [False, True]
    np.testing.assert_equal(p0.numpy(), self.n[:4])
    np.testing.assert_equal(p1.numpy(), self.n[4:])
  def test_bad_bounds_raise(self):
    x = shard_np(self.n, 0)
    for bad in [((0, 3), None), ((2, 6), None), ((4, 7), None)]:
      with pytest.raises(RuntimeError, match=r"axis 0 is sharded as \[\(0, 4\), \(4, 8\)\]; it can only be shrunk to one shard"): x.shrink(bad)
    with pytest.raises(RuntimeError, match="and another axis together"): x.shrink(((0, 4), (0, 2)))
  def test_ops_on_one_partition(self):
    p1 = shard_np(self.n, 0).shrink(((4, 8), None))
    np.testing.assert_allclose((p1 * 2 + 1).numpy(), self.n[4:] * 2 + 1, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(p1.sum(0).numpy(), self.n[4:].sum(0), rtol=1e-5)
  def test_add_two_partitions(self):
    x = shard_np(self.n, 0)
    p0, p1 = x.shrink(((0, 4), None)), x.shrink(((4, 8), None))
    whole = p0.pad(((0, 4), None)) + p1.pad(((4, 0), None))
    assert whole.lazydata.real == [True, True]
    np.testing.assert_equal(whole.numpy(), self.n)

def test_stack_and_cat_of_sharded():
  a, b = rng(4, 2), rng(4, 2, seed=1)
  np.testing.assert_equal(Tensor.stack(shard_np(a, 0), shard_np(b, 0)).numpy(), np.stack([a, b]))
  np.testing.assert_equal(shard_np(a, 0).cat(shard_np(b, 0), dim=1).numpy(), np.concatenate([a, b], 1))

def test_cast_and_where():
  n = rng(4, 4)
  x = shard_np(n, 1)
  np.testing.assert_equal(x.cast(dtypes.int32).numpy(), n.astype(np.int32))
  np.testing.assert_equal((x > 0).where(x, 0).numpy(), np.where(n > 0, n, 0))

# ***** group 4: allreduce *****
@pytest.mark.parametrize("axis", [0, 1, None])
def test_allreduce_sum_over_shard_axis(axis):
  n = rng(8, 6)
  x = shard_np(n, 0 if axis is None else axis)
  s = x.sum(axis)
  np.testing.assert_allclose(s.numpy(), n.sum(axis), rtol=1e-5, atol=1e-5)
  # every device ends with the same bits (each adds the partial results in the same order)
  if axis != (1 if x.lazydata.axis == 0 else 0):
    s.realize()
    a, b = (Tensor(lb).numpy() for lb in s.lazydata.lbs)
    np.testing.assert_equal(a, b)

def test_naive_allreduce_copies():
  x = shard_np(rng(8, 6), 0).realize()
  items = x.sum(0).schedule()
  assert sum(si.kind == "copy" for si in items) == len(D) * (len(D) - 1)
  assert x.sum(1).schedule() and not any(si.kind == "copy" for si in x.sum(1).schedule())

def test_allreduce_three_cpus():
  devs = ("CPU:1", "CPU:2", "CPU:3")   # (three CPU devices also where D is two mock GPUs)
  n = rng(6, 5)
  x = Tensor(n).shard(devs, 0)
  np.testing.assert_allclose(x.sum(0).numpy(), n.sum(0), rtol=1e-5, atol=1e-6)
  assert sum(si.kind == "copy" for si in x.sum(0).schedule()) == 6
  np.testing.assert_allclose(x.max().numpy(), n.max())

def test_allreduce_int_and_half():
  n = np.arange(32, dtype=np.int32).reshape(8, 4)
  assert shard_np(n, 0).sum(0).tolist() == n.sum(0).tolist()
  h = rng(8, 4).astype(np.float16)
  np.testing.assert_allclose(shard_np(h, 0).sum(0).numpy().astype(np.float32), h.astype(np.float32).sum(0), rtol=1e-2, atol=1e-2)

# ***** group 5: math with sharded operands *****
@pytest.mark.parametrize("sx", [None, 0, 1])
@pytest.mark.parametrize("sw", [None, 0, 1])
def test_matmul_shard_combinations(sx, sw):
  X, W = rng(N, N), rng(N, N, seed=1)
  O = Tensor(X).shard(D, sx) @ Tensor(W).shard(D, sw)
  np.testing.assert_allclose(O.to(d0).numpy(), X @ W, atol=1e-5, rtol=1e-5)

@pytest.mark.parametrize("sx,sw", [(0, None), (1, None), (None, 0), (None, 1)])
def test_double_matmul(sx, sw):
  X, W1, W2 = rng(N, N), rng(N, N, seed=1), rng(N, N, seed=2)
  O = (Tensor(X).shard(D, sx) @ Tensor(W1).shard(D, sw)) @ Tensor(W2).shard(D, sw)
  np.testing.assert_allclose(O.numpy(), (X @ W1) @ W2, atol=1e-4, rtol=1e-5)

def _conv_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
  B, _, H, W_ = x.shape
  O, _, K, _ = w.shape
  out = np.zeros((B, O, H - K + 1, W_ - K + 1), np.float64)
  for i in range(K):
    for j in range(K): out += np.einsum("bchw,oc->bohw", x[:, :, i:i + H - K + 1, j:j + W_ - K + 1], w[:, :, i, j])
  return out + (0 if b is None else b.reshape(1, -1, 1, 1))

@pytest.mark.parametrize("bias", [False, True])
def test_conv_data_shard(bias):
  conv = nn.Conv2d(3, 4, 3, bias=bias)
  w, b = conv.weight.numpy(), conv.bias.numpy() if bias else None
  for p in nn.state.get_parameters(conv): p.shard_(D)
  img = rng(2, 3, 8, 8)
  out = conv(Tensor(img).shard(D, 0))
  assert out.device == D and out.lazydata.axis == 0
  np.testing.assert_allclose(out.numpy(), _conv_ref(img, w, b), atol=1e-4, rtol=1e-4)

def test_two_padded_convs_data_shard():
  # a padded conv of a computed (conv + relu) sharded input: the input is realized on its own first, per shard
  c1, c2 = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 2, 3, padding=1)
  img = rng(2, 3, 6, 6)
  want = c2(c1(Tensor(img)).relu()).numpy()
  for p in nn.state.get_parameters(c1) + nn.state.get_parameters(c2): p.shard_(D)
  np.testing.assert_allclose(c2(c1(Tensor(img).shard(D, 0)).relu()).numpy(), want, atol=1e-4, rtol=1e-4)

def test_backward_of_sum_and_conv():
  n = rng(4, 4)
  x = Tensor(n, requires_grad=True)
  xs = x.shard(D, 0)
  xs.requires_grad = True
  (xs * xs).sum().backward()
  assert xs.grad.device == D
  np.testing.assert_allclose(xs.grad.numpy(), 2 * n, rtol=1e-6)
  conv = nn.Conv2d(3, 4, 3)
  for p in nn.state.get_parameters(conv): p.shard_(D).requires_grad_()
  img = Tensor(rng(2, 3, 6, 6)).shard(D, 0)
  conv(img).mean().backward()
  ref = nn.Conv2d(3, 4, 3)
  ref.weight, ref.bias = Tensor(conv.weight.numpy(), requires_grad=True), Tensor(conv.bias.numpy(), requires_grad=True)
  ref(Tensor(rng(2, 3, 6, 6))).mean().backward()
  np.testing.assert_allclose(conv.weight.grad.numpy(), ref.weight.grad.numpy(), atol=1e-5, rtol=1e-4)
  np.testing.assert_allclose(conv.bias.grad.numpy(), ref.bias.grad.numpy(), atol=1e-6, rtol=1e-5)

def test_linear_and_sgd_step_on_replicated_weights():
  from frontend.optim import SGD
  X, W = rng(8, 4), rng(3, 4, seed=1)
  lin = nn.Linear(4, 3, bias=False)
  lin.weight = Tensor(W, requires_grad=True).shard(D)
  lin.weight.requires_grad = True
  opt = SGD([lin.weight], lr=0.1)
  opt.zero_grad()
  lin(Tensor(X).shard(D, 0)).sum().backward()
  opt.step()
  np.testing.assert_allclose(lin.weight.numpy(), W - 0.1 * np.ones((8, 3), np.float32).T @ X, rtol=1e-5, atol=1e-5)
  a, b = (Tensor(lb).numpy() for lb in lin.weight.lazydata.lbs)
  np.testing.assert_equal(a, b)

def test_embedding_sharded_weight():
  B, T, E, V = 2, 4, 6, 10
  emb = nn.Embedding(V, E)
  idx = np.random.default_rng(0).integers(0, V, (B, T))
  ref = emb(Tensor(idx)).numpy()
  emb.weight = Tensor(emb.weight.numpy()).shard(D, 1)
  got = emb(Tensor(idx).shard(D)).numpy()
  np.testing.assert_allclose(got, ref, atol=1e-6)

def test_rmsnorm_sharded_feature_axis():
  n = rng(2, 3, 8)
  def rms(x): return x * (x.square().mean(-1, keepdim=True) + 1e-6).rsqrt()
  want = rms(Tensor(n)).numpy()
  np.testing.assert_allclose(rms(shard_np(n, 2)).numpy(), want, atol=1e-6, rtol=1e-5)
  np.testing.assert_allclose(rms(shard_np(n, None)).numpy(), want, atol=1e-6, rtol=1e-5)

def test_batchnorm_over_sharded_batch():
  n = rng(4, 3, 2, 2)
  bn = nn.BatchNorm2d(3)
  ref = nn.BatchNorm2d(3)
  for p in nn.state.get_parameters(bn): p.shard_(D)
  with Tensor.train():
    got = bn(shard_np(n, 0)).numpy()
    want = ref(Tensor(n)).numpy()
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(bn.running_mean.numpy(), ref.running_mean.numpy(), atol=1e-6)

def test_two_distinct_devices():
  from hcqrt import syscalls
  a, b = Device[d0], Device[d1]
  assert a is not b and a.allocator is not b.allocator
  # two mock GPUs: one driver serves both, as one kernel driver serves a box (MOCKGPU_COUNT)
  fd = {"NV": "ctl", "AMD": "kfd"}.get(d0.split(":")[0])
  if fd is not None and syscalls.is_fake(getattr(a, fd)): assert syscalls.driver_of(getattr(a, fd)) is syscalls.driver_of(getattr(b, fd))

@pytest.mark.parametrize("ring", ["0", "2"])
def test_tinyjit_sharded_arguments_results_and_allreduce(ring, monkeypatch):
  # tinygrad's multi-tensor JIT tests: sharded arguments and results, a naive or ring allreduce inside, 5 calls; the
  # replays are one graph across the devices (hcqrt/multi_graph.py)
  from frontend import TinyJit
  from hcqrt.multi_graph import MultiGraph, PeerCopy
  monkeypatch.setenv("RING", ring)
  W = rng(4, 3, seed=9)
  w = Tensor(W).shard(D).realize()
  @TinyJit
  def f(a): return (a @ w).realize(), (a * 2).sum(0).realize()
  for i in range(5):
    n = rng(8, 4, seed=i)
    out, s = f(shard_np(n, 0).realize())
    assert out.device == D and out.lazydata.axis == 0 and s.device == D and s.lazydata.axis is None
    np.testing.assert_allclose(out.numpy(), n @ W, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(s.numpy(), (n * 2).sum(0), atol=1e-5, rtol=1e-5)
    a, b = (Tensor(lb).numpy() for lb in s.lazydata.lbs)
    np.testing.assert_array_equal(a, b)
  assert isinstance(f.graph, MultiGraph) and any(isinstance(it, PeerCopy) for it in f.graph.items)

def test_tinyjit_returns_its_sharded_argument_and_refuses_a_new_sharding():
  from frontend import TinyJit
  from frontend.jit import JitError
  @TinyJit
  def f(a, b): return a, (b + 1).realize()
  for i in range(4):
    x, y = shard_np(rng(4, 4, seed=i), 0).realize(), shard_np(rng(4, 4, seed=10 + i), 1).realize()
    ra, rb = f(x, y)
    assert all(r.base.buffer is o.base.buffer for r, o in zip(ra.lazydata.lbs, x.lazydata.lbs))   # this call's shards
    np.testing.assert_array_equal(rb.numpy(), rng(4, 4, seed=10 + i) + 1)
  with pytest.raises(JitError, match=r"argument 'b' is sharded over .* on axis 0, the capture had sharded over .* on axis 1"):
    f(x, shard_np(rng(4, 4), 0).realize())

def test_state_dict_of_sharded_model_round_trips(tmp_path):
  from frontend.nn.state import get_state_dict, load_state_dict, safe_save, safe_load
  lin = nn.Linear(4, 6)
  w, b = lin.weight.numpy(), lin.bias.numpy()
  lin.weight.shard_(D, 0).realize(); lin.bias.shard_(D).realize()
  safe_save(get_state_dict(lin), tmp_path / "lin.safetensors")
  new = nn.Linear(4, 6)
  new.weight.shard_(D, 0).realize(); new.bias.shard_(D).realize()
  load_state_dict(new, safe_load(tmp_path / "lin.safetensors"))
  assert new.weight.device == D and new.weight.lazydata.axis == 0
  np.testing.assert_equal(new.weight.numpy(), w)
  np.testing.assert_equal(new.bias.numpy(), b)
