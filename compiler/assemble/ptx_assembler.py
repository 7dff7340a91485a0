"""PTX -> cubin: NVIDIA's own assembler, in-process through nvJitLink, else the `ptxas` binary.

nvJitLink (PyPI `nvidia-nvjitlink`) is a shared library we call through cffi's ABI mode, so assembling a
kernel costs no process spawn. When the library is missing, `ptxas` from a CUDA toolkit does the same job
through a subprocess. PTX_ASSEMBLER=ptxas|nvjitlink forces one of them. Results are cached on disk under
$HCQRT_CACHE/cubin (default ${XDG_CACHE_HOME:-~/.cache}/hcqrt/cubin), keyed by the PTX, the arch and the assembler's identity;
CACHE=0 skips cache reads (results are still written).

  >>> cubin = assemble_ptx(".version 8.0\\n.target sm_90\\n.address_size 64\\n.visible .entry k() { ret; }")
  >>> cubin[:4]
  b'\\x7fELF'
"""
from __future__ import annotations
import functools, glob, hashlib, importlib.util, os, re, shutil, subprocess, tempfile, threading
from collections import OrderedDict
from pathlib import Path
from compiler.assemble.disk_cache import cache_root, read_cached, write_cached
from compiler.settings import disk_cache

class PTXAssembleError(RuntimeError):
  """Assembling PTX failed; the message carries the assembler's log and the path where the PTX was saved."""

# nvJitLink C API (nvJitLink.h, CUDA 12/13). The library exports the plain names as well as the versioned
# __nvJitLinkX_13_N ones the header's inline wrappers call; the plain names are stable across 12.x and 13.x.
_CDEF = """
typedef struct nvJitLink *nvJitLinkHandle;
int nvJitLinkCreate(nvJitLinkHandle *handle, uint32_t numOptions, const char **options);
int nvJitLinkDestroy(nvJitLinkHandle *handle);
int nvJitLinkAddData(nvJitLinkHandle handle, int inputType, const void *data, size_t size, const char *name);
int nvJitLinkComplete(nvJitLinkHandle handle);
int nvJitLinkGetLinkedCubinSize(nvJitLinkHandle handle, size_t *size);
int nvJitLinkGetLinkedCubin(nvJitLinkHandle handle, void *cubin);
int nvJitLinkGetErrorLogSize(nvJitLinkHandle handle, size_t *size);
int nvJitLinkGetErrorLog(nvJitLinkHandle handle, char *log);
int nvJitLinkGetInfoLogSize(nvJitLinkHandle handle, size_t *size);
int nvJitLinkGetInfoLog(nvJitLinkHandle handle, char *log);
int nvJitLinkVersion(unsigned int *major, unsigned int *minor);
"""
NVJITLINK_INPUT_PTX = 2
# nvJitLinkResult, in enum order (0 = NVJITLINK_SUCCESS)
NVJITLINK_RESULTS = ["SUCCESS", "ERROR_UNRECOGNIZED_OPTION", "ERROR_MISSING_ARCH", "ERROR_INVALID_INPUT",
  "ERROR_PTX_COMPILE", "ERROR_NVVM_COMPILE", "ERROR_INTERNAL", "ERROR_THREADPOOL", "ERROR_UNRECOGNIZED_INPUT",
  "ERROR_FINALIZE", "ERROR_NULL_INPUT", "ERROR_INCOMPATIBLE_OPTIONS", "ERROR_INCORRECT_INPUT_TYPE",
  "ERROR_ARCH_MISMATCH", "ERROR_OUTDATED_LIBRARY", "ERROR_MISSING_FATBIN", "ERROR_UNRECOGNIZED_ARCH",
  "ERROR_UNSUPPORTED_ARCH", "ERROR_LTO_NOT_ENABLED"]

def _result_name(code: int) -> str:
  return "NVJITLINK_" + (NVJITLINK_RESULTS[code] if 0 <= code < len(NVJITLINK_RESULTS) else f"UNKNOWN_{code}")

def find_nvjitlink() -> str | None:
  """Path (or soname) of libnvJitLink: the `nvidia` pip namespace package first, then the system loader path."""
  spec = importlib.util.find_spec("nvidia")   # a namespace package: finding it imports nothing heavy
  for root in (spec.submodule_search_locations or []) if spec else []:
    # v13 wheels put it in nvidia/cu13/lib, v12 wheels in nvidia/nvjitlink/lib
    hits = sorted(glob.glob(os.path.join(root, "*", "lib", "libnvJitLink.so*")), reverse=True)
    if hits: return hits[0]
  return None

