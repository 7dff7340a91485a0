"""Packed matrix products (compiler/pack.py + compiler/opt/matmul.py): the schedule gains two copy kernels only for big
float32 products on vector CPUs, the product's hot loop reads both packed operands contiguously (no div/mod left),
every packed product equals numpy and the unpacked kernel (hypothesis over small shapes with the size floor lowered,
padded rows, shared operands, transposed views, epilogues), and TinyJit replays the pack kernels."""
import os, re
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
import compiler.pack as pack
from compiler.pack import merge_leading_dims, pack_matmuls, tile_shape
from compiler.schedule import create_schedule
from compiler.uop import Ops
from compiler.lower import lower
from compiler.opt.base import Opt, OptError
from compiler.opt.apply import apply_opt
from compiler.opt.heuristic import optimize
from compiler.render_c import render_c
from compiler.linearize import linearize
from frontend import Tensor, TinyJit, GlobalCounters
from frontend.devices import target_of

pytestmark = [pytest.mark.usefixtures("on_cpu")]   # CPU opts: CPU tensors even under MOCKGPU=1 NV=1
DEV = target_of("CPU")
LANES = DEV.simd_bytes // 4
rng = np.random.default_rng(11)
def rnd(*shape) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)

pytestmark.append(pytest.mark.skipif(LANES < 8, reason="this CPU has no 256-bit vectors: products are never packed"))

@pytest.fixture(params=["B packed", "B in place"])
def b_kernels(request, monkeypatch) -> int:
  """Both ways a B is read (compiler/pack.py b_in_place): packed (B_IN_PLACE = 0), or, as these Bs are small, where it
  is; the number of kernels of a packed product's schedule. A is packed in both (A_IN_PLACE = 0: an A read in place
  beside B on 16 lanes has tests of its own, tests/compiler/pack/test_pack_a_in_place.py)."""
  monkeypatch.setattr(pack, "A_IN_PLACE", 0)
  if request.param == "B packed": monkeypatch.setattr(pack, "B_IN_PLACE", 0)
  return 3 if request.param == "B packed" else 2

def _names(t: Tensor, lanes: int = LANES) -> list[str]:
  return [si.name for si in pack_matmuls(create_schedule([t.lazydata]), lambda d: lanes)]

def test_only_big_float32_products_are_packed(cpu_target, b_kernels):
  a, b, lanes = Tensor(rnd(256, 256)), Tensor(rnd(256, 256)), cpu_target.simd_bytes // 4
  assert len(_names(a @ b, lanes)) == b_kernels                # pack A, pack B (unless read in place), the product
  assert len(_names(Tensor(rnd(64, 64)) @ Tensor(rnd(64, 64)), lanes)) == 1
  assert len(_names(a.half() @ b.half(), lanes)) == 1          # float16: no vectors, no packing
  assert len(_names((a * b).sum(1), lanes)) == 1               # a reduction, not a product
  assert pack_matmuls(create_schedule([(a @ b).lazydata]), lambda d: 0)[0].name.startswith("r_")   # a GPU: left alone

def test_tile_shapes_fit_the_registers():
  assert tile_shape(16, 1024, 1024, True) == (12, 32)   # AVX-512: 24 accumulators + 2 B vectors + a broadcast <= 32
  assert tile_shape(16, 1024, 1024, False) == (8, 32)   # rows can't be padded: the largest tile dividing M
  assert tile_shape(8, 1024, 1024, True) == (6, 16)     # AVX2: 12 + 2 + 1 <= 16
  assert tile_shape(16, 1024, 1000, True) is None        # N not a multiple of a vector

def test_packed_kernel_reads_contiguously(cpu_target, monkeypatch):
  monkeypatch.setattr(pack, "A8_IN_PLACE", 0)   # (A packed: 8 lanes would read this one in place, rows not padded)
  a, b, lanes = Tensor(rnd(301, 256)), Tensor(rnd(256, 512)), cpu_target.simd_bytes // 4
  si = pack_matmuls(create_schedule([(a @ b).lazydata]), lambda d: lanes)[-1]
  assert si.alloc_nbytes == (312 if lanes == 16 else 306) * 512 * 4   # rows padded to the tile, computed past the end
  k = optimize(lower(si.ast, si.name), cpu_target)
  src = render_c(k, 2, linearize(k))
  inner = src[src.index("< 256; r"):]                   # the reduction loop and what follows
  assert not re.search(r"[%/]", inner.split("}")[0]), inner[:800]
  assert inner.count("*((float") >= 2                   # vector loads of PB
  assert k.threaded is k.global_ranges[0] and len(k.global_ranges) == 3

@pytest.mark.parametrize("m,k,n", [(256, 256, 256), (300, 257, 512), (512, 384, 272), (259, 256, 256)])
def test_packed_matmul_equals_numpy(m, k, n, b_kernels):
  an, bn = rnd(m, k), rnd(k, n)
  GlobalCounters.reset()
  got = (Tensor(an) @ Tensor(bn)).numpy()
  np.testing.assert_allclose(got, an.astype(np.float64) @ bn, rtol=1e-4, atol=1e-4 * np.sqrt(k))

