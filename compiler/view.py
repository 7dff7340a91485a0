"""Views: how a shaped value is read out of a flat buffer, so that movement ops never copy.

A `View` is shape + strides + offset + an optional validity mask (per dimension, [lo, hi)); padding is a mask,
expand a zero stride, flip a negative stride. A reshape that one view cannot express stacks a second view in a
`ShapeTracker`. `ShapeTracker.to_index(idxs)` turns index expressions into a buffer offset and a validity
expression (both UOps, kept small by the symbolic rules).

Sizes, strides, offsets and mask bounds may be symbolic (compiler/sint.py: UOps over Variables); a reshape then stays
one view only when it adds or drops size-1 dims (else a second view), and comparisons that would depend on a
Variable's value raise instead of guessing.

>>> from compiler.view import ShapeTracker
>>> st = ShapeTracker.from_shape((4, 6)).permute((1, 0)).shrink(((1, 3), (0, 4)))
>>> st.shape, st.views[-1].strides, st.views[-1].offset
((2, 4), (1, 6), 1)
"""
from __future__ import annotations
from dataclasses import dataclass
import functools, math
from compiler.uop import UOp, Ops, simplify_alu
from compiler.dtypes import dtypes
from compiler.sint import any_sym, smin_expr, smax_expr, empty_range
from compiler.memo import memo_put

def prod(xs) -> int: return math.prod(xs)

def _int(x): return x.arg if isinstance(x, UOp) and x.op is Ops.CONST else x

def strides_for_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
  """The row-major strides of a dense layout of `shape` (0 for the size-1 dims).

  >>> strides_for_shape((2, 1, 3))
  (3, 0, 1)
  """
  if shape.__class__ is not tuple: shape = tuple(shape)
  if (r := _strides_cache.get(key := (shape, tuple(map(type, shape))))) is not None: return r
  out, acc = [], 1
  for s in reversed(shape):
    out.append(0 if s == 1 else acc)
    acc *= s
  return memo_put(_strides_cache, key, tuple(reversed(out)))

# Memo tables of pure functions of immutable values (shapes, Views, ShapeTrackers, argument tuples), so that the same
# movement op on the same view is computed once, not per tensor per step. Correct because a View is frozen and every
# op below depends only on its fields and the argument (UOps in symbolic dims are immutable and compared by identity).
# Keys carry the types of the plain numbers (tuple(map(type, ...))): 1 == True == 1.0 == np.int64(1) compare equal, and
# without the types a shape of bools or numpy ints would come back as the first caller's ints (or the reverse).
# Bounded: a table that reaches CACHE_MAX entries is emptied (compiler/memo.py memo_put; it is only a cache: a miss recomputes).
_strides_cache: dict[tuple, tuple] = {}
_from_shape_cache: dict[tuple, ShapeTracker] = {}
_movement_cache: dict[tuple, ShapeTracker] = {}

def _types(arg: tuple) -> tuple:
  """The types of arg's numbers (one level of nesting: shrink/pad pairs)."""
  return tuple(map(type, arg)) if not arg or arg[0].__class__ is not tuple else tuple(tuple(map(type, a)) for a in arg)

