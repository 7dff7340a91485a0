"""The per-CU vector L1 of gfx942: a line a workgroup has read stays in its CU's L1, stale, until one of its waves runs
`buffer_inv` or the CP invalidates the L1 (audit x30 row 2) - for later workgroups on that CU and later dispatches too.

What the hardware does (LLVM AMDGPUUsage, "Memory Model GFX942", as corrected by D121397): the vector L1 is per CU and
not coherent between CUs, for every memory type; the waves of a workgroup run on one CU (outside tgsplit mode), so
they share it; "a `buffer_inv sc0` is required to invalidate the L1 cache for coherence between wavefronts executing
in different work-groups", and the acquire sequences at agent / system scope emit `buffer_inv sc1` / `sc0 sc1` after
their `s_waitcnt vmcnt(0)` (same section, code sequence table: "load atomic acquire", "fence acquire"). The L1 is
write-through. Atomic read-modify-write instructions "implicitly bypass the L1 cache" and use sc1 for agent/system
coherence; loads carry sc1 at agent/system scope (same table, "load atomic monotonic agent/system").

The model, the harmful minimum:
- each workgroup of a batch has an L1 of its own (on hardware several may share a CU; a shared L1 would see the
  other's write-through stores, which is less harmful), and the k-th workgroup of the next batch, or of a later
  dispatch, runs on the CU of the k-th before it (launch.dispatch says how XCCs split the slots);
- a plain global/flat load fills the L1 lines it touches (128 bytes each, the CDNA 3 white paper's vector L1 line; a
  longer line would only keep more bytes stale), and later plain loads through that L1 read those lines as they were
  when filled, whatever other workgroups, XCCs or other workgroups' atomics have written since;
- an atomic is performed past the L1 (it "implicitly bypasses" it), and the issuing workgroup's L1 drops the lines it
  touched: the waves of one workgroup need no cache action to see each other's atomics (audit hw row 1);
- the workgroup's own stores write through and update its lines (its waves see their own stores);
- a load with sc1 (agent or system scope) reads past the L1 and leaves its lines as they are; sc0 alone is workgroup
  scope, which the CU's L1 serves, so it goes through the L1;
- `buffer_inv` with sc0 or sc1 drops every line of the workgroup's L1; without either it is wavefront scope, which the
  L1 already serves, and drops nothing;
- lines outlive the workgroup and the dispatch: a wave's end does not write or invalidate the L1 (it is write-through
  and LLVM emits no `buffer_inv` before `s_endpgm`), and AMDGPUUsage puts the invalidate between dispatches on the CP
  ("The scalar and vector caches are invalidated between kernel dispatches by CP", same section, and "Memory Model
  GFX11"). What the CP runs decides it: PM4 ACQUIRE_MEM with CP_COHER_CNTL.TCL1_ACTION_ENA (gfx9) / GCR_CNTL.GLV_INV
  (gfx10+) (cp.py), an AQL packet with an agent or system acquire fence (aql.py). A dispatch's end freezes its lines
  (`freeze`): what the host, SDMA or the CP write next is not seen through them.
- RELEASE_MEM's end-of-pipe L1 actions (gfx9 EOP TCL1_ACTION_EN, gfx11 GCR GLV_INV) and an SDMA GCR_REQ with GLV_INV
  (gfx11) are pending until something sees them complete: the CP does not wait for the end-of-pipe event before it
  starts the packets after it, so a later dispatch may fill and read lines before that invalidate lands (they stay);
  once something has seen the release complete, the lines held at the release are dropped (radv and radeonsi rely
  on exactly this: cp.py release_l1_invalidate). Seen complete: a WAIT_REG_MEM / SDMA POLL_REGMEM of the VM that
  passed on the release's fence (the SDMA queue's next FENCE) where the fence's value before the release could not
  have passed it; an AQL barrier whose dependency signal the release brought to 0; a KFD WAIT_EVENTS that consumed
  the interrupt of this or a later release of the same queue (EOP events retire in order: cp.py land_pending).
  Known risk (a false failure, never a missed stale read): a host that polls the fence in memory and then submits
  has seen the release complete, but the mock cannot see a CPU read, so it keeps the lines that hardware has
  dropped. Our backend never relies on that (each submission waits with WAIT_REG_MEM on the timeline value or carries
  an ACQUIRE_MEM / AQL acquire); code that does needs its own invalidate on the mock.

The L1s are those of one process's GPU VM (memory.py GPUVM.vector_l1): another process's dispatches on the same GPU
neither fill nor drop them. A buffer freed and allocated again at the same address with the same size keeps its lines
(the L1 is not told of unmaps); one of another size starts empty.

gfx1100's per-CU vector L0 (GL0) uses the same line model with an L0 per wave or per workgroup in place of the
workgroup, and so does its per-shader-array GL1 under the L0s, with shader arrays as holders (rdna3 Waves.set_gl0,
which says what differs; memory.py GPUVM.gl1).

The lines are kept lazily: a fill only records that the L1 holds the line; the bytes it holds are copied only when
something is about to change what that L1's XCC sees of the line (another L1's store or atomic, an L2 write-back from
another XCC), and at a dispatch's end the lines still held uncopied are copied once per line, not per holder, into
the buffer's image. So a kernel whose workgroups do not share lines pays only the bookkeeping, and a CP invalidate
before the next dispatch (what our backend emits) drops everything at once.
"""
from __future__ import annotations
from collections.abc import Callable
import numpy as np
from hcqrt.mock.amd.rdna3.memory import FlatMemory, MemoryFault