class NVJitLink:
  """nvJitLink loaded with cffi (ABI mode). `identity` names the library and version for cache keys."""
  def __init__(self, path: str):
    import cffi
    self.ffi = cffi.FFI()
    self.ffi.cdef(_CDEF)
    self.lib = self.ffi.dlopen(path)
    major, minor = self.ffi.new("unsigned int *"), self.ffi.new("unsigned int *")
    self.lib.nvJitLinkVersion(major, minor)
    self.path, self.identity = path, f"nvjitlink {major[0]}.{minor[0]}"

  def _log(self, h, size_fn, log_fn) -> str:
    n = self.ffi.new("size_t *")
    if size_fn(h, n) != 0 or n[0] == 0: return ""
    buf = self.ffi.new("char[]", n[0] + 1)
    log_fn(h, buf)
    return self.ffi.string(buf).decode(errors="replace")

  def assemble(self, ptx: str, arch: str) -> tuple[bytes | None, str]:
    """Returns (cubin or None on failure, log)."""
    ffi, lib = self.ffi, self.lib
    handle = ffi.new("nvJitLinkHandle *")
    opts = [ffi.new("char[]", f"-arch={arch}".encode())]
    if (r := lib.nvJitLinkCreate(handle, len(opts), ffi.new("char *[]", opts))) != 0:
      return None, f"nvJitLinkCreate(-arch={arch}) failed: {_result_name(r)}"
    h = handle[0]
    try:
      src = ptx.encode()
      # PTX is compiled inside AddData; a failure there must stop us, since Complete then "succeeds" with
      # an empty image
      r, step = lib.nvJitLinkAddData(h, NVJITLINK_INPUT_PTX, src, len(src), b"kernel.ptx"), "nvJitLinkAddData"
      if r == 0: r, step = lib.nvJitLinkComplete(h), "nvJitLinkComplete"
      log = "\n".join(x.strip() for x in (self._log(h, lib.nvJitLinkGetErrorLogSize, lib.nvJitLinkGetErrorLog),
                                  self._log(h, lib.nvJitLinkGetInfoLogSize, lib.nvJitLinkGetInfoLog)) if x)
      if r != 0: return None, f"{step} failed: {_result_name(r)}\n{log}"
      n = ffi.new("size_t *")
      if (r := lib.nvJitLinkGetLinkedCubinSize(h, n)) != 0: return None, f"nvJitLinkGetLinkedCubinSize: {_result_name(r)}"
      out = ffi.new("char[]", n[0])
      if (r := lib.nvJitLinkGetLinkedCubin(h, out)) != 0: return None, f"nvJitLinkGetLinkedCubin: {_result_name(r)}"
      return bytes(ffi.buffer(out, n[0])), log
    finally:
      lib.nvJitLinkDestroy(handle)

class Ptxas:
  """The `ptxas` binary of a CUDA toolkit, run as a subprocess."""
  def __init__(self, exe: str):
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
    # the last line names the exact build, e.g. "Build cuda_13.0.r13.0/compiler.36424714_0"
    self.path, self.identity = exe, "ptxas " + (out.strip().splitlines() or ["?"])[-1]

  def assemble(self, ptx: str, arch: str) -> tuple[bytes | None, str]:
    with tempfile.TemporaryDirectory(prefix="hcqrt-ptxas-") as d:
      src, dst = os.path.join(d, "kernel.ptx"), os.path.join(d, "kernel.cubin")
      Path(src).write_text(ptx)
      p = subprocess.run([self.path, f"-arch={arch}", "-o", dst, src], capture_output=True, text=True)
      log = (p.stdout + p.stderr).strip()
      if p.returncode != 0: return None, f"ptxas exited with {p.returncode}\n{log}"
      return Path(dst).read_bytes(), log

@functools.lru_cache(None)
def get_assembler(choice: str = "") -> NVJitLink | Ptxas:
  """The assembler to use: `choice` "nvjitlink" or "ptxas" forces one; "" prefers nvJitLink, then ptxas."""
  if choice not in ("", "nvjitlink", "ptxas"): raise ValueError(f"PTX_ASSEMBLER={choice!r}: expected nvjitlink or ptxas")
  if choice in ("", "nvjitlink"):
    if (lib := find_nvjitlink()) is not None: return NVJitLink(lib)
    for soname in ("libnvJitLink.so.13", "libnvJitLink.so.12"):
      try: return NVJitLink(soname)
      except OSError: pass
    if choice: raise PTXAssembleError("PTX_ASSEMBLER=nvjitlink but libnvJitLink was not found (pip install nvidia-nvjitlink)")
  if (exe := shutil.which("ptxas")) is not None: return Ptxas(exe)
  raise PTXAssembleError("no PTX assembler: libnvJitLink not found (pip install nvidia-nvjitlink) and no `ptxas` on PATH")

