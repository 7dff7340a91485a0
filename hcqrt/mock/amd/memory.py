"""Buffer objects standing in for VRAM/GTT and the GPU's view of them (the process's GPUVM).

Every BO is a memfd mapped into this process; a client's mmap of the BO through the render node maps the same
memfd at the BO's VA, so the host and the mock "GPU" see the same bytes. The GPU reaches a BO only while it is
mapped to the GPU (MAP_MEMORY_TO_GPU); anything else is a page fault.

The harmful cache rule: a CP write (RELEASE_MEM / WRITE_DATA) into memory not allocated UNCACHED lands in the
GPU L2 (`dirty`), which the GPU itself sees but the host does not, until a write-back (RELEASE_MEM with the
GL2 write-back bits, ACQUIRE_MEM with GL2_WB). So a signal released without the flush never arrives.
Lines outlive the mapping: an unmapped (or freed) BO's dirty lines stay in the L2 and reach its memory, or the
memory's next owner, at the next write-back (GPUVM.unmap cites the driver).

  >>> vm = GPUVM(); bo = BO(1, 0x10000, 8192, 0); vm.map(bo); vm.write(0x10008, b"ok"); bytes(vm.read(0x10008, 2))
  b'ok'
"""
from __future__ import annotations
import bisect, contextlib, ctypes, mmap as _mmap, os, weakref
import numpy as np
from collections.abc import Iterator, Sequence
from dataclasses import InitVar, dataclass, field
from hcqrt import syscalls

PAGE = 4096

class GPUFault(RuntimeError):
  """A GPU access to an address no BO of this process maps (the real GPU raises a VM fault and the queue dies)."""
  def __init__(self, msg: str, va: int = 0):
    super().__init__(msg); self.va = va

