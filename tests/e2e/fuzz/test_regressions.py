"""Named regression tests: each reproduces one wrong result or crash found by hand or by tests/e2e/fuzz/test_fuzz_ops.py
(issue 16) and checks the value torch/numpy give."""
import math

import numpy as np
import pytest
import torch

from frontend import Tensor
from tests.child_env import pythonpath


def _grad_pair(fn, vals, tfn=None):
  x, xt = Tensor(vals, requires_grad=True), torch.tensor(vals, requires_grad=True)
  fn(x).sum().backward()
  (tfn or fn)(xt).sum().backward()
  return x.grad.numpy(), xt.grad.numpy()

# ***** item 5: gradients at exactly 0 *****
@pytest.mark.parametrize("name,fn,tfn", [
  ("gelu", lambda x: x.gelu(), lambda x: torch.nn.functional.gelu(x, approximate="tanh")),
  ("cube", lambda x: x ** 3, None), ("pow1.5", lambda x: x ** 1.5, None), ("pow2.5", lambda x: x ** 2.5, None),
  ("pow0", lambda x: x ** 0, None), ("pow4", lambda x: x ** 4, None), ("pow1", lambda x: x ** 1.0, None),
  ("pow20", lambda x: x ** 20, None), ("cube_neg", lambda x: x ** -3, None), ("pow-0.5", lambda x: x ** -0.5, None)])
def test_grad_at_zero(name, fn, tfn):
  ours, theirs = _grad_pair(fn, [0.0, 0.5, 1.5, -0.0] if "-0.5" not in name else [0.0, 0.5, 1.5], tfn)
  np.testing.assert_allclose(ours, theirs, rtol=1e-5)

def test_grad_pow_tensor_exponent_at_zero_base():
  # base 0 with exponents 0, 1, 3, 0.5, 2.5, -1 and a negative base with an integral exponent
  b, e = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -2.0, 3.0], [0.0, 1.0, 3.0, 0.5, 2.5, -1.0, 3.0, 1.5]
  x, y = Tensor(b, requires_grad=True), Tensor(e, requires_grad=True)
  xt, yt = torch.tensor(b, requires_grad=True), torch.tensor(e, requires_grad=True)
  (x ** y).sum().backward(); (xt ** yt).sum().backward()
  np.testing.assert_allclose((x ** y).numpy(), (xt ** yt).detach().numpy(), rtol=1e-5)
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5)
  np.testing.assert_allclose(y.grad.numpy(), yt.grad.numpy(), rtol=1e-5)

def test_grad_rpow_and_one_zero_activation_keeps_weights_finite():
  x = Tensor([0.0, 1.0, 2.0], requires_grad=True)
  (2.0 ** x).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [math.log(2) * 2 ** v for v in (0, 1, 2)], rtol=1e-5)
  w = Tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
  (Tensor([[0.0, 1.0]]) @ w).gelu().sum().backward()
  assert np.isfinite(w.grad.numpy()).all()

# ***** item 9: integer division by zero and INT_MIN // -1 are defined (numpy's values), never SIGFPE *****
_DIV_SCRIPT = r'''
import sys, numpy as np
from frontend import Tensor
from compiler.dtypes import dtypes
dev = sys.argv[1]
for dt, npdt in [(dtypes.int32, np.int32), (dtypes.int64, np.int64), (dtypes.int8, np.int8), (dtypes.int16, np.int16),
                 (dtypes.uint32, np.uint32), (dtypes.uint8, np.uint8)]:
  info = np.iinfo(npdt)
  signed = info.min < 0
  a = np.array([7, 9 if not signed else -7, 0, info.min, info.min, 5, info.max, 3] * 3, dtype=npdt)
  b = np.array([0, 0, 0, info.max if not signed else -1, 0, info.max if not signed else -1, info.max if not signed else -1, 2] * 3, dtype=npdt)
  with np.errstate(all="ignore"): refs = [a // b, a % b, a // np.zeros_like(a), a % np.zeros_like(a)]
  ta, tb = Tensor(a, dtype=dt, device=dev), Tensor(b, dtype=dt, device=dev)
  gots = [(ta // tb).numpy(), (ta % tb).numpy(), (ta // 0).numpy(), (ta % 0).numpy()]
  for name, got, ref in zip(["//", "%", "// 0", "% 0"], gots, refs):
    if not (got == ref).all(): print("MISMATCH", dt, name, got[:8], ref[:8]); sys.exit(3)
print("OK")
'''

@pytest.mark.parametrize("device", ["CPU", "PTXEMU"])
def test_integer_division_by_zero_is_defined_no_sigfpe(device):
  import os
  import subprocess
  import sys
  r = subprocess.run([sys.executable, "-c", _DIV_SCRIPT, device], capture_output=True, text=True, timeout=600, check=False,
                     cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                     env={**os.environ, "PYTHONPATH": pythonpath(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))})
  assert r.returncode == 0 and r.stdout.strip().endswith("OK"), f"rc={r.returncode}\n{r.stdout}\n{r.stderr[-2000:]}"

