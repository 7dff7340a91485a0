"""The JIT trap list (issue 16): each case is captured, then replayed with *different* tensors, and must give what
eager execution gives (or raise JitError naming the argument). Every case runs on the CPU; a smaller set runs on
the NV mock (`nv` fixture)."""
import numpy as np
import pytest
from frontend import Tensor, TinyJit, GlobalCounters, nn
from frontend.jit import JitError
from frontend.optim import SGD
from conftest import registry_on_mock

def rnd(*shape, seed=0, device=None):
  return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), device=device).realize()

def close(a, b): np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

@pytest.fixture(params=["CPU", "NV", "AMD"])
def dev(request):
  """The CPU and both HCQ devices (graph replays) on their mock drivers."""
  if request.param in ("NV", "AMD"): registry_on_mock(request.param)
  return request.param

# ---- 1. inputs that are views ----
def test_view_slices_at_other_offsets(dev):
  base = rnd(4, 8, seed=1, device=dev)
  @TinyJit
  def f(x: Tensor) -> Tensor: return x * 2 + 1
  for i in range(6): close(f(base[:, i:i + 2]).numpy(), base.numpy()[:, i:i + 2] * 2 + 1)

def test_view_transpose_after_plain(dev):
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x - x.max(1, keepdim=True)).exp()
  bs = [rnd(3, 3, seed=i, device=dev) for i in range(4)]
  for b in bs[:3]: close(f(b).numpy(), np.exp(b.numpy() - b.numpy().max(1, keepdims=True)))
  bt = bs[3].T
  close(f(bt).numpy(), np.exp(bs[3].numpy().T - bs[3].numpy().T.max(1, keepdims=True)))

def test_view_plain_after_transpose():
  @TinyJit
  def f(x: Tensor) -> Tensor: return x + 1
  bs = [rnd(3, 4, seed=i) for i in range(4)]
  for b in bs[:3]: close(f(b.T).numpy(), b.numpy().T + 1)
  c = rnd(4, 3, seed=9)
  close(f(c).numpy(), c.numpy() + 1)

def test_view_expand(dev):
  @TinyJit
  def f(x: Tensor) -> Tensor: return x * 3
  for i in range(4):
    x = rnd(1, seed=i, device=dev)
    close(f(x.expand(8)).numpy(), np.repeat(x.numpy(), 8) * 3)
  y = rnd(8, seed=7, device=dev)   # a plain tensor after the expanded capture
  close(f(y).numpy(), y.numpy() * 3)

def test_view_flip_and_pad():
  @TinyJit
  def f(x: Tensor) -> Tensor: return x.sum(0)
  x = rnd(6, 3, seed=2)
  for _ in range(3): close(f(x.flip(0)).numpy(), x.numpy().sum(0))
  y = rnd(4, 3, seed=3)
  close(f(y.pad(((1, 1), (0, 0)))).numpy(), y.numpy().sum(0))
  close(f(y.pad(((2, 0), (0, 0)))).numpy(), y.numpy().sum(0))

def test_view_reshape_of_whole_buffer_needs_no_copy():
  @TinyJit
  def f(x: Tensor) -> Tensor: return x * 2
  xs = [rnd(12, seed=i) for i in range(4)]
  for x in xs[:3]: f(x.reshape(3, 4))
  GlobalCounters.reset()
  out = f(xs[3].reshape(3, 4))
  assert GlobalCounters.kernel_count == 1   # a reshape of a whole buffer is passed as that buffer
  close(out.numpy(), xs[3].numpy().reshape(3, 4) * 2)

def test_view_input_written_in_place_by_assign():
  """An in-place update of a view argument would not reach the viewed tensor: refuse it."""
  @TinyJit
  def f(x: Tensor) -> Tensor:
    x.assign(x + 1)
    return (x * 2).realize()
  base = rnd(4, 4, seed=3)
  f(base[1:3])
  with pytest.raises(JitError, match="argument 'x'"):
    f(base[1:3])
    f(base[1:3])

