"""Tensor: a lazy n-dimensional array with autograd, following tinygrad's Tensor API.

Ops only record a graph; `.realize()`, `.numpy()`, `.tolist()` or `.item()` compile and run the kernels.

>>> from frontend import Tensor
>>> a = Tensor([[1.0, 2.0], [3.0, 4.0]])
>>> (a @ a).tolist()
[[7.0, 10.0], [15.0, 22.0]]
>>> a.sum(axis=1).numpy().tolist()
[3.0, 7.0]
"""
from __future__ import annotations
import math, itertools, functools, weakref
from contextlib import ContextDecorator, contextmanager
from typing import Any, ClassVar
import numpy as np
from compiler.dtypes import DType, dtypes, least_upper_dtype, sum_acc_dtype, to_np, DTYPES_BY_NAME
from compiler.lazy import LazyBuffer, buffer_viewed
from compiler.uop import UOp, Ops
from compiler.view import prod, ShapeTracker
from compiler.sint import any_sym, sval, binds_of, smin, smax2
from hcqrt.device import Device
from frontend import engine, function as F
from frontend import multi
from frontend.capture import capturing
from frontend.multi import MultiLazyBuffer
from frontend.nn_ops import NNOpsMixin
from frontend.tensor_extra import ExtraOpsMixin

def argfix(*x):
  if x and x[0].__class__ in (tuple, list):
    if len(x) != 1: raise ValueError(f"bad arg {x}")
    return tuple(x[0])
  return x

def shape_arg(*shape, op: str) -> tuple:
  """argfix(*shape), refusing a negative size by name (torch and tinygrad: ValueError)."""
  shape = argfix(*shape)
  if any(isinstance(s, int) and s < 0 for s in shape): raise ValueError(f"{op}: negative dimension in shape {shape}")
  return shape

def make_tuple(x, n: int) -> tuple: return (x,) * n if isinstance(x, int) else tuple(x)

# random bits per uniform draw: the significand's precision (dtypes not listed take float32's 24)
_RAND_BITS = {dtypes.float16: 11, dtypes.bfloat16: 8}

class UnknownDTypeError(TypeError, AttributeError):
  """An unknown dtype name or object. Both a TypeError (torch: a bad dtype argument) and an AttributeError (tinygrad
  looks a name up on `dtypes`), as numpy's AxisError is both a ValueError and an IndexError: either `except` works."""

def _to_dtype(d, op: str = "dtype") -> DType:
  """d as a DType (None stays None): a DType, one of DTYPES_BY_NAME's names, or a numpy dtype. op names the caller
  in the error."""
  if d is None or isinstance(d, DType): return d
  if isinstance(d, str) and d in DTYPES_BY_NAME: return DTYPES_BY_NAME[d]
  if not isinstance(d, str):
    try: return dtypes.from_np(d)
    except TypeError: pass
  raise UnknownDTypeError(f"{op}: unknown dtype {d!r}; use a DType (dtypes.float32), a numpy dtype or one of the names "
                  f"{', '.join(sorted(DTYPES_BY_NAME))}")

class _Train(ContextDecorator):
  def __init__(self, mode: bool): self.mode = mode
  def __enter__(self): self.prev, Tensor.training = Tensor.training, self.mode
  def __exit__(self, *exc): Tensor.training = self.prev

