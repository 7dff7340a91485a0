"""Products whose B is read across its rows (x @ W.T with W stored (N, K), or any B whose columns are not adjacent) are
packed even with a short reduction, under compiler/pack.py's size floor.

The unpacked kernel vectorizes the output columns j, and B[k, j] then sits K floats from B[k, j+1]: each vector of B is a
gather of separate cache lines, at every step of k, whatever K is. The pack copies B once into NR-wide contiguous rows.
A short K (a Linear layer of few input features: a decoder from a 100-float code) used to stay unpacked and fell 3-5x
behind. `(a @ b.T)` realized, unpacked (the floor at 256) against packed (the floor at 1), taking turns in one process on
the 2-core AVX-512 Xeon of issue 28 (load 2-3); process CPU ms, minimum of 5:

  M x K x N (B transposed)   native: unpacked  packed     CPU_ISA=x86-64-v3: unpacked  packed
  1000 x 100 x 784                      12.26    3.44                        12.57    2.61
  1000 x 32 x 784                        6.34    1.69                         3.30    1.14
  1024 x 8 x 1024                        3.07    1.06                         1.69    0.76
  256 x 100 x 256                        1.59    0.70                         0.85    0.71
  128 x 100 x 512                        1.17    0.91
  256 x 32 x 256                         0.69    0.79
  64 x 64 x 64                           0.32    0.35

So: 2^22 multiply-adds and M, N of 64 or more. (A read transposed gained on one ISA and lost on the other: left alone.)

>>> strided_b_packs(1000, 784, 100, 100), strided_b_packs(1000, 784, 100, 1), strided_b_packs(256, 256, 32, 32)
(True, False, False)
"""
from __future__ import annotations

def strided_b_packs(m: int, n: int, k: int, b_col_stride: int) -> bool:
  """Whether an (M, N, K) product whose B columns lie `b_col_stride` floats apart is packed below the size floor."""
  return b_col_stride != 1 and min(m, n) >= 64 and m * n * k >= 1 << 22

def transposed_a_packs(m: int, n: int, k: int, a_k_stride: int) -> bool:
  """Whether an (M, N, K) product whose A is read down its columns (`a_k_stride` floats between A[i, k] and A[i, k+1]:
  a weight gradient x.T @ g, K the batch) is packed under the size floor. In place the kernel's broadcast of A walks a
  column per step. `a.T @ b` realized, unpacked against packed (the floor at 1), taking turns in one process on the
  2-core AVX-512 Xeon of issue 28 at load 5-6; process CPU ms, minimum of 9-15, native / CPU_ISA=x86-64-v3:
  784x128x1000 4.54 -> 3.32, 3.89 -> 2.54, 4.15 -> 2.58 / 4.51 -> 3.41, 4.14 -> 2.95; 1000x128x1000 6.13 -> 3.28 /
  2.97 -> 2.12; 1024x128x1024 2.62 -> 1.51 / 6.19 -> 4.21; 1000x128x784 2.79 -> 2.15 / 3.37 -> 3.05; 784x128x1024
  1.67 -> 1.34 / 4.09 -> 4.22; 784x64x1000 1.95 -> 1.30 / 1.72 -> 1.61; 512x128x512 0.90 -> 0.99 / 1.35 -> 1.25.
  So: K of 64 or more, M and N of 256 or more, 2^25 multiply-adds.

  >>> transposed_a_packs(784, 1000, 128, 784), transposed_a_packs(784, 1000, 128, 1), transposed_a_packs(784, 1000, 32, 784)
  (True, False, False)
  """
  return a_k_stride != 1 and k >= 64 and min(m, n) >= 256 and m * n * k >= 1 << 25