# ---- 2. keyword vs positional ----
def test_kwargs_bound_to_parameter_names(dev):
  @TinyJit
  def f(b: Tensor, a: Tensor) -> Tensor: return b - a * 2
  xs = [(rnd(5, seed=i, device=dev), rnd(5, seed=10 + i, device=dev)) for i in range(6)]
  close(f(*xs[0]).numpy(), xs[0][0].numpy() - xs[0][1].numpy() * 2)
  close(f(*xs[1]).numpy(), xs[1][0].numpy() - xs[1][1].numpy() * 2)
  x, y = xs[2]; close(f(a=y, b=x).numpy(), x.numpy() - y.numpy() * 2)
  x, y = xs[3]; close(f(x, a=y).numpy(), x.numpy() - y.numpy() * 2)
  x, y = xs[4]; close(f(b=x, a=y).numpy(), x.numpy() - y.numpy() * 2)

def test_kwargs_capture_by_name_replay_positional():
  @TinyJit
  def f(b: Tensor, a: Tensor, scale: float = 1.0) -> Tensor: return (b - a) * scale
  x, y = rnd(3, seed=1), rnd(3, seed=2)
  f(a=y, b=x); f(a=y, b=x)
  u, v = rnd(3, seed=3), rnd(3, seed=4)
  close(f(u, v).numpy(), u.numpy() - v.numpy())
  close(f(u, v, scale=1.0).numpy(), u.numpy() - v.numpy())   # the default, spelled out
  with pytest.raises(JitError, match="scale"): f(u, v, 2.0)

def test_missing_argument_is_a_type_error():
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return a + b
  with pytest.raises(TypeError): f(rnd(2))

# ---- 3. the same tensor twice ----
def test_same_tensor_twice_at_capture(dev):
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return a + b * 10
  x = rnd(4, seed=1, device=dev)
  f(x, x); close(f(x, x).numpy(), x.numpy() * 11)
  for i in range(3):
    a, b = rnd(4, seed=2 + i, device=dev), rnd(4, seed=20 + i, device=dev)
    close(f(a, b).numpy(), a.numpy() + b.numpy() * 10)
  close(f(x, x).numpy(), x.numpy() * 11)   # and the same tensor again at a replay

def test_same_tensor_twice_written_in_place_raises():
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor:
    a.assign(b.flip(0) + 1)
    return a.sum().realize()
  x = rnd(4, seed=1)
  f(x, rnd(4, seed=2))
  with pytest.raises(JitError, match="same"): f(x, x)

def test_same_tensor_twice_at_replay_written_in_place_raises():
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor:
    a.assign(b.flip(0) + 1)
    return a.sum().realize()
  for i in range(3): f(rnd(4, seed=i), rnd(4, seed=10 + i))
  x = rnd(4, seed=5)
  with pytest.raises(JitError, match="same"): f(x, x)

def test_same_tensor_in_two_views():
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return a * b
  for i in range(4):
    x = rnd(4, 4, seed=i)
    close(f(x, x.T).numpy(), x.numpy() * x.numpy().T)

# ---- 4. in-place updates, returned arguments, closures, pending assigns ----
def test_iadd_twice_on_closure_tensor(dev):
  class S: pass
  s = S(); s.acc = Tensor.zeros(3, device=dev).contiguous().realize()
  @TinyJit
  def f(x: Tensor) -> Tensor:
    s.acc += x
    s.acc += x * 2
    return s.acc.sum().realize()
  total = np.zeros(3, np.float32)
  for i in range(5):
    x = rnd(3, seed=i, device=dev)
    total += x.numpy() * 3
    close(f(x).numpy(), total.sum())
  close(s.acc.numpy(), total)

