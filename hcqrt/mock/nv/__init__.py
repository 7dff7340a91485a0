"""The NV mock kernel driver: RM (rm.py), UVM (uvm.py), GPU memory (vmem.py), chips (chips.py) and the GPFIFO
engine (gpfifo.py) that executes pushbuffers, copies and kernel launches, reading constant banks through a constant
cache (constcache.py).

  >>> drv = install_mock_nv("ada"); drv.chip.arch.name
  'ada'
  >>> uninstall_mock_nv(drv)
"""
from __future__ import annotations
from hcqrt import syscalls
from hcqrt.mock.nv.rm import MockNV
from hcqrt.mock.nv.gpfifo import GPUError

def install_mock_nv(arch: str = "hopper", version: str = "580.142", count: int = 1, p2p: str = "pcie") -> MockNV:
  """Put a fake NVIDIA driver (an H100 by default; "ampere", "ada", "blackwell", "blackwell_b") with `count` such GPUs
  behind hcqrt.syscalls, linked as `p2p` says (rm.parse_p2p: "pcie", "bar1", "writes", "nvlink", "none" or per pair)."""
  return syscalls.install(MockNV(arch=arch, version=version, count=count, p2p=p2p))

def uninstall_mock_nv(drv: MockNV | None = None) -> None:
  """Stop routing new opens of /dev/nvidia* to `drv` (every installed driver when None)."""
  syscalls.uninstall(drv)

__all__ = ["GPUError", "MockNV", "install_mock_nv", "uninstall_mock_nv"]
