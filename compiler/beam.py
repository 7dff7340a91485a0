"""BEAM search: try sequences of opts (compiler/opt/apply.py Opt) on a kernel, keep the fastest, bounded in time.

The compiler stays device-free: the caller (frontend/beam_runner.py) supplies `run(built) -> (seconds, outputs)`, which
loads a built candidate on the device, runs it on random input buffers (the same for every candidate) and returns
its time and its output buffers. Candidates are built by compiler/pipeline.py compile_kernel (the very function the
engine builds the winner with, so the timed binary is the one that runs later): rendered, then compiled, in a pool of
worker processes (the C compiler is the slow part), then timed one by one in this process while the pool is idle, so
timings don't share the cores with compiles.

The baseline is the default heuristic's kernel (compile_kernel with opts=None): it is built and timed first, and its
outputs are the reference every candidate must match (a candidate whose outputs differ is dropped when it is timed, so
it is neither picked nor expanded). A kernel the heuristic runs in under `min_s` (BEAM_MIN_US, default 10 us) is not
searched: launch overhead bounds it, and a step of a small model has dozens of such kernels (those of 10-100 us are
worth it: in the digits step they are half the kernel time, and the heuristic, tuned on big kernels, leaves 1.5-3x
there). Otherwise the search is bounded: each round renders every legal next opt of every beam entry, drops the ones
whose source was seen already, and compiles and times at most MAX_CANDIDATES of them (interleaving the opt kinds, so
one kind's many amounts don't crowd the others out); a candidate whose first run is SLOW_CUTOFF x the best is not run
again; the search stops when a round finds nothing 1% faster, after MAX_DEPTH opts, or when its time budget is spent
(BEAM_BUDGET seconds, default 4, times the heuristic kernel's time in ms clamped to 0.5..2: the search time goes where
the kernel time is; compiles not started by then are dropped). The winner must beat the heuristic when both run
again in turns (`confirm`: by SMALL_GAIN run after run, or by GAIN when the runs spread), else the result is None:
keep the heuristic.

The result (the winner's opts, or None for the heuristic) is written to `$HCQRT_CACHE/beam/<key>.json`, key = sha256 of
the kernel's structure, the Target and the width; the next search for the same kernel reads it and builds and times
nothing.

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
from dataclasses import dataclass, field, replace as dc_replace
from collections.abc import Callable
import hashlib, json, os, sys, time, warnings
import numpy as np
from compiler.lower import LoweredKernel
from compiler.target import Target
from compiler.opt.base import Opt, OptError, OptKind
from compiler.opt.apply import candidate_opts, has_vectors, work, THREAD_MIN_WORK
from compiler.opt.heuristic import apply_opts
from compiler.pipeline import CompiledKernel, Launch, compile_kernel, backend
from compiler.assemble.disk_cache import cache_root, read_cached, write_cached
from compiler.beam_pool import WorkerPool, WorkerError
from compiler.settings import env_float

BEAM_VERSION = 4            # bump when opts or the rules change meaning: old cache entries are then ignored
MAX_DEPTH = 4               # opts per sequence
TIME_REPS = 3               # timed runs per candidate (the minimum counts)
SLOW_CUTOFF = 3.0           # a candidate whose first run is this many times slower than the best stops there
PRUNE = 2.0                 # a beam entry this many times slower than the best is not expanded
MAX_CANDIDATES = 12         # compiled and timed per round
RENDER_FACTOR = 3           # ... out of at most this many times as many rendered (the rest wait for the next round)
GAIN = 0.95                 # the winner's fastest and median runs below this fraction of the heuristic's, or...
SMALL_GAIN = 0.98           # ...all the winner's runs but its slowest quarter below this fraction of the heuristic's fastest...
CONFIRM_REPS = 7            # ...when both are run again in turns, this many times each (see `confirm`)...
CONFIRM_ROUNDS = 2          # ...and once more when undecided
JOB_TIMEOUT_S = 120.0       # a render or C compile in a worker answers within this, else the search ends (no hang)
# the order the opt kinds take turns in a round's candidates: what most often beats the heuristic on the CPU first
KIND_ORDER = (OptKind.DEFAULT, OptKind.UPCAST, OptKind.UNROLL, OptKind.SWAP, OptKind.SPLIT, OptKind.THREAD, OptKind.REDUCE_UNROLL,
              OptKind.VECTOR, OptKind.PEEL, OptKind.REDUCE_VECTOR, OptKind.PAD)

def min_seconds() -> float:
  """Kernels the heuristic runs faster than this are not searched (BEAM_MIN_US, microseconds; default 10)."""
  return env_float("BEAM_MIN_US", 10.0) * 1e-6

def budget_seconds() -> float:
  """The time one kernel's search may take after its baseline (BEAM_BUDGET, seconds; default 4), before scaling."""
  return env_float("BEAM_BUDGET", 4.0)

