"""HCQ core: what every hardware-command-queue device shares (signals, queue builders, programs, graph replay).

A backend (hcqrt/nv, hcqrt/cpu/hcq.py, ...) supplies the encodings; this module keeps the bookkeeping:
  - `Signal`: a 64-bit timeline value plus timestamps in memory both the device and the host see.
  - `HWQueue`: a builder of commands (wait / exec / copy / signal / timestamp), submitted to a device. A
    built queue keeps where each command's operands live, so it can be patched (update_*) and resubmitted.
  - `HCQProgram` / `KernArgs`: a loaded kernel and its argument block (buffer pointers and ints).
  - `GraphReplay`: launches and copies -> one prebuilt queue per engine; replays patch buffers/ints in place.
  - `HCQDevice`: what every HCQ device owns the same way (NV and AMD subclass it): the signal pool and the timeline,
    programs launched behind it, graphs, the persistent-memory scope a graph allocates in, fault checks and recovery.

  >>> from hcqrt.cpu.hcq import CPUHCQDevice
  >>> dev = CPUHCQDevice(); s = dev.new_signal()
  >>> _ = dev.hw_compute_queue().signal(s, 3).submit(dev); s.wait(3); s.value
  3
"""
from __future__ import annotations
import collections, contextlib, ctypes, struct, time, weakref
from dataclasses import dataclass
from typing import Any, TypeVar
from collections.abc import Callable, Iterator, Sequence
from hcqrt.interface import GraphCopy, GraphExec, GraphItem, GraphTimestamp, peer_ok

DEFAULT_TIMEOUT_S = 30.0
FAULT_POLL_S = 0.01   # how often a waiting Signal asks its device whether a queue faulted

class SignalTimeout(TimeoutError):
  """A signal did not reach a value in time (message names device, signal, queue and last value)."""

class Signal:
  """A timeline: u64 value at +0, the release timestamp at +8, a scratch word at +16 and the timestamp written
  by `HWQueue.timestamp` at +24 (ns). `base` is the host address, `va` the device address of the same bytes."""
  SIZE = 32
  _release: Callable[[Signal], None] | None = None   # (what a freed signal reads: free pops the instance's own)
  def __init__(self, device: HCQDevice, base: int, va: int, name: str = "signal", release: Callable[[Signal], None] | None = None):
    self.device, self.base, self.va, self.name = device, base, va, name
    self._words = (ctypes.c_uint64 * 4).from_address(base)
    self._release = release
    self.freed = False   # the slot went back to its pool (reached() then answers from this record, not the slot)
    self.last_queue: str | None = None     # which queue last promised to signal it, and the value (for errors)
    self.last_promised: int | None = None

  @property
  def value(self) -> int: return self._words[0]
  @value.setter
  def value(self, v: int) -> None: self._words[0] = v
  def reached(self, value: int) -> bool:
    """Has it reached `value`? A freed signal counts as reached: every path that frees a graph signal (the one kind a
    deferred free waits on besides the timeline, which is never freed) does so only once it reached its last replay's
    end (_release_graph, multi_graph._free_graph_signals), and its slot, once handed out again, holds another's value."""
    return self.freed or self._words[0] >= value
  def complete_promised(self) -> None:
    """Write from the CPU the value a queue last promised: the device dropped that work (recovery after a fault)."""
    if self.last_promised is not None and self.value < self.last_promised: self.value = self.last_promised
  @property
  def timestamp(self) -> int:
    """ns time written by the last `timestamp()` command on this signal."""
    return self._words[3]
  @property
  def release_timestamp(self) -> int: return self._words[1]
  @property
  def timestamp_va(self) -> int: return self.va + 16

  def wait(self, value: int, timeout_s: float | None = None) -> None:
    """Block until value >= `value`; raises SignalTimeout after `timeout_s` (default 30 s)."""
    if self.reached(value): return
    timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
    deadline = time.perf_counter() + timeout_s
    # a device that can see faults (NV: RM's error notifiers) is asked every FAULT_POLL_S: a faulted queue never
    # signals, and its error should not wait for the timeout
    check, next_check = self.device.raise_if_faulted, 0.0
    spin = 0
    while not self.reached(value):   # (a freed signal's slot holds another owner's value: Signal.reached)
      now = time.perf_counter()
      if now > deadline: raise self.timed_out(value, timeout_s)
      spin += 1
      if spin > 100:
        if now >= next_check: check(); next_check = now + FAULT_POLL_S
        time.sleep(0.0002 if spin < 2000 else 0.002)   # spin briefly (fast kernels), then back off

  def timed_out(self, value: int, waited_s: float) -> SignalTimeout:
    """The error for a wait of `waited_s` seconds that `value` never came to: it names the device, the signal, the queue
    that promised the value and the last value seen. Work that was promised and is stuck would block every later wait,
    so the device recovers first (and the message says so)."""
    seen = self._words[0]   # (before recovering: a recovery writes the promised values from the CPU)
    by = f"; it was last promised value {self.last_promised} by {self.last_queue}" if self.last_queue else "; no queue was asked to signal it"
    if self.last_promised is not None and self.last_promised >= value: by += f"; {self.device.recover()}"
    return SignalTimeout(f"{self.device}: timed out after {waited_s:g} s waiting for {self.name} at {self.va:#x} to reach {value}; "
                         f"last completed value is {seen}{by}")

  def free(self) -> None:
    # one dict.pop (atomic under the GIL), not a test then a reset: two frees at once (two devices' new_signal reaping
    # one SignalPool.free_when entry, or a finalizer freeing it again from inside the first) give the slot back once,
    # not twice (a slot listed twice goes to two owners)
    if (release := self.__dict__.pop("_release", None)) is not None: self.freed = True; release(self)

  def __repr__(self) -> str: return f"<Signal {self.name} va={self.va:#x} value={self.value}>"

