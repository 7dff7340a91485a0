"""UOps: the immutable, hash-consed nodes every compiler pass works on, and the pattern-rewrite engine.

A UOp is (op, dtype, src, arg). Building the same UOp twice gives the same Python object, so equality is `is`,
hashing is by id, and common subexpressions merge for free.

>>> from compiler.uop import UOp, Ops
>>> from compiler.dtypes import dtypes
>>> a = UOp.const(dtypes.int32, 3)
>>> (a + 4) is (a + 4), (a + 4).arg
(True, 7)
"""
from __future__ import annotations
from enum import Enum, auto
from typing import Any
from collections.abc import Callable, Iterable
import functools, math, numbers, weakref
from compiler.dtypes import DType, dtypes

class Ops(Enum):
  # kernel AST (what the scheduler produces): shaped nodes
  SINK = auto(); STORE = auto(); LOAD = auto(); VIEW = auto(); REDUCE_AXIS = auto()
  CONST = auto(); DEFINE_VAR = auto()
  # lazy graph only (frontend level)
  EMPTY = auto(); COPY = auto(); CONTIGUOUS = auto()
  # lowered program
  DEFINE_GLOBAL = auto(); RANGE = auto(); REDUCE = auto(); DEFINE_ACC = auto(); ASSIGN = auto(); INDEX = auto()
  ENDRANGE = auto(); VECTORIZE = auto(); GEP = auto(); LANE = auto()
  # elementwise
  CAST = auto(); BITCAST = auto()
  NEG = auto(); RECIP = auto(); EXP2 = auto(); LOG2 = auto(); SIN = auto(); SQRT = auto(); TRUNC = auto()
  ADD = auto(); MUL = auto(); FDIV = auto(); IDIV = auto(); MOD = auto(); MAX = auto()
  CMPLT = auto(); CMPNE = auto(); AND = auto(); OR = auto(); XOR = auto(); SHL = auto(); SHR = auto()
  WHERE = auto(); MULACC = auto()
  # warp-level matrix multiply-accumulate (tensor cores): WMMA(a fragment, b fragment, accumulator), arg = (shape,
  # input dtype name, accumulator dtype name); one lane's share of D = A @ B + C (compiler/opt/tc.py)
  WMMA = auto()
  # a Variable bound to a value (frontend shapes): BIND(DEFINE_VAR, CONST value); kernels only ever see the DEFINE_VAR
  BIND = auto()
  # members are singletons compared by identity: hash them by identity too (Enum's own __hash__ is a Python call,
  # and every UOp built hashes its op)
  __hash__ = object.__hash__

UNARY = {Ops.NEG, Ops.RECIP, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.TRUNC}
BINARY = {Ops.ADD, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR,
          Ops.SHL, Ops.SHR}
TERNARY = {Ops.WHERE, Ops.MULACC}
ALU = UNARY | BINARY | TERNARY
ELEMENTWISE = ALU | {Ops.CAST, Ops.BITCAST}
COMMUTATIVE = {Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR}
COMPARISON = {Ops.CMPLT, Ops.CMPNE}
REDUCE_OPS = {Ops.ADD, Ops.MAX, Ops.MUL}

def _c_div(a: int, b: int) -> int:  # C semantics: truncate toward zero
  q = abs(a) // abs(b)
  return q if (a >= 0) == (b >= 0) else -q

