"""RM class ids (g_allclasses.h) and the classes each GPU architecture uses for compute.

  >>> hex(CLASSES["HOPPER_COMPUTE_A"])
  '0xcbc0'
  >>> ARCHS["hopper"].compute == CLASSES["HOPPER_COMPUTE_A"]
  True
"""
from __future__ import annotations
from dataclasses import dataclass

CLASSES: dict[str, int] = {
  # object tree
  "NV01_ROOT_CLIENT": 0x41, "NV01_DEVICE_0": 0x80, "NV20_SUBDEVICE_0": 0x2080,
  # memory
  "NV01_MEMORY_SYSTEM": 0x3E, "NV01_MEMORY_LOCAL_USER": 0x40, "NV01_MEMORY_VIRTUAL": 0x70,
  "NV01_MEMORY_SYSTEM_OS_DESCRIPTOR": 0x71, "NV01_EVENT_OS_EVENT": 0x79,
  # address space, scheduling, debugging
  "FERMI_VASPACE_A": 0x90F1, "KEPLER_CHANNEL_GROUP_A": 0xA06C, "FERMI_CONTEXT_SHARE_A": 0x9067, "GT200_DEBUGGER": 0x83DE,
  # usermode (doorbell page)
  "VOLTA_USERMODE_A": 0xC361, "TURING_USERMODE_A": 0xC461, "AMPERE_USERMODE_A": 0xC561, "HOPPER_USERMODE_A": 0xC661,
  "BLACKWELL_USERMODE_A": 0xC761,
  # GPFIFO channels
  "VOLTA_CHANNEL_GPFIFO_A": 0xC36F, "TURING_CHANNEL_GPFIFO_A": 0xC46F, "AMPERE_CHANNEL_GPFIFO_A": 0xC56F,
  "HOPPER_CHANNEL_GPFIFO_A": 0xC86F, "BLACKWELL_CHANNEL_GPFIFO_A": 0xC96F, "BLACKWELL_CHANNEL_GPFIFO_B": 0xCA6F,
  # compute engines
  "AMPERE_COMPUTE_A": 0xC6C0, "AMPERE_COMPUTE_B": 0xC7C0, "ADA_COMPUTE_A": 0xC9C0, "HOPPER_COMPUTE_A": 0xCBC0,
  "BLACKWELL_COMPUTE_A": 0xCDC0, "BLACKWELL_COMPUTE_B": 0xCEC0,
  # copy engines
  "AMPERE_DMA_COPY_A": 0xC6B5, "AMPERE_DMA_COPY_B": 0xC7B5, "HOPPER_DMA_COPY_A": 0xC8B5, "BLACKWELL_DMA_COPY_A": 0xC9B5,
  "BLACKWELL_DMA_COPY_B": 0xCAB5,
}
CLASS_NAMES = {v: k for k, v in CLASSES.items()}

def class_name(cls: int) -> str:
  """Name of a class id, or its hex value when not one of ours."""
  return CLASS_NAMES.get(cls, f"class {cls:#x}")

@dataclass(frozen=True)
class Arch:
  """The classes a compute client allocates on one architecture, and the QMD layout its compute class reads.
  `chip` is the representative chip whose RM class table lists these classes."""
  name: str
  chip: str
  sm: int
  gpfifo: int
  compute: int
  copy: int
  usermode: int
  qmd: str

# QMD version per compute class is what Mesa NVK (nak/qmd.rs) uses; NVIDIA's headers do not state it.
ARCHS: dict[str, Arch] = {a.name: a for a in [
  Arch("ampere", "GA102", 86, CLASSES["AMPERE_CHANNEL_GPFIFO_A"], CLASSES["AMPERE_COMPUTE_B"], CLASSES["AMPERE_DMA_COPY_B"], CLASSES["AMPERE_USERMODE_A"], "V03_00"),
  Arch("ampere_a100", "GA100", 80, CLASSES["AMPERE_CHANNEL_GPFIFO_A"], CLASSES["AMPERE_COMPUTE_A"], CLASSES["AMPERE_DMA_COPY_A"], CLASSES["AMPERE_USERMODE_A"], "V03_00"),
  Arch("ada", "AD102", 89, CLASSES["AMPERE_CHANNEL_GPFIFO_A"], CLASSES["ADA_COMPUTE_A"], CLASSES["AMPERE_DMA_COPY_B"], CLASSES["AMPERE_USERMODE_A"], "V03_00"),
  Arch("hopper", "GH100", 90, CLASSES["HOPPER_CHANNEL_GPFIFO_A"], CLASSES["HOPPER_COMPUTE_A"], CLASSES["HOPPER_DMA_COPY_A"], CLASSES["HOPPER_USERMODE_A"], "V04_00"),
  Arch("blackwell", "GB100", 100, CLASSES["BLACKWELL_CHANNEL_GPFIFO_A"], CLASSES["BLACKWELL_COMPUTE_A"], CLASSES["BLACKWELL_DMA_COPY_A"], CLASSES["HOPPER_USERMODE_A"], "V05_00"),
  Arch("blackwell_b", "GB202", 120, CLASSES["BLACKWELL_CHANNEL_GPFIFO_B"], CLASSES["BLACKWELL_COMPUTE_B"], CLASSES["BLACKWELL_DMA_COPY_B"], CLASSES["BLACKWELL_USERMODE_A"], "V05_00"),
]}

def arch_from_classlist(classes: list[int]) -> Arch:
  """Pick the newest architecture whose compute, copy and GPFIFO classes all appear in a device's class list
  (the answer of NV0080_CTRL_CMD_GPU_GET_CLASSLIST); raises naming the compute classes found otherwise.

  >>> arch_from_classlist([CLASSES[n] for n in ("HOPPER_COMPUTE_A", "HOPPER_DMA_COPY_A", "HOPPER_CHANNEL_GPFIFO_A", "HOPPER_USERMODE_A")]).name
  'hopper'
  """
  have = set(classes)
  for a in sorted(ARCHS.values(), key=lambda a: -a.compute):
    if {a.gpfifo, a.compute, a.copy, a.usermode} <= have: return a
  found = sorted(class_name(c) for c in have if (c & 0xFF) == 0xC0)
  raise RuntimeError(f"no supported compute architecture in the device class list (compute classes found: {found or 'none'})")
