"""Packed operands for big matrix products on CPUs (a schedule pass run before the kernels are built).

A register-tiled matmul reads, at every step of its reduction loop k, MR values of A (one per row of its tile) and NR
values of B (one vector row of its tile). Read in place, A's values sit K floats apart and B's rows N floats apart: for
the power-of-two sizes that matter, every one of those lines falls in the same cache set, and the tile's operands do
not stay in L1/L2 however small they are. So before the product, two copy kernels *pack* them:

  PA[it, k, l] = A[it*MR + l, k]    (rows padded with zeros to a multiple of MR)
  PB[jt, k, l] = B[k, jt*NR + l]

and the product reads PA[i // MR, k, i % MR] and PB[j // NR, k, j % NR]: each tile step is one contiguous read of MR
floats and one of NR, and a tile's operands are two sequential streams. The copies cost O(N^2) against O(N^3). A B small
enough to stay in L2 as it is, rows contiguous, is read in place instead (b_in_place): its copy would cost more than
it saves; beside it, so is a small A (a_in_place: on 16 lanes when a tile height divides its rows, on 8 lanes whatever
they are, the rows the tile leaves being one smaller tile): one launch, no copy.
The product's SINK carries ("packed_matmul", MR, NR, JB): compiler/opt/matmul.py tiles it to match the layout.
When M is not a multiple of MR the product computes the padded rows too, into room past the end of its output
(ScheduleItem.alloc_nbytes), which only works when nothing else in the kernel is read per row. Any other product (N not
whole vectors, such rows, an epilogue the tile can't hold, a bmm) goes through a scratch: compiler/pack_pad.py.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.dtypes import dtypes
>>> from compiler.schedule import create_schedule
>>> a, b = (LazyBuffer.empty((256, 256), dtypes.float32, "CPU") for _ in range(2))
>>> a.buffer = b.buffer = object()
>>> mm = a.reshape((256, 1, 256)).expand((256, 256, 256)).alu(Ops.MUL, b.permute((1, 0)).reshape((1, 256, 256)).expand((256, 256, 256))).r(Ops.ADD, (2,))
>>> [si.name for si in pack_matmuls(create_schedule([mm]), lambda device: 8)]   # (B, 256 KiB, read in place; A too, a_in_place)
['r_256_256_256']
>>> import compiler.pack as pack; pack.A_IN_PLACE = 0   # (A packed, rows padded to the 6-row tile of 8 lanes)
>>> [si.name for si in pack_matmuls(create_schedule([mm]), lambda device: 8)]
['E_43_256_6', 'r_258_256_256']
>>> pack.A_IN_PLACE = L2_PANEL
"""
from __future__ import annotations
from dataclasses import dataclass
from collections.abc import Callable
from compiler import settings
from compiler.dtypes import dtypes
from compiler.memo import memo_put
from compiler.lazy import LazyBuffer
from compiler.pack_avx2 import avx2_packs, avx2_tile_shape
from compiler.pack_avx512 import avx512_packs
from compiler.pack_batch import batched_plan
from compiler.pack_pad import ScratchPlan, epilogue_fits_tile, scratch_plan
from compiler.pack_strided import strided_b_packs, transposed_a_packs
from compiler.schedule import ScheduleItem, ast_shape, kernel_name
from compiler.uop import UOp, Ops, substitute
from compiler.view import ShapeTracker, View, prod

