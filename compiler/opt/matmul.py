"""Default opts for a matrix product whose operands were packed (compiler/pack.py).

The kernel's SINK carries ("packed_matmul", MR, NR, JB). Its two output loops i (rows, a multiple of MR) and j (columns,
a multiple of NR) become the register tile of the packed layout: MR rows unrolled x NR columns as NR/W vectors of W
lanes, so each step of the reduction loop reads one contiguous run of MR floats of PA (broadcast) and NR floats of PB,
and keeps MR*NR/W accumulators in registers (a small B read in place, compiler/pack.py b_in_place: NR floats of one of
its rows; a small A beside it, a_in_place: one float of each of MR rows K apart). The loops around the tile are ordered for the caches:

  for jb in N/(NR*JB)          split across the cores
    for it in M/MR             PA's tile (K*MR floats) is read once per jb block...
      for jj in JB             ...and used by JB column tiles, whose PB panels (K*NR floats each) stay in L2
        for k in K: tile step

An A read in place can't have padded rows (they would lie past its end): when MR does not divide M (8 lanes: 512 rows
and a 6-row tile), the row loop runs in units of u = gcd(M, MR) rows, MR/u units a tile, and the units left over are
one smaller tile after the it loop, inside the same jb block (so on the same core, beside the B panel it reads).

In the tile step, the first load of each cache line of the two packed streams also prefetches PREFETCH_AHEAD bytes on
(compiler/prefetch.py): the hardware prefetchers alone leave the A stream late once K reaches 2048. (An A read in place
is MR short streams, one per row: left to the hardware.)

>>> from compiler.lazy import LazyBuffer
>>> from compiler.dtypes import dtypes
>>> from compiler.uop import Ops
>>> from compiler.schedule import create_schedule
>>> from compiler.lower import lower
>>> from compiler.pack import pack_matmuls
>>> a, b = (LazyBuffer.empty((256, 256), dtypes.float32, "CPU") for _ in range(2))
>>> a.buffer = b.buffer = object()
>>> mm = a.reshape((256, 1, 256)).expand((256, 256, 256)).alu(Ops.MUL, b.permute((1, 0)).reshape((1, 256, 256)).expand((256, 256, 256))).r(Ops.ADD, (2,))
>>> from compiler.target import Target
>>> k = packed_matmul_tile(lower(pack_matmuls(create_schedule([mm]), lambda device: 16)[-1].ast), Target("CPU", "c", ncores=2, simd_bytes=64))
>>> [r.src[0].arg for r in k.global_ranges], k.threaded is k.global_ranges[0]   # A, B in place: 256 = 32 tiles of 8 rows
([2, 32, 4], True)
"""
from __future__ import annotations
import math
from compiler.lower import LoweredKernel
from compiler.opt.base import OptError, copy_kernel
from compiler.dtypes import dtypes
from compiler.opt.apply import apply_output_unroll, apply_split, apply_tile, check_pressure, stride_of
from compiler.opt.peel import split_tail, unroll_tail
from compiler.prefetch import prefetched
from compiler.target import Target
from compiler.uop import UOp, Ops, simplify, substitute

