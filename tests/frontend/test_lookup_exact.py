"""Lookups move the selected value's bits and nothing else: Embedding, gather, x[tensor], scatter, scatter_reduce and
setitem select with a WHERE and sum the selection as unsigned ints (frontend/function.py Pick). The one-hot product
they used spread an unused row's NaN/inf to every token (0 * NaN = NaN) and a float sum of zeros made -0.0 +0.0.
Forward bit-exact against numpy, gradients against torch (the test oracle only)."""
import json
import pathlib
import subprocess
import sys
import numpy as np
import pytest
import torch
from frontend import Tensor, TinyJit, nn
from tests.child_env import device_env

ROOT = pathlib.Path(__file__).resolve().parents[2]
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}
# quiet NaN with a payload, a negative NaN, a signaling NaN (quiet bit clear): their bits, per float size
NANS = {2: (0x7E12, 0xFE01, 0x7C01), 4: (0x7FC01234, 0xFFC00001, 0x7F800001), 8: (0x7FF8000000001234, 0xFFF8000000000001, 0x7FF0000000000001)}

def bits(a: np.ndarray) -> np.ndarray: return np.ascontiguousarray(a).view(UINT[a.itemsize])

def table(dt, rows: int = 6, cols: int = 4) -> np.ndarray:
  """rows x cols of dt: row 1 NaNs, row 3 +-inf and -0.0, the other rows ordinary values and -0.0."""
  w = (np.arange(rows * cols).reshape(rows, cols) - 7.5).astype(dt)
  w[0, 0] = w[4, 3] = -0.0
  w[1] = np.array([NANS[w.itemsize][i % 3] for i in range(cols)], UINT[w.itemsize]).view(dt)
  w[3, 0], w[3, 1], w[3, 2] = np.inf, -np.inf, -0.0
  return w

def assert_bits(out: np.ndarray, want: np.ndarray):
  assert out.dtype == want.dtype and out.shape == want.shape, (out.dtype, out.shape, want.dtype, want.shape)
  assert (bits(out) == bits(want)).all(), (out, want)

@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64])
def test_embedding_unused_nan_inf_rows_do_not_spread(dt):
  w = table(dt)
  emb = nn.Embedding(6, 4)
  emb.weight = Tensor(w)
  idx = np.array([[0, 2], [4, 0], [5, 2]], np.int32)   # rows 1 (NaN) and 3 (inf) unused
  assert_bits(emb(Tensor(idx)).numpy(), w[idx])

@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64])
def test_embedding_selected_specials_bit_exact(dt):
  w = table(dt)
  emb = nn.Embedding(6, 4)
  emb.weight = Tensor(w)
  idx = np.array([1, 3, 0, 1, 4], np.int32)
  out = emb(Tensor(idx)).numpy()
  assert_bits(out, w[idx])
  assert np.signbit(out[2, 0]) and np.signbit(out[1, 2]) and np.signbit(out[4, 3])

def test_embedding_int_weights_exact():
  """(a guard: an int table was exact before too) the extremes of int32 come through"""
  w = np.array([[np.iinfo(np.int32).min, -1], [0, np.iinfo(np.int32).max], [7, -7]], np.int32)
  emb = nn.Embedding(3, 2)
  emb.weight = Tensor(w)
  idx = np.array([[2, 0], [1, 1]], np.int32)
  np.testing.assert_array_equal(emb(Tensor(idx)).numpy(), w[idx])

@pytest.mark.parametrize("dt", [np.float16, np.float32])
def test_gather_bit_exact(dt):
  w = table(dt)
  for dim, idx in ((0, np.array([[0, 0, 3, 4], [2, 4, 3, 0]])), (1, np.array([[0, 2], [1, 0], [3, 3], [2, 2], [0, 3], [1, 3]]))):
    out = Tensor(w).gather(dim, Tensor(idx.astype(np.int32))).numpy()
    assert_bits(out, np.take_along_axis(w, idx, dim))

