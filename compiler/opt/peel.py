"""Loop peeling (range cutting): split a loop where comparisons against its index change value.

A padded convolution reads `x[oy+ky-1]` only where `0 <= oy+ky-1 < H`: every iteration of the oy loop compares.
For oy in [1, H-1) both comparisons are true whatever ky is, so cutting the loop into [0,1), [1,H-1), [H-1,H) lets
the symbolic simplifier fold them away in the middle piece (by the index bounds), and the gated loads there become
plain loads. The pieces are sibling loops over fresh ranges `p` with the old index `r = p + lo`.

Works on any loop the renderer emits as a loop: reduction loops on every backend (C and PTX), output loops on the
CPU (on GPUs output loops are the grid, where peeling means nothing). A peeled output loop keeps the loops outside it
in `k.global_ranges` (the spine) and puts each piece and the output loops inside it in `k.nests`, one chain per piece
(compiler/linearize.py nests a chain under the spine).

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.lower import lower
>>> from compiler.dtypes import dtypes
>>> x = LazyBuffer.empty((4, 8), dtypes.float32, "CPU"); x.buffer = object()
>>> k = lower(create_schedule([x.pad(((0, 0), (2, 1))).r(Ops.ADD, (1,))])[0].ast)
>>> peel_points(k, k.reduce_ranges()[0])
[2, 10]
>>> k2 = peel_range(k, k.reduce_ranges()[0])
>>> any(u.op is Ops.CMPLT for u in k2.sink.toposort())
False
"""
from __future__ import annotations
from compiler.dtypes import dtypes
from compiler.lower import LoweredKernel, identity_element
from compiler.uop import UOp, Ops, UPat, PatternMatcher, graph_rewrite, substitute, simplify, symbolic
from compiler.opt.base import OptError, copy_kernel
from compiler.vectorize import broadcast
import itertools, math

MAX_PIECES = 5
MAX_PEELS = 16   # reduction loops cut per kernel at most (each cut copies the loops beside it)

def _fresh(k: LoweredKernel, r: UOp, size: int | None = None) -> UOp:
  return k.new_range(r.src[0].arg if size is None else size, r.arg[1])   # numbered by the kernel: deterministic source

def _affine(x: UOp, r: UOp) -> tuple[int, UOp] | None:
  """(a, rest) with x == a*r + rest and rest free of r, or None when x is not affine in r."""
  z = simplify(substitute(x, {r: UOp.const(dtypes.int32, 0)}))
  one = simplify(substitute(x, {r: UOp.const(dtypes.int32, 1)}))
  d = simplify(one - z)
  if d.op is not Ops.CONST or d.arg == 0: return None
  if simplify(z + r * d.arg) is not simplify(x): return None   # not linear (a div/mod of r, say)
  return d.arg, z

