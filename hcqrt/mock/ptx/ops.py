"""Decode PTX instructions into Python closures `fn(st, mask)` that run one instruction for a chunk of threads.

`mask` is None (every thread of the group) or a bool array over the chunk's threads. Registers hold raw
bits (unsigned numpy arrays, or numpy scalars while a value is uniform); each operand reader views the bits
as the instruction's type. Control-flow closures return a jump (see interpreter.py); others return None.

>>> from hcqrt.mock.ptx.parser import parse_ptx
>>> m = parse_ptx(".visible .entry k() { .reg .b32 %r<2>; add.s32 %r1, %r0, 5; ret; }")
>>> callable(decode(m.kernels["k"].instrs[0], DecodeCtx(m.kernels["k"].regs, {}, {}, "k")))
True
"""
from __future__ import annotations
import re
import numpy as np
from .parser import Instr, Operand, PTXError, TYPE_SIZE, literal_value
from .numerics import (NP, UINT, SINT, F32, F64, F16, LD, storage, is_float, is_signed, ftz, saturate, round_float, two_sum_err,
                       idiv, irem, mul_hi, widen, cvt, fma_f64, bf16_to_f32, f32_to_bf16, F8, f32_to_f8_satfinite, f8_to_f16)
from .mma import check_mma, warp_mma
from . import approx

EXIT = -1
ROUND = ("rn", "rz", "rm", "rp")

class DecodeCtx:
  """What decoding needs to know about the kernel: register types, labels, symbol addresses by name
  (name -> (space, address))."""
  def __init__(self, regs: dict[str, str], labels: dict[str, int], symbols: dict[str, tuple[str, int]], kernel: str, arch: str = "sm_90",
               version: str = ""):
    self.regs, self.labels, self.symbols, self.kernel, self.arch, self.version = regs, labels, symbols, kernel, arch, version
  @property
  def arch_num(self) -> int:
    """The module's `.target` as a number (sm_89 -> 89; sm_90a -> 90)."""
    return int("".join(ch for ch in self.arch[3:] if ch.isdigit()) or 0)
  @property
  def version_num(self) -> tuple[int, int]:
    """The module's `.version` as (major, minor) ("8.1" -> (8, 1)); (0, 0) when it has none."""
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", self.version)
    return (int(m[1]), int(m[2])) if m else (0, 0)

def _types(ins: Instr) -> list[str]: return [m for m in ins.mods if m in TYPE_SIZE]
def _rnd(ins: Instr, default: str = "rn") -> str: return next((m for m in ins.mods if m in ROUND), default)

# *** operands ***
def _imm(text: str, t: str):
  """A literal as a numpy scalar of type t (0f/0d literals are bit patterns)."""
  dt, body = NP[t], text.lstrip("+-")
  if body[:2] in ("0f", "0F", "0d", "0D") and len(body) in (10, 18):
    bits = int(body[2:], 16); size = 4 if len(body) == 10 else 8
    if not is_float(t):
      if text.startswith("-"): bits ^= 1 << (8 * size - 1)
      return np.array(bits % (1 << (8 * dt.itemsize)), dtype=np.uint64).astype(UINT[dt.itemsize]).view(dt)[()]
    v = literal_value(text)
  else: v = literal_value(text)
  if t == "pred": return np.bool_(v != 0)
  if t == "bf16": return f32_to_bf16(np.float32(v))[()]
  if t in ("f16x2", "bf16x2"):
    h = np.full(2, v, np.float16).view(np.uint32) if t == "f16x2" else np.full(2, f32_to_bf16(np.float32(v)), np.uint16).view(np.uint32)
    return h[0]
  if is_float(t): return dt.type(v)
  if isinstance(v, float): v = int(v)
  return np.array(v % (1 << (8 * dt.itemsize)), dtype=np.uint64).astype(UINT[dt.itemsize]).view(dt)[()]

def reader(ctx: DecodeCtx, op: Operand, t: str, line: int):
  """A function st -> the operand's value as numpy type NP[t] (bool for predicates)."""
  dt = NP[t]
  if op.kind == "neg":
    r = reader(ctx, op.items[0], "pred", line)
    return lambda st: np.logical_not(r(st))
  if op.kind == "imm":
    c = _imm(op.text, t); return lambda st: c
  if op.kind == "sym":
    if op.name not in ctx.symbols: raise PTXError(f"line {line}: unknown symbol {op.name}")
    _space, addr = ctx.symbols[op.name]
    c = _imm(str((addr + op.offset) % (1 << 64)), t); return lambda st: c
  if op.kind != "reg": raise PTXError(f"line {line}: operand kind {op.kind} not usable here")
  key = op.name
  if key not in ctx.regs:  # special register
    return lambda st: np.asarray(st.special(key)).astype(dt)[()]   # [()] keeps uniform values scalar
  rt = ctx.regs[key]
  if rt == "pred" or t == "pred":
    if rt != t: raise PTXError(f"line {line}: register {key} is .{rt}, used as .{t}")
    return lambda st: st.R[key]
  w, sz = storage(rt).itemsize, dt.itemsize
  if w == sz: return (lambda st: st.R[key]) if storage(rt) == dt else (lambda st: st.R[key].view(dt))
  if w > sz:
    u = UINT[sz]; return lambda st: st.R[key].astype(u).view(dt)
  if is_float(t): raise PTXError(f"line {line}: register {key} (.{rt}) is narrower than .{t}")
  if is_signed(t):
    s = SINT[w]; return lambda st: st.R[key].view(s).astype(dt)
  return lambda st: st.R[key].astype(dt)

def writer(ctx: DecodeCtx, op: Operand | None, t: str, line: int):
  """A function (st, value of type NP[t], mask) that stores into the operand's register (masked threads only)."""
  if op is None: return lambda st, v, mask: None   # '_' sink
  if op.kind != "reg" or op.name not in ctx.regs: raise PTXError(f"line {line}: destination must be a declared register")
  key, rt = op.name, ctx.regs[op.name]
  dt = NP[t]
  if rt == "pred":
    if t != "pred": raise PTXError(f"line {line}: predicate {key} written as .{t}")
    conv = lambda v: v
  else:
    store = storage(rt)
    if t == "pred": conv = lambda v: np.asarray(v).astype(store)[()]
    elif dt.itemsize == store.itemsize: conv = (lambda v: v) if dt == store else (lambda v: v.view(store))
    elif dt.itemsize < store.itemsize:
      if is_float(t): u = UINT[dt.itemsize]; conv = lambda v: np.asarray(v).view(u).astype(store)[()]
      elif dt.kind == "i": s = SINT[store.itemsize]; conv = lambda v: v.astype(s).view(store)
      else: conv = lambda v: v.astype(store)
    else: u = UINT[dt.itemsize]; conv = lambda v: np.asarray(v).view(u).astype(store)[()]
  def w(st, v, mask):
    v = conv(v)
    if mask is None: st.R[key] = v
    else: st.R[key] = np.where(mask, v, st.R[key])
  return w

