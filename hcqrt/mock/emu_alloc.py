"""Device memory for the driverless emulator devices (PTXEMU, AMDEMU): buffers at GPU-like virtual addresses,
backed by host arrays and mapped into the emulator's address space (anything with `map(va, array)` / `unmap(va)`)."""
from __future__ import annotations
import numpy as np

VA_BASE = 0x2_0000_0000   # where device buffers start (a typical GPU heap address, far from 0)
VA_ALIGN = 256            # cudaMalloc-like alignment: every vector access of a buffer is aligned

class EmuBuffer:
  """Device memory: `nbytes` bytes at GPU virtual address `va`, backed by a host array."""
  __slots__ = ("host", "nbytes", "va")
  def __init__(self, nbytes: int, va: int):
    self.nbytes, self.va = nbytes, va
    self.host: np.ndarray | None = np.zeros(max(nbytes, 1), np.uint8)
  def __repr__(self) -> str: return f"<EmuBuffer {self.nbytes} bytes at {self.va:#x}{'' if self.host is not None else ' (freed)'}>"

class EmuAllocator:
  """Allocates EmuBuffers in an address space (bump allocation: addresses are never reused, so a stale
  pointer faults instead of silently reading another buffer).

  >>> from hcqrt.mock.ptx import AddressSpace
  >>> al = EmuAllocator(AddressSpace()); b = al.alloc(8); al.copyin(b, memoryview(b"abcdefgh"))
  >>> out = bytearray(8); al.copyout(memoryview(out), b); bytes(out)
  b'abcdefgh'
  """
  def __init__(self, mem):
    self.mem, self.next_va = mem, VA_BASE
  def share_with_forks(self, buf: EmuBuffer, share: bool) -> None:
    """(as CPUAllocator's: emulated device memory is never written beside a forked child's copy)"""
  def alloc(self, nbytes: int) -> EmuBuffer:
    if not isinstance(nbytes, int) or nbytes < 0: raise ValueError(f"EmuAllocator.alloc: bad size {nbytes!r}")
    b = EmuBuffer(nbytes, self.next_va)
    self.next_va += -(-max(nbytes, 1) // VA_ALIGN) * VA_ALIGN + VA_ALIGN   # a guard gap between buffers
    self.mem.map(b.va, b.host)
    return b
  def free(self, buf: EmuBuffer) -> None:
    if buf.host is None: raise RuntimeError(f"double free of {buf!r}")
    self.mem.unmap(buf.va); buf.host = None
  def _host(self, buf: EmuBuffer) -> np.ndarray:
    if buf.host is None: raise RuntimeError(f"{buf!r} used after free")
    return buf.host
  def copyin(self, dst: EmuBuffer, src: memoryview) -> None:
    """Copy all of `src` (any contiguous buffer) into the start of `dst`."""
    s = np.frombuffer(src, np.uint8)
    if s.nbytes > dst.nbytes: raise ValueError(f"copyin: {s.nbytes} bytes do not fit in {dst!r}")
    self._host(dst)[:s.nbytes] = s
  def copyout(self, dst: memoryview, src: EmuBuffer) -> None:
    """Fill all of `dst` (a writable contiguous buffer) from the start of `src`."""
    d = np.frombuffer(dst, np.uint8)
    if d.nbytes > src.nbytes: raise ValueError(f"copyout: {d.nbytes} bytes wanted from {src!r}")
    if d.nbytes and not d.flags.writeable: raise ValueError("copyout destination is read-only")
    d[:] = self._host(src)[:d.nbytes]
