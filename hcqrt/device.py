"""Device registry: names -> opened devices, and the choice of the default device.

Choosing the default never opens a driver: an environment variable (`CPU=1`, `NV=1`, `AMD=1`, `PTXEMU=1`,
`AMDEMU=1`) wins, otherwise the first GPU whose device file exists, otherwise the CPU. That keeps the choice under a millisecond.
`MOCKGPU=1` (with `NV=1` or `AMD=1`) opens NV / AMD through the mock kernel drivers (hcqrt/mock/nv, hcqrt/mock/amd),
for machines without a GPU.

>>> from hcqrt.device import Device
>>> Device.canonicalize("cpu")
'CPU'
"""
from __future__ import annotations
import importlib, os, sys
from hcqrt import interface
from hcqrt.settings import debug_level, flag   # (debug_level: importable from here too)

BACKENDS = {"CPU": "hcqrt.cpu.device:CPUDevice", "NV": "hcqrt.nv.device:NVDevice", "AMD": "hcqrt.amd.device:AMDDevice",
            "PTXEMU": "hcqrt.mock.ptxemu:PTXEmuDevice", "AMDEMU": "hcqrt.mock.amdemu:AMDEmuDevice"}
# device files whose presence makes a GPU backend worth trying, in order of preference
PROBE_FILES = [("NV", "/dev/nvidiactl"), ("AMD", "/dev/kfd")]

class _Registry:
  def __init__(self):
    self._opened: dict[str, interface.Device] = {}
    self._default: str | None = None
  def canonicalize(self, name: str | None) -> str:
    if name is None: return self.DEFAULT
    base, _, idx = name.partition(":")
    base = base.upper()
    if base not in BACKENDS: raise ValueError(f"unknown device {name!r}; known: {', '.join(BACKENDS)}")
    return base if idx in ("", "0") else f"{base}:{idx}"
  def __getitem__(self, name: str) -> interface.Device:
    """The opened device `name` (opened on first use): what it offers is hcqrt/interface.py Device."""
    name = self.canonicalize(name)
    if (d := self._opened.get(name)) is None:
      mod, cls = BACKENDS[name.split(":")[0]].split(":")
      if name.split(":")[0] == "NV" and flag("MOCKGPU"):
        # no GPU here: put the fake NVIDIA kernel driver behind the syscall seam before the backend opens it
        from hcqrt.mock.nv import install_mock_nv
        arch = os.environ.get("MOCKGPU_ARCH", "hopper")
        install_mock_nv("hopper" if arch.startswith("gfx") else arch)
      if name.split(":")[0] == "AMD" and flag("MOCKGPU"):
        from hcqrt.mock.amd import install_mock_amd   # the fake KFD (gfx1100; MOCKGPU_ARCH=gfx942 for an MI300X)
        arch = os.environ.get("MOCKGPU_ARCH", "gfx1100")
        install_mock_amd(arch if arch.startswith("gfx") else "gfx1100")
      try: d = getattr(importlib.import_module(mod), cls)(name)
      except ImportError as e: raise RuntimeError(f"device {name} is not available: {e}") from e
      self._opened[name] = d
    return d
  @property
  def DEFAULT(self) -> str:
    if self._default is None:
      self._default = self._choose()
      if debug_level() >= 1: print(f"device: {self._default} (default)", file=sys.stderr)
    return self._default
  @DEFAULT.setter
  def DEFAULT(self, name: str) -> None:
    self._default = self.canonicalize(name) if name.split(":")[0].upper() in BACKENDS else name
    self.canonicalize(self._default)
  def _choose(self) -> str:
    for name in BACKENDS:
      if os.environ.get(name, "0") not in ("", "0"): return name
    for name, path in PROBE_FILES:
      if os.path.exists(path) and os.access(path, os.R_OK | os.W_OK): return name
    return "CPU"

Device = _Registry()
