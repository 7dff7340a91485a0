"""Tensors on several devices: a MultiLazyBuffer is one LazyBuffer per device plus the axis they split (None: each
device holds the whole tensor). It answers the LazyBuffer calls the autograd Functions make (alu, r, movement ops,
cast, copy_to_device), so every op runs per shard; where an op cannot keep the sharding it says so naming the op and
the shapes. Semantics follow tinygrad v0.9's multi.py (shards, axis, `real` and `bounds`) with HEAD's even-shards
rule; a reduce over the sharded axis is an allreduce (`all_reduce`: naive, ring or all2all, chosen by size and device
count as tinygrad does; every device ends with the same bits).

>>> from frontend import Tensor
>>> t = Tensor([[1.0, 2.0], [3.0, 4.0]]).shard(("CPU:1", "CPU:2"), axis=0)
>>> t.device, t.lazydata.bounds
(('CPU:1', 'CPU:2'), [(0, 1), (1, 2)])
>>> (t * 2).sum(axis=0).tolist()
[8.0, 12.0]
"""
from __future__ import annotations
import functools, itertools, operator, os
from compiler.dtypes import DType, dtypes
from compiler.settings import flag
from compiler.lazy import LazyBuffer
from compiler.sint import is_sym
from compiler.uop import Ops
from compiler.view import prod
from hcqrt.device import Device

def canonical(device) -> str | tuple[str, ...]:
  """A device name, or a tuple/list of them, in canonical form ('cpu:0' -> 'CPU'; a tuple stays a tuple).

  >>> canonical(["cpu:1", "CPU:2"]), canonical("cpu:0")
  (('CPU:1', 'CPU:2'), 'CPU')
  """
  if isinstance(device, (tuple, list)):
    if not device: raise ValueError("devices: an empty tuple of devices")
    return tuple(Device.canonicalize(d) for d in device)
  return Device.canonicalize(device)

def _shard_bounds(size: int, n: int, axis: int, shape: tuple, op: str) -> list[tuple[int, int]]:
  # even shards only (tinygrad dropped uneven ones, #8656): the error names the axis and the sizes
  if not isinstance(size, int): raise ValueError(f"{op}: axis {axis} of shape {shape} is symbolic ({size}); it can't be sharded")
  if size % n: raise ValueError(f"{op}: axis {axis} of shape {shape} has {size} elements, which do not split evenly over {n} devices")
  sz = size // n
  return [(sz * i, sz * (i + 1)) for i in range(n)]

def _to_sharded(lbs: list[LazyBuffer], axis: int, bounds: list[tuple[int, int]]) -> list[LazyBuffer]:
  """Each device's piece of a replicated tensor: device i keeps bounds[i] of `axis`."""
  return [lb.shrink(tuple((0, s) if a != axis else b for a, s in enumerate(lb.shape))) for lb, b in zip(lbs, bounds)]

RING_THRESHOLD = 256_000   # elements: from here on (and on more than 2 devices) the ring beats naive (tinygrad's measure)

def _level(name: str, default: int) -> int:
  """An allreduce setting's level (0 off, 1 where it pays, 2 always), read at each reduce; a bad value names itself."""
  v = os.environ.get(name, "") or str(default)
  try: return int(v)
  except ValueError: raise ValueError(f"{name}={v!r}: 0 (off), 1 (for big reduces on more than 2 devices) or 2 (always)") from None

def allreduce_kind(n: int, numel) -> str:
  """Which lowering an allreduce of `numel` elements over `n` devices gets: "ring" on more than 2 devices from
  RING_THRESHOLD elements on (RING=1, the default; RING=0 never, RING=2 always), "all2all" likewise under ALL2ALL
  (default 0; it wins over the ring where both apply), else "naive". Symbolic sizes are always naive.

  >>> allreduce_kind(2, 1 << 20), allreduce_kind(4, 1 << 20), allreduce_kind(4, 1000)
  ('naive', 'ring', 'naive')
  """
  if not isinstance(numel, int): return "naive"
  big = n > 2 and numel >= RING_THRESHOLD
  a2a, ring = _level("ALL2ALL", 0), _level("RING", 1)
  if a2a >= 2 or (big and a2a >= 1): return "all2all"
  if ring >= 2 or (big and ring >= 1): return "ring"
  return "naive"

