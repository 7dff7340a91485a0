"""Float folds must be IEEE-exact: the compiler may only rewrite a float expression into one that gives the same bits
for every operand, -0.0, +-inf and NaN included, and constants fold to the value the kernel itself would compute.

Each case is checked bit for bit against torch on the CPU (C and LLVM renderers) and on the mock GPUs (PTX, RDNA3).
"""
from __future__ import annotations
import json, math, pathlib, subprocess, sys
import numpy as np
import pytest
import torch
from child_env import device_env
from compiler.dtypes import dtypes
from compiler.uop import UOp, Ops, exec_alu, simplify_alu, graph_rewrite

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPECIALS = np.array([-0.0, 0.0, math.inf, -math.inf, math.nan, 1.0, -2.5], np.float32)

# every case: the output's dtype name and the bits; run in a child per target
SCRIPT = r"""
import json, math, sys
import numpy as np
from frontend import Tensor, Device
from compiler.dtypes import dtypes
x = Tensor(np.array(json.loads(sys.argv[1]), np.float32))
f32, f16, f64, i32 = dtypes.float32, dtypes.float16, dtypes.float64, dtypes.int32
cases = {
  "x+0.0": x + 0.0, "0.0-x": 0.0 - x, "x+(-0.0)": x + -0.0, "x-0.0": x - 0.0,
  "max(1,nan)": Tensor.full((2,), 1.0).maximum(math.nan), "max(nan,1)": Tensor.full((2,), math.nan).maximum(1.0),
  "f32(16777217)+1": Tensor.full((2,), 16777217.0, dtype=f32) + 1.0, "f16(2049)+1": Tensor.full((2,), 2049.0, dtype=f16) + 1.0,
  "f32(0.1)->f64": Tensor.full((2,), 0.1, dtype=f32).cast(f64), "f32(1e40)->f64": Tensor.full((2,), 1e40, dtype=f32).cast(f64),
  "i32(16777217)->f32->i32": Tensor.full((2,), 16777217, dtype=i32).cast(f32).cast(i32),
}
out = {k: (v.dtype.name, v.numpy().view(f"u{v.dtype.itemsize}").tolist()) for k, v in cases.items()}
print(json.dumps({"device": Device.DEFAULT, "cases": out}))
"""

def torch_cases() -> dict[str, torch.Tensor]:
  x, f32, f16, f64 = torch.from_numpy(SPECIALS), torch.float32, torch.float16, torch.float64
  return {
    "x+0.0": x + 0.0, "0.0-x": 0.0 - x, "x+(-0.0)": x + -0.0, "x-0.0": x - 0.0,
    "max(1,nan)": torch.maximum(torch.full((2,), 1.0), torch.tensor(math.nan)),
    "max(nan,1)": torch.maximum(torch.full((2,), math.nan), torch.tensor(1.0)),
    "f32(16777217)+1": torch.full((2,), 16777217.0, dtype=f32) + 1.0, "f16(2049)+1": torch.full((2,), 2049.0, dtype=f16) + 1.0,
    "f32(0.1)->f64": torch.full((2,), 0.1, dtype=f32).to(f64), "f32(1e40)->f64": torch.full((2,), 1e40, dtype=f64).to(f32).to(f64),
    "i32(16777217)->f32->i32": torch.full((2,), 16777217, dtype=torch.int32).to(f32).to(torch.int32),
  }

def _bits(t: torch.Tensor) -> list[int]:
  a = t.numpy()
  if a.dtype.kind == "f": a = np.where(np.isnan(a), np.array(math.nan, a.dtype), a)   # (one NaN: its payload may differ)
  return a.view(f"u{a.itemsize}").tolist()

CONFIGS = {"CPU-c": {"CPU_LLVM": "0"}, "CPU-llvm": {"CPU_LLVM": "1"},
           "NV-ptx": {"MOCKGPU": "1", "MOCKGPU_ARCH": "hopper"}, "AMD-gfx1100": {"MOCKGPU": "1", "MOCKGPU_ARCH": "gfx1100"}}

