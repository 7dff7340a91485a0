"""Where a cold kernel build spends its CPU time, stage by stage: the compile bench's kernels (bench/_ours.py
bench_compile: elementwise, row sum, matmul, softmax over 64x64, each with a never-seen constant) built through the
stages of compiler/pipeline.py compile_kernel, each timed with this thread's CPU time (a loaded host inflates wall time,
not this). Prints one JSON line: the median ms of each stage per kernel.

  CPU_LLVM=1 python bench/compile_stages.py --kernels 40
  python bench/compile_stages.py --profile   # cProfile of the front end (lower..render), by cumulative time
"""
from __future__ import annotations
import argparse, json, pathlib, statistics, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import numpy as np

def _asts(n: int) -> list:
  from frontend import Tensor
  from frontend.engine import target_of
  xn = np.ones((64, 64), np.float32)
  x, y = Tensor(xn).realize(), Tensor(xn).realize()
  kinds = [lambda c: (x * c + y).relu().exp(), lambda c: (x * c).sum(axis=1), lambda c: (x * c) @ y,
           lambda c: (x * c).softmax(axis=-1)]
  out = []
  for i in range(n):
    c = 1.0 + (time.time_ns() % 1_000_003) * 1e-7 + i * 1e-3
    out += [(si.ast, si.name) for si in kinds[i % len(kinds)](c).schedule() if si.kind == "kernel"]
  return out, target_of(x.device)

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--kernels", type=int, default=40, help="expressions built (each gives one or more kernels)")
  p.add_argument("--no-assemble", action="store_true", help="stop after rendering")
  p.add_argument("--profile", action="store_true", help="cProfile the front end instead of timing")
  args = p.parse_args()
  from compiler import pipeline as pl
  from compiler.lower import lower
  asts, target = _asts(args.kernels)
  be = pl.backend(target)
  st: dict[str, list[float]] = {}
  def front(ast, name):
    t = time.thread_time
    t0 = t(); k = lower(ast, name)
    t1 = t(); k, _ = pl.optimize_kernel(k, target, None)
    for rw in be.rewrites: k.sink = rw(k.sink)
    k = pl.apply_rewrites(k, target.renderer)
    t2 = t(); prog = pl.linearize(k)
    t3 = t(); src, _launch = be.render(k, target, prog, pl.plan_launch(k, target, prog) if target.gpu else None)
    t4 = t()
    for s, v in (("lower", t1 - t0), ("optimize", t2 - t1), ("linearize", t3 - t2), ("render", t4 - t3)): st.setdefault(s, []).append(v)
    return k, src
  if args.profile:
    import cProfile, pstats
    pr = cProfile.Profile(); pr.enable()
    for ast, name in asts: front(ast, name)
    pr.disable(); pstats.Stats(pr).sort_stats("cumtime").print_stats(45)
    return
  for ast, name in asts:
    k, src = front(ast, name)
    if not args.no_assemble:
      t0 = time.thread_time(); be.assemble(src, k.name, target); st.setdefault("assemble", []).append(time.thread_time() - t0)
  st["front"] = [sum(v) for v in zip(st["lower"], st["optimize"], st["linearize"], st["render"])]
  print(json.dumps({"renderer": target.renderer, "kernels": len(asts)} | {s: round(statistics.median(v) * 1e3, 3) for s, v in st.items()}))

if __name__ == "__main__": main()
