"""The C renderer: a linearized kernel becomes one C function.

ABI: `void name(T0 *restrict data0, const T1 *restrict data1, ..., int var_n, ..., int core)`: buffers (outputs first),
the Variables of symbolic sizes (in name order), then
the index of the CPU core running this call. When the kernel is threaded its loop k.threaded (an output loop) is cut
into `threads` contiguous chunks (one per core, or more, which the runner's threads claim in turn) and `core` picks
one (a peeled threaded loop: each piece runs the part of that chunk it holds, k.thread_pieces). Vector values use GCC/clang vector extensions.
`portable=True` (model export) instead renders a `static` function without `core`, spelled in plain C99 with
<math.h>: no vector types, no float16, no GCC builtins.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.lower import lower
>>> from compiler.dtypes import dtypes
>>> from compiler.uop import Ops
>>> x = LazyBuffer.empty((4,), dtypes.float32, "CPU"); x.buffer = object()
>>> print(next(l for l in render_c(lower(create_schedule([x.alu(Ops.ADD, x)])[0].ast, "E_4")).splitlines() if l.startswith("void")))
void E_4(float *restrict data0, const float *restrict data1, int core) {
"""
from __future__ import annotations
import math, re, struct
from compiler.dtypes import DType, dtypes
from compiler.uop import UOp, Ops, ALU
from compiler.lower import LoweredKernel
from compiler.linearize import linearize
from compiler.prefetch import prefetch_bytes, prefetch_locality

C_TYPES = {dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
           dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
           dtypes.uint64: "unsigned long long", dtypes.float16: "_Float16", dtypes.float32: "float", dtypes.float64: "double", dtypes.bfloat16: "unsigned short",
           dtypes.fp8e4m3: "unsigned char", dtypes.fp8e5m2: "unsigned char"}   # fp8: loaded/stored as bytes; compiler/fp8.py lowers its casts and arithmetic

def ctype(dt: DType) -> str:
  if dt.count > 1: return f"{C_TYPES[dt.scalar].replace(' ', '_')}{dt.count}"
  return C_TYPES[dt]

def bf16_bits(v: float) -> int:
  """The bfloat16 bit pattern of v: float32's top half rounded to nearest even (NaN a quiet NaN, overflow inf)."""
  if math.isnan(v): return 0x7FC0
  try: b = struct.unpack("<I", struct.pack("<f", v))[0]
  except OverflowError: b = struct.unpack("<I", struct.pack("<f", math.copysign(math.inf, v)))[0]
  return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF

def render_const(v, dt: DType) -> str:
  """A constant as a C literal; bfloat16 (held as its unsigned short bits everywhere) as its bit pattern.

  >>> render_const(2.0, dtypes.bfloat16), render_const(1.5, dtypes.float32)
  ('(unsigned short)0x4000', '0x1.8000000000000p+0f')
  """
  dt = dt.scalar
  if dt is dtypes.bfloat16: return f"(unsigned short)0x{bf16_bits(float(v)):04x}"
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