def take_reached(later: collections.deque) -> list:
  """Pop every (item, ((signal, value), ...)) entry of `later`; return the items whose values are all reached and put the
  others back. Only popleft and extend: finalizers may append meanwhile, on any thread (free_persistent).

  >>> class S:
  ...   def __init__(self, v): self.v = v
  ...   def reached(self, v): return self.v >= v
  >>> q = collections.deque([("a", ((S(2), 2),)), ("b", ((S(1), 2),))])
  >>> take_reached(q), [item for item, _ in q]
  (['a'], ['b'])
  """
  keep, done = [], []
  while later:
    item, after = later.popleft()
    (done if all(s.reached(v) for s, v in after) else keep).append((item, after))
  later.extend(keep)
  return [item for item, _ in done]

class SignalPool:
  """Hands out Signal slots from one host-visible device buffer (base host address, base device address, bytes).
  `signal_cls` lets a backend read its timestamps in its own clock (AMD: 100 MHz ticks)."""
  signal_cls: type[Signal] = Signal
  def __init__(self, device: HCQDevice, base: int, va: int, nbytes: int):
    self.device, self.base, self.va = device, base, va
    self.free_slots = list(range(nbytes // Signal.SIZE - 1, -1, -1))
    self.count = 0
    # signals to free once a GPU is past its last use of them: (signals, ((signal, value), ...)) freed when every signal
    # of the conditions has reached its value (free_when; checked by new)
    self.later: collections.deque[tuple[tuple[Signal, ...], tuple[tuple[Signal, int], ...]]] = collections.deque()
  def free_when(self, sigs: Sequence[Signal], conds: Sequence[tuple[Signal, int]]) -> None:
    """Free `sigs` once every (signal, value) of `conds` is reached: a queue may still wait on them or write them until
    then. Only appends to a deque (no wait, no lock), so a finalizer may call it on any thread; the next `new` frees.
    The same entry may go to several pools (signals of several devices): whichever reaps it first frees them all."""
    self.later.append((tuple(sigs), tuple(conds)))
  def _reap(self) -> None:
    keep = []
    while self.later:
      sigs, conds = self.later.popleft()
      if all(s._release is None for s in sigs): continue   # (freed already, through another pool)
      # every condition is read before any signal is freed: a freed slot may be handed out again at once
      if all(c.reached(v) for c, v in conds):
        for s in sigs: s.free()
      else: keep.append((sigs, conds))
    self.later.extend(keep)
  def new(self, value: int = 0, name: str | None = None) -> Signal:
    if self.later: self._reap()
    if not self.free_slots: raise MemoryError(f"{self.device}: out of signals ({self.count} in use)")
    i = self.free_slots.pop()
    self.count += 1
    s = self.signal_cls(self.device, self.base + i * Signal.SIZE, self.va + i * Signal.SIZE, name or f"signal{i}", self._release)
    ctypes.memset(s.base, 0, Signal.SIZE)
    s.value = value
    return s
  def _release(self, s: Signal) -> None:
    self.free_slots.append((s.base - self.base) // Signal.SIZE); self.count -= 1

class KernArgs:
  """A kernel's argument block in device-visible memory: buffers first, then integer variables, at the offsets
  the code object declares. `params` = [(offset, size)] in argument order; `view` is the writable block."""
  def __init__(self, view: memoryview, params: Sequence[tuple[int, int]], nbufs: int, va: int = 0, extra: Any = None):
    self.view, self.params, self.nbufs, self.va, self.extra = view, params, nbufs, va, extra
  def set_buffer(self, i: int, addr: int) -> None:
    off, size = self.params[i]
    if size != 8: raise TypeError(f"argument {i} is {size} bytes, not a pointer")
    struct.pack_into("<Q", self.view, off, addr)
  def set_int(self, j: int, v: int) -> None:
    off, size = self.params[self.nbufs + j]
    struct.pack_into({4: "<i", 8: "<q"}[size] if v < 0 else {4: "<I", 8: "<Q"}[size], self.view, off, v)
  def get(self, i: int) -> int:
    off, size = self.params[i]
    return struct.unpack_from({4: "<I", 8: "<Q", 2: "<H", 1: "<B"}[size], self.view, off)[0]

class HWQueue:
  """A command builder. Every method returns the queue, so commands chain; `submit(device)` sends them.

  Commands of one queue take effect in order: a launch sees everything the commands before it wrote. Where the
  hardware would overlap consecutive launches, the backend puts a barrier between them (NV: WAIT_FOR_IDLE).

  Each command is remembered (index = order of calls) with the places its operands live, so a queue can be
  changed after it is built: `update_wait/update_signal(i, signal=, value=)`, `update_exec(i, global_size=,
  local_size=)`, `update_copy(i, dst=, src=)`; kernel arguments are patched through their KernArgs.
  """
  def __init__(self):
    self.cmds: list[tuple[str, Any]] = []     # (kind, backend-specific patch record)
    self.name = type(self).__name__

  # ---- builders ----
  def wait(self, signal: Signal, value: int) -> HWQueue:
    self.cmds.append(("wait", self._wait(signal, value))); return self
  def signal(self, signal: Signal, value: int) -> HWQueue:
    self.cmds.append(("signal", self._signal(signal, value)))
    signal.last_queue, signal.last_promised = self.name, value
    return self
  def timestamp(self, signal: Signal) -> HWQueue:
    self.cmds.append(("timestamp", self._timestamp(signal))); return self
  def exec(self, prog: HCQProgram, args: KernArgs, global_size: Sequence[int], local_size: Sequence[int]) -> HWQueue:
    g, l = _dims(global_size), _dims(local_size)
    self.cmds.append(("exec", self._exec(prog, args, g, l))); return self
  def copy(self, dst: int, src: int, nbytes: int) -> HWQueue:
    """Copy `nbytes` from device address `src` to `dst`."""
    if nbytes < 0: raise ValueError(f"copy of {nbytes} bytes")
    self.cmds.append(("copy", self._copy(dst, src, nbytes))); return self

  # ---- patching ----
  def _cmd(self, i: int, kind: str) -> Any:
    if not 0 <= i < len(self.cmds) or self.cmds[i][0] != kind:
      raise IndexError(f"{self.name}: command {i} is not a {kind} (commands: {[k for k, _ in self.cmds]})")
    return self.cmds[i][1]
  def update_wait(self, i: int, signal: Signal | None = None, value: int | None = None) -> HWQueue:
    self._update_sem(self._cmd(i, "wait"), signal, value); return self
  def update_signal(self, i: int, signal: Signal | None = None, value: int | None = None) -> HWQueue:
    self._update_sem(self._cmd(i, "signal"), signal, value)
    if signal is not None or value is not None:
      s = signal or self._cmd(i, "signal").get("signal")
      if s is not None: s.last_queue, s.last_promised = self.name, value
    return self
  def update_exec(self, i: int, global_size: Sequence[int] | None = None, local_size: Sequence[int] | None = None) -> HWQueue:
    self._update_exec(self._cmd(i, "exec"), _dims(global_size) if global_size else None, _dims(local_size) if local_size else None)
    return self
  def update_copy(self, i: int, dst: int | None = None, src: int | None = None) -> HWQueue:
    self._update_copy(self._cmd(i, "copy"), dst, src); return self

  def submit(self, device: HCQDevice) -> HWQueue:
    self._submit(device); return self
  def bind(self, device: HCQDevice) -> None:
    """Place the built commands in device memory for good (a graph's queues: a replay then rewrites them in place);
    a backend whose submit copies nothing (the CPU's) has nothing to do."""

  # ---- backend hooks ----
  def _wait(self, signal: Signal, value: int) -> Any: raise NotImplementedError(f"{self.name} cannot wait")
  def _signal(self, signal: Signal, value: int) -> Any: raise NotImplementedError(f"{self.name} cannot signal")
  def _timestamp(self, signal: Signal) -> Any: raise NotImplementedError(f"{self.name} cannot write timestamps")
  def _exec(self, prog: HCQProgram, args: KernArgs, g: tuple[int, int, int], l: tuple[int, int, int]) -> Any: raise NotImplementedError(f"{self.name} cannot launch kernels")
  def _copy(self, dst: int, src: int, nbytes: int) -> Any: raise NotImplementedError(f"{self.name} cannot copy")
  def _update_sem(self, rec: Any, signal: Signal | None, value: int | None) -> None: raise NotImplementedError
  def _update_exec(self, rec: Any, g, l) -> None: raise NotImplementedError
  def _update_copy(self, rec: Any, dst: int | None, src: int | None) -> None: raise NotImplementedError
  def _submit(self, device: HCQDevice) -> None: raise NotImplementedError

def _dims(x: Sequence[int]) -> tuple[int, int, int]:
  t = tuple(int(v) for v in x) + (1,) * (3 - len(x))
  if len(t) != 3 or min(t) < 1: raise ValueError(f"launch dimensions {tuple(x)} must be 1 to 3 positive ints")
  return t   # type: ignore[return-value]

class HCQProgram:
  """A loaded kernel. Subclasses set `self.params` [(offset, size)] and implement `fill_kernargs`.
  Calling it launches on the device's compute queue behind the timeline and returns seconds when `wait`."""
  def __init__(self, device: HCQDevice, name: str):
    self.device, self.name = device, name
    self.params: list[tuple[int, int]] = []

  def fill_kernargs(self, bufs: Sequence[Any], vals: Sequence[int] = (), persistent: bool = False) -> KernArgs:
    """The argument block for one launch; `persistent` blocks outlive the per-launch ring (a prebuilt graph's)."""
    raise NotImplementedError

  def __call__(self, *bufs: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] = (1, 1, 1), threads: int = 1,
               vals: Sequence[int] = (), wait: bool = False) -> float | None:
    """Launch (interface.Program; `threads` is the CPU's and ignored here)."""
    dev = self.device
    args = self.fill_kernargs(bufs, vals)
    st, en = dev.timing_signals()
    q = dev.after_timeline(dev.hw_compute_queue())
    if wait: q.timestamp(st)
    q.exec(self, args, global_size, local_size)
    if wait: q.timestamp(en)
    dev.submit_timeline(q)
    if not wait: return None
    dev.synchronize()
    return max(0, en.timestamp - st.timestamp) / 1e9

@dataclass
class GraphPeerCopy(GraphCopy):
  """A graph copy into another device's buffer: this device's copy engine pushes into `dst` mapped here
  (HCQDevice.map_peer; peer access must be enabled for the pair)."""
  dst_dev: Any = None

@dataclass
class GraphRelease:
  """A point in a graph: once the graph signal reaches the graph's base + `step` (filled in when the graph is recorded),
  everything before it in the graph is done. Another device's graph waits on it (GraphWaitSignal)."""
  step: int = 0

@dataclass
class GraphWaitSignal:
  """The graph's later items run after `signal` reaches `value`: a semaphore wait on the queue of the next item (a signal
  of another device: mapped here, HCQDevice.map_peer_signals). The owner of the graph sets `value` before each replay."""
  signal: Signal
  value: int = 0

def _release_graph(device: HCQDevice, sig: Signal, last: list[int], blocks: list, ts_sigs: list[Signal]) -> None:
  # (ts_sigs holds the graph's own signal too, when the graph made it: MultiGraph frees the ones it hands in)
  if not blocks and not ts_sigs: return
  # the GPU may still read them until the last replay ended: its graph signal (released last in its stream) and the
  # timeline value its stream releases, the two values a replay waits for before it rewrites the graph's memory
  done = ((sig, last[0]), (device.timeline_signal, last[1])) if last[0] else ()
  # a device that frees only once the GPU is past `done` (NV, AMD) needs no wait here, and must not get one: a
  # finalizer may run on any thread, the mock GPU's own included (it would wait for itself)
  if done and not device.frees_after_gpu: sig.wait(last[0])
  if blocks: device.free_persistent(blocks, done)
  # a profiled graph's timestamp signals (and its own graph signal): free once the GPU is past its last write into
  # them; where nothing waited and the last replay may still run, a later new_signal frees them once it is (a slot
  # reused earlier would get this graph's late timestamp, or a replay's late release)
  if not device.frees_after_gpu or all(s.reached(v) for s, v in done):
    for s in ts_sigs: s.free()
  else: device.signals.free_when(ts_sigs, done)   # (freed by a later new_signal once the GPU is past)

def buf_addr(b: Any) -> int:
  """Device address of a buffer object (`.va`, or `.address` for host buffers) or an int."""
  return b if isinstance(b, int) else b.va if hasattr(b, "va") else b.address

class GraphReplay:
  """Launches and copies recorded once, replayed with one submission per engine.

  items (hcqrt/interface.py): GraphExec(program, bufs, vals, global_size, local_size), GraphCopy(dst_buf, src_buf, nbytes)
  or GraphTimestamp(signal): the device's clock once everything before it on the compute queue is done (GPU-side timing).
  Compute items and timestamps go to one compute queue, copies to one copy queue; where the engine changes, a graph-private
  signal orders them. `replay(bufs={(item, arg): buf}, vals={(item, j): v})` patches pointers/ints in place,
  bumps the signal values and submits (waiting for the previous replay first, whose memory it rewrites).

  >>> from hcqrt.cpu.hcq import CPUHCQDevice
  >>> dev = CPUHCQDevice(); g = GraphReplay(dev, []); g.replay(); dev.synchronize()
  """
  completes_on_return, clock = False, "gpu"   # (interface.Graph) replays run on the GPU after replay returns
  def __init__(self, device: HCQDevice, items: Sequence[GraphItem], timestamps: bool = False, sig: Signal | None = None):
    # sig: the graph signal, made beforehand where other graphs wait on it (MultiGraph); else the graph makes its own
    # timestamps: a timestamp command before and after each launch (the profiler's per-kernel GPU times: kernel_times())
    self.ts: dict[int, tuple[Signal, Signal]] = {}
    # (two signals per launch: a graph too big for the device's free signals goes untimed, its replays one span each)
    n_exec = sum(isinstance(it, GraphExec) for it in items)
    self.want_ts = self.timestamps = timestamps and len(device.signals.free_slots) >= 2 * n_exec + 64
    with device.persistent_scope() as blocks:
      try: self._record(device, items, sig)
      except BaseException:
        if blocks: device.free_persistent(blocks)   # nothing was submitted: the blocks are free at once
        raise
    self.submitted = False
    # the graph's argument blocks and pushbuffers go back to the device once the graph is gone and its last replay done
    # (graph signal value, device timeline value) that end the last replay ([0, 0]: never submitted)
    self._last = [0, 0]
    own = [] if sig is not None else [self.sig]   # the graph signal goes with the graph when the graph made it
    fin = weakref.finalize(self, _release_graph, device, self.sig, self._last, blocks, [s for p in self.ts.values() for s in p] + own)
    fin.atexit = False  # at exit the device goes away as a whole

  def _record(self, device: HCQDevice, items: Sequence[GraphItem], sig: Signal | None) -> None:
    self.dev, self.items = device, items
    self.sig = sig or device.new_signal(name="graph")
    self.base = 0
    self.compute, self.copyq = device.hw_compute_queue(), device.hw_copy_queue()
    self.args: dict[int, KernArgs] = {}
    self.where: dict[int, tuple[HWQueue, int]] = {}   # item -> (queue, command index)
    self.sem: list[tuple[HWQueue, int, int]] = []     # (queue, command index, offset from base) of waits/signals
    step, engine = 0, None
    # both queues first wait for the device timeline (all earlier work) ...
    self.tl_waits = [(q, len(q.cmds)) for q in (self.compute, self.copyq)]
    for q in (self.compute, self.copyq): q.wait(device.timeline_signal, 0)
    self.ext_waits: list[tuple[HWQueue, int, GraphWaitSignal]] = []   # waits whose value the graph's owner sets per replay
    # a cross-device wait goes on the queue of the item after it (that queue hands over to the other one as usual)
    nxt, later = [self.compute] * len(items), self.compute
    for i in reversed(range(len(items))):
      if isinstance(items[i], GraphCopy): later = self.copyq
      elif isinstance(items[i], (GraphExec, GraphTimestamp)): later = self.compute
      nxt[i] = later
    for i, it in enumerate(items):
      if isinstance(it, GraphRelease):   # the queue of the last item has waited for all before it: it releases the point
        q = engine or self.compute
        step += 1; it.step = step
        self.sem.append((q, len(q.cmds), step)); q.signal(self.sig, step)
        engine = q
        continue
      q = self.copyq if isinstance(it, GraphCopy) else nxt[i] if isinstance(it, GraphWaitSignal) else self.compute
      if engine is not None and q is not engine:   # hand over between engines through the graph signal
        step += 1
        self.sem.append((engine, len(engine.cmds), step)); engine.signal(self.sig, step)
        self.sem.append((q, len(q.cmds), step)); q.wait(self.sig, step)
      engine = q
      if isinstance(it, GraphExec):
        self.args[i] = it.prog.fill_kernargs(it.bufs, it.vals, persistent=True)   # the ring would recycle them under the graph
        if self.want_ts: self.ts[i] = (device.new_signal(name=f"ts{i}"), device.new_signal(name=f"te{i}")); q.timestamp(self.ts[i][0])
        self.where[i] = (q, len(q.cmds)); q.exec(it.prog, self.args[i], it.global_size, it.local_size)
        if self.want_ts: q.timestamp(self.ts[i][1])
      elif isinstance(it, GraphCopy): self.where[i] = (q, len(q.cmds)); q.copy(self._dst_addr(it, it.dst), buf_addr(it.src), it.nbytes)
      elif isinstance(it, GraphWaitSignal): self.ext_waits.append((q, len(q.cmds), it)); q.wait(it.signal, it.value)
      elif isinstance(it, GraphTimestamp): self.where[i] = (q, len(q.cmds)); q.timestamp(it.signal)
      else: raise TypeError(f"graph item {i}: {it!r} is not a GraphExec, GraphCopy, GraphTimestamp, GraphRelease or GraphWaitSignal")
    # The queue running the last item has (through the hand-overs) waited for everything before it, so it alone
    # marks the end: the device timeline, then the graph signal. The graph signal must be the replay's LAST release:
    # the next replay rewrites this pushbuffer (the timeline value included) as soon as it sees it, and the GPU may
    # still have to fetch whatever follows it (a later release would then carry the next replay's value).
    self.final = step + 1
    last = engine or self.compute
    self.end = (last, len(last.cmds)); last.signal(device.timeline_signal, 0)
    self.sem.append((last, len(last.cmds), self.final)); last.signal(self.sig, self.final)
    self.used = [q for q in (self.compute, self.copyq) if q is last or any(k in ("exec", "copy", "timestamp") for k, _ in q.cmds)
                 or any(q is w for w, _, _ in self.ext_waits)]
    # what each replay rewrites, resolved once (a queue that is never submitted needs no update)
    self.tl_waits = [(q, c) for q, c in self.tl_waits if any(q is u for u in self.used)]
    self.sem_updates = [(q.update_wait if q.cmds[c][0] == "wait" else q.update_signal, c, off) for q, c, off in self.sem]
    for q in self.used: q.bind(device)

  def replay(self, bufs: dict[tuple[int, int], Any] | None = None, vals: dict[tuple[int, int], int] | None = None,
             wait: bool = False) -> float | None:
    """Patch buffer pointers `{(item, arg): buf}` (for a copy: arg 0 = dst, 1 = src) and ints `{(item, j): v}`, then submit.

    A submit that raises leaves the graph saying what the GPU may run (_submit_failed): nothing reached the GPU -> as if
    this replay was never called (the patched buffers and ints stay patched: the next replay writes its own over them);
    else it counts as submitted, and a replay cut short (a queue it waits for never pushed) is dropped by a recovery."""
    dev = self.dev
    prev = (self.base, self.submitted, list(self._last))
    if self.submitted:
      # the previous replay must be done before its memory is rewritten: its graph signal, and the timeline value its
      # stream releases last (the engine may still be reading the stream's tail after the graph signal)
      dev.wait_signal(self.sig, self.base + self.final)   # (AMD sleeps until the interrupt)
      if self._last[1]: dev.wait_signal(dev.timeline_signal, self._last[1])
      self.base += self.final
    # who last promised the two signals a replay releases: a replay that reached no GPU gives the promise back (else a
    # later recovery would write this replay's values from the CPU, and the graph signal would pass the next one's waits)
    promised = [(s, s.last_queue, s.last_promised) for s in (self.sig, dev.timeline_signal)]
    tv = dev.timeline_value
    pushed: list[bool] = []   # per used queue: whether its submit reached the GPU (HCQDevice.pushes moved)
    # a patch that raises (an item or argument the graph lacks, an int too wide) comes after the base moved on: it is
    # rolled back like a submit that pushed nothing (else the next replay waits for this one's end, which never comes)
    try:
      for (i, a), b in (bufs or {}).items():
        if isinstance(self.items[i], GraphExec): self.args[i].set_buffer(a, buf_addr(b))
        else:
          q, c = self.where[i]
          q.update_copy(c, dst=self._dst_addr(self.items[i], b)) if a == 0 else q.update_copy(c, src=buf_addr(b))
      for (i, j), v in (vals or {}).items(): self.args[i].set_int(j, v)
      for q, c, w in self.ext_waits: q.update_wait(c, value=w.value)
      for update, c, off in self.sem_updates: update(c, value=self.base + off)
      for q, c in self.tl_waits: q.update_wait(c, value=tv - 1)
      self.end[0].update_signal(self.end[1], value=tv)
      t0 = time.perf_counter()
      for q in self.used:
        n = dev.pushes; pushed.append(False)
        try: q.submit(dev)
        finally: pushed[-1] = dev.pushes != n
    except BaseException as e:
      self._submit_failed(e, prev, promised, pushed, tv)
      raise
    self.submitted = True
    self._last[:] = [self.base + self.final, tv]
    dev.timeline_value += 1
    if not wait: return None
    dev.synchronize()
    return time.perf_counter() - t0

  def _submit_failed(self, e: BaseException, prev: tuple[int, bool, list[int]], promised: list, pushed: list[bool], tv: int) -> None:
    """Make the graph's record say what the GPU may run after a submit of replay() raised `e` (whose message gets what
    was done). `pushed`: per queue tried, whether any of it reached the GPU. The replay's end (graph signal at base +
    final, timeline at `tv`) is written by the GPU only if every used queue was pushed whole (the last queue waits,
    through the hand-overs, for all the others), or from the CPU by a recovery (Signal.complete_promised)."""
    dev, end = self.dev, self.base + self.final
    if not any(pushed) and not self.sig.reached(end):   # the GPU got nothing, and no recovery filled in the values
      self.base, self.submitted = prev[0], prev[1]
      self._last[:] = prev[2]   # (in place: the finalizer holds this list)
      for s, q, v in promised: s.last_queue, s.last_promised = q, v
      e.args = (f"{e}; the graph replay reached no GPU queue: the graph is as before it (its patched buffers and ints stay patched)",)
      return
    # the GPU may run what was pushed: the next replay and the finalizer wait for this replay's end, its timeline value is used
    self.submitted = True
    self._last[:] = [end, tv]
    dev.timeline_value = max(dev.timeline_value, tv + 1)
    # the queue that raised may have pushed only part of its commands (an AQL ring full midway), and the queues after
    # it none: the end never comes from the GPU, and what was pushed may wait for hand-overs no queue releases (it
    # blocks its channel). Unless a recovery during the submit already wrote the promised values, one drops it now.
    note = "the graph replay counts as submitted (a recovery during it wrote the values it promised)"
    if dev.lost: note = "part of the graph replay reached the GPU of a lost device: waits for its end fail"
    elif not self.sig.reached(end): note = f"part of the graph replay reached the GPU and can never finish; {dev.recover()}"
    e.args = (f"{e}; {note}",)

  def _dst_addr(self, it: GraphItem, buf: Any) -> int:
    """Where a copy writes: `buf` mapped on this device for a peer copy, else its own address."""
    return self.dev.map_peer(it.dst_dev, buf) if isinstance(it, GraphPeerCopy) else buf_addr(buf)

  def next_base(self) -> int:
    """The graph signal's base of the next replay: a GraphRelease of it is done at next_base() + step."""
    return self.base + self.final if self.submitted else self.base

  def kernel_times(self) -> list[tuple[int, int, int]]:
    """(item, start ns, end ns) of each launch of the last replay, from the device's timestamps (a graph built with
    timestamps=True, after a replay that waited)."""
    return [(i, st.timestamp, en.timestamp) for i, (st, en) in sorted(self.ts.items())]

Q = TypeVar("Q", bound=HWQueue)

class HCQDevice:
  """The half of a device that every HCQ backend has the same way; NVDevice and AMDDevice subclass it and keep only
  their driver: bring-up, memory, queues and their encodings, fault reports and recovery.

  It owns the timeline: one signal that the device's queues release in submission order, each submission waiting for
  the previous value first (`after_timeline` / `submit_timeline`), so every queue runs after all work submitted before
  it and `synchronize` is one wait. It also hands out signals (`new_signal`; each one kept so `recover` can complete
  what dropped work promised), builds graphs, and scopes the persistent memory a graph allocates (`persistent_scope`).

  A subclass calls `_init_signals(pool)` once its signal memory exists, and implements hw_compute_queue, hw_copy_queue,
  program, synchronize, persistent/free_persistent (graphs) and, where its driver reports faults, raise_if_faulted and
  recover.

  >>> from hcqrt.cpu.hcq import CPUHCQDevice
  >>> dev = CPUHCQDevice(); q = dev.after_timeline(dev.hw_compute_queue())
  >>> v = dev.timeline_value; dev.submit_timeline(q); dev.synchronize(); dev.timeline_signal.value == v, dev.timeline_value == v + 1
  (True, True)
  """
  name: str
  wait_timeout_s: float = 30.0
  frees_after_gpu = False   # free_persistent defers until the GPU is past (NV, AMD): a graph's finalizer must not wait
  signals: SignalPool
  timeline_signal: Signal
  timeline_value: int       # the value the next submission releases (the last one released is timeline_value - 1)
  # submissions that reached the GPU: the backend counts one where the GPU may start on the work (NV: GPPut written;
  # AMD: the write pointer or an AQL packet header), so a caller whose submit raised knows whether anything may run
  pushes = 0
  lost: str | None = None   # why the device can take no work again (set by a backend whose recovery may fail: NV)

  def _init_signals(self, pool: SignalPool) -> None:
    self.signals, self._signals = pool, weakref.WeakSet[Signal]()
    self.timeline_signal, self.timeline_value = pool.new(0, "timeline"), 1
    self._timing: tuple[Signal, Signal] | None = None
    self._persistent_scopes: list[list] = []
    self._recovering = False

  # ---- the timeline ----
  def after_timeline(self, q: Q) -> Q:
    """`q` with a first command that waits for everything submitted before it (the timeline's last value)."""
    return q.wait(self.timeline_signal, self.timeline_value - 1)   # type: ignore[return-value]
  def submit_timeline(self, q: HWQueue) -> None:
    """Submit `q` ending in a release of the timeline's next value; the value is taken once the submit went through."""
    q.signal(self.timeline_signal, self.timeline_value).submit(self)
    self.timeline_value += 1
  def wait_signal(self, sig: Signal, value: int, timeout_s: float | None = None) -> None:
    """Wait until `sig` reaches `value` (a backend whose driver can sleep until the GPU signals overrides it: AMD)."""
    sig.wait(value, timeout_s)

  def wait_own_frees(self, later: collections.deque, timeout_s: float | None = None) -> None:
    """For synchronize, once the timeline is reached: wait for the (signal, value) conditions of the pending frees in
    `later` ((item, conditions) entries) whose signals are all this device's. A dropped graph's blocks wait for its
    graph signal, which its stream releases right after the timeline value (GraphReplay._record: the LAST release), so
    it is at most one command away and its memory comes back at this synchronize, not one reap later. An entry with
    another device's signal is left alone: that device's GPU may be held or behind, and this one must not wait on it."""
    try: entries = list(later)
    except RuntimeError: return   # (a finalizer appended meanwhile: those blocks come back at a later reap)
    for _, conds in entries:
      if all(s.device is self for s, _ in conds):
        for s, v in conds:
          if not s.reached(v): self.wait_signal(s, v, timeout_s)

  # ---- signals ----
  def new_signal(self, value: int = 0, name: str | None = None) -> Signal:
    self._signals.add(s := self.signals.new(value, name))   # (recover completes what they were promised)
    return s
  def timing_signals(self) -> tuple[Signal, Signal]:
    """The two signals a launch with wait=True writes its start and end timestamps into."""
    if self._timing is None: self._timing = (self.new_signal(name="t0"), self.new_signal(name="t1"))
    return self._timing

  # ---- graphs and their memory ----
  def graph(self, items: Sequence[GraphItem], timestamps: bool = False) -> GraphReplay:
    """interface.Device.graph: a GraphReplay of the items (launches, copies, timestamps)."""
    return GraphReplay(self, items, timestamps)
  @contextlib.contextmanager
  def persistent_scope(self) -> Iterator[list]:
    """Collects every block `persistent` allocates inside (for free_persistent once the graph is gone)."""
    blocks: list = []
    self._persistent_scopes.append(blocks)
    try: yield blocks
    finally: self._persistent_scopes.remove(blocks)
  def _note_persistent(self, block: Any) -> None:
    if self._persistent_scopes: self._persistent_scopes[-1].append(block)
  def persistent(self, n: int, align: int) -> tuple[int, int]:
    """(host, va) of `n` bytes that outlive the per-launch rings (a graph's queues and arguments), until free_persistent."""
    raise NotImplementedError(f"{self.name} has no persistent memory")
  def free_persistent(self, blocks: list, after: Sequence[tuple[Signal, int]] = ()) -> None:
    """Give back `blocks` once the GPU no longer reads them: every (signal, value) of `after` reached (a graph's end)."""
    raise NotImplementedError(f"{self.name} has no persistent memory")

  # ---- other devices of this driver: peer copies, bounces through system memory, cross-device waits ----
  # Test hook: True drops the destination's semaphore wait on a cross-device copy (its later work then races the copy;
  # the mocks must show that as a wrong result). Never set outside tests.
  skip_cross_wait = False
  peer_copies = False       # a backend that implements the hooks below sets it (interface.can_transfer reads it)
  submit_runs_inline = False   # submit runs the commands before it returns (the CPU's queues): no queue may wait on later work
  BOUNCE_CHUNK = 2 << 20    # bytes per bounce slot (two slots, used in turn)

  def _peer_state(self) -> dict:
    # (HCQDevice has no __init__: the per-pair state is made on first use)
    # (weak: a peer device that is gone drops out rather than being kept alive by the pairs it was in)
    if (st := self.__dict__.get("_peers")) is None: st = self.__dict__["_peers"] = {"status": weakref.WeakKeyDictionary(), "linked": weakref.WeakSet()}
    return st
  def peer_status(self, other: Any) -> str:
    """interface.PeerDevice.peer_status: "ok: <link>" where this device can push into `other`'s memory, else
    "no-p2p: <why>" (copies bounce through system memory). The driver is asked once per pair (`query_peer`)."""
    if other is self: return "ok: same device"
    if type(other) is not type(self): return f"no-p2p: {other.name} is driven by another backend (copies go through the host)"
    st = self._peer_state()["status"]   # (keyed by the device object: names need not be unique, e.g. CPU test devices)
    if other not in st: st[other] = self.query_peer(other)
    return st[other]

  def _link(self, other: HCQDevice) -> None:
    """Once per ordered pair: each device can wait on the other's signals, and peer access is enabled where allowed. A
    driver that refuses to enable what it reported as possible makes the pair "no-p2p: <why>": its copies bounce."""
    st = self._peer_state()
    if other in st["linked"]: return
    self.map_peer_signals(other); other.map_peer_signals(self)
    if peer_ok(self.peer_status(other)):
      try: self.enable_peer(other)
      except NotImplementedError: raise
      except (RuntimeError, OSError) as e: st["status"][other] = f"no-p2p: enabling peer access failed ({e})"
    st["linked"].add(other)

  def transfer_to(self, dst_dev: Any, dst: Any, src: Any, nbytes: int) -> None:
    """interface.PeerDevice.transfer_to. Where `peer_status` allows it, ONE copy on this device's copy engine pushes into
    `dst` mapped into this device (`map_peer`), after `dst_dev`'s submitted work (it may still read `dst`); else the bytes
    go in chunks through this device's bounce buffers (`bounce_to`). `dst_dev`'s later work waits for the copy on its
    own queue (`wait_for`, or the drains run there): no host wait anywhere.

    >>> from hcqrt.cpu.hcq import CPUHCQDevice
    >>> a, b = CPUHCQDevice("CPU"), CPUHCQDevice("CPU:1"); x, y = a.allocator.alloc(4), b.allocator.alloc(4)
    >>> a.allocator.copyin(x, memoryview(b"wxyz")); a.transfer_to(b, y, x, 4); b.synchronize(); out = bytearray(4)
    >>> b.allocator.copyout(memoryview(out), y); bytes(out), a.peer_status(b)
    (b'wxyz', 'ok: shared host memory')
    """
    if nbytes <= 0: return
    for b, what in ((src, f"source on {self.name}"), (dst, f"destination on {dst_dev.name}")):
      if isinstance(getattr(b, "nbytes", None), int) and b.nbytes < nbytes:
        raise ValueError(f"{self.name} -> {dst_dev.name}: a copy of {nbytes} bytes does not fit the {b.nbytes}-byte {what}")
    if dst_dev is self:
      self.submit_timeline(self.after_timeline(self.hw_copy_queue()).copy(buf_addr(dst), buf_addr(src), nbytes))
      return
    if type(dst_dev) is not type(self): raise TypeError(f"{self.name}: no device-to-device copy into {dst_dev.name} (another backend)")
    self._link(dst_dev)
    if not peer_ok(self.peer_status(dst_dev)): return self.bounce_to(dst_dev, dst, src, nbytes)
    q = self.after_timeline(self.hw_copy_queue()).wait(dst_dev.timeline_signal, dst_dev.timeline_value - 1)
    self.submit_timeline(q.copy(self.map_peer(dst_dev, dst), buf_addr(src), nbytes))
    dst_dev.wait_for(self, self.timeline_value - 1)

  def bounce_to(self, dst_dev: HCQDevice, dst: Any, src: Any, nbytes: int) -> None:
    """The copy through system memory that transfer_to takes without P2P (public: hw_tests checks it where P2P works):
    this device's copy engine fills a slot of its bounce buffers (host-visible system memory `dst_dev` maps), and
    `dst_dev`'s copy engine drains it into `dst` once a semaphore wait on this device's timeline says it is filled."""
    self._link(dst_dev)
    slots, drained = self.bounce_buffers(), self._peer_state().setdefault("drained", {})
    for k, off in enumerate(range(0, nbytes, self.BOUNCE_CHUNK)):
      i, n = k % len(slots), min(self.BOUNCE_CHUNK, nbytes - off)
      # a fill waits only for the slot's last drain (on whichever device drained it: linked, so its signals are mapped
      # here), so filling one slot overlaps draining the other; the drain writes dst on dst_dev's own timeline, after
      # all of dst_dev's earlier work, and waits for the fill
      q = self.after_timeline(self.hw_copy_queue())
      if (last := drained.get(i)) is not None: q.wait(last[0].timeline_signal, last[1])
      self.submit_timeline(q.copy(buf_addr(slots[i]), buf_addr(src) + off, n))
      d = dst_dev.after_timeline(dst_dev.hw_copy_queue())
      if not dst_dev.skip_cross_wait: d.wait(self.timeline_signal, self.timeline_value - 1)
      dst_dev.submit_timeline(d.copy(buf_addr(dst) + off, dst_dev.map_peer(self, slots[i]), n))
      drained[i] = (dst_dev, dst_dev.timeline_value - 1)

  def wait_for(self, other: HCQDevice, value: int) -> None:
    """This device's later work runs after `other`'s timeline reaches `value`: a semaphore wait on this device's own
    queue (`other`'s signals are mapped here: `map_peer_signals`), not a host sync."""
    if self.skip_cross_wait: return
    self.submit_timeline(self.after_timeline(self.hw_compute_queue()).wait(other.timeline_signal, value))

  # the backend's part (a backend without peer copies leaves them: copy_between then goes through the host)
  def query_peer(self, other: HCQDevice) -> str:
    """Ask the driver what a copy from this device into `other` may use: "ok: <link>" or "no-p2p: <status name>"."""
    raise NotImplementedError(f"{self.name}: no peer query")
  def enable_peer(self, other: HCQDevice) -> None:
    """Enable this device's access to `other`'s memory (called once per pair, only where query_peer said "ok")."""
    raise NotImplementedError(f"{self.name}: no peer access")
  def map_peer(self, other: HCQDevice, buf: Any) -> int:
    """The address on this device of `other`'s buffer `buf` (mapped on first use; video memory only after enable_peer)."""
    raise NotImplementedError(f"{self.name}: no peer mappings")
  def map_peer_signals(self, other: HCQDevice) -> None:
    """Map `other`'s signal memory into this device, so this device's queues can wait on `other`'s signals at the
    addresses the signals carry (HCQ backends give an allocation one address on every device of the process)."""
    raise NotImplementedError(f"{self.name}: no cross-device signals")
  def bounce_buffers(self) -> list[Any]:
    """This device's host-visible system-memory slots of BOUNCE_CHUNK bytes, which every peer can map (map_peer)."""
    raise NotImplementedError(f"{self.name}: no bounce buffers")

  # ---- queues, programs, faults (the backend's) ----
  def hw_compute_queue(self) -> HWQueue: raise NotImplementedError
  def hw_copy_queue(self) -> HWQueue: raise NotImplementedError
  def synchronize(self, timeout_s: float | None = None) -> None: raise NotImplementedError
  def raise_if_faulted(self) -> None:
    """Raise naming the fault when the driver reported one (Signal.wait polls this while it waits); no report: nothing."""
  def raise_if_unusable(self) -> None:
    """Raise naming the device if it cannot take work now: lost, inside a recovery, or a fault its driver reported
    (raise_if_faulted, which recovers first). A replay over several devices asks each before it submits anywhere."""
    if self._recovering: raise RuntimeError(f"{self.name}: the device is being recovered (its queues are recreated); try again after it")
    self.raise_if_faulted()   # (NV: raises for a lost device too, as an NVError)
    if self.lost: raise RuntimeError(f"{self.name}: {self.lost}")
  def recover(self) -> str:
    """Drop the work a fault or a hang left queued so later waits can finish; returns the device's state for the error."""
    return "the device was not reset: work queued behind it will not run"
