"""The mock GPU's own reading of NVIDIA's class headers: GPFIFO entries, method headers, the host (channel),
compute and copy methods it decodes, and the QMD fields a launch reads.

Written from open-gpu-doc / open-gpu-kernel-modules 580 headers (clc56f.h, clc86f.h, clc6c0.h .. clcec0.h,
clc6b5.h .. clcab5.h, clc6c0qmd.h, clc9c0qmd.h, clcbc0qmd.h, clcdc0qmd.h, clcec0qmd.h), independently of the
backend's ioctl_defs: a wrong number in one table must not pass both sides (tests/mock/test_nv_mock_tables.py checks
these against ../shared/abi/nvidia_methods.json). Bit ranges are (hi, lo), inclusive.

  >>> decode_header(0x200120AD)
  (1, 1, 692, 1)
  >>> qmd_read("V04_00", bytes(384)).get("QMD_TYPE")
  0
"""
from __future__ import annotations

# ---- GPFIFO entry (NVC56F_GP_ENTRY0/1, as one little-endian u64) and USERD (Nvc56fControl) ----
GP_ENTRY_BYTES = 8
USERD_GPGET, USERD_GPPUT = 0x88, 0x8C

def decode_gp_entry(e: int) -> tuple[int, int, bool]:
  """(pushbuffer VA, length in dwords, SYNC_WAIT) of a GPFIFO entry: GET [31:2], GET_HI [39:32], LENGTH [62:42], SYNC [63]."""
  return (e & 0xFFFFFFFC) | (((e >> 32) & 0xFF) << 32), (e >> 42) & 0x1FFFFF, bool(e >> 63)

# ---- method header: ADDRESS [11:0] (dwords), SUBCHANNEL [15:13], COUNT / IMMD_DATA [28:16], SEC_OP [31:29] ----
SEC_INC, SEC_NON_INC, SEC_IMMD, SEC_ONE_INC, SEC_END_SEGMENT = 1, 3, 4, 5, 7

def decode_header(w: int) -> tuple[int, int, int, int]:
  """(sec_op, subchannel, method byte offset, count or immediate data)."""
  return w >> 29, (w >> 13) & 7, (w & 0xFFF) << 2, (w >> 16) & 0x1FFF

# ---- methods: name -> (byte offset, {field: (hi, lo)}) ----
HOST = {
  "SET_OBJECT": (0x00, {"NVCLASS": (15, 0), "ENGINE": (20, 16)}),
  "NOP": (0x08, {}),
  "NON_STALL_INTERRUPT": (0x20, {}),
  "MEM_OP_A": (0x28, {}), "MEM_OP_B": (0x2C, {}), "MEM_OP_C": (0x30, {}), "MEM_OP_D": (0x34, {"OPERATION": (31, 27)}),
  "SET_REFERENCE": (0x50, {}),
  "SEM_ADDR_LO": (0x5C, {"OFFSET": (31, 2)}),
  "SEM_ADDR_HI": (0x60, {"OFFSET": (24, 0)}),          # [7:0] in NVC56F (see HOST_NARROW)
  "SEM_PAYLOAD_LO": (0x64, {}), "SEM_PAYLOAD_HI": (0x68, {}),
  "SEM_EXECUTE": (0x6C, {"OPERATION": (2, 0), "ACQUIRE_SWITCH_TSG": (12, 12), "RELEASE_WFI": (20, 20), "PAYLOAD_SIZE": (24, 24),
                         "RELEASE_TIMESTAMP": (25, 25)}),
  "WFI": (0x78, {"SCOPE": (0, 0)}),
}
HOST_NARROW = {0xC56F: {("SEM_ADDR_HI", "OFFSET"): (7, 0)}}
SEM_OP = {"ACQUIRE": 0, "RELEASE": 1, "ACQ_STRICT_GEQ": 2, "ACQ_CIRC_GEQ": 3, "ACQ_AND": 4, "ACQ_NOR": 5, "REDUCTION": 6}

