"""Products packed through a scratch buffer (compiler/pack_pad.py): N not a multiple of a vector, or an epilogue read per
row with no tile height dividing M. The schedule is two packs, the product over whole tiles into the scratch, and the
original kernel reading scratch[:M, :N]; built for each CPU target, and run where the host can, it equals float64
numpy (odd M, N and K, prime K, A or B transposed, bias + relu epilogues, a Linear layer forward and backward)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
import compiler.pack as pack
from compiler.pack_pad import ScratchPlan, padded_columns
from compiler.schedule import create_schedule
from compiler.lower import lower
from compiler.uop import Ops
from conftest import host_runs, skip_unless_host_runs
from frontend import Tensor
from frontend.devices import target_of
from test_pack_avx2 import _empty, _plan, _run

pytestmark = [pytest.mark.usefixtures("on_cpu")]
rng = np.random.default_rng(28)

def test_padded_columns_are_whole_tiles():
  assert [padded_columns(n, 16) for n in (1, 32, 33, 1000, 1023)] == [32, 32, 64, 1024, 1024]
  assert [padded_columns(n, 8) for n in (1, 8, 9, 1000, 1023)] == [8, 8, 16, 1000, 1024]

@pytest.mark.parametrize("m,k,n,epilogue", [(1023, 1023, 1023, False), (300, 257, 1001, True), (262, 256, 264, True),
                                            (37, 13, 21, False), (13, 1, 5, True), (5, 263, 3, False)])
def test_odd_products_go_through_a_scratch(cpu_target, monkeypatch, m, k, n, epilogue):
  """Four kernels: pack A (rows padded to MR), pack B (columns padded to Np), the product over (Mp, Np) into a scratch,
  and the finish reading (M, N) of it (the relu there). The small shapes with the size floor lowered; run where the
  host can, each equals numpy."""
  if m * n * k < 1 << 24: monkeypatch.setattr(pack, "PACK_MIN", 1)
  monkeypatch.setattr(pack, "_plans", {})
  lanes = cpu_target.simd_bytes // 4
  a, b = _empty(m, k), _empty(k, n)
  items = _plan(a, b, lanes, epilogue)
  assert len(items) == 4, [si.name for si in items]
  mr, nr = items[2].ast.arg[1:3]
  mp, np_ = m + -m % mr, padded_columns(n, lanes)
  assert items[2].ast.arg[0] == "packed_matmul" and items[2].outputs[0].shape == (mp, np_) and np_ % nr == 0
  assert items[0].outputs[0].shape == (mp // mr, k, mr) and items[1].outputs[0].shape == (np_ // nr, k, nr)
  assert items[3].inputs == [items[2].outputs[0]] and not any(u.op is Ops.REDUCE_AXIS for u in items[3].ast.toposort())
  if not host_runs(cpu_target) or (m * n * k > 1 << 26 and cpu_target.simd_bytes == 32): return   # (one big run is enough)
  an, bn = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
  want = an.astype(np.float64) @ bn
  got = _run(items, {a: an, b: bn}, cpu_target).reshape(m, n)
  np.testing.assert_allclose(got, np.maximum(want, 0) if epilogue else want, rtol=1e-4, atol=1e-4 * np.sqrt(k))

def test_transposed_operands_and_lead_dims_through_a_scratch(cpu_target):
  """B read transposed from an (N, K) buffer and A (3, 87, 256) with its lead dims merged into 261 rows, N = 261:
  packed through the scratch, equal to numpy."""
  x, w, bt = _empty(3, 87, 256), _empty(256, 261), _empty(261, 256)
  lanes = cpu_target.simd_bytes // 4
  xn, wn, btn = (rng.standard_normal(t.shape).astype(np.float32) for t in (x, w, bt))
  for items, arrays, want in ((_plan(x, w, lanes), {x: xn, w: wn}, xn.reshape(261, 256).astype(np.float64) @ wn),
                              (_plan(x.reshape((261, 256)), bt.permute((1, 0)), lanes), {x: xn, bt: btn}, xn.reshape(261, 256).astype(np.float64) @ btn.T)):
    assert len(items) == 4 and items[2].ast.arg[0] == "packed_matmul", [si.name for si in items]
    if host_runs(cpu_target): np.testing.assert_allclose(_run(items, arrays, cpu_target).reshape(want.shape), want, rtol=1e-4, atol=1e-3)

@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([2, 7, 13, 30]), st.sampled_from([1, 5, 17]), st.sampled_from([1, 3, 9, 31, 40]),
       st.sampled_from(["plain", "a.T", "b.T", "bias_relu"]))
def test_scratch_products_equal_numpy(m, k, n, how):
  """With the size floor at 1, odd products of every layout and a bias + relu epilogue, through the engine (the host's
  own CPU target): each equals float64 numpy."""
  an = rng.standard_normal((k, m) if how == "a.T" else (m, k)).astype(np.float32)
  bn = rng.standard_normal((n, k) if how == "b.T" else (k, n)).astype(np.float32)
  cn = rng.standard_normal(n).astype(np.float32)
  old, pack.PACK_MIN = pack.PACK_MIN, 1
  try:
    a, b = Tensor(an), Tensor(bn)
    out = (a.T if how == "a.T" else a) @ (b.T if how == "b.T" else b)
    if how == "bias_relu": out = (out + Tensor(cn)).relu()
    got = out.numpy()
  finally: pack.PACK_MIN = old
  want = (an.T if how == "a.T" else an).astype(np.float64) @ (bn.T if how == "b.T" else bn)
  np.testing.assert_allclose(got, np.maximum(want + cn, 0) if how == "bias_relu" else want, rtol=1e-4, atol=1e-4 * np.sqrt(k))

def test_linear_layer_forward_and_backward(monkeypatch):
  """x @ W.T + b for a batch of 100, 784 -> 1004 features, then the gradients of W, b and x (the size floor at 64, so
  every product here is packed, the forward one through the scratch: 1004 columns are not whole vectors of 8 or 16
  lanes, rows 100 under an epilogue): equal to float64 numpy."""
  monkeypatch.setattr(pack, "PACK_MIN", 64)
  monkeypatch.setattr(pack, "_plans", {})
  r = np.random.default_rng(100)
  xn, wn, bn = (r.standard_normal(s).astype(np.float32) for s in ((100, 784), (1004, 784), (1004,)))
  x, w, b = Tensor(xn, requires_grad=True), Tensor(wn * 0.05, requires_grad=True), Tensor(bn, requires_grad=True)
  fwd = x.linear(w.T, b)
  lanes = target_of("CPU").simd_bytes // 4
  assert isinstance(pack._make_plan(create_schedule([fwd.lazydata])[-1].ast, lanes), ScratchPlan)
  y = fwd.relu()
  y.sum().backward()
  w64 = wn.astype(np.float64) * 0.05
  pre = xn.astype(np.float64) @ w64.T + bn
  np.testing.assert_allclose(yn := y.numpy(), np.maximum(pre, 0), rtol=1e-4, atol=1e-3)
  g = (yn > 0).astype(np.float64)   # (relu's mask as computed: a pre-activation within rounding of 0 may flip)
  np.testing.assert_allclose(b.grad.numpy(), g.sum(0), rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(w.grad.numpy(), g.T @ xn, rtol=1e-4, atol=1e-2)
  np.testing.assert_allclose(x.grad.numpy(), g @ w64, rtol=1e-4, atol=1e-3)

def test_avx512_packs_small_batches_of_big_products():
  """compiler/pack_avx512.py: 48+ rows, K and N of 256+, 2^26 multiply-adds (2^25 with N not whole 2-vector tiles);
  the schedule on 16 lanes follows it, and on 8 lanes compiler/pack_avx2.py's rule."""
  from compiler.pack_avx512 import avx512_packs
  assert avx512_packs(128, 2048, 2048) and avx512_packs(48, 2048, 2048) and avx512_packs(100, 1000, 784)
  assert not avx512_packs(32, 2048, 2048) and not avx512_packs(128, 512, 784) and not avx512_packs(1024, 1024, 64)
  assert not avx512_packs(64, 512, 1024) and avx512_packs(64, 1000, 784)   # 2^25: only with N not a multiple of 32
  assert len(_plan(_empty(128, 1024), _empty(1024, 1024), 16)) == 3 and len(_plan(_empty(32, 2048), _empty(2048, 2048), 16)) == 1
  assert len(_plan(_empty(100, 784), _empty(784, 1000), 16, True)) == 4   # x @ W + relu, batch 100: through the scratch

