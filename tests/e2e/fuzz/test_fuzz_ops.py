"""Differential fuzzer: seeded random programs of elementwise, reduce and movement ops, casts, views and
broadcasting, on 0-size and prime-sized shapes, with gradients, checked against torch (CPU) as the oracle; integer
programs against numpy (whose // and % by 0 we match).

CI runs a fixed set of seeds (a few dozen seconds); `FUZZ_LONG=1` runs new seeds for 10 minutes (FUZZ_SECONDS to
change that, FUZZ_START for the first seed) on the CPU. `FUZZ_SEED=n` replays one program (printed with every
failure; FUZZ_DEVICE=PTXEMU for the PTX path). Every failure found
becomes a named test in tests/e2e/fuzz/test_regressions.py.
"""
from __future__ import annotations

import os
from collections.abc import Callable
import time

import numpy as np
import pytest
import torch

from compiler.dtypes import dtypes
from frontend import Tensor

SIZES = [1, 2, 3, 5, 7, 13, 0, 4, 1]

def _shape(rng, ndim=None) -> tuple[int, ...]:
  nd = int(rng.integers(0, 4)) if ndim is None else ndim
  sizes = [int(rng.choice(SIZES)) for _ in range(nd)]
  if 0 in sizes and rng.random() < 0.7: sizes = [s or 3 for s in sizes]   # keep 0-size programs a minority
  return tuple(sizes)

def _pair(rng, shape, device):
  a = rng.uniform(-3, 3, shape).astype(np.float32)
  if a.size and rng.random() < 0.3: a.flat[rng.integers(0, a.size)] = 0.0   # exact zeros hit the 0-gradient edge cases
  return Tensor(a, requires_grad=True, device=device), torch.tensor(a, requires_grad=True)

