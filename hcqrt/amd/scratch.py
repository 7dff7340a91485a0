"""Scratch (the private segment: spills, stack arrays) for AMD kernels, sized and programmed as ROCr does it.

gfx942 and gfx11 have architected flat scratch: a kernel enables only RSRC2.SCRATCH_EN (the descriptor's
ENABLE_PRIVATE_SEGMENT) and the SPI hands each wave a slot of the scratch memory in FLAT_SCRATCH; the kernel reads no
SGPR for it (LLVM AMDGPUUsage: PRIVATE_SEGMENT_BUFFER and FLAT_SCRATCH_INIT "must be 0" with architected flat scratch).
What the runtime provides is the memory and two numbers: COMPUTE_TMPRING_SIZE (WAVES slots per XCC, per shader engine
on gfx11, of WAVESIZE granules each) and the base (PM4: COMPUTE_DISPATCH_SCRATCH_BASE_LO/HI, address >> 8; AQL:
amd_queue_t's scratch fields, which the CP firmware reads per dispatch). Sizes follow ROCr
(ROCm/ROCR-Runtime@c7785a6:runtime/hsa-runtime/core/runtime/amd_aql_queue.cpp:211-214 granules of 256 bytes on gfx11,
1024 on gfx9; :1710-1735 gfx9 WAVES from the per-XCC size; :1774-1800 gfx11 WAVES per engine): one slot for every
wave the CUs can hold with scratch (max_slots_scratch_cu per CU), so no wave ever waits for a slot.

  >>> p = plan({"simd_count": 192, "simd_per_cu": 2, "num_xcc": 1, "max_slots_scratch_cu": 32, "array_count": 12,
  ...           "simd_arrays_per_engine": 2}, "gfx1100", 32, 132)
  >>> p.lane_bytes, p.wave_bytes, p.waves, p.size
  (144, 4608, 512, 14155776)
"""
from __future__ import annotations
from dataclasses import dataclass
from ioctl_defs.amd import regs

GRANULE = {"gfx1100": 256, "gfx942": 1024}   # bytes per COMPUTE_TMPRING_SIZE.WAVESIZE unit (amd_aql_queue.cpp:211-214)
LANE_ALIGN = 16                              # a work-item's segment in whole 16-byte units (ROCr and tinygrad align so)

@dataclass(frozen=True)
class ScratchPlan:
  """Scratch for work-items of up to `lane_bytes` private bytes: `size` bytes in all, `num_xcc` equal parts (one per
  XCC), each `waves` slots of `wave_bytes` (gfx11: `waves` per engine, `engines` engines)."""
  arch: str
  lane_bytes: int
  wave_size: int
  wave_bytes: int
  waves: int
  engines: int
  num_xcc: int
  @property
  def size(self) -> int: return self.wave_bytes * self.waves * self.engines * self.num_xcc
  @property
  def tmpring(self) -> int:
    """COMPUTE_TMPRING_SIZE: WAVES and WAVESIZE (in granules)."""
    return regs.set_field(self.arch, "TMPRING_SIZE", "WAVESIZE", self.wave_bytes // GRANULE[self.arch],
                          regs.set_field(self.arch, "TMPRING_SIZE", "WAVES", self.waves))
  @property
  def wave64_lane_bytes(self) -> int:
    """amd_queue_t.scratch_wave64_lane_byte_size: the bytes a work-item may use, in wave64 lanes (a wave32 lane's
    share is half of a wave64 lane's: amd_aql_queue.cpp, lanes_per_wave * size_per_thread / 64)."""
    return self.lane_bytes * self.wave_size // 64

def plan(props: dict[str, int], arch: str, wave_size: int, private_bytes: int) -> ScratchPlan:
  """The scratch a device (its KFD topology `props`) needs for kernels of `private_bytes` per work-item."""
  lane = -(-max(private_bytes, 1) // LANE_ALIGN) * LANE_ALIGN
  g = GRANULE[arch]
  wave_bytes = -(-lane * wave_size // g) * g
  num_xcc = max(1, props.get("num_xcc", 1))
  slots = props["simd_count"] // props["simd_per_cu"] // num_xcc * props.get("max_slots_scratch_cu", 32)
  engines = max(1, props.get("array_count", 1) // max(1, props.get("simd_arrays_per_engine", 1))) if arch != "gfx942" else 1
  waves = min(slots // engines, (1 << 12) - 1)   # WAVES is 12 bits
  p = ScratchPlan(arch, lane, wave_size, wave_bytes, waves, engines, num_xcc)
  p.tmpring   # noqa: B018 (raises naming the field when WAVESIZE does not fit)
  return p
