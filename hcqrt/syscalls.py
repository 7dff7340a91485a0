"""The one seam through which backends touch device files: open, ioctl, mmap, munmap, close, the
sysfs reads a driver's topology needs (listdir, read_text), and register/doorbell stores (mmio_write32/64).

Real calls go to the OS (os + ctypes libc). `install(driver)` puts a fake kernel driver in front:
paths it claims are opened (or listed / read) by it, and every later call on an fd (or mapping) it
produced is routed to it, so a backend cannot tell it is talking to a mock.

A fake driver implements `claims(path) -> bool` and the same five calls, with the ioctl argument
given as an address in this process (as a kernel sees a user pointer):
  open(path, flags) -> fd;  ioctl(fd, request, argp: int) -> int;  mmap(fd, length, prot, flags, offset, addr) -> int;
  munmap(addr, length) -> None;  close(fd) -> None;  forget_mapping(addr, length) -> None (part of its mappings went
  without a munmap routed to it: a MAP_FIXED over it, or a munmap that does not start where a mapping of it starts).
It raises OSError(errno, ...) the way the kernel would fail the call. A driver that claims sysfs paths
(the AMD KFD topology) also implements listdir(path) -> list[str] and read_text(path) -> str; one that
wants to see doorbell stores into its mappings implements mmio_write32(addr, value) / mmio_write64(addr, value).

  >>> import os
  >>> fd = open("/dev/null", os.O_RDONLY); close(fd)
"""
from __future__ import annotations
from hcqrt.host import require_linux
# first, before any import that differs off Linux: on darwin ctypes.util imports ctypes.macholib (which Debian and
# Ubuntu's python3 leave out), and the mmap constants and libc below are Linux's
require_linux("hcqrt.syscalls (the NV and AMD backends)")
import bisect, ctypes, ctypes.util, errno as errno_mod, mmap as _mmap, os, threading  # noqa: E402 (after the platform check)
from builtins import open as builtins_open  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from typing import Any, Protocol  # noqa: E402
from collections.abc import Iterator  # noqa: E402
import cffi  # noqa: E402
from ioctl_defs.nv.ioctl import ESCAPE_BY_NR, UVM_BY_CMD  # noqa: E402
from ioctl_defs.amd.kfd import IOCTL_BY_NR as KFD_BY_NR, AMDKFD_IOCTL_BASE  # noqa: E402

PROT_READ, PROT_WRITE, PROT_EXEC = _mmap.PROT_READ, _mmap.PROT_WRITE, getattr(_mmap, "PROT_EXEC", 4)
MAP_SHARED, MAP_PRIVATE, MAP_ANONYMOUS = _mmap.MAP_SHARED, _mmap.MAP_PRIVATE, _mmap.MAP_ANONYMOUS
MAP_FIXED = 0x10   # Linux value; not exported by the mmap module

