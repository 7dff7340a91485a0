"""Per-XCC L2 caches of a gfx942 dispatch spread over several XCCs (MI300X: 8 XCCs, each with its own L2).

What the hardware does (LLVM AMDGPUUsage, "Memory Model GFX942"): an agent may have "groups of CUs ... each sharing
separate L2 caches"; to make local-memory writes of one L2 visible to CUs of another, the writer must write its dirty
lines back (`buffer_wbl2`, which LLVM emits as `buffer_wbl2 sc1` for an agent-scope release and `sc0 sc1` for a
system-scope one: table "AMDHSA Memory Model Code Sequences GFX940, GFX941, GFX942", fence release agent/system).
A workgroup-scope release emits no write-back: a workgroup's waves share one L2. After the kernel the CP applies the
AQL packet's release fence, which makes the dispatch's stores "visible in all the scopes specified by the release
fence" (ROCR:inc/hsa.h, hsa_packet_header_t HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE); our backend's packets release
at system scope (ioctl_defs/amd/aql.py kernel_dispatch), so kernels need no `buffer_wbl2` before `s_endpgm`.

The model, the harmful minimum: a global/flat store from a wave on XCC k stays dirty in XCC k's L2, so loads on any
other XCC still read the value last written back, until XCC k executes a `buffer_wbl2` with sc1 set or the dispatch
ends. Loads on XCC k see XCC k's own dirty bytes. Stores with sc1 (agent/system-scope atomic stores, same table) and
atomics (performed at the coherence point: device-scope atomics need no scope bit, same table) are visible at once.
The other bits change nothing here: sc0 alone is workgroup scope (one L2), nt=1 the nontemporal hint of plain stores
and loads (same table, "!volatile & nontemporal"), and a load's sc bits (agent/system-scope atomic loads) read what
was written back, which every load here does.

Not modelled: a packet whose release scope is NONE, which leaves the lines dirty past the dispatch (the model ends
with the dispatch, as if every packet released at agent scope or wider; the AQL processor refuses such a packet on
several XCCs, aql.py). Stale *clean* lines in the L2: probes invalidate local-memory (MTYPE RW) copies when another
L2 writes back (AMDGPUUsage, same section: "Any local memory cache lines will be automatically invalidated by writes
from CUs associated with other L2 caches"), so there `buffer_inv sc1` matters only for non-local (NC) lines, which
the mock does not tell apart. The per-CU vector L1 above the L2, which is not coherent for any memory type, keeps
stale lines until `buffer_inv`: gfx9/l1.py models it, so a missing acquire is caught there (audit x30 row 2).

Memory is written through (it always holds the newest bytes), and each byte some XCC holds dirty remembers the value
the other XCCs see (the written-back one): a write-back only forgets the dirty marks, and the end of the dispatch
forgets the whole model. Code that bypasses the model (SMEM, wide scratch, atomics) therefore sees the newest bytes.
"""
from __future__ import annotations
import numpy as np
from hcqrt.mock.amd.rdna3.memory import FlatMemory

class XccL2:
  """The dirty bytes of each XCC's L2 over `mem` (a FlatMemory) during one dispatch.

  >>> m = FlatMemory(); buf = np.zeros(16, np.uint8); m.map(0x1000, buf); l2 = XccL2(m, 2)
  >>> a = np.array([0x1000], np.uint64); l2.write(a, np.array([[7, 7, 7, 7]], np.uint8), np.array([0]))
  >>> l2.read(a, 4, np.array([0]))[0].tolist(), l2.read(a, 4, np.array([1]))[0].tolist()
  ([7, 7, 7, 7], [0, 0, 0, 0])
  >>> l2.writeback(np.array([0])); l2.read(a, 4, np.array([1]))[0].tolist()
  [7, 7, 7, 7]
  """
  def __init__(self, mem: FlatMemory, num_xcc: int):
    self.mem, self.num_xcc = mem, num_xcc
    # per mapped buffer (by id): owner byte map (0 clean, k + 1 dirty in XCC k's L2) and the written-back bytes under
    # the dirty ones; both allocated zeroed (lazily backed pages) the first time the buffer is stored to
    self.owner: dict[int, np.ndarray] = {}
    self.clean: dict[int, np.ndarray] = {}

  def read(self, addrs: np.ndarray, nbytes: int, xcc: np.ndarray, what: str = "load") -> np.ndarray:
    """`nbytes` at each address as XCC `xcc[i]` sees them: memory, except bytes another XCC holds dirty."""
    out = self.mem.read(addrs, nbytes, what)
    if not self.owner: return out
    for m, buf, offs in self.mem._locate(addrs, nbytes, what):
      if (own := self.owner.get(id(buf))) is None: continue
      x = xcc[m].astype(np.int64) + 1
      if (words := _words(own, offs, nbytes)) is not None:   # the usual case: whole dwords, clean or this XCC's own
        o = own.view(np.uint32)[words]
        if not ((o != 0) & (o != (x * 0x01010101).astype(np.uint32)[:, None])).any(): continue
      b = offs.astype(np.int64)[:, None] + np.arange(nbytes)
      o = own[b]
      hidden = (o != 0) & (o != x[:, None])
      if hidden.any(): out[m] = np.where(hidden, self.clean[id(buf)][b], out[m])
    return out

  def write(self, addrs: np.ndarray, data: np.ndarray, xcc: np.ndarray, what: str = "store", publish: bool = False) -> None:
    """Store rows of `data` from XCC `xcc[i]`: dirty in that XCC's L2 (`publish`: visible to every XCC at once)."""
    nbytes = data.shape[1]
    for m, buf, offs in self.mem._locate(addrs, nbytes, what):
      if not buf.flags.writeable: break   # (mem.write below names the fault)
      key = id(buf)
      if key not in self.owner:
        if publish: continue
        self.owner[key], self.clean[key] = np.zeros(len(buf), np.uint8), np.zeros(len(buf), np.uint8)
      own, clean = self.owner[key], self.clean[key]
      x = xcc[m].astype(np.int64) + 1
      # a byte clean so far, or dirty in another XCC (a race: that XCC's line is taken as written back first), keeps
      # the bytes memory holds now as what the other XCCs see; whole aligned dwords (the usual store) at once
      if (words := _words(own, offs, nbytes)) is not None:
        own, clean, idx, x = own.view(np.uint32), clean.view(np.uint32), words, (x * 0x01010101).astype(np.uint32)
        src = buf.view(np.uint32)
      else: idx, src = offs.astype(np.int64)[:, None] + np.arange(nbytes), buf
      if publish: own[idx] = 0; continue
      fresh = own[idx] != x[:, None]
      if fresh.any(): clean[idx[fresh]] = src[idx[fresh]]
      own[idx] = x[:, None]
    self.mem.write(addrs, data, what)

  def writeback(self, xccs: np.ndarray) -> None:
    """`buffer_wbl2 sc1` on these XCCs: their dirty bytes reach memory, where every XCC sees them."""
    for own in self.owner.values():
      for k in np.unique(xccs): own[own == k + 1] = 0

def _words(own: np.ndarray, offs: np.ndarray, nbytes: int) -> np.ndarray | None:
  """Dword indices (rows of nbytes // 4) when every access is whole aligned dwords of a buffer a whole number of dwords
  long, else None (byte by byte)."""
  if nbytes % 4 or len(own) % 4 or (offs & np.uint64(3)).any(): return None
  return (offs >> np.uint64(2)).astype(np.int64)[:, None] + np.arange(nbytes // 4)
