"""PTX interpreter used by the NVIDIA mock GPU: parse PTX, run kernels vectorised over threads with numpy."""
from .parser import PTXError
from .memory import AddressSpace, MemoryFault
from .interpreter import PTXModule, PTXKernel

__all__ = ["AddressSpace", "MemoryFault", "PTXError", "PTXKernel", "PTXModule"]
