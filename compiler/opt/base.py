"""The bottom of the optimizer: what an opt is (`Opt`, its `OptKind`), its error, and kernel copies.

Every module of compiler/opt imports from here and nothing here imports them back. Layers, bottom to top:
  base, pressure            what an opt is; the register budget
  peel                      cutting loops at comparisons (range primitives)
  apply                     one explicit Opt applied and checked (legality, register pressure); what BEAM enumerates
  matmul, conv, tc, gpu     heuristics built from the primitives (packed matmul, convolutions, tensor cores, GPU upcast)
  heuristic                 the default opts (`optimize`), the DEFAULT opt, portable C opts

>>> Opt("VECTOR", 1, 8).kind is OptKind.VECTOR, Opt("VECTOR", 1, 8).to_json()
(True, ['VECTOR', 1, 8])
"""
from __future__ import annotations
from dataclasses import dataclass, replace as dc_replace
from enum import Enum
from compiler.lower import LoweredKernel

class OptError(ValueError):
  """An opt that is not legal for the kernel at hand (the message names the opt, the axis and the sizes)."""

class OptKind(str, Enum):
  """The kinds of opts. Each applied step is recorded in `kernel.applied_opts` as a tuple whose first item is the name of
  its kind; the last three are steps only the heuristics take (no Opt of theirs is enumerated by BEAM)."""
  DEFAULT = "DEFAULT"
  UPCAST = "UPCAST"
  VECTOR = "VECTOR"
  THREAD = "THREAD"
  PEEL = "PEEL"
  PAD = "PAD"
  SWAP = "SWAP"
  SPLIT = "SPLIT"
  REDUCE_VECTOR = "REDUCE_VECTOR"
  REDUCE_UNROLL = "REDUCE_UNROLL"
  UNROLL = "UNROLL"
  TILE = "TILE"                       # the matmul register tile (rows unrolled x columns as vectors)
  OVERLAP_VECTOR = "OVERLAP_VECTOR"   # a row as overlapping vectors (compiler/opt/conv.py)
  TC = "TC"                           # tensor-core tiles (compiler/opt/tc.py)
  def __str__(self) -> str: return self.value
  def __format__(self, spec: str) -> str: return format(self.value, spec)

EXPLICIT_KINDS = tuple(k for k in OptKind if k not in (OptKind.TILE, OptKind.OVERLAP_VECTOR, OptKind.TC))

@dataclass(frozen=True)
class Opt:
  """One kernel transformation: kind, the axis it acts on, and an amount (see compiler/opt/apply.py for the kinds).
  `kind` may be given as a string; a known one becomes its OptKind (an unknown one stays a string, and applying it
  raises OptError naming the known kinds)."""
  kind: OptKind | str
  axis: int | None = None
  amount: int | None = None
  def __post_init__(self):
    if not isinstance(self.kind, OptKind) and self.kind in OptKind.__members__: object.__setattr__(self, "kind", OptKind(self.kind))
  def __repr__(self) -> str: return f"Opt({str(self.kind)!r}, {self.axis}, {self.amount})"
  def to_json(self) -> list: return [str(self.kind), self.axis, self.amount]
  @staticmethod
  def from_json(x: list) -> Opt: return Opt(x[0], x[1], x[2])

def copy_kernel(k: LoweredKernel) -> LoweredKernel:
  """A copy whose lists can be changed without touching `k` (the UOp graph is immutable and shared)."""
  return dc_replace(k, global_ranges=list(k.global_ranges), applied_opts=list(k.applied_opts))
