"""Conv variants don't fall off the optimized path (issue 17): depthwise (groups = channels), grouped, 1x1, strided and
dilated convolutions, forward + backward in a TinyJit step. Strided/dilated ones are rewritten as stride-1 convs
(frontend/nn_ops.py _conv_rewrite), grouped ones get a grouped-conv gradient (_GroupConvFn), 1x1 ones are matrix
products: every conv forward and input-gradient kernel of the step carries a register tile of vectors (the matmul /
conv tile, or the depthwise tile: vectors x image rows), every weight-gradient kernel vectors (a tile, or vector
accumulators for the grouped reduction), for both CPU targets (the depthwise tile spill-free); the gradients equal
torch's."""
import functools
import numpy as np
import pytest
from frontend import Tensor, TinyJit
from compiler.lower import lower
from compiler.opt.heuristic import optimize
from compiler.opt.apply import has_vectors
from compiler.opt.pressure import vector_spills
from compiler.render_c import render_c
from compiler.view import prod
from tests.conftest import cpu_target_for
from tests.needs import clangs, need_clang
from tests.conv_check import jit_conv_grads_match_torch, torch_conv_grads

pytestmark = [pytest.mark.usefixtures("on_cpu")]   # CPU opts: CPU tensors even under MOCKGPU=1 NV=1
# the register budget of the opts is tuned against clang's allocator (the compiler the backend prefers); gcc 12 spills
# a few of the tiles clang keeps in registers, so those spill counts are checked with clang
SPILLS_ARE_CLANGS = "the tile's spill count is clang's register allocation, which the opts are tuned for"

