"""The environment settings the runtime reads in more than one place, spelled once (read at every call, not at
import). hcqrt imports no other package, so this is the runtime's own copy of the compiler's readers.

>>> flag("HCQRT_SURELY_UNSET"), env_int("HCQRT_SURELY_UNSET", 1 << 30)
(False, 1073741824)
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
  """DEBUG: how much to print (1 the device chosen; 2 each launch); a bad value reads as 0."""
  try: return int(getenv("DEBUG", "0"))
  except ValueError: return 0

def env_int(name: str, default: int) -> int:
  """An integer setting (a byte count); `default` when unset. A value that is not an integer is an error naming it."""
  if (v := os.environ.get(name)) is None: return default
  try: return int(v)
  except ValueError: raise ValueError(f"{name}={v!r} is not an integer") from None
