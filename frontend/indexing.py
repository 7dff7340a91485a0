"""Tensor indexing: `x[ints, slices, None, ..., int/bool tensors or lists]` and `x[idx] = value`.

Basic indices become views (shrink, flip, reshape); integer-array indices become a one-hot select
kernel, so they stay differentiable and run on the device.

>>> from frontend import Tensor
>>> x = Tensor.arange(12).reshape(3, 4)
>>> x[1:, ::-2].tolist(), x[[0, 2], 1].tolist()
([[7, 5], [11, 9]], [1, 9])
"""
from __future__ import annotations
import numpy as np
from compiler.dtypes import dtypes
from compiler.uop import UOp
from compiler.sint import binds_of, sval
from frontend.checks import check_index


def _normalize(t, indices) -> list:
  from frontend.tensor import Tensor
  # a list holding tensors, slices, None or ... is a tuple of per-dim indices (torch, tinygrad); a list of ints or
  # nested int lists stays one integer-array index
  if isinstance(indices, list) and any(isinstance(i, (Tensor, slice)) or i is None or i is Ellipsis for i in indices): indices = tuple(indices)
  if not isinstance(indices, tuple): indices = (indices,)
  out = []
  for i in indices:
    # (a tuple inside the index is an index array like a list: x[(0, 1), :] is x[[0, 1], :], as torch and tinygrad)
    if isinstance(i, (list, tuple, np.ndarray)) and not isinstance(i, Tensor):
      try: arr = np.asarray(i)
      except ValueError: raise IndexError(f"index: ragged or mixed list {i!r} can't be an index array") from None
      if arr.size == 0 and arr.dtype.kind == "f": arr = arr.astype(np.int64)   # [] selects nothing; it is not a float index
      if arr.dtype == np.bool_: out.append(("bool", arr)); continue
      if arr.dtype.kind not in "iu": raise IndexError(f"index arrays must be integers or bools, got {arr.dtype}")
      out.append(("arr", arr)); continue
    if isinstance(i, Tensor):
      if i.dtype.is_bool: out.append(("bool", i.numpy())); continue
      if not i.dtype.is_int: raise IndexError(f"tensors used as indices must be integer or bool, got {i.dtype}")
      out.append(("tensor", i)); continue
    if i is None: out.append(("none", None))
    elif i is Ellipsis: out.append(("ellipsis", None))
    elif isinstance(i, (bool, np.bool_)): out.append(("bool", np.asarray(i)))
    elif isinstance(i, (int, np.integer)): out.append(("int", int(i)))
    elif isinstance(i, UOp): out.append(("int", _bound(i, i)))
    elif isinstance(i, slice):
      for v in (i.start, i.stop):
        if isinstance(v, UOp): _bound(v, i)
        elif v is not None and not isinstance(v, (int, np.integer)): raise TypeError(f"slice indices must be integers or None, got {type(v).__name__} in {i}")
      if i.step is not None and not isinstance(i.step, (int, np.integer)): raise TypeError(f"slice steps must be integers or None, got {type(i.step).__name__} in {i}")
      out.append(("slice", i))
    else: raise IndexError(f"unsupported index type {type(i).__name__}: only ints, slices, None, ..., integer/bool lists and tensors index a Tensor")
  # bool arrays become the integer positions they select (their shape decides the result's shape); a mask covers as
  # many dims as it has and must have their sizes (torch: IndexError; a shorter mask would select silently)
  expanded, pos = [], 0
  consumed = {"int": 1, "slice": 1, "arr": 1, "tensor": 1}
  total = sum(v.ndim if k == "bool" else consumed.get(k, 0) for k, v in out)
  for kind, v in out:
    if kind == "ellipsis": pos += max(t.ndim - total, 0)
    if kind == "bool" and v.ndim > 0 and tuple(v.shape) != tuple(t.shape[pos:pos + v.ndim]):
      raise IndexError(f"index: the bool mask of shape {v.shape} at dim {pos} doesn't match the indexed tensor's shape {t.shape}")
    pos += v.ndim if kind == "bool" else consumed.get(kind, 0)
    if kind == "bool" and v.ndim > 0: expanded.extend(("arr", nz) for nz in np.nonzero(v))
    elif kind == "bool": expanded.append(("none", None) if v else ("empty", None))   # a new dim of size 1 (True) or 0 (False)
    else: expanded.append((kind, v))
  used = sum(1 for k, _ in expanded if k in ("int", "slice", "arr", "tensor"))
  if used > t.ndim: raise IndexError(f"too many indices for tensor of shape {t.shape}: {used} given")
  if sum(1 for k, _ in expanded if k == "ellipsis") > 1: raise IndexError("an index can only have a single ellipsis")
  res = []
  for k, v in expanded:
    if k == "ellipsis": res.extend([("slice", slice(None))] * (t.ndim - used))
    else: res.append((k, v))
  if not any(k == "ellipsis" for k, _ in expanded): res.extend([("slice", slice(None))] * (t.ndim - used))
  return res

