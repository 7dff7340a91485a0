"""Data-dependent checks (an index out of range) that run as small kernels beside the value they guard and raise
when that value is realized: the graph stays lazy, and a wrong index never becomes a silent wrong number.

>>> from frontend import Tensor
>>> x = Tensor([1.0, 2.0])[Tensor([5])]
>>> try: x.numpy()
... except IndexError as e: print(str(e).split(":")[0])
index out of range in x[tensor] (dim of size 2)
"""
from __future__ import annotations
import weakref
from typing import TYPE_CHECKING
from collections.abc import Callable
import numpy as np
from compiler.lazy import LazyBuffer
from compiler.dtypes import dtypes
from frontend.multi import MultiLazyBuffer
if TYPE_CHECKING: from frontend.tensor import Tensor

# unrealized base -> [(bool LazyBuffer that is true when the check fails, message, exception type)]
_pending: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# realized base whose values came from a failed check -> (message, exception type): reading it raises again
_failed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

def any_pending() -> bool:
  """Are there checks not run yet, and no failed value a graph could read? (Then realize finds the checks in the
  schedule's graph instead of walking it: Checks.pending_in.)"""
  return bool(_pending) and not _failed

def check_index(result: Tensor, idx: Tensor, n: int, what: str, exc: type = IndexError, allow_negative: bool = False,
                counted: Tensor | None = None) -> Tensor:
  """Attach to `result` the check that every `idx` lies in [0, n) ([-n, n) with allow_negative; only where
  `counted` is true); returns `result`. The check runs when something computed from `result` is realized."""
  if idx.numel() == 0 or result.lazydata.realized: return result
  lo = -n if allow_negative else 0
  # the bounds compared in the index's dtype wrap where it can't hold them (uint8: -n; int8: n > 127): compare wider
  wide = idx if idx.dtype.itemsize >= 4 and not idx.dtype.is_unsigned else idx.cast(dtypes.int64)
  if isinstance(result.lazydata, MultiLazyBuffer): return _check_index_multi(result, wide, n, what, exc, lo, counted)
  bad = (wide < lo) | (wide >= n)
  if counted is not None: bad = bad & counted
  msg = f"index out of range in {what} (dim of size {n}): an index of {idx.shape} is outside [{lo}, {n})"
  # (the message when the indices can't be read again: a TinyJit replay; else _offender names the value)
  # the indices themselves are kept for the error: which value, at which position (read only when the check fails)
  culprit = (idx.lazydata, None if counted is None else counted.lazydata, lo, n)
  _pending.setdefault(result.lazydata.base, []).append((bad.any().lazydata, msg, exc, culprit))
  return result

def _check_index_multi(result: Tensor, idx: Tensor, n: int, what: str, exc: type, lo: int, counted: Tensor | None) -> Tensor:
  """check_index for a result on several devices: the flag is allreduced, so each device's shard carries the check of
  all the indices (the indices gathered to one device name the offender)."""
  bad = (idx < lo) | (idx >= n)
  if counted is not None: bad = bad & counted
  flags = bad.any()
  if isinstance(flags.lazydata, MultiLazyBuffer) and flags.device != result.device: flags = flags.to(flags.device[0])
  flags = flags.lazydata.lbs if isinstance(flags.lazydata, MultiLazyBuffer) else [flags.lazydata] * len(result.lazydata.lbs)
  msg = f"index out of range in {what} (dim of size {n}): an index of {idx.shape} is outside [{lo}, {n})"
  one = idx.to(idx.device[0]) if isinstance(idx.lazydata, MultiLazyBuffer) else idx
  cnt = None if counted is None else counted.to(one.device) if counted.device != one.device else counted
  culprit = (one.lazydata, None if cnt is None else cnt.lazydata, lo, n)
  for lb, flag in zip(result.lazydata.lbs, flags):
    if flag.device != lb.device: flag = flag.copy_to_device(lb.device)
    _pending.setdefault(lb.base, []).append((flag, msg, exc, culprit))
  return result

