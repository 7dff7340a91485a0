"""The differentiable primitives. Every Tensor op is built from these, so each composite op gets its
gradient from the few derivatives written here.

>>> from frontend import Tensor
>>> x = Tensor([1.0, 2.0], requires_grad=True)
>>> _ = (x * x).sum().backward()
>>> x.grad.tolist()
[2.0, 4.0]
"""
from __future__ import annotations
import math
from compiler.dtypes import DType, dtypes, sum_acc_dtype
from compiler.lazy import LazyBuffer
from compiler.uop import Ops
from frontend import multi_cat
from frontend.multi import MultiLazyBuffer

class Function:
  """A node of the autograd graph: forward on LazyBuffers, backward returns a gradient per parent."""
  def __init__(self, device: str, *tensors, metadata=None):
    self.device = device
    self.needs_input_grad = [t.requires_grad for t in tensors]
    self.requires_grad = True if any(self.needs_input_grad) else None if None in self.needs_input_grad else False
    if self.requires_grad: self.parents = tensors
  differentiable = True
  def forward(self, *args, **kwargs): raise NotImplementedError
  def backward(self, *args, **kwargs): raise NotImplementedError(f"backward not implemented for {type(self).__name__}")
  @classmethod
  def apply(cls, *x, **kwargs):
    Tensor = _Tensor or _tensor_cls()
    # (Function.__init__ inlined, as every op comes here: a subclass with an __init__ of its own gets it called; one and
    # two operands, nearly every op, without the list comprehensions)
    if cls.__init__ is Function.__init__:
      ctx = cls.__new__(cls)
      n = len(x)
      if n == 2:
        a, b = x
        ctx.needs_input_grad = [ra := a.requires_grad, rb := b.requires_grad]
        rg = True if ra or rb else None if ra is None or rb is None else False
        srcs: tuple | list = (a.lazydata, b.lazydata)
      elif n == 1:
        ctx.needs_input_grad = [ra := x[0].requires_grad]
        rg = True if ra else None if ra is None else False
        srcs = (x[0].lazydata,)
      else:
        ctx.needs_input_grad = nig = [t.requires_grad for t in x]
        rg = True if any(nig) else None if None in nig else False
        srcs = [t.lazydata for t in x]
      ctx.device, ctx.requires_grad = srcs[0].device, rg
      if rg: ctx.parents = x
    else:
      ctx = cls(x[0].device, *x)
      srcs = [t.lazydata for t in x]
    if not cls.differentiable: ctx.requires_grad = False   # comparisons/bit ops: no gradient flows through them
    ret = Tensor.__new__(Tensor)
    ret.lazydata, ret.requires_grad, ret.grad = ctx.forward(*srcs, **kwargs), ctx.requires_grad, None
    ret._ctx = ctx if ctx.requires_grad and not Tensor.no_grad else None
    return ret

def _tensor_cls():
  # (frontend.tensor imports this module: the class is looked up once, at the first op, not imported at every op)
  global _Tensor
  if _Tensor is None:
    from frontend.tensor import Tensor
    _Tensor = Tensor
  return _Tensor
_Tensor = None

class FreedGraph:
  """What a non-leaf tensor's `_ctx` becomes after backward() used it (without retain_graph): the saved values are
  gone, so a second backward through it must raise (as torch does) instead of silently adding nothing."""
  parents: tuple = ()
  def __init__(self, name: str): self.name = name
  def backward(self, g): raise RuntimeError(f"backward: trying to backward through the graph a second time (through {self.name}, "
                                            "whose saved values were freed by the first backward); pass retain_graph=True")

# one FreedGraph per Function name (it holds nothing else and never changes): backward frees every node it passes
_freed: dict[str, FreedGraph] = {}
def freed_graph(name: str) -> FreedGraph:
  """The FreedGraph a node of Function `name` gets after backward used it."""
  if (fg := _freed.get(name)) is None: fg = _freed[name] = FreedGraph(name)
  return fg

