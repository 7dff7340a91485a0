"""Train a small CNN on handwritten digits with a TinyJit-wrapped train step: the project's main job.

Each epoch visits the training images once in a new random order, in batches of `--batch-size`; the last batch of an
epoch is shorter and goes through the same jitted step: the batch dimension is a bound Variable (`Variable("batch", 1,
batch_size).bind(n)`), so the step is captured once and replayed for every batch size, with no recompile. With
`--no-jit` the batch size is a plain int: an eager step shares no capture, and a symbolic shape would only add per-op
shape arithmetic and slower kernels (3x the step time).

By default it uses the UCI 8x8 digits shipped in examples/data (1,797 images); `--mnist DIR` trains on MNIST
IDX files instead (train-images-idx3-ubyte[.gz] etc. in DIR).

  python examples/train_digits.py                  # default device, JIT on
  python examples/train_digits.py --no-jit --steps 300 --device CPU
  python examples/train_digits.py --steps 200 --save ck.safetensors     # then, later, 200 more steps:
  python examples/train_digits.py --steps 200 --resume ck.safetensors   # the same model as --steps 400 gives
  python examples/train_digits.py --devices 2      # data-parallel over CPU:1,CPU:2 (NV=1 / AMD=1: two GPUs)

With `--devices N` the parameters are replicated on N devices of the default kind (CPU:1..N on the CPU; NV, NV:1, ...
on GPUs) and each batch is split over them along the batch axis; the gradients are allreduced across the devices
inside the step, so every device applies the same update and the replicas stay bit-identical. The jitted step is one
graph across the devices. Batches are all full there (a symbolic batch size can't be split evenly): the short batch at
the end of each epoch is skipped.

A checkpoint (`--save`) is one safetensors file: the model's weights, the optimizer's state (Adam's moments, its
bias-correction products and learning rate) and the number of steps taken; `--resume` loads it and continues the
batch order where it stopped, so a resumed run computes exactly what an uninterrupted one does.
"""
from __future__ import annotations
import argparse, gzip, os, pathlib, struct, sys, time
import numpy as np
from frontend import Tensor, TinyJit, Device, GlobalCounters, Variable, nn
from frontend import optim
from frontend.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_load_metadata, safe_save

DATA = pathlib.Path(__file__).parent / "data" / "digits.csv.gz"

def load_digits(seed: int = 0, test_fraction: float = 1 / 6):
  """(x_train, y_train, x_test, y_test) as numpy arrays: images (N, 1, 8, 8) scaled to [0, 1], labels int32."""
  raw = np.loadtxt(gzip.open(DATA, "rt"), delimiter=",", dtype=np.float32)
  x, y = raw[:, :64].reshape(-1, 1, 8, 8) / 16.0, raw[:, 64].astype(np.int32)
  perm = np.random.default_rng(seed).permutation(len(x))
  n_test = int(len(x) * test_fraction)
  te, tr = perm[:n_test], perm[n_test:]
  return x[tr], y[tr], x[te], y[te]

def _idx(path: pathlib.Path) -> np.ndarray:
  data = (gzip.open if path.suffix == ".gz" else open)(path, "rb").read()
  zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
  if zero != 0 or dtype_code != 0x08: raise ValueError(f"{path}: not an IDX file of unsigned bytes")
  dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
  return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)

def load_mnist(directory: str):
  d = pathlib.Path(directory)
  def find(stem: str) -> pathlib.Path:
    for name in (stem, stem + ".gz"):
      if (d / name).exists(): return d / name
    raise FileNotFoundError(f"{d}: no {stem}[.gz]")
  xs = [_idx(find(f"{p}-images-idx3-ubyte")).reshape(-1, 1, 28, 28).astype(np.float32) / 255.0 for p in ("train", "t10k")]
  ys = [_idx(find(f"{p}-labels-idx1-ubyte")).astype(np.int32) for p in ("train", "t10k")]
  return xs[0], ys[0], xs[1], ys[1]