def packed_matmul_tile(k: LoweredKernel, device: Target, thread: bool = True) -> LoweredKernel | None:
  """The tile and loop order above for a packed product (None for any other kernel, or when the device's vectors
  or registers don't fit the packing); `thread` splits the outer loop across the cores."""
  hint = k.sink.arg
  nb = len(k.global_ranges) - 2   # 1: a batch of products (compiler/pack_batch.py), its loop outside everything
  if not (isinstance(hint, tuple) and hint and hint[0] == "packed_matmul") or k.applied_opts or nb not in (0, 1): return None
  _, mr, nr, jb = hint
  lanes = device.simd_bytes // 4
  ri, rj = k.global_ranges[nb:]
  m = ri.src[0].arg
  # rows MR does not divide (an A read in place on 8 lanes, compiler/pack.py a_in_place: no padded rows past its end)
  # are tiled in units of u rows: MR/u units a tile, the units left over as one smaller tile inside each column block
  u = math.gcd(m, mr)
  if lanes < 4 or nr % lanes or rj.src[0].arg % nr or (u != mr and (nb or m < 2 * mr or lanes != 8)): return None
  k = apply_tile(copy_kernel(k), ri, u, rj, lanes, nr // lanes)   # ranges: [it, jt]
  k.sink = simplify(k.sink)   # (it*MR + c) // MR -> it and % MR -> c: the packed index becomes affine in the new loops
  g = k.global_ranges
  if jb > 1 and g[nb + 1].src[0].arg > jb: apply_split(k, nb + 1, jb)
  # [(batch,) jb, it, jj]; with a row tail and no jb blocks (jb = 1: 125 column tiles), [jt, it]: the tail then hangs
  # inside the column loop, which the cores split
  if len(g) == nb + 3 or u != mr: g[nb], g[nb + 1] = g[nb + 1], g[nb]
  k.sink = prefetch_streams(k.sink, k.reduce_ranges())   # (before the cut below copies the reduction loop)
  try:
    if u != mr: k = _rows_with_tail(k, nb + 1, mr // u)
    check_pressure(k, device)
  except OptError: return None
  if thread and device.ncores > 1 and k.global_ranges[0].src[0].arg >= 2 and all(d > 0 for d in k.depths): k.threaded = k.global_ranges[0]
  return k

def _rows_with_tail(k: LoweredKernel, i: int, t: int) -> LoweredKernel:
  """Row loop i (units of u rows) as tiles of t units and, inside the same column block, the units left over as one
  tile (split_tail, then unroll_tail: 512 rows as 85 tiles of 6 and one of 2, which no loop of its own holds)."""
  k = unroll_tail(split_tail(k, k.global_ranges[i], t))
  k = apply_output_unroll(copy_kernel(k), k.global_ranges[i], t)
  k.sink = UOp(Ops.SINK, None, tuple(dict.fromkeys(k.sink.src)))   # (the tail's stores, copied by the unroll: once)
  return k

# how far ahead the tile's operand streams are prefetched. Measured on an AVX-512 Xeon (2 cores, 2048x2048, one core's
# half of the product, thread CPU time, minimum of 45 runs): no prefetch 74% of the core's FMA peak; packed A alone
# 1.5 KiB ahead 85%, 12 KiB ahead 88%; A 3-12 KiB and B 2-8 KiB ahead 88-91%. At 1024 (93% without) it changes
# little. 4 KiB on both streams sits in the flat part of that range.
PREFETCH_AHEAD = 4096
LINE = 64   # bytes per cache line on the x86 and ARM cores we target: one prefetch per line a step reads

def prefetch_streams(sink: UOp, reds: list[UOp]) -> UOp:
  """Every load of the reduction loop that starts a new cache line of its buffer's stream also prefetches
  PREFETCH_AHEAD bytes further on (compiler/prefetch.py); the other loads of that line are left alone."""
  if len(reds) != 1: return sink
  r = reds[0]
  by_buf: dict[UOp, list[tuple[int, UOp, UOp]]] = {}
  for u in sink.toposort():
    if u.op is Ops.LOAD and len(u.src) == 2 and (st := stride_of(u.src[1], r)):
      base = simplify(substitute(u.src[1], {r: UOp.const(dtypes.int32, 0)}))
      by_buf.setdefault(u.src[0], []).append((st, base, u))
  subs: dict[UOp, UOp] = {}
  for loads in by_buf.values():
    offs = [(simplify(base - loads[0][1]), u) for _, base, u in loads]   # element offsets within one step
    if any(d.op is not Ops.CONST for d, _ in offs): continue   # (not fixed offsets of one stream: left to the hardware)
    lo = min(d.arg for d, _ in offs)
    # loads further apart than one step's stride are separate streams (the rows of an A read in place, K floats apart,
    # each read one float per step): a hint per load and step would ask for each line 64/4 times, and the hint's
    # distance would land in another row; the hardware follows such short sequential streams
    if max(d.arg for d, _ in offs) - lo >= abs(loads[0][0]): continue
    subs.update((u, prefetched(u, PREFETCH_AHEAD)) for d, u in offs if (d.arg - lo) * u.dtype.scalar.itemsize % LINE == 0)
  return substitute(sink, subs) if subs else sink