COMPUTE = {
  "SET_OBJECT": (0x000, {"CLASS_ID": (15, 0)}),
  "NO_OPERATION": (0x100, {}),
  "WAIT_FOR_IDLE": (0x110, {}),
  "SET_REPORT_SEMAPHORE_PAYLOAD_LOWER": (0x158, {}), "SET_REPORT_SEMAPHORE_PAYLOAD_UPPER": (0x15C, {}),
  "SET_REPORT_SEMAPHORE_ADDRESS_LOWER": (0x160, {}), "SET_REPORT_SEMAPHORE_ADDRESS_UPPER": (0x164, {"UPPER": (24, 0)}),
  "REPORT_SEMAPHORE_EXECUTE": (0x168, {"OPERATION": (1, 0), "PAYLOAD_SIZE64": (12, 12)}),
  "INVALIDATE_SHADER_CACHES": (0x21C, {"INSTRUCTION": (0, 0), "CONSTANT": (12, 12)}),
  "SET_SHADER_SHARED_MEMORY_WINDOW_A": (0x2A0, {"BASE_ADDRESS_UPPER": (16, 0)}),
  "SET_SHADER_SHARED_MEMORY_WINDOW_B": (0x2A4, {}),
  "SEND_PCAS_A": (0x2B4, {}),
  "SEND_PCAS_B": (0x2B8, {}),
  "SEND_SIGNALING_PCAS_B": (0x2BC, {"INVALIDATE": (0, 0), "SCHEDULE": (1, 1)}),
  "SEND_SIGNALING_PCAS2_B": (0x2C0, {"PCAS_ACTION": (3, 0)}),
  "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A": (0x2E4, {"SIZE_UPPER": (7, 0)}),
  "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B": (0x2E8, {}),
  "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C": (0x2EC, {"MAX_SM_COUNT": (8, 0)}),
  "SET_INLINE_QMD_ADDRESS_A": (0x318, {}), "SET_INLINE_QMD_ADDRESS_B": (0x31C, {}),
  "LOAD_INLINE_QMD_DATA": (0x320, {}),                 # (i) = 0x320 + 4i
  "SET_SHADER_LOCAL_MEMORY_A": (0x790, {"ADDRESS_UPPER": (24, 0)}),   # [16:0] before Hopper
  "SET_SHADER_LOCAL_MEMORY_B": (0x794, {}),
  "SET_SHADER_LOCAL_MEMORY_WINDOW_A": (0x7B0, {"BASE_ADDRESS_UPPER": (16, 0)}),
  "SET_SHADER_LOCAL_MEMORY_WINDOW_B": (0x7B4, {}),
  "INVALIDATE_SHADER_CACHES_NO_WFI": (0x1698, {"INSTRUCTION": (0, 0), "CONSTANT": (12, 12)}),
}
COMPUTE_NARROW = {c: {("SET_SHADER_LOCAL_MEMORY_A", "ADDRESS_UPPER"): (16, 0), ("SET_REPORT_SEMAPHORE_ADDRESS_UPPER", "UPPER"): (7, 0)}
                  for c in (0xC6C0, 0xC7C0, 0xC9C0)}
COMPUTE_MISSING = {0xC6C0: {"SET_REPORT_SEMAPHORE_PAYLOAD_LOWER", "SET_REPORT_SEMAPHORE_PAYLOAD_UPPER", "SET_REPORT_SEMAPHORE_ADDRESS_LOWER",
                            "SET_REPORT_SEMAPHORE_ADDRESS_UPPER", "REPORT_SEMAPHORE_EXECUTE"}}
PCAS_ACTION_SCHEDULES = {2, 3, 9}       # SCHEDULE, INVALIDATE_COPY_SCHEDULE, PREFETCH_SCHEDULE
INLINE_QMD_DWORDS = 96

