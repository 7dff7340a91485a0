"""Device registry: names -> opened devices, and the choice of the default device.

Choosing the default never opens a driver: an environment variable (`CPU=1`, `NV=1`, `AMD=1`, `PTXEMU=1`,
`AMDEMU=1`) wins, otherwise the first GPU whose device file exists, otherwise the CPU. That keeps the choice under a millisecond.
`MOCKGPU=1` (with `NV=1` or `AMD=1`) opens NV / AMD through the mock kernel drivers (hcqrt/mock/nv, hcqrt/mock/amd),
for machines without a GPU; `MOCKGPU_COUNT=n` gives that one driver n GPUs (`NV:1`, `AMD:1`, ... open), and `MOCKGPU_P2P`
how they are linked (pcie, the default; nvlink on NV, xgmi on AMD; none; or per pair: 0-1:nvlink,0-2:none).

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

def mock_gpu_count() -> int:
  """MOCKGPU_COUNT: how many GPUs the mock drivers present (default 1).

  >>> mock_gpu_count() >= 1
  True
  """
  raw = os.environ.get("MOCKGPU_COUNT", "1") or "1"
  try: n = int(raw)
  except ValueError: raise ValueError(f"MOCKGPU_COUNT={raw!r}: a number of GPUs, 1 to 32") from None
  if not 1 <= n <= 32: raise ValueError(f"MOCKGPU_COUNT={n}: the mocks present 1 to 32 GPUs")
  return n

class _Registry:
  def __init__(self):
    self._opened: dict[str, interface.Device] = {}
    self._mocks: dict[str, object] = {}   # "NV"/"AMD" -> the mock driver MOCKGPU=1 installed for all the GPUs
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
      if name.split(":")[0] in ("NV", "AMD") and flag("MOCKGPU"): self._install_mock(name.split(":")[0])
      try: d = getattr(importlib.import_module(mod), cls)(name)
      except ImportError as e: raise RuntimeError(f"device {name} is not available: {e}") from e
      self._opened[name] = d
    return d
  def _install_mock(self, base: str) -> None:
    """No GPU here: put the fake kernel driver behind the syscall seam before the backend opens it. One driver serves
    all MOCKGPU_COUNT GPUs, as one nvidia.ko / amdkfd serves the box; it is installed again only if a test removed it."""
    from hcqrt import syscalls
    if (drv := self._mocks.get(base)) is not None and drv in syscalls._drivers: return
    count = mock_gpu_count()
    if base == "NV":
      from hcqrt.mock.nv import install_mock_nv
      arch = os.environ.get("MOCKGPU_ARCH", "hopper")
      self._mocks[base] = install_mock_nv("hopper" if arch.startswith("gfx") else arch, count=count, p2p=os.environ.get("MOCKGPU_P2P", "pcie"))
    else:
      from hcqrt.mock.amd import install_mock_amd   # the fake KFD (gfx1100; MOCKGPU_ARCH=gfx942 for an MI300X)
      arch = os.environ.get("MOCKGPU_ARCH", "gfx1100")
      self._mocks[base] = install_mock_amd(arch if arch.startswith("gfx") else "gfx1100", gpus=count)
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
