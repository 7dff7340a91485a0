"""PYTHONPATH for the tests' child Pythons. The repository goes first; the caller's entries stay after it, because a GPU
box without a package index installs cffi, pycparser and pyelftools from wheels into a folder on PYTHONPATH (GPU.md),
and a child that replaced PYTHONPATH with the repository alone could not import them.

  >>> import os; pythonpath("/repo").split(os.pathsep)[0]
  '/repo'
"""
from __future__ import annotations
import os

def pythonpath(root: str | os.PathLike) -> str:
  """`root`, then this process's PYTHONPATH entries (without a repeat of `root`)."""
  rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(root)]
  return os.pathsep.join([str(root), *rest])