def test_shared_operand_transposed_views_and_epilogue(b_kernels):
  an, wn, bias = rnd(320, 256), rnd(272, 256), rnd(272)
  a, w = Tensor(an), Tensor(wn)
  ref = np.maximum(an.astype(np.float64) @ wn.T + bias, 0)
  np.testing.assert_allclose((a @ w.T + Tensor(bias)).relu().numpy(), ref, rtol=1e-4, atol=1e-3)   # x @ W.T with an epilogue
  sq = rnd(256, 256)
  np.testing.assert_allclose((Tensor(sq) @ Tensor(sq)).numpy(), sq.astype(np.float64) @ sq, rtol=1e-4, atol=1e-3)   # a @ a
  t = Tensor(sq)
  np.testing.assert_allclose((t.T @ t).numpy(), sq.T.astype(np.float64) @ sq, rtol=1e-4, atol=1e-3)
  assert len(_names(a @ w.T + Tensor(bias))) == 3      # the epilogue reads bias per column: still packed (M=320 = 8 * 40)
  assert len(_names(Tensor(sq) @ Tensor(sq))) == b_kernels   # a @ a: A packed into a slot of its own, B as the fixture says

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([1, 3, 12, 13, 25, 37, 64]), st.sampled_from([1, 2, 7, 16, 33]), st.sampled_from([16, 32, 48, 64]),
       st.sampled_from(["plain", "a.T", "b.T", "both.T", "strided"]), st.booleans())
def test_packed_equals_unpacked_small(m, k, n, layout, b_packed):
  """With the size floor at 1, every product whose N is a multiple of a vector is packed, whatever the strides of its
  operands (transposed, every other row), with B packed too or (rows contiguous) read in place; it equals NOOPT=1."""
  an = rnd(k, m) if layout in ("a.T", "both.T") else rnd(2 * m, k) if layout == "strided" else rnd(m, k)
  bn = rnd(n, k) if layout in ("b.T", "both.T") else rnd(k, n)
  def f(a: Tensor, b: Tensor) -> Tensor:
    a = a.T if layout in ("a.T", "both.T") else a[::2] if layout == "strided" else a
    return a @ (b.T if layout in ("b.T", "both.T") else b)
  old, old_b = pack.PACK_MIN, pack.B_IN_PLACE
  pack.PACK_MIN, pack.B_IN_PLACE = 1, 0 if b_packed else old_b
  try:
    got = f(Tensor(an), Tensor(bn)).numpy()
    os.environ["NOOPT"] = "1"
    want = f(Tensor(an), Tensor(bn)).numpy()
  finally:
    pack.PACK_MIN, pack.B_IN_PLACE = old, old_b
    os.environ.pop("NOOPT", None)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(k))

def test_split_opt_and_its_errors():
  a, b = Tensor(rnd(64, 64)), Tensor(rnd(64, 64))
  k = lower(create_schedule([(a + b).lazydata])[0].ast)
  k2 = apply_opt(k, Opt("SPLIT", 0, 4), DEV)
  assert [r.src[0].arg for r in k2.global_ranges] == [16, 4, 64]
  with pytest.raises(OptError, match="does not divide"): apply_opt(k, Opt("SPLIT", 0, 5), DEV)
  with pytest.raises(OptError, match="axis out of range"): apply_opt(k, Opt("SPLIT", 3, 2), DEV)

def test_jit_replays_the_pack_kernels():
  @TinyJit
  def f(x, y): return (x @ y).realize()
  for _ in range(3):
    an, bn = rnd(256, 256), rnd(256, 256)
    out = f(Tensor(an).realize(), Tensor(bn).realize())
    np.testing.assert_allclose(out.numpy(), an.astype(np.float64) @ bn, rtol=1e-4, atol=1e-3)

def test_reshaped_product_pads_rows_too(b_kernels):
  """`(a @ b).contiguous()` stores the product through a reshape to (M, N): rows are still outermost, so M = 301 is
  padded to the tile like the plain product, and the result is exact."""
  an, bn = rnd(301, 256), rnd(256, 256)
  out = (Tensor(an) @ Tensor(bn)).contiguous()
  items = pack_matmuls(create_schedule([out.lazydata]), lambda d: LANES)
  assert len(items) == b_kernels and items[-1].alloc_nbytes is not None
  np.testing.assert_allclose(out.numpy(), an.astype(np.float64) @ bn, rtol=1e-4, atol=1e-3)