@dataclass(frozen=True)
class View:
  shape: tuple[int, ...]
  strides: tuple[int, ...]
  offset: int = 0
  mask: tuple[tuple[int, int], ...] | None = None

  @staticmethod
  def create(shape, strides=None, offset=0, mask=None) -> View:
    shape, offset = tuple(map(_int, shape)), _int(offset)   # (symbolic arithmetic that folded to a number is a number)
    if strides is not None: strides = tuple(map(_int, strides))
    if mask is not None: mask = tuple((_int(lo), _int(hi)) for lo, hi in mask)
    strides = strides_for_shape(shape) if strides is None else tuple(0 if s == 1 else st for s, st in zip(shape, strides))
    if mask is not None:
      if all(lo == 0 and hi == s for (lo, hi), s in zip(mask, shape)): mask = None
      elif any(not any_sym((lo, hi)) and lo >= hi for lo, hi in mask):  # nothing is valid: a view of zeros
        return View(shape, (0,) * len(shape), 0, tuple((0, 0) for _ in shape))
    return View(shape, strides, offset, None if mask is None else tuple(mask))
  # (views are dict keys of the memo tables and parts of UOp args: hash the fields once, not at every lookup; the same
  # value as the hash dataclass would generate)
  @functools.cached_property
  def _hash(self) -> int: return hash((self.shape, self.strides, self.offset, self.mask))
  def __hash__(self) -> int: return self._hash
  # (the dataclass's comparison of the fields, after the cheap checks: the same object, or different cached hashes)
  def __eq__(self, other) -> bool:
    return self is other or (other.__class__ is View and self._hash == other._hash and
                             (self.shape, self.strides, self.offset, self.mask) == (other.shape, other.strides, other.offset, other.mask))
  # pickled (an ast sent to a BEAM worker) without the cached values: a symbolic dim is a UOp, hashed by identity, so
  # a hash cached in one process is wrong in another
  def __getstate__(self) -> dict: return {k: self.__dict__[k] for k in ("shape", "strides", "offset", "mask")}
  @functools.cached_property
  def contiguous(self) -> bool:
    return self.offset == 0 and self.mask is None and self.strides == strides_for_shape(self.shape)
  def size(self) -> int: return prod(self.shape)

  def permute(self, order) -> View:
    return View.create(tuple(self.shape[i] for i in order), tuple(self.strides[i] for i in order), self.offset,
                       None if self.mask is None else tuple(self.mask[i] for i in order))
  def expand(self, shape) -> View:
    assert all(s == n or s == 1 for s, n in zip(self.shape, shape)), f"can't expand {self.shape} to {shape}"
    mask = None if self.mask is None else tuple(m if s == n else ((0, n) if m != (0, 0) else (0, 0)) for m, s, n in zip(self.mask, self.shape, shape))
    return View.create(shape, tuple(st if s == n else 0 for st, s, n in zip(self.strides, self.shape, shape)), self.offset, mask)
  def shrink(self, arg) -> View:
    offset = self.offset + sum(st * lo for st, (lo, _) in zip(self.strides, arg))
    mask = None
    if self.mask is not None:
      mask = tuple((smax_expr(0, mlo - lo), smax_expr(0, smin_expr(mhi, hi) - lo)) for (mlo, mhi), (lo, hi) in zip(self.mask, arg))
    return View.create(tuple(hi - lo for lo, hi in arg), self.strides, offset, mask)
  def pad(self, arg) -> View:
    if all(b == 0 and a == 0 for b, a in arg): return self
    # pad = shrink with negative begin, then mask out what was not there
    zv = self.shrink(tuple((-b, s + a) for s, (b, a) in zip(self.shape, arg)))
    mask = tuple((b, s + b) for s, (b, _) in zip(self.shape, arg))
    if self.mask is not None: mask = tuple((smax_expr(lo, b + mlo), smin_expr(hi, b + mhi)) for (lo, hi), (b, _), (mlo, mhi) in zip(mask, arg, self.mask))
    return View.create(zv.shape, zv.strides, zv.offset, mask)
  def flip(self, axes) -> View:
    strides = tuple(-st if i in axes else st for i, st in enumerate(self.strides))
    offset = self.offset + sum((s - 1) * st for i, (s, st) in enumerate(zip(self.shape, self.strides)) if i in axes)
    mask = None if self.mask is None else tuple((s - hi, s - lo) if i in axes else (lo, hi) for i, ((lo, hi), s) in enumerate(zip(self.mask, self.shape)))
    return View.create(self.shape, strides, offset, mask)
  def reshape(self, shape) -> View | None:
    """The same elements in a new shape as one view, or None when that needs a second view."""
    if self.shape == shape: return self
    if self.contiguous or 0 in shape: return View.create(shape)   # no elements: any layout reads the same nothing
    if any_sym(self.shape) or any_sym(shape): return self._reshape_sym(shape)
    # drop size-1 dims (keeping their mask validity), then split/merge strided runs
    old = [(s, st, m) for s, st, m in zip(self.shape, self.strides, self.mask or [(0, s) for s in self.shape])]
    if any(s == 1 and m == (0, 0) for s, _, m in old): return View.create(shape, (0,) * len(shape), 0, tuple((0, 0) for _ in shape))
    old = [x for x in old if x[0] != 1]
    new_shape = [s for s in shape if s != 1]
    strides, masks, i = [], [], 0
    for ns in new_shape:
      # take old dims until their product reaches ns
      if i >= len(old): return None
      s, st, m = old[i]
      if s == ns: strides.append(st); masks.append(m); i += 1; continue
      if s > ns:  # split old dim s into ns * (s // ns): only when unmasked
        if s % ns or m != (0, s): return None
        strides.append(st * (s // ns)); masks.append((0, ns))
        old[i] = (s // ns, st, (0, s // ns))
        continue
      # merge consecutive old dims while they are contiguous with each other and unmasked
      acc, j = s, i
      if m != (0, s): return None
      while acc < ns:
        j += 1
        if j >= len(old): return None
        s2, st2, m2 = old[j]
        if m2 != (0, s2) or old[j - 1][1] != st2 * s2: return None
        acc *= s2
      if acc != ns: return None
      strides.append(old[j][1]); masks.append((0, ns)); i = j + 1
    if i != len(old): return None
    it_s, it_m = iter(strides), iter(masks)
    full_strides, full_mask = [], []
    for s in shape:
      if s == 1: full_strides.append(0); full_mask.append((0, 1))
      else: full_strides.append(next(it_s)); full_mask.append(next(it_m))
    return View.create(shape, full_strides, self.offset, tuple(full_mask) if self.mask is not None else None)

  def _reshape_sym(self, shape) -> View | None:
    """A reshape with symbolic dims as one view: only size-1 dims added or removed (else None: a second view)."""
    old = [(s, st, m) for s, st, m in zip(self.shape, self.strides, self.mask or [None] * len(self.shape)) if not (isinstance(s, int) and s == 1)]
    new = [s for s in shape if not (isinstance(s, int) and s == 1)]
    if len(old) != len(new) or any(o[0] is not n and o[0] != n for o, n in zip(old, new)): return None
    if self.mask is not None and any(m == (0, 0) for s, _, m in zip(self.shape, self.strides, self.mask) if isinstance(s, int) and s == 1):
      return View.create(shape, (0,) * len(shape), 0, tuple((0, 0) for _ in shape))
    it = iter(old)
    strides, mask = [], []
    for s in shape:
      if isinstance(s, int) and s == 1: strides.append(0); mask.append((0, 1))
      else:
        _, st, m = next(it)
        strides.append(st); mask.append(m)
    return View.create(shape, strides, self.offset, tuple(mask) if self.mask is not None else None)

  def to_index(self, idxs: list[UOp]) -> tuple[UOp, UOp]:
    """(offset expression, validity expression) for reading element `idxs` of this view."""
    i32 = dtypes.int32 if not any(i.dtype is dtypes.int64 for i in idxs) else dtypes.int64
    off = self.offset if isinstance(self.offset, UOp) else UOp.const(i32, self.offset)
    valid = UOp.const(dtypes.bool, True)
    for i, (ix, st) in enumerate(zip(idxs, self.strides)):
      if isinstance(st, UOp) or st != 0: off = off + ix * st
      if self.mask is not None:
        lo, hi = self.mask[i]
        if isinstance(lo, UOp) or lo > 0: valid = valid.logical_and((lo - 1 if isinstance(lo, UOp) else UOp.const(ix.dtype, lo - 1)).lt(ix))
        if hi is not self.shape[i] and (isinstance(hi, UOp) or isinstance(self.shape[i], UOp) or hi < self.shape[i]): valid = valid.logical_and(ix.lt(hi))
        if not any_sym((lo, hi)) and hi <= lo: valid = UOp.const(dtypes.bool, False)
    return off, valid

def unravel(off: UOp, shape: tuple[int, ...]) -> list[UOp]:
  """Index expressions into `shape` for a flat offset into its contiguous layout."""
  out, acc = [], 1
  for i, s in enumerate(reversed(shape)):
    # a symbolic size divides as max(s, 1): a Variable's minimum may be 0, and the division may be hoisted out of the
    # (then empty) loops that guard it (for minima >= 1 the max folds away)
    if isinstance(s, UOp): s = simplify_alu(Ops.MAX, s.dtype, (s, UOp.const(s.dtype, 1)))
    # the outermost index needs no modulo: a valid offset is below the total size
    outer = i == len(shape) - 1
    out.append(UOp.const(off.dtype, 0) if isinstance(s, int) and s == 1 else (off // acc if outer else (off // acc) % s))
    acc *= s
  return list(reversed(out))

@dataclass(frozen=True)
class ShapeTracker:
  """A stack of views, applied last-first: views[-1] has the visible shape, views[0] addresses the buffer."""
  views: tuple[View, ...]

  # (the visible shape as a plain attribute, not a property: read for every lazy buffer and op)
  def __post_init__(self): object.__setattr__(self, "shape", self.views[-1].shape)
  @functools.cached_property
  def _hash(self) -> int: return hash(self.views)
  def __hash__(self) -> int: return self._hash
  # (asked for every movement op (LazyBuffer._view) and memo lookup: identity first, then the cached hashes, then the views)
  def __eq__(self, other) -> bool:
    return self is other or (other.__class__ is ShapeTracker and self._hash == other._hash and self.views == other.views)
  def __getstate__(self) -> dict: return {"views": self.views}   # (without the cached values: see View)
  def __setstate__(self, state: dict) -> None:
    object.__setattr__(self, "views", state["views"])
    self.__post_init__()
  @staticmethod
  def from_shape(shape) -> ShapeTracker:
    shape = tuple(shape)
    if (st := _from_shape_cache.get(key := (shape, tuple(map(type, shape))))) is None:
      st = memo_put(_from_shape_cache, key, ShapeTracker((View.create(shape),)))
    return st
  # shape: the visible shape, views[-1].shape (an attribute set by __post_init__, not a dataclass field)
  @property
  def contiguous(self) -> bool: return len(self.views) == 1 and self.views[0].contiguous
  def size(self) -> int: return prod(self.shape)
  def real_size(self) -> int:
    """How many elements of the underlying buffer this view may touch (an upper bound)."""
    v = self.views[0]
    if v.mask is not None and any(lo >= hi for lo, hi in v.mask): return 0
    lo = v.offset + sum(st * ((m[0] if v.mask else 0) if st > 0 else ((m[1] if v.mask else s) - 1)) for st, s, m in zip(v.strides, v.shape, v.mask or [None]*len(v.shape)))
    hi = v.offset + sum(st * (((m[1] if v.mask else s) - 1) if st > 0 else (m[0] if v.mask else 0)) for st, s, m in zip(v.strides, v.shape, v.mask or [None]*len(v.shape)))
    return hi + 1 if hi >= lo else 0

  def _last(self, v: View) -> ShapeTracker: return ShapeTracker(self.views[:-1] + (v,))
  def _memo(self, op: str, arg) -> ShapeTracker:
    # (see _movement_cache; an op that raises caches nothing)
    arg = tuple(tuple(a) for a in arg) if op in ("shrink", "pad") else tuple(arg)
    if (st := _movement_cache.get(key := (self, op, arg, _types(arg)))) is None:
      st = memo_put(_movement_cache, key, self._reshape(arg) if op == "reshape" else self._last(getattr(self.views[-1], op)(arg)))
    return st
  def permute(self, order) -> ShapeTracker: return self._memo("permute", order)
  def expand(self, shape) -> ShapeTracker: return self._memo("expand", shape)
  def shrink(self, arg) -> ShapeTracker: return self._memo("shrink", arg)
  def pad(self, arg) -> ShapeTracker: return self._memo("pad", arg)
  def flip(self, axes) -> ShapeTracker: return self._memo("flip", axes)
  def reshape(self, shape) -> ShapeTracker: return self._memo("reshape", shape)
  def _reshape(self, shape: tuple) -> ShapeTracker:
    assert any_sym(shape) or any_sym(self.shape) or prod(shape) == self.size(), f"reshape {self.shape} -> {shape} changes the size"
    if (v := self.views[-1].reshape(shape)) is not None: return self._last(v)
    return ShapeTracker(self.views + (View.create(shape),))
  def map_sints(self, fn) -> ShapeTracker:
    """The same views with fn applied to every symbolic (UOp) shape, stride, offset and mask bound."""
    f = lambda x: fn(x) if isinstance(x, UOp) else x
    return ShapeTracker(tuple(View(tuple(map(f, v.shape)), tuple(map(f, v.strides)), f(v.offset),
                                   None if v.mask is None else tuple((f(lo), f(hi)) for lo, hi in v.mask)) for v in self.views))
  @functools.cached_property
  def reads_nothing(self) -> bool:
    """Does a view mask out every element (padding only)? (a frozen value: computed once per tracker)"""
    return any(v.mask is not None and any(empty_range(lo, hi) for lo, hi in v.mask) for v in self.views)
  def sints(self) -> list[UOp]:
    """Every symbolic value in the views."""
    return list(self._sints)
  @functools.cached_property
  def _sints(self) -> tuple[UOp, ...]:   # (a frozen value: computed once; the schedule asks for every kernel input)
    out: list[UOp] = []
    for v in self.views:
      out += [x for x in (*v.shape, *v.strides, v.offset, *(b for m in (v.mask or ()) for b in m)) if isinstance(x, UOp)]
    return tuple(out)
  def to_index(self, idxs: list[UOp]) -> tuple[UOp, UOp]:
    off, valid = self.views[-1].to_index(idxs)
    for v in reversed(self.views[:-1]):
      sub, sv = v.to_index(unravel(off, v.shape))
      off, valid = sub, valid.logical_and(sv)
    return off, valid
