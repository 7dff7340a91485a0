"""Pushbuffer methods: host (channel) methods, compute-class and copy-class methods, the method header,
the GPFIFO entry and the USERD/doorbell offsets.

Method tables are text: a line `NAME 0xOFFSET` starts a method (byte offset in the class's method
space), an indented line `FIELD hi:lo [VALUE=n ...]` adds a field of its 32-bit data word. Each family
has a base class (the header that defines the most) plus per-class differences.

  >>> m = methods_for(0xCBC0)["SEND_PCAS_A"]; hex(m.offset)
  '0x2b4'
  >>> hex(method_header(1, 0x2B4, 1))
  '0x200120ad'
  >>> methods_for(0xC86F)["SEM_EXECUTE"].value("OPERATION", "RELEASE")
  1
"""
from __future__ import annotations
from dataclasses import dataclass, field

@dataclass
class Field:
  hi: int
  lo: int
  values: dict[str, int] = field(default_factory=dict)
  def mask(self) -> int: return (1 << (self.hi - self.lo + 1)) - 1

@dataclass
class Method:
  name: str
  offset: int
  fields: dict[str, Field] = field(default_factory=dict)
  def value(self, fname: str, vname: str | int) -> int:
    """The data-word bits for field `fname` set to `vname` (a value name or an int)."""
    f = self.fields[fname]
    v = f.values[vname] if isinstance(vname, str) else vname
    if not 0 <= v <= f.mask(): raise ValueError(f"{v:#x} does not fit {self.name}.{fname} [{f.hi}:{f.lo}]")
    return v << f.lo
  def data(self, **fields: str | int) -> int:
    """A data word from several fields: `data(OPERATION="RELEASE", PAYLOAD_SIZE="64BIT")`."""
    out = 0
    for k, v in fields.items(): out |= self.value(k, v)
    return out
  def get(self, fname: str, word: int) -> int:
    f = self.fields[fname]
    return (word >> f.lo) & f.mask()

def _parse(text: str) -> dict[str, Method]:
  out: dict[str, Method] = {}
  cur: Method | None = None
  for line in text.strip("\n").splitlines():
    if not line.strip(): continue
    parts = line.split()
    if not line.startswith(" "):
      cur = out[parts[0]] = Method(parts[0], int(parts[1], 0))
    else:
      assert cur is not None
      hi, lo = (int(x) for x in parts[1].split(":"))
      cur.fields[parts[0]] = Field(hi, lo, {k: int(v) for k, v in (p.split("=") for p in parts[2:])})
  return out

# ---- host methods (NVC56F = AMPERE_CHANNEL_GPFIFO_A, the only complete host-method header) ----
_CHANNEL = """
SET_OBJECT 0x0
  NVCLASS 15:0
  ENGINE 20:16 SW=31
NOP 0x8
  HANDLE 31:0
NON_STALL_INTERRUPT 0x20
  HANDLE 31:0
MEM_OP_A 0x28
  TLB_INVALIDATE_SYSMEMBAR 11:11 DIS=0 EN=1
MEM_OP_B 0x2c
  TLB_INVALIDATE_TARGET_ADDR_HI 31:0
MEM_OP_C 0x30
  MEMBAR_TYPE 2:0 SYS_MEMBAR=0 MEMBAR=1
MEM_OP_D 0x34
  OPERATION 31:27 MEMBAR=5 MMU_TLB_INVALIDATE=9 MMU_TLB_INVALIDATE_TARGETED=10 L2_PEERMEM_INVALIDATE=13 L2_SYSMEM_INVALIDATE=14
SET_REFERENCE 0x50
  COUNT 31:0
SEM_ADDR_LO 0x5c
  OFFSET 31:2
SEM_ADDR_HI 0x60
  OFFSET 7:0
SEM_PAYLOAD_LO 0x64
  PAYLOAD 31:0
SEM_PAYLOAD_HI 0x68
  PAYLOAD 31:0
SEM_EXECUTE 0x6c
  OPERATION 2:0 ACQUIRE=0 RELEASE=1 ACQ_STRICT_GEQ=2 ACQ_CIRC_GEQ=3 ACQ_AND=4 ACQ_NOR=5 REDUCTION=6
  ACQUIRE_SWITCH_TSG 12:12 DIS=0 EN=1
  RELEASE_WFI 20:20 DIS=0 EN=1
  PAYLOAD_SIZE 24:24 32BIT=0 64BIT=1
  RELEASE_TIMESTAMP 25:25 DIS=0 EN=1
  REDUCTION 30:27 IMIN=0 IMAX=1 IXOR=2 IAND=3 IOR=4 IADD=5 INC=6 DEC=7
  REDUCTION_FORMAT 31:31 SIGNED=0 UNSIGNED=1
WFI 0x78
  SCOPE 0:0 CURRENT_SCG_TYPE=0 ALL=1
"""
# Hopper/Blackwell host classes widen the semaphore address (NVC86F/NVC96F/NVCA6F define SEM_ADDR_HI [24:0]).
# Their headers in open-gpu-kernel-modules are abridged; the other host methods are assumed unchanged from NVC56F.
_CHANNEL_WIDE_SEM = {"SEM_ADDR_HI.OFFSET": (24, 0)}