# float32 transcendentals written out in C, so loops that use them vectorize and kernels call no libm. They are
# branch-free (special cases are selected at the end) and accurate to a few ulp over the whole float range.
MATH_PRELUDE = {
  Ops.EXP2: """static inline float hc_exp2f(float x) {
  float xc = x > 128.0f ? 128.0f : (x < -150.0f ? -150.0f : x);
  float n = __builtin_rintf(xc), f = xc - n;
  float p = 1.0f + f*(0.69314718f + f*(0.24022650f + f*(0.055504109f + f*(0.0096181291f + f*(0.0013333558f + f*(0.00015403530f + f*1.5252734e-05f))))));
  int ni = (int)n, a = ni / 2, b = ni - a;
  union { float f; int i; } ua, ub;
  ua.i = (a + 127) << 23; ub.i = (b + 127) << 23;
  float r = p * ua.f * ub.f;
  r = x >= 128.0f ? __builtin_inff() : r;
  r = x <= -150.0f ? 0.0f : r;
  return x != x ? x : r;
}""",
  Ops.LOG2: """static inline float hc_log2f(float x) {
  union { float f; int i; } u;
  int sub = x < 1.17549435e-38f;
  u.f = sub ? x * 8388608.0f : x;
  int e = ((u.i >> 23) & 0xff) - 127 - (sub ? 23 : 0);
  u.i = (u.i & 0x007fffff) | 0x3f800000;
  float m = u.f;
  int big = m > 1.41421356f;
  m = big ? m * 0.5f : m;
  e = big ? e + 1 : e;
  float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
  float l = s * (2.8853900818f + s2*(0.9617966939f + s2*(0.5770780164f + s2*(0.4121985831f + s2*0.3205988979f))));
  float r = l + (float)e;
  r = x < 0.0f ? __builtin_nanf("") : r;
  r = x == 0.0f ? -__builtin_inff() : r;
  r = x == __builtin_inff() ? x : r;
  return x != x ? x : r;
}""",
  Ops.SIN: """static inline float hc_sinf(float xf) {
  double x = xf, k = __builtin_rint(x * 0.63661977236758134), r = x - k * 1.5707963267948966;
  double r2 = r * r;
  double s = r * (1.0 + r2*(-1.6666666666666666e-01 + r2*(8.3333333333333332e-03 + r2*(-1.9841269841269841e-04 + r2*(2.7557319223985893e-06 + r2*(-2.5052108385441720e-08 + r2*1.6059043836821613e-10))))));
  double c = 1.0 + r2*(-0.5 + r2*(4.1666666666666664e-02 + r2*(-1.3888888888888889e-03 + r2*(2.4801587301587302e-05 + r2*(-2.7557319223985888e-07 + r2*(2.0876756987868100e-09 + r2*-1.1470745597729725e-11))))));
  long long q = (long long)k & 3;
  double v = q == 0 ? s : (q == 1 ? c : (q == 2 ? -s : -c));
  return (xf - xf != 0.0f) ? __builtin_nanf("") : (float)v;
}""",
}
_FAST = {Ops.EXP2: "hc_exp2f", Ops.LOG2: "hc_log2f", Ops.SIN: "hc_sinf"}

def vector_math_prelude(op: Ops, w: int) -> str:
  """The same exp2/log2 on w-wide float vectors (GCC/clang vector extensions). C has no ?: on vectors, so the
  special cases are bit selects through comparison masks; rint is the add-and-subtract-1.5*2^23 trick."""
  F, I = f"float{w}", f"int{w}"
  sel = f"#define HC_SEL{w}(m, a, b) (({F})(((({I})(a)) & (m)) | ((({I})(b)) & ~(m))))\n#define HC_K{w}(c) ((({F}){{0}}) + (c))"
  # x >= 128: xc = 128, p = 1 and 2^64 * 2^64 overflows to +inf by itself. 16 lanes (AVX-512) leave that select out:
  # its infinity took the register clang 16 then lacked in the 4-chain softmax sum (2 spills); 8 lanes keep it, as
  # without it clang 19 schedules AVX2's 2-chain softmax sum into 4 spills (both allocators' counts: tests/compiler/opt/test_opts.py)
  inf_sel = "" if w == 16 else f"  r = HC_SEL{w}(x >= 128.0f, HC_K{w}(__builtin_inff()), r);\n"
  if op is Ops.EXP2: return sel + f"""
static inline {F} hc_exp2f_v{w}({F} x) {{
  {F} xc = HC_SEL{w}(x > 128.0f, HC_K{w}(128.0f), HC_SEL{w}(x < -150.0f, HC_K{w}(-150.0f), x));
  xc = HC_SEL{w}(x != x, HC_K{w}(0.0f), xc);
  {F} n = (xc + 12582912.0f) - 12582912.0f, f = xc - n;
  {F} p = 1.0f + f*(0.69314718f + f*(0.24022650f + f*(0.055504109f + f*(0.0096181291f + f*(0.0013333558f + f*(0.00015403530f + f*1.5252734e-05f))))));
  {I} ni = __builtin_convertvector(n, {I}), a = ni / 2, b = ni - a;
  {F} r = p * ({F})((a + 127) << 23) * ({F})((b + 127) << 23);
{inf_sel}  r = HC_SEL{w}(x <= -150.0f, HC_K{w}(0.0f), r);
  return HC_SEL{w}(x != x, x, r);
}}"""
  return sel + f"""
static inline {F} hc_log2f_v{w}({F} x) {{
  {I} sub = x < 1.17549435e-38f;
  {F} xs = HC_SEL{w}(sub, x * 8388608.0f, x);
  {I} bits = ({I})xs;
  {I} e = ((bits >> 23) & 0xff) - 127 - (sub & 23);
  {F} m = ({F})((bits & 0x007fffff) | 0x3f800000);
  {I} big = m > 1.41421356f;
  m = HC_SEL{w}(big, m * 0.5f, m);
  e = e - big;
  {F} s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
  {F} r = s * (2.8853900818f + s2*(0.9617966939f + s2*(0.5770780164f + s2*(0.4121985831f + s2*0.3205988979f)))) + __builtin_convertvector(e, {F});
  r = HC_SEL{w}(x < 0.0f, HC_K{w}(__builtin_nanf("")), r);
  r = HC_SEL{w}(x == 0.0f, HC_K{w}(-__builtin_inff()), r);
  r = HC_SEL{w}(x == __builtin_inff(), x, r);
  return HC_SEL{w}(x != x, x, r);
}}"""

