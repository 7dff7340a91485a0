"""The per-CU vector L1 of gfx942 during one batch of a dispatch: a line a workgroup has read stays in its L1, stale,
until one of its waves runs `buffer_inv` (audit x30 row 2).

What the hardware does (LLVM AMDGPUUsage, "Memory Model GFX942", as corrected by D121397): the vector L1 is per CU and
not coherent between CUs, for every memory type; the waves of a workgroup run on one CU (outside tgsplit mode), so
they share it; "a `buffer_inv sc0` is required to invalidate the L1 cache for coherence between wavefronts executing
in different work-groups", and the acquire sequences at agent / system scope emit `buffer_inv sc1` / `sc0 sc1` after
their `s_waitcnt vmcnt(0)` (same section, code sequence table: "load atomic acquire", "fence acquire"). The L1 is
write-through. Atomic read-modify-write instructions "implicitly bypass the L1 cache" and use sc1 for agent/system
coherence; loads carry sc1 at agent/system scope (same table, "load atomic monotonic agent/system").

The model, the harmful minimum:
- each workgroup has an L1 of its own (on hardware several may share a CU; a shared L1 would see the other's
  write-through stores, which is less harmful);
- a plain global/flat load fills the L1 lines it touches (128 bytes each, the CDNA 3 white paper's vector L1 line; a
  longer line would only keep more bytes stale), and later plain loads of that workgroup read those lines as they were
  when filled, whatever other workgroups, XCCs or other workgroups' atomics have written since;
- an atomic is performed past the L1 (it "implicitly bypasses" it), and the issuing workgroup's L1 drops the lines it
  touched: the waves of one workgroup need no cache action to see each other's atomics (audit hw row 1);
- the workgroup's own stores write through and update its lines (its waves see their own stores);
- a load with sc1 (agent or system scope) reads past the L1 and leaves its lines as they are; sc0 alone is workgroup
  scope, which the CU's L1 serves, so it goes through the L1;
- `buffer_inv` with sc0 or sc1 drops every line of the workgroup; without either it is wavefront scope, which the L1
  already serves, and drops nothing.

Not modelled: L1 lines surviving from one workgroup to a later one on the same CU, and from one dispatch to the next
(the AQL packet's acquire fence and the PM4 path's ACQUIRE_MEM invalidate the L1 at a dispatch's start).

gfx1100's per-CU vector L0 (GL0) uses the same line model with an L0 per wave or per workgroup in place of the
workgroup (rdna3 Waves.set_gl0, which says what differs).

The lines are kept lazily: a fill only records that the workgroup holds the line; the bytes it holds are copied only
when something is about to change what that workgroup's XCC sees of the line (another workgroup's store or atomic,
an L2 write-back from another XCC). So a kernel whose workgroups do not share lines pays only the bookkeeping.
"""
from __future__ import annotations
from collections.abc import Callable
import numpy as np
from hcqrt.mock.amd.rdna3.memory import FlatMemory

LINE = 128

