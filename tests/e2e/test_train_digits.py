"""The main job: the digits CNN trains to >= 95% test accuracy, and its JIT step equals the eager step."""
import importlib.util, os, pathlib
import numpy as np, pytest
from frontend import Tensor, TinyJit, GlobalCounters, Device, optim
from frontend.nn.state import get_parameters

spec = importlib.util.spec_from_file_location("train_digits", pathlib.Path(__file__).resolve().parents[2] / "examples" / "train_digits.py")
td = importlib.util.module_from_spec(spec); spec.loader.exec_module(td)

# On MOCKGPU=1 the default device runs every kernel in the PTX interpreter / RDNA3 emulator: about 10 s per training
# step on 2 cores, so the 300 steps below would take ~50 min. There the short test after it checks the mock GPU's
# training against the CPU's instead; on the CPU both run.
ON_MOCK_GPU = bool(os.environ.get("MOCKGPU")) and Device.DEFAULT.split(":")[0] != "CPU"

@pytest.mark.skipif(ON_MOCK_GPU, reason="300 steps in the mock GPU's interpreter take ~50 min; "
                    "test_default_device_trains_like_the_cpu covers the mock")
def test_trains_to_95_percent():
  acc = td.main(["--steps", "300", "--seed", "0"])
  assert acc >= 0.95

def _make(seed: int):
  Tensor.manual_seed(seed)
  model = td.DigitsNet(8)
  return model, td.make_train_step(model, optim.Adam(get_parameters(model), lr=3e-3))

def test_default_device_trains_like_the_cpu():
  """Three JIT steps of the main job on the default device (a mock GPU under MOCKGPU=1) give the CPU's losses and
  parameters: the 95% test above is then a property of the same arithmetic."""
  x_train, y_train, _, _ = td.load_digits(0)
  rng = np.random.default_rng(3)
  batches = [rng.integers(0, len(x_train), 32) for _ in range(3)]
  def run(device: str):
    old, Device.DEFAULT = Device.DEFAULT, device
    try:
      model, step = _make(11)
      assert all(p.device == Device.canonicalize(device) for p in get_parameters(model))
      jit = TinyJit(step)
      losses = [jit(Tensor(x_train[i]).realize(), Tensor(y_train[i]).realize()).item() for i in batches]
      return losses, [p.numpy() for p in get_parameters(model)]
    finally: Device.DEFAULT = old
  (l_dev, p_dev), (l_cpu, p_cpu) = run(Device.DEFAULT), run("CPU")
  np.testing.assert_allclose(l_dev, l_cpu, rtol=1e-5)
  assert l_cpu[-1] < l_cpu[0]  # it trains
  for a, b in zip(p_dev, p_cpu): np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)

def test_jit_step_launches_the_eager_kernels_and_gives_identical_parameters():
  x_train, y_train, _, _ = td.load_digits(0)
  rng = np.random.default_rng(1)
  batches = [rng.integers(0, len(x_train), 32) for _ in range(5)]
  m_eager, s_eager = _make(7)
  m_jit, s_jit = _make(7)
  jit = TinyJit(s_jit)
  for idx in batches:
    xb, yb = Tensor(x_train[idx]).realize(), Tensor(y_train[idx]).realize()
    GlobalCounters.reset(); le = s_eager(xb, yb); n_eager = GlobalCounters.kernel_count
    GlobalCounters.reset(); lj = jit(xb, yb); n_jit = GlobalCounters.kernel_count
    assert n_jit == n_eager
    assert le.item() == lj.item()
  assert jit.cnt == 2  # the last steps were replays
  for pe, pj in zip(get_parameters(m_eager), get_parameters(m_jit)):
    np.testing.assert_array_equal(pe.numpy(), pj.numpy())

