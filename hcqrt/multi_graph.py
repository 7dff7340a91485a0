"""One graph replay across several devices (interface.Graph): each device's launches in that device's own graph, and
the copies between devices, replayed in dependency order by one `replay` call.

Items come in capture order: `(device, GraphExec[, nout])` launches (outputs first: the first `nout` buffers, default
1, are written, the rest read) and `PeerCopy` copies between devices (read src, write dst). An item depends on the
earlier items it must follow for each buffer (`dependencies`: read after write, write after read, write after write;
two reads do not order each other). Items are packed into segments by phases (`pack`): a phase runs each device's
segment, then its copies; an item takes the earliest phase its dependencies allow, then moves as late as its
dependents allow into a phase where its device has work already. So a device's launches split only where a copy must
run between them (a data-parallel step: forward and backward per device, the allreduce's copies, the sums and the
optimizer per device).

On HCQ devices of one driver where every copy can be a peer push (`_one_graph_per_device`), there are no segments at
replay: each device gets ONE GraphReplay of its items in capture order, a copy is a peer push on its source's copy
engine inside the source's graph, and the cross-device ordering is semaphores on the GPUs (a GraphWaitSignal on the
other graph's signal before an item, a GraphRelease after the item it waits for), their values patched per replay like
the graph's own. A replay is then one submission per used queue of each device and no host copy. A copy between a
pair without P2P is a bounce inside the graphs, in HCQDevice.bounce_to's chunks and order: each chunk is a fill on the
source's copy engine into one of its bounce slots (system memory the destination maps), then a drain on the
destination's copy engine that waits on the source's graph signal for the fill; a fill into a slot waits for that
slot's previous drain. Otherwise (the CPU, devices of different drivers) the segments below run in order.

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
import time, weakref
from dataclasses import dataclass
from typing import Any
from collections.abc import Sequence
from hcqrt.interface import Device, Graph, GraphCopy, GraphExec, GraphItem, can_transfer, copy_between, peer_ok
from hcqrt.hcq import GraphPeerCopy, GraphRelease, GraphReplay, GraphWaitSignal, HCQDevice, buf_addr

@dataclass
class PeerCopy:
  """A copy of `nbytes` from buffer `src` on device `src_dev` to buffer `dst` on device `dst_dev`."""
  dst_dev: Device
  src_dev: Device
  dst: Any
  src: Any
  nbytes: int

MultiItem = tuple[Device, GraphItem] | tuple[Device, GraphItem, int] | PeerCopy

@dataclass
class Segment:
  """Items of one device (or copies: device None) that run together; `graph` is the device's sub-graph of them, None
  for copies and for a device that can't graph them (run one at a time)."""
  device: Device | None
  items: list[int]
  graph: Graph | None = None

def accesses(it: MultiItem) -> tuple[list[Any], list[Any]]:
  """(buffers read, buffers written) by an item: a launch writes its first `nout` buffers (outputs first, as the engine's
  ExecItem; an in-place update counts as a write, which orders it after every earlier reader and writer) and reads the
  rest; a copy reads src and writes dst; a timestamp touches no buffer.

  >>> accesses(("dev", GraphExec(None, ["m", "v", "g"]), 2)), accesses(PeerCopy(None, None, "y", "x", 4))
  ((['g'], ['m', 'v']), (['x'], ['y']))
  """
  if isinstance(it, PeerCopy): return [it.src], [it.dst]
  g, nout = it[1], (it[2] if len(it) > 2 else 1)   # type: ignore[misc]
  if isinstance(g, GraphExec): return list(g.bufs[nout:]), list(g.bufs[:nout])
  if isinstance(g, GraphCopy): return [g.src], [g.dst]
  return [], []

