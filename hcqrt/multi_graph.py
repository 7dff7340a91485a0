"""One graph replay across several devices (interface.Graph): each device's launches in that device's own graph, and
the copies between devices, replayed in dependency order by one `replay` call.

Items come in capture order: `(device, GraphExec)` launches and `PeerCopy` copies between devices. Two items depend on
each other when they touch the same buffer (conservatively: read or write alike). Items are packed into segments: a
launch joins its device's latest segment when everything it depends on sits in that segment or an earlier one, else it
opens a new one; copies go to copy segments the same way. Segments run in order, so every item runs after what it
depends on, and each device's launches are as few sub-graphs as the dependencies allow (a data-parallel step: forward
and backward per device, the allreduce's copies, the optimizer per device).

A sub-graph is the device's own `graph()` (the CPU's launch list, an HCQ device's GraphReplay); a device that returns
None runs that segment's launches one at a time. A copy is `interface.copy_between`, as the engine copies: on devices
of one HCQ driver the source's transfer_to (a peer push, or a bounce through system memory), queued behind both
devices' earlier work, with the destination's later work waiting on a semaphore (no host wait, so a replay on GPUs
returns before it ran); elsewhere through the host (copyout waits for the source, copyin is queued on the destination).

  >>> from hcqrt.device import Device
  >>> g = MultiGraph([]); g.replay(); g.segments
  []
"""
from __future__ import annotations
import time
from dataclasses import dataclass
from typing import Any
from collections.abc import Sequence
from hcqrt.interface import Device, Graph, GraphExec, GraphItem, can_transfer, copy_between

@dataclass
class PeerCopy:
  """A copy of `nbytes` from buffer `src` on device `src_dev` to buffer `dst` on device `dst_dev`."""
  dst_dev: Device
  src_dev: Device
  dst: Any
  src: Any
  nbytes: int

MultiItem = tuple[Device, GraphItem] | PeerCopy

def _bufs(it: MultiItem) -> list[Any]:
  if isinstance(it, PeerCopy): return [it.dst, it.src]
  g = it[1]
  return list(g.bufs) if isinstance(g, GraphExec) else [getattr(g, "dst", None), getattr(g, "src", None)]

@dataclass
class Segment:
  """Items of one device (or copies: device None) that run together; `graph` is the device's sub-graph of them, None
  for copies and for a device that can't graph them (run one at a time)."""
  device: Device | None
  items: list[int]
  graph: Graph | None = None

class MultiGraph:
  """interface.Graph over several devices; see the module docstring. `replay(bufs={(item, arg): buf}, vals={(item, j):
  v})` patches like a one-device graph (a copy: arg 0 = dst, 1 = src), then runs every segment in order."""
  timestamps, clock = False, "host"
  def __init__(self, items: Sequence[MultiItem], timestamps: bool = False):
    self.items = list(items)
    self.segments: list[Segment] = []
    latest: dict[Any, int] = {}    # device (None: copies) -> its latest segment
    touched: dict[int, int] = {}   # id(buffer) -> the latest segment whose items touch it
    self.where: dict[int, tuple[int, int]] = {}   # item -> (segment, index in it)
    for i, it in enumerate(self.items):
      if not isinstance(it, PeerCopy) and not (isinstance(it, tuple) and len(it) == 2):
        raise TypeError(f"MultiGraph: item {i} is {it!r}; expected (device, GraphExec) or PeerCopy")
      key = None if isinstance(it, PeerCopy) else id(it[0])
      need = max((touched.get(id(b), -1) for b in _bufs(it) if b is not None), default=-1)
      s = latest.get(key, -1)
      if s < need or s < 0:   # (a later segment touched one of its buffers: it must run after that)
        self.segments.append(Segment(None if key is None else it[0], []))
        s = latest[key] = len(self.segments) - 1
      self.where[i] = (s, len(self.segments[s].items))
      self.segments[s].items.append(i)
      for b in _bufs(it):
        if b is not None: touched[id(b)] = max(touched.get(id(b), -1), s)
    for seg in self.segments:
      if seg.device is not None: seg.graph = seg.device.graph([self.items[i][1] for i in seg.items])
    self.paths: dict[int, str] = {}   # copy item -> the path its last replay took ("device" or "host")
    self.devices: list[Device] = list({id(d): d for it in self.items for d in ((it.dst_dev, it.src_dev) if isinstance(it, PeerCopy) else (it[0],))}.values())
    # every segment's work is done on return where every sub-graph's is (the CPU) and no copy is queued on a device
    self.completes_on_return = (all(s.graph.completes_on_return for s in self.segments if s.graph is not None) and
                                not any(can_transfer(it.src_dev, it.dst_dev) for it in self.items if isinstance(it, PeerCopy)))

  def __repr__(self) -> str:
    return f"<MultiGraph of {len(self.items)} items in {len(self.segments)} segments on {','.join(d.name for d in self.devices)}>"

  def replay(self, bufs: dict[tuple[int, int], Any] | None = None, vals: dict[tuple[int, int], int] | None = None,
             wait: bool = False) -> float | None:
    """Patch, then run every segment in order; `wait`: wait for every device and return the seconds it took."""
    sub_bufs: dict[int, dict] = {}
    sub_vals: dict[int, dict] = {}
    for (i, a), b in (bufs or {}).items():
      it = self.items[i]
      if isinstance(it, PeerCopy):
        if a == 0: it.dst = b
        else: it.src = b
        continue
      s, j = self.where[i]
      if self.segments[s].graph is not None: sub_bufs.setdefault(s, {})[(j, a)] = b
      else: it[1].bufs = [b if k == a else x for k, x in enumerate(it[1].bufs)]
    for (i, v), x in (vals or {}).items():
      s, j = self.where[i]
      if self.segments[s].graph is not None: sub_vals.setdefault(s, {})[(j, v)] = x
      else: self.items[i][1].vals = [x if k == v else y for k, y in enumerate(self.items[i][1].vals)]
    t0 = time.perf_counter()
    for s, seg in enumerate(self.segments):
      if seg.graph is not None: seg.graph.replay(bufs=sub_bufs.get(s), vals=sub_vals.get(s))
      elif seg.device is not None:
        for i in seg.items:
          g = self.items[i][1]
          g.prog(*g.bufs, global_size=g.global_size, local_size=g.local_size, threads=g.threads, vals=g.vals)
        seg.device.synchronize()
      else:
        for i in seg.items: self._copy(i)
    if not wait: return None
    self.synchronize()
    return time.perf_counter() - t0

  def _copy(self, i: int) -> None:
    c = self.items[i]
    self.paths[i] = copy_between(c.dst_dev, c.dst, c.src_dev, c.src, c.nbytes)

  def synchronize(self, timeout_s: float | None = None) -> None:
    """Wait for every device of the graph."""
    for d in self.devices: d.synchronize(timeout_s)

  def kernel_times(self) -> list[tuple[int, int, int]]:
    """No per-launch times across devices (profiled replays time the whole graph)."""
    return []