# (name, ours, torch): the same expression on both sides unless torch spells it differently
UNARY = [
  ("neg", lambda x: -x, None), ("relu", lambda x: x.relu(), None), ("abs", lambda x: x.abs(), None),
  ("sigmoid", lambda x: x.sigmoid(), None), ("tanh", lambda x: x.tanh(), None), ("square", lambda x: x.square(), None),
  ("sin", lambda x: x.sin(), None), ("exp", lambda x: x.clip(-4, 4).exp(), None), ("log", lambda x: (x.abs() + 1).log(), None),
  ("sqrt", lambda x: (x.abs() + 0.5).sqrt(), None), ("cube", lambda x: x ** 3, None), ("pow1.5", lambda x: x.abs() ** 1.5, None),
  ("gelu", lambda x: x.gelu(), lambda x: torch.nn.functional.gelu(x, approximate="tanh")),
  ("recip", lambda x: 1 / (x.abs() + 1), None), ("half", lambda x: x.half().float(), None),
  ("floor", lambda x: x.floor(), None), ("contig", lambda x: x.contiguous(), None),
]
BINARY = [
  ("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
  ("div", lambda a, b: a / (b.abs() + 1)), ("maximum", lambda a, b: a.maximum(b) if isinstance(a, Tensor) else torch.maximum(a, b)),
  ("where", lambda a, b: (a > b).where(a, b) if isinstance(a, Tensor) else torch.where(a > b, a, b)),
]

class Program:
  """One random program, built on our Tensor and torch side by side; `log` says what it did."""
  def __init__(self, seed: int, device: str = "CPU"):
    self.rng, self.seed, self.log, self.device = np.random.default_rng(seed), seed, [], device
    self.leaves: list[tuple[Tensor, torch.Tensor]] = []
    self.ill_conditioned = False   # a std of (nearly) equal values: its gradient is rounding noise in any implementation
  def leaf(self, shape):
    p = _pair(self.rng, shape, self.device)
    self.leaves.append(p)
    self.log.append(f"leaf{len(self.leaves) - 1}{shape}")
    return p

  def step(self, x, tx):
    rng, sh = self.rng, tuple(x.shape)
    k = rng.random()
    if k < 0.25:
      name, f, tf = UNARY[rng.integers(len(UNARY))]
      self.log.append(name)
      return f(x), (tf or f)(tx)
    if k < 0.45:
      name, f = BINARY[rng.integers(len(BINARY))]
      # the other operand: same shape, broadcastable (some dims 1, fewer dims), or a python scalar
      r = rng.random()
      if r < 0.15:
        c = float(np.round(rng.uniform(-2, 2), 2))
        self.log.append(f"{name} {c}")
        return f(x, Tensor(c, device=self.device)), f(tx, torch.tensor(c))
      osh = tuple(1 if rng.random() < 0.4 else s for s in sh)
      if r < 0.4 and osh: osh = osh[int(rng.integers(0, len(osh) + 1)):]
      y, ty = self.leaf(osh)
      self.log.append(name)
      return (f(x, y), f(tx, ty)) if rng.random() < 0.7 else (f(y, x), f(ty, tx))
    if k < 0.6 and sh:
      ax = int(rng.integers(-len(sh), len(sh)))
      keep = bool(rng.random() < 0.5)
      ops = ["sum", "mean"] + (["max", "softmax", "log_softmax", "logsumexp"] if sh[ax] else []) + (["var", "std"] if sh[ax] > 1 else [])
      op = ops[rng.integers(len(ops))]
      self.log.append(f"{op}({ax}, keepdim={keep})")
      if op == "sum": return x.sum(ax, keepdim=keep), tx.sum(ax, keepdim=keep)
      if op == "mean": return x.mean(ax, keepdim=keep), tx.mean(ax, keepdim=keep)
      if op == "max": return x.max(ax, keepdim=keep), tx.amax(ax, keepdim=keep)
      if op == "var": return x.var(ax, keepdim=keep), tx.var(ax, keepdim=keep)
      if op == "std":
        ts = (tx.abs() + 1).std(ax, keepdim=keep)
        if ts.numel() and float(ts.detach().abs().min()) < 1e-3: self.ill_conditioned = True   # (FUZZ_SEED=104539)
        return (x.abs() + 1).std(ax, keepdim=keep), ts
      if op == "logsumexp": return x.logsumexp(ax, keepdim=keep), tx.logsumexp(ax, keepdim=keep)
      return getattr(x, op)(ax), getattr(tx, op)(ax)
    return self.movement(x, tx)

  def movement(self, x, tx):
    rng, sh = self.rng, tuple(x.shape)
    nd = len(sh)
    opts = ["unsqueeze_expand", "pad", "cat"] + (["permute", "flip", "slice", "reshape", "index", "transpose"] if nd else [])
    op = opts[rng.integers(len(opts))]
    if op == "permute":
      order = [int(i) for i in rng.permutation(nd)]
      self.log.append(f"permute{order}")
      return x.permute(order), tx.permute(order)
    if op == "transpose" and nd >= 2:
      self.log.append("transpose")
      return x.transpose(0, -1), tx.transpose(0, -1)
    if op == "flip":
      ax = int(rng.integers(nd))
      self.log.append(f"flip({ax})")
      return x.flip(ax), tx.flip(ax)
    if op == "slice":
      sl = []
      for s in sh:
        a = int(rng.integers(0, s + 1)); b = int(rng.integers(a, s + 1)); st = int(rng.choice([1, 1, 2, 3]))
        sl.append(slice(a, b, st))
      self.log.append(f"slice{sl}")
      return x[tuple(sl)], tx[tuple(sl)]
    if op == "index":
      ax = int(rng.integers(nd))
      if sh[ax] == 0: return x, tx
      i = int(rng.integers(-sh[ax], sh[ax]))
      idx = (slice(None),) * ax + (i,)
      self.log.append(f"index[{idx}]")
      return x[idx], tx[idx]
    if op == "reshape":
      n = int(np.prod(sh))
      divs = [d for d in range(1, n + 1) if n % d == 0] or [0]
      d = int(rng.choice(divs))
      new = (d, n // d) if d and rng.random() < 0.6 else (n,)
      self.log.append(f"reshape{new}")
      return x.reshape(new), tx.reshape(new)
    if op == "unsqueeze_expand":
      ax = int(rng.integers(0, nd + 1))
      k = int(rng.choice([1, 2, 3, 0 if rng.random() < 0.1 else 5]))
      new = sh[:ax] + (k,) + sh[ax:]
      self.log.append(f"unsqueeze({ax}).expand{new}")
      return x.unsqueeze(ax).expand(new), tx.unsqueeze(ax).expand(new)
    if op == "pad":
      pads = [(int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in sh]
      flat = [v for p in pads[::-1] for v in p]
      self.log.append(f"pad{pads}")
      return x.pad(tuple(pads)), torch.nn.functional.pad(tx, flat)
    # cat with a fresh leaf (or with itself) along an axis
    if nd == 0: return x, tx
    ax = int(rng.integers(nd))
    if rng.random() < 0.5:
      osh = sh[:ax] + (int(rng.choice([0, 1, 2, 5])),) + sh[ax + 1:]
      y, ty = self.leaf(osh)
    else: y, ty = x, tx
    self.log.append(f"cat(axis={ax})")
    return (x.cat(y, dim=ax), torch.cat([tx, ty], ax)) if rng.random() < 0.5 else (y.cat(x, dim=ax), torch.cat([ty, tx], ax))

  def run(self, n_ops: int, grads: bool) -> None:
    x, tx = self.leaf(_shape(self.rng))
    outs = []
    for _ in range(n_ops):
      x, tx = self.step(x, tx)
      if self.rng.random() < 0.15: outs.append((x, tx))   # some intermediates are outputs too (several consumers)
    outs.append((x, tx))
    for o, to in outs: _close(o.numpy(), to.detach().numpy(), "forward")
    if not grads: return
    loss, tloss = None, None
    for o, to in outs:
      g = self.rng.standard_normal(tuple(to.shape)).astype(np.float32)
      lo, tlo = (o * Tensor(g, device=self.device)).sum(), (to * torch.tensor(g)).sum()
      loss, tloss = (lo, tlo) if loss is None else (loss + lo, tloss + tlo)
    loss.backward(); tloss.backward()
    got = [(i, t.grad, tt.grad) for i, (t, tt) in enumerate(self.leaves) if tt.grad is not None]
    for i, g, _tg in got: assert g is not None, f"leaf {i}: no gradient"
    if self.ill_conditioned:   # the values are noise, but a NaN or inf is still a bug (std's gradient at 0: seed 43)
      for i, g, _tg in got: assert np.isfinite(g.numpy()).all(), f"leaf {i}: gradient not finite"
      return
    if self.rng.random() < 0.5 and got:
      # the lazy gradients concatenated (with a value of the forward graph) before any is realized: a grad norm
      order = [int(j) for j in self.rng.permutation(len(got))]
      flat = [got[j][1].flatten() for j in order] + [outs[-1][0].detach().flatten()]
      tflat = [got[j][2].flatten() for j in order] + [outs[-1][1].detach().flatten()]
      self.log.append(f"cat(grads {order} + out)")
      _close(flat[0].cat(*flat[1:]).numpy(), torch.cat(tflat).numpy(), "cat of lazy gradients")
    for i, g, tg in got: _close(g.numpy(), tg.numpy(), f"grad of leaf {i}")

def _close(ours, theirs, what):
  assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} != torch {theirs.shape}"
  np.testing.assert_allclose(ours, theirs, rtol=3e-3, atol=3e-4, equal_nan=True, err_msg=what)

def run_seed(seed: int, device: str = "CPU") -> None:
  p = Program(seed, device)
  try: p.run(int(p.rng.integers(1, 7)), grads=bool(p.rng.random() < 0.7))
  except Exception as e:
    raise AssertionError(f"FUZZ_SEED={seed} device={device}: {' -> '.join(p.log)}\n{type(e).__name__}: {e}") from e

# ***** integer programs against numpy *****
INT_OPS = ["add", "mul", "sub", "floordiv", "mod", "maximum", "lt", "sum", "cast"]

def run_int_seed(seed: int, device: str = "CPU") -> None:
  rng = np.random.default_rng(seed)
  sh = _shape(rng)
  a = rng.integers(-20, 20, sh).astype(np.int32)
  x, log = Tensor(a, device=device), []
  try:
    for _ in range(int(rng.integers(1, 5))):
      op = INT_OPS[rng.integers(len(INT_OPS))]
      b = rng.integers(-4, 5, tuple(1 if rng.random() < 0.3 else s for s in a.shape)).astype(np.int32)   # zeros included
      y = Tensor(b, device=device)
      log.append(op)
      with np.errstate(all="ignore"):
        if op == "add": x, a = x + y, a + b
        elif op == "mul": x, a = x * y, a * b
        elif op == "sub": x, a = x - y, a - b
        elif op == "floordiv": x, a = x // y, a // b
        elif op == "mod": x, a = x % y, a % b
        elif op == "maximum": x, a = x.maximum(y), np.maximum(a, b)
        elif op == "lt": x, a = (x < y).cast(dtypes.int32), (a < b).astype(np.int32)
        elif op == "sum" and a.ndim: x, a = x.sum(0), a.sum(0, dtype=np.int32)
        elif op == "cast": x = x.cast(dtypes.float32).cast(dtypes.int32)   # exact for these small ints
      a = np.asarray(a, dtype=np.int32)
    np.testing.assert_array_equal(x.numpy(), a)
  except Exception as e:
    raise AssertionError(f"int FUZZ_SEED={seed} device={device}: {' -> '.join(log)} on {sh}\n{type(e).__name__}: {e}") from e

# ***** the tests *****
CI_SEEDS = range(60)

@pytest.mark.parametrize("seed", CI_SEEDS)
def test_fuzz_cpu(seed):
  run_seed(seed)

@pytest.mark.parametrize("seed", range(1000, 1012))
def test_fuzz_ptx(seed):
  run_seed(seed, "PTXEMU")

@pytest.mark.parametrize("seed", range(20))
def test_fuzz_int(seed):
  run_int_seed(seed)
  if seed < 4: run_int_seed(seed, "PTXEMU")

def test_fuzz_replay_one():
  """FUZZ_SEED=n replays one program (by default seed 0, so the test also runs in CI)."""
  run_seed(int(os.environ.get("FUZZ_SEED", "0")), os.environ.get("FUZZ_DEVICE", "CPU"))

def fuzz_for_a_while(run: Callable[[int], None], what: str, ci_seconds: float) -> None:
  """`run` on seeds from FUZZ_START (100000) on, for FUZZ_SECONDS: 600 with FUZZ_LONG=1, else `ci_seconds` (at least
  one seed: a skip would fail CI); every failure is listed (its first line, which replays it, and its error)."""
  start = int(os.environ.get("FUZZ_START", "100000"))
  default = "600" if os.environ.get("FUZZ_LONG") == "1" else str(ci_seconds)
  budget, t0, seed, failures = float(os.environ.get("FUZZ_SECONDS", default)), time.monotonic(), start, []
  while seed == start or time.monotonic() - t0 < budget:
    try: run(seed)
    except AssertionError as e: failures.append(str(e).splitlines()[0][:400] + " | " + str(e).splitlines()[-1][:300])
    seed += 1
  print(f"\nFUZZ_LONG: {seed - start} {what} in {time.monotonic() - t0:.0f} s, {len(failures)} failed")
  assert not failures, "\n".join(failures[:30])

def test_fuzz_long():
  """Programs (every fourth an integer one) for a few seconds in CI, 600 s with FUZZ_LONG=1 (fuzz_for_a_while)."""
  fuzz_for_a_while(lambda seed: (run_seed if seed % 4 else run_int_seed)(seed), "programs", 3)
