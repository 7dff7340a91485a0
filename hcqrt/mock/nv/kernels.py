"""How the mock GPU "runs" machine code: it recognises the kernel at a program address by its SASS bytes.

The backend uploads a real cubin's relocated image and puts the entry address in the QMD; it never tells
the mock what it loaded. The mock reads the code at that address and looks it up among the cubins the
PTX assembler produced in this process (the assembler records sha256(cubin) -> PTX; the cubin itself is
fetched again through the assembler's disk cache), then runs that kernel's PTX with the interpreter.
"""
from __future__ import annotations
import hashlib, re
from dataclasses import dataclass
from typing import Callable
from hcqrt.nv.cubin import load_cubin, CubinKernel
from hcqrt.mock.ptx import PTXModule

PREFIX = 64   # bytes of code used as the first lookup key (kernels share prologues, so matches are verified in full)

@dataclass
class KnownKernel:
  name: str
  text: bytes
  ptx: str
  facts: CubinKernel

class KernelIndex:
  """Code bytes -> (PTX module, kernel name). `find(read)` is given a reader of GPU memory at the program address."""
  def __init__(self):
    self._seen: set[str] = set()
    self._by_prefix: dict[bytes, list[KnownKernel]] = {}
    self._modules: dict[str, PTXModule] = {}
    self._next_globals = 0x1_0000_0000_0000   # module .global data above any address our VA space hands out

  def _refresh(self) -> None:
    from compiler.assemble import ptx_assembler as pa
    known: dict[str, str] = getattr(pa, "_ptx_of_cubin", {})
    for sha, ptx in list(known.items()):
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
    img = load_cubin(cubin)
    for name, k in img.kernels.items():
      text = bytes(img.image[k.text_offset:k.text_offset + k.text_size])
      self._by_prefix.setdefault(text[:PREFIX], []).append(KnownKernel(name, text, ptx, k))

  def find(self, read: Callable[[int], bytes]) -> KnownKernel | None:
    for attempt in range(2):
      head = read(PREFIX)
      for kk in self._by_prefix.get(head, []):
        if len(kk.text) <= PREFIX or read(len(kk.text)) == kk.text: return kk
      if attempt == 0: self._refresh()
    return None

  def module(self, kk: KnownKernel) -> PTXModule:
    if (m := self._modules.get(kk.ptx)) is None:
      m = self._modules[kk.ptx] = PTXModule(kk.ptx, globals_va=self._next_globals)
      self._next_globals += 1 << 36
    return m

INDEX = KernelIndex()
