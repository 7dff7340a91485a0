"""BEAM search: try sequences of opts (compiler/opt/apply.py Opt) on a kernel, keep the fastest.

The compiler stays device-free: the caller (frontend/beam_runner.py) supplies `run(built) -> (seconds, outputs)`, which
loads a built candidate on the device, runs it on random input buffers (the same for every candidate) and returns
its time and its output buffers. Candidates are built by compiler/pipeline.py compile_kernel (the very function the
engine builds the winner with, so the timed binary is the one that runs later) in a pool of worker processes (the
C compiler is the slow part), then timed one by one in this process while the pool is idle, so timings don't share
the cores with compiles. The result is the winner's opts; `compile_kernel(kernel, target, opts=winner)` builds it.

Search: the beam starts from the seeds (the default heuristic's vectorization or none, plus the thread split on
kernels big enough for the default to split them); each
round extends every beam entry by every legal next opt, times the new candidates, and keeps the `width` fastest;
it stops when a round finds nothing faster or after MAX_DEPTH opts. The winner is checked against the unoptimized
kernel's outputs on the same random data (a wrong kernel is dropped, the next fastest checked), then its opt list is
written to `$HCQRT_CACHE/beam/<key>.json`, key = sha256 of the kernel's structure, the Target and the width. The next search for the same kernel reads the file: it compiles and times nothing.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.lower import lower
>>> from compiler.dtypes import dtypes
>>> from compiler.uop import Ops
>>> x = LazyBuffer.empty((4, 8), dtypes.float32, "CPU"); x.buffer = object()
>>> k = lower(create_schedule([x.r(Ops.ADD, (1,))])[0].ast)
>>> from compiler.target import Target
>>> len(cache_key(k, Target("CPU", "c", ncores=2, simd_bytes=32), 2))
64
"""
from __future__ import annotations
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from collections.abc import Callable
import hashlib, json, multiprocessing, os, sys, time
import numpy as np
from compiler.lower import LoweredKernel
from compiler.target import Target
from compiler.opt.base import Opt, OptError
from compiler.opt.apply import candidate_opts, work, THREAD_MIN_WORK
from compiler.opt.heuristic import apply_opts
from compiler.pipeline import CompiledKernel, compile_kernel
from compiler.assemble.disk_cache import cache_root, atomic_write

BEAM_VERSION = 2            # bump when opts change meaning: old cache entries are then ignored
MAX_DEPTH = 5               # opts per sequence
TIME_REPS = 3               # timed runs per candidate (the minimum counts)
SLOW_CUTOFF = 3.0           # a candidate whose first run is this many times slower than the best stops there
PRUNE = 2.0                 # a beam entry this many times slower than the best is not expanded

@dataclass
class Built:
  """One compiled candidate: its opts and the CompiledKernel (source, binary, launch arguments), once timed its time and
  outputs."""
  opts: tuple
  ck: CompiledKernel
  time_s: float = float("inf")
  outputs: list = field(default_factory=list)
  @property
  def name(self) -> str: return self.ck.name
  @property
  def src(self) -> str: return self.ck.src
  @property
  def binary(self) -> bytes: return self.ck.binary
  @property
  def launch(self) -> dict: return self.ck.launch

def build(k: LoweredKernel, opts: tuple, target: Target) -> Built | None:
  """Build a candidate with the compile pipeline (runs in a worker process). None when an opt is not legal."""
  try: return Built(tuple(opts), compile_kernel(k, target, tuple(opts)))
  except OptError: return None

# the kernel being searched, inherited by the forked workers: a job sends only its opts (no graph pickling, and the
# workers' UOps and dtypes are the very objects of the parent's graph, so identity checks keep working)
_SEARCH: dict = {}

