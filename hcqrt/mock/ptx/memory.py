"""GPU virtual memory for the PTX interpreter: virtual address ranges backed by host buffers.

The NV mock backs it with its GPU memory; tests map numpy arrays directly.

>>> import numpy as np
>>> mem = AddressSpace()
>>> buf = np.zeros(16, np.uint8)
>>> mem.map(0x1000, buf)
>>> mem.write(0x1004, b"\\x01\\x02")
>>> mem.read(0x1003, 4)
b'\\x00\\x01\\x02\\x00'
"""
from __future__ import annotations
import bisect
import numpy as np

class MemoryFault(RuntimeError):
  """An access that falls outside every mapping, or a misaligned access."""

class _Mapping:
  __slots__ = ("bytes", "size", "va", "views")
  def __init__(self, va: int, backing):
    arr = np.frombuffer(backing, dtype=np.uint8) if not isinstance(backing, np.ndarray) else backing.reshape(-1).view(np.uint8)
    if arr.flags.writeable is False: raise ValueError(f"backing for va {va:#x} is read-only")
    self.va, self.size, self.bytes = va, arr.size, arr
    self.views: dict[np.dtype, np.ndarray] = {}

  def typed(self, dt: np.dtype) -> np.ndarray:
    """This mapping's bytes seen as dtype `dt` (cached); element i starts at byte i*itemsize."""
    v = self.views.get(dt)
    if v is None: v = self.views[dt] = self.bytes[:self.size - self.size % dt.itemsize].view(dt)
    return v