@pytest.mark.parametrize("config", list(CONFIGS))
def test_float_folds_bit_exact_like_torch(config):
  env = device_env(ROOT, config.split("-")[0], **CONFIGS[config])
  r = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(SPECIALS.tolist())], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  got = json.loads(r.stdout.strip().splitlines()[-1])
  assert got["device"] == config.split("-")[0]
  bad = {}
  for name, want in torch_cases().items():
    dt, bits = got["cases"][name]
    a = np.array(bits, f"u{want.element_size()}").view(want.numpy().dtype)
    ours = _bits(torch.from_numpy(a))
    if ours != _bits(want) or dt != {torch.float32: "float", torch.float16: "half", torch.float64: "double", torch.int32: "int"}[want.dtype]:
      bad[name] = (a.tolist(), want.tolist())
  assert not bad, f"{config}: {sorted(bad)} differ from torch (ours, torch): {bad}"

def test_add_zero_folds_only_minus_zero():
  # x + -0.0 is x for every x (the fold stays), x + 0.0 is not (-0.0 + 0.0 = +0.0); integer index math keeps its folds
  x = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("x", 0, 1))
  assert x + -0.0 is x and x - 0.0 is x and x * 1.0 is x
  assert (x + 0.0).op is Ops.ADD and (0.0 - x).op is Ops.ADD   # (0.0 - x is -x + 0.0: -0.0 for x = 0.0 without the add)
  i = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("i", 0, 9))
  assert i + 0 is i and (i * 0).arg == 0 and ((i + 3) + -3) is i

def test_constant_folds_compute_like_the_kernel():
  # MAX as the renderers: NaN in either place wins; operands are rounded to the dtype first (a constant is a double
  # until rendered), results too (float16 was never rounded)
  assert math.isnan(exec_alu(Ops.MAX, dtypes.float32, (1.0, math.nan))) and math.isnan(exec_alu(Ops.MAX, dtypes.float32, (math.nan, 1.0)))
  assert exec_alu(Ops.ADD, dtypes.float32, (16777217.0, 1.0)) == 16777216.0
  assert exec_alu(Ops.ADD, dtypes.float16, (2049.0, 1.0)) == 2048.0 and exec_alu(Ops.MUL, dtypes.float16, (300.0, 300.0)) == math.inf
  assert exec_alu(Ops.CMPLT, dtypes.float32, (0.1, float(np.float32(0.1)))) is False   # 0.1 in float32 is float32(0.1)
  c = UOp.const(dtypes.float32, 0.1)
  assert c.cast(dtypes.float64).arg == float(np.float32(0.1)) and UOp.const(dtypes.float16, 2049.0).cast(dtypes.float32).arg == 2048.0
  assert simplify_alu(Ops.MAX, dtypes.float32, (UOp.const(dtypes.float32, 1.0), UOp.const(dtypes.float32, math.nan))).arg != 1.0

def test_sum_of_minus_zeros_is_plus_zero_after_peeling():
  # a reduction whose value peeled to a constant -0.0 adds -0.0 to a +0.0 accumulator: +0.0, as torch.sum([-0.0])
  from compiler.opt.peel import cleanup
  r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 4),), (0, "reduce"))
  red = UOp(Ops.REDUCE, dtypes.float32, (UOp.const(dtypes.float32, -0.0), r), Ops.ADD)
  out = graph_rewrite(red, cleanup)
  assert math.copysign(1.0, torch.tensor([-0.0] * 4).sum().item()) == 1.0   # (the oracle: +0.0)
  assert out.op is Ops.CONST and out.arg == 0.0 and math.copysign(1.0, out.arg) == 1.0
  mx = UOp(Ops.REDUCE, dtypes.float32, (UOp.const(dtypes.float32, -math.inf), r), Ops.MAX)
  assert graph_rewrite(mx, cleanup).arg == -math.inf
