"""Symbolic sizes through the windowed ops: conv2d, avg_pool2d and max_pool2d over a bound-Variable batch or spatial
size, and cumsum over a symbolic axis. Each equals the concrete computation (torch float64) for several bound values,
eager and under TinyJit (one capture, one kernel set for every value); out-of-range binds are refused by name.
Under `MOCKGPU=1 NV=1` / `MOCKGPU=1 AMD=1` the same tests run on the mock GPUs; test_on_gpu_backends runs a few of
them there on its own."""
import numpy as np
import pytest
import torch
import torch.nn.functional as tF
from frontend import Tensor, TinyJit, Variable, dtypes
from frontend.jit import JitError
from compiler.uop import UOp, Ops
from compiler.sint import sval
from frontend import engine
from tests.frontend.symbolic.test_symbolic import count_compiles
from tests.frontend.symbolic.test_symbolic_views import rnd, kernels

@pytest.fixture
def compiles(monkeypatch):
  """A list that receives the name of every kernel compiled during the test (which starts with no kernel loaded)."""
  monkeypatch.setattr(engine, "_kernel_cache", {})
  return count_compiles(monkeypatch)

def val(shape) -> tuple[int, ...]: return tuple(sval(d) for d in shape)
def t64(x: np.ndarray) -> torch.Tensor: return torch.from_numpy(x.astype(np.float64))

X, WT, WG, BIAS = rnd(3, 4, 11, 10, seed=1), rnd(5, 4, 3, 3, seed=2), rnd(4, 2, 3, 2, seed=3), rnd(5, seed=4)

# name: (f(x: Tensor) -> Tensor, reference f(x: torch float64) -> torch, input, slicer(x, v), Variable range, values)
# The slicer cuts the input's batch or spatial dims to the bound Variable (a numpy int slices the reference's input).
def H(x, v): return x[:, :, :v]
def W(x, v): return x[:, :, :, :v]
CASES = {
  "conv_h": (lambda x: x.conv2d(Tensor(WT)), lambda x: tF.conv2d(x, t64(WT)), X, H, (3, 11), (3, 7, 11, 4)),
  "conv_w_pad_bias": (lambda x: x.conv2d(Tensor(WT), Tensor(BIAS), padding=1), lambda x: tF.conv2d(x, t64(WT), t64(BIAS), padding=1),
                      X, W, (1, 10), (1, 6, 10, 2)),
  "conv_h_stride_dil": (lambda x: x.conv2d(Tensor(WT), stride=2, dilation=(2, 1), padding=(1, 0)),
                        lambda x: tF.conv2d(x, t64(WT), stride=2, dilation=(2, 1), padding=(1, 0)), X, H, (4, 11), (4, 5, 8, 11)),
  "conv_w_groups_asym_pad": (lambda x: x.conv2d(Tensor(WG), groups=2, padding=(0, 1, 2, 0)),   # (left, right, top, bottom)
                             lambda x: tF.conv2d(tF.pad(x, (0, 1, 2, 0)), t64(WG), groups=2), X, W, (2, 10), (2, 5, 9)),
  "conv_batch": (lambda x: x.conv2d(Tensor(WT), padding=1), lambda x: tF.conv2d(x, t64(WT), padding=1), X, lambda x, v: x[:v], (1, 3), (2, 1, 3)),
  "avg_pool_h": (lambda x: x.avg_pool2d(), lambda x: tF.avg_pool2d(x, 2), X, H, (2, 11), (2, 7, 11, 4)),
  "avg_pool_w_overlap": (lambda x: x.avg_pool2d(3, stride=2, padding=1, count_include_pad=False),
                         lambda x: tF.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False), X, W, (2, 10), (2, 5, 10, 7)),
  "avg_pool_h_incl_pad": (lambda x: x.avg_pool2d(3, stride=1, padding=1), lambda x: tF.avg_pool2d(x, 3, stride=1, padding=1), X, H, (1, 11), (1, 6, 11)),
  "max_pool_h": (lambda x: x.max_pool2d(), lambda x: tF.max_pool2d(x, 2), X, H, (2, 11), (2, 7, 11, 4)),
  "max_pool_w_overlap": (lambda x: x.max_pool2d(3, stride=2, padding=1), lambda x: tF.max_pool2d(x, 3, stride=2, padding=1), -X, W, (2, 10), (2, 5, 10, 7)),
  "max_pool_batch": (lambda x: x.max_pool2d(3, stride=1), lambda x: tF.max_pool2d(x, 3, stride=1), X, lambda x, v: x[:v], (1, 3), (3, 1, 2)),
  "cumsum_axis0": (lambda x: x.cumsum(0), lambda x: x.cumsum(0), X[0, 0], lambda x, v: x[:v], (1, 11), (1, 5, 11, 8)),
  "cumsum_axis1": (lambda x: x.cumsum(1), lambda x: x.cumsum(1), X[0, 0], lambda x, v: x[:, :v], (1, 10), (3, 10, 1, 6)),
  "cumsum_other_axis": (lambda x: x.cumsum(1), lambda x: x.cumsum(1), X[0, 0], lambda x, v: x[:v], (1, 11), (2, 10, 4, 11)),
  "cummax_sym": (lambda x: x.cummax(0)[0], lambda x: x.cummax(0)[0], X[0, 0], lambda x, v: x[:v], (1, 11), (2, 10, 5, 11)),
}