# ---- compute methods (NVCBC0 = HOPPER_COMPUTE_A; same offsets in C6C0..CEC0) ----
_COMPUTE = """
SET_OBJECT 0x0
  CLASS_ID 15:0
  ENGINE_ID 20:16
NO_OPERATION 0x100
  V 31:0
WAIT_FOR_IDLE 0x110
  V 31:0
SET_REPORT_SEMAPHORE_PAYLOAD_LOWER 0x158
  PAYLOAD_LOWER 31:0
SET_REPORT_SEMAPHORE_PAYLOAD_UPPER 0x15c
  PAYLOAD_UPPER 31:0
SET_REPORT_SEMAPHORE_ADDRESS_LOWER 0x160
  LOWER 31:0
SET_REPORT_SEMAPHORE_ADDRESS_UPPER 0x164
  UPPER 24:0
REPORT_SEMAPHORE_EXECUTE 0x168
  OPERATION 1:0 RELEASE=0 ACQUIRE=1 REPORT_ONLY=2 TRAP=3
  AWAKEN_ENABLE 2:2 FALSE=0 TRUE=1
  STRUCTURE_SIZE 4:3 SEMAPHORE_FOUR_WORDS=0 SEMAPHORE_ONE_WORD=1 SEMAPHORE_TWO_WORDS=2
  FLUSH_DISABLE 5:5 FALSE=0 TRUE=1
  REDUCTION_ENABLE 6:6 FALSE=0 TRUE=1
  REDUCTION_OP 9:7 RED_ADD=0 RED_MIN=1 RED_MAX=2 RED_INC=3 RED_DEC=4 RED_AND=5 RED_OR=6 RED_XOR=7
  REDUCTION_FORMAT 11:10 UNSIGNED=0 SIGNED=1
  PAYLOAD_SIZE64 12:12 FALSE=0 TRUE=1
INVALIDATE_SHADER_CACHES 0x21c
  INSTRUCTION 0:0 FALSE=0 TRUE=1
  LOCKS 1:1 FALSE=0 TRUE=1
  FLUSH_DATA 2:2 FALSE=0 TRUE=1
  DATA 4:4 FALSE=0 TRUE=1
  CONSTANT 12:12 FALSE=0 TRUE=1
SET_SHADER_SHARED_MEMORY_WINDOW_A 0x2a0
  BASE_ADDRESS_UPPER 16:0
SET_SHADER_SHARED_MEMORY_WINDOW_B 0x2a4
  BASE_ADDRESS 31:0
SEND_PCAS_A 0x2b4
  QMD_ADDRESS_SHIFTED8 31:0
SEND_PCAS_B 0x2b8
  FROM 23:0
  DELTA 31:24
SEND_SIGNALING_PCAS_B 0x2bc
  INVALIDATE 0:0 FALSE=0 TRUE=1
  SCHEDULE 1:1 FALSE=0 TRUE=1
SEND_SIGNALING_PCAS2_B 0x2c0
  PCAS_ACTION 3:0 NOP=0 INVALIDATE=1 SCHEDULE=2 INVALIDATE_COPY_SCHEDULE=3 INCREMENT_PUT=6 DECREMENT_DEPENDENCE=7 PREFETCH=8 PREFETCH_SCHEDULE=9
SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A 0x2e4
  SIZE_UPPER 7:0
SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B 0x2e8
  SIZE_LOWER 31:0
SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C 0x2ec
  MAX_SM_COUNT 8:0
SET_INLINE_QMD_ADDRESS_A 0x318
SET_INLINE_QMD_ADDRESS_B 0x31c
  QMD_ADDRESS_SHIFTED8_LOWER 31:0
LOAD_INLINE_QMD_DATA 0x320
  V 31:0
SET_SHADER_LOCAL_MEMORY_A 0x790
  ADDRESS_UPPER 24:0
SET_SHADER_LOCAL_MEMORY_B 0x794
  ADDRESS_LOWER 31:0
SET_SHADER_LOCAL_MEMORY_WINDOW_A 0x7b0
  BASE_ADDRESS_UPPER 16:0
SET_SHADER_LOCAL_MEMORY_WINDOW_B 0x7b4
  BASE_ADDRESS 31:0
INVALIDATE_SHADER_CACHES_NO_WFI 0x1698
  INSTRUCTION 0:0 FALSE=0 TRUE=1
  GLOBAL_DATA 4:4 FALSE=0 TRUE=1
  CONSTANT 12:12 FALSE=0 TRUE=1
"""
LOAD_INLINE_QMD_DATA_STRIDE = 4   # LOAD_INLINE_QMD_DATA(i) = 0x320 + 4*i
_SEMAPHORE_REPORT = ("SET_REPORT_SEMAPHORE_PAYLOAD_LOWER", "SET_REPORT_SEMAPHORE_PAYLOAD_UPPER",
                     "SET_REPORT_SEMAPHORE_ADDRESS_LOWER", "SET_REPORT_SEMAPHORE_ADDRESS_UPPER", "REPORT_SEMAPHORE_EXECUTE")
