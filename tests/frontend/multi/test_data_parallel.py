"""Data-parallel training on two devices in one process (issue 26 stage 3): the digits CNN of examples/train_digits.py
with replicated parameters and the batch sharded on axis 0. After 3 steps the parameters equal one device trained on
the whole batch and are bit-identical on both devices; the TinyJit step replays as one multi-device graph with the
copies between devices among its items, equal to the eager run.

Devices as tests/frontend/multi/test_multi_device.py: `CPU:1,CPU:2` by default; `MOCKGPU=1 MOCKGPU_COUNT=2 NV=1` (or `AMD=1`) uses the
first two mock GPUs (interpreted: tiny shapes, 8x8 digits and a batch of 4).
"""
import importlib.util, pathlib
import numpy as np
import pytest
from frontend import Tensor, TinyJit, Device, optim
from frontend import engine
from frontend.nn.state import get_parameters
from hcqrt.multi_graph import MultiGraph, PeerCopy

spec = importlib.util.spec_from_file_location("train_digits", pathlib.Path(__file__).resolve().parents[3] / "examples" / "train_digits.py")
td = importlib.util.module_from_spec(spec); spec.loader.exec_module(td)
DigitsNet, data_devices, load_digits, make_train_step, replicate = td.DigitsNet, td.data_devices, td.load_digits, td.make_train_step, td.replicate

D = data_devices(2)
B = 4

@pytest.fixture(autouse=True, scope="module")
def _two_devices():
  try: Device[D[1]]
  except Exception as e: pytest.skip(f"needs two devices {D}: {e}")
  yield

@pytest.fixture(scope="module")
def data():
  x, y, _, _ = load_digits(0)
  return x[:6 * B], y[:6 * B]

def train(data, steps: int, devices: tuple[str, ...] | None, jit: bool = False):
  """(model parameters, losses, the step) after `steps` Adam steps on batches of B, from the same initial weights."""
  x, y = data
  Tensor.manual_seed(0)
  model = DigitsNet(8)
  if devices is not None: replicate(model, devices)
  params = get_parameters(model)
  opt = optim.Adam(params, lr=3e-3)
  step = make_train_step(model, opt)
  if jit: step = TinyJit(step)
  losses = []
  for i in range(steps):
    xb, yb = Tensor(x[i * B:(i + 1) * B]), Tensor(y[i * B:(i + 1) * B])
    if devices is not None: xb, yb = xb.shard(devices, 0), yb.shard(devices, 0)
    losses.append(step(xb.realize(), yb.realize()).numpy())
  return params, losses, step

def shards(t: Tensor) -> list[np.ndarray]: return [Tensor(lb).numpy() for lb in t.lazydata.lbs]

def test_three_steps_equal_one_device_and_replicas_identical(data):
  ref, ref_losses, _ = train(data, 3, None)
  got, losses, _ = train(data, 3, D)
  np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
  for r, g in zip(ref, got):
    assert g.device == D and g.lazydata.axis is None
    a, b = shards(g)
    np.testing.assert_array_equal(a, b)                       # the same bits on both devices
    np.testing.assert_allclose(a, r.numpy(), rtol=1e-5, atol=1e-6)
  Tensor.manual_seed(0)
  assert not np.allclose(got[0].numpy(), DigitsNet(8).c1.weight.numpy(), atol=1e-4)   # (the steps changed the weights)

def test_jit_replays_one_multi_device_graph_equal_to_eager(data, monkeypatch):
  eager, eager_losses, _ = train(data, 6, D)
  runs, replays = [0], [0]
  run, replay = engine.ExecItem.run, MultiGraph.replay
  def counted_run(self, *a, **k): runs[0] += 1; return run(self, *a, **k)
  def counted_replay(self, *a, **k): replays[0] += 1; return replay(self, *a, **k)
  monkeypatch.setattr(engine.ExecItem, "run", counted_run)
  monkeypatch.setattr(MultiGraph, "replay", counted_replay)
  jitted, losses, step = train(data, 2, D, jit=True)   # call 1 eager, call 2 captured
  x, y = data
  for i in range(2, 6):   # replays 1-4 (calls 3-6)
    xb, yb = Tensor(x[i * B:(i + 1) * B]).shard(D, 0).realize(), Tensor(y[i * B:(i + 1) * B]).shard(D, 0).realize()
    runs_mid = runs[0]
    losses.append(step(xb, yb).numpy())
    assert runs[0] == runs_mid   # no launch ran one at a time: the replay is the graph
  assert replays[0] == 4
  g = step.graph
  assert isinstance(g, MultiGraph) and sorted(map(id, g.devices)) == sorted(id(Device[d]) for d in D)
  copies = [it for it in g.items if isinstance(it, PeerCopy)]
  assert copies and {(id(c.src_dev), id(c.dst_dev)) for c in copies} == {(id(Device[D[0]]), id(Device[D[1]])), (id(Device[D[1]]), id(Device[D[0]]))}
  np.testing.assert_array_equal(losses, eager_losses)
  for e, j in zip(eager, jitted):
    a, b = shards(j)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, e.numpy())

