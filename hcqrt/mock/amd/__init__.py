"""The AMD mock kernel driver: a fake /dev/kfd with its sysfs topology (kfd.py, topology.py), buffer objects and the
GPUVM (memory.py), and the PM4/SDMA command processors (cp.py), behind hcqrt.syscalls; the RDNA3 (gfx1100, wave32)
machine-code emulator lives in `rdna3`, the gfx942 (MI300X, wave64) one, on the same engine, in `gfx9`.

  >>> drv = install_mock_amd("gfx1100"); drv.arch
  'gfx1100'
  >>> uninstall_mock_amd(drv)
"""
from __future__ import annotations
from hcqrt import syscalls
from hcqrt.mock.amd.kfd import MockKFD
from hcqrt.mock.amd.cp import GPUError, Dispatch, set_executor

def install_mock_amd(arch: str = "gfx1100", version: tuple[int, int] | None = None, kernel: str | None = None, **topology) -> MockKFD:
  """Put a fake KFD with one GPU node (an RX 7900 XTX, or "gfx942": an MI300X) behind hcqrt.syscalls. `kernel`
  "6.12" or "6.1" (default MOCKGPU_KFD, else 6.12) picks the sysfs and CREATE_QUEUE rules; `topology` as MockKFD's."""
  return syscalls.install(MockKFD(arch, version, kernel, **topology))

def uninstall_mock_amd(drv: MockKFD | None = None) -> None:
  syscalls.uninstall(drv)

__all__ = ["Dispatch", "GPUError", "MockKFD", "install_mock_amd", "set_executor", "uninstall_mock_amd"]
