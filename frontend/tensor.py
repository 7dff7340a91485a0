"""Tensor: a lazy n-dimensional array with autograd, following tinygrad's Tensor API.

Ops only record a graph; `.realize()`, `.numpy()`, `.tolist()` or `.item()` compile and run the kernels.

This module holds the Tensor's state, construction, realization, in-place writes (`assign`), autograd and the Python
operators. Its other methods come from mixins by topic: tensor_create.py (constructors, random numbers),
tensor_movement.py, tensor_reduce.py (with matmul), tensor_elementwise.py, tensor_dtype.py, tensor_activation.py,
nn_ops.py and tensor_extra.py.

>>> from frontend import Tensor
>>> a = Tensor([[1.0, 2.0], [3.0, 4.0]])
>>> (a @ a).tolist()
[[7.0, 10.0], [15.0, 22.0]]
>>> a.sum(axis=1).numpy().tolist()
[3.0, 7.0]
"""
from __future__ import annotations
import weakref
from contextlib import ContextDecorator, contextmanager
from typing import Any, ClassVar
import numpy as np
from compiler.dtypes import DType, dtypes, to_np
from compiler.lazy import LazyBuffer, buffer_viewed
from compiler.uop import UOp, Ops
from compiler.view import prod, ShapeTracker
from compiler.sint import sval, binds_of
from hcqrt.device import Device
from frontend import engine, function as F
from frontend import multi
from frontend.multi import MultiLazyBuffer
from frontend.nn_ops import NNOpsMixin
from frontend.tensor_extra import ExtraOpsMixin
from frontend import tensor_create, tensor_movement, tensor_reduce, tensor_dtype, tensor_elementwise, tensor_activation
from frontend.tensor_create import CreationMixin
from frontend.tensor_movement import MovementMixin
from frontend.tensor_reduce import ReduceMixin
from frontend.tensor_dtype import DTypeMixin
from frontend.tensor_elementwise import ElementwiseMixin
from frontend.tensor_activation import ActivationMixin
from frontend.tensor_args import _to_dtype
# (names other modules import from here since before the split: re-exported)
from frontend.tensor_args import argfix as argfix, shape_arg as shape_arg, make_tuple as make_tuple, UnknownDTypeError as UnknownDTypeError
from frontend.tensor_elementwise import _broadcast_shape as _broadcast_shape

class _Train(ContextDecorator):
  def __init__(self, mode: bool): self.mode = mode
  def __enter__(self): self.prev, Tensor.training = Tensor.training, self.mode
  def __exit__(self, *exc): Tensor.training = self.prev

class Tensor(CreationMixin, MovementMixin, ReduceMixin, ElementwiseMixin, DTypeMixin, ActivationMixin, NNOpsMixin, ExtraOpsMixin):
  """A lazy tensor. `Tensor(data, device=None, dtype=None, requires_grad=None)`; data may be a Python scalar,
  a (nested) list, a numpy array or bytes.

  >>> Tensor([1, 2, 3]).dtype, Tensor([1.0]).dtype, Tensor(True).dtype
  (dtypes.int, dtypes.float, dtypes.bool)
  """
  __slots__ = ("__weakref__", "_ctx", "grad", "lazydata", "requires_grad")
  __deletable__ = ("_ctx",)
  training: bool = False
  no_grad: bool = False
  # the random number generator's state: its seed, and per device a counter tensor (the methods: tensor_create.py)
  _seed: int = 0
  _rng_counter: ClassVar[dict] = {}

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
    # (one tensor on one device: its lazy buffer as it is, what multi.lazy_buffers gives; a loop's realize comes here)
    lb = self.lazydata
    engine.realize([lb] if not others and lb.__class__ is LazyBuffer else multi.lazy_buffers([t.lazydata for t in (self,) + others]), live_lazydata)
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
    ret = F.Copy.apply(self, device=device)
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
    return F.Shard.apply(self, devices=devices, axis=axis)
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

  # ***** autograd *****
  def requires_grad_(self, requires_grad: bool | None = True) -> Tensor:
    """Set `requires_grad` in place and return self.

    >>> Tensor([1.0]).requires_grad_().requires_grad
    True
    """
    self.requires_grad = requires_grad
    return self
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
    walk, grads = self._deepwalk(stop), {self: gradient}
    for t0 in reversed(walk):
      if t0._ctx is None or (g0 := grads.get(t0)) is None or (stop and any(t0 is t for t in stop)): continue   # (no gradient: e.g. the condition of a where())
      if isinstance(t0._ctx, F.FreedGraph):
        # a realized one is a parameter made as `Tensor.zeros(n, requires_grad=True).contiguous().realize()`: a leaf now
        if not t0.lazydata.realized: t0._ctx.backward(g0)
        continue
      if create_graph:
        from frontend.grad_graph import backward_graph
        pgs = [g if g is None or g.device == p.device else g.to(p.device) for p, g in zip(t0._ctx.parents, backward_graph(t0._ctx, t0, g0))]
      else:
        # (each gradient where its parent lives: a graph may span devices through to() and shard())
        pgs = t0._ctx.backward(g0.lazydata)
        pgs = [_grad_for(p, g) for p, g in zip(t0._ctx.parents, [pgs] if len(t0._ctx.parents) == 1 else pgs)]
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


  # ***** indexing *****
  def __getitem__(self, indices) -> Tensor:
    from frontend.indexing import getitem
    return getitem(self, indices)
  def __setitem__(self, indices, v) -> None:
    from frontend.indexing import setitem
    setitem(self, indices, v)







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

def _grad_for(parent: Tensor, g) -> Tensor | None:
  """A backward rule's gradient (a LazyBuffer or MultiLazyBuffer) as a Tensor where `parent` lives and, on several
  devices, split as `parent` is (MultiLazyBuffer.reshard), so every gradient a backward rule gets is split like the
  output it saw in its forward."""
  if g is None: return None
  pl = parent.lazydata
  if g.device != parent.device: return Tensor(g, device=parent.device, requires_grad=False)
  if g.__class__ is MultiLazyBuffer and pl.__class__ is MultiLazyBuffer: g = g.reshard(pl)
  return _wrap(g)

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

# the mixins' methods name `Tensor` and `_wrap` as globals of their own modules (one dict lookup per use, as in this
# module), but those modules can't import this one, which imports them: both are bound there now that they exist
MIXIN_MODULES = (tensor_create, tensor_movement, tensor_reduce, tensor_dtype, tensor_elementwise, tensor_activation)
for _m in MIXIN_MODULES: _m.Tensor, _m._wrap = Tensor, _wrap
del _m
