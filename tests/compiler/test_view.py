"""Views and the symbolic index math: random movement-op chains checked element by element against numpy."""
import random
import numpy as np
from hypothesis import given, settings, strategies as st
from compiler.dtypes import dtypes
from compiler.uop import UOp, Ops, substitute, simplify
from compiler.view import ShapeTracker, View

def rng(i, n): return UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n),), (i, "global"))

def evaluate(st: ShapeTracker, base: np.ndarray) -> np.ndarray:
  """Read every element of the view through its index expression (0 where invalid)."""
  idxs = [rng(i, max(s, 1)) for i, s in enumerate(st.shape)]
  off, valid = st.to_index(idxs)
  out = np.zeros(st.shape, base.dtype)
  flat = base.reshape(-1)
  for pos in np.ndindex(*st.shape):
    m = {r: UOp.const(dtypes.int32, p) for r, p in zip(idxs, pos)}
    o, v = simplify(substitute(off, m)), simplify(substitute(valid, m))
    assert o.op is Ops.CONST and v.op is Ops.CONST, (o, v)
    if v.arg: out[pos] = flat[o.arg]
  return out

def apply_np(a: np.ndarray, op: str, arg) -> np.ndarray:
  if op == "reshape": return a.reshape(arg)
  if op == "permute": return a.transpose(arg)
  if op == "expand": return np.broadcast_to(a, arg)
  if op == "pad": return np.pad(a, arg)
  if op == "shrink": return a[tuple(slice(lo, hi) for lo, hi in arg)]
  if op == "flip": return np.flip(a, arg)
  raise ValueError(op)

def random_op(shape, r: random.Random):
  ops = ["permute", "pad", "shrink", "flip", "reshape", "expand"]
  op = r.choice(ops)
  n = len(shape)
  if op == "permute": return op, tuple(r.sample(range(n), n))
  if op == "pad": return op, tuple((r.randint(0, 2), r.randint(0, 2)) for _ in shape)
  if op == "shrink":
    out = []
    for s in shape:
      lo = r.randint(0, max(0, s - 1)); out.append((lo, r.randint(lo + 1, s) if s > lo else lo))
    return op, tuple(out)
  if op == "flip": return op, tuple(i for i in range(n) if r.random() < 0.5)
  if op == "expand":
    if 1 not in shape: return "reshape", shape + (1,) if r.random() < 0.5 else shape
    return op, tuple(r.randint(1, 3) if s == 1 else s for s in shape)
  # reshape: split or merge dims with the same element count
  size = int(np.prod(shape))
  facs = [d for d in range(1, size + 1) if size % d == 0]
  a = r.choice(facs)
  return op, (a, size // a) if r.random() < 0.6 else (size,)

@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9))
def test_random_movement_chains_match_numpy(seed):
  r = random.Random(seed)
  shape = tuple(r.randint(1, 4) for _ in range(r.randint(1, 3)))
  base = np.arange(int(np.prod(shape)), dtype=np.int32) + 1
  ref = base.reshape(shape)
  sttr = ShapeTracker.from_shape(shape)
  for _ in range(r.randint(1, 5)):
    op, arg = random_op(sttr.shape, r)
    if op == "reshape" and int(np.prod(arg)) != sttr.size(): continue
    ref = apply_np(ref, op, arg)
    sttr = getattr(sttr, op)(arg)
    if ref.size > 200: break
  assert sttr.shape == ref.shape
  np.testing.assert_array_equal(evaluate(sttr, base), ref)

def test_reshape_merges_without_second_view():
  st = ShapeTracker.from_shape((4, 6)).permute((1, 0))
  assert len(st.reshape((6, 2, 2)).views) == 1       # splitting a strided dim is one view
  assert len(st.reshape((24,)).views) == 2            # a transpose can't be flattened in place
  padded = ShapeTracker.from_shape((3, 4)).pad(((1, 1), (0, 0)))
  assert len(padded.reshape((1, 5, 4, 1)).views) == 1  # adding unit dims keeps the mask

def test_symbolic_div_mod_fold():
  r = rng(0, 12)
  assert (r * 4 + 3) // 4 is r and ((r * 4 + 3) % 4).arg == 3
  assert (r // 4) * 4 + r % 4 is r
  assert simplify((r * 8 + 5) // 4) is simplify(r * 2 + 1)
  assert (r // 3 // 2) is simplify(r // 6)
  assert r.lt(12).arg is True and r.lt(0).arg is False

def test_view_contiguous_flags():
  assert View.create((2, 3)).contiguous
  assert not View.create((2, 3)).permute((1, 0)).contiguous
  assert ShapeTracker.from_shape((5,)).pad(((1, 0),)).real_size() == 5

def test_reductions_over_broadcast_constants():
  from frontend import Tensor
  assert Tensor.ones(3).sum().item() == 3.0
  assert Tensor.ones(2, 3).sum(1).tolist() == [3.0, 3.0]
  assert (Tensor.ones(2, 3) * 2).sum(0).tolist() == [4.0, 4.0, 4.0]
  assert Tensor.full((2, 2), 2.0).max().item() == 2.0
