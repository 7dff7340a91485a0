"""COMPUTE_* registers of the two supported targets, as absolute dword addresses (what SET_SH_REG takes
after subtracting 0x2C00), and the fields a dispatch programs.

Addresses: gc_11_0_0_offset.h (gfx1100) and gc_9_4_3_offset.h (gfx942) plus their GC segment-0 base
(0x1260 and 0x2000), from ../shared/abi/amd_packets.json. The two agree except COMPUTE_PGM_RSRC3 and the
registers after COMPUTE_THREADGROUP_ID.

  >>> hex(COMPUTE_REGS["gfx942"]["PGM_RSRC3"]), hex(COMPUTE_REGS["gfx1100"]["PGM_RSRC3"])
  ('0x2e2d', '0x2e28')
  >>> hex(dispatch_initiator("gfx1100", wave32=True))
  '0x8005'
"""
from __future__ import annotations

GC_BASE = {"gfx1100": 0x1260, "gfx942": 0x2000}   # dword base of GC segment 0 (from IP discovery on real HW)

_COMMON = {
  "DISPATCH_INITIATOR": 0x2E00, "DIM_X": 0x2E01, "DIM_Y": 0x2E02, "DIM_Z": 0x2E03,
  "START_X": 0x2E04, "START_Y": 0x2E05, "START_Z": 0x2E06,
  "NUM_THREAD_X": 0x2E07, "NUM_THREAD_Y": 0x2E08, "NUM_THREAD_Z": 0x2E09,
  "PIPELINESTAT_ENABLE": 0x2E0A, "PERFCOUNT_ENABLE": 0x2E0B, "PGM_LO": 0x2E0C, "PGM_HI": 0x2E0D,
  "DISPATCH_PKT_ADDR_LO": 0x2E0E, "DISPATCH_PKT_ADDR_HI": 0x2E0F,
  "DISPATCH_SCRATCH_BASE_LO": 0x2E10, "DISPATCH_SCRATCH_BASE_HI": 0x2E11,
  "PGM_RSRC1": 0x2E12, "PGM_RSRC2": 0x2E13, "VMID": 0x2E14, "RESOURCE_LIMITS": 0x2E15,
  "STATIC_THREAD_MGMT_SE0": 0x2E16, "STATIC_THREAD_MGMT_SE1": 0x2E17, "TMPRING_SIZE": 0x2E18,
  "STATIC_THREAD_MGMT_SE2": 0x2E19, "STATIC_THREAD_MGMT_SE3": 0x2E1A,
  "RESTART_X": 0x2E1B, "RESTART_Y": 0x2E1C, "RESTART_Z": 0x2E1D, "THREAD_TRACE_ENABLE": 0x2E1E,
  "MISC_RESERVED": 0x2E1F, "DISPATCH_ID": 0x2E20, "THREADGROUP_ID": 0x2E21,
  **{f"USER_DATA_{i}": 0x2E40 + i for i in range(16)},
  "DISPATCH_END": 0x2E7E, "NOWHERE": 0x2E7F,
}
COMPUTE_REGS: dict[str, dict[str, int]] = {
  "gfx1100": {**_COMMON, "REQ_CTRL": 0x2E22, **{f"USER_ACCUM_{i}": 0x2E24 + i for i in range(4)}, "PGM_RSRC3": 0x2E28,
              "DDID_INDEX": 0x2E29, "SHADER_CHKSUM": 0x2E2A, **{f"STATIC_THREAD_MGMT_SE{4 + i}": 0x2E2B + i for i in range(4)},
              "DISPATCH_INTERLEAVE": 0x2E2F, "RELAUNCH": 0x2E30, "WAVE_RESTORE_ADDR_LO": 0x2E31, "WAVE_RESTORE_ADDR_HI": 0x2E32,
              "RELAUNCH2": 0x2E33, "DISPATCH_TUNNEL": 0x2E7D},
  "gfx942": {**_COMMON, "RELAUNCH": 0x2E22, "WAVE_RESTORE_ADDR_LO": 0x2E23, "WAVE_RESTORE_ADDR_HI": 0x2E24,
             "TG_CHUNK_SIZE": 0x2E27, "SHADER_CHKSUM": 0x2E2C, "PGM_RSRC3": 0x2E2D},
}

