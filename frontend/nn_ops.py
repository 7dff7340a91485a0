"""Tensor methods for neural networks (convolution, pooling, losses, attention, sorting, scatter/gather,
cumulative ops...), kept apart from tensor.py; `Tensor` inherits them from `NNOpsMixin`.

Everything here is a composition of the Tensor's differentiable ops, so each method gets its gradient from
the few primitives in function.py. Sliding windows (`_pool`) are pure views (pad/reshape/expand/shrink/permute):
convolution and pooling read the input in place, never copy it into an im2col buffer.

>>> from frontend import Tensor
>>> x = Tensor.arange(16).float().reshape(1, 1, 4, 4)
>>> x.max_pool2d().tolist()
[[[[5.0, 7.0], [13.0, 15.0]]]]
>>> Tensor([[3.0, 1.0, 2.0]]).sort()[0].tolist()
[[1.0, 2.0, 3.0]]
"""
from __future__ import annotations
import math, string
from typing import TYPE_CHECKING
from collections.abc import Sequence
import numpy as np
from compiler.dtypes import dtypes
from compiler.view import prod, ShapeTracker
from compiler.memo import memo_put
from compiler.sint import any_sym, is_sym, smax
from compiler.uop import Ops
from compiler.opt.conv import ROW_LANE_USE_MIN, row_lane_use
from frontend.checks import check_index
from frontend.tensor_args import make_tuple
from frontend.devices import target_of
from frontend.multi import MultiLazyBuffer
from frontend import function as F
from frontend.function import Function, _UINT_OF

if TYPE_CHECKING:
  from frontend.tensor import Tensor
  from compiler.lazy import LazyBuffer

def _wrap(lb: LazyBuffer, requires_grad: bool | None) -> Tensor:
  """frontend.tensor._wrap (that module imports this one): looked up at the first call, which rebinds this name to it."""
  global _wrap
  from frontend.tensor import _wrap
  return _wrap(lb, requires_grad)

# _view_chain's final tracker by (the input's tracker, the chain's key, its numbers' types): bounded (compiler/memo.py);
# VIEW_CHAINS off: always the movement ops
_chain_sts: dict[tuple, ShapeTracker] = {}
VIEW_CHAINS: bool = True

def _view_chain(t: Tensor, key: tuple, build) -> Tensor:
  """build(t), a chain of movement ops whose arguments `key` names, as one view of t's base: with no autograd node to
  record, the result is a pure function of t's tracker and key, so a conv's gradients (the same chains at every eager
  step) skip the intermediate views. Memoized only when the result is a view of t's base (no step read padding only)."""
  lb = t.lazydata
  if not VIEW_CHAINS or (t.requires_grad and not t.__class__.no_grad) or isinstance(lb, MultiLazyBuffer) or any_sym(lb.shape): return build(t)
  k = (lb.st, key, tuple(map(type, key)))
  if (st := _chain_sts.get(k)) is not None: return _wrap(lb.base._view(st), t.requires_grad)
  ret = build(t)
  if (r := ret.lazydata).base is lb.base: memo_put(_chain_sts, k, r.st)
  return ret

def _flat(xs) -> list: return [a for x in xs for a in x]

