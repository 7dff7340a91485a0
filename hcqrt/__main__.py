"""`python -m hcqrt`: the devices hcqrt finds here, and for each unusable GPU backend why and what to do.

  python -m hcqrt              # CPU, NVIDIA GPUs, AMD GPUs (MOCKGPU=1: the mock H100 and RX 7900 XTX; MOCKGPU_ARCH picks
                               # another NV chip or AMD target, e.g. ada or gfx942)
  python -m hcqrt --mock ada   # probe the mock driver pretending to be an Ada GPU
  python -m hcqrt --json       # the same facts as JSON

Exit status 0 whenever the report could be made (a machine without GPUs is not an error); 1 when a required
Python package is missing (the message says what to install).
"""
from __future__ import annotations
import argparse, json, os, sys
from typing import Any
from hcqrt.deps import require
from hcqrt.settings import flag

def _gib(n: int) -> str: return f"{n / (1 << 30):.1f} GiB"

def format_probe(p: Any) -> list[str]:
  """The lines describing one probe (a device, or a reason and a fix)."""
  if not p.usable:
    return [f"{p.name:6s}  not usable: {p.reason}", f"{'':6s}  what to do: {p.fix}"]
  d = p.props
  if p.backend == "CPU":
    return [f"{p.name:6s}  {d['cores']} cores, SIMD {' '.join(d['simd']) or 'none'} (CPU_ISA {d['isa']}: {d['vector_bytes'] * 8}-bit vectors), C compiler {d['compiler']}"]
  if p.backend == "AMD":
    return [f"{p.name:6s}  {d['product']}{' (mock KFD)' if d.get('mock') else ''}: {d['family']} {d['arch']}, {d['cu_count']} CUs, "
            f"wave{d['wave_size']}, {d['driver']}", f"{'':6s}  kernels: {d['renderer']}"]
  return [f"{p.name:6s}  {d['product']}{' (mock driver)' if d.get('mock') else ''}: {d['family']} {d['arch']}, {d['sm_count']} SMs, "
          f"{_gib(d['memory_bytes'])}, driver {d['driver']}",
          f"{'':6s}  classes: GPFIFO {d['gpfifo']}, compute {d['compute']}, copy {d['copy']}; QMD {d['qmd']}"]

def format_p2p(probes: list[Any]) -> list[str]:
  """The peer matrix of every backend with several usable devices (probe props "p2p": {destination: status}): what a
  copy from the row's device into the column's uses, "ok: <link>" (a peer push) or "no-p2p: <driver status>" (a bounce
  through system memory).

  >>> from hcqrt.probe import Probe
  >>> ps = [Probe("NV", "NV", True, {"p2p": {"NV:1": "ok: pcie"}}), Probe("NV", "NV:1", True, {"p2p": {"NV": "ok: pcie"}})]
  >>> for line in format_p2p(ps): print(line)
  NV P2P (copy from row into column):
            NV        NV:1
    NV      -         ok: pcie
    NV:1    ok: pcie  -
  """
  lines: list[str] = []
  for backend in dict.fromkeys(p.backend for p in probes):
    devs = [p for p in probes if p.backend == backend and p.usable and "p2p" in p.props]
    if len(devs) < 2: continue
    names = [p.name for p in devs]
    cells = [["-" if o == p.name else p.props["p2p"].get(o, "?") for o in names] for p in devs]
    w = max(len(c) for row in cells for c in row + names) + 2
    lines += [f"{backend} P2P (copy from row into column):", f"  {'':6s}  " + "".join(f"{n:{w}s}" for n in names).rstrip()]
    lines += [f"  {p.name:6s}  " + "".join(f"{c:{w}s}" for c in row).rstrip() for p, row in zip(devs, cells)]
  return lines

def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(prog="python -m hcqrt", description="List the devices hcqrt can use on this machine.")
  ap.add_argument("--mock", metavar="ARCH", nargs="?", const="hopper", default=None,
                  help="probe the mock drivers: an NV chip (hopper, ada, ampere, blackwell, blackwell_b) or an AMD target (gfx1100, gfx942); MOCKGPU=1 does the same")
  ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
  a = ap.parse_args(argv)
  if not require("python -m hcqrt"): return 1
  from hcqrt.device import Device
  from hcqrt.probe import probe_all
  mock = a.mock
  if mock is None and flag("MOCKGPU"): mock = os.environ.get("MOCKGPU_ARCH", "hopper")
  probes = probe_all(mock)
  if a.json:
    print(json.dumps([p.__dict__ for p in probes], indent=1, default=str))
    return 0
  print("hcqrt devices:")
  for p in probes:
    for line in format_probe(p): print("  " + line)
  for line in format_p2p(probes): print("  " + line)
  gpus = [p for p in probes if p.backend != "CPU" and p.usable]
  default = Device.DEFAULT
  hint = f" ({gpus[0].backend}=1 selects {gpus[0].name})" if gpus and default == "CPU" else ""
  print(f"{len(gpus)} GPU(s) usable; default device: {default}{hint}")
  return 0

if __name__ == "__main__": sys.exit(main())
