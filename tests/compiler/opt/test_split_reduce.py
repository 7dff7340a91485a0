"""A big reduction into a few outputs runs in two stages (compiler/lazy.py LazyBuffer.r): d rows of a multiple of
SPLIT_ROW_ALIGN elements, then the d partial results combined with the elements past the last row (sm39). Any length
splits, so an odd one is neither one scalar chain on one core (a float32 sum that stops growing at 2^24) nor a
split into odd rows that no vector fits. Results are exact on both ISAs (small integers: every order of summation is
exact), and the first kernel is threaded and vectorized whatever the length."""
import numpy as np
import pytest
from compiler.dtypes import dtypes
from compiler.lazy import LazyBuffer, SPLIT_REDUCE_MIN, SPLIT_ROW_ALIGN
from compiler.lower import lower
from compiler.opt.heuristic import optimize
from compiler.schedule import create_schedule
from compiler.uop import Ops
from conftest import host_runs
from frontend import Tensor
from tests.compiler.pack.test_pack_avx2 import _run

pytestmark = pytest.mark.usefixtures("on_cpu")   # C-path tests: CPU even under MOCKGPU=1 NV=1

# below the split, the smallest split, one past it, 2^20 - 1 (odd), 2^20 + 16 (it split into 16 odd rows before), a
# length whose rows of whole vectors leave the most behind (256 rows: 256 * 64 - 1 elements after them)
LENGTHS = (SPLIT_REDUCE_MIN - 1, SPLIT_REDUCE_MIN, SPLIT_REDUCE_MIN + 1, (1 << 20) - 1, (1 << 20) + 16,
           256 * (1 << 12) + 256 * SPLIT_ROW_ALIGN - 1)

def small_ints(n: int, seed: int = 0) -> np.ndarray:
  """Floats 0..6: every partial sum of fewer than 2^21 of them is an integer below 2^24, so any order is exact."""
  return np.random.default_rng(seed).integers(0, 7, n).astype(np.float32)

def reduce_items(shape: tuple, op: Ops, axis: int):
  x = LazyBuffer.empty(shape, dtypes.float32, "CPU"); x.buffer = object()
  return x, create_schedule([x.r(op, (axis,))])

@pytest.mark.parametrize("n", LENGTHS)
def test_sums_of_any_length_are_exact(cpu_target, n):
  if not host_runs(cpu_target): return   # (an AVX-512 target on an AVX2 host: its code can't run here)
  x, items = reduce_items((n,), Ops.ADD, 0)
  xn = small_ints(n)
  assert _run(items, {x: xn}, cpu_target).reshape(-1).tolist() == [float(xn.astype(np.int64).sum())]

@pytest.mark.parametrize("n", [SPLIT_REDUCE_MIN + 1, (1 << 20) + 16])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_max_finds_the_largest_anywhere(cpu_target, n, where):
  # the largest value in the first row, inside, or among the elements past the last whole row
  if not host_runs(cpu_target): return
  x, items = reduce_items((n,), Ops.MAX, 0)
  xn = -small_ints(n)
  xn[{"first": 0, "middle": n // 2 + 1, "last": n - 1}[where]] = 7.0
  assert _run(items, {x: xn}, cpu_target).reshape(-1).tolist() == [7.0]

@pytest.mark.parametrize("n", [SPLIT_REDUCE_MIN + 3, (1 << 20) - 1])
def test_rows_and_columns_of_odd_length(cpu_target, n):
  # the reduced axis in the middle (3 sums of n) and first (2 strided sums of n): the split cuts that axis only
  if not host_runs(cpu_target): return
  xn = small_ints(3 * n).reshape(3, n)
  x, items = reduce_items((3, n), Ops.ADD, 1)
  assert _run(items, {x: xn}, cpu_target).reshape(-1).tolist() == xn.astype(np.int64).sum(axis=1).tolist()
  xt = np.ascontiguousarray(xn[:2].T)
  x, items = reduce_items((n, 2), Ops.ADD, 0)
  assert _run(items, {x: xt}, cpu_target).reshape(-1).tolist() == xt.astype(np.int64).sum(axis=0).tolist()

@pytest.mark.parametrize("n", [(1 << 20) - 1, (1 << 20) + 16, (1 << 22) + 5])
def test_odd_lengths_split_into_threaded_vector_rows(cpu_target, n):
  # before: 2^20 - 1 and 2^22 + 5 were one kernel, one chain, one core; 2^20 + 16 16 rows of 65537 scalars
  _, items = reduce_items((n,), Ops.ADD, 0)
  assert len(items) == 2
  first = items[0]
  d = first.outputs[0].shape[0]
  assert d >= 16
  k = optimize(lower(first.ast), cpu_target)
  lanes = cpu_target.simd_bytes // 4
  assert k.threaded is not None
  assert any(u.op is Ops.LOAD and u.dtype.count == lanes for u in k.sink.toposort())
  # the second kernel reads the partial results and the elements past the last whole row: fewer than a row of vectors each
  assert len(items[1].inputs) == 2 and n - d * (n // d // SPLIT_ROW_ALIGN * SPLIT_ROW_ALIGN) < d * SPLIT_ROW_ALIGN

def test_aligned_lengths_split_as_before():
  # 2^26 floats: 256 rows of 2^18, no kernel for a remainder
  _, items = reduce_items((1 << 26,), Ops.ADD, 0)
  assert [si.outputs[0].shape for si in items] == [(256, 1), (1, 1)] and len(items[1].inputs) == 1

@pytest.mark.parametrize("n", [1, 5, 17, 1000])
def test_tiny_sums(n):
  xn = small_ints(n)
  assert Tensor(xn).sum().item() == float(xn.astype(np.int64).sum())

def test_odd_float_sum_keeps_float32_accuracy():
  # 2^22 + 1 values in [0, 1): one float32 chain (before) drifts by ~1e-4 of the sum; rows of vector partial sums stay
  # within a few float32 ulps
  xn = np.random.default_rng(1).random((1 << 22) + 1, dtype=np.float32)
  want = xn.astype(np.float64).sum()
  assert abs(Tensor(xn).sum().item() - want) <= 1e-6 * want
  assert abs(Tensor(xn).max().item() - xn.max()) == 0
  assert abs(Tensor(xn).mean().item() - want / xn.size) <= 1e-6 * want / xn.size
