"""Filling a QMD (compute launch descriptor) for one kernel, per QMD version.

The versions name the same facts differently (V03 CTA_RASTER_* vs GRID_*; V05 stores some addresses and
sizes shifted), so a small table maps each launch fact to (field, shift) per version.

  >>> q = launch_qmd("V04_00", prog_va=0x10000, regs=16, shared=0, local=0, barriers=1, cbufs={0: (0x20000, 0x300)})
  >>> set_dims(q, (4, 1, 1), (32, 1, 1)); q.get("GRID_WIDTH"), q.get("CTA_THREAD_DIMENSION0"), q.get("QMD_TYPE")
  (4, 32, 2)
"""
from __future__ import annotations
import struct
from ioctl_defs.nv.qmd import QMD

# fact -> (lower field, upper field or None, shift)
SPEC: dict[str, dict[str, tuple]] = {
  "V03_00": {"grid": ("CTA_RASTER_WIDTH", "CTA_RASTER_HEIGHT", "CTA_RASTER_DEPTH"), "prog": ("PROGRAM_ADDRESS_LOWER", "PROGRAM_ADDRESS_UPPER", 0),
             "regs": ("REGISTER_COUNT_V",), "smem": ("SHARED_MEMORY_SIZE", 0), "local": ("SHADER_LOCAL_MEMORY_HIGH_SIZE", 0),
             "cb": ("CONSTANT_BUFFER_ADDR_LOWER", "CONSTANT_BUFFER_ADDR_UPPER", 0)},
  "V04_00": {"grid": ("GRID_WIDTH", "GRID_HEIGHT", "GRID_DEPTH"), "prog": ("PROGRAM_ADDRESS_LOWER", "PROGRAM_ADDRESS_UPPER", 0),
             "regs": ("REGISTER_COUNT",), "smem": ("SHARED_MEMORY_SIZE", 0), "local": ("SHADER_LOCAL_MEMORY_HIGH_SIZE", 0),
             "cb": ("CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6", "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6", 6)},
  "V05_00": {"grid": ("GRID_WIDTH", "GRID_HEIGHT", "GRID_DEPTH"), "prog": ("PROGRAM_ADDRESS_LOWER_SHIFTED4", "PROGRAM_ADDRESS_UPPER_SHIFTED4", 4),
             "regs": ("REGISTER_COUNT",), "smem": ("SHARED_MEMORY_SIZE_SHIFTED7", 7), "local": ("SHADER_LOCAL_MEMORY_HIGH_SIZE_SHIFTED4", 4),
             "cb": ("CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6", "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6", 6)},
}
# Per-thread local memory goes in the HIGH size: CUDA-built code keeps its stack at the top of the thread's local
# window (the stack pointer it loads from c[0] sits just below the window's end), which is the HIGH part.
STACK_TOP_RESERVED = 0x240       # bytes between the initial stack pointer and the end of the 16 MiB per-thread window
LOCAL_WINDOW_PER_THREAD = 1 << 24
INITIAL_STACK_POINTER = LOCAL_WINDOW_PER_THREAD - STACK_TOP_RESERVED   # 0xfffdc0, what CUDA-built sm_8x..sm_12x code expects

# largest shared-memory carve-out per SM (KiB) a block may ask for, by SM version (CUDA programming guide tables)
SM_SHARED_KIB = {80: 164, 86: 100, 87: 164, 89: 100, 90: 228, 100: 228, 120: 100}

def _round_up(x: int, a: int) -> int: return (x + a - 1) // a * a

def smem_config(shared: int, max_kib: int = 228) -> int:
  """The SM shared-memory carve-out (KiB/4 + 1) a launch asks for: the smallest of 32/64/100/.../228 KiB holding `shared`.
  The encoding follows what open-source drivers program; it is not documented in the class headers.

  >>> smem_config(0), smem_config(40 << 10), smem_config(200 << 10)
  (9, 17, 58)
  """
  for kib in (32, 64, 100, 132, 164, 196, 228):
    if kib <= max_kib and kib * 1024 >= shared: return kib // 4 + 1
  raise ValueError(f"{shared} bytes of shared memory exceed the {max_kib} KiB an SM has")

def local_high_size(stack: int) -> int:
  """Per-thread bytes of the HIGH local-memory region a kernel with `stack` bytes of stack needs (0: no stack)."""
  return _round_up(stack + STACK_TOP_RESERVED, 16) if stack else 0

