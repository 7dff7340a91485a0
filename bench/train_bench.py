"""Train-step time of the digits CNN (examples/train_digits.py): ours eager, ours TinyJit, torch CPU, and the
JIT's replay cost per kernel; then tinygrad's beautiful_mnist CNN (Conv 1->32 5x5, 32->32 5x5, BatchNorm, maxpool,
32->64 3x3, 64->64 3x3, BatchNorm, maxpool, Linear 576->10; Adam) on random 28x28 images at --mnist-batch, ours
TinyJit vs torch. Each side runs in its own process, torch right after ours.

Eager against torch eager (--eager-runs R, 0 skips it): R processes of each take turns, ours eager and torch eager
(each the median of --steps steps, wall and process CPU time per step), by default pinned to one core (the
first core the process may use, torch with 1 thread: on a shared host the CPU time of one core is the comparison that holds; --eager-cores all
leaves them unpinned); with ours, the work per step: Function.apply calls, lazy buffers made, Python calls (cProfile's
count, builtins included), kernels run, and the
schedule cache's hits and misses over the timed steps (compiler/schedule.py _GraphKey). The load average is printed
with the rows.

BEAM=2 on the digits step (--beam-runs R, 0 skips it): a first process with a fresh private cache searches (its first
three steps' wall time is compiles + search; a BEAM=0 process with a fresh cache of its own gives the compile-only
wall time next to it), then R processes with BEAM=2 (served from that cache: they count C compiles and searches, both
0 when the cache works) and R with BEAM=0 take turns, each timing the median of --steps steps; the medians of each
side's medians are reported (each process times at least 200 steps).

`--mnist-rounds R`: the mnist step R times, ours and torch taking turns, each side's fastest round reported (every
round's median printed beside it).

`--mnist-one-core R`: R more rounds of the mnist step, ours and torch taking turns, each pinned to one core and timed by
the process's CPU time (torch with one thread): on a host shared with other jobs, the comparison that holds.

With `CPU_ISA` narrower than the host's vectors (x86-64-v3 on an AVX-512 host), torch runs as on such a host
(`ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`, bench/_common.py torch_isa_env); the mnist rows add torch native.

  python bench/train_bench.py [--batch 64] [--steps 30] [--mnist-batch 128] [--mnist-steps 10] [--mnist-rounds 1] [--no-mnist] [--beam-runs 5]
                              [--eager-runs 3] [--eager-cores one|all] [--mnist-one-core 3] [--json]
"""
from __future__ import annotations
import argparse, json, os, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import torch_isa_env  # noqa: E402 (after the sys.path entry)
# ours compiled for narrower vectors than the host's (CPU_ISA=x86-64-v3 on AVX-512): every torch child runs at that ISA
# (this environment, read when torch is imported); the mnist rows also show torch at the host's own ISA for reference
TORCH_ISA, TORCH_ENV = torch_isa_env()

OURS = r'''
import json, sys, time, importlib.util, numpy as np
sys.path.insert(0, ROOT)
from frontend import Tensor, TinyJit, GlobalCounters, optim
from frontend.nn.state import get_parameters
spec = importlib.util.spec_from_file_location("td", ROOT + "/examples/train_digits.py"); td = importlib.util.module_from_spec(spec); spec.loader.exec_module(td)
x_train, y_train, _, _ = td.load_digits(0)
def make():
  Tensor.manual_seed(0)
  model = td.DigitsNet(8); opt = optim.Adam(get_parameters(model), lr=3e-3)
  def step(x, y):
    with Tensor.train():
      opt.zero_grad(); loss = model(x).sparse_categorical_crossentropy(y); loss.backward(); opt.step()
      return loss.realize()
  return step
rng = np.random.default_rng(0)
batches = [(Tensor(x_train[i]).realize(), Tensor(y_train[i]).realize()) for i in (rng.integers(0, len(x_train), BATCH) for _ in range(STEPS))]
out = {}
for mode in ("eager", "jit"):
  step = make() if mode == "eager" else TinyJit(make())
  for xb, yb in batches[:3]: step(xb, yb)          # compile, capture
  ts = []
  for xb, yb in batches[3:]:
    GlobalCounters.reset(); st = time.perf_counter(); step(xb, yb); ts.append(time.perf_counter() - st)
  out[mode + "_ms"] = 1e3 * sorted(ts)[len(ts) // 2]
  out["kernels_per_step"] = GlobalCounters.kernel_count
  out[mode + "_kernel_s"] = GlobalCounters.time_sum_s
# replay cost: a chain of tiny kernels, where launching is everything
x = Tensor.rand(16).realize()
@TinyJit
def chain(x):
  for _ in range(100): x = (x * 1.0001 + 0.5).contiguous()
  return x
for _ in range(3): chain(x)
GlobalCounters.reset(); chain(x); n = GlobalCounters.kernel_count
GlobalCounters.reset(); st = time.perf_counter()
for _ in range(50): chain(x)
wall = (time.perf_counter() - st) / 50
out["replay_us_per_kernel"] = 1e6 * (wall - GlobalCounters.time_sum_s / 50) / n   # host overhead only
out["replay_wall_us_per_kernel"] = 1e6 * wall / n
print(json.dumps(out))
'''

