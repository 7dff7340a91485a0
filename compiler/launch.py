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
  def kwargs(self) -> dict:
    """The keyword arguments of a Program call."""
    return {"global_size": self.global_size, "local_size": self.local_size, "threads": self.threads}
