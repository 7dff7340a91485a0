"""Explicit opts: one step each on a lowered kernel, checked for legality and register pressure (what BEAM enumerates).

Every opt is a substitution of a RANGE by an expression of new ranges (and LANE, the vector lane), so a kernel stays
correct by construction. The primitives (apply_tile, apply_split, apply_reduce_vectors, apply_output_unroll,
apply_reduce_split) make the new loops from the kernel itself (LoweredKernel.new_range); `apply_opt(kernel, opt, target)`
checks one Opt against the kernel and the Target (compiler/target.py) and applies it; `candidate_opts` lists the next
steps worth trying. The default heuristic built from them is compiler/opt/heuristic.py (which also gives the DEFAULT opt
its meaning); the register budget is compiler/opt/pressure.py.

Opt kinds (compiler/opt/base.py OptKind; each records its name in kernel.applied_opts):
  DEFAULT          the hand-written heuristic's vectorization (conv / matmul tile, vector reduction, vector elementwise);
                   compiler/opt/heuristic.py apply_opts applies it, apply_opt here refuses it
  UPCAST  g, n     output loop g unrolled n times (n outputs per iteration, shared loads merge)
  VECTOR  g, w     output loop g as w-lane vectors
  THREAD  g        output loop g split across the CPU cores (recorded in kernel.threaded)
  PEEL    g        output loop g cut where comparisons against its index change value (compiler/opt/peel.py; the
                   threaded loop too: each chunk then runs its part of every piece)
  SWAP    g, h     output loops g and h exchange places in the loop nest (g < h): which operand stays in cache
  SPLIT   g, n     output loop g as two loops, an outer one and n iterations inside it (with SWAP: cache blocking)
  PAD     g, n     output loop g cut at its last multiple of n, the remainder run as a loop of its own, so tiles of n
                   apply to odd sizes (the effect of padding, with no access past the buffers; CPU only)
  REDUCE_VECTOR r, w   reduction loop r with a w-lane vector accumulator (lanes summed after the loop)
  REDUCE_UNROLL r, n   reduction loop r with n independent accumulators
  UNROLL  r, n     reduction loop r unrolled n times into one accumulator (n == size: the loop disappears)
An Opt names an axis by its position: `axis` indexes k.global_ranges for UPCAST/VECTOR/THREAD/PEEL and
k.reduce_ranges() for REDUCE_VECTOR/REDUCE_UNROLL/UNROLL, as they are *when the opt is applied* (each opt
renumbers the ranges it replaces in place, so a sequence of opts replays identically on the same kernel).

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.lower import lower
>>> from compiler.target import Target
>>> x = LazyBuffer.empty((8, 64), dtypes.float32, "CPU"); x.buffer = object()
>>> t = Target("CPU", "c", ncores=2, simd_bytes=32)
>>> k = apply_opts(lower(create_schedule([x.r(Ops.ADD, (1,))])[0].ast), [Opt("REDUCE_VECTOR", 0, 8), Opt("REDUCE_UNROLL", 0, 2)], t)
>>> [r.src[0].arg for r in k.reduce_ranges()], [o[0] for o in k.applied_opts]
([4], ['REDUCE_VECTOR', 'REDUCE_UNROLL'])
"""
from __future__ import annotations
from compiler.dtypes import dtypes
from compiler.lower import LoweredKernel
from compiler.opt.base import Opt, OptError, OptKind, EXPLICIT_KINDS, copy_kernel
from compiler.opt.peel import peel_points, peel_range, split_tail
from compiler.opt.pressure import max_live, SLACK, MAX_LIVE
from compiler.target import Target
from compiler.uop import UOp, Ops, substitute, simplify
from compiler.vectorize import vectorize
from compiler.view import prod

