"""The Tensor's movement ops: views that move no data until a kernel reads them (`reshape`, `expand`, `permute`,
`flip`, `shrink`, `pad`, and what is built of them: `transpose`, `flatten`, `squeeze`, `repeat`, ...) and the joins
and splits (`cat`, `stack`, `split`, `chunk`, `roll`). `Tensor` inherits them from `MovementMixin`.

A movement op with no gradient to record (the input needs none, or `Tensor.no_grad`) makes no autograd node: it
returns a new view of the same lazy buffer.

>>> from frontend import Tensor
>>> t = Tensor.arange(6).reshape(2, 3)
>>> t.permute(1, 0).tolist(), t.pad(((0, 0), (1, 0))).tolist()
([[0, 3], [1, 4], [2, 5]], [[0, 0, 1, 2], [0, 3, 4, 5]])
"""
from __future__ import annotations
import itertools, math
from typing import TYPE_CHECKING
from compiler.dtypes import dtypes, least_upper_dtype
from compiler.view import prod
from compiler.sint import any_sym, sval, binds_of, smin, smax2
from frontend import function as F
from frontend.capture import capturing
from frontend.tensor_args import argfix, make_tuple

# (frontend/tensor.py imports this module, so this one can't import it: it binds `Tensor` and `_wrap` here once it
# has made them)
if TYPE_CHECKING: from frontend.tensor import Tensor, _wrap

