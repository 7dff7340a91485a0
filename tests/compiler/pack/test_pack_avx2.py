"""The packed product's register tile for each CPU target (compiler/pack_avx2.py on 8 lanes, compiler/pack.py on 16): a
product whose N is an odd number of vectors gets a one-vector tile of 12 rows (12 accumulators, no spills), and products of
odd shapes (K=1, prime K, M=1, padded rows, an epilogue, lead dims merged into rows, B transposed) built for each target
equal float64 numpy. The kernels run where the host can run the target's ISA, through the target's own CPUDevice."""
import numpy as np
import pytest
import compiler.pack as pack
from compiler.dtypes import dtypes
from compiler.lazy import LazyBuffer
from compiler.lower import lower
from compiler.opt.heuristic import optimize
from compiler.opt.pressure import vector_spills
from compiler.pack_avx2 import avx2_packs, avx2_tile_shape
from compiler.pipeline import compile_kernel
from compiler.render_c import render_c
from compiler.schedule import create_schedule
from compiler.uop import Ops
from conftest import host_runs, skip_unless_host_runs
from needs import need_clang
from tests.compiler.conv.test_conv_train_opts import inner_accumulators

pytestmark = [pytest.mark.usefixtures("on_cpu")]
rng = np.random.default_rng(36)

def test_avx2_tile_shapes():
  assert avx2_tile_shape(1024, 1024, True) == (6, 16)     # 2 vectors wide: 6 x 2 accumulators, the BLIS Haswell shape
  assert avx2_tile_shape(1000, 1032, True) == (12, 8)     # 1 vector wide: 12 rows (6 x 1 were too few chains)
  assert avx2_tile_shape(1000, 1032, False) == (8, 8)     # rows not padded: the largest MR dividing M
  assert avx2_tile_shape(270, 264, False) == (6, 8) and avx2_tile_shape(260, 264, False) == (4, 8)
  assert avx2_tile_shape(262, 264, False) is None and avx2_tile_shape(1024, 1020, True) is None
  assert pack.tile_shape(8, 1000, 1032, True) == (12, 8) and pack.tile_shape(16, 1024, 1024, True) == (12, 32)

def _plan(a: LazyBuffer, b: LazyBuffer, lanes: int, epilogue: bool = False) -> list:
  """The schedule of a @ b (a: (*lead, M, K), b: (K, N)), optionally with a relu, packed for `lanes`-float vectors."""
  *lead, m, k = a.shape
  n, full = b.shape[1], (*a.shape[:-1], b.shape[1], k)
  out = a.reshape((*lead, m, 1, k)).expand(full)
  out = out.alu(Ops.MUL, b.permute((1, 0)).reshape((1,) * len(lead) + (1, n, k)).expand(full)).r(Ops.ADD, (len(full) - 1,))
  if epilogue: out = out.alu(Ops.MAX, out.const_like(0.0))   # a relu: something else per row, so rows can't be padded
  return pack.pack_matmuls(create_schedule([out]), lambda device: lanes)

def _empty(*shape: int) -> LazyBuffer:
  x = LazyBuffer.empty(shape, dtypes.float32, "CPU"); x.buffer = object()
  return x

