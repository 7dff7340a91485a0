"""The Tensor's dtype conversions: `cast` (value-preserving, floats truncate toward zero), `bitcast` (the same bits,
also between sizes) and the shorthands `float`, `half`, `int`, `bool`, `bfloat16`, `short`, `long`, `double`.
`Tensor` inherits them from `DTypeMixin`.

>>> from frontend import Tensor
>>> Tensor([1.5, -1.5]).int().tolist(), Tensor([1.0]).bitcast("uint32").tolist()
([1, -1], [1065353216])
"""
from __future__ import annotations
from typing import TYPE_CHECKING
from compiler.dtypes import DType, dtypes
from frontend import function as F
from frontend.tensor_args import _to_dtype

# (frontend/tensor.py imports this module, so this one can't import it: it binds `Tensor` here once it has made it)
if TYPE_CHECKING: from frontend.tensor import Tensor

class DTypeMixin:
  __slots__ = ()

  def cast(self: Tensor, dtype) -> Tensor:
    """Convert the values to `dtype` (a DType, a name like 'float32' or a numpy dtype); floats become ints
    by truncation toward zero.

    >>> Tensor([1.7, -1.7]).cast(dtypes.int32).tolist(), Tensor([1, 2]).cast('float32').tolist()
    ([1, -1], [1.0, 2.0])
    """
    dt = _to_dtype(dtype, f"cast of a {self.dtype} tensor of shape {self.shape}")
    if self.dtype == dt: return self
    if dt in dtypes.fp8s and self.dtype in dtypes.fp8s: return self.float().cast(dt)   # (fp8 to fp8: through float32)
    return F.Cast.apply(self, dtype=dt)   # (fp8: the kernel converts, compiler/fp8.py)
  def bitcast(self: Tensor, dtype) -> Tensor:
    """Reinterpret the bits as `dtype`. To a dtype n times smaller the last dim grows n times; to one n times larger
    it shrinks n times (it must divide). Bytes are in little-endian order, as in memory on every device here.

    >>> Tensor([1.0]).bitcast(dtypes.uint32).tolist(), Tensor([1, 258], dtype=dtypes.uint16).bitcast(dtypes.uint8).tolist()
    ([1065353216], [1, 0, 2, 1])
    """
    dt = _to_dtype(dtype, f"bitcast of a {self.dtype} tensor of shape {self.shape}")
    if dt.itemsize != self.dtype.itemsize: return self._bitcast_resize(dt)
    return self if self.dtype == dt else F.Cast.apply(self, dtype=dt, bitcast=True)
  def _bitcast_resize(self: Tensor, dt: DType) -> Tensor:
    # through unsigned ints of each size: split one wide int into narrow ones by shifts and masks, or join narrow ones
    if dtypes.bool in (dt, self.dtype): raise ValueError(f"bitcast: can't bitcast {self.dtype} to {dt} (bool has no bit layout)")
    uint = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
    src, dst, ssz, dsz = uint[self.dtype.itemsize], uint[dt.itemsize], self.dtype.itemsize, dt.itemsize
    if not self.ndim: raise ValueError(f"bitcast: a 0-d {self.dtype} tensor can't change size to {dt} (no last dim)")
    x = self.bitcast(src)
    if ssz > dsz:
      n = ssz // dsz
      parts = [((x >> (8 * dsz * k)) & ((1 << (8 * dsz)) - 1)).cast(dst) for k in range(n)]
      return Tensor.stack(*parts, dim=-1).reshape(*self.shape[:-1], self.shape[-1] * n).bitcast(dt)
    n = dsz // ssz
    if self.shape[-1] % n:
      raise ValueError(f"bitcast: {self.dtype} tensor of shape {self.shape} to {dt}: the last dim must be a multiple of {n}")
    x = x.reshape(*self.shape[:-1], self.shape[-1] // n, n).cast(dst)
    out = x[..., 0]
    for k in range(1, n): out = out | (x[..., k] << (8 * ssz * k))
    return out.bitcast(dt)
  def float(self: Tensor) -> Tensor:
    """Cast to float32.

    >>> Tensor([1, 2]).float().tolist()
    [1.0, 2.0]
    """
    return self.cast(dtypes.float32)
  def half(self: Tensor) -> Tensor:
    """Cast to float16.

    >>> Tensor([1.5]).half().dtype
    dtypes.half
    """
    return self.cast(dtypes.float16)
  def int(self: Tensor) -> Tensor:
    """Cast to int32 (floats truncate toward zero).

    >>> Tensor([1.9, -1.9]).int().tolist()
    [1, -1]
    """
    return self.cast(dtypes.int32)
  def bool(self: Tensor) -> Tensor:
    """Cast to bool (nonzero is True).

    >>> Tensor([0, 2]).bool().tolist()
    [False, True]
    """
    return self.cast(dtypes.bool)
  def bfloat16(self: Tensor) -> Tensor:
    """Cast to bfloat16.

    >>> Tensor([1.5, -2.0]).bfloat16().float().tolist()
    [1.5, -2.0]
    """
    return self.cast(dtypes.bfloat16)
  def short(self: Tensor) -> Tensor:
    """Cast to int16 (floats truncate toward zero).

    >>> Tensor([1.9, -1.9]).short().tolist()
    [1, -1]
    """
    return self.cast(dtypes.int16)
  def long(self: Tensor) -> Tensor:
    """Cast to int64.

    >>> Tensor([1.5, -2.5]).long().tolist()
    [1, -2]
    """
    return self.cast(dtypes.int64)
  def double(self: Tensor) -> Tensor:
    """Cast to float64.

    >>> Tensor([1, 2]).double().dtype
    dtypes.double
    """
    return self.cast(dtypes.float64)
  def _float(self: Tensor) -> Tensor: return self if self.dtype.is_float else self.cast(dtypes.default_float)