def _bound(v: UOp, where) -> UOp:
  """v, an integer expression of bound Variables (a symbolic index); TypeError for anything else (an unbound Variable
  has no value to index with)."""
  try: ok = v.dtype is not None and v.dtype.is_int and bool(binds_of(v)) and isinstance(sval(v), int)
  except ValueError: ok = False
  if not ok:
    raise TypeError(f"index {where}: {v!r} must be an integer expression of bound Variables (Variable(...).bind(value))")
  return v

def getitem(t, indices):
  from frontend.tensor import Tensor
  idx = _normalize(t, indices)
  # torch/tinygrad rule (unlike numpy): an int index removes its dim first, it is never an advanced index, so
  # x[0, :, [1, 2]] has shape (x.shape[1], 2)
  x, dim, adv = t, 0, []
  # pass 1: basic indexing as views; remember where advanced indices apply (in terms of the new dims)
  new_dims, checks = 0, []
  for kind, v in idx:
    if kind == "none":
      x = x.unsqueeze(new_dims); new_dims += 1; continue
    if kind == "empty":
      x = x.unsqueeze(new_dims).shrink(tuple((0, 0) if i == new_dims else None for i in range(x.ndim + 1)))
      new_dims += 1; continue
    n = x.shape[new_dims]
    if kind == "int":
      if isinstance(v, UOp) or isinstance(n, UOp):   # a symbolic position or dim: checked at the bound values
        if not -sval(n) <= sval(v) < sval(n): raise IndexError(f"index {v} is out of bounds for dim {dim} of size {n} (shape {t.shape})")
        if sval(v) < 0:
          if isinstance(v, UOp): raise IndexError(f"index {v}: a symbolic index must be >= 0 (it can't count from the end)")
          v = n + v
      elif not -n <= v < n: raise IndexError(f"index {v} is out of bounds for dim {dim} of size {n} (shape {t.shape})")
      else: v = v + n if v < 0 else v
      x = x.shrink(tuple((v, v + 1) if i == new_dims else None for i in range(x.ndim)))
      x = x.reshape(x.shape[:new_dims] + x.shape[new_dims + 1:])
    elif kind == "slice":
      x = _slice_dim(x, new_dims, v)
      new_dims += 1
    else:
      if kind == "arr":
        if v.size and (v.max() >= n or v.min() < -n): raise IndexError(f"index {v.max() if v.max() >= n else v.min()} is out of bounds for dim {dim} of size {n}")
        v = Tensor(np.where(v < 0, v + n, v).astype(np.int32), device=t.device)
      else:
        checks.append((v, n))
        if v.dtype.itemsize < 4: v = v.cast(dtypes.int32)   # (v + n wraps in int8/int16 where n is past their range)
        v = (v < 0).where(v + n, v)
      adv.append((new_dims, v))
      new_dims += 1
    dim += 1
  if not adv: return x
  out = _gather(x, adv)
  for v, n in checks: check_index(out, v, n, "x[tensor]", IndexError, allow_negative=True)
  return out

def _slice_sym(x, d: int, s: slice):
  """x[..., s, ...] at dim d where the dim or the slice's bounds are symbolic (bound Variables): a shrink with step 1
  whose bounds are expressions (one kernel for every value), checked at the bound values."""
  n = x.shape[d]
  if s.step not in (None, 1): raise IndexError(f"index {s} of dim {d} (shape {x.shape}): a symbolic slice takes step 1, not {s.step}")
  def end(v, default):
    if v is None: return default
    if isinstance(v, UOp):
      if sval(v) < 0: raise IndexError(f"index {s} of dim {d} (shape {x.shape}): a symbolic bound must be >= 0, got {v}")
      return v
    v = int(v)
    if v < 0: return n + v if sval(n) + v > 0 else 0   # counts from the end (of the symbolic size), clamped at 0 like Python
    # past the end: the dim's size (symbolic for a symbolic dim); a concrete bound within it stays concrete (tinygrad's
    # `f(a[:, :v])[:, :i]` is a concrete shape again)
    return n if v > sval(n) else v
  lo, hi = end(s.start, 0), end(s.stop, n)
  if not 0 <= sval(lo) <= sval(hi) <= sval(n):
    raise IndexError(f"index {s} of dim {d} (shape {x.shape}): [{lo}, {hi}) is not a range within the size {n}; "
                     "a symbolic slice can't be empty by start > stop")
  return x.shrink(tuple((lo, hi) if i == d else None for i in range(x.ndim)))