def round_up(x: int, a: int) -> int: return (x + a - 1) // a * a

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes, _libc.fallocate.restype = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64], ctypes.c_int
_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02   # linux/falloc.h
_libc.munmap.argtypes, _libc.munmap.restype = [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_int

def _unmap(addr: int, size: int) -> None:
  """munmap(2) of a mapping of the mock's own (no device's): not through syscalls.munmap, whose plain lock a finalizer
  may find taken, by the very thread the cyclic GC runs it on (a dropped mock's Pages, BO views: a deadlock)."""
  if _libc.munmap(addr, size) != 0: e = ctypes.get_errno(); raise OSError(e, f"mock BO memory: munmap({addr:#x}, {size:#x}): {os.strerror(e)}")

class Pages:
  """Memory pages (a memfd, with the mock's own mapping of all of it): what the L2 tags its lines with, one page a
  `Frame`. A BO is made of frames, new or left by freed BOs (kfd.py _release, _alloc_memory_of_gpu); a frame outlives
  its BO while the KFD pools it, and the memfd is closed with its last frame (`put`), at the KFD process's end
  (kfd.py MockKFD.exit), or once nothing holds the Pages (a BO or a whole mock dropped: `_gone`). Closing it frees no
  page a client still maps: a mapping holds its own reference to the file (__mmap_region takes it,
  linux@v6.12.117:mm/mmap.c:1463; remove_vma drops it when the VMA goes, mm/vma.c:329-334), so the memory stays
  valid to the client until its munmap."""
  def __init__(self, size: int):
    self.size, self.live = size, size // PAGE
    self.fd = os.memfd_create("amdmock", os.MFD_CLOEXEC)
    try:
      os.ftruncate(self.fd, size)
      self.host = syscalls.mmap(self.fd, size, _mmap.PROT_READ | _mmap.PROT_WRITE, _mmap.MAP_SHARED, 0)
    except BaseException: os.close(self.fd); raise
    self._gone = weakref.finalize(self, Pages._release, self.fd, self.host, size)
    self._gone.atexit = False   # (at interpreter exit the OS closes it)
  @staticmethod
  def _release(fd: int, host: int, size: int) -> None: _unmap(host, size); os.close(fd)
  def clear(self, i: int, n: int) -> None:
    """Pages i..i+n read as zeros again and hold no memory: a hole punched in the memfd (fallocate(2) FALLOC_FL_PUNCH_HOLE,
    which tmpfs supports). A memset of them took 1.5 s a GiB and kept a freed BO's every page resident while any one of
    them waited in the KFD's pool (kfd.py _release)."""
    if _libc.fallocate(self.fd, _FALLOC_FL_KEEP_SIZE | _FALLOC_FL_PUNCH_HOLE, i * PAGE, n * PAGE) != 0:
      e = ctypes.get_errno(); raise OSError(e, f"mock BO memory: fallocate(PUNCH_HOLE) of pages {i}..{i + n}: {os.strerror(e)}")
  def put(self, n: int = 1) -> None:
    """n of its frames are gone (a BO closed, the KFD's pool let them go): the memfd closes with the last."""
    self.live -= n
    if self.live <= 0: self.close()
  def close(self) -> None:
    self._gone(); self.fd = -1   # (a finalizer runs once: closing twice closes once)

Frame = tuple[Pages, int]   # one physical page: (its memfd, page index in it)

Run = tuple[int, "Pages", int, int]   # (first page in the BO, memfd, first page in it, pages)
PoolRun = tuple["Pages", int, int]    # (memfd, first page in it, pages): freed pages as the KFD's pool keeps them

class FrameList(Sequence):
  """A BO's pages, held as runs of one memfd: a BO of new memory is one run however large (a 177 MiB BO is 45k pages:
  a list of them cost every device open ~50 ms and 5 MiB), pages of freed BOs a run each at most."""
  def __init__(self, runs: list[Run]):
    self.runs, self._starts = runs, [r[0] for r in runs]
    # each memfd's runs, for `find` (GPUVM.map asks it each held page: a walk of every run made a 1024-run BO's MAP 0.4 s)
    self._of: dict[int, list[Run]] = {}
    for r in runs: self._of.setdefault(id(r[1]), []).append(r)
  def __len__(self) -> int: return self.runs[-1][0] + self.runs[-1][3] if self.runs else 0
  def __getitem__(self, k):   # type: ignore[override]
    if isinstance(k, slice): return [self[j] for j in range(*k.indices(len(self)))]
    if k < 0: k += len(self)
    if not 0 <= k < len(self): raise IndexError(f"page {k} of a {len(self)}-page BO")
    s, p, i, _ = self.runs[bisect.bisect_right(self._starts, k) - 1]
    return (p, i + k - s)
  def __iter__(self) -> Iterator[Frame]:
    for _, p, i, n in self.runs: yield from ((p, j) for j in range(i, i + n))
  def find(self, f: Frame) -> int | None:
    """The BO's page index of frame f, or None."""
    return next((s + f[1] - i for s, _, i, n in self._of.get(id(f[0]), ()) if i <= f[1] < i + n), None)
  def __contains__(self, f: object) -> bool: return isinstance(f, tuple) and self.find(f) is not None   # type: ignore[arg-type]

def map_frames(runs: list[Run], length: int, prot: int, addr: int | None = None) -> int:
  """Map the first `length` bytes of the pages `runs` name contiguously (at `addr` if given): one run is one mmap of
  its memfd, several are an address range reserved (PROT_NONE) and each run mapped into it (MAP_FIXED)."""
  fixed = syscalls.MAP_FIXED if addr else 0
  runs = [r for r in runs if r[0] * PAGE < length]
  if len(runs) == 1: return syscalls.mmap(runs[0][1].fd, length, prot, _mmap.MAP_SHARED | fixed, runs[0][2] * PAGE, addr)
  base = syscalls.mmap(-1, length, 0, _mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS | fixed, 0, addr)
  for k, p, i, n in runs:
    syscalls.mmap(p.fd, min(n * PAGE, length - k * PAGE), prot, _mmap.MAP_SHARED | syscalls.MAP_FIXED, i * PAGE, base + k * PAGE)
  return base

@dataclass(eq=False)
class BO:
  """One allocation: `va`..`va+size` for the GPU; `host` is the mock's own mapping of the same memory, its pages
  `frames`: the runs `given` (pages left by freed BOs, as the kernel clears them for their next owner: kfd.py _release,
  _alloc_memory_of_gpu), then new ones up to `size`."""
  handle: int
  va: int
  size: int
  flags: int
  gpu_mapped: set[int] = field(default_factory=set)
  cpu_maps: int = 0
  cpu_at: list[tuple[int, int, int]] = field(default_factory=list)   # (address, length, BO offset) of the process's CPU mappings
  given: InitVar[Sequence[PoolRun]] = ()
  frames: FrameList = field(init=False)

  def __post_init__(self, given: Sequence[PoolRun]):
    self.size = round_up(self.size, PAGE)
    runs: list[Run] = []
    for p, i, m in given:   # (runs of one memfd that meet are one: a window of its mapping, no view of several)
      if runs and runs[-1][1] is p and runs[-1][2] + runs[-1][3] == i: runs[-1] = (*runs[-1][:3], runs[-1][3] + m)
      else: runs.append((runs[-1][0] + runs[-1][3] if runs else 0, p, i, m))
    k = runs[-1][0] + runs[-1][3] if runs else 0
    if (n := self.size // PAGE - k) < 0: raise ValueError(f"mock BO: {k} pages given for {self.size:#x} bytes")
    new = Pages(n * PAGE) if n else None
    if new is not None: runs.append((k, new, 0, n))
    self.frames = FrameList(runs)
    # one run: a window of its memfd's own mapping; pages of several freed BOs: a mapping of its own (`_view`)
    self._view = len(runs) > 1
    try: self.host = map_frames(runs, self.size, _mmap.PROT_READ | _mmap.PROT_WRITE) if self._view else runs[0][1].host + runs[0][2] * PAGE
    except BaseException:
      if new is not None: new.close()   # (the pages given are still the caller's)
      raise
    # (a view maps the memfds, so holds their memory: it goes with the BO, a dropped one too, as Pages' mapping does)
    if self._view:
      self._drop_view = weakref.finalize(self, _unmap, self.host, self.size)
      # (not at interpreter exit, as Pages': atexit runs while daemon threads, the engine among them, still run and may
      # read the view: unmapped under them, a SIGSEGV. The OS unmaps it at exit)
      self._drop_view.atexit = False

  @property
  def end(self) -> int: return self.va + self.size

  def map_cpu(self, addr: int | None, length: int, prot: int) -> int:
    self.cpu_maps += 1
    at = map_frames(self.frames.runs, length, prot, addr)
    self.cpu_at.append((at, length, 0))
    return at

  def clear(self) -> None:
    """Its memory reads as zeros (kfd.py _release: cleared when freed)."""
    for _, p, i, n in self.frames.runs: p.clear(i, n)

  def drop_view(self) -> None:
    """The mock's own mapping goes (its frames stay, for the KFD's pool or `close`)."""
    if self._view: self._drop_view(); self._view = False

  def close(self) -> None:
    self.drop_view()
    for _, p, _, n in self.frames.runs: p.put(n)

def _merge(new: tuple[np.ndarray, np.ndarray], old: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray]:
  """One page's dirty dwords `new` over `old` (the newer write wins where both are dirty)."""
  if old is None: return new
  return np.where(np.repeat(new[1], 4), new[0], old[0]), new[1] | old[1]

class DirtyL2:
  """The L2's dirty dwords (CP and SDMA writes held in the cache, GPUVM.write_cached), by 4 KiB page: each page holds
  its bytes and a mask of the dwords that are dirty. It answers as a dict of dword address -> 4 bytes would (`in`,
  iteration in address order, get, pop), but a copy of megabytes is a few numpy operations a page instead of a Python
  one a dword: an 8 MiB SDMA copy and its write-back took 15 s as a dict (hw_tests' peer copy on the mock).

  >>> d = DirtyL2(); d.put(0x10004, b"abcdefgh"); sorted(d), d.get(0x10008), 0x10000 in d
  ([65540, 65544], b'efgh', False)
  >>> d.drop(0x10006, 1); sorted(d), len(d)
  ([65544], 1)
  """
  DWORDS = PAGE // 4
  def __init__(self):
    self.pages: dict[int, tuple[np.ndarray, np.ndarray]] = {}   # page address -> (PAGE bytes, DWORDS dirty flags)

  def __bool__(self) -> bool: return bool(self.pages)   # (a page whose last dirty dword goes is dropped)
  def __len__(self) -> int: return sum(int(m.sum()) for _, m in self.pages.values())
  def __iter__(self) -> Iterator[int]:
    for pa in sorted(self.pages): yield from (pa + 4 * np.flatnonzero(self.pages[pa][1])).tolist()
  def __contains__(self, a: int) -> bool:
    pg = self.pages.get(a - a % PAGE)
    return pg is not None and bool(pg[1][a % PAGE // 4])

  def get(self, a: int, default: bytes | None = None) -> bytes | None:
    pg = self.pages.get(a - a % PAGE)
    if pg is None or not pg[1][(o := a % PAGE) // 4]: return default
    return pg[0][o:o + 4].tobytes()

  def pop(self, a: int, default: bytes | None = None) -> bytes | None:
    if (v := self.get(a)) is None: return default
    self._clear(a - a % PAGE, a % PAGE // 4)
    return v

  def _clear(self, pa: int, words: int | slice | np.ndarray) -> None:
    """Dwords `words` (an index, a slice or an array of them) of page pa are clean now."""
    if (pg := self.pages.get(pa)) is None: return
    pg[1][words] = False
    if not pg[1].any(): del self.pages[pa]

  def _spans(self, va: int, n: int) -> Iterator[tuple[int, int, int]]:
    """(page address, first byte, end byte) in that page of [va, va + n)."""
    end = va + n
    while va < end:
      pa = va - va % PAGE
      stop = min(end, pa + PAGE)
      yield pa, va - pa, stop - pa
      va = stop

  def put(self, va: int, data: bytes) -> None:
    """`data` (whole dwords at a dword address) is held dirty."""
    assert va % 4 == 0 and len(data) % 4 == 0, (va, len(data))
    src = np.frombuffer(bytes(data), np.uint8)
    for pa, lo, hi in self._spans(va, len(src)):
      if (pg := self.pages.get(pa)) is None: pg = self.pages[pa] = (np.zeros(PAGE, np.uint8), np.zeros(self.DWORDS, bool))
      pg[0][lo:hi] = src[pa + lo - va:pa + hi - va]
      pg[1][lo // 4:hi // 4] = True

  def drop(self, va: int, n: int) -> None:
    """Every dword overlapping [va, va + n) is clean (a write to memory around the L2)."""
    for pa, lo, hi in self._spans(va - va % 4, n + va % 4): self._clear(pa, slice(lo // 4, (hi + 3) // 4))

  def overlay(self, va: int, data: bytearray) -> None:
    """The dirty bytes within [va, va + len(data)) written over `data` (memory's bytes there)."""
    out = np.frombuffer(data, np.uint8)
    for pa, lo, hi in self._spans(va, len(data)):
      if (pg := self.pages.get(pa)) is None: continue
      d0 = lo // 4
      take = np.repeat(pg[1][d0:(hi + 3) // 4], 4)[lo - 4 * d0:hi - 4 * d0]
      out[pa + lo - va:pa + hi - va][take] = pg[0][lo:hi][take]

  def take(self, addrs: np.ndarray) -> np.ndarray:
    """Of the dword addresses `addrs` (sorted), those that were dirty; they are clean now."""
    hits = []
    for pa in sorted(self.pages):
      lo, hi = np.searchsorted(addrs, [pa, pa + PAGE])
      if lo == hi: continue
      sel = addrs[lo:hi]
      mask = self.pages[pa][1]
      hit = sel[mask[(sel - pa) // 4]]
      if len(hit): hits.append(hit); self._clear(pa, (hit - pa) // 4)
    return np.concatenate(hits) if hits else np.zeros(0, np.int64)

  def dwords(self) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(page address, the page's dirty dword offsets in bytes, their bytes as (k, 4)) of every page holding any."""
    for pa in sorted(self.pages):
      data, mask = self.pages[pa]
      offs = 4 * np.flatnonzero(mask)
      yield pa, offs, data.reshape(-1, 4)[offs // 4]

class GPUVM:
  """The GPU virtual address space of one process on one GPU: BOs mapped by MAP_MEMORY_TO_GPU, plus the L2's dirty dwords."""
  def __init__(self):
    self.bos: list[BO] = []          # sorted by va
    self._vas: list[int] = []        # their VAs, for bisect
    self.dirty = DirtyL2()              # the dwords held in L2 (cached memory only)
    self.held: dict[Frame, tuple[np.ndarray, np.ndarray]] = {}   # dirty dwords of pages no longer mapped here (unmap)
    self.writebacks = 0
    self.vector_l1 = None   # the CUs' vector L1s / GL0s, kept across dispatches (gfx9/l1.py VectorL1; rdna3_executor makes it)
    self.gl1 = None         # gfx11: the shader arrays' GL1s under the GL0s, kept the same way (rdna3 Waves.set_gl0)
    self.icache: dict[int, bytes] = {}   # program VA -> the code bytes the instruction caches hold from there (cp.py execute)
    # L1 invalidates of releases not yet seen complete, in issue order (cp.py PendingInvalidate, land_pending)
    self.l1_pending: list = []
    self._shader_view: dict[int, int] = {}   # BO VA -> the private copy a running dispatch reads (l2_seen_by_shaders)

  def map(self, bo: BO) -> None:
    # DirtyL2 and the dispatch view index dwords by page and by (va - bo.va) // 4: they hold only for page-aligned BOs,
    # which is all ALLOC_MEMORY_OF_GPU makes (kfd.py _alloc_memory_of_gpu refuses va % PAGE, BO rounds the size up)
    if bo.va % PAGE: raise ValueError(f"mock GPUVM: BO at {bo.va:#x} is not page aligned")
    self.bos = sorted([b for b in self.bos if b is not bo] + [bo], key=lambda b: b.va)
    self._vas = [b.va for b in self.bos]
    # the L2's lines of this memory (held since an unmap, possibly by a BO freed since) are seen at the new VA
    for f in [f for f in self.held if f in bo.frames]:   # (few held pages, a BO's pages as runs: not a loop a page)
      pa = bo.va + bo.frames.find(f) * PAGE   # type: ignore[operator]
      self.dirty.pages[pa] = _merge(self.held.pop(f), self.dirty.pages.get(pa))
  def unmap(self, bo: BO) -> None:
    """The BO leaves this GPU's VM; its dirty L2 lines stay in the L2, as lines of its memory (`held`), not of its VA.
    Why, from the sources (Linux v6.12.117, drivers/gpu/drm/amd/): UNMAP_MEMORY_FROM_GPU clears the PTEs and waits for
    that update (amdkfd/kfd_chardev.c:1415-1438; amdgpu/amdgpu_amdkfd_gpuvm.c:2165-2217, unmap_bo_from_gpuvm :1241-1261),
    then on GC >= 9.4.2 (gfx942, gfx11) flushes the TLB (kfd_chardev.c:1440-1446, kfd_priv.h:1524-1538), a
    VM_INVALIDATE request of the page-table caches only: INVALIDATE_L2_PTES/PDE0-2/L1_PTES (amdgpu/gmc_v9_0.c:768-784).
    Nothing writes back or invalidates the data L2: no KFD packet manager from gfx9 on has a release_mem
    (amdkfd/kfd_packet_manager_v9.c:420, 439), and FREE_MEMORY_OF_GPU issues no cache operation either
    (amdgpu_amdkfd_gpuvm.c:1911-2011). The L2 is looked up by physical address: the vector L1's UTCL1 "translates
    requests from virtual to physical addresses for lookup in the cache" before a miss goes to the L2 (ROCm Compute
    Profiler docs-7.14.0, conceptual/cdna/vector-l1-cache), CPU writes probe and invalidate its lines (LLVM AMDGPUUsage,
    memory model GFX90A/GFX942), and its policy comes from the PTE's MTYPE (gmc_v9_0.c:1127-1215, gmc_v11_0.c:464-480);
    gfx11's GL2 tagging is not documented, taken the same. So the lines are neither lost nor written back at unmap:
    they reach the memory at the next L2 write-back (any queue's, `writeback`; a queue's dequeue too, by "On GFX v7,
    CP doesn't flush TC at dequeue", amdkfd/kfd_device_queue_manager.c:592-594, which the mock's DESTROY_QUEUE does
    not do: the lines stay longer, the harmful side) or never, if an invalidate drops them (`discard`); until then
    the host sees the old bytes. Mapped again, the BO shows them to
    the GPU again (`map`). If the BO is freed meanwhile, the memory goes to a later allocation and the write-back
    lands on that BO's bytes (kfd.py _free_memory_of_gpu): the harmful case of a free with dirty lines."""
    self.bos = [b for b in self.bos if b is not bo]
    self._vas = [b.va for b in self.bos]
    for pa in [pa for pa in self.dirty.pages if bo.va <= pa < bo.end]:
      f = bo.frames[(pa - bo.va) // PAGE]
      self.held[f] = _merge(self.dirty.pages.pop(pa), self.held.get(f))

  def holds(self, frames: Sequence[Frame]) -> bool:
    """Whether this GPU's L2 holds dirty lines of any of `frames` (a BO's) that no mapping of this VM reaches (an unmapped
    BO's). (It asks the few held pages, not each of a large BO's.)"""
    return any(f in frames for f in self.held)

  def forget(self, p: Pages, i: int, n: int = 1) -> None:
    """Pages i..i+n of memfd p left this process (the KFD's pool let them go, kfd.py _trim_pool): their lines can reach
    nobody here."""
    for f in [f for f in self.held if f[0] is p and i <= f[1] < i + n]: del self.held[f]

  def find(self, va: int, n: int = 1) -> BO:
    i = bisect.bisect_right(self._vas, va) - 1   # BOs never overlap: only the last one starting at or below va can hold it
    if i >= 0 and va + n <= (b := self.bos[i]).va + b.size: return b
    raise GPUFault(f"GPU page fault: {n} bytes at {va:#x} are not in a BO mapped to the GPU", va)

  def host(self, va: int, n: int = 1) -> int:
    """The mock's host address of GPU VA `va` (the whole n bytes must lie in one mapped BO)."""
    b = self.find(va, n)
    return b.host + (va - b.va)

  def flat_map(self) -> list[tuple[int, int, int]]:
    """(GPU VA, size, host address) of every BO mapped to the GPU: the flat memory map an ISA emulator runs on.
    (It sees memory, not this VM's L2: dirty CP writes are not in it; l2_seen_by_shaders puts them there for a dispatch.)"""
    return [(b.va, b.size, self._shader_view.get(b.va, b.host)) for b in self.bos]

  def read(self, va: int, n: int) -> bytearray:
    data = bytearray(ctypes.string_at(self.host(va, n), n))
    if self.dirty: self.dirty.overlay(va, data)   # the GPU sees its own L2
    return data

  def read32(self, va: int) -> int: return int.from_bytes(self.read(va, 4), "little")

  def write(self, va: int, data: bytes) -> None:
    ctypes.memmove(self.host(va, len(data)), bytes(data), len(data))
    if self.dirty: self.dirty.drop(va, len(data))

  def write_cached(self, va: int, data: bytes) -> None:
    """A CP write that goes through the L2: visible to the host only at once for UNCACHED memory."""
    from hcqrt.mock.amd.tables import UNCACHED
    bo = self.find(va, len(data))
    if bo.flags & UNCACHED or va % 4 or len(data) % 4: return self.write(va, data)
    self.dirty.put(va, data)

  def discard(self) -> None:
    """Invalidate the L2 without writing it back: dirty dwords are lost (memory keeps its old bytes). Documented for
    gfx9, the assumed worst case for gfx11 (see the ACQUIRE_MEM comment in cp.py)."""
    self.dirty, self.held = DirtyL2(), {}

  @contextlib.contextmanager
  def l2_seen_by_shaders(self) -> Iterator[None]:
    """While a dispatch runs, its loads see the L2's dirty dwords (the CP's writes): the shaders read memory through
    the same L2 the CP writes into. The emulator reads the BOs through flat_map, so a BO holding dirty dwords is
    given to it as a private copy with them in (the host, on its own thread meanwhile, must not see them). After the
    dispatch the bytes it changed in the copy reach the BO (the dispatch's end writes back what its stores left in the
    L2, gfx9/l2.py), and a dirty dword it stored into reaches the BO whole and is no longer dirty. A store of exactly the bytes already there
    is taken for no store (the dword stays dirty: the host sees the old bytes, the harmful side). NOT modelled:
    - a host write into such a BO while the dispatch runs is not seen by it;
    - gfx942's L2 per XCC: each XCC (XCD) has an L2 of its own (MI325X, gfx942: "32 (4 per XCD)" MiB of L2,
      rocm.docs.amd.com/en/7.13.0-preview/reference/gpu-specs.html; AMDGPUUsage "Memory Model GFX942": groups of CUs
      "each sharing separate L2 caches", gfx9/l2.py), but `dirty` is one L2 for them all, so a CP write run on one
      XCC only (a WRITE_DATA under PRED_EXEC in an AQL PM4-IB, cp.py) is seen here by the dispatch's workgroups on
      every XCC. Our backend's XCC-0-only CP writes (hcqrt/amd/device.py _segments: signals, written back to
      memory, event slots, timestamps) are never read by a dispatch.

      >>> vm = GPUVM(); bo = BO(1, 0x10000, 4096, 0); vm.map(bo); vm.write_cached(0x10000, b"new!")
      >>> with vm.l2_seen_by_shaders(): ctypes.string_at(vm.flat_map()[0][2], 4), ctypes.string_at(bo.host, 4)
      (b'new!', b'\\x00\\x00\\x00\\x00')
      >>> 0x10000 in vm.dirty
      True
    """
    by_bo: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    # (ends gets a 0 past the BOs so ends[max(idx, 0)] exists with no BO mapped; idx < 0 marks those dwords bad)
    vas, ends = np.array(self._vas, np.int64), np.array([b.end for b in self.bos] + [0], np.int64)
    for pa, offs, words in self.dirty.dwords():
      addrs = pa + offs
      idx = np.searchsorted(vas, addrs, side="right") - 1   # (the BO starting at or below each)
      # (unmap moves a BO's dirty dwords to `held`: one outside every BO is a mock bug, which must not become a stray memmove)
      if len(bad := addrs[(idx < 0) | (addrs + 4 > ends[np.maximum(idx, 0)])]):
        raise RuntimeError(f"mock GPUVM: the L2 holds a CP write at {int(bad[0]):#x} that lies in no BO mapped to the GPU")
      for i in np.unique(idx).tolist(): by_bo.setdefault(i, []).append((addrs[idx == i], words[idx == i]))
    copies: dict[int, tuple[BO, ctypes.Array, bytes]] = {}
    for i, parts in by_bo.items():
      bo = self.bos[i]
      buf = (ctypes.c_uint8 * bo.size).from_buffer_copy(ctypes.string_at(bo.host, bo.size))
      view = np.frombuffer(buf, np.uint8).reshape(-1, 4)   # (BOs and dirty dwords are dword aligned)
      for addrs, words in parts: view[(addrs - bo.va) // 4] = words
      copies[bo.va] = (bo, buf, bytes(buf))
    self._shader_view = {va: ctypes.addressof(buf) for va, (_, buf, _) in copies.items()}
    try: yield
    finally:
      self._shader_view = {}
      for bo, buf, before in copies.values():
        after = np.frombuffer(buf, np.uint8)
        if not (changed := np.flatnonzero(after != np.frombuffer(before, np.uint8))).size: continue
        host = np.ctypeslib.as_array((ctypes.c_uint8 * bo.size).from_address(bo.host))
        host[changed] = after[changed]
        # a dirty dword stored into reaches memory whole, the CP's bytes too, and is clean
        hit = self.dirty.take(bo.va + 4 * np.unique(changed // 4)) - bo.va
        host[hit[:, None] + np.arange(4)] = after[hit[:, None] + np.arange(4)]

  def writeback(self) -> None:
    """Write every dirty L2 dword back to memory (what the GL2 write-back bits do)."""
    d, self.dirty = self.dirty, DirtyL2()
    held, self.held = self.held, {}
    for (p, i), (data, mask) in held.items():   # the lines of unmapped pages too: the L2 writes back by physical address (unmap)
      if p.fd < 0: raise RuntimeError(f"mock GPUVM: the L2 holds lines of page {i} of a closed memfd (forget was not called)")
      mem = np.ctypeslib.as_array((ctypes.c_uint8 * PAGE).from_address(p.host + i * PAGE)).reshape(-1, 4)
      mem[mask] = data.reshape(-1, 4)[mask]
    for pa, offs, words in d.dwords():
      # (a page lies in one BO, all page aligned, and unmap moves a BO's lines to `held`: one in no BO is a mock bug)
      try: host = np.ctypeslib.as_array((ctypes.c_uint8 * PAGE).from_address(self.host(pa + int(offs[0]), int(offs[-1] - offs[0]) + 4) - int(offs[0])))
      except GPUFault: raise RuntimeError(f"mock GPUVM: the L2 holds a dirty dword at {pa + int(offs[0]):#x} that lies in no BO mapped to the GPU") from None
      host.reshape(-1, 4)[offs // 4] = words
    if d or held: self.writebacks += 1
