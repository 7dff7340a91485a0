"""The CPU device: host buffers, and C kernels (ELF objects) run on persistent host threads.

Kernel ABI: `void name(void *buf0, ..., int val0, ..., int core)`; a launch with `threads=n` calls it once for
each core index 0..n-1, on up to n threads at once (ctypes releases the GIL for the duration of each call). The native
runner hands the indices out to whichever of its threads is free (a worker the OS runs late leaves its index to the
caller), so a kernel must never wait for another index.

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
import ctypes, mmap, os, threading, time
from collections.abc import Sequence
import numpy as np
from hcqrt.alloc_cache import CachingAllocator
from hcqrt.cpu.elf_loader import LoadedImage, load_elf
from hcqrt.cpu.isa import CPUISA, cpu_isa, host_l2_prefetch_hint
from hcqrt.cpu import runner_llvm
from hcqrt.host import require_x86_64_linux
from hcqrt.interface import GraphExec, GraphItem
from hcqrt.settings import env_int

ALIGN = 64  # bytes; enough for any vector load (AVX-512 lines)
_NCORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
RUNNER_MAX_WORKERS = 255   # the native runners' worker threads at most (RUNNER_C's MAXW; a launch's cores may be more)
RUNNER_WORKERS = min(_NCORES - 1, RUNNER_MAX_WORKERS)   # the workers a launch wakes by default: one per other CPU

HUGE = 2 << 20   # buffers this big get their own mapping, with transparent huge pages asked for
KEEP = 64 << 10  # freed buffers this big are kept for reuse (calloc maps them fresh, page faults included, each time)

def _backing(nbytes: int) -> np.ndarray:
  """Zero-filled host memory of at least nbytes + ALIGN. Big buffers are private anonymous mappings advised
  MADV_HUGEPAGE: 2 MiB pages cut first-touch page faults 512-fold and the TLB misses of strided kernel reads."""
  if nbytes < HUGE: return np.zeros(nbytes + ALIGN, np.uint8)   # calloc: small pages, lazily zeroed
  size = (nbytes + ALIGN + HUGE - 1) // HUGE * HUGE
  mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
  if hasattr(mmap, "MADV_HUGEPAGE"):
    try: mm.madvise(mmap.MADV_HUGEPAGE)
    except OSError: pass   # THP disabled: plain pages work the same, only slower
  return np.frombuffer(mm, np.uint8)   # the array keeps the mapping alive; it is unmapped with the last view

_addressof, _c_char = ctypes.addressof, ctypes.c_char

class CPUBuffer:
  """Host memory owned by CPUAllocator, 64-byte aligned; zero-filled when new, holding old data when reused. `base`:
  raw's own address when the caller knows it (a buffer from the allocator's cache)."""
  __slots__ = ("_off", "_raw", "address", "nbytes")
  def __init__(self, nbytes: int, raw: np.ndarray, base: int | None = None):
    # (the address through a one-byte ctypes view: 0.6 us, where raw.ctypes.data builds numpy's ctypes helper, 1.9 us,
    # once per new buffer; a reused one brings it along. The aligned bytes are sliced out by view(), at a copy, not
    # here at every allocation of every eager kernel's output)
    addr = _addressof(_c_char.from_buffer(raw)) if base is None else base
    self._off = off = -addr % ALIGN
    self.nbytes, self._raw = nbytes, raw
    self.address: int = addr + off

  def view(self) -> memoryview:
    """The raw bytes, writable (format 'B')."""
    if self._raw is None: raise RuntimeError(f"CPUBuffer of {self.nbytes} bytes at {self.address:#x} used after free")
    return memoryview(self._raw[self._off:self._off + self.nbytes])

  def __repr__(self) -> str: return f"<CPUBuffer {self.nbytes} bytes at {self.address:#x}{'' if self._raw is not None else ' (freed)'}>"

def _raw_bytes(mv, what: str) -> np.ndarray:
  try: return np.frombuffer(mv, np.uint8)
  except (ValueError, TypeError, BufferError) as e: raise ValueError(f"{what}: need a C-contiguous buffer ({e})") from None

class CPUAllocator(CachingAllocator):
  """Allocates CPUBuffers and copies between them and host memoryviews.

  Freed buffers of at least KEEP bytes are kept for the next allocation of the same size (hcqrt/alloc_cache.py; up to
  `cache_limit` bytes, env CPU_CACHE_BYTES): a fresh mapping costs a page fault and a page zeroing per page on first
  touch, which for the 64 MiB outputs of an elementwise kernel is more time than the kernel itself.

  >>> al = CPUAllocator(); b = al.alloc(8); al.copyin(b, memoryview(b"abcdefgh")); bytes(b.view())
  b'abcdefgh'
  """
  def __init__(self, cache_limit: int | None = None):
    super().__init__(env_int("CPU_CACHE_BYTES", 1 << 31) if cache_limit is None else cache_limit)
    # One thread at a time updates the cache: a Buffer's finalizer frees on whatever thread the GC runs (a data loader's,
    # a worker's), beside an allocation on another. A free never waits for the lock: the cyclic GC may run that
    # finalizer inside our own call on this thread, which holds it; such a free (or one finding another thread inside)
    # lets the memory go back to the system with its last view, as the cache's own release does (_release)
    self._lock = threading.Lock()

  @staticmethod
  def _key(nbytes: int) -> int: return nbytes if nbytes < HUGE else (nbytes + ALIGN + HUGE - 1) // HUGE * HUGE
  # cached items: (the memory, its address), so a reused buffer's address is not asked of ctypes again
  def _size(self, item: tuple[np.ndarray, int]) -> int: return item[0].nbytes
  def _release(self, item: tuple[np.ndarray, int]) -> None: pass   # memory returns to the system with the last view of it

  def alloc(self, nbytes: int) -> CPUBuffer:
    if not isinstance(nbytes, int) or nbytes < 0: raise ValueError(f"CPUAllocator.alloc: bad size {nbytes!r}")
    with self._lock: item = self._take(self._key(nbytes))
    if item is not None: return CPUBuffer(nbytes, *item)
    try: return CPUBuffer(nbytes, _backing(nbytes))
    except (MemoryError, OSError):
      self.flush()   # what the cache holds may be what this allocation needs
      return CPUBuffer(nbytes, _backing(nbytes))

  def free(self, buf: CPUBuffer) -> None:
    if (raw := buf._raw) is None: raise RuntimeError(f"double free of {buf!r}")
    buf._raw = None
    # only big buffers are worth keeping: small ones come from calloc's own free lists
    if raw.nbytes >= KEEP and self._lock.acquire(blocking=False):
      try: self._keep(self._key(buf.nbytes), (raw, buf.address - buf._off))
      finally: self._lock.release()

  def flush(self) -> None:
    with self._lock: super().flush()

  def share_with_forks(self, buf: CPUBuffer, share: bool) -> None:
    """Whether a process forked later maps `buf` (MADV_DOFORK / MADV_DONTFORK; only the big buffers with a mapping of
    their own). Scratch memory no child reads is kept out: written while a child shares it copy-on-write, a buffer is
    left in small pages for good (a 2048x2048 matmul into such buffers ran 94 -> 103 ms, measured), which is what BEAM's
    timing buffers met beside its forked compile workers.

    >>> al = CPUAllocator(); b = al.alloc(HUGE); al.share_with_forks(b, False); al.share_with_forks(b, True)
    """
    mm = getattr(buf._raw.base, "obj", None)
    if isinstance(mm, mmap.mmap) and hasattr(mmap, "MADV_DONTFORK"): mm.madvise(mmap.MADV_DOFORK if share else mmap.MADV_DONTFORK)

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

def _cores(fn, args: list, cores: range) -> None:
  for c in cores: fn(*args, c)

class _Pool:
  """Workers for cores 1..n-1; core 0 runs on the calling thread (saves one hand-over per launch)."""
  def __init__(self):
    self.workers: list[_Worker] = []
    self.lock = threading.Lock()  # one multi-core launch at a time: the workers are shared
    self.most = _NCORES           # threads per launch at most (the caller's included)

  def run(self, fn, args: list, threads: int) -> None:
    # one thread per CPU at most: a launch of more cores (a kernel cut into chunks) gives each thread every n-th core
    n = max(1, min(threads, self.most))
    with self.lock:
      while len(self.workers) < n - 1: self.workers.append(_Worker(len(self.workers) + 1))
      ws = self.workers[:n - 1]
      for t, w in enumerate(ws, start=1):
        w.job = (_cores, (fn, args, range(t, threads, n)))
        w.go.release()
      err = None
      try: _cores(fn, args, range(0, threads, n))
      except BaseException as e: err = e
      for w in ws:
        w.done.acquire()
        if w.error is not None: err, w.error = err or w.error, None
      if err is not None: raise err

# C source of an optional native thread pool ("runner"). hcqrt may not import the compiler, so whoever owns
# both (the frontend) compiles this with compile_c and hands the object to install_runner(). Then a
# multi-core launch is one ctypes call, and workers spin briefly before sleeping, so back-to-back launches
# skip both the GIL hand-overs and the futex wake-ups of the Python pool.
RUNNER_C = r"""/* hcqrt CPU runner: persistent worker threads for multi-core kernel launches.
   hcqrt_run(fn, args, nargs, threads) calls fn(args..., core) once for each core 0..threads-1 and returns when all
   are done: the calling thread and the woken workers claim the cores in turn (claim_and_run). Workers spin briefly after a job (back-to-back launches
   then cost no syscall), then sleep on a futex. Only libc's pthread_create, syscall and
   clock_gettime (the launch times of a profiled launch list) are used.
   Placement: given the process's CPUs (hcqrt_set_cpus), each worker is pinned to one CPU other than the one the
   caller runs on (re-pinned when the caller has moved). Unpinned, a worker woken by the futex can be placed on the
   caller's CPU (on a VM the idle vCPU looks busy to the guest's scheduler) and stay there: every launch then runs
   its halves one after the other, at half speed. */
