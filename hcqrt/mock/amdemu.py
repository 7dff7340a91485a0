"""AMDEMU: a device that runs every kernel as real gfx1100 machine code on the RDNA3 emulator, on the CPU, no driver.

Kernels go render (LLVM IR for gfx1100, the AMD device's target) -> llvmlite (an HSA code object) -> our code-object
reader (hcqrt/amd/codeobject.py: layout, relocations, descriptor, kernarg layout) -> the emulator
(hcqrt/mock/amd/rdna3), which starts each wave from the kernel descriptor the way the hardware's dispatcher does. So
the whole AMD compile path is exercised without a GPU or the mock KFD. Buffers live in one FlatMemory at GPU-like
virtual addresses; the kernel arguments are packed where the code object's metadata says, hidden ones included.

>>> import numpy as np
>>> from compiler.assemble.llvm import compile_llvm
>>> dev = AMDEmuDevice("AMDEMU")
>>> buf = dev.allocator.alloc(16)
>>> ir = '''declare i32 @llvm.amdgcn.workitem.id.x()
... define amdgpu_kernel void @fill(ptr addrspace(1) noalias %out) {
...   %t = call i32 @llvm.amdgcn.workitem.id.x()
...   %p = getelementptr i32, ptr addrspace(1) %out, i32 %t
...   store i32 %t, ptr addrspace(1) %p
...   ret void
... }'''
>>> prog = dev.program("fill", compile_llvm(ir, "fill", "gfx1100"))
>>> _ = prog(buf, global_size=(1, 1, 1), local_size=(4, 1, 1))
>>> out = np.zeros(4, np.int32); dev.allocator.copyout(memoryview(out), buf); out.tolist()
[0, 1, 2, 3]
"""
from __future__ import annotations
import struct, time
from collections.abc import Sequence
from hcqrt.amd import codeobject
from hcqrt.mock.amd.rdna3 import FlatMemory, KernelDescriptor, launch
from hcqrt.mock.emu_alloc import EmuAllocator, EmuBuffer
from hcqrt.interface import GraphItem

ARCH = "gfx1100"        # the only target the emulator runs (wave32)
LDS_BYTES = 64 << 10    # LDS per workgroup on gfx1100

class EmuProgram:
  """One kernel of an HSA code object, run by the RDNA3 emulator. Calling it launches `global_size` workgroups of
  `local_size` work-items with the buffers' addresses (then `vals`) as arguments; `wait=True` returns the seconds taken."""
  def __init__(self, dev: AMDEmuDevice, name: str, lib: bytes):
    co = codeobject.read(lib, name)
    self.name, self.dev, self.co = name, dev, co
    self.kd = KernelDescriptor.from_bytes(co.descriptor)
    if not self.kd.wave32: raise RuntimeError(f"AMDEMU: kernel {name} is not a wave32 kernel; the RDNA3 emulator runs gfx1100 wave32 code only")
    if self.kd.group_segment_fixed_size > LDS_BYTES:
      raise ValueError(f"AMDEMU: kernel {name} needs {self.kd.group_segment_fixed_size} bytes of LDS, a {ARCH} workgroup has {LDS_BYTES}")
    self.params = co.params
    self.kernarg_size = co.kernarg_size if co.kernarg_size is not None else max([o + s for o, s in co.params] + [self.kd.kernarg_size, 8])
    # the kernarg segment lives in device memory for the kernel's scalar loads, one per program (launches are synchronous)
    self.kernargs = dev.allocator.alloc(self.kernarg_size)
    # the whole image (code, descriptor, read-only data) at a 256-aligned address: code reads constants PC-relative
    self.image = dev.allocator.alloc(len(co.image))
    dev.allocator.copyin(self.image, memoryview(co.image))

  def __call__(self, *bufs: EmuBuffer, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] = (1, 1, 1),
               vals: Sequence[int] = (), wait: bool = False, **_) -> float | None:
    if len(bufs) + len(vals) != len(self.params):
      raise TypeError(f"AMDEMU: kernel {self.name} takes {len(self.params)} arguments, got {len(bufs)} buffers and {len(vals)} values")
    g = tuple(int(x) for x in global_size) + (1,) * (3 - len(global_size))
    lsz = tuple(int(x) for x in local_size) + (1,) * (3 - len(local_size))
    ka = bytearray(self.kernarg_size)
    for (off, size), b in zip(self.params, bufs):
      if size != 8: raise TypeError(f"AMDEMU: kernel {self.name}: argument at offset {off} is {size} bytes, not a pointer")
      struct.pack_into("<Q", ka, off, b.va)
    for (off, size), v in zip(self.params[len(bufs):], vals):
      struct.pack_into({4: "<i", 8: "<q"}[size] if v < 0 else {4: "<I", 8: "<Q"}[size], ka, off, v)
    # what an AQL packet processor supplies to a code object v5 kernel: workgroup counts and sizes, no partial groups
    hidden = {"hidden_block_count_x": g[0], "hidden_block_count_y": g[1], "hidden_block_count_z": g[2], "hidden_group_size_x": lsz[0],
              "hidden_group_size_y": lsz[1], "hidden_group_size_z": lsz[2],
              "hidden_grid_dims": 3 if g[2] * lsz[2] > 1 else 2 if g[1] * lsz[1] > 1 else 1}
    for kind, (off, size) in self.co.hidden.items(): ka[off:off + size] = int(hidden.get(kind, 0)).to_bytes(size, "little")
    self.dev.allocator.copyin(self.kernargs, memoryview(ka))
    st = time.perf_counter()
    launch(self.co.image, self.kd, self.dev.mem, self.kernargs.va, g, lsz, entry=self.co.entry, code_va=self.image.va)
    return time.perf_counter() - st if wait else None

class AMDEmuDevice:
  """The RDNA3 emulator as a device: the AMD device's compile target (renderer "llvm", arch gfx1100, wave32).

  >>> AMDEmuDevice("AMDEMU").target["arch"]
  'gfx1100'
  """
  name = "AMDEMU"
  renderer = "llvm"
  arch = ARCH
  wave_size = 32
  def __init__(self, name: str = "AMDEMU"):
    self.name = name
    self.mem = FlatMemory()
    self.allocator = EmuAllocator(self.mem)
  @property
  def target(self) -> dict:
    """What the compiler needs to know about this device: the same fields the AMD device reports for a gfx1100."""
    return {"device": self.name, "renderer": self.renderer, "arch": self.arch, "buffer_alignment": 16,
            "shared_memory": LDS_BYTES, "warp_size": self.wave_size, "gpu": True}
  def program(self, name: str, lib: bytes) -> EmuProgram:
    """Kernel `name` of an HSA code object (LLVM's relocatable .o for gfx1100)."""
    return EmuProgram(self, name, lib)
  def synchronize(self, timeout_s: float | None = None) -> None:
    """Nothing to wait for: emulated launches are complete when their call returns."""
  def graph(self, items: Sequence[GraphItem], timestamps: bool = False) -> None:
    """No graphs (interface.Device.graph): a JIT replay runs the launches one at a time."""
  def __repr__(self) -> str: return f"<AMDEmuDevice {self.arch}>"
