"""How well the beautiful_mnist TinyJit step (bench/train_bench.py's) splits across the CPU cores, kernel by kernel.

Each launch of the step's replay is timed twice:
  - per core: each core's share of a multi-core kernel (its `core` index) run alone on one CPU, the shares one after
    the other, minima over the rounds (a kernel cut into more chunks than cores: one share per chunk). Their sum is
    the step on one core; each kernel's shares taken in turn by the first core free (the longest share where there is
    one a core), summed, is the step on ideal cores (no wait for a late worker, no sharing of caches or memory bandwidth). Robust to other
    processes: a share runs in a few ms on one pinned CPU;
  - in the replay: the runner's launch times (CPULaunchList.timed), minima over the replays, which other processes
    on the machine inflate (compare the `busy` line: the other processes' share of the cores during the replays).
Listed: the kernels that lose most against an even split of their one-core time (one core only, uneven shares) and
the ones whose replay time is furthest above that ideal.

Then the heaviest kernels by one-core time, with their GFLOP/s (the kernel's estimated operations per launch) on one
core and in the replay, and their opts.

  python bench/thread_split.py [--reps 10] [--batch 128] [--top 15] [--json out.json] [--clock wall|cpu]
"""
from __future__ import annotations
import argparse, json, os, pathlib, sys, time
import numpy as np
ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

def busy_jiffies() -> tuple[int, int, float]:
  """(all jiffies, busy jiffies, this process's CPU jiffies) from /proc/stat and os.times."""
  v = list(map(int, open("/proc/stat").readline().split()[1:]))
  t = os.times()
  return sum(v[:8]), sum(v[:8]) - v[3] - v[4], (t.user + t.system) * os.sysconf("SC_CLK_TCK")

def mnist_step(batch: int):
  """The beautiful_mnist TinyJit step of bench/train_bench.py, captured, and its arguments."""
  from frontend import Tensor, TinyJit, nn, optim
  from frontend.nn.state import get_parameters
  layers = [nn.Conv2d(1, 32, 5), Tensor.relu, nn.Conv2d(32, 32, 5), Tensor.relu, nn.BatchNorm(32), Tensor.max_pool2d,
            nn.Conv2d(32, 64, 3), Tensor.relu, nn.Conv2d(64, 64, 3), Tensor.relu, nn.BatchNorm(64), Tensor.max_pool2d,
            lambda x: x.flatten(1), nn.Linear(576, 10)]
  Tensor.manual_seed(0)
  opt = optim.Adam(get_parameters(layers))
  @TinyJit
  def step(x, y):
    with Tensor.train():
      opt.zero_grad(); loss = x.sequential(layers).sparse_categorical_crossentropy(y); loss.backward(); opt.step()
      return loss.realize()
  rng = np.random.default_rng(0)
  args = (Tensor(rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)).realize(), Tensor(rng.integers(0, 10, batch).astype(np.int32)).realize())
  for _ in range(4): step(*args)   # compile, capture, replay
  if step.graph is None: raise SystemExit("thread_split: the step has no launch list (not the CPU device?)")
  return step, args

def measure(reps: int, batch: int, clock: str = "wall") -> dict:
  step, args = mnist_step(batch)
  g = step.graph
  timed = g.timed()
  per = [[] for _ in range(g.n)]
  a = busy_jiffies()
  for _ in range(reps):
    step(*args)
    for i, s, e in g.kernel_times(): per[i].append((e - s) / 1e3)
  b = busy_jiffies()
  other = max(0.0, ((b[1] - a[1]) - (b[2] - a[2])) / max(1, b[0] - a[0]))
  aff = os.sched_getaffinity(0)
  now = time.thread_time_ns if clock == "cpu" else time.perf_counter_ns
  os.sched_setaffinity(0, {min(aff)})   # (this thread only: the shares run one after the other on one CPU)
  shares = [[float("inf")] * it.threads for it in g.items]   # (per core index: per chunk where a kernel has more than cores)
  try:
    for _ in range(reps):
      for i, (it, o) in enumerate(zip(g.items, g.offsets)):
        nb, nv = len(it.bufs), len(it.vals)
        fn, argv = it.prog._fns.get((nb, nv)) or it.prog._fn(nb, nv), g.table[o:o + nb + nv].tolist()
        for c in range(it.threads):
          st = now(); fn(*argv, c); shares[i][c] = min(shares[i][c], (now() - st) / 1e3)
  finally: os.sched_setaffinity(0, aff)
  kernels = [{"name": ei.kernel.name, "threads": it.threads, "shares_us": [round(x, 1) for x in sh], "replay_us": round(min(p), 1) if p else None,
              "ops": ei.kernel.ops, "opts": [list(o) for o in ei.kernel.compiled.applied_opts]}
             for ei, it, sh, p in zip(step.items, g.items, shares, per)]
  return {"ncores": len(aff), "reps": reps, "other_busy": round(other, 3), "timed": timed, "kernels": kernels}