@dataclass
class Built:
  """One compiled candidate: its opts (None: the default heuristic) and the CompiledKernel (source, binary, launch
  arguments), once timed its time and outputs."""
  opts: tuple | None
  ck: CompiledKernel
  time_s: float = float("inf")
  outputs: list = field(default_factory=list)
  wrong: bool = False
  @property
  def name(self) -> str: return self.ck.name
  @property
  def src(self) -> str: return self.ck.src
  @property
  def binary(self) -> bytes: return self.ck.binary
  @property
  def launch(self) -> Launch: return self.ck.launch

def build(k: LoweredKernel, opts: tuple | None, target: Target, assemble: bool = True) -> Built | None:
  """Build a candidate with the compile pipeline (opts None: the heuristic). None when an opt is not legal.
  `assemble=False` renders only (binary b"": `finish` assembles it)."""
  try: return Built(None if opts is None else tuple(opts), compile_kernel(k, target, None if opts is None else tuple(opts), assemble=assemble))
  except OptError: return None

def finish(b: Built, target: Target) -> Built:
  """A rendered candidate assembled: its binary from its source, as compile_kernel would have made it."""
  return dc_replace(b, ck=dc_replace(b.ck, binary=backend(target).assemble(b.ck.src, b.ck.name, target)))

# the kernel being searched, sent to each worker once (compiler/beam_pool.py: _begin is its init), so a job sends only
# its opts; UOps and dtypes unpickle to the worker's interned objects, so identity checks keep working there
_SEARCH: dict = {}

def _begin(k: LoweredKernel) -> None:
  _SEARCH.clear()
  _SEARCH["kernel"] = k

def _applied(opts: tuple, dev: Target) -> LoweredKernel:
  """The searched kernel with `opts` applied, memoized per process: a candidate is its beam entry's opts plus one, and
  the entry's (DEFAULT alone costs most of a render) is applied once per worker, not once per candidate. Opts number
  their new loops from the kernel's own counter, so this builds the same source as applying all of them at once."""
  memo = _SEARCH.setdefault("memo", {})
  if (kb := memo.get(opts)) is None: kb = memo[opts] = apply_opts(_SEARCH["kernel"], opts, dev)
  return kb

