"""`a @ b` built with several packing choices for 8-lane (AVX2) or 16-lane targets, taking turns in one process: A
packed or read in place (compiler/pack.py a_in_place) and the tile (MR, NR) of the product. For each: the launches'
work with every core's share run on this thread (thread CPU time: what another process on the cores inflates least),
the product alone the same way, and the launches back to back on the cores (wall). Minima and medians over the
repeats, the load with them. Each build is checked against float64 numpy first.

  CPU_ISA=x86-64-v3 python bench/matmul_tiles.py 512 512 512 packed:6x16 here:8x8 here:4x16 --reps 20
  (a choice is `packed`, `here` (A in place, MR divides M) or `tail` (A in place, the rows MR leaves as one smaller
  tile), then `:MRxNR`, then optionally `:pf=BYTES` (the software prefetch distance, compiler/opt/matmul.py
  PREFETCH_AHEAD) and `:jb=J` (column tiles per block at most, compiler/pack.py JB_MAX))
"""
from __future__ import annotations
import argparse, os, pathlib, statistics, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import numpy as np
import compiler.pack as pack
import compiler.opt.matmul as opt_matmul
from frontend import Tensor
from frontend import engine
from frontend.devices import open_device
from matmul_split import _launches

def build(a: Tensor, b: Tensor, choice: str) -> list:
  """The launches of one realize of a @ b with `choice` patched into compiler/pack.py (restored after)."""
  how, tile, *kv = choice.split(":")
  mr, nr = (int(x) for x in tile.split("x"))
  opts = {x.split("=")[0]: int(x.split("=")[1]) for x in kv}
  consts = {x: v for x, v in opts.items() if x not in ("pf", "jb")}   # (any other compiler/pack.py constant)
  saved = pack.a_in_place, pack.avx2_tile_shape, opt_matmul.PREFETCH_AHEAD, pack.JB_MAX, {x: getattr(pack, x) for x in consts}
  opt_matmul.PREFETCH_AHEAD, pack.JB_MAX = opts.get("pf", opt_matmul.PREFETCH_AHEAD), opts.get("jb", pack.JB_MAX)
  for x, v in consts.items(): setattr(pack, x, v)
  pack.a_in_place = lambda view, m, k, lanes: how in ("here", "tail") and (view.strides[2] == 1 or k == 1) and (how == "tail" or m % mr == 0)
  pack.avx2_tile_shape = lambda m, n, pad_rows: (mr, nr) if n % nr == 0 and (pad_rows or m % mr == 0) else None
  engine._kernel_cache.clear(); pack._plans.clear()
  try: return _launches(a, b)
  finally:
    pack.a_in_place, pack.avx2_tile_shape, opt_matmul.PREFETCH_AHEAD, pack.JB_MAX, old = saved
    for x, v in old.items(): setattr(pack, x, v)
    pack._plans.clear()

def work(eis: list) -> float:
  t0 = time.thread_time()
  for e in eis:
    fn, args = e.kernel.program._fn(len(e.bufs), 0), [x.raw.address for x in e.bufs]
    for core in range(e.kernel.threads): fn(*args, core)
  return time.thread_time() - t0

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("m", type=int); p.add_argument("k", type=int); p.add_argument("n", type=int)
  p.add_argument("choices", nargs="+")
  p.add_argument("--reps", type=int, default=20)
  args = p.parse_args()
  m, k, n = args.m, args.k, args.n
  rng = np.random.default_rng(0)
  an, bn = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
  a, b = Tensor(an).realize(), Tensor(bn).realize()
  want = an.astype(np.float64) @ bn
  built = {}
  for c in args.choices:
    built[c] = eis = build(a, b, c)
    got = np.empty((m, n), np.float32)
    open_device("CPU").allocator.copyout(memoryview(got), eis[-1].bufs[0].raw)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.sqrt(k))
  rows = {c: {"work": [], "product": [], "wall": []} for c in built}
  each = {c: [[] for _ in eis] for c, eis in built.items()}   # every launch's work alone
  run = lambda e: e.kernel.program(*[x.raw for x in e.bufs], **e.kernel.launch_kwargs, wait=True)
  for _ in range(args.reps):
    for c, eis in built.items():
      rows[c]["work"].append(work(eis))
      for i, e in enumerate(eis): each[c][i].append(work([e]))
      rows[c]["product"].append(each[c][-1][-1])
      t0 = time.perf_counter()
      for e in eis: run(e)
      rows[c]["wall"].append(time.perf_counter() - t0)
  flop = 2 * m * n * k
  print(f"{m}x{k}x{n}: {args.reps} repeats taking turns, load {os.getloadavg()[0]:.2f} after; ms as min / median")
  for c, r in rows.items():
    f = lambda xs: f"{min(xs) * 1e3:7.3f} / {statistics.median(xs) * 1e3:7.3f}"
    print(f"  {c:12s} work {f(r['work'])}  product {f(r['product'])} ({flop / min(r['product']) / 1e9:5.1f} GFLOP/s one core)"
          f"  wall {f(r['wall'])}  " + ", ".join(f"{e.kernel.name} {min(x) * 1e3:.3f}" for e, x in zip(built[c], each[c])))

if __name__ == "__main__": main()
