"""`(a @ b).realize()` with compiler/pack.py as it is (new) against one of its module constants changed (old), and
numpy, taking turns in one process, so all three see the same load: on a 2-core host shared with other jobs only
such alternating minima can show a gain of a few percent. Also each side's launches run back to back with every
core's share on this thread, in thread CPU time (the work, which another process on the cores inflates least).

  python bench/matmul_ab.py A_IN_PLACE=0 512 1024 --reps 40     # old: A packed beside a B read in place
  CPU_ISA=x86-64-v3 OPENBLAS_CORETYPE=Haswell python bench/matmul_ab.py A8_IN_PLACE=0 512 384x512x512 --reps 40
"""
from __future__ import annotations
import argparse, pathlib, statistics, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import numpy as np
import compiler.pack as pack
from frontend import Tensor
from matmul_split import _launches

def ab(size: str, old: dict[str, int], reps: int) -> None:
  m, k, n = (int(x) for x in size.split("x")) if "x" in size else (int(size),) * 3
  rng = np.random.default_rng(0)
  an, bn = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
  a, b = Tensor(an).realize(), Tensor(bn).realize()
  new = {name: getattr(pack, name) for name in old}
  sides = {"old": old, "new": new}
  eis = {}
  for side, consts in sides.items():
    for name, v in consts.items(): setattr(pack, name, v)
    for _ in range(3): (a @ b).realize()   # compiled, and the allocator's cache holds the buffers
    eis[side] = _launches(a, b)
  real: dict[str, list[float]] = {"old": [], "new": [], "numpy": []}
  work: dict[str, list[float]] = {"old": [], "new": []}
  for _ in range(reps):
    for side, consts in sides.items():
      for name, v in consts.items(): setattr(pack, name, v)
      t = a @ b   # (the graph is built untimed, as bench/_ours.py does)
      t0 = time.perf_counter()
      t.realize()
      real[side].append(time.perf_counter() - t0)
      del t
      t0 = time.thread_time()
      for e in eis[side]:
        fn, args = e.kernel.program._fn(len(e.bufs), 0), [x.raw.address for x in e.bufs]
        for core in range(e.kernel.threads): fn(*args, core)
      work[side].append(time.thread_time() - t0)
    t0 = time.perf_counter()
    an @ bn
    real["numpy"].append(time.perf_counter() - t0)
  flop = 2 * m * k * n
  print(f"{size}: old = {old}, {reps} repeats taking turns; realize ms as min, median")
  for side, xs in real.items():
    extra = f"   work {min(work[side]) * 1e3:7.3f} ms  {[e.kernel.name for e in eis[side]]}" if side in work else ""
    print(f"  {side:6s} {min(xs) * 1e3:8.3f} {statistics.median(xs) * 1e3:8.3f}  {flop / min(xs) / 1e9:5.0f} GFLOP/s at the min{extra}")

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("old", help="NAME=VALUE[,NAME=VALUE]: compiler/pack.py constants of the old side")
  p.add_argument("sizes", nargs="*", default=["512", "1024"], help="N (N^3) or MxKxN")
  p.add_argument("--reps", type=int, default=30)
  args = p.parse_args()
  old = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in args.old.split(",")}
  for n in args.sizes: ab(n, old, args.reps)

if __name__ == "__main__": main()
