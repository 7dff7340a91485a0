"""Conv forwards with fewer copies (issue 28): the depthwise conv reads its input in place instead of from a padded
copy (frontend/nn_ops.py _depthwise_fwd: one gated kernel whose border vectors keep their gates, compiler/opt/conv.py
conv_tile); the strided conv vectorized along its output channels stores channels-first itself on 16-lane CPUs
(_conv_fwd_cout fused_store: no transposing copy). Values against float64 torch (odd sizes, strides 1-3, padding
0/1/2, groups, batch 1, rows conv_tile can't cover), forward alone and with both gradients in a TinyJit step, for the
graphs of both vector widths on any host; the kernel structure for both CPU targets."""
import numpy as np
import pytest
from frontend import Tensor
from compiler.lower import lower
from compiler.schedule import create_schedule
from compiler.opt.heuristic import optimize
from compiler.opt.conv import gated_row_vector
from compiler.opt.apply import has_vectors
from tests.conv_check import jit_conv_grads_match_torch, torch_conv_grads

pytestmark = [pytest.mark.usefixtures("on_cpu")]   # CPU opts: CPU tensors even under MOCKGPU=1 NV=1

def _dw(shape, k, rng):
  xn = rng.standard_normal(shape).astype(np.float32)
  return xn, (rng.standard_normal((shape[1], 1, k, k)) * 0.3).astype(np.float32)

def _kernels(y: Tensor) -> list:
  return [si for si in create_schedule([y.lazydata]) if getattr(si, "ast", None) is not None]

# (input shape, kernel, padding): rows conv_tile covers (32, 24, 16 wide) and rows it doesn't (30, 13: the padded copy)
DW_CASES = [((2, 16, 32, 32), 3, 1), ((1, 8, 24, 24), 3, 1), ((2, 8, 16, 16), 5, 2), ((1, 8, 17, 32), 3, 1),
            ((3, 4, 32, 32), 3, (1, 1, 2, 0)), ((2, 8, 30, 30), 3, 1), ((1, 4, 9, 13), 3, 1), ((2, 8, 32, 32), 3, (0, 2)),
            ((1, 4, 32, 34), 3, (-1, 1, 1, 1))]   # (a negative padding crops: the padded copy)

@pytest.mark.parametrize("shape,k,pad", DW_CASES)
def test_depthwise_forward_matches_float64(shape, k, pad):
  rng = np.random.default_rng(hash((shape, k, str(pad))) % 2**32)
  xn, wn = _dw(shape, k, rng)
  want, _, _ = torch_conv_grads(xn, wn, dict(groups=shape[1], padding=pad))
  got = Tensor(xn).conv2d(Tensor(wn), groups=shape[1], padding=pad).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("shape,k,pad", DW_CASES[:4] + DW_CASES[5:6])
def test_depthwise_gradients_through_the_in_place_forward(shape, k, pad):
  """TinyJit step, forward + both gradients (the input gradient is itself a depthwise conv of the output gradient, so
  it reads in place too) against float64 torch."""
  rng = np.random.default_rng(1)
  xn, wn = _dw(shape, k, rng)
  jit_conv_grads_match_torch(xn, wn, dict(groups=shape[1], padding=pad))

def test_depthwise_of_a_computed_input():
  """A computed input (relu(x * 2 - 1), lazy) is realized on its own first, then read in place: the same values."""
  rng = np.random.default_rng(2)
  xn, wn = _dw((2, 8, 32, 32), 3, rng)
  want, _, _ = torch_conv_grads(np.maximum(xn * 2 - 1, 0), wn, dict(groups=8, padding=1))
  y = (Tensor(xn) * 2 - 1).relu().conv2d(Tensor(wn), groups=8, padding=1)
  assert len(_kernels(y)) == 2   # the input's own kernel, then the conv: the elementwise ops are not redone per tap
  np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)

