"""Run gfx942 (GFX9, CDNA3) wave64 code on the RDNA3 emulator's engine.

`Gfx9Waves` is rdna3/executor.py's `Waves` with what differs on GFX9 (AMD "AMD Instinct MI300 ISA" reference):
64 lanes, so EXEC and VCC are SGPR pairs and every lane mask is 64 bits; GFX9 encodings (gfx9/decoder.py, which
names each operation as the shared executor knows it, so the ALU semantics, the memory model, the loads in flight
and the scheduler are the same code); the s_waitcnt layout; SDWA operand selects; 16-bit ops that zero the high half;
the packed-f32 VOP3P ops and 64-bit moves CDNA3 adds.
"""
from __future__ import annotations
import numpy as np
from hcqrt.mock.amd.rdna3 import valu as V
from hcqrt.mock.amd.rdna3.decoder import Inst
from hcqrt.mock.amd.rdna3.executor import VCC, EmulatorError, Waves
from hcqrt.mock.amd.gfx9.decoder import OFF, decode_one
from hcqrt.mock.amd.gfx9.l1 import VectorL1
from hcqrt.mock.amd.gfx9.l2 import XccL2
from hcqrt.mock.amd.rdna3.memory import FlatMemory

# gfx9-only operations, in the shared table's form: name -> (source types, result type, fn)
V.OPS.setdefault("v_mov_b64", (("u64",), "u64", lambda a: a))
# the "legacy" 16-bit mads keep gfx8's behaviour: one rounding per step is irrelevant for integers, and they zero the
# high half (LLVM GCNSubtarget::zeroesHigh16BitsOfDest lists V_MAD_U16/I16 for <= GFX9; the legacy forms are those
# gfx8 encodings, llvm-project llvm/lib/Target/AMDGPU/VOP3Instructions.td "V_MAD_LEGACY_U16")
V.OPS.setdefault("v_mad_legacy_u16", V.OPS["v_mad_u16"])
V.OPS.setdefault("v_mad_legacy_i16", (("i16", "i16", "i16"), "i16", lambda a, b, c: a * b + c))
V.OPS.setdefault("v_mad_i16", V.OPS["v_mad_legacy_i16"])
V.OPS.setdefault("v_fmac_f64", (("f64", "f64", "f64"), "f64", V._fma))
# v_dot4c_i32_i8 (VOP2 57 / VOP3 313): the signed byte dot product accumulated into its destination; LLVM lowers
# llvm.amdgcn.sdot4 without clamp to it (llvm-project llvm/docs/AMDGPUUsage.rst, llvm.amdgcn.sdot4), so an int8 matmul
# summed in int32 on gfx942 runs it
V.OPS.setdefault("v_dot4c_i32_i8", (("u32", "u32", "u32"), "u32", lambda a, b, c: V.dot4(a, b, c, True, True)))
V.OPS.setdefault("v_subrev_nc_u16", (("u16", "u16"), "u16", lambda a, b: b - a))
# v_lshl_add_u64: D = (S0 << S1[2:0]) + S2 (MI300 ISA, VOP3 opcodes; the shift is at most 4)
V.OPS.setdefault("v_lshl_add_u64", (("u64", "u32", "u64"), "u64", lambda a, b, c: (a << (b & np.uint32(7)).astype(np.uint64)) + c))

# 16-bit ops whose result is written zero-extended on gfx9 (gfx10+ keeps the high half); the list is LLVM's,
# llvm-project llvm/lib/Target/AMDGPU/AMDGPUSubtarget.cpp GCNSubtarget::zeroesHigh16BitsOfDest ("getGeneration() <=
# GFX9"); v_mac/v_fmac_f16 and the mix ops keep the high half on gfx9 and are not listed
ZERO_HI16 = frozenset({
  "v_cvt_f16_f32", "v_cvt_f16_u16", "v_cvt_f16_i16", "v_rcp_f16", "v_rsq_f16", "v_sqrt_f16", "v_log_f16", "v_exp_f16", "v_sin_f16",
  "v_cos_f16", "v_floor_f16", "v_ceil_f16", "v_trunc_f16", "v_rndne_f16", "v_fract_f16", "v_frexp_mant_f16", "v_frexp_exp_i16_f16",
  "v_ldexp_f16", "v_lshlrev_b16", "v_lshrrev_b16", "v_ashrrev_i16", "v_add_nc_u16", "v_sub_nc_u16", "v_subrev_nc_u16",
  "v_mul_lo_u16", "v_add_f16", "v_sub_f16", "v_subrev_f16", "v_mul_f16", "v_max_f16", "v_min_f16", "v_max_u16", "v_min_u16",
  "v_max_i16", "v_min_i16", "v_mad_f16", "v_mad_u16", "v_mad_i16", "v_fma_f16", "v_div_fixup_f16", "v_mad_legacy_u16",
  "v_mad_legacy_i16"})