class Tensor(NNOpsMixin, ExtraOpsMixin):
  """A lazy tensor. `Tensor(data, device=None, dtype=None, requires_grad=None)`; data may be a Python scalar,
  a (nested) list, a numpy array or bytes.

  >>> Tensor([1, 2, 3]).dtype, Tensor([1.0]).dtype, Tensor(True).dtype
  (dtypes.int, dtypes.float, dtypes.bool)
  """
  __slots__ = ("__weakref__", "_ctx", "grad", "lazydata", "requires_grad")
  __deletable__ = ("_ctx",)
  training: bool = False
  no_grad: bool = False

  def __new__(cls, *args, **kwargs):
    # every tensor is noted (weakly) in _live, however it is made: an optimizer step's schedule must know which lazy
    # results the program still holds (live_lazydata)
    t = object.__new__(cls)
    _live.append(_weak(t))
    if len(_live) > _live_sweep_at: _sweep_live()
    return t

  def __init__(self, data: Any, device: str | tuple[str, ...] | None = None, dtype: DType | str | None = None, requires_grad: bool | None = None):
    dtype = _to_dtype(dtype)
    if isinstance(data, MultiLazyBuffer) or isinstance(device, (tuple, list)):   # on several devices (frontend/multi.py)
      _init_multi(self, data, device, dtype, requires_grad)
      return
    if (dtype in dtypes.fp8s or dtype is dtypes.bfloat16) and not isinstance(data, (LazyBuffer, bytes, bytearray, memoryview)) and data is not None:
      # numpy has no fp8 or bfloat16: the values become float32 and are rounded by a kernel (the cast; compiler/fp8.py)
      data = Tensor(data, device, dtypes.float32).cast(dtype).lazydata
    # a LazyBuffer already lives somewhere: stay there unless a device is asked for
    device = data.device if isinstance(data, LazyBuffer) and device is None else Device.canonicalize(device)
    self.grad: Tensor | None = None
    self.requires_grad: bool | None = requires_grad
    self._ctx: F.Function | None = None
    if isinstance(data, LazyBuffer): lb = data if dtype is None or dtype == data.dtype else data.cast(dtype)
    elif isinstance(data, (bool, int, float)) and not isinstance(data, np.generic):
      dt = dtype or dtypes.from_py(data)
      lb = LazyBuffer.const(data, dt, (), device)
    elif isinstance(data, (list, tuple)):
      dt = dtype or dtypes.from_py(data)
      try: arr = np.array(data, dtype=to_np(dt))
      except OverflowError:   # an int out of dt's range wraps around, as numpy's astype and C casts do
        arr = np.array(_map_nested(data, lambda v: dtypes.as_const(v, dt)), dtype=to_np(dt))
      except ValueError as e: raise ValueError(f"Tensor: ragged or non-numeric list: {e}") from None
      lb = _from_numpy(arr, device)
    elif isinstance(data, np.ndarray) or isinstance(data, np.generic):
      arr = _canonical(np.asarray(data))
      if arr.dtype.type not in (np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
                                np.float16, np.float32, np.float64): raise TypeError(f"Tensor: unsupported numpy dtype {arr.dtype}")
      if dtype is not None: arr = arr.astype(to_np(dtype))
      lb = _from_numpy(arr, device)
    elif isinstance(data, (bytes, bytearray, memoryview)):
      lb = _from_numpy(np.frombuffer(bytes(data), dtype=to_np(dtype or dtypes.uint8)), device)
    elif isinstance(data, UOp):   # a bound Variable (or an integer expression of them): a 0-d tensor of its value
      try: ok = data.dtype.is_int and bool(binds_of(data)) and isinstance(sval(data), int)
      except ValueError: ok = False
      if not ok: raise TypeError(f"Tensor: {data!r} must be an integer expression of bound Variables (Variable(...).bind(value))")
      lb = LazyBuffer.const(data, dtype or dtypes.default_int, (), device)
    elif data is None: lb = LazyBuffer.empty((0,), dtype or dtypes.default_float, device)
    else: raise TypeError(f"Tensor: can't make a tensor from {type(data).__name__}")
    if lb.device != device: lb = lb.copy_to_device(device)
    self.lazydata: LazyBuffer = lb

  def __repr__(self) -> str:
    return f"<Tensor {self.shape} {self.dtype} on {self.device}{' realized' if self.lazydata.realized else ''}{' grad' if self.requires_grad else ''}>"
  __hash__ = object.__hash__   # (by identity, as id(self) would be, without a Python call: autograd's walks hash every tensor)
  def __bool__(self): raise TypeError("the truth value of a Tensor is ambiguous; use .item() or .numpy()")
  def __len__(self):
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]

  @property
  def shape(self) -> tuple[int, ...]:
    """The size of each dim, as a tuple of ints.

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).shape
    (2, 3)
    """
    return self.lazydata.shape
  @property
  def dtype(self) -> DType:
    """The element type, a DType.

    >>> Tensor([1, 2]).dtype, Tensor([1.5]).dtype, Tensor([1], dtype='uint8').dtype
    (dtypes.int, dtypes.float, dtypes.uchar)
    """
    return self.lazydata.dtype
  @property
  def device(self) -> str:
    """The canonical name of the device the data lives on, such as 'CPU' or 'NV'.

    >>> Tensor([1, 2], device='CPU').device
    'CPU'
    """
    return self.lazydata.device
  @property
  def ndim(self) -> int:
    """The number of dims (0 for a scalar).

    >>> Tensor(1.0).ndim, Tensor([[1, 2]]).ndim
    (0, 2)
    """
    return len(self.lazydata.shape)
  def numel(self) -> int:
    """The number of elements (the product of the shape).

    >>> Tensor.zeros(2, 3).numel()
    6
    """
    return prod(self.shape)
  def element_size(self) -> int:
    """The size of one element in bytes.

    >>> Tensor([1.0]).element_size(), Tensor([1], dtype=dtypes.int64).element_size()
    (4, 8)
    """
    return self.dtype.itemsize
  def nbytes(self) -> int:
    """The size of the data in bytes (`numel() * element_size()`).

    >>> Tensor.zeros(2, 3).nbytes()
    24
    """
    return self.numel() * self.element_size()
  def is_floating_point(self) -> bool:
    """Whether the dtype is a floating-point type.

    >>> Tensor([1.0]).is_floating_point(), Tensor([1]).is_floating_point()
    (True, False)
    """
    return self.dtype.is_float
  def size(self, dim: int | None = None):
    """The shape, or the size of dim `dim` (negative dims count from the end).

    >>> t = Tensor.zeros(2, 3)
    >>> t.size(), t.size(-1)
    ((2, 3), 3)
    """
    return self.shape if dim is None else self.shape[self._axis(dim)]
  @property
  def T(self) -> Tensor:
    """The transpose (dims 1 and 0 swapped), like `transpose()`.

    >>> Tensor([[1, 2], [3, 4]]).T.tolist()
    [[1, 3], [2, 4]]
    """
    return self.transpose()

  # ***** realization *****
  def schedule(self, *others: Tensor):
    """The list of ScheduleItems (kernels) that would compute this tensor and `others`; runs nothing.

    >>> len((Tensor([1.0, 2.0]) + 1).schedule())
    1
    """
    from compiler.schedule import create_schedule
    return create_schedule(multi.lazy_buffers([t.lazydata for t in (self,) + others]), live_lazydata)
  def realize(self, *others: Tensor) -> Tensor:
    """Run the kernels that compute this tensor (and `others`) now."""
    engine.realize(multi.lazy_buffers([t.lazydata for t in (self,) + others]), live_lazydata)
    return self
  def _host_array(self) -> np.ndarray:
    if self.dtype is dtypes.bfloat16 or self.dtype in dtypes.fp8s: return self.cast(dtypes.float32)._host_array()
    if isinstance(self.lazydata, MultiLazyBuffer): return self.to(self.device[0])._host_array()   # the shards, concatenated
    lb = self.lazydata
    if lb.is_view and lb.st.contiguous and lb.base.size == lb.size:   # a reshape of its base: read the base as is
      Tensor(lb.base).realize()
      return engine.to_host(lb.base, to_np(self.dtype)).reshape(tuple(map(sval, self.shape)))
    t = self.contiguous() if lb.is_view or not lb.realized else self
    t.realize()
    return engine.to_host(t.lazydata, to_np(self.dtype)).reshape(tuple(map(sval, self.shape)))
  def numpy(self) -> np.ndarray:
    """A numpy copy of the data (dtype matching the tensor's)."""
    if 0 in self.shape or 0 in map(sval, self.shape): return np.zeros(tuple(map(sval, self.shape)), dtype=to_np(self.dtype))
    return self._host_array().copy()
  def tolist(self):
    """The data as a (nested) Python list; runs the kernels that compute it.

    >>> (Tensor([[1, 2], [3, 4]]) * 2).tolist()
    [[2, 4], [6, 8]]
    """
    return self.numpy().tolist()
  def item(self):
    """The only element as a Python scalar; raises ValueError when the tensor has more than one element.

    >>> Tensor([[1.5]]).item(), Tensor([1, 2]).sum().item()
    (1.5, 3)
    """
    if self.numel() != 1: raise ValueError(f"item(): the tensor has {self.numel()} elements, not 1 (shape {self.shape})")
    return self.numpy().reshape(()).item()
  def data(self) -> memoryview:
    """A memoryview of a host copy of the data (numpy's buffer).

    >>> Tensor([1, 2]).data().tolist()
    [1, 2]
    """
    return memoryview(self.numpy())
  def __array__(self, dtype=None, copy=None): return self.numpy() if dtype is None else self.numpy().astype(dtype)

  def detach(self) -> Tensor:
    """A tensor with the same data that is cut off the autograd graph (requires_grad=False).

    >>> Tensor([1.0], requires_grad=True).detach().requires_grad
    False
    """
    return _wrap(self.lazydata, False)   # (what Tensor(self.lazydata, requires_grad=False) makes, without its checks)
  def clone(self) -> Tensor:
    """A copy in a buffer of its own (writes to either don't reach the other); gradients flow through it as in torch,
    and a `.grad` already there is cloned too (tinygrad).

    >>> a = Tensor([1.0, 2.0], requires_grad=True)
    >>> _ = (a * 3).sum().backward()
    >>> a.clone().grad.tolist()
    [3.0, 3.0]
    """
    ret = F.Clone.apply(self)
    if self.grad is not None: ret.grad = self.grad.clone()
    return ret
  def to(self, device: str | tuple[str, ...] | None) -> Tensor:
    """This tensor on `device` (None: the default device): a copy, or self when it is already there. The
    gradient moves too. A tuple of devices replicates it on each (`shard(devices)`); a sharded tensor sent to one
    device is its shards concatenated there.

    >>> Tensor([1, 2]).to('CPU').device
    'CPU'
    >>> Tensor([1, 2]).to(('CPU:1', 'CPU:2')).device
    ('CPU:1', 'CPU:2')
    """
    device = multi.canonical(device)
    if device == self.device: return self
    if isinstance(device, tuple):
      if isinstance(self.lazydata, MultiLazyBuffer): raise RuntimeError(f"to: the tensor is already on {self.device}; move it to one device first")
      return self.shard(device)
    ret = Tensor(self.lazydata.copy_to_device(device), requires_grad=self.requires_grad)
    if self.grad is not None: ret.grad = self.grad.to(device)
    return ret
  def to_(self, device: str | None) -> Tensor:
    """Move this tensor (and its gradient) to `device` in place; returns self.

    >>> Tensor([1, 2]).to_('CPU').device
    'CPU'
    """
    device = multi.canonical(device)
    if isinstance(device, tuple): return self.shard_(device)
    if device != self.device:
      self.lazydata = self.lazydata.copy_to_device(device)
      if self.grad is not None: self.grad.to_(device)
    return self
  def shard(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Tensor:
    """This tensor on several devices: split evenly along `axis` (device i holds the i-th piece), or, with axis None,
    a whole copy on each. One device is `to(device)`. The pieces travel through the host for now (issue 26 stage 1).

    >>> t = Tensor([[1, 2], [3, 4]]).shard(('CPU:1', 'CPU:2'), axis=0)
    >>> t.device, t.shape, [lb.shape for lb in t.lazydata.lbs]
    (('CPU:1', 'CPU:2'), (2, 2), [(1, 2), (1, 2)])
    """
    if isinstance(self.lazydata, MultiLazyBuffer): raise RuntimeError(f"shard: the tensor is already on {self.device}; move it to one device first")
    devices = multi.canonical(tuple(devices) if isinstance(devices, (tuple, list)) else (devices,))
    if len(devices) == 1: return self.to(devices[0])
    if axis is not None: axis = self._axis(axis)
    return Tensor(MultiLazyBuffer.from_sharded(self.lazydata, devices, axis), requires_grad=self.requires_grad)
  def shard_(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Tensor:
    """`shard` in place: this tensor now lives on `devices`; returns self.

    >>> Tensor([1, 2, 3, 4]).shard_(('CPU:1', 'CPU:2'), axis=0).device
    ('CPU:1', 'CPU:2')
    """
    self.lazydata = self.shard(devices, axis).lazydata
    return self
  def assign(self, x) -> Tensor:
    """Write x into this tensor's storage (in place on the device); returns self."""
    if not isinstance(x, Tensor): x = Tensor(x, device=self.device, dtype=self.dtype)
    if x.shape != self.shape: raise ValueError(f"assign: shape {x.shape} does not match {self.shape}")
    if x.device != self.device: raise ValueError(f"assign: device {x.device} does not match {self.device}")
    if x.dtype != self.dtype: raise ValueError(f"assign: dtype {x.dtype} does not match {self.dtype}")
    if self.lazydata is x.lazydata: return self
    if isinstance(self.lazydata, MultiLazyBuffer): return _assign_multi(self, x)
    # a view of a realized buffer that picks each element once (shrink, permute, reshape): written in place now, so
    # every tensor over that buffer (the KV cache a `cache.shrink(...).assign(kv)` updates) sees the new values
    lb = self.lazydata
    if lb.is_view and (lb.base.buffer is not None or _pending_assign(lb.base)) and _writable_view(lb.st):
      if lb.base.buffer is None: engine.realize([lb.base], live_lazydata)   # an earlier write into the whole buffer goes first
      value = x.lazydata
      if _reads_at_other_position(value, lb.base): value = value.contiguous() if value.is_view else _force(value)
      engine.realize([lb.base.assign(value, lb.st)], live_lazydata)
      return self
    # nothing to write into yet: just take the value (a pending assign is a buffer: this write follows it)
    if (not self.lazydata.realized or self.lazydata.is_view) and not _pending_assign(self.lazydata):
      self.lazydata = x.lazydata
      return self
    value = x.lazydata
    if _reads_at_other_position(value, self.lazydata.base): value = value.contiguous() if value.is_view else _force(value)
    self.lazydata = self.lazydata.base.assign(value)
    _pending_assigns[id(self)] = self
    return self
  def _inplace(self, v: Tensor) -> Tensor:
    # `x += y`: write into x's buffer when it has one (also one a pending assign will fill), else just rebind
    return self.assign(v) if self.lazydata.realized or _pending_assign(self.lazydata) else self.replace(v)
  def replace(self, x: Tensor, allow_shape_mismatch: bool = False) -> Tensor:
    """Make this tensor refer to x's data (no copy, no kernel); returns self. Raises ValueError if the
    shapes differ.

    >>> Tensor([1, 2]).replace(Tensor([3, 4])).tolist()
    [3, 4]
    """
    if x.shape != self.shape and not allow_shape_mismatch: raise ValueError(f"replace: shape {x.shape} does not match {self.shape}")
    self.lazydata = x.lazydata
    return self
  def contiguous(self) -> Tensor:
    """The same values laid out densely in row-major order (a copy kernel when self is a view).

    >>> Tensor([[1, 2], [3, 4]]).T.contiguous().tolist()
    [[1, 3], [2, 4]]
    """
    return F.Contiguous.apply(self) if self.requires_grad and not Tensor.no_grad else _wrap(self.lazydata.contiguous(), self.requires_grad)
  def contiguous_backward(self) -> Tensor:
    """The identity in the forward pass; makes the incoming gradient contiguous in the backward pass."""
    return F.ContiguousBackward.apply(self)

  # ***** creation *****
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
  def full_like(self, fill_value, **kw) -> Tensor:
    """A tensor with self's shape, dtype and device (each may be overridden), filled with `fill_value`.

    >>> Tensor([[1, 2]]).full_like(5).tolist()
    [[5, 5]]
    """
    return Tensor.full(self.shape, fill_value, dtype=kw.pop("dtype", self.dtype), device=kw.pop("device", self.device), **kw)
  def zeros_like(self, **kw) -> Tensor:
    """Zeros with self's shape, dtype and device.

    >>> Tensor([1.0, 2.0]).zeros_like().tolist()
    [0.0, 0.0]
    """
    return self.full_like(0, **kw)
  def empty_like(self, **kw) -> Tensor:
    """An uninitialized tensor of self's shape (and dtype/device unless given)."""
    return Tensor.empty(self.shape, dtype=kw.pop("dtype", self.dtype), device=kw.pop("device", self.device), **kw)
  def const_like(self, b) -> Tensor:
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
  def ones_like(self, **kw) -> Tensor:
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
  def requires_grad_(self, requires_grad: bool | None = True) -> Tensor:
    """Set `requires_grad` in place and return self.

    >>> Tensor([1.0]).requires_grad_().requires_grad
    True
    """
    self.requires_grad = requires_grad
    return self

  # ***** random numbers: a counter-based hash run as a kernel on the device *****
  _seed: int = 0
  _rng_counter: ClassVar[dict] = {}
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
  def rand_like(self, **kw) -> Tensor:
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
  def randn_like(self, **kw) -> Tensor:
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

  # ***** autograd *****
  def _deepwalk(self, stop: tuple = ()):
    out, seen = [], set(stop)   # (a stop tensor is a leaf here: its own history is not walked)
    for t in stop:
      if t is not self and t.requires_grad: out.append(t)
    stack = [(self, False)]
    while stack:
      node, done = stack.pop()
      if done: out.append(node); continue
      if node in seen: continue
      seen.add(node)
      stack.append((node, True))
      if node._ctx is not None:
        for p in node._ctx.parents:
          if p not in seen and p.requires_grad: stack.append((p, False))
    return out
  def backward(self, gradient: Tensor | None = None, retain_graph: bool = False, create_graph: bool = False) -> Tensor:
    """Accumulate d(self)/d(leaf) into `.grad` of every leaf that requires grad. `create_graph`: the gradients are
    differentiable Tensors (second-order gradients); it keeps the graph (retain_graph) as torch does.

    >>> x = Tensor([3.0], requires_grad=True)
    >>> _ = (x * x * x).sum().backward(create_graph=True)
    >>> x.grad.tolist(), x.grad.sum().gradient(x)[0].tolist()
    ([27.0], [18.0])
    """
    grads = self._backprop(gradient, retain_graph or create_graph, create_graph)
    for t, g in grads.items():   # (an intermediate keeps this pass's gradient; a leaf adds it to what it had)
      t.grad = g if t.grad is None or t._ctx is not None else t.grad + g
    return self
  def _backprop(self, gradient: Tensor | None, retain_graph: bool, create_graph: bool, stop: tuple = ()) -> dict[Tensor, Tensor]:
    """d(self)/d(t) for every t in self's graph that requires grad (a dict in walk order); touches no `.grad`. The
    tensors in `stop` are taken as leaves (a sub-graph's backward: what flows into them is not passed on)."""
    if gradient is None:
      if self.shape != (): raise RuntimeError(f"backward: only scalar outputs get an implicit gradient, this is {self.shape}")
      gradient = Tensor(1.0, dtype=self.dtype, device=self.device, requires_grad=False)
    if gradient.shape != self.shape: raise ValueError(f"backward: gradient shape {gradient.shape} != tensor shape {self.shape}")
    if self._ctx is None and not self.requires_grad:
      raise RuntimeError(f"backward: {self} does not require grad: no input of it has requires_grad=True (a tensor made "
                         "with the default requires_grad=None records no autograd graph)")
    if isinstance(self._ctx, F.FreedGraph): self._ctx.backward(gradient)   # raises: the graph was used up
    walk, dev, grads = self._deepwalk(stop), self.device, {self: gradient}
    for t0 in reversed(walk):
      if t0._ctx is None or (g0 := grads.get(t0)) is None or (stop and any(t0 is t for t in stop)): continue   # (no gradient: e.g. the condition of a where())
      if isinstance(t0._ctx, F.FreedGraph):
        # a realized one is a parameter made as `Tensor.zeros(n, requires_grad=True).contiguous().realize()`: a leaf now
        if not t0.lazydata.realized: t0._ctx.backward(g0)
        continue
      if create_graph:
        from frontend.grad_graph import backward_graph
        pgs = [g if g is None or g.device == dev else g.to(dev) for g in backward_graph(t0._ctx, t0, g0)]
      else:
        pgs = t0._ctx.backward(g0.lazydata)
        pgs = [(_wrap(g) if g.device == dev else Tensor(g, device=dev, requires_grad=False)) if g is not None else None
               for g in ([pgs] if len(t0._ctx.parents) == 1 else pgs)]
      for t, g in zip(t0._ctx.parents, pgs):
        if g is not None and t.requires_grad:
          if g.lazydata.shape != t.lazydata.shape: raise RuntimeError(f"backward: gradient shape {g.shape} != {t.shape} in {type(t0._ctx).__name__}")
          grads[t] = g if t not in grads else grads[t] + g
      if not retain_graph: t0._ctx = F.freed_graph(type(t0._ctx).__name__)
    return grads
  def gradient(self, *targets: Tensor, gradient: Tensor | None = None, materialize_grads: bool = False) -> list[Tensor]:
    """d(self)/d(target) for each target, without touching `.grad`. A target self doesn't depend on is an error
    (tinygrad), or zeros with materialize_grads=True. The gradients are differentiable (as tinygrad's): a gradient
    of a gradient is a second-order one.

    >>> x = Tensor([2.0], requires_grad=True)
    >>> (dx,) = x.sin().sum().gradient(x)
    >>> round(dx.item(), 4), round(dx.sum().gradient(x)[0].item(), 4)   # cos(2), -sin(2)
    (-0.4161, -0.9093)
    """
    grads = self._backprop(gradient, True, True)
    for t in targets:
      if t not in grads and not materialize_grads:
        raise RuntimeError(f"gradient: the target {t} is not in the graph of {self} (materialize_grads=True gives zeros)")
    return [grads[t] if t in grads else t.zeros_like() for t in targets]

  # ***** movement ops *****
  def _axis(self, a: int, n: int | None = None, op: str | None = None) -> int:
    if n is None: n = len(self.lazydata.shape)   # (self.ndim)
    if not -(m := n if n > 1 else 1) <= a < m:   # (a 0-d tensor takes axis 0 or -1)
      raise IndexError(f"{op + ': ' if op else ''}dimension {a} is out of range for a tensor of {n} dims (shape {self.shape})")
    return a + n if a < 0 else a
  def reshape(self, *shape) -> Tensor:
    """The same data with a new shape of the same element count; one dim may be -1 (inferred) and None
    keeps that dim.

    >>> Tensor.arange(6).reshape(2, 3).tolist(), Tensor.arange(6).reshape(-1, 2).shape
    ([[0, 1, 2], [3, 4, 5]], (3, 2))
    """
    sh = self.lazydata.shape   # (a 0-d tensor's shape () as reshape(): einsum('->', x))
    asked = tuple([sh[i] if s is None else s for i, s in enumerate(argfix(*shape))])
    # (what the checks below come to, symbolic or not: a shape has no -1 and its own size)
    if asked == sh: return self
    if asked.count(-1) > 1: raise RuntimeError(f"reshape: only one dimension can be inferred (-1), got {asked}")
    if any_sym(asked) or any_sym(sh): return self._reshape_sym(asked, argfix(*shape))
    if -1 in asked:
      known = math.prod([s for s in asked if s != -1])
      # with 0 elements, -1 could be any size (torch refuses the same way)
      if known == 0: raise RuntimeError(f"reshape: can't infer the -1 in {asked} for {self.shape}: any size would fit 0 elements")
      n = math.prod(sh) // known
      asked = tuple([n if s == -1 else s for s in asked])
    new = asked
    if (new and min(new) < 0) or math.prod(new) != math.prod(sh): raise ValueError(f"reshape: can't reshape {sh} to {argfix(*shape)}")
    if new == sh: return self
    # (a movement op with no gradient to record (self needs none, or no_grad) makes no autograd node: Function.apply would
    # give the same view under the same requires_grad, after building a context nothing reads; likewise below)
    return F.Reshape.apply(self, shape=new) if self.requires_grad and not Tensor.no_grad else _wrap(self.lazydata.reshape(new), self.requires_grad)
  def _reshape_sym(self, asked: tuple, orig) -> Tensor:
    # symbolic dims (bound Variables): the -1 is inferred from the concrete dims once the symbolic ones that appear on
    # both sides are set aside; a Variable of the old shape must stay in the new one (dropping it would bake its value
    # into the graph, and a TinyJit replay for another value would compute the old shape)
    if -1 in asked:
      rest_old = [s for s in self.shape if not any(s is a for a in asked)]
      rest_new = [s for s in asked if s != -1 and not any(s is o for o in self.shape)]
      if not any_sym(rest_old) and not any_sym(rest_new) and prod(rest_new) != 0: n = prod(rest_old) // prod(rest_new)
      elif not any_sym(self.shape) and sval(prod(s for s in asked if s != -1)) != 0:   # concrete data: its bound size
        n = prod(self.shape) // sval(prod(s for s in asked if s != -1))
      elif isinstance(known := prod(s for s in asked if s != -1), int) and known > 0 and \
           (q := prod(self.shape) // known) * known is prod(self.shape):   # the element count divides exactly for every value
        n = q
      else: raise RuntimeError(f"reshape: can't infer the -1 in {asked} for symbolic shape {self.shape}")
      asked = tuple(n if s == -1 else s for s in asked)
    if any(isinstance(s, int) and s < 0 for s in asked) or sval(prod(asked)) != sval(prod(self.shape)):
      raise ValueError(f"reshape: can't reshape {self.shape} to {orig}")
    if not set(binds_of(prod(self.shape))) <= set(binds_of(prod(asked))):
      raise ValueError(f"reshape: {self.shape} to {orig} drops a symbolic dim; keep the bound Variable in the shape")
    if asked == self.shape: return self
    return F.Reshape.apply(self, shape=asked) if self.requires_grad and not Tensor.no_grad else _wrap(self.lazydata.reshape(asked), self.requires_grad)
  def view(self, *shape) -> Tensor:
    """The same as `reshape`.

    >>> Tensor.arange(6).view(3, 2).shape
    (3, 2)
    """
    return self.reshape(*shape)
  def expand(self, shape, *args) -> Tensor:
    """Broadcast size-1 dims to `shape` without copying (-1 keeps a dim; new leading dims may be added).

    >>> Tensor([[1], [2]]).expand(2, 3).tolist()
    [[1, 1, 1], [2, 2, 2]]
    """
    new = argfix(shape, *args)
    if len(new) < self.ndim: raise ValueError(f"expand: {self.shape} to {new} has fewer dims")
    base = (1,) * (len(new) - self.ndim) + self.shape
    new = tuple(b if s == -1 else s for b, s in zip(base, new))
    for b, s in zip(base, new):
      if b != s and b != 1: raise ValueError(f"expand: can't expand {self.shape} to {new}")
    x = self.reshape(base) if base != self.shape else self
    if new == x.shape: return x
    return F.Expand.apply(x, shape=new) if x.requires_grad and not Tensor.no_grad else _wrap(x.lazydata.expand(new), x.requires_grad)
  def permute(self, *order) -> Tensor:
    """Reorder the dims: dim i of the result is dim order[i] of self.

    >>> Tensor.zeros(1, 2, 3).permute(2, 0, 1).shape
    (3, 1, 2)
    """
    order, n = argfix(*order), len(self.lazydata.shape)
    # (already a permutation of 0..n-1, the common case: nothing for _axis to resolve or refuse)
    if sorted(order) != (rng := list(range(n))):
      order = tuple(self._axis(a, op="permute") for a in order)   # (a 0-d tensor: permute())
      if sorted(order) != rng: raise RuntimeError(f"permute: {order} is not a permutation of {n} dims (shape {self.shape})")
    order = tuple(order)
    if order == tuple(rng): return self
    return F.Permute.apply(self, order=order) if self.requires_grad and not Tensor.no_grad else _wrap(self.lazydata.permute(order), self.requires_grad)
  def flip(self, axis, *args) -> Tensor:
    """Reverse the order of the elements along the given axes.

    >>> Tensor([[1, 2], [3, 4]]).flip(0).tolist()
    [[3, 4], [1, 2]]
    """
    axes = tuple(self._axis(a, op="flip") for a in argfix(axis, *args))
    if len(set(axes)) != len(axes): raise RuntimeError(f"flip: repeated axis in {axes}")
    if not axes: return self
    return F.Flip.apply(self, axis=axes) if self.requires_grad and not Tensor.no_grad else _wrap(self.lazydata.flip(axes), self.requires_grad)
  def shrink(self, arg) -> Tensor:
    """Keep [start, end) of each dim, given as one (start, end) pair per dim (None keeps the whole dim).

    >>> Tensor.arange(9).reshape(3, 3).shrink(((0, 2), (1, 3))).tolist()
    [[1, 2], [4, 5]]
    """
    sh = self.lazydata.shape
    arg = tuple([(0, s) if a is None else tuple(a) for a, s in zip(arg, sh)])
    for (lo, hi), s in zip(arg, sh):
      # (sval, skipped for plain ints)
      if lo.__class__ is not int or hi.__class__ is not int or s.__class__ is not int: lo, hi, s = sval(lo), sval(hi), sval(s)
      if not 0 <= lo <= hi <= s: raise ValueError(f"shrink: {arg} out of range for {sh}")
    if any_sym(sh) or any(lo.__class__ is not int or hi.__class__ is not int for lo, hi in arg):
      # checked above at the bound values; a TinyJit replay for other values checks the same bounds again first
      if (rec := capturing()) is not None: rec.bounds.append((f"shrink {arg} of shape {sh}", arg, sh))
    if arg == tuple([(0, s) for s in sh]): return self
    return F.Shrink.apply(self, arg=arg) if self.requires_grad and not Tensor.no_grad else _wrap(self.lazydata.shrink(arg), self.requires_grad)
  def pad(self, padding, mode: str = "constant", value: float = 0.0) -> Tensor:
    """pad((before, after) per dim) or the torch-style flat (last dim first) form; negative amounts crop.
    mode: 'constant' (value), 'reflect' (mirror without the edge), 'replicate' (repeat the edge), 'circular' (wrap).

    >>> Tensor([1, 2, 3]).pad((2, 1), mode="reflect").tolist()
    [3, 2, 1, 2, 3, 2]
    """
    if mode not in ("constant", "reflect", "replicate", "circular"): raise NotImplementedError(f"pad: mode {mode!r} is not supported")
    if padding and not isinstance(padding[0], (tuple, list)) and padding[0] is not None:
      if len(padding) % 2: raise ValueError(f"pad: flat padding needs pairs, got {padding}")
      flat = list(padding)
      padding = [(0, 0)] * (self.ndim - len(flat) // 2) + [(flat[i], flat[i + 1]) for i in range(len(flat) - 2, -1, -2)]
    padding = tuple((0, 0) if p is None else tuple(p) for p in padding)
    if len(padding) != self.ndim: raise ValueError(f"pad: {len(padding)} pairs for {self.ndim} dims")
    if all(b == 0 and a == 0 for b, a in padding): return self
    if mode != "constant": return self._pad_mode(padding, mode)
    if all(b.__class__ is int and a.__class__ is int and b >= 0 and a >= 0 for b, a in padding): x = self   # (nothing to crop)
    else:
      # negative padding shrinks; a symbolic amount (a bound Variable's expression) must have one sign over its whole
      # range, since the kernel is built for every value in it
      try: neg, pos = [tuple((smin(b, 0), smin(a, 0)) for b, a in padding), tuple((smax2(b, 0), smax2(a, 0)) for b, a in padding)]
      except NotImplementedError:
        raise ValueError(f"pad: {padding} of shape {self.shape}: a symbolic amount must be >= 0 (or <= 0) for every value of its Variables") from None
      x = self.shrink(tuple((-nb, s + na) for (nb, na), s in zip(neg, self.shape)))
      padding = pos
      if all(b == 0 and a == 0 for b, a in padding): return x
    ret = F.Pad.apply(x, arg=padding) if x.requires_grad and not Tensor.no_grad else _wrap(x.lazydata.pad(padding), x.requires_grad)
    if value != 0:
      # the value takes the tensor's dtype (as torch: 3 pads a bool tensor with True), never the other way round
      mask = F.Pad.apply(Tensor.ones(*x.shape, dtype=dtypes.bool, device=x.device), arg=padding)
      ret = mask.where(ret, self._fill_value(value, "pad", ret.shape))
    return ret
  def _pad_mode(self, padding: tuple, mode: str) -> Tensor:
    """reflect / replicate / circular padding per dim, built from slices and cat; negative amounts crop (after the
    padding for reflect/replicate, before it for circular, so the wrap reads the cropped tensor: torch's results)."""
    x = self
    if mode == "circular":
      x = x.shrink(tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(padding, x.shape)))
      padding = tuple((max(b, 0), max(a, 0)) for b, a in padding)
    for d, (b, a) in enumerate(padding):
      pb, pa, n = max(b, 0), max(a, 0), x.shape[d]
      if not pb and not pa: continue
      def sl(lo, hi, step=1): return x[tuple(slice(lo, hi, step) if i == d else slice(None) for i in range(x.ndim))]
      if mode == "reflect":
        if pb >= n or pa >= n: raise ValueError(f"pad: reflect padding ({pb}, {pa}) must be less than the size {n} of dim {d}")
        parts = [sl(pb, 0, -1), x, sl(n - 2, n - 2 - pa if n - 2 - pa >= 0 else None, -1)]
      elif mode == "replicate":
        if n == 0: raise ValueError(f"pad: can't replicate-pad the empty dim {d} of {self.shape}")
        parts = [sl(0, 1).expand(tuple(pb if i == d else s for i, s in enumerate(x.shape))), x,
                 sl(n - 1, n).expand(tuple(pa if i == d else s for i, s in enumerate(x.shape)))]
      else:
        if pb > n or pa > n: raise ValueError(f"pad: circular padding ({pb}, {pa}) wraps around dim {d} of size {n} more than once")
        parts = [sl(n - pb, n), x, sl(0, pa)]
      x = Tensor.cat(*[t for t in parts if t.shape[d] > 0], dim=d)
    crop = tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(padding, x.shape))
    return x.shrink(crop)
  def pad_to(self, shape, *args) -> Tensor:
    """Zero-pad at the end of each dim up to `shape` (None keeps a dim).

    >>> Tensor([1, 2]).pad_to(4).tolist()
    [1, 2, 0, 0]
    """
    new = argfix(shape, *args)
    if len(new) != self.ndim: raise ValueError(f"pad_to: can't pad {self.shape} to {new}: the number of dims differs")
    return self.pad(tuple(None if n is None else (0, n - s) for s, n in zip(self.shape, new)))
  def shrink_to(self, shape, *args) -> Tensor:
    """Keep the first `shape[i]` entries of each dim (None keeps a dim).

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).shrink_to(1, 2).tolist()
    [[1, 2]]
    """
    new = argfix(shape, *args)
    if len(new) != self.ndim: raise ValueError(f"shrink_to: can't shrink {self.shape} to {new}: the number of dims differs")
    return self.shrink(tuple(None if n is None else (0, n) for n in new))
  def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
    """Swap dims dim0 and dim1 (by default 1 and 0).

    >>> Tensor.arange(6).reshape(2, 3).transpose().tolist()
    [[0, 3], [1, 4], [2, 5]]
    >>> Tensor.zeros(1, 2, 3).transpose(0, 2).shape
    (3, 2, 1)
    """
    order = list(range(self.ndim))
    if self.ndim < 2 and (dim0, dim1) == (1, 0): return self
    a, b = self._axis(dim0, op="transpose"), self._axis(dim1, op="transpose")
    order[a], order[b] = order[b], order[a]
    return self.permute(order)
  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dims start_dim..end_dim (all by default) into one.

    >>> Tensor.zeros(2, 3, 4).flatten().shape, Tensor.zeros(2, 3, 4).flatten(1).shape
    ((24,), (2, 12))
    """
    if self.ndim == 0: return self.reshape(1)
    s, e = self._axis(start_dim, op="flatten"), self._axis(end_dim, op="flatten")
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])
  def unflatten(self, dim: int, sizes) -> Tensor:
    """Split dim `dim` into the given sizes.

    >>> Tensor.arange(6).unflatten(0, (2, 3)).tolist()
    [[0, 1, 2], [3, 4, 5]]
    """
    d = self._axis(dim, op="unflatten")
    return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])
  def squeeze(self, dim: int | None = None) -> Tensor:
    """Remove the size-1 dims (only `dim`, and only if its size is 1, when given).

    >>> Tensor.zeros(1, 2, 1).squeeze().shape, Tensor.zeros(1, 2, 1).squeeze(0).shape
    ((2,), (2, 1))
    """
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    d = self._axis(dim, op="squeeze")   # (a 0-d tensor takes dim 0 or -1, as torch)
    if self.ndim == 0: return self
    return self if self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1:])
  def unsqueeze(self, dim: int) -> Tensor:
    """Insert a size-1 dim at position `dim` (negative counts from the end).

    >>> Tensor([1, 2]).unsqueeze(0).shape, Tensor([1, 2]).unsqueeze(-1).shape
    ((1, 2), (2, 1))
    """
    d = self._axis(dim, self.ndim + 1, op="unsqueeze")
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])
  def repeat(self, repeats, *args) -> Tensor:
    """Tile the tensor `repeats[i]` times along dim i (extra leading repeats add dims), like torch.repeat.

    >>> Tensor([1, 2]).repeat(2).tolist()
    [1, 2, 1, 2]
    >>> Tensor([1, 2]).repeat(2, 1).tolist()
    [[1, 2], [1, 2]]
    """
    reps = argfix(repeats, *args)
    if len(reps) < self.ndim: raise ValueError(f"repeat: {len(reps)} repeats for {self.ndim} dims")
    base = (1,) * (len(reps) - self.ndim) + self.shape
    x = self.reshape(base)
    x = x.reshape(tuple(v for s in base for v in (1, s))).expand(tuple(v for r, s in zip(reps, base) for v in (r, s)))
    return x.reshape(tuple(r * s for r, s in zip(reps, base)))
  def repeat_interleave(self, repeats: int, dim: int | None = None) -> Tensor:
    """Repeat each element `repeats` times along `dim` (over the flattened tensor when dim is None).

    >>> Tensor([1, 2]).repeat_interleave(2).tolist()
    [1, 1, 2, 2]
    """
    x, d = (self.flatten(), 0) if dim is None else (self, self._axis(dim))
    shp = x.shape
    return x.reshape(*shp[:d + 1], 1, *shp[d + 1:]).expand(*shp[:d + 1], repeats, *shp[d + 1:]).reshape(*shp[:d], shp[d] * repeats, *shp[d + 1:])
  def cat(self, *args: Tensor, dim: int = 0) -> Tensor:
    """Concatenate self and `args` along `dim`; the dtypes are promoted. Raises ValueError if the other dims differ.

    >>> Tensor([1, 2]).cat(Tensor([3]), Tensor([4, 5])).tolist()
    [1, 2, 3, 4, 5]
    """
    ts = (self,) + args
    d = self._axis(dim, op="cat")
    for t in args:
      if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d):
        raise ValueError(f"cat: shapes {self.shape} and {t.shape} differ outside dim {d}")
    dt = least_upper_dtype(*[t.dtype for t in ts])
    total, off, out = sum(t.shape[d] for t in ts), 0, []
    for t in ts:
      pads = [(0, 0)] * self.ndim
      pads[d] = (off, total - off - t.shape[d])
      out.append(t.cast(dt).pad(pads))
      off += t.shape[d]
    return functools.reduce(Tensor.add, out)
  @staticmethod
  def stack(*args: Tensor, dim: int = 0) -> Tensor:
    """Join tensors of the same shape along a new dim `dim`.

    >>> Tensor.stack(Tensor([1, 2]), Tensor([3, 4])).tolist()
    [[1, 2], [3, 4]]
    >>> Tensor.stack(Tensor([1, 2]), Tensor([3, 4]), dim=1).tolist()
    [[1, 3], [2, 4]]
    """
    ts = argfix(*args)
    first = ts[0]
    d = first._axis(dim, first.ndim + 1, op="stack")
    for t in ts[1:]:
      if t.shape != first.shape: raise ValueError(f"stack: shapes {first.shape} and {t.shape} differ")
    return ts[0].unsqueeze(d).cat(*[t.unsqueeze(d) for t in ts[1:]], dim=d)
  def split(self, sizes, dim: int = 0) -> list[Tensor]:
    """Split along `dim` into pieces of `sizes` elements (an int: equal pieces, the last may be smaller; a
    list: those sizes, which must add up to the dim's size).

    >>> [t.tolist() for t in Tensor.arange(5).split(2)]
    [[0, 1], [2, 3], [4]]
    """
    d = self._axis(dim, op="split")
    if isinstance(sizes, int): sizes = [min(sizes, self.shape[d] - i) for i in range(0, max(1, self.shape[d]), max(1, sizes))]
    if sum(sizes) != self.shape[d]: raise ValueError(f"split: sizes {sizes} don't add up to {self.shape[d]}")
    offs = [0] + list(itertools.accumulate(sizes))
    return [self.shrink(tuple((offs[i], offs[i + 1]) if j == d else None for j in range(self.ndim))) for i in range(len(sizes))]
  def chunk(self, chunks: int, dim: int = 0) -> list[Tensor]:
    """Split along `dim` into at most `chunks` pieces of ceil(size / chunks) elements.

    >>> [t.tolist() for t in Tensor.arange(5).chunk(3)]
    [[0, 1], [2, 3], [4]]
    """
    d = self._axis(dim, op="chunk")
    if self.shape[d] == 0: return [self] * chunks   # torch: `chunks` empty pieces
    return self.split(math.ceil(self.shape[d] / chunks) if self.shape[d] else 1, dim=d)
  def roll(self, shifts, dims=None) -> Tensor:
    """Rotate elements along dims; with dims=None the flattened tensor is rolled, then reshaped back (torch).

    >>> Tensor([[1, 2], [3, 4]]).roll(1).tolist()
    [[4, 1], [2, 3]]
    """
    if dims is None: return self.flatten().roll(shifts, 0).reshape(self.shape)
    shifts, dims = make_tuple(shifts, 1), make_tuple(dims, 1)
    if len(shifts) != len(dims): raise RuntimeError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    x = self
    for s, d in zip(shifts, dims):
      d = self._axis(d)
      n = self.shape[d]
      if n == 0: continue
      s %= n
      if s: x = x.shrink(tuple((n - s, n) if i == d else None for i in range(x.ndim))).cat(x.shrink(tuple((0, n - s) if i == d else None for i in range(x.ndim))), dim=d)
    return x

  # ***** indexing *****
  def __getitem__(self, indices) -> Tensor:
    from frontend.indexing import getitem
    return getitem(self, indices)
  def __setitem__(self, indices, v) -> None:
    from frontend.indexing import setitem
    setitem(self, indices, v)

  # ***** reductions *****
  def _reduce_axes(self, axis, op: str = "reduce") -> tuple[int, ...]:
    if axis is None: return tuple(range(self.ndim))
    if self.ndim == 0:   # a 0-d tensor takes axis 0 or -1 and has nothing to reduce
      for a in make_tuple(axis, 1): self._axis(a, op=op)
      return ()
    return tuple(sorted({self._axis(a, op=op) for a in make_tuple(axis, 1)}))
  def _reduce(self, fn, axis, keepdim: bool) -> Tensor:
    axes = self._reduce_axes(axis, op=fn.__name__.lower())
    if not self.lazydata.shape: return self   # (0-d)
    # an empty axis reduces to the op's identity (0, 1, the dtype's min for max: internal uses only, since the public
    # max/min raise there), kept in the graph
    ret = fn.apply(self, axis=axes) if axes else self
    return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))
  def sum(self, axis=None, keepdim: bool = False, dtype=None, acc_dtype: DType | None = None) -> Tensor:
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
  def prod(self, axis=None, keepdim: bool = False, dtype=None, acc_dtype=None) -> Tensor:
    """The product over `axis` (all axes when None); bools and small ints multiply in 32 bits.

    >>> Tensor([[1, 2], [3, 4]]).prod().item(), Tensor([[1, 2], [3, 4]]).prod(axis=0).tolist()
    (24, [3, 8])
    """
    acc_dtype = _to_dtype(dtype) or _to_dtype(acc_dtype)
    return self.cast(acc_dtype or sum_acc_dtype(self.dtype) if not self.dtype.is_float else self.dtype)._reduce(F.Prod, axis, keepdim)
  def max(self, axis=None, keepdim: bool = False) -> Tensor:
    """The maximum over `axis` (all axes when None). An empty axis has no maximum: that raises, as in numpy and torch.

    >>> Tensor([[1, 5], [3, 4]]).max(axis=0).tolist()
    [3, 5]
    """
    self._nonempty_reduce("max", axis)
    return self._reduce(F.Max, axis, keepdim)
  def min(self, axis=None, keepdim: bool = False) -> Tensor:
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
  def _nonempty_reduce(self, name: str, axis):
    for a in self._reduce_axes(axis, op=name):
      if self.shape[a] == 0:
        raise RuntimeError(f"{name}(): can't reduce over the empty dim {a} of shape {self.shape}: a reduction without identity")
  def any(self, axis=None, keepdim=False) -> Tensor:
    """Whether any element along `axis` (all axes when None) is nonzero, as a bool tensor.

    >>> Tensor([[0, 1], [0, 0]]).any(axis=1).tolist(), Tensor([0, 2]).any().item()
    ([True, False], True)
    """
    return self.bool()._reduce(F.Max, axis, keepdim)   # (over an empty axis: False, the identity of or)
  def all(self, axis=None, keepdim=False) -> Tensor:
    """Whether every element along `axis` (all axes when None) is nonzero, as a bool tensor.

    >>> Tensor([[1, 1], [0, 1]]).all(axis=1).tolist(), Tensor([1, 2]).all().item()
    ([True, False], True)
    """
    return self.logical_not().any(axis, keepdim).logical_not()
  def mean(self, axis=None, keepdim: bool = False) -> Tensor:
    """The mean over `axis` (all axes when None); integer tensors give the default float dtype.

    >>> Tensor([[1, 2], [3, 4]]).mean().item(), Tensor([[1, 2], [3, 4]]).mean(axis=1).tolist()
    (2.5, [1.5, 3.5])
    """
    out_dt = self.dtype if self.dtype.is_float else dtypes.default_float
    n = prod(self.shape[a] for a in self._reduce_axes(axis, op="mean"))
    s = self.cast(out_dt).sum(axis, keepdim, acc_dtype=sum_acc_dtype(out_dt))   # half: the sum stays float32 (no overflow)
    return (s / n if n else s * math.nan).cast(out_dt)
  def var(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
    """The variance over `axis`: sum((x - mean)**2) / (n - correction); nan when n <= correction.

    >>> Tensor([1.0, 2.0, 3.0, 4.0]).var(correction=0).item(), Tensor([[1.0, 3.0], [2.0, 2.0]]).var(axis=1).tolist()
    (1.25, [2.0, 0.0])
    """
    # half squares overflow past |x| ~ 256: compute in float32 and round once at the end (as torch)
    if self.dtype in (dtypes.float16, dtypes.bfloat16): return self.float().var(axis, keepdim, correction).cast(self.dtype)
    n = prod(self.shape[a] for a in self._reduce_axes(axis, op="var"))
    sq = (self - self.mean(axis, keepdim=True)).square().sum(axis, keepdim)
    return sq / (n - correction if isinstance(n, UOp) else float(max(0, n - correction)))
  def std(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
    """The standard deviation over `axis`, `var(...).sqrt()`.

    >>> Tensor([1.0, 3.0, 5.0]).std().item(), Tensor([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).std(correction=0).item()
    (2.0, 2.0)
    """
    if self.dtype in (dtypes.float16, dtypes.bfloat16): return self.float().std(axis, keepdim, correction).cast(self.dtype)
    v = self.var(axis, keepdim, correction)
    z = v == 0   # sqrt's gradient is inf at 0 and would make 0 * inf = NaN: torch defines it as 0 there
    return z.where(0.0, z.where(1.0, v).sqrt())
  def var_mean(self, axis=None, keepdim=False, correction=1):
    """`(var, mean)` over `axis` as a tuple of tensors.

    >>> [t.item() for t in Tensor([1.0, 3.0]).var_mean()]
    [2.0, 2.0]
    """
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)
  def std_mean(self, axis=None, keepdim=False, correction=1):
    """`(std, mean)` over `axis` as a tuple of tensors.

    >>> [t.item() for t in Tensor([1.0, 3.0, 5.0]).std_mean()]
    [2.0, 3.0]
    """
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)
  def _softmax(self, axis, dtype=None):
    x = self.cast(dtype) if dtype is not None else self
    # an empty axis has no max to subtract (and the result is empty anyway)
    m = x - x.max(axis=axis, keepdim=True).detach() if x.numel() else x
    e = m.exp()
    return m, e, e.sum(axis=axis, keepdim=True)
  def softmax(self, axis: int = -1, dtype=None) -> Tensor:
    """exp(x) / sum(exp(x)) along `axis`, computed with the maximum subtracted first; `dtype` casts the input.

    >>> Tensor([0.0, 0.0]).softmax().tolist()
    [0.5, 0.5]
    >>> [round(v, 4) for v in Tensor([1.0, 2.0, 3.0]).softmax().tolist()]
    [0.09, 0.2447, 0.6652]
    """
    _, e, ss = self._softmax(axis, dtype)
    return e.div(ss)
  def log_softmax(self, axis: int = -1, dtype=None) -> Tensor:
    """log(softmax(x)) along `axis`, computed stably.

    >>> [round(v, 4) for v in Tensor([1.0, 2.0, 3.0]).log_softmax().tolist()]
    [-2.4076, -1.4076, -0.4076]
    """
    m, _, ss = self._softmax(axis, dtype)
    return m - ss.log()
  def logsumexp(self, axis=None, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) over `axis`, stable; an all -inf (or any +inf) slice gives -inf (+inf) like torch."""
    x = self._float()
    m = x._reduce(F.Max, axis, True).detach()   # (an empty axis: -inf, and the result is log(0) = -inf, as torch)
    m = m.isinf().where(0.0, m)   # an infinite max is not subtracted: inf - inf would be nan
    ret = (x - m).exp().sum(axis=axis, keepdim=True).log().add(m)
    return ret if keepdim else ret.squeeze_axes(x._reduce_axes(axis))
  def squeeze_axes(self, axes) -> Tensor:
    """Remove the given axes, which must have size 1 (as after a keepdim reduction).

    >>> Tensor.zeros(2, 1, 3).squeeze_axes((1,)).shape
    (2, 3)
    """
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))
  def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
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
  def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """The index of the first minimum along `axis` (of the flattened tensor when None), as int32.

    >>> Tensor([3, 1, 2, 1]).argmin().item(), Tensor([[3, 1], [0, 2]]).argmin(axis=1).tolist()
    (1, [1, 0])
    """
    # (integers through ~x, as min: -x wraps the most negative value to itself)
    return (-self if self.dtype.is_float else self.logical_not() if self.dtype.is_bool else ~self).argmax(axis, keepdim)

  # ***** matmul *****
  def dot(self, w: Tensor, dtype=None) -> Tensor:
    """Matrix product with numpy/torch broadcasting rules (1-D operands included); `dtype` is the accumulation and
    result dtype (tinygrad)."""
    if not isinstance(w, Tensor): w = Tensor(w, device=self.device)
    if self.ndim == 0 or w.ndim == 0: raise RuntimeError(f"dot: both arguments need at least 1 dim, got {self.shape} and {w.shape}")
    k_self, k_w = self.shape[-1], w.shape[-min(w.ndim, 2)]
    if k_self != k_w: raise RuntimeError(f"matmul: shapes {self.shape} and {w.shape} don't match ({k_self} != {k_w})")
    x = self.reshape(*self.shape[:-1], *[1] * min(self.ndim - 1, w.ndim - 1, 1), self.shape[-1])
    wt = w.reshape(*w.shape[:-2], *[1] * min(self.ndim - 1, w.ndim - 1, 1), *w.shape[-min(w.ndim, 2):]).transpose(-1, -min(w.ndim, 2))
    dt = least_upper_dtype(x.dtype, wt.dtype)
    if dtype is not None: return (x.cast(dt) * wt.cast(dt)).sum(-1, dtype=dtype)
    return (x.cast(dt) * wt.cast(dt)).sum(-1, acc_dtype=sum_acc_dtype(dt) if not dt.is_float else None).cast(dt)
  def matmul(self, x: Tensor, reverse: bool = False, dtype=None) -> Tensor:
    """The matrix product `self @ x` (`x @ self` when reverse), with `dot`'s broadcasting rules.

    >>> Tensor([[1, 2], [3, 4]]).matmul(Tensor([[5], [6]])).tolist()
    [[17], [39]]
    >>> (Tensor([[1, 2], [3, 4]]) @ Tensor([1, 1])).tolist()
    [3, 7]
    """
    return x.dot(self, dtype) if reverse else self.dot(x, dtype)
  def linear(self, weight: Tensor, bias: Tensor | None = None, dtype=None) -> Tensor:
    """`self @ weight + bias`, weight shaped (in, out); a 1-D weight scales elementwise instead.

    >>> Tensor([[1, 2], [3, 4]]).linear(Tensor([[1, 0], [0, 1]]), Tensor([10, 20])).tolist()
    [[11, 22], [13, 24]]
    """
    if dtype is not None: return self.cast(dtype).linear(weight.cast(dtype), bias.cast(dtype) if bias is not None else None)
    x = self.mul(weight) if weight.ndim == 1 else self.dot(weight)
    return x.add(bias) if bias is not None else x

  # ***** elementwise *****
  def _fill_value(self, value, op: str, shape: tuple | None = None) -> Tensor:
    """The Python scalar `value` as a constant of self's dtype (wrapping ints, truncating floats, as numpy's astype)
    and self's shape (or `shape`); an infinity or NaN, which no integer holds, is refused."""
    if self.dtype.is_int and not math.isfinite(float(value)):
      raise ValueError(f"{op}: value {value} can't be stored in a {self.dtype} tensor of shape {self.shape}")
    return Tensor(multi.const(value, self.dtype, self.shape if shape is None else shape, self.device))
  def _const(self, x, dtype=None) -> Tensor:
    return Tensor(multi.const(x, dtype or self.dtype, self.shape, self.device))
  def _broadcasted(self, y, reverse: bool = False, match_dtype: bool = True, op: str | None = None) -> tuple[Tensor, Tensor]:
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
  def _expand_to(self, shape) -> Tensor:
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
  def cast(self, dtype) -> Tensor:
    """Convert the values to `dtype` (a DType, a name like 'float32' or a numpy dtype); floats become ints
    by truncation toward zero.

    >>> Tensor([1.7, -1.7]).cast(dtypes.int32).tolist(), Tensor([1, 2]).cast('float32').tolist()
    ([1, -1], [1.0, 2.0])
    """
    dt = _to_dtype(dtype, f"cast of a {self.dtype} tensor of shape {self.shape}")
    if self.dtype == dt: return self
    if dt in dtypes.fp8s and self.dtype in dtypes.fp8s: return self.float().cast(dt)   # (fp8 to fp8: through float32)
    return F.Cast.apply(self, dtype=dt)   # (fp8: the kernel converts, compiler/fp8.py)
  def bitcast(self, dtype) -> Tensor:
    """Reinterpret the bits as `dtype`. To a dtype n times smaller the last dim grows n times; to one n times larger
    it shrinks n times (it must divide). Bytes are in little-endian order, as in memory on every device here.

    >>> Tensor([1.0]).bitcast(dtypes.uint32).tolist(), Tensor([1, 258], dtype=dtypes.uint16).bitcast(dtypes.uint8).tolist()
    ([1065353216], [1, 0, 2, 1])
    """
    dt = _to_dtype(dtype, f"bitcast of a {self.dtype} tensor of shape {self.shape}")
    if dt.itemsize != self.dtype.itemsize: return self._bitcast_resize(dt)
    return self if self.dtype == dt else F.Cast.apply(self, dtype=dt, bitcast=True)
  def _bitcast_resize(self, dt: DType) -> Tensor:
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
  def float(self) -> Tensor:
    """Cast to float32.

    >>> Tensor([1, 2]).float().tolist()
    [1.0, 2.0]
    """
    return self.cast(dtypes.float32)
  def half(self) -> Tensor:
    """Cast to float16.

    >>> Tensor([1.5]).half().dtype
    dtypes.half
    """
    return self.cast(dtypes.float16)
  def int(self) -> Tensor:
    """Cast to int32 (floats truncate toward zero).

    >>> Tensor([1.9, -1.9]).int().tolist()
    [1, -1]
    """
    return self.cast(dtypes.int32)
  def bool(self) -> Tensor:
    """Cast to bool (nonzero is True).

    >>> Tensor([0, 2]).bool().tolist()
    [False, True]
    """
    return self.cast(dtypes.bool)
  def bfloat16(self) -> Tensor:
    """Cast to bfloat16.

    >>> Tensor([1.5, -2.0]).bfloat16().float().tolist()
    [1.5, -2.0]
    """
    return self.cast(dtypes.bfloat16)
  def short(self) -> Tensor:
    """Cast to int16 (floats truncate toward zero).

    >>> Tensor([1.9, -1.9]).short().tolist()
    [1, -1]
    """
    return self.cast(dtypes.int16)
  def long(self) -> Tensor:
    """Cast to int64.

    >>> Tensor([1.5, -2.5]).long().tolist()
    [1, -2]
    """
    return self.cast(dtypes.int64)
  def double(self) -> Tensor:
    """Cast to float64.

    >>> Tensor([1, 2]).double().dtype
    dtypes.double
    """
    return self.cast(dtypes.float64)
  def _float(self) -> Tensor: return self if self.dtype.is_float else self.cast(dtypes.default_float)

  def add(self, x, reverse=False) -> Tensor:
    """`self + x` with broadcasting and dtype promotion (`x + self` when reverse).

    >>> Tensor([[1], [2]]).add(Tensor([10, 20])).tolist()
    [[11, 21], [12, 22]]
    >>> Tensor([1, 2]).add(1.5).tolist()
    [2.5, 3.5]
    """
    return F.Add.apply(*self._broadcasted(x, reverse, op="add"))
  def sub(self, x, reverse=False) -> Tensor:
    """`self - x` with broadcasting (`x - self` when reverse); raises TypeError for bool tensors.

    >>> Tensor([5, 7]).sub(2).tolist(), Tensor([5, 7]).sub(10, reverse=True).tolist()
    ([3, 5], [5, 3])
    """
    a, b = self._broadcasted(x, reverse, op="sub")
    if a.dtype.is_bool: raise TypeError("sub: subtraction of bool tensors is not supported; use logical_xor")
    return F.Sub.apply(a, b)
  def mul(self, x, reverse=False) -> Tensor:
    """`self * x` with broadcasting and dtype promotion.

    >>> Tensor([2, 3]).mul(Tensor([4, 5])).tolist(), Tensor([2, 3]).mul(0.5).tolist()
    ([8, 15], [1.0, 1.5])
    """
    return F.Mul.apply(*self._broadcasted(x, reverse, op="mul"))
  def div(self, x, reverse=False, rounding_mode: str | None = None) -> Tensor:
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
  def idiv(self, x, reverse=False) -> Tensor:
    """Integer division truncating toward zero (tinygrad's idiv, C's `/`); trunc(a/b) for floats. `//` floors.

    >>> Tensor([7, -7]).idiv(2).tolist(), (Tensor([7, -7]) // 2).tolist()
    ([3, -3], [3, -4])
    """
    if self.dtype.is_bool or (isinstance(x, Tensor) and x.dtype.is_bool and reverse):
      raise TypeError("idiv: bool tensors can't be divided")
    return self.div(x, reverse, rounding_mode="trunc")
  def _floordiv(self, x, reverse=False) -> Tensor:
    """Floor division (Python semantics) for ints; floor(a/b) for floats."""
    a, b = self._broadcasted(x, reverse, op="floordiv")
    if a.dtype.is_float: return (a / b).floor()
    if a.dtype.is_bool: raise TypeError("floordiv: bool tensors can't be divided")
    q = F.IDiv.apply(a, b)
    if a.dtype.is_unsigned: return q
    r = F.Mod.apply(a, b)
    fix = (r != 0) & ((r < 0) != (b < 0))
    return fix.where(q - 1, q)
  def mod(self, x, reverse=False) -> Tensor:
    """Remainder with the sign of the divisor (Python/torch semantics)."""
    a, b = self._broadcasted(x, reverse, op="mod")
    if a.dtype.is_float: return a - (a / b).floor() * b
    r = F.Mod.apply(a, b)
    if a.dtype.is_unsigned: return r
    return ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)
  def fmod(self, x) -> Tensor:
    """The remainder with the sign of the dividend (C fmod), unlike `mod`.

    >>> Tensor([7, -7]).fmod(3).tolist(), Tensor([7.5, -7.5]).fmod(2).tolist()
    ([1, -1], [1.5, -1.5])
    """
    a, b = self._broadcasted(x, op="fmod")
    return a - (a / b).trunc() * b if a.dtype.is_float else F.Mod.apply(a, b)
  def pow(self, x, reverse=False) -> Tensor:
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
  def _mulpow(self, n: int) -> Tensor:
    """x**n for a small n > 0 by repeated squaring: exact, and its gradient n*x**(n-1) is right at 0."""
    ret, b, k = None, self, n
    while k:
      if k & 1: ret = b if ret is None else ret * b
      k >>= 1
      if k: b = b * b
    return ret
  def _ipow(self, e: Tensor) -> Tensor:
    ret, b = self.ones_like(), self
    for i in range(31):
      bit = ((e >> i) & 1) == 1
      ret = bit.where(ret * b, ret)
      b = b * b
    return (e < 0).where(0, ret)
  def maximum(self, x) -> Tensor:
    """The elementwise maximum of self and x, broadcast; nan propagates.

    >>> Tensor([1, 5]).maximum(Tensor([3, 2])).tolist(), Tensor([1, 5]).maximum(3).tolist()
    ([3, 5], [3, 5])
    """
    a, b = self._broadcasted(x, op="maximum")
    if a.dtype.is_bool: return a | b
    return F.Maximum.apply(a, b)
  def minimum(self, x) -> Tensor:
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
  def masked_fill(self, mask: Tensor, value) -> Tensor:
    """`value` where `mask` is True, self elsewhere (broadcast).

    >>> Tensor([1, 2, 3]).masked_fill(Tensor([True, False, True]), 0).tolist()
    [0, 2, 0]
    """
    # the result keeps self's dtype (as torch): a value of another kind is converted, not the tensor
    if not isinstance(value, Tensor): return mask.where(self._fill_value(value, "masked_fill"), self)
    return mask.where(value, self).cast(self.dtype)

  def neg(self) -> Tensor:
    """`-self` (logical not for bool tensors).

    >>> Tensor([1, -2]).neg().tolist()
    [-1, 2]
    """
    return self.logical_not() if self.dtype.is_bool else F.Neg.apply(self)
  def reciprocal(self) -> Tensor:
    """`1 / self` as floats.

    >>> Tensor([2, 4]).reciprocal().tolist()
    [0.5, 0.25]
    """
    return F.Reciprocal.apply(self._float())
  def sqrt(self) -> Tensor:
    """The square root as floats (nan for negative inputs).

    >>> Tensor([1.0, 4.0, 9.0]).sqrt().tolist()
    [1.0, 2.0, 3.0]
    """
    return F.Sqrt.apply(self._float())
  def rsqrt(self) -> Tensor:
    """`1 / sqrt(self)`.

    >>> Tensor([1.0, 4.0, 16.0]).rsqrt().tolist()
    [1.0, 0.5, 0.25]
    """
    return self.sqrt().reciprocal()
  def exp(self) -> Tensor:
    """e ** self, as floats.

    >>> [round(v, 4) for v in Tensor([0.0, 1.0, -1.0]).exp().tolist()]
    [1.0, 2.7183, 0.3679]
    """
    return F.Exp.apply(self._float())
  def exp2(self) -> Tensor:
    """2 ** self, as floats.

    >>> [round(v, 4) for v in Tensor([0.0, 3.0, -1.0]).exp2().tolist()]
    [1.0, 8.0, 0.5]
    """
    return F.Exp.apply(self._float() * math.log(2))
  def log(self) -> Tensor:
    """The natural logarithm (-inf at 0, nan for negative inputs).

    >>> [round(v, 4) for v in Tensor([0.5, 2.0, 10.0]).log().tolist()]
    [-0.6931, 0.6931, 2.3026]
    """
    return F.Log.apply(self._float())
  def log2(self) -> Tensor:
    """The base-2 logarithm.

    >>> [round(v, 4) for v in Tensor([8.0, 0.5, 3.0]).log2().tolist()]
    [3.0, -1.0, 1.585]
    """
    return self.log() / math.log(2)
  def log10(self) -> Tensor:
    """The base-10 logarithm.

    >>> [round(v, 4) for v in Tensor([1000.0, 2.0, 0.5]).log10().tolist()]
    [3.0, 0.301, -0.301]
    """
    return self.log() / math.log(10)
  def sin(self) -> Tensor:
    """The sine (radians).

    >>> [round(v, 4) for v in Tensor([math.pi / 2, 1.0, -1.0]).sin().tolist()]
    [1.0, 0.8415, -0.8415]
    """
    return F.Sin.apply(self._float())
  def cos(self) -> Tensor:
    """The cosine (radians).

    >>> [round(v, 4) for v in Tensor([0.0, math.pi, 1.0]).cos().tolist()]
    [1.0, -1.0, 0.5403]
    """
    return ((math.pi / 2) - self._float()).sin()
  def tan(self) -> Tensor:
    """The tangent (radians), `sin / cos`.

    >>> [round(v, 4) for v in Tensor([math.pi / 4, 1.0]).tan().tolist()]
    [1.0, 1.5574]
    """
    return self.sin() / self.cos()
  def sinh(self) -> Tensor:
    """The hyperbolic sine.

    >>> [round(v, 4) for v in Tensor([1.0, -1.0]).sinh().tolist()]
    [1.1752, -1.1752]
    """
    return (self.exp() - (-self).exp()) / 2
  def cosh(self) -> Tensor:
    """The hyperbolic cosine.

    >>> [round(v, 4) for v in Tensor([0.0, 1.0]).cosh().tolist()]
    [1.0, 1.5431]
    """
    return (self.exp() + (-self).exp()) / 2
  def asinh(self) -> Tensor:
    """The inverse hyperbolic sine.

    >>> [round(v, 4) for v in Tensor([1.0, -1.0]).asinh().tolist()]
    [0.8814, -0.8814]
    """
    return self.sign() * (self.abs() + (self.square() + 1).sqrt()).log()
  def acosh(self) -> Tensor:
    """The inverse hyperbolic cosine (nan below 1).

    >>> [round(v, 4) for v in Tensor([4.0, 10.0]).acosh().tolist()]
    [2.0634, 2.9932]
    """
    return (self + (self.square() - 1).sqrt()).log()
  def atanh(self) -> Tensor:
    """The inverse hyperbolic tangent (inf at 1, nan beyond).

    >>> [round(v, 4) for v in Tensor([0.5, -0.5]).atanh().tolist()]
    [0.5493, -0.5493]
    """
    return ((1 + self) / (1 - self)).log() / 2
  def asin(self) -> Tensor:
    """arcsin via Abramowitz-Stegun 4.4.46 (|error| < 2e-8): pi/2 - sqrt(1-|x|) * poly(|x|), odd-extended."""
    x = self._float()
    a = x.abs()
    coefs = [-0.0012624911, 0.0066700901, -0.0170881256, 0.0308918810, -0.0501743046, 0.0889789874, -0.2145988016, 1.5707963050]
    p = functools.reduce(lambda acc, c: acc * a + c, coefs[1:], Tensor.full_like(a, coefs[0]))
    return x.sign() * (math.pi / 2 - (1 - a).sqrt() * p)
  def acos(self) -> Tensor:
    """The arccosine in radians (nan outside [-1, 1]).

    >>> [round(v, 4) for v in Tensor([0.0, -1.0, 0.5]).acos().tolist()]
    [1.5708, 3.1416, 1.0472]
    """
    return math.pi / 2 - self.asin()
  def atan(self) -> Tensor:
    """The arctangent in radians.

    >>> [round(v, 4) for v in Tensor([1.0, -1.0, 0.25]).atan().tolist()]
    [0.7854, -0.7854, 0.245]
    """
    return (self / (1 + self * self).sqrt()).asin()
  def logaddexp(self, other) -> Tensor:
    """log(exp(self) + exp(other)), computed stably.

    >>> [round(v, 4) for v in Tensor([0.0, 1.0]).logaddexp(Tensor([0.0, 2.0])).tolist()]
    [0.6931, 2.3133]
    """
    a, b = self._float()._broadcasted(other)
    m = a.maximum(b).detach()
    return ((a - m).exp() + (b - m).exp()).log() + m
  def softmin(self, axis: int = -1, dtype=None) -> Tensor:
    """softmax(-x) along `axis`.

    >>> [round(v, 4) for v in Tensor([1.0, 2.0, 3.0]).softmin().tolist()]
    [0.6652, 0.2447, 0.09]
    """
    return (-self).softmax(axis, dtype)
  def relu(self) -> Tensor:
    """max(x, 0).

    >>> Tensor([-1.5, 0.0, 2.5]).relu().tolist()
    [0.0, 0.0, 2.5]
    """
    return F.Relu.apply(self)
  def sigmoid(self) -> Tensor:
    """1 / (1 + exp(-x)), as floats.

    >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).sigmoid().tolist()]
    [0.2689, 0.5, 0.7311]
    """
    return F.Sigmoid.apply(self._float())
  def trunc(self) -> Tensor:
    """Round toward zero (integers are returned as they are).

    >>> Tensor([-1.7, 1.7]).trunc().tolist()
    [-1.0, 1.0]
    """
    return F.Trunc.apply(self) if self.dtype.is_float else self
  def floor(self) -> Tensor:
    """Round toward -inf (integers are returned as they are).

    >>> Tensor([-1.5, 1.5]).floor().tolist()
    [-2.0, 1.0]
    """
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self < t).where(t - 1, t)
  def ceil(self) -> Tensor:
    """Round toward +inf (integers are returned as they are).

    >>> Tensor([-1.5, 1.5]).ceil().tolist()
    [-1.0, 2.0]
    """
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self > t).where(t + 1, t)
  def round(self) -> Tensor:
    """Round half to even, like torch and numpy."""
    if not self.dtype.is_float: return self
    f = self.floor()
    d = self - f
    even = (f % 2) == 0
    return (d > 0.5).where(f + 1, (d < 0.5).where(f, even.where(f, f + 1)))
  def abs(self) -> Tensor:
    """The absolute value.

    >>> Tensor([-2, 3]).abs().tolist(), Tensor([-2.5]).abs().tolist()
    ([2, 3], [2.5])
    """
    if self.dtype.is_unsigned or self.dtype.is_bool: return self
    return F.Abs.apply(self)
  def sign(self) -> Tensor:
    """-1, 0 or 1 by the sign of each element, in self's dtype.

    >>> Tensor([-2.5, 0.0, 3.0]).sign().tolist(), Tensor([-2, 0, 3]).sign().tolist()
    ([-1.0, 0.0, 1.0], [-1, 0, 1])
    """
    return F.Sign.apply(self)
  def square(self) -> Tensor:
    """`self * self`.

    >>> Tensor([-2, 3]).square().tolist()
    [4, 9]
    """
    return self * self
  def clip(self, min_=None, max_=None) -> Tensor:
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
  def clamp(self, min_=None, max_=None) -> Tensor:
    """The same as `clip`.

    >>> Tensor([-2, 0, 5]).clamp(0).tolist()
    [0, 0, 5]
    """
    return self.clip(min_, max_)
  def isnan(self) -> Tensor:
    """Whether each element is nan (bool).

    >>> Tensor([1.0, math.nan]).isnan().tolist()
    [False, True]
    """
    return self != self
  def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    """Whether each element is +inf or -inf (each can be left out), as bools.

    >>> Tensor([1.0, math.inf, -math.inf]).isinf().tolist()
    [False, True, True]
    >>> Tensor([1.0, math.inf, -math.inf]).isinf(detect_negative=False).tolist()
    [False, True, False]
    """
    return (self == math.inf) * detect_positive + (self == -math.inf) * detect_negative if self.dtype.is_float else self._const(False, dtypes.bool)
  def isfinite(self) -> Tensor:
    """Whether each element is neither inf nor nan (bool).

    >>> Tensor([1.0, math.inf, math.nan]).isfinite().tolist()
    [True, False, False]
    """
    return (self.isinf() | self.isnan()).logical_not()
  def lerp(self, end: Tensor, weight) -> Tensor:
    """Linear interpolation `self + (end - self) * weight`.

    >>> Tensor([0.0, 10.0]).lerp(Tensor([10.0, 20.0]), 0.5).tolist()
    [5.0, 15.0]
    """
    return self + (end - self) * weight
  def copysign(self, other) -> Tensor:
    """The magnitude of self with the sign of `other` (the sign bit of -0.0 counts), as floats.

    >>> Tensor([1.0, -2.0, 3.0]).copysign(Tensor([-1.0, 1.0, -0.0])).tolist()
    [-1.0, 2.0, -3.0]
    """
    a, b = self._float()._broadcasted(other, op="copysign")
    neg = (b < 0) | ((b == 0) & ((1 / b) < 0))
    # `other` gets a zero gradient, not none (torch, tinygrad): it joins the graph through sign (zero gradient),
    # as a +0.0 that is subtracted (x - +0.0 is x for every x, -0.0 and nan included)
    return neg.where(-a.abs(), a.abs()) - b.sign().abs() * 0
  def logical_not(self) -> Tensor:
    """`not x` elementwise, as a bool tensor.

    >>> Tensor([True, False]).logical_not().tolist(), Tensor([0, 3]).logical_not().tolist()
    ([False, True], [True, False])
    """
    return F.Neq.apply(*self.bool()._broadcasted(True))
  def bitwise_not(self) -> Tensor:
    """`~x` for integers (logical not for bools); raises RuntimeError for floats.

    >>> Tensor([0, 5]).bitwise_not().tolist(), Tensor([0, 5], dtype=dtypes.uint8).bitwise_not().tolist()
    ([-1, -6], [255, 250])
    """
    # (RuntimeError, as torch and tinygrad raise: the op has no kernel for the dtype)
    if self.dtype.is_float: raise RuntimeError(f"bitwise_not: {self.dtype} is not an integer or bool type")
    return self.logical_not() if self.dtype.is_bool else self ^ -1 if not self.dtype.is_unsigned else self ^ dtypes.max(self.dtype)
  def _bitop(self, fn, x, reverse=False) -> Tensor:
    a, b = self._broadcasted(x, reverse, op=fn.__name__.lower())
    if a.dtype.is_float: raise RuntimeError(f"{fn.__name__}: not defined for {a.dtype}")
    return fn.apply(a, b)
  def bitwise_and(self, x, reverse=False) -> Tensor:
    """`self & x` for integer and bool tensors; raises RuntimeError for floats.

    >>> Tensor([12, 10]).bitwise_and(6).tolist()
    [4, 2]
    """
    return self._bitop(F.BitwiseAnd, x, reverse)
  def bitwise_or(self, x, reverse=False) -> Tensor:
    """`self | x` for integer and bool tensors; raises RuntimeError for floats.

    >>> Tensor([12, 10]).bitwise_or(3).tolist()
    [15, 11]
    """
    return self._bitop(F.BitwiseOr, x, reverse)
  def bitwise_xor(self, x, reverse=False) -> Tensor:
    """`self ^ x` for integer and bool tensors; raises RuntimeError for floats.

    >>> Tensor([12, 10]).bitwise_xor(6).tolist()
    [10, 12]
    """
    return self._bitop(F.Xor, x, reverse)
  def lshift(self, x, reverse=False) -> Tensor:
    """`self << x` for integer tensors.

    >>> Tensor([1, 3]).lshift(2).tolist()
    [4, 12]
    """
    return self._bitop(F.Shl, x, reverse)
  def rshift(self, x, reverse=False) -> Tensor:
    """`self >> x` for integer tensors (arithmetic shift for signed types).

    >>> Tensor([16, 7, -16]).rshift(2).tolist()
    [4, 1, -4]
    """
    return self._bitop(F.Shr, x, reverse)

  # activations
  def tanh(self) -> Tensor:
    """The hyperbolic tangent.

    >>> [round(v, 4) for v in Tensor([-1.0, 1.0, 2.0]).tanh().tolist()]
    [-0.7616, 0.7616, 0.964]
    """
    return 2.0 * ((2.0 * self).sigmoid()) - 1.0
  def gelu(self) -> Tensor:
    """GELU with the tanh approximation: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3))).

    >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).gelu().tolist()]
    [-0.1588, 0.0, 0.8412]
    """
    return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self ** 3)).tanh())
  def quick_gelu(self) -> Tensor:
    """x * sigmoid(1.702 * x), a cheaper GELU approximation.

    >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).quick_gelu().tolist()]
    [-0.1542, 0.0, 0.8458]
    """
    return self * (self * 1.702).sigmoid()
  def silu(self) -> Tensor:
    """x * sigmoid(x) (also called swish).

    >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).silu().tolist()]
    [-0.2689, 0.0, 0.7311]
    """
    return self * self.sigmoid()
  def swish(self) -> Tensor:
    """The same as `silu`: x * sigmoid(x).

    >>> [round(v, 4) for v in Tensor([-1.0, 1.0]).swish().tolist()]
    [-0.2689, 0.7311]
    """
    return self.silu()
  def relu6(self) -> Tensor:
    """min(max(x, 0), 6).

    >>> Tensor([-1.0, 3.0, 8.0]).relu6().tolist()
    [0.0, 3.0, 6.0]
    """
    return self.relu() - (self - 6).relu()
  def leaky_relu(self, neg_slope: float = 0.01) -> Tensor:
    """x for x >= 0, neg_slope * x below.

    >>> Tensor([-2.0, 0.0, 3.0]).leaky_relu(0.5).tolist()
    [-1.0, 0.0, 3.0]
    """
    return (self < 0).where(self * neg_slope, self)
  def elu(self, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha * (exp(x) - 1) below.

    >>> [round(v, 4) for v in Tensor([-1.0, 2.0]).elu().tolist()]
    [-0.6321, 2.0]
    """
    return self.relu() - alpha * (1 - self.exp()).relu()
  def celu(self, alpha: float = 1.0) -> Tensor:
    """max(x, 0) + min(alpha * (exp(x / alpha) - 1), 0).

    >>> [round(v, 4) for v in Tensor([-1.0, 2.0]).celu(alpha=2.0).tolist()]
    [-0.7869, 2.0]
    """
    return self.maximum(0) + (alpha * ((self / alpha).exp() - 1)).minimum(0)
  def selu(self, alpha=1.67326, gamma=1.0507) -> Tensor:
    """gamma * x for x >= 0, gamma * alpha * (exp(x) - 1) below (the self-normalizing constants by default).

    >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).selu().tolist()]
    [-1.1113, 0.0, 2.1014]
    """
    return gamma * (self >= 0).where(self, alpha * (self.exp() - 1))
  def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta*x)) / beta, stable for large |x| forward and backward; x itself where beta*x > threshold
    (torch's convention).

    >>> Tensor([-1000.0, 0.0, 1000.0]).softplus().tolist()
    [0.0, 0.6931471824645996, 1000.0]
    """
    bx = self._float() * beta
    # softplus(z) = max(z, 0) + log1p(exp(-|z|)); maximum splits its gradient at z = 0, giving sigmoid(0) = 0.5
    e = (-bx.abs()).exp()
    log1p = (e < 1e-4).where(e * (1 - e * 0.5), (1 + e).log())
    sp = (bx.maximum(0.0) + log1p) * (1 / beta)
    return (bx > threshold).where(self._float(), sp)
  def mish(self) -> Tensor:
    """x * tanh(softplus(x)).

    >>> [round(v, 4) for v in Tensor([-1.0, 1.0]).mish().tolist()]
    [-0.3034, 0.8651]
    """
    return self * self.softplus().tanh()
  def hardsigmoid(self, alpha=1 / 6, beta=0.5) -> Tensor:
    """Piecewise-linear sigmoid: clip(alpha * x + beta, 0, 1).

    >>> Tensor([-4.0, 0.0, 1.5, 4.0]).hardsigmoid().tolist()
    [0.0, 0.5, 0.75, 1.0]
    """
    return (alpha * self + beta).relu() - (alpha * self + beta - 1).relu()
  def hardswish(self) -> Tensor:
    """x * relu6(x + 3) / 6.

    >>> Tensor([-1.5, 0.0, 1.5, 4.0]).hardswish().tolist()
    [-0.375, 0.0, 1.125, 4.0]
    """
    return self * (self + 3).relu6() * (1 / 6)
  def hardtanh(self, min_val=-1, max_val=1) -> Tensor:
    """clip(x, min_val, max_val), by default to [-1, 1].

    >>> Tensor([-2.0, 0.5, 2.0]).hardtanh().tolist()
    [-1.0, 0.5, 1.0]
    """
    return self.clip(min_val, max_val)
  def softsign(self) -> Tensor:
    """x / (1 + |x|).

    >>> Tensor([-3.0, 0.0, 1.0]).softsign().tolist()
    [-0.75, 0.0, 0.5]
    """
    return self / (1 + self.abs())
  def logsigmoid(self) -> Tensor:
    """log(sigmoid(x)), computed as -softplus(-x).

    >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).logsigmoid().tolist()]
    [-1.3133, -0.6931, -0.3133]
    """
    return -(-self).softplus()
  def erf(self) -> Tensor:  # Abramowitz-Stegun 7.1.26, max error 1.5e-7
    """The Gauss error function (Abramowitz-Stegun 7.1.26, |error| < 1.5e-7).

    >>> [round(v, 4) for v in Tensor([-1.0, 0.5, 2.0]).erf().tolist()]
    [-0.8427, 0.5205, 0.9953]
    """
    t = 1.0 / (1.0 + 0.3275911 * self.abs())
    return self.sign() * (1.0 - t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))) * (-self.square()).exp())

  # ***** operators *****
  def __neg__(self): return self.neg()
  def __add__(self, x): return self.add(x)
  def __radd__(self, x): return self.add(x, True)
  def __sub__(self, x): return self.sub(x)
  def __rsub__(self, x): return self.sub(x, True)
  def __mul__(self, x): return self.mul(x)
  def __rmul__(self, x): return self.mul(x, True)
  def __truediv__(self, x): return self.div(x)
  def __rtruediv__(self, x): return self.div(x, True)
  def __floordiv__(self, x): return self._floordiv(x)
  def __rfloordiv__(self, x): return self._floordiv(x, True)
  def __mod__(self, x): return self.mod(x)
  def __rmod__(self, x): return self.mod(x, True)
  def __pow__(self, x): return self.pow(x)
  def __rpow__(self, x): return self.pow(x, True)
  def __matmul__(self, x): return self.matmul(x)
  def __rmatmul__(self, x): return self.matmul(x, True)
  def __and__(self, x): return self.bitwise_and(x)
  def __rand__(self, x): return self.bitwise_and(x, True)
  def __or__(self, x): return self.bitwise_or(x)
  def __ror__(self, x): return self.bitwise_or(x, True)
  def __xor__(self, x): return self.bitwise_xor(x)
  def __rxor__(self, x): return self.bitwise_xor(x, True)
  def __invert__(self): return self.bitwise_not()
  def __lshift__(self, x): return self.lshift(x)
  def __rshift__(self, x): return self.rshift(x)
  def __rlshift__(self, x): return self.lshift(x, True)
  def __rrshift__(self, x): return self.rshift(x, True)
  def __lt__(self, x): return F.Less.apply(*self._broadcasted(x, op="lt (<)"))
  def __gt__(self, x): return F.Less.apply(*self._broadcasted(x, True, op="gt (>)"))
  def __ge__(self, x): return self._le(*self._broadcasted(x, True, op="ge (>=)"))
  def __le__(self, x): return self._le(*self._broadcasted(x, op="le (<=)"))
  @staticmethod
  def _le(a: Tensor, b: Tensor) -> Tensor:
    # not(b < a) is true when either side is nan: for floats say (a < b) | (a == b), false with a nan (as torch)
    return F.Less.apply(b, a).logical_not() if not a.dtype.is_float else F.Less.apply(a, b) | (a == b)
  def __ne__(self, x): return F.Neq.apply(*self._broadcasted(x, op="ne (!=)"))  # type: ignore[override]
  def __eq__(self, x): return F.Neq.apply(*self._broadcasted(x, op="eq (==)")).logical_not()  # type: ignore[override]
  def __iadd__(self, x): return self._inplace(self.add(x))
  def __isub__(self, x): return self._inplace(self.sub(x))
  def __imul__(self, x): return self._inplace(self.mul(x))
  def __itruediv__(self, x): return self._inplace(self.div(x))
  def __ifloordiv__(self, x): return self._inplace(self._floordiv(x))
  def __imatmul__(self, x): return self._inplace(self.matmul(x))
  def lt(self, x):
    """`self < x` as a bool tensor.

    >>> Tensor([1, 2, 3]).lt(2).tolist()
    [True, False, False]
    """
    return self < x
  def gt(self, x):
    """`self > x` as a bool tensor.

    >>> Tensor([1, 2, 3]).gt(2).tolist()
    [False, False, True]
    """
    return self > x
  def eq(self, x):
    """`self == x` as a bool tensor.

    >>> Tensor([1, 2, 3]).eq(Tensor([1, 0, 3])).tolist()
    [True, False, True]
    """
    return self == x
  def ne(self, x):
    """`self != x` as a bool tensor.

    >>> Tensor([1, 2, 3]).ne(2).tolist()
    [True, False, True]
    """
    return self != x
  def isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> Tensor:
    """|self - other| <= atol + rtol * |other| elementwise; infinities are close only to themselves, nan only to nan
    with equal_nan (torch semantics)."""
    a, b = self._broadcasted(other, op="isclose")
    if not a.dtype.is_float: return (a == b) | ((a - b).abs() <= atol + rtol * b.abs()) if (rtol or atol) else a == b
    err = (a - b).abs()
    close = (a == b) | (err.isfinite() & (err <= atol + rtol * b.abs()))
    return close | (a.isnan() & b.isnan()) if equal_nan else close
  def allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    """True when every element isclose (reads the result back).

    >>> Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0 + 1e-7]))
    True
    """
    return bool(self.isclose(other, rtol=rtol, atol=atol, equal_nan=equal_nan).all().item())

  @staticmethod
  def train(mode: bool = True) -> _Train:
    """`with Tensor.train():` or `@Tensor.train()` enables training mode (dropout, batchnorm stats)."""
    return _Train(mode)
  @staticmethod
  def test() -> _Train:
    """A context manager and decorator that turns training mode off (the opposite of `train()`).

    >>> with Tensor.test(): print(Tensor.training)
    False
    """
    return _Train(False)

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

