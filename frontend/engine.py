"""The engine: realizes lazy buffers. Schedules them, allocates buffers, gets each kernel built (compiler/pipeline.py,
cached per AST and target), runs it as an ExecItem, counts. Device opening is frontend/devices.py, buffers and counters
frontend/buffer.py, BEAM's device side frontend/beam_runner.py, the capture slot frontend/capture.py. Every frontend import
here points down: the Tensor passes what the engine needs of it (its live lazy buffers) as an argument.

>>> from frontend import Tensor, GlobalCounters
>>> GlobalCounters.reset(); _ = (Tensor([1.0, 2.0]) + 1).realize(); GlobalCounters.kernel_count
1
"""
from __future__ import annotations
import heapq, math, sys, weakref
from dataclasses import dataclass
from collections.abc import Callable, Iterable
import numpy as np
from compiler.dtypes import DType, to_np
from compiler import lazy
from compiler.lazy import LazyBuffer
from compiler.explain import explain_schedule, format_schedule
from compiler import schedule as _schedule
from compiler.schedule import ScheduleItem, create_schedule, snapshots, graph_key, cached_entry
from frontend import checks as _checks
from frontend.checks import Checks, any_pending
from compiler import pack
from compiler.pack import pack_matmuls
from compiler.pipeline import CompiledKernel, Launch, assemble_kernels, compile_kernel
from compiler import profile, settings, vizdata
from compiler.uop import UOp, Ops
from compiler.sint import sval
from hcqrt.device import Device, debug_level
from hcqrt.interface import Program, copy_between
from frontend import devices as _devices
from frontend.devices import open_device, target_of
from frontend.beam_runner import beam_search_for
from frontend.buffer import Buffer, GlobalCounters
from frontend.capture import JitError, capturing

VIZ = settings.flag("VIZ")
# the schedule's explanation (DEBUG>=3, VIZ) names the user's source lines: the lazy graph notes them only then
lazy.TRACK_SOURCE = lazy.TRACK_SOURCE or debug_level() >= 3 or VIZ
if VIZ:
  from frontend import viz
  viz.start()

def from_host(arr: np.ndarray, dtype: DType, device: str) -> LazyBuffer:
  buf = Buffer(device, arr.nbytes, lambda: f"a copy from the host of shape {arr.shape} {dtype}")
  if profile.ENABLED: st = profile.now_us()
  if arr.nbytes: open_device(device).allocator.copyin(buf.raw, memoryview(arr.reshape(-1).view(np.uint8)))
  if profile.ENABLED: profile.add(f"copy host -> {device}", device, st, profile.now_us() - st, "copy", {"bytes": arr.nbytes, "shape": list(arr.shape)})
  return LazyBuffer.from_buffer(buf, arr.shape, dtype, device)

def to_host(lb: LazyBuffer, npdtype) -> np.ndarray:
  if capturing() is not None:
    raise JitError("reading tensor values on the host (.item()/.numpy()/.tolist()) during TinyJit capture would freeze them "
                   "into the replay; move the read out of the jitted function")
  return _copyout(lb, npdtype)

def _copyout(lb: LazyBuffer, npdtype) -> np.ndarray:
  assert lb.realized and not lb.is_view
  out = np.empty(sval(lb.size), dtype=npdtype)   # (symbolic: the elements at the bound values, laid out densely)
  if profile.ENABLED: st = profile.now_us()
  if out.nbytes: Device[lb.device].allocator.copyout(memoryview(out.view(np.uint8)), lb.buffer.raw)
  if profile.ENABLED: profile.add(f"copy {lb.device} -> host", lb.device, st, profile.now_us() - st, "copy", {"bytes": out.nbytes})
  return out

