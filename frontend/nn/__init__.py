"""Neural network layers (tinygrad's nn): plain classes holding Tensors, called on inputs.

>>> from frontend import Tensor, nn
>>> layer = nn.Linear(3, 2)
>>> layer(Tensor.rand(4, 3)).shape
(4, 2)
>>> sorted(nn.state.get_state_dict(layer))
['bias', 'weight']
"""
from __future__ import annotations
import math
import numpy as np
from compiler.dtypes import dtypes
from compiler.view import prod
from frontend.tensor import Tensor, make_tuple
from frontend.checks import check_index
from frontend.nn import state
from frontend import optim

def _buffer(shape, value: float, dtype=np.float32, requires_grad: bool | None = False) -> Tensor:
  """A realized tensor that carries no gradient (running stats): made from host memory, so no kernel runs.
  (from_host keeps a 0-d shape, which Tensor(ndarray) currently doesn't.)"""
  from frontend.engine import from_host
  from hcqrt.device import Device
  arr = np.full(shape, value, dtype=dtype)
  return Tensor(from_host(arr, dtypes.from_np(arr.dtype), Device.canonicalize(None)), requires_grad=requires_grad)
def _param(shape, value: float) -> Tensor: return _buffer(shape, value, requires_grad=None)

class Linear:
  """y = x @ weight.T + bias; weight (out, in) and bias uniform in +-1/sqrt(in) like torch.

  >>> from frontend import Tensor, nn
  >>> nn.Linear(4, 2, bias=False)(Tensor.ones(1, 4)).shape
  (1, 2)
  """
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    bound = 1 / math.sqrt(in_features)
    self.weight = Tensor.uniform(out_features, in_features, low=-bound, high=bound)
    self.bias = Tensor.uniform(out_features, low=-bound, high=bound) if bias else None
  def __call__(self, x: Tensor) -> Tensor: return x.linear(self.weight.transpose(), self.bias)