def exec_alu(op: Ops, dtype: DType, srcs: tuple) -> Any:
  """Evaluate an ALU op on Python scalars with the semantics of `dtype` (used for constant folding)."""
  if dtype.is_float:   # a float constant is held as a double until rendered: fold the value the kernel would hold
    srcs = tuple(dtypes.rounded(x, dtype) if i or op is not Ops.WHERE else x for i, x in enumerate(srcs))
  a = srcs[0]
  b = srcs[1] if len(srcs) > 1 else None
  try:
    if op is Ops.NEG: r = -a if not dtype.is_bool else not a
    elif op is Ops.RECIP: r = 1.0 / a if a != 0 else math.copysign(math.inf, a)
    elif op is Ops.EXP2: r = 2.0 ** a
    elif op is Ops.LOG2: r = math.log2(a) if a > 0 else (-math.inf if a == 0 else math.nan)
    elif op is Ops.SIN: r = math.sin(a) if math.isfinite(a) else math.nan
    elif op is Ops.SQRT: r = math.sqrt(a) if a >= 0 else math.nan
    elif op is Ops.TRUNC: r = math.trunc(a) if math.isfinite(a) else a
    elif op is Ops.ADD: r = a + b
    elif op is Ops.MUL: r = a * b
    elif op is Ops.FDIV: r = a / b if b != 0 else (math.nan if a == 0 or a != a else math.copysign(math.inf, a) * math.copysign(1, b))
    elif op is Ops.IDIV: r = _c_div(a, b) if b != 0 else 0
    elif op is Ops.MOD: r = a - _c_div(a, b) * b if b != 0 else 0
    # as the renderers' (a > b || a != a) ? a : b (render_c.py, render_llvm.py, render_ptx.py): a NaN in either
    # place wins, and of +-0.0 the second; Python's max(1.0, nan) is 1.0
    elif op is Ops.MAX: r = a if a > b or a != a else b
    elif op is Ops.CMPLT: r = a < b
    elif op is Ops.CMPNE: r = a != b
    elif op is Ops.AND: r = a & b if not dtype.is_bool else (a and b)
    elif op is Ops.OR: r = a | b if not dtype.is_bool else (a or b)
    elif op is Ops.XOR: r = a ^ b if not dtype.is_bool else (a != b)
    elif op is Ops.SHL: r = a << b
    elif op is Ops.SHR: r = a >> b
    elif op is Ops.WHERE: r = srcs[1] if a else srcs[2]
    elif op is Ops.MULACC: r = a * b + srcs[2]
    else: raise NotImplementedError(op)
  except OverflowError: r = math.inf
  if op in COMPARISON: return bool(r)
  if dtype.is_float: return dtypes.rounded(r, dtype)
  return dtypes.as_const(r, dtype)

# The interning table: key -> weak reference to the UOp. Dead entries are not dropped one by one as UOps die (a weakref
# callback per node cost as much as building the node: the simplifier makes and drops many temporaries) but swept
# when the table has doubled since the last sweep; until then a dead entry's key keeps its sources alive.
# The sweep walks the table newest first: a node is entered after its sources, so dropping a dead node's key frees
# sources the same walk reaches next (the walk's own list lets go of each entry as it passes it). Oldest first, a dead
# graph N nodes deep took N sweeps to go (its leaves held by its dead roots' keys), and as the threshold doubles with
# the table, that garbage grew with it. After 5 test files in one process: 130,068 entries, 94,381 nodes alive (most
# held only by dead keys); walking newest first, 41,351 and 27,604.
# (A dead key entered again keeps its old place, older than its new sources: what that leaves goes at the next sweep.)
_interned: dict[tuple, weakref.ref] = {}
_sweep_at = 1 << 16
def _sweep() -> None:
  global _sweep_at
  entries = list(_interned.items())
  while entries:
    key, ref = entries.pop()
    if ref() is None and _interned.get(key) is ref: del _interned[key]
  del entries
  _sweep_at = max(1 << 16, 2 * len(_interned))

