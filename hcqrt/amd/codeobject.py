"""Read an AMDGPU HSA code object (a relocatable .o as LLVM emits it, or a linked shared object) into one loadable
image: the allocated sections laid out in order, the relocations the descriptor and code need applied, the kernel's
64-byte descriptor and entry offset, and its arguments from the NT_AMDGPU_METADATA note (msgpack).

Facts (LLVM AMDGPUUsage): the descriptor `<name>.kd` holds at byte 16 the signed offset from itself to the kernel's
first instruction, which an object file leaves 0 with an R_AMDGPU_REL64 against the kernel symbol; the code must start
256-byte aligned (COMPUTE_PGM_LO holds address >> 8).
"""
from __future__ import annotations

import io
import struct
from dataclasses import dataclass

R_AMDGPU_ABS64, R_AMDGPU_REL64, R_AMDGPU_REL32_LO, R_AMDGPU_REL32_HI = 3, 5, 10, 11
NT_AMDGPU_METADATA = 32

@dataclass
class CodeObject:
  """`image` is the loadable bytes (offset 0 goes 256-byte aligned in GPU memory); `kd_offset`/`entry` index it."""
  image: bytes
  kd_offset: int
  entry: int
  descriptor: bytes
  params: list[tuple[int, int]]     # (offset, size) of the explicit arguments: pointers first, then values
  kernarg_size: int | None
  metadata: dict
  hidden: dict[str, tuple[int, int]]   # implicit arguments (code object v5 "hidden_*"): value kind -> (offset, size)

def _msgpack(b: bytes, i: int = 0):
  """Decode one msgpack value at b[i] -> (value, next index). Only what code-object metadata uses."""
  t = b[i]
  if t <= 0x7F: return t, i + 1
  if t >= 0xE0: return t - 0x100, i + 1
  if 0x80 <= t <= 0x8F or t in (0xDE, 0xDF):
    n, i = (t & 0xF, i + 1) if t <= 0x8F else (struct.unpack_from(">H" if t == 0xDE else ">I", b, i + 1)[0], i + (3 if t == 0xDE else 5))
    d = {}
    for _ in range(n):
      k, i = _msgpack(b, i); v, i = _msgpack(b, i); d[k] = v
    return d, i
  if 0x90 <= t <= 0x9F or t in (0xDC, 0xDD):
    n, i = (t & 0xF, i + 1) if t <= 0x9F else (struct.unpack_from(">H" if t == 0xDC else ">I", b, i + 1)[0], i + (3 if t == 0xDC else 5))
    out = []
    for _ in range(n):
      v, i = _msgpack(b, i); out.append(v)
    return out, i
  if 0xA0 <= t <= 0xBF: n = t & 0x1F; return b[i + 1:i + 1 + n].decode(), i + 1 + n
  if t in (0xD9, 0xDA, 0xDB):
    w = {0xD9: 1, 0xDA: 2, 0xDB: 4}[t]; n = int.from_bytes(b[i + 1:i + 1 + w], "big")
    return b[i + 1 + w:i + 1 + w + n].decode(), i + 1 + w + n
  if t in (0xC4, 0xC5, 0xC6):
    w = {0xC4: 1, 0xC5: 2, 0xC6: 4}[t]; n = int.from_bytes(b[i + 1:i + 1 + w], "big")
    return bytes(b[i + 1 + w:i + 1 + w + n]), i + 1 + w + n
  if t in (0xC0, 0xC2, 0xC3): return {0xC0: None, 0xC2: False, 0xC3: True}[t], i + 1
  ints = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q", 0xCA: ">f", 0xCB: ">d"}
  if t in ints: return struct.unpack_from(ints[t], b, i + 1)[0], i + 1 + struct.calcsize(ints[t])
  raise ValueError(f"code object metadata: msgpack type byte {t:#x} at {i} is not supported")

def _metadata(elf) -> dict:
  for sec in elf.iter_sections():
    if sec["sh_type"] != "SHT_NOTE": continue
    for n in sec.iter_notes():
      if n["n_name"] == "AMDGPU" and n["n_type"] in (NT_AMDGPU_METADATA, "NT_AMDGPU_METADATA"):
        desc = n["n_descdata"]
        return _msgpack(desc if isinstance(desc, bytes) else desc.encode("latin-1"))[0]
  return {}