def _slice_dim(x, d: int, s: slice):
  n = x.shape[d]
  if isinstance(n, UOp) or isinstance(s.start, UOp) or isinstance(s.stop, UOp): return _slice_sym(x, d, s)
  start, stop, step = s.indices(n)
  if step > 0: lo, hi = start, max(start, stop)
  else: lo, hi = min(stop + 1, start + 1), start + 1
  x = x.shrink(tuple((lo, hi) if i == d else None for i in range(x.ndim)))
  if step < 0: x = x.flip(d)
  st = abs(step)
  if st > 1:
    m = x.shape[d]
    cnt = (m + st - 1) // st
    x = x.pad(tuple((0, cnt * st - m) if i == d else (0, 0) for i in range(x.ndim)))
    x = x.reshape(x.shape[:d] + (cnt, st) + x.shape[d + 1:])
    x = x.shrink(tuple((0, 1) if i == d + 1 else None for i in range(x.ndim))).reshape(x.shape[:d] + (cnt,) + x.shape[d + 2:])
  return x

def _gather(x, adv: list):
  """x indexed by integer tensors at dims [d for d, _]: a one-hot select over those dims."""
  from frontend.tensor import Tensor, _broadcast_shape
  dims = [d for d, _ in adv]
  try: bshape = _broadcast_shape(*[v.shape for _, v in adv])
  except ValueError: raise IndexError(f"index: the index arrays of shapes {', '.join(str(v.shape) for _, v in adv)} can't be broadcast together") from None
  idxs = [v._expand_to(bshape) if v.shape != bshape else v for _, v in adv]
  rest = [i for i in range(x.ndim) if i not in dims]
  xp = x.permute(rest + dims)          # (rest..., n1, n2, ...)
  nb, k = len(bshape), len(dims)
  xp = xp.reshape(xp.shape[:len(rest)] + (1,) * nb + xp.shape[len(rest):])
  mask = None
  for j, (d, v) in enumerate(zip(dims, idxs)):
    n = x.shape[d]
    oh = v.reshape(bshape + (1,) * j + (1,) + (1,) * (k - j - 1)) == Tensor.arange(n, device=x.device).reshape((1,) * nb + (1,) * j + (n,) + (1,) * (k - j - 1))
    mask = oh if mask is None else mask & oh
  # (a select, not a sum of the masked values: bit-exact, -0.0 and NaN payloads included; frontend/function.py Pick)
  out = xp._pick(mask, tuple(range(len(rest) + nb, len(rest) + nb + k)))
  # numpy rule: adjacent advanced indices replace their position; otherwise the broadcast dims go first
  adjacent = dims == list(range(dims[0], dims[0] + k))
  if adjacent and rest:
    pos = sum(1 for r in rest if r < dims[0])
    order = list(range(pos)) + list(range(len(rest), len(rest) + nb)) + list(range(pos, len(rest)))
    out = out.permute(order)
  elif not adjacent:
    out = out.permute(list(range(len(rest), len(rest) + nb)) + list(range(len(rest))))
  return out

def setitem(t, indices, v) -> None:
  """t[indices] = v, written into t's storage."""
  from frontend.tensor import Tensor
  if not isinstance(v, Tensor): v = Tensor(v, device=t.device, dtype=t.dtype)
  if not t.lazydata.is_view and not t.lazydata.realized: t.realize()
  if t.lazydata.is_view: raise RuntimeError("setitem: only realized, non-view tensors can be assigned into; call .contiguous().realize() first")
  pos = Tensor.arange(t.numel(), device=t.device).reshape(t.shape)
  sel = pos[indices]
  vb = v.cast(t.dtype)
  try: vb = vb._expand_to(sel.shape) if vb.shape != sel.shape else vb
  except ValueError: raise ValueError(f"setitem: value of shape {v.shape} can't be broadcast to the indexed shape {sel.shape}") from None
  flat_sel, flat_v = sel.flatten(), vb.flatten()
  n = t.numel()
  if flat_sel.numel() == 0: return
  hit = flat_sel.unsqueeze(0) == Tensor.arange(n, device=t.device).unsqueeze(1)          # (n, m)
  anyhit = hit.any(axis=1)
  # when an index repeats, the last write wins (as in numpy): keep the highest matching position
  last = (hit.cast(dtypes.int32) * Tensor.arange(1, flat_sel.numel() + 1, device=t.device).unsqueeze(0)).max(axis=1)
  pick = (Tensor.arange(1, flat_sel.numel() + 1, device=t.device).unsqueeze(0) == last.unsqueeze(1))
  newv = flat_v.unsqueeze(0)._pick(pick, 1)   # (the picked value's bits: -0.0 and NaN payloads kept; function.py Pick)
  result = anyhit.where(newv, t.flatten()).reshape(t.shape).contiguous()
  t.assign(result.cast(t.dtype))
  t.realize()
