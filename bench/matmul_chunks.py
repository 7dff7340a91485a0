"""The packed product of `a @ b` launched alone on its buffers, cut into one chunk a core (CPU_CHUNKS=1) against the
default CHUNKS_PER_CORE a core (compiler/opt/heuristic.py thread_chunks), the two builds taking turns in one process
so both see the same load; then the packs and the product back to back. Chunks matter when a core is stalled (another
process on its CPU): with halves the other core idles at the end, or the caller runs both. So run it on a busy host,
and report the load it prints; on a quiet one the two should tie. Wall ms, min / median / mean.

  CPU_ISA=x86-64-v3 python bench/matmul_chunks.py 512 1024 2048 --reps 60
"""
from __future__ import annotations
import argparse, os, pathlib, statistics, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import numpy as np
import compiler.pack as pack
from frontend import Tensor
from frontend import engine
from matmul_split import _launches

def ab(n: int, reps: int, counts: list[str]) -> None:
  rng = np.random.default_rng(0)
  an, bn = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
  a, b = Tensor(an).realize(), Tensor(bn).realize()
  want, built = an.astype(np.float64) @ bn, {}
  old = os.environ.get("CPU_CHUNKS")
  try:
    for c in counts:
      os.environ["CPU_CHUNKS"] = c
      engine._kernel_cache.clear(); pack._plans.clear()   # (built again with this chunk count)
      np.testing.assert_allclose((a @ b).numpy(), want, rtol=1e-3, atol=1e-3 * np.sqrt(n))
      built[c] = _launches(a, b)
  finally:
    if old is None: os.environ.pop("CPU_CHUNKS", None)
    else: os.environ["CPU_CHUNKS"] = old
  run = lambda e: e.kernel.program(*[x.raw for x in e.bufs], **e.kernel.launch_kwargs, wait=True)
  alone: dict[str, list[float]] = {c: [] for c in counts}
  seq: dict[str, list[float]] = {c: [] for c in counts}
  for _ in range(reps):
    for c in counts:
      alone[c].append(run(built[c][-1]))
      t0 = time.perf_counter()
      for e in built[c]: run(e)
      seq[c].append(time.perf_counter() - t0)
  ms = lambda xs: f"{min(xs) * 1e3:8.2f} {statistics.median(xs) * 1e3:8.2f} {statistics.mean(xs) * 1e3:8.2f}"
  print(f"N={n}: {reps} repeats, load {os.getloadavg()[0]:.2f} after; ms as min, median, mean")
  for c in counts:
    print(f"  CPU_CHUNKS={c} ({built[c][-1].kernel.threads} chunks)  product alone {ms(alone[c])}   packs + product {ms(seq[c])}")

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("sizes", type=int, nargs="*", default=[512, 1024, 2048])
  p.add_argument("--reps", type=int, default=60)
  p.add_argument("--chunks", default="1,4", help="CPU_CHUNKS values to compare (comma-separated)")
  args = p.parse_args()
  for n in args.sizes: ab(n, args.reps if n < 2048 else max(5, args.reps // 5), args.chunks.split(","))

if __name__ == "__main__": main()
