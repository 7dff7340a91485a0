"""The Tensor's elementwise ops: broadcasting and dtype promotion of two operands (`_broadcasted`,
`_broadcast_shape`), arithmetic (`add`, `sub`, `mul`, `div`, `idiv`, `mod`, `pow`, ...), `where` and `masked_fill`,
the unary math (`exp`, `log`, `sqrt`, `sin`, the inverse and hyperbolic functions, rounding, `abs`, `sign`, `clip`,
`isnan`, ...) and the bitwise and shift ops. `Tensor` inherits them from `ElementwiseMixin`; the Python operators
that call them are in frontend/tensor.py.

>>> from frontend import Tensor
>>> (Tensor([[1], [2]]) + Tensor([10, 20])).tolist(), Tensor([7, -7]).mod(3).tolist()
([[11, 21], [12, 22]], [1, 2])
>>> _broadcast_shape((2, 1), (3,))
(2, 3)
"""
from __future__ import annotations
import functools, math
from typing import TYPE_CHECKING
import numpy as np
from compiler.dtypes import dtypes, least_upper_dtype
from compiler.lazy import LazyBuffer
from compiler.uop import UOp
from compiler.sint import any_sym, binds_of
from frontend import multi
from frontend import function as F

# (frontend/tensor.py imports this module, so this one can't import it: it binds `Tensor` and `_wrap` here once it
# has made them)
if TYPE_CHECKING: from frontend.tensor import Tensor, _wrap

