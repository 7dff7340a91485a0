"""Run PTX kernels on the CPU: parse once, decode every instruction into a closure, then execute whole
blocks (several blocks at once when they fit) as numpy arrays of threads.

Divergence: the threads of a chunk form groups keyed by program counter; the group with the lowest pc
runs, a branch taken by a subset splits its group, and groups meeting at the same pc merge again. This
"lowest pc first" order reconverges structured code and lets every thread of a block reach a bar.sync
together, so barriers need no extra work.

>>> import numpy as np
>>> from hcqrt.mock.ptx.memory import AddressSpace
>>> src = '''.version 8.0
... .target sm_90
... .address_size 64
... .visible .entry twice(.param .u64 out)
... {
...   .reg .b32 %r<3>; .reg .b64 %rd<4>;
...   ld.param.u64 %rd1, [out];
...   mov.u32 %r1, %tid.x;
...   mul.wide.u32 %rd2, %r1, 4;
...   add.s64 %rd3, %rd1, %rd2;
...   shl.b32 %r2, %r1, 1;
...   st.global.u32 [%rd3], %r2;
...   ret;
... }'''
>>> out = np.zeros(8, np.uint32); mem = AddressSpace(); mem.map(0x10000, out.view(np.uint8))
>>> PTXModule(src).launch("twice", mem, (1,1,1), (8,1,1), (0x10000).to_bytes(8, "little"))
>>> out.tolist()
[0, 2, 4, 6, 8, 10, 12, 14]
"""
from __future__ import annotations
import weakref
from collections.abc import Callable
import numpy as np
from .parser import PTXError, parse_ptx, KernelSource, Variable, Instr
from .memory import AddressSpace, MemoryFault
from .numerics import storage
from .ops import DecodeCtx, decode, EXIT
from .state import State, FlatSpace