def launch_qmd(version: str, prog_va: int, regs: int, shared: int, local: int, barriers: int, cbufs: dict[int, tuple[int, int]],
               sm: int = 90) -> QMD:
  """A QMD with everything but the grid/block dims and constant bank 0 address (set per launch). `local` is the
  per-thread HIGH local-memory size (local_high_size), `sm` the SM version (its shared-memory carve-out limit)."""
  s, q = SPEC[version], QMD(version)
  if version != "V03_00": q.set("QMD_TYPE", "GRID_CTA")   # a grid of CTAs; 0 (QUEUE) would make it a queue QMD
  lo, hi, sh = s["prog"]
  q.set_address(lo, hi, prog_va, sh)
  q.set(s["regs"][0], regs)
  f, sh = s["smem"]
  q.set(f, _round_up(shared, 1 << sh) >> sh)
  f, sh = s["local"]
  q.set(f, _round_up(local, 16) >> sh)
  q.set("BARRIER_COUNT", barriers)
  top = SM_SHARED_KIB.get(sm, 100)
  cfg = smem_config(shared, top)
  q.set("MIN_SM_CONFIG_SHARED_MEM_SIZE", cfg).set("MAX_SM_CONFIG_SHARED_MEM_SIZE", top // 4 + 1).set("TARGET_SM_CONFIG_SHARED_MEM_SIZE", cfg)
  q.set("API_VISIBLE_CALL_LIMIT", "NO_CHECK").set("SAMPLER_INDEX", "VIA_HEADER_INDEX")
  for f in ("INVALIDATE_TEXTURE_HEADER_CACHE", "INVALIDATE_TEXTURE_SAMPLER_CACHE", "INVALIDATE_TEXTURE_DATA_CACHE",
            "INVALIDATE_SHADER_DATA_CACHE", "INVALIDATE_INSTRUCTION_CACHE", "INVALIDATE_SHADER_CONSTANT_CACHE"): q.set(f, 1)
  for i, (va, size) in cbufs.items(): set_cbuf(q, i, va, size)
  return q

def set_cbuf(q: QMD, i: int, va: int, size: int) -> None:
  """Constant bank `i` at `va` with `size` bytes."""
  lo, hi, sh = SPEC[q.version]["cb"]
  q.set_address(lo, hi, va, sh, i=i)
  q.set("CONSTANT_BUFFER_SIZE_SHIFTED4", _round_up(size, 16) >> 4, i=i)
  q.set("CONSTANT_BUFFER_VALID", 1, i=i)

# Compiled code reads blockDim (%ntid) and gridDim (%nctaid) from constant bank 0, not from the QMD (which only says
# which CTAs and threads run): (block, grid) offsets of three u32 each, per QMD version. Evidence: ptxas 13.0 output
# disassembled by nvdisasm 13.5.37 -- sm_80/sm_89/sm_90: `LDC R16, c[0x0][RZ]`, `c[0x0][0x4]`, `c[0x0][0x8]` (%ntid.x/y/z)
# and `c[0x0][0xc]`, `c[0x0][0x10]`, `c[0x0][0x14]` (%nctaid.x/y/z); sm_100/sm_120: `LDC R16, c[0x0][0x360]` .. `0x368`
# and `c[0x0][0x370]` .. `0x378`.
CB0_DIMS = {"V03_00": (0x0, 0xc), "V04_00": (0x0, 0xc), "V05_00": (0x360, 0x370)}

def set_cbuf_dims(cb, version: str, grid: tuple[int, int, int], block: tuple[int, int, int]) -> None:
  """Write the launch's block and grid dimensions where the code reads them in constant bank 0 (`cb`, writable bytes).

  >>> cb = bytearray(0x400); set_cbuf_dims(cb, "V05_00", (4, 2, 1), (32, 1, 1)); struct.unpack_from("<3I", cb, 0x370)
  (4, 2, 1)
  """
  b, g = CB0_DIMS[version]
  struct.pack_into("<3I", cb, b, *block)
  struct.pack_into("<3I", cb, g, *grid)

def set_dims(q: QMD, grid: tuple[int, int, int], block: tuple[int, int, int]) -> None:
  for f, v in zip(SPEC[q.version]["grid"], grid): q.set(f, v)
  for i, v in enumerate(block): q.set(f"CTA_THREAD_DIMENSION{i}", v)
