"""TinyJit: capture the kernels a function launches, then replay them without running its Python again.

Call 1 runs the function normally. Call 2 runs it again while recording every kernel launch (and copy) with
its buffers. From call 3 on, the recording is replayed: the buffers of the tensor arguments are swapped for
the new arguments' buffers, outputs get fresh buffers (so a tensor returned by an earlier call keeps its
value), and buffers the function updates in place (weights, optimizer state, running statistics, the
random-number counter) are written again, exactly as the function would.

>>> from frontend import Tensor, TinyJit
>>> w = Tensor([1.0, 2.0]).realize()
>>> @TinyJit
... def step(x: Tensor) -> Tensor: return (x * w).sum()
>>> [step(Tensor([float(i), 1.0]).realize()).item() for i in range(4)]
[2.0, 3.0, 4.0, 5.0]

Raises JitError instead of returning wrong results: when the function launched nothing to capture, when an
argument's shape or dtype changes (naming it), when a tensor argument is not realized, when a non-tensor
argument changes, and when `.item()`/`.numpy()` is called during capture.
"""
from __future__ import annotations
import contextlib, functools, sys
from typing import Any, Callable, Iterator
from compiler.lazy import LazyBuffer
from hcqrt.device import debug_level
from frontend import engine
from frontend.tensor import Tensor
from frontend.devices import open_device

class JitError(RuntimeError):
  """The JIT can't replay a function correctly; the message says why."""

_recording: list | None = None   # the launches of the capture in progress (only capture() sets it)

@contextlib.contextmanager
def capture(what: str = "TinyJit capture") -> Iterator[list]:
  """Record every launch (engine.ExecItem) the block runs into the yielded list; `what` names the capturer in errors.
  Captures don't nest, and reading tensor values on the host inside one raises JitError (engine.to_host).

  >>> from frontend import Tensor
  >>> with capture() as items: _ = (Tensor([1.0]) + 1).realize()
  >>> [ei.kind for ei in items]
  ['kernel']
  """
  global _recording
  if _recording is not None: raise JitError(f"{what}: nested TinyJit capture is not supported")
  _recording = items = []
  try: yield items
  finally: _recording = None

def capturing() -> list | None:
  """The list the capture in progress records into (None: no capture)."""
  return _recording

def _flatten(args, kwargs) -> tuple[list[tuple[str, Tensor]], list[tuple[str, Any]]]:
  tensors, consts = [], []
  for name, v in [(f"argument {i}", a) for i, a in enumerate(args)] + [(f"argument {k!r}", v) for k, v in sorted(kwargs.items())]:
    if isinstance(v, Tensor): tensors.append((name, v))
    elif isinstance(v, (list, tuple)) and any(isinstance(x, Tensor) for x in v):
      for j, x in enumerate(v):
        if isinstance(x, Tensor): tensors.append((f"{name}[{j}]", x))
        else: consts.append((f"{name}[{j}]", x))
    else: consts.append((name, v))
  return tensors, consts

