"""cat/stack move every bit of their pieces: a select per element, not the sum of zero-padded pieces (which made -0.0
into +0.0 and quieted a signaling NaN). frontend/function.py Cat."""
import numpy as np
import pytest
from frontend import Tensor, TinyJit, GlobalCounters
from compiler.dtypes import dtypes

UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}

def bits(a: np.ndarray) -> np.ndarray: return a.view(UINT[a.itemsize])

def specials(dt) -> np.ndarray:
  # -0.0 at the edges of the piece and inside, a signaling NaN (quiet bit clear, payload 1) and infinities
  x = np.array([-0.0, 1.5, -0.0, np.inf, -np.inf, -0.0], dtype=dt)
  snan = {np.float16: 0x7C01, np.float32: 0x7F800001, np.float64: 0x7FF0000000000001}[dt]
  x[2:3] = np.array([snan], dtype=UINT[x.itemsize]).view(dt)
  return x

@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64])
def test_cat_float_bit_exact(dt):
  a, b = specials(dt), np.array([-0.0, 2.0, -0.0], dtype=dt)
  out = Tensor(a).cat(Tensor(b), Tensor(a)).numpy()
  want = np.concatenate([a, b, a])
  assert out.dtype == want.dtype and (bits(out) == bits(want)).all(), (bits(out), bits(want))
  assert np.signbit(out[[0, len(a), len(a) + 2]]).all()

def test_cat_promoted_minus_zero():
  """an int piece and a float piece: the float's -0.0 survives the promotion and the join"""
  out = Tensor([1, 2], dtype=dtypes.int32).cat(Tensor([-0.0], dtype=dtypes.float32)).numpy()
  assert out.tolist() == [1.0, 2.0, 0.0] and np.signbit(out).tolist() == [False, False, True]

@pytest.mark.parametrize("dim", [0, 1, 2])
def test_stack_minus_zero_2d(dim):
  x = np.where(np.arange(12).reshape(3, 4) % 3 == 0, -0.0, np.arange(12).reshape(3, 4)).astype(np.float32)
  ts = [Tensor(x), Tensor(-x), Tensor(x)]   # -x has +0.0 where x has -0.0
  out = Tensor.stack(*ts, dim=dim).numpy()
  assert (bits(out) == bits(np.stack([x, -x, x], axis=dim))).all()

def test_cat_ints_and_bool_exact():
  """(a guard: ints and bools were exact before too) every value, the extremes included"""
  i = np.array([np.iinfo(np.int32).min, -1, 0, np.iinfo(np.int32).max], np.int32)
  assert (Tensor(i).cat(Tensor(i[::-1].copy())).numpy() == np.concatenate([i, i[::-1]])).all()
  u = np.array([255, 0, 7], np.uint8)
  assert (Tensor(u).cat(Tensor(u)).numpy() == np.concatenate([u, u])).all()
  b = np.array([True, False, True])
  assert Tensor(b).cat(Tensor(~b), dim=0).numpy().tolist() == np.concatenate([b, ~b]).tolist()

def test_cat_under_jit_replay():
  calls = []
  @TinyJit
  def f(x: Tensor, y: Tensor) -> Tensor:
    calls.append(1)
    return x.cat(y).realize()
  for i in range(4):
    x = np.array([-0.0, float(i)], np.float32) * (1 if i % 2 else -1)   # -0.0 on some calls, +0.0 on others
    y = np.array([-0.0, -0.0], np.float32)
    out = f(Tensor(x).realize(), Tensor(y).realize()).numpy()
    assert (bits(out) == bits(np.concatenate([x, y]))).all(), (i, out)
  assert len(calls) == 2   # calls 3 and 4 were replays of the captured kernel

def test_cat_is_one_kernel():
  a, b = Tensor(np.full(1000, -0.0, np.float32)).realize(), Tensor(np.ones(1000, np.float32)).realize()
  GlobalCounters.reset()
  out = a.cat(b).numpy()
  assert GlobalCounters.kernel_count == 1 and np.signbit(out[:1000]).all()

def test_cat_grad_is_each_pieces_range():
  a, b = Tensor([-0.0, 1.0], requires_grad=True), Tensor([[2.0], [3.0]], requires_grad=True).reshape(2)
  w = Tensor([1.0, 2.0, 3.0, 4.0])
  (a.cat(b) * w).sum().backward()
  assert a.grad.tolist() == [1.0, 2.0]

def test_pad_value_minus_zero():
  """pad(value=-0.0): -0.0 == 0 in Python, but the padding is -0.0 (torch's F.pad too)"""
  out = Tensor([1.0]).pad((1, 1), value=-0.0).numpy()
  assert np.signbit(out).tolist() == [True, False, True]

@pytest.mark.parametrize("mode", ["reflect", "circular", "replicate"])
def test_pad_modes_keep_minus_zero(mode):
  """the non-constant pads are built from cat"""
  x = np.array([-0.0, 1.0, -0.0, 2.0], np.float32)
  out = Tensor(x).pad((2, 2), mode=mode).numpy()
  assert (bits(out) == bits(np.pad(x, (2, 2), mode={"circular": "wrap", "replicate": "edge"}.get(mode, mode)))).all()
