"""The AMD mock's L2 of dirty dwords (hcqrt/mock/amd/memory.py DirtyL2, by page) answers exactly as the dword -> bytes
dict it replaced, under random writes through and around the L2, reads, dispatch stores, write-backs and unmaps; and an
SDMA-sized write-back is done a page at a time (the dict took seconds for 8 MiB)."""
import ctypes
import numpy as np
import pytest
from hcqrt.mock.amd.memory import BO, GPUVM, DirtyL2, PAGE

class DictL2:
  """The reference: what GPUVM's `dirty` was, a dict of dword address -> 4 bytes."""
  def __init__(self): self.d: dict[int, bytes] = {}
  def put(self, va, data):
    for i in range(0, len(data), 4): self.d[va + i] = bytes(data[i:i + 4])
  def drop(self, va, n):
    for a in range(va - va % 4, va + n, 4): self.d.pop(a, None)
  def overlay(self, va, data):
    for a in range(va - va % 4, va + len(data), 4):
      if (w := self.d.get(a)) is not None:
        for i in range(4):
          if 0 <= a + i - va < len(data): data[a + i - va] = w[i]

@pytest.mark.parametrize("seed", range(6))
def test_pages_answer_as_the_dict_of_dwords(seed):
  rng = np.random.default_rng(seed)
  base, size = 0x40000, 6 * PAGE
  got, want = DirtyL2(), DictL2()
  for _ in range(300):
    op = rng.integers(0, 5)
    va = base + int(rng.integers(0, size - 64))
    if op == 0:   # a CP/SDMA write through the L2: whole dwords, sometimes across a page
      va -= va % 4
      n = 4 * int(rng.integers(1, 3 * PAGE // 4 if rng.random() < 0.2 else 16))
      n = min(n, base + size - va)
      data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
      got.put(va, data); want.put(va, data)
    elif op == 1:   # a write around the L2 (any bytes): the dwords it overlaps are clean
      n = int(rng.integers(1, 2 * PAGE if rng.random() < 0.2 else 9))
      n = min(n, base + size - va)
      got.drop(va, n); want.drop(va, n)
    elif op == 2:   # a read sees the L2 over memory
      n = min(int(rng.integers(1, PAGE + 9)), base + size - va)
      mem = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
      a, b = bytearray(mem), bytearray(mem)
      got.overlay(va, a); want.overlay(va, b)
      assert a == b
    elif op == 3:   # a dispatch stored into some dwords: those dirty are taken out
      addrs = np.unique(base + 4 * rng.integers(0, size // 4, int(rng.integers(1, 200))))
      hit = got.take(addrs)
      assert hit.tolist() == [a for a in addrs.tolist() if a in want.d]
      for a in hit.tolist(): del want.d[a]
    else:
      a = base + 4 * int(rng.integers(0, size // 4))
      assert (a in got) == (a in want.d) and got.get(a) == want.d.get(a) and got.pop(a) == want.d.pop(a, None)
    assert list(got) == sorted(want.d) and len(got) == len(want.d) and bool(got) == bool(want.d)
  for pa, offs, words in got.dwords():
    assert [want.d[pa + o] for o in offs.tolist()] == [w.tobytes() for w in words]

def test_writeback_reaches_every_dirty_dword_and_only_those():
  vm = GPUVM(); bo = BO(1, 0x100000, 8 << 20, 0); vm.map(bo)
  host = np.ctypeslib.as_array((ctypes.c_uint8 * bo.size).from_address(bo.host))
  data = np.random.default_rng(1).integers(0, 256, 3 << 20, dtype=np.uint8)
  vm.write_cached(bo.va + 4096 + 4, data.tobytes())   # 3 MiB, from a dword that is not a page start
  vm.write_cached(bo.va + (6 << 20), b"wxyz")
  assert not host.any() and bytes(vm.read(bo.va + 4096, 12)) == b"\0" * 4 + data[:8].tobytes()
  vm.write(bo.va + 4096 + 8, b"!")   # around the L2: that dword is clean again, memory holds "!" and its old zeros
  vm.writeback()
  assert not vm.dirty and vm.writebacks == 1
  want = np.zeros(bo.size, np.uint8)
  want[4096 + 4:4096 + 4 + len(data)] = data
  want[4096 + 8:4096 + 12] = [ord("!"), 0, 0, 0]
  want[6 << 20:(6 << 20) + 4] = list(b"wxyz")
  assert np.array_equal(host, want)

def test_unmap_takes_only_that_bos_dirty_dwords_from_the_va_view():
  vm = GPUVM(); a, b = BO(1, 0x10000, PAGE, 0), BO(2, 0x10000 + PAGE, PAGE, 0); vm.map(a); vm.map(b)
  vm.write_cached(a.end - 8, b"12345678"); vm.write_cached(b.va, b"abcdefgh")   # the two BOs' neighbouring dwords
  vm.unmap(a)
  assert list(vm.dirty) == [b.va, b.va + 4] and vm.holds(a.frames) and not vm.holds(b.frames)

def test_unmapped_bos_dirty_lines_reach_its_memory_at_the_next_writeback():
  """The L2 is tagged by physical address and UNMAP neither writes it back nor invalidates it (memory.py GPUVM.unmap):
  the host, still mapping the BO, sees the old bytes until some later write-back brings the CP's."""
  vm = GPUVM(); a, other = BO(1, 0x10000, 2 * PAGE, 0), BO(2, 0x40000, PAGE, 0); vm.map(a); vm.map(other)
  vm.write_cached(a.va + PAGE + 4, b"late"); vm.write_cached(other.va, b"next")
  vm.unmap(a)
  assert ctypes.string_at(a.host + PAGE, 8) == bytes(8)
  vm.writeback()   # a release on any queue (here one that was for `other`) writes back every dirty line
  assert ctypes.string_at(a.host + PAGE, 8) == b"\0\0\0\0late" and ctypes.string_at(other.host, 4) == b"next"
  assert not vm.holds(a.frames) and not vm.dirty

def test_remapped_bo_shows_its_l2_lines_and_an_invalidate_drops_them():
  vm = GPUVM(); a = BO(1, 0x10000, PAGE, 0); vm.map(a)
  vm.write_cached(a.va, b"kept")
  vm.unmap(a); vm.map(a)
  assert bytes(vm.read(a.va, 4)) == b"kept" and ctypes.string_at(a.host, 4) == bytes(4)
  vm.unmap(a); vm.discard(); vm.map(a); vm.writeback()   # an L2 invalidate without the write-back loses them
  assert bytes(vm.read(a.va, 4)) == bytes(4) and ctypes.string_at(a.host, 4) == bytes(4)

@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
def test_a_freed_bos_dirty_lines_land_on_the_next_bo_given_its_memory(arch):
  """UNMAP and FREE issue no cache operation: the memory goes to the next BO of its size (cleared for it), while the L2
  still holds the old BO's dirty lines; the GPU reads them at once and a later write-back puts them in the new BO."""
  from hcqrt.amd.device import AMDDevice
  from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd
  drv = install_mock_amd(arch)
  try:
    dev = AMDDevice("AMD")
    old = dev.gpu_alloc(PAGE, "gtt", host=True)
    drv.vm.write_cached(old.va + 8, b"STALE!!!")   # a CP write (WRITE_DATA, no release since) held in the L2
    dev.gpu_free(old)
    new = dev.gpu_alloc(PAGE, "gtt", host=True)
    assert bytes(new.view()[:16]) == bytes(16)
    assert bytes(drv.vm.read(new.va + 8, 8)) == b"STALE!!!"   # the GPU hits the old lines: same memory, same L2
    if arch == "gfx1100": dev.submit_timeline(dev.hw_compute_queue()); dev.synchronize()   # our own next release (GL2 WB)
    else: drv.vm.writeback()   # (the gfx942 AQL mock writes back nothing of the CP's: any L2 write-back will do)
    assert bytes(new.view()[:16]) == bytes(8) + b"STALE!!!"
  finally: uninstall_mock_amd(drv)

def test_dispatch_view_refuses_an_l2_write_with_no_bo_mapped():
  """A dirty dword with no BO mapped at all (a mock bug): the clear error naming it, as with BOs mapped
  (test_amd_l1_persist.py), not an IndexError from the page-wise lookup (audit43)."""
  vm = GPUVM(); vm.dirty.put(0x8000, b"abcd")
  with pytest.raises(RuntimeError, match="L2 holds a CP write at 0x8000 that lies in no BO"):
    with vm.l2_seen_by_shaders(): pass

def test_gpuvm_refuses_a_bo_that_is_not_page_aligned():
  """The page-wise L2 and the dispatch view's dword index assume page-aligned BOs (all kfd.py makes); one at
  0x10002 would get its CP write placed 2 bytes off in the dispatch's copy, so it is refused when mapped (audit43)."""
  with pytest.raises(ValueError, match="BO at 0x10002 is not page aligned"): GPUVM().map(BO(1, 0x10002, PAGE, 0))

def test_writeback_refuses_a_dirty_dword_in_no_bo():
  """unmap moves a BO's lines to `held`, so one in no mapped BO is a mock bug: named, not silently skipped."""
  vm = GPUVM(); vm.map(BO(1, 0x10000, PAGE, 0))
  vm.dirty.put(0x20000, b"lost")
  with pytest.raises(RuntimeError, match="dirty dword at 0x20000 that lies in no BO"): vm.writeback()

@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
@pytest.mark.parametrize("kind", ["vram", "gtt"])
def test_freed_memory_is_cleared_when_freed_so_a_later_writeback_stays(arch, kind):
  """The kernel clears freed memory when it is released (VRAM_WIPE_ON_RELEASE by SDMA, then the blocks are marked
  cleared and the next VRAM_CLEARED allocation skips them; TTM pool pages when given back), around the L2: a write-back
  between FREE and the next ALLOC lands on memory the new BO gets as it is (kfd.py _release). The old BO's own bytes
  (the host's write) are gone; the L2's line is there (audit44)."""
  from hcqrt.amd.device import AMDDevice
  from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd
  drv = install_mock_amd(arch)
  try:
    dev = AMDDevice("AMD")
    old = dev.gpu_alloc(PAGE, kind, host=True)
    old.view()[:8] = b"HOSTDATA"
    drv.vm.write_cached(old.va + 8, b"STALE!!!")
    dev.gpu_free(old)
    drv.vm.writeback()   # a release on some queue before the next allocation
    new = dev.gpu_alloc(PAGE, kind, host=True)
    assert bytes(new.view()[:16]) == bytes(8) + b"STALE!!!" and not any(new.view()[16:])
  finally: uninstall_mock_amd(drv)

def test_a_freed_bo_the_process_still_maps_keeps_its_memory_until_munmap():
  """Each CPU mapping holds a GEM reference (drm_gem.c:1100-1106): FREE with the BO still mmapped releases nothing, so
  the next BO gets other memory (a write through the old mapping is not in it); after munmap the memory, with the
  L2's dirty line of it, goes to the next BO (audit44)."""
  from hcqrt import syscalls
  from hcqrt.amd.device import AMDDevice
  from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd
  drv = install_mock_amd("gfx1100")
  try:
    dev = AMDDevice("AMD")
    old = dev.gpu_alloc(PAGE, "gtt", host=True)
    drv.vm.write_cached(old.va + 8, b"STALE!!!")
    dev._map(old, unmap=True); dev.ioctl("AMDKFD_IOC_FREE_MEMORY_OF_GPU", handle=old.handle)   # still mmapped
    other = dev.gpu_alloc(PAGE, "gtt", host=True)
    ctypes.memmove(old.host, b"old-map!", 8)
    assert bytes(other.view()[:8]) == bytes(8) and bytes(drv.vm.read(other.va + 8, 8)) == bytes(8)
    syscalls.munmap(old.host, old.size)
    new = dev.gpu_alloc(PAGE, "gtt", host=True)
    assert bytes(drv.vm.read(new.va, 16)) == bytes(8) + b"STALE!!!"
  finally: uninstall_mock_amd(drv)

def _amd(arch):
  from hcqrt.amd.device import AMDDevice
  from hcqrt.mock.amd import install_mock_amd
  drv = install_mock_amd(arch)
  return drv, AMDDevice("AMD")

def _writeback(drv, dev, arch):
  if arch == "gfx1100": dev.submit_timeline(dev.hw_compute_queue()); dev.synchronize()   # our own next release (GL2 WB)
  else: drv.vm.writeback()   # (the gfx942 AQL mock writes back nothing of the CP's: any L2 write-back will do)

@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
@pytest.mark.parametrize("kind,page", [("gtt", 0), ("vram", 1)])
def test_a_smaller_bo_gets_part_of_a_freed_bo_and_its_l2_line(arch, kind, page):
  """The allocators hand out part of a freed block (kfd.py _take_pages): GTT's page allocator keeps the lower half of a
  split block (page 0), VRAM's buddy the right half (page 1). The 1-page BO gets the freed 2-page BO's page that the L2
  still holds a dirty line of: the GPU reads the stale line, and a write-back puts it in the new BO (review C; the
  same-size pool gave the 1-page BO new memory)."""
  from hcqrt.mock.amd import uninstall_mock_amd
  drv, dev = _amd(arch)
  try:
    old = dev.gpu_alloc(2 * PAGE, kind, host=True)
    drv.vm.write_cached(old.va + page * PAGE + 8, b"STALE!!!")
    dev.gpu_free(old)
    new = dev.gpu_alloc(PAGE, kind, host=True)
    assert bytes(new.view()[:16]) == bytes(16) and bytes(drv.vm.read(new.va + 8, 8)) == b"STALE!!!"
    _writeback(drv, dev, arch)
    assert bytes(new.view()[:16]) == bytes(8) + b"STALE!!!" and not any(new.view()[16:PAGE])
  finally: uninstall_mock_amd(drv)

@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
def test_a_larger_bo_gets_several_freed_bos_most_recent_first(arch):
  """Two freed 1-page GTT BOs, each with a dirty L2 line, are behind one 2-page BO: the last freed at page 0 (the
  per-CPU list is LIFO), the other at page 1; the process's mapping of the BO and the GPU both see the pages in that
  order, and each line lands in its page (review C)."""
  from hcqrt.mock.amd import uninstall_mock_amd
  drv, dev = _amd(arch)
  try:
    a, b = dev.gpu_alloc(PAGE, "gtt", host=True), dev.gpu_alloc(PAGE, "gtt", host=True)
    drv.vm.write_cached(a.va + 4, b"AAAA"); drv.vm.write_cached(b.va + 4, b"BBBB")
    dev.gpu_free(a); dev.gpu_free(b)
    new = dev.gpu_alloc(2 * PAGE, "gtt", host=True)
    assert bytes(drv.vm.read(new.va + 4, 4)) == b"BBBB" and bytes(drv.vm.read(new.va + PAGE + 4, 4)) == b"AAAA"
    new.view()[0] = 7; new.view()[PAGE] = 9   # the host's writes reach the pages the GPU reads
    assert drv.vm.read(new.va, 1)[0] == 7 and drv.vm.read(new.va + PAGE, 1)[0] == 9
    _writeback(drv, dev, arch)
    assert bytes(new.view()[4:8]) == b"BBBB" and bytes(new.view()[PAGE + 4:PAGE + 8]) == b"AAAA"
  finally: uninstall_mock_amd(drv)

def _memfds() -> int:
  import os
  n = 0
  for fd in os.listdir("/proc/self/fd"):
    try: n += os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:amdmock")
    except OSError: pass
  return n

def test_the_freed_page_pool_is_bounded_and_drops_the_oldest(monkeypatch):
  """The pool of freed pages keeps MockKFD.POOL_PAGES a domain, closing the oldest (and forgetting the L2's lines of
  them): a long-running process's mock does not grow with every free of a BO the L2 holds lines of. The most recent
  pages still come back with their lines; the oldest's line lands nowhere (review D: the pool kept every one)."""
  from hcqrt.mock.amd import uninstall_mock_amd
  from hcqrt.mock.amd.kfd import MockKFD
  monkeypatch.setattr(MockKFD, "POOL_PAGES", 2, raising=False)
  drv, dev = _amd("gfx1100")
  try:
    dev.gpu_free(dev.gpu_alloc(PAGE, "gtt", host=True))   # (whatever the first allocation sets up)
    base = _memfds()
    bos = [dev.gpu_alloc(PAGE, "gtt", host=True) for _ in range(4)]
    for i, b in enumerate(bos): drv.vm.write_cached(b.va + 4, b"BO%d!" % i)
    for b in bos: dev.gpu_free(b)
    assert _memfds() == base + 2
    new = [dev.gpu_alloc(PAGE, "gtt", host=True) for _ in range(3)]
    assert [bytes(drv.vm.read(n.va + 4, 4)) for n in new] == [b"BO3!", b"BO2!", bytes(4)]
    _writeback(drv, dev, "gfx1100")
    assert [bytes(n.view()[4:8]) for n in new] == [b"BO3!", b"BO2!", bytes(4)]
  finally: uninstall_mock_amd(drv)

@pytest.mark.parametrize("kind,page", [("gtt", 0), ("vram", 1)])
def test_a_failed_allocation_leaves_the_freed_pages_it_took_in_the_pool(monkeypatch, kind, page):
  """An ALLOC that takes freed pages and then finds no memory for the rest fails with the kernel's ENOMEM
  (amdgpu_gem_object_create failed), and the freed pages stay in the pool: the next BO gets the page, and the L2's
  dirty line of it, that it would have got (the pool lost them, and the ioctl failed with the mock's EMFILE)."""
  import errno
  from hcqrt.amd.device import AMDError
  from hcqrt.mock.amd import memory, uninstall_mock_amd
  drv, dev = _amd("gfx1100")
  try:
    old = dev.gpu_alloc(2 * PAGE, kind, host=True)
    drv.vm.write_cached(old.va + page * PAGE + 8, b"STALE!!!")
    dev.gpu_free(old)
    def no_memfd(size): raise OSError(errno.EMFILE, "memfd_create: Too many open files")
    monkeypatch.setattr(memory, "Pages", no_memfd)
    with pytest.raises(AMDError) as e: dev.gpu_alloc(3 * PAGE, kind, host=True)   # (2 freed pages and a new one)
    assert e.value.errno == errno.ENOMEM, e.value
    monkeypatch.undo()
    new = dev.gpu_alloc(PAGE, kind, host=True)
    assert bytes(drv.vm.read(new.va + 8, 8)) == b"STALE!!!"
  finally: uninstall_mock_amd(drv)

def test_a_freed_vram_bo_the_process_still_maps_stays_counted_until_munmap():
  """The KFD's VRAM limit is unreserved when the BO's last GEM reference goes (amdgpu_amdkfd_release_notify), and each
  CPU mapping holds one (drm_gem.c:1100-1106): AVAILABLE_MEMORY does not grow at FREE while the process still maps
  the BO, only at munmap (auditp44: the mock gave it back at FREE, letting an ALLOC through the kernel refuses)."""
  from hcqrt import syscalls
  from hcqrt.mock.amd import uninstall_mock_amd
  drv, dev = _amd("gfx1100")
  try:
    def avail() -> int: return dev.ioctl("AMDKFD_IOC_AVAILABLE_MEMORY", gpu_id=dev.gpu_id).available
    before = avail()
    b = dev.gpu_alloc(1 << 20, "vram", host=True)
    dev._map(b, unmap=True); dev.ioctl("AMDKFD_IOC_FREE_MEMORY_OF_GPU", handle=b.handle)
    assert before - avail() == 1 << 20
    syscalls.munmap(b.host, b.size)
    assert avail() == before
  finally: uninstall_mock_amd(drv)

def test_a_freed_bo_partly_unmapped_keeps_its_memory_while_the_rest_is_mapped():
  """munmap of the first page of a freed BO's mapping leaves the second mapped: that VMA still holds a GEM reference, so
  the memory is not released and the next BO gets other pages (auditp44: the whole mapping was dropped, the pages went
  to the next BO and the process's write through the surviving page landed in it)."""
  from hcqrt import syscalls
  from hcqrt.mock.amd import uninstall_mock_amd
  drv, dev = _amd("gfx1100")
  try:
    old = dev.gpu_alloc(2 * PAGE, "gtt", host=True)
    drv.vm.write_cached(old.va + PAGE + 8, b"STALE!!!")
    dev._map(old, unmap=True); dev.ioctl("AMDKFD_IOC_FREE_MEMORY_OF_GPU", handle=old.handle)
    syscalls.munmap(old.host, PAGE)
    new = dev.gpu_alloc(2 * PAGE, "gtt", host=True)
    ctypes.memmove(old.host + PAGE, b"OLD-MAP!", 8)
    assert not any(new.view()[:2 * PAGE]) and bytes(drv.vm.read(new.va, 2 * PAGE)) == bytes(2 * PAGE)
  finally: uninstall_mock_amd(drv)

def _memfd_mib() -> float:
  import os
  n = 0
  for fd in os.listdir("/proc/self/fd"):
    try: n += os.fstat(int(fd)).st_blocks * 512 if os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:amdmock") else 0
    except OSError: pass
  return n / (1 << 20)

def test_a_freed_bo_in_the_pool_holds_no_memory_but_its_l2_line():
  """A BO freed with one dirty L2 line is cleared (kfd.py _release) and its pages pooled: the clear gives the memory
  back (a hole punched in the memfd), so 16 MiB the host had written pin no memory, and the line still lands on the
  page the next BO gets (auditp44: a memset kept all 16 MiB resident while the pool held the pages)."""
  from hcqrt.mock.amd import uninstall_mock_amd
  drv, dev = _amd("gfx1100")
  try:
    base = _memfd_mib()
    old = dev.gpu_alloc(16 << 20, "gtt", host=True)
    old.view()[:] = b"\xff" * (16 << 20)
    assert _memfd_mib() - base >= 16
    drv.vm.write_cached(old.va + 8, b"STALE!!!")
    dev.gpu_free(old)
    assert _memfd_mib() - base < 1
    new = dev.gpu_alloc(PAGE, "gtt", host=True)
    assert not any(new.view()[:PAGE]) and bytes(drv.vm.read(new.va, 16)) == bytes(8) + b"STALE!!!"
  finally: uninstall_mock_amd(drv)
