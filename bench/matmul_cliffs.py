"""Matmul at odd shapes against their nice neighbours, with and without compiler/pack_pad.py's scratch path (issue 28).

Each row realizes one product (inputs realized first) and reports process CPU time (all threads), the minimum over
REPS rounds; "old" turns the scratch path off (the product then stays unpacked, as before it existed), and old and new
take turns within each round so both see the same load. Run it with CPU_ISA=x86-64-v3 for the AVX2 kernels.

  python bench/matmul_cliffs.py [REPS]
"""
from __future__ import annotations
import sys, time
import numpy as np
import compiler.pack as pack
from frontend import Tensor

def _case(name: str, m: int, k: int, n: int, how: str):
  rng = np.random.default_rng(0)
  shapes = {"a.T": ((k, m), (k, n)), "b.T": ((m, k), (n, k))}.get(how, ((m, k), (k, n)))
  a, b = (Tensor(rng.standard_normal(s).astype(np.float32)).realize() for s in shapes)
  bias = Tensor(rng.standard_normal(n).astype(np.float32)).realize()
  def f() -> Tensor:
    x, w = (a.T if how == "a.T" else a), (b.T if how == "b.T" else b)
    out = x @ w
    return (out + bias).relu() if how == "bias_relu" else out
  return name, f

CASES = [("1024^3", 1024, 1024, 1024, ""), ("1023^3", 1023, 1023, 1023, ""), ("1000^3", 1000, 1000, 1000, ""),
         ("N=1023", 1024, 1024, 1023, ""), ("M=1023", 1023, 1024, 1024, ""), ("K=1021", 1024, 1021, 1024, ""),
         ("a.T 1023^3", 1023, 1023, 1023, "a.T"), ("b.T 1023^3", 1023, 1023, 1023, "b.T"),
         ("1024^3 +b relu", 1024, 1024, 1024, "bias_relu"), ("1023^3 +b relu", 1023, 1023, 1023, "bias_relu"),
         ("1000x1000x1000 +b relu", 1000, 1000, 1000, "bias_relu"),
         ("x@W.T+b 256x784>1000", 256, 784, 1000, "bias_relu"), ("x@W.T+b 256x784>1024", 256, 784, 1024, "bias_relu"),
         ("2048^3", 2048, 2048, 2048, ""), ("2047^3", 2047, 2047, 2047, "")]

def _time(f, on: bool) -> float:
  pack._plans.clear()
  pack.scratch_plan = _real if on else (lambda *a: None)
  t0 = time.process_time()
  f().realize()
  return (time.process_time() - t0) * 1e3

_real = pack.scratch_plan
if __name__ == "__main__":
  reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
  only = sys.argv[2].split(",") if len(sys.argv) > 2 else None
  print(f"{'shape':26s} {'old ms':>9s} {'new ms':>9s}  (process CPU time, min of {reps})")
  for name, m, k, n, how in CASES:
    if only and name not in only: continue
    label, f = _case(name, m, k, n, how)
    for on in (False, True): _time(f, on)   # compile both
    old, new = [], []
    for _ in range(reps):
      old.append(_time(f, False)); new.append(_time(f, True))
    print(f"{label:26s} {min(old):9.2f} {min(new):9.2f}", flush=True)
