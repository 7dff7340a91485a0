"""The GPUs the NV mock can pretend to be: RM class tables and the properties its controls report.

Class tables are RM's per-chip tables (engine classes + engine-less classes from g_gpu_class_list.c,
as recorded in shared/abi/nvidia_rm.json chip_class_lists; tests check them). The other properties
(names, PCI ids, sizes, unit counts) are plausible values for the product, not measured facts; the enabled
SM counts are the products' published ones (RTX 3090 82, RTX 4090 128, H100 SXM 132, B200 148, RTX 5090 170),
while the LITTER (full-die) values are larger, so a client using them gets the count wrong.

  >>> CHIPS["hopper"].name, hex(CHIPS["hopper"].arch.compute)
  ('NVIDIA H100 80GB HBM3', '0xcbc0')
"""
from __future__ import annotations
from dataclasses import dataclass, field
from ioctl_defs.nv.classes import ARCHS, Arch, CLASSES

_CLASS_TABLES = {
  "GA102": """
    4 f 20 3f 40 50 60 70 73 76 7d 82 83 90 92 b1 c2 da db de e0 f1 f2 f3 f8 f9 fb fc fe 2081 2082 208f 30f1
    402c 503b 503c 506f 5080 50a0 83de 844c 900e 9010 902d 9067 906f 9072 9074 9096 90cc 90cd 90ce 90e6 90e7
    90ec 90f1 a06c a080 a081 a084 a0bc a0bd a140 b0cc b1cc b2cc c076 c361 c365 c369 c36f c372 c461 c46f c561
    c56f c574 c637 c638 c639 c640 c670 c671 c673 c67a c67b c67d c67e c763 c77f c797 c7b0 c7b5 c7b7 c7c0 c7fa
    cb33
""",
  "AD102": """
    4 f 20 3f 40 50 60 70 73 76 7d 82 83 90 92 b1 c2 da db de e0 f1 f2 f3 f8 f9 fb fc fe 2081 2082 208f 30f1
    402c 503b 503c 506f 5080 50a0 83de 844c 900e 9010 902d 9067 906f 9072 9074 9096 90cc 90cd 90ce 90e6 90e7
    90ec 90f1 a06c a080 a081 a084 a0bc a0bd a140 b0cc b1cc b2cc c076 c361 c365 c369 c36f c372 c461 c46f c561
    c56f c574 c637 c638 c639 c640 c67a c67b c67e c763 c770 c771 c773 c77d c77f c7b5 c997 c9b0 c9b7 c9c0 c9d1
    c9fa cb33
""",
  "GH100": """
    4 f 20 3f 40 42 50 60 70 76 7d 82 83 90 92 b1 c2 da db de e0 f1 f2 f3 f8 f9 fb fc fd fe 2081 2082 208f
    30f1 402c 503b 503c 506f 5080 50a0 83de 844c 900e 9010 902d 9067 906f 9074 9096 90cc 90cd 90ce 90e6 90e7
    90f1 a06c a080 a081 a084 a0bc a0bd a140 b0cc b1cc b2cc b8b0 b8d1 b8fa c076 c361 c365 c369 c36f c461 c46f
    c561 c56f c574 c637 c638 c639 c640 c661 c763 c863 c86f c8b5 cb33 cb97 cba2 cbc0 cbca
""",
  "GB100": """
    4 f 20 3f 40 42 50 60 70 76 7d 82 83 90 92 b1 c2 da db de e0 f1 f2 f3 f8 f9 fb fc fd fe 2081 2082 208f
    30f1 402c 503b 503c 506f 5080 50a0 83de 844c 900e 9010 902d 9067 906f 9074 9096 90cc 90cd 90ce 90e6 90e7
    90f1 a06c a080 a081 a084 a0bc a0bd b0cc b1cc b2cc c076 c361 c365 c369 c36f c461 c46f c561 c56f c574 c637
    c638 c639 c640 c661 c763 c863 c86f c96f c9b5 cb33 cba2 cbca cd40 cd97 cdb0 cdc0 cdd1 cdfa
""",
  "GB202": """
    4 f 20 3f 40 42 50 60 70 73 76 7d 82 83 90 92 b1 c2 da db de e0 f1 f2 f3 f8 f9 fb fc fd fe 2081 2082
    208f 30f1 402c 503b 503c 506f 5080 50a0 83de 844c 900e 9010 902d 9067 906f 9072 9074 9096 90cc 90cd 90ce
    90e6 90e7 90ec 90f1 a06c a080 a081 a084 a0bc a0bd b0cc b1cc b2cc c076 c361 c365 c369 c36f c372 c461 c46f
    c561 c56f c574 c637 c638 c639 c640 c661 c761 c763 c77f c863 c86f c96f ca6f ca70 ca71 ca73 ca7a ca7b ca7d
    ca7e cab5 cb33 cba2 cbca cd40 ce97 cec0 cfb0 cfb7 cfd1 cffa
""",
}
CLASS_TABLES: dict[str, tuple[int, ...]] = {k: tuple(int(x, 16) for x in v.split()) for k, v in _CLASS_TABLES.items()}