typedef long i64;
int pthread_create(unsigned long *thread, const void *attr, void *(*start)(void *), void *arg);
long syscall(long number, ...);
#if defined(__x86_64__)
#define SYS_FUTEX 202
#define SYS_GETTID 186
#define SYS_GETCPU 309
#define SYS_SETAFFINITY 203
#define PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define SYS_FUTEX 98
#define SYS_GETTID 178
#define SYS_GETCPU 168
#define SYS_SETAFFINITY 122
#define PAUSE() __asm__ volatile("yield")
#endif
#define FUTEX_WAIT_PRIVATE 128
#define FUTEX_WAKE_PRIVATE 129
#define MAXW 255
/* the most cores (chunks) one launch may have: the claim word holds them in 16-bit fields; MAXW caps the threads */
#define MAXCORES 0xffff
#define MAXARGS 63
#define MAXCPU 1024

typedef void (*k8)(i64, i64, i64, i64, i64, i64, i64, i64);
#define A8(p) p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]
typedef void (*k64)(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64,
                    i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64,
                    i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64,
                    i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64);

static void *job_fn;
static i64 job_args[MAXARGS + 1];
static int job_nargs;
static int nworkers;
static int maxw = MAXW;               /* most workers a launch wakes (hcqrt_set_workers): a launch of more cores than
                                         threads has its cores claimed in turn by the threads there are */