def _chunks(numel: int, n: int) -> list[tuple[int, int]]:
  """numel split into n nearly equal runs, each a multiple of the widest of 32/16/8/4/2 that divides numel (aligned
  copies); empty runs are left out."""
  f = next((f for f in (32, 16, 8, 4, 2) if numel % f == 0), 1)
  q, r = divmod(numel // f, n)
  ends = list(itertools.accumulate([(q + (i < r)) * f for i in range(n)], initial=0))
  return [(s, e) for s, e in itertools.pairwise(ends) if e > s]

def all_reduce(op: Ops, lbs: list[LazyBuffer]) -> list[LazyBuffer]:
  """Combine one partial result per device with `op` so every device holds the whole result, bit-identical on all.

  naive: every device copies every partial result and combines them in the same order (n(n-1) copies).
  ring: the flat value is cut into n chunks; chunk i travels the ring i -> i+1 -> ... collecting each device's piece
  (reduce-scatter, n-1 hops per chunk), then the finished chunk travels on around the ring to every device
  (all-gather); 2n(n-1) copies, each between ring neighbours only, each 1/n of the value.
  all2all: device i gathers chunk i from every device and reduces it, then sends it to every other device.
  In ring and all2all each chunk is reduced once, on one device, and copied: every device ends with the same bits.

  >>> from frontend import Tensor
  >>> parts = [Tensor([1.0, 2.0], device=d).lazydata for d in ("CPU:1", "CPU:2", "CPU:3")]
  >>> [Tensor(x).tolist() for x in all_reduce(Ops.ADD, parts)]
  [[3.0, 6.0], [3.0, 6.0], [3.0, 6.0]]
  """
  n, shape = len(lbs), lbs[0].shape
  numel = prod(shape)
  kind = allreduce_kind(n, numel)
  if kind == "naive" or numel == 0:
    return [functools.reduce(lambda x, y: x.alu(op, y), [x.copy_to_device(lb.device) for x in lbs]) for lb in lbs]
  devs = [lb.device for lb in lbs]
  flat = [lb.reshape((numel,)) for lb in lbs]
  chunks = _chunks(numel, n)
  have: list[list[LazyBuffer]] = [[] for _ in range(n)]   # have[d][i]: chunk i's result on device d
  for i, (s, e) in enumerate(chunks):
    piece = [x.shrink(((s, e),)) for x in flat]
    if kind == "all2all":
      owner = i
      done = functools.reduce(lambda x, y: x.alu(op, y), [p.copy_to_device(devs[owner]) for p in piece])
    else:
      done, owner = piece[i], i
      for _ in range(n - 1):
        owner = (owner + 1) % n
        done = done.copy_to_device(devs[owner]).alu(op, piece[owner])
    got = {owner: done}
    if kind == "all2all": got.update({d: done.copy_to_device(devs[d]) for d in range(n) if d != owner})
    else:
      for step in range(1, n): got[(owner + step) % n] = got[(owner + step - 1) % n].copy_to_device(devs[(owner + step) % n])
    for d in range(n): have[d].append(got[d])
  # each device's chunks back in one buffer: zero-padded to the whole length and combined bit-exactly
  return [_concat([c.pad(((s, numel - e),)) for c, (s, e) in zip(cs, chunks)]).reshape(shape) for cs in have]

_UINT = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}

def _concat(parts: list[LazyBuffer]) -> LazyBuffer:
  """Pieces on one device, each padded with zeros to the whole shape, combined. OR of the bit patterns (not ADD, which
  turns -0.0 into 0.0) so the concatenation is exact for every dtype."""
  if len(parts) == 1: return parts[0]
  dt = parts[0].dtype
  if dt == dtypes.bool: return functools.reduce(lambda x, y: x.alu(Ops.OR, y), parts)
  bits = [p.cast(_UINT[dt.itemsize], bitcast=True) for p in parts]
  return functools.reduce(lambda x, y: x.alu(Ops.OR, y), bits).cast(dt, bitcast=True)

