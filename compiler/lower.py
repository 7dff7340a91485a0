"""Lowering: a shaped kernel AST becomes loops (RANGEs), index math, loads, stores and reductions.

Every node is evaluated "at an index": a list of integer UOps, one per dimension of its shape. A view turns
the index into a flat offset and a validity condition, a reduction opens fresh RANGEs for its reduced axes and
closes them (a REDUCE node), a load becomes LOAD(buffer, offset, gate). Hash-consing merges what repeats.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.dtypes import dtypes
>>> from compiler.uop import Ops
>>> x = LazyBuffer.empty((4, 8), dtypes.float32, "CPU"); x.buffer = object()
>>> k = lower(create_schedule([x.r(Ops.ADD, (1,))])[0].ast)
>>> [u.op.name for u in k.sink.src]
['STORE']
"""
from __future__ import annotations
from dataclasses import dataclass, field
import itertools
from compiler.dtypes import DType, dtypes
from compiler.uop import UOp, Ops, ELEMENTWISE, ALU, simplify_alu
from compiler.view import ShapeTracker, unravel
from compiler.schedule import ast_shape

@dataclass
class LoweredKernel:
  """A kernel ready for opts and linearization: `sink` holds STOREs; buffers are DEFINE_GLOBALs."""
  name: str
  sink: UOp
  buf_dtypes: list[DType]            # element dtype of each DEFINE_GLOBAL, outputs first
  global_ranges: list[UOp]           # output loops, outermost first
  outputs: int = 1
  applied_opts: list = field(default_factory=list)
  threaded: UOp | None = None        # the range split across CPU cores, if any
  # a peeled kernel's innermost output loops come in sibling chains, one per piece of the peeled loop
  # (compiler/opt/peel.py); chain c sits under global_ranges[:depths[c]] (no depths: the whole spine)
  nests: list[list[UOp]] = field(default_factory=list)
  depths: list[int] = field(default_factory=list)
  # the chunks `threaded` is cut into (0: one per core); the cores claim them in turn (compiler/opt/heuristic.py thread_chunks)
  chunks: int = field(default=0, kw_only=True, compare=False)
  # the threaded loop peeled (compiler/opt/peel.py peel_range): each piece's loop and its offset in `threaded`, whose
  # chunks the renderers still cut (each chunk runs the part of every piece that falls inside it)
  thread_pieces: dict[UOp, int] = field(default_factory=dict, kw_only=True)
  # the id of the next loop an opt makes (new_range); -1: one past the largest id in the graph, found on first use
  next_range: int = field(default=-1, kw_only=True, repr=False, compare=False)
  def new_range(self, size: int, kind: str) -> UOp:
    """A new loop of `size` iterations ("global" or "reduce"), numbered after every loop of this kernel: the same opts
    on the same kernel make the same source in any process (BEAM's workers build what the engine then runs), and no
    counter is shared between kernels. A copy of the kernel (opt.base.copy_kernel) carries the counter on."""
    if self.next_range < 0:
      self.next_range = 1 + max((u.arg[0] for u in [*self.sink.toposort(), *self.global_ranges] if u.op is Ops.RANGE), default=-1)
    self.next_range += 1
    return UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, size),), (self.next_range - 1, kind))
  def vars(self) -> list[UOp]:
    """The Variables (DEFINE_VAR) the kernel takes as integer arguments after its buffers, in name order."""
    vs = {u for u in self.sink.toposort() if u.op is Ops.DEFINE_VAR} | {u for r in self.global_ranges for u in r.toposort() if u.op is Ops.DEFINE_VAR}
    return sorted(vs, key=lambda v: v.arg[0])
  def symbolic(self) -> bool:
    """Does a loop run a symbolic number of times (a dim of Variable size)?"""
    return any(r.op is Ops.RANGE and r.src[0].op is not Ops.CONST for r in [*self.sink.toposort(), *self.global_ranges])
  def reduce_ranges(self) -> list[UOp]:
    seen: dict[UOp, None] = {}
    for u in self.sink.toposort():
      if u.op is Ops.REDUCE:
        for r in u.src[1:]:
          if r.op is Ops.RANGE: seen[r] = None
    return list(seen)

def identity_element(op: Ops, dt: DType):
  return {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: dtypes.min(dt)}[op]