def _zeros_like(x: LazyBuffer) -> LazyBuffer: return x.const_like(0)

# ***** unary *****
class Contiguous(Function):
  def forward(self, x): return x.contiguous()
  def backward(self, g): return g
class Clone(Function):
  def forward(self, x):   # a fresh buffer: a view is copied, a buffer (also one a pending assign writes) gets x + 0,
    # a lazy value is new anyway
    return x.contiguous() if x.is_view else x.alu(Ops.ADD, x.const_like(0)) if x.realized or x.op is Ops.ASSIGN else x
  def backward(self, g): return g
class ContiguousBackward(Function):
  def forward(self, x): return x
  def backward(self, g): return g.contiguous()
class Cast(Function):
  def forward(self, x: LazyBuffer, dtype: DType, bitcast: bool = False):
    self.input_dtype, self.bitcast = x.dtype, bitcast
    return x.cast(dtype, bitcast)
  def backward(self, g):
    if self.bitcast: raise RuntimeError("bitcast is not differentiable")
    return g.cast(self.input_dtype)
class Neg(Function):
  def forward(self, x): return x.alu(Ops.NEG)
  def backward(self, g): return g.alu(Ops.NEG)
class Reciprocal(Function):
  def forward(self, x):
    self.ret = x.alu(Ops.RECIP)
    return self.ret
  def backward(self, g): return g.alu(Ops.NEG).alu(Ops.MUL, self.ret).alu(Ops.MUL, self.ret)
class Sin(Function):
  def forward(self, x):
    self.x = x
    return x.alu(Ops.SIN)
  def backward(self, g):  # cos(x) = sin(pi/2 - x)
    return self.x.const_like(math.pi / 2).alu(Ops.ADD, self.x.alu(Ops.NEG)).alu(Ops.SIN).alu(Ops.MUL, g)
class Relu(Function):
  def forward(self, x):
    self.ret = x.alu(Ops.MAX, x.const_like(0))
    return self.ret
  def backward(self, g): return self.ret.const_like(0).alu(Ops.CMPLT, self.ret).cast(g.dtype).alu(Ops.MUL, g)
class Log(Function):
  def forward(self, x):
    self.x = x
    return x.alu(Ops.LOG2).alu(Ops.MUL, x.const_like(math.log(2)))
  def backward(self, g): return g.alu(Ops.FDIV, self.x)
class Exp(Function):
  def forward(self, x):
    self.ret = x.alu(Ops.MUL, x.const_like(1 / math.log(2))).alu(Ops.EXP2)
    return self.ret
  def backward(self, g): return self.ret.alu(Ops.MUL, g)
class Sqrt(Function):
  def forward(self, x):
    self.ret = x.alu(Ops.SQRT)
    return self.ret
  def backward(self, g): return g.alu(Ops.FDIV, self.ret.alu(Ops.MUL, self.ret.const_like(2)))
class Sigmoid(Function):
  def forward(self, x):
    e = x.alu(Ops.MUL, x.const_like(-1 / math.log(2))).alu(Ops.EXP2)
    self.ret = x.const_like(1).alu(Ops.FDIV, x.const_like(1).alu(Ops.ADD, e))
    return self.ret
  def backward(self, g):
    return self.ret.alu(Ops.MUL, self.ret.const_like(1).alu(Ops.ADD, self.ret.alu(Ops.NEG))).alu(Ops.MUL, g)
def _sign(x: LazyBuffer) -> LazyBuffer:
  z = x.const_like(0)
  pos = z.alu(Ops.CMPLT, x).cast(x.dtype)
  neg = x.alu(Ops.CMPLT, z).cast(x.dtype)
  return pos.alu(Ops.ADD, neg.alu(Ops.NEG)) if not x.dtype.is_unsigned else pos  # sign(nan) = 0, as in torch