PACK_MIN = 256          # every one of M, N, K at least this: smaller products fit the caches as they are
L2_PANEL = 1 << 20      # bytes of B the tile columns of one jb block may hold (half of a 2 MiB L2)
JB_MAX = 4              # column tiles per jb block at most (compiler/opt/matmul.py: the tiles that reuse one A panel)
B_IN_PLACE = L2_PANEL   # a B contiguous along N of at most this many bytes is read where it is (b_in_place)
A_IN_PLACE = L2_PANEL   # an A contiguous along K of at most this many bytes too, beside such a B (a_in_place)
# On 8 lanes B's copy walks PACK_B_GROUP column tiles of a row of B per step (_pack_ast), not one: a tile's 16 floats
# are one line of B, and a copy walking down B one line a row, 4 KiB apart at N=1024, gets no help from the hardware
# prefetchers (each line in another page); 4 tiles read 4 neighbouring lines a row. The copy alone, all its chunks on
# one thread, thread CPU time, CPU_ISA=x86-64-v3, minima of 20-30 taking turns at load 3.6-3.9 (other jobs): 1024^3
# 0.79 -> 0.65 ms and 0.80 -> 0.63, 2048^3 3.25 -> 2.92; 8 tiles 0.64, all of a row (k outside the tiles) 0.61. Four
# keep each core's chunk of the copy the columns its chunk of the product reads (8 tiles at 1024: compiler/opt/matmul.py).
PACK_B_GROUP = 4
A8_IN_PLACE = 1         # 0: on 8 lanes A is always packed (a_in_place; bench/matmul_ab.py A8_IN_PLACE=0 measures it)
A8_MIN_JB = 2           # ... and only when a block of at least this many column tiles reuses each A panel

