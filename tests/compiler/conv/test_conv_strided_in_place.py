"""The strided forward alone read in place on both CPU vector widths (issue 28, frontend/nn_ops.py _strided_in_place,
_in_place_8_lanes): with padding of one row and column before, no padded copy, its output channels the vectors and its
store fused; its first output row is peeled (compiler/opt/conv.py peel_default) and, on AVX2's 16 registers, that row's
kernel-row loop too (peel_fixed_reductions), so that no piece spills. Structure for both targets, and values computed
by kernels built for each ISA the host runs (a child Python per CPU_ISA) against float64 torch: odd sizes, strides 2 and
3, padding 0/1/2 and uneven, groups, batch 1."""
import json, os, subprocess, sys
import numpy as np
import pytest
from frontend import Tensor
from compiler.lower import lower
from compiler.schedule import create_schedule
from compiler.opt.apply import kernel_loads, stride_of
from tests.child_env import device_env
from tests.conftest import MANY_CORES, cpu_target_for

pytestmark = [pytest.mark.usefixtures("on_cpu")]   # CPU opts: CPU tensors even under MOCKGPU=1 NV=1

def _kernels(y: Tensor) -> list:
  return [lower(si.ast) for si in create_schedule([y.lazydata]) if getattr(si, "ast", None) is not None]

@pytest.mark.parametrize("hw,co", [(32, 64), (64, 32)])
def test_strided_forward_alone_reads_in_place_peeled_without_spills(hw, co, cpu_target_cores, monkeypatch):
  """3x3 s=2 p=1 of a 2x64xHWxHW input (16 and 32 output columns), the graph this target's lanes build: the weight copy
  and the conv, whose input loads step x's own planes and keep their gates; optimized for the target, the output rows
  are peeled at the first (1 + rest) and no piece spills (on AVX2 the first row's kernel rows are cut as well; without
  that cut, 16 vector moves in that piece; a 32-column row cut into 6-column tiles keeps every gate: 14). On 16 or 64
  cores the batch of 2 is too short to split, and the cores take the output rows: peeled all the same (each chunk runs
  its share of the pieces; unpeeled, AVX2 spilled 34 vector moves)."""
  cpu_target = cpu_target_cores
  import frontend.nn_ops as nn_ops
  from compiler.opt.heuristic import optimize
  from compiler.opt.pressure import vector_spills
  from compiler.opt.conv import has_gates
  from compiler.render_c import render_c
  # (the 32-column conv as 8 lanes build it: 16 lanes vectorize a 32-wide output row as it is, _col_phase_conv)
  monkeypatch.setattr(nn_ops, "_cpu_lanes", lambda device: 8 if hw == 64 else cpu_target.lanes)
  x, w = Tensor.empty(2, 64, hw, hw).realize(), Tensor.empty(co, 64, 3, 3).realize()
  ks = _kernels(x.conv2d(w, stride=2, padding=1))
  assert len(ks) == 2 and ks[-1].reduce_ranges(), [k.name for k in ks]
  conv = ks[-1]
  c, ky, kx = conv.reduce_ranges()
  xin = [ld for ld in kernel_loads(conv) if stride_of(ld.src[1], kx) == 1]
  assert xin and {(stride_of(ld.src[1], c), stride_of(ld.src[1], ky)) for ld in xin} == {(hw * hw, hw)} and has_gates(conv)
  rows = conv.global_ranges[2]   # (n, co, oy, ox)
  assert rows.src[0].arg == hw // 2
  k = optimize(conv, cpu_target)
  assert ("PEEL", rows.arg[0], (1,)) in k.applied_opts, k.applied_opts
  assert sum(o[0] == "PEEL" for o in k.applied_opts) == (2 if cpu_target.vector_registers <= 16 else 1), k.applied_opts
  assert vector_spills(render_c(k, 2 if k.threaded is not None else 1), k.name, cpu_target.cc_flags) == 0, k.applied_opts

@pytest.mark.parametrize("ncores", [None, *MANY_CORES])
def test_first_row_of_the_in_place_conv_on_16_registers_cuts_its_kernel_rows(ncores):
  """The in-place conv's AST as the 16-lane graph builds it (the same as the 8-lane one: _conv_fwd_cout) optimized for
  AVX2: in the first output row's piece the kernel row 0 reads the padding row only, so that loop is cut at 1 (its
  zero taps fold away) and the piece does not spill (uncut: 16 vector moves, clang 19, the gated broadcasts of the
  unrolled kernel columns hoisted above the FMAs)."""
  import frontend.nn_ops as nn_ops
  from compiler.opt.heuristic import optimize
  from compiler.opt.pressure import vector_spills
  from compiler.render_c import render_c
  v3 = cpu_target_for("x86-64-v3", ncores)   # (this host's cores, and a GPU box's: the rows then take the cores)
  x, w = Tensor.empty(2, 64, 32, 32).realize(), Tensor.empty(64, 64, 3, 3).realize()
  old, nn_ops._cpu_lanes = nn_ops._cpu_lanes, lambda device: 16
  try: conv = _kernels(x.conv2d(w, stride=2, padding=1))[-1]
  finally: nn_ops._cpu_lanes = old
  k = optimize(conv, v3)
  cut = [o for o in k.applied_opts if o[0] == "PEEL"]
  assert len(cut) == 2 and cut[0][2] == cut[1][2] == (1,) and cut[1][1] not in [r.arg[0] for r in conv.global_ranges], k.applied_opts
  assert vector_spills(render_c(k, 2 if k.threaded is not None else 1), k.name, v3.cc_flags) == 0, k.applied_opts