# ***** item 7: half var/std/mean/LayerNorm accumulate in float32 *****
def test_half_layernorm_var_std_mean_no_overflow():
  from compiler.dtypes import dtypes
  from frontend import nn
  v = [[300.0, -300.0, 200.0, 100.0]]
  xt = torch.tensor(v, dtype=torch.float16)
  out = nn.LayerNorm(4)(Tensor(v).cast(dtypes.float16))
  np.testing.assert_allclose(out.numpy().astype(np.float32), torch.nn.LayerNorm(4).half()(xt).detach().float().numpy(), atol=2e-3)
  x = Tensor(v).cast(dtypes.float16)
  np.testing.assert_allclose(x.var(-1).numpy().astype(np.float32), xt.float().var(-1).half().float().numpy(), rtol=1e-3)
  np.testing.assert_allclose(x.std().numpy().astype(np.float32), xt.float().std().half().float().numpy(), rtol=1e-3)
  big = Tensor.full((1000,), 100.0).cast(dtypes.float16)   # the sum (1e5) overflows half, the mean does not
  assert big.mean().dtype == dtypes.float16 and big.mean().item() == 100.0

# ***** item 8: NaN in argmax/argmin, a second backward *****
@pytest.mark.parametrize("vals", [[1.0, math.nan, 3.0], [math.nan, 5.0, math.nan], [2.0, 1.0, math.nan], [1.0, 7.0, 3.0]])
def test_argmax_argmin_nan_index(vals):
  for fn in ("argmax", "argmin"):
    assert getattr(Tensor(vals), fn)().item() == getattr(torch.tensor(vals), fn)().item()
  m = [vals, vals[::-1]]
  np.testing.assert_equal(Tensor(m).argmax(1).numpy(), torch.tensor(m).argmax(1).numpy())
  np.testing.assert_equal(Tensor(m).argmin(0).numpy(), torch.tensor(m).argmin(0).numpy())

def test_second_backward_raises_like_torch():
  x = Tensor([1.0, 2.0], requires_grad=True)
  y = (x * x).sum()
  y.backward()
  with pytest.raises(RuntimeError, match="second time"): y.backward()
  np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])   # untouched by the refused second pass
  z = x * 3
  w = z.sum()
  w.backward()
  with pytest.raises(RuntimeError, match="second time"): (z * 2).sum().backward()
  x.grad = None
  y = (x * x).sum()
  y.backward(retain_graph=True); y.backward()   # retain_graph keeps it usable once more
  np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])

# ***** item 8: out-of-range indices raise when the value is realized *****
def _raises(exc, fn):
  with pytest.raises(exc, match="out of range"): fn()

def test_out_of_range_indices_raise():
  from frontend import nn
  x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
  _raises(IndexError, lambda: x[Tensor([2])].numpy())
  _raises(IndexError, lambda: x[:, Tensor([0, -4])].numpy())
  _raises(IndexError, lambda: (x[Tensor([0]), Tensor([3])] * 2).sum().item())   # also through what is computed from it
  np.testing.assert_equal(x[Tensor([-1, 0]), Tensor([2, -3])].numpy(), [6.0, 1.0])          # negative indices wrap
  _raises(RuntimeError, lambda: x.gather(1, Tensor([[0, 3]])).numpy())
  _raises(RuntimeError, lambda: x.gather(1, Tensor([[0, -1]])).numpy())
  np.testing.assert_equal(x.gather(1, Tensor([[2, 0]])).numpy(), [[3.0, 1.0]])
  emb = nn.Embedding(3, 2)
  _raises(IndexError, lambda: emb(Tensor([[1, 3]])).numpy())
  assert emb(Tensor([[0, 2]])).shape == (1, 2, 2)
  _raises(RuntimeError, lambda: Tensor([0, 3]).one_hot(3).numpy())
  _raises(RuntimeError, lambda: Tensor([-1]).one_hot(3).numpy())
  logits = Tensor([[1.0, 2.0], [0.5, 0.1]])
  _raises(IndexError, lambda: logits.sparse_categorical_crossentropy(Tensor([0, 2])).item())
  _raises(IndexError, lambda: logits.cross_entropy(Tensor([0, 5])).item())
  # ignore_index labels are not checked; valid labels give torch's loss
  ref = torch.nn.functional.cross_entropy(torch.tensor(logits.numpy()), torch.tensor([1, -1]), ignore_index=-1).item()
  assert abs(logits.sparse_categorical_crossentropy(Tensor([1, -1])).item() - ref) < 1e-5

