"""A training step under TinyJit with PROFILE on, for tests/e2e/test_profile.py: prints (as JSON) the kernels that ran
(GlobalCounters) and the JIT's recorded kernel names, so the test can match them with the trace's events.

  PROFILE=t.json python tests/profile_step.py digits|tiny
"""
import importlib.util, json, os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from frontend import Tensor, TinyJit, GlobalCounters, optim, nn
from frontend.nn.state import get_parameters
from compiler import profile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("td", ROOT + "/examples/train_digits.py"); td = importlib.util.module_from_spec(spec)
spec.loader.exec_module(td)

class Tiny:   # one conv and a linear layer: the mock GPUs run the digits CNN slowly
  def __init__(self): self.c, self.l = nn.Conv2d(1, 2, 3), nn.Linear(2 * 6 * 6, 10)
  def __call__(self, x): return self.l(self.c(x).relu().flatten(1))

def main(which: str) -> None:
  x_train, y_train, _, _ = td.load_digits(0)
  Tensor.manual_seed(0)
  model = td.DigitsNet(8) if which == "digits" else Tiny()
  bs = 16 if which == "digits" else 4
  opt = optim.Adam(get_parameters(model), lr=3e-3)
  @TinyJit
  def step(x, y):
    with Tensor.train():
      opt.zero_grad(); loss = model(x).sparse_categorical_crossentropy(y); loss.backward(); opt.step()
      return loss.realize()
  GlobalCounters.reset(); profile.clear()   # (the model's initialization ran kernels already)
  for i in range(4): step(Tensor(x_train[i * bs:(i + 1) * bs]).realize(), Tensor(y_train[i * bs:(i + 1) * bs]).realize())
  print(json.dumps({"kernel_count": GlobalCounters.kernel_count, "jit_kernels": [ei.kernel.name for ei in step.items if ei.kind == "kernel"]}))

if __name__ == "__main__": main(sys.argv[1])