class DigitsNet:
  """conv3x3(16) - relu - conv3x3(32) - relu - maxpool2 - linear(10)."""
  def __init__(self, size: int = 8):
    self.c1 = nn.Conv2d(1, 16, 3, padding=1)
    self.c2 = nn.Conv2d(16, 32, 3, padding=1)
    self.fc = nn.Linear(32 * (size // 2) ** 2, 10)
  def __call__(self, x: Tensor) -> Tensor:
    x = self.c2(self.c1(x).relu()).relu().max_pool2d(2)
    return self.fc(x.flatten(1))

def data_devices(n: int) -> tuple[str, ...]:
  """n devices of the default device's kind for data-parallel training: CPU:1..n on the CPU (independent devices),
  else the first n GPUs (NV, NV:1, ...)."""
  base = Device.DEFAULT.split(":")[0]
  return tuple(f"CPU:{i + 1}" for i in range(n)) if base == "CPU" else tuple(base if i == 0 else f"{base}:{i}" for i in range(n))

def replicate(model, devices: tuple[str, ...]) -> None:
  """Put a copy of every parameter on each of `devices` (replicated: gradients from a sharded batch are allreduced)."""
  for p in get_parameters(model): p.shard_(devices).realize()

def make_train_step(model, opt):
  """One optimizer step on a batch: forward, loss, backward, update; returns the realized loss."""
  def train_step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      loss = model(x).sparse_categorical_crossentropy(y)
      loss.backward()
      opt.step()
      return loss.realize()
  return train_step

def batches(n: int, batch_size: int, rng: np.random.Generator):
  """Index arrays covering range(n) once per epoch in a new random order, forever: full batches, then the rest."""
  while True:
    perm = rng.permutation(n)
    for i in range(0, n, batch_size): yield perm[i:i + batch_size]

def _optimizer_state(opt) -> dict[str, Tensor]:
  """The optimizer's own tensors (moments, step products, lr): its params are the model's, saved with the model."""
  return {k: t for k, t in get_state_dict(opt).items() if not k.startswith(("params.", "buffers."))}

def save_checkpoint(path: str, model, opt, step: int) -> None:
  """Model and optimizer state and the step count in one safetensors file (written whole, then renamed into place)."""
  tensors = {f"model.{k}": t for k, t in get_state_dict(model).items()} | {f"optim.{k}": t for k, t in _optimizer_state(opt).items()}
  tmp = f"{path}.tmp"
  safe_save(tensors, tmp, metadata={"step": str(step)})
  os.replace(tmp, path)

def load_checkpoint(path: str, model, opt) -> int:
  """Load what save_checkpoint wrote into model and opt (their shapes must match); returns the steps it had taken."""
  meta = safe_load_metadata(path)[2].get("__metadata__", {})
  if "step" not in meta: raise ValueError(f"{path}: not a train_digits checkpoint (no 'step' in its metadata)")
  sd = safe_load(path)
  for prefix, target in (("model.", model), ("optim.", _optimizer_state(opt))):
    load_state_dict(target, {k[len(prefix):]: t for k, t in sd.items() if k.startswith(prefix)})
  return int(meta["step"])

def accuracy(model, x: np.ndarray, y: np.ndarray, batch: int = 512, devices: tuple[str, ...] | None = None) -> float:
  hits = 0
  with Tensor.test():
    for i in range(0, len(x), batch):
      xb = Tensor(x[i:i + batch], device=devices)   # (a replicated model: the images on each of its devices)
      hits += int((model(xb).argmax(axis=1).numpy() == y[i:i + batch]).sum())
  return hits / len(x)

def main(argv=None) -> float:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--steps", type=int, default=400)
  ap.add_argument("--batch-size", type=int, default=64)
  ap.add_argument("--lr", type=float, default=3e-3)
  ap.add_argument("--device", default=None, help="CPU, NV, AMD, PTXEMU (default: auto)")
  ap.add_argument("--no-jit", action="store_true", help="run the train step eagerly")
  ap.add_argument("--mnist", default=None, help="directory with MNIST IDX files")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--devices", type=int, default=1, help="data-parallel over this many devices (the batch is split over them)")
  ap.add_argument("--save", default=None, metavar="PATH", help="write a checkpoint (model + optimizer + step) at the end")
  ap.add_argument("--resume", default=None, metavar="PATH", help="continue from a checkpoint: --steps more steps")
  args = ap.parse_args(argv)
  if args.device: Device.DEFAULT = args.device
  x_train, y_train, x_test, y_test = load_mnist(args.mnist) if args.mnist else load_digits(args.seed)
  devs = data_devices(args.devices) if args.devices > 1 else None
  if devs is not None and args.batch_size % len(devs): raise SystemExit(f"--batch-size {args.batch_size} does not split over {len(devs)} devices")
  print(f"device {','.join(devs) if devs else Device.DEFAULT}, {len(x_train)} training / {len(x_test)} test images of {x_train.shape[2]}x{x_train.shape[3]}, "
        f"{'eager' if args.no_jit else 'TinyJit'} train step")
  Tensor.manual_seed(args.seed)
  model = DigitsNet(x_train.shape[2])
  if devs is not None: replicate(model, devs)   # (before the optimizer makes its state like the parameters)
  opt = optim.Adam(get_parameters(model), lr=args.lr)
  start = load_checkpoint(args.resume, model, opt) if args.resume else 0
  if args.resume: print(f"resumed from {args.resume} after {start} steps")

  train_step = make_train_step(model, opt)
  step_fn = train_step if args.no_jit else TinyJit(train_step)

  rng = np.random.default_rng(args.seed)
  order = batches(len(x_train), args.batch_size, rng)
  if devs is not None: order = (idx for idx in order if len(idx) == args.batch_size)   # (full batches only: see above)
  for _ in range(start): next(order)   # the batches the checkpointed run already took: the order continues after them
  B = Variable("batch", 1, args.batch_size)
  t_start, losses, kernels, step_times, short = time.perf_counter(), [], 0, [], 0
  for step, idx in zip(range(1, args.steps + 1), order):
    # the batch size, symbolic for the JIT: the short last batch of an epoch replays the same capture. Eager steps take
    # it concrete: they have no capture to share, and symbolic shapes cost Python arithmetic per op and slower kernels
    b = len(idx) if args.no_jit else B.bind(len(idx))
    short += len(idx) < args.batch_size
    # host-side batch selection (data loading)
    if devs is not None: xb, yb = Tensor(x_train[idx]).shard(devs, 0).realize(), Tensor(y_train[idx]).shard(devs, 0).realize()
    else: xb, yb = Tensor(x_train[idx]).reshape(b, *x_train.shape[1:]).realize(), Tensor(y_train[idx]).reshape(b).realize()
    GlobalCounters.reset()
    st = time.perf_counter()
    loss = step_fn(xb, yb)
    step_times.append(time.perf_counter() - st)
    kernels = GlobalCounters.kernel_count
    if step % 10 == 0 or step == args.steps:
      losses.append(loss.item())
      done = step / args.steps
      rate = step / (time.perf_counter() - t_start)
      bar = "#" * int(30 * done) + "." * (30 - int(30 * done))
      print(f"\r[{bar}] step {step}/{args.steps} loss {losses[-1]:.4f} {rate:6.1f} steps/s", end="", file=sys.stderr, flush=True)
  print(file=sys.stderr)
  if args.save:
    save_checkpoint(args.save, model, opt, start + args.steps)
    print(f"saved {args.save} after {start + args.steps} steps")
  steady = sorted(step_times[len(step_times) // 2:])
  ms = 1e3 * steady[len(steady) // 2] if steady else float("nan")
  acc = accuracy(model, x_test, y_test, devices=devs)
  tail = f"{len(x_train) % args.batch_size}"
  print(f"kernels per step: {kernels}; " + (f"short end-of-epoch batches of {tail} skipped (data-parallel)" if devs else
                                            f"{short} short end-of-epoch batches of {tail} ran through the same step"))
  print(f"ms per step: {ms:.2f}")
  print(f"test accuracy: {acc:.3f}")
  return acc

if __name__ == "__main__":
  main()