def _canonical(arr: np.ndarray) -> np.ndarray:
  """The same bytes with numpy's canonical scalar type: on Linux np.longlong ('q') and np.int64 ('l') are distinct
  classes of the same dtype, and only the latter is in the dtype map."""
  return arr.view(np.dtype(arr.dtype.str)) if arr.dtype.kind in "iu" and arr.dtype.type is not np.dtype(arr.dtype.str).type else arr

def _map_nested(x, fn):
  return [_map_nested(v, fn) for v in x] if isinstance(x, (list, tuple)) else fn(x)

def _from_numpy(arr: np.ndarray, device: str) -> LazyBuffer:
  arr = _canonical(arr)
  # np.ascontiguousarray turns a 0-d array into shape (1,): keep the original shape
  return engine.from_host(np.ascontiguousarray(arr).reshape(arr.shape), dtypes.from_np(arr.dtype), device)

def _hash32(x: Tensor) -> Tensor:
  """A 32-bit integer mixer (xor-shift-multiply rounds) used by the random number generator."""
  x = x ^ (x >> 16)
  x = x * 0x7FEB352D
  x = x ^ (x >> 15)
  x = x * 0x846CA68B
  return x ^ (x >> 16)

# every tensor made, by a weak reference in the order they were made: a plain list, since a WeakSet's add and its
# removal callback cost a Python call each for every tensor (hundreds per eager train step); the dead references are
# dropped once the list has doubled since the last sweep (and when it is read)
_live: list[weakref.ref] = []
_weak = weakref.ref
_live_sweep_at = 1024
def _sweep_live() -> None:
  global _live_sweep_at
  _live[:] = [r for r in _live if r() is not None]
  _live_sweep_at = max(1024, 2 * len(_live))

