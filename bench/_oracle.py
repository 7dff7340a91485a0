"""The numpy or torch side of the benchmark, run by bench/run.py in its own process; prints one JSON line.

Each library gets a process to itself: OpenBLAS and torch's OpenMP pool keep spinning after a call and
would steal the machine's cores from whatever runs next. Each does the obvious thing a user would write
(numpy: temporaries and all; torch: eager, plus `torch.compile` of the elementwise chain with --compile).

  python bench/_oracle.py --lib numpy --spec '{"matmul": [64], "ew": 4096, "sum": 4096, "softmax": [8, 8], "compile": 0}'
"""
from __future__ import annotations
import argparse, json, os, pathlib, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import numpy as np
from _common import FULL, BENCHES, median_time, matmul_inputs, ew_inputs, sum_input, softmax_input, conv_inputs, conv_variants, convvar_inputs, run_all, emit

# the OpenBLAS variables that pick its kernel and blocking: read once, when numpy loads OpenBLAS (run.py starts this
# process without them, so numpy runs the kernel OpenBLAS picks for this CPU; a Haswell kernel on an AVX-512 CPU runs
# at about half the speed). Noted here as this process saw them, before numpy's import loaded the library.
BLAS_ENV = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS") if k in os.environ}

def blas_kernel() -> str:
  """The BLAS library numpy loaded and the kernel it runs: threadpoolctl's report when installed, else asked of
  OpenBLAS itself (its get_corename/get_config entry points, under the symbol prefixes numpy's wheels use)."""
  try:
    from threadpoolctl import threadpool_info
    return "; ".join(f"{d.get('internal_api')} {d.get('version')} {d.get('architecture')} kernel, {d.get('num_threads')} threads"
                     for d in threadpool_info() if d.get("user_api") == "blas") or "no BLAS found by threadpoolctl"
  except ImportError: pass
  import ctypes
  try: libs = sorted({ln.split()[-1] for ln in pathlib.Path("/proc/self/maps").read_text().splitlines() if "openblas" in ln.lower() and "/" in ln})
  except OSError: return "unknown (no threadpoolctl, no /proc/self/maps)"
  for path in libs:
    lib = ctypes.CDLL(path)
    for pre, suf in (("scipy_openblas", "64_"), ("scipy_openblas", ""), ("openblas", "64_"), ("openblas", "")):
      try: core, conf, nthr = (getattr(lib, f"{pre}_{f}{suf}") for f in ("get_corename", "get_config", "get_num_threads"))
      except AttributeError: continue
      core.restype = conf.restype = ctypes.c_char_p
      ver = conf().decode().split()[1:2]   # "OpenBLAS 0.3.31 DYNAMIC_ARCH ..."
      return f"OpenBLAS {' '.join(ver)} {core().decode()} kernel, {nthr()} threads".replace("  ", " ")
  return "unknown (not OpenBLAS, and no threadpoolctl)"

def numpy_benches() -> dict:
  def matmul(spec):
    rows = []
    for n in spec["matmul"]:
      a, b = matmul_inputs(n)
      rows.append({"bench": "matmul", "key": f"matmul:{n}", "n": n} | median_time(lambda: a @ b, budget_s=1.0))
    return rows
  def ew(spec):
    a, b, c = ew_inputs(spec["ew"])
    return [{"bench": "ew", "key": "ew", "n": spec["ew"]} | median_time(lambda: np.exp(np.maximum(a * b + c, 0)))]
  def sum_(spec):
    x = sum_input(spec["sum"])
    return [{"bench": "sum", "key": "sum", "n": spec["sum"]} | median_time(lambda: x.sum())]
  def softmax(spec):
    x = softmax_input(*spec["softmax"])
    def f():
      e = np.exp(x - x.max(axis=1, keepdims=True))
      return e / e.sum(axis=1, keepdims=True)
    return [{"bench": "softmax", "key": "softmax", "shape": spec["softmax"]} | median_time(f)]
  return {"matmul": matmul, "ew": ew, "sum": sum_, "softmax": softmax}