# the torch digits CNN, its data and optimizer: the same in the TinyJit comparison and the eager one
TORCH_DIGITS = r'''
import json, time, gzip, numpy as np, torch
if ONE_CORE: torch.set_num_threads(1)
torch.manual_seed(0)
raw = np.loadtxt(gzip.open(ROOT + "/examples/data/digits.csv.gz", "rt"), delimiter=",", dtype=np.float32)
x, y = torch.tensor(raw[:, :64].reshape(-1, 1, 8, 8) / 16.0), torch.tensor(raw[:, 64].astype(np.int64))
model = torch.nn.Sequential(torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, padding=1),
                            torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(512, 10))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
rng = np.random.default_rng(0)
'''

TORCH = TORCH_DIGITS + r'''
idx = [torch.tensor(rng.integers(0, len(x), BATCH)) for _ in range(STEPS)]
ts = []
for i in idx:
  st = time.perf_counter()
  opt.zero_grad(); loss = torch.nn.functional.cross_entropy(model(x[i]), y[i]); loss.backward(); opt.step(); loss.item()
  ts.append(time.perf_counter() - st)
ts = ts[3:]
print(json.dumps({"torch_ms": 1e3 * sorted(ts)[len(ts) // 2], "torch_threads": torch.get_num_threads()}))
'''

# eager only: per-step wall and process CPU time, and the host work one step does
EAGER_OURS = r'''
import json, sys, time, importlib.util, numpy as np
sys.path.insert(0, ROOT)
from frontend import Tensor, GlobalCounters, optim, function
from frontend.nn.state import get_parameters
from compiler import schedule
from compiler.lazy import LazyBuffer
spec = importlib.util.spec_from_file_location("td", ROOT + "/examples/train_digits.py"); td = importlib.util.module_from_spec(spec); spec.loader.exec_module(td)
x_train, y_train, _, _ = td.load_digits(0)
Tensor.manual_seed(0)
model = td.DigitsNet(8); opt = optim.Adam(get_parameters(model), lr=3e-3)
step = td.make_train_step(model, opt)
rng = np.random.default_rng(0)
batches = [(Tensor(x_train[i]).realize(), Tensor(y_train[i]).realize()) for i in (rng.integers(0, len(x_train), BATCH) for _ in range(STEPS))]
for xb, yb in batches[:3]: step(xb, yb)
# one untimed step counts the Function.apply calls and lazy buffers it makes
calls, real_apply = [0], function.Function.apply.__func__
def counting(cls, *a, **kw):
  calls[0] += 1
  return real_apply(cls, *a, **kw)
function.Function.apply = classmethod(counting)
first = LazyBuffer.next_id()
step(*batches[3])
lazy = LazyBuffer.next_id() - first - 1
function.Function.apply = classmethod(real_apply)
# another untimed step counts the Python calls it makes (cProfile's count: functions and builtins)
import cProfile, pstats
prof = cProfile.Profile(); prof.enable(); step(*batches[4]); prof.disable()
pycalls = pstats.Stats(prof).total_calls
hits, misses = schedule.cache_stats["hits"], schedule.cache_stats["misses"]
wall, cpu = [], []
for xb, yb in batches[3:]:
  GlobalCounters.reset(); st, sc = time.perf_counter(), time.process_time(); step(xb, yb)
  wall.append(time.perf_counter() - st); cpu.append(time.process_time() - sc)
med = lambda xs: 1e3 * sorted(xs)[len(xs) // 2]
print(json.dumps({"wall_ms": med(wall), "cpu_ms": med(cpu), "min_ms": 1e3 * min(wall), "apply_calls": calls[0], "lazy_buffers": lazy, "python_calls": pycalls,
                  "kernels": GlobalCounters.kernel_count, "cache_hits": schedule.cache_stats["hits"] - hits,
                  "cache_misses": schedule.cache_stats["misses"] - misses}))
'''

