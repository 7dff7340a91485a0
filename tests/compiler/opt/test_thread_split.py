"""How the default opts split a CPU kernel across cores (compiler/opt/heuristic.py thread_axis): by what the kernel
computes, not by its loop counts after vectorizing (a transposing copy of 2.4M floats is 36864 AVX-512 iterations, and
ran on one core of two in the beautiful_mnist step, issue 28), and along a loop that splits evenly (5 rows over 2 cores
leave one idle a sixth of the time; 32 channels don't). The split kernels give numpy's values on 2 and 3 cores."""
import dataclasses
import numpy as np
import pytest
from compiler.dtypes import dtypes
from compiler.lazy import LazyBuffer
from compiler.lower import lower
from compiler.opt.apply import CHUNKS_PER_CORE
from compiler.opt.heuristic import optimize, split_balance, thread_axis
from compiler.pipeline import compile_kernel
from compiler.schedule import create_schedule
from compiler.target import Target
from compiler.uop import Ops
from frontend.devices import open_device, target_of

def _realized(shape):
  x = LazyBuffer.empty(shape, dtypes.float32, "CPU"); x.buffer = object()
  return x

def _transpose_ast():
  """A (128, 32, 24, 24) -> (128, 24, 24, 32) copy (the NCHW -> NHWC copy of the mnist step's conv gradients)."""
  (si,) = create_schedule([_realized((128, 32, 24, 24)).permute((0, 2, 3, 1)).contiguous()])
  return si.ast

def _row_sums_ast(shape=(5, 32, 1024)):
  """Sums over the last axis of a (5, 32, 1024) tensor: output loops of 5 and 32."""
  (si,) = create_schedule([_realized(shape).r(Ops.ADD, (2,))])
  return si.ast

@pytest.mark.parametrize("lanes", [8, 16])
def test_vectorized_copy_is_split_across_cores(lanes):
  k = optimize(lower(_transpose_ast()), Target("CPU", "c", ncores=2, simd_bytes=4 * lanes))
  assert k.threaded is not None and k.threaded is k.global_ranges[0], (k.applied_opts, [g.src[0].arg for g in k.global_ranges])

def test_small_kernel_stays_on_one_core():
  (si,) = create_schedule([_realized((32, 32, 5, 5)).permute((0, 2, 3, 1)).contiguous()])   # 25600 floats
  assert optimize(lower(si.ast), Target("CPU", "c", ncores=2, simd_bytes=64)).threaded is None

@pytest.mark.parametrize("ncores", [2, 3, 4])
def test_uneven_outer_loop_gives_way_to_an_even_one(ncores):
  k = optimize(lower(_row_sums_ast()), Target("CPU", "c", ncores=ncores, simd_bytes=64))
  sizes = [g.src[0].arg for g in k.global_ranges]
  assert sizes[0] == 5 and k.threaded is not None and k.threaded.src[0].arg == 32, (sizes, k.applied_opts)

def test_even_outer_loop_stays_the_split():
  k = optimize(lower(_row_sums_ast((6, 32, 1024))), Target("CPU", "c", ncores=2, simd_bytes=64))
  assert k.threaded is k.global_ranges[0] and k.threaded.src[0].arg == 6

def test_thread_axis_rules():
  k = optimize(lower(_row_sums_ast()), Target("CPU", "c", ncores=1, simd_bytes=64))
  assert k.threaded is None
  assert thread_axis(k, 1, 1 << 30) is None and thread_axis(k, 2, 100) is None   # one core; too little work
  assert thread_axis(k, 2, 1 << 30).src[0].arg == 32
  k.depths = [1]   # a loop chain hung under the outer loop: only loops outside it may split, and 5 is all there is
  assert thread_axis(k, 2, 1 << 30) is k.global_ranges[0]
  assert [round(split_balance(n, c), 3) for n, c in [(5, 2), (32, 3), (3, 4), (8, 4)]] == [0.833, 0.97, 0.75, 1.0]

def _run(ast, ncores: int, ins: list[np.ndarray], out_shape) -> np.ndarray:
  t = dataclasses.replace(target_of("CPU"), ncores=ncores)
  ck = compile_kernel(ast, t, name="k")
  assert ck.threads in (ncores, ncores * CHUNKS_PER_CORE), ck.applied_opts   # (big kernels: chunks, tests/compiler/opt/test_thread_chunks.py)
  dev = open_device("CPU")
  out = dev.allocator.alloc(4 * int(np.prod(out_shape)))
  bufs = [dev.allocator.alloc(a.nbytes) for a in ins]
  for b, a in zip(bufs, ins): dev.allocator.copyin(b, memoryview(np.ascontiguousarray(a)))
  dev.program(ck.name, ck.binary)(out, *bufs, threads=ck.threads)
  res = np.empty(out_shape, np.float32); dev.allocator.copyout(memoryview(res), out)
  return res

@pytest.mark.parametrize("ncores", [2, 3])
def test_split_kernels_compute_every_output(ncores):
  g = np.random.default_rng(3)
  x = g.standard_normal((5, 32, 1024), dtype=np.float32)
  np.testing.assert_allclose(_run(_row_sums_ast(), ncores, [x], (5, 32)), x.astype(np.float64).sum(2), rtol=1e-4, atol=1e-3)
  y = g.standard_normal((128, 32, 24, 24), dtype=np.float32)
  np.testing.assert_array_equal(_run(_transpose_ast(), ncores, [y], (128, 24, 24, 32)), y.transpose(0, 2, 3, 1))
