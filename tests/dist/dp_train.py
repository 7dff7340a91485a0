"""One rank of the data-parallel checks of tests/frontend/multi/test_distributed.py: run as `mpiexec -n N python tests/dist/dp_train.py`.

Each rank trains a small MLP for --steps steps on its slice of a fixed global batch (TinyJit forward/backward with
GradBucket.pack, the allreduce between, TinyJit optimizer step with GradBucket.unpack), then trains a reference model
in the same process on the whole batch without any collective, and prints what the test compares:
  rank R V digest HEX      the sha256 of its parameters (every rank must print the same)
  rank R V maxdiff X       float: the largest |data-parallel - reference| / (1e-6 + 1e-5 |reference|), <= 1 passes;
                           exact: the count of elements whose bits differ
  rank R V loss A B        the first and last loss of the data-parallel run
for both variants V (float, exact). exact: integer-valued inputs, weights and targets with a power-of-two learning rate, where every sum is exact, so
data-parallel must equal the reference bit for bit. --fail-rank/--stall-rank/--diverge-rank inject a crash, a
stall or a diverged weight before the collective of --fail-step. --out DIR: the lines go to DIR/rankR.txt.
"""
import argparse, os, sys, time
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from frontend import Tensor, TinyJit, Device, nn, optim
from frontend import distributed as dist

GLOBAL_BATCH, IN, HID, OUT = 32, 8, 16, 4

class MLP:
  def __init__(self): self.l1, self.l2 = nn.Linear(IN, HID), nn.Linear(HID, OUT)
  def __call__(self, x: Tensor) -> Tensor: return self.l2(self.l1(x).relu())
  def params(self) -> list[Tensor]: return [self.l1.weight, self.l1.bias, self.l2.weight, self.l2.bias]

def data(exact: bool):
  rng = np.random.default_rng(7)
  if exact: return rng.integers(-1, 2, (GLOBAL_BATCH, IN)).astype(np.float32), rng.integers(-1, 2, (GLOBAL_BATCH, OUT)).astype(np.float32)
  return rng.standard_normal((GLOBAL_BATCH, IN)).astype(np.float32), rng.standard_normal((GLOBAL_BATCH, OUT)).astype(np.float32)

def make_model(exact: bool, root_weights: bool) -> MLP:
  m = MLP()   # float: Tensor's RNG, seeded alike on every rank by dist.init
  if exact:   # small integers; the other ranks start from different ones, and broadcast must replace them
    rng = np.random.default_rng(11 if root_weights else 100 + dist.rank())
    for p in m.params(): p.assign(Tensor(rng.integers(-1, 2, p.shape).astype(np.float32))).realize()
  return m

def loss_fn(m: MLP, x: Tensor, y: Tensor, exact: bool) -> Tensor:
  # exact: a loss linear in the output, so gradients are sums of integer products scaled by powers of two (exact in
  # float32 whatever the order of the sums); float: the squared error
  return -(m(x) * y).sum(1).mean() if exact else ((m(x) - y) ** 2).mean()

def train(exact: bool, args) -> None:
  """Data-parallel training, then the one-process reference; prints the lines the test compares (tagged by variant)."""
  r, w, tag = dist.rank(), dist.world_size(), "exact" if exact else "float"
  Tensor.manual_seed(3)
  lr = float(GLOBAL_BATCH) if exact else 0.05   # exact: lr * (sum / batch) is the integer sum: weights stay integers
  X, Y = data(exact)
  per = GLOBAL_BATCH // w
  xs, ys = Tensor(X[r * per:(r + 1) * per]).realize(), Tensor(Y[r * per:(r + 1) * per]).realize()   # this rank's slice

  model = make_model(exact, root_weights=r == 0)
  if exact: dist.broadcast(model.params(), root=0)
  opt = optim.SGD(model.params(), lr=lr)
  bucket = dist.GradBucket(model.params(), op="mean")
  @TinyJit
  def fwd_bwd(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      loss = loss_fn(model, x, y, exact); loss.backward()
      bucket.pack()
      return loss.realize()
  @TinyJit
  def apply() -> None:
    with Tensor.train(): bucket.unpack(); opt.step()
  losses = []
  for step in range(1, args.steps + 1):
    loss = fwd_bwd(xs, ys)
    if step == args.fail_step and r == args.fail_rank: raise RuntimeError(f"injected failure on rank {r} at step {step} at time {time.time():.3f}")
    if step == args.fail_step and r == args.stall_rank: time.sleep(60)
    if step == args.fail_step and r == args.diverge_rank: model.l2.bias.assign(model.l2.bias + 1).realize()
    bucket.allreduce()
    apply()
    losses.append(loss.item())

  # the reference: one process, the whole batch, no collective
  Tensor.manual_seed(3)
  ref = make_model(exact, root_weights=True)
  ropt = optim.SGD(ref.params(), lr=lr)
  xa, ya = Tensor(X).realize(), Tensor(Y).realize()
  for _ in range(args.steps):
    with Tensor.train():
      ropt.zero_grad(); loss_fn(ref, xa, ya, exact).backward(); ropt.step()
  got, want = [p.numpy() for p in model.params()], [p.numpy() for p in ref.params()]
  if exact:
    diff = sum(int((a.view(np.uint32) != b.view(np.uint32)).sum()) for a, b in zip(got, want))
    # the premise of a bitwise comparison: every weight an integer below 2**24, so no sum along the way rounded
    assert all(np.array_equal(a, np.round(a)) and np.abs(a).max() < 2 ** 24 for a in want), "exact variant left the integers"
  else: diff = max(float((np.abs(a - b) / (1e-6 + 1e-5 * np.abs(b))).max()) for a, b in zip(got, want))   # <= 1: within atol 1e-6 + rtol 1e-5
  dist.check_params(model.params())
  report(args, f"rank {r} {tag} digest {dist.params_digest(model.params()).hex()}\nrank {r} {tag} maxdiff {diff}\n"
              f"rank {r} {tag} loss {losses[0]} {losses[-1]}\n")

def report(args, text: str) -> None:
  # to a file per rank: the launcher forwards the ranks' stdout in chunks that may interleave within a line
  if args.out is None: print(text, end="", flush=True); return
  with open(os.path.join(args.out, f"rank{dist.rank()}.txt"), "a") as f: f.write(text)

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--steps", type=int, default=4)
  ap.add_argument("--only", choices=("float", "exact"), default=None, help="one variant (default: both)")
  ap.add_argument("--fail-rank", type=int, default=-1, help="this rank raises before the collective of --fail-step")
  ap.add_argument("--stall-rank", type=int, default=-1, help="this rank sleeps 60 s before the collective of --fail-step")
  ap.add_argument("--diverge-rank", type=int, default=-1, help="this rank changes a weight before the collective of --fail-step")
  ap.add_argument("--fail-step", type=int, default=2)
  ap.add_argument("--out", default=None, help="a directory: each rank writes its lines to rankR.txt there")
  args = ap.parse_args()
  dist.init(seed=3)
  for exact in (False, True):
    if args.only in (None, "exact" if exact else "float"): train(exact, args)
  report(args, f"rank {dist.rank()} device {Device.DEFAULT} world {dist.world_size()}\n")
  dist.shutdown()

if __name__ == "__main__":
  main()