def test_assign_then_iadd_on_weight():
  w = Tensor.ones(4).contiguous().realize()
  @TinyJit
  def f(x: Tensor) -> Tensor:
    w.assign(w * 2)
    nonlocal_w = w
    nonlocal_w += x
    return (x * 1).realize()
  ref = np.ones(4, np.float32)
  for i in range(4):
    x = rnd(4, seed=i)
    f(x)
    ref = ref * 2 + x.numpy()
  close(w.numpy(), ref)

def test_assign_on_pending_assign_writes_the_buffer():
  """Eager semantics behind the JIT cases: a second assign (or +=) before the first ran must write the same buffer,
  not rebind the tensor to a new one (other tensors over that buffer would miss the write)."""
  w = Tensor.zeros(4).contiguous().realize()
  alias = w.detach()
  w.assign(w + 1); w += 2; w.assign(w * 3)
  w.realize()
  close(alias.numpy(), [9.0] * 4); close(w.numpy(), [9.0] * 4)

def test_assign_reading_the_same_buffer_through_another_tensor():
  """`old` shares w's buffer: reading it flipped while writing w in place would race (the value is copied first)."""
  w = Tensor(np.arange(64, dtype=np.float32)).realize()
  old = w.detach()
  w.assign(w + 1).realize()
  w.assign(old.flip(0))
  close(w.numpy(), np.arange(64, dtype=np.float32)[::-1] + 1)

def test_returns_its_own_argument(dev):
  @TinyJit
  def f(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]: return x, x + y, y.reshape(2, 2)
  for i in range(5):
    x, y = rnd(4, seed=i, device=dev), rnd(4, seed=10 + i, device=dev)
    a, b, c = f(x, y)
    assert a is x
    close(a.numpy(), x.numpy()); close(b.numpy(), x.numpy() + y.numpy()); close(c.numpy(), y.numpy().reshape(2, 2))

def test_returns_its_view_argument():
  @TinyJit
  def f(x: Tensor) -> tuple[Tensor, Tensor]: return x, x.sum()
  base = rnd(5, 4, seed=1)
  for i in range(4):
    a, s = f(base[i:i + 2])
    close(a.numpy(), base.numpy()[i:i + 2]); close(s.numpy(), base.numpy()[i:i + 2].sum())

def test_argument_also_read_through_closure(dev):
  w = rnd(4, seed=1, device=dev)
  @TinyJit
  def f(a: Tensor) -> Tensor: return a * 10 + w
  close(f(w).numpy(), w.numpy() * 11)
  close(f(w).numpy(), w.numpy() * 11)   # captured with the closure's tensor as the argument
  for i in range(3):
    y = rnd(4, seed=5 + i, device=dev)
    close(f(y).numpy(), y.numpy() * 10 + w.numpy())

def test_argument_also_written_through_closure():
  """The argument is a weight the function updates through a closure: the recording can't tell whether a read of
  the argument raced with that write (the frontend's check sees two different tensors): refuse it."""
  w = Tensor.zeros(3).contiguous().realize()
  @TinyJit
  def f(a: Tensor) -> Tensor:
    w.assign(w + a.flip(0))
    return (a * 2).realize()
  f(w)
  with pytest.raises(JitError, match="argument 'a'.*closure"): f(w)
  f.reset()
  ys = [rnd(3, seed=i) for i in range(4)]
  for y in ys: f(y)   # captured with other tensors: fine, and passing w at a replay is refused as well
  close(w.numpy(), sum(y.numpy()[::-1] for y in ys))
  with pytest.raises(JitError, match="argument 'a'.*closure"): f(w)

def test_pending_assign_inside_is_replayed(dev):
  w = Tensor.zeros(3, device=dev).contiguous().realize()
  @TinyJit
  def f(x: Tensor) -> Tensor:
    w.assign(w + x)              # never realized inside the function
    return (x * 2).realize()
  xs = [rnd(3, seed=i, device=dev) for i in range(5)]
  for x in xs: f(x)
  close(w.numpy(), sum(x.numpy() for x in xs))

