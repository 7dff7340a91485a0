"""Context-save (CWSR) and control-stack sizes of a KFD compute queue.

Linux >= 6.12 prints `cwsr_size` and `ctl_stack_size` in the node's sysfs properties and CREATE_QUEUE then requires
the CWSR BO to be exactly ALIGN((cwsr_size + debug_memory_size) * num_xcc, 4 KiB) (linux@v6.12.117:drivers/gpu/
drm/amd/amdkfd/kfd_queue.c:318-338). Older kernels print neither and check nothing, but still program the sizes
we pass into the MQD, so the queue needs the real ones: computed here with the kernel's formula
(kfd_queue_ctx_save_restore_size, linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_queue.c:450-490), as the ROCm
thunk does (ROCm/ROCR-Runtime@c7785a6:libhsakmt/src/queues.c:282-316). debug_memory_size is never printed.

  >>> s = queue_sizes({"gfx_target_version": 110000, "simd_count": 192, "simd_per_cu": 2, "num_xcc": 1, "array_count": 12,
  ...                  "simd_arrays_per_engine": 2})
  >>> hex(s.ctl_stack), hex(s.cwsr), hex(s.debug), hex(s.bo_bytes)
  ('0xa000', '0x2bea000', '0x18000', '0x2c02000')
"""
from __future__ import annotations
from dataclasses import dataclass

PAGE = 4096
def _align(x: int, a: int) -> int: return -(-x // a) * a

@dataclass(frozen=True)
class QueueSizes:
  """What CREATE_QUEUE takes (`ctl_stack`, `cwsr` as ctx_save_restore_size, `eop`) and the CWSR BO size (`bo_bytes`)."""
  ctl_stack: int
  cwsr: int
  debug: int
  eop: int
  num_xcc: int
  @property
  def bo_bytes(self) -> int: return _align((self.cwsr + self.debug) * self.num_xcc, PAGE)

def _vgpr_bytes_per_cu(gfxv: int) -> int:
  if gfxv in (90402, 90010, 90008, 90500): return 0x80000     # gfx942 / gfx90a / gfx908 / gfx950: 512 KiB
  if gfxv in (110000, 110001, 120000, 120001): return 0x60000  # gfx1100 / 1101 / 1200 / 1201: 384 KiB
  return 0x40000

def queue_sizes(props: dict[str, int]) -> QueueSizes:
  """The node's sizes: from sysfs where the kernel prints them (>= 6.12), else from the kernel's formula."""
  gfxv, xcc = props["gfx_target_version"], max(1, props.get("num_xcc", 1))
  cu = props["simd_count"] // props["simd_per_cu"] // xcc   # per XCC
  waves = min(cu * 40, props["array_count"] // props["simd_arrays_per_engine"] * 512) if gfxv < 100100 else cu * 32
  lds = props["lds_size_in_kb"] << 10 if gfxv == 90500 else 0x10000
  wg_data = _align(cu * (_vgpr_bytes_per_cu(gfxv) + 0x4000 + lds + 0x1000), PAGE)   # + SGPRs, LDS, HW registers a CU
  ctl = _align(40 + waves * (12 if gfxv >= 100100 else 8) + 8, PAGE)                 # save-area header + a record a wave
  if gfxv // 10000 == 10: ctl = min(ctl, 0x7000)                                       # gfx10: hardware limit
  ctl, cwsr = props.get("ctl_stack_size", ctl), props.get("cwsr_size", ctl + wg_data)
  # eop_buffer_size is not in sysfs either: 4096 on every gfx9+ target (kfd_queue.c:484-489)
  return QueueSizes(ctl, cwsr, _align(waves * 32, 64), 4096, xcc)
