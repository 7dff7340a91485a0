"""The default opts: pick how a lowered kernel's loops are split, unrolled and vectorized for a target.

`optimize(kernel, target)` applies the hand-written heuristic:
  - big float32 products come with their operands packed (compiler/pack.py) and get the matching register tile and
    cache-blocked loop order (compiler/opt/matmul.py);
  - other matmul-like kernels (a reduction with two output loops, one of them contiguous in some input) get a
    register tile: UPCAST_I rows unrolled x (VEC_UNROLL x W) columns as W-wide vectors, accumulators in
    registers, the reduction loop innermost;
  - reductions over a contiguous axis keep VEC_ACC vector accumulators and sum their lanes at the end;
  - big kernels split their outermost loop across the CPU cores;
  - (expressed as Opt sequences, below) more tile rows while the register budget allows (_more_rows), padded
    convolutions tiled so inner vectors need no bound checks and their row loop peeled (compiler/opt/conv.py),
    odd sizes cut at the last multiple of the tile (_odd_tile);
  - GPUs: compiler/opt/gpu.py (and tensor cores, compiler/opt/tc.py).
`apply_opts` is compiler/opt/apply.py's plus the DEFAULT opt (this heuristic's vectorization), the search space of BEAM
(compiler/beam.py). `optimize_portable` is the opts of exported C99.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.lower import lower
>>> x = LazyBuffer.empty((1 << 20,), dtypes.float32, "CPU"); x.buffer = object()
>>> optimize(lower(create_schedule([x.cast(dtypes.int32)])[0].ast), Target("CPU", "c", ncores=2, simd_bytes=32)).threaded is not None
True
"""
from __future__ import annotations
from compiler.dtypes import dtypes
from compiler.lower import LoweredKernel
from compiler.uop import UOp, Ops, simplify, substitute
from compiler.target import Target
from compiler.opt.base import Opt, OptError, OptKind
from compiler.opt.apply import (THREAD_MIN_WORK, CHUNK_MIN_WORK, CHUNKS_PER_CORE, MAX_CHUNKS, UPCAST_I, VEC_UNROLL, VEC_ACC, work, apply_tile, apply_reduce_vectors, apply_reduce_unroll,
                                apply_reduce_split,
                                apply_output_unroll, apply_opt, check_pressure, check_opt, kernel_loads, replace_global, stride_of, copy_kernel)
from compiler.opt.conv import channels_innermost, conv_tile, has_gates, peel_default, window_rows
from compiler.opt.transpose import transpose_tile
from compiler.opt.peel import peel_points, peel_range, unroll_tail
from compiler.opt.matmul import packed_matmul_tile, prefetch_streams
from compiler.opt.gpu import optimize_gpu
from compiler.settings import chunks_per_core, noopt
from compiler.prefetch import prefetch_into

def _first_fit(k: LoweredKernel, target: Target | None, builds: list) -> None:
  """Apply to `k` the first of `builds` (functions that apply opts to a kernel in place) whose result fits the target's
  vector registers, else the last. Each is tried on a copy (copies number their new loops as `k` would), and the copy
  that fits becomes `k`: no build runs twice (a trial costs as much as the build itself)."""
  for i, build in enumerate(builds):
    kc = copy_kernel(k)
    build(kc)
    if target is not None and i < len(builds) - 1:
      try: check_pressure(kc, target)
      except OptError: continue
    vars(k).update(vars(kc))
    return

ODD_ROWS = (3, 5)   # row unrolls for a row loop that no multiple of UPCAST_I divides