def torch_benches(with_compile: bool) -> dict:
  import torch
  torch.set_num_threads(len(os.sched_getaffinity(0)))
  T = torch.from_numpy
  def matmul(spec):
    rows = []
    for n in spec["matmul"]:
      a, b = map(T, matmul_inputs(n))
      rows.append({"bench": "matmul", "key": f"matmul:{n}", "n": n} | median_time(lambda: a @ b, budget_s=1.0))
    return rows
  def ew(spec):
    a, b, c = map(T, ew_inputs(spec["ew"]))
    f = lambda a, b, c: torch.exp(torch.relu(a * b + c))
    rows = [{"bench": "ew", "key": "ew", "n": spec["ew"]} | median_time(lambda: f(a, b, c))]
    if with_compile:
      try:
        t0 = time.perf_counter()
        fc = torch.compile(f)
        fc(a, b, c)  # the first call traces and compiles (Inductor, C++ through the system compiler)
        first = time.perf_counter() - t0
        rows.append({"bench": "ew", "key": "ew:torch.compile", "n": spec["ew"], "compile_s": first} | median_time(lambda: fc(a, b, c)))
      except Exception as e:
        rows.append({"bench": "ew", "key": "ew:torch.compile", "error": f"{type(e).__name__}: {e}"[:300]})
    return rows
  def sum_(spec):
    x = T(sum_input(spec["sum"]))
    return [{"bench": "sum", "key": "sum", "n": spec["sum"]} | median_time(lambda: x.sum())]
  def softmax(spec):
    x = T(softmax_input(*spec["softmax"]))
    return [{"bench": "softmax", "key": "softmax", "shape": spec["softmax"]} | median_time(lambda: torch.softmax(x, dim=-1))]
  def conv(spec):
    x, w1, w2 = map(T, conv_inputs(spec["conv"]))
    F = torch.nn.functional
    with torch.no_grad():
      return [{"bench": "conv", "key": "conv", "shape": spec["conv"]} | median_time(lambda: F.conv2d(F.conv2d(x, w1, padding=1), w2, padding=1))]
  def convtrain(spec):
    x, w1, w2 = map(T, conv_inputs(spec["conv"]))
    w1.requires_grad_(True); w2.requires_grad_(True)
    F = torch.nn.functional
    def step():
      w1.grad = w2.grad = None
      loss = F.conv2d(F.conv2d(x, w1, padding=1).relu(), w2, padding=1).square().mean()
      loss.backward()
      return loss.item()
    rows = [{"bench": "convtrain", "key": "convtrain", "shape": spec["conv"]} | median_time(step, warmup=2, budget_s=3.0, max_reps=15)]
    # the same step with torch.nn.Conv2d layers (bias on): what ours' nn.Conv2d rows (lazy and realized parameters) compare with
    ci, c1, c2 = spec["conv"][1], *spec["conv"][4:]
    l1, l2 = torch.nn.Conv2d(ci, c1, 3, padding=1), torch.nn.Conv2d(c1, c2, 3, padding=1)
    def nn_step():
      for p in (*l1.parameters(), *l2.parameters()): p.grad = None
      loss = l2(l1(x).relu()).square().mean()
      loss.backward()
      return loss.item()
    r = median_time(nn_step, warmup=2, budget_s=3.0, max_reps=15)
    return rows + [{"bench": "convtrain", "key": f"convtrain:{k}", "shape": spec["conv"]} | r for k in ("nn_lazy", "nn_realized")]
  def convvar(spec):
    F, rows = torch.nn.functional, []
    for name, (_ws, kw) in conv_variants(spec["convvar"]).items():
      x, w = map(T, convvar_inputs(spec["convvar"], name))
      with torch.no_grad():
        rows.append({"bench": "convvar", "key": f"convvar:{name}", "shape": spec["convvar"], "variant": name} | median_time(lambda: F.conv2d(x, w, **kw)))
      x.requires_grad_(True); w.requires_grad_(True)
      def step():
        x.grad = w.grad = None
        loss = F.conv2d(x, w, **kw).square().mean()
        loss.backward()
        return loss.item()
      rows.append({"bench": "convvar", "key": f"convvar:{name}:train", "shape": spec["convvar"], "variant": name, "train": True}
                  | median_time(step, warmup=2, budget_s=2.0, max_reps=10))
    return rows
  return {"matmul": matmul, "ew": ew, "sum": sum_, "softmax": softmax, "conv": conv, "convtrain": convtrain, "convvar": convvar}

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--lib", choices=["numpy", "torch"], required=True)
  p.add_argument("--spec", default=json.dumps(FULL), help="sizes as JSON (see bench/_common.py FULL)")
  p.add_argument("--only", default=",".join(BENCHES))
  p.add_argument("--compile", action="store_true", help="torch only: also time torch.compile of the elementwise chain")
  args = p.parse_args()
  spec, only = json.loads(args.spec), args.only.split(",")
  if args.lib == "numpy":
    info = {"version": np.__version__, "blas_kernel": blas_kernel(), "blas_env": BLAS_ENV}
    try: info["blas"] = ", ".join(f"{k}: {v.get('name', '?')} {v.get('version', '')}".strip() for k, v in
                                   np.show_config(mode="dicts")["Build Dependencies"].items() if k in ("blas",))
    except Exception: pass
    rows = run_all(spec, only, numpy_benches())
  else:
    import torch
    info = {"version": torch.__version__, "threads": torch.get_num_threads(), "isa": torch.backends.cpu.get_cpu_capability(),
            "onednn_max_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "")}
    rows = run_all(spec, only, torch_benches(args.compile))
  emit({"lib": args.lib, "info": info, "rows": rows})

if __name__ == "__main__": main()
