"""Extension points: write a kernel by hand from UOps and ranges (checked before anything renders it), and add
rewrite rules that run on every kernel just before rendering.

Custom kernels. `KernelBuilder` hands out buffers and loops; you write loads, arithmetic (UOp operators), reductions
and stores; `.kernel()` checks the structure and returns a LoweredKernel that the opts, the linearizer and every
renderer accept. The checks raise KernelStructureError with a message naming the loop/buffer at fault:
  - a reduction loop whose value reaches a store without a reduce over it (a range that is never closed);
  - a store indexed by a loop that is not an output loop of the kernel (a store outside the range it indexes),
    or whose value varies along an output loop its index ignores (every iteration would overwrite one element);
  - a reduce over an output loop, a loop reduced twice, a store of the wrong dtype, an index that can leave
    the buffer (when its size was given).
`check_program` does the same kind of checking on an already linearized program (RANGE ... ENDRANGE lists).

>>> from compiler.dtypes import dtypes
>>> from compiler.uop import Ops
>>> kb = KernelBuilder("rowsum")
>>> out, x = kb.buffer(dtypes.float32, 4, output=True), kb.buffer(dtypes.float32, 32)
>>> i, j = kb.range(4), kb.range(8, reduce=True)
>>> kb.store(out, i, kb.reduce(Ops.ADD, x.load(i * 8 + j), j))
>>> kb.kernel().global_ranges == [i]
True
>>> kb2 = KernelBuilder("bad"); o = kb2.buffer(dtypes.float32, 4, output=True); r = kb2.range(4, reduce=True)
>>> kb2.store(o, UOp.const(dtypes.int32, 0), o.load(r))
>>> kb2.kernel()
Traceback (most recent call last):
...
compiler.kernel_api.KernelStructureError: kernel bad: reduction loop r0 (size 4) is never closed: the value stored to data0 depends on it; wrap the value in reduce(op, value, r0)

Rewrite hook. `register_rewrite(pm, renderer=None)` adds a PatternMatcher (compiler/uop.py) that
`apply_rewrites(k, renderer)` runs (to a fixed point) over the kernel's graph after the opts and before
linearizing and rendering; the engine calls it for every kernel it builds. Rules see the optimized graph
(vector dtypes, REDUCE nodes, gated LOADs) and must keep its meaning; `renderer` limits a rule set to "c" or "ptx".
`unregister_rewrite(pm)` removes it again.

>>> from compiler.uop import UPat, PatternMatcher
>>> double_to_add = PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("x"), UPat.const(2.0))), lambda x: x + x)])
>>> register_rewrite(double_to_add, "c")
>>> kb = KernelBuilder("twice"); o = kb.buffer(dtypes.float32, 8, output=True); x = kb.buffer(dtypes.float32, 8); i = kb.range(8)
>>> kb.store(o, i, x.load(i) * 2.0)
>>> [u.op.name for u in apply_rewrites(kb.kernel(), "c").sink.src[0].src[2].toposort()][-1]
'ADD'
>>> unregister_rewrite(double_to_add)
"""
from __future__ import annotations
from dataclasses import dataclass
from compiler.dtypes import DType, dtypes
from compiler.lower import LoweredKernel
from compiler.uop import UOp, Ops, PatternMatcher, graph_rewrite

class KernelStructureError(ValueError):
  """A hand-written kernel whose loops, reductions or stores don't fit together (the message says which)."""

@dataclass(frozen=True)
class Buf:
  """A kernel buffer: `load(index, gate=None)` reads it (gate: a bool UOp, reads 0 where false)."""
  uop: UOp
  size: int | None
  def load(self, idx: UOp | int, gate: UOp | None = None) -> UOp:
    idx = idx if isinstance(idx, UOp) else UOp.const(dtypes.int32, idx)
    return UOp(Ops.LOAD, self.uop.dtype, (self.uop, idx) + ((gate,) if gate is not None else ()))

