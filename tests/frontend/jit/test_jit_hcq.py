"""TinyJit on the HCQ devices (NV and AMD on their mock drivers): replays go through one prebuilt GraphReplay, patched per call
and submitted with one doorbell per engine; results equal eager execution and the CPU."""
import numpy as np
import pytest
from frontend import Tensor, TinyJit, GlobalCounters, nn
from frontend.optim import SGD
from conftest import registry_on_mock
from hcqrt.hcq import GraphReplay

DEV = "NV"   # the device the test runs on (set by the fixture)

@pytest.fixture(scope="module", params=["NV", "AMD"])
def gpu(request):
  """(device, mock driver, doorbell count) for NV or AMD; the tests' tensors default to it."""
  global DEV
  dev, drv = registry_on_mock(request.param)
  DEV, prev = request.param, DEV
  yield dev, drv, (lambda: drv.doorbells) if request.param == "NV" else (lambda: drv.doorbell_writes)
  DEV = prev

def rnd(*shape, seed=0, device=None):
  return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), device=device or DEV).realize()

def test_replay_is_one_graph_one_doorbell(gpu):
  _dev, _drv, doorbells = gpu
  w = rnd(8, 5, seed=1)
  @TinyJit
  def f(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]: return (x @ w).relu().sum(1), (x - y.sum()) * 2
  outs = []
  for i in range(6):
    x, y = rnd(3, 8, seed=10 + i), rnd(4, seed=20 + i)
    GlobalCounters.reset(); d0 = doorbells()
    a, b = f(x, y)
    if i >= 2:   # replays: the whole capture goes out as one pushbuffer on the compute channel
      assert isinstance(f.graph, GraphReplay) and doorbells() - d0 == 1
      assert GlobalCounters.kernel_count == sum(ei.kind == "kernel" for ei in f.items) >= 2
    outs.append((x.numpy(), y.numpy(), a, b))
  for xn, yn, a, b in outs:   # each call's outputs are its own (fresh buffers), computed from its own inputs
    np.testing.assert_allclose(a.numpy(), np.maximum(xn @ w.numpy(), 0).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b.numpy(), (xn - yn.sum()) * 2, rtol=1e-5, atol=1e-5)

def test_graph_equals_loop_and_cpu(gpu):
  xs = [np.random.default_rng(i).standard_normal((4, 6)).astype(np.float32) for i in range(5)]
  def fn(x: Tensor) -> Tensor: return (x.exp() * 0.5 + x.max(1, keepdim=True)).softmax(1)
  results = {}
  for dev in (DEV, "CPU"):
    j = TinyJit(fn)
    results[dev] = [j(Tensor(x, device=dev).realize()).numpy() for x in xs]
    # the GPU replays one GraphReplay, the CPU one launch list
    assert type(j.graph).__name__ == ("GraphReplay" if dev == DEV else "CPULaunchList")
  eager = [fn(Tensor(x, device=DEV)).numpy() for x in xs]
  for g, c, e in zip(results[DEV], results["CPU"], eager):
    np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(g, c, rtol=1e-5, atol=1e-6)

def test_in_place_updates_replay(gpu):
  """A train step: weights and optimizer state are assign targets the graph rewrites in place every replay."""
  def model(seed):
    Tensor.manual_seed(seed)
    lin = nn.Linear(6, 3)
    lin.weight, lin.bias = (Tensor(p.numpy(), device=DEV, requires_grad=True).realize() for p in (lin.weight, lin.bias))
    return lin, SGD([lin.weight, lin.bias], lr=0.1, momentum=0.9)
  def step_of(lin, opt):
    def step(x: Tensor, y: Tensor) -> Tensor:
      with Tensor.train():
        loss = ((lin(x) - y) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
      return loss
    return step
  data = [(rnd(5, 6, seed=30 + i), rnd(5, 3, seed=40 + i)) for i in range(5)]
  (l1, o1), (l2, o2) = model(0), model(0)
  jit, eager = TinyJit(step_of(l1, o1)), step_of(l2, o2)
  losses_j = [jit(x, y).item() for x, y in data]
  losses_e = [eager(x, y).item() for x, y in data]
  assert isinstance(jit.graph, GraphReplay)
  np.testing.assert_allclose(losses_j, losses_e, rtol=1e-5)
  np.testing.assert_allclose(l1.weight.numpy(), l2.weight.numpy(), rtol=1e-5, atol=1e-6)

def test_cross_device_capture_is_one_multi_device_graph(gpu):
  """A copy from the CPU inside the function: the replay is one graph across the CPU and the GPU (hcqrt/multi_graph.py),
  the GPU's kernels in its own sub-graph, the copy through the host (two drivers: no device-to-device path)."""
  from hcqrt.multi_graph import MultiGraph, PeerCopy
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x.to(DEV) * 3).sum()
  for i in range(4):
    x = rnd(5, seed=i, device="CPU")
    assert f(x).item() == pytest.approx(float(x.numpy().sum() * 3), rel=1e-5)
  g = f.graph
  assert isinstance(g, MultiGraph) and isinstance(g.items[0], PeerCopy) and g.paths == {0: "host"}
  assert [s.device is None for s in g.segments] == [True, False] and isinstance(g.segments[1].graph, GraphReplay)

def test_graph_arguments_survive_the_launch_ring(gpu):
  """Graph kernel arguments live in persistent memory: the per-launch argument ring may wrap under it."""
  dev = gpu[0]
  @TinyJit
  def f(x: Tensor) -> Tensor: return x * 2 + 1
  for i in range(3): f(rnd(4, seed=i))
  kring = dev.kernargs_ring if hasattr(dev, "kernargs_ring") else dev.kernargs   # (NV, AMD)
  ring = kring.buf
  for a in f.graph.args.values(): assert not ring.va <= a.va < ring.va + ring.size
  kring.off = ring.size   # force the ring to wrap on the next eager launch ...
  (rnd(4, seed=9) * 5).realize()
  x = rnd(4, seed=7)
  np.testing.assert_allclose(f(x).numpy(), x.numpy() * 2 + 1, rtol=1e-6)   # ... and the graph is unaffected

def test_reset_rebuilds_the_graph(gpu):
  @TinyJit
  def f(x: Tensor) -> Tensor: return x + 1
  for i in range(3): f(rnd(4, seed=i))
  g = f.graph
  f.reset()
  for i in range(3): out = f(rnd(6, seed=i))
  assert isinstance(f.graph, GraphReplay) and f.graph is not g
  np.testing.assert_allclose(out.numpy(), rnd(6, seed=2).numpy() + 1)

def test_mock_only_tests_skip_on_a_real_gpu_and_fail_elsewhere(monkeypatch, tmp_path):
  """registry_on_mock with the registry's NV open on a real driver (an fd no mock made): where the device file exists
  (a GPU box running the suite with NV=1) the mock's tests skip, naming it; where it does not (CI), they fail."""
  import os
  from hcqrt import device as hd
  fd = os.open(os.devnull, os.O_RDWR)
  class RealNV: ctl = fd
  monkeypatch.setitem(hd.Device._opened, "NV", RealNV())
  try:
    monkeypatch.setattr(hd, "PROBE_FILES", [("NV", str(tmp_path / "nvidiactl")), ("AMD", str(tmp_path / "kfd"))])
    with pytest.raises(AssertionError, match="these tests need NV on its mock driver"): registry_on_mock("NV")
    (tmp_path / "nvidiactl").touch()
    with pytest.raises(pytest.skip.Exception, match=r"NV is open on this machine's GPU \(.*nvidiactl\), not on its mock driver"):
      registry_on_mock("NV")
  finally: os.close(fd)