def test_padded_product_copies_only_the_tensor(monkeypatch):
  """A padded product's buffer is longer than its tensor: copying it to another device (eagerly, or replayed by
  TinyJit) moves the tensor's bytes, not the padding (which would not fit the destination). (A packed, A_IN_PLACE = 0:
  on 8 lanes a small A is otherwise read in place whatever its rows, and nothing is padded.)"""
  monkeypatch.setattr(pack, "A_IN_PLACE", 0)
  an, bn = rnd(301, 256), rnd(256, 256)
  ref = an.astype(np.float64) @ bn
  c = (Tensor(an) @ Tensor(bn)).contiguous().realize()
  assert c.lazydata.base.buffer.nbytes > c.nbytes()
  np.testing.assert_allclose(c.to("PTXEMU").numpy(), ref, rtol=1e-4, atol=1e-3)
  @TinyJit
  def f(x, y): return (x @ y).contiguous().to("PTXEMU").realize()
  for _ in range(3):
    an = rnd(301, 256)
    np.testing.assert_allclose(f(Tensor(an).realize(), Tensor(bn).realize()).numpy(), an.astype(np.float64) @ bn, rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("bias", [False, True])
def test_lead_dims_merge_into_rows(bias, b_kernels):
  """x of shape (B, T, C) @ W is one (B*T, C) @ (C, N) product: packed like a 2-D one (with a bias epilogue too, its
  views merged the same way). A batch of different right-hand matrices (bmm) can't merge and is left alone."""
  xn, wn, bn = rnd(3, 100, 256), rnd(256, 272), rnd(272)
  x, w, b = Tensor(xn), Tensor(wn), Tensor(bn)
  out = x.linear(w, b) if bias else x @ w
  items = pack_matmuls(create_schedule([out.lazydata]), lambda d: LANES)
  assert len(items) == b_kernels and items[-1].name == "r_300_272_256"   # B*T = 300 rows, a multiple of both tile heights
  ref = xn.astype(np.float64) @ wn + (bn if bias else 0)
  np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-3)
  bmm = x @ Tensor(rnd(3, 256, 272))
  assert len(pack_matmuls(create_schedule([bmm.lazydata]), lambda d: LANES)) == 1
  assert merge_leading_dims(create_schedule([bmm.lazydata])[-1].ast) is None

def test_small_b_is_read_in_place(monkeypatch):
  """A B of at most B_IN_PLACE bytes with contiguous rows is not packed: the product reads the caller's buffer (its
  own input slot, with B's own strides); a bigger B, or one transposed (its vectors would be gathers), is packed.
  (A packed: A_IN_PLACE = 0.)"""
  monkeypatch.setattr(pack, "A_IN_PLACE", 0)
  def plan(a: Tensor, b: Tensor):
    items = pack_matmuls(create_schedule([(a @ b).lazydata]), lambda d: LANES)
    return items, [u for u in items[-1].ast.toposort() if u.op is Ops.LOAD]
  a, b = Tensor(rnd(512, 512)).realize(), Tensor(rnd(512, 512)).realize()
  items, loads = plan(a, b)
  assert len(items) == 2 and items[0].inputs[0] is a.lazydata.base   # only A is packed
  slot = items[-1].inputs.index(b.lazydata.base) + 1
  assert [u.arg[1].views[0].strides for u in loads if u.arg[0] == slot] == [(0, 1, 512)]   # B[k, j] where it is
  assert len(plan(a, b.T)[0]) == 3                                                       # transposed: packed
  big = Tensor.empty(1024, 1024).realize()
  assert len(plan(big, big.contiguous().realize())[0]) == 3                                # 4 MiB: packed

@pytest.mark.parametrize("m,k,n", [(2, 256, 256), (257, 1, 512), (301, 251, 256), (260, 256, 288), (13, 7, 16)])
def test_b_in_place_odd_shapes(m, k, n, monkeypatch):
  """B read in place under products the size floor would leave alone (two rows, K=1, a prime K, padded rows, N a
  vector but not a tile of two, N one vector): equal to numpy, and its schedule packs A only. (A_IN_PLACE = 0: on 8
  lanes a small A beside such a B is read in place too, whatever its rows: compiler/pack.py a_in_place.)"""
  monkeypatch.setattr(pack, "PACK_MIN", 1)
  monkeypatch.setattr(pack, "A_IN_PLACE", 0)
  an, bn = rnd(m, k), rnd(k, n)
  out = Tensor(an) @ Tensor(bn)
  assert len(pack_matmuls(create_schedule([out.lazydata]), lambda d: LANES)) == (2 if n % LANES == 0 else 1)
  np.testing.assert_allclose(out.numpy(), an.astype(np.float64) @ bn, rtol=1e-4, atol=1e-4 * np.sqrt(k))

def test_b_in_place_batched_and_offset(monkeypatch):
  """x of shape (B, T, C) @ W (rows merged) and a B that starts inside a bigger buffer (a slice of rows and columns:
  rows still contiguous) read in place: equal to numpy. (A packed: A_IN_PLACE = 0.)"""
  monkeypatch.setattr(pack, "A_IN_PLACE", 0)
  xn, wn = rnd(3, 100, 256), rnd(300, 600)
  x, w = Tensor(xn), Tensor(wn)[20:276, 64:320]
  out = x @ w
  items = pack_matmuls(create_schedule([out.lazydata]), lambda d: LANES)
  assert len(items) == 2
  np.testing.assert_allclose(out.numpy(), xn.astype(np.float64) @ wn[20:276, 64:320], rtol=1e-4, atol=1e-3)
