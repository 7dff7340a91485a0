"""Default opts for permuted copies (a transpose, possibly with elementwise work fused in).

A kernel that stores along its innermost output loop rj and reads some input along another output loop rc (x of shape
(N, H, W, C) stored as (N, C, H, W)) has no layout that both its loads and its stores walk contiguously. Vectorized
along rj alone, each vector gathers w scalars a whole row apart, and every iteration of rc walks all of rj again: for
the (576 x 32) image blocks of a channels-last conv output that is 32 passes over 73 KB, each line re-read from L2
(5.5 GB/s, against 26 GB/s for a plain copy of the same bytes). `transpose_tile` instead
  - vectorizes rj (w lanes: a vector store, the loads one gather of w rows),
  - unrolls rc by TRANSPOSE_ROWS, so each step reads neighbouring elements of the same w lines (the C compiler turns
    the unrolled gathers into gather instructions: 2.7 -> 1.0 ms for that block, AVX-512),
  - and where the block of rc x rj elements outgrows L1, splits rj into w-wide pieces and moves the pieces' loop
    outside rc (SPLIT + SWAP): the w lines the gathers read then stay in L1 while rc walks them.
Each step is an explicit Opt (compiler/opt/apply.py), so BEAM reaches the same kernel and the register budget is
checked as for any other opt.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.lower import lower
>>> from compiler.target import Target
>>> from compiler.dtypes import dtypes
>>> x = LazyBuffer.empty((2, 576, 32), dtypes.float32, "CPU"); x.buffer = object()
>>> k = lower(create_schedule([x.permute((0, 2, 1)).contiguous()])[0].ast)
>>> [o[0] for o in transpose_tile(k, 16, Target("CPU", "c", simd_bytes=64), lambda k, w: False).applied_opts]
['SPLIT', 'SWAP', 'VECTOR', 'UPCAST']
"""
from __future__ import annotations
from collections.abc import Callable
from compiler.lower import LoweredKernel
from compiler.opt.base import Opt, OptError, copy_kernel
from compiler.opt.apply import apply_opts, kernel_loads, stride_of
from compiler.target import Target
from compiler.uop import Ops

TRANSPOSE_ROWS = 4          # rc unrolled this many times (2 measured no better than none: 2.5 vs 2.7 ms; 4: 1.0 ms)
TRANSPOSE_BLOCK = 16 << 10  # bytes of the rc x rj block above which rj is cut into vector-wide pieces outside rc

def transpose_tile(k: LoweredKernel, w: int, device: Target, merge: Callable[[LoweredKernel, int], bool]) -> LoweredKernel | None:
  """The permuted copy `k` tiled as the module doc says, or None when k is not one (a reduction, several stores, no
  ungated load contiguous along another output loop than the store's). `merge(k, w)` first merges the innermost output
  loops in place where every access walks them as one (compiler/opt/heuristic.py merge_rows: a 24x24 map is one loop of
  576, whose stores then fill whole lines where 24-wide pieces left three partial writes per line), on a copy: k itself
  is not changed."""
  if k.reduce_ranges() or len(k.sink.src) != 1 or len(k.global_ranges) < 2 or k.nests or k.depths: return None
  if any(r.src[0].op is not Ops.CONST for r in k.global_ranges): return None
  kc = copy_kernel(k)
  merge(kc, w)
  gr, st = kc.global_ranges, kc.sink.src[0]
  j, rj = len(gr) - 1, gr[-1]
  n = rj.src[0].arg
  if stride_of(st.src[1], rj) != 1: return None
  wv = next((v for v in (w, w // 2, w // 4) if v >= 4 and n % v == 0), None)
  if wv is None: return None
  # the loop along which some load is contiguous while the store is not (the innermost such), the load moving along rj
  # by more than one element (a gather: a broadcast or a vector load along rj needs none of this)
  rows = [i for i in range(j) for ld in kernel_loads(kc) if len(ld.src) == 2 and stride_of(ld.src[1], gr[i]) == 1
          and stride_of(ld.src[1], rj) not in (0, 1) and gr[i].src[0].arg % TRANSPOSE_ROWS == 0]
  if not rows: return None
  i = max(rows)
  nc = gr[i].src[0].arg
  if n > wv and (i != j - 1 or nc * n * st.src[2].dtype.itemsize > TRANSPOSE_BLOCK):
    opts = [Opt("SPLIT", j, wv), Opt("SWAP", i, j), Opt("VECTOR", j + 1, wv), Opt("UPCAST", j, TRANSPOSE_ROWS)]
  else: opts = [Opt("VECTOR", j, wv), Opt("UPCAST", i, TRANSPOSE_ROWS)]
  try: return apply_opts(kc, opts, device)
  except OptError: return None
