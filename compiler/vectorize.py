"""Vectorization: turn a kernel written over a LANE index (0..W-1) into W-wide vector operations.

An opt introduces LANE by substituting a range `r -> r_o*W + LANE`. This pass then makes every value that
depends on LANE a vector: loads whose index moves by 1 per lane become vector loads, loads that do not move
stay scalar (broadcast), additions/multiplications become vector ops, reductions get vector accumulators,
and a REDUCE over LANE itself sums the lanes. Anything else falls back to per-lane scalar code (VECTORIZE of
the W substituted copies), so the result is always correct.

>>> from compiler.uop import UOp, Ops
>>> from compiler.dtypes import dtypes
>>> lane = UOp(Ops.LANE, dtypes.int32, (), 4)
>>> g = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 1)
>>> v = vectorize_value(UOp(Ops.LOAD, dtypes.float32, (g, lane + 8)), lane)
>>> v.op.name, v.dtype.count
('LOAD', 4)
"""
from __future__ import annotations
from compiler.dtypes import dtypes
from compiler.uop import UOp, Ops, simplify

VECTOR_ALU = {Ops.ADD, Ops.MUL, Ops.FDIV, Ops.NEG, Ops.MAX}
VECTOR_MATH = {Ops.EXP2, Ops.LOG2}   # float32 only: the C renderer has vector versions of these
VECTOR_CAST = {dtypes.float16, dtypes.float32, dtypes.float64}

def gep(x: UOp, i: int) -> UOp:
  if x.dtype.count == 1: return x
  if x.op is Ops.VECTORIZE: return x.src[i]
  return UOp(Ops.GEP, x.dtype.scalar, (x,), i)

def broadcast(x: UOp, w: int) -> UOp:
  return x if x.dtype.count == w else UOp(Ops.VECTORIZE, x.dtype.vec(w), (x,) * w)

