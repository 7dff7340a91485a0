"""The strided forward vectorized along its output channels on 16-lane CPUs (issue 28, frontend/nn_ops.py): alone,
with padding of one row and column before, it reads its input in place (_strided_in_place: the first output row
peeled off, compiler/opt/conv.py peel_default); otherwise from a padded copy stored rows first, (n, y, c, x)
(_padded_rows_first): the rows one output row's taps read (every channel, kh image rows) lie in one block. The
structure for both vector widths (8 lanes keep the plain (n, c, y, x) copy), and the values against float64 torch:
forward alone and with both gradients (the weight gradient reads the same copy) in a TinyJit step, odd sizes, strides
2 and 3 per dim, padding 0/1/2 and uneven, groups, batch 1, a computed input."""
import numpy as np
import pytest
from frontend import Tensor
from compiler.lower import lower
from compiler.schedule import create_schedule
from compiler.opt.apply import kernel_loads, stride_of
from compiler.view import prod
from tests.conv_check import jit_conv_grads_match_torch, torch_conv_grads
from tests.conftest import MANY_CORES, cpu_target_for

pytestmark = [pytest.mark.usefixtures("on_cpu")]   # CPU opts: CPU tensors even under MOCKGPU=1 NV=1

def _items(y: Tensor) -> list:
  return [si for si in create_schedule([y.lazydata]) if getattr(si, "ast", None) is not None]

@pytest.mark.parametrize("lanes", [8, 16])
def test_strided_forward_with_gradient_pads_its_input_rows_first_on_16_lanes(lanes, monkeypatch):
  """Bench shape (64 -> 64 channels, 32x32, s=2, 16x16 outputs) with a gradient: on 16 lanes the padded copy's output
  is (n, y, c, x), and the conv kernel's input load steps one padded row (33 floats) per input channel and a block of
  64 rows per kernel row; on 8 lanes the copy is (n, c, y, x) (its 6 x 2 tile over the rows-first layout spills)."""
  import frontend.nn_ops as nn_ops
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: lanes)
  x, w = Tensor.empty(2, 64, 32, 32).realize().requires_grad_(), Tensor.empty(64, 64, 3, 3).realize().requires_grad_()
  items = _items(x.conv2d(w, stride=2, padding=1))
  copy = next(si for si in items if prod(si.outputs[0].shape) == 2 * 64 * 33 * 33)
  assert tuple(copy.outputs[0].shape) == ((2, 33, 64, 33) if lanes == 16 else (2, 64, 33, 33)), [si.outputs[0].shape for si in items]
  conv = next(k for k in (lower(si.ast) for si in items) if k.reduce_ranges())
  assert _input_steps(conv) == ({(33, 64 * 33)} if lanes == 16 else {(33 * 33, 33)})

def _input_steps(conv) -> set:
  """{(step per input channel, step per kernel row)} of the conv kernel's input loads (the ones kx moves by 1)."""
  c, ky, kx = conv.reduce_ranges()
  assert [r.src[0].arg for r in (c, ky, kx)] == [64, 3, 3], conv.name
  xin = [ld for ld in kernel_loads(conv) if stride_of(ld.src[1], kx) == 1]   # (the weight steps kx by its 64 channels)
  assert xin, conv.name
  return {(stride_of(ld.src[1], c), stride_of(ld.src[1], ky)) for ld in xin}

@pytest.mark.parametrize("ncores", [None, *MANY_CORES])
def test_strided_forward_alone_reads_its_input_in_place_on_16_lanes(ncores, monkeypatch):
  """Without a gradient, padding of one row and column before (3x3 s=2 p=1 of an even-sized input): no padded copy, the
  weight copy and the conv, whose input loads step x's own planes (32x32) and keep their gates; optimized for AVX-512
  it is peeled at its first output row (16 rows: pieces 1 + 15, not the two halves of its columns) and does not spill,
  on this host's cores and on 16 or 64 (where the cores split the output rows themselves, the batch of 2 being short).
  Padding after the input or of 2 keeps a padded copy, rows first."""
  import frontend.nn_ops as nn_ops
  from compiler.opt.heuristic import optimize
  from compiler.opt.pressure import vector_spills
  from compiler.opt.conv import has_gates
  from compiler.render_c import render_c
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: 16)
  x, w = Tensor.empty(2, 64, 32, 32).realize(), Tensor.empty(64, 64, 3, 3).realize()
  ks = [lower(si.ast) for si in _items(x.conv2d(w, stride=2, padding=1))]
  assert len(ks) == 2 and ks[-1].reduce_ranges(), [k.name for k in ks]
  conv = ks[-1]
  assert _input_steps(conv) == {(32 * 32, 32)} and has_gates(conv)
  rows = next(r for r in conv.global_ranges if r.src[0].arg == 16)   # (n, co, oy, ox: the first 16 is the output rows)
  v4 = cpu_target_for("x86-64-v4", ncores)
  k = optimize(conv, v4)
  assert ("PEEL", rows.arg[0], (1,)) in k.applied_opts, k.applied_opts
  assert vector_spills(render_c(k, 2 if k.threaded is not None else 1), k.name, v4.cc_flags) == 0, k.applied_opts
  x31 = Tensor.empty(2, 64, 31, 31).realize()   # (an odd input: its last window reaches a padding column after it)
  for xi, kw in ((x, dict(stride=2, padding=2)), (x31, dict(stride=2, padding=1)), (x, dict(stride=3, padding=(2, 0, 0, 0)))):
    items = _items(xi.conv2d(w, **kw))
    assert len(items) == 3 and len(items[0].outputs[0].shape) == 4 and items[0].outputs[0].shape[1] != 64, (kw, [si.outputs[0].shape for si in items])