def _build_job(args) -> Built | None:
  opts, dev = args
  k = _SEARCH["kernel"]
  try: return build(k, opts, dev)
  except Exception as e:
    print(f"BEAM: candidate {list(opts)} of {k.name} failed to build: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
    return None

def cache_key(k: LoweredKernel, target: Target, width: int) -> str:
  """sha256 over the kernel's structure (its UOp graph, buffer dtypes, loops), the target and the beam width."""
  desc = repr((BEAM_VERSION, k.sink.order_key, [d.name for d in k.buf_dtypes], [r.src[0].arg for r in k.global_ranges], k.outputs,
               target, width))
  return hashlib.sha256(desc.encode()).hexdigest()

def cache_path(key: str): return cache_root() / "beam" / f"{key}.json"

def _close(a: np.ndarray, b: np.ndarray) -> bool:
  if a.shape != b.shape: return False
  if a.dtype.kind != "f": return bool(np.array_equal(a, b))
  a64, b64 = a.astype(np.float64), b.astype(np.float64)
  scale = float(np.nanmax(np.abs(b64[np.isfinite(b64)]))) if np.isfinite(b64).any() else 1.0
  return bool(np.allclose(a64, b64, rtol=1e-3, atol=1e-4 * max(scale, 1e-30), equal_nan=True))

class _Progress:
  def __init__(self, name: str, on: bool): self.name, self.on, self.t0 = name, on, time.perf_counter()
  def show(self, rnd: int, done: int, total: int, best: float):
    if not self.on: return
    bar = "#" * (20 * done // max(total, 1))
    print(f"\rBEAM {self.name[:28]:28s} round {rnd} [{bar:20s}] {done:3d}/{total:<3d} best {best * 1e6:9.1f} us "
          f"{time.perf_counter() - self.t0:5.1f} s", end="", file=sys.stderr, flush=True)
  def end(self, best: Built, timed: int, ref_s: float):
    if self.on: print(f"\rBEAM {self.name[:28]:28s} {timed} candidates in {time.perf_counter() - self.t0:.1f} s: {best.time_s * 1e6:.1f} us "
                      f"(unoptimized {ref_s * 1e6:.1f} us) with {list(best.opts)}", file=sys.stderr, flush=True)

def beam_search(k: LoweredKernel, target: Target, run: Callable[[Built], tuple[float, list]], width: int = 2, *,
                use_cache: bool = True, progress: bool = False, workers: int | None = None,
                stats: dict | None = None, max_depth: int = MAX_DEPTH) -> tuple[Opt, ...]:
  """The opts of the fastest correct variant of the unoptimized kernel `k` found by a beam of `width` (see the module
  doc). `run(built)` runs a candidate and returns (seconds, [output arrays]); `stats` (if given) gets counters:
  cache_hit, built, timed, rounds, best_opts, and `best` (the winner's Built) after a search."""
  dev = target
  st = stats if stats is not None else {}
  st.update(cache_hit=False, built=0, timed=0, rounds=0)
  key = cache_key(k, dev, width)
  path = cache_path(key)
  if use_cache and path.exists():
    try:
      opts = tuple(Opt.from_json(o) for o in json.loads(path.read_text())["opts"])
      apply_opts(k, opts, dev)   # still legal for this kernel and target
      st.update(cache_hit=True, best_opts=list(opts))
      return opts
    except (OptError, ValueError, KeyError, TypeError, IndexError): pass   # stale entry: search again
  prog = _Progress(k.name, progress)
  # fork: the workers need nothing but the kernel and the compiler, and a spawned worker would re-run an unguarded
  # __main__ script; they never touch the parent's device or threads
  ctx = multiprocessing.get_context("fork")
  _SEARCH["kernel"] = k
  tried: dict[tuple, Built | None] = {}
  seen_src: dict[str, Built] = {}
  with ProcessPoolExecutor(max_workers=workers or max(1, min(4, os.cpu_count() or 1)), mp_context=ctx) as pool:
    def evaluate(seqs: list[tuple], rnd: int, reps: int = TIME_REPS) -> list[Built]:
      seqs = [s for s in dict.fromkeys(seqs) if s not in tried]
      built = list(pool.map(_build_job, [(s, dev) for s in seqs], chunksize=1))
      st["built"] += sum(b is not None for b in built)
      fresh = []
      for s, b in zip(seqs, built):
        if b is not None and (same := seen_src.get(b.src)) is not None: b = same   # the same code by another path
        tried[s] = b
        if b is not None and b.src not in seen_src:
          seen_src[b.src] = b; fresh.append(b)
      best = min((b.time_s for b in seen_src.values()), default=float("inf"))
      for i, b in enumerate(fresh):
        prog.show(rnd, i, len(fresh), best)
        t, outs = run(b)
        b.outputs = outs
        if t < SLOW_CUTOFF * best:
          for _ in range(reps - 1): t = min(t, run(b)[0])
        b.time_s = t
        best = min(best, t)
        st["timed"] += 1
      prog.show(rnd, len(fresh), len(fresh), best)
      return [b for b in (tried[s] for s in seqs) if b is not None]
    # a kernel big enough for the default to use every core always does: a one-core variant only wins when other
    # processes happen to load the machine during the search, and the search is shorter without them
    threads = dev.ncores > 1 and not dev.gpu and bool(k.global_ranges) and work(k) >= THREAD_MIN_WORK and k.global_ranges[0].src[0].arg >= 2
    # the reference: the unoptimized kernel (split across the cores when big: the same arithmetic per element), run once
    # (it can take seconds); its outputs check the winner
    base = evaluate([(Opt("THREAD", 0),) if threads else ()], 0, reps=1)
    if not base: raise RuntimeError(f"BEAM: the unoptimized kernel {k.name} does not build")
    ref = base[0].outputs
    seeds = [(Opt("DEFAULT"), Opt("THREAD", 0)), (Opt("THREAD", 0),)] if threads else [(), (Opt("DEFAULT"),)]
    evaluate(seeds, 0)
    prune = lambda bs: [b for b in bs[:width] if b.time_s <= PRUNE * bs[0].time_s]   # hopeless entries aren't expanded
    beam = prune(sorted({id(b): b for b in (tried[s] for s in seeds) if b is not None}.values(), key=lambda b: b.time_s))
    best_t = beam[0].time_s
    for rnd in range(1, max_depth + 1):
      st["rounds"] = rnd
      nxt = []
      for b in beam:
        kb = apply_opts(k, b.opts, dev)
        nxt += [b.opts + (o,) for o in candidate_opts(kb, dev)]
      new = evaluate(nxt, rnd)
      pool_all = sorted({id(x): x for x in beam + new}.values(), key=lambda x: x.time_s)
      beam = prune(pool_all)
      if beam[0].time_s >= best_t * 0.99: break   # nothing meaningfully faster this round
      best_t = beam[0].time_s
  _SEARCH.clear()
  ranked = sorted({id(b): b for b in tried.values() if b is not None}.values(), key=lambda b: b.time_s)
  for b in ranked:
    if len(b.outputs) == len(ref) and all(_close(o, r) for o, r in zip(b.outputs, ref)): break
    print(f"BEAM: candidate {list(b.opts)} of {k.name} gives wrong results; dropped", file=sys.stderr)
  else: b = base[0]
  st["best_opts"], st["best"] = list(b.opts), b
  prog.end(b, st["timed"], base[0].time_s)
  if use_cache: atomic_write(path, json.dumps({"kernel": k.name, "opts": [o.to_json() for o in b.opts], "time_s": b.time_s}).encode())
  return b.opts
