"""The CPU device: host buffers, and C kernels (ELF objects) run on persistent host threads.

Kernel ABI: `void name(void *buf0, ..., int val0, ..., int core)`; a launch with `threads=n` calls it once for
each core index 0..n-1, in parallel (ctypes releases the GIL for the duration of each call).

  >>> import ctypes, numpy as np, subprocess, tempfile
  >>> d = tempfile.mkdtemp(); _ = open(f"{d}/k.c", "w").write(
  ...   "void E_4(float *out, const float *a, int n, int core) { for (int i = core; i < n; i += 2) out[i] = a[i] * 2; }")
  >>> _ = subprocess.run(["cc", "-c", "-O2", "-fPIC", f"{d}/k.c", "-o", f"{d}/k.o"], check=True)
  >>> dev = CPUDevice()
  >>> a, out = dev.allocator.alloc(16), dev.allocator.alloc(16)
  >>> dev.allocator.copyin(a, memoryview(np.arange(4, dtype=np.float32)))
  >>> et = CPUProgram("E_4", open(f"{d}/k.o", "rb").read())(out, a, vals=(4,), threads=2)
  >>> res = np.empty(4, np.float32); dev.allocator.copyout(memoryview(res), out); res.tolist()
  [0.0, 2.0, 4.0, 6.0]
"""
from __future__ import annotations
import ctypes, os, threading, time
import numpy as np
from hcqrt.cpu.elf_loader import load_elf, LoadedImage

ALIGN = 64  # bytes; enough for any vector load (AVX-512 lines)

class CPUBuffer:
  """Host memory owned by CPUAllocator, 64-byte aligned and zero-filled on allocation."""
  __slots__ = ("nbytes", "address", "_mem")
  def __init__(self, nbytes: int):
    # numpy zeros = calloc: big buffers come as lazily zeroed pages, so allocation stays cheap
    raw = np.zeros(nbytes + ALIGN, np.uint8)
    off = -raw.ctypes.data % ALIGN
    self.nbytes, self._mem = nbytes, raw[off:off + nbytes]
    self.address: int = raw.ctypes.data + off

  def view(self) -> memoryview:
    """The raw bytes, writable (format 'B')."""
    if self._mem is None: raise RuntimeError(f"CPUBuffer of {self.nbytes} bytes at {self.address:#x} used after free")
    return memoryview(self._mem)

  def __repr__(self) -> str: return f"<CPUBuffer {self.nbytes} bytes at {self.address:#x}{'' if self._mem is not None else ' (freed)'}>"

def _raw_bytes(mv, what: str) -> np.ndarray:
  try: return np.frombuffer(mv, np.uint8)
  except (ValueError, TypeError, BufferError) as e: raise ValueError(f"{what}: need a C-contiguous buffer ({e})") from None

class CPUAllocator:
  """Allocates CPUBuffers and copies between them and host memoryviews.

  >>> al = CPUAllocator(); b = al.alloc(8); al.copyin(b, memoryview(b"abcdefgh")); bytes(b.view())
  b'abcdefgh'
  """
  def alloc(self, nbytes: int) -> CPUBuffer:
    if not isinstance(nbytes, int) or nbytes < 0: raise ValueError(f"CPUAllocator.alloc: bad size {nbytes!r}")
    return CPUBuffer(nbytes)

  def free(self, buf: CPUBuffer) -> None:
    if buf._mem is None: raise RuntimeError(f"double free of {buf!r}")
    buf._mem = None  # memory returns to the system once no view of it is alive

  def copyin(self, dst: CPUBuffer, src: memoryview) -> None:
    """Copy all of `src` (any contiguous buffer) into the start of `dst`."""
    s = _raw_bytes(src, "copyin source")
    if s.nbytes > dst.nbytes: raise ValueError(f"copyin: {s.nbytes} bytes do not fit in {dst!r}")
    np.copyto(np.frombuffer(dst.view(), np.uint8)[:s.nbytes], s)

  def copyout(self, dst: memoryview, src: CPUBuffer) -> None:
    """Fill all of `dst` (a writable contiguous buffer) from the start of `src`."""
    d = _raw_bytes(dst, "copyout destination")
    if d.nbytes > src.nbytes: raise ValueError(f"copyout: {d.nbytes} bytes wanted from {src!r}")
    if d.nbytes and not d.flags.writeable: raise ValueError("copyout destination is read-only")
    np.copyto(d, np.frombuffer(src.view(), np.uint8)[:d.nbytes])

