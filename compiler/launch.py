"""The launch arguments of a compiled kernel: one frozen type for every renderer and device."""
from __future__ import annotations
from dataclasses import dataclass

@dataclass(frozen=True)
class Launch:
  """How every launch of a kernel runs, the same type for every renderer: on a GPU `global_size` blocks of `local_size`
  threads, on the CPU `threads` cores (each device's Program takes all three and reads its own, hcqrt/interface.py).

  >>> Launch(threads=4).kwargs()
  {'global_size': (1, 1, 1), 'local_size': (1, 1, 1), 'threads': 4}
  """
  global_size: tuple[int, ...] = (1, 1, 1)
  local_size: tuple[int, ...] = (1, 1, 1)
  threads: int = 1
  @staticmethod
  def of(rendered: dict | Launch) -> Launch:
    """From a renderer's launch report ({"threads": n}, or {"global_size": ..., "local_size": ...}, or a Launch)."""
    if isinstance(rendered, Launch): return rendered
    unknown = set(rendered) - {"global_size", "local_size", "threads"}
    if unknown: raise ValueError(f"renderer launch report has unknown keys {sorted(unknown)}: {rendered}")
    return Launch(**{k: tuple(int(x) for x in v) if k != "threads" else int(v) for k, v in rendered.items()})
  def kwargs(self) -> dict:
    """The keyword arguments of a Program call."""
    return {"global_size": self.global_size, "local_size": self.local_size, "threads": self.threads}