C = 16
VARIANTS = {"depthwise": ((C, 1, 3, 3), {"padding": 1, "groups": C}), "groups4": ((C, C // 4, 3, 3), {"padding": 1, "groups": 4}),
            "1x1": ((C, C, 1, 1), {}), "stride2": ((C, C, 3, 3), {"padding": 1, "stride": 2}),
            "dilation2": ((C, C, 3, 3), {"padding": 2, "dilation": 2})}

def _step(name: str, seed: int = 0):
  """A TinyJit step: loss = mean(conv(x, w)^2), backward into x and w; the kernels it captured and (loss, dx, dw)."""
  wshape, kw = VARIANTS[name]
  rng = np.random.default_rng(seed)
  xn, wn = rng.standard_normal((2, C, 16, 16)).astype(np.float32), rng.standard_normal(wshape).astype(np.float32) * 0.3
  x, w = Tensor(xn, requires_grad=True).realize(), Tensor(wn, requires_grad=True).realize()
  @TinyJit
  def step():
    x.grad = w.grad = None
    loss = x.conv2d(w, **kw).square().mean()
    loss.backward()
    return loss.realize(), x.grad.realize(), w.grad.realize()
  for _ in range(3): res = step()   # run, capture, replay
  return [ei for ei in step.items if ei.kind == "kernel"], [r.numpy() for r in res], (xn, wn, kw)

def _conv_like(k) -> bool:
  """A window or batch x pixels reduction with several output loops (a conv forward or gradient, not the loss's sum)."""
  return len(k.global_ranges) >= 2 and prod(r.src[0].arg for r in k.reduce_ranges()) >= 9

def _tiled(opts) -> bool:
  """A register tile: vector columns x unrolled rows (TILE with rows, overlapping vectors x rows, vectors x rows)."""
  return any(o[0] == "TILE" and o[1] is not None and o[2] > 1 for o in opts) or \
         (any(o[0] in ("OVERLAP_VECTOR", "VECTOR") for o in opts) and any(o[0] == "UPCAST" for o in opts))

def _vector_reduce(opts) -> bool: return any(o[0] == "REDUCE_VECTOR" for o in opts)   # vector accumulators

@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_step_matches_torch_and_keeps_the_conv_opts(name):
  import torch
  items, (loss, gx, gw), (xn, wn, kw) = _step(name)
  x, w = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
  tl = torch.nn.functional.conv2d(x, w, **kw).square().mean()
  tl.backward()
  np.testing.assert_allclose(loss, tl.item(), rtol=1e-4)
  np.testing.assert_allclose(gx, x.grad.numpy(), rtol=1e-3, atol=1e-5)
  np.testing.assert_allclose(gw, w.grad.numpy(), rtol=1e-3, atol=1e-4)
  convs = [ei.kernel for ei in items if _conv_like(lower(ei.kernel.ast, ei.kernel.name))]
  assert len(convs) >= 3, [k.name for k in convs]   # forward, input gradient, weight gradient
  untiled = [(k.name, k.compiled.applied_opts) for k in convs if not _tiled(k.compiled.applied_opts)]
  # only a grouped conv's weight gradient (a reduction of batch x pixels per (group, co, ci, tap)) may do without the
  # tile, and it then keeps vector accumulators
  assert len(untiled) <= (1 if name in ("depthwise", "groups4") else 0), untiled
  assert all(_vector_reduce(opts) for _, opts in untiled), untiled

@functools.cache
def _step_asts(name: str) -> tuple:
  """The (ast, name) of each kernel one step of variant `name` captured (the step runs once per variant, not once per target)."""
  return tuple((ei.kernel.ast, ei.kernel.name) for ei in _step(name, seed=1)[0])

@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_kernels_vectorized_for_each_cpu_target(name, cpu_target_cores):
  """The same step's conv kernels built for AVX2 and AVX-512 (from the captured ASTs), on this host's cores and on 16
  or 64: vectors; the depthwise tile without spills."""
  cpu_target = cpu_target_cores
  for ast, kname in _step_asts(name):
    k0 = lower(ast, kname)
    if not _conv_like(k0): continue
    k = optimize(k0, cpu_target)
    assert has_vectors(k) and (_tiled(k.applied_opts) or _vector_reduce(k.applied_opts)), (k.name, k.applied_opts)
    if any(o[0] == "VECTOR" for o in k.applied_opts):   # the depthwise tile (the dense tiles' spills: tests/compiler/conv/test_conv_*opts.py)
      assert vector_spills(render_c(k, 2 if k.threaded is not None else 1), k.name, cpu_target.cc_flags) == 0, (k.name, k.applied_opts)

def test_depthwise_edge_rows_keep_tap_loops_for_clang_before_19(monkeypatch):
  """The AVX2 depthwise tile's peeled first and last rows gate their loads by the tap row (`0<r8+r9`): only their
  column-tap loops carry `unroll(disable)`, for clang before 19 (clang 16 unrolled them inside the row loop, under one
  branch per gated load: 61 spills), and every installed clang keeps the tile in registers (clang 19 unrolls both
  loops and folds the gates; the pragma does not reach it)."""
  avx2 = cpu_target_for("x86-64-v3")
  kernels = [optimize(k0, avx2) for k0 in (lower(ast, kname) for ast, kname in _step_asts("depthwise")) if _conv_like(k0)]
  tiles = [k for k in kernels if any(o[0] == "VECTOR" for o in k.applied_opts)]
  assert tiles and all(("PEEL", 2, (1, 15)) in k.applied_opts for k in tiles), [k.applied_opts for k in tiles]
  guard = "#if defined(__clang__) && __clang_major__ < 19\n"
  for k in tiles:
    src = render_c(k, 2 if k.threaded is not None else 1)
    assert src.count(guard) == 2, src   # the first and the last row; the middle rows' taps gate only their own lanes
    assert all(piece.split("\n")[2].strip().startswith("for (int r") for piece in src.split(guard)[1:]), src
    if not clangs(): need_clang(SPILLS_ARE_CLANGS)
    for cc in clangs():
      monkeypatch.setenv("HCQRT_CC", cc)
      assert vector_spills(src, k.name, avx2.cc_flags) == 0, (cc, k.applied_opts)

def test_strided_conv_computes_only_its_own_taps():
  """A stride-2 3x3 conv (one group) with gradients: the forward is a reduction over C x 3 x 3 taps vectorized along the
  output channels (no phase channels: 12/9 or 16/9 of the arithmetic), the input gradient four stride-1 convs of the
  output gradient, one per output phase, with 1x1, 1x2, 2x1 and 2x2 taps (9 in all), the weight gradient a reduction
  over the batch's output pixels: each conv kernel tiled."""
  items, _, _ = _step("stride2")
  convs = [(ei.kernel.name, ei.kernel.compiled.applied_opts) for ei in items if _conv_like(lower(ei.kernel.ast, ei.kernel.name))]
  names = [n for n, _ in convs]
  assert names[0].endswith(f"_{C}_3_3"), names   # the forward: C channels x 3 x 3 taps, no phases
  # not the phase convs: 3x2 taps over 2C (the column phases), 4C outputs of 2x2 taps (space to depth)
  assert not any(n.endswith(f"_{2 * C}_3_2") or (n.endswith("_2_2") and f"_{4 * C}_" in n) for n in names), names
  # the input gradient's phases (8x8 outputs: vectorized along their rows, r_2_1_16_8_8_..., or on a CPU of 16 lanes
  # along their channels, r_2_8_8_1_16_...)
  taps = sorted(n.rsplit("_", 2)[-2:] for n in names[1:] if n.startswith(("r_2_1_", "r_2_8_8_1_")) and "_8_8_" in n)
  assert taps == [["1", "2"], ["2", "1"], ["2", "2"]], names   # (+ the 1x1 phase: a matrix product)
  assert all(_tiled(opts) for _, opts in convs), convs
  # the forward's vector loop is the output channels: the tile's vector axis is the innermost output loop (C of them),
  # one vector of the CPU target the step was built for wide (8 floats with AVX2, 16 with AVX-512: never the host's guess)
  from frontend.devices import target_of
  assert convs[0][1][0][0] == "TILE" and convs[0][1][0][4] == min(C, target_of("CPU").lanes), convs[0]

def _jit_conv_grads_match_torch(xn, wn, kw, tiled: bool) -> np.ndarray:
  """tests/conv_check.py's TinyJit step against float64 torch; `tiled`: every conv kernel of it (at least 3) carries
  the conv tile. Returns torch's y."""
  want_y, step = jit_conv_grads_match_torch(xn, wn, kw)
  if tiled:
    convs = [ei.kernel for ei in step.items if ei.kind == "kernel" and _conv_like(lower(ei.kernel.ast, ei.kernel.name))]
    assert len(convs) >= 3 and all(_tiled(k.compiled.applied_opts) for k in convs), [(k.name, k.compiled.applied_opts) for k in convs]
  return want_y

@pytest.mark.parametrize("shape,kw", [((2, 5, 16, 16), dict(stride=2, padding=1)), ((2, 5, 11, 13), dict(stride=2, padding=1)),
                                      ((3, 4, 11, 13), dict(stride=(2, 1), padding=1)), ((2, 3, 12, 10), dict(stride=(1, 3), padding=(2, 0))),
                                      ((2, 4, 13, 14), dict(stride=3, padding=2)), ((2, 4, 11, 9), dict(stride=2, padding=(0, 1, 2, 0))),
                                      ((2, 6, 9, 9), dict(stride=2, padding=3)), ((2, 4, 10, 10), dict(stride=2)),
                                      ((2, 4, 9, 11), dict(stride=2, padding=0, k=1)), ((2, 3, 15, 15), dict(stride=4, padding=2, k=5)),
                                      ((2, 16, 8, 8), dict(stride=2, padding=1, k=2))])
def test_strided_conv_taps_path_matches_float64(shape, kw):
  """The taps path (one group, output channels a multiple of 8: _StridedConvFn, _conv_fwd_cout): strides per dim,
  odd sizes, uneven and large padding (an output phase whose window starts before the output gradient), kernels
  smaller than the stride (1x1 s=2: phases with no taps), 5x5 s=4, 2x2: forward alone, forward + both gradients."""
  kw = dict(kw)
  k = kw.pop("k", 3)
  rng = np.random.default_rng(7)
  xn = rng.standard_normal(shape).astype(np.float32)
  wn = (rng.standard_normal((8, shape[1], k, k if "stride" not in kw or kw["stride"] != (1, 3) else 2)) * 0.3).astype(np.float32)
  want_y, want_gx, want_gw = torch_conv_grads(xn, wn, kw)
  np.testing.assert_allclose(Tensor(xn).conv2d(Tensor(wn), **kw).numpy(), want_y, rtol=1e-4, atol=1e-4)
  x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
  y = x.conv2d(w, **kw)
  np.testing.assert_allclose(y.numpy(), want_y, rtol=1e-4, atol=1e-4)
  (y * y).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), want_gx, rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(w.grad.numpy(), want_gw, rtol=1e-4, atol=1e-3)

def test_strided_conv_input_gradient_alone_and_weight_gradient_alone():
  """Only one of x, w requiring a gradient: the other gradient isn't built, the one asked for is right."""
  rng = np.random.default_rng(8)
  xn, wn = rng.standard_normal((2, 4, 10, 10)).astype(np.float32), (rng.standard_normal((8, 4, 3, 3)) * 0.3).astype(np.float32)
  _, want_gx, want_gw = torch_conv_grads(xn, wn, dict(stride=2, padding=1))
  for xg in (True, False):
    x, w = Tensor(xn, requires_grad=xg), Tensor(wn, requires_grad=not xg)
    y = x.conv2d(w, stride=2, padding=1)
    (y * y).sum().backward()
    if xg: np.testing.assert_allclose(x.grad.numpy(), want_gx, rtol=1e-4, atol=1e-3); assert w.grad is None
    else: np.testing.assert_allclose(w.grad.numpy(), want_gw, rtol=1e-4, atol=1e-3); assert x.grad is None

@pytest.mark.parametrize("kw", [dict(stride=2, padding=1), dict(stride=(2, 1), padding=1), dict(stride=(1, 3), padding=(2, 0)),
                                dict(stride=3, padding=2), dict(stride=2, padding=1, groups=2), dict(stride=2, padding=(0, 1, 2, 0))])
def test_strided_conv_forward_and_gradients_match_torch(kw):
  """Strided convs of other shapes (one-sided strides, a 5x5 kernel wider than the stride, groups, uneven padding):
  the forward alone, and the forward + gradients, equal torch's."""
  import torch
  rng = np.random.default_rng(3)
  groups = kw.get("groups", 1)
  xn = rng.standard_normal((2, 4, 11, 13)).astype(np.float32)
  wn = (rng.standard_normal((6, 4 // groups, 5, 5 if "groups" in kw else 3)) * 0.3).astype(np.float32)
  tx, tw = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
  pad = kw["padding"]
  if isinstance(pad, tuple) and len(pad) == 4: ty = torch.nn.functional.conv2d(torch.nn.functional.pad(tx, pad), tw, stride=kw["stride"], groups=groups)
  else: ty = torch.nn.functional.conv2d(tx, tw, **kw)
  np.testing.assert_allclose(Tensor(xn).conv2d(Tensor(wn), **kw).numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-4)
  x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
  y = x.conv2d(w, **kw)
  np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-4)
  (y * y).sum().backward()
  (ty * ty).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-3, atol=1e-3)
  np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-3, atol=1e-3)

def test_two_by_two_conv_tile_renders_without_spills(cpu_target):
  """A 2x2 conv (the strided conv's phase conv, its input gradient) gets the 3x3 conv's register tile; its innermost
  2-tap loop stays a loop in the C (clang's full unroll scheduled both taps' loads together: 18 spills, half speed)."""
  from compiler.schedule import create_schedule
  x = Tensor.empty(4, 64, 17, 17).realize()
  w = Tensor.empty(64, 64, 2, 2).realize()
  k = optimize(lower(create_schedule([x._conv_fwd(w, 1, 1, 1, [0, 0, 0, 0]).lazydata])[0].ast), cpu_target)
  assert _tiled(k.applied_opts), k.applied_opts
  src = render_c(k, 2 if k.threaded is not None else 1)
  assert "unroll(disable)" in src
  assert vector_spills(src, k.name, cpu_target.cc_flags) == 0, k.applied_opts

def test_strided_conv_forward_tile_rows_are_output_columns(monkeypatch):
  """The stride-2 forward of a conv with a gradient, vectorized along the output channels (bench shape: 64 channels,
  16x16 outputs) takes its tile's rows from the innermost loop that the weight vector does not move with, the output
  columns (neighbours in the input: shared cache lines), not the images; on AVX2 that is 6 columns x 2 vectors, 12
  accumulators, no spills with clang (gcc 12's allocator spills this 12-accumulator tile: 19 moves)."""
  monkeypatch.setenv("HCQRT_CC", need_clang(SPILLS_ARE_CLANGS))
  from compiler.schedule import create_schedule
  from test_conv_train_opts import inner_accumulators
  from tests.conftest import cpu_target_for
  avx2 = cpu_target_for("x86-64-v3")   # (a multi-core one: on one core the outermost loop, the images, may be cut)
  import frontend.nn_ops as nn_ops
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: 8)   # (the graph an AVX2 host builds: the transposed store)
  y = Tensor.empty(2, 64, 32, 32).requires_grad_().conv2d(Tensor.empty(64, 64, 3, 3).requires_grad_(), stride=2, padding=1)
  k0 = next(k for k in (lower(si.ast) for si in create_schedule([y.lazydata]) if getattr(si, "ast", None) is not None) if _conv_like(k))
  assert [r.src[0].arg for r in k0.global_ranges] == [2, 16, 16, 64], k0.name   # (images, rows, columns, out channels)
  cols, chans = (r.arg[0] for r in k0.global_ranges[2:])
  k = optimize(k0, avx2)
  tile = next(o for o in k.applied_opts if o[0] == "TILE")
  assert tile[1] == cols and tile[3] == chans, k.applied_opts
  assert inner_accumulators(k) >= 12, k.applied_opts
  assert vector_spills(render_c(k, 2 if k.threaded is not None else 1), k.name, avx2.cc_flags) == 0, k.applied_opts

