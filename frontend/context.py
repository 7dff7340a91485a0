"""Context: temporarily change settings that are read from the environment (DEBUG, NOOPT, CACHE, ...).

>>> import os
>>> from frontend import Context
>>> with Context(DEBUG=2): os.environ["DEBUG"]
'2'
"""
from __future__ import annotations
import os
from contextlib import ContextDecorator

class Context(ContextDecorator):
  """`with Context(DEBUG=2, NOOPT=1): ...` or as a decorator; restores the previous values on exit."""
  def __init__(self, **settings: int | str):
    self.settings = {k: str(v) for k, v in settings.items()}
  def __enter__(self):
    self.saved = {k: os.environ.get(k) for k in self.settings}
    os.environ.update(self.settings)
    return self
  def __exit__(self, *exc):
    for k, v in self.saved.items():
      if v is None: os.environ.pop(k, None)
      else: os.environ[k] = v