static int go[MAXW], sleeping[MAXW];   /* go[w]: 1 = a job was posted since worker w last looked, 0 = idle */
static i64 claim;                     /* the job in flight: epoch << 32 | one past the last core left << 16 | the first core left */
static int job_threads;               /* the job's cores (claim's middle field shrinks as workers claim from the back) */
static unsigned epoch;                /* counts multi-core jobs: a claim word is never the same for two of them */
static int done, caller_sleeping;     /* done: the job's cores finished */
static int spin_limit;                /* pause-loop iterations before sleeping on a futex */
static int wtid[MAXW];                /* each worker's thread id, written by the worker as it starts */
static int cpus[MAXCPU], ncpus;       /* the CPUs to place workers on (hcqrt_set_cpus); fewer than 2: no pinning */
static int placed_for = -1;           /* the caller's CPU when the workers were last pinned */

/* the kernel ABI is (void*..., int..., int core): on x86-64 SysV and AArch64 Linux every argument takes one
   64-bit register or stack slot, so passing all as 64-bit integers (and extra trailing ones) is ABI-correct */
static void call_with(void *fn, i64 *a, int nargs, int core) {
  a[nargs] = core;
  if (nargs < 8) ((k8)fn)(A8(a));
  else ((k64)fn)(A8(a), A8((a + 8)), A8((a + 16)), A8((a + 24)), A8((a + 32)), A8((a + 40)), A8((a + 48)), A8((a + 56)));
}
static void call(int core) {
  i64 a[MAXARGS + 1];
  for (int i = 0; i < job_nargs; i++) a[i] = job_args[i];
  call_with(job_fn, a, job_nargs, core);
}

/* Run cores of the job in flight until none is left unclaimed, on whichever thread calls this (the caller and each
   woken worker): a worker the OS runs late (asleep, or its CPU taken by another process) finds its core already done
   by the caller instead of the caller waiting for it, and a thread done early takes the next core. The job is copied
   after a successful claim: the caller posts the next job only once every core of this one is done, which needs this
   thread's own `done` increment, so the copy races with nothing (a thread whose claim fails reads no job at all).
   The claim word is loaded seq_cst: ordered after the worker's go[w] = 0, so a go[w] = 1 of the next job that the
   store overwrote comes with a claim word this load sees.
   The caller claims from the front (0, 1, ...), workers from the back (n-1, n-2, ...): on two CPUs a kernel cut into
   chunks then runs as two contiguous halves, each core's the same part of the data as in the one-chunk-a-core kernels
   before and after it (its cache), unless one thread stalls and the other takes chunks of its half. job_threads is
   read after a successful claim, as the job. */