class _Worker:
  """One persistent thread; two locks used as binary semaphores hand a call over and back.

  Plain locks are the cheapest wake-up Python offers (Event/Condition add a lock and a list on top)."""
  def __init__(self, idx: int):
    self.go, self.done = threading.Lock(), threading.Lock()
    self.go.acquire(); self.done.acquire()
    self.job: tuple = ()
    self.error: BaseException | None = None
    threading.Thread(target=self._loop, name=f"hcqrt-cpu-{idx}", daemon=True).start()

  def _loop(self) -> None:
    while True:
      self.go.acquire()
      fn, args = self.job
      try: fn(*args)
      except BaseException as e: self.error = e
      self.done.release()

class _Pool:
  """Workers for cores 1..n-1; core 0 runs on the calling thread (saves one hand-over per launch)."""
  def __init__(self):
    self.workers: list[_Worker] = []
    self.lock = threading.Lock()  # one multi-core launch at a time: the workers are shared

  def run(self, fn, args: list, threads: int) -> None:
    with self.lock:
      while len(self.workers) < threads - 1: self.workers.append(_Worker(len(self.workers) + 1))
      ws = self.workers[:threads - 1]
      for core, w in enumerate(ws, start=1):
        w.job = (fn, (*args, core))
        w.go.release()
      err = None
      try: fn(*args, 0)
      except BaseException as e: err = e
      for w in ws:
        w.done.acquire()
        if w.error is not None: err, w.error = err or w.error, None
      if err is not None: raise err

_pool = _Pool()
def _reset_pool_after_fork() -> None:
  global _pool
  _pool = _Pool()  # worker threads do not survive fork; the child starts new ones when needed
os.register_at_fork(after_in_child=_reset_pool_after_fork)

class CPUProgram:
  """A C kernel loaded from an ELF object with our own loader.

  Calling it runs `name(bufs..., vals..., core)` for core in 0..threads-1 and returns only when every call
  has finished; `wait=True` additionally returns the elapsed seconds (else None).
  """
  def __init__(self, name: str, obj: bytes):
    self.name, self.image = name, load_elf(obj)
    if name not in self.image.symbols:
      raise RuntimeError(f"kernel {name!r} not found in its object (defined: {sorted(self.image.symbols)})")
    self._fns: dict[tuple[int, int], object] = {}  # (nbufs, nvals) -> ctypes callable, built once

  def _fn(self, nbufs: int, nvals: int):
    if (f := self._fns.get((nbufs, nvals))) is None:
      f = self._fns[(nbufs, nvals)] = self.image.function(self.name, [ctypes.c_void_p] * nbufs + [ctypes.c_int] * (nvals + 1))
    return f

  def __call__(self, *bufs: CPUBuffer, vals: tuple[int, ...] = (), threads: int = 1, wait: bool = True) -> float | None:
    fn = self._fns.get((len(bufs), len(vals))) or self._fn(len(bufs), len(vals))
    args = [b.address for b in bufs]
    if vals: args.extend(vals)
    st = time.perf_counter()
    if threads == 1: fn(*args, 0)
    elif isinstance(threads, int) and threads > 1: _pool.run(fn, args, threads)
    else: raise ValueError(f"kernel {self.name}: threads must be an int >= 1, got {threads!r}")
    return time.perf_counter() - st if wait else None

  def __repr__(self) -> str: return f"<CPUProgram {self.name} at {self.image.symbols[self.name]:#x}>"

class CPUDevice:
  """The host as a device: allocator, core count, and the names of its renderer and assembler.

  >>> dev = CPUDevice(); dev.name, dev.ncores >= 1
  ('CPU', True)
  """
  name = "CPU"
  renderer = "c"
  assembler = "c"
  def __init__(self):
    self.allocator = CPUAllocator()
    self.ncores: int = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

  def program(self, name: str, obj: bytes) -> CPUProgram:
    """Load kernel `name` from an ELF object (same as CPUProgram(name, obj))."""
    return CPUProgram(name, obj)

  def synchronize(self) -> None:
    """Nothing to wait for: CPU launches and copies are complete when their call returns."""

  def __repr__(self) -> str: return f"<CPUDevice {self.ncores} cores>"
