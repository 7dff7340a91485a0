"""The third-party packages hcqrt needs, and what to tell a user who lacks them (standard library only, so it works
where they are missing). GPU boxes often have numpy but not cffi/pycparser/pyelftools; `python -m hcqrt` and
`python -m hw_tests` check first and print the exact install commands instead of dying at an import.

  >>> missing() == [] or "pip install" in install_hint(missing())
  True
"""
from __future__ import annotations
import importlib.util, sys

# (module to import, package to install): cffi drives the kernel-driver ioctls (and needs pycparser for its cdefs),
# pyelftools reads cubins and the CPU backend's ELF objects
REQUIRED = (("numpy", "numpy"), ("cffi", "cffi"), ("pycparser", "pycparser"), ("elftools", "pyelftools"))

def missing() -> list[str]:
  """Package names (as pip knows them) of the required modules this interpreter cannot find."""
  out = []
  for mod, pkg in REQUIRED:
    try: found = importlib.util.find_spec(mod) is not None
    except (ImportError, ValueError): found = False
    if not found: out.append(pkg)
  return out

def install_hint(pkgs: list[str], prog: str = "hcqrt") -> str:
  """What to run to get `pkgs`: with a package index, and offline (wheels downloaded elsewhere, as in GPU.md)."""
  py = f"{sys.version_info.major}.{sys.version_info.minor}"
  # cffi needs pycparser at run time; --no-deps installs (offline) do not bring it along
  want = " ".join(dict.fromkeys([p for p in pkgs for p in ((p, "pycparser") if p == "cffi" else (p,))]))
  return "\n".join([
    f"{prog}: missing Python package(s): {', '.join(pkgs)} (for {sys.executable}, Python {py})",
    "  with a package index:",
    f"    {sys.executable} -m pip install {want}",
    "  offline: on a machine with an index, in the project root,",
    f"    python3 -m pip download --no-deps --only-binary=:all: --python-version {py} --implementation cp \\",
    "      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \\",
    f"      -d .whl {want}",
    "  copy .whl/ into the project root here, then",
    f"    {sys.executable} -m pip install -q --no-index --no-deps --target .site .whl/*.whl && export PYTHONPATH=$PWD/.site:$PWD",
    "  (the GPU machine notes, GPU.md, have the whole first-run recipe)"])

def require(prog: str) -> bool:
  """True when everything is importable; otherwise prints what to install to stderr and returns False."""
  if not (m := missing()): return True
  print(install_hint(m, prog), file=sys.stderr)
  return False