COPY = {
  "SET_SEMAPHORE_A": (0x240, {"UPPER": (24, 0)}), "SET_SEMAPHORE_B": (0x244, {}),
  "SET_SEMAPHORE_PAYLOAD": (0x248, {}), "SET_SEMAPHORE_PAYLOAD_UPPER": (0x24C, {}),
  "LAUNCH_DMA": (0x300, {"DATA_TRANSFER_TYPE": (1, 0), "FLUSH_ENABLE": (2, 2), "SEMAPHORE_TYPE": (4, 3), "SRC_MEMORY_LAYOUT": (7, 7),
                         "DST_MEMORY_LAYOUT": (8, 8), "MULTI_LINE_ENABLE": (9, 9), "SRC_TYPE": (12, 12), "DST_TYPE": (13, 13)}),
  "OFFSET_IN_UPPER": (0x400, {"UPPER": (24, 0)}), "OFFSET_IN_LOWER": (0x404, {}),
  "OFFSET_OUT_UPPER": (0x408, {"UPPER": (24, 0)}), "OFFSET_OUT_LOWER": (0x40C, {}),
  "PITCH_IN": (0x410, {}), "PITCH_OUT": (0x414, {}), "LINE_LENGTH_IN": (0x418, {}), "LINE_COUNT": (0x41C, {}),
}
COPY_NARROW = {c: {("SET_SEMAPHORE_A", "UPPER"): (16, 0), ("OFFSET_IN_UPPER", "UPPER"): (16, 0), ("OFFSET_OUT_UPPER", "UPPER"): (16, 0)}
               for c in (0xC6B5, 0xC7B5)}
COPY_MISSING = {0xC6B5: {"SET_SEMAPHORE_PAYLOAD_UPPER"}}

CLASS_NAMES = {0xC56F: "AMPERE_CHANNEL_GPFIFO_A", 0xC86F: "HOPPER_CHANNEL_GPFIFO_A", 0xC96F: "BLACKWELL_CHANNEL_GPFIFO_A",
               0xCA6F: "BLACKWELL_CHANNEL_GPFIFO_B", 0xC6C0: "AMPERE_COMPUTE_A", 0xC7C0: "AMPERE_COMPUTE_B", 0xC9C0: "ADA_COMPUTE_A",
               0xCBC0: "HOPPER_COMPUTE_A", 0xCDC0: "BLACKWELL_COMPUTE_A", 0xCEC0: "BLACKWELL_COMPUTE_B", 0xC6B5: "AMPERE_DMA_COPY_A",
               0xC7B5: "AMPERE_DMA_COPY_B", 0xC8B5: "HOPPER_DMA_COPY_A", 0xC9B5: "BLACKWELL_DMA_COPY_A", 0xCAB5: "BLACKWELL_DMA_COPY_B"}
def class_name(cls: int) -> str: return CLASS_NAMES.get(cls, f"class {cls:#x}")

class MethodTable:
  """One class's methods: `name_at(offset)`, and `field(name, fname, word)` with the class's own widths."""
  def __init__(self, cls: int):
    kind = cls & 0xFF
    base, narrow, missing = {0x6F: (HOST, HOST_NARROW, {}), 0xC0: (COMPUTE, COMPUTE_NARROW, COMPUTE_MISSING),
                             0xB5: (COPY, COPY_NARROW, COPY_MISSING)}[kind]
    self.cls = cls
    self.methods = {n: (off, dict(f)) for n, (off, f) in base.items() if n not in missing.get(cls, ())}
    for (m, f), bits in narrow.get(cls, {}).items():
      if m in self.methods: self.methods[m][1][f] = bits
    self.by_offset = {off: n for n, (off, _) in self.methods.items()}
    if "LOAD_INLINE_QMD_DATA" in self.methods:
      for i in range(1, INLINE_QMD_DWORDS): self.by_offset[0x320 + 4 * i] = "LOAD_INLINE_QMD_DATA"
  def name_at(self, off: int) -> str | None: return self.by_offset.get(off)
  def field(self, name: str, fname: str, word: int) -> int:
    hi, lo = self.methods[name][1][fname]
    return (word >> lo) & ((1 << (hi - lo + 1)) - 1)

