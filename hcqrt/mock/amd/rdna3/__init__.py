"""An RDNA3 (gfx1100) machine-code emulator: decode the real instruction encodings, run wave32 waves with numpy.

`launch` runs a kernel from its code-object descriptor (the AQL view); `dispatch` from the COMPUTE_* register
values a PM4 stream sets (the view a mock KFD's packet processor has).

>>> from hcqrt.mock.amd.rdna3 import decode
>>> decode(bytes.fromhex("0000b0bf"))[0].name
's_endpgm'
"""
from hcqrt.mock.amd.rdna3.decoder import DecodeError, Inst, decode, decode_one
from hcqrt.mock.amd.rdna3.executor import EmulatorError
from hcqrt.mock.amd.rdna3.launch import KernelDescriptor, LaunchStats, dispatch, launch
from hcqrt.mock.amd.rdna3.memory import FlatMemory, MemoryFault

__all__ = ["DecodeError", "EmulatorError", "FlatMemory", "Inst", "KernelDescriptor", "LaunchStats", "MemoryFault", "decode",
           "decode_one", "dispatch", "launch"]
