"""The LLVM renderer: a linearized kernel becomes one LLVM IR function, for the host CPU or an AMD GPU.

One renderer, parameterized by the target (`LLVMTarget`): the CPU ABI is the C renderer's, `void name(T0* data0, ...,
i32 core)` with the loop k.threaded cut into `threads` chunks; the AMDGPU ABI is an `amdgpu_kernel` taking one
`ptr addrspace(1)` per buffer, its output loops the grid of workgroups that compiler/gpudims.py plans (workitem.id and
workgroup.id per axis, div/rem for merged loops, work-items past the end leaving at once). Values are SSA registers;
accumulators live in allocas that mem2reg promotes. bool is i1 in registers and i8 in memory, bfloat16 is its i16 bits (casts widen/round like the C renderer), half is
`half`. Integer division is total as in constant folding (compiler/uop.py exec_alu): x/0 and x%0 give 0, INT_MIN/-1
wraps. exp2/log2/sin: on the CPU always (and float64 on AMD) as the branch-free arithmetic of compiler/transcendental.py
(exp2/log2 in float32, sin and float64 in float64), inlined, so kernels call no libm; float32 on AMD uses the hardware.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.lower import lower
>>> from compiler.dtypes import dtypes
>>> from compiler.uop import Ops
>>> x = LazyBuffer.empty((4,), dtypes.float32, "CPU"); x.buffer = object()
>>> src, _ = render_llvm(lower(create_schedule([x.alu(Ops.ADD, x)])[0].ast, "E_4"), HOST)
>>> next(l for l in src.splitlines() if l.startswith("define"))
'define void @E_4(ptr noalias %data0, ptr noalias %data1, i32 %core) #0 {'
"""
from __future__ import annotations
import functools, math, struct
from dataclasses import dataclass
from compiler.dtypes import DType, dtypes
from compiler.uop import UOp, Ops
from compiler.lower import LoweredKernel
from compiler.linearize import linearize
from compiler.gpudims import GpuPlan
from compiler.launch import Launch
from compiler.prefetch import prefetch_bytes, prefetch_locality
from compiler import transcendental

@dataclass(frozen=True)
class LLVMTarget:
  """What the IR depends on: the triple, the global address space, GPU (grid) or CPU (loops + core) ABI. (A GPU kernel's
  launch is a GpuPlan, compiler/gpudims.py.)"""
  triple: str
  gpu: bool = False
  addrspace: int = 0
  native_f32_math: bool = False   # exp2/log2/sin.f32 are instructions (AMD), not libm calls (CPU)
  private_addrspace: int = 0      # where allocas live (AMDGPU: 5, scratch; mem2reg promotes them to registers anyway)

HOST = LLVMTarget("x86_64-unknown-linux-gnu")
AMDGPU = LLVMTarget("amdgcn-amd-amdhsa", gpu=True, addrspace=1, native_f32_math=True, private_addrspace=5)   # globals in addrspace(1)

_SCALAR = {dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16", dtypes.uint16: "i16",
           dtypes.int32: "i32", dtypes.uint32: "i32", dtypes.int64: "i64", dtypes.uint64: "i64", dtypes.float16: "half",
           dtypes.bfloat16: "i16", dtypes.float32: "float", dtypes.float64: "double",
           dtypes.fp8e4m3: "i8", dtypes.fp8e5m2: "i8"}   # fp8: its byte (only loaded, stored, bitcast: compiler/fp8.py)

def ltype(dt: DType, mem: bool = False) -> str:
  """The LLVM type of a value of `dt` (in memory bool is i8)."""
  s = "i8" if mem and dt.scalar is dtypes.bool else _SCALAR[dt.scalar]
  return s if dt.count == 1 else f"<{dt.count} x {s}>"

def _isf(dt: DType) -> bool: return dt.is_float and dt.scalar is not dtypes.bfloat16 and dt.scalar not in dtypes.fp8s

def _bf16_bits(v: float) -> int:
  if math.isnan(v): return 0x7FC0
  try: b = struct.unpack("<I", struct.pack("<f", v))[0]
  except OverflowError: b = struct.unpack("<I", struct.pack("<f", math.copysign(math.inf, v)))[0]
  return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF

