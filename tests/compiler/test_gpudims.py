"""The GPU launch planner (compiler/gpudims.py plan_launch): which output loops are x, y and z, the block, the limits
each Target sets, grouped reductions; the PTX and LLVM renderers print the one plan (same launch for the same kernel
and tuning) and decide none of it themselves."""
import ast, pathlib, re
import numpy as np
import pytest
from compiler.launch import Launch
from frontend import Tensor
from compiler.dtypes import dtypes
from compiler.gpudims import GpuPlan, plan_launch
from compiler.lazy import LazyBuffer
from compiler.linearize import linearize
from compiler.lower import lower
from compiler.pipeline import compile_kernel
from compiler.render_llvm import AMDGPU, render_llvm
from compiler.render_ptx import render_ptx
from compiler.schedule import create_schedule
from compiler.target import AMD_TARGETS, Target
from compiler.uop import Ops, Variable
from tests.compiler import test_ptx_render as P
from tests.rdna3_kernels import have_llvmlite

ROOT = pathlib.Path(__file__).resolve().parents[2]
NV = Target("NV", "ptx", arch="sm_90", warp_size=32, gpu=True)

def kernel(fn, *shapes, dtype=np.float32):
  """The lowered (unoptimized) last kernel of fn over CPU tensors of `shapes`: its output loops are the shape."""
  si = [s for s in fn(*[Tensor(np.ones(s, dtype), device="CPU") for s in shapes]).schedule() if s.kind == "kernel"][-1]
  return lower(si.ast, si.name)

def sizes(rs) -> list[int]: return [r.src[0].arg for r in rs]

# ***** axes: innermost x, next y, the rest merged into z *****

def test_one_axis_in_blocks_of_128_with_a_guarded_tail():
  k = kernel(lambda x: x * 2, (1000,))
  p = plan_launch(k, NV)
  assert p.launch == Launch(global_size=(8, 1, 1), local_size=(128, 1, 1)) and not p.grouped and p.lanes == 1
  x = p.axes[0]
  assert x.ranges == tuple(k.global_ranges) and x.extent == 1000 and x.guard and x.block_id and x.thread_id
  assert not p.axes[1].ranges and not p.axes[2].ranges

def test_two_axes_fill_the_block_along_y():
  k = kernel(lambda x: x.permute(1, 0) + 1, (7, 5))   # output (5, 7): x = the 7, y = the 5
  p = plan_launch(k, NV)
  assert p.launch == Launch(global_size=(1, 1, 1), local_size=(7, 5, 1)) and p.threads == 35
  assert p.axes[0].ranges == (k.global_ranges[1],) and p.axes[1].ranges == (k.global_ranges[0],)
  assert not any(a.guard or a.block_id for a in p.axes)   # one block covering everything: thread ids alone
  k = kernel(lambda x: x + 1, (20, 7))   # y: 20 rows in blocks of 18 -> the second block's last rows leave
  p = plan_launch(k, NV)
  assert p.launch == Launch(global_size=(1, 2, 1), local_size=(7, 18, 1)) and p.axes[1].guard and not p.axes[0].guard

def test_outer_axes_merge_into_z():
  k = kernel(lambda x: x.permute(4, 2, 0, 3, 1) * 2, (3, 5, 2, 7, 4))   # output (4, 2, 3, 7, 5)
  p = plan_launch(k, NV)
  x, y, z = p.axes
  assert sizes(x.ranges) == [5] and sizes(y.ranges) == [7] and z.ranges == tuple(k.global_ranges[:3]) and z.extent == 24
  assert p.launch == Launch(global_size=(1, 1, 24), local_size=(5, 7, 1))
  assert z.block_id and not z.thread_id   # one z per block: the block id alone

def test_huge_y_goes_along_x_unless_the_target_allows_it():
  k = kernel(lambda x: x + 1, (70000, 3))   # y = 70000 > CUDA's 65535 blocks
  p = plan_launch(k, NV)
  assert p.axes[0].ranges == tuple(k.global_ranges) and p.axes[0].extent == 210000 and p.launch.global_size == (1641, 1, 1)
  p = plan_launch(k, NV.replace(max_grid=(2 ** 31 - 1, 2 ** 31 - 1, 65535)))
  assert p.launch == Launch(global_size=(1, 1667, 1), local_size=(3, 42, 1))

def test_variable_loops_are_no_part_of_the_grid():
  v = Variable("n", 1, 64)
  x = Tensor(np.ones((5, 8), np.float32), device="CPU").reshape(v.bind(5), 8)
  si = [s for s in (x * 2).schedule() if s.kind == "kernel"][-1]
  k = lower(si.ast, si.name)
  p = plan_launch(k, NV)
  assert k.symbolic() and [r for a in p.axes for r in a.ranges] == [r for r in k.global_ranges if r.src[0].op is Ops.CONST]