def _math_fn(op: Ops, dt: DType) -> str:
  f = _MATH[op]
  if dt.scalar is dtypes.float64: return f"__builtin_{f}" if op in (Ops.SQRT, Ops.TRUNC) else f
  if op in _FAST: return _FAST[op]
  return f"__builtin_{f}f"

_UNSIGNED = {dtypes.int8: dtypes.uint8, dtypes.int16: dtypes.uint16, dtypes.int32: dtypes.uint32, dtypes.int64: dtypes.uint64}

def _alu(op: Ops, dt: DType, a: list[str], srcdt: DType) -> str:
  if op is Ops.NEG:   # (signed ints negate through unsigned: -INT_MIN wraps to itself, as on GPUs, instead of being UB)
    if dt.is_bool: return f"(!{a[0]})"
    return f"(({ctype(dt)})(0-({ctype(_UNSIGNED[dt.scalar].vec(dt.count))}){a[0]}))" if dt.scalar in _UNSIGNED else f"(-{a[0]})"
  if op is Ops.RECIP: return f"(({ctype(dt)})1/{a[0]})"
  if op in (Ops.EXP2, Ops.LOG2) and dt.count > 1: return f"{_FAST[op]}_v{dt.count}({a[0]})"
  if op in _MATH:
    if dt.scalar is dtypes.float16: return f"(_Float16){_math_fn(op, dtypes.float32)}((float){a[0]})"
    return f"{_math_fn(op, dt)}({a[0]})"
  if op is Ops.MAX and dt.count > 1:  # C has no ?: on vectors: select bits through the comparison mask
    it = ctype(dtypes.int32.vec(dt.count))
    m = f"(({it})({a[0]}>{a[1]})|({it})({a[0]}!={a[0]}))"
    return f"(({ctype(dt)})((({it}){a[0]}&{m})|(({it}){a[1]}&~{m})))"
  if op is Ops.MAX and dt.is_float: return f"((({a[0]}>{a[1]})||({a[0]}!={a[0]}))?{a[0]}:{a[1]})"   # NaN wins, as in torch
  if op is Ops.MAX: return f"(({a[0]}>{a[1]})?{a[0]}:{a[1]})"
  if op is Ops.WHERE: return f"({a[0]}?{a[1]}:{a[2]})"
  if op is Ops.MULACC: return f"(({a[0]}*{a[1]})+{a[2]})"
  sym = {Ops.ADD: "+", Ops.MUL: "*", Ops.FDIV: "/", Ops.IDIV: "/", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=",
         Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}[op]
  if op is Ops.AND and dt.is_bool: sym = "&&"
  if op is Ops.OR and dt.is_bool: sym = "||"
  return f"({a[0]}{sym}{a[1]})"

# standard C99 (<math.h>) spellings of the builtins above: exported code must build with any C99 compiler
_PORTABLE_NAMES = [("__builtin_inff()", "INFINITY"), ("__builtin_inf()", "((double)INFINITY)"), ('__builtin_nanf("")', "NAN"),
                   ('__builtin_nan("")', "((double)NAN)")]