def test_out_of_range_value_keeps_raising_and_gradients_still_flow():
  x = Tensor([1.0, 2.0])
  y = x[Tensor([7])]
  _raises(IndexError, lambda: y.numpy())
  _raises(IndexError, lambda: y.numpy())          # a second read of the realized wrong value raises too
  _raises(IndexError, lambda: (y + 1).numpy())
  w = Tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
  loss = (w @ Tensor([[1.0], [2.0]])).reshape(1, 2).sparse_categorical_crossentropy(Tensor([1]))
  loss.backward()
  assert np.isfinite(loss.item()) and np.isfinite(w.grad.numpy()).all()

# ***** item 10: valid programs that crashed the compiler; 0-size tensors flow through every op *****
@pytest.mark.parametrize("device", ["CPU", "PTXEMU"])
def test_zero_size_slice_of_computed_tensor_then_cat(device):
  # the 0-size operand's loads all fold away: its buffer must still be a kernel parameter (gcc: undeclared data2)
  a = (Tensor([1.0, 2.0], device=device) * 2)[0:0]
  np.testing.assert_equal(a.cat(Tensor([3.0], device=device)).numpy(), [3.0])
  np.testing.assert_equal(Tensor([3.0], device=device).cat(a, a.exp()).numpy(), [3.0])

def test_zero_size_repeat_and_reshape():
  assert Tensor.zeros(0).repeat(2).numpy().shape == (0,)   # was ZeroDivisionError in view.py
  assert Tensor.zeros(0, 3).repeat(2, 2).shape == (0, 6)
  x = Tensor.zeros(2, 0).repeat(3, 1)
  assert x.reshape(0, 5).shape == (0, 5) and x.permute(1, 0).reshape(3, 0, 2).shape == (3, 0, 2)
  np.testing.assert_equal(Tensor.zeros(3)[1:1].repeat(4).cat(Tensor([1.0])).numpy(), [1.0])

# ***** found by tests/e2e/fuzz/test_fuzz_ops.py *****
def test_fuzz43_std_of_constant_rows_has_zero_gradient():
  # leaf(13, 1) -> unsqueeze(2).expand(13, 1, 2) -> std(-1): std 0, whose gradient torch defines as 0 (was NaN)
  a = np.random.default_rng(0).uniform(-3, 3, (13, 1)).astype(np.float32)
  x, xt = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
  x.unsqueeze(2).expand(13, 1, 2).std(-1).relu().sum().backward()
  xt.unsqueeze(2).expand(13, 1, 2).std(-1).relu().sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy())
  y, yt = Tensor([[1.0, 1.0], [1.0, 3.0]], requires_grad=True), torch.tensor([[1.0, 1.0], [1.0, 3.0]], requires_grad=True)
  y.std(1).sum().backward(); yt.std(1).sum().backward()
  np.testing.assert_allclose(y.grad.numpy(), yt.grad.numpy(), rtol=1e-5)

@pytest.mark.parametrize("n,m", [(3, 4), (8, 16), (32, 32)])
def test_softmax_row_times_w_backward_compiles(n, m):
  # a loop peeled at the row boundary leaves NEG of a vector constant, rendered as a scalar (gcc: incompatible types)
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((n, m)).astype(np.float32), rng.standard_normal(m).astype(np.float32)
  x, w = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
  xt, wt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
  (x.softmax(-1)[2] * w).sum().backward(); (xt.softmax(-1)[2] * wt).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), atol=1e-5)
  np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), atol=1e-5)

def test_fuzz100341_maximum_with_nan_gradient_like_torch():
  # leaf(7) cat leaf(2) -> [7:7] -> mean (NaN) -> maximum(leaf()): the NaN side made the split 0/0 = NaN; torch gives
  # both sides the gradient where one is NaN (x gets g unless x < y, y unless x > y, halves on ties)
  a, b = [math.nan, 1.0, 2.0, 3.0], [0.5, 1.0, math.nan, 5.0]
  x, y = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
  xt, yt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
  x.maximum(y).sum().backward(); torch.maximum(xt, yt).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy()); np.testing.assert_allclose(y.grad.numpy(), yt.grad.numpy())
  e = Tensor([1.0, 2.0]).cat(Tensor([3.0]))[2:2].mean()
  w, wt = Tensor(1.5, requires_grad=True), torch.tensor(1.5, requires_grad=True)
  e.maximum(w).backward(); torch.maximum(torch.tensor([]).mean(), wt).backward()
  assert w.grad.item() == wt.grad.item() == 1.0

