"""Kernel optimizations: pick how a lowered kernel's loops are split, unrolled and vectorized.

Every opt is a substitution of a RANGE by an expression of new ranges (and LANE, the vector lane), so a kernel
stays correct by construction; `optimize(kernel, device)` applies the default hand-written heuristic:
  - big float32 products come with their operands packed (compiler/pack.py) and get the matching register tile and
    cache-blocked loop order (compiler/opts_matmul.py);
  - other matmul-like kernels (a reduction with two output loops, one of them contiguous in some input) get a
    register tile: UPCAST_I rows unrolled x (VEC_UNROLL x W) columns as W-wide vectors, accumulators in
    registers, the reduction loop innermost;
  - reductions over a contiguous axis keep VEC_ACC vector accumulators and sum their lanes at the end;
  - big kernels split their outermost loop across the CPU cores;
  - (expressed as Opt sequences, below) more tile rows while the register budget allows (_more_rows), padded
    convolutions tiled so inner vectors need no bound checks and their row loop peeled (compiler/opts_conv.py),
    odd sizes cut at the last multiple of the tile (_odd_tile).
The explicit opts (`Opt(kind, axis, amount)`, `apply_opt`, `candidate_opts`) are what BEAM search enumerates
(compiler/beam.py); each is checked for legality and register pressure (compiler/pressure.py).

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
from dataclasses import dataclass, replace as dc_replace
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

def number_ranges_after(k: LoweredKernel) -> None:
  """New ranges get ids after k's largest: the same opts on the same kernel then make the same source in any process
  (the C object cache is keyed by the source, and BEAM's workers render what the engine renders later)."""
  global _range_ids
  _range_ids = itertools.count(1 + max((u.arg[0] for u in k.sink.toposort() if u.op is Ops.RANGE), default=0))

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

def apply_split(k: LoweredKernel, axis: int, n: int) -> LoweredKernel:
  """Output loop `axis` (size s) as an outer loop of s/n and an inner one of n right inside it: g = go*n + gi."""
  g = k.global_ranges[axis]
  go, gi = _new_range(g.src[0].arg // n, "global"), _new_range(n, "global")
  k.sink = substitute(k.sink, {g: go * n + gi})
  k.global_ranges[axis:axis + 1] = [go, gi]
  k.applied_opts.append(("SPLIT", g.arg[0], n))
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

def _fits(device, make) -> bool:
  """Whether the kernel make() builds (from copies) fits the device's vector registers (True without a device). The
  range ids the trial takes are given back, so the kernel finally built gets the same ones as without the trial."""
  global _range_ids
  if device is None: return True
  start = next(_range_ids)
  try: check_pressure(make(), device)
  except OptError: return False
  finally: _range_ids = itertools.count(start)
  return True

def _matmul_tile(k: LoweredKernel, wmax: int, device=None) -> bool:
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
        # the biggest tile whose accumulators and loads fit the registers (4 x 2 vectors, else 4 x 1, 2 x 1)
        tiles = [t for t in dict.fromkeys([(UPCAST_I, uj), (UPCAST_I, 1), (UPCAST_I // 2, 1)]) if ri.src[0].arg % t[0] == 0]
        ui, u = next((t for t in tiles if _fits(device, lambda: apply_tile(copy_kernel(k), ri, t[0], rj, w, t[1]))), tiles[-1])
        apply_tile(k, ri, ui, rj, w, u)
        return True
  return False

def _reduce_vectors(k: LoweredKernel, wmax: int, device=None) -> bool:
  reds = [u for u in k.sink.toposort() if u.op is Ops.REDUCE and all(r.op is Ops.RANGE for r in u.src[1:])]
  if len(reds) != 1 or not reds[0].dtype.is_float or reds[0].arg not in (Ops.ADD, Ops.MAX): return False
  red, r = reds[0], reds[0].src[-1]   # the innermost reduce loop
  n = r.src[0].arg
  w = next((w for w in (wmax, wmax // 2) if w >= 4 and n % w == 0), None)
  if w is None or not any(_stride(ld.src[1], r) == 1 for ld in _loads(k)): return False
  # the most accumulators (up to VEC_ACC) whose loop body fits the registers (an exp per accumulator takes several)
  accs = [a for a in (VEC_ACC, VEC_ACC // 2) if a > 1 and n % (w * a) == 0] + [1]
  acc = next((a for a in accs if a == 1 or _fits(device, lambda: apply_reduce_vectors(copy_kernel(k), red, r, w, a))), 1)
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
  number_ranges_after(k)
  if getattr(device, "renderer", "") == "ptx":   # GPUs have their own opts (imported here: opts_gpu imports this module)
    from compiler.opts_gpu import optimize_gpu
    return optimize_gpu(k, device)
  if os.environ.get("NOOPT", "0") != "1":
    w = max(1, getattr(device, "simd_bytes", 0) // 4)
    if w > 1 and all(dt.scalar is dtypes.float32 for dt in k.buf_dtypes):
      before = list(k.global_ranges)
      from compiler.opts_conv import conv_tile   # imported here: opts_conv/opts_matmul build on this module's opts
      from compiler.opts_matmul import packed_matmul_tile
      if (kc := packed_matmul_tile(k, device)) is not None: return kc
      if (kc := conv_tile(k, w, device)) is not None: k = kc
      elif _matmul_tile(k, w, device): k = _more_rows(k, before, device)
      elif (kc := _odd_tile(k, w, device)) is not None: k = kc
      else: _reduce_vectors(k, w, device) or _elementwise_vectors(k, w)
  ncores = getattr(device, "ncores", 1)
  if ncores > 1 and k.global_ranges and work(k) >= THREAD_MIN_WORK and k.global_ranges[0].src[0].arg >= 2 and 0 not in (getattr(k, "depths", None) or []):
    k.threaded = k.global_ranges[0]
  if os.environ.get("NOOPT", "0") != "1":
    from compiler.opts_conv import peel_default
    k = peel_default(k, device)
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

# ***** explicit opts: one step each, checked for legality, what BEAM search (compiler/beam.py) enumerates *****
# An Opt names an axis by its position: `axis` indexes k.global_ranges for UPCAST/VECTOR/THREAD/PEEL and
# k.reduce_ranges() for REDUCE_VECTOR/REDUCE_UNROLL/UNROLL, as they are *when the opt is applied* (each opt
# renumbers the ranges it replaces in place, so a sequence of opts replays identically on the same kernel).

class OptError(ValueError):
  """An opt that is not legal for the kernel at hand (the message names the opt, the axis and the sizes)."""

@dataclass(frozen=True)
class Opt:
  """One kernel transformation: kind, the axis it acts on, and an amount.

  DEFAULT          the hand-written heuristic's vectorization (conv / matmul tile, vector reduction, vector elementwise)
  UPCAST  g, n     output loop g unrolled n times (n outputs per iteration, shared loads merge)
  VECTOR  g, w     output loop g as w-lane vectors
  THREAD  g        output loop g split across the CPU cores
  PEEL    g        output loop g cut where comparisons against its index change value (compiler/peel.py)
  SWAP    g, h     output loops g and h exchange places in the loop nest (g < h): which operand stays in cache
  SPLIT   g, n     output loop g as two loops, an outer one and n iterations inside it (with SWAP: cache blocking)
  PAD     g, n     output loop g cut at its last multiple of n, the remainder run as a loop of its own, so tiles of n
                   apply to odd sizes (the effect of padding, with no access past the buffers; CPU only)
  REDUCE_VECTOR r, w   reduction loop r with a w-lane vector accumulator (lanes summed after the loop)
  REDUCE_UNROLL r, n   reduction loop r with n independent accumulators
  UNROLL  r, n     reduction loop r unrolled n times into one accumulator (n == size: the loop disappears)

  >>> from compiler.lazy import LazyBuffer
  >>> from compiler.schedule import create_schedule
  >>> from compiler.lower import lower
  >>> x = LazyBuffer.empty((8, 64), dtypes.float32, "CPU"); x.buffer = object()
  >>> class Dev: ncores, simd_bytes, renderer = 2, 32, "c"
  >>> k = apply_opts(lower(create_schedule([x.r(Ops.ADD, (1,))])[0].ast), [Opt("REDUCE_VECTOR", 0, 8), Opt("REDUCE_UNROLL", 0, 2)], Dev())
  >>> [r.src[0].arg for r in k.reduce_ranges()]
  [4]
  """
  kind: str
  axis: int | None = None
  amount: int | None = None
  def __repr__(self) -> str: return f"Opt({self.kind!r}, {self.axis}, {self.amount})"
  def to_json(self) -> list: return [self.kind, self.axis, self.amount]
  @staticmethod
  def from_json(x: list) -> "Opt": return Opt(x[0], x[1], x[2])

OPT_KINDS = ("DEFAULT", "UPCAST", "VECTOR", "THREAD", "PEEL", "PAD", "SWAP", "SPLIT", "REDUCE_VECTOR", "REDUCE_UNROLL", "UNROLL")
MAX_STORES = 256       # more unrolled outputs than this only makes compile time explode
MAX_NODES = 40000      # nor a graph this big

def copy_kernel(k: LoweredKernel) -> LoweredKernel:
  """A copy whose lists can be changed without touching `k` (the UOp graph is immutable and shared)."""
  return dc_replace(k, global_ranges=list(k.global_ranges), applied_opts=list(k.applied_opts))

def has_vectors(k: LoweredKernel) -> bool:
  return any(u.dtype is not None and u.dtype.count > 1 for u in k.sink.toposort())

def _reduces_over(k: LoweredKernel, r: UOp) -> list[UOp]:
  return [u for u in k.sink.toposort() if u.op is Ops.REDUCE and r in u.src[1:]]

def _fold(op: Ops, dt, vals: list[UOp]) -> UOp:
  out = vals[0]
  for v in vals[1:]: out = UOp(op, dt, (out, v))
  return out

def apply_reduce_split(k: LoweredKernel, r: UOp, amt: int, separate: bool) -> LoweredKernel:
  """Every REDUCE over range r gets r = ro*amt + a: `separate` keeps amt accumulators (folded after the loop),
  else the amt values are combined inside one accumulator's update (a plain unroll). amt == size drops the loop."""
  n = r.src[0].arg
  ro = _new_range(n // amt, "reduce") if n > amt else None
  m: dict[UOp, UOp] = {}
  for red in _reduces_over(k, r):
    rngs = tuple(x for x in (ro if x is r else x for x in red.src[1:]) if x is not None)
    vals = [substitute(red.src[0], {r: ro * amt + a if ro is not None else UOp.const(dtypes.int32, a)}) for a in range(amt)]
    if separate: m[red] = _fold(red.arg, red.dtype, [UOp(Ops.REDUCE, red.dtype, (v,) + rngs, red.arg) if rngs else v for v in vals])
    else:
      body = _fold(red.arg, red.dtype, vals)
      m[red] = UOp(Ops.REDUCE, red.dtype, (body,) + rngs, red.arg) if rngs else body
  k.sink = substitute(k.sink, m)
  return k

def _replace_global(k: LoweredKernel, before: list[UOp]) -> None:
  # keep k.threaded pointing at the range that replaced it; drop size-1 loops an opt left behind
  for old, new in zip(before, k.global_ranges):
    if k.threaded is old and new is not old: k.threaded = new
  for g in list(k.global_ranges):
    if g.src[0].arg == 1:
      k.sink = substitute(k.sink, {g: UOp.const(dtypes.int32, 0)})
      pos = k.global_ranges.index(g)
      k.global_ranges.remove(g)
      if k.threaded is g: k.threaded = None
      if getattr(k, "depths", None): k.depths = [d - 1 if d > pos else d for d in k.depths]   # chains hung below it move up

def _check(cond: bool, opt: Opt, k: LoweredKernel, why: str) -> None:
  if not cond: raise OptError(f"{opt} on kernel {k.name}: {why}")

def apply_opt(k: LoweredKernel, opt: Opt, device) -> LoweredKernel:
  """A new kernel: `k` with `opt` applied (k itself is not changed). Raises OptError when the opt is not legal:
  axis out of range, amount not dividing the loop, vectors on a renderer or dtype without them, a second vectorization,
  a second thread split, too many unrolled outputs, or (CPU) more live vector values than the target's registers."""
  w_max = max(1, getattr(device, "simd_bytes", 0) // 4)
  c_like = getattr(device, "renderer", "c") == "c"
  k = copy_kernel(k)
  number_ranges_after(k)
  before = list(k.global_ranges)
  kind, axis, amt = opt.kind, opt.axis, opt.amount
  _check(kind in OPT_KINDS, opt, k, f"unknown opt kind (choose from {', '.join(OPT_KINDS)})")
  if kind == "DEFAULT":
    _check(not k.applied_opts and k.threaded is None, opt, k, "the default heuristic applies only to an unoptimized kernel")
    _check(w_max > 1 and c_like and all(dt.scalar is dtypes.float32 for dt in k.buf_dtypes), opt, k, "no float32 vectors on this device/kernel")
    # (not _more_rows: BEAM reaches 8, 12 or 16 rows from the 4-row tile by UPCAST, and other shapes too)
    from compiler.opts_conv import conv_tile
    from compiler.opts_matmul import packed_matmul_tile
    if (kc := packed_matmul_tile(k, device, thread=False)) is not None: k = kc
    elif (kc := conv_tile(k, w_max, device)) is not None: k = kc
    elif not _matmul_tile(k, w_max, device): _check(_reduce_vectors(k, w_max, device) or _elementwise_vectors(k, w_max), opt, k, "the heuristic finds nothing to vectorize")
  elif kind == "SWAP":
    gr = k.global_ranges
    _check(axis is not None and amt is not None and 0 <= axis < amt < len(gr), opt, k, f"axes {axis}, {amt} out of range (kernel has {len(gr)} output loops)")
    _check(not getattr(k, "nests", None), opt, k, "loop chains hang at fixed depths of the output loops")
    gr[axis], gr[amt] = gr[amt], gr[axis]
    k.applied_opts.append(("SWAP", axis, amt))
  elif kind == "SPLIT":
    gr = k.global_ranges
    _check(axis is not None and 0 <= axis < len(gr), opt, k, f"axis out of range (kernel has {len(gr)} output loops)")
    n = gr[axis].src[0].arg
    _check(amt is not None and 1 < amt < n and n % amt == 0, opt, k, f"amount {amt} does not divide loop size {n} into two loops")
    _check(not getattr(k, "nests", None) and k.threaded is None, opt, k, "split before peeling and threading (they pin loop positions)")
    apply_split(k, axis, amt)
    before = list(k.global_ranges)   # (one loop became two: nothing below maps old loops to new ones by position)
  elif kind in ("UPCAST", "VECTOR", "THREAD", "PEEL", "PAD"):
    _check(axis is not None and 0 <= axis < len(k.global_ranges), opt, k, f"axis out of range (kernel has {len(k.global_ranges)} output loops)")
    g = k.global_ranges[axis]
    n = g.src[0].arg
    if kind == "PAD":
      from compiler.peel import split_tail
      _check(c_like, opt, k, "output loops are the grid on this device")
      _check(amt is not None and 1 < amt < n and n % amt, opt, k, f"amount {amt} for loop size {n} (needs a remainder)")
      k = split_tail(k, g, amt)
    elif kind == "THREAD":
      _check(getattr(device, "ncores", 1) > 1 and c_like, opt, k, "the device runs one thread per kernel")
      _check(k.threaded is None, opt, k, "the kernel is already split across cores")
      _check(all(d > axis for d in (getattr(k, "depths", None) or [])), opt, k, "a loop chain beside this loop would run on every core")
      _check(n >= 2, opt, k, f"loop of size {n}")
      k.threaded = g
    elif kind == "PEEL":
      from compiler.peel import peel_range
      _check(k.threaded is not g, opt, k, "the threaded loop is cut by the renderer, not peeled")
      k = peel_range(k, g)
    else:
      _check(amt is not None and 1 < amt <= n and n % amt == 0, opt, k, f"amount {amt} does not divide loop size {n}")
      if kind == "VECTOR":
        _check(c_like and w_max > 1 and amt in (4, 8, 16) and amt <= w_max, opt, k, f"{amt} lanes of float32 (device vectors hold {w_max})")
        _check(all(dt.scalar is dtypes.float32 for dt in k.buf_dtypes), opt, k, "vectors are float32-only")
        _check(not has_vectors(k), opt, k, "the kernel is already vectorized (one lane index per kernel)")
        apply_tile(k, None, 1, g, amt, 1)
        k.applied_opts[-1] = ("VECTOR", g.arg[0], amt)
      else:
        _check(len(k.sink.src) * amt <= MAX_STORES, opt, k, f"{len(k.sink.src) * amt} stores after the upcast (max {MAX_STORES})")
        apply_output_unroll(k, g, amt)
  else:
    rr = k.reduce_ranges()
    _check(axis is not None and 0 <= axis < len(rr), opt, k, f"axis out of range (kernel has {len(rr)} reduction loops)")
    r = rr[axis]
    n = r.src[0].arg
    _check(amt is not None and 1 < amt <= n and n % amt == 0, opt, k, f"amount {amt} does not divide reduction size {n}")
    reds = _reduces_over(k, r)
    _check(all(all(x.op is Ops.RANGE for x in red.src[1:]) for red in reds), opt, k, "a reduction over lanes")
    if kind == "REDUCE_VECTOR":
      _check(c_like and w_max > 1 and amt in (4, 8, 16) and amt <= w_max, opt, k, f"{amt} lanes of float32 (device vectors hold {w_max})")
      _check(not has_vectors(k) and all(dt.scalar is dtypes.float32 for dt in k.buf_dtypes), opt, k, "needs an unvectorized float32 kernel")
      _check(len(reds) == 1 and reds[0].dtype.is_float and reds[0].arg in (Ops.ADD, Ops.MAX), opt, k, "needs one float ADD/MAX reduction")
      apply_reduce_vectors(k, reds[0], r, amt, 1)
    else:
      _check(kind != "REDUCE_UNROLL" or all(red.arg in (Ops.ADD, Ops.MAX, Ops.MUL) for red in reds), opt, k, "unknown reduce op")
      _check(len(k.sink.toposort()) * (amt if kind == "UNROLL" else 1) <= MAX_NODES, opt, k, "the unrolled graph is too big")
      apply_reduce_split(k, r, amt, separate=kind == "REDUCE_UNROLL")
      k.applied_opts.append((kind, r.arg[0], amt))
  _replace_global(k, before)
  if c_like and kind != "THREAD": check_pressure(k, device, opt)
  return k

def check_pressure(k: LoweredKernel, device, opt: Opt | None = None) -> None:
  """Raise OptError when the kernel needs more vector registers than the target has (see compiler/pressure.py)."""
  from compiler.linearize import linearize
  from compiler.pressure import max_live, register_budget, SLACK, MAX_LIVE
  sb = max(16, getattr(device, "simd_bytes", 16))
  live, budget = max_live(linearize(k), sb), min(MAX_LIVE, register_budget(sb, getattr(device, "vector_regs", 0)) + SLACK)
  if live > budget: raise OptError(f"{opt or 'opts'} on kernel {k.name}: {live} live vector values exceed the register budget {budget}")

def apply_opts(k: LoweredKernel, opts, device) -> LoweredKernel:
  """`k` with every opt of `opts` applied in order (see Opt)."""
  for o in opts: k = apply_opt(k, o, device)
  return k

UPCAST_AMOUNTS, UNROLL_AMOUNTS, LANES = (2, 3, 4, 8), (2, 3, 4, 8), (4, 8, 16)

def candidate_opts(k: LoweredKernel, device) -> list[Opt]:
  """Every opt worth trying next on `k` (not yet checked: apply_opt may still refuse some)."""
  out = [Opt("DEFAULT")] if not k.applied_opts and k.threaded is None else []
  for i, g in enumerate(k.global_ranges):
    n = g.src[0].arg
    out += [Opt("UPCAST", i, a) for a in UPCAST_AMOUNTS if n % a == 0 and a < n]
    out += [Opt("VECTOR", i, w) for w in LANES if n % w == 0]
    out += [Opt("PAD", i, a) for a in (4, 8, 16, 32) if a < n and n % a and getattr(device, "renderer", "c") == "c"]
    if k.threaded is None and getattr(device, "ncores", 1) > 1: out.append(Opt("THREAD", i))
    if k.threaded is None and not getattr(k, "nests", None): out += [Opt("SPLIT", i, a) for a in (2, 4, 8) if n % a == 0 and a < n]
  if not getattr(k, "nests", None): out += [Opt("SWAP", 0, j) for j in range(1, len(k.global_ranges))]
  for i, r in enumerate(k.reduce_ranges()):
    n = r.src[0].arg
    out += [Opt("REDUCE_VECTOR", i, w) for w in LANES if n % w == 0]
    out += [Opt("REDUCE_UNROLL", i, a) for a in UNROLL_AMOUNTS if n % a == 0 and a < n]
    out += [Opt("UNROLL", i, a) for a in sorted(set(UNROLL_AMOUNTS) | ({n} if n <= 9 else set())) if n % a == 0 and a <= n]
  from compiler.peel import peel_points
  out += [Opt("PEEL", i) for i, g in enumerate(k.global_ranges) if g is not k.threaded and peel_points(k, g)]
  return out

# ***** default opts expressed as Opt sequences *****

MORE_ROWS = (4, 2)   # extra row unroll of the matmul tile, the largest the register budget allows

def _more_rows(k: LoweredKernel, before: list[UOp], device) -> LoweredKernel:
  """The matmul tile with more rows (UPCAST of its row loop) while the accumulators fit the registers: each B vector
  loaded in the inner loop then serves more rows, which is what bounds big products (BEAM found 16 rows x 2 vectors
  on AVX-512 1.4-1.6x faster than 4 x 2 at N=1024/2048; on AVX2 the budget stops at 8 rows)."""
  tile = k.applied_opts[-1] if k.applied_opts else None
  if tile is None or tile[0] != "TILE" or tile[1] is None: return k
  i = next((i for i, r in enumerate(before) if r.arg[0] == tile[1]), None)
  if i is None or i >= len(k.global_ranges): return k
  for f in MORE_ROWS:
    if k.global_ranges[i].src[0].arg % f == 0 and k.global_ranges[i].src[0].arg >= 2 * f:
      try: return apply_opt(k, Opt("UPCAST", i, f), device)
      except OptError: continue
  return k

def _odd_tile(k: LoweredKernel, w: int, device) -> LoweredKernel | None:
  """Sizes the tiles don't divide (primes, 1000 x 61...): cut the contiguous output loop at its last multiple of the
  vector tile (PAD) and vectorize the main part, and the same for the rows of a matmul-like kernel when they are not the
  outermost loop of a threaded kernel (a remainder beside the threaded loop would run on every core)."""
  if not k.global_ranges: return None
  loads, reduce = _loads(k), bool(k.reduce_ranges())
  if not reduce and len(k.sink.src) != 1: return None
  for j in reversed(range(len(k.global_ranges))):
    rj = k.global_ranges[j]
    n = rj.src[0].arg
    contiguous = any(_stride(ld.src[1], rj) == 1 for ld in loads) if reduce else _stride(k.sink.src[0].src[1], rj) == 1
    if not contiguous or n < 2 * w or n % w == 0: continue
    uj = VEC_UNROLL if reduce and n >= 2 * w * VEC_UNROLL else 1
    opts = [Opt("PAD", j, w * uj), Opt("VECTOR", j, w)] + ([Opt("UPCAST", j, uj)] if uj > 1 else [])
    if reduce:
      i = next((i for i, ri in enumerate(k.global_ranges) if i != j and ri.src[0].arg >= UPCAST_I and
                any(_stride(ld.src[1], rj) == 1 and _stride(ld.src[1], ri) == 0 for ld in loads)), None)
      if i is not None:
        ni = k.global_ranges[i].src[0].arg
        if ni % UPCAST_I == 0: opts.append(Opt("UPCAST", i, UPCAST_I))
        elif i > 0 or getattr(device, "ncores", 1) == 1: opts += [Opt("PAD", i, UPCAST_I), Opt("UPCAST", i, UPCAST_I)]
    try: return apply_opts(k, opts, device)
    except OptError:
      try: return apply_opts(k, opts[:2], device)
      except OptError: return None
  return None