class MultiLazyBuffer:
  """One LazyBuffer per device. `axis`: the axis split across them (None: replicated); `bounds[i]`: the slice of that
  axis device i holds; `real[i]`: False where a shrink to one shard left device i holding nothing of the value."""
  __slots__ = ("__weakref__", "axis", "bounds", "device", "dtype", "lbs", "real")
  def __init__(self, lbs: list[LazyBuffer], axis: int | None, real: list[bool] | None = None):
    if not lbs or not all(isinstance(x, LazyBuffer) for x in lbs): raise TypeError(f"MultiLazyBuffer: needs LazyBuffers, got {lbs!r}")
    if len({x.dtype for x in lbs}) != 1: raise TypeError(f"MultiLazyBuffer: shards of different dtypes {[x.dtype for x in lbs]}")
    self.lbs, self.axis, self.dtype = lbs, axis, lbs[0].dtype
    self.device: tuple[str, ...] = tuple(x.device for x in lbs)
    self.real: list[bool] = real or [True] * len(lbs)
    if axis is not None:
      splits = list(itertools.accumulate([lb.shape[axis] for lb in lbs], initial=0))
      self.bounds: list[tuple[int, int]] | None = list(itertools.pairwise(splits))
    else: self.bounds = None

  @property
  def real_lbs(self) -> list[LazyBuffer]: return [lb for lb, r in zip(self.lbs, self.real) if r]
  @property
  def shape(self) -> tuple:
    first = self.real_lbs[0]
    return tuple(sum(y.shape[a] for y in self.real_lbs) if a == self.axis else s for a, s in enumerate(first.shape))
  @property
  def size(self) -> int: return prod(self.shape)
  @property
  def max_size(self) -> int: return self.size
  @property
  def realized(self) -> bool: return all(lb.realized for lb in self.real_lbs)
  @property
  def is_view(self) -> bool: return any(lb.is_view for lb in self.lbs)
  @property
  def op(self): return self.lbs[0].base.op
  def __repr__(self) -> str:
    return f"<MLB axis={self.axis} real={self.real} {self.shape} {self.dtype} on {self.device}>"

  # *** making one ***
  @staticmethod
  def from_sharded(lb: LazyBuffer, devices: tuple[str, ...], axis: int | None) -> MultiLazyBuffer:
    """lb split along `axis` (None: copied whole) over `devices`; each piece is copied from lb's device (the host path
    for now) and is its device's own buffer."""
    src = lb.contiguous() if lb.is_view and lb.base.op is not Ops.CONST else lb
    pieces = [src] * len(devices)
    if axis is not None: pieces = _to_sharded(pieces, axis, _shard_bounds(lb.shape[axis], len(devices), axis, lb.shape, "shard"))
    out = []
    for p, d in zip(pieces, devices):
      if p.base.op is Ops.CONST and p.device != d: out.append(LazyBuffer.const(p.base.arg, p.dtype, p.shape, d))   # a constant is made there
      else: out.append(p.copy_to_device(d) if p.device != d else p.contiguous())
    return MultiLazyBuffer(out, axis)

  # *** to one device ***
  def copy_to_device(self, device: str) -> LazyBuffer:
    """The whole tensor on `device`: the shards copied there and concatenated (a replicated tensor: one copy)."""
    if self.axis is None:
      for lb in self.real_lbs:
        if lb.device == device: return lb
      return self.real_lbs[0].copy_to_device(device)
    # (after a shrink to one shard only the real shards make the value: their bounds span it)
    lo, hi = min(st for (st, _), r in zip(self.bounds, self.real) if r), max(ed for (_, ed), r in zip(self.bounds, self.real) if r)
    parts = [lb.copy_to_device(device).pad(tuple((0, 0) if a != self.axis else (st - lo, hi - ed) for a in range(len(lb.shape))))
             for lb, r, (st, ed) in zip(self.lbs, self.real, self.bounds) if r]
    return _concat(parts)

  def reshard(self, like: MultiLazyBuffer) -> MultiLazyBuffer:
    """This value split the way `like` is (its axis and bounds; axis None: whole on each device): a gradient flows back
    split as the ops after a tensor left it (a matmul over the sharded K axis gives dx split on another axis), and the
    backward of a movement op (a pad's shrink, a shrink's pad) only works on the sharding its forward saw."""
    if (self.axis, self.bounds) == (like.axis, like.bounds) or not all(self.real) or not all(like.real): return self
    whole = self.lbs if self.axis is None else [self.copy_to_device(lb.device) for lb in self.lbs]
    return MultiLazyBuffer(whole if like.axis is None else _to_sharded(whole, like.axis, like.bounds), like.axis)

  # *** per shard ***
  def _same(self, lbs: list[LazyBuffer]) -> MultiLazyBuffer: return MultiLazyBuffer(lbs, self.axis, self.real)
  def cast(self, dtype: DType, bitcast: bool = False) -> MultiLazyBuffer: return self._same([x.cast(dtype, bitcast) for x in self.lbs])
  def const_like(self, value) -> MultiLazyBuffer: return self._same([x.const_like(value) for x in self.lbs])
  def contiguous(self) -> MultiLazyBuffer: return self._same([x.contiguous() for x in self.lbs])

  def alu(self, op: Ops, *in_srcs: MultiLazyBuffer) -> MultiLazyBuffer:
    """Elementwise per shard. Inputs sharded differently are brought to the last sharded input's axis and bounds: a
    replicated one is cut down locally, one split on another axis is gathered to each device and cut."""
    msrcs = (self,) + in_srcs
    for x in msrcs:
      if not isinstance(x, MultiLazyBuffer): raise RuntimeError(f"{op.name}: mixing a sharded tensor on {self.device} with one on {x.device}")
      if x.device != self.device: raise RuntimeError(f"{op.name}: sharded tensors on different devices {self.device} and {x.device}")
      if x.shape != self.shape: raise ValueError(f"{op.name}: shapes {self.shape} and {x.shape} differ")
    sharded = [(x.axis, x.bounds) for x in msrcs if x.axis is not None]
    axis, bounds = sharded[-1] if sharded else (None, None)
    not_all_real = any(not all(x.real) for x in msrcs)
    new_real = [all(rs) for rs in zip(*[x.real for x in msrcs])] if not_all_real else self.real
    if not any(new_real): raise RuntimeError(f"{op.name}: the inputs keep no shard in common (real masks {[x.real for x in msrcs]})")
    srcs: list[list[LazyBuffer]] = []
    if not_all_real:
      # an input shrunk to one shard holds the whole value on that device: every other input must be whole there too
      # (one split over the devices is gathered; tinygrad v0.9 zipped the shards as they were, of other shapes)
      ref = next(x for x in msrcs if not all(x.real))
      axis = ref.axis
      srcs = [x.lbs if x.real == ref.real or (x.axis is None and all(x.real)) else [x.copy_to_device(lb.device) for lb in ref.lbs]
              for x in msrcs]
    else:
      for x in msrcs:
        if x.axis == axis and x.bounds == bounds: srcs.append(x.lbs)
        elif x.axis is None: srcs.append(_to_sharded(x.lbs, axis, bounds))
        else: srcs.append(_to_sharded([x.copy_to_device(lb.device) for lb in x.lbs], axis, bounds))
    outs = {i: ls[0].alu(op, *ls[1:]) for i, (ls, r) in enumerate(zip(zip(*srcs), new_real)) if r}
    dt = next(iter(outs.values())).dtype
    return MultiLazyBuffer([outs.get(i, LazyBuffer.const(0, dt, ls[0].shape, ls[0].device)) for i, ls in enumerate(zip(*srcs))], axis, new_real)

  def r(self, op: Ops, axes: tuple[int, ...]) -> MultiLazyBuffer:
    """A reduce. Over the sharded axis: each device reduces its shard, then the partial results are allreduced (or,
    when only one shard is real, that one is kept); over other axes each shard reduces on its own."""
    if self.axis is not None and self.axis in axes:
      parts = [(x if r else x.const_like(0)).r(op, axes) for x, r in zip(self.lbs, self.real)]
      if all(self.real):
        if (wire := self._wire_dtype(op)) is None: return MultiLazyBuffer(all_reduce(op, parts), None)
        return MultiLazyBuffer([x.cast(self.dtype) for x in all_reduce(op, [p.cast(wire) for p in parts])], None)
      return MultiLazyBuffer(parts, None, self.real)
    return self._same([x.r(op, axes) for x in self.lbs])

  def _wire_dtype(self, op: Ops) -> DType | None:
    """ALLREDUCE_CAST=1: the half/bfloat16 a sum of a narrow tensor was widened from (Tensor.sum accumulates in
    float32): each device's partial sum is narrowed back before the allreduce, so the copies carry half the bytes
    (and the partial sums are added in the narrow dtype). None: keep the reduce's own dtype on the wire."""
    if op is not Ops.ADD or not flag("ALLREDUCE_CAST") or self.dtype != dtypes.float32: return None
    narrow = {lb.base.srcs[0].dtype if lb.base.op is Ops.CAST else None for lb in self.lbs}
    return narrow.pop() if len(narrow) == 1 and narrow <= {dtypes.float16, dtypes.bfloat16} else None

  def assign(self, value: MultiLazyBuffer) -> MultiLazyBuffer:
    """Write `value` (sharded the same way) into each shard's buffer."""
    if not isinstance(value, MultiLazyBuffer) or value.device != self.device or value.axis != self.axis or value.bounds != self.bounds:
      raise ValueError(f"assign: the value on {getattr(value, 'device', '?')} (axis {getattr(value, 'axis', '?')}) is not sharded like "
                       f"the target on {self.device} (axis {self.axis})")
    return self._same([s.base.assign(v) for s, v in zip(self.lbs, value.lbs)])

  # *** movement ***
  # (after a shrink to one shard, `real` has one True: that device holds the whole value, the others placeholders of
  # its shape. A movement of the sharded axis then moves no element between devices, so it is made per shard, the
  # placeholders too, which keeps the shards of one shape and the bounds a pad back needs. tinygrad v0.9 refused it;
  # so did this file until FUZZ_SEED=102950: the gradient of a max over a one-element shard expands it.)
  def _on_one_device(self) -> bool: return not all(self.real)

  def _one_shard(self, shape: tuple, lb: LazyBuffer) -> tuple:
    return tuple(lb.shape[self.axis] if a == self.axis else s for a, s in enumerate(shape))

  def reshape(self, shape: tuple) -> MultiLazyBuffer:
    """A reshape per shard. The sharded axis becomes the new axis whose leading dims keep the same product; the
    reshape must not move elements from one shard to another. On one device (`_on_one_device`) nothing can move
    between devices: where the sharded axis has no new axis to go to, the value is left without one (axis None)."""
    shape = tuple(shape)
    if self.axis is None: return self._same([x.reshape(shape) for x in self.lbs])
    try: return self._reshape_split(shape)
    except RuntimeError:
      if not self._on_one_device(): raise
      return MultiLazyBuffer([x.reshape(shape) for x in self.lbs], None, self.real)

  def _reshape_split(self, shape: tuple) -> MultiLazyBuffer:
    acc = list(itertools.accumulate(shape, operator.mul, initial=1))
    lead = prod(self.shape[:self.axis])
    if lead not in acc: raise RuntimeError(f"reshape {self.shape} -> {shape}: would move elements between the shards of axis {self.axis}")
    # (the last axis of `shape` whose leading dims have that product: acc's last entry is the whole product, no axis; a
    # sharded axis of size 1, one real shard after a shrink, may be followed by unit axes that end at it)
    new_axis = len(acc) - 1 - acc[-2::-1].index(lead) - 1 if lead in acc[:-1] else len(shape)
    if new_axis >= len(shape): raise RuntimeError(f"reshape {self.shape} -> {shape}: would move elements between the shards of axis {self.axis}")
    # each shard's length on new_axis: its elements from the sharded axis on, over those after new_axis. The axes after
    # may be symbolic (a sequence length beside a split batch): a UOp's `%` is a UOp, true whatever its value, so the
    # same tail is recognised as such (UOps are hash-consed) and a symbolic one that changes is refused by name
    tail, new_tail = prod(self.shape[self.axis + 1:]), prod(shape[new_axis + 1:])
    if tail is not new_tail and (is_sym(tail) or is_sym(new_tail)):
      raise RuntimeError(f"reshape {self.shape} -> {shape}: the sharded axis {self.axis} would be merged with or split by a symbolic axis")
    if tail is not new_tail and any(lb.shape[self.axis] * tail % new_tail for lb in self.lbs):
      raise RuntimeError(f"reshape {self.shape} -> {shape}: would move elements between the shards of axis {self.axis}")
    new = [x.reshape(tuple(s if a != new_axis else x.shape[self.axis] * tail // new_tail if tail is not new_tail else x.shape[self.axis]
                           for a, s in enumerate(shape))) for x in self.lbs]
    if any(x.shape[new_axis] * len(self.lbs) != shape[new_axis] for x in new if all(self.real)):
      raise RuntimeError(f"reshape {self.shape} -> {shape}: would move elements between the shards of axis {self.axis}")
    return MultiLazyBuffer(new, new_axis, self.real)

  def pad(self, arg: tuple) -> MultiLazyBuffer:
    """A pad per shard. The sharded axis, split over all the devices, can't be padded; a value shrunk to one shard can
    be padded back to the whole axis around it (then every device holds its shard again), and any other pad of it
    is made on the one device that holds it (`_on_one_device`)."""
    if self.axis is not None and arg[self.axis] != (0, 0):
      if all(self.real): raise RuntimeError(f"pad {arg} of shape {self.shape}: can't pad the sharded axis {self.axis}")
      full, bound = self.bounds[-1][1], self.bounds[self.real.index(True)]
      if arg[self.axis] == (bound[0], full - bound[1]):   # the pad back: the other devices' shards are zeros
        rest = tuple((0, 0) if a == self.axis else p for a, p in enumerate(arg))
        out = [x if r else x.const_like(0) for x, r in zip(self.lbs, self.real)]
        return MultiLazyBuffer([x.pad(rest) for x in out] if any(p != (0, 0) for p in rest) else out, self.axis)
    return self._same([x.pad(arg) for x in self.lbs])

  def expand(self, shape: tuple) -> MultiLazyBuffer:
    shape = tuple(shape)
    if self.axis is not None and shape[self.axis] != self.shape[self.axis]:
      if not self._on_one_device(): raise RuntimeError(f"expand {self.shape} -> {shape}: can't expand the sharded axis {self.axis}")
      return self._same([x.expand(shape) for x in self.lbs])
    return self._same([x.expand(self._one_shard(shape, x)) for x in self.lbs])

  def permute(self, order: tuple) -> MultiLazyBuffer:
    return MultiLazyBuffer([x.permute(order) for x in self.lbs], None if self.axis is None else tuple(order).index(self.axis), self.real)

  def shrink(self, arg: tuple) -> MultiLazyBuffer:
    """A shrink per shard; the sharded axis can only be kept whole or shrunk to exactly one shard's bounds (the other
    devices then hold nothing real), or, on one device, to any part (`_on_one_device`)."""
    if self.axis is not None and arg[self.axis] != (0, self.shape[self.axis]):
      if self._on_one_device(): return self._same([x.shrink(arg) for x in self.lbs])
      if tuple(arg[self.axis]) not in self.bounds:
        raise RuntimeError(f"shrink {arg} of shape {self.shape}: axis {self.axis} is sharded as {self.bounds}; it can only be shrunk to one shard")
      if any(arg[i] != (0, s) for i, s in enumerate(self.shape) if i != self.axis):
        raise RuntimeError(f"shrink {arg} of shape {self.shape}: can't shrink the sharded axis {self.axis} and another axis together")
      idx = self.bounds.index(tuple(arg[self.axis]))
      return MultiLazyBuffer([lb if i == idx else lb.const_like(0) for i, lb in enumerate(self.lbs)], self.axis,
                             [i == idx for i in range(len(self.lbs))])
    return self._same([x.shrink(tuple((0, x.shape[self.axis]) if a == self.axis else s for a, s in enumerate(arg))) for x in self.lbs])

  def flip(self, axes: tuple) -> MultiLazyBuffer:
    if self.axis is not None and self.axis in axes and not self._on_one_device():
      raise RuntimeError(f"flip {tuple(axes)} of shape {self.shape}: can't flip the sharded axis {self.axis}")
    return self._same([x.flip(axes) for x in self.lbs])

# *** helpers the Tensor uses where a device may be a tuple ***
def const(value, dtype: DType, shape: tuple, device) -> LazyBuffer | MultiLazyBuffer:
  """A constant on one device, or on each device of a tuple (replicated)."""
  if isinstance(device, tuple): return MultiLazyBuffer([LazyBuffer.const(value, dtype, shape, d) for d in device], None)
  return LazyBuffer.const(value, dtype, shape, device)

def lazy_buffers(lbs) -> list[LazyBuffer]:
  """The LazyBuffers to schedule for a list that may hold MultiLazyBuffers (each contributes all its shards)."""
  return [x for lb in lbs for x in (lb.lbs if isinstance(lb, MultiLazyBuffer) else (lb,))]
