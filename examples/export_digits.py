"""Train (or load) the digits CNN, export it as standalone C, build that with the system compiler, run it on the
test set, and compare with the framework.

  python examples/export_digits.py                         # train 300 steps, export to build/digits_c/
  python examples/export_digits.py --weights digits.safetensors   # load those weights if the file exists, else train and save
  python -m frontend.export examples/export_digits.py:make_export --out build/digits_c   # just the export

The exported model takes one 1x1x8x8 image (`void digits(const float *in0, float *out0)`, 10 logits); the
small C program written here loads digits.bin, runs every test image through it and writes the logits.
"""
from __future__ import annotations
import argparse, importlib.util, os, pathlib, shutil, subprocess, sys, time
import numpy as np
from frontend import Tensor, TinyJit, optim
from frontend.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_save
from frontend.export import export_c, Export

HERE = pathlib.Path(__file__).resolve().parent

def _train_digits_module():
  # examples/ is not a package: load the training example by its path
  spec = importlib.util.spec_from_file_location("train_digits", HERE / "train_digits.py")
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod

td = _train_digits_module()

def train(steps: int = 300, seed: int = 0, batch: int = 64):
  """A DigitsNet trained with Adam through a TinyJit step (like examples/train_digits.py)."""
  x_train, y_train, _, _ = td.load_digits(seed)
  Tensor.manual_seed(seed)
  model = td.DigitsNet(x_train.shape[2])
  opt = optim.Adam(get_parameters(model), lr=3e-3)
  step = TinyJit(td.make_train_step(model, opt))
  rng = np.random.default_rng(seed)
  for _ in range(steps):
    idx = rng.integers(0, len(x_train), batch)
    step(Tensor(x_train[idx]).realize(), Tensor(y_train[idx]).realize())
  return model

def get_model(weights: str | None = None, steps: int = 300):
  """Load `weights` (safetensors) if the file exists, else train (and save there if a path was given)."""
  if weights and os.path.exists(weights):
    model = td.DigitsNet()
    load_state_dict(model, safe_load(weights))
    return model
  model = train(steps)
  if weights: safe_save(get_state_dict(model), weights)
  return model

def make_export():
  """Factory for `python -m frontend.export examples/export_digits.py:make_export`: (model, example image)."""
  return get_model(os.environ.get("DIGITS_WEIGHTS")), np.zeros((1, 1, 8, 8), np.float32)

HARNESS_C = r"""/* run the exported digits model over a file of images: harness weights.bin images.f32 count logits.f32 */
#include <stdio.h>
#include <stdlib.h>
#include "digits.h"

static void *slurp(const char *path, long *size) {
  FILE *f = fopen(path, "rb");
  void *buf;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END); *size = ftell(f); fseek(f, 0, SEEK_SET);
  buf = malloc((size_t)*size);
  if (buf && fread(buf, 1, (size_t)*size, f) != (size_t)*size) { free(buf); buf = NULL; }
  fclose(f);
  return buf;
}

int main(int argc, char **argv) {
  long wsize = 0, isize = 0, n, i;
  void *w, *imgs;
  float *out;
  FILE *f;
  int err;
  if (argc != 5) { fprintf(stderr, "usage: %s weights.bin images.f32 count logits.f32\n", argv[0]); return 2; }
  w = slurp(argv[1], &wsize);
  imgs = slurp(argv[2], &isize);
  n = atol(argv[3]);
  if (!w || !imgs || isize != n * DIGITS_IN0_SIZE * (long)sizeof(float)) { fprintf(stderr, "can't read the inputs\n"); return 1; }
  if ((err = digits_init(w, (size_t)wsize)) != DIGITS_OK) { fprintf(stderr, "digits_init: error %d\n", err); return 1; }
  free(w);   /* init copied the weights */
  out = malloc((size_t)n * DIGITS_OUT0_SIZE * sizeof(float));
  if (!out) return 1;
  for (i = 0; i < n; i++) digits((const float *)imgs + i * DIGITS_IN0_SIZE, out + i * DIGITS_OUT0_SIZE);
  f = fopen(argv[4], "wb");
  if (!f || fwrite(out, sizeof(float), (size_t)(n * DIGITS_OUT0_SIZE), f) != (size_t)(n * DIGITS_OUT0_SIZE)) return 1;
  fclose(f);
  return 0;
}
"""

def system_cc() -> str:
  cc = os.environ.get("CC") or next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
  if cc is None: raise SystemExit("no C compiler found (set CC)")
  return cc

def build_and_run(ex: Export, out: pathlib.Path, images: np.ndarray) -> np.ndarray:
  """Write the export and the harness into `out`, compile them, run every image; returns the logits."""
  ex.write(out)
  (out / "harness.c").write_text(HARNESS_C)
  exe = out.resolve() / "digits_run"
  cmd = [system_cc(), "-std=c99", "-O2", "-Wall", "-Wextra", "-pedantic", "harness.c", "digits.c", "-lm", "-o", exe.name]
  subprocess.run(cmd, cwd=out, check=True)
  np.ascontiguousarray(images, np.float32).tofile(out / "images.f32")
  subprocess.run([str(exe), "digits.bin", "images.f32", str(len(images)), "logits.f32"], cwd=out, check=True)
  return np.fromfile(out / "logits.f32", np.float32).reshape(len(images), -1)

def main(argv=None) -> float:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--steps", type=int, default=300, help="training steps when no weights are loaded")
  ap.add_argument("--weights", default=None, help="safetensors file: loaded if it exists, else written after training")
  ap.add_argument("--out", default="build/digits_c", help="where the C files go")
  args = ap.parse_args(argv)
  _, _, x_test, y_test = td.load_digits(0)
  t0 = time.perf_counter()
  model = get_model(args.weights, args.steps)
  print(f"model ready in {time.perf_counter() - t0:.1f} s")
  ex = export_c(model, x_test[:1], name="digits")
  m = ex.memory
  print(f"exported: {ex.kernels} kernels, {m['weight_bytes']} bytes of weights, {m['scratch_bytes']} bytes of scratch "
        f"(peak live {m['peak_live_bytes']}, {m['unshared_bytes']} if nothing were shared)")
  out = pathlib.Path(args.out)
  logits_c = build_and_run(ex, out, x_test)
  with Tensor.test(): logits_fw = model(Tensor(x_test)).numpy()
  rel = float(np.abs(logits_c - logits_fw).max() / np.abs(logits_fw).max())
  agree = float((logits_c.argmax(1) == logits_fw.argmax(1)).mean())
  print(f"C files in {out}/ ({', '.join(sorted(ex.files))}); ran {len(x_test)} test images")
  print(f"framework vs C: max |difference| {rel:.2e} of the largest logit, predictions agree on {100 * agree:.1f}%")
  print(f"test accuracy: framework {(logits_fw.argmax(1) == y_test).mean():.3f}, C {(logits_c.argmax(1) == y_test).mean():.3f}")
  return agree

if __name__ == "__main__":
  sys.exit(0 if main() == 1.0 else 1)