# ***** limits per target *****

def test_block_is_four_warps():
  k = kernel(lambda x: x * 2, (1000,))
  assert plan_launch(k, AMD_TARGETS["gfx1100"]).block == (128, 1, 1)   # wave32
  assert plan_launch(k, AMD_TARGETS["gfx942"]).launch == Launch(global_size=(4, 1, 1), local_size=(256, 1, 1))   # wave64
  assert plan_launch(k, NV.replace(block=64)).launch == Launch(global_size=(16, 1, 1), local_size=(64, 1, 1))
  assert Target("X", "ptx", gpu=True).block == 128 and NV.replace(warp_size=64).block == 256

def test_too_many_blocks_or_outputs_is_an_error_naming_the_kernel():
  k = kernel(lambda x: x * 2, (20000,))
  with pytest.raises(NotImplementedError, match=r"kernel E_20000 needs 157 blocks along x; NV launches at most 100"):
    plan_launch(k, NV.replace(max_grid=(100, 65535, 65535)))
  x = LazyBuffer.empty((2 ** 16, 2 ** 15), dtypes.uint8, "CPU"); x.buffer = object()   # y > 65535: all along x
  k = lower(create_schedule([x.alu(Ops.ADD, x)])[0].ast, "big")
  with pytest.raises(NotImplementedError, match=r"kernel big has 2147483648 outputs along x .* 32-bit"): plan_launch(k, NV)
  x = LazyBuffer.empty((2 ** 31,), dtypes.uint8, "CPU"); x.buffer = object()   # (the loop's int32 size wraps)
  k = lower(create_schedule([x.alu(Ops.ADD, x)])[0].ast, "big1")
  with pytest.raises(NotImplementedError, match=r"kernel big1 has a loop of size -2147483648"): plan_launch(k, NV)

def test_cpu_targets_have_no_grid():
  with pytest.raises(ValueError, match="plan_launch: target CPU .* is no GPU"):
    plan_launch(kernel(lambda x: x * 2, (10,)), Target("CPU", "c", ncores=1))

# ***** grouped reductions: few outputs, a long loop -> a block of lanes per output *****

def test_grouped_reduction_is_a_block_per_output():
  k = kernel(lambda x: x.sum(1), (5, 1000))
  p = plan_launch(k, NV)
  assert [sizes([r]) for r in p.grouped] == [[1000]] and p.lanes == 128
  assert p.launch == Launch(global_size=(5, 1, 1), local_size=(128, 1, 1))
  x = p.axes[0]
  assert x.ranges == tuple(k.global_ranges) and x.block_id and not x.thread_id and not x.guard   # the lanes aren't outputs
  assert plan_launch(k, AMD_TARGETS["gfx942"]).lanes == 256 and plan_launch(k, NV.replace(group_lanes=32)).lanes == 32

@pytest.mark.parametrize("shape,target,lanes", [
  ((8, 63), NV, 1), ((8, 64), NV, 64),                         # the loop: at least group_min_reduce
  ((4096, 70), NV, 128), ((4097, 70), NV, 1),                  # the outputs: at most group_max_outputs
  ((8, 64), NV.replace(group_min_reduce=65), 1), ((4097, 70), NV.replace(group_max_outputs=5000), 128),
  ((3, 5), NV.replace(group_min_reduce=2), 8),                 # lanes: a power of two covering the loop
])
def test_grouping_thresholds_are_target_fields(shape, target, lanes):
  assert plan_launch(kernel(lambda x: x.sum(1), shape), target).lanes == lanes

def test_what_is_never_grouped():
  k = kernel(lambda x: (x > 0).max(1), (3, 1000))
  assert any(u.op is Ops.REDUCE and u.dtype.scalar is dtypes.bool for u in linearize(k))
  assert not plan_launch(k, NV).grouped   # bool accumulators
  v = Variable("n", 100, 1000)
  x = Tensor(np.ones((3, 500), np.float32), device="CPU").reshape(3, v.bind(500))
  si = [s for s in x.sum(1).schedule() if s.kind == "kernel"][-1]
  assert not plan_launch(lower(si.ast, si.name), NV).grouped   # a loop of Variable size
  from compiler.opt.tc import tensor_cores
  si = (Tensor(np.ones((32, 64), np.float16), device="CPU") @ Tensor(np.ones((64, 16), np.float16), device="CPU")).schedule()[-1]
  k = tensor_cores(lower(si.ast, si.name), NV)
  assert any(u.op is Ops.WMMA for u in linearize(k)) and plan_launch(k, NV.replace(group_min_reduce=1)).grouped == frozenset()
  assert plan_launch(kernel(lambda x: x.sum(1), (32, 64)), NV.replace(group_min_reduce=1)).grouped   # (the same sizes without)

