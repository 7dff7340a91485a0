"""Tensor methods ported code expects from tinygrad that are compositions of other ops: `sequential`,
einops-style `rearrange`, and the small dense factorizations `qr` (Householder) and `svd` (one-sided Jacobi).
`Tensor` inherits them from `ExtraOpsMixin`.

>>> from frontend import Tensor
>>> Tensor([[1, 2], [3, 4]]).rearrange("a b -> b a").tolist()
[[1, 3], [2, 4]]
>>> Tensor([1.0, -2.0]).sequential([lambda t: t * 2, Tensor.relu]).tolist()
[2.0, 0.0]
"""
from __future__ import annotations
import functools, math
from typing import TYPE_CHECKING
from collections.abc import Callable
import numpy as np

if TYPE_CHECKING: from frontend.tensor import Tensor

def _parse_side(side: str) -> tuple[list[str], list[tuple[int, int]]]:
  """'b (h w) c' -> names ['b', 'h', 'w', 'c'] and groups [(1, 3)] (start, end in names); '1' is an empty group."""
  toks = side.replace("…", "...").replace("(", " ( ").replace(")", " ) ").split()
  names: list[str] = []
  groups: list[tuple[int, int]] = []
  start = None
  for t in toks:
    if t == "(":
      if start is not None: raise ValueError(f"rearrange: nested parentheses in {side!r}")
      start = len(names)
    elif t == ")":
      if start is None: raise ValueError(f"rearrange: unbalanced parentheses in {side!r}")
      groups.append((start, len(names)))
      start = None
    elif t == "1": groups.append((len(names), len(names)))
    else:
      if t != "..." and not t.isidentifier(): raise ValueError(f"rearrange: invalid axis name {t!r}")
      names.append(t)
  if start is not None: raise ValueError(f"rearrange: unbalanced parentheses in {side!r}")
  return names, groups