static void claim_and_run(int back) {
  i64 a[MAXARGS + 1];
  for (;;) {
    i64 v = __atomic_load_n(&claim, __ATOMIC_SEQ_CST);
    int hi = (int)((v >> 16) & 0xffff), lo = (int)(v & 0xffff);
    if (lo >= hi) return;
    if (!__atomic_compare_exchange_n(&claim, &v, back ? v - (1L << 16) : v + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) continue;
    int core = back ? hi - 1 : lo, n = job_threads;
    void *fn = job_fn;
    int nargs = job_nargs;
    for (int i = 0; i < nargs && i < MAXARGS; i++) a[i] = job_args[i];
    call_with(fn, a, nargs, core);
    if (__atomic_add_fetch(&done, 1, __ATOMIC_SEQ_CST) == n && __atomic_load_n(&caller_sleeping, __ATOMIC_SEQ_CST))
      syscall(SYS_FUTEX, &done, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
  }
}

static void *worker(void *arg) {
  int w = (int)(i64)arg;
  __atomic_store_n(&wtid[w], (int)syscall(SYS_GETTID), __ATOMIC_RELEASE);
  for (;;) {
    for (int spin = 0; !__atomic_load_n(&go[w], __ATOMIC_ACQUIRE); spin++) {
      if (spin < __atomic_load_n(&spin_limit, __ATOMIC_RELAXED)) { PAUSE(); continue; }
      __atomic_store_n(&sleeping[w], 1, __ATOMIC_SEQ_CST);
      if (!__atomic_load_n(&go[w], __ATOMIC_SEQ_CST)) syscall(SYS_FUTEX, &go[w], FUTEX_WAIT_PRIVATE, 0, 0, 0, 0);
      __atomic_store_n(&sleeping[w], 0, __ATOMIC_SEQ_CST);
      spin = 0;
    }
    __atomic_store_n(&go[w], 0, __ATOMIC_SEQ_CST);
    claim_and_run(1);
  }
  return 0;
}

static int start_workers(int threads) {
  while (nworkers < threads - 1 && nworkers < maxw) {
    unsigned long tid;
    if (pthread_create(&tid, 0, worker, (void *)(i64)nworkers) != 0) return -2;
    while (!__atomic_load_n(&wtid[nworkers], __ATOMIC_ACQUIRE)) PAUSE();   /* (place() needs its thread id) */
    nworkers++;
    placed_for = -1;
  }
  return 0;
}

/* pin worker w to the w-th of the CPUs other than the caller's (cycling when workers outnumber them); a no-op while
   the caller stays on the CPU they were placed for. A refused pin (a CPU taken away since) leaves that worker as it is. */
static void place(void) {
  if (ncpus < 2) return;
  unsigned cpu = 0;
  if (syscall(SYS_GETCPU, &cpu, 0, 0) != 0 || (int)cpu == placed_for) return;
  placed_for = (int)cpu;
  int others[MAXCPU], n = 0;
  for (int i = 0; i < ncpus; i++) if (cpus[i] != (int)cpu) others[n++] = cpus[i];
  if (n == 0) return;
  for (int w = 0; w < nworkers; w++) {
    unsigned long mask[MAXCPU / 64] = {0};
    int c = others[w % n];
    mask[c / 64] |= 1UL << (c % 64);
    syscall(SYS_SETAFFINITY, (long)wtid[w], (long)sizeof(mask), mask);
  }
}

/* one launch on `threads` cores (workers already started); returns when all are done. spin: the pause iterations
   before a worker sleeps once done, and before the caller sleeps waiting for them */
static void run_one(void *fn, const i64 *args, int nargs, int threads, int spin) {
  job_fn = fn; job_nargs = nargs;
  for (int i = 0; i < nargs; i++) job_args[i] = args[i];
  if (threads == 1) { call(0); return; }   /* (a JIT launch list mixes single- and multi-core kernels) */
  __atomic_store_n(&spin_limit, spin, __ATOMIC_RELAXED);
  __atomic_store_n(&done, 0, __ATOMIC_RELAXED);
  job_threads = threads;
  epoch++;
  __atomic_store_n(&claim, (i64)((unsigned long)epoch << 32 | (unsigned long)threads << 16), __ATOMIC_SEQ_CST);   /* (publishes the job) */
  int woke = 0, nw = threads - 1 < maxw ? threads - 1 : maxw;
  for (int w = 0; w < nw; w++) {
    __atomic_store_n(&go[w], 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&sleeping[w], __ATOMIC_SEQ_CST)) { syscall(SYS_FUTEX, &go[w], FUTEX_WAKE_PRIVATE, 1, 0, 0, 0); woke = 1; }
  }
  /* unpinned, a woken worker is often placed on this very core: spinning here would only delay it */
  if (woke && ncpus < 2) spin = 0;
  claim_and_run(0);
  for (int s = 0;; s++) {   /* every core claimed: wait for the ones workers run to finish */
    int r = __atomic_load_n(&done, __ATOMIC_SEQ_CST);
    if (r == threads) break;
    if (s < spin) { PAUSE(); continue; }
    __atomic_store_n(&caller_sleeping, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&done, __ATOMIC_SEQ_CST) == r) syscall(SYS_FUTEX, &done, FUTEX_WAIT_PRIVATE, r, 0, 0, 0);
    __atomic_store_n(&caller_sleeping, 0, __ATOMIC_SEQ_CST);
    s = 0;
  }
}

/* n pause instructions: the owner times this to turn a spin time into pause iterations (a pause takes from a few
   cycles to ~140 between CPU generations) */
void hcqrt_pause_loop(int n) { for (int i = 0; i < n; i++) PAUSE(); }

/* returns 0, or -1 if arguments are out of range, or -2 if a worker thread could not be started.
   spin: pause-loop iterations before sleeping (0: sleep at once). Not reentrant: the caller serializes launches. */
int hcqrt_run(void *fn, const i64 *args, int nargs, int threads, int spin) {
  if (nargs < 0 || nargs > MAXARGS || threads < 1 || threads > MAXCORES) return -1;
  if (start_workers(threads) != 0) return -2;
  if (threads > 1) place();
  run_one(fn, args, nargs, threads, spin);
  return 0;
}

/* a launch list (the JIT's replay): n records laid out one after another as
   [fn, nargs, threads, spin, arg0 .. arg(nargs-1)], run in order. Every record is checked before the first
   runs, so a bad list runs nothing: returns 0, or -1 - i for bad record i, or -2 - n if a thread failed to start. */
