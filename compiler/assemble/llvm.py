"""LLVM IR -> ELF relocatable object bytes, in-process through llvmlite (no clang, no ROCm), with a disk cache.

Host (`arch` "native": the process triple and the host CPU's name and features; or a CPU_ISA level such as
"x86-64-v3"), position-independent code: the CPU
backend loads the `.o` with its own loader (hcqrt/cpu/elf_loader.py). AMD (`arch` "gfx1100", "gfx942"...):
`amdgcn-amd-amdhsa`; the object holds `<kernel>` (.text), `<kernel>.kd` (the 64-byte descriptor) and the
NT_AMDGPU_METADATA note, and for our kernels exactly one relocation, R_AMDGPU_REL64 at kd+16 (constants stay inline).
Every module runs the O3 pipeline first: on AMD that infers the `amdgpu-no-*` attributes (else each kernel gets 256
bytes of hidden kernargs) and keeps values out of scratch. gfx11 is built with `-real-true16` (LLVM 22 otherwise
uses 16-bit register halves). `emit_assembly` needs a freshly parsed module (reusing one after emit_object crashes).

Cache: `<key>.o` in `$HCQRT_CACHE/llvm`, key = sha256(IR, triple, cpu, features, LLVM version); `CACHE=0` skips reads.
llvmlite is an optional dependency (`pip install hcqrt[llvm]`); without it every call raises LLVMUnavailable.

  >>> obj = compile_llvm('define void @f(ptr %p) { store i32 1, ptr %p\\n ret void }', "f")
  >>> obj[:4]
  b'\\x7fELF'
"""
from __future__ import annotations
import functools, hashlib
from compiler.assemble.disk_cache import cache_root, read_cached, write_cached
from compiler.settings import disk_cache

class LLVMUnavailable(ImportError):
  """llvmlite is not installed: LLVM targets (AMD, CPU_LLVM) need the `llvm` extra."""

class LLVMCompileError(RuntimeError):
  """LLVM rejected a kernel's IR; the message carries LLVM's diagnostic and the saved IR path."""

AMDGPU_TRIPLE = "amdgcn-amd-amdhsa"

@functools.lru_cache(None)
def _llvm():
  try: import llvmlite.binding as llvm
  except ImportError as e:
    raise LLVMUnavailable("LLVM code generation needs llvmlite>=0.50: pip install 'hcqrt[llvm]' (or the 'amd' extra)") from e
  llvm.initialize_all_targets(); llvm.initialize_all_asmprinters()
  return llvm

@functools.lru_cache(None)
def machine_of(arch: str) -> tuple[str, str, str]:
  """(triple, cpu, features) for `arch`: "native" is this host, anything else an AMD gfx name."""
  llvm = _llvm()
  if arch in ("native", ""): return llvm.get_process_triple(), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
  if arch.startswith("x86-64"): return llvm.get_process_triple(), arch, ""   # a CPU_ISA level: LLVM knows x86-64-v2/v3/v4
  if not arch.startswith("gfx"): raise ValueError(f"compile_llvm: unknown arch {arch!r} (expected 'native', an x86-64 level or an AMD gfx target)")
  return AMDGPU_TRIPLE, arch, "-real-true16" if arch.startswith("gfx11") else ""

@functools.lru_cache(None)
def _target_machine(triple: str, cpu: str, features: str):
  """One target machine per (triple, cpu, features): built once, reused by every kernel."""
  llvm = _llvm()
  return llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=3, reloc="pic", codemodel="default")

@functools.lru_cache(None)
def _layout(tm) -> str:
  """The data layout string of a (cached, so long-lived) target machine: formatting it per kernel is wasted work."""
  return str(tm.target_data)

def _module(ir: str, triple: str, tm, name: str):
  """Parse and verify `ir`, then run the O3 module pipeline on it. The full pipeline stays: measured on the bench
  kernels, turning off LLVM's unrolling (40% less compile time) leaves conv's 3x3 windows as loops (8 FMAs in the body
  instead of 144), and turning off its vectorizers leaves the weight-gradient reductions scalar."""
  llvm = _llvm()
  try:
    mod = llvm.parse_assembly(ir)
    mod.triple, mod.data_layout = triple, _layout(tm)
    mod.verify()
  except RuntimeError as e: raise LLVMCompileError(f"LLVM rejected kernel {name!r}: {e}") from None
  pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
  pb.getModulePassManager().run(mod, pb)
  return mod

def cache_key(ir: str, triple: str, cpu: str, features: str) -> str:
  """sha256 hex of everything that decides the object's bytes."""
  return hashlib.sha256("\0".join([ir, triple, cpu, features, ".".join(map(str, _llvm().llvm_version_info))]).encode()).hexdigest()

def compile_llvm(ir: str, name: str = "kernel", arch: str = "native") -> bytes:
  """LLVM IR text -> ELF relocatable object bytes for `arch` ("native": this host; "gfx1100", "gfx942": AMD GPUs)."""
  triple, cpu, features = machine_of(arch)
  key = cache_key(ir, triple, cpu, features)
  path = cache_root() / "llvm" / f"{key}.o"
  if disk_cache() and (obj := read_cached(path)) is not None: return obj
  tm = _target_machine(triple, cpu, features)
  obj = tm.emit_object(_module(ir, triple, tm, name))
  write_cached(path, obj)
  return obj

def llvm_assembly(ir: str, arch: str = "native", name: str = "kernel") -> str:
  """The target assembly of `ir` (a fresh module: one already emitted as an object must not be reused)."""
  triple, cpu, features = machine_of(arch)
  tm = _target_machine(triple, cpu, features)
  return tm.emit_assembly(_module(ir, triple, tm, name))
