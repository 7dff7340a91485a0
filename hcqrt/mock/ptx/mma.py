"""Warp-level matrix multiply-accumulate (`mma.sync.aligned`) for the PTX interpreter.

A warp computes D = A @ B + C on small tiles (A: MxK row-major, B: KxN column-major, C/D: MxN) whose elements are
spread over its 32 lanes. Which lane and register hold which element is fixed by the PTX ISA ("Matrix Fragments for
mma.m16n8k16 / mma.m16n8k8 with floating point type"); with g = laneid >> 2 and t = laneid % 4, element i of a lane's
fragment (registers in order, the low half of a packed .f16x2 register first) sits at:

  A (16xK):  row g + 8*((i >> 1) & 1)   col 2t + (i & 1) + 8*(i >> 2)    (K=16: 8 elements in 4 regs; K=8: 4 in 2)
  B (Kx8):   row 2t + (i & 1) + 8*(i >> 1)   col g                        (K=16: 4 elements in 2 regs; K=8: 2 in 1)
  C, D:      row g + 8*(i >> 1)   col 2t + (i & 1)                        (4 elements: 4 .f32 or 2 .f16x2 regs)

Supported: shapes m16n8k16 and m16n8k8, layout .row.col, A/B .f16 (C/D .f32 or .f16) or .bf16 (C/D .f32).
Products of halves are exact in float32; the k-sum and the add of C run in float32 (hardware rounds differently
inside, within the accuracy the ISA promises).

>>> a_rows, a_cols = fragment("A", 16)
>>> [(int(a_rows[5, i]), int(a_cols[5, i])) for i in range(8)]   # lane 5: g = 1, t = 1
[(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)]
"""
from __future__ import annotations
from dataclasses import dataclass
import numpy as np
from .parser import PTXError, Instr
from .numerics import bf16_to_f32

SHAPES = {"m16n8k16": (16, 8, 16), "m16n8k8": (16, 8, 8)}
FLOAT_TYPES = {"f16", "bf16", "f32"}

@dataclass(frozen=True)
class MMASpec:
  """One mma variant: tile sizes, element types (d, a, b, c) and registers per operand."""
  shape: str
  m: int
  n: int
  k: int
  dtype: str
  atype: str
  btype: str
  ctype: str
  @property
  def nregs(self) -> tuple[int, int, int, int]:
    """Registers in the D, A, B, C vector operands."""
    acc = lambda t: 4 if t == "f32" else 2   # four f32 elements, or two f16x2 registers
    return acc(self.dtype), self.k // 4, self.k // 8, acc(self.ctype)

def mma_spec(ins: Instr) -> MMASpec:
  """The variant an `mma` instruction names; PTXError (naming the instruction and line) for what is not supported."""
  name = ".".join((ins.op,) + ins.mods)
  mods = list(ins.mods)
  for req in ("sync", "aligned", "row", "col"):
    if req not in mods: raise PTXError(f"line {ins.line}: {name}: only mma.sync.aligned with .row.col layout is supported")
    mods.remove(req)
  shape = next((x for x in mods if x in SHAPES), None)
  if shape is None: raise PTXError(f"line {ins.line}: {name}: unsupported shape (supported: {', '.join(SHAPES)})")
  mods.remove(shape)
  types = [x for x in mods if x in FLOAT_TYPES]
  other = [x for x in mods if x not in FLOAT_TYPES]
  if other or len(types) != 4: raise PTXError(f"line {ins.line}: {name}: expected .dtype.atype.btype.ctype, got modifiers {other or types}")
  d, a, b, c = types
  ok = a == b and ((a == "f16" and d in ("f16", "f32") and c in ("f16", "f32")) or (a == "bf16" and d == c == "f32"))
  if not ok: raise PTXError(f"line {ins.line}: {name}: unsupported types .{d}.{a}.{b}.{c}")
  m, n, k = SHAPES[shape]
  return MMASpec(shape, m, n, k, d, a, b, c)

def check_mma(ins: Instr) -> MMASpec:
  """Parse-time check of an mma instruction: its variant and four vector operands with the right register counts."""
  spec = mma_spec(ins)
  name = ".".join((ins.op,) + ins.mods)
  if len(ins.args) != 4: raise PTXError(f"line {ins.line}: {name} takes 4 operands (d, a, b, c), got {len(ins.args)}")
  for what, op, want in zip("DABC", ins.args, spec.nregs):
    if op.kind != "vec": raise PTXError(f"line {ins.line}: {name}: operand {what} must be a vector {{...}} of {want} registers")
    if len(op.items) != want or any(x is None or x.kind != "reg" for x in op.items):
      raise PTXError(f"line {ins.line}: {name}: operand {what} needs {want} registers, got {len(op.items)}: {ins.text}")
  return spec

def fragment(which: str, k: int = 16) -> tuple[np.ndarray, np.ndarray]:
  """(rows, cols), each (32 lanes, elements per lane): where element i of each lane's `which` (A, B or C) fragment lives."""
  lane = np.arange(32)[:, None]
  g, t = lane >> 2, lane & 3
  n = {"A": k // 2, "B": k // 4, "C": 4}[which]
  i = np.arange(n)[None, :]
  if which == "A": rows, cols = g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)
  elif which == "B": rows, cols = 2 * t + (i & 1) + 8 * (i >> 1), g + 0 * i
  else: rows, cols = g + 8 * (i >> 1), 2 * t + (i & 1)
  return np.broadcast_to(rows, (32, n)), np.broadcast_to(cols, (32, n))

def _unpack(bits: np.ndarray, t: str) -> np.ndarray:
  """(warps, 32, regs) raw uint32 registers -> (warps, 32, elements) float32 values of type t."""
  bits = np.ascontiguousarray(bits, np.uint32)
  if t == "f32": return bits.view(np.float32)
  halves = bits.view(np.uint16)   # little-endian: the low half of each register comes first, as the ISA orders elements
  return halves.view(np.float16).astype(np.float32) if t == "f16" else bf16_to_f32(halves)

def _pack(vals: np.ndarray, t: str) -> np.ndarray:
  if t == "f32": return np.ascontiguousarray(vals, np.float32).view(np.uint32)
  return np.ascontiguousarray(vals.astype(np.float16)).view(np.uint32)   # t == "f16": pairs of halves per register

def warp_mma(spec: MMASpec, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
  """D registers (warps, 32, regs) as raw uint32 from the A, B, C registers (warps, 32, regs) of whole warps."""
  nw = a.shape[0]
  A, B, C = (np.zeros((nw,) + s, np.float32) for s in ((spec.m, spec.k), (spec.k, spec.n), (spec.m, spec.n)))
  (ar, ac), (br, bc), (cr, cc) = fragment("A", spec.k), fragment("B", spec.k), fragment("C", spec.k)
  A[:, ar, ac] = _unpack(a, spec.atype)
  B[:, br, bc] = _unpack(b, spec.btype)
  C[:, cr, cc] = _unpack(c, spec.ctype)
  D = np.matmul(A, B) + C
  return _pack(D[:, cr, cc], spec.dtype)