def _render_job(args) -> Built | None:
  opts, dev = args
  k = _SEARCH["kernel"]
  try:
    if not opts: return build(k, opts, dev, assemble=False)
    b = build(_applied(opts[:-1], dev), opts[-1:], dev, assemble=False)
    return None if b is None else Built(opts, dc_replace(b.ck, opts=opts))
  except OptError: return None
  except Exception as e:
    print(f"BEAM: candidate {list(opts)} of {k.name} failed to render: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
    return None

def _assemble_job(args) -> Built | None:
  b, dev = args
  try: return finish(b, dev)
  except Exception as e:
    print(f"BEAM: candidate {list(b.opts or ())} of {b.name} failed to build: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
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

def interleave(cands: list[tuple[int, tuple]]) -> list[tuple]:
  """Candidate sequences (beam entry index, opts) ordered so that the opt kinds (of their last opt) take turns, in
  KIND_ORDER, the best beam entry's first: the first n of them try n different kinds of step before any kind twice.

  >>> [s[-1].kind.value for s in interleave([(0, (Opt("UPCAST", 0, 2),)), (0, (Opt("UPCAST", 0, 4),)), (0, (Opt("SWAP", 0, 1),))])]
  ['UPCAST', 'SWAP', 'UPCAST']
  """
  seen: dict[tuple, int] = {}
  keyed = []
  for bi, s in cands:
    kind = s[-1].kind
    nth = seen[(bi, kind)] = seen.get((bi, kind), -1) + 1
    keyed.append(((nth, bi, KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)), s))
  return [s for _, s in sorted(keyed, key=lambda x: x[0])]

class _Progress:
  def __init__(self, name: str, on: bool): self.name, self.on, self.t0 = name, on, time.perf_counter()
  def show(self, rnd: int, done: int, total: int, best: float):
    if not self.on: return
    bar = "#" * (20 * done // max(total, 1))
    print(f"\rBEAM {self.name[:28]:28s} round {rnd} [{bar:20s}] {done:3d}/{total:<3d} best {best * 1e6:9.1f} us "
          f"{time.perf_counter() - self.t0:5.1f} s", end="", file=sys.stderr, flush=True)
  def end(self, best: Built, st: dict, ref_s: float):
    if not self.on: return
    print(f"\rBEAM {self.name[:28]:28s} {st['timed']} timed in {time.perf_counter() - self.t0:.1f} s (compile {st['compile_s']:.1f} s, "
          f"runs {st['run_s']:.1f} s): {best.time_s * 1e6:.1f} us (heuristic {ref_s * 1e6:.1f} us) with "
          f"{'the heuristic' if best.opts is None else list(best.opts)}", file=sys.stderr, flush=True)

def _cached(path) -> tuple[bool, tuple | None]:
  if (text := read_cached(path)) is None: return False, None
  try: entry = json.loads(text)
  except ValueError: return False, None
  if not isinstance(entry, dict) or "opts" not in entry: return False, None
  if entry["opts"] is None: return True, None
  try: return True, tuple(Opt.from_json(o) for o in entry["opts"])
  except (KeyError, TypeError, IndexError): return False, None

def confirm(run: Callable[[Built], tuple[float, list]], win: Built, base: Built, reps: int = CONFIRM_REPS,
            rounds: int = CONFIRM_ROUNDS) -> tuple[bool, list[float], list[float]]:
  """Whether `win` really beats the heuristic's `base`: both run `reps` times in turns (which goes first alternates, so
  neither always runs on caches or cores the other warmed). The winner wins when all its runs but the slowest quarter
  (rounded down) are below SMALL_GAIN x the heuristic's fastest run, or when both its fastest and its median run are
  below GAIN x the heuristic's. Undecided while its fastest run is below SMALL_GAIN x the heuristic's fastest (other
  processes slowed some of its runs), both run `reps` times more, up to `rounds` times, and the rule is applied to
  all the runs. Two kernels of the same speed give samples of one distribution: n - k given runs of n being the fastest
  of 2n has a chance of C(n+k, k) / C(2n, n): 8 in 3432 (1 in 429) for 7 + 7 runs (k = 1), 1 in 59000 for 14 + 14
  (k = 3), before the SMALL_GAIN margin, which makes it rarer still; while a real gain of a few % passes as soon as
  most runs spread less than the gain (the runner makes them: see frontend/beam_runner.py). A big gain timed on a
  loaded machine passes by the second rule. Returns (won, winner's times, heuristic's times).

  >>> t = {"w": iter([9.6, 9.7, 9.6, 9.8, 9.6, 9.7, 9.6]), "b": iter([10.0, 10.1, 10.0, 10.2, 10.0, 10.1, 10.0])}
  >>> confirm(lambda b: (next(t[b]), []), "w", "b")[0]
  True
  """
  tw: list[float] = []
  tb: list[float] = []
  med = lambda ts: sorted(ts)[len(ts) // 2]
  for _ in range(rounds):
    for i in range(reps):
      for b, ts in ((win, tw), (base, tb))[::1 if i % 2 == 0 else -1]: ts.append(run(b)[0])
    if sorted(tw)[-1 - len(tw) // 4] < SMALL_GAIN * min(tb) or (min(tw) < GAIN * min(tb) and med(tw) < GAIN * med(tb)): return True, tw, tb
    if min(tw) >= SMALL_GAIN * min(tb): break   # not even its fastest run: more runs won't change that
  return False, tw, tb

def beam_search(k: LoweredKernel, target: Target, run: Callable[[Built], tuple[float, list]], width: int = 2, *,
                use_cache: bool = True, progress: bool = False, workers: int | None = None, stats: dict | None = None,
                max_depth: int | None = None, min_s: float | None = None, budget_s: float | None = None,
                max_candidates: int | None = None) -> tuple[Opt, ...] | None:
  """The opts of the fastest correct variant of the unoptimized kernel `k` found by a beam of `width` (see the module
  doc), or None when the default heuristic's kernel is kept. `run(built)` runs a candidate and returns (seconds,
  [output arrays]). `min_s`, `budget_s`, `max_candidates`, `max_depth` override BEAM_MIN_US, BEAM_BUDGET,
  MAX_CANDIDATES and MAX_DEPTH. `stats` (if given) gets counters: cache_hit, skipped (too fast to search), offered (next
  opts listed), rendered,
  built, timed, rounds, compile_s and run_s (where the search time went), best_opts (None: the heuristic) and `best`
  (the winner's Built) after a search."""
  st = stats if stats is not None else {}
  st.update(cache_hit=False, skipped=False, offered=0, rendered=0, built=0, timed=0, wrong=0, rounds=0, compile_s=0.0, run_s=0.0)
  max_depth = MAX_DEPTH if max_depth is None else max_depth
  cap = MAX_CANDIDATES if max_candidates is None else max_candidates
  path = cache_path(cache_key(k, target, width))
  if use_cache:
    hit, opts = _cached(path)
    if hit:
      try:
        if opts is not None: apply_opts(k, opts, target)   # still legal for this kernel and target
        st.update(cache_hit=True, best_opts=None if opts is None else list(opts))
        return opts
      except (OptError, ValueError, KeyError, TypeError, IndexError): pass   # stale entry: search again
  prog = _Progress(k.name, progress)
  def timed(b: Built, reps: int, best: float) -> None:
    t0 = time.perf_counter()
    t, outs = run(b)
    if t < SLOW_CUTOFF * best:
      for _ in range(reps - 1): t = min(t, run(b)[0])
    b.time_s, b.outputs = t, outs
    st["timed"] += 1
    st["run_s"] += time.perf_counter() - t0
  # the baseline: the heuristic's kernel, built here (one compile: no pool for a kernel that is not searched)
  t0 = time.perf_counter()
  base = build(k, None, target)
  st["compile_s"] += time.perf_counter() - t0
  if base is None: raise RuntimeError(f"BEAM: the default kernel {k.name} does not build")
  st["built"] += 1
  timed(base, TIME_REPS, float("inf"))
  ref = base.outputs
  def keep(opts: tuple | None, b: Built) -> tuple | None:
    st["best_opts"], st["best"] = (None if opts is None else list(opts)), b
    prog.end(b, st, base.time_s)
    if use_cache: write_cached(path, json.dumps({"kernel": k.name, "opts": None if opts is None else [o.to_json() for o in opts],
                                                  "time_s": b.time_s, "heuristic_s": base.time_s}).encode())
    return opts
  if base.time_s < (min_seconds() if min_s is None else min_s):
    st["skipped"] = True
    return keep(None, base)
  # the budget, scaled by what the kernel costs: half for a kernel of 0.5 ms or less, twice for 2 ms or more
  deadline = time.perf_counter() + (budget_seconds() * min(2.0, max(0.5, base.time_s / 1e-3)) if budget_s is None else budget_s)
  # the workers are fresh interpreters that import only the compiler (compiler/beam_pool.py says why not fork)
  _begin(k)
  tried: dict[tuple, Built | None] = {}
  seen_src: dict[str, Built] = {base.src: base}
  try:
    with WorkerPool(workers or max(1, min(4, os.cpu_count() or 1)), "compiler.beam:_begin", k, JOB_TIMEOUT_S) as pool:
      def evaluate(seqs: list[tuple], rnd: int) -> list[Built]:
        """Render seqs (in order), compile and time the first `cap` whose source is new; the Builts of seqs."""
        seqs = [s for s in dict.fromkeys(seqs) if s not in tried][:RENDER_FACTOR * cap]   # (in interleaved order)
        t0 = time.perf_counter()
        # past the budget the renders and compiles not started yet are dropped (those running finish)
        rendered = pool.map("compiler.beam:_render_job", [(s, target) for s in seqs], start_by=deadline)
        st["rendered"] += sum(r is not None for r in rendered)
        fresh: dict[str, tuple] = {}
        for s, r in zip(seqs, rendered):
          if r is None: tried[s] = None
          elif (same := seen_src.get(r.src)) is not None:   # the same code by another path (the heuristic's, maybe):
            tried[s] = Built(s, same.ck, same.time_s, same.outputs, same.wrong)   # its time, these opts to expand
          elif r.src not in fresh and len(fresh) < cap: fresh[r.src] = (s, r)
        jobs = list(fresh.values())
        built = pool.map("compiler.beam:_assemble_job", [(r, target) for _, r in jobs], start_by=deadline)
        st["compile_s"] += time.perf_counter() - t0
        best = min((b.time_s for b in seen_src.values() if not b.wrong), default=float("inf"))
        for i, ((s, _), b) in enumerate(zip(jobs, built)):
          tried[s] = b
          if b is None: continue
          st["built"] += 1
          seen_src[b.src] = b
          if time.perf_counter() > deadline: continue   # out of time: left untimed (never picked)
          prog.show(rnd, i, len(jobs), best)
          timed(b, TIME_REPS, best)
          if len(b.outputs) != len(ref) or not all(_close(o, r) for o, r in zip(b.outputs, ref)):
            b.wrong, b.time_s = True, float("inf")
            st["wrong"] += 1
            print(f"BEAM: candidate {list(b.opts)} of {k.name} gives wrong results; dropped", file=sys.stderr)
          best = min(best, b.time_s)
        prog.show(rnd, len(jobs), len(jobs), best)
        return [b for b in (tried.get(s) for s in seqs) if b is not None]
      # a kernel big enough for the default to use every core always does: a one-core variant only wins when other
      # processes happen to load the machine during the search, and the search is shorter without them
      threads = target.ncores > 1 and not target.gpu and bool(k.global_ranges) and work(k) >= THREAD_MIN_WORK and k.global_ranges[0].src[0].arg >= 2
      # the seed: the heuristic's vectorization (split across the cores); the unoptimized kernel only where there is
      # none (it can run 100x slower than the heuristic: timing it costs more than it teaches)
      seeds = [(Opt("DEFAULT"), Opt("THREAD", 0))] if threads else [(Opt("DEFAULT"),)]
      if not evaluate(seeds, 0): evaluate(seeds := [(Opt("THREAD", 0),)] if threads else [()], 0)
      ranked = lambda bs: sorted({id(b): b for b in bs if b is not None and b.opts is not None and b.time_s < float("inf")}.values(), key=lambda b: b.time_s)
      prune = lambda bs: [b for b in bs[:width] if b.time_s <= PRUNE * bs[0].time_s] if bs else []
      beam = prune(ranked(tried.get(s) for s in seeds))
      best_t = min([base.time_s] + [b.time_s for b in beam])
      for rnd in range(1, max_depth + 1):
        if not beam or time.perf_counter() > deadline: break
        st["rounds"] = rnd
        nxt = []
        for bi, b in enumerate(beam):
          kb = _applied(b.opts, target)
          vec = has_vectors(kb)   # (a second vectorization is never legal: not worth a render)
          nxt += [(bi, b.opts + (o,)) for o in candidate_opts(kb, target) if not (vec and o.kind in (OptKind.VECTOR, OptKind.REDUCE_VECTOR))]
        st["offered"] += len(nxt)
        new = evaluate(interleave(nxt), rnd)
        beam = prune(ranked(beam + new))
        if not beam or beam[0].time_s >= best_t * 0.99: break   # nothing meaningfully faster this round
        best_t = beam[0].time_s
  except WorkerError as e:   # a worker hung or died: keep the heuristic for this run (not cached: the next run searches)
    warnings.warn(f"{e}; {k.name} keeps the default opts", RuntimeWarning, stacklevel=2)
    st["worker_error"] = str(e)
    return None
  finally: _SEARCH.clear()
  win = min((b for b in seen_src.values() if not b.wrong and b.opts is not None), key=lambda b: b.time_s, default=None)
  if win is None or win.time_s >= SMALL_GAIN * base.time_s: return keep(None, base)
  # confirm: the winner and the heuristic run again in turns (a candidate timed while another process briefly held the
  # cores, or within the noise of the heuristic, must not win by luck)
  t0 = time.perf_counter()
  won, tw, tb = confirm(run, win, base)
  win.time_s, base.time_s = min(tw), min(tb)
  st["run_s"] += time.perf_counter() - t0
  st["confirm"] = (tw, tb)
  return keep(win.opts, win) if won else keep(None, base)
