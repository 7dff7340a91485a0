"""PTX interpreter (hcqrt/mock/ptx): hand-written PTX and PTX that nvcc generates from small CUDA kernels,
executed on the CPU and compared with numpy / Python integer references."""
import shutil, struct, subprocess, tempfile, pathlib
import numpy as np
import pytest
from hypothesis import given, settings, strategies as hst
from hcqrt.mock.ptx import PTXModule, PTXError, AddressSpace, MemoryFault
from tests.needs import need_tool

HDR = ".version 8.0\n.target sm_90\n.address_size 64\n"

class Dev:
  """An AddressSpace plus a bump allocator that maps numpy arrays (the arrays stay the backing store)."""
  def __init__(self): self.mem, self.next = AddressSpace(), 0x10_0000
  def buf(self, arr: np.ndarray) -> int:
    va = self.next
    self.mem.map(va, arr.reshape(-1).view(np.uint8))
    self.next += (arr.nbytes + 0xFFFF) // 0x10000 * 0x10000 + 0x10000
    return va

def f32_bits(x): return "0f{:08X}".format(struct.unpack("<I", struct.pack("<f", x))[0])

# *** hand-written PTX ***
ADD = HDR + """
.visible .entry add(.param .u64 a, .param .u64 b, .param .u64 c, .param .u32 n)
{
  .reg .pred %p<2>; .reg .b32 %r<6>; .reg .f32 %f<4>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [a]; ld.param.u64 %rd2, [b]; ld.param.u64 %rd3, [c]; ld.param.u32 %r2, [n];
  mov.u32 %r3, %ctaid.x; mov.u32 %r4, %ntid.x; mov.u32 %r5, %tid.x;
  mad.lo.s32 %r1, %r3, %r4, %r5;
  setp.ge.u32 %p1, %r1, %r2;
  @%p1 bra $L_end;
  mul.wide.u32 %rd4, %r1, 4;
  add.s64 %rd5, %rd1, %rd4; add.s64 %rd6, %rd2, %rd4; add.s64 %rd7, %rd3, %rd4;
  ld.global.f32 %f1, [%rd5]; ld.global.f32 %f2, [%rd6];
  add.f32 %f3, %f1, %f2;
  st.global.f32 [%rd7], %f3;
$L_end:
  ret;
}
"""

# odd threads loop tid times (divergent trip counts), even threads take the other side of an if/else;
# threads >= n return early; everyone that is left reconverges and writes two values.
DIVERGE = HDR + """
.visible .entry diverge(.param .u64 out, .param .u32 n)
{
  .reg .pred %p<4>; .reg .b32 %r<10>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out]; ld.param.u32 %r9, [n];
  mov.u32 %r1, %tid.x;
  setp.ge.u32 %p3, %r1, %r9;
  @%p3 ret;
  and.b32 %r2, %r1, 1;
  setp.eq.u32 %p1, %r2, 0;
  mov.u32 %r3, 0;
  @%p1 bra $EVEN;
  mov.u32 %r4, 0;
$LOOP:
  add.u32 %r3, %r3, %r4;
  add.u32 %r4, %r4, 1;
  setp.lt.u32 %p2, %r4, %r1;
  @%p2 bra $LOOP;
  bra.uni $JOIN;
$EVEN:
  mul.lo.u32 %r3, %r1, 100;
$JOIN:
  add.u32 %r5, %r3, 7;
  mul.wide.u32 %rd2, %r1, 8;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v2.u32 [%rd3], {%r5, %r1};
  ret;
}
"""

# 2D block/grid special registers and .v4 loads: out[y][x] = (tid.x, tid.y, ctaid.x, ctaid.y) + vec4 load
SPECIAL2D = HDR + """
.visible .entry special2d(.param .u64 out, .param .u64 in, .param .u32 width)
{
  .reg .b32 %r<16>; .reg .b64 %rd<8>; .reg .f32 %f<5>;
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd6, [in]; ld.param.u32 %r10, [width];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %tid.y; mov.u32 %r3, %ctaid.x; mov.u32 %r4, %ctaid.y;
  mov.u32 %r5, %ntid.x; mov.u32 %r6, %ntid.y;
  mad.lo.u32 %r7, %r3, %r5, %r1;
  mad.lo.u32 %r8, %r4, %r6, %r2;
  mad.lo.u32 %r9, %r8, %r10, %r7;
  mul.wide.u32 %rd2, %r9, 16;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v4.u32 [%rd3], {%r1, %r2, %r3, %r4};
  add.s64 %rd7, %rd6, %rd2;
  ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd7];
  st.global.v4.f32 [%rd7], {%f4, %f3, %f2, %f1};
  ret;
}
"""

# a loop with per-thread trip counts right before a barrier: threads that leave the loop early must wait at
# bar.sync for the others before reading their shared values (read back through a generic address)
BARRIER = HDR + """
.visible .entry barrier_after_loop(.param .u64 out)
{
  .reg .pred %p<2>; .reg .b32 %r<12>; .reg .b64 %rd<8>;
  .shared .align 4 .b8 sh[256];
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, 0; mov.u32 %r3, 0;
$LOOP:
  add.u32 %r3, %r3, %r2;
  add.u32 %r2, %r2, 1;
  setp.le.u32 %p1, %r2, %r1;
  @%p1 bra $LOOP;
  mov.u32 %r4, sh;
  shl.b32 %r5, %r1, 2;
  add.u32 %r6, %r4, %r5;
  st.shared.u32 [%r6], %r3;
  bar.sync 0;
  mov.u32 %r7, %ntid.x;
  add.u32 %r8, %r1, 1;
  rem.u32 %r8, %r8, %r7;
  shl.b32 %r9, %r8, 2;
  add.u32 %r10, %r4, %r9;
  cvt.u64.u32 %rd4, %r10;
  cvta.shared.u64 %rd5, %rd4;
  ld.u32 %r11, [%rd5];
  mov.u32 %r7, %ctaid.x;
  mad.lo.u32 %r7, %r7, 64, %r1;
  mul.wide.u32 %rd2, %r7, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r11;
  ret;
}
"""

def _binop_kernel(name: str, body: str, ta: str, tb: str, tout: str, regs: str) -> str:
  """out[i] = body(a[i], b[i]) with %a/%b/%d register names substituted by the caller's body."""
  sz = {"f32": 4, "u32": 4, "s32": 4, "b32": 4, "u64": 8, "s64": 8, "b64": 8, "f64": 8, "f16": 2, "b16": 2, "u16": 2, "s16": 2, "pred": 1}
  return HDR + f"""
.visible .entry {name}(.param .u64 a, .param .u64 b, .param .u64 o)
{{
  .reg .b64 %rd<10>; .reg .b32 %t<3>; {regs}
  ld.param.u64 %rd1, [a]; ld.param.u64 %rd2, [b]; ld.param.u64 %rd3, [o];
  mov.u32 %t1, %tid.x;
  mul.wide.u32 %rd4, %t1, {sz[ta]}; add.s64 %rd4, %rd1, %rd4;
  mul.wide.u32 %rd5, %t1, {sz[tb]}; add.s64 %rd5, %rd2, %rd5;
  mul.wide.u32 %rd6, %t1, {sz[tout]}; add.s64 %rd6, %rd3, %rd6;
  ld.global.{ta} %a, [%rd4];
  ld.global.{tb} %b, [%rd5];
  {body}
  st.global.{tout} [%rd6], %d;
  ret;
}}
"""

