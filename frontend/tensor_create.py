"""The Tensor's constructors: filled and empty tensors (`empty`, `full`, `zeros`, `ones`, the `*_like` forms, `arange`,
`linspace`, `eye`, `from_blob`) and random numbers (`rand`, `randn`, `randint`, `randperm`, `uniform`, `normal` and the
initializers). `Tensor` inherits them from `CreationMixin`; the generator's state (`Tensor._seed`, `_rng_counter`)
lives on the Tensor in frontend/tensor.py.

Random numbers are a counter-based hash run as a kernel on the device (`_random_bits`), keyed by the seed and a
per-device call counter: `manual_seed` makes the following draws reproducible, and since the counter's increment is a
kernel too, a TinyJit replay draws new numbers.

>>> from frontend import Tensor
>>> Tensor.arange(1, 7, 2).tolist(), Tensor.eye(2).tolist()
([1, 3, 5], [[1.0, 0.0], [0.0, 1.0]])
>>> x = Tensor.rand(2, 3)
>>> x.shape, ((x >= 0) & (x < 1)).all().item()
((2, 3), True)
"""
from __future__ import annotations
import math
from typing import TYPE_CHECKING
import numpy as np
from compiler.dtypes import dtypes, to_np
from compiler.lazy import LazyBuffer
from compiler.uop import UOp
from compiler.view import prod
from compiler.sint import any_sym
from frontend import multi
from frontend.multi import MultiLazyBuffer
from frontend.tensor_args import argfix, shape_arg, _to_dtype

# (frontend/tensor.py imports this module, so this one can't import it: it binds `Tensor` here once it has made it)
if TYPE_CHECKING: from frontend.tensor import Tensor

# random bits per uniform draw: the significand's precision (dtypes not listed take float32's 24)
_RAND_BITS = {dtypes.float16: 11, dtypes.bfloat16: 8}

def _hash32(x: Tensor) -> Tensor:
  """A 32-bit integer mixer (xor-shift-multiply rounds) used by the random number generator."""
  x = x ^ (x >> 16)
  x = x * 0x7FEB352D
  x = x ^ (x >> 15)
  x = x * 0x846CA68B
  return x ^ (x >> 16)

