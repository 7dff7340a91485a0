"""A read in place beside a B read in place on 16 lanes (compiler/pack.py a_in_place): a product whose A (rows contiguous
along K, at most A_IN_PLACE bytes, M a multiple of 8 or 12) and B are both small is one kernel with no pack launch,
its tile's height divides M (no padded rows: they would read past A's end); any other A is packed as before, and 8
lanes (AVX2) always pack A. Every such product equals float64 numpy on each target (K=1, prime K, one-vector-wide N,
an epilogue, a @ a, strided and offset rows, lead dims merged into rows, TinyJit)."""
import numpy as np
import pytest
import compiler.pack as pack
from compiler.schedule import create_schedule
from compiler.uop import Ops
from conftest import skip_unless_host_runs
from frontend import Tensor, TinyJit
from frontend.devices import target_of
from test_pack_avx2 import _empty, _plan, _run

pytestmark = [pytest.mark.usefixtures("on_cpu")]
rng = np.random.default_rng(38)
def rnd(*shape) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)

@pytest.mark.parametrize("m,k,n,kernels,mr", [(512, 512, 512, 1, 8), (384, 512, 512, 1, 12), (504, 512, 512, 1, 12),
                                              (260, 512, 512, 2, 12), (1024, 512, 512, 2, 12), (512, 1024, 1024, 3, 12)])
def test_which_products_read_a_in_place(cpu_target, m, k, n, kernels, mr):
  """On 16 lanes: 512^3 (8-row tile: 12 does not divide 512), 384 and 504 rows (12-row tile) are one kernel that reads
  A's own slot with A's strides; 260 rows (neither 8 nor 12 divides it), a 2 MiB A and a 4 MiB B (then packed, so A
  is too) keep their packs and the padded 12-row tile. 8 lanes: A in place beside B in place too, whatever M (the 6-row
  tile's leftover rows are a smaller tile: tests/compiler/pack/test_pack_a_in_place_avx2.py), else packed."""
  lanes = cpu_target.simd_bytes // 4
  a, b = _empty(m, k), _empty(k, n)
  items = _plan(a, b, lanes)
  if lanes == 8:
    here = m * k * 4 <= pack.A_IN_PLACE and k * n * 4 <= pack.B_IN_PLACE
    assert len(items) == (1 if here else kernels) and (items[0].inputs == [a, b]) == here, [si.name for si in items]
    assert items[-1].ast.arg[:3] == ("packed_matmul", 6, 16) and (items[-1].alloc_nbytes is None) == (here or m % 6 == 0)
    return
  assert len(items) == kernels and items[-1].ast.arg[:3] == ("packed_matmul", mr, 32), ([si.name for si in items], items[-1].ast.arg)
  if kernels == 1:
    assert items[0].inputs == [a, b] and items[0].alloc_nbytes is None
    loads = [u for u in items[0].ast.toposort() if u.op is Ops.LOAD]
    assert sorted(u.arg[1].views[0].strides for u in loads) == sorted([(k, 0, 1), (0, 1, n)])   # both where they are

def test_transposed_or_small_a_is_packed(cpu_target):
  """A transposed (its rows not contiguous) is packed; with A_IN_PLACE = 0 it is packed too; M=1 is never packed."""
  lanes = cpu_target.simd_bytes // 4
  at, b = _empty(512, 512), _empty(512, 512)
  assert len(_plan(at.permute((1, 0)), b, lanes)) == 2
  assert len(_plan(_empty(1, 512), b, lanes)) == 1 and _plan(_empty(1, 512), b, lanes)[0].ast.arg is None
  old, pack.A_IN_PLACE = pack.A_IN_PLACE, 0
  try: assert len(_plan(_empty(512, 512), b, lanes)) == 2
  finally: pack.A_IN_PLACE = old

@pytest.mark.parametrize("m,k,n,epilogue", [(8, 1, 16, False), (12, 7, 32, False), (96, 251, 272, False),
                                            (24, 256, 48, True), (264, 256, 272, True), (512, 512, 512, False)])
def test_a_in_place_equals_numpy_on_each_target(cpu_target, monkeypatch, m, k, n, epilogue):
  """M of one tile (8, 12), K=1, prime K (7, 251), N one vector (16) or an odd number of them (48, 272), a relu
  epilogue, 512^3 (the size floor lowered so the small ones are packed): one kernel on 16 lanes, equal to numpy."""
  monkeypatch.setattr(pack, "PACK_MIN", 1)
  monkeypatch.setattr(pack, "_plans", {})
  lanes = cpu_target.simd_bytes // 4
  a, b = _empty(m, k), _empty(k, n)
  items = _plan(a, b, lanes, epilogue)
  assert items[-1].ast.arg[0] == "packed_matmul" and (lanes == 8 or len(items) == 1), [si.name for si in items]
  skip_unless_host_runs(cpu_target)
  an, bn = rnd(m, k), rnd(k, n)
  want = an.astype(np.float64) @ bn
  got = _run(items, {a: an, b: bn}, cpu_target).reshape(m, n)
  np.testing.assert_allclose(got, np.maximum(want, 0) if epilogue else want, rtol=1e-4, atol=1e-4 * np.sqrt(k) + 1e-5)

def _kernels(t: Tensor) -> int:
  return len(pack.pack_matmuls(create_schedule([t.lazydata]), lambda d: target_of("CPU").simd_bytes // 4))

@pytest.mark.skipif(target_of("CPU").simd_bytes != 64, reason="this host can't run x86-64-v4 kernels (A is read in place on 16-lane hosts only)")
def test_a_in_place_views_on_this_host():
  """Views of A read in place (a @ a, every other row of a bigger A, a slice that starts inside its buffer, (B, T, C)
  rows merged, with bias and relu) and A transposed (packed): each realized here equals numpy."""
  sq, big, wide, x, w, bias = rnd(512, 512), rnd(1024, 256), rnd(600, 400), rnd(4, 96, 256), rnd(256, 256), rnd(256)
  cases = [(lambda: Tensor(sq) @ Tensor(sq), sq.astype(np.float64) @ sq, 1),
           (lambda: Tensor(big)[::2] @ Tensor(w), big[::2].astype(np.float64) @ w, 1),
           (lambda: Tensor(wide)[8:520, 64:320] @ Tensor(w), wide[8:520, 64:320].astype(np.float64) @ w, 1),
           (lambda: (Tensor(x) @ Tensor(w) + Tensor(bias)).relu(), np.maximum(x.astype(np.float64) @ w + bias, 0), 1),
           (lambda: Tensor(sq).T @ Tensor(w.repeat(2, 0)), sq.T.astype(np.float64) @ w.repeat(2, 0), 2)]
  for make, want, kernels in cases:
    assert _kernels(make()) == kernels
    np.testing.assert_allclose(make().numpy(), want, rtol=1e-4, atol=1e-3)

def test_jit_replays_a_product_read_in_place():
  @TinyJit
  def f(x, y): return (x @ y).realize()
  for _ in range(3):
    an, bn = rnd(384, 256), rnd(256, 512)
    np.testing.assert_allclose(f(Tensor(an).realize(), Tensor(bn).realize()).numpy(), an.astype(np.float64) @ bn, rtol=1e-4, atol=1e-3)
