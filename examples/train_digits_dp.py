"""Data-parallel training of train_digits.py's CNN over MPI: every rank takes its slice of each global batch.

  mpiexec -n 2 python examples/train_digits_dp.py --steps 200         # 2 processes on this machine
  srun -N 2 --ntasks-per-node=1 python examples/train_digits_dp.py    # 2 nodes under Slurm
  python examples/train_digits_dp.py                                  # no launcher: one process, the same result

All ranks draw the same sequence of global batches (one seed), and rank r trains on rows [r*B/N, (r+1)*B/N) of each.
Forward and backward run as one TinyJit (it also packs the gradients into one flat buffer per dtype), then one MPI
allreduce of that buffer averages the gradients, then the Adam step runs as a second TinyJit. So every rank applies
the same update and the weights stay identical, which the end of the run checks with a hash of the parameters.
On a GPU each rank uses the GPU of its local rank (frontend/distributed.py).
"""
from __future__ import annotations
import argparse, time
import numpy as np
from frontend import Tensor, TinyJit, Device, optim
from frontend import distributed as dist
from frontend.nn.state import get_parameters
from train_digits import DigitsNet, load_digits, accuracy

def main(argv=None) -> float:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--steps", type=int, default=200)
  ap.add_argument("--global-batch", type=int, default=64, help="samples per step over all ranks (a multiple of the rank count)")
  ap.add_argument("--lr", type=float, default=3e-3)
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args(argv)
  dist.init(seed=args.seed)   # joins the MPI job (or a world of one), same RNG seed everywhere, abort on any exception
  r, w = dist.rank(), dist.world_size()
  if args.global_batch % w: raise SystemExit(f"--global-batch {args.global_batch} is not a multiple of the {w} ranks")
  per = args.global_batch // w
  x_train, y_train, x_test, y_test = load_digits(args.seed)
  if r == 0: print(f"{w} rank(s) on {Device.DEFAULT}: global batch {args.global_batch}, {per} per rank")

  model = DigitsNet(x_train.shape[2])
  params = get_parameters(model)
  dist.broadcast(params, root=0)   # the same start (the seed already gives it; this makes it so for any init)
  opt = optim.Adam(params, lr=args.lr)
  bucket = dist.GradBucket(opt.params, op="mean")

  @TinyJit
  def fwd_bwd(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      loss = model(x).sparse_categorical_crossentropy(y)
      loss.backward()
      bucket.pack()   # the gradients, in place into the flat buffer the allreduce sends
      return loss.realize()
  @TinyJit
  def apply() -> None:
    with Tensor.train(): bucket.unpack(); opt.step()   # .grad = the averaged slices; the 1/N fuses into Adam's kernel

  rng = np.random.default_rng(args.seed)   # the same on every rank: all draw the same global batches
  st, loss = time.perf_counter(), None
  for step in range(1, args.steps + 1):
    idx = rng.choice(len(x_train), args.global_batch, replace=False)[r * per:(r + 1) * per]   # this rank's slice
    xb, yb = Tensor(x_train[idx]).realize(), Tensor(y_train[idx]).realize()
    loss = fwd_bwd(xb, yb)
    bucket.allreduce()   # one collective per step
    apply()
    if r == 0 and (step % 50 == 0 or step == args.steps): print(f"step {step} loss (rank 0's slice) {loss.item():.4f}")
  dist.check_params(params)   # raises naming the first rank whose weights differ
  digest = dist.params_digest(params).hex()[:16]
  acc = accuracy(model, x_test, y_test)
  if r == 0:
    print(f"world {w}: {args.steps} steps in {time.perf_counter() - st:.1f} s; parameters identical on every rank (sha256 {digest}...); "
          f"test accuracy {acc:.3f}")
  dist.shutdown()
  return acc

if __name__ == "__main__":
  main()
