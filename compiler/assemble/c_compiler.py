"""C source -> ELF relocatable object bytes, with a disk cache.

The CPU backend never links: it loads the `.o` with its own ELF loader (hcqrt/cpu/elf_loader.py), so the
object is compiled position independent (-fPIC). Why -fPIC and not -fno-pic:
  * -fno-pic code may take absolute 32-bit addresses (R_X86_64_32/32S, `mov $table, %eax`), which only
    work when the image sits in the low 2 GiB; an anonymous mmap lands anywhere in the 47-bit space.
  * -fPIC code reaches its own sections with 32-bit PC-relative relocations (always in range inside one
    mapping) and external symbols through the PLT (R_X86_64_PLT32) or the GOT (R_X86_64_*GOTPCREL*), which
    the loader serves from a small stub/GOT table inside the image. So a handful of relocation types cover
    everything gcc and clang emit, and no address limit applies.
-ffreestanding keeps the object free of hidden libc assumptions; note it implies -fno-builtin, so a kernel
that wants `sqrtss` instead of a call to libm's sqrtf should write __builtin_sqrtf (with -fno-math-errno
gcc and clang then inline it).

Target: the caller passes the target's flags (`target_flags`, the CPU device's `cc_flags`, e.g.
`-march=x86-64-v3` for CPU_ISA=x86-64-v3: hcqrt/cpu/isa.py); without them the object is for this host
(-march=native). Compiler: `HCQRT_CC` forces one (a name on PATH or a path); else clang, the one we promise
(version 15 or newer: `clang`, or a versioned `clang-19` as Debian installs them), and gcc when there is none.
Both are tested (CI runs the whole suite with gcc in a fresh venv, else the CPU op tests with HCQRT_CC=gcc).

Cache: one file per object, `<key>.o`, in `$HCQRT_CACHE/c` (default `${XDG_CACHE_HOME:-~/.cache}/hcqrt/c`),
key = sha256(source, compiler path, compiler --version, flags, and with -march=native the host CPU features).
The CPU features are in the key because -march=native compiles for the machine at hand and a home directory may
be shared; a named target (-march=x86-64-v3) gives the same object on any host. The compiler's --version text is
itself cached (keyed by the compiler binary's path, size and mtime), so a process that finds the object in the
cache runs no compiler at all. `CACHE=0` disables reading the cache (objects are still written). The source is compiled
in a private temp directory inside the cache (a trim in another process never takes a `.tmp` in flight) and kept, as
`<name>-<key>.c`, only when the compile fails: the error names it.

  >>> obj = compile_c("void E_1(float *out, int core) { out[core] = 1.0f; }", "E_1")
  >>> obj[:4]
  b'\\x7fELF'
"""
from __future__ import annotations
import functools, hashlib, os, pathlib, platform, re, shutil, subprocess, tempfile
from collections.abc import Sequence
from compiler.assemble.disk_cache import cache_root, note_written, read_cached, write_cached
from compiler.settings import disk_cache

class CompileError(RuntimeError):
  """The C compiler rejected a kernel; the message carries its stderr and the saved source path."""

FLAGS = ["-c", "-O2", "-ffreestanding", "-fno-math-errno", "-ffp-contract=fast", "-fPIC", "-fno-stack-protector", "-fno-asynchronous-unwind-tables"]
# the host's own ISA, for callers that name no target (the CPU runner, tools). -mno-avx512fp16: gcc 12 emits masked
# `vmovsh` forms for _Float16 selects that binutils 2.40 can't assemble; half math goes through float conversions
NATIVE = ("-march=native", "-mno-avx512fp16") if platform.machine() in ("x86_64", "AMD64") else ("-march=native",)

# clang 15 is the first with _Float16 on every x86-64 target (our half kernels); an older `clang` is passed over for a
# versioned one (clang-19, as Debian installs them) or gcc
CLANG_MIN = 15
CLANGS = ["clang"] + [f"clang-{v}" for v in range(30, CLANG_MIN - 1, -1)]

def c_compiler(target_flags: Sequence[str] | None = None) -> tuple[str, list[str]]:
  """(compiler path, flags for `target_flags` (default: this host, -march=native)): $HCQRT_CC if set, else clang
  (>= 15) if installed, else gcc.

  >>> path, flags = c_compiler(["-march=x86-64-v3"])
  >>> "-fPIC" in flags, "-march=x86-64-v3" in flags, "-march=native" in flags
  (True, True, False)
  """
  forced = os.environ.get("HCQRT_CC")
  names = [forced] if forced else CLANGS + ["gcc"]
  flags = FLAGS[:2] + list(NATIVE if target_flags is None else target_flags) + FLAGS[2:]
  for n in names:
    if (p := _which(n, os.environ.get("PATH", ""))) is None: continue
    if forced or not n.startswith("clang") or _clang_major(p) >= CLANG_MIN: return p, flags
  raise CompileError(f"no C compiler found (looked for {forced or f'clang >= {CLANG_MIN} and gcc'} on PATH); install clang or gcc")

