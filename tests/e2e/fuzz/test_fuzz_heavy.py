"""Differential fuzzer of the HEAVY kernels' optimized paths: the shapes test_fuzz_ops.py (sizes 1..13) never reaches.

Seeded random cases of
  (a) matmul / batched matmul, M, N, K around the packing threshold (compiler/pack.py PACK_MIN, avx2_packs) and the
      vector widths (primes, 255/256/257, multiples of 6/8/16 +-1, up to ~700), operands transposed / strided /
      sliced out of bigger leaves, epilogues (bias, relu, residual), forward and the gradients of both operands;
  (b) conv2d: random N, C_in, C_out, H, W (odd, prime, 1), kernel 1..5, stride 1..3, dilation 1..2, padding 0..2,
      groups (depthwise too), bias, then sometimes BatchNorm / relu / residual / max_pool; the input, weight and bias
      gradients through `.backward()` (compiler/opt/conv.py tiles, peel.py, the dgrad / wgrad bands);
  (c) reductions (sum / max / mean / softmax / logsumexp) over long axes (up to 70000 elements), one or two axes,
      keepdim;
  (d) some cases run as a TinyJit step (3 calls, new data each call), some with lazy (never realized) nn.Conv2d /
      nn.Linear parameters (their values are read back after the step and given to the oracle).

Oracle: torch on the CPU in float64. Half of the cases use small-integer data (|x| <= 3): then every product and
partial sum of a matmul / conv / sum (and its gradients: G @ B^T, conv of G with W, correlations of x and G) is an
integer below 2^24, exact in float32 in ANY summation order, so the check is EXACT (a wrong index, a lost tail element,
a tap read twice can't hide in a tolerance). The other half (and any case with a division: mean, BatchNorm, softmax)
is float data checked with the probabilistic rounding bound of a length-K float32 dot product (Higham & Mary 2019,
"A new approach to probabilistic rounding error analysis", Thm 2.4: |err| <= lambda * sqrt(K) * u * sum|terms|):
with zero-mean O(1) data a result is ~sqrt(K) * rms(terms), so sum|terms| ~ sqrt(K) * |result|: we allow
atol = 8 * u * sqrt(K) * max|result| and rtol = 8 * u * sqrt(K), u = 2^-24, K the longest reduction chain behind the
tensor (the product of the conv and BatchNorm lengths for a gradient through both); a missing or doubled term
(~rms(terms) ~ |result| / sqrt(K)) still exceeds that for every K here.

CI runs a fixed set of seeds (CI_SEEDS, ~60 s on 2 cores). `FUZZ_LONG=1` runs new seeds for FUZZ_SECONDS (600)
from FUZZ_START; `FUZZ_SEED=n` replays one case; every failure prints the full case. FUZZ_NCORES=16 compiles for a
16-core CPU (the thread splits, chunks and peels of a big box; the 2 threads here claim the pieces in turn).
FUZZ_WORK=f scales every case's size cap (multiply-adds, elements) by f: under `MOCKGPU=1 NV=1` (every tensor on the
mock GPU, whose PTX interpreter does a 128^3 matmul in ~0.7 s) f=0.02 keeps a case to about a second.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from frontend import Tensor, TinyJit, nn
from test_fuzz_ops import fuzz_for_a_while

U32 = 2.0 ** -24
WORK = float(os.environ.get("FUZZ_WORK", "1"))   # the size caps' scale (module doc)

if os.environ.get("FUZZ_NCORES"):   # before the CPU device opens: its Target's ncores (hcqrt/cpu/device.py _NCORES)
  import hcqrt.cpu.device as _cpudev
  _cpudev._NCORES = int(os.environ["FUZZ_NCORES"])

# sizes around the packing threshold (256), the vector widths (8, 16 lanes) and the 6-row tiles, primes, 1
EDGE = [1, 2, 3, 5, 7, 8, 9, 13, 15, 16, 17, 31, 33, 47, 48, 49, 61, 63, 64, 65, 95, 97, 127, 128, 129, 191, 251, 255,
        256, 257, 263, 383, 384, 385, 509, 512, 521, 640, 700]

PACKED = [256, 257, 258, 263, 264, 265, 271, 272, 273, 287, 288, 289, 300, 319, 320, 321, 337, 340]
AVX2_NK = [512, 513, 517, 520, 527, 528, 536]

def _dim(rng, hi: int = 700) -> int:
  r = rng.random()
  if r < 0.5: v = int(rng.choice(EDGE))
  elif r < 0.75: v = int(rng.choice([6, 8, 16])) * int(rng.integers(1, 44)) + int(rng.choice([-1, 0, 1]))
  else: v = int(rng.integers(1, hi + 1))
  return max(1, min(v, hi))

class Case:
  """One random case: `log` says everything it did (printed with a failure), `checks` what was compared."""
  def __init__(self, seed: int):
    self.seed, self.rng, self.log = seed, np.random.default_rng(seed), []
    self.exact = bool(self.rng.random() < 0.5)   # small-integer data: every check exact (see the module doc)

  def data(self, shape, exact: bool | None = None) -> np.ndarray:
    ex = self.exact if exact is None else exact
    if ex: return self.rng.integers(-3, 4, shape).astype(np.float32)
    return self.rng.standard_normal(shape).astype(np.float32)

  def close(self, ours: np.ndarray, ref: torch.Tensor, what: str, k: int, exact: bool, terms: torch.Tensor | None = None) -> None:
    """`terms`: sum|terms| of each element (the same computation on absolute values), for the rounding bound of a
    result that cancels (a bias gradient behind a training BatchNorm is 0 in exact arithmetic); default |ref|."""
    ref = ref.detach().numpy()
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} != torch {ref.shape}"
    if exact:
      bad = ours != ref
      if bad.any():
        i = np.argwhere(bad)[0]
        raise AssertionError(f"{what}: {int(bad.sum())}/{bad.size} elements differ (exact integer data), first at {tuple(i)}: "
                             f"ours {ours[tuple(i)]} torch {ref[tuple(i)]}")
      return
    tol = 8 * U32 * np.sqrt(max(k, 1))
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    if terms is not None and ref.size: scale = max(scale, float(terms.detach().abs().max()))
    err = np.abs(ours.astype(np.float64) - ref)
    lim = tol * scale + tol * np.abs(ref) + 1e-30
    if not (err <= lim).all() or not np.isfinite(ours).all():
      i = np.unravel_index(np.argmax(np.nan_to_num(err - lim, nan=np.inf)), err.shape)
      raise AssertionError(f"{what}: {int((~(err <= lim)).sum())}/{err.size} elements off (K={k}, tol {tol:.2e}, scale {scale:.3g}); "
                           f"worst at {tuple(int(j) for j in i)}: ours {ours[i]} torch {ref[i]}")

  def relu_mask(self, pre: torch.Tensor, terms: torch.Tensor, ours: np.ndarray, k: int) -> torch.Tensor:
    """relu's derivative for the oracle (1 where the input counts as positive). Where the float64 pre-activation `pre`
    lies within the float32 rounding bound of its length-k dot product (8 u sqrt(k) sum|terms|, as `close`) of 0, float32
    may round it to either sign, and the relu then routes the gradient either way, a whole row of products apart
    (FUZZ_SEED=200633: -7.13e-6 exact, +6.94e-6 ours, sum|terms| 242, bound 2.3e-3; the weight gradient's row then
    differs by g[i] * x[i], up to 5.9): there the oracle follows our sign (`ours`: our relu output, > 0 where we passed
    it). Elsewhere float64 decides, so a sign we get wrong by more than rounding still fails the checks."""
    near0 = pre.detach().abs() <= (0 if self.exact else 8 * U32 * np.sqrt(max(k, 1))) * terms
    return torch.where(near0, torch.tensor(ours > 0), pre.detach() > 0).to(pre.dtype)

# ***** (a) matmul *****

def _operand(case: Case, rows: int, cols: int, batch: tuple[int, ...], name: str):
  """A (batch..., rows, cols) operand: contiguous, a transpose of a (cols, rows) leaf, a strided slice or an offset slice
  of a bigger leaf. Returns (ours, torch's, the leaf pair that gets the gradient)."""
  form = str(case.rng.choice(["plain", "plain", "transposed", "strided", "sliced"]))
  if form == "transposed": store = batch + (cols, rows)
  elif form == "strided": store = batch + (rows, 2 * cols)
  elif form == "sliced": store = batch + (rows + 3, cols + 2)
  else: store = batch + (rows, cols)
  a = case.data(store)
  t, tt = Tensor(a, requires_grad=True), torch.tensor(a, dtype=torch.float64, requires_grad=True)
  case.log.append(f"{name}{batch + (rows, cols)} {form}")
  if form == "transposed": return t.transpose(-1, -2), tt.transpose(-1, -2), (t, tt)
  if form == "strided": return t[..., ::2], tt[..., ::2], (t, tt)
  if form == "sliced": return t[..., 2:2 + rows, 1:1 + cols], tt[..., 2:2 + rows, 1:1 + cols], (t, tt)
  return t, tt, (t, tt)

def run_matmul(case: Case) -> None:
  rng = case.rng
  r = rng.random()
  if r < 0.3:   # packed: every dim at least PACK_MIN (compiler/pack.py), the padded rows / column tails around it
    m, n, k = (int(rng.choice(PACKED)) for _ in range(3))
  elif r < 0.4:   # packed on 8 lanes although M < PACK_MIN (compiler/pack_avx2.py avx2_packs: M >= 64, N, K >= 512, 2^25)
    m, n, k = int(rng.choice([128, 129, 131, 135, 136, 143])), int(rng.choice(AVX2_NK)), int(rng.choice(AVX2_NK))
  else: m, n, k = _dim(rng), _dim(rng), _dim(rng)
  batch = tuple(int(b) for b in rng.integers(1, 4, int(rng.integers(1, 3)))) if rng.random() < 0.25 else ()
  while int(np.prod(batch)) * m * n * k > 70_000_000 * WORK and m * k > 1: m, k = max(1, m // 2), max(1, k // 2)   # a few seconds at most
  bb = batch if not batch or rng.random() < 0.6 else ()   # B broadcast over A's batch
  lazy = not batch and rng.random() < 0.2
  case.log.append(f"matmul M={m} N={n} K={k} batch={batch} b_batch={bb} exact={case.exact} lazy_linear={lazy}")
  a, ta, la = _operand(case, m, k, batch, "A")
  epi = [e for e in ("bias", "relu", "residual") if rng.random() < 0.35]
  bwd = bool(rng.random() < 0.45)
  case.log.append(f"epilogue {epi} backward={bwd}")
  leaves = [la]
  if lazy:
    if case.exact: case.exact = False   # the layer's uniform init is not integer data
    Tensor.manual_seed(case.seed)
    layer = nn.Linear(k, n, bias="bias" in epi)
    for p in (layer.weight, layer.bias):
      if p is not None: p.requires_grad = True
    out = layer(a)
  else:
    b, tb, lb = _operand(case, k, n, bb, "B")
    leaves.append(lb)
    out = a @ b
    if "bias" in epi:
      bias = case.data((n,))
      tbias = Tensor(bias, requires_grad=True), torch.tensor(bias, dtype=torch.float64, requires_grad=True)
      leaves.append(tbias)
      out = out + tbias[0]
  res = case.data(tuple(out.shape)) if "residual" in epi else None
  if "relu" in epi: out = out.relu()
  if res is not None: out = out + Tensor(res)
  g = case.data(tuple(out.shape)) if bwd else None
  if bwd: (out * Tensor(g)).sum().backward()
  Tensor.realize(out, *[lf[0].grad for lf in leaves if bwd], *([p.grad for p in (layer.weight, layer.bias) if p is not None] if lazy and bwd else []))
  if lazy:   # the values the step used: the oracle gets them now
    tw = torch.tensor(layer.weight.numpy(), dtype=torch.float64, requires_grad=True)
    tbias = torch.tensor(layer.bias.numpy(), dtype=torch.float64, requires_grad=True) if layer.bias is not None else None
    tout = ta @ tw.T + (tbias if tbias is not None else 0)
  else:
    tout = ta @ tb
    if "bias" in epi: tout = tout + tbias[1]
  tmm = tout
  if bwd: tmm.retain_grad()
  if "relu" in epi: tout = tout.relu()
  if res is not None: tout = tout + torch.tensor(res, dtype=torch.float64)
  case.close(out.numpy(), tout, "matmul forward", k, case.exact)
  if not bwd: return
  (tout * torch.tensor(g, dtype=torch.float64)).sum().backward()
  kb = max(m, n) * (batch[0] if batch else 1)
  for i, (t, tt) in enumerate(leaves):   # (a bias gradient sums dL/dout over rows: it may cancel, bound by sum|terms|)
    case.close(t.grad.numpy(), tt.grad, f"grad of operand {i}", kb, case.exact, tmm.grad.abs().sum() if i == 2 else None)
  if lazy:
    case.close(layer.weight.grad.numpy(), tw.grad, "grad of Linear.weight", m, False)
    if tbias is not None: case.close(layer.bias.grad.numpy(), tbias.grad, "grad of Linear.bias", m, False, tmm.grad.abs().sum(0))

# ***** (b) conv2d *****

HW = [1, 2, 3, 4, 5, 7, 8, 9, 11, 13, 16, 17, 23, 28, 31, 32, 33, 40]

def _conv_shape(rng):
  for _ in range(100):
    kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6)) if rng.random() < 0.3 else None
    kw = kh if kw is None else kw
    s, d, p = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(0, 3))
    h, w = int(rng.choice(HW)), int(rng.choice(HW)) if rng.random() < 0.4 else None
    w = h if w is None else w
    g_kind = rng.random()
    if g_kind < 0.2:   # depthwise
      g = c_in = c_out = int(rng.choice([1, 3, 8, 16, 17, 32]))
    elif g_kind < 0.3:
      g = int(rng.choice([2, 3, 4]))
      c_in, c_out = g * int(rng.integers(1, 9)), g * int(rng.integers(1, 9))
    else:
      g, c_in, c_out = 1, int(rng.choice([1, 3, 4, 7, 8, 16, 17, 24, 32, 64])), int(rng.choice([1, 2, 5, 8, 15, 16, 17, 24, 32, 48, 64]))
    n = int(rng.choice([1, 1, 2, 3, 4, 8]))
    oh, ow = (h + 2 * p - d * (kh - 1) - 1) // s + 1, (w + 2 * p - d * (kw - 1) - 1) // s + 1
    if oh < 1 or ow < 1: continue
    if n * c_out * oh * ow * (c_in // g) * kh * kw > 30_000_000 * WORK: continue
    return dict(n=n, c_in=c_in, c_out=c_out, h=h, w=w, k=(kh, kw), stride=s, dilation=d, padding=p, groups=g, oh=oh, ow=ow)
  return dict(n=1, c_in=3, c_out=8, h=9, w=9, k=(3, 3), stride=1, dilation=1, padding=1, groups=1, oh=9, ow=9)

def run_conv(case: Case) -> None:
  rng = case.rng
  sh = _conv_shape(rng)
  epi = [e for e in ("bias", "bn", "relu", "residual", "pool") if rng.random() < (0.4 if e != "bn" else 0.25)]
  if "pool" in epi and min(sh["oh"], sh["ow"]) < 2: epi.remove("pool")
  bwd, lazy = bool(rng.random() < 0.55), bool(rng.random() < 0.2)
  if lazy or "bn" in epi: case.exact = False
  if "pool" in epi and bwd: case.exact = False   # integer data ties a max: torch and we may route the gradient differently
  case.log.append(f"conv {sh} epilogue {epi} backward={bwd} lazy_conv={lazy} exact={case.exact}")
  n, ci, co, g, (kh, kw) = sh["n"], sh["c_in"], sh["c_out"], sh["groups"], sh["k"]
  kw_ = dict(stride=sh["stride"], dilation=sh["dilation"], padding=sh["padding"], groups=g)
  x = case.data((n, ci, sh["h"], sh["w"]))
  tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
  X = Tensor(x, requires_grad=True)
  if lazy:
    Tensor.manual_seed(case.seed)
    layer = nn.Conv2d(ci, co, (kh, kw), groups=g, stride=sh["stride"], dilation=sh["dilation"], padding=sh["padding"], bias="bias" in epi)
    W, B = layer.weight, layer.bias
    for p in (W, B):
      if p is not None: p.requires_grad = True
    out = layer(X)
  else:
    wv = case.data((co, ci // g, kh, kw))
    W = Tensor(wv, requires_grad=True)
    bv = case.data((co,)) if "bias" in epi else None
    B = Tensor(bv, requires_grad=True) if bv is not None else None
    out = X.conv2d(W, B, **kw_)
  bn = nn.BatchNorm2d(co) if "bn" in epi else None
  bn_train = bool(rng.random() < 0.7) and n * sh["oh"] * sh["ow"] > 1   # (torch refuses batch statistics of one value)
  if bn is not None:
    bn.weight.assign(Tensor(case.data((co,), exact=False) * 0.2 + 1)); bn.bias.assign(Tensor(case.data((co,), exact=False) * 0.1))
    bn.running_mean.assign(Tensor(case.data((co,), exact=False))); bn.running_var.assign(Tensor(np.abs(case.data((co,), exact=False)) + 0.5))
    bn_state = [t.numpy().astype(np.float64) for t in (bn.weight, bn.bias, bn.running_mean, bn.running_var)]
    case.log.append(f"bn train={bn_train}")
    with Tensor.train(bn_train): out = bn(out)
  if "relu" in epi: out = out.relu()
  res = case.data(tuple(out.shape)) if "residual" in epi else None
  if res is not None: out = out + Tensor(res)
  if "pool" in epi: out = out.max_pool2d(2)
  gr = case.data(tuple(out.shape)) if bwd else None
  if bwd:
    with Tensor.train(bn_train): (out * Tensor(gr)).sum().backward()
  Tensor.realize(out, *([X.grad, W.grad] + ([B.grad] if B is not None else []) if bwd else []))
  # the oracle
  tw = torch.tensor(W.numpy(), dtype=torch.float64, requires_grad=True)
  tb = torch.tensor(B.numpy(), dtype=torch.float64, requires_grad=True) if B is not None else None
  tout = torch.nn.functional.conv2d(tx, tw, tb, **kw_)
  tconv = tout
  if bwd: tconv.retain_grad()
  k_conv = ci // g * kh * kw
  k_out = k_conv
  if bn is not None:
    bw, bb, rm, rv = (torch.tensor(v) for v in bn_state)
    tout = torch.nn.functional.batch_norm(tout, rm.clone(), rv.clone(), bw, bb, training=bn_train, momentum=0.1, eps=1e-5)
    tbn = tout
    if bwd: tbn.retain_grad()
    k_out = k_conv * (n * sh["oh"] * sh["ow"] if bn_train else 1)
  if "relu" in epi: tout = tout.relu()
  if res is not None: tout = tout + torch.tensor(res, dtype=torch.float64)
  if "pool" in epi: tout = torch.nn.functional.max_pool2d(tout, 2)
  case.close(out.numpy(), tout, "conv forward", k_out, case.exact)
  if not bwd: return
  (tout * torch.tensor(gr, dtype=torch.float64)).sum().backward()
  k_back = k_out * max(co // g * kh * kw, n * sh["oh"] * sh["ow"])
  # sum|terms| of each gradient element: the same products on |x|, |w| and |dL/dconv| (torch.nn.grad)
  gp, ax, aw = tconv.grad.abs(), tx.detach().abs(), tw.detach().abs()
  if bn is not None and bn_train: gp = _bn_backward_terms(tconv.detach(), tbn.grad, bw)
  case.close(X.grad.numpy(), tx.grad, "conv input grad", k_back, case.exact, torch.nn.grad.conv2d_input(ax.shape, aw, gp, **kw_))
  case.close(W.grad.numpy(), tw.grad, "conv weight grad", k_back, case.exact, torch.nn.grad.conv2d_weight(ax, aw.shape, gp, **kw_))
  if B is not None: case.close(B.grad.numpy(), tb.grad, "conv bias grad", k_back, case.exact, gp.sum((0, 2, 3)))

def _bn_backward_terms(c: torch.Tensor, gy: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
  """sum|terms| of dL/dc through a training BatchNorm2d of c (gy = dL/dy): dc = gamma/s * (gy - mean(gy) - xh *
  mean(gy * xh)), xh = (c - mean) / s, so |gamma|/s * (|gy| + mean|gy| + |xh| * mean|gy * xh|). Its three terms cancel
  (to 0 exactly without eps when every channel has 2 values: xh = +-1 whatever c is), so |dc| itself understates the
  rounding of a gradient behind it (FUZZ_SEED=400215: n=2 1x1 outputs, input gradient 8.7e-4 from terms ~1; float32
  torch is 2.1e-7 off, we 1.0e-7, the bound from |dc| 1.3e-8)."""
  ax = (0, 2, 3)
  s = (c.var(ax, unbiased=False, keepdim=True) + 1e-5).sqrt()
  xh, g = ((c - c.mean(ax, keepdim=True)) / s).abs(), gy.abs()
  return gamma.abs().reshape(1, -1, 1, 1) / s * (g + g.mean(ax, keepdim=True) + xh * (g * xh).mean(ax, keepdim=True))

# ***** (c) reductions over long axes *****

def run_reduce(case: Case) -> None:
  rng = case.rng
  nd = int(rng.integers(1, 4))
  long_ax = int(rng.integers(nd))
  shape = [int(rng.choice([1, 2, 3, 5, 7, 8, 9, 16, 17])) for _ in range(nd)]
  shape[long_ax] = int(rng.choice([int(rng.integers(1, 70001)), int(rng.choice(EDGE)) * int(rng.choice([1, 8, 16, 100])) + int(rng.choice([-1, 0, 1]))]))
  shape[long_ax] = max(1, min(shape[long_ax], 70000))
  while np.prod(shape) > max(400_000 * WORK, 1):   # (the biggest short axis halves first)
    i = max((a for a in range(nd) if a != long_ax and shape[a] > 1), key=lambda a: shape[a], default=long_ax)
    shape[i] = max(1, shape[i] // 2)
  op = str(rng.choice(["sum", "max", "mean", "softmax", "logsumexp"]))
  axis: int | tuple[int, ...] = long_ax if rng.random() < 0.7 or nd == 1 or op == "softmax" else (long_ax, (long_ax + 1) % nd)
  keep = bool(rng.random() < 0.5)
  bwd = bool(rng.random() < 0.4)
  if op in ("mean", "softmax", "logsumexp"): case.exact = False
  if op == "max" and bwd: case.exact = False   # ties (see run_conv)
  case.log.append(f"reduce {op} shape={tuple(shape)} axis={axis} keepdim={keep} backward={bwd} exact={case.exact}")
  x = case.data(tuple(shape))
  X, tx = Tensor(x, requires_grad=True), torch.tensor(x, dtype=torch.float64, requires_grad=True)
  if op == "softmax": out, tout = X.softmax(axis), tx.softmax(axis)
  elif op == "max": out, tout = X.max(axis, keepdim=keep), tx.amax(axis, keepdim=keep)
  else: out, tout = getattr(X, op)(axis, keepdim=keep), getattr(tx, op)(axis, keepdim=keep)
  kred = int(np.prod([shape[a] for a in ((axis,) if isinstance(axis, int) else axis)]))
  if bwd:
    gr = case.data(tuple(tout.shape))
    (out * Tensor(gr)).sum().backward()
    Tensor.realize(out, X.grad)
  terms = getattr(tx.detach().abs(), op)(axis, keepdim=keep) if op in ("sum", "mean") else None   # a sum may cancel
  case.close(out.numpy(), tout, f"{op} forward", kred, case.exact, terms)
  if not bwd: return
  (tout * torch.tensor(gr, dtype=torch.float64)).sum().backward()
  case.close(X.grad.numpy(), tx.grad, f"{op} grad", kred, case.exact)

# ***** (d) TinyJit steps *****

def run_jit(case: Case) -> None:
  """A conv or linear step (forward + weight gradients) in TinyJit, called 3 times with new input data."""
  rng = case.rng
  conv = bool(rng.random() < 0.6)
  bwd = bool(rng.random() < 0.6)
  if conv:
    sh = _conv_shape(rng)
    kw_ = dict(stride=sh["stride"], dilation=sh["dilation"], padding=sh["padding"], groups=sh["groups"])
    xs, ws = (sh["n"], sh["c_in"], sh["h"], sh["w"]), (sh["c_out"], sh["c_in"] // sh["groups"], *sh["k"])
    case.log.append(f"jit conv {sh} backward={bwd}")
  else:
    m, n, k = _dim(rng, 400), _dim(rng, 400), _dim(rng, 400)
    while m * n * k > 64_000_000 * WORK and m * k > 1: m, k = max(1, m // 2), max(1, k // 2)   # (WORK 1: never)
    xs, ws = (m, k), (n, k)
    case.log.append(f"jit linear M={m} N={n} K={k} backward={bwd}")
  wv = case.data(ws)
  W = Tensor(wv, requires_grad=True)
  def f(x: Tensor) -> Tensor: return x.conv2d(W, None, **kw_) if conv else x.linear(W.transpose())
  def step(x: Tensor, g: Tensor) -> list[Tensor]:
    W.grad = None
    out = f(x).relu()
    if not bwd: return [out.realize()]
    (out * g).sum().backward()
    return [out.realize(), W.grad.realize()]
  jit = TinyJit(step)
  tw = torch.tensor(wv, dtype=torch.float64, requires_grad=True)
  kk = int(np.prod(ws[1:]))
  def lin(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor: return torch.nn.functional.conv2d(x, w, None, **kw_) if conv else x @ w.T
  for call in range(3):
    x = case.data(xs)
    tx = torch.tensor(x, dtype=torch.float64)
    tpre = lin(tx, tw)
    gr = case.data(tuple(tpre.shape))
    got = jit(Tensor(x), Tensor(gr))
    tout = tpre * case.relu_mask(tpre, lin(tx.abs(), tw.detach().abs()), got[0].numpy(), kk)
    case.close(got[0].numpy(), tout, f"jit call {call} forward", kk, case.exact)
    if bwd:
      tw.grad = None
      (tout * torch.tensor(gr, dtype=torch.float64)).sum().backward()
      case.close(got[1].numpy(), tw.grad, f"jit call {call} weight grad", int(np.prod(tout.shape)) // ws[0] * kk, case.exact)

KINDS = [(0.35, run_matmul), (0.75, run_conv), (0.9, run_reduce), (1.0, run_jit)]

def run_seed(seed: int) -> None:
  case = Case(seed)
  r = case.rng.random()
  fn = next(f for p, f in KINDS if r < p)
  try: fn(case)
  except Exception as e:
    raise AssertionError(f"FUZZ_SEED={seed} ({fn.__name__}): {' | '.join(case.log)}\n{type(e).__name__}: {e}") from e

# ***** the tests *****
CI_SEEDS = range(40)

@pytest.mark.parametrize("seed", CI_SEEDS)
def test_fuzz_heavy(seed):
  run_seed(seed)

# seeds whose failure was the oracle's, not ours (each names why): they pass since the oracle was fixed
@pytest.mark.parametrize("seed", [
  200633,   # jit linear 400^3: a pre-activation -7.1e-6 exact, +6.9e-6 float32 (Case.relu_mask)
  400215])  # conv, training BatchNorm of 2 values per channel: the input gradient is all cancellation (_bn_backward_terms)
def test_fuzz_heavy_found(seed):
  run_seed(seed)

def test_relu_mask_follows_our_sign_only_within_rounding():
  """Near 0 (within 8 u sqrt(k) sum|terms|) the oracle's relu takes our sign; farther out float64's, whatever ours says:
  a pre-activation we get wrong beyond rounding still fails the checks. Exact integer data: always float64's."""
  pre, terms = torch.tensor([-7.13e-6, -7.13e-6, -0.5, 0.5, 1e-6], dtype=torch.float64), torch.full((5,), 242.0, dtype=torch.float64)
  ours = np.array([6.94e-6, 0.0, 0.25, 0.0, 0.0], np.float32)   # (0.25 and 0.0 where float64 says -0.5 and 0.5: wrong)
  case = Case(0)
  case.exact = False
  assert case.relu_mask(pre, terms, ours, 400).tolist() == [1.0, 0.0, 0.0, 1.0, 0.0]
  case.exact = True
  assert case.relu_mask(pre, terms, ours, 400).tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]

def test_fuzz_heavy_replay_one():
  """FUZZ_SEED=n replays one case (by default seed 0, so the test also runs in CI)."""
  run_seed(int(os.environ.get("FUZZ_SEED", "0")))

def test_fuzz_heavy_long():
  """New cases: one in CI, 600 s of them with FUZZ_LONG=1 (test_fuzz_ops.py fuzz_for_a_while)."""
  fuzz_for_a_while(run_seed, "heavy cases", 0)
