"""User code that once stopped the AMD mock with EC_QUEUE_WAVE_ILLEGAL_INSTRUCTION: LLVM compiled its index math,
its int8 ops and its int8 matmuls to instructions the RDNA3/gfx942 emulators lacked (v_ashrrev_i16, v_dot4_u32_u8;
v_subrev_u16 on gfx942). Each runs on `MOCKGPU=1 AMD=1` for gfx1100 and gfx942 in a child Python (the device is
chosen at import), checked against numpy."""
import json
import pathlib
import subprocess
import sys
import numpy as np
import pytest
from tests.child_env import device_env
from tests.rdna3_kernels import have_llvmlite

ROOT = pathlib.Path(__file__).resolve().parents[2]
A = np.array([[1.5, -2.0], [3.25, 4.0]], np.float32)
B = np.array([[-1.0, 0.5], [7.0, -8.5]], np.float32)
I8 = np.array([-128, -127, -65, -64, -9, -8, -7, -1, 0, 1, 7, 8, 9, 63, 64, 127], np.int8)
J8 = I8[::-1].copy()
C = np.arange(70, dtype=np.float32).reshape(7, 10) - 35   # a wider pad/cat: on gfx942 its index math uses v_subrev_u16
SCRIPT = r"""
import json, sys
import numpy as np
from frontend import Tensor, Device, dtypes
A, B, I8, J8, C = (np.array(json.loads(s)) for s in sys.argv[1:6])
a, b = Tensor(A.astype(np.float32)), Tensor(B.astype(np.float32))
i, j = Tensor(I8.astype(np.int8)), Tensor(J8.astype(np.int8))
c = Tensor(C.astype(np.float32))
out = {"device": Device.DEFAULT,
       "pad_add_pad": (a.pad(((0, 0), (0, 2))) + 1).pad(((4, 0), (0, 0))).numpy().tolist(),
       "cat_pad": a.cat(b, dim=1).pad(((4, 0), (0, 0))).numpy().tolist(),
       "wide_pad_add_pad": (c.pad(((0, 0), (0, 2))) + c[:, :1]).pad(((4, 0), (0, 0))).numpy().tolist(),
       "wide_cat_pad": c.cat(c * 2, dim=1).pad(((1, 0), (0, 0))).numpy().tolist(),
       "i8_floordiv4": (i // 4).numpy().tolist(), "i8_shr2": (i >> 2).numpy().tolist(), "i8_abs": i.abs().numpy().tolist(),
       "i8_max": i.maximum(j).numpy().tolist(), "i8_lt": (i < j).numpy().tolist(), "i8_to_i16": i.cast(dtypes.int16).numpy().tolist(),
       "i8_matmul": (i.reshape(4, 4) @ j.reshape(4, 4)).numpy().tolist(),
       "u8_matmul": (i.cast(dtypes.uint8).reshape(2, 8) @ j.cast(dtypes.uint8).reshape(8, 2)).numpy().tolist(),
       "i8_matmul_i32": (i.cast(dtypes.int32).reshape(4, 4) @ j.cast(dtypes.int32).reshape(4, 4)).numpy().tolist(),
       "i8_u8_matmul_i32": (i.cast(dtypes.int32).reshape(4, 4) @ j.cast(dtypes.uint8).cast(dtypes.int32).reshape(4, 4)).numpy().tolist()}
print(json.dumps(out))
"""

@pytest.fixture(scope="module", params=["gfx1100", "gfx942"])
def results(request):
  if not have_llvmlite(): pytest.skip("llvmlite (pip install 'hcqrt[amd]') is not installed")
  env = device_env(ROOT, "AMD", MOCKGPU="1", MOCKGPU_ARCH=request.param)
  args = [json.dumps(x.tolist()) for x in (A, B, I8, J8, C)]
  r = subprocess.run([sys.executable, "-c", SCRIPT, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, f"{request.param}: {r.stderr[-3000:]}"
  out = json.loads(r.stdout.strip().splitlines()[-1])
  assert out["device"] == "AMD"
  return out

def test_pad_add_pad_on_the_amd_mock(results):
  np.testing.assert_array_equal(results["pad_add_pad"], np.pad(np.pad(A, ((0, 0), (0, 2))) + 1, ((4, 0), (0, 0))))

def test_cat_then_pad_on_the_amd_mock(results):
  np.testing.assert_array_equal(results["cat_pad"], np.pad(np.concatenate([A, B], 1), ((4, 0), (0, 0))))

def test_wider_pad_and_cat_on_the_amd_mock(results):
  np.testing.assert_array_equal(results["wide_pad_add_pad"], np.pad(np.pad(C, ((0, 0), (0, 2))) + C[:, :1], ((4, 0), (0, 0))))
  np.testing.assert_array_equal(results["wide_cat_pad"], np.pad(np.concatenate([C, C * 2], 1), ((1, 0), (0, 0))))

def test_int8_ops_on_the_amd_mock(results):
  i, j = I8.astype(np.int64), J8.astype(np.int64)
  assert results["i8_floordiv4"] == (i // 4).tolist() and results["i8_shr2"] == (i >> 2).tolist()
  assert results["i8_abs"] == np.abs(I8).tolist()   # (int8 wraps: |-128| is -128, as numpy and torch give)
  assert results["i8_max"] == np.maximum(i, j).tolist() and results["i8_lt"] == (i < j).tolist()
  assert results["i8_to_i16"] == i.tolist()

def test_int8_matmul_on_the_amd_mock(results):
  """LLVM sums four byte products at once (v_dot4_u32_u8); int8 results wrap as numpy's do."""
  assert results["i8_matmul"] == (I8.reshape(4, 4).astype(np.int64) @ J8.reshape(4, 4)).astype(np.int8).tolist()
  u, v = I8.astype(np.uint8).astype(np.int64), J8.astype(np.uint8).astype(np.int64)
  assert results["u8_matmul"] == (u.reshape(2, 8) @ v.reshape(8, 2)).astype(np.uint8).tolist()

def test_int8_matmul_summed_in_int32_on_the_amd_mock(results):
  """Summed in int32 the bytes' signedness shows (an int8 result hides it): LLVM picks the signed dot products
  (gfx942: v_dot4c_i32_i8; gfx1100: v_dot4_i32_iu8 with NEG bits), and the mixed int8 x uint8 sum."""
  i, j = I8.reshape(4, 4).astype(np.int64), J8.reshape(4, 4).astype(np.int64)
  assert results["i8_matmul_i32"] == (i @ j).tolist()
  assert results["i8_u8_matmul_i32"] == (i @ J8.astype(np.uint8).reshape(4, 4).astype(np.int64)).tolist()
