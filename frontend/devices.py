"""Opening devices for the frontend, and the compile Target each one reports.

`open_device(name)` is hcqrt's Device[name] plus what the frontend sets up on first use (the CPU's native thread-pool
runner); `target_of(name)` is the compiler's view of the device (compiler/target.py), built from the device's own
`target` report, so the compiler never asks a device object anything.

>>> target_of("CPU").renderer in ("c", "llvm"), target_of("CPU").ncores >= 1   # llvm: CPU_LLVM=1
(True, True)
"""
from __future__ import annotations
from compiler.dtypes import DType
from compiler.target import Target
from compiler.pipeline import backend
from compiler.assemble.c_compiler import CompileError
from hcqrt.device import Device
from hcqrt import interface

_prepared: set[str] = set()
def open_device(name: str) -> interface.Device:
  """The opened device `name`; the first use of the CPU installs its native thread-pool runner."""
  dev = Device[name]
  if name not in _prepared:
    _prepared.add(name)
    if dev.name == "CPU": _install_cpu_runner(dev)
  return dev

def _install_cpu_runner(dev: interface.Device) -> None:
  """The CPU's native thread-pool runner, built by the same compiler as its kernels (the registry entry of its renderer,
  compiler/pipeline.py BACKENDS: C, or with CPU_LLVM=1 LLVM in-process, so no C compiler is ever spawned). When it can't
  be built launches use the Python pool (C kernels then fail at their own compile with the clear CompileError; without
  llvmlite, the LLVM kernels' own compile names the missing extra)."""
  from hcqrt.cpu.device import install_runner
  assemble = backend(Target.from_report(dev.target)).assemble_host
  if assemble is None: install_runner(None); return
  try: install_runner(assemble(dev.runner_source(), "hcqrt_runner"))
  except (CompileError, ImportError): install_runner(None)

_targets: dict[str, Target] = {}
def target_of(name: str) -> Target:
  """The compile Target of device `name` (from its `target` report; cached per device name)."""
  if (t := _targets.get(name)) is None: t = _targets[name] = Target.from_report(open_device(name).target)
  return t

def is_dtype_supported(dtype: DType, device: str | None = None) -> bool:
  """Whether tensors of `dtype` can be computed on `device` (default: Device.DEFAULT). Every dtype is, on every device
  here: fp8 as storage plus conversion (compiler/fp8.py: PTX sm_89+ instructions, integer ops elsewhere).

  >>> from compiler.dtypes import dtypes
  >>> is_dtype_supported(dtypes.float16, "CPU"), is_dtype_supported(dtypes.float32)
  (True, True)
  """
  return True