def _init_multi(t: Tensor, data: Any, device, dtype: DType | None, requires_grad: bool | None) -> None:
  """Tensor(data, device=(d0, d1, ...)): made on the first device, then replicated; or a MultiLazyBuffer as is."""
  t.grad, t.requires_grad, t._ctx = None, requires_grad, None
  if isinstance(data, MultiLazyBuffer):
    if device is not None and multi.canonical(device) != data.device: raise ValueError(f"Tensor: data on {data.device}, device {device} asked for")
    t.lazydata = data if dtype is None else data.cast(dtype)
    return
  devs = multi.canonical(device)
  one = Tensor(data, device=devs[0], dtype=dtype)
  t.lazydata = one.lazydata if len(devs) == 1 else MultiLazyBuffer.from_sharded(one.lazydata, devs, None)

def _assign_multi(t: Tensor, x: Tensor) -> Tensor:
  """assign into a sharded tensor: each shard's buffer gets the value's shard (run now, so no later read of the
  target sees the old value)."""
  if not t.lazydata.realized or t.lazydata.is_view: t.lazydata = x.lazydata; return t
  t.lazydata = t.lazydata.assign(x.lazydata)
  engine.realize(multi.lazy_buffers([t.lazydata]), live_lazydata)
  return t

def live_lazydata() -> list[LazyBuffer]:
  """The lazy buffers of every tensor the program still holds (what a schedule that overwrites a buffer must not
  leave to read the new value later: compiler/schedule.py create_schedule)."""
  global _live_sweep_at
  # (the sweep and the read in one pass over the references: asked at every schedule of an eager step)
  alive, lbs = [], []
  for r in _live:
    if (t := r()) is not None:
      alive.append(r)
      if (lb := getattr(t, "lazydata", None)) is None: continue   # (a tensor still in its __init__)
      if isinstance(lb, MultiLazyBuffer): lbs.extend(lb.lbs)   # (multi.lazy_buffers: each shard)
      else: lbs.append(lb)
  _live[:] = alive
  _live_sweep_at = max(1024, 2 * len(alive))
  return lbs

