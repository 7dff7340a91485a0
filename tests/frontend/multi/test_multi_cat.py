"""cat along the axis a sharded tensor is split on (frontend/multi_cat.py): pieces shrunk to one shard that sit on one
device join there; pieces that cover the shards in order make a sharded tensor; anything else is refused naming cat,
the shapes and the devices. Forward and gradients against numpy, eagerly and under TinyJit.

The devices come from the environment as in test_multi_device.py (`CPU:1,CPU:2`, or two mock GPUs under
`MOCKGPU=1 MOCKGPU_COUNT=2 NV=1`); the tests of three or four devices use CPU:1..CPU:4.
"""
import re
import numpy as np
import pytest
from frontend import Tensor, TinyJit, Device
from tests.frontend.multi.test_multi_device import D, d0, d1, rng

D4 = ("CPU:1", "CPU:2", "CPU:3", "CPU:4")

@pytest.fixture(autouse=True, scope="module")
def _two_devices():
  try: Device[d1]
  except Exception as e: pytest.skip(f"needs two devices ({d0}, {d1}): {e}")
  yield

def leaf(n: np.ndarray, devices=D, axis=0) -> Tensor:
  t = Tensor(n).shard(devices, axis).realize()
  t.requires_grad = True
  return t

def shard_values(t: Tensor) -> list[np.ndarray]: return [Tensor(lb).numpy() for lb in t.lazydata.lbs]

def test_pieces_on_one_device_join_there():
  """x[:4] and the pieces cut from it all live on the first device: their cat is a value there (the other device
  holds a placeholder), as torch.cat gives it. Was refused ("cat: shapes ... along dim 0, which is sharded")."""
  n = rng(8, 3)
  a = Tensor(n).shard(D, 0)[:4]
  y = a[:2].cat(a[2:4] * 2, a)
  assert y.device == D and y.lazydata.axis == 0 and y.lazydata.real == [True, False] and y.shape == (8, 3)
  np.testing.assert_array_equal(y.numpy(), np.concatenate([n[:2], n[2:4] * 2, n[:4]]))
  # a KV-cache append: the cache is the second shard, the new row is replicated (cut from the second device's copy)
  new = rng(1, 3, seed=1)
  kv = Tensor(n).shard(D, 0)[4:].cat(Tensor(new).shard(D))
  assert kv.lazydata.real == [False, True]
  np.testing.assert_array_equal(kv.numpy(), np.concatenate([n[4:], new]))
  # bit-exact for every dtype: -0.0 and NaN payloads survive, ints and bools too
  z = np.array([[-0.0, np.nan], [1.5, -2.0]], np.float32)
  got = Tensor(np.concatenate([z, z])).shard(D, 0)[:2]
  np.testing.assert_array_equal(np.signbit(got.cat(got[1:]).numpy()), np.signbit(np.concatenate([z, z[1:]])))
  for dt in (np.int32, np.bool_):
    m = (np.arange(8).reshape(4, 2) % 3).astype(dt)
    p = Tensor(m).shard(D, 0)[2:]
    np.testing.assert_array_equal(p.cat(p[:1]).numpy(), np.concatenate([m[2:], m[2:3]]))

def test_gradient_lands_on_the_shard_that_holds_the_piece():
  """Through a cat of one-device pieces the gradient of the sharded leaf comes back split as the leaf is, the second
  device's shard of it zero; a replicated piece's gradient stays where its value was used."""
  n, new, g = rng(8, 3), rng(2, 3, seed=1), rng(8, 3, seed=2)
  x, r = leaf(n), leaf(new, axis=None)
  p = x[4:]
  y = p[2:].cat(p[:2] * 3, r, p[:2])
  assert y.lazydata.real == [False, True]
  (y * Tensor(g).shard(D)).sum().backward()
  want = np.zeros((8, 3), np.float32)
  want[6:8] += g[0:2]; want[4:6] += 3 * g[2:4]; want[4:6] += g[6:8]
  assert x.grad.lazydata.axis == 0 and x.grad.lazydata.real == [True, True]
  np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6)
  np.testing.assert_array_equal(shard_values(x.grad)[0], np.zeros((4, 3), np.float32))
  assert r.grad.lazydata.axis is None and r.grad.lazydata.real == [True, True]
  for got in shard_values(r.grad): np.testing.assert_array_equal(got, g[4:6])

def test_pieces_covering_the_shards_in_order_stay_sharded():
  """Parts of the first shard and the second shard, in order, cover the shards exactly: the result is split as x,
  every device computing its own shard (no copy); and so is the gradient."""
  n, g = rng(8, 4), rng(8, 4, seed=2)
  x = leaf(n)
  a = x[:4]
  y = a[:2].cat(a[2:], x[4:])
  assert y.lazydata.real == [True, True] and y.lazydata.bounds == [(0, 4), (4, 8)]
  np.testing.assert_array_equal(y.numpy(), n)
  (y * Tensor(g).shard(D, 1)).sum().backward()
  assert x.grad.lazydata.axis == 0 and x.grad.lazydata.bounds == [(0, 4), (4, 8)]
  np.testing.assert_array_equal(x.grad.numpy(), g)