class _Lowerer:
  def __init__(self, ast: UOp):
    self.ast = ast
    self.ids = itertools.count()
    self.memo: dict = {}
    self.bufs: dict[int, DType] = {}
  def rng(self, size, kind: str) -> UOp:
    # a symbolic size (an expression of Variables) is the loop's bound as it is: the kernel takes the values as arguments
    return UOp(Ops.RANGE, dtypes.int32, (size if isinstance(size, UOp) else UOp.const(dtypes.int32, size),), (next(self.ids), kind))
  def gbuf(self, i: int, dt: DType) -> UOp:
    self.bufs[i] = dt
    return UOp(Ops.DEFINE_GLOBAL, dt, (), i)

  def at(self, u: UOp, idx: tuple[UOp, ...], gate: UOp | None = None) -> UOp:
    """`u` at index `idx`; `gate` (when not None) is false where the value is masked away by an enclosing view,
    and every load below is gated by it, so no out-of-range address is ever read."""
    key = (u, idx, gate)
    if (r := self.memo.get(key)) is not None: return r
    self.memo[key] = r = self._at(u, idx, gate)
    return r
  def _at(self, u: UOp, idx: tuple[UOp, ...], gate: UOp | None) -> UOp:
    if u.op in (Ops.CONST, Ops.DEFINE_VAR): return u
    if u.op is Ops.INDEX: return idx[0].cast(u.dtype)   # iota: the element's own (1-D) index
    if u.op is Ops.LOAD:
      bi, st = u.arg
      off, valid = st.to_index(list(idx))
      if gate is not None: valid = valid.logical_and(gate)
      g = self.gbuf(bi, u.dtype)
      if valid.op is Ops.CONST:
        return UOp(Ops.LOAD, u.dtype, (g, off)) if valid.arg else UOp.const(u.dtype, 0)
      return UOp(Ops.LOAD, u.dtype, (g, off, valid))
    if u.op is Ops.VIEW:
      st: ShapeTracker = u.arg
      off, valid = st.to_index(list(idx))
      if valid.op is Ops.CONST and not valid.arg: return UOp.const(u.dtype, 0)
      inner_gate = gate if valid.op is Ops.CONST else (valid if gate is None else gate.logical_and(valid))
      inner = self.at(u.src[0], tuple(unravel(off, ast_shape(u.src[0]))) if u.src[0].op is not Ops.CONST else (), inner_gate)
      if valid.op is Ops.CONST: return inner
      return valid.where(inner, UOp.const(u.dtype, 0))
    if u.op is Ops.REDUCE_AXIS:
      op, axes = u.arg
      src_shape = ast_shape(u.src[0])
      new_idx, rngs = list(idx), []
      for a in axes:
        r = self.rng(src_shape[a], "reduce")
        new_idx[a] = r
        rngs.append(r)
      val = self.at(u.src[0], tuple(new_idx), gate)
      return UOp(Ops.REDUCE, u.dtype, (val, *rngs), op)
    if u.op in ELEMENTWISE:
      srcs = tuple(self.at(s, idx if ast_shape(s) != () else (), gate) for s in u.src)
      if u.op in (Ops.IDIV, Ops.MOD) and u.dtype.is_int: return safe_divmod(u.op, u.dtype, *srcs)
      if u.op in ALU: return simplify_alu(u.op, u.dtype, srcs)
      return srcs[0].cast(u.dtype) if u.op is Ops.CAST else UOp(u.op, u.dtype, srcs)
    raise NotImplementedError(f"lowering {u.op}")

def safe_divmod(op: Ops, dt: DType, a: UOp, b: UOp) -> UOp:
  """C's a / b or a % b, defined where C and the hardware are not: x / 0 = x % 0 = 0 and INT_MIN / -1 = INT_MIN
  (as numpy). x86 `idiv` traps (SIGFPE) on both, so the divisor is replaced by 1 there and the quotient fixed up.

  >>> from compiler.dtypes import dtypes
  >>> safe_divmod(Ops.IDIV, dtypes.int32, UOp.const(dtypes.int32, 7), UOp.const(dtypes.int32, 0)).arg
  0
  """
  if b.op is Ops.CONST and (b.arg > 0 or (b.arg < -1 and not dt.is_unsigned)): return simplify_alu(op, dt, (a, b))
  is0 = b.eq(0)
  bad = is0 if dt.is_unsigned else UOp(Ops.OR, dtypes.bool, (is0, b.eq(-1)))
  one = UOp.const(dt, 1)
  r = simplify_alu(op, dt, (a, simplify_alu(Ops.WHERE, dt, (bad, one, b))))
  if op is Ops.MOD: return r    # x % 1 == 0, which is also x % -1
  # b == -1 divided by 1: negate (wrapping, so INT_MIN stays INT_MIN); b == 0: 0
  if not dt.is_unsigned: r = simplify_alu(Ops.WHERE, dt, (b.eq(-1), simplify_alu(Ops.MUL, dt, (r, UOp.const(dt, -1))), r))
  return simplify_alu(Ops.WHERE, dt, (is0, UOp.const(dt, 0), r))

def lower(ast: UOp, name: str = "kernel") -> LoweredKernel:
  """Lower a scheduled kernel AST (SINK of STOREs) to a LoweredKernel."""
  lw = _Lowerer(ast)
  # every buffer of the kernel is a parameter, also one whose loads all fold away (a 0-size or fully padded view):
  # the caller passes them all by position
  for u in ast.toposort():
    if u.op is Ops.LOAD: lw.bufs[u.arg[0]] = u.dtype
  stores, granges = [], []
  shape = ast.src[0].arg[1].shape
  idx = []
  for s in shape:
    if isinstance(s, int) and s == 1: idx.append(UOp.const(dtypes.int32, 0))
    else:
      r = lw.rng(s, "global")
      granges.append(r); idx.append(r)
  for st_node in ast.src:
    bi, st = st_node.arg
    off, _valid = st.to_index(idx)
    val = lw.at(st_node.src[0], tuple(idx))
    g = lw.gbuf(bi, st_node.src[0].dtype)
    stores.append(UOp(Ops.STORE, None, (g, off, val)))
  return LoweredKernel(name, UOp(Ops.SINK, None, tuple(stores), ast.arg), [lw.bufs[i] for i in sorted(lw.bufs)], granges, len(ast.src))
