"""Worker processes for BEAM's renders and compiles, which never hang their parent.

Workers are fresh interpreters (`python -c`, started with subprocess), not forks and not multiprocessing's
spawn/forkserver children:
- a fork copies every lock of the parent in the state it is in at that instant, and a lock another thread holds
  (the executor's queue feeder, a user's thread) stays held forever in the child: with Debian 12's Python 3.11.2,
  ProcessPoolExecutor(mp_context=fork) waited in shutdown for workers stuck in Queue.get, every time;
- spawn and forkserver re-import the parent's `__main__` script in each worker, which re-runs a script that has no
  `if __name__ == "__main__":` guard (a training script run with BEAM=2 would train again in every worker).
A worker gets the parent's sys.path and environment, runs `init` once (BEAM: the kernel being searched), then answers
jobs, each a pickled (function name, argument) on its stdin, with a length-prefixed pickled (ok, value) on its
stdout. The parent waits with poll(): a job that gets no answer within `job_timeout_s` of being sent (a hung or
dead worker) raises WorkerError, and the pool kills its workers on the way out.

>>> with WorkerPool(1, "compiler.beam_pool:echo", "hi", job_timeout_s=60) as pool:
...   pool.map("compiler.beam_pool:echo", [1, 2])
['hi1', 'hi2']
"""
from __future__ import annotations
import importlib, os, pickle, select, struct, subprocess, sys, time
from collections import deque
from collections.abc import Callable
from typing import Any

_BOOT = "import pickle, sys; sys.path[:] = pickle.load(sys.stdin.buffer); from compiler.beam_pool import serve; serve()"
_LEN = struct.Struct("<Q")

class WorkerError(RuntimeError):
  """A worker did not answer in time, died, or could not start."""

def _resolve(name: str) -> Callable:
  mod, fn = name.split(":")
  return getattr(importlib.import_module(mod), fn)

_ECHO: dict = {}
def echo(x: Any) -> Any:
  """A job for checks: its argument after the prefix `init` was given (init: echo(prefix) stores it)."""
  if "prefix" not in _ECHO: _ECHO["prefix"] = x; return None
  if x == "sleep": time.sleep(3600)   # a job that never answers: the pool's deadline must end the wait
  return f"{_ECHO['prefix']}{x}"

def serve() -> None:
  """The worker's loop: `init` (name, arg), then jobs until stdin closes. Answers go to the real stdout; anything a
  job prints goes to stderr, so it cannot break the protocol."""
  out = os.fdopen(os.dup(1), "wb")
  os.dup2(2, 1)
  inp = sys.stdin.buffer
  name, arg = pickle.load(inp)
  _resolve(name)(arg)   # (an exception ends the worker: the parent sees it exit)
  while True:
    try: name, arg = pickle.load(inp)
    except EOFError: return
    try: res = (True, _resolve(name)(arg))
    except Exception as e: res = (False, f"{type(e).__name__}: {str(e)[:500]}")
    data = pickle.dumps(res)
    out.write(_LEN.pack(len(data)) + data)
    out.flush()

class WorkerPool:
  """`n` worker processes, each initialized with `init`(`init_arg`) (a "module:function" name). `map` runs jobs on
  them; `close` (or leaving the `with`) ends them: stdin closed, killed if they don't exit at once."""
  def __init__(self, n: int, init: str, init_arg: Any, job_timeout_s: float):
    self.job_timeout_s, self.procs = job_timeout_s, []
    try:
      hello = pickle.dumps(list(sys.path)) + pickle.dumps((init, init_arg))
      # all started before any is written to: a hello bigger than the pipe waits for its worker's imports, and those run
      # side by side
      self.procs = [subprocess.Popen([sys.executable, "-c", _BOOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ))
                    for _ in range(max(1, n))]
      for p in self.procs: p.stdin.write(hello); p.stdin.flush()
    except (OSError, pickle.PicklingError) as e:
      self.close(kill=True)
      raise WorkerError(f"BEAM: could not start a compile worker: {type(e).__name__}: {e}") from e

  def map(self, name: str, args: list, start_by: float = float("inf")) -> list:
    """[name(a) for a in args], run on the workers; a job not started by time.perf_counter() `start_by` is dropped
    (None), and so is one that raised (its error printed). Raises WorkerError when a worker dies or a job gets no
    answer within job_timeout_s."""
    out: list = [None] * len(args)
    todo, idle = deque(range(len(args))), list(self.procs)
    busy: dict[int, tuple[subprocess.Popen, int, float, bytearray]] = {}   # stdout fd -> (worker, job, sent at, bytes so far)
    while todo or busy:
      now = time.perf_counter()
      if now > start_by: todo.clear()
      while todo and idle:
        p, i = idle.pop(), todo.popleft()
        try: p.stdin.write(pickle.dumps((name, args[i]))); p.stdin.flush()
        except OSError as e: raise WorkerError(f"BEAM: compile worker {p.pid} is gone ({type(e).__name__}; exit code {p.poll()})") from e
        busy[p.stdout.fileno()] = (p, i, now, bytearray())
      if not busy: break
      wait = min(sent + self.job_timeout_s for _, _, sent, _ in busy.values()) - now
      if wait <= 0:
        p, i, _, _ = min(busy.values(), key=lambda b: b[2])
        raise WorkerError(f"BEAM: compile worker {p.pid} gave no answer to {name}({_short(args[i])}) in {self.job_timeout_s:g} s")
      poll = select.poll()   # (not select(): a process with 1024 files open gets fds select cannot take)
      for fd in busy: poll.register(fd, select.POLLIN)
      for fd, _ in poll.poll(wait * 1000):
        p, i, _, buf = busy[fd]
        data = os.read(fd, 1 << 20)
        if not data: raise WorkerError(f"BEAM: compile worker {p.pid} exited (code {p.wait(timeout=5)}) during {name}({_short(args[i])})")
        buf += data
        if len(buf) < _LEN.size or len(buf) < _LEN.size + (size := _LEN.unpack_from(buf)[0]): continue
        ok, val = pickle.loads(bytes(buf[_LEN.size:_LEN.size + size]))
        if ok: out[i] = val
        else: print(f"BEAM: {name} failed in a worker: {val}", file=sys.stderr)
        del busy[fd]; idle.append(p)
    return out

  def close(self, kill: bool = False) -> None:
    """End the workers: EOF on their stdin (they exit), then kill any that did not within a second (all, if `kill`)."""
    for p in self.procs:
      try:
        if p.stdin: p.stdin.close()
      except OSError: pass
    for p in self.procs:
      try: p.wait(timeout=0 if kill else 1.0)
      except subprocess.TimeoutExpired:
        p.kill(); p.wait()
      if p.stdout: p.stdout.close()
    self.procs = []

  def __enter__(self) -> WorkerPool: return self
  def __exit__(self, typ, *_) -> None: self.close(kill=typ is not None)

def _short(a: Any) -> str: return repr(a)[:120]