EAGER_TORCH = TORCH_DIGITS + r'''
wall, cpu = [], []
for n, i in enumerate([torch.tensor(rng.integers(0, len(x), BATCH)) for _ in range(STEPS)]):
  st, sc = time.perf_counter(), time.process_time()
  opt.zero_grad(); loss = torch.nn.functional.cross_entropy(model(x[i]), y[i]); loss.backward(); opt.step(); loss.item()
  if n >= 3: wall.append(time.perf_counter() - st); cpu.append(time.process_time() - sc)
med = lambda xs: 1e3 * sorted(xs)[len(xs) // 2]
print(json.dumps({"wall_ms": med(wall), "cpu_ms": med(cpu), "min_ms": 1e3 * min(wall), "threads": torch.get_num_threads()}))
'''

def eager_rows(batch: int, steps: int, runs: int, one_core: bool) -> dict:
  """Ours eager and torch eager in `runs` interleaved process pairs (module doc): the medians of their per-run medians."""
  rows: dict[str, list] = {"ours": [], "torch": []}
  load = os.getloadavg()[0]
  for _ in range(runs):
    for side, code in (("ours", EAGER_OURS), ("torch", EAGER_TORCH)):
      if "error" in (r := run(code, batch, steps, TORCH_ENV if side == "torch" else None, one_core=one_core)): return {"eager_error": f"{side}: {r['error']}"}
      rows[side].append(r)
  med = lambda xs: sorted(xs)[len(xs) // 2]
  o, t = rows["ours"], rows["torch"]
  return {"eager_one_core": one_core, "eager_runs": runs, "eager_load": (load, os.getloadavg()[0]),
          "eager_wall_ms": med([r["wall_ms"] for r in o]), "eager_cpu_ms": med([r["cpu_ms"] for r in o]), "eager_min_ms": min(r["min_ms"] for r in o),
          "torch_eager_wall_ms": med([r["wall_ms"] for r in t]), "torch_eager_cpu_ms": med([r["cpu_ms"] for r in t]),
          "torch_eager_min_ms": min(r["min_ms"] for r in t), "torch_eager_threads": t[0]["threads"],
          **{k: o[-1][k] for k in ("apply_calls", "lazy_buffers", "python_calls", "kernels", "cache_hits", "cache_misses")}}

MNIST_OURS = r'''
import json, sys, time, numpy as np
sys.path.insert(0, ROOT)
from frontend import Tensor, TinyJit, GlobalCounters, nn, optim
from frontend.nn.state import get_parameters
class Model:
  def __init__(self):
    self.layers = [nn.Conv2d(1, 32, 5), Tensor.relu, nn.Conv2d(32, 32, 5), Tensor.relu, nn.BatchNorm(32), Tensor.max_pool2d,
                   nn.Conv2d(32, 64, 3), Tensor.relu, nn.Conv2d(64, 64, 3), Tensor.relu, nn.BatchNorm(64), Tensor.max_pool2d,
                   lambda x: x.flatten(1), nn.Linear(576, 10)]
  def __call__(self, x): return x.sequential(self.layers)
Tensor.manual_seed(0)
model = Model(); opt = optim.Adam(get_parameters(model))
@TinyJit
def step(x, y):
  with Tensor.train():
    opt.zero_grad(); loss = model(x).sparse_categorical_crossentropy(y); loss.backward(); opt.step()
    return loss.realize()
rng = np.random.default_rng(0)
batches = [(Tensor(rng.standard_normal((BATCH, 1, 28, 28)).astype(np.float32)).realize(), Tensor(rng.integers(0, 10, BATCH).astype(np.int32)).realize())
           for _ in range(STEPS)]
ts = []
for i, (xb, yb) in enumerate(batches):
  GlobalCounters.reset(); st = CLOCK(); step(xb, yb); ts.append(CLOCK() - st)
ts = ts[3:]   # compile, capture
print(json.dumps({"mnist_jit_ms": 1e3 * sorted(ts)[len(ts) // 2], "mnist_kernels_per_step": GlobalCounters.kernel_count,
                  "mnist_kernel_ms": 1e3 * GlobalCounters.time_sum_s}))
'''

MNIST_TORCH = r'''
import json, time, numpy as np, torch
torch.manual_seed(0)
if ONE_CORE: torch.set_num_threads(1)
nn = torch.nn
model = nn.Sequential(nn.Conv2d(1, 32, 5), nn.ReLU(), nn.Conv2d(32, 32, 5), nn.ReLU(), nn.BatchNorm2d(32), nn.MaxPool2d(2),
                      nn.Conv2d(32, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(), nn.BatchNorm2d(64), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(576, 10))
opt = torch.optim.Adam(model.parameters())
rng = np.random.default_rng(0)
batches = [(torch.tensor(rng.standard_normal((BATCH, 1, 28, 28)).astype(np.float32)), torch.tensor(rng.integers(0, 10, BATCH))) for _ in range(STEPS)]
ts = []
for x, y in batches:
  st = CLOCK()
  opt.zero_grad(); loss = nn.functional.cross_entropy(model(x), y); loss.backward(); opt.step(); loss.item()
  ts.append(CLOCK() - st)
ts = ts[3:]
print(json.dumps({"mnist_torch_ms": 1e3 * sorted(ts)[len(ts) // 2]}))
'''

# the digits step under the BEAM setting of the environment: wall time of the first 3 steps (compile, capture, BEAM
# search), the median step, and what the first steps did: C compiles, BEAM searches run and answered by the cache
BEAM_OURS = r'''
import json, sys, time, importlib.util, numpy as np
sys.path.insert(0, ROOT)
from frontend import Tensor, TinyJit, optim
from frontend.nn.state import get_parameters
import compiler.beam as beam, compiler.assemble.c_compiler as cc
counts = {"cc_calls": 0, "searched": 0, "too_fast": 0, "beam_cache_hits": 0, "beam_changed": 0}
real_run, real_search = cc.subprocess.run, beam.beam_search
def counting_run(*a, **kw):
  counts["cc_calls"] += 1
  return real_run(*a, **kw)
def counting_search(*a, **kw):
  st = {}
  opts = real_search(*a, stats=st, **kw)
  counts["beam_cache_hits" if st["cache_hit"] else "too_fast" if st["skipped"] else "searched"] += 1
  counts["beam_changed"] += opts is not None
  return opts
cc.subprocess.run, beam.beam_search = counting_run, counting_search
spec = importlib.util.spec_from_file_location("td", ROOT + "/examples/train_digits.py"); td = importlib.util.module_from_spec(spec); spec.loader.exec_module(td)
x_train, y_train, _, _ = td.load_digits(0)
Tensor.manual_seed(0)
model = td.DigitsNet(8); opt = optim.Adam(get_parameters(model), lr=3e-3)
step = TinyJit(td.make_train_step(model, opt))
rng = np.random.default_rng(0)
batches = [(Tensor(x_train[i]).realize(), Tensor(y_train[i]).realize()) for i in (rng.integers(0, len(x_train), BATCH) for _ in range(STEPS))]
st = time.perf_counter()
for xb, yb in batches[:3]: step(xb, yb)
first = time.perf_counter() - st
ts = []
for xb, yb in batches[3:]:
  st = time.perf_counter(); step(xb, yb); ts.append(time.perf_counter() - st)
print(json.dumps({"first_s": first, "step_ms": 1e3 * sorted(ts)[len(ts) // 2], **counts}))
'''

def run(code: str, batch: int, steps: int, env: dict | None = None, one_core: bool = False) -> dict:
  """`code` in a child process; one_core: pinned to one core, each step timed by the process's CPU time (a loaded host
  inflates wall time, not this; torch then runs one thread, ours one-thread kernels)."""
  clock = "import time\nCLOCK = time.process_time if ONE_CORE else time.perf_counter\n"
  src = f"ROOT = {ROOT!r}\nBATCH = {batch}\nSTEPS = {steps}\nONE_CORE = {one_core}\n" + clock + code
  pin = (lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})) if one_core else None
  out = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, cwd=ROOT, env=None if env is None else {**os.environ, **env},
                       preexec_fn=pin)
  if out.returncode != 0: return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
  return json.loads(out.stdout.strip().splitlines()[-1])

