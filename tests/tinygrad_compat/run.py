"""Run tinygrad's own test files against hcqrt and print pass counts per file.

    python tests/tinygrad_compat/run.py /path/to/tinygrad-checkout [test/test_ops.py ...] [--json out.json] [-k EXPR]

The checkout is the user's (tinygrad v0.12.0 was measured); nothing is fetched and none of its code is kept here.
Each file runs in its own pytest process with `import tinygrad` mapped onto our modules by name (alias.py), with the
checkout's root on sys.path for its `test/helpers.py` and `extra/`.

A test counts as *internal* (left out of the compatibility ratio) when it fails by touching a tinygrad name we have no
counterpart for (alias.TinygradInternal: UOps, renderers, schedules, runners, jit_cache), or by reading a Tensor
attribute that exposes tinygrad's graph (INTERNAL_ATTRS). Everything else - passes, failures, errors - counts.
Skips (tinygrad's own skip conditions) count in neither.
"""
from __future__ import annotations
import argparse, json, os, re, subprocess, sys, tempfile
from pathlib import Path

DEFAULT_FILES = ["test/test_ops.py", "test/test_nn.py", "test/test_optim.py", "test/test_tensor.py",
                 "test/test_dtype.py", "test/test_randomness.py", "test/test_setitem.py", "test/test_jit.py"]
# Tensor attributes that are tinygrad's graph, not its API: a test reading them inspects internals
INTERNAL_ATTRS = ("uop", "lazydata", "schedule", "kernelize", "schedule_with_vars", "jit_cache", "captured")
_INTERNAL_ATTR_RE = re.compile(r"AttributeError: .*has no attribute '(" + "|".join(INTERNAL_ATTRS) + r")'")
REPO = Path(__file__).resolve().parents[2]

def classify(outcome: str, error: str) -> str:
  """'passed', 'skipped', 'internal' or 'failed' for one test's outcome and error text.

  >>> classify("failed", "tests.tinygrad_compat.alias.TinygradInternal: tinygrad name X has no hcqrt counterpart")
  'internal'
  >>> classify("failed", "AssertionError: 1 != 2")
  'failed'
  """
  if outcome in ("passed", "skipped"): return outcome
  if "TinygradInternal" in error or _INTERNAL_ATTR_RE.search(error): return "internal"
  return "failed"

def run_file(checkout: Path, rel: str, kexpr: str | None, timeout: int) -> dict[str, dict[str, str]]:
  """Run one tinygrad test file under the alias; {nodeid: {"outcome", "error"}}."""
  with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tf: out = tf.name
  # RUN_SLOW: tinygrad marks whole classes (TestNN, TestOptim) slow; they are the API tests we want
  env = dict(os.environ, TINYGRAD_COMPAT_OUT=out, PYTHONPATH=os.pathsep.join([str(REPO), str(checkout)]), RUN_SLOW="1")
  cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.tinygrad_compat.plugin",
         "-c", os.devnull, "--rootdir", str(checkout), "-o", "python_files=test_*.py", str(checkout / rel)]
  if kexpr: cmd += ["-k", kexpr]
  try: subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, timeout=timeout)
  except subprocess.TimeoutExpired: return {rel: {"outcome": "failed", "error": f"timed out after {timeout}s"}}
  try:
    with open(out) as f: return json.load(f)
  except (OSError, json.JSONDecodeError): return {rel: {"outcome": "failed", "error": "pytest wrote no results"}}
  finally: os.unlink(out)

def main(argv: list[str] | None = None) -> dict:
  """Parse args, run the files, print the table; returns {file: {nodeid: {...}}}."""
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("checkout", type=Path)
  ap.add_argument("files", nargs="*", default=DEFAULT_FILES)
  ap.add_argument("--json", type=Path, help="write every test's outcome and error here")
  ap.add_argument("-k", dest="kexpr")
  ap.add_argument("--timeout", type=int, default=1800)
  args = ap.parse_args(argv)
  if not (args.checkout / "test").is_dir(): ap.error(f"{args.checkout} is not a tinygrad checkout (no test/ folder)")
  allres, tot = {}, {"passed": 0, "failed": 0, "internal": 0, "skipped": 0}
  print(f"{'file':32s} {'pass':>5s} {'fail':>5s} {'intern':>6s} {'skip':>5s}  pass/(pass+fail)")
  for rel in args.files:
    res = allres[rel] = run_file(args.checkout, rel, args.kexpr, args.timeout)
    c = {"passed": 0, "failed": 0, "internal": 0, "skipped": 0}
    for r in res.values(): c[classify(r["outcome"], r["error"])] += 1
    for k in c: tot[k] += c[k]
    n = c["passed"] + c["failed"]
    print(f"{rel:32s} {c['passed']:5d} {c['failed']:5d} {c['internal']:6d} {c['skipped']:5d}  "
          f"{c['passed']}/{n} = {100 * c['passed'] / max(n, 1):.1f}%", flush=True)
    if args.json: args.json.write_text(json.dumps(allres, indent=1))   # after each file: a long run can be read early
  n = tot["passed"] + tot["failed"]
  print(f"{'total':32s} {tot['passed']:5d} {tot['failed']:5d} {tot['internal']:6d} {tot['skipped']:5d}  "
        f"{tot['passed']}/{n} = {100 * tot['passed'] / max(n, 1):.1f}%")
  if args.json: args.json.write_text(json.dumps(allres, indent=1))
  return allres

if __name__ == "__main__": main()
