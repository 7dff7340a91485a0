"""Print decoded instructions with operands the way llvm-objdump does, so the decoder can be checked
field by field against LLVM's disassembler (SOPP immediates like s_waitcnt's are printed raw)."""
from __future__ import annotations
from hcqrt.mock.amd.rdna3 import valu as V
from hcqrt.mock.amd.rdna3.decoder import Inst

SPECIAL = {106: "vcc_lo", 107: "vcc_hi", 124: "null", 125: "m0", 126: "exec_lo", 127: "exec_hi", 253: "scc"}
FLOATS = {240: "0.5", 241: "-0.5", 242: "1.0", 243: "-1.0", 244: "2.0", 245: "-2.0", 246: "4.0", 247: "-4.0", 248: "0.15915494"}

def reg(code: int, n: int = 1, lit: int | None = None) -> str:
  """Operand `code` (9-bit source encoding) spanning `n` dwords."""
  if code >= 256: return f"v{code - 256}" if n == 1 else f"v[{code - 256}:{code - 256 + n - 1}]"
  if code < 106: return f"s{code}" if n == 1 else f"s[{code}:{code + n - 1}]"
  if n == 2 and code in (106, 126): return {106: "vcc", 126: "exec"}[code]
  if code in SPECIAL: return SPECIAL[code]
  if 128 <= code <= 192: return str(code - 128)
  if 193 <= code <= 208: return str(192 - code)
  if code in FLOATS: return FLOATS[code]
  if code == 255: return f"0x{lit:x}"
  return f"?{code}"

def _mod(s: str, k: int, abs_: int, neg: int) -> str:
  if abs_ >> k & 1: s = f"|{s}|"
  if neg >> k & 1: s = f"-{s}"
  return s

def _types(base: str) -> tuple[list[int], int]:
  """Dword counts of (sources, destination) for a VALU op."""
  if base.startswith(("v_cmp_", "v_cmpx_")):
    t = base.split("_")[3]; n = 2 if t.endswith("64") else 1
    return [n, 1 if "class" in base else n], 1
  if base in ("v_mad_u64_u32", "v_mad_i64_i32"): return [1, 1, 2], 2
  if base in ("v_div_scale_f64", "v_div_fmas_f64", "v_div_fixup_f64"): return [2, 2, 2], 2
  if base in V.OPS:
    ts, rt, _ = V.OPS[base]
    return [2 if V.BITS[t] == 64 else 1 for t in ts], 2 if V.BITS[rt] == 64 else 1
  return [1, 1, 1], 1

DELAY_ID = ["NO_DEP", "VALU_DEP_1", "VALU_DEP_2", "VALU_DEP_3", "VALU_DEP_4", "TRANS32_DEP_1", "TRANS32_DEP_2", "TRANS32_DEP_3",
            "FMA_ACCUM_CYCLE_1", "SALU_CYCLE_1", "SALU_CYCLE_2", "SALU_CYCLE_3"]
DELAY_SKIP = ["SAME", "NEXT", "SKIP_1", "SKIP_2", "SKIP_3", "SKIP_4"]

def _sopp(i: Inst) -> str | None:
  b, k = i.base, i.f["simm16"]
  if b in ("s_endpgm", "s_barrier", "s_code_end", "s_endpgm_saved", "s_wait_idle", "s_icache_inv"): return ""
  if b == "s_branch" or b.startswith("s_cbranch_") or b in ("s_nop", "s_sleep", "s_setprio"): return str(k)
  if b in ("s_clause", "s_set_inst_prefetch_distance"): return f"0x{k:x}"
  if b == "s_waitcnt":   # gfx11 layout: expcnt [2:0], lgkmcnt [9:4], vmcnt [15:10]; counters at their maximum are not printed
    parts = [f"{n}({v})" for n, v, mx in (("vmcnt", k >> 10, 63), ("expcnt", k & 7, 7), ("lgkmcnt", (k >> 4) & 63, 63)) if v != mx]
    return " ".join(parts) if parts else None
  if b == "s_delay_alu":
    id0, skip, id1 = k & 0xF, (k >> 4) & 7, (k >> 7) & 0xF
    if id0 >= len(DELAY_ID) or id1 >= len(DELAY_ID) or skip >= len(DELAY_SKIP): return None
    parts = [f"instid0({DELAY_ID[id0]})"] if id0 else []
    if skip: parts.append(f"instskip({DELAY_SKIP[skip]})")
    if id1: parts.append(f"instid1({DELAY_ID[id1]})")
    return " | ".join(parts) if parts else None
  if b == "s_sendmsg" and k == 3: return "sendmsg(MSG_DEALLOC_VGPRS)"   # gfx11 message 3: release the wave's VGPRs early
  if b == "s_waitcnt_depctr" and k & 0xFFF == 0xF9F: return f"depctr_va_vdst({k >> 12})"  # other counters at their defaults
  return None

