"""The capture slot: while TinyJit (or export) captures a function, the engine records every launch it runs here.

The slot lives below both the engine and the JIT, so each reads it by importing downward (as tinygrad keeps
`capturing` in engine/realize.py, beneath engine/jit.py): the engine appends to the Recording, the capturer opens one.

>>> from frontend import Tensor
>>> with capture() as items: _ = (Tensor([1.0]) + 1).realize()
>>> [ei.kind for ei in items], capturing() is None
(['kernel'], True)
"""
from __future__ import annotations
import contextlib, weakref
from typing import TYPE_CHECKING
from collections.abc import Callable, Iterator
from compiler.lazy import LazyBuffer
if TYPE_CHECKING: from frontend.buffer import Buffer

class JitError(RuntimeError):
  """The JIT can't replay a function correctly; the message says why."""

class Recording(list):
  """The launches (engine.ExecItem) of a capture, plus what a replay needs besides running them: the index checks
  whose flag buffers it must read (flag buffer, message, exception type), and the lazy buffers the launches wrote
  in place (their pending readers run before a replay overwrites them)."""
  def __init__(self):
    super().__init__()
    self.checks: list[tuple[Buffer, str, type]] = []
    self.written: list[weakref.ref] = []   # (weak: LazyBuffers)
    self.first_id = LazyBuffer.next_id()   # lazy buffers built before the capture have smaller ids
    # symbolic shrinks made during the capture (what, ((lo, hi) per dim), shape): a replay checks them at its values,
    # as Tensor.shrink checked them at the capture's (a window past the dim would read another row, or past the buffer)
    self.bounds: list[tuple[str, tuple, tuple]] = []
    # set by a capturer that must not write into existing tensors (export): called with the kernel's name before an
    # in-place write would run, it raises, so that the write never happens
    self.refuse_write: Callable[[str], None] | None = None

_recording: Recording | None = None   # the capture in progress (only capture() sets it)

@contextlib.contextmanager
def capture(what: str = "TinyJit capture") -> Iterator[Recording]:
  """Record every launch (engine.ExecItem) the block runs into the yielded list; `what` names the capturer in errors.
  Captures don't nest, and reading tensor values on the host inside one raises JitError (engine.to_host).

  >>> from frontend import Tensor
  >>> with capture() as items: _ = (Tensor([1.0]) + 1).realize()
  >>> [ei.kind for ei in items]
  ['kernel']
  """
  global _recording
  if _recording is not None: raise JitError(f"{what}: nested TinyJit capture is not supported")
  _recording = items = Recording()
  try: yield items
  finally: _recording = None

def capturing() -> Recording | None:
  """The list the capture in progress records into (None: no capture).

  >>> capturing() is None
  True
  """
  return _recording
