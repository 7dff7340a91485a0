"""The on-disk cache shared by the assemblers (and BEAM): one root directory, atomic writes.

>>> import os
>>> from compiler.assemble.disk_cache import cache_root
>>> cache_root() == (pathlib.Path(os.environ["HCQRT_CACHE"]) if os.environ.get("HCQRT_CACHE") else cache_root().parent / "hcqrt")
True
"""
from __future__ import annotations
import os, pathlib, tempfile

def cache_root() -> pathlib.Path:
  """$HCQRT_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/hcqrt; each user of the cache takes a subdirectory."""
  if os.environ.get("HCQRT_CACHE"): return pathlib.Path(os.environ["HCQRT_CACHE"])
  return pathlib.Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "hcqrt"

def atomic_write(path: pathlib.Path, data: bytes) -> None:
  """Write a private temp file in the same directory, then rename: readers in other processes see either
  nothing or the whole file, never a partial one."""
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f: f.write(data)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp): os.unlink(tmp)
    raise
