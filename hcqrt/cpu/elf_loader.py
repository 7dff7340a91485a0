"""Our own loader for ELF relocatable objects (`.o` from `cc -c -fPIC`), x86-64.

No dlopen: the object is laid out in one anonymous mapping, relocated, and made executable.
Image layout (each part page aligned so it can get its own protection; W^X throughout):
  [ exec: .text*  | PLT stubs ]  -> R+X
  [ read: .rodata* | GOT      ]  -> R     (filled before mprotect, like RELRO)
  [ write: .data* | .bss | COMMON ] -> R+W
External symbols (expf, memcpy, ...) are looked up in the running process (then libm, libgcc_s). They
are usually further than 2 GiB from the image, so 32-bit PC-relative references to them go through a GOT
slot (GOTPCREL*) or an 8-byte stub `jmp *slot(%rip)` (PLT32) inside the image.

  >>> import ctypes, subprocess, tempfile, os
  >>> d = tempfile.mkdtemp(); _ = open(f"{d}/a.c", "w").write("int add1(int x) { return x + 1; }")
  >>> _ = subprocess.run(["cc", "-c", "-O2", "-fPIC", f"{d}/a.c", "-o", f"{d}/a.o"], check=True)
  >>> img = load_elf(open(f"{d}/a.o", "rb").read())
  >>> img.function("add1", [ctypes.c_int], ctypes.c_int)(41)
  42
"""
from __future__ import annotations
import ctypes, io, mmap, struct, weakref
from dataclasses import dataclass
from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_RELOC_TYPE_x64

class ElfLoadError(RuntimeError):
  """The object cannot be loaded (not ELF/ET_REL, wrong machine, unknown relocation, missing symbol...)."""

SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR, SHF_TLS = 0x1, 0x2, 0x4, 0x400
PAGE = mmap.PAGESIZE
STUB_SIZE = 8  # ff 25 <rel32> = jmp *slot(%rip), then 2 bytes int3 padding

# names for messages: pyelftools' table lacks some (GOTPCRELX is 41)
RELOC_NAMES = {v: k for k, v in ENUM_RELOC_TYPE_x64.items() if isinstance(v, int)} | {41: "R_X86_64_GOTPCRELX"}
R_NONE, R_64, R_PC32, R_GOT32, R_PLT32, R_GOTPCREL, R_32, R_32S = 0, 1, 2, 3, 4, 9, 10, 11
R_PC64, R_GOTOFF64, R_GOTPC32, R_GOT64, R_GOTPCREL64, R_GOTPC64, R_GOTPCRELX, R_REX_GOTPCRELX = 24, 25, 26, 27, 28, 29, 41, 42
GOT_TYPES = {R_GOT32, R_GOTPCREL, R_GOT64, R_GOTPCREL64, R_GOTPCRELX, R_REX_GOTPCRELX}
SUPPORTED = {R_NONE, R_64, R_PC32, R_PLT32, R_32, R_32S, R_PC64, R_GOTOFF64, R_GOTPC32, R_GOTPC64} | GOT_TYPES

# ---- libc memory calls (the Python mmap module cannot mprotect)
_libc = ctypes.CDLL(None, use_errno=True)
_mmap, _mprotect, _munmap = _libc.mmap, _libc.mprotect, _libc.munmap
_mmap.restype, _mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_mprotect.restype, _mprotect.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_munmap.restype, _munmap.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]

def _oserror(what: str) -> OSError:
  import os
  e = ctypes.get_errno()
  return OSError(e, f"{what}: {os.strerror(e)}")

# ---- external symbols from the running process
_ext_cache: dict[str, int | None] = {}
_ext_libs: list = [_libc]
_ext_more = ["libm.so.6", "libgcc_s.so.1"]  # opened lazily, only if the process lacks a symbol

def resolve_external(name: str) -> int | None:
  """Address of a C symbol in this process (or libm / libgcc_s), None if nowhere.

  >>> resolve_external("memcpy") != 0
  True
  """
  if name in _ext_cache: return _ext_cache[name]
  addr = None
  while addr is None:
    for lib in _ext_libs:
      try: addr = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value; break
      except AttributeError: pass
    if addr is not None or not _ext_more: break
    try: _ext_libs.append(ctypes.CDLL(_ext_more.pop(0)))
    except OSError: pass
  _ext_cache[name] = addr
  return addr

