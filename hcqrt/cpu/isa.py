"""The instruction set CPU kernels are compiled for, chosen with `CPU_ISA` (default `native`).

An ISA fixes what the kernel compiler may assume: the widest vector (`simd_bytes`), how many vector registers
there are (`vector_regs`, the register budget of the opts) and the C compiler's target flags (`cc_flags`).
`native` is whatever this host has (-march=native); the x86-64 microarchitecture levels name a fixed target, so
the same kernels come out on any host, and an AVX-512 machine can build (and inspect) the code an AVX2 laptop
gets with `CPU_ISA=x86-64-v3`. Compiling for an ISA the host lacks works; running such a kernel does not
(`check_runnable` raises, naming CPU_ISA and the missing CPU features).

  >>> isa = cpu_isa("x86-64-v3"); isa.simd_bytes, isa.vector_regs, isa.cc_flags[0]
  (32, 16, '-march=x86-64-v3')
  >>> cpu_isa("x86-64-v4").simd_bytes, cpu_isa("x86-64-v4").vector_regs
  (64, 32)
"""
from __future__ import annotations
import functools, os, platform
from dataclasses import dataclass

# x86-64 psABI microarchitecture levels: (widest vector bytes, vector registers, /proc/cpuinfo flags the level needs)
LEVELS: dict[str, tuple[int, int, tuple[str, ...]]] = {
  "x86-64":    (16, 16, ("sse2",)),
  "x86-64-v2": (16, 16, ("sse2", "ssse3", "sse4_1", "sse4_2", "popcnt", "cx16", "lahf_lm")),
  "x86-64-v3": (32, 16, ("sse2", "ssse3", "sse4_1", "sse4_2", "popcnt", "cx16", "lahf_lm",
                         "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave")),
  "x86-64-v4": (64, 32, ("sse2", "ssse3", "sse4_1", "sse4_2", "popcnt", "cx16", "lahf_lm",
                         "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave",
                         "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")),
}
CHOICES = ("native", *LEVELS)
# gcc 12 emits masked `vmovsh` forms for _Float16 selects that binutils 2.40 can't assemble: half math goes
# through float conversions instead (harmless where the target has no AVX512-FP16)
_X86_EXTRA = ("-mno-avx512fp16",)
# kernels for 64-byte vectors declare them explicitly; under the tuning of Intel's AVX-512 cores (-mprefer-vector-width=256,
# also x86-64-v4's) clang splits each into two 32-byte halves, doubling the registers a tile needs (it spills)
_WIDE = ("-mprefer-vector-width=512",)

def cpuinfo_fields(text: str) -> dict[str, str]:
  """Each key's first value in /proc/cpuinfo text: the first CPU's `vendor_id`, `cpu family`, `model`, `flags`..."""
  fields: dict[str, str] = {}
  for line in text.splitlines():
    k, sep, v = line.partition(":")
    if sep: fields.setdefault(k.strip(), v.strip())
  return fields

@functools.lru_cache(None)
def _host_cpuinfo() -> dict[str, str]:
  """cpuinfo_fields of this host's /proc/cpuinfo, read once ({} if unreadable)."""
  try:
    with open("/proc/cpuinfo") as f: return cpuinfo_fields(f.read())
  except OSError: return {}

@functools.lru_cache(None)
def host_cpu_flags() -> frozenset[str]:
  """The CPU feature flags of this host (/proc/cpuinfo `flags`, or `Features` on ARM); empty if unreadable."""
  info = _host_cpuinfo()
  return frozenset(info.get("flags", info.get("Features", "")).split())

def _cpu_ident(fields: dict[str, str]) -> tuple[str, int, int]:
  """(vendor_id, cpu family, model) from cpuinfo_fields; ("", 0, 0) for what they don't say."""
  num = lambda k: int(fields[k]) if fields.get(k, "").isdigit() else 0
  return fields.get("vendor_id", ""), num("cpu family"), num("model")

