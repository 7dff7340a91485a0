"""What devices this machine offers hcqrt, and when a GPU is unusable, exactly why and what to do.

`probe_all()` returns one `Probe` per backend (CPU, each NV GPU, AMD). It never raises for a missing or broken
driver: the reason and a fix land in the Probe. `python -m hcqrt` prints them (hcqrt/__main__.py).

  >>> p = probe_cpu(); p.usable, p.props["cores"] >= 1
  (True, True)
"""
from __future__ import annotations
import grp, os, re, shutil, subprocess
from dataclasses import dataclass, field
from typing import Any

@dataclass
class Probe:
  """One device (or the reason a backend has none): `props` when usable, else `reason` and `fix`."""
  backend: str
  name: str
  usable: bool
  props: dict[str, Any] = field(default_factory=dict)
  reason: str = ""
  fix: str = ""

def _cpu_flags() -> list[str]:
  try:
    with open("/proc/cpuinfo") as f: return next((l for l in f if l.startswith(("flags", "Features"))), ":").split(":", 1)[1].split()
  except OSError: return []

def _cc_choices() -> list[str]:
  # the order compiler/assemble/c_compiler.py tries (hcqrt may not import it): $HCQRT_CC, else clang >= 15, else gcc
  if os.environ.get("HCQRT_CC"): return [os.environ["HCQRT_CC"]]
  return ["clang", *[f"clang-{v}" for v in range(30, 14, -1)], "gcc", "cc"]

def _usable_cc(name: str, path: str) -> bool:
  if not name.startswith("clang") or os.environ.get("HCQRT_CC"): return True
  try: out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
  except (OSError, subprocess.SubprocessError): return False
  m = re.search(r"clang version (\d+)", out)
  return bool(m) and int(m.group(1)) >= 15

def probe_cpu() -> Probe:
  """The host CPU: cores, SIMD extensions and vector width, and the C compiler its kernels need."""
  from hcqrt.cpu.device import CPUDevice
  dev = CPUDevice()
  flags = _cpu_flags()
  simd = [f for f in ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "neon", "asimd", "sve") if f in flags]
  cc = next(((c, p) for c in _cc_choices() if (p := shutil.which(c)) and _usable_cc(c, p)), None)
  props = {"cores": dev.ncores, "simd": simd, "isa": dev.isa, "vector_bytes": dev.simd_bytes, "compiler": cc[1] if cc else None}
  if cc is None:
    return Probe("CPU", "CPU", False, props, "no C compiler (clang, gcc or cc) on PATH: CPU kernels are compiled C",
                 "install clang or gcc (e.g. `sudo apt-get install clang`)")
  return Probe("CPU", "CPU", True, props)

def _group_of(path: str) -> str:
  try: return grp.getgrgid(os.stat(path).st_gid).gr_name
  except (KeyError, OSError): return "?"

def _nv_files_problem(dev: str = "/dev", proc: str = "/proc/driver/nvidia/version") -> tuple[str, str] | None:
  """(reason, fix) when the NVIDIA device files are missing or closed to us; None when they look usable."""
  ctl = f"{dev}/nvidiactl"
  if not os.path.exists(ctl):
    if os.path.exists(proc):
      return (f"no {ctl}: the NVIDIA kernel module is loaded but its device files were not created",
              "run `nvidia-modprobe -c 0 -u` (or `sudo nvidia-smi` once); in a container pass --gpus all or --device /dev/nvidiactl,/dev/nvidia0,/dev/nvidia-uvm")
    return (f"no {ctl}: no NVIDIA kernel driver is loaded (or no NVIDIA GPU is present)",
            "install an NVIDIA 570- or 580-series driver (open kernel modules for Hopper/Blackwell) and `sudo modprobe nvidia nvidia-uvm`; "
            "without a GPU, MOCKGPU=1 NV=1 runs the NV backend on the mock driver")
  for path in [ctl] + sorted(f"{dev}/{n}" for n in os.listdir(dev) if n.startswith("nvidia") and n[6:].isdigit()):
    if not os.access(path, os.R_OK | os.W_OK):
      return (f"permission denied on {path} (owner group {_group_of(path)!r}, mode {os.stat(path).st_mode & 0o777:o})",
              f"add yourself to that group (`sudo usermod -aG {_group_of(path)} $USER`, then log in again) or ask the admin to open the device")
  uvm = f"{dev}/nvidia-uvm"
  if not os.path.exists(uvm):
    return (f"no {uvm}: the nvidia-uvm kernel module is not loaded (GPU memory is mapped through it)",
            "run `sudo modprobe nvidia-uvm` (or `nvidia-modprobe -u -c 0`)")
  if not os.access(uvm, os.R_OK | os.W_OK):
    return (f"permission denied on {uvm} (owner group {_group_of(uvm)!r})", f"`sudo usermod -aG {_group_of(uvm)} $USER` or open the device's mode")
  return None

