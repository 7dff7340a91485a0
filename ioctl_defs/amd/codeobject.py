"""ELF identification of HSA code objects (what a loader checks before trusting a file), from LLVM's
BinaryFormat/ELF.h / ROCr's amd_hsa_elf.h as recorded in ../shared/abi/amd_codeobject.json.

  >>> target_of_e_flags(0x54c), target_of_e_flags(0x41)
  ('gfx942', 'gfx1100')
"""
from __future__ import annotations

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA, ELFOSABI_AMDGPU_PAL, ELFOSABI_AMDGPU_MESA3D = 64, 65, 66
# EI_ABIVERSION -> code object version (HSA OS ABI)
CODE_OBJECT_VERSION = {0: 2, 1: 3, 2: 4, 3: 5, 4: 6}
EF_AMDGPU_MACH = 0x0FF
EF_AMDGPU_MACH_AMDGCN_GFX1100, EF_AMDGPU_MACH_AMDGCN_GFX942 = 0x041, 0x04C
MACH_TARGETS = {EF_AMDGPU_MACH_AMDGCN_GFX1100: "gfx1100", EF_AMDGPU_MACH_AMDGCN_GFX942: "gfx942"}
# code object v4+ target-id feature fields
EF_AMDGPU_FEATURE_XNACK_V4, EF_AMDGPU_FEATURE_XNACK_ANY_V4, EF_AMDGPU_FEATURE_XNACK_OFF_V4, EF_AMDGPU_FEATURE_XNACK_ON_V4 = 0x300, 0x100, 0x200, 0x300
EF_AMDGPU_FEATURE_SRAMECC_V4, EF_AMDGPU_FEATURE_SRAMECC_ANY_V4, EF_AMDGPU_FEATURE_SRAMECC_OFF_V4, EF_AMDGPU_FEATURE_SRAMECC_ON_V4 = 0xC00, 0x400, 0x800, 0xC00
EF_AMDGPU_GENERIC_VERSION = 0xFF000000
NT_AMDGPU_METADATA = 32   # note owner "AMDGPU", MessagePack payload

def target_of_e_flags(e_flags: int) -> str | None:
  """The gfx target named by an AMDGPU e_flags (None for a machine not supported here)."""
  return MACH_TARGETS.get(e_flags & EF_AMDGPU_MACH)
