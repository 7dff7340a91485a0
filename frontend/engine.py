"""The engine: runs a schedule on devices. Allocates buffers, compiles kernels (cached), launches, counts.

>>> from frontend import Tensor, GlobalCounters
>>> GlobalCounters.reset(); _ = (Tensor([1.0, 2.0]) + 1).realize(); GlobalCounters.kernel_count
1
"""
from __future__ import annotations
import os, sys, weakref
from dataclasses import dataclass
import numpy as np
from compiler.dtypes import DType
from compiler.lazy import LazyBuffer
from compiler.schedule import ScheduleItem, create_schedule
from frontend.checks import Checks
from compiler.pack import pack_matmuls
from compiler.uop import UOp, Ops, ALU
from compiler.lower import lower
from compiler.linearize import linearize
from hcqrt.device import Device, debug_level

class GlobalCounters:
  """Counters of everything run since the last `reset()`: kernels, estimated FLOPs, bytes moved, time."""
  kernel_count: int = 0
  global_ops: int = 0
  global_mem: int = 0
  time_sum_s: float = 0.0
  @staticmethod
  def reset() -> None:
    GlobalCounters.kernel_count = GlobalCounters.global_ops = GlobalCounters.global_mem = 0
    GlobalCounters.time_sum_s = 0.0

class Buffer:
  """A device buffer owned by the frontend; freed when the last reference goes away."""
  __slots__ = ("device", "nbytes", "raw", "__weakref__")
  def __init__(self, device: str, nbytes: int):
    self.device, self.nbytes = device, nbytes
    dev = device_(device)
    self.raw = dev.allocator.alloc(nbytes)
    weakref.finalize(self, dev.allocator.free, self.raw)

_prepared: set[str] = set()
def device_(name: str):
  """The opened device `name`; the first use of the CPU installs its native thread-pool runner."""
  dev = Device[name]
  if name not in _prepared:
    _prepared.add(name)
    if dev.name == "CPU":
      from hcqrt.cpu.device import RUNNER_C, install_runner
      from compiler.assemble.c_compiler import compile_c
      install_runner(compile_c(RUNNER_C, "hcqrt_runner"))
  return dev

def from_host(arr: np.ndarray, dtype: DType, device: str) -> LazyBuffer:
  buf = Buffer(device, arr.nbytes)
  if arr.nbytes: device_(device).allocator.copyin(buf.raw, memoryview(arr.reshape(-1).view(np.uint8)))
  return LazyBuffer.from_buffer(buf, arr.shape, dtype, device)

class JitError(RuntimeError):
  """The JIT can't replay a function correctly; the message says why."""

def to_host(lb: LazyBuffer, npdtype) -> np.ndarray:
  if capturing is not None:
    raise JitError("reading tensor values on the host (.item()/.numpy()/.tolist()) during TinyJit capture would freeze them "
                   "into the replay; move the read out of the jitted function")
  return _copyout(lb, npdtype)

def _copyout(lb: LazyBuffer, npdtype) -> np.ndarray:
  assert lb.realized and not lb.is_view
  out = np.empty(lb.size, dtype=npdtype)
  if out.nbytes: Device[lb.device].allocator.copyout(memoryview(out.view(np.uint8)), lb.buffer.raw)
  return out

@dataclass
class CompiledKernel:
  name: str
  program: object
  threads: int
  global_size: tuple[int, ...]
  launch: dict      # extra keyword arguments of every launch (threads on the CPU, grid/block dims on GPUs)
  ops: int          # estimated arithmetic operations per launch
  src: str

_kernel_cache: dict[tuple, CompiledKernel] = {}

def _estimate_ops(prog: list[UOp]) -> int:
  mult, stack, ops = 1, [], 0
  for u in prog:
    if u.op is Ops.RANGE: stack.append(mult); mult *= u.src[0].arg
    elif u.op is Ops.ENDRANGE: mult = stack.pop()
    elif u.op in ALU and u.dtype is not None and not (u.dtype.is_int and u.dtype.count == 1 and u.op in (Ops.ADD, Ops.MUL)): ops += mult * (u.dtype.count or 1)
  return ops