def const(v, dt: DType) -> str:
  """A constant as an LLVM literal (a splat vector for vector dtypes); floats as exact hex bit patterns."""
  s = dt.scalar
  if s is dtypes.bool: lit = "true" if v else "false"
  elif s is dtypes.bfloat16: lit = str(_bf16_bits(float(v)))
  elif s is dtypes.float16:
    import numpy as np
    lit = f"0xH{int(np.array(v, np.float16).view(np.uint16)):04X}"
  elif s.is_float:   # LLVM spells float constants as the double holding the (float-rounded) value
    x = float(v)
    if s is dtypes.float32 and math.isfinite(x):
      try: x = struct.unpack("<f", struct.pack("<f", x))[0]
      except OverflowError: x = math.copysign(math.inf, x)
    lit = f"0x{struct.unpack('<Q', struct.pack('<d', x))[0]:016X}"
  else: lit = str(int(v))
  if dt.count == 1: return lit
  return "<" + ", ".join([f"{_SCALAR[s]} {lit}"] * dt.count) + ">"

# arithmetic forms of the transcendentals (compiler/transcendental.py), as graphs over a placeholder, rendered inline and
# lane-wide: exp2/log2 of float32 (and half) in float32, sin and everything float64 in float64
@functools.lru_cache(None)
def _math_graph(op: Ops, dt: DType) -> tuple[UOp, list[UOp]]:
  x = UOp(Ops.DEFINE_VAR, dt, (), ("x", 0, 1))
  fns = {(Ops.EXP2, dtypes.float32): transcendental.exp2_f32, (Ops.LOG2, dtypes.float32): transcendental.log2_f32,
         (Ops.EXP2, dtypes.float64): transcendental.exp2_f64, (Ops.LOG2, dtypes.float64): transcendental.log2_f64,
         (Ops.SIN, dtypes.float64): transcendental.sin_f64}
  return x, fns[(op, dt)](x).toposort()

