"""Does a long-running process grow without bound? Runs varying work on the CPU for N iterations and prints, every
`--every` iterations: RSS, the size of every module-level table of frontend/, compiler/ and hcqrt/ (dicts, lists,
sets, lru_caches) that holds anything, the UOp interning table (compiler/uop.py), the live LoadedKernels and the
mapped kernel images (hcqrt/cpu/elf_loader.py: the executable memory of the CPU device's programs).

Each iteration runs one of four kinds of work, in turn, at a size no iteration before it used:
  mlp   a small MLP forward at batch size i (eager)
  chain matmul + elementwise chain at a random (m, k, n)
  jit   a TinyJit function made anew and called at a random shape (created, captured, replayed, dropped)
  model a model (two Linear layers of random width) created, run, dropped
Not a timed benchmark: its numbers are counts and bytes. Compiles go to a private disk cache (a temporary directory,
removed at the end) so every kernel is really built.

  python bench/long_run_memory.py --iters 1000 --every 100
"""
from __future__ import annotations
import argparse, functools, gc, os, shutil, sys, tempfile, time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def rss_mb() -> float:
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith("VmRSS:"): return int(line.split()[1]) / 1024
  return 0.0

def tables() -> dict[str, int]:
  """len() of every module-level container (and lru_cache) of our packages that holds something."""
  out = {}
  for mname, mod in list(sys.modules.items()):
    if mod is None or not mname.startswith(("frontend", "compiler", "hcqrt")) or mname.startswith("hcqrt.mock"): continue
    for name, v in list(vars(mod).items()):
      if isinstance(v, (dict, list, set)) and name.startswith("_") and not name.startswith("__"): n = len(v)
      elif isinstance(v, functools._lru_cache_wrapper) and getattr(v, "__module__", None) == mname: n = v.cache_info().currsize
      else: continue
      if n: out[f"{mname}.{name}"] = n
  return out

def kernel_images() -> tuple[int, int]:
  """(count, bytes) of the CPU kernel images still mapped (their unmap not yet run)."""
  from hcqrt.cpu.elf_loader import LoadedImage
  imgs = [o for o in gc.get_objects() if isinstance(o, LoadedImage) and o._unmap.alive]
  return len(imgs), sum(o.size for o in imgs)

def live_kernels() -> int:
  from frontend.engine import LoadedKernel
  return sum(isinstance(o, LoadedKernel) for o in gc.get_objects())

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--iters", type=int, default=1000)
  ap.add_argument("--every", type=int, default=100)
  ap.add_argument("--top", type=int, default=14, help="tables shown per report (the largest)")
  args = ap.parse_args()
  cache = tempfile.mkdtemp(prefix="hcqrt-longrun-")
  os.environ["HCQRT_CACHE"] = cache
  try: run(args)
  finally: shutil.rmtree(cache, ignore_errors=True)

def run(args) -> None:
  import numpy as np
  from frontend import Tensor, TinyJit, nn
  from compiler import uop
  rng = np.random.default_rng(0)
  w1, w2 = Tensor(rng.standard_normal((32, 64), np.float32)).realize(), Tensor(rng.standard_normal((64, 10), np.float32)).realize()

  def mlp(i: int) -> None:
    x = Tensor(rng.standard_normal((i, 32), np.float32))
    (x @ w1).relu().matmul(w2).softmax(-1).numpy()
  def chain(i: int) -> None:
    m, k, n = (int(v) for v in rng.integers(1, 96, 3))
    a, b = Tensor(rng.standard_normal((m, k), np.float32)), Tensor(rng.standard_normal((k, n), np.float32))
    ((a @ b) * 2 + 1).exp().sum(0).numpy()
  def jit(i: int) -> None:
    n = int(rng.integers(1, 4096))
    f = TinyJit(lambda x: (x * 3 + 1).relu().realize())
    for _ in range(3): f(Tensor(rng.standard_normal(n, np.float32)).realize()).numpy()
  def model(i: int) -> None:
    h = int(rng.integers(8, 128))
    l1, l2 = nn.Linear(16, h), nn.Linear(h, 4)
    l2(l1(Tensor(rng.standard_normal((8, 16), np.float32))).relu()).numpy()
  work = (mlp, chain, jit, model)

  first: dict[str, int] = {}
  t0 = time.perf_counter()
  print(f"{'iter':>6s} {'RSS MB':>8s} {'interned':>9s} {'kernels':>8s} {'images':>7s} {'img KB':>7s} {'s':>6s}  largest tables")
  for i in range(1, args.iters + 1):
    work[i % 4](i // 4 + 1)
    if i % args.every == 0 or i == 1:
      gc.collect()
      t = tables()
      if not first: first = dict(t)
      n_img, img_bytes = kernel_images()
      top = sorted(t.items(), key=lambda kv: -kv[1])[:args.top]
      print(f"{i:6d} {rss_mb():8.1f} {len(uop._interned):9d} {live_kernels():8d} {n_img:7d} {img_bytes / 1024:7.0f} "
            f"{time.perf_counter() - t0:6.0f}  " + ", ".join(f"{k.split('.', 1)[1]}={v}" for k, v in top), flush=True)
  grown = {k: (first.get(k, 0), v) for k, v in tables().items() if v > first.get(k, 0)}
  print("\ngrew since iteration 1 (table: first -> last):")
  for k, (a, b) in sorted(grown.items(), key=lambda kv: -kv[1][1]): print(f"  {k}: {a} -> {b}")

if __name__ == "__main__": main()
