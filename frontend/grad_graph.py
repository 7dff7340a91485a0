"""Backward as a differentiable graph (`create_graph`): second and higher order gradients.

The backward rules in function.py are written on LazyBuffers. For a gradient that is itself differentiated, the same
rules run on `TensorLB`, which has the LazyBuffer methods those rules call but applies the differentiable Functions
to Tensors instead, so each rule records its own autograd graph. A value a Function saved in its forward (its input
x, its output, ...) is swapped for the Tensor it came from (that input, that output), so the gradient also flows
through what the backward read, not only through the incoming gradient.

>>> from frontend import Tensor
>>> x = Tensor([1.0, 2.0], requires_grad=True)
>>> (dx,) = (x * x * x).sum().gradient(x)
>>> dx.tolist(), dx.sum().gradient(x)[0].tolist()   # 3x**2, then 6x
([3.0, 12.0], [6.0, 12.0])
"""
from __future__ import annotations
import copy, math
from typing import Any
from compiler.dtypes import DType
from compiler.lazy import LazyBuffer
from compiler.uop import Ops
from frontend import function as F
from frontend.function import Function
from frontend.multi import MultiLazyBuffer

# LazyBuffer ALU op -> the Function that computes it differentiably (LOG2, EXP2: through Log/Exp and a constant)
_ALU: dict[Ops, type[F.Function]] = {Ops.NEG: F.Neg, Ops.RECIP: F.Reciprocal, Ops.SIN: F.Sin, Ops.SQRT: F.Sqrt,
  Ops.TRUNC: F.Trunc, Ops.ADD: F.Add, Ops.MUL: F.Mul, Ops.FDIV: F.Div, Ops.MAX: F.Maximum, Ops.CMPLT: F.Less,
  Ops.CMPNE: F.Neq, Ops.AND: F.BitwiseAnd, Ops.OR: F.BitwiseOr, Ops.XOR: F.Xor, Ops.WHERE: F.Where}
_REDUCE: dict[Ops, type[F.Function]] = {Ops.ADD: F.Sum, Ops.MUL: F.Prod, Ops.MAX: F.Max}

class TensorLB:
  """A Tensor seen through the LazyBuffer methods the backward rules use; every method records a Function.

  >>> from frontend import Tensor
  >>> x = Tensor([2.0], requires_grad=True)
  >>> y = TensorLB(x).alu(Ops.MUL, TensorLB(x)).t
  >>> y.tolist(), y._ctx is not None
  ([4.0], True)
  """
  __slots__ = ("t",)
  def __init__(self, t): self.t = t
  @property
  def shape(self) -> tuple: return self.t.lazydata.shape
  @property
  def dtype(self) -> DType: return self.t.lazydata.dtype
  @property
  def device(self): return self.t.lazydata.device
  def _new(self, lb: LazyBuffer) -> TensorLB: return TensorLB(_wrap(lb))   # a constant: nothing to differentiate
  def const_like(self, value) -> TensorLB: return self._new(self.t.lazydata.const_like(value))
  def alu(self, op: Ops, *srcs: TensorLB) -> TensorLB:
    if op is Ops.LOG2: return TensorLB(F.Log.apply(self.t)).alu(Ops.MUL, self.const_like(1 / math.log(2)))
    if op is Ops.EXP2: return TensorLB(F.Exp.apply(self.alu(Ops.MUL, self.const_like(math.log(2))).t))
    if (fn := _ALU.get(op)) is None: raise NotImplementedError(f"create_graph: no differentiable form of {op.name} in a backward rule")
    return TensorLB(fn.apply(self.t, *[s.t for s in srcs]))
  def r(self, op: Ops, axes: tuple[int, ...]) -> TensorLB:
    return TensorLB(_REDUCE[op].apply(self.t, axis=tuple(axes))) if axes else self
  def cast(self, dtype: DType, bitcast: bool = False) -> TensorLB:
    return self if dtype == self.dtype and not bitcast else TensorLB(F.Cast.apply(self.t, dtype=dtype, bitcast=bitcast))
  def contiguous(self) -> TensorLB: return TensorLB(F.Contiguous.apply(self.t))
  def reshape(self, shape) -> TensorLB: return TensorLB(F.Reshape.apply(self.t, shape=tuple(shape)))
  def expand(self, shape) -> TensorLB: return TensorLB(F.Expand.apply(self.t, shape=tuple(shape)))
  def permute(self, order) -> TensorLB: return TensorLB(F.Permute.apply(self.t, order=tuple(order)))
  def pad(self, arg) -> TensorLB: return TensorLB(F.Pad.apply(self.t, arg=tuple(arg)))
  def shrink(self, arg) -> TensorLB: return TensorLB(F.Shrink.apply(self.t, arg=tuple(arg)))
  def flip(self, axes) -> TensorLB: return TensorLB(F.Flip.apply(self.t, axis=tuple(axes)))
  def copy_to_device(self, device: str) -> TensorLB: return TensorLB(F.Copy.apply(self.t, device=device))

class Unrecorded(Function):
  """A value a Function saved that is no longer its input's or its output's (the input was written in place after the
  forward): the first-order gradient reads it as it was, a gradient of that gradient through it raises."""
  def forward(self, x, name: str):
    self.name = name
    return x
  def backward(self, g):
    raise NotImplementedError(f"second-order gradient through {self.name}: its input was modified in place after the forward, "
                              "so the value its backward read is not in the graph")

def _wrap(lb, requires_grad: bool | None = False):
  from frontend.tensor import _wrap as wrap
  return wrap(lb, requires_grad)

def backward_graph(ctx: F.Function, out, g) -> list:
  """The gradients (Tensors or None, one per parent) of `out` (made by `ctx`) given its gradient Tensor `g`, as Tensors
  that carry their own autograd graph. A Function with a `backward_tensors` method (the convolutions, whose backward is
  built from Tensor ops) gives it; any other runs its LazyBuffer rule on TensorLBs."""
  from frontend.tensor import Tensor
  prev, Tensor.no_grad = Tensor.no_grad, False
  try:
    if hasattr(ctx, "backward_tensors"): return list(ctx.backward_tensors(g, *ctx.parents))
    # the saved values are the parents' or the output's LazyBuffers: the output first (PowGrad's output *is* its
    # third parent, a detached value; only through the output does its gradient reach the base)
    src = {id(p.lazydata): p for p in ctx.parents} | {id(out.lazydata): out}
    c = copy.copy(ctx)
    for k, v in vars(ctx).items():
      if isinstance(v, (LazyBuffer, MultiLazyBuffer)):
        setattr(c, k, TensorLB(src[id(v)] if id(v) in src else Unrecorded.apply(_wrap(v, True), name=type(ctx).__name__)))
    grads = c.backward(TensorLB(g))
    grads = [grads] if len(ctx.parents) == 1 else list(grads)
    return [x.t if isinstance(x, TensorLB) else x for x in grads]
  finally: Tensor.no_grad = prev

def vjp(out, inputs: tuple, g) -> list[Any]:
  """d(out)/d(inputs) contracted with g, as differentiable Tensors (None where an input doesn't require grad): the
  backward of a sub-graph `out` built from `inputs` (a Function's forward recomputed from differentiable ops)."""
  # (the inputs are leaves of this backward: what flows into them goes on from the caller's graph walk, once)
  grads = out._backprop(g, True, True, stop=tuple(inputs))
  return [(grads[t] if t in grads else t.zeros_like()) if t.requires_grad else None for t in inputs]