def _params(meta: dict, name: str) -> tuple[list[tuple[int, int]], int | None, dict[str, tuple[int, int]]]:
  k = next((k for k in meta.get("amdhsa.kernels", []) if k.get(".name") == name), None)
  if k is None: return [], None, {}
  args = [a for a in k.get(".args", []) if not a.get(".value_kind", "").startswith("hidden_")]
  bufs = [(a[".offset"], a[".size"]) for a in args if a[".value_kind"] == "global_buffer"]
  vals = [(a[".offset"], a[".size"]) for a in args if a[".value_kind"] != "global_buffer"]
  hidden = {a[".value_kind"]: (a[".offset"], a[".size"]) for a in k.get(".args", []) if a.get(".value_kind", "").startswith("hidden_")}
  return bufs + vals, k.get(".kernarg_segment_size"), hidden

def read(lib: bytes, name: str) -> CodeObject:
  """Lay out the code object `lib` and find kernel `name` in it.

  >>> # co = read(open("k.o", "rb").read(), "add"); co.image[co.entry:]  is the machine code
  """
  from elftools.elf.elffile import ELFFile
  elf = ELFFile(io.BytesIO(lib))
  if elf["e_machine"] != "EM_AMDGPU": raise ValueError(f"{name}: not an AMDGPU code object (e_machine {elf['e_machine']})")
  symtab = elf.get_section_by_name(".symtab")
  if symtab is None: raise ValueError(f"{name}: code object has no .symtab")
  syms = list(symtab.iter_symbols())
  by_name = {s.name: s for s in syms}
  if f"{name}.kd" not in by_name:
    raise ValueError(f"{name}: code object has no kernel descriptor {name}.kd (kernels: {sorted(s.name[:-3] for s in syms if s.name.endswith('.kd'))})")
  image = bytearray()
  if elf["e_type"] == "ET_REL":
    base: dict[int, int] = {}   # section index -> offset in the image
    for i, sec in enumerate(elf.iter_sections()):
      if not sec["sh_flags"] & 2 or sec["sh_size"] == 0: continue   # SHF_ALLOC
      off = -(-len(image) // max(sec["sh_addralign"], 256 if sec["sh_flags"] & 4 else 1)) * max(sec["sh_addralign"], 256 if sec["sh_flags"] & 4 else 1)
      image += bytes(off - len(image)); base[i] = off
      image += sec.data() if sec["sh_type"] != "SHT_NOBITS" else bytes(sec["sh_size"])
    def addr(s) -> int:
      if s["st_shndx"] not in base: raise ValueError(f"{name}: symbol {s.name!r} is not in a loaded section")
      return base[s["st_shndx"]] + s["st_value"]
    for sec in elf.iter_sections():
      if sec["sh_type"] not in ("SHT_RELA", "SHT_REL") or sec["sh_info"] not in base: continue
      tgt = base[sec["sh_info"]]
      for r in sec.iter_relocations():
        S, P = addr(syms[r["r_info_sym"]]), tgt + r["r_offset"]
        A = r["r_addend"] if r.is_RELA() else 0
        t = r["r_info_type"]
        if t == R_AMDGPU_REL64: struct.pack_into("<q", image, P, S + A - P)
        elif t == R_AMDGPU_REL32_LO: struct.pack_into("<I", image, P, (S + A - P) & 0xFFFFFFFF)
        elif t == R_AMDGPU_REL32_HI: struct.pack_into("<I", image, P, ((S + A - P) >> 32) & 0xFFFFFFFF)
        else: raise ValueError(f"{name}: relocation type {t} at {sec.name}+{r['r_offset']:#x} is not supported by the loader "
                               "(absolute relocations need the load address; LLVM emits REL64/REL32 for kernels)")
    kd_off = addr(by_name[f"{name}.kd"])
  else:
    loads = [s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
    image = bytearray(max(s["p_vaddr"] + s["p_memsz"] for s in loads))
    for s in loads: image[s["p_vaddr"]:s["p_vaddr"] + s["p_filesz"]] = s.data()
    kd_off = by_name[f"{name}.kd"]["st_value"]
  desc = bytes(image[kd_off:kd_off + 64])
  entry = kd_off + struct.unpack_from("<q", desc, 16)[0]
  if not 0 <= entry < len(image) or entry % 256:
    raise ValueError(f"{name}: kernel entry at image offset {entry:#x} is outside the image or not 256-byte aligned")
  meta = _metadata(elf)
  params, kernarg_size, hidden = _params(meta, name)
  return CodeObject(bytes(image), kd_off, entry, desc, params, kernarg_size, meta, hidden)
