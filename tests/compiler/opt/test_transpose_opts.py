"""Permuted copies (compiler/opt/transpose.py transpose_tile) and the convs vectorized along their output channels on
CPUs of 16 lanes (frontend/nn_ops.py _short_odd_rows), whose outputs such copies transpose back (issue 28).

The copies: the store vectorized, the load's contiguous loop unrolled, big blocks cut into vector-wide pieces outside it;
every result equals numpy's transpose (the kernel built for each CPU target, run where the host can). The convs: with
the frontend choosing as it does for 16 lanes (AVX-512) and for 8 (AVX2), forward and both gradients equal torch's for
5x5 and 3x3 kernels, odd sizes, padding, and (through their own paths, whose copies are tiled the same way) stride 2,
dilation 2 and groups."""
import numpy as np
import pytest
from frontend import Tensor
from conftest import host_runs
from tests.conv_check import jit_conv_grads_match_torch
from frontend.devices import open_device
from frontend.beam_runner import beam_runner
from compiler.schedule import create_schedule
from compiler.lower import lower
from compiler.opt.heuristic import optimize
from compiler.opt.transpose import transpose_tile
from compiler.beam import build
import frontend.nn_ops as nn_ops

pytestmark = pytest.mark.usefixtures("on_cpu")   # C-path tests: CPU even under MOCKGPU=1 NV=1

DEV = open_device("CPU")
rng = np.random.default_rng(280)

def rnd(*s) -> np.ndarray: return rng.standard_normal(s).astype(np.float32)

def kernel_of(t: Tensor):
  return [si for si in create_schedule([t.lazydata]) if si.kind == "kernel"][-1]

def run_built(si, k, target) -> np.ndarray:
  """The output of kernel `k` (built for `target` from schedule item si) on beam_runner's inputs."""
  return beam_runner(si, DEV)(build(k, (), target))[1][0]

def kinds(k) -> list[str]: return [o[0] for o in k.applied_opts]

@pytest.mark.parametrize("shape,perm", [((4, 576, 32), (0, 2, 1)), ((3, 24, 24, 32), (0, 3, 1, 2)), ((2, 32, 20, 20), (0, 2, 3, 1)),
                                        ((5, 20, 32, 20), (0, 1, 3, 2)), ((3, 8, 8, 64), (0, 3, 1, 2)), ((7, 12, 40), (0, 2, 1)),
                                        ((48, 36), (1, 0)), ((2, 4, 32, 16), (0, 3, 1, 2)), ((3, 6, 6, 64), (0, 3, 1, 2))])
def test_permuted_copies_are_tiled_and_exact(shape, perm, cpu_target):
  """A transposing copy: the heuristic's kernel stores whole vectors along its output row and unrolls the loop its load
  is contiguous along (SPLIT + SWAP first when that block is big); the values are the transpose, exactly."""
  xn = rnd(*shape)
  si = kernel_of(Tensor(xn).realize().permute(*perm).contiguous())
  k = optimize(lower(si.ast, si.name), cpu_target)
  assert {"VECTOR", "UPCAST"} <= set(kinds(k)), k.applied_opts
  if shape[1] * shape[-1] * 4 > 16 << 10 and perm == (0, 2, 1): assert kinds(k)[:2] == ["SPLIT", "SWAP"], k.applied_opts
  if host_runs(cpu_target):
    np.testing.assert_array_equal(run_built(si, k, cpu_target).reshape(np.transpose(np.empty(shape), perm).shape),
                                  beam_runner(si, DEV)(build(lower(si.ast, si.name), (), cpu_target))[1][0].reshape(np.transpose(np.empty(shape), perm).shape))
  np.testing.assert_array_equal(Tensor(xn).permute(*perm).contiguous().numpy(), np.transpose(xn, perm))

def test_permuted_copy_with_fused_work_is_tiled_and_exact(cpu_target):
  """relu's backward fused into the transposing copy of a conv's output gradient (two gathered loads, a compare): tiled
  the same way, the values those of the unoptimized kernel."""
  g, x = rnd(3, 32, 12, 12), rnd(3, 32, 12, 12)
  t = (Tensor(g).realize() * (Tensor(x).realize() > 0)).permute(0, 2, 3, 1).contiguous()
  si = kernel_of(t)
  k = optimize(lower(si.ast, si.name), cpu_target)
  assert {"VECTOR", "UPCAST"} <= set(kinds(k)), k.applied_opts
  if host_runs(cpu_target):
    np.testing.assert_allclose(run_built(si, k, cpu_target), run_built(si, lower(si.ast, si.name), cpu_target), rtol=0, atol=0)
  np.testing.assert_array_equal(t.numpy(), np.transpose(g * (x > 0), (0, 2, 3, 1)))

def test_copies_that_are_not_transposes_are_left_to_the_other_opts(cpu_target):
  """A contiguous copy, a broadcast along the row, a reduction: transpose_tile declines (None)."""
  x = Tensor(rnd(4, 32, 32)).realize()
  for t in (x + 1, x.sum(axis=1, keepdim=True).expand(4, 32, 32).contiguous() * 0 + x, x.sum(axis=2)):
    si = kernel_of(t)
    assert transpose_tile(lower(si.ast, si.name), cpu_target.lanes, cpu_target, lambda k, w: False) is None, si.name

