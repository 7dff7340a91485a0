"""cat along the axis a sharded tensor is split on, made where each piece already lives.

Each piece holds, on each device, a range of the result's cat axis without a copy: a piece shrunk to one shard (or
any value on one device, `real` with one True) all of itself on that one device; a piece split on the cat axis its
own shards; a replicated piece all of itself everywhere; a piece split on another axis is gathered whole to each
device first (what `MultiLazyBuffer.alu` does with such an operand). The result takes the first layout in which every
device finds the parts of its range locally: split evenly over the devices (as a pad back around one shard made it
before), else all on the one device that holds the one-shard pieces (the placeholders of frontend/multi.py's one-device
value elsewhere). No layout fits: refused naming cat, the shapes and where each piece lives. A piece that lives on
one device is never copied to another (pieces on different devices out of order are refused, not gathered); only a
piece split on another axis is gathered, as an elementwise op gathers it.

>>> from frontend import Tensor
>>> x = Tensor([1.0, 2.0, 3.0, 4.0]).shard(("CPU:1", "CPU:2"), 0)
>>> y = x[:2].cat(x[:2] * 10)   # both halves on CPU:1: the result stays there
>>> y.tolist(), y.lazydata.real
([1.0, 2.0, 10.0, 20.0], [True, False])
"""
from __future__ import annotations
from dataclasses import dataclass
from compiler.dtypes import DType
from compiler.lazy import LazyBuffer
from frontend.multi import MultiLazyBuffer, _concat, _to_sharded

@dataclass(frozen=True)
class Piece:
  """One input of the cat: where it starts on the cat axis and how it is placed. kind: "one" (its whole value on
  device `home`), "split" (split on the cat axis, `bounds` its shards), "whole" (replicated), "gather" (split on
  another axis)."""
  off: int
  size: int
  shape: tuple
  kind: str
  home: int = -1
  axis: int | None = None
  real: tuple[bool, ...] = ()
  bounds: tuple[tuple[int, int], ...] = ()

  def holds(self, i: int) -> tuple[int, int] | None:
    """The range of the result's cat axis this piece holds on device i without a copy (None: none of it)."""
    if self.kind == "one": return (self.off, self.off + self.size) if i == self.home else None
    if self.kind == "split": return (self.off + self.bounds[i][0], self.off + self.bounds[i][1])
    return (self.off, self.off + self.size)   # whole everywhere (a "gather" piece once gathered)

  def where(self, devs: tuple[str, ...]) -> str:
    if self.kind == "one": return f"{self.shape} on {devs[self.home]}"
    if self.kind == "split": return f"{self.shape} split over all"
    return f"{self.shape} replicated" if self.kind == "whole" else f"{self.shape} split on axis {self.axis}"

@dataclass(frozen=True)
class Plan:
  """What the backward needs (no buffers: the forward's values are not kept): the pieces, the cat axis, the devices
  and, per device, the range of the cat axis the result holds there (None: a placeholder)."""
  pieces: tuple[Piece, ...]
  axis: int
  devices: tuple[str, ...]
  layout: tuple[tuple[int, int] | None, ...]

def _along(shape: tuple, axis: int, rng: tuple[int, int]) -> tuple:
  return tuple(rng if a == axis else (0, s) for a, s in enumerate(shape))

def _resized(shape: tuple, axis: int, size: int) -> tuple: return tuple(size if a == axis else s for a, s in enumerate(shape))

def _pad_along(ndim: int, axis: int, before: int, after: int) -> tuple:
  return tuple((before, after) if a == axis else (0, 0) for a in range(ndim))