def test_strided_forward_alone_is_a_column_phase_conv_with_its_own_taps(cpu_target, monkeypatch):
  """A strided forward with no gradient whose output row holds whole vectors (16x16 outputs) and that reads a padding
  column after its input (an odd 31x31 input: not read in place, tests/compiler/conv/test_conv_strided_in_place.py) is, on a CPU
  of 8 lanes, the column-phase conv: one copy of the padded input's column phases, then the conv kernel vectorized along
  the output row with output-channel rows (a tile, no spills), its tap loop exactly the 3x3 taps (no zero-padded 4th
  column), writing channels-first: 2 kernels, no weight copy and no transpose."""
  from compiler.schedule import create_schedule
  import frontend.nn_ops as nn_ops
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: 8)
  y = Tensor.empty(2, 64, 31, 31).conv2d(Tensor.empty(64, 64, 3, 3), stride=2, padding=1)
  ks = [lower(si.ast) for si in create_schedule([y.lazydata]) if getattr(si, "ast", None) is not None]
  assert len(ks) == 2, [k.name for k in ks]
  k0 = ks[-1]
  assert [r.src[0].arg for r in k0.global_ranges] == [2, 64, 16, 16] and [r.src[0].arg for r in k0.reduce_ranges()] == [64, 3, 3]
  chans, cols = k0.global_ranges[1].arg[0], k0.global_ranges[3].arg[0]
  k = optimize(k0, cpu_target)
  tile = next(o for o in k.applied_opts if o[0] == "TILE")
  assert tile[1] == chans and tile[3] == cols and tile[2] > 1, k.applied_opts
  assert vector_spills(render_c(k, 2 if k.threaded is not None else 1), k.name, cpu_target.cc_flags) == 0, k.applied_opts