# Pre-Hopper compute classes: narrower local-memory address, report-semaphore address [7:0], and AMPERE_COMPUTE_A
# has no SET_REPORT_SEMAPHORE_* at all.
_COMPUTE_PRE_HOPPER = {"SET_SHADER_LOCAL_MEMORY_A.ADDRESS_UPPER": (16, 0), "SET_REPORT_SEMAPHORE_ADDRESS_UPPER.UPPER": (7, 0)}

# ---- copy methods (NVC8B5 = HOPPER_DMA_COPY_A) ----
_COPY = """
SET_SEMAPHORE_A 0x240
  UPPER 24:0
SET_SEMAPHORE_B 0x244
  LOWER 31:0
SET_SEMAPHORE_PAYLOAD 0x248
  PAYLOAD 31:0
SET_SEMAPHORE_PAYLOAD_UPPER 0x24c
  PAYLOAD 31:0
LAUNCH_DMA 0x300
  DATA_TRANSFER_TYPE 1:0 NONE=0 PIPELINED=1 NON_PIPELINED=2
  FLUSH_ENABLE 2:2 FALSE=0 TRUE=1
  SEMAPHORE_TYPE 4:3 NONE=0 RELEASE_ONE_WORD_SEMAPHORE=1 RELEASE_FOUR_WORD_SEMAPHORE=2 RELEASE_CONDITIONAL_INTR_SEMAPHORE=3
  INTERRUPT_TYPE 6:5 NONE=0 BLOCKING=1 NON_BLOCKING=2
  SRC_MEMORY_LAYOUT 7:7 BLOCKLINEAR=0 PITCH=1
  DST_MEMORY_LAYOUT 8:8 BLOCKLINEAR=0 PITCH=1
  MULTI_LINE_ENABLE 9:9 FALSE=0 TRUE=1
  REMAP_ENABLE 10:10 FALSE=0 TRUE=1
  SRC_TYPE 12:12 VIRTUAL=0 PHYSICAL=1
  DST_TYPE 13:13 VIRTUAL=0 PHYSICAL=1
  SEMAPHORE_REDUCTION_ENABLE 19:19 FALSE=0 TRUE=1
  FLUSH_TYPE 25:25 SYS=0 GL=1
OFFSET_IN_UPPER 0x400
  UPPER 24:0
OFFSET_IN_LOWER 0x404
  VALUE 31:0
OFFSET_OUT_UPPER 0x408
  UPPER 24:0
OFFSET_OUT_LOWER 0x40c
  VALUE 31:0
PITCH_IN 0x410
  VALUE 31:0
PITCH_OUT 0x414
  VALUE 31:0
LINE_LENGTH_IN 0x418
  VALUE 31:0
LINE_COUNT 0x41c
  VALUE 31:0
"""
# Ampere copy classes: 17-bit upper address halves; AMPERE_DMA_COPY_A has no SET_SEMAPHORE_PAYLOAD_UPPER.
_COPY_AMPERE = {"SET_SEMAPHORE_A.UPPER": (16, 0), "OFFSET_IN_UPPER.UPPER": (16, 0), "OFFSET_OUT_UPPER.UPPER": (16, 0)}