SDWA_SCRATCH = 4   # extra VGPR rows past the kernel's: where SDWA operands are staged for the shared ALU

def sdwa_select(x: np.ndarray, sel: int, sext: int) -> np.ndarray:
  """SDWA source select: BYTE_0..3 (0-3), WORD_0/1 (4, 5), DWORD (6) of each dword, zero- or sign-extended.

  >>> sdwa_select(np.array([0x8180FF7F], np.uint32), 5, 1).tolist(), sdwa_select(np.array([0x8180FF7F], np.uint32), 1, 0).tolist()
  ([4294934912], [255])
  """
  if sel == 6: return x
  if sel > 6: raise EmulatorError(f"SDWA select {sel} is reserved")
  width, shift = (8, 8 * sel) if sel < 4 else (16, 16 * (sel - 4))
  v = (x >> np.uint32(shift)) & np.uint32((1 << width) - 1)
  if sext: v = ((v << np.uint32(32 - width)).view(np.int32) >> (32 - width)).view(np.uint32)
  return v

def sdwa_place(r: np.ndarray, old: np.ndarray, sel: int, unused: int) -> np.ndarray:
  """SDWA destination: the result's low bits at dst_sel; the other bits zero (UNUSED_PAD 0), the field's sign
  extended upwards (UNUSED_SEXT 1) or the old register's (UNUSED_PRESERVE 2)."""
  if sel == 6: return r
  width, shift = (8, 8 * sel) if sel < 4 else (16, 16 * (sel - 4))
  field = np.uint32(((1 << width) - 1) << shift)
  v = (r << np.uint32(shift)) & field
  if unused == 2: return (old & ~field) | v
  if unused == 1:
    top = shift + width
    if top < 32: v = np.where(v >> np.uint32(top - 1) & np.uint32(1), v | np.uint32((0xFFFFFFFF << top) & 0xFFFFFFFF), v)
    return v
  if unused == 0: return v
  raise EmulatorError(f"SDWA dst_unused {unused} is reserved")