# *** float plumbing: working representation for each float type ***
def _fin(t: str):
  if t == "bf16": return bf16_to_f32
  if t == "f16x2": return lambda v: np.asarray(v).reshape(-1).view(np.float16).reshape(-1, 2)
  if t == "bf16x2": return lambda v: bf16_to_f32(np.asarray(v).reshape(-1).view(np.uint16)).reshape(-1, 2)
  return lambda v: v

def _fout(t: str):
  if t == "bf16": return lambda v: f32_to_bf16(v)
  if t == "f16x2": return lambda v: np.ascontiguousarray(np.asarray(v, np.float16)).view(np.uint32).reshape(-1)
  if t == "bf16x2": return lambda v: np.ascontiguousarray(f32_to_bf16(v)).view(np.uint32).reshape(-1)
  return lambda v: v

def _elem(t: str) -> np.dtype:
  """numpy dtype float ops compute in for type t."""
  return {"f16": F16, "f16x2": F16, "bf16": F32, "bf16x2": F32, "f32": F32, "f64": F64}[t]

def _to_odd(s, err):
  """Round-to-odd fix-up of a float64 sum given its exact error: makes a later rounding to a narrower float exact."""
  even = (np.asarray(s).view(np.uint64) & np.uint64(1)) == 0
  return np.where((err != 0) & even & np.isfinite(s), np.nextafter(s, np.copysign(np.inf, err)), s)

def _exact_round(kind: str, args, et: np.dtype, mode: str):
  """add/sub/mul/fma/div/sqrt of `args` (dtype et) correctly rounded to et with mode, via a wider type."""
  hi = LD if et == F64 else F64
  if et == F64 and kind in ("fma", "mul"):   # long double's 64-bit product is not exact: round the 106-bit one once
    return fma_f64(args[0], args[1], args[2] if kind == "fma" else 0.0, mode, mul=kind == "mul")
  A = [np.asarray(a).astype(hi) for a in args]
  err = None
  if kind == "add": r = A[0] + A[1]; err = two_sum_err(A[0], A[1], r)
  elif kind == "sub": r = A[0] - A[1]; err = two_sum_err(A[0], -A[1], r)
  elif kind == "mul": r = A[0] * A[1]; err = None
  elif kind == "fma":
    p = A[0] * A[1]; r = p + A[2]; err = two_sum_err(p, A[2], r)
  elif kind == "div": r = A[0] / A[1]
  elif kind == "sqrt": r = np.sqrt(A[0])
  else: raise ValueError(kind)
  if hi == F64 and err is not None: r, err = _to_odd(r, err), None
  return round_float(r, et, mode, err)

def _float_fn(kind: str, et: np.dtype, mode: str, fz: bool, sat: bool):
  """The arithmetic of one float instruction on working values."""
  native = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "sqrt": np.sqrt}.get(kind)
  exact_needed = mode != "rn" or kind == "fma" or (et != F32 and et != F64 and kind in ("fma",))
  def f(*args):
    if fz: args = [ftz(a) for a in args]
    r = _exact_round(kind, args, et, mode) if (exact_needed or native is None) else native(*args)
    if sat: r = saturate(r)
    if fz: r = ftz(r)
    return r
  return f

# *** decoders: each returns fn(st, mask) ***
def _float_op(ins, ctx, t, fn, nin):
  d = writer(ctx, ins.args[0], t, ins.line)
  rs = [reader(ctx, a, t, ins.line) for a in ins.args[1:1+nin]]
  fi, fo = _fin(t), _fout(t)
  if nin == 1:
    r0 = rs[0]
    return lambda st, m: d(st, fo(fn(fi(r0(st)))), m)
  if nin == 2:
    r0, r1 = rs
    return lambda st, m: d(st, fo(fn(fi(r0(st)), fi(r1(st)))), m)
  return lambda st, m: d(st, fo(fn(*[fi(r(st)) for r in rs])), m)

def _int_op(ins, ctx, t, fn, nin, tout=None):
  d = writer(ctx, ins.args[0], tout or t, ins.line)
  rs = [reader(ctx, a, t, ins.line) for a in ins.args[1:1+nin]]
  if nin == 2:
    r0, r1 = rs
    return lambda st, m: d(st, fn(r0(st), r1(st)), m)
  return lambda st, m: d(st, fn(*[r(st) for r in rs]), m)

def d_arith(ins: Instr, ctx: DecodeCtx):
  t = _types(ins)[-1]
  op = ins.op
  if is_float(t) or t in ("f16x2", "bf16x2"):
    et = _elem(t)
    fz = "ftz" in ins.mods and et == F32
    kind = {"mad": "fma"}.get(op, op)
    nin = 3 if kind == "fma" else 2
    if kind == "div" and et == F32 and ("approx" in ins.mods or "full" in ins.mods):   # 9.7.3.8: 2 ulp (approx.py)
      full = "full" in ins.mods
      def fdiv(a, b):
        if fz: a, b = ftz(a), ftz(b)
        r = approx.divide(a, b, full)
        return ftz(r) if fz else r
      return _float_op(ins, ctx, t, fdiv, 2)
    return _float_op(ins, ctx, t, _float_fn(kind, et, _rnd(ins), fz, "sat" in ins.mods), nin)
  dt = NP[t]
  sat = "sat" in ins.mods
  if op in ("add", "sub"):
    if sat:   # only .s32
      lo, hi = np.int64(-2**31), np.int64(2**31 - 1)
      f = (lambda a, b: np.clip(a.astype(np.int64) + b, lo, hi).astype(np.int32)) if op == "add" else (lambda a, b: np.clip(a.astype(np.int64) - b, lo, hi).astype(np.int32))
      return _int_op(ins, ctx, t, f, 2)
    return _int_op(ins, ctx, t, np.add if op == "add" else np.subtract, 2)
  if op == "mul":
    if "wide" in ins.mods:
      wt = {v: k for k, v in NP.items() if k[0] in "us"}[widen(dt)] if dt.itemsize < 8 else None
      if wt is None: raise PTXError(f"line {ins.line}: mul.wide needs a 16/32-bit type")
      w = widen(dt); return _int_op(ins, ctx, t, lambda a, b: a.astype(w) * b.astype(w), 2, tout=wt)
    if "hi" in ins.mods: return _int_op(ins, ctx, t, lambda a, b: mul_hi(a, b, dt), 2)
    return _int_op(ins, ctx, t, np.multiply, 2)
  if op == "mad":
    if "wide" in ins.mods:
      w = widen(dt); wt = {v: k for k, v in NP.items() if k[0] in "us"}[w]
      d = writer(ctx, ins.args[0], wt, ins.line)
      ra, rb = reader(ctx, ins.args[1], t, ins.line), reader(ctx, ins.args[2], t, ins.line)
      rc = reader(ctx, ins.args[3], wt, ins.line)
      return lambda st, m: d(st, ra(st).astype(w) * rb(st).astype(w) + rc(st), m)
    if "hi" in ins.mods: return _int_op(ins, ctx, t, lambda a, b, c: mul_hi(a, b, dt) + c, 3)
    return _int_op(ins, ctx, t, lambda a, b, c: a * b + c, 3)
  if op == "fma": raise PTXError(f"line {ins.line}: fma needs a float type")
  if op == "div": return _int_op(ins, ctx, t, lambda a, b: idiv(a, b, dt.kind == "i"), 2)
  raise PTXError(f"line {ins.line}: unsupported {ins.text.split()[0]}")