def operands(i: Inst) -> str | None:
  """Operand text of `i`, or None where this printer does not try (some SOPP immediates, VOP3P op_sel)."""
  f, b = i.f, i.base
  if i.enc == "SOPP": return _sopp(i)
  if i.enc == "MUBUF": return ""   # only the cache invalidations (buffer_gl0_inv, buffer_gl1_inv) decode: they take no operands
  if i.enc == "SOPK": return f"{reg(f['sdst'])}, 0x{f['simm16']:x}" if b != "s_version" else f"0x{f['simm16']:x}"
  if i.enc in ("SOP1", "SOP2", "SOPC"):
    w = lambda k: 2 if (b.endswith("64") and not (k == "ssrc1" and b in ("s_lshl_b64", "s_lshr_b64", "s_ashr_i64", "s_bfe_u64", "s_bfe_i64"))) else 1
    srcs = [reg(f[k], 1 if b == "s_bcnt1_i32_b64" and k == "sdst" else w(k), i.lit) for k in ("sdst", "ssrc0", "ssrc1") if k in f]
    if b == "s_getpc_b64": return reg(f["sdst"], 2)
    return ", ".join(srcs)
  if i.enc == "SMEM":
    n = int(b[8:]) // 32 if b.startswith("s_load_b") else 1
    off = f"0x{f['offset'] & 0x1FFFFF:x}" if f["offset"] else None
    tail = reg(f["soffset"]) + (f" offset:{off}" if off else "") if f["soffset"] != 124 else (off or "null")
    return f"{reg(f['sdata'], n)}, {reg(f['sbase'], 2)}, {tail}"
  if i.enc in ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3SD"):
    sn, dn = _types(b); e3 = i.enc.startswith("VOP3")
    if i.enc == "VOP1": srcs = [f["src0"]]
    elif i.enc in ("VOP2", "VOPC"): srcs = [f["src0"], f["vsrc1"] + 256]
    else: srcs = [f["src0"], f["src1"], f["src2"]]
    if b in ("v_fmamk_f32", "v_fmaak_f32"): parts = [reg(srcs[0]), *([f"0x{i.lit:x}", reg(srcs[1])] if "mk" in b else [reg(srcs[1]), f"0x{i.lit:x}"])]
    else:
      nsrc = len(V.OPS[b][0]) if b in V.OPS else {"v_cndmask_b32": 3 if e3 else 2}.get(b, 2 if b.startswith(("v_cmp", "v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32")) else 3)
      if b in ("v_fmac_f32", "v_fmac_f16") and e3: nsrc = 2
      if i.enc in ("VOP1",): nsrc = 1
      if i.enc in ("VOP2", "VOPC"): nsrc = min(nsrc, 2)
      # a literal of a 16-bit operand prints as its low half (LLVM encodes e.g. i16 -21845 as 0xffffaaab, prints 0xaaab)
      lit16 = [b in V.OPS and k < len(V.OPS[b][0]) and V.BITS[V.OPS[b][0][k]] == 16 for k in range(len(srcs))]
      parts = [_mod(reg(c, sn[k] if k < len(sn) else 1, i.lit & 0xFFFF if lit16[k] and i.lit is not None else i.lit), k, f.get("abs", 0),
                    f.get("neg", 0)) for k, c in enumerate(srcs[:nsrc])]
      if b in ("v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32", "v_cndmask_b32") and i.enc == "VOP2": parts.append("vcc_lo")
    if b.startswith("v_cmpx_"): dst = []
    elif b.startswith("v_cmp_"): dst = ["vcc_lo" if i.enc == "VOPC" else reg(f["vdst"])]
    elif b == "v_readfirstlane_b32" or b == "v_readlane_b32": dst = [reg(f["vdst"])]
    else: dst = [reg(f["vdst"] + 256, dn)]
    if i.enc == "VOP3SD": dst.append(reg(f["sdst"]))
    elif i.enc == "VOP2" and b in ("v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32"): dst.append("vcc_lo")
    s = ", ".join(dst + parts)
    if e3 and f.get("clamp"): s += " clamp"
    if e3 and f.get("omod"): s += {1: " mul:2", 2: " mul:4", 3: " div:2"}[f["omod"]]
    return s
  if i.enc == "VOP3P":
    n = 3 if any(k in b for k in ("fma", "mad", "dot")) else 2
    bits = lambda v: "[" + ",".join(str(v >> k & 1) for k in range(n)) + "]"
    hi = f["opsel_hi"] | (f["opsel_hi2"] << 2)
    if "mix" in b:   # fma_mix: neg/neg_hi are -x/|x| per source, op_sel_hi (f16 sources) defaults to all 0
      srcs = [_mod(reg(c, 1, i.lit), k, f["neg_hi"], f["neg"]) for k, c in enumerate((f["src0"], f["src1"], f["src2"]))]
      s = ", ".join([reg(f["vdst"] + 256), *srcs])
      if f["opsel"]: s += f" op_sel:{bits(f['opsel'])}"
      if hi: s += f" op_sel_hi:{bits(hi)}"
      return s + (" clamp" if f["clamp"] else "")
    s = ", ".join([reg(f["vdst"] + 256)] + [reg(c, 1, i.lit) for c in (f["src0"], f["src1"], f["src2"])[:n]])
    if f["opsel"] & ((1 << n) - 1): s += f" op_sel:{bits(f['opsel'])}"
    if hi & ((1 << n) - 1) != (1 << n) - 1: s += f" op_sel_hi:{bits(hi)}"
    if f["neg"]: s += f" neg_lo:{bits(f['neg'])}"
    if f["neg_hi"]: s += f" neg_hi:{bits(f['neg_hi'])}"
    if f["clamp"]: s += " clamp"
    return s
  if i.enc == "VOPD":
    def side(x: str) -> str:
      op = f["op" + x]; parts = [reg(f["vdst" + x] + 256), reg(f["src0" + x], 1, i.lit)]
      if op == "v_fmamk_f32": parts += [f"0x{i.lit:x}", reg(f["vsrc1" + x] + 256)]
      elif op == "v_fmaak_f32": parts += [reg(f["vsrc1" + x] + 256), f"0x{i.lit:x}"]
      elif op != "v_mov_b32": parts.append(reg(f["vsrc1" + x] + 256))
      return ", ".join(parts)
    return f"{side('x')} :: v_dual_{f['opy'][2:]} {side('y')}"
  if i.enc == "DS":
    n = b; dn = {"b64": 2, "b96": 3, "b128": 4}.get(n.split("_")[-1], 1)
    if "2addr" in n: dn *= 2
    a = reg(f["addr"] + 256)
    if n.startswith("ds_load") or "_rtn" in n or n == "ds_bpermute_b32":
      s = f"{reg(f['vdst'] + 256, dn)}, {a}" + (f", {reg(f['data0'] + 256)}" if "_rtn" in n or n == "ds_bpermute_b32" else "")
    else:
      per = dn // 2 if "2addr" in n else dn
      s = f"{a}, {reg(f['data0'] + 256, per)}" + (f", {reg(f['data1'] + 256, per)}" if "2addr" in n else "")
    if "2addr" in n:
      s += (f" offset0:{f['offset0']}" if f["offset0"] else "") + (f" offset1:{f['offset1']}" if f["offset1"] else "")
    elif f["offset0"] | (f["offset1"] << 8): s += f" offset:{f['offset0'] | (f['offset1'] << 8)}"
    return s
  if i.enc in ("GLOBAL", "FLAT"):
    op = b.split("_", 1)[1]; dn = {"b64": 2, "b96": 3, "b128": 4}.get(op.split("_")[-1], 1)
    sa = f["saddr"] != 124 and i.enc == "GLOBAL"
    a = reg(f["addr"] + 256, 1 if sa else 2)
    if op.startswith("load"): s = f"{reg(f['vdst'] + 256, dn)}, {a}"
    elif op.startswith("store"): s = f"{a}, {reg(f['data'] + 256, dn)}"
    else:
      dw = (2 if op.endswith("64") else 1) * (2 if "cmpswap" in op else 1)
      s = (f"{reg(f['vdst'] + 256, 2 if op.endswith('64') else 1)}, " if f["glc"] else "") + f"{a}, {reg(f['data'] + 256, dw)}"
    if i.enc == "GLOBAL": s += ", " + (reg(f["saddr"], 2) if sa else "off")
    if f["offset"]: s += f" offset:{f['offset']}"
    if f["glc"]: s += " glc"
    if f["slc"]: s += " slc"
    if f["dlc"]: s += " dlc"
    return s
  return None
