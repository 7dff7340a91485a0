"""Conv weight (and input) gradients equal torch's float64 ones (issue 28): 5x5 and 3x3 kernels, odd spatial sizes and
batches, padding, stride 2, dilation, groups (a group's output channels a multiple of 8 or not), one input channel and
a batch big enough that the weight gradient is summed from several batch chunks (frontend/nn_ops.py _conv_wgrad,
DW_CHUNK_BYTES), each run inside a TinyJit step for both CPU vector widths: AVX2 (`CPU_ISA=x86-64-v3`, 8 lanes) and
AVX-512 (`x86-64-v4`, 16 lanes, only where the host runs it). The width changes what the frontend builds (convs along
their output channels, the strided forward) as well as the kernels' tiles, so each ISA runs in a child process."""
import json, os, subprocess, sys
import numpy as np
import pytest
from tests.child_env import device_env

# (batch, cin, cout, (h, w), (kh, kw), stride, padding, dilation, groups)
CASES = [
  (8, 32, 32, (24, 24), (5, 5), 1, 0, 1, 1),    # beautiful_mnist's 5x5 at batch 8: two batch chunks of 4 summed
  (5, 1, 32, (28, 28), (5, 5), 1, 0, 1, 1),     # its first conv: one input channel, an odd batch
  (3, 5, 16, (13, 11), (5, 5), 1, 2, 1, 1),     # odd sizes, padding 2
  (2, 8, 16, (12, 9), (5, 5), 2, 2, 1, 1),      # 5x5 stride 2
  (2, 6, 8, (11, 12), (3, 3), 1, 2, 2, 1),      # dilation 2
  (2, 16, 32, (9, 9), (3, 3), 1, 1, 1, 2),      # groups, 16 output channels per group (the vector tile)
  (3, 12, 12, (7, 9), (3, 3), 1, 1, 1, 3),      # groups of 4 output channels (the plain reduction)
  (2, 16, 16, (10, 10), (3, 3), 2, 1, 1, 2),    # strided and grouped
]

CHILD = r'''
import json, sys, numpy as np
from frontend import Tensor, TinyJit, Device
cases, out = json.loads(sys.argv[1]), {"device": Device.DEFAULT}
for i, (b, ci, co, hw, k, s, p, d, g) in enumerate(cases):
  rng = np.random.default_rng(i)
  xn = rng.standard_normal((b, ci, *hw)).astype(np.float32)
  wn = (rng.standard_normal((co, ci // g, *k)) / np.sqrt(ci // g * k[0] * k[1])).astype(np.float32)
  x, w = Tensor(xn, requires_grad=True).realize(), Tensor(wn, requires_grad=True).realize()
  y = x.conv2d(w, groups=g, stride=s, dilation=d, padding=p)
  gn = rng.standard_normal(tuple(y.shape)).astype(np.float32)
  gt = Tensor(gn).realize()
  @TinyJit
  def step(x, gt):
    x.grad = w.grad = None
    x.conv2d(w, groups=g, stride=s, dilation=d, padding=p).backward(gt)
    return x.grad.realize(), w.grad.realize()
  for _ in range(3): dx, dw = step(x, gt)   # run, capture, replay: the replayed kernels are checked
  out[i] = {"dx": dx.numpy().tolist(), "dw": dw.numpy().tolist(), "x": xn.tolist(), "w": wn.tolist(), "g": gn.tolist()}
print(json.dumps(out))
'''

def _torch_grads(xn, wn, gn, s, p, d, g):
  """torch's float64 input and weight gradients of the same conv for the output gradient gn."""
  import torch
  x, w = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (xn, wn))
  torch.nn.functional.conv2d(x, w, stride=s, padding=p, dilation=d, groups=g).backward(torch.tensor(gn, dtype=torch.float64))
  return x.grad.numpy(), w.grad.numpy()

def _runnable_isas() -> list[str]:
  """The vector widths this host can run: both on AVX-512, AVX2 alone elsewhere (a parameter list, not a skip: the
  suite skips nothing on an AVX2-only host)."""
  from hcqrt.cpu.isa import cpu_isa
  return [isa for isa in ("x86-64-v3", "x86-64-v4") if cpu_isa(isa).runnable]

@pytest.mark.parametrize("isa", _runnable_isas())
def test_conv_gradients_equal_torch_float64(isa):
  """Every case's dW and dX within float32 rounding of torch float64 (relative to the gradient's largest entry)."""
  # the CPU device by name (with no device variable a GPU box's /dev/nvidiactl would choose NV), default opts
  env = {k: v for k, v in device_env(os.getcwd(), "CPU", CPU_ISA=isa).items() if k not in ("DEBUG", "BEAM")}
  res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(CASES)], capture_output=True, text=True, env=env, timeout=600)
  assert res.returncode == 0, res.stderr[-3000:]
  out = json.loads(res.stdout.strip().splitlines()[-1])
  assert out["device"] == "CPU", out["device"]   # (the ISA is the CPU's: run anywhere else, nothing of it was tested)
  for i, case in enumerate(CASES):
    r, (s, p, d, g) = out[str(i)], case[5:]
    ex, ew = _torch_grads(*(np.array(r[n], dtype=np.float32) for n in ("x", "w", "g")), s, p, d, g)
    for name, got, exp in (("dw", np.array(r["dw"]), ew), ("dx", np.array(r["dx"]), ex)):
      assert got.shape == exp.shape, (isa, case, name, got.shape, exp.shape)
      err = np.abs(got - exp).max() / np.abs(exp).max()
      assert err < 2e-5, (isa, case, name, err)
