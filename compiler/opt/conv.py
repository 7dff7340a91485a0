"""Default opts for convolution-like kernels (a reduction that slides a window along its innermost output loop).

conv2d copies its padded input into a buffer of its own, so its kernel reads without border checks: when the output
row is a multiple of the vector width it takes the matmul register tile (compiler/opt/heuristic.py); otherwise `window_tile`
covers the row with a few vectors, the last one overlapping the one before it (they store equal values), so odd widths
(28, 14, 56...) still run full-width vectors. Kernels that keep the border checks (a padded view fed straight into a
windowed reduction) get `conv_tile`: the border vectors keep their gates, the inner ones read without them, and the
row loop is peeled (compiler/opt/peel.py) so its middle piece runs without comparisons. A conv that the frontend laid
out along its output channels (its weight contiguous along them) but that stores channels-first has its channel loop
moved innermost first (channels_innermost), so it takes the same channel tile as one that stores channels-last."""
from __future__ import annotations
from compiler.dtypes import dtypes
from compiler.lower import LoweredKernel
from compiler.opt.base import Opt, OptError, copy_kernel
from compiler.opt.apply import UPCAST_I, apply_opt, apply_opts, check_pressure, kernel_loads, stride_of
from compiler.opt.peel import MAX_PEELS, peel_points, peel_range, _affine, _pieces
from compiler.target import Target
from compiler.uop import UOp, Ops, substitute
from compiler.vectorize import vectorize

WINDOW_VECS = 4          # at most this many (overlapping) vectors cover a row
ROW_LANE_USE_MIN = 0.8   # below this share of useful lanes in the row tile, the output channels are the vectors