class UOp:
  """An immutable compiler node. Build with `UOp(op, dtype, src, arg)`; identical builds return one object."""
  __slots__ = ("__dict__", "__weakref__", "arg", "dtype", "op", "src")

  def __new__(cls, op: Ops, dtype: DType | None = None, src: tuple = (), arg: Any = None):
    # -0.0 == 0.0 (same hash): without the sign in the key a -0.0 constant would come back as 0.0 (and a kernel
    # compiled for one reused for the other)
    key = (op, dtype, src, arg) if arg.__class__ is not float or arg != 0.0 else (op, dtype, src, arg, math.copysign(1.0, arg))
    try: ref = _interned.get(key)
    except TypeError as e: raise TypeError(f"UOp arg must be hashable: {op} {arg!r}") from e
    if ref is not None and (ret := ref()) is not None: return ret
    ret = super().__new__(cls)
    ret.op, ret.dtype, ret.src, ret.arg = op, dtype, src, arg
    _interned[key] = weakref.ref(ret)
    if len(_interned) > _sweep_at: _sweep()
    return ret
  def __reduce__(self): return UOp, (self.op, self.dtype, self.src, self.arg)
  def __repr__(self) -> str: return pretty(self)
  def replace(self, **kw) -> UOp:
    return UOp(kw.get("op", self.op), kw.get("dtype", self.dtype), kw.get("src", self.src), kw.get("arg", self.arg))

  # *** construction helpers ***
  @staticmethod
  def const(dtype: DType, value) -> UOp:
    # the index math's int32 constants are most of them: skip the conversion when it would change nothing
    if dtype is dtypes.int32 and value.__class__ is int and -0x80000000 <= value <= 0x7fffffff: return UOp(Ops.CONST, dtype, (), value)
    return UOp(Ops.CONST, dtype, (), dtypes.as_const(value, dtype))
  def const_like(self, value) -> UOp: return UOp.const(self.dtype, value)
  def alu(self, op: Ops, *srcs: UOp) -> UOp:
    out = dtypes.bool.vec(self.dtype.count) if op in COMPARISON else self.dtype
    return UOp(op, out, (self,) + srcs)
  def _bin(self, op: Ops, x, rev=False) -> UOp:
    if not isinstance(x, (UOp, numbers.Number)): return NotImplemented   # (a Tensor's reflected op takes a symbolic value)
    y = x if isinstance(x, UOp) else self.const_like(x)
    a, b = (y, self) if rev else (self, y)
    return simplify_alu(op, a.dtype if op not in COMPARISON else dtypes.bool, (a, b))
  def __add__(self, x): return self._bin(Ops.ADD, x)
  def __radd__(self, x): return self._bin(Ops.ADD, x, True)
  def __mul__(self, x): return self._bin(Ops.MUL, x)
  def __rmul__(self, x): return self._bin(Ops.MUL, x, True)
  def __sub__(self, x): return self + (-x if not isinstance(x, UOp) else x * -1)
  def __rsub__(self, x): return self * -1 + x
  def __neg__(self): return self * -1
  def __floordiv__(self, x): return self._bin(Ops.IDIV, x)
  def __mod__(self, x): return self._bin(Ops.MOD, x)
  def lt(self, x) -> UOp: return self._bin(Ops.CMPLT, x)
  def ge(self, x) -> UOp: return self.lt(x).logical_not()
  def ne(self, x) -> UOp: return self._bin(Ops.CMPNE, x)
  def eq(self, x) -> UOp: return self.ne(x).logical_not()
  def logical_not(self) -> UOp: return self._bin(Ops.CMPNE, True)
  def logical_and(self, x) -> UOp: return self._bin(Ops.AND, x)
  def where(self, a: UOp, b: UOp) -> UOp: return simplify_alu(Ops.WHERE, a.dtype, (self, a, b))
  def cast(self, dtype: DType) -> UOp:
    if self.dtype == dtype: return self
    # (a float constant is a double until rendered: cast the value self's dtype holds, float32(0.1) not 0.1)
    if self.op is Ops.CONST: return UOp.const(dtype, dtypes.rounded(self.arg, self.dtype) if self.dtype.is_float else self.arg)
    return UOp(Ops.CAST, dtype, (self,))

  # *** symbolic variables (tinygrad's Variable) ***
  def bind(self, value: int) -> UOp:
    """This Variable (a DEFINE_VAR) bound to `value`: usable as a tensor dimension. ValueError outside [min, max].

    >>> from compiler.uop import Variable
    >>> Variable("n", 1, 8).bind(3)
    n=3
    """
    if self.op is not Ops.DEFINE_VAR: raise TypeError(f"bind: only a Variable can be bound, not {self.op.name}")
    name, lo, hi = self.arg
    if isinstance(value, bool) or not isinstance(value, int):
      raise TypeError(f"bind: Variable {name!r} takes an int value, got {type(value).__name__}")
    if not lo <= value <= hi: raise ValueError(f"Variable {name!r}: value {value} is outside its range [{lo}, {hi}]")
    return UOp(Ops.BIND, self.dtype, (self, UOp.const(self.dtype, value)))
  def unbind(self) -> tuple[UOp, int]:
    """(the Variable, its value) of a bound Variable."""
    if self.op is not Ops.BIND: raise TypeError(f"unbind: {pretty(self)} is not a bound Variable")
    return self.src[0], self.src[1].arg
  # `<` etc. on UOps: a Python bool where it holds the same for every value of the Variables (`start_pos > 0` for a
  # start_pos in [1, 64], tinygrad's `if start_pos > 0`); else it is only known at run time: refuse clearly
  def _cmp(self, x, op: str):
    if isinstance(x, (int, UOp)) and not isinstance(x, bool) and self.dtype is not None and self.dtype.is_int:
      d = self - x   # (simplified: `n+2 > n` is decided by the constant that is left)
      lo, hi = d.vmin, d.vmax
      if op == "<" and (hi < 0 or lo >= 0): return hi < 0
      if op == "<=" and (hi <= 0 or lo > 0): return hi <= 0
      if op == ">" and (lo > 0 or hi <= 0): return lo > 0
      if op == ">=" and (lo >= 0 or hi < 0): return lo >= 0
    raise TypeError(f"symbolic shapes: `{pretty(self)} {op} {pretty(x) if isinstance(x, UOp) else repr(x)}` depends on a Variable's value; "
                    "this operation does not support a symbolic (Variable) dimension")
  def __lt__(self, x): return self._cmp(x, "<")
  def __le__(self, x): return self._cmp(x, "<=")
  def __gt__(self, x): return self._cmp(x, ">")
  def __ge__(self, x): return self._cmp(x, ">=")
  @property
  def val(self) -> int:
    """A bound Variable's value (tinygrad's `start_pos.val`).

    >>> Variable("n", 1, 8).bind(3).val
    3
    """
    return self.unbind()[1]
  @property
  def expr(self) -> str:
    """A Variable's name (tinygrad spells it .expr)."""
    return self.arg[0] if self.op is Ops.DEFINE_VAR else self.unbind()[0].arg[0]

  # *** graph walks ***
  def toposort(self) -> list[UOp]:
    """Every node reachable from self, each after all of its sources."""
    out, seen, stack = [], set(), [(self, False)]
    while stack:
      u, done = stack.pop()
      if done: out.append(u); continue
      if u in seen: continue
      seen.add(u)
      stack.append((u, True))
      for s in reversed(u.src):
        if s not in seen: stack.append((s, False))
    return out
  @functools.cached_property
  def order_key(self) -> tuple:
    """A structural sort key: equal for equal graphs, and different for different ones."""
    return (self.op.value, repr(self.arg), tuple(s.order_key for s in self.src))

  # *** integer bounds, for the symbolic simplifier ***
  @functools.cached_property
  def _bounds(self) -> tuple:
    op, s = self.op, self.src
    if op is Ops.CONST: return (self.arg, self.arg)
    if op is Ops.RANGE: return (0, s[0].vmax - 1)
    if op is Ops.DEFINE_VAR: return (self.arg[1], self.arg[2])
    if op is Ops.BIND: return s[0]._bounds   # (a kernel must not depend on the bound value: only the range is known)
    if op is Ops.LANE: return (0, self.arg - 1)
    if self.dtype is not None and self.dtype.count == 1 and (self.dtype.is_int or self.dtype.is_bool):
      if op is Ops.ADD: return (s[0].vmin + s[1].vmin, s[0].vmax + s[1].vmax)
      if op is Ops.MUL:
        c = [a * b for a in (s[0].vmin, s[0].vmax) for b in (s[1].vmin, s[1].vmax)]
        return (min(c), max(c))
      if op is Ops.IDIV and s[1].op is Ops.CONST and s[1].arg > 0:
        return (_c_div(s[0].vmin, s[1].arg), _c_div(s[0].vmax, s[1].arg))
      if op is Ops.MOD and s[1].op is Ops.CONST and s[1].arg > 0:
        if s[0].vmin >= 0: return (0, min(s[0].vmax, s[1].arg - 1))
        return (-(s[1].arg - 1), s[1].arg - 1)
      if op is Ops.MAX: return (max(s[0].vmin, s[1].vmin), max(s[0].vmax, s[1].vmax))
      if op is Ops.CMPLT:
        if s[0].vmax < s[1].vmin: return (True, True)
        return (False, False) if s[0].vmin >= s[1].vmax else (False, True)
      if op is Ops.WHERE: return (min(s[1].vmin, s[2].vmin), max(s[1].vmax, s[2].vmax))
      if op is Ops.CAST and s[0].dtype.is_int and self.dtype.itemsize >= s[0].dtype.itemsize: return (s[0].vmin, s[0].vmax)
    return (dtypes.min(self.dtype.scalar), dtypes.max(self.dtype.scalar)) if self.dtype is not None else (-math.inf, math.inf)
  @property
  def vmin(self): return self._bounds[0]
  @property
  def vmax(self): return self._bounds[1]