# ***** the programs for items 6 and 10 (right on this branch; kept as guards) *****
@pytest.mark.parametrize("xs,ws", [((4,), (3,)), ((4, 3), (2, 3)), ((3,), (2, 3)), ((8, 16), (4, 16))])
def test_cat_of_lazy_gradients(xs, ws):
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
  x, w = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
  xt, wt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
  (x.mean(0, keepdim=True) * w[0]).max().backward(); (xt.mean(0, keepdim=True) * wt[0]).amax().backward()
  gx, gw = xt.grad.numpy().ravel(), wt.grad.numpy().ravel()
  np.testing.assert_allclose(x.grad.flatten().cat(w.grad.flatten()).numpy(), np.concatenate([gx, gw]), atol=1e-6)
  x2, w2 = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
  (x2.mean(0, keepdim=True) * w2[0]).max().backward()
  np.testing.assert_allclose(w2.grad.flatten().cat(x2.grad.flatten()).numpy(), np.concatenate([gw, gx]), atol=1e-6)

def test_pad_log_softmax_backward_and_cat_std_grad():
  a = np.random.default_rng(1).standard_normal((5, 7)).astype(np.float32)
  x, xt = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
  x.pad(((0, 0), (1, 2))).log_softmax(-1).sum().backward()
  torch.nn.functional.pad(xt, (1, 2)).log_softmax(-1).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), atol=1e-5)
  y, yt = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
  (y * y).sum().backward(); (yt * yt).sum().backward()
  np.testing.assert_allclose(y.std().reshape(1).cat(y.grad.flatten()).numpy(),
                             torch.cat([yt.std().reshape(1), yt.grad.flatten()]).detach().numpy(), rtol=1e-5)

def test_fuzz100566_fully_padded_element_reshaped_to_scalar_is_zero():
  # (3,4,5)[1:2:3, 0:1:2, 1:3].mean(-1).pad(((1,2),(1,2)))[:, 2][2]: the element read is padding; its all-invalid mask
  # vanished when the view became a scalar, and the reduction was read unmasked (21.5 instead of 0)
  a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
  y = Tensor(a)[1:2:3, 0:1:2, 1:3].mean(-1).pad(((1, 2), (1, 2)))[:, 2]
  assert y[2].item() == 0.0 and y[2].reshape(1, 1).numpy().tolist() == [[0.0]]
  np.testing.assert_equal(y.numpy(), np.zeros(4, np.float32))
  x = Tensor(a, requires_grad=True)
  (x[1:2, 0:1, 1:3].mean(-1).pad(((1, 2), (1, 2)))[2, 2] * 3).backward()
  np.testing.assert_equal(x.grad.numpy(), np.zeros_like(a))

# The programs below are the fuzzer's own (tests/e2e/fuzz/test_fuzz_ops.py, replayed by seed; each docstring says what it does)
@pytest.mark.parametrize("seed,what", [
  (201055, "leaf(3,4,1)[:,1].mean(-2).unsqueeze(0).expand(3,1).maximum(leaf(3,1)), then cat(grads, out): two REDUCEs over "
           "one loop at different depths made a cycle in the linearizer that dropped the vectorized main store (zeros: "
           "the issue's 'concatenating lazy gradients')"),
  (200311, "flip -> logsumexp -> log_softmax -> [-2] -> maximum(leaf(1,1)), cat(grads, out): the same shared loop, "
           "'AssertionError: ranges ... are not nested'"),
  (200867, "pad -> max(2) -> sin -> abs -> [0:0, 2:3:3], cat(grads, out): a vector MAX against a constant rendered "
           "`(int4)0.0f` (gcc: cannot convert value to a vector)")])
def test_fuzz_found(seed, what):
  import os, sys
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  from test_fuzz_ops import run_seed
  run_seed(seed)

# ***** found by tests/e2e/fuzz/test_fuzz_heavy.py (seed in the name) *****

def test_fuzzheavy100033_strided_conv_input_smaller_than_stride_has_empty_phases():
  # conv 4x4 stride 3 padding 2 over a 2x2 input (8 output channels: _StridedConvFn): the input gradient's phase r=2 of
  # each dim has no pixels (2 - 2 rows); _strided_dgrad still convolved its 0-row window: "pool: kernel (2, 1) is larger
  # than the input (2, 0)" from .backward()
  x, w = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2), np.arange(128, dtype=np.float32).reshape(8, 1, 4, 4) % 5 - 2
  X, W = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  (X.conv2d(W, stride=3, padding=2) * Tensor(np.arange(8, dtype=np.float32).reshape(1, 8, 1, 1))).sum().backward()
  tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  (torch.nn.functional.conv2d(tx, tw, stride=3, padding=2) * torch.arange(8.0).reshape(1, 8, 1, 1)).sum().backward()
  np.testing.assert_array_equal(X.grad.numpy(), tx.grad.numpy())   # small integers: exact
  np.testing.assert_array_equal(W.grad.numpy(), tw.grad.numpy())
