"""Run a loop on several threads at once, switching between them as often as the interpreter can: a race test's harness
(tests/runtime/test_cpu_runtime.py, test_program_code_reuse.py: the allocators' caches under frees from any thread)."""
from __future__ import annotations
import sys, threading
from collections.abc import Callable

def race(loop: Callable[[int], None], threads: int = 2, timeout_s: float = 300) -> list[BaseException]:
  """Run loop(0) .. loop(threads-1) at once, with a switch interval of 1 us (so a switch lands inside the updates
  under test too); returns what they raised. A thread still running after `timeout_s` fails the test: a deadlock
  must not hang the suite.

  >>> seen = []; race(seen.append, 3); sorted(seen)
  []
  [0, 1, 2]
  """
  errors: list[BaseException] = []
  def run(n: int) -> None:
    try: loop(n)
    except BaseException as e: errors.append(e)
  old = sys.getswitchinterval(); sys.setswitchinterval(1e-6)
  try:
    ts = [threading.Thread(target=run, args=(n,), daemon=True) for n in range(threads)]
    for t in ts: t.start()
    for t in ts: t.join(timeout=timeout_s)
    assert not any(t.is_alive() for t in ts), f"a thread still runs after {timeout_s} s: deadlocked"
  finally: sys.setswitchinterval(old)
  return errors
