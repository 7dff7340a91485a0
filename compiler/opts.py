"""Kernel optimizations: pick how a lowered kernel's loops are split, unrolled and vectorized.

`optimize(kernel, device)` applies the default hand-written heuristic. Every transformation is a substitution
of a RANGE by an expression of new ranges, so the kernel stays correct by construction.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.lower import lower
>>> from compiler.dtypes import dtypes
>>> x = LazyBuffer.empty((1 << 20,), dtypes.float32, "CPU"); x.buffer = object()
>>> class Dev: ncores = 2
>>> optimize(lower(create_schedule([x.cast(dtypes.int32)])[0].ast), Dev()).threaded is not None
True
"""
from __future__ import annotations
from compiler.lower import LoweredKernel
from compiler.uop import Ops
from compiler.view import prod

THREAD_MIN_WORK = 1 << 16   # below this many inner iterations a second thread costs more than it saves

def work(k: LoweredKernel) -> int:
  return prod(r.src[0].arg for r in k.global_ranges) * max(1, prod(r.src[0].arg for r in k.reduce_ranges()))

def optimize(k: LoweredKernel, device) -> LoweredKernel:
  ncores = getattr(device, "ncores", 1)
  if ncores > 1 and k.global_ranges and work(k) >= THREAD_MIN_WORK and k.global_ranges[0].src[0].arg >= 2:
    k.threaded = k.global_ranges[0]
  return k
