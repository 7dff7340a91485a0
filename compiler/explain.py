"""What a schedule did, for people: each kernel with the tensor ops fused into it, the user source lines that built them
(compiler/lazy.py TRACK_SOURCE), and why it is a kernel of its own. DEBUG=3 prints it; VIZ draws it as a graph.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.dtypes import dtypes
>>> x = LazyBuffer.empty((4,), dtypes.float32, "CPU"); x.buffer = object()
>>> out = x.alu(Ops.ADD, x)
>>> k = explain_schedule(create_schedule([out]), [out])["kernels"][0]
>>> k["ops"], k["why"]
(['ADD'], 'its output was asked for (realize/numpy/item)')
"""
from __future__ import annotations
from compiler.lazy import LazyBuffer, source_lines
from compiler.schedule import ScheduleItem
from compiler.uop import Ops

def _fused_nodes(si: ScheduleItem, stop: set[int]) -> list[LazyBuffer]:
  """The lazy bases computed inside `si`'s kernel: from its outputs back to (not into) its inputs."""
  out, seen, todo = [], set(), [o.base for o in si.outputs]
  while todo:
    b = todo.pop()
    if b.id in seen: continue
    seen.add(b.id)
    out.append(b)
    for s in b.srcs:
      sb = s.base
      if sb.id not in stop and sb.id not in seen and sb.op not in (None, Ops.EMPTY): todo.append(sb)
  return sorted(out, key=lambda b: b.id)

def explain_schedule(items: list[ScheduleItem], requested: list[LazyBuffer]) -> dict:
  """{"kernels": [{name, kind, ops, lines, why, outputs, inputs, nodes: the lazy ops fused in}], "edges": [(from kernel, to kernel)]}.
  Call it before the schedule runs (running drops the lazy graph)."""
  req = {lb.base.id for lb in requested}
  made_by = {o.base.id: i for i, si in enumerate(items) for o in si.outputs}
  readers: dict[int, list[int]] = {}
  for j, si in enumerate(items):
    for b in si.inputs:
      if (i := made_by.get(b.base.id)) is not None: readers.setdefault(i, []).append(j)
  kernels, edges = [], []
  for i, si in enumerate(items):
    stop = {b.base.id for b in si.inputs}
    nodes = _fused_nodes(si, stop) if si.kind == "kernel" else []
    ops = [n.op.name for n in nodes if n.op is not None]
    lines = sorted({source_lines[n.id] for n in nodes if n.id in source_lines})
    if si.kind == "copy": why = f"a copy to {si.outputs[0].device}"
    elif si.assign_targets: why = "an in-place write (assign) into an existing buffer"
    elif any(o.base.id in req for o in si.outputs): why = "its output was asked for (realize/numpy/item)"
    elif (rd := readers.get(i)):
      red = " (a reduction's result: later ops read it at other indices)" if any(n.op is Ops.REDUCE for n in nodes) else ""
      why = f"its output is read by kernel{'s' if len(rd) > 1 else ''} {', '.join(items[j].name for j in rd)}{red}"
    else: why = "its output is kept (a live tensor)"
    kernels.append({"name": si.name, "kind": si.kind, "ops": ops, "lines": lines, "why": why, "nodes": [{"id": n.id, "op": n.op.name, "shape": str(tuple(n.shape)), "src": [x.base.id for x in n.srcs]}
                                                                          for n in nodes],
                    "outputs": [f"{tuple(o.shape)} {o.dtype}" for o in si.outputs],
                    "inputs": [f"{tuple(b.shape)} {b.dtype}" for b in si.inputs]})
    edges += [(made_by[b.base.id], i) for b in si.inputs if b.base.id in made_by]
  return {"kernels": kernels, "edges": edges}

def format_schedule(ex: dict) -> str:
  """DEBUG=3's text of explain_schedule's result."""
  out = [f"schedule: {len(ex['kernels'])} items"]
  for i, k in enumerate(ex["kernels"]):
    out.append(f"  [{i}] {k['kind']} {k['name']}: out {', '.join(k['outputs'])}; in {', '.join(k['inputs']) or '-'}")
    if (ops := [o for o in k["ops"] if o != "CONST"]): out.append(f"      ops: {' '.join(ops)}")
    if k["lines"]: out.append(f"      from: {', '.join(k['lines'][:6])}{' ...' if len(k['lines']) > 6 else ''}")
    out.append(f"      separate because {k['why']}")
  return "\n".join(out)
