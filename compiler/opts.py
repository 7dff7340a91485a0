"""Kernel optimizations: pick how a lowered kernel's loops are split, unrolled and vectorized.

Every opt is a substitution of a RANGE by an expression of new ranges (and LANE, the vector lane), so a kernel
stays correct by construction; `optimize(kernel, device)` applies the default hand-written heuristic:
  - matmul-like kernels (a reduction with two output loops, one of them contiguous in some input) get a
    register tile: UPCAST_I rows unrolled x (VEC_UNROLL x W) columns as W-wide vectors, accumulators in
    registers, the reduction loop innermost;
  - reductions over a contiguous axis keep VEC_ACC vector accumulators and sum their lanes at the end;
  - big kernels split their outermost loop across the CPU cores.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.lower import lower
>>> from compiler.dtypes import dtypes
>>> x = LazyBuffer.empty((1 << 20,), dtypes.float32, "CPU"); x.buffer = object()
>>> class Dev: ncores, simd_bytes = 2, 32
>>> optimize(lower(create_schedule([x.cast(dtypes.int32)])[0].ast), Dev()).threaded is not None
True
"""
from __future__ import annotations
import itertools, os
from compiler.dtypes import dtypes
from compiler.lower import LoweredKernel
from compiler.uop import UOp, Ops, substitute, simplify
from compiler.vectorize import vectorize
from compiler.view import prod

THREAD_MIN_WORK = 1 << 16   # below this many inner iterations a second thread costs more than it saves
UPCAST_I, VEC_UNROLL, VEC_ACC = 4, 2, 4

def work(k: LoweredKernel) -> int:
  return prod(r.src[0].arg for r in k.global_ranges) * max(1, prod(r.src[0].arg for r in k.reduce_ranges()))

_range_ids = itertools.count(1000)
def _new_range(size: int, kind: str) -> UOp:
  return UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, size),), (next(_range_ids), kind))

def _loads(k: LoweredKernel) -> list[UOp]: return [u for u in k.sink.toposort() if u.op is Ops.LOAD]

def _stride(idx: UOp, r: UOp) -> int | None:
  """How far idx moves when r grows by one (None when not affine in r)."""
  z, o = UOp.const(dtypes.int32, 0), UOp.const(dtypes.int32, 1)
  two = UOp.const(dtypes.int32, 2)
  a, b, c = (simplify(substitute(idx, {r: v})) for v in (z, o, two))
  d1, d2 = simplify(b - a), simplify(c - b)
  return d1.arg if d1.op is Ops.CONST and d2 is d1 else None

