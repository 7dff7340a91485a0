"""The PTX renderer: a linearized kernel becomes one `.entry` of NVIDIA PTX for sm_80, sm_89 or sm_90.

ABI: `.entry name(.param .u64 data0, .param .u64 data1, ...)`: one global pointer per buffer, outputs first.
Output loops become threads as compiler/gpudims.py plans them (a GpuPlan: which loops are x, y and z, the block, the
grouped reductions); this prints the plan: %ctaid/%tid reads, div/rem for merged loops, a guarded branch to the exit
for threads past the end of an axis. Reduce loops stay loops. Index math is 32-bit; addresses are 64-bit
(cvta.to.global + mul.wide). In a grouped reduction each lane of a block runs a strided share of the loop and the
partial accumulators are tree-combined in shared memory between bar.syncs; lane 0 stores.
Division, reciprocal and sqrt are inline fma-refined approximations (correctly rounded in the normal range)
rather than div.rn/sqrt.rn, which ptxas turns into subroutine calls; float32 sin/cos/log2 arrive as fma arithmetic
(compiler/transcendental.py sincos_f32/log2_f32, a target rewrite); a SIN left here (|x| past SIN_F32_MAX) reduces its
argument modulo 2*pi before sin.approx; float64 exp2/log2/sin go through float32 (PTX has no f64 approximations).

Register model, one virtual register per value: bool -> .pred, ints up to 32 bits -> .b32 kept sign/zero
extended from their width (renormalised after every op that can overflow it), 64-bit ints -> .b64, float16,
bfloat16 and float32 -> .f32 (halves are rounded back to their precision after every op, which equals native
half arithmetic for + - * / sqrt), float64 -> .f64. Memory uses the dtype's own width (u8 for bool).
Vector values (compiler/opt/gpu.py upcasts an output loop into lanes, compiler/vectorize.py makes them vectors) are one
register per lane: ALU ops, casts and accumulators run lane by lane, VECTORIZE and GEP only rename registers. A vector
LOAD/STORE is ld/st.global.v4/.v2 where its alignment is proven (vector_chunk: the buffer base is aligned, see
BUFFER_ALIGNMENT, and the index is provably a multiple of the width), else one scalar access per lane.
Tensor cores (compiler/opt/tc.py): a WMMA is one mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.f32 per lane, its
half fragments packed two per .b32 register (straight from the loaded 16-bit registers); such kernels never use grouped
reductions, since the 32 lanes of a warp must stay one tile.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.lower import lower
>>> from compiler.dtypes import dtypes
>>> from compiler.uop import Ops
>>> x = LazyBuffer.empty((1000,), dtypes.float32, "CPU"); x.buffer = object()
>>> src, dims = render_ptx(lower(create_schedule([x.alu(Ops.ADD, x)])[0].ast, "E_1000"), "sm_90")
>>> dims
Launch(global_size=(8, 1, 1), local_size=(128, 1, 1), threads=1)
>>> src.splitlines()[1], "add.rn.f32" in src
('.target sm_90', True)
"""
from __future__ import annotations
import math, struct
from compiler.dtypes import DType, dtypes
from compiler.uop import UOp, Ops, simplify
from compiler.lower import LoweredKernel
from compiler.linearize import linearize
from compiler.gpudims import GpuPlan, plan_launch
from compiler.launch import Launch
from compiler.target import Target

# PTX ISA version per target: the oldest that knows the arch (ptxas 12.x/13.x and nvJitLink accept all of them)
PTX_ISA = {"sm_80": "7.0", "sm_86": "7.1", "sm_87": "7.4", "sm_89": "7.8", "sm_90": "7.8", "sm_90a": "8.0", "sm_100": "8.6", "sm_120": "8.7"}   # the first PTX ISA that knows each (ptxas 13)
# The device property vector loads/stores rely on: every buffer argument points at the start of an allocation aligned to
# at least this many bytes (PTXEMU aligns to 256, the NV device to 4 KiB pages; cudaMalloc guarantees 256). A device
# whose allocator guarantees less passes its `buffer_alignment` to render_ptx. Buffers are never passed at an offset.
BUFFER_ALIGNMENT = 16

def _kind(dt: DType) -> str:
  """Register class holding a value of dtype `dt`."""
  s = dt.scalar
  if s is dtypes.bool: return "p"
  if s in (dtypes.float16, dtypes.bfloat16, dtypes.float32): return "f"
  if s is dtypes.float64: return "fd"
  if s in (dtypes.int64, dtypes.uint64): return "rd"
  return "r"

REG_DECL = {"p": ".pred", "r": ".b32", "rd": ".b64", "f": ".f32", "fd": ".f64", "h": ".b16"}

def _t(dt: DType) -> str:
  """PTX arithmetic type of the register holding `dt` (ints are computed at 32 or 64 bits)."""
  k = _kind(dt)
  if k == "f": return "f32"
  if k == "fd": return "f64"
  if k == "rd": return "u64" if dt.is_unsigned else "s64"
  return "u32" if dt.is_unsigned else "s32"

def _b(dt: DType) -> str:
  """Untyped bit-size of the register holding `dt` (for mov/selp)."""
  return {"r": "b32", "rd": "b64", "f": "f32", "fd": "f64", "p": "pred"}[_kind(dt)]

# memory type of each dtype (what ld/st move); halves move as b16 and are converted separately
MEM_T = {dtypes.bool: "u8", dtypes.int8: "s8", dtypes.uint8: "u8", dtypes.int16: "s16", dtypes.uint16: "u16",
         dtypes.int32: "s32", dtypes.uint32: "u32", dtypes.int64: "s64", dtypes.uint64: "u64", dtypes.float16: "b16",
         dtypes.bfloat16: "b16", dtypes.float32: "f32", dtypes.float64: "f64", dtypes.fp8e4m3: "u8", dtypes.fp8e5m2: "u8"}

def _round_half(v: float, dt: DType) -> float:
  """v rounded to float16/bfloat16 (for constants)."""
  if dt is dtypes.float16:
    import numpy as np
    return float(np.float16(v))
  if dt is dtypes.bfloat16:   # round-to-nearest-even on the f32 bits
    if math.isnan(v) or math.isinf(v): return v
    b = struct.unpack("<I", struct.pack("<f", v))[0]
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return struct.unpack("<f", struct.pack("<I", b & 0xFFFFFFFF))[0]
  return v

