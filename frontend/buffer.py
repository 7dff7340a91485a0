"""Device buffers owned by the frontend, and the counters of what ran (kernels, FLOPs, bytes, time, memory).

Below the engine, the JIT and BEAM's runner, which all allocate Buffers; it imports only devices.py (to open one).

>>> from frontend import GlobalCounters
>>> b = Buffer("CPU", 64); GlobalCounters.mem_used >= 64
True
"""
from __future__ import annotations
import errno, weakref
from collections.abc import Callable
from frontend.devices import open_device

class GlobalCounters:
  """Counters of everything run since the last `reset()`: kernels, estimated FLOPs, bytes moved, time.

  >>> GlobalCounters.reset(); GlobalCounters.kernel_count
  0
  """
  kernel_count: int = 0
  global_ops: int = 0
  global_mem: int = 0
  time_sum_s: float = 0.0
  mem_used: int = 0    # bytes of device buffers alive now (all devices; not reset)
  mem_peak: int = 0    # the most mem_used reached since the last reset()
  @staticmethod
  def reset() -> None:
    GlobalCounters.kernel_count = GlobalCounters.global_ops = GlobalCounters.global_mem = 0
    GlobalCounters.time_sum_s = 0.0
    GlobalCounters.mem_peak = GlobalCounters.mem_used

def _free(free: Callable, raw: object, nbytes: int) -> None:
  GlobalCounters.mem_used -= nbytes
  free(raw)

def _out_of_memory(e: Exception) -> bool:
  # the host's mmap/numpy (ENOMEM, MemoryError) or a driver's status (NV_ERR_NO_MEMORY; KFD's ioctl ENOMEM)
  return (isinstance(e, MemoryError) or (isinstance(e, OSError) and e.errno == errno.ENOMEM)
          or "NO_MEMORY" in str(getattr(e, "status_name", "")))

class Buffer:
  """A device buffer owned by the frontend; freed when the last reference goes away. `what` names what needs it
  (a kernel and its output; a function making the name, so that it costs nothing unless the device is out of memory)."""
  __slots__ = ("__weakref__", "device", "nbytes", "raw", "viewed")
  def __init__(self, device: str, nbytes: int, what: str | Callable[[], str] = ""):
    # viewed: a lazy buffer over this buffer was viewed (compiler/lazy.py mark_viewed; unset: counts as viewed)
    self.device, self.nbytes, self.viewed = device, nbytes, False
    dev = open_device(device)
    try: self.raw = dev.allocator.alloc(nbytes)
    except Exception as e:
      if not _out_of_memory(e): raise
      if callable(what): what = what()
      raise MemoryError(f"out of memory on {device}: allocating {nbytes} bytes ({nbytes / 2**30:.4g} GiB)"
                        f"{' for ' + what if what else ''}: {type(e).__name__}: {e}") from e
    GlobalCounters.mem_used += nbytes
    if GlobalCounters.mem_used > GlobalCounters.mem_peak: GlobalCounters.mem_peak = GlobalCounters.mem_used
    weakref.finalize(self, _free, dev.allocator.free, self.raw, nbytes)
