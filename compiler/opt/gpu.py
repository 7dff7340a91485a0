"""Kernel opts for GPUs (PTX devices): each thread computes W neighbouring outputs, so its memory accesses can be vectors.

`optimize_gpu(kernel, device)` upcasts the innermost output loop r (size n): r = r_o*W + LANE with W = 4, else 2, the
first that divides n. compiler.vectorize then turns what depends on LANE into W-wide values (vector LOAD/STORE where
the index moves by one element per lane, VECTORIZE/GEP of per-lane scalars otherwise). The PTX renderer emits
ld/st.global.v2/v4 only where it can prove the alignment and renders every other vector op lane by lane. One thread
now covers W outputs, so the launch shrinks: r is replaced by r_o in k.global_ranges (or dropped when n == W).

Upcast only pays when some access gets wider: an elementwise kernel needs a load or its store contiguous in r; a kernel
with a reduction needs a contiguous load (the loop body runs many times, its single store once per output), e.g. the
columns of B in A @ B (each thread reads one A value per step and shares it across its W columns).

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.lower import lower
>>> from compiler.dtypes import dtypes
>>> x = LazyBuffer.empty((8, 1024), dtypes.float32, "PTXEMU"); x.buffer = object()
>>> from compiler.target import Target
>>> k = optimize_gpu(lower(create_schedule([x.alu(Ops.ADD, x)])[0].ast), Target("PTXEMU", "ptx", arch="sm_90", gpu=True))
>>> k.applied_opts, [r.src[0].arg for r in k.global_ranges]
([('VECTOR', 1, 4)], [8, 256])
"""
from __future__ import annotations
from compiler.dtypes import dtypes
from compiler.lower import LoweredKernel
from compiler.uop import UOp, Ops, substitute
from compiler.vectorize import vectorize
from compiler.opt.apply import kernel_loads, stride_of
from compiler.opt.tc import tensor_cores
from compiler.target import Target
from compiler.settings import noopt

GPU_UPCAST = (4, 2)   # lanes per thread, widest first: 4 x 32-bit is the widest (16-byte) PTX vector access

def apply_upcast(k: LoweredKernel, r: UOp, w: int) -> LoweredKernel:
  """Output loop r computed w lanes per thread: r = r_o*w + LANE, then vectorized; r_o replaces r in the launch."""
  n = r.src[0].arg
  if n % w: raise ValueError(f"apply_upcast: loop r{r.arg[0]} of size {n} does not split into {w} lanes")
  lane = UOp(Ops.LANE, dtypes.int32, (), w)
  ro = k.new_range(n // w, "global") if n > w else None
  k.sink = vectorize(substitute(k.sink, {r: ro * w + lane if ro is not None else lane}), lane)
  k.global_ranges = [x for x in (ro if g is r else g for g in k.global_ranges) if x is not None]
  k.applied_opts.append(("VECTOR", r.arg[0], w))   # the same step as Opt("VECTOR")
  return k

def optimize_gpu(k: LoweredKernel, device: Target) -> LoweredKernel:
  """The default GPU opts: upcast the innermost output loop when that makes a load (or an elementwise store) contiguous
  across the lanes of a thread. NOOPT=1 leaves the kernel alone (one output per thread)."""
  if noopt() or not k.global_ranges: return k
  if tensor_cores(k, device) is not None: return k   # half matmuls on sm_80+: mma.sync tiles (compiler/opt/tc.py)
  r = k.global_ranges[-1]
  w = next((w for w in GPU_UPCAST if r.src[0].arg % w == 0), None)
  if w is None: return k
  idxs = [ld.src[1] for ld in kernel_loads(k)]
  if not k.reduce_ranges(): idxs += [s.src[1] for s in k.sink.src if s.op is Ops.STORE]
  if any(stride_of(i, r) == 1 for i in idxs): apply_upcast(k, r, w)
  return k
