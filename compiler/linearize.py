"""The linearizer: order a lowered kernel's graph into a flat program with explicit loops.

Each node is placed in the shallowest loop that contains every range it depends on (so loop-invariant work is
hoisted). Loops form a tree: the output loops nest in order; a reduction's loops nest inside the loop where
its result is needed. A REDUCE becomes DEFINE_ACC before its loops, ASSIGN (the update) in the innermost one,
and the REDUCE itself (read the accumulator) after them.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.lower import lower
>>> from compiler.dtypes import dtypes
>>> from compiler.uop import Ops
>>> x = LazyBuffer.empty((4, 8), dtypes.float32, "CPU"); x.buffer = object()
>>> prog = linearize(lower(create_schedule([x.r(Ops.ADD, (1,))])[0].ast))
>>> [u.op.name for u in prog if u.op in (Ops.RANGE, Ops.ENDRANGE, Ops.DEFINE_ACC, Ops.ASSIGN, Ops.STORE)]
['RANGE', 'DEFINE_ACC', 'RANGE', 'ASSIGN', 'ENDRANGE', 'STORE', 'ENDRANGE']
"""
from __future__ import annotations
import itertools
from compiler.uop import UOp, Ops
from compiler.lower import LoweredKernel, identity_element

def _reduce_to_acc(sink: UOp) -> UOp:
  """REDUCE(value, *rngs) -> REDUCE(ASSIGN(acc, acc op value, *rngs), *rngs) with acc = DEFINE_ACC(identity)."""
  ids = itertools.count()
  mapping: dict[UOp, UOp] = {}
  for u in sink.toposort():   # (mapping holds only the nodes that changed)
    nu = u if mapping.keys().isdisjoint(u.src) else u.replace(src=tuple(mapping.get(s, s) for s in u.src))
    if u.op is Ops.REDUCE and nu.src[0].op is not Ops.ASSIGN:
      value, rngs = nu.src[0], nu.src[1:]
      init = UOp.const(u.dtype, identity_element(u.arg, u.dtype.scalar))
      acc = UOp(Ops.DEFINE_ACC, u.dtype, (init,), (next(ids), None))
      # a tensor-core step accumulates in place: acc = WMMA(a, b, acc) rather than acc + WMMA(a, b, 0)
      if u.arg is Ops.ADD and value.op is Ops.WMMA and value.src[2].op is Ops.CONST and value.src[2].arg == 0:
        step = value.replace(src=(*value.src[:2], acc))
      else: step = UOp(u.arg, u.dtype, (acc, value))
      upd = UOp(Ops.ASSIGN, u.dtype, (acc, step, *rngs))
      nu = UOp(Ops.REDUCE, u.dtype, (upd, *rngs), u.arg)
    if nu is not u: mapping[u] = nu
  return mapping.get(sink, sink)

def linearize(k: LoweredKernel) -> list[UOp]:
  """The kernel as an ordered list; RANGE opens a loop, ENDRANGE(range) closes it. The last program is kept on the sink
  (with the loops it was ordered for): the register check of the opts linearizes the kernel the pipeline then renders."""
  nests = k.nests
  key = (tuple(k.global_ranges), tuple(tuple(c) for c in nests), tuple(k.depths))
  if (hit := k.sink.__dict__.get("_linearized")) is not None and hit[0] == key: return list(hit[1])
  prog = _linearize(k)
  k.sink.__dict__["_linearized"] = (key, tuple(prog))
  return prog

