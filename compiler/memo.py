"""One bounded memo helper for the tables of pure functions of immutable values that the eager path asks again and
again (strides, trackers, movement ops, broadcasts, kernel names): a full table is emptied (it is only a cache: a miss
recomputes).

The tables stay plain dicts, so a hit is one `dict.get` (the hot path of every op: a dict subclass would cost a slower
method lookup on each); only a miss calls `memo_put`.

>>> table: dict = {}
>>> [memo_put(table, k, k * k, maxsize=2) for k in (1, 2, 3)], table
([1, 4, 9], {3: 9})
"""
from __future__ import annotations
from typing import Any, TypeVar

CACHE_MAX = 1 << 14   # entries per table: enough for a model's shapes, small enough that memory never matters
V = TypeVar("V")

def memo_put(table: dict[Any, V], key: Any, value: V, maxsize: int | None = None) -> V:
  """Store `value` under `key` in the memo `table`, emptying the table first when it holds `maxsize` entries
  (None: CACHE_MAX, read at the call); returns `value`. Cheaper than an LRU's bookkeeping on every hit.

  >>> t: dict = {}; memo_put(t, "k", 1), t
  (1, {'k': 1})
  """
  if len(table) >= (CACHE_MAX if maxsize is None else maxsize): table.clear()
  table[key] = value
  return value
