"""Stride-1 convs vectorized along their output channels on CPUs of more than 8 lanes store channels-first themselves
(frontend/nn_ops.py _conv_fwd_cout fused_store): the opts move the channel loop innermost (compiler/opt/conv.py
channels_innermost) so the register tile keeps the channels as its vectors, and no copy transposes the output back.
Forward and gradients equal torch's for these convs in tests/compiler/opt/test_transpose_opts.py (16 lanes: 5x5 and 3x3, odd
channels, padding, batch 1, odd batch, non-square)."""
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
from compiler.opt.conv import channels_innermost
from compiler.opt.pressure import vector_spills
from compiler.render_c import render_c
from compiler.beam import build
import frontend.nn_ops as nn_ops

pytestmark = pytest.mark.usefixtures("on_cpu")   # C-path tests: CPU even under MOCKGPU=1 NV=1

DEV = open_device("CPU")
rng = np.random.default_rng(2840)

def rnd(*s) -> np.ndarray: return rng.standard_normal(s).astype(np.float32)

def kernels(t: Tensor) -> list:
  return [si for si in create_schedule([t.lazydata]) if si.kind == "kernel"]

def conv_item(sis: list):
  return next(si for si in sis if lower(si.ast, si.name).reduce_ranges())

@pytest.mark.parametrize("lanes", [16, 8])
def test_channel_conv_forward_has_no_transposing_copy(lanes, monkeypatch):
  """beautiful_mnist's 5x5 32->32 conv over 20-wide rows: with 16 lanes (the row uses 20 of 32 lanes) the conv runs
  along its channels and its kernel stores (n, cout, oy, ox) itself: the weight re-layout and the conv, no copy after
  it (the old code stored (n, oy, ox, cout) and transposed it in a third kernel). With 8 lanes the row tile (20 of 24
  lanes) keeps the torch-layout weight and the same output: the weight copy is not made."""
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: lanes)
  x, w = Tensor(rnd(2, 32, 24, 24)).realize(), Tensor(rnd(32, 32, 5, 5)).realize()
  sis = kernels(x.conv2d(w))
  conv = conv_item(sis)
  assert sis[-1] is conv, [si.name for si in sis]   # the conv's own stores are the output: nothing runs after it
  assert [r.src[0].arg for r in lower(conv.ast, conv.name).global_ranges] == [2, 32, 20, 20], conv.name
  assert len(sis) == (2 if lanes == 16 else 1), [si.name for si in sis]

def test_channels_innermost_takes_the_channel_tile_and_computes_the_conv(cpu_target, monkeypatch):
  """The channels-first conv (built as for 16 lanes), optimized for each CPU target: its channel loop is moved
  innermost (the others keep their order), the register tile's vectors are the channels, nothing spills, and the
  kernel (run where the host can) computes what the unoptimized one does, odd input channels and padding included."""
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: 16)
  x, w = Tensor(rnd(3, 5, 22, 22)).realize(), Tensor(rnd(32, 5, 5, 5)).realize()
  si = conv_item(kernels(x.conv2d(w, padding=1)))
  k0 = lower(si.ast, si.name)
  n, co, oy, ox = k0.global_ranges
  assert [r.src[0].arg for r in (n, co, oy, ox)] == [3, 32, 20, 20], si.name
  assert channels_innermost(k0, cpu_target).global_ranges == [n, oy, ox, co]
  assert k0.global_ranges == [n, co, oy, ox]   # (k0 itself unchanged)
  k = optimize(k0, cpu_target)
  tile = k.applied_opts[0]
  assert tile[0] == "TILE" and tile[3] == co.arg[0] and tile[4] == cpu_target.lanes, k.applied_opts
  assert vector_spills(render_c(k, 2 if k.threaded is not None else 1), k.name, cpu_target.cc_flags) == 0, k.applied_opts
  if host_runs(cpu_target):
    run = beam_runner(si, DEV)
    np.testing.assert_allclose(run(build(k, (), cpu_target))[1][0], run(build(lower(si.ast, si.name), (), cpu_target))[1][0], rtol=1e-5, atol=1e-4)

def test_channels_innermost_leaves_other_kernels(cpu_target, monkeypatch):
  """Returned as it is: a torch-layout conv (the row tile's: the weight is not contiguous along the channels), the same
  with a bias fused in (contiguous along the channels, but no weight: it is not read along the reduction), a conv
  whose loops leave the channel tile no rows (one image of 13 x 13 outputs), a depthwise conv, a plain elementwise
  kernel, and a conv whose channel loop is already innermost."""
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: 8)
  torch_layout = conv_item(kernels(Tensor(rnd(2, 4, 24, 24)).realize().conv2d(Tensor(rnd(32, 4, 5, 5)).realize())))
  biased = conv_item(kernels(Tensor(rnd(2, 1, 28, 28)).realize().conv2d(Tensor(rnd(32, 1, 5, 5)).realize(), Tensor(rnd(32)).realize())))
  assert len(biased.inputs) == 3, biased.name   # (x, w and the bias in one kernel)
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: 16)
  no_rows = conv_item(kernels(Tensor(rnd(1, 5, 13, 13)).realize().conv2d(Tensor(rnd(16, 5, 3, 3)).realize(), padding=1)))
  dw = conv_item(kernels(Tensor(rnd(2, 16, 20, 20)).realize().conv2d(Tensor(rnd(16, 1, 3, 3)).realize(), groups=16)))
  ew = kernels(Tensor(rnd(4, 20, 20)).realize() * 2)[-1]
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: 8)
  last = conv_item(kernels(Tensor(rnd(2, 5, 12, 12)).realize().conv2d(Tensor(rnd(16, 5, 3, 3)).realize())))   # rows of 10
  assert lower(last.ast, last.name).global_ranges[-1].src[0].arg == 16, last.name
  for si in (torch_layout, biased, no_rows, dw, ew, last):
    k = lower(si.ast, si.name)
    assert channels_innermost(k, cpu_target) is k, si.name

@pytest.mark.parametrize("xs,ws,kw", [((1, 32, 24, 24), (32, 32, 5, 5), {}), ((3, 1, 28, 28), (32, 1, 5, 5), {}),
                                      ((2, 3, 10, 10), (64, 3, 3, 3), {"padding": 1})])
def test_fused_channel_convs_and_their_gradients_match_torch(xs, ws, kw, monkeypatch):
  """beautiful_mnist's 5x5 convs (batch 1 and 3; the input gradient of the 32-channel one runs as row bands, each band a
  fused channel conv) and a padded 3x3 over 10x10 with 3 input channels, built as for 16 lanes: a TinyJit step's output
  and both gradients equal float64 torch's."""
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: 16)
  _, step = jit_conv_grads_match_torch(rnd(*xs), rnd(*ws) * 0.3, kw, realized=True, gw_atol=2e-3)
  assert step.items
