"""A gfx942 (MI300X: GFX9 family, CDNA3, wave64) machine-code emulator: GFX9 encodings decoded into the RDNA3
emulator's records and run by its engine with 64-lane waves (`Gfx9Waves`).

`dispatch` runs a dispatch from the COMPUTE_* register values a PM4 stream (or the AQL packet processor) sets, as
rdna3.dispatch does for gfx1100.

Per-XCC L2s (audit g30 row 6): a dispatch dealt over several XCCs (`num_xcc`) keeps each XCC's stores dirty in its
own L2 until a `buffer_wbl2 sc1` or the end of the dispatch (gfx9/l2.py, which also says what is not modelled).
Per-CU vector L1s (audit x30 row 2): a workgroup's plain loads read the lines its CU's L1 filled, stale, until it
runs `buffer_inv` or the CP invalidates the L1; the lines outlive the workgroup and the dispatch (gfx9/l1.py).

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