int clock_gettime(int clk, void *ts);   /* libc's: the vDSO, no syscall */
static i64 now_ns(void) {   /* CLOCK_MONOTONIC: the clock of Python's time.perf_counter_ns on Linux */
  i64 t[2];
  clock_gettime(1, t);
  return t[0] * 1000000000L + t[1];
}

/* as hcqrt_run_list; ns (when not null) gets n + 1 CLOCK_MONOTONIC times: before the first launch and after each
   (the profiler's per-launch times of a JIT replay) */
int hcqrt_run_list_timed(const i64 *list, int n, i64 *ns) {
  const i64 *r = list;
  int most = 1;
  for (int i = 0; i < n; i++) {
    if (r[0] == 0 || r[1] < 0 || r[1] > MAXARGS || r[2] < 1 || r[2] > MAXCORES) return -1 - i;
    if (r[2] > most) most = (int)r[2];
    r += 4 + r[1];
  }
  if (start_workers(most) != 0) return -2 - n;
  if (ns) *ns++ = now_ns();
  for (r = list; n > 0; n--, r += 4 + r[1]) {
    /* each multi-core launch checks where the caller runs now (one getcpu): a caller that slept waiting for a worker is
       often woken on that worker's CPU, and left there, every later launch of the list would run its halves one after
       the other on that CPU */
    if (r[2] > 1) place();
    run_one((void *)r[0], r + 4, (int)r[1], (int)r[2], (int)r[3]);
    if (ns) *ns++ = now_ns();
  }
  return 0;
}

int hcqrt_run_list(const i64 *list, int n) { return hcqrt_run_list_timed(list, n, 0); }

/* after fork() only the forking thread exists in the child: forget the workers, new ones start on demand */
void hcqrt_reset(void) {
  nworkers = 0; claim = 0; done = 0; caller_sleeping = 0; placed_for = -1;
  for (int w = 0; w < MAXW; w++) go[w] = sleeping[w] = wtid[w] = 0;
}

/* the most workers a launch wakes (the process's CPUs less the caller's): a kernel cut into more chunks than there are
   CPUs has them claimed in turn by those threads (claim_and_run), so a thread the OS stalls mid-kernel holds up one
   chunk, not half the kernel. Set between launches by the thread that launches (the caller's lock orders it); only
   that thread reads it. A soft cap: a worker above it whose go flag an earlier launch left set may still wake and
   claim chunks of the next launch (each chunk still runs once). Returns 0, or -1 if n is out of
   range (nothing changed). */
int hcqrt_set_workers(int n) {
  if (n < 0 || n > MAXW) return -1;
  maxw = n;
  return 0;
}
/* the CPUs workers may be pinned to (the process's affinity mask); n < 2 turns pinning off. Returns 0, or -1 if a
   CPU number is out of range (nothing changed). */
