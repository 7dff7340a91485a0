"""A gfx942 (MI300X: GFX9 family, CDNA3, wave64) machine-code emulator: GFX9 encodings decoded into the RDNA3
emulator's records and run by its engine with 64-lane waves (`Gfx9Waves`).

`dispatch` runs a dispatch from the COMPUTE_* register values a PM4 stream (or the AQL packet processor) sets, as
rdna3.dispatch does for gfx1100.

Known gap (audit g30 row 6): no cache model per XCC. Every wave sees one coherent memory and buffer_wbl2 / buffer_inv
are no-ops, so a kernel that drops the `buffer_wbl2 sc1` of an agent-scope release (llc-19 -mcpu=gfx942 emits it for
`fence syncscope("agent") release`; each XCC has its own L2, LLVM AMDGPUUsage memory model GFX942) still passes even
when its workgroups run on different XCCs. Between dispatches the packets' acquire/release fences decide coherence.

>>> from hcqrt.mock.amd.gfx9 import decode
>>> decode(bytes.fromhex("000081bf"))[0].name
's_endpgm'
"""
from __future__ import annotations
from hcqrt.mock.amd.rdna3.launch import LaunchStats
from hcqrt.mock.amd.rdna3.launch import dispatch as _dispatch
from hcqrt.mock.amd.gfx9.decoder import decode, decode_one
from hcqrt.mock.amd.gfx9.executor import Gfx9Waves

def dispatch(mem, code, rsrc1: int, rsrc2: int, user_data: list[int], grid, block, **kw) -> LaunchStats:
  """Run gfx942 code: rdna3.launch.dispatch with 64-lane GFX9 waves (see there for the arguments)."""
  return _dispatch(mem, code, rsrc1, rsrc2, user_data, grid, block, wave32=False, waves_cls=Gfx9Waves, **kw)

__all__ = ["Gfx9Waves", "decode", "decode_one", "dispatch"]