def d_rem(ins, ctx):
  t = _types(ins)[-1]; dt = NP[t]
  return _int_op(ins, ctx, t, lambda a, b: irem(a, b, dt.kind == "i"), 2)

def d_unary_f(ins, ctx):
  """abs/neg (int and float), sqrt, rsqrt, rcp, ex2, lg2, sin, cos, tanh."""
  t = _types(ins)[-1]; op = ins.op
  if not is_float(t) and t not in ("f16x2", "bf16x2"):
    if op == "abs": return _int_op(ins, ctx, t, np.abs, 1)
    if op == "neg": return _int_op(ins, ctx, t, np.negative, 1)
    raise PTXError(f"line {ins.line}: {ins.op}.{t} is not supported")
  et = _elem(t); fz = "ftz" in ins.mods and et == F32
  mode = _rnd(ins)
  et_name = {"f16x2": "f16", "bf16x2": "bf16"}.get(t, t)
  if "approx" in ins.mods and approx.supported(op, et_name):   # as inexact as the ISA allows (approx.py)
    base = lambda x: approx.approximate(op, et_name, x)
  elif "approx" in ins.mods and et == F64 and "ftz" in ins.mods and op in ("rcp", "rsqrt"):
    base = lambda x: approx.upper_word_f64(op, x)
  elif op == "sqrt" and mode != "rn": base = lambda x: _exact_round("sqrt", [x], et, mode)
  elif op == "rcp" and mode != "rn": base = lambda x: _exact_round("div", [np.ones_like(x), x], et, mode)
  else:
    base = {"abs": np.abs, "neg": np.negative, "sqrt": np.sqrt, "rsqrt": lambda x: (1 / np.sqrt(x)).astype(x.dtype),
            "rcp": lambda x: (1 / x).astype(x.dtype), "ex2": np.exp2, "lg2": np.log2, "sin": np.sin, "cos": np.cos,
            "tanh": np.tanh}[op]
    if op in ("ex2", "lg2", "sin", "cos", "tanh", "rsqrt") and et == F16:   # compute f16 approximations in f32
      b0 = base; base = lambda x: b0(x.astype(F32)).astype(F16)
  sat = "sat" in ins.mods
  def f(x):
    x = np.asarray(x)
    if fz: x = ftz(x)
    r = base(x)
    if sat: r = saturate(r)
    if fz: r = ftz(r)
    return r
  return _float_op(ins, ctx, t, f, 1)

def d_minmax(ins, ctx):
  t = _types(ins)[-1]
  if is_float(t) or t in ("f16x2", "bf16x2"):
    et = _elem(t); fz = "ftz" in ins.mods and et == F32
    # PTX min/max return the non-NaN operand; .NaN variants propagate NaN
    base = {("min", False): np.fmin, ("max", False): np.fmax, ("min", True): np.minimum, ("max", True): np.maximum}[(ins.op, "NaN" in ins.mods)]
    def f(a, b):
      if fz: a, b = ftz(a), ftz(b)
      return base(a, b)
    return _float_op(ins, ctx, t, f, 2)
  return _int_op(ins, ctx, t, np.minimum if ins.op == "min" else np.maximum, 2)

def d_bitop(ins, ctx):
  t = _types(ins)[-1]
  if t == "pred":
    f = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor, "not": np.logical_not}[ins.op]
    return _int_op(ins, ctx, t, f, 1 if ins.op == "not" else 2)
  if ins.op == "cnot": return _int_op(ins, ctx, t, lambda a: (a == 0).astype(a.dtype), 1)
  f = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "not": np.invert}[ins.op]
  return _int_op(ins, ctx, t, f, 1 if ins.op == "not" else 2)

def d_shift(ins, ctx):
  t = _types(ins)[-1]; dt = NP[t]; bits = 8 * dt.itemsize
  d = writer(ctx, ins.args[0], t, ins.line)
  ra, rb = reader(ctx, ins.args[1], t, ins.line), reader(ctx, ins.args[2], "u32", ins.line)
  # PTX clamps shift amounts at the register width: shl/shr.u give 0, shr.s gives the sign fill
  cap = np.uint32(bits - 1)
  if ins.op == "shl":
    def f(st, m):
      a, b = ra(st), rb(st)
      return d(st, np.where(b > cap, dt.type(0), a << np.minimum(b, cap).astype(dt)), m)
  elif dt.kind == "i":
    def f(st, m):
      a, b = ra(st), rb(st)
      return d(st, a >> np.minimum(b, cap).astype(dt), m)
  else:
    def f(st, m):
      a, b = ra(st), rb(st)
      return d(st, np.where(b > cap, dt.type(0), a >> np.minimum(b, cap).astype(dt)), m)
  return f

_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
        "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal}