int hcqrt_set_cpus(const i64 *list, int n) {
  if (n < 0 || n > MAXCPU) return -1;
  for (int i = 0; i < n; i++) if (list[i] < 0 || list[i] >= MAXCPU) return -1;
  for (int i = 0; i < n; i++) cpus[i] = (int)list[i];
  ncpus = n; placed_for = -1;
  return 0;
}
"""

SPIN_US = 1000   # default CPU_SPIN_US: how long an idle worker of the native runner spins before it sleeps

def spin_us() -> float:
  """CPU_SPIN_US (microseconds, default SPIN_US; 0: workers sleep as soon as a launch is done).

  >>> spin_us() == float(os.environ.get("CPU_SPIN_US") or SPIN_US)
  True
  """
  v = os.environ.get("CPU_SPIN_US", "")
  try: us = float(v) if v else SPIN_US
  except ValueError: raise ValueError(f"CPU_SPIN_US must be a number of microseconds, got {v!r}") from None
  if not 0 <= us <= 1e6: raise ValueError(f"CPU_SPIN_US must be between 0 and 1000000 microseconds, got {v!r}")
  return us

def spin_iterations(image: LoadedImage | None, us: float) -> int:
  """Pause iterations that take about `us` microseconds on this CPU: the runner's hcqrt_pause_loop timed, best of 3
  (a preempted try only makes one slower).

  >>> spin_iterations(None, 0)   # (no spin: nothing to time)
  0
  """
  if us <= 0: return 0
  loop, n, best = image.function("hcqrt_pause_loop", [ctypes.c_int], None), 2048, float("inf")
  for _ in range(3):
    t = time.perf_counter_ns()
    loop(n)
    best = min(best, time.perf_counter_ns() - t)
  return max(1, min(int(us * 1000 * n / max(best, n)), (1 << 31) - 1))   # (a pause of at least 1 ns)

class _CRunner:
  """The RUNNER_C object loaded by our ELF loader: hcqrt_run(fn, args, nargs, threads)."""
  MAXARGS = 63
  def __init__(self, obj: bytes):
    self.image = load_elf(obj)
    self.image.keep_forever()  # its worker threads run this code until the process ends
    # pause iterations a worker spins after a job before it sleeps (and the caller, waiting for workers). The time
    # between two launches of a loop is the Python work of one step, 0.1-0.3 ms for `(a @ b).realize()` at N=512;
    # a worker asleep by then costs a futex wake-up, and on a VM the wake of an idle vCPU: with the old fixed 4000
    # iterations (46-60 us at 11.5-15 ns a pause) the 512^3 realize's median was 1.18-1.23 ms, with 100000 (1.2-1.5
    # ms) 0.98-1.03 ms (minimum 0.94-0.97 -> 0.88-0.92; numpy 0.91-0.93), 2-core AVX-512 Xeon, quiet, one process.
    # OpenMP runtimes spin for milliseconds too (libgomp's GOMP_SPINCOUNT, Intel's KMP_BLOCKTIME). Every launch
    # spins: the runner wakes at most one worker per other CPU, so a spin never takes a CPU another of its threads needs.
    self.spin = spin_iterations(self.image, spin_us())
    self.run_fn = self.image.function("hcqrt_run", [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_int] * 3, ctypes.c_int)
    self.run_list_fn = self.image.function("hcqrt_run_list", [ctypes.c_void_p, ctypes.c_int], ctypes.c_int)
    # (the C runner's; the LLVM IR runner has none: a profiled replay then runs its launches one at a time)
    self.run_list_timed_fn = (self.image.function("hcqrt_run_list_timed", [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p], ctypes.c_int)
                              if "hcqrt_run_list_timed" in self.image.symbols else None)
    self.reset = self.image.function("hcqrt_reset", [])
    self.set_cpus = self.image.function("hcqrt_set_cpus", [ctypes.c_void_p, ctypes.c_int], ctypes.c_int)
    self._set_workers = self.image.function("hcqrt_set_workers", [ctypes.c_int], ctypes.c_int)
    self.lock = threading.Lock()  # the runner's job slot is global: one launch at a time
    self._args = (ctypes.c_int64 * self.MAXARGS)()
    self.pin(os.environ.get("CPU_PIN", "1") != "0")
    self.workers(RUNNER_WORKERS)
  def workers(self, n: int) -> None:
    """Wake at most n workers per launch (default: one per CPU besides the caller's): a launch of more cores than that,
    a kernel cut into chunks (compiler/opt/heuristic.py thread_chunks), has them claimed in turn by the threads there are."""
    with self.lock:
      if self._set_workers(n) != 0: raise ValueError(f"CPU runner: {n} workers is out of range (0..{RUNNER_MAX_WORKERS})")

  def pin(self, on: bool) -> None:
    """Pin the workers to the process's CPUs, each to one the caller is not on (CPU_PIN=0: leave them to the OS)."""
    cpus = sorted(os.sched_getaffinity(0)) if on and hasattr(os, "sched_getaffinity") else []
    arr = (ctypes.c_int64 * (len(cpus) or 1))(*cpus)
    with self.lock:
      if self.set_cpus(arr, len(cpus)) != 0: self.set_cpus(arr, 0)   # (a CPU number past the runner's mask size)

  def run(self, fn_addr: int, args: list, threads: int) -> None:
    n = len(args)
    with self.lock:
      # (one argument array, filled under the lock: hcqrt_run copies it before it returns; too many arguments go in an
      # array of their own, for the runner to refuse)
      if n <= self.MAXARGS:
        arr = self._args
        arr[:n] = args
      else: arr = (ctypes.c_int64 * n)(*args)
      rc = self.run_fn(fn_addr, arr, n, threads, self.spin)
    if rc != 0: raise RuntimeError(f"CPU runner failed ({'bad arguments' if rc == -1 else 'pthread_create failed'}) for a launch on {threads} threads")

  def run_list(self, table: np.ndarray, n: int, times: np.ndarray | None = None) -> None:
    """Run a launch list; `times` (int64, n + 1): CLOCK_MONOTONIC ns before the first launch and after each."""
    with self.lock:
      rc = self.run_list_fn(table.ctypes.data, n) if times is None else self.run_list_timed_fn(table.ctypes.data, n, times.ctypes.data)
    if rc != 0: raise RuntimeError(f"CPU runner refused a launch list of {n} launches (code {rc})")

_pool = _Pool()
_runner: _CRunner | None = None

def install_runner(obj: bytes | None) -> None:
  """Use the native runner (compile_c(RUNNER_C, "hcqrt_runner") output) for multi-core launches; None = Python pool.

  The runner's image stays mapped for the life of the process (its threads live on).
  """
  global _runner
  if obj is None: _runner = None; return
  if obj not in _kept: _kept[obj] = _CRunner(obj)
  _runner = _kept[obj]
_kept: dict[bytes, _CRunner] = {}  # runners that may own live threads are never unmapped

def _reset_after_fork() -> None:
  global _pool
  _pool = _Pool()  # worker threads do not survive fork; the child starts new ones when needed
  for r in _kept.values(): r.reset(); r.lock = threading.Lock()
os.register_at_fork(after_in_child=_reset_after_fork)

class CPUProgram:
  """A C kernel loaded from an ELF object with our own loader.

  Calling it runs `name(bufs..., vals..., core)` for core in 0..threads-1 and returns only when every call
  has finished; `wait=True` additionally returns the elapsed seconds (else None).
  """
  def __init__(self, name: str, obj: bytes):
    self.name, self.image = name, load_elf(obj)
    if name not in self.image.symbols:
      raise RuntimeError(f"kernel {name!r} not found in its object (defined: {sorted(self.image.symbols)})")
    self.addr: int = self.image.symbols[name]
    self._fns: dict[tuple[int, int], object] = {}  # (nbufs, nvals) -> ctypes callable, built once

  def _fn(self, nbufs: int, nvals: int):
    if (f := self._fns.get((nbufs, nvals))) is None:
      f = self._fns[(nbufs, nvals)] = self.image.function(self.name, [ctypes.c_void_p] * nbufs + [ctypes.c_int] * (nvals + 1))
    return f

  def __call__(self, *bufs: CPUBuffer, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] = (1, 1, 1), threads: int = 1,
               vals: Sequence[int] = (), wait: bool = True) -> float | None:
    """Run on `threads` cores (interface.Program: the GPU launch dims are ignored)."""
    args = [b.address for b in bufs]
    if vals: args.extend(vals)
    # (a multi-core launch through the native runner needs only the kernel's address: no ctypes function looked up)
    if threads.__class__ is int and threads > 1 and _runner is not None and len(args) <= _CRunner.MAXARGS:
      st = time.perf_counter()
      _runner.run(self.addr, args, threads)
      return time.perf_counter() - st if wait else None
    fn = self._fns.get(key := (len(bufs), len(vals))) or self._fn(*key)
    st = time.perf_counter()
    if threads == 1: fn(*args, 0)
    elif isinstance(threads, int) and threads > 1: _pool.run(fn, args, threads)
    else: raise ValueError(f"kernel {self.name}: threads must be an int >= 1, got {threads!r}")
    return time.perf_counter() - st if wait else None

  def __repr__(self) -> str: return f"<CPUProgram {self.name} at {self.image.symbols[self.name]:#x}>"

