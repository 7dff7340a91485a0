"""The profiler's event sink: Chrome trace-event JSON (Perfetto and chrome://tracing open it).

`PROFILE=path.json` (or `PROFILE=1`: a file in the temp directory, named on stderr at exit) turns it on. It lives in
compiler/ because the compiler (compile spans), hcqrt (GPU timestamps of graph replays) and the frontend (kernel runs,
copies, schedule spans) all record into it, and compiler/ is the one package each of them may import.

When off, every recording site costs one read of the module flag `ENABLED` (`if profile.ENABLED: ...`): no call, no
allocation.

>>> import compiler.profile as prof
>>> prof.enable(); prof.clear()
>>> with prof.span("schedule", cat="host"): pass
>>> prof.kernel("CPU", "E_4", 0.0, 1e-6, args={"flops": 4})
>>> [e["name"] for e in prof.trace()["traceEvents"] if e["ph"] == "X"]
['schedule', 'E_4']
>>> prof.disable(); prof.clear()
"""
from __future__ import annotations
import atexit, contextlib, json, os, sys, tempfile, threading, time
from collections.abc import Callable, Iterator
from typing import Any

def _setting() -> str: return os.environ.get("PROFILE", "0")

ENABLED: bool = _setting() not in ("", "0")
_events: list[tuple] = []
_deferred: list[Callable[[], list[tuple]]] = []   # makers of event tuples, called by trace() (a JIT replay's kernels)
_tracks: dict[str, int] = {}   # track (a device, "host") -> Chrome pid
_lock = threading.Lock()
_t0_ns = time.perf_counter_ns()

def enable() -> None:
  """Record from now on (what PROFILE=... does at import)."""
  global ENABLED
  ENABLED = True

def disable() -> None:
  global ENABLED
  ENABLED = False

def clear() -> None:
  """Forget the events recorded so far."""
  with _lock: _events.clear(); _deferred.clear(); _tracks.clear()

def now_us() -> float:
  """Microseconds since this module was imported (the trace's clock: the host's perf_counter)."""
  return (time.perf_counter_ns() - _t0_ns) / 1e3

def host_us(perf_counter_ns: int) -> float:
  """A time.perf_counter_ns() reading (CLOCK_MONOTONIC) on the trace's clock."""
  return (perf_counter_ns - _t0_ns) / 1e3

def _pid(track: str) -> int:
  if (p := _tracks.get(track)) is None: p = _tracks[track] = len(_tracks) + 1
  return p

def add(name: str, track: str, ts_us: float, dur_us: float, cat: str, args: dict | None = None, tid: int = 0) -> None:
  """One complete ("X") event on `track` (a device name or "host"). Kept as a tuple (list.append is atomic): the
  JSON dicts are made by trace(), not while the program runs. `args` must not be changed afterwards."""
  _events.append((name, track, ts_us, dur_us, cat, args, tid))

def kernel(device: str, name: str, ts_us: float, seconds: float, args: dict | None = None, tid: int = 0) -> None:
  """A kernel run on `device`: started at host time `ts_us`, ran `seconds` (GPU timestamps on NV/AMD, host on the CPU)."""
  _events.append((name, device, ts_us, seconds * 1e6, "kernel", args, tid))

def defer(make: Callable[[], list[tuple]]) -> None:
  """Events made later, when the trace is written: `make()` returns (name, track, ts_us, dur_us, cat, args, tid)
  tuples. A hot path (a JIT replay's kernels) then keeps only its raw clock readings."""
  _deferred.append(make)

@contextlib.contextmanager
def span(name: str, cat: str = "host", track: str = "host", args: dict | None = None) -> Iterator[dict]:
  """A host span (schedule, lower, compile, BEAM...); yields its args dict, which the body may fill."""
  a = dict(args or {})
  st = now_us()
  try: yield a
  finally: add(name, track, st, now_us() - st, cat, a)

def trace() -> dict[str, Any]:
  """The recorded events as a Chrome trace ({"traceEvents": [...]}), with a name for each track."""
  with _lock:
    evs = [{"name": n, "cat": c, "ph": "X", "pid": _pid(t), "tid": tid, "ts": ts, "dur": max(d, 0.0), "args": dict(a or {})}
           for n, t, ts, d, c, a, tid in list(_events) + [e for make in _deferred for e in make()]]
    meta = [{"name": "process_name", "ph": "M", "pid": p, "tid": 0, "args": {"name": t}} for t, p in _tracks.items()]
  return {"traceEvents": meta + evs, "displayTimeUnit": "ms"}

def save(path: str) -> str:
  """Write the trace to `path` (JSON); returns the path."""
  with open(path, "w") as f: json.dump(trace(), f)
  return path

def default_path() -> str:
  s = _setting()
  return os.path.join(tempfile.gettempdir(), f"hcqrt_profile_{os.getpid()}.json") if s == "1" else s

def _at_exit() -> None:
  if not ENABLED or not (_events or _deferred) or _setting() in ("", "0"): return   # (VIZ records without PROFILE: it saves the trace itself)
  path = save(default_path())
  print(f"PROFILE: trace of {len(trace()['traceEvents'])} events written to {path} (open in https://ui.perfetto.dev)",
        file=sys.stderr)

atexit.register(_at_exit)
