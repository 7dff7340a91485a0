"""Cut the lazy graph into kernels.

Every base that must exist in memory becomes one kernel whose AST inlines everything elementwise above it.
A base is realized (gets its own buffer) when:
  - it was asked for (the targets), is CONTIGUOUS, a COPY, an ASSIGN, or already has a buffer;
  - it is a reduction used by more than one consumer (recomputing a reduction is never cheap);
  - it is a reduction read through a view that is not a plain reshape/permute (an expand would recompute it
    once per broadcast element, a pad needs a validity mask around a loop), or an elementwise value holding an
    inlined reduction read through an expanding view (the same recomputation, one op later);
  - it sits inside another reduction's body through an expanding view and is not just a constant (a
    broadcast input of a matmul would be recomputed K times);
  - it is a costly elementwise value (_Scheduler._costly: random bits, transcendentals, long chains) read through an
    expanding view (a lazy bias added to a conv's output would be drawn once per output element), or inlined into
    more than one kernel (a lazy weight read by the forward and the backward): computed once, stored, loaded. A
    parameter whose initialisation was never realized is then realized by the first schedule that reads it.
Cheap elementwise values used twice are recomputed in each consumer: that is cheaper than a memory round trip.
Assigns computed elementwise are fused (an optimizer step): a weight's update with the moments it reads (one kernel,
several outputs), and such updates of one shape together; never when the kernel would read a buffer it writes at
another element than the one it writes (_assign_items).

>>> from compiler.lazy import LazyBuffer
>>> from compiler.dtypes import dtypes
>>> from compiler.uop import Ops
>>> x = LazyBuffer.empty((4, 8), dtypes.float32, "CPU"); x.buffer = object()
>>> y = x.alu(Ops.MUL, x).r(Ops.ADD, (1,))
>>> [si.name for si in create_schedule([y])]
['r_4_8']
"""
from __future__ import annotations
import math, weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from compiler.lazy import LazyBuffer
from compiler.uop import UOp, Ops, ELEMENTWISE
from compiler.view import ShapeTracker, prod
from compiler.memo import memo_put
from compiler.sint import any_sym, smax, unbind, merge_vals

@dataclass
class ScheduleItem:
  """One unit of work: a kernel `ast` over `bufs` (outputs first), or a COPY between devices."""
  ast: UOp | None
  outputs: list[LazyBuffer]
  inputs: list[LazyBuffer]
  kind: str = "kernel"   # kernel | copy | empty
  name: str = ""
  assign_targets: list[LazyBuffer] | None = None  # an ASSIGN kernel: the buffers it writes in place, one per output
  alloc_nbytes: int | None = None          # the output buffer's size when the kernel writes past the tensor's end
  var_vals: dict = field(default_factory=dict)   # {Variable: value} of the symbolic dims (the ast holds only Variables)
  @property
  def bufs(self) -> list[LazyBuffer]: return self.outputs + self.inputs
  @property
  def assign_target(self) -> LazyBuffer | None: return self.assign_targets[0] if self.assign_targets else None

def _view_is_rearrange(st: ShapeTracker, base_shape) -> bool:
  """True when st reads every base element exactly once, in any order (reshape/permute only)."""
  return prod(st.shape) == prod(base_shape) and all(v.mask is None and _dense(v) for v in st.views)

# (rearrange, grows) of reading a base of base_shape through view st: a pure function of the two (frozen) values, asked
# for every edge of every kernel at every schedule, so memoized (bounded: emptied when full; keyed with the dims' types
# as compiler/view.py's tables, since 1 == True)
_view_facts_cache: dict[tuple, tuple[bool, bool]] = {}
def _view_facts(st: ShapeTracker, base_shape: tuple) -> tuple[bool, bool]:
  """(st reads each base element once: _view_is_rearrange, st reads more elements than the base has)"""
  if (r := _view_facts_cache.get(key := (st, base_shape, tuple(map(type, base_shape))))) is None:
    r = memo_put(_view_facts_cache, key, (_view_is_rearrange(st, base_shape), smax(prod(st.shape)) > smax(prod(base_shape))))
  return r

def _dense(v) -> bool:
  if any_sym(v.shape) or any_sym(v.strides): return v.contiguous   # symbolic: only the plain layout is known dense
  # positive strides that tile [0, size) exactly: sorted by stride, each is the product of the smaller dims
  acc = 1
  for st, s in sorted((st, s) for st, s in zip(v.strides, v.shape) if s != 1):
    if st != acc: return False
    acc *= s
  return v.offset == 0

# the work per element of an elementwise value, in simple ALU ops: a transcendental is lowered to a polynomial of about
# this many (compiler/transcendental.py), an integer division or modulo to a long sequence. A value costing at least
# COSTLY_OPS per element is worth a memory round trip rather than a recomputation: the counter-based random bits of
# Tensor.rand are two hash rounds (~20 integer ops), a uniform initialiser ~24; a bias-free relu, a scale, a cast or
# exp(x) (~11) stay below and are still recomputed wherever they are read.
_OP_COST = {Ops.EXP2: 10, Ops.LOG2: 10, Ops.SIN: 10, Ops.IDIV: 4, Ops.MOD: 4, Ops.FDIV: 2, Ops.SQRT: 2, Ops.RECIP: 2}
COSTLY_OPS = 16

GENERATED_MAX_READ = 64   # a value reading at most this many elements of memory is generated (a random key, scalars)

