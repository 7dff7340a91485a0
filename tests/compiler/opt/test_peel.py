"""Loop peeling: cut points of comparisons, the comparisons gone from rendered C and PTX, results unchanged."""
import numpy as np
import pytest
from frontend import Tensor
from conftest import host_runs
from frontend.devices import open_device, target_of
from frontend.beam_runner import beam_runner
from compiler.schedule import create_schedule
from compiler.lower import lower, LoweredKernel
from compiler.dtypes import dtypes
from compiler.uop import UOp, Ops
from compiler.opt.peel import peel, peel_points, peel_range
from compiler.opt.base import Opt, OptError
from compiler.opt.apply import apply_opt
from compiler.opt.heuristic import apply_opts, optimize
from compiler.beam import build
from compiler.render_c import render_c
from compiler.render_ptx import render_ptx
from compiler.linearize import linearize

pytestmark = pytest.mark.usefixtures("on_cpu")   # C-path tests: CPU even under MOCKGPU=1 NV=1

DEV = open_device("CPU")
DI = target_of("CPU")

def kernel_of(t: Tensor):
  return [si for si in create_schedule([t.lazydata]) if si.kind == "kernel"][-1]

def zeros(*s) -> Tensor: return Tensor(np.zeros(s, np.float32)).realize()

def fused_pad_conv(x: Tensor, w: Tensor) -> Tensor:
  # conv2d(padding=1) copies the padded input first (an ungated conv kernel); padding the view instead keeps the
  # border comparisons inside the conv kernel, which is what peeling is for
  return x.pad((1, 1, 1, 1)).conv2d(w)

def rng_(n: int) -> UOp: return UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n),), (0, "reduce"))

@pytest.mark.parametrize("expr, n, want", [
  (lambda r: r.lt(3), 10, [3]),                    # r < 3
  (lambda r: (r * -1 + 7).lt(3), 10, [5]),         # 7 - r < 3  <=>  r >= 5
  (lambda r: (r * 2).lt(7), 10, [4]),              # 2r < 7  <=>  r <= 3
  (lambda r: r.ne(4), 10, [4, 5]),                 # only r == 4 differs
  (lambda r: r.lt(30), 10, []),                    # always true: nothing to cut
  (lambda r: (r // 2).lt(3), 10, []),              # not affine in r: not cut
])
def test_peel_points(expr, n, want):
  r = rng_(n)
  g = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 0)
  sink = UOp(Ops.SINK, None, (UOp(Ops.STORE, None, (g, UOp.const(dtypes.int32, 0), expr(r).where(UOp.const(dtypes.float32, 1.0), UOp.const(dtypes.float32, 2.0)))),))
  from compiler.lower import LoweredKernel
  assert peel_points(LoweredKernel("k", sink, [dtypes.float32], []), r) == want

def test_padded_sum_peels_away_every_gate_in_c_and_ptx():
  """sum over a padded row: the pieces over the padding read nothing, the middle one reads without a gate."""
  x = np.random.default_rng(0).standard_normal((4, 100)).astype(np.float32)
  si = kernel_of(Tensor(x).realize().pad(((0, 0), (3, 5))).sum(1))
  k = lower(si.ast, si.name)
  assert peel_points(k, k.reduce_ranges()[0]) == [3, 103]
  kp = peel(k, output_loops=False)
  c0, c1 = render_c(k), render_c(kp)
  assert "?" in c0 and "&&" in c0           # unpeeled: a gated load behind two bound checks
  assert "?" not in c1 and "&&" not in c1   # no gated load, no bound check left
  p0, p1 = render_ptx(k, "sm_90")[0], render_ptx(kp, "sm_90")[0]
  pred_loads = lambda src: [ln for ln in src.splitlines() if ln.strip().startswith("@") and "ld.global" in ln]
  assert pred_loads(p0) and not pred_loads(p1)
  assert "and.pred" in p0 and "and.pred" not in p1
  run = beam_runner(si, DEV)
  a, b = run(build(k, (), DI))[1][0], run(build(kp, (), DI))[1][0]
  np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)

def _middle_piece_compares(kp: LoweredKernel) -> list[UOp]:
  mid = kp.nests[1][0]
  stores = [s for s in kp.sink.src if mid in s.toposort()]
  assert stores
  return [u for s in stores for u in s.toposort() if u.op in (Ops.CMPLT, Ops.CMPNE) and mid in u.toposort()]