def ideal_us(shares: list[float], ncores: int) -> float:
  """A kernel's time on `ncores` ideal cores: each share (a core index, or a chunk where a kernel has more of them than
  cores) taken in turn by the first core free, as the runner's threads claim them; the longest share when one a core.

  >>> ideal_us([4.0, 4.0], 2), ideal_us([1.0] * 8, 2), ideal_us([3.0, 1.0, 1.0, 1.0], 2)
  (4.0, 4.0, 3.0)
  """
  free = [0.0] * ncores
  for s in shares: free[free.index(min(free))] += s
  return max(free)

def report(r: dict, top: int) -> None:
  ks, n = r["kernels"], r["ncores"]
  for k in ks: k["ideal_us"] = ideal_us(k["shares_us"], n)
  one = sum(sum(k["shares_us"]) for k in ks) / 1e3
  ideal = sum(k["ideal_us"] for k in ks) / 1e3
  single = [k for k in ks if k["threads"] == 1]
  print(f"beautiful_mnist step on {r['ncores']} CPUs: {len(ks)} kernels, {len(ks) - len(single)} split across cores")
  print(f"  one core {one:.2f} ms; ideal cores (shares claimed in turn, per kernel) {ideal:.2f} ms: {one / ideal:.2f}x")
  print(f"  {sum(k['threads'] > n for k in ks)} kernels cut into more chunks than cores")
  print(f"  one-core kernels {sum(k['shares_us'][0] for k in single) / 1e3:.2f} ms of it")
  if r["timed"]:
    rep = sum(k["replay_us"] for k in ks) / 1e3
    print(f"  replay (launch times, minima) {rep:.2f} ms: {rep / ideal:.2f}x the ideal; other processes busy {100 * r['other_busy']:.0f}% of the cores meanwhile")
  loss = sorted(ks, key=lambda k: -(k["ideal_us"] - sum(k["shares_us"]) / n))[:top]
  print(f"  most lost against an even split over {n} cores (us): lost, shares")
  for k in loss: print(f"    {k['ideal_us'] - sum(k['shares_us']) / n:8.1f}  t{k['threads']} {k['name']:36s} {k['shares_us']}")
  if r["timed"]:
    print("  replay furthest above the ideal (us): replay - ideal, replay, shares")
    for k in sorted(ks, key=lambda k: -(k["replay_us"] - k["ideal_us"]))[:top]:
      print(f"    {k['replay_us'] - k['ideal_us']:8.1f}  t{k['threads']} {k['name']:36s} {k['replay_us']:9.1f} {k['shares_us']}")

def heaviest(r: dict, top: int) -> None:
  """The kernels with the most one-core time: their share of the step and their GFLOP/s (estimated operations over the
  summed shares: one core's speed; over the replay time: both cores')."""
  ks, one = r["kernels"], sum(sum(k["shares_us"]) for k in r["kernels"])
  print("  heaviest kernels: one-core ms (share), GFLOP/s on one core, replay ms, GFLOP/s in the replay, opts")
  for k in sorted(ks, key=lambda k: -sum(k["shares_us"]))[:top]:
    t1, tr = sum(k["shares_us"]), k["replay_us"]
    print(f"    {k['name']:36s} t{k['threads']:<3d} {t1 / 1e3:7.2f} ({100 * t1 / one:4.1f}%) {k['ops'] / t1 / 1e3:7.1f}"
          + (f" {tr / 1e3:7.2f} {k['ops'] / tr / 1e3:7.1f}" if tr else "") + f"  {[tuple(o) for o in k['opts']]}")

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--reps", type=int, default=10)
  ap.add_argument("--batch", type=int, default=128)
  ap.add_argument("--top", type=int, default=15)
  ap.add_argument("--json", metavar="PATH")
  ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                  help="time each share by wall clock or by the pinned thread's CPU time (cpu: not inflated while another process holds the CPU)")
  a = ap.parse_args()
  r = measure(a.reps, a.batch, a.clock)
  if a.json: pathlib.Path(a.json).write_text(json.dumps(r))
  report(r, a.top)
  heaviest(r, a.top)

if __name__ == "__main__": main()