class _Scheduler:
  def __init__(self, outs: list[LazyBuffer], live: Callable[[], Iterable[LazyBuffer]] | None = None):
    self.outs, self._live = [o.base for o in outs], live
    self.realize: dict[LazyBuffer, None] = {}
    self.children: dict[LazyBuffer, int] = {}
    self._reduce_memo: dict[LazyBuffer, bool] = {}
    self._cost_memo: dict[LazyBuffer, bool] = {}
    self._walk()

  def _walk(self):
    self.seen = seen = set()   # every base the outputs depend on
    stack, children = list(self.outs), self.children
    order, has_index = [], False
    while stack:
      b = stack.pop()
      if b in seen: continue
      seen.add(b)
      order.append(b)
      if b.buffer is not None: continue
      if b.op is Ops.INDEX: has_index = True
      for s in b.srcs:
        sb = s._base or s   # (s.base, inlined: this loop visits every edge of the graph)
        children[sb] = children.get(sb, 0) + 1
        stack.append(sb)
    for b in self.outs: self.realize[b] = None
    for b in order:
      if b.buffer is not None: continue
      # (an EMPTY read by a kernel is loaded, so it needs a buffer of its own: its values are unspecified)
      if b.op in (Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN, Ops.EMPTY) or b.forced_realize: self.realize[b] = None
      if b.op is Ops.REDUCE_AXIS and self.children.get(b, 0) > 1: self.realize[b] = None
      if b.op is Ops.COPY: self.realize[b.srcs[0].base] = None
    # (only a graph with an iota can generate a value from next to no memory: the random bits are hashed indices)
    if has_index and self._live is not None:
      for b in self._held_generated(): self.realize[b] = None
    # views that force realization are found while building the kernels; then an elementwise value used twice is
    # recomputed by each user, unless that would repeat a reduction that is still inlined; repeat until stable
    # (the elementwise values used twice, in walk order: what the rounds below ask about; fixed while they run)
    self._shared = [b for b in order if b.buffer is None and b.op in ELEMENTWISE and children.get(b, 0) > 1]
    self._settle(0)

  def _settle(self, probed: int) -> None:
    """Probe rounds until no base is added; the roots before index `probed` were probed in an earlier round."""
    while True:
      before, self._reduce_memo, self._cost_memo = len(self.realize), {}, {}
      self._probe_round(probed)
      probed = before
      if len(self.realize) == before:
        self._reduce_memo = {}
        for b in self._shared:
          if b not in self.realize and self._has_reduce(b): self.realize[b] = None
        # a costly value two kernels would each compute: once (only asked when nothing else changed: realizing more
        # only shrinks what kernels inline, so the count below is the settled one)
        if len(self.realize) == before:
          for b in self._shared_costly(): self.realize[b] = None
        if len(self.realize) == before: break

  def add_roots(self, bases: list[LazyBuffer]) -> None:
    """Realize also `bases` (of the walked graph): new roots, probed as a later round of the constructor's would."""
    probed = len(self.realize)
    for b in bases: self.realize[b] = None
    self._settle(probed)

  def _probe_round(self, probed: int) -> None:
    """Probe every root, as if in order, with a fresh _has_reduce memo; roots [:probed] were probed in an earlier round.

    Probing a root again can't mark anything new: the realized set only grew since, which only stops its walk sooner
    and turns _has_reduce from True to False, never the reverse (so each mark it would make is one it made). It would
    only fill the memo, and that matters only if a reduction is marked later in this round (the memo could then
    answer True where a fresh look says False). So: probe the new roots alone; if that marked a reduction, undo and
    probe them all, which is the plain round."""
    roots = list(self.realize)
    if probed:
      start = dict(self.realize)
      for b in roots[probed:]: self._probe(b, b, in_reduce=False, seen=set())
      if not any(b.op is Ops.REDUCE_AXIS for b in list(self.realize)[len(roots):]): return
      self.realize, self._reduce_memo = start, {}
    for b in roots: self._probe(b, b, in_reduce=False, seen=set())

  def _has_reduce(self, b: LazyBuffer) -> bool:
    """Is there a reduction among the unrealized bases that would be inlined into b?"""
    memo = self._reduce_memo
    if b in memo: return memo[b]
    memo[b] = False
    r = b.buffer is None and ((b.op is Ops.REDUCE_AXIS and b not in self.realize) or
                              (b.op in ELEMENTWISE and any(self._has_reduce(s.base) for s in b.srcs)))
    memo[b] = r
    return r

  def _costly(self, b: LazyBuffer) -> bool:
    """Does computing unrealized elementwise b inline at least COSTLY_OPS ALU ops per element (each node of the
    expression once, as the kernel computes it; stopping at what is loaded)? The walk stops as soon as it knows."""
    memo = self._cost_memo
    if (r := memo.get(b)) is not None: return r
    cost, seen, stack, realize = 0, {b}, [b], self.realize
    while stack and cost < COSTLY_OPS:
      x = stack.pop()
      cost += _OP_COST.get(x.op, 1)
      for s in x.srcs:
        sb = s._base or s
        if sb not in seen and sb.buffer is None and sb not in realize and (sb.op in ELEMENTWISE or sb.op is Ops.INDEX):
          seen.add(sb); stack.append(sb)
    memo[b] = r = cost >= COSTLY_OPS
    return r

  def _held_generated(self) -> list[LazyBuffer]:
    """Costly values generated from next to no memory (a layer's random initialisation: hashed indices and a key)
    that the program holds (a tensor's own value, not a view of it): stored when first computed, so every later
    schedule loads them. Inlined, the next schedule reading them would compute them again (a TinyJit step would draw
    a never-realized weight anew at each replay, inside its conv)."""
    seen, realize, found = self.seen, self.realize, {}
    for lb in self._live():
      b = lb._base or lb
      if b.buffer is None and b.op in ELEMENTWISE and b in seen and b not in realize and b not in found: found[b] = None
    # (in the order the lazy graph was built: the schedule must not depend on the order the program's tensors are listed)
    return sorted((b for b in found if self._costly(b) and self._reads_little(b)), key=lambda b: b.id)

  def _reads_little(self, b: LazyBuffer) -> bool:
    """Does computing b load at most GENERATED_MAX_READ elements of memory (constants and iotas load none)?"""
    seen, stack, read = {b}, [b], 0
    while stack:
      for s in stack.pop().srcs:
        sb = s._base or s
        if sb in seen or sb.op is Ops.CONST: continue
        seen.add(sb)
        if sb.buffer is not None or sb in self.realize or sb.op not in ELEMENTWISE:
          if sb.op is not Ops.INDEX and (read := read + smax(prod(sb.shape))) > GENERATED_MAX_READ: return False
        else: stack.append(sb)
    return True

  def _shared_costly(self) -> list[LazyBuffer]:
    """The costly elementwise values (of those read more than once) that more than one kernel would inline."""
    self._cost_memo = {}
    cands = {b for b in self._shared if b not in self.realize and self._costly(b)}
    if not cands: return []
    users: dict[LazyBuffer, int] = {}
    for root in self.realize:
      if root.buffer is not None or root.op in (Ops.COPY, Ops.EMPTY): continue
      for b in self._inlined(root) & cands: users[b] = users.get(b, 0) + 1
    return [b for b in self._shared if users.get(b, 0) > 1]

  def _inlined(self, root: LazyBuffer) -> set[LazyBuffer]:
    """The unrealized bases root's kernel computes inside itself (what _KernelBuilder inlines)."""
    seen: set[LazyBuffer] = set()
    stack = [root]
    while stack:
      b = stack.pop()
      for s in (b.srcs[:1] if b.op is Ops.ASSIGN else b.srcs):
        sb = s._base or s
        if sb in seen or self._must_load(sb, root) or sb.op in (Ops.CONST, Ops.COPY, Ops.EMPTY): continue
        seen.add(sb); stack.append(sb)
    return seen

  def _must_load(self, b: LazyBuffer, root: LazyBuffer) -> bool:
    return b.buffer is not None or (b in self.realize and b is not root)

  def _probe(self, b: LazyBuffer, root: LazyBuffer, in_reduce: bool, seen: set):
    """Walk what kernel `root` inlines, marking the bases that must be realized instead."""
    if (b, in_reduce) in seen or self._must_load(b, root) or b.op in (Ops.COPY, Ops.EMPTY): return
    self._probe_in(b, root, in_reduce, seen)

  def _probe_in(self, b: LazyBuffer, root: LazyBuffer, in_reduce: bool, seen: set):
    # (_probe past its entry checks: the loop below makes the same checks before each recursion, and nothing between
    # the check and the call changes their answer)
    seen.add((b, in_reduce))
    realize, inner = self.realize, in_reduce or b.op is Ops.REDUCE_AXIS
    for s in (b.srcs[:1] if b.op is Ops.ASSIGN else b.srcs):
      sb = s._base or s
      if sb.buffer is not None or (sb in realize and sb is not root) or sb.op is Ops.CONST: continue   # (_must_load)
      rearrange, grows = _view_facts(s.st, sb.st.shape) if s._base is not None else (True, False)
      if sb.op is Ops.REDUCE_AXIS and (not rearrange or inner):
        realize[sb] = None; continue
      if grows and sb.op in ELEMENTWISE and self._has_reduce(sb):   # (x - x.mean()): the mean once, not once per element
        realize[sb] = None; continue
      if inner and grows and not _cheap(sb):
        realize[sb] = None; continue
      if grows and sb.op in ELEMENTWISE and self._costly(sb):   # a lazy bias in a conv's epilogue: drawn once, not per output
        realize[sb] = None; continue
      if (sb, inner) not in seen and sb.op is not Ops.COPY and sb.op is not Ops.EMPTY: self._probe_in(sb, root, inner, seen)

