"""What the compiler knows about the device it compiles for: one frozen `Target` value.

A device reports its facts as a plain dict (its `target` property: hcqrt never imports the compiler), the frontend turns
that into a Target (`Target.from_report`), and every compiler stage reads the Target and nothing else: the opts (vector
width, register budget, cores), the renderers (arch, buffer alignment) and the pipeline's registry of renderers and
assemblers (compiler/pipeline.py, keyed by `renderer`). A Target is hashable and picklable, so it keys caches and travels
to BEAM's worker processes.

>>> t = Target.from_report({"device": "CPU", "renderer": "c", "arch": "native", "ncores": 2, "simd_bytes": 32})
>>> t.lanes, t.vector_registers, t.gpu
(8, 16, False)
>>> AMD_TARGETS["gfx942"].block, AMD_TARGETS["gfx942"].replace(warp_size=32).block
(256, 128)
"""
from __future__ import annotations
from dataclasses import dataclass, fields, replace

@dataclass(frozen=True)
class Target:
  """A compile target. `gpu`: output loops are the launch grid (one thread per output), not loops; `simd_bytes`: the
  widest vector registers kernels may use (0: no vector opts); `vector_registers`: how many of them (the register budget
  of compiler/opt/pressure.py; 0 derives it from simd_bytes); `buffer_alignment`: every buffer starts on this boundary
  (the PTX renderer proves vector accesses with it). The GPU launch tuning (compiler/gpudims.py plan_launch): `block`:
  threads per block (0 derives it: four warps, at least 128), `max_grid`: blocks per grid dimension, and the grouped
  reductions (a block of `group_lanes` lanes per output, 0: `block`) for kernels of at most `group_max_outputs` outputs
  with a reduce loop of at least `group_min_reduce` iterations."""
  device: str                  # the device name the kernels run on ("CPU", "NV", "PTXEMU")
  renderer: str                # which renderer/assembler pair builds them (compiler/pipeline.py registry key)
  arch: str = ""               # CPU: the ISA the C compiler targets ("native", "x86-64-v3"...); NV: "sm_90"
  ncores: int = 1              # cores a CPU kernel may split its outer loop across
  simd_bytes: int = 0
  vector_registers: int = 0
  buffer_alignment: int = 16
  shared_memory: int = 0       # bytes of shared memory per block (GPUs)
  warp_size: int = 1
  gpu: bool = False
  cc_flags: tuple[str, ...] = ()   # CPU: the C compiler flags selecting the ISA (hcqrt/cpu/isa.py); () = this host
  block: int = 0
  # CUDA's gridDim limits (x: 2^31-1, y and z: 65535); AMD's dispatch takes 32-bit sizes in every dimension (PM4
  # DISPATCH_DIRECT, the AQL packet's grid_size_x/y/z in ioctl_defs/amd/aql.py), so the NVIDIA bounds are safe there too
  # (a kernel past them is planned with all its outputs along x)
  max_grid: tuple[int, int, int] = (2 ** 31 - 1, 65535, 65535)
  group_max_outputs: int = 4096   # few outputs can't fill the GPU with one thread each...
  group_min_reduce: int = 64      # ...and a loop this long is worth splitting across the lanes of a block
  group_lanes: int = 0
  l2_prefetch: bool = True     # CPU: a PREFETCHT1 fills only the L2 (streams are hinted there; hcqrt/cpu/isa.py)

  def __post_init__(self):
    if self.vector_registers == 0 and self.simd_bytes:   # x86-64: 32 registers with AVX-512 (zmm0-31), else 16
      object.__setattr__(self, "vector_registers", 32 if self.simd_bytes >= 64 else 16)
    # four warps per block: NVIDIA's 4 x 32 and AMD's 4 waves per workgroup (128 on wave32 RDNA3, 256 on wave64 CDNA3),
    # so a block has warps to switch between while one waits on memory; 128 where a target does not report its warp
    if self.block == 0: object.__setattr__(self, "block", max(128, 4 * self.warp_size))
    if self.group_lanes == 0: object.__setattr__(self, "group_lanes", self.block)

  # hashed once (the dataclass's hash of the fields): a Target keys the kernel cache, asked at every kernel launch. The
  # cached value is not pickled (str hashes differ between processes: BEAM's workers get Targets)
  def __hash__(self) -> int:
    if (h := self.__dict__.get("_hash")) is None: h = self.__dict__["_hash"] = hash(tuple(getattr(self, f.name) for f in fields(self)))
    return h
  def __getstate__(self) -> dict: return {f.name: getattr(self, f.name) for f in fields(self)}

  @property
  def lanes(self) -> int:
    """float32 lanes of the target's vectors (1: no vectors)."""
    return max(1, self.simd_bytes // 4)

  @staticmethod
  def from_report(report: dict) -> Target:
    """The Target of a device's `target` report (a dict of Target fields); unknown keys are an error, not ignored."""
    known = {f.name for f in fields(Target)}
    if (bad := set(report) - known): raise ValueError(f"Target: unknown field(s) {sorted(bad)} in device report {report!r}")
    return Target(**report)

  def replace(self, **kw) -> Target:
    """A copy with some fields changed (e.g. a test's AVX2 target on an AVX-512 host); a new vector width re-derives
    the register count, a new warp size the block and a new block the group lanes, unless those are given too."""
    if "simd_bytes" in kw and "vector_registers" not in kw: kw["vector_registers"] = 0
    if "warp_size" in kw and "block" not in kw: kw["block"] = 0
    if ("warp_size" in kw or "block" in kw) and "group_lanes" not in kw: kw["group_lanes"] = 0
    return replace(self, **kw)

# the target of code that must build anywhere (frontend/export.py): plain C99, no vectors, no threads, not compiled here
PORTABLE_C = Target("portable", "c99")

# AMD GPUs, compiled by LLVM in-process (compiler/assemble/llvm.py): RDNA3 is wave32, CDNA3 wave64; 64 KiB of LDS each
AMD_TARGETS = {arch: Target("AMD", "llvm", arch=arch, warp_size=wave, shared_memory=65536, buffer_alignment=256, gpu=True)
               for arch, wave in (("gfx1100", 32), ("gfx942", 64))}