class FakeDriver(Protocol):
  def claims(self, path: str) -> bool: ...
  def open(self, path: str, flags: int) -> int: ...
  def ioctl(self, fd: int, request: int, argp: int) -> int: ...
  def mmap(self, fd: int, length: int, prot: int, flags: int, offset: int, addr: int | None) -> int: ...
  def munmap(self, addr: int, length: int) -> None: ...
  def forget_mapping(self, addr: int, length: int) -> None:
    """[addr, addr+length) of mappings this driver made is gone without a munmap: a MAP_FIXED mmap replaced it
    (syscalls.mmap). The pages are unmapped already; only the driver's own record of them goes."""
  def close(self, fd: int) -> None: ...

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.ioctl.argtypes, _libc.ioctl.restype = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p], ctypes.c_int
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mmap.restype = ctypes.c_void_p
_libc.munmap.argtypes, _libc.munmap.restype = [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_int
_MAP_FAILED = ctypes.c_void_p(-1).value
_ffi = cffi.FFI()

_lock = threading.Lock()
_drivers: list[FakeDriver] = []
_fake_fds: dict[int, FakeDriver] = {}          # fd -> driver that opened it
_fake_maps: dict[int, FakeDriver] = {}         # mapping address -> driver that made it
_paths: dict[int, str] = {}                    # fd -> path, for error messages
_fake_ranges: list[tuple[int, int, FakeDriver]] = []   # sorted (start, end, driver) of fake mappings, for mmio

def install(driver: FakeDriver) -> FakeDriver:
  """Route the paths `driver` claims to it (until uninstall); the newest install wins. Returns the driver."""
  with _lock:
    if driver not in _drivers: _drivers.insert(0, driver)
  return driver

def uninstall(driver: FakeDriver | None = None) -> None:
  """Stop routing new opens to `driver` (all drivers when None). Open fds keep going to their driver."""
  with _lock:
    if driver is None: _drivers.clear()
    elif driver in _drivers: _drivers.remove(driver)

@contextmanager
def installed(driver: FakeDriver) -> Iterator[FakeDriver]:
  """`with installed(MockNV()) as drv:` ... the driver is removed again on exit."""
  install(driver)
  try: yield driver
  finally: uninstall(driver)

def same_file(a: int, b: int) -> bool:
  """Whether fds `a` and `b` reach the same kernel object: opened on the same device file of the same driver. For
  /dev/kfd that is the same KFD process (one per mm): its event page and runtime state are shared by both fds."""
  da, db = _fake_fds.get(a), _fake_fds.get(b)
  if da is not None or db is not None: return da is db and _paths.get(a) == _paths.get(b)
  sa, sb = os.fstat(a), os.fstat(b)
  return (sa.st_dev, sa.st_ino, sa.st_rdev) == (sb.st_dev, sb.st_ino, sb.st_rdev)

def is_fake(fd: int) -> bool: return fd in _fake_fds
def driver_of(fd: int) -> FakeDriver | None:
  """The fake driver serving `fd` (None for a real device file): tests and benchmarks inspect the mock through it."""
  return _fake_fds.get(fd)

def describe_request(request: int) -> str:
  """A readable name for an ioctl request (NVIDIA escapes, UVM commands and AMDKFD ioctls by name, others decoded)."""
  if request in UVM_BY_CMD: return f"{UVM_BY_CMD[request]} ({request:#x})"
  d, t, nr, size = (request >> 30) & 3, (request >> 8) & 0xFF, request & 0xFF, (request >> 16) & 0x3FFF
  if t == ord("F") and nr in ESCAPE_BY_NR: return f"{ESCAPE_BY_NR[nr]} ({request:#x}, size {size})"
  if t == AMDKFD_IOCTL_BASE and nr in KFD_BY_NR: return f"{KFD_BY_NR[nr]} ({request:#x}, size {size})"
  return f"_IOC(dir={d}, type={chr(t)!r}, nr={nr:#x}, size={size}) = {request:#x}"

def _address(buf: Any) -> tuple[int, Any]:
  """(address, keep-alive object) of an ioctl argument: cffi pointer/array, bytearray, writable buffer, ctypes object or int."""
  if buf is None: return 0, None
  if isinstance(buf, int): return buf, None
  if isinstance(buf, _ffi.CData): return int(_ffi.cast("uintptr_t", buf)), buf
  if isinstance(buf, ctypes._SimpleCData) or isinstance(buf, (ctypes.Structure, ctypes.Array, ctypes.Union)):
    return ctypes.addressof(buf), buf
  mv = memoryview(buf).cast("B")
  if mv.readonly: raise TypeError("ioctl argument buffer must be writable (the kernel copies results back)")
  if mv.nbytes == 0: return 0, None
  c = (ctypes.c_char * mv.nbytes).from_buffer(mv)
  return ctypes.addressof(c), (c, mv)

def open(path: str, flags: int) -> int:
  """Open a device file; a claimed path goes to the installed fake driver."""
  with _lock: drv = next((d for d in _drivers if d.claims(path)), None)
  if drv is None: fd = os.open(path, flags)
  else:
    fd = drv.open(path, flags)
    with _lock: _fake_fds[fd] = drv
  _paths[fd] = path
  return fd

def ioctl(fd: int, request: int, buf: Any) -> int:
  """Issue an ioctl; returns the (non-negative) result, raises OSError naming the request and device on failure."""
  argp, keep = _address(buf)
  drv = _fake_fds.get(fd)
  try:
    if drv is not None: return drv.ioctl(fd, request, argp)
    ret = _libc.ioctl(fd, request, argp)
    if ret < 0:
      e = ctypes.get_errno()
      raise OSError(e, os.strerror(e))
    return ret
  except OSError as exc:
    e = exc.errno or errno_mod.EIO
    raise OSError(e, f"ioctl {describe_request(request)} on fd {fd} ({_paths.get(fd, '?')}) failed: {os.strerror(e)}"
                     f"{'' if not exc.strerror or exc.strerror == os.strerror(e) else ' - ' + exc.strerror}") from None
  finally:
    del keep

def mmap(fd: int, length: int, prot: int, flags: int, offset: int, addr: int | None = None) -> int:
  """Map `length` bytes of a device file (or anonymous memory with fd=-1); returns the address."""
  drv = _fake_fds.get(fd)
  if drv is not None:
    a = drv.mmap(fd, length, prot, flags, offset, addr)
    with _lock:
      _cut(a, length)   # (the driver's own mmap saw what it covered: its MAP_FIXED into the range goes through here)
      _fake_maps[a] = drv
      bisect.insort(_fake_ranges, (a, a + length, drv), key=_start)   # (the cut left no range overlapping it)
    return a
  a = _libc.mmap(addr, length, prot, flags, fd, offset)
  if a in (None, _MAP_FAILED):
    e = ctypes.get_errno()
    raise OSError(e, f"mmap of {length:#x} bytes at offset {offset:#x} of fd {fd} ({_paths.get(fd, 'anonymous')}) failed: {os.strerror(e)}")
  if flags & MAP_FIXED and _fake_ranges:
    # MAP_FIXED over a device mapping unmaps the overlap within this one call (mmap(2); linux@v6.12.117:mm/mmap.c:1389-1397
    # gathers the overlapping VMAs, splitting one that sticks out; 1437 closes them, vms_clean_up_area -> vma_close,
    # mm/vma.c:1126-1137, for amdgpu ttm_bo_vm_close's BO put, amdgpu_gem.c:80-85, ttm/ttm_bo_vm.c:360-366; 1551-1552
    # frees them), as a munmap would have: the driver that made the mapping drops its record of it
    with _lock: hit = _cut(a, length)
    for d in hit: d.forget_mapping(a, length)
  return a

def _start(r: tuple[int, int, Any]) -> int: return r[0]
def _end(r: tuple[int, int, Any]) -> int: return r[1]

def _cut(addr: int, length: int) -> list[FakeDriver]:
  """(under _lock) [addr, addr+length) is no longer a fake mapping: the parts of a range outside it stay (mapped still,
  and still the driver's: its doorbells must keep ringing, and a later unmap of them must reach it). Returns the
  drivers whose ranges it overlapped."""
  # The ranges never overlap (mmap cuts before it inserts), so sorted by start they are sorted by end too: the ones
  # the cut overlaps are one slice, found by bisection. (A scan of every range made each mmap and munmap cost as much
  # as all the fake mappings alive in the process: thousands in a test worker after many mock tests.)
  end = addr + length
  lo = bisect.bisect_right(_fake_ranges, addr, key=_end)          # the first range that ends past addr
  hi = bisect.bisect_left(_fake_ranges, end, lo=lo, key=_start)   # the first that starts at or past the cut's end
  hit, keep = [], []
  for s, e, d in _fake_ranges[lo:hi]:
    hit.append(d)
    if s < addr: keep.append((s, addr, d))
    if e > end: keep.append((end, e, d))
    # (every key of _fake_maps is the start of a range: mmap enters both, and a cut drops the keys inside it)
    if s >= addr: _fake_maps.pop(s, None)
  _fake_ranges[lo:hi] = keep   # (still sorted: the parts of one range keep its place)
  return list(dict.fromkeys(hit))

def munmap(addr: int, length: int) -> None:
  """Unmap a mapping made by `mmap` (routed to the fake driver that made it, if any)."""
  with _lock:
    drv = _fake_maps.pop(addr, None)
    hit = _cut(addr, length) if _fake_ranges else []
  if drv is not None: return drv.munmap(addr, length)
  if _libc.munmap(addr, length) != 0:
    e = ctypes.get_errno()
    raise OSError(e, f"munmap({addr:#x}, {length:#x}) failed: {os.strerror(e)}")
  # part of a fake mapping that does not start at addr (the rest of one split before): its driver drops that part
  for d in hit: d.forget_mapping(addr, length)

def mmio_write32(addr: int, value: int) -> None:
  """A 32-bit register write (e.g. a doorbell) into a mapped device page.

    >>> import ctypes; b = ctypes.c_uint32(0); mmio_write32(ctypes.addressof(b), 7); b.value
    7
  """
  if (drv := _mmio_driver(addr)) is not None and hasattr(drv, "mmio_write32"): return drv.mmio_write32(addr, value)
  ctypes.c_uint32.from_address(addr).value = value

# A CPU store fence. Memory the driver maps from video memory is write-combined for the CPU (OGKM 580.142
# src/nvidia/src/kernel/rmapi/mapping_cpu.c:292-296: FB -> NV_MEMORY_WRITECOMBINED); WC stores sit in fill buffers and
# may become visible out of order until "a serializing event; such as an SFENCE or MFENCE instruction, ... a read or
# write to uncached memory, ... or execution of a LOCK instruction" (Intel SDM vol. 3A, 13.3.1 "Buffering of
# Write Combining Memory Locations"). NVIDIA's own submit fences before GPPut and before the doorbell (OGKM
# kernel-open/nvidia-uvm/uvm_channel.c:1008-1014 `mb()`, uvm_volta_host.c:31-44 `wmb()`). Python has no fence
# instruction, and we must not need a C compiler at run time: the fence is a tiny function (x86-64 `endbr64; sfence;
# ret`, 8 bytes; aarch64 `dmb oshst; ret`, 8 bytes -- the barrier Linux's writel uses) placed in an executable page and
# called through ctypes. endbr64 (F3 0F 1E FA, a NOP on CPUs without CET) marks it a valid indirect-call target, so the
# call still works if user-space IBT is ever enforced (without it the call would raise #CP). aarch64 issues no
# `IC IVAU`: the code is written before mprotect makes the fresh anonymous page executable, and Linux arm64 syncs the
# I-cache when it maps a page executable (__sync_icache_dcache from set_pte_at). Where no such page can be made
# (W^X, SELinux execmem, MDWE: mprotect fails), the page is unmapped and a lock round trip stands in: acquiring a
# pthread mutex is a LOCK-prefixed atomic on x86.
_FENCE_X86 = bytes([0xF3, 0x0F, 0x1E, 0xFA, 0x0F, 0xAE, 0xF8, 0xC3])
_FENCE_CODE = {"x86_64": _FENCE_X86, "amd64": _FENCE_X86,
               "aarch64": (0xD50332BF).to_bytes(4, "little") + (0xD65F03C0).to_bytes(4, "little")}
_fence_fn: Any = None

def _make_fence() -> Any:
  import platform
  code = _FENCE_CODE.get(platform.machine().lower())
  if code is not None:
    page = _libc.mmap(None, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    if page not in (None, _MAP_FAILED):
      ctypes.memmove(page, code, len(code))
      if _libc.mprotect(ctypes.c_void_p(page), ctypes.c_size_t(4096), PROT_READ | PROT_EXEC) == 0:
        return ctypes.CFUNCTYPE(None)(page)
      _libc.munmap(page, 4096)   # refused: the page would only be wasted address space
  lock = threading.Lock()
  def locked() -> None:
    with lock: pass
  return locked

def store_fence() -> None:
  """Make every earlier CPU store (write-combined ones included) visible before any later one: call it between
  filling what the GPU reads (QMD, constant buffer, pushbuffer, GPFIFO entry) and publishing it (GPPut, doorbell).

    >>> store_fence()
  """
  global _fence_fn
  if _fence_fn is None: _fence_fn = _make_fence()
  _fence_fn()

def _mmio_driver(addr: int) -> FakeDriver | None:
  if not _fake_ranges: return None
  i = bisect.bisect_right(_fake_ranges, addr, key=lambda r: r[0])
  return _fake_ranges[i - 1][2] if i and addr < _fake_ranges[i - 1][1] else None

def mmio_write64(addr: int, value: int) -> None:
  """A 64-bit doorbell write (SOC15+ AMD doorbells are 64-bit): one volatile 8-byte store into a mapped page,
  or the fake driver's mmio_write64 when `addr` lies in one of its mappings.

    >>> import ctypes; b = ctypes.c_uint64(0); mmio_write64(ctypes.addressof(b), 1 << 40); b.value
    1099511627776
  """
  if addr % 8: raise ValueError(f"64-bit doorbell write to {addr:#x}: address is not 8-byte aligned (the store would tear)")
  if not 0 <= value < (1 << 64): raise ValueError(f"64-bit doorbell write: value {value:#x} does not fit 64 bits")
  if (drv := _mmio_driver(addr)) is not None and hasattr(drv, "mmio_write64"): return drv.mmio_write64(addr, value)
  _ffi.cast("volatile uint64_t *", addr)[0] = value   # cffi stores through a typed pointer: a single 8-byte write

def _sysfs_driver(path: str, call: str) -> FakeDriver | None:
  with _lock: drv = next((d for d in _drivers if d.claims(path)), None)
  if drv is not None and not hasattr(drv, call):
    raise NotImplementedError(f"{type(drv).__name__} claims {path} but has no {call}()")
  return drv

def listdir(path: str) -> list[str]:
  """Sorted entries of a directory (e.g. /sys/devices/virtual/kfd/kfd/topology/nodes); a claimed path asks the
  fake driver. Raises OSError (FileNotFoundError, ...) like os.listdir."""
  drv = _sysfs_driver(path, "listdir")
  return sorted(drv.listdir(path) if drv is not None else os.listdir(path))

def read_text(path: str) -> str:
  """The whole text of a (sysfs) file, e.g. .../topology/nodes/1/properties; a claimed path asks the fake driver."""
  drv = _sysfs_driver(path, "read_text")
  if drv is not None: return drv.read_text(path)
  with builtins_open(path) as f: return f.read()

def open_render_node(minor: int, flags: int = os.O_RDWR | os.O_CLOEXEC) -> int:
  """Open the DRM render node /dev/dri/renderD<minor> (KFD's drm_render_minor property names it; ACQUIRE_VM
  takes this fd). Goes through `open`, so a fake driver that claims the path serves it."""
  if not 128 <= minor < 192: raise ValueError(f"DRM render minors are 128..191, got {minor}")
  return open(f"/dev/dri/renderD{minor}", flags)

def close(fd: int) -> None:
  """Close an fd (routed to its fake driver, if any)."""
  with _lock: drv = _fake_fds.pop(fd, None)
  _paths.pop(fd, None)
  if drv is not None: drv.close(fd)
  else: os.close(fd)
