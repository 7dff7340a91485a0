"""CPU backend: C kernels compiled to ELF objects, loaded by our own loader, run on host threads."""
from hcqrt.cpu.elf_loader import load_elf, LoadedImage, ElfLoadError, resolve_external
from hcqrt.cpu.device import CPUDevice, CPUAllocator, CPUBuffer, CPUProgram

__all__ = ["CPUAllocator", "CPUBuffer", "CPUDevice", "CPUProgram", "ElfLoadError", "LoadedImage", "load_elf", "resolve_external"]