def _piece(x, off: int, axis: int, devs: tuple[str, ...], shapes: list) -> Piece:
  if not isinstance(x, MultiLazyBuffer): raise RuntimeError(f"cat: shapes {shapes}: mixing a tensor sharded over {devs} with one on {x.device}")
  if x.device != devs: raise RuntimeError(f"cat: shapes {shapes}: tensors sharded over different devices {devs} and {x.device}")
  size = x.shape[axis]
  if not isinstance(size, int): raise RuntimeError(f"cat: shapes {shapes} along dim {axis}, which is sharded over {devs}: a piece of symbolic size {size}")
  if all(x.real):
    kind = "split" if x.axis == axis else "whole" if x.axis is None else "gather"
    return Piece(off, size, x.shape, kind, axis=x.axis, real=tuple(x.real), bounds=tuple(x.bounds or ()))
  if sum(x.real) != 1:
    raise RuntimeError(f"cat: shapes {shapes} along dim {axis}, which is sharded over {devs}: a piece is held by some devices only ({x.real})")
  return Piece(off, size, x.shape, "one", x.real.index(True), x.axis, tuple(x.real))

def _fits(layout, pieces: list[Piece]) -> bool:
  for i, ab in enumerate(layout):
    if ab is None: continue
    for p in pieces:
      lo, hi = max(ab[0], p.off), min(ab[1], p.off + p.size)
      if lo < hi and ((h := p.holds(i)) is None or lo < h[0] or hi > h[1]): return False
  return True