def get_kernel(si: ScheduleItem, device: str) -> CompiledKernel:
  # the opts change the code: part of the key
  key = (si.ast, device, os.environ.get("NOOPT", "0"), os.environ.get("BEAM", "0"), os.environ.get("TC", "1"))
  if (ck := _kernel_cache.get(key)) is not None: return ck
  dev = device_(device)
  from compiler.opts import optimize
  k = lower(si.ast, si.name)
  if (beam := int(os.environ.get("BEAM", "0") or 0)) > 0 and os.environ.get("NOOPT", "0") != "1":
    from compiler.beam import beam_search
    k = beam_search(k, dev, _beam_runner(si, dev), beam, progress=sys.stderr.isatty() or debug_level() >= 1)
  else: k = optimize(k, dev)
  if dev.renderer == "ptx":   # PTX has no double-precision exp2/log2/sin: spell them out in arithmetic
    from compiler.transcendental import rewrite_float64
    k.sink = rewrite_float64(k.sink)
  from compiler.kernel_api import apply_rewrites
  k = apply_rewrites(k, dev.renderer)   # the documented pre-render hook (compiler/kernel_api.py register_rewrite)
  prog = linearize(k)
  if dev.renderer != "c" and os.environ.get("NOOPT", "0") != "1":   # GPUs: cut reduction loops at their padding borders
    from compiler.peel import peel
    k = peel(k, output_loops=False)
    prog = linearize(k)
  threads = dev.ncores if k.threaded is not None else 1
  if dev.renderer == "c":
    from compiler.render_c import render_c
    from compiler.assemble.c_compiler import compile_c
    src = render_c(k, threads, prog)
    if debug_level() >= 4: print(src, file=sys.stderr)
    program = dev.program(k.name, compile_c(src, k.name))
    launch = {"threads": threads}
  elif dev.renderer == "ptx":
    from compiler.render_ptx import render_ptx, BUFFER_ALIGNMENT
    from compiler.assemble.ptx_assembler import assemble_ptx
    # launch: {"global_size": (x,y,z), "local_size": (x,y,z)}; vector loads need the allocator's alignment
    src, launch = render_ptx(k, dev.arch, prog, getattr(dev, "buffer_alignment", BUFFER_ALIGNMENT))
    if debug_level() >= 4: print(src, file=sys.stderr)
    program = dev.program(k.name, assemble_ptx(src, dev.arch))
  else: raise NotImplementedError(f"renderer {dev.renderer!r} of device {device}")
  gsize = tuple(r.src[0].arg for r in k.global_ranges)
  ck = _kernel_cache[key] = CompiledKernel(k.name, program, threads, gsize, launch, _estimate_ops(prog), src)
  return ck

def _beam_runner(si: ScheduleItem, dev):
  """BEAM's callback: run a built candidate on random buffers shaped like si's (the same data for every candidate);
  returns (seconds, [output array]). Outputs are filled with NaN bytes before each run, so an unwritten element shows."""
  rng = np.random.default_rng(0)
  lbs = [si.outputs[0], *si.inputs]
  npdt = lambda dt: np.dtype(dt.fmt) if dt.fmt else np.dtype(np.uint16)
  bufs = [Buffer(si.outputs[0].device, max(1, lb.size * lb.dtype.itemsize, (si.alloc_nbytes or 0) if i == 0 else 0)) for i, lb in enumerate(lbs)]
  for b, lb in zip(bufs[1:], lbs[1:]):
    d = npdt(lb.dtype)
    x = rng.standard_normal(lb.size) if d.kind == "f" else rng.integers(-3, 4, lb.size) if d.kind in "iu" else rng.integers(0, 2, lb.size)
    x = x.astype(d) if d.kind != "u" else np.abs(x).astype(d)
    if x.nbytes: dev.allocator.copyin(b.raw, memoryview(x.reshape(-1).view(np.uint8)))
  out_dt, garbage = npdt(lbs[0].dtype), np.full(bufs[0].nbytes, 0xFF, np.uint8)
  progs: dict[int, object] = {}
  def run(built) -> tuple[float, list]:
    if (prog := progs.get(id(built))) is None: prog = progs[id(built)] = dev.program(built.name, built.binary)
    dev.allocator.copyin(bufs[0].raw, memoryview(garbage))
    et = prog(*[b.raw for b in bufs], **built.launch, wait=True) or 0.0
    out = np.empty(lbs[0].size, out_dt)
    if out.nbytes: dev.allocator.copyout(memoryview(out.view(np.uint8)), bufs[0].raw)
    return et, [out]
  return run

