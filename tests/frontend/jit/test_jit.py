"""TinyJit: capture/replay, and one test per known trap (each must do the right thing or raise)."""
import numpy as np
import pytest
from frontend import Tensor, TinyJit, GlobalCounters
from frontend.jit import JitError

def realized(*shape, seed=0, device=None):
  return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), device=device).realize()

def test_replay_uses_new_inputs():
  w = realized(4, 3, seed=1)
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x @ w).relu()
  for i in range(5):
    x = realized(2, 4, seed=10 + i)
    np.testing.assert_allclose(f(x).numpy(), np.maximum(x.numpy() @ w.numpy(), 0), rtol=1e-5, atol=1e-6)
  assert f.cnt == 2 and len(f.items) >= 1

def test_replay_runs_no_python():
  calls = []
  @TinyJit
  def f(x: Tensor) -> Tensor:
    calls.append(1)
    return x * 2
  for i in range(6): f(realized(3, seed=i))
  assert len(calls) == 2   # eager call + capture call; the rest are replays

def test_nothing_to_capture_raises():
  x = realized(3)
  @TinyJit
  def f(t: Tensor) -> Tensor: return t   # launches no kernel
  f(x)
  with pytest.raises(JitError, match="nothing to capture"): f(x)

def test_shape_and_dtype_change_raise():
  @TinyJit
  def f(x: Tensor) -> Tensor: return x + 1
  for i in range(3): f(realized(4, seed=i))
  with pytest.raises(JitError, match=r"argument .x. has shape \(5,\)"): f(realized(5))
  with pytest.raises(JitError, match="dtype"): f(Tensor([1, 2, 3, 4]).realize())

def test_unrealized_input_is_realized_outside_the_capture():
  @TinyJit
  def f(x: Tensor) -> Tensor: return x + 1
  for i in range(5):
    base = realized(3, seed=i)
    np.testing.assert_allclose(f(base * 2).numpy(), base.numpy() * 2 + 1, rtol=1e-6)   # a lazy argument each call
  assert f.cnt == 2 and [ei.kind for ei in f.items] == ["kernel"]   # the recording holds the function's kernel only

def test_unrealized_inputs_are_realized():
  # lazy expressions and constants as arguments: realized before each call, then swapped in like any argument
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x + 1).sum()
  xs = [Tensor.ones(3) * i for i in range(5)] + [Tensor.full((3,), 7.0), Tensor([1.0, 2.0, 3.0]) + Tensor([1.0, 1.0, 1.0])]
  assert [f(x).item() for x in xs] == [3.0, 6.0, 9.0, 12.0, 15.0, 24.0, 12.0]
  assert f.cnt == 2

def test_changed_python_scalar_raises():
  @TinyJit
  def f(x: Tensor, scale: float) -> Tensor: return x * scale
  x = realized(3)
  f(x, 2.0); f(x, 2.0)
  np.testing.assert_allclose(f(x, 2.0).numpy(), x.numpy() * 2)
  with pytest.raises(JitError, match="scale|argument 1"): f(x, 3.0)

def test_output_of_earlier_call_not_aliased():
  @TinyJit
  def f(x: Tensor) -> Tensor: return x * 3
  outs, xs = [], [realized(4, seed=i) for i in range(5)]
  for x in xs: outs.append(f(x))
  for x, o in zip(xs, outs): np.testing.assert_allclose(o.numpy(), x.numpy() * 3, rtol=1e-6)

def test_host_read_during_capture_raises():
  @TinyJit
  def f(x: Tensor) -> Tensor:
    y = x.sum()
    if y.item() > 0: return x * 2   # data-dependent Python: not replayable
    return x
  f(realized(3))
  with pytest.raises(JitError, match="during TinyJit capture"): f(realized(3))

def test_tensor_truth_value_raises():
  @TinyJit
  def f(x: Tensor) -> Tensor: return x * 2 if (x.sum() > 0) else x
  with pytest.raises(TypeError, match="ambiguous"): f(realized(3))

def test_random_differs_every_replay():
  @TinyJit
  def f(x: Tensor) -> Tensor: return x + Tensor.rand(*x.shape)
  x = Tensor.zeros(8).contiguous().realize()
  vals = [f(x).numpy() for _ in range(5)]
  for i in range(len(vals)):
    for j in range(i + 1, len(vals)): assert not np.array_equal(vals[i], vals[j])

def test_state_assign_replayed():
  state = Tensor.zeros(3).contiguous().realize()
  @TinyJit
  def step(x: Tensor) -> Tensor:
    state.assign(state + x)
    return state.sum()
  x = Tensor([1.0, 2.0, 3.0]).realize()
  for _ in range(6): step(x)
  np.testing.assert_allclose(state.numpy(), [6.0, 12.0, 18.0])

def test_training_step_matches_eager_bit_for_bit():
  def make():
    Tensor.manual_seed(3)
    return Tensor.randn(4, 8, requires_grad=True).realize(), Tensor.zeros(8, requires_grad=True).contiguous().realize()
  X = [realized(16, 4, seed=100 + i) for i in range(5)]
  Y = [realized(16, 8, seed=200 + i) for i in range(5)]
  def step(w, b, x, y):
    loss = ((x @ w + b - y) ** 2).mean()
    loss.backward()
    w.assign(w.detach() - 0.1 * w.grad); b.assign(b.detach() - 0.1 * b.grad)
    w.grad = b.grad = None
    Tensor.realize(w, b)
    return loss.realize()
  we, be = make()
  GlobalCounters.reset()
  for x, y in zip(X, Y): step(we, be, x, y)
  eager_kernels = GlobalCounters.kernel_count
  wj, bj = make()
  jstep = TinyJit(lambda x, y: step(wj, bj, x, y))
  GlobalCounters.reset()
  for x, y in zip(X, Y): jstep(x, y)
  assert GlobalCounters.kernel_count == eager_kernels
  np.testing.assert_array_equal(wj.numpy(), we.numpy())
  np.testing.assert_array_equal(bj.numpy(), be.numpy())

def test_cpu_replay_is_one_launch_list(monkeypatch, capfd):
  """On the CPU a replay runs the capture's prebuilt launch list (one native call); the counters still count every
  kernel, and DEBUG=2 replays launch by launch so each kernel's time is printed as in eager mode. (On the CPU device
  by name: the default may be a GPU.)"""
  from hcqrt.cpu.device import CPULaunchList
  w = realized(16, 16, seed=1, device="CPU")
  @TinyJit
  def f(x: Tensor) -> Tensor: return ((x @ w).relu() @ w).softmax(1)
  want = lambda x: ((lambda h: np.exp(h - h.max(1, keepdims=True)) / np.exp(h - h.max(1, keepdims=True)).sum(1, keepdims=True))(np.maximum(x @ w.numpy(), 0) @ w.numpy()))
  outs = []
  for i in range(4):
    x = realized(64, 16, seed=30 + i, device="CPU")
    GlobalCounters.reset()
    outs.append((x.numpy(), f(x)))
  assert isinstance(f.graph, CPULaunchList) and GlobalCounters.kernel_count == len(f.items) >= 3 and GlobalCounters.time_sum_s > 0
  monkeypatch.setenv("DEBUG", "2")
  capfd.readouterr()
  x = realized(64, 16, seed=40, device="CPU")
  outs.append((x.numpy(), f(x)))
  assert capfd.readouterr().err.count(" kernel ") == len(f.items)
  for xn, y in outs: np.testing.assert_allclose(y.numpy(), want(xn), rtol=1e-5, atol=1e-6)