def _nv_open_problem(e: BaseException) -> tuple[str, str]:
  """(reason, fix) for an exception raised while bringing an NV device up."""
  from ioctl_defs.nv.abi import UnsupportedDriverVersion
  from hcqrt.nv.rmclient import NVError
  if isinstance(e, UnsupportedDriverVersion):
    return str(e), "install a 570- or 580-series NVIDIA driver (`cat /proc/driver/nvidia/version` shows the running one)"
  if isinstance(e, NVError):
    return (f"the driver refused a request: {e}",
            "check `dmesg` for NVRM messages; the GPU may be in use exclusively, in a bad state (reset it) or too old for this backend")
  if isinstance(e, PermissionError) or (isinstance(e, OSError) and e.errno in (1, 13)):
    return f"permission denied: {e}", "add yourself to the group owning /dev/nvidia* and log in again"
  if isinstance(e, OSError): return f"a driver call failed: {e}", "check `dmesg` for NVRM messages and that the driver is loaded"
  if "compute architecture" in str(e):
    return str(e), "this GPU is older than Ampere: hcqrt drives Ampere, Ada, Hopper and Blackwell compute classes"
  return f"{type(e).__name__}: {e}", "report this with the output of `python -m hcqrt`"

def probe_nv(mock: str | None = None, check_files: bool = True) -> list[Probe]:
  """Every NVIDIA GPU the driver reports (NV, NV:1, ...), each opened for real. `mock`: an arch key to probe the
  mock driver instead (as MOCKGPU=1 does). `check_files=False` skips the /dev checks (a fake driver is installed)."""
  if mock is None and check_files and (p := _nv_files_problem()): return [Probe("NV", "NV", False, reason=p[0], fix=p[1])]
  drv = None
  if mock is not None:
    from hcqrt.device import mock_gpu_count
    from hcqrt.mock.nv import install_mock_nv
    drv = install_mock_nv(mock, count=mock_gpu_count(), p2p=os.environ.get("MOCKGPU_P2P", "pcie"))
  from hcqrt.nv.device import NVDevice
  out: list[Probe] = []
  devs: list[NVDevice] = []
  try:
    i, count = 0, 1
    while i < count:
      name = "NV" if i == 0 else f"NV:{i}"
      try: dev = NVDevice(name)
      except Exception as e:
        reason, fix = _nv_open_problem(e)
        out.append(Probe("NV", name, False, reason=reason, fix=fix))
        break
      count = dev.card_count
      out.append(Probe("NV", name, True, {**dev.properties(), "mock": mock is not None}))
      devs.append(dev)
      i += 1
    # the P2P matrix while they are open: what a copy from each GPU into each other one uses (the driver's caps)
    for p, d in zip(out, devs): p.props["p2p"] = {o.name: d.peer_status(o) for o in devs if o is not d}
  finally:
    if drv is not None:
      from hcqrt.mock.nv import uninstall_mock_nv
      uninstall_mock_nv(drv)
  return out

def probe_amd(mock: str | None = None) -> Probe:
  """The AMD GPU KFD reports, opened for real through the seam (`mock`: a gfx arch to probe the mock KFD instead).
  Usable means the runtime works; tensor ops also need llvmlite (the LLVM AMDGPU renderer compiles in-process)."""
  if mock is None and not os.path.exists("/dev/kfd"):
    return Probe("AMD", "AMD", False, reason="no /dev/kfd: no AMD GPU kernel driver (amdgpu with KFD) is loaded",
                 fix="install the amdgpu driver (Linux 6.1+ ships KFD 1.11+); without a GPU, MOCKGPU=1 AMD=1 runs the AMD backend on the mock KFD")
  drv = None
  if mock is not None:
    from hcqrt.mock.amd import install_mock_amd
    drv = install_mock_amd(mock)
  try:
    from hcqrt.amd.device import AMDDevice
    from hcqrt.amd.targets import UnsupportedTarget
    try: dev = AMDDevice("AMD")
    except UnsupportedTarget as e: return Probe("AMD", "AMD", False, reason=str(e), fix="hcqrt drives gfx1100 (RX 7900 XTX) and gfx942 (MI300X) only")
    except PermissionError as e: return Probe("AMD", "AMD", False, reason=f"permission denied: {e}", fix="add yourself to the render and video groups")
    except Exception as e:
      return Probe("AMD", "AMD", False, reason=f"{type(e).__name__}: {e}", fix="check `dmesg` for amdgpu/kfd messages")
    return Probe("AMD", "AMD", True, {**dev.properties(), "mock": mock is not None, "sm_count": dev.cu_count, "memory_bytes": 0,
                                      "gpfifo": "PM4 compute queue", "compute": dev.arch, "copy": "SDMA", "qmd": "-"})
  finally:
    if drv is not None:
      from hcqrt.mock.amd import uninstall_mock_amd
      uninstall_mock_amd(drv)

def probe_all(mock: str | None = None) -> list[Probe]:
  """CPU, NVIDIA GPUs and AMD, in that order (the mock drivers when `mock` is an arch key: an NV chip or a gfx target)."""
  # one mock arch names either an NV chip ("hopper") or an AMD target ("gfx942"); the other mock takes its default
  nv_mock = None if mock is None else "hopper" if mock.startswith("gfx") else mock
  amd_mock = None if mock is None else mock if mock.startswith("gfx") else "gfx1100"
  return [probe_cpu(), *probe_nv(nv_mock), probe_amd(amd_mock)]
