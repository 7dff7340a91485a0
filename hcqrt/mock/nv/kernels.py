"""How the mock GPU "runs" machine code: it recognises the kernel at a program address by its SASS bytes.

The backend uploads a real cubin's relocated image and puts the entry address in the QMD; it never tells
the mock what it loaded. The mock reads the code at that address and looks it up among the cubins the
PTX assembler produced in this process (the assembler records sha256(cubin) -> PTX of its last PTX_OF_CUBIN_MAX
cubins, which this index learns at its next miss and keeps; the cubin itself is fetched again through the assembler's
disk cache), then runs that kernel's PTX with the interpreter.

The launch facts the mock checks a QMD against (registers, shared memory, barriers, stack, where the
parameters live) are read here from the cubin with pyelftools, independently of the backend's loader
(hcqrt/nv/cubin.py): a loader bug must not pass both sides.
"""
from __future__ import annotations
import hashlib, io, re, struct
from dataclasses import dataclass
from collections.abc import Callable
from elftools.elf.elffile import ELFFile
from hcqrt.mock.ptx import PTXModule

PREFIX = 64   # bytes of code used as the first lookup key (kernels share prologues, so matches are verified in full)

# .nv.info attribute codes (EIATTR_*, numbered as in nvlink's table) and record formats (EIFMT_*)
_FRAME_SIZE, _MIN_STACK, _MAX_STACK, _REGCOUNT = 0x11, 0x12, 0x23, 0x2F
_PARAM_CBANK, _CBANK_PARAM_SIZE, _NUM_BARRIERS = 0x0A, 0x19, 0x4C
_NVAL, _BVAL, _HVAL, _SVAL = 1, 2, 3, 4

@dataclass
class KernelFacts:
  """What a launch of one kernel needs (bytes unless said otherwise)."""
  registers: int
  param_offset: int        # parameters start here in constant bank 0
  param_size: int
  shared_static: int       # .nv.shared.<kernel> size
  barriers: int
  stack: int               # per-thread local memory (stack frame, spills, local arrays)

@dataclass
class KnownKernel:
  name: str
  text: bytes
  ptx: str
  facts: KernelFacts

def _nvinfo(data: bytes) -> list[tuple[int, int, bytes | int]]:
  out, i = [], 0
  while i + 4 <= len(data):
    fmt, attr, v = data[i], data[i + 1], struct.unpack_from("<H", data, i + 2)[0]
    if fmt == _SVAL: out.append((fmt, attr, data[i + 4:i + 4 + v])); i += 4 + v
    else: out.append((fmt, attr, v)); i += 4
  return out

def cubin_facts(cubin: bytes) -> dict[str, tuple[bytes, KernelFacts]]:
  """kernel name -> (its code bytes, its launch facts), read straight from the cubin's sections."""
  elf = ELFFile(io.BytesIO(cubin))
  secs = {s.name: s for s in elf.iter_sections()}
  syms = list(secs[".symtab"].iter_symbols()) if ".symtab" in secs else []
  per_sym: dict[int, dict[int, int]] = {}
  if ".nv.info" in secs:
    for fmt, attr, v in _nvinfo(secs[".nv.info"].data()):
      if fmt == _SVAL and isinstance(v, bytes) and len(v) >= 8:
        sidx, val = struct.unpack_from("<II", v)
        per_sym.setdefault(sidx, {})[attr] = val
  out = {}
  for sidx, sym in enumerate(syms):
    text = secs.get(f".text.{sym.name}")
    if sym["st_info"]["type"] != "STT_FUNC" or text is None: continue
    mod, regs_hint = per_sym.get(sidx, {}), text["sh_info"] >> 24
    poff = psize = barriers = 0
    for _fmt, attr, v in (_nvinfo(secs[f".nv.info.{sym.name}"].data()) if f".nv.info.{sym.name}" in secs else []):
      if attr == _PARAM_CBANK and isinstance(v, bytes): _, poff, psize = struct.unpack_from("<IHH", v)
      elif attr == _CBANK_PARAM_SIZE and isinstance(v, int): psize = v
      elif attr == _NUM_BARRIERS and isinstance(v, int): barriers = v
    shared = secs[f".nv.shared.{sym.name}"]["sh_size"] if f".nv.shared.{sym.name}" in secs else 0
    code = text.data()[sym["st_value"]:sym["st_value"] + (sym["st_size"] or text["sh_size"])]
    out[sym.name] = (code, KernelFacts(registers=mod.get(_REGCOUNT, regs_hint), param_offset=poff, param_size=psize, shared_static=shared,
                                       barriers=barriers, stack=max(mod.get(_MIN_STACK, 0), mod.get(_FRAME_SIZE, 0), mod.get(_MAX_STACK, 0))))
  return out

class KernelIndex:
  """Code bytes -> (PTX module, kernel name). `find(read)` is given a reader of GPU memory at the program address."""
  def __init__(self):
    self._seen: set[str] = set()
    self._by_prefix: dict[bytes, list[KnownKernel]] = {}
    self._modules: dict[str, PTXModule] = {}
    self._next_globals = 0x1_0000_0000_0000   # module .global data above any address our VA space hands out

  def _refresh(self) -> None:
    from compiler.assemble import ptx_assembler as pa
    for sha, ptx in pa.assembled():
      if sha in self._seen: continue
      self._seen.add(sha)
      m = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, re.M)
      if m is None: continue
      try: cubin = pa.assemble_ptx(ptx, m.group(1))   # a disk-cache hit for what was assembled before
      except Exception: continue
      if hashlib.sha256(cubin).hexdigest() != sha: continue   # assembled for another arch than its .target
      self.add_cubin(cubin, ptx)

  def add_cubin(self, cubin: bytes, ptx: str) -> None:
    """Teach the index one cubin and the PTX it came from."""
    for name, (text, facts) in cubin_facts(cubin).items():
      self._by_prefix.setdefault(text[:PREFIX], []).append(KnownKernel(name, text, ptx, facts))

  def find(self, read: Callable[[int], bytes], cb0_size: int | None = None) -> KnownKernel | None:
    """The known kernel whose code is at the program address. Two PTX kernels can assemble to the same machine code
    (ptxas drops a load whose value is unused, e.g. of `x & 0`, and then `E_5(out, x)` is `zeros(out)`); the hardware
    runs the code, so every match behaves the same there, but their PTX differ in the work ptxas removed. The match
    whose parameters fit the bound constant buffer and that has the fewest parameters and loads is the PTX closest to
    the code: interpreting another could read a parameter the launch never set and fault where the GPU does not."""
    for attempt in range(2):
      head = read(PREFIX)
      found = [kk for kk in self._by_prefix.get(head, []) if len(kk.text) <= PREFIX or read(len(kk.text)) == kk.text]
      if found:
        fits = [kk for kk in found if cb0_size is None or kk.facts.param_offset + kk.facts.param_size <= cb0_size] or found
        return min(fits, key=lambda kk: (kk.facts.param_size, len(re.findall(r"\bld\.", kk.ptx))))
      if attempt == 0: self._refresh()
    return None

  def module(self, kk: KnownKernel) -> PTXModule:
    if (m := self._modules.get(kk.ptx)) is None:
      m = self._modules[kk.ptx] = PTXModule(kk.ptx, globals_va=self._next_globals)
      self._next_globals += 1 << 36
    return m

INDEX = KernelIndex()
