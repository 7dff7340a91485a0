"""The lazy graph the frontend records: each op is a node; nothing runs until something is realized.

A `LazyBuffer` is either a *base* (an op producing a contiguous value of `shape`, possibly already realized into
a device buffer) or a *view* of a base (a ShapeTracker over it). Movement ops only make views, so they never copy.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.dtypes import dtypes
>>> a = LazyBuffer.const(2.0, dtypes.float32, (3, 4), "CPU")
>>> b = a.alu(__import__("compiler.uop").uop.Ops.ADD, a).permute((1, 0))
>>> b.shape, b.is_view, b.base.op.name
((4, 3), True, 'ADD')
"""
from __future__ import annotations
from typing import Any
import itertools, os, sys, weakref
from compiler.dtypes import DType, dtypes
from compiler.uop import UOp, Ops, COMPARISON
from compiler.view import ShapeTracker, prod
from compiler.memo import memo_put
from compiler.sint import any_sym, smax

_ids = itertools.count()

# DEBUG>=3 / VIZ: the user source line that built each lazy node ({id: "file:line"}); off, one flag read per node
TRACK_SOURCE: bool = False
source_lines: dict[int, str] = {}
_INTERNAL = (os.sep + "frontend" + os.sep, os.sep + "compiler" + os.sep)

def _user_line() -> str:
  f = sys._getframe(2)
  while f is not None and (any(d in f.f_code.co_filename for d in _INTERNAL) or f.f_code.co_filename.startswith("<frozen")):
    f = f.f_back
  return f"{os.path.relpath(f.f_code.co_filename)}:{f.f_lineno}" if f is not None else "?"
SPLIT_REDUCE_MIN = 1 << 15   # reductions at least this long into <= 64 outputs are split in two kernels
# the first kernel's rows are a multiple of this many elements (whole vectors, and their accumulators, on any ISA); the
# elements past the last whole row are reduced beside the partial results (the scheduler fuses them into that kernel)
SPLIT_ROW_ALIGN = 64

# the tracker of a scalar broadcast to a shape: a pure function of the shape (its dims' types in the key, as
# compiler/view.py's tables: 1 == True), asked for every constant of every op; bounded like those tables
_broadcast_cache: dict[tuple, ShapeTracker] = {}
def _broadcast_st(shape) -> ShapeTracker:
  if shape.__class__ is not tuple: shape = tuple(shape)
  if (st := _broadcast_cache.get(key := (shape, tuple(map(type, shape))))) is None:
    st = memo_put(_broadcast_cache, key, ShapeTracker.from_shape(()).reshape((1,) * len(shape)).expand(shape))
  return st

_SCALAR_ST = ShapeTracker.from_shape(())
_PLAIN_FLOATS = frozenset((dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64))   # (dtypes.as_const: float(x))

class Readers:
  """The lazy buffers that read a buffer (LazyBuffer.readers, filled by LazyBuffer.__init__), held weakly: iterating
  gives those still alive, each once, in the order they were made. A WeakSet's add and its removal callback are a
  Python call each for every op reading a realized tensor; here the dead references are dropped once the list has
  doubled since the last sweep.

  >>> a = LazyBuffer.empty((2,), dtypes.float32, "CPU"); a.buffer = object()
  >>> b = a.alu(Ops.NEG); c = a.alu(Ops.MUL, a); del b
  >>> [r.op.name for r in a.readers], bool(a.readers), len(a.readers)
  (['MUL'], True, 1)
  """
  __slots__ = ("refs", "sweep_at")
  def __init__(self): self.refs, self.sweep_at = [], 64
  def sweep(self) -> None:
    self.refs = [r for r in self.refs if r() is not None]
    self.sweep_at = max(64, 2 * len(self.refs))
  def __iter__(self): return iter([x for r in self.refs if (x := r()) is not None])
  def __len__(self) -> int: return sum(r() is not None for r in self.refs)
  def __bool__(self) -> bool: return any(r() is not None for r in reversed(self.refs))
_weak = weakref.ref

def mark_viewed(buffer: Any) -> None:
  """Note on a device buffer that a lazy buffer over it was viewed (LazyBuffer.viewed): a buffer without the slot
  (another type) keeps no mark and counts as viewed (buffer_viewed).

  >>> mark_viewed(object()); buffer_viewed(object())
  True
  """
  try: buffer.viewed = True
  except AttributeError: pass

def buffer_viewed(buffer: Any) -> bool:
  """Was a lazy buffer over `buffer` ever viewed? True unless the buffer keeps the mark and it is unset.

  >>> buffer_viewed(object())
  True
  """
  return getattr(buffer, "viewed", True)