def _family(text: str, changes: dict[str, tuple[int, int]] | None = None, drop: tuple[str, ...] = ()) -> dict[str, Method]:
  out = {k: v for k, v in _parse(text).items() if k not in drop}
  for key, (hi, lo) in (changes or {}).items():
    m, f = key.split(".")
    if m in drop: continue
    out[m].fields[f] = Field(hi, lo, dict(out[m].fields[f].values))
  return out

# class id -> (header name, methods)
METHODS: dict[int, tuple[str, dict[str, Method]]] = {
  0xC56F: ("NVC56F", _family(_CHANNEL)),
  0xC86F: ("NVC86F", _family(_CHANNEL, _CHANNEL_WIDE_SEM)),
  0xC96F: ("NVC96F", _family(_CHANNEL, _CHANNEL_WIDE_SEM)),
  0xCA6F: ("NVCA6F", _family(_CHANNEL, _CHANNEL_WIDE_SEM)),
  0xC6C0: ("NVC6C0", _family(_COMPUTE, _COMPUTE_PRE_HOPPER, drop=_SEMAPHORE_REPORT)),
  0xC7C0: ("NVC7C0", _family(_COMPUTE, _COMPUTE_PRE_HOPPER)),
  0xC9C0: ("NVC9C0", _family(_COMPUTE, _COMPUTE_PRE_HOPPER)),
  0xCBC0: ("NVCBC0", _family(_COMPUTE)),
  0xCDC0: ("NVCDC0", _family(_COMPUTE)),
  0xCEC0: ("NVCEC0", _family(_COMPUTE)),
  0xC6B5: ("NVC6B5", _family(_COPY, _COPY_AMPERE, drop=("SET_SEMAPHORE_PAYLOAD_UPPER",))),
  0xC7B5: ("NVC7B5", _family(_COPY, _COPY_AMPERE)),
  0xC8B5: ("NVC8B5", _family(_COPY)),
  0xC9B5: ("NVC9B5", _family(_COPY)),
  0xCAB5: ("NVCAB5", _family(_COPY)),
}

def methods_for(cls: int) -> dict[str, Method]:
  """The method table of a channel, compute or copy class id."""
  if cls not in METHODS: raise KeyError(f"no method table for class {cls:#x}; known: {', '.join(h for h, _ in METHODS.values())}")
  return METHODS[cls][1]