# Classes RM accepts on every GPU (generic list, not per chip).
GENERIC_CLASSES = frozenset(CLASSES[n] for n in ("NV01_ROOT_CLIENT", "NV01_DEVICE_0", "NV20_SUBDEVICE_0", "NV01_MEMORY_SYSTEM",
  "NV01_MEMORY_LOCAL_USER", "NV01_MEMORY_VIRTUAL", "NV01_MEMORY_SYSTEM_OS_DESCRIPTOR", "NV01_EVENT_OS_EVENT"))

@dataclass(frozen=True)
class Chip:
  key: str
  arch: Arch
  name: str
  pci_device_id: int
  fb_size: int                 # bytes of video memory
  l2_size: int
  bus_width: int
  gpcs: int
  tpc_per_gpc: int
  sm_per_tpc: int = 2
  enabled_gpcs: int = 0        # what GR_INFO SHADER_PIPE_COUNT reports: the GPCs this part has enabled
  enabled_tpcs: int = 0        # SHADER_PIPE_SUB_COUNT: TPCs enabled on this part (floorswept dies enable fewer than gpcs*tpc_per_gpc)
  max_warps_per_sm: int = 64
  mc_architecture: int = 0     # NV2080_CTRL_MC_ARCH_INFO_ARCHITECTURE_*
  mc_implementation: int = 0
  classes: tuple[int, ...] = field(default=())

  @property
  def sm_count(self) -> int:
    """SMs the product enables (an H100 SXM: 66 TPCs x 2 = 132 of the GH100 die's 144)."""
    return self.enabled_tpcs * self.sm_per_tpc

  @property
  def sm_version(self) -> int:
    """NV2080_CTRL_GR_INFO_SM_VERSION encoding: major << 8 | minor (sm_89 -> 0x809, sm_90 -> 0x900)."""
    return ((self.arch.sm // 10) << 8) | (self.arch.sm % 10)

def _chip(key: str, **kw) -> Chip:
  a = ARCHS[key]
  return Chip(key=key, arch=a, classes=CLASS_TABLES[a.chip], **kw)

GiB = 1 << 30
CHIPS: dict[str, Chip] = {c.key: c for c in [
  _chip("ampere", name="NVIDIA GeForce RTX 3090", pci_device_id=0x2204, fb_size=24 * GiB, l2_size=6 << 20, bus_width=384,
        gpcs=7, tpc_per_gpc=6, enabled_gpcs=7, enabled_tpcs=41, max_warps_per_sm=48, mc_architecture=0x170, mc_implementation=2),
  _chip("ada", name="NVIDIA GeForce RTX 4090", pci_device_id=0x2684, fb_size=24 * GiB, l2_size=72 << 20, bus_width=384,
        gpcs=12, tpc_per_gpc=6, enabled_gpcs=11, enabled_tpcs=64, max_warps_per_sm=48, mc_architecture=0x190, mc_implementation=2),
  _chip("hopper", name="NVIDIA H100 80GB HBM3", pci_device_id=0x2330, fb_size=80 * GiB, l2_size=50 << 20, bus_width=5120,
        gpcs=8, tpc_per_gpc=9, enabled_gpcs=8, enabled_tpcs=66, mc_architecture=0x180, mc_implementation=0),
  _chip("blackwell", name="NVIDIA B200", pci_device_id=0x2901, fb_size=180 * GiB, l2_size=126 << 20, bus_width=8192,
        gpcs=8, tpc_per_gpc=10, enabled_gpcs=8, enabled_tpcs=74, mc_architecture=0x1a0, mc_implementation=0),
  _chip("blackwell_b", name="NVIDIA GeForce RTX 5090", pci_device_id=0x2b85, fb_size=32 * GiB, l2_size=96 << 20, bus_width=512,
        gpcs=12, tpc_per_gpc=8, enabled_gpcs=11, enabled_tpcs=85, max_warps_per_sm=48, mc_architecture=0x1b0, mc_implementation=2),
]}
