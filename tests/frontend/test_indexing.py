"""x[idx] and x[idx] = v checked against numpy: ints, slices (negative steps, out-of-range bounds), None, Ellipsis,
integer lists / arrays / Tensors (negative entries, broadcasting, mixed with slices), bool masks, views as inputs.
An int next to a list index collapses its dim first, as in torch and tinygrad (numpy would broadcast it with the list)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from frontend import Tensor, dtypes

rng = np.random.default_rng(7)
X = rng.standard_normal((4, 5, 6)).astype(np.float32)
XI = rng.integers(-50, 50, (4, 5, 6)).astype(np.int32)

def same(t: Tensor, exp: np.ndarray):
  got = t.numpy()
  assert t.shape == exp.shape, f"shape {t.shape} != numpy {exp.shape}"
  assert got.dtype == exp.dtype, f"dtype {got.dtype} != numpy {exp.dtype}"
  np.testing.assert_array_equal(got, exp)

BASIC = [
  0, -1, 3, (1, 2), (-1, -2, -3), slice(None), slice(1, 3), slice(None, None, -1), slice(3, 0, -1), slice(None, None, 2),
  slice(-2, None), slice(10, 20), slice(-10, 2), slice(None, None, -3), (slice(1, None), 2), (2, slice(None, None, -2)),
  (slice(None), slice(None), slice(1, 5, 2)), (slice(None), slice(4, None, -2), 0), None, (None, 1), (1, None, 2),
  Ellipsis, (Ellipsis, 0), (0, Ellipsis), (Ellipsis, None), (1, Ellipsis, slice(None, None, -1)), (None, Ellipsis, None, 2),
  (slice(2, 2),), (slice(3, 1),), (slice(None), 1, None, slice(2, 4)), (),
]

@pytest.mark.parametrize("idx", BASIC, ids=[repr(i) for i in BASIC])
def test_basic(idx):
  same(Tensor(X)[idx], X[idx])

@pytest.mark.parametrize("idx", [(1, slice(None, None, -1)), (slice(None, None, -2), None, 3), (Ellipsis, slice(4, 0, -3))])
def test_basic_on_views_and_ints(idx):
  v = X.transpose(2, 0, 1)
  same(Tensor(X).permute(2, 0, 1)[idx], v[idx])
  same(Tensor(XI)[idx], XI[idx])
  same(Tensor(X).flip(0)[idx], np.flip(X, 0)[idx])
  same((Tensor(X)[1:, ::2] * 2)[idx[:2] if isinstance(idx, tuple) else idx], (X[1:, ::2] * 2)[idx[:2] if isinstance(idx, tuple) else idx])

def test_index_0d_and_empty():
  t = Tensor(2.5)
  same(t[None], np.float32(2.5)[None])
  same(t[...], np.array(2.5, np.float32))
  e = np.zeros((0, 3), np.float32)
  same(Tensor(e)[:, 1], e[:, 1])
  same(Tensor(e)[::-1], e[::-1])
  with pytest.raises(IndexError): t[0]

def test_chained_indexing():
  same(Tensor(X)[1:][::-1][0, 2:], X[1:][::-1][0, 2:])
  same(Tensor(X)[..., ::-2][1][None, 3], X[..., ::-2][1][None, 3])

@pytest.mark.parametrize("idx", [5, -5, (0, 5), (0, 0, 6), (0, 0, -7), (Ellipsis, 10)])
def test_int_out_of_range(idx):
  with pytest.raises(IndexError, match=r"out of bounds|out of range") as e: Tensor(X)[idx]
  assert "(4, 5, 6)" in str(e.value) or "size" in str(e.value)

def test_bad_indices():
  with pytest.raises(IndexError, match="too many"): Tensor(X)[0, 0, 0, 0]
  with pytest.raises(IndexError, match="ellipsis"): Tensor(X)[..., 0, ...]
  with pytest.raises(IndexError): Tensor(X)[1.5]
  with pytest.raises(IndexError): Tensor(X)[[0, 9]]
  with pytest.raises(IndexError): Tensor(X)[:, Tensor([0.5])]
  with pytest.raises(ValueError): Tensor(X)[::0]
  with pytest.raises(IndexError, match=r"\(2,\).*\(3,\)"): Tensor(X)[[0, 1], [0, 1, 2]]

# ***** advanced (integer array) indexing *****
ADV = [
  [0, 2, -1], [[0, 1], [3, -4]], ([0, 1], [2, 3]), ([0, 1], slice(None), [2, -1]), (slice(None), [0, 4, 4]),
  (slice(1, 3), [[0], [4]], [1, 2, 5]), (1, [0, 3]), ([1, 2], 3), (Ellipsis, [5, 0]), (None, [1, 0], None),
  ([[1]], slice(None, None, -1), 0), (slice(None), [0, 2], slice(None, None, -2)), ([-1, 0], [-1, 0], [-1, 0]),
  ([2], Ellipsis, [1, 2]), (np.array([3, 0]),), ([], slice(None)), (slice(2, 4), None, [3, 1]), ([0, 1], None, [1, 2]),
]
@pytest.mark.parametrize("idx", ADV, ids=[repr(i) for i in ADV])
def test_advanced_lists(idx):
  same(Tensor(X)[idx], X[idx if not isinstance(idx, list) else np.array(idx, dtype=np.int64)])

@pytest.mark.parametrize("idx", ADV[:12], ids=[repr(i) for i in ADV[:12]])
def test_advanced_tensors(idx):
  # the same indices as int32 Tensors (device-side gather)
  conv = tuple(Tensor(np.array(i, np.int32)) if isinstance(i, list) else i for i in (idx if isinstance(idx, tuple) else (idx,)))
  same(Tensor(X)[conv], X[idx if not isinstance(idx, list) else np.array(idx)])
  same(Tensor(XI)[conv], XI[idx if not isinstance(idx, list) else np.array(idx)])

def test_advanced_on_views_and_dtypes():
  same(Tensor(X).permute(1, 2, 0)[[0, -1], 2], X.transpose(1, 2, 0)[[0, -1], 2])
  same(Tensor(X)[::-1, 1:][Tensor([2, 0]), :, Tensor([[1], [3]])], X[::-1, 1:][np.array([2, 0]), :, np.array([[1], [3]])])
  same(Tensor(X).pad(((1, 1), (0, 0), (0, 0)))[[0, 5, 2]], np.pad(X, ((1, 1), (0, 0), (0, 0)))[[0, 5, 2]])
  b = rng.random((4, 5)) < 0.5
  same(Tensor(b)[[1, 3], [-1, 0]], b[[1, 3], [-1, 0]])
  h = X.astype(np.float16)
  same(Tensor(h)[[1, 2], :, 3], h[[1, 2], :, 3])
  xi64 = XI.astype(np.int64)
  same(Tensor(xi64)[Tensor([0, -2]), 1], xi64[[0, -2], 1])
  same(Tensor(X)[Tensor(np.array([1, 3], np.int64))], X[[1, 3]])
  # negative indices inside an index tensor wrap per dimension
  same(Tensor(X)[Tensor([[-1, -4], [0, 3]])], X[np.array([[-1, -4], [0, 3]])])

def test_advanced_index_computed_on_device():
  idx = (Tensor([3, 1, 2]) * 2 - 1) // 2      # [2, 0, 1] computed lazily
  same(Tensor(X)[idx], X[[2, 0, 1]])
  same(Tensor(X)[:, idx], X[:, [2, 0, 1]])

def test_bool_mask_index():
  m = rng.random((4, 5)) < 0.5
  same(Tensor(X)[m], X[m])
  same(Tensor(X)[Tensor(m)], X[m])
  same(Tensor(X)[:, m[0]], X[:, m[0]])
  same(Tensor(X)[True], X[True])
  same(Tensor(X)[False], X[False])

def test_index_gradient():
  x = Tensor(X, requires_grad=True)
  x[[0, 2, 2], 1:3].sum().backward()
  exp = np.zeros_like(X)
  np.add.at(exp, (np.array([0, 2, 2]), slice(1, 3)), 1)
  np.testing.assert_array_equal(x.grad.numpy(), exp)

# ***** setitem *****
SET = [
  (1, 0.5), ((0, 2), -1.0), (slice(1, 3), 7.0), ((slice(None), slice(None, None, -2)), 3.0), ((Ellipsis, 0), 2.0),
  ((1, 2, 3), 9.0), (([0, 3], [1, 2]), 4.0), ((slice(None), [0, 4]), 5.0), ((-1,), -3.0), ((None, 0), 1.0), (([1, -1],), 0.0),
]
@pytest.mark.parametrize("idx,v", SET, ids=[repr(i) for i, _ in SET])
def test_setitem_scalar(idx, v):
  t, exp = Tensor(X.copy()).realize(), X.copy()
  t[idx] = v
  exp[idx] = v
  same(t, exp)

def test_setitem_tensor_values_and_broadcast():
  t, exp = Tensor(X.copy()).realize(), X.copy()
  vals = rng.standard_normal((5, 6)).astype(np.float32)
  t[2] = Tensor(vals)
  exp[2] = vals
  same(t, exp)
  row = rng.standard_normal(6).astype(np.float32)
  t[:, 1:3] = Tensor(row)               # broadcast (6,) into (4, 2, 6)
  exp[:, 1:3] = row
  same(t, exp)
  t[[0, 1], 0] = Tensor(row)            # advanced: (2, 6) target
  exp[[0, 1], 0] = row
  same(t, exp)
  t[1:3, 0, ::-1] = rng.standard_normal((2, 6)).astype(np.float32)
  exp[1:3, 0, ::-1] = t[1:3, 0, ::-1].numpy()
  same(t, exp)
  t[0, 0] = [1.0, 2, 3, 4, 5, 6]        # a list
  exp[0, 0] = [1.0, 2, 3, 4, 5, 6]
  same(t, exp)

def test_setitem_dtypes():
  ti, ei = Tensor(XI.copy()).realize(), XI.copy()
  ti[1:3, [0, 2]] = 7
  ei[1:3, [0, 2]] = 7
  same(ti, ei)
  ti[0] = Tensor(np.full((5, 6), -9, np.int32))
  ei[0] = -9
  same(ti, ei)
  tb, eb = Tensor(np.zeros((3, 4), np.bool_)).realize(), np.zeros((3, 4), np.bool_)
  tb[1, ::2] = True
  eb[1, ::2] = True
  same(tb, eb)
  tf = Tensor(np.zeros(4, np.float32)).realize()
  tf[1] = 3                             # an int value is cast to the tensor's dtype
  assert tf.dtype == dtypes.float32 and tf.tolist() == [0.0, 3.0, 0.0, 0.0]

def test_setitem_repeated_index_last_wins():
  t, exp = Tensor(np.zeros(5, np.float32)).realize(), np.zeros(5, np.float32)
  t[[1, 3, 1]] = Tensor([1.0, 2.0, 3.0])
  exp[[1, 3, 1]] = [1.0, 2.0, 3.0]
  same(t, exp)

def test_setitem_keeps_storage_and_views_see_it():
  t = Tensor(X.copy()).realize()
  buf = t.lazydata.base.buffer
  t[0, 0, 0] = 100.0
  assert t.lazydata.base.buffer is buf, "setitem must write into the existing storage"
  assert t[0, 0].numpy()[0] == 100.0 and t.sum().item() == pytest.approx(float(X.sum() - X[0, 0, 0] + 100), rel=1e-5)

def test_setitem_value_reads_the_target():
  # the right-hand side is computed from the old contents before anything is written (numpy semantics)
  x = np.arange(10, dtype=np.float32)
  t = Tensor(x.copy()).realize()
  t[1:] = t[:-1]
  x[1:] = x[:-1].copy()
  same(t, x)
  t[0] = t[5] * 2
  x[0] = x[5] * 2
  same(t, x)
  t[::-1] = t
  x[::-1] = x.copy()
  same(t, x)
  t += 1
  x += 1
  same(t, x)
  ti = Tensor(np.arange(6, dtype=np.int32).reshape(2, 3)).realize()
  ti *= 2
  ti[1] -= 1
  same(ti, np.array([[0, 2, 4], [5, 7, 9]], np.int32))

def test_setitem_errors():
  t = Tensor(X.copy()).realize()
  with pytest.raises(ValueError, match=r"setitem.*\(3,\).*\(5, 6\)|setitem.*\(5, 6\).*\(3,\)"): t[0] = Tensor([1.0, 2, 3])
  with pytest.raises(IndexError): t[9] = 1.0
  with pytest.raises(IndexError): t[0, 0, 0, 0] = 1.0
  np.testing.assert_array_equal(t.numpy(), X)    # nothing half-written by the failed assignments

def test_setitem_on_unrealized_tensor():
  # x[idx] = v on a lazy (never realized) tensor realizes it first, as tinygrad does for contiguous tensors
  t = Tensor(X) * 1
  try: t[0] = 0.0
  except RuntimeError as e:
    assert "setitem" in str(e)
    return
  exp = X.copy()
  exp[0] = 0
  same(t, exp)

# ***** hypothesis: random slices on random shapes *****
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hypothesis_slices(data):
  shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
  x = rng.standard_normal(shape).astype(np.float32)
  idx, n = [], data.draw(st.integers(1, 3))    # index lists have length n or 1 so they broadcast
  for s in shape:
    kind = data.draw(st.sampled_from(["int", "slice", "list"]))
    if kind == "int": idx.append(data.draw(st.integers(-s, s - 1)))
    elif kind == "list": idx.append(data.draw(st.lists(st.integers(-s, s - 1), min_size=n, max_size=n) | st.lists(st.integers(-s, s - 1), min_size=1, max_size=1)))
    else: idx.append(slice(data.draw(st.none() | st.integers(-s - 2, s + 2)), data.draw(st.none() | st.integers(-s - 2, s + 2)),
                           data.draw(st.sampled_from([None, 1, 2, -1, -2, 3]))))
  idx = tuple(idx)
  # torch/tinygrad rule: int indices remove their dims first and never join the list indices (numpy's rule differs
  # when an int and a list are separated by a slice), so the oracle applies the ints, then the rest
  ints_first = x[tuple(i if isinstance(i, int) else slice(None) for i in idx)]
  same(Tensor(x)[idx], ints_first[tuple(i for i in idx if not isinstance(i, int))])

@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64])
def test_setitem_moves_the_bits(dt):
  """x[1:3] = v keeps v's -0.0 and a signaling NaN's bits (the one-hot pick was a float sum with zeros: +0.0)"""
  ut = {2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(dt).itemsize]
  v = np.array([-0.0, 0.0], dt)
  v[1:] = np.array([{2: 0x7C01, 4: 0x7F800001, 8: 0x7FF0000000000001}[np.dtype(dt).itemsize]], ut).view(dt)
  x = Tensor(np.ones(4, dt)).contiguous().realize()
  x[1:3] = Tensor(v)
  x[3] = -0.0
  want = np.ones(4, dt); want[1:3] = v; want[3] = -0.0
  assert (x.numpy().view(ut) == want.view(ut)).all(), (x.numpy().view(ut), want.view(ut))