def test_depthwise_reads_its_input_in_place(cpu_target_cores):
  """A padded depthwise conv of a realized input is one kernel (no padded copy) whose loads keep their border gates,
  and for AVX2 and AVX-512 alike its output row runs as vectors (conv_tile: VECTOR of gated_row_vector's width) with
  the row loop peeled (on 64 cores too, where the cores split those 32 rows themselves); a row conv_tile can't cover
  (30 wide) keeps the padded copy and the ungated depthwise tile."""
  cpu_target = cpu_target_cores
  x, w = Tensor.empty(2, 16, 32, 32).realize(), Tensor.empty(16, 1, 3, 3).realize()
  ks = _kernels(x.conv2d(w, groups=16, padding=1))
  assert len(ks) == 1, [si.name for si in ks]
  k = optimize(lower(ks[0].ast), cpu_target)
  vec = [o for o in k.applied_opts if o[0] == "VECTOR"]
  assert has_vectors(k) and vec and vec[0][2] == gated_row_vector(32, cpu_target.lanes), k.applied_opts
  assert any(o[0] == "PEEL" for o in k.applied_opts), k.applied_opts
  x30 = Tensor.empty(2, 16, 30, 30).realize()
  assert len(_kernels(x30.conv2d(w, groups=16, padding=1))) == 2   # (the padded copy and the conv)

def test_gated_rows_of_whole_vectors_on_avx2():
  """AVX2's 8 lanes cover gated rows of 24 and 32 with 3 or 4 full vectors (half-width ones would be 6 or 8: the kernel
  ran as scalars before)."""
  assert [gated_row_vector(n, 8) for n in (16, 24, 32, 40, 28)] == [4, 8, 8, None, None]
  assert [gated_row_vector(n, 16) for n in (16, 24, 32, 48, 64, 20)] == [4, 8, 8, 16, 16, None]

STRIDED_CASES = [((2, 8, 32, 32), (16, 8, 3, 3), dict(stride=2, padding=1)), ((1, 5, 11, 13), (8, 5, 3, 3), dict(stride=2, padding=1)),
                 ((2, 4, 13, 14), (8, 4, 3, 3), dict(stride=3, padding=2)), ((2, 4, 10, 10), (8, 4, 3, 3), dict(stride=2)),
                 ((3, 4, 11, 16), (16, 4, 3, 3), dict(stride=(2, 1), padding=(1, 1, 2, 0))),
                 ((2, 8, 12, 12), (16, 4, 3, 3), dict(stride=2, padding=1, groups=2)), ((1, 16, 9, 9), (16, 16, 5, 5), dict(stride=2, padding=2))]

@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("shape,wshape,kw", STRIDED_CASES)
def test_strided_forward_and_gradients_for_both_graphs(shape, wshape, kw, lanes, monkeypatch):
  """The strided conv as an AVX2 host (8 lanes: the transposed store) and an AVX-512 host (16: the fused store) build
  it, forward alone and forward + gradients in a TinyJit step, against float64 torch."""
  import frontend.nn_ops as nn_ops
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: lanes)
  rng = np.random.default_rng(sum(shape) + lanes)
  xn, wn = rng.standard_normal(shape).astype(np.float32), (rng.standard_normal(wshape) * 0.3).astype(np.float32)
  want = jit_conv_grads_match_torch(xn, wn, kw)[0]
  np.testing.assert_allclose(Tensor(xn).conv2d(Tensor(wn), **kw).numpy(), want, rtol=1e-4, atol=1e-4)

def test_strided_forward_with_gradient_stores_channels_first_on_16_lanes(monkeypatch):
  """With a gradient (_StridedConvFn) on a 16-lane CPU the forward's conv kernel writes the (N, C, H, W) output itself:
  the forward is the padded copy, the weight copy and the conv, nothing after it; on 8 lanes a transposing copy follows."""
  import frontend.nn_ops as nn_ops
  for lanes, n in ((16, 3), (8, 4)):
    monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device, lanes=lanes: lanes)
    x, w = Tensor.empty(2, 64, 32, 32).realize().requires_grad_(), Tensor.empty(64, 64, 3, 3).realize().requires_grad_()
    ks = [lower(si.ast) for si in _kernels(x.conv2d(w, stride=2, padding=1))]
    assert len(ks) == n and (ks[-1].reduce_ranges() if lanes == 16 else not ks[-1].reduce_ranges()), [k.name for k in ks]
