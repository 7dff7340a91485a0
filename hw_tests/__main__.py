"""`python -m hw_tests --device NV|AMD [--mock] [--arch hopper|gfx1100] [--stress N] [--json PATH] [--only GROUP|CHECK]`
`python -m hw_tests --first-run [--mock] ...`: the whole first run on a GPU machine (hw_tests/first_run.py).

Runs the conformance suite on a device; without the vendor's driver (no /dev/nvidiactl, no /dev/kfd) or with --mock,
on the mock driver (the chip set by --arch; AMD: gfx1100, whose code the mock runs on its RDNA3 emulator). Prints a table, writes a JSON report, exits 1 when a check fails; the last
line reads `N passed, M failed`. Exits 2 with the install commands when a required Python package is missing.
"""
from __future__ import annotations
import argparse, json, os, sys, time
from hcqrt.deps import require

def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if "--first-run" in argv:
    from hw_tests.first_run import main as first_run
    return first_run([x for x in argv if x != "--first-run"])
  ap = argparse.ArgumentParser(prog="python -m hw_tests", description="hcqrt hardware conformance suite")
  ap.add_argument("--device", default="NV", help="device to test (NV, NV:1, AMD)")
  ap.add_argument("--mock", action="store_true", help="use the mock driver even if a real one exists")
  ap.add_argument("--arch", default=None, help="chip the mock reports: NV ampere, ada, hopper (default), blackwell, blackwell_b; "
                                               "AMD gfx1100 (default), gfx942")
  ap.add_argument("--stress", type=int, default=None, help="back-to-back launches (default 10000; 1000 on the AMD mock's emulator)")
  ap.add_argument("--json", default="hw_tests_report.json", help="where to write the JSON report")
  ap.add_argument("--only", default=None, help="run one group or check")
  a = ap.parse_args(argv)
  vendor = next((v for v in ("NV", "AMD") if a.device.upper().startswith(v)), None)
  if vendor is None: print(f"hw_tests: device {a.device} is not supported (NV or AMD)"); return 2
  if not require("python -m hw_tests"): return 2
  if vendor == "AMD":
    from hw_tests.kernels_amd import INSTALL, have_llvmlite
    if not have_llvmlite(): print(f"hw_tests: the AMD kernels are LLVM IR compiled with llvmlite, which is missing: {INSTALL}"); return 2
  mocked = a.mock or not os.path.exists("/dev/nvidiactl" if vendor == "NV" else "/dev/kfd")
  a.arch = a.arch or ("hopper" if vendor == "NV" else "gfx1100")
  a.stress = (1_000 if vendor == "AMD" and mocked else 10_000) if a.stress is None else a.stress   # the AMD mock emulates the ISA
  drv = None
  if mocked:   # the vendor's mock driver behind hcqrt.syscalls for the run
    from hcqrt import syscalls
    if vendor == "NV": from hcqrt.mock.nv import install_mock_nv as install
    else: from hcqrt.mock.amd import install_mock_amd as install
    from hcqrt.device import mock_gpu_count   # MOCKGPU_COUNT=2 (MOCKGPU_P2P) gives the multi-device checks a peer
    drv = install(a.arch, count=mock_gpu_count(), p2p=os.environ.get("MOCKGPU_P2P", "pcie")) if vendor == "NV" else install(a.arch)
  try: return _run(a, mocked, drv)
  finally:
    if drv is not None: syscalls.uninstall(drv)

def _run(a: argparse.Namespace, mocked: bool, drv) -> int:
  from hw_tests.suite import Ctx, run_suite
  t0 = time.perf_counter()
  if a.device.upper().startswith("AMD"):
    from hcqrt.amd.device import AMDDevice
    dev = AMDDevice(a.device.upper())
  else:
    from hcqrt.nv.device import NVDevice
    dev = NVDevice(a.device.upper())
  if drv is not None: dev.drv = drv
  print(f"hw_tests on {dev} ({'mock ' + a.arch if mocked else 'real driver'}), bring-up {time.perf_counter() - t0:.2f}s")
  peer = None   # the multi-device checks: NV and the next GPU the driver lists
  if getattr(dev, "card_count", 1) > 1:
    index = int(a.device.split(":")[1]) if ":" in a.device else 0
    peer = type(dev)(f"NV:{(index + 1) % dev.card_count}")
    print(f"peer device for the multi-device checks: {peer}")
  c = Ctx(dev, mocked, a.stress, peer)
  results = run_suite(c, a.only)
  nskip = sum(r["skipped"] for r in results)
  npass, nfail = sum(r["passed"] for r in results) - nskip, sum(not r["passed"] for r in results)
  report = {"device": dev.properties(), "mock": mocked, "results": results, "metrics": c.metrics, "passed": npass, "failed": nfail,
            "skipped": nskip}
  with open(a.json, "w") as f: json.dump(report, f, indent=1)
  print(f"report: {a.json}")
  print(f"{npass} passed, {nfail} failed" + (f", {nskip} skipped" if nskip else ""))
  return 1 if nfail else 0

if __name__ == "__main__":
  sys.exit(main())
