"""The sysfs topology a mock KFD shows: node 0 is the CPU, node 1 the GPU (an RX 7900 XTX / gfx1100 or an MI300X /
gfx942), with the properties file format amdkfd's kfd_topology.c prints ("name value" lines).

  >>> props = gpu_properties("gfx1100"); props["gfx_target_version"], props["simd_count"]
  (110000, 192)
"""
from __future__ import annotations

TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology"
GPU_ID = {"gfx1100": 0x2F4B, "gfx942": 0x5A31}   # gpu_id is a hash in the kernel; any stable 16-bit value
RENDER_MINOR = 128
VRAM_BYTES = {"gfx1100": 24 << 30, "gfx942": 192 << 30}
PRODUCT = {"gfx1100": "AMD Radeon RX 7900 XTX", "gfx942": "AMD Instinct MI300X"}

def gpu_properties(arch: str) -> dict[str, int]:
  """The properties of the GPU node (numbers of the real parts: 96 CUs / 6 SEs for Navi31, 304 CUs / 8 XCCs for MI300X)."""
  if arch == "gfx1100":
    # Navi31: 48 WGPs = 96 CUs, 2 SIMDs per CU; 64 KiB LDS per CU; 6 shader engines
    return {"cpu_cores_count": 0, "simd_count": 192, "mem_banks_count": 1, "caches_count": 206, "io_links_count": 1,
            "cpu_core_id_base": 0, "simd_id_base": 2147487744, "max_waves_per_simd": 16, "lds_size_in_kb": 64, "gds_size_in_kb": 0,
            "num_gws": 64, "wave_front_size": 32, "array_count": 12, "simd_arrays_per_engine": 2, "cu_per_simd_array": 8,
            "simd_per_cu": 2, "max_slots_scratch_cu": 32, "gfx_target_version": 110000, "vendor_id": 4098, "device_id": 29772,
            "location_id": 768, "domain": 0, "drm_render_minor": RENDER_MINOR, "hive_id": 0, "num_sdma_engines": 2,
            "num_sdma_xgmi_engines": 0, "num_sdma_queues_per_engine": 6, "num_cp_queues": 8, "max_engine_clk_fcompute": 2500,
            "local_mem_size": 0, "fw_version": 2200, "capability": 0x2A8A0080, "debug_prop": 0x4A7, "sdma_fw_version": 21,
            "unique_id": 0x1234ABCD, "num_xcc": 1, "max_engine_clk_ccompute": 4500,
            "cwsr_size": 0x600000 // 96 * 96, "ctl_stack_size": 0x3000, "eop_buffer_size": 0x1000}
  if arch == "gfx942":
    return {"cpu_cores_count": 0, "simd_count": 1216, "mem_banks_count": 1, "caches_count": 0, "io_links_count": 1,
            "cpu_core_id_base": 0, "simd_id_base": 2147487744, "max_waves_per_simd": 8, "lds_size_in_kb": 64, "gds_size_in_kb": 0,
            "num_gws": 64, "wave_front_size": 64, "array_count": 32, "simd_arrays_per_engine": 1, "cu_per_simd_array": 10,
            "simd_per_cu": 4, "max_slots_scratch_cu": 32, "gfx_target_version": 90402, "vendor_id": 4098, "device_id": 29857,
            "location_id": 3072, "domain": 0, "drm_render_minor": RENDER_MINOR, "hive_id": 0, "num_sdma_engines": 2,
            "num_sdma_xgmi_engines": 14, "num_sdma_queues_per_engine": 8, "num_cp_queues": 24, "max_engine_clk_fcompute": 2100,
            "local_mem_size": 0, "fw_version": 177, "capability": 0x2AAA4280, "debug_prop": 0x4A7, "sdma_fw_version": 19,
            "unique_id": 0x5678DCBA, "num_xcc": 8, "max_engine_clk_ccompute": 3700,
            "cwsr_size": 0x3D0000, "ctl_stack_size": 0x5000, "eop_buffer_size": 0x1000}
  raise ValueError(f"mock KFD: unknown arch {arch!r} (gfx1100 or gfx942)")

def cpu_properties() -> dict[str, int]:
  return {"cpu_cores_count": 16, "simd_count": 0, "mem_banks_count": 1, "gfx_target_version": 0, "drm_render_minor": 0, "num_xcc": 0}

def files(arch: str) -> dict[str, str]:
  """path -> text of every topology file the mock serves."""
  out = {f"{TOPOLOGY}/generation_id": "1\n", f"{TOPOLOGY}/system_properties": "platform_oem 0\nplatform_id 0\nplatform_rev 0\n"}
  for n, (gpu_id, props) in enumerate([(0, cpu_properties()), (GPU_ID[arch], gpu_properties(arch))]):
    out[f"{TOPOLOGY}/nodes/{n}/gpu_id"] = f"{gpu_id}\n"
    out[f"{TOPOLOGY}/nodes/{n}/name"] = ("" if n == 0 else arch) + "\n"
    out[f"{TOPOLOGY}/nodes/{n}/properties"] = "".join(f"{k} {v}\n" for k, v in props.items())
  return out
