"""Cubin loader: read an NVIDIA cubin (CUDA ELF) into one relocatable image plus each kernel's launch facts.

The image holds every loadable global-memory section (code, constant banks, globals) laid out with its
alignment; the NV backend copies it to GPU memory and calls relocate() with the address it landed at.
Shared-memory sections (.nv.shared.*) only contribute sizes: shared memory is per block, not in the image.
Facts (codes, formats, where things live) follow ../shared/abi/nvidia_cubin.json (nvcc/ptxas 13.0).

For example (a cubin from ptxas; tests/runtime/test_cubin_loader.py runs this on real ones), after
`img = load_cubin(open("k.cubin", "rb").read(), base_va=0x7f0000000000)`, `img.kernels["add1"]` gives the registers
(10), the parameters' offset in constant bank 0 (0x210) and each parameter's (index, offset, size).
"""
from __future__ import annotations
import io, re, struct
from dataclasses import dataclass, field
from elftools.elf.elffile import ELFFile

EM_CUDA = 190
ELFOSABI_CUDA_V1 = 0x33   # older toolkits: EI_ABIVERSION 7, SM number in e_flags bits 7:0
ELFOSABI_CUDA_V2 = 0x41   # nvcc/ptxas 13.0: EI_ABIVERSION 8, SM number in e_flags bits 15:8

# .nv.info record formats: u8 format, u8 attribute, u16 value (or payload length for SVAL)
EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4

# EIATTR codes (nvidia_cubin.json eiattr_codes; a test checks each name against its number)
EIATTR_MAX_THREADS = 0x05
EIATTR_PARAM_CBANK = 0x0a
EIATTR_EXTERNS = 0x0f
EIATTR_REQNTID = 0x10
EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_KPARAM_INFO = 0x17
EIATTR_CBANK_PARAM_SIZE = 0x19
EIATTR_MAXREG_COUNT = 0x1b
EIATTR_EXIT_INSTR_OFFSETS = 0x1c
EIATTR_MAX_STACK_SIZE = 0x23
EIATTR_REGCOUNT = 0x2f
EIATTR_CTA_PER_CLUSTER = 0x3d
EIATTR_NUM_BARRIERS = 0x4c

# R_CUDA relocation types (nvidia_cubin.json relocation_codes)
R_CUDA_NONE = 0x00
R_CUDA_32 = 0x01
R_CUDA_64 = 0x02
R_CUDA_G32 = 0x03
R_CUDA_G64 = 0x04
R_CUDA_ABS32_LO_32 = 0x38
R_CUDA_ABS32_HI_32 = 0x39

# bytes of system-reserved shared memory nvcc 13.0 counts inside .nv.shared.<kernel> on sm_90 and newer
# (the JSON: "user bytes + 0x400"); sm_8x cubins count only the user's bytes
RESERVED_SHARED_SM90 = 0x400

SHT_PROGBITS, SHT_NOBITS, SHT_RELA, SHT_REL = 1, 8, 4, 9
SHF_ALLOC = 0x2
SHN_UNDEF = 0

class CubinError(ValueError):
  """The cubin is malformed or uses something this loader does not handle."""

@dataclass
class CubinKernel:
  """Launch facts of one kernel (all offsets are bytes)."""
  name: str
  text_offset: int                      # entry point, relative to the image start
  text_size: int
  registers: int                        # per thread
  param_cbank_offset: int               # where parameters start in constant bank 0
  param_size: int
  params: list[tuple[int, int, int]]    # (ordinal, offset in the parameter block, size), by ordinal
  shared_static: int                    # .nv.shared.<name> size: what the block needs for static shared memory
  local_bytes: int                      # per-thread local memory (stack + frame) the launch must provide
  max_threads: int | None               # x*y*z of .maxntid / __launch_bounds__
  reqntid: tuple[int, int, int] | None  # .reqntid
  const_banks: dict[int, tuple[int, int]]   # bank -> (image offset, size); bank 0 is the template with params
  shared_reserved: int = 0              # part of shared_static that is the system-reserved window (sm_90+)
  num_barriers: int = 0
  max_regs: int | None = None           # EIATTR_MAXREG_COUNT (register cap the compiler honoured)

