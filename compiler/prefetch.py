"""Software prefetch hints on lowered LOADs: a LOAD whose arg is ("prefetch", n) also asks the CPU to start fetching the
cache line n bytes past its own address, so that the line is in L1 when a later iteration reads it.

Hardware prefetchers follow a stream of lines, but a register-tiled matmul reads two streams per reduction step (a few
floats of packed A, a vector row of packed B) and, on the AVX-512 Xeon this was measured on, the A stream of a packed
2048x2048 product arrived late: each step then waits on L2/L3. The renderers emit the hint before the load (C:
`__builtin_prefetch`, LLVM: `llvm.prefetch`); a prefetch never faults, so the address may lie past the buffer (it is
computed with integer / non-inbounds arithmetic for that reason). GPU renderers ignore the hint.

>>> from compiler.dtypes import dtypes
>>> from compiler.uop import UOp, Ops
>>> ld = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 1), UOp.const(dtypes.int32, 0)))
>>> prefetch_bytes(ld), prefetch_bytes(prefetched(ld, 4096))
(0, 4096)
"""
from __future__ import annotations
from compiler.uop import UOp, Ops

def prefetched(load: UOp, ahead: int) -> UOp:
  """`load` that also prefetches the line `ahead` bytes past its address (ahead > 0)."""
  assert load.op is Ops.LOAD and ahead > 0, f"prefetch: needs a LOAD and a positive distance, got {load.op} and {ahead}"
  return UOp(Ops.LOAD, load.dtype, load.src, ("prefetch", ahead))

def prefetch_bytes(load: UOp) -> int:
  """How far ahead `load` prefetches, in bytes (0: no prefetch)."""
  a = load.arg
  return a[1] if isinstance(a, tuple) and len(a) == 2 and a[0] == "prefetch" else 0