@pytest.mark.parametrize("opts", [(), (Opt("DEFAULT"), Opt("THREAD", 0))])
def test_conv_rows_peeled_results_unchanged(opts, cpu_target):
  """3x3 conv, pad 1: the output-row loop is cut at 1 and H-1; the middle piece compares nothing against its row."""
  DI = cpu_target   # (built for the target; run where the host can)
  si = kernel_of(fused_pad_conv(zeros(2, 3, 12, 16), zeros(8, 3, 3, 3)))
  k = apply_opts(lower(si.ast, si.name), opts, DI)
  rows = next(i for i, g in enumerate(k.global_ranges) if g.src[0].arg == 12)
  assert peel_points(k, k.global_ranges[rows]) == [1, 11]
  kp = apply_opt(k, Opt("PEEL", rows), DI)
  assert [c[0].src[0].arg for c in kp.nests] == [1, 10, 1]
  before = [u for u in k.sink.toposort() if u.op is Ops.CMPLT and k.global_ranges[rows] in u.toposort()]
  assert before and not _middle_piece_compares(kp)
  src = render_c(kp, 2 if kp.threaded is not None else 1)
  assert src.count("for (") == render_c(k, 2 if k.threaded is not None else 1).count("for (") + 2 * (len(k.global_ranges) - rows + len(k.reduce_ranges()))
  if not host_runs(cpu_target): return
  run = beam_runner(si, DEV)
  ref = run(build(lower(si.ast, si.name), (), DI))[1][0]
  got = run(build(lower(si.ast, si.name), tuple(opts) + (Opt("PEEL", rows),), DI))[1][0]
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)

def test_peel_errors():
  si = kernel_of(zeros(8, 8) @ zeros(8, 8))
  k = lower(si.ast, si.name)
  with pytest.raises(OptError, match="no comparison"): apply_opt(k, Opt("PEEL", 0), DI)
  si = kernel_of(fused_pad_conv(zeros(1, 1, 8, 8), zeros(2, 1, 3, 3)))
  k = lower(si.ast, si.name)
  rows = next(i for i, g in enumerate(k.global_ranges) if g.src[0].arg == 8)
  k = apply_opt(k, Opt("THREAD", rows + 1), DI.replace(ncores=2))   # the threaded loop inside the peeled one: refused
  with pytest.raises(OptError, match="threaded"): peel_range(k, k.global_ranges[rows])
  # the threaded loop itself: its pieces, at their offsets in it, are what the renderers cut by the chunks
  k = apply_opt(lower(si.ast, si.name), Opt("THREAD", rows), DI.replace(ncores=2))
  kp = peel_range(k, k.global_ranges[rows])
  assert kp.threaded is k.global_ranges[rows] and sorted(kp.thread_pieces.values()) == [0, 1, 7] and [c[0] for c in kp.nests] == list(kp.thread_pieces)

def test_default_opts_peel_the_conv_and_match_noopt(cpu_target_cores):
  """The default opts peel the padded conv's rows on this host's cores and on 16 or 64, where the cores split the rows
  themselves (a batch of 2 is too short: the threaded loop is then the peeled one) and the results match noopt's."""
  cpu_target = cpu_target_cores
  x, w = np.random.default_rng(1).standard_normal((2, 4, 10, 16)).astype(np.float32), np.random.default_rng(2).standard_normal((8, 4, 3, 3)).astype(np.float32)
  si = kernel_of(fused_pad_conv(Tensor(x).realize(), Tensor(w).realize()))
  k = optimize(lower(si.ast, si.name), cpu_target)
  assert any(o[0] == "PEEL" for o in k.applied_opts)
  prog = linearize(k)
  assert sum(u.op is Ops.STORE for u in prog) == len(k.sink.src)
  import torch
  ref = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy()
  for out in (fused_pad_conv(Tensor(x), Tensor(w)).numpy(), Tensor(x).conv2d(Tensor(w), padding=1).numpy()):
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("m, kk, n", [(61, 37, 53), (33, 17, 45), (6, 5, 37)])
def test_pad_cuts_odd_loops_so_tiles_apply(m, kk, n, cpu_target):
  """PAD: the output loops are cut at their last multiple of the tile; the main parts take vectors and row unrolls, the
  remainders run beside them; results equal the unoptimized kernel (where the host runs the target's code)."""
  t, lanes = cpu_target, cpu_target.simd_bytes // 4
  si = kernel_of(zeros(m, kk) @ zeros(kk, n))
  k0 = lower(si.ast, si.name)
  opts = (Opt("PAD", 1, 2 * lanes), Opt("VECTOR", 1, lanes), Opt("UPCAST", 1, 2), Opt("PAD", 0, 4), Opt("UPCAST", 0, 4))
  k = apply_opts(k0, opts, t)
  assert [o[0] for o in k.applied_opts].count("PAD") == 2 and len(k.nests) == 3   # rows tail, cols tail, and the corner
  assert f"float{lanes} " in render_c(k)
  if host_runs(cpu_target):
    run = beam_runner(si, DEV)
    np.testing.assert_allclose(run(build(k0, opts, t))[1][0], run(build(k0, (), t))[1][0], rtol=1e-5, atol=1e-5)
  with pytest.raises(OptError, match="threaded"): apply_opts(k0, (Opt("THREAD", 1), Opt("PAD", 1, 16)), t)
  with pytest.raises(OptError, match="every core"): apply_opts(k0, (Opt("PAD", 0, 4), Opt("THREAD", 0)), t)

