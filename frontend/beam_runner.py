"""BEAM on a device: the runner that times built candidates on real buffers, and the search the engine hands to the
compile pipeline (compiler/beam.py searches; this module is the part that touches the device).

>>> import inspect; list(inspect.signature(beam_search_for).parameters)
['si', 'device', 'width']
"""
from __future__ import annotations
import sys
from typing import Any
from collections.abc import Callable
import numpy as np
from compiler import beam
from compiler.lower import LoweredKernel
from compiler.schedule import ScheduleItem
from compiler.target import Target
from hcqrt.device import debug_level
from frontend.buffer import Buffer

def beam_runner(si: ScheduleItem, dev: Any, warm: bool = True) -> Callable[[beam.Built], tuple[float, list]]:
  """BEAM's callback: run a built candidate on random buffers shaped like si's (the same data for every candidate);
  returns (seconds, [output array]). Outputs are filled with NaN bytes before each run, so an unwritten element shows.
  The timed launch follows an untimed one (`warm`), so it times the kernel with its threads awake, as in a step.
  The buffers are made on the first run (a search answered from the cache runs nothing and allocates nothing)."""
  lbs, nout = [*si.outputs, *si.inputs], len(si.outputs)   # (an assign fused with others has several outputs)
  npdt = lambda dt: np.dtype(dt.fmt) if dt.fmt else np.dtype(np.uint16)
  state: dict = {}
  def setup() -> dict:
    rng = np.random.default_rng(0)
    bufs = [Buffer(si.outputs[0].device, max(1, lb.size * lb.dtype.itemsize, (si.alloc_nbytes or 0) if i == 0 else 0)) for i, lb in enumerate(lbs)]
    for b, lb in zip(bufs[nout:], lbs[nout:]):
      d = npdt(lb.dtype)
      x = rng.standard_normal(lb.size) if d.kind == "f" else rng.integers(-3, 4, lb.size) if d.kind in "iu" else rng.integers(0, 2, lb.size)
      x = x.astype(d) if d.kind != "u" else np.abs(x).astype(d)
      if x.nbytes: dev.allocator.copyin(b.raw, memoryview(x.reshape(-1).view(np.uint8)))
    # BEAM's compile workers are forked during the search: they must not share these (see share_with_forks)
    for b in bufs: dev.allocator.share_with_forks(b.raw, False)
    return {"bufs": bufs, "garbage": [np.full(b.nbytes, 0xFF, np.uint8) for b in bufs[:nout]], "progs": {}}
  def run(built: beam.Built) -> tuple[float, list]:
    if not state: state.update(setup())
    bufs, progs = state["bufs"], state["progs"]
    # keyed by the code, not id(built): a candidate freed after its run leaves its id to the next one, which would then
    # run the freed one's program (with its own launch: a kernel cut for 2 cores run on 1 left half its outputs unset)
    if (prog := progs.get(key := (built.name, built.binary))) is None: prog = progs[key] = dev.program(built.name, built.binary)
    raws = [b.raw for b in bufs]
    for b, garbage in zip(bufs[:nout], state["garbage"]): dev.allocator.copyin(b.raw, memoryview(garbage))
    # an untimed launch first: the Python work above outlasts the worker threads' spin, and waking a sleeping worker
    # (100-500 us on a VM) would be timed instead of the kernel; it also leaves the caches as a step's previous
    # kernel would. (A kernel is deterministic: an element it never writes still holds the NaN garbage after both.)
    if warm: prog(*raws, **built.launch.kwargs(), wait=True)
    et = prog(*raws, **built.launch.kwargs(), wait=True) or 0.0
    outs = []
    for b, lb in zip(bufs[:nout], lbs):
      outs.append(out := np.empty(lb.size, npdt(lb.dtype)))
      if out.nbytes: dev.allocator.copyout(memoryview(out.view(np.uint8)), b.raw)
    return et, outs
  def release() -> None:
    for b in state.get("bufs", ()): dev.allocator.share_with_forks(b.raw, True)   # (back in the cache: user memory again)
    state.clear()
  run.release = release
  return run

def beam_search_for(si: ScheduleItem, device: Any, width: int) -> Callable[[LoweredKernel, Target], tuple | None]:
  """The search compile_kernel runs as its optimize stage under BEAM=width: beam_search timing candidates on `device`
  (None: the default opts are kept)."""
  def search(k: LoweredKernel, target: Target) -> tuple | None:
    run = beam_runner(si, device)
    try: return beam.beam_search(k, target, run, width, progress=sys.stderr.isatty() or debug_level() >= 1)
    finally: run.release()
  return search