def apply_tile(k: LoweredKernel, ri: UOp | None, ui: int, rj: UOp, w: int, uj: int) -> LoweredKernel:
  """Output loop ri unrolled by ui, rj by uj vectors of w lanes."""
  lane = UOp(Ops.LANE, dtypes.int32, (), w)
  rj_o = _new_range(rj.src[0].arg // (w * uj), "global")
  ri_o = _new_range(ri.src[0].arg // ui, "global") if ri is not None else None
  stores = []
  for c in range(ui if ri is not None else 1):
    for u in range(uj):
      m = {rj: rj_o * (w * uj) + u * w + lane}
      if ri is not None: m[ri] = ri_o * ui + c
      stores.extend(substitute(s, m) for s in k.sink.src)
  sink = vectorize(UOp(Ops.SINK, None, tuple(stores)), lane)
  k.global_ranges = [rj_o if r is rj else ri_o if r is ri else r for r in k.global_ranges]
  k.sink = sink
  k.applied_opts.append(("TILE", ri.arg[0] if ri is not None else None, ui, rj.arg[0], w, uj))
  return k

def apply_reduce_vectors(k: LoweredKernel, red: UOp, r: UOp, w: int, acc: int) -> LoweredKernel:
  """REDUCE over the contiguous range r: acc vector accumulators of w lanes, folded after the loop."""
  lane = UOp(Ops.LANE, dtypes.int32, (), w)
  ro = _new_range(r.src[0].arg // (w * acc), "reduce")
  others = tuple(x for x in red.src[1:] if x is not r)
  parts = [UOp(Ops.REDUCE, red.dtype, (substitute(red.src[0], {r: ro * (w * acc) + a * w + lane}),) + others + (ro,), red.arg)
           for a in range(acc)]
  total = parts[0]
  for p in parts[1:]: total = UOp(red.arg, red.dtype, (total, p))
  new = UOp(Ops.REDUCE, red.dtype, (total, lane), red.arg)
  k.sink = vectorize(substitute(k.sink, {red: new}), lane)
  k.applied_opts.append(("REDUCE_VEC", r.arg[0], w, acc))
  return k

def _matmul_tile(k: LoweredKernel, wmax: int) -> bool:
  if len(k.global_ranges) < 2 or not k.reduce_ranges(): return False
  loads = _loads(k)
  for rj in reversed(k.global_ranges):
    n = rj.src[0].arg
    # the widest vector that divides the row (narrower vectors still beat scalars)
    w = next((w for w in (wmax, wmax // 2, wmax // 4) if w >= 4 and n % w == 0), None)
    if w is None: continue
    uj = VEC_UNROLL if n % (w * VEC_UNROLL) == 0 else 1
    if n % (w * uj) or not any(_stride(ld.src[1], rj) == 1 for ld in loads): continue
    # the row loop: one whose contiguous-in-rj load does not move with it (so its loads are shared)
    for ri in k.global_ranges:
      if ri is rj or ri.src[0].arg % UPCAST_I: continue
      if any(_stride(ld.src[1], rj) == 1 and _stride(ld.src[1], ri) == 0 for ld in loads):
        apply_tile(k, ri, UPCAST_I, rj, w, uj)
        return True
  return False

def _reduce_vectors(k: LoweredKernel, wmax: int) -> bool:
  reds = [u for u in k.sink.toposort() if u.op is Ops.REDUCE and all(r.op is Ops.RANGE for r in u.src[1:])]
  if len(reds) != 1 or not reds[0].dtype.is_float or reds[0].arg not in (Ops.ADD, Ops.MAX): return False
  red, r = reds[0], reds[0].src[-1]   # the innermost reduce loop
  n = r.src[0].arg
  w = next((w for w in (wmax, wmax // 2) if w >= 4 and n % w == 0), None)
  if w is None or not any(_stride(ld.src[1], r) == 1 for ld in _loads(k)): return False
  acc = VEC_ACC if n % (w * VEC_ACC) == 0 else 1
  apply_reduce_vectors(k, red, r, w, acc)
  return True

def _elementwise_vectors(k: LoweredKernel, w: int) -> bool:
  """An elementwise kernel whose innermost loop is contiguous in its store: w lanes per iteration."""
  if not k.global_ranges or k.reduce_ranges() or len(k.sink.src) != 1: return False
  rj = k.global_ranges[-1]
  if rj.src[0].arg % w or _stride(k.sink.src[0].src[1], rj) != 1: return False
  apply_tile(k, None, 1, rj, w, 1)
  return True

def optimize(k: LoweredKernel, device) -> LoweredKernel:
  """The default opts for `device` (uses device.ncores and device.simd_bytes when it has them)."""
  if getattr(device, "renderer", "") == "ptx":   # GPUs have their own opts (imported here: opts_gpu imports this module)
    from compiler.opts_gpu import optimize_gpu
    return optimize_gpu(k, device)
  if os.environ.get("NOOPT", "0") != "1":
    w = max(1, getattr(device, "simd_bytes", 0) // 4)
    if w > 1 and all(dt.scalar is dtypes.float32 for dt in k.buf_dtypes):
      _matmul_tile(k, w) or _reduce_vectors(k, w) or _elementwise_vectors(k, w)
  ncores = getattr(device, "ncores", 1)
  if ncores > 1 and k.global_ranges and work(k) >= THREAD_MIN_WORK and k.global_ranges[0].src[0].arg >= 2:
    k.threaded = k.global_ranges[0]
  return k

PORTABLE_ACC = (8, 4, 2)   # scalar accumulators per reduction, largest that divides the loop (-O3 packs them into vectors)

def apply_reduce_unroll(k: LoweredKernel, red: UOp, r: UOp, acc: int) -> UOp:
  """REDUCE over range r as `acc` interleaved scalar accumulators (r = ro*acc + a), folded after the loop; returns ro."""
  ro = _new_range(r.src[0].arg // acc, "reduce")
  rngs = tuple(ro if x is r else x for x in red.src[1:])
  parts = [UOp(Ops.REDUCE, red.dtype, (substitute(red.src[0], {r: ro * acc + a}),) + rngs, red.arg) for a in range(acc)]
  total = parts[0]
  for p in parts[1:]: total = UOp(red.arg, red.dtype, (total, p))
  k.sink = substitute(k.sink, {red: total})
  k.applied_opts.append(("REDUCE_UNROLL", r.arg[0], acc))
  return ro

def apply_output_unroll(k: LoweredKernel, g: UOp, u: int) -> LoweredKernel:
  """Output loop g unrolled by u (g = go*u + a): u outputs per iteration, each with its own accumulator, sharing
  every value that does not depend on g (hash-consing merges the copies)."""
  go = _new_range(g.src[0].arg // u, "global")
  k.sink = UOp(Ops.SINK, None, tuple(substitute(s, {g: go * u + a}) for a in range(u) for s in k.sink.src))
  k.global_ranges = [go if r is g else r for r in k.global_ranges]
  k.applied_opts.append(("UNROLL_OUT", g.arg[0], u))
  return k

def optimize_portable(k: LoweredKernel) -> LoweredKernel:
  """Opts for exported C99 (frontend.export): no vector types and no threads, so the code builds anywhere, and
  reductions stay loops with at most 8 scalar accumulators (never a fully unrolled body of hundreds of live scalars).
  A float ADD/MAX reduction over a contiguous range gets interleaved accumulators (independent chains that -O3 packs
  into vectors, as for a matrix-vector product). Otherwise (a convolution) an output loop is unrolled so that the
  expensive loads (gated, non-affine) are made once per iteration and shared by several outputs.

  >>> from compiler.lazy import LazyBuffer
  >>> from compiler.schedule import create_schedule
  >>> from compiler.lower import lower
  >>> x = LazyBuffer.empty((4, 64), dtypes.float32, "CPU"); x.buffer = object()
  >>> optimize_portable(lower(create_schedule([x.r(Ops.ADD, (1,))])[0].ast)).applied_opts
  [('REDUCE_UNROLL', 1, 8)]
  """
  if os.environ.get("NOOPT", "0") == "1": return k
  done: set[UOp] = set()   # ranges of reductions already handled (including the ones opts made)
  while True:
    red = next((u for u in k.sink.toposort() if u.op is Ops.REDUCE and len(u.src) > 1 and all(x.op is Ops.RANGE for x in u.src[1:])
                and not done.intersection(u.src[1:])), None)
    if red is None: break
    done.update(red.src[1:])
    if not red.dtype.is_float or red.arg not in (Ops.ADD, Ops.MAX): continue
    loads = _loads(k)
    # innermost contiguous range first
    rngs = [x for x in reversed(red.src[1:]) if any(_stride(ld.src[1], x) == 1 for ld in loads)]
    r, acc = next(((x, a) for x in rngs for a in PORTABLE_ACC if x.src[0].arg % a == 0 and x.src[0].arg >= 2 * a), (None, 0))
    if r is not None: done.add(apply_reduce_unroll(k, red, r, acc))
  if k.applied_opts or not (rr := k.reduce_ranges()): return k
  inner = [ld for ld in _loads(k) if any(_stride(ld.src[1], r) != 0 for r in rr)]   # the loads of the reduction's body
  def cheap(g: UOp) -> bool:   # every load that moves with g is a plain affine one: the costly ones get shared
    return all(len(ld.src) == 2 and _stride(ld.src[1], g) is not None for ld in inner if _stride(ld.src[1], g) != 0)
  for g in sorted(reversed(k.global_ranges), key=lambda g: not cheap(g)):
    u = next((a for a in PORTABLE_ACC if g.src[0].arg % a == 0), None)
    if u is not None and any(_stride(ld.src[1], g) == 0 for ld in inner) and any(_stride(ld.src[1], g) != 0 for ld in inner):
      return apply_output_unroll(k, g, u)
  return k