@dataclass(frozen=True)
class _Sym:
  name: str
  kind: str     # STT_FUNC, STT_OBJECT, STT_SECTION, STT_NOTYPE ...
  bind: str     # STB_LOCAL, STB_GLOBAL, STB_WEAK
  shndx: object # int or 'SHN_UNDEF' / 'SHN_ABS' / 'SHN_COMMON'
  value: int
  size: int

_STT = {0: "STT_NOTYPE", 1: "STT_OBJECT", 2: "STT_FUNC", 3: "STT_SECTION", 4: "STT_FILE", 5: "STT_COMMON", 6: "STT_TLS"}
_STB = {0: "STB_LOCAL", 1: "STB_GLOBAL", 2: "STB_WEAK"}
_SHN = {0: "SHN_UNDEF", 0xfff1: "SHN_ABS", 0xfff2: "SHN_COMMON"}

def _read_symbols(symdata: bytes, strtab: bytes) -> list[_Sym]:
  # Elf64_Sym parsed with struct: pyelftools' per-symbol parsing dominated load time
  out = []
  for name, info, _other, shndx, value, size in struct.iter_unpack("<IBBHQQ", symdata):
    if shndx == 0xffff: raise ElfLoadError("symbol table uses SHN_XINDEX (more than 65279 sections); not supported")
    out.append(_Sym(strtab[name:strtab.index(b"\0", name)].decode(), _STT.get(info & 0xf, f"STT_{info & 0xf}"),
                    _STB.get(info >> 4, f"STB_{info >> 4}"), _SHN.get(shndx, shndx), value, size))
  return out

def _align(x: int, a: int) -> int: return (x + a - 1) & ~(a - 1) if a > 1 else x

class LoadedImage:
  """A relocated object mapped into this process; keep it alive as long as its code may run.

  symbols: name -> absolute address of each defined function/object (global names win over local ones).
  externals: name -> address of each undefined symbol the object uses.
  reloc_counts: relocation type name -> how many were applied (handy for tests and debugging).
  """
  def __init__(self, base: int, size: int, symbols: dict[str, int], externals: dict[str, int], reloc_counts: dict[str, int],
               mapping: tuple[int, int]):
    self.base, self.size, self.symbols, self.externals, self.reloc_counts = base, size, symbols, externals, reloc_counts
    # unmap when the last reference (the image or a function() callable holding it) goes away; not at exit,
    # where other threads may still be running this code. keep_forever() detaches it.
    self._unmap = weakref.finalize(self, _munmap, *mapping)
    self._unmap.atexit = False

  def keep_forever(self) -> None:
    """Never unmap this image (for code that threads outside Python's control may run at any time)."""
    self._unmap.detach()

  def function(self, name: str, argtypes: list, restype=None):
    """A ctypes callable for the symbol `name` (CFUNCTYPE: the GIL is released during the call).

    The callable keeps this image alive.
    """
    if name not in self.symbols: raise ElfLoadError(f"symbol {name!r} not defined in object (defined: {sorted(self.symbols)})")
    fn = ctypes.CFUNCTYPE(restype, *argtypes)(self.symbols[name])
    fn._image = self
    return fn

  def __repr__(self) -> str: return f"<LoadedImage at {self.base:#x} size {self.size:#x} symbols {sorted(self.symbols)}>"