# ---- method header (a dword in the pushbuffer before each method's data) ----
METHOD_ADDRESS, METHOD_SUBCHANNEL, METHOD_COUNT, SEC_OP = (11, 0), (15, 13), (28, 16), (31, 29)
SEC_OP_INC_METHOD, SEC_OP_NON_INC_METHOD, SEC_OP_IMMD_DATA_METHOD, SEC_OP_ONE_INC, SEC_OP_END_PB_SEGMENT = 1, 3, 4, 5, 7
NUMBER_OF_SUBCHANNELS = 8

def method_header(subchannel: int, offset: int, count: int, sec_op: int = SEC_OP_INC_METHOD) -> int:
  """Header dword: `count` data dwords follow for the method at byte `offset` on `subchannel`.
  With SEC_OP_IMMD_DATA_METHOD, `count` is instead the 13-bit immediate data (no dwords follow)."""
  if offset & 3 or not 0 <= offset >> 2 < 1 << 12: raise ValueError(f"method offset {offset:#x} is not a dword offset below 0x4000")
  if not 0 <= count < 1 << 13: raise ValueError(f"method count/immediate {count} does not fit 13 bits")
  if not 0 <= subchannel < NUMBER_OF_SUBCHANNELS: raise ValueError(f"subchannel {subchannel} out of range")
  return (sec_op << 29) | (count << 16) | (subchannel << 13) | (offset >> 2)

def decode_method_header(word: int) -> tuple[int, int, int, int]:
  """(sec_op, subchannel, byte offset, count) of a header dword."""
  return word >> 29, (word >> 13) & 7, (word & 0xFFF) << 2, (word >> 16) & 0x1FFF

# ---- GPFIFO entry (8 bytes; NVC56F_GP_ENTRY0/1) ----
GP_ENTRY_SIZE = 8
GP_ENTRY0_GET, GP_ENTRY0_FETCH = (31, 2), (0, 0)
GP_ENTRY1_GET_HI, GP_ENTRY1_LEVEL, GP_ENTRY1_LENGTH, GP_ENTRY1_SYNC = (7, 0), (9, 9), (30, 10), (31, 31)
GP_ENTRY1_LEVEL_MAIN, GP_ENTRY1_LEVEL_SUBROUTINE, GP_ENTRY1_SYNC_PROCEED, GP_ENTRY1_SYNC_WAIT = 0, 1, 0, 1

def gpfifo_entry(address: int, ndwords: int, sync: bool = False) -> int:
  """64-bit GPFIFO entry pointing at a pushbuffer segment of `ndwords` dwords at GPU VA `address`.

  >>> hex(gpfifo_entry(0x200001000, 4))
  '0x100200001000'
  """
  if address & 3 or address >> 40: raise ValueError(f"pushbuffer address {address:#x} must be 4-byte aligned and below 2**40")
  if not 0 < ndwords < 1 << 21: raise ValueError(f"pushbuffer length {ndwords} dwords does not fit 21 bits")
  return (address & 0xFFFFFFFC) | ((address >> 32) << 32) | (ndwords << 42) | (int(sync) << 63)

def decode_gpfifo_entry(entry: int) -> tuple[int, int, bool]:
  """(address, length in dwords, sync) of a GPFIFO entry."""
  return (entry & 0xFFFFFFFC) | (((entry >> 32) & 0xFF) << 32), (entry >> 42) & 0x1FFFFF, bool(entry >> 63)

# ---- USERD (Nvc56fControl / Nvc86fControl) and doorbell ----
USERD_SIZE = 512
USERD_GP_GET = 0x88          # GPGet: index of the next GPFIFO entry the GPU will fetch
USERD_GP_PUT = 0x8C          # GPPut: index one past the last entry software wrote
NVC361_NOTIFY_CHANNEL_PENDING = 0x90   # in the usermode (doorbell) page: write the work-submit token here
USERMODE_REGION_SIZE = 0x10000
