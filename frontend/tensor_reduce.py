"""The Tensor's reductions (`sum`, `prod`, `max`, `min`, `any`, `all`, `mean`, `var`, `std`, `argmax`, `argmin`),
the softmax family (`softmax`, `log_softmax`, `softmin`, `logsumexp`) and the matrix product (`dot`, `matmul`,
`linear`: a multiply of two broadcast views and a sum over the shared dim). `Tensor` inherits them from `ReduceMixin`.

>>> from frontend import Tensor
>>> t = Tensor([[1, 2], [3, 4]])
>>> t.sum(axis=0).tolist(), t.max().item(), (t @ t).tolist()
([4, 6], 4, [[7, 10], [15, 22]])
"""
from __future__ import annotations
import math
from typing import TYPE_CHECKING
from compiler.dtypes import DType, dtypes, least_upper_dtype, sum_acc_dtype
from compiler.lazy import LazyBuffer, mark_viewed
from compiler.memo import memo_put
from compiler.sint import any_sym
from compiler.uop import Ops, UOp
from compiler.view import prod
from frontend import function as F
from frontend.tensor_args import make_tuple, _to_dtype

# the final trackers of the short path of Tensor.dot by the operands' trackers: a pure function of the two, asked at
# every product of a loop; bounded (compiler/memo.py)
_dot_views: dict[tuple, tuple] = {}
def _view_of(base: LazyBuffer, st) -> LazyBuffer:
  """A view of `base` through `st` (a tracker LazyBuffer._view made for it before: not the base's own, reading something)."""
  if not base.viewed:
    base.viewed = True
    if base.buffer is not None: mark_viewed(base.buffer)
  return LazyBuffer(base.device, st, base.dtype, base=base)

# (frontend/tensor.py imports this module, so this one can't import it: it binds `Tensor` and `_wrap` here once it has made them)
if TYPE_CHECKING: from frontend.tensor import Tensor, _wrap

