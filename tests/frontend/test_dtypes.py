"""dtypes: what each creation path gives, promotion, casts (wrapping, truncation, rounding), .numpy() types, and the
basic ops on every dtype compared with numpy."""
import math
import numpy as np
import pytest
import torch
from frontend import Tensor, dtypes
from compiler.dtypes import least_upper_dtype

rng = np.random.default_rng(3)
NP = {dtypes.bool: np.bool_, dtypes.int8: np.int8, dtypes.uint8: np.uint8, dtypes.int16: np.int16, dtypes.uint16: np.uint16,
      dtypes.int32: np.int32, dtypes.uint32: np.uint32, dtypes.int64: np.int64, dtypes.uint64: np.uint64,
      dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64}
TORCH = {dtypes.bool: torch.bool, dtypes.int8: torch.int8, dtypes.uint8: torch.uint8, dtypes.int16: torch.int16,
         dtypes.int32: torch.int32, dtypes.int64: torch.int64, dtypes.float16: torch.float16, dtypes.float32: torch.float32,
         dtypes.float64: torch.float64}

def sample(dt, shape=(3, 5)) -> np.ndarray:
  npdt = NP[dt]
  if dt is dtypes.bool: return rng.random(shape) < 0.5
  if dt.is_int:
    lo, hi = (0, 20) if dt.is_unsigned else (-20, 20)
    return rng.integers(lo, hi, shape).astype(npdt)
  return rng.uniform(-3, 3, shape).astype(npdt)

def test_creation_dtypes():
  assert Tensor(1).dtype == dtypes.int32 and Tensor(1.0).dtype == dtypes.float32 and Tensor(False).dtype == dtypes.bool
  assert Tensor([1, 2.0]).dtype == dtypes.float32 and Tensor([True, 2]).dtype == dtypes.int32
  assert Tensor.arange(3).dtype == dtypes.int32 and Tensor.arange(3.0).dtype == dtypes.float32
  assert Tensor.zeros(2).dtype == Tensor.ones(2).dtype == Tensor.eye(2).dtype == Tensor.rand(2).dtype == dtypes.float32
  assert Tensor.full((2,), 3).dtype == dtypes.int32 and Tensor.full((2,), 3, dtype="float16").dtype == dtypes.float16
  for dt, npdt in NP.items():
    assert Tensor(np.zeros(2, npdt)).dtype == dt, dt
    assert Tensor.zeros(2, dtype=dt).numpy().dtype == npdt
    assert Tensor([0, 1], dtype=dt).dtype == dt

def test_int64_from_list():
  # numpy's 'q' (longlong) and 'l' (int64) are different scalar classes of the same dtype on Linux
  assert Tensor([0, 1], dtype=dtypes.int64).tolist() == [0, 1]
  assert Tensor([0, 1], dtype=dtypes.uint64).tolist() == [0, 1]
  assert Tensor(np.array([1, 2], dtype="q")).dtype == dtypes.int64

@pytest.mark.parametrize("dt", list(NP), ids=[d.name for d in NP])
def test_roundtrip_numpy(dt):
  x = sample(dt)
  t = Tensor(x)
  got = t.numpy()
  assert got.dtype == NP[dt]
  np.testing.assert_array_equal(got, x)
  np.testing.assert_array_equal(t.T.numpy(), x.T)       # a view reads back with the same dtype
  assert t.tolist() == x.tolist()

@pytest.mark.parametrize("dt", list(NP), ids=[d.name for d in NP])
def test_basic_ops_every_dtype(dt):
  a, b = sample(dt), sample(dt)
  ta, tb = Tensor(a), Tensor(b)
  if dt is not dtypes.bool:
    np.testing.assert_array_equal((ta + tb).numpy(), a + b)
    np.testing.assert_array_equal((ta * tb).numpy(), a * b)
    assert (ta + tb).dtype == dt
  np.testing.assert_array_equal((ta < tb).numpy(), a < b)
  np.testing.assert_array_equal((ta == tb).numpy(), a == b)
  np.testing.assert_array_equal(ta.maximum(tb).numpy(), np.maximum(a, b))
  np.testing.assert_array_equal((ta < tb).where(ta, tb).numpy(), np.where(a < b, a, b))
  np.testing.assert_array_equal(ta.max(1).numpy(), a.max(1))
  np.testing.assert_array_equal(ta.min(0).numpy(), a.min(0))
  np.testing.assert_array_equal(ta.flip(1)[:, 1:].numpy(), a[:, ::-1][:, 1:])
  np.testing.assert_array_equal(ta.cast(dtypes.float32).numpy(), a.astype(np.float32))
  s = ta.sum(1)
  tol = 1e-2 if dt is dtypes.float16 else 1e-6
  np.testing.assert_allclose(s.numpy().astype(np.float64), a.astype(np.float64).sum(1), rtol=tol, atol=tol)
  exp_sum_dt = dt if dt.is_float else (dtypes.uint32 if dt in (dtypes.uint8, dtypes.uint16) else dtypes.int32 if dt.itemsize < 4 or dt is dtypes.bool else dt)
  assert s.dtype == exp_sum_dt, f"sum of {dt} gives {s.dtype}, expected {exp_sum_dt}"

