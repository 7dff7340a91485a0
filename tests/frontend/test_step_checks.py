"""Index checks of values an optimizer step's schedule realizes without being asked: `loss.backward(); opt.step()`
computes the loss inside the step's schedule (it reads the weights the step overwrites), so the loss's label check must
run there, in eager mode and in a TinyJit capture (whose replays read the recorded flags)."""
import numpy as np
import pytest
from frontend import Tensor, TinyJit, nn, optim
from frontend.nn.state import get_parameters

def _model_and_step(jit: bool, labels_from=None):
  Tensor.manual_seed(0)
  model = nn.Linear(4, 3)
  opt = optim.Adam(get_parameters(model), lr=1e-2)
  def step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      if labels_from is not None: y = labels_from(model, y)
      loss = model(x).sparse_categorical_crossentropy(y)
      loss.backward()
      opt.step()
      return loss.realize()
  return model, (TinyJit(step) if jit else step)

def _x() -> Tensor:
  """The batch, made on the default device when the test runs: a module-level tensor keeps the device of import time,
  which under `NV=1 pytest -n` need not be the device the test's model is made on."""
  return Tensor(np.arange(8, dtype=np.float32).reshape(2, 4) / 8).realize()

@pytest.mark.parametrize("jit", [False, True])
def test_bad_label_raises_when_the_step_computes_the_loss(jit):
  _, step = _model_and_step(jit)
  good = Tensor(np.array([0, 2], np.int32)).realize()
  for _ in range(3): step(_x(), good)   # (TinyJit: capture, then replays)
  # (a replay names the check; the eager step also the value)
  with pytest.raises(IndexError, match=r"sparse_categorical_crossentropy labels" + ("" if jit else r".*first offending index is 7 at position 1")):
    step(_x(), Tensor(np.array([1, 7], np.int32)).realize())

def test_good_labels_give_the_same_loss_as_a_step_realizing_it_first():
  # the check adds kernels, not changes: the loss of each step is the one computed before the update
  losses = []
  for early in (False, True):
    Tensor.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = optim.Adam(get_parameters(model), lr=1e-2)
    y = Tensor(np.array([0, 2], np.int32)).realize()
    out = []
    for _ in range(3):
      with Tensor.train():
        opt.zero_grad()
        loss = model(_x()).sparse_categorical_crossentropy(y)
        if early: loss.realize()
        loss.backward(); opt.step()
        out.append(loss.item())
    losses.append(out)
  np.testing.assert_array_equal(losses[0], losses[1])

def test_labels_read_from_a_weight_the_step_overwrites():
  # the labels are computed from a weight the step writes (0 * w + y): their check reads the weight before the update,
  # so it is scheduled with the step (not after it, where it would read the new weight)
  def labels(model, y): return (model.weight[0, 0].detach() * 0).cast(y.dtype) + y
  _, step = _model_and_step(False, labels)
  step(_x(), Tensor(np.array([0, 2], np.int32)).realize())
  with pytest.raises(IndexError, match="sparse_categorical_crossentropy labels"):
    step(_x(), Tensor(np.array([5, 1], np.int32)).realize())