THREAD_MIN_WORK = 1 << 16   # below this many inner iterations a second thread costs more than it saves
# from this many inner iterations (a copy of 4 MiB, a conv of ~0.01 ms a core on up) a split kernel is cut into
# CHUNKS_PER_CORE chunks a core: one chunk a core of the step's 1-16 ms kernels (beautiful_mnist) leaves the whole kernel
# waiting when the OS stalls one core's thread
CHUNK_MIN_WORK, CHUNKS_PER_CORE = 1 << 20, 4
MAX_CHUNKS = 0xffff   # the most a launch may have: hcqrt/cpu's runner claims them through 16-bit fields
UPCAST_I, VEC_UNROLL, VEC_ACC = 4, 2, 4

def work(k: LoweredKernel) -> int:
  return prod(r.src[0].arg for r in k.global_ranges) * max(1, prod(r.src[0].arg for r in k.reduce_ranges()))

def kernel_loads(k: LoweredKernel) -> list[UOp]: return [u for u in k.sink.toposort() if u.op is Ops.LOAD]

def stride_of(idx: UOp, r: UOp) -> int | None:
  """How far idx moves when r grows by one (None when not affine in r). Kept on idx per range: the heuristics ask the
  same question of the same loads many times."""
  memo = idx.__dict__.setdefault("_stride", {})
  if r not in memo: memo[r] = _affine_step(idx, r)
  return memo[r]

def _affine_step(idx: UOp, r: UOp) -> int | None:
  z, o = UOp.const(dtypes.int32, 0), UOp.const(dtypes.int32, 1)
  two = UOp.const(dtypes.int32, 2)
  a, b, c = (simplify(substitute(idx, {r: v})) for v in (z, o, two))
  d1, d2 = simplify(b - a), simplify(c - b)
  return d1.arg if d1.op is Ops.CONST and d2 is d1 else None