class ExtraOpsMixin:
  __slots__ = ()

  def sequential(self: Tensor, ll: list[Callable[[Tensor], Tensor]]) -> Tensor:
    """Apply each function of `ll` in turn to the result of the previous one (tinygrad's model-as-list idiom)."""
    return functools.reduce(lambda x, f: f(x), ll, self)

  def rearrange(self: Tensor, formula: str, **sizes: int) -> Tensor:
    """einops-style reshape/permute: 'b (h w) c -> b c h w' with sizes for split groups (h=4); '...' stands for
    the dims not named and '1' for a size-1 dim.

    >>> from frontend import Tensor
    >>> Tensor.arange(6).reshape(1, 6).rearrange("b (h w) -> h (b w)", h=2).tolist()
    [[0, 1, 2], [3, 4, 5]]
    """
    if formula.count("->") != 1: raise ValueError(f"rearrange: need exactly one '->' in {formula!r}")
    (lhs, lgroups), (rhs, rgroups) = map(_parse_side, formula.split("->"))
    if sorted(lhs) != sorted(rhs) or len(set(lhs)) != len(lhs): raise ValueError(f"rearrange: the axis names differ between the sides of {formula!r}")
    for name in sizes:
      if name not in lhs: raise ValueError(f"rearrange: axis {name!r} is not in {formula!r}")
    if lhs.count("...") > 1: raise ValueError(f"rearrange: more than one '...' in {formula!r}")
    if any("..." in lhs[s:e] for s, e in lgroups): raise ValueError(f"rearrange: '...' can't be inside parentheses on the left of {formula!r}")
    def input_dims(names, groups) -> list[tuple[int, int]]:
      """Each input dim as (start, end) in names: one name (e = s + 1), a group, or '1' (e = s)."""
      out, i, gs = [], 0, sorted(groups)
      while i < len(names) or gs:
        if gs and gs[0][0] == i:
          out.append(gs.pop(0))
          i = max(i, out[-1][1])
        else: out.append((i, i + 1)); i += 1
      return out
    if "..." in lhs:
      ne = self.ndim - (len(input_dims(lhs, lgroups)) - 1)
      if ne < 0: raise ValueError(f"rearrange: {formula!r} names more dims than the input {self.shape} has")
      def expand(names, groups):
        i = names.index("...")
        def shift(p: int) -> int: return p + ne - 1 if p > i else p
        return names[:i] + [f"...{j}" for j in range(ne)] + names[i + 1:], [(shift(s), shift(e)) for s, e in groups]
      lhs, lgroups = expand(lhs, lgroups)
      rhs, rgroups = expand(rhs, rgroups)
    dims = input_dims(lhs, lgroups)
    if len(dims) != self.ndim: raise ValueError(f"rearrange: {formula!r} has {len(dims)} input dims but the input is {self.shape}")
    # split the left groups into one dim per name (last first, so earlier dims keep their index)
    x = self
    for pos in reversed(range(len(dims))):
      s, e = dims[pos]
      if e == s:
        if x.shape[pos] != 1: raise ValueError(f"rearrange: '1' in {formula!r} matches dim {pos} of size {x.shape[pos]}")
        x = x.reshape(*x.shape[:pos], *x.shape[pos + 1:])
      elif e > s + 1: x = x.unflatten(pos, tuple(sizes.get(lhs[j], -1) for j in range(s, e)))
    for name, n in sizes.items():
      if x.shape[lhs.index(name)] != n: raise ValueError(f"rearrange: axis {name!r} has size {x.shape[lhs.index(name)]}, not {n}")
    x = x.permute([lhs.index(n) for n in rhs]) if rhs else x
    for s, e in sorted(rgroups, reverse=True):
      x = x.flatten(s, e - 1) if e > s else x.unsqueeze(s)
    return x

  # ***** small dense factorizations (batched over leading dims) *****
  def newton_schulz(self: Tensor, steps: int, params: tuple[float, ...], eps: float = 1.0e-7) -> Tensor:
    """`steps` Newton-Schulz iterations G <- sum_i params[i] * (G G^T)^i G of the odd polynomial `params`, from self
    scaled to Frobenius norm 1: drives the singular values toward 1 (an approximate orthogonalization; Muon's step).
    A tall matrix is iterated transposed, so G G^T is the smaller square.

    >>> from frontend import Tensor
    >>> g = Tensor([[3.0, 0.0], [0.0, 0.5]]).newton_schulz(10, (1.5, -0.5))
    >>> [round(v, 3) for v in g.flatten().tolist()]
    [1.0, 0.0, 0.0, 1.0]
    """
    if self.ndim < 2: raise ValueError(f"newton_schulz: needs a matrix (two or more dims), got shape {self.shape}")
    if self.shape[-2] > self.shape[-1]: return self.transpose(-2, -1).newton_schulz(steps, params, eps).transpose(-2, -1)
    g = self / (self.square().sum(axis=(-2, -1), keepdim=True).sqrt() + eps)
    for _ in range(steps):
      gram, term, acc = g @ g.transpose(-2, -1), g, g * params[0]
      for p in params[1:]:
        term = gram @ term
        acc = acc + p * term
      g = acc
    return g

  def qr(self: Tensor) -> tuple[Tensor, Tensor]:
    """Q (..., m, m) orthogonal and R (..., m, n) upper triangular with self = Q @ R, by Householder reflections.

    >>> from frontend import Tensor
    >>> q, r = Tensor([[3.0, 1.0], [4.0, 2.0]]).qr()
    >>> [round(v, 4) for v in (q @ r).flatten().tolist()]
    [3.0, 1.0, 4.0, 2.0]
    """
    if self.ndim < 2: raise ValueError(f"qr: needs at least 2 dims, got {self.shape}")
    pre, m, n = self.shape[:-2], self.shape[-2], self.shape[-1]
    R = self._float()
    Q = type(self).eye(m, dtype=R.dtype, device=self.device).reshape(*[1] * len(pre), m, m).expand(*pre, m, m)
    rows = type(self).arange(m, device=self.device).reshape(*[1] * len(pre), m, 1)
    for i in range(min(m - 1, n)):
      col = (rows >= i).where(R[..., :, i:i + 1], 0.0)                   # (..., m, 1): the column below the diagonal
      norm = col.square().sum(-2, keepdim=True).sqrt()
      x0 = R[..., i:i + 1, i:i + 1]
      alpha = -(x0 >= 0).where(1.0, -1.0) * norm                         # reflect onto -sign(x0) |x| e_i: no cancellation
      v = col - (rows == i).where(alpha, 0.0)
      vnorm2 = v.square().sum(-2, keepdim=True)
      tau = (vnorm2 > 0).where(2.0 / (vnorm2 > 0).where(vnorm2, 1.0), 0.0)   # a zero column needs no reflection
      # H = I - tau v v^T; R <- H R, Q <- Q H
      R = (R - (tau * v) @ (v.transpose(-2, -1) @ R)).realize()
      Q = (Q - (Q @ v) @ (tau * v).transpose(-2, -1)).realize()
    return Q, R

  def svd(self: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """U, S, Vh with self = U @ diag(S) @ Vh and S descending, by one-sided Jacobi rotations on the columns
    (sweeps of a round-robin pairing until the columns are orthogonal to float32 precision).

    >>> from frontend import Tensor
    >>> [round(s, 4) for s in Tensor([[3.0, 0.0], [0.0, -2.0]]).svd()[1].tolist()]
    [3.0, 2.0]
    """
    if self.ndim < 2: raise ValueError(f"svd: needs at least 2 dims, got {self.shape}")
    pre, m, n = self.shape[:-2], self.shape[-2], self.shape[-1]
    if m < n:
      U, S, Vh = self.transpose(-2, -1).svd(full_matrices)
      return Vh.transpose(-2, -1), S, U.transpose(-2, -1)
    T = type(self)
    # work on an even number of columns (a zero column pairs with the odd one out and stays zero)
    k = n + (n % 2)
    A = self._float().pad(tuple([None] * len(pre) + [None, (0, k - n)]))
    V = T.eye(k, dtype=A.dtype, device=self.device).reshape(*[1] * len(pre), k, k).expand(*pre, k, k)
    # round-robin schedule: k-1 rounds, each pairs all columns disjointly (the circle method); as permutation matrices
    order, perms = list(range(k)), []
    for _ in range(k - 1):
      perm = [order[j] for j in range(0, k, 2)] + [order[j] for j in range(1, k, 2)]
      P = np.zeros((k, k), np.float32)
      P[perm, np.arange(k)] = 1.0
      perms.append((T(P, device=self.device), T(P.T.copy(), device=self.device)))
      order = [order[0]] + [order[-1]] + order[1:-1]
    h = k // 2
    sweeps = max(6, 2 * math.ceil(math.log2(k)) + 4)
    for _ in range(sweeps):
      for P, Pt in perms:
        Ap, Vp = A @ P, V @ P                           # pairs are columns (j, j + h)
        a, b = Ap[..., :h], Ap[..., h:]
        alpha, beta, gamma = a.square().sum(-2, keepdim=True), b.square().sum(-2, keepdim=True), (a * b).sum(-2, keepdim=True)
        rot = gamma.abs() > 1e-30
        zeta = (beta - alpha) / (2 * rot.where(gamma, 1.0))
        t = (zeta >= 0).where(1.0, -1.0) / (zeta.abs() + (1 + zeta.square()).sqrt())
        t = rot.where(t, 0.0)
        c = (1 + t.square()).rsqrt()
        s = c * t
        va, vb = Vp[..., :h], Vp[..., h:]
        A = (T.cat(c * a - s * b, s * a + c * b, dim=-1) @ Pt).realize()
        V = (T.cat(c * va - s * vb, s * va + c * vb, dim=-1) @ Pt).realize()
    S, idx = A.square().sum(-2).sqrt().sort(-1, descending=True)
    S, idx = S[..., :n], idx[..., :n]
    U = A.gather(-1, idx.unsqueeze(-2).expand(*pre, m, n)) / (S > 0).where(S, 1.0).unsqueeze(-2)
    V = V[..., :n, :].gather(-1, idx.unsqueeze(-2).expand(*pre, n, n))
    if full_matrices and m > n:
      # complete U to an orthonormal basis of R^m: QR of [U | I] keeps U's span in the first n columns
      Q, _ = U.cat(T.eye(m, dtype=U.dtype, device=self.device).reshape(*[1] * len(pre), m, m).expand(*pre, m, m), dim=-1).qr()
      U = T.cat(U, Q[..., n:], dim=-1)
    return U, S, V.transpose(-2, -1)