def imm(v, dt: DType) -> str:
  """A constant as a PTX immediate for the register class of `dt` (floats as exact bit patterns)."""
  k = _kind(dt)
  if k == "f":
    v = _round_half(float(v), dt.scalar)
    try: bits = struct.unpack("<I", struct.pack("<f", v))[0]
    except OverflowError: bits = struct.unpack("<I", struct.pack("<f", math.copysign(math.inf, v)))[0]
    return f"0f{bits:08X}"
  if k == "fd": return f"0d{struct.unpack('<Q', struct.pack('<d', float(v)))[0]:016X}"
  if k == "p": return "1" if v else "0"
  bits = 64 if k == "rd" else 32
  return f"0x{int(v) % (1 << bits):X}"

# 2*pi split for Cody-Waite range reduction: C1 has few mantissa bits so k*C1 is exact for |k| < 2^16
_TWO_PI = 6.283185307179586476925286766559
_C1 = 6.28125
_C2 = struct.unpack("<f", struct.pack("<f", _TWO_PI - _C1))[0]
_C3 = struct.unpack("<f", struct.pack("<f", _TWO_PI - _C1 - _C2))[0]

def vector_chunk(idx: UOp, dt: DType, w: int, buffer_alignment: int = BUFFER_ALIGNMENT) -> int:
  """Lanes per ld/st instruction for a w-lane access of `dt` at element index `idx` of a buffer: the widest c in (4, 2)
  whose access (c * itemsize bytes, at most 16: the widest PTX vector) is provably aligned, i.e. the buffer base is
  aligned to c * itemsize (`buffer_alignment`, a device property) and idx is a multiple of c for every value its ranges
  take (the simplifier folds idx % c to 0); else 1: the lanes are moved one by one.

  >>> from compiler.uop import UOp, Ops
  >>> r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 64),), (0, "global"))
  >>> vector_chunk(r * 4, dtypes.float32, 4), vector_chunk(r * 4 + 2, dtypes.float32, 4), vector_chunk(r * 4 + 1, dtypes.float32, 4)
  (4, 2, 1)
  >>> vector_chunk(r * 4, dtypes.float64, 4), vector_chunk(r * 4, dtypes.float32, 4, buffer_alignment=8)
  (2, 2)
  """
  for c in (4, 2):
    nbytes = c * dt.scalar.itemsize
    if w % c == 0 and nbytes <= 16 and buffer_alignment % nbytes == 0:
      if (m := simplify(idx % c)).op is Ops.CONST and m.arg == 0: return c
  return 1