CONVS = {  # name: (x shape, w shape, conv2d keywords)
  "5x5 rows 20": ((3, 6, 24, 24), (16, 6, 5, 5), {}),
  "5x5 rows 24 pad 2": ((2, 3, 24, 24), (32, 3, 5, 5), {"padding": 2}),
  "3x3 rows 8": ((3, 16, 10, 10), (32, 16, 3, 3), {}),
  "3x3 rows 13 pad 1": ((1, 5, 13, 13), (16, 5, 3, 3), {"padding": 1}),
  "3x3 rows 20 odd batch": ((5, 8, 22, 22), (16, 8, 3, 3), {}),
  "5x5 non-square": ((2, 4, 14, 28), (16, 4, 5, 5), {"padding": 1}),
  "stride 2": ((2, 8, 17, 17), (16, 8, 3, 3), {"stride": 2, "padding": 1}),
  "dilation 2": ((2, 8, 20, 20), (16, 8, 3, 3), {"dilation": 2, "padding": 2}),
  "groups 2": ((2, 8, 20, 20), (32, 4, 5, 5), {"groups": 2, "padding": 2}),
}

@pytest.mark.parametrize("lanes", [16, 8])
@pytest.mark.parametrize("name", list(CONVS))
def test_convs_on_each_vector_width_match_torch(name, lanes, monkeypatch):
  """The frontend builds the conv as it does for a CPU of `lanes` float32 lanes (its kernels are built for this host):
  a TinyJit step's output and both gradients equal float64 torch's. With 16 lanes the stride-1 one-group convs whose
  rows waste lanes run along their output channels and store channels-first themselves: the forward is one kernel
  (n, cout, oy, ox) whose register tile's vectors are the channels, and no copy transposes its output back."""
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: lanes)
  (xs, ws, kw) = CONVS[name]
  xn, wn = rnd(*xs), rnd(*ws) * 0.3
  _, step = jit_conv_grads_match_torch(xn, wn, kw, realized=True, gw_atol=2e-3)
  cout = ws[0]
  ow = xs[3] + 2 * kw.get("padding", 0) - ws[3] + 1
  if lanes == 16 and not set(kw) - {"padding"} and nn_ops.row_lane_use(ow, 16) < nn_ops.ROW_LANE_USE_MIN:
    ks = [ei.kernel for ei in step.items if ei.kind == "kernel"]
    fwd = next(k for k in ks if k.name.startswith("r_") and k.name.endswith(f"_{cout}_{ws[1]}_{ws[2]}_{ws[3]}"))
    assert fwd.name.startswith(f"r_{xs[0]}_"), fwd.name
    assert fwd.name.split("_")[-4] == str(cout), fwd.name   # (n, oy, ox, 1, cout) then the taps
    # the channels as a TILE's vectors (the row is no multiple of 16), of the host's width (the kernels are built for
    # this host: 8 lanes on AVX2); 13 x 13 outputs of one image leave the tile no rows (compiler/opt/conv.py
    # channels_innermost): the row's overlapping vectors
    tile, host_lanes = fwd.compiled.applied_opts[0], open_device("CPU").target["simd_bytes"] // 4
    assert (tile[0] == "TILE" and tile[4] == host_lanes and ow % 16) or (tile[0] == "OVERLAP_VECTOR" and xs[0] * ow == 13), fwd.compiled.applied_opts

def test_channel_conv_over_rows_of_20_takes_two_image_rows(cpu_target, monkeypatch):
  """The 5x5 conv over 20-wide output rows along its 32 channels (as built for 16 lanes: it stores channels-first, and
  the opts move its channel loop innermost, compiler/opt/conv.py channels_innermost): its tile of 4 columns x 2
  vectors of channels gets no more columns (5 left), so with AVX-512's 32 registers it takes 2 image rows
  (compiler/opt/conv.py window_rows: 16 accumulators), with AVX2's 16 it does not; no spills, and the kernel computes
  what NOOPT does."""
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: 16)
  x, w = Tensor(rnd(2, 8, 24, 24)).realize(), Tensor(rnd(32, 8, 5, 5)).realize()
  si = next(s for s in create_schedule([x.conv2d(w).lazydata]) if s.kind == "kernel" and lower(s.ast).reduce_ranges())
  k0 = lower(si.ast, si.name)
  assert [r.src[0].arg for r in k0.global_ranges] == [2, 32, 20, 20], si.name   # (n, cout, oy, ox): stored channels-first
  co, oy = k0.global_ranges[1].arg[0], k0.global_ranges[2].arg[0]
  k = optimize(k0, cpu_target)
  assert k.applied_opts[0][0] == "TILE" and k.applied_opts[0][3] == co and k.applied_opts[0][5] == 2, k.applied_opts
  assert (("UPCAST", oy, 2) in k.applied_opts) == (cpu_target.vector_registers >= 32), k.applied_opts
  from compiler.opt.pressure import vector_spills
  from compiler.render_c import render_c
  assert vector_spills(render_c(k, 2 if k.threaded is not None else 1), k.name, cpu_target.cc_flags) == 0, k.applied_opts
  if host_runs(cpu_target):
    np.testing.assert_allclose(run_built(si, k, cpu_target), run_built(si, lower(si.ast, si.name), cpu_target), rtol=1e-5, atol=1e-4)