def test_pending_assign_before_replay_is_not_read_stale(dev):
  w = Tensor.ones(3, device=dev).contiguous().realize()
  @TinyJit
  def f(x: Tensor) -> Tensor:
    w.assign(w + x)
    return w.sum().realize()
  ref = np.ones(3, np.float32)
  for i in range(5):
    w.assign(w * 2)              # pending when the jitted function is called
    ref = ref * 2
    x = rnd(3, seed=i, device=dev)
    ref = ref + x.numpy()
    close(f(x).numpy(), ref.sum())
  close(w.numpy(), ref)

def test_batchnorm_running_stats_not_lost(dev):
  def make():
    Tensor.manual_seed(0)
    bn = nn.BatchNorm2d(3)
    for name in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"):
      t = getattr(bn, name)
      setattr(bn, name, Tensor(t.numpy(), device=dev, requires_grad=t.requires_grad).realize())
    return bn
  bj, be = make(), make()
  def step(bn, x: Tensor) -> Tensor:
    with Tensor.train(): return bn(x).sum().realize()   # running statistics are assigned, never realized here
  jstep = TinyJit(lambda x: step(bj, x))
  for i in range(5):
    x = rnd(4, 3, 2, 2, seed=i, device=dev)
    close(jstep(x).numpy(), step(be, x).numpy())
  close(bj.running_mean.numpy(), be.running_mean.numpy())
  close(bj.running_var.numpy(), be.running_var.numpy())
  assert bj.num_batches_tracked.item() == be.num_batches_tracked.item() == 5

def test_optimizer_step_without_realize(dev):
  def make():
    Tensor.manual_seed(1)
    lin = nn.Linear(4, 2)
    lin.weight, lin.bias = (Tensor(p.numpy(), device=dev, requires_grad=True).realize() for p in (lin.weight, lin.bias))
    return lin, SGD([lin.weight, lin.bias], lr=0.1, momentum=0.9)
  def step_of(lin, opt):
    def step(x: Tensor) -> Tensor:
      with Tensor.train():
        opt.zero_grad(); loss = lin(x).square().mean(); loss.backward(); opt.step()   # opt.step() realizes
      return loss.realize()
    return step
  (l1, o1), (l2, o2) = make(), make()
  jstep, estep = TinyJit(step_of(l1, o1)), step_of(l2, o2)
  for i in range(5):
    x = rnd(3, 4, seed=i, device=dev)
    close(jstep(x).numpy(), estep(x).numpy())
  close(l1.weight.numpy(), l2.weight.numpy())

# ---- 10 (JIT part): dicts and nested sequences of tensors ----
def test_dict_and_nested_arguments(dev):
  @TinyJit
  def f(batch: dict, extra: tuple) -> dict:
    return {"y": batch["x"] * 2 + extra[0][1], "z": (batch["w"][0] - extra[1]).sum()}
  for i in range(5):
    b = {"x": rnd(3, seed=i, device=dev), "w": [rnd(2, seed=10 + i, device=dev)]}
    e = ((1.0, rnd(3, seed=20 + i, device=dev)), rnd(2, seed=30 + i, device=dev))
    out = f(b, e)
    close(out["y"].numpy(), b["x"].numpy() * 2 + e[0][1].numpy())
    close(out["z"].numpy(), (b["w"][0].numpy() - e[1].numpy()).sum())

def test_nested_structure_change_raises():
  @TinyJit
  def f(d: dict) -> Tensor: return sum((v for v in d.values()), Tensor.zeros(2)) * 1
  x, y = rnd(2, seed=1), rnd(2, seed=2)
  f({"a": x, "b": y}); f({"a": x, "b": y})
  with pytest.raises(JitError, match="'d'"): f({"a": x})
  with pytest.raises(JitError, match="'d'"): f({"a": x, "c": y})
  with pytest.raises(JitError, match=r"\['a'\]"): f({"a": rnd(3), "b": y})