class LazyBuffer:
  __slots__ = ("__weakref__", "_base", "arg", "buffer", "device", "dtype", "forced_realize", "id", "op", "readers", "shape", "srcs", "st", "viewed")
  def __init__(self, device: str, st: ShapeTracker, dtype: DType, op: Ops | None = None, srcs: tuple = (),
               arg: Any = None, base: LazyBuffer | None = None, buffer: Any = None):
    self.device, self.st, self.dtype = device, st, dtype
    self.shape: tuple = st.shape   # (st never changes: read on every op and every schedule edge, so kept, not derived)
    self.op, self.srcs, self.arg, self._base, self.buffer = op, srcs, arg, base, buffer
    # viewed: a view of this base was ever made (never unset); with the buffer's own mark (mark_viewed) it lets
    # Tensor.assign prove without a graph walk that a value cannot read the target at another position
    self.id, self.forced_realize, self.readers, self.viewed = next(_ids), False, None, False
    if TRACK_SOURCE: source_lines[self.id] = _user_line()
    # a node reading a buffer that exists (or an in-place write's result) is noted there: an assign that overwrites
    # the buffer later must run it first, so it sees the value it was built from (create_schedule)
    for s in srcs:
      if (b := s._base or s).buffer is not None or b.op is Ops.ASSIGN:   # (b = s.base, inlined: every op comes here)
        if (rs := b.readers) is None: rs = b.readers = Readers()
        # (Readers.add, inlined; a node reading the buffer twice, x * x, is noted once: its adds come one after the other)
        if not (refs := rs.refs) or refs[-1]() is not self:
          refs.append(_weak(self))
          if len(refs) > rs.sweep_at: rs.sweep()
  def __repr__(self) -> str:
    if self.is_view: return f"<LB view {self.shape} of {self.base!r}>"
    return f"<LB {self.device} {self.shape} {self.dtype} {'realized' if self.realized else self.op.name}>"

  @property
  def is_view(self) -> bool: return self._base is not None
  @property
  def base(self) -> LazyBuffer: return self._base if self._base is not None else self
  @property
  def realized(self) -> bool: return self.base.buffer is not None
  @property
  def size(self) -> int: return prod(self.shape)
  @property
  def max_size(self) -> int:
    """The element count with every Variable at its maximum: what a buffer of this shape is allocated for."""
    return smax(prod(self.shape))

  def forget_graph(self) -> None:
    """Drop how this (now realized) base was computed, so the graph above it can be freed: it reads as its buffer.

    >>> lb = LazyBuffer.const(1.0, dtypes.float32, (), "CPU").alu(Ops.ADD, LazyBuffer.const(2.0, dtypes.float32, (), "CPU"))
    >>> lb.forget_graph(); lb.op is Ops.EMPTY, lb.srcs, lb.arg
    (True, (), None)
    """
    self.srcs, self.op, self.arg = (), Ops.EMPTY, None

  @staticmethod
  def next_id() -> int:
    """A number larger than the id of every LazyBuffer built so far and smaller than every later one's."""
    return next(_ids)

  # *** constructors ***
  @staticmethod
  def from_buffer(buffer: Any, shape: tuple, dtype: DType, device: str) -> LazyBuffer:
    return LazyBuffer(device, ShapeTracker.from_shape(shape), dtype, Ops.EMPTY, buffer=buffer)
  @staticmethod
  def empty(shape: tuple, dtype: DType, device: str) -> LazyBuffer:
    return LazyBuffer(device, ShapeTracker.from_shape(shape), dtype, Ops.EMPTY)
  @staticmethod
  def const(value, dtype: DType, shape: tuple, device: str) -> LazyBuffer:
    # a bound Variable as a value (a symbolic count, e.g. the n of a mean): the kernel reads the Variable's argument
    # (a Python float or int for a float dtype is float(value): dtypes.as_const's answer without its checks)
    if ((vc := value.__class__) is float or vc is int) and dtype in _PLAIN_FLOATS: arg = float(value)
    else: arg = value if isinstance(value, UOp) else dtypes.as_const(value, dtype)
    base = LazyBuffer(device, _SCALAR_ST, dtype, Ops.CONST, arg=arg)
    # (base.reshape((1,) * n).expand(shape), without the intermediate view: the same tracker, the same final view; a
    # view of a scalar is never the base itself nor masked, so _view would make just this)
    if not shape: return base
    base.viewed = True
    return LazyBuffer(device, _broadcast_st(shape), dtype, base=base)
  @staticmethod
  def iota(n: int, dtype: DType, device: str) -> LazyBuffer:
    """0, 1, ..., n-1 computed in the kernel that uses it (never stored unless realized)."""
    return LazyBuffer(device, ShapeTracker.from_shape((n,)), dtype, Ops.INDEX)
  def const_like(self, value) -> LazyBuffer: return LazyBuffer.const(value, self.dtype, self.shape, self.device)

  # *** elementwise and reductions make new bases ***
  def alu(self, op: Ops, *srcs: LazyBuffer) -> LazyBuffer:
    allsrc = (self,) + srcs
    for s in srcs:
      if s.shape != self.shape: raise ValueError(f"{op.name}: shapes {self.shape} and {s.shape} differ")
      if s.device != self.device: raise ValueError(f"{op.name}: devices {self.device} and {s.device} differ")
    out = dtypes.bool if op in COMPARISON else (srcs[0].dtype if op is Ops.WHERE else self.dtype)
    # (a base's tracker is from_shape(its shape): every base is made with one, and the result has self's shape)
    return LazyBuffer(self.device, self.st if self._base is None else ShapeTracker.from_shape(self.shape), out, op, allsrc)
  def cast(self, dtype: DType, bitcast: bool = False) -> LazyBuffer:
    if dtype == self.dtype and not bitcast: return self
    if bitcast and dtype.itemsize != self.dtype.itemsize: raise ValueError(f"bitcast {self.dtype} -> {dtype}: sizes differ")
    if self.base.op is Ops.CONST and not bitcast:  # a cast constant is a constant
      # (of the value self's dtype holds: a float constant is a double until rendered, float32(0.1) is not 0.1)
      v = self.base.arg
      return LazyBuffer.const(dtypes.rounded(v, self.dtype) if self.dtype.is_float and isinstance(v, float) else v, dtype, self.shape, self.device)
    return LazyBuffer(self.device, ShapeTracker.from_shape(self.shape), dtype, Ops.BITCAST if bitcast else Ops.CAST, (self,))
  def r(self, op: Ops, axes: tuple[int, ...]) -> LazyBuffer:
    shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
    if not axes: return self
    if not any_sym(self.shape) and self.size == 0:  # reduce of nothing is the identity
      return LazyBuffer.const({Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: dtypes.min(self.dtype)}[op], self.dtype, shape, self.device)
    # a big reduction into a few outputs has no loop to spread over cores: reduce in two stages, d rows of whole vectors
    # then the d partial results. Any length: an odd one (2^26 - 1 floats) has its last elements (fewer than
    # d * SPLIT_ROW_ALIGN) reduced on their own and combined; unsplit, it ran as one scalar chain on one core, 4-5x slower,
    # and a float32 sum of 2^26 values in [0, 1) stopped growing at 2^24 (half the sum lost)
    if len(axes) == 1 and not any_sym(self.shape) and prod(shape) <= 64 and (n := self.shape[axes[0]]) >= SPLIT_REDUCE_MIN:
      a, d = axes[0], next(d for d in (256, 128, 64, 32, 16) if n // d >= 1024)
      m = d * (n // d // SPLIT_ROW_ALIGN * SPLIT_ROW_ALIGN)
      part = lambda lo, hi: self.shrink(tuple((lo, hi) if i == a else (0, s) for i, s in enumerate(self.shape)))
      x = (self if m == n else part(0, m)).reshape(self.shape[:a] + (d, m // d) + self.shape[a + 1:]).r(op, (a + 1,))
      out = x.r(op, (a,)).reshape(shape)
      return out if m == n else out.alu(op, part(m, n).r(op, (a,)))
    return LazyBuffer(self.device, ShapeTracker.from_shape(shape), self.dtype, Ops.REDUCE_AXIS, (self,), (op, tuple(sorted(axes))))
  def contiguous(self) -> LazyBuffer:
    if not self.is_view and self.op is not Ops.CONST:
      if self.buffer is None: self.forced_realize = True
      return self
    return LazyBuffer(self.device, ShapeTracker.from_shape(self.shape), self.dtype, Ops.CONTIGUOUS, (self,))
  def copy_to_device(self, device: str) -> LazyBuffer:
    if device == self.device: return self
    src = self.contiguous() if self.is_view else self
    return LazyBuffer(device, ShapeTracker.from_shape(self.shape), self.dtype, Ops.COPY, (src,), self.device)
  def assign(self, value: LazyBuffer, st: ShapeTracker | None = None) -> LazyBuffer:
    """Write `value` into this (realized, contiguous) buffer, or only into the elements view `st` of it picks (a
    shrink, permute or reshape: each element once); the result aliases the same device buffer."""
    return LazyBuffer(self.device, ShapeTracker.from_shape(self.shape if st is None else st.shape), self.dtype, Ops.ASSIGN, (value, self), st)

  # *** movement ops make views ***
  def _view(self, st: ShapeTracker) -> LazyBuffer:
    b = self._base or self   # (self.base, inlined: every movement op comes here)
    if b._base is None and st == b.st: return b
    # a view that reads nothing valid (padding only) is zeros: say so now, since a mask can't be kept once the view is
    # reshaped to a scalar (shape () has no dim to hold it) and the value would be read unmasked
    if st.reads_nothing:
      return LazyBuffer.const(0, self.dtype, st.shape, self.device)
    if not b.viewed:
      b.viewed = True
      if b.buffer is not None: mark_viewed(b.buffer)
    return LazyBuffer(self.device, st, self.dtype, base=b)
  def reshape(self, shape) -> LazyBuffer: return self._view(self.st.reshape(tuple(shape)))
  def permute(self, order) -> LazyBuffer: return self._view(self.st.permute(tuple(order)))
  def expand(self, shape) -> LazyBuffer: return self._view(self.st.expand(tuple(shape)))
  def pad(self, arg) -> LazyBuffer: return self._view(self.st.pad(tuple(arg)))
  def shrink(self, arg) -> LazyBuffer: return self._view(self.st.shrink(tuple(arg)))
  def flip(self, axes) -> LazyBuffer: return self._view(self.st.flip(tuple(axes)))