class NNOpsMixin:
  __slots__ = ()

  # ***** sliding windows *****
  def _pool(self: Tensor, k_: tuple[int, ...], stride: int | tuple = 1, dilation: int | tuple = 1) -> Tensor:
    """Windows of size k_ over the last len(k_) dims as a view: (..., *out, *k_)."""
    # with no autograd node to record the windows are one view of self's base (_view_chain): a conv's forward and
    # gradients ask for the same ones at every eager step (about ten movement ops each)
    nk = len(k_)
    s_, d_ = make_tuple(stride, nk), make_tuple(dilation, nk)
    return _view_chain(self, ("pool", nk, *k_, *s_, *d_), lambda t: t._pool_views(k_, s_, d_))
  def _pool_views(self: Tensor, k_: tuple[int, ...], stride: int | tuple = 1, dilation: int | tuple = 1) -> Tensor:
    nk = len(k_)
    if self.ndim < nk: raise ValueError(f"pool: kernel {k_} has more dims than the input {self.shape}")
    s_, d_ = make_tuple(stride, nk), make_tuple(dilation, nk)
    noop, i_ = self.shape[:-nk], self.shape[-nk:]
    o_ = [(i - d * (k - 1) - 1) // s + 1 for i, d, k, s in zip(i_, d_, k_, s_)]
    if any(o <= 0 for o in o_): raise ValueError(f"pool: kernel {k_} (dilation {d_}) is larger than the input {i_}")
    nn = len(noop)
    if all(k <= s and d == 1 for k, s, d in zip(k_, s_, d_)):
      # non-overlapping windows: make each dim o*s long, split it into (o, s), keep the first k of each s
      x = self.pad(tuple([None] * nn + [(0, o * s - i) for o, s, i in zip(o_, s_, i_)]))
      x = x.reshape(*noop, *_flat((o, s) for o, s in zip(o_, s_)))
      x = x.shrink(tuple([None] * nn + _flat(((0, o), (0, k)) for o, k in zip(o_, k_))))
      return x.permute(*range(nn), *[nn + 2 * j for j in range(nk)], *[nn + 2 * j + 1 for j in range(nk)])
    # overlapping windows: tile each dim e times and read it with a row stride of i+d, so row r starts at r*d;
    # then every s-th column of the first o*s gives the windows. Pad so that o*s <= i+d (possible when s > d*k+1).
    ip_ = [max(i, o * s - d) for i, o, s, d in zip(i_, o_, s_, d_)]
    x = self.pad(tuple([None] * nn + [(0, ip - i) for ip, i in zip(ip_, i_)]))
    e_ = [math.ceil(k * (ip + d) / ip) for k, ip, d in zip(k_, ip_, d_)]
    x = x.reshape(*noop, *_flat((1, ip) for ip in ip_)).expand(*noop, *_flat((e, ip) for e, ip in zip(e_, ip_)))
    x = x.reshape(*noop, *[e * ip for e, ip in zip(e_, ip_)])
    x = x.shrink(tuple([None] * nn + [(0, k * (ip + d)) for k, ip, d in zip(k_, ip_, d_)]))
    x = x.reshape(*noop, *_flat((k, ip + d) for k, ip, d in zip(k_, ip_, d_)))
    x = x.shrink(tuple([None] * nn + _flat(((0, k), (0, o * s)) for k, o, s in zip(k_, o_, s_))))
    x = x.reshape(*noop, *_flat((k, o, s) for k, o, s in zip(k_, o_, s_)))
    x = x.shrink(tuple([None] * nn + _flat(((0, k), (0, o), (0, 1)) for k, o in zip(k_, o_))))
    x = x.reshape(*noop, *_flat((k, o) for k, o in zip(k_, o_)))
    return x.permute(*range(nn), *[nn + 2 * j + 1 for j in range(nk)], *[nn + 2 * j for j in range(nk)])

  @staticmethod
  def _resolve_pads(padding, dims: int) -> list[int]:
    """int, per-dim (first dim first) or flat torch-style (last dim first, before/after) -> flat list."""
    if isinstance(padding, int): return [padding] * (2 * dims)
    padding = list(padding)
    if len(padding) == dims: return _flat((p, p) for p in reversed(padding))
    if len(padding) == 2 * dims: return padding
    raise ValueError(f"padding {padding} must be an int, {dims} values or {2 * dims} values (per side)")

  def _ceil_pads(self: Tensor, pads: list[int], k_, s_, d_) -> list[int]:
    """Extra right padding so the last partial window is kept (ceil_mode), as torch computes it."""
    pads, n = list(pads), len(k_)
    for j, (i, k, s, d) in enumerate(zip(self.shape[-n:], k_, s_, d_)):
      pb, pa = pads[2 * (n - 1 - j)], pads[2 * (n - 1 - j) + 1]
      o = math.ceil((i + pb + pa - d * (k - 1) - 1) / s) + 1
      if (o - 1) * s >= i + pb: o -= 1  # a window must start inside the input or the left padding
      pads[2 * (n - 1 - j) + 1] += max(0, (o - 1) * s + d * (k - 1) + 1 - (i + pb + pa))
    return pads

  def _windows_at_max(self: Tensor, op: str, f, k_, s_, d_, pads: list[int], value=0.0) -> Tensor:
    """`f` (a windowed op over the last len(k_) dims) where some of those dims are symbolic: each is padded on the
    right with `value` to its Variable's maximum, `f` runs on that concrete shape (one kernel for every value), and
    its outputs are cut back to the windows of the true size. Exact: an output window that lies inside the true
    input (and its own padding, which is `value` too) never reads the added cells."""
    nk, nb = len(k_), self.ndim - len(k_)
    sp = self.shape[nb:]
    o_ = []
    for j, (i, k, s, d) in enumerate(zip(sp, k_, s_, d_)):
      pb, pa = pads[2 * (nk - 1 - j)], pads[2 * (nk - 1 - j) + 1]
      lo = i if not is_sym(i) else int(i.vmin)
      if lo + pb + pa < d * (k - 1) + 1:
        raise ValueError(f"{op}: the input {self.shape} (padding {list(pads)}) may be smaller than the kernel {tuple(k_)} "
                         f"(dilation {tuple(d_)}): dim {nb + j} is {i}, as small as {lo} in its Variable's range")
      o_.append((i + pb + pa - d * (k - 1) - 1) // s + 1)
    y = f(self.pad(tuple([None] * nb + [(0, smax(i) - i) for i in sp]), value=value))
    return y.shrink(tuple([None] * (y.ndim - nk) + [(0, o) for o in o_]))

  def _refuse_sym_pool(self: Tensor, op: str, **flags) -> None:
    """Options whose result depends on where a symbolic size ends (extra ceil windows, flat indices of its layout)."""
    if (on := [k for k, v in flags.items() if v]):
      raise NotImplementedError(f"{op}: {', '.join(on)} is not supported with a symbolic (Variable) spatial size {self.shape}")

  # ***** convolution *****
  def conv2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1, padding=0,
             acc_dtype=None, dtype=None) -> Tensor:
    """N-d convolution (cross-correlation) like torch's conv2d: input (N, Cin, *spatial), weight (Cout, Cin/groups, *k).

    `padding` is an int, one value per spatial dim, or per side in torch pad order (left, right, top, bottom).

    >>> from frontend import Tensor
    >>> Tensor.arange(9).float().reshape(1, 1, 3, 3).conv2d(Tensor.ones(1, 1, 2, 2)).tolist()
    [[[[8.0, 12.0], [20.0, 24.0]]]]
    """
    self._check_conv_args(weight, bias, groups, padding)
    acc_dtype = dtype if dtype is not None else acc_dtype   # tinygrad's name for the accumulation dtype
    HW = weight.shape[2:]
    pads = self._resolve_pads(padding, len(HW))
    if any_sym(self.shape[2:]):   # a symbolic spatial size: the convolution of the maximum size, cut back
      return self._windows_at_max("conv2d", lambda x: x.conv2d(weight, bias, groups, stride, dilation, pads, acc_dtype), HW,
                                  make_tuple(stride, len(HW)), make_tuple(dilation, len(HW)), pads)
    for i, k, d, pb, pa in zip(self.shape[2:], HW, make_tuple(dilation, len(HW)), pads[-2::-2], pads[::-2]):
      if i + pb + pa < d * (k - 1) + 1:
        raise RuntimeError(f"conv2d: the padded input {tuple(self.shape[2:])} (padding {list(pads)}) is smaller than the kernel {tuple(HW)} (dilation {dilation})")
    if (rw := _conv_rewrite(self, weight, groups, stride, dilation, pads, acc_dtype)) is not None: ret = rw
    elif (self.requires_grad or weight.requires_grad) and not self.__class__.no_grad and _conv_fn_ok(self, weight, groups, stride, dilation, pads, acc_dtype):
      ret = _ConvFn.apply(self, weight, pads=tuple(pads))
    elif (self.requires_grad or weight.requires_grad) and not self.__class__.no_grad and _conv_fn_ok(self, weight, 1, stride, dilation, pads, acc_dtype):
      ret = _GroupConvFn.apply(self, weight, groups=groups, pads=tuple(pads))   # groups > 1 (depthwise included)
    else: ret = self._conv_fwd(weight, groups, stride, dilation, pads, acc_dtype)
    return ret if bias is None else ret + bias.reshape(1, -1, *[1] * len(HW))

  def _conv_fwd(self: Tensor, weight: Tensor, groups, stride, dilation, pads: list[int], acc_dtype=None, realize: bool = False) -> Tensor:
    """conv2d's forward as a composition of views, a multiply and a sum (its gradient, when taken through these ops,
    is a windowed 6-d tensor folded back: _ConvFn gives the common case convolutions instead). `realize`: the grouped
    sum realized in its own (bs, groups, cout/groups, ...) shape before the channels merge (a buffer stored in the
    merged shape gives its kernel one channel loop that every input load divides by the group size: no tile rows)."""
    bs, (cout, cin), HW = self.shape[0], weight.shape[:2], weight.shape[2:]
    if HW and all(k == 1 for k in HW) and not any(pads) and acc_dtype is None and all(v == 1 for v in make_tuple(stride, len(HW)) + make_tuple(dilation, len(HW))):
      # 1x1: per image and group a matrix product W (cout/g, cin) @ X (cin, pixels), which the matmul opts run ~2x faster
      # than the conv tile (the pixels as one loop, the register tile's rows over output channels)
      sp = self.shape[2:]
      w2 = weight.reshape(1, groups, cout // groups, cin)
      y = w2 @ self.reshape(bs, groups, cin, prod(sp))
      return (y.contiguous() if realize and groups > 1 else y).reshape(bs, cout, *sp)
    if _depthwise_in_place(self, weight, groups, stride, dilation, pads, acc_dtype): return _depthwise_fwd(self, weight, pads)
    # an unrealized computed input (a previous conv + relu) is realized on its own first: fused into the padded copy
    # below, its reduction would run inside a kernel whose stores are gated by the border (no register tile)
    if any(pads) and _computed_by_reduce(self.lazydata): self = self.contiguous()
    # the padded input as a buffer of its own (a cheap copy): the conv kernel then reads every window without border
    # checks, so its loads are plain vectors (a gated load costs a scalar load per lane on the CPU)
    x = (self.pad(pads).contiguous() if any(pads) else self)._pool(HW, stride, dilation)  # (bs, cin_, *out, *HW)
    rcout, oyx, nd = cout // groups, x.shape[2:-len(HW)], len(HW)
    if _short_odd_rows(self, weight, groups, stride, dilation, oyx, acc_dtype):
      # (more than 8 lanes: the conv stores channels-first itself, no transposing copy: _conv_fwd_cout fused_store)
      return _conv_fwd_cout(self.pad(pads).contiguous() if any(pads) else self, weight, (1, 1), fused_store=_cpu_lanes(self.device) > COUT_ROW_LANES)
    x = x.reshape(bs, groups, cin, 1, *oyx, *HW).expand(bs, groups, cin, rcout, *oyx, *HW)
    x = x.permute(0, 1, 3, *[4 + i for i in range(nd)], 2, *[4 + nd + i for i in range(nd)])  # (bs, g, rcout, *out, cin, *HW)
    w = weight.reshape(1, groups, rcout, *[1] * nd, cin, *HW)
    y = (x * w).sum(tuple(range(-1 - nd, 0)), acc_dtype=acc_dtype)
    return (y.contiguous() if realize and groups > 1 else y).reshape(bs, cout, *oyx)

  def _check_conv_args(self: Tensor, weight: Tensor, bias: Tensor | None, groups: int, padding) -> None:
    """Name the wrong argument of a convolution the way torch does (RuntimeError), before any shape arithmetic."""
    if not isinstance(groups, int) or groups <= 0: raise RuntimeError(f"conv2d: groups must be a positive int, got {groups!r}")
    if weight.ndim < 3: raise RuntimeError(f"conv2d: weight {weight.shape} needs (out_channels, in_channels/groups, *kernel)")
    if self.ndim != weight.ndim:
      raise RuntimeError(f"conv2d: input {self.shape} has {self.ndim} dims but weight {weight.shape} has {weight.ndim}: expected input (N, C, *spatial) with {weight.ndim - 2} spatial dims")
    cout, cin = weight.shape[:2]
    if cout % groups: raise RuntimeError(f"conv2d: out_channels {cout} of weight {weight.shape} is not divisible by groups={groups}")
    if self.shape[1] != cin * groups:
      raise RuntimeError(f"conv2d: with groups={groups}, weight {weight.shape} expects input {self.shape} to have {cin * groups} channels, but it has {self.shape[1]}")
    if bias is not None and bias.shape != (cout,): raise RuntimeError(f"conv2d: bias {bias.shape} must have shape ({cout},) for weight {weight.shape}")
    if not isinstance(padding, int) and len(padding) not in (weight.ndim - 2, 2 * (weight.ndim - 2)):
      raise ValueError(f"conv2d: padding {tuple(padding)} must be an int, {weight.ndim - 2} values or {2 * (weight.ndim - 2)} values (per side)")

  def conv_transpose2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1,
                       padding=0, output_padding=0) -> Tensor:
    """Transposed convolution like torch's: weight (Cin, Cout/groups, *k).

    >>> from frontend import Tensor
    >>> Tensor.ones(1, 1, 2, 2).conv_transpose2d(Tensor.ones(1, 1, 2, 2)).shape
    (1, 1, 3, 3)
    """
    HW, nd = weight.shape[2:], weight.ndim - 2
    stride, dilation, padding, output_padding = [make_tuple(v, nd) for v in (stride, dilation, padding, output_padding)]
    if weight.shape[0] != self.shape[1]: raise RuntimeError(f"conv_transpose2d: input {self.shape} and weight {weight.shape} don't match")
    # the equivalent forward conv: flipped kernel with in/out swapped per group, over a zero-stuffed input
    w = weight.unflatten(0, (groups, -1)).transpose(1, 2).flip(*range(3, weight.ndim + 1)).flatten(0, 1)
    x = self
    if any(s > 1 for s in stride):
      x = x.reshape(*x.shape[:2], *_flat((k, 1) for k in x.shape[2:]))
      x = x.pad(((0, 0), (0, 0), *_flat(((0, 0), (0, s - 1)) for s in stride)))
      x = x.reshape(*x.shape[:2], *[k * s for k, s in zip(x.shape[2::2], stride)])
      x = x.shrink(((0, x.shape[0]), (0, x.shape[1]), *[(0, k - (s - 1)) for k, s in zip(x.shape[2:], stride)]))
    pads = _flat(((k - 1) * d - p, (k - 1) * d - p + op) for k, d, p, op in reversed(list(zip(HW, dilation, padding, output_padding))))
    return x.conv2d(w, bias=bias, groups=groups, dilation=dilation, padding=pads)

  # ***** pooling *****
  def max_pool2d(self: Tensor, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode: bool = False,
                 return_indices: bool = False):
    """Max over windows of the last len(kernel_size) dims (2 when an int). With return_indices, also the flat
    spatial index of each maximum (for max_unpool2d).

    >>> from frontend import Tensor
    >>> Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).max_pool2d().tolist()
    [[[[4.0]]]]
    """
    k_ = make_tuple(kernel_size, 2)
    s_, d_ = make_tuple(stride if stride is not None else k_, len(k_)), make_tuple(dilation, len(k_))
    pads = self._resolve_pads(padding, len(k_))
    if any_sym(self.shape[-len(k_):]):
      self._refuse_sym_pool("max_pool2d", ceil_mode=ceil_mode, return_indices=return_indices)
      return self._windows_at_max("max_pool2d", lambda x: x.max_pool2d(k_, s_, d_, pads), k_, s_, d_, pads, dtypes.min(self.dtype))
    if ceil_mode: pads = self._ceil_pads(pads, k_, s_, d_)
    axes = tuple(range(-len(k_), 0))
    xp = self.pad(pads, value=dtypes.min(self.dtype))
    if not return_indices and s_ == k_ and all(d == 1 for d in d_) and all(i % k == 0 for i, k in zip(xp.shape[-len(k_):], k_)):
      # windows that tile the input: max over the (o, k) split dims in place, not over a permuted view, so that the
      # gradient (where each window's max was, times its output's gradient) is stored in the input's own layout:
      # a permuted one costs its readers (ReLU and BatchNorm backward) gathers
      nn = self.ndim - len(k_)
      split = xp.reshape(*xp.shape[:nn], *_flat((i // k, k) for i, k in zip(xp.shape[nn:], k_)))
      return split.max(tuple(nn + 2 * j + 1 for j in range(len(k_))))
    win = xp._pool(k_, s_, d_)
    ret = win.max(axes)
    if not return_indices: return ret
    spatial = self.shape[-len(k_):]
    idx = self.arange(prod(spatial), device=self.device).reshape(spatial).pad(pads, value=-1)._pool(k_, s_, d_)
    big = prod(spatial)
    hit = win == ret.reshape(*ret.shape, *[1] * len(k_))
    return ret, hit.where(idx, big).min(axes).detach()

  def avg_pool2d(self: Tensor, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> Tensor:
    """Mean over windows of the last len(kernel_size) dims, counting padding like torch does.

    >>> from frontend import Tensor
    >>> Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).avg_pool2d().tolist()
    [[[[2.5]]]]
    """
    k_ = make_tuple(kernel_size, 2)
    s_, d_ = make_tuple(stride if stride is not None else k_, len(k_)), make_tuple(dilation, len(k_))
    pads = self._resolve_pads(padding, len(k_))
    if any_sym(self.shape[-len(k_):]):
      self._refuse_sym_pool("avg_pool2d", ceil_mode=ceil_mode)
      def sums(x: Tensor) -> Tensor: return x._windows_at_max("avg_pool2d", lambda t: t.pad(pads)._pool(k_, s_, d_).sum(tuple(range(-len(k_), 0))), k_, s_, d_, pads)
      if count_include_pad or not any(pads): return sums(self) / prod(k_)
      # the count of input cells in each window, by the same windows over ones (a symbolic shape: no numpy table)
      return sums(self) / sums(type(self).ones(*self.shape[-len(k_):], device=self.device, dtype=self.dtype))
    cpads = self._ceil_pads(pads, k_, s_, d_) if ceil_mode else pads
    axes = tuple(range(-len(k_), 0))
    sums = self.pad(cpads)._pool(k_, s_, d_).sum(axes)
    if not ceil_mode and (count_include_pad or not any(pads)): return sums / prod(k_)
    # the divisor depends only on shapes: per dim, count the window cells over the input (and the user padding
    # if counted, but never the ceil_mode extra); the product over dims is the count of each window
    div = np.ones((), np.float32)
    for j, (i, k, s, d, o) in enumerate(zip(self.shape[-len(k_):], k_, s_, d_, sums.shape[-len(k_):])):
      jj = len(k_) - 1 - j
      pb, pa = pads[2 * jj], pads[2 * jj + 1]
      line = np.concatenate([np.full(pb, float(count_include_pad)), np.ones(i), np.full(pa, float(count_include_pad)),
                             np.zeros(cpads[2 * jj + 1] - pa)]).astype(np.float32)
      cnt = np.array([line[w * s:w * s + d * (k - 1) + 1:d].sum() for w in range(o)], np.float32)
      div = np.multiply.outer(div, cnt)
    return sums / type(self)(div.astype(np.float32), device=self.device, dtype=sums.dtype)

  def max_unpool2d(self: Tensor, indices: Tensor, kernel_size=(2, 2), stride=None, dilation=1, padding=0,
                   output_size=None) -> Tensor:
    """Inverse of max_pool2d(return_indices=True): values go back to their positions, zeros elsewhere."""
    k_ = make_tuple(kernel_size, 2)
    s_, d_, p_ = make_tuple(stride if stride is not None else k_, len(k_)), make_tuple(dilation, len(k_)), make_tuple(padding, len(k_))
    pre, ins = self.shape[:-len(k_)], self.shape[-len(k_):]
    if output_size is None: out = tuple((i - 1) * s - 2 * p + d * (k - 1) + 1 for i, s, p, d, k in zip(ins, s_, p_, d_, k_))
    else: out = tuple(output_size)[-len(k_):]
    n = prod(out)
    hit = indices.reshape(*pre, -1, 1) == self.arange(n, device=self.device)
    return hit.where(self.reshape(*pre, -1, 1), 0).sum(-2).reshape(*pre, *out)

  # ***** losses *****
  def _do_reduction(self: Tensor, reduction: str = "mean") -> Tensor:
    if reduction == "mean": return self.mean()
    if reduction == "sum": return self.sum()
    if reduction == "none": return self
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', not {reduction!r}")

  def _one_hot_mask(self: Tensor, n: int) -> Tensor:
    """Bool (..., n): self[...] == k."""
    return self.unsqueeze(-1) == self.arange(n, device=self.device)
  def _pick(self: Tensor, mask: Tensor, axis) -> Tensor:
    """The element of self that bool `mask` (at most one True per output along `axis`, broadcast) selects, `axis`
    removed; nothing selected gives 0. Bit-exact and differentiable (frontend/function.py Pick): unselected values,
    NaN or inf, never reach the result or its gradient."""
    from frontend.tensor_elementwise import _broadcast_shape
    shape = _broadcast_shape(self.shape, mask.shape, op="pick")
    x, m = self._expand_to(shape), mask._expand_to(shape)
    axes = x._reduce_axes(axis, op="pick")
    if not axes: return m.where(x, 0)
    return F.Pick.apply(m, x, axis=axes).reshape(tuple(s for i, s in enumerate(shape) if i not in axes))

  def _lookup_rows(self: Tensor, idx: Tensor) -> Tensor:
    """Rows of self (V, E) at integer idx (...): (..., E), bit-exact and differentiable (frontend/function.py Lookup).
    A float product with a one-hot matrix runs as the packed matmul kernels, far faster than a select-and-sum loop, but
    0 * NaN = NaN: so the rows' bits go through it as 16-bit pieces, integers a float32 holds exactly; every product
    is finite, each sum has one nonzero term (+0.0 others), and the pieces join back into the bits (NaN payloads, inf,
    -0.0 as they are)."""
    v, e = self.shape
    mask = idx._one_hot_mask(v)
    if not self.dtype.is_float or self.dtype.itemsize not in (2, 4, 8) or isinstance(self.lazydata, MultiLazyBuffer):
      return self._pick(mask.unsqueeze(-1), -2)
    u, n = _UINT_OF[self.dtype.itemsize], self.dtype.itemsize // 2
    oh = mask.reshape(-1, v).cast(dtypes.float32)
    bits = self.detach().bitcast(u)
    got = oh @ type(self).cat(*[((bits >> (16 * k)) & 0xFFFF).cast(dtypes.float32) for k in range(n)], dim=1)
    out = None
    for k in range(n):
      piece = got[:, k * e:(k + 1) * e].cast(u) << (16 * k)
      out = piece if out is None else out | piece
    return F.Lookup.apply(oh, self, out.bitcast(self.dtype)).reshape(*idx.shape, e)

  def cross_entropy(self: Tensor, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy of logits (classes on dim 1, or dim 0 for 1-d) against class indices or probabilities.

    >>> from frontend import Tensor
    >>> round(Tensor([[0.0, 0.0]]).cross_entropy(Tensor([1])).item(), 4)
    0.6931
    """
    if not 0.0 <= label_smoothing <= 1.0: raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    cd = 0 if self.ndim == 1 else 1
    if Y.shape != self.shape:
      exp = self.shape[:cd] + self.shape[cd + 1:]
      if Y.shape != exp: raise RuntimeError(f"cross_entropy: target shape {Y.shape} doesn't match logits {self.shape} (expected {exp})")
      Y = check_index(Y._one_hot_mask(self.shape[cd]).float(), Y, self.shape[cd], "cross_entropy target", IndexError)
      Y = Y.unsqueeze(cd).transpose(cd, -1).squeeze(-1)
    Y = (1 - label_smoothing) * Y + label_smoothing / self.shape[cd]
    return (-(self.log_softmax(cd) * Y).sum(cd))._do_reduction(reduction)

  def nll_loss(self: Tensor, Y: Tensor, weight: Tensor | None = None, ignore_index: int | None = None,
               reduction: str = "mean") -> Tensor:
    """Negative log likelihood of log-probabilities (classes on dim 1) at the target classes Y.

    >>> from frontend import Tensor
    >>> Tensor([[-1.0, -2.0]]).nll_loss(Tensor([1])).item()
    2.0
    """
    cd = 0 if self.ndim == 1 else 1
    nc = self.shape[cd]
    oh = Y._one_hot_mask(nc)                                                # (*Y.shape, C)
    w = oh.where(weight, 0).sum(-1) if weight is not None else None
    if ignore_index is not None: w = (Y != ignore_index) if w is None else w * (Y != ignore_index)
    picked = oh.where(self.unsqueeze(-1).transpose(cd, -1).squeeze(cd), 0).sum(-1) if cd else oh.where(self, 0).sum(-1)
    nll = -picked * w if w is not None else -picked
    if reduction == "mean": return nll.sum() / w.sum() if w is not None else nll.mean()
    return nll._do_reduction(reduction)

  def sparse_categorical_crossentropy(self: Tensor, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,
                                      reduction: str = "mean") -> Tensor:
    """Cross entropy of logits (classes on the last dim) against integer labels; labels equal to ignore_index
    don't count (the mean divides by the counted ones).

    >>> from frontend import Tensor
    >>> round(Tensor([[0.0, 0.0]]).sparse_categorical_crossentropy(Tensor([0])).item(), 4)
    0.6931
    """
    if not 0.0 <= label_smoothing <= 1.0: raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    if Y.shape != self.shape[:-1]: raise RuntimeError(f"sparse_categorical_crossentropy: labels {Y.shape} don't match logits {self.shape}")
    log_probs = self.log_softmax()
    counted = (Y != ignore_index).detach()
    y = Y._one_hot_mask(self.shape[-1]) & counted.unsqueeze(-1)
    smoothing = label_smoothing * (log_probs.mean(-1) * counted)
    ret = -((1 - label_smoothing) * y.where(log_probs, 0).sum(-1) + smoothing)
    ret = check_index(ret, Y, self.shape[-1], "sparse_categorical_crossentropy labels", IndexError, counted=counted)
    return ret.sum() / counted.sum() if reduction == "mean" else ret._do_reduction(reduction)

  def binary_crossentropy(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:
    """BCE of probabilities; the logs are clamped at -100 like torch.

    >>> from frontend import Tensor
    >>> round(Tensor([0.5]).binary_crossentropy(Tensor([1.0])).item(), 4)
    0.6931
    """
    return (-(Y * self.log().maximum(-100.0) + (1 - Y) * (1 - self).log().maximum(-100.0)))._do_reduction(reduction)

  def binary_crossentropy_logits(self: Tensor, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """BCE of logits, computed stably: softplus(-x) = max(-x, 0) + log(1 + exp(-|x|)).

    >>> from frontend import Tensor
    >>> round(Tensor([0.0]).binary_crossentropy_logits(Tensor([1.0])).item(), 4)
    0.6931
    """
    sp_neg = (-self).relu() + (1 + (-self.abs()).exp()).log()   # -log(sigmoid(x))
    pw = 1 if pos_weight is None else pos_weight
    return (Y * pw * sp_neg + (1 - Y) * (sp_neg + self))._do_reduction(reduction)

  # ***** normalization, attention, dropout *****
  def layernorm(self: Tensor, axis=-1, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over `axis` (biased variance), without affine parameters; half inputs are
    normalized in float32 (their squares overflow past |x| ~ 256) and rounded back once."""
    if self.dtype in (dtypes.float16, dtypes.bfloat16): return self.float().layernorm(axis, eps).cast(self.dtype)
    y = self - self.mean(axis, keepdim=True)
    return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()

  def batchnorm(self: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor, axis=1) -> Tensor:
    """(x - mean) * invstd * weight + bias with the 1-d parameters laid along `axis`."""
    axes = make_tuple(axis, 1)
    axes = tuple(self._axis(a) for a in axes)
    shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
    x = self - mean.reshape(shape)
    if weight is not None: x = x * weight.reshape(shape)
    x = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
    return x + bias.reshape(shape) if bias is not None else x

  def dropout(self: Tensor, p: float = 0.5) -> Tensor:
    """In training mode (Tensor.training), zero each element with probability p and scale the rest by 1/(1-p)."""
    if not 0.0 <= p <= 1.0: raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not type(self).training or p == 0: return self
    if p == 1: return self * 0
    keep = self.rand(*self.shape, device=self.device) >= p
    return keep.where(self, 0) * (1.0 / (1.0 - p))

  def scaled_dot_product_attention(self: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                   dropout_p: float = 0.0, is_causal: bool = False, enable_gqa: bool = False) -> Tensor:
    """softmax(q @ k^T / sqrt(d) + mask) @ v; a bool mask keeps where True. is_causal masks the future.

    >>> from frontend import Tensor
    >>> q = Tensor([[[0.0], [0.0]]])
    >>> q.scaled_dot_product_attention(q, Tensor([[[1.0], [3.0]]]), is_causal=True).tolist()
    [[[1.0], [2.0]]]
    """
    if enable_gqa:
      key = key.repeat_interleave(self.shape[-3] // key.shape[-3], dim=-3)
      value = value.repeat_interleave(self.shape[-3] // value.shape[-3], dim=-3)
    qk = self.matmul(key.transpose(-2, -1)) * (1.0 / math.sqrt(self.shape[-1]))
    if is_causal:
      if attn_mask is not None: raise RuntimeError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
      L, S = qk.shape[-2:]
      attn_mask = self.arange(L, device=self.device).unsqueeze(-1) >= self.arange(S, device=self.device)
    if attn_mask is not None:
      qk = attn_mask.where(qk, -math.inf) if attn_mask.dtype.is_bool else qk + attn_mask
    return qk.softmax(-1).dropout(dropout_p) @ value

  # ***** gather / scatter / one_hot *****
  def one_hot(self: Tensor, num_classes: int = -1) -> Tensor:
    """Integer one-hot encoding on a new last dim (num_classes=-1: max + 1, which reads the data).

    >>> from frontend import Tensor
    >>> Tensor([0, 2]).one_hot(3).tolist()
    [[1, 0, 0], [0, 0, 1]]
    """
    if not self.dtype.is_int: raise TypeError(f"one_hot: needs an integer tensor, got {self.dtype}")
    if num_classes == -1: num_classes = int(self.max().item()) + 1
    return check_index(self._one_hot_mask(num_classes).where(1, 0), self, num_classes, "one_hot", RuntimeError)

  def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:
    """out[i][j][k] = self[i][index[i][j][k]][k] (dim=1), like torch.gather.

    >>> from frontend import Tensor
    >>> Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[0, 0], [1, 0]])).tolist()
    [[1, 1], [4, 3]]
    """
    dim = self._axis(dim)
    if index.ndim != self.ndim: raise RuntimeError(f"gather: index {index.shape} and input {self.shape} need the same number of dims")
    if any(i > s for d, (i, s) in enumerate(zip(index.shape, self.shape)) if d != dim):
      raise RuntimeError(f"gather: index {index.shape} is larger than the input {self.shape} outside dim {dim}")
    x = self.shrink(tuple((0, i) if d != dim else None for d, i in enumerate(index.shape))).unsqueeze(-1).transpose(-1, dim)
    sel = index._one_hot_mask(self.shape[dim])
    return check_index(x._pick(sel, -1), index, self.shape[dim], "gather", RuntimeError)

  def _pre_scatter(self: Tensor, dim: int, index: Tensor, src) -> tuple[int, Tensor, Tensor]:
    """(dim, mask, src) with mask (*self.shape, J): index[.., j at dim, ..] hits position k of dim, and src laid
    out to broadcast against it; J is index.shape[dim]."""
    dim = self._axis(dim, op="scatter")
    if not isinstance(index, NNOpsMixin) or not index.dtype.is_int: raise RuntimeError(f"scatter: index must be an integer tensor, got {getattr(index, 'dtype', type(index).__name__)}")
    if not isinstance(src, NNOpsMixin): src = self.full(index.shape, src, device=self.device, dtype=self.dtype)
    elif src.dtype != self.dtype: raise RuntimeError(f"scatter: src dtype {src.dtype} must equal the input dtype {self.dtype}")
    if index.ndim != self.ndim or src.ndim != self.ndim:
      raise RuntimeError(f"scatter: input {self.shape}, index {index.shape} and src {src.shape} need the same number of dims")
    for d, (i, s, x) in enumerate(zip(index.shape, src.shape, self.shape)):
      if i > s or (d != dim and i > x): raise RuntimeError(f"scatter: index {index.shape} is too large for src {src.shape} / input {self.shape}")
    src = src.cast(self.dtype).shrink(tuple((0, i) for i in index.shape))
    mask = index._one_hot_mask(self.shape[dim]).transpose(dim, -1)   # (*index.shape with dim -> n, J)
    src = src.unsqueeze(-1).transpose(dim, -1)                          # (*index.shape with dim -> 1, J)
    pads = tuple((0, s - i) if d != dim else (0, 0) for d, (s, i) in enumerate(zip(self.shape, index.shape))) + ((0, 0),)
    return dim, mask.pad(pads), src.pad(pads)

  def scatter(self: Tensor, dim: int, index: Tensor, src, reduce: str | None = None) -> Tensor:
    """self with src written at the index positions along dim; a repeated index keeps the last write.
    reduce='add' or 'multiply' combines instead.

    >>> from frontend import Tensor
    >>> Tensor.zeros(3).scatter(0, Tensor([2, 0]), Tensor([5.0, 7.0])).tolist()
    [7.0, 0.0, 5.0]
    """
    if reduce is not None:
      if reduce not in ("add", "multiply"): raise TypeError(f"scatter: reduce must be 'add' or 'multiply', not {reduce!r}")
      if not isinstance(src, NNOpsMixin): src = self.full(index.shape, src, device=self.device, dtype=self.dtype)
      return self.scatter_reduce(dim, index, src, {"add": "sum", "multiply": "prod"}[reduce])
    _, mask, src = self._pre_scatter(dim, index, src)
    pos = self.arange(1, mask.shape[-1] + 1, device=self.device)
    last = mask.where(pos, 0)._reduce(F.Max, -1, True)   # (no index: an empty axis, whose max is the identity 0)
    mask = mask & (pos == last)
    return mask.any(-1).where(src._pick(mask, -1), self)

  def scatter_reduce(self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True) -> Tensor:
    """Combine src into self at the index positions along dim with reduce in sum, prod, mean, amax, amin.

    >>> from frontend import Tensor
    >>> Tensor.ones(3).scatter_reduce(0, Tensor([0, 0, 2]), Tensor([1.0, 2.0, 3.0]), "sum").tolist()
    [4.0, 1.0, 4.0]
    """
    if not isinstance(src, NNOpsMixin): raise TypeError(f"scatter_reduce: src must be a Tensor, not {type(src).__name__}")
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
      raise RuntimeError(f"scatter_reduce: reduce must be one of sum, prod, mean, amax, amin, not {reduce!r}")
    _, mask, src = self._pre_scatter(dim, index, src)
    hit = mask.any(-1)
    # positions no index hits keep self as it is (self + 0 made -0.0 +0.0, and quieted a signaling NaN)
    def plus_self(r: Tensor) -> Tensor:
      # self first, then the hits (torch's order): when every hit is -0.0 (or none) that is self exactly
      # (x + -0.0 == x), but the sum r of the hits started at +0.0 is +0.0, and -0.0 + +0.0 is +0.0 (IEEE 754-2019 6.3)
      if not self.dtype.is_float: return hit.where(self + r, self)
      neg0 = (src == 0) & (src.reciprocal() < 0)   # (-0.0: 1 / -0.0 is -inf)
      # where every hit is -0.0 the value is self, but the hits' gradient must still flow (torch: d/dsrc = 1):
      # r.detach() - r is +0.0 there (r is finite) and x - +0.0 == x, -0.0 included (6.3), with r's gradient
      return mask.where(~neg0, False).any(-1).where(self + r, hit.where(self - (r.detach() - r), self))
    if reduce == "sum":
      r = mask.where(src, 0).sum(-1, acc_dtype=self.dtype)
      return plus_self(r) if include_self else hit.where(r, self)
    if reduce == "prod":
      r = mask.where(src, 1).prod(-1)
      return hit.where(self * r if include_self else r, self)
    if reduce == "mean":
      cnt = mask.sum(-1) + int(include_self)
      s = mask.where(src, 0).sum(-1, acc_dtype=self.dtype)
      if include_self: s = plus_self(s)
      return hit.where((s / cnt).cast(self.dtype) if self.dtype.is_float else s.div(cnt.maximum(1), rounding_mode='floor').cast(self.dtype), self)
    if reduce in ("amax", "amin"):
      sgn = 1 if reduce == "amax" else -1
      r = mask.where(src * sgn, dtypes.min(self.dtype) if self.dtype.is_float or not self.dtype.is_unsigned else 0)._reduce(F.Max, -1, False) * sgn
      if include_self: r = r.maximum(self) if reduce == "amax" else r.minimum(self)
      return hit.where(r, self)
    raise RuntimeError(f"scatter_reduce: reduce must be one of sum, prod, mean, amax, amin, not {reduce!r}")

  def masked_select(self: Tensor, mask: Tensor) -> Tensor:
    """The elements where mask (broadcast) is True, as a 1-d tensor. Reads the mask (data-dependent shape)."""
    x, m = self._broadcasted(mask, match_dtype=False)
    pos = np.flatnonzero(m.numpy())
    if pos.size == 0: return self.empty(0, dtype=self.dtype, device=self.device)
    return x.flatten()[type(self)(pos.astype(np.int32), device=self.device)]

  def nonzero(self: Tensor) -> Tensor:
    """Indices (n, ndim) of the nonzero elements. Reads the data (data-dependent shape)."""
    return type(self)(np.argwhere(self.numpy()).astype(np.int32).reshape(-1, self.ndim), device=self.device)

  # ***** cumulative ops *****
  def _cumalu(self: Tensor, axis: int, op: str) -> Tensor:
    """Inclusive scan with op in sum/prod/max along axis: each output reduces a window of the n-1 padded
    predecessors. Long axes are split into blocks of 256 so the work stays O(n * 256), not O(n^2)."""
    axis = self._axis(axis, op=f"cum{op}")   # (a 0-d tensor takes axis 0 or -1 only, as torch)
    if self.ndim == 0: return self
    n = self.shape[axis]
    if n == 0: return self
    ident = {"sum": 0, "prod": 1, "max": dtypes.min(self.dtype)}[op]
    if is_sym(n):   # a scan only looks back: the scan of the Variable's maximum length (ident-padded), cut back to n
      pad = tuple((0, smax(n) - n) if a == axis else None for a in range(self.ndim))
      return self.pad(pad, value=ident)._cumalu(axis, op).shrink(tuple((0, n) if a == axis else None for a in range(self.ndim)))
    red = {"sum": lambda t, a: t.sum(a), "prod": lambda t, a: t.prod(a), "max": lambda t, a: t.max(a)}[op]
    x = self.transpose(axis, -1)
    B = 256
    if n <= 2 * B:
      ret = red(x.pad((n - 1, 0), value=ident)._pool((n,)), -1)
    else:
      m = math.ceil(n / B)
      # contiguous: works around a compiler rewrite loop on windows over pad+reshape (notes/compiler_bugs.md)
      blocks = x.pad((0, m * B - n), value=ident).reshape(*x.shape[:-1], m, B).contiguous()
      inner = blocks._cumalu(-1, op)                                     # (..., m, B)
      tot = inner[..., -1]._cumalu(-1, op)                               # inclusive over blocks
      prev = tot.pad((1, 0), value=ident)[..., :-1].unsqueeze(-1)       # what came before each block
      comb = inner + prev if op == "sum" else inner * prev if op == "prod" else inner.maximum(prev)
      ret = comb.flatten(-2)[..., :n]
    return ret.transpose(axis, -1)

  def cumsum(self: Tensor, axis: int = 0) -> Tensor:
    """Running sum along axis.

    >>> from frontend import Tensor
    >>> Tensor([1, 2, 3]).cumsum().tolist()
    [1, 3, 6]
    """
    return self._cumalu(axis, "sum")
  def cumprod(self: Tensor, axis: int = 0) -> Tensor:
    """Running product along axis."""
    return self._cumalu(axis, "prod")
  def cummax(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
    """(running max, index of the last position reaching it) along axis, like torch.cummax."""
    values = self._cumalu(axis, "max")
    if self.ndim == 0: return values, self.zeros_like(dtype=dtypes.int32)
    axis = self._axis(axis)
    n = self.shape[axis]
    if 0 in self.shape: return values, self.zeros_like(dtype=dtypes.int32)
    x, v = self.transpose(axis, -1), values.transpose(axis, -1)
    ar = self.arange(n, device=self.device)
    ok = (x.unsqueeze(-2) == v.unsqueeze(-1)) & (ar <= ar.unsqueeze(-1))  # (..., j, i): i <= j and x_i == max_j
    return values, ok.where(ar, -1).max(-1).transpose(axis, -1).detach()
  def cummin(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
    """(running min, index) along axis."""
    if self.dtype.is_unsigned or self.dtype.is_bool:
      v, i = (~self).cummax(axis)
      return ~v, i
    v, i = (-self).cummax(axis)
    return -v, i
  def logcumsumexp(self: Tensor, axis: int = 0) -> Tensor:
    """log(cumsum(exp(x))) along axis, stable: each output is a logsumexp over its own window."""
    if self.ndim == 0: return self
    axis = self._axis(axis)
    n = self.shape[axis]
    if n == 0: return self
    x = self.transpose(axis, -1)._float()
    return x.pad((n - 1, 0), value=-math.inf)._pool((n,)).logsumexp(-1).transpose(axis, -1)

  # ***** sorting *****
  def sort(self: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
    """(sorted values, their original indices) along dim; stable (ties keep their order). Built from an
    all-pairs rank (O(n^2) per row), so it suits the modest row lengths of model code.

    >>> from frontend import Tensor
    >>> v, i = Tensor([3, 1, 2]).sort(descending=True)
    >>> v.tolist(), i.tolist()
    ([3, 2, 1], [0, 2, 1])
    """
    if self.ndim == 0: return self, self.zeros_like(dtype=dtypes.int32)
    dim = self._axis(dim)
    n = self.shape[dim]
    x = self.transpose(dim, -1)
    xi, xj = x.detach().unsqueeze(-1), x.detach().unsqueeze(-2)   # item i on dim -2, j on dim -1; ranks carry no gradient
    ar = self.arange(n, device=self.device)
    before = (xj > xi) if descending else (xj < xi)
    rank = (before | ((xj == xi) & (ar < ar.unsqueeze(-1)))).sum(-1)   # (..., n): final position of item i
    pick = rank.unsqueeze(-1) == ar                              # (..., i, k)
    vals = (pick & xi).any(-2) if self.dtype.is_bool else pick.where(x.unsqueeze(-1), 0).sum(-2, acc_dtype=self.dtype)
    idx = pick.where(ar.unsqueeze(-1), 0).sum(-2)
    return vals.transpose(dim, -1), idx.transpose(dim, -1).detach()
  def argsort(self: Tensor, dim: int = -1, descending: bool = False) -> Tensor:
    """Indices that sort along dim."""
    return self.sort(dim, descending)[1]
  def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Tensor, Tensor]:
    """(values, indices) of the k largest (or smallest) along dim, in sorted order.

    >>> from frontend import Tensor
    >>> Tensor([1, 5, 3]).topk(2)[0].tolist()
    [5, 3]
    """
    dim = self._axis(dim)
    if not 0 <= k <= self.shape[dim]: raise RuntimeError(f"topk: k={k} is out of range for dim {dim} of size {self.shape[dim]}")
    v, i = self.sort(dim, descending=largest)
    sl = tuple((0, k) if d == dim else None for d in range(self.ndim))
    return v.shrink(sl), i.shrink(sl)

  # ***** triangles, diagonals, grids *****
  def _tri_mask(self: Tensor, diagonal: int) -> Tensor:
    r, c = self.shape[-2:]
    return (self.arange(r, device=self.device).unsqueeze(-1) + diagonal) >= self.arange(c, device=self.device)
  def tril(self: Tensor, diagonal: int = 0) -> Tensor:
    """Lower triangle of the last two dims (j <= i + diagonal), zeros above.

    >>> from frontend import Tensor
    >>> Tensor.ones(2, 2).tril().tolist()
    [[1.0, 0.0], [1.0, 1.0]]
    """
    if self.ndim < 2: raise ValueError(f"tril: needs at least 2 dims, got {self.shape}")
    return self._tri_mask(diagonal).where(self, self.zeros_like())
  def triu(self: Tensor, diagonal: int = 0) -> Tensor:
    """Upper triangle of the last two dims (j >= i + diagonal), zeros below."""
    if self.ndim < 2: raise ValueError(f"triu: needs at least 2 dims, got {self.shape}")
    return self._tri_mask(diagonal - 1).where(self.zeros_like(), self)
  def diagonal(self: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of dims (dim1, dim2) as a new last dim, like torch.diagonal.

    >>> from frontend import Tensor
    >>> Tensor.arange(9).reshape(3, 3).diagonal().tolist()
    [0, 4, 8]
    """
    a, b = self._axis(dim1), self._axis(dim2)
    if a == b: raise RuntimeError(f"diagonal: dim1 and dim2 are both {a}")
    x = self.permute(*[i for i in range(self.ndim) if i not in (a, b)], a, b)
    r, c = x.shape[-2:]
    pre = x.shape[:-2]
    lo_r, lo_c = (0, min(offset, c)) if offset >= 0 else (min(-offset, r), 0)
    n = max(0, min(r - lo_r, c - lo_c))
    x = x.shrink(tuple([None] * len(pre) + [(lo_r, lo_r + n), (lo_c, lo_c + n)]))
    if n == 0: return x.reshape(*pre, 0)
    # a row stride of n+1 in the flat n*n block walks the diagonal
    x = x.flatten(-2).pad(tuple([None] * len(pre) + [(0, n)])).reshape(*pre, n, n + 1)
    return x.shrink(tuple([None] * len(pre) + [(0, n), (0, 1)])).reshape(*pre, n)
  def diag(self: Tensor, diagonal: int = 0) -> Tensor:
    """1-d: a square matrix with self on the given diagonal; 2-d: that diagonal (like torch.diag).

    >>> from frontend import Tensor
    >>> Tensor([1, 2]).diag().tolist()
    [[1, 0], [0, 2]]
    """
    if self.ndim == 2: return self.diagonal(diagonal)
    if self.ndim != 1: raise ValueError(f"diag: needs a 1-d or 2-d tensor, got {self.shape}")
    n = self.shape[0]
    ar = self.arange(n, device=self.device)
    m = (ar.unsqueeze(-1) == ar).where(self, self.zeros_like())
    k = abs(diagonal)
    return m.pad(((0, k), (k, 0)) if diagonal > 0 else ((k, 0), (0, k))) if k else m
  def meshgrid(self: Tensor, *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-d tensors ('ij' matrix or 'xy' Cartesian indexing)."""
    if indexing not in ("ij", "xy"): raise RuntimeError(f"meshgrid: indexing must be 'ij' or 'xy', not {indexing!r}")
    ts = (self,) + args
    for t in ts:
      if t.ndim > 1: raise RuntimeError(f"meshgrid: inputs must be 0-d or 1-d, got {t.shape}")
    shape = tuple(t.numel() for t in ts)
    outs = [t.reshape(*[1] * i, -1, *[1] * (len(ts) - i - 1)).expand(shape) for i, t in enumerate(ts)]
    return tuple(o.transpose(0, 1) for o in outs) if indexing == "xy" and len(ts) > 1 else tuple(outs)
  def unfold(self: Tensor, dim: int, size: int, step: int) -> Tensor:
    """Windows of `size` every `step` along dim: that dim becomes the window count and a new last dim of size
    `size` holds each window (a view, like torch.Tensor.unfold).

    >>> from frontend import Tensor
    >>> Tensor.arange(5).unfold(0, 2, 2).tolist()
    [[0, 1], [2, 3]]
    """
    d = self._axis(dim, op="unfold")
    if size < 0: raise RuntimeError(f"unfold: size must be >= 0, got {size}")
    if step <= 0: raise RuntimeError(f"unfold: step must be > 0, got {step}")
    if size > self.shape[d]: raise RuntimeError(f"unfold: size {size} is larger than dim {d} of {self.shape}")
    nd = self.ndim
    if size == 0:   # (n - 0) // step + 1 empty windows
      # (an empty view of self, not a new tensor: it stays in the graph, so self gets a (zero) gradient)
      cnt = self.shape[d] // step + 1
      empty = self.unsqueeze(-1).shrink(tuple([None] * nd + [(0, 0)]))
      return empty.reshape(*[cnt if i == d else s for i, s in enumerate(self.shape)], 0)
    x = self.permute(*[i for i in range(nd) if i != d], d)._pool((size,), step)
    perm = list(range(nd - 1))
    perm.insert(d, nd - 1)
    return x.permute(*perm, nd)

  def normalize(self: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """x / max(||x||_p, eps) along dim (torch.nn.functional.normalize)."""
    norm = self.abs().pow(p).sum(dim, keepdim=True).pow(1.0 / p) if p != 2 else self.square().sum(dim, keepdim=True).sqrt()
    return self / norm.maximum(eps)

  # ***** einsum, interpolate, multinomial *****
  @staticmethod
  def einsum(formula: str, *operands, dtype=None, acc_dtype=None) -> Tensor:
    """Einstein summation, e.g. Tensor.einsum("ij,jk->ik", a, b); supports '...', implicit output, and
    repeated letters in one operand (diagonals).

    >>> from frontend import Tensor
    >>> Tensor.einsum("ij,j->i", Tensor([[1, 2], [3, 4]]), Tensor([1, 1])).tolist()
    [3, 7]
    """
    xs = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
    acc_dtype = dtype if dtype is not None else acc_dtype
    formula = formula.replace(" ", "")
    lhs, out = formula.split("->") if "->" in formula else (formula, None)
    ins = lhs.split(",")
    if len(ins) != len(xs): raise ValueError(f"einsum: {len(ins)} operands in {formula!r} but {len(xs)} given")
    if "..." in formula:
      spare = [c for c in string.ascii_letters if c not in formula]
      ne = max(x.ndim - (len(s) - 3) for s, x in zip(ins, xs) if "..." in s)
      ell = "".join(spare[:ne])
      ins = [s.replace("...", ell[ne - (x.ndim - (len(s) - 3)):]) if "..." in s else s for s, x in zip(ins, xs)]
      if out is not None: out = out.replace("...", ell)
      else: out = ell + "".join(sorted(c for c in set("".join(ins)) if "".join(ins).count(c) == 1 and c not in ell))
    if out is None: out = "".join(sorted(c for c in set("".join(ins)) if "".join(ins).count(c) == 1))
    for s, x in zip(ins, xs):
      if len(s) != x.ndim: raise RuntimeError(f"einsum: {s!r} has {len(s)} letters but its operand has shape {x.shape}")
      for c in set(s):
        if len({n for l, n in zip(s, x.shape) if l == c}) > 1:
          raise RuntimeError(f"einsum: letter {c!r} repeats in {s!r} over dims of different sizes {x.shape}")
    for c in out:
      if c not in "".join(ins): raise RuntimeError(f"einsum: output letter {c!r} appears in no input of {formula!r}")
      if out.count(c) > 1: raise RuntimeError(f"einsum: output letter {c!r} appears more than once in {formula!r}")
    summed = sorted(set("".join(ins)) - set(out))
    order = list(out) + summed
    sizes: dict[str, int] = {}
    aligned = []
    for s, x in zip(ins, xs):
      s = list(s)
      while len(set(s)) != len(s):   # a letter twice in one operand: take that diagonal
        c = next(c for c in s if s.count(c) > 1)
        a = s.index(c)
        b = s.index(c, a + 1)
        x = x.diagonal(0, a, b)
        s = [l for i, l in enumerate(s) if i not in (a, b)] + [c]
      for c, n in zip(s, x.shape):
        if sizes.get(c, 1) != 1 and n != 1 and sizes[c] != n:
          raise RuntimeError(f"einsum: letter {c!r} has size {n} in operand {''.join(s)!r} {x.shape}, which doesn't broadcast with size {sizes[c]}")
        if sizes.get(c, 1) == 1: sizes[c] = n   # a size-1 dim broadcasts; 0 is a real size
      x = x.permute(*sorted(range(len(s)), key=lambda i: order.index(s[i])))
      present = sorted(s, key=order.index)
      aligned.append(x.reshape(*[x.shape[present.index(c)] if c in present else 1 for c in order]))
    prod_ = aligned[0]
    for a in aligned[1:]: prod_ = prod_ * a
    prod_ = prod_.expand(*[sizes[c] for c in order]) if summed else prod_
    ret = prod_.sum(tuple(range(len(out), len(order))), acc_dtype=acc_dtype) if summed else prod_
    return ret.expand(*[sizes[c] for c in out]) if ret.shape != tuple(sizes[c] for c in out) else ret

  def interpolate(self: Tensor, size: Sequence[int], mode: str = "linear", align_corners: bool = False) -> Tensor:
    """Resize the last len(size) dims: mode 'nearest', 'nearest-exact' or 'linear' ('bilinear'/'trilinear'
    accepted: linear along every resized dim), with torch's coordinate conventions. Each dim is a small
    matrix product with the interpolation weights, so it is differentiable.

    >>> from frontend import Tensor
    >>> [round(v, 4) for v in Tensor([1.0, 3.0]).interpolate((4,), align_corners=True).tolist()]
    [1.0, 1.6667, 2.3333, 3.0]
    """
    if mode not in ("linear", "bilinear", "trilinear", "nearest", "nearest-exact"): raise ValueError(f"interpolate: unknown mode {mode!r}")
    size = tuple(size)
    if not 0 < len(size) <= self.ndim: raise ValueError(f"interpolate: size {size} must name 1 to {self.ndim} dims of the input {self.shape}")
    if any(not isinstance(n, int) or n <= 0 for n in size): raise ValueError(f"interpolate: sizes must be positive ints, got {size}")
    if align_corners and mode.startswith("nearest"): raise ValueError(f"interpolate: align_corners can only be set with linear modes, not {mode!r}")
    if self.dtype == dtypes.uint8 and not mode.startswith("nearest") and len(size) == 2: return self._interpolate_u8(size, align_corners)
    x = self._float()
    for d in range(-len(size), 0):
      w = type(self)(_interp_matrix(x.shape[d], size[d], mode, align_corners, np.float32).T.copy(), device=self.device, dtype=x.dtype)
      x = (x.transpose(d, -1) @ w).transpose(d, -1)   # (w: (n_in, n_out))
    return x if self.dtype.is_float else x.round().cast(self.dtype)

  def _interpolate_u8(self: Tensor, size: tuple, align_corners: bool) -> Tensor:
    """Bilinear resize of uint8 images as torch's CPU kernel computes it (aten/src/ATen/native/cpu/UpSampleKernel.cpp,
    its uint8 separable path, which follows Pillow's resample): the weights as integers with `prec` fraction bits (the
    most that keep the largest weight * 2**prec below 2**15), each output (sum + 2**(prec-1)) >> prec clamped to
    0..255, the width resized first and stored as uint8 before the height is. Float weights rounded once at the end
    differ from torch by 1 in ~17% of the pixels."""
    x = self
    for d in (-1, -2):
      m = _interp_matrix(x.shape[d], size[d], "linear", align_corners, np.float64)
      prec = 0
      while prec < 22 and round(float(m.max()) * (1 << (prec + 1))) < (1 << 15): prec += 1
      w = type(self)(np.floor(0.5 + m.T * (1 << prec)).astype(np.int32), device=self.device)   # (n_in, n_out)
      acc = x.cast(dtypes.int32).transpose(d, -1) @ w
      x = ((acc + (1 << (prec - 1))) >> prec).clip(0, 255).cast(dtypes.uint8).transpose(d, -1)
    return x

  def multinomial(self: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:
    """Sample class indices from the (unnormalized) weights in the last dim (1-d or 2-d)."""
    if not 1 <= self.ndim <= 2: raise ValueError(f"multinomial: needs 1-d or 2-d weights, got {self.shape}")
    if not replacement and num_samples > 1: raise NotImplementedError("multinomial: num_samples > 1 needs replacement=True")
    w = self.unsqueeze(0) if self.ndim == 1 else self
    cw = w.cumsum(1)._float()
    cdf = cw / cw[:, -1].unsqueeze(1)
    u = self.rand(num_samples, cdf.shape[0], 1, device=self.device)
    idx = (u >= cdf.unsqueeze(0)).sum(2).permute(1, 0).cast(dtypes.int32)
    return idx.squeeze(0) if self.ndim == 1 else idx


# ***** convolution with its gradients as convolutions *****

def _computed_by_reduce(lb) -> bool:
  """An unrealized value whose elementwise chain holds a reduction of its own size (a conv's output, + bias, relu):
  what the padded copy would otherwise inline. Elementwise values of realized buffers stay fused into the copy."""
  if isinstance(lb, MultiLazyBuffer): lb = lb.lbs[0]   # (a sharded value: every shard is computed the same way)
  if lb.is_view or lb.buffer is not None: return False
  n, stack, seen = prod(lb.shape), [lb], set()
  while stack:
    b = stack.pop()
    if id(b) in seen or b.buffer is not None: continue
    seen.add(id(b))
    if b.op is Ops.REDUCE_AXIS:
      if prod(b.shape) == n: return True
      continue
    stack.extend(s.base for s in b.srcs)
  return False

def _conv_fn_ok(x: Tensor, w: Tensor, groups, stride, dilation, pads: list[int], acc_dtype) -> bool:
  """Whether _ConvFn covers this conv: float32, one group, stride and dilation 1, padding at most kernel-1 per side
  (the input gradient's padding kernel-1-p must not be negative). Others keep the composite gradient."""
  nd = w.ndim - 2
  return (groups == 1 and all(s == 1 for s in make_tuple(stride, nd)) and all(d == 1 for d in make_tuple(dilation, nd)) and acc_dtype is None
          and x.dtype is dtypes.float32 and w.dtype is dtypes.float32 and x.device == w.device and
          all(p <= k - 1 for k, pb, pa in zip(w.shape[2:], pads[-2::-2], pads[::-2]) for p in (pb, pa)))

def _interp_matrix(n_in: int, n_out: int, mode: str, align_corners: bool, dt) -> np.ndarray:
  """(n_out, n_in) weights of a 1-d resize with torch's source coordinates (nearest, nearest-exact, linear)."""
  j, M = np.arange(n_out, dtype=dt), np.zeros((n_out, n_in), dtype=dt)
  if mode.startswith("nearest"):
    sc = dt(n_in / n_out)
    src = np.floor((j + dt(0.5)) * sc) if mode == "nearest-exact" else np.floor(j * sc)
    M[np.arange(n_out), np.minimum(src.astype(np.int64), n_in - 1)] = 1.0
    return M
  if align_corners: src = j * dt((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
  else: src = np.maximum((j + dt(0.5)) * dt(n_in / n_out) - dt(0.5), 0)
  lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
  lam = (src - lo).astype(dt)
  np.add.at(M, (np.arange(n_out), lo), 1 - lam)
  np.add.at(M, (np.arange(n_out), np.minimum(lo + 1, n_in - 1)), lam)
  return M

def _pad_to(x: Tensor, befores: list[int], sizes: list[int]) -> Tensor:
  """The last len(sizes) dims of x padded by `befores` in front and cut or zero-extended at the end to `sizes`."""
  nd = len(sizes)
  x = x.pad(tuple([None] * (x.ndim - nd) + [(b, max(0, n - i - b)) for i, b, n in zip(x.shape[-nd:], befores, sizes)]))
  return x.shrink(tuple([None] * (x.ndim - nd) + [(0, n) for n in sizes]))

class _no_grad:
  """`with _no_grad():` the ops inside record no autograd graph (a Function's forward/backward built from Tensors)."""
  def __enter__(self):
    from frontend.tensor import Tensor
    self.prev, Tensor.no_grad = Tensor.no_grad, True
  def __exit__(self, *_):
    from frontend.tensor import Tensor
    Tensor.no_grad = self.prev

def _col_phase_conv(x: Tensor, w: Tensor, groups: int, s_: tuple, pb: list[int], out: list[int]) -> Tensor:
  """A 2-d strided conv (no gradient) vectorized along its output row: the padded input's column phases copied apart,
  x'[n, c, y, rx, b] = xpad[n, c, y, b*sx + rx] (one copy, as the padded copy would be), so that tap kx = q*sx + rx of
  output column ox reads x'[.., rx, ox + q], contiguous along ox; the rows' stride is kept (a strided row index leaves
  every load contiguous along the output row). Exactly the conv's taps: the kernel's tap loop reads phase kx % sx at
  offset kx // sx. Output channels first, so no transpose follows (the channels-vectorized _conv_fwd_cout needs one,
  plus a weight copy: 4 kernels where this takes 2, ~0.3 ms less for 32x64x32x32 s=2 on 2 cores)."""
  bs, c, (co, ci), (kh, kw), (sy, sx), grp = x.shape[0], x.shape[1], w.shape[:2], w.shape[2:], s_, groups
  kq = -(-kw // sx)
  xp = _pad_to(x, pb, [sy * (out[0] - 1) + kh, sx * (out[1] + kq - 1)])
  # stored (n, c, y, rx, b): a row's phases side by side (the taps of one (c, ky) read neighbouring lines: measured
  # 3.4 vs 3.6 ms for the conv kernel with the phases whole planes apart), viewed as (n, c, rx, y, b) to slide windows
  xs = xp.reshape(bs, c, xp.shape[2], out[1] + kq - 1, sx).permute(0, 1, 2, 4, 3).contiguous().permute(0, 1, 3, 2, 4)
  xw = xs._pool((kh, kq), (sy, 1))                                                 # (bs, c, rx, oy, ox, ky, q)
  xw = xw.permute(0, 3, 4, 1, 5, 6, 2).reshape(bs, *out, c, kh, kq * sx)
  if kq * sx != kw: xw = xw.shrink((None, None, None, None, None, (0, kw)))        # (bs, oy, ox, c, ky, kx)
  xw = xw.reshape(bs, *out, grp, ci, kh, kw).permute(0, 3, 1, 2, 4, 5, 6).reshape(bs, grp, 1, *out, ci, kh, kw)
  y = (xw * w.reshape(1, grp, co // grp, 1, 1, ci, kh, kw)).sum((5, 6, 7))
  # (grouped: realized per group first, as _conv_fwd does: stored merged, every load would divide by the group size)
  return (y.contiguous() if grp > 1 else y).reshape(bs, co, *out)

COUT_ROW_LANES = 8      # the narrowest vector width of the CPUs we build for (AVX2's 8 floats)

def _short_odd_rows(x: Tensor, w: Tensor, groups: int, stride, dilation, oyx: tuple, acc_dtype) -> bool:
  """Whether a stride-1 2-d float32 conv runs vectorized along its output channels (_conv_fwd_cout) rather than along its
  output rows. Rows short and no multiple of 8 (6, 10 wide: a 3x3 conv over 8x8 or 12x12) compute 8 lanes for 6
  (half-width vectors) or 16 for 10 (overlapping ones); on a CPU whose vectors hold more lanes than the row uses well
  (row_lane_use under ROW_LANE_USE_MIN: AVX-512's 16 lanes over beautiful_mnist's rows of 24, 20 and 8) the same holds.
  Vectorized along whole vectors of output channels instead, with a transposing copy of the output (compiler/opt/transpose.py),
  the convs ran faster, gradients included (one core, AVX-512, kernel CPU time: the 5x5 32->32 forward over 20x20
  rows 23.7 -> 16.9 ms, its input gradient over 24x24 rows 29.1 -> 21.5 ms; earlier the mnist CNN's 3x3 forward and
  input gradient 1.5-3x). With more than 8 lanes the conv kernel stores channels-first itself (fused_store; the
  compiler moves its channel loop innermost: compiler/opt/conv.py channels_innermost), so no transposing copy runs.
  Rows of whole vectors, or long enough that the overlap costs little, keep the row tile and its two fewer copies
  (weights, output transposed back)."""
  if not (len(oyx) == 2 and groups == 1 and acc_dtype is None and make_tuple(stride, 2) == (1, 1) and make_tuple(dilation, 2) == (1, 1) and
          x.dtype is dtypes.float32 and w.dtype is dtypes.float32): return False
  n, cout = oyx[-1], w.shape[0]
  if cout % COUT_ROW_LANES == 0 and n % COUT_ROW_LANES != 0 and n < 12: return True
  lanes = _cpu_lanes(x.device)
  return lanes > COUT_ROW_LANES and cout % lanes == 0 and row_lane_use(n, lanes) < ROW_LANE_USE_MIN

def _depthwise_in_place(x: Tensor, w: Tensor, groups: int, stride, dilation, pads: list[int], acc_dtype) -> bool:
  """Whether a padded 2-d float32 depthwise conv (one input channel per group, one output channel each, stride and
  dilation 1, padding at most kernel-1) on a CPU reads its input in place (_depthwise_fwd) rather than from a padded
  copy: its output row must be one conv_tile covers with vectors (compiler/opt/conv.py gated_row_vector), else the
  gated kernel would run as scalars."""
  if not (len(w.shape) == 4 and any(pads) and w.shape[1] == 1 and w.shape[0] == groups == x.shape[1] and acc_dtype is None and
          make_tuple(stride, 2) == (1, 1) and make_tuple(dilation, 2) == (1, 1) and x.dtype is dtypes.float32 and w.dtype is dtypes.float32
          and not any_sym(x.shape) and all(0 <= p <= k - 1 for k, pb, pa in zip(w.shape[2:], pads[-2::-2], pads[::-2]) for p in (pb, pa))):
    return False
  from compiler.opt.conv import gated_row_vector
  ow = x.shape[3] + pads[0] + pads[1] - w.shape[3] + 1
  return (lanes := _cpu_lanes(x.device)) > 1 and gated_row_vector(ow, lanes) is not None

def _depthwise_fwd(x: Tensor, w: Tensor, pads: list[int]) -> Tensor:
  """A depthwise conv (_depthwise_in_place) reading its input in place through the padded view: one kernel whose
  border vectors keep their gates and whose row loop is peeled (compiler/opt/conv.py conv_tile), no padded copy. The
  conv is memory-bound (9 FMAs per pixel loaded), so the copy (a full read and write of the input) cost more than the
  conv (32x64x32x32 3x3, 2 cores, kernel time min over 30 interleaved rounds: 0.94 -> 0.56 ms AVX-512, 1.25 -> 0.88
  ms AVX2). A computed input is realized first (a plain copy): read in place, its ops would run once per tap."""
  c, kh, kw = x.shape[1], *w.shape[2:]
  xw = x.contiguous().pad(pads)._pool((kh, kw))                                   # (bs, c, oy, ox, kh, kw)
  return (xw * w.reshape(1, c, 1, 1, kh, kw)).sum((4, 5))

def _cpu_lanes(device) -> int:
  """float32 lanes of the vectors the device's kernels are built with (1 on a GPU: there a row is not a vector)."""
  t = target_of(device if isinstance(device, str) else device[0])
  return 1 if t.gpu else t.lanes

def _conv_fwd_cout(xp: Tensor, w: Tensor, stride: tuple, groups: int = 1, fused_store: bool = False) -> Tensor:
  """A 2-d strided conv (one group) of the padded input xp (a buffer, cut to the rows and columns the windows reach)
  with the output channels as the vector loop: out[ox, n, oy, co] = sum over c, ky, kx of xp[n, c, oy*sy + ky,
  ox*sx + kx] * W[c, ky, kx, co], the register tile's rows the output columns (neighbours in xp), each a broadcast
  scalar, so the stride costs nothing (a conv vectorized along the output row would need every s-th column). Exactly
  the conv's taps (the column-phase conv computes 12/9 of them for 3x3, s=2), no phase copy; the (ox, n, oy, co)
  result is transposed back in a small copy. Groups: (ox, n, oy, group, co), the group's own channels the vectors.
  `fused_store`: the conv kernel stores channels-first itself (each accumulator vector scattered over its channels'
  planes, once per C x k x k taps), no transposing copy: on AVX-512 its tile stays 8 output columns x 2 vectors, and
  the 32x64x32x32 s=2 forward went 6.45 -> 6.19 ms (one core, CPU time, min of 20 interleaved rounds) with one kernel
  less; on AVX2 the fused kernel's tile has 8 accumulators where the transposed one has 12 (no faster: kept). A
  stride-1 one stores along its sliding row: the compiler moves the channel loop innermost (compiler/opt/conv.py
  channels_innermost) to keep the channel tile."""
  bs, (co, c), HW, grp = xp.shape[0], w.shape[:2], w.shape[2:], groups
  # (the movement chains as one memoized view each: _view_chain, the same graph)
  def windows(xp: Tensor) -> Tensor:
    xw = xp.reshape(bs, grp, c, *xp.shape[2:])._pool(HW, stride)                # (bs, grp, c, oy, ox, ky, kx)
    return xw.permute(0, 3, 4, 1, 2, 5, 6).reshape(bs, oy, ox, grp, 1, c, *HW)
  oy, ox = [(i - k) // s + 1 for i, k, s in zip(xp.shape[2:], HW, make_tuple(stride, 2))]   # (what _pool makes)
  xw = _view_chain(xp, ("cout-x", bs, grp, c, oy, ox, *HW, *make_tuple(stride, 2)), windows)
  wt = _view_chain(w, ("cout-w0", grp, co, c, *HW), lambda w: w.reshape(grp, co // grp, c, *HW).permute(0, 2, 3, 4, 1)).contiguous()
  wt = _view_chain(wt, ("cout-w1", grp, co, c, *HW), lambda w: w.permute(0, 4, 1, 2, 3).reshape(1, 1, 1, grp, co // grp, c, *HW))
  y = (xw * wt).sum((5, 6, 7)).reshape(bs, oy, ox, co)
  if fused_store: return y.permute(0, 3, 1, 2).contiguous()
  return _view_chain(y.contiguous(), ("cout-y",), lambda y: y.permute(0, 3, 1, 2)).contiguous()

def _conv_rewrite(x: Tensor, w: Tensor, groups: int, stride, dilation, pads: list[int], acc_dtype) -> Tensor | None:
  """A 2-d strided or dilated conv as kernels the conv register tiles take (None for any other conv) instead of the
  composite ones (a stride-s row has no contiguous load to vectorize; the composite gradient folds a windowed tensor
  back with a gated kernel):
  - stride s, a forward alone whose output row is a multiple of 8: the column-phase conv (_col_phase_conv), exactly
    the conv's taps, vectorized along the output row (on 8 lanes not when the input is read in place: _in_place_8_lanes);
  - stride s, each group's output channels a multiple of 8: exactly the conv's taps (_StridedConvFn): the forward
    vectorized along the output channels (_conv_fwd_cout), the input gradient as its output phases' stride-1 convs
    (_strided_dgrad), the weight gradient a strided window reduction (_conv_wgrad);
  - other strides (space to depth): the padded input's s x s phases become channels, x'[n, c*s*s + ry*s + rx, a, b] =
    xpad[n, c, a*s + ry, b*s + rx], the kernel (zero-padded to a multiple of s) likewise, w'[co, c*s*s + ry*s + rx, qy, qx]
    = w[co, c, qy*s + ry, qx*s + rx]: a ceil(k/s)-wide stride-1 conv over s*s times the channels (3x3, s=2: 2x2 over 4C,
    16/9 of the arithmetic at the dense conv's speed). Its forward alone (and, with a gradient, the value of the forward)
    is the cheaper column-phase conv (_col_phase_conv: the conv's own taps, the rows' stride kept); the gradients are the
    space-to-depth conv's, with the kernel shifted so that the phases are x's own, padded by the conv (see below);
  - dilation d (phases to batch), when a gradient is needed: out[n, co, qy*d + ry, qx*d + rx] = sum w[ky, kx]
    xpad[n, c, (qy + ky)*d + ry, ...]: each of the d*d phases of the padded input is an image of its own, convolved with
    w undilated; the outputs interleave back.
  Both copy the input once (as the padded copy would); the groups carry over (a group's channels stay together)."""
  if w.ndim != 4 or acc_dtype is not None: return None
  s_, d_, HW = make_tuple(stride, 2), make_tuple(dilation, 2), w.shape[2:]
  if all(v == 1 for v in s_ + d_) or (any(s > 1 for s in s_) and any(d > 1 for d in d_)): return None
  bs, c, (co, ci) = x.shape[0], x.shape[1], w.shape[:2]
  pb, pa = pads[-2::-2], pads[::-2]   # (before, after) per spatial dim, first dim first
  out = [(i + b + a - d * (k - 1) - 1) // s + 1 for i, b, a, k, s, d in zip(x.shape[2:], pb, pa, HW, s_, d_)]
  grad = (x.requires_grad or w.requires_grad) and not x.__class__.no_grad
  # a group's output channels a multiple of 8 (the vector loop of _conv_fwd_cout): exactly the conv's taps, forward
  # and gradients (see _StridedConvFn); other strided convs go through the phases below
  # a forward alone whose output row holds whole vectors: vectorized along that row (_col_phase_conv, no transposes)
  # (on a CPU of 16 lanes a row of fewer than 32 outputs is one vector per row: the output channels as whole vectors ran
  # the bench's 32x64x32x32 s=2 forward faster, one core: 5.4 -> 4.0 ms for the conv kernel, plus a 0.3 ms transpose)
  sizes = [s * (o - 1) + k for s, o, k in zip(s_, out, HW)]   # (the padded input the windows reach)
  in_place8 = any(s > 1 for s in s_) and not grad and _in_place_8_lanes(x, w, groups, pb, out, sizes)
  if any(s > 1 for s in s_) and not grad and out[1] % 8 == 0 and not _strided_cout_rows(x, w, groups, out[1]) and not in_place8:
    return _col_phase_conv(x, w, groups, s_, pb, out)
  if any(s > 1 for s in s_) and (co // groups) % 8 == 0 and x.dtype is dtypes.float32 and w.dtype is dtypes.float32 and x.device == w.device:
    if grad: return _StridedConvFn.apply(x, w, stride=s_, pads=tuple(pads), out=tuple(out), groups=groups)
    fused = _cpu_lanes(x.device) > COUT_ROW_LANES or in_place8
    # (a computed input realized first: read in place, its ops would run once per tap)
    xp = _pad_to(x.contiguous(), pb, sizes) if fused and _strided_in_place(x, pb, sizes) else _padded_rows_first(x, pb, sizes)
    return _conv_fwd_cout(xp, w, s_, groups, fused_store=fused)
  if any(s > 1 for s in s_) and not grad: return _col_phase_conv(x, w, groups, s_, pb, out)
  if any(s > 1 for s in s_):
    # the kernel shifted by t = -pb mod s (t zero taps in front) makes the padding pb + t a multiple of s: the phases
    # of the padded input are then x's own phases padded by P = (pb + t) / s, which the conv pads, so the input
    # gradient is computed for x's pixels only (16x16 per phase, not 17x17 with the border: odd vectors, ~2x slower)
    t = [(-b) % s for b, s in zip(pb, s_)]
    kq = [-(-(k + tt) // s) for k, tt, s in zip(HW, t, s_)]
    P = [(b + tt) // s for b, tt, s in zip(pb, t, s_)]
    m = [-(-i // s) for i, s in zip(x.shape[2:], s_)]
    A = [max(0, o + q - 1 - p - mm) for o, q, p, mm in zip(out, kq, P, m)]
    if not all(p <= q - 1 and a <= q - 1 for p, a, q in zip(P, A, kq)):   # (more padding: the padded input's phases)
      t, P, A, kq = [0, 0], [0, 0], [0, 0], [-(-k // s) for k, s in zip(HW, s_)]
      m = [o + q - 1 for o, q in zip(out, kq)]
      xp = _pad_to(x, pb, [s * mm for s, mm in zip(s_, m)])
    else: xp = _pad_to(x, [0, 0], [s * mm for s, mm in zip(s_, m)])
    xs = xp.reshape(bs, c, m[0], s_[0], m[1], s_[1]).permute(0, 1, 3, 5, 2, 4)
    xs = xs.reshape(bs, c * s_[0] * s_[1], m[0], m[1]).contiguous()
    wp = _pad_to(w, t, [q * s for q, s in zip(kq, s_)]).reshape(co, ci, kq[0], s_[0], kq[1], s_[1]).permute(0, 1, 3, 5, 2, 4)
    # the phase weight as a buffer of its own (small): read in place, every tap of the conv's inner loop would redo the
    # pad's gate and the phase permute's divisions (a 2.4x slower conv kernel)
    wp = wp.reshape(co, ci * s_[0] * s_[1], kq[0], kq[1]).contiguous()
    cpads = (P[1], A[1], P[0], A[0])
    if groups > 1: y = xs.conv2d(wp, groups=groups, padding=cpads)
    else:
      # the forward as the column-phase conv (faster than the 2x2-phase one), the gradients as the 2x2-phase
      # conv's (_ConvFn's, which flow back through the phase copy to x and w)
      with _no_grad(): fast = _col_phase_conv(x.detach(), w.detach(), groups, s_, pb, out).lazydata
      y = _ConvFn.apply(xs, wp, pads=cpads, fwd=fast)
    return y if tuple(y.shape[2:]) == tuple(out) else y.shrink((None, None, (0, out[0]), (0, out[1])))
  # a dilated forward alone is tiled as it is (its row is contiguous): the phases' copies pay off in the gradient only
  if not grad: return None
  q = [-(-o // d) for o, d in zip(out, d_)]
  # the phases of x itself (shifted by pb mod d), each padded by the conv (pb // d before): the padded phase's border
  # is then the conv's padding, so the input gradient (_ConvFn's) is computed for x's pixels only, not for the padding
  # (an 18x18 instead of a 16x16 row per phase image: odd vectors, 2.3x slower than the forward)
  b0, P = [b % d for b, d in zip(pb, d_)], [b // d for b, d in zip(pb, d_)]
  m = [-(-(i + b) // d) for i, b, d in zip(x.shape[2:], b0, d_)]
  A = [max(0, qq + k - 1 - p - mm) for qq, k, p, mm in zip(q, HW, P, m)]
  if all(p <= k - 1 and a <= k - 1 for p, a, k in zip(P, A, HW)): sz, cpads = m, [P[1], A[1], P[0], A[0]]
  else: sz, b0, cpads = [qq + k - 1 for qq, k in zip(q, HW)], pb, [0, 0, 0, 0]   # (more padding: the padded phases)
  xp = _pad_to(x, b0, [d * n for d, n in zip(d_, sz)])
  xs = xp.reshape(bs, c, sz[0], d_[0], sz[1], d_[1]).permute(0, 3, 5, 1, 2, 4)
  # (the conv realized on its own: its permuted store fused into the conv kernel would leave it no contiguous row)
  y = xs.reshape(bs * d_[0] * d_[1], c, sz[0], sz[1]).contiguous().conv2d(w, groups=groups, padding=cpads)
  if tuple(y.shape[2:]) != tuple(q): y = y.shrink((None, None, (0, q[0]), (0, q[1])))
  y = y.contiguous()
  y = y.reshape(bs, d_[0], d_[1], co, q[0], q[1]).permute(0, 3, 4, 1, 5, 2).reshape(bs, co, q[0] * d_[0], q[1] * d_[1])
  # interleaved back into a buffer of its own: a consumer reading the phases in place gets no vectors (a loss summed
  # over that view ran as one scalar accumulator over millions of values: 1e-3 relative error, 170x the contiguous sum's)
  return (y.shrink((None, None, (0, out[0]), (0, out[1]))) if q[0] * d_[0] != out[0] or q[1] * d_[1] != out[1] else y).contiguous()

def _strided_in_place(x: Tensor, pb: list[int], sizes: list[int]) -> bool:
  """Whether the strided forward (no gradient, fused store) reads x in place through the padded view instead of a
  padded copy: padding of at most one row and column, before only (a 3x3 s=2 p=1 conv of an even-sized input, as
  ResNet's downsampling convs). Its kernel's gates are then the first output row's (peeled off: compiler/opt/conv.py
  peel_default) and the first output column's, and the copy (a full write and read of the input) is gone: 32x64x32x32
  s=2, AVX-512, one core, CPU time, min of 20 in one process, three runs: 3.82-3.96 ms against 4.67-5.17 with the
  rows-first copy (load 5.2-5.5). Other padding keeps the copy (gates in every piece of the peeled loops)."""
  return not any_sym(x.shape) and all(0 <= b <= 1 and n <= b + i for b, n, i in zip(pb, sizes, x.shape[2:]))

IN_PLACE_8_LANES = True   # off: on 8 lanes the strided forward alone is the column-phase conv (_col_phase_conv)

def _in_place_8_lanes(x: Tensor, w: Tensor, groups: int, pb: list[int], out: list[int], sizes: list[int]) -> bool:
  """Whether a strided float32 forward alone on a CPU of 8 lanes (AVX2) reads x in place (_strided_in_place), its
  output channels the vectors and its store fused (_conv_fwd_cout), instead of the column-phase conv (_col_phase_conv:
  a padded copy, 12/9 of the taps). Its first output row's kernel-row loop is peeled too (compiler/opt/conv.py
  peel_fixed_reductions), or the gated row spills. 32x64x32x32 s=2, one core, CPU time, min of 12 in one process
  (load 1.2-1.5): 7.9-9.0 ms against 9.0-10.0 for the column-phase conv (torch AVX2 9.4-9.9); 2 threads, wall: 5.1-5.8
  against 7.8-11.1 (torch 5.7 in the calmest run)."""
  if not IN_PLACE_8_LANES or _cpu_lanes(x.device) != COUT_ROW_LANES or (w.shape[0] // groups) % COUT_ROW_LANES: return False
  # (outputs of 16 x 16 or more, rows a multiple of 8: the gated pieces, the first row and the first tile of columns,
  # are then at most 1/16 and 1/4 of the taps; at 8 x 8 or rows of 20 and 28, measured no faster or slower)
  if out[0] < 16 or out[1] < 16 or out[1] % COUT_ROW_LANES: return False
  if x.dtype is not dtypes.float32 or w.dtype is not dtypes.float32 or x.device != w.device: return False
  return _strided_in_place(x, pb, sizes)

ROWS_FIRST = True   # _padded_rows_first stores (n, y, c, x); off: (n, c, y, x), the plain padded copy

def _padded_rows_first(x: Tensor, pb: list[int], sizes: list[int]) -> Tensor:
  """x (n, c, h, w) zero-padded by pb in front and cut or extended to `sizes` (_pad_to), stored as (n, y, c, x) and
  returned as its (n, c, y, x) view: the padded input of _conv_fwd_cout. Its tile (output columns x channel vectors)
  sums over c, ky, kx for one output row, so the rows it reads (c and ky of one image) lie in one block of
  kh*C*W floats instead of C planes H*W floats apart. The copy costs the same (rows moved whole), the conv kernel less:
  32x64x32x32 s=2, AVX-512, one core, CPU time, min of 8 interleaved: 4.39 -> 3.89 ms (with its weight copy). On a CPU of
  8 lanes (AVX2: 16 registers) the 6 x 2 tile over this layout spills (13 vector moves, clang 19): the plain copy."""
  xp = _pad_to(x, pb, sizes)
  if not ROWS_FIRST or _cpu_lanes(x.device) <= COUT_ROW_LANES: return xp.contiguous()
  return xp.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)

def _strided_cout_rows(x: Tensor, w: Tensor, groups: int, ow: int) -> bool:
  """A strided float32 forward whose output rows of ow pixels make one vector per row on a CPU of 16 lanes (ow < 32) and
  whose groups' output channels fill whole vectors: vectorized along the channels (_conv_fwd_cout) instead."""
  return (x.dtype is dtypes.float32 and w.dtype is dtypes.float32 and x.device == w.device and (lanes := _cpu_lanes(x.device)) > COUT_ROW_LANES
          and (w.shape[0] // groups) % lanes == 0 and ow < 2 * lanes)

DW_CHUNK_BYTES = 1 << 19   # batch images per weight-gradient chunk: their output gradient and input fit this (L2)

def _conv_wgrad(g: Tensor, xp: Tensor, HW: tuple, stride, groups: int = 1) -> LazyBuffer:
  """dW[co, ci, *k] = sum over n, *o of G[n, co, *o] * Xp[n, ci, *(o*s + k)] (xp: the padded input, a buffer, so the
  windows read without border checks), computed as (*k, ci, co) with co contiguous: a matmul-like reduction (rows ci,
  vector columns co) the register tile takes. A strided window only changes the broadcast loads of xp (scalars along
  co), so a stride-s conv's weight gradient costs the taps' arithmetic, no phase padding. With groups, the same per
  group, (group, *k, ci, co): the group's own output channels are the vectors (a grouped dW summed per (co, ci, tap)
  with no output vector ran at a third of the speed)."""
  nd, grp = len(HW), groups
  bs, cout, cin, oyx = g.shape[0], g.shape[1] // grp, xp.shape[1] // grp, g.shape[2:]
  # the batch in chunks whose images fit L2 (DW_CHUNK_BYTES): each chunk's partial dW is an output loop of its own
  # (outermost: split across the cores), so the register tiles of one chunk re-read cached data instead of
  # streaming the whole batch once per tile; a second small kernel sums the chunks
  per_img = 4 * (prod(oyx) * cout + prod(xp.shape[2:]) * cin)
  # (a symbolic batch, a bound Variable: chunks of one image, the batch an output loop the opts leave alone)
  chunk = 1 if not isinstance(bs, int) else max([d for d in range(1, bs + 1) if bs % d == 0 and d * per_img <= DW_CHUNK_BYTES] or [1])
  nb = bs // chunk if isinstance(bs, int) else bs
  def windows(xp: Tensor) -> Tensor:
    xw = xp.reshape(nb, chunk, grp, cin, *xp.shape[2:])._pool(HW, stride)          # (nb, chunk, grp, cin, *out, *HW)
    xw = xw.permute(0, 2, *[4 + nd + i for i in range(nd)], 3, 1, *[4 + i for i in range(nd)])   # (nb, grp, *HW, cin, chunk, *out)
    return xw.reshape(nb, grp, *HW, cin, 1, chunk, *oyx).expand(nb, grp, *HW, cin, cout, chunk, *oyx)
  xw = _view_chain(xp, ("wgrad-x", nb, chunk, grp, cin, cout, *HW, *make_tuple(stride, nd), *oyx), windows)
  # (bs, *out, cout): cout contiguous, in one transposing copy (compiler/opt/transpose.py tiles it: 128x32x20x20 0.47-0.62
  # ms, where two copies, whole rows first and then each (cout, ox) block, took 1.05 + 1.45 ms)
  gt = _view_chain(g, ("wgrad-gt", nd), lambda g: g.permute(0, *[2 + i for i in range(nd)], 1)).contiguous()
  def rows(gt: Tensor) -> Tensor:
    gt = gt.reshape(nb, chunk, *oyx, grp, cout).permute(0, 2 + nd, 3 + nd, 1, *[2 + i for i in range(nd)])
    return gt.reshape(nb, grp, *[1] * (nd + 1), cout, chunk, *oyx)
  gt = _view_chain(gt, ("wgrad-g", nb, chunk, grp, cout, *oyx), rows)
  dwt = (xw * gt).sum(tuple(range(-1 - nd, 0)))                                 # (nb, grp, *HW, cin, cout)
  dwt = dwt.contiguous().sum(0) if not isinstance(nb, int) or nb > 1 else dwt.reshape(dwt.shape[1:])
  # realized as (grp, *HW, cin, cout) first: the permuted store fused into the reduction would make its kernel's rows
  # co; with one group the (cout, cin, *HW) gradient stays a view of it (the optimizer update reads it in place of a
  # permuted copy); with groups, (grp, cout) merge into the output channels: a small copy
  # (grp, cout, cin, *HW)
  dwt = _view_chain(dwt.contiguous(), ("wgrad-dw", nd), lambda d: d.permute(0, nd + 2, nd + 1, *range(1, nd + 1)))
  if grp == 1: return _view_chain(dwt, ("wgrad-dw1", cout, cin, *HW), lambda d: d.reshape(grp * cout, cin, *HW)).lazydata
  return dwt.contiguous().reshape(grp * cout, cin, *HW).lazydata

def _strided_dgrad(g: Tensor, w: Tensor, s_: tuple, pb: list[int], ishape: tuple, groups: int = 1) -> Tensor:
  """The input gradient of a 2-d stride-s conv (one group; x's pixels, not the padding), dx[n, c, X] = sum over
  s*o + k - pb = X of G[n, co, o] * W[co, c, k], as its output phases: pixels X = s*u + r take the taps k = s*j + e,
  e = (r + pb) % s, from G[u + (r + pb - e)/s - j], a stride-1 correlation of G with that flipped sub-kernel (3x3, s=2:
  2x2, 2x1, 1x2 and 1x1 taps, 9 in all; the 2x2-phase conv's transposed form would compute 16). The phases interleave
  back in one copy."""
  from frontend.tensor import Tensor
  bs, c, HW, grp = g.shape[0], w.shape[1] * groups, w.shape[2:], groups
  dims = []   # per spatial dim, per phase r: (taps, first G row read, pixels)
  for i, s, k, b in zip(ishape, s_, HW, pb):
    dims.append([(list(range((r + b) % s, k, s)), (r + b - (r + b) % s) // s - len(range((r + b) % s, k, s)) + 1, -(-(i - r) // s))
                 for r in range(s)])
  # G padded once (a buffer: every phase conv reads a window of it without border checks), enough for every phase
  lo = [max(0, -min(st for _, st, _ in d)) for d in dims]
  hi = [max(0, max(st + u + len(t) - 1 for t, st, u in d) - o) for d, o in zip(dims, g.shape[2:])]
  gp = g.pad(((0, 0), (0, 0), (lo[0], hi[0]), (lo[1], hi[1]))).contiguous() if any(lo + hi) else g.contiguous()
  um = [-(-i // s) for i, s in zip(ishape, s_)]
  phases = []
  for ty, sty, uy in dims[0]:
    for tx, stx, ux in dims[1]:
      # no taps, or no pixels (an input of fewer rows than the stride: phase r >= i has none): nothing to compute
      if not ty or not tx or not uy or not ux: phases.append(Tensor.zeros(bs, c, *um, device=g.device)); continue
      win = gp.shrink((None, None, (sty + lo[0], sty + lo[0] + uy + len(ty) - 1), (stx + lo[1], stx + lo[1] + ux + len(tx) - 1)))
      # (c, co/groups, |ty|, |tx|): each group's sub-kernel flipped, its in and out channels swapped
      wsub = w[:, :, ty[0]::s_[0], tx[0]::s_[1]].flip(2, 3)
      wsub = wsub.reshape(grp, w.shape[0] // grp, *wsub.shape[1:]).transpose(1, 2).reshape(c, w.shape[0] // grp, len(ty), len(tx)).contiguous()
      # (a 1x1 phase that reads G itself: the matrix product of _conv_fwd, straight from G)
      if len(ty) == 1 and len(tx) == 1 and (sty, stx, uy, ux) == (0, 0, *g.shape[2:]): win = g
      ph = (win.contiguous() if len(ty) == 1 and len(tx) == 1 else win)._conv_fwd(wsub, grp, 1, 1, [0, 0, 0, 0], realize=True)
      phases.append(_pad_to(ph if grp > 1 else ph.contiguous(), [0, 0], um))   # (grouped: realized by _conv_fwd)
  dx = Tensor.stack(*phases, dim=2).reshape(bs, c, s_[0], s_[1], *um).permute(0, 1, 4, 2, 5, 3)
  return dx.reshape(bs, c, um[0] * s_[0], um[1] * s_[1]).shrink((None, None, (0, ishape[0]), (0, ishape[1])))

BAND_SAVING_MIN = 0.1   # the share of the input gradient's row taps the bands must save (below: one conv over the padded G)
BAND_KH_MIN = 5         # kernels of fewer rows keep one conv: their border bands (2 rows x 2 taps) tile poorly

def _dgrad_bands(hg: int, kh: int, top: int, bottom: int) -> list[tuple[int, int, int, int]] | None:
  """Row bands (y0, y1, k0, k1) of a stride-1 input gradient (a full correlation of G, hg rows padded by top/bottom,
  with a kh-row kernel): output row y needs only the taps ky with a G row, ky in [top - y, top + hg - y), so the
  rows next to the padding need fewer. The interior rows (every tap) are one band; the border rows go in pairs, each
  pair with the taps of its rows (a pair keeps the conv tile 2 rows). None when that saves under BAND_SAVING_MIN of
  the row taps (a 5x5 with padding 2: 4 of 120 over 24 rows) or there is no interior band, and for kernels of under
  BAND_KH_MIN rows: a 3x3 over 8x8 outputs (one core, kernel CPU time, 128x64 -> 64) took 4.3 -> 4.5 ms AVX-512 and
  8.2 -> 10.6 ms AVX2 banded, where a 5x5 over 12x12 took 6.7 -> 5.7 and 16.8 -> 12.7 ms.

  >>> _dgrad_bands(20, 5, 4, 4)   # mnist's 5x5 over 24x24: 104 row taps instead of 120
  [(0, 2, 3, 5), (2, 4, 1, 5), (4, 20, 0, 5), (20, 22, 0, 4), (22, 24, 0, 2)]
  >>> _dgrad_bands(20, 5, 2, 2) is None, _dgrad_bands(8, 3, 2, 2) is None
  (True, True)
  """
  if kh < BAND_KH_MIN: return None
  hout = hg + top + bottom - kh + 1
  taps = [(max(0, top - y), min(kh, top + hg - y)) for y in range(hout)]
  bands, y = [], 0
  while y < hout:
    y1 = y + 1
    if taps[y] == (0, kh):
      while y1 < hout and taps[y1] == (0, kh): y1 += 1
    elif y1 < hout and taps[y1] != (0, kh): y1 += 1
    bands.append((y, y1, min(t[0] for t in taps[y:y1]), max(t[1] for t in taps[y:y1])))
    y = y1
  work = sum((y1 - y0) * (k1 - k0) for y0, y1, k0, k1 in bands)
  if not any(k1 - k0 == kh for _, _, k0, k1 in bands) or work > (1 - BAND_SAVING_MIN) * hout * kh: return None
  return bands

def _banded_dgrad(g: Tensor, wt: Tensor, gpads: list[int], bands: list[tuple[int, int, int, int]]) -> Tensor:
  """The stride-1 input gradient (the correlation of G padded by gpads with wt, the flipped, channel-swapped kernel) by
  row bands (_dgrad_bands): each band a conv of its rows with its kernel rows, reading a window of one padded copy of
  G; the bands concatenated. Exactly the taps of the unbanded conv less the padding rows' zeros (mnist's 5x5 input
  gradient, 128x32 -> 32 channels, 24x24, one core, kernel CPU time, all its kernels: 45.5 -> 42.2 ms AVX2, 24.8 -> 24.6
  ms AVX-512, where the bands' output transposes (channel-vectorized convs) and the concatenation eat the saving)."""
  from frontend.tensor import Tensor
  gp = g.contiguous().pad(gpads).contiguous()
  parts = [gp.shrink((None, None, (y0 + k0, y1 - 1 + k1), None))._conv_fwd(wt[:, :, k0:k1].contiguous(), 1, 1, 1, [0, 0, 0, 0])
           for y0, y1, k0, k1 in bands]
  return Tensor.cat(*parts, dim=2)

class _ConvGradsFn(Function):
  """A conv Function whose backward is `_grads(g, x, w)` on Tensors, built without recording a graph."""
  def backward(self, g):
    with _no_grad(): return self._grads(_wrap(g, None), _wrap(self.x, None), _wrap(self.w, None))
  def backward_tensors(self, g: Tensor, x: Tensor, w: Tensor) -> list:
    """create_graph: the gradients of the composite forward (differentiable ops) recomputed from x and w."""
    from frontend.grad_graph import vjp
    return vjp(x._conv_fwd(w, getattr(self, "groups", 1), 1, 1, list(self.pads)), (x, w), g)

class _StridedConvFn(Function):
  """A 2-d stride-s conv (float32; groups of a multiple of 8 output channels) with gradients of exactly its own taps:
  the forward vectorized along the output channels (_conv_fwd_cout), the input gradient its output phases' stride-1
  convs (_strided_dgrad), the weight gradient a strided window reduction (_conv_wgrad). Space to depth (a 2x2 stride-1 conv over 4C for a 3x3 s=2 one) would do
  16/9 of the arithmetic in both gradients, plus the copies of the input's and its gradient's phases."""
  def forward(self, x, w, stride: tuple, pads: tuple, out: tuple, groups: int = 1):
    self.x, self.w, self.s_, self.pb, self.groups, self.pads = x, w, stride, list(pads[-2::-2]), groups, list(pads)
    with _no_grad():
      # the padded input, cut to the rows and columns the windows reach: the forward's and the weight gradient's
      self.xp = _padded_rows_first(_wrap(x, None), self.pb, [s * (o - 1) + k for s, o, k in zip(stride, out, w.shape[2:])])
      return _conv_fwd_cout(self.xp, _wrap(w, None), stride, groups, fused_store=_cpu_lanes(x.device) > COUT_ROW_LANES).lazydata
  def backward(self, g):
    with _no_grad():
      g, x, w = _wrap(g, None), _wrap(self.x, None), _wrap(self.w, None)
      dx = _strided_dgrad(g, w, self.s_, self.pb, tuple(x.shape[2:]), self.groups).lazydata if self.needs_input_grad[0] else None
      if not self.needs_input_grad[1]: return dx, None
      return dx, _conv_wgrad(g, self.xp, tuple(w.shape[2:]), self.s_, self.groups)
  def backward_tensors(self, g: Tensor, x: Tensor, w: Tensor) -> list:
    """create_graph: the gradients of the composite strided forward recomputed from x and w."""
    from frontend.grad_graph import vjp
    return vjp(x._conv_fwd(w, self.groups, self.s_, 1, self.pads), (x, w), g)

class _ConvFn(_ConvGradsFn):
  """conv2d (stride 1, one group) whose backward is made of kernels the conv opts tile: the input gradient is the
  forward conv of the output gradient with the flipped, channel-swapped weight (a transposed conv), and the weight
  gradient dW[co, ci, ky, kx] = sum over n, oy, ox of G[n, co, oy, ox] * Xpad[n, ci, oy+ky, ox+kx], computed as
  (ky, kx, ci, co) with co contiguous: a matmul-like reduction (rows ci, vector columns co) the register tile takes.
  Through the composite ops the gradient would be a 9x bigger windowed tensor reduced over channels, folded back by a
  gated kernel, and a weight gradient reduced to a scalar per output (no output vectors)."""
  def forward(self, x, w, pads: tuple, fwd=None):
    """`fwd`: the forward's value computed another (faster) way, given by a caller whose x and w are copies that
    only the backward reads (the strided conv's phases, _conv_rewrite)."""
    self.x, self.w, self.pads = x, w, list(pads)
    if fwd is not None:
      # (x padded lazily: only the weight gradient reads it; the conv's output may be longer than fwd: zeros past it)
      self.xp = _wrap(x, None).pad(self.pads).contiguous() if any(pads) else _wrap(x, None)
      full = [n + a + b - k + 1 for n, a, b, k in zip(x.shape[2:], pads[-2::-2], pads[::-2], w.shape[2:])]
      return fwd if list(fwd.shape[2:]) == full else fwd.pad(((0, 0), (0, 0), *[(0, f - o) for f, o in zip(full, fwd.shape[2:])]))
    with _no_grad():
      # the padded input (as _conv_fwd would pad it) is kept: the weight gradient reads the same copy, one kernel less
      X = _wrap(x, None).contiguous() if any(pads) and _computed_by_reduce(x) else _wrap(x, None)
      self.xp = X.pad(self.pads).contiguous() if any(pads) else X
      return self.xp._conv_fwd(_wrap(w, None), 1, 1, 1, [0] * len(self.pads)).lazydata
  def _grads(self, g: Tensor, x: Tensor, w: Tensor):
    nd, HW, pads = w.ndim - 2, w.shape[2:], self.pads
    dx = dw = None
    if self.needs_input_grad[0]:
      # full correlation with the flipped kernel: padding k-1-p on each side (torch order: last dim first)
      gpads = [k - 1 - p for k, p in zip([k for k in reversed(HW) for _ in (0, 1)], pads)]
      wt = _view_chain(w, ("dgrad-w", nd), lambda w: w.transpose(0, 1).flip(*range(2, 2 + nd)))
      bands = _dgrad_bands(g.shape[2], w.shape[2], gpads[2], gpads[3]) if nd == 2 else None
      if bands: dx = _banded_dgrad(g, wt.contiguous(), gpads, bands).lazydata
      else: dx = g.contiguous()._conv_fwd(wt.contiguous(), 1, 1, 1, gpads).lazydata
    if self.needs_input_grad[1]: dw = _conv_wgrad(g, self.xp if any(pads) else x.contiguous(), HW, 1)
    return dx, dw

class _GroupConvFn(_ConvGradsFn):
  """conv2d with groups > 1 (stride 1; depthwise: groups = channels) whose backward is a grouped conv and a plain
  reduction instead of the composite gradient (a windowed tensor folded back by a gated kernel, ~10x slower):
  the input gradient is the grouped forward conv of the output gradient with each group's weight transposed and
  flipped; the weight gradient dW[g*cog + co, ci, ky, kx] = sum over n, oy, ox of G[n, g*cog + co, oy, ox] *
  Xpad[n, g*cig + ci, oy + ky, ox + kx], one reduction whose innermost loop (ox) is contiguous in both operands."""
  def forward(self, x, w, groups: int, pads: tuple):
    self.x, self.w, self.groups, self.pads = x, w, groups, list(pads)
    with _no_grad(): return _wrap(x, None)._conv_fwd(_wrap(w, None), groups, 1, 1, self.pads).lazydata
  def _grads(self, g: Tensor, x: Tensor, w: Tensor):
    nd, HW, pads, grp = w.ndim - 2, w.shape[2:], self.pads, self.groups
    (cout, cig), cog, bs, oyx = w.shape[:2], w.shape[0] // self.groups, g.shape[0], g.shape[2:]
    dx = dw = None
    if self.needs_input_grad[0]:
      gpads = [k - 1 - p for k, p in zip([k for k in reversed(HW) for _ in (0, 1)], pads)]
      wt = w.reshape(grp, cog, cig, *HW).transpose(1, 2).reshape(grp * cig, cog, *HW).flip(*range(2, 2 + nd))
      dx = g.contiguous()._conv_fwd(wt.contiguous(), grp, 1, 1, gpads).lazydata
    if self.needs_input_grad[1] and cog % 8 == 0:   # a group's output channels fill vectors: the weight gradient's tile
      dw = _conv_wgrad(g, (x.pad(pads) if any(pads) else x).contiguous(), HW, 1, grp)
    elif self.needs_input_grad[1]:
      xp = (x.pad(pads) if any(pads) else x).contiguous()
      xw = xp._pool(HW).reshape(bs, grp, 1, cig, *oyx, *HW)                            # (bs, g, 1, cig, *out, *HW)
      gg = g.reshape(bs, grp, cog, 1, *oyx, *[1] * nd)
      dw = (xw * gg).sum((0, *range(4, 4 + nd))).reshape(cout, cig, *HW).contiguous().lazydata
    return dx, dw