@dataclass
class Reloc:
  """One relocation, resolved to image offsets so it can be re-applied for any base address."""
  offset: int          # image offset patched
  type: int            # R_CUDA_*
  sym_offset: int | None   # image offset of the symbol; None for an absolute (undefined weak) symbol
  addend: int
  sym: str

@dataclass
class CubinImage:
  """A cubin laid out as one image, relocated to run at base_va."""
  arch: int                             # SM number, e.g. 90
  image: bytearray
  kernels: dict[str, CubinKernel]
  sections: dict[str, tuple[int, int]]  # loadable section name -> (image offset, size)
  symbols: dict[str, tuple[int, int]] = field(default_factory=dict)   # data/function symbol -> (offset, size)
  relocs: list[Reloc] = field(default_factory=list)
  align: int = 1                        # base_va must be a multiple of this
  base_va: int = 0

def _round_up(x: int, a: int) -> int: return (x + a - 1) // a * a

def parse_nvinfo(data: bytes) -> list[tuple[int, int, int | bytes]]:
  """Records of a .nv.info section as (format, attribute, value) with bytes as the value for SVAL.

    >>> parse_nvinfo(bytes([3, 0x19, 8, 0, 4, 0x2f, 8, 0]) + (5).to_bytes(4, "little") + (14).to_bytes(4, "little"))
    [(3, 25, 8), (4, 47, b'\\x05\\x00\\x00\\x00\\x0e\\x00\\x00\\x00')]
  """
  out, i = [], 0
  while i + 4 <= len(data):
    fmt, attr, v = struct.unpack_from("<BBH", data, i)
    if fmt == EIFMT_SVAL:
      if i + 4 + v > len(data): raise CubinError(f".nv.info record attr 0x{attr:x} overruns its section")
      out.append((fmt, attr, data[i+4:i+4+v])); i += 4 + v
    elif fmt in (EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL):
      out.append((fmt, attr, v)); i += 4
    else: raise CubinError(f".nv.info record at byte {i} has unknown format {fmt} (attr 0x{attr:x})")
  return out

def decode_param_cbank(payload: bytes) -> tuple[int, int]:
  """EIATTR_PARAM_CBANK payload (u32 cbank0 section symbol, u16 offset, u16 size) -> (offset, size).

    >>> decode_param_cbank(bytes.fromhex("2500000010020800"))
    (528, 8)
  """
  _, off, size = struct.unpack_from("<IHH", payload)
  return off, size

def decode_kparam_info(payload: bytes) -> list[tuple[int, int, int]]:
  """EIATTR_KPARAM_INFO payload (12 bytes a parameter) -> [(ordinal, offset, size)]; size is flag bits 31:18.

    >>> decode_kparam_info(bytes.fromhex("000000000200100000f01100"))
    [(2, 16, 4)]
  """
  out = []
  for j in range(0, len(payload) - 11, 12):
    _, ordinal, off, flags = struct.unpack_from("<IHHI", payload, j)
    out.append((ordinal, off, flags >> 18))
  return out