def pretty(u: UOp, depth: int = 6) -> str:
  if depth == 0: return f"{u.op.name}(...)"
  if u.op is Ops.CONST: return f"{u.arg!r}"
  if u.op is Ops.RANGE: return f"r{u.arg[0]}"
  if u.op is Ops.DEFINE_VAR: return u.arg[0]
  if u.op is Ops.BIND: return f"{u.src[0].arg[0]}={u.src[1].arg}"
  inner = ", ".join(pretty(s, depth - 1) for s in u.src)
  return f"{u.op.name}({inner}{', ' if u.src and u.arg is not None else ''}{'' if u.arg is None else repr(u.arg)})"

# ***** pattern rewrite engine *****

class UPat:
  """A structural pattern. `UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c")))` matches x + const and binds x, c.
  `op` may be a set of ops; `src` a tuple matched in order (commutative ops also try the swapped order)."""
  def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
               src: tuple | None = None, arg: Any = None, name: str | None = None, allow_any_len: bool = False):
    self.ops = None if op is None else (frozenset((op,)) if isinstance(op, Ops) else frozenset(op))
    self.dtypes = None if dtype is None else (frozenset((dtype,)) if isinstance(dtype, DType) else frozenset(dtype))
    self.src, self.arg, self.name, self.allow_any_len = src, arg, name, allow_any_len
  @staticmethod
  def var(name: str | None = None, dtype=None) -> UPat: return UPat(dtype=dtype, name=name)
  @staticmethod
  def cvar(name: str | None = None, dtype=None) -> UPat: return UPat(Ops.CONST, dtype=dtype, name=name)
  @staticmethod
  def const(value, name: str | None = None) -> UPat: return UPat(Ops.CONST, arg=value, name=name)

  def match(self, u: UOp, binds: dict) -> bool:
    if self.ops is not None and u.op not in self.ops: return False
    if self.dtypes is not None and u.dtype not in self.dtypes and (u.dtype is None or u.dtype.scalar not in self.dtypes): return False
    if self.arg is not None and not (u.arg == self.arg and type(u.arg) is type(self.arg)): return False
    if self.name is not None:
      if self.name in binds and binds[self.name] is not u: return False
      binds[self.name] = u
    if self.src is None: return True
    if len(self.src) != len(u.src) and not (self.allow_any_len and len(u.src) >= len(self.src)): return False
    orders = [u.src]
    if u.op in COMMUTATIVE and len(u.src) == 2: orders.append(u.src[::-1])
    for order in orders:
      trial = dict(binds)
      if all(p.match(s, trial) for p, s in zip(self.src, order)):
        binds.clear(); binds.update(trial)
        return True
    return False

