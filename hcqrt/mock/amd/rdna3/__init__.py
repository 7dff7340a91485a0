"""An RDNA3 (gfx1100) machine-code emulator: decode the real instruction encodings, run wave32 waves with numpy.

>>> from hcqrt.mock.amd.rdna3 import decode
>>> decode(bytes.fromhex("0000b0bf"))[0].name
's_endpgm'
"""
from hcqrt.mock.amd.rdna3.decoder import decode, decode_one, Inst, DecodeError
from hcqrt.mock.amd.rdna3.executor import EmulatorError
from hcqrt.mock.amd.rdna3.memory import FlatMemory, MemoryFault
from hcqrt.mock.amd.rdna3.launch import launch, KernelDescriptor, LaunchStats

__all__ = [
           "DecodeError",
           "EmulatorError",
           "FlatMemory",
           "Inst",
           "KernelDescriptor",
           "LaunchStats",
           "MemoryFault",
           "decode",
           "decode_one",
           "launch",
]
