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

Links (`links`, MOCKGPU_P2P) are listed as amdkfd builds them: every GPU's io_links/0 is its PCIe link to the CPU,
and the CPU lists the way back only to a large-BAR GPU; GPUs of one XGMI hive get direct XGMI io_links to each other
and share a hive_id; a GPU pair on PCIe gets a p2p_links entry in each direction the peer's BAR allows, and none on
a small BAR (`p2p_links` below). `none`: no GPU-to-GPU link at all.

  >>> t = files("gfx1100", gpu_ids=[1, 2], links={(0, 1): "pcie"})
  >>> t[f"{TOPOLOGY}/nodes/1/p2p_links/0/properties"].splitlines()[:6]
  ['type 2', 'version_major 0', 'version_minor 0', 'node_from 1', 'node_to 2', 'weight 40']

  >>> props = gpu_properties("gfx1100"); props["gfx_target_version"], hex(props["cwsr_size"]), hex(props["ctl_stack_size"])
  (110000, '0x2bea000', '0xa000')
  >>> "cwsr_size" in gpu_properties("gfx1100", kernel="6.1")
  False
"""
from __future__ import annotations
import os
from collections.abc import Iterable

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
  return {"cpu_cores_count": 16, "simd_count": 0, "mem_banks_count": 1, "io_links_count": 0, "p2p_links_count": 0, "gfx_target_version": 0,
          "drm_render_minor": 0, "num_xcc": 0}

# ---- links: CRAT io link types and flags (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_crat.h:232-254) ----
IOLINK_PCIE, IOLINK_XGMI = 2, 11
LINK_ENABLED, LINK_NON_COHERENT = 1 << 0, 1 << 1
LINK_KINDS = ("none", "pcie", "xgmi")
PCIE_WEIGHT = 20          # every PCIe io link (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_crat.c:1254-1255)
XGMI_WEIGHT = 15          # KFD_CRAT_XGMI_WEIGHT per hop (kfd_crat.c:2124, :2226-2228); the mock's hives are one hop
# PCIe bandwidth in MB/s, lanes * Mbit/s per lane / 8 (linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/amdgpu_amdkfd.c:619-673):
# the minimum is x1 Gen1, the maximum the board's link (RX 7900 XTX Gen4 x16, MI300X Gen5 x16)
PCIE_MBS = {"gfx1100": (312, 32000), "gfx942": (312, 64000)}
# XGMI: links * 16 * 25000 / 8 (amdgpu_amdkfd.c:593-617); MI300X GPUs of an 8-GPU hive are one link apart
XGMI_MBS = 50000

def link_matrix(spec: str | dict[tuple[int, int], str] | None, n: int, arch: str) -> dict[tuple[int, int], str]:
  """{(i, j): kind} for every GPU pair i < j from MOCKGPU_P2P's form: one kind for all ("pcie", "xgmi", "none";
  "nvlink" is taken as the fast link, "xgmi"), or "0-1:pcie,0-2:none" per pair (pairs not named: pcie, as the NV mock). An XGMI hive is
  all-to-all, so GPUs joined by XGMI must be XGMI to each other too; gfx1100 (a Radeon) has no XGMI.

  >>> link_matrix("pcie", 3, "gfx1100")
  {(0, 1): 'pcie', (0, 2): 'pcie', (1, 2): 'pcie'}
  >>> link_matrix("0-1:xgmi,0-2:none,1-2:none", 3, "gfx942")[(1, 2)]
  'none'
  """
  pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
  if isinstance(spec, dict): out = {p: spec.get(p, spec.get(p[::-1], "pcie")) for p in pairs}
  else:
    spec = (spec or "none").strip().lower()
    if ":" not in spec: out = dict.fromkeys(pairs, spec)
    else:
      out = dict.fromkeys(pairs, "pcie")
      for item in filter(None, spec.split(",")):
        try:
          ab, kind = item.split(":"); a, b = sorted(int(x) for x in ab.split("-"))
        except ValueError: raise ValueError(f"MOCKGPU_P2P={spec!r}: {item!r} is not 'i-j:kind'") from None
        if (a, b) not in out: raise ValueError(f"MOCKGPU_P2P={spec!r}: pair {a}-{b} is not a pair of the {n} GPUs")
        out[(a, b)] = kind
  out = {p: "xgmi" if k == "nvlink" else k for p, k in out.items()}
  for p, k in out.items():
    if k not in LINK_KINDS: raise ValueError(f"MOCKGPU_P2P: link {k!r} for GPUs {p[0]}-{p[1]} (the AMD mock models {', '.join(LINK_KINDS)})")
    if k == "xgmi" and arch == "gfx1100":
      raise ValueError("MOCKGPU_P2P=xgmi: gfx1100 (RX 7900 XTX) has no XGMI links; use MOCKGPU_ARCH=gfx942 (MI300X) or pcie")
  hive = _hives(n, out)
  for (a, b), k in out.items():
    if hive[a] == hive[b] and k != "xgmi": raise ValueError(f"MOCKGPU_P2P: GPUs {a} and {b} share an XGMI hive, so their link must be xgmi too (a hive is all-to-all)")
  return out

def _link(kind: int, frm: int, to: int, weight: int, bw: tuple[int, int], flags: int, sdma_mask: int, kernel: str) -> str:
  # the order and names iolink_show prints (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_topology.c:269-300); 6.1 has
  # no recommended_sdma_engine_id_mask line (linux@v6.1.192:drivers/gpu/drm/amd/amdkfd/kfd_topology.c:286-313)
  f = {"type": kind, "version_major": 0, "version_minor": 0, "node_from": frm, "node_to": to, "weight": weight, "min_latency": 0,
       "max_latency": 0, "min_bandwidth": bw[0], "max_bandwidth": bw[1], "recommended_transfer_size": 0,
       "recommended_sdma_engine_id_mask": sdma_mask, "flags": flags}
  if kernel == "6.1": del f["recommended_sdma_engine_id_mask"]
  return "".join(f"{k} {v}\n" for k, v in f.items())

def small_bar_gpus(spec: bool | str | Iterable[int], ngpus: int) -> frozenset[int]:
  """The indices of the GPUs whose PCI BAR shows only part of their VRAM. `spec`: True / "1" every GPU, False / "0"
  none, "gpu1" or "gpu0,gpu2" (MOCKGPU_SMALL_BAR) or an index iterable those GPUs: a box may mix boards with and
  without Resizable BAR, and amdkfd judges each direction of a pair by the owner's BAR alone (kfd_topology.c:1504-1506).

  >>> sorted(small_bar_gpus("1", 2)), sorted(small_bar_gpus("gpu1", 2)), sorted(small_bar_gpus(False, 2))
  ([0, 1], [1], [])
  """
  if isinstance(spec, bool): return frozenset(range(ngpus)) if spec else frozenset()
  if isinstance(spec, str):
    if spec in ("0", "1", ""): return frozenset(range(ngpus)) if spec == "1" else frozenset()
    try: idx = [int(t.strip().removeprefix("gpu")) for t in spec.split(",") if t.strip().startswith("gpu")]
    except ValueError: idx = []
    if len(idx) != len(spec.split(",")): raise ValueError(f"MOCKGPU_SMALL_BAR={spec!r}: want 0, 1 or a list like gpu0,gpu1")
    spec = idx
  out = frozenset(spec)
  if bad := sorted(i for i in out if not 0 <= i < ngpus): raise ValueError(f"small BAR on GPU index {bad}: the box has {ngpus} GPU(s)")
  return out

def link_files(arch: str, ngpus: int, links: dict[tuple[int, int], str], small_bar: bool | frozenset[int] = False,
               kernel: str = "6.12") -> dict[str, str]:
  """The io_links / p2p_links files of node 0 (the CPU) and GPU nodes 1..ngpus (GPU i is node i + 1), as amdkfd builds them:
  - each GPU's CRAT names its PCIe link to the CPU first (kfd_crat.c:2135-2198: weight 20, the PCIe bandwidths, the
    SDMA engines as recommended engines, kfd_topology.c:1280-1320); the CPU gets the way back only from a large-BAR GPU
    (the BI_DIRECTIONAL flag, kfd_crat.c:2148-2149, :1276-1296), flagged NON_COHERENT (kfd_topology.c:1252-1259);
  - GPUs of one hive: an XGMI link from each to the hive's earlier GPUs, mirrored into theirs (kfd_crat.c:2377-2395,
    :2202-2245, :1276-1296), weight 15 per hop, the XGMI engines as recommended engines (kfd_topology.c:1305-1318);
  - a PCIe pair outside a hive: a p2p_links entry X->Y when X may reach Y's VRAM through Y's BAR, that is Y has a large
    BAR (kfd_dev_create_p2p_links / kfd_add_peer_prop, kfd_topology.c:1495-1619, amdgpu_device_is_peer_accessible
    amdgpu_device.c:6341-6375): a copy of Y's CPU link, weights and latencies of both CPU links added, flagged
    NON_COHERENT (kfd_topology.c:1365-1383); its recommended engines are those of Y's CPU link as they were when
    the later GPU arrived (set for an earlier Y, not yet for the arriving one: kfd_topology.c:2068 runs before :2124).
  Flags assume a box with PCIe atomics (the GPU requested them and the root port completes them): amdkfd adds
  NO_ATOMICS_32|64 to a PCIe link otherwise (kfd_set_iolink_no_atomics, linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/
  kfd_topology.c:1244-1248, 1365-1383); not modelled, since hcqrt does not read the flags (audit p2p_amd row 4).
  `small_bar`: every GPU (True) or the GPU indices (small_bar_gpus) whose BAR is small: such a GPU gets no CPU link
  back and no peer's link into it, each direction judged on its own (kfd_topology.c:1504-1506, 1604-1608).
  Returns (path -> text) plus the counts in "io_links_count/N" / "p2p_links_count/N" keys for files() to print."""
  props = _node(arch)
  small = small_bar_gpus(small_bar, ngpus) if isinstance(small_bar, bool) else small_bar
  pcie, nsdma, nx = PCIE_MBS[arch], props["num_sdma_engines"], props["num_sdma_xgmi_engines"]
  io: dict[int, list[str]] = {n: [] for n in range(ngpus + 1)}
  p2p: dict[int, list[str]] = {n: [] for n in range(ngpus + 1)}
  for g in range(ngpus):
    n = g + 1
    io[n].append(_link(IOLINK_PCIE, n, 0, PCIE_WEIGHT, pcie, LINK_ENABLED, (1 << nsdma) - 1, kernel))
    if g not in small: io[0].append(_link(IOLINK_PCIE, 0, n, PCIE_WEIGHT, pcie, LINK_ENABLED | LINK_NON_COHERENT, (1 << nsdma) - 1, kernel))
    for h in range(g):   # the arriving GPU's XGMI links to the hive's earlier GPUs, each mirrored into the earlier one
      if links[(h, g)] == "xgmi":
        mask = ((1 << nx) - 1) << nsdma
        io[n].append(_link(IOLINK_XGMI, n, h + 1, XGMI_WEIGHT, (XGMI_MBS, XGMI_MBS), LINK_ENABLED, mask, kernel))
        io[h + 1].append(_link(IOLINK_XGMI, h + 1, n, XGMI_WEIGHT, (XGMI_MBS, XGMI_MBS), LINK_ENABLED, mask, kernel))
    for h in range(g):   # PCIe peers: h->g into h's list if g's BAR is large, then g->h into g's list
      if links[(h, g)] != "pcie": continue
      if g not in small: p2p[h + 1].append(_link(IOLINK_PCIE, h + 1, n, 2 * PCIE_WEIGHT, pcie, LINK_ENABLED | LINK_NON_COHERENT, 0, kernel))
      if h not in small: p2p[n].append(_link(IOLINK_PCIE, n, h + 1, 2 * PCIE_WEIGHT, pcie, LINK_ENABLED | LINK_NON_COHERENT, (1 << nsdma) - 1, kernel))
  out: dict[str, str] = {}
  for n in range(ngpus + 1):
    for d, ls in (("io_links", io[n]), ("p2p_links", p2p[n])):
      for k, text in enumerate(ls): out[f"{TOPOLOGY}/nodes/{n}/{d}/{k}/properties"] = text
      out[f"{d}_count/{n}"] = str(len(ls))
  return out

def _hives(n: int, links: dict[tuple[int, int], str]) -> list[int]:
  """The lowest GPU index of each GPU's XGMI hive (connected through xgmi links; itself when in none)."""
  root = list(range(n))
  def find(i: int) -> int:
    while root[i] != i: i = root[i]
    return i
  for (a, b), k in links.items():
    if k == "xgmi": ra, rb = find(a), find(b); root[max(ra, rb)] = min(ra, rb)
  return [find(i) for i in range(n)]

