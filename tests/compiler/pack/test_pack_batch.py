"""Batched products packed (compiler/pack_batch.py): a (B, M, K) @ (B, K, N) with different right-hand matrices is two
batch-wide pack kernels, the product over (B, Mp, Np) tiled with the batch loop outermost (compiler/opt/matmul.py), and
the finish reading [:, :M, :N]; built for each CPU target, and run where the host can, it equals float64 numpy (odd
shapes, B transposed as in attention's q @ k.T, a bias + relu epilogue); small batches of nice shapes stay in place."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
import compiler.pack as pack
from compiler.dtypes import dtypes
from compiler.lazy import LazyBuffer
from compiler.lower import lower
from compiler.opt.matmul import packed_matmul_tile
from compiler.schedule import create_schedule
from compiler.uop import Ops
from conftest import skip_unless_host_runs
from frontend import Tensor
from test_pack_avx2 import _empty, _run

pytestmark = [pytest.mark.usefixtures("on_cpu")]
rng = np.random.default_rng(280)

def _bmm(a: LazyBuffer, b: LazyBuffer, lanes: int, epilogue: bool = False, b_t: bool = False) -> list:
  """The packed schedule of a @ b (a: (B, M, K); b: (B, K, N), or (B, N, K) read transposed), optionally with a relu."""
  nb, m, k = a.shape
  n = b.shape[1] if b_t else b.shape[2]
  full = (nb, m, n, k)
  bv = b if b_t else b.permute((0, 2, 1))
  out = a.reshape((nb, m, 1, k)).expand(full).alu(Ops.MUL, bv.reshape((nb, 1, n, k)).expand(full)).r(Ops.ADD, (3,))
  if epilogue: out = out.alu(Ops.MAX, out.const_like(0.0))
  return pack.pack_matmuls(create_schedule([out]), lambda device: lanes)

@pytest.mark.parametrize("nb,m,k,n,epilogue,b_t", [(3, 37, 13, 21, False, False), (2, 5, 263, 40, True, False),
                                                   (4, 30, 17, 33, False, True), (2, 301, 300, 299, True, True)])
def test_batched_products_are_packed_and_equal_numpy(cpu_target, monkeypatch, nb, m, k, n, epilogue, b_t):
  monkeypatch.setattr(pack, "PACK_MIN", 1)
  monkeypatch.setattr(pack, "_plans", {})
  lanes = cpu_target.simd_bytes // 4
  a, b = _empty(nb, m, k), _empty(nb, n, k) if b_t else _empty(nb, k, n)
  items = _bmm(a, b, lanes, epilogue, b_t)
  assert len(items) == 4 and items[2].ast.arg[0] == "packed_matmul", [si.name for si in items]
  mr, nr = items[2].ast.arg[1:3]
  assert items[0].outputs[0].shape == (nb, -(-m // mr), k, mr) and items[2].outputs[0].shape[:2] == (nb, m + -m % mr)
  assert items[1].outputs[0].shape[-1] == nr and items[2].outputs[0].shape[2] % nr == 0
  kern = packed_matmul_tile(lower(items[2].ast, items[2].name), cpu_target)
  assert kern is not None and kern.applied_opts[0][0] == "TILE" and kern.global_ranges[0].src[0].arg == nb
  assert kern.threaded is kern.global_ranges[0]   # the batch loop split across the cores
  skip_unless_host_runs(cpu_target)
  an, bn = rng.standard_normal(a.shape).astype(np.float32), rng.standard_normal(b.shape).astype(np.float32)
  want = an.astype(np.float64) @ (bn.transpose(0, 2, 1) if b_t else bn)
  got = _run(items, {a: an, b: bn}, cpu_target).reshape(want.shape)
  np.testing.assert_allclose(got, np.maximum(want, 0) if epilogue else want, rtol=1e-4, atol=1e-4 * np.sqrt(k))

def test_which_batches_are_packed():
  """A batch is packed when one product alone would be (the size floor), and is 2^25 multiply-adds or has N not a
  multiple of two vectors; a single matrix (B = 1) goes through compiler/pack.py."""
  def n_items(nb, m, k, n, lanes=16): return len(_bmm(_empty(nb, m, k), _empty(nb, k, n), lanes))
  assert n_items(4, 1023, 1023, 1023) == 4 and n_items(2, 512, 512, 512) == 4 and n_items(4, 300, 300, 300) == 4
  assert n_items(16, 256, 256, 256) == 1 and n_items(32, 128, 128, 128) == 1 and n_items(8, 1024, 64, 1024) == 1
  x = LazyBuffer.empty((2, 512, 512), dtypes.float16, "CPU"); x.buffer = object()   # float16: left alone
  x4 = (2, 512, 512, 512)
  mm = x.reshape((2, 512, 1, 512)).expand(x4).alu(Ops.MUL, x.permute((0, 2, 1)).reshape((2, 1, 512, 512)).expand(x4)).r(Ops.ADD, (3,))
  assert len(pack.pack_matmuls(create_schedule([mm]), lambda d: 16)) == 1

@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([2, 3]), st.sampled_from([1, 6, 13]), st.sampled_from([1, 7]), st.sampled_from([3, 16, 35]),
       st.sampled_from(["plain", "b.T", "a.T", "bias_relu"]))
def test_bmm_through_the_engine_equals_numpy(nb, m, k, n, how):
  """With the size floor at 1, Tensor batched products of every layout (attention's q @ k.transpose, a transposed,
  a bias + relu epilogue) on the host's own CPU target: each equals float64 numpy."""
  an = rng.standard_normal((nb, k, m) if how == "a.T" else (nb, m, k)).astype(np.float32)
  bn = rng.standard_normal((nb, n, k) if how == "b.T" else (nb, k, n)).astype(np.float32)
  cn = rng.standard_normal(n).astype(np.float32)
  old, pack.PACK_MIN = pack.PACK_MIN, 1
  try:
    a, b = Tensor(an), Tensor(bn)
    out = (a.transpose(1, 2) if how == "a.T" else a) @ (b.transpose(1, 2) if how == "b.T" else b)
    if how == "bias_relu": out = (out + Tensor(cn)).relu()
    got = out.numpy()
  finally: pack.PACK_MIN = old
  want = (an.transpose(0, 2, 1) if how == "a.T" else an).astype(np.float64) @ (bn.transpose(0, 2, 1) if how == "b.T" else bn)
  np.testing.assert_allclose(got, np.maximum(want + cn, 0) if how == "bias_relu" else want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