def test_strided_forward_alone_on_16_lanes_is_vectorized_along_its_channels(cpu_target_cores, monkeypatch):
  """The same forward on a CPU of 16 lanes (one vector per 16-wide output row): the input read in place (padding of one
  row and column before: tests/compiler/conv/test_conv_rows_first.py), the weight copied channels-last, the conv kernel vectorized
  along its 64 output channels (a tile, no spills, also on 16 or 64 cores, which split its rows: peeled all the same;
  unpeeled, 40 vector moves) storing its output channels-first itself (no transposing copy after it); the values equal
  float64 numpy's."""
  cpu_target = cpu_target_cores
  from compiler.schedule import create_schedule
  import frontend.nn_ops as nn_ops
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: 16)
  rng = np.random.default_rng(5)
  xn, wn = rng.standard_normal((2, 64, 32, 32)).astype(np.float32), rng.standard_normal((64, 64, 3, 3)).astype(np.float32) / 8
  y = Tensor(xn).realize().conv2d(Tensor(wn).realize(), stride=2, padding=1)
  ks = [lower(si.ast) for si in create_schedule([y.lazydata]) if getattr(si, "ast", None) is not None]
  assert len(ks) == 2 and ks[-1].reduce_ranges(), [k.name for k in ks]   # (the conv last: nothing transposes after it)
  conv = ks[-1]
  assert [r.src[0].arg for r in conv.global_ranges] == [2, 64, 16, 16] and [r.src[0].arg for r in conv.reduce_ranges()] == [64, 3, 3]
  chans, cols = conv.global_ranges[1].arg[0], conv.global_ranges[3].arg[0]
  k = optimize(conv, cpu_target)
  tile = next(o for o in k.applied_opts if o[0] == "TILE")
  assert tile[3] == chans and tile[1] == cols and tile[2] > 1, k.applied_opts   # (rows: output columns, neighbours in x)
  # (spills: on the 16-lane target only, the one that builds this graph; AVX2's 16 registers spill this gated tile)
  if cpu_target.lanes == 16:
    assert vector_spills(render_c(k, 2 if k.threaded is not None else 1), k.name, cpu_target.cc_flags) == 0, k.applied_opts
  xp = np.pad(xn.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  want = sum(np.einsum("nchw,oc->nohw", xp[:, :, ky:ky + 32:2, kx:kx + 32:2], wn[:, :, ky, kx].astype(np.float64)) for ky in range(3) for kx in range(3))
  np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("shape,wshape,kw", [((2, 5, 32, 32), (8, 5, 3, 3), dict(stride=2, padding=1)),
                                             ((2, 4, 17, 17), (6, 4, 3, 3), dict(stride=2)),
                                             ((3, 4, 11, 16), (8, 4, 3, 3), dict(stride=(3, 2), padding=(1, 1, 2, 0))),
                                             ((2, 3, 9, 31), (5, 3, 5, 5), dict(stride=4, padding=2)),
                                             ((2, 4, 10, 24), (8, 4, 3, 2), dict(stride=3, padding=(0, 1, 1, 0))),
                                             ((2, 6, 12, 16), (9, 2, 3, 1), dict(stride=2, groups=3)),
                                             ((2, 8, 8, 33), (8, 2, 2, 3), dict(stride=(1, 4), padding=(1, 0), groups=4)),
                                             ((1, 16, 16, 16), (16, 1, 3, 3), dict(stride=(2, 1), padding=1, groups=16))])
def test_column_phase_forward_matches_float64(shape, wshape, kw):
  """The column-phase forward (output rows of 8 or 16): strides per dim (rows alone, columns alone), odd input sizes,
  uneven padding, kernels narrower than the stride (one phase unread), non-square kernels, groups and depthwise:
  float64 torch."""
  rng = np.random.default_rng(11)
  xn, wn = rng.standard_normal(shape).astype(np.float32), (rng.standard_normal(wshape) * 0.3).astype(np.float32)
  want = torch_conv_grads(xn, wn, kw)[0]
  assert want.shape[-1] % 8 == 0, want.shape
  np.testing.assert_allclose(Tensor(xn).conv2d(Tensor(wn), **kw).numpy(), want, rtol=1e-4, atol=1e-4)

def _fewest_inner_accumulators(k) -> int:
  """The fewest vector accumulators updated inside an innermost loop of k that updates any (the weakest tile's)."""
  from compiler.linearize import linearize
  from compiler.uop import Ops
  counts, stack = [], []
  for u in linearize(k):
    if u.op is Ops.RANGE: stack = [(c, False) for c, _ in stack] + [(0, True)]
    elif u.op is Ops.ASSIGN and u.dtype.count > 1 and stack: stack[-1] = (stack[-1][0] + 1, stack[-1][1])
    elif u.op is Ops.ENDRANGE:
      c, inner = stack.pop()
      if inner and c: counts.append(c)
  return min(counts)

@pytest.mark.parametrize("conv", [dict(stride=2, padding=1), dict(padding=1), dict(padding=2, dilation=2)])
def test_six_row_tile_remainder_is_one_four_row_tile(conv, cpu_target, monkeypatch):
  """64 rows of a 6-row tile (the strided forward's 16 output columns in pairs, the dense and dilated forwards' 64
  output channels) leave two pairs: they run as one 4 x 2 tile (8 accumulators), not a loop of two 2 x 2 tiles (4,
  half the FMA rate at a 5-cycle latency), spill-free; on AVX2 the main part keeps 12. Values: float64 torch."""
  import torch
  from compiler.schedule import create_schedule
  import frontend.nn_ops as nn_ops
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: cpu_target.lanes)   # (the graph a host of this target builds)
  # 16 output columns / 64 output channels (strided: an odd 31x31 input, the column-phase conv on 8 lanes; an even one is
  # read in place, its tile 4 x 2 with its first output row peeled: tests/compiler/conv/test_conv_strided_in_place.py)
  n = 16 if "stride" not in conv else 31
  y = Tensor.empty(2, 64, n, n).conv2d(Tensor.empty(64, 64, 3, 3), **conv)
  k0 = next(k for k in (lower(si.ast) for si in create_schedule([y.lazydata]) if getattr(si, "ast", None) is not None) if _conv_like(k))
  k = optimize(k0, cpu_target)
  if cpu_target.simd_bytes == 32:
    assert any(o[0] == "UNROLL_TAIL" for o in k.applied_opts), k.applied_opts
    assert _fewest_inner_accumulators(k) >= 8, k.applied_opts
  assert vector_spills(render_c(k, 2 if k.threaded is not None else 1), k.name, cpu_target.cc_flags) == 0, k.applied_opts
  rng = np.random.default_rng(3)
  xn, wn = rng.standard_normal((2, 64, n, n)).astype(np.float32), (rng.standard_normal((64, 64, 3, 3)) * 0.1).astype(np.float32)
  want = torch.nn.functional.conv2d(torch.tensor(xn, dtype=torch.float64), torch.tensor(wn, dtype=torch.float64), **conv).numpy()
  np.testing.assert_allclose(Tensor(xn).conv2d(Tensor(wn), **conv).numpy(), want, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("shape,wshape,kw", [((2, 32, 10, 10), (32, 8, 3, 3), dict(padding=1, groups=4)),
                                             ((3, 16, 9, 7), (16, 8, 3, 3), dict(padding=(1, 0), groups=2)),
                                             ((2, 16, 8, 8), (32, 8, 5, 5), dict(padding=2, groups=2)),
                                             ((2, 16, 8, 8), (16, 16, 3, 3), dict(padding=1, groups=1))])
def test_grouped_weight_gradient_tiled_per_group(shape, wshape, kw):
  """Grouped convs whose groups have 8 or more output channels (a multiple of 8): the weight gradient is the per-group
  (group, ky, kx, ci, co) reduction with co the vectors (_conv_wgrad), the register tile; the gradients equal float64
  torch's (groups=1 through _ConvFn, the same function)."""
  rng = np.random.default_rng(9)
  xn, wn = rng.standard_normal(shape).astype(np.float32), (rng.standard_normal(wshape) * 0.3).astype(np.float32)
  _jit_conv_grads_match_torch(xn, wn, kw, tiled=True)

@pytest.mark.parametrize("taps", [(2, 1), (1, 2), (1, 3)])
def test_one_wide_tap_conv_tile_renders_without_spills(taps, cpu_target, monkeypatch):
  """Convs with a single tap along one dim (the strided conv's input-gradient phases: 2x1, 1x2; a 1x3 conv): the loop
  of one iteration that the lowering keeps is no loop for the register budget nor for the 2-tap loop's unroll guard,
  so the tile is sized for the loop around it (2x1 took 8 rows x 2 vectors: 16 accumulators, 70 spills on AVX2).
  Spills counted with clang (gcc 12 spills the AVX2 2x1 tile: 12 moves)."""
  monkeypatch.setenv("HCQRT_CC", need_clang(SPILLS_ARE_CLANGS))
  from compiler.schedule import create_schedule
  x = Tensor.empty(4, 64, 16 + taps[0] - 1, 16 + taps[1] - 1).realize()
  w = Tensor.empty(64, 64, *taps).realize()
  k = optimize(lower(create_schedule([x._conv_fwd(w, 1, 1, 1, [0, 0, 0, 0]).lazydata])[0].ast), cpu_target)
  assert _tiled(k.applied_opts), k.applied_opts
  assert vector_spills(render_c(k, 2 if k.threaded is not None else 1), k.name, cpu_target.cc_flags) == 0, k.applied_opts

@pytest.mark.parametrize("shape,wshape,kw,tiled", [((2, 16, 10, 10), (16, 4, 3, 3), dict(stride=2, padding=1, groups=4), False),
                                                   ((2, 32, 11, 9), (32, 8, 3, 3), dict(stride=2, padding=1, groups=4), False),
                                                   ((2, 16, 12, 12), (32, 8, 5, 5), dict(stride=(2, 3), padding=2, groups=2), False),
                                                   ((2, 32, 32, 32), (32, 8, 3, 3), dict(stride=2, padding=1, groups=4), True)])
def test_grouped_strided_conv_matches_float64_and_is_tiled(shape, wshape, kw, tiled):
  """Grouped strided convs: with 8 output channels per group (or more) the taps path (forward along the group's output
  channels, grouped phase convs for the input gradient, the per-group weight gradient), every conv kernel tiled where
  the phases' rows hold vectors (16 wide); with fewer (16 channels in 4 groups) the phase convs; all equal float64
  torch's forward and gradients."""
  rng = np.random.default_rng(10)
  xn, wn = rng.standard_normal(shape).astype(np.float32), (rng.standard_normal(wshape) * 0.3).astype(np.float32)
  want_y = _jit_conv_grads_match_torch(xn, wn, kw, tiled)
  np.testing.assert_allclose(Tensor(xn).conv2d(Tensor(wn), **kw).numpy(), want_y, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("k,pad", [(3, 1), (1, 0)])
def test_strided_conv_symbolic_batch_in_tinyjit(k, pad):
  """The taps path with a bound Variable batch (the epoch's short last batch): one capture replays for every batch size,
  the loss and the weight gradient equal float64 torch's (1x1 s=2: input-gradient phases with no taps, zeros)."""
  from frontend import Variable
  import torch
  rng = np.random.default_rng(11)
  wn = (rng.standard_normal((16, 8, k, k)) * 0.3).astype(np.float32)
  w = Tensor(wn, requires_grad=True).realize()
  B = Variable("batch", 1, 8)
  @TinyJit
  def step(x):
    w.grad = None
    y = x.conv2d(w, stride=2, padding=pad)
    loss = (y * y).sum()
    loss.backward()
    return loss.realize(), w.grad.realize()
  for n in (8, 8, 8, 5, 3):
    xn = rng.standard_normal((n, 8, 16, 16)).astype(np.float32)
    loss, gw = step(Tensor(xn).reshape(B.bind(n), 8, 16, 16))
    tw = torch.tensor(wn, dtype=torch.float64, requires_grad=True)
    ty = torch.nn.functional.conv2d(torch.tensor(xn, dtype=torch.float64), tw, stride=2, padding=pad)
    tl = (ty * ty).sum()
    tl.backward()
    np.testing.assert_allclose(float(loss.numpy()), tl.item(), rtol=1e-5)
    np.testing.assert_allclose(gw.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-3)