def test_short_last_batch_replays_the_jit_step():
  """The epoch's short last batch (a Variable batch) goes through the captured step: no new capture, no compile, and the
  same parameters as the eager step (which runs the same symbolic kernels) and, closely, as concrete-shape steps."""
  from frontend import Variable, engine
  x_train, y_train, _, _ = td.load_digits(0)
  B = Variable("batch", 1, 64)
  sizes = [64, 64, 26, 64, 26]
  (m_jit, s_jit), (m_eager, s_eager), (m_plain, s_plain) = _make(5), _make(5), _make(5)
  jit = TinyJit(s_jit)
  compiled = []
  for i, n in enumerate(sizes):
    idx = np.arange(i * 64, i * 64 + n)
    sym = lambda: (Tensor(x_train[idx]).reshape(B.bind(n), 1, 8, 8).realize(), Tensor(y_train[idx]).reshape(B.bind(n)).realize())
    before = len(engine._kernel_cache)
    lj = jit(*sym()).item()
    compiled.append(len(engine._kernel_cache) - before)
    assert lj == s_eager(*sym()).item()
    np.testing.assert_allclose(lj, s_plain(Tensor(x_train[idx]).realize(), Tensor(y_train[idx]).realize()).item(), rtol=1e-4)
  assert jit.cnt == 2 and compiled[2:] == [0, 0, 0]   # the replays at 26 and 64 built nothing new
  for pj, pe, pp in zip(get_parameters(m_jit), get_parameters(m_eager), get_parameters(m_plain)):
    np.testing.assert_array_equal(pj.numpy(), pe.numpy())
    np.testing.assert_allclose(pj.numpy(), pp.numpy(), rtol=1e-3, atol=1e-5)

def test_resume_continues_exactly(tmp_path):
  """N + M steps in one run equal N steps, a checkpoint, and M more steps resumed from it: the same weights and
  optimizer state, bit for bit (the batch order continues where it stopped)."""
  from frontend.nn.state import safe_load, safe_load_metadata
  common = ["--steps", "3", "--batch-size", "32", "--seed", "2"]
  td.main(["--steps", "7", "--batch-size", "32", "--seed", "2", "--save", str(tmp_path / "whole.st")])
  td.main(common + ["--save", str(tmp_path / "first.st")])
  td.main(["--steps", "4", "--batch-size", "32", "--seed", "2", "--resume", str(tmp_path / "first.st"), "--save", str(tmp_path / "resumed.st")])
  whole, first, resumed = (safe_load(tmp_path / f) for f in ("whole.st", "first.st", "resumed.st"))
  assert safe_load_metadata(tmp_path / "resumed.st")[2]["__metadata__"] == {"step": "7"}
  assert set(whole) == set(resumed) and any(k.startswith("optim.m.") for k in whole) and "optim.b1_t" in whole
  for k in whole: np.testing.assert_array_equal(resumed[k].numpy(), whole[k].numpy(), err_msg=k)
  assert any(not np.array_equal(first[k].numpy(), whole[k].numpy()) for k in whole)   # (the last 4 steps changed them)

@pytest.mark.skipif(ON_MOCK_GPU, reason="eager steps in the mock GPU's interpreter take ~10 s each")
def test_eager_steps_take_concrete_batches(monkeypatch):
  """--no-jit hands the step int batch sizes, the short end-of-epoch batch too: a symbolic batch exists only for the
  JIT's one capture, and in eager mode it made every op do symbolic shape arithmetic (3x the step time)."""
  shapes, make = [], td.make_train_step
  def spying(model, opt):
    step = make(model, opt)
    def spy(xb, yb):
      shapes.append((xb.shape, yb.shape))
      return step(xb, yb)
    return spy
  monkeypatch.setattr(td, "make_train_step", spying)
  td.main(["--no-jit", "--steps", "4", "--batch-size", "500", "--seed", "0"])   # 1498 images: 500, 500, 498, 500
  assert [s[0][0] for s in shapes] == [500, 500, 498, 500] and all(type(d) is int for xs, ys in shapes for d in (*xs, *ys)), shapes