def test_var_args_and_kwargs():
  @TinyJit
  def f(*xs: Tensor, **kw: Tensor) -> Tensor: return xs[0] * 2 + xs[1] - kw["c"]
  for i in range(4):
    a, b, c = rnd(3, seed=i), rnd(3, seed=10 + i), rnd(3, seed=20 + i)
    close(f(a, b, c=c).numpy(), a.numpy() * 2 + b.numpy() - c.numpy())

def test_method_jit_binds_self():
  class M:
    def __init__(self): self.w = rnd(3, seed=4)
    @TinyJit
    def __call__(self, x: Tensor, y: Tensor) -> Tensor: return x * self.w - y
  m = M()
  for i in range(4):
    x, y = rnd(3, seed=i), rnd(3, seed=10 + i)
    close(m(y=y, x=x).numpy(), x.numpy() * m.w.numpy() - y.numpy())

# ---- 11. the NV (and AMD) device after a timed-out wait or a channel error ----
@pytest.fixture
def nv_fast_timeout(dev, monkeypatch):
  """The NV or AMD device (mock) with short wait timeouts, so an injected hang times out quickly."""
  from hcqrt import hcq
  from hcqrt.device import Device
  d = Device[dev]
  monkeypatch.setattr(d, "wait_timeout_s", 0.3)
  monkeypatch.setattr(hcq, "DEFAULT_TIMEOUT_S", 0.3)
  return d

def _hang(d):
  """Inject a fault: a launch slot that never signals (it waits for a signal nobody writes)."""
  never = d.new_signal(name="never")
  d.hw_compute_queue().wait(never, 1).signal(d.timeline_signal, d.timeline_value).submit(d)
  d.timeline_value += 1
  return never

@pytest.mark.parametrize("dev", ["NV", "AMD"], indirect=True)
def test_nv_usable_after_signal_timeout(nv_fast_timeout, dev):
  from hcqrt.hcq import SignalTimeout
  d = nv_fast_timeout
  x = rnd(5, seed=1, device=dev)
  @TinyJit
  def f(a: Tensor) -> Tensor: return a * 2 + 1
  for i in range(3): f(rnd(5, seed=i, device=dev))
  never = _hang(d)
  with pytest.raises(SignalTimeout, match="recovered: its (channels|compute and SDMA queues) were recreated.*usable again"): (x * 5).realize()
  close((x * 3).numpy(), x.numpy() * 3)                   # the fault is gone: later work runs
  close(f(x).numpy(), x.numpy() * 2 + 1)                  # and so do graph replays
  _hang(d)
  f(x)                                                     # a replay queued behind a hang ...
  with pytest.raises(SignalTimeout, match="recovered"): f(x).numpy()
  close(f(x).numpy(), x.numpy() * 2 + 1)                  # ... times out once, then the graph replays again
  never.value = 1

@pytest.mark.parametrize("dev", ["NV"], indirect=True)
def test_nv_usable_after_channel_error(nv_fast_timeout):
  from hcqrt.nv.device import SUBC_COMPUTE
  d = nv_fast_timeout
  x = rnd(5, seed=2, device="NV")
  q = d.hw_compute_queue()
  q.method(SUBC_COMPUTE, 0x104, 0)   # not a compute-class method: the channel goes into an error state
  with pytest.raises(RuntimeError, match="recovered"): q.signal(d.timeline_signal, d.timeline_value).submit(d)
  close((x * 3).numpy(), x.numpy() * 3)

def test_layout_change_messages():
  @TinyJit
  def f(d: dict, xs: list) -> Tensor: return d["a"] * xs[0]
  x = rnd(2, seed=1)
  f({"a": x}, [x]); f({"a": x}, [x])
  with pytest.raises(JitError, match=r"argument 'd' is a dict with keys \['a', 'b'\], the capture had a dict with keys \['a'\]"):
    f({"a": x, "b": 1}, [x])
  with pytest.raises(JitError, match=r"argument 'xs' is a tuple of 1, the capture had a list of 1"): f({"a": x}, (x,))
  with pytest.raises(JitError, match="layout changed"): f({"a": x}, [x, 2.0])