# (input, weight, conv kwargs, read in place): 16 x 16 outputs or more (in place on both widths) with batch 1, a
# non-square map, groups, stride 3 and uneven padding before only; and convs that keep a padded copy (odd size, padding 2,
# padding after, 8 x 8 outputs)
CASES = [((1, 16, 32, 32), (16, 16, 3, 3), dict(stride=2, padding=1), True),
         ((2, 8, 32, 48), (16, 8, 3, 3), dict(stride=2, padding=1), True),
         ((1, 32, 32, 32), (32, 16, 3, 3), dict(stride=2, padding=1, groups=2), True),
         ((1, 16, 48, 48), (16, 16, 3, 3), dict(stride=3, padding=1), True),
         ((1, 8, 64, 32), (16, 8, 3, 3), dict(stride=2, padding=(1, 0, 0, 0)), True),
         ((1, 16, 33, 33), (16, 16, 3, 3), dict(stride=2, padding=1), False),
         ((2, 8, 32, 32), (16, 8, 3, 3), dict(stride=2, padding=2), False),
         ((1, 8, 32, 32), (16, 8, 3, 3), dict(stride=2, padding=(1, 1, 1, 1)), True),
         ((1, 16, 16, 16), (16, 16, 3, 3), dict(stride=2, padding=1), None)]

CHILD = r'''
import json, sys
import numpy as np
from frontend import Tensor
from compiler.schedule import create_schedule
out = []
for i, (shape, wshape, kw, _) in enumerate(json.loads(sys.argv[1])):
  rng = np.random.default_rng(i + 7)
  xn, wn = rng.standard_normal(shape).astype(np.float32), (rng.standard_normal(wshape) * 0.3).astype(np.float32)
  x, w = Tensor(xn).realize(), Tensor(wn).realize()
  y = x.conv2d(w, **{k: tuple(v) if isinstance(v, list) else v for k, v in kw.items()})
  items = [si for si in create_schedule([y.lazydata]) if getattr(si, "ast", None) is not None]
  # read in place: the one kernel that reads x is the conv, writing the output (else a padded copy reads it)
  readers = [si for si in items if any(b.base is x.lazydata.base for b in si.inputs)]
  direct = len(readers) == 1 and tuple(readers[0].outputs[0].shape) == tuple(y.shape)
  out.append({"kernels": len(items), "direct": direct, "y": y.numpy().tolist(), "x": xn.tolist(), "w": wn.tolist()})
print(json.dumps(out))
'''

def _runnable_isas() -> list[str]:
  from hcqrt.cpu.isa import cpu_isa
  return [isa for isa in ("x86-64-v3", "x86-64-v4") if cpu_isa(isa).runnable]

@pytest.mark.parametrize("isa", _runnable_isas())
def test_strided_forward_alone_matches_float64_on_each_isa(isa):
  """Each case's forward built and run for `isa` (8 or 16 lanes) against float64 torch; the in-place cases are two
  kernels, the weight copy and the conv, which alone reads x (no padded copy of the input, on both widths); the
  others read x through a copy."""
  import torch
  # the CPU device by name (with no device variable a GPU box's /dev/nvidiactl would choose NV), default opts
  env = {k: v for k, v in device_env(os.getcwd(), "CPU", CPU_ISA=isa).items() if k not in ("DEBUG", "BEAM")}
  res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(CASES)], capture_output=True, text=True, env=env, timeout=600)
  assert res.returncode == 0, res.stderr[-3000:]
  for (shape, _wshape, kw, in_place), r in zip(CASES, json.loads(res.stdout.strip().splitlines()[-1])):
    xn, wn = np.array(r["x"]), np.array(r["w"])
    pad = kw["padding"]
    xt = torch.tensor(xn, dtype=torch.float64)
    if isinstance(pad, tuple): xt, pad = torch.nn.functional.pad(xt, pad), 0
    want = torch.nn.functional.conv2d(xt, torch.tensor(wn, dtype=torch.float64), stride=kw["stride"], padding=pad, groups=kw.get("groups", 1)).numpy()
    got = np.array(r["y"])
    assert got.shape == want.shape, (isa, shape, kw, got.shape, want.shape)
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err < 1e-5, (isa, shape, kw, err)
    if in_place is not None: assert r["direct"] == in_place and (r["kernels"] == 2 or not in_place), (isa, shape, kw, r["kernels"])
