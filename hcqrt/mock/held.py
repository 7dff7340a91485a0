"""Held mode's switch, shared by the mock GPUs' front ends (hcqrt/mock/nv/gpfifo.py GPFIFOEngine, hcqrt/mock/amd/kfd.py
MockKFD): while `hold` is on, doorbells queue and no work is taken up until `release()`, the mock's own (each cites
why its GPU may take work up that late). Turning `hold` off releases, so held doorbells are never left behind.

>>> class Front(Holdable):
...   def release(self, keep_holding=False): self._hold = keep_holding; return 0
>>> f = Front()
>>> with f.held(): f.hold
True
>>> f.hold
False
"""
from __future__ import annotations
import contextlib
from collections.abc import Iterator

class Holdable:
  _hold = False   # (off until a test holds: the mocks' own __init__ need not set it)
  @property
  def hold(self) -> bool: return self._hold
  @hold.setter
  def hold(self, on: bool) -> None:
    if on: self._hold = True
    else: self.release()   # (turning it off by assignment must not leave held doorbells behind for good)

  @contextlib.contextmanager
  def held(self) -> Iterator[Holdable]:
    """Hold the doorbells rung while the block runs; leaving it releases them."""
    self.hold = True
    try: yield self
    finally: self.release()

  def release(self, keep_holding: bool = False) -> int:
    """Take up every held doorbell now; `keep_holding`: later doorbells are held again. Returns how many were held."""
    raise NotImplementedError
