"""The register tile of a packed product (compiler/pack.py) for 8-lane float32 vectors and 16 registers (AVX2).

With 16 registers a tile holds at most 13 accumulators beside a broadcast and one B vector. Two FMA units with a
4-cycle latency need 8 independent accumulators to stay busy, and every FMA of a step waits for loads: MR broadcasts
of A and NR/8 vectors of B per MR*NR/8 FMAs. So:

  N % 16 == 0: 6 rows x 2 vectors (12 accumulators, 8 loads per 12 FMAs), the BLIS Haswell shape;
  N % 16 == 8: 12 rows x 1 vector (12 accumulators, 13 loads per 12 FMAs). The 6 x 1 tile this used to get has only
               6 accumulators, too few to hide the FMA latency. Measured on the 2-core AVX-512 Xeon of issue 28 with
               CPU_ISA=x86-64-v3, product kernel alone, thread CPU time, minimum of 10-12 rounds, loaded host:
               1032^3 6x8 17.5 ms, 8x8 15.4, 10x8 14.1, 12x8 13.1, 14x8 12.7 per core's half; 1000^3 6x8 16.2, 12x8 12.1.
               12 rows leave two registers spare (14 rows fill all 16) and divide more row counts.

When the rows can't be padded (something else is read per output row), MR must divide M: the largest that does.

>>> avx2_tile_shape(1024, 1024, True), avx2_tile_shape(1032, 1000, True), avx2_tile_shape(1000, 1000, False)
((6, 16), (12, 8), (8, 8))
"""
from __future__ import annotations

def avx2_tile_shape(m: int, n: int, pad_rows: bool) -> tuple[int, int] | None:
  """(MR, NR) for an (M, N) product on 8-lane vectors with 16 registers; None when N is not a multiple of 8 or no MR
  divides M (with `pad_rows` False)."""
  if n % 8: return None
  nr, rows = (16, (6, 4)) if n % 16 == 0 else (8, (12, 8, 6, 4))
  return next(((mr, nr) for mr in rows if pad_rows or m % mr == 0), None)
