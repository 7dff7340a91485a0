"""Inference time of the exported digits CNN: the generated C against the framework on the CPU.

  python bench/export_bench.py            # [--weights digits.safetensors] [--reps 200]

C: the export (one image per call) built with `cc -O3 -march=native` and with plain `-O2`, timed inside a C
loop over the 299 test images (clock_gettime, median of 7 passes). Framework (CPU device): one image per call
eagerly (`model(x).realize()`: schedule + launches), one image per call through TinyJit (replayed launches),
and the whole test set as one batch. Every row is time per image. The C results are checked against the
framework first (largest difference relative to the largest logit).
"""
from __future__ import annotations
import argparse, importlib.util, json, os, pathlib, shutil, statistics, subprocess, sys, tempfile, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import numpy as np
from frontend import Tensor, TinyJit
from frontend.export import export_c

ROOT = pathlib.Path(__file__).resolve().parents[1]

def _load(name: str, path: pathlib.Path):
  spec = importlib.util.spec_from_file_location(name, path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod

TIMER_C = r"""#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "digits.h"

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

/* timer weights.bin images.f32 count reps logits.f32: prints the median seconds per image over 7 passes */
int main(int argc, char **argv) {
  FILE *f;
  long wsize, n = atol(argv[3]), reps = atol(argv[4]), i, r;
  unsigned char *w;
  float *imgs, *out;
  double t[7];
  int p;
  (void)argc;
  f = fopen(argv[1], "rb"); fseek(f, 0, SEEK_END); wsize = ftell(f); fseek(f, 0, SEEK_SET);
  w = malloc((size_t)wsize); if (fread(w, 1, (size_t)wsize, f) != (size_t)wsize) return 1; fclose(f);
  if (digits_init(w, (size_t)wsize) != DIGITS_OK) return 1;
  imgs = malloc((size_t)n * DIGITS_IN0_SIZE * sizeof(float)); out = malloc((size_t)n * DIGITS_OUT0_SIZE * sizeof(float));
  f = fopen(argv[2], "rb"); if (fread(imgs, sizeof(float), (size_t)(n * DIGITS_IN0_SIZE), f) != (size_t)(n * DIGITS_IN0_SIZE)) return 1; fclose(f);
  for (p = 0; p < 7; p++) {
    double t0 = now();
    for (r = 0; r < reps; r++)
      for (i = 0; i < n; i++) digits(imgs + i * DIGITS_IN0_SIZE, out + i * DIGITS_OUT0_SIZE);
    t[p] = (now() - t0) / ((double)reps * n);
  }
  qsort(t, 7, sizeof(double), cmp);
  printf("%.9f\n", t[3]);
  f = fopen(argv[5], "wb"); fwrite(out, sizeof(float), (size_t)(n * DIGITS_OUT0_SIZE), f); fclose(f);
  return 0;
}
"""

def median_s(fn, reps: int) -> float:
  fn()   # warm-up (compiles)
  ts = []
  for _ in range(reps):
    t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
  return statistics.median(ts)

def main(argv=None) -> dict:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--weights", default=None, help="safetensors weights of DigitsNet (random init otherwise: the time is the same)")
  ap.add_argument("--reps", type=int, default=20, help="passes over the test set inside each timed C run")
  ap.add_argument("--json", default=None, help="also write the numbers here")
  args = ap.parse_args(argv)
  td = _load("train_digits", ROOT / "examples" / "train_digits.py")
  _, _, x_test, _ = td.load_digits(0)
  Tensor.manual_seed(0)
  model = td.DigitsNet()
  if args.weights:
    from frontend.nn.state import load_state_dict, safe_load
    load_state_dict(model, safe_load(args.weights))
  n = len(x_test)
  with Tensor.test(): ref = model(Tensor(x_test)).numpy()
  ex = export_c(model, x_test[:1], name="digits")
  cc = os.environ.get("CC") or next(c for c in ("cc", "gcc", "clang") if shutil.which(c))
  res: dict = {"images": n, "compiler": cc, "scratch_bytes": ex.memory["scratch_bytes"], "weight_bytes": ex.memory["weight_bytes"]}
  with tempfile.TemporaryDirectory() as d:
    dp = pathlib.Path(d)
    ex.write(dp)
    (dp / "timer.c").write_text(TIMER_C)
    x_test.astype(np.float32).tofile(dp / "images.f32")
    for label, flags in (("C -O3 -march=native", ["-O3", "-march=native"]), ("C -O2 (generic)", ["-O2"])):
      exe = dp / f"timer{len(res)}"
      subprocess.run([cc, "-std=c99", *flags, "timer.c", "digits.c", "-lm", "-o", str(exe)], cwd=dp, check=True)
      out = subprocess.run([str(exe), "digits.bin", "images.f32", str(n), str(args.reps), "logits.f32"], cwd=dp, check=True,
                           capture_output=True, text=True).stdout
      logits = np.fromfile(dp / "logits.f32", np.float32).reshape(n, -1)
      res[label] = float(out)
      res[f"{label} max rel diff"] = float(np.abs(logits - ref).max() / np.abs(ref).max())
  one = Tensor(x_test[:1]).realize()
  with Tensor.test():
    res["framework eager, 1 image/call"] = median_s(lambda: model(one).realize(), 50)
    jit = TinyJit(lambda x: model(x).realize())
    res["framework TinyJit, 1 image/call"] = median_s(lambda: jit(one), 100)
    batch = Tensor(x_test).realize()
    res[f"framework batch of {n}"] = median_s(lambda: model(batch).realize(), 10) / n
  base = res["C -O3 -march=native"]
  print(f"digits CNN inference on the CPU, time per image ({n} test images; {ex.kernels} kernels, "
        f"{res['weight_bytes']} B weights, {res['scratch_bytes']} B scratch)")
  for k, v in res.items():
    if isinstance(v, float) and "diff" not in k:
      print(f"  {k:36s} {v * 1e6:10.2f} us   {v / base:8.1f}x the C time" + (f"   (max rel diff {res[k + ' max rel diff']:.1e})" if k.startswith("C ") else ""))
  if args.json: pathlib.Path(args.json).write_text(json.dumps(res, indent=1))
  return res

if __name__ == "__main__":
  main()