@pytest.mark.parametrize("m,k,n", [(1000, 100, 784), (300, 56, 261)])
def test_transposed_b_with_a_short_k_is_packed(cpu_target, m, k, n):
  """x @ W.T with W stored (N, K) and K under the size floor: packed (compiler/pack_strided.py: gathering B's columns
  in place was 3-5x slower), through the scratch where N is not whole tiles; the same product with B stored (K, N) and
  a tiny one stay in place. Run where the host can, it equals numpy."""
  from compiler.pack_strided import strided_b_packs
  assert strided_b_packs(m, n, k, k) and not strided_b_packs(m, n, k, 1) and not strided_b_packs(64, 64, 64, 64)
  lanes = cpu_target.simd_bytes // 4
  a, w = _empty(m, k), _empty(n, k)
  items = _plan(a, w.permute((1, 0)), lanes)
  assert len(items) in (3, 4) and items[2].ast.arg[0] == "packed_matmul", [si.name for si in items]
  assert len(_plan(a, _empty(k, n), lanes)) == 1 and len(_plan(_empty(32, k), _empty(32, k).permute((1, 0)), lanes)) == 1
  skip_unless_host_runs(cpu_target)
  an, wn = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
  np.testing.assert_allclose(_run(items, {a: an, w: wn}, cpu_target).reshape(m, n), an.astype(np.float64) @ wn.T, rtol=1e-4, atol=1e-3)

