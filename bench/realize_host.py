"""The host part of a loop `for _: c = (a @ b).realize()`: where the Python time between two launches goes.

Each iteration is stamped (time.perf_counter_ns) at: the Tensor op (`a @ b`), the realize's call, the kernel launch's
start and end (ExecItem.run's program call), the realize's return, and after the previous result was dropped (c
replaced: its buffer goes back to the allocator's cache). With `--phases` the engine's steps are wrapped too
(create_schedule, pack_matmuls, run_schedule's Buffer and get_kernel; each wrapper adds ~0.3 us). Every figure is
per realize, mean and min over the iterations after a warm-up: the caches are cold after each kernel (it streams its
operands), as in any real loop. `--ab` alternates blocks with engine.LAUNCH_CACHE on and off in one process.

  CPU_ISA=x86-64-v3 python bench/realize_host.py 64 512 1024 --iters 300
  python bench/realize_host.py 512 --phases --ab
"""
from __future__ import annotations
import argparse, os, pathlib, statistics, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import numpy as np
from frontend import Tensor, GlobalCounters
from frontend import engine, buffer

_ns = time.perf_counter_ns

class Stamps:
  """Stamps of the launches of one realize (around the program call inside ExecItem.run) and optional phase sums."""
  def __init__(self, phases: bool):
    self.launch: list[tuple[int, int]] = []
    self.spent: dict[str, int] = {}
    self.saved: list = []
    run = engine.ExecItem.run
    def stamped(ei, debug=None):
      prog = ei.kernel.program if ei.kind == "kernel" else None
      if prog is None: return run(ei, debug)
      def call(*a, **kw):
        t0 = _ns(); r = prog(*a, **kw); self.launch.append((t0, _ns())); return r
      ei.kernel.program = call
      try: return run(ei, debug)
      finally: ei.kernel.program = prog
    self.saved.append((engine.ExecItem, "run", run))
    engine.ExecItem.run = stamped
    if phases:
      for obj, k in ((engine, "create_schedule"), (engine, "pack_matmuls"), (engine, "get_kernel"), (engine, "run_schedule"),
                     (buffer.Buffer, "__init__"), (engine, "Checks"), (engine, "graph_key"), (engine, "cached_entry"),
                     (engine._Prepared, "valid"), (engine, "_run_prepared"), (engine, "realize")):
        fn = getattr(obj, k)
        self.saved.append((obj, k, fn))
        setattr(obj, k, self._timed(fn, "Buffer" if k == "__init__" else k))
  def _timed(self, fn, name):
    spent = self.spent
    def w(*args, **kw):
      t0 = _ns()
      try: return fn(*args, **kw)
      finally: spent[name] = spent.get(name, 0) + _ns() - t0
    return w
  def restore(self) -> None:
    for obj, k, fn in reversed(self.saved): setattr(obj, k, fn)

def loop(a: Tensor, b: Tensor, iters: int, st: Stamps, rows: dict[str, list[float]]) -> None:
  c = None
  for _ in range(iters):
    st.launch.clear(); st.spent.clear()
    t0 = _ns()
    t = a @ b
    t1 = _ns()
    t.realize()
    t2 = _ns()
    c = t; del t   # (the previous c's buffer goes back to the allocator here)
    t3 = _ns()
    s, e2 = st.launch[0][0], st.launch[-1][1]
    kern = sum(y - x for x, y in st.launch)
    for k, v in (("build a @ b", t1 - t0), ("realize: before the launch", s - t1), ("kernels (launch calls)", kern),
                 ("realize: after the launch", t2 - e2), ("drop the previous c", t3 - t2),
                 ("host per iteration", t3 - t0 - kern), *((f"  in {k}", v) for k, v in st.spent.items())):
      rows.setdefault(k, []).append(v / 1e3)
  del c

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("sizes", type=int, nargs="*", default=[64, 512, 1024])
  p.add_argument("--iters", type=int, default=300)
  p.add_argument("--blocks", type=int, default=4, help="blocks of iters (with --ab: taking turns)")
  p.add_argument("--phases", action="store_true")
  p.add_argument("--ab", action="store_true", help="alternate engine.LAUNCH_CACHE on/off per block")
  args = p.parse_args()
  print(f"CPU_ISA={os.environ.get('CPU_ISA', 'native')}, load {os.getloadavg()[0]:.2f}")
  rng = np.random.default_rng(0)
  for n in args.sizes:
    a, b = (Tensor(rng.standard_normal((n, n), dtype=np.float32)).realize() for _ in range(2))
    for _ in range(5): (a @ b).realize()
    st = Stamps(args.phases)
    res: dict[str, dict[str, list[float]]] = {}
    try:
      for blk in range(args.blocks * (2 if args.ab else 1)):
        mode = ("new" if blk % 2 == 0 else "old") if args.ab else "cur"
        if args.ab: engine.LAUNCH_CACHE = mode == "new"
        loop(a, b, 20, st, {})   # (warm-up of this mode)
        loop(a, b, args.iters, st, res.setdefault(mode, {}))
    finally:
      st.restore()
      if args.ab: engine.LAUNCH_CACHE = True
    GlobalCounters.reset()
    for mode, rows in res.items():
      print(f"N={n} [{mode}] {len(rows['host per iteration'])} iterations; us per realize: mean, min, median")
      for k, v in rows.items(): print(f"  {k:28s} {statistics.fmean(v):8.1f} {min(v):8.1f} {statistics.median(v):8.1f}")
  print(f"load {os.getloadavg()[0]:.2f}")

if __name__ == "__main__": main()
