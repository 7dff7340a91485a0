"""The peeled threaded loop (compiler/opt/peel.py peel_range, thread_pieces) against the kernels main built before it, on
this host's cores: convs read in place whose batch is too short for the cores, so the cores split the output rows the
peel wants. Old: the peel went to a loop inside the threaded one (the row gates then stay in every piece); new: the
threaded rows themselves peeled, each chunk running its share of the pieces. Both kernels built in one process, their
launches taking turns (A, B, A, B...), minima of wall time over the rounds (the launch uses every core).

  python bench/thread_peel_ab.py [--rounds 40] [--cores N]
"""
from __future__ import annotations
import argparse, os, pathlib, sys, time
import numpy as np
ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

def old_peel_default(k, device):
  """main's compiler/opt/conv.py peel_default (951373d): only loops inside the threaded one are peeled."""
  from compiler.opt.conv import peel_points, peel_share, peel_fixed_reductions
  from compiler.opt.apply import apply_opt
  from compiler.opt.base import Opt, OptError
  if device.gpu or not k.reduce_ranges() or k.nests: return k
  best, share = None, 0.0
  for i in reversed(range(len(k.global_ranges))):
    g = k.global_ranges[i]
    if g is k.threaded: break
    if (pts := peel_points(k, g)) and (sh := peel_share(g.src[0].arg, pts)) > share: best, share = i, sh
  if best is None: return k
  try: k = apply_opt(k, Opt("PEEL", best), device)
  except OptError: return k
  return peel_fixed_reductions(k) if device.vector_registers <= 16 else k

CASES = {   # name: (input, weight, conv kwargs, CPU lanes the graph is built for or None: the host's)
  "s2_2x64x32_v4": ((2, 64, 32, 32), (64, 64, 3, 3), dict(stride=2, padding=1), 16),
  "s2_2x64x32_v3": ((2, 64, 32, 32), (64, 64, 3, 3), dict(stride=2, padding=1), 8),
  "pad_view_1x32x32": ((1, 32, 32, 32), (32, 32, 3, 3), dict(padding=1), None),
}

def conv_kernel(shape, wshape, kw, lanes):
  import frontend.nn_ops as nn_ops
  from frontend import Tensor
  from compiler.schedule import create_schedule
  old = nn_ops._cpu_lanes
  if lanes is not None: nn_ops._cpu_lanes = lambda device: lanes
  try:
    x, w = Tensor.empty(*shape).realize(), Tensor.empty(*wshape).realize()
    y = x.pad((1, 1, 1, 1)).conv2d(w) if kw.get("stride", 1) == 1 else x.conv2d(w, **kw)
    si = [si for si in create_schedule([y.lazydata]) if getattr(si, "ast", None) is not None][-1]
  finally: nn_ops._cpu_lanes = old
  return si

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--rounds", type=int, default=40)
  ap.add_argument("--cores", type=int, default=0, help="the target's cores (default: this host's)")
  args = ap.parse_args()
  import compiler.opt.heuristic as heuristic
  from compiler.pipeline import compile_kernel
  from frontend.devices import open_device, target_of
  from hcqrt.cpu.isa import cpu_isa
  from hcqrt.cpu.device import CPUDevice
  from compiler.target import Target
  dev = open_device("CPU")
  t = target_of("CPU")
  if args.cores: t = t.replace(ncores=args.cores)
  print(f"{t.ncores} cores, {t.arch}, load {os.getloadavg()[0]:.1f}")
  new_peel = heuristic.peel_default
  for name, (shape, wshape, kw, lanes) in CASES.items():
    isa = "x86-64-v4" if lanes == 16 else "x86-64-v3" if lanes == 8 else None
    if isa is not None and not cpu_isa(isa).runnable: continue
    tt = t if isa is None else Target.from_report({**CPUDevice(isa=isa).target, "ncores": t.ncores})
    si = conv_kernel(shape, wshape, kw, lanes)
    cks = {}
    for label, fn in (("old", old_peel_default), ("new", new_peel)):
      heuristic.peel_default = fn
      try: cks[label] = compile_kernel(si.ast, tt, name=f"conv_{label}")
      finally: heuristic.peel_default = new_peel
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal(b.shape, dtype=np.float32) for b in si.inputs]
    outn = int(np.prod(si.outputs[0].shape))
    bufs = [dev.allocator.alloc(4 * outn)] + [dev.allocator.alloc(a.nbytes) for a in ins]
    for b, a in zip(bufs[1:], ins): dev.allocator.copyin(b, memoryview(a))
    progs = {lb: dev.program(ck.name, ck.binary) for lb, ck in cks.items()}
    res = {lb: [] for lb in cks}
    outs = {}
    for _ in range(args.rounds):
      for lb, p in progs.items():
        t0 = time.perf_counter(); p(*bufs, threads=cks[lb].threads); res[lb].append(time.perf_counter() - t0)
    for lb, p in progs.items():
      p(*bufs, threads=cks[lb].threads)
      o = np.empty(outn, np.float32); dev.allocator.copyout(memoryview(o), bufs[0]); outs[lb] = o
    same = np.allclose(outs["old"], outs["new"], rtol=1e-4, atol=1e-4)
    print(f"{name:20s} old {min(res['old']) * 1e6:8.1f} us  new {min(res['new']) * 1e6:8.1f} us  (medians {np.median(res['old']) * 1e6:.1f} / "
          f"{np.median(res['new']) * 1e6:.1f})  equal {same}")
    for lb, ck in cks.items(): print(f"  {lb}: threads {ck.threads} {list(ck.applied_opts)}")
  print(f"load at the end {os.getloadavg()[0]:.1f}")

if __name__ == "__main__": main()
