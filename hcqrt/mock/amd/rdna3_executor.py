"""The mock CP's default shader executor: run a decoded DISPATCH_DIRECT on the RDNA3 emulator.

Everything comes from the mock itself: the machine code is fetched from the mock's GPU memory at COMPUTE_PGM_LO/HI
(never from the backend), RSRC1/2 and the user SGPRs from the registers the PM4 stream set, and every load/store goes
through a flat map of the BOs mapped to the GPU, so an access outside them is a named GPU page fault (scratch
included: each wave's slot lies in the GPU memory the CP's scratch registers name). gfx1100 runs
on the RDNA3 emulator (wave32), gfx942 on the same engine with GFX9 decoding and 64-lane waves (hcqrt/mock/amd/gfx9).
"""
from __future__ import annotations

import ctypes
import functools
import re

import numpy as np

from hcqrt.mock.amd.cp import Dispatch, GPUError
from hcqrt.mock.amd.memory import GPUVM, GPUFault
from hcqrt.mock.amd.rdna3 import DecodeError, EmulatorError, FlatMemory, MemoryFault
from hcqrt.mock.amd.rdna3 import dispatch as emu_dispatch
from hcqrt.mock.amd.gfx9 import dispatch as gfx9_dispatch
from hcqrt.mock.amd.gfx9.l1 import VectorL1


EMULATOR = {"gfx1100": "RDNA3", "gfx942": "gfx942"}

_HOST_ARRAYS: dict[tuple[int, int], np.ndarray] = {}
def _host_array(host: int, size: int) -> np.ndarray:
  """The `size` bytes at host address `host` as a uint8 array, made once per (address, size): a view of the memory
  there, whatever BO holds it now (flat_memory only asks for memory that a mapped BO holds)."""
  if (a := _HOST_ARRAYS.get((host, size))) is None:
    if len(_HOST_ARRAYS) > 65536: _HOST_ARRAYS.clear()
    a = _HOST_ARRAYS[(host, size)] = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(host))
  return a

def flat_memory(vm: GPUVM) -> FlatMemory:
  """The GPU's view of memory as the emulator wants it: every GPU-mapped BO at its VA, sharing the mock's bytes."""
  return FlatMemory.from_arrays([(va, _host_array(host, size)) for va, size, host in vm.flat_map()])

def run(d: Dispatch, vm: GPUVM) -> None:
  """Execute one dispatch; a memory access outside the mapped BOs raises GPUFault (the CP turns it into a queue fault)."""
  if d.arch not in ("gfx1100", "gfx942"):
    raise GPUError(f"mock AMD: {d.arch} execution is not emulated (gfx1100 wave32 and gfx942 wave64 code only); "
                   f"dispatch of the program at {d.program:#x} grid {d.grid} block {d.block}")
  if d.arch == "gfx1100" and not d.wave32: raise GPUError(f"mock AMD: gfx1100 dispatch at {d.program:#x} without CS_W32_EN (wave64) is not emulated")
  vm.find(d.program, 4)   # instruction fetch of an unmapped program is a fault, not an emulator error
  run_isa = gfx9_dispatch if d.arch == "gfx942" else functools.partial(emu_dispatch, wave32=True)
  # the XCCs the CP dealt the workgroups to (round robin on an AQL queue, all on one for PM4: cp.aql_xcc_share,
  # pm4_xcc_share): each has its own L2 on gfx942 (gfx9/l2.py)
  num_xcc = len(d.xcc_workgroups) if sum(1 for n in d.xcc_workgroups if n) > 1 else 1
  mem = flat_memory(vm)
  # the vector L1s (gfx942) / GL0s (gfx1100) of the GPU's CUs: their lines outlive the dispatch until the CP's cache
  # actions drop them (gfx9/l1.py; cp.py ACQUIRE_MEM, aql.py acquire fences)
  if vm.vector_l1 is None: vm.vector_l1 = VectorL1(mem, lambda a, n, x: mem.read(a, n, "L1 line"), np.zeros_like)
  # gfx1100: the GL1s, one per shader array (the KFD topology's array_count: cp.Queue.dispatch sets d.shader_arrays)
  gl1 = {}
  if d.arch == "gfx1100":
    if vm.gl1 is None: vm.gl1 = VectorL1(mem, lambda a, n, x: mem.read(a, n, "GL1 line"), np.zeros_like)
    gl1 = {"gl1": vm.gl1, "shader_arrays": d.shader_arrays}
  try:
    run_isa(mem, d.program, d.rsrc1, d.rsrc2, d.user_data, d.grid, d.block, lds_bytes=d.lds_bytes, scratch_ring=d.scratch,
            num_xcc=num_xcc, l1=vm.vector_l1, **gl1)
  except MemoryFault as e:
    m = re.search(r"(?:access at |: )0x([0-9a-f]+) is outside", str(e))   # the faulting address, not the instruction's
    raise GPUFault(f"shader memory access of the program at {d.program:#x}: {e}", int(m.group(1), 16) if m else 0) from None
  except (EmulatorError, DecodeError) as e:
    raise GPUError(f"mock AMD: the program at {d.program:#x} cannot run on the {EMULATOR[d.arch]} emulator: {e}") from None
