"""Structure of the default CPU opts for convolutions (compiler/opt/conv.py, frontend conv2d): conv2d copies its padded
input, so the conv kernel reads without gates; rows that are a multiple of the vector width take the matmul register
tile, odd rows get overlapping full-width vectors (window_tile) x several output channels; results equal torch."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from frontend import Tensor
from frontend.devices import open_device, target_of
from frontend.beam_runner import beam_runner
from compiler.schedule import create_schedule
from compiler.lower import lower
from compiler.linearize import linearize
from compiler.render_c import render_c
from compiler.opt.heuristic import optimize
from compiler.opt.apply import has_vectors
from compiler.opt.conv import channels_innermost, overlap_vectors, window_tile, has_gates
from compiler.beam import build
from compiler.opt.pressure import vector_spills
from compiler.uop import Ops

pytestmark = [pytest.mark.usefixtures("on_cpu")]   # CPU opts: CPU tensors even under MOCKGPU=1 NV=1
DEV = open_device("CPU")
DI = target_of("CPU")
W = DI.lanes
rng = np.random.default_rng(3)

def conv_kernels(x: Tensor, w: Tensor, **kw) -> list:
  return [si for si in create_schedule([x.conv2d(w, **kw).lazydata]) if si.kind == "kernel"]

def zeros(*s) -> Tensor: return Tensor(np.zeros(s, np.float32)).realize()

def torch_conv(x: np.ndarray, w: np.ndarray, **kw) -> np.ndarray:
  import torch
  return torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), **kw).numpy()

def test_padded_conv_is_a_copy_then_an_ungated_reduction():
  sis = conv_kernels(zeros(2, 4, 14, 14), zeros(8, 4, 3, 3), padding=1)
  assert len(sis) == 2
  pad, conv = (lower(si.ast, si.name) for si in sis)
  assert not pad.reduce_ranges() and has_gates(pad)   # the copy holds the border checks...
  assert conv.reduce_ranges() and not has_gates(conv)  # ...the conv kernel none
  assert len(conv_kernels(zeros(2, 4, 14, 14), zeros(8, 4, 3, 3))) == 1   # no padding: no copy

@pytest.mark.parametrize("hw", [28, 14, 30, 13])
def test_odd_rows_get_overlapping_full_vectors_and_match_torch(hw, cpu_target):
  """Rows that no vector width divides: a few vectors cover the row (the last overlaps), several output channels per
  tile; the kernel (built for each target) has vectors, no gates, no spills, and the result (on this host) equals torch.
  (8 output channels: no whole AVX-512 vector of them, so the frontend keeps the row tile on any host.)"""
  x, w = rng.standard_normal((2, 5, hw, hw)).astype(np.float32), rng.standard_normal((8, 5, 3, 3)).astype(np.float32)
  si = conv_kernels(Tensor(x).realize(), Tensor(w).realize(), padding=1)[-1]
  k = optimize(lower(si.ast, si.name), cpu_target)
  ov = [o for o in k.applied_opts if o[0] == "OVERLAP_VECTOR"]
  assert ov and has_vectors(k), k.applied_opts
  lanes, starts = ov[0][2], ov[0][3]
  assert starts[-1] == hw - lanes and len(starts) * lanes >= hw and hw % lanes   # full-width vectors, last one overlaps
  assert any(o[0] == "UPCAST" for o in k.applied_opts), k.applied_opts      # several output channels per tile
  assert not any(u.op in (Ops.CMPLT, Ops.WHERE) for u in k.sink.toposort())
  assert vector_spills(render_c(k, 2 if k.threaded is not None else 1), k.name, cpu_target.cc_flags) == 0
  np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), padding=1).numpy(), torch_conv(x, w, padding=1), rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("hw,pad", [(8, 0), (12, 0), (7, 1), (3, 1)])
def test_short_odd_rows_vectorize_output_channels_and_match_torch(hw, pad, cpu_target):
  """Output rows shorter than 12 and no multiple of 8 (6, 10, 7, 3): the conv runs vectorized along its output
  channels (_conv_fwd_cout: a tile whose vector loop is the innermost output loop, cout), with no overlapping row
  vectors; the kernel has no gates, no spills, and the result equals torch (forward and both gradients)."""
  import torch
  x, w = rng.standard_normal((3, 5, hw, hw)).astype(np.float32), rng.standard_normal((16, 5, 3, 3)).astype(np.float32)
  sis = conv_kernels(Tensor(x).realize(), Tensor(w).realize(), padding=pad)
  conv = next(si for si in sis if lower(si.ast, si.name).reduce_ranges())
  k0 = lower(conv.ast, conv.name)
  # the output channels: the innermost output loop, or (stored channels-first on a host of 16 lanes: _conv_fwd_cout
  # fused_store) moved innermost by the opts (compiler/opt/conv.py channels_innermost)
  ch = next(r for r in k0.global_ranges if r.src[0].arg == 16)
  assert ch is k0.global_ranges[-1] or (DI.lanes > 8 and channels_innermost(k0, cpu_target).global_ranges[-1] is ch)
  k = optimize(k0, cpu_target)
  assert not any(o[0] == "OVERLAP_VECTOR" for o in k.applied_opts), k.applied_opts
  tile = [o for o in k.applied_opts if o[0] == "TILE"]
  assert tile and tile[0][3] == ch.arg[0] and tile[0][4] >= 8, k.applied_opts   # vectors along cout
  assert has_vectors(k) and not any(u.op in (Ops.CMPLT, Ops.WHERE) for u in k.sink.toposort())
  assert vector_spills(render_c(k, 2 if k.threaded is not None else 1), k.name, cpu_target.cc_flags) == 0
  xt, wt = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  g = rng.standard_normal((3, 16, hw + 2 * pad - 2, hw + 2 * pad - 2)).astype(np.float32)
  (xt.conv2d(wt, padding=pad) * Tensor(g)).sum().backward()
  tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  ref = torch.nn.functional.conv2d(tx, tw, padding=pad); (ref * torch.tensor(g)).sum().backward()
  np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), padding=pad).numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(wt.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-3)

@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(4, 70), st.sampled_from([4, 8, 16]), st.integers(1, 3))
def test_overlap_vectors_store_every_output_once_per_value(n, wv, cout):
  """overlap_vectors on any row length: the stores cover exactly the row (no lane past it), and the kernel computes
  what the unoptimized one does."""
  if wv > n or wv > W: return
  x, w = rng.standard_normal((1, 2, 3, n)).astype(np.float32), rng.standard_normal((cout, 2, 1, 3)).astype(np.float32)
  si = conv_kernels(Tensor(x).realize(), Tensor(w).realize(), padding=(0, 1))[-1]   # pad the row only: output rows of length n
  k = lower(si.ast, si.name)
  rj = k.global_ranges[-1]
  assert rj.src[0].arg == n
  kv = overlap_vectors(k, rj, wv)
  assert rj not in kv.global_ranges and rj in k.global_ranges   # k itself is unchanged
  starts = kv.applied_opts[-1][3]
  assert sorted({s + i for s in starts for i in range(wv)}) == list(range(n))
  run = beam_runner(si, DEV)
  ref = run(build(lower(si.ast, si.name), (), DI))[1][0]
  for kk in (kv, optimize(lower(si.ast, si.name), DI)):   # and whatever the default opts make of it
    np.testing.assert_allclose(run(build(kk, (), DI))[1][0], ref, rtol=1e-5, atol=1e-5)

def test_window_tile_leaves_gated_kernels_and_vector_multiples_alone(cpu_target):
  t, lanes = cpu_target, cpu_target.simd_bytes // 4
  gated = [si for si in create_schedule([zeros(2, 3, 12, 28).pad((1, 1, 1, 1)).conv2d(zeros(8, 3, 3, 3)).lazydata]) if si.kind == "kernel"][-1]
  assert window_tile(lower(gated.ast, gated.name), lanes, t) is None
  si = conv_kernels(zeros(2, 3, 8, 32), zeros(8, 3, 3, 3), padding=1)[-1]
  assert window_tile(lower(si.ast, si.name), lanes, t) is None     # 32 lanes: the matmul tile's job
  k = optimize(lower(si.ast, si.name), t)
  assert k.applied_opts[0][0] == "TILE" and has_vectors(k)

def test_bench_conv_kernel_inner_loop_is_fmas_of_plain_vector_loads(cpu_target):
  """The benchmark's second conv (32 -> 64 channels, 32x32, pad 1): a register tile of vectors along the row times
  output channels; its reduction body loads whole vectors (no lane-by-lane gathers, no ternaries) and nothing spills."""
  si = conv_kernels(zeros(4, 32, 32, 32), zeros(64, 32, 3, 3), padding=1)[-1]
  k = optimize(lower(si.ast, si.name), cpu_target)
  prog = linearize(k)
  loads = [u for u in prog if u.op is Ops.LOAD]
  vec_loads = [u for u in loads if u.dtype.count > 1]
  accs = [u for u in prog if u.op is Ops.DEFINE_ACC]
  assert k.threaded is not None and vec_loads and len(accs) >= 8, (k.applied_opts, len(accs))
  assert all(len(u.src) == 2 for u in loads)   # no gate on any load
  src = render_c(k, 2)
  assert "?" not in src and vector_spills(src, k.name, cpu_target.cc_flags) == 0