def _compare(cmp: str, t: str, fz: bool):
  """A function (a, b) -> bool for setp/set with PTX's ordered/unordered float rules."""
  if not is_float(t):
    f = _CMP[cmp]
    if cmp in ("lo", "ls", "hi", "hs") and is_signed(t): raise PTXError(f"compare .{cmp} needs an unsigned type")
    return f
  fi = _fin(t)
  def prep(a, b):
    a, b = fi(a), fi(b)
    return (ftz(a), ftz(b)) if fz else (a, b)
  if cmp in ("num", "nan"):
    def g(a, b):
      a, b = prep(a, b); n = np.isnan(a) | np.isnan(b)
      return n if cmp == "nan" else ~n
    return g
  unordered = cmp.endswith("u") and cmp[:-1] in _CMP
  base = _CMP[cmp[:-1] if unordered else cmp]
  def g(a, b):
    a, b = prep(a, b)
    r = base(a, b)
    n = np.isnan(a) | np.isnan(b)
    return (r | n) if unordered else (r & ~n)
  return g

def d_setp(ins, ctx):
  cmp = ins.mods[0]
  boolop = next((m for m in ins.mods if m in ("and", "or", "xor")), None)
  t = _types(ins)[-1]
  fz = "ftz" in ins.mods
  c = _compare(cmp, t, fz)
  dst = ins.args[0]
  dp, dq = (dst.items[0], dst.items[1]) if dst.kind == "pair" else (dst, None)
  wp = writer(ctx, dp, "pred", ins.line)
  wq = writer(ctx, dq, "pred", ins.line) if dq is not None else None
  ra, rb = reader(ctx, ins.args[1], t, ins.line), reader(ctx, ins.args[2], t, ins.line)
  rc = reader(ctx, ins.args[3], "pred", ins.line) if boolop else None
  bop = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(boolop)
  def f(st, m):
    r = c(ra(st), rb(st))
    p, q = r, np.logical_not(r)
    if bop is not None:
      cv = rc(st); p, q = bop(p, cv), bop(q, cv)
    wp(st, p, m)
    if wq is not None: wq(st, q, m)
  return f

def d_set(ins, ctx):
  # set.cmp.dtype.stype d, a, b: d = all ones (int) or 1.0f when true
  cmp = ins.mods[0]; ts = _types(ins); dt_, st_ = ts[0], ts[-1]
  c = _compare(cmp, st_, "ftz" in ins.mods)
  boolop = next((m for m in ins.mods if m in ("and", "or", "xor")), None)
  d = writer(ctx, ins.args[0], dt_, ins.line)
  ra, rb = reader(ctx, ins.args[1], st_, ins.line), reader(ctx, ins.args[2], st_, ins.line)
  rc = reader(ctx, ins.args[3], "pred", ins.line) if boolop else None
  bop = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(boolop)
  ddt = NP[dt_]
  one = ddt.type(1.0) if is_float(dt_) else np.array(-1).astype(ddt)[()]
  def f(st, m):
    r = c(ra(st), rb(st))
    if bop is not None: r = bop(r, rc(st))
    d(st, np.where(r, one, ddt.type(0)).astype(ddt), m)
  return f

def d_selp(ins, ctx):
  t = _types(ins)[-1]
  d = writer(ctx, ins.args[0], t, ins.line)
  ra, rb = reader(ctx, ins.args[1], t, ins.line), reader(ctx, ins.args[2], t, ins.line)
  rc = reader(ctx, ins.args[3], "pred", ins.line)
  dt = NP[t]
  return lambda st, m: d(st, np.where(rc(st), ra(st), rb(st)).astype(dt), m)

def d_slct(ins, ctx):
  ts = _types(ins); t, ct = ts[0], ts[-1]
  d = writer(ctx, ins.args[0], t, ins.line)
  ra, rb, rc = reader(ctx, ins.args[1], t, ins.line), reader(ctx, ins.args[2], t, ins.line), reader(ctx, ins.args[3], ct, ins.line)
  fz = "ftz" in ins.mods; dt = NP[t]
  def f(st, m):
    c = rc(st)
    if fz: c = ftz(c)
    d(st, np.where(c >= 0, ra(st), rb(st)).astype(dt), m)
  return f

def d_mov(ins, ctx):
  t = _types(ins)[-1]
  dst, src = ins.args[0], ins.args[1]
  if dst.kind == "vec":   # unpack: mov.b32 {lo, hi}, %r (element 0 = low bits)
    n = len(dst.items); et = {2: {4: "b16", 8: "b32"}, 4: {4: "b8", 8: "b16"}}[n][TYPE_SIZE[t]]
    ws = [writer(ctx, x, et, ins.line) for x in dst.items]
    r = reader(ctx, src, t, ins.line); u = UINT[TYPE_SIZE[et]]; sh = 8 * TYPE_SIZE[et]
    dt = NP[t]
    def f(st, m):
      v = r(st)
      for k, w in enumerate(ws): w(st, (v >> dt.type(sh * k)).astype(u), m)
    return f
  if src.kind == "vec":   # pack
    n = len(src.items); et = {2: {4: "b16", 8: "b32"}, 4: {4: "b8", 8: "b16"}}[n][TYPE_SIZE[t]]
    rs = [reader(ctx, x, et, ins.line) for x in src.items]
    d = writer(ctx, dst, t, ins.line); dt = NP[t]; sh = 8 * TYPE_SIZE[et]
    def f(st, m):
      acc = dt.type(0)
      for k, r in enumerate(rs): acc = acc | (r(st).astype(dt) << dt.type(sh * k))
      d(st, acc, m)
    return f
  d, r = writer(ctx, dst, t, ins.line), reader(ctx, src, t, ins.line)
  return lambda st, m: d(st, r(st), m)

