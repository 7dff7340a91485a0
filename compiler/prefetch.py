"""Software prefetch hints on lowered LOADs: a LOAD whose arg is ("prefetch", n) also asks the CPU to start fetching the
cache line n bytes past its own address, so that the line is in the cache when a later iteration reads it.

Hardware prefetchers follow a stream of lines, but a register-tiled matmul reads two streams per reduction step (a few
floats of packed A, a vector row of packed B) and, on the AVX-512 Xeon this was measured on, the A stream of a packed
2048x2048 product arrived late: each step then waits on L2/L3. The renderers emit the hint before the load (C:
`__builtin_prefetch`, LLVM: `llvm.prefetch`); a prefetch never faults, so the address may lie past the buffer (it is
computed with integer / non-inbounds arithmetic for that reason). GPU renderers ignore the hint.

The hint names the cache level the line is brought to: L1 (x86 PREFETCHT0, the default) or L2 (PREFETCHT1: the arg
is ("prefetch", n, 2)). A stream read once, too big for the caches, is brought to L2 only (compiler/opt/heuristic.py
stream_prefetch): measured, that beat the L1 hint by 5% on the AVX-512 Xeon of issue 28 (a hint to L1 holds one of
the core's few L1 miss buffers from the hint until its line arrives; the L2 takes far more requests in flight).

>>> from compiler.dtypes import dtypes
>>> from compiler.uop import UOp, Ops, substitute
>>> ld = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 1), UOp.const(dtypes.int32, 0)))
>>> prefetch_bytes(ld), prefetch_bytes(prefetched(ld, 4096)), prefetch_level(prefetched(ld, 4096)), prefetch_level(prefetched(ld, 4096, 2))
(0, 4096, 1, 2)
"""
from __future__ import annotations
from compiler.uop import UOp, Ops, substitute

LEVELS = (1, 2)   # the cache levels a hint may bring its line to: L1, L2

def prefetched(load: UOp, ahead: int, level: int = 1) -> UOp:
  """`load` that also prefetches the line `ahead` bytes past its address (ahead > 0) into cache level `level` (1, 2)."""
  assert load.op is Ops.LOAD and ahead > 0, f"prefetch: needs a LOAD and a positive distance, got {load.op} and {ahead}"
  assert level in LEVELS, f"prefetch: cache level {level} is not one of {LEVELS}"
  return UOp(Ops.LOAD, load.dtype, load.src, ("prefetch", ahead) if level == 1 else ("prefetch", ahead, level))

def _hint(load: UOp) -> tuple | None:
  a = load.arg
  return a if isinstance(a, tuple) and len(a) in (2, 3) and a[0] == "prefetch" else None

def prefetch_bytes(load: UOp) -> int:
  """How far ahead `load` prefetches, in bytes (0: no prefetch)."""
  return h[1] if (h := _hint(load)) is not None else 0

def prefetch_level(load: UOp) -> int:
  """The cache level `load`'s prefetch brings its line to: 1 (L1) or 2 (L2); 0 when it prefetches nothing."""
  return (h[2] if len(h) == 3 else 1) if (h := _hint(load)) is not None else 0

def prefetch_locality(load: UOp) -> int:
  """The locality argument of a read prefetch (GCC/Clang `__builtin_prefetch`, LLVM `llvm.prefetch`) for `load`'s hint:
  3 brings the line to L1 (x86 PREFETCHT0), 2 to L2 (PREFETCHT1).

  >>> from compiler.dtypes import dtypes
  >>> ld = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 1), UOp.const(dtypes.int32, 0)))
  >>> prefetch_locality(prefetched(ld, 64)), prefetch_locality(prefetched(ld, 64, 2))
  (3, 2)
  """
  return 4 - prefetch_level(load)

def prefetch_into(sink: UOp, level: int) -> UOp:
  """`sink` with every prefetching load's hint retargeted to cache level `level` (same distances).

  >>> from compiler.dtypes import dtypes
  >>> ld = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 1), UOp.const(dtypes.int32, 0)))
  >>> prefetch_level(prefetch_into(prefetched(ld, 64), 2)), prefetch_bytes(prefetch_into(prefetched(ld, 64), 2))
  (2, 64)
  """
  subs = {u: prefetched(u, prefetch_bytes(u), level) for u in sink.toposort() if u.op is Ops.LOAD and prefetch_level(u) not in (0, level)}
  return substitute(sink, subs) if subs else sink