LINE = 128

class VectorL1:
  """The lines each vector L1 holds, over `mem`: `holders` in the calls are L1 numbers (the launch gives each
  workgroup, or wave, of a batch the L1 of its slot, launch.dispatch). `view(addr, nbytes, xcc)` reads bytes as an
  XCC sees them (through the per-XCC L2 model when there is one); `wg_xcc(holders)` gives an L1's XCC.

  >>> m = FlatMemory(); buf = np.zeros(256, np.uint8); m.map(0x1000, buf)
  >>> l1 = VectorL1(m, lambda a, n, x: m.read(a, n), lambda wg: np.zeros_like(wg))
  >>> a = np.array([0x1000], np.uint64); _ = l1.load(a, 4, np.array([0]), m.read(a, 4))   # L1 0 reads the line
  >>> l1.before_write(a, np.array([[7, 7, 7, 7]], np.uint8), np.array([1])); m.write(a, np.array([[7, 7, 7, 7]], np.uint8))
  >>> l1.load(a, 4, np.array([0]), m.read(a, 4))[0].tolist(), l1.load(a, 4, np.array([1]), m.read(a, 4))[0].tolist()
  ([0, 0, 0, 0], [7, 7, 7, 7])
  >>> l1.freeze(); buf[:4] = 9   # the dispatch ends; the host writes the line
  >>> l1.load(a, 4, np.array([1]), m.read(a, 4))[0].tolist(), l1.load(a, 4, np.array([2]), m.read(a, 4))[0].tolist()
  ([7, 7, 7, 7], [9, 9, 9, 9])
  >>> l1.invalidate(np.array([0])); l1.load(a, 4, np.array([0]), m.read(a, 4))[0].tolist()
  [9, 9, 9, 9]
  """
  def __init__(self, mem: FlatMemory, view: Callable[[np.ndarray, int, np.ndarray], np.ndarray], wg_xcc: Callable[[np.ndarray], np.ndarray]):
    self.bind(mem, view, wg_xcc)
    self.gen = 0   # invalidate_all calls so far (mark / drop_marked)
    # per mapped buffer (by its address): its size; boolean [L1, line] tables of the lines `held`, of those `frozen`
    # at a dispatch's end (their bytes are the buffer's `image` lines) and of those `copied` (stale: their bytes in
    # `snap`, by key L1 * nlines + line, the tables' flat index); a per-line "some L1 may hold it" `hint`. A fill sets
    # table cells (O(lines filled)); the tables grow by rows as higher L1 numbers fill.
    self.size: dict[int, int] = {}
    self.held: dict[int, np.ndarray] = {}
    self.frozen: dict[int, np.ndarray] = {}
    self.copied: dict[int, np.ndarray] = {}
    self.hint: dict[int, np.ndarray] = {}
    self.snap: dict[int, dict[int, np.ndarray]] = {}
    self.image: dict[int, np.ndarray] = {}

  def bind(self, mem: FlatMemory, view: Callable[[np.ndarray, int, np.ndarray], np.ndarray], wg_xcc: Callable[[np.ndarray], np.ndarray]) -> None:
    """Serve a new dispatch: its memory map, view and L1-to-XCC map (the lines held stay)."""
    self.mem, self.view, self.wg_xcc = mem, view, wg_xcc

  def _parts(self, addrs: np.ndarray, nbytes: int, what: str):
    """mem._locate's parts, each with its buffer's key (address); a buffer of another size at a known address is a
    new allocation: the old one's lines are forgotten."""
    for m, buf, offs in self.mem._locate(addrs, nbytes, what):
      key = int(addrs[m][0]) - int(offs[0])
      if self.size.get(key, len(buf)) != len(buf): self._forget(key)
      yield m, buf, offs, key

  def _forget(self, key: int) -> None:
    for d in (self.size, self.held, self.frozen, self.copied, self.hint, self.snap, self.image): d.pop(key, None)

  def _rows(self, key: int, nl: int, rows: int) -> None:
    """Make buffer `key`'s tables (`nl` lines) at least `rows` L1s tall (doubling: amortised O(1) per fill)."""
    if key not in self.held:
      for d in (self.held, self.frozen, self.copied): d[key] = np.zeros((rows, nl), bool)
      self.hint[key] = np.zeros(nl, bool)
    elif rows > (have := len(self.held[key])):
      for d in (self.held, self.frozen, self.copied):
        t = np.zeros((max(rows, 2 * have), nl), bool); t[:have] = d[key]; d[key] = t

  @staticmethod
  def _in(table: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Is cell `keys` (flat index L1 * nlines + line) of `table` set (False for L1s past its rows)?"""
    flat = table.reshape(-1); ok = keys < len(flat)
    out = np.zeros(keys.shape, bool); out[ok] = flat[keys[ok]]
    return out

  @staticmethod
  def _lines(buf: np.ndarray, offs: np.ndarray, nbytes: int) -> tuple[int, np.ndarray, np.ndarray]:
    o = offs.astype(np.int64)
    return -(-len(buf) // LINE), o // LINE, (o + nbytes - 1) // LINE

  def load(self, addrs: np.ndarray, nbytes: int, wg: np.ndarray, fresh: np.ndarray, what: str = "load", fill: bool = True) -> np.ndarray:
    """A plain load by lanes of L1s `wg`: `fresh` is what the lanes' XCCs see now; bytes of lines the lane's L1 holds
    stale (copied, or frozen at an earlier dispatch's end) replace it. Fills the lines it touched (`fill` False: only
    looks, as a lower level seen through by an upper one's copy, gfx11's GL1 under the GL0s)."""
    out = fresh
    for m, buf, offs, key in self._parts(addrs, nbytes, what):
      if not fill and key not in self.held: continue
      nl, first, last = self._lines(buf, offs, nbytes)
      w = wg[m].astype(np.int64)
      self._rows(key, nl, int(w.max()) + 1 if len(w) else 1); self.size.setdefault(key, len(buf))
      snap, frozen = self.snap.get(key), self.frozen[key]
      if snap or self.image.get(key) is not None:
        byte = offs.astype(np.int64)[:, None] + np.arange(nbytes)
        kb = w[:, None] * nl + byte // LINE
        sub = out[m]
        if key in self.image and (fz := frozen.reshape(-1)[kb]).any():
          sub[fz] = self.image[key][byte[fz]]
        if snap and (stale := self.copied[key].reshape(-1)[kb]).any():
          pos = byte % LINE
          for k in np.unique(kb[stale]):
            at = kb == k; line = snap[int(k)]
            sub[at] = line[np.minimum(pos[at], len(line) - 1)]
        out[m] = sub
      if not fill: continue
      held = self.held[key]
      held[w, first] = True; held[w, last] = True
      hint = self.hint[key]; hint[first] = True; hint[last] = True
    return out

  def _copy(self, key: int, buf: np.ndarray, keys: np.ndarray) -> None:
    """Copy the lines `keys` as their holders see them now (frozen ones from the image, the others as their XCCs see
    memory), unless already copied (they stay as filled)."""
    snap = self.snap.setdefault(key, {})
    nl = -(-len(buf) // LINE)
    keys = keys[~self._in(self.copied[key], keys)]
    if not len(keys): return
    fz = self._in(self.frozen[key], keys)
    self.copied[key].reshape(-1)[keys] = True
    for k in keys[fz].tolist():
      line = k % nl; snap[k] = self.image[key][line * LINE:(line + 1) * LINE].copy()
    # the others as their XCCs see them now: one view of every whole line, then the buffer's short last line alone
    live = keys[~fz]; short = (live % nl) * LINE + LINE > len(buf)
    for part in (live[~short], live[short]):
      if not len(part): continue
      line = part % nl; n = min(LINE, len(buf) - int(line[0]) * LINE)
      rows = self.view((key + line * LINE).astype(np.uint64), n, self.wg_xcc(part // nl))
      for k, row in zip(part.tolist(), rows): snap[k] = row.copy()

  def _drop(self, key: int, keys: np.ndarray) -> None:
    """The L1s drop the lines `keys` of buffer `key`."""
    keys = keys[keys < self.held[key].size]
    for d in (self.held, self.frozen): d[key].reshape(-1)[keys] = False
    if (snap := self.snap.get(key)):
      was = self.copied[key].reshape(-1)[keys]
      for k in keys[was].tolist(): snap.pop(k, None)
    self.copied[key].reshape(-1)[keys] = False

  def _touched(self, key: int, nl: int, lines: np.ndarray) -> np.ndarray:
    """The keys of the held lines among `lines` (sorted, unique), over every L1."""
    sl, li = np.nonzero(self.held[key][:, lines])
    return sl * nl + lines[li]

  def before_write(self, addrs: np.ndarray, data: np.ndarray | int, wg: np.ndarray, what: str = "store") -> None:
    """Called before a write of `data` rows by lanes of L1s `wg` changes memory: every other L1 holding a touched line
    keeps the line as it sees it now; the writers' own held lines take their bytes (write-through).
    `data` an int: an atomic of that many bytes per lane, performed past the L1; its issuers' L1s drop the lines it
    touched (their next load refills them) and the other L1s' stay stale."""
    nbytes = data if isinstance(data, int) else data.shape[1]
    for m, buf, offs, key in self._parts(addrs, nbytes, what):
      if key not in self.held: continue
      nl, first, last = self._lines(buf, offs, nbytes)
      lines = np.unique(np.concatenate([first, last]))
      if not self.hint[key][lines].any(): continue
      touched = self._touched(key, nl, lines)
      if not len(touched): continue
      w = wg[m].astype(np.int64)
      if isinstance(data, int):
        # AMDGPUUsage "Memory Model GFX942": the waves of a work-group share their CU's L1 and need "no special action"
        # for coherence among them, and llc-19's workgroup-scope release/acquire around an atomicrmw is just
        # `s_barrier` (no buffer_inv, audit hw row 1): so the issuing CU's L1 does not keep a stale copy of the line
        mine = np.isin(touched, np.unique(np.concatenate([w * nl + first, w * nl + last])))
        self._copy(key, buf, touched[~mine])
        self._drop(key, touched[mine])
        continue
      # a held line whose every writer here is its own L1 changes exactly as the write-through updates it, unless
      # the L1 holds it frozen (stale since an earlier dispatch): then its copy takes the writer's bytes
      ul, inv = np.unique(np.concatenate([first, last]), return_inverse=True); ww = np.concatenate([w, w])
      lo, hi = np.full(len(ul), np.iinfo(np.int64).max), np.full(len(ul), -1)
      np.minimum.at(lo, inv, ww); np.maximum.at(hi, inv, ww)
      tw, at = touched // nl, np.searchsorted(ul, touched % nl)
      own_only = (lo[at] == tw) & (hi[at] == tw) & ~self._in(self.frozen[key], touched)
      copied = self._in(self.copied[key], touched)
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
    """Called before XCCs `xccs` write their dirty L2 bytes back (`l2_owner`: XccL2.owner, by buffer id): the other
    XCCs' L1s holding a line with such bytes keep it as they see it now."""
    for base, buf in zip(self.mem.bases, self.mem.bufs):
      if (own := l2_owner.get(id(buf))) is None or base not in self.held: continue
      dirty = np.isin(own, np.unique(xccs) + 1)
      if not dirty.any(): continue
      nl = -(-len(buf) // LINE)
      touched = self._touched(base, nl, np.unique(np.flatnonzero(dirty) // LINE))
      others = touched[~np.isin(self.wg_xcc(touched // nl), xccs)]
      self._copy(base, buf, others)

  def invalidate(self, wgs: np.ndarray) -> None:
    """`buffer_inv` (sc0 or sc1) / `buffer_gl0_inv` by waves of L1s `wgs`: those L1s drop every line."""
    wgs = np.unique(wgs)
    for key, held in self.held.items():
      rows = wgs[wgs < len(held)]
      if not len(rows) or not held[rows].any(): continue
      nl = held.shape[1]
      sl, li = np.nonzero(held[rows])
      self._drop(key, rows[sl] * nl + li)

  def invalidate_xcc(self, xcc: int, num_xcc: int) -> None:
    """A cache action of one XCC's CP (an AQL PM4-IB runs once per XCC, cp.py): the L1s on XCC `xcc` (slot s sits on
    XCC s % num_xcc, launch.l1_slots) drop every line; the other XCCs' keep theirs."""
    rows = max((len(h) for h in self.held.values()), default=0)
    self.invalidate(np.arange(xcc, rows, num_xcc))

  def invalidate_all(self) -> None:
    """A CP cache action (ACQUIRE_MEM TCL1_ACTION_ENA / GCR_CNTL.GLV_INV, an AQL acquire fence): every L1 drops
    every line."""
    for d in (self.size, self.held, self.frozen, self.copied, self.hint, self.snap, self.image): d.clear()
    self.gen += 1

  def mark(self) -> tuple[int, dict[int, tuple[int, np.ndarray]]]:
    """The lines held now: what an invalidate issued now but seen complete later drops (`drop_marked`; cp.py
    RELEASE_MEM / SDMA GCR_REQ). Lines filled after the mark are kept then: they may have been filled after the
    invalidate ran (the harmful reading)."""
    return self.gen, {k: (self.size[k], np.flatnonzero(h)) for k, h in self.held.items()}

  def mark_xcc(self, xcc: int, num_xcc: int) -> tuple[int, dict[int, tuple[int, np.ndarray]]]:
    """`mark`, of the L1s on XCC `xcc` only (slot s sits on XCC s % num_xcc, as in invalidate_xcc): what a release
    one XCC's CP ran (an AQL PM4-IB) drops once seen complete."""
    gen, held = self.mark()
    return gen, {k: (size, keys[(keys // self.held[k].shape[1]) % num_xcc == xcc]) for k, (size, keys) in held.items()}

  def live(self, marked: tuple[int, dict[int, tuple[int, np.ndarray]]]) -> bool:
    """Can `drop_marked(marked)` still drop anything (no invalidate_all since the mark)?"""
    return marked[0] == self.gen

  def drop_marked(self, marked: tuple[int, dict[int, tuple[int, np.ndarray]]]) -> None:
    """The invalidate that `mark` saw issued has certainly run: the L1s drop the lines it marked that they still
    hold. After an invalidate_all since the mark every line held was filled later, so none is dropped. (A line a
    `buffer_inv` dropped and a later load filled again after the mark is dropped: less harmful, and rare.)"""
    gen, held = marked
    if gen != self.gen: return
    for key, (size, keys) in held.items():
      if self.size.get(key) == size and key in self.held: self._drop(key, keys)

  def keep_stale_under(self, stale: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
    """Before `freeze`: the live lines (L1 `k // nlines`, line `k % nlines`) for which `stale(holders, lines)` says
    the level under them holds the line stale (what they filled is not memory) keep it as seen now, in a copy."""
    for key, held in list(self.held.items()):
      live = held & ~self.frozen[key] & ~self.copied[key]
      if not live.any(): continue
      sl, li = np.nonzero(live)
      if (keep := stale(sl, li * LINE + key)).any():
        try: (_, buf, _), = self.mem._locate(np.array([key], np.uint64), 1, "L1 line")
        except MemoryFault: continue   # (its buffer is gone: freeze forgets it)
        self._copy(key, buf, sl[keep] * held.shape[1] + li[keep])

  def stale(self, holders: np.ndarray, addrs: np.ndarray) -> np.ndarray:
    """Does L1 `holders[i]` hold the line at `addrs[i]` stale (copied or frozen)?"""
    out = np.zeros(len(holders), bool)
    for key, held in self.held.items():
      nl = held.shape[1]
      at = (addrs >= key) & (addrs < key + nl * LINE)
      if not at.any(): continue
      k = holders[at].astype(np.int64) * nl + (addrs[at] - key) // LINE
      out[at] = self._in(self.frozen[key], k) | self._in(self.copied[key], k)
    return out

  def freeze(self) -> None:
    """The dispatch ends: lines its L1s hold stay as they are now, whatever writes memory next (the host, SDMA, the
    CP, a later dispatch), until an invalidate. The bytes of the lines held live (not copied) go to the buffer's
    image; an older frozen holder of such a line whose image bytes changed keeps them in a copy of its own."""
    for key, held in list(self.held.items()):
      frozen, copied = self.frozen[key], self.copied[key]
      live = held & ~frozen & ~copied
      if not live.any(): continue
      try: (_, buf, _), = self.mem._locate(np.array([key], np.uint64), 1, "L1 line")
      except MemoryFault: buf = None   # (filled by a dispatch that faulted before this one: its buffer is gone)
      if buf is None or len(buf) != self.size[key]: self._forget(key); continue
      nl = held.shape[1]
      lines = np.flatnonzero(live.any(0))
      byte = (lines[:, None] * LINE + np.arange(LINE)).reshape(-1); byte = byte[byte < len(buf)]
      img = self.image.get(key)
      if img is None: img = self.image[key] = np.zeros(len(buf), np.uint8)   # (zeroed: lazily backed pages)
      else:
        changed = np.unique(byte[img[byte] != buf[byte]] // LINE)
        sl, li = np.nonzero(frozen[:, changed] & ~copied[:, changed])
        if len(sl): self._copy(key, buf, sl * nl + changed[li])
      img[byte] = buf[byte]
      frozen |= live
