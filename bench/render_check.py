"""Byte-for-byte check that a compiler change leaves the generated kernels alone: render a fixed set of kernels
(ASTs pickled by `collect`, built for several targets) and write every kernel's source, applied opts and launch to a
JSON file; run it before and after a change and `diff` the two files.

  python bench/render_check.py collect kernels.pkl [more.pkl...]   # the bench's kernels (+ ASTs pickled by tests)
  python bench/render_check.py render kernels.pkl out.json         # no assembling: front end only, timed
  python bench/render_check.py compare before.json after.json

A pickle holds a list of (ast, target or None, opts or None, name); target None means "every target of TARGETS".
"""
from __future__ import annotations
import json, pathlib, pickle, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

def targets() -> list:
  from compiler.target import Target, PORTABLE_C, AMD_TARGETS
  cpu = [Target("CPU", r, arch=a, ncores=n, simd_bytes=s) for r in ("c", "llvm") for a, s in (("x86-64-v3", 32), ("x86-64-v4", 64))
         for n in (1, 4)]
  return cpu + [Target("NV", "ptx", arch="sm_90", buffer_alignment=16, shared_memory=48 << 10, warp_size=32, gpu=True),
                AMD_TARGETS["gfx1100"], PORTABLE_C]

def collect(out: str) -> None:
  """The ASTs of the benchmark's kernels (bench/_common.py FULL and QUICK sizes, the compile bench's four kinds, odd
  sizes), scheduled as the engine schedules them (packed matmuls included), without running anything."""
  import numpy as np
  from frontend import Tensor
  from frontend.engine import pack_matmuls, simd_lanes
  from compiler.schedule import create_schedule
  exprs = []
  def emp(*shape, grad=False) -> Tensor: return Tensor(np.ones(shape, np.float32), requires_grad=grad).realize()
  for n in (64, 128, 256, 512, 1000, 1024, 2048): exprs.append([emp(n, n) @ emp(n, n)])
  exprs.append([emp(61, 1000) @ emp(1000, 67)])
  for r, c in ((8, 8), (64, 64), (512, 512), (4096, 4096), (7, 1000)): exprs.append([emp(r, c).softmax(axis=-1)])
  x, y = emp(64, 64), emp(64, 64)
  for c in (1.5, 2.25): exprs += [[(x * c + y).relu().exp()], [(x * c).sum(axis=1)], [(x * c) @ y], [(x * c).softmax(axis=-1)]]
  exprs += [[(emp(1 << 20) * emp(1 << 20) + emp(1 << 20)).relu().exp()], [emp(1 << 22).sum()]]
  for b, ci, h, w, c1, c2 in ((32, 3, 32, 32, 32, 64), (4, 3, 16, 16, 8, 16)):
    xi, w1, w2 = emp(b, ci, h, w), emp(c1, ci, 3, 3, grad=True), emp(c2, c1, 3, 3, grad=True)
    exprs.append([xi.conv2d(w1, padding=1).conv2d(w2, padding=1)])
    loss = xi.conv2d(w1, padding=1).relu().conv2d(w2, padding=1).square().mean()
    loss.backward()
    exprs.append([loss, w1.grad, w2.grad])
  asts = {}
  for ts in exprs:
    for si in pack_matmuls(create_schedule([t.lazydata for t in ts]), simd_lanes):
      if si.kind == "kernel": asts.setdefault((si.ast, None, None, si.name), None)
  with open(out, "wb") as f: pickle.dump(list(asts), f)
  print(f"{len(asts)} kernels -> {out}")

def render(pkls: list[str], out: str) -> None:
  from compiler.pipeline import compile_kernel
  jobs = [j for p in pkls for j in pickle.load(open(p, "rb"))]
  ts, res, t0, errors = targets(), [], time.process_time(), 0
  for ast, target, opts, name in jobs:
    for t in ([target] if target is not None else ts):
      try:
        ck = compile_kernel(ast, t, opts, name=name, assemble=False)
        res.append({"name": name, "target": repr(t), "opts": repr(opts), "src": ck.src, "applied": repr(ck.applied_opts),
                    "launch": repr(ck.launch), "global_size": ck.global_size, "ops": ck.ops})
      except Exception as e:   # an error is part of the output too (the same kernels must fail the same way)
        errors += 1
        res.append({"name": name, "target": repr(t), "opts": repr(opts), "error": f"{type(e).__name__}: {e}"})
  cpu = time.process_time() - t0
  json.dump(res, open(out, "w"), indent=0)
  print(f"{len(res)} kernels rendered ({errors} errors) from {len(jobs)} jobs in {cpu:.1f} s CPU -> {out}")

def compare(a: str, b: str) -> None:
  ra, rb = json.load(open(a)), json.load(open(b))
  # rows line up by position (same jobs, same targets); a Target's repr changes when Target gains a field, so it isn't compared
  same = lambda x, y: {k: v for k, v in x.items() if k != "target"} == {k: v for k, v in y.items() if k != "target"}
  diff = [i for i, (x, y) in enumerate(zip(ra, rb)) if not same(x, y)]
  if len(ra) != len(rb) or diff:
    for i in diff[:5]: print("DIFFERS:", ra[i]["name"], ra[i]["target"])
    sys.exit(f"{len(diff)} of {len(ra)} kernels differ (lengths {len(ra)} / {len(rb)})")
  print(f"identical: {len(ra)} kernels (source, opts, launch, ops)")

if __name__ == "__main__":
  cmd, *rest = sys.argv[1:]
  if cmd == "collect": collect(rest[0])
  elif cmd == "render": render(rest[:-1], rest[-1])
  elif cmd == "compare": compare(*rest)
  else: sys.exit(__doc__)