def _cheap(b: LazyBuffer) -> bool:
  """A cast or bitcast of something already in memory costs no more to recompute than to load."""
  return b.op in (Ops.CAST, Ops.BITCAST) and (b.srcs[0].base.buffer is not None or b.srcs[0].base.op is Ops.CONST)

class _KernelBuilder:
  """Builds the AST of the kernel storing `outs` (the root, and the assigns fused with it: their values are inlined)."""
  def __init__(self, sched: _Scheduler, root: LazyBuffer, outs: list[LazyBuffer] | None = None):
    self.sched, self.root, self.outs = sched, root, outs or [root]
    self.inputs: list[LazyBuffer] = []
    self.memo: dict = {}
    # ref(s) of each source already seen: the answer can't change while this kernel is built (the realized set and
    # the outputs are fixed; buf_index only appends an input the first time)
    self.refs: dict[LazyBuffer, UOp] = {}
    # what the finished ast holds, noted while building it so that naming it needs no walk (_finish_built): might it
    # hold a bound Variable (a symbolic view, value or iota length), its first reduction in toposort order (the first
    # one built: both are depth-first post-orders over the sources in order), and its loads as (buffer index, view)
    self.sym, self.first_reduce, self.loads = False, None, []
  def buf_index(self, b: LazyBuffer) -> int:
    # (`in`/index on lists of LazyBuffers compare by identity: LazyBuffer has no __eq__)
    if b in self.outs: return self.outs.index(b)
    if b not in self.inputs: self.inputs.append(b)
    return len(self.outs) + self.inputs.index(b)
  def ref(self, s: LazyBuffer) -> UOp:
    if (r := self.refs.get(s)) is None: r = self.refs[s] = self._ref(s)
    return r
  def _ref(self, s: LazyBuffer) -> UOp:
    # (a base's tracker is from_shape(its shape): every base is made with one, so s.st is the view read either way)
    sb, st = s._base, s.st
    view = sb is not None
    if not view: sb = s
    if sb.op is Ops.CONST and sb.buffer is None:
      c = sb.arg.cast(sb.dtype) if isinstance(sb.arg, UOp) else UOp.const(sb.dtype, sb.arg)
      if isinstance(sb.arg, UOp) or st._sints: self.sym = True
      # keep the shape (a reduction over a broadcast constant needs its axes), unless it is a scalar
      return c if st.shape == () else UOp(Ops.VIEW, sb.dtype, (c,), st)
    if st._sints: self.sym = True
    # (self.sched._must_load(sb, self.root), inlined)
    if ((sb.buffer is not None or (sb in self.sched.realize and sb is not self.root)) and sb not in self.outs) or sb.op is Ops.EMPTY:
      self.loads.append(arg := (self.buf_index(sb), st))
      return UOp(Ops.LOAD, sb.dtype, (), arg)
    inner = self.base(sb)
    return inner if not view or (st.contiguous and st.shape == sb.shape) else UOp(Ops.VIEW, sb.dtype, (inner,), st)
  def base(self, b: LazyBuffer) -> UOp:
    if (r := self.memo.get(b)) is not None: return r
    if b.op is Ops.INDEX:
      ret = UOp(Ops.INDEX, b.dtype, (), b.shape[0])
      if isinstance(b.shape[0], UOp): self.sym = True
    elif b.op is Ops.CONST:   # only as a kernel's root
      ret = b.arg.cast(b.dtype) if isinstance(b.arg, UOp) else UOp.const(b.dtype, b.arg)
      if isinstance(b.arg, UOp): self.sym = True
    elif b.op in ELEMENTWISE:
      refs = self.refs   # (self.ref, inlined: every edge of every kernel comes here)
      ret = UOp(b.op, b.dtype, tuple([r if (r := refs.get(s)) is not None else self.ref(s) for s in b.srcs]))
    elif b.op is Ops.REDUCE_AXIS:
      ret = UOp(Ops.REDUCE_AXIS, b.dtype, (self.ref(b.srcs[0]),), b.arg)
      if self.first_reduce is None: self.first_reduce = ret
    elif b.op is Ops.CONTIGUOUS: ret = self.ref(b.srcs[0])
    elif b.op is Ops.ASSIGN and b in self.outs: ret = self.ref(b.srcs[0])   # a fused assign: its value
    else: raise RuntimeError(f"can't inline {b.op} into a kernel")
    self.memo[b] = ret
    return ret

