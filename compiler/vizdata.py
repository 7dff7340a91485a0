"""What VIZ shows, recorded while the program runs (`VIZ=1`): each realize's schedule (compiler/explain.py), each
compiled kernel's UOp graph after every stage (the nodes a stage made are marked), its opts, source and machine code.
frontend/viz.py saves it with the profiler's trace and serves or exports the page.

>>> from compiler.uop import UOp, Ops
>>> from compiler.dtypes import dtypes
>>> a = UOp.const(dtypes.int, 1); b = UOp(Ops.ADD, dtypes.int, (a, a))
>>> g = uop_graph(b, set()); [n["op"] for n in g["nodes"]], [n["new"] for n in g["nodes"]]
(['CONST', 'ADD'], [True, True])
"""
from __future__ import annotations
from compiler.uop import UOp
from compiler.settings import flag

ENABLED: bool = flag("VIZ")
realizes: list[dict] = []
kernels: list[dict] = []

def _keys(sink: UOp) -> tuple[list[UOp], dict[UOp, str]]:
  """Each node's structural key (op, dtype, arg and its sources' keys): equal keys are the same computation."""
  topo, key = sink.toposort(), {}
  for u in topo: key[u] = f"{u.op.name}|{u.dtype}|{u.arg!r}|{','.join(key[s] for s in u.src)}"
  return topo, key

def uop_graph(sink: UOp, before: set[str]) -> dict:
  """{"nodes": [{id, op, dtype, arg, src, new}]}; `new`: the node's key is not in `before` (this stage made it)."""
  topo, key = _keys(sink)
  num = {u: i for i, u in enumerate(topo)}
  return {"nodes": [{"id": num[u], "op": u.op.name, "dtype": str(u.dtype) if u.dtype is not None else "", "arg": repr(u.arg)[:60],
                     "src": [num[s] for s in u.src], "new": key[u] not in before} for u in topo],
          "keys": sorted(set(key.values()))}

class KernelRecord:
  """The stages of one compile_kernel call."""
  def __init__(self, name: str, device: str):
    self.d: dict = {"name": name, "device": device, "stages": [], "opts": [], "src": "", "asm": ""}
    self.prev: set[str] = set()
  def stage(self, name: str, sink: UOp) -> None:
    g = uop_graph(sink, self.prev)
    self.prev = set(g.pop("keys"))
    self.d["stages"].append({"name": name, "changed": sum(n["new"] for n in g["nodes"]), **g})
  def done(self, opts: list, src: str, asm: str) -> None:
    self.d.update(opts=[str(o) for o in opts], src=src, asm=asm)
    kernels.append(self.d)

def add_realize(explained: dict, items: list) -> None:
  """One realize's schedule (explain_schedule's result), in program order."""
  realizes.append(explained)
