"""A first-fit allocator of GPU virtual addresses inside one reserved range, merging freed neighbours.

KFD leaves the choice of GPU VA to the process (ALLOC_MEMORY_OF_GPU takes va_addr); the GPUVM aperture is 2^47
bytes (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_flat_memory.c:344-361), so the range is sized to what can
be allocated at all (VRAM + GTT) and freed ranges coalesce, so that allocating and freeing buffers of changing
sizes never runs out while little is live.

  >>> va = VARange(0x100000, 0x40000)
  >>> a, b, c = va.take(0x10000, 0x1000), va.take(0x10000, 0x1000), va.take(0x10000, 0x1000)
  >>> va.give(a, 0x10000); va.give(b, 0x10000); hex(va.take(0x20000, 0x10000))   # a and b merged
  '0x100000'
  >>> va.give(0x100000, 0x20000); va.give(c, 0x10000); va.free
  [(1048576, 262144)]
"""
from __future__ import annotations
import bisect

class VARange:
  """[base, base + size) handed out in aligned pieces; `free` is the sorted list of (start, size) holes."""
  def __init__(self, base: int, size: int):
    self.base, self.size = base, size
    self.free: list[tuple[int, int]] = [(base, size)]

  def take(self, size: int, align: int) -> int:
    """The lowest `align`-aligned address with `size` free bytes; MemoryError naming the sizes when none is left."""
    for i, (s, n) in enumerate(self.free):
      a = -(-s // align) * align
      if a + size > s + n: continue
      pieces = [(s, a - s)] if a > s else []
      if a + size < s + n: pieces.append((a + size, s + n - a - size))
      self.free[i:i + 1] = pieces
      return a
    raise MemoryError(f"reserved GPU VA range of {self.size:#x} bytes has no free {size:#x} bytes (largest hole "
                      f"{max((n for _, n in self.free), default=0):#x})")

  def give(self, start: int, size: int) -> None:
    """Return [start, start + size), merging it with the holes it touches."""
    i = bisect.bisect_left(self.free, (start, 0))
    if (i < len(self.free) and start + size > self.free[i][0]) or (i and self.free[i - 1][0] + self.free[i - 1][1] > start):
      raise ValueError(f"VA {start:#x}+{size:#x} is already free")
    if i < len(self.free) and start + size == self.free[i][0]: size += self.free.pop(i)[1]
    if i and self.free[i - 1][0] + self.free[i - 1][1] == start:
      start, size = self.free[i - 1][0], self.free[i - 1][1] + size; i -= 1; self.free.pop(i)
    self.free.insert(i, (start, size))
