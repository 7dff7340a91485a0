"""Symbolic integers ("sint"): a shape dimension, stride or offset that is an int or a UOp over bound Variables.

Frontend shapes hold bound Variables (BIND(DEFINE_VAR, value)); a kernel is built from the same graph with every BIND
replaced by its DEFINE_VAR (`unbind`), so one binary serves every value in the Variable's range and the values travel
as integer kernel arguments (`var_vals`). Decisions that shape a kernel (allocation size, fusion) use the range's
maximum (`smax`), never the bound value, so the kernel built for one value is the kernel for all of them.

>>> from compiler.uop import Variable
>>> n = Variable("n", 1, 10).bind(4)
>>> sval(n * 3), smax(n * 3), unbind(n * 3)[1]
(12, 30, {n: 4})
"""
from __future__ import annotations
from typing import Any
from compiler.uop import UOp, Ops, exec_alu, substitute, ALU

sint = int | UOp   # a dimension, stride or offset

def is_sym(x: Any) -> bool: return isinstance(x, UOp)
def any_sym(xs) -> bool:
  # (a loop, not any() over a generator: asked for every shape of every op, mostly of a few plain ints)
  for x in xs:
    if isinstance(x, UOp): return True
  return False

def sval(x: sint) -> int:
  """The value of x with every Variable at its bound value (ValueError for an unbound Variable)."""
  if not isinstance(x, UOp): return x
  memo: dict[UOp, Any] = {}
  def ev(u: UOp) -> Any:
    if (r := memo.get(u)) is not None: return r
    if u.op is Ops.CONST: r = u.arg
    elif u.op is Ops.BIND: r = u.src[1].arg
    elif u.op is Ops.DEFINE_VAR: raise ValueError(f"Variable {u.arg[0]!r} has no value here: bind it (.bind(value))")
    elif u.op in ALU: r = exec_alu(u.op, u.dtype, tuple(ev(s) for s in u.src))
    elif u.op is Ops.CAST: r = ev(u.src[0])
    else: raise ValueError(f"can't evaluate {u.op.name} as an integer")
    memo[u] = r
    return r
  return int(ev(x))

def smax(x: sint) -> int:
  """An upper bound of x over every value of its Variables (their ranges' maxima)."""
  return x if not isinstance(x, UOp) else int(x.vmax)

def binds_of(x: sint) -> dict[UOp, int]:
  """{Variable: value} of the bound Variables in x."""
  if not isinstance(x, UOp): return {}
  return {u.src[0]: u.src[1].arg for u in x.toposort() if u.op is Ops.BIND}

def unbind(x: sint) -> tuple[sint, dict[UOp, int]]:
  """x with each bound Variable replaced by the Variable itself, and {Variable: value}."""
  vv = binds_of(x)
  if not vv: return x, {}
  return substitute(x, {u: u.src[0] for u in x.toposort() if u.op is Ops.BIND}), vv

def rebind(x: sint, vals: dict[UOp, int]) -> sint:
  """x with each Variable (bound or not) bound to its value in `vals` (others unchanged)."""
  if not isinstance(x, UOp): return x
  m = {}
  for u in x.toposort():
    if u.op is Ops.BIND and u.src[0] in vals: m[u] = u.src[0].bind(vals[u.src[0]])
    elif u.op is Ops.DEFINE_VAR and u in vals: m[u] = u.bind(vals[u])
  return substitute(x, m) if m else x

def merge_vals(*dicts: dict[UOp, int], what: str = "") -> dict[UOp, int]:
  """One {Variable: value}; a Variable bound to two different values is an error."""
  out: dict[UOp, int] = {}
  for d in dicts:
    for k, v in d.items():
      if out.setdefault(k, v) != v:
        raise ValueError(f"{what + ': ' if what else ''}Variable {k.arg[0]!r} is bound to both {out[k]} and {v}")
  return out

def _lo(x: sint) -> int: return x if not isinstance(x, UOp) else int(x.vmin)

def smin(a: sint, b: sint) -> sint:
  """min(a, b) where it holds for every value of the Variables (NotImplementedError where it depends on them)."""
  if a is b or a == b: return a
  if smax(a) <= _lo(b): return a
  if smax(b) <= _lo(a): return b
  raise NotImplementedError(f"symbolic shapes: min({a}, {b}) depends on the Variables' values")

def smax2(a: sint, b: sint) -> sint:
  """max(a, b) where it holds for every value of the Variables (NotImplementedError where it depends on them)."""
  if a is b or a == b: return a
  return b if smin(a, b) is a else a

def smax_expr(a: sint, b: sint) -> sint:
  """max(a, b): a number or one operand where that holds for every value of the Variables, else a MAX expression
  (a view's mask bound that differs by value, e.g. a concrete slice of a padded symbolic dim)."""
  try: return smax2(a, b)
  except NotImplementedError: return (a if isinstance(a, UOp) else b.const_like(a))._bin(Ops.MAX, b)

def smin_expr(a: sint, b: sint) -> sint:
  """min(a, b), as smax_expr: min(a, b) = -max(-a, -b)."""
  try: return smin(a, b)
  except NotImplementedError: return -smax_expr(-a, -b)

def empty_range(lo: sint, hi: sint) -> bool:
  """Is [lo, hi) empty for every value of the Variables? (False where it may hold something.)"""
  return smax(hi) <= _lo(lo)
