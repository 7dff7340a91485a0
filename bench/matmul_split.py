"""Where one timed `(a @ b).realize()` of bench/_ours.py spends its time: each launch of the schedule (pack kernels and
the product) timed alone on its held buffers, the same launches back to back, the realize itself (scheduling, buffers
from the allocator's cache, launches), and its host part (the realize's wall time less its launches' own times). Every
figure is the minimum and the median over the repeats, the two taking turns, so a loaded host shows as a gap between
them: on a 2-core machine shared with other jobs the median of a few runs (what bench/run.py prints) can be half the
speed of a quiet minute. `--cpu` adds each launch with every core's share run on this thread, in thread CPU time
(work, not waiting: what another process on the cores inflates least).

`--phases` adds where the host part goes: the realize's time before its first launch, between its launches and after
the last (stamps around each ExecItem.run: the launches' own Python is in none of the three), and the time inside the
engine's steps (create_schedule, pack_matmuls, prebuild, Buffer, get_kernel; each wrapped, so each also carries its
wrapper's ~0.3 us), per realize. On a shared host the minima are what compares.

  python bench/matmul_split.py 512 1024 2048 --reps 40
  CPU_ISA=x86-64-v3 python bench/matmul_split.py 1024 --cpu
  python bench/matmul_split.py 512 2048 --phases
"""
from __future__ import annotations
import argparse, itertools, pathlib, statistics, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import numpy as np
from frontend import Tensor, GlobalCounters
from frontend import engine

def _launches(a: Tensor, b: Tensor) -> list:
  """The ExecItems one realize of a @ b runs (recorded, so they can be launched again on the same buffers)."""
  got, run = [], engine.ExecItem.run
  def rec(self, debug=None):
    got.append(self)
    return run(self, debug)
  engine.ExecItem.run = rec
  try: (a @ b).realize()
  finally: engine.ExecItem.run = run
  return got

def split(n: int, reps: int, cpu: bool) -> None:
  rng = np.random.default_rng(0)
  a, b = (Tensor(rng.standard_normal((n, n), dtype=np.float32)).realize() for _ in range(2))
  for _ in range(3): (a @ b).realize()   # compiled, and the allocator's cache holds the buffers
  eis = _launches(a, b)
  alone: dict[str, list[float]] = {e.kernel.name: [] for e in eis}
  one: dict[str, list[float]] = {e.kernel.name: [] for e in eis}
  seq, real, host = [], [], []
  for _ in range(reps):
    for e in eis:
      alone[e.kernel.name].append(e.kernel.program(*[x.raw for x in e.bufs], **e.kernel.launch_kwargs, wait=True))
      if cpu:
        fn, args = e.kernel.program._fn(len(e.bufs), 0), [x.raw.address for x in e.bufs]
        t0 = time.thread_time()
        for core in range(e.kernel.threads): fn(*args, core)
        one[e.kernel.name].append(time.thread_time() - t0)
    t0 = time.perf_counter()
    for e in eis: e.kernel.program(*[x.raw for x in e.bufs], **e.kernel.launch_kwargs, wait=True)
    seq.append(time.perf_counter() - t0)
    t = a @ b   # (the graph is built untimed, as bench/_ours.py does)
    GlobalCounters.reset()
    t0 = time.perf_counter()
    t.realize()
    real.append(dt := time.perf_counter() - t0)
    host.append(dt - GlobalCounters.time_sum_s)
    del t
  ms = lambda xs: f"{min(xs) * 1e3:8.3f} {statistics.median(xs) * 1e3:8.3f}"
  flop = 2 * n ** 3
  print(f"N={n}: {len(eis)} launches, {reps} repeats; ms as min, median")
  for name in alone: print(f"  {name:26s} alone {ms(alone[name])}" + (f"   one thread, CPU time {min(one[name]) * 1e3:8.3f}" if cpu else ""))
  print(f"  {'launches back to back':26s}       {ms(seq)}")
  print(f"  {'realize':26s}       {ms(real)}   -> {flop / min(real) / 1e9:.0f} GFLOP/s at the min, {flop / statistics.median(real) / 1e9:.0f} at the median")
  print(f"  {'host part of the realize':26s}       {ms(host)}")

def phases(n: int, reps: int) -> None:
  """The realize's host time by phase: before the first launch, between launches, after the last, and the engine's
  steps (summed per realize), as min and median over `reps` realizes."""
  from frontend import buffer
  rng = np.random.default_rng(0)
  a, b = (Tensor(rng.standard_normal((n, n), dtype=np.float32)).realize() for _ in range(2))
  for _ in range(3): (a @ b).realize()
  spent: dict[str, float] = {}
  def timed(fn, name):
    def w(*args, **kw):
      t0 = time.perf_counter()
      try: return fn(*args, **kw)
      finally: spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0
    return w
  runs: list[tuple[float, float]] = []
  run = engine.ExecItem.run
  def stamped(self, debug=None):
    t0 = time.perf_counter(); et = run(self, debug); runs.append((t0, time.perf_counter()))
    return et
  saved = [(engine, k, getattr(engine, k)) for k in ("create_schedule", "pack_matmuls", "prebuild", "get_kernel")]
  saved += [(buffer.Buffer, "__init__", buffer.Buffer.__init__), (engine.ExecItem, "run", run)]
  for obj, k, fn in saved[:-1]: setattr(obj, k, timed(fn, f"{k if k != '__init__' else 'Buffer'}"))
  engine.ExecItem.run = stamped
  rows: dict[str, list[float]] = {}
  try:
    for _ in range(reps):
      t = a @ b
      spent.clear(); runs.clear()
      t0 = time.perf_counter(); t.realize(); t1 = time.perf_counter()
      del t
      rows.setdefault("before the first launch", []).append(runs[0][0] - t0)
      rows.setdefault("between launches (sum)", []).append(sum(s - e for (_, e), (s, _) in itertools.pairwise(runs)))
      rows.setdefault("after the last launch", []).append(t1 - runs[-1][1])
      for k, v in spent.items(): rows.setdefault(f"  in {k}", []).append(v)
  finally:
    for obj, k, fn in saved: setattr(obj, k, fn)
  print(f"N={n}: host phases of a realize, {reps} repeats; us as min, median")
  for k, v in rows.items(): print(f"  {k:26s} {min(v) * 1e6:8.1f} {statistics.median(v) * 1e6:8.1f}")

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("sizes", type=int, nargs="*", default=[512, 1024, 2048])
  p.add_argument("--reps", type=int, default=30)
  p.add_argument("--cpu", action="store_true", help="also each launch's work on one thread, in thread CPU time")
  p.add_argument("--phases", action="store_true", help="also where the host part goes (before, between, after the launches)")
  args = p.parse_args()
  for n in args.sizes:
    split(n, args.reps if n < 2048 else max(5, args.reps // 4), args.cpu)
    if args.phases: phases(n, args.reps if n < 2048 else max(5, args.reps // 4))

if __name__ == "__main__": main()
