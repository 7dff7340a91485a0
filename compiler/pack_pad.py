"""Packed products (compiler/pack.py) whose tile does not fit the output: computed whole tiles into a scratch buffer, then
a second kernel reads the valid part of it (and applies the epilogue).

compiler/pack.py stores the tile grid straight into the output, which needs N to be a multiple of a vector and either
the rows padded past the output's end or, with an epilogue read per row, an MR dividing M. Any other product used to
stay unpacked and ran about 10x slower than its nice neighbour (1023^3 281 ms against 28.7 ms at 1024 on AVX2, 233
against 19.4 on AVX-512: the cliff of issue 28). Here such a product is packed with B padded by zero columns to whole
NR-wide tiles and A by zero rows to whole MR-high tiles (the copy kernels already zero-fill past the operand), the
product stores its (Mp, Np) tile grid into a scratch buffer, and a "finish" kernel is the original kernel with the
product replaced by a load of scratch[:M, :N]: the epilogue (bias, relu...) runs there, per element. The finish costs
one O(M*N) pass and a launch against the O(M*N*K) product.

Np rounds N up to two vectors on 16 lanes (the 12 x 2-vector AVX-512 tile rather than a 12 x 1 one) and to one vector on
8 lanes (compiler/pack_avx2.py's 12 x 1 tile is already the fast one there).

>>> padded_columns(1023, 16), padded_columns(1000, 16), padded_columns(1023, 8), padded_columns(1001, 8)
(1024, 1024, 1024, 1008)
"""
from __future__ import annotations
import functools
from dataclasses import dataclass
from compiler.dtypes import dtypes
from compiler.lazy import LazyBuffer
from compiler.schedule import ScheduleItem, kernel_name
from compiler.uop import UOp, Ops, substitute
from compiler.view import ShapeTracker

def padded_columns(n: int, lanes: int) -> int:
  """N rounded up to the columns of whole tiles: two vectors on 16 lanes, one on 8."""
  w = 2 * lanes if lanes >= 16 else lanes
  return n + -n % w

@dataclass(frozen=True)
class ScratchPlan:
  packs: tuple[tuple[UOp, tuple[int, int, int], int], ...]   # per operand: (pack kernel AST, packed shape, slot it reads)
  product: UOp                   # PA (slot 1) x PB (slot 2) -> the scratch (Mp, Np)
  finish: UOp                    # the original kernel reading the scratch
  finish_slots: tuple[int, ...]  # the original slot of each input of the finish kernel, 0 for the scratch
  scratch: tuple[int, ...]

  @functools.cached_property
  def names(self) -> tuple[str, ...]:
    """The kernels' names (packs, product, finish), made once per plan as pack._Plan's: each walks its AST."""
    return tuple(kernel_name(ast) for ast in (*(a for a, _, _ in self.packs), self.product, self.finish))

  def items(self, si: ScheduleItem) -> list[ScheduleItem]:
    """The schedule items replacing `si`: two packs, the product into the scratch, the finish into si's outputs."""
    dev, names = si.outputs[0].device, self.names
    packed = [LazyBuffer.empty(shape, dtypes.float32, dev) for _, shape, _ in self.packs]
    items = [ScheduleItem(ast, [out], [si.inputs[slot - 1]], "kernel", nm) for (ast, _, slot), out, nm in zip(self.packs, packed, names)]
    tmp = LazyBuffer.empty(self.scratch, dtypes.float32, dev)
    items.append(ScheduleItem(self.product, [tmp], packed, "kernel", names[-2]))
    fin_inputs = [si.inputs[s - 1] if s else tmp for s in self.finish_slots]
    return items + [ScheduleItem(self.finish, list(si.outputs), fin_inputs, "kernel", names[-1])]

def epilogue_fits_tile(val: UOp) -> bool:
  """Whether the stored value `val` (the product and its epilogue) can be computed in the packed tile itself. An
  epilogue that compares (relu's backward mask `(x @ w + b > 0)`: a bool per tile element) exceeds the tile's
  register budget (compiler/opt/matmul.py's check refuses it: 289 live vectors for an 8 x 2-vector tile), and the
  packed product then got the generic opts: 43 ms instead of 1.9 for 128 x 784 x 1024 on the AVX-512 host. Such a
  product goes through the scratch, the epilogue in the finish."""
  return not any(u.op in (Ops.CMPLT, Ops.CMPNE) for u in val.toposort())

def scratch_plan(ast: UOp, red: UOp, la: UOp, lb: UOp, lanes: int) -> ScratchPlan | None:
  """How to pack the product `ast` (the reduce `red` of the loads `la` (A) and `lb` (B)) through a scratch buffer as
  above; None when no tile fits."""
  from compiler.pack import L2_PANEL, _pack_ast, _packed_view, _single_view, tile_shape   # (compiler/pack.py imports this module)
  m, n, k = la.arg[1].shape
  np_ = padded_columns(n, lanes)
  if (tile := tile_shape(lanes, m, np_, True)) is None: return None
  mr, nr = tile
  mt, nt = -(-m // mr), np_ // nr
  jb = max(1, min(4, L2_PANEL // (k * nr * 4), nt // 2))
  while nt % jb: jb -= 1
  mp = mt * mr
  packs = tuple((_pack_ast(_single_view(ld), rows, tiles, k, t, size), (tiles, k, t), ld.arg[0])
                for ld, rows, tiles, t, size in ((la, True, mt, mr, m), (lb, False, nt, nr, n)))
  pa, pb = (UOp(Ops.LOAD, dtypes.float32, (), (i + 1, _packed_view(tiles, k, t, rows, (mp, np_, k))))
            for i, (rows, tiles, t) in enumerate(((True, mt, mr), (False, nt, nr))))
  new_red = UOp(Ops.REDUCE_AXIS, red.dtype, (UOp(Ops.MUL, dtypes.float32, (pa, pb)),), red.arg)
  product = UOp(Ops.SINK, None, (UOp(Ops.STORE, None, (new_red,), (0, ShapeTracker.from_shape((mp, np_, 1)))),), ("packed_matmul", mr, nr, jb))
  return ScratchPlan(packs, product, *finish_kernel(ast, red, ShapeTracker.from_shape((mp, np_, 1)).shrink(((0, m), (0, n), (0, 1)))), (mp, np_))

def finish_kernel(ast: UOp, red: UOp, valid: ShapeTracker) -> tuple[UOp, tuple[int, ...]]:
  """The kernel `ast` with its product `red` read from the scratch through `valid`, and the original slot of each of its
  inputs (0: the scratch). Its inputs are renumbered densely: a kernel's parameters are the slots it loads, by position."""
  finish = substitute(ast, {red: UOp(Ops.LOAD, dtypes.float32, (), (-1, valid))})
  slots = sorted({u.arg[0] for u in finish.toposort() if u.op is Ops.LOAD and u.arg[0] > 0}) + [-1]
  renum = {s: i + 1 for i, s in enumerate(slots)}
  finish = substitute(finish, {u: UOp(Ops.LOAD, u.dtype, u.src, (renum[u.arg[0]],) + u.arg[1:]) for u in finish.toposort() if u.op is Ops.LOAD})
  return finish, tuple(max(s, 0) for s in slots)
