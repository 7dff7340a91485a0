"""Host memory standing in for GPU memory, and GPU virtual address spaces that map onto it.

Each RM memory object is backed by a memfd mapped into this process, so a client's mmap of the
object (MAP_SHARED of the same memfd) and the mock's "GPU" view are the same bytes. OS-descriptor
memory is the client's own memory, used in place.

GPU-cacheable system memory is modelled the harmful way real hardware allows (RM's mem_mgr/mem.c:
GPU caching of sysmem is not coherent with the CPU): every GPU access to such a mapping goes through
an L2 of 128-byte lines (`L2Lines`). GPU writes (semaphore releases, copy-engine writes, kernel stores)
stay in dirty lines the CPU cannot see until the L2 is flushed (`flush_l2`: host MEM_OP_D
L2_FLUSH_DIRTY or L2_SYSMEM_INVALIDATE, or RM's FB_FLUSH_GPU_CACHE control); lines the GPU has read
stay cached, so later CPU writes are not seen by the GPU until an L2_SYSMEM_INVALIDATE. Uncached
sysmem and video memory (the CPU reaches it through BAR1, behind the L2) are coherent at once.
`read`/`write` are the GPU's accesses (they honour the cache); the CPU uses the host memory directly.

  >>> m = HostMemory(8192); vs = GPUVASpace(0x1000, 1 << 40); vs.map(0x200000, m.size, m.addr)
  >>> vs.write(0x200010, b"hi"); bytes(m.view()[16:18])
  b'hi'
  >>> m.close()
"""
from __future__ import annotations
import bisect, contextlib, ctypes, os
from typing import Any
from collections.abc import Iterator
import numpy as np
from hcqrt import syscalls

PAGE = 4096
L2_LINE = 128
# host method MEM_OP_D (offset 0x34 in every host class from Ampere on, OPERATION in bits 31:27; clc56f.h, clc86f.h):
# the operations that write dirty sysmem lines back (the mock's own reading of the class header)
MEM_OP_D_OFFSET = 0x34
MEM_OP_D_L2_SYSMEM_INVALIDATE, MEM_OP_D_L2_FLUSH_DIRTY = 0x0E, 0x10
def mem_op_d_operation(data: int) -> int: return (data >> 27) & 0x1F
_NO_CACHED_SYSMEM = contextlib.nullcontext()

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