def cache_dir() -> Path:
  """$HCQRT_CACHE/cubin, else ${XDG_CACHE_HOME:-~/.cache}/hcqrt/cubin (the same root as the C compiler's cache)."""
  return cache_root() / "cubin"

def _save_failed_ptx(ptx: str, key: str) -> str:
  d = Path(tempfile.gettempdir()) / f"hcqrt-ptx-{os.getuid()}"
  d.mkdir(parents=True, exist_ok=True)
  m = re.search(r"^\s*\.(?:visible\s+)?\.entry\s+(\w+)", ptx, re.M)
  path = d / f"{m.group(1) if m else 'kernel'}-{key[:12]}.ptx"
  path.write_text(ptx)
  return str(path)

def _quote_lines(ptx: str, log: str, limit: int = 5) -> str:
  # show the PTX lines the log points at, so the error reads without opening the file
  lines, out = ptx.splitlines(), []
  for n in sorted({int(x) for x in re.findall(r"line (\d+)", log)})[:limit]:
    if 1 <= n <= len(lines): out.append(f"  {n:5d} | {lines[n-1]}")
  return ("\nat:\n" + "\n".join(out)) if out else ""

# sha256(cubin) -> PTX of the PTX_OF_CUBIN_MAX cubins assemble_ptx returned last in this process (least recently
# assembled or looked up goes first): the NV mock and PTXEMU run a cubin as its PTX, and a process that meets ever new
# kernels must not keep the text of all of them. As many as the engine keeps kernels (settings.kernel_cache_max's
# default): a kernel still built is still known. A lock: the engine assembles in several threads (compile_workers).
PTX_OF_CUBIN_MAX = 4096
_ptx_of_cubin: OrderedDict[str, str] = OrderedDict()
_ptx_lock = threading.Lock()

def _remember(sha: str, ptx: str) -> None:
  with _ptx_lock:
    _ptx_of_cubin[sha] = ptx
    _ptx_of_cubin.move_to_end(sha)
    while len(_ptx_of_cubin) > PTX_OF_CUBIN_MAX: _ptx_of_cubin.popitem(last=False)

def ptx_for_cubin(cubin: bytes) -> str | None:
  """The PTX a cubin was assembled from, if assemble_ptx returned it in this process and it is among the last
  PTX_OF_CUBIN_MAX (None otherwise: assemble its PTX again to make it known)."""
  sha = hashlib.sha256(cubin).hexdigest()
  with _ptx_lock:
    if (ptx := _ptx_of_cubin.get(sha)) is not None: _ptx_of_cubin.move_to_end(sha)
  return ptx

def assembled() -> list[tuple[str, str]]:
  """(sha256 of the cubin, PTX) of every cubin ptx_for_cubin knows now, oldest first."""
  with _ptx_lock: return list(_ptx_of_cubin.items())

def assemble_ptx(ptx: str, arch: str = "sm_90") -> bytes:
  """Assemble PTX text to a cubin (ELF bytes) for `arch` (e.g. "sm_80", "sm_89", "sm_90", "sm_90a").

  Raises PTXAssembleError with the assembler's log and the path of the saved PTX when assembly fails.

    >>> len(assemble_ptx(".version 8.0\\n.target sm_89\\n.address_size 64\\n.visible .entry k() { ret; }", "sm_89")) > 0
    True
  """
  if not re.fullmatch(r"sm_\d+[af]?", arch): raise ValueError(f"arch {arch!r}: expected sm_<NN>, e.g. sm_90")
  asm = get_assembler(os.environ.get("PTX_ASSEMBLER", "").lower())
  key = hashlib.sha256("\0".join((asm.identity, arch, ptx)).encode()).hexdigest()
  path = cache_dir() / f"{key}.cubin"
  if (cubin := read_cached(path) if disk_cache() else None) is None:
    cubin, log = asm.assemble(ptx, arch)
    if cubin is None:
      raise PTXAssembleError(f"{asm.identity} failed to assemble PTX for {arch}:\n{log}{_quote_lines(ptx, log)}\n"
                             f"PTX saved to {_save_failed_ptx(ptx, key)}")
    try: write_cached(path, cubin)
    except OSError: pass   # a read-only or full cache must not stop compilation
  _remember(hashlib.sha256(cubin).hexdigest(), ptx)
  return cubin