def plan(xs: list, axis: int) -> Plan:
  """The layout of a cat along `axis` of the MultiLazyBuffers xs, or a RuntimeError naming cat, the shapes and the
  devices where none holds every part locally."""
  devs, shapes = next(x.device for x in xs if isinstance(x, MultiLazyBuffer)), [x.shape for x in xs]
  offs = [0]
  for x in xs: offs.append(offs[-1] + x.shape[axis])
  pieces = [_piece(x, off, axis, devs, shapes) for x, off in zip(xs, offs)]
  n, total = len(devs), offs[-1]
  candidates = []
  if total % n == 0: candidates.append(tuple((i * (total // n), (i + 1) * (total // n)) for i in range(n)))
  homes = {p.home for p in pieces if p.kind == "one" and p.size}
  if len(homes) == 1: candidates.append(tuple((0, total) if i in homes else None for i in range(n)))
  for layout in candidates:
    if _fits(layout, pieces): return Plan(tuple(pieces), axis, devs, layout)
  raise RuntimeError(f"cat: shapes {shapes} along dim {axis}, which is sharded over {devs}: the pieces are "
                     f"{', '.join(p.where(devs) for p in pieces)}; no layout holds every part where it already is: move the tensors "
                     "to one device (to) or shard them on another axis first")

def _local(x: MultiLazyBuffer, p: Piece, i: int) -> tuple[LazyBuffer, int]:
  """Piece x's LazyBuffer on device i and where it starts on the result's cat axis."""
  if p.kind == "gather": return x.copy_to_device(x.device[i]), p.off
  return x.lbs[i], p.off + (p.bounds[i][0] if p.kind == "split" else 0)

def _assemble(parts: list[tuple[LazyBuffer, int]], axis: int, ab: tuple[int, int], zeros: LazyBuffer) -> LazyBuffer:
  """The range ab of the cat axis out of (buffer, where it starts) parts on one device: each part's overlap with ab,
  zero-padded to ab and OR-combined bit-exactly (multi._concat); `zeros` where no part overlaps (an empty range)."""
  out = []
  for lb, start in parts:
    lo, hi = max(ab[0], start), min(ab[1], start + lb.shape[axis])
    if lo >= hi: continue
    part = lb.shrink(_along(lb.shape, axis, (lo - start, hi - start)))
    out.append(part.pad(_pad_along(len(lb.shape), axis, lo - ab[0], ab[1] - hi)) if (lo, hi) != ab else part)
  return _concat(out) if out else zeros

def cat(xs: list, axis: int) -> tuple[MultiLazyBuffer, Plan]:
  """xs (one dtype) joined along `axis`, laid out as `plan` decides, and that plan (for the backward)."""
  pl = plan(xs, axis)
  shape = tuple(sum(x.shape[axis] for x in xs) if a == axis else s for a, s in enumerate(xs[0].shape))
  lbs = []
  for i, (ab, dev) in enumerate(zip(pl.layout, pl.devices)):
    zeros = LazyBuffer.const(0, xs[0].dtype, shape if ab is None else _resized(shape, axis, ab[1] - ab[0]), dev)
    lbs.append(zeros if ab is None else _assemble([_local(x, p, i) for x, p in zip(xs, pl.pieces) if p.size], axis, ab, zeros))
  return MultiLazyBuffer(lbs, axis, [ab is not None for ab in pl.layout]), pl

def _whole_on(x: MultiLazyBuffer, i: int) -> LazyBuffer:
  """x's whole value on device i: its own buffer where it holds all of it, else gathered there."""
  if x.real[i] and (x.axis is None or sum(x.real) == 1): return x.lbs[i]
  return x.copy_to_device(x.device[i])

def grads(g: MultiLazyBuffer, pl: Plan, needs: list) -> list[MultiLazyBuffer | None]:
  """Each piece's gradient, split as that piece is (what an optimizer updating it in place needs), cut from the
  result's gradient g: a one-device piece's on its device (placeholders elsewhere), a split piece's shard by shard,
  both without a copy; a replicated piece's copied to every device and a piece split on another axis gets each of its
  shards copied to its device (the way Copy's backward sends a gradient back), each copy only the part that device
  needs."""
  ax, devs, layout = pl.axis, pl.devices, pl.layout
  n = len(devs)
  out_bounds = [ab for ab in layout if ab is not None]
  if len(out_bounds) == 1:
    k = next(i for i, ab in enumerate(layout) if ab is not None)
    shards = {k: _whole_on(g, k)}
  elif g.axis == ax and all(g.real) and g.bounds == out_bounds: shards = dict(enumerate(g.lbs))
  else: shards = dict(enumerate(_to_sharded([_whole_on(g, i) for i in range(n)], ax, out_bounds)))
  dt: DType = g.dtype
  def cut(i: int, p: Piece, rng: tuple[int, int], other: tuple[int, int] | None = None) -> LazyBuffer:
    """rng of the result's cat axis (and `other` of the piece's split axis) on device i, from the shards of g over it."""
    parts = [((lb if other is None else lb.shrink(_along(lb.shape, p.axis, other))).copy_to_device(devs[i]), start)
             for lb, start in _covering(shards, layout, ax, rng)]
    shape = _resized(p.shape if other is None else _resized(p.shape, p.axis, other[1] - other[0]), ax, rng[1] - rng[0])
    return _assemble(parts, ax, rng, LazyBuffer.const(0, dt, shape, devs[i]))
  res: list[MultiLazyBuffer | None] = []
  for p, need in zip(pl.pieces, needs):
    span = (p.off, p.off + p.size)
    if not need: res.append(None)
    elif p.kind == "split": res.append(MultiLazyBuffer([cut(i, p, p.holds(i)) for i in range(n)], ax))
    elif p.kind == "one":
      res.append(MultiLazyBuffer([cut(i, p, span) if i == p.home else LazyBuffer.const(0, dt, p.shape, devs[i]) for i in range(n)],
                                 p.axis, list(p.real)))
    elif p.kind == "whole": res.append(MultiLazyBuffer([cut(i, p, span) for i in range(n)], None))
    else: res.append(MultiLazyBuffer([cut(i, p, span, p.bounds[i]) for i in range(n)], p.axis))
  return res

def _covering(shards: dict[int, LazyBuffer], layout, axis: int, rng: tuple[int, int]) -> list[tuple[LazyBuffer, int]]:
  """The shards of the result's gradient that overlap rng of the cat axis, each shrunk to that overlap (so a copy moves
  only the part needed), with where the overlap starts."""
  out = []
  for m, lb in shards.items():
    lo, hi = max(layout[m][0], rng[0]), min(layout[m][1], rng[1])
    if lo < hi: out.append((lb.shrink(_along(lb.shape, axis, (lo - layout[m][0], hi - layout[m][0]))), lo))
  return out