def dependencies(items: Sequence[MultiItem]) -> list[set[int]]:
  """For each item, the earlier items it must run after: the last writer of each buffer it reads (RAW), and the last
  writer and every reader since of each buffer it writes (WAW, WAR). Reads of one buffer do not order each other.

  >>> x, y = object(), object()
  >>> dependencies([PeerCopy(None, None, y, x, 4), PeerCopy(None, None, x, y, 4), PeerCopy(None, None, y, y, 4)])
  [set(), {0}, {0, 1}]
  """
  last_write: dict[int, int] = {}
  readers: dict[int, list[int]] = {}
  out: list[set[int]] = []
  for i, it in enumerate(items):
    rd, wr = accesses(it)
    need = {last_write[id(b)] for b in rd + wr if b is not None and id(b) in last_write}
    need.update(j for b in wr if b is not None for j in readers.get(id(b), ()))
    for b in rd:
      if b is not None: readers.setdefault(id(b), []).append(i)
    for b in wr:
      if b is not None: last_write[id(b)], readers[id(b)] = i, []
    need.discard(i)
    out.append(need)
  return out

def _key(it: MultiItem) -> int | None: return None if isinstance(it, PeerCopy) else id(it[0])

def pack(items: Sequence[MultiItem], deps: Sequence[set[int]]) -> list[Segment]:
  """Segments in run order. Phases: each phase runs every device's segment of it, then its copies. An item takes the
  earliest phase its dependencies allow (a launch: the phase of a launch it depends on on its own device, one more than
  a copy's or another device's; a copy: the phase of what it depends on), then, latest item first, moves to the latest
  phase its dependents allow where its device already has a segment, which can leave an earlier segment empty. So a
  device's launches split only where a copy must run between them. Device segments of a phase are in order of their
  first item (the capture order where no dependency says otherwise).

  >>> x, y = object(), object()
  >>> items = [("B", GraphExec(None, [object()])), ("A", GraphExec(None, [x])), PeerCopy("B", "A", y, x, 4), ("B", GraphExec(None, [object(), y]))]
  >>> [(s.device, s.items) for s in pack(items, dependencies(items))]
  [('A', [1]), (None, [2]), ('B', [0, 3])]
  """
  n = len(items)
  phase = [0] * n
  keys = [_key(it) for it in items]
  for i in range(n):
    for j in deps[i]:
      phase[i] = max(phase[i], phase[j] + (keys[i] is not None and keys[j] != keys[i]))
  users: list[list[int]] = [[] for _ in range(n)]
  for i in range(n):
    for j in deps[i]: users[j].append(i)
  count: dict[tuple[int | None, int], int] = {}
  for i in range(n): count[(keys[i], phase[i])] = count.get((keys[i], phase[i]), 0) + 1
  top = max(phase, default=0)
  for i in reversed(range(n)):
    # the latest phase the users allow: a copy or a launch of this device may share the phase, another device's
    # launch must come a phase later (a copy user of a copy: the same copy segment, in capture order)
    limit = min((phase[k] - (keys[k] is not None and keys[k] != keys[i]) for k in users[i]), default=top)
    best = next((p for p in range(limit, phase[i], -1) if count.get((keys[i], p))), None)
    if best is not None:
      count[(keys[i], phase[i])] -= 1; count[(keys[i], best)] += 1; phase[i] = best
  groups: dict[tuple[int, int | None], list[int]] = {}
  for i in range(n): groups.setdefault((phase[i], keys[i]), []).append(i)
  # order: by phase; inside a phase the device segments (by first item) before the copy segment
  order = sorted(groups, key=lambda k: (k[0], k[1] is None, groups[k][0]))
  return [Segment(None if k[1] is None else items[groups[k][0]][0], groups[k]) for k in order]   # type: ignore[index]

def _free_graph_signals(devs: list[HCQDevice], sigs: list, lasts: list[list[int]]) -> None:
  """Finalizer of a one-graph-per-device MultiGraph: its graph signals are freed by the devices' next new_signal once
  every graph signal has reached its last replay's end (never waits: it may run on any thread)."""
  conds = [(s, last[0]) for s, last in zip(sigs, lasts) if last[0]]
  for d in devs: d.signals.free_when(sigs, conds)