def _u32s(b: bytes) -> tuple[int, ...]: return struct.unpack(f"<{len(b)//4}I", b[:len(b)//4*4])

def _patch(image: bytearray, r: Reloc, base_va: int) -> None:
  value = (0 if r.sym_offset is None else base_va + r.sym_offset) + r.addend
  if r.type in (R_CUDA_64, R_CUDA_G64): struct.pack_into("<Q", image, r.offset, value & (2**64 - 1))
  elif r.type in (R_CUDA_32, R_CUDA_G32):
    if value >> 32: raise CubinError(f"R_CUDA_32 against {r.sym}: address 0x{value:x} does not fit 32 bits")
    struct.pack_into("<I", image, r.offset, value)
  # the 32-bit immediate of a 64-bit instruction word sits in bytes 4..7 (JSON: inferred, not observed)
  elif r.type == R_CUDA_ABS32_LO_32: struct.pack_into("<I", image, r.offset + 4, value & 0xffffffff)
  elif r.type == R_CUDA_ABS32_HI_32: struct.pack_into("<I", image, r.offset + 4, (value >> 32) & 0xffffffff)
  elif r.type != R_CUDA_NONE: raise CubinError(f"unsupported relocation type 0x{r.type:x} against {r.sym}")

def _implicit_addend(data: bytes, off: int, rtype: int) -> int:
  # SHT_REL (sm_8x) keeps the addend in the patched field itself
  if rtype in (R_CUDA_64, R_CUDA_G64): return struct.unpack_from("<Q", data, off)[0]
  if rtype in (R_CUDA_32, R_CUDA_G32, R_CUDA_ABS32_LO_32): return struct.unpack_from("<I", data, off + (4 if rtype == R_CUDA_ABS32_LO_32 else 0))[0]
  if rtype == R_CUDA_ABS32_HI_32: return struct.unpack_from("<I", data, off + 4)[0] << 32
  return 0

def relocate(image: CubinImage, base_va: int) -> None:
  """Re-apply all relocations so the image runs at `base_va` (call after placing it in GPU memory)."""
  if base_va % image.align: raise CubinError(f"base_va 0x{base_va:x} is not aligned to {image.align}")
  for r in image.relocs: _patch(image.image, r, base_va)
  image.base_va = base_va

def load_cubin(data: bytes, base_va: int = 0) -> CubinImage:
  """Parse a cubin and return its image relocated to run at `base_va`, plus each kernel's launch facts."""
  if data[:4] != b"\x7fELF": raise CubinError("not an ELF file (cubin expected)")
  elf = ELFFile(io.BytesIO(data))
  if elf["e_machine"] not in ("EM_CUDA", EM_CUDA): raise CubinError(f"e_machine {elf['e_machine']} is not EM_CUDA ({EM_CUDA})")
  osabi, flags = data[7], elf["e_flags"]
  if osabi == ELFOSABI_CUDA_V2: arch = (flags >> 8) & 0xff
  elif osabi == ELFOSABI_CUDA_V1: arch = flags & 0xff
  else: raise CubinError(f"unknown cubin EI_OSABI 0x{osabi:x} (expected 0x41 or 0x33)")
  secs = list(elf.iter_sections())

  # layout: global-memory sections in file order, each at its alignment
  img = CubinImage(arch=arch, image=bytearray(), kernels={}, sections={})
  sec_off: dict[int, int] = {}
  for i, s in enumerate(secs):
    if not (s["sh_flags"] & SHF_ALLOC) or s["sh_type"] not in ("SHT_PROGBITS", "SHT_NOBITS"): continue
    if s.name.startswith(".nv.shared."): continue   # per-block shared memory, not global memory
    a = max(1, s["sh_addralign"])
    off = _round_up(len(img.image), a)
    img.image += bytes(off - len(img.image))
    img.image += s.data() if s["sh_type"] == "SHT_PROGBITS" else bytes(s["sh_size"])
    sec_off[i], img.sections[s.name], img.align = off, (off, s["sh_size"]), max(img.align, a)
  pristine = bytes(img.image)

  symtab = elf.get_section_by_name(".symtab")
  syms = list(symtab.iter_symbols()) if symtab is not None else []
  for sym in syms:
    shn = sym["st_shndx"]
    if sym["st_info"]["type"] in ("STT_OBJECT", "STT_FUNC") and isinstance(shn, int) and shn in sec_off:
      img.symbols[sym.name] = (sec_off[shn] + sym["st_value"], sym["st_size"])

  def sym_target(idx: int) -> tuple[int | None, str]:
    sym = syms[idx]
    shn = sym["st_shndx"]
    if shn == "SHN_UNDEF" or shn == SHN_UNDEF:
      if sym["st_info"]["bind"] == "STB_WEAK": return None, sym.name   # undefined weak resolves to 0
      raise CubinError(f"relocation against undefined symbol {sym.name!r} (external calls like printf are not supported)")
    if shn == "SHN_ABS": return None, sym.name
    if shn not in sec_off: raise CubinError(f"relocation against {sym.name!r} in non-loadable section {secs[shn].name}")
    return sec_off[shn] + sym["st_value"], sym.name

  for s in secs:
    if s["sh_type"] not in ("SHT_REL", "SHT_RELA") or s["sh_info"] not in sec_off: continue   # e.g. .rel.debug_frame
    base = sec_off[s["sh_info"]]
    for rel in s.iter_relocations():
      rtype, off = rel["r_info_type"], base + rel["r_offset"]
      if rtype not in (R_CUDA_NONE, R_CUDA_32, R_CUDA_64, R_CUDA_G32, R_CUDA_G64, R_CUDA_ABS32_LO_32, R_CUDA_ABS32_HI_32):
        raise CubinError(f"unsupported relocation type 0x{rtype:x} in {s.name} at offset 0x{rel['r_offset']:x}")
      addend = rel["r_addend"] if s["sh_type"] == "SHT_RELA" else _implicit_addend(pristine, off, rtype)
      sym_off, name = sym_target(rel["r_info_sym"])
      img.relocs.append(Reloc(off, rtype, sym_off, addend, name))

  # module-wide .nv.info: per-function records keyed by symbol index
  modinfo: dict[int, dict[int, int]] = {}
  if (s := elf.get_section_by_name(".nv.info")) is not None:
    for fmt, attr, v in parse_nvinfo(s.data()):
      if fmt == EIFMT_SVAL and len(v) >= 8 and attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE, EIATTR_MAX_STACK_SIZE):
        sidx, val = struct.unpack_from("<II", v)
        modinfo.setdefault(sidx, {})[attr] = val

  by_name = {s.name: (i, s) for i, s in enumerate(secs)}
  for sidx, sym in enumerate(syms):
    if sym["st_info"]["type"] != "STT_FUNC" or sym["st_info"]["bind"] != "STB_GLOBAL": continue
    name = sym.name
    if (t := by_name.get(f".text.{name}")) is None or t[0] != sym["st_shndx"]: continue
    tidx, text = t
    info = parse_nvinfo(by_name[f".nv.info.{name}"][1].data()) if f".nv.info.{name}" in by_name else []
    k = CubinKernel(name=name, text_offset=sec_off[tidx] + sym["st_value"], text_size=sym["st_size"] or text["sh_size"],
                    registers=0, param_cbank_offset=0, param_size=0, params=[], shared_static=0, local_bytes=0,
                    max_threads=None, reqntid=None, const_banks={})
    cbank, cbank_size = None, None
    for fmt, attr, v in info:
      if attr == EIATTR_PARAM_CBANK and fmt == EIFMT_SVAL: cbank = decode_param_cbank(v)
      elif attr == EIATTR_CBANK_PARAM_SIZE: cbank_size = v
      elif attr == EIATTR_KPARAM_INFO and fmt == EIFMT_SVAL: k.params += decode_kparam_info(v)
      elif attr == EIATTR_MAX_THREADS and fmt == EIFMT_SVAL: x, y, z = _u32s(v)[:3]; k.max_threads = x * y * z
      elif attr == EIATTR_REQNTID and fmt == EIFMT_SVAL: k.reqntid = tuple(_u32s(v)[:3])
      elif attr == EIATTR_NUM_BARRIERS: k.num_barriers = v
      elif attr == EIATTR_MAXREG_COUNT: k.max_regs = v
    k.params.sort()
    for sname, (off, size) in img.sections.items():
      if (m := re.fullmatch(r"\.nv\.constant(\d+)(?:\.(.+))?", sname)) and \
         (m.group(2) == name or (m.group(2) is None and int(m.group(1)) not in k.const_banks)):
        k.const_banks[int(m.group(1))] = (off, size)   # a kernel's own bank wins over a module-wide one
    if cbank is not None: k.param_cbank_offset, k.param_size = cbank
    # a kernel without parameters has no PARAM_CBANK; its bank 0 then ends where parameters would start
    elif 0 in k.const_banks: k.param_cbank_offset = k.const_banks[0][1]
    if cbank_size is not None: k.param_size = cbank_size
    mi = modinfo.get(sidx, {})
    # sm_8x also encodes the register count in bits 31:24 of the text section's sh_info
    k.registers = mi.get(EIATTR_REGCOUNT, text["sh_info"] >> 24)
    k.local_bytes = max(mi.get(EIATTR_MIN_STACK_SIZE, 0), mi.get(EIATTR_FRAME_SIZE, 0), mi.get(EIATTR_MAX_STACK_SIZE, 0))
    if (sh := by_name.get(f".nv.shared.{name}")) is not None:
      k.shared_static = sh[1]["sh_size"]
      # nvcc 13 marks the sm_90+ convention with a .nv.shared.reserved.* section and counts 1 KiB in the size
      if any(n.startswith(".nv.shared.reserved.") for n in by_name) and k.shared_static >= RESERVED_SHARED_SM90:
        k.shared_reserved = RESERVED_SHARED_SM90
    img.kernels[name] = k

  relocate(img, base_va)
  return img
