"""The gfx targets this backend drives, from the topology's gfx_target_version, and what differs between them.

  >>> target_for(110000).name, target_for(110000).wave32
  ('gfx1100', True)
"""
from __future__ import annotations
from dataclasses import dataclass

@dataclass(frozen=True)
class Target:
  name: str
  gfx: int          # GC major version: picks PM4 cache bits and SDMA packet variants
  wave32: bool      # runs wave32 kernels (CS_W32_EN); gfx9 is wave64 only
  cwsr_priv: bool   # erratum: gfx11 needs COMPUTE_PGM_RSRC1.PRIV set when CWSR is on, or context save hangs

SUPPORTED = {110000: Target("gfx1100", 11, True, True), 90402: Target("gfx942", 9, False, False)}

class UnsupportedTarget(RuntimeError):
  """The GPU is not one this backend has register/packet tables for."""

def target_for(gfx_target_version: int) -> Target:
  """The Target for a KFD gfx_target_version (major*10000 + minor*100 + stepping); raises UnsupportedTarget otherwise."""
  if (t := SUPPORTED.get(gfx_target_version)) is None:
    v = gfx_target_version
    raise UnsupportedTarget(f"AMD: gfx{v // 10000}{(v // 100) % 100:x}{v % 100:x} (gfx_target_version {v}) is not supported; "
                            f"supported: {', '.join(f'{t.name} ({k})' for k, t in SUPPORTED.items())}")
  return t
