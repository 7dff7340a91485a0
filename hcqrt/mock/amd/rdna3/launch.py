"""Launch a gfx1100 kernel on the emulator: read the kernel descriptor, set up the initial wave state the
way the hardware's dispatcher does (AMDGPUUsage "Initial Kernel Execution State"), run every workgroup."""
from __future__ import annotations
import struct
from dataclasses import dataclass
import numpy as np
from hcqrt.mock.amd.rdna3.executor import Waves, EmulatorError, pack_mask
from hcqrt.mock.amd.rdna3.memory import FlatMemory, MemoryFault

def _bf(v: int, shift: int, width: int) -> int: return (v >> shift) & ((1 << width) - 1)

@dataclass(frozen=True)
class KernelDescriptor:
  """The 64-byte amdhsa kernel descriptor (offsets and bit fields from LLVM's AMDHSAKernelDescriptor.h)."""
  group_segment_fixed_size: int
  private_segment_fixed_size: int
  kernarg_size: int
  entry_offset: int
  rsrc1: int
  rsrc2: int
  rsrc3: int
  code_properties: int
  kernarg_preload: int

  @classmethod
  def from_bytes(cls, b: bytes) -> KernelDescriptor:
    if len(b) != 64: raise ValueError(f"kernel descriptor must be 64 bytes, got {len(b)}")
    g, p, k = struct.unpack_from("<III", b, 0); (e,) = struct.unpack_from("<q", b, 16)
    r3, r1, r2 = struct.unpack_from("<III", b, 44); props, preload = struct.unpack_from("<HH", b, 56)
    return cls(g, p, k, e, r1, r2, r3, props, preload)

  # RSRC1 / RSRC2 / kernel_code_properties fields
  @property
  def vgprs(self) -> int: return (_bf(self.rsrc1, 0, 6) + 1) * (8 if self.wave32 else 4)   # gfx10+ granule: 8 (wave32)
  @property
  def user_sgpr_count(self) -> int: return _bf(self.rsrc2, 1, 5)
  @property
  def private_segment(self) -> bool: return bool(_bf(self.rsrc2, 0, 1))
  @property
  def workgroup_id_enable(self) -> tuple[bool, bool, bool]: return tuple(bool(_bf(self.rsrc2, 7 + k, 1)) for k in range(3))
  @property
  def workgroup_info(self) -> bool: return bool(_bf(self.rsrc2, 10, 1))
  @property
  def workitem_id_count(self) -> int: return _bf(self.rsrc2, 11, 2) + 1     # TIDIG_COMP_CNT: 0 -> x, 1 -> x,y, 2 -> x,y,z
  @property
  def lds_granules(self) -> int: return _bf(self.rsrc2, 15, 9)
  @property
  def wave32(self) -> bool: return bool(_bf(self.code_properties, 10, 1))
  def user_sgpr_enables(self) -> dict[str, bool]:
    names = ["private_segment_buffer", "dispatch_ptr", "queue_ptr", "kernarg_segment_ptr", "dispatch_id", "flat_scratch_init",
             "private_segment_size"]
    return {n: bool(_bf(self.code_properties, k, 1)) for k, n in enumerate(names)}
  @property
  def preload_dwords(self) -> int: return _bf(self.kernarg_preload, 0, 7)
  @property
  def preload_offset(self) -> int: return _bf(self.kernarg_preload, 7, 9)

USER_SGPR_SIZES = {"private_segment_buffer": 4, "dispatch_ptr": 2, "queue_ptr": 2, "kernarg_segment_ptr": 2, "dispatch_id": 2,
                   "flat_scratch_init": 2, "private_segment_size": 1}

@dataclass
class LaunchStats:
  waves: int
  wave_insts: int