def portable_c(src: str) -> str:
  """`src` with the GCC math builtins the renderer emits replaced by their C99 <math.h> names.

  >>> portable_c("float y = __builtin_rintf(x) + __builtin_inff();")
  'float y = rintf(x) + INFINITY;'
  """
  for a, b in _PORTABLE_NAMES: src = src.replace(a, b)
  return re.sub(r"__builtin_(\w+)\(", r"\1(", src)

def _bf16_widen(x: str, n: int) -> str:
  """bfloat16 bits (a scalar or an n-vector) as float32: the top half of a float32, so a shift of the bits."""
  if n == 1: return f"((union {{unsigned int i; float f;}}){{.i=((unsigned int){x})<<16}}).f"
  return f"(({ctype(dtypes.float32.vec(n))})(__builtin_convertvector({x}, {ctype(dtypes.uint32.vec(n))})<<16))"

def _bf16_narrow(f: str, n: int) -> str:
  """float32 `f` (a variable: it is read four times) rounded to nearest even into bfloat16 bits; NaN a quiet NaN."""
  if n == 1:
    bits = f"((union {{float f; unsigned int i;}}){{.f={f}}}).i"
    return f"(unsigned short)(({f}!={f})?0x7fc0u:(({bits}+0x7fffu+(({bits}>>16)&1u))>>16))"
  uv = ctype(dtypes.uint32.vec(n))
  bits, nan = f"(({uv}){f})", f"(({uv})({f}!={f}))"   # (a vector comparison is a -1/0 mask: the NaN lanes selected by bits)
  return f"__builtin_convertvector(((({bits}+0x7fffu+(({bits}>>16)&1u))>>16)&~{nan})|(0x7fc0u&{nan}), {ctype(dtypes.bfloat16.vec(n))})"

def _to_f32(x: str, src: DType) -> str:
  if src.scalar is dtypes.float32: return x
  return f"(float)({x})" if src.count == 1 else f"__builtin_convertvector({x}, {ctype(dtypes.float32.vec(src.count))})"

TILE_BODY_VECTOR_OPS = 16   # a loop body with this many vector ALU ops is a register tile's (12 FMAs: 24)

def _tile_pairs(prog: list[UOp]) -> set[UOp]:
  """The innermost loops of two iterations whose body is a register tile's step (a 2x2 conv's taps): clang unrolls
  them fully and then schedules both iterations' loads together, which spills the tile's accumulators (18 spills, half
  the speed of the 3x3 conv's tile); kept as loops they run spill-free."""
  out, stack = set(), []
  one = lambda r: r.src[0].op is Ops.CONST and r.src[0].arg == 1
  for u in prog:
    if u.op is Ops.RANGE:
      # (the enclosing loops are not innermost; a loop of one iteration, a 2x1 conv's column taps, is no loop for this)
      if not one(u):
        for fr in stack: fr[2] = False
      stack.append([u, 0, True])
    elif u.op is Ops.ENDRANGE and stack:
      r, nvec, innermost = stack.pop()
      if one(r) and stack: stack[-1][1] += nvec
      if innermost and r.src[0].op is Ops.CONST and r.src[0].arg == 2 and nvec >= TILE_BODY_VECTOR_OPS: out.add(r)
    elif stack and u.op in ALU and u.dtype is not None and u.dtype.count > 1: stack[-1][1] += 1
  return out

def _row_gated_taps(prog: list[UOp]) -> set[UOp]:
  """The innermost loops (a conv's column taps) whose gated loads are gated by an enclosing loop's index (the tap row
  of a peeled edge row: `0<r8+r9`). clang 16 keeps that row loop and unrolls the taps inside it, merging the taps'
  loads into wide loads under one branch per gate, whose values live across the branches: 61 vector spills in the
  AVX2 depthwise 3x3 tile (clang 19 unrolls the row loop too and folds the gates: no spills). A loop of taps keeps it
  in registers with both; the pragma is only given to clang before 19, so clang 19's code stays as it was."""
  out, stack = set(), []   # stack: [range, innermost so far, gated by an enclosing loop]
  one = lambda r: r.src[0].op is Ops.CONST and r.src[0].arg == 1
  for u in prog:
    if u.op is Ops.RANGE:
      if not one(u):
        for fr in stack: fr[1] = False
      stack.append([u, True, False])
    elif u.op is Ops.ENDRANGE and stack:
      r, innermost, gated = stack.pop()
      if innermost and gated and not one(r): out.add(r)
    elif u.op is Ops.LOAD and len(u.src) == 3 and stack:
      enclosing = {fr[0] for fr in stack[:-1] if not one(fr[0])}
      if any(x in enclosing for x in u.src[2].toposort() if x.op is Ops.RANGE): stack[-1][2] = True
  return out