def _linearize(k: LoweredKernel) -> list[UOp]:
  sink = _reduce_to_acc(k.sink)
  topo = sink.toposort()
  need: dict[UOp, frozenset] = {}
  accs: dict[UOp, UOp] = {}   # DEFINE_ACC -> its REDUCE
  updates: dict[UOp, frozenset] = {}   # `acc op value` runs inside the reduction's loops even if value doesn't
  for u in topo:
    if u.op is Ops.REDUCE:
      accs[u.src[0].src[0]] = u
      updates[u.src[0].src[1]] = frozenset(u.src[1:])
  none: frozenset = frozenset()
  def generic(u: UOp) -> frozenset:   # (frozensets are immutable: a node with one source shares its source's set)
    if not u.src: return none
    if len(u.src) == 1 and u not in updates: return need[u.src[0]]
    return none.union(*(need[s] for s in u.src), updates.get(u, none))
  # a loop has one place: REDUCEs that share a range (vectorized or cut kernels make such) must all live at the
  # same depth, else the shallower one's result would be read before the loop it needs is open (ranges not nested,
  # or a cycle that drops a whole store): each gets the ranges the others depend on
  sharers: dict[UOp, list[UOp]] = {}
  for u in topo:
    if u.op is Ops.REDUCE:
      for q in u.src[1:]: sharers.setdefault(q, []).append(u)
  shared = [reds for reds in sharers.values() if len(reds) > 1]
  extra: dict[UOp, frozenset] = {}
  def red_need(u: UOp) -> frozenset: return (need[u.src[0]] | extra.get(u, frozenset())) - frozenset(u.src[1:])
  for u in topo:
    if u.op is Ops.RANGE: need[u] = frozenset((u,))
    elif u.op is Ops.REDUCE: need[u] = red_need(u)
    elif u.op is Ops.DEFINE_ACC: need[u] = frozenset()   # fixed below, once its REDUCE is known
    else: need[u] = generic(u)
  # a DEFINE_ACC lives where its REDUCE lives; everything that read it must include those ranges too
  changed = True
  while changed:
    changed = False
    for acc, red in accs.items():
      if need[acc] != need[red]:
        need[acc] = need[red]; changed = True
    for reds in shared:
      both = frozenset().union(*(need[r] for r in reds))
      for r in reds:
        if not both - frozenset(r.src[1:]) <= need[r]: extra[r] = extra.get(r, frozenset()) | both; changed = True
    if changed:
      for u in topo:
        if u.op in (Ops.RANGE, Ops.DEFINE_ACC): continue
        if u.op is Ops.REDUCE: need[u] = red_need(u)
        elif u.src: need[u] = generic(u)

  path: dict[UOp, tuple] = {}
  for i, r in enumerate(k.global_ranges): path[r] = tuple(k.global_ranges[:i + 1])
  # a peeled or cut output loop: sibling chains of loops, each under the first `depth` output loops (compiler/opt/peel.py)
  nests = k.nests
  depths = k.depths or [len(k.global_ranges)] * len(nests)
  for chain, d in zip(nests, depths):
    for i, r in enumerate(chain): path[r] = tuple(k.global_ranges[:d]) + tuple(chain[:i + 1])
  def deepest(rs) -> tuple:
    best: tuple = ()
    for r in rs:
      p = path[r]
      if len(p) > len(best): best, p = p, best
      assert best[:len(p)] == p, f"ranges {rs} are not nested"
    return best
  for red in reversed([u for u in topo if u.op is Ops.REDUCE]):
    hp = deepest(need[red])
    for j, q in enumerate(red.src[1:]):
      if q.op is Ops.RANGE: path.setdefault(q, hp + tuple(red.src[1:j + 2]))
  homes: dict[frozenset, tuple] = {}   # many nodes need the same loops
  home = {u: homes[rs] if (rs := need[u]) in homes else homes.setdefault(rs, deepest(rs)) for u in topo if u is not sink}   # (the sink spans sibling loops of a peeled kernel)

  order = {u: i for i, u in enumerate(topo)}
  out: list[UOp] = []
  def emit(p: tuple, members: list[UOp]):
    # the items of this block: its own nodes, and one per loop opened inside it (that loop's ENDRANGE stands for it)
    own, groups, n = [], {}, len(p)
    for u in members:
      if u.op is Ops.RANGE: continue
      h = home[u]
      if len(h) == n: own.append(u)
      else: groups.setdefault(h[n], []).append(u)
    item_of = {u: u for u in own}
    first = {u: order[u] for u in own}
    for r, us in groups.items():
      end = UOp(Ops.ENDRANGE, None, (r,))
      for u in us: item_of[u] = end
      first[end] = min(order[u] for u in us)
    deps: dict = {it: set() for it in first}
    for u, it in item_of.items():
      for s in u.src:
        if (d := item_of.get(s)) is not None and d is not it: deps[it].add(d)
    # a loop opens after its bound: a symbolic bound (`start_pos+1`) is a value of this block, read by no member
    for r in groups:
      for s in r.src:
        if s.op is not Ops.CONST and (d := item_of.get(s)) is not None: deps[UOp(Ops.ENDRANGE, None, (r,))].add(d)
    # register pressure: walk from the roots (stores, loops, values nothing in this block reads) in program order and
    # emit each one right after what it needs: a load sinks to just before its first use, a store rises to just
    # after its value is ready, instead of sitting at its place in the graph order with its value live meanwhile
    # and what needs a loop of this block goes first: a value read only after a loop (a conv's relu-mask epilogue) is
    # computed after it, not held in a register all through it
    loops: dict = {}
    def has_loop(it) -> bool:
      if it not in loops:
        loops[it] = False   # (no cycles: the graph is a DAG)
        loops[it] = it.op is Ops.ENDRANGE or any(has_loop(d) for d in deps[it])
      return loops[it]
    key = lambda it: (not has_loop(it), first[it])
    used = set().union(*deps.values()) if deps else set()
    roots = sorted((it for it in first if it not in used), key=first.__getitem__)
    done: set = set()
    for root in roots:
      stack = [(root, False)]
      while stack:   # iterative post-order (unrolled kernels make dependency chains longer than the recursion limit)
        it, ready = stack.pop()
        if ready:
          if it.op is not Ops.ENDRANGE: out.append(it)
          else:
            out.append(it.src[0])
            emit(p + (it.src[0],), groups[it.src[0]])
            out.append(it)
          continue
        if it in done: continue
        done.add(it)
        stack.append((it, True))
        stack.extend((d, False) for d in sorted(deps[it], key=key, reverse=True) if d not in done)
  emit((), [u for u in topo if u is not sink])
  return out