class PatternMatcher:
  """An ordered list of (UPat, fn(**binds) -> UOp | None) rules, indexed by op for speed."""
  def __init__(self, rules: list[tuple[UPat, Callable]]):
    self.rules = rules
    self.by_op: dict[Ops, list] = {}
    self.any_op: list = []
    for p, fn in rules:
      if p.ops is None: self.any_op.append((p, fn))
      else:
        for op in p.ops: self.by_op.setdefault(op, []).append((p, fn))
  def __add__(self, other: PatternMatcher) -> PatternMatcher: return PatternMatcher(self.rules + other.rules)
  def rewrite(self, u: UOp, ctx=None) -> UOp | None:
    rules = self.by_op.get(u.op, [])
    if self.any_op: rules = rules + self.any_op
    for p, fn in rules:
      binds: dict = {}
      if p.match(u, binds):
        if ctx is not None: binds["ctx"] = ctx
        if (ret := fn(**binds)) is not None and ret is not u: return ret
    return None

def graph_rewrite(root: UOp, pm: PatternMatcher, ctx=None, max_steps: int = 100000, cache: str | None = None) -> UOp:
  """Rewrite bottom-up: sources first, then the node until no rule applies (a fixed point).

  `cache` (only for rules that depend on nothing but the node, ctx None): the name under which each node keeps its
  rewritten form, so that later rewrites with the same rules skip every subgraph they have seen (UOps are immutable and
  interned, and the result for a node depends only on the node). A node that is its own result keeps True (itself would
  be a reference cycle that outlives the interning table's weak reference)."""
  memo: dict[UOp, UOp] = {}
  steps = 0
  def known(u: UOp) -> bool:
    if u in memo: return True
    if cache is not None and (r := u.__dict__.get(cache)) is not None:
      memo[u] = u if r is True else r
      return True
    return False
  def visit(u: UOp) -> UOp:
    nonlocal steps
    if known(u): return memo[u]
    stack = [u]
    # iterative post-order over the not-yet-rewritten part of the graph
    while stack:
      x = stack.pop()
      if x in memo: continue
      pending = [s for s in x.src if not known(s)]
      if pending:
        stack.append(x); stack.extend(pending)
        continue
      new = x if not x.src else x.replace(src=tuple(memo[s] for s in x.src))
      while (nxt := pm.rewrite(new, ctx)) is not None:
        steps += 1
        if steps > max_steps: raise RuntimeError(f"graph_rewrite did not reach a fixed point after {max_steps} steps at {pretty(new, 3)}")
        if nxt.src and any(s not in memo or memo[s] is not s for s in nxt.src):
          nxt = visit_child(nxt)
        new = nxt
      memo[x] = new
      memo.setdefault(new, new)
    return memo[u]
  def visit_child(n: UOp) -> UOp:
    return n.replace(src=tuple(visit(s) for s in n.src))
  out = visit(root)
  if cache is not None:
    for x, r in memo.items(): x.__dict__[cache] = True if r is x else r
  return out

