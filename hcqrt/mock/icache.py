"""The instruction caches of the mock GPUs (NV gpfifo.py Channel.fetch_code, AMD cp.py check_icache): where new code
disagrees with the lines an earlier launch fetched and no invalidate dropped since."""
from __future__ import annotations
from collections.abc import Iterable

def stale_range(cached: Iterable[tuple[int, bytes]], va: int, code: bytes) -> tuple[int, int, int] | None:
  """(the fetch's address, a, b) of the first address range [a, b) where `code` (at `va`) differs from bytes an
  instruction cache holds (`cached`: (address, bytes) of each fetch), or None where it agrees with all of them.

  >>> stale_range([(0x100, b"abcd")], 0x102, b"cdXY"), stale_range([(0x100, b"abcd")], 0x102, b"xy")
  (None, (256, 258, 260))
  """
  lo, hi = va, va + len(code)
  for at, held in cached:
    a, b = max(lo, at), min(hi, at + len(held))
    if a < b and held[a - at:b - at] != code[a - lo:b - lo]: return at, a, b
  return None