def unbind_ast(ast: UOp) -> tuple[UOp, dict]:
  """The ast with every bound Variable (in views and values) replaced by the Variable, and {Variable: value}: the
  kernel is then the same for every value, which it takes as an argument."""
  vals: list[dict] = []
  def ub(x: UOp) -> UOp:
    x2, vv = unbind(x)
    vals.append(vv)
    return x2
  memo: dict[UOp, UOp] = {}
  for u in ast.toposort():
    if u.op is Ops.BIND: memo[u] = ub(u); continue
    arg = u.arg
    if u.op in (Ops.LOAD, Ops.STORE) and arg[1]._sints: arg = (arg[0], arg[1].map_sints(ub))
    elif u.op is Ops.VIEW and arg._sints: arg = arg.map_sints(ub)
    elif u.op is Ops.INDEX and isinstance(arg, UOp): arg = ub(arg)   # an iota of symbolic length
    srcs = tuple(memo[s] for s in u.src)
    memo[u] = u if srcs == u.src and arg is u.arg else UOp(u.op, u.dtype, srcs, arg)
  return memo[ast], merge_vals(*vals, what="kernel")

_SYM_OPS = {Ops.BIND, Ops.LOAD, Ops.STORE, Ops.VIEW, Ops.INDEX}   # the nodes unbind_ast may change
def _finish(ast: UOp, topo: list[UOp] | None = None) -> tuple[UOp, dict, str]:
  """(unbind_ast(ast), kernel_name): one walk of the ast when it holds no symbolic value (then unbinding changes
  nothing: every node maps to itself, and there are no values)."""
  topo = ast.toposort() if topo is None else topo
  for u in topo:
    if (op := u.op) not in _SYM_OPS: continue
    if op is Ops.BIND or (op in (Ops.LOAD, Ops.STORE) and u.arg[1]._sints) or (op is Ops.VIEW and u.arg._sints) or \
       (op is Ops.INDEX and isinstance(u.arg, UOp)):
      ast, vv = unbind_ast(ast)
      return ast, vv, kernel_name(ast)
  return ast, {}, kernel_name(ast, topo)

def _finish_built(kb: _KernelBuilder, ast: UOp, store_st: ShapeTracker) -> tuple[UOp, dict, str]:
  """_finish(ast) for the ast kb built (stored through store_st), from what kb noted: without a walk when nothing in
  it is symbolic (the common case), else by the walk."""
  if kb.sym or store_st._sints: return _finish(ast)
  return ast, {}, _kernel_name(ast, kb.first_reduce)

def ast_shape(u: UOp) -> tuple[int, ...]:
  """The shape of a kernel AST node."""
  if u.op in (Ops.LOAD, Ops.STORE): return u.arg[1].shape
  if u.op is Ops.VIEW: return u.arg.shape
  if u.op is Ops.CONST: return ()
  if u.op is Ops.INDEX: return (u.arg,)
  if u.op is Ops.REDUCE_AXIS: return tuple(1 if i in u.arg[1] else s for i, s in enumerate(ast_shape(u.src[0])))
  return next((sh for s in u.src if (sh := ast_shape(s)) != ()), ())

def _dim(s) -> str:
  # a symbolic dim is named by its Variables (kernel names are C identifiers)
  return str(s) if isinstance(s, int) else "".join(u.arg[0] for u in s.toposort() if u.op is Ops.DEFINE_VAR) or "s"

def kernel_name(ast: UOp, topo: list[UOp] | None = None) -> str:
  """The kernel's name from its shape (topo: ast.toposort(), when the caller has it)."""
  return _kernel_name(ast, next((u for u in (ast.toposort() if topo is None else topo) if u.op is Ops.REDUCE_AXIS), None))

# kernel names by (first reduction, stored shape, its numbers' types): a pure function of immutable values (UOps are
# interned and compared by identity), asked for every kernel of every schedule; bounded like compiler/view.py's tables
_name_cache: dict[tuple, str] = {}
def _kernel_name(ast: UOp, first_reduce: UOp | None) -> str:
  shape = ast.src[0].arg[1].shape
  if (name := _name_cache.get(key := (first_reduce, shape, tuple(map(type, shape))))) is not None: return name
  if first_reduce is not None: name = "r_" + "_".join(_dim(s) for s in ast_shape(first_reduce.src[0]))
  else: name = "E_" + "_".join(_dim(s) for s in shape) if shape else "E_1"
  return memo_put(_name_cache, key, name)

# readers realized only because an assign in their schedule overwrites what they read (a TinyJit capture doesn't
# record those built before it: they are not the captured function's work)
snapshots: weakref.WeakSet = weakref.WeakSet()

def create_schedule(outs: list[LazyBuffer], live: Callable[[], Iterable[LazyBuffer]] | None = None,
                    nodes: set | None = None, key: _GraphKey | None = None) -> list[ScheduleItem]:
  """Kernels (in a valid execution order) that realize every buffer in `outs`. An assign overwrites its target's
  buffer: unrealized nodes built earlier that read the old value and are not part of this schedule are realized in
  it too (before the assign), so a clone or any lazy result keeps the value it was built from. So are the nodes of
  `live()` (what the program still holds: the frontend's tensors) that would read the old value when realized later,
  through a reader this schedule only inlines (`loss.backward(); opt.step(); loss.numpy()`: the loss, built from the
  weights before the step, is computed in the step's schedule, before the weights change).

  A graph of the same structure as one scheduled before (an eager train step's, every step) is answered from the
  schedule cache (_GraphKey): the same kernels, bound to this graph's lazy buffers. `nodes`: a set given gets every
  unrealized base of the graph the schedule covers (the frontend looks there for the values its index checks guard).
  `key`: graph_key(outs, live), when the caller made it already (the graph is then walked once)."""
  if key is not None and SCHEDULE_CACHE: return _schedule_cached(key.outs, key.live, nodes, key)
  outs = [o for o in outs if o.base.buffer is None]
  if not outs: return []
  if live is not None:   # asked at most once (it lists every tensor the program holds): nothing changes them meanwhile
    live = _once(live)
  return _schedule_cached(outs, live, nodes) if SCHEDULE_CACHE else _schedule(outs, live, nodes)

