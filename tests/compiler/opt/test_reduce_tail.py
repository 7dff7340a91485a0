"""Reductions over long rows that no vector divides (compiler/opt/heuristic.py _peel_reduce_tail, sm39): vectors over
the first multiple of (vector x accumulators) elements, a scalar loop over the rest, combined by the reduction's op
before any epilogue. Exact on both ISAs (small integers: any order of summation is exact), for sums, maxima and sums
with an epilogue; shorter rows and other kernels are left as they were."""
import numpy as np
import pytest
from compiler.dtypes import dtypes
from compiler.lazy import LazyBuffer
from compiler.lower import lower
from compiler.opt.heuristic import optimize, REDUCE_TAIL_MIN
from compiler.schedule import create_schedule
from compiler.uop import Ops
from conftest import host_runs
from tests.compiler.pack.test_pack_avx2 import _run

pytestmark = pytest.mark.usefixtures("on_cpu")   # C-path tests: CPU even under MOCKGPU=1 NV=1

ROWS = 24   # (a few rows: each core gets several)
LENGTHS = (REDUCE_TAIL_MIN + 1, 1500, 4097, 4100, 4096 + 63)

def small_ints(shape, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 7, shape).astype(np.float32)

def rows_input(n: int) -> LazyBuffer:
  x = LazyBuffer.empty((ROWS, n), dtypes.float32, "CPU"); x.buffer = object()
  return x

@pytest.mark.parametrize("n", LENGTHS)
def test_row_sums_and_maxima_are_exact(cpu_target, n):
  if not host_runs(cpu_target): return   # (an AVX-512 target on an AVX2 host: its code can't run here)
  x, xn = rows_input(n), small_ints((ROWS, n))
  got = _run(create_schedule([x.r(Ops.ADD, (1,))]), {x: xn}, cpu_target).reshape(-1)
  assert got.tolist() == xn.astype(np.int64).sum(axis=1).tolist()
  xm = -xn
  xm[np.arange(ROWS), (np.arange(ROWS) * 997) % n] = 7.0   # the largest anywhere: in the vectors' part or the tail
  assert _run(create_schedule([x.r(Ops.MAX, (1,))]), {x: xm}, cpu_target).reshape(-1).tolist() == [7.0] * ROWS

@pytest.mark.parametrize("n", [4097, 1500])
def test_the_tail_joins_before_the_epilogue(cpu_target, n):
  # 2 * sum + 1: the tail is added to the vectors' sum first, then doubled (doubling after would lose it)
  if not host_runs(cpu_target): return
  x, xn = rows_input(n), small_ints((ROWS, n), 1)
  s = x.r(Ops.ADD, (1,))
  y = s.alu(Ops.MUL, LazyBuffer.const(2.0, dtypes.float32, s.shape, "CPU")).alu(Ops.ADD, LazyBuffer.const(1.0, dtypes.float32, s.shape, "CPU"))
  got = _run(create_schedule([y]), {x: xn}, cpu_target).reshape(-1)
  assert got.tolist() == (2 * xn.astype(np.int64).sum(axis=1) + 1).tolist()

@pytest.mark.parametrize("n,peeled", [(4097, True), (REDUCE_TAIL_MIN + 1, True), (REDUCE_TAIL_MIN - 1, False), (4096, False)])
def test_long_odd_rows_get_vectors(cpu_target, n, peeled):
  k = optimize(lower(create_schedule([rows_input(n).r(Ops.ADD, (1,))])[0].ast), cpu_target)
  lanes = cpu_target.simd_bytes // 4
  assert any(o[0] == "REDUCE_TAIL" for o in k.applied_opts) == peeled
  # before: rows of 4097 were one scalar chain each (no vector load at all)
  assert any(u.op is Ops.LOAD and u.dtype.count == lanes for u in k.sink.toposort()) == (peeled or n % lanes == 0)
  if peeled:   # the vectors cover whole accumulators' steps; fewer than that many scalars remain
    m = next(o[2] for o in k.applied_opts if o[0] == "REDUCE_TAIL")
    assert m % (lanes * 4) == 0 and 0 < n - m < lanes * 4
