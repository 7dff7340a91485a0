"""Packed products (compiler/pack.py) on 8-lane float32 vectors with 16 registers (AVX2): the register tile, and which are packed.

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
An A read in place (compiler/pack.py a_in_place: A and B small, no copy launch) can't be padded either, but keeps the
padded choice above: the rows MR leaves are one smaller tile (compiler/opt/matmul.py; 512 = 85 x 6 + 2).

Which products are packed at all: compiler/pack.py packs those whose M, N and K are each at least PACK_MIN (256). On 8
lanes, a batch of 64-255 rows against a big matrix is packed too (`avx2_packs`): read in place, B's rows sit N floats
apart, and the unpacked kernel's tile (4 rows x 2 vectors) ran at about 20 GFLOP/s a core there. `a @ b` realized,
packed against not, taking turns in one process (CPU_ISA=x86-64-v3, the 2-core Xeon of issue 28 at load 4: wall ms,
minimum / median of 30-40 each):

  M x K x N            not packed      packed          M x K x N           not packed     packed
  128 x 1024 x 1024     8.96 / 21.7    3.34 / 13.3     128 x 2048 x 2048   24.5 / 54.1    9.53 / 16.3
  64 x 512 x 1024       1.34 / 2.68    0.99 / 1.71     128 x 784 x 512     1.78 / 5.39    1.58 / 3.66
  32 x 1024 x 1024      1.46 / 5.31    1.27 / 5.27     16 x 1024 x 1024    0.93 / 3.06    1.21 / 5.47
  1024 x 64 x 1024      1.11 / 4.85    1.43 / 6.04     128 x 1024 x 128    0.42 / 0.53    0.71 / 3.24

Fewer rows, a short K or few columns: the two extra kernels (launch, and copies the product reads once or twice) cost
what the tile gains.

The product's split across the cores (compiler/opt/heuristic.py optimize): its column blocks are cut into
CHUNKS_PER_CORE chunks a core that the threads claim in turn, as other big kernels' loops are. With one half a core, a
core the OS stalls (another process on its CPU) leaves the other idle at the end, or its half to the caller: the whole
product on one core. Alone on its buffers, 2 threads, load 2.1-2.7 (other jobs), CPU_ISA=x86-64-v3, wall ms min / median
of 60 (N=1024) and 12 (2048), the two taking turns: 1024^3 halves 20.7 / 34.5, 13.1 / 26.9; chunks 17.9 / 28.0,
13.8 / 21.6. 2048^3 halves 118.9 / 283, 96.7 / 107.0; chunks 97.4 / 238, 95.0 / 106.3. Without stalls each core claims
a contiguous half (the caller from the front, the worker from the back: hcqrt/cpu/device.py), as before.

>>> avx2_tile_shape(1024, 1024, True), avx2_tile_shape(1032, 1000, True), avx2_tile_shape(1000, 1000, False)
((6, 16), (12, 8), (8, 8))
>>> avx2_packs(128, 1024, 1024), avx2_packs(32, 1024, 1024), avx2_packs(1024, 1024, 64)
(True, False, False)
"""
from __future__ import annotations

def avx2_tile_shape(m: int, n: int, pad_rows: bool) -> tuple[int, int] | None:
  """(MR, NR) for an (M, N) product on 8-lane vectors with 16 registers; None when N is not a multiple of 8 or no MR
  divides M (with `pad_rows` False)."""
  if n % 8: return None
  nr, rows = (16, (6, 4)) if n % 16 == 0 else (8, (12, 8, 6, 4))
  return next(((mr, nr) for mr in rows if pad_rows or m % mr == 0), None)

def avx2_packs(m: int, n: int, k: int) -> bool:
  """Whether an (M, N, K) product on 8 lanes is packed although a dimension is under PACK_MIN: at least 64 rows, 512
  columns, a K of 512 and 2^25 multiply-adds."""
  return m >= 64 and n >= 512 and k >= 512 and m * n * k >= 1 << 25