def graph_key(outs: list[LazyBuffer], live: Callable[[], Iterable[LazyBuffer]] | None = None) -> _GraphKey | None:
  """The schedule cache's key of the graph that create_schedule(outs, live) covers, for a caller that keeps what it
  derives from a schedule beside the cache entry (cached_entry); None when the cache is off or nothing is to be
  computed. The key is that of the walk alone: a graph with pending assigns may still grow (the readers they leave
  stale), so such a caller uses the entry only when `key.assigns` is empty.

  >>> from compiler.dtypes import dtypes
  >>> x = LazyBuffer.empty((4,), dtypes.float32, "CPU"); x.buffer = object()
  >>> k = graph_key([x.alu(Ops.NEG)]); len(k.nodes), k.assigns, graph_key([x])
  (2, [], None)
  """
  if not SCHEDULE_CACHE or not (outs := [o for o in outs if o.base.buffer is None]): return None
  return _GraphKey(outs, None if live is None else _once(live))

def cached_entry(key: _GraphKey) -> _CachedSchedule | None:
  """The cache entry of a graph of key's structure (None: not scheduled since the cache was last emptied)."""
  return _schedule_cache.get(key.key)

def _schedule(outs: list[LazyBuffer], live: Callable[[], list[LazyBuffer]] | None, nodes: set | None = None) -> list[ScheduleItem]:
  """create_schedule without the cache."""
  while True:
    sched = _Scheduler(outs, live)
    assigns = {b for b in sched.seen if b.op is Ops.ASSIGN and b.buffer is None}
    # (a reader that also reads the result of the assign can't run before it (it reads both values): it is left to
    # run after, as before)
    stale = [r for b in assigns if (rs := b.srcs[1].base.readers) for r in list(rs)
             if r.buffer is None and r not in sched.seen and not _reaches(r, b)]
    if not stale and assigns and live is not None and (held := _held_readers(sched, assigns, live())):
      # (those of the walked graph join this schedule as roots; others (rare) are walked again with the outputs)
      if not (stale := [b for b in held if b not in sched.seen]): sched.add_roots(held)
      snapshots.update(held)
    if not stale: break
    outs = outs + stale
    snapshots.update(stale)
  if nodes is not None: nodes.update(b for b in sched.seen if b.buffer is None)
  return _build_any(sched, assigns)

def _build_any(sched: _Scheduler, assigns: set) -> list[ScheduleItem]:
  """_build, fusing the optimizer's assigns as far as the order allows."""
  for fuse in (2, 1):
    # a fused update ordered into a cycle (something it writes is read between its parts): fuse less
    try: return _build(sched, fuse)
    except RuntimeError: pass
  try: return _build(sched, 0)
  except RuntimeError:
    # a reader of an assign's old value inlined into a kernel that needs the assign's result (h = a + b; a.assign(..);
    # c.assign(f(a) + h)): stored by a kernel of its own, it runs before the assign
    if not (readers := _inlined_readers(sched, assigns, exact=True)): raise
    sched.add_roots(readers)
    return _build(sched, 0)

# *** the schedule cache ***
# An eager train step builds a lazy graph of the same structure every step, over other buffers: scheduling it (the
# walk, the probe rounds, building every kernel's AST) is a large part of the host's work per step. The cache keys what
# create_schedule decides by the graph's whole structure (_GraphKey), so the next step gets the same kernels bound to its
# own lazy buffers. It follows _schedule's loop step by step: each graph it walks is a key, whose entry holds what
# _Scheduler realized when the program's held readers were asked for (a pure function of the key), and the schedules
# built for each answer; the answer itself reads the program's tensors, so it is asked again at every hit.
SCHEDULE_CACHE = True       # off: every graph is scheduled from scratch (tests compare the two)
SCHEDULE_CACHE_MAX = 256          # entries (each holds its key, ASTs and tuples of numbers, never a buffer)
SCHEDULE_CACHE_NODES = 1 << 19    # bases over all keys (a key holds a tuple per base: a big model's graphs are big)
cache_stats = {"hits": 0, "misses": 0}
_cached_nodes = 0

def _cache_put(key: tuple, entry: _CachedSchedule) -> _CachedSchedule:
  """Store an entry, emptying the cache first when it is full (entries, or bases over all keys)."""
  global _cached_nodes
  if len(_schedule_cache) >= SCHEDULE_CACHE_MAX or _cached_nodes + len(key[0]) > SCHEDULE_CACHE_NODES:
    _schedule_cache.clear()
    _cached_nodes = 0
  _cached_nodes += len(key[0])
  _schedule_cache[key] = entry
  return entry

def _schedule_cached(outs: list[LazyBuffer], live: Callable[[], list[LazyBuffer]] | None, nodes: set | None = None,
                     gk: _GraphKey | None = None) -> list[ScheduleItem]:
  if gk is None: gk = _GraphKey(outs, live)
  while True:
    entry, sched = _schedule_cache.get(gk.key), None
    if entry is None:
      sched = _Scheduler(gk.outs, live)
      entry = _cache_put(gk.key, _CachedSchedule(tuple(gk.index[b] for b in sched.realize)))
    held: list[LazyBuffer] = []
    if gk.assigns and live is not None:
      realize = sched.realize if sched is not None else {gk.nodes[i]: None for i in entry.realize}
      if held := _held_readers(_Realized(gk.index, realize), set(gk.assigns), live(), gk.readers):
        snapshots.update(held)
        if outside := [b for b in held if b not in gk.index]:
          gk.extend(outside)   # (walked again with them as outputs: the next graph's key)
          continue
    if nodes is not None: nodes.update(b for b in gk.nodes if b.buffer is None)
    if (items := entry.built.get(hk := frozenset(gk.index[b] for b in held))) is not None:
      cache_stats["hits"] += 1
      return entry.bind(items, gk.nodes)
    cache_stats["misses"] += 1
    if sched is None: sched = _Scheduler(gk.outs, live)
    if held: sched.add_roots(held)
    built = _build_any(sched, set(gk.assigns))
    try: entry.built[hk] = entry.number(built, gk.index)
    except KeyError: pass   # (a kernel over a base the key did not number: can't be, but then it is not cached)
    return built

