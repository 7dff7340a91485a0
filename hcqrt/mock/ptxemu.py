"""PTXEMU: a device that runs every kernel as a real cubin's PTX in the interpreter, on the CPU.

Kernels go render (PTX) -> NVIDIA's assembler (cubin) -> our cubin loader (parameter layout) -> the PTX
interpreter, so the whole NVIDIA compile path is exercised without a GPU. Buffers live in one PTX
AddressSpace at GPU-like virtual addresses; kernel parameters are packed exactly where the cubin says.

>>> import numpy as np
>>> from compiler.assemble.ptx_assembler import assemble_ptx
>>> dev = PTXEmuDevice("PTXEMU")
>>> buf = dev.allocator.alloc(16)
>>> src = '''.version 7.8
... .target sm_90
... .address_size 64
... .visible .entry fill(.param .u64 out)
... {
...   .reg .b32 %r<2>; .reg .b64 %rd<4>;
...   ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1;
...   mov.u32 %r1, %tid.x; mul.wide.u32 %rd2, %r1, 4; add.s64 %rd3, %rd1, %rd2;
...   st.global.u32 [%rd3], %r1;
...   ret;
... }'''
>>> prog = dev.program("fill", assemble_ptx(src, "sm_90"))
>>> _ = prog(buf, global_size=(1, 1, 1), local_size=(4, 1, 1))
>>> out = np.zeros(4, np.int32); dev.allocator.copyout(memoryview(out), buf); out.tolist()
[0, 1, 2, 3]
"""
from __future__ import annotations
import hashlib, struct, time
from collections.abc import Sequence
from hcqrt.mock.ptx import AddressSpace, PTXModule
from hcqrt.nv.cubin import load_cubin
from hcqrt.mock.emu_alloc import VA_ALIGN, EmuAllocator, EmuBuffer
from hcqrt.interface import GraphItem

class EmuProgram:
  """One kernel of a cubin, run by the PTX interpreter. Calling it launches over `global_size` blocks of
  `local_size` threads with the buffers' addresses (then the `vals` integers) as parameters; `wait=True` returns the seconds taken."""
  def __init__(self, dev: PTXEmuDevice, name: str, cubin: bytes):
    from compiler.assemble.ptx_assembler import ptx_for_cubin, PTX_OF_CUBIN_MAX   # hcqrt/mock may read the compiler
    img = load_cubin(cubin)
    if name not in img.kernels: raise RuntimeError(f"kernel {name!r} not in its cubin (has: {', '.join(img.kernels) or 'none'})")
    self.name, self.dev, self.kernel = name, dev, img.kernels[name]
    ptx = ptx_for_cubin(cubin)
    if ptx is None:
      raise RuntimeError(f"kernel {name}: no PTX known for cubin sha256 {hashlib.sha256(cubin).hexdigest()[:16]}: only the last "
                         f"{PTX_OF_CUBIN_MAX} (PTX_OF_CUBIN_MAX) cubins assemble_ptx made in this process run on PTXEMU; "
                         "assemble its PTX again")
    if (mod := dev._modules.get(ptx)) is None: mod = dev._modules[ptx] = PTXModule(ptx)
    self.module = mod
    if name not in mod.kernels: raise RuntimeError(f"kernel {name!r} is in the cubin but not in its PTX")

  def __call__(self, *bufs: EmuBuffer, global_size=(1, 1, 1), local_size=(1, 1, 1), vals: tuple = (), wait: bool = True, **_) -> float | None:
    k = self.kernel
    if len(bufs) + len(vals) != len(k.params):
      raise TypeError(f"kernel {self.name} takes {len(k.params)} arguments, got {len(bufs)} buffers + {len(vals)} ints")
    params = bytearray(k.param_size)
    for ordinal, off, size in k.params:   # buffers (8-byte pointers) first, then the 4-byte integers (Variables)
      if ordinal < len(bufs):
        if size != 8: raise TypeError(f"kernel {self.name}: parameter {ordinal} has {size} bytes, not a pointer")
        struct.pack_into("<Q", params, off, bufs[ordinal].va)
      else:
        if size != 4: raise TypeError(f"kernel {self.name}: parameter {ordinal} has {size} bytes, not a 32-bit integer")
        struct.pack_into("<i", params, off, vals[ordinal - len(bufs)])
    st = time.perf_counter()
    self.module.launch(self.name, self.dev.mem, tuple(global_size), tuple(local_size), bytes(params), 0)
    return time.perf_counter() - st if wait else None

class PTXEmuDevice:
  """The PTX interpreter as a device (renderer "ptx", arch sm_90).

  >>> PTXEmuDevice("PTXEMU").arch
  'sm_90'
  """
  name = "PTXEMU"
  renderer = "ptx"
  arch = "sm_90"
  buffer_alignment = VA_ALIGN   # every buffer starts on this boundary (the PTX renderer proves vector loads with it)
  def __init__(self, name: str = "PTXEMU"):
    self.mem = AddressSpace()
    self.allocator = EmuAllocator(self.mem)
    self._modules: dict[str, PTXModule] = {}
  @property
  def target(self) -> dict:
    """What the compiler needs to know about this device (the fields of compiler/target.py Target)."""
    return {"device": self.name, "renderer": self.renderer, "arch": self.arch, "buffer_alignment": self.buffer_alignment,
            "shared_memory": 48 << 10, "warp_size": 32, "gpu": True}
  def program(self, name: str, cubin: bytes) -> EmuProgram:
    """Kernel `name` of a cubin made by assemble_ptx in this process."""
    return EmuProgram(self, name, cubin)
  def synchronize(self, timeout_s: float | None = None) -> None:
    """Nothing to wait for: interpreted launches are complete when their call returns."""
  def graph(self, items: Sequence[GraphItem], timestamps: bool = False) -> None:
    """No graphs (interface.Device.graph): a JIT replay runs the launches one at a time."""
  def __repr__(self) -> str: return f"<PTXEmuDevice {self.arch}>"