def _wrap(lb: LazyBuffer, requires_grad: bool | None = False) -> Tensor:
  """Tensor(lb, requires_grad=requires_grad) for a LazyBuffer on the device asked for: no dtype to cast to, no copy
  to make (what Tensor.__init__ comes to then, without its checks; for the ops that make a tensor per operand)."""
  t = _object_new(Tensor)   # (Tensor.__new__, inlined: noted in _live)
  _live.append(_weak(t))
  if len(_live) > _live_sweep_at: _sweep_live()
  t.lazydata, t.requires_grad, t.grad, t._ctx = lb, requires_grad, None, None
  return t
_object_new = object.__new__

def _reads_at_other_position(value: LazyBuffer, target: LazyBuffer) -> bool:
  """Does computing `value` read `target`'s buffer anywhere but at the element being written? The buffer is the
  target's, an earlier pending assign's it follows, or any other lazy buffer's over the same device buffer."""
  targets, bufs, t, viewed = set(), set(), target, False
  while True:
    targets.add(t)
    viewed = viewed or t.viewed
    if t.buffer is not None:
      bufs.add(id(t.buffer))
      viewed = viewed or buffer_viewed(t.buffer)
    if not _pending_assign(t): break
    t = t.srcs[1].base
  # a read at another position goes through a view of one of the targets or of a lazy buffer over their buffers: if
  # none was ever made (LazyBuffer.viewed; the buffer's mark covers the other lazy buffers over it), the answer is
  # no without walking value's graph (an optimizer's moments: their values walk the whole backward graph)
  if not viewed: return False
  for b in _shifted_reads(value, _read_walk_memo()):
    if b in targets or (b.buffer is not None and id(b.buffer) in bufs): return True
  return False

