"""Which products under compiler/pack.py's size floor (PACK_MIN in every dimension) are packed on 16-lane float32 vectors
(AVX-512): a batch of rows against a big matrix, as compiler/pack_avx2.py's `avx2_packs` does on 8 lanes.

Read in place, B's rows sit N floats apart and the unpacked kernel's tile runs well under the packed one once the
product is big enough to pay for the two copy kernels. `a @ b` realized, left unpacked (the floor raised) against
packed (the floor at 1: through compiler/pack_pad.py's scratch where N is not a multiple of 32), taking turns in one
process on the 2-core AVX-512 Xeon of issue 28 at load 2.6-4.5, CPU_ISA=native; process CPU ms, minimum of 5-7:

  M x K x N          unpacked  packed        M x K x N          unpacked  packed
  128 x 2048 x 2048     18.83    8.61        128 x 784 x 512        0.88    0.92
  128 x 1024 x 2048      9.51    5.23        128 x 512 x 512        0.49    0.71
  128 x 1024 x 1024      3.56    2.52        64 x 1024 x 512        1.24    1.34
  128 x 768 x 768        1.48    1.36        128 x 512 x 1024       1.06    0.99
  128 x 256 x 4096       3.19    1.86        96 x 1024 x 1024       1.64    1.62
  64 x 512 x 2048        2.92    1.78        32 x 2048 x 2048       2.86    3.98
  48 x 2048 x 2048       7.66    3.83        1024 x 64 x 1024       0.64    1.33
  100 x 784 x 1000       4.56    1.93        64 x 784 x 1000        3.31    2.03
  200 x 1024 x 1024      6.15    1.95        128 x 2048 x 1000     20.30    7.16

So: at least 48 rows, K and N at least 256, and 2^26 multiply-adds; 2^25 where N is not a multiple of two vectors
(the unpacked kernel's tile then is one vector wide and the packed one gains more).

>>> avx512_packs(128, 2048, 2048), avx512_packs(128, 512, 784), avx512_packs(100, 1000, 784), avx512_packs(32, 2048, 2048)
(True, False, True, False)
"""
from __future__ import annotations

def avx512_packs(m: int, n: int, k: int) -> bool:
  """Whether an (M, N, K) product on 16 lanes is packed although a dimension is under PACK_MIN (the table above)."""
  return m >= 48 and min(n, k) >= 256 and m * n * k >= (1 << 25 if n % 32 else 1 << 26)