class Sign(Function):
  def forward(self, x): return _sign(x)
  def backward(self, g): return _zeros_like(g)
class Abs(Function):
  """|x|: -0.0 gives +0.0 (x * sign(x) would keep the sign bit), nan stays nan; the gradient is sign(x), 0 at 0 (torch)."""
  def forward(self, x):
    self.x = x
    z = x.const_like(0)
    return x.alu(Ops.CMPLT, z).alu(Ops.WHERE, x.alu(Ops.NEG), x.alu(Ops.CMPNE, z).alu(Ops.WHERE, x, z))
  def backward(self, g): return g.alu(Ops.MUL, _sign(self.x))
class Trunc(Function):
  def forward(self, x): return x.alu(Ops.TRUNC)
  def backward(self, g): return _zeros_like(g)

# ***** binary *****
class _NoGrad(Function):
  """A binary op with no gradient (comparisons, bit ops, integer division): just its ALU op."""
  differentiable = False
  op: Ops
  def forward(self, x, y): return x.alu(self.op, y)
  def backward(self, g): return None, None
class Less(_NoGrad): op = Ops.CMPLT
class Neq(_NoGrad): op = Ops.CMPNE
class Xor(_NoGrad): op = Ops.XOR
class BitwiseAnd(_NoGrad): op = Ops.AND
class BitwiseOr(_NoGrad): op = Ops.OR
class Shl(_NoGrad): op = Ops.SHL
class Shr(_NoGrad): op = Ops.SHR
class IDiv(_NoGrad): op = Ops.IDIV
class Mod(_NoGrad): op = Ops.MOD
class Add(Function):
  def forward(self, x, y): return x.alu(Ops.ADD, y)
  def backward(self, g): return (g if self.needs_input_grad[0] else None), (g if self.needs_input_grad[1] else None)
class Sub(Function):
  def forward(self, x, y): return x.alu(Ops.ADD, y.alu(Ops.NEG))
  def backward(self, g): return (g if self.needs_input_grad[0] else None), (g.alu(Ops.NEG) if self.needs_input_grad[1] else None)
class Mul(Function):
  def forward(self, x, y):
    self.x, self.y = x, y
    return x.alu(Ops.MUL, y)
  def backward(self, g):
    return (self.y.alu(Ops.MUL, g) if self.needs_input_grad[0] else None), (self.x.alu(Ops.MUL, g) if self.needs_input_grad[1] else None)
class Div(Function):
  def forward(self, x, y):
    self.x, self.y = x, y
    return x.alu(Ops.FDIV, y)
  def backward(self, g):
    gx = g.alu(Ops.FDIV, self.y) if self.needs_input_grad[0] else None
    gy = g.alu(Ops.NEG).alu(Ops.MUL, self.x).alu(Ops.FDIV, self.y.alu(Ops.MUL, self.y)) if self.needs_input_grad[1] else None
    return gx, gy
class Maximum(Function):
  """max(x, y); where they tie the gradient is split evenly, and where one is NaN both get it (torch's rule:
  x gets g unless x < y, y gets g unless x > y, halves on equality)."""
  def forward(self, x, y):
    self.x, self.y = x, y
    return x.alu(Ops.MAX, y)
  def backward(self, g): return _pick_grads(self, g, self.x.alu(Ops.CMPLT, self.y), self.y.alu(Ops.CMPLT, self.x))

class Minimum(Function):
  """min(x, y) as torch: NaN if either is NaN, x where they tie (so the sign of a zero comes from x); the gradient
  mirrors Maximum's (x gets g unless x > y, y gets g unless y > x, halves on equality)."""
  def forward(self, x, y):
    self.x, self.y = x, y
    pick = y.alu(Ops.CMPLT, x)
    if x.dtype.is_float: pick = pick.alu(Ops.OR, y.alu(Ops.CMPNE, y))   # y is NaN
    return pick.alu(Ops.WHERE, y, x)
  def backward(self, g): return _pick_grads(self, g, self.y.alu(Ops.CMPLT, self.x), self.x.alu(Ops.CMPLT, self.y))

