"""Opening devices for the frontend, and the compile Target each one reports.

`open_device(name)` is hcqrt's Device[name] plus what the frontend sets up on first use (the CPU's native thread-pool
runner); `target_of(name)` is the compiler's view of the device (compiler/target.py), built from the device's own
`target` report, so the compiler never asks a device object anything.

>>> target_of("CPU").renderer in ("c", "llvm"), target_of("CPU").ncores >= 1   # llvm: CPU_LLVM=1
(True, True)
"""
from __future__ import annotations
from typing import Any
from compiler.target import Target
from hcqrt.device import Device

_prepared: set[str] = set()
def open_device(name: str) -> Any:
  """The opened device `name`; the first use of the CPU installs its native thread-pool runner."""
  dev = Device[name]
  if name not in _prepared:
    _prepared.add(name)
    if dev.name == "CPU": _install_cpu_runner(dev)
  return dev

def _install_cpu_runner(dev: Any) -> None:
  """The CPU's native thread-pool runner, built by the same compiler as its kernels: C (RUNNER_C), or with CPU_LLVM=1
  LLVM in-process (RUNNER_LLVM: no C compiler is ever spawned). When it can't be built launches use the Python pool
  (C kernels then fail at their own compile with the clear CompileError)."""
  from hcqrt.cpu.device import install_runner
  if dev.target["renderer"] == "llvm":
    import platform
    from hcqrt.cpu.runner_llvm import RUNNER_LLVM
    from compiler.assemble.llvm import compile_llvm
    if platform.machine() not in ("x86_64", "AMD64"): install_runner(None); return   # RUNNER_LLVM is x86-64 IR
    try: install_runner(compile_llvm(RUNNER_LLVM, "hcqrt_runner"))
    except ImportError: install_runner(None)   # no llvmlite: the kernels' own compile names the missing extra
    return
  from hcqrt.cpu.device import RUNNER_C
  from compiler.assemble.c_compiler import compile_c, CompileError
  try: install_runner(compile_c(RUNNER_C, "hcqrt_runner"))
  except CompileError: install_runner(None)

_targets: dict[str, Target] = {}
def target_of(name: str) -> Target:
  """The compile Target of device `name` (from its `target` report; cached per device name)."""
  if (t := _targets.get(name)) is None: t = _targets[name] = Target.from_report(open_device(name).target)
  return t

def is_dtype_supported(dtype: Any, device: str | None = None) -> bool:
  """Whether tensors of `dtype` can be computed on `device` (default: Device.DEFAULT). fp8 is storage plus conversion
  on the CPU only: no GPU renderer here emits its conversions yet.

  >>> from compiler.dtypes import dtypes
  >>> is_dtype_supported(dtypes.float16, "CPU"), is_dtype_supported(dtypes.float32)
  (True, True)
  """
  name = (device or Device.DEFAULT).split(":")[0].upper()
  if dtype.name.startswith("fp8"): return name == "CPU"
  return True