class KernelBuilder:
  """Build a kernel from loops and UOps; `.kernel()` checks it and returns a LoweredKernel (see the module doc)."""
  def __init__(self, name: str):
    self.name = name
    self.bufs: list[Buf] = []
    self.outputs = 0
    self.global_ranges: list[UOp] = []
    self.ranges: list[UOp] = []
    self.stores: list[UOp] = []
  def buffer(self, dtype: DType, size: int | None = None, output: bool = False) -> Buf:
    """A new buffer; outputs must be declared before inputs (the kernel ABI lists outputs first)."""
    if output and len(self.bufs) > self.outputs:
      raise KernelStructureError(f"kernel {self.name}: output buffer declared after input buffers (outputs come first)")
    b = Buf(UOp(Ops.DEFINE_GLOBAL, dtype, (), len(self.bufs)), size)
    self.bufs.append(b)
    self.outputs += output
    return b
  def range(self, size: int, reduce: bool = False) -> UOp:
    """A loop 0..size-1: an output loop (nested in creation order, the first outermost) or, with reduce=True, a
    reduction loop that a `reduce` must close."""
    if size < 1: raise KernelStructureError(f"kernel {self.name}: loop of size {size}")
    r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, size),), (len(self.ranges), "reduce" if reduce else "global"))
    self.ranges.append(r)
    if not reduce: self.global_ranges.append(r)
    return r
  def reduce(self, op: Ops, value: UOp, *rngs: UOp) -> UOp:
    """`value` combined with `op` (ADD, MAX or MUL) over the reduction loops `rngs`, which this closes."""
    if op not in (Ops.ADD, Ops.MAX, Ops.MUL): raise KernelStructureError(f"kernel {self.name}: reduce op {op} (use ADD, MAX or MUL)")
    if not rngs: raise KernelStructureError(f"kernel {self.name}: reduce without a loop")
    return UOp(Ops.REDUCE, value.dtype, (value, *rngs), op)
  def store(self, buf: Buf, idx: UOp | int, value: UOp) -> None:
    idx = idx if isinstance(idx, UOp) else UOp.const(dtypes.int32, idx)
    self.stores.append(UOp(Ops.STORE, None, (buf.uop, idx, value)))
  def kernel(self) -> LoweredKernel:
    """The checked kernel (raises KernelStructureError)."""
    if not self.stores: raise KernelStructureError(f"kernel {self.name}: no store")
    if not self.outputs: raise KernelStructureError(f"kernel {self.name}: no output buffer")
    k = LoweredKernel(self.name, UOp(Ops.SINK, None, tuple(self.stores)), [b.uop.dtype for b in self.bufs], list(self.global_ranges), self.outputs)
    check_kernel(k, {b.uop.arg: b.size for b in self.bufs if b.size is not None})
    return k

def _rname(r: UOp) -> str: return f"r{r.arg[0]}"

def _open_ranges(u: UOp, memo: dict) -> frozenset:
  """The loops u depends on that no REDUCE inside u has closed."""
  if (r := memo.get(u)) is not None: return r
  if u.op is Ops.RANGE: out = frozenset((u,))
  else:
    out = frozenset().union(*(_open_ranges(s, memo) for s in u.src)) if u.src else frozenset()
    if u.op is Ops.REDUCE: out = out - frozenset(u.src[1:])
  memo[u] = out
  return out

def check_kernel(k: LoweredKernel, sizes: dict[int, int] | None = None) -> None:
  """Raise KernelStructureError unless every loop of `k` is closed where it must be (see the module doc).
  `sizes` maps buffer numbers to their element counts, for the bounds check."""
  name, gset, memo = f"kernel {k.name}", set(k.global_ranges), {}
  for u in k.sink.toposort():
    if u.op is Ops.REDUCE:
      for r in u.src[1:]:
        if r.op is not Ops.RANGE: continue
        if r in gset: raise KernelStructureError(f"{name}: reduce over output loop {_rname(r)}; make it a reduction loop (reduce=True)")
      inner = [x for x in u.src[0].toposort() if x.op is Ops.REDUCE and set(x.src[1:]) & set(u.src[1:])]
      if inner: raise KernelStructureError(f"{name}: loop {_rname(next(iter(set(inner[0].src[1:]) & set(u.src[1:]))))} is reduced twice (nested reduces over one loop)")
  for st in k.sink.src:
    if st.op is not Ops.STORE: raise KernelStructureError(f"{name}: the sink holds {st.op.name}, not STOREs")
    buf, idx, val = st.src[:3]
    bname = f"data{buf.arg}"
    if buf.arg >= k.outputs: raise KernelStructureError(f"{name}: store to input buffer {bname}")
    if val.dtype is not None and val.dtype.scalar is not buf.dtype.scalar:
      raise KernelStructureError(f"{name}: storing {val.dtype.name} into {bname} of {buf.dtype.name}")
    vr, ir = _open_ranges(val, memo), _open_ranges(idx, memo)
    for r in sorted(vr - gset, key=lambda r: r.arg[0]):
      raise KernelStructureError(f"{name}: reduction loop {_rname(r)} (size {r.src[0].arg}) is never closed: the value stored to {bname} "
                                 f"depends on it; wrap the value in reduce(op, value, {_rname(r)})")
    for r in sorted(ir - gset, key=lambda r: r.arg[0]):
      raise KernelStructureError(f"{name}: store to {bname} is outside loop {_rname(r)} it indexes ({_rname(r)} is not an output loop of the kernel)")
    for r in sorted(vr - ir, key=lambda r: r.arg[0]):
      raise KernelStructureError(f"{name}: store to {bname} doesn't depend on output loop {_rname(r)} although its value does: every iteration "
                                 f"of {_rname(r)} would overwrite the same element")
    if sizes and buf.arg in sizes and (idx.vmin < 0 or idx.vmax >= sizes[buf.arg]):
      raise KernelStructureError(f"{name}: store index of {bname} spans {idx.vmin}..{idx.vmax}, outside its {sizes[buf.arg]} elements")
  if sizes:
    for u in k.sink.toposort():
      if u.op is Ops.LOAD and u.src[0].arg in sizes and len(u.src) == 2 and (u.src[1].vmin < 0 or u.src[1].vmax >= sizes[u.src[0].arg]):
        raise KernelStructureError(f"{name}: load index of data{u.src[0].arg} spans {u.src[1].vmin}..{u.src[1].vmax}, outside its "
                                   f"{sizes[u.src[0].arg]} elements (gate the load)")

