"""Big streaming reductions on 8-lane vectors prefetch ahead (compiler/opt/heuristic.py stream_prefetch): one hint per
cache line of the stream on AVX2 (two 32-byte loads a line), none on AVX-512 or for a sum that fits in the caches; the
sums stay exact on every target (sm37)."""
import numpy as np
from compiler.schedule import create_schedule
from compiler.lower import lower
from compiler.render_c import render_c
from compiler.linearize import linearize
from compiler.opt.heuristic import optimize, STREAM_MIN_WORK
from compiler.dtypes import dtypes
from compiler.lazy import LazyBuffer
from compiler.uop import Ops
from compiler.prefetch import prefetch_bytes
from compiler.opt.matmul import PREFETCH_AHEAD, LINE
from test_pack_avx2 import _run
from conftest import host_runs
from frontend import Tensor
import pytest

pytestmark = pytest.mark.usefixtures("on_cpu")   # C-path tests: CPU even under MOCKGPU=1 NV=1

N = STREAM_MIN_WORK   # the smallest reduction that prefetches

def small_ints(n: int) -> np.ndarray:
  """Floats 0..6: every partial sum of n <= 2^21 of them is an integer below 2^24, so any summation order is exact."""
  return (np.arange(n) % 7).astype(np.float32)

def sum_kernel(n: int):
  return next(si for si in create_schedule([Tensor(small_ints(n)).sum().lazydata]) if si.kind == "kernel")

def test_big_sums_prefetch_on_eight_lanes_only(cpu_target):
  lanes = cpu_target.simd_bytes // 4
  for n, want in ((N, lanes == 8), (N // 8, False)):
    k = optimize(lower(sum_kernel(n).ast), cpu_target)
    loads = [u for u in k.sink.toposort() if u.op is Ops.LOAD and u.dtype.count == lanes]
    hinted = [u for u in loads if prefetch_bytes(u)]
    assert len(hinted) == (len(loads) * lanes * 4 // LINE if want else 0) and all(prefetch_bytes(u) == PREFETCH_AHEAD for u in hinted)
    assert ("__builtin_prefetch(" in render_c(k, 1, linearize(k))) == want

def test_sum_on_each_target_is_exact(cpu_target):
  if not host_runs(cpu_target): return   # (an AVX-512 target on an AVX2 host: its code can't run here)
  x = LazyBuffer.empty((N,), dtypes.float32, "CPU"); x.buffer = object()
  xn = small_ints(N)
  got = _run(create_schedule([x.r(Ops.ADD, (0,))]), {x: xn}, cpu_target)
  assert got.reshape(-1).tolist() == [float(xn.astype(np.int64).sum())]

def test_sum_through_the_frontend_is_exact():
  x = small_ints(N)
  assert Tensor(x).sum().item() == float(x.astype(np.int64).sum())
  assert Tensor(x).reshape(64, -1).sum(axis=1).numpy().tolist() == x.reshape(64, -1).astype(np.int64).sum(axis=1).tolist()