# (input, weight, conv kwargs): output channels per group a multiple of 16 and output rows under 32 wide (the 16-lane
# channel-vector path with and without a gradient), odd sizes, per-dim strides, padding 0/2 and uneven, groups, batch 1
CASES = [((1, 64, 32, 32), (64, 64, 3, 3), dict(stride=2, padding=1)), ((2, 16, 17, 17), (32, 16, 3, 3), dict(stride=2)),
         ((1, 8, 15, 20), (16, 8, 3, 3), dict(stride=(3, 2), padding=2)), ((2, 8, 13, 11), (16, 8, 3, 3), dict(stride=2, padding=(1, 0, 2, 1))),
         ((2, 16, 12, 12), (32, 8, 3, 3), dict(stride=2, padding=1, groups=2)), ((1, 12, 19, 9), (16, 12, 5, 5), dict(stride=3, padding=2)),
         ((3, 4, 10, 14), (16, 4, 2, 2), dict(stride=2, padding=1))]

@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("shape,wshape,kw", CASES)
def test_strided_forward_rows_first_matches_float64(shape, wshape, kw, lanes, monkeypatch):
  """The graph an AVX2 (8 lanes) and an AVX-512 host (16) build, run on this host: forward alone against float64 torch,
  and forward + input and weight gradients in a TinyJit step (run, captured, replayed)."""
  import frontend.nn_ops as nn_ops
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: lanes)
  rng = np.random.default_rng(sum(shape) * 31 + lanes)
  xn, wn = rng.standard_normal(shape).astype(np.float32), (rng.standard_normal(wshape) * 0.3).astype(np.float32)
  want, _, _ = torch_conv_grads(xn, wn, kw)
  np.testing.assert_allclose(Tensor(xn).conv2d(Tensor(wn), **kw).numpy(), want, rtol=1e-4, atol=1e-4)
  jit_conv_grads_match_torch(xn, wn, kw)

def test_rows_first_and_plain_copies_give_the_same_values(monkeypatch):
  """The bench shape's forward and gradients with the rows-first copy on and off (ROWS_FIRST) on 16 lanes: the same
  values to float32 rounding (the same taps, summed in the same order)."""
  import frontend.nn_ops as nn_ops
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: 16)
  rng = np.random.default_rng(3)
  xn, wn = rng.standard_normal((2, 64, 32, 32)).astype(np.float32), (rng.standard_normal((64, 64, 3, 3)) / 8).astype(np.float32)
  outs = []
  for on in (False, True):
    monkeypatch.setattr(nn_ops, "ROWS_FIRST", on)
    x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
    y = x.conv2d(w, stride=2, padding=1)
    (y * y).sum().backward()
    outs.append([y.numpy(), x.grad.numpy(), w.grad.numpy(), Tensor(xn).conv2d(Tensor(wn), stride=2, padding=1).numpy()])
  for a, b in zip(*outs): np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-5)

def test_strided_forward_alone_of_a_computed_input(monkeypatch):
  """A computed input (relu(x * 2 - 1), lazy) is realized on its own first, then read in place: its own kernel, the
  weight copy and the conv (the elementwise ops are not redone per tap), and the values of float64 torch."""
  import frontend.nn_ops as nn_ops
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: 16)
  rng = np.random.default_rng(4)
  xn, wn = rng.standard_normal((2, 16, 16, 16)).astype(np.float32), (rng.standard_normal((16, 16, 3, 3)) * 0.3).astype(np.float32)
  want, _, _ = torch_conv_grads(np.maximum(xn * 2 - 1, 0), wn, dict(stride=2, padding=1))
  y = (Tensor(xn) * 2 - 1).relu().conv2d(Tensor(wn), stride=2, padding=1)
  assert len(_items(y)) == 3
  np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
