"""Matmul at odd shapes against their nice neighbours, before and after the packing paths of issue 28: compiler/pack_pad.py
(N not whole tiles, M under an epilogue), compiler/pack_batch.py (bmm), compiler/pack_avx512.py (small batches on
AVX-512), compiler/pack_strided.py (x @ W.T with a short K).

Each row realizes one computation (inputs realized first) and reports process CPU time (all threads), the minimum over
REPS rounds; "old" turns the four paths off (the schedule main had before them), and old and new take turns within
each round so both see the same load. Run it with CPU_ISA=x86-64-v3 for the AVX2 kernels.

  python bench/matmul_cliffs.py [REPS] [name,name...]
"""
from __future__ import annotations
import sys, time
import numpy as np
import compiler.pack as pack
from frontend import Tensor

def _case(m: int, k: int, n: int, how: str):
  rng = np.random.default_rng(0)
  def t(*shape: int, grad: bool = False) -> Tensor: return Tensor(rng.standard_normal(shape).astype(np.float32) * 0.05, requires_grad=grad).realize()
  if how.startswith("bmm"):
    nb = int(how[3:])
    a, b = t(nb, m, k), t(nb, k, n)
    return lambda: [a @ b]
  if how == "linear_fb":   # x @ W.T + b, relu, then the gradients of W, b and x (W stored (N, K) as nn.Linear does)
    x, w, bias = t(m, k, grad=True), t(n, k, grad=True), t(n, grad=True)
    def step() -> list[Tensor]:
      x.grad = w.grad = bias.grad = None
      (x @ w.T + bias).relu().sum().backward()
      return [x.grad, w.grad, bias.grad]
    return step
  a, b = t(*((k, m) if how == "a.T" else (m, k))), t(*((n, k) if how == "b.T" else (k, n)))
  bias = t(n)
  def f() -> list[Tensor]:
    out = (a.T if how == "a.T" else a) @ (b.T if how == "b.T" else b)
    return [(out + bias).relu() if how == "bias_relu" else out]
  return f

CASES = [("1024^3", 1024, 1024, 1024, ""), ("1023^3", 1023, 1023, 1023, ""), ("1000^3", 1000, 1000, 1000, ""),
         ("N=1023", 1024, 1024, 1023, ""), ("M=1023", 1023, 1024, 1024, ""), ("K=1021", 1024, 1021, 1024, ""),
         ("a.T 1023^3", 1023, 1023, 1023, "a.T"), ("b.T 1023^3", 1023, 1023, 1023, "b.T"),
         ("1024^3 +b relu", 1024, 1024, 1024, "bias_relu"), ("1023^3 +b relu", 1023, 1023, 1023, "bias_relu"),
         ("1000^3 +b relu", 1000, 1000, 1000, "bias_relu"),
         ("256x784>1000 +b relu", 256, 784, 1000, "bias_relu"), ("256x784>1024 +b relu", 256, 784, 1024, "bias_relu"),
         ("128x2048x2048", 128, 2048, 2048, ""), ("128x1024x1024", 128, 1024, 1024, ""), ("100x784x1000", 100, 784, 1000, ""),
         ("x@W.T 1000x100>784", 1000, 100, 784, "b.T"), ("x@W.T 1024x128>1024", 1024, 128, 1024, "b.T"),
         ("Linear f+b 100x784>1000", 100, 784, 1000, "linear_fb"), ("Linear f+b 128x784>1024", 128, 784, 1024, "linear_fb"),
         ("bmm 4x1024^3", 1024, 1024, 1024, "bmm4"), ("bmm 4x1023^3", 1023, 1023, 1023, "bmm4"),
         ("bmm 8x512^3", 512, 512, 512, "bmm8"), ("bmm 64x300^3", 300, 300, 300, "bmm64"),
         ("2048^3", 2048, 2048, 2048, ""), ("2047^3", 2047, 2047, 2047, "")]

_real = {name: getattr(pack, name) for name in ("scratch_plan", "batched_plan", "avx512_packs", "strided_b_packs")}
_off = {"scratch_plan": lambda *a: None, "batched_plan": lambda *a: None, "avx512_packs": lambda *a: False, "strided_b_packs": lambda *a: False}

def _time(f, on: bool) -> float:
  pack._plans.clear()
  for name, fn in (_real if on else _off).items(): setattr(pack, name, fn)
  t0 = time.process_time()
  outs = f()
  outs[0].realize(*outs[1:])
  return (time.process_time() - t0) * 1e3

if __name__ == "__main__":
  reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
  only = sys.argv[2].split(",") if len(sys.argv) > 2 else None
  print(f"{'shape':26s} {'old ms':>9s} {'new ms':>9s}  (process CPU time, min of {reps})")
  for name, m, k, n, how in CASES:
    if only and name not in only: continue
    f = _case(m, k, n, how)
    for on in (False, True): _time(f, on)   # compile both
    old, new = [], []
    for _ in range(reps):
      old.append(_time(f, False)); new.append(_time(f, True))
    print(f"{name:26s} {min(old):9.2f} {min(new):9.2f}", flush=True)