class AddressSpace:
  """GPU virtual memory: maps [va, va+size) ranges to host bytearrays/memoryviews/numpy uint8 arrays.

  Vectorised accessors (`gather`/`scatter`) take numpy arrays of addresses; every access must be
  naturally aligned (as on the GPU) and lie inside one mapping, else MemoryFault names the address.

  >>> mem = AddressSpace(); a = np.arange(4, dtype=np.float32); mem.map(0x2000, a.view(np.uint8))
  >>> mem.gather(np.array([0x2004, 0x200c], np.uint64), np.dtype(np.float32)).tolist()
  [1.0, 3.0]
  """
  def __init__(self):
    self._starts: list[int] = []
    self._maps: list[_Mapping] = []

  def map(self, va: int, backing) -> None:
    """Map `backing` (writable bytes-like or numpy array) at virtual address `va`."""
    m = _Mapping(va, backing)
    i = bisect.bisect_right(self._starts, va)
    if m.size == 0: raise ValueError(f"empty mapping at {va:#x}")
    if (i > 0 and self._maps[i-1].va + self._maps[i-1].size > va) or (i < len(self._maps) and va + m.size > self._starts[i]):
      raise ValueError(f"mapping [{va:#x}, {va+m.size:#x}) overlaps an existing mapping")
    self._starts.insert(i, va); self._maps.insert(i, m)

  def unmap(self, va: int) -> None:
    """Remove the mapping that starts at `va`."""
    i = bisect.bisect_left(self._starts, va)
    if i == len(self._starts) or self._starts[i] != va: raise ValueError(f"no mapping starts at {va:#x}")
    del self._starts[i], self._maps[i]

  def is_mapped(self, va: int, n: int = 1) -> bool:
    """True when [va, va+n) lies inside one mapping."""
    try: self._find(va, n, "check"); return True
    except MemoryFault: return False

  def _find(self, va: int, n: int, what: str) -> _Mapping:
    i = bisect.bisect_right(self._starts, va) - 1
    if i >= 0:
      m = self._maps[i]
      if va + n <= m.va + m.size: return m
    raise MemoryFault(f"{what}: {n} bytes at {va:#x} outside every mapping" + self._near(va))

  def _near(self, va: int) -> str:
    i = bisect.bisect_right(self._starts, va) - 1
    if i < 0: return " (below all mappings)" if self._maps else " (nothing mapped)"
    m = self._maps[i]
    return f" (nearest mapping below: [{m.va:#x}, {m.va+m.size:#x}))"

  def read(self, va: int, n: int) -> bytes:
    """Read `n` bytes at `va` (must lie inside one mapping)."""
    m = self._find(va, n, "read"); o = va - m.va
    return m.bytes[o:o+n].tobytes()

  def write(self, va: int, data: bytes) -> None:
    """Write `data` at `va` (must lie inside one mapping)."""
    m = self._find(va, len(data), "write"); o = va - m.va
    m.bytes[o:o+len(data)] = np.frombuffer(bytes(data), np.uint8)

  # *** vectorised access used by the interpreter ***
  def _locate(self, addrs: np.ndarray, nbytes: int, itemsize: int, what: str):
    """Yield (mapping, selector or None, element index array) groups covering `addrs`.
    Fast path: all addresses in one mapping (the common case), no Python per element."""
    if addrs.size == 0: return []
    if int(np.bitwise_or.reduce(addrs)) & (itemsize - 1):   # one pass; itemsize is a power of two
      bad = int(addrs[(addrs & np.uint64(itemsize - 1)) != 0][0])
      raise MemoryFault(f"{what}: misaligned {itemsize}-byte access at {bad:#x}")
    lo, hi = int(addrs.min()), int(addrs.max())
    i = bisect.bisect_right(self._starts, lo) - 1
    if i >= 0:
      m = self._maps[i]
      if hi + nbytes <= m.va + m.size and m.va % itemsize == 0:
        # a shift, not //: numpy's uint64 floor division costs more than the gather itself
        return [(m, None, ((addrs - np.uint64(m.va)) >> np.uint64(itemsize.bit_length() - 1)).view(np.intp))]
    # slow path: several mappings (or an unaligned mapping base); check every address
    starts = np.array(self._starts, dtype=np.uint64)
    idx = np.searchsorted(starts, addrs, side="right").astype(np.intp) - 1
    out = []
    for mi in np.unique(idx):
      sel = idx == mi
      a = addrs[sel]
      m = self._maps[mi] if mi >= 0 else None
      if m is None or int(a.max()) + nbytes > m.va + m.size:
        bad = a if m is None else a[a + np.uint64(nbytes) > np.uint64(m.va + m.size)]
        raise MemoryFault(f"{what}: {nbytes} bytes at {int(bad[0]):#x} outside every mapping" + self._near(int(bad[0])))
      out.append((m, sel, (a - np.uint64(m.va)).astype(np.intp)))
    return out

  def gather(self, addrs: np.ndarray, dt: np.dtype, vec: int = 1, what: str = "load") -> np.ndarray:
    """Load `vec` consecutive elements of `dt` at each address -> shape (n,) or (n, vec)."""
    addrs = np.asarray(addrs, dtype=np.uint64).reshape(-1)
    sz = dt.itemsize
    locs = self._locate(addrs, sz * vec, sz, what)
    if vec == 1 and len(locs) == 1 and locs[0][1] is None: return locs[0][0].typed(dt)[locs[0][2]]   # the common case, no copy
    out = np.empty((addrs.size, vec), dt)
    for m, sel, idx in locs:
      if sel is None:
        t = m.typed(dt)
        out[:] = t[idx[:, None] + np.arange(vec)] if vec > 1 else t[idx][:, None]
      else:  # byte-wise gather: the mapping base may not be aligned to the element size
        b = m.bytes[idx[:, None] + np.arange(sz * vec)]
        out[sel] = b.view(dt).reshape(-1, vec)
    return out[:, 0] if vec == 1 else out

  def scatter(self, addrs: np.ndarray, dt: np.dtype, values: np.ndarray, vec: int = 1, what: str = "store") -> None:
    """Store values (shape (n,) or (n, vec), dtype dt) at each address; later threads win on conflicts."""
    addrs = np.asarray(addrs, dtype=np.uint64).reshape(-1)
    sz = dt.itemsize
    vals = np.broadcast_to(np.asarray(values, dtype=dt).reshape(-1, vec) if vec > 1 else np.asarray(values, dtype=dt).reshape(-1, 1), (addrs.size, vec))
    for m, sel, idx in self._locate(addrs, sz * vec, sz, what):
      if sel is None:
        t = m.typed(dt)
        if vec == 1: t[idx] = vals[:, 0]
        else: t[idx[:, None] + np.arange(vec)] = vals
      else:
        m.bytes[idx[:, None] + np.arange(sz * vec)] = np.ascontiguousarray(vals[sel]).view(np.uint8).reshape(-1, sz * vec)
