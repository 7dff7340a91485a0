"""tinygrad API features issue 31 found missing: fp8 dtypes, dtypes.fields/DType.bitsize, bitcast between sizes, ints
wrapping like numpy, nn.InstanceNorm/LayerNorm2d/LSTMCell/ConvTranspose1d, optim.Muon (torch or numpy oracles)."""
import math
import numpy as np
import pytest
import torch
from frontend import Tensor, dtypes, nn
from frontend.optim import Muon
from compiler.dtypes import fp8_to_float, float_to_fp8

FP8 = [(dtypes.fp8e4m3, torch.float8_e4m3fn, 448.0), (dtypes.fp8e5m2, torch.float8_e5m2, 57344.0)]

@pytest.mark.parametrize("dt,tdt,_", FP8)
def test_fp8_every_byte_to_float_matches_torch(dt, tdt, _):
  ref = torch.arange(256, dtype=torch.uint8).view(tdt).float().numpy()
  assert np.array_equal(Tensor(bytes(range(256))).bitcast(dt).numpy(), ref, equal_nan=True)
  assert np.array_equal(np.array([fp8_to_float(i, dt) for i in range(256)], np.float32), ref, equal_nan=True)

@pytest.mark.parametrize("dt,tdt,mx", FP8)
def test_fp8_rounding_matches_torch(dt, tdt, mx):
  rng = np.random.default_rng(1)
  xs = (rng.standard_normal(4000) * np.exp2(rng.integers(-24, 17, 4000))).astype(np.float32)
  xs = np.concatenate([xs[np.abs(xs) < mx], np.float32([0.0, -0.0, mx, -mx])])
  ref = torch.tensor(xs).to(tdt).view(torch.uint8).numpy()
  assert np.array_equal(Tensor(xs).cast(dt).bitcast(dtypes.uint8).numpy(), ref)
  assert [float_to_fp8(float(x), dt) for x in xs[:500]] == ref[:500].tolist()

def test_fp8_saturates_and_specials():
  # e4m3 has no inf: finite overflow and +-inf saturate to +-448, as PTX's cvt.rn.satfinite does and torch 2.13 does
  # (torch 2.11's c10/util/Float8_e4m3fn.h gave NaN instead, seen on a GPU box); e5m2 overflows to +-inf from 61440
  # (past 57344 by half a step) up; NaN is sign|0x7f in both
  vals = [1e6, -1e6, math.inf, -math.inf, math.nan, 61439.0, 61440.0]
  assert Tensor(vals, dtype=dtypes.fp8e4m3).bitcast(dtypes.uint8).tolist() == [0x7e, 0xfe, 0x7e, 0xfe, 0x7f, 0x7e, 0x7e]
  assert Tensor(vals, dtype=dtypes.fp8e5m2).bitcast(dtypes.uint8).tolist() == [0x7c, 0xfc, 0x7c, 0xfc, 0x7f, 0x7b, 0x7c]
  for dt, tdt, mx in FP8:
    ref = torch.tensor(vals).to(tdt).view(torch.uint8).tolist()
    # a torch whose e4m3 overflow is NaN is compared on the values that do not overflow
    keep = [i for i, v in enumerate(vals) if not (ref[0] == 0x7f and abs(v) > mx)]
    assert 4 in keep   # NaN is always compared
    for got in (Tensor(vals, dtype=dt).bitcast(dtypes.uint8).tolist(), [float_to_fp8(v, dt) for v in vals]):
      assert [got[i] for i in keep] == [ref[i] for i in keep]
  t = Tensor([0.1, 2.5], dtype=dtypes.fp8e4m3)
  assert t.dtype is dtypes.fp8e4m3 and t.tolist() == [0.1015625, 2.5]
  assert t.cast(dtypes.fp8e5m2).tolist() == [0.09375, 2.5] and t.cast(dtypes.float16).dtype is dtypes.float16

def test_dtype_fields_and_bitsize():
  f = dtypes.fields()
  assert f["float"] is dtypes.float32 and f["fp8e5m2"] is dtypes.fp8e5m2 and not any(k.startswith("default") for k in f)
  assert all(isinstance(v, type(dtypes.int8)) for v in f.values())
  assert [d.bitsize for d in (dtypes.bool, dtypes.fp8e4m3, dtypes.half, dtypes.float, dtypes.int64)] == [8, 8, 16, 32, 64]

@pytest.mark.parametrize("src,dst", [(np.float32, np.uint8), (np.float32, np.float16), (np.int16, np.int64),
                                     (np.uint8, np.float32), (np.float64, np.int16), (np.uint16, np.uint32)])
def test_bitcast_between_sizes_matches_numpy_view(src, dst):
  a = np.random.default_rng(2).integers(0, 255, (3, 16), dtype=np.uint8).view(src)
  got = Tensor(a).bitcast(dtypes.from_np(dst)).numpy()
  assert got.shape == a.view(dst).shape and np.array_equal(got.view(np.uint8), a.view(np.uint8))

