"""The sysfs topology a mock KFD shows: node 0 is the CPU, then GPU nodes (an RX 7900 XTX / gfx1100 or an MI300X /
gfx942), each `properties` file printed in the order and with the names amdkfd's node_show prints.

Two kernels are modelled (`kernel`, from MOCKGPU_KFD): "6.12" prints `cwsr_size` and `ctl_stack_size` after
`num_cp_queues` (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_topology.c:512-515, patch "drm/amdkfd: Store
queue cwsr area size to node properties"); "6.1" prints neither (linux@v6.1.192: same file, no such lines). No
kernel prints `eop_buffer_size` or `debug_memory_size`: they live only in the kernel's node_props. The sizes come
from the kernel's own formula (`kfd_queue_ctx_save_restore_size`, linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/
kfd_queue.c:450-490), computed here independently of the backend.

A box may list many GPU nodes (MI300X servers: 8 to 64), and a node whose GPU the device cgroup hides answers reads
of `gpu_id` and `properties` with EPERM (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_topology.c:435-452).

  >>> props = gpu_properties("gfx1100"); props["gfx_target_version"], hex(props["cwsr_size"]), hex(props["ctl_stack_size"])
  (110000, '0x2bea000', '0xa000')
  >>> "cwsr_size" in gpu_properties("gfx1100", kernel="6.1")
  False
"""
from __future__ import annotations
import os

TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology"
GPU_ID = {"gfx1100": 0x2F4B, "gfx942": 0x5A31}   # gpu_id is a hash in the kernel; any stable 16-bit value
RENDER_MINOR = 128
VRAM_BYTES = {"gfx1100": 24 << 30, "gfx942": 192 << 30}
PRODUCT = {"gfx1100": "AMD Radeon RX 7900 XTX", "gfx942": "AMD Instinct MI300X"}
KERNELS = ("6.12", "6.1")
KFD_VERSION = {"6.12": (1, 17), "6.1": (1, 11)}   # KFD_IOCTL_MINOR_VERSION of each kernel's kfd_ioctl.h

def kernel_from_env() -> str:
  """MOCKGPU_KFD: which kernel's sysfs and CREATE_QUEUE rules the mock follows ("6.12", the default, or "6.1")."""
  k = os.environ.get("MOCKGPU_KFD", "6.12") or "6.12"
  if k not in KERNELS: raise ValueError(f"MOCKGPU_KFD={k!r}: the mock KFD models kernels {', '.join(KERNELS)}")
  return k