_TABLES: dict[int, MethodTable] = {}
def table(cls: int) -> MethodTable:
  """The (cached) method table of a host, compute or copy class; KeyError for a class the mock does not know."""
  if cls not in _TABLES:
    if cls not in CLASS_NAMES: raise KeyError(f"the mock has no method table for class {cls:#x}")
    _TABLES[cls] = MethodTable(cls)
  return _TABLES[cls]

# ---- QMD: the fields a launch reads, per version. name -> (hi, lo) or (hi, lo, stride of an indexed field) ----
QMD_OF_CLASS = {0xC6C0: "V03_00", 0xC7C0: "V03_00", 0xC9C0: "V03_00", 0xCBC0: "V04_00", 0xCDC0: "V05_00", 0xCEC0: "V05_00"}
QMD_BYTES = {"V03_00": 256, "V04_00": 384, "V05_00": 384}
QMD_MAJOR = {"V03_00": 3, "V04_00": 4, "V05_00": 5}
QMD_TYPE_GRID_CTA = 2
QMD = {
  "V03_00": {   # clc6c0qmd.h / clc9c0qmd.h
    "QMD_MAJOR_VERSION": (583, 580), "IS_QUEUE": (136, 136),
    "GRID_WIDTH": (415, 384), "GRID_HEIGHT": (431, 416), "GRID_DEPTH": (463, 448),          # CTA_RASTER_WIDTH/HEIGHT/DEPTH
    "CTA_THREAD_DIMENSION0": (607, 592), "CTA_THREAD_DIMENSION1": (623, 608), "CTA_THREAD_DIMENSION2": (639, 624),
    "PROGRAM_ADDRESS_LOWER": (1567, 1536), "PROGRAM_ADDRESS_UPPER": (1584, 1568),
    "REGISTER_COUNT": (656, 648),                                                             # REGISTER_COUNT_V
    "SHARED_MEMORY_SIZE": (561, 544),
    "MIN_SM_CONFIG_SHARED_MEM_SIZE": (567, 562), "MAX_SM_CONFIG_SHARED_MEM_SIZE": (574, 569), "TARGET_SM_CONFIG_SHARED_MEM_SIZE": (662, 657),
    "SHADER_LOCAL_MEMORY_LOW_SIZE": (759, 736), "SHADER_LOCAL_MEMORY_HIGH_SIZE": (1623, 1600),
    "BARRIER_COUNT": (767, 763),
    "CONSTANT_BUFFER_VALID": (640, 640, 1), "CONSTANT_BUFFER_ADDR_LOWER": (1055, 1024, 64), "CONSTANT_BUFFER_ADDR_UPPER": (1072, 1056, 64),
    "CONSTANT_BUFFER_SIZE_SHIFTED4": (1087, 1075, 64),
    "RELEASE0_ENABLE": (823, 823), "RELEASE1_ENABLE": (951, 951), "DEPENDENT_QMD0_ENABLE": (512, 512),
    "INVALIDATE_INSTRUCTION_CACHE": (190, 190), "INVALIDATE_SHADER_CONSTANT_CACHE": (191, 191),
  },
  "V04_00": {   # clcbc0qmd.h
    "QMD_MAJOR_VERSION": (583, 580), "QMD_TYPE": (25, 23),
    "GRID_WIDTH": (1055, 1024), "GRID_HEIGHT": (1071, 1056), "GRID_DEPTH": (1103, 1088),
    "CTA_THREAD_DIMENSION0": (1167, 1152), "CTA_THREAD_DIMENSION1": (1183, 1168), "CTA_THREAD_DIMENSION2": (1199, 1184),
    "PROGRAM_ADDRESS_LOWER": (1247, 1216), "PROGRAM_ADDRESS_UPPER": (1272, 1248),
    "REGISTER_COUNT": (1208, 1200), "SHARED_MEMORY_SIZE": (601, 584),
    "MIN_SM_CONFIG_SHARED_MEM_SIZE": (613, 608), "MAX_SM_CONFIG_SHARED_MEM_SIZE": (619, 614), "TARGET_SM_CONFIG_SHARED_MEM_SIZE": (625, 620),
    "SHADER_LOCAL_MEMORY_LOW_SIZE": (535, 512), "SHADER_LOCAL_MEMORY_HIGH_SIZE": (567, 544),
    "BARRIER_COUNT": (1215, 1211),
    "CONSTANT_BUFFER_VALID": (416, 416, 4), "CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6": (1567, 1536, 64),
    "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6": (1586, 1568, 64), "CONSTANT_BUFFER_SIZE_SHIFTED4": (1599, 1587, 64),
    "RELEASE_ENABLE": (320, 320, 16), "DEPENDENT_QMD_ENABLE": (368, 368, 5), "INVALIDATE_INSTRUCTION_CACHE": (606, 606),
    "INVALIDATE_SHADER_CONSTANT_CACHE": (607, 607),
  },
  "V05_00": {   # clcdc0qmd.h / clcec0qmd.h
    "QMD_MAJOR_VERSION": (471, 468), "QMD_TYPE": (153, 151),
    "GRID_WIDTH": (1279, 1248), "GRID_HEIGHT": (1295, 1280), "GRID_DEPTH": (1327, 1312),
    "CTA_THREAD_DIMENSION0": (1103, 1088), "CTA_THREAD_DIMENSION1": (1119, 1104), "CTA_THREAD_DIMENSION2": (1127, 1120),
    "PROGRAM_ADDRESS_LOWER_SHIFTED4": (1055, 1024), "PROGRAM_ADDRESS_UPPER_SHIFTED4": (1076, 1056),
    "REGISTER_COUNT": (1136, 1128), "SHARED_MEMORY_SIZE_SHIFTED7": (1162, 1152),
    "MIN_SM_CONFIG_SHARED_MEM_SIZE": (1168, 1163), "MAX_SM_CONFIG_SHARED_MEM_SIZE": (1174, 1169), "TARGET_SM_CONFIG_SHARED_MEM_SIZE": (1180, 1175),
    "SHADER_LOCAL_MEMORY_LOW_SIZE_SHIFTED4": (1199, 1184), "SHADER_LOCAL_MEMORY_HIGH_SIZE_SHIFTED4": (1215, 1200),
    "BARRIER_COUNT": (1141, 1137),
    "CONSTANT_BUFFER_VALID": (1856, 1856, 4), "CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6": (1375, 1344, 64),
    "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6": (1394, 1376, 64), "CONSTANT_BUFFER_SIZE_SHIFTED4": (1407, 1395, 64),
    "RELEASE_ENABLE": (288, 288, 16), "DEPENDENT_QMD_ENABLE": (336, 336, 8), "INVALIDATE_INSTRUCTION_CACHE": (476, 476),
    "INVALIDATE_SHADER_CONSTANT_CACHE": (477, 477),
  },
}
# names the V03 header uses for fields the table above names like V04 (for the cross-check against the headers)
V03_HEADER_NAMES = {"GRID_WIDTH": "CTA_RASTER_WIDTH", "GRID_HEIGHT": "CTA_RASTER_HEIGHT", "GRID_DEPTH": "CTA_RASTER_DEPTH",
                    "REGISTER_COUNT": "REGISTER_COUNT_V"}

class QMDRead:
  """Read-only view of a QMD's bits by this module's field names."""
  def __init__(self, version: str, data: bytes):
    self.version, self.fields = version, QMD[version]
    self.value = int.from_bytes(data[:QMD_BYTES[version]], "little")
  def get(self, name: str, i: int = 0) -> int:
    hi, lo, *stride = self.fields[name]
    if stride: hi, lo = hi + i * stride[0], lo + i * stride[0]
    return (self.value >> lo) & ((1 << (hi - lo + 1)) - 1)
  def address(self, lower: str, upper: str, shift: int = 0, i: int = 0) -> int:
    return (self.get(lower, i) | (self.get(upper, i) << 32)) << shift

def qmd_read(version: str, data: bytes) -> QMDRead:
  """Decode `data` as a QMD of `version` ("V03_00", "V04_00", "V05_00")."""
  return QMDRead(version, data)