def beam_rows(batch: int, steps: int, runs: int) -> dict:
  """The digits step under BEAM=2 against BEAM=0 (see the module doc): search and compile wall times from fresh caches,
  then `runs` interleaved processes per side (their step medians), and the cache's answer in the BEAM=2 ones."""
  import tempfile, shutil
  dirs = {b: tempfile.mkdtemp(prefix=f"hcqrt-train-beam{b}-") for b in ("0", "2")}
  try:
    env = lambda b: {"BEAM": b, "HCQRT_CACHE": dirs[b]}
    first = {b: run(BEAM_OURS, batch, steps, env(b)) for b in ("2", "0")}
    if any("error" in r for r in first.values()): return {"beam_error": next(r["error"] for r in first.values() if "error" in r)}
    again: dict[str, list] = {"0": [], "2": []}
    for _ in range(runs):
      for b in ("2", "0"):
        if "error" in (r := run(BEAM_OURS, batch, steps, env(b))): return {"beam_error": r["error"]}
        again[b].append(r)
  finally:
    for d in dirs.values(): shutil.rmtree(d, ignore_errors=True)
  med = lambda xs: sorted(xs)[len(xs) // 2]
  warm = again["2"]
  return {"beam_first_s": first["2"]["first_s"], "beam_noopt_first_s": first["0"]["first_s"], "beam_searched": first["2"]["searched"],
          "beam_too_fast": first["2"]["too_fast"],
          "beam_changed": first["2"]["beam_changed"], "beam_runs": runs,
          "beam_step_ms": med([r["step_ms"] for r in warm]), "beam_heuristic_step_ms": med([r["step_ms"] for r in again["0"]]),
          "beam_step_ms_all": [round(r["step_ms"], 3) for r in warm], "beam_heuristic_step_ms_all": [round(r["step_ms"], 3) for r in again["0"]],
          "beam_second_cc_calls": max(r["cc_calls"] for r in warm), "beam_second_searched": max(r["searched"] + r["too_fast"] for r in warm),
          "beam_second_cache_hits": min(r["beam_cache_hits"] for r in warm)}

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--batch", type=int, default=64)
  ap.add_argument("--steps", type=int, default=30)
  ap.add_argument("--json", action="store_true")
  ap.add_argument("--no-torch", action="store_true")
  ap.add_argument("--mnist-batch", type=int, default=128)
  ap.add_argument("--mnist-steps", type=int, default=10)
  ap.add_argument("--no-mnist", action="store_true", help="skip the beautiful_mnist CNN step")
  ap.add_argument("--mnist-rounds", type=int, default=1, metavar="R",
                  help="run the mnist step R times, ours and torch taking turns; each side keeps its fastest round")
  ap.add_argument("--mnist-one-core", type=int, default=0, metavar="R",
                  help="also R rounds of the mnist step pinned to one core, ours and torch (1 thread) taking turns, timed by CPU time")
  ap.add_argument("--beam-runs", type=int, default=5, help="processes per side for the BEAM=2 vs BEAM=0 digits step (0: skip)")
  ap.add_argument("--eager-runs", type=int, default=3, help="process pairs for ours eager vs torch eager (0: skip)")
  ap.add_argument("--eager-cores", choices=("one", "all"), default="one", help="pin the eager pairs to one core (default) or not")
  a = ap.parse_args()
  import importlib.util
  has_torch = not a.no_torch and importlib.util.find_spec("torch") is not None
  ours = run(OURS, a.batch, a.steps)
  try: theirs = {"error": "skipped"} if a.no_torch else run(TORCH, a.batch, a.steps, TORCH_ENV) if has_torch else {"error": "torch not installed"}
  except Exception as e: theirs = {"error": str(e)}
  mn: dict = {}
  if not a.no_mnist:
    # --mnist-rounds R: ours and torch take turns R times; each side keeps its fastest round (a noisy minute on a shared
    # host then slows one round of each side, not one side's only run); every round's median is kept
    sides = [("ours", MNIST_OURS, None, "mnist_jit_ms")] + ([("torch", MNIST_TORCH, TORCH_ENV, "mnist_torch_ms")] if has_torch else []) + \
            ([("torch_native", MNIST_TORCH, None, "mnist_torch_ms")] if has_torch and TORCH_ENV else [])
    runs: dict[str, list] = {name: [] for name, *_ in sides}
    for _ in range(max(1, a.mnist_rounds)):
      for name, code, env, _key in sides: runs[name].append(run(code, a.mnist_batch, a.mnist_steps, env))
    for name, _code, _env, key in sides:
      ok = [r for r in runs[name] if key in r]
      mn[name] = min(ok, key=lambda r: r[key]) | {f"{key}_rounds": [round(r[key], 2) for r in ok]} if ok else runs[name][0]
    if not has_torch: mn["torch"] = {"error": "skipped"}
  if a.mnist_one_core > 0 and has_torch:
    # ours, torch at ours' ISA and (where that is narrower than the host's) torch native, taking turns
    sides = [(MNIST_OURS, None), (MNIST_TORCH, TORCH_ENV)] + ([(MNIST_TORCH, None)] if TORCH_ENV else [])
    rounds = [[run(code, a.mnist_batch, a.mnist_steps, env, one_core=True) for code, env in sides] for _ in range(a.mnist_one_core)]
    if all("mnist_jit_ms" in r[0] and all("mnist_torch_ms" in t for t in r[1:]) for r in rounds):
      mn["one_core"] = {"mnist_1core_ours_ms": [round(r[0]["mnist_jit_ms"], 2) for r in rounds],
                        "mnist_1core_torch_ms": [round(r[1]["mnist_torch_ms"], 2) for r in rounds],
                        **({"mnist_1core_torch_native_ms": [round(r[2]["mnist_torch_ms"], 2) for r in rounds]} if TORCH_ENV else {})}
  eg = eager_rows(a.batch, max(a.steps, 40), a.eager_runs, a.eager_cores == "one") if a.eager_runs > 0 and has_torch else {}
  bm = beam_rows(a.batch, max(a.steps, 200), a.beam_runs) if a.beam_runs > 0 else {}   # (steps are cheap here: more of them steady the medians)
  nat = {"mnist_torch_native_ms": mn["torch_native"].get("mnist_torch_ms")} if "torch_native" in mn else {}
  res = {**ours, **theirs, "batch": a.batch, "torch_isa": TORCH_ISA, **nat, **mn.get("ours", {}), **{k: v for k, v in mn.get("torch", {}).items() if k != "error"},
         **mn.get("one_core", {}), **eg, **bm}
  if a.json: print(json.dumps(res)); return
  if TORCH_ENV: print(f"ours compiled for CPU_ISA={os.environ.get('CPU_ISA')}: torch runs as on an {TORCH_ISA} host "
                      f"({' '.join(f'{k}={v}' for k, v in TORCH_ENV.items())}); torch at the host's native ISA shown for reference")
  print(f"digits CNN train step, batch {a.batch} (median of {a.steps - 3} steps)")
  if "error" in ours: print("  ours failed:", ours["error"])
  else:
    print(f"  ours eager   {ours['eager_ms']:8.2f} ms   ({ours['kernels_per_step']} kernels)")
    print(f"  ours TinyJit {ours['jit_ms']:8.2f} ms   eager/jit = {ours['eager_ms'] / ours['jit_ms']:.2f}x")
    print(f"  JIT replay host cost {ours['replay_us_per_kernel']:.2f} us/kernel ({ours['replay_wall_us_per_kernel']:.2f} us/kernel wall, tiny kernels)")
  if "torch_ms" in theirs and "jit_ms" in ours:
    print(f"  torch CPU    {theirs['torch_ms']:8.2f} ms   ({theirs['torch_threads']} threads)  ours-jit/torch = {ours['jit_ms'] / theirs['torch_ms']:.2f}x")
  elif "error" in theirs: print("  torch:", theirs["error"])
  if "eager_error" in eg: print("  eager vs torch failed:", eg["eager_error"])
  elif eg:
    where = "one core (pinned), torch 1 thread" if eg["eager_one_core"] else f"all cores, torch {eg['torch_eager_threads']} threads"
    print(f"  eager vs torch eager, {where}, {eg['eager_runs']} interleaved process pairs (load average {eg['eager_load'][0]:.1f} -> {eg['eager_load'][1]:.1f}):")
    print(f"    ours eager  {eg['eager_wall_ms']:7.2f} ms wall (min {eg['eager_min_ms']:.2f})  {eg['eager_cpu_ms']:7.2f} ms CPU")
    print(f"    torch eager {eg['torch_eager_wall_ms']:7.2f} ms wall (min {eg['torch_eager_min_ms']:.2f})  {eg['torch_eager_cpu_ms']:7.2f} ms CPU   "
          f"ours/torch = {eg['eager_wall_ms'] / eg['torch_eager_wall_ms']:.2f}x wall, {eg['eager_cpu_ms'] / eg['torch_eager_cpu_ms']:.2f}x CPU")
    print(f"    per step: {eg['apply_calls']} Function.apply calls, {eg['lazy_buffers']} lazy buffers, {eg['python_calls']} Python calls, {eg['kernels']} kernels; "
          f"schedule cache over the timed steps: {eg['cache_hits']} hits, {eg['cache_misses']} misses")
  if "beam_error" in bm: print("  BEAM=2 failed:", bm["beam_error"])
  elif bm:
    print(f"  BEAM=2 TinyJit {bm['beam_step_ms']:7.2f} ms vs BEAM=0 {bm['beam_heuristic_step_ms']:.2f} ms (median of {bm['beam_runs']} interleaved "
          f"processes each): {bm['beam_heuristic_step_ms'] / bm['beam_step_ms']:.2f}x; first run {bm['beam_first_s']:.1f} s with the search "
          f"({bm['beam_searched']} kernels searched, {bm['beam_changed']} changed, {bm['beam_too_fast']} under BEAM_MIN_US) vs {bm['beam_noopt_first_s']:.1f} s without; next runs: "
          f"{bm['beam_second_cc_calls']} C compiles, {bm['beam_second_searched']} searches, {bm['beam_second_cache_hits']} cache hits")
  if mn:
    # (--no-mnist with --mnist-one-core: only the one-core rounds)
    o, t = mn.get("ours", {"skipped": True}), mn.get("torch", {})
    rounds = f"; fastest of {a.mnist_rounds} rounds taking turns" if a.mnist_rounds > 1 else ""
    print(f"beautiful_mnist CNN train step, batch {a.mnist_batch}, TinyJit, Adam (median of {a.mnist_steps - 3} steps{rounds})")
    if "error" in o: print("  ours failed:", o["error"])
    elif "skipped" in o: pass
    else: print(f"  ours TinyJit {o['mnist_jit_ms']:8.2f} ms   ({o['mnist_kernels_per_step']} kernels, {o['mnist_kernel_ms']:.1f} ms in kernels)"
                + (f"   rounds {o['mnist_jit_ms_rounds']}" if a.mnist_rounds > 1 else ""))
    if "mnist_torch_ms" in t:
      print(f"  torch CPU    {t['mnist_torch_ms']:8.2f} ms" + (f"   ours/torch = {o['mnist_jit_ms'] / t['mnist_torch_ms']:.2f}x" if "mnist_jit_ms" in o else "")
            + (f"   rounds {t['mnist_torch_ms_rounds']}" if a.mnist_rounds > 1 else ""))
    elif "error" in t: print("  torch:", t["error"])
    if "mnist_torch_ms" in (tn := mn.get("torch_native", {})):
      print(f"  torch native {tn['mnist_torch_ms']:8.2f} ms   (reference: host ISA)" + (f"   ours/torch native = {o['mnist_jit_ms'] / tn['mnist_torch_ms']:.2f}x" if "mnist_jit_ms" in o else ""))
    if (oc := mn.get("one_core")):
      ours_ms, torch_ms = oc["mnist_1core_ours_ms"], oc["mnist_1core_torch_ms"]
      print(f"  one core, CPU time per step, {len(ours_ms)} rounds taking turns: ours min {min(ours_ms):.1f} ms {ours_ms}, "
            f"torch{f' {TORCH_ISA}' if TORCH_ENV else ''} (1 thread) min {min(torch_ms):.1f} ms {torch_ms}: ours/torch = {min(ours_ms) / min(torch_ms):.2f}x")
      if (nat := oc.get("mnist_1core_torch_native_ms")):
        print(f"    torch native (reference) min {min(nat):.1f} ms {nat}: ours/torch native = {min(ours_ms) / min(nat):.2f}x")

if __name__ == "__main__":
  main()
