"""Host memory standing in for GPU memory, and GPU virtual address spaces that map onto it.

Each RM memory object is backed by a memfd mapped into this process, so a client's mmap of the
object (MAP_SHARED of the same memfd) and the mock's "GPU" view are the same bytes. OS-descriptor
memory is the client's own memory, used in place.

  >>> m = HostMemory(8192); vs = GPUVASpace(0x1000, 1 << 40); vs.map(0x200000, m.size, m.addr)
  >>> vs.write(0x200010, b"hi"); bytes(m.view()[16:18])
  b'hi'
  >>> m.close()
"""
from __future__ import annotations
import bisect, ctypes, os
from hcqrt import syscalls

PAGE = 4096

def round_up(x: int, a: int) -> int: return (x + a - 1) // a * a

class HostMemory:
  """`size` bytes of zeroed, shareable host memory (a memfd mapped read/write here)."""
  def __init__(self, size: int, name: str = "nvmock"):
    if size <= 0: raise ValueError(f"memory size must be positive, got {size}")
    self.size = round_up(size, PAGE)
    self.fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.ftruncate(self.fd, self.size)
    self.addr = syscalls.mmap(self.fd, self.size, syscalls.PROT_READ | syscalls.PROT_WRITE, syscalls.MAP_SHARED, 0)

  def map_into(self, length: int, prot: int, addr: int | None, offset: int = 0) -> int:
    """Map (part of) this memory again, e.g. at a client's requested address (MAP_FIXED when addr is given)."""
    flags = syscalls.MAP_SHARED | (syscalls.MAP_FIXED if addr else 0)
    return syscalls.mmap(self.fd, length, prot, flags, offset, addr)

  def view(self) -> memoryview:
    return memoryview((ctypes.c_char * self.size).from_address(self.addr)).cast("B")

  def close(self) -> None:
    if self.fd >= 0:
      syscalls.munmap(self.addr, self.size); os.close(self.fd); self.fd = -1

class GPUVASpace:
  """A GPU virtual address space: non-overlapping [va, va+size) ranges, each backed by host memory at an address."""
  def __init__(self, base: int, size: int):
    self.base, self.limit = base, base + size
    self._starts: list[int] = []
    self._maps: dict[int, tuple[int, int]] = {}   # va -> (size, host address)
    self._next = base

  def map(self, va: int, size: int, host_addr: int) -> None:
    if va % PAGE or size <= 0: raise ValueError(f"GPU mapping {va:#x}+{size:#x} is not page aligned")
    if va < self.base or va + size > self.limit: raise ValueError(f"GPU mapping {va:#x}+{size:#x} outside VA space [{self.base:#x}, {self.limit:#x})")
    if self.overlaps(va, size): raise ValueError(f"GPU mapping {va:#x}+{size:#x} overlaps an existing mapping")
    bisect.insort(self._starts, va)
    self._maps[va] = (size, host_addr)

  def overlaps(self, va: int, size: int) -> bool:
    i = bisect.bisect_right(self._starts, va + size - 1)
    return i > 0 and self._starts[i - 1] + self._maps[self._starts[i - 1]][0] > va

  def unmap(self, va: int) -> None:
    if va not in self._maps: raise KeyError(f"no GPU mapping at {va:#x}")
    del self._maps[va]; self._starts.remove(va)

  def unmap_host_range(self, host_addr: int, size: int) -> None:
    """Drop every mapping backed by [host_addr, host_addr+size) (when its memory is freed)."""
    for va, (sz, h) in list(self._maps.items()):
      if host_addr <= h < host_addr + size: self.unmap(va)

  def alloc(self, size: int, align: int = PAGE) -> int:
    """Pick a free VA range (bump allocator; RM chooses the address for non-fixed DMA mappings)."""
    va = round_up(max(self._next, self.base), align)
    while self.overlaps(va, size): va = round_up(va + align, align)
    if va + size > self.limit: raise MemoryError(f"GPU VA space exhausted allocating {size:#x} bytes")
    self._next = va + size
    return va

  def translate(self, va: int, size: int = 1) -> int:
    """Host address of GPU VA `va`; the whole [va, va+size) must lie inside one mapping (else the GPU would fault)."""
    i = bisect.bisect_right(self._starts, va)
    if i:
      start = self._starts[i - 1]
      msize, host = self._maps[start]
      if va + size <= start + msize: return host + (va - start)
    raise MemoryError(f"GPU page fault: {va:#x}+{size:#x} is not mapped in this VA space")

  def view(self, va: int, size: int) -> memoryview:
    return memoryview((ctypes.c_char * size).from_address(self.translate(va, size))).cast("B")
  def read(self, va: int, size: int) -> bytes: return ctypes.string_at(self.translate(va, size), size)
  def write(self, va: int, data: bytes) -> None: ctypes.memmove(self.translate(va, len(data)), data, len(data))
  def mappings(self) -> list[tuple[int, int, int]]:
    return [(va, *self._maps[va]) for va in self._starts]