@dataclass
class LoadedKernel:
  """A compiled kernel loaded on its device: what an ExecItem launches."""
  compiled: CompiledKernel  # source, binary, launch arguments (compiler/pipeline.py)
  program: Program          # the device's loaded program
  ast: UOp                  # what it computes (export lowers it again as portable C)
  device: str = ""          # the device the program is loaded on
  def __post_init__(self):
    # read at every launch: copied out of compiled once (a CompiledKernel is never changed after compile_kernel built it)
    self.name: str = self.compiled.name
    self.launch: Launch = self.compiled.launch
    self.launch_kwargs: dict = self.launch.kwargs()   # (the Program call's launch dims, made once)
    self.ops: int = self.compiled.ops
    self.last_use: int = 0   # the run (engine._runs) that last used it: the kernel cache's LRU order
  @property
  def src(self) -> str: return self.compiled.src
  @property
  def global_size(self) -> tuple[int, ...]: return self.compiled.global_size
  @property
  def threads(self) -> int: return self.compiled.threads

# Built kernels by (AST, Target, opts settings), at most settings.kernel_cache_max() of them, so a process that meets
# ever new shapes (a server, eager code of varying sizes) does not keep every kernel, its binary, its AST and its loaded
# program forever. Least recently used out first: each use stamps the kernel with the run counter (`last_use = _runs`:
# an attribute store, where moving its key in an ordered table would hash the key twice, ~2 us a kernel on the prepared
# path), and a full cache evicts the oldest eighth at once (one scan of the stamps per eighth, at a compile's cost).
# Evicting only drops the cache's reference: an ExecItem or a TinyJit graph that holds the LoadedKernel keeps its
# program loaded and running (a program frees its memory when the last reference goes: CPU hcqrt/cpu/elf_loader.py
# LoadedImage, NV/AMD their program's finalizer), and a prepared launch that kept it (weakly) finds it gone
# (_Prepared.valid) and is scheduled again.
_kernel_cache: dict[tuple, LoadedKernel] = {}
_loaded: dict[tuple, LoadedKernel] = {}   # (cache key, device) -> the same kernel loaded on another device of the same target
_loaded_devices: set[str] = set()        # the devices _loaded has entries for (an eviction drops the key's on each)