class _Renderer:
  def __init__(self, k: LoweredKernel, arch: str, plan: GpuPlan, buffer_alignment: int = BUFFER_ALIGNMENT):
    if arch not in PTX_ISA: raise ValueError(f"render_ptx: unsupported arch {arch!r}; known: {', '.join(PTX_ISA)}")
    self.k, self.arch, self.align, self.plan = k, arch, buffer_alignment, plan
    self.strided = plan.grouped   # reduce loops whose iterations the lanes of a block share
    self.lines: list[str] = []
    self.counts: dict[str, int] = {}
    self.names: dict[UOp, str | list[str]] = {}   # a register per value; a list of one per lane for vectors
    self.labels = 0
    self.addr_scopes: list[dict] = [{}]   # (buf, idx, itemsize) -> address register, per open loop
    self.raw_half: dict[str, str] = {}   # f32 register of a loaded half -> the .b16 register it was loaded into

  def reg(self, kind: str) -> str:
    n = self.counts.get(kind, 0) + 1
    self.counts[kind] = n
    return f"%{kind}{n}"
  def emit(self, s: str) -> None: self.lines.append(f"  {s};")
  def label(self, prefix: str) -> str:
    self.labels += 1
    return f"$L{prefix}{self.labels}"

  # *** value plumbing ***
  def at_lane(self, u: UOp, i: int) -> str:
    """The register of lane i of u (a scalar is the same in every lane)."""
    n = self.names[u]
    return n[i] if isinstance(n, list) else n
  def normalize(self, r: str, dt: DType) -> str:
    """Re-extend a 32-bit register holding an 8/16-bit int from its width (after ops that may overflow it)."""
    s = dt.scalar
    if s is dtypes.int8: self.emit(f"cvt.s32.s8 {r}, {r}")
    elif s is dtypes.int16: self.emit(f"cvt.s32.s16 {r}, {r}")
    elif s is dtypes.uint8: self.emit(f"and.b32 {r}, {r}, 255")
    elif s is dtypes.uint16: self.emit(f"and.b32 {r}, {r}, 65535")
    return r
  def round_half(self, r: str, dt: DType) -> str:
    """Round an f32 register holding a float16/bfloat16 value back to that precision."""
    s = dt.scalar
    if s not in (dtypes.float16, dtypes.bfloat16): return r
    h = self.reg("h")
    self.emit(f"cvt.rn.{'f16' if s is dtypes.float16 else 'bf16'}.f32 {h}, {r}")
    return self.half_to_f32(h, s, r)
  def half_to_f32(self, h: str, s: DType, out: str | None = None) -> str:
    out = out or self.reg("f")
    if s is dtypes.float16: self.emit(f"cvt.f32.f16 {out}, {h}")
    else:   # bfloat16 is the top half of a float32
      t = self.reg("r")
      self.emit(f"cvt.u32.u16 {t}, {h}"); self.emit(f"shl.b32 {t}, {t}, 16"); self.emit(f"mov.b32 {out}, {t}")
    return out
  def const(self, v, dt: DType) -> str:
    r = self.reg(_kind(dt))
    if dt.scalar is dtypes.bool: self.emit(f"setp.ne.u32 {r}, {self.const(int(bool(v)), dtypes.uint32)}, 0")
    else: self.emit(f"mov.{_b(dt)} {r}, {imm(v, dt)}")
    return r

  def address(self, buf: UOp, idx: UOp, size: int) -> str:
    key = (buf, idx, size)
    for sc in reversed(self.addr_scopes):
      if (a := sc.get(key)) is not None: return a
    off, a = self.reg("rd"), self.reg("rd")
    i = self.names[idx]
    if _kind(idx.dtype) == "rd": self.emit(f"mul.lo.s64 {off}, {i}, {size}")
    elif size == 1: self.emit(f"cvt.{'u64.u32' if idx.dtype.is_unsigned else 's64.s32'} {off}, {i}")
    else: self.emit(f"mul.wide.{'u32' if idx.dtype.is_unsigned else 's32'} {off}, {i}, {size}")
    self.emit(f"add.s64 {a}, {self.names[buf]}, {off}")
    self.addr_scopes[-1][key] = a
    return a

  # *** memory: scalar accesses, and vector ones (v2/v4) where the alignment is proven ***
  def load(self, u: UOp) -> str | list[str]:
    buf, idx = u.src[0], u.src[1]
    dt, w = u.dtype.scalar, u.dtype.count
    addr = self.address(buf, idx, dt.itemsize)
    gate = f"@{self.names[u.src[2]]} " if len(u.src) == 3 else ""
    mt = MEM_T[dt]
    # bool and halves land in b32/b16 registers and are converted after the load
    raw = "r" if dt is dtypes.bool else "h" if dt in (dtypes.float16, dtypes.bfloat16) else _kind(dt)
    regs = [self.reg(raw) for _ in range(w)]
    if gate:
      for r in regs: self.emit(f"mov.{REG_DECL[raw][1:]} {r}, {imm(0, dt) if raw == _kind(dt) else 0}")
    c = vector_chunk(idx, dt, w, self.align) if w > 1 else 1
    for j in range(0, w, c):
      at = f"[{addr}+{j * dt.itemsize}]" if j else f"[{addr}]"
      dst = regs[j] if c == 1 else "{" + ", ".join(regs[j:j + c]) + "}"
      self.lines.append(f"  {gate}ld.global{'' if c == 1 else f'.v{c}'}.{mt} {dst}, {at};")
    if dt is dtypes.bool:
      out = [self.reg("p") for _ in regs]
      for p, r in zip(out, regs): self.emit(f"setp.ne.u32 {p}, {r}, 0")
    elif raw == "h":
      out = [self.half_to_f32(h, dt) for h in regs]
      self.raw_half.update(zip(out, regs))
    else: out = regs
    return out if w > 1 else out[0]

  def store(self, u: UOp) -> None:
    buf, idx, val = u.src
    dt, w = val.dtype.scalar, val.dtype.count
    addr = self.address(buf, idx, dt.itemsize)
    vs = [self.at_lane(val, i) for i in range(w)]
    if dt is dtypes.bool:
      vs = [self.reg("r") for _ in vs]
      for t, v in zip(vs, [self.at_lane(val, i) for i in range(w)]): self.emit(f"selp.u32 {t}, 1, 0, {v}")
    elif dt in (dtypes.float16, dtypes.bfloat16):
      hs = [self.reg("h") for _ in vs]
      for h, v in zip(hs, vs): self.emit(f"cvt.rn.{'f16' if dt is dtypes.float16 else 'bf16'}.f32 {h}, {v}")
      vs = hs
    c = vector_chunk(idx, dt, w, self.align) if w > 1 else 1
    pred = f"@{self.lead} " if self.strided else ""
    for j in range(0, w, c):
      at = f"[{addr}+{j * dt.itemsize}]" if j else f"[{addr}]"
      src = vs[j] if c == 1 else "{" + ", ".join(vs[j:j + c]) + "}"
      self.lines.append(f"  {pred}st.global{'' if c == 1 else f'.v{c}'}.{MEM_T[dt]} {at}, {src};")

  # *** casts ***
  def cast(self, s: str, sd: DType, dd: DType) -> str:
    sd, dd = sd.scalar, dd.scalar
    sk, dk = _kind(sd), _kind(dd)
    if sd is dd: return s
    if sd in dtypes.fp8s or dd in dtypes.fp8s: return self.cast_fp8(s, sd, dd)
    if dd is dtypes.bool:
      p = self.reg("p")
      zero = imm(0, sd)
      self.emit(f"setp.{'neu.' + _t(sd) if sk in ('f', 'fd') else 'ne.' + _b(sd)} {p}, {s}, {zero}")
      return p
    if sd is dtypes.bool:
      d = self.reg(dk); self.emit(f"selp.{_b(dd)} {d}, {imm(1, dd)}, {imm(0, dd)}, {s}"); return d
    d = self.reg(dk)
    if sk in ("r", "rd") and dk in ("r", "rd"):
      if sk == dk: self.emit(f"mov.{_b(dd)} {d}, {s}")
      elif dk == "rd": self.emit(f"cvt.{'u64.u32' if sd.is_unsigned else 's64.s32'} {d}, {s}")
      else: self.emit(f"cvt.u32.u64 {d}, {s}")
      return self.normalize(d, dd)
    if sk in ("r", "rd"):   # int -> float
      if dd is dtypes.float16:   # straight to half: converting through f32 would round twice
        h = self.reg("h"); self.emit(f"cvt.rn.f16.{_t(sd)} {h}, {s}"); return self.half_to_f32(h, dd, d)
      self.emit(f"cvt.rn.{_t(dd)}.{_t(sd)} {d}, {s}")
      return self.round_half(d, dd)
    if dk in ("r", "rd"):   # float -> int, truncating like C (out of range is undefined there too)
      if dd is dtypes.uint32:
        t = self.reg("rd"); self.emit(f"cvt.rzi.s64.{_t(sd)} {t}, {s}"); self.emit(f"cvt.u32.u64 {d}, {t}"); return d
      self.emit(f"cvt.rzi.{_t(dd) if dk == 'rd' else 's32'}.{_t(sd)} {d}, {s}")
      return self.normalize(d, dd)
    # float -> float
    if dd is dtypes.float16 and sk == "fd":
      h = self.reg("h"); self.emit(f"cvt.rn.f16.f64 {h}, {s}"); return self.half_to_f32(h, dd, d)
    if sk == dk: self.emit(f"mov.f32 {d}, {s}")
    elif dk == "fd": self.emit(f"cvt.f64.f32 {d}, {s}")
    else: self.emit(f"cvt.rn.f32.f64 {d}, {s}")
    return self.round_half(d, dd)

  def cast_fp8(self, s: str, sd: DType, dd: DType) -> str:
    """float32 <-> fp8 (a byte in a .b32 register) with sm_89's conversions (compiler/fp8.py leaves only these two
    casts for PTX targets that have them). To fp8: cvt.rn.satfinite gives nearest-even and saturates to the largest
    finite; torch's rounding differs where e5m2 overflows (|x| >= 61440 and inf: inf) and in the NaN (sign|0x7f), which
    PTX leaves unspecified: both set here by selp."""
    fmt = {dtypes.fp8e4m3: "e4m3x2", dtypes.fp8e5m2: "e5m2x2"}
    if sd in dtypes.fp8s:
      if dd is not dtypes.float32: raise NotImplementedError(f"render_ptx: cast {sd} -> {dd} (fp8 converts to float32 only)")
      h, w, lo, f = self.reg("h"), self.reg("r"), self.reg("h"), self.reg("f")
      self.emit(f"cvt.u16.u32 {h}, {s}"); self.emit(f"cvt.rn.f16x2.{fmt[sd]} {w}, {h}")   # the byte -> the low f16 of w
      self.emit(f"cvt.u16.u32 {lo}, {w}"); self.emit(f"cvt.f32.f16 {f}, {lo}")
      return f
    if sd is not dtypes.float32: raise NotImplementedError(f"render_ptx: cast {sd} -> {dd} (fp8 converts from float32 only)")
    h, r, sign = self.reg("h"), self.reg("r"), self.reg("r")
    self.emit(f"cvt.rn.satfinite.{fmt[dd]}.f32 {h}, {s}, {s}"); self.emit(f"cvt.u32.u16 {r}, {h}"); self.emit(f"and.b32 {r}, {r}, 255")
    self.emit(f"mov.b32 {sign}, {s}"); self.emit(f"shr.u32 {sign}, {sign}, 24"); self.emit(f"and.b32 {sign}, {sign}, 128")
    fixes = [("setp.nan.f32 {p}, {s}, {s}", 0x7f)]
    if dd is dtypes.fp8e5m2:
      a = self.reg("f"); self.emit(f"abs.f32 {a}, {s}")
      fixes.insert(0, (f"setp.ge.f32 {{p}}, {a}, {imm(61440.0, dtypes.float32)}", 0x7c))   # (rounds up past 57344: inf)
    for test, bits in fixes:
      p, v = self.reg("p"), self.reg("r")
      self.emit(test.format(p=p, s=s)); self.emit(f"or.b32 {v}, {sign}, {bits}"); self.emit(f"selp.b32 {r}, {v}, {r}, {p}")
    return r

  def bitcast(self, s: str, sd: DType, dd: DType) -> str:
    sd, dd = sd.scalar, dd.scalar
    if sd.itemsize != dd.itemsize: raise NotImplementedError(f"render_ptx: bitcast {sd} -> {dd} changes the size")
    sk, dk = _kind(sd), _kind(dd)
    if sd.itemsize == 2 and (sk == "f" or dk == "f"):
      h = self.reg("h")
      if sk == "f": self.emit(f"cvt.rn.{'f16' if sd is dtypes.float16 else 'bf16'}.f32 {h}, {s}")
      else: self.emit(f"cvt.u16.u32 {h}, {s}")
      if dk == "f": return self.half_to_f32(h, dd)
      d = self.reg("r"); self.emit(f"cvt.{'s32.s16' if dd is dtypes.int16 else 'u32.u16'} {d}, {h}"); return d
    if dd is dtypes.bool or sd is dtypes.bool: return self.cast(s, sd, dd)
    d = self.reg(dk)
    self.emit(f"mov.b{8 * max(4, dd.itemsize)} {d}, {s}")
    return self.normalize(d, dd) if dk == "r" else d

  # *** ALU ***
  def alu(self, u: UOp, a: list[str]) -> str:
    """u's op on the registers `a` (one lane of a vector op)."""
    op, dt = u.op, u.dtype.scalar
    sdt = u.src[0].dtype.scalar
    k = _kind(dt)
    if dt is dtypes.bool and sdt is dtypes.bool: return self.bool_alu(op, a)
    if op in (Ops.CMPLT, Ops.CMPNE):
      p = self.reg("p")
      if _kind(sdt) in ("f", "fd"): cmp = "lt" if op is Ops.CMPLT else "neu"   # C: NaN < x false, NaN != x true
      else: cmp = "lt" if op is Ops.CMPLT else "ne"
      self.emit(f"setp.{cmp}.{_t(sdt)} {p}, {a[0]}, {a[1]}")
      return p
    if op is Ops.WHERE:
      if dt is dtypes.bool:
        return self.bool_alu(Ops.OR, [self.bool_alu(Ops.AND, [a[0], a[1]]), self.bool_alu(Ops.AND, [self.bool_alu(Ops.NEG, [a[0]]), a[2]])])
      d = self.reg(k); self.emit(f"selp.{_b(dt)} {d}, {a[1]}, {a[2]}, {a[0]}"); return d
    if dt is dtypes.bool:   # bool result of int/float operands (AND/OR/XOR of non-bools): C's `!= 0`
      t = self.alu_num(op, sdt, _kind(sdt), a)
      return self.cast(t, sdt, dtypes.bool)
    return self.alu_num(op, dt, k, a)

  def bool_alu(self, op: Ops, a: list[str]) -> str:
    d = self.reg("p")
    if op is Ops.NEG: self.emit(f"not.pred {d}, {a[0]}")
    elif op in (Ops.AND, Ops.MUL): self.emit(f"and.pred {d}, {a[0]}, {a[1]}")
    elif op in (Ops.OR, Ops.ADD, Ops.MAX): self.emit(f"or.pred {d}, {a[0]}, {a[1]}")
    elif op in (Ops.XOR, Ops.CMPNE): self.emit(f"xor.pred {d}, {a[0]}, {a[1]}")
    elif op is Ops.CMPLT:   # a < b  <=>  !a & b
      n = self.reg("p"); self.emit(f"not.pred {n}, {a[0]}"); self.emit(f"and.pred {d}, {n}, {a[1]}")
    elif op is Ops.WHERE:
      return self.bool_alu(Ops.OR, [self.bool_alu(Ops.AND, [a[0], a[1]]), self.bool_alu(Ops.AND, [self.bool_alu(Ops.NEG, [a[0]]), a[2]])])
    else: raise NotImplementedError(f"render_ptx: {op} on bool")
    return d

  def alu_num(self, op: Ops, dt: DType, k: str, a: list[str]) -> str:
    t, isf = _t(dt), k in ("f", "fd")
    d = self.reg(k)
    if isf:
      if op in (Ops.EXP2, Ops.LOG2, Ops.SIN) and k == "fd":   # no f64 approximations in PTX: go through f32
        f = self.reg("f"); self.emit(f"cvt.rn.f32.f64 {f}, {a[0]}")
        r = self.alu_num(op, dtypes.float32, "f", [f])
        self.emit(f"cvt.f64.f32 {d}, {r}"); return d
      if op is Ops.NEG: self.emit(f"neg.{t} {d}, {a[0]}"); return d
      if op is Ops.TRUNC: self.emit(f"cvt.rzi.{t}.{t} {d}, {a[0]}"); return d
      if op is Ops.MAX:   # (a > b || a != a) ? a : b: a NaN wins, as on the CPU (max.f32 would drop it)
        p = self.reg("p"); self.emit(f"setp.gt.{t} {p}, {a[0]}, {a[1]}")
        q = self.reg("p"); self.emit(f"setp.nan.{t} {q}, {a[0]}, {a[0]}"); self.emit(f"or.pred {p}, {p}, {q}")
        self.emit(f"selp.{t} {d}, {a[0]}, {a[1]}, {p}"); return d
      if op is Ops.FDIV: self.fdiv(d, a[0], a[1], t)
      elif op is Ops.RECIP: self.recip(d, a[0], t)
      elif op is Ops.SQRT: self.sqrt(d, a[0], t)
      elif op is Ops.EXP2: self.emit(f"ex2.approx.f32 {d}, {a[0]}")
      elif op is Ops.LOG2: self.emit(f"lg2.approx.f32 {d}, {a[0]}")
      elif op is Ops.SIN: self.sin_f32(d, a[0])
      else:
        ins = {Ops.ADD: "add.rn", Ops.MUL: "mul.rn", Ops.MULACC: "fma.rn"}.get(op)
        if ins is None: raise NotImplementedError(f"render_ptx: {op} on {dt}")
        self.emit(f"{ins}.{t} {d}, {', '.join(a)}")
      return self.round_half(d, dt)
    if op is Ops.NEG: self.emit(f"neg.{t.replace('u', 's')} {d}, {a[0]}")   # neg has only signed types
    elif op is Ops.MAX: self.emit(f"max.{t} {d}, {a[0]}, {a[1]}")
    elif op in (Ops.SHL, Ops.SHR):
      sh = a[1]
      if k == "rd":   # shift amounts are always .u32
        sh = self.reg("r"); self.emit(f"cvt.u32.u64 {sh}, {a[1]}")
      bt = f"b{32 if k == 'r' else 64}"
      self.emit(f"{'shl.' + bt if op is Ops.SHL else 'shr.' + t} {d}, {a[0]}, {sh}")
    elif op in (Ops.IDIV, Ops.MOD) and k == "rd": self.divmod64(d, a[0], a[1], dt.is_unsigned, op is Ops.MOD)
    else:
      ins = {Ops.ADD: "add", Ops.MUL: "mul.lo", Ops.IDIV: "div", Ops.MOD: "rem", Ops.MULACC: "mad.lo"}.get(op)
      bit = {Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor"}.get(op)
      if ins is not None: self.emit(f"{ins}.{t} {d}, {', '.join(a)}")
      elif bit is not None: self.emit(f"{bit}.b{32 if k == 'r' else 64} {d}, {a[0]}, {a[1]}")
      else: raise NotImplementedError(f"render_ptx: {op} on {dt}")
    return self.normalize(d, dt) if op not in (Ops.MAX, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHR) else d

  # ptxas implements div.rn/rcp.rn/sqrt.rn (and 64-bit integer division) as calls to slow-path subroutines; these
  # inline sequences refine the hardware approximations with fma instead (correctly rounded in the normal range,
  # the classic Markstein/CUDA fast path), and keep the code call-free.
  def _keep_if_nan(self, d: str, refined: str, rough: str, t: str) -> None:
    """d = rough where the refinement produced NaN (zero, infinite or NaN operands), else refined."""
    p = self.reg("p")
    self.emit(f"setp.nan.{t} {p}, {refined}, {refined}"); self.emit(f"selp.{t} {d}, {rough}, {refined}, {p}")

  def recip(self, d: str, b: str, t: str, keep: bool = True) -> str:
    k = "f" if t == "f32" else "fd"
    y, e = self.reg(k), self.reg(k)
    one = imm(1.0, dtypes.float32 if t == "f32" else dtypes.float64)
    self.emit(f"rcp.approx.{'f32' if t == 'f32' else 'ftz.f64'} {y}, {b}")
    for _ in range(1 if t == "f32" else 3):   # each Newton step doubles the good bits (f64 starts from ~20)
      y2, nb = self.reg(k), self.reg(k)
      self.emit(f"neg.{t} {nb}, {b}"); self.emit(f"fma.rn.{t} {e}, {nb}, {y}, {one}"); self.emit(f"fma.rn.{t} {y2}, {y}, {e}, {y}")
      self._keep_if_nan(y2, y2, y, t); y = y2
    if keep: self.emit(f"mov.{t} {d}, {y}")
    return y

  def fdiv(self, d: str, a: str, b: str, t: str) -> None:
    k = "f" if t == "f32" else "fd"
    y = self.recip(d, b, t, keep=False) if t == "f64" else self.reg(k)
    if t == "f32": self.emit(f"rcp.approx.f32 {y}, {b}")
    q, nq, r, q2 = self.reg(k), self.reg(k), self.reg(k), self.reg(k)
    self.emit(f"mul.rn.{t} {q}, {a}, {y}")
    self.emit(f"neg.{t} {nq}, {q}"); self.emit(f"fma.rn.{t} {r}, {nq}, {b}, {a}"); self.emit(f"fma.rn.{t} {q2}, {r}, {y}, {q}")
    self._keep_if_nan(d, q2, q, t)

  def sqrt(self, d: str, x: str, t: str) -> None:
    k = "f" if t == "f32" else "fd"
    dt = dtypes.float32 if t == "f32" else dtypes.float64
    # lift tiny x (sqrt scales back by the root of the lift): the residual x - s*s below is exact only while it stays
    # above the subnormal grid (f32: x >= ~2^-103); f64 also because rsqrt.approx.ftz.f64 flushes subnormal inputs
    lo, lift, back = (2.0 ** -100, 2.0 ** 64, 2.0 ** -32) if t == "f32" else (2.0 ** -960, 2.0 ** 200, 2.0 ** -100)
    xs, sc, tiny = self.reg(k), self.reg(k), self.reg("p")
    self.emit(f"setp.lt.{t} {tiny}, {x}, {imm(lo, dt)}")
    self.emit(f"mul.rn.{t} {xs}, {x}, {imm(lift, dt)}"); self.emit(f"selp.{t} {xs}, {xs}, {x}, {tiny}")
    self.emit(f"selp.{t} {sc}, {imm(back, dt)}, {imm(1.0, dt)}, {tiny}")
    x_orig, x = x, xs
    if t == "f32":   # s ~ sqrt(x), h ~ 1/(2s); one residual step
      s, h = self.reg(k), self.reg(k)
      self.emit(f"sqrt.approx.f32 {s}, {x}"); self.emit(f"rcp.approx.f32 {h}, {s}"); self.emit(f"mul.rn.f32 {h}, {h}, {imm(0.5, dt)}")
    else:   # y ~ 1/sqrt(x) refined twice (Newton: y *= 1.5 - x/2 * y^2), then s = x*y, h = y/2
      y, hx = self.reg(k), self.reg(k)   # rsqrt.approx.f64 without .ftz is a subroutine call
      self.emit(f"rsqrt.approx.ftz.f64 {y}, {x}"); self.emit(f"mul.rn.f64 {hx}, {x}, {imm(0.5, dt)}")
      for _ in range(2):
        e, y2 = self.reg(k), self.reg(k)
        self.emit(f"mul.rn.f64 {e}, {y}, {y}"); self.emit(f"mul.rn.f64 {e}, {e}, {hx}")
        self.emit(f"sub.rn.f64 {e}, {imm(1.5, dt)}, {e}"); self.emit(f"mul.rn.f64 {y2}, {y}, {e}"); y = y2
      s, h = self.reg(k), self.reg(k)
      self.emit(f"mul.rn.f64 {s}, {x}, {y}"); self.emit(f"mul.rn.f64 {h}, {y}, {imm(0.5, dt)}")
    ns, r, s2 = self.reg(k), self.reg(k), self.reg(k)
    self.emit(f"neg.{t} {ns}, {s}"); self.emit(f"fma.rn.{t} {r}, {ns}, {s}, {x}"); self.emit(f"fma.rn.{t} {s2}, {r}, {h}, {s}")
    self.emit(f"mul.rn.{t} {s2}, {s2}, {sc}"); x = x_orig
    # only 0 < x < inf takes the refined value; otherwise x (for +-0 and +inf) or NaN (negative, NaN)
    p, q, neg, sp = self.reg("p"), self.reg("p"), self.reg("p"), self.reg(k)
    self.emit(f"setp.gt.{t} {p}, {x}, {imm(0, dt)}"); self.emit(f"setp.lt.{t} {q}, {x}, {imm(math.inf, dt)}")
    self.emit(f"and.pred {p}, {p}, {q}")
    self.emit(f"setp.lt.{t} {neg}, {x}, {imm(0, dt)}"); self.emit(f"selp.{t} {sp}, {imm(math.nan, dt)}, {x}, {neg}")
    self.emit(f"selp.{t} {d}, {s2}, {sp}, {p}")

  def divmod64(self, d: str, a: str, b: str, unsigned: bool, want_rem: bool) -> None:
    """C's 64-bit a / b or a % b by shift-and-subtract on the magnitudes (64 steps, no subroutine call)."""
    n, m, q, r, i, bit, p = self.reg("rd"), self.reg("rd"), self.reg("rd"), self.reg("rd"), self.reg("r"), self.reg("rd"), self.reg("p")
    if unsigned: self.emit(f"mov.b64 {n}, {a}"); self.emit(f"mov.b64 {m}, {b}")
    else: self.emit(f"abs.s64 {n}, {a}"); self.emit(f"abs.s64 {m}, {b}")
    self.emit(f"mov.b64 {q}, 0"); self.emit(f"mov.b64 {r}, 0"); self.emit(f"mov.u32 {i}, 63")
    top = self.label("div")
    self.lines.append(f"{top}:")
    t, r2 = self.reg("rd"), self.reg("rd")
    self.emit(f"shr.b64 {bit}, {n}, {i}"); self.emit(f"and.b64 {bit}, {bit}, 1")
    self.emit(f"shl.b64 {r}, {r}, 1"); self.emit(f"or.b64 {r}, {r}, {bit}")
    self.emit(f"setp.ge.u64 {p}, {r}, {m}")
    self.emit(f"sub.s64 {r2}, {r}, {m}"); self.emit(f"selp.b64 {r}, {r2}, {r}, {p}")
    self.emit(f"selp.b64 {t}, 1, 0, {p}"); self.emit(f"shl.b64 {t}, {t}, {i}"); self.emit(f"or.b64 {q}, {q}, {t}")
    self.emit(f"sub.s32 {i}, {i}, 1"); self.emit(f"setp.ge.s32 {p}, {i}, 0"); self.emit(f"@{p} bra {top}")
    res = r if want_rem else q
    if unsigned: self.emit(f"mov.b64 {d}, {res}"); return
    # the quotient is negative when the signs differ, the remainder takes the dividend's sign
    sg, nr = self.reg("p"), self.reg("rd")
    if want_rem: self.emit(f"setp.lt.s64 {sg}, {a}, 0")
    else:
      x = self.reg("rd"); self.emit(f"xor.b64 {x}, {a}, {b}"); self.emit(f"setp.lt.s64 {sg}, {x}, 0")
    self.emit(f"neg.s64 {nr}, {res}"); self.emit(f"selp.b64 {d}, {nr}, {res}, {sg}")

  def sin_f32(self, d: str, x: str) -> None:
    """sin.approx is accurate only on [-pi, pi]: subtract the nearest multiple of 2*pi first (Cody-Waite)."""
    q, r = self.reg("f"), self.reg("f")
    self.emit(f"mul.rn.f32 {q}, {x}, {imm(1 / _TWO_PI, dtypes.float32)}")
    self.emit(f"cvt.rni.f32.f32 {q}, {q}")
    self.emit(f"fma.rn.f32 {r}, {q}, {imm(-_C1, dtypes.float32)}, {x}")
    self.emit(f"fma.rn.f32 {r}, {q}, {imm(-_C2, dtypes.float32)}, {r}")
    self.emit(f"fma.rn.f32 {r}, {q}, {imm(-_C3, dtypes.float32)}, {r}")
    self.emit(f"sin.approx.f32 {d}, {r}")

  # *** launch geometry (compiler/gpudims.py decides it; this prints it) ***
  def grid_indices(self) -> dict[UOp, str]:
    """The index prologue of the plan: each output loop of the grid -> the register holding its index. A grouped
    reduction's lanes read tid.x (lane 0 stores); a thread past the end of a guarded axis branches to the exit."""
    if self.plan.grouped:
      self.lane = self.special("%tid.x")
      self.lead = self.reg("p")
      self.emit(f"setp.eq.u32 {self.lead}, {self.lane}, 0")
    idx: dict[UOp, str] = {}
    for c, ax in zip("xyz", self.plan.axes):
      if not ax.ranges: continue
      if ax.block_id and ax.thread_id:
        i = self.reg("r")
        self.emit(f"mad.lo.s32 {i}, {self.special(f'%ctaid.{c}')}, {ax.threads}, {self.special(f'%tid.{c}')}")
      else: i = self.special(f"%ctaid.{c}" if ax.block_id else f"%tid.{c}")
      if ax.guard:
        p = self.reg("p"); self.emit(f"setp.ge.s32 {p}, {i}, {ax.extent}"); self.emit(f"@{p} bra $Lexit")
      for r, n in zip(ax.ranges[:0:-1], ax.sizes[:0:-1]):   # the innermost loop of a merged axis varies fastest
        q, m = self.reg("r"), self.reg("r")
        self.emit(f"rem.u32 {m}, {i}, {n}"); self.emit(f"div.u32 {q}, {i}, {n}")
        idx[r], i = m, q
      idx[ax.ranges[0]] = i
    return idx

  # *** grouped reductions: a block of L lanes per output, each lane a strided share, combined in shared memory ***
  def combine_lanes(self, red: UOp, acc: str, lanes: int) -> str:
    """Tree-combine the lanes' partial accumulators through shared memory; every lane gets the result."""
    dt = red.dtype.scalar
    k, st = _kind(dt), {"f": "f32", "fd": "f64", "r": "b32", "rd": "b64"}[_kind(dt)]
    base, off, a = self.reg("rd"), self.reg("rd"), self.reg("rd")
    self.emit(f"mov.u64 {base}, red_smem"); self.emit(f"mul.wide.u32 {off}, {self.lane}, 8"); self.emit(f"add.s64 {a}, {base}, {off}")
    self.emit(f"st.shared.{st} [{a}], {acc}")
    self.emit("bar.sync 0")
    s = lanes // 2
    while s >= 1:
      p, x, y = self.reg("p"), self.reg(k), self.reg(k)
      self.emit(f"setp.lt.u32 {p}, {self.lane}, {s}")
      self.emit(f"mov.{_b(dt)} {x}, {imm(0, dt)}"); self.emit(f"mov.{_b(dt)} {y}, {imm(0, dt)}")
      self.lines.append(f"  @{p} ld.shared.{st} {x}, [{a}];"); self.lines.append(f"  @{p} ld.shared.{st} {y}, [{a}+{8 * s}];")
      z = self.alu_num(red.arg, dt, k, [x, y])
      self.lines.append(f"  @{p} st.shared.{st} [{a}], {z};")
      self.emit("bar.sync 0")
      s //= 2
    res = self.reg(k)
    self.emit(f"ld.shared.{st} {res}, [{base}]")
    self.emit("bar.sync 0")   # everyone has read the result before the buffer is reused
    return res

  def lane_op(self, u: UOp, i: int) -> str:
    """Lane i of an accumulator, cast or ALU value."""
    op, a = u.op, [self.at_lane(s, i) for s in u.src]
    if op is Ops.DEFINE_ACC:   # every lane gets a register of its own, even when the initial value is shared
      r = self.reg(_kind(u.dtype)); self.emit(f"mov.{_b(u.dtype)} {r}, {a[0]}"); return r
    if op is Ops.ASSIGN: self.emit(f"mov.{_b(u.dtype)} {a[0]}, {a[1]}"); return a[0]
    if op is Ops.REDUCE: return a[0] if not self.strided else self.combine_lanes(u, a[0], self.plan.lanes)
    if op is Ops.CAST: return self.cast(a[0], u.src[0].dtype, u.dtype)
    if op is Ops.BITCAST: return self.bitcast(a[0], u.src[0].dtype, u.dtype)
    return self.alu(u, a)

  # *** tensor cores: one lane's share of a warp's mma.sync (compiler/opt/tc.py) ***
  def pack_halves(self, lo: str, hi: str, dt: DType) -> str:
    """A .b32 register holding two halves (lo in the low bits), from f32 registers holding half values."""
    hs = []
    for f in (lo, hi):
      if (h := self.raw_half.get(f)) is None:   # not straight from a load: round it back to its 16 bits
        h = self.reg("h"); self.emit(f"cvt.rn.{'f16' if dt is dtypes.float16 else 'bf16'}.f32 {h}, {f}")
      hs.append(h)
    r = self.reg("r")
    self.emit(f"mov.b32 {r}, {{{hs[0]}, {hs[1]}}}")
    return r

  def wmma(self, u: UOp) -> list[str]:
    shape, _, _ = u.arg
    a, b, c = u.src
    dt = a.dtype.scalar
    pa, pb = ([self.pack_halves(self.at_lane(x, i), self.at_lane(x, i + 1), dt) for i in range(0, x.dtype.count, 2)] for x in (a, b))
    d = [self.reg("f") for _ in range(4)]
    regs = lambda rs: "{" + ", ".join(rs) + "}"
    ab = {dtypes.float16: "f16", dtypes.bfloat16: "bf16"}[dt]
    self.emit(f"mma.sync.aligned.{shape}.row.col.f32.{ab}.{ab}.f32 {regs(d)}, {regs(pa)}, {regs(pb)}, {regs([self.at_lane(c, i) for i in range(4)])}")
    return d

  def special(self, name: str) -> str:
    r = self.reg("r"); self.emit(f"mov.u32 {r}, {name}"); return r

  def render(self, prog: list[UOp]) -> tuple[str, Launch]:
    k = self.k
    for u in prog:
      if u.op is Ops.LANE: raise NotImplementedError(f"render_ptx: kernel {k.name} still has a LANE (run compiler.vectorize first)")
    nbufs = len(k.buf_dtypes)
    bufs = {}
    for i in range(nbufs):
      p, g = self.reg("rd"), self.reg("rd")
      self.emit(f"ld.param.u64 {p}, [data{i}]"); self.emit(f"cvta.to.global.u64 {g}, {p}")
      bufs[i] = g
    kvars = self.k.vars()
    for v in kvars:   # integer arguments after the buffers (Variables of symbolic sizes)
      r = self.reg("r"); self.emit(f"ld.param.u32 {r}, [var_{v.arg[0]}]"); self.names[v] = r
    gidx = self.grid_indices()
    loops: list[tuple[UOp, str, str]] = []
    for u in prog:
      op = u.op
      if op is Ops.DEFINE_GLOBAL: self.names[u] = bufs[u.arg]
      elif op is Ops.DEFINE_VAR: continue
      elif op is Ops.CONST:   # a vector constant is the same register in every lane
        r = self.const(u.arg, u.dtype.scalar)
        self.names[u] = r if u.dtype.count == 1 else [r] * u.dtype.count
      elif op is Ops.RANGE:
        if u in gidx: self.names[u] = gidx[u]; continue
        n, i = (u.src[0].arg if u.src[0].op is Ops.CONST else self.names[u.src[0]]), self.reg("r")
        top, end = self.label("loop"), self.label("end")
        if u in self.strided:   # lane l of the block runs iterations l, l+L, l+2L, ...
          p = self.reg("p")
          self.emit(f"mov.u32 {i}, {self.lane}"); self.emit(f"setp.ge.s32 {p}, {i}, {n}"); self.emit(f"@{p} bra {end}")
        else:
          self.emit(f"mov.u32 {i}, 0")
          if isinstance(n, str):   # a symbolic bound (a register): the loop body runs at least once, so check first
            p = self.reg("p"); self.emit(f"setp.le.s32 {p}, {n}, 0"); self.emit(f"@{p} bra {end}")
          elif n <= 0: self.emit(f"bra {end}")
        self.lines.append(f"{top}:")
        self.names[u] = i
        loops.append((u, top, end))
        self.addr_scopes.append({})
      elif op is Ops.ENDRANGE:
        r = u.src[0]
        if r in gidx: continue
        lr, top, end = loops.pop()
        assert lr is r, f"render_ptx: ENDRANGE of {r.arg} closes {lr.arg}"
        self.addr_scopes.pop()
        i, p = self.names[r], self.reg("p")
        self.emit(f"add.s32 {i}, {i}, {self.plan.lanes if r in self.strided else 1}")
        self.emit(f"setp.lt.s32 {p}, {i}, {r.src[0].arg if r.src[0].op is Ops.CONST else self.names[r.src[0]]}"); self.emit(f"@{p} bra {top}")
        self.lines.append(f"{end}:")
      elif op is Ops.LOAD: self.names[u] = self.load(u)
      elif op is Ops.STORE: self.store(u)
      elif op is Ops.VECTORIZE: self.names[u] = [self.names[s] for s in u.src]   # no code: a list of registers
      elif op is Ops.GEP: self.names[u] = self.at_lane(u.src[0], u.arg)
      elif op is Ops.WMMA: self.names[u] = self.wmma(u)
      else:   # everything else works lane by lane on scalar registers
        w = u.dtype.count
        out = [self.lane_op(u, i) for i in range(w)]
        self.names[u] = out if w > 1 else out[0]
    params = ",\n".join([f"  .param .u64 data{i}" for i in range(nbufs)] + [f"  .param .u32 var_{v.arg[0]}" for v in kvars])
    decls = [f"  .reg {REG_DECL[c]} %{c}<{n + 1}>;" for c, n in self.counts.items()]
    if self.strided: decls.append(f"  .shared .align 8 .b8 red_smem[{8 * self.plan.lanes}];")
    # the fp8 conversions came with PTX ISA 7.8 for sm_90 and 8.1 for sm_89 (ptxas: "cvt.e4m3x2.f32 on sm_89 requires
    # PTX ISA .version 8.1"): a kernel that uses them on sm_89 says 8.1
    ver = "8.1" if self.arch == "sm_89" and any(".e4m3x2" in ln or ".e5m2x2" in ln for ln in self.lines) else PTX_ISA[self.arch]
    src = "\n".join([f".version {ver}", f".target {self.arch}", ".address_size 64", "",
                     f".visible .entry {k.name}(\n{params}\n)", f".maxntid {self.plan.threads}, 1, 1", "{",
                     *decls, *self.lines, "$Lexit:", "  ret;", "}", ""])
    return src, self.plan.launch

def render_ptx(k: LoweredKernel, arch: str = "sm_90", program: list[UOp] | None = None,
               buffer_alignment: int = BUFFER_ALIGNMENT, plan: GpuPlan | None = None) -> tuple[str, Launch]:
  """PTX source of kernel `k` for `arch` and its launch dims {"global_size": blocks (x,y,z), "local_size": threads}.
  `buffer_alignment`: the bytes every buffer argument's address is a multiple of (a property of the device's allocator,
  see BUFFER_ALIGNMENT); vector accesses wider than it are split. `plan`: the launch (compiler/gpudims.py plan_launch;
  None plans it for an NVIDIA GPU of `arch` with the default tuning)."""
  prog = linearize(k) if program is None else program
  if plan is None: plan = plan_launch(k, Target("NV", "ptx", arch=arch, warp_size=32, gpu=True), prog)
  return _Renderer(k, arch, plan, buffer_alignment).render(prog)