def hive_ids(ngpus: int, links: dict[tuple[int, int], str]) -> list[int]:
  """Each GPU's hive_id: 0 outside a hive; the hive's GPUs share one (the PSP's 64-bit id, any nonzero value here)."""
  root = _hives(ngpus, links)
  return [0 if root.count(root[g]) == 1 else 0x48495645_00000000 | root[g] for g in range(ngpus)]

def files(arch: str, kernel: str = "6.12", gpu_ids: list[int] | None = None, links: dict[tuple[int, int], str] | None = None,
          small_bar: bool | frozenset[int] = False) -> dict[str, str]:
  """path -> text of every topology file the mock serves: node 0 the CPU, nodes 1.. the GPUs of `gpu_ids` (default one),
  with the io_links / p2p_links of `links` ({(i, j): kind} per GPU pair, link_matrix; default none)."""
  out = {f"{TOPOLOGY}/generation_id": "1\n", f"{TOPOLOGY}/system_properties": "platform_oem 0\nplatform_id 0\nplatform_rev 0\n"}
  nodes = [(0, cpu_properties())] + [(g, gpu_properties(arch, kernel)) for g in (gpu_ids or [GPU_ID[arch]])]
  ngpus = len(nodes) - 1
  links = link_matrix(links or "none", ngpus, arch)
  lf = link_files(arch, ngpus, links, small_bar, kernel)
  hives = hive_ids(ngpus, links)
  # each GPU its own render node (renderD128, 129, ...: DRM hands out render minors from 128 up in probe order,
  # linux@v6.12.117:drivers/gpu/drm/drm_drv.c drm_minor_alloc, DRM_MINOR_RENDER range 128..191) and PCI
  # slot (location_id = bus << 8 | devfn; the k-th GPU one bus further on)
  for k, (_, props) in enumerate(nodes[1:]):
    props["drm_render_minor"], props["location_id"], props["hive_id"] = RENDER_MINOR + k, props["location_id"] + (k << 8), hives[k]
  for n, (gpu_id, props) in enumerate(nodes):
    props["io_links_count"], props["p2p_links_count"] = int(lf.pop(f"io_links_count/{n}")), int(lf.pop(f"p2p_links_count/{n}"))
    out[f"{TOPOLOGY}/nodes/{n}/gpu_id"] = f"{gpu_id}\n"
    out[f"{TOPOLOGY}/nodes/{n}/name"] = ("" if n == 0 else arch) + "\n"
    out[f"{TOPOLOGY}/nodes/{n}/properties"] = "".join(f"{k} {v}\n" for k, v in props.items())
  return out | lf
