"""The flat 64-bit address space the emulated kernel sees: host buffers mapped at GPU virtual addresses."""
from __future__ import annotations
import bisect
import itertools
import numpy as np

class MemoryFault(Exception): pass

class FlatMemory:
  """Map host buffers (anything with a writable buffer interface) at 64-bit addresses.

  >>> m = FlatMemory(); buf = bytearray(16); m.map(0x1000, buf)
  >>> m.write(np.array([0x1004], np.uint64), np.frombuffer(b"\\x01\\x02\\x03\\x04", np.uint8).reshape(1, 4)); bytes(buf[4:8])
  b'\\x01\\x02\\x03\\x04'
  """
  def __init__(self) -> None:
    self.bases: list[int] = []; self.bufs: list[np.ndarray] = []
    # the last _locate's (addrs, nbytes, parts): one global load looks its lanes up in memory, then in the GL1 and GL0
    # models (the same array object each time); holding `addrs` keeps its identity from being reused. Address arrays
    # are never modified in place (every caller derives a new one), so identity implies the same addresses.
    self._last: tuple | None = None

  @classmethod
  def from_dict(cls, bufs: dict) -> FlatMemory:
    m = cls()
    for base, buf in bufs.items(): m.map(base, buf)
    return m

  @classmethod
  def from_arrays(cls, maps: list[tuple[int, np.ndarray]]) -> FlatMemory:
    """Map every (base, uint8 array) of `maps` at once: `map` for each, with one sort instead of an insert each."""
    m = cls(); maps = sorted(((b, a.reshape(-1).view(np.uint8)) for b, a in maps), key=lambda x: x[0])
    for (b0, a0), (b1, _) in itertools.pairwise(maps):
      if b0 + len(a0) > b1: raise ValueError(f"mapping 0x{b1:x} overlaps an existing mapping")
    m.bases = [b for b, _ in maps]; m.bufs = [a for _, a in maps]
    return m

  def map(self, base: int, buf) -> None:
    arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
    arr = arr.reshape(-1).view(np.uint8)
    i = bisect.bisect(self.bases, base)
    if (i > 0 and self.bases[i - 1] + len(self.bufs[i - 1]) > base) or (i < len(self.bases) and base + len(arr) > self.bases[i]):
      raise ValueError(f"mapping 0x{base:x}+{len(arr)} overlaps an existing mapping")
    self.bases.insert(i, base); self.bufs.insert(i, arr); self._last = None

  def unmap(self, base: int) -> None:
    i = self.bases.index(base); del self.bases[i]; del self.bufs[i]; self._last = None

  def tail(self, addr: int, what: str = "access") -> np.ndarray:
    """The mapped bytes from `addr` to the end of its buffer (a view; code is fetched from here)."""
    i = bisect.bisect(self.bases, addr) - 1
    if i < 0 or addr >= self.bases[i] + len(self.bufs[i]): raise MemoryFault(f"{what}: 0x{addr:x} is outside every mapped buffer")
    return self.bufs[i][addr - self.bases[i]:]

  def _locate(self, addrs: np.ndarray, nbytes: int, what: str) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Split addresses by mapping: [(mask, buffer, offsets)]; every byte must be mapped."""
    if (last := self._last) is not None and last[0] is addrs and last[1] == nbytes: return last[2]
    key = addrs
    addrs = addrs.astype(np.uint64, copy=False)
    if len(addrs) == 0: return []
    # the usual case, every address in one buffer, is decided from the lowest and highest address alone
    lo_a, hi_a = int(addrs.min()), int(addrs.max())
    i = bisect.bisect(self.bases, lo_a) - 1
    if i >= 0 and hi_a + nbytes <= self.bases[i] + len(self.bufs[i]):
      parts = [(slice(None), self.bufs[i], addrs - np.uint64(self.bases[i]) if self.bases[i] else addrs)]
      self._last = (key, nbytes, parts)
      return parts
    bases = np.array(self.bases, np.uint64)
    ends = np.array([b + len(m) for b, m in zip(self.bases, self.bufs)] + [0], np.uint64)
    idx = np.searchsorted(bases, addrs, side="right").astype(np.int64) - 1   # -1 (unmapped) picks the 0 end below
    ok = addrs + np.uint64(nbytes) <= ends[idx]
    if not ok.all():
      bad = int(addrs[~ok][0])
      raise MemoryFault(f"{what}: {nbytes}-byte access at 0x{bad:x} is outside every mapped buffer")
    out = []
    for r in np.unique(idx):
      m = idx == r
      out.append((m, self.bufs[r], addrs[m] - np.uint64(self.bases[r])))
    return out

  def read(self, addrs: np.ndarray, nbytes: int, what: str = "load") -> np.ndarray:
    """Read `nbytes` at each address -> uint8 array (len(addrs), nbytes)."""
    out = np.empty((len(addrs), nbytes), np.uint8)
    for m, buf, offs in self._locate(addrs, nbytes, what):
      out[m] = _gather(buf, offs, nbytes)
    return out

  def write(self, addrs: np.ndarray, data: np.ndarray, what: str = "store") -> None:
    """Write rows of `data` (len(addrs), nbytes) uint8; with duplicate addresses the last row wins."""
    nbytes = data.shape[1]
    for m, buf, offs in self._locate(addrs, nbytes, what):
      if not buf.flags.writeable: raise MemoryFault(f"{what}: buffer at this address is read-only")
      _scatter(buf, offs, data[m])

def _word_index(buf: np.ndarray, offs: np.ndarray, n: int) -> np.ndarray | None:
  """Word indices (len(offs),) for aligned whole-word accesses (the common case), else None (byte indexing)."""
  if n % 4 or len(buf) % 4: return None
  o = offs.view(np.int64)   # offsets are below the buffer length, far below 2**63
  if (o & 3).any(): return None
  return o >> 2

def _rows(buf: np.ndarray, w: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray] | None:
  """(buffer as n-byte elements, element indices) when every store is n-byte aligned (n = 8, 16): one index per lane."""
  if n not in (8, 16) or len(buf) % n or (w & (n // 4 - 1)).any(): return None
  return buf.view(np.dtype(f"V{n}")), w // (n // 4)

def _gather(buf: np.ndarray, offs: np.ndarray, n: int) -> np.ndarray:
  if (w := _word_index(buf, offs, n)) is not None:
    words = buf.view(np.uint32)
    if n == 4: return words[w].view(np.uint8).reshape(len(offs), n)
    # n-byte elements starting at every word (overlapping): one index per lane instead of one per word
    elems = np.ndarray((len(buf) // 4 - n // 4 + 1,), np.dtype(f"V{n}"), buffer=buf, strides=(4,))
    return elems[w].view(np.uint8).reshape(len(offs), n)
  return buf[offs.astype(np.int64)[:, None] + np.arange(n)]

def _scatter(buf: np.ndarray, offs: np.ndarray, data: np.ndarray) -> None:
  n = data.shape[1]
  if (w := _word_index(buf, offs, n)) is not None:
    d = np.ascontiguousarray(data)
    if n == 4: buf.view(np.uint32)[w] = d.view(np.uint32)[:, 0]
    elif (r := _rows(buf, w, n)) is not None: r[0][r[1]] = d.view(r[0].dtype)[:, 0]
    else: buf.view(np.uint32)[w[:, None] + np.arange(n // 4)] = d.view(np.uint32)
  else:
    buf[offs.astype(np.int64)[:, None] + np.arange(n)] = data