def test_promotion_matches_torch():
  # tinygrad/torch lattice: bool < ints < floats; same-width signed+unsigned goes wider signed
  dts = list(TORCH) + [dtypes.uint16, dtypes.uint32]
  for a in TORCH:
    for b in TORCH:
      exp = {v: k for k, v in TORCH.items()}[torch.promote_types(TORCH[a], TORCH[b])]
      assert least_upper_dtype(a, b) == exp, (a, b)
      t = Tensor.zeros(2, dtype=a) + Tensor.zeros(2, dtype=b)
      assert t.dtype == exp and t.numpy().dtype == NP[exp], (a, b, t.dtype)
  assert least_upper_dtype(dtypes.uint16, dtypes.int16) == dtypes.int32
  assert least_upper_dtype(dtypes.uint32, dtypes.int32) == dtypes.int64
  assert len(dts) == 11

def test_python_scalar_promotion():
  i, f, h, b, u = Tensor([1, 2]), Tensor([1.0]), Tensor([1.0], dtype=dtypes.float16), Tensor([True]), Tensor([1], dtype=dtypes.uint8)
  assert (i + 1).dtype == dtypes.int32 and (i + 1.5).dtype == dtypes.float32 and (i * True).dtype == dtypes.int32
  assert (f + 1).dtype == dtypes.float32 and (h + 1.5).dtype == dtypes.float16 and (h * 2).dtype == dtypes.float16
  assert (b + 1).dtype == dtypes.int32 and (b & True).dtype == dtypes.bool and (b + 1.0).dtype == dtypes.float32
  assert (u + 1).dtype == dtypes.uint8 and (u * 300).numpy().dtype == np.uint8
  assert (i / 2).dtype == dtypes.float32 and (i // 2).dtype == dtypes.int32 and (i < 2).dtype == dtypes.bool
  assert (2 ** i).dtype == dtypes.int32 and (2.0 ** i).dtype == dtypes.float32 and (i ** 0.5).dtype == dtypes.float32
  assert (h.exp()).dtype == dtypes.float16 and i.exp().dtype == dtypes.float32 and i.sqrt().dtype == dtypes.float32
  assert i.mean().dtype == dtypes.float32 and h.mean().dtype == dtypes.float16 and b.sum().dtype == dtypes.int32

def test_cast_float_to_int_truncates():
  x = np.array([-2.7, -1.5, -0.5, 0.0, 0.5, 1.5, 2.7, 100.9], np.float32)
  np.testing.assert_array_equal(Tensor(x).cast(dtypes.int32).numpy(), x.astype(np.int32))
  np.testing.assert_array_equal(Tensor(x).cast(dtypes.int8).numpy(), x.astype(np.int8))
  np.testing.assert_array_equal(Tensor(np.abs(x)).cast(dtypes.uint8).numpy(), np.abs(x).astype(np.uint8))

def test_cast_int_wraps():
  x = np.array([0, 1, 127, 128, 255, 256, 1000, -1, -129, 2**31 - 1, -2**31], np.int32)
  for dt in (dtypes.uint8, dtypes.int8, dtypes.int16, dtypes.uint16, dtypes.uint32):
    np.testing.assert_array_equal(Tensor(x).cast(dt).numpy(), x.astype(NP[dt]), err_msg=str(dt))
  np.testing.assert_array_equal(Tensor(x).cast(dtypes.int64).numpy(), x.astype(np.int64))
  np.testing.assert_array_equal((Tensor(np.array([250], np.uint8)) + 10).numpy(), np.array([4], np.uint8))
  np.testing.assert_array_equal((Tensor(np.array([2**31 - 1], np.int32)) + 1).numpy(), np.array([-2**31], np.int32))

def test_cast_to_bool_and_back():
  x = np.array([0.0, -0.0, 0.1, -3, np.inf, np.nan], np.float32)
  np.testing.assert_array_equal(Tensor(x).cast(dtypes.bool).numpy(), x.astype(np.bool_))
  np.testing.assert_array_equal(Tensor(np.array([0, 5, -1], np.int32)).bool().numpy(), [False, True, True])
  np.testing.assert_array_equal(Tensor([True, False]).cast(dtypes.float32).numpy(), [1.0, 0.0])
  np.testing.assert_array_equal(Tensor([True, False]).cast(dtypes.int32).numpy(), [1, 0])

def test_float16_cast_rounding_and_range():
  x = np.array([1.0009765625, 1.00048828125, 65504, 70000, -70000, 1e-8, 6e-5, 3.14159], np.float32)
  np.testing.assert_array_equal(Tensor(x).half().numpy(), x.astype(np.float16))     # round to nearest even, inf past max
  h = x.astype(np.float16)
  np.testing.assert_array_equal(Tensor(h).float().numpy(), h.astype(np.float32))

def test_int64_large_values():
  x = np.array([2**40 + 3, -2**50, 2**62, 7], np.int64)
  t = Tensor(x)
  np.testing.assert_array_equal((t + 1).numpy(), x + 1)
  np.testing.assert_array_equal((t * 2).numpy(), x * 2)
  np.testing.assert_array_equal((t // 3).numpy(), x // 3)
  np.testing.assert_array_equal((t % 1000).numpy(), x % 1000)
  np.testing.assert_array_equal(t.max().numpy(), x.max())
  assert t.sum().item() == int(x.sum())
  assert Tensor(np.array([2**33], np.int64)).item() == 2**33

def test_uint32_large_values():
  x = np.array([0, 1, 2**31, 2**32 - 1], np.uint32)
  t = Tensor(x)
  np.testing.assert_array_equal((t + 1).numpy(), x + np.uint32(1))
  np.testing.assert_array_equal((t >> 1).numpy(), x >> 1)
  np.testing.assert_array_equal((t // 3).numpy(), x // 3)
  np.testing.assert_array_equal(t.max().numpy(), x.max())
  np.testing.assert_array_equal((t < 2**31).numpy(), x < 2**31)

def test_float64():
  x = rng.standard_normal((3, 4))
  t = Tensor(x)
  assert t.dtype == dtypes.float64
  np.testing.assert_allclose((t.exp() * 2).numpy(), np.exp(x) * 2, rtol=1e-12)
  np.testing.assert_allclose(t.sum(1).numpy(), x.sum(1), rtol=1e-12)
  np.testing.assert_allclose((t @ t.T).numpy(), x @ x.T, rtol=1e-12)

def test_min_max_of_dtypes():
  assert dtypes.min(dtypes.int8) == -128 and dtypes.max(dtypes.uint8) == 255 and dtypes.max(dtypes.int32) == 2**31 - 1
  assert dtypes.min(dtypes.float32) == -math.inf and dtypes.max(dtypes.bool) is True
  for dt in (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.uint32, dtypes.int64):
    assert Tensor.full((2,), dtypes.max(dt), dtype=dt).numpy()[0] == np.iinfo(NP[dt]).max
    assert Tensor.full((2,), dtypes.min(dt), dtype=dt).numpy()[0] == np.iinfo(NP[dt]).min

def test_default_float_is_settable():
  prev = dtypes.default_float
  try:
    dtypes.default_float = dtypes.float16
    assert Tensor([1.5]).dtype == dtypes.float16 and Tensor.ones(2).dtype == dtypes.float16 and Tensor.rand(2).dtype == dtypes.float16
    assert Tensor([1]).float().dtype == dtypes.float32    # .float() is always float32
  finally: dtypes.default_float = prev
  assert Tensor([1.5]).dtype == dtypes.float32

def test_dtype_names():
  for name, dt in (("float32", dtypes.float32), ("float16", dtypes.float16), ("int32", dtypes.int32), ("int64", dtypes.int64),
                   ("uint8", dtypes.uint8), ("bool", dtypes.bool)):
    assert Tensor([1]).cast(name).dtype == dt
  assert dtypes.float is dtypes.float32 and dtypes.half is dtypes.float16 and dtypes.int is dtypes.int32
  assert Tensor([1]).cast(np.float16).dtype == dtypes.float16

def test_bitcast():
  x = np.array([1.0, -2.5, 0.0], np.float32)
  np.testing.assert_array_equal(Tensor(x).bitcast(dtypes.int32).numpy(), x.view(np.int32))
  np.testing.assert_array_equal(Tensor(x.view(np.uint32)).bitcast(dtypes.float32).numpy(), x)
  # to another size the last dim scales (issue 31; more in test_tinygrad_features.py); it must divide to grow
  np.testing.assert_array_equal(Tensor(x).bitcast(dtypes.int16).numpy(), x.view(np.int16))
  with pytest.raises(ValueError, match="bitcast"): Tensor(x.view(np.int32)).bitcast(dtypes.int64)

def test_bad_dtype_errors():
  with pytest.raises(TypeError): Tensor(np.array(["a"]))
  with pytest.raises(RuntimeError, match='BitwiseAnd'): Tensor([1.0]) & Tensor([1.0])
  with pytest.raises(RuntimeError, match='bitwise_not'): ~Tensor([1.0])
  with pytest.raises(TypeError): Tensor([True]) - Tensor([False])