class ReduceMixin:
  __slots__ = ()

  def _reduce_axes(self: Tensor, axis, op: str = "reduce") -> tuple[int, ...]:
    if axis is None: return tuple(range(self.ndim))
    if self.ndim == 0:   # a 0-d tensor takes axis 0 or -1 and has nothing to reduce
      for a in make_tuple(axis, 1): self._axis(a, op=op)
      return ()
    return tuple(sorted({self._axis(a, op=op) for a in make_tuple(axis, 1)}))
  def _reduce(self: Tensor, fn, axis, keepdim: bool) -> Tensor:
    axes = self._reduce_axes(axis, op=fn.__name__.lower())
    if not self.lazydata.shape: return self   # (0-d)
    # an empty axis reduces to the op's identity (0, 1, the dtype's min for max: internal uses only, since the public
    # max/min raise there), kept in the graph
    ret = fn.apply(self, axis=axes) if axes else self
    return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))
  def sum(self: Tensor, axis=None, keepdim: bool = False, dtype=None, acc_dtype: DType | None = None) -> Tensor:
    """Sum over `axis` (all axes when None); bool and small ints accumulate as int32. `dtype` casts the input first
    and is the result's dtype (tinygrad/torch); `acc_dtype` is the older spelling of the same.

    >>> Tensor([1, 2]).sum(dtype="float32").tolist()
    3.0
    """
    acc_dtype = _to_dtype(dtype) or _to_dtype(acc_dtype)
    acc = acc_dtype or sum_acc_dtype(self.dtype)
    x = self.cast(acc)
    ret = x._reduce(F.Sum, axis, keepdim)
    # half sums accumulate in float32 but return the input dtype (as tinygrad and torch do)
    return ret.cast(self.dtype) if acc_dtype is None and self.dtype in (dtypes.float16, dtypes.bfloat16) else ret
  def prod(self: Tensor, axis=None, keepdim: bool = False, dtype=None, acc_dtype=None) -> Tensor:
    """The product over `axis` (all axes when None); bools and small ints multiply in 32 bits.

    >>> Tensor([[1, 2], [3, 4]]).prod().item(), Tensor([[1, 2], [3, 4]]).prod(axis=0).tolist()
    (24, [3, 8])
    """
    acc_dtype = _to_dtype(dtype) or _to_dtype(acc_dtype)
    return self.cast(acc_dtype or sum_acc_dtype(self.dtype) if not self.dtype.is_float else self.dtype)._reduce(F.Prod, axis, keepdim)
  def max(self: Tensor, axis=None, keepdim: bool = False) -> Tensor:
    """The maximum over `axis` (all axes when None). An empty axis has no maximum: that raises, as in numpy and torch.

    >>> Tensor([[1, 5], [3, 4]]).max(axis=0).tolist()
    [3, 5]
    """
    self._nonempty_reduce("max", axis)
    return self._reduce(F.Max, axis, keepdim)
  def min(self: Tensor, axis=None, keepdim: bool = False) -> Tensor:
    """The minimum over `axis` (all axes when None).

    >>> t = Tensor([[1, 5], [3, 4]])
    >>> t.min().item(), t.min(axis=1).tolist()
    (1, [1, 3])
    """
    self._nonempty_reduce("min", axis)   # (names min, not max, in an axis error)
    if self.dtype.is_bool: return self.logical_not().max(axis, keepdim).logical_not()
    # (integers through ~x = -x - 1: order-reversing without overflow, where -x wraps the most negative value to itself)
    if self.dtype.is_int: return (~self).max(axis, keepdim).bitwise_not()
    return -((-self).max(axis, keepdim))
  def _nonempty_reduce(self: Tensor, name: str, axis):
    for a in self._reduce_axes(axis, op=name):
      if self.shape[a] == 0:
        raise RuntimeError(f"{name}(): can't reduce over the empty dim {a} of shape {self.shape}: a reduction without identity")
  def any(self: Tensor, axis=None, keepdim=False) -> Tensor:
    """Whether any element along `axis` (all axes when None) is nonzero, as a bool tensor.

    >>> Tensor([[0, 1], [0, 0]]).any(axis=1).tolist(), Tensor([0, 2]).any().item()
    ([True, False], True)
    """
    return self.bool()._reduce(F.Max, axis, keepdim)   # (over an empty axis: False, the identity of or)
  def all(self: Tensor, axis=None, keepdim=False) -> Tensor:
    """Whether every element along `axis` (all axes when None) is nonzero, as a bool tensor.

    >>> Tensor([[1, 1], [0, 1]]).all(axis=1).tolist(), Tensor([1, 2]).all().item()
    ([True, False], True)
    """
    return self.logical_not().any(axis, keepdim).logical_not()
  def mean(self: Tensor, axis=None, keepdim: bool = False) -> Tensor:
    """The mean over `axis` (all axes when None); integer tensors give the default float dtype.

    >>> Tensor([[1, 2], [3, 4]]).mean().item(), Tensor([[1, 2], [3, 4]]).mean(axis=1).tolist()
    (2.5, [1.5, 3.5])
    """
    out_dt = self.dtype if self.dtype.is_float else dtypes.default_float
    n = prod(self.shape[a] for a in self._reduce_axes(axis, op="mean"))
    s = self.cast(out_dt).sum(axis, keepdim, acc_dtype=sum_acc_dtype(out_dt))   # half: the sum stays float32 (no overflow)
    return (s / n if n else s * math.nan).cast(out_dt)
  def var(self: Tensor, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
    """The variance over `axis`: sum((x - mean)**2) / (n - correction); nan when n <= correction.

    >>> Tensor([1.0, 2.0, 3.0, 4.0]).var(correction=0).item(), Tensor([[1.0, 3.0], [2.0, 2.0]]).var(axis=1).tolist()
    (1.25, [2.0, 0.0])
    """
    # half squares overflow past |x| ~ 256: compute in float32 and round once at the end (as torch)
    if self.dtype in (dtypes.float16, dtypes.bfloat16): return self.float().var(axis, keepdim, correction).cast(self.dtype)
    n = prod(self.shape[a] for a in self._reduce_axes(axis, op="var"))
    sq = (self - self.mean(axis, keepdim=True)).square().sum(axis, keepdim)
    return sq / (n - correction if isinstance(n, UOp) else float(max(0, n - correction)))
  def std(self: Tensor, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
    """The standard deviation over `axis`, `var(...).sqrt()`.

    >>> Tensor([1.0, 3.0, 5.0]).std().item(), Tensor([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).std(correction=0).item()
    (2.0, 2.0)
    """
    if self.dtype in (dtypes.float16, dtypes.bfloat16): return self.float().std(axis, keepdim, correction).cast(self.dtype)
    v = self.var(axis, keepdim, correction)
    z = v == 0   # sqrt's gradient is inf at 0 and would make 0 * inf = NaN: torch defines it as 0 there
    return z.where(0.0, z.where(1.0, v).sqrt())
  def var_mean(self: Tensor, axis=None, keepdim=False, correction=1):
    """`(var, mean)` over `axis` as a tuple of tensors.

    >>> [t.item() for t in Tensor([1.0, 3.0]).var_mean()]
    [2.0, 2.0]
    """
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)
  def std_mean(self: Tensor, axis=None, keepdim=False, correction=1):
    """`(std, mean)` over `axis` as a tuple of tensors.

    >>> [t.item() for t in Tensor([1.0, 3.0, 5.0]).std_mean()]
    [2.0, 3.0]
    """
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)
  def _softmax(self: Tensor, axis, dtype=None):
    x = self.cast(dtype) if dtype is not None else self
    # an empty axis has no max to subtract (and the result is empty anyway)
    m = x - x.max(axis=axis, keepdim=True).detach() if x.numel() else x
    e = m.exp()
    return m, e, e.sum(axis=axis, keepdim=True)
  def softmax(self: Tensor, axis: int = -1, dtype=None) -> Tensor:
    """exp(x) / sum(exp(x)) along `axis`, computed with the maximum subtracted first; `dtype` casts the input.

    >>> Tensor([0.0, 0.0]).softmax().tolist()
    [0.5, 0.5]
    >>> [round(v, 4) for v in Tensor([1.0, 2.0, 3.0]).softmax().tolist()]
    [0.09, 0.2447, 0.6652]
    """
    _, e, ss = self._softmax(axis, dtype)
    return e.div(ss)
  def log_softmax(self: Tensor, axis: int = -1, dtype=None) -> Tensor:
    """log(softmax(x)) along `axis`, computed stably.

    >>> [round(v, 4) for v in Tensor([1.0, 2.0, 3.0]).log_softmax().tolist()]
    [-2.4076, -1.4076, -0.4076]
    """
    m, _, ss = self._softmax(axis, dtype)
    return m - ss.log()
  def logsumexp(self: Tensor, axis=None, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) over `axis`, stable; an all -inf (or any +inf) slice gives -inf (+inf) like torch."""
    x = self._float()
    m = x._reduce(F.Max, axis, True).detach()   # (an empty axis: -inf, and the result is log(0) = -inf, as torch)
    m = m.isinf().where(0.0, m)   # an infinite max is not subtracted: inf - inf would be nan
    ret = (x - m).exp().sum(axis=axis, keepdim=True).log().add(m)
    return ret if keepdim else ret.squeeze_axes(x._reduce_axes(axis))
  def squeeze_axes(self: Tensor, axes) -> Tensor:
    """Remove the given axes, which must have size 1 (as after a keepdim reduction).

    >>> Tensor.zeros(2, 1, 3).squeeze_axes((1,)).shape
    (2, 3)
    """
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))
  def argmax(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the first maximum (flattened when axis is None)."""
    if axis is None:
      ret = self.flatten().argmax(0) if self.ndim else Tensor(0, device=self.device)
      return ret.reshape((1,) * self.ndim) if keepdim else ret
    a = self._axis(axis, op="argmax")
    self._nonempty_reduce("argmax", a)
    n = self.shape[a]
    m = self == self.max(axis=a, keepdim=True)
    if self.dtype.is_float: m = m | self.isnan()   # the max is NaN where there is one: its first index, as torch
    idx = Tensor.arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - a - 1))
    return (n - (m * idx).max(axis=a, keepdim=keepdim)).cast(dtypes.int32)
  def argmin(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """The index of the first minimum along `axis` (of the flattened tensor when None), as int32.

    >>> Tensor([3, 1, 2, 1]).argmin().item(), Tensor([[3, 1], [0, 2]]).argmin(axis=1).tolist()
    (1, [1, 0])
    """
    # (integers through ~x, as min: -x wraps the most negative value to itself)
    return (-self if self.dtype.is_float else self.logical_not() if self.dtype.is_bool else ~self).argmax(axis, keepdim)
  def dot(self: Tensor, w: Tensor, dtype=None) -> Tensor:
    """Matrix product with numpy/torch broadcasting rules (1-D operands included); `dtype` is the accumulation and
    result dtype (tinygrad)."""
    if not isinstance(w, Tensor): w = Tensor(w, device=self.device)
    if self.ndim == 0 or w.ndim == 0: raise RuntimeError(f"dot: both arguments need at least 1 dim, got {self.shape} and {w.shape}")
    k_self, k_w = self.shape[-1], w.shape[-min(w.ndim, 2)]
    if k_self != k_w: raise RuntimeError(f"matmul: shapes {self.shape} and {w.shape} don't match ({k_self} != {k_w})")
    xl, wl = self.lazydata, w.lazydata
    if dtype is None and xl.__class__ is LazyBuffer and wl.__class__ is LazyBuffer and len(xl.shape) == 2 == len(wl.shape) and \
       (dt := xl.dtype) is wl.dtype and dt.is_float and sum_acc_dtype(dt) is dt and xl.device == wl.device and \
       not (self.requires_grad or w.requires_grad) and not any_sym(xl.shape) and not any_sym(wl.shape):
      # (two matrices of one float dtype with no gradient to record, inference and benchmark loops: the lazy ops the
      # general path below makes, in its order, without its dozen Tensor wrappers; a 512^3 `(a @ b).realize()` spent
      # ~60 of its ~150 us of host work building them. tests/frontend/test_matmul_fast_path.py checks the two graphs are one)
      (m, k), n = xl.shape, wl.shape[1]
      if (sts := _dot_views.get(key := (xl.st, wl.st))) is None:
        x3, w3 = xl.reshape((m, 1, k)), wl.reshape((1, k, n)).permute((0, 2, 1))
        if n != 1: x3 = x3.expand((m, n, k))
        if m != 1: w3 = w3.expand((m, n, k))
        # (kept only when both are views of the operands' bases, what _view makes of any tracker that reads something)
        if x3._base is (xl._base or xl) and w3._base is (wl._base or wl): memo_put(_dot_views, key, (x3.st, w3.st))
      else:   # (the same final views without the intermediate ones: what LazyBuffer._view does for each, marks included)
        x3, w3 = (_view_of(b._base or b, st) for b, st in ((xl, sts[0]), (wl, sts[1])))
      rg = None if self.requires_grad is None or w.requires_grad is None else False
      return _wrap(x3.alu(Ops.MUL, w3).r(Ops.ADD, (2,)).reshape((m, n)), rg)
    x = self.reshape(*self.shape[:-1], *[1] * min(self.ndim - 1, w.ndim - 1, 1), self.shape[-1])
    wt = w.reshape(*w.shape[:-2], *[1] * min(self.ndim - 1, w.ndim - 1, 1), *w.shape[-min(w.ndim, 2):]).transpose(-1, -min(w.ndim, 2))
    dt = least_upper_dtype(x.dtype, wt.dtype)
    if dtype is not None: return (x.cast(dt) * wt.cast(dt)).sum(-1, dtype=dtype)
    return (x.cast(dt) * wt.cast(dt)).sum(-1, acc_dtype=sum_acc_dtype(dt) if not dt.is_float else None).cast(dt)
  def matmul(self: Tensor, x: Tensor, reverse: bool = False, dtype=None) -> Tensor:
    """The matrix product `self @ x` (`x @ self` when reverse), with `dot`'s broadcasting rules.

    >>> Tensor([[1, 2], [3, 4]]).matmul(Tensor([[5], [6]])).tolist()
    [[17], [39]]
    >>> (Tensor([[1, 2], [3, 4]]) @ Tensor([1, 1])).tolist()
    [3, 7]
    """
    return x.dot(self, dtype) if reverse else self.dot(x, dtype)
  def linear(self: Tensor, weight: Tensor, bias: Tensor | None = None, dtype=None) -> Tensor:
    """`self @ weight + bias`, weight shaped (in, out); a 1-D weight scales elementwise instead.

    >>> Tensor([[1, 2], [3, 4]]).linear(Tensor([[1, 0], [0, 1]]), Tensor([10, 20])).tolist()
    [[11, 22], [13, 24]]
    """
    if dtype is not None: return self.cast(dtype).linear(weight.cast(dtype), bias.cast(dtype) if bias is not None else None)
    x = self.mul(weight) if weight.ndim == 1 else self.dot(weight)
    return x.add(bias) if bias is not None else x
  def softmin(self: Tensor, axis: int = -1, dtype=None) -> Tensor:
    """softmax(-x) along `axis`.

    >>> [round(v, 4) for v in Tensor([1.0, 2.0, 3.0]).softmin().tolist()]
    [0.6652, 0.2447, 0.09]
    """
    return (-self).softmax(axis, dtype)