def render_c(k: LoweredKernel, threads: int = 1, program: list[UOp] | None = None, portable: bool = False) -> str:
  """C source for kernel `k`; `threads` > 1 cuts k.threaded (an output loop) into that many chunks.
  `portable`: only the `static` C99 function (no `core`); the caller includes <math.h> and the MATH_PRELUDE it uses."""
  prog = linearize(k) if program is None else program
  names: dict[UOp, str] = {}
  lines: list[str] = []
  vec_types: set[DType] = set()
  depth = 1
  cnt = 0
  def r(u: UOp) -> str: return names[u]
  kvars = k.vars()
  no_unroll, row_gated = _tile_pairs(prog), _row_gated_taps(prog)
  # portable C: loops around another loop are not vectorized by clang, whose outer-loop vectorizer (once it unrolls
  # a short reduction) turns each scalar accumulator into a 16-lane gather loop that spills (600-byte frames with
  # AVX-512); the export promises frames of at most 512 bytes. gcc never reads the pragma (guarded: -Wall warns)
  outer: set[UOp] = set()
  if portable:
    open_ranges: list[UOp] = []
    for u in prog:
      if u.op is Ops.RANGE:
        if open_ranges: outer.add(open_ranges[-1])
        open_ranges.append(u)
      elif u.op is Ops.ENDRANGE: open_ranges.pop()
  for v in kvars: names[v] = f"var_{v.arg[0]}"   # integer arguments after the buffers (symbolic sizes); no other name starts so
  for u in prog:
    if u.dtype is not None and u.dtype.count > 1:
      vec_types.add(u.dtype)
      # (bfloat16 vectors are widened to float32 through uint32 vectors and compared through int32 masks)
      if u.dtype.scalar is dtypes.bfloat16: vec_types.update(d.vec(u.dtype.count) for d in (dtypes.float32, dtypes.uint32, dtypes.int32))
      if u.op is Ops.MAX or (u.op is Ops.ASSIGN and u.src[1].op is Ops.MAX): vec_types.add(dtypes.int32.vec(u.dtype.count))
    op, pad = u.op, "  " * depth
    if op is Ops.CONST: names[u] = render_const(u.arg, u.dtype); continue
    if op is Ops.DEFINE_GLOBAL: names[u] = f"data{u.arg}"; continue
    if op is Ops.DEFINE_VAR: continue
    if op is Ops.RANGE:
      n, rid = u.src[0].arg if u.src[0].op is Ops.CONST else r(u.src[0]), f"r{u.arg[0]}"
      names[u] = rid
      if u is k.threaded and threads > 1:
        lines.append(f"{pad}int {rid}_lo = (int)(((long long){n}*core)/{threads}), {rid}_hi = (int)(((long long){n}*(core+1))/{threads});")
        lines.append(f"{pad}for (int {rid} = {rid}_lo; {rid} < {rid}_hi; {rid}++) {{")
      elif u in k.thread_pieces and threads > 1:
        # a piece of the peeled threaded loop (offset off in it): the part of this core's chunk of the whole loop that it holds
        off, total = k.thread_pieces[u], k.threaded.src[0].arg
        lines.append(f"{pad}int {rid}_lo = (int)(((long long){total}*core)/{threads}) - {off}, {rid}_hi = (int)(((long long){total}*(core+1))/{threads}) - {off};")
        lines.append(f"{pad}if ({rid}_lo < 0) {rid}_lo = 0;")
        lines.append(f"{pad}if ({rid}_hi > {n}) {rid}_hi = {n};")
        lines.append(f"{pad}for (int {rid} = {rid}_lo; {rid} < {rid}_hi; {rid}++) {{")
      else:
        if not portable and u in no_unroll: lines.append(f"{pad}#pragma clang loop unroll(disable)")
        elif not portable and u in row_gated:
          lines += ["#if defined(__clang__) && __clang_major__ < 19", f"{pad}#pragma clang loop unroll(disable)", "#endif"]
        if u in outer: lines += ["#if defined(__clang__)", "#pragma clang loop vectorize(disable)", "#endif"]
        lines.append(f"{pad}for (int {rid} = 0; {rid} < {n}; {rid}++) {{")
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
      if (ahead := prefetch_bytes(u)) and not portable:   # the address `ahead` bytes on, by integer math: it may lie past the buffer, where a prefetch is harmless but pointer arithmetic is not
        # (the default locality 3 is PREFETCHT0, into L1; ", 0, 2": read, locality 2, PREFETCHT1, into L2 only)
        lv = "" if (loc := prefetch_locality(u)) == 3 else f", 0, {loc}"
        lines.append(f"{pad}__builtin_prefetch((const void *)((__UINTPTR_TYPE__)({r(buf)}+{r(idx)}) + {ahead}){lv});")
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
    elif op is Ops.CAST and u.src[0].dtype.scalar is dtypes.bfloat16:   # widen, then on from float32
      n, dst, w = u.dtype.count, u.dtype, _bf16_widen(r(u.src[0]), u.dtype.count)
      if dst.scalar is dtypes.float32: expr = w
      elif n > 1: expr = f"__builtin_convertvector({w}, {ctype(dst)})"
      else: expr = f"({ctype(dst)})(long long)({w})" if dst.scalar in dtypes.uints else f"({ctype(dst)})({w})"
      lines.append(f"{pad}{ctype(u.dtype)} {name} = {expr};")
    elif op is Ops.CAST and u.dtype.scalar is dtypes.bfloat16:   # to float32 first, then rounded
      lines.append(f"{pad}{ctype(dtypes.float32.vec(u.dtype.count))} {name}_f = {_to_f32(r(u.src[0]), u.src[0].dtype)};")
      lines.append(f"{pad}{ctype(u.dtype)} {name} = {_bf16_narrow(name + '_f', u.dtype.count)};")
    elif op is Ops.CAST:
      if u.dtype.count > 1: expr = f"__builtin_convertvector({r(u.src[0])}, {ctype(u.dtype)})"
      # float -> unsigned through a signed 64-bit integer: out of range (negatives) it wraps as on every other backend,
      # where C leaves it undefined (clang folds it to 0)
      elif u.src[0].dtype.is_float and u.dtype.scalar in dtypes.uints: expr = f"({ctype(u.dtype)})(long long)({r(u.src[0])})"
      else: expr = f"({ctype(u.dtype)})({r(u.src[0])})"
      lines.append(f"{pad}{ctype(u.dtype)} {name} = {expr};")
    elif op is Ops.BITCAST:
      expr = f"((union {{{ctype(u.src[0].dtype)} a; {ctype(u.dtype)} b;}}){{.a={r(u.src[0])}}}).b"
      lines.append(f"{pad}{ctype(u.dtype)} {name} = {expr};")
    elif op is Ops.VECTORIZE:
      lines.append(f"{pad}{ctype(u.dtype)} {name} = ({ctype(u.dtype)}){{{', '.join(r(s) for s in u.src)}}};")
    elif op is Ops.GEP and u.src[0].op is Ops.CONST:   # a lane of a constant (constants render as scalars)
      names[u] = render_const(u.src[0].arg, u.dtype); continue
    elif op is Ops.GEP:
      lines.append(f"{pad}{ctype(u.dtype)} {name} = {r(u.src[0])}[{u.arg}];")
    elif op is not Ops.WHERE and dtypes.bfloat16 in (u.dtype.scalar, *[s.dtype.scalar for s in u.src if s.dtype is not None]):
      # bfloat16 math runs in float32 (bf16 is held as its bits: an op on them directly would be integer arithmetic),
      # the result rounded back to nearest even, as the LLVM and PTX renderers do; WHERE only picks bits
      f32, bf, n = dtypes.float32, dtypes.bfloat16, max(s.dtype.count for s in u.src)
      fv = f32.vec(n)
      def wide(s: UOp) -> str:
        if s.dtype.scalar is not bf: return r(s)
        if s.op is Ops.CONST and n > 1:   # (a constant renders as a scalar: splat its float32 value)
          lit = render_const(struct.unpack("<f", struct.pack("<I", bf16_bits(float(s.arg)) << 16))[0], f32)
          return f"(({ctype(fv)}){{{', '.join([lit] * n)}}})"
        return _bf16_widen(r(s), s.dtype.count)
      if u.dtype.scalar is bf:
        lines.append(f"{pad}{ctype(fv)} {name}_f = {_alu(op, fv, [wide(s) for s in u.src], fv)};")
        lines.append(f"{pad}{ctype(u.dtype)} {name} = {_bf16_narrow(name + '_f', n)};")
      else: lines.append(f"{pad}{ctype(u.dtype)} {name} = {_alu(op, u.dtype, [wide(s) for s in u.src], fv)};")
    else:
      # constants render as scalars; a vector op needs a vector operand where a vector MAX casts its operands (to select
      # bits) and where every operand is a constant (else the result is a scalar): there the constant is splat
      splat = u.dtype.count > 1 and (op is Ops.MAX or all(s.op is Ops.CONST for s in u.src))
      srcs = [f"(({ctype(s.dtype)}){{{', '.join([r(s)] * s.dtype.count)}}})" if splat and s.op is Ops.CONST and s.dtype.count > 1 else r(s) for s in u.src]
      expr = _alu(op, u.dtype, srcs, u.src[0].dtype)
      if u.dtype.is_bool and u.dtype.count == 1 and op not in (Ops.WHERE,): expr = f"({expr}!=0)" if op in (Ops.AND, Ops.OR, Ops.XOR) and not u.src[0].dtype.is_bool else expr
      lines.append(f"{pad}{ctype(u.dtype)} {name} = {expr};")
    names[u] = name
  params = []
  for i, dt in enumerate(k.buf_dtypes):
    params.append(f"{'const ' if i >= k.outputs else ''}{ctype(dt)} *restrict data{i}")
  params += [f"int {names[v]}" for v in kvars]
  if portable:
    bad = sorted({dt.name for dt in vec_types} | {dt.name for dt in k.buf_dtypes if dt.scalar is dtypes.float16} |
                 {u.dtype.name for u in prog if u.dtype is not None and u.dtype.scalar is dtypes.float16})
    if bad or threads > 1: raise ValueError(f"render_c(portable=True): kernel {k.name} uses {', '.join(bad) or f'{threads} threads'}; "
                                            "portable C99 has no vector types, no float16 and no threads (optimize with opts.optimize_portable)")
    return portable_c("\n".join([f"static void {k.name}({', '.join(params)}) {{", *lines, "}"])) + "\n"
  params.append("int core")
  head = ["#include <stddef.h>"]
  used = {u.op for u in prog if u.op in _MATH}
  if any(u.op in _FAST and u.dtype.scalar is dtypes.float64 for u in prog):
    head.append("double exp2(double); double log2(double); double sin(double);")
  head += [MATH_PRELUDE[op] for op in (Ops.EXP2, Ops.LOG2, Ops.SIN) if op in used and any(u.op is op and u.dtype.scalar is not dtypes.float64 for u in prog)]
  vmath = sorted({(u.op, u.dtype.count) for u in prog if u.op in (Ops.EXP2, Ops.LOG2) and u.dtype.count > 1}, key=str)
  for _, w in vmath: vec_types.add(dtypes.int32.vec(w))
  for vt in sorted(vec_types, key=lambda d: d.name):
    head.append(f"typedef {C_TYPES[vt.scalar]} {ctype(vt)} __attribute__((vector_size({vt.itemsize}), aligned({vt.scalar.itemsize})));")
  head += [vector_math_prelude(op, w) for op, w in vmath]
  return "\n".join(head + [f"void {k.name}({', '.join(params)}) {{", *lines, "  (void)core;", "}"]) + "\n"