class CPULaunchList:
  """Kernel launches bound once and run in order by one native call: the CPU's replay of a TinyJit capture.

  items: GraphExec(CPUProgram, bufs, vals, threads=n) (hcqrt/interface.py). The launches live in one int64 table of records
  [fn, nargs, threads, spin, buf addresses..., vals...] that the runner's hcqrt_run_list walks, so a replay costs
  one ctypes call however many kernels it holds; `replay(bufs={(item, arg): buf}, vals={(item, j): v})` patches
  table words first (the JIT swaps argument and output buffers, a symbolic shape its ints). The runner pins its workers
  away from the caller's CPU before each multi-core launch. Without the native runner (no C compiler), or for a launch
  of more arguments than it takes, the same table is walked in Python.

  >>> import ctypes, numpy as np, subprocess, tempfile
  >>> d = tempfile.mkdtemp(); _ = open(f"{d}/k.c", "w").write("void inc(float *a, int core) { a[0] += 1; }")
  >>> _ = subprocess.run(["cc", "-c", "-O2", "-fPIC", f"{d}/k.c", "-o", f"{d}/k.o"], check=True)
  >>> dev, prog = CPUDevice(), CPUProgram("inc", open(f"{d}/k.o", "rb").read())
  >>> a = dev.allocator.alloc(4)
  >>> g = CPULaunchList([GraphExec(prog, [a])] * 3); _ = g.replay()
  >>> np.frombuffer(a.view(), np.float32).tolist()
  [3.0]
  """
  completes_on_return, clock = True, "host"   # (interface.Graph) a replay returns once every launch ran; times: perf_counter ns
  def __init__(self, items: Sequence[GraphItem], timestamps: bool = False):
    words: list[int] = []
    self.offsets: list[int] = []   # table index of each launch's first argument
    self.items: list[GraphExec] = []   # (keeps the programs, and so their code, mapped)
    for i, it in enumerate(items):
      if not isinstance(it, GraphExec): raise ValueError(f"CPULaunchList: item {i} is {it!r}; only kernel launches (GraphExec) can be listed")
      if not isinstance(it.threads, int) or it.threads < 1: raise ValueError(f"kernel {it.prog.name}: threads must be an int >= 1, got {it.threads!r}")
      args = [b.address for b in it.bufs] + [int(v) for v in it.vals]
      self.offsets.append(len(words) + 4)
      words += [it.prog.addr, len(args), it.threads, _runner.spin if _runner is not None else 0, *args]
      self.items.append(it)
    self.table = np.array(words, np.int64)
    self.n, self.nbufs = len(items), [len(it.bufs) for it in self.items]
    self.native = _runner if _runner is not None and all(len(it.bufs) + len(it.vals) <= _CRunner.MAXARGS for it in self.items) else None
    self.times: np.ndarray | None = None   # set by timed(): each replay then records its launches' times there
    self.timestamps = timestamps and self.timed()

  def timed(self) -> bool:
    """Record each launch's start and end on every later replay (launch_times_raw()); False where the runner can't."""
    if self.native is None or self.native.run_list_timed_fn is None: return False
    self.times = np.zeros(self.n + 1, np.int64)
    return True

  def launch_times_raw(self) -> np.ndarray | None:
    """A copy of the last replay's clock readings (n + 1 ns values; launch i ran from [i] to [i + 1]), or None."""
    return None if self.times is None else self.times.copy()

  def kernel_times(self) -> list[tuple[int, int, int]]:
    """(item, start ns, end ns) of each launch of the last replay (timed lists; else [])."""
    t = [] if self.times is None else self.times.tolist()
    return [(i, t[i], t[i + 1]) for i in range(len(t) - 1)]

  def replay(self, bufs: dict[tuple[int, int], CPUBuffer] | None = None, vals: dict[tuple[int, int], int] | None = None,
             wait: bool = False) -> float | None:
    """Patch buffer pointers `{(item, arg): buf}` and ints `{(item, j): v}`, then run every launch; `wait=True`
    returns the seconds the launches took. Launches are complete when this returns."""
    t, off = self.table, self.offsets
    for (i, a), b in (bufs or {}).items(): t[off[i] + a] = b.address
    for (i, j), v in (vals or {}).items(): t[off[i] + self.nbufs[i] + j] = v
    st = time.perf_counter()
    if self.native is not None: self.native.run_list(t, self.n, self.times)
    else:
      for it, o in zip(self.items, off):
        nb, nv = len(it.bufs), len(it.vals)
        args = t[o:o + nb + nv].tolist()
        fn = it.prog._fns.get((nb, nv)) or it.prog._fn(nb, nv)
        if it.threads == 1: fn(*args, 0)
        else: _pool.run(fn, args, it.threads)
    return time.perf_counter() - st if wait else None

