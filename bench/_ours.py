"""Our side of the benchmark, run by bench/run.py in its own process; prints one JSON line.

Inputs are realized once; each timed run builds a fresh lazy expression (untimed) and times its
`.realize()`: scheduling + launch + the kernels (compiled by the untimed warm-up, then cached in-process).
Every result is checked against numpy computed in this process (single-threaded BLAS, so no spinning pool).

  python bench/_ours.py --spec '{"matmul": [64], "ew": 4096, "sum": 4096, "softmax": [8, 8], "compile": 2}'
"""
from __future__ import annotations
import argparse, json, os, pathlib, statistics, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import numpy as np
from _common import FULL, BENCHES, median_time, matmul_inputs, ew_inputs, sum_input, softmax_input, conv_inputs, conv_variants, convvar_inputs, run_all, emit
from frontend import Tensor, GlobalCounters

def _time_realize(build, **kw) -> dict:
  """Median time of `build().realize()`, with the kernel count and kernel-only time of one run."""
  res = median_time(lambda t: t.realize(), setup=build, **kw)
  GlobalCounters.reset()
  t0 = time.perf_counter()
  out = build().realize()
  wall = time.perf_counter() - t0
  res.update(kernels=GlobalCounters.kernel_count, kernel_s=GlobalCounters.time_sum_s, last_wall_s=wall)
  return res | {"_out": out}