def test_default_opts_vectorize_odd_matmuls():
  x, w = np.random.default_rng(5).standard_normal((37, 29)).astype(np.float32), np.random.default_rng(6).standard_normal((29, 61)).astype(np.float32)
  si = kernel_of(Tensor(x).realize() @ Tensor(w).realize())
  k = optimize(lower(si.ast, si.name), DI)
  assert ("PAD" in [o[0] for o in k.applied_opts]) and any(u.dtype is not None and u.dtype.count > 1 for u in k.sink.toposort())
  np.testing.assert_allclose((Tensor(x) @ Tensor(w)).numpy(), x @ w, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("h, w", [(1, 3), (2, 5), (4, 4)])
def test_gpu_peels_nested_reduction_loops_of_a_padded_conv(h, w):
  """On a GPU both reduction loops of a padded 3x3 conv (ky and kx) are cut; each piece of one gets its own copies of
  the other loop, so the pieces nest (this once failed to linearize) and the result is unchanged. (Gates that also
  depend on the output row stay: output loops are the grid on a GPU, not cut.)"""
  xn, wn = np.random.default_rng(h).standard_normal((1, 2, h, w)).astype(np.float32), np.ones((3, 2, 3, 3), np.float32)
  out = fused_pad_conv(Tensor(xn), Tensor(wn))
  si = kernel_of(out)
  k = peel(lower(si.ast, si.name), output_loops=False)
  render_ptx(k, "sm_90", linearize(k))
  assert len([o for o in k.applied_opts if o[0] == "PEEL"]) >= 2
  got = fused_pad_conv(Tensor(xn, device="PTXEMU"), Tensor(wn, device="PTXEMU")).numpy()
  np.testing.assert_allclose(got, out.numpy(), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("shape, dim", [((1000,), 0), ((1 << 16,), 0), ((1001,), 0), ((40, 3, 333), 2), ((64, 24), 1), ((64, 24), 0)])
def test_cat_kernel_peels_into_plain_copies(shape, dim, cpu_target_cores):
  """A cat (a select on the output index between padded pieces, frontend/function.py Cat) has its output loop cut at the
  pieces' borders (heuristic.py peel_gated_copy), on any cores, also along an odd last dim (peeled before the vector
  opts): no piece compares, selects or gates a load, so C vectorizes the copies. The result keeps each piece's -0.0."""
  n = int(np.prod(shape))
  a = np.where(np.arange(n) % 3 == 0, -0.0, np.arange(n)).astype(np.float32).reshape(shape)
  b = -a
  si = kernel_of(Tensor(a).realize().cat(Tensor(b).realize(), dim=dim))
  k = optimize(lower(si.ast, si.name), cpu_target_cores)
  assert any(o[0] == "PEEL" for o in k.applied_opts)
  ops = [u.op for u in k.sink.toposort()]
  assert Ops.WHERE not in ops and Ops.CMPLT not in ops and not any(u.op is Ops.LOAD and len(u.src) > 2 for u in k.sink.toposort())
  out = Tensor(a).cat(Tensor(b), dim=dim).numpy()
  assert (out.view(np.uint32) == np.concatenate([a, b], axis=dim).view(np.uint32)).all()

def test_where_of_the_same_condition_folds():
  """WHERE(c, WHERE(c, x, y), z) is WHERE(c, x, z) (and on the other side); WHERE(c, True, False) is c: the select of a cat
  over its padded pieces becomes one select whose condition is the pieces' load gate."""
  c = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("i", 0, 9)).lt(5)
  x, y, z = (UOp(Ops.DEFINE_VAR, dtypes.float32, (), (n, 0, 1)) for n in "xyz")
  assert c.where(c.where(x, y), z) is UOp(Ops.WHERE, dtypes.float32, (c, x, z))
  assert c.where(x, c.where(y, z)) is UOp(Ops.WHERE, dtypes.float32, (c, x, z))
  assert c.where(UOp.const(dtypes.bool, True), UOp.const(dtypes.bool, False)) is c

@pytest.mark.parametrize("shape, pads", [((3, 4), ((3, 0), (0, 0))), ((2, 3, 16, 8), ((0, 0), (0, 0), (1, 0), (0, 0))), ((5, 8), ((0, 2), (0, 0)))])
def test_peeled_pad_copy_folds_vector_loads_to_zeros(shape, pads):
  """A padded copy vectorized along its rows, then peeled at the padding rows: the padding piece's vector loads read
  nothing and fold to a vector of zeros (a scalar 0.0f stored through a float4 pointer was a C compile error)."""
  x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 1
  np.testing.assert_equal(Tensor(x).pad(pads).numpy(), np.pad(x, pads))
