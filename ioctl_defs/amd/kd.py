"""The 64-byte HSA kernel descriptor (llvm::amdhsa::kernel_descriptor_t, symbol `<kernel>.kd`) and the bit
fields of its COMPUTE_PGM_RSRC1/2/3 and kernel_code_properties words, with a decoder.

Facts: AMDHSAKernelDescriptor.h as recorded in ../shared/abi/amd_packets.json (kernel_descriptor).
RSRC3 means different things per family: gfx10+ (gfx1100) vs gfx90a/gfx942.

  >>> kd = decode(bytes(44) + (0).to_bytes(4, "little") + (0x60af0000).to_bytes(4, "little") + bytes(4) + (0x408).to_bytes(2, "little") + bytes(6), "gfx1100")
  >>> kd.rsrc1_fields["PRIV"], kd.wave32, kd.properties["ENABLE_SGPR_KERNARG_SEGMENT_PTR"]
  (0, True, 1)
"""
from __future__ import annotations
import struct
from dataclasses import dataclass, field

KD_SIZE, KD_ALIGN = 64, 64
CDEF = """struct kernel_descriptor {
  uint32_t group_segment_fixed_size; uint32_t private_segment_fixed_size; uint32_t kernarg_size; uint8_t reserved0[4];
  int64_t kernel_code_entry_byte_offset; uint8_t reserved1[20]; uint32_t compute_pgm_rsrc3; uint32_t compute_pgm_rsrc1;
  uint32_t compute_pgm_rsrc2; uint16_t kernel_code_properties; uint16_t kernarg_preload; uint8_t reserved3[4];
};"""
# byte offsets (the header's *_OFFSET enum); kernarg_preload is newer LLVM (reserved2 in LLVM 14 / ROCr's copy)
GROUP_SEGMENT_FIXED_SIZE_OFFSET, PRIVATE_SEGMENT_FIXED_SIZE_OFFSET, KERNARG_SIZE_OFFSET = 0, 4, 8
KERNEL_CODE_ENTRY_BYTE_OFFSET_OFFSET, COMPUTE_PGM_RSRC3_OFFSET = 16, 44
COMPUTE_PGM_RSRC1_OFFSET, COMPUTE_PGM_RSRC2_OFFSET, KERNEL_CODE_PROPERTIES_OFFSET, KERNARG_PRELOAD_OFFSET = 48, 52, 56, 58
_LAYOUT = struct.Struct("<III4xq20xIIIHH4x")

# name -> (shift, width)
RSRC1: dict[str, tuple[int, int]] = {
  "GRANULATED_WORKITEM_VGPR_COUNT": (0, 6), "GRANULATED_WAVEFRONT_SGPR_COUNT": (6, 4), "PRIORITY": (10, 2),
  "FLOAT_ROUND_MODE_32": (12, 2), "FLOAT_ROUND_MODE_16_64": (14, 2), "FLOAT_DENORM_MODE_32": (16, 2),
  "FLOAT_DENORM_MODE_16_64": (18, 2), "PRIV": (20, 1), "ENABLE_DX10_CLAMP": (21, 1), "DEBUG_MODE": (22, 1),
  "ENABLE_IEEE_MODE": (23, 1), "BULKY": (24, 1), "CDBG_USER": (25, 1), "FP16_OVFL": (26, 1),
  "WGP_MODE": (29, 1), "MEM_ORDERED": (30, 1), "FWD_PROGRESS": (31, 1),   # the last three: gfx10+
}
RSRC2: dict[str, tuple[int, int]] = {
  "ENABLE_PRIVATE_SEGMENT": (0, 1), "USER_SGPR_COUNT": (1, 5), "ENABLE_TRAP_HANDLER": (6, 1),
  "ENABLE_SGPR_WORKGROUP_ID_X": (7, 1), "ENABLE_SGPR_WORKGROUP_ID_Y": (8, 1), "ENABLE_SGPR_WORKGROUP_ID_Z": (9, 1),
  "ENABLE_SGPR_WORKGROUP_INFO": (10, 1), "ENABLE_VGPR_WORKITEM_ID": (11, 2), "ENABLE_EXCEPTION_ADDRESS_WATCH": (13, 1),
  "ENABLE_EXCEPTION_MEMORY": (14, 1), "GRANULATED_LDS_SIZE": (15, 9),
  "ENABLE_EXCEPTION_IEEE_754_FP_INVALID_OPERATION": (24, 1), "ENABLE_EXCEPTION_FP_DENORMAL_SOURCE": (25, 1),
  "ENABLE_EXCEPTION_IEEE_754_FP_DIVISION_BY_ZERO": (26, 1), "ENABLE_EXCEPTION_IEEE_754_FP_OVERFLOW": (27, 1),
  "ENABLE_EXCEPTION_IEEE_754_FP_UNDERFLOW": (28, 1), "ENABLE_EXCEPTION_IEEE_754_FP_INEXACT": (29, 1),
  "ENABLE_EXCEPTION_INT_DIVIDE_BY_ZERO": (30, 1),
}
RSRC3_GFX10_PLUS: dict[str, tuple[int, int]] = {"SHARED_VGPR_COUNT": (0, 4), "INST_PREF_SIZE": (4, 6), "TRAP_ON_START": (10, 1),
                                                "TRAP_ON_END": (11, 1), "IMAGE_OP": (31, 1)}