def run_binop(src: str, name: str, a: np.ndarray, b: np.ndarray, out_dtype) -> np.ndarray:
  d = Dev(); o = np.zeros(a.size, out_dtype)
  PTXModule(src).launch(name, d.mem, (1, 1, 1), (a.size, 1, 1), struct.pack("<QQQ", d.buf(a), d.buf(b), d.buf(o)))
  return o

INT_OPS = {  # name: (ptx body, type, reference on Python ints)
  "div_s32": ("div.s32 %d, %a, %b;", "s32", lambda a, b: int(abs(a) // abs(b)) * (1 if (a < 0) == (b < 0) else -1)),
  "rem_s32": ("rem.s32 %d, %a, %b;", "s32", lambda a, b: a - int(abs(a) // abs(b)) * (1 if (a < 0) == (b < 0) else -1) * b),
  "div_u32": ("div.u32 %d, %a, %b;", "u32", lambda a, b: a // b),
  "rem_u32": ("rem.u32 %d, %a, %b;", "u32", lambda a, b: a % b),
  "div_s64": ("div.s64 %d, %a, %b;", "s64", lambda a, b: int(abs(a) // abs(b)) * (1 if (a < 0) == (b < 0) else -1)),
  "rem_s64": ("rem.s64 %d, %a, %b;", "s64", lambda a, b: a - int(abs(a) // abs(b)) * (1 if (a < 0) == (b < 0) else -1) * b),
  "mulhi_s32": ("mul.hi.s32 %d, %a, %b;", "s32", lambda a, b: (a * b) >> 32),
  "mulhi_u32": ("mul.hi.u32 %d, %a, %b;", "u32", lambda a, b: (a * b) >> 32),
  "mulhi_s64": ("mul.hi.s64 %d, %a, %b;", "s64", lambda a, b: (a * b) >> 64),
  "mulhi_u64": ("mul.hi.u64 %d, %a, %b;", "u64", lambda a, b: (a * b) >> 64),
  "mullo_s32": ("mul.lo.s32 %d, %a, %b;", "s32", lambda a, b: a * b),
  "shl_b32": ("shl.b32 %d, %a, %b;", "b32", lambda a, b: 0 if b >= 32 else a << b),
  "shr_s32": ("shr.s32 %d, %a, %b;", "s32", lambda a, b: a >> min(b, 31)),
  "shr_u32": ("shr.u32 %d, %a, %b;", "u32", lambda a, b: 0 if b >= 32 else a >> b),
  "shr_s64": ("shr.s64 %d, %a, %b;", "s64", lambda a, b: a >> min(b, 63)),
  "min_s32": ("min.s32 %d, %a, %b;", "s32", min), "max_u32": ("max.u32 %d, %a, %b;", "u32", max),
  "sub_u32": ("sub.u32 %d, %a, %b;", "u32", lambda a, b: a - b),
  "add_sat": ("add.sat.s32 %d, %a, %b;", "s32", lambda a, b: max(-2**31, min(2**31 - 1, a + b))),
}

def _wrap(v: int, t: str) -> int:
  bits = 64 if t[1:] == "64" else 32
  v %= 1 << bits
  return v - (1 << bits) if t[0] == "s" and v >= 1 << (bits - 1) else v

@pytest.mark.parametrize("name", list(INT_OPS))
def test_integer_ops(name):
  body, t, ref = INT_OPS[name]
  bits = 64 if t.endswith("64") else 32
  dt = {"s32": np.int32, "u32": np.uint32, "b32": np.uint32, "s64": np.int64, "u64": np.uint64}[t]
  rng = np.random.default_rng(hash(name) % 2**32)
  info = np.iinfo(dt)
  a = np.concatenate([rng.integers(info.min, info.max, 40, dtype=dt, endpoint=True), np.array([info.min, info.max, 0, 1, 7], dt).astype(dt)])
  b = np.concatenate([rng.integers(info.min, info.max, 20, dtype=dt, endpoint=True), rng.integers(-9 if info.min else 1, 9, 25, dtype=dt)])
  if name.startswith(("sh",)): b = rng.integers(0, bits + 10, a.size).astype(dt)   # includes shifts >= width
  if name.startswith(("div", "rem")): b = np.where(b == 0, dt(3), b).astype(dt)
  if name in ("div_s32", "rem_s32", "div_s64", "rem_s64"): b = np.where((a == info.min) & (b == -1), dt(2), b).astype(dt)
  src = _binop_kernel(name, body, t, "u32" if name.startswith("sh") else t, t,
                      f".reg .{'b64' if bits == 64 else 'b32'} %a, %d; .reg .{'b32' if name.startswith('sh') else ('b64' if bits == 64 else 'b32')} %b;")
  bb = b.astype(np.uint32) if name.startswith("sh") else b
  out = run_binop(src, name, a, bb, dt)
  want = [_wrap(ref(int(x), int(y)), t) for x, y in zip(a, bb)]
  assert out.astype(object).tolist() == want, name

def test_min_max_nan_rules():
  nan, inf = np.float32("nan"), np.float32("inf")
  a = np.array([1, nan, nan, -0.0, 3, -inf, 2], np.float32)
  b = np.array([nan, 2, nan, 5, -1, nan, 2], np.float32)
  regs = ".reg .f32 %a, %b, %d;"
  mn = run_binop(_binop_kernel("mn", "min.f32 %d, %a, %b;", "f32", "f32", "f32", regs), "mn", a, b, np.float32)
  mx = run_binop(_binop_kernel("mx", "max.f32 %d, %a, %b;", "f32", "f32", "f32", regs), "mx", a, b, np.float32)
  mnn = run_binop(_binop_kernel("mnn", "min.NaN.f32 %d, %a, %b;", "f32", "f32", "f32", regs), "mnn", a, b, np.float32)
  np.testing.assert_array_equal(mn, [1, 2, nan, -0.0, -1, -inf, 2])   # the non-NaN operand wins
  np.testing.assert_array_equal(mx, [1, 2, nan, 5, 3, -inf, 2])
  np.testing.assert_array_equal(mnn, [nan, nan, nan, -0.0, -1, nan, 2])

SETP_CASES = ["eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"]

def test_setp_float_ordered_unordered():
  vals = np.array([1.0, 2.0, np.nan, -np.inf, 0.0, -0.0], np.float32)
  a, b = np.repeat(vals, vals.size), np.tile(vals, vals.size)
  body = "\n".join(f"setp.{c}.f32 %p{i}, %a, %b; selp.u32 %q, {1 << i}, 0, %p{i}; or.b32 %d, %d, %q;" for i, c in enumerate(SETP_CASES))
  regs = f".reg .f32 %a, %b; .reg .b32 %d, %q; .reg .pred %p<{len(SETP_CASES)}>;"
  out = run_binop(_binop_kernel("sp", "mov.u32 %d, 0;\n" + body, "f32", "f32", "u32", regs), "sp", a, b, np.uint32)
  with np.errstate(invalid="ignore"):
    n = np.isnan(a) | np.isnan(b)
    ref = {"eq": (a == b) & ~n, "ne": (a != b) & ~n, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "equ": (a == b) | n,
           "neu": (a != b), "ltu": (a < b) | n, "leu": (a <= b) | n, "gtu": (a > b) | n, "geu": (a >= b) | n, "num": ~n, "nan": n}
  for i, c in enumerate(SETP_CASES): np.testing.assert_array_equal((out >> i) & 1, ref[c].astype(np.uint32), err_msg=c)

def test_setp_combine_and_pair():
  src = _binop_kernel("cmb", "setp.lt.s32 %p1, %a, 0;\nsetp.gt.and.s32 %p2|%p3, %a, %b, %p1;\n"
                      "selp.u32 %x, 1, 0, %p2; selp.u32 %y, 2, 0, %p3; or.b32 %d, %x, %y;", "s32", "s32", "u32",
                      ".reg .b32 %a, %b, %d, %x, %y; .reg .pred %p<4>;")
  a = np.array([-1, -5, 3, 4, -2], np.int32); b = np.array([-3, 0, 1, 9, -2], np.int32)
  out = run_binop(src, "cmb", a, b, np.uint32)
  p1 = a < 0
  assert out.tolist() == [int((x > y) & p) | 2 * int((not (x > y)) & p) for x, y, p in zip(a, b, p1)]

def _f16_neighbours(x: np.ndarray):
  """Independent reference for directed rounding to f16: the f16 values just below/above each f32 x."""
  allh = np.arange(0, 0x10000, dtype=np.uint32).astype(np.uint16).view(np.float16)
  fin = np.sort(np.unique(allh[np.isfinite(allh)].astype(np.float64)))
  fin = np.concatenate([[-np.inf], fin, [np.inf]])
  x64 = x.astype(np.float64)
  hi_i = np.searchsorted(fin, x64, side="left"); lo_i = np.searchsorted(fin, x64, side="right") - 1
  return fin[lo_i], fin[hi_i]

@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
def test_cvt_f32_to_f16_rounding(mode):
  rng = np.random.default_rng(1)
  x = np.concatenate([rng.standard_normal(200).astype(np.float32) * np.float32(1000), np.array([65504, 65520, 70000, -70000, 1e-8, -1e-8, 2**-24, 0.0, -0.0], np.float32)])
  src = _binop_kernel("h", f"cvt.{mode}.f16.f32 %h, %a;\nmov.b16 %d, %h;", "f32", "f32", "b16", ".reg .f32 %a, %b; .reg .b16 %h, %d;")
  out = run_binop(src, "h", x, x, np.uint16).view(np.float16).astype(np.float64)
  lo, hi = _f16_neighbours(x)
  if mode == "rn":
    with np.errstate(over="ignore"): want = x.astype(np.float16).astype(np.float64)
  elif mode == "rm": want = lo
  elif mode == "rp": want = hi
  else: want = np.where(x >= 0, lo, hi)
  if mode in ("rz", "rm", "rp"):   # beyond the largest finite value directed modes stop at 65504 when rounding inward
    want = np.where(np.isinf(want) & ((mode == "rz") | ((mode == "rm") & (x > 0)) | ((mode == "rp") & (x < 0))), np.sign(x) * 65504.0, want)
  want = np.where(want == 0, np.copysign(0.0, x), want)   # a zero result keeps the sign of the input
  np.testing.assert_array_equal(out, want)
  assert np.array_equal(np.signbit(out), np.signbit(want))

def test_cvt_float_int_saturation_and_rounding():
  x = np.array([1.5, 2.5, -1.5, -2.5, 3e9, -3e9, np.nan, np.inf, -np.inf, 0.49999997, -7.9], np.float32)
  outs = {}
  for mode in ("rni", "rzi", "rmi", "rpi"):
    src = _binop_kernel("c", f"cvt.{mode}.s32.f32 %d, %a;", "f32", "f32", "s32", ".reg .f32 %a, %b; .reg .b32 %d;")
    outs[mode] = run_binop(src, "c", x, x, np.int32)
  fn = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}
  for mode, o in outs.items():
    with np.errstate(invalid="ignore"):
      want = np.where(np.isnan(x), 0, np.clip(fn[mode](x.astype(np.float64)), -2**31, 2**31 - 1)).astype(np.int64)
    assert o.astype(np.int64).tolist() == want.tolist(), mode
  src = _binop_kernel("cu", "cvt.rzi.u32.f32 %d, %a;", "f32", "f32", "u32", ".reg .f32 %a, %b; .reg .b32 %d;")
  u = run_binop(src, "cu", x, x, np.uint32)
  assert u.tolist() == [1, 2, 0, 0, 3000000000, 0, 0, 2**32 - 1, 0, 0, 0]

def test_cvt_int_conversions_and_f16_roundtrip():
  a = np.array([-1, 300, -129, 70000, 2**31 - 1], np.int32)
  src = _binop_kernel("ii", "cvt.s8.s32 %x, %a; cvt.s32.s8 %d, %x;", "s32", "s32", "s32", ".reg .b32 %a, %b, %d; .reg .b16 %x;")
  assert run_binop(src, "ii", a, a, np.int32).tolist() == [int(np.int8(v & 0xFF if v & 0x80 == 0 else (v & 0xFF) - 256)) for v in a.tolist()]
  src = _binop_kernel("sat", "cvt.sat.u8.s32 %d, %a;", "s32", "s32", "u32", ".reg .b32 %a, %b, %d;")
  assert run_binop(src, "sat", a, a, np.uint32).tolist() == [0, 255, 0, 255, 255]
  h = np.array([0.5, -2.0, 65504, 1e-7, np.inf], np.float16)
  src = _binop_kernel("hf", "cvt.f32.f16 %f, %a; mul.f32 %f, %f, 0f40000000; cvt.rn.f16.f32 %d, %f;", "f16", "f16", "f16",
                      ".reg .b16 %a, %b, %d; .reg .f32 %f;")
  with np.errstate(over="ignore"): want = (h.astype(np.float32) * 2).astype(np.float16)
  np.testing.assert_array_equal(run_binop(src, "hf", h, h, np.float16), want)

def test_ftz_and_sat():
  sub = np.float32(1e-40)
  a = np.array([sub, -sub, 1.0, 0.75, -3, np.nan], np.float32); b = np.array([0, -0.0, 0.5, 0.5, 1, 1], np.float32)
  regs = ".reg .f32 %a, %b, %d;"
  out = run_binop(_binop_kernel("fz", "add.ftz.f32 %d, %a, %b;", "f32", "f32", "f32", regs), "fz", a, b, np.float32)
  assert out[0] == 0 and not np.signbit(out[0]) and out[1] == 0 and np.signbit(out[1])   # flushed, sign kept (-0 + -0 = -0)
  full = run_binop(_binop_kernel("nf", "add.f32 %d, %a, %b;", "f32", "f32", "f32", regs), "nf", a, b, np.float32)
  assert full[0] == sub   # without .ftz subnormals survive
  sat = run_binop(_binop_kernel("st", "add.sat.f32 %d, %a, %b;", "f32", "f32", "f32", regs), "st", a, b, np.float32)
  np.testing.assert_array_equal(sat, [sub, 0, 1, 1, 0, 0])

def test_fma_is_fused_and_directed_rounding():
  # a*b+c where the product's low bits matter: fused result differs from mul-then-add
  a = np.array([1 + 2**-12, 3.0, 1.0], np.float32); b = np.array([1 - 2**-12, 1 / 3, 2**-30], np.float32)
  c = np.array([-1.0, -1.0, 1.0], np.float32)
  d = Dev(); o = np.zeros(3, np.float32); o2 = np.zeros(3, np.float32)
  src = HDR + """
.visible .entry f(.param .u64 a, .param .u64 b, .param .u64 c, .param .u64 o, .param .u64 o2)
{
  .reg .b64 %rd<12>; .reg .b32 %t; .reg .f32 %f<6>;
  ld.param.u64 %rd1, [a]; ld.param.u64 %rd2, [b]; ld.param.u64 %rd3, [c]; ld.param.u64 %rd4, [o]; ld.param.u64 %rd10, [o2];
  mov.u32 %t, %tid.x; mul.wide.u32 %rd5, %t, 4;
  add.s64 %rd6, %rd1, %rd5; add.s64 %rd7, %rd2, %rd5; add.s64 %rd8, %rd3, %rd5; add.s64 %rd9, %rd4, %rd5; add.s64 %rd11, %rd10, %rd5;
  ld.global.f32 %f1, [%rd6]; ld.global.f32 %f2, [%rd7]; ld.global.f32 %f3, [%rd8];
  fma.rn.f32 %f4, %f1, %f2, %f3;
  st.global.f32 [%rd9], %f4;
  add.rp.f32 %f5, %f3, %f2;
  st.global.f32 [%rd11], %f5;
  ret;
}"""
  PTXModule(src).launch("f", d.mem, (1, 1, 1), (3, 1, 1), struct.pack("<QQQQQ", d.buf(a), d.buf(b), d.buf(c), d.buf(o), d.buf(o2)))
  from fractions import Fraction as Fr
  exact = [Fr(float(x)) * Fr(float(y)) + Fr(float(z)) for x, y, z in zip(a, b, c)]
  assert o[0] == np.float32(-2**-24) and Fr(float(o[0])) == exact[0]
  assert o[2] == 1.0   # 1 + 2^-30 rounds to 1
  # add.rp: 1 + 2^-30 rounds up to the next float after 1
  assert o2[2] == np.nextafter(np.float32(1), np.float32(2))
  assert o2[0] == np.float32(-1) + b[0]

UNARY = ["sqrt.rn.f32", "rsqrt.approx.f32", "rcp.rn.f32", "ex2.approx.f32", "lg2.approx.f32", "sin.approx.f32", "cos.approx.f32",
         "tanh.approx.f32", "abs.f32", "neg.f32", "copysign.f32", "slct.f32.f32", "testp.finite.f32", "testp.subnormal.f32", "div.rn.f32",
         "div.approx.f32"]

def _unary_src() -> str:
  lines = []
  for k, op in enumerate(UNARY):
    if op.startswith("testp"): lines.append(f"{op} %p1, %a; selp.f32 %d, 0f3F800000, 0f00000000, %p1;")
    elif op.startswith(("copysign", "div")): lines.append(f"{op} %d, %a, %b;")
    elif op.startswith("slct"): lines.append(f"{op} %d, %b, %a, %a;")
    else: lines.append(f"{op} %d, %a;")
    lines.append(f"st.global.f32 [%rd6+{4 * k}], %d;")
  return HDR + f"""
.visible .entry un(.param .u64 a, .param .u64 b, .param .u64 o)
{{
  .reg .b64 %rd<8>; .reg .b32 %t; .reg .f32 %a, %b, %d; .reg .pred %p1;
  ld.param.u64 %rd1, [a]; ld.param.u64 %rd2, [b]; ld.param.u64 %rd3, [o];
  mov.u32 %t, %tid.x;
  mul.wide.u32 %rd4, %t, 4; add.s64 %rd5, %rd1, %rd4; add.s64 %rd7, %rd2, %rd4;
  mul.wide.u32 %rd4, %t, {4 * len(UNARY)}; add.s64 %rd6, %rd3, %rd4;
  ld.global.f32 %a, [%rd5]; ld.global.f32 %b, [%rd7];
  {chr(10).join(lines)}
  ret;
}}"""

# the maximum errors of the .approx instructions (PTX ISA section), as (rtol, atol) against the exact value
APPROX_TOL = {"rsqrt.approx.f32": dict(rtol=2 ** -22.9, atol=0),                 # 9.7.3.16: relative 2^-22.9
              "ex2.approx.f32": dict(rtol=2.5 * 2 ** -23, atol=0),              # 9.7.3.21: 2 ulp from the rounded result
              "lg2.approx.f32": dict(rtol=2 ** -22, atol=2 ** -22),             # 9.7.3.20: abs on (0.5, 2), else relative
              "sin.approx.f32": dict(rtol=0, atol=2 ** -14.7),                  # 9.7.3.18: 100 is inside [-100pi, 100pi]
              "cos.approx.f32": dict(rtol=0, atol=2 ** -14.7),                  # 9.7.3.19: same
              "tanh.approx.f32": dict(rtol=2 ** -11, atol=0),                   # 9.7.3.22: relative 2^-11
              "div.approx.f32": dict(rtol=2 * 2 ** -23, atol=2 * 2 ** -149)}     # 9.7.3.8: 2 ulp (of a subnormal too)

def test_float_unary_and_special_ops():
  src = _unary_src()
  a = np.array([0.25, 2.0, -3.5, 1e-40, np.inf, np.nan, 100.0, -0.0], np.float32)
  b = np.array([-1.0, 3.0, 2.0, -5.0, 1.0, 2.0, -0.5, 7.0], np.float32)
  d = Dev(); o = np.zeros((a.size, len(UNARY)), np.float32)
  PTXModule(src).launch("un", d.mem, (1, 1, 1), (a.size, 1, 1), struct.pack("<QQQ", d.buf(a), d.buf(b), d.buf(o)))
  x = a.astype(np.float64)
  with np.errstate(all="ignore"):
    want = {"sqrt.rn.f32": np.sqrt(a), "rsqrt.approx.f32": 1 / np.sqrt(x), "rcp.rn.f32": np.float32(1) / a, "ex2.approx.f32": np.exp2(x),
            "lg2.approx.f32": np.log2(x), "sin.approx.f32": np.sin(x), "cos.approx.f32": np.cos(x), "tanh.approx.f32": np.tanh(x),
            "abs.f32": np.abs(a), "neg.f32": -a, "copysign.f32": np.copysign(b, a), "slct.f32.f32": np.where(a >= 0, b, a),
            "testp.finite.f32": np.isfinite(a), "testp.subnormal.f32": (a != 0) & (np.abs(a) < np.finfo(np.float32).tiny),
            "div.rn.f32": a / b, "div.approx.f32": x / b}
  for k, op in enumerate(UNARY):
    if op in APPROX_TOL:   # the mock's .approx results are off by the documented maximum error: compare with the exact value
      np.testing.assert_allclose(o[:, k].astype(np.float64), want[op], err_msg=op, **APPROX_TOL[op]); continue
    np.testing.assert_allclose(o[:, k], np.asarray(want[op], np.float32), rtol=2e-6, atol=0, err_msg=op)
    if op in ("sqrt.rn.f32", "rcp.rn.f32", "div.rn.f32", "neg.f32", "abs.f32", "copysign.f32"):   # IEEE-exact ops: bit equal
      np.testing.assert_array_equal(o[:, k].view(np.uint32), np.asarray(want[op], np.float32).view(np.uint32), err_msg=op)

def test_elementwise_add_odd_sizes():
  mod = PTXModule(ADD)
  for n in (1, 7, 33, 1000):
    d = Dev(); a = np.random.rand(n).astype(np.float32); b = np.random.rand(n).astype(np.float32)
    c = np.full(n + 5, -1, np.float32)   # bounds guard: nothing past n is touched
    mod.launch("add", d.mem, ((n + 31) // 32, 1, 1), (32, 1, 1), struct.pack("<QQQI", d.buf(a), d.buf(b), d.buf(c), n))
    np.testing.assert_array_equal(c[:n], a + b); assert (c[n:] == -1).all()

def test_divergence_loop_and_early_return():
  d = Dev(); n = 37; out = np.zeros((48, 2), np.uint32)
  PTXModule(DIVERGE).launch("diverge", d.mem, (1, 1, 1), (48, 1, 1), struct.pack("<QI", d.buf(out), n))
  t = np.arange(48)
  want = np.where(t % 2 == 0, t * 100, t * (t - 1) // 2) + 7
  np.testing.assert_array_equal(out[:n, 0], want[:n]); np.testing.assert_array_equal(out[:n, 1], t[:n])
  assert (out[n:] == 0).all()

def test_barrier_waits_for_divergent_loop():
  d = Dev(); out = np.zeros(3 * 64, np.uint32)
  PTXModule(BARRIER).launch("barrier_after_loop", d.mem, (3, 1, 1), (64, 1, 1), struct.pack("<Q", d.buf(out)))
  t = (np.arange(64) + 1) % 64
  np.testing.assert_array_equal(out, np.tile(t * (t + 1) // 2, 3))

def test_special_registers_2d_and_v4():
  d = Dev(); bx, by, gx, gy = 4, 3, 2, 5
  W, H = bx * gx, by * gy
  out = np.zeros((H, W, 4), np.uint32); inp = np.random.rand(H, W, 4).astype(np.float32); orig = inp.copy()
  mod = PTXModule(SPECIAL2D)
  mod.launch("special2d", d.mem, (gx, gy, 1), (bx, by, 1), struct.pack("<QQI", d.buf(out), d.buf(inp), W))
  y, x = np.mgrid[0:H, 0:W]
  np.testing.assert_array_equal(out[..., 0], x % bx); np.testing.assert_array_equal(out[..., 1], y % by)
  np.testing.assert_array_equal(out[..., 2], x // bx); np.testing.assert_array_equal(out[..., 3], y // by)
  np.testing.assert_array_equal(inp, orig[..., ::-1])

def test_chunking_does_not_change_results():
  """Blocks are stacked into one thread array when they fit; one block per chunk must give the same answer."""
  d = Dev(); n = 1000; a = np.random.rand(n).astype(np.float32); b = np.random.rand(n).astype(np.float32)
  c1, c2 = np.zeros(n, np.float32), np.zeros(n, np.float32)
  m = PTXModule(ADD); m.launch("add", d.mem, (8, 1, 1), (128, 1, 1), struct.pack("<QQQI", d.buf(a), d.buf(b), d.buf(c1), n))
  m2 = PTXModule(ADD); m2.max_chunk_threads = 128
  m2.launch("add", d.mem, (8, 1, 1), (128, 1, 1), struct.pack("<QQQI", d.buf(a), d.buf(b), d.buf(c2), n))
  np.testing.assert_array_equal(c1, c2)

PACK = HDR + """
.visible .entry pack(.param .u64 a, .param .u64 o)
{
  .reg .b64 %rd<6>; .reg .b32 %t, %x, %y, %z; .reg .b16 %lo, %hi;
  ld.param.u64 %rd1, [a]; ld.param.u64 %rd2, [o];
  mov.u32 %t, %tid.x; mul.wide.u32 %rd3, %t, 4; add.s64 %rd4, %rd1, %rd3; add.s64 %rd5, %rd2, %rd3;
  ld.global.b32 %x, [%rd4];
  add.rn.f16x2 %y, %x, %x;
  mov.b32 {%lo, %hi}, %y;
  mov.b32 %z, {%hi, %lo};
  st.global.b32 [%rd5], %z;
  ret;
}"""

def test_f16x2_and_half_moves():
  d = Dev(); h = np.random.randn(16).astype(np.float16); o = np.zeros(16, np.float16)
  PTXModule(PACK).launch("pack", d.mem, (1, 1, 1), (8, 1, 1), struct.pack("<QQ", d.buf(h), d.buf(o)))
  np.testing.assert_array_equal(o.reshape(8, 2), (h + h).reshape(8, 2)[:, ::-1])

def test_errors_name_instruction_and_address():
  bad = ADD.replace("add.f32 %f3, %f1, %f2;", "frobnicate.f32 %f3, %f1, %f2;")
  with pytest.raises(PTXError, match=r"frobnicate.*|line 1[0-9]"):
    PTXModule(bad)
  try: PTXModule(bad)
  except PTXError as e: assert "frobnicate" in str(e) and "line" in str(e)
  d = Dev(); a = np.zeros(4, np.float32); c = np.zeros(4, np.float32)
  with pytest.raises(MemoryFault, match=r"0x[0-9a-f]+.*|ld.global"):
    PTXModule(ADD).launch("add", d.mem, (1, 1, 1), (8, 1, 1), struct.pack("<QQQI", d.buf(a), 0xdead0000, d.buf(c), 8))
  with pytest.raises(PTXError, match="no kernel"):
    PTXModule(ADD).launch("nope", d.mem, (1, 1, 1), (1, 1, 1), b"")

def test_address_space_api():
  mem = AddressSpace(); a = np.arange(8, dtype=np.uint8); ba = bytearray(8)
  mem.map(0x1000, a); mem.map(0x2000, ba)
  assert mem.read(0x1002, 3) == bytes([2, 3, 4])
  mem.write(0x2001, b"xy"); assert bytes(ba[1:3]) == b"xy"
  with pytest.raises(ValueError): mem.map(0x1004, bytearray(8))   # overlap
  with pytest.raises(MemoryFault, match="0x1006"): mem.read(0x1006, 4)
  # one gather spanning two mappings takes the slow path and still checks bounds per element
  g = mem.gather(np.array([0x1000, 0x2000], np.uint64), np.dtype(np.uint8)); assert g.tolist() == [0, 0]
  mem.unmap(0x1000)
  with pytest.raises(MemoryFault): mem.read(0x1000, 1)

@settings(max_examples=25, deadline=None)
@given(hst.lists(hst.integers(-2**31, 2**31 - 1), min_size=1, max_size=40), hst.integers(-2**31, 2**31 - 1))
def test_mad_wide_and_bit_ops_property(xs, k):
  a = np.array(xs, np.int32); b = np.full(a.size, k, np.int32)
  src = _binop_kernel("mw", "mov.u64 %c, 12345; mad.wide.s32 %d, %a, %b, %c; xor.b64 %d, %d, %c; not.b64 %d, %d;", "s32", "s32", "s64",
                      ".reg .b32 %a, %b; .reg .b64 %d, %c;")
  out = run_binop(src, "mw", a, b, np.int64)
  assert out.tolist() == [_wrap(~((x * k + 12345) ^ 12345), "s64") for x in xs]

# *** real PTX from nvcc ***
CUDA = r"""
#include <cuda_fp16.h>
extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = a * x[i] + y[i]; }
extern "C" __global__ void reduce(const float* x, float* out, int n) {
  __shared__ float s[256]; int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.f; __syncthreads();
  for (int st = blockDim.x / 2; st > 0; st >>= 1) { if (t < st) s[t] += s[t + st]; __syncthreads(); }
  if (t == 0) out[blockIdx.x] = s[0]; }
extern "C" __global__ void half_cvt(const __half* a, float* o, __half* o2, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { o[i] = __half2float(a[i]); o2[i] = __float2half(o[i] * 3.0f); } }
extern "C" __global__ void iops(const int* a, const int* b, int* o, unsigned* uo, int n) {
  int i = threadIdx.x; if (i < n) { int x = a[i], y = b[i];
  o[4*i] = x / y; o[4*i+1] = x % y; o[4*i+2] = x >> 3; o[4*i+3] = x << (y & 31);
  uo[2*i] = (unsigned)x / (unsigned)y; uo[2*i+1] = (unsigned)x >> 5; } }
extern "C" __global__ void minmax(const float* a, const float* b, float* o) {
  int i = threadIdx.x; o[i] = fminf(a[i], b[i]); o[i + blockDim.x] = fmaxf(a[i], b[i]); }
extern "C" __global__ void branchy(const float* a, float* o, int n) {
  int i = threadIdx.x; float v = a[i];
  if (i % 3 == 0) { for (int k = 0; k < i; k++) v = v * 0.5f + 1.0f; } else if (i % 3 == 1) { v = -v; } else { while (v < 100.f) v *= 2.f; }
  o[i] = v; }
extern "C" __global__ void v4(const float4* a, float4* o) {
  int i = threadIdx.x; float4 v = a[i]; o[i] = make_float4(v.w, v.z, v.y, v.x); }
extern "C" __global__ void trig(const float* a, float* o) {
  int i = threadIdx.x; o[i] = sinf(a[i]); o[i + blockDim.x] = expf(a[i]) ; o[i + 2*blockDim.x] = sqrtf(fabsf(a[i])) / (1.0f + a[i]*a[i]); }
extern "C" __global__ void atomics(float* f, unsigned* u) { atomicAdd(f, 1.0f); atomicAdd(u, threadIdx.x); atomicMax(u + 1, threadIdx.x * 7 % 100); }
extern "C" __global__ void shfl(float* a) {
  float v = a[threadIdx.x];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffff, v, off);
  if ((threadIdx.x & 31) == 0) a[threadIdx.x] = v; }
extern "C" __global__ void dbl(const double* a, double* o, long long* l) {
  int i = threadIdx.x; o[i] = a[i] / 3.0; l[i] = (long long)a[i] * 12345678901LL; }
#define TS 8
extern "C" __global__ void matmul(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[TS][TS], Bs[TS][TS];
  int r = blockIdx.y * TS + threadIdx.y, c = blockIdx.x * TS + threadIdx.x; float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += TS) {
    As[threadIdx.y][threadIdx.x] = (r < M && k0 + threadIdx.x < K) ? A[r * K + k0 + threadIdx.x] : 0.f;
    Bs[threadIdx.y][threadIdx.x] = (c < N && k0 + threadIdx.y < K) ? B[(k0 + threadIdx.y) * N + c] : 0.f;
    __syncthreads();
    for (int k = 0; k < TS; k++) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads(); }
  if (r < M && c < N) C[r * N + c] = acc; }
extern "C" __global__ void dynsmem(const int* a, int* o) {
  extern __shared__ int buf[]; int t = threadIdx.x; buf[t] = a[blockIdx.x * blockDim.x + t]; __syncthreads();
  o[blockIdx.x * blockDim.x + t] = buf[blockDim.x - 1 - t]; }
"""

# a mixed bag of what elementwise kernels of other dtypes compile to: bf16, u8/bool loads, libdevice math, int64
CUDA_MISC = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void misc(const float* a, const __nv_bfloat16* bb, const unsigned char* c, const bool* bl, float* o,
                                __nv_bfloat16* ob, long long* ol, __half* oh, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
  float x = a[i];
  o[8*i] = exp2f(x) + log2f(fabsf(x) + 1.f);
  o[8*i+1] = rsqrtf(fabsf(x) + 1.f);
  o[8*i+2] = __bfloat162float(bb[i]) * 2.f;
  o[8*i+3] = (float)c[i] + (bl[i] ? 1.f : 0.f);
  o[8*i+4] = truncf(x) + floorf(x) + ceilf(x) + rintf(x);
  o[8*i+5] = powf(fabsf(x), 1.5f);
  o[8*i+6] = logf(fabsf(x) + 1) + log1pf(fabsf(x));
  o[8*i+7] = erff(x) + atan2f(x, 1.0f) + fmodf(x, 0.7f);
  ob[i] = __float2bfloat16(x * 3.f);
  ol[i] = (long long)i * 0x100000001LL + (long long)(x * 1000);
  __half h = __float2half(x); oh[i] = __hadd(h, __hmul(h, h)); }
extern "C" __global__ void hfma2(const __half2* a, __half2* o) { int i = threadIdx.x; o[i] = __hfma2(a[i], a[i], a[i]); }
extern "C" __global__ void u8k(const unsigned char* a, unsigned char* o, int n) {
  int i = threadIdx.x; if (i < n) o[i] = a[i] > 100 ? a[i] - 100 : a[i] * 2; }
extern "C" __global__ void rowmax(const float* a, float* o, int cols) {
  __shared__ float s[32]; float acc = 0;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) acc = fmaxf(acc, a[blockIdx.x * cols + j]);
  for (int off = 16; off; off >>= 1) acc = fmaxf(acc, __shfl_xor_sync(0xffffffff, acc, off));
  if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    acc = threadIdx.x < blockDim.x / 32 ? s[threadIdx.x] : -1e30f;
    for (int off = 16; off; off >>= 1) acc = fmaxf(acc, __shfl_xor_sync(0xffffffff, acc, off));
    if (threadIdx.x == 0) o[blockIdx.x] = acc; } }
"""

NVCC = shutil.which("nvcc")

def _nvcc(src: str, *flags: str) -> PTXModule:
  with tempfile.TemporaryDirectory() as td:
    cu = pathlib.Path(td) / "k.cu"; cu.write_text(src)
    r = subprocess.run([NVCC, "-ptx", "-arch=sm_90", *flags, str(cu), "-o", str(cu.with_suffix(".ptx"))], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return PTXModule(cu.with_suffix(".ptx").read_text())

@pytest.fixture(scope="module", params=["default", "fast-math"])
def nv_misc(request):
  need_tool("nvcc")
  return _nvcc(CUDA_MISC, *(["-use_fast_math"] if request.param == "fast-math" else []))

def _bf16_nearest(x: np.ndarray) -> np.ndarray:
  """Independent bf16 reference: of the two bf16 neighbours (truncate, truncate + 1 ulp) take the nearer, ties to even."""
  b = x.astype(np.float32).view(np.uint32) >> 16
  lo, hi = (b << 16).view(np.float32).astype(np.float64), ((b + 1) << 16).view(np.float32).astype(np.float64)
  x64 = x.astype(np.float64)
  pick_hi = (np.abs(hi - x64) < np.abs(x64 - lo)) | ((np.abs(hi - x64) == np.abs(x64 - lo)) & (b % 2 == 1))
  return np.where(pick_hi, b + 1, b).astype(np.uint16)

def test_nvcc_misc_dtypes_and_libdevice(nv_misc):
  import math
  d = Dev(); n = 77; rng = np.random.default_rng(0)
  a = (rng.standard_normal(n) * 5).astype(np.float32)
  bb = (rng.standard_normal(n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
  c = rng.integers(0, 256, n).astype(np.uint8); bl = rng.integers(0, 2, n).astype(np.bool_)
  o, ob, ol, oh = np.zeros((n, 8), np.float32), np.zeros(n, np.uint16), np.zeros(n, np.int64), np.zeros(n, np.float16)
  nv_misc.launch("misc", d.mem, (3, 1, 1), (32, 1, 1), struct.pack("<QQQQQQQQi", *(d.buf(v) for v in (a, bb, c, bl, o, ob, ol, oh)), n))
  x = a.astype(np.float64)
  refs = [np.exp2(x) + np.log2(abs(x) + 1), 1 / np.sqrt(abs(x) + 1), (bb.astype(np.uint32) << 16).view(np.float32) * 2.0,
          c.astype(np.float64) + bl, np.trunc(x) + np.floor(x) + np.ceil(x) + np.rint(x), abs(x) ** 1.5,
          np.log(abs(x) + 1) + np.log1p(abs(x)), [math.erf(v) + math.atan2(v, 1) + math.fmod(v, float(np.float32(0.7))) for v in x]]
  for k, r in enumerate(refs): np.testing.assert_allclose(o[:, k], r, rtol=2e-6, atol=1e-6, err_msg=f"column {k}")
  np.testing.assert_array_equal(ob, _bf16_nearest(a * np.float32(3)))
  assert ol.tolist() == [i * 0x100000001 + int(np.float32(v) * np.float32(1000)) for i, v in enumerate(a)]
  h = a.astype(np.float16)
  np.testing.assert_array_equal(oh, h + h * h)
  h2 = rng.standard_normal(64).astype(np.float16); oh2 = np.zeros(64, np.float16)
  nv_misc.launch("hfma2", d.mem, (1, 1, 1), (32, 1, 1), struct.pack("<QQ", d.buf(h2), d.buf(oh2)))
  np.testing.assert_array_equal(oh2, (h2.astype(np.float64) * h2 + h2).astype(np.float16))   # fused: one rounding
  u = rng.integers(0, 256, 50).astype(np.uint8); ou = np.zeros(50, np.uint8)
  nv_misc.launch("u8k", d.mem, (1, 1, 1), (64, 1, 1), struct.pack("<QQi", d.buf(u), d.buf(ou), 50))
  np.testing.assert_array_equal(ou, np.where(u > 100, u - 100, (u.astype(np.int32) * 2) & 255).astype(np.uint8))
  A = rng.standard_normal((5, 1000)).astype(np.float32); om = np.zeros(5, np.float32)
  nv_misc.launch("rowmax", d.mem, (5, 1, 1), (256, 1, 1), struct.pack("<QQi", d.buf(A), d.buf(om), 1000))
  np.testing.assert_array_equal(om, np.maximum(A.max(1), 0))

@pytest.fixture(scope="module")
def nv():
  need_tool("nvcc")
  return _nvcc(CUDA)

def test_nvcc_add_and_saxpy(nv):
  d = Dev(); n = 1000
  a, b, c = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32), np.zeros(n, np.float32)
  nv.launch("add", d.mem, (8, 1, 1), (128, 1, 1), struct.pack("<QQQi", d.buf(a), d.buf(b), d.buf(c), n))
  np.testing.assert_array_equal(c, a + b)
  y = np.random.rand(n).astype(np.float32); y0 = y.copy()
  nv.launch("saxpy", d.mem, (3, 1, 1), (64, 1, 1), struct.pack("<ifQQ", n, 2.5, d.buf(a), d.buf(y)))   # grid-stride loop
  np.testing.assert_array_equal(y, (np.float64(2.5) * a.astype(np.float64) + y0).astype(np.float32))

def test_nvcc_shared_reduction(nv):
  d = Dev(); n = 1000; x = np.random.rand(n).astype(np.float32); out = np.zeros(4, np.float32)
  nv.launch("reduce", d.mem, (4, 1, 1), (256, 1, 1), struct.pack("<QQi", d.buf(x), d.buf(out), n))
  np.testing.assert_allclose(out, [x[i*256:(i+1)*256].sum() for i in range(4)], rtol=1e-6)

def test_nvcc_tiled_matmul_2d(nv):
  d = Dev(); M, N, K = 13, 11, 19
  A, B, C = np.random.rand(M, K).astype(np.float32), np.random.rand(K, N).astype(np.float32), np.zeros((M, N), np.float32)
  nv.launch("matmul", d.mem, ((N + 7) // 8, (M + 7) // 8, 1), (8, 8, 1), struct.pack("<QQQiii", d.buf(A), d.buf(B), d.buf(C), M, N, K))
  np.testing.assert_allclose(C, A @ B, rtol=1e-5)

def test_nvcc_dynamic_shared(nv):
  d = Dev(); a = np.arange(96, dtype=np.int32); o = np.zeros(96, np.int32)
  nv.launch("dynsmem", d.mem, (3, 1, 1), (32, 1, 1), struct.pack("<QQ", d.buf(a), d.buf(o)), shared_bytes=32 * 4)
  np.testing.assert_array_equal(o, a.reshape(3, 32)[:, ::-1].reshape(-1))

def test_nvcc_half_and_integer_ops(nv):
  d = Dev(); n = 50
  h = np.random.randn(n).astype(np.float16); of, oh = np.zeros(n, np.float32), np.zeros(n, np.float16)
  nv.launch("half_cvt", d.mem, (1, 1, 1), (64, 1, 1), struct.pack("<QQQi", d.buf(h), d.buf(of), d.buf(oh), n))
  np.testing.assert_array_equal(of, h.astype(np.float32)); np.testing.assert_array_equal(oh, (h.astype(np.float32) * 3).astype(np.float16))
  rng = np.random.default_rng(3)
  a = rng.integers(-2**31, 2**31, 64).astype(np.int32); b = rng.integers(1, 99, 64).astype(np.int32) * rng.choice([-1, 1], 64).astype(np.int32)
  io, uo = np.zeros(256, np.int32), np.zeros(128, np.uint32)
  nv.launch("iops", d.mem, (1, 1, 1), (64, 1, 1), struct.pack("<QQQQi", d.buf(a), d.buf(b), d.buf(io), d.buf(uo), 64))
  q = np.array([int(abs(int(x)) // abs(int(y))) * (1 if (x < 0) == (y < 0) else -1) for x, y in zip(a, b)], np.int64)
  np.testing.assert_array_equal(io[0::4], q); np.testing.assert_array_equal(io[1::4], a - q * b)
  np.testing.assert_array_equal(io[2::4], a >> 3); np.testing.assert_array_equal(io[3::4], (a.astype(np.int64) << (b & 31)).astype(np.uint64).astype(np.uint32).view(np.int32))
  np.testing.assert_array_equal(uo[0::2], a.view(np.uint32) // b.view(np.uint32)); np.testing.assert_array_equal(uo[1::2], a.view(np.uint32) >> 5)

def test_nvcc_minmax_nan(nv):
  d = Dev(); a = np.array([1, np.nan, np.nan, 4] * 8, np.float32); b = np.array([np.nan, 2, np.nan, -4] * 8, np.float32)
  o = np.zeros(64, np.float32)
  nv.launch("minmax", d.mem, (1, 1, 1), (32, 1, 1), struct.pack("<QQQ", d.buf(a), d.buf(b), d.buf(o)))
  np.testing.assert_array_equal(o[:32], np.fmin(a, b)); np.testing.assert_array_equal(o[32:], np.fmax(a, b))

def test_nvcc_branchy_divergence(nv):
  d = Dev(); n = 96; a = (np.random.rand(n).astype(np.float32) + 0.1); o = np.zeros(n, np.float32)
  nv.launch("branchy", d.mem, (1, 1, 1), (n, 1, 1), struct.pack("<QQi", d.buf(a), d.buf(o), n))
  want = []
  for i, v in enumerate(a):
    v = np.float32(v)
    if i % 3 == 0:
      for _ in range(i): v = np.float32(np.float32(v * np.float32(0.5)) + np.float32(1))
    elif i % 3 == 1: v = -v
    else:
      while v < 100: v = np.float32(v * 2)
    want.append(v)
  np.testing.assert_allclose(o, np.array(want, np.float32), rtol=1e-6)

def test_nvcc_v4(nv):
  d = Dev(); a = np.random.rand(32, 4).astype(np.float32); o = np.zeros((32, 4), np.float32)
  nv.launch("v4", d.mem, (1, 1, 1), (32, 1, 1), struct.pack("<QQ", d.buf(a), d.buf(o)))
  np.testing.assert_array_equal(o, a[:, ::-1])

def test_nvcc_transcendentals_incl_large_sin(nv):
  """sinf of large arguments takes nvcc's Payne-Hanek path: local memory, a module .global table, 64-bit math."""
  d = Dev(); x = np.concatenate([np.linspace(-10, 10, 48), [1e5, -3e6, 123456.7, 1e30, 0, -0.0, 7e-39, 50, 80, -90, 88, 1e-3, 2, 3, 4, 5]]).astype(np.float32)
  o = np.zeros(3 * x.size, np.float32)
  nv.launch("trig", d.mem, (1, 1, 1), (x.size, 1, 1), struct.pack("<QQ", d.buf(x), d.buf(o)))
  x64 = x.astype(np.float64)
  np.testing.assert_allclose(o[:x.size], np.sin(x64), atol=2e-7, rtol=1e-6)
  with np.errstate(over="ignore"):
    np.testing.assert_allclose(o[x.size:2*x.size], np.exp(x64).astype(np.float32), rtol=3e-7)
  np.testing.assert_allclose(o[2*x.size:], (np.sqrt(np.abs(x64)) / (1 + x64 * x64)).astype(np.float32), rtol=3e-7, atol=1e-38)

def test_nvcc_atomics(nv):
  d = Dev(); f = np.zeros(1, np.float32); u = np.zeros(2, np.uint32)
  nv.launch("atomics", d.mem, (3, 1, 1), (100, 1, 1), struct.pack("<QQ", d.buf(f), d.buf(u)))
  assert f[0] == 300 and u[0] == 3 * sum(range(100)) and u[1] == max(t * 7 % 100 for t in range(100))

def test_nvcc_shfl_warp_sum(nv):
  d = Dev(); a = np.random.rand(96).astype(np.float32); orig = a.copy()
  nv.launch("shfl", d.mem, (1, 1, 1), (96, 1, 1), struct.pack("<Q", d.buf(a)))
  np.testing.assert_allclose(a[::32], orig.reshape(3, 32).sum(1), rtol=1e-6)

def test_nvcc_double_and_int64(nv):
  d = Dev(); a = np.array([1.0, -7.5, 1e10, 3.3], np.float64); o = np.zeros(4); l = np.zeros(4, np.int64)
  nv.launch("dbl", d.mem, (1, 1, 1), (4, 1, 1), struct.pack("<QQQ", d.buf(a), d.buf(o), d.buf(l)))
  np.testing.assert_array_equal(o, a / 3.0)
  assert l.tolist() == [_wrap(int(v) * 12345678901, "s64") for v in a]

# *** the real assembler agrees our hand-written PTX is valid ***
HAND = {"add": ADD, "diverge": DIVERGE, "barrier": BARRIER, "unary": _unary_src(), "special2d": SPECIAL2D, "pack": PACK,
        "setp": _binop_kernel("sp", "setp.equ.f32 %p1, %a, %b; selp.u32 %d, 1, 0, %p1;", "f32", "f32", "u32", ".reg .f32 %a, %b; .reg .b32 %d; .reg .pred %p1;"),
        "intops": _binop_kernel("io", "div.s64 %d, %a, %b; mul.hi.u64 %d, %d, %a; shr.s64 %d, %d, 3;", "s64", "s64", "s64", ".reg .b64 %a, %b, %d;")}

def test_hand_written_ptx_assembles():
  need_tool("ptxas")
  with tempfile.TemporaryDirectory() as td:
    for name, src in HAND.items():
      p = pathlib.Path(td) / f"{name}.ptx"; p.write_text(src)
      r = subprocess.run(["ptxas", "-arch=sm_90", str(p), "-o", str(p.with_suffix(".cubin"))], capture_output=True, text=True)
      assert r.returncode == 0, f"{name}: {r.stderr}"
      PTXModule(src)   # and we parse it