def _pick_grads(fn: Function, g: LazyBuffer, x_loses: LazyBuffer, y_loses: LazyBuffer) -> tuple:
  """The gradients of a pick between x and y (max, min): each side gets g where the other did not win, halves on a tie."""
  half, one, zero = g.const_like(0.5), g.const_like(1), g.const_like(0)
  eq = _eq(fn.x, fn.y)
  gx = g.alu(Ops.MUL, eq.alu(Ops.WHERE, half, x_loses.alu(Ops.WHERE, zero, one))) if fn.needs_input_grad[0] else None
  gy = g.alu(Ops.MUL, eq.alu(Ops.WHERE, half, y_loses.alu(Ops.WHERE, zero, one))) if fn.needs_input_grad[1] else None
  return gx, gy

def _eq(x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
  return x.alu(Ops.CMPNE, y).alu(Ops.CMPNE, x.const_like(True).cast(dtypes.bool))

class PowGrad(Function):
  """Gives b**e (computed by Tensor.pow from detached inputs as exp(e*log|b|) plus fix-ups) torch's gradient.

  Differentiating the exp/log composite is NaN at b == 0 (0 * log 0); the derivative written here is
  e*b**(e-1) with its limits at 0 (1 for e == 1, 0 for e > 1 or e == 0, e*inf for e < 1) and r*ln(b) for e,
  which torch defines as 0 where b == 0 and e >= 0.
  """
  def forward(self, b: LazyBuffer, e: LazyBuffer, r: LazyBuffer):
    self.b, self.e, self.r = b, e, r
    return r
  def backward(self, g):
    b, e, r = self.b, self.e, self.r
    bz, one = _eq(b, b.const_like(0)), e.const_like(1)
    gb = ge = None
    if self.needs_input_grad[0]:
      at0 = _eq(e, one).alu(Ops.WHERE, one, e.alu(Ops.CMPLT, one).alu(Ops.WHERE, e.alu(Ops.MUL, e.const_like(math.inf)), e.const_like(0)))
      at0 = _eq(e, e.const_like(0)).alu(Ops.WHERE, e.const_like(0), at0)
      gb = bz.alu(Ops.WHERE, at0, e.alu(Ops.MUL, r).alu(Ops.FDIV, b)).alu(Ops.MUL, g)
    if self.needs_input_grad[1]:
      ln_b = b.alu(Ops.LOG2).alu(Ops.MUL, b.const_like(math.log(2)))
      skip = bz.alu(Ops.AND, e.alu(Ops.CMPLT, e.const_like(0)).alu(Ops.CMPNE, bz.const_like(True)))
      ge = skip.alu(Ops.WHERE, e.const_like(0), r.alu(Ops.MUL, ln_b)).alu(Ops.MUL, g)
    return gb, ge, None

# ***** ternary *****
class Where(Function):
  def forward(self, c, x, y):
    self.c = c
    return c.alu(Ops.WHERE, x, y)
  def backward(self, g):
    z = g.const_like(0)
    return None, (self.c.alu(Ops.WHERE, g, z) if self.needs_input_grad[1] else None), (self.c.alu(Ops.WHERE, z, g) if self.needs_input_grad[2] else None)

# ***** reductions *****
class Pick(Function):
  """The element `mask` selects along `axis` (mask holds at most one True per output there; none gives 0): a float
  moves as its bits, selected by a WHERE and summed as unsigned ints (the CPU: as a float wide enough to hold them
  exactly), so NaN payloads, infinities and -0.0 come through as they are. The one-hot product this replaces
  (0 * NaN = 0 * inf = NaN, IEEE 754-2019 7.2) spread an unselected NaN/inf to every output, and a float sum of zeros
  makes -0.0 +0.0 (6.3). The gradient goes only where mask is True: a select of g, never a product."""
  def forward(self, mask, x, axis: tuple[int, ...]):
    self.mask, self.shape = mask, x.shape
    if x.dtype.is_bool: return mask.alu(Ops.WHERE, x, x.const_like(False)).r(Ops.MAX, axis)   # (MAX of bools: any)
    if not x.dtype.is_float: return mask.alu(Ops.WHERE, x, x.const_like(0)).r(Ops.ADD, axis)   # (ints: one term, exact)
    u = _UINT_OF[x.dtype.itemsize]
    bits = x.cast(u, True)
    # on the CPU the bits are summed as a wider float that holds them exactly: clang vectorizes an integer sum over a
    # strided load into gathers, 2.5x slower than the scalar loop it keeps for a float sum (which it may not reorder)
    acc = {2: dtypes.float32, 4: dtypes.float64}.get(x.dtype.itemsize) if _on_cpu(x) else None
    if acc is not None: bits = bits.cast(acc)
    return mask.alu(Ops.WHERE, bits, bits.const_like(0)).r(Ops.ADD, axis).cast(u).cast(x.dtype, True)
  def backward(self, g):
    g = g.expand(self.shape)
    return None, self.mask.alu(Ops.WHERE, g, g.const_like(0))
_UINT_OF = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
def _on_cpu(x) -> bool: return all(str(d).split(":")[0] == "CPU" for d in (x.device if isinstance(x.device, tuple) else (x.device,)))

class Lookup(Function):
  """Rows of a table (V, E) looked up by a one-hot float matrix `oh` (N, V): `value` (N, E) is the lookup, made
  exactly without a gradient (frontend/nn_ops.py _lookup_rows); the table's gradient is the scatter-add of g (N, E)
  into the rows each token looked up. As a product oh.T @ g (the packed matmul kernels) 0 * NaN = 0 * inf = NaN put
  one token's NaN/inf in every row, so the product sums only g's finite part, and the NaN/+inf/-inf of the rows'
  tokens are counted by two more columns of the same product (0 * 1 = 0: nothing spreads) and put back: a row with a
  NaN or both infinities is NaN, else one infinity is it, as in a sum (IEEE 754-2019 6.1, 7.2)."""
  def forward(self, oh, w, value):
    self.oh = oh
    return value
  def backward(self, g):
    from frontend.tensor import _wrap
    return None, self._table_grad(_wrap(self.oh), _wrap(g)).lazydata, None
  def backward_tensors(self, g, oh, w, value):
    """create_graph (Tensor.gradient): the same rule on Tensors, differentiable in g."""
    return None, self._table_grad(oh, g), None
  @staticmethod
  def _table_grad(oh, gt):
    g = gt.lazydata
    e, dt = gt.shape[1], g.dtype if g.dtype.itemsize >= 4 else dtypes.float32
    gf = gt.cast(dt)
    nan = gf != gf
    pinf, ninf = (gf == math.inf) | nan, (gf == -math.inf) | nan
    fin, ohT, b = (pinf | ninf).where(0, gf), oh.cast(dt).transpose(), oh.shape[0] + 1
    if b * b <= 1 << (24 if dt == dtypes.float32 else 53):
      # one column per element counts both: +inf tokens + (N + 1) * -inf tokens, an integer the float holds exactly
      s = ohT @ fin.cat(pinf.cast(dt) + ninf.cast(dt) * b, dim=1)   # (V, 2E)
      c = s[:, e:].cast(dtypes.int64)
      tot, p, n = s[:, :e], c % b > 0, c >= b
    else:
      s = ohT @ fin.cat(pinf.cast(dt), ninf.cast(dt), dim=1)   # (V, 3E)
      tot, p, n = s[:, :e], s[:, e:2 * e] > 0, s[:, 2 * e:] > 0
    return p.where(n.where(math.nan, math.inf), n.where(-math.inf, tot)).cast(g.dtype)

class Sum(Function):
  def forward(self, x, axis: tuple[int, ...]):
    self.input_shape = x.shape
    return x.r(Ops.ADD, axis)
  def backward(self, g): return g.expand(self.input_shape)
class Prod(Function):
  def forward(self, x, axis: tuple[int, ...]):
    self.x, self.ret = x, x.r(Ops.MUL, axis)
    return self.ret
  def backward(self, g):  # d prod / dx = prod / x (exact where x != 0)
    return g.expand(self.x.shape).alu(Ops.MUL, self.ret.expand(self.x.shape)).alu(Ops.FDIV, self.x)
class Max(Function):
  def forward(self, x, axis: tuple[int, ...]):
    self.x, self.ret, self.axis = x, x.r(Ops.MAX, axis), axis
    return self.ret
  def backward(self, g):
    # the gradient goes to every position equal to the max, split evenly
    hit = self.x.alu(Ops.CMPNE, self.ret.expand(self.x.shape)).alu(Ops.CMPNE, self.x.const_like(True).cast(dtypes.bool)).cast(g.dtype)
    cnt = hit.r(Ops.ADD, self.axis).expand(self.x.shape)
    return hit.alu(Ops.FDIV, cnt).alu(Ops.MUL, g.expand(self.x.shape))

# ***** between devices *****
# (torch's `.to(device)` is differentiable, and so are tinygrad HEAD's COPY and shard: a gradient stops at neither)
class Copy(Function):
  """The value on one device (`Tensor.to`); from several devices, the shards concatenated. The gradient goes back the
  same way: copied to the source device, or cut into the source's shards (each to its device, zeros where a shard held
  nothing real)."""
  def forward(self, x, device: str):
    # (what the backward needs, not x itself: create_graph swaps saved LazyBuffers for Tensors)
    self.src_device = x.device
    if isinstance(x, MultiLazyBuffer): self.axis, self.real, self.bounds, self.shards = x.axis, list(x.real), x.bounds, [lb.shape for lb in x.lbs]
    return x.copy_to_device(device)
  def backward(self, g):
    if isinstance(self.src_device, str): return g.copy_to_device(self.src_device)
    if not isinstance(g, LazyBuffer):
      raise NotImplementedError(f"backward of a copy from {self.src_device} to one device: a gradient of {type(g).__name__} (second-order "
                                "gradients across several devices are not supported)")
    devs, real = self.src_device, self.real
    if self.axis is None: return MultiLazyBuffer([g.copy_to_device(d) for d in devs], None, list(real))
    lo = min(st for (st, _), r in zip(self.bounds, real) if r)   # (the forward left out the shards that hold nothing)
    cut = [tuple((st - lo, ed - lo) if a == self.axis else (0, s) for a, s in enumerate(g.shape)) for st, ed in self.bounds]
    return MultiLazyBuffer([g.shrink(c).copy_to_device(d) if r else LazyBuffer.const(0, g.dtype, shp, d)
                            for c, d, r, shp in zip(cut, devs, real, self.shards)], self.axis, list(real))
class Shard(Function):
  """One device's value split over several (`Tensor.shard`); the gradient is the shards' gradients gathered back."""
  def forward(self, x, devices: tuple[str, ...], axis: int | None):
    self.src_device = x.device
    return MultiLazyBuffer.from_sharded(x, devices, axis)
  def backward(self, g): return g.copy_to_device(self.src_device)

class Cat(Function):
  """Pieces of one dtype joined along `dim` on one device (or sharded on another axis): the result picks each element from
  its piece by a select on the index, not by adding the zero-padded pieces, since -0.0 + 0.0 is +0.0 (IEEE 754-2019
  6.3: an exact zero sum is +0 when the operands' signs differ) and a signaling NaN comes out quiet; a select moves the
  bits as they are. Each piece's gradient is its range of the result's."""
  def forward(self, *xs, dim: int):
    self.dim, self.cuts, off = dim, [], 0
    for x in xs: self.cuts.append((off, off + x.shape[dim])); off = off + x.shape[dim]
    out = None
    for x, (lo, hi) in reversed(list(zip(xs, self.cuts))):
      if x.shape[dim].__class__ is int and x.shape[dim] == 0: continue   # (an empty piece has nothing to pick)
      pads = tuple((lo, off - hi) if a == dim else (0, 0) for a in range(len(x.shape)))
      p = x.pad(pads)
      # (the padded constant True is the piece's own valid range: it lowers to the same comparisons that gate its loads)
      out = p if out is None else x.const_like(True).cast(dtypes.bool).pad(pads).alu(Ops.WHERE, p, out)
    return xs[0] if out is None else out   # (all pieces empty: so is the result, of xs[0]'s shape)
  def backward(self, g):
    gs = tuple(g.shrink(tuple((lo, hi) if a == self.dim else (0, s) for a, s in enumerate(g.shape))) if need else None
               for (lo, hi), need in zip(self.cuts, self.needs_input_grad))
    return gs[0] if len(gs) == 1 else gs

class MultiCat(Function):
  """cat along the axis a sharded piece is split on (frontend/multi_cat.py): made where the pieces live; each piece's
  gradient is cut from the result's where that piece lives."""
  def forward(self, *xs, dim: int):
    out, self.plan = multi_cat.cat(list(xs), dim)
    return out
  def backward(self, g):
    gs = multi_cat.grads(g, self.plan, self.needs_input_grad)
    return gs[0] if len(gs) == 1 else tuple(gs)
  def backward_tensors(self, g, *parents):
    """create_graph (Tensor.gradient): each piece's gradient a differentiable shrink of g, which a sharded g allows
    where the piece is one whole shard, and a g on one device (a result on one device) always."""
    ax, out = self.plan.axis, []
    for p, need in zip(self.plan.pieces, self.needs_input_grad):
      try: out.append(g.shrink(tuple((p.off, p.off + p.size) if a == ax else None for a in range(g.ndim))) if need else None)
      except RuntimeError as e:
        raise RuntimeError(f"cat: shapes {[q.shape for q in self.plan.pieces]} along the sharded dim {ax}: a differentiable gradient "
                           f"(create_graph, gradient()) of the piece {p.shape} spread over several shards is not supported ({e})") from None
    return out

# ***** movement *****
class Reshape(Function):
  def forward(self, x, shape):
    self.input_shape = x.shape
    return x.reshape(shape)
  def backward(self, g): return g.reshape(self.input_shape)
class Expand(Function):
  def forward(self, x, shape):
    self.expanded = tuple(i for i, (a, b) in enumerate(zip(x.shape, shape)) if a != b)
    return x.expand(shape)
  def backward(self, g):
    acc = sum_acc_dtype(g.dtype)
    return g.cast(acc).r(Ops.ADD, self.expanded).cast(g.dtype)
class Permute(Function):
  def forward(self, x, order):
    self.order = order
    return x.permute(order)
  def backward(self, g): return g.permute(tuple(sorted(range(len(self.order)), key=self.order.__getitem__)))
class Pad(Function):
  def forward(self, x, arg):
    self.narg = tuple((p[0], s + p[0]) for s, p in zip(x.shape, arg))
    return x.pad(arg)
  def backward(self, g): return g.shrink(self.narg)
class Shrink(Function):
  def forward(self, x, arg):
    self.narg = tuple((p[0], s - p[1]) for s, p in zip(x.shape, arg))
    return x.shrink(arg)
  def backward(self, g): return g.pad(self.narg)
class Flip(Function):
  def forward(self, x, axis):
    self.axis = axis
    return x.flip(axis)
  def backward(self, g): return g.flip(self.axis)