@functools.lru_cache(None)
def _clang_major(path: str) -> int:
  m = re.search(r"clang version (\d+)", compiler_version(path))
  return int(m.group(1)) if m else 0

@functools.lru_cache(None)
def _which(name: str, path_env: str) -> str | None: return shutil.which(name, path=path_env)

def cache_dir() -> pathlib.Path:
  """Where compiled objects live (created on demand)."""
  return cache_root() / "c"

@functools.lru_cache(None)
def _version_of(path: str, size: int, mtime_ns: int, d: pathlib.Path) -> str:
  # a reinstall/upgrade changes size or mtime of the binary, which invalidates this entry
  vfile = d / f"version-{hashlib.sha256(f'{path}|{size}|{mtime_ns}'.encode()).hexdigest()[:32]}.txt"
  if (text := read_cached(vfile)) is not None: return text.decode()
  out = subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout
  write_cached(vfile, out.encode())
  return out

def compiler_version(path: str) -> str:
  """`path --version` output, cached on disk per compiler binary (so a cache hit spawns no process)."""
  real = os.path.realpath(path)
  st = os.stat(real)
  # the cache dir is part of the memo key so that every cache dir gets its version file written
  return _version_of(real, st.st_size, st.st_mtime_ns, cache_dir())

@functools.lru_cache(None)
def host_cpu_features() -> str:
  """The part of /proc/cpuinfo that -march=native depends on (machine, model, feature flags)."""
  keep = ("flags", "model name", "features", "cpu implementer", "cpu part", "vendor_id", "cpu family", "model")
  lines: set[str] = set()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.split(":")[0].strip().lower() in keep: lines.add(" ".join(line.split()))
  except OSError: pass
  return platform.machine() + "\n" + "\n".join(sorted(lines))

def cache_key(src: str, cc: str, version: str, flags: list[str]) -> str:
  """sha256 hex of everything that decides the object's bytes (the host's CPU only when compiling for it)."""
  host = host_cpu_features() if any(f.endswith("=native") for f in flags) else ""
  return hashlib.sha256("\0".join([src, cc, version, " ".join(flags), host]).encode()).hexdigest()

def compile_c(src: str, name: str = "kernel", target_flags: Sequence[str] | None = None) -> bytes:
  """C source -> bytes of an ELF relocatable object (x86-64 or AArch64) for the target `target_flags` selects
  (a CPU device's `cc_flags`; default this host); cached on disk.

  `name` only labels the source file (kept as `<cache>/<name>-<key>.c` when the compile fails) and error messages.

  >>> compile_c("int f(int x) { return x + 1; }", "f", ["-march=x86-64-v3"])[:4]
  b'\\x7fELF'
  """
  cc, flags = c_compiler(target_flags)
  key = cache_key(src, cc, compiler_version(cc), flags)
  d = cache_dir()
  obj_path = d / f"{key}.o"
  if disk_cache() and (obj := read_cached(obj_path)) is not None: return obj
  d.mkdir(parents=True, exist_ok=True)
  safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:64] or "kernel"
  # the source keeps the same name in every compile (its name is in the object's FILE symbol: the bytes stay the same)
  work, src_name = tempfile.mkdtemp(dir=d, prefix=f"{key[:16]}.", suffix=".tmp"), f"{safe}-{key[:16]}.c"
  try:
    pathlib.Path(work, src_name).write_bytes(src.encode())
    res = subprocess.run([cc, *flags, "-x", "c", src_name, "-o", "out.o"], capture_output=True, text=True, cwd=work)
    if res.returncode != 0:
      write_cached(src_path := d / src_name, src.encode())
      raise CompileError(f"{os.path.basename(cc)} failed (exit {res.returncode}) compiling kernel {name!r}, "
                         f"source saved at {src_path}\ncommand: {' '.join([cc, *flags])}\n{res.stderr.strip()}")
    obj = pathlib.Path(work, "out.o").read_bytes()
    os.replace(os.path.join(work, "out.o"), obj_path)
    note_written(len(obj))
    return obj
  finally: shutil.rmtree(work, ignore_errors=True)
