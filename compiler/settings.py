"""The environment settings the compiler reads, each spelled in one place. They are read at every call, not at import:
`Context(NOOPT=1)` and a test's patched environment take effect at once (the kernel cache keys on `opts_key()`).

>>> import os; os.environ.get("NOOPT", "0") == "1" == noopt() or not noopt()
True
>>> flag("HCQRT_SURELY_UNSET"), env_float("HCQRT_SURELY_UNSET", 2.5)
(False, 2.5)
"""
from __future__ import annotations
import os, sys

_FS_ENCODING = sys.getfilesystemencoding()
def getenv(name: str, default: str = "") -> str:
  """os.environ.get(name, default) without the KeyError it raises and catches for an unset name: ~2 us each, and a
  realize reads several settings, nearly always unset. It reads os.environ's own table of encoded names and values on
  POSIX, which every write through os.environ (a test's monkeypatch.setenv, Context) keeps current.

  >>> getenv("HCQRT_SURELY_UNSET", "x"), getenv("PATH") == os.environ["PATH"]
  ('x', True)
  """
  if (data := getattr(os.environ, "_data", None)) is None or os.name != "posix": return os.environ.get(name, default)
  return default if (v := data.get(name.encode(_FS_ENCODING, "surrogateescape"))) is None else v.decode(_FS_ENCODING, "surrogateescape")

def flag(name: str, default: str = "0") -> bool:
  """An on/off setting: on unless unset (and `default` off), empty or "0"."""
  return os.environ.get(name, default) not in ("", "0")

def debug_level() -> int:
  """DEBUG: how much to print (0 nothing; 2 each kernel run; 3 schedules; 4 source); a bad value reads as 0."""
  try: return int(getenv("DEBUG", "0"))
  except ValueError: return 0

def noopt() -> bool:
  """NOOPT=1: kernels keep their plain loops (no heuristic opts, no packing, no peeling)."""
  return getenv("NOOPT", "0") == "1"

def tensor_cores() -> bool:
  """TC=0 turns tensor-core (WMMA) kernels off."""
  return os.environ.get("TC", "1") != "0"

def disk_cache() -> bool:
  """CACHE=0: the assemblers build every binary again instead of reading their on-disk cache."""
  return os.environ.get("CACHE", "1") != "0"

def opts_key() -> tuple[str, str, str, str]:
  """The settings that change a kernel's code (NOOPT, BEAM, TC, CPU_CHUNKS) as written: part of a built kernel's cache key."""
  return (getenv("NOOPT", "0"), getenv("BEAM", "0"), getenv("TC", "1"), getenv("CPU_CHUNKS"))

def chunks_per_core(default: int) -> int:
  """CPU_CHUNKS: the chunks a core a big split CPU kernel is cut into (compiler/opt/heuristic.py thread_chunks); 1 = one
  chunk a core, as small kernels; unset or bad: `default`.

  >>> os.environ.get("CPU_CHUNKS") is not None or chunks_per_core(4) == 4
  True
  """
  try: return max(1, int(os.environ.get("CPU_CHUNKS", "") or default))
  except ValueError: return default

def compile_workers() -> int:
  """COMPILE_WORKERS: how many kernels' assemblers may run at once when a schedule needs several new kernels (the C
  compiler runs as its own process, so they overlap on the cores); default the cores this process may use, 1 = one
  after another.

  >>> compile_workers() >= 1
  True
  """
  try: n = int(os.environ.get("COMPILE_WORKERS", "") or 0)
  except ValueError: n = 0
  return n if n >= 1 else len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

def kernel_cache_max() -> int:
  """KERNEL_CACHE_MAX: how many built kernels the engine keeps (frontend/engine.py; the least recently used go first,
  their programs freed once nothing runs them). Default 4096: a model's kernels (tens to a few hundred) never go,
  while a server seeing ever new shapes stays bounded (bench/long_run_memory.py measures what a kernel costs).
  Unset, bad or below 1: the default.

  >>> os.environ.get("KERNEL_CACHE_MAX") is not None or kernel_cache_max() == 4096
  True
  """
  try: n = int(getenv("KERNEL_CACHE_MAX") or 0)
  except ValueError: n = 0
  return n if n >= 1 else 4096

def disk_cache_max_bytes() -> int:
  """HCQRT_CACHE_MAX_MB: how big the on-disk cache ($HCQRT_CACHE) may grow, in MiB of disk (each file counted in whole
  4 KiB blocks); past it the least recently used files go, BEAM results last (compiler/assemble/disk_cache.py). Default
  1024: months of kernels of a few models. A fraction is allowed (tests); unset, bad or not above 0: the default.

  >>> os.environ.get("HCQRT_CACHE_MAX_MB") is not None or disk_cache_max_bytes() == 1 << 30
  True
  """
  try: mb = float(getenv("HCQRT_CACHE_MAX_MB") or 0)
  except ValueError: mb = 0
  return int((mb if 0 < mb < 1 << 40 else 1024) * (1 << 20))   # the upper bound also turns away inf and nan

def env_float(name: str, default: float) -> float:
  """A number setting (`default` when unset, empty or not a number)."""
  try: return float(os.environ.get(name, "") or default)
  except ValueError: return default
