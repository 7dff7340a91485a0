"""The 64M-float sum, ours against torch (and ours at another commit), the sides taking turns in one script.

bench/run.py runs ours and torch minutes apart; on a shared host one side may get a quiet minute and the other a busy
one. Here each side is a persistent child (its own process: torch's OpenMP threads keep spinning after a call and would
steal our cores), and the parent asks them in turn for a few timed calls, round after round; each side's figure is the
minimum over rounds. `--ours PATH` adds ours from another checkout (e.g. /work/main) as a side, for old/new A/B.

  python bench/sum_ab.py [--rounds 9] [--reps 3] [--n 67108864] [--isa x86-64-v3] [--ours /work/main]
"""
from __future__ import annotations
import argparse, json, os, pathlib, subprocess, sys, time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, os.environ["SUM_AB_BENCH"])
from _common import sum_input
lib, n = sys.argv[1], int(sys.argv[2])
xn = sum_input(n)
if lib == "torch":
  import torch
  torch.set_num_threads(len(os.sched_getaffinity(0)))
  x = torch.from_numpy(xn)
  run = lambda: x.sum()
  check = lambda r: float(r)
else:
  from frontend import Tensor
  x = Tensor(xn).realize()
  run = lambda: x.sum().realize()
  check = lambda r: float(r.numpy())
want = float(xn.astype("float64").sum())
got = check(run())
assert abs(got - want) <= 1e-4 * abs(want), f"{lib}: sum {got} != {want}"
print("ready", flush=True)
for line in sys.stdin:
  reps = int(line)
  walls, cpus = [], []
  for _ in range(reps):
    t0, c0 = time.perf_counter(), time.process_time()
    run()
    walls.append(time.perf_counter() - t0); cpus.append(time.process_time() - c0)
  print(json.dumps({"wall": min(walls), "cpu": min(cpus)}), flush=True)
"""

def start(name: str, lib: str, n: int, env: dict[str, str]) -> subprocess.Popen:
  e = os.environ | {"SUM_AB_BENCH": str(HERE), "OPENBLAS_NUM_THREADS": "1"} | env
  p = subprocess.Popen([sys.executable, "-c", CHILD, lib, str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=e)
  assert p.stdout is not None and p.stdout.readline().strip() == "ready", f"{name}: child failed to start"
  return p

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--rounds", type=int, default=9)
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--n", type=int, default=64 * 1024 * 1024)
  ap.add_argument("--isa", default=os.environ.get("CPU_ISA", ""), help="CPU_ISA for ours (torch follows: _common.torch_isa_env)")
  ap.add_argument("--ours", action="append", default=[], help="another checkout to time as a side")
  ap.add_argument("--no-torch", action="store_true")
  args = ap.parse_args()
  sys.path.insert(0, str(HERE))
  from _common import torch_isa_env
  isa_env = {"CPU_ISA": args.isa} if args.isa else {}
  sides: dict[str, subprocess.Popen] = {"ours": start("ours", "ours", args.n, isa_env | {"PYTHONPATH": str(ROOT)})}
  for path in args.ours:
    sides[f"ours@{path}"] = start(path, "ours", args.n, isa_env | {"PYTHONPATH": str(pathlib.Path(path).resolve())})
  if not args.no_torch: sides["torch"] = start("torch", "torch", args.n, torch_isa_env(args.isa or None)[1])
  res: dict[str, list[dict]] = {k: [] for k in sides}
  for _ in range(args.rounds):
    for k, p in sides.items():
      time.sleep(0.3)   # torch's OpenMP threads spin a while after their last call: let them go to sleep first
      assert p.stdin is not None and p.stdout is not None
      p.stdin.write(f"{args.reps}\n"); p.stdin.flush()
      res[k].append(json.loads(p.stdout.readline()))
  for p in sides.values():
    assert p.stdin is not None
    p.stdin.close(); p.wait()
  gb = 4 * args.n / 1e9
  print(f"sum f32 n={args.n} CPU_ISA={args.isa or 'native'}  rounds={args.rounds} x reps={args.reps}  load {os.getloadavg()[0]:.2f}")
  for k, rs in res.items():
    w = sorted(r["wall"] for r in rs)
    cpu = min(r["cpu"] for r in rs)   # (process CPU time: all threads, spinning included)
    print(f"  {k:40s} min {w[0]*1e3:7.2f} ms  median {w[len(w)//2]*1e3:7.2f} ms  ({gb/w[0]:.1f} GB/s)  cpu min {cpu*1e3:7.2f} ms  per round: "
          + " ".join(f"{r['wall']*1e3:.1f}" for r in rs))
  if "torch" in res:
    t = min(r["wall"] for r in res["torch"])
    for k in res:
      if k != "torch": print(f"  torch/{k}: {t / min(r['wall'] for r in res[k]):.3f}x (min), "
                            f"{sorted(r['wall'] for r in res['torch'])[len(res[k])//2] / sorted(r['wall'] for r in res[k])[len(res[k])//2]:.3f}x (median)")

if __name__ == "__main__": main()