class Gfx9Waves(Waves):
  """Waves of gfx942 (wave64) code: the shared engine with the GFX9 decoder and the differences above."""
  LANES = 64
  NULL = OFF
  TRUE16 = False
  GL0 = False   # gfx942 has no GL0: its vector L1 is modelled by gfx9/l1.py
  ZERO_HI16 = ZERO_HI16
  decode_one = staticmethod(decode_one)

  def __init__(self, code, n, nvgpr, wg, lds_bytes, mem, cache=None, code_va=0):
    super().__init__(code, n, nvgpr + SDWA_SCRATCH, wg, lds_bytes, mem, cache, code_va)
    self.nvgpr = nvgpr
    self.l2: XccL2 | None = None        # the dispatch's per-XCC L2s when it spans several XCCs (gfx9/l2.py)
    self.xcc = np.zeros(n, np.int64)    # each wave's XCC
    self.l1 = VectorL1(mem, self._view, self._wg_xcc)   # the vector L1s (gfx9/l1.py): one per workgroup here
    self.l1_of = wg                                     # each wave's L1 (use_l1)

  def use_l1(self, l1: VectorL1, l1_of: np.ndarray, l1_xcc) -> None:
    """Run on the L1s `l1` (the launch's, kept across batches and dispatches): wave i's workgroup uses L1 `l1_of[i]`,
    which sits on XCC `l1_xcc(l1_of)`."""
    self.l1, self.l1_of = l1, l1_of
    l1.bind(self.mem, self._view, l1_xcc)

  def _view(self, addrs: np.ndarray, nbytes: int, xcc: np.ndarray) -> np.ndarray:
    """Bytes at `addrs` as XCCs `xcc` see them now (memory, or through their L2s)."""
    return self.mem.read(addrs, nbytes, "L1 line") if self.l2 is None else self.l2.read(addrs, nbytes, xcc, "L1 line")

  def _wg_xcc(self, wgs: np.ndarray) -> np.ndarray:
    x = np.zeros(int(self.wg.max()) + 1, np.int64); x[self.wg] = self.xcc
    return x[wgs]

  @staticmethod
  def xcc_l2(mem: FlatMemory, num_xcc: int) -> XccL2 | None:
    """The L2 model of a dispatch whose workgroups run on `num_xcc` XCCs (one L2 each); None for one XCC."""
    return XccL2(mem, num_xcc) if num_xcc > 1 else None

  @staticmethod
  def vgpr_count(rsrc1: int, wave32: bool) -> int:
    """VGPRs (with AGPRs, one unified file) per lane: RSRC1.VGPRS in granules of 8 on gfx90a/gfx942 (LLVM
    AMDGPUBaseInfo getVGPREncodingGranule: 8 with gfx90a instructions)."""
    return ((rsrc1 & 0x3F) + 1) * 8

  @staticmethod
  def waitcnt_fields(k: int) -> tuple[int, int]:
    """(vmcnt, lgkmcnt): GFX9 s_waitcnt keeps vmcnt in [3:0] and [15:14], expcnt [6:4], lgkmcnt [11:8]."""
    return (k & 0xF) | (((k >> 14) & 3) << 4), (k >> 8) & 0xF

  def step(self, i: Inst, sel):
    if i.f.get("sdwa"): return self._sdwa(i, sel)
    if i.f.get("dpp"): raise EmulatorError("DPP lane patterns are not emulated")
    return super().step(i, sel)

  def _vop1(self, i: Inst, sel):
    if i.base == "v_mov_b64":   # a 64-bit move: the shared table's u64 identity on a register pair
      return self.alu(i, sel, "v_mov_b64", [i.f["src0"]], i.f["vdst"], self.exec_mask(sel))
    return super()._vop1(i, sel)

  def _vop2(self, i: Inst, sel):
    if i.base in ("v_fmac_f64", "v_dot4c_i32_i8"):   # accumulate into the destination (pair), like v_fmac_f32
      f = i.f; return self.alu(i, sel, i.base, [f["src0"], f["vsrc1"] + 256, f["vdst"] + 256], f["vdst"], self.exec_mask(sel))
    return super()._vop2(i, sel)

  def _vop3(self, i: Inst, sel):
    if i.base == "v_dot4c_i32_i8" and i.f["clamp"]: raise EmulatorError("the saturating (clamp) form of the integer dot product is not emulated")
    if i.base in ("v_fmac_f64", "v_dot4c_i32_i8"): i.f["src2"] = i.f["vdst"] + 256   # VOP3 form: src2 is the destination (decoded, so cached)
    return super()._vop3(i, sel)

  def _sdwa(self, i: Inst, sel):
    """Stage each source's selected byte/word in a scratch VGPR, run the op there with the shared ALU, then place
    the result at dst_sel (VOPC: write the lane mask)."""
    f, ex, s0 = i.f, self.exec_mask(sel), self.nvgpr
    def src(code: int) -> np.ndarray:
      if code >= 256: return self.v[code - 256, sel]
      return np.broadcast_to(np.asarray(self.sread(code, sel, i)).reshape(-1, 1), (self.nw(sel), self.LANES)).astype(np.uint32)
    self.v[s0, sel] = sdwa_select(src(f["src0"]), f["src0_sel"], f["src0_sext"])
    srcs = [s0 + 256]
    if i.enc != "VOP1":
      vsrc1 = f["vsrc1"] if f["s1"] else f["vsrc1"] + 256
      self.v[s0 + 1, sel] = sdwa_select(src(vsrc1), f["src1_sel"], f["src1_sext"])
      srcs.append(s0 + 257)
    abs_, neg = f["src0_abs"] | f["src1_abs"] << 1, f["src0_neg"] | f["src1_neg"] << 1
    if i.enc == "VOPC":
      return self.alu(i, sel, i.base, srcs, 0, ex, abs_, neg, sdst=VCC if f["sdst"] is None else f["sdst"])
    if i.base in ("v_fmac_f32", "v_mac_f16", "v_fmac_f16", "v_dot4c_i32_i8"): raise EmulatorError("SDWA accumulate ops are not emulated")
    if i.enc == "VOP2": srcs.append(VCC)   # carry-in / cndmask select
    self.v[s0 + 2, sel] = 0
    self.alu(i, sel, i.base, srcs, s0 + 2, ex, abs_, neg, 0, f["clamp"], f["omod"], sdst=VCC)
    d = f["vdst"]
    placed = sdwa_place(self.v[s0 + 2, sel], self.v[d, sel], f["dst_sel"], f["dst_unused"])
    self.v[d, sel] = np.where(ex, placed, self.v[d, sel])

  def _vop3p(self, i: Inst, sel):
    if i.base in ("v_pk_add_f32", "v_pk_mul_f32", "v_pk_fma_f32", "v_pk_mov_b32"): return self._pk_f32(i, sel)
    return super()._vop3p(i, sel)

  def _pk_f32(self, i: Inst, sel):
    """CDNA3's packed fp32 ops: each source is a register pair; op_sel (low result) / op_sel_hi (high result) pick
    its low or high dword per source, neg / neg_hi negate (MI300 ISA, VOP3P)."""
    f, ex = i.f, self.exec_mask(sel)
    nsrc = {"v_pk_fma_f32": 3, "v_pk_mov_b32": 2}.get(i.base, 2)
    codes = [f["src0"], f["src1"], f["src2"]][:nsrc]
    def half(code: int, hi: bool) -> np.ndarray:
      if code >= 256: return self.v[code - 256 + hi, sel]
      if code < 128: return np.broadcast_to(self.s[code + hi, sel][:, None], (self.nw(sel), self.LANES))
      return np.broadcast_to(np.asarray(self.sread(code, sel, i, "u32")), (self.nw(sel), self.LANES))   # a constant: both halves
    if i.base == "v_pk_mov_b32":   # D.lo = src0's dword op_sel[0], D.hi = src1's dword op_sel[1]
      lo, hi = half(codes[0], bool(f["opsel"] & 1)).copy(), half(codes[1], bool(f["opsel"] >> 1 & 1)).copy()   # (a swap reads both first)
      self.vwrite(f["vdst"], sel, lo, "u32", ex); self.vwrite(f["vdst"] + 1, sel, hi, "u32", ex); return
    out = []
    for opsel, negs in ((f["opsel"], f["neg"]), (f["opsel_hi"] | f["opsel_hi2"] << 2, f["neg_hi"])):
      args = [half(c, bool(opsel >> k & 1)).view(np.float32) for k, c in enumerate(codes)]
      args = [-a if negs >> k & 1 else a for k, a in enumerate(args)]
      r = {"v_pk_add_f32": lambda a, b: a + b, "v_pk_mul_f32": lambda a, b: a * b, "v_pk_fma_f32": V._fma}[i.base](*args)
      if f["clamp"]: r = np.clip(r, 0, 1)
      out.append(np.asarray(r, np.float32).view(np.uint32))
    lo, hi = out
    self.vwrite(f["vdst"], sel, lo, "u32", ex); self.vwrite(f["vdst"] + 1, sel, hi, "u32", ex)

  # GFX9 has one counter for every vector memory op: vmcnt counts stores too (gfx10 moved them to vscnt), and lgkmcnt
  # counts LDS writes as well as reads (MI300 ISA, "S_WAITCNT" and "Data Dependency Resolution"). A store completes at
  # issue here, but it still holds its place in the counter, so "vmcnt(1)" after load, store waits for the load.
  def _counted(self, counter: str, i: Inst, sel, run):
    before = len(self.pending[counter])
    r = run(i, sel)
    if len(self.pending[counter]) == before:   # nothing to land: an empty entry that only counts
      self.pending[counter].append(("v", 0, self._gidx(sel), None, np.zeros((0, self.nw(sel), self.LANES), np.uint32), np.uint32(0)))
    return r
  def _global(self, i: Inst, sel): return self._counted("vm", i, sel, super()._global)
  _flat = _global
  def _scratch(self, i: Inst, sel): return self._counted("vm", i, sel, super()._scratch)
  def _ds(self, i: Inst, sel): return None if i.base == "ds_nop" else self._counted("lgkm", i, sel, super()._ds)

  def _access(self, i: Inst, sel, addr, lanes, mem):
    """Global/flat loads and stores go through the workgroup's vector L1 (gfx9/l1.py) and then the XCC's L2
    (gfx9/l2.py) when the dispatch spans XCCs; atomics are performed at the coherence point, so they use memory itself
    (their own workgroup's L1 drops the lines they touch; other workgroups' stay as they were). Scratch is private to
    its lane: no other workgroup writes it, so it skips the L1."""
    if mem is not self.mem or i.enc == "SCRATCH": return super()._access(i, sel, addr, lanes, mem)
    wg = self.per_lane(self.l1_of[sel], lanes)
    if i.base.split("_", 1)[1].startswith("atomic_"):
      self.l1.before_write(addr, 8 if "64" in i.base or "x2" in i.base else 4, wg, i.name)
      return super()._access(i, sel, addr, lanes, mem)
    back = mem if self.l2 is None else _XccView(self.l2, self.per_lane(self.xcc[sel], lanes), bool(i.f.get("sc1")))
    return super()._access(i, sel, addr, lanes, _L1View(self.l1, back, wg, bool(i.f.get("sc1"))))

  def _mubuf(self, i: Inst, sel):
    # buffer_wbl2 with sc1 (agent or system scope; AMDGPUUsage GFX942 code sequences, fence release agent/system) writes
    # the XCC's dirty L2 lines back. It is a vector memory op: it counts in vmcnt and is done only when the wave's
    # s_waitcnt retires it (the release's "s_waitcnt vmcnt(0)" after it), so the write-back happens then (_apply).
    # buffer_wbl2 without sc1 (wavefront/workgroup scope) keeps them in the L2 the workgroup shares.
    # buffer_inv with sc0 or sc1 (workgroup scope and wider) drops the workgroup's vector L1 lines (gfx9/l1.py), so a
    # missing acquire reads stale lines (audit x30 row 2); the L2's clean lines are not modelled (gfx9/l2.py). It acts
    # at issue: the L1 serves a wave's requests in order, and LLVM emits no wait after it before the acquiring loads.
    if i.base == "buffer_inv":
      if i.f["glc"] or i.f["sc1"]: self.l1.invalidate(self.l1_of[sel])
      return None
    if i.base != "buffer_wbl2": return None
    wb = i.f["sc1"] and self.l2 is not None
    self.pending["vm"].append(("w" if wb else "v", 0, self._gidx(sel), None, np.zeros((0, self.nw(sel), self.LANES), np.uint32), np.uint32(0)))
    return None

  def _apply(self, e, which) -> None:
    if e[0] != "w": return super()._apply(e, which)
    waves = e[2]   # a buffer_wbl2 sc1 retired: its waves' XCCs write back
    w = (slice(None) if waves is None else waves) if which is None else (np.nonzero(which)[0] if waves is None else waves[which])
    assert self.l2 is not None
    self.l1.before_writeback(self.l2.owner, self.xcc[w])
    self.l2.writeback(self.xcc[w])