class ElementwiseMixin:
  __slots__ = ()

  def _fill_value(self: Tensor, value, op: str, shape: tuple | None = None) -> Tensor:
    """The Python scalar `value` as a constant of self's dtype (wrapping ints, truncating floats, as numpy's astype)
    and self's shape (or `shape`); an infinity or NaN, which no integer holds, is refused."""
    if self.dtype.is_int and not math.isfinite(float(value)):
      raise ValueError(f"{op}: value {value} can't be stored in a {self.dtype} tensor of shape {self.shape}")
    return Tensor(multi.const(value, self.dtype, self.shape if shape is None else shape, self.device))
  def _const(self: Tensor, x, dtype=None) -> Tensor:
    return Tensor(multi.const(x, dtype or self.dtype, self.shape, self.device))
  def _broadcasted(self: Tensor, y, reverse: bool = False, match_dtype: bool = True, op: str | None = None) -> tuple[Tensor, Tensor]:
    x = self
    if (yc := y.__class__) is Tensor:
      # (two tensors of one dtype and shape on one device, most binary ops: what the checks below come to)
      xl, yl = x.lazydata, y.lazydata
      if xl.__class__ is LazyBuffer and yl.__class__ is LazyBuffer and xl.dtype is yl.dtype and xl.shape == yl.shape and xl.device == yl.device:
        return (y, x) if reverse else (x, y)
    elif yc is float or yc is int:
      # (a Python number, most often in x's dtype: the branch below for it, without the type tests before it)
      lb = x.lazydata
      dt = lb.dtype
      if (dt.is_float if yc is float else not dt.is_bool) and not any_sym(sh := lb.shape):
        y = _wrap(multi.const(y, dt, sh, lb.device), None)
        return (y, x) if reverse else (x, y)
    if not isinstance(y, Tensor):
      if isinstance(y, (np.ndarray, list, tuple)): y = Tensor(y, device=x.device)
      elif isinstance(y, UOp):   # a bound Variable (or an expression of them) as a value, e.g. a symbolic element count
        if not binds_of(y) or y.dtype is None or not y.dtype.is_int: raise TypeError(f"can't combine a Tensor with {y!r}: bind its Variables")
        y = Tensor(multi.const(y, x.dtype if not x.dtype.is_bool else dtypes.default_int, (), x.device))
      else:
        if not isinstance(y, (bool, int, float)): raise TypeError(f"can't combine a Tensor with {type(y).__name__}")
        promote = (isinstance(y, float) and not x.dtype.is_float) or (isinstance(y, int) and not isinstance(y, bool) and x.dtype.is_bool)
        dt = (dtypes.default_float if isinstance(y, float) else dtypes.default_int) if promote else x.dtype
        if not promote and not any_sym(x.shape):
          # (a Python number in x's dtype: the constant at x's shape right away; LazyBuffer.const makes the same view
          # of the same constant that the reshape+expand below would, without two autograd nodes per number)
          y = _wrap(multi.const(y, dt, x.shape, x.device), None)
          return (y, x) if reverse else (x, y)
        y = _wrap(multi.const(y, dt, (), x.device), None)
    if x.device != y.device: raise RuntimeError(f"tensors on different devices: {x.device} and {y.device}")
    if reverse: x, y = y, x
    if match_dtype and x.dtype != y.dtype:
      dt = least_upper_dtype(x.dtype, y.dtype)
      x, y = x.cast(dt), y.cast(dt)
    if (xs := x.lazydata.shape) == (ys := y.lazydata.shape): return x, y
    shape = _broadcast_shape(xs, ys, op=op)
    return x._expand_to(shape), y._expand_to(shape)
  def _expand_to(self: Tensor, shape) -> Tensor:
    lb = self.lazydata
    if (sh := lb.shape) == shape: return self
    ones = (1,) * (len(shape) - len(sh)) + sh
    if not self.requires_grad and isinstance(lb, LazyBuffer) and len(shape) >= len(sh) and not any_sym(shape) and not any_sym(ones) and \
       all(b == n or b == 1 for b, n in zip(ones, shape)):   # (else the slow way, which raises expand's error)
      # (no gradient to record, e.g. an optimizer's lr or bias correction: the reshape and expand below made two autograd
      # nodes with no parents and returned a tensor with this one's requires_grad; this makes the same lazy view)
      if shape == ones: lb = lb.reshape(ones)
      elif ones == sh: lb = lb.expand(shape)
      # (lb.reshape(ones).expand(shape) in one view: the reshape's view has the tracker st, unless it reads nothing
      # (then it is a constant 0, expanded the other way)
      elif not (st := lb.st.reshape(ones)).reads_nothing: lb = lb._view(st.expand(shape))
      else: lb = lb.reshape(ones).expand(shape)
      return _wrap(lb, self.requires_grad)
    return self.reshape(ones).expand(shape)
  def add(self: Tensor, x, reverse=False) -> Tensor:
    """`self + x` with broadcasting and dtype promotion (`x + self` when reverse).

    >>> Tensor([[1], [2]]).add(Tensor([10, 20])).tolist()
    [[11, 21], [12, 22]]
    >>> Tensor([1, 2]).add(1.5).tolist()
    [2.5, 3.5]
    """
    return F.Add.apply(*self._broadcasted(x, reverse, op="add"))
  def sub(self: Tensor, x, reverse=False) -> Tensor:
    """`self - x` with broadcasting (`x - self` when reverse); raises TypeError for bool tensors.

    >>> Tensor([5, 7]).sub(2).tolist(), Tensor([5, 7]).sub(10, reverse=True).tolist()
    ([3, 5], [5, 3])
    """
    a, b = self._broadcasted(x, reverse, op="sub")
    if a.dtype.is_bool: raise TypeError("sub: subtraction of bool tensors is not supported; use logical_xor")
    return F.Sub.apply(a, b)
  def mul(self: Tensor, x, reverse=False) -> Tensor:
    """`self * x` with broadcasting and dtype promotion.

    >>> Tensor([2, 3]).mul(Tensor([4, 5])).tolist(), Tensor([2, 3]).mul(0.5).tolist()
    ([8, 15], [1.0, 1.5])
    """
    return F.Mul.apply(*self._broadcasted(x, reverse, op="mul"))
  def div(self: Tensor, x, reverse=False, rounding_mode: str | None = None) -> Tensor:
    """`self / x` as floats, or rounded like torch with rounding_mode 'trunc' or 'floor' (then ints stay
    ints).

    >>> t = Tensor([7, -7])
    >>> t.div(2).tolist(), t.div(2, rounding_mode='floor').tolist(), t.div(2, rounding_mode='trunc').tolist()
    ([3.5, -3.5], [3, -4], [3, -3])
    """
    a, b = self._broadcasted(x, reverse, op="div")
    # integers divide exactly in integers (a float quotient rounds above 2**24)
    if rounding_mode == "trunc": return F.IDiv.apply(a, b) if not a.dtype.is_float and not a.dtype.is_bool else (a / b).trunc()
    if rounding_mode == "floor": return a._floordiv(b) if not a.dtype.is_float else (a / b).floor()
    if rounding_mode is not None: raise RuntimeError(f"div: rounding_mode must be None, 'trunc' or 'floor', not {rounding_mode!r}")
    return F.Div.apply(a._float(), b._float())
  def idiv(self: Tensor, x, reverse=False) -> Tensor:
    """Integer division truncating toward zero (tinygrad's idiv, C's `/`); trunc(a/b) for floats. `//` floors.

    >>> Tensor([7, -7]).idiv(2).tolist(), (Tensor([7, -7]) // 2).tolist()
    ([3, -3], [3, -4])
    """
    if self.dtype.is_bool or (isinstance(x, Tensor) and x.dtype.is_bool and reverse):
      raise TypeError("idiv: bool tensors can't be divided")
    return self.div(x, reverse, rounding_mode="trunc")
  def _floordiv(self: Tensor, x, reverse=False) -> Tensor:
    """Floor division (Python semantics) for ints; floor(a/b) for floats."""
    a, b = self._broadcasted(x, reverse, op="floordiv")
    if a.dtype.is_float: return (a / b).floor()
    if a.dtype.is_bool: raise TypeError("floordiv: bool tensors can't be divided")
    q = F.IDiv.apply(a, b)
    if a.dtype.is_unsigned: return q
    r = F.Mod.apply(a, b)
    fix = (r != 0) & ((r < 0) != (b < 0))
    return fix.where(q - 1, q)
  def mod(self: Tensor, x, reverse=False) -> Tensor:
    """Remainder with the sign of the divisor (Python/torch semantics)."""
    a, b = self._broadcasted(x, reverse, op="mod")
    if a.dtype.is_float: return a - (a / b).floor() * b
    r = F.Mod.apply(a, b)
    if a.dtype.is_unsigned: return r
    return ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)
  def fmod(self: Tensor, x) -> Tensor:
    """The remainder with the sign of the dividend (C fmod), unlike `mod`.

    >>> Tensor([7, -7]).fmod(3).tolist(), Tensor([7.5, -7.5]).fmod(2).tolist()
    ([1, -1], [1.5, -1.5])
    """
    a, b = self._broadcasted(x, op="fmod")
    return a - (a / b).trunc() * b if a.dtype.is_float else F.Mod.apply(a, b)
  def pow(self: Tensor, x, reverse=False) -> Tensor:
    """`self ** x` (`x ** self` when reverse); integers to integer powers stay integers, and a negative base to
    a fractional power is nan.

    >>> Tensor([2, 3]).pow(3).tolist(), Tensor([1, 2, 3]).pow(2, reverse=True).tolist(), Tensor([4.0]).pow(0.5).tolist()
    ([8, 27], [2, 4, 8], [2.0])
    """
    if not isinstance(x, Tensor) and not reverse:
      if not self.dtype.is_float and isinstance(x, int) and x < 0:   # (torch and tinygrad refuse it too)
        raise RuntimeError(f"pow: integers to negative integer powers are not allowed ({self.dtype} ** {x})")
      if x == 2: return self * self
      if x == 1: return self
      if x == 0.5: return self.sqrt()
      if x == -1: return self.reciprocal()
      if x == 0 and not self.dtype.is_float: return self._const(1)
      if x == 0: return F.PowGrad.apply(self, self.zeros_like(), self.ones_like())   # d/dx x**0 = 0, as torch
      if self.dtype.is_float and float(x).is_integer() and 0 < x <= 16: return self._mulpow(int(x))
    base, exp = self._broadcasted(x, reverse, op="pow")
    if not base.dtype.is_float and not exp.dtype.is_float:  # integer power by repeated squaring up to 31 bits
      return base._ipow(exp)
    base, exp = base._float(), exp._float()
    b, e = base.detach(), exp.detach()   # the exp/log composite is NaN to differentiate at 0: PowGrad differentiates
    # |b|^e, negative base: sign by the parity of an integral exponent, nan for a fractional one
    mag = (e * b.abs().log()).exp()
    is_int = e == e.trunc()
    odd = (e.abs() % 2) == 1
    neg = b < 0
    res = neg.where(is_int.where(odd.where(-mag, mag), math.nan), mag)
    return F.PowGrad.apply(base, exp, (b == 0).where((e == 0).where(1.0, (e < 0).where(math.inf, 0.0)), res))
  def _mulpow(self: Tensor, n: int) -> Tensor:
    """x**n for a small n > 0 by repeated squaring: exact, and its gradient n*x**(n-1) is right at 0."""
    ret, b, k = None, self, n
    while k:
      if k & 1: ret = b if ret is None else ret * b
      k >>= 1
      if k: b = b * b
    return ret
  def _ipow(self: Tensor, e: Tensor) -> Tensor:
    ret, b = self.ones_like(), self
    for i in range(31):
      bit = ((e >> i) & 1) == 1
      ret = bit.where(ret * b, ret)
      b = b * b
    return (e < 0).where(0, ret)
  def maximum(self: Tensor, x) -> Tensor:
    """The elementwise maximum of self and x, broadcast; nan propagates.

    >>> Tensor([1, 5]).maximum(Tensor([3, 2])).tolist(), Tensor([1, 5]).maximum(3).tolist()
    ([3, 5], [3, 5])
    """
    a, b = self._broadcasted(x, op="maximum")
    if a.dtype.is_bool: return a | b
    return F.Maximum.apply(a, b)
  def minimum(self: Tensor, x) -> Tensor:
    """The elementwise minimum of self and x, broadcast; nan propagates.

    >>> Tensor([1, 5]).minimum(Tensor([3, 2])).tolist(), Tensor([1, 5]).minimum(2.5).tolist()
    ([1, 2], [1.0, 2.5])
    """
    a, b = self._broadcasted(x, op="minimum")
    if a.dtype.is_bool: return a & b
    return F.Minimum.apply(a, b)
  def where(self: Tensor, x, y) -> Tensor:
    """self ? x : y, broadcasting all three."""
    if isinstance(x, Tensor) and isinstance(y, Tensor): x, y = x._broadcasted(y, op="where")
    elif isinstance(x, Tensor): x, y = x._broadcasted(y, op="where")
    elif isinstance(y, Tensor): y, x = y._broadcasted(x, op="where")
    else:
      # two Python scalars: the wider kind of the two (True and 2 give ints 1 and 2, as torch and numpy)
      dt = (dtypes.default_float if isinstance(x, float) or isinstance(y, float) else
            dtypes.bool if isinstance(x, bool) and isinstance(y, bool) else dtypes.default_int)
      x, y = Tensor(x, device=self.device, dtype=dt), Tensor(y, device=self.device, dtype=dt)
      x, y = x._broadcasted(y)
    cond, x = self.bool()._broadcasted(x, match_dtype=False, op="where")
    cond, y = cond._broadcasted(y, match_dtype=False, op="where")
    x, y = x._broadcasted(y, op="where")
    return F.Where.apply(cond, x, y)
  def masked_fill(self: Tensor, mask: Tensor, value) -> Tensor:
    """`value` where `mask` is True, self elsewhere (broadcast).

    >>> Tensor([1, 2, 3]).masked_fill(Tensor([True, False, True]), 0).tolist()
    [0, 2, 0]
    """
    # the result keeps self's dtype (as torch): a value of another kind is converted, not the tensor
    if not isinstance(value, Tensor): return mask.where(self._fill_value(value, "masked_fill"), self)
    return mask.where(value, self).cast(self.dtype)
  def neg(self: Tensor) -> Tensor:
    """`-self` (logical not for bool tensors).

    >>> Tensor([1, -2]).neg().tolist()
    [-1, 2]
    """
    return self.logical_not() if self.dtype.is_bool else F.Neg.apply(self)
  def reciprocal(self: Tensor) -> Tensor:
    """`1 / self` as floats.

    >>> Tensor([2, 4]).reciprocal().tolist()
    [0.5, 0.25]
    """
    return F.Reciprocal.apply(self._float())
  def sqrt(self: Tensor) -> Tensor:
    """The square root as floats (nan for negative inputs).

    >>> Tensor([1.0, 4.0, 9.0]).sqrt().tolist()
    [1.0, 2.0, 3.0]
    """
    return F.Sqrt.apply(self._float())
  def rsqrt(self: Tensor) -> Tensor:
    """`1 / sqrt(self)`.

    >>> Tensor([1.0, 4.0, 16.0]).rsqrt().tolist()
    [1.0, 0.5, 0.25]
    """
    return self.sqrt().reciprocal()
  def exp(self: Tensor) -> Tensor:
    """e ** self, as floats.

    >>> [round(v, 4) for v in Tensor([0.0, 1.0, -1.0]).exp().tolist()]
    [1.0, 2.7183, 0.3679]
    """
    return F.Exp.apply(self._float())
  def exp2(self: Tensor) -> Tensor:
    """2 ** self, as floats.

    >>> [round(v, 4) for v in Tensor([0.0, 3.0, -1.0]).exp2().tolist()]
    [1.0, 8.0, 0.5]
    """
    return F.Exp.apply(self._float() * math.log(2))
  def log(self: Tensor) -> Tensor:
    """The natural logarithm (-inf at 0, nan for negative inputs).

    >>> [round(v, 4) for v in Tensor([0.5, 2.0, 10.0]).log().tolist()]
    [-0.6931, 0.6931, 2.3026]
    """
    return F.Log.apply(self._float())
  def log2(self: Tensor) -> Tensor:
    """The base-2 logarithm.

    >>> [round(v, 4) for v in Tensor([8.0, 0.5, 3.0]).log2().tolist()]
    [3.0, -1.0, 1.585]
    """
    return self.log() / math.log(2)
  def log10(self: Tensor) -> Tensor:
    """The base-10 logarithm.

    >>> [round(v, 4) for v in Tensor([1000.0, 2.0, 0.5]).log10().tolist()]
    [3.0, 0.301, -0.301]
    """
    return self.log() / math.log(10)
  def sin(self: Tensor) -> Tensor:
    """The sine (radians).

    >>> [round(v, 4) for v in Tensor([math.pi / 2, 1.0, -1.0]).sin().tolist()]
    [1.0, 0.8415, -0.8415]
    """
    return F.Sin.apply(self._float())
  def cos(self: Tensor) -> Tensor:
    """The cosine (radians).

    >>> [round(v, 4) for v in Tensor([0.0, math.pi, 1.0]).cos().tolist()]
    [1.0, -1.0, 0.5403]
    """
    return ((math.pi / 2) - self._float()).sin()
  def tan(self: Tensor) -> Tensor:
    """The tangent (radians), `sin / cos`.

    >>> [round(v, 4) for v in Tensor([math.pi / 4, 1.0]).tan().tolist()]
    [1.0, 1.5574]
    """
    return self.sin() / self.cos()
  def sinh(self: Tensor) -> Tensor:
    """The hyperbolic sine.

    >>> [round(v, 4) for v in Tensor([1.0, -1.0]).sinh().tolist()]
    [1.1752, -1.1752]
    """
    return (self.exp() - (-self).exp()) / 2
  def cosh(self: Tensor) -> Tensor:
    """The hyperbolic cosine.

    >>> [round(v, 4) for v in Tensor([0.0, 1.0]).cosh().tolist()]
    [1.0, 1.5431]
    """
    return (self.exp() + (-self).exp()) / 2
  def asinh(self: Tensor) -> Tensor:
    """The inverse hyperbolic sine.

    >>> [round(v, 4) for v in Tensor([1.0, -1.0]).asinh().tolist()]
    [0.8814, -0.8814]
    """
    return self.sign() * (self.abs() + (self.square() + 1).sqrt()).log()
  def acosh(self: Tensor) -> Tensor:
    """The inverse hyperbolic cosine (nan below 1).

    >>> [round(v, 4) for v in Tensor([4.0, 10.0]).acosh().tolist()]
    [2.0634, 2.9932]
    """
    return (self + (self.square() - 1).sqrt()).log()
  def atanh(self: Tensor) -> Tensor:
    """The inverse hyperbolic tangent (inf at 1, nan beyond).

    >>> [round(v, 4) for v in Tensor([0.5, -0.5]).atanh().tolist()]
    [0.5493, -0.5493]
    """
    return ((1 + self) / (1 - self)).log() / 2
  def asin(self: Tensor) -> Tensor:
    """arcsin via Abramowitz-Stegun 4.4.46 (|error| < 2e-8): pi/2 - sqrt(1-|x|) * poly(|x|), odd-extended."""
    x = self._float()
    a = x.abs()
    coefs = [-0.0012624911, 0.0066700901, -0.0170881256, 0.0308918810, -0.0501743046, 0.0889789874, -0.2145988016, 1.5707963050]
    p = functools.reduce(lambda acc, c: acc * a + c, coefs[1:], Tensor.full_like(a, coefs[0]))
    return x.sign() * (math.pi / 2 - (1 - a).sqrt() * p)
  def acos(self: Tensor) -> Tensor:
    """The arccosine in radians (nan outside [-1, 1]).

    >>> [round(v, 4) for v in Tensor([0.0, -1.0, 0.5]).acos().tolist()]
    [1.5708, 3.1416, 1.0472]
    """
    return math.pi / 2 - self.asin()
  def atan(self: Tensor) -> Tensor:
    """The arctangent in radians.

    >>> [round(v, 4) for v in Tensor([1.0, -1.0, 0.25]).atan().tolist()]
    [0.7854, -0.7854, 0.245]
    """
    return (self / (1 + self * self).sqrt()).asin()
  def logaddexp(self: Tensor, other) -> Tensor:
    """log(exp(self) + exp(other)), computed stably.

    >>> [round(v, 4) for v in Tensor([0.0, 1.0]).logaddexp(Tensor([0.0, 2.0])).tolist()]
    [0.6931, 2.3133]
    """
    a, b = self._float()._broadcasted(other)
    m = a.maximum(b).detach()
    return ((a - m).exp() + (b - m).exp()).log() + m
  def trunc(self: Tensor) -> Tensor:
    """Round toward zero (integers are returned as they are).

    >>> Tensor([-1.7, 1.7]).trunc().tolist()
    [-1.0, 1.0]
    """
    return F.Trunc.apply(self) if self.dtype.is_float else self
  def floor(self: Tensor) -> Tensor:
    """Round toward -inf (integers are returned as they are).

    >>> Tensor([-1.5, 1.5]).floor().tolist()
    [-2.0, 1.0]
    """
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self < t).where(t - 1, t)
  def ceil(self: Tensor) -> Tensor:
    """Round toward +inf (integers are returned as they are).

    >>> Tensor([-1.5, 1.5]).ceil().tolist()
    [-1.0, 2.0]
    """
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self > t).where(t + 1, t)
  def round(self: Tensor) -> Tensor:
    """Round half to even, like torch and numpy."""
    if not self.dtype.is_float: return self
    f = self.floor()
    d = self - f
    even = (f % 2) == 0
    return (d > 0.5).where(f + 1, (d < 0.5).where(f, even.where(f, f + 1)))
  def abs(self: Tensor) -> Tensor:
    """The absolute value.

    >>> Tensor([-2, 3]).abs().tolist(), Tensor([-2.5]).abs().tolist()
    ([2, 3], [2.5])
    """
    if self.dtype.is_unsigned or self.dtype.is_bool: return self
    return F.Abs.apply(self)
  def sign(self: Tensor) -> Tensor:
    """-1, 0 or 1 by the sign of each element, in self's dtype.

    >>> Tensor([-2.5, 0.0, 3.0]).sign().tolist(), Tensor([-2, 0, 3]).sign().tolist()
    ([-1.0, 0.0, 1.0], [-1, 0, 1])
    """
    return F.Sign.apply(self)
  def square(self: Tensor) -> Tensor:
    """`self * self`.

    >>> Tensor([-2, 3]).square().tolist()
    [4, 9]
    """
    return self * self
  def clip(self: Tensor, min_=None, max_=None) -> Tensor:
    """Limit the values to [min_, max_] (either bound may be None, not both: RuntimeError).

    >>> Tensor([-2, 0, 5]).clip(-1, 3).tolist(), Tensor([-2, 0, 5]).clip(max_=3).tolist()
    ([-1, 0, 3], [-2, 0, 3])
    """
    if min_ is None and max_ is None: raise RuntimeError("clip: at least one of min_ and max_ must be given")
    # where() rather than maximum/minimum: x's gradient is 1 on the bounds themselves and 0 at nan (torch: the mask
    # is lo <= x <= hi), not split in half at a tie; min_ > max_ gives max_ everywhere, nan stays nan
    x, inside, c = self, None, self.detach()
    if min_ is not None:
      x, lo = x._broadcasted(min_, op="clip")
      c, inside = (c < lo).where(lo, c), x >= lo
    if max_ is not None:
      x, hi = x._broadcasted(max_, op="clip")
      c = c._broadcasted(hi)[0]
      c, ok = (c > hi).where(hi, c), x <= hi
      inside = ok if inside is None else inside._broadcasted(ok)[0] & ok
    return inside.where(x, c)
  def clamp(self: Tensor, min_=None, max_=None) -> Tensor:
    """The same as `clip`.

    >>> Tensor([-2, 0, 5]).clamp(0).tolist()
    [0, 0, 5]
    """
    return self.clip(min_, max_)
  def isnan(self: Tensor) -> Tensor:
    """Whether each element is nan (bool).

    >>> Tensor([1.0, math.nan]).isnan().tolist()
    [False, True]
    """
    return self != self
  def isinf(self: Tensor, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    """Whether each element is +inf or -inf (each can be left out), as bools.

    >>> Tensor([1.0, math.inf, -math.inf]).isinf().tolist()
    [False, True, True]
    >>> Tensor([1.0, math.inf, -math.inf]).isinf(detect_negative=False).tolist()
    [False, True, False]
    """
    return (self == math.inf) * detect_positive + (self == -math.inf) * detect_negative if self.dtype.is_float else self._const(False, dtypes.bool)
  def isfinite(self: Tensor) -> Tensor:
    """Whether each element is neither inf nor nan (bool).

    >>> Tensor([1.0, math.inf, math.nan]).isfinite().tolist()
    [True, False, False]
    """
    return (self.isinf() | self.isnan()).logical_not()
  def lerp(self: Tensor, end: Tensor, weight) -> Tensor:
    """Linear interpolation `self + (end - self) * weight`.

    >>> Tensor([0.0, 10.0]).lerp(Tensor([10.0, 20.0]), 0.5).tolist()
    [5.0, 15.0]
    """
    return self + (end - self) * weight
  def copysign(self: Tensor, other) -> Tensor:
    """The magnitude of self with the sign of `other` (the sign bit of -0.0 counts), as floats.

    >>> Tensor([1.0, -2.0, 3.0]).copysign(Tensor([-1.0, 1.0, -0.0])).tolist()
    [-1.0, 2.0, -3.0]
    """
    a, b = self._float()._broadcasted(other, op="copysign")
    neg = (b < 0) | ((b == 0) & ((1 / b) < 0))
    # `other` gets a zero gradient, not none (torch, tinygrad): it joins the graph through sign (zero gradient),
    # as a +0.0 that is subtracted (x - +0.0 is x for every x, -0.0 and nan included)
    return neg.where(-a.abs(), a.abs()) - b.sign().abs() * 0
  def logical_not(self: Tensor) -> Tensor:
    """`not x` elementwise, as a bool tensor.

    >>> Tensor([True, False]).logical_not().tolist(), Tensor([0, 3]).logical_not().tolist()
    ([False, True], [True, False])
    """
    return F.Neq.apply(*self.bool()._broadcasted(True))
  def bitwise_not(self: Tensor) -> Tensor:
    """`~x` for integers (logical not for bools); raises RuntimeError for floats.

    >>> Tensor([0, 5]).bitwise_not().tolist(), Tensor([0, 5], dtype=dtypes.uint8).bitwise_not().tolist()
    ([-1, -6], [255, 250])
    """
    # (RuntimeError, as torch and tinygrad raise: the op has no kernel for the dtype)
    if self.dtype.is_float: raise RuntimeError(f"bitwise_not: {self.dtype} is not an integer or bool type")
    return self.logical_not() if self.dtype.is_bool else self ^ -1 if not self.dtype.is_unsigned else self ^ dtypes.max(self.dtype)
  def _bitop(self: Tensor, fn, x, reverse=False) -> Tensor:
    a, b = self._broadcasted(x, reverse, op=fn.__name__.lower())
    if a.dtype.is_float: raise RuntimeError(f"{fn.__name__}: not defined for {a.dtype}")
    return fn.apply(a, b)
  def bitwise_and(self: Tensor, x, reverse=False) -> Tensor:
    """`self & x` for integer and bool tensors; raises RuntimeError for floats.

    >>> Tensor([12, 10]).bitwise_and(6).tolist()
    [4, 2]
    """
    return self._bitop(F.BitwiseAnd, x, reverse)
  def bitwise_or(self: Tensor, x, reverse=False) -> Tensor:
    """`self | x` for integer and bool tensors; raises RuntimeError for floats.

    >>> Tensor([12, 10]).bitwise_or(3).tolist()
    [15, 11]
    """
    return self._bitop(F.BitwiseOr, x, reverse)
  def bitwise_xor(self: Tensor, x, reverse=False) -> Tensor:
    """`self ^ x` for integer and bool tensors; raises RuntimeError for floats.

    >>> Tensor([12, 10]).bitwise_xor(6).tolist()
    [10, 12]
    """
    return self._bitop(F.Xor, x, reverse)
  def lshift(self: Tensor, x, reverse=False) -> Tensor:
    """`self << x` for integer tensors.

    >>> Tensor([1, 3]).lshift(2).tolist()
    [4, 12]
    """
    return self._bitop(F.Shl, x, reverse)
  def rshift(self: Tensor, x, reverse=False) -> Tensor:
    """`self >> x` for integer tensors (arithmetic shift for signed types).

    >>> Tensor([16, 7, -16]).rshift(2).tolist()
    [4, 1, -4]
    """
    return self._bitop(F.Shr, x, reverse)

def _broadcast_shape(*shapes, op: str | None = None) -> tuple[int, ...]:
  if len(shapes) == 2:   # (the binary ops' case, with plain int dims: each dim is the one that is not 1)
    a, b = shapes
    if len(a) != len(b): a, b = (1,) * (len(b) - len(a)) + tuple(a), (1,) * (len(a) - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
      if x.__class__ is not int or y.__class__ is not int: break
      if x == y or y == 1: out.append(x)
      elif x == 1: out.append(y)
      else: break   # (the general loop below raises the error)
    else: return tuple(out)
  n = max(len(s) for s in shapes)
  padded = [(1,) * (n - len(s)) + tuple(s) for s in shapes]
  out = []
  for dims in zip(*padded):
    big = {d for d in dims if d != 1}
    if len(big) > 1: raise ValueError(f"{op or 'broadcast'}: shapes {' and '.join(str(tuple(s)) for s in shapes)} can't be broadcast together")
    out.append(big.pop() if big else (0 if 0 in dims else 1))
  return tuple(out)
