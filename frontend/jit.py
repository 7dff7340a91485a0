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

Arguments are bound to the function's parameter names (so keywords and positions mix freely); tensors inside
lists, tuples and dicts are inputs too. A tensor argument that is a view (a slice, a transpose, an expand) is
copied to a contiguous buffer first, so any view of the right shape replays correctly; an argument that is not
realized yet is realized first (those kernels are not recorded). The recording tells an
argument's buffer apart from the same tensor read through a closure, and a function that returns its argument
returns this call's tensor. In-place writes (`.assign`, `+=`) still pending when a capture ends are part of
the recording; those pending when a replay starts run before it.

Symbolic shapes: a dimension of a tensor argument may be a bound Variable (`x.reshape(Variable("batch", 1, 64).bind(n),
64)`), and bound Variables may be passed as arguments. The capture is keyed on the Variables, not their values: every
later call with values in range replays it, the values patched in as the kernels' integer arguments (in the prebuilt
graph on HCQ devices), and the outputs' shapes bound to this call's values. No kernel is compiled again.

Several devices: a tensor argument or result on several devices (`Tensor.shard`) is one buffer per shard in the
recording (the capture is keyed on its sharding too), and a capture whose work spans devices (a data-parallel train
step: per-device kernels and the allreduce's copies) replays as one graph across them (hcqrt/multi_graph.py).

Raises JitError instead of returning wrong results: when the function launched nothing to capture, when an
argument's shape, dtype or device changes (naming it), when a
non-tensor argument (or the layout of a list/dict argument) changes, when the function writes in place into
an argument that is a view or is passed twice, and when `.item()`/`.numpy()` is called during capture.
"""
from __future__ import annotations
import functools, inspect, sys
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable
import numpy as np
from compiler.lazy import LazyBuffer, mark_viewed
from compiler.uop import UOp, Ops
from compiler.sint import sval, unbind, rebind, merge_vals, binds_of, any_sym
from hcqrt.device import debug_level
from hcqrt.interface import Graph, GraphCopy, GraphExec, GraphItem
from compiler import profile
from frontend import engine
from frontend.buffer import Buffer, GlobalCounters
from frontend.capture import JitError, Recording, capture, capturing   # noqa: F401 (JitError, Recording, capturing: importable from here too)
from frontend.tensor import Tensor, take_pending_assigns, live_lazydata
from frontend.devices import open_device
from frontend.multi import MultiLazyBuffer
from hcqrt.multi_graph import MultiGraph, PeerCopy

class _ArgBuffer(Buffer):
  """A tensor argument's device memory under a second identity, for the capture: the recording then tells a read
  through the argument (swapped for the next call's tensor) from a read of the same tensor through a closure."""
  __slots__ = ("src",)
  def __init__(self, src: Buffer):   # no allocation, no finalizer: the memory stays src's
    self.device, self.nbytes, self.raw, self.src = src.device, src.nbytes, src.raw, src

@dataclass(frozen=True)
class _Container:
  """The layout of a list/tuple/dict argument: part of what a capture is keyed on."""
  kind: type
  keys: tuple
  def __repr__(self) -> str: return f"a {self.kind.__name__} with keys {list(self.keys)}" if issubclass(self.kind, dict) else f"a {self.kind.__name__} of {len(self.keys)}"

@dataclass(frozen=True)
class _Sharding:
  """How a tensor argument on several devices is split: part of what a capture is keyed on (its shards are the
  recording's arguments, one per device)."""
  devices: tuple
  axis: int | None
  real: tuple
  def __repr__(self) -> str: return f"sharded over {self.devices} on axis {self.axis}"

def _shards(t: Tensor) -> list[Tensor]:
  """The one-device tensors a tensor is made of: itself, or each shard of a tensor on several devices."""
  m = t.lazydata
  return [Tensor(lb, requires_grad=t.requires_grad) for lb in m.lbs] if isinstance(m, MultiLazyBuffer) else [t]

def _walk(name: str, v: Any, tensors: list, consts: list) -> None:
  """Collects the tensors inside v (through lists, tuples and dicts) and everything else, which the capture bakes in.
  A tensor on several devices is one tensor per shard (and its sharding, which the capture bakes in)."""
  if isinstance(v, Tensor) and isinstance(m := v.lazydata, MultiLazyBuffer):
    consts.append((name, _Sharding(m.device, m.axis, tuple(m.real))))
    tensors += [(f"{name} (shard {i} on {s.device})", s) for i, s in enumerate(_shards(v))]
  elif isinstance(v, Tensor): tensors.append((name, v))
  elif isinstance(v, (list, tuple)):
    consts.append((name, _Container(type(v), tuple(range(len(v))))))
    for i, x in enumerate(v): _walk(f"{name}[{i}]", x, tensors, consts)
  elif isinstance(v, dict):
    consts.append((name, _Container(type(v), tuple(v))))
    for k, x in v.items(): _walk(f"{name}[{k!r}]", x, tensors, consts)
  else: consts.append((name, v))

def _map(v: Any, f: Callable[[Tensor], Tensor]) -> Any:
  """v with every tensor inside it replaced by f(tensor), in _walk's order (a tensor on several devices: f of each shard,
  put back together the same way)."""
  if isinstance(v, Tensor) and isinstance(m := v.lazydata, MultiLazyBuffer):
    return Tensor(MultiLazyBuffer([f(s).lazydata for s in _shards(v)], m.axis, list(m.real)), requires_grad=v.requires_grad)
  if isinstance(v, Tensor): return f(v)
  if isinstance(v, tuple): return type(v)(*(_map(x, f) for x in v)) if hasattr(v, "_fields") else type(v)(_map(x, f) for x in v)
  if isinstance(v, list): return [_map(x, f) for x in v]
  if isinstance(v, dict):
    out = v.copy()
    for k, x in v.items(): out[k] = _map(x, f)
    return out
  return v

def _same(a: Any, b: Any) -> bool:
  if a is b: return True
  if isinstance(a, UOp) and isinstance(b, UOp) and a.op is Ops.BIND and b.op is Ops.BIND: return a.src[0] is b.src[0]   # value: a variable
  if type(a) is not type(b): return False
  if isinstance(a, float) and a != a and b != b: return True   # NaN
  try: r = a == b
  except Exception: return False
  return bool(r) if isinstance(r, (bool, np.bool_)) else False

def _kind(lb: LazyBuffer) -> str:
  """own: the tensor is its buffer; whole: a reshape of a whole buffer (passed as that buffer); view: anything else
  (an offset, strides, an expand, a mask): copied to a contiguous buffer for the call."""
  if not lb.is_view: return "own"
  return "whole" if lb.st.contiguous and sval(lb.size) == sval(lb.base.size) else "view"

class TinyJit:
  """Decorator: `@TinyJit def step(x, y): ...`; see the module docstring."""
  def __init__(self, fn: Callable):
    self.fn, self.cnt = fn, 0
    self.name = getattr(fn, "__name__", "function")
    try: self.sig: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError): self.sig = None
    # plain positional parameters (no defaults, *args or keyword-only): a call with exactly those binds without inspect
    ps = self.sig.parameters.values() if self.sig is not None else ()
    self.pos_names = [f"argument {p.name!r}" for p in ps] if self.sig is not None and all(p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty for p in ps) else None
    self.items: list[engine.ExecItem] = []
    self.graph: Graph | None = None   # the device's prebuilt graph of the capture (interface.Device.graph)
    self.graph_built = False          # (graph None after building: the device can't replay these items as one)
    self.prof_args: list | None = None   # PROFILE: each launch's trace-event arguments (made on the first profiled replay)
    functools.update_wrapper(self, fn)
  def reset(self) -> None:
    """Forget the capture: the next call runs eagerly, the one after captures again."""
    self.cnt, self.items, self.graph, self.graph_built, self.prof_args = 0, [], None, False, None

  def __get__(self, obj, objtype=None):  # so @TinyJit works on methods
    return functools.partial(self.__call__, obj) if obj is not None else self

  def _bind(self, args: tuple, kwargs: dict) -> tuple[list[tuple[str, Any]], Callable[[list], Any]]:
    """[(name, value)] of every parameter in the function's order, and how to call the function with new values."""
    if self.pos_names is not None and not kwargs and len(args) == len(self.pos_names):
      return list(zip(self.pos_names, args)), lambda vals: self.fn(*vals)
    if self.sig is None:   # no signature (a builtin): positions, then keywords by name
      keys = sorted(kwargs)
      def call_pos(vals: list) -> Any: return self.fn(*vals[:len(args)], **dict(zip(keys, vals[len(args):])))
      return [(f"argument {i}", a) for i, a in enumerate(args)] + [(f"argument {k!r}", kwargs[k]) for k in keys], call_pos
    try: ba = self.sig.bind(*args, **kwargs)
    except TypeError as e: raise TypeError(f"{self.name}: {e}") from None
    ba.apply_defaults()
    for n, p in self.sig.parameters.items():   # **kwargs: matched by key, whatever order they came in
      if p.kind is p.VAR_KEYWORD and n in ba.arguments: ba.arguments[n] = dict(sorted(ba.arguments[n].items()))
    names = list(ba.arguments)
    def call(vals: list) -> Any:
      ba.arguments.update(zip(names, vals))
      return self.fn(*ba.args, **ba.kwargs)
    return [(f"argument {n!r}", ba.arguments[n]) for n in names], call

  def _check_inputs(self, tensors, consts):
    if self.cnt < 2: return
    if len(consts) != len(self.consts) or any(n != o for (n, _), (o, _) in zip(consts, self.consts)):
      changed = next(((n, v, ov) for (n, v), (o, ov) in zip(consts, self.consts) if n != o or not _same(v, ov)), None)
      where = f": {changed[0]} is {changed[1]!r}, the capture had {changed[2]!r}" if changed else ""
      raise JitError(f"{self.name}: the arguments' layout changed since the capture{where}; call .reset() to capture again")
    for (name, v), (_, old) in zip(consts, self.consts):
      if not _same(v, old) and isinstance(old, (_Container, _Sharding)):
        raise JitError(f"{self.name}: {name} is {v!r}, the capture had {old!r}; call .reset() to capture again")
      if not _same(v, old):
        raise JitError(f"{self.name}: non-tensor {name} changed from {old!r} to {v!r}; the capture baked it in (pass it as a Tensor)")
    if len(tensors) != len(self.in_sig): raise JitError(f"{self.name}: called with {len(tensors)} tensor arguments, captured with {len(self.in_sig)}")
    for (name, t), (shape, dtype, device) in zip(tensors, self.in_sig):
      if _unbound(t.shape) != shape: raise JitError(f"{self.name}: {name} has shape {t.shape}, the capture had {shape}; call .reset() to capture again")
      if t.dtype != dtype: raise JitError(f"{self.name}: {name} has dtype {t.dtype}, the capture had {dtype}")
      if t.device != device: raise JitError(f"{self.name}: {name} is on {t.device}, the capture was on {device}")

  def __call__(self, *args, **kwargs):
    params, call = self._bind(args, kwargs)
    tensors, consts = [], []
    for name, v in params: _walk(name, v, tensors, consts)
    # in-place writes recorded before this call run first: the call reads (and may write) the same buffers
    if pending := take_pending_assigns(): Tensor.realize(*pending)
    # unrealized arguments (`jit(a[:, :v])` of a lazy `a`) are computed here, outside any capture: their kernels make
    # this call's inputs and are not part of the function's recording
    if todo := [t for _, t in tensors if not t.lazydata.realized]: Tensor.realize(*todo)
    self._check_inputs(tensors, consts)
    if self.cnt == 0:
      self.cnt = 1
      return call([v for _, v in params])
    if self.cnt == 1: return self._capture(params, call, tensors, consts)
    return self._replay(tensors, consts)

  def _current(self, tensors) -> list[tuple[Tensor, Buffer]]:
    """(tensor, the buffer the recording reads for it) per tensor argument; views are copied to contiguous buffers."""
    copies = {i: t.lazydata.contiguous() for i, (_, t) in enumerate(tensors) if _kind(t.lazydata) == "view"}
    if copies: engine.realize(list(copies.values()), live_lazydata)
    return [(t, copies[i].buffer if i in copies else t.lazydata.base.buffer) for i, (_, t) in enumerate(tensors)]

  def _capture(self, params, call, tensors, consts):
    cur = self._current(tensors)
    # the function sees stand-ins for its tensor arguments, over buffers only they use (see _ArgBuffer)
    arg_bufs = [b if _kind(t.lazydata) == "view" else _ArgBuffer(b) for t, b in cur]
    subs = [Tensor(LazyBuffer.from_buffer(b, t.shape, t.dtype, t.device), requires_grad=t.requires_grad) for (_, t), b in zip(tensors, arg_bufs)]
    it = iter(subs)
    vals = [_map(v, lambda _: next(it)) for _, v in params]
    with capture(self.name) as captured:
      ret = call(vals)
      outs = _out_tensors(ret)
      pending = take_pending_assigns()   # in-place writes the function left pending belong to the recording
      if outs or pending: Tensor.realize(*outs, *pending)
    if not captured:
      raise JitError(f"{self.name}: nothing to capture: the call launched no kernels (its outputs were already computed, "
                     "or it does no tensor work); TinyJit only helps functions that run kernels")
    # where each argument's buffer appears in the recording, to swap in the next arguments' buffers
    in_index = {id(b): i for i, b in enumerate(arg_bufs)}
    in_slots = [(j, k, in_index[id(b)]) for j, ei in enumerate(captured) for k, b in enumerate(ei.bufs) if id(b) in in_index]
    # buffers the recording writes in place: arguments (written), and others (weights: fixed)
    self.written = sorted({i for j, k, i in in_slots if k < captured[j].nout})
    self.fixed_written = {id(b) for ei in captured if ei.kind == "kernel" and not ei.fresh_out for b in ei.bufs[:ei.nout] if id(b) not in in_index}
    self.fixed_read = {id(b) for ei in captured for b in ei.bufs if id(b) not in in_index} if self.written else set()
    self._check_aliasing(tensors, cur)
    self.items, self.consts, self.in_slots, self.in_index = captured, consts, in_slots, in_index
    # (the lazy buffers still alive: the tensors' current values; each once)
    self.bounds = [b for b in captured.bounds if any_sym(b[2]) or any(any_sym(p) for p in b[1])]
    self.checks, self.written_lbs = captured.checks, list({id(lb): r for r in captured.written if (lb := r()) is not None}.values())
    self.in_sig = [(_unbound(t.shape), t.dtype, t.device) for _, t in tensors]
    # the Variables a replay sets: those of the arguments; (item, Variable) slots of every launch that takes them
    self.vars = _var_vals(tensors, consts)
    self.var_slots = [(j, v) for j, ei in enumerate(captured) if ei.kind == "kernel" and ei.var_vals for v in ei.kernel.compiled.vars if v in self.vars]
    self.subs, self.sub_index = subs, {id(s): i for i, s in enumerate(subs)}
    # buffers handed to the caller get a fresh buffer per replay
    self.out_bases = []
    for t in outs:
      b = t.lazydata.base.buffer
      if id(b) in in_index: continue
      # only a buffer this capture allocated may be replaced: an assign target (a weight) must stay put
      if not any(ei.bufs[0] is b and ei.fresh_out for ei in captured): continue
      slots = [(j, k) for j, ei in enumerate(captured) for k, b2 in enumerate(ei.bufs) if b2 is b]
      self.out_bases.append((t, b, slots))
    self.ret, self.cnt, self.graph, self.graph_built, self.prof_args = ret, 2, None, False, None
    if debug_level() >= 1: print(f"TinyJit {self.name}: captured {len(captured)} launches", file=sys.stderr)
    return self._rebuild(ret, {}, cur, self.vars)

  def _check_aliasing(self, tensors, cur) -> None:
    """Refuse calls whose result would depend on which arguments share memory: the recording's kernels were built
    for distinct buffers, so a kernel writing one in place while reading another copy of it could race."""
    for i in self.written:
      name, t = tensors[i]
      if _kind(t.lazydata) != "own":
        raise JitError(f"{self.name}: {name} is a view of another tensor and the function writes into it in place (assign, +=); "
                       "the write would not reach the tensor it views: pass a tensor that owns its buffer")
      b = cur[i][1]
      for n2, t2 in tensors:
        if (t2 is not t and t2.lazydata.base.buffer is b) or (t2 is t and n2 != name):
          raise JitError(f"{self.name}: {name} and {n2} are the same tensor (or views of one) and the function writes into {name} "
                         "in place; the recording can't replay that correctly: pass distinct tensors")
      if id(b) in self.fixed_read:
        raise JitError(f"{self.name}: {name} is also read through a closure or global while the function writes into it in place; "
                       "pass a different tensor")
    for name, t in tensors:
      if _kind(t.lazydata) != "view" and id(t.lazydata.base.buffer) in self.fixed_written:
        raise JitError(f"{self.name}: {name} is a tensor the function also writes in place through a closure or global "
                       "(a weight it updates); pass a different tensor")

  def _replay(self, tensors, consts):
    vv = _var_vals(tensors, consts)
    engine.check_var_vals(f"TinyJit {self.name} replay", vv)   # (the graph patches the values in without ExecItem.vals)
    for what, arg, sh in self.bounds:
      at = lambda x: sval(rebind(x, vv)) if isinstance(x, UOp) else x
      if not all(0 <= at(lo) <= at(hi) <= at(s) for (lo, hi), s in zip(arg, sh)):
        vals = ", ".join(f"{v.arg[0]}={x}" for v, x in vv.items())
        raise ValueError(f"TinyJit {self.name} replay: the captured {what} is out of range at {vals}; call .reset() to capture again")
    # lazy values built from buffers the recording overwrites must be computed from the values they were built from
    stale = [r for ref in self.written_lbs if (lb := ref()) is not None and lb.readers for r in list(lb.readers) if r.buffer is None]
    if stale: engine.realize(stale, live_lazydata)
    cur = self._current(tensors)
    if self.written or self.fixed_written: self._check_aliasing(tensors, cur)
    items = self.items
    for j, k, i in self.in_slots: items[j].bufs[k] = cur[i][1]
    fresh = {}
    for _t, b, slots in self.out_bases:
      nb = fresh[id(b)] = Buffer(b.device, b.nbytes, lambda: f"an output of {self.name} (TinyJit replay)")
      for j, k in slots: items[j].bufs[k] = nb
    for j, v in self.var_slots: items[j].var_vals[v] = vv[v]
    if not self.graph_built: self.graph, self.graph_built = self._build_graph(), True
    # (DEBUG=2 where a graph's launches complete on return, the CPU: one launch at a time, each timed and printed as
    # eager mode does; a GPU graph would have to wait for each)
    dbg = debug_level()
    if profile.ENABLED: self._replay_profiled(dbg)
    elif self.graph is not None and not (self.graph.completes_on_return and dbg >= 2): self._replay_graph(self.graph, dbg)
    else:
      for ei in items: ei.run()
    if self.checks: self._read_checks()
    return self._rebuild(self.ret, fresh, cur, vv)

  def _read_checks(self) -> None:
    """Raise as eager mode would when an index check of the recording failed on this replay's data (one byte each)."""
    flag = np.zeros(1, np.bool_)
    for buf, msg, exc in self.checks:
      open_device(buf.device).allocator.copyout(memoryview(flag.view(np.uint8)), buf.raw)
      # (the replay keeps one flag per check, not the indices: the eager call names the offending value)
      if flag[0]: raise exc(f"{self.name} (TinyJit replay): {msg}; call it without TinyJit to see the offending index")

  def _rebuild(self, ret, fresh: dict, cur: list, vv: dict):
    """The captured return value with each output pointing at this call's buffer: a fresh output's new buffer, or
    this call's argument where the function returned (a view of) its argument; symbolic shapes bound to this call's
    values `vv`."""
    if isinstance(ret, Tensor) and isinstance(m := ret.lazydata, MultiLazyBuffer):   # each shard as a one-device result
      return Tensor(MultiLazyBuffer([self._rebuild(s, fresh, cur, vv).lazydata for s in _shards(ret)], m.axis, list(m.real)), requires_grad=False)
    if isinstance(ret, Tensor):
      if (i := self.sub_index.get(id(ret))) is not None: return cur[i][0]
      base = ret.lazydata.base
      if (i := self.in_index.get(id(base.buffer))) is not None: buf = cur[i][1]
      elif id(base.buffer) in fresh: buf = fresh[id(base.buffer)]
      elif not vv or not any(binds_of(s) for s in ret.shape): return ret
      else: buf = base.buffer
      nb = LazyBuffer.from_buffer(buf, tuple(rebind(s, vv) for s in base.shape), base.dtype, base.device)
      if ret.lazydata.is_view:   # (a view made here, not by _view: the base and its buffer note it, compiler/lazy.py)
        nb.viewed = True
        mark_viewed(buf)
        lb = LazyBuffer(nb.device, ret.lazydata.st.map_sints(lambda x: rebind(x, vv)), nb.dtype, base=nb)
      else: lb = nb
      return Tensor(lb, requires_grad=False)
    if isinstance(ret, tuple): return tuple(self._rebuild(x, fresh, cur, vv) for x in ret)
    if isinstance(ret, list): return [self._rebuild(x, fresh, cur, vv) for x in ret]
    if isinstance(ret, dict): return {k: self._rebuild(v, fresh, cur, vv) for k, v in ret.items()}
    return ret

  # ---- graph replay: one prebuilt graph of the whole capture, from the device (interface.Device.graph) ----
  def _build_graph(self) -> Graph | None:
    """The device's graph of all captured launches and copies when they all run on one device (an HCQ device's
    GraphReplay, the CPU's launch list); across devices one MultiGraph (hcqrt/multi_graph.py: each device's launches
    in its own graph, the copies between them, in dependency order); None where a device can't (copies on the CPU),
    and replays loop over ExecItem.run."""
    devs = list({b.device: None for ei in self.items for b in ei.bufs})
    if len(devs) > 1: return self._build_multi_graph(sorted(devs))
    dev = self.graph_dev = open_device(devs.pop())
    gitems: list[GraphItem] = [GraphCopy(ei.bufs[0].raw, ei.bufs[1].raw, ei.bufs[0].nbytes) if ei.kind == "copy" else   # (as ExecItem.run)
                               GraphExec(ei.kernel.program, [b.raw for b in ei.bufs], ei.vals(), **ei.kernel.launch_kwargs) for ei in self.items]
    # profiled: each launch bracketed by timestamps (kernel_times()), where the device can take them
    if (g := dev.graph(gitems, timestamps=profile.ENABLED)) is None: return None
    self._graph_bookkeeping()
    if debug_level() >= 1: print(f"TinyJit {self.name}: graph of {len(gitems)} items on {dev.name}", file=sys.stderr)
    return g

  def _build_multi_graph(self, devs: list[str]) -> Graph:
    """One graph of a capture that spans `devs`: launches on their device, copies between devices (as ExecItem.run
    copies: the tensor's bytes, from bufs[1] into bufs[0])."""
    mitems = [PeerCopy(open_device(ei.bufs[0].device), open_device(ei.bufs[1].device), ei.bufs[0].raw, ei.bufs[1].raw, ei.bufs[0].nbytes)
              if ei.kind == "copy" else
              (open_device(ei.bufs[0].device), GraphExec(ei.kernel.program, [b.raw for b in ei.bufs], ei.vals(), **ei.kernel.launch_kwargs), ei.nout)
              for ei in self.items]
    g = self.graph_dev = MultiGraph(mitems)   # (graph_dev: what a profiled replay synchronizes)
    self._graph_bookkeeping()
    if debug_level() >= 1: print(f"TinyJit {self.name}: graph of {len(mitems)} items on {','.join(devs)}", file=sys.stderr)
    return g

  def _graph_bookkeeping(self) -> None:
    # every buffer slot a replay may swap: arguments and fresh outputs (the others stay as captured)
    self.graph_slots = sorted({(j, k) for j, k, _ in self.in_slots} | {s for _, _, slots in self.out_bases for s in slots})
    kernels = [ei for ei in self.items if ei.kind == "kernel"]
    moved = sum(ei.bufs[0].nbytes if ei.kind == "copy" else sum(b.nbytes for b in ei.bufs) for ei in self.items)   # as ExecItem.run counts
    self.graph_counts = (len(kernels), sum(ei.kernel.ops for ei in kernels), moved)

  def _replay_profiled(self, dbg: int) -> None:
    """A replay recorded in the trace: one span for the replay on the device's track and one event per kernel inside it,
    from the graph's kernel_times (GPU timestamps placed from the replay's host start, or the CPU runner's clock
    readings around each launch). A graph whose replays complete on return but can't time its launches (the LLVM IR
    runner) is left for one launch at a time, each timed as in eager mode; a GPU graph too big to time runs untimed."""
    items = self.items
    track = next(b.device for ei in items for b in ei.bufs)
    st = profile.now_us()
    g = self.graph
    if g is not None and (g.timestamps or not g.completes_on_return):
      self._replay_graph(g, dbg)
      self.graph_dev.synchronize()
      dur = profile.now_us() - st
      if self.prof_args is None:   # (each launch's name and arguments are the same every replay: made once)
        self.prof_args = [(ei.kernel.name, {**engine.kernel_args(ei), "jit": self.name, "clock": g.clock}) if ei.kind == "kernel" else None for ei in items]
      # only the clock readings are kept now; the events are made when the trace is written
      profile.defer(functools.partial(_launch_events, track, self.prof_args, g.kernel_times(), st if g.clock == "gpu" else None))
      mode = "graph" if not g.completes_on_return else "launch list"
    else:
      for ei in items: ei.run(dbg)
      dur, mode = profile.now_us() - st, "one by one (profiled)"
    profile.add(f"TinyJit {self.name}", track, st, dur, "jit", {"kernels": len(items) if g is None else self.graph_counts[0], "mode": mode})

  def _replay_graph(self, g: Graph, dbg: int) -> None:
    items = self.items
    bufs = {(j, k): items[j].bufs[k].raw for j, k in self.graph_slots}
    # the Variables' values are the kernels' integer arguments, patched in place like the buffer pointers
    vals = {(j, items[j].kernel.compiled.vars.index(v)): items[j].var_vals[v] for j, v in self.var_slots}
    # a graph that completes on return (the CPU) times its replay for free; a GPU graph runs on while the host goes on
    if g.completes_on_return: GlobalCounters.time_sum_s += g.replay(bufs=bufs, vals=vals, wait=True) or 0.0
    else: g.replay(bufs=bufs, vals=vals)
    n, ops, mem = self.graph_counts
    GlobalCounters.kernel_count += n
    GlobalCounters.global_ops += ops
    GlobalCounters.global_mem += mem
    if dbg >= 2: print(f"TinyJit {self.name}: replayed a graph of {n} kernels", file=sys.stderr)

def _launch_events(track: str, args: list, times: list[tuple[int, int, int]], base_us: float | None) -> list[tuple]:
  """Trace events of one profiled replay's launches: (item, start ns, end ns) on the host's perf_counter clock
  (base_us None), or GPU timestamps placed from the replay's host start `base_us`."""
  t0 = min((s for _, s, _ in times), default=0)
  return [(args[i][0], track, base_us + (s - t0) / 1e3 if base_us is not None else profile.host_us(s), max(0, e - s) / 1e3, "kernel", args[i][1], 1)
          for i, s, e in times]

def _unbound(shape: tuple) -> tuple:
  """A shape with its bound Variables unbound: what a capture is keyed on (any value in range replays it)."""
  return tuple(unbind(s)[0] for s in shape)

def _var_vals(tensors, consts) -> dict:
  """{Variable: value} of this call: the bound Variables in the tensor arguments' shapes and the bound Variables
  passed as arguments."""
  return merge_vals(*(binds_of(s) for _, t in tensors for s in t.shape),
                    *(binds_of(v) for _, v in consts if isinstance(v, UOp)), what="TinyJit arguments")

def _out_tensors(ret) -> list[Tensor]:
  if isinstance(ret, Tensor): return _shards(ret)
  if isinstance(ret, (list, tuple)): return [t for x in ret for t in _out_tensors(x)]
  if isinstance(ret, dict): return [t for x in ret.values() for t in _out_tensors(x)]
  return []
