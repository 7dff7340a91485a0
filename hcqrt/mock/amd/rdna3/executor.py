"""Execute decoded gfx1100 code on a batch of wave32 waves at once (numpy over waves x 32 lanes).

Waves that sit at the same program counter run together as one numpy step; the scheduler always picks
the lowest PC among runnable waves, so waves that diverged on a scalar branch re-converge. A wave at
s_barrier waits until every wave of its workgroup is at the barrier or finished; a wave that reached it with LDS
writes still in flight resumes last (run, held).

Loads read memory when they issue but their results land in registers only when an s_waitcnt retires
them (vmcnt for global/flat, lgkmcnt for LDS and scalar loads, oldest first), so code that reads a load's
destination without waiting sees the stale register, as it can on hardware. LDS writes and atomics stay in flight the
same way, invisible to other waves until the writer's lgkmcnt retires them (_ds); global and scratch stores complete at issue.
A launched gfx1100 dispatch reads global memory through per-CU vector L0s (GL0), stale until `buffer_gl0_inv`
(Waves.set_gl0, audit hw row 6), and the GL1 of its shader array under them, stale until `buffer_gl1_inv`.
"""
from __future__ import annotations
import numpy as np
from hcqrt.mock.amd.rdna3.decoder import Inst, decode_one
from hcqrt.mock.amd.rdna3.memory import FlatMemory, MemoryFault
from hcqrt.mock.amd.rdna3 import valu as V

VCC, NULL, M0, EXEC, SCC_SRC, LIT = 106, 124, 125, 126, 253, 255
SCRATCH_VA = 1 << 48   # where the emulator's private-segment windows live (its own address space, not the GPU VM)
POISON_BYTE = 0xA5     # what fresh scratch holds: garbage left by an earlier wave, never a convenient 0
class EmulatorError(Exception): pass

F32C = {240: 0.5, 241: -0.5, 242: 1.0, 243: -1.0, 244: 2.0, 245: -2.0, 246: 4.0, 247: -4.0, 248: 0.15915494309189535}
def _inline(code: int, t: str):
  """Inline constant `code` as raw bits of type `t` (ints sign-extended, floats in the operand's width)."""
  if 128 <= code <= 192: val = code - 128
  elif 193 <= code <= 208: val = 192 - code
  elif code in F32C:
    if t in ("f16", "f64"):
      f = np.array(F32C[code], V.NP[t])
      if code == 248: f = np.array(0x3118, np.uint16).view(np.float16) if t == "f16" else np.array(0x3FC45F306DC9C882, np.uint64).view(np.float64)
      return f.view(np.uint16 if t == "f16" else np.uint64)[()]
    return np.array(F32C[code], np.float32).view(np.uint32)[()] if code != 248 else np.uint32(0x3E22F983)
  else: raise EmulatorError(f"operand code {code} is not supported")
  if V.BITS.get(t, 32) == 64: return np.uint64(val & 0xFFFFFFFFFFFFFFFF)
  if V.BITS.get(t, 32) == 16: return np.uint16(val & 0xFFFF)
  return np.uint32(val & 0xFFFFFFFF)

_min = np.minimum.reduce   # (ndarray.min without its Python wrapper: the scheduler calls it every step)

def _per_wave(x, n: int) -> np.ndarray:
  """`x` (one value per wave, or one for every wave) as an (n,) array: `x` itself when it already is one."""
  x = np.asarray(x)
  return x if x.shape == (n,) else np.broadcast_to(x, (n,))