class Conv2d:
  """N-d convolution layer (2-d for an int kernel_size); padding may be an int, per dim, per side, 'same' or 'valid'.

  >>> from frontend import Tensor, nn
  >>> nn.Conv2d(3, 8, 3, padding=1)(Tensor.rand(1, 3, 5, 5)).shape
  (1, 8, 5, 5)
  """
  def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1, groups: int = 1,
               bias: bool = True):
    self.kernel_size = make_tuple(kernel_size, 2)
    self.stride, self.dilation, self.groups = stride, dilation, groups
    if in_channels % groups or out_channels % groups: raise ValueError(f"Conv2d: channels {in_channels}->{out_channels} not divisible by groups={groups}")
    if isinstance(padding, str):
      if padding == "valid": padding = 0
      elif padding == "same":
        if any(s != 1 for s in make_tuple(stride, len(self.kernel_size))): raise ValueError("Conv2d: padding='same' needs stride 1")
        tot = [d * (k - 1) for d, k in zip(make_tuple(dilation, len(self.kernel_size)), self.kernel_size)]
        padding = [p for t in reversed(tot) for p in (t // 2, t - t // 2)]   # torch pad order, extra on the right
      else: raise ValueError(f"Conv2d: padding must be 'same', 'valid' or numbers, not {padding!r}")
    self.padding = padding
    bound = 1 / math.sqrt(in_channels // groups * prod(self.kernel_size))
    self.weight = Tensor.uniform(out_channels, in_channels // groups, *self.kernel_size, low=-bound, high=bound)
    self.bias = Tensor.uniform(out_channels, low=-bound, high=bound) if bias else None
  def __call__(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding)

def Conv1d(in_channels: int, out_channels: int, kernel_size: int, stride=1, padding=0, dilation=1, groups: int = 1,
           bias: bool = True) -> Conv2d:
  """1-d convolution: a Conv2d with a one-element kernel tuple (input (N, C, L))."""
  return Conv2d(in_channels, out_channels, (kernel_size,) if isinstance(kernel_size, int) else kernel_size, stride, padding, dilation, groups, bias)

def ConvTranspose1d(in_channels: int, out_channels: int, kernel_size: int, stride=1, padding=0, output_padding=0,
                    dilation=1, groups: int = 1, bias: bool = True) -> ConvTranspose2d:
  """1-d transposed convolution: a ConvTranspose2d with a one-element kernel tuple (input (N, C, L)).

  >>> from frontend import Tensor, nn
  >>> nn.ConvTranspose1d(2, 3, 3, stride=2)(Tensor.rand(1, 2, 4)).shape
  (1, 3, 9)
  """
  k = (kernel_size,) if isinstance(kernel_size, int) else kernel_size
  return ConvTranspose2d(in_channels, out_channels, k, stride, padding, output_padding, dilation, groups, bias)

class ConvTranspose2d(Conv2d):
  """Transposed convolution layer; weight (in, out/groups, *k) like torch."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0, dilation=1,
               groups: int = 1, bias: bool = True):
    super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
    self.output_padding = output_padding
    bound = 1 / math.sqrt(out_channels // groups * prod(self.kernel_size))
    self.weight = Tensor.uniform(in_channels, out_channels // groups, *self.kernel_size, low=-bound, high=bound)
  def __call__(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding, self.output_padding)

class BatchNorm:
  """Batch normalization over dim 1. Training (Tensor.training): batch statistics, and running_mean/running_var
  (unbiased) updated in place with `momentum`; eval: the running statistics.

  >>> from frontend import Tensor, nn
  >>> bn = nn.BatchNorm2d(3)
  >>> with Tensor.train(): y = bn(Tensor.rand(4, 3, 2, 2))
  >>> y.shape, bn.num_batches_tracked.item()
  ((4, 3, 2, 2), 1)
  """
  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True, momentum: float = 0.1):
    self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
    self.weight: Tensor | None = _param(sz, 1.0) if affine else None
    self.bias: Tensor | None = _param(sz, 0.0) if affine else None
    if track_running_stats:
      self.running_mean, self.running_var = _buffer(sz, 0.0), _buffer(sz, 1.0)
      self.num_batches_tracked = _buffer((), 0, np.int64)
  def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
    """Batch mean and biased variance over every dim but 1."""
    _, mean, var = self._stats(x)
    return mean, var
  def _stats(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(x - mean, mean, biased variance) over every dim but 1."""
    axes = tuple(a for a in range(x.ndim) if a != 1)
    mean = x.mean(axes)
    y = x - mean.reshape(1, -1, *[1] * (x.ndim - 2))
    return y, mean, (y * y).mean(axes)
  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or (self.weight is not None and x.shape[1] != self.weight.shape[0]):
      raise ValueError(f"BatchNorm: input {x.shape} doesn't have {self.weight.shape[0] if self.weight is not None else '?'} channels on dim 1")
    centered = None
    if Tensor.training or not self.track_running_stats:
      centered, mean, var = self._stats(x)
      if Tensor.training and self.track_running_stats:
        n = x.numel() // x.shape[1]
        m = self.momentum
        self.running_mean.assign((1 - m) * self.running_mean + m * mean.detach())
        self.running_var.assign((1 - m) * self.running_var + (m * n / max(n - 1, 1)) * var.detach())
        self.num_batches_tracked.assign(self.num_batches_tracked + 1)
    else: mean, var = self.running_mean, self.running_var
    invstd = var.add(self.eps).rsqrt()
    if centered is None: return x.batchnorm(self.weight, self.bias, mean, invstd)
    # batch statistics: the normalized output reuses the statistics' x - mean (as Tensor.batchnorm computes it): one
    # lazy value, so the kernels that need it realized compute it once, not once for the variance and again here
    shape = (1, -1, *[1] * (x.ndim - 2))
    if self.weight is not None: centered = centered * self.weight.reshape(shape)
    centered = centered * invstd.reshape(shape)
    return centered + self.bias.reshape(shape) if self.bias is not None else centered
BatchNorm2d = BatchNorm3d = BatchNorm1d = BatchNorm

class LayerNorm:
  """Normalize over the trailing `normalized_shape` dims, then scale and shift (elementwise_affine).

  >>> from frontend import Tensor, nn
  >>> nn.LayerNorm(4)(Tensor.rand(2, 4)).shape
  (2, 4)
  """
  def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True):
    self.normalized_shape = make_tuple(normalized_shape, 1)
    self.axis, self.eps = tuple(-1 - i for i in range(len(self.normalized_shape))), eps
    self.weight = _param(self.normalized_shape, 1.0) if elementwise_affine else None
    self.bias = _param(self.normalized_shape, 0.0) if elementwise_affine else None
  def __call__(self, x: Tensor) -> Tensor:
    if x.shape[-len(self.normalized_shape):] != self.normalized_shape:
      raise ValueError(f"LayerNorm: input {x.shape} doesn't end in {self.normalized_shape}")
    x = x.layernorm(self.axis, self.eps)
    return x if self.weight is None else x * self.weight + self.bias

class LayerNorm2d(LayerNorm):
  """LayerNorm over the channels (dim 1) of an (N, C, H, W) input, at every pixel.

  >>> from frontend import Tensor, nn
  >>> nn.LayerNorm2d(3)(Tensor.rand(2, 3, 4, 4)).shape
  (2, 3, 4, 4)
  """
  def __call__(self, x: Tensor) -> Tensor: return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

class InstanceNorm:
  """Normalize each channel of each sample over its spatial dims, then per-channel affine (weight 1, bias 0).

  >>> from frontend import Tensor, nn
  >>> y = nn.InstanceNorm(3)(Tensor.rand(2, 3, 4, 4) * 5 + 2)
  >>> y.shape, abs(y[1, 2].mean().item()) < 1e-5
  ((2, 3, 4, 4), True)
  """
  def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
    self.num_features, self.eps = num_features, eps
    self.weight = _param(num_features, 1.0) if affine else None
    self.bias = _param(num_features, 0.0) if affine else None
  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.num_features:
      raise ValueError(f"InstanceNorm: input {x.shape} doesn't have {self.num_features} channels on dim 1")
    x = x.reshape(x.shape[0], self.num_features, -1).layernorm(eps=self.eps).reshape(x.shape)
    if self.weight is None: return x
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return x * self.weight.reshape(shape) + self.bias.reshape(shape)

class GroupNorm:
  """Normalize each of num_groups channel groups over (channels in group, spatial), then per-channel affine."""
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    if num_channels % num_groups: raise ValueError(f"GroupNorm: {num_channels} channels don't split into {num_groups} groups")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight = _param(num_channels, 1.0) if affine else None
    self.bias = _param(num_channels, 0.0) if affine else None
  def __call__(self, x: Tensor) -> Tensor:
    if x.shape[1] != self.num_channels: raise ValueError(f"GroupNorm: input {x.shape} doesn't have {self.num_channels} channels")
    x = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
    if self.weight is None: return x
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return x * self.weight.reshape(shape) + self.bias.reshape(shape)

class RMSNorm:
  """x / sqrt(mean(x^2) + eps) over the last dim, times weight."""
  def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
    self.eps = eps
    self.weight = _param(dim, 1.0) if elementwise_affine else None
  def __call__(self, x: Tensor) -> Tensor:
    x = x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt()
    return x if self.weight is None else x * self.weight

class Embedding:
  """Rows of `weight` (vocab_size, embed_size) looked up by integer indices (a one-hot select, bit-exact, differentiable).

  >>> from frontend import Tensor, nn
  >>> nn.Embedding(10, 3)(Tensor([[1, 2]])).shape
  (1, 2, 3)
  """
  def __init__(self, vocab_size: int, embed_size: int):
    self.vocab_sz, self.embed_sz = vocab_size, embed_size
    self.weight = Tensor.glorot_uniform(vocab_size, embed_size)
  def __call__(self, idx: Tensor) -> Tensor:
    if not idx.dtype.is_int: raise TypeError(f"Embedding: indices must be integers, got {idx.dtype}")
    # (not a one-hot product of the values: 0 * NaN and 0 * inf are NaN, which spread an unused row's NaN/inf to every
    # token, forward and in the weight's gradient; frontend/nn_ops.py _lookup_rows)
    return check_index(self.weight._lookup_rows(idx), idx, self.vocab_sz, "Embedding")

class LSTMCell:
  """One LSTM step: (h, c) from input x (N, input_size) and the previous (h, c) (zeros when None); gates in torch's
  order i, f, g, o; weights uniform in +-1/sqrt(hidden_size), biases zero.

  >>> from frontend import Tensor, nn
  >>> h, c = nn.LSTMCell(3, 5)(Tensor.rand(2, 3))
  >>> h.shape, c.shape
  ((2, 5), (2, 5))
  """
  def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
    bound = 1.0 / math.sqrt(hidden_size)
    self.weight_ih = Tensor.uniform(hidden_size * 4, input_size, low=-bound, high=bound)
    self.weight_hh = Tensor.uniform(hidden_size * 4, hidden_size, low=-bound, high=bound)
    self.bias_ih = Tensor.zeros(hidden_size * 4).contiguous() if bias else None
    self.bias_hh = Tensor.zeros(hidden_size * 4).contiguous() if bias else None
  def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    hsz = self.weight_hh.shape[1]
    if x.ndim != 2 or x.shape[1] != self.weight_ih.shape[1]:
      raise ValueError(f"LSTMCell: input {x.shape} is not (N, {self.weight_ih.shape[1]})")
    if hc is None: hc = (Tensor.zeros(x.shape[0], hsz, dtype=x.dtype, device=x.device),) * 2
    gates = x.linear(self.weight_ih.transpose(), self.bias_ih) + hc[0].linear(self.weight_hh.transpose(), self.bias_hh)
    i, f, g, o = gates.chunk(4, dim=1)
    c = f.sigmoid() * hc[1] + i.sigmoid() * g.tanh()
    return (o.sigmoid() * c.tanh()).contiguous(), c.contiguous()

class Dropout:
  """Zero elements with probability p in training mode (see Tensor.dropout)."""
  def __init__(self, p: float = 0.5):
    if not 0.0 <= p <= 1.0: raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
    self.p = p
  def __call__(self, x: Tensor) -> Tensor: return x.dropout(self.p)

__all__ = [
  "BatchNorm",
  "BatchNorm1d",
  "BatchNorm2d",
  "BatchNorm3d",
  "Conv1d",
  "Conv2d",
  "ConvTranspose1d",
  "ConvTranspose2d",
  "Dropout",
  "Embedding",
  "GroupNorm",
  "InstanceNorm",
  "LSTMCell",
  "LayerNorm",
  "LayerNorm2d",
  "Linear",
  "RMSNorm",
  "optim",
  "state",
]