def _cache_put(key: tuple, kern: LoadedKernel) -> LoadedKernel:
  """Enter a built kernel, first evicting the least recently used eighth of the cache (and their loads on other
  devices) when it holds settings.kernel_cache_max() kernels."""
  cache = _kernel_cache
  if (over := len(cache) + 1 - (limit := settings.kernel_cache_max())) > 0:
    # (sorted is stable: among equal stamps, as a schedule's kernels built together, the first entered goes first)
    for old, _ in heapq.nsmallest(over + limit // 8, cache.items(), key=lambda kv: kv[1].last_use):
      del cache[old]
      for d in _loaded_devices: _loaded.pop((old, d), None)
  kern.last_use = _runs
  cache[key] = kern
  return kern

def get_kernel(si: ScheduleItem, device: str, opts_key: tuple | None = None) -> LoadedKernel:
  """si's kernel compiled for `device` and loaded (cached per AST, target and the opts settings; opts_key: settings.opts_key()
  when the caller has it)."""
  target = target_of(device)
  key = (si.ast, target, *(opts_key or settings.opts_key()))
  # (two devices of one target, NV:0 and NV:1, share the compile but each loads the program into its own memory)
  if (kern := _kernel_cache.get(key)) is not None:
    kern.last_use = _runs   # (the LRU's stamp: _cache_put)
    if kern.device == device: return kern
    if (other := _loaded.get((key, device))) is not None: return other
    other = _loaded[(key, device)] = LoadedKernel(kern.compiled, open_device(device).program(kern.name, kern.compiled.binary), kern.ast, device)
    _loaded_devices.add(device)
    return other
  dev = open_device(device)
  opts = None
  # (BEAM times candidate opts at concrete sizes: a kernel of Variable sizes keeps the default opts)
  if (width := int(key[3] or 0)) > 0 and key[2] != "1" and not si.var_vals:
    if profile.ENABLED:
      with profile.span(f"BEAM {si.name}", cat="beam", args={"width": width, "device": device}): opts = beam_search_for(si, dev, width)
    else: opts = beam_search_for(si, dev, width)
  if profile.ENABLED:
    with profile.span(f"compile {si.name}", cat="compile", args={"device": device}) as a:
      ck = compile_kernel(si.ast, target, opts, name=si.name)
      a.update(src_bytes=len(ck.src), binary_bytes=len(ck.binary), opts=[str(o) for o in ck.applied_opts])
  else: ck = compile_kernel(si.ast, target, opts, name=si.name)
  return _cache_put(key, LoadedKernel(ck, dev.program(ck.name, ck.binary), si.ast, device))

def prebuild(items: list[ScheduleItem], opts_key: tuple, debug: int) -> int:
  """Build together the kernels of `items` that no cache holds yet (compiler/pipeline.py compile_kernels: their C
  compiler processes run side by side on the cores), before the first of them runs; returns how many were built. A cold
  start (the first step of a training loop: dozens of new kernels) then waits for the slowest compile of each batch, not
  for their sum. What get_kernel would do differently is left to it: BEAM (it times candidates), DEBUG>=7, VIZ and
  PROFILE (per-kernel records), a kernel whose build fails (built again there, so the error comes where it always did).
  COMPILE_WORKERS=1 turns it off: each kernel is built by get_kernel when it first runs.

  >>> import os; old = os.environ.get("COMPILE_WORKERS"); os.environ["COMPILE_WORKERS"] = "2"
  >>> from frontend import Tensor
  >>> x = Tensor([1.0, 2.0]).realize()
  >>> prebuild(create_schedule([(x + 17.25).lazydata, (x * 17.25).lazydata]), settings.opts_key(), 0)
  2
  >>> _ = os.environ.pop("COMPILE_WORKERS") if old is None else os.environ.update(COMPILE_WORKERS=old)
  """
  if int(opts_key[1] or 0) > 0 or debug >= 7 or VIZ or profile.ENABLED: return 0
  todo: dict[tuple, tuple[ScheduleItem, str]] = {}
  targets: dict = {}   # device -> its Target (asked once per device)
  for si in items:
    if si.kind != "kernel": continue
    dev = (out := si.outputs[0]).device
    if (target := targets.get(dev)) is None: target = targets[dev] = target_of(dev)
    # (a cached kernel the schedule uses is stamped now: the kernels built below must not evict it)
    if (kern := _kernel_cache.get(key := (si.ast, target, *opts_key))) is not None: kern.last_use = _runs
    elif out.max_size != 0: todo.setdefault(key, (si, dev))
  # (compile_workers asks the OS for the process's CPUs: only when there is something to build, not at every realize)
  if len(todo) < 2 or settings.compile_workers() <= 1: return 0
  built = 0
  for target in dict.fromkeys(k[1] for k in todo):
    keys = [k for k in todo if k[1] == target]
    fronts: list = []
    for k in keys:   # (the front ends here, one after another, through the same compile_kernel as get_kernel)
      try: fronts.append(compile_kernel(todo[k][0].ast, target, None, name=todo[k][0].name, assemble=False))
      except Exception as e: fronts.append(e)   # (get_kernel builds it again and raises where it runs)
    for key, ck in zip(keys, assemble_kernels(fronts, target)):
      if isinstance(ck, Exception): continue
      si, dev = todo[key]
      _cache_put(key, LoadedKernel(ck, open_device(dev).program(ck.name, ck.binary), si.ast, dev))
      built += 1
  return built

def check_var_vals(what: str, vv: dict) -> None:
  """Refuse a Variable value outside its [min, max] before it reaches a kernel: the kernel was built (buffer sizes,
  loop bounds) for that range only, so a value past it would read and write outside its buffers.

  >>> from compiler.uop import Variable
  >>> check_var_vals("kernel E_n", {Variable("n", 1, 8): 9})
  Traceback (most recent call last):
  ValueError: kernel E_n: Variable 'n' = 9 is outside its range [1, 8]
  """
  for v, x in vv.items():
    name, lo, hi = v.arg
    if not lo <= x <= hi: raise ValueError(f"{what}: Variable {name!r} = {x} is outside its range [{lo}, {hi}]")

@dataclass
class ExecItem:
  """One launch (or copy) with its buffers bound: what the JIT records and replays."""
  kind: str                 # kernel | copy
  kernel: LoadedKernel | None
  bufs: list[Buffer]        # outputs first
  fresh_out: bool = True    # bufs[0] was allocated for this launch (False: in-place assign targets)
  nout: int = 1             # how many of bufs are outputs (an optimizer update fused with its moments writes three)
  var_vals: dict | None = None   # {Variable: value} of a kernel with symbolic sizes (a TinyJit replay sets new values)
  def vals(self) -> tuple[int, ...]:
    """The kernel's integer arguments: its Variables' values in the order the kernel takes them."""
    if not (vars_ := self.kernel.compiled.vars): return ()
    vv = self.var_vals or {}
    missing = [v.arg[0] for v in vars_ if v not in vv]
    if missing: raise RuntimeError(f"kernel {self.kernel.name}: no value for Variable(s) {', '.join(missing)}")
    check_var_vals(f"kernel {self.kernel.name}", {v: vv[v] for v in vars_})
    return tuple(vv[v] for v in vars_)
  def run(self, debug: int | None = None) -> float:
    """Launch (or copy); returns the kernel's seconds. debug: debug_level(), when the caller read it already."""
    if self.kind == "copy":
      dst, src = self.bufs
      if profile.ENABLED: st = profile.now_us()
      nbytes, how = dst.nbytes, "host"   # the tensor's bytes: a packed product's buffer has padding past them
      if nbytes and src.device != dst.device:   # two devices: the source's device-to-device copy where it has one
        how = copy_between(Device[dst.device], dst.raw, Device[src.device], src.raw, nbytes)
      elif nbytes:
        data = np.empty(nbytes, np.uint8)
        Device[src.device].allocator.copyout(memoryview(data), src.raw)
        Device[dst.device].allocator.copyin(dst.raw, memoryview(data))
      GlobalCounters.global_mem += nbytes
      if (debug_level() if debug is None else debug) >= 2:
        print(f"{dst.device:6s} copy   from {src.device}: {nbytes / 1e6:.3f} MB moved ({how})", file=sys.stderr)
      if profile.ENABLED:
        profile.add(f"copy {src.device} -> {dst.device}", dst.device, st, profile.now_us() - st, "copy", {"bytes": nbytes, "path": how})
      return 0.0
    ck, bufs = self.kernel, self.bufs
    if profile.ENABLED: st = profile.now_us()
    et = (ck.program(*[b.raw for b in bufs], **ck.launch_kwargs, vals=self.vals(), wait=True) if ck.compiled.vars else
          ck.program(*[b.raw for b in bufs], **ck.launch_kwargs, wait=True)) or 0.0
    GlobalCounters.kernel_count += 1
    GlobalCounters.global_ops += ck.ops
    GlobalCounters.global_mem += (moved := sum([b.nbytes for b in bufs]))
    GlobalCounters.time_sum_s += et
    if profile.ENABLED: profile.kernel(bufs[0].device, ck.name, st, et, kernel_args(self))
    if (debug_level() if debug is None else debug) >= 2:
      print(f"{bufs[0].device:6s} kernel {GlobalCounters.kernel_count:4d} {ck.name:30s} global {ck.global_size!s:18s} "
            f"{et * 1e6:9.1f} us  {ck.ops / max(et, 1e-9) / 1e9:7.2f} GFLOP/s  {moved / 1e6:8.3f} MB moved  "
            f"live {GlobalCounters.mem_used / 1e6:.2f} MB (peak {GlobalCounters.mem_peak / 1e6:.2f})", file=sys.stderr)
    return et

def kernel_args(ei: ExecItem) -> dict:
  """What a kernel run's trace event carries: sizes, FLOPs, bytes."""
  return {"global_size": list(ei.kernel.global_size), "launch": {k: list(v) if isinstance(v, tuple) else v for k, v in ei.kernel.launch_kwargs.items()},
          "flops": ei.kernel.ops, "bytes": sum(b.nbytes for b in ei.bufs)}

_runs = 0
def schedule_runs() -> int:
  """How many times run_schedule has started: a lazy graph changes (bases get buffers, drop their sources) only then."""
  return _runs

def run_schedule(items: list[ScheduleItem], debug: int | None = None) -> None:
  """Run a schedule: every item's buffers and kernel first, then the launches one after another (debug: debug_level(),
  when the caller read it already). The host work of an item (a buffer from the allocator, the kernel from its cache)
  is done before the first launch, not between two: a kernel streaming its buffers leaves the host's caches cold, and
  the same Python run after it costs several times what it costs before it (bench/matmul_split.py --phases: a 512x512
  product's launch came ~25 us after its pack's, now ~2 us).
  An item's error at this stage (a compile error, out of memory, a write the capture refuses) is raised after the
  items before it ran, as when each item was built and run in turn."""
  global _runs
  _runs += 1
  rec = capturing()   # while the JIT (or export) captures, every ExecItem run is recorded
  opts_key = settings.opts_key()   # (the env, read once for the whole schedule)
  if debug is None: debug = debug_level()
  if len(items) > 1: prebuild(items, opts_key, debug)
  todo: list[tuple[ScheduleItem, ExecItem]] = []
  planned: dict[LazyBuffer, Buffer] = {}   # the outputs of the items before this one (not run yet: no .buffer)
  try:
    for si in items:
      out = si.outputs[0]
      # (out.max_size, without its two calls for a plain shape)
      if (max_size := math.prod(out.shape)).__class__ is not int: max_size = out.max_size
      nbytes = si.alloc_nbytes or max_size * out.dtype.itemsize   # (symbolic sizes: room for the Variables' maxima)
      what = lambda si=si, out=out: f"{'Tensor.empty' if si.kind == 'empty' else si.name} (output {out.shape} {out.dtype})"
      if si.kind == "empty":
        out.buffer = Buffer(out.device, nbytes, what)
        if out.viewed: lazy.mark_viewed(out.buffer)
        continue
      if si.kind == "copy":
        src = si.inputs[0]
        ei = ExecItem("copy", None, [Buffer(out.device, nbytes, what), src.buffer if src.buffer is not None else planned.get(src)])
      else:
        dev = out.device
        for b in si.inputs:
          if b.device != dev: raise RuntimeError(f"kernel {si.name}: input on {b.device}, output on {dev}")
        if si.assign_targets and rec is not None and rec.refuse_write is not None: rec.refuse_write(si.name)
        outs = ([t.buffer if t.buffer is not None else planned.get(t) for t in si.assign_targets] if si.assign_targets else
                [Buffer(dev, nbytes, lambda: f"kernel {what()}")])
        if max_size == 0:
          for o, b in zip(si.outputs, outs):
            o.buffer = b
            if o.viewed: lazy.mark_viewed(b)   # (a viewed base's buffer keeps the mark: compiler/lazy.py mark_viewed)
          continue
        # get_kernel may raise (a compile error): then nothing of this item is marked realized
        ins = [b.buffer if b.buffer is not None else planned.get(b) for b in si.inputs]
        ei = ExecItem("kernel", get_kernel(si, dev, opts_key), outs + ins,
                      not si.assign_targets, len(outs), dict(si.var_vals) if si.var_vals else None)
      for o, b in zip(si.outputs, ei.bufs): planned[o] = b
      todo.append((si, ei))
  finally:   # (the launches; after an item's error, those of the items before it, and the error is raised after them)
    for si, ei in todo:
      ei.run(debug)
      for o, b in zip(si.outputs, ei.bufs):
        o.buffer = b
        if o.viewed: lazy.mark_viewed(b)   # (a viewed base's buffer keeps the mark: compiler/lazy.py mark_viewed)
      # a snapshot of a value from before the capture (an assign overwrites what it read) is not the function's work
      if rec is not None and not ((out := si.outputs[0]).id < rec.first_id and out in snapshots):
        rec.append(ei)
        for o, t in zip(si.outputs, si.assign_targets or ()): rec.written += [weakref.ref(o), weakref.ref(t)]

def simd_lanes(device: str) -> int:
  """float32 lanes of the device's kernel vectors; 0 where products are not packed (GPUs, NOOPT=1)."""
  t = target_of(device)
  if t.gpu or settings.noopt(): return 0
  return t.simd_bytes // 4

# *** prepared launches: a repeated graph runs its kernels again without scheduling them ***
# A loop `for _: c = (a @ b).realize()` (a user timing a product, bench/run.py) or an eager step builds graphs of one
# structure again and again. The schedule cache answers them with the same kernels (compiler/schedule.py _GraphKey), but
# each realize still binds the schedule, packs its products, looks up each kernel and walks run_schedule's general loop:
# Python work between two launches, which after a kernel (the caches cold) cost ~100 us at N=512. So a schedule of
# kernels only (no assign, copy, empty, symbolic size or check) is kept beside its cache entry as launches over numbered
# buffers (_Prepared), by the settings that chose its kernels; a graph of that key runs them with fresh output buffers.
# Everything else the plan was derived from is checked at every hit, so it is never stale: each device's Target, each
# product's packing plan (compiler/pack.py, under its tuning constants) and each kernel are still the ones cached.
LAUNCH_CACHE = True   # off: every realize schedules (bench/realize_host.py --ab compares the two)
launch_stats = {"hits": 0, "prepared": 0}   # realizes run prepared; schedules prepared

class _Prepared:
  """A schedule's launches as numbers: `steps` (kernel (a weak reference: the kernel cache owns it, and an evicted
  kernel must free its program, not live on in the schedule cache's entries), its cache key, device, output bytes, the
  graph node the output is (-1: a scratch, as a packed operand), inputs: a graph node's buffer (>= 0) or the output of
  step -1-i), in order;
  `targets` ((device, Target) the kernels were built for) and `packs` ((ast, lanes, plan) of each product: its packing
  plan, compiler/pack.py, which its key under the tuning constants of the moment must still give)."""
  __slots__ = ("packs", "steps", "targets")
  def __init__(self, steps: tuple, targets: tuple, packs: tuple): self.steps, self.targets, self.packs = steps, targets, packs
  def valid(self, opts_key: tuple) -> bool:
    """Are the Targets, packing plans and kernels it holds still those the caches hold (a test or a setting may have
    emptied or changed them)?"""
    for dev, t in self.targets:
      if _devices._targets.get(dev) is not t: return False
    plans, plan_key = pack._plans, pack.plan_key   # (the key with the constants as they are now)
    for ast, lanes, plan in self.packs:
      if plans.get(plan_key(ast, lanes), _MISSING) is not plan: return False
    for kref, kkey, dev, *_ in self.steps:
      if (kern := kref()) is None or ((got := _kernel_cache.get(kkey)) is not kern and (got is None or _loaded.get((kkey, dev)) is not kern)):
        return False
      got.last_use = _runs   # (they run now: the LRU must not evict a loop's kernels for never asking get_kernel)
    return True
_MISSING = object()

def _prepare(pre: list[ScheduleItem], items: list[ScheduleItem], index: dict[LazyBuffer, int], opts_key: tuple,
             lanes: dict[str, int]) -> _Prepared | None:
  """The launches of `items` (the schedule `pre` with its products packed, just run) as numbers over the graph's bases
  (`index`, the graph key's numbering); None when the schedule has anything but plain kernels."""
  made: dict[LazyBuffer, int] = {}   # output -> its step
  steps, targets = [], {}
  for si in pre:
    if si.kind != "kernel" or si.assign_targets or si.var_vals: return None
  for si in items:
    if si.kind != "kernel" or si.assign_targets or si.var_vals or len(si.outputs) != 1: return None
    out, dev = si.outputs[0], si.outputs[0].device
    if (max_size := math.prod(out.shape)).__class__ is not int or max_size == 0: return None
    ins = []
    for b in si.inputs:
      if (j := made.get(b)) is not None: ins.append(-1 - j)
      elif b.buffer is not None and (i := index.get(b)) is not None: ins.append(i)   # (a base realized before)
      else: return None
    if (kern := _kernel_cache.get(kkey := (si.ast, targets.setdefault(dev, target_of(dev)), *opts_key))) is None: return None
    if kern.device != dev and (kern := _loaded.get((kkey, dev))) is None: return None
    made[out] = len(steps)
    steps.append((weakref.ref(kern), kkey, dev, si.alloc_nbytes or max_size * out.dtype.itemsize, index.get(out, -1), tuple(ins),
                  f"kernel {si.name} (output {out.shape} {out.dtype})"))
  packs = tuple((si.ast, n, pack._plans.get(pack.plan_key(si.ast, n))) for si in pre
                if (n := lanes.get(si.outputs[0].device, 0)) >= 8 and pack.packs_item(si))
  return _Prepared(tuple(steps), tuple(targets.items()), packs)

def _run_prepared(p: _Prepared, nodes: list[LazyBuffer], debug: int) -> None:
  """Run a prepared schedule for the graph whose bases (by number) are `nodes`: run_schedule's work for those items,
  in its order (every buffer first; after an allocation's error, the launches before it, then the error)."""
  global _runs
  _runs += 1
  launch_stats["hits"] += 1
  _schedule.cache_stats["hits"] += 1   # (the graph was answered from the schedule cache, further on)
  eis: list[ExecItem] = []
  try:
    for kref, _, dev, nbytes, _, ins, what in p.steps:   # (valid() found each kernel in the caches: alive)
      eis.append(ExecItem("kernel", kref(), [Buffer(dev, nbytes, what)] + [nodes[i].buffer if i >= 0 else eis[-1 - i].bufs[0] for i in ins]))
  finally:
    for ei, step in zip(eis, p.steps):
      ei.run(debug)
      if (i := step[4]) >= 0:
        (o := nodes[i]).buffer = ei.bufs[0]
        if o.viewed: lazy.mark_viewed(ei.bufs[0])
        o.forget_graph()

def realize(lbs: list[LazyBuffer], live: Callable[[], Iterable[LazyBuffer]] | None) -> None:
  """Compute `lbs` now. live: what the program still holds (frontend/tensor.py live_lazydata), which a schedule that
  overwrites a buffer must not leave reading the new value (compiler/schedule.py create_schedule); the Tensor passes it,
  so this layer never imports the one above. A graph of a structure realized before with plain kernels runs them again
  prepared (LAUNCH_CACHE, _Prepared).

  >>> from frontend import Tensor
  >>> t = Tensor([1.0]) + 1; realize([t.lazydata], None); t.lazydata.realized
  True
  """
  key = None
  # (prepared launches skip what they can't replay: index checks, a capture recording ExecItems, DEBUG>=3's and VIZ's
  # explanation, the profiler's spans)
  # (the weak dictionaries' own tables: their len() is a Python call; a key whose removal is pending counts, as pending)
  if LAUNCH_CACHE and not _checks._pending.data and not _checks._failed.data and capturing() is None and not VIZ and not profile.ENABLED:
    if not (outs := [lb for lb in lbs if (lb._base or lb).buffer is None]): return   # (nothing to compute, nothing to check)
    if (key := graph_key(outs, live)) is not None and not key.assigns and (entry := cached_entry(key)) is not None:
      debug = debug_level()
      if debug < 3 and (p := entry.prepared.get(opts_key := settings.opts_key())) is not None and p.valid(opts_key):
        return _run_prepared(p, key.nodes, debug)
  # index range checks of the graph: their kernels run with it, then they are read. With checks pending (and no failed
  # value to find), the schedule's own walk names the graph's bases (nodes) and they are looked up there, no walk here
  nodes: set | None = set() if any_pending() else None
  checks = Checks(lbs, walk=nodes is None)
  lanes: dict[str, int] = {}   # (asked per kernel; the settings it reads are read once per realize, as run_schedule's)
  def lanes_of(device: str) -> int: return lanes[device] if device in lanes else lanes.setdefault(device, simd_lanes(device))
  pre: list[ScheduleItem] = []   # (the schedule before its products were packed: what a prepared one checks)
  def schedule() -> list[ScheduleItem]:
    # (the graph key made above serves when the checks add no flags: the same outputs)
    pre[:] = create_schedule(lbs + checks.flags, live, nodes, key if not checks.items else None)
    if not profile.ENABLED: return pack_matmuls(pre, lanes_of)
    with profile.span("schedule", args={"outputs": len(lbs)}) as a:
      its = pack_matmuls(pre, lanes_of)
      a["kernels"] = sum(si.kind == "kernel" for si in its)
    return its
  items = schedule()
  # the schedule may realize more than lbs' graph (the readers an assign would leave stale: the loss of
  # `loss.backward(); opt.step()`): the checks guarding those values run too. Their flags are realized after this
  # schedule when they read nothing it overwrites (the indices: labels), else in it, scheduled again with them
  outs = [b for si in items for b in si.outputs]
  extra = checks.pending_in(nodes, outs) if nodes is not None else checks.more(outs)
  if extra.items and not _reads_none_of(extra.flags, items):
    checks.items += extra.items
    extra.items = []
    items = schedule()
  debug = debug_level()
  if VIZ or debug >= 3:
    ex = explain_schedule(items, lbs)
    if debug >= 3 and items: print(format_schedule(ex), file=sys.stderr)
    if VIZ and items: vizdata.add_realize(ex, items)
  run_schedule(items, debug)
  # (after the run: its kernels are built; only when nothing joined the graph's own schedule)
  if key is not None and not key.assigns and debug < 3 and not checks.items and not extra.items and \
     (entry := cached_entry(key)) is not None and (prep := _prepare(pre, items, key.index, opts_key := settings.opts_key(), lanes)):
    entry.prepared[opts_key] = prep
    launch_stats["prepared"] += 1
  # once realized, a base forgets how it was computed so the graph above it can be freed
  for si in items:
    for b in si.outputs: b.forget_graph()
  # read also during TinyJit capture (the capture run is a real run); a replay reads the recorded flags (jit.py)
  checks.verify(lambda lb: _copyout(lb.base, np.bool_), lambda lb: read_back(lb, live))
  if checks.items and (rec := capturing()) is not None: rec.checks += [(lb.base.buffer, msg, exc) for lb, msg, exc, *_ in checks.items]
  if extra.items:
    realize(extra.flags, live)
    extra.verify(lambda lb: _copyout(lb.base, np.bool_), lambda lb: read_back(lb, live))
    if (rec := capturing()) is not None: rec.checks += [(lb.base.buffer, msg, exc) for lb, msg, exc, *_ in extra.items]

def _reads_none_of(lbs: list[LazyBuffer], items: list[ScheduleItem]) -> bool:
  """Does computing `lbs` after `items` ran read what it would have read before: no buffer an item writes in place
  (an assign's target), no pending assign of its own? (A conservative walk: it goes through values the items will
  store, which would then be read as stored.)"""
  written = {id(t.buffer) for si in items for t in si.assign_targets or () if t.buffer is not None}
  seen: set = set()
  stack = [lb._base or lb for lb in lbs]
  while stack:
    b = stack.pop()
    if b in seen: continue
    seen.add(b)
    if b.buffer is not None:
      if id(b.buffer) in written: return False
      continue
    if b.op is Ops.ASSIGN: return False
    stack.extend(s._base or s for s in b.srcs)
  return True

def read_back(lb: LazyBuffer, live: Callable[[], Iterable[LazyBuffer]] | None = None) -> np.ndarray:
  """lb's values on the host, flat, in its own dtype: realized first when it is not (a view or an unrealized value: as
  a dense copy); live as for realize().

  >>> from frontend import Tensor
  >>> read_back((Tensor([1, 2]) * 3).lazydata).tolist()
  [3, 6]
  """
  c = lb if lb.realized and not lb.is_view else lb.contiguous()
  if not c.realized: realize([c], live)
  return _copyout(c, np.dtype(to_np(c.dtype)))