_EMPTY: frozenset = frozenset()

def _shifted_reads(value: LazyBuffer, memo: dict) -> frozenset:
  """The bases that computing `value` reads through a view other than their plain shape: realized bases and pending
  assigns (another pending assign, an optimizer's moment, is written by its own kernel, or fused into this one only
  when no load of a written buffer is shifted (compiler/schedule.py _assign_items): not walked into, else it would find
  the weight read at shifted positions by the backward pass, and force a copy of every update); every other base is
  walked into. memo: node -> its answer, for nodes walked into; it holds only while no buffer is realized (a realized
  base stops the walk), see _read_walk_memo."""
  b = value._base or value
  if b.buffer is not None or b.op is Ops.ASSIGN:
    return frozenset((b,)) if value._base is not None and value.st != ShapeTracker.from_shape(b.shape) else _EMPTY
  # post-order over the bases walked into (each one's answer is the union of its sources'); a node pushed twice is
  # answered once
  stack = [(b, False)]
  while stack:
    n, ready = stack.pop()
    if n in memo: continue
    if not ready:
      stack.append((n, True))
      for s in n.srcs:
        sb = s._base or s
        if sb.buffer is None and sb.op is not Ops.ASSIGN and sb not in memo: stack.append((sb, False))
      continue
    acc = None
    for s in n.srcs:
      sb = s._base or s
      if sb.buffer is not None or sb.op is Ops.ASSIGN:
        # (s.st == from_shape(sb.shape): one view of that shape, the default strides, no offset, no mask)
        if s._base is None or ((st := s.st).contiguous and st.shape == sb.shape): continue
        r = frozenset((sb,))
      elif not (r := memo[sb]): continue
      acc = r if acc is None or acc == r else acc | r
    memo[n] = _EMPTY if acc is None else acc
  return memo[b]