def _matmul_tile(k: LoweredKernel, wmax: int, target: Target | None = None) -> bool:
  if len(k.global_ranges) < 2 or not k.reduce_ranges(): return False
  loads = kernel_loads(k)
  for rj in reversed(k.global_ranges):
    n = rj.src[0].arg
    # the widest vector that divides the row (narrower vectors still beat scalars)
    w = next((w for w in (wmax, wmax // 2, wmax // 4) if w >= 4 and n % w == 0), None)
    if w is None: continue
    # 2 vectors per row, or 3 when only 3 divide it (a 24-wide conv row: 4 x 3 = 12 accumulators hide the FMA latency)
    uj = next((u for u in (VEC_UNROLL, 3) if n % (w * u) == 0), 1)
    if not any(stride_of(ld.src[1], rj) == 1 for ld in loads): continue
    # the row loop: one whose contiguous-in-rj load does not move with it (so its loads are shared); a multiple of
    # UPCAST_I first, else one of 3 or 5 rows (a 3x3/5x5 conv's weight gradient with 1-3 input channels: ky rows).
    # The innermost such loop: neighbouring rows (a strided conv's output columns vectorized along its output channels,
    # rather than its images) share cache lines, and the loops outside the tile stay whole for the cores
    rows = [(ri, UPCAST_I) for ri in reversed(k.global_ranges) if ri.src[0].arg % UPCAST_I == 0] + \
           [(ri, d) for ri in k.global_ranges for d in ODD_ROWS if ri.src[0].arg % UPCAST_I and ri.src[0].arg % d == 0]
    for ri, ui in rows:
      if ri is rj: continue
      if any(stride_of(ld.src[1], rj) == 1 and stride_of(ld.src[1], ri) == 0 for ld in loads):
        # the biggest tile whose accumulators and loads fit the registers (4 x 2 or 3 vectors, else 4 x 1, 2 x 1)
        tiles = [t for t in dict.fromkeys([(ui, uj), (ui, 1), (UPCAST_I // 2, 1)]) if ri.src[0].arg % t[0] == 0]
        _first_fit(k, target, [lambda kc, t=t: apply_tile(kc, ri, t[0], rj, w, t[1]) for t in tiles])
        return True
  return False

def merge_reduce_rows(k: LoweredKernel, red: UOp, w: int) -> UOp:
  """merge_rows for the loops of the reduction `red`: while its innermost loop is no multiple of w, merged with the one
  around it where every load walks the two as one (BatchNorm's sums over 20x20 maps: 400 floats, 25 vectors of 16).
  Kept only when the merged loop is a multiple of w or w/2 (a vector reduction then takes it); returns the REDUCE now in
  k.sink (`red` itself when nothing merged)."""
  k0, k, red0 = k, copy_kernel(k), red
  while len(red.src) >= 3 and all(r.op is Ops.RANGE and r.src[0].op is Ops.CONST for r in red.src[-2:]) and red.src[-1].src[0].arg % w:
    ro, ri = red.src[-2:]
    n = ri.src[0].arg
    if any((si := stride_of(ld.src[1], ri)) is None or stride_of(ld.src[1], ro) != si * n for ld in kernel_loads(k)): break
    m = k.new_range(ro.src[0].arg * n, "reduce")
    val = simplify(substitute(red.src[0], {ro: m // n, ri: m % n}))
    if any(u.op in (Ops.IDIV, Ops.MOD) and m in u.src[0].toposort() for u in val.toposort()): break
    new = UOp(Ops.REDUCE, red.dtype, (val, *red.src[1:-2], m), red.arg)
    k.sink = substitute(k.sink, {red: new})
    k.applied_opts.append(("MERGE", ro.arg[0], ri.arg[0]))
    red = new
  n = red.src[-1].src[0].arg
  if red is red0 or not any(n % v == 0 for v in (w, w // 2) if v >= 4): return red0
  vars(k0).update(vars(k))
  return red

REDUCE_TAIL_MIN = 1024   # a reduction loop this long that no vector divides: vectors over its start, scalars after

def _peel_reduce_tail(k: LoweredKernel, red: UOp, wmax: int) -> UOp | None:
  """A single loop's reduction of n elements (n >= REDUCE_TAIL_MIN, no multiple of wmax, read contiguously) cut in two,
  in place: the REDUCE of the first m = n - n % (wmax * VEC_ACC) elements (returned, for the vectors and their
  accumulators) combined by the reduction's own op with the REDUCE of the rest (fewer than wmax * VEC_ACC: a scalar
  loop). Rows of 4097 floats summed as one scalar chain each ran 3.9x slower than rows of 4096 (x86-64-v3,
  (4096, n).sum(axis=1), min of 9), 1.6x once cut. None (nothing changed) for other reductions. (The combine sits
  above the fold over the lanes, so the vectorizer computes it, and what follows, once per lane: a few scalar ops per
  row of at least REDUCE_TAIL_MIN loads.)"""
  if len(red.src) != 2 or (r := red.src[1]).src[0].op is not Ops.CONST or (n := r.src[0].arg) < REDUCE_TAIL_MIN: return None
  strides = {stride_of(ld.src[1], r) for ld in kernel_loads(k)}
  if not strides <= {0, 1} or 1 not in strides: return None
  m = n - n % (wmax * VEC_ACC)
  r1, r2 = k.new_range(m, "reduce"), k.new_range(n - m, "reduce")
  main = UOp(Ops.REDUCE, red.dtype, (substitute(red.src[0], {r: r1}), r1), red.arg)
  tail = UOp(Ops.REDUCE, red.dtype, (substitute(red.src[0], {r: r2 + m}), r2), red.arg)
  k.sink = substitute(k.sink, {red: UOp(red.arg, red.dtype, (main, tail))})
  k.applied_opts.append(("REDUCE_TAIL", r.arg[0], m))
  return main

def _reduce_vectors(k: LoweredKernel, wmax: int, target: Target | None = None) -> bool:
  reds = [u for u in k.sink.toposort() if u.op is Ops.REDUCE and all(r.op is Ops.RANGE for r in u.src[1:])]
  if len(reds) != 1 or not reds[0].dtype.is_float or reds[0].arg not in (Ops.ADD, Ops.MAX): return False
  merged = reds[0].src[-1].src[0].op is Ops.CONST and reds[0].src[-1].src[0].arg % wmax and (m := merge_reduce_rows(k, reds[0], wmax)) is not reds[0]
  red = m if merged else reds[0]
  r = red.src[-1]   # the innermost reduce loop
  n = r.src[0].arg
  w = next((w for w in (wmax, wmax // 2) if w >= 4 and n % w == 0), None)
  if w is None and (peeled := _peel_reduce_tail(k, red, wmax)) is not None: red, r, n, w = peeled, peeled.src[-1], peeled.src[-1].src[0].arg, wmax
  if w is None or not any(stride_of(ld.src[1], r) == 1 for ld in kernel_loads(k)): return False
  # a load that moves with r at another stride (a column sum of x * m, m broadcast per row: m is contiguous along r, x
  # is not) would walk down a column, one cache line per element: vectors along the output loop instead, when it can
  if any(stride_of(ld.src[1], r) not in (0, 1) for ld in kernel_loads(k)) and _output_vectors_fit(k, wmax): return False
  # the most accumulators (up to VEC_ACC) whose loop body fits the registers (an exp per accumulator takes several);
  # a row too short for several (20 floats: 5 vectors) takes them from the next loop out (BatchNorm's sums over 20x20)
  accs = [a for a in (VEC_ACC, VEC_ACC // 2) if a > 1 and n % (w * a) == 0]
  # (a merged map of 400 floats, 50 vectors of 8, holds only 2: the next loop out gives 4 independent chains first)
  outer = next((x for x in reversed(red.src[1:-1]) if x.src[0].arg % 2 == 0), None) if not accs or (merged and accs[0] < VEC_ACC) else None
  def vec_outer(kc: LoweredKernel, a: int) -> None:
    apply_reduce_vectors(kc, red, r, w, 1)
    apply_reduce_split(kc, outer, a, separate=True)
    kc.applied_opts.append(("REDUCE_UNROLL", outer.arg[0], a))
  builds = [lambda kc, a=a: apply_reduce_vectors(kc, red, r, w, a) for a in accs]
  if outer is not None:
    ob = [lambda kc, a=a: vec_outer(kc, a) for a in (VEC_ACC, VEC_ACC // 2) if outer.src[0].arg % a == 0]
    builds = ob[:1] + builds + ob[1:] if accs else builds + ob
  _first_fit(k, target, builds + [lambda kc: apply_reduce_vectors(kc, red, r, w, 1)])
  return True

def _reduce_unrolls(k: LoweredKernel) -> bool:
  """Float sums no vector fits (several in one kernel, as BatchNorm's backward adds two; or one reading through a
  maxpool's index arithmetic): each over its own innermost loop with VEC_ACC interleaved scalar accumulators, so the
  adds of one chain don't wait on each other's latency."""
  done = False
  while True:
    reds = [u for u in k.sink.toposort() if u.op is Ops.REDUCE and u.dtype.is_float and u.arg in (Ops.ADD, Ops.MAX) and len(u.src) > 1
            and all(x.op is Ops.RANGE for x in u.src[1:]) and u.src[-1].src[0].arg % VEC_ACC == 0 and u.src[-1].src[0].arg > VEC_ACC]
    if not reds: break
    r = reds[0].src[-1]
    apply_reduce_split(k, r, VEC_ACC, separate=True)
    k.applied_opts.append(("REDUCE_UNROLL", r.arg[0], VEC_ACC))
    done = True
  if done: return True
  # an innermost loop too short for them (BatchNorm's sums over a 6x6 map): the accumulators from the innermost loop
  # outside it that has them (the batch), once per loop; one scalar chain would wait on every add's latency
  loops = {next((x for x in reversed(u.src[1:]) if x.src[0].arg % VEC_ACC == 0 and x.src[0].arg > VEC_ACC), None): None
           for u in k.sink.toposort() if u.op is Ops.REDUCE and u.dtype.is_float and u.arg in (Ops.ADD, Ops.MAX) and len(u.src) > 1
           and all(x.op is Ops.RANGE for x in u.src[1:])}
  for r in loops:
    if r is None: continue
    apply_reduce_split(k, r, VEC_ACC, separate=True)
    k.applied_opts.append(("REDUCE_UNROLL", r.arg[0], VEC_ACC))
    done = True
  return done

def merge_rows(k: LoweredKernel, w: int, whole: bool = False) -> bool:
  """While the innermost output loop is no multiple of w, merge it with the loop around it into one loop (in place; a
  MERGE entry in applied_opts) where every load and store walks the two as one: the outer loop's stride is the inner
  one's size times its stride (a (N, C, 20, 20) tensor's 20x20 maps: 400 floats are 25 vectors of 16 where rows of 20
  are none; a per-channel broadcast (stride 0 in the map, 1 in C) stops it at the map). The merged loop m replaces the
  two by m // inner and m % inner, which simplify folds away; where any of them stays (a border gate on the column, a
  transposed read), or the merged loop is still no multiple of w, the kernel is left as it was. `whole`: merge on while
  the accesses allow, and keep the merge whether or not it is a multiple of w (a transposing copy's stores then run
  whole lines, and a 6x6 map is one loop of 36 = 9 vectors of 4: compiler/opt/transpose.py).
  Returns whether it merged."""
  if k.depths or k.nests: return False   # (loop chains hang at fixed depths)
  k0, k = k, copy_kernel(k)
  merged = False
  while len(k.global_ranges) >= 2 and all(r.src[0].op is Ops.CONST for r in k.global_ranges[-2:]) and (whole or k.global_ranges[-1].src[0].arg % w):
    ro, ri = k.global_ranges[-2:]
    n = ri.src[0].arg
    if any((si := stride_of(u.src[1], ri)) is None or stride_of(u.src[1], ro) != si * n
           for u in k.sink.toposort() if u.op in (Ops.LOAD, Ops.STORE)): break
    m = k.new_range(ro.src[0].arg * n, "global")
    sink = simplify(substitute(k.sink, {ro: m // n, ri: m % n}))
    if any(u.op in (Ops.IDIV, Ops.MOD) and m in u.src[0].toposort() for u in sink.toposort()): break
    k.sink, k.global_ranges[-2:] = sink, [m]
    k.applied_opts.append(("MERGE", ro.arg[0], ri.arg[0]))
    merged = True
  if not merged or (not whole and k.global_ranges[-1].src[0].arg % w): return False   # (no vectors gained: left as it was)
  vars(k0).update(vars(k))
  return True

def _elementwise_vectors(k: LoweredKernel, w: int) -> bool:
  """An elementwise kernel whose innermost loop is contiguous in its stores (an optimizer update fused with its moments
  has three): w lanes per iteration; an innermost loop no multiple of w merged first with the ones around it where
  every access allows (merge_rows); else the widest narrower vector that divides it (24-wide rows of a permuted copy on
  AVX-512: 3 vectors of 8, rows of 20: 5 of 4, rather than scalars)."""
  if not k.global_ranges or k.reduce_ranges(): return False
  if k.global_ranges[-1].src[0].arg % w: merge_rows(k, w)
  rj = k.global_ranges[-1]
  w = next((v for v in (w, w // 2, w // 4) if v >= 4 and rj.src[0].arg % v == 0), 0)
  if not w or any(stride_of(st.src[1], rj) != 1 for st in k.sink.src): return False
  apply_tile(k, None, 1, rj, w, 1)
  return True

def _output_vectors_fit(k: LoweredKernel, w: int) -> bool:
  """Can _output_vectors vectorize k's innermost output loop?"""
  if not k.global_ranges or not k.reduce_ranges() or len(k.sink.src) != 1: return False
  rj = k.global_ranges[-1]
  if rj.src[0].arg % w or stride_of(k.sink.src[0].src[1], rj) != 1: return False
  return all(stride_of(ld.src[1], rj) in (0, 1) and len(ld.src) == 2 for ld in kernel_loads(k))

def _output_vectors(k: LoweredKernel, w: int) -> bool:
  """A reduction over non-contiguous loops whose innermost output loop is contiguous in the store and in every load that
  moves with it (partial sums of a conv weight gradient added over the batch): w output lanes per iteration, two vectors
  when they divide the loop (two independent accumulators)."""
  if not _output_vectors_fit(k, w): return False
  rj = k.global_ranges[-1]
  apply_tile(k, None, 1, rj, w, VEC_UNROLL if rj.src[0].arg % (w * VEC_UNROLL) == 0 else 1)
  return True

def split_balance(n: int, ncores: int) -> float:
  """The share of `ncores` cores' time a loop of n iterations keeps busy when cut into ncores contiguous chunks (the
  renderer's n*core/ncores bounds): the mean chunk over the longest one (1.0 for 128 over 2, 5 over 2 gives 2.5/3).

  >>> split_balance(128, 2), round(split_balance(5, 2), 3), split_balance(1, 2)
  (1.0, 0.833, 0.5)
  """
  return n / ncores / -(-n // ncores)

def thread_axis(k: LoweredKernel, ncores: int, work0: int) -> UOp | None:
  """The output loop of an optimized kernel to split across `ncores` cores, or None when the kernel is too small for a
  second thread to pay (`work0`: its iterations before the opts vectorized and unrolled them, i.e. what it computes; the
  optimized loop counts undercount a vectorized kernel 16-64 fold). The outermost loop (contiguous chunks, and peeling
  stays free inside it) unless it splits unevenly: then the outermost loop that splits best, when that is clearly
  better (a 5 x 5 x 32 kernel on 2 cores: 16 + 16 channels instead of 3 + 2 rows, which leaves a core idle a sixth of
  the time). A loop with a loop chain hung beside it (peeled kernels' `depths`) is never split: the chain would run on
  every core."""
  if ncores < 2 or work0 < THREAD_MIN_WORK: return None
  depths = k.depths
  ok = [g for i, g in enumerate(k.global_ranges) if g.src[0].op is Ops.CONST and g.src[0].arg >= 2 and all(d > i for d in depths)]
  if not ok: return None
  first, best = ok[0], max(ok, key=lambda g: split_balance(g.src[0].arg, ncores))   # (max keeps the outermost of ties)
  if first is k.global_ranges[0] and split_balance(best.src[0].arg, ncores) < split_balance(first.src[0].arg, ncores) + 0.1: return first
  return best

STREAM_MIN_WORK = 1 << 22   # a streaming reduction this big (16 MB of floats read) outruns the caches

def stream_prefetch(k: LoweredKernel, lanes: int, work0: int, device: Target) -> None:
  """A big vectorized reduction (AVX2 or AVX-512 vectors) prefetches its stream a few KiB ahead into L2, one hint per
  cache line (compiler/opt/matmul.py prefetch_streams, compiler/prefetch.py prefetch_into): a core keeps too few lines in
  flight on its own to reach the memory bandwidth. The 64M-float sum's loop, measured as a C kernel on the 2-core AVX-512
  Xeon of issue 28 (load 4-5), two threads, each thread's CPU time for its half, minimum of 20: ymm loads 9.2 / 10.2 ms,
  ymm with a hint per line into L1 2, 4 or 8 KiB ahead 8.4-8.9 ms, zmm 8.0-8.5 ms with or without those hints (sm37).
  Into L2 instead (PREFETCHT1; sm39: the generated kernels of both ISAs old and new taking turns through the runner, 8
  chunks, 40 launches each, load 3): a 32 MiB chunk's time, 10th percentile / median, ymm 2.11 / 2.58 ms with the L1
  hint -> 1.97 / 2.28 ms, zmm 2.04 / 2.79 ms without a hint -> 1.96 / 2.47 ms. A hint into L1 holds one of the
  core's few L1 miss buffers until its line arrives; the L2 keeps more requests in flight. Where the CPU has no L2-only
  hint (`device.l2_prefetch` False: AMD before Zen 4, whose PREFETCHT1 fills the L1; hcqrt/cpu/isa.py l2_prefetch_hint)
  the stream is left to the hardware prefetchers, which measured faster there than either hint.
  (In place; a no-op for other kernels, scalar or 4-lane vectors, and what fits in the caches.)

  >>> from compiler.lazy import LazyBuffer
  >>> from compiler.schedule import create_schedule
  >>> from compiler.lower import lower
  >>> from compiler.prefetch import prefetch_bytes
  >>> x = LazyBuffer.empty((1 << 24,), dtypes.float32, "CPU"); x.buffer = object()
  >>> ks = [optimize(lower(create_schedule([x.r(Ops.ADD, (0,))])[0].ast), Target("CPU", "c", ncores=2, simd_bytes=b)) for b in (32, 64)]
  >>> [sum(prefetch_bytes(u) > 0 for u in k.sink.toposort() if u.op is Ops.LOAD) for k in ks]   # 4 loads a step: 2 lines, 4 lines
  [2, 4]
  >>> k = optimize(lower(create_schedule([x.r(Ops.ADD, (0,))])[0].ast), Target("CPU", "c", ncores=2, simd_bytes=32, l2_prefetch=False))
  >>> sum(prefetch_bytes(u) > 0 for u in k.sink.toposort() if u.op is Ops.LOAD)
  0
  """
  if not device.l2_prefetch or lanes not in (8, 16) or work0 < STREAM_MIN_WORK or len(reds := k.reduce_ranges()) != 1: return
  k.sink = prefetch_into(prefetch_streams(k.sink, reds), 2)

def thread_chunks(k: LoweredKernel, ncores: int, work0: int) -> int:
  """How many chunks the threaded loop of `k` is cut into: one per core, or CHUNKS_PER_CORE per core for a kernel of
  at least CHUNK_MIN_WORK iterations (`work0`, as thread_axis) whose loop has that many (CPU_CHUNKS: another count a core). The runner's threads claim the
  chunks in turn (hcqrt/cpu/device.py claim_and_run), so a thread the OS stalls mid-kernel (another process on its CPU,
  a late wake-up) or a slower core holds up one short chunk while the others take the rest, where with one chunk a
  core the whole kernel waits for that core's half. Small kernels keep one chunk a core: contiguous halves keep each
  core's output in its own cache for the next kernel, and a stall costs them little.

  >>> from compiler.lower import LoweredKernel
  >>> from compiler.uop import UOp
  >>> k = LoweredKernel("k", UOp.const(dtypes.int32, 0), [], [UOp.const(dtypes.int32, 0)]); k.threaded = k.new_range(128, "global")
  >>> thread_chunks(k, 2, 1 << 30), thread_chunks(k, 2, 1 << 18), thread_chunks(k, 64, 1 << 30)
  (8, 2, 64)
  """
  if k.threaded is None: return 1
  # (at most MAX_CHUNKS: the CPU runner's claim word holds a launch's chunks in 16-bit fields)
  n, c = k.threaded.src[0].arg, min(ncores * chunks_per_core(CHUNKS_PER_CORE), max(ncores, MAX_CHUNKS))
  return c if work0 >= CHUNK_MIN_WORK and isinstance(n, int) and n >= c else ncores

def peel_gated_copy(k: LoweredKernel, device: Target, innermost: bool = False) -> LoweredKernel:
  """An elementwise kernel whose loads are gated by comparisons of an output loop (a cat's select, a padded copy) with
  that loop (the innermost with cut points, the threaded one or inside it) cut where they change: each piece reads its
  inputs without gates or selects, a plain copy the C compiler vectorizes. A cat of two 16M float32 tensors selecting
  lane by lane ran 1.6-2x slower than the old pad-and-add (which turned -0.0 into +0.0); peeled, it beats it (CPU only: on
  GPUs the output loops are the grid). `innermost`: only the innermost loop, before the vector opts (a cat along the last
  dim: its vector opts would cut the loop at a multiple of the vector (PAD) and a cut loop is not peeled; the peeled
  pieces are plain copy loops that C vectorizes itself. 3 x (1000, 3, 333) along dim 2, selects lane by lane: 33 ms,
  10x the old pad-and-add's vector adds; peeled first: see the report)."""
  if device.gpu or k.reduce_ranges() or k.nests or not has_gates(k): return k
  if innermost:
    # (a single loop a multiple of the vector stays for the vector and thread opts, and is peeled after them: cut first, it
    # would leave no loop to split across the cores, 2 x 16M floats ran 4x slower)
    if not k.global_ranges or (len(k.global_ranges) == 1 and k.global_ranges[0].src[0].arg % max(device.lanes, 1) == 0): return k
    return peel_range(k, k.global_ranges[-1]) if peel_points(k, k.global_ranges[-1]) else k
  for g in reversed(k.global_ranges):
    if peel_points(k, g): return peel_range(k, g)
    if g is k.threaded: break
  return k

def optimize(k: LoweredKernel, device: Target) -> LoweredKernel:
  """The default opts for the target `device` (its cores and vector width; GPUs: compiler/opt/gpu.py)."""
  if device.gpu: return optimize_gpu(k, device)
  work0 = work(k)
  if not noopt():
    w = device.lanes
    if (kp := peel_gated_copy(k, device, innermost=True)) is not k: k = kp
    elif w > 1 and all(dt.scalar is dtypes.float32 for dt in k.buf_dtypes):
      k = channels_innermost(k, device)
      before, kc0 = list(k.global_ranges), copy_kernel(k)
      if (kc := packed_matmul_tile(k, device)) is not None:
        # the product's column blocks in chunks the cores claim in turn, as for other big kernels; a core the OS stalls
        # then holds up one chunk, not half the product (measured: compiler/pack_avx2.py)
        if kc.threaded is not None: kc.chunks = thread_chunks(kc, device.ncores, work0)
        return kc
      if (kc := conv_tile(k, w, device)) is not None: k = kc
      elif _matmul_tile(k, w, device):
        # (a conv along its channels whose column loop took no more rows: rows of the image rows first, compiler/opt/conv.py)
        if (k2 := _more_rows(k, before, device)) is k: k2 = window_rows(k, before, device)
        k = _six_rows(kc0, k, device) if k2 is k else k2
      elif not k.reduce_ranges() and (kc := transpose_tile(k, w, device, lambda kc, w: merge_rows(kc, w, whole=True))) is not None: k = kc
      # (rows of 20 in a 20x20 map: one loop of 400 takes whole vectors, where the cut of _odd_tile leaves a scalar tail)
      elif not k.reduce_ranges() and merge_rows(k, w): _elementwise_vectors(k, w)
      elif (kc := _odd_tile(k, w, device)) is not None: k = kc
      elif _reduce_vectors(k, w, device): stream_prefetch(k, w, work0, device)
      else: _elementwise_vectors(k, w) or _output_vectors(k, w) or _reduce_unrolls(k)
  if (g := thread_axis(k, device.ncores, work0)) is not None: k.threaded = g
  if not noopt():
    k = peel_gated_copy(peel_default(k, device), device)
  if k.threaded is not None: k.chunks = thread_chunks(k, device.ncores, work0)   # (after the peel: it makes a new kernel)
  return k


PORTABLE_ACC = (8, 4, 2)   # scalar accumulators per reduction, largest that divides the loop (-O3 packs them into vectors)


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
  if noopt(): return k
  done: set[UOp] = set()   # ranges of reductions already handled (including the ones opts made)
  while True:
    red = next((u for u in k.sink.toposort() if u.op is Ops.REDUCE and len(u.src) > 1 and all(x.op is Ops.RANGE for x in u.src[1:])
                and not done.intersection(u.src[1:])), None)
    if red is None: break
    done.update(red.src[1:])
    if not red.dtype.is_float or red.arg not in (Ops.ADD, Ops.MAX): continue
    loads = kernel_loads(k)
    # innermost contiguous range first
    rngs = [x for x in reversed(red.src[1:]) if any(stride_of(ld.src[1], x) == 1 for ld in loads)]
    r, acc = next(((x, a) for x in rngs for a in PORTABLE_ACC if x.src[0].arg % a == 0 and x.src[0].arg >= 2 * a), (None, 0))
    if r is not None: done.add(apply_reduce_unroll(k, red, r, acc))
  if k.applied_opts or not (rr := k.reduce_ranges()): return k
  inner = [ld for ld in kernel_loads(k) if any(stride_of(ld.src[1], r) != 0 for r in rr)]   # the loads of the reduction's body
  def cheap(g: UOp) -> bool:   # every load that moves with g is a plain affine one: the costly ones get shared
    return all(len(ld.src) == 2 and stride_of(ld.src[1], g) is not None for ld in inner if stride_of(ld.src[1], g) != 0)
  for g in sorted(reversed(k.global_ranges), key=lambda g: not cheap(g)):   # noqa: C414 (ties: the innermost first)
    u = next((a for a in PORTABLE_ACC if g.src[0].arg % a == 0), None)
    if u is not None and any(stride_of(ld.src[1], g) == 0 for ld in inner) and any(stride_of(ld.src[1], g) != 0 for ld in inner):
      return apply_output_unroll(k, g, u)
  return k


# ***** default opts expressed as Opt sequences *****

MORE_ROWS = (4, 2)   # extra row unroll of the matmul tile, the largest the register budget allows

def _more_rows(k: LoweredKernel, before: list[UOp], device: Target) -> LoweredKernel:
  """The matmul tile with more rows (UPCAST of its row loop) while the accumulators fit the registers: each B vector
  loaded in the inner loop then serves more rows, which is what bounds big products (BEAM found 16 rows x 2 vectors
  on AVX-512 1.4-1.6x faster than 4 x 2 at N=1024/2048; on AVX2 the budget stops at 8 rows)."""
  tile = k.applied_opts[-1] if k.applied_opts else None
  if tile is None or tile[0] != "TILE" or tile[1] is None: return k
  i = next((i for i, r in enumerate(before) if r.arg[0] == tile[1]), None)
  if i is None or i >= len(k.global_ranges): return k
  if tile[5] == 1 and (kc := _more_vector_rows(k, i, before, device)) is not None: return kc
  for f in MORE_ROWS:
    if k.global_ranges[i].src[0].arg % f == 0 and k.global_ranges[i].src[0].arg >= 2 * f:
      try: return apply_opt(k, Opt("UPCAST", i, f), device)
      except OptError: continue
  return k

def _more_vector_rows(k: LoweredKernel, i: int, before: list[UOp], device: Target) -> LoweredKernel | None:
  """A tile of one vector per row (a stride-2 conv's 16 output columns on AVX-512, an 8x8 map's rows of 8): more rows of
  its own row loop (output channels) would cost one broadcast load per FMA (16 x 1: 17 loads for 16 FMAs, the load
  ports' limit); instead the innermost other output loop that the broadcast operand does not move with and the vector
  operand does (the output rows y) is unrolled, so each broadcast serves several vectors (4 x 4: 8 loads for 16).
  Measured on the stride-2 bench conv (AVX-512, one core, interleaved minima): 17.7 -> 11.0 ms."""
  vec = next((j for j, r in enumerate(before) if r.arg[0] == k.applied_opts[-1][3]), None)
  rr = k.reduce_ranges()
  loads = kernel_loads(k)
  bcast = [ld for ld in loads if ld.dtype.count == 1 and any(stride_of(ld.src[1], r) != 0 for r in rr)]
  vecs = [ld for ld in loads if ld.dtype.count > 1]
  if not bcast or not vecs: return None
  for j in reversed(range(len(k.global_ranges))):
    g = k.global_ranges[j]
    if j in (i, vec) or (j == 0 and device.ncores > 1) or g.src[0].op is not Ops.CONST: continue   # (the outermost: the cores')
    if any(stride_of(ld.src[1], g) != 0 for ld in bcast) or not any(stride_of(ld.src[1], g) for ld in vecs): continue
    for f in MORE_ROWS:
      if g.src[0].arg % f == 0 and g.src[0].arg >= 2 * f:
        try: return apply_opt(k, Opt("UPCAST", j, f), device)
        except OptError: continue
    return None
  return None

def _six_rows(k0: LoweredKernel, k: LoweredKernel, device: Target) -> LoweredKernel:
  """A 4-row x 2-vector matmul tile that got no more rows (8 accumulators: too few to hide a 4-5 cycle FMA latency at
  2 FMAs per cycle) as 6 rows x 2 vectors (12), built again from the untiled `k0`: a row loop that 6 divides takes it
  directly; an even one of 12 or more as pairs of rows cut at their last multiple of 3 (PAD), the main part 3 pairs at
  a time, one remaining pair as a 2 x 2 tile and two as one 4 x 2 tile (unroll_tail: 8 accumulators, not a loop of two
  4-accumulator tiles; 64 channels: 60 + 4; measured 4.3 -> 3.4 ms for the stride-2 bench conv's kernel, whose 16 output
  columns are the rows: 12 + 4). Kept only if it fits the registers;
  a cut outermost loop would leave its remainder on every core, so that one is never cut on a multi-core target."""
  tile = k.applied_opts[0] if len(k.applied_opts) == 1 else None
  if tile is None or tile[0] != "TILE" or tile[2] != UPCAST_I or tile[5] != VEC_UNROLL: return k
  # (a kernel reading a padded view in place on 16 registers keeps 4 rows: its cut (PAD) would forbid peel_default's
  # cut of the gated output rows, and the gates in every piece spill: 14 vector moves in a strided conv over 32 columns)
  if has_gates(k0) and device.vector_registers <= 16: return k
  ri = next((r for r in k0.global_ranges if r.arg[0] == tile[1]), None)
  rj = next((r for r in k0.global_ranges if r.arg[0] == tile[3]), None)
  if ri is None or rj is None: return k
  i, n = k0.global_ranges.index(ri), ri.src[0].arg
  try:
    if n % 6 == 0: kc = apply_tile(copy_kernel(k0), ri, 6, rj, tile[4], VEC_UNROLL)
    elif n % 2 == 0 and n >= 12 and (i > 0 or device.ncores == 1):
      kc = apply_opt(apply_tile(copy_kernel(k0), ri, 2, rj, tile[4], VEC_UNROLL), Opt("PAD", i, 3), device)
      # two remaining pairs (64 rows: 60 + 4) as one 4 x 2 tile (8 accumulators) rather than a loop of two 2 x 2 ones
      if n % 6 == 4: kc = unroll_tail(kc)
      kc = apply_opt(kc, Opt("UPCAST", i, 3), device)
    else: return k
    check_pressure(kc, device)
    return kc
  except OptError: return k

def _odd_tile(k: LoweredKernel, w: int, device: Target) -> LoweredKernel | None:
  """Sizes the tiles don't divide (primes, 1000 x 61...): cut the contiguous output loop at its last multiple of the
  vector tile (PAD) and vectorize the main part, and the same for the rows of a matmul-like kernel when they are not the
  outermost loop of a threaded kernel (a remainder beside the threaded loop would run on every core)."""
  if not k.global_ranges: return None
  loads, reduce = kernel_loads(k), bool(k.reduce_ranges())
  if not reduce and len(k.sink.src) != 1: return None
  for j in reversed(range(len(k.global_ranges))):
    rj = k.global_ranges[j]
    n = rj.src[0].arg
    contiguous = any(stride_of(ld.src[1], rj) == 1 for ld in loads) if reduce else stride_of(k.sink.src[0].src[1], rj) == 1
    if not contiguous or n < 2 * w or n % w == 0: continue
    uj = VEC_UNROLL if reduce and n >= 2 * w * VEC_UNROLL else 1
    opts = [Opt("PAD", j, w * uj), Opt("VECTOR", j, w)] + ([Opt("UPCAST", j, uj)] if uj > 1 else [])
    if reduce:
      i = next((i for i, ri in enumerate(k.global_ranges) if i != j and ri.src[0].arg >= UPCAST_I and
                any(stride_of(ld.src[1], rj) == 1 and stride_of(ld.src[1], ri) == 0 for ld in loads)), None)
      if i is not None:
        ni = k.global_ranges[i].src[0].arg
        if ni % UPCAST_I == 0: opts.append(Opt("UPCAST", i, UPCAST_I))
        elif i > 0 or device.ncores == 1: opts += [Opt("PAD", i, UPCAST_I), Opt("UPCAST", i, UPCAST_I)]
    try: return apply_opts(k, opts, device)
    except OptError:
      try: return apply_opts(k, opts[:2], device)
      except OptError: return None
  return None

# ***** the DEFAULT opt: this heuristic's vectorization as one step of BEAM's search *****

def apply_default(k: LoweredKernel, target: Target) -> LoweredKernel:
  """A new kernel: the heuristic's vectorization of the unoptimized kernel `k` (packed matmul tile, conv tile, matmul
  tile, vector reduction or vector elementwise; no thread split and no extra rows: BEAM reaches those by THREAD/UPCAST).
  Raises OptError when `k` was optimized already or there is nothing to vectorize."""
  opt, w_max = Opt(OptKind.DEFAULT), target.lanes
  k = copy_kernel(k)
  check_opt(not k.applied_opts and k.threaded is None, opt, k, "the default heuristic applies only to an unoptimized kernel")
  check_opt(w_max > 1 and not target.gpu and all(dt.scalar is dtypes.float32 for dt in k.buf_dtypes), opt, k, "no float32 vectors on this device/kernel")
  k = channels_innermost(k, target)
  before = list(k.global_ranges)
  if (kc := packed_matmul_tile(k, target, thread=False)) is not None: k = kc
  elif (kc := conv_tile(k, w_max, target)) is not None: k = kc
  elif not _matmul_tile(k, w_max, target): check_opt(_reduce_vectors(k, w_max, target) or _elementwise_vectors(k, w_max), opt, k, "the heuristic finds nothing to vectorize")
  replace_global(k, before)
  check_pressure(k, target, opt)
  return k

def apply_opts(k: LoweredKernel, opts, target: Target) -> LoweredKernel:
  """`k` with every opt of `opts` applied in order: DEFAULT by apply_default, the others by compiler/opt/apply.py."""
  for o in opts: k = apply_default(k, target) if o.kind is OptKind.DEFAULT else apply_opt(k, o, target)
  return k