def d_cvt(ins, ctx):
  ts = _types(ins)
  if len(ts) != 2: raise PTXError(f"line {ins.line}: cvt needs two types: {ins.text}")
  dst_t, src_t = ts
  rnd = next((x for x in ins.mods if x in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi")), "")
  fz, sat = "ftz" in ins.mods, "sat" in ins.mods
  d, r = writer(ctx, ins.args[0], dst_t, ins.line), reader(ctx, ins.args[1], src_t, ins.line)
  if dst_t in F8 or src_t in F8: return _cvt_f8(ins, ctx, dst_t, src_t, d, r)
  if dst_t in ("f16x2", "bf16x2"):  # cvt.rn.f16x2.f32 d, a, b: a -> upper half, b -> lower half
    rb = reader(ctx, ins.args[2], src_t, ins.line); et = "f16" if dst_t == "f16x2" else "bf16"
    def f2(st, m):
      hi = cvt(r(st), et, src_t, rnd, fz, sat).view(np.uint16).astype(np.uint32)
      lo = cvt(rb(st), et, src_t, rnd, fz, sat).view(np.uint16).astype(np.uint32)
      d(st, (hi << np.uint32(16)) | lo, m)
    return f2
  return lambda st, m: d(st, cvt(r(st), dst_t, src_t, rnd, fz, sat)[()], m)

def _cvt_f8(ins, ctx, dst_t: str, src_t: str, d, r):
  """cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 d, a, b (a -> d[15:8], b -> d[7:0]) and cvt.rn.f16x2.{e4m3x2,e5m2x2} d, a
  (a[15:8] -> d[31:16], a[7:0] -> d[15:0]); sm_89+, with PTX ISA 8.1+ on sm_89 and 7.8+ on sm_90+ (ptxas 13.0: "Feature
  'cvt with .e4m3x2/.e5m2x2 on sm_89' requires PTX ISA .version 8.1 or later", "... requires PTX ISA .version 7.8 or
  later"). numerics.py F8 says what each rounds to."""
  f8 = dst_t if dst_t in F8 else src_t
  if ctx.arch_num < 89: raise PTXError(f"line {ins.line}: {ins.text}: .{f8} needs sm_89 or later, not {ctx.arch}")
  need = (8, 1) if ctx.arch_num < 90 else (7, 8)
  if ctx.version_num < need:
    raise PTXError(f"line {ins.line}: {ins.text}: .{f8} on {ctx.arch} needs PTX ISA .version {need[0]}.{need[1]} or later, "
                   f"the module says .version {ctx.version or '(none)'}")
  if dst_t in F8 and src_t == "f32":
    if "rn" not in ins.mods or "satfinite" not in ins.mods: raise PTXError(f"line {ins.line}: {ins.text}: .rn and .satfinite are required")
    rb = reader(ctx, ins.args[2], src_t, ins.line)
    def f(st, m): d(st, (f32_to_f8_satfinite(r(st), dst_t) << np.uint16(8)) | f32_to_f8_satfinite(rb(st), dst_t), m)
    return f
  if src_t in F8 and dst_t == "f16x2":
    if "rn" not in ins.mods: raise PTXError(f"line {ins.line}: {ins.text}: .rn is required")
    def g(st, m):
      a = np.asarray(r(st)).astype(np.uint32)
      d(st, (f8_to_f16(a >> np.uint32(8), src_t).astype(np.uint32) << np.uint32(16)) | f8_to_f16(a, src_t).astype(np.uint32), m)
    return g
  raise PTXError(f"line {ins.line}: cvt .{dst_t}.{src_t} is not a form PTX has")

def d_cvta(ins, ctx):
  t = _types(ins)[-1]
  space = next((x for x in ins.mods if x in ("global", "shared", "local", "const", "param")), None)
  d, r = writer(ctx, ins.args[0], t, ins.line), reader(ctx, ins.args[1], t, ins.line)
  attr = {"shared": "shared_window", "local": "local_window"}.get(space or "")
  if attr is None: return lambda st, m: d(st, r(st), m)   # global/const/param: generic == state space address
  dt = NP[t]
  def w(st): return np.array(getattr(st, attr) % (1 << (8 * dt.itemsize)), dtype=np.uint64).astype(dt)[()]   # the launch's window
  if "to" in ins.mods: return lambda st, m: d(st, r(st) - w(st), m)
  return lambda st, m: d(st, r(st) + w(st), m)

def _address(ctx, op: Operand, space: str, line: int):
  """st -> address value (uint64 scalar/array) and the resolved state space name."""
  if op.kind != "addr": raise PTXError(f"line {line}: expected an address operand, got {op.kind}")
  off = np.uint64(op.offset % (1 << 64))
  if op.text == "sym":
    if op.name not in ctx.symbols: raise PTXError(f"line {line}: unknown symbol {op.name}")
    sp, addr = ctx.symbols[op.name]
    if space == "generic": space = sp if sp != "param" else "param"
    if space == "generic" and sp in ("shared", "local"): space = sp
    c = np.uint64((addr + op.offset) % (1 << 64))
    return (lambda st: c), space
  if not op.name: return (lambda st: off), space
  rt = ctx.regs.get(op.name)
  if rt is None: raise PTXError(f"line {line}: address register {op.name} not declared")
  r = reader(ctx, Operand("reg", name=op.name), "u64" if storage(rt).itemsize == 8 else "u32", line)
  if storage(rt).itemsize == 8: return ((lambda st: r(st) + off) if op.offset else r), space
  return (lambda st: r(st).astype(np.uint64) + off), space

_SPACES = ("global", "shared", "local", "const", "param")

def d_ld(ins, ctx):
  t = _types(ins)[-1]
  space = next((x for x in ins.mods if x in _SPACES), "generic")
  vec = next((int(x[1:]) for x in ins.mods if x in ("v2", "v4", "v8")), 1)
  dt = NP[t] if t not in ("bf16",) else NP["b16"]
  addr, space = _address(ctx, ins.args[1], space, ins.line)
  dst = ins.args[0]
  ws = [writer(ctx, x, t, ins.line) for x in (dst.items if dst.kind == "vec" else [dst])]
  nbytes = dt.itemsize * vec
  if t == "pred": raise PTXError(f"line {ins.line}: ld.pred is not valid PTX")
  def f(st, m):
    vals = st.load(st.resolve(space, addr(st), m, nbytes), dt, vec)
    for w, v in zip(ws, vals): w(st, v, m)
  return f

def d_st(ins, ctx):
  t = _types(ins)[-1]
  space = next((x for x in ins.mods if x in _SPACES), "generic")
  vec = next((int(x[1:]) for x in ins.mods if x in ("v2", "v4", "v8")), 1)
  dt = NP[t]
  addr, space = _address(ctx, ins.args[0], space, ins.line)
  src = ins.args[1]
  rs = [reader(ctx, x, t, ins.line) for x in (src.items if src.kind == "vec" else [src])]
  nbytes = dt.itemsize * vec
  def f(st, m):
    st.store(st.resolve(space, addr(st), m, nbytes), dt, vec, [r(st) for r in rs])
  return f

def d_atom(ins, ctx):
  """atom/red: read-modify-write with sequential semantics between threads hitting the same address."""
  t = _types(ins)[-1]; dt = NP[t]
  space = next((x for x in ins.mods if x in _SPACES), "generic")
  opname = next((x for x in ins.mods if x in ("add", "min", "max", "exch", "cas", "and", "or", "xor", "inc", "dec")), None)
  if opname is None: raise PTXError(f"line {ins.line}: unsupported atomic {ins.text.split()[0]}")
  red = ins.op == "red"
  a_i = 0 if red else 1
  addr, space = _address(ctx, ins.args[a_i], space, ins.line)
  rb = reader(ctx, ins.args[a_i + 1], t, ins.line)
  rc = reader(ctx, ins.args[a_i + 2], t, ins.line) if opname == "cas" else None
  d = None if red else writer(ctx, ins.args[0], t, ins.line)
  et = _elem(t) if is_float(t) else dt
  fi, fo = _fin(t), _fout(t)
  def combine(old, b, c=None):
    if opname == "add": return fo(fi(old) + fi(b)) if is_float(t) else old + b
    if opname == "min": return fo(np.fmin(fi(old), fi(b))) if is_float(t) else np.minimum(old, b)
    if opname == "max": return fo(np.fmax(fi(old), fi(b))) if is_float(t) else np.maximum(old, b)
    if opname == "exch": return b
    if opname == "cas": return np.where(old == b, c, old)
    if opname == "and": return old & b
    if opname == "or": return old | b
    if opname == "xor": return old ^ b
    if opname == "inc": return np.where(old >= b, dt.type(0), old + dt.type(1))
    if opname == "dec": return np.where((old == 0) | (old > b), b, old - dt.type(1))
  def f(st, m):
    parts = st.resolve(space, addr(st), m, dt.itemsize)
    bv, cv = rb(st), (rc(st) if rc is not None else None)
    result = np.zeros(st.n, dt) if m is not None or np.ndim(bv) or len(parts) > 1 else None
    olds_all = []
    for sp, pos, sel in parts:
      cnt = int(np.count_nonzero(sel)) if sel is not None else st.n
      pos = np.broadcast_to(np.asarray(pos, np.uint64), (cnt,))
      b = np.broadcast_to(bv if np.ndim(bv) == 0 or sel is None else bv[sel], (cnt,))
      c = np.broadcast_to(cv if cv is None or np.ndim(cv) == 0 or sel is None else cv[sel], (cnt,)) if cv is not None else None
      uniq, inv = np.unique(pos, return_inverse=True)
      cur = sp.gather(uniq, dt)
      if uniq.size == cnt:   # no two threads on one address: one vectorised step
        olds = cur[inv]
        sp.scatter(uniq, dt, np.asarray(combine(cur, _reorder(b, inv, uniq.size), None if c is None else _reorder(c, inv, uniq.size)), dt))
      elif opname == "add":   # segmented exclusive prefix sum in thread order
        order = np.argsort(inv, kind="stable")
        sb = (fi(b[order]).astype(et) if is_float(t) else b[order])
        cs = np.cumsum(sb, dtype=et)
        seg = inv[order]
        starts = np.r_[0, np.flatnonzero(np.diff(seg)) + 1]
        first = np.repeat(cs[starts] - sb[starts], np.diff(np.r_[starts, cnt]))
        excl = cs - sb - first
        base = fi(cur).astype(et) if is_float(t) else cur
        olds_sorted = (base[seg] + excl)
        totals = cs[np.r_[starts[1:] - 1, cnt - 1]] - first[starts]
        sp.scatter(uniq, dt, fo((base + totals).astype(et)) if is_float(t) else base + totals)
        olds = np.empty(cnt, dt); olds[order] = fo(olds_sorted.astype(et)) if is_float(t) else olds_sorted
      else:   # general case: threads in order, one at a time
        vals = dict(zip(range(uniq.size), cur)); olds = np.empty(cnt, dt)
        for i in range(cnt):
          k = int(inv[i]); olds[i] = vals[k]
          vals[k] = np.asarray(combine(np.asarray([vals[k]], dt), np.asarray([b[i]], dt), None if c is None else np.asarray([c[i]], dt)), dt)[0]
        sp.scatter(uniq, dt, np.array([vals[k] for k in range(uniq.size)], dt))
      olds_all.append((sel, olds))
    if d is None: return
    if result is None: d(st, olds_all[0][1], m); return
    for sel, olds in olds_all: result[sel if sel is not None else slice(None)] = olds
    d(st, result, m)
  return f

def _reorder(v, inv, n):
  """Values per unique address when every address is distinct (inv is a permutation)."""
  out = np.empty(n, v.dtype); out[inv] = v; return out

def d_testp(ins, ctx):
  t = _types(ins)[-1]; kind = next(x for x in ins.mods if x in ("finite", "infinite", "number", "notanumber", "normal", "subnormal"))
  d, r = writer(ctx, ins.args[0], "pred", ins.line), reader(ctx, ins.args[1], t, ins.line)
  tiny = np.finfo(NP[t]).tiny
  fn = {"finite": np.isfinite, "infinite": np.isinf, "number": lambda x: ~np.isnan(x), "notanumber": np.isnan,
        "normal": lambda x: np.isfinite(x) & (np.abs(x) >= tiny), "subnormal": lambda x: (np.abs(x) < tiny) & (x != 0)}[kind]
  return lambda st, m: d(st, fn(r(st)), m)

def d_copysign(ins, ctx):
  t = _types(ins)[-1]   # copysign d, a, b: |b| with a's sign
  return _float_op(ins, ctx, t, lambda a, b: np.copysign(b, a), 2)

def d_bits(ins, ctx):
  """popc, clz, brev, bfind (results u32 except brev)."""
  t = _types(ins)[-1]; dt = NP[t]; bits = 8 * dt.itemsize; op = ins.op
  u = UINT[dt.itemsize]
  def popc(a):
    a = np.asarray(a).view(u).astype(np.uint64); c = np.zeros(a.shape, np.uint32)
    for k in range(bits): c += ((a >> np.uint64(k)) & np.uint64(1)).astype(np.uint32)
    return c
  def clz(a):
    a = np.asarray(a).view(u).astype(np.uint64); c = np.full(a.shape, bits, np.uint32)
    for k in range(bits): c = np.where((a >> np.uint64(k)) & np.uint64(1), np.uint32(bits - 1 - k), c)
    return c
  def brev(a):
    a = np.asarray(a).view(u).astype(np.uint64); r = np.zeros(a.shape, np.uint64)
    for k in range(bits): r |= ((a >> np.uint64(k)) & np.uint64(1)) << np.uint64(bits - 1 - k)
    return r.astype(u).view(dt)
  if op == "popc": return _int_op(ins, ctx, t, popc, 1, tout="u32")
  if op == "clz": return _int_op(ins, ctx, t, clz, 1, tout="u32")
  if op == "brev": return _int_op(ins, ctx, t, brev, 1)
  raise PTXError(f"line {ins.line}: unsupported {op}")

def d_bfe(ins, ctx):
  t = _types(ins)[-1]; dt = NP[t]; bits = 8 * dt.itemsize; u = UINT[dt.itemsize]
  d = writer(ctx, ins.args[0], t, ins.line)
  ra, rb, rc = reader(ctx, ins.args[1], t, ins.line), reader(ctx, ins.args[2], "u32", ins.line), reader(ctx, ins.args[3], "u32", ins.line)
  def f(st, m):
    a = np.asarray(ra(st)).view(u).astype(np.uint64)
    pos, ln = np.minimum(np.asarray(rb(st)) & np.uint32(0xFF), bits).astype(np.uint64), np.minimum(np.asarray(rc(st)) & np.uint32(0xFF), bits).astype(np.uint64)
    field = np.where(pos >= np.uint64(bits), np.uint64(0), a >> np.minimum(pos, np.uint64(bits - 1)))
    maskv = np.where(ln >= np.uint64(64), ~np.uint64(0), (np.uint64(1) << ln) - np.uint64(1))
    r = field & maskv
    if dt.kind == "i":   # sign bit: bit (pos+len-1) of a, or a's sign if beyond
      sb = np.minimum(pos + ln - np.uint64(1), np.uint64(bits - 1))
      sign = np.where(ln == 0, np.uint64(0), (a >> sb) & np.uint64(1))
      r = np.where(sign.astype(bool), r | ~maskv, r)
    d(st, r.astype(np.uint64).astype(u).view(dt), m)
  return f

def d_bfi(ins, ctx):
  t = _types(ins)[-1]; dt = NP[t]; bits = 8 * dt.itemsize
  d = writer(ctx, ins.args[0], t, ins.line)
  ra, rb = reader(ctx, ins.args[1], t, ins.line), reader(ctx, ins.args[2], t, ins.line)
  rc, rd = reader(ctx, ins.args[3], "u32", ins.line), reader(ctx, ins.args[4], "u32", ins.line)
  def f(st, m):
    a, b = np.asarray(ra(st)).astype(np.uint64), np.asarray(rb(st)).astype(np.uint64)
    pos, ln = (np.asarray(rc(st)) & np.uint32(0xFF)).astype(np.uint64), (np.asarray(rd(st)) & np.uint32(0xFF)).astype(np.uint64)
    ln = np.minimum(ln, np.uint64(bits))
    fm = np.where(ln >= np.uint64(64), ~np.uint64(0), (np.uint64(1) << ln) - np.uint64(1))
    sh = np.minimum(pos, np.uint64(63))
    fmask = np.where(pos >= np.uint64(bits), np.uint64(0), fm << sh)
    r = (b & ~fmask) | ((a << sh) & fmask)
    d(st, r.astype(dt), m)
  return f

def d_prmt(ins, ctx):
  if any(x in ins.mods for x in ("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")): raise PTXError(f"line {ins.line}: prmt mode {ins.mods} not supported")
  d = writer(ctx, ins.args[0], "b32", ins.line)
  ra, rb, rc = (reader(ctx, ins.args[i], "b32", ins.line) for i in (1, 2, 3))
  def f(st, m):
    a, b, c = (np.asarray(r(st)).astype(np.uint64) for r in (ra, rb, rc))
    src = a | (b << np.uint64(32))
    out = np.zeros(np.broadcast(a, b, c).shape, np.uint64)
    for k in range(4):
      sel = (c >> np.uint64(4 * k)) & np.uint64(0xF)
      byte = (src >> ((sel & np.uint64(7)) * np.uint64(8))) & np.uint64(0xFF)
      byte = np.where(sel & np.uint64(8), np.where(byte & np.uint64(0x80), np.uint64(0xFF), np.uint64(0)), byte)
      out |= byte << np.uint64(8 * k)
    d(st, out.astype(np.uint32), m)
  return f

def _warp_layout(st):
  """Per thread: index of lane 0 of its warp in the chunk, lane id, and lane count of its warp."""
  lay = st._spec.get("__warps")
  if lay is None:
    t = np.arange(st.n, dtype=np.int64); tl = t % st.tpb
    w0 = t - tl % 32
    size = np.minimum(32, st.tpb - (tl // 32) * 32)
    lay = st._spec["__warps"] = (w0, (tl % 32).astype(np.int64), size)
  return lay

def d_shfl(ins, ctx):
  mode = next(x for x in ins.mods if x in ("up", "down", "bfly", "idx"))
  dst = ins.args[0]
  dd, dp = (dst.items[0], dst.items[1]) if dst.kind == "pair" else (dst, None)
  wd = writer(ctx, dd, "b32", ins.line); wp = writer(ctx, dp, "pred", ins.line) if dp is not None else None
  ra, rb, rc = (reader(ctx, ins.args[i], "b32", ins.line) for i in (1, 2, 3))
  def f(st, m):
    w0, lane, size = _warp_layout(st)
    a = np.broadcast_to(ra(st), (st.n,))
    b = np.asarray(rb(st)).astype(np.int64) & 31; c = np.asarray(rc(st)).astype(np.int64)
    cval, segmask = c & 31, (c >> 8) & 31
    max_lane = (lane & segmask) | (cval & ~segmask); min_lane = lane & segmask
    if mode == "up": j = lane - b; ok = j >= max_lane
    elif mode == "down": j = lane + b; ok = j <= max_lane
    elif mode == "bfly": j = lane ^ b; ok = j <= max_lane
    else: j = min_lane | (b & ~segmask); ok = j <= max_lane
    ok = ok & (j < size) & (j >= 0)
    j = np.where(ok, j, lane)
    wd(st, a[w0 + j], m)
    if wp is not None: wp(st, ok, m)
  return f

def d_vote(ins, ctx):
  mode = next(x for x in ins.mods if x in ("all", "any", "uni", "ballot"))
  t = "b32" if mode == "ballot" else "pred"
  d = writer(ctx, ins.args[0], t, ins.line)
  rp = reader(ctx, ins.args[1], "pred", ins.line)
  def f(st, m):
    w0, lane, _size = _warp_layout(st)
    p = np.broadcast_to(rp(st), (st.n,)).copy()
    act = np.ones(st.n, bool) if m is None else m
    p &= act
    bits = np.zeros(st.n, np.uint64)
    np.add.at(bits, w0, (p.astype(np.uint64) << lane.astype(np.uint64)))
    actbits = np.zeros(st.n, np.uint64)
    np.add.at(actbits, w0, (act.astype(np.uint64) << lane.astype(np.uint64)))
    wb, wa = bits[w0], actbits[w0]
    if mode == "ballot": d(st, wb.astype(np.uint32), m)
    elif mode == "all": d(st, wb == wa, m)
    elif mode == "any": d(st, wb != 0, m)
    else: d(st, (wb == 0) | (wb == wa), m)
  return f

def _mma_warps(st, m, ins) -> np.ndarray:
  """Chunk index of lane 0 of every warp executing a warp-wide mma; PTXError when a warp takes part with fewer
  than 32 lanes (a partial last warp of the block, or lanes that diverged or exited before it)."""
  w0, _, size = _warp_layout(st)
  act = np.ones(st.n, bool) if m is None else np.asarray(m, bool)
  starts = np.unique(w0[act])
  name = ".".join((ins.op,) + ins.mods)
  if (size[starts] != 32).any():
    raise PTXError(f"line {ins.line}: {name} in kernel of {st.tpb} threads per block: a warp of {int(size[starts].min())} threads executes it, it needs all 32 lanes")
  lanes = act[starts[:, None] + np.arange(32)].sum(axis=1)
  if (lanes != 32).any():
    j = int(np.argmax(lanes != 32))
    raise PTXError(f"line {ins.line}: {name} executed by {int(lanes[j])} of the 32 lanes of warp {int(starts[j]) % st.tpb // 32} "
                   f"(block {st.block0 + int(starts[j]) // st.tpb}): every lane must execute it together (diverged or exited lanes)")
  return starts

def d_mma(ins, ctx):
  """mma.sync.aligned: gather each warp's fragments, multiply in float32 (hcqrt/mock/ptx/mma.py), scatter D back."""
  spec = check_mma(ins)
  # every fragment register is read and written as raw 32-bit words: mma.py unpacks halves and floats itself
  wd = [writer(ctx, x, "b32", ins.line) for x in ins.args[0].items]
  ra, rb, rc = ([reader(ctx, x, "b32", ins.line) for x in op.items] for op in ins.args[1:])
  def f(st, m):
    starts = _mma_warps(st, m, ins)
    if starts.size == 0: return
    idx = starts[:, None] + np.arange(32)
    def gather(rs): return np.stack([np.broadcast_to(r(st), (st.n,))[idx] for r in rs], axis=-1)
    d = warp_mma(spec, gather(ra), gather(rb), gather(rc))   # read every source before any D register is written
    for j, w in enumerate(wd):
      out = np.zeros(st.n, np.uint32); out[idx] = d[..., j]
      w(st, out, m)
  return f

def d_nop(ins, ctx): return lambda st, m: None

def d_trap(ins, ctx):
  def f(st, m): raise PTXError(f"line {ins.line}: kernel {ctx.kernel} executed trap")
  return f

DECODERS = {
  "add": d_arith, "sub": d_arith, "mul": d_arith, "mad": d_arith, "fma": d_arith, "div": d_arith, "rem": d_rem,
  "abs": d_unary_f, "neg": d_unary_f, "sqrt": d_unary_f, "rsqrt": d_unary_f, "rcp": d_unary_f, "ex2": d_unary_f,
  "lg2": d_unary_f, "sin": d_unary_f, "cos": d_unary_f, "tanh": d_unary_f, "min": d_minmax, "max": d_minmax,
  "and": d_bitop, "or": d_bitop, "xor": d_bitop, "not": d_bitop, "cnot": d_bitop, "shl": d_shift, "shr": d_shift,
  "setp": d_setp, "set": d_set, "selp": d_selp, "slct": d_slct, "mov": d_mov, "cvt": d_cvt, "cvta": d_cvta,
  "ld": d_ld, "ldu": d_ld, "st": d_st, "atom": d_atom, "red": d_atom, "testp": d_testp, "copysign": d_copysign,
  "popc": d_bits, "clz": d_bits, "brev": d_bits, "bfe": d_bfe, "bfi": d_bfi, "prmt": d_prmt, "shfl": d_shfl,
  "vote": d_vote, "membar": d_nop, "fence": d_nop, "nanosleep": d_nop, "prefetch": d_nop, "prefetchu": d_nop,
  "trap": d_trap, "pmevent": d_nop, "mma": d_mma,
}

def _pred_reader(ctx, ins):
  key, neg = ins.pred
  if ctx.regs.get(key) != "pred": raise PTXError(f"line {ins.line}: guard {key} is not a predicate register")
  if neg: return lambda st: np.logical_not(st.R[key])
  return lambda st: st.R[key]

def decode(ins: Instr, ctx: DecodeCtx):
  """Instruction -> fn(st, mask). Control flow (bra/ret/exit) returns None (fall through), a target pc
  (every thread of the group jumps; EXIT = the group ends), or (target, taken mask, fallthrough mask)."""
  op = ins.op
  if op in ("bra", "brx", "ret", "exit", "call"):
    if op == "call" or op == "brx": raise PTXError(f"line {ins.line}: unsupported instruction {op} in kernel {ctx.kernel}: {ins.text}")
    if op == "bra":
      lab = ins.args[0].name
      if lab not in ctx.labels: raise PTXError(f"line {ins.line}: unknown branch target {lab}")
      target = ctx.labels[lab]
    else: target = EXIT
    if ins.pred is None: return lambda st, m: target
    p = _pred_reader(ctx, ins)
    def br(st, m):
      v = p(st)
      if np.ndim(v) == 0: return target if v else None
      t = v if m is None else (v & m)
      if not t.any(): return None
      nt = np.logical_not(v) if m is None else (m & ~v)
      if not nt.any(): return target
      return (target, t, nt)
    return br
  if op in ("bar", "barrier"):
    # whole chunks run in lockstep, so reaching the instruction is the synchronisation
    if any(x in ins.mods for x in ("red",)): raise PTXError(f"line {ins.line}: unsupported instruction {ins.text.split()[0]}")
    return lambda st, m: None
  dec = DECODERS.get(op)
  if dec is None: raise PTXError(f"line {ins.line}: unsupported instruction {'.'.join((op,) + ins.mods)} in kernel {ctx.kernel}: {ins.text}")
  try: fn = dec(ins, ctx)
  except PTXError: raise
  except (KeyError, IndexError, ValueError, StopIteration) as e:
    raise PTXError(f"line {ins.line}: cannot decode {ins.text!r} in kernel {ctx.kernel}: {type(e).__name__}: {e}") from None
  if ins.pred is None: return fn
  p = _pred_reader(ctx, ins)
  def guarded(st, m):
    v = p(st)
    if np.ndim(v) == 0: return fn(st, m) if v else None
    g = v if m is None else (v & m)
    if m is None and g.all(): return fn(st, None)
    if not g.any(): return None
    return fn(st, g)
  return guarded