def test_gather_ints_and_bools_exact():
  """(a guard: exact before too)"""
  x = np.array([[np.iinfo(np.int64).min, 3], [np.iinfo(np.int64).max, -1]], np.int64)
  idx = np.array([[1, 0], [0, 0]], np.int32)
  np.testing.assert_array_equal(Tensor(x).gather(1, Tensor(idx)).numpy(), np.take_along_axis(x, idx, 1))
  b = np.array([[True, False], [False, True]])
  np.testing.assert_array_equal(Tensor(b).gather(0, Tensor(idx)).numpy(), np.take_along_axis(b, idx, 0))

@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64])
def test_tensor_index_bit_exact(dt):
  w = table(dt)
  i, j = np.array([3, 0, 4, 3], np.int32), np.array([2, 0, 3, 2], np.int32)
  x = Tensor(w)
  assert_bits(x[Tensor(np.array([0, 2, 4], np.int32))].numpy(), w[[0, 2, 4]])   # unused NaN/inf rows
  assert_bits(x[Tensor(i), Tensor(j)].numpy(), w[i, j])                        # -0.0 and inf picked by two indices
  assert_bits(x[:, Tensor(np.array([0, 2], np.int32))].numpy(), w[:, [0, 2]])   # NaN picked in their columns
  assert_bits(x[Tensor(np.array([-3, 1], np.int32))].numpy(), w[[-3, 1]])

def test_scatter_bit_exact():
  w = table(np.float32)
  src = table(np.float32)[::-1].copy()   # NaNs in row 4, inf and -0.0 in row 2
  idx = np.array([[1, 3, 0, 0], [5, 2, 0, 1], [0, 0, 0, 5]], np.int32)   # (0, 2) and (0, 1) repeat: the last wins
  out = Tensor(w).scatter(0, Tensor(idx), Tensor(src)).numpy()
  want = w.copy()
  for a in range(idx.shape[0]):
    for b in range(idx.shape[1]): want[idx[a, b], b] = src[a, b]
  assert_bits(out, want)

def test_scatter_reduce_keeps_unhit_positions_and_picks_exactly():
  """positions no index hits keep self's bits (-0.0, NaN payloads); a single src that hits comes through
  (sum with include_self: self + src, as torch; -0.0 + -0.0 + -0.0 is -0.0)"""
  w = table(np.float32)
  src = np.array([[-0.0, 2.0, np.inf, -0.0]], np.float32)
  idx = np.array([[0, 2, 5, 0]], np.int32)
  for red, include_self in [(r, i) for i in (True, False) for r in ("sum", "amax", "amin", "mean", "prod")]:
    out = Tensor(w).scatter_reduce(0, Tensor(idx), Tensor(src), red, include_self=include_self).numpy()
    want = torch.tensor(w).scatter_reduce(0, torch.tensor(idx, dtype=torch.int64), torch.tensor(src), red, include_self=include_self).numpy()
    untouched = np.ones(w.shape, bool)
    untouched[idx[0], np.arange(4)] = False
    want[untouched] = w[untouched]   # (torch's mean divides them by 1 too, which quiets a signaling NaN)
    assert_bits(out, want)

def test_scatter_reduce_grad_of_a_negative_zero_src_equals_torch():
  """sum/mean with include_self: a position whose every hit is -0.0 keeps self's bits, but its src still gets the
  gradient (torch: d(self + src)/dsrc = 1); selecting self there once cut it to 0"""
  w, src, idx = np.array([-0.0, 2.0, 3.0], np.float32), np.array([-0.0, 5.0, -0.0], np.float32), np.array([0, 1, 0])
  gw = np.array([1.0, 2.0, 3.0], np.float32)
  for red in ("sum", "mean"):
    a, b = Tensor(w, requires_grad=True), Tensor(src, requires_grad=True)
    out = a.scatter_reduce(0, Tensor(idx.astype(np.int32)), b, red)
    (out * Tensor(gw)).sum().backward()
    ta, tb = torch.tensor(w, requires_grad=True), torch.tensor(src, requires_grad=True)
    tout = ta.scatter_reduce(0, torch.tensor(idx), tb, red)
    (tout * torch.tensor(gw)).sum().backward()
    assert_bits(out.numpy(), tout.detach().numpy())
    np.testing.assert_array_equal(b.grad.numpy(), tb.grad.numpy(), err_msg=red)
    np.testing.assert_array_equal(a.grad.numpy(), ta.grad.numpy(), err_msg=red)