class MultiGraph:
  """interface.Graph over several devices; see the module docstring. `replay(bufs={(item, arg): buf}, vals={(item, j):
  v})` patches like a one-device graph (a copy: arg 0 = dst, 1 = src), then runs every segment in order."""
  timestamps, clock = False, "host"
  skip_waits: frozenset[str] = frozenset()   # test hook (replay): the one-kick wait kinds to drop
  def __init__(self, items: Sequence[MultiItem], timestamps: bool = False, one_kick: bool = True):
    self.items = list(items)
    for i, it in enumerate(self.items):
      if not isinstance(it, PeerCopy) and not (isinstance(it, tuple) and len(it) in (2, 3)):
        raise TypeError(f"MultiGraph: item {i} is {it!r}; expected (device, GraphExec[, nout]) or PeerCopy")
    self.deps = dependencies(self.items)
    self.segments = pack(self.items, self.deps)
    self.where: dict[int, tuple[int, int]] = {i: (s, j) for s, seg in enumerate(self.segments) for j, i in enumerate(seg.items)}
    self.paths: dict[int, str] = {}   # copy item -> the path its last replay took ("device" or "host")
    self.devices: list[Device] = list({id(d): d for it in self.items for d in ((it.dst_dev, it.src_dev) if isinstance(it, PeerCopy) else (it[0],))}.values())
    # HCQ devices with peer access: one graph per device, the copies and cross-device waits inside (one kick per queue)
    self.graphs: list[GraphReplay] | None = self._one_graph_per_device() if one_kick else None
    if self.graphs is not None:
      self.completes_on_return = False
      self.paths = {i: "device" for i, it in enumerate(self.items) if isinstance(it, PeerCopy)}
      return
    for seg in self.segments:
      if seg.device is not None: seg.graph = seg.device.graph([self.items[i][1] for i in seg.items])
    # every segment's work is done on return where every sub-graph's is (the CPU) and no copy is queued on a device
    self.completes_on_return = (all(s.graph.completes_on_return for s in self.segments if s.graph is not None) and
                                not any(can_transfer(it.src_dev, it.dst_dev) for it in self.items if isinstance(it, PeerCopy)))

  def _one_graph_per_device(self) -> list[GraphReplay] | None:
    """Where every device is an HCQ device of one driver: each device's items in one GraphReplay, in capture order. A
    copy is a GraphPeerCopy on its source's copy engine where the pair has P2P, else a bounce: fills in the source's
    graph, drains in the destination's (`_bounce_parts`), the copy counting as the destination's item. An item that
    depends on an item of another device (`deps`) first waits (GraphWaitSignal) for that device's graph signal to reach
    the GraphRelease placed right after that item. Each graph starts after the work submitted before the replay on every
    device of the graph (a copy may overwrite what another device still reads), and ends after the copies pushed into
    it (its timeline then covers them, as transfer_to's wait_for). None: replay by segments."""
    devs = self.devices
    if len(devs) < 2 or len({type(d) for d in devs}) != 1 or not all(isinstance(d, HCQDevice) and d.peer_copies and not d.submit_runs_inline for d in devs): return None
    for it in self.items:
      if isinstance(it, PeerCopy):
        if it.src_dev is it.dst_dev: return None
      elif not isinstance(it[1], (GraphExec, GraphCopy)): return None
    # linked before peer_ok is read: a driver that refuses ENABLE turns the pair into "no-p2p" in _link (review g26 row 2)
    for a in devs:
      for b in devs:
        if a is not b: a._link(b)   # signals mapped both ways, peer access enabled
    bounce = {i for i, it in enumerate(self.items) if isinstance(it, PeerCopy) and not peer_ok(it.src_dev.peer_status(it.dst_dev))}
    dk = {id(d): k for k, d in enumerate(devs)}
    # the device whose graph finishes an item: a push's source, a bounce's destination (its drains write dst)
    owner = [dk[id(it.dst_dev if i in bounce else it.src_dev if isinstance(it, PeerCopy) else it[0])] for i, it in enumerate(self.items)]
    # which items of other devices each item waits for (the latest of each device; earlier ones are covered by it)
    waited: list[dict[int, int]] = [{} for _ in devs]
    waits: list[list[int]] = [[] for _ in self.items]
    for i, need in enumerate(self.deps):
      k = owner[i]
      last: dict[int, int] = {}
      for j in need:
        if owner[j] != k: last[owner[j]] = max(last.get(owner[j], -1), j)
      for e, j in sorted(last.items()):
        if j > waited[k].get(e, -1): waits[i].append(j); waited[k][e] = j
    # a bounce's fills (on its source) first wait for what the copy depends on on other devices than the source
    fill_waits: dict[int, list[int]] = {}
    for i in sorted(bounce):
      fk, last = dk[id(self.items[i].src_dev)], {}
      for j in self.deps[i]:
        if owner[j] != fk: last[owner[j]] = max(last.get(owner[j], -1), j)
      fill_waits[i] = sorted(last.values())
    # at the end, each device waits for the copies pushed into it that nothing in it waited for
    tail: list[list[int]] = [[] for _ in devs]
    for k in range(len(devs)):
      into: dict[int, int] = {}
      for i, it in enumerate(self.items):
        if isinstance(it, PeerCopy) and i not in bounce and dk[id(it.dst_dev)] == k: into[owner[i]] = i
      tail[k] = [j for e, j in sorted(into.items()) if j > waited[k].get(e, -1)]
    releases = {j: GraphRelease() for w in waits + tail + list(fill_waits.values()) for j in w}
    lists: list[list[GraphItem]] = [[] for _ in devs]
    self.starts: list[tuple[GraphWaitSignal, Device]] = []   # (wait, device whose timeline it waits for)
    self.cross: list[tuple[GraphWaitSignal, int, GraphRelease]] = []   # (wait, releasing device, its release point)
    self.tails: set[int] = set()   # ids of the waits in `cross` that are tail waits (the test hook skip_waits tells them apart)
    self.slot_waits: set[int] = set()   # ids of the waits in `cross` for a bounce slot's previous drain (skip_waits "slot")
    for k in range(len(devs)):
      for e, other in enumerate(devs):
        if e != k: self.starts.append((w := GraphWaitSignal(other.timeline_signal), other)); lists[k].append(w)
    sigs = [d.new_signal(name="graph") for d in devs]   # (made first: graphs wait on each other's)
    self.waiter: dict[int, int] = {}   # id of a wait in `cross` -> the device whose graph waits
    def wait_for(k: int, j: int) -> None:
      self.cross.append((w := GraphWaitSignal(sigs[owner[j]]), owner[j], releases[j])); lists[k].append(w); self.waiter[id(w)] = k
    def wait_rel(k: int, e: int, rel: GraphRelease) -> GraphWaitSignal:
      self.cross.append((w := GraphWaitSignal(sigs[e]), e, rel)); lists[k].append(w); self.waiter[id(w)] = k; return w
    self.local: dict[int, tuple[int, int]] = {}   # item -> (device, index in its graph)
    # a bounce item -> (source, [(fill's index in the source's graph, offset)], destination, [(drain's index, offset)])
    self.bounces: dict[int, tuple[int, list[tuple[int, int]], int, list[tuple[int, int]]]] = {}
    slot_last: dict[tuple[int, int], tuple[int, GraphRelease]] = {}   # (device, slot) -> (device, release) of its last drain
    for i, it in enumerate(self.items):
      k = owner[i]
      if i in bounce:
        self._bounce_parts(i, it, dk, lists, wait_for, wait_rel, fill_waits[i], waits[i], slot_last)
        if i in releases: lists[k].append(releases[i])
        continue
      for j in waits[i]: wait_for(k, j)
      self.local[i] = (k, len(lists[k]))
      lists[k].append(GraphPeerCopy(it.dst, it.src, it.nbytes, dst_dev=it.dst_dev) if isinstance(it, PeerCopy) else it[1])
      if i in releases: lists[k].append(releases[i])
    for k in range(len(devs)):
      for j in tail[k]: wait_for(k, j); self.tails.add(id(self.cross[-1][0]))
    self.slots_used = {key: e for key, (e, _) in slot_last.items()}   # (source, slot) -> the device that drains it last
    graphs = [GraphReplay(d, lst, sig=sigs[k]) for k, (d, lst) in enumerate(zip(devs, lists))]
    # the graph signals go when the MultiGraph does, once every graph is past its last replay: until then a queue of
    # one graph may still wait on another's signal (a slot handed out again would reset it under that wait)
    weakref.finalize(self, _free_graph_signals, devs, sigs, [g._last for g in graphs]).atexit = False
    return graphs

  def _bounce_parts(self, i: int, it: PeerCopy, dk: dict[int, int], lists: list[list[GraphItem]], wait_for, wait_rel,
                    fill_waits: list[int], drain_waits: list[int], slot_last: dict) -> None:
    """Copy item `i` without P2P as HCQDevice.bounce_to does it, in the graphs: chunk c goes through the source's bounce
    slot c % 2 (BOUNCE_CHUNK bytes), a fill on the source's copy engine after the slot's previous drain (in this
    replay: a wait on that drain's release; before it: the start waits), then a drain on the destination's copy engine
    after a wait on the fill's release. The destination's copies read the slot where it is mapped there."""
    src_dev, dst_dev = it.src_dev, it.dst_dev
    fk, k = dk[id(src_dev)], dk[id(dst_dev)]
    slots, chunk = src_dev.bounce_buffers(), src_dev.BOUNCE_CHUNK
    for j in fill_waits: wait_for(fk, j)
    for j in drain_waits: wait_for(k, j)
    fills, drains = [], []
    for c, off in enumerate(range(0, it.nbytes, chunk)):
      slot, n = c % len(slots), min(chunk, it.nbytes - off)
      if (prev := slot_last.get((fk, slot))) is not None: self.slot_waits.add(id(wait_rel(fk, prev[0], prev[1])))
      fills.append((len(lists[fk]), off)); lists[fk].append(GraphCopy(slots[slot], buf_addr(it.src) + off, n))
      lists[fk].append(filled := GraphRelease())
      wait_rel(k, fk, filled)
      drains.append((len(lists[k]), off)); lists[k].append(GraphCopy(buf_addr(it.dst) + off, dst_dev.map_peer(src_dev, slots[slot]), n))
      lists[k].append(drained := GraphRelease())
      slot_last[(fk, slot)] = (k, drained)
    self.bounces[i] = (fk, fills, k, drains)

  def __repr__(self) -> str:
    how = "one graph per device" if self.graphs is not None else f"{len(self.segments)} segments"
    return f"<MultiGraph of {len(self.items)} items in {how} on {','.join(d.name for d in self.devices)}>"

  def replay(self, bufs: dict[tuple[int, int], Any] | None = None, vals: dict[tuple[int, int], int] | None = None,
             wait: bool = False) -> float | None:
    """Patch, then run every segment in order (or, one graph per device: submit each once); `wait`: wait for every
    device and return the seconds it took."""
    # a device known to be unusable (lost, recovering, a fault reported) fails the replay before anything is submitted
    # anywhere: submitting the devices before it would leave their parts waiting for it (HCQDevice.raise_if_unusable)
    for d in self.devices:
      if isinstance(d, HCQDevice): d.raise_if_unusable()
    if self.graphs is not None: return self._replay_graphs(bufs, vals, wait)
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

  def _replay_graphs(self, bufs: dict[tuple[int, int], Any] | None, vals: dict[tuple[int, int], int] | None, wait: bool) -> float | None:
    graphs = self.graphs
    assert graphs is not None
    sub_bufs: list[dict] = [{} for _ in graphs]
    sub_vals: list[dict] = [{} for _ in graphs]
    for (i, a), b in (bufs or {}).items():
      if i in self.bounces:   # a bounce: the fills read src, the drains write dst, each chunk at its offset
        fk, fills, k, drains = self.bounces[i]
        for j, off in (drains if a == 0 else fills): sub_bufs[k if a == 0 else fk][(j, a)] = buf_addr(b) + off
      else:
        k, j = self.local[i]
        sub_bufs[k][(j, a)] = b
      if isinstance(c := self.items[i], PeerCopy):   # (kept current: a later fallback or repr shows the buffers in use)
        if a == 0: c.dst = b
        else: c.src = b
    for (i, v), x in (vals or {}).items():
      k, j = self.local[i]
      sub_vals[k][(j, v)] = x
    # the values every wait is patched to, taken before anything is submitted: each graph starts after what was
    # submitted before this replay on every device (not after the other graphs of this replay), and a release point
    # of this replay is the releasing graph's next base + its step
    # test hooks: HCQDevice.skip_cross_wait drops every cross-device wait, `skip_waits` only the kinds it names
    # ("start", "cross", "tail", "slot"), so a test can show that each kind is needed (the mocks must then go wrong)
    skip = {"start", "cross", "tail", "slot"} if HCQDevice.skip_cross_wait else self.skip_waits
    for w, other in self.starts: w.value = 0 if "start" in skip else other.timeline_value - 1
    for w, e, rel in self.cross:
      kind = "tail" if id(w) in self.tails else "slot" if id(w) in self.slot_waits else "cross"
      w.value = 0 if kind in skip else graphs[e].next_base() + rel.step
    # a bounce slot last drained by an eager bounce_to into a device outside the graph (no start wait covers it)
    devs = self.devices
    for (fk, slot), _ in self.slots_used.items():
      if (last := devs[fk]._peer_state().get("drained", {}).get(slot)) is not None and all(last[0] is not d for d in devs):
        last[0].wait_signal(last[0].timeline_signal, last[1])
    t0 = time.perf_counter()
    ends = [g._last[0] for g in graphs]
    for k, g in enumerate(graphs):
      try: g.replay(bufs=sub_bufs[k], vals=sub_vals[k])
      except BaseException as e:
        self._graph_failed(e, k, ends)
        raise
    # later eager bounces from these sources wait for the graph's drains: the draining device's timeline after it
    for (fk, slot), e in self.slots_used.items(): devs[fk]._peer_state().setdefault("drained", {})[slot] = (devs[e], devs[e].timeline_value - 1)
    if not wait: return None
    self.synchronize()
    return time.perf_counter() - t0

  def _graph_failed(self, e: BaseException, k: int, ends: list[int]) -> None:
    """Device k's graph raised in its replay (its own record: GraphReplay._submit_failed); the graphs before it were
    submitted. One of those that waits on a graph that got nothing this replay (k's, if it reverted, and every one after
    it), or on k's when k counted as submitted but its device was lost meanwhile, waits for values no GPU will write, and
    blocks its queue: it is recovered (dropped, its promised values written).
    Later replays then wait only for what may run. `e`'s message names device k first and says what happened."""
    graphs, devs = self.graphs, self.devices
    assert graphs is not None
    unsent = set(range(k + 1, len(graphs))) | ({k} if graphs[k]._last[0] == ends[k] else set())
    # k's graph counted as submitted but its device was lost meanwhile (its recovery failed): its end never comes either
    never = unsent | ({k} if getattr(devs[k], "lost", None) and not graphs[k].sig.reached(graphs[k]._last[0]) else set())
    waits_on: dict[int, set[int]] = {}
    for w, src, _ in self.cross:
      if src in never and self.waiter[id(w)] < k: waits_on.setdefault(self.waiter[id(w)], set()).add(src)
    notes = []
    for j in sorted(waits_on):
      if graphs[j].sig.reached(graphs[j]._last[0]): continue   # (already done: a recovery during k's submit, or no wait left)
      d = devs[j]
      notes.append(f"{d.name}'s graph, submitted before it, waits for a graph that " + ("got nothing" if waits_on[j] & unsent else "can never finish") +
                   ": " + ("its device is lost, so waits for it fail" if getattr(d, "lost", None) else d.recover()))
    sent = [d.name for d in devs[:k]]
    msg = str(e) if str(e).startswith(f"{devs[k].name}:") else f"{devs[k].name}: {e}"
    e.args = (f"{msg}; the MultiGraph replay stopped at this device's graph" + (f" (submitted before it: {', '.join(sent)})" if sent else "") +
              "".join(f"; {n}" for n in notes),)

  def _copy(self, i: int) -> None:
    c = self.items[i]
    self.paths[i] = copy_between(c.dst_dev, c.dst, c.src_dev, c.src, c.nbytes)

  def synchronize(self, timeout_s: float | None = None) -> None:
    """Wait for every device of the graph."""
    for d in self.devices: d.synchronize(timeout_s)

  def kernel_times(self) -> list[tuple[int, int, int]]:
    """No per-launch times across devices (profiled replays time the whole graph)."""
    return []