class _Vectorizer:
  def __init__(self, lane: UOp):
    self.lane, self.w = lane, lane.arg
    self.memo: dict[UOp, UOp] = {}
    self.dep_memo: dict[UOp, bool] = {}
    self.sub_memo: dict[tuple[UOp, int], UOp] = {}
  def dep(self, u: UOp) -> bool:
    if (r := self.dep_memo.get(u)) is not None: return r
    r = u is self.lane or any(self.dep(s) for s in u.src)
    self.dep_memo[u] = r
    return r
  def at(self, u: UOp, c: int) -> UOp:
    """u for lane c alone; sums over the lanes inside u are folded first (they don't depend on the lane)."""
    return simplify(self.lane_sub(u, c))
  def lane_sub(self, u: UOp, c: int) -> UOp:
    """u with LANE = c, each sum over the lanes replaced by its folded value: only the part of u that depends on the
    lane is rebuilt (the rest is shared), and each node once per lane (memoized across the calls of this pass)."""
    if not self.dep(u): return u
    if (r := self.sub_memo.get((u, c))) is not None: return r
    if u is self.lane: r = UOp.const(self.lane.dtype, c)
    elif u.op is Ops.REDUCE and self.lane in u.src[1:]: r = self.value(u)
    else: r = u.replace(src=tuple(self.lane_sub(s, c) for s in u.src))
    self.sub_memo[(u, c)] = r
    return r
  def stride(self, idx: UOp) -> int | None:
    """The constant step of idx per lane, if idx is affine in LANE (kept on idx per lane width: the tile trials of the
    opts vectorize the same index expressions again)."""
    memo = idx.__dict__.setdefault("_lane_stride", {})
    if self.w not in memo: memo[self.w] = self._stride(idx)
    return memo[self.w]
  def _stride(self, idx: UOp) -> int | None:
    base = self.at(idx, 0)
    d = simplify(self.at(idx, 1) - base)
    if d.op is not Ops.CONST: return None
    for c in range(2, self.w):
      if self.at(idx, c) is not simplify(base + d.arg * c): return None
    return d.arg
  def fallback(self, u: UOp) -> UOp:
    return UOp(Ops.VECTORIZE, u.dtype.vec(self.w), tuple(self.at(u, c) for c in range(self.w)))

  def value(self, u: UOp) -> UOp:
    if not self.dep(u): return u
    if (r := self.memo.get(u)) is not None: return r
    r = self.memo[u] = self._value(u)
    return r
  def _value(self, u: UOp) -> UOp:
    w = self.w
    if u.op is Ops.LOAD:
      gate = u.src[2] if len(u.src) > 2 else None
      if gate is None or not self.dep(gate):
        st = self.stride(u.src[1])
        if st == 0: return UOp(Ops.LOAD, u.dtype, (u.src[0], self.at(u.src[1], 0)) + ((gate,) if gate is not None else ()))
        if st == 1: return UOp(Ops.LOAD, u.dtype.vec(w), (u.src[0], self.at(u.src[1], 0)) + ((gate,) if gate is not None else ()))
      return self.fallback(u)
    if u.op is Ops.REDUCE and self.lane in u.src[1:]:
      # a sum over the lanes themselves: fold the vector
      x = self.value(u.src[0])
      rest = tuple(r for r in u.src[1:] if r is not self.lane)
      if rest: x = self.value(UOp(Ops.REDUCE, u.dtype, (u.src[0],) + rest, u.arg))
      if x.dtype.count == 1:
        return x * w if u.arg is Ops.ADD else x if u.arg is Ops.MAX else self.fallback(u)
      out = gep(x, 0)
      for i in range(1, w): out = UOp(u.arg, u.dtype, (out, gep(x, i)))
      return out
    if u.op is Ops.REDUCE and u.arg in (Ops.ADD, Ops.MAX) and u.dtype.is_float:
      return UOp(Ops.REDUCE, u.dtype.vec(w), (broadcast(self.value(u.src[0]), w),) + u.src[1:], u.arg)
    if u.op in VECTOR_MATH and u.dtype.scalar is dtypes.float32:
      return UOp(u.op, u.dtype.vec(w), (broadcast(self.value(u.src[0]), w),))
    if u.op in VECTOR_ALU and u.dtype.is_float:
      return UOp(u.op, u.dtype.vec(w), tuple(broadcast(self.value(s), w) for s in u.src))
    # (a vector convert only between the types C converts by value: bfloat16 is stored as unsigned short and fp8 as
    # bytes, where __builtin_convertvector would convert numbers, not round bits; their lanes take the scalar casts)
    if u.op is Ops.CAST and u.dtype.scalar in VECTOR_CAST and u.src[0].dtype.scalar in VECTOR_CAST:
      x = self.value(u.src[0])
      if x.dtype.count == w: return UOp(Ops.CAST, u.dtype.vec(w), (x,))
    return self.fallback(u)

  def store(self, s: UOp) -> list[UOp]:
    if not self.dep(s): return [s]
    buf, idx, val = s.src[:3]
    v = self.value(val)
    if not self.dep(idx) and v.dtype.count == 1: return [UOp(Ops.STORE, None, (buf, idx, v))]
    if v.dtype.count == self.w and v.op is not Ops.VECTORIZE and self.stride(idx) == 1:
      return [UOp(Ops.STORE, None, (buf, self.at(idx, 0), v))]
    return [UOp(Ops.STORE, None, (buf, self.at(idx, c), gep(v, c))) for c in range(self.w)]

def vectorize_value(u: UOp, lane: UOp) -> UOp: return _Vectorizer(lane).value(u)

def vectorize(sink: UOp, lane: UOp) -> UOp:
  """Rewrite every STORE of `sink` so nothing depends on `lane` except through vector types."""
  v = _Vectorizer(lane)
  return UOp(Ops.SINK, None, tuple(x for s in sink.src for x in v.store(s)))