def test_piece_split_on_another_axis_is_gathered_as_an_elementwise_op_would():
  """A piece split on axis 1 beside a one-device piece is gathered whole to that device (MultiLazyBuffer.alu's rule);
  its gradient goes back split on axis 1, each shard to its device, as is a replicated piece's (to every device)."""
  n, m, g = rng(8, 4), rng(2, 4, seed=1), rng(6, 4, seed=2)
  x, w = leaf(n), leaf(m, axis=1)
  y = x[:4].cat(w)
  assert y.lazydata.real == [True, False]
  np.testing.assert_array_equal(y.numpy(), np.concatenate([n[:4], m]))
  (y * Tensor(g).shard(D)).sum().backward()
  assert w.grad.lazydata.axis == 1 and w.grad.lazydata.real == [True, True]
  np.testing.assert_array_equal(w.grad.numpy(), g[4:])
  np.testing.assert_array_equal(shard_values(w.grad)[1], g[4:, 2:])
  np.testing.assert_array_equal(x.grad.numpy(), np.concatenate([g[:4], np.zeros((4, 4), np.float32)]))

def test_what_no_layout_holds_is_refused_naming_cat():
  n = rng(8, 3)
  x = Tensor(n).shard(D, 0)
  where = rf"\(4, 3\) on {re.escape(d1)}, \(4, 3\) on {re.escape(d0)}"
  with pytest.raises(RuntimeError, match=rf"cat: shapes \[\(4, 3\), \(4, 3\)\] along dim 0, which is sharded over .*the pieces are {where}"):
    x[4:].cat(x[:4])   # the shards out of order: each device would need the other's
  with pytest.raises(RuntimeError, match=rf"cat: shapes \[\(4, 3\), \(8, 3\)\] .*the pieces are \(4, 3\) on {re.escape(d0)}, \(8, 3\) split over all"):
    x[:4].cat(x)
  with pytest.raises(RuntimeError, match=rf"cat: shapes \[\(4, 3\), \(2, 3\)\]: mixing a tensor sharded over .* with one on {re.escape(d0)}"):
    x[:4].cat(Tensor(n[:2], device=d0))
  with pytest.raises(RuntimeError, match=rf"cat: shapes \[\(2, 3\), \(4, 3\)\]: mixing a tensor sharded over .* with one on {re.escape(d0)}"):
    Tensor(n[:2], device=d0).cat(x[:4])

def test_one_device_cat_forward_and_backward_under_tinyjit():
  """The same cat of one-device pieces captured by TinyJit: every call (new data) matches numpy, and the gradient."""
  @TinyJit
  def f(x: Tensor, w: Tensor):
    a = x[:4]
    y = a[2:].cat(a[:2] * w, a)
    (y * y).sum().backward()
    return y.realize(), x.grad.realize()
  wn = rng(3, seed=9)
  w = Tensor(wn).shard(D).realize()
  for i in range(4):
    n = rng(8, 3, seed=i)
    y, gx = f(leaf(n), w)
    want_y = np.concatenate([n[2:4], n[:2] * wn, n[:4]])
    np.testing.assert_allclose(y.numpy(), want_y, rtol=1e-6)
    want = np.zeros((8, 3), np.float32)
    want[2:4] += 2 * want_y[0:2]; want[0:2] += 2 * want_y[2:4] * wn; want[0:4] += 2 * want_y[4:8]
    assert gx.lazydata.real == [True, True]
    np.testing.assert_allclose(gx.numpy(), want, rtol=1e-5)

def test_four_devices_one_device_and_covering_layouts():
  """On 4 devices: pieces on the third device join there; a one-element piece in place on the first device with a
  replicated piece spanning the other three shards stays split (the replicated one cut on each device)."""
  try: Device["CPU:4"]
  except Exception as e: pytest.skip(f"needs CPU:1..CPU:4: {e}")
  n, g = rng(8, 2), rng(6, 2, seed=1)
  x = leaf(n, D4)
  p = x[4:6]
  y = p[1:].cat(p, p[:1])
  assert y.lazydata.real == [False, False, True, False]
  (y * Tensor(np.concatenate([g[:4]])).shard(D4)).sum().backward()
  np.testing.assert_array_equal(y.numpy(), np.concatenate([n[5:6], n[4:6], n[4:5]]))
  want = np.zeros((8, 2), np.float32)
  want[5] += g[0]; want[4:6] += g[1:3]; want[4] += g[3]
  np.testing.assert_array_equal(x.grad.numpy(), want)
  x2, r = leaf(n[:4], D4), leaf(g[:3], D4, None)
  z = x2[:1].cat(r)
  assert z.lazydata.real == [True] * 4 and z.lazydata.bounds == [(0, 1), (1, 2), (2, 3), (3, 4)]
  np.testing.assert_array_equal(z.numpy(), np.concatenate([n[:1], g[:3]]))
  (z * Tensor(n[4:8]).shard(D4, 0)).sum().backward()
  np.testing.assert_array_equal(r.grad.numpy(), n[5:8])
  assert r.grad.lazydata.axis is None and all(r.grad.lazydata.real)
  np.testing.assert_array_equal(x2.grad.numpy(), np.concatenate([n[4:5], np.zeros((3, 2), np.float32)]))

def test_differentiable_gradient_through_a_one_device_cat():
  """Tensor.gradient (create_graph) through the cat: y = [x, 2x] of x's first shard, d/dx sum(y^3) = 27 x^2 there and
  zero on the other shard; the gradient of that is 54 x."""
  n = rng(8, seed=3)
  x = leaf(n)
  y = x[:4].cat(x[:4] * 2)
  (dx,) = (y * y * y).sum().gradient(x)
  want = np.concatenate([27 * n[:4] ** 2, np.zeros(4, np.float32)])
  np.testing.assert_allclose(dx.numpy(), want, rtol=1e-5)
  (ddx,) = dx.sum().gradient(x)
  np.testing.assert_allclose(ddx.numpy(), np.concatenate([54 * n[:4], np.zeros(4, np.float32)]), rtol=1e-5)