class _GraphKey:
  """The structure of the graph a schedule of `outs` covers, as a hashable key: every base reachable from the outputs
  (stopping at realized ones, as the scheduler's walk does) numbered in the order a depth-first walk finds them, each
  with everything the scheduler reads of it: op, dtype, device, shape, arg, forced_realize, and its sources as numbers
  with the view each is read through; a realized base by which device buffer it is (two bases over one buffer share
  a number). Besides the graph: the readers of assigns' targets outside it, which join it as outputs (_schedule's loop,
  done here), which readers of those targets it holds, which of its bases the program holds (in the order they were
  built: _held_generated sorts by it), and the scheduler's tuning constants. Two graphs with equal keys are the same
  graph up to renaming: base i of one plays the part of base i of the other, so one schedule's kernels serve both."""
  __slots__ = ("_readers", "assigns", "bufs", "has_index", "index", "key", "live", "nodes", "outs", "parts", "roots")
  def __init__(self, outs: list[LazyBuffer], live: Callable[[], list[LazyBuffer]] | None):
    self.index: dict[LazyBuffer, int] = {}
    self.nodes: list[LazyBuffer] = []
    self.outs: list[LazyBuffer] = []
    self.parts: list[tuple] = []
    self.bufs: dict[int, int] = {}
    self.roots: list[int] = []
    self.has_index, self.live = False, live
    self._readers: dict[LazyBuffer, list[LazyBuffer]] = {}
    self.assigns: list[LazyBuffer] = []   # the pending assigns among the bases (in the order the walk met them)
    self.extend(outs)

  def readers(self, target: LazyBuffer) -> list[LazyBuffer]:
    """target.readers, listed once per schedule (no lazy buffer is made while scheduling: the set can't grow)."""
    if (rs := self._readers.get(target)) is None: rs = self._readers[target] = list(target.readers) if target.readers is not None else []
    return rs

  def extend(self, outs: list[LazyBuffer]) -> None:
    """Add outputs (and the stale readers they bring: _schedule's loop), then key the graph."""
    while outs:
      self.outs += outs
      self.roots += [self._add(o) for o in outs]
      outs = [r for b in self.assigns for r in self.readers(_target(b))
              if r.buffer is None and r not in self.index and not _reaches(r, b)]
      if outs: snapshots.update(outs)
    index = self.index
    readers = tuple(tuple(sorted(index[r] for r in self.readers(_target(b)) if r in index)) for b in self.assigns) if self.assigns else ()
    held: tuple = ()
    if self.live is not None and (self.assigns or self.has_index):
      mine = {b: None for b in (lb._base or lb for lb in self.live()) if b.buffer is None and b in index}
      held = tuple(index[b] for b in sorted(mine, key=lambda b: b.id))
    self.key = (tuple(self.parts), tuple(self.roots), readers, held, self.live is not None,
                COSTLY_OPS, GENERATED_MAX_READ, MAX_FUSED_CHAINS, tuple(_OP_COST.items()))

  def _add(self, o: LazyBuffer) -> int:
    index, nodes, parts, bufs = self.index, self.nodes, self.parts, self.bufs
    if (i := index.get(root := o._base or o)) is not None: return i
    i = index[root] = len(nodes)
    nodes.append(root)
    # (the walk visits every base and edge of an eager step's graph at every step: the methods and constants it asks
    # for are locals, and the stack holds each base with its number)
    get, put, visit, add_node, INDEX, ASSIGN = index.get, parts.append, [(root, i)], nodes.append, Ops.INDEX, Ops.ASSIGN
    push = visit.append
    while visit:
      x, i = visit.pop()
      if x.buffer is not None:
        put((i, x.op, x.dtype, x.device, x.shape, bufs.setdefault(id(x.buffer), len(bufs))))
        continue
      srcs = []
      for s in x.srcs:
        if (sb := s._base) is None: sb = s
        if (j := get(sb)) is None:
          j = index[sb] = len(nodes)
          add_node(sb); push((sb, j))
        srcs.append(j if s is sb else (j, s.st))
      if (op := x.op) is INDEX: self.has_index = True
      elif op is ASSIGN: self.assigns.append(x)
      # (-0.0 == 0.0, one hash: the sign in the key, as UOp's interning keeps it)
      if (arg := x.arg).__class__ is float and arg == 0.0: arg = (arg, math.copysign(1.0, arg))
      put((i, op, x.dtype, x.device, x.shape, arg, x.forced_realize, tuple(srcs)))
    return index[root]

class _Realized:
  """What _held_readers reads of a _Scheduler: the bases its walk saw, and those it realizes."""
  def __init__(self, seen, realize): self.seen, self.realize = seen, realize

class _CachedSchedule:
  """A key's entry: the bases _Scheduler realized before the held readers were asked for (by number), and the
  schedule built for each answer (the held readers' numbers -> items as (ast, outputs, inputs, kind, name, assign
  targets, alloc_nbytes, var_vals), bases by number). `prepared`: what a layer above derived from the schedule of a
  graph without assigns, by its own key (frontend/engine.py: the launches, ready to run again); dropped with the entry."""
  __slots__ = ("built", "prepared", "realize")
  def __init__(self, realize: tuple[int, ...]):
    self.realize, self.built, self.prepared = realize, {}, {}
  @staticmethod
  def number(items: list[ScheduleItem], index: dict[LazyBuffer, int]) -> list[tuple]:
    return [(si.ast, tuple(index[b] for b in si.outputs), tuple(index[b] for b in si.inputs), si.kind, si.name,
             None if si.assign_targets is None else tuple(index[b] for b in si.assign_targets), si.alloc_nbytes, dict(si.var_vals))
            for si in items]
  @staticmethod
  def bind(items: list[tuple], nodes: list[LazyBuffer]) -> list[ScheduleItem]:
    return [ScheduleItem(ast, [nodes[i] for i in o], [nodes[i] for i in ins], kind, name,
                         None if tg is None else [nodes[i] for i in tg], alloc, dict(vv))
            for ast, o, ins, kind, name, tg, alloc, vv in items]