def row_lane_use(n: int, lanes: int) -> float:
  """The share of vector lanes that compute outputs when a conv's output row of n pixels is vectorized on a target of
  `lanes` float32 lanes (window_tile: overlapping full vectors, or for a row shorter than one vector half- or
  quarter-width ones, each costing a full-width instruction). The frontend runs a conv whose row uses under
  ROW_LANE_USE_MIN of them along its output channels (frontend/nn_ops.py _short_odd_rows).

  >>> [row_lane_use(n, 16) for n in (32, 24, 20, 8)], row_lane_use(20, 8)
  ([1.0, 0.75, 0.625, 0.5], 0.8333333333333334)
  """
  if n % lanes == 0: return 1.0
  v = next((v for v in (lanes, lanes // 2, lanes // 4) if 4 <= v <= n), 1)
  return n / (-(-n // v) * lanes)

def channels_innermost(k: LoweredKernel, device: Target) -> LoweredKernel:
  """A conv whose innermost output loop is its sliding row (it stores channels-first: frontend/nn_ops.py _conv_fwd_cout
  with fused_store) and that has an output loop the sliding loads ignore, along which another load is contiguous and
  which fills whole vectors (the output channels, the weight laid out channels-last for them): a copy with that loop
  moved innermost, the others in their order, so the matmul tile takes the channels as its vectors and the columns as
  its rows, as for the channels-last conv; the vectorizer then scatters each accumulator's lanes over the channels'
  planes (the C compiler transposes neighbouring columns' values in registers and stores whole rows of them). That
  replaces the channels-last conv's transposing copy of its output (a full read and write of it: the beautiful_mnist
  step on AVX-512, one core, CPU time, minima of 12 alternating: 103.8 -> 101.1 ms). A conv without such a loop (its
  weight in the torch layout, a bias fused in not counting), or with no other loop for the tile's rows (13 x 13 outputs of one image: neither 4, 3
  nor 5 divides them), is returned as it is: its row is vectorized (window_tile or the matmul tile)."""
  if device.gpu or len(k.global_ranges) < 2 or not k.reduce_ranges() or k.nests or k.depths or has_gates(k): return k
  rj = k.global_ranges[-1]
  if not _window_loop(k, rj): return k
  w, loads, rr = device.lanes, kernel_loads(k), k.reduce_ranges()
  slide = [ld for ld in loads if stride_of(ld.src[1], rj) == 1]
  # (the weight: read along the reduction; a bias fused in, contiguous along the channels too, is not one)
  taps = [ld for ld in loads if any(stride_of(ld.src[1], r) not in (0, None) for r in rr)]
  for i, g in enumerate(k.global_ranges[:-1]):
    if g.src[0].op is Ops.CONST and g.src[0].arg % w == 0 and all(stride_of(ld.src[1], g) == 0 for ld in slide) and \
       any(stride_of(ld.src[1], g) == 1 for ld in taps):
      # (the rows: a loop the channel-contiguous weight does not move with, of a size the matmul tile unrolls)
      vec = [ld for ld in taps if stride_of(ld.src[1], g) == 1]
      if not any(r is not g and r.src[0].op is Ops.CONST and any(r.src[0].arg % d == 0 for d in (UPCAST_I, 3, 5)) and
                 any(stride_of(ld.src[1], r) == 0 for ld in vec) for r in k.global_ranges): return k
      k = copy_kernel(k)
      k.global_ranges = k.global_ranges[:i] + k.global_ranges[i + 1:] + [g]
      return k
  return k
WINDOW_ROWS = (8, 4, 2)  # output channels per tile, the largest the registers allow (accumulators = vectors x rows)

def overlap_vectors(k: LoweredKernel, rj: UOp, wv: int) -> LoweredKernel:
  """A copy of `k` with output loop rj (size n, n >= wv) replaced by ceil(n/wv) vectors of wv lanes starting at
  0, wv, 2*wv... and the last one at n - wv: it overlaps the one before, whose values it stores again (the same ones,
  so the result is unchanged), and no lane reaches past the row.

  >>> from compiler.lazy import LazyBuffer
  >>> from compiler.schedule import create_schedule
  >>> from compiler.lower import lower
  >>> x = LazyBuffer.empty((4, 28), dtypes.float32, "CPU"); x.buffer = object()
  >>> k = lower(create_schedule([x.alu(Ops.ADD, x)])[0].ast)
  >>> overlap_vectors(k, k.global_ranges[-1], 16).applied_opts[-1][2:]
  (16, (0, 12))
  """
  n = rj.src[0].arg
  lane = UOp(Ops.LANE, dtypes.int32, (), wv)
  starts = [min(u * wv, n - wv) for u in range(-(-n // wv))]
  stores = [substitute(s, {rj: UOp.const(dtypes.int32, st) + lane}) if rj in s.toposort() else s for st in starts for s in k.sink.src]
  k = copy_kernel(k)
  k.sink = vectorize(UOp(Ops.SINK, None, tuple(dict.fromkeys(stores))), lane)
  k.global_ranges = [r for r in k.global_ranges if r is not rj]
  k.applied_opts.append(("OVERLAP_VECTOR", rj.arg[0], wv, tuple(starts)))
  return k

def _window_loop(k: LoweredKernel, rj: UOp) -> bool:
  """Some load slides along rj: contiguous in rj and moving by one with a reduction loop too (x[ox + kx])."""
  return any(stride_of(ld.src[1], rj) == 1 and any(stride_of(ld.src[1], r) == 1 for r in k.reduce_ranges()) for ld in kernel_loads(k))

def window_tile(k: LoweredKernel, w: int, device: Target) -> LoweredKernel | None:
  """An ungated convolution whose output row (size n) is not a multiple of the vector width: the row as at most
  WINDOW_VECS overlapping vectors of the widest width that fits (overlap_vectors), times WINDOW_ROWS rows of an output
  loop whose sliding load does not move with it (output channels: each loaded vector serves every row)."""
  if len(k.global_ranges) < 2 or not k.reduce_ranges() or k.nests or has_gates(k): return None
  rj = k.global_ranges[-1]
  n = rj.src[0].arg
  wv = next((x for x in (w, w // 2, w // 4) if x >= 4 and x <= n and -(-n // x) <= WINDOW_VECS), None)
  if wv is None or n % wv == 0 or not _window_loop(k, rj): return None   # (multiples: the matmul tile)
  loads = [ld for ld in kernel_loads(k) if stride_of(ld.src[1], rj) == 1]
  rows = next((ri for ri in k.global_ranges[:-1] if all(stride_of(ld.src[1], ri) == 0 for ld in loads)), None)
  try: kv = overlap_vectors(k, rj, wv); check_pressure(kv, device)
  except OptError: return None
  if rows is None: return kv
  i = kv.global_ranges.index(rows)
  for u in WINDOW_ROWS:
    if rows.src[0].arg % u == 0:
      try: return apply_opt(kv, Opt("UPCAST", i, u), device)
      except OptError: continue
  return kv

def has_gates(k: LoweredKernel) -> bool:
  """Some load of k is gated (a padded view read in place).

  >>> from compiler.lazy import LazyBuffer
  >>> from compiler.schedule import create_schedule
  >>> from compiler.lower import lower
  >>> x = LazyBuffer.empty((4, 8), dtypes.float32, "CPU"); x.buffer = object()
  >>> [has_gates(lower(create_schedule([y.alu(Ops.ADD, y)])[0].ast)) for y in (x, x.pad(((0, 0), (1, 1))))]
  [False, True]
  """
  return any(ld.op is Ops.LOAD and len(ld.src) > 2 for ld in kernel_loads(k))

def gated_row_vector(n: int, w: int) -> int | None:
  """The vector width conv_tile covers a gated output row of n pixels with on a CPU of w float32 lanes: 3 or 4 vectors
  (the first and last keep their gates, the middle ones read without), the narrower half or quarter width first, the
  full width last (AVX2's 8 lanes over rows of 24 or 32: half-width vectors would be 6 or 8 of them, too many to
  unroll, and the row ran as scalars: a depthwise 3x3 over 32x32 read in place, 2 cores, kernel time 1.25 -> 0.88 ms).
  None: conv_tile does not take the row (a kernel reading a padded view in place would run without vectors).

  >>> [gated_row_vector(n, 16) for n in (32, 24, 16, 64, 28)], [gated_row_vector(n, 8) for n in (32, 24, 16, 28)]
  ([8, 8, 4, 16, None], [8, 8, 4, None])
  """
  return next((x for x in (w // 2, w // 4, w) if x >= 4 and n % x == 0 and 3 <= n // x <= 4), None)

def conv_tile(k: LoweredKernel, w: int, device: Target) -> LoweredKernel | None:
  """A convolution-like kernel (a reduction whose loads along the innermost output loop rj are gated by comparisons
  of rj: the padding border): rj as vectors narrower than the machine's (w/2 lanes), all of rj's vectors unrolled, so
  that the inner vectors read without gates (their lanes can't reach the border) and only the first and last compare;
  plus 4 rows of another output loop whose loads don't move with it (output channels), like the matmul tile.
  Ungated convolutions with odd rows go to window_tile."""
  if len(k.global_ranges) < 2 or not k.reduce_ranges(): return None
  if not has_gates(k): return window_tile(k, w, device) or depthwise_tile(k, w, device)
  rj = k.global_ranges[-1]
  n, j = rj.src[0].arg, len(k.global_ranges) - 1
  if not peel_points(k, rj): return None
  if (wv := gated_row_vector(n, w)) is None: return None
  loads = kernel_loads(k)
  if not any(stride_of(ld.src[1], rj) == 1 for ld in loads): return None
  rows = next((i for i, ri in enumerate(k.global_ranges[:-1]) if ri.src[0].arg % UPCAST_I == 0 and
               any(stride_of(ld.src[1], rj) == 1 and stride_of(ld.src[1], ri) == 0 for ld in loads)), None)
  # as many rows as the registers allow (4 vectors x 4 rows of accumulators fit AVX-512's 32, not AVX2's 16)
  for ui in ((UPCAST_I, UPCAST_I // 2) if rows is not None else (1,)):
    try: return apply_opts(k, [Opt("VECTOR", j, wv), Opt("UPCAST", j, n // wv)] + ([Opt("UPCAST", rows, ui)] if rows is not None else []), device)
    except OptError: continue
  return None

def peel_default(k: LoweredKernel, device: Target) -> LoweredKernel:
  """Peel an output loop (the threaded one or inside it) of a kernel with a reduction whose body compares that loop's index
  against constants (a padded convolution's rows): the middle piece runs without the comparisons. Of several such
  loops (one kernel is peeled once), the one whose biggest piece holds the largest share of its iterations
  (peel_share), the innermost of ties: a strided conv read in place compares its output rows (16: pieces 1 + 15) and
  the two halves of its output columns (pieces 1 + 1); peeled at the rows, 15/16 of its taps read without gates."""
  if device.gpu or not k.reduce_ranges() or k.nests: return k
  best, share = None, 0.0
  for i in reversed(range(len(k.global_ranges))):
    g = k.global_ranges[i]
    if (pts := peel_points(k, g)) and (sh := peel_share(g.src[0].arg, pts)) > share: best, share = i, sh
    if g is k.threaded: break   # (the threaded loop itself may be peeled: each chunk runs its share of the pieces)
  if best is None: return k
  try: k = apply_opt(k, Opt("PEEL", best), device)
  except OptError: return k
  return peel_fixed_reductions(k) if device.vector_registers <= 16 else k

def peel_fixed_reductions(k: LoweredKernel) -> LoweredKernel:
  """k (its output loop peeled) with each reduction loop cut whose comparisons, in its piece, are against a fixed
  value (the first output row's kernel-row gate, 0 < 0*s + ky: the tap row ky = 0 reads the padding row), when some
  gated load is a scalar broadcast of a matmul-like tile (a conv vectorized along its output channels, read in place;
  not a depthwise conv's conv_tile, which does not spill). Otherwise clang 19
  unrolls the kernel-column loop under the row gate's branches and hoists the gated broadcasts of all its taps above
  the FMAs: 12 broadcasts + 8 accumulators spill AVX2's 16 registers (16 vector moves). Cut, the zero row's taps fold
  away and the rest read ungated, as in the middle piece."""
  if not k.applied_opts or k.applied_opts[0][0] != "TILE": return k
  if not any(ld.op is Ops.LOAD and len(ld.src) > 2 and ld.dtype.count == 1 for ld in kernel_loads(k)): return k
  for _ in range(MAX_PEELS):
    if (r := next((r for r in k.reduce_ranges() if peel_points(k, r) and _fixed_compares(k, r)), None)) is None: break
    k = peel_range(k, r)
  return k

def _fixed_compares(k: LoweredKernel, r: UOp) -> bool:
  """Every comparison of loop r's index is against a value that no other loop moves (a*r + c < d, c fixed)."""
  moved: set[UOp] = set()   # the nodes r reaches, found in one pass (sources come first in toposort)
  for u in k.sink.toposort():
    if u is r or any(s in moved for s in u.src): moved.add(u)
  cmps = [u for u in moved if u.op in (Ops.CMPLT, Ops.CMPNE) and u.src[0].dtype is not None and u.src[0].dtype.count == 1]
  def fixed(x: UOp) -> bool: return (af := _affine(x, r)) is not None and af[1].vmin == af[1].vmax
  return bool(cmps) and all(fixed(c.src[0] if c.src[0] in moved else c.src[1]) for c in cmps)

def peel_share(n: int, pts: list[int]) -> float:
  """The share of a loop's n iterations in its biggest piece when cut at pts.

  >>> peel_share(16, [1]), peel_share(2, [1]), peel_share(32, [1, 31])
  (0.9375, 0.5, 0.9375)
  """
  return max(hi - lo for lo, hi in _pieces(n, pts)) / n

DEPTHWISE_ROWS = (4, 2)   # image rows per tile of a depthwise conv, the most the registers allow

def depthwise_tile(k: LoweredKernel, w: int, device: Target) -> LoweredKernel | None:
  """A window reduction with no output loop that its sliding load ignores (depthwise: every output channel reads its
  own input channel, so no row of the matmul tile shares a load): the output row rj as vectors (two when it holds
  them), times a few rows of the output loop right outside rj that moves the sliding load by whole rows (the image
  rows: row oy + 1's window overlaps row oy's, so their loads are shared). Other convs (an output loop the sliding
  load ignores exists) get the matmul tile or window_tile instead."""
  if len(k.global_ranges) < 2 or not k.reduce_ranges() or k.nests or has_gates(k): return None
  j = len(k.global_ranges) - 1
  rj, n = k.global_ranges[j], k.global_ranges[j].src[0].arg
  wv = next((x for x in (w, w // 2) if x >= 4 and n % x == 0), None)
  if wv is None or not _window_loop(k, rj): return None
  loads = [ld for ld in kernel_loads(k) if stride_of(ld.src[1], rj) == 1]
  if any(stride_of(ld.src[1], ri) == 0 for ld in loads for ri in k.global_ranges[:-1]): return None   # rows exist: not ours
  opts = [Opt("VECTOR", j, wv)] + ([Opt("UPCAST", j, 2)] if n % (2 * wv) == 0 else [])
  ri = k.global_ranges[j - 1]
  for u in DEPTHWISE_ROWS:
    if ri.src[0].arg % u == 0 and ri.src[0].arg > u and all(stride_of(ld.src[1], ri) not in (0, None) for ld in loads):
      try: return apply_opts(k, opts + [Opt("UPCAST", j - 1, u)], device)
      except OptError: continue
  try: return apply_opts(k, opts, device)
  except OptError: return None

def window_rows(k: LoweredKernel, before: list[UOp], device: Target) -> LoweredKernel:
  """A conv vectorized along its output channels whose tile (rows: output columns ox, broadcast loads of the input;
  vectors: channels, loads of the weight) got no more rows of its own loop (20 columns: a tile of 4 leaves 5, which
  neither 4 nor 2 divides): 2 rows of the output loop right outside, whose input the broadcasts also slide along (the
  image rows oy) while the weight vectors stay, so each weight vector serves twice the accumulators (4 x 2 x 2 vectors
  = 16, not 8). Kept where the registers hold them (AVX-512's 32; AVX2's 16 refuse). Measured on the beautiful_mnist
  5x5 32->32 forward over 20x20 rows, AVX-512 one core: 18.3 ms with the 6 x 2 tile cut at rows 18 + 2, 15.2 ms as
  5 x 2 x 2 (this with 4 columns: 15.8). Returns k itself when nothing applies."""
  tile = k.applied_opts[-1] if k.applied_opts else None
  if tile is None or tile[0] != "TILE" or tile[1] is None or tile[5] < 2 or device.gpu: return k
  ri = next((r for r in before if r.arg[0] == tile[1]), None)
  loads, rr = kernel_loads(k), k.reduce_ranges()
  bcast = [ld for ld in loads if ld.dtype.count == 1 and any(stride_of(ld.src[1], r) not in (0, None) for r in rr)]
  vecs = [ld for ld in loads if ld.dtype.count > 1]
  if ri is None or not bcast or not vecs or ri not in before: return k
  i = before.index(ri)
  if i == 0 or i > len(k.global_ranges) - 1: return k
  g = k.global_ranges[i - 1]   # the loop right outside the tile's rows (same position: the tile keeps the loop order)
  if (i - 1 == 0 and device.ncores > 1) or g.src[0].op is not Ops.CONST or g.src[0].arg % 2 or g.src[0].arg < 4: return k
  if any(stride_of(ld.src[1], g) in (0, None) for ld in bcast) or any(stride_of(ld.src[1], g) != 0 for ld in vecs): return k
  try: return apply_opt(k, Opt("UPCAST", i - 1, 2), device)
  except OptError: return k