class CreationMixin:
  __slots__ = ()

  @staticmethod
  def empty(*shape, device=None, dtype=None, **kw) -> Tensor:
    """A tensor of the given shape whose contents are undefined (allocated, not filled).

    >>> Tensor.empty(2, 3).shape, Tensor.empty(4, dtype=dtypes.int32).dtype
    ((2, 3), dtypes.int)
    """
    shape, dt, dev = shape_arg(*shape, op="empty"), _to_dtype(dtype) or dtypes.default_float, multi.canonical(device)
    if isinstance(dev, tuple): return Tensor(MultiLazyBuffer([LazyBuffer.empty(shape, dt, d) for d in dev], None), **kw)
    return Tensor(LazyBuffer.empty(shape, dt, dev), **kw)
  @staticmethod
  def full(shape, fill_value, device=None, dtype=None, **kw) -> Tensor:
    """A tensor of `shape` filled with `fill_value`; the dtype follows the value unless given.

    >>> Tensor.full((2, 2), 7).tolist()
    [[7, 7], [7, 7]]
    >>> Tensor.full(3, 1.5).tolist()
    [1.5, 1.5, 1.5]
    """
    shape = argfix(shape) if isinstance(shape, (tuple, list)) else (shape,)
    if any(isinstance(s, int) and s < 0 for s in shape): raise ValueError(f"full: negative dimension in {shape}")
    dt = _to_dtype(dtype) or dtypes.from_py(fill_value)
    return Tensor(multi.const(fill_value, dt, tuple(shape), multi.canonical(device)), **kw)
  @staticmethod
  def zeros(*shape, **kw) -> Tensor:
    """A tensor of zeros (default float dtype unless `dtype` is given).

    >>> Tensor.zeros(2, 3).tolist()
    [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    >>> Tensor.zeros((2,), dtype=dtypes.int32).tolist()
    [0, 0]
    """
    return Tensor.full(argfix(*shape), 0.0, **kw)
  @staticmethod
  def ones(*shape, **kw) -> Tensor:
    """A tensor of ones (default float dtype unless `dtype` is given).

    >>> Tensor.ones(2, 2).tolist()
    [[1.0, 1.0], [1.0, 1.0]]
    """
    return Tensor.full(argfix(*shape), 1.0, **kw)
  def full_like(self: Tensor, fill_value, **kw) -> Tensor:
    """A tensor with self's shape, dtype and device (each may be overridden), filled with `fill_value`.

    >>> Tensor([[1, 2]]).full_like(5).tolist()
    [[5, 5]]
    """
    return Tensor.full(self.shape, fill_value, dtype=kw.pop("dtype", self.dtype), device=kw.pop("device", self.device), **kw)
  def zeros_like(self: Tensor, **kw) -> Tensor:
    """Zeros with self's shape, dtype and device.

    >>> Tensor([1.0, 2.0]).zeros_like().tolist()
    [0.0, 0.0]
    """
    return self.full_like(0, **kw)
  def empty_like(self: Tensor, **kw) -> Tensor:
    """An uninitialized tensor of self's shape (and dtype/device unless given)."""
    return Tensor.empty(self.shape, dtype=kw.pop("dtype", self.dtype), device=kw.pop("device", self.device), **kw)
  def const_like(self: Tensor, b) -> Tensor:
    """The constant b broadcast to self's shape, dtype and device (no buffer).

    >>> Tensor([1.0, 2.0]).const_like(3).tolist()
    [3.0, 3.0]
    """
    if isinstance(b, Tensor): raise TypeError("const_like: needs a Python scalar, not a Tensor")
    return self._const(b)
  @staticmethod
  def from_blob(ptr: int, shape: tuple[int, ...], **kw) -> Tensor:
    """A tensor made from the bytes at host address `ptr` (e.g. a ctypes or numpy pointer). Unlike tinygrad, which
    wraps the memory, the bytes are copied now: later writes to the memory are not seen.

    >>> import numpy as np
    >>> a = np.array([1.0, 2.0], np.float32)
    >>> Tensor.from_blob(a.ctypes.data, (2,), dtype="float32").tolist()
    [1.0, 2.0]
    """
    import ctypes
    if not isinstance(ptr, int) or ptr == 0: raise ValueError(f"from_blob: ptr must be a non-null address, got {ptr!r}")
    dt = _to_dtype(kw.pop("dtype", None)) or dtypes.default_float
    shape = tuple(shape)
    raw = ctypes.string_at(ptr, prod(shape) * dt.itemsize)
    return Tensor(np.frombuffer(raw, dtype=to_np(dt)).reshape(shape).copy(), **kw)
  def ones_like(self: Tensor, **kw) -> Tensor:
    """Ones with self's shape, dtype and device.

    >>> Tensor([1, 2]).ones_like().tolist()
    [1, 1]
    """
    return self.full_like(1, **kw)
  @staticmethod
  def arange(start, stop=None, step=1, **kw) -> Tensor:
    """[start, stop) in steps: `Tensor.arange(5)`, `Tensor.arange(1, 2, 0.25)`."""
    if stop is None: start, stop = 0, start
    if step == 0: raise ValueError("arange: step must not be 0")
    dt = _to_dtype(kw.pop("dtype", None)) or (dtypes.default_float if any(isinstance(x, float) for x in (start, stop, step)) else dtypes.default_int)
    dev = multi.canonical(kw.pop("device", None))
    if isinstance(dev, tuple): return Tensor.arange(start, stop, step, dtype=dt, device=dev[0], **kw).shard(dev)
    if any_sym((start, stop, step)):   # a bound Variable as a bound: a symbolic count (steps of +-1 only)
      if isinstance(step, UOp) or step not in (1, -1) or any(isinstance(x, float) for x in (start, stop)):
        raise TypeError(f"arange: with a symbolic bound ({start}, {stop}) the step must be the int 1 or -1, got {step!r}")
      n = (stop - start) if step == 1 else (start - stop)
      idx = Tensor(LazyBuffer.iota(n, dt, dev), **kw)
      return idx * step + start if step != 1 or not (isinstance(start, int) and start == 0) else idx
    n = max(0, math.ceil((stop - start) / step))
    idx = Tensor(LazyBuffer.iota(n, dt, dev), **kw) if n > 0 else Tensor.empty(0, dtype=dt, device=dev, **kw)
    return idx * step + start if (step != 1 or start != 0) and n > 0 else idx
  @staticmethod
  def linspace(start, stop, steps: int, **kw) -> Tensor:
    """`steps` evenly spaced values from start to stop, both included.

    >>> Tensor.linspace(0, 1, 5).tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    if steps < 0: raise ValueError("linspace: steps must be >= 0")
    dt = _to_dtype(kw.pop("dtype", None)) or dtypes.default_float
    if dt is dtypes.bool: raise ValueError("linspace: bool dtype is not supported")
    if steps == 1: return Tensor([start], dtype=dt, **kw)
    return (Tensor.arange(steps, **kw).cast(dt) * ((stop - start) / (steps - 1)) + start).cast(dt)
  @staticmethod
  def eye(n: int, m: int | None = None, **kw) -> Tensor:
    """The n x m identity matrix (m defaults to n).

    >>> Tensor.eye(2).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    >>> Tensor.eye(2, 3, dtype=dtypes.int32).tolist()
    [[1, 0, 0], [0, 1, 0]]
    """
    m = n if m is None else m
    if n < 0 or m < 0: raise ValueError(f"eye: negative size {n}, {m}")
    dt = _to_dtype(kw.pop("dtype", None)) or dtypes.default_float
    return (Tensor.arange(n, **{k: v for k, v in kw.items() if k == "device"}).unsqueeze(1) == Tensor.arange(m, device=kw.get("device"))).cast(dt).requires_grad_(kw.get("requires_grad"))
  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    """Make the following random tensors reproducible."""
    Tensor._seed, Tensor._rng_counter = int(seed) & 0xFFFFFFFF, {}
  @staticmethod
  def _random_bits(shape: tuple, device: str) -> Tensor:
    """uint32 random bits: hash(hash(index) ^ key), key = hash(seed, per-device call counter)."""
    n = prod(shape)
    if device not in Tensor._rng_counter:
      Tensor._rng_counter[device] = Tensor([0], dtype=dtypes.uint32, device=device).realize()
    ctr = Tensor._rng_counter[device]
    # the key and the counter's increment run now, as kernels: so a TinyJit capture records both, and every
    # replay draws new numbers
    key = _hash32(ctr * 0x85EBCA6B + ((Tensor._seed * 0x9E3779B9 + 0x6A09E667) & 0xFFFFFFFF)).contiguous()
    ctr.assign(ctr + 1)
    Tensor.realize(key, ctr)
    idx = Tensor.arange(n, dtype=dtypes.uint32, device=device)
    bits = _hash32(_hash32(idx) ^ key.expand(n)) if isinstance(n, UOp) or n > 0 else idx   # (a symbolic n: any size)
    return bits.reshape(shape)
  @staticmethod
  def rand(*shape, device=None, dtype=None, **kw) -> Tensor:
    """Uniform in [0, 1)."""
    shape, dev = shape_arg(*shape, op="rand"), multi.canonical(device)
    dt = _to_dtype(dtype) or dtypes.default_float
    if not dt.is_float: raise TypeError(f"rand: dtype must be a float type, not {dt}")
    if isinstance(dev, tuple): raise ValueError(f"rand: random numbers on several devices {dev}; make them on one device and shard() them")
    bits = Tensor._random_bits(shape, dev)
    # as many random bits as dt's significand holds: k / 2**p is then exact in dt, so the largest value is below 1 in
    # dt too (24 bits rounded to half would give 1.0 about once in 2,000 draws)
    p = _RAND_BITS.get(dt, 24)
    return ((bits >> (32 - p)).cast(dtypes.float32) * (1.0 / (1 << p))).cast(dt).requires_grad_(kw.get("requires_grad"))
  def rand_like(self: Tensor, **kw) -> Tensor:
    """Uniform random numbers in [0, 1) with self's shape and device (an integer tensor gives floats).

    >>> Tensor([[1, 2]]).rand_like().shape
    (1, 2)
    """
    return Tensor.rand(*self.shape, device=kw.pop("device", self.device), dtype=kw.pop("dtype", self.dtype if self.dtype.is_float else None), **kw)
  @staticmethod
  def randn(*shape, dtype=None, requires_grad=None, **kw) -> Tensor:
    """Standard normal (Box-Muller)."""
    shape, dt = shape_arg(*shape, op="randn"), _to_dtype(dtype) or dtypes.default_float
    # computed in float32 (float64 for float64) whatever dt is: from half uniforms 1 - u would be 0 once in 2**11
    # draws and log(0) an infinity; in float32 1 - u >= 2**-24, so |x| <= 5.8, which every float dtype holds
    src = Tensor.rand(2, *shape, dtype=dtypes.float64 if dt == dtypes.float64 else dtypes.float32, **kw)
    ret = src[0].mul(2 * math.pi).cos().mul((1 - src[1]).log().mul(-2).sqrt())
    return ret.cast(dt).requires_grad_(requires_grad)
  def randn_like(self: Tensor, **kw) -> Tensor:
    """Standard normal random numbers with self's shape and device.

    >>> Tensor([[1.0, 2.0]]).randn_like().shape
    (1, 2)
    """
    return Tensor.randn(*self.shape, device=kw.pop("device", self.device), dtype=kw.pop("dtype", self.dtype if self.dtype.is_float else None), **kw)
  @staticmethod
  def randint(*shape, low=0, high=10, **kw) -> Tensor:
    """Random integers in [low, high) (an int dtype, int32 unless `dtype` is given); TypeError for a bound or dtype
    that is not an int (torch, tinygrad), ValueError unless low < high.

    >>> x = Tensor.randint(2, 3, low=5, high=7)
    >>> x.shape, x.dtype, ((x >= 5) & (x < 7)).all().item()
    ((2, 3), dtypes.int, True)
    """
    if not (isinstance(low, int) and isinstance(high, int)): raise TypeError(f"randint: low and high must be ints, got {low!r}, {high!r}")
    if high <= low: raise ValueError(f"randint: need low < high, got {low}, {high}")
    dt = _to_dtype(kw.pop("dtype", None)) or dtypes.int32
    if not dt.is_int: raise TypeError(f"randint: dtype must be an integer type, not {dt}")
    return (Tensor.rand(*shape, **kw) * (high - low) + low).floor().cast(dt)
  @staticmethod
  def randperm(n: int, device=None, dtype=dtypes.int32, **kw) -> Tensor:
    """A random permutation of 0..n-1 (the argsort of n uniform numbers).

    >>> sorted(Tensor.randperm(5).tolist())
    [0, 1, 2, 3, 4]
    """
    if not isinstance(n, int) or n < 0: raise ValueError(f"randperm: n must be a non-negative int, got {n!r}")
    if n == 0: return Tensor.empty(0, dtype=_to_dtype(dtype), device=device, **kw)
    return Tensor.rand(n, device=device).argsort().cast(_to_dtype(dtype)).requires_grad_(kw.get("requires_grad"))
  @staticmethod
  def uniform(*shape, low=0.0, high=1.0, **kw) -> Tensor:
    """Uniform random numbers in [low, high).

    >>> x = Tensor.uniform(2, 3, low=-1.0, high=1.0)
    >>> x.shape, ((x >= -1) & (x < 1)).all().item()
    ((2, 3), True)
    """
    dt = _to_dtype(kw.pop("dtype", None)) or dtypes.default_float
    rg = kw.pop("requires_grad", None)
    return ((high - low) * Tensor.rand(*shape, **kw) + low).cast(dt).requires_grad_(rg)
  @staticmethod
  def normal(*shape, mean=0.0, std=1.0, **kw) -> Tensor:
    """Normal random numbers with the given mean and standard deviation.

    >>> Tensor.normal(2, 3, mean=1.0, std=0.5).shape
    (2, 3)
    """
    rg = kw.pop("requires_grad", None)
    return (std * Tensor.randn(*shape, **kw) + mean).requires_grad_(rg)
  @staticmethod
  def scaled_uniform(*shape, **kw) -> Tensor:
    """Uniform in [-1, 1) scaled by 1/sqrt(numel), an initializer.

    >>> Tensor.scaled_uniform(4, 4).abs().max().item() <= 0.25
    True
    """
    return Tensor.uniform(*shape, low=-1.0, high=1.0, **kw).mul(prod(argfix(*shape)) ** -0.5)
  @staticmethod
  def glorot_uniform(*shape, **kw) -> Tensor:
    """Glorot (Xavier) uniform initializer: U(-b, b) with b = sqrt(6 / (shape[0] + prod(shape[1:]))).

    >>> Tensor.glorot_uniform(3, 5).shape
    (3, 5)
    """
    shape = argfix(*shape)
    return Tensor.uniform(*shape, low=-1.0, high=1.0, **kw).mul((6 / (shape[0] + prod(shape[1:]))) ** 0.5)
  @staticmethod
  def kaiming_uniform(*shape, a: float = 0.01, **kw) -> Tensor:
    """Kaiming (He) uniform initializer: U(-b, b), b = sqrt(3) * sqrt(2 / (1 + a**2)) / sqrt(prod(shape[1:])).

    >>> Tensor.kaiming_uniform(3, 5).shape
    (3, 5)
    """
    shape = argfix(*shape)
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
    return Tensor.uniform(*shape, low=-bound, high=bound, **kw)
  @staticmethod
  def kaiming_normal(*shape, a: float = 0.01, **kw) -> Tensor:
    """Kaiming (He) normal initializer: N(0, std**2), std = sqrt(2 / (1 + a**2)) / sqrt(prod(shape[1:])).

    >>> Tensor.kaiming_normal(3, 5).shape
    (3, 5)
    """
    shape = argfix(*shape)
    std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
    return Tensor.normal(*shape, mean=0.0, std=std, **kw)
