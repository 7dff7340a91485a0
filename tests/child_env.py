"""The environment of the tests' child Pythons.

PYTHONPATH: the repository goes first; the caller's entries stay after it, because a GPU box without a package index
installs cffi, pycparser and pyelftools from wheels into a folder on PYTHONPATH (GPU.md), and a child that replaced
PYTHONPATH with the repository alone could not import them.

The device: a child that expects a device must name it. Dropping the caller's `NV=1` is not enough: with no device
variable set, hcqrt/device.py picks the first GPU whose device file exists, so on a GPU box a child "on the CPU" ran on
the GPU (the H200 run: NV where the test wanted CPU).

  >>> import os; pythonpath("/repo").split(os.pathsep)[0]
  '/repo'
  >>> env = device_env("/repo", "CPU", DEBUG="0"); env["CPU"], env["DEBUG"], "NV" in env, "MOCKGPU" in env
  ('1', '0', False, False)
"""
from __future__ import annotations
import os
from hcqrt.device import BACKENDS

def pythonpath(root: str | os.PathLike) -> str:
  """`root`, then this process's PYTHONPATH entries (without a repeat of `root`)."""
  rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(root)]
  return os.pathsep.join([str(root), *rest])

def is_device_choice(name: str) -> bool:
  """Whether environment variable `name` chooses the device or the mock driver behind it (CPU=1, NV=1, ..., MOCKGPU*).
  How a chosen backend works (CPU_ISA, CPU_LLVM, AMD_AQL) is not a choice of device: a child keeps the caller's."""
  return name in BACKENDS or name.startswith("MOCKGPU")

def device_env(root: str | os.PathLike, device: str | None, **settings: str) -> dict[str, str]:
  """This process's environment for a child Python run from `root`: none of the caller's device choice, `device`
  chosen (`"CPU"` sets CPU=1; None: the child's script picks its own, as tests/stream_recorder.py does), PYTHONPATH
  from `pythonpath(root)`, then `settings` (MOCKGPU="1" for NV or AMD on the mock driver, ...)."""
  if device is not None and device not in BACKENDS: raise ValueError(f"device_env: unknown device {device!r}; known: {', '.join(BACKENDS)}")
  env = {k: v for k, v in os.environ.items() if not is_device_choice(k)}
  return env | ({device: "1"} if device else {}) | {"PYTHONPATH": pythonpath(root)} | settings