def apply_tile(k: LoweredKernel, ri: UOp | None, ui: int, rj: UOp, w: int, uj: int) -> LoweredKernel:
  """Output loop ri unrolled by ui, rj by uj vectors of w lanes."""
  lane = UOp(Ops.LANE, dtypes.int32, (), w)
  rj_o = k.new_range(rj.src[0].arg // (w * uj), "global")
  ri_o = k.new_range(ri.src[0].arg // ui, "global") if ri is not None else None
  stores = []
  for c in range(ui if ri is not None else 1):
    for u in range(uj):
      m = {rj: rj_o * (w * uj) + u * w + lane}
      if ri is not None: m[ri] = ri_o * ui + c
      stores.extend(substitute(k.sink, m).src)   # (the stores at once: they share most of their graph)
  sink = vectorize(UOp(Ops.SINK, None, tuple(stores)), lane)
  k.global_ranges = [rj_o if r is rj else ri_o if r is ri else r for r in k.global_ranges]
  k.sink = sink
  k.applied_opts.append(("TILE", ri.arg[0] if ri is not None else None, ui, rj.arg[0], w, uj))
  return k

def apply_split(k: LoweredKernel, axis: int, n: int) -> LoweredKernel:
  """Output loop `axis` (size s) as an outer loop of s/n and an inner one of n right inside it: g = go*n + gi."""
  g = k.global_ranges[axis]
  go, gi = k.new_range(g.src[0].arg // n, "global"), k.new_range(n, "global")
  k.sink = substitute(k.sink, {g: go * n + gi})
  k.global_ranges[axis:axis + 1] = [go, gi]
  k.applied_opts.append(("SPLIT", g.arg[0], n))
  return k

def apply_reduce_vectors(k: LoweredKernel, red: UOp, r: UOp, w: int, acc: int) -> LoweredKernel:
  """REDUCE over the contiguous range r: acc vector accumulators of w lanes, folded after the loop."""
  lane = UOp(Ops.LANE, dtypes.int32, (), w)
  ro = k.new_range(r.src[0].arg // (w * acc), "reduce")
  others = tuple(x for x in red.src[1:] if x is not r)
  parts = [UOp(Ops.REDUCE, red.dtype, (substitute(red.src[0], {r: ro * (w * acc) + a * w + lane}),) + others + (ro,), red.arg)
           for a in range(acc)]
  total = parts[0]
  for p in parts[1:]: total = UOp(red.arg, red.dtype, (total, p))
  new = UOp(Ops.REDUCE, red.dtype, (total, lane), red.arg)
  k.sink = vectorize(substitute(k.sink, {red: new}), lane)
  k.applied_opts.append(("REDUCE_VECTOR", r.arg[0], w, acc))
  return k

def apply_reduce_unroll(k: LoweredKernel, red: UOp, r: UOp, acc: int) -> UOp:
  """REDUCE over range r as `acc` interleaved scalar accumulators (r = ro*acc + a), folded after the loop; returns ro."""
  ro = k.new_range(r.src[0].arg // acc, "reduce")
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
  go = k.new_range(g.src[0].arg // u, "global")
  k.sink = UOp(Ops.SINK, None, tuple(s for a in range(u) for s in substitute(k.sink, {g: go * u + a}).src))
  k.global_ranges = [go if r is g else r for r in k.global_ranges]
  k.applied_opts.append(("UPCAST", g.arg[0], u))
  return k

# ***** explicit opts: one step each, checked for legality, what BEAM search (compiler/beam.py) enumerates *****
# An Opt names an axis by its position: `axis` indexes k.global_ranges for UPCAST/VECTOR/THREAD/PEEL and
# k.reduce_ranges() for REDUCE_VECTOR/REDUCE_UNROLL/UNROLL, as they are *when the opt is applied* (each opt
# renumbers the ranges it replaces in place, so a sequence of opts replays identically on the same kernel).

OPT_KINDS = tuple(str(k) for k in EXPLICIT_KINDS)
MAX_STORES = 256       # more unrolled outputs than this only makes compile time explode
MAX_NODES = 40000      # nor a graph this big

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
  ro = k.new_range(n // amt, "reduce") if n > amt else None
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

def replace_global(k: LoweredKernel, before: list[UOp]) -> None:
  # keep k.threaded pointing at the range that replaced it; drop size-1 loops an opt left behind
  for old, new in zip(before, k.global_ranges):
    if k.threaded is old and new is not old: k.threaded = new
  for g in list(k.global_ranges):
    if g.src[0].arg == 1:
      k.sink = substitute(k.sink, {g: UOp.const(dtypes.int32, 0)})
      pos = k.global_ranges.index(g)
      k.global_ranges.remove(g)
      if k.threaded is g: k.threaded = None
      if k.depths: k.depths = [d - 1 if d > pos else d for d in k.depths]   # chains hung below it move up

def check_opt(cond: bool, opt: Opt, k: LoweredKernel, why: str) -> None:
  if not cond: raise OptError(f"{opt} on kernel {k.name}: {why}")

def apply_opt(k: LoweredKernel, opt: Opt, target: Target) -> LoweredKernel:
  """A new kernel: `k` with `opt` applied (k itself is not changed). Raises OptError when the opt is not legal:
  axis out of range, amount not dividing the loop, vectors on a target or dtype without them, a second vectorization,
  a second thread split, too many unrolled outputs, or (CPU) more live vector values than the target's registers.
  DEFAULT is the heuristic's: compiler/opt/heuristic.py apply_opts applies it."""
  w_max = target.lanes
  c_like = not target.gpu
  k = copy_kernel(k)
  before = list(k.global_ranges)
  kind, axis, amt = opt.kind, opt.axis, opt.amount
  check_opt(kind in OPT_KINDS, opt, k, f"unknown opt kind (choose from {', '.join(OPT_KINDS)})")
  check_opt(kind is not OptKind.DEFAULT, opt, k, "DEFAULT is the default heuristic: apply it with compiler.opt.heuristic.apply_opts")
  if kind == "SWAP":
    gr = k.global_ranges
    check_opt(axis is not None and amt is not None and 0 <= axis < amt < len(gr), opt, k, f"axes {axis}, {amt} out of range (kernel has {len(gr)} output loops)")
    check_opt(not k.nests, opt, k, "loop chains hang at fixed depths of the output loops")
    gr[axis], gr[amt] = gr[amt], gr[axis]
    k.applied_opts.append(("SWAP", axis, amt))
  elif kind == "SPLIT":
    gr = k.global_ranges
    check_opt(axis is not None and 0 <= axis < len(gr), opt, k, f"axis out of range (kernel has {len(gr)} output loops)")
    n = gr[axis].src[0].arg
    check_opt(amt is not None and 1 < amt < n and n % amt == 0, opt, k, f"amount {amt} does not divide loop size {n} into two loops")
    check_opt(not k.nests and k.threaded is None, opt, k, "split before peeling and threading (they pin loop positions)")
    apply_split(k, axis, amt)
    before = list(k.global_ranges)   # (one loop became two: nothing below maps old loops to new ones by position)
  elif kind in ("UPCAST", "VECTOR", "THREAD", "PEEL", "PAD"):
    check_opt(axis is not None and 0 <= axis < len(k.global_ranges), opt, k, f"axis out of range (kernel has {len(k.global_ranges)} output loops)")
    g = k.global_ranges[axis]
    n = g.src[0].arg
    if kind == "PAD":
      check_opt(c_like, opt, k, "output loops are the grid on this device")
      check_opt(amt is not None and 1 < amt < n and n % amt, opt, k, f"amount {amt} for loop size {n} (needs a remainder)")
      k = split_tail(k, g, amt)
    elif kind == "THREAD":
      check_opt(target.ncores > 1 and c_like, opt, k, "the device runs one thread per kernel")
      check_opt(k.threaded is None, opt, k, "the kernel is already split across cores")
      check_opt(all(d > axis for d in k.depths), opt, k, "a loop chain beside this loop would run on every core")
      check_opt(n >= 2, opt, k, f"loop of size {n}")
      k.threaded = g
    elif kind == "PEEL": k = peel_range(k, g)   # (the threaded loop too: the renderers cut its pieces by the chunks)
    else:
      check_opt(amt is not None and 1 < amt <= n and n % amt == 0, opt, k, f"amount {amt} does not divide loop size {n}")
      if kind == "VECTOR":
        check_opt(c_like and w_max > 1 and amt in (4, 8, 16) and amt <= w_max, opt, k, f"{amt} lanes of float32 (device vectors hold {w_max})")
        check_opt(all(dt.scalar is dtypes.float32 for dt in k.buf_dtypes), opt, k, "vectors are float32-only")
        check_opt(not has_vectors(k), opt, k, "the kernel is already vectorized (one lane index per kernel)")
        apply_tile(k, None, 1, g, amt, 1)
        k.applied_opts[-1] = ("VECTOR", g.arg[0], amt)
      else:
        check_opt(len(k.sink.src) * amt <= MAX_STORES, opt, k, f"{len(k.sink.src) * amt} stores after the upcast (max {MAX_STORES})")
        apply_output_unroll(k, g, amt)
  else:
    rr = k.reduce_ranges()
    check_opt(axis is not None and 0 <= axis < len(rr), opt, k, f"axis out of range (kernel has {len(rr)} reduction loops)")
    r = rr[axis]
    n = r.src[0].arg
    check_opt(amt is not None and 1 < amt <= n and n % amt == 0, opt, k, f"amount {amt} does not divide reduction size {n}")
    reds = _reduces_over(k, r)
    check_opt(all(all(x.op is Ops.RANGE for x in red.src[1:]) for red in reds), opt, k, "a reduction over lanes")
    if kind == "REDUCE_VECTOR":
      check_opt(c_like and w_max > 1 and amt in (4, 8, 16) and amt <= w_max, opt, k, f"{amt} lanes of float32 (device vectors hold {w_max})")
      check_opt(not has_vectors(k) and all(dt.scalar is dtypes.float32 for dt in k.buf_dtypes), opt, k, "needs an unvectorized float32 kernel")
      check_opt(len(reds) == 1 and reds[0].dtype.is_float and reds[0].arg in (Ops.ADD, Ops.MAX), opt, k, "needs one float ADD/MAX reduction")
      apply_reduce_vectors(k, reds[0], r, amt, 1)
    else:
      check_opt(kind != "REDUCE_UNROLL" or all(red.arg in (Ops.ADD, Ops.MAX, Ops.MUL) for red in reds), opt, k, "unknown reduce op")
      check_opt(len(k.sink.toposort()) * (amt if kind == "UNROLL" else 1) <= MAX_NODES, opt, k, "the unrolled graph is too big")
      apply_reduce_split(k, r, amt, separate=kind == "REDUCE_UNROLL")
      k.applied_opts.append((str(kind), r.arg[0], amt))
  replace_global(k, before)
  if c_like and kind != "THREAD": check_pressure(k, target, opt)
  return k

def check_pressure(k: LoweredKernel, target: Target, opt: Opt | None = None) -> None:
  """Raise OptError when the kernel needs more vector registers than the target has (see compiler/opt/pressure.py)."""
  from compiler.linearize import linearize   # (linearize imports lower only; imported here to keep import time small)
  sb = max(16, target.simd_bytes)
  live, budget = max_live(linearize(k), sb), min(MAX_LIVE, (target.vector_registers or 16) + SLACK)
  if live > budget: raise OptError(f"{opt or 'opts'} on kernel {k.name}: {live} live vector values exceed the register budget {budget}")

def apply_opts(k: LoweredKernel, opts, target: Target) -> LoweredKernel:
  """`k` with every opt of `opts` applied in order (see Opt; no DEFAULT here: compiler/opt/heuristic.py apply_opts)."""
  for o in opts: k = apply_opt(k, o, target)
  return k

UPCAST_AMOUNTS, UNROLL_AMOUNTS, LANES = (2, 3, 4, 8), (2, 3, 4, 8), (4, 8, 16)

def candidate_opts(k: LoweredKernel, target: Target) -> list[Opt]:
  """Every opt worth trying next on `k` (not yet checked: apply_opt may still refuse some)."""
  out = [Opt("DEFAULT")] if not k.applied_opts and k.threaded is None else []
  for i, g in enumerate(k.global_ranges):
    n = g.src[0].arg
    out += [Opt("UPCAST", i, a) for a in UPCAST_AMOUNTS if n % a == 0 and a < n]
    out += [Opt("VECTOR", i, w) for w in LANES if n % w == 0]
    out += [Opt("PAD", i, a) for a in (4, 8, 16, 32) if a < n and n % a and not target.gpu]
    if k.threaded is None and target.ncores > 1: out.append(Opt("THREAD", i))
    if k.threaded is None and not k.nests: out += [Opt("SPLIT", i, a) for a in (2, 4, 8) if n % a == 0 and a < n]
  if not k.nests: out += [Opt("SWAP", 0, j) for j in range(1, len(k.global_ranges))]
  for i, r in enumerate(k.reduce_ranges()):
    n = r.src[0].arg
    out += [Opt("REDUCE_VECTOR", i, w) for w in LANES if n % w == 0]
    out += [Opt("REDUCE_UNROLL", i, a) for a in UNROLL_AMOUNTS if n % a == 0 and a < n]
    out += [Opt("UNROLL", i, a) for a in sorted(set(UNROLL_AMOUNTS) | ({n} if n <= 9 else set())) if n % a == 0 and a <= n]
  out += [Opt("PEEL", i) for i, g in enumerate(k.global_ranges) if g is not k.threaded and peel_points(k, g)]
  return out