def sh_offset(target: str, name: str) -> int:
  """The SET_SH_REG offset (absolute dword address - 0x2C00) of COMPUTE_<name> on `target`."""
  return COMPUTE_REGS[target][name] - 0x2C00

# COMPUTE_DISPATCH_INITIATOR bits (both targets unless noted)
DI_COMPUTE_SHADER_EN, DI_PARTIAL_TG_EN, DI_FORCE_START_AT_000 = 1 << 0, 1 << 1, 1 << 2
DI_ORDERED_APPEND_ENBL, DI_USE_THREAD_DIMENSIONS, DI_ORDER_MODE = 1 << 3, 1 << 5, 1 << 6
DI_SCALAR_L1_INV_VOL, DI_VECTOR_L1_INV_VOL, DI_RESTORE = 1 << 10, 1 << 11, 1 << 14
DI_TUNNEL_ENABLE, DI_CS_W32_EN, DI_AMP_SHADER_EN, DI_DISABLE_DISP_PREMPT_EN = 1 << 13, 1 << 15, 1 << 16, 1 << 17   # gfx1100 only

def dispatch_initiator(target: str, wave32: bool = False) -> int:
  """COMPUTE_DISPATCH_INITIATOR for a plain dispatch: shader enabled, start at workgroup 0, CS_W32_EN for wave32
  (a gfx10+ bit: gfx942 runs wave64 only)."""
  if target not in COMPUTE_REGS: raise ValueError(f"unknown target {target!r} (known: {', '.join(COMPUTE_REGS)})")
  if wave32 and target == "gfx942": raise ValueError("gfx942 has no wave32 mode (COMPUTE_DISPATCH_INITIATOR has no CS_W32_EN)")
  return DI_COMPUTE_SHADER_EN | DI_FORCE_START_AT_000 | (DI_CS_W32_EN if wave32 else 0)

# (lo, hi) bit ranges of register fields a dispatch fills in (sh_mask-derived; gfx942 differs where given)
FIELDS: dict[str, dict[str, dict[str, tuple[int, int]]]] = {
  "gfx1100": {
    "TMPRING_SIZE": {"WAVES": (0, 11), "WAVESIZE": (12, 26)},
    "RESOURCE_LIMITS": {"WAVES_PER_SH": (0, 9), "TG_PER_CU": (12, 15), "LOCK_THRESHOLD": (16, 21), "CU_GROUP_COUNT": (24, 26)},
    "PGM_RSRC2": {"SCRATCH_EN": (0, 0), "USER_SGPR": (1, 5), "TGID_X_EN": (7, 7), "TGID_Y_EN": (8, 8), "TGID_Z_EN": (9, 9),
                  "TG_SIZE_EN": (10, 10), "TIDIG_COMP_CNT": (11, 12), "LDS_SIZE": (15, 23)},
  },
  "gfx942": {
    "TMPRING_SIZE": {"WAVES": (0, 11), "WAVESIZE": (12, 24)},
    "RESOURCE_LIMITS": {"WAVES_PER_SH": (0, 9), "TG_PER_CU": (12, 15), "LOCK_THRESHOLD": (16, 21), "CU_GROUP_COUNT": (24, 26)},
    "PGM_RSRC2": {"SCRATCH_EN": (0, 0), "USER_SGPR": (1, 5), "TGID_X_EN": (7, 7), "TGID_Y_EN": (8, 8), "TGID_Z_EN": (9, 9),
                  "TG_SIZE_EN": (10, 10), "TIDIG_COMP_CNT": (11, 12), "LDS_SIZE": (15, 23)},
  },
}

def set_field(target: str, reg: str, field: str, value: int, word: int = 0) -> int:
  """`word` with register field `reg.field` of `target` set to `value` (raises if it does not fit).

    >>> hex(set_field("gfx1100", "TMPRING_SIZE", "WAVES", 32))
    '0x20'
  """
  lo, hi = FIELDS[target][reg][field]
  width = hi - lo + 1
  if not 0 <= value < (1 << width): raise ValueError(f"COMPUTE_{reg}.{field} on {target}: {value} does not fit {width} bits")
  return (word & ~(((1 << width) - 1) << lo)) | (value << lo)
