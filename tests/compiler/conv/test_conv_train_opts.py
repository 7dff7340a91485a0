"""Convolutions inside a TinyJit training step keep the conv opts (issue 17): the kernels of a conv's forward, its
input gradient (a transposed conv) and its weight gradient (a reduction over batch x pixels, computed with the output
channels contiguous) each carry a register tile of vectors, for both CPU targets (AVX2 and AVX-512, built and inspected
on any host), spill-free; the step's gradients equal torch's."""
import numpy as np
import pytest
from frontend import Tensor, TinyJit
from compiler.lower import lower
from compiler.opt.heuristic import optimize
from compiler.opt.apply import has_vectors
from compiler.opt.pressure import vector_spills
from compiler.render_c import render_c
from compiler.view import prod

pytestmark = [pytest.mark.usefixtures("on_cpu")]   # CPU opts: CPU tensors even under MOCKGPU=1 NV=1

def _inputs(seed: int = 0):
  rng = np.random.default_rng(seed)
  return (rng.standard_normal((2, 3, 16, 16)).astype(np.float32), rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
          rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.3)

def _step_items(xn, w1n, w2n):
  """A TinyJit step of two padded convs with a relu between them, forward + backward into x, w1 and w2: the kernels
  it captured (ExecItems: their Kernel keeps the AST and the CompiledKernel with its applied_opts) and its gradients."""
  x, w1, w2 = (Tensor(a, requires_grad=True).realize() for a in (xn, w1n, w2n))
  @TinyJit
  def step(x):
    out = x.conv2d(w1, padding=1).relu().conv2d(w2, padding=1)
    loss = (out * out).mean()
    loss.backward()
    return loss.realize(), x.grad.realize(), w1.grad.realize(), w2.grad.realize()
  for _ in range(3):   # run, capture, replay
    x.grad = w1.grad = w2.grad = None
    res = step(x)
  return [ei for ei in step.items if ei.kind == "kernel"], [r.numpy() for r in res]

def _conv_like(k) -> bool:
  """A kernel with a window or batch x pixels reduction and several output loops: a conv forward or gradient (not
  the loss's sum)."""
  return len(k.global_ranges) >= 3 and prod(r.src[0].arg for r in k.reduce_ranges()) >= 9

def _tiled(opts) -> bool:
  """A register tile: vector columns times unrolled rows (TILE with a row loop) or overlapping vectors x rows."""
  return any(o[0] == "TILE" and o[1] is not None and o[2] > 1 for o in opts) or \
         (any(o[0] == "OVERLAP_VECTOR" for o in opts) and any(o[0] == "UPCAST" for o in opts))

def _match_torch(xn, w1n, w2n, loss, gx, gw1, gw2):
  """The step's loss and gradients equal torch's."""
  import torch
  x, w1, w2 = (torch.tensor(a, requires_grad=True) for a in (xn, w1n, w2n))
  out = torch.nn.functional.conv2d(torch.nn.functional.conv2d(x, w1, padding=1).relu(), w2, padding=1)
  tl = (out * out).mean(); tl.backward()
  np.testing.assert_allclose(loss, tl.item(), rtol=1e-4)
  for ours, theirs in ((gx, x.grad), (gw1, w1.grad), (gw2, w2.grad)):
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-3, atol=1e-4)

def test_train_step_conv_kernels_are_tiled_and_match_torch():
  """The engine's kernels (built for this host): forward convs, dx and dW all tiled; the gradients equal torch."""
  xn, w1n, w2n = _inputs()
  items, (loss, gx, gw1, gw2) = _step_items(xn, w1n, w2n)
  convs = [ei.kernel for ei in items if _conv_like(lower(ei.kernel.ast, ei.kernel.name))]
  # 2 forward convs, the input gradients of both (x requires grad), the two weight gradients
  assert len(convs) == 6, [k.name for k in convs]
  for k in convs: assert _tiled(k.compiled.applied_opts), (k.name, k.compiled.applied_opts)
  _match_torch(xn, w1n, w2n, loss, gx, gw1, gw2)

def test_train_step_conv_kernels_tiled_for_each_cpu_target(cpu_target):
  """The same step's conv kernels built for AVX2 and AVX-512 (from the ASTs the JIT captured): each has a register
  tile of vectors and no vector spills."""
  items, _ = _step_items(*_inputs(1))
  ks = [optimize(lower(ei.kernel.ast, ei.kernel.name), cpu_target) for ei in items]
  convs = [k for k, ei in zip(ks, items) if _conv_like(lower(ei.kernel.ast, ei.kernel.name))]
  assert len(convs) == 6, [k.name for k in convs]
  for k in convs:
    assert _tiled(k.applied_opts) and has_vectors(k), (k.name, k.applied_opts)
    src = render_c(k, 2 if k.threaded is not None else 1)
    assert vector_spills(src, k.name, cpu_target.cc_flags) == 0, (k.name, k.applied_opts)

def inner_accumulators(k) -> int:
  """The most vector accumulators updated inside one innermost loop of kernel k (what hides the FMA latency)."""
  from compiler.linearize import linearize
  from compiler.uop import Ops
  best, stack = 0, []
  for u in linearize(k):
    if u.op is Ops.RANGE: stack = [(c, False) for c, _ in stack] + [(0, True)]
    elif u.op is Ops.ASSIGN and u.dtype.count > 1 and stack: stack[-1] = (stack[-1][0] + 1, stack[-1][1])
    elif u.op is Ops.ENDRANGE:
      c, inner = stack.pop()
      if inner: best = max(best, c)
  return best

def test_wide_conv_kernels_keep_twelve_accumulators_on_avx2(monkeypatch):
  """Rows of 24 (3 vectors) and a channel count 6 does not divide (16): on AVX2 (16 registers) the big conv kernels
  of the step keep 12 vector accumulators in their inner loop (4 rows x 3 vectors, or 6 x 2 with the channels cut at
  a multiple of 6), where 8 leave the FMA units waiting on the latency; every conv kernel is spill-free; and the
  engine's step on this host gives torch's gradients. The step is built as the frontend builds it for AVX2 (on an
  AVX-512 host it would vectorize these rows of 24 along the output channels instead: frontend/nn_ops.py _short_odd_rows)."""
  from hcqrt.cpu.device import CPUDevice
  from compiler.target import Target
  import frontend.nn_ops as nn_ops
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: 8)
  rng = np.random.default_rng(2)
  xn, w1n, w2n = (rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((2, 4, 12, 24), (16, 4, 3, 3), (16, 16, 3, 3)))
  items, (loss, gx, gw1, gw2) = _step_items(xn, w1n, w2n)
  avx2 = Target.from_report(CPUDevice(isa="x86-64-v3").target)
  wide = 0
  for ei in items:
    k = optimize(lower(ei.kernel.ast, ei.kernel.name), avx2)
    if not _conv_like(k): continue
    wide += inner_accumulators(k) >= 12
    assert vector_spills(render_c(k, 2 if k.threaded is not None else 1), k.name, avx2.cc_flags) == 0, (k.name, k.applied_opts)
  assert wide >= 4, wide   # conv 2 forward, both input gradients (rows of 3 vectors), the weight gradient of conv 2
  _match_torch(xn, w1n, w2n, loss, gx, gw1, gw2)