def _offender(culprit: tuple, read_back: Callable[[LazyBuffer], np.ndarray]) -> str:
  """'; the first offending index is V at position P (and K more)' for a failed check, from the indices read again
  (read_back(lb): lb's values on the host in its own dtype, computed first when they are not; the engine's)."""
  idx, counted, lo, n = culprit
  def values(lb: LazyBuffer, npdt) -> np.ndarray: return read_back(lb).astype(npdt).reshape(idx.shape)
  v = values(idx, np.int64) if not idx.dtype.is_unsigned else values(idx, np.uint64).astype(object)
  bad = (v < lo) | (v >= n)
  if counted is not None: bad &= values(counted, np.bool_)
  where = np.argwhere(bad)
  if not len(where): return ""
  pos = tuple(int(i) for i in where[0])
  more = f" (and {len(where) - 1} more)" if len(where) > 1 else ""
  return f"; the first offending index is {v[pos]} at position {pos if len(pos) != 1 else pos[0]}{more}"

class Checks:
  """The checks one realize() must run, gathered from the graph of `lbs` (and removed from the pending set)."""
  def __init__(self, lbs: list[LazyBuffer], walk: bool = True):
    self.roots = [lb.base for lb in lbs]
    # (bad flag, message, exception, guarded base, the indices for the error)
    self.items: list[tuple[LazyBuffer, str, type, LazyBuffer, tuple]] = []
    self.seen: set[LazyBuffer] = set()   # the bases walked
    if walk: self._walk(self.roots)
  def pending_in(self, nodes: set, lbs: list[LazyBuffer]) -> Checks:
    """The checks guarding any of `nodes` (the unrealized bases of a schedule's graph: create_schedule's `nodes`), in
    the order they were made, instead of a walk; `lbs`: the schedule's outputs, marked with the roots on a failure."""
    extra = Checks.__new__(Checks)
    extra.roots, extra.items, extra.seen = self.roots + [lb.base for lb in lbs], [], self.seen
    for b in [b for b in _pending.keys() if b in nodes]:
      extra.items.extend((lb, msg, exc, b, c) for lb, msg, exc, c in _pending.pop(b, ()))
    return extra
  def more(self, lbs: list[LazyBuffer]) -> Checks:
    """The checks of the graphs of `lbs` beyond the part this one walked (what a schedule realizes besides the values
    asked for: the readers an assign would leave stale, such as the loss of `loss.backward(); opt.step()`). A failure
    marks both's roots."""
    extra = Checks.__new__(Checks)
    extra.roots, extra.items, extra.seen = self.roots + [lb.base for lb in lbs], [], self.seen
    extra._walk([lb.base for lb in lbs])
    return extra
  def _walk(self, roots: list[LazyBuffer]) -> None:
    if not _pending and not _failed: return
    # (a weak dictionary makes a weak reference at every lookup: the walk, which visits the whole graph, asks sets of
    # the keys' ids instead; every key is alive while it is in the dictionary, so its id names it)
    pending, failed = {id(k) for k in _pending.keys()}, {id(k) for k in _failed.keys()}
    # (each base is pushed once: marked seen when pushed. LazyBuffers hash and compare by identity)
    seen, stack = self.seen, []
    for b in roots:
      if b not in seen: seen.add(b); stack.append(b)
    while stack:
      b = stack.pop()
      if b.buffer is not None:
        if id(b) in failed: raise _failed[b][1](_failed[b][0])   # computed from an index that was out of range
        continue
      if id(b) in pending: self.items.extend((lb, msg, exc, b, c) for lb, msg, exc, c in _pending.pop(b, ()))
      for s in b.srcs:
        if (sb := s._base or s) not in seen: seen.add(sb); stack.append(sb)   # (s.base)
  @property
  def flags(self) -> list[LazyBuffer]: return [c[0] for c in self.items]
  def verify(self, read: Callable[[LazyBuffer], np.ndarray], read_back: Callable[[LazyBuffer], np.ndarray]) -> None:
    """Read each realized flag (`read(lb) -> numpy array`); raise the first failed check, after marking what was
    computed from it so a later read raises too (naming the offending index, read with `read_back`: see _offender)."""
    for lb, msg, exc, guarded, culprit in self.items:
      if read(lb).any():
        # (naming the value is a courtesy: a failure to read it must not hide the error itself)
        try: msg += _offender(culprit, read_back)
        except Exception as e: msg += f" (the offending value could not be read: {type(e).__name__})"
        for b in self.roots + [guarded]:
          if b.buffer is not None: _failed[b] = (msg, exc)
        raise exc(msg)
