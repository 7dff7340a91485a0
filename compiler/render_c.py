"""The C renderer: a linearized kernel becomes one C function.

ABI: `void name(T0 *restrict data0, const T1 *restrict data1, ..., int core)`: buffers (outputs first), then
the index of the CPU core running this call. When the kernel is threaded its outermost loop is cut into
`threads` contiguous chunks and `core` picks one. Vector values use GCC/clang vector extensions.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.lower import lower
>>> from compiler.dtypes import dtypes
>>> from compiler.uop import Ops
>>> x = LazyBuffer.empty((4,), dtypes.float32, "CPU"); x.buffer = object()
>>> print(render_c(lower(create_schedule([x.alu(Ops.ADD, x)])[0].ast, "E_4")).splitlines()[-6])
void E_4(float *restrict data0, const float *restrict data1, int core) {
"""
from __future__ import annotations
import math, struct
from compiler.dtypes import DType, dtypes
from compiler.uop import UOp, Ops
from compiler.lower import LoweredKernel
from compiler.linearize import linearize

C_TYPES = {dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
           dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
           dtypes.uint64: "unsigned long long", dtypes.float16: "_Float16", dtypes.float32: "float", dtypes.float64: "double"}

def ctype(dt: DType) -> str:
  if dt.count > 1: return f"{C_TYPES[dt.scalar].replace(' ', '_')}{dt.count}"
  return C_TYPES[dt]

def render_const(v, dt: DType) -> str:
  dt = dt.scalar
  if dt.is_float:
    suffix = "f" if dt is not dtypes.float64 else ""
    if math.isnan(v): return f"__builtin_nan{suffix}(\"\")" if dt is not dtypes.float16 else "(_Float16)__builtin_nanf(\"\")"
    if math.isinf(v):
      s = f"__builtin_inf{suffix}()" if dt is not dtypes.float16 else "(_Float16)__builtin_inff()"
      return s if v > 0 else "-" + s
    r = float.hex(float(v)) if dt is dtypes.float64 else float.hex(struct.unpack("f", struct.pack("f", float(v)))[0])
    lit = f"{r}{suffix}" if r not in ("0x0.0p+0", "-0x0.0p+0") else ("0.0" if r[0] != "-" else "-0.0") + suffix
    return lit if dt is not dtypes.float16 else f"(_Float16){lit}"
  if dt.is_bool: return "1" if v else "0"
  if dt is dtypes.int64: return f"{v}ll" if v != dtypes.min(dt) else "(-9223372036854775807ll-1)"
  if dt is dtypes.uint64: return f"{v}ull"
  if dt is dtypes.uint32: return f"{v}u"
  if dt is dtypes.int32 and v == dtypes.min(dt): return "(-2147483647-1)"
  return f"({ctype(dt)}){v}" if dt.itemsize < 4 else str(v)

_MATH = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc"}

def _math_fn(op: Ops, dt: DType) -> str:
  f = _MATH[op]
  if dt.scalar is dtypes.float64: return f
  return f"__builtin_{f}f" if op in (Ops.SQRT, Ops.TRUNC) else f"{f}f"

def _alu(op: Ops, dt: DType, a: list[str], srcdt: DType) -> str:
  if op is Ops.NEG: return f"(!{a[0]})" if dt.is_bool else f"(-{a[0]})"
  if op is Ops.RECIP: return f"(({ctype(dt)})1/{a[0]})"
  if op in _MATH:
    if dt.scalar is dtypes.float16: return f"(_Float16){_math_fn(op, dtypes.float32)}((float){a[0]})"
    return f"{_math_fn(op, dt)}({a[0]})"
  if op is Ops.MAX and dt.count > 1:  # C has no ?: on vectors: select bits through the comparison mask
    it = ctype(dtypes.int32.vec(dt.count))
    return f"(({ctype(dt)})((({it}){a[0]}&({it})({a[0]}>{a[1]}))|(({it}){a[1]}&~({it})({a[0]}>{a[1]}))))"
  if op is Ops.MAX: return f"(({a[0]}>{a[1]})?{a[0]}:{a[1]})"
  if op is Ops.WHERE: return f"({a[0]}?{a[1]}:{a[2]})"
  if op is Ops.MULACC: return f"(({a[0]}*{a[1]})+{a[2]})"
  sym = {Ops.ADD: "+", Ops.MUL: "*", Ops.FDIV: "/", Ops.IDIV: "/", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=",
         Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}[op]
  if op is Ops.AND and dt.is_bool: sym = "&&"
  if op is Ops.OR and dt.is_bool: sym = "||"
  return f"({a[0]}{sym}{a[1]})"