def launch(code: bytes, kd: bytes | KernelDescriptor, mem: FlatMemory | dict, kernarg_addr: int, grid: tuple[int, ...],
           block: tuple[int, ...], entry: int = 0, dynamic_lds: int = 0, dispatch_ptr: int = 0, queue_ptr: int = 0,
           max_waves: int = 8192, code_va: int = 0, waves_cls: type[Waves] = Waves, num_xcc: int = 1, l1=None, gl1=None,
           shader_arrays: int = 1) -> LaunchStats:
  """Run a gfx1100 kernel the way an AQL packet processor does: `code` holds its machine code with the
  first instruction at byte `entry`; `grid` counts workgroups per dimension, `block` work-items per
  workgroup; kernel arguments live at `kernarg_addr` in `mem` (a FlatMemory, or a dict {address: buffer}); `code_va` is
  where `code` itself is mapped in `mem` (s_getpc_b64 reads it: PC-relative constants), 0 if it is not.
  Returns how many waves ran and how many wave-instructions they executed. `waves_cls` picks the ISA (gfx9.Gfx9Waves
  runs gfx942 wave64 code); `num_xcc` the XCCs its workgroups are dealt to, `l1` vector L1s kept across launches,
  `gl1` / `shader_arrays` gfx1100's GL1s (see `dispatch`).

  The user SGPRs the descriptor's kernel_code_properties enable (kernarg pointer etc., then any preloaded
  kernargs) fill s0 upwards; `dispatch` does the rest."""
  kd = kd if isinstance(kd, KernelDescriptor) else KernelDescriptor.from_bytes(kd)
  if isinstance(mem, dict): mem = FlatMemory.from_dict(mem)
  # user SGPRs, in the order the hardware loads them, then the kernarg preload
  user: list[int] = []
  for name, on in kd.user_sgpr_enables().items():
    if not on: continue
    # private_segment_buffer / flat_scratch_init are loaded as zeros: scratch instructions use architected flat scratch
    # (each lane's private segment, sized by the descriptor: Waves.set_scratch), never these
    if name == "dispatch_ptr" and not dispatch_ptr: raise EmulatorError("kernel reads the dispatch packet; pass dispatch_ptr")
    if name == "queue_ptr" and not queue_ptr: raise EmulatorError("kernel reads the queue; pass queue_ptr")
    val = {"kernarg_segment_ptr": kernarg_addr, "dispatch_ptr": dispatch_ptr, "queue_ptr": queue_ptr}.get(name, 0)
    user += [(val >> (32 * k)) & 0xFFFFFFFF for k in range(USER_SGPR_SIZES[name])]
  if kd.preload_dwords:
    addr = np.array([kernarg_addr + 4 * kd.preload_offset], np.uint64)
    user += [int(v) for v in mem.read(addr, 4 * kd.preload_dwords, "kernarg preload").view(np.uint32)[0]]
  if len(user) > kd.user_sgpr_count: raise EmulatorError(f"USER_SGPR_COUNT {kd.user_sgpr_count} is smaller than the {len(user)} enabled user SGPRs")
  return dispatch(mem, code, kd.rsrc1, kd.rsrc2, user, grid, block, wave32=kd.wave32, entry=entry,
                  lds_bytes=kd.group_segment_fixed_size + dynamic_lds, max_waves=max_waves, code_va=code_va, waves_cls=waves_cls,
                  private_bytes=kd.private_segment_fixed_size, num_xcc=num_xcc, l1=l1, gl1=gl1, shader_arrays=shader_arrays)

_DECODED: dict[bytes, dict] = {}
def _decoded(code) -> dict:
  """The decoded-instruction cache for `code`: kept across launches of the same code bytes (a program launched again
  is not decoded again); code fetched from mutable memory gets a fresh one."""
  if not isinstance(code, bytes): return {}
  if len(_DECODED) > 512: _DECODED.clear()
  return _DECODED.setdefault(code, {})

# code fetched from memory, by (ISA, address): pc -> (bytes, Inst) decoded there before (Waves._fetch checks the bytes)
_DECODED_AT: dict[tuple, dict[int, tuple[bytes, object]]] = {}

USER_POISON = 0xBAD0BAD0

@dataclass(frozen=True)
class ScratchRing:
  """The scratch a CP gives a dispatch's waves: `bases` one scratch base per XCC (COMPUTE_DISPATCH_SCRATCH_BASE_LO/HI
  << 8 on the PM4 path; amd_queue_t.scratch_backing_memory_location split evenly over the XCCs on the AQL path),
  `wave_bytes` per wave slot (COMPUTE_TMPRING_SIZE.WAVESIZE granules), `slots` wave slots (TMPRING_SIZE.WAVES) in
  each of an XCC's `engines` pools (gfx11: WAVES counts per shader engine, and a workgroup runs in one engine). A
  wave that starts takes a free slot of its workgroup's engine, so at most `slots` waves per engine hold scratch at
  once (the rest wait for one to end)."""
  bases: tuple[int, ...]
  wave_bytes: int
  slots: int
  engines: int = 1