def _layout(variables: list[Variable], start: int = 0) -> tuple[dict[str, int], int]:
  """Assign offsets to variables in declaration order with their alignment; returns (offsets, end)."""
  offs, end = {}, start
  for v in variables:
    if v.extern: continue
    end = -(-end // v.align) * v.align
    offs[v.name] = end; end += v.size
  return offs, end

class PTXKernel:
  """One decoded .entry. params: [(name, ptx_type, size, offset)] in the packed parameter buffer."""
  def __init__(self, src: KernelSource, module: PTXModule):
    self.name, self.line = src.name, src.line
    self.params: list[tuple[str, str, int, int]] = [tuple(p) for p in src.params]
    self.param_size = max((p.offset + p.size for p in src.params), default=0)
    shared_vars = [v for v in module.source.variables if v.space == "shared"] + [v for v in src.variables if v.space == "shared"]
    soffs, send = _layout(shared_vars)
    dyn = [v for v in shared_vars if v.extern]
    self.dynamic_shared_offset = -(-send // max([v.align for v in dyn] + [16])) * max([v.align for v in dyn] + [16]) if dyn else send
    for v in dyn: soffs[v.name] = self.dynamic_shared_offset
    self.shared_size = send
    loffs, self.local_size = _layout([v for v in src.variables if v.space == "local"])
    symbols: dict[str, tuple[str, int]] = {p.name: ("param", p.offset) for p in src.params}
    symbols.update({n: ("global", module.globals_va + o) for n, o in module.global_offsets.items()})
    symbols.update({n: ("const", o) for n, o in module.const_offsets.items()})
    symbols.update({n: ("shared", o) for n, o in soffs.items()})
    symbols.update({n: ("local", o) for n, o in loffs.items()})
    self.regs = dict(src.regs)
    self.instrs: list[Instr] = src.instrs
    ctx = DecodeCtx(self.regs, src.labels, symbols, self.name, module.source.target or "sm_90", module.source.version)
    # decode once; an implicit exit after the last instruction ends threads that fall off the end
    self.program = [decode(i, ctx) for i in src.instrs] + [lambda st, m: EXIT]
    self._zero = {k: storage(t).type(0) for k, t in self.regs.items()}

  def __repr__(self): return f"PTXKernel({self.name}, {len(self.params)} params, {len(self.instrs)} instructions)"

def _merge(a, b):
  if a is None or b is None: return None
  m = a | b
  return None if m.all() else m

class PTXModule:
  """A parsed PTX module whose kernels can be launched on an AddressSpace.

  Module-scope .global variables live in host memory mapped at `globals_va` in each AddressSpace the module
  launches on (mapped on first launch); .const data is a separate bank read by ld.const.
  """
  max_chunk_threads = 1 << 18        # threads run as one numpy array (whole blocks)
  max_steps = 20_000_000             # instruction-group steps per chunk before we call it a hang

  def __init__(self, ptx_source: str, globals_va: int = 0x7F00_0000_0000):
    self.source = parse_ptx(ptx_source)
    self.version, self.target, self.address_size = self.source.version, self.source.target, self.source.address_size
    self.globals_va = globals_va
    gvars = [v for v in self.source.variables if v.space == "global"]
    self.global_offsets, gsize = _layout(gvars)
    self.global_mem = np.zeros(max(16, -(-gsize // 16) * 16), np.uint8)
    for v in gvars:
      if v.init: self.global_mem[self.global_offsets[v.name]:self.global_offsets[v.name] + v.size] = np.frombuffer(v.init, np.uint8)
    cvars = [v for v in self.source.variables if v.space == "const"]
    self.const_offsets, csize = _layout(cvars)
    cmem = np.zeros(max(16, -(-csize // 16) * 16), np.uint8)
    for v in cvars:
      if v.init: cmem[self.const_offsets[v.name]:self.const_offsets[v.name] + v.size] = np.frombuffer(v.init, np.uint8)
    self.const = FlatSpace(cmem, "const")
    self._mapped_in: weakref.WeakSet = weakref.WeakSet()
    self.kernels: dict[str, PTXKernel] = {name: PTXKernel(k, self) for name, k in self.source.kernels.items()}

  def _map_globals(self, mem: AddressSpace) -> None:
    if not self.global_offsets or mem in self._mapped_in: return
    mem.map(self.globals_va, self.global_mem)
    self._mapped_in.add(mem)

  def launch(self, name: str, mem: AddressSpace, grid: tuple[int, int, int], block: tuple[int, int, int],
             params: bytes, shared_bytes: int = 0, blocks: tuple[int, int] | None = None,
             specials: dict[str, int] | None = None, windows: tuple[int | None, int | None] | None = None,
             abort: Callable[[], str | None] | None = None) -> None:
    """Run kernel `name` over `grid` blocks of `block` threads. `params` is the packed parameter buffer
    (laid out as in constant bank 0 from the parameter offset); `shared_bytes` is the dynamic shared memory.
    `blocks` = (first linear block id, count) runs only part of the grid (a GPU model interleaving grids).
    `specials` gives special registers a GPU reads from memory rather than the launch ({"%ntid.x": v, ...}), and
    `windows` the (shared, local) generic-address window bases cvta and generic accesses use. `abort` is asked every
    few thousand steps; a message from it stops the launch with a PTXError (a GPU model preempting a grid)."""
    k = self.kernels.get(name)
    if k is None: raise PTXError(f"no kernel {name!r} in module (has: {', '.join(self.kernels) or 'none'})")
    grid, block = tuple(int(x) for x in grid) + (1,) * (3 - len(grid)), tuple(int(x) for x in block) + (1,) * (3 - len(block))
    if min(grid) < 1 or min(block) < 1: raise PTXError(f"launch of {name}: empty grid {grid} or block {block}")
    tpb = block[0] * block[1] * block[2]
    if tpb > 1024: raise PTXError(f"launch of {name}: block {block} has {tpb} threads, more than 1024")
    params = bytes(params)
    if len(params) < k.param_size:
      raise PTXError(f"launch of {name}: parameter buffer has {len(params)} bytes, kernel needs {k.param_size} ({k.params})")
    parr = np.zeros(-(-max(len(params), 16) // 16) * 16, np.uint8); parr[:len(params)] = np.frombuffer(params, np.uint8)
    self._map_globals(mem)
    shared = k.dynamic_shared_offset + shared_bytes if shared_bytes else k.shared_size
    nblocks = grid[0] * grid[1] * grid[2]
    first, end = (0, nblocks) if blocks is None else (blocks[0], min(nblocks, blocks[0] + blocks[1]))
    per = max(1, self.max_chunk_threads // tpb)
    with np.errstate(all="ignore"):   # integer wraparound and IEEE specials are PTX semantics, not warnings
      for b0 in range(first, end, per):
        st = State(mem, grid, block, b0, min(per, end - b0), parr, shared, k.local_size, self.const, specials, windows)
        st.dynamic_smem = shared_bytes
        st.R = dict(k._zero)
        self._run(k, st, abort)

  def _run(self, k: PTXKernel, st: State, abort: Callable[[], str | None] | None = None) -> None:
    prog = k.program
    groups: dict[int, object] = {0: None}   # pc -> active mask (None: every thread of the chunk)
    steps, limit = 0, self.max_steps
    pc = 0
    try:
      while groups:
        pc = min(groups); mask = groups.pop(pc)
        while True:
          if groups and pc in groups: mask = _merge(mask, groups.pop(pc))
          r = prog[pc](st, mask)
          steps += 1
          if r is None: pc += 1; continue
          if r.__class__ is int:
            if r == EXIT: break
            pc = r
          else:   # divergent branch: park the taken threads at the target, continue with the rest
            tgt, taken, rest = r
            if tgt != EXIT: groups[tgt] = _merge(groups[tgt], taken) if tgt in groups else taken
            mask, pc = rest, pc + 1
          if groups and pc > min(groups):   # someone is behind: let the lowest pc catch up first
            groups[pc] = _merge(groups[pc], mask) if pc in groups else mask
            break
          if steps > limit: raise PTXError(f"kernel {k.name}: more than {limit} instruction steps (infinite loop?)")
          if abort is not None and not steps & 0xFFF and (why := abort()): raise PTXError(f"kernel {k.name}: {why}")
    except MemoryFault as e:
      i = k.instrs[pc] if pc < len(k.instrs) else None
      raise MemoryFault(f"kernel {k.name}, line {i.line if i else '?'} `{i.text if i else 'end'}`: {e}") from None
    except PTXError: raise
    except Exception as e:
      i = k.instrs[pc] if pc < len(k.instrs) else None
      raise PTXError(f"kernel {k.name}, line {i.line if i else '?'} `{i.text if i else 'end'}`: {type(e).__name__}: {e}") from e