# an optimizer step makes an assign per parameter and moment, whose values walk the same gradient graphs: there
# (shared_read_walks) the walks share one memo. A walk's answer holds while the graph holds, which changes only when a
# schedule runs (a base gets its buffer, its sources dropped: frontend/engine.py counts runs), so the memo is emptied
# when a run happened since it was filled; and it lives only as long as the step that made the nodes it holds
_read_walks: list | None = None   # [engine runs when filled, memo]

def _read_walk_memo() -> dict:
  if _read_walks is None: return {}
  if _read_walks[0] != engine.schedule_runs():
    _read_walks[0], _read_walks[1] = engine.schedule_runs(), {}
  return _read_walks[1]

@contextmanager
def shared_read_walks():
  """Within: Tensor.assign's read walks share one memo (an optimizer step's updates)."""
  global _read_walks
  prev, _read_walks = _read_walks, [-1, {}]
  try: yield
  finally: _read_walks = prev

def _writable_view(st: ShapeTracker) -> bool:
  """One view, no padding, no broadcast (a nonzero stride on every dim longer than 1): each element once."""
  if len(st.views) != 1 or (v := st.views[0]).mask is not None: return False
  return all(not (isinstance(st_, int) and st_ == 0) or (isinstance(s, int) and s <= 1) for s, st_ in zip(v.shape, v.strides))

def _pending_assign(lb: LazyBuffer) -> bool:
  """An in-place write recorded but not run yet (its result is the target's buffer)."""
  return not lb.is_view and lb.op is Ops.ASSIGN and lb.buffer is None

# tensors given an in-place write (assign, +=) since the last take_pending_assigns(): TinyJit runs those still
# pending before a replay (it reads and writes the same buffers) and records those a captured function leaves pending
_pending_assigns: weakref.WeakValueDictionary = weakref.WeakValueDictionary()   # id -> tensor (a WeakSet would compare tensors with ==)

def take_pending_assigns() -> list[Tensor]:
  """The tensors whose in-place write has not run yet; forgets them (the caller realizes them)."""
  if not _pending_assigns: return []
  ts = [t for t in list(_pending_assigns.values()) if _pending_assign(t.lazydata)]
  _pending_assigns.clear()
  return ts

def _force(lb: LazyBuffer) -> LazyBuffer:
  lb.forced_realize = True
  return lb

Tensor.no_grad = False
