"""GPU launch geometry, decided once for every GPU renderer: `plan_launch(kernel, target) -> GpuPlan`.

On a GPU the output loops are the launch grid, and the renderers (compiler/render_ptx.py, compiler/render_llvm.py) only
print what this plan says: the special registers or intrinsics that read the ids, the div/rem that splits a merged axis
and the lane combine in shared memory. Tuning values are `Target` fields (compiler/target.py).
- Axes: the innermost output loop is x, the next one y, the outer ones merged into z; all of them merged into x when
  y or z would pass the target's `max_grid`. A loop of Variable size is no part of the grid (a launch is built once
  for every value): it stays a loop in the kernel.
- Block: up to `target.block` threads, x first, what is left along y. Threads past the end of an axis leave at once.
- Grouped reductions: a kernel with at most `group_max_outputs` outputs and a reduce loop of at least
  `group_min_reduce` gets one block per output (its output loops merged into x); lane l of the block runs iterations
  l, l+L, l+2L... of the longest loop of each REDUCE, and the lanes' partial results are combined in shared memory.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.lower import lower
>>> from compiler.dtypes import dtypes
>>> from compiler.target import Target
>>> gpu = Target("NV", "ptx", arch="sm_90", warp_size=32, gpu=True)
>>> x = LazyBuffer.empty((70, 1000), dtypes.float32, "NV"); x.buffer = object()
>>> plan_launch(lower(create_schedule([x.alu(Ops.ADD, x)])[0].ast), gpu).launch
Launch(global_size=(8, 70, 1), local_size=(128, 1, 1), threads=1)
>>> p = plan_launch(lower(create_schedule([x.r(Ops.ADD, (1,))])[0].ast), gpu)
>>> p.launch, p.lanes, [r.src[0].arg for r in p.grouped]
(Launch(global_size=(70, 1, 1), local_size=(128, 1, 1), threads=1), 128, [1000])
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from compiler.dtypes import dtypes
from compiler.uop import UOp, Ops
from compiler.lower import LoweredKernel
from compiler.linearize import linearize
from compiler.target import Target
from compiler.launch import Launch

# both renderers compute indices in signed 32-bit registers (PTX .s32 compares, LLVM i32 `icmp sge`)
INDEX_LIMIT = 2 ** 31

@dataclass(frozen=True)
class GridAxis:
  """One launch dimension: the output loops it carries (outermost first; merged ones are split by div/rem, the last
  varying fastest), their combined `extent`, the `threads` per block and `blocks` along it, and which ids a thread's
  index reads: block id * threads + thread id, without the block id where there is one block, without the thread id
  where a block covers one output (or its threads are the lanes of a grouped reduction)."""
  ranges: tuple[UOp, ...] = ()
  extent: int = 1
  threads: int = 1
  blocks: int = 1
  block_id: bool = False
  thread_id: bool = False

  @property
  def sizes(self) -> tuple[int, ...]: return tuple(r.src[0].arg for r in self.ranges)
  @property
  def guard(self) -> bool:
    """The last block runs past the extent: its extra threads must leave before they touch memory."""
    return self.extent % self.threads != 0

@dataclass(frozen=True)
class GpuPlan:
  """How a kernel launches: `axes` (x, y, z), the `block` (threads per block), and the reduce loops the lanes of a
  block share (`grouped`; empty: one thread per output)."""
  axes: tuple[GridAxis, GridAxis, GridAxis]
  block: tuple[int, int, int]
  grouped: frozenset[UOp] = frozenset()

  @property
  def grid(self) -> tuple[int, int, int]: return tuple(a.blocks for a in self.axes)
  @property
  def lanes(self) -> int:
    """Lanes sharing each grouped reduce loop (the stride of their iterations); 1 when nothing is grouped."""
    return self.block[0] if self.grouped else 1
  @property
  def threads(self) -> int: return math.prod(self.block)
  @property
  def launch(self) -> Launch:
    """The launch arguments of every run: blocks per grid dimension and threads per block."""
    return Launch(global_size=self.grid, local_size=self.block)

def plan_launch(k: LoweredKernel, target: Target, prog: list[UOp] | None = None) -> GpuPlan:
  """The launch of kernel `k` (linearized as `prog`; linearized here when None) on GPU `target`. Raises
  NotImplementedError naming the kernel when its grid doesn't fit the 32-bit index math or the target's `max_grid`."""
  if not target.gpu:
    raise ValueError(f"plan_launch: target {target.device} (renderer {target.renderer}) is no GPU; its output loops are loops, not a grid")
  grouped = grouped_reduces(k, target, linearize(k) if prog is None else prog)
  return _grouped_plan(k, target, grouped) if grouped else _grid_plan(k, target)

def grouped_reduces(k: LoweredKernel, target: Target, prog: list[UOp]) -> frozenset[UOp]:
  """The reduce loop of each REDUCE whose iterations the lanes of a block share (the longest of its loops), or none for
  one thread per output: enough outputs to fill the GPU, short loops, nested reductions, bool accumulators, Variable
  sizes, or tensor cores (the 32 lanes of a warp work on one tile together, compiler/opt/tc.py)."""
  reds = [u for u in prog if u.op is Ops.REDUCE]
  if not reds or any(r.dtype.scalar is dtypes.bool for r in reds) or k.symbolic(): return frozenset()
  if any(u.op is Ops.WMMA for u in prog): return frozenset()
  if math.prod(r.src[0].arg for r in k.global_ranges) > target.group_max_outputs: return frozenset()
  gset, depth = set(k.global_ranges), 0
  for u in prog:   # every accumulator lives outside every reduce loop: all lanes meet at each combine (a barrier)
    if u.op is Ops.RANGE and u not in gset: depth += 1
    elif u.op is Ops.ENDRANGE and u.src[0] not in gset: depth -= 1
    elif u.op is Ops.DEFINE_ACC and depth: return frozenset()
  strided: set[UOp] = set()
  for red in reds:
    if not (rngs := [r for r in red.src[1:] if r.op is Ops.RANGE]): return frozenset()
    strided.add(max(rngs, key=lambda r: r.src[0].arg))
  return frozenset(strided) if max(r.src[0].arg for r in strided) >= target.group_min_reduce else frozenset()

def _grouped_plan(k: LoweredKernel, target: Target, grouped: frozenset[UOp]) -> GpuPlan:
  """One block per output, the output loops merged into x (read from the block id alone), the lanes along x: a power
  of two (the combine halves them) no larger than the longest grouped loop needs."""
  lanes = min(target.group_lanes, 1 << (max(r.src[0].arg for r in grouped) - 1).bit_length())
  total = math.prod(r.src[0].arg for r in k.global_ranges)
  x = GridAxis(tuple(k.global_ranges), total, 1, total, block_id=True)
  return GpuPlan((x, GridAxis(), GridAxis()), (lanes, 1, 1), grouped)

def _grid_plan(k: LoweredKernel, target: Target) -> GpuPlan:
  """One thread per output: x the innermost output loop, y the next, z the rest (or everything along x when y or z
  would pass the grid's limit), blocks of up to target.block threads filled along x first."""
  # NVIDIA and AMD both launch 3-D grids (CUDA gridDim/blockDim; AMD's dispatch has x, y and z sizes and the workitem
  # and workgroup ids of all three). The LLVM renderer used to merge every AMD grid into x, paying a div/rem per merged
  # loop in every thread where PTX read the id of the axis: both now take these axes.
  gr = tuple(r for r in k.global_ranges if r.src[0].op is Ops.CONST)
  if (bad := [r.src[0].arg for r in gr if r.src[0].arg < 1]):   # e.g. a size past int32 that wrapped: no launch shape
    raise NotImplementedError(f"plan_launch: kernel {k.name} has a loop of size {bad[0]} (loops {[r.src[0].arg for r in gr]})")
  n = len(gr)
  dims = [gr[-1:], gr[-2:-1], gr[:-2]] if n >= 2 else [gr, (), ()]
  ext = [math.prod(r.src[0].arg for r in d) for d in dims]
  if ext[1] > target.max_grid[1] or ext[2] > target.max_grid[2]: dims, ext = [gr, (), ()], [math.prod(ext), 1, 1]
  lx = min(ext[0], target.block)
  block = (lx, min(ext[1], max(1, target.block // lx)), 1)
  axes = []
  for c, d, e, t, m in zip("xyz", dims, ext, block, target.max_grid):
    if e >= INDEX_LIMIT:
      raise NotImplementedError(f"plan_launch: kernel {k.name} has {e} outputs along {c} (loops {[r.src[0].arg for r in gr]}); "
                                f"indices are 32-bit, at most {INDEX_LIMIT - 1}")
    if (b := -(-e // t)) > m:
      raise NotImplementedError(f"plan_launch: kernel {k.name} needs {b} blocks along {c}; {target.device} launches at most {m}")
    axes.append(GridAxis(d, e, t, b, block_id=b > 1, thread_id=b == 1 or t > 1))
  return GpuPlan((axes[0], axes[1], axes[2]), block)