def l2_prefetch_hint(vendor: str, family: int, model: int) -> bool:
  """Whether a PREFETCHT1 fills the L2 only on this CPU (then a stream may be hinted into L2 without holding the L1's
  few miss buffers: compiler/opt/heuristic.py stream_prefetch). Intel's PREFETCHT1 brings the line to L2 and beyond (Intel
  SDM vol. 2B, PREFETCHh). On AMD, PREFETCHT1/T2 filling the L2 is new with Zen 4 (as AMD documents it; Wang et al.,
  arXiv 2411.02814, measured it on Zen 4): before, they fill the L1 as PREFETCHT0 does, so there the hint is one more L1
  miss in flight. Measured on a Zen 3 EPYC (family 25 model 1, bench/stream_prefetch_ab.py, 5 runs of 40-60 launches),
  a 32 MiB chunk of the 64M sum took 2.15-2.98 ms at the minimum without a hint, 2.61-3.31 ms hinted into L2 and
  2.63-3.47 ms into L1 (alike, as they should be there). The Zen generation
  by family and model is Linux's (arch/x86/kernel/cpu/amd.c bsp_init_amd: family 0x19 models 0x00-0x0f and 0x20-0x5f
  are Zen 3, 0x10-0x1f and 0x60-0xaf Zen 4; 0x17 is Zen 1/2, 0x1a Zen 5). Other CPUs: True (the hint as measured on Intel).

  >>> l2_prefetch_hint("GenuineIntel", 6, 143), l2_prefetch_hint("AuthenticAMD", 25, 1), l2_prefetch_hint("AuthenticAMD", 25, 0x11)
  (True, False, True)
  >>> l2_prefetch_hint("AuthenticAMD", 23, 49), l2_prefetch_hint("AuthenticAMD", 26, 2)
  (False, True)
  """
  if vendor not in ("AuthenticAMD", "HygonGenuine"): return True   # (Hygon's family 0x18 is a Zen 1)
  if family < 0x19: return False
  return not (family == 0x19 and (model <= 0x0f or 0x20 <= model <= 0x5f))

@functools.lru_cache(None)
def host_l2_prefetch_hint() -> bool:
  """l2_prefetch_hint of this host's CPU (True when /proc/cpuinfo can't be read: no vendor)."""
  return l2_prefetch_hint(*_cpu_ident(_host_cpuinfo()))

@dataclass(frozen=True)
class CPUISA:
  """One CPU target: its name, vector width in bytes, vector register count, and the C compiler flags selecting it."""
  name: str
  simd_bytes: int
  vector_regs: int
  cc_flags: tuple[str, ...]
  features: tuple[str, ...] = ()   # CPU flags the generated code may use (all must be present to run it)

  @property
  def missing(self) -> tuple[str, ...]:
    """The features this ISA needs that the host lacks (empty: kernels for it run here)."""
    have = host_cpu_flags()
    return tuple(f for f in self.features if f not in have)

  @property
  def runnable(self) -> bool: return not self.missing

  def check_runnable(self, what: str) -> None:
    """Raise RuntimeError when code compiled for this ISA can't execute on the host; `what` names the code."""
    if self.missing:
      raise RuntimeError(f"{what} was compiled for CPU_ISA={self.name}, which needs CPU features this host lacks: "
                         f"{', '.join(self.missing)}. It can be compiled and inspected here but not run; "
                         f"unset CPU_ISA (native) or choose one of {', '.join(c for c in CHOICES if c == 'native' or not cpu_isa(c).missing)}")

def _native() -> CPUISA:
  flags = host_cpu_flags()
  if platform.machine() in ("x86_64", "AMD64", "i686", "i386"):
    simd = 64 if "avx512f" in flags else 32 if "avx2" in flags or "avx" in flags else 16
    return CPUISA("native", simd, 32 if "avx512f" in flags else 16, ("-march=native", *_X86_EXTRA, *(_WIDE if simd == 64 else ())))
  # AArch64 (NEON: 32 registers of 16 bytes) and anything else: 16-byte vectors
  return CPUISA("native", 16, 32 if platform.machine() in ("aarch64", "arm64") else 16, ("-march=native",))

def cpu_isa(name: str | None = None) -> CPUISA:
  """The ISA called `name` (None: $CPU_ISA, default native). Raises ValueError for an unknown name.

  >>> cpu_isa("native").cc_flags[0]
  '-march=native'
  """
  return _isa(name if name is not None else os.environ.get("CPU_ISA", "").strip() or "native")

@functools.lru_cache(None)
def _isa(name: str) -> CPUISA:
  if name == "native": return _native()
  if name not in LEVELS: raise ValueError(f"CPU_ISA={name!r} is not a CPU target we know; choose one of {', '.join(CHOICES)}")
  simd, regs, feats = LEVELS[name]
  return CPUISA(name, simd, regs, (f"-march={name}", *_X86_EXTRA, *(_WIDE if simd == 64 else ())), feats)
