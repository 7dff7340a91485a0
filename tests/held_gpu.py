"""An NV mock GPU as late as it can be without deadlocking the host, for race tests (no timers).

`engine.held()` (hcqrt/mock/nv/gpfifo.py, held mode) keeps a GPU's doorbells queued until the test releases them, so
the test says exactly where the late GPU's work runs. Some races sit inside one host call that also waits on the held
GPU (a replay that first waits for the previous one, a copyout that waits for the timeline): there the latest point the
GPU may start is when the host blocks on it and nothing else can run. `held_until_the_host_waits` holds the GPUs and,
each time the host is about to block on a signal that has not reached its value, waits until every GPU of the mock is
idle (GPFIFOEngine.idle: unheld work may still be running, e.g. a channel in its release stall) and then, if the signal
still has not come, takes up what the held GPUs hold, holding their later doorbells again. That is a legal schedule (a
channel's work may start arbitrarily late: hcqrt/mock/nv/gpfifo.py's held-mode note gives the sources) and a
deterministic one: the held work runs exactly when the host cannot go on without it, whatever the load."""
from __future__ import annotations
import contextlib, time
from collections.abc import Iterator
from typing import Any
import pytest
from hcqrt import hcq
from hcqrt.hcq import Signal

def all_idle(engines: list[Any]) -> bool:
  """Whether every mock GPU engine is idle at once (GPFIFOEngine.idle). Idle one GPU after the other is not idle all at
  once: a GPU still running may unblock one already asked (its release lands after that GPU said idle), so the answer
  counts only if no GPU did anything while they were asked."""
  steps = [e.steps for e in engines]
  return all(e.idle() for e in engines) and [e.steps for e in engines] == steps

def wait_until_idle(drv: Any, timeout_s: float = 10.0) -> None:
  """Wait until every GPU of the mock `drv` has nothing left it can run (unheld work). `synchronize` waits only for the
  timeline, and a graph's stream releases its graph signal after it (hcq.GraphReplay._record: the LAST release), in a
  release stall (gpfifo.py RELEASE_STALL_S) that the mock's thread ends later; once idle, that release has landed.
  The bound only turns a GPU that never goes idle into a failure instead of a hang."""
  every = [g.engine for g in drv.gpus]
  deadline = time.perf_counter() + timeout_s
  while not all_idle(every):
    if time.perf_counter() > deadline: raise AssertionError(f"the mock GPUs were not idle after {timeout_s} s")
    time.sleep(0.0005)

@contextlib.contextmanager
def held_until_the_host_waits(drv: Any, *gpus: int) -> Iterator[None]:
  held, every = [drv.gpus[i].engine for i in gpus], [g.engine for g in drv.gpus]
  real = Signal.wait
  def wait(self: Signal, value: int, timeout_s: float | None = None) -> None:
    deadline = time.perf_counter() + (hcq.DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s)
    while self.value < value and time.perf_counter() < deadline:   # (past the deadline the real wait raises its error)
      if all_idle(every):
        if self.value < value:
          for e in held: e.release(keep_holding=True)
        break
      time.sleep(0.0005)
    real(self, value, timeout_s)
  with pytest.MonkeyPatch.context() as m:
    m.setattr(Signal, "wait", wait)
    for e in held: e.hold = True
    try: yield
    finally:
      for e in held: e.release()