LDS_GRANULE = 512   # RSRC2.LDS_SIZE counts 128-dword blocks (LLVM: LDS alignment shift 9 from gfx7 on)

def l1_slots(gids: np.ndarray, num_xcc: int) -> np.ndarray:
  """The vector L1 (CU) slot of each workgroup `gids` of one batch: the k-th of its XCC's workgroups (XCC g % num_xcc)
  takes slot k * num_xcc + its XCC, so slot s sits on XCC s % num_xcc in every batch (VectorL1's wg_xcc).

  >>> l1_slots(np.arange(3, 6), 2).tolist()   # workgroups 3 (XCC 1), 4 (XCC 0), 5 (XCC 1)
  [1, 0, 3]
  """
  k = np.arange(len(gids))   # (a batch's workgroups are consecutive: each pair of num_xcc holds one of every XCC)
  return (k // num_xcc) * num_xcc + gids % num_xcc

def dispatch(mem: FlatMemory | dict, code: bytes | int, rsrc1: int, rsrc2: int, user_data: list[int], grid: tuple[int, ...],
             block: tuple[int, ...], wave32: bool = True, entry: int = 0, lds_bytes: int | None = None,
             max_waves: int = 8192, code_va: int = 0, waves_cls: type[Waves] = Waves, private_bytes: int = 0,
             scratch_ring: ScratchRing | None = None, num_xcc: int = 1, l1=None, gl1=None, shader_arrays: int = 1) -> LaunchStats:
  """Run a dispatch from the register values a PM4 stream programs: COMPUTE_PGM_LO/HI (`code` as an address
  in `mem`, or the code bytes themselves with `entry`), COMPUTE_PGM_RSRC1/2, COMPUTE_USER_DATA_* (`user_data`,
  the first RSRC2.USER_SGPR_COUNT of them land in s0..), the grid in workgroups, the workgroup size and
  DISPATCH_INITIATOR.CS_W32_EN (`wave32`). LDS per workgroup is `lds_bytes`, else RSRC2.LDS_SIZE granules.
  Code given as bytes is mapped at `code_va` (what s_getpc_b64 sees; 0: not mapped).

  After the user SGPRs come the workgroup ids X/Y/Z that RSRC2 enables, and v0 holds the work-item ids
  packed 10 bits each, as many as RSRC2.TIDIG_COMP_CNT asks for. `waves_cls` is the ISA's wave state (the RDNA3 one
  by default; gfx9/executor.py's for gfx942 wave64 code): its lane count decides the wave size. With RSRC2.SCRATCH_EN
  the waves get scratch: from `scratch_ring` (what a CP programmed: slots in GPU memory, workgroup g on XCC
  g % len(bases), as cp.aql_xcc_share deals them) or, without one, a private window of `private_bytes` per lane
  (the descriptor's private_segment_fixed_size; the `launch` API). Registers the descriptor does not enable start
  as poison (AMDGPUUsage "Initial Kernel Execution State": only the enabled ones are initialised). `num_xcc`: the XCCs
  the workgroups are dealt to, workgroup g on g % num_xcc (cp.aql_xcc_share); an ISA with per-XCC L2s models them
  for the whole dispatch (gfx9/l2.py), written back at its end.

  Vector L1s (gfx942) / GL0s (gfx1100), gfx9/l1.py: the workgroups of a batch run on as many CUs, and the k-th
  workgroup of every batch runs on the CU the k-th of the batch before used (on several XCCs: the k-th of its XCC's),
  so the lines an earlier workgroup filled are there, stale, for a later one. On hardware the dispatcher places a
  workgroup on any CU with room (a CU hosts several at once, and the order is not documented); this placement is the
  harmful reading, as each workgroup of a batch has an L1 of its own and none sees another's write-through stores.
  `l1`: the GPU's L1s (a VectorL1) when they outlive the dispatch: its lines stay held past the dispatch's end
  (VectorL1.freeze) until a cache action drops them (cp.py ACQUIRE_MEM, aql.py acquire fences); None: L1s of the
  dispatch alone, empty at its start. `gl1` (gfx1100): the GL1s of the GPU's `shader_arrays` shader arrays, under the
  GL0s and kept the same way (Waves.set_gl0); None: no GL1 model."""
  if isinstance(mem, dict): mem = FlatMemory.from_dict(mem)
  if isinstance(code, int): code, entry, code_va = mem.tail(code, "instruction fetch"), 0, code
  r = KernelDescriptor(0, 0, 0, 0, rsrc1, rsrc2, 0, int(wave32) << 10, 0)   # the same bit fields, read from registers
  grid, block = tuple(grid) + (1,) * (3 - len(grid)), tuple(block) + (1,) * (3 - len(block))
  L = waves_cls.LANES
  if wave32 != (L == 32): raise EmulatorError(f"dispatch asks for wave{32 if wave32 else 64}; this emulator runs wave{L} only")
  if any(b > 1 for b in block[r.workitem_id_count:]):
    raise EmulatorError(f"block {block} uses dimensions the kernel does not read (TIDIG_COMP_CNT={r.workitem_id_count - 1})")
  if np.prod(block) > 1024 or min(block) < 1 or min(grid) < 1: raise EmulatorError(f"bad launch shape grid={grid} block={block}")
  lds_bytes = r.lds_granules * LDS_GRANULE if lds_bytes is None else lds_bytes
  if lds_bytes > 65536: raise EmulatorError(f"workgroup needs {lds_bytes} bytes of LDS, a workgroup has 65536")
  # user SGPRs nobody set hold garbage on hardware (LLVM reserves more than it reads): poison them, so a
  # missing kernarg pointer faults instead of quietly reading address 0
  nuser = r.user_sgpr_count
  user_data = list(user_data[:nuser]) + [USER_POISON] * max(0, nuser - len(user_data))
  nthreads = int(np.prod(block)); wpg = -(-nthreads // L)
  ngroups = int(np.prod(grid)); groups_per_batch = max(1, max_waves // wpg)
  ring = scratch_ring if r.private_segment else None
  if ring is not None:
    if ring.slots < wpg or ring.wave_bytes <= 0 or not ring.bases:
      raise EmulatorError(f"a workgroup of {wpg} waves needs {wpg} scratch slots; the dispatch has {ring.slots} of {ring.wave_bytes} bytes "
                          "per XCC (COMPUTE_TMPRING_SIZE): its waves could never all start")
    groups_per_batch = min(groups_per_batch, ring.slots // wpg * ring.engines * len(ring.bases))   # waves in flight hold a slot each
  total, cache = 0, _decoded(code)
  known = fetched = None
  if not isinstance(code, bytes): known, fetched = _DECODED_AT.get(at := (waves_cls, code_va), {}), {}
  l2 = waves_cls.xcc_l2(mem, num_xcc) if hasattr(waves_cls, "xcc_l2") else None
  from hcqrt.mock.amd.gfx9.l1 import VectorL1   # (here: gfx9's package imports this module)
  caches = l1 if l1 is not None else VectorL1(mem, lambda a, nb, x: mem.read(a, nb, "L1 line"), np.zeros_like)
  nx = max(1, num_xcc)
  for g0 in range(0, ngroups, groups_per_batch):
    gids = np.arange(g0, min(ngroups, g0 + groups_per_batch))
    n = len(gids) * wpg
    w = waves_cls(code, n, waves_cls.vgpr_count(rsrc1, wave32), np.repeat(np.arange(len(gids)), wpg), lds_bytes, mem, cache, code_va)
    slot = np.repeat(l1_slots(gids, nx), wpg)
    if waves_cls.GL0: w.set_gl0(bool(rsrc1 >> 29 & 1), caches, slot, gl1, shader_arrays)   # COMPUTE_PGM_RSRC1.WGP_MODE (ioctl_defs/amd/kd.py)
    elif hasattr(w, "use_l1"): w.use_l1(caches, slot, lambda h: h % nx)
    wg_xyz = np.stack([gids % grid[0], (gids // grid[0]) % grid[1], gids // (grid[0] * grid[1])], 1)
    w.s[:] = USER_POISON   # SGPRs (VCC, M0 and the rest) past the enabled ones hold garbage; EXEC is set below
    # except gfx11's `null` (s124): a source that always reads 0 (RDNA3 ISA, "Scalar Operands": SGPR_NULL "reads 0,
    # writes are ignored"); gfx9's "none" code lies outside the SGPR file
    if waves_cls.NULL < len(w.s): w.s[waves_cls.NULL] = 0
    w.v[1:] = USER_POISON  # so do the VGPRs after v0's work-item ids
    for k in range(nuser): w.s[k] = user_data[k] & 0xFFFFFFFF
    s = nuser
    for d, on in enumerate(r.workgroup_id_enable):
      if on: w.s[s] = np.repeat(wg_xyz[:, d], wpg); s += 1
    if r.workgroup_info: s += 1
    if r.private_segment: s += 1    # (architected flat scratch: the slot's base is in FLAT_SCRATCH, not an SGPR offset)
    t = np.arange(wpg * L)           # work-item ids, packed 10 bits each into v0
    tid = np.stack([t % block[0], (t // block[0]) % block[1], t // (block[0] * block[1])])
    packed = tid[0] | (tid[1] << 10 if r.workitem_id_count > 1 else 0) | (tid[2] << 20 if r.workitem_id_count > 2 else 0)
    w.v[0] = np.tile(packed.reshape(wpg, L), (len(gids), 1)).astype(np.uint32)
    live = np.tile((t < nthreads).reshape(wpg, L), (len(gids), 1))
    w.set_exec(slice(None), pack_mask(live))
    if ring is None: w.set_scratch(private_bytes)
    else: w.set_scratch(0, _scratch_slots(mem, ring, gids, wpg))
    if l2 is not None: w.l2, w.xcc = l2, np.repeat(gids % num_xcc, wpg)  # type: ignore[attr-defined]
    w.pc[:] = entry; w.known, w.fetched = known, fetched
    w.run(); total += w.wave_insts
  if fetched:   # (a new dict, never one changed in place: another engine thread may be reading the stored one)
    if len(_DECODED_AT) > 512: _DECODED_AT.clear()
    _DECODED_AT[at] = {**(known or {}), **fetched}
  if l1 is not None:
    # the dispatch's end writes every XCC's dirty L2 bytes back (gfx9/l2.py): first each L1 holding a line another
    # XCC has dirty keeps it as its own XCC saw it (VectorL1.before_writeback), then the rest freeze from memory
    if l2 is not None:
      for x in range(nx): l1.before_writeback(l2.owner, np.array([x]))
    if gl1 is not None:   # an L0 line filled from a stale GL1 line holds those bytes, not memory's
      l1.keep_stale_under(lambda h, a: gl1.stale(l1.wg_xcc(h), a))
      gl1.freeze()
    l1.freeze()
  return LaunchStats(ngroups * wpg, total)

POISON_WORD = 0xA5A5A5A5   # a wave's fresh scratch slot: what earlier waves left, modelled as garbage

def _scratch_slots(mem: FlatMemory, ring: ScratchRing, gids: np.ndarray, wpg: int) -> np.ndarray:
  """The scratch base of each wave of a batch of workgroups `gids` (`wpg` waves each): its workgroup's XCC's base plus
  the slot it took there. An XCC's workgroups go to its engines in turn, and each takes `wpg` consecutive slots of its
  engine's pool (pool e holds slots e*slots .. (e+1)*slots-1). Each slot starts as garbage; a slot outside mapped
  memory is left alone (the hardware faults only when a wave touches it)."""
  nx = len(ring.bases)
  xcc = gids % nx
  k = np.zeros(len(gids), np.int64)   # the workgroup's rank among its XCC's workgroups of this batch
  for x in range(nx): k[xcc == x] = np.arange(int(np.count_nonzero(xcc == x)))
  slot = (k % ring.engines) * ring.slots + (k // ring.engines) * wpg
  base = np.repeat(np.asarray(ring.bases, np.int64)[xcc] + slot * ring.wave_bytes, wpg) + np.tile(np.arange(wpg), len(gids)) * ring.wave_bytes
  junk = np.full((len(base), ring.wave_bytes), POISON_WORD & 0xFF, np.uint8)
  try: mem.write(base.astype(np.uint64), junk, "scratch slot")
  except MemoryFault: pass
  return base