def _check(res: dict, got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> dict:
  err = float(np.max(np.abs(got.astype(np.float64) - want)) / (np.max(np.abs(want)) or 1.0)) if want.size else 0.0
  ok = bool(np.allclose(got, want, rtol=rtol, atol=atol))
  return {k: v for k, v in res.items() if k != "_out"} | {"rel_err": err, "ok": ok}

def bench_matmul(spec: dict) -> list[dict]:
  rows = []
  for n in spec["matmul"]:
    an, bn = matmul_inputs(n)
    a, b = Tensor(an).realize(), Tensor(bn).realize()
    res = _time_realize(lambda: a @ b, budget_s=3.0, max_reps=10)
    k = min(n, 32)  # check a band of rows: a full float64 reference at N=2048 costs seconds here
    got = res["_out"].numpy()[:k]
    want = an[:k].astype(np.float64) @ bn.astype(np.float64)
    rows.append({"bench": "matmul", "key": f"matmul:{n}", "n": n} | _check(res, got, want, 1e-3, 1e-3 * np.sqrt(n)))
  return rows

def bench_ew(spec: dict) -> list[dict]:
  an, bn, cn = ew_inputs(spec["ew"])
  a, b, c = (Tensor(x).realize() for x in (an, bn, cn))
  res = _time_realize(lambda: (a * b + c).relu().exp())
  want = np.exp(np.maximum(an.astype(np.float64) * bn + cn, 0))
  return [{"bench": "ew", "key": "ew", "n": spec["ew"]} | _check(res, res["_out"].numpy(), want, 1e-4, 1e-5)]

def bench_sum(spec: dict) -> list[dict]:
  xn = sum_input(spec["sum"])
  x = Tensor(xn).realize()
  res = _time_realize(lambda: x.sum())
  want = np.array(xn.astype(np.float64).sum())
  # float32 accumulation over tens of millions of values: 1e-4 relative is what a blocked sum achieves
  return [{"bench": "sum", "key": "sum", "n": spec["sum"]} | _check(res, res["_out"].numpy(), want, 1e-4, 0)]

def bench_softmax(spec: dict) -> list[dict]:
  r, c = spec["softmax"]
  xn = softmax_input(r, c)
  x = Tensor(xn).realize()
  res = _time_realize(lambda: x.softmax(axis=-1))
  x64 = xn.astype(np.float64)
  e = np.exp(x64 - x64.max(axis=1, keepdims=True))
  want = e / e.sum(axis=1, keepdims=True)
  return [{"bench": "softmax", "key": "softmax", "shape": [r, c]} | _check(res, res["_out"].numpy(), want, 1e-3, 1e-6)]

def _conv_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  """float64 3x3 convolution, padding 1, as 9 shifted matrix products."""
  n, _c, h, wd = x.shape
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  out = np.zeros((n, w.shape[0], h, wd))
  for dy in range(3):
    for dx in range(3): out += np.einsum("nchw,oc->nohw", xp[:, :, dy:dy + h, dx:dx + wd], w[:, :, dy, dx].astype(np.float64))
  return out

def bench_conv(spec: dict) -> list[dict]:
  xn, w1n, w2n = conv_inputs(spec["conv"])
  x, w1, w2 = (Tensor(a).realize() for a in (xn, w1n, w2n))
  res = _time_realize(lambda: x.conv2d(w1, padding=1).conv2d(w2, padding=1))
  k = min(2, xn.shape[0])   # check the first images: the float64 reference of the whole batch is slow
  want = _conv_ref(_conv_ref(xn[:k], w1n), w2n)
  return [{"bench": "conv", "key": "conv", "shape": spec["conv"]} | _check(res, res["_out"].numpy()[:k], want, 1e-3, 1e-3)]

def bench_convtrain(spec: dict) -> list[dict]:
  """The conv benchmark's two convs with a relu between, forward + backward (w1, w2 gradients) as a TinyJit step;
  checked against the float64 reference of the forward and the weight gradient of conv 2 on the first images."""
  from frontend import TinyJit
  xn, w1n, w2n = conv_inputs(spec["conv"])
  x = Tensor(xn).realize()
  w1, w2 = (Tensor(a, requires_grad=True).realize() for a in (w1n, w2n))
  @TinyJit
  def step():
    w1.grad = w2.grad = None
    loss = x.conv2d(w1, padding=1).relu().conv2d(w2, padding=1).square().mean()
    loss.backward()
    return loss.realize(), w1.grad.realize(), w2.grad.realize()
  GlobalCounters.reset()
  res = median_time(step, warmup=3, budget_s=3.0, max_reps=15)
  GlobalCounters.reset(); loss, _, g2 = step()
  res.update(kernels=GlobalCounters.kernel_count, kernel_s=GlobalCounters.time_sum_s)
  h1 = np.maximum(_conv_ref(xn, w1n), 0)
  out = _conv_ref(h1, w2n)
  want_loss = np.array((out ** 2).mean())
  go = 2 * out / out.size   # d loss / d out
  hp = np.pad(h1, ((0, 0), (0, 0), (1, 1), (1, 1)))
  hh, ww = xn.shape[2:]
  want_g2 = np.stack([np.einsum("nohw,nchw->oc", go, hp[:, :, dy:dy + hh, dx:dx + ww]) for dy in range(3) for dx in range(3)], -1).reshape(w2n.shape)
  ok = _check(res | {"_out": None}, loss.numpy(), want_loss, 1e-3, 1e-6)
  ok2 = _check(res | {"_out": None}, g2.numpy(), want_g2, 1e-2, 1e-4 * float(np.abs(want_g2).max()))
  return [{"bench": "convtrain", "key": "convtrain", "shape": spec["conv"]} | ok | {"ok": ok["ok"] and ok2["ok"], "rel_err": max(ok["rel_err"], ok2["rel_err"])}] \
         + bench_convtrain_nn(spec)

def bench_convtrain_nn(spec: dict) -> list[dict]:
  """The same two convs as nn.Conv2d layers (bias on), forward + backward (every parameter's gradient) as a TinyJit
  step: once with parameters the user never realized (issue 28: their initialisation must run once, not inside every
  replayed conv), once with each parameter realized by hand first. The two steps take turns, so load on the machine
  hits both alike; both must give the same loss and gradients (the same seed draws the same parameters)."""
  from frontend import TinyJit, nn
  from frontend.nn.state import get_parameters
  ci, c1, c2 = spec["conv"][1], *spec["conv"][4:]
  x = Tensor(conv_inputs(spec["conv"])[0]).realize()
  def make(realized: bool):
    Tensor.manual_seed(7)
    layers = [nn.Conv2d(ci, c1, 3, padding=1), nn.Conv2d(c1, c2, 3, padding=1)]
    ps = get_parameters(layers)
    for p in ps: p.requires_grad = True
    if realized: Tensor.realize(*ps)
    @TinyJit
    def step():
      for p in ps: p.grad = None
      loss = layers[1](layers[0](x).relu()).square().mean()
      loss.backward()
      return [loss.realize()] + [p.grad.realize() for p in ps]
    return step
  steps = {"nn_lazy": make(False), "nn_realized": make(True)}
  outs = {k: [t.numpy() for t in st()] for k, st in steps.items()}   # call 1 (eager): the lazy step realizes its parameters
  same = all(np.array_equal(a, b) for a, b in zip(outs["nn_lazy"], outs["nn_realized"]))
  for st in steps.values():
    for _ in range(2): st()   # capture, first replay
  times: dict[str, list[float]] = {k: [] for k in steps}
  budget = time.perf_counter() + 6.0
  while min(map(len, times.values())) < 3 or (time.perf_counter() < budget and min(map(len, times.values())) < 15):
    for k, st in steps.items():
      t0 = time.perf_counter(); st(); times[k].append(time.perf_counter() - t0)
  rows = []
  for k, ts in times.items():
    GlobalCounters.reset(); steps[k]()
    rows.append({"bench": "convtrain", "key": f"convtrain:{k}", "shape": spec["conv"], "median_s": statistics.median(ts), "min_s": min(ts),
                 "reps": len(ts), "kernels": GlobalCounters.kernel_count, "kernel_s": GlobalCounters.time_sum_s, "ok": same, "rel_err": 0.0 if same else 1.0})
  return rows

def _conv_ref_any(x: np.ndarray, w: np.ndarray, padding=0, stride=1, dilation=1, groups=1) -> np.ndarray:
  """float64 2-d convolution with stride, dilation and groups, one kernel tap at a time (a test oracle)."""
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
  n, _c, hp, _ = xp.shape
  co, cig, k, _ = w.shape
  o = (hp - dilation * (k - 1) - 1) // stride + 1
  out = np.zeros((n, co, o, o))
  cog = co // groups
  for g in range(groups):
    xg, wg = xp[:, g * cig:(g + 1) * cig], w[g * cog:(g + 1) * cog].astype(np.float64)
    for ky in range(k):
      for kx in range(k):
        win = xg[:, :, ky * dilation:ky * dilation + stride * (o - 1) + 1:stride, kx * dilation:kx * dilation + stride * (o - 1) + 1:stride]
        out[:, g * cog:(g + 1) * cog] += np.einsum("nchw,oc->nohw", win, wg[:, :, ky, kx])
  return out

def bench_convvar(spec: dict) -> list[dict]:
  """Each conv variant (depthwise, groups=4, 1x1, stride 2, dilation 2, and the dense 3x3 they compare with): the
  forward alone, and forward + backward (input and weight gradients) as a TinyJit step; the forward and the loss are
  checked against float64 numpy on the first images."""
  from frontend import TinyJit
  rows = []
  for name, (_ws, kw) in conv_variants(spec["convvar"]).items():
    xn, wn = convvar_inputs(spec["convvar"], name)
    x, w = Tensor(xn).realize(), Tensor(wn).realize()
    res = _time_realize(lambda: x.conv2d(w, **kw))
    k = min(2, xn.shape[0])
    want = _conv_ref_any(xn[:k], wn, **kw)
    rows.append({"bench": "convvar", "key": f"convvar:{name}", "shape": spec["convvar"], "variant": name} | _check(res, res["_out"].numpy()[:k], want, 1e-3, 1e-3))
    xg, wg = Tensor(xn, requires_grad=True).realize(), Tensor(wn, requires_grad=True).realize()
    @TinyJit
    def step():
      xg.grad = wg.grad = None
      loss = xg.conv2d(wg, **kw).square().mean()
      loss.backward()
      return loss.realize(), xg.grad.realize(), wg.grad.realize()
    res = median_time(step, warmup=3, budget_s=2.0, max_reps=10)
    GlobalCounters.reset(); loss, _, _ = step()
    res.update(kernels=GlobalCounters.kernel_count, kernel_s=GlobalCounters.time_sum_s)
    want_loss = np.array((_conv_ref_any(xn, wn, **kw) ** 2).mean())
    rows.append({"bench": "convvar", "key": f"convvar:{name}:train", "shape": spec["convvar"], "variant": name, "train": True}
                | _check(res | {"_out": None}, loss.numpy(), want_loss, 1e-3, 1e-6))
  return rows

def bench_beam(spec: dict) -> list[dict]:
  """matmul with BEAM=2 (run.py starts this child with BEAM=2 and a fresh private HCQRT_CACHE): the warm-up call
  searches (its wall time is the search), then the median as for matmul; finally the engine's in-process kernel cache
  is dropped and the product built again: that run finds the winner in the BEAM disk cache and the object in the C
  cache, so it reports how many C compiles (0) and how long it took."""
  import frontend.engine as eng
  import compiler.assemble.c_compiler as cc
  rows = []
  calls, real_run = [0], cc.subprocess.run
  def counting(*args, **kw):
    calls[0] += 1
    return real_run(*args, **kw)
  for n in spec["beam"]:
    an, bn = matmul_inputs(n)
    a, b = Tensor(an).realize(), Tensor(bn).realize()
    t0 = time.perf_counter()
    (a @ b).realize()
    search = time.perf_counter() - t0
    res = _time_realize(lambda: a @ b, budget_s=3.0, max_reps=10)
    eng._kernel_cache.clear()
    calls[0] = 0
    cc.subprocess.run = counting
    try:
      t0 = time.perf_counter()
      (a @ b).realize()
      second = time.perf_counter() - t0
    finally: cc.subprocess.run = real_run
    k = min(n, 32)
    want = an[:k].astype(np.float64) @ bn.astype(np.float64)
    rows.append({"bench": "matmul", "key": f"beam:{n}", "n": n, "search_s": search, "second_run_s": second, "second_run_cc_calls": calls[0]}
                | _check(res, res["_out"].numpy()[:k], want, 1e-3, 1e-3 * np.sqrt(n)))
  if "conv" in spec:   # the conv benchmark's two convs under BEAM=2, timed the same way
    xn, w1n, w2n = conv_inputs(spec["conv"])
    x, w1, w2 = (Tensor(a).realize() for a in (xn, w1n, w2n))
    conv = lambda: x.conv2d(w1, padding=1).conv2d(w2, padding=1)
    t0 = time.perf_counter()
    conv().realize()
    search = time.perf_counter() - t0
    res = _time_realize(conv)
    eng._kernel_cache.clear()
    calls[0] = 0
    cc.subprocess.run = counting
    try:
      t0 = time.perf_counter()
      conv().realize()
      second = time.perf_counter() - t0
    finally: cc.subprocess.run = real_run
    k = min(2, xn.shape[0])
    want = _conv_ref(_conv_ref(xn[:k], w1n), w2n)
    rows.append({"bench": "conv", "key": "beam:conv", "shape": spec["conv"], "search_s": search, "second_run_s": second,
                 "second_run_cc_calls": calls[0]} | _check(res, res["_out"].numpy()[:k], want, 1e-3, 1e-3))
  return rows

def _instrument() -> dict[str, list[float]]:
  """Wrap the engine's kernel build, the C compiler and the CPU loader with timers (bench-side only).

  Returns lists the wrappers append each call's seconds to; a hook that is missing stays empty.
  """
  acc: dict[str, list] = {"build": [], "build_cpu": [], "cc": [], "llvm_passes": [], "load": [], "names": []}
  def timed(fn, key):
    def w(*a, **kw):
      t0 = time.perf_counter()
      try: return fn(*a, **kw)
      finally: acc[key].append(time.perf_counter() - t0)
    return w
  def build(fn):
    # get_kernel also serves in-process cache hits; only a call that ran the C compiler counts as a build
    def w(*a, **kw):
      n, t0, c0, ck = len(acc["cc"]), time.perf_counter(), time.thread_time(), None
      try:
        ck = fn(*a, **kw)
        return ck
      finally:
        if len(acc["cc"]) > n:
          acc["build"].append(time.perf_counter() - t0); acc["names"].append(getattr(ck, "name", "?"))
          acc["build_cpu"].append(time.thread_time() - c0)   # this thread's CPU time: what a loaded host does not inflate
    return w
  try:
    import frontend.engine as eng
    eng.get_kernel = build(eng.get_kernel)
  except (ImportError, AttributeError): pass
  try:
    import compiler.assemble.c_compiler as cc
    cc.compile_c = timed(cc.compile_c, "cc")
  except (ImportError, AttributeError): pass
  try:   # CPU_LLVM=1: LLVM in-process is the "compiler" of a build
    import compiler.assemble.llvm as cl
    cl.compile_llvm = timed(cl.compile_llvm, "cc")
    cl._module = timed(cl._module, "llvm_passes")   # parse + verify + the O3 pipeline; the rest of cc is codegen
  except (ImportError, AttributeError): pass
  try:
    from hcqrt.cpu.device import CPUDevice
    CPUDevice.program = timed(CPUDevice.program, "load")
  except (ImportError, AttributeError): pass
  return acc

def bench_compile(spec: dict) -> list[dict]:
  """Cold kernel builds (lower + optimize + linearize + render + C compile + ELF load): each expression
  carries a constant never used before, so its kernel is new to the in-process cache, and CACHE=0 (set by
  run.py for this process) makes the C compiler run even if an earlier run left the object on disk."""
  if os.environ.get("CACHE", "1") != "0": print("warning: compile bench without CACHE=0 may hit the disk cache", file=sys.stderr)
  # one build at a time, so each kernel's figures are its own (bench/cold_start.py times the builds side by side)
  os.environ["COMPILE_WORKERS"] = "1"
  xn = np.ones((64, 64), np.float32)
  x, y = Tensor(xn).realize(), Tensor(xn).realize()
  (x + 1).realize()  # opens the device (its runner is compiled once) before anything is timed
  kinds = [lambda c: (x * c + y).relu().exp(), lambda c: (x * c).sum(axis=1), lambda c: (x * c) @ y,
           lambda c: (x * c).softmax(axis=-1)]
  acc = _instrument()
  walls, nkern = [], 0
  for i in range(spec["compile"]):
    c = 1.0 + (time.time_ns() % 1_000_003) * 1e-7 + i * 1e-3  # unique per run and per kernel
    out = kinds[i % len(kinds)](c)
    GlobalCounters.reset()
    t0 = time.perf_counter()
    out.realize()
    walls.append(time.perf_counter() - t0)
    nkern += GlobalCounters.kernel_count
  med = lambda xs: statistics.median(xs) if xs else None
  # per kernel: the median over the kernels built; the realize wall time also covers scheduling and the run
  return [{"bench": "compile", "key": "compile", "kernels": nkern, "builds": len(acc["build"]), "cc_calls": len(acc["cc"]),
           "median_s": med(acc["build"]) if acc["build"] else sum(walls) / max(nkern, 1),
           "front_median_s": med([b - c - l for b, c, l in zip(acc["build"], acc["cc"], acc["load"])]) if len(acc["build"]) == len(acc["cc"]) == len(acc["load"]) else None,
           "cc_median_s": med(acc["cc"]), "load_median_s": med(acc["load"]), "max_s": max(acc["build"] or walls),
           "cpu_median_s": med(acc["build_cpu"]), "llvm_passes_median_s": med(acc["llvm_passes"]),
           "slowest": acc["names"][acc["build"].index(max(acc["build"]))] if acc["build"] else None,
           "realize_per_kernel_s": sum(walls) / max(nkern, 1), "ok": len(acc["build"]) > 0}]

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--spec", default=json.dumps(FULL), help="sizes as JSON (see bench/_common.py FULL)")
  p.add_argument("--only", default=",".join(BENCHES))
  args = p.parse_args()
  spec = json.loads(args.spec)
  from hcqrt.device import Device
  info = {"device": str(Device.DEFAULT)}
  try:
    if os.environ.get("CPU_LLVM", "0") == "1":
      import llvmlite.binding as llvm
      info["cc"] = f"LLVM {'.'.join(map(str, llvm.llvm_version_info))} in-process (llvmlite)"
    else:
      from compiler.assemble.c_compiler import c_compiler, compiler_version
      info["cc"] = compiler_version(c_compiler()[0]).splitlines()[0]
  except Exception as e: info["cc"] = f"unknown ({e})"
  rows = run_all(spec, args.only.split(","), {"matmul": bench_matmul, "ew": bench_ew, "sum": bench_sum,
                                              "softmax": bench_softmax, "compile": bench_compile,
                                              "conv": bench_conv, "convtrain": bench_convtrain, "convvar": bench_convvar, "beam": bench_beam})
  emit({"lib": "ours", "info": info, "rows": rows})

if __name__ == "__main__": main()
