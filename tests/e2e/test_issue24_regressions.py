"""Issue 24: silent wrong results and crashes a newcomer found from outside. Each test reproduces one and checks the
value torch/numpy give, or that a clear error names the op."""
import os
import numpy as np
import pytest
import torch

from compiler.dtypes import dtypes
from frontend import Tensor

DEVICES = ["CPU", "PTXEMU"]   # the C path and the PTX path (PTX interpreted, no driver)

# ***** constants take the tensor's dtype *****
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("vals,value,tdt", [([True, False], 3, torch.bool), ([1, 2], 2.7, torch.int32), ([1, -2], -7, torch.int8),
                                            ([1.5, 2.0], 3, torch.float32), ([True, False], 0.5, torch.bool)])
def test_pad_value_is_cast_to_the_tensor_dtype(device, vals, value, tdt):
  ref = torch.nn.functional.pad(torch.tensor(vals, dtype=tdt), (1, 2), value=value)
  out = Tensor(np.array(ref[1:-2].numpy()), device=device).pad((1, 2), value=value)
  assert out.dtype == dtypes.from_np(ref.numpy().dtype)
  assert out.tolist() == ref.tolist()

def test_pad_of_an_int_tensor_with_inf_is_refused():
  with pytest.raises(ValueError, match=r"pad: value -inf .*int.*\(2,\)"): Tensor([1, 2]).pad((1, 1), value=-float("inf"))

@pytest.mark.parametrize("device", DEVICES)
def test_python_scalar_consts_into_bool_and_int(device):
  c = Tensor([True, False], device=device)
  tc = torch.tensor([True, False])
  for x, y in ((True, 2), (2, True), (1.5, 2), (True, False), (3, -4)):
    ref = torch.where(tc, x, y)
    out = c.where(x, y)
    assert out.tolist() == ref.tolist(), (x, y)
    assert out.dtype.is_float == ref.dtype.is_floating_point and out.dtype.is_bool == (ref.dtype == torch.bool)
  assert Tensor.full((3,), 3, dtype=dtypes.bool, device=device).contiguous().tolist() == [True] * 3
  assert Tensor.full((2,), 2.7, dtype=dtypes.int32, device=device).contiguous().tolist() == [2, 2]
  assert Tensor.full((2,), 300, dtype=dtypes.uint8, device=device).contiguous().tolist() == [44, 44]   # wraps, as numpy's astype

# ***** max/min of nothing *****
@pytest.mark.parametrize("name,fn", [("max", lambda t: t.max()), ("min", lambda t: t.min()), ("max", lambda t: t.max(axis=0)),
                                     ("min", lambda t: t.min(axis=0, keepdim=True)), ("argmax", lambda t: t.argmax(axis=0)),
                                     ("argmin", lambda t: t.argmin())])
def test_max_min_argmax_of_empty_raise(name, fn):
  x = Tensor.zeros(0, 3)
  with pytest.raises(RuntimeError, match=rf"(?:{name}|argmax)\(\): can't reduce over the empty dim 0 of shape \(0"): fn(x)
  with pytest.raises((RuntimeError, IndexError, ValueError)): fn(torch.zeros(0, 3))   # (the oracle raises too)

def test_empty_reductions_that_have_a_value_keep_it():
  z, n = Tensor.zeros(0, 3), np.zeros((0, 3), np.float32)
  assert z.sum().item() == n.sum() and z.sum(0).tolist() == n.sum(0).tolist()
  assert np.isnan(z.mean().item()) and z.max(axis=1).shape == (0,)   # a non-empty axis: an empty result
  assert z.any().item() is False and z.all().item() is True

# ***** reading uninitialised memory *****
@pytest.mark.parametrize("device", DEVICES)
def test_kernel_reading_tensor_empty_runs(device):
  e = Tensor.empty(4, 3, device=device)
  assert (e * 0).realize().shape == (4, 3) and e.lazydata.realized   # (values unspecified: a NaN times 0 is NaN; ints below)
  # (the values are read and used: `& 0` would let ptxas drop the load, and the mock NV GPU, which tells kernels
  # apart by their machine code, could then run this PTX for a later NV kernel compiled to the same code)
  i = Tensor.empty(5, dtype=dtypes.int32, device=device) + 1
  assert i.numpy().shape == (5,) and i.dtype == dtypes.int32
  assert (Tensor.empty(3, 3, device=device) @ Tensor.zeros(3, 2, device=device)).numpy().shape == (3, 2)

# ***** out of memory *****
# 2**58 bytes: past the 57-bit virtual address space of any x86-64, so the allocation fails whatever the overcommit policy
HUGE = (2**28, 2**28)

def test_out_of_memory_names_bytes_device_and_op():
  with pytest.raises(MemoryError, match=r"out of memory on CPU: allocating 288230376151711744 bytes .* for Tensor.empty \(output \(268435456, 268435456\)"):
    Tensor.empty(*HUGE, device="CPU").realize()
  a, b = Tensor.ones(HUGE[0], 1, device="CPU"), Tensor.ones(1, HUGE[1], device="CPU")
  with pytest.raises(MemoryError, match=r"allocating 288230376151711744 bytes .* for kernel \S+ \(output \(268435456, 268435456"):
    (a @ b).realize()
  # and everything still works afterwards, the same tensors included
  assert (a[:2] @ b[:, :3]).tolist() == [[1.0] * 3] * 2
  assert (Tensor([1.0, 2.0], device="CPU") + 1).tolist() == [2.0, 3.0]