def unpack_mask(m: np.ndarray, lanes: int = 32) -> np.ndarray:
  """(n,) lane masks (uint32 for wave32, uint64 for wave64) -> (n, lanes) bool."""
  dt = np.uint32 if lanes == 32 else np.uint64
  return np.unpackbits(np.ascontiguousarray(m, dt).view(np.uint8).reshape(-1, lanes // 8), axis=1, bitorder="little").astype(bool)
def pack_mask(b: np.ndarray) -> np.ndarray:
  """(n, lanes) bool -> (n,) lane masks: uint32 for 32 lanes, uint64 for 64."""
  return np.packbits(np.ascontiguousarray(b, bool), axis=1, bitorder="little").view(np.uint32 if b.shape[1] == 32 else np.uint64).reshape(-1)

class Waves:
  """Register state of `n` waves: SGPRs (128, n), VGPRs (nvgpr, n, LANES), SCC, PC, and LDS per workgroup.

  The ISA-specific parts are class attributes a subclass replaces (gfx9/executor.py runs GFX9 wave64 code on this
  class): the lane count, the instruction decoder, the "no register" operand code and the s_waitcnt field layout."""
  LANES = 32
  NULL = NULL                   # the operand code meaning "none" (gfx11 SGPR_NULL)
  TRUE16 = True                 # 32-bit VOP encodings address 16-bit halves by VGPR field bit 7 (gfx11)
  GL0 = True                    # launch gives the waves the gfx11 vector L0 model (set_gl0)
  ZERO_HI16: frozenset = frozenset()   # 16-bit ops whose write zeroes the high half (gfx9) instead of keeping it
  decode_one = staticmethod(decode_one)

  @staticmethod
  def vgpr_count(rsrc1: int, wave32: bool) -> int:
    """VGPRs per lane from COMPUTE_PGM_RSRC1.VGPRS: gfx10+ granules of 8 (wave32) or 4 (wave64)."""
    return ((rsrc1 & 0x3F) + 1) * (8 if wave32 else 4)
  def __init__(self, code: bytes, n: int, nvgpr: int, wg: np.ndarray, lds_bytes: int, mem: FlatMemory, cache: dict | None = None,
               code_va: int = 0):
    """`cache` (address -> Inst) may be shared by every batch of waves running the same code; `code_va` is the GPU
    address of code[0], which s_getpc_b64 adds (PC-relative data: constants in .rodata next to the code)."""
    self.code, self.mem, self.n, self.code_va = code, mem, n, code_va
    self.s = np.zeros((128, n), np.uint32); self.v = np.zeros((nvgpr, n, self.LANES), np.uint32)
    self.mask_t = "u32" if self.LANES == 32 else "u64"
    self.scc = np.zeros(n, np.uint32); self.pc = np.zeros(n, np.int64)
    self.done = np.zeros(n, bool); self.barrier = np.zeros(n, bool)
    self.wg = wg; self.lds = np.zeros((int(wg.max()) + 1 if n else 0, max(lds_bytes, 4)), np.uint8)
    self.cache: dict[int, Inst] = {} if cache is None else cache; self.wave_insts = 0
    self._full: dict[int, np.ndarray] = {}   # wave count -> read-only all-lanes-on mask
    self._masks: dict[bytes, tuple[np.ndarray, tuple]] = {}   # EXEC bytes -> (lane mask, its nonzero): exec_lanes
    self._handlers: dict[str, object] = {}   # encoding -> bound handler (step)
    self.pending: dict[str, list] = {"vm": [], "lgkm": []}   # loads not yet landed: (kind, reg, waves, lane mask, values)
    self.scratch: np.ndarray | None = None; self.scratch_mem = FlatMemory()   # private segments (set_scratch)
    self.scratch_base: np.ndarray | None = None   # each wave's scratch slot in GPU memory (set_scratch)
    self.gl0 = None; self.gl0_of = np.arange(n)   # the vector L0 model and each wave's L0 (set_gl0; None: no model)
    self.gl1 = None; self.sa_of = np.zeros(n, np.int64)   # the GL1s (one per shader array) and each wave's (set_gl0)

  def set_gl0(self, wgp_mode: bool, gl0=None, slot: np.ndarray | None = None, gl1=None, shader_arrays: int = 1) -> None:
    """Give the waves gfx11's per-CU vector L0 (GL0), kept by gfx9/l1.py's lazy per-holder line model (audit hw row 6;
    LLVM AMDGPUUsage "Memory Model GFX11"): a plain global/flat load fills and then reads its L0's lines as they were
    filled, whatever other L0s' stores and atomics did since; the L0's own stores write through into its lines; a load
    with glc (agent/system scope, and workgroup scope in WGP mode) reads past it; `buffer_gl0_inv` drops its lines;
    an atomic is performed past it and drops the issuing L0's touched lines. "There is a single L0 cache per CU"; in
    WGP mode (COMPUTE_PGM_RSRC1.WGP_MODE, bit 29) a work-group's waves "may be executing on SIMDs of different CUs",
    so each wave gets an L0 of its own (the harmful choice); in CU mode a work-group's waves share one.
    `gl0`: the L0s to run on (a VectorL1 the launch keeps across batches and dispatches, so lines survive from one
    workgroup to a later one on the same L0 until an invalidate: gfx9/l1.py); `slot`: each wave's workgroup's place
    there (default: its workgroup).
    `gl1`: the GL1s under the L0s (a VectorL1 whose holders are shader arrays, kept like `gl0`), `shader_arrays` of
    them. AMDGPUUsage "Memory Model GFX10-GFX11": "The vector and scalar memory L0 caches use an L1 cache shared by
    all WGPs on the same SA", so no action is needed between the waves of one work-group, but "a buffer_gl1_inv is
    required for coherence between wavefronts executing in different work-groups as they may be executing on
    different SAs that access different L1s". So the GL1 is a second stale level with the same line model: a GL0 fill
    reads through its SA's GL1 (and fills it), stores write through both (the writer's SA sees them), an atomic drops
    the issuing SA's lines, `buffer_gl1_inv` drops the wave's SA's, and a glc load reads past both (the RDNA3 ISA's
    GLC=1 is device coherence, missing in GL0 and GL1; LLVM emits no dlc for agent-scope loads on gfx11). The slot ->
    SA map is slot % shader_arrays: neighbouring workgroups sit on different SAs, the harmful placement (the
    dispatcher may place a workgroup on any SA). Not modelled: MUBUF data ops (not emulated at all); the scalar cache:
    `s_load` reads memory (L2) directly and `s_dcache_inv` drops nothing, although the scalar L0 sits on the same
    GL1 ("The vector and scalar memory L0 caches use an L1 cache", AMDGPUUsage GFX10-GFX11), so a scalar load never
    reads a stale line here (less harmful than hardware; review l1b row E); the eviction a glc load does on hardware
    ("matching entries from L0 and L1 are evicted", RDNA3 ISA 4.1.1, quoted in LLVM PR 89739): the mock leaves the
    L0 and GL1 lines as they were, so a later plain load may still read them stale, the more harmful reading, and code
    that counts on that eviction relies on something outside the memory model (review l1b row F)."""
    from hcqrt.mock.amd.gfx9.l1 import VectorL1   # (here: gfx9's package imports this module)
    self.gl0, slot = gl0, self.wg if slot is None else slot
    per = 1
    if wgp_mode:   # one L0 per wave: the workgroup's slot times its waves, plus the wave's rank in the workgroup
      order = np.argsort(self.wg, kind="stable"); s = self.wg[order]
      rank = np.empty(self.n, np.int64); rank[order] = np.arange(self.n) - np.searchsorted(s, s)
      per = int(np.bincount(self.wg).max())
      self.sa_of = slot.astype(np.int64) % max(1, shader_arrays)
      slot = slot.astype(np.int64) * per + rank
    else: self.sa_of = slot.astype(np.int64) % max(1, shader_arrays)
    self.gl0_of = slot
    read = lambda a, nb, x: self.mem.read(a, nb, "GL0 line")
    self.gl1 = gl1
    if gl1 is not None:
      gl1.bind(self.mem, read, np.zeros_like)
      # an L0 line is filled through its SA's GL1: a copy of it takes what that GL1 shows (GL0 holder h: slot h // per)
      view = lambda a, nb, sa: gl1.load(a, nb, sa, self.mem.read(a, nb, "GL0 line"), fill=False)
      l0_sa = lambda h: (np.asarray(h, np.int64) // per) % max(1, shader_arrays)
    else: view, l0_sa = read, np.zeros_like
    if gl0 is None: self.gl0 = VectorL1(self.mem, view, l0_sa)
    else: gl0.bind(self.mem, view, l0_sa)

  # ---- scheduling
  # A wave that can issue is never kept from issuing for ever: on hardware a held or out-scheduled wave is only delayed
  # (the wave arbiter picks among ready waves every cycle). The mock's orders (waves at the lowest PC first; a wave
  # held after a barrier until the others block) would starve a wave for good when the others spin on a value it has
  # yet to write (audit x30 row 6), so a wave held for HOLD_STEPS scheduler steps while others run rejoins them, and a
  # ready wave that has not issued for FAIR_STEPS steps gets a burst of up to FAIR_STEPS steps with the others paused.
  # Both bounds are far above what a workgroup's waves need to reach their next barrier, so the harmful order the hold
  # gives (readers run before the held writer's late LDS writes) is kept for every kernel that does not spin.
  HOLD_STEPS = FAIR_STEPS = 20_000
  def run(self, max_steps: int = 50_000_000) -> None:
    if self.n == 0: return
    # spc: the PC of every wave that may issue, IDLE for finished waves and waves at a barrier
    IDLE = np.iinfo(np.int64).max
    held = np.zeros(self.n, bool)   # waves past a barrier that resume only when the others cannot go on (below)
    paused = np.zeros(self.n, bool)   # ready waves kept back while starved ones get their burst
    issued = np.zeros(self.n, np.int64)   # the step each wave last issued at
    held_at, check, burst_end = 0, self.FAIR_STEPS, -1
    spc = np.where(self.done | self.barrier, IDLE, self.pc)
    with np.errstate(all="ignore"):   # inf, NaN and wrap-around are results the hardware computes, not warnings
      for k in range(max_steps):
        p = int(_min(spc))
        if k >= check or (burst_end >= 0 and (k >= burst_end or p == IDLE)):
          if burst_end >= 0:   # the burst is over (or the starved waves blocked): the paused waves go on
            burst_end = -1; issued[paused] = k; paused[:] = False
            spc = np.where(self.done | self.barrier | held, IDLE, self.pc); p = int(_min(spc))
          if held.any() and p != IDLE and k - held_at >= self.HOLD_STEPS:   # held long enough: back with the others
            issued[held] = k; held[:] = False; spc = np.where(self.done | self.barrier, IDLE, self.pc); p = int(_min(spc))
          elif k >= check and p != IDLE and ((spc != IDLE) & (issued < k - self.FAIR_STEPS)).any():
            starved = (spc != IDLE) & (issued < k - self.FAIR_STEPS)
            paused = (spc != IDLE) & ~starved; spc[paused] = IDLE; burst_end = k + self.FAIR_STEPS; p = int(_min(spc))
          if k >= check: check = k + min(self.FAIR_STEPS, self.HOLD_STEPS)
        if p == IDLE:
          if held.any():   # the others are at the next barrier or done: one held wave per workgroup runs, alone
            idx = np.flatnonzero(held); go = idx[np.unique(self.wg[idx], return_index=True)[1]]
            held[go] = False; issued[go] = k; spc = np.full(self.n, IDLE); spc[go] = self.pc[go]; continue
          if not self.barrier.any(): return
          # every live wave of every workgroup has arrived. A wave whose LDS writes are still in flight (it did not
          # wait for them before s_barrier: no workgroup release fence) may be descheduled right after the barrier
          # for as long as the hardware likes, so the mock holds it back until its workgroup's other waves are at
          # their next barrier or done, then runs the held ones one after another: a reader never sees those writes
          # by the luck of running in step with the writer's acquire wait (AMDGPUUsage memory model: only the
          # release fence's s_waitcnt lgkmcnt(0) before s_barrier orders them; audit g30 row 1)
          held = self.barrier & self._lds_in_flight(); held_at = k; issued[:] = k   # (waiting at a barrier is no starving)
          self.barrier[:] = False
          spc = np.where(self.done | held, IDLE, self.pc); continue
        here = spc == p; cnt = int(np.count_nonzero(here))
        if cnt == self.n: sel = slice(None)
        else:   # a run of neighbouring waves (others finished or elsewhere) is a slice: views instead of gathers
          sel = np.flatnonzero(here)
          if sel[-1] - sel[0] + 1 == cnt: sel = slice(int(sel[0]), int(sel[-1]) + 1)
        inst = self.cache.get(p) or self._fetch(p)
        self.wave_insts += cnt
        issued[sel] = k
        try: nxt = self.step(inst, sel)
        except (EmulatorError, MemoryFault) as e: raise type(e)(f"{inst.name} at 0x{inst.addr:x}: {e}") from None
        except IndexError as e: raise EmulatorError(f"{inst.name} at 0x{inst.addr:x}: register out of range ({e})") from None
        self.pc[sel] = npc = inst.addr + inst.size if nxt is None else nxt
        if inst.enc == "SOPP" and inst.name in ("s_endpgm", "s_endpgm_saved", "s_barrier"): spc = np.where(self.done | self.barrier | held | paused, IDLE, self.pc)
        else: spc[sel] = npc
    raise EmulatorError(f"kernel did not finish within {max_steps} steps")

  # code in memory (launch.dispatch): pc -> (bytes, Inst) decoded by earlier dispatches of the same address, and the
  # ones this dispatch fetches (None: code given as bytes, whose cache is kept by the bytes themselves)
  known: dict[int, tuple[bytes, Inst]] | None = None
  fetched: dict[int, tuple[bytes, Inst]] | None = None
  def _fetch(self, p: int) -> Inst:
    """The instruction at `p`, fetched when a wave first reaches it: an earlier dispatch's decode of the bytes there
    when they are still those bytes (memory may have been rewritten or reused since), else decoded now."""
    hit = None if self.known is None else self.known.get(p)
    if hit is None or self.code[p:p + len(hit[0])].tobytes() != hit[0]:
      inst = self.decode_one(self.code, p); hit = (bytes(self.code[p:p + inst.size]), inst)
    if self.fetched is not None: self.fetched[p] = hit
    self.cache[p] = hit[1]
    return hit[1]

  def _lds_in_flight(self) -> np.ndarray:
    """(n,) bool: the waves with LDS writes or atomics still in flight (queued by _ds, not yet retired)."""
    out = np.zeros(self.n, bool)
    for kind, _, waves, rowwave, _, _ in self.pending["lgkm"]:
      if kind == "d" and len(rowwave): out[rowwave if waves is None else waves[rowwave]] = True
    return out

  def step(self, i: Inst, sel):
    if (h := self._handlers.get(i.enc)) is None:   # (the encoding's handler, looked up once per Waves)
      if (h := getattr(self, "_" + i.enc.lower(), None)) is None: raise EmulatorError(f"{i.enc} is not implemented")
      self._handlers[i.enc] = h
    return h(i, sel)

  def nw(self, sel) -> int:
    """How many waves `sel` picks: slice(None) (all), a slice of neighbours, or an index array."""
    return (self.n if sel.stop is None else sel.stop - sel.start) if isinstance(sel, slice) else len(sel)
  def get_exec(self, sel) -> np.ndarray:
    """EXEC of the waves in `sel`: uint32 (wave32) or uint64 (wave64, the EXEC_LO/EXEC_HI pair)."""
    if self.LANES == 32: return self.s[EXEC, sel]
    return self.s[EXEC, sel].astype(np.uint64) | (self.s[EXEC + 1, sel].astype(np.uint64) << np.uint64(32))
  def set_exec(self, sel, m) -> None:
    self.swrite(EXEC, sel, _per_wave(m, self.nw(sel)), self.LANES == 64)
  def exec_mask(self, sel) -> np.ndarray:
    return self.exec_lanes(sel)[0]
  def exec_lanes(self, sel) -> tuple[np.ndarray, tuple]:
    """(EXEC of the waves in `sel` as (n, LANES) bool, its active lanes as np.nonzero gives them). Every lane on (the
    common case) is one shared array. Both are read-only and cached by EXEC's bytes: a kernel's few EXEC patterns
    are unpacked once, not at every instruction."""
    ex = self.get_exec(sel); key = ex.tobytes()
    if (hit := self._masks.get(key)) is not None: return hit
    if (ex == (0xFFFFFFFF if self.LANES == 32 else 0xFFFFFFFFFFFFFFFF)).all():
      if (m := self._full.get(len(ex))) is None: m = self._full[len(ex)] = np.ones((len(ex), self.LANES), bool)
    else: m = unpack_mask(ex, self.LANES)
    m.flags.writeable = False; lanes = np.nonzero(m)
    for a in lanes: a.flags.writeable = False
    if len(self._masks) >= 4096: self._masks.clear()
    hit = self._masks[key] = (m, lanes)
    return hit

  # ---- scalar operands
  def sread(self, code: int, sel, i: Inst, t: str = "u32"):
    wide = V.BITS.get(t, 32) == 64
    if code == self.NULL:   # SGPR_NULL reads 0 at any width, not s124 then M0 (RDNA3 ISA "Scalar Operands"; audit x30 row 5)
      return np.zeros(self.nw(sel), np.uint64 if wide else np.uint32)
    if code < 128:
      lo = self.s[code, sel]
      return lo.astype(np.uint64) | (self.s[code + 1, sel].astype(np.uint64) << np.uint64(32)) if wide else lo
    if code == SCC_SRC: return self.scc[sel].astype(np.uint64 if wide else np.uint32)
    if code == LIT:
      if t == "f64": return np.uint64(i.lit << 32)
      if t == "i64": return np.uint64((i.lit - (1 << 32) if i.lit >> 31 else i.lit) & (2**64 - 1))
      return np.uint64(i.lit) if wide else np.uint32(i.lit)
    return _inline(code, t)
  def swrite(self, d: int, sel, val, wide: bool = False) -> None:
    if d == self.NULL: return
    if d >= 128 or (wide and d + 1 >= 128): raise EmulatorError(f"scalar destination {d} is not writable")
    val = np.asarray(val)
    if wide:
      val = val.astype(np.uint64)
      self.s[d, sel] = (val & np.uint64(0xFFFFFFFF)).astype(np.uint32); self.s[d + 1, sel] = (val >> np.uint64(32)).astype(np.uint32)
    else: self.s[d, sel] = val.astype(np.uint32)

  # ---- SALU
  def _sop2(self, i: Inst, sel):
    n = i.base; w64 = n.endswith(("_b64", "_i64", "_u64"))
    t = "u64" if w64 else "u32"
    a = self.sread(i.f["ssrc0"], sel, i, "i64" if n in ("s_ashr_i64", "s_bfe_i64") else t)
    b = self.sread(i.f["ssrc1"], sel, i, "u32" if n in ("s_lshl_b64", "s_lshr_b64", "s_ashr_i64", "s_bfe_u64", "s_bfe_i64") else t)
    a, b = np.asarray(a), np.asarray(b)
    scc, U, one = None, np.uint32, np.uint32(1)
    sx = lambda x: x.astype(np.uint32).view(np.int32).astype(np.int64)
    if n == "s_add_u32": r = a.astype(np.uint64) + b; scc = r >> np.uint64(32)
    elif n == "s_sub_u32": r = a.astype(np.int64) - b.astype(np.int64); scc = r < 0
    elif n == "s_addc_u32": r = a.astype(np.uint64) + b.astype(np.uint64) + np.asarray(self.scc[sel]).astype(np.uint64); scc = r >> np.uint64(32)
    elif n == "s_subb_u32": r = a.astype(np.int64) - b.astype(np.int64) - np.asarray(self.scc[sel]).astype(np.int64); scc = r < 0
    elif n in ("s_add_i32", "s_sub_i32"):
      r = sx(a) + sx(b) if n == "s_add_i32" else sx(a) - sx(b); scc = (r > 2**31 - 1) | (r < -2**31)
    elif n == "s_absdiff_i32": r = np.abs(sx(a) - sx(b)); scc = r != 0
    elif n in ("s_lshl_b32", "s_lshl_b64"): r = a << (b & U(63 if w64 else 31)).astype(a.dtype); scc = r != 0
    elif n in ("s_lshr_b32", "s_lshr_b64"): r = a >> (b & U(63 if w64 else 31)).astype(a.dtype); scc = r != 0
    elif n == "s_ashr_i32": r = sx(a) >> (b & U(31)).astype(np.int64); scc = r != 0
    elif n == "s_ashr_i64": r = a.view(np.int64) >> (b & U(63)).astype(np.int64); scc = r != 0
    elif n.startswith("s_lshl") and n.endswith("_add_u32"):
      r = (a.astype(np.uint64) << np.uint64(int(n[6]))) + b
      scc = (r >> np.uint64(32)) != 0   # carry out of the 32-bit result
    elif n in ("s_min_i32", "s_max_i32"): r = (np.minimum if "min" in n else np.maximum)(sx(a), sx(b)); scc = r == sx(a)
    elif n in ("s_min_u32", "s_max_u32"): r = (np.minimum if "min" in n else np.maximum)(a, b); scc = r == a
    elif n[:-4] in ("s_and", "s_or", "s_xor", "s_nand", "s_nor", "s_xnor", "s_and_not1", "s_or_not1"):
      r = {"s_and": lambda: a & b, "s_or": lambda: a | b, "s_xor": lambda: a ^ b, "s_nand": lambda: ~(a & b), "s_nor": lambda: ~(a | b),
           "s_xnor": lambda: ~(a ^ b), "s_and_not1": lambda: a & ~b, "s_or_not1": lambda: a | ~b}[n[:-4]]()
      scc = r != 0
    elif n in ("s_bfe_u32", "s_bfe_i32", "s_bfe_u64", "s_bfe_i64"):
      off, w = (b & U(63 if w64 else 31)).astype(np.uint64), ((b >> U(16)) & U(0x7F)).astype(np.uint64)
      r = (a.astype(np.uint64) >> off) & ((np.uint64(1) << w) - np.uint64(1))
      if n.endswith(("i32", "i64")):
        bits = np.uint64(64 if w64 else 32)
        sh = np.where(w > 0, bits - w, np.uint64(0)).astype(np.uint64)
        r = np.where(w > 0, ((r << sh).view(np.int64) >> sh.astype(np.int64)).view(np.uint64) if w64 else
                     ((r << sh).astype(np.uint32).view(np.int32) >> sh.astype(np.int32)).astype(np.int64).astype(np.uint64), 0)
      scc = r != 0
    elif n == "s_bfm_b32": r = ((one << (a & U(31))) - one) << (b & U(31))
    elif n == "s_mul_i32": r = a * b
    elif n == "s_mul_hi_u32": r = (a.astype(np.uint64) * b) >> np.uint64(32)
    elif n == "s_mul_hi_i32": r = (sx(a) * sx(b)) >> 32
    elif n in ("s_cselect_b32", "s_cselect_b64"): r = np.where(self.scc[sel] != 0, a, b)
    elif n == "s_pack_ll_b32_b16": r = (a & U(0xFFFF)) | (b << U(16))
    elif n == "s_pack_lh_b32_b16": r = (a & U(0xFFFF)) | (b & U(0xFFFF0000))
    elif n == "s_pack_hh_b32_b16": r = (a >> U(16)) | (b & U(0xFFFF0000))
    else: raise EmulatorError("SOP2 op not implemented")
    r = _per_wave(r, self.nw(sel))
    self.swrite(i.f["sdst"], sel, r.astype(np.uint64) & np.uint64(2**64 - 1 if w64 else 2**32 - 1), w64)
    if scc is not None: self.scc[sel] = np.asarray(scc).astype(bool).astype(np.uint32)

  def _sop1(self, i: Inst, sel):
    n = i.base; w64 = n.endswith("_b64") and n != "s_bcnt1_i32_b64"
    a = _per_wave(self.sread(i.f["ssrc0"], sel, i, "u64" if w64 or n == "s_bcnt1_i32_b64" else "u32"), self.nw(sel))
    d, U = i.f["sdst"], np.uint32
    if n in ("s_mov_b32", "s_mov_b64"): return self.swrite(d, sel, a, w64)
    if n in ("s_cmov_b32", "s_cmov_b64"):
      old = self.sread(d, sel, i, "u64" if w64 else "u32"); return self.swrite(d, sel, np.where(self.scc[sel] != 0, a, old), w64)
    if "saveexec" in n or "wrexec" in n:
      ex = self.get_exec(sel).copy(); a = a.astype(ex.dtype)
      r = {"s_and_saveexec": a & ex, "s_or_saveexec": a | ex, "s_xor_saveexec": a ^ ex, "s_and_not0_saveexec": ~ex & a,
           "s_and_not1_saveexec": a & ~ex, "s_or_not1_saveexec": a | ~ex, "s_and_not1_wrexec": a & ~ex,
           "s_and_not0_wrexec": ~ex & a}[n[:-4]]
      self.set_exec(sel, r); self.scc[sel] = (r != 0).astype(U)
      self.swrite(d, sel, r if "wrexec" in n else ex, self.LANES == 64)
      return
    sgn = a.astype(U).view(np.int32)
    r, scc = {"s_not_b32": lambda: (~a, ~a != 0), "s_not_b64": lambda: (~a, ~a != 0), "s_brev_b32": lambda: (V._bfrev(a), None),
              "s_abs_i32": lambda: (np.abs(sgn.astype(np.int64)).astype(U), np.abs(sgn) != 0),
              "s_bcnt1_i32_b32": lambda: (V._popc(a), V._popc(a) != 0), "s_bcnt0_i32_b32": lambda: (32 - V._popc(a), 32 - V._popc(a) != 0),
              "s_bcnt1_i32_b64": lambda: (V._popc(a & np.uint64(0xFFFFFFFF)) + V._popc(a >> np.uint64(32)), None),
              "s_ctz_i32_b32": lambda: (V._ctz(a), None), "s_clz_i32_u32": lambda: (V._clz(a), None),
              "s_cls_i32": lambda: (V._cls(a), None),
              "s_sext_i32_i8": lambda: (a.astype(np.uint8).view(np.int8).astype(np.int32).view(U), None),
              "s_sext_i32_i16": lambda: (a.astype(np.uint16).view(np.int16).astype(np.int32).view(U), None),
              "s_bitset0_b32": lambda: (self.s[d, sel] & ~(U(1) << (a & U(31))), None),
              "s_bitset1_b32": lambda: (self.s[d, sel] | (U(1) << (a & U(31))), None),
              "s_getpc_b64": lambda: (np.full(self.nw(sel), self.code_va + i.addr + 4, np.uint64), None)}.get(n, lambda: (None, None))()
    if r is None: raise EmulatorError("SOP1 op not implemented")
    if n == "s_bcnt1_i32_b64": scc = r != 0
    self.swrite(d, sel, r, w64 or n == "s_getpc_b64")
    if scc is not None: self.scc[sel] = np.asarray(scc).astype(U)

  def _sopc(self, i: Inst, sel):
    n = i.base; t = n[-3:]
    a = np.asarray(self.sread(i.f["ssrc0"], sel, i, "u64" if t == "u64" else "u32"))
    b = np.asarray(self.sread(i.f["ssrc1"], sel, i, "u64" if t == "u64" else "u32"))
    if n.startswith("s_bitcmp"):
      bit = (a >> (b & np.uint32(31))) & np.uint32(1); r = bit == (0 if n == "s_bitcmp0_b32" else 1)
    else:
      if t == "i32": a, b = a.view(np.int32), b.view(np.int32)
      r = V.CMP_I[{"lg": "ne"}.get(n.split("_")[2], n.split("_")[2])](a, b)
    self.scc[sel] = np.broadcast_to(r, (self.nw(sel),)).astype(np.uint32)

  def _sopk(self, i: Inst, sel):
    n, d, k = i.base, i.f["sdst"], i.f["simm16"]
    ks = k - 0x10000 if k & 0x8000 else k
    if n == "s_movk_i32": return self.swrite(d, sel, np.full(self.nw(sel), ks & 0xFFFFFFFF, np.uint32))
    if n == "s_cmovk_i32": return self.swrite(d, sel, np.where(self.scc[sel] != 0, np.uint32(ks & 0xFFFFFFFF), self.s[d, sel]))
    if n in ("s_version", "s_waitcnt_vscnt", "s_waitcnt_expcnt"): return None   # stores and exports complete at issue
    if n in ("s_waitcnt_vmcnt", "s_waitcnt_lgkmcnt"):
      if d != self.NULL: raise EmulatorError("a waitcnt count taken from an SGPR is not supported")
      return self._retire("vm" if n == "s_waitcnt_vmcnt" else "lgkm", sel, k & 63)
    cur = self.s[d, sel]
    if n == "s_addk_i32":
      r = cur.view(np.int32).astype(np.int64) + ks
      self.scc[sel] = ((r > 2**31 - 1) | (r < -2**31)).astype(np.uint32); return self.swrite(d, sel, r.astype(np.uint32))
    if n == "s_mulk_i32": return self.swrite(d, sel, (cur.view(np.int32).astype(np.int64) * ks).astype(np.uint32))
    if n.startswith("s_cmpk_"):
      cond, t = n.split("_")[2], n.split("_")[3]
      a, b = (cur.view(np.int32), np.int32(ks)) if t == "i32" else (cur, np.uint32(k))
      self.scc[sel] = V.CMP_I[{"lg": "ne"}.get(cond, cond)](a, b).astype(np.uint32); return None
    raise EmulatorError("SOPK op not implemented")

  def _mubuf(self, i: Inst, sel):
    # only the GL0/GL1 invalidations decode as MUBUF. buffer_gl0_inv drops the wave's L0 lines (set_gl0) at issue: the
    # L0 serves a wave's requests in order, and LLVM emits no wait between it and the acquiring loads. GL1 is not
    # modelled (set_gl0); buffer_gl1_inv drops the lines of the wave's SA's GL1 the same way.
    if i.base == "buffer_gl0_inv" and self.gl0 is not None: self.gl0.invalidate(self.gl0_of[sel])
    if i.base == "buffer_gl1_inv" and self.gl1 is not None: self.gl1.invalidate(self.sa_of[sel])
    return None

  def _sopp(self, i: Inst, sel):
    n, k = i.base, i.f["simm16"]
    target = i.addr + 4 + 4 * (k - 0x10000 if k & 0x8000 else k)
    if n == "s_endpgm" or n == "s_endpgm_saved": self._land_own_lds(sel); self.done[sel] = True; return None
    if n == "s_barrier": self.barrier[sel] = True; return None
    if n == "s_branch": return target
    if n.startswith("s_cbranch_"):
      c = n[10:]
      take = {"scc0": lambda: self.scc[sel] == 0, "scc1": lambda: self.scc[sel] != 0, "vccz": lambda: self.smask(VCC, sel) == 0,
              "vccnz": lambda: self.smask(VCC, sel) != 0, "execz": lambda: self.get_exec(sel) == 0, "execnz": lambda: self.get_exec(sel) != 0}[c]()
      return np.where(take, target, i.addr + 4)
    if n == "s_waitcnt":
      vm, lgkm = self.waitcnt_fields(k)
      self._retire("vm", sel, vm); self._retire("lgkm", sel, lgkm); return None
    if n in ("s_nop", "s_delay_alu", "s_clause", "s_waitcnt_depctr", "s_set_inst_prefetch_distance", "s_sleep",
             "s_setprio", "s_icache_inv", "s_wait_idle", "s_ttracedata"): return None
    # the one message a compute kernel sends: MSG_DEALLOC_VGPRS (gfx11 id 3) before s_endpgm; others would need the SPI
    if n == "s_sendmsg":
      if k == 3: return None
      raise EmulatorError(f"message {k:#x} is not emulated (only MSG_DEALLOC_VGPRS)")
    # FP modes are not modelled: the emulator rounds to nearest even and keeps denormals, so only switching to that is fine
    if (n, k) in (("s_round_mode", 0), ("s_denorm_mode", 0xF)): return None
    if n in ("s_round_mode", "s_denorm_mode"): raise EmulatorError(f"mode {k:#x} is not emulated (only round to nearest even, denormals kept)")
    raise EmulatorError("SOPP op not implemented")

  @staticmethod
  def waitcnt_fields(k: int) -> tuple[int, int]:
    """(vmcnt, lgkmcnt) of an s_waitcnt immediate; gfx11 layout: expcnt [2:0], lgkmcnt [9:4], vmcnt [15:10]."""
    return (k >> 10) & 63, (k >> 4) & 63

  def smask(self, code: int, sel, i: Inst | None = None) -> np.ndarray:
    """A lane-mask operand (VCC, an SGPR or pair, a constant) as one integer per wave of the wave's width."""
    return _per_wave(self.sread(code, sel, i, self.mask_t), self.nw(sel))

  def _smem(self, i: Inst, sel):
    n = i.base
    if n == "s_dcache_inv": return
    if not n.startswith("s_load_b"): raise EmulatorError("SMEM op not implemented")
    nd = int(n[8:]) // 32
    addr = self.sread(i.f["sbase"], sel, i, "u64") + np.uint64(i.f["offset"] & (2**64 - 1))
    if i.f["soffset"] != self.NULL: addr = addr + self.s[i.f["soffset"], sel].astype(np.uint64)
    data = self.mem.read(np.broadcast_to(addr, (self.nw(sel),)), 4 * nd, n).view(np.uint32)
    if i.f["sdata"] + nd > 124: raise EmulatorError("scalar load destination out of range")
    self.pending["lgkm"].append(("s", i.f["sdata"], self._gidx(sel), None, np.ascontiguousarray(data.T), None))

  # ---- VALU
  def vsrc(self, code: int, sel, i: Inst, t: str, hi: bool = False):
    """Source operand as an array of type `t`, broadcastable to (n, LANES)."""
    bits = V.BITS[t]
    if code >= 256:
      raw = self.v[code - 256, sel]
      if bits == 32: return raw.view(V.NP[t])   # (the common case: one VGPR, already uint32)
      if bits == 64: raw = raw.astype(np.uint64) | (self.v[code - 255, sel].astype(np.uint64) << np.uint64(32))
    else:
      raw = np.asarray(self.sread(code, sel, i, t))
      if raw.ndim == 1: raw = raw[:, None]
      if code >= 128 and code != SCC_SRC and not (code == LIT and bits == 16): return raw.view(V.NP[t]) if raw.dtype.itemsize * 8 == bits else \
          raw.astype({16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]).view(V.NP[t])
    if bits == 16: return ((raw >> np.uint32(16)) if hi else raw).astype(np.uint16).view(V.NP[t])
    if bits == 64: return raw.astype(np.uint64).view(V.NP[t])
    return raw.astype(np.uint32, copy=False).view(V.NP[t])

  def vwrite(self, d: int, sel, val, t: str, ex: np.ndarray, hi: bool = False) -> None:
    bits = V.BITS[t]; nw = self.nw(sel)
    val = np.asarray(val).astype(V.NP[t], copy=False)
    if val.shape != (nw, self.LANES): val = np.broadcast_to(val, (nw, self.LANES))
    full = ex is self._full.get(nw)   # exec_mask's shared all-lanes array: no merge with the old values
    if bits == 64:
      raw = val.view(np.uint64)
      lo, hi_ = raw.astype(np.uint32), (raw >> np.uint64(32)).astype(np.uint32)   # uint64 -> uint32 keeps the low word
      self.v[d, sel] = lo if full else np.where(ex, lo, self.v[d, sel])
      self.v[d + 1, sel] = hi_ if full else np.where(ex, hi_, self.v[d + 1, sel])
    elif bits == 16:
      old = self.v[d, sel]; h = val.view(np.uint16).astype(np.uint32)
      new = (old & np.uint32(0xFFFF)) | (h << np.uint32(16)) if hi else (old & np.uint32(0xFFFF0000)) | h
      self.v[d, sel] = new if full else np.where(ex, new, old)
    elif full: self.v[d, sel] = val.view(np.uint32)   # (any other mask merges: the same values where all lanes are on)
    else: self.v[d, sel] = np.where(ex, val.view(np.uint32), self.v[d, sel])

  def mask(self, code: int, sel, i: Inst) -> np.ndarray:
    return unpack_mask(self.smask(code, sel, i), self.LANES)

  def alu(self, i: Inst, sel, base: str, srcs: list[int], vdst: int, ex, abs_=0, neg=0, opsel=0, clamp=0, omod=0, sdst=None, write=True):
    """Run one VALU op; returns a deferred write (for VOPD) or performs it."""
    if base in V.CARRY:
      a, b = self.vsrc(srcs[0], sel, i, "u32"), self.vsrc(srcs[1], sel, i, "u32")
      ci = self.mask(srcs[2], sel, i).astype(np.uint64) if base.endswith("_ci_u32") else 0
      r, co = V.CARRY[base](a, b, ci)
      def w():
        self.vwrite(vdst, sel, r, "u32", ex); self.swrite(sdst, sel, pack_mask(co & ex), self.LANES == 64)
      return w() if write else w
    if base in ("v_mad_u64_u32", "v_mad_i64_i32"):
      t = "u32" if base == "v_mad_u64_u32" else "i32"
      a, b = self.vsrc(srcs[0], sel, i, t), self.vsrc(srcs[1], sel, i, t)
      c = self.vsrc(srcs[2], sel, i, "u64" if t == "u32" else "i64")
      r = (a.astype(np.uint64 if t == "u32" else np.int64) * b).astype(c.dtype) + c
      def w():
        self.vwrite(vdst, sel, r.view(np.uint64) if r.dtype == np.int64 else r, "u64", ex)
        self.swrite(sdst, sel, np.zeros(self.nw(sel), np.uint64), self.LANES == 64)
      return w() if write else w
    if base in ("v_div_scale_f32", "v_div_scale_f64"):
      t = base[-3:]; s0, s1, s2 = (self._mod(self.vsrc(c, sel, i, t), k, abs_, neg) for k, c in enumerate(srcs))
      r, vcc = _div_scale(s0, s1, s2)
      def w(): self.vwrite(vdst, sel, r, t, ex); self.swrite(sdst, sel, pack_mask(vcc & ex), self.LANES == 64)
      return w() if write else w
    if base in ("v_div_fmas_f32", "v_div_fmas_f64"):
      t = base[-3:]; a, b, c = (self._mod(self.vsrc(s, sel, i, t), k, abs_, neg) for k, s in enumerate(srcs))
      r = V._div_fmas(a, b, c, self.mask(VCC, sel, i))
      def w(): self.vwrite(vdst, sel, r, t, ex)
      return w() if write else w
    if base == "v_cndmask_b32":
      a, b = self.vsrc(srcs[0], sel, i, "f32" if abs_ or neg else "u32"), self.vsrc(srcs[1], sel, i, "f32" if abs_ or neg else "u32")
      a, b = self._mod(a, 0, abs_, neg), self._mod(b, 1, abs_, neg)
      r = np.where(self.mask(srcs[2], sel, i), b, a)
      def w(): self.vwrite(vdst, sel, r.view(np.uint32), "u32", ex)
      return w() if write else w
    if base.startswith(("v_cmp_", "v_cmpx_")):
      t, fn = V.compare(base)
      a = self._mod(self.vsrc(srcs[0], sel, i, t, bool(opsel & 1)), 0, abs_, neg)
      b = self.vsrc(srcs[1], sel, i, "u32" if "class" in base else t, bool(opsel & 2))
      if "class" not in base: b = self._mod(b, 1, abs_, neg)
      r = pack_mask(np.broadcast_to(fn(a, b), (self.nw(sel), self.LANES)) & ex)
      if base.startswith("v_cmpx_"):
        self.set_exec(sel, r)
        # GFX9 v_cmpx writes the mask to VCC (VOPC) or its SGPR pair (VOP3) as well as EXEC; gfx11's writes EXEC only
        # (llvm-project AMDGPU VOPCInstructions.td: the GFX9 cmpx forms have an sdst, the gfx10+ "nosdst" ones none)
        # (an SDWA VOPC names its SGPR destination in the SDWA word: the caller passes it as sdst)
        if self.LANES == 64: self.swrite(i.f["vdst"] if i.enc == "VOP3" else VCC if sdst is None else sdst, sel, r, True)
      else: self.swrite(sdst, sel, r, self.LANES == 64)
      return None
    L = self.LANES
    if base in ("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32"):   # lanes below this one: lo counts mask bits 0-31, hi 32-63
      a, b = self.vsrc(srcs[0], sel, i, "u32"), self.vsrc(srcs[1], sel, i, "u32")
      below = np.clip(np.arange(L) - (32 if base.endswith("hi_u32_b32") else 0), 0, 32).astype(np.uint64)
      r = V._popc((a & ((np.uint64(1) << below) - np.uint64(1)).astype(np.uint32)).astype(np.uint32)) + b
      def w(): self.vwrite(vdst, sel, r, "u32", ex)
      return w() if write else w
    if base == "v_readfirstlane_b32":
      first = np.argmax(self.exec_mask(sel), axis=1)   # lowest active lane; lane 0 when none is
      src = np.broadcast_to(self.vsrc(srcs[0], sel, i, "u32"), (self.nw(sel), L))
      lane = first.astype(np.int64)
      return self.swrite(vdst, sel, src[np.arange(self.nw(sel)), lane])
    if base == "v_readlane_b32":
      src = np.broadcast_to(self.vsrc(srcs[0], sel, i, "u32"), (self.nw(sel), L))
      lane = (np.broadcast_to(np.asarray(self.sread(srcs[1], sel, i)), (self.nw(sel),)) & np.uint32(L - 1)).astype(np.int64)
      return self.swrite(vdst, sel, src[np.arange(self.nw(sel)), lane])
    if base == "v_writelane_b32":
      val = np.broadcast_to(np.asarray(self.sread(srcs[0], sel, i)), (self.nw(sel),))
      lane = (np.broadcast_to(np.asarray(self.sread(srcs[1], sel, i)), (self.nw(sel),)) & np.uint32(L - 1)).astype(np.int64)
      onehot = np.arange(L)[None, :] == lane[:, None]
      return self.vwrite(vdst, sel, np.where(onehot, val[:, None], self.v[vdst, sel]), "u32", np.ones_like(onehot))
    if base not in V.OPS: raise EmulatorError("VALU op not implemented")
    types, rt, fn = V.OPS[base]
    if self.TRUE16 and i.enc in ("VOP1", "VOP2", "VOPC"):
      # 32-bit encodings address 16-bit operands by register half: VGPR field bit 7 picks the high half (v0.h)
      for k, t in enumerate(types):
        if V.BITS[t] == 16 and srcs[k] >= 256 + 128: srcs = [*srcs[:k], srcs[k] - 128, *srcs[k + 1:]]; opsel |= 1 << k
      if V.BITS[rt] == 16 and vdst >= 128: vdst -= 128; opsel |= 8
    args = [self._mod(self.vsrc(c, sel, i, t, bool(opsel >> k & 1)), k, abs_, neg) for k, (c, t) in enumerate(zip(srcs, types))]
    r = np.asarray(fn(*args))   # (run() ignores floating-point warnings)
    # a deferred write (VOPD) must hold its value now: a plain move returns a view of its source VGPR, which the
    # other half of the pair may overwrite first
    if not write: r = r.copy()
    if rt[0] == "f":
      if omod: r = r * np.asarray({1: 2.0, 2: 4.0, 3: 0.5}[omod], r.dtype)
      if clamp: r = np.clip(r, 0, 1).astype(r.dtype)
    if base in self.ZERO_HI16 and not opsel >> 3 & 1:   # the 16-bit result is written zero-extended to 32 bits
      r, rt = r.astype(V.NP[rt], copy=False).view(np.uint16 if V.BITS[rt] == 16 else V.NP[rt]).astype(np.uint32), "u32"
    def w(): self.vwrite(vdst, sel, r.astype(V.NP[rt], copy=False), rt, ex, bool(opsel >> 3 & 1))
    return w() if write else w

  @staticmethod
  def _mod(x, k: int, abs_: int, neg: int):
    if x.dtype.kind != "f": return x
    if abs_ >> k & 1: x = np.abs(x)
    if neg >> k & 1: x = -x
    return x

  def _vop1(self, i: Inst, sel):
    if i.base == "v_nop": return None
    if i.base == "v_swap_b32":
      ex = self.exec_mask(sel); a, b = self.v[i.f["vdst"], sel].copy(), self.v[i.f["src0"] - 256, sel].copy()
      self.vwrite(i.f["vdst"], sel, b, "u32", ex); self.vwrite(i.f["src0"] - 256, sel, a, "u32", ex); return None
    return self.alu(i, sel, i.base, [i.f["src0"]], i.f["vdst"], self.exec_mask(sel))

  def _vop2(self, i: Inst, sel):
    b, f = i.base, i.f; s0, s1, d = f["src0"], f["vsrc1"] + 256, f["vdst"]
    srcs = {"v_fmac_f32": [s0, s1, d + 256], "v_fmac_f16": [s0, s1, d + 256], "v_fmamk_f32": [s0, LIT, s1], "v_fmamk_f16": [s0, LIT, s1],
            "v_fmaak_f32": [s0, s1, LIT], "v_fmaak_f16": [s0, s1, LIT], "v_cndmask_b32": [s0, s1, VCC]}.get(b, [s0, s1, VCC])
    return self.alu(i, sel, b, srcs, d, self.exec_mask(sel), sdst=VCC)

  def _vopc(self, i: Inst, sel):
    return self.alu(i, sel, i.base, [i.f["src0"], i.f["vsrc1"] + 256], 0, self.exec_mask(sel), sdst=VCC)

  def _vop3(self, i: Inst, sel):
    f = i.f; b = i.base; srcs = [f["src0"], f["src1"], f["src2"]]
    if b in ("v_fmac_f32", "v_fmac_f16"): srcs[2] = f["vdst"] + 256
    sdst = f["vdst"] if b.startswith("v_cmp_") else f.get("sdst")
    return self.alu(i, sel, b, srcs, f["vdst"], self.exec_mask(sel), f["abs"], f["neg"], f["opsel"], f["clamp"], f["omod"], sdst)
  _vop3sd = _vop3

  def _vop3p(self, i: Inst, sel):
    f = i.f; ex = self.exec_mask(sel)
    if i.base in ("v_fma_mix_f32", "v_fma_mixlo_f16", "v_fma_mixhi_f16"):
      args = []
      for k, code in enumerate((f["src0"], f["src1"], f["src2"])):
        # op_sel_hi picks f16 (else f32) per source, op_sel its high half; neg_hi is abs for these ops
        is16, hi = bool(f["opsel_hi"] >> k & 1) if k < 2 else bool(f["opsel_hi2"]), bool(f["opsel"] >> k & 1)
        x = self.vsrc(code, sel, i, "f16" if is16 else "f32", hi).astype(np.float32)
        if f["neg_hi"] >> k & 1: x = np.abs(x)
        if f["neg"] >> k & 1: x = -x
        args.append(x)
      r = args[0].astype(np.float64) * args[1] + args[2]   # one rounding, straight to the result type
      if f["clamp"]: r = np.clip(r, 0, 1)
      if i.base == "v_fma_mix_f32": return self.vwrite(f["vdst"], sel, r.astype(np.float32), "f32", ex)
      return self.vwrite(f["vdst"], sel, r.astype(np.float16), "f16", ex, i.base.endswith("hi_f16"))
    if i.base in ("v_dot4_u32_u8", "v_dot4_i32_iu8", "v_dot4_i32_i8"):   # three 32-bit sources, no halves (V.dot4)
      if f["clamp"]: raise EmulatorError("the saturating (clamp) form of the integer dot product is not emulated")
      # the ISA guides give these ops no OPSEL/NEG_HI meaning, and NEG only on gfx11's iu8 form (src0/src1 signedness):
      # llvm-mc still encodes the others, so refuse them rather than guess what the hardware does with them
      bad = f["neg"] & (4 if i.base == "v_dot4_i32_iu8" else 7)
      if f["opsel"] or f["neg_hi"] or bad: raise EmulatorError(
        f"op_sel {f['opsel']:#x} / neg_lo {f['neg']:#x} / neg_hi {f['neg_hi']:#x}: modifiers the ISA does not define here")
      a, b, c = (self.vsrc(code, sel, i, "u32") for code in (f["src0"], f["src1"], f["src2"]))
      # gfx11's iu8 form: NEG[0]/NEG[1] make src0/src1 signed; gfx9's i8 form: both signed; u8: neither
      sa, sb = (bool(f["neg"] & 1), bool(f["neg"] & 2)) if i.base == "v_dot4_i32_iu8" else (i.base == "v_dot4_i32_i8",) * 2
      return self.vwrite(f["vdst"], sel, V.dot4(a, b, c, sa, sb), "u32", ex)
    pk = {"v_pk_add_f16": ("f16", np.add), "v_pk_mul_f16": ("f16", np.multiply), "v_pk_fma_f16": ("f16", V._fma),
          "v_pk_max_f16": ("f16", np.fmax), "v_pk_min_f16": ("f16", np.fmin), "v_pk_add_u16": ("u16", np.add),
          "v_pk_sub_u16": ("u16", np.subtract), "v_pk_mul_lo_u16": ("u16", np.multiply), "v_pk_add_i16": ("i16", np.add),
          "v_pk_sub_i16": ("i16", np.subtract), "v_pk_max_i16": ("i16", np.maximum), "v_pk_min_i16": ("i16", np.minimum),
          "v_pk_max_u16": ("u16", np.maximum), "v_pk_min_u16": ("u16", np.minimum)}.get(i.base)
    if pk is None: raise EmulatorError("VOP3P op not implemented")
    t, fn = pk; nargs = 3 if "fma" in i.base else 2; srcs = [f["src0"], f["src1"], f["src2"]][:nargs]
    halves = []
    for half in (0, 1):
      sel_bits = f["opsel"] if half == 0 else (f["opsel_hi"] | (f["opsel_hi2"] << 2))
      negs = f["neg"] if half == 0 else f["neg_hi"]
      args = [self._mod(self.vsrc(c, sel, i, t, bool(sel_bits >> k & 1)), k, 0, negs) for k, c in enumerate(srcs)]
      with np.errstate(all="ignore"): halves.append(np.broadcast_to(np.asarray(fn(*args)).astype(V.NP[t]), (self.nw(sel), self.LANES)))
    r = halves[0].view(np.uint16).astype(np.uint32) | (halves[1].view(np.uint16).astype(np.uint32) << np.uint32(16))
    self.vwrite(f["vdst"], sel, r, "u32", ex)

  def _vopd(self, i: Inst, sel):
    f = i.f; ex = self.exec_mask(sel); writes = []
    for side in "xy":
      op, s0, s1, d = f["op" + side], f["src0" + side], f["vsrc1" + side] + 256, f["vdst" + side]
      srcs = {"v_fmac_f32": [s0, s1, d + 256], "v_fmamk_f32": [s0, LIT, s1], "v_fmaak_f32": [s0, s1, LIT], "v_cndmask_b32": [s0, s1, VCC],
              "v_mov_b32": [s0]}.get(op, [s0, s1])
      writes.append(self.alu(i, sel, op, srcs, d, ex, write=False))
    for w in writes: w()   # both halves read their sources before either writes

  # ---- LDS
  def _ds(self, i: Inst, sel):
    """An LDS op. The waves' own earlier LDS writes land first (a wave's DS ops execute in order); this op's writes
    (or atomics, with their return values) then stay in flight, counted by lgkmcnt, until the writer's s_waitcnt retires them or the wave ends (or its next
    DS op). Another wave does not see them before that: on hardware a write may still be in flight when a reader
    passes s_barrier without the writer's lgkmcnt(0) (gfx942 has back-off barriers, so LLVM adds no wait before
    s_barrier: llvm-project SIInsertWaitcnts.cpp; only the workgroup release fence waits; audit g30 row 1)."""
    if i.base == "ds_nop": return None
    self._ds_writes: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []; self._ds_atom = None
    if i.base.startswith("ds_load") and (view := self._own_lds_view(sel)) is not None:
      # waves that issue together must not see each other's writes in flight: each reads its workgroup's LDS plus
      # only its own earlier writes, which land afterwards (the read executed after them)
      self._ds_view = view
      try: r = self._ds_exec(i, sel)
      finally: self._ds_view = None
      self._land_own_lds(sel)
      return r
    self._land_own_lds(sel)
    r = self._ds_exec(i, sel)
    if self._ds_writes:
      rowwave = np.concatenate([w for w, _, _ in self._ds_writes]); flat = np.concatenate([a for _, a, _ in self._ds_writes])
      data = np.concatenate([d for _, _, d in self._ds_writes]) if len({d.shape[1] for _, _, d in self._ds_writes}) == 1 else None
      if data is None: raise EmulatorError("an LDS op writing two different widths")
      self.pending["lgkm"].append(("d", 0, self._gidx(sel), rowwave, (flat, data, self._ds_atom), None))
    return r

  _ds_view: np.ndarray | None = None
  def _own_lds_view(self, sel) -> np.ndarray | None:
    """Per wave of `sel`, a copy of its workgroup's LDS with that wave's own in-flight writes applied; None when none
    of them has a write in flight (the common case: the writer waited)."""
    q = [e for e in self.pending["lgkm"] if e[0] == "d" and len(e[3])]
    if not q: return None
    member = np.zeros(self.n, bool); member[sel] = True
    if not any(member[e[3] if e[2] is None else e[2][e[3]]].any() for e in q): return None
    waves = np.arange(self.n)[sel]
    pos = np.full(self.n, -1, np.int64); pos[waves] = np.arange(len(waves))
    size = self.lds.shape[1]
    view = self.lds[self.wg[waves]].copy()
    for _, _, ew, rowwave, (flat, data, atom), _ in q:
      g = rowwave if ew is None else ew[rowwave]
      mine = member[g]
      if mine.any(): self._lds_land(view, pos[g[mine]] * size + flat[mine] % size, data[mine], _atom_rows(atom, mine), None)
    return view

  def _land_own_lds(self, sel) -> None:
    """Apply the in-flight LDS writes of the waves in `sel` (their entries stay, empty for them, so lgkmcnt still counts them)."""
    q = self.pending["lgkm"]
    if not any(e[0] == "d" for e in q): return
    member = np.zeros(self.n, bool); member[sel] = True
    for j, e in enumerate(q):
      if e[0] != "d": continue
      _, _, waves, rowwave, (flat, data, atom), _ = e
      g = rowwave if waves is None else waves[rowwave]
      mine = member[g]
      if not mine.any(): continue
      self._lds_land(self.lds, flat[mine], data[mine], _atom_rows(atom, mine), g[mine])
      q[j] = ("d", 0, waves, rowwave[~mine], (flat[~mine], data[~mine], _atom_rows(atom, ~mine)), None)

  def _lds_land(self, lds: np.ndarray, flat: np.ndarray, data: np.ndarray, atom, wave: np.ndarray | None) -> None:
    """Perform in-flight LDS rows on `lds`: a store's bytes, or an atomic read-modify-write whose old values (the
    _rtn form) go to the VGPR of each row's `wave` (None: only the LDS changes, as in the _own_lds_view copy)."""
    if atom is None: return _lds_write(lds, flat, data)
    fn, dt, reg, lane = atom
    if (flat % 4).any() or lds.size % 4: raise EmulatorError("LDS atomic misaligned")
    words, idx, val = lds.reshape(-1).view(dt), flat // 4, np.ascontiguousarray(data).view(dt)[:, 0]
    if len(np.unique(idx)) == len(idx): old = words[idx].copy(); words[idx] = fn(old, val)
    else:   # lanes hitting one address are serialised by the LDS, each returning the value the previous one left
      old = np.empty(len(idx), dt)
      for r, (k, x) in enumerate(zip(idx.tolist(), val)): old[r] = words[k]; words[k] = fn(words[k], x)
    if reg >= 0 and wave is not None: self.v[reg, wave, lane] = old.view(np.uint32)

  def _ds_exec(self, i: Inst, sel):
    n, f = i.base, i.f; ex, lanes = self.exec_lanes(sel)
    raw = self.v[f["addr"], sel][lanes]
    def at(o: int) -> np.ndarray: return (raw + np.uint32(o)).astype(np.int64)   # LDS addresses wrap at 32 bits
    wg = np.broadcast_to(self.wg[sel][:, None], ex.shape)[lanes]
    lds, size = self.lds, self.lds.shape[1]
    def rd(addr, nb):
      if (addr < 0).any() or (addr + nb > size).any(): raise MemoryFault(f"LDS read beyond the {size}-byte allocation")
      if self._ds_view is not None: return _lds_read(self._ds_view, lanes[0] * size + addr, nb)   # (_own_lds_view)
      return _lds_read(lds, wg * size + addr, nb)
    def wr(addr, data):   # queued: _ds puts the op's writes in flight
      if (addr < 0).any() or (addr + data.shape[1] > size).any(): raise MemoryFault(f"LDS write beyond the {size}-byte allocation")
      self._ds_writes.append((lanes[0], wg * size + addr, np.ascontiguousarray(data)))
    def dat(reg, nd): return np.stack([self.v[reg + k, sel][lanes] for k in range(nd)], 1).view(np.uint8)
    def put(reg, words): self._put(reg, sel, lanes, words, "lgkm")
    off = f["offset0"] | (f["offset1"] << 8)
    sizes = {"b32": 4, "b64": 8, "b96": 12, "b128": 16}
    if n.startswith("ds_store_2addr"):
      sz = sizes[n.split("_")[-1]]; st = sz * (64 if "stride64" in n else 1)
      wr(at(f["offset0"] * st), dat(f["data0"], sz // 4)); wr(at(f["offset1"] * st), dat(f["data1"], sz // 4)); return
    if n.startswith("ds_load_2addr"):
      sz = sizes[n.split("_")[-1]]; st = sz * (64 if "stride64" in n else 1)
      a, b = rd(at(f["offset0"] * st), sz), rd(at(f["offset1"] * st), sz)
      put(f["vdst"], np.concatenate([a, b], 1).view(np.uint32)); return
    if n in ("ds_store_b32", "ds_store_b64", "ds_store_b96", "ds_store_b128"): wr(at(off), dat(f["data0"], sizes[n[9:]] // 4)); return
    if n in ("ds_load_b32", "ds_load_b64", "ds_load_b96", "ds_load_b128"): put(f["vdst"], rd(at(off), sizes[n[8:]]).view(np.uint32)); return
    if n in ("ds_store_b8", "ds_store_b16", "ds_store_b8_d16_hi", "ds_store_b16_d16_hi"):
      nb = 1 if "b8" in n else 2; d = dat(f["data0"], 1)
      wr(at(off), d[:, 2:2 + nb] if n.endswith("d16_hi") else d[:, :nb]); return
    if n in ("ds_load_u8", "ds_load_i8", "ds_load_u16", "ds_load_i16"):
      nb = 1 if n[-1] == "8" else 2; raw = rd(at(off), nb).copy().view(np.uint8 if nb == 1 else np.uint16)[:, 0]
      v = raw.view(np.int8 if nb == 1 else np.int16).astype(np.int32).view(np.uint32) if n[8] == "i" else raw.astype(np.uint32)
      put(f["vdst"], v[:, None]); return
    if n == "ds_bpermute_b32":
      src = self.v[f["data0"], sel]; idx = ((self.v[f["addr"], sel].astype(np.int64) + off) // 4) & (self.LANES - 1)
      r = np.take_along_axis(src, idx, 1); self.vwrite(f["vdst"], sel, r, "u32", ex); return
    atom = {"add_u32": (np.add, np.uint32), "sub_u32": (np.subtract, np.uint32), "min_i32": (np.minimum, np.int32),
            "max_i32": (np.maximum, np.int32), "min_u32": (np.minimum, np.uint32), "max_u32": (np.maximum, np.uint32),
            "and_b32": (np.bitwise_and, np.uint32), "or_b32": (np.bitwise_or, np.uint32), "xor_b32": (np.bitwise_xor, np.uint32),
            "add_f32": (np.add, np.float32), "min_f32": (np.fmin, np.float32), "max_f32": (np.fmax, np.float32)}
    key = n[3:].replace("_rtn", "")
    if key in atom:
      # in flight like a store (counted by lgkmcnt, so only a wait orders it before s_barrier: AMDGPUUsage memory
      # model GFX942/GFX11, workgroup release = s_waitcnt lgkmcnt(0); audit x30 row 1): _lds_land performs it, and
      # writes the _rtn value, when the wave's s_waitcnt, next DS op or s_endpgm retires it
      fn, dt = atom[key]; addr = at(off)
      if (addr < 0).any() or (addr + 4 > size).any() or (addr % 4).any(): raise MemoryFault("LDS atomic outside the allocation or misaligned")
      if "_rtn" in n and f["vdst"] >= self.v.shape[0]: raise EmulatorError(f"atomic destination v{f['vdst']} beyond the kernel's VGPRs")
      self._ds_atom = (fn, dt, f["vdst"] if "_rtn" in n else -1, lanes[1])
      self._ds_writes.append((lanes[0], wg * size + addr, dat(f["data0"], 1)))
      return
    raise EmulatorError("DS op not implemented")

  # ---- global / flat memory
  # ---- loads in flight
  def _gidx(self, sel) -> np.ndarray | None:
    """The wave indices of `sel`, None for all waves (in order)."""
    if isinstance(sel, slice): return None if sel.stop is None else np.arange(sel.start, sel.stop)
    return sel

  def _put(self, reg: int, sel, lanes, words: np.ndarray, counter: str = "vm", bits: int = 0xFFFFFFFF) -> None:
    """Queue a load's result (`words`: one row per active lane) for VGPRs reg.. until s_waitcnt retires it.
    `lanes` is (slice, slice) when every lane of every wave in `sel` loaded (then the rows are wave-major)."""
    m, nd = self.nw(sel), words.shape[1]
    if reg + nd > self.v.shape[0]: raise EmulatorError(f"load destination v{reg + nd - 1} beyond the kernel's VGPRs")
    if isinstance(lanes[0], slice): mask, vals = None, np.ascontiguousarray(words.T).reshape(nd, m, self.LANES)
    else:
      mask = np.zeros((m, self.LANES), bool); mask[lanes] = True
      vals = np.zeros((nd, m, self.LANES), np.uint32)
      for k in range(nd): vals[k][lanes] = words[:, k]
    self.pending[counter].append(("v", reg, self._gidx(sel), mask, vals, np.uint32(bits)))   # bits: a d16 load writes one half

  def _apply(self, e, which: np.ndarray | None) -> None:
    """Land pending load `e` in the waves `which` picks of its own (None: all of them)."""
    kind, reg, waves, mask, vals, bits = e
    if kind == "d":   # LDS writes in flight (mask: each row's wave, an index into `waves`): land the rows of `which`
      rows = slice(None) if which is None else which[mask]
      g = mask if waves is None else waves[mask]
      return self._lds_land(self.lds, vals[0][rows], vals[1][rows], _atom_rows(vals[2], rows), g[rows])
    w = (slice(None) if waves is None else waves) if which is None else (np.nonzero(which)[0] if waves is None else waves[which])
    if which is not None: vals, mask = vals[:, which], None if mask is None else mask[which]
    if kind == "v" and mask is None and bits == 0xFFFFFFFF:   # every lane of every register: one assignment
      self.v[reg:reg + len(vals), w] = vals; return None
    for k in range(len(vals)):
      if kind == "s": self.s[reg + k, w] = vals[k]
      elif mask is None and bits == 0xFFFFFFFF: self.v[reg + k, w] = vals[k]
      else:
        old = self.v[reg + k, w]
        new = (old & ~bits) | (vals[k] & bits)
        self.v[reg + k, w] = new if mask is None else np.where(mask, new, old)

  @staticmethod
  def _same_waves(q: list, sel) -> bool:
    """Whether every queued load belongs to exactly the waves of `sel`."""
    if isinstance(sel, slice) and sel.stop is None: return all(e[2] is None for e in q)
    if isinstance(sel, slice): return all(e[2] is not None and len(e[2]) == sel.stop - sel.start and e[2][0] == sel.start and
                                          e[2][-1] == sel.stop - 1 for e in q)   # sorted, distinct: the ends decide
    return all(e[2] is not None and (e[2] is sel or (len(e[2]) == len(sel) and (e[2] == sel).all())) for e in q)

  def _retire(self, counter: str, sel, left: int) -> None:
    """s_waitcnt: for the waves in `sel`, land all but the `left` most recent loads counted by `counter`.
    Scalar loads may return out of order, so only a wait for zero is sure to land them; they stay in flight
    until then (the latest they could arrive)."""
    q = self.pending[counter]
    if not q: return
    # with a scalar load in flight, lgkmcnt(n > 0) proves nothing: SMEM returns out of order and decrements the same
    # counter (MI300 ISA "Data Dependency Resolution"; LLVM's SIInsertWaitcnts waits for 0 then), so none is due (g30 row 5)
    smem = left > 0 and any(e[0] == "s" for e in q)
    if smem and self._same_waves(q, sel): return
    if self._same_waves(q, sel):   # the usual case: every load in flight was issued by exactly the waves now waiting
      cut = len(q) - left          # so the oldest len(q) - left of them are due, in every wave alike
      keep = []
      for j, e in enumerate(q):    # land oldest first, so a newer load to the same register wins
        if j < cut and (left == 0 or e[0] != "s"): self._apply(e, None)
        else: keep.append(e)
      self.pending[counter] = keep; return
    member = np.zeros(self.n, bool); member[sel] = True
    everyone = np.arange(self.n)
    seen = np.zeros(self.n, np.int64); due = [None] * len(q)
    scalar = np.zeros(self.n, bool)   # waves with a scalar load in flight: for them lgkmcnt(n > 0) lands nothing
    if smem:
      for e in q:
        if e[0] == "s": scalar[everyone if e[2] is None else e[2]] = True
    for j in range(len(q) - 1, -1, -1):   # newest first: a wave's load is due once `left` younger ones are counted
      waves = everyone if q[j][2] is None else q[j][2]
      due[j] = member[waves] & (seen[waves] >= left) & (left == 0 or q[j][0] != "s") & ~scalar[waves]; seen[waves] += 1
    keep = []
    for e, d in zip(q, due):               # land oldest first, so a newer load to the same register wins
      if d.all(): self._apply(e, None); continue
      if d.any(): self._apply(e, d)
      kind, reg, waves, mask, vals, bits = e; k = ~d
      if kind == "d":   # keep the rows of the waves not yet due, their wave indices renumbered into the kept waves
        rows = k[mask]; keep.append((kind, reg, (everyone if waves is None else waves)[k], (np.cumsum(k) - 1)[mask[rows]], (vals[0][rows], vals[1][rows], _atom_rows(vals[2], rows)), bits))
      else: keep.append((kind, reg, (everyone if waves is None else waves)[k], None if mask is None else mask[k], vals[:, k], bits))
    self.pending[counter] = keep

  def _global(self, i: Inst, sel):
    f = i.f; ex, lanes = self.exec_lanes(sel)
    if ex is self._full.get(len(ex)): lanes = (slice(None), slice(None))
    if f["saddr"] != self.NULL and i.enc == "GLOBAL":
      sb = _per_wave(self.sread(f["saddr"], sel, i, "u64"), self.nw(sel))
      addr = sb[:, None] + self.v[f["addr"], sel].astype(np.uint64)
    else:   # a 64-bit address in a VGPR pair: interleave the dwords (little-endian: low first) and read them as one
      addr = np.stack((self.v[f["addr"], sel], self.v[f["addr"] + 1, sel]), -1).view(np.uint64)[..., 0]
    addr = addr[lanes].reshape(-1)
    if f["offset"]: addr = addr + np.uint64(f["offset"] & (2**64 - 1))   # wraps mod 2**64 like the hardware adder
    return self._access(i, sel, addr, lanes, self.mem)

  def per_lane(self, x: np.ndarray, lanes) -> np.ndarray:
    """Per-wave values `x` (one per wave of an access's `sel`) for each lane `lanes` picks, in the order the lanes'
    rows are (wave-major): `lanes` is exec_lanes' nonzero, or (slice, slice) for every lane."""
    return np.repeat(x, self.LANES) if isinstance(lanes[0], slice) else x[lanes[0]]

  def _access(self, i: Inst, sel, addr: np.ndarray, lanes, mem: FlatMemory):
    """The memory op of `i` at one address per active lane (`lanes` picks them, as exec_mask's nonzero) in `mem`."""
    n, f = i.base, i.f
    op = n.split("_", 1)[1]
    if self.gl0 is not None and mem is self.mem and i.enc != "SCRATCH":   # global memory through the wave's GL0
      l0 = self.per_lane(self.gl0_of[sel], lanes)
      sa = self.per_lane(self.sa_of[sel], lanes) if self.gl1 is not None else None
      if op.startswith("atomic_"):
        self.gl0.before_write(addr, 8 if "64" in op else 4, l0, n)   # (the L0s first: their copies look through the GL1s)
        if self.gl1 is not None: self.gl1.before_write(addr, 8 if "64" in op else 4, sa, n)
      else: mem = _GL0View(self.gl0, mem, l0, bool(f["glc"]), self.gl1, sa)   # type: ignore[assignment]
    def put(reg, words): self._put(reg, sel, lanes, words)
    def dat(reg, nd): return np.stack([self.v[reg + k, sel][lanes].reshape(-1) for k in range(nd)], 1)
    wide = {"b32": 1, "b64": 2, "b96": 3, "b128": 4}
    if op.startswith("load_b"): put(f["vdst"], mem.read(addr, 4 * wide[op[5:]], n).view(np.uint32)); return None
    if op.startswith("store_b"):
      if op in ("store_b8", "store_b16"):
        mem.write(addr, dat(f["data"], 1).view(np.uint8)[:, :1 if op == "store_b8" else 2], n)
      else: mem.write(addr, dat(f["data"], wide[op[6:]]).view(np.uint8), n)
      return None
    if op in ("load_u8", "load_i8", "load_u16", "load_i16"):
      nb = 1 if op[-1] == "8" else 2; raw = mem.read(addr, nb, n).view(np.uint8 if nb == 1 else np.uint16)[:, 0]
      v = raw.view(np.int8 if nb == 1 else np.int16).astype(np.int32).view(np.uint32) if op[5] == "i" else raw.astype(np.uint32)
      put(f["vdst"], v[:, None]); return None
    if op.startswith("load_d16"):
      hi = "_hi_" in op; nb = 2 if op.endswith("b16") else 1
      raw = mem.read(addr, nb, n).view(np.uint8 if nb == 1 else np.uint16)[:, 0]
      v = raw.view(np.int8).astype(np.int16).view(np.uint16) if op.endswith("i8") else raw.astype(np.uint16)
      new = v.astype(np.uint32) << np.uint32(16) if hi else v.astype(np.uint32)
      self._put(f["vdst"], sel, lanes, new[:, None], "vm", 0xFFFF0000 if hi else 0xFFFF); return None
    if op in ("store_d16_hi_b8", "store_d16_hi_b16"):
      mem.write(addr, dat(f["data"], 1).view(np.uint8)[:, 2:3 if op.endswith("b8") else 4], n); return None
    if op.startswith("atomic_"):
      if mem is not self.mem: raise EmulatorError("atomics on scratch memory are not emulated")
      return self._atomic(i, sel, op[7:], addr, dat, put)
    raise EmulatorError("memory op not implemented")
  _flat = _global

  def _scratch(self, i: Inst, sel):
    """SCRATCH (private segment) loads and stores. With architected flat scratch (gfx942, gfx11) the address is the
    offset plus the VGPR (when SVE) plus the SGPR (unless off): an offset into the lane's own private segment.
    Two models. On a dispatch the CP set up (`set_scratch` with the waves' scratch bases) the access goes to GPU memory
    where the hardware puts it: the wave's slot base plus the swizzled lane address, dword k of lane l at
    base + k*LANES*4 + l*4 (LLVM AMDGPUUsage "Memory Spaces", private: "interleaved ... index stride of the wavefront
    size", element size 4; ROCR-Runtime@c7785a6:runtime/hsa-runtime/core/runtime/amd_aql_queue.cpp:1628-1705 builds the
    scratch SRD with that swizzle). Nothing bounds-checks a lane (the SRD's "no bounds check in swizzle mode",
    amd_aql_queue.cpp:1700), so an offset past the segment reads or clobbers another lane's or wave's scratch, or
    faults outside the mapped memory. Without a CP (the `launch` API) each lane's segment is a window of its own and an
    access past it faults by name."""
    f, (ex, lanes) = i.f, self.exec_lanes(sel)
    if self.scratch is None and self.scratch_base is None: raise EmulatorError("scratch access, but the dispatch has no private segment")
    if ex is self._full.get(len(ex)): lanes = (slice(None), slice(None))
    off = np.full((self.nw(sel), self.LANES), f["offset"], np.int64)
    if f.get("sve"): off += self.v[f["addr"], sel].astype(np.int64)
    if f["saddr"] != self.NULL: off += np.broadcast_to(np.asarray(self.sread(f["saddr"], sel, i)), (self.nw(sel),))[:, None].astype(np.int64)
    nb = {"b8": 1, "u8": 1, "i8": 1, "b16": 2, "u16": 2, "i16": 2, "b32": 4, "b64": 8, "b96": 12, "b128": 16}[i.base.rsplit("_", 1)[1]]
    waves = np.arange(self.n)[sel]
    if self.scratch_base is not None: return self._scratch_swizzled(i, sel, off, lanes, nb, waves)
    assert self.scratch is not None
    off = off[lanes].reshape(-1); size = self.scratch.shape[2]
    if (off < 0).any() or (off + nb > size).any():
      bad = int(off[(off < 0) | (off + nb > size)][0])
      raise MemoryFault(f"scratch access at private offset {bad} is outside the lane's {size}-byte private segment")
    slot = (np.broadcast_to(waves[:, None], (len(waves), self.LANES)) * self.LANES + np.arange(self.LANES))[lanes].reshape(-1)
    return self._access(i, sel, (slot * size + off).astype(np.uint64) + np.uint64(SCRATCH_VA), lanes, self.scratch_mem)

  def _scratch_swizzled(self, i: Inst, sel, off: np.ndarray, lanes, nb: int, waves: np.ndarray):
    """A scratch access at the hardware's address in GPU memory (see _scratch): sub-dword and dword accesses are one
    address per lane, wider ones one per dword (the dwords of a lane lie LANES*4 bytes apart)."""
    assert self.scratch_base is not None
    L = self.LANES
    base = np.broadcast_to(self.scratch_base[waves][:, None], off.shape)[lanes].reshape(-1).astype(np.int64)
    lane = np.broadcast_to(np.arange(L), off.shape)[lanes].reshape(-1)
    off = off[lanes].reshape(-1)
    def at(o: np.ndarray) -> np.ndarray:   # (a negative offset lands below the slot: in another wave's scratch, or unmapped)
      return (base + (o >> 2) * (L * 4) + lane * 4 + (o & 3)).astype(np.uint64)
    if nb <= 4:
      if ((off & 3) + nb > 4).any(): raise EmulatorError(f"a {nb}-byte scratch access at private offset {int(off[((off & 3) + nb > 4)][0])} crosses a dword")
      return self._access(i, sel, at(off), lanes, self.mem)
    if (off & 3).any(): raise EmulatorError(f"a {nb}-byte scratch access at a private offset that is not dword aligned ({int(off[(off & 3) != 0][0])})")
    nd, f = nb // 4, i.f
    if i.base.split("_")[1] == "load":
      words = np.stack([self.mem.read(at(off + 4 * k), 4, i.name).view(np.uint32)[:, 0] for k in range(nd)], 1)
      return self._put(f["vdst"], sel, lanes, words)
    for k in range(nd):
      data = self.v[f["data"] + k, sel][lanes].reshape(-1)
      self.mem.write(at(off + 4 * k), np.ascontiguousarray(data).view(np.uint8).reshape(-1, 4), i.name)
    return None

  def set_scratch(self, nbytes: int, wave_base: np.ndarray | None = None) -> None:
    """Give every wave its private segment. `wave_base` (one GPU address per wave): the scratch slot the CP gave the
    wave, accessed in GPU memory as the hardware swizzles it. Otherwise each lane gets a window of `nbytes` of its own,
    filled with POISON_BYTE: fresh scratch holds whatever the slot's previous wave left (audit g30 row 4a), never zeros."""
    self.scratch_base = None if wave_base is None else np.asarray(wave_base, np.int64)
    self.scratch = np.full((self.n, self.LANES, -(-nbytes // 16) * 16), POISON_BYTE, np.uint8) if nbytes and wave_base is None else None
    self.scratch_mem = FlatMemory()
    if self.scratch is not None: self.scratch_mem.map(SCRATCH_VA, self.scratch.reshape(-1))

  def _atomic(self, i: Inst, sel, op: str, addr, dat, put):
    fns = {"add_u32": (np.add, np.uint32), "sub_u32": (np.subtract, np.uint32), "min_i32": (np.minimum, np.int32),
           "max_i32": (np.maximum, np.int32), "min_u32": (np.minimum, np.uint32), "max_u32": (np.maximum, np.uint32),
           "and_b32": (np.bitwise_and, np.uint32), "or_b32": (np.bitwise_or, np.uint32), "xor_b32": (np.bitwise_xor, np.uint32),
           "add_f32": (np.add, np.float32), "min_f32": (np.fmin, np.float32), "max_f32": (np.fmax, np.float32),
           "add_u64": (np.add, np.uint64), "swap_b32": (None, np.uint32), "swap_b64": (None, np.uint64),
           "cmpswap_b32": ("cas", np.uint32), "cmpswap_f32": ("cas", np.float32)}
    if op not in fns: raise EmulatorError("atomic not implemented")
    fn, dt = fns[op]; nb = np.dtype(dt).itemsize; nd = nb // 4
    val = dat(i.f["data"], nd).view(dt)[:, 0]
    cmp = dat(i.f["data"] + nd, nd).view(dt)[:, 0] if fn == "cas" else None
    if not i.f["glc"] and fn not in (None, "cas"):   # no return value: ufunc.at lands every lane's update
      uniq, inv = np.unique(addr, return_inverse=True)
      new = self.mem.read(uniq, nb, i.name).view(dt)[:, 0].copy(); fn.at(new, inv, val)
      return self.mem.write(uniq, new.view(np.uint8).reshape(-1, nb), i.name)
    # lanes hitting the same address take turns in lane order, so every lane sees the value its turn left
    ret = np.empty(len(addr), dt); todo = np.arange(len(addr))
    while len(todo):
      _, first = np.unique(addr[todo], return_index=True); now = todo[first]
      old = self.mem.read(addr[now], nb, i.name).view(dt)[:, 0].copy(); ret[now] = old
      if fn == "cas": new = np.where(old.view(np.uint32 if nb == 4 else np.uint64) == cmp[now].view(old.view(np.uint32 if nb == 4 else np.uint64).dtype), val[now], old)
      elif fn is None: new = val[now]
      else: new = fn(old, val[now]).astype(dt)
      self.mem.write(addr[now], np.ascontiguousarray(new).view(np.uint8).reshape(-1, nb), i.name)
      todo = np.setdiff1d(todo, now, assume_unique=True)
    if i.f["glc"]: put(i.f["vdst"], ret.view(np.uint32).reshape(len(addr), nd))
    return None

def _lds_read(lds: np.ndarray, flat: np.ndarray, nb: int) -> np.ndarray:
  """`nb` bytes at each byte offset `flat` of all workgroups' LDS (one C-contiguous array) -> (len(flat), nb) uint8.
  Word-aligned accesses read one (overlapping) nb-byte element per lane rather than nb bytes one by one."""
  if nb % 4 == 0 and lds.size % 4 == 0 and not (flat & 3).any():
    elems = np.ndarray((lds.size // 4 - nb // 4 + 1,), np.dtype(f"V{nb}"), buffer=lds, strides=(4,))
    return elems[flat >> 2].view(np.uint8).reshape(len(flat), nb)
  return lds.reshape(-1)[flat[:, None] + np.arange(nb)]

def _atom_rows(atom, rows):
  """An in-flight LDS atomic's (op, dtype, vdst, lane per row) for the rows `rows` picks (None for a store)."""
  return None if atom is None else (*atom[:3], atom[3][rows])

def _lds_write(lds: np.ndarray, flat: np.ndarray, data: np.ndarray) -> None:
  """Store the rows of `data` at byte offsets `flat` (with duplicate offsets the last row wins, as per byte)."""
  nb = data.shape[1]
  if nb in (4, 8, 16) and lds.size % nb == 0 and not (flat & (nb - 1)).any():
    lds.reshape(-1).view(np.dtype(f"V{nb}"))[flat // nb] = np.ascontiguousarray(data).view(np.dtype(f"V{nb}"))[:, 0]
  else: lds.reshape(-1)[flat[:, None] + np.arange(nb)] = data

def _div_scale(s0, s1, s2):
  """v_div_scale: pre-scale numerator/denominator so the Newton-Raphson steps of a division cannot under/overflow."""
  dt = s0.dtype; f64 = dt == np.float64
  ebits, mant = (11, 52) if f64 else (8, 23)
  udt = np.uint64 if f64 else np.uint32
  def exp(x): return ((x.view(udt) >> udt(mant)) & udt((1 << ebits) - 1)).astype(np.int64)
  s0, s1, s2 = np.broadcast_arrays(s0, s1, s2)
  e1, e2 = exp(s1), exp(s2)
  big = np.asarray(2.0 ** (128 if f64 else 64), dt); tiny = np.finfo(dt).tiny
  with np.errstate(all="ignore"):
    q = s2 / s1; r = 1 / s1
  r_den = (np.abs(r) < tiny) & (r != 0); q_den = (np.abs(q) < tiny) & (q != 0)
  d = s0.copy(); vcc = np.zeros(s0.shape, bool)
  with np.errstate(all="ignore"): return _div_scale_cases(s0, s1, s2, e1, e2, big, r_den, q_den, d, vcc, f64, mant, dt)

def _div_scale_cases(s0, s1, s2, e1, e2, big, r_den, q_den, d, vcc, f64, mant, dt):
  nan = (s2 == 0) | (s1 == 0) | np.isnan(s1) | np.isnan(s2)
  c1 = ~nan & (e2 - e1 >= (768 if f64 else 96)); vcc |= c1; d = np.where(c1 & (s0 == s1), s0 * big, d)
  c2 = ~nan & ~c1 & (e1 == 0); d = np.where(c2, s0 * big, d)
  c3 = ~nan & ~c1 & ~c2 & r_den & ~q_den; vcc |= c3; d = np.where(c3 & (s0 == s1), s0 * big, d)
  c4 = ~nan & ~c1 & ~c2 & ~c3 & r_den; d = np.where(c4, s0 / big, d)
  c5 = ~nan & ~c1 & ~c2 & ~c3 & ~c4 & q_den; vcc |= c5; d = np.where(c5 & (s0 == s2), s0 * big, d)
  c6 = ~nan & ~c1 & ~c2 & ~c3 & ~c4 & ~c5 & (e2 <= mant); d = np.where(c6, s0 * big, d)
  d = np.where(nan, np.asarray(np.nan, dt), d)
  return d.astype(dt), vcc

class _GL0View:
  """The memory a global/flat access of lanes whose L0s are `l0` (and GL1s `sa`, when modelled) sees through them over
  `back`; `bypass`: a glc load, which reads past both."""
  def __init__(self, gl0, back: FlatMemory, l0: np.ndarray, bypass: bool, gl1=None, sa: np.ndarray | None = None):
    self.gl0, self.back, self.l0, self.bypass, self.gl1, self.sa = gl0, back, l0, bypass, gl1, sa
  def read(self, addrs: np.ndarray, nbytes: int, what: str = "load") -> np.ndarray:
    fresh = self.back.read(addrs, nbytes, what)
    if self.bypass: return fresh
    if self.gl1 is not None: fresh = self.gl1.load(addrs, nbytes, self.sa, fresh, what)
    return self.gl0.load(addrs, nbytes, self.l0, fresh, what)
  def write(self, addrs: np.ndarray, data: np.ndarray, what: str = "store") -> None:
    self.gl0.before_write(addrs, data, self.l0, what)   # (first: the L0s' copies look through the GL1s)
    if self.gl1 is not None: self.gl1.before_write(addrs, data, self.sa, what)
    self.back.write(addrs, data, what)