# ***** the renderers print the plan *****

KERNELS = {"1d": (lambda x: x * 2, (1000,)), "2d": (lambda x: x.permute(1, 0) + 1, (7, 5)), "y_guard": (lambda x: x + 1, (20, 7)),
           "z": (lambda x: x.permute(4, 2, 0, 3, 1) * 2, (3, 5, 2, 7, 4)), "grouped": (lambda x: x.sum(1), (5, 1000))}

@pytest.mark.parametrize("name", list(KERNELS))
def test_ptx_and_amd_launch_the_same_grid(name):
  """The drift this planner ended: the LLVM renderer flattened every AMD grid into x (a div/rem per merged loop, per
  thread) while PTX used x, y and z. Both hardware have 3-D grids, so both now take the plan's axes."""
  fn, shape = KERNELS[name]
  k = kernel(fn, shape)
  nv, amd = (compile_kernel(k, t, opts=(), assemble=False) for t in (NV, AMD_TARGETS["gfx1100"]))
  assert nv.launch == amd.launch == plan_launch(k, NV).launch
  _, gy, gz = amd.launch.global_size
  assert ("llvm.amdgcn.workitem.id.y" in amd.src) == (name in ("2d", "y_guard", "z")) == ("%tid.y" in nv.src)
  assert ("llvm.amdgcn.workgroup.id.y" in amd.src) == (gy > 1) and ("llvm.amdgcn.workgroup.id.z" in amd.src) == (gz > 1)
  assert ("%ctaid.y" in nv.src) == (gy > 1) and ("%ctaid.z" in nv.src) == (gz > 1)

def test_amd_work_group_size_attribute_counts_every_dimension():
  k = kernel(lambda x: x + 1, (64, 8))   # gfx942: a block of 8 x 32 work-items
  ck = compile_kernel(k, AMD_TARGETS["gfx942"], opts=(), assemble=False)
  assert ck.launch.local_size == (8, 32, 1) and '"amdgpu-flat-work-group-size"="1,256"' in ck.src

def test_renderers_take_the_plan():
  k = kernel(lambda x: x * 2, (1000,))
  plan = plan_launch(k, NV.replace(block=64))
  src, launch = render_ptx(k, "sm_90", plan=plan)
  assert launch == plan.launch and ".maxntid 64, 1, 1" in src and re.search(r"mad.lo.s32 %r\d+, %r\d+, 64, %r\d+", src)
  src, launch = render_llvm(k, AMDGPU, plan=plan)
  assert launch == plan.launch and re.search(r"mul nuw i32 %v\d+, 64", src)
  with pytest.raises(ValueError, match="render_llvm: GPU kernel E_1000 needs its launch plan"): render_llvm(k, AMDGPU)
  assert isinstance(plan, GpuPlan)

def test_no_launch_planning_in_the_renderers():
  """Geometry is compiler/gpudims.py's: no renderer defines a planner or reads the Target's launch tuning."""
  bad = []
  for p in sorted((ROOT / "compiler").glob("render_*.py")):
    tree = ast.parse(p.read_text())
    for node in ast.walk(tree):
      if isinstance(node, ast.FunctionDef) and any(w in node.name for w in ("geometry", "plan_groups", "grouped_reduces", "plan_launch")):
        bad.append(f"{p.name}:{node.lineno}: def {node.name}")
      if isinstance(node, ast.Attribute) and node.attr in ("max_grid", "group_max_outputs", "group_min_reduce", "group_lanes"):
        bad.append(f"{p.name}:{node.lineno}: .{node.attr}")
      if isinstance(node, ast.Name) and node.id.startswith(("GROUP_", "MAX_YZ", "BLOCK")): bad.append(f"{p.name}:{node.lineno}: {node.id}")
  assert not bad, "\n".join(bad)

# ***** the plans run: y guards and merged z axes on both emulators *****

@pytest.mark.parametrize("device", ["PTXEMU", pytest.param("AMDEMU", marks=pytest.mark.skipif(not have_llvmlite(), reason="no llvmlite"))])
def test_planned_grids_run(device):
  P.same(lambda x: x + 1, P.f32(20, 7), device=device)                          # y guard
  P.same(lambda x: x.permute(4, 2, 0, 3, 1) * 2, P.f32(3, 5, 2, 7, 4), device=device)   # z merges three loops
  P.same(lambda x: x.permute(1, 0).exp(), P.f32(300, 3), device=device)        # x guard, y
  P.same(lambda x: x.sum(1), P.f32(5, 1000), device=device, rtol=2e-5)        # grouped
