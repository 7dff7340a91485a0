"""AMD GPU ABI for a KFD compute client: /dev/kfd ioctls and structs (kfd), AQL packets (aql), PM4
packets (pm4), SDMA packets (sdma), COMPUTE_* registers (regs), the kernel descriptor (kd) and code
object ELF identification (codeobject). Plain named constants and small builders; every number is
checked against the vendor-header facts by tests/abi/test_amd_abi.py.

  >>> from ioctl_defs.amd import kfd, pm4
  >>> hex(kfd.abi_for_version(1, 17).request("AMDKFD_IOC_ALLOC_MEMORY_OF_GPU")), hex(pm4.header(pm4.NOP, 0))
  ('0xc0284b16', '0xc0001000')
"""
from ioctl_defs.amd import aql, codeobject, kd, kfd, pm4, regs, sdma

__all__ = ["aql", "codeobject", "kd", "kfd", "pm4", "regs", "sdma"]