class CPUDevice:
  """The host as a device: allocator, core count, the names of its renderer and assembler, and the ISA its kernels
  are compiled for (hcqrt/cpu/isa.py; `isa` argument, else $CPU_ISA, else native): `isa`, `simd_bytes`,
  `vector_regs` and `cc_flags` are what the compiler reads.

  >>> dev = CPUDevice(); dev.name, dev.ncores >= 1
  ('CPU', True)
  >>> v3 = CPUDevice(isa="x86-64-v3"); v3.isa, v3.simd_bytes, v3.vector_regs, v3.cc_flags[0]
  ('x86-64-v3', 32, 16, '-march=x86-64-v3')
  """
  name = "CPU"
  renderer = "c"
  assembler = "c"
  def __init__(self, name: str = "CPU", runner_obj: bytes | None = None, isa: str | None = None):
    require_x86_64_linux(f"the {name} device")
    if runner_obj is not None: install_runner(runner_obj)
    self.allocator = CPUAllocator()
    self.ncores: int = _NCORES
    self.isa_info: CPUISA = cpu_isa(isa)
    self.isa: str = self.isa_info.name
    self.simd_bytes: int = self.isa_info.simd_bytes       # widest vector registers the kernels may use
    self.vector_regs: int = self.isa_info.vector_regs     # how many of them: the opts' register budget
    self.cc_flags: tuple[str, ...] = self.isa_info.cc_flags   # C compiler flags selecting the ISA

  @property
  def target(self) -> dict:
    """What the compiler needs to know about this device (the fields of compiler/target.py Target). CPU_LLVM=1 asks for
    kernels built by LLVM in-process (renderer "llvm") instead of C and a compiler process."""
    renderer = "llvm" if os.environ.get("CPU_LLVM", "0") == "1" else self.renderer
    return {"device": self.name, "renderer": renderer, "arch": self.isa, "ncores": self.ncores, "simd_bytes": self.simd_bytes,
            "vector_registers": self.vector_regs, "cc_flags": self.cc_flags, "l2_prefetch": host_l2_prefetch_hint()}

  def runner_source(self) -> str:
    """The native thread-pool runner's source in the language of this device's kernels (its `target` renderer): RUNNER_C,
    or with CPU_LLVM=1 the same runner in LLVM IR (hcqrt/cpu/runner_llvm.py), so no C compiler is ever needed.

    >>> CPUDevice().runner_source() in (RUNNER_C, runner_llvm.RUNNER_LLVM)
    True
    """
    return runner_llvm.RUNNER_LLVM if self.target["renderer"] == "llvm" else RUNNER_C

  def program(self, name: str, obj: bytes) -> CPUProgram:
    """Load kernel `name` from an ELF object (same as CPUProgram(name, obj)); raises RuntimeError when the device's
    ISA needs CPU features this host lacks (its kernels can be compiled and inspected, not run)."""
    self.isa_info.check_runnable(f"CPU kernel {name!r}")
    return CPUProgram(name, obj)

  def graph(self, items: Sequence[GraphItem], timestamps: bool = False) -> CPULaunchList | None:
    """interface.Device.graph: kernel launches bound once, replayed by one call (see CPULaunchList); None when an item
    is not a launch (copies run one at a time). `timestamps`: each launch's times where the runner can take them."""
    if not all(isinstance(it, GraphExec) for it in items): return None
    return CPULaunchList(items, timestamps)

  def synchronize(self, timeout_s: float | None = None) -> None:
    """Nothing to wait for: CPU launches and copies are complete when their call returns."""

  def __repr__(self) -> str: return f"<CPUDevice {self.ncores} cores, {self.isa}>"