def test_bitcast_between_sizes_errors():
  with pytest.raises(ValueError, match=r"multiple of 4"): Tensor.ones(3, 6, dtype=dtypes.uint8).bitcast(dtypes.float32)
  with pytest.raises(ValueError, match="0-d"): Tensor(1.0).bitcast(dtypes.uint8)
  with pytest.raises(ValueError, match="bool"): Tensor([True, False]).bitcast(dtypes.uint16)

def test_out_of_range_ints_wrap_like_numpy():
  assert Tensor([-1], dtype=dtypes.uint8).tolist() == [255]
  assert Tensor([[300, -129]], dtype=dtypes.int8).tolist() == np.array([[300, -129]]).astype(np.int8).tolist()
  assert Tensor([-1], dtype=dtypes.uint64).tolist() == [2**64 - 1] and Tensor([2**63], dtype=dtypes.int64).tolist() == [-2**63]

def _close(a, b, tol=1e-5): np.testing.assert_allclose(a, b, rtol=tol, atol=tol)

def test_instance_norm_matches_torch():
  x = np.random.default_rng(3).standard_normal((2, 3, 5, 4)).astype(np.float32) * 3 + 1
  m, tm = nn.InstanceNorm(3), torch.nn.InstanceNorm2d(3, affine=True)
  w, b = np.float32([0.5, 2.0, -1.0]), np.float32([0.1, 0.0, 3.0])
  m.weight, m.bias = Tensor(w), Tensor(b)
  with torch.no_grad(): tm.weight[:], tm.bias[:] = torch.tensor(w), torch.tensor(b)
  _close(m(Tensor(x)).numpy(), tm(torch.tensor(x)).detach().numpy(), 1e-4)
  _close(nn.InstanceNorm(3, affine=False)(Tensor(x)).numpy(), torch.nn.functional.instance_norm(torch.tensor(x)).numpy(), 1e-4)
  with pytest.raises(ValueError, match="InstanceNorm"): m(Tensor.ones(2, 4, 3))

def test_layernorm2d_normalizes_channels():
  x = np.random.default_rng(4).standard_normal((2, 3, 4, 5)).astype(np.float32)
  ref = torch.nn.functional.layer_norm(torch.tensor(x).permute(0, 2, 3, 1), (3,)).permute(0, 3, 1, 2).numpy()
  _close(nn.LayerNorm2d(3)(Tensor(x)).numpy(), ref, 1e-4)

def test_lstm_cell_matches_torch():
  rng = np.random.default_rng(5)
  cell, tcell = nn.LSTMCell(3, 4), torch.nn.LSTMCell(3, 4)
  for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
    v = getattr(tcell, name).detach().numpy()
    setattr(cell, name, Tensor(v))
  x, h, c = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3), (2, 4), (2, 4)))
  th, tc = tcell(torch.tensor(x), (torch.tensor(h), torch.tensor(c)))
  oh, oc = cell(Tensor(x), (Tensor(h), Tensor(c)))
  _close(oh.numpy(), th.detach().numpy()); _close(oc.numpy(), tc.detach().numpy())
  th0, _ = tcell(torch.tensor(x))
  _close(cell(Tensor(x))[0].numpy(), th0.detach().numpy())

def test_conv_transpose1d_matches_torch():
  x = np.random.default_rng(6).standard_normal((2, 4, 7)).astype(np.float32)
  m, tm = nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2), torch.nn.ConvTranspose1d(4, 6, 3, 2, 1, 1, 2)
  m.weight, m.bias = Tensor(tm.weight.detach().numpy()), Tensor(tm.bias.detach().numpy())
  _close(m(Tensor(x)).numpy(), tm(torch.tensor(x)).detach().numpy(), 1e-4)

def _ns(g, steps, coef, eps=1e-7):
  if g.shape[0] > g.shape[1]: return _ns(g.T, steps, coef, eps).T
  g = g / (np.sqrt((g * g).sum()) + eps)
  for _ in range(steps):
    gram = g @ g.T
    g = coef[0] * g + coef[1] * gram @ g + coef[2] * gram @ gram @ g
  return g

@pytest.mark.parametrize("kw", [{}, {"nesterov": False, "weight_decay": 0.0}, {"momentum": 0.0}])
def test_muon_matches_float64_oracle(kw):
  rng = np.random.default_rng(7)
  w0, x = rng.standard_normal((6, 4)), rng.standard_normal((3, 4))
  lr, mom, wd, nest = 0.02, kw.get("momentum", 0.95), kw.get("weight_decay", 0.1), kw.get("nesterov", True)
  w, opt = Tensor(w0.astype(np.float32), requires_grad=True), None
  opt = Muon([w], lr=lr, **kw)
  ref, buf = w0.copy(), np.zeros_like(w0)
  for _ in range(3):
    opt.zero_grad(); (Tensor(x.astype(np.float32)) @ w.transpose()).square().sum().backward(); opt.step()
    g = 2 * (x @ ref.T).T @ x   # d/dW sum((x W^T)^2)
    if mom:
      buf = mom * buf + g
      g = g + mom * buf if nest else buf
    ref = ref * (1 - wd * lr) - lr * _ns(g, 5, (3.4445, -4.775, 2.0315))
  _close(w.numpy(), ref, 2e-4)