class MovementMixin:
  __slots__ = ()

  def _axis(self: Tensor, a: int, n: int | None = None, op: str | None = None) -> int:
    if n is None: n = len(self.lazydata.shape)   # (self.ndim)
    if not -(m := n if n > 1 else 1) <= a < m:   # (a 0-d tensor takes axis 0 or -1)
      raise IndexError(f"{op + ': ' if op else ''}dimension {a} is out of range for a tensor of {n} dims (shape {self.shape})")
    return a + n if a < 0 else a
  def reshape(self: Tensor, *shape) -> Tensor:
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
  def _reshape_sym(self: Tensor, asked: tuple, orig) -> Tensor:
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
  def view(self: Tensor, *shape) -> Tensor:
    """The same as `reshape`.

    >>> Tensor.arange(6).view(3, 2).shape
    (3, 2)
    """
    return self.reshape(*shape)
  def expand(self: Tensor, shape, *args) -> Tensor:
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
  def permute(self: Tensor, *order) -> Tensor:
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
  def flip(self: Tensor, axis, *args) -> Tensor:
    """Reverse the order of the elements along the given axes.

    >>> Tensor([[1, 2], [3, 4]]).flip(0).tolist()
    [[3, 4], [1, 2]]
    """
    axes = tuple(self._axis(a, op="flip") for a in argfix(axis, *args))
    if len(set(axes)) != len(axes): raise RuntimeError(f"flip: repeated axis in {axes}")
    if not axes: return self
    return F.Flip.apply(self, axis=axes) if self.requires_grad and not Tensor.no_grad else _wrap(self.lazydata.flip(axes), self.requires_grad)
  def shrink(self: Tensor, arg) -> Tensor:
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
  def pad(self: Tensor, padding, mode: str = "constant", value: float = 0.0) -> Tensor:
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
    if value != 0 or (isinstance(value, float) and math.copysign(1.0, value) < 0):   # (-0.0 == 0, but pads with -0.0)
      # the value takes the tensor's dtype (as torch: 3 pads a bool tensor with True), never the other way round
      mask = F.Pad.apply(Tensor.ones(*x.shape, dtype=dtypes.bool, device=x.device), arg=padding)
      ret = mask.where(ret, self._fill_value(value, "pad", ret.shape))
    return ret
  def _pad_mode(self: Tensor, padding: tuple, mode: str) -> Tensor:
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
  def pad_to(self: Tensor, shape, *args) -> Tensor:
    """Zero-pad at the end of each dim up to `shape` (None keeps a dim).

    >>> Tensor([1, 2]).pad_to(4).tolist()
    [1, 2, 0, 0]
    """
    new = argfix(shape, *args)
    if len(new) != self.ndim: raise ValueError(f"pad_to: can't pad {self.shape} to {new}: the number of dims differs")
    return self.pad(tuple(None if n is None else (0, n - s) for s, n in zip(self.shape, new)))
  def shrink_to(self: Tensor, shape, *args) -> Tensor:
    """Keep the first `shape[i]` entries of each dim (None keeps a dim).

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).shrink_to(1, 2).tolist()
    [[1, 2]]
    """
    new = argfix(shape, *args)
    if len(new) != self.ndim: raise ValueError(f"shrink_to: can't shrink {self.shape} to {new}: the number of dims differs")
    return self.shrink(tuple(None if n is None else (0, n) for n in new))
  def transpose(self: Tensor, dim0: int = 1, dim1: int = 0) -> Tensor:
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
  def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dims start_dim..end_dim (all by default) into one.

    >>> Tensor.zeros(2, 3, 4).flatten().shape, Tensor.zeros(2, 3, 4).flatten(1).shape
    ((24,), (2, 12))
    """
    if self.ndim == 0: return self.reshape(1)
    s, e = self._axis(start_dim, op="flatten"), self._axis(end_dim, op="flatten")
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])
  def unflatten(self: Tensor, dim: int, sizes) -> Tensor:
    """Split dim `dim` into the given sizes.

    >>> Tensor.arange(6).unflatten(0, (2, 3)).tolist()
    [[0, 1, 2], [3, 4, 5]]
    """
    d = self._axis(dim, op="unflatten")
    return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])
  def squeeze(self: Tensor, dim: int | None = None) -> Tensor:
    """Remove the size-1 dims (only `dim`, and only if its size is 1, when given).

    >>> Tensor.zeros(1, 2, 1).squeeze().shape, Tensor.zeros(1, 2, 1).squeeze(0).shape
    ((2,), (2, 1))
    """
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    d = self._axis(dim, op="squeeze")   # (a 0-d tensor takes dim 0 or -1, as torch)
    if self.ndim == 0: return self
    return self if self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1:])
  def unsqueeze(self: Tensor, dim: int) -> Tensor:
    """Insert a size-1 dim at position `dim` (negative counts from the end).

    >>> Tensor([1, 2]).unsqueeze(0).shape, Tensor([1, 2]).unsqueeze(-1).shape
    ((1, 2), (2, 1))
    """
    d = self._axis(dim, self.ndim + 1, op="unsqueeze")
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])
  def repeat(self: Tensor, repeats, *args) -> Tensor:
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
  def repeat_interleave(self: Tensor, repeats: int, dim: int | None = None) -> Tensor:
    """Repeat each element `repeats` times along `dim` (over the flattened tensor when dim is None).

    >>> Tensor([1, 2]).repeat_interleave(2).tolist()
    [1, 1, 2, 2]
    """
    x, d = (self.flatten(), 0) if dim is None else (self, self._axis(dim))
    shp = x.shape
    return x.reshape(*shp[:d + 1], 1, *shp[d + 1:]).expand(*shp[:d + 1], repeats, *shp[d + 1:]).reshape(*shp[:d], shp[d] * repeats, *shp[d + 1:])
  def cat(self: Tensor, *args: Tensor, dim: int = 0) -> Tensor:
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
    # along the axis a sharded piece is split on, padding each piece to the whole length can't work (a split axis can't
    # be padded): the cat is made where the pieces live, or refused naming cat (frontend/multi_cat.py)
    if any(getattr(t.lazydata, "axis", None) == d for t in ts): return F.MultiCat.apply(*[t.cast(dt) for t in ts], dim=d)
    return F.Cat.apply(*[t.cast(dt) for t in ts], dim=d)   # (a select per element: bit-exact, frontend/function.py Cat)
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
  def split(self: Tensor, sizes, dim: int = 0) -> list[Tensor]:
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
  def chunk(self: Tensor, chunks: int, dim: int = 0) -> list[Tensor]:
    """Split along `dim` into at most `chunks` pieces of ceil(size / chunks) elements.

    >>> [t.tolist() for t in Tensor.arange(5).chunk(3)]
    [[0, 1], [2, 3], [4]]
    """
    d = self._axis(dim, op="chunk")
    if self.shape[d] == 0: return [self] * chunks   # torch: `chunks` empty pieces
    return self.split(math.ceil(self.shape[d] / chunks) if self.shape[d] else 1, dim=d)
  def roll(self: Tensor, shifts, dims=None) -> Tensor:
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