def test_compare_epilogue_goes_through_the_scratch(cpu_target):
  """`(x @ w > 0)` (relu's backward mask) in the product's kernel: the tile can't hold it (a bool vector per element),
  so the product is packed alone into the scratch, gets its register tile, and the finish compares; equals numpy."""
  from compiler.opt.matmul import packed_matmul_tile
  lanes = cpu_target.simd_bytes // 4
  a, b = _empty(264, 256), _empty(256, 288)
  mm = _plan(a, b, lanes)[-1].ast.src[0].src[0]
  assert pack.epilogue_fits_tile(mm) and pack.epilogue_fits_tile(mm.alu(Ops.MAX, mm.const_like(0.0)))
  m, k, n = 264, 256, 288
  full = (m, n, k)
  prod = a.reshape((m, 1, k)).expand(full).alu(Ops.MUL, b.permute((1, 0)).reshape((1, n, k)).expand(full)).r(Ops.ADD, (2,))
  mask = prod.const_like(0.0).alu(Ops.CMPLT, prod).cast(prod.dtype)
  items = pack.pack_matmuls(create_schedule([mask]), lambda device: lanes)
  assert len(items) == 4 and not pack.epilogue_fits_tile(items[3].ast), [si.name for si in items]
  assert packed_matmul_tile(lower(items[2].ast, items[2].name), cpu_target) is not None
  skip_unless_host_runs(cpu_target)
  an, bn = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
  want = an.astype(np.float64) @ bn
  got = _run(items, {a: an, b: bn}, cpu_target).reshape(m, n)
  ok = np.abs(want) > 1e-3   # (a product within rounding of 0 may compare either way)
  np.testing.assert_array_equal(got[ok], (want > 0)[ok].astype(np.float32))