def test_scatter_reduce_src_outside_the_index_is_unused():
  """(a guard: right before too) src is larger than the index: its NaN/inf past the index's shape never reach the
  result"""
  w = np.zeros((3, 2), np.float32)
  src = np.array([[1.0, -0.0], [np.nan, np.inf]], np.float32)
  idx = np.array([[2, 0]], np.int32)
  for red in ("sum", "amax", "amin", "mean", "prod"):
    out = Tensor(w).scatter_reduce(0, Tensor(idx), Tensor(src), red, include_self=False).numpy()
    want = torch.tensor(w).scatter_reduce(0, torch.tensor(idx, dtype=torch.int64), torch.tensor(src), red, include_self=False).numpy()
    assert_bits(out, want)

def test_setitem_bit_exact():
  """(a guard: setitem picked the bits before too) -0.0 and a NaN payload written, NaN/inf elsewhere untouched"""
  w = table(np.float32)
  t = Tensor(w.copy()).realize()
  v = np.array([-0.0, np.array(NANS[4][0], np.uint32).view(np.float32)], np.float32)
  t[Tensor(np.array([2, 4], np.int32)), 1] = Tensor(v)
  want = w.copy()
  want[[2, 4], 1] = v
  assert_bits(t.numpy(), want)

def embedding_weight_grads(w: np.ndarray, idx: np.ndarray, gout: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(ours, torch's) gradient of an Embedding's weight `w` looked up at `idx`, given the output gradient `gout`."""
  emb = nn.Embedding(*w.shape)
  emb.weight = Tensor(w, requires_grad=True)
  (emb(Tensor(idx)) * Tensor(gout)).sum().backward()
  tw = torch.tensor(w, requires_grad=True)
  (torch.nn.functional.embedding(torch.tensor(idx, dtype=torch.int64), tw) * torch.tensor(gout)).sum().backward()
  return emb.weight.grad.numpy(), tw.grad.numpy()

def test_embedding_grad_nan_of_one_token_stays_in_its_row():
  """a NaN/inf output gradient of token t reaches only the row t looked up (a one-hot product put it in every row);
  unused NaN/inf rows of the weight change nothing"""
  w = table(np.float32)
  idx = np.array([[0, 2], [4, 2]], np.int32)
  gout = np.ones((2, 2, 4), np.float32)
  gout[0, 0, 1], gout[1, 0, 2] = np.nan, np.inf
  got, want = embedding_weight_grads(w, idx, gout)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])
  assert np.isnan(got).sum() == 1 and np.isinf(got).sum() == 1

@pytest.mark.parametrize("n", [6, 4100])   # (4100 tokens: the infinities counted in two columns, frontend/function.py Lookup)
def test_embedding_grad_infinities_of_many_tokens(n):
  """rows that get +inf and -inf (NaN), several +inf (inf), -inf, a NaN, or only finite gradients, as torch sums them"""
  rng = np.random.default_rng(0)
  idx = rng.integers(0, 4, n).astype(np.int32)
  idx[:6] = [0, 0, 1, 1, 2, 3]
  gout = rng.standard_normal((n, 4)).astype(np.float32)
  gout[:6, 0] = [np.inf, -np.inf, np.inf, np.inf, np.nan, -np.inf]
  w = table(np.float32, 5, 4)
  got, want = embedding_weight_grads(w, idx, gout)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  np.testing.assert_allclose(got[~np.isnan(got)], want[~np.isnan(want)], rtol=1e-5, atol=1e-4)
  assert np.isnan(got[0, 0]) and got[1, 0] == np.inf and np.isnan(got[2, 0]) and got[3, 0] == -np.inf and got[4].tolist() == [0, 0, 0, 0]

def test_gather_and_index_grads_match_torch():
  """(a guard: their gradients were selects before too) a NaN output gradient reaches only the element it came from"""
  w = table(np.float32)
  idx = np.array([[0, 2, 0, 3], [4, 0, 5, 3]], np.int32)
  gout = np.ones((2, 4), np.float32)
  gout[1, 1] = np.nan
  x = Tensor(w, requires_grad=True)
  (x.gather(0, Tensor(idx)) * Tensor(gout)).sum().backward()
  tx = torch.tensor(w, requires_grad=True)
  (tx.gather(0, torch.tensor(idx, dtype=torch.int64)) * torch.tensor(gout)).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())   # (array_equal: NaNs at the same places)
  x = Tensor(w, requires_grad=True)
  i, gi = np.array([0, 2, 2], np.int32), np.ones((3, 4), np.float32)
  gi[1, 0] = np.nan
  (x[Tensor(i)] * Tensor(gi)).sum().backward()
  tx = torch.tensor(w, requires_grad=True)
  (tx[torch.tensor(i, dtype=torch.int64)] * torch.tensor(gi)).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())

def test_embedding_half_grad_matches_torch():
  w = table(np.float16)
  idx = np.array([2, 0, 2], np.int32)
  gout = np.ones((3, 4), np.float16)
  gout[1, 3] = np.inf
  emb = nn.Embedding(6, 4)
  emb.weight = Tensor(w, requires_grad=True)
  (emb(Tensor(idx)) * Tensor(gout)).sum().backward()
  tw = torch.tensor(w.astype(np.float32), requires_grad=True)
  (torch.nn.functional.embedding(torch.tensor(idx, dtype=torch.int64), tw) * torch.tensor(gout.astype(np.float32))).sum().backward()
  np.testing.assert_array_equal(emb.weight.grad.numpy().astype(np.float32), tw.grad.numpy())

def test_embedding_under_jit_replay():
  calls = []
  emb = nn.Embedding(6, 4)
  @TinyJit
  def f(w: Tensor, idx: Tensor) -> Tensor:
    calls.append(1)
    emb.weight = w
    return emb(idx).realize()
  for k in range(4):
    w = table(np.float32)
    if k % 2 == 0: w = (bits(w) ^ np.uint32(0x80000000)).view(np.float32)   # every sign flipped: -0.0 and +0.0 trade places
    idx = np.array([[k % 6, 3], [4, (k + 2) % 6]], np.int32)
    assert_bits(f(Tensor(w).realize(), Tensor(idx).realize()).numpy(), w[idx])
  assert len(calls) == 2   # calls 3 and 4 were replays

MOCK_SCRIPT = r"""
import json, sys
import numpy as np
from frontend import Tensor, Device, nn
w = np.array(json.loads(sys.argv[1]), np.uint32).view(np.float32)
emb = nn.Embedding(*w.shape)
emb.weight = Tensor(w)
x = Tensor(w)
idx = Tensor(np.array([[0, 2], [4, 3]], np.int32))
g = np.array([[0, 1, 3, 3], [4, 1, 2, 0]], np.int32)
out = {"device": Device.DEFAULT, "emb": emb(idx).numpy(), "index": x[Tensor(np.array([3, 0, 4], np.int32))].numpy(),
       "gather": x.gather(0, Tensor(g)).numpy()}
print(json.dumps({k: v if isinstance(v, str) else v.view(np.uint32).tolist() for k, v in out.items()}))
"""

@pytest.mark.parametrize("dev", ["NV", "AMD"])
def test_lookups_bit_exact_on_the_gpu_mocks(dev):
  """the generated PTX / gfx1100 code moves the bits too (the mocks run it: PTX interpreter, RDNA3 emulator)"""
  if dev == "AMD":
    from tests.rdna3_kernels import have_llvmlite
    if not have_llvmlite(): pytest.skip("llvmlite (pip install 'hcqrt[amd]') is not installed")
  w = table(np.float32)
  r = subprocess.run([sys.executable, "-c", MOCK_SCRIPT, json.dumps(bits(w).tolist())], env=device_env(ROOT, dev, MOCKGPU="1"),
                     cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  out = json.loads(r.stdout.strip().splitlines()[-1])
  assert out["device"] == dev
  g = np.array([[0, 1, 3, 3], [4, 1, 2, 0]])
  assert out["emb"] == bits(w[np.array([[0, 2], [4, 3]])]).tolist()
  assert out["index"] == bits(w[[3, 0, 4]]).tolist()
  assert out["gather"] == bits(np.take_along_axis(w, g, 0)).tolist()

def test_tensor_gradient_and_second_order_through_lookups_equal_torch():
  """Tensor.gradient (create_graph) through Embedding, gather and x[idx], first and second order, against torch: the
  lookups' backward rules must also run as differentiable graphs (an Embedding here once raised AttributeError)."""
  rng = np.random.default_rng(3)
  w0, idx = rng.standard_normal((5, 3)).astype(np.float32), np.array([[0, 2, 2, 4]])
  def ours(f):
    w = Tensor(w0, requires_grad=True)
    (g,) = (f(w) ** 3).sum().gradient(w)
    (g2,) = (g * g).sum().gradient(w)
    return g.numpy(), g2.numpy()
  def theirs(f):
    w = torch.tensor(w0, requires_grad=True)
    (g,) = torch.autograd.grad((f(w) ** 3).sum(), w, create_graph=True)
    (g2,) = torch.autograd.grad((g * g).sum(), w)
    return g.detach().numpy(), g2.numpy()
  def emb(w):
    if isinstance(w, Tensor):
      e = nn.Embedding(5, 3); e.weight = w
      return e(Tensor(idx.astype(np.int32)))
    return torch.nn.functional.embedding(torch.tensor(idx), w)
  gi = np.array([[0, 1, 2], [4, 4, 0]])
  cases = {"Embedding": emb,
           "gather": lambda w: w.gather(0, Tensor(gi.astype(np.int32)) if isinstance(w, Tensor) else torch.tensor(gi)),
           "x[idx]": lambda w: w[Tensor(np.array([3, 1, 3], np.int32))] if isinstance(w, Tensor) else w[torch.tensor([3, 1, 3])]}
  for name, f in cases.items():
    for a, b in zip(ours(f), theirs(f)): np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)

@pytest.mark.parametrize("idt", [np.int8, np.uint8, np.int16, np.uint16, np.uint32])
def test_narrow_and_unsigned_index_dtypes_past_their_range(idt):
  """an index dtype that can't hold the dim's bounds (uint8: -n; int8: n = 300) once raised a false out-of-range
  error (the bounds wrapped in the index's dtype), and x[int8 negative] + n wrapped to a wrong row"""
  w = np.arange(900, dtype=np.float32).reshape(300, 3)
  i = np.array([1, 120, 0], idt)
  e = nn.Embedding(300, 3)
  e.weight = Tensor(w)
  assert_bits(e(Tensor(i)).numpy(), w[i.astype(np.int64)])
  assert_bits(Tensor(w)[Tensor(i)].numpy(), w[i.astype(np.int64)])
  assert_bits(Tensor(w).gather(0, Tensor(i.reshape(1, 3))).numpy(), w[i.astype(np.int64), [0, 1, 2]][None])
  if np.issubdtype(idt, np.signedinteger):
    j = np.array([-100, -1, 5], idt)
    assert_bits(Tensor(w)[Tensor(j)].numpy(), w[j.astype(np.int64)])
  with pytest.raises(IndexError, match="outside"): Tensor(w[:100])[Tensor(np.array([1, 120], idt))].numpy()