def check_program(prog: list[UOp], name: str = "kernel") -> None:
  """Check a linearized program: every RANGE closed by its ENDRANGE in nesting order, every value used only
  inside the loops it was computed in, every range used only while open.

  >>> from compiler.dtypes import dtypes
  >>> r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 4),), (0, "global"))
  >>> check_program([r])
  Traceback (most recent call last):
  ...
  compiler.kernel_api.KernelStructureError: kernel: loop r0 (size 4) is never closed (no ENDRANGE)
  """
  open_: list[UOp] = []
  scope: dict[UOp, tuple] = {}   # value -> the loops open where it was defined
  for i, u in enumerate(prog):
    # ENDRANGE names its loop; a REDUCE reads its accumulator after the loops by design
    for s in (u.src if u.op not in (Ops.ENDRANGE, Ops.REDUCE) else ()):
      if s.op is Ops.RANGE and s not in open_:
        raise KernelStructureError(f"{name}: instruction {i} ({u.op.name}) uses loop {_rname(s)} outside that loop")
      if s in scope and not set(scope[s]) <= set(open_):
        raise KernelStructureError(f"{name}: instruction {i} ({u.op.name}) uses a {s.op.name} computed inside a loop that has closed")
    if u.op is Ops.RANGE:
      if u in open_: raise KernelStructureError(f"{name}: loop {_rname(u)} opened twice")
      open_.append(u)
    elif u.op is Ops.ENDRANGE:
      r = u.src[0]
      if not open_ or open_[-1] is not r:
        raise KernelStructureError(f"{name}: ENDRANGE of {_rname(r)} at instruction {i} closes "
                                   f"{'nothing' if not open_ else 'it out of order (innermost open is ' + _rname(open_[-1]) + ')'}")
      open_.pop()
    elif u.op not in (Ops.CONST, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.DEFINE_ACC, Ops.REDUCE): scope[u] = tuple(open_)
  if open_: raise KernelStructureError(f"{name}: loop {_rname(open_[-1])} (size {open_[-1].src[0].arg}) is never closed (no ENDRANGE)")

# ***** the pre-render rewrite hook *****

_REWRITES: list[tuple[PatternMatcher, str | None]] = []

def register_rewrite(pm: PatternMatcher, renderer: str | None = None) -> None:
  """Run `pm` on every kernel before rendering (all renderers, or only "c" / "ptx")."""
  _REWRITES.append((pm, renderer))

def unregister_rewrite(pm: PatternMatcher) -> None:
  _REWRITES[:] = [(p, r) for p, r in _REWRITES if p is not pm]

def apply_rewrites(k: LoweredKernel, renderer: str) -> LoweredKernel:
  """`k` with every registered rule set for `renderer` applied (k itself when there are none)."""
  pms = [pm for pm, r in _REWRITES if r is None or r == renderer]
  if not pms: return k
  from compiler.opt.base import copy_kernel
  out = copy_kernel(k)
  for pm in pms: out.sink = graph_rewrite(out.sink, pm)
  return out