def queue_sizes(gfxv: int, simd_count: int, simd_per_cu: int, num_xcc: int, array_count: int, simd_arrays_per_engine: int) -> dict[str, int]:
  """The node's ctl_stack_size, cwsr_size, debug_memory_size and eop_buffer_size as kfd_queue.c computes them
  (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_queue.c:450-490; only the gfx targets the mock serves)."""
  cu = simd_count // simd_per_cu // num_xcc
  waves = min(cu * 40, array_count // simd_arrays_per_engine * 512) if gfxv < 100100 else cu * 32
  vgpr = 0x80000 if gfxv in (90402, 90010, 90008, 90500) else 0x60000 if gfxv in (110000, 110001, 120000, 120001) else 0x40000
  per_cu = vgpr + 0x4000 + 0x10000 + 0x1000   # VGPRs + SGPR_SIZE_PER_CU + LDS_SIZE_PER_CU + HWREG_SIZE_PER_CU
  wg = -(-cu * per_cu // 4096) * 4096
  ctl = -(-(40 + waves * (12 if gfxv >= 100100 else 8) + 8) // 4096) * 4096   # header 40 B + 8 or 12 B a wave + 8
  if gfxv // 10000 * 10000 == 100000: ctl = min(ctl, 0x7000)
  return {"ctl_stack_size": ctl, "cwsr_size": ctl + wg, "debug_memory_size": -(-waves * 32 // 64) * 64, "eop_buffer_size": 4096}

def _node(arch: str) -> dict[str, int]:
  if arch == "gfx1100":   # Navi31: 48 WGPs = 96 CUs, 2 SIMDs per CU; 64 KiB LDS per CU; 6 shader engines
    return {"cpu_cores_count": 0, "simd_count": 192, "mem_banks_count": 1, "caches_count": 206, "io_links_count": 1, "p2p_links_count": 0,
            "cpu_core_id_base": 0, "simd_id_base": 2147487744, "max_waves_per_simd": 16, "lds_size_in_kb": 64, "gds_size_in_kb": 0,
            "num_gws": 64, "wave_front_size": 32, "array_count": 12, "simd_arrays_per_engine": 2, "cu_per_simd_array": 8,
            "simd_per_cu": 2, "max_slots_scratch_cu": 32, "gfx_target_version": 110000, "vendor_id": 4098, "device_id": 29772,
            "location_id": 768, "domain": 0, "drm_render_minor": RENDER_MINOR, "hive_id": 0, "num_sdma_engines": 2,
            "num_sdma_xgmi_engines": 0, "num_sdma_queues_per_engine": 6, "num_cp_queues": 8,
            "max_engine_clk_fcompute": 2500, "local_mem_size": 0, "fw_version": 2200, "capability": 0x2A8A0080, "debug_prop": 0x4A7,
            "sdma_fw_version": 21, "unique_id": 0x1234ABCD, "num_xcc": 1, "max_engine_clk_ccompute": 4500}
  if arch == "gfx942":    # MI300X: 304 CUs in 8 XCCs (38 each), 4 SIMDs per CU
    return {"cpu_cores_count": 0, "simd_count": 1216, "mem_banks_count": 1, "caches_count": 0, "io_links_count": 1, "p2p_links_count": 0,
            "cpu_core_id_base": 0, "simd_id_base": 2147487744, "max_waves_per_simd": 8, "lds_size_in_kb": 64, "gds_size_in_kb": 0,
            "num_gws": 64, "wave_front_size": 64, "array_count": 32, "simd_arrays_per_engine": 1, "cu_per_simd_array": 10,
            "simd_per_cu": 4, "max_slots_scratch_cu": 32, "gfx_target_version": 90402, "vendor_id": 4098, "device_id": 29857,
            "location_id": 3072, "domain": 0, "drm_render_minor": RENDER_MINOR, "hive_id": 0, "num_sdma_engines": 2,
            "num_sdma_xgmi_engines": 14, "num_sdma_queues_per_engine": 8, "num_cp_queues": 24,
            "max_engine_clk_fcompute": 2100, "local_mem_size": 0, "fw_version": 177, "capability": 0x2AAA4280, "debug_prop": 0x4A7,
            "sdma_fw_version": 19, "unique_id": 0x5678DCBA, "num_xcc": 8, "max_engine_clk_ccompute": 3700}
  raise ValueError(f"mock KFD: unknown arch {arch!r} (gfx1100 or gfx942)")

def node_sizes(arch: str) -> dict[str, int]:
  """The kernel-internal queue sizes of the node (what CREATE_QUEUE compares with, printed or not)."""
  p = _node(arch)
  return queue_sizes(p["gfx_target_version"], p["simd_count"], p["simd_per_cu"], p["num_xcc"], p["array_count"], p["simd_arrays_per_engine"])

def gpu_properties(arch: str, kernel: str = "6.12") -> dict[str, int]:
  """The GPU node's `properties` as that kernel prints them, in its order (6.12: cwsr_size/ctl_stack_size after num_cp_queues)."""
  out: dict[str, int] = {}
  for k, v in _node(arch).items():
    out[k] = v
    if k == "num_cp_queues" and kernel != "6.1":
      s = node_sizes(arch)
      out["cwsr_size"], out["ctl_stack_size"] = s["cwsr_size"], s["ctl_stack_size"]
  return out

def cpu_properties() -> dict[str, int]:
  return {"cpu_cores_count": 16, "simd_count": 0, "mem_banks_count": 1, "gfx_target_version": 0, "drm_render_minor": 0, "num_xcc": 0}

def files(arch: str, kernel: str = "6.12", gpu_ids: list[int] | None = None) -> dict[str, str]:
  """path -> text of every topology file the mock serves: node 0 the CPU, nodes 1.. the GPUs of `gpu_ids` (default one)."""
  out = {f"{TOPOLOGY}/generation_id": "1\n", f"{TOPOLOGY}/system_properties": "platform_oem 0\nplatform_id 0\nplatform_rev 0\n"}
  nodes = [(0, cpu_properties())] + [(g, gpu_properties(arch, kernel)) for g in (gpu_ids or [GPU_ID[arch]])]
  # each GPU its own render node (renderD128, 129, ...: DRM hands out render minors from 128 up in probe order,
  # linux@v6.12.117:drivers/gpu/drm/drm_drv.c drm_minor_alloc, DRM_MINOR_RENDER range 128..191) and PCI
  # slot (location_id = bus << 8 | devfn; the k-th GPU one bus further on)
  for k, (_, props) in enumerate(nodes[1:]): props["drm_render_minor"], props["location_id"] = RENDER_MINOR + k, props["location_id"] + (k << 8)
  for n, (gpu_id, props) in enumerate(nodes):
    out[f"{TOPOLOGY}/nodes/{n}/gpu_id"] = f"{gpu_id}\n"
    out[f"{TOPOLOGY}/nodes/{n}/name"] = ("" if n == 0 else arch) + "\n"
    out[f"{TOPOLOGY}/nodes/{n}/properties"] = "".join(f"{k} {v}\n" for k, v in props.items())
  return out
