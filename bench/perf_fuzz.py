"""Performance fuzzer (issue 28): ordinary training code must not fall off cliffs the fixed benchmarks don't have.

Random cases: a conv (nn.Conv2d: 1x1/3x3, stride 1/2), a matmul (nn.Linear) or a reduction (sum/max over an axis),
with random epilogues (bias, BatchNorm in train or eval mode, relu/gelu/silu/sigmoid, a residual add), parameters
lazy (never realized by the user) or realized, forward only or forward + backward, run eagerly or as a TinyJit step.
For each case every heavy kernel of its third step (the steady state: a lazy parameter's initialisation belongs to
the first) is timed by relaunching the recorded launch (best of --reps rounds, the case's launches and the op alone's
taking turns in each round, so both see the same load) and compared with the same op alone: the
bare conv/matmul/reduction of the same shapes (no epilogue, realized parameters, same forward/backward), matched by
FLOPs; a reduction (memory-bound) is compared by GB/s with the bare reduction and with the roofline (the GB/s of a
plain elementwise copy over 64 MB), and one with a prologue (scale, bias, activation) by its step's kernel time with the
same work unfused (the prologue stored by a kernel of its own, then reduced): fusing must not make it slower. A ratio
under 0.5 is timed again with three times the rounds (both sides) before it is reported: a cliff must reproduce. The case's whole step (kernel time) is compared with the bare step's too.
Prints every case and the worst ones (ratio = ours in this context / the op alone; below 0.5 is a cliff).

Not a test: timings depend on the machine and its load (the minimum of several launches is reported; run it on a
quiet machine). For an AVX2 target on an AVX-512 host: CPU_ISA=x86-64-v3 python bench/perf_fuzz.py.

  python bench/perf_fuzz.py [--cases 40] [--seed 0] [--reps 7] [--worst 10] [--json out.json]
"""
from __future__ import annotations
import argparse, json, os, pathlib, random, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import numpy as np
from frontend import Tensor, TinyJit, nn
from frontend.jit import capture
from frontend.nn.state import get_parameters
from compiler.uop import Ops

# --- the cases ---

def random_case(r: random.Random) -> dict:
  kind = r.choice(["conv", "conv", "matmul", "reduce"])
  if kind == "conv":
    k, s = r.choice([1, 3, 3]), r.choice([1, 1, 2])
    shape = {"n": r.choice([8, 16]), "ci": r.choice([3, 16, 32, 64]), "co": r.choice([16, 32, 64]), "hw": r.choice([16, 32]), "k": k, "stride": s}
  elif kind == "matmul": shape = {"m": r.choice([64, 128, 256, 512]), "k": r.choice([64, 256, 512, 1024]), "n": r.choice([64, 256, 512])}
  else: shape = {"rows": r.choice([256, 1024, 4096]), "cols": r.choice([256, 1024, 4096]), "op": r.choice(["sum", "max"]), "axis": r.choice([0, 1])}
  epi = [e for e in ("bias", "bn", "act", "residual") if r.random() < 0.5]
  if kind == "reduce": epi = [e for e in epi if e != "bn"]
  return {"kind": kind, "shape": shape, "epi": epi, "act": r.choice(["relu", "gelu", "silu", "sigmoid"]), "bn_train": r.random() < 0.5,
          "lazy": r.random() < 0.5, "bwd": r.random() < (0.3 if kind == "reduce" else 0.5),
          "jit": r.random() < 0.5, "input_grad": r.random() < 0.5}

def bare(case: dict) -> dict:
  """The same op alone: no epilogue, realized parameters, eager, the same forward/backward."""
  return case | {"epi": [], "lazy": False, "jit": False}

def unfused(case: dict) -> dict | None:
  """A reduction with a prologue (scale, bias, activation) computed by a kernel of its own, then reduced: what the
  fused case must not be slower than (the bare reduction does less work: a transcendental per element is not free)."""
  return case | {"split": True} if case["kind"] == "reduce" else None