def test_one_vector_wide_products_get_twelve_accumulators(cpu_target, monkeypatch):
  """N an odd number of vectors (264 on 8 lanes, 272 on 16): the tile is 12 rows x 1 vector, all 12 accumulators in
  the reduction loop and none spilled (clang, whose allocation the tiles are sized for)."""
  monkeypatch.setenv("HCQRT_CC", need_clang("the spill count is clang's register allocation"))
  lanes = cpu_target.simd_bytes // 4
  n = lanes * (256 // lanes + 1)
  items = _plan(_empty(264, 256), _empty(256, n), lanes)
  # pack A unless it is read in place too (16 lanes: pack.a_in_place), pack B unless it is small enough to read in
  # place (pack.b_in_place), the product
  assert len(items) in (1, 2, 3) and items[-1].ast.arg[:3] == ("packed_matmul", 12, lanes), items[-1].ast.arg
  k = optimize(lower(items[-1].ast, items[-1].name), cpu_target)
  assert ("TILE", 0, 12, 1, lanes, 1) in k.applied_opts, k.applied_opts
  assert inner_accumulators(k) == 12, k.applied_opts
  assert vector_spills(render_c(k, 2 if k.threaded is not None else 1), k.name, cpu_target.cc_flags) == 0

def _run(items: list, arrays: dict, target) -> np.ndarray:
  """Every schedule item compiled for `target` and run on that target's CPUDevice, in order; the last one's output."""
  from hcqrt.cpu.device import CPUDevice
  dev = CPUDevice(isa=target.arch)
  bufs = {}
  for lb, arr in arrays.items():
    bufs[lb] = dev.allocator.alloc(arr.nbytes); dev.allocator.copyin(bufs[lb], memoryview(np.ascontiguousarray(arr)).cast("B"))
  for si in items:
    ck = compile_kernel(si.ast, target, name=si.name)
    out = si.outputs[0]
    bufs[out] = dev.allocator.alloc(4 * int(np.prod(out.shape)) + (si.alloc_nbytes or 0))
    dev.program(ck.name, ck.binary)(bufs[out], *(bufs[x] for x in si.inputs), threads=ck.threads)
  res = np.empty(items[-1].outputs[0].shape, np.float32)
  dev.allocator.copyout(memoryview(res).cast("B"), bufs[items[-1].outputs[0]])
  return res

@pytest.mark.parametrize("m,k,n,epilogue", [(264, 257, 264, False), (301, 263, 264, False), (256, 300, 264, True),
                                            (2, 256, 264, False), (264, 1, 264, False), (300, 256, 264, True)])
def test_odd_shapes_equal_numpy_on_each_target(cpu_target, monkeypatch, m, k, n, epilogue):
  """M=2, K=1 and prime K (the size floor lowered so they are packed too), M padded to the tile (301 -> 312 rows) or,
  with a relu epilogue, a tile dividing M (256: 8 rows, 300: 12): each equals numpy with the target's kernels. (M=1 is
  a vector times a matrix: never packed.) A is packed here (A8_IN_PLACE=0): on 8 lanes these would read it in place
  (tests/compiler/pack/test_pack_a_in_place_avx2.py)."""
  monkeypatch.setattr(pack, "PACK_MIN", 1)
  monkeypatch.setattr(pack, "A8_IN_PLACE", 0)
  monkeypatch.setattr(pack, "_plans", {})
  lanes = cpu_target.simd_bytes // 4
  n += -n % lanes   # (16 lanes: 272 columns, a one-vector-wide tile there too)
  a, b = _empty(m, k), _empty(k, n)
  items = _plan(a, b, lanes, epilogue)
  assert len(_plan(_empty(1, k), b, lanes)) == 1
  assert items[-1].ast.arg[0] == "packed_matmul", items[-1].ast.arg
  if lanes == 8: assert items[-1].ast.arg[1:3] == (avx2_tile_shape(m, n, False) if epilogue else (12, 8))
  skip_unless_host_runs(cpu_target)
  an, bn = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
  want = an.astype(np.float64) @ bn
  np.testing.assert_allclose(_run(items, {a: an, b: bn}, cpu_target).reshape(m, n), np.maximum(want, 0) if epilogue else want, rtol=1e-4, atol=1e-3)

def test_lead_dims_and_transposed_b_equal_numpy_on_each_target(cpu_target):
  """x (3, 88, 256) @ w (256, 264) merges its lead dims into one product of 264 rows, and a @ bt.T reads B transposed
  from a (264, 256) buffer: both are packed products with the one-vector-wide tile of 12 rows, equal to numpy."""
  lanes = cpu_target.simd_bytes // 4
  n = lanes * (256 // lanes + 1)
  x, w, bt = _empty(3, 88, 256), _empty(256, n), _empty(n, 256)
  xn, wn, btn = (rng.standard_normal(t.shape).astype(np.float32) for t in (x, w, bt))
  for items, arrays, want in ((_plan(x, w, lanes), {x: xn, w: wn}, xn.reshape(264, 256).astype(np.float64) @ wn),
                              (_plan(x.reshape((264, 256)), bt.permute((1, 0)), lanes), {x: xn, bt: btn}, xn.reshape(264, 256).astype(np.float64) @ btn.T)):
    assert items[-1].ast.arg[:3] == ("packed_matmul", 12, lanes), [si.name for si in items]
    if host_runs(cpu_target): np.testing.assert_allclose(_run(items, arrays, cpu_target).reshape(want.shape), want, rtol=1e-4, atol=1e-3)

def test_avx2_packs_small_batches_of_big_products():
  assert avx2_packs(128, 1024, 1024) and avx2_packs(64, 1024, 512) and avx2_packs(128, 2048, 2048)
  assert not avx2_packs(32, 1024, 1024) and not avx2_packs(1024, 1024, 64) and not avx2_packs(128, 128, 1024)   # M, K, N
  assert not avx2_packs(64, 512, 512) and avx2_packs(128, 512, 512)   # 2^24 multiply-adds: too small; 2^25: packed

@pytest.mark.parametrize("m,k,n", [(128, 1024, 512), (64, 512, 1024), (255, 1024, 520)])
def test_small_batch_products_are_packed_on_8_lanes_and_equal_numpy(cpu_target, m, k, n):
  """A batch of 64-255 rows against a big matrix: packed on 8 lanes (left in place it was up to 3x slower); on 16
  lanes where compiler/pack_avx512.py says so (64 x 512 x 1024 stays one kernel; 520 columns go through
  compiler/pack_pad.py's scratch: four kernels); the kernels of each target equal numpy. 520 columns on 8 lanes: the
  12-row one-vector tile."""
  lanes = cpu_target.simd_bytes // 4
  a, b = _empty(m, k), _empty(k, n)
  items = _plan(a, b, lanes)
  assert len(items) == (3 if lanes == 8 else {(128, 1024, 512): 3, (64, 512, 1024): 1, (255, 1024, 520): 4}[m, k, n]), [si.name for si in items]
  if lanes == 8: assert items[-1].ast.arg[1:3] == avx2_tile_shape(m, n, True)
  skip_unless_host_runs(cpu_target)
  an, bn = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
  np.testing.assert_allclose(_run(items, {a: an, b: bn}, cpu_target).reshape(m, n), an.astype(np.float64) @ bn, rtol=1e-4, atol=2e-3)