def load_elf(obj: bytes) -> LoadedImage:
  """Lay out, relocate and map an ELF relocatable object; return the executable image."""
  if obj[:4] != b"\x7fELF": raise ElfLoadError(f"not an ELF object (starts with {bytes(obj[:4])!r})")
  elf = ELFFile(io.BytesIO(obj))
  if elf["e_type"] != "ET_REL": raise ElfLoadError(f"expected a relocatable object (ET_REL), got {elf['e_type']}")
  if elf["e_machine"] != "EM_X86_64" or elf.elfclass != 64 or not elf.little_endian:
    raise ElfLoadError(f"unsupported object machine {elf['e_machine']} (ELF{elf.elfclass}); this loader handles x86-64 only")
  sections = list(elf.iter_sections())

  # ---- symbols
  symtab = next((s for s in sections if s["sh_type"] == "SHT_SYMTAB"), None)
  syms = _read_symbols(symtab.data(), sections[symtab["sh_link"]].data()) if symtab is not None else []

  # ---- relocations, parsed with struct (much faster than pyelftools' per-entry parsing)
  relocs = []  # (target section index, offset, type, symbol index, addend, rel section name)
  for rs in sections:
    if rs["sh_type"] == "SHT_REL": raise ElfLoadError(f"{rs.name}: SHT_REL relocations (no addend) are not used on x86-64")
    if rs["sh_type"] != "SHT_RELA" or not sections[rs["sh_info"]]["sh_flags"] & SHF_ALLOC: continue
    for off, info, addend in struct.iter_unpack("<QQq", rs.data()):
      relocs.append((rs["sh_info"], off, info & 0xffffffff, info >> 32, addend, rs.name))
  for _, off, rtype, si, _, rsname in relocs:
    if rtype not in SUPPORTED:
      raise ElfLoadError(f"unsupported x86-64 relocation {RELOC_NAMES.get(rtype, 'unknown')} (type {rtype}) in {rsname} "
                         f"at offset {off:#x} against symbol {syms[si].name or '<section>'!r}; compile with -fPIC "
                         f"and without thread-local storage")

  # ---- which symbols need a GOT slot (GOT relocations; externals) and which a PLT stub (calls to externals)
  undefined = sorted({syms[si].name for _, _, _, si, _, _ in relocs if syms[si].shndx == "SHN_UNDEF" and syms[si].name})
  got_syms = sorted({si for _, _, t, si, _, _ in relocs if t in GOT_TYPES} |
                    {si for _, _, t, si, _, _ in relocs if syms[si].shndx == "SHN_UNDEF" and syms[si].name})
  stub_syms = sorted({si for _, _, t, si, _, _ in relocs if t == R_PLT32 and syms[si].shndx == "SHN_UNDEF"})

  # ---- layout: three page-aligned parts
  alloc = [(i, s) for i, s in enumerate(sections) if s["sh_flags"] & SHF_ALLOC]
  for _, s in alloc:
    if s["sh_flags"] & SHF_TLS: raise ElfLoadError(f"section {s.name}: thread-local storage is not supported")
  kind = lambda s: 0 if s["sh_flags"] & SHF_EXECINSTR else 2 if s["sh_flags"] & SHF_WRITE else 1
  sec_off: dict[int, int] = {}
  maxalign, off = PAGE, 0
  stub_off = got_off = 0
  common_off: dict[int, int] = {}
  for part in range(3):
    off = _align(off, PAGE)
    # NOBITS last within its part so .bss does not sit between initialized sections
    for i, s in sorted((x for x in alloc if kind(x[1]) == part), key=lambda x: x[1]["sh_type"] == "SHT_NOBITS"):
      a = max(1, s["sh_addralign"])
      maxalign = max(maxalign, a)
      off = sec_off[i] = _align(off, a)
      off += s["sh_size"]
    if part == 0: off = stub_off = _align(off, 16); off += STUB_SIZE * len(stub_syms)
    if part == 1: off = got_off = _align(off, 8); off += 8 * len(got_syms)
    if part == 2:
      for si, sym in enumerate(syms):
        if sym.shndx == "SHN_COMMON":  # st_value holds the alignment of a COMMON symbol
          maxalign = max(maxalign, sym.value)
          off = common_off[si] = _align(off, max(1, sym.value)); off += sym.size
  # part ends, for mprotect
  exec_end = _align(stub_off + STUB_SIZE * len(stub_syms), PAGE)
  read_end = _align(max([got_off + 8 * len(got_syms)] + [sec_off[i] + s["sh_size"] for i, s in alloc if kind(s) <= 1]), PAGE)
  size = _align(max(off, read_end, 1), PAGE)

  # ---- map (read/write for now), over-allocating if a section wants more than page alignment
  map_size = size + (maxalign - PAGE if maxalign > PAGE else 0)
  raw = _mmap(None, map_size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
  if raw in (None, ctypes.c_void_p(-1).value): raise _oserror(f"mmap of {map_size} bytes for ELF image")
  base = _align(raw, maxalign)
  try:
    image = bytearray(size)
    for i, s in alloc:
      if s["sh_type"] != "SHT_NOBITS": image[sec_off[i]:sec_off[i] + s["sh_size"]] = s.data()

    # ---- symbol addresses
    got_base = base + got_off
    def sym_addr(si: int) -> int:
      sym = syms[si]
      if isinstance(sym.shndx, int):
        if sym.shndx not in sec_off: raise ElfLoadError(f"symbol {sym.name!r} lives in unloaded section {sections[sym.shndx].name}")
        return base + sec_off[sym.shndx] + sym.value
      if sym.shndx == "SHN_ABS": return sym.value
      if sym.shndx == "SHN_COMMON": return base + common_off[si]
      if sym.name == "_GLOBAL_OFFSET_TABLE_": return got_base
      if not sym.name: return 0  # symbol index 0: the relocation uses only its addend
      if (a := externals.get(sym.name)) is not None: return a
      raise ElfLoadError(f"symbol {sym.name!r} has no address")  # not reached: externals are all resolved below
    externals: dict[str, int] = {}
    for name in undefined:
      if name == "_GLOBAL_OFFSET_TABLE_": continue
      a = resolve_external(name)
      if a is None:
        if any(s.name == name and s.bind == "STB_WEAK" for s in syms): a = 0  # weak undefined -> NULL, as ld does
        else: raise ElfLoadError(f"undefined symbol {name!r} used by the object is not in this process, libm or libgcc_s")
      externals[name] = a
    addrs = [0] * len(syms)
    for si in {r[3] for r in relocs}: addrs[si] = sym_addr(si)

    got_slot = {si: got_base + 8 * k for k, si in enumerate(got_syms)}
    for si, slot in got_slot.items(): struct.pack_into("<Q", image, slot - base, addrs[si] & (2**64 - 1))
    stub = {si: base + stub_off + STUB_SIZE * k for k, si in enumerate(stub_syms)}
    for si, st in stub.items():
      struct.pack_into("<BBiBB", image, st - base, 0xff, 0x25, got_slot[si] - (st + 6), 0xcc, 0xcc)

    # ---- apply relocations
    counts: dict[str, int] = {}
    for tsec, roff, rtype, si, A, rsname in relocs:
      if rtype == R_NONE: continue
      P, S = base + sec_off[tsec] + roff, addrs[si]
      where = sec_off[tsec] + roff
      name = RELOC_NAMES[rtype]
      counts[name] = counts.get(name, 0) + 1
      if rtype in (R_64, R_PC64, R_GOTOFF64, R_GOT64, R_GOTPCREL64, R_GOTPC64):
        v = {R_64: S + A, R_PC64: S + A - P, R_GOTOFF64: S + A - got_base, R_GOT64: got_slot.get(si, 0) - got_base + A,
             R_GOTPCREL64: got_slot.get(si, 0) + A - P, R_GOTPC64: got_base + A - P}[rtype]
        struct.pack_into("<Q", image, where, v & (2**64 - 1))
        continue
      if rtype == R_PC32: v = S + A - P
      elif rtype == R_PLT32: v = (stub[si] if si in stub else S) + A - P
      elif rtype in (R_GOTPCREL, R_GOTPCRELX, R_REX_GOTPCRELX): v = got_slot[si] + A - P
      elif rtype == R_GOTPC32: v = got_base + A - P
      elif rtype == R_GOT32: v = got_slot[si] - got_base + A
      else: v = S + A  # R_32, R_32S: absolute, only fits if the image is in the low 2/4 GiB
      lo, hi = (0, 2**32) if rtype == R_32 else (-2**31, 2**31)
      if not lo <= v < hi:
        raise ElfLoadError(f"relocation {name} in {rsname} at {roff:#x} against {syms[si].name or '<section>'!r}: "
                           f"value {v:#x} out of 32-bit range (external data needs -fPIC so it goes through the GOT)")
      struct.pack_into("<I", image, where, v & 0xffffffff)

    # ---- copy in, then drop write permission on code and constants (W^X)
    ctypes.memmove(base, (ctypes.c_char * size).from_buffer(image), size)
    if exec_end and _mprotect(base, exec_end, mmap.PROT_READ | mmap.PROT_EXEC) != 0: raise _oserror("mprotect R+X of ELF code")
    if read_end > exec_end and _mprotect(base + exec_end, read_end - exec_end, mmap.PROT_READ) != 0: raise _oserror("mprotect R of ELF rodata")
  except BaseException:
    _munmap(raw, map_size)
    raise

  symbols: dict[str, int] = {}
  for si, sym in enumerate(syms):
    if not sym.name or sym.kind not in ("STT_FUNC", "STT_OBJECT") or sym.shndx == "SHN_UNDEF": continue
    if sym.bind == "STB_LOCAL" and sym.name in symbols: continue
    symbols[sym.name] = sym_addr(si)
  return LoadedImage(base, size, symbols, externals, counts, (raw, map_size))