_schedule_cache: dict[tuple, _CachedSchedule] = {}

def _once(fn: Callable[[], Iterable[LazyBuffer]]) -> Callable[[], list[LazyBuffer]]:
  got: list[list[LazyBuffer]] = []
  def once() -> list[LazyBuffer]:
    if not got: got.append(list(fn()))
    return got[0]
  return once

def _build(sched: _Scheduler, fuse: int) -> list[ScheduleItem]:
  """The kernels of the realized bases, in a valid execution order. fuse: 0 one kernel per assign, 1 an assign with
  the assigns it reads (_assign_groups), 2 also those groups of one shape together."""
  groups = _assign_groups(sched, fuse) if fuse else {}
  absorbed = {id(g) for host, chains in groups.items() for chain in chains for g in chain if g is not host}
  items: dict[LazyBuffer, ScheduleItem] = {}   # every realized base -> the item computing it (fused assigns share one)
  for b in sched.realize:
    if b.buffer is not None or id(b) in absorbed: continue
    if b.op is Ops.COPY: items[b] = ScheduleItem(None, [b], [b.srcs[0].base], "copy", f"copy {b.arg}->{b.device}"); continue
    if b.op is Ops.EMPTY: items[b] = ScheduleItem(None, [b], [], "empty", "empty"); continue
    if b.op is Ops.ASSIGN:
      # the store goes to the target's buffer; reading the target at other positions in the same kernel would
      # race with the store, so such values were realized by the frontend (Tensor.assign) first
      for it in _assign_items(sched, groups.get(b, [[b]])):
        for o in it.outputs: items[o] = it
      continue
    kb = _KernelBuilder(sched, b)
    val = kb.base(b) if b.op is not Ops.CONTIGUOUS else kb.ref(b.srcs[0])
    store_st = ShapeTracker.from_shape(b.shape)
    ast, vv, name = _finish_built(kb, UOp(Ops.SINK, None, (UOp(Ops.STORE, None, (val,), (0, store_st)),)), store_st)
    items[b] = ScheduleItem(ast, [b], kb.inputs, "kernel", name, var_vals=vv)
  # order: an item runs after the items producing its inputs; an assign runs after every item reading its target
  unique = list({id(it): it for it in items.values()}.values())
  deps = _item_deps(unique, items)
  byid = {id(it): it for it in unique}
  order: list[ScheduleItem] = []
  done: set = set()
  for it in unique: _visit(id(it), byid, deps, order, done, set())
  return order

def _item_deps(unique: list[ScheduleItem], items: dict[LazyBuffer, ScheduleItem]) -> dict[int, set]:
  """id(item) -> ids of the items it runs after: those producing its inputs, and for an assign every other item
  reading its target (they read the old value) and the one producing the target."""
  deps: dict[int, set] = {id(it): {id(items[i]) for i in it.inputs if i in items} for it in unique}
  # the items reading each buffer, in item order (what scanning every item's inputs per target finds, in that order)
  readers: dict[int, list] = {}
  for it2 in unique:
    for i in it2.inputs:
      if not (lst := readers.setdefault(id(i), [])) or lst[-1] is not it2: lst.append(it2)
  for it in unique:
    for tgt in it.assign_targets or ():
      for it2 in readers.get(id(tgt), ()):
        if it2 is not it: deps[id(it)].add(id(it2))
      if tgt in items and items[tgt] is not it: deps[id(it)].add(id(items[tgt]))
  return deps

def _assign_items(sched: _Scheduler, chains: list[list[LazyBuffer]]) -> list[ScheduleItem]:
  """One kernel storing every assign of `chains` (in each chain the first reads the others' new values: they are
  inlined), or less fused when that kernel would read a buffer it writes at another element than the one it writes:
  a kernel per chain, then per assign."""
  group = [g for chain in chains for g in chain]
  # (a write through a view, never fused, stores at the view's positions)
  st = ShapeTracker.from_shape(group[0].shape) if group[0].arg is None else group[0].arg
  kb = _KernelBuilder(sched, group[0], group)
  ast = UOp(Ops.SINK, None, tuple(UOp(Ops.STORE, None, (kb.ref(g.srcs[0]),), (i, st)) for i, g in enumerate(group)))
  targets = [g.srcs[1].base for g in group]
  if len(group) > 1:
    written = {id(t.buffer) for t in targets}
    def writes(i: int) -> bool: return i >= len(group) and (lb := kb.inputs[i - len(group)].base).buffer is not None and id(lb.buffer) in written
    # (two assigns into one buffer: their order matters, keep them apart; kb.loads are the ast's loads)
    if len(written) < len(targets) or any(writes(i) and lst != st for i, lst in kb.loads) \
       or any(writes(u.arg[0]) for u in _loads_under_views(ast)) or _load_after_store(ast, targets, kb.inputs):
      return [it for part in (chains if len(chains) > 1 else [[g] for g in group]) for it in _assign_items(sched, [part])]
  ast, vv, name = _finish_built(kb, ast, st)
  return [ScheduleItem(ast, group, kb.inputs, "kernel", name, assign_targets=targets, var_vals=vv)]

def _loads_under_views(ast: UOp) -> set[UOp]:
  """The loads under a VIEW of an inlined value (another fused assign's value read shifted or flipped): their own
  tracker is the identity, yet the kernel reads them at the view's elements."""
  return {u for v in ast.toposort() if v.op is Ops.VIEW for u in v.toposort() if u.op is Ops.LOAD}

def _load_after_store(ast: UOp, targets: list[LazyBuffer], inputs: list[LazyBuffer]) -> bool:
  """Does one output's value load another output's target (its old value, at the same element)? Nothing orders that
  load before the other store (their values are independent), so the kernel may write the element first: a store's
  own loads of its target are safe, since its value is computed from them."""
  nout, out_of = len(targets), {id(t.buffer): i for i, t in enumerate(targets)}
  loads = [{u for u in store.src[0].toposort() if u.op is Ops.LOAD} for store in ast.src]
  for i, ls in enumerate(loads):
    for u in ls:
      if u.arg[0] < nout or (b := inputs[u.arg[0] - nout].base).buffer is None: continue
      if (j := out_of.get(id(b.buffer))) is not None and j != i and u not in loads[j]: return True
  return False