def run_case(name: str, mode: str, compiles: list, values=None):
  f, ref, inp, sl, (lo, hi), vals = CASES[name]
  x = Tensor(inp).realize()
  v = Variable("v", lo, hi)
  jf = TinyJit(lambda a: f(a).realize()) if mode == "jit" else None
  counts = []
  for i in values or vals:
    got = (jf or (lambda a: f(a).realize()))(sl(x, v.bind(i)))
    want = ref(t64(sl(inp, i))).numpy()
    assert val(got.shape) == want.shape, (name, i, got.shape, want.shape)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5, err_msg=f"{name} at v={i}")
    counts.append(len(compiles))
  # one kernel set for every value: nothing compiled after the first value (jit: after the capture)
  assert counts[0] > 0 and counts[-1] == counts[1 if mode == "jit" else 0], (name, counts)
  if mode == "jit": assert jf.cnt == 2 and kernels(jf) >= 1
  return jf, x, v

@pytest.mark.parametrize("mode", ["eager", "jit"])
@pytest.mark.parametrize("name", list(CASES))
def test_windowed_op_over_a_symbolic_size(name, mode, compiles):
  run_case(name, mode, compiles)

def test_conv_over_two_symbolic_spatial_dims(compiles):
  """H and W each bound to their own Variable; the conv then a pool, one capture for every (h, w)."""
  vh, vw = Variable("h", 4, 11), Variable("w", 4, 10)
  x, w = Tensor(X).realize(), Tensor(WT).realize()
  f = TinyJit(lambda a: a.conv2d(w, padding=1).relu().max_pool2d().realize())
  for n, (h, ww) in enumerate([(5, 4), (11, 10), (8, 7), (4, 9)]):
    got = f(x[:, :, :vh.bind(h), :vw.bind(ww)])
    want = tF.max_pool2d(tF.conv2d(t64(X[:, :, :h, :ww]), t64(WT), padding=1).relu(), 2).numpy()
    assert val(got.shape) == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    if n == 1: before = len(compiles)
  assert f.cnt == 2 and len(compiles) == before

def test_cumsum_over_a_long_symbolic_axis():
  """A Variable whose maximum is past the block size of the scan (256): the blocked scan of the maximum, cut back."""
  a = rnd(700, seed=9)
  x, v = Tensor(a).realize(), Variable("n", 1, 700)
  for n in (1, 300, 700):
    np.testing.assert_allclose(x[:v.bind(n)].cumsum().numpy(), np.cumsum(a[:n].astype(np.float64)), rtol=1e-4, atol=1e-4)