def _cuts(cmp: UOp, r: UOp) -> list[int]:
  x, c = cmp.src
  if cmp.op is Ops.CMPLT and x.op is Ops.CONST and c.op is not Ops.CONST:   # c < x  is  not (x < c+1): same cuts
    x, c = c, UOp.const(c.dtype, x.arg + 1)
  if c.op is not Ops.CONST or x.dtype is None or not x.dtype.is_int or x.dtype.count != 1 or r not in x.toposort(): return []
  if (af := _affine(x, r)) is None: return []
  a, rest = af
  lo, hi, cv = rest.vmin, rest.vmax, c.arg
  if cmp.op is Ops.CMPLT:   # a*r + rest < c: uniformly true below the first cut, uniformly false from the second
    if a > 0: return [-((hi - cv) // a), -((lo - cv) // a)]
    return [(hi - cv) // -a + 1, (lo - cv) // -a + 1]
  if lo == hi and (cv - lo) % a == 0:   # a*r + const != c: only one r differs
    t = (cv - lo) // a
    return [t, t + 1]
  return []

def peel_points(k: LoweredKernel, r: UOp) -> list[int]:
  """The indices in (0, size) where a comparison that depends on loop r changes value; [] when none (or too many)."""
  n = r.src[0].arg
  pts: set[int] = set()
  for u in k.sink.toposort():
    if u.op in (Ops.CMPLT, Ops.CMPNE) and u.src[0].dtype is not None and u.src[0].dtype.count == 1: pts.update(_cuts(u, r))
  out = sorted(p for p in pts if 0 < p < n)
  return out if len(out) < MAX_PIECES else []

def _load_gate(ld: UOp) -> UOp | None:
  if len(ld.src) == 3 and ld.src[2].op is Ops.CONST:
    # (a vector load (a peeled copy's, vectorized before the peel) that reads nothing is a vector of zeros, not a scalar)
    return ld.replace(src=ld.src[:2]) if ld.src[2].arg else broadcast(UOp.const(ld.dtype.scalar, 0), ld.dtype.count)
  return None
def _reduce_identity(red: UOp) -> UOp | None:
  v = red.src[0]
  if v.op is Ops.CONST and red.arg in (Ops.ADD, Ops.MAX) and v.arg == identity_element(red.arg, red.dtype.scalar):
    # a sum of -0.0s is +0.0: the accumulator starts at +0.0 and +0.0 + -0.0 = +0.0 (IEEE 754-2019 6.3), as torch's sum
    return v if v.arg.__class__ is not float or math.copysign(1.0, v.arg) > 0 or red.arg is not Ops.ADD else v.replace(arg=0.0)
  return None
# after peeling: a gate that became constant disappears, a reduction of nothing is its identity
cleanup = symbolic + PatternMatcher([(UPat(Ops.LOAD, name="ld"), _load_gate), (UPat(Ops.REDUCE, name="red"), _reduce_identity)])

def _pieces(n: int, pts: list[int]) -> list[tuple[int, int]]:
  b = [0, *pts, n]
  return list(itertools.pairwise(b))

def peel_range(k: LoweredKernel, r: UOp) -> LoweredKernel:
  """A new kernel with loop r (an output loop of k.global_ranges, or a reduction loop) cut at peel_points."""
  k = copy_kernel(k)   # (its range counter moves on; the caller's kernel stays as it was)
  pts = peel_points(k, r)
  if not pts: raise OptError(f"PEEL of loop r{r.arg[0]} (size {r.src[0].arg}) in kernel {k.name}: no comparison against constants to cut at")
  pieces = _pieces(r.src[0].arg, pts)
  if r in k.global_ranges:
    # (a reduction loop of a peeled kernel's piece may still be cut: its loop lives inside that piece's chain)
    if k.nests: raise OptError(f"PEEL in kernel {k.name}: the kernel is already peeled")
    i = k.global_ranges.index(r)
    if k.threaded is not None and k.threaded in k.global_ranges[i + 1:]:
      raise OptError(f"PEEL of loop r{r.arg[0]} in kernel {k.name}: the threaded loop must stay outside the peeled one or be it")
    inner = k.global_ranges[i + 1:]
    spine = set(k.global_ranges[:i])
    others = [u for u in k.sink.toposort() if u.op is Ops.RANGE and u not in spine and u is not r]
    stores, nests = [], []
    for lo, hi in pieces:
      p = _fresh(k, r, hi - lo)
      m = {x: _fresh(k, x) for x in others}
      m[r] = p + lo if lo else p
      stores += [substitute(s, m) for s in k.sink.src]
      nests.append([p] + [m[g] for g in inner])
    sink = graph_rewrite(UOp(Ops.SINK, None, tuple(stores)), cleanup)
    # the threaded loop itself: the renderers cut it into the same chunks as before, each chunk running its share of
    # every piece (a batch too small for many cores threads the rows that the peel cuts: a 16-core CPU splits a
    # strided conv's 16 output rows, and the first row still keeps the gates alone)
    pieces_of = {c[0]: lo for c, (lo, _) in zip(nests, pieces)} if r is k.threaded else {}
    out = LoweredKernel(k.name, sink, list(k.buf_dtypes), list(k.global_ranges[:i]), k.outputs, list(k.applied_opts), k.threaded, nests, [i] * len(nests),
                        next_range=k.next_range, thread_pieces=pieces_of)
  else:
    m: dict[UOp, UOp] = {}
    # the pieces' loops are shared by every reduction over r (a register tile's accumulators): one loop nest per piece
    copies: list[dict[UOp, UOp]] = [{} for _ in pieces]   # per piece: its loop (key r) and its copies of the others
    for red in [u for u in k.sink.toposort() if u.op is Ops.REDUCE and r in u.src[1:]]:
      j = red.src.index(r)
      parts = []
      for n_piece, (lo, hi) in enumerate(pieces):
        cp = copies[n_piece]
        if r not in cp: cp[r] = _fresh(k, r, hi - lo)
        p = cp[r]
        # each piece is a loop nest of its own, and a loop has one place: the piece's other loops (outside r as well as
        # inside it) are copies, except in the first piece, which keeps them
        for x in red.src[1:]:
          if n_piece and x is not r and x.op is Ops.RANGE and x not in cp: cp[x] = _fresh(k, x)
        fresh = {x: cp[x] if n_piece else x for x in red.src[1:] if x is not r and x.op is Ops.RANGE}
        body = substitute(red.src[0], {**{x: y for x, y in fresh.items() if x is not y}, r: p + lo if lo else p})
        parts.append(UOp(Ops.REDUCE, red.dtype, (body, *[fresh.get(x, x) for x in red.src[1:j]], p, *[fresh.get(x, x) for x in red.src[j + 1:]]), red.arg))
      total = parts[0]
      for q in parts[1:]: total = UOp(red.arg, red.dtype, (total, q))
      m[red] = total
    out = copy_kernel(k)
    out.sink = graph_rewrite(substitute(k.sink, m), cleanup)
  out.applied_opts.append(("PEEL", r.arg[0], tuple(pts)))
  return out

def peel(k: LoweredKernel, output_loops: bool = True) -> LoweredKernel:
  """Peel every loop of k that compares its index against constants: reduction loops, and output loops too when
  `output_loops` (the CPU, where they are loops; not on GPUs, where they are the grid). Output loops are peeled at most
  once (the innermost one that has cut points, outside the threaded one)."""
  for _ in range(MAX_PEELS):   # the copies a peel makes of the other loops have comparisons to cut too
    if (r := next((r for r in k.reduce_ranges() if peel_points(k, r)), None)) is None: break
    k = peel_range(k, r)
  if output_loops and not k.nests:
    for r in reversed(k.global_ranges):
      if r is not k.threaded and peel_points(k, r) and (k.threaded is None or k.global_ranges.index(k.threaded) < k.global_ranges.index(r)):
        return peel_range(k, r)
  return k

def split_tail(k: LoweredKernel, g: UOp, amt: int) -> LoweredKernel:
  """Output loop g (size n) cut at m, the last multiple of amt: g stays an output loop of size m (so tiles of amt apply
  to it) and the n - m remaining iterations run as their own loop, a chain beside it with copies of the loops inside it.
  The effect of padding n to a multiple of amt, without touching memory past the buffers."""
  k = copy_kernel(k)
  n = g.src[0].arg
  m = n - n % amt
  if g not in k.global_ranges or m == 0 or m == n:
    raise OptError(f"PAD of loop r{g.arg[0]} (size {n}) by {amt} in kernel {k.name}: nothing to cut (needs an output loop longer than {amt}, not a multiple)")
  if g is k.threaded: raise OptError(f"PAD of loop r{g.arg[0]} in kernel {k.name}: the threaded loop can't leave a remainder outside its split")
  i = k.global_ranges.index(g)
  spine = set(k.global_ranges[:i])
  main, tail = _fresh(k, g, m), _fresh(k, g, n - m)
  others = [u for u in k.sink.toposort() if u.op is Ops.RANGE and u not in spine and u is not g]
  mt = {x: _fresh(k, x) for x in others}
  mt[g] = tail + m
  inside = [s for s in k.sink.src if g in s.toposort()]   # stores of chains beside g stay as they are
  stores = [s for s in k.sink.src if s not in inside] + [substitute(s, {g: main}) for s in inside] + [substitute(s, mt) for s in inside]
  nests = list(k.nests)
  depths = list(k.depths or [len(k.global_ranges)] * len(nests))
  new_nests, new_depths = [[tail] + [mt[r] for r in k.global_ranges[i + 1:]]], [i]
  for c, d in zip(nests, depths):   # a chain hung inside g: its copy hangs inside the remainder loop too
    if d > i: new_nests.append([tail] + [mt[r] for r in k.global_ranges[i + 1:d]] + [mt[r] for r in c]); new_depths.append(i)
  out = LoweredKernel(k.name, UOp(Ops.SINK, None, tuple(stores)), list(k.buf_dtypes), [main if r is g else r for r in k.global_ranges],
                     k.outputs, list(k.applied_opts), k.threaded, nests + new_nests, depths + new_depths, next_range=k.next_range,
                     thread_pieces=k.thread_pieces)
  out.applied_opts.append(("PAD", g.arg[0], amt))
  return out

def unroll_tail(k: LoweredKernel) -> LoweredKernel:
  """The remainder loop that the last PAD (split_tail) left (the first loop of k's last chain) fully unrolled: its
  iterations become one body sharing the loops inside it. A 6-row matmul tile cut from 64 rows leaves 2 pairs of rows
  as a loop of 2 (two 2 x 2 tiles: 4 accumulators, half the FMA rate at a 5-cycle latency); unrolled, one 4 x 2 tile.

  >>> from compiler.lazy import LazyBuffer
  >>> from compiler.schedule import create_schedule
  >>> from compiler.lower import lower
  >>> x = LazyBuffer.empty((10, 8), dtypes.float32, "CPU"); x.buffer = object()
  >>> k = lower(create_schedule([x.r(Ops.ADD, (1,))])[0].ast)
  >>> k2 = unroll_tail(split_tail(k, k.global_ranges[0], 4))
  >>> [len(c) for c in k2.nests], k2.applied_opts[-1][2], len(k2.sink.src)
  ([], 2, 3)
  """
  nests, depths = list(k.nests), list(k.depths)
  if not nests or not k.applied_opts or k.applied_opts[-1][0] != "PAD": raise OptError(f"unroll_tail of kernel {k.name}: no remainder loop")
  tail, d = nests[-1][0], depths[-1]
  if any(dd > d for dd in depths[:-1]) or any(tail in c for c in nests[:-1]):
    raise OptError(f"unroll_tail of kernel {k.name}: other loop chains hang inside the remainder loop")
  inside = [s for s in k.sink.src if tail in s.toposort()]
  stores = [s for s in k.sink.src if s not in inside] + [substitute(s, {tail: UOp.const(dtypes.int32, a)}) for a in range(tail.src[0].arg) for s in inside]
  out = copy_kernel(k)
  out.sink = UOp(Ops.SINK, None, tuple(dict.fromkeys(stores)))
  if len(nests[-1]) > 1: out.nests, out.depths = nests[:-1] + [nests[-1][1:]], depths
  else: out.nests, out.depths = nests[:-1], depths[:-1]
  out.applied_opts.append(("UNROLL_TAIL", tail.arg[0], tail.src[0].arg))
  return out