@dataclass
class ExecItem:
  """One launch (or copy) with its buffers bound: what the JIT records and replays."""
  kind: str                 # kernel | copy
  ck: CompiledKernel | None
  bufs: list[Buffer]        # outputs first
  fresh_out: bool = True    # bufs[0] was allocated for this launch (False: an in-place assign target)
  def run(self) -> float:
    if self.kind == "copy":
      dst, src = self.bufs
      data = np.empty(dst.nbytes, np.uint8)   # the tensor's bytes: a packed product's buffer has padding past them
      if data.nbytes:
        Device[src.device].allocator.copyout(memoryview(data), src.raw)
        Device[dst.device].allocator.copyin(dst.raw, memoryview(data))
      GlobalCounters.global_mem += data.nbytes
      return 0.0
    ck = self.ck
    et = ck.program(*[b.raw for b in self.bufs], **ck.launch, wait=True) or 0.0
    GlobalCounters.kernel_count += 1
    GlobalCounters.global_ops += ck.ops
    GlobalCounters.global_mem += sum(b.nbytes for b in self.bufs)
    GlobalCounters.time_sum_s += et
    if debug_level() >= 2:
      print(f"{self.bufs[0].device:6s} kernel {GlobalCounters.kernel_count:4d} {ck.name:30s} global {str(ck.global_size):18s} "
            f"{et * 1e6:9.1f} us  {ck.ops / max(et, 1e-9) / 1e9:7.2f} GFLOP/s", file=sys.stderr)
    return et

# while the JIT captures, every ExecItem run is appended here
capturing: list[ExecItem] | None = None

def run_schedule(items: list[ScheduleItem]) -> None:
  for si in items:
    out = si.outputs[0]
    nbytes = si.alloc_nbytes or out.size * out.dtype.itemsize
    if si.kind == "empty":
      out.buffer = Buffer(out.device, nbytes)
      continue
    if si.kind == "copy":
      ei = ExecItem("copy", None, [Buffer(out.device, nbytes), si.inputs[0].buffer])
    else:
      for b in si.inputs:
        if b.device != out.device: raise RuntimeError(f"kernel {si.name}: input on {b.device}, output on {out.device}")
      buf = si.assign_target.buffer if si.assign_target is not None else Buffer(out.device, nbytes)
      if out.size == 0:
        out.buffer = buf
        continue
      # get_kernel may raise (a compile error): then nothing of this item is marked realized
      ei = ExecItem("kernel", get_kernel(si, out.device), [buf] + [b.buffer for b in si.inputs], si.assign_target is None)
    ei.run()
    out.buffer = ei.bufs[0]
    if capturing is not None: capturing.append(ei)

def _drop_graph(items: list[ScheduleItem]) -> None:
  # once realized, a base forgets how it was computed so the graph above it can be freed
  for si in items:
    for b in si.outputs:
      b.srcs, b.op, b.arg = (), Ops.EMPTY, None

def _simd_lanes(device: str) -> int:
  """float32 lanes of the device's kernel vectors; 0 where products are not packed (GPUs, NOOPT=1)."""
  dev = device_(device)
  if dev.renderer != "c" or os.environ.get("NOOPT", "0") == "1": return 0
  return getattr(dev, "simd_bytes", 0) // 4

def realize(lbs: list[LazyBuffer]) -> None:
  checks = Checks(lbs)   # index range checks of the graph: their kernels run with it, then they are read
  items = pack_matmuls(create_schedule(lbs + checks.flags), _simd_lanes)
  run_schedule(items)
  _drop_graph(items)
  # read also during TinyJit capture (the capture run is a real run); replays run the check kernels unread
  checks.verify(lambda lb: _copyout(lb.base, np.bool_))
