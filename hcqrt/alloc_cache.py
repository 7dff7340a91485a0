"""Freed device memory kept for the next allocation of the same size: the cache both allocators (CPU, NV) share.

A fresh allocation is what costs (page faults and zeroing on the CPU; RM/UVM ioctls, an mmap and a wait for the GPU
to go idle on NV), so freed memory is held, up to `cache_limit` bytes, and handed back by key (its allocated size, and
whatever else must match). Over the limit, the oldest item of the key holding the most bytes is released.

>>> class Bytes(CachingAllocator):
...   def _size(self, item): return len(item)
...   def _release(self, item): released.append(item)
>>> released = []; al = Bytes(cache_limit=8)
>>> al._keep(4, b"abcd"); al._keep(4, b"efgh"); al._keep(2, b"ij")   # 10 bytes held: the oldest 4-byte one goes
>>> released, al.cached_bytes, al._take(4), al._take(4)
([b'abcd'], 6, b'efgh', None)
"""
from __future__ import annotations
from typing import Any

class CachingAllocator:
  """Base of an allocator with a bounded cache of freed memory. Subclasses give each item's size (`_size`) and how to
  return one to the system (`_release`); they call `_take(key)` before allocating and `_keep(key, item)` on free."""
  def __init__(self, cache_limit: int):
    self.cache_limit = cache_limit
    self.cache: dict[Any, list[Any]] = {}   # key -> freed items, oldest first
    self.cached_bytes = 0

  def _size(self, item: Any) -> int: raise NotImplementedError
  def _release(self, item: Any) -> None: raise NotImplementedError

  def _take(self, key: Any) -> Any | None:
    """A freed item under `key`, or None."""
    if not (free := self.cache.get(key)): return None
    item = free.pop()
    if not free: del self.cache[key]
    self.cached_bytes -= self._size(item)
    return item

  def _keep(self, key: Any, item: Any) -> None:
    """Hold a freed item for reuse (released at once when it alone exceeds the limit)."""
    if (n := self._size(item)) > self.cache_limit: return self._release(item)
    self.cache.setdefault(key, []).append(item)
    self.cached_bytes += n
    while self.cached_bytes > self.cache_limit:
      k = max(self.cache, key=lambda k: self._size(self.cache[k][0]) * len(self.cache[k]))   # items of a key: one size
      old = self.cache[k].pop(0)
      if not self.cache[k]: del self.cache[k]
      self.cached_bytes -= self._size(old)
      self._release(old)

  def share_with_forks(self, item: Any, share: bool) -> None:
    """Whether a process forked later maps this memory (CPU buffers: hcqrt/cpu/device.py); nothing to do here."""

  def flush(self) -> None:
    """Return all cached memory to the system."""
    for items in self.cache.values():
      for item in items: self._release(item)
    self.cache.clear(); self.cached_bytes = 0