def test_conv_gradient_over_a_symbolic_size():
  """The backward pass goes through the pad to the maximum and the cut back: the input gradient is zero past v."""
  for h in (4, 9):
    x, w = Tensor(X[:1], requires_grad=True), Tensor(WT, requires_grad=True)
    x[:, :, :Variable("h", 3, 11).bind(h)].conv2d(w, padding=1).sum().backward()
    tx, tw = t64(X[:1]).requires_grad_(), t64(WT).requires_grad_()
    tF.conv2d(tx[:, :, :h], tw, padding=1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-4)

def test_out_of_range_binds_are_refused_by_name(compiles):
  """A value past the Variable's range (the kernels' buffers are sized for the range) is refused before anything runs:
  by .bind, and for a forged bind by the TinyJit replay and the eager launch, each naming the Variable."""
  x, v = Tensor(rnd(1, 2, 5, 12, seed=5)).realize(), Variable("v", 1, 10)
  w = Tensor(WT[:, :2]).realize()
  out = Tensor.zeros(1, 5, 5, 10).contiguous().realize()
  f = TinyJit(lambda a: out[:, :, :, :a.shape[3]].assign(a.conv2d(w, padding=1)).realize())
  for i in (3, 8, 5): f(x[:, :, :, :v.bind(i)])
  before = out.numpy()
  with pytest.raises(ValueError, match=r"Variable 'v': value 11 is outside its range \[1, 10\]"): v.bind(11)
  forged = UOp(Ops.BIND, dtypes.int32, (v, UOp.const(dtypes.int32, 11)))   # what .bind refuses to make
  with pytest.raises(ValueError, match=r"TinyJit .* replay: Variable 'v' = 11 is outside its range \[1, 10\]"): f(x[:, :, :, :forged])
  np.testing.assert_array_equal(out.numpy(), before)   # nothing was written
  # eager: the cut back to the true size is checked against the maximum (the value is named) before any kernel
  with pytest.raises(ValueError, match=r"shrink: .*v=11.* out of range"): x[:, :, :, :forged].cumsum(3).realize()
  with pytest.raises(ValueError, match=r"Variable 'v': value 0 is outside its range \[1, 10\]"): v.bind(0)

def test_symbolic_sizes_refused_clearly():
  x, v = Tensor(X), Variable("v", 1, 11)
  with pytest.raises(ValueError, match=r"conv2d: .* may be smaller than the kernel .* as small as 1"): x[:, :, :v.bind(5)].conv2d(Tensor(WT))
  with pytest.raises(NotImplementedError, match=r"max_pool2d: ceil_mode .* symbolic"): x[:, :, :v.bind(5)].max_pool2d(ceil_mode=True)
  with pytest.raises(NotImplementedError, match=r"max_pool2d: return_indices .* symbolic"): x[:, :, :v.bind(5)].max_pool2d(return_indices=True)
  with pytest.raises(NotImplementedError, match=r"avg_pool2d: ceil_mode .* symbolic"): x[:, :, :v.bind(5)].avg_pool2d(ceil_mode=True)
  with pytest.raises(JitError, match="shape"):
    f = TinyJit(lambda a: a.conv2d(Tensor(WT)).realize())
    for i in (4, 5): f(x[:, :, :Variable("v", 3, 11).bind(i)])
    f(Tensor(rnd(2, 4, 11, 10))[:, :, :Variable("v", 3, 11).bind(6)])

@pytest.mark.parametrize("dev", ["NV", "AMD", "PTXEMU"])
def test_on_gpu_backends(dev, compiles, monkeypatch):
  """A few of the cases through the GPU code paths (PTX on the NV mock and the PTX emulator, LLVM IR for gfx1100 on
  the AMD mock): the kernels take the Variable as an argument there too, and the HCQ graph patches it per replay."""
  from frontend import Device
  if dev != "PTXEMU":
    monkeypatch.setenv("MOCKGPU", "1")
    Device[dev]   # opened through the mock driver (a no-op when it is open already)
  monkeypatch.setattr(Device, "DEFAULT", dev)
  for name, values in [("conv_w_pad_bias", (2, 6, 10)), ("max_pool_w_overlap", (2, 9, 5)), ("cumsum_axis0", (1, 7, 11))]:
    compiles.clear()
    run_case(name, "jit", compiles, values=values)