# ***** unknown dtype names *****
@pytest.mark.parametrize("bad", ["floaty", "f32", np.complex64, object])
def test_cast_to_an_unknown_dtype_lists_the_valid_names(bad):
  with pytest.raises(TypeError, match=r"cast of a dtypes.float tensor of shape \(2,\): unknown dtype .*one of the names .*float32.*uint8"):
    Tensor([1.0, 2.0]).cast(bad)
  with pytest.raises(TypeError, match=r"bitcast of a dtypes.float tensor .*: unknown dtype"): Tensor([1.0, 2.0]).bitcast(bad)
  with pytest.raises(TypeError, match=r"unknown dtype .*float16"): Tensor.zeros(2, dtype=bad)
  assert Tensor([1.5]).cast("half").dtype == dtypes.float16 and Tensor([1.5]).cast(np.int8).tolist() == [1]

# ***** index errors name the offending value *****
def _embedding(idx):
  from frontend import nn
  return nn.Embedding(4, 2)(idx)

@pytest.mark.parametrize("what,fn,exc,value,pos", [
  ("x\\[tensor\\]", lambda: Tensor([1.0, 2.0, 3.0])[Tensor([0, 5, 1])], IndexError, 5, "1"),
  ("x\\[tensor\\]", lambda: Tensor([[1.0, 2.0], [3.0, 4.0]])[Tensor([1, -3]), Tensor([0, 1])], IndexError, -3, "1"),
  ("gather", lambda: Tensor([[1.0, 2.0]]).gather(1, Tensor([[0, 7]])), RuntimeError, 7, "\\(0, 1\\)"),
  ("Embedding", lambda: _embedding(Tensor([[1, 2], [9, 4]])), IndexError, 9, "\\(1, 0\\) \\(and 1 more\\)"),
  ("one_hot", lambda: (Tensor([0, 1]) * 3).one_hot(3), RuntimeError, 3, "1"),   # (a computed index, never stored)
  ("cross_entropy target", lambda: Tensor.ones(3, 4).cross_entropy(Tensor([1, 2, 4])), IndexError, 4, "2"),
  ("sparse_categorical_crossentropy labels", lambda: Tensor.ones(3, 4).sparse_categorical_crossentropy(Tensor([10, 2, 7]), ignore_index=10),
   IndexError, 7, "2")])   # (10 is ignored, so 7 is the first bad one)
def test_index_errors_name_the_offending_value(what, fn, exc, value, pos):
  with pytest.raises(exc, match=rf"index out of range in {what} .*the first offending index is {value} at position {pos}"): fn().numpy()

# ***** random numbers in half precision *****
N_RANDOM = 2_000_000   # ~1,000 of the old rand's float16 draws were 1.0, ~650 of randn's infinite

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16, dtypes.float32])
def test_rand_stays_below_one_in_its_dtype(dt):
  Tensor.manual_seed(3)
  r = Tensor.rand(N_RANDOM, dtype=dt)
  assert r.dtype == dt
  v = r.float().numpy()
  assert v.min() >= 0.0 and v.max() < 1.0, v.max()
  # still uniform over [0, 1): on the grid k / 2**p of the dtype's p-bit significand (as torch), whose mean is 1/2 - 2**-(p+1)
  p = {dtypes.float16: 11, dtypes.bfloat16: 8}.get(dt, 24)
  assert abs(v.astype(np.float64).mean() - (0.5 - 2.0 ** -(p + 1))) < 1e-3 and v.max() > 0.99

def test_randn_with_half_default_float_is_finite():
  prev = dtypes.default_float
  try:
    dtypes.default_float = dtypes.float16
    Tensor.manual_seed(5)
    r = Tensor.randn(N_RANDOM)
    assert r.dtype == dtypes.float16
    v = r.numpy().astype(np.float64)
  finally: dtypes.default_float = prev
  assert np.isfinite(v).all(), f"{np.isinf(v).sum()} infinities"
  assert abs(v.mean()) < 5e-3 and abs(v.std() - 1) < 5e-3 and 4 < np.abs(v).max() < 6
  assert np.isfinite(Tensor.randn(N_RANDOM, dtype=dtypes.bfloat16).float().numpy()).all()

@pytest.mark.parametrize("device", ["NV", "AMD"])
def test_out_of_memory_on_the_mock_gpus(device):
  """The GPU runtimes' own failures (NV: RM_ALLOC's NV_ERR_NO_MEMORY; AMD: its VA reserve) name the bytes too."""
  from hcqrt.device import Device
  old = os.environ.get("MOCKGPU")
  os.environ["MOCKGPU"] = "1"   # the registry opens the device through its mock driver (no-op if it is already open)
  try: Device[device]
  finally:
    if old is None: del os.environ["MOCKGPU"]
    else: os.environ["MOCKGPU"] = old
  with pytest.raises(MemoryError, match=rf"out of memory on {device}: allocating 274877906944 bytes \(256 GiB\) for Tensor.empty"):
    Tensor.empty(2**36, device=device).realize()
  assert (Tensor([1.0, 2.0], device=device) + 1).tolist() == [2.0, 3.0]

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("vals,value,tdt", [([False, False], 3, torch.bool), ([1, 2], 2.5, torch.int32), ([1.5, 2.0], 7, torch.float32)])
def test_masked_fill_keeps_the_tensor_dtype(device, vals, value, tdt):
  ref = torch.tensor(vals, dtype=tdt).masked_fill(torch.tensor([True, False]), value)
  out = Tensor(np.array(vals, dtype=ref.numpy().dtype), device=device).masked_fill(Tensor([True, False], device=device), value)
  assert out.dtype == dtypes.from_np(ref.numpy().dtype) and out.tolist() == ref.tolist()

def test_masked_fill_of_an_int_tensor_with_inf_is_refused():
  with pytest.raises(ValueError, match=r"masked_fill: value -inf .*int"): Tensor([1, 2]).masked_fill(Tensor([True, False]), -float("inf"))