class _XccView:
  """The memory one access sees through the L2 model: lane i's on XCC xcc[i]; `publish`: an sc1 store, visible at once."""
  def __init__(self, l2: XccL2, xcc: np.ndarray, publish: bool): self.l2, self.xcc, self.publish = l2, xcc, publish
  def read(self, addrs: np.ndarray, nbytes: int, what: str = "load") -> np.ndarray: return self.l2.read(addrs, nbytes, self.xcc, what)
  def write(self, addrs: np.ndarray, data: np.ndarray, what: str = "store") -> None: self.l2.write(addrs, data, self.xcc, what, self.publish)

class _L1View:
  """The memory a global/flat access of lanes of workgroups `wg` sees through their L1s over `back` (memory or the L2
  view); `bypass`: an sc1 (agent/system scope) load, which reads past the L1."""
  def __init__(self, l1: VectorL1, back, wg: np.ndarray, bypass: bool): self.l1, self.back, self.wg, self.bypass = l1, back, wg, bypass
  def read(self, addrs: np.ndarray, nbytes: int, what: str = "load") -> np.ndarray:
    fresh = self.back.read(addrs, nbytes, what)
    return fresh if self.bypass else self.l1.load(addrs, nbytes, self.wg, fresh, what)
  def write(self, addrs: np.ndarray, data: np.ndarray, what: str = "store") -> None:
    self.l1.before_write(addrs, data, self.wg, what); self.back.write(addrs, data, what)