class _Renderer:
  def __init__(self, k: LoweredKernel, t: LLVMTarget, threads: int, plan: GpuPlan | None):
    if t.gpu and plan is None: raise ValueError(f"render_llvm: GPU kernel {k.name} needs its launch plan (compiler/gpudims.py plan_launch)")
    self.k, self.t, self.threads, self.plan = k, t, threads, plan
    self.lines: list[str] = []
    self.allocas: list[str] = []
    self.names: dict[UOp, str] = {}
    self.cnt = 0
    self.block = "entry"
    self.decls: set[str] = set()
    self.strided = plan.grouped if plan is not None else frozenset()   # GPUs, grouped reductions: the loops the lanes stride
    self.lds_bytes = 0
    self.ptr = "ptr" if t.addrspace == 0 else f"ptr addrspace({t.addrspace})"
    self.aptr = "ptr" if t.private_addrspace == 0 else f"ptr addrspace({t.private_addrspace})"

  def tmp(self) -> str:
    self.cnt += 1
    return f"%v{self.cnt}"
  def emit(self, rhs: str) -> str:
    d = self.tmp(); self.lines.append(f"  {d} = {rhs}"); return d
  def label(self, name: str) -> None:
    self.lines.append(f"{name}:"); self.block = name
  def intrinsic(self, name: str, ret: str, args: list[str]) -> str:
    self.decls.add(f"declare {ret} @{name}({', '.join(a.rsplit(' ', 1)[0] for a in args)})")
    return self.emit(f"call {ret} @{name}({', '.join(args)})")

  # *** values ***
  def val(self, u: UOp, n: int = 1) -> str:
    """The register (or literal) of u, splatted to n lanes when u is a scalar used by a vector op."""
    if u.op is Ops.CONST: return const(u.arg, u.dtype.scalar.vec(n) if n > 1 else u.dtype)
    if u.op is Ops.DEFINE_ACC: r = self.emit(f"load {ltype(u.dtype)}, {self.aptr} {self.names[u]}")
    else: r = self.names[u]
    if n > 1 and u.dtype.count == 1: return self.splat(r, u.dtype, n)
    return r
  def splat(self, r: str, dt: DType, n: int) -> str:
    v = self.emit(f"insertelement <{n} x {ltype(dt)}> poison, {ltype(dt)} {r}, i32 0")
    return self.emit(f"shufflevector <{n} x {ltype(dt)}> {v}, <{n} x {ltype(dt)}> poison, <{n} x i32> zeroinitializer")

  # *** casts (work on vectors as they are) ***
  def cast(self, x: str, sd: DType, dd: DType) -> str:
    n = dd.count
    s, d = sd.scalar, dd.scalar
    st, dt_ = ltype(sd), ltype(dd)
    if s is d: return x
    if s is dtypes.bfloat16:   # widen the bits to a float32, then go on from there
      w = self.emit(f"zext {st} {x} to {ltype(dtypes.int32.vec(n))}")
      w = self.emit(f"shl {ltype(dtypes.int32.vec(n))} {w}, {const(16, dtypes.int32.vec(n))}")
      f = self.emit(f"bitcast {ltype(dtypes.int32.vec(n))} {w} to {ltype(dtypes.float32.vec(n))}")
      return self.cast(f, dtypes.float32.vec(n), dd)
    if d is dtypes.bfloat16:   # round to nearest even on the float32 bits; NaN stays a quiet NaN
      f = self.cast(x, sd, dtypes.float32.vec(n))
      I = dtypes.uint32.vec(n)
      b = self.emit(f"bitcast {ltype(dtypes.float32.vec(n))} {f} to {ltype(I)}")
      lsb = self.emit(f"lshr {ltype(I)} {b}, {const(16, I)}")
      lsb = self.emit(f"and {ltype(I)} {lsb}, {const(1, I)}")
      r = self.emit(f"add {ltype(I)} {b}, {const(0x7FFF, I)}")
      r = self.emit(f"add {ltype(I)} {r}, {lsb}")
      r = self.emit(f"lshr {ltype(I)} {r}, {const(16, I)}")
      r = self.emit(f"trunc {ltype(I)} {r} to {dt_}")
      nan = self.emit(f"fcmp uno {ltype(dtypes.float32.vec(n))} {f}, {f}")
      # the quiet NaN as raw bits: const(0x7FC0, bfloat16) would round the number 32704.0 to bf16 (0x4700)
      return self.emit(f"select {ltype(dtypes.bool.vec(n))} {nan}, {dt_} {const(0x7FC0, dtypes.uint16.vec(n))}, {dt_} {r}")
    if d is dtypes.bool:
      if _isf(sd): return self.emit(f"fcmp une {st} {x}, {const(0, sd)}")
      return self.emit(f"icmp ne {st} {x}, {const(0, sd)}")
    if s is dtypes.bool: return self.emit(f"{'uitofp' if _isf(dd) else 'zext'} {st} {x} to {dt_}")
    if s.is_int and d.is_int:
      if s.itemsize == d.itemsize: return x
      if s.itemsize > d.itemsize: return self.emit(f"trunc {st} {x} to {dt_}")
      return self.emit(f"{'zext' if s.is_unsigned else 'sext'} {st} {x} to {dt_}")
    if s.is_int:   # int -> float (to half through float32: every int a half can hold is exact there)
      if d is dtypes.float16 and s.itemsize > 2:
        return self.cast(self.cast(x, sd, dtypes.float32.vec(n)), dtypes.float32.vec(n), dd)
      return self.emit(f"{'uitofp' if s.is_unsigned else 'sitofp'} {st} {x} to {dt_}")
    if d.is_int:   # float -> int truncating like C on x86: narrow targets through i32, uint32 through i64
      if d.itemsize < 4 or d is dtypes.uint32:
        mid = dtypes.int64 if d is dtypes.uint32 else dtypes.int32
        return self.cast(self.emit(f"fptosi {st} {x} to {ltype(mid.vec(n))}"), mid.vec(n), dd)
      return self.emit(f"{'fptoui' if d.is_unsigned else 'fptosi'} {st} {x} to {dt_}")
    if s is dtypes.float64 and d is dtypes.float16:   # f64 -> f16 is a libcall on x86: go through float32
      return self.cast(self.cast(x, sd, dtypes.float32.vec(n)), dtypes.float32.vec(n), dd)
    return self.emit(f"{'fpext' if d.itemsize > s.itemsize else 'fptrunc'} {st} {x} to {dt_}")

  def bitcast(self, x: str, sd: DType, dd: DType) -> str:
    if sd.scalar is dtypes.bool or dd.scalar is dtypes.bool: return self.cast(x, sd, dd)
    if sd.itemsize != dd.itemsize: raise NotImplementedError(f"render_llvm: bitcast {sd} -> {dd} changes the size")
    return self.emit(f"bitcast {ltype(sd)} {x} to {ltype(dd)}") if ltype(sd) != ltype(dd) else x

  # *** ALU on registers: dt the result, sd the first operand's dtype (both may be vectors) ***
  def alu(self, op: Ops, dt: DType, sd: DType, a: list[str]) -> str:
    t, st = ltype(dt), ltype(sd)
    B = dtypes.bool.vec(dt.count)
    if dtypes.bfloat16 in (dt.scalar, sd.scalar) and op is not Ops.WHERE:   # bfloat16 math runs in float32, rounded back
      F = dtypes.float32.vec(dt.count)
      r = self.alu(op, F if dt.scalar is dtypes.bfloat16 else dt, F, [self.cast(x, sd, F) for x in a])
      return self.cast(r, F, dt) if dt.scalar is dtypes.bfloat16 else r
    if op in (Ops.CMPLT, Ops.CMPNE):
      if _isf(sd): return self.emit(f"fcmp {'olt' if op is Ops.CMPLT else 'une'} {st} {a[0]}, {a[1]}")
      if sd.scalar is dtypes.bool and op is Ops.CMPLT:   # a < b <=> !a & b
        na = self.emit(f"xor {st} {a[0]}, {const(True, sd)}"); return self.emit(f"and {st} {na}, {a[1]}")
      return self.emit(f"icmp {('ult' if sd.is_unsigned or sd.scalar is dtypes.bool else 'slt') if op is Ops.CMPLT else 'ne'} {st} {a[0]}, {a[1]}")
    if op is Ops.WHERE: return self.emit(f"select {ltype(B)} {a[0]}, {t} {a[1]}, {t} {a[2]}")
    if dt.scalar is dtypes.bool and sd.scalar is not dtypes.bool:   # AND/OR/XOR of numbers as a bool: C's `!= 0`
      return self.cast(self.alu(op, sd, sd, a), sd, dt)
    if dt.scalar is dtypes.bool:
      bop = {Ops.ADD: "or", Ops.MAX: "or", Ops.OR: "or", Ops.MUL: "and", Ops.AND: "and", Ops.XOR: "xor"}.get(op)
      if op is Ops.NEG: return self.emit(f"xor {t} {a[0]}, {const(True, dt)}")
      if bop is None: raise NotImplementedError(f"render_llvm: {op} on bool")
      return self.emit(f"{bop} {t} {a[0]}, {a[1]}")
    if _isf(dt):
      if op is Ops.NEG: return self.emit(f"fneg {t} {a[0]}")
      if op is Ops.RECIP: return self.emit(f"fdiv {t} {const(1.0, dt)}, {a[0]}")
      if op is Ops.MAX:   # NaN wins, as in torch: (a > b || a != a) ? a : b
        g = self.emit(f"fcmp ogt {t} {a[0]}, {a[1]}"); nan = self.emit(f"fcmp uno {t} {a[0]}, {a[0]}")
        c = self.emit(f"or {ltype(B)} {g}, {nan}")
        return self.emit(f"select {ltype(B)} {c}, {t} {a[0]}, {t} {a[1]}")
      if op is Ops.MULACC:
        m = self.emit(f"fmul contract {t} {a[0]}, {a[1]}"); return self.emit(f"fadd contract {t} {m}, {a[2]}")
      if op in (Ops.SQRT, Ops.TRUNC): return self.intrinsic(f"llvm.{op.name.lower()}.{self.vsuffix(dt)}", t, [f"{t} {a[0]}"])
      if op in (Ops.EXP2, Ops.LOG2, Ops.SIN): return self.transcendental(op, dt, a[0])
      ins = {Ops.ADD: "fadd contract", Ops.MUL: "fmul contract", Ops.FDIV: "fdiv"}.get(op)
      if ins is None: raise NotImplementedError(f"render_llvm: {op} on {dt}")
      return self.emit(f"{ins} {t} {a[0]}, {a[1]}")
    u = dt.is_unsigned
    if op is Ops.NEG: return self.emit(f"sub {t} {const(0, dt)}, {a[0]}")
    if op is Ops.MAX:
      c = self.emit(f"icmp {'ugt' if u else 'sgt'} {t} {a[0]}, {a[1]}")
      return self.emit(f"select {ltype(B)} {c}, {t} {a[0]}, {t} {a[1]}")
    if op in (Ops.IDIV, Ops.MOD): return self.divmod(op, dt, a)
    if op is Ops.MULACC:
      m = self.emit(f"mul {t} {a[0]}, {a[1]}"); return self.emit(f"add {t} {m}, {a[2]}")
    ins = {Ops.ADD: "add", Ops.MUL: "mul", Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor", Ops.SHL: "shl",
           Ops.SHR: "lshr" if u else "ashr"}.get(op)
    if ins is None: raise NotImplementedError(f"render_llvm: {op} on {dt}")
    return self.emit(f"{ins} {t} {a[0]}, {a[1]}")

  def vsuffix(self, dt: DType) -> str:
    s = {"half": "f16", "float": "f32", "double": "f64"}[_SCALAR[dt.scalar]]
    return s if dt.count == 1 else f"v{dt.count}{s}"

  def divmod(self, op: Ops, dt: DType, a: list[str]) -> str:
    """Total integer division: x/0 = x%0 = 0 and INT_MIN/-1 = INT_MIN (no trap, no poison), as exec_alu folds it."""
    t, u, B = ltype(dt), dt.is_unsigned, ltype(dtypes.bool.vec(dt.count))
    zero = self.emit(f"icmp eq {t} {a[1]}, {const(0, dt)}")
    bad = zero if u else self.emit(f"or {B} {zero}, {self.emit(f'icmp eq {t} {a[1]}, {const(-1, dt)}')}")
    d = self.emit(f"select {B} {bad}, {t} {const(1, dt)}, {t} {a[1]}")
    if op is Ops.MOD:
      r = self.emit(f"{'urem' if u else 'srem'} {t} {a[0]}, {d}")
      return self.emit(f"select {B} {bad}, {t} {const(0, dt)}, {t} {r}")
    q = self.emit(f"{'udiv' if u else 'sdiv'} {t} {a[0]}, {d}")   # b == -1 divides by 1: then negate (wrapping)
    if not u:
      neg = self.emit(f"sub {t} {const(0, dt)}, {a[0]}")
      q = self.emit(f"select {B} {bad}, {t} {neg}, {t} {q}")
    return self.emit(f"select {B} {zero}, {t} {const(0, dt)}, {t} {q}")

  def transcendental(self, op: Ops, dt: DType, x: str) -> str:
    n = dt.count
    if self.t.native_f32_math and dt.scalar in (dtypes.float32, dtypes.float16):
      return self.intrinsic(f"llvm.{op.name.lower()}.{self.vsuffix(dt)}", ltype(dt), [f"{ltype(dt)} {x}"])
    gdt = dtypes.float32 if op is not Ops.SIN and dt.scalar is not dtypes.float64 else dtypes.float64
    ph, graph = _math_graph(op, gdt)
    F = gdt.vec(n)
    vals: dict[UOp, str] = {ph: self.cast(x, dt, F)}
    for g in graph:
      if g in vals: continue
      if g.op is Ops.CONST: vals[g] = const(g.arg, g.dtype.vec(n) if n > 1 else g.dtype); continue
      gd = g.dtype.vec(n) if n > 1 else g.dtype
      sd = g.src[0].dtype.vec(n) if n > 1 else g.src[0].dtype
      srcs = [vals[s] for s in g.src]
      if g.op is Ops.CAST: vals[g] = self.cast(srcs[0], sd, gd)
      elif g.op is Ops.BITCAST: vals[g] = self.bitcast(srcs[0], sd, gd)
      else: vals[g] = self.alu(g.op, gd, gd if g.op is Ops.WHERE else sd, srcs)
    return self.cast(vals[graph[-1]], F, dt)

  # *** memory ***
  def address(self, buf: UOp, idx: UOp, dt: DType) -> str:
    i = self.val(idx)
    if idx.dtype.itemsize < 8: i = self.emit(f"{'zext' if idx.dtype.is_unsigned else 'sext'} {ltype(idx.dtype)} {i} to i64")
    return self.emit(f"getelementptr inbounds {ltype(dt.scalar, mem=True)}, {self.ptr} {self.names[buf]}, i64 {i}")

  def load(self, u: UOp) -> str:
    dt, mt = u.dtype, ltype(u.dtype, mem=True)
    al = dt.scalar.itemsize
    if len(u.src) == 3:   # gated: branch around the load (the index may be out of bounds when the gate is false)
      g, pre = self.val(u.src[2]), self.block
      n = self.cnt = self.cnt + 1
      self.lines.append(f"  br i1 {g}, label %ld{n}, label %ldx{n}")
      self.label(f"ld{n}")
      p = self.address(u.src[0], u.src[1], dt)
      v = self.emit(f"load {mt}, {self.ptr} {p}, align {al}")
      self.lines.append(f"  br label %ldx{n}")
      self.label(f"ldx{n}")
      v = self.emit(f"phi {mt} [ {v}, %ld{n} ], [ {const(0, dtypes.uint8.vec(dt.count) if dt.scalar is dtypes.bool else dt)}, %{pre} ]")
    else:
      p = self.address(u.src[0], u.src[1], dt)
      if (ahead := prefetch_bytes(u)) and not self.t.gpu:   # (compiler/prefetch.py) no inbounds: the line ahead may lie past the buffer
        q = self.emit(f"getelementptr i8, {self.ptr} {p}, i64 {ahead}")
        # read, locality 3 (into L1: PREFETCHT0) or 2 (into L2: PREFETCHT1), data
        self.lines.append(f"  call void @llvm.prefetch.p0({self.ptr} {q}, i32 0, i32 {prefetch_locality(u)}, i32 1)")
        self.decls.add("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)")
      v = self.emit(f"load {mt}, {self.ptr} {p}, align {al}")
    if dt.scalar is dtypes.bool: v = self.emit(f"icmp ne {mt} {v}, {const(0, dtypes.uint8.vec(dt.count))}")
    return v

  def store(self, u: UOp) -> None:
    buf, idx, val = u.src[:3]
    dt = val.dtype
    v = self.val(val)
    if dt.scalar is dtypes.bool: v = self.emit(f"zext {ltype(dt)} {v} to {ltype(dt, mem=True)}")
    if self.strided:   # every lane of the group holds the result: lane 0 stores it
      n = self.cnt = self.cnt + 1
      self.lines.append(f"  br i1 {self.lead}, label %st{n}, label %stx{n}")
      self.label(f"st{n}")
    p = self.address(buf, idx, dt)
    self.lines.append(f"  store {ltype(dt, mem=True)} {v}, {self.ptr} {p}, align {dt.scalar.itemsize}")
    if self.strided:
      self.lines.append(f"  br label %stx{n}")
      self.label(f"stx{n}")

  # *** GPU launch geometry (compiler/gpudims.py decides it; this prints it) ***
  def grid_indices(self) -> dict[UOp, str]:
    """The index prologue of the plan: each output loop of the grid -> the register holding its index. A grouped
    reduction's lanes read workitem.id.x (lane 0 stores); a work-item past the end of a guarded axis branches to the exit."""
    plan = self.plan
    if plan.grouped:
      self.lane = self.intrinsic("llvm.amdgcn.workitem.id.x", "i32", [])
      self.lead = self.emit(f"icmp eq i32 {self.lane}, 0")
    idx: dict[UOp, str] = {}
    for c, ax in zip("xyz", plan.axes):
      if not ax.ranges: continue
      tid = self.intrinsic(f"llvm.amdgcn.workitem.id.{c}", "i32", []) if ax.thread_id else None
      i = self.intrinsic(f"llvm.amdgcn.workgroup.id.{c}", "i32", []) if ax.block_id else tid
      if ax.block_id and ax.thread_id: i = self.emit(f"add nuw i32 {self.emit(f'mul nuw i32 {i}, {ax.threads}')}, {tid}")
      if ax.guard:
        g = self.emit(f"icmp sge i32 {i}, {ax.extent}")
        body = "body" if c == "x" else f"body.{c}"
        self.lines.append(f"  br i1 {g}, label %exit, label %{body}")
        self.label(body)
      for r, n in zip(ax.ranges[:0:-1], ax.sizes[:0:-1]):   # the innermost loop of a merged axis varies fastest
        idx[r] = self.emit(f"urem i32 {i}, {n}")
        i = self.emit(f"udiv i32 {i}, {n}")
      idx[ax.ranges[0]] = i
    return idx

  def barrier(self) -> None:
    """s_barrier with workgroup-scope release/acquire fences, so LDS writes before it are seen after it."""
    self.lines.append('  fence syncscope("workgroup") release')
    self.decls.add("declare void @llvm.amdgcn.s.barrier()")
    self.lines.append("  call void @llvm.amdgcn.s.barrier()")
    self.lines.append('  fence syncscope("workgroup") acquire')

  def combine_lanes(self, red: UOp, acc: str) -> str:
    """Tree-combine the lanes' partial accumulators in LDS; every lane gets the result."""
    t, dt = ltype(red.dtype), red.dtype
    self.lds_bytes = max(self.lds_bytes, self.plan.lanes * dt.itemsize)
    L = "ptr addrspace(3)"
    slot = lambda i: self.emit(f"getelementptr inbounds {t}, {L} @lds, i32 {i}")
    mine = slot(self.lane)
    self.lines.append(f"  store {t} {acc}, {L} {mine}, align {dt.scalar.itemsize}")
    self.barrier()
    s = self.plan.lanes // 2
    while s >= 1:
      n = self.cnt = self.cnt + 1
      c = self.emit(f"icmp ult i32 {self.lane}, {s}")
      self.lines.append(f"  br i1 {c}, label %cmb{n}, label %cmbx{n}")
      self.label(f"cmb{n}")
      a = self.emit(f"load {t}, {L} {mine}, align {dt.scalar.itemsize}")
      b = self.emit(f"load {t}, {L} {slot(self.emit(f'add i32 {self.lane}, {s}'))}, align {dt.scalar.itemsize}")
      self.lines.append(f"  store {t} {self.alu(red.arg, dt, dt, [a, b])}, {L} {mine}, align {dt.scalar.itemsize}")
      self.lines.append(f"  br label %cmbx{n}")
      self.label(f"cmbx{n}")
      self.barrier()
      s //= 2
    r = self.emit(f"load {t}, {L} @lds, align {dt.scalar.itemsize}")
    self.barrier()   # everyone has read the result before the next combine reuses the buffer
    return r

  def render(self, prog: list[UOp]) -> tuple[str, Launch]:
    k, t = self.k, self.t
    for u in prog:
      if u.op is Ops.LANE: raise NotImplementedError(f"render_llvm: kernel {k.name} still has a LANE (run compiler.vectorize first)")
      if u.op is Ops.WMMA: raise NotImplementedError(f"render_llvm: kernel {k.name} uses WMMA (tensor cores), which this renderer lacks")
    for v in k.vars(): self.names[v] = f"%var_{v.arg[0]}"   # integer arguments after the buffers
    gidx, launch = (self.grid_indices(), self.plan.launch) if self.plan is not None else ({}, Launch(threads=self.threads))
    loops: list[tuple[UOp, str]] = []
    for u in prog:
      op = u.op
      if op in (Ops.CONST, Ops.DEFINE_VAR): continue   # rendered where used
      if op is Ops.DEFINE_GLOBAL: self.names[u] = f"%data{u.arg}"; continue
      if op is Ops.RANGE:
        if u in gidx: self.names[u] = gidx[u]; continue
        n, rid = u.src[0].arg if u.src[0].op is Ops.CONST else self.val(u.src[0]), f"r{u.arg[0]}_{self.cnt}"
        lo, hi = (self.lane if u in self.strided else "0"), str(n)
        piece = u in k.thread_pieces and self.threads > 1
        if piece or (u is k.threaded and self.threads > 1):
          total = k.threaded.src[0].arg if piece else n
          c = self.emit("sext i32 %core to i64")
          bounds = []
          for x in (c, self.emit(f"add i64 {c}, 1")):   # chunk core: [n*core/threads, n*(core+1)/threads)
            m = self.emit(f"mul i64 {x}, {total}")
            bounds.append(self.emit(f"trunc i64 {self.emit(f'sdiv i64 {m}, {self.threads}')} to i32"))
          lo, hi = bounds
          if piece:   # a piece of the peeled threaded loop at offset off: the part of the chunk inside [off, off + n)
            off = k.thread_pieces[u]
            lo, hi = self.emit(f"sub i32 {lo}, {off}"), self.emit(f"sub i32 {hi}, {off}")
            lo = self.emit(f"select i1 {self.emit(f'icmp slt i32 {lo}, 0')}, i32 0, i32 {lo}")
            hi = self.emit(f"select i1 {self.emit(f'icmp sgt i32 {hi}, {n}')}, i32 {n}, i32 {hi}")
        pre = self.block
        self.lines.append(f"  br label %{rid}.head")
        self.label(f"{rid}.head")
        self.lines.append(f"  %{rid} = phi i32 [ {lo}, %{pre} ], [ %{rid}.next, %{rid}.latch ]")
        c = self.emit(f"icmp slt i32 %{rid}, {hi}")
        self.lines.append(f"  br i1 {c}, label %{rid}.body, label %{rid}.exit")
        self.label(f"{rid}.body")
        self.names[u] = f"%{rid}"
        loops.append((u, rid))
        continue
      if op is Ops.ENDRANGE:
        if u.src[0] in gidx: continue
        r, rid = loops.pop()
        assert r is u.src[0], f"render_llvm: ENDRANGE of {u.src[0].arg} closes {r.arg}"
        self.lines.append(f"  br label %{rid}.latch")
        self.label(f"{rid}.latch")
        self.lines.append(f"  %{rid}.next = add nsw i32 %{rid}, {self.plan.lanes if r in self.strided else 1}")
        self.lines.append(f"  br label %{rid}.head")
        self.label(f"{rid}.exit")
        continue
      if op is Ops.LOAD: self.names[u] = self.load(u)
      elif op is Ops.STORE: self.store(u)
      elif op is Ops.DEFINE_ACC:
        a = f"%acc{u.arg[0]}"
        space = f", addrspace({t.private_addrspace})" if t.private_addrspace else ""
        self.allocas.append(f"  {a} = alloca {ltype(u.dtype)}, align {u.dtype.itemsize}{space}")
        self.lines.append(f"  store {ltype(u.dtype)} {self.val(u.src[0], u.dtype.count)}, {self.aptr} {a}")
        self.names[u] = a
      elif op is Ops.ASSIGN:
        v = self.val(u.src[1], u.dtype.count)
        self.lines.append(f"  store {ltype(u.dtype)} {v}, {self.aptr} {self.names[u.src[0]]}")
        self.names[u] = v
      elif op is Ops.REDUCE:   # after the loops: read the accumulator (grouped: combined across the lanes)
        self.names[u] = self.val(u.src[0].src[0])
        if self.strided: self.names[u] = self.combine_lanes(u, self.names[u])
      elif op is Ops.VECTORIZE:
        v, vt = "poison", ltype(u.dtype)
        for i, s in enumerate(u.src): v = self.emit(f"insertelement {vt} {v}, {ltype(s.dtype)} {self.val(s)}, i32 {i}")
        self.names[u] = v
      elif op is Ops.GEP:
        if u.src[0].op is Ops.CONST: self.names[u] = const(u.src[0].arg, u.dtype)
        else: self.names[u] = self.emit(f"extractelement {ltype(u.src[0].dtype)} {self.val(u.src[0])}, i32 {u.arg}")
      elif op is Ops.CAST: self.names[u] = self.cast(self.val(u.src[0], u.dtype.count), u.src[0].dtype.scalar.vec(u.dtype.count), u.dtype)
      elif op is Ops.BITCAST: self.names[u] = self.bitcast(self.val(u.src[0], u.dtype.count), u.src[0].dtype.scalar.vec(u.dtype.count), u.dtype)
      else:
        n = u.dtype.count
        if op is Ops.WHERE: n = max(n, u.src[0].dtype.count)
        srcs = [self.val(s, n) for s in u.src]   # scalars used by a vector op are splatted (C broadcasts them)
        sd = u.src[1].dtype if op is Ops.WHERE else u.src[0].dtype
        self.names[u] = self.alu(op, u.dtype.scalar.vec(n), sd.scalar.vec(n), srcs)
    params = [f"{self.ptr} noalias %data{i}" for i in range(len(k.buf_dtypes))]   # C's restrict
    params += [f"i32 %var_{v.arg[0]}" for v in k.vars()]
    if t.gpu:
      head = f"define amdgpu_kernel void @{k.name}({', '.join(params)}) #0 {{"
      attrs = f'attributes #0 = {{ nounwind "amdgpu-flat-work-group-size"="1,{max(64, self.plan.threads)}" }}'
    else:
      head = f"define void @{k.name}({', '.join(params + ['i32 %core'])}) #0 {{"
      attrs = 'attributes #0 = { nounwind "frame-pointer"="none" }'
    body = ["entry:", *self.allocas, *self.lines]   # allocas first in the entry block, where mem2reg finds them
    body += ["  br label %exit", "exit:", "  ret void", "}"]
    lds = [f"@lds = internal addrspace(3) global [{self.lds_bytes} x i8] poison, align 16", ""] if self.lds_bytes else []
    src = "\n".join([f'target triple = "{t.triple}"', "", *lds, head, *body, "", *sorted(self.decls), attrs, ""])
    return src, launch

def render_llvm(k: LoweredKernel, target: LLVMTarget = HOST, program: list[UOp] | None = None, threads: int = 1,
                plan: GpuPlan | None = None) -> tuple[str, Launch]:
  """LLVM IR of kernel `k` for `target` and its Launch: `threads` n on the CPU (the loop k.threaded cut into n chunks
  by the `core` argument), on a GPU the grid and block of `plan` (compiler/gpudims.py plan_launch)."""
  return _Renderer(k, target, threads, plan).render(linearize(k) if program is None else program)