RSRC3_GFX90A: dict[str, tuple[int, int]] = {"ACCUM_OFFSET": (0, 6), "TG_SPLIT": (16, 1)}
KERNEL_CODE_PROPERTY: dict[str, tuple[int, int]] = {
  "ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER": (0, 1), "ENABLE_SGPR_DISPATCH_PTR": (1, 1), "ENABLE_SGPR_QUEUE_PTR": (2, 1),
  "ENABLE_SGPR_KERNARG_SEGMENT_PTR": (3, 1), "ENABLE_SGPR_DISPATCH_ID": (4, 1), "ENABLE_SGPR_FLAT_SCRATCH_INIT": (5, 1),
  "ENABLE_SGPR_PRIVATE_SEGMENT_SIZE": (6, 1), "ENABLE_WAVEFRONT_SIZE32": (10, 1), "USES_DYNAMIC_STACK": (11, 1),
}
RSRC3_BY_TARGET = {"gfx1100": RSRC3_GFX10_PLUS, "gfx942": RSRC3_GFX90A}

def get(word: int, fields: dict[str, tuple[int, int]], name: str) -> int:
  """Extract bit field `name` from `word`."""
  shift, width = fields[name]
  return (word >> shift) & ((1 << width) - 1)

def put(word: int, fields: dict[str, tuple[int, int]], name: str, value: int) -> int:
  """`word` with bit field `name` set to `value` (raises if it does not fit)."""
  shift, width = fields[name]
  if not 0 <= value < (1 << width): raise ValueError(f"{name}: {value} does not fit {width} bits")
  return (word & ~(((1 << width) - 1) << shift)) | (value << shift)

def decode_fields(word: int, fields: dict[str, tuple[int, int]]) -> dict[str, int]:
  return {name: get(word, fields, name) for name in fields}

@dataclass
class KernelDescriptor:
  """A decoded kernel descriptor; rsrc*/properties hold the raw words, *_fields the named fields."""
  group_segment_fixed_size: int
  private_segment_fixed_size: int
  kernarg_size: int
  kernel_code_entry_byte_offset: int
  rsrc1: int
  rsrc2: int
  rsrc3: int
  kernel_code_properties: int
  kernarg_preload: int
  target: str
  rsrc1_fields: dict[str, int] = field(default_factory=dict)
  rsrc2_fields: dict[str, int] = field(default_factory=dict)
  rsrc3_fields: dict[str, int] = field(default_factory=dict)
  properties: dict[str, int] = field(default_factory=dict)

  @property
  def wave32(self) -> bool: return bool(self.properties["ENABLE_WAVEFRONT_SIZE32"])
  @property
  def user_sgpr_count(self) -> int: return self.rsrc2_fields["USER_SGPR_COUNT"]

def decode(data: bytes, target: str) -> KernelDescriptor:
  """Decode 64 descriptor bytes for `target` ("gfx1100" or "gfx942": they read RSRC3 differently)."""
  if len(data) < KD_SIZE: raise ValueError(f"a kernel descriptor is {KD_SIZE} bytes, got {len(data)}")
  if target not in RSRC3_BY_TARGET: raise ValueError(f"unknown target {target!r} (known: {', '.join(RSRC3_BY_TARGET)})")
  g, p, ka, entry, r3, r1, r2, props, preload = _LAYOUT.unpack_from(data)
  kd = KernelDescriptor(g, p, ka, entry, r1, r2, r3, props, preload, target)
  kd.rsrc1_fields, kd.rsrc2_fields = decode_fields(r1, RSRC1), decode_fields(r2, RSRC2)
  kd.rsrc3_fields, kd.properties = decode_fields(r3, RSRC3_BY_TARGET[target]), decode_fields(props, KERNEL_CODE_PROPERTY)
  if kd.wave32 and target == "gfx942": raise ValueError("kernel descriptor asks for wave32, which gfx942 does not run")
  return kd

def encode(kd: KernelDescriptor) -> bytes:
  """The 64 bytes of a descriptor (raw words; the *_fields dicts are not consulted)."""
  return _LAYOUT.pack(kd.group_segment_fixed_size, kd.private_segment_fixed_size, kd.kernarg_size, kd.kernel_code_entry_byte_offset,
                      kd.rsrc3, kd.rsrc1, kd.rsrc2, kd.kernel_code_properties, kd.kernarg_preload)
