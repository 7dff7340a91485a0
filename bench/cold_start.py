"""Cold start: the time from a fresh process to the end of the first train step of the digits example
(examples/train_digits.py: DigitsNet, Adam, the TinyJit step) with an empty kernel cache (a fresh private
$HCQRT_CACHE: every kernel, and the CPU device's native runner, built from source), and its kernels per step.

Three ways to build, each in its own processes, taking turns (--runs rounds; the minimum and median of each are
printed): the C path building one kernel at a time (COMPILE_WORKERS=1), the C path with the independent kernels of a
schedule built side by side (the default: compiler/pipeline.py compile_kernels runs one C compiler process per usable
core), and LLVM (CPU_LLVM=1: llvmlite in-process, one at a time). Per built kernel: (first step - a warm eager step)
/ kernels built (objects written to the private cache), i.e. what each cold kernel added to the first step.

  python bench/cold_start.py [--runs 3] [--json]
"""
from __future__ import annotations
import argparse, json, os, pathlib, shutil, statistics, subprocess, sys, tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

CHILD = r'''
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, ROOT)
import importlib.util, numpy as np
from frontend import Tensor, TinyJit, GlobalCounters, optim
from frontend.nn.state import get_parameters
t_import = time.perf_counter()
spec = importlib.util.spec_from_file_location("td", ROOT + "/examples/train_digits.py"); td = importlib.util.module_from_spec(spec); spec.loader.exec_module(td)
x_train, y_train, _, _ = td.load_digits(0)
Tensor.manual_seed(0)
model = td.DigitsNet(8); opt = optim.Adam(get_parameters(model), lr=3e-3)
step = TinyJit(td.make_train_step(model, opt))
xb, yb = Tensor(x_train[:64]).realize(), Tensor(y_train[:64]).realize()
GlobalCounters.reset()
t1 = time.perf_counter(); step(xb, yb).numpy(); t2 = time.perf_counter()
kernels = GlobalCounters.kernel_count
t3 = time.perf_counter(); step(xb, yb).numpy(); t4 = time.perf_counter()   # the second call: warm, still eager (TinyJit captures at the second)
print(json.dumps({"import_s": t_import - t0, "to_first_step_s": t2 - t0, "first_step_s": t2 - t1, "second_step_s": t4 - t3,
                  "kernels": kernels}))
'''

MODES = {"C, one at a time": {"COMPILE_WORKERS": "1"}, "C, side by side": {}, "LLVM": {"CPU_LLVM": "1", "COMPILE_WORKERS": "1"}}

def built(cache: str) -> int:
  """Kernel objects the run wrote to its private cache (C objects and LLVM objects; the runner is one of them)."""
  return sum(1 for _ in pathlib.Path(cache).rglob("*.o"))

def once(env: dict) -> dict:
  cache = tempfile.mkdtemp(prefix="hcqrt-cold-")
  try:
    e = {k: v for k, v in os.environ.items() if k not in ("COMPILE_WORKERS", "CPU_LLVM", "BEAM", "CACHE", "DEBUG")}
    out = subprocess.run([sys.executable, "-c", f"ROOT = {str(ROOT)!r}\n" + CHILD], capture_output=True, text=True, cwd=ROOT,
                         env={**e, **env, "HCQRT_CACHE": cache})
    if out.returncode != 0: return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["built"] = built(cache)
    return r
  finally: shutil.rmtree(cache, ignore_errors=True)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--runs", type=int, default=3, help="rounds; the modes take turns in each")
  ap.add_argument("--json", action="store_true", help="print one JSON line instead of the table")
  args = ap.parse_args()
  res: dict[str, list[dict]] = {m: [] for m in MODES}
  for _ in range(args.runs):
    for m, env in MODES.items(): res[m].append(once(env))
  out = {}
  for m, rs in res.items():
    ok = [r for r in rs if "error" not in r]
    if not ok: out[m] = {"error": rs[0]["error"]}; continue
    per = [(r["first_step_s"] - r["second_step_s"]) / max(r["built"], 1) for r in ok]
    out[m] = {"to_first_step_s_min": min(r["to_first_step_s"] for r in ok), "to_first_step_s_median": statistics.median(r["to_first_step_s"] for r in ok),
              "first_step_s_min": min(r["first_step_s"] for r in ok), "import_s_min": min(r["import_s"] for r in ok),
              "built": ok[0]["built"], "kernels_first_step": ok[0]["kernels"], "ms_per_built_kernel_min": 1e3 * min(per)}
  if args.json: print(json.dumps(out)); return
  print(f"cold start of the digits example (empty cache), {args.runs} rounds, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
  print(f"{'build':22s} {'to 1st step s':>14s} {'(median)':>9s} {'1st step s':>11s} {'import s':>9s} {'built':>6s} {'ms/kernel':>10s}")
  for m, r in out.items():
    if "error" in r: print(f"{m:22s} error: {r['error']}"); continue
    print(f"{m:22s} {r['to_first_step_s_min']:14.2f} {r['to_first_step_s_median']:9.2f} {r['first_step_s_min']:11.2f} {r['import_s_min']:9.2f} "
          f"{r['built']:6d} {r['ms_per_built_kernel_min']:10.1f}")

if __name__ == "__main__":
  main()
