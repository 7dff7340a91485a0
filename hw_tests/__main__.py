"""`python -m hw_tests --device NV [--mock] [--arch hopper] [--stress N] [--json PATH] [--only GROUP|CHECK]`

Runs the conformance suite on a device; without an NVIDIA driver (no /dev/nvidiactl) or with --mock, on the
NV mock (the chip set by --arch). Prints a table, writes a JSON report, exits 1 when a check fails; the last
line reads `N passed, M failed`. Exits 2 with the install commands when a required Python package is missing.
"""
from __future__ import annotations
import argparse, json, os, sys, time
from hcqrt.deps import require

def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(prog="python -m hw_tests", description="hcqrt hardware conformance suite")
  ap.add_argument("--device", default="NV", help="device to test (NV, NV:1)")
  ap.add_argument("--mock", action="store_true", help="use the NV mock driver even if a real one exists")
  ap.add_argument("--arch", default="hopper", help="chip the mock reports: ampere, ada, hopper, blackwell, blackwell_b")
  ap.add_argument("--stress", type=int, default=10_000, help="back-to-back launches")
  ap.add_argument("--json", default="hw_tests_report.json", help="where to write the JSON report")
  ap.add_argument("--only", default=None, help="run one group or check")
  a = ap.parse_args(argv)
  if not a.device.upper().startswith("NV"): print(f"hw_tests: device {a.device} is not supported (NV only)"); return 2
  if not require("python -m hw_tests"): return 2
  mocked = a.mock or not os.path.exists("/dev/nvidiactl")
  drv = None
  if mocked:
    from hcqrt.mock.nv import install_mock_nv
    drv = install_mock_nv(a.arch)
  try: return _run(a, mocked, drv)
  finally:
    if drv is not None:
      from hcqrt.mock.nv import uninstall_mock_nv
      uninstall_mock_nv(drv)

def _run(a: argparse.Namespace, mocked: bool, drv) -> int:
  from hcqrt.nv.device import NVDevice
  from hw_tests.suite import Ctx, run_suite
  t0 = time.perf_counter()
  dev = NVDevice(a.device.upper())
  if drv is not None: dev.drv = drv
  print(f"hw_tests on {dev} ({'mock ' + a.arch if mocked else 'real driver'}), bring-up {time.perf_counter() - t0:.2f}s")
  c = Ctx(dev, mocked, a.stress)
  results = run_suite(c, a.only)
  npass, nfail = sum(r["passed"] for r in results), sum(not r["passed"] for r in results)
  report = {"device": dev.properties(), "mock": mocked, "results": results, "metrics": c.metrics, "passed": npass, "failed": nfail}
  with open(a.json, "w") as f: json.dump(report, f, indent=1)
  print(f"report: {a.json}")
  print(f"{npass} passed, {nfail} failed")
  return 1 if nfail else 0

if __name__ == "__main__":
  sys.exit(main())