def substitute(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
  """Replace nodes (by identity) and rebuild everything above them."""
  memo = dict(mapping)
  for u in root.toposort():
    if u in memo: continue
    # a node none of whose sources changed is itself (interning would return it anyway, at the cost of a lookup)
    memo[u] = u if not u.src or (srcs := tuple(memo[s] for s in u.src)) == u.src else u.replace(src=srcs)
  return memo[root]

# ***** smart construction of ALU nodes: constant folding and the symbolic integer rules *****

def _is_int(u: UOp) -> bool: return u.dtype is not None and u.dtype.count == 1 and (u.dtype.is_int)

def _split_sum(u: UOp) -> tuple[dict[UOp, int], int]:
  """An integer expression as {term: coefficient} + constant."""
  terms: dict[UOp, int] = {}
  const = 0
  stack = [(u, 1)]
  while stack:
    x, k = stack.pop()
    if x.op is Ops.CONST: const += k * x.arg
    elif x.op is Ops.ADD: stack.extend((s, k) for s in x.src)
    elif x.op is Ops.MUL and x.src[1].op is Ops.CONST: stack.append((x.src[0], k * x.src[1].arg))
    else: terms[x] = terms.get(x, 0) + k
  # (x//c)*c + x%c -> x : undo a split of one index into two
  changed = any(t.op is Ops.MOD for t in terms)
  while changed:
    changed = False
    for t, k in list(terms.items()):
      if t.op is Ops.MOD and t.src[1].op is Ops.CONST and t in terms:
        x, c = t.src[0], t.src[1].arg
        d = UOp(Ops.IDIV, x.dtype, (x, t.src[1]))
        if k != 0 and d in terms and terms[d] == k * c and x.vmin >= 0:
          del terms[t], terms[d]
          terms[x] = terms.get(x, 0) + k
          changed = True
          break
  return {t: k for t, k in terms.items() if k != 0}, const

def _term_key(u: UOp):
  # a total, stable order so that equal sums always build the same UOp (else rewriting could cycle)
  return (u.op is not Ops.RANGE, u.arg[0] if u.op is Ops.RANGE and isinstance(u.arg, tuple) else 0, u.order_key)

def _build_sum(dt: DType, terms: dict[UOp, int], const: int) -> UOp:
  out = None
  for t in sorted(terms, key=_term_key):
    k = terms[t]
    tk = t if k == 1 else UOp(Ops.MUL, dt, (t, UOp.const(dt, k)))
    out = tk if out is None else UOp(Ops.ADD, dt, (out, tk))
  if out is None: return UOp.const(dt, const)
  return out if const == 0 else UOp(Ops.ADD, dt, (out, UOp.const(dt, const)))

def _sym_div_mod(op: Ops, x: UOp, c: int) -> UOp | None:
  dt = x.dtype
  if c == 1: return x if op is Ops.IDIV else UOp.const(dt, 0)
  if x.vmin < 0: return None
  if op is Ops.MOD and x.vmax < c: return x
  if op is Ops.IDIV and x.vmax < c: return UOp.const(dt, 0)
  if x.op is Ops.IDIV and op is Ops.IDIV and x.src[1].op is Ops.CONST and x.src[1].arg > 0:
    return _idiv(x.src[0], x.src[1].arg * c)
  if x.op is Ops.MOD and op is Ops.MOD and x.src[1].op is Ops.CONST and x.src[1].arg % c == 0: return _imod(x.src[0], c)
  terms, const = _split_sum(x)
  if all(t.vmin >= 0 for t in terms) and all(k > 0 for k in terms.values()):
    # every coefficient k = q*c + r: the q parts leave the division whole, only the r parts stay inside
    quot = {t: k // c for t, k in terms.items() if k >= c}
    rest = {t: k % c for t, k in terms.items() if k % c != 0}
  else:
    quot = {t: k // c for t, k in terms.items() if k % c == 0}
    rest = {t: k for t, k in terms.items() if k % c != 0}
  qc, rc = divmod(const, c)
  if not quot and qc == 0 and op is Ops.IDIV:
    g = math.gcd(c, *rest.values()) if rest else c
    if g > 1 and rc % g == 0 and all(t.vmin >= 0 for t in rest):
      return _idiv(_build_sum(dt, {t: k // g for t, k in rest.items()}, rc // g), c // g)
    return None
  rest_u = _build_sum(dt, rest, rc)
  if rest_u.vmin < 0: return None
  if op is Ops.MOD:
    if not quot and qc == 0:
      g = math.gcd(c, *rest.values()) if rest else c
      if g > 1 and rc % g == 0 and all(t.vmin >= 0 for t in rest):
        return _imod(_build_sum(dt, {t: k // g for t, k in rest.items()}, rc // g), c // g) * g
      return None
    return rest_u if rest_u.vmax < c else UOp(Ops.MOD, dt, (rest_u, UOp.const(dt, c)))
  lo, hi = rest_u.vmin // c, rest_u.vmax // c
  rdiv = UOp.const(dt, lo) if lo == hi else (_idiv(rest_u, c) if rest else UOp.const(dt, 0))
  q = _build_sum(dt, quot, qc)
  return _add(q, rdiv)

def _idiv(x: UOp, c: int) -> UOp:
  r = _sym_div_mod(Ops.IDIV, x, c)
  return r if r is not None else UOp(Ops.IDIV, x.dtype, (x, UOp.const(x.dtype, c)))
def _imod(x: UOp, c: int) -> UOp:
  r = _sym_div_mod(Ops.MOD, x, c)
  return r if r is not None else UOp(Ops.MOD, x.dtype, (x, UOp.const(x.dtype, c)))
def _add(a: UOp, b: UOp) -> UOp:
  terms, const = _split_sum(UOp(Ops.ADD, a.dtype, (a, b)))
  return _build_sum(a.dtype, terms, const)

def simplify_alu(op: Ops, dtype: DType, srcs: tuple[UOp, ...]) -> UOp:
  """Build `op(*srcs)` folding constants and applying the integer index rules; the one entry point for
  arithmetic on UOps (the rewrite rules in `symbolic` call it too)."""
  if all(s.op is Ops.CONST for s in srcs) and dtype.count == 1:
    return UOp.const(dtype, exec_alu(op, srcs[0].dtype if op in COMPARISON else dtype, tuple(s.arg for s in srcs)))
  if op is Ops.WHERE:
    c, a, b = srcs
    if c.op is Ops.CONST: return a if c.arg else b
    if a is b: return a
    # a select on c inside a select on c picks the same side (a cat's piece: its padded view is gated by the same c)
    if a.op is Ops.WHERE and a.src[0] is c: return simplify_alu(op, dtype, (c, a.src[1], b))
    if b.op is Ops.WHERE and b.src[0] is c: return simplify_alu(op, dtype, (c, a, b.src[2]))
    if dtype.scalar is dtypes.bool and c.dtype == dtype and a.op is Ops.CONST and b.op is Ops.CONST and a.arg and not b.arg: return c
    return UOp(op, dtype, srcs)
  if len(srcs) == 2:
    a, b = srcs
    if op in COMMUTATIVE and a.op is Ops.CONST and b.op is not Ops.CONST: a, b = b, a
    if _is_int(a) and dtype.count == 1 and (a.dtype.is_int):
      if op in (Ops.ADD, Ops.MUL) and (b.op is Ops.CONST or op is Ops.ADD):
        if op is Ops.MUL and b.arg == 0: return b
        if op is Ops.MUL and b.arg == 1: return a
        if op is Ops.MUL and a.op is not Ops.ADD:
          if a.op is Ops.MUL and a.src[1].op is Ops.CONST: return simplify_alu(Ops.MUL, dtype, (a.src[0], UOp.const(dtype, a.src[1].arg * b.arg)))
          return UOp(op, dtype, (a, b))
        terms, const = _split_sum(UOp(op, dtype, (a, b)))
        return _build_sum(dtype, terms, const)
      if op in (Ops.IDIV, Ops.MOD) and b.op is Ops.CONST and b.arg > 0: return _idiv(a, b.arg) if op is Ops.IDIV else _imod(a, b.arg)
    if op is Ops.CMPLT and a.dtype is not None and (a.dtype.is_int or a.dtype.is_bool) and a.dtype.count == 1:
      if a.vmax < b.vmin: return UOp.const(dtypes.bool, True)
      if a.vmin >= b.vmax: return UOp.const(dtypes.bool, False)
      # (x*k + y) < c with 0 <= y < k  ->  x < ceil(c/k), the bound check a pad or shrink makes on a split index
      if b.op is Ops.CONST and a.op is Ops.ADD and a.vmin >= 0:
        terms, const = _split_sum(a)
        if len(terms) >= 1:
          g = math.gcd(*terms.values())
          if g > 1:
            big = {t: k // g for t, k in terms.items()}
            if all(t.vmin >= 0 for t in terms) and 0 <= const < g:
              return simplify_alu(Ops.CMPLT, dtype, (_build_sum(a.dtype, big, 0), UOp.const(a.dtype, -((const - b.arg) // g))))
    if op is Ops.AND and dtype.is_bool:
      if b.op is Ops.CONST: return a if b.arg else b
      if a is b: return a
    if op is Ops.OR and dtype.is_bool and b.op is Ops.CONST: return b if b.arg else a
    if op is Ops.CMPNE and dtype.is_bool and a.dtype.is_bool and b.op is Ops.CONST and b.arg is True and a.op is Ops.CMPNE and a.src[1].op is Ops.CONST and a.src[1].arg is True and a.dtype.is_bool:
      return a.src[0]  # not(not x) -> x
    if op is Ops.CMPNE and a is b and not a.dtype.is_float: return UOp.const(dtypes.bool, False)
    if op is Ops.MAX and a is b: return a
    if op is Ops.MAX and _is_int(a):
      if a.vmin >= b.vmax: return a
      if b.vmin >= a.vmax: return b
    if a.dtype is not None and a.dtype.is_float and b.op is Ops.CONST:
      if op is Ops.MUL and b.arg == 1.0: return a
      # x + -0.0 is x for every x; x + +0.0 is not (-0.0 + 0.0 = +0.0, IEEE 754-2019 6.3), so only -0.0 folds
      if op is Ops.ADD and b.arg == 0.0 and math.copysign(1.0, b.arg) < 0: return a
      if op is Ops.FDIV and b.arg == 1.0: return a
    srcs = (a, b)
  return UOp(op, dtype, tuple(srcs))

def _fold(x: UOp) -> UOp | None:
  new = simplify_alu(x.op, x.dtype, x.src)
  return None if new is x else new

# The symbolic rule set: every ALU node is passed through the same folding used at construction, so a graph
# built without the smart constructors (or after a substitution) reaches the same canonical form.
symbolic = PatternMatcher([(UPat(ALU, name="x"), _fold)])

def simplify(u: UOp) -> UOp:
  """`u` with the symbolic rules applied to a fixed point (each node's result is kept on it: simplifying again is free)."""
  return graph_rewrite(u, symbolic, cache="_simplified")

def Variable(name: str, min_val: int, max_val: int) -> UOp:
  """A named integer in [min_val, max_val] (tinygrad's Variable): `.bind(value)` makes a symbolic tensor dimension;
  kernels are built once for the whole range and take the value as an integer argument.

  >>> v = Variable("batch", 1, 64)
  >>> v.bind(17).unbind()[1], v.vmin, v.vmax
  (17, 1, 64)
  """
  if not isinstance(name, str) or not name.isidentifier(): raise ValueError(f"Variable: name {name!r} must be an identifier")
  if not (isinstance(min_val, int) and isinstance(max_val, int)) or not 0 <= min_val <= max_val < 2 ** 31:
    raise ValueError(f"Variable {name!r}: need integers 0 <= min <= max < 2**31, got [{min_val}, {max_val}]")
  return UOp(Ops.DEFINE_VAR, dtypes.int32, (), (name, min_val, max_val))
