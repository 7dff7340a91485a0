"""External tools some tests need, each found by what it can do (not by its name alone). A test whose tool is missing
skips with a reason naming the tool and the command that installs it; `.ci/run` installs them all and expects no skips.

  >>> sorted(INSTALL) == sorted(["clang", "llvm-objdump-19", "nvcc", "ptxas", "nvdisasm"])
  True
"""
from __future__ import annotations
import functools, re, shutil, subprocess
from typing import NoReturn
import pytest

# the packages .ci/run installs (Debian 12 names; the NVIDIA tools also come from PyPI: `nvidia-cuda-nvcc` has nvcc and
# ptxas in its bin/, `nvidia-cuda-nvdisasm` nvdisasm)
INSTALL = {"clang": "apt-get install clang-19 (any clang >= 15)", "llvm-objdump-19": "apt-get install llvm-19",
           "nvcc": "pip install 'nvidia-cuda-nvcc>=13,<14' and put its bin/ on PATH (or install the CUDA toolkit)",
           "ptxas": "pip install 'nvidia-cuda-nvcc>=13,<14' and put its bin/ on PATH (or install the CUDA toolkit)",
           "nvdisasm": "pip install 'nvidia-cuda-nvdisasm>=13,<14' and put its bin/ on PATH (or install the CUDA toolkit)"}

def skip_without(tool: str, detail: str = "") -> NoReturn:
  """Skip the calling test: `tool` (a key of INSTALL) is missing or unusable here."""
  pytest.skip(f"needs {tool}{f' ({detail})' if detail else ''}: install it with `{INSTALL[tool]}`")

@functools.cache
def _version(path: str) -> str:
  try: return subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
  except (OSError, subprocess.SubprocessError): return ""

@functools.cache
def clang() -> str | None:
  """A clang the CPU backend accepts (>= 15: _Float16 on x86-64), the one compiler/assemble/c_compiler.py picks first."""
  from compiler.assemble.c_compiler import CLANGS, CLANG_MIN
  for name in CLANGS:
    if (p := shutil.which(name)) and (m := re.search(r"clang version (\d+)", _version(p))) and int(m.group(1)) >= CLANG_MIN: return p
  return None

@functools.cache
def clangs() -> tuple[str, ...]:
  """Every clang >= 15 installed under a versioned name (clang-16, clang-19): the register allocators the structure
  tests check spill counts with (a GPU box's host compiles kernels with its own clang, here clang-16)."""
  from compiler.assemble.c_compiler import CLANGS, CLANG_MIN
  found = {int(m.group(1)): p for name in CLANGS[1:] if (p := shutil.which(name)) and (m := re.search(r"clang version (\d+)", _version(p)))}
  return tuple(p for v, p in sorted(found.items()) if v >= CLANG_MIN)

def need_clang(why: str = "the C compiler the CPU backend prefers") -> str:
  """The path of clang >= 15, or skip saying `why` the test needs it."""
  return clang() or skip_without("clang", why)

@functools.cache
def llvm_objdump_19() -> str | None:
  """An llvm-objdump of LLVM 19: the RDNA3 decoder prints operands as that version does, and older ones don't know
  gfx1100 well (Debian 12's LLVM 14 `llvm-objdump` aborts in its RDNA3 decoder), so the plain name only counts when
  its version is 19."""
  for name in ("llvm-objdump-19", "llvm-objdump"):
    if (p := shutil.which(name)) and re.search(r"LLVM version 19\.", _version(p)): return p
  return None

def need_llvm_objdump_19() -> str:
  """The path of llvm-objdump from LLVM 19, or skip (naming what was found instead)."""
  if (p := llvm_objdump_19()) is not None: return p
  other = shutil.which("llvm-objdump")
  found = f"{other} is LLVM {m.group(1)}" if other and (m := re.search(r"LLVM version ([\d.]+)", _version(other))) else "none on PATH"
  skip_without("llvm-objdump-19", f"the gfx1100 disassembly the RDNA3 decoder is checked against; {found}")

def need_tool(name: str) -> str:
  """The path of NVIDIA tool `name` (nvcc, ptxas, nvdisasm) on PATH, or skip."""
  return shutil.which(name) or skip_without(name)