def make_step(case: dict):
  """(step function returning the tensors to realize, its parameters) for a case, on fresh seeded inputs."""
  Tensor.manual_seed(1)
  g = np.random.default_rng(0)
  sh, epi, kind = case["shape"], case["epi"], case["kind"]
  act = lambda t: getattr(t, case["act"])() if "act" in epi else t
  if kind == "conv":
    x = Tensor(g.standard_normal((sh["n"], sh["ci"], sh["hw"], sh["hw"]), dtype=np.float32), requires_grad=case["input_grad"]).realize()
    layer = nn.Conv2d(sh["ci"], sh["co"], sh["k"], stride=sh["stride"], padding=sh["k"] // 2, bias="bias" in epi)
    oh = (sh["hw"] + 2 * (sh["k"] // 2) - sh["k"]) // sh["stride"] + 1
    res = Tensor(g.standard_normal((sh["n"], sh["co"], oh, oh), dtype=np.float32)).realize()
    mods = [layer] + ([nn.BatchNorm2d(sh["co"])] if "bn" in epi else [])
  elif kind == "matmul":
    x = Tensor(g.standard_normal((sh["m"], sh["k"]), dtype=np.float32), requires_grad=case["input_grad"]).realize()
    layer = nn.Linear(sh["k"], sh["n"], bias="bias" in epi)
    res = Tensor(g.standard_normal((sh["m"], sh["n"]), dtype=np.float32)).realize()
    mods = [layer] + ([nn.BatchNorm1d(sh["n"])] if "bn" in epi else [])
  else:
    x = Tensor(g.standard_normal((sh["rows"], sh["cols"]), dtype=np.float32), requires_grad=True).realize()
    scale = Tensor.uniform(sh["cols"], low=0.5, high=1.5)   # a parameter: lazy or realized like the layers'
    bias = Tensor.uniform(sh["cols"], low=-0.1, high=0.1)
    res = Tensor(g.standard_normal((sh["cols"] if sh["axis"] == 0 else sh["rows"],), dtype=np.float32)).realize()
    mods = []
  # (the trained parameters: a BatchNorm's running statistics are state, realized like them but given no gradient)
  params = [t for m in mods for t in (m.weight, m.bias) if t is not None] if mods else [scale] + ([bias] if "bias" in epi else [])
  for t in params: t.requires_grad = True
  if not case["lazy"]: Tensor.realize(*get_parameters(mods) if mods else params)
  def forward() -> Tensor:
    if kind == "reduce":
      h = x * scale + (bias if "bias" in epi else 0)
      h = act(h).contiguous() if case.get("split") else act(h)   # split: the prologue stored by its own kernel
      out = getattr(h, case["shape"]["op"])(axis=sh["axis"])
    else:
      out = layer(x)
      if "bn" in epi: out = mods[1](out)
      out = act(out)
    return out + res if "residual" in epi else out
  def step() -> list[Tensor]:
    with Tensor.train(case["bn_train"] or case["bwd"]):
      for p in params: p.grad = None
      if x.requires_grad: x.grad = None
      out = forward()
      if not case["bwd"]: return [out]
      loss = out.square().mean()
      loss.backward()
      return [loss] + [p.grad for p in params] + ([x.grad] if x.requires_grad and kind != "reduce" else [])
  return (TinyJit(lambda: [t.realize() for t in step()]) if case["jit"] else (lambda: Tensor.realize(*step()))), params

# --- timing ---

def launches(case: dict) -> list:
  """The kernel launches of a case's third step (a TinyJit's recording, or an eager step captured)."""
  run, _ = make_step(case)
  for _ in range(2): run()
  if case["jit"]:
    run()
    return [ei for ei in run.items if ei.kind == "kernel"]
  with capture("perf_fuzz") as items: run()
  return [ei for ei in items if ei.kind == "kernel"]

def best_times(groups: list[list], reps: int) -> list[list[float]]:
  """Best kernel time (its own timer) of each launch over `reps` rounds; in each round every group's launches run in
  turn, so a case and the op alone see the same load on a shared machine."""
  best = [[float("inf")] * len(g) for g in groups]
  for _ in range(reps):
    for bg, g in zip(best, groups):
      for i, ei in enumerate(g): bg[i] = min(bg[i], ei.run(debug=0) or 1e-9)
  return best

def nbytes(ei) -> int: return sum(b.nbytes for b in ei.bufs)

def heavy(kernels: list, kind: str) -> list[int]:
  """Indices of the kernels that carry the work: for a compute op those with at least a quarter of the biggest one's
  FLOPs (and 1 MFLOP), for a reduction the one moving the most bytes."""
  if kind == "reduce": return [max(range(len(kernels)), key=lambda i: nbytes(kernels[i]))] if kernels else []
  top = max((ei.kernel.ops for ei in kernels), default=0)
  return [i for i, ei in enumerate(kernels) if ei.kernel.ops >= max(top / 4, 1e6)]

def draws_random(ei) -> bool: return any(u.op is Ops.XOR for u in ei.kernel.ast.toposort())

def summary(ks: list, ts: list[float], kind: str) -> dict:
  return {"kernels": len(ks), "step_kernel_s": sum(ts),
          "heavy": [{"name": ks[i].kernel.name, "flops": ks[i].kernel.ops, "bytes": nbytes(ks[i]), "s": ts[i], "rng": draws_random(ks[i])} for i in heavy(ks, kind)]}

def roofline_launch():
  """A plain elementwise kernel over 64 MB (16M float32 read, 16M written): its GB/s is what a memory-bound kernel can
  reach. Timed next to every reduction case (the best GB/s seen so far is the roofline: load only lowers it)."""
  x = Tensor(np.ones(1 << 24, np.float32)).realize()
  with capture("roofline") as items: (x + 1).realize()
  return next(e for e in items if e.kind == "kernel")

def describe(case: dict) -> str:
  sh = case["shape"]
  if case["kind"] == "conv": op = f"conv {sh['n']}x{sh['ci']}x{sh['hw']}^2>{sh['co']} k{sh['k']}s{sh['stride']}"
  elif case["kind"] == "matmul": op = f"linear {sh['m']}x{sh['k']}>{sh['n']}"
  else: op = f"{sh['op']} {sh['rows']}x{sh['cols']} ax{sh['axis']}"
  epi = "+".join(e if e != "act" else case["act"] for e in case["epi"]) + ("(bn train)" if "bn" in case["epi"] and (case["bn_train"] or case["bwd"]) else "")
  return (f"{op} [{epi or '-'}] {'lazy' if case['lazy'] else 'real'} {'fwd+bwd' if case['bwd'] else 'fwd'}"
          f"{'+dx' if case['bwd'] and case['input_grad'] and case['kind'] != 'reduce' else ''} {'jit' if case['jit'] else 'eager'}")

def compare(case: dict, got: dict, base: dict, roof: float, split: dict | None = None) -> list[dict]:
  """One row per heavy kernel: its rate, the op alone's (the bare kernel of the nearest FLOPs / bytes), the ratio
  (a reduction with a prologue: the unfused step's kernel time / the case's, `split`)."""
  rows = []
  for h in got["heavy"]:
    if case["kind"] == "reduce":
      rate, b = h["bytes"] / h["s"] / 1e9, base["heavy"][0]
      brate, unit = b["bytes"] / b["s"] / 1e9, "GB/s"
      if split is not None:   # the fused step vs the same work unfused (ratio: unfused time / fused time)
        rows.append({"case": describe(case), "kernel": h["name"], "unit": unit, "rate": rate, "alone": brate, "ratio": split["step_kernel_s"] / got["step_kernel_s"],
                     "roof": rate / roof, "rng_in_heavy": h["rng"], "step_ratio": got["step_kernel_s"] / base["step_kernel_s"],
                     "kernels": got["kernels"], "bare_kernels": base["kernels"], "vs": "unfused"})
        continue
    else:
      b = min(base["heavy"], key=lambda x: abs(x["flops"] - h["flops"]))
      rate, brate, unit = h["flops"] / h["s"] / 1e9, b["flops"] / b["s"] / 1e9, "GFLOP/s"
    rows.append({"case": describe(case), "kernel": h["name"], "unit": unit, "rate": rate, "alone": brate, "ratio": rate / brate,
                 "roof": rate / roof if unit == "GB/s" else None, "rng_in_heavy": h["rng"],
                 "step_ratio": got["step_kernel_s"] / base["step_kernel_s"], "kernels": got["kernels"], "bare_kernels": base["kernels"], "vs": "alone"})
  return rows

def main() -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--cases", type=int, default=40)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--reps", type=int, default=7, help="launches per kernel timing (the best is kept; case and op alone take turns)")
  p.add_argument("--worst", type=int, default=10, help="how many of the worst kernels to list at the end")
  p.add_argument("--json", default="", help="write every row here")
  args = p.parse_args()
  r, t0 = random.Random(args.seed), time.perf_counter()
  roof_ei = roofline_launch()
  roof = nbytes(roof_ei) / best_times([[roof_ei]], args.reps)[0][0] / 1e9
  print(f"CPU_ISA={os.environ.get('CPU_ISA', 'native')}; {args.cases} cases, seed {args.seed}")
  bases: dict[str, list] = {}   # the op alone's launches, kept to be timed again next to each case using them
  rows: list[dict] = []
  print(f"{'case':72s} {'heavy kernel':30s} {'unit':7s} {'ours':>7s} {'alone':>7s} {'ratio':>6s} {'step':>6s} {'kern':>7s}")
  for _ in range(args.cases):
    case = random_case(r)
    key = json.dumps(bare(case), sort_keys=True)
    try:
      if key not in bases: bases[key] = launches(bare(case))
      ks = launches(case)
      groups = [ks, bases[key]] + ([launches(uf)] if (uf := unfused(case)) and ({"bias", "act"} & set(case["epi"])) else [])
      if case["kind"] == "reduce": groups.append([roof_ei])
      ts = best_times(groups, args.reps)
      if case["kind"] == "reduce": roof, groups, ts = max(roof, nbytes(roof_ei) / ts[-1][0] / 1e9), groups[:-1], ts[:-1]
      rows_now = compare(case, *(summary(g, t, case["kind"]) for g, t in zip(groups[:2], ts[:2])), roof, *(summary(groups[2], ts[2], "reduce") for _ in groups[2:]))
      if any(x["ratio"] < 0.5 for x in rows_now):
        # a cliff must reproduce: more rounds for both sides (best times over all of them), then judge again
        more = best_times(groups, 3 * args.reps)
        ts = [[min(a, b) for a, b in zip(t, m)] for t, m in zip(ts, more)]
      got, base = summary(ks, ts[0], case["kind"]), summary(bases[key], ts[1], case["kind"])
      split = summary(groups[2], ts[2], "reduce") if len(groups) > 2 else None
    except Exception as e:   # a case that fails is a finding too: listed, not fatal
      print(f"{describe(case):72s} ERROR {type(e).__name__}: {str(e)[:120]}")
      rows.append({"case": describe(case), "error": f"{type(e).__name__}: {e}"[:300]})
      continue
    for row in compare(case, got, base, roof, split):
      rows.append(row)
      flag = " RNG in heavy kernel" if row["rng_in_heavy"] else ""
      print(f"{row['case']:72s} {row['kernel']:30s} {row['unit']:7s} {row['rate']:7.1f} {row['alone']:7.1f} {row['ratio']:6.2f} "
            f"{row['step_ratio']:6.2f} {row['kernels']:>3d}/{row['bare_kernels']:<3d}{flag}{' (vs unfused)' if row['vs'] == 'unfused' else ''}", flush=True)
  ok = [x for x in rows if "ratio" in x]
  print(f"\nroofline: {roof:.1f} GB/s (the best of a plain elementwise kernel over 64 MB, timed next to each reduction; data that fits in cache can beat it)")
  print(f"\nworst {args.worst} heavy kernels (ratio = ours in the case / the op alone, or for a reduction with a prologue the unfused "
        f"step's kernel time / the fused one's; 'step' = the case's kernel time / the bare op's, epilogue work included; 'kern' = kernels "
        f"per step, case/bare; a ratio under 0.5 is timed again with 3x the rounds before it is reported):")
  for x in sorted(ok, key=lambda x: x["ratio"])[:args.worst]:
    print(f"  {x['ratio']:5.2f}  {x['case']}  {x['kernel']}  {x['rate']:.1f} vs {x['alone']:.1f} {x['unit']} alone" + (" (ratio vs unfused)" if x["vs"] == "unfused" else "")
          + (f" ({x['rate'] / roof * 100:.0f}% of the roofline)" if x["unit"] == "GB/s" else "") + (" RNG in heavy kernel" if x["rng_in_heavy"] else ""))
  under = [x for x in ok if x["ratio"] < 0.5]
  errs = [x for x in rows if "error" in x]
  print(f"\n{len(ok)} heavy kernels in {args.cases} cases: {len(under)} under half of the op alone, "
        f"{sum(x['rng_in_heavy'] for x in ok)} with random-number work inside, {len(errs)} errors; {time.perf_counter() - t0:.0f} s")
  if args.json: pathlib.Path(args.json).write_text(json.dumps({"roofline_gbs": roof, "isa": os.environ.get("CPU_ISA", "native"), "rows": rows}, indent=1))
  return 0

if __name__ == "__main__": sys.exit(main())