def render_c(k: LoweredKernel, threads: int = 1, program: list[UOp] | None = None) -> str:
  """C source for kernel `k`; `threads` > 1 splits k.threaded (the outermost loop) across that many cores."""
  prog = linearize(k) if program is None else program
  names: dict[UOp, str] = {}
  lines: list[str] = []
  vec_types: set[DType] = set()
  depth = 1
  cnt = 0
  def r(u: UOp) -> str: return names[u]
  nbufs = len(k.buf_dtypes)
  for u in prog:
    if u.dtype is not None and u.dtype.count > 1:
      vec_types.add(u.dtype)
      if u.op is Ops.MAX or (u.op is Ops.ASSIGN and u.src[1].op is Ops.MAX): vec_types.add(dtypes.int32.vec(u.dtype.count))
    op, pad = u.op, "  " * depth
    if op is Ops.CONST: names[u] = render_const(u.arg, u.dtype); continue
    if op is Ops.DEFINE_GLOBAL: names[u] = f"data{u.arg}"; continue
    if op is Ops.RANGE:
      n, rid = u.src[0].arg, f"r{u.arg[0]}"
      names[u] = rid
      if u is k.threaded and threads > 1:
        lines.append(f"{pad}int {rid}_lo = (int)(((long long){n}*core)/{threads}), {rid}_hi = (int)(((long long){n}*(core+1))/{threads});")
        lines.append(f"{pad}for (int {rid} = {rid}_lo; {rid} < {rid}_hi; {rid}++) {{")
      else: lines.append(f"{pad}for (int {rid} = 0; {rid} < {n}; {rid}++) {{")
      depth += 1; continue
    if op is Ops.ENDRANGE:
      depth -= 1; lines.append("  " * depth + "}"); continue
    cnt += 1
    name = f"v{cnt}"
    if op is Ops.LOAD:
      buf, idx = u.src[0], u.src[1]
      if u.dtype.count > 1: expr = f"*(({ctype(u.dtype)}*)({r(buf)}+{r(idx)}))"
      else: expr = f"{r(buf)}[{r(idx)}]"
      if len(u.src) == 3: expr = f"({r(u.src[2])}?{expr}:{render_const(0, u.dtype)})" if u.dtype.count == 1 else f"({r(u.src[2])}?{expr}:({ctype(u.dtype)}){{0}})"
      lines.append(f"{pad}{ctype(u.dtype)} {name} = {expr};")
    elif op is Ops.STORE:
      buf, idx, val = u.src[0], u.src[1], u.src[2]
      if val.dtype.count > 1: lines.append(f"{pad}*(({ctype(val.dtype)}*)({r(buf)}+{r(idx)})) = {r(val)};")
      else: lines.append(f"{pad}{r(buf)}[{r(idx)}] = {r(val)};")
      continue
    elif op is Ops.DEFINE_ACC:
      init = r(u.src[0]) if u.dtype.count == 1 else f"({ctype(u.dtype)}){{{', '.join([r(u.src[0])] * u.dtype.count)}}}"
      name = f"acc{u.arg[0]}"
      lines.append(f"{pad}{ctype(u.dtype)} {name} = {init};")
    elif op is Ops.ASSIGN:
      lines.append(f"{pad}{r(u.src[0])} = {r(u.src[1])};")
      names[u] = r(u.src[0]); continue
    elif op is Ops.REDUCE:
      names[u] = r(u.src[0]); continue
    elif op is Ops.CAST:
      if u.dtype.count > 1: expr = f"__builtin_convertvector({r(u.src[0])}, {ctype(u.dtype)})"
      else: expr = f"({ctype(u.dtype)})({r(u.src[0])})"
      lines.append(f"{pad}{ctype(u.dtype)} {name} = {expr};")
    elif op is Ops.BITCAST:
      expr = f"((union {{{ctype(u.src[0].dtype)} a; {ctype(u.dtype)} b;}}){{.a={r(u.src[0])}}}).b"
      lines.append(f"{pad}{ctype(u.dtype)} {name} = {expr};")
    elif op is Ops.VECTORIZE:
      lines.append(f"{pad}{ctype(u.dtype)} {name} = ({ctype(u.dtype)}){{{', '.join(r(s) for s in u.src)}}};")
    elif op is Ops.GEP:
      lines.append(f"{pad}{ctype(u.dtype)} {name} = {r(u.src[0])}[{u.arg}];")
    else:
      expr = _alu(op, u.dtype, [r(s) for s in u.src], u.src[0].dtype)
      if u.dtype.is_bool and u.dtype.count == 1 and op not in (Ops.WHERE,): expr = f"({expr}!=0)" if op in (Ops.AND, Ops.OR, Ops.XOR) and not u.src[0].dtype.is_bool else expr
      lines.append(f"{pad}{ctype(u.dtype)} {name} = {expr};")
    names[u] = name
  params = []
  for i, dt in enumerate(k.buf_dtypes):
    params.append(f"{'const ' if i >= k.outputs else ''}{ctype(dt)} *restrict data{i}")
  params.append("int core")
  head = ["#include <stddef.h>"]
  need_math = any(u.op in _MATH for u in prog)
  if need_math:
    head += ["float exp2f(float); float log2f(float); float sinf(float); double exp2(double); double log2(double); double sin(double);"]
  for vt in sorted(vec_types, key=lambda d: d.name):
    head.append(f"typedef {C_TYPES[vt.scalar]} {ctype(vt)} __attribute__((vector_size({vt.itemsize}), aligned({vt.scalar.itemsize})));")
  return "\n".join(head + [f"void {k.name}({', '.join(params)}) {{", *lines, "  (void)core;", "}"]) + "\n"