class VectorL1:
  """The L1 lines each workgroup of a batch holds, over `mem`. `view(addr, nbytes, xcc)` reads bytes as an XCC sees
  them (through the per-XCC L2 model when there is one); `wg_xcc(wg)` gives a workgroup's XCC.

  >>> m = FlatMemory(); buf = np.zeros(256, np.uint8); m.map(0x1000, buf)
  >>> l1 = VectorL1(m, lambda a, n, x: m.read(a, n), lambda wg: np.zeros_like(wg))
  >>> a = np.array([0x1000], np.uint64); _ = l1.load(a, 4, np.array([0]), m.read(a, 4))   # workgroup 0 reads the line
  >>> l1.before_write(a, np.array([[7, 7, 7, 7]], np.uint8), np.array([1])); m.write(a, np.array([[7, 7, 7, 7]], np.uint8))
  >>> l1.load(a, 4, np.array([0]), m.read(a, 4))[0].tolist(), l1.load(a, 4, np.array([1]), m.read(a, 4))[0].tolist()
  ([0, 0, 0, 0], [7, 7, 7, 7])
  >>> l1.invalidate(np.array([0])); l1.load(a, 4, np.array([0]), m.read(a, 4))[0].tolist()
  [7, 7, 7, 7]
  """
  def __init__(self, mem: FlatMemory, view: Callable[[np.ndarray, int, np.ndarray], np.ndarray], wg_xcc: Callable[[np.ndarray], np.ndarray]):
    self.mem, self.view, self.wg_xcc = mem, view, wg_xcc
    # per mapped buffer (by id): the sorted keys wg * nlines + line of the lines held, a per-line "someone may hold
    # it" hint (allocated zeroed, lazily backed, on the first fill), the buffer's address, and the copied (stale)
    # lines by key
    self.held: dict[int, np.ndarray] = {}
    self.hint: dict[int, np.ndarray] = {}
    self.base: dict[int, int] = {}
    self.snap: dict[int, dict[int, np.ndarray]] = {}

  @staticmethod
  def _lines(buf: np.ndarray, offs: np.ndarray, nbytes: int) -> tuple[int, np.ndarray, np.ndarray]:
    o = offs.astype(np.int64)
    return -(-len(buf) // LINE), o // LINE, (o + nbytes - 1) // LINE

  def load(self, addrs: np.ndarray, nbytes: int, wg: np.ndarray, fresh: np.ndarray, what: str = "load") -> np.ndarray:
    """A plain load by lanes of workgroups `wg`: `fresh` is what the lanes' XCCs see now; bytes of lines the lane's
    workgroup holds stale replace it. Fills the lines it touched."""
    out = fresh
    for m, buf, offs in self.mem._locate(addrs, nbytes, what):
      key = id(buf)
      nl, first, last = self._lines(buf, offs, nbytes)
      w = wg[m].astype(np.int64)
      if (snap := self.snap.get(key)):
        kb = w[:, None] * nl + (offs.astype(np.int64)[:, None] + np.arange(nbytes)) // LINE
        skeys = np.fromiter(snap, np.int64, len(snap))
        stale = np.isin(kb, skeys)
        if stale.any():
          sub = out[m]
          pos = (offs.astype(np.int64)[:, None] + np.arange(nbytes)) % LINE
          for k in np.unique(kb[stale]):
            at = kb == k; line = snap[int(k)]
            sub[at] = line[np.minimum(pos[at], len(line) - 1)]
          out[m] = sub
      new = np.unique(np.concatenate([w * nl + first, w * nl + last]))
      if key not in self.held:
        self.held[key], self.hint[key], self.base[key] = new, np.zeros(nl, bool), int(addrs[m][0]) - int(offs[0])
      else: self.held[key] = np.union1d(self.held[key], new)
      self.hint[key][new % nl] = True
    return out

  def _copy(self, key: int, buf: np.ndarray, keys: np.ndarray) -> None:
    """Copy the lines `keys` as their holders' XCCs see them now, unless already copied (they stay as filled)."""
    snap = self.snap.setdefault(key, {})
    nl = -(-len(buf) // LINE)
    for k in keys.tolist():
      if k in snap: continue
      line = k % nl; n = min(LINE, len(buf) - line * LINE)
      snap[k] = self.view(np.array([self.base[key] + line * LINE], np.uint64), n, self.wg_xcc(np.array([k // nl])))[0].copy()

  def before_write(self, addrs: np.ndarray, data: np.ndarray | int, wg: np.ndarray, what: str = "store") -> None:
    """Called before a write of `data` rows by lanes of workgroups `wg` changes memory: every other workgroup holding a
    touched line keeps the line as it sees it now; the writers' own held lines take their bytes (write-through).
    `data` an int: an atomic of that many bytes per lane, performed past the L1; its issuers' L1s drop the lines it
    touched (their next load refills them) and the other workgroups' stay stale."""
    nbytes = data if isinstance(data, int) else data.shape[1]
    for m, buf, offs in self.mem._locate(addrs, nbytes, what):
      key = id(buf)
      if key not in self.held: continue
      nl, first, last = self._lines(buf, offs, nbytes)
      lines = np.unique(np.concatenate([first, last]))
      hint = self.hint[key]
      if not hint[lines].any(): continue
      held = self.held[key]
      touched = held[np.isin(held % nl, lines)]
      if not len(touched): continue
      snap = self.snap.get(key, {})
      w = wg[m].astype(np.int64)
      if isinstance(data, int):
        # AMDGPUUsage "Memory Model GFX942": the waves of a work-group share their CU's L1 and need "no special action"
        # for coherence among them, and llc-19's workgroup-scope release/acquire around an atomicrmw is just
        # `s_barrier` (no buffer_inv, audit hw row 1): so the issuing CU's L1 does not keep a stale copy of the line
        mine = np.isin(touched, np.unique(np.concatenate([w * nl + first, w * nl + last])))
        self._copy(key, buf, touched[~mine])
        self.held[key] = held[~np.isin(held, touched[mine])]
        for k in touched[mine].tolist(): snap.pop(k, None)
        continue
      # a held line whose every writer here is its own workgroup changes exactly as the write-through updates it
      ul, inv = np.unique(np.concatenate([first, last]), return_inverse=True); ww = np.concatenate([w, w])
      lo, hi = np.full(len(ul), np.iinfo(np.int64).max), np.full(len(ul), -1)
      np.minimum.at(lo, inv, ww); np.maximum.at(hi, inv, ww)
      tw, at = touched // nl, np.searchsorted(ul, touched % nl)
      own_only = (lo[at] == tw) & (hi[at] == tw)
      copied = np.isin(touched, np.fromiter(snap, np.int64, len(snap))) if snap else np.zeros(len(touched), bool)
      self._copy(key, buf, touched[~own_only])
      upd = touched[~own_only | copied]   # the holder's own bytes of this write go into its copy
      if not len(upd): continue
      o = offs.astype(np.int64); d = data[m]
      for k in upd.tolist():
        mine = w == k // nl
        if not mine.any(): continue
        line, c = k % nl, self.snap[key][k]
        b = o[mine][:, None] + np.arange(nbytes); inl = b // LINE == line
        c[(b % LINE)[inl]] = d[mine][inl]

  def before_writeback(self, l2_owner: dict[int, np.ndarray], xccs: np.ndarray) -> None:
    """Called before XCCs `xccs` write their dirty L2 bytes back (`l2_owner`: XccL2.owner): the other XCCs' workgroups
    holding a line with such bytes keep it as they see it now."""
    for key, own in l2_owner.items():
      if key not in self.held: continue
      dirty = np.isin(own, np.unique(xccs) + 1)
      if not dirty.any(): continue
      buf = next(b for b in self.mem.bufs if id(b) == key)
      nl = -(-len(buf) // LINE)
      held = self.held[key]
      touched = held[np.isin(held % nl, np.unique(np.flatnonzero(dirty) // LINE))]
      others = touched[~np.isin(self.wg_xcc(touched // nl), xccs)]
      self._copy(key, buf, others)

  def invalidate(self, wgs: np.ndarray) -> None:
    """`buffer_inv` (sc0 or sc1) by waves of workgroups `wgs`: their L1s drop every line."""
    wgs = np.unique(wgs)
    for key, held in self.held.items():
      nl = len(self.hint[key])
      self.held[key] = held[~np.isin(held // nl, wgs)]
      if (snap := self.snap.get(key)):
        for k in [k for k in snap if k // nl in wgs]: del snap[k]