class TinyJit:
  """Decorator: `@TinyJit def step(x, y): ...`; see the module docstring."""
  def __init__(self, fn: Callable):
    self.fn, self.cnt = fn, 0
    self.name = getattr(fn, "__name__", "function")
    self.items: list[engine.ExecItem] = []
    self.graph: Any = None   # HCQ devices: the prebuilt GraphReplay (False: the items can't form one)
    functools.update_wrapper(self, fn)
  def reset(self) -> None:
    """Forget the capture: the next call runs eagerly, the one after captures again."""
    self.cnt, self.items, self.graph = 0, [], None

  def __get__(self, obj, objtype=None):  # so @TinyJit works on methods
    return functools.partial(self.__call__, obj) if obj is not None else self

  def _check_inputs(self, tensors, consts):
    for name, t in tensors:
      if not t.lazydata.realized or t.lazydata.is_view and not t.lazydata.base.realized:
        raise JitError(f"{self.name}: {name} is not realized; call .realize() on it before passing it to the jitted function")
    if self.cnt < 2: return
    if len(tensors) != len(self.in_sig): raise JitError(f"{self.name}: called with {len(tensors)} tensor arguments, captured with {len(self.in_sig)}")
    for (name, t), (shape, dtype, device) in zip(tensors, self.in_sig):
      if t.shape != shape: raise JitError(f"{self.name}: {name} has shape {t.shape}, the capture had {shape}; call .reset() to capture again")
      if t.dtype != dtype: raise JitError(f"{self.name}: {name} has dtype {t.dtype}, the capture had {dtype}")
      if t.device != device: raise JitError(f"{self.name}: {name} is on {t.device}, the capture was on {device}")
    for (name, v), (_, old) in zip(consts, self.consts):
      if type(v) is not type(old) or v != old:
        raise JitError(f"{self.name}: non-tensor {name} changed from {old!r} to {v!r}; the capture baked it in (pass it as a Tensor)")

  def __call__(self, *args, **kwargs):
    tensors, consts = _flatten(args, kwargs)
    self._check_inputs(tensors, consts)
    if self.cnt == 0:
      self.cnt = 1
      return self.fn(*args, **kwargs)
    if self.cnt == 1: return self._capture(tensors, consts, args, kwargs)
    return self._replay(tensors)

  def _capture(self, tensors, consts, args, kwargs):
    with capture(self.name) as captured:
      ret = self.fn(*args, **kwargs)
      outs = _out_tensors(ret)
      if outs: Tensor.realize(*outs)
    if not captured:
      raise JitError(f"{self.name}: nothing to capture: the call launched no kernels (its outputs were already computed, "
                     "or it does no tensor work); TinyJit only helps functions that run kernels")
    self.items, self.ret, self.consts = captured, ret, consts
    self.in_sig = [(t.shape, t.dtype, t.device) for _, t in tensors]
    # where each argument's buffer appears in the recording, to swap in the next arguments' buffers
    in_bufs = {id(t.lazydata.base.buffer): i for i, (_, t) in enumerate(tensors)}
    self.in_slots = [(j, k, in_bufs[id(b)]) for j, ei in enumerate(captured) for k, b in enumerate(ei.bufs) if id(b) in in_bufs]
    # buffers handed to the caller get a fresh buffer per replay
    self.out_bases = []
    for t in outs:
      b = t.lazydata.base.buffer
      if id(b) in in_bufs: continue
      # only a buffer this capture allocated may be replaced: an assign target (a weight) must stay put
      if not any(ei.bufs[0] is b and ei.fresh_out for ei in captured): continue
      slots = [(j, k) for j, ei in enumerate(captured) for k, b2 in enumerate(ei.bufs) if b2 is b]
      self.out_bases.append((t, b, slots))
    self.cnt, self.graph = 2, None
    if debug_level() >= 1: print(f"TinyJit {self.name}: captured {len(captured)} launches", file=sys.stderr)
    return ret

  def _replay(self, tensors):
    items = self.items
    for j, k, i in self.in_slots: items[j].bufs[k] = tensors[i][1].lazydata.base.buffer
    fresh = {}
    for t, b, slots in self.out_bases:
      nb = fresh[id(b)] = engine.Buffer(b.device, b.nbytes)
      for j, k in slots: items[j].bufs[k] = nb
    if self.graph is None: self.graph = self._build_graph()
    if self.graph: self._replay_graph()
    else:
      for ei in items: ei.run()
    return _rebuild(self.ret, fresh)

  # ---- graph replay on HCQ devices ----
  def _build_graph(self) -> Any:
    """One GraphReplay of all captured launches and copies, when they all run on one HCQ device that builds
    graphs (NV); False otherwise (the CPU, or copies between devices), and replays loop over ExecItem.run."""
    devs = {b.device for ei in self.items for b in ei.bufs}
    if len(devs) != 1: return False
    dev = open_device(devs.pop())
    if not hasattr(dev, "graph"): return False
    gitems: list[tuple] = []
    for ei in self.items:
      if ei.kind == "copy": gitems.append(("copy", ei.bufs[0].raw, ei.bufs[1].raw, ei.bufs[0].nbytes))   # (as ExecItem.run)
      else: gitems.append(("exec", ei.ck.program, [b.raw for b in ei.bufs], (), ei.ck.launch["global_size"], ei.ck.launch["local_size"]))
    # every buffer slot a replay may swap: arguments and fresh outputs (the others stay as captured)
    self.graph_slots = sorted({(j, k) for j, k, _ in self.in_slots} | {s for _, _, slots in self.out_bases for s in slots})
    kernels = [ei for ei in self.items if ei.kind == "kernel"]
    self.graph_counts = (len(kernels), sum(ei.ck.ops for ei in kernels), sum(ei.bufs[0].nbytes if ei.kind == "copy" else sum(b.nbytes for b in ei.bufs) for ei in self.items))   # as ExecItem.run counts
    if debug_level() >= 1: print(f"TinyJit {self.name}: graph of {len(gitems)} items on {dev.name}", file=sys.stderr)
    return dev.graph(gitems)

  def _replay_graph(self) -> None:
    items = self.items
    self.graph.replay(bufs={(j, k): items[j].bufs[k].raw for j, k in self.graph_slots})
    n, ops, mem = self.graph_counts
    engine.GlobalCounters.kernel_count += n
    engine.GlobalCounters.global_ops += ops
    engine.GlobalCounters.global_mem += mem
    if debug_level() >= 2: print(f"TinyJit {self.name}: replayed a graph of {n} kernels", file=sys.stderr)

def _out_tensors(ret) -> list[Tensor]:
  if isinstance(ret, Tensor): return [ret]
  if isinstance(ret, (list, tuple)): return [t for x in ret for t in _out_tensors(x)]
  if isinstance(ret, dict): return [t for x in ret.values() for t in _out_tensors(x)]
  return []

def _rebuild(ret, fresh: dict):
  """The captured return value with each output tensor pointing at this replay's buffer."""
  if isinstance(ret, Tensor):
    base = ret.lazydata.base
    if id(base.buffer) not in fresh: return ret
    nb = LazyBuffer.from_buffer(fresh[id(base.buffer)], base.shape, base.dtype, base.device)
    lb = nb if not ret.lazydata.is_view else LazyBuffer(nb.device, ret.lazydata.st, nb.dtype, base=nb)
    return Tensor(lb, requires_grad=False)
  if isinstance(ret, tuple): return tuple(_rebuild(x, fresh) for x in ret)
  if isinstance(ret, list): return [_rebuild(x, fresh) for x in ret]
  if isinstance(ret, dict): return {k: _rebuild(v, fresh) for k, v in ret.items()}
  return ret