def tile_shape(lanes: int, m: int, n: int, pad_rows: bool) -> tuple[int, int] | None:
  """(MR, NR) for `lanes`-float vectors: NR = 2 vectors, MR rows so that MR*2 accumulators + 2 B vectors + a broadcast
  fit the vector registers (32 with AVX-512, 16 with AVX2: compiler/pack_avx2.py). None when N is not a multiple of a vector."""
  if lanes == 8: return avx2_tile_shape(m, n, pad_rows)
  if lanes < 8 or n % lanes: return None
  nr = 2 * lanes if n % (2 * lanes) == 0 else lanes
  vec_regs = 32 if lanes >= 16 else 16
  mr_max = (vec_regs - nr // lanes - 2) // (nr // lanes)   # 14 x 2 vectors on AVX-512, 6 x 2 on AVX2
  for mr in (12, 8, 6, 4) if lanes >= 16 else (6, 4):
    if mr <= mr_max and (pad_rows or m % mr == 0): return mr, nr
  return None

def _single_view(u: UOp) -> View | None:
  st: ShapeTracker = u.arg[1]
  return st.views[0] if len(st.views) == 1 and st.views[0].mask is None else None

def _matmul(ast: UOp) -> tuple[UOp, UOp, UOp] | None:
  """(reduce, load of A, load of B) when the kernel is a plain product over shape (M, N, K): one REDUCE_AXIS ADD over
  axis 2 of MUL(LOAD, LOAD), A constant along N and B along M, both float32 single views without masks."""
  reds = [u for u in ast.toposort() if u.op is Ops.REDUCE_AXIS]
  if len(reds) != 1 or reds[0].arg != (Ops.ADD, (2,)) or reds[0].dtype is not dtypes.float32: return None
  mul = reds[0].src[0]
  if mul.op is not Ops.MUL or any(s.op is not Ops.LOAD or s.dtype is not dtypes.float32 for s in mul.src): return None
  views = [_single_view(s) for s in mul.src]
  if any(v is None or len(v.shape) != 3 for v in views): return None
  a, b = [s for s, v in zip(mul.src, views) if v.strides[1] == 0 and v.strides[0] != 0], [s for s, v in zip(mul.src, views) if v.strides[0] == 0 and v.strides[1] != 0]
  if len(a) != 1 or len(b) != 1: return None
  return reds[0], a[0], b[0]

def _pack_ast(view: View, rows: bool, tiles: int, k: int, t: int, size: int, group: int = 0) -> UOp:
  """The copy kernel PX[tt, kk, l] = X[tt*t + l, kk] (rows=True, X = A) or X[kk, tt*t + l] (B), zero past `size`.
  `group` > 1 (dividing `tiles`): the kernel's loops run over (tiles/group, k, group, t), so each step of kk copies
  group*t contiguous floats of X's row kk (B: PACK_B_GROUP)."""
  s_mn, s_k = (view.strides[0] if rows else view.strides[1]), view.strides[2]
  st = ShapeTracker((View.create((size, k), (s_mn, s_k), view.offset),)).pad(((0, tiles * t - size), (0, 0)))
  st, out = st.reshape((tiles, t, k)).permute((0, 2, 1)), ShapeTracker.from_shape((tiles, k, t))
  if group > 1 and tiles % group == 0 and tiles > group:
    st, out = (x.reshape((tiles // group, group, k, t)).permute((0, 2, 1, 3)) for x in (st, out))
  return UOp(Ops.SINK, None, (UOp(Ops.STORE, None, (UOp(Ops.LOAD, dtypes.float32, (), (1, st)),), (0, out)),))

def _packed_view(tiles: int, k: int, t: int, rows: bool, shape: tuple[int, int, int]) -> ShapeTracker:
  """How the product reads the packed PX (tiles, k, t) at its index (i, j, kk)."""
  st = ShapeTracker.from_shape((tiles, k, t)).permute((0, 2, 1)).reshape((tiles * t, k))
  st = st.shrink(((0, shape[0] if rows else shape[1]), (0, k)))
  return st.reshape((shape[0], 1, k)).expand(shape) if rows else st.reshape((1, shape[1], k)).expand(shape)

@dataclass(frozen=True)
class _Plan:
  packs: tuple       # per operand: (pack kernel AST, packed shape, slot it reads, slot of the product it fills (0: a new
                     # one), kernel name)
  ast: UOp           # the product over the packed operands
  alloc_nbytes: int | None
  name: str          # the product's kernel name (names made once here, not at every realize: each walks its AST)

_plans: dict[tuple, _Plan | ScratchPlan | None] = {}
def plan_key(ast: UOp, lanes: int) -> tuple:
  """What a packing plan is a function of: the AST, the vector width and this module's tuning constants (the key of
  _plans; frontend/engine.py checks a plan it kept is still the cached one under it)."""
  return (ast, lanes, PACK_MIN, B_IN_PLACE, A_IN_PLACE, A8_IN_PLACE, A8_MIN_JB, PACK_B_GROUP, JB_MAX)

def packs_item(si: ScheduleItem) -> bool:
  """Would pack_item look for a plan for `si` (a kernel that writes no buffer in place and has no symbolic sizes)?"""
  return si.kind == "kernel" and si.ast is not None and si.assign_target is None and not si.var_vals

def _plan(ast: UOp, lanes: int) -> _Plan | ScratchPlan | None:
  """How to pack the product `ast` (None: leave it as it is); a function of the AST alone, so it is computed once."""
  if (key := plan_key(ast, lanes)) in _plans: return _plans[key]
  flat = merge_leading_dims(ast)   # (a batch of different B matrices can't merge: compiler/pack_batch.py)
  p = batched_plan(ast, lanes, lambda m, n, k: big_enough(m, n, k, lanes)) if flat is None else _make_plan(flat, lanes)
  # bounded as the kernel cache is (a plan keeps its ASTs alive; a process meeting ever new product shapes would keep
  # them all): a full table is emptied (compiler/memo.py) and its plans made again when asked
  return memo_put(_plans, key, p, maxsize=settings.kernel_cache_max())

def merge_leading_dims(ast: UOp, keep: int = 2) -> UOp | None:
  """A product over (*lead, M, N, K) whose lead dims merge into M in every view (x of shape (B, T, C) @ W: the rows of
  all B matrices are one (B*T, C) matrix) as the same kernel over (B*T, N, K); the AST itself when it has no lead
  dims, None when some view can't merge them (a batch of different B matrices: a batched product). `keep`: the dims
  left after the merged one (3: the lead dims merge into one batch dim, (B, H, M, N, K) -> (B*H, M, N, K))."""
  reds = [u for u in ast.toposort() if u.op is Ops.REDUCE_AXIS]
  if len(reds) != 1 or len(shape := ast_shape(reds[0].src[0])) <= keep + 1: return ast
  nl = len(shape) - keep   # dims 0..nl-1 become one
  def merged(st: ShapeTracker) -> ShapeTracker | None:
    if len(st.shape) < nl + 1: return None
    new = st.reshape((prod(st.shape[:nl]),) + st.shape[nl:])
    return new if len(new.views) == len(st.views) else None   # (a second view: the dims did not merge)
  memo: dict[UOp, UOp | None] = {}
  def rebuild(u: UOp) -> UOp | None:
    if u in memo: return memo[u]
    srcs = [rebuild(s) for s in u.src]
    out: UOp | None = None
    if all(s is not None for s in srcs):
      if u.op in (Ops.LOAD, Ops.STORE):
        if (st := merged(u.arg[1])) is not None: out = UOp(u.op, u.dtype, tuple(srcs), (u.arg[0], st))
      elif u.op is Ops.VIEW:
        if (st := merged(u.arg)) is not None: out = UOp(u.op, u.dtype, tuple(srcs), st)
      elif u.op is Ops.REDUCE_AXIS: out = UOp(u.op, u.dtype, tuple(srcs), (u.arg[0], tuple(a - nl + 1 for a in u.arg[1])))
      elif u.op is not Ops.INDEX: out = UOp(u.op, u.dtype, tuple(srcs), u.arg)   # (an iota's 1-D index can't merge)
    memo[u] = out
    return out
  return rebuild(ast)

def b_in_place(view: View, k: int, n: int) -> bool:
  """Is B read where it is, not packed? When its rows are contiguous along N (the tile's vectors are then plain loads)
  and the whole of B (K*N floats) fits in B_IN_PLACE bytes: it then stays in L2 as it is, without the conflict misses
  that a panel of rows a power of two apart meets in a bigger B, and the copy and its launch cost more than the tile
  loses (AVX-512 Xeon, 2 cores, N=512, minima on a shared host: the product 0.73-0.79 ms on packed B plus 0.08-0.11 ms
  for B's copy, against 0.76-0.89 ms reading B in place; whole realizes 1.24 against 1.53 ms). At N=1024 (4 MiB) a
  panel's 1024 rows, 4 KiB apart, would share 1/32 of L2's sets, twice as many lines per set as it has ways: packed.

  >>> b_in_place(View.create((512, 512, 512), (0, 1, 512)), 512, 512), b_in_place(View.create((1024, 1024, 1024), (0, 1, 1024)), 1024, 1024)
  (True, False)
  >>> b_in_place(View.create((512, 512, 512), (0, 512, 1)), 512, 512)   # B transposed: a vector would be a gather
  False
  """
  return view.strides[1] == 1 and k * n * 4 <= B_IN_PLACE

def a_in_place(view: View, m: int, k: int, lanes: int) -> bool:
  """Is A read where it is, beside a B read in place (b_in_place)? When its rows are contiguous along K, the whole of A
  (M*K floats) fits in A_IN_PLACE bytes, and on 16 lanes a tile of 12 or 8 rows divides M (rows can't be padded: they
  would read past A's end; tiles of 6 or 4 rows have too few accumulators). On 8 lanes (AVX2), whatever M is (at
  least 12): no tile of 8-12 rows fits 16 registers with enough accumulators (8 x 8: 9 loads per 8 FMAs, 4 x 16: 8
  accumulators), so the 6 x 16 (or 12 x 8) tile runs over the rows it divides and the rows it leaves are one smaller
  tile in the same column block (compiler/opt/matmul.py: 512 = 85 x 6 + 2); not when a block holds one column tile
  (_make_plan, A8_MIN_JB: no other tile reuses the A panel). The product is then one launch: no copy of A, no second
  kernel. Its rows are K floats apart, 2 KiB at K=512, and a 12-row panel then spreads
  over all 64 sets of a 48 KiB 12-way L1 (6 lines each), so it can stay there across the JB tiles that reuse it.
  Measured on the AVX-512 Xeon of issue 28 (2 cores, load 1.6-2.3), realize of `a @ b`, old (A packed) and new taking
  turns in one process, minima of 30-60 (ms): 512^3 1.05-1.28 -> 0.96-1.06 (numpy 1.00-1.12 in the same runs),
  384x512x512 0.75 -> 0.67, 256^3 0.215 -> 0.163, M x K x N 256x1024x256 0.57 -> 0.47, 1024x256x512 0.95 -> 0.90.
  The product alone is 2.5% slower per FLOP at 512^3 (8-row tile: 174 against 178 GFLOP/s per core, thread CPU
  time), less than the copy and its launch. On AVX2 (CPU_ISA=x86-64-v3, same host, load 3.6-4.2: other jobs; A packed
  against in place taking turns in one process, minima of 60; ms of the realize, and work: every launch's core shares
  run on one thread, thread CPU time): 512^3 1.94 -> 1.77 (work 3.20 -> 3.01), 256^3 0.377 -> 0.289 (0.406 -> 0.362),
  384x512x512 1.44 -> 1.41 (2.34 -> 2.17), 260x512x512 1.08 -> 0.94 (1.60 -> 1.51), 1024x256x512 1.90 -> 1.75
  (2.99 -> 2.90). Per tile, 512^3, the product alone on one thread (minimum of 20): 6 x 16 with a 2-row tail 3.03
  ms, packed 6 x 16 over 516 rows 3.03 (and its pack), 4 x 16 3.20, 8 x 8 3.81 (bench/matmul_tiles.py).
  Not beside a packed B: an A of up to 4 MiB read in place there cut 1024^3's work (thread CPU time of all launches)
  by 3%, but added 6-22% to 128-512 x 1024 x 1024 (K=1024: the tile's rows, 4 KiB apart, all fall in one L1 set).

  >>> a_in_place(View.create((512, 512, 512), (512, 0, 1)), 512, 512, 16), a_in_place(View.create((512, 512, 512), (512, 0, 1)), 512, 512, 8)
  (True, True)
  >>> a_in_place(View.create((260, 512, 512), (512, 0, 1)), 260, 512, 16), a_in_place(View.create((260, 512, 512), (512, 0, 1)), 260, 512, 8)
  (False, True)
  >>> a_in_place(View.create((512, 512, 512), (1, 0, 512)), 512, 512, 16)   # A transposed: its rows are not contiguous
  False
  """
  if (view.strides[2] != 1 and k != 1) or m * k * 4 > A_IN_PLACE: return False
  return (m % 12 == 0 or m % 8 == 0) if lanes == 16 else lanes == 8 and A8_IN_PLACE and m >= 12

def _in_place_view(view: View, mp: int) -> ShapeTracker:
  """B's own view (stride 0 along the rows) over the product's mp (padded) rows."""
  return ShapeTracker((View.create((mp,) + view.shape[1:], view.strides, view.offset),))

def big_enough(m: int, n: int, k: int, lanes: int) -> bool:
  """Whether an (M, N, K) product is worth packing on `lanes`-float vectors: all of M, N, K at least PACK_MIN, or a
  small batch against a big matrix as compiler/pack_avx2.py (8 lanes) and compiler/pack_avx512.py (16) measured."""
  return min(m, n, k) >= PACK_MIN or (avx2_packs(m, n, k) if lanes == 8 else lanes == 16 and avx512_packs(m, n, k))

def _make_plan(ast: UOp, lanes: int) -> _Plan | ScratchPlan | None:
  if (mm := _matmul(ast)) is None: return None
  red, la, lb = mm
  m, n, k = la.arg[1].shape
  if not big_enough(m, n, k, lanes) and not strided_b_packs(m, n, k, lb.arg[1].views[0].strides[1]) and \
     not transposed_a_packs(m, n, k, va.strides[2] if (va := _single_view(la)) is not None else 1): return None
  # padded rows are computed into room past the output's end: fine unless something else is read per output row
  loads = [u for u in ast.toposort() if u.op is Ops.LOAD]
  out_st: ShapeTracker = ast.src[0].arg[1]
  val = ast.src[0].src[0]
  # the product stored as it is, or through a reshape to (M, N) (`(a @ b).contiguous()`): rows are then the outer
  # dimension of the output, and padded rows land past its end
  plain = val is red or (val.op is Ops.VIEW and val.src[0] is red and val.arg.contiguous and val.arg.shape == (m, n))
  pad_ok = len(ast.src) == 1 and len(loads) == 2 and plain and out_st.contiguous and out_st.shape in ((m, n, 1), (m, n))
  if (tile := tile_shape(lanes, m, n, pad_ok)) is None or not epilogue_fits_tile(val): return scratch_plan(ast, red, la, lb, lanes)   # (compiler/pack_pad.py)
  mr, nr = tile
  mt, nt = -(-m // mr), n // nr
  jb = max(1, min(JB_MAX, L2_PANEL // (k * nr * 4), nt // 2))
  while nt % jb: jb -= 1
  mp, nslots = mt * mr, max(u.arg[0] for u in loads)
  packs, new_loads = [], {}
  # (B read in place still reads its slot: a @ a then packs A into a new one)
  in_place = b_in_place(vb := _single_view(lb), k, n)
  # (8 lanes, one column tile a block: the A panel a tile reads would be reused by no other, and A, read again for
  # every column tile, measured slower than packed: 1000 x 256 x 1000, realize min 9.6 against 6.1 ms)
  a_here = in_place and a_in_place(_single_view(la), m, k, lanes) and (lanes != 8 or jb >= A8_MIN_JB)
  if a_here:   # (rows not padded: the tile's height divides M, or on 8 lanes the rows it leaves are one smaller tile)
    mr, nr = tile_shape(lanes, m, n, lanes == 8)
    mt, mp = m // mr, m
  for ld, rows, tiles, t, size in ((la, True, mt, mr, m),) * (not a_here) + ((lb, False, nt, nr, n),) * (not in_place):
    # the packed copy takes the operand's slot unless another load still reads it (a @ a): then a new one
    shared = any(u.arg[0] == ld.arg[0] and u is not ld and u not in new_loads for u in loads)
    bi = (nslots := nslots + 1) if shared else ld.arg[0]
    past = _pack_ast(_single_view(ld), rows, tiles, k, t, size, PACK_B_GROUP if lanes == 8 and not rows else 0)
    packs.append((past, (tiles, k, t), ld.arg[0], 0 if shared else bi, kernel_name(past)))
    new_loads[ld] = UOp(Ops.LOAD, dtypes.float32, (), (bi, _packed_view(tiles, k, t, rows, (mp, n, k))))
  if in_place: new_loads[lb] = lb if mp == m else UOp(Ops.LOAD, dtypes.float32, (), (lb.arg[0], _in_place_view(vb, mp)))
  if a_here: new_loads[la] = la
  new_red = UOp(Ops.REDUCE_AXIS, red.dtype, (UOp(Ops.MUL, dtypes.float32, (new_loads[la], new_loads[lb])),), red.arg)
  if mp == m: store = UOp(Ops.STORE, None, (substitute(val, {red: new_red}),), ast.src[0].arg)
  else:   # (pad_ok: val is the product, or a reshape of it to (M, N))
    pval = new_red if val is red else UOp(Ops.VIEW, val.dtype, (new_red,), ShapeTracker.from_shape((mp, n)))
    store = UOp(Ops.STORE, None, (pval,), (ast.src[0].arg[0], ShapeTracker.from_shape((mp,) + out_st.shape[1:])))
  prod_ast = UOp(Ops.SINK, None, (store,), ("packed_matmul", mr, nr, jb))
  return _Plan(tuple(packs), prod_ast, mp * n * 4 if mp != m else None, kernel_name(prod_ast))

def pack_item(si: ScheduleItem, lanes: int) -> list[ScheduleItem]:
  """`si` with its operands packed (the copy kernels first: A's, and B's unless B is read in place), or [si] unchanged
  when it is not a big float32 product."""
  if not packs_item(si) or (plan := _plan(si.ast, lanes)) is None: return [si]
  if isinstance(plan, ScratchPlan): return plan.items(si)
  inputs, items = list(si.inputs), []
  for ast, shape, src_slot, dst_slot, name in plan.packs:
    out = LazyBuffer.empty(shape, dtypes.float32, si.outputs[0].device)
    items.append(ScheduleItem(ast, [out], [si.inputs[src_slot - 1]], "kernel", name))
    if dst_slot: inputs[dst_slot - 1] = out
    else: inputs.append(out)
  return items + [ScheduleItem(plan.ast, list(si.outputs), inputs, "kernel", plan.name, alloc_nbytes=plan.alloc_nbytes)]

def pack_matmuls(items: list[ScheduleItem], lanes_of: Callable[[str], int]) -> list[ScheduleItem]:
  """The schedule with every big float32 product's operands packed; `lanes_of(device)` is the float32 vector width of
  the device's kernels (0: leave its products alone, as GPUs do)."""
  out: list[ScheduleItem] = []
  for si in items:
    lanes = lanes_of(si.outputs[0].device) if si.kind == "kernel" else 0
    out += pack_item(si, lanes) if lanes >= 8 else [si]
  return out