MAX_FUSED_CHAINS = 4   # chains of one shape merged into one kernel (each adds ~10 buffer arguments)

def _assign_groups(sched: _Scheduler, fuse: int) -> dict[LazyBuffer, list[list[LazyBuffer]]]:
  """Assigns fused into one kernel (an optimizer step): chains [host, parts...], where the host's value reads the
  parts' new values at the same element (a weight's update reads its new moments), all of one shape, computed
  elementwise (no reduction inlined) into targets that already have buffers; with fuse=2, up to MAX_FUSED_CHAINS
  chains of one shape and device go into one kernel. Returns the first host -> its kernel's chains."""
  def inlined(b: LazyBuffer) -> tuple[bool, list]:
    """(is the kernel of assign b elementwise, [(pending assign it reads, read at the same element)])"""
    found, seen, stack = [], set(), [b.srcs[0]]
    while stack:
      s = stack.pop()
      sb = s.base
      if id(sb) in seen or sb.buffer is not None or sb.op in (Ops.CONST, Ops.INDEX): continue
      seen.add(id(sb))
      if sb.op is Ops.ASSIGN and sb in sched.realize:
        found.append((sb, not s.is_view or s.st == ShapeTracker.from_shape(sb.shape))); continue
      if sb in sched.realize: continue   # its own kernel: loaded
      if sb.op not in ELEMENTWISE and sb.op is not Ops.CONTIGUOUS: return False, []
      stack.extend(sb.srcs)
    return True, found
  cands: dict[LazyBuffer, list] = {}
  for b in sched.realize:
    if b.buffer is not None or b.op is not Ops.ASSIGN or b.arg is not None or b.srcs[1].base.buffer is None: continue
    ok, found = inlined(b)
    if ok: cands[b] = found
  chains: list[list[LazyBuffer]] = []
  taken: set = set()
  for host, found in cands.items():
    if id(host) in taken or not found: continue
    parts = {id(a): a for a, same in found if same and a in cands and a.shape == host.shape and id(a) not in taken}
    # a part read through a view too, or one that itself reads another assign, stays a kernel of its own
    for a, same in found:
      if not same or cands.get(a): parts.pop(id(a), None)
    if parts:
      chains.append([host, *parts.values()])
      taken.update(parts, {id(host)})
  if fuse >= 2: chains += [[b] for b in cands if id(b) not in taken]
  merged: dict[tuple, list[list[list[LazyBuffer]]]] = {}
  for chain in chains:
    kernels = merged.setdefault((chain[0].shape, chain[0].device), [])
    if fuse < 2 or not kernels or len(kernels[-1]) >= MAX_FUSED_CHAINS: kernels.append([])
    kernels[-1].append(chain)
  return {ks[0][0]: ks for kernels in merged.values() for ks in kernels if len(ks) > 1 or len(ks[0]) > 1}

def _readers_of(target: LazyBuffer) -> list[LazyBuffer]: return list(target.readers) if target.readers is not None else []
def _target(assign: LazyBuffer) -> LazyBuffer: return (t := assign.srcs[1])._base or t   # (assign.srcs[1].base)

def _inlined_readers(sched: _Scheduler, assigns: set, exact: bool = False, readers: Callable = _readers_of) -> list[LazyBuffer]:
  """The readers of the assigns' targets (nodes built from their old values) that this schedule computes inside
  other kernels rather than storing; `exact`: without those that also read that assign's result (they can't run
  before it; a walk per reader, so only where it matters). readers: target -> its readers (_GraphKey lists them once)."""
  return list({id(r): r for b in assigns for r in readers(_target(b))
               if r.buffer is None and r in sched.seen and r not in sched.realize and not (exact and _reaches(r, b))}.values())

def _held_readers(sched: _Scheduler, assigns: set, live: Iterable[LazyBuffer], readers: Callable = _readers_of) -> list[LazyBuffer]:
  """The bases of `live` that this schedule leaves unrealized and whose later computation would go through a reader of
  an assign's target that the schedule inlines (so runs before the assign here, but after it when realized later):
  they must be realized now. (One that also reads an assign's result can't run before it: ordering it makes a cycle,
  which create_schedule breaks by storing the inlined readers instead.)"""
  if not (inlined := set(_inlined_readers(sched, assigns, readers=readers))): return []
  memo: dict[LazyBuffer, bool] = {}
  def stale(root: LazyBuffer) -> bool:
    # post-order over the unrealized bases under root, stopping at buffers and at what this schedule stores
    stack = [(root, False)]
    while stack:
      x, ready = stack.pop()
      if x in memo: continue
      if x.buffer is not None or x in sched.realize: memo[x] = False; continue
      if ready: memo[x] = x in inlined or any(memo[s._base or s] for s in x.srcs); continue   # (s.base, inlined)
      stack.append((x, True))
      stack.extend((sb, False) for s in x.srcs if (sb := s._base or s) not in memo)
    return memo[root]
  return list({id(b): b for lb in live if (b := lb._base or lb).buffer is None and b not in sched.realize and stale(b)}.values())

def _reaches(b: LazyBuffer, target: LazyBuffer) -> bool:
  """Does computing b read `target` (an unrealized base)?"""
  seen, stack = set(), [b]
  while stack:
    x = stack.pop()
    if x is target: return True
    if x in seen or x.buffer is not None: continue
    seen.add(x)
    stack.extend(s.base for s in x.srcs)
  return False

def _visit(b: int, items: dict, deps: dict, order: list, done: set, visiting: set) -> None:
  """Depth-first: item b (by id) after those it depends on. (Not a closure: a recursive inner function is a reference
  cycle, which would keep every buffer of the schedule alive until the garbage collector runs.)"""
  if b in done: return
  if b in visiting: raise RuntimeError("cycle in the schedule (an assign whose value reads its own target at another position?)")
  visiting.add(b)
  for d in deps[b]: _visit(d, items, deps, order, done, visiting)
  visiting.discard(b); done.add(b); order.append(items[b])