class L2Lines:
  """The GPU L2's copy of one GPU-cacheable sysmem mapping: a shadow buffer and a state per 128-byte line
  (0 not cached, 1 clean, 2 dirty). The GPU sees the shadow; the CPU sees `host`."""
  def __init__(self, host: int, size: int):
    self.host, self.size = host, size
    self.shadow = (ctypes.c_char * size)()
    self.addr = ctypes.addressof(self.shadow)
    self.state = np.zeros((size + L2_LINE - 1) // L2_LINE, np.uint8)
    self._snap: np.ndarray | None = None

  def _np(self, addr: int) -> np.ndarray: return np.frombuffer((ctypes.c_char * self.size).from_address(addr), np.uint8)

  def fill(self, off: int, n: int) -> None:
    """Bring the lines covering [off, off+n) into the L2 (from host memory) if they are not cached."""
    lo, hi = off // L2_LINE, (off + n + L2_LINE - 1) // L2_LINE
    miss = np.nonzero(self.state[lo:hi] == 0)[0]
    if not len(miss): return
    sh, ho = self._np(self.addr), self._np(self.host)
    for ln in (miss + lo).tolist():
      a, b = ln * L2_LINE, min((ln + 1) * L2_LINE, self.size)
      sh[a:b] = ho[a:b]
    self.state[miss + lo] = 1

  def read(self, off: int, n: int) -> bytes:
    self.fill(off, n)
    return ctypes.string_at(self.addr + off, n)

  def write(self, off: int, data: bytes) -> None:
    self.fill(off, len(data))
    ctypes.memmove(self.addr + off, data, len(data))
    self.state[off // L2_LINE:(off + len(data) + L2_LINE - 1) // L2_LINE] = 2

  def begin_kernel(self) -> None:
    """A kernel may read anything: cache every line, and remember what the L2 held to find its stores later."""
    self.fill(0, self.size)
    self._snap = self._np(self.addr).copy()

  def end_kernel(self) -> None:
    assert self._snap is not None
    changed = (self._np(self.addr) != self._snap)
    pad = (-len(changed)) % L2_LINE
    lines = np.concatenate([changed, np.zeros(pad, bool)]).reshape(-1, L2_LINE).any(axis=1)
    self.state[lines] = 2
    self._snap = None

  def flush(self, invalidate: bool = False) -> None:
    """Write dirty lines back to host memory; `invalidate` also drops every line."""
    dirty = np.nonzero(self.state == 2)[0]
    if len(dirty):
      sh, ho = self._np(self.addr), self._np(self.host)
      for ln in dirty.tolist():
        a, b = ln * L2_LINE, min((ln + 1) * L2_LINE, self.size)
        ho[a:b] = sh[a:b]
      self.state[dirty] = 1
    if invalidate: self.state[:] = 0

class GPUVASpace:
  """A GPU virtual address space: non-overlapping [va, va+size) ranges, each backed by host memory at an address."""
  def __init__(self, base: int, size: int):
    self.base, self.limit = base, base + size
    self._starts: list[int] = []
    self._maps: dict[int, tuple[int, int]] = {}   # va -> (size, host address)
    self._l2: dict[int, L2Lines] = {}             # va -> L2 lines of a GPU-cached sysmem mapping
    self._next = base
    self.icache: dict[int, Any] = {}   # program VA -> the KnownKernel whose code the instruction caches hold (gpfifo.py fetch_code)
    self.ccache: dict[int, bytes] = {}   # line VA -> the bytes the constant cache holds from there (constcache.py)

  def map(self, va: int, size: int, host_addr: int, gpu_cached: bool = False) -> None:
    """Map [va, va+size) onto host memory; `gpu_cached` marks GPU-cacheable system memory (see the module doc)."""
    if va % PAGE or size <= 0: raise ValueError(f"GPU mapping {va:#x}+{size:#x} is not page aligned")
    if va < self.base or va + size > self.limit: raise ValueError(f"GPU mapping {va:#x}+{size:#x} outside VA space [{self.base:#x}, {self.limit:#x})")
    if self.overlaps(va, size): raise ValueError(f"GPU mapping {va:#x}+{size:#x} overlaps an existing mapping")
    bisect.insort(self._starts, va)
    self._maps[va] = (size, host_addr)
    if gpu_cached: self._l2[va] = L2Lines(host_addr, size)

  def is_gpu_cached(self, va: int) -> bool:
    """Whether GPU accesses at `va` go through the non-coherent L2 (GPU-cacheable sysmem)."""
    i = bisect.bisect_right(self._starts, va)
    return i > 0 and self._starts[i - 1] in self._l2 and va < self._starts[i - 1] + self._maps[self._starts[i - 1]][0]

  def overlaps(self, va: int, size: int) -> bool:
    i = bisect.bisect_right(self._starts, va + size - 1)
    return i > 0 and self._starts[i - 1] + self._maps[self._starts[i - 1]][0] > va

  def unmap(self, va: int) -> None:
    if va not in self._maps: raise KeyError(f"no GPU mapping at {va:#x}")
    if (l2 := self._l2.pop(va, None)) is not None: l2.flush()   # the mock writes dirty lines back when a mapping goes away
    del self._maps[va]; self._starts.remove(va)

  def unmap_host_range(self, host_addr: int, size: int) -> None:
    """Drop every mapping backed by [host_addr, host_addr+size) (when its memory is freed)."""
    for va, (_sz, h) in list(self._maps.items()):
      if host_addr <= h < host_addr + size: self.unmap(va)

  def alloc(self, size: int, align: int = PAGE) -> int:
    """Pick a free VA range (bump allocator; RM chooses the address for non-fixed DMA mappings)."""
    va = round_up(max(self._next, self.base), align)
    while self.overlaps(va, size): va = round_up(va + align, align)
    if va + size > self.limit: raise MemoryError(f"GPU VA space exhausted allocating {size:#x} bytes")
    self._next = va + size
    return va

  def _find(self, va: int, size: int) -> tuple[int, int]:
    i = bisect.bisect_right(self._starts, va)
    if i:
      start = self._starts[i - 1]
      msize, host = self._maps[start]
      if va + size <= start + msize: return start, host
    raise MemoryError(f"GPU page fault: {va:#x}+{size:#x} is not mapped in this VA space")

  def translate(self, va: int, size: int = 1) -> int:
    """Host (CPU-side) address of GPU VA `va`; the whole [va, va+size) must lie inside one mapping (else the GPU would fault)."""
    start, host = self._find(va, size)
    return host + (va - start)

  def view(self, va: int, size: int) -> memoryview:
    return memoryview((ctypes.c_char * size).from_address(self.translate(va, size))).cast("B")
  def read(self, va: int, size: int) -> bytes:
    """A GPU read of [va, va+size) (through the L2 for GPU-cached sysmem)."""
    start, host = self._find(va, size)
    if (l2 := self._l2.get(start)) is not None: return l2.read(va - start, size)
    return ctypes.string_at(host + (va - start), size)
  def write(self, va: int, data: bytes) -> None:
    """A GPU write (semaphore release, copy, report): GPU-cached sysmem keeps it in dirty L2 lines until a flush."""
    start, host = self._find(va, len(data))
    if (l2 := self._l2.get(start)) is not None: l2.write(va - start, data); return
    ctypes.memmove(host + (va - start), data, len(data))
  gpu_read, gpu_write = read, write

  def flush_l2(self, invalidate: bool = False) -> None:
    """Write every dirty L2 line back to host memory (L2_FLUSH_DIRTY); `invalidate` also drops the lines (L2_SYSMEM_INVALIDATE)."""
    for l2 in self._l2.values(): l2.flush(invalidate)

  def mem_op(self, data: int) -> None:
    """Host method MEM_OP_D: the L2 operations that reach system memory."""
    op = mem_op_d_operation(data)
    if op in (MEM_OP_D_L2_FLUSH_DIRTY, MEM_OP_D_L2_SYSMEM_INVALIDATE): self.flush_l2(invalidate=op == MEM_OP_D_L2_SYSMEM_INVALIDATE)

  def kernel_access(self) -> contextlib.AbstractContextManager:
    """Around a kernel launch: the kernel's loads and stores to GPU-cached sysmem go through the L2 (`mappings` hands
    the interpreter the L2's shadow for those ranges); stores found afterwards become dirty lines."""
    return self._kernel_l2() if self._l2 else _NO_CACHED_SYSMEM

  @contextlib.contextmanager
  def _kernel_l2(self) -> Iterator[None]:
    for l2 in self._l2.values(): l2.begin_kernel()
    try: yield
    finally:
      for l2 in self._l2.values(): l2.end_kernel()

  def mappings(self) -> list[tuple[int, int, int]]:
    """(va, size, address the GPU's accesses use): host memory, or the L2 shadow of a GPU-cached sysmem mapping."""
    return [(va, self._maps[va][0], self._l2[va].addr if va in self._l2 else self._maps[va][1]) for va in self._starts]