def test_debug_names_the_devices(data, monkeypatch, capsys):
  monkeypatch.setenv("DEBUG", "1")
  _, _, step = train(data, 3, D, jit=True)
  err = capsys.readouterr().err
  assert f"TinyJit train_step: graph of {len(step.items)} items on {','.join(sorted(D))}" in err

def test_example_trains_on_two_devices(capsys):
  acc = td.main(["--devices", "2", "--steps", "4", "--batch-size", str(B)])
  out = capsys.readouterr().out
  assert f"device {','.join(D)}" in out and 0.0 <= acc <= 1.0

def test_batchnorm_over_the_sharded_batch_trains_like_one_device(data):
  # BatchNorm's batch statistics over the whole (sharded) batch: an allreduce, so each device normalizes with the same
  # mean and variance as one device would, and the running statistics stay replicated
  from frontend import nn
  class Net:
    def __init__(self):
      self.c, self.bn, self.fc = nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Linear(4 * 6 * 6, 10)
    def __call__(self, x: Tensor) -> Tensor: return self.fc(self.bn(self.c(x)).relu().flatten(1))
  def run(devices):
    Tensor.manual_seed(1)
    net = Net()
    if devices is not None: replicate(net, devices)
    opt = optim.SGD(get_parameters(net), lr=0.1, momentum=0.9)
    step = make_train_step(net, opt)
    x, y = data
    for i in range(3):
      xb, yb = Tensor(x[i * B:(i + 1) * B]), Tensor(y[i * B:(i + 1) * B])
      if devices is not None: xb, yb = xb.shard(devices, 0), yb.shard(devices, 0)
      step(xb.realize(), yb.realize())
    return net
  ref, got = run(None), run(D)
  for name in ("c.weight", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "fc.weight"):
    r, g = ref, got
    for part in name.split("."): r, g = getattr(r, part), getattr(g, part)
    a, b = shards(g)
    np.testing.assert_array_equal(a, b, err_msg=name)
    np.testing.assert_allclose(a, r.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)

def test_graph_copies_take_the_device_path_where_there_is_one(data):
  from hcqrt.interface import can_transfer
  _, _, step = train(data, 3, D, jit=True)
  want = "device" if can_transfer(Device[D[0]], Device[D[1]]) else "host"   # (NV mocks: a peer push or a bounce)
  assert set(step.graph.paths.values()) == {want}

# (only under `MOCKGPU=1 MOCKGPU_COUNT=2 NV=1`: defined there and nowhere else, so the default run skips nothing; on the
# default devices tests/runtime/test_multi_graph.py installs the NV mock itself for the same check)
if D[0] == "NV":
  def test_graph_needs_its_cross_device_waits_on_the_mock(monkeypatch):
    """The NV mock runs GPU 0 late (held until the host waits on it: tests/held_gpu.py): with the runtime's cross-device wait dropped (the test hook), GPU 1
    adds the partial sums before GPU 0's copy lands and reads stale data; with the wait, the replay is right."""
    from hcqrt.hcq import HCQDevice
    from hcqrt.device import Device as Registry
    from tests.held_gpu import held_until_the_host_waits
    drv = Registry._mocks["NV"]
    @TinyJit
    def f(a): return a.sum(0).realize()
    def call(k: int) -> list[np.ndarray]:
      x = np.full((4, 64), float(k), np.float32)
      return shards(f(Tensor(x).shard(D, 0).realize()))
    for k in range(3): call(k)   # eager, capture, first replay (the graph is built)
    def late(drop: bool) -> list[np.ndarray]:
      with monkeypatch.context() as m:
        if drop: m.setattr(HCQDevice, "skip_cross_wait", True)
        try:
          with held_until_the_host_waits(drv, 0): return call(10 if drop else 20)
        finally:
          for d in D: Device[d].synchronize()
    good = late(False)
    assert all((s == 80.0).all() for s in good)
    bad = late(True)
    assert not (bad[1] == 40.0).all()   # GPU 1 added GPU 0's partial sum of the previous replay
