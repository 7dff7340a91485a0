"""Differential fuzzer of the two areas the other fuzzers (single device, concrete shapes) never reach:

(a) sharded programs: leaves split over 2-4 CPU devices ("CPU:1".."CPU:4") on a random axis or replicated (an axis
    whose size does not split evenly is refused first: the error must name the axis, the shape, the size and the
    device count), then a chain of elementwise / broadcasting ops with other sharded leaves, movement (reshape,
    permute, pad, shrink, expand, flip, a shrink to one shard and the pad back), reductions over sharded and unsharded
    axes (sum / max / mean / softmax), matmul with one or both operands sharded, cat (where one along the split axis
    is refused, the value is cut to one shard and joins a piece of itself on that device), and a gather to one device
    (`to`). A movement the sharding can't keep must be refused with an error naming the op and the shape (checked;
    the op is then left out). Forward and the gradient of every leaf (through `.backward()`) are compared with torch
    float64 (CPU); a third of the programs run inside TinyJit, 4 calls with new leaf values, every call checked.
(b) symbolic programs under TinyJit: an input window `x[:v]` (sequence-length style, v a bound Variable) and a chain
    of elementwise ops with other windows and with concrete broadcast rows, reductions over and across the symbolic
    axis, matmul with v as M, as K and as N (attention scores), softmax over either axis; called 6 times with values
    of v (and new data) drawn each call. Every call's results must equal the same function run eagerly at that value
    bit for bit (the JIT replays the very kernels eager compiled) and match float64 numpy.
(c) both at once, what a data-parallel step over a variable sequence length is: (b)'s program on a batch of windows
    x[:, :v] split over 2-4 devices on the batch axis (weights replicated), maybe then a reduce over the batch (an
    allreduce of a symbolic shape), half of them with the gradient of every leaf; under TinyJit, 6 calls, each equal to
    eager bit for bit and matched against float64 torch as (a).

Oracle tolerances. Half of the programs use small-integer data (|x| <= 3) and only ops that keep integers (no
sigmoid / mean / softmax; a max's tied gradient is a power-of-two split only by luck, so the programs with a max
reduce are float): every value and gradient is then an integer, exact in float32 in any summation order while below
2^24 (checked on the float64 oracle: programs whose values grow past it are compared with the float tolerance), so the
check is EXACT: a lost shard, a doubled allreduce term or a wrong window can't hide in a tolerance. The other half is
float data, compared with the probabilistic rounding bound of a length-K float32 sum (Higham & Mary 2019, Thm 2.4, as
tests/e2e/fuzz/test_fuzz_heavy.py): |ours - ref| <= 8 u sqrt(K) (max|ref| + |ref|), u = 2^-24, K the product of the reduction
lengths the value went through (a sum over 12, then a matmul over 8: 96; at least 16 for a chain of elementwise
roundings). A missing or doubled term is of the order of |ref| / sqrt(K), above that bound for every K here. Where
the exact value cancels to ~0 (the gradient of a row broadcast into a softmax over that axis: sum_i y_i (g_i - s) is
0), |ref| says nothing of the rounding: the bound adds 4x the largest error of torch's own float32 run of the same
program (FUZZ_SEED=100255: ours 1.5e-7, torch float32 2.5e-7, float64 1e-16); and the bound is taken of the largest
value the program met, not only of max|ref| (each rounding is relative to the value rounded, and a mean of dot
products or a sum of softmax terms can end far smaller: FUZZ_SEED=201748, a mean of 8 length-5 dots of O(1) terms,
0.0058, ours off by 4.7e-8; 202817, 0.5 * sum(softmax) - 0.25 = 0, ours 1.5e-8), for a gradient of max|cotangent| *
max(1, that value) (102078: the gradient of a shift before a softmax is 0, torch float32 gets 0 too, ours 3e-8).

CI runs CI_SEEDS of (a) and (b), 6 of (c) (seconds each); `FUZZ_LONG=1` runs new seeds for FUZZ_SECONDS (600) from FUZZ_START
(tests/e2e/fuzz/test_fuzz_ops.py fuzz_for_a_while), `FUZZ_FAMILY=sharded|symbolic|sharded_symbolic` restricts the long run to
one family; `FUZZ_SEED=n` replays one case of each family (test_fuzz_multi_replay_*). A failure prints the seed and the program.
"""
from __future__ import annotations
import os, re
import numpy as np
import pytest
import torch
from frontend import Tensor, TinyJit, Variable
from compiler.sint import sval
from test_fuzz_ops import fuzz_for_a_while

U32 = 2.0 ** -24

def _close(ours: np.ndarray, ref: np.ndarray, what: str, k: int, exact: bool, noise: float = 0.0, peak: float = 0.0) -> None:
  """ours (float32) against the float64 oracle: equal when exact, else within the rounding bound (module doc) of the
  larger of max|ref| and `peak` (the largest intermediate value) plus 4 `noise` (the largest error of an independent
  float32 run of the program: what its cancellations leave)."""
  assert ours.shape == ref.shape, f"{what}: shape {ours.shape}, oracle {ref.shape}"
  if exact and np.abs(ref).max(initial=0) < 2 ** 24:
    bad = ours != ref
    if bad.any():
      i = tuple(int(j) for j in np.argwhere(bad)[0])
      raise AssertionError(f"{what}: {int(bad.sum())}/{bad.size} elements differ (exact integer data), first at {i}: ours {ours[i]} oracle {ref[i]}")
    return
  tol = 8 * U32 * np.sqrt(max(k, 16))
  scale = max(float(np.abs(ref).max(initial=0)), peak)
  err = np.abs(ours.astype(np.float64) - ref)
  lim = tol * (scale + np.abs(ref)) + 4 * noise + 1e-30
  if not (err <= lim).all():
    i = np.unravel_index(np.argmax(np.nan_to_num(err - lim, nan=np.inf)), err.shape)
    raise AssertionError(f"{what}: {int((~(err <= lim)).sum())}/{err.size} elements off (K={k}, tol {tol:.2e}, scale {scale:.3g}, "
                         f"float32 noise {noise:.2e}); "
                         f"worst at {tuple(int(j) for j in i)}: ours {ours[i]} oracle {ref[i]}")

# ======================================================================================================================
# (a) sharded programs
# ======================================================================================================================

SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12]

def _tpad(t: torch.Tensor, pads) -> torch.Tensor:
  return torch.nn.functional.pad(t, [p for pr in reversed(pads) for p in pr])

def _tshrink(t: torch.Tensor, arg) -> torch.Tensor: return t[tuple(slice(a, b) for a, b in arg)]

# elementwise ops on (ours, torch); "int": they keep integers
UNARY = {"neg": (lambda x: -x, True), "relu": (lambda x: x.relu(), True), "affine": (lambda x: x * 2 + 1, True),
         "square": (lambda x: x * x, True), "sigmoid": (lambda x: x.sigmoid(), False), "half": (lambda x: x * 0.5 - 0.25, False)}
BINARY = {"add": (lambda x, y: x + y, True), "sub": (lambda x, y: x - y, True), "mul": (lambda x, y: x * y, True),
          "maximum": (lambda x, y: x.maximum(y), True),
          "where": (lambda x, y: torch.where(x > y, x, y * 2) if isinstance(x, torch.Tensor) else (x > y).where(x, y * 2), True)}
REDUCES = ("sum", "max", "mean", "softmax")

class Leaf:
  """One input: its data, where it lives (a tuple of devices and the split axis, or one device)."""
  def __init__(self, data: np.ndarray, devices, axis):
    self.data, self.devices, self.axis = data, devices, axis
  def ours(self, data: np.ndarray | None = None) -> Tensor:
    d = self.data if data is None else data
    t = Tensor(d, device=self.devices).realize() if isinstance(self.devices, str) else Tensor(d).shard(self.devices, self.axis).realize()
    t.requires_grad = True
    return t
  def __repr__(self) -> str:
    where = self.devices if isinstance(self.devices, str) else f"shard({len(self.devices)} devices, axis={self.axis})"
    return f"{self.data.shape} {where}"

class ShardedCase:
  """A random program, built by running it on our tensors (the sharding of each step decides what the next may be).
  `steps` replays it on ours or on torch; `log` is the readable program."""
  def __init__(self, seed: int):
    self.seed, self.rng = seed, np.random.default_rng(seed)
    r = self.rng
    self.n = int(r.integers(2, 5))
    self.devices = tuple(f"CPU:{i + 1}" for i in range(self.n))
    self.exact = bool(r.random() < 0.5)
    self.jit = bool(r.random() < 0.33)
    self.leaves: list[Leaf] = []
    self.steps: list[tuple] = []
    self.log: list[str] = [f"{self.n} devices, {'integer' if self.exact else 'float'} data{', TinyJit' if self.jit else ''}"]
    self.refused = 0

  def data(self, shape) -> np.ndarray:
    if self.exact: return self.rng.integers(-3, 4, shape).astype(np.float32)
    return self.rng.standard_normal(shape).astype(np.float32)

  def new_leaf(self, shape: tuple[int, ...], where) -> int:
    """A leaf of `shape` placed like `where` (a device, or the devices with a random axis: one that splits evenly, or
    None); sometimes first an axis that does not split, whose refusal is checked."""
    r = self.rng
    if isinstance(where, str): devs, axis = where, None
    else:
      devs = self.devices
      ok = [a for a, s in enumerate(shape) if s % self.n == 0 and s > 0]
      bad = [a for a, s in enumerate(shape) if s % self.n]
      if bad and r.random() < 0.15:
        a = int(r.choice(bad))
        with pytest.raises(ValueError, match=rf"shard: axis {a} of shape {re.escape(str(shape))} has {shape[a]} elements, which do not "
                                             rf"split evenly over {self.n} devices"):
          Tensor(np.zeros(shape, np.float32)).shard(devs, a)
        self.refused += 1
        self.log.append(f"(shard of {shape} on axis {a} refused)")
      axis = int(r.choice(ok)) if ok and r.random() < 0.75 else None
    self.leaves.append(Leaf(self.data(shape), devs, axis))
    self.log.append(f"L{len(self.leaves) - 1} = leaf {self.leaves[-1]!r}")
    return len(self.leaves) - 1

  # *** the ops: each is (kind, args...), applied by `apply` to ours or torch ***
  def apply(self, step: tuple, v, leaves: list, torch_: bool):
    kind, *a = step
    if kind == "un":
      fn = UNARY[a[0]][0]
      return fn(v)
    if kind == "bin":
      fn, other = BINARY[a[0]][0], leaves[a[1]]
      return fn(other, v) if a[2] else fn(v, other)
    if kind == "reshape": return v.reshape(a[0])
    if kind == "permute": return v.permute(*a[0])
    if kind == "pad": return _tpad(v, a[0]) if torch_ else v.pad(a[0])
    if kind == "shrink": return _tshrink(v, a[0]) if torch_ else v.shrink(a[0])
    if kind == "expand":
      ax, size = a
      u = v.unsqueeze(ax)
      return u.expand(*[size if i == ax else s for i, s in enumerate(u.shape)])
    if kind == "flip": return v.flip(a[0])
    if kind == "reduce":
      op, ax, keep = a
      if op == "sum": return v.sum(ax, keepdim=keep)
      if op == "mean": return v.mean(ax, keepdim=keep)
      if op == "softmax": return v.softmax(ax)
      return torch.amax(v, ax, keepdim=keep) if torch_ else v.max(ax, keepdim=keep)
    if kind == "matmul": return leaves[a[0]] @ v if a[1] else v @ leaves[a[0]]
    if kind == "cat": return torch.cat([v, leaves[a[0]]], a[1]) if torch_ else v.cat(leaves[a[0]], dim=a[1])
    if kind == "catself":   # v and twice its first element along the axis (a KV-cache style append of v's own piece)
      head = v.narrow(a[0], 0, 1) if torch_ else v.shrink(tuple((0, 1) if i == a[0] else None for i in range(v.ndim)))
      return torch.cat([v, head * 2], a[0]) if torch_ else v.cat(head * 2, dim=a[0])
    if kind == "to": return v if torch_ else v.to(a[0])
    raise AssertionError(kind)

  def try_step(self, step: tuple, v: Tensor, leaves: list[Tensor], refusal: str | None = None) -> Tensor | None:
    """Apply step to ours; a refusal (the sharding can't keep it) must match `refusal` (a regex naming the op and the
    shape): then None. Anything else raised is a failure."""
    try: out = self.apply(step, v, leaves, False)
    except (RuntimeError, ValueError) as e:
      if refusal is None or not re.search(refusal, str(e)): raise AssertionError(f"step {step} of shape {v.shape}: {type(e).__name__}: {e}") from e
      self.refused += 1
      self.log.append(f"({step} on {v.shape} refused: {e})")
      return None
    self.steps.append(step)
    self.log.append(f"v = {step} -> {out.shape} on {out.device}" + (f" axis {out.lazydata.axis}" if isinstance(out.device, tuple) else ""))
    return out

  def build(self) -> None:
    """Generate the program (run on ours eagerly as it goes, to know each value's placement)."""
    r = self.rng
    nd = int(r.integers(1, 4))
    shape = tuple(int(r.choice(SIZES)) if r.random() < 0.4 else self.n * int(r.integers(1, 4)) for _ in range(nd))
    self.x = self.new_leaf(shape, self.devices)
    ts = [lf.ours() for lf in self.leaves]
    v, self.k = ts[0], 1
    ints = self.exact
    for _ in range(int(r.integers(2, 7))):
      shape, m = v.shape, v.lazydata
      where = v.device
      sharded = isinstance(where, tuple)
      sax = m.axis if sharded else None
      kinds = ["un", "bin", "bin", "reshape", "permute", "pad", "shrink", "expand", "flip", "reduce", "matmul", "cat", "to"]
      kind = str(r.choice(kinds))
      step, refusal = None, None
      if kind == "un": step = ("un", str(r.choice([n for n, (_, i) in UNARY.items() if i or not ints])))
      elif kind == "bin":
        bshape = tuple(1 if r.random() < 0.25 else s for s in shape)   # broadcasting from size-1 axes
        li = self.new_leaf(bshape, where); ts.append(self.leaves[li].ours())
        step = ("bin", str(r.choice(list(BINARY))), li, bool(r.random() < 0.5))
        refusal = r"expand .*can't expand the sharded axis"
      elif kind == "reshape" and len(shape) >= 1:
        if len(shape) >= 2 and r.random() < 0.5:   # merge two neighbours
          i = int(r.integers(0, len(shape) - 1))
          new = shape[:i] + (shape[i] * shape[i + 1],) + shape[i + 2:]
        else:                                       # split one axis in two (or add a 1)
          i = int(r.integers(0, len(shape)))
          f = next((f for f in (3, 2, 4) if shape[i] % f == 0 and shape[i] > f), 1)
          new = shape[:i] + ((f, shape[i] // f) if r.random() < 0.5 else (shape[i] // f, f)) + shape[i + 1:]
        step, refusal = ("reshape", new), r"reshape .*would move elements between the shards"
      elif kind == "permute" and len(shape) >= 2: step = ("permute", tuple(int(i) for i in r.permutation(len(shape))))
      elif kind == "pad" and shape:
        ax = int(r.integers(0, len(shape)))
        step = ("pad", tuple((int(r.integers(0, 3)), int(r.integers(0, 3))) if i == ax else (0, 0) for i in range(len(shape))))
        refusal = r"pad .* of shape .*(can't pad the sharded axis|the sharded axis \d+ can only be padded back to its whole size)"
      elif kind == "shrink" and shape:
        if sharded and sax is not None and all(m.real) and r.random() < 0.4:   # one shard's bounds, then maybe the pad back
          b = m.bounds[int(r.integers(0, self.n))]
          step = ("shrink", tuple(b if i == sax else (0, s) for i, s in enumerate(shape)))
          if (out := self.try_step(step, v, ts)) is not None:
            v, step = out, None
            if r.random() < 0.6: step = ("pad", tuple((b[0], shape[sax] - b[1]) if i == sax else (0, 0) for i in range(len(shape))))
        else:
          ax = int(r.integers(0, len(shape)))
          lo = int(r.integers(0, shape[ax])); hi = int(r.integers(lo + 1, shape[ax] + 1)) if shape[ax] else 0
          step = ("shrink", tuple((lo, hi) if i == ax else (0, s) for i, s in enumerate(shape)))
          refusal = r"shrink .* of shape .*it can only be shrunk to one shard"
      elif kind == "expand" and len(shape) < 4:
        # (a tensor shrunk to a one-element shard is split on a unit axis, which a new unit axis beside it may become)
        step, refusal = ("expand", int(r.integers(0, len(shape) + 1)), int(r.integers(2, 4))), r"expand .* -> .*: can't expand the sharded axis"
      elif kind == "flip" and shape:
        step, refusal = ("flip", (int(r.integers(0, len(shape))),)), r"flip .* of shape .*can't flip the sharded axis"
      elif kind == "reduce" and shape:
        op = str(r.choice(REDUCES if not ints else ("sum",)))
        ax = int(r.integers(0, len(shape)))
        step = ("reduce", op, ax, bool(r.random() < 0.5))
        self.k *= max(shape[ax], 1)
      elif kind == "matmul" and shape:
        kdim, other = shape[-1], int(r.choice([1, 2, 3, 4, self.n * 2]))
        left = len(shape) >= 2 and r.random() < 0.4
        li = self.new_leaf((other, shape[-2]) if left else (kdim, other), where); ts.append(self.leaves[li].ours())
        step = ("matmul", li, left)
        self.k *= max(shape[-2] if left else kdim, 1)
      elif kind == "cat" and shape:
        ax = int(r.integers(0, len(shape)))
        li = self.new_leaf(tuple(int(r.integers(1, 4)) if i == ax else s for i, s in enumerate(shape)), where); ts.append(self.leaves[li].ours())
        step, refusal = ("cat", li, ax), r"cat: shapes .* along dim \d+, which is sharded over"
      elif kind == "to" and sharded: step = ("to", str(r.choice(self.devices)))
      if step is not None and (out := self.try_step(step, v, ts, refusal)) is not None: v = out
      elif kind == "cat" and step is not None and sharded and sax == step[2] and shape[sax]:
        # (refused along the split axis: v cut to one shard, if split over all the devices, joins a piece of itself,
        # which stays on that one device, frontend/multi_cat.py; neither may be refused)
        if all(m.real):
          b = m.bounds[int(r.integers(0, self.n))]
          v = self.try_step(("shrink", tuple(b if i == sax else (0, s) for i, s in enumerate(shape))), v, ts)
        v = self.try_step(("catself", sax), v, ts)
    self.out_shape, self.out_device = v.shape, v.device

  # *** running it ***
  def program(self, ts: list, torch_: bool):
    """The program on our tensors or torch's (then `self.peak`: the largest |value| it met, inputs included)."""
    v = ts[self.x]
    if torch_: self.peak = max(float(t.detach().abs().max()) if t.numel() else 0.0 for t in ts)
    for s in self.steps:
      v = self.apply(s, v, ts, torch_)
      if torch_ and v.numel(): self.peak = max(self.peak, float(v.detach().abs().max()))
    return v

  def oracle(self, datas: list[np.ndarray], g: np.ndarray, dtype=torch.float64):
    """The output and every leaf's gradient, by torch in `dtype`."""
    ts = [torch.tensor(d, dtype=dtype, requires_grad=True) for d in datas]
    out = self.program(ts, True)
    (out * torch.tensor(g, dtype=dtype)).sum().backward()
    return [out.detach().numpy().astype(np.float64)] + [t.grad.numpy().astype(np.float64) if t.grad is not None else np.zeros(t.shape) for t in ts]

  def cotangent(self, g: np.ndarray) -> Tensor:
    """g where the output lives (replicated over the devices of a sharded output)."""
    d = self.out_device
    return (Tensor(g.astype(np.float32), device=d) if isinstance(d, str) else Tensor(g.astype(np.float32)).shard(d)).realize()

  def ours_step(self, ts: list[Tensor], gt: Tensor) -> list[Tensor]:
    out = self.program(ts, False)
    (out * gt).sum().backward()
    return [out.realize()] + [(t.grad if t.grad is not None else Tensor.zeros(*t.shape)).realize() for t in ts]

  def check(self, got: list[Tensor], datas: list[np.ndarray], g: np.ndarray, what: str) -> None:
    w32, want = self.oracle(datas, g, torch.float32), self.oracle(datas, g)   # (float64 last: its peak)
    # a gradient's terms are the cotangent times the derivatives met on the way, each at most ~ the values met (x*y:
    # y; x*x: 2x; sigmoid, softmax: <= 1): max|g| * max(1, peak) bounds them, where the terms cancel (module doc)
    gpeak = float(np.abs(g).max(initial=0)) * max(1.0, self.peak)
    for i, (o, w, t) in enumerate(zip(got, want, w32)):
      # (a leaf's gradient also sums over the output elements it reaches: out.size / leaf.size of them at least)
      k = self.k if i == 0 else self.k * max(want[0].size // max(self.leaves[i - 1].data.size, 1), 1)
      _close(o.numpy(), w, f"{what}: " + ("forward" if i == 0 else f"gradient of L{i - 1}"), k, self.exact, float(np.abs(t - w).max(initial=0)),
             self.peak if i == 0 else gpeak)

def run_sharded(seed: int) -> ShardedCase:
  case = ShardedCase(seed)
  try:
    case.build()
    jf = TinyJit(lambda *a: case.ours_step(list(a[:-1]), a[-1])) if case.jit else None
    for call in range(4 if case.jit else 1):
      datas = [lf.data if call == 0 else case.data(lf.data.shape) for lf in case.leaves]
      ts = [lf.ours(d) for lf, d in zip(case.leaves, datas)]
      g = case.data(case.out_shape).astype(np.float64)   # the output's cotangent: (out * g).sum().backward()
      got = (jf or case.ours_step)(*ts, case.cotangent(g)) if jf else case.ours_step(ts, case.cotangent(g))
      case.check(got, datas, g, f"call {call}")
  except Exception as e:
    raise AssertionError(f"FUZZ_SEED={seed} (sharded): {' | '.join(case.log)}\n{type(e).__name__}: {e}") from e
  return case

CI_SEEDS = range(12)

@pytest.mark.parametrize("seed", CI_SEEDS)
def test_fuzz_sharded(seed):
  run_sharded(seed)

# ======================================================================================================================
# (b) symbolic programs under TinyJit
# ======================================================================================================================

def _np_softmax(x: np.ndarray, ax: int) -> np.ndarray:
  e = np.exp(x - x.max(ax, keepdims=True))
  return e / e.sum(ax, keepdims=True)

NP_UNARY = {"relu": lambda x: np.maximum(x, 0), "sigmoid": lambda x: 1 / (1 + np.exp(-x))}

class SymbolicCase:
  """A random function of the windows x[:n], y[:n] (n, F), z[:n] (n, K2) and the concrete row r (F,) and matrix
  w (F, K); its value's dims are tracked as "n" or an int while it is built (`dims`)."""
  def __init__(self, seed: int):
    self.seed, self.rng = seed, np.random.default_rng(seed)
    r = self.rng
    self.maxlen, self.F, self.K, self.K2 = int(r.integers(2, 17)), int(r.choice([1, 2, 3, 5, 8])), int(r.choice([1, 3, 4])), int(r.choice([1, 2, 5]))
    self.steps: list[tuple] = []
    self.k = 1
    dims: list = ["n", self.F]
    for _ in range(int(r.integers(1, 6))):
      nd, opts = len(dims), ["un", "un", "softmax", "reduce", "permute"]
      if dims == ["n", self.F]: opts += ["bin_y", "matmul_m", "matmul_k", "attention"]
      if dims and dims[-1] == self.F: opts.append("bin_r")
      if nd == 2 and dims[0] == "n" and dims[1] != "n": opts.append("matmul_k_any")
      kind = str(r.choice(opts))
      if kind == "un": step = ("un", str(r.choice(["neg", "relu", "affine", "sigmoid", "half", "square"])))
      elif kind == "bin_y": step = ("bin_y", str(r.choice(list(BINARY))), bool(r.random() < 0.5))
      elif kind == "bin_r": step = ("bin_r", str(r.choice(list(BINARY))), bool(r.random() < 0.5))
      elif kind == "softmax" and nd: step = ("softmax", int(r.integers(0, nd)))
      elif kind == "reduce" and nd:
        ax = int(r.integers(0, nd))
        step = ("reduce", str(r.choice(["sum", "max", "mean"])), ax, bool(r.random() < 0.3))
        self.k *= self.maxlen if dims[ax] == "n" else dims[ax]
        dims = dims[:ax] + ([1] if step[3] else []) + dims[ax + 1:]
      elif kind == "permute" and nd >= 2: step, dims = ("permute",), dims[::-1]
      elif kind == "matmul_m": step, dims = ("matmul_m",), ["n", self.K]; self.k *= self.F
      elif kind == "matmul_k": step, dims = ("matmul_k",), [self.F, self.K2]; self.k *= self.maxlen   # v.T @ z[:n]: n is K
      elif kind == "matmul_k_any": step, dims = ("matmul_k_any",), [dims[1], self.K2]; self.k *= self.maxlen
      elif kind == "attention": step, dims = ("attention",), ["n", self.F]; self.k *= self.F * self.maxlen   # softmax(v x^T) y
      else: continue
      self.steps.append(step)
    # (transposes alone launch no kernel, and TinyJit rightly refuses a function with nothing to capture)
    if all(st[0] == "permute" for st in self.steps): self.steps.append(("un", "affine"))
    self.dims = dims

  def __repr__(self) -> str:
    return f"SymbolicCase(seed={self.seed}, n in [1, {self.maxlen}], F={self.F}, K={self.K}, K2={self.K2}, steps={self.steps}, out dims={self.dims})"

  def apply(self, v, env: dict, np_: bool):
    """The program on our tensors, or on numpy arrays (then `self.peak` is the largest |value| it met)."""
    if np_: self.peak = max(float(np.abs(x).max(initial=0)) for x in env.values())
    for step in self.steps:
      if np_: self.peak = max(self.peak, float(np.abs(v).max(initial=0)))
      kind, *a = step
      if kind == "un": v = (NP_UNARY.get(a[0]) or UNARY[a[0]][0])(v) if np_ else UNARY[a[0]][0](v)
      elif kind in ("bin_y", "bin_r"):
        other, fn = env["y" if kind == "bin_y" else "r"], a[0]
        if np_:
          npfn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum,
                  "where": lambda p, q: np.where(p > q, p, q * 2)}[fn]
          v = npfn(other, v) if a[1] else npfn(v, other)
        else: v = BINARY[fn][0](other, v) if a[1] else BINARY[fn][0](v, other)
      elif kind == "softmax": v = _np_softmax(v, a[0]) if np_ else v.softmax(a[0])
      elif kind == "reduce":
        op, ax, keep = a
        if np_: v = {"sum": np.sum, "max": np.max, "mean": np.mean}[op](v, axis=ax, keepdims=keep)
        else: v = getattr(v, op)(ax, keepdim=keep)
      elif kind == "permute": v = v.T
      elif kind == "matmul_m": v = v @ env["w"]
      elif kind in ("matmul_k", "matmul_k_any"): v = v.T @ env["z"]
      elif kind == "attention":
        s = v @ env["x"].T
        v = (_np_softmax(s, -1) if np_ else s.softmax(-1)) @ env["y"]
    return v

  def data(self, shape) -> np.ndarray: return self.rng.standard_normal(shape).astype(np.float32)

def run_symbolic(seed: int) -> SymbolicCase:
  case = SymbolicCase(seed)
  r = case.rng
  var = Variable("n", 1, case.maxlen)
  def f(x, y, z, rr, w):
    return case.apply(x, {"x": x, "y": y, "z": z, "r": rr, "w": w}, False).realize()
  jf = TinyJit(f)
  try:
    for call in range(6):
      n = int(r.choice([1, case.maxlen, int(r.integers(1, case.maxlen + 1))]))
      X, Y, Z = case.data((case.maxlen, case.F)), case.data((case.maxlen, case.F)), case.data((case.maxlen, case.K2))
      R, W = case.data((case.F,)), case.data((case.F, case.K))
      def args():
        b = var.bind(n)
        return (Tensor(X).realize()[:b], Tensor(Y).realize()[:b], Tensor(Z).realize()[:b], Tensor(R).realize(), Tensor(W).realize())
      got = jf(*args())
      eager = f(*args())
      shape = tuple(sval(d) for d in got.shape)
      assert shape == tuple(sval(d) for d in eager.shape), f"call {call} n={n}: TinyJit shape {shape}, eager {eager.shape}"
      g, e = got.numpy(), eager.numpy()
      if not np.array_equal(g, e, equal_nan=True):
        i = tuple(int(j) for j in np.argwhere(~((g == e) | (np.isnan(g) & np.isnan(e))))[0])
        raise AssertionError(f"call {call} n={n}: TinyJit differs from eager at {i}: {g[i]} vs {e[i]} (jit.cnt {jf.cnt})")
      inputs = {"x": X[:n], "y": Y[:n], "z": Z[:n], "r": R, "w": W}
      with np.errstate(all="ignore"):   # float64 numpy, and float32 numpy for the rounding noise of the cancellations
        w32 = np.asarray(case.apply(inputs["x"], inputs, True), np.float64)
        want = np.asarray(case.apply(inputs["x"].astype(np.float64), {k: v.astype(np.float64) for k, v in inputs.items()}, True))
      _close(g, want, f"call {call} n={n}: TinyJit (cnt {jf.cnt}) against float64 numpy", case.k, False, float(np.abs(w32 - want).max(initial=0)),
             max(case.peak, float(np.abs(want).max(initial=0))))
    assert jf.cnt >= 2, f"never captured (cnt {jf.cnt})"
  except Exception as e:
    raise AssertionError(f"FUZZ_SEED={seed} (symbolic): {case!r}\n{type(e).__name__}: {e}") from e
  return case

@pytest.mark.parametrize("seed", CI_SEEDS)
def test_fuzz_symbolic(seed):
  run_symbolic(seed)

# ======================================================================================================================
# (c) data parallel with a symbolic sequence length under TinyJit
# ======================================================================================================================

class ShardedSymbolicCase(SymbolicCase):
  """Family (b)'s program on a batch: the windows x[:, :n], y[:, :n] (B, n, F) and z[:, :n] (B, n, K2) split over 2-4
  devices on the batch axis B (what a data-parallel step over a variable sequence length is), r (F,) and w (F, K)
  replicated; each step maps over the batch (its axes one further on, a transpose of the last two); then maybe a
  reduce over the batch axis (an allreduce of a symbolic shape). Half of the cases also take the gradient of every
  leaf through 0.5 * sum(out^2) (the cotangent is `out`: no cotangent of a symbolic shape to make)."""
  def __init__(self, seed: int):
    super().__init__(seed)
    r = self.rng
    self.ndev = int(r.integers(2, 5))
    self.devices = tuple(f"CPU:{i + 1}" for i in range(self.ndev))
    self.B = self.ndev * int(r.integers(1, 3))
    self.batch_reduce = str(r.choice(["none", "sum", "max", "mean"]))
    if self.batch_reduce in ("sum", "mean"): self.k *= self.B
    self.grad = bool(r.random() < 0.5)

  def __repr__(self) -> str:
    return (f"ShardedSymbolicCase(seed={self.seed}, {self.ndev} devices, B={self.B}, n in [1, {self.maxlen}], F={self.F}, K={self.K}, "
            f"K2={self.K2}, steps={self.steps}, batch reduce {self.batch_reduce}, {'with' if self.grad else 'no'} gradients)")

  def run(self, env: dict, torch_: bool):
    """The program on our windows or torch's (then `self.peak`: the largest |value| it met, inputs included)."""
    if torch_: self.peak = max(float(t.detach().abs().max()) if t.numel() else 0.0 for t in env.values())
    T = lambda t: t.transpose(-1, -2)
    v = env["x"]
    for kind, *a in self.steps + ([("reduce", self.batch_reduce, -1, False)] if self.batch_reduce != "none" else []):
      if kind == "un": v = UNARY[a[0]][0](v)
      elif kind in ("bin_y", "bin_r"):
        fn, other = BINARY[a[0]][0], env["y" if kind == "bin_y" else "r"]
        v = fn(other, v) if a[1] else fn(v, other)
      elif kind == "softmax": v = v.softmax(a[0] + 1)
      elif kind == "reduce":
        op, ax, keep = a
        v = torch.amax(v, ax + 1, keepdim=keep) if torch_ and op == "max" else getattr(v, op)(ax + 1, keepdim=keep)
      elif kind == "permute": v = T(v)
      elif kind == "matmul_m": v = v @ env["w"]
      elif kind in ("matmul_k", "matmul_k_any"): v = T(v) @ env["z"]
      elif kind == "attention": v = (v @ T(env["x"])).softmax(-1) @ env["y"]
      if torch_ and v.numel(): self.peak = max(self.peak, float(v.detach().abs().max()))
    return v

  def shapes(self) -> list[tuple[int, ...]]:
    return [(self.B, self.maxlen, self.F), (self.B, self.maxlen, self.F), (self.B, self.maxlen, self.K2), (self.F,), (self.F, self.K)]

  def step(self, ts: list, n, torch_: bool) -> list:
    """The output and (with gradients) every leaf's gradient; ts are the whole leaves, n the window length."""
    x, y, z, r, w = ts
    out = self.run({"x": x[:, :n], "y": y[:, :n], "z": z[:, :n], "r": r, "w": w}, torch_)
    if not self.grad: return [out]
    ((out * out).sum() * 0.5).backward()
    if torch_: return [out] + [t.grad if t.grad is not None else torch.zeros(t.shape, dtype=t.dtype) for t in ts]
    return [out] + [t.grad if t.grad is not None else Tensor.zeros(*t.shape, device=t.device) for t in ts]

def run_sharded_symbolic(seed: int) -> ShardedSymbolicCase:
  case = ShardedSymbolicCase(seed)
  r = case.rng
  var = Variable("n", 1, case.maxlen)
  def ours(datas: list[np.ndarray]) -> list[Tensor]:
    ts = [Tensor(d).shard(case.devices, 0 if i < 3 else None).realize() for i, d in enumerate(datas)]
    for t in ts: t.requires_grad = case.grad
    return ts
  def f(x, y, z, rr, w, b): return [t.realize() for t in case.step([x, y, z, rr, w], b, False)]
  jf = TinyJit(f)
  try:
    for call in range(6):
      n = int(r.choice([1, case.maxlen, int(r.integers(1, case.maxlen + 1))]))
      datas = [case.data(s) for s in case.shapes()]
      got, eager = jf(*ours(datas), var.bind(n)), f(*ours(datas), var.bind(n))
      w32 = [t.detach().numpy().astype(np.float64) for t in case.step([torch.tensor(d, requires_grad=case.grad) for d in datas], n, True)]
      want = [t.detach().numpy() for t in case.step([torch.tensor(d, dtype=torch.float64, requires_grad=case.grad) for d in datas], n, True)]
      for i, (gt, et, w, t) in enumerate(zip(got, eager, want, w32)):
        what = f"call {call} n={n}: " + ("forward" if i == 0 else f"gradient of {'xyzrw'[i - 1]}")
        shape = tuple(sval(d) for d in gt.shape)
        assert gt.device == et.device and shape == tuple(sval(d) for d in et.shape), \
          f"{what}: TinyJit {shape} on {gt.device}, eager {et.shape} on {et.device}"
        g, e = gt.numpy(), et.numpy()
        if not np.array_equal(g, e, equal_nan=True):
          j = tuple(int(q) for q in np.argwhere(~((g == e) | (np.isnan(g) & np.isnan(e))))[0])
          raise AssertionError(f"{what}: TinyJit differs from eager at {j}: {g[j]} vs {e[j]} (jit.cnt {jf.cnt})")
        # (a gradient's terms: the cotangent `out` times derivatives bounded by the values met; see ShardedCase.check)
        k = case.k if i == 0 else case.k * max(want[0].size // max(w.size, 1), 1)
        peak = case.peak if i == 0 else float(np.abs(want[0]).max(initial=0)) * max(1.0, case.peak)
        _close(g, w, f"{what} (TinyJit cnt {jf.cnt}) against float64 torch", k, False, float(np.abs(t - w).max(initial=0)), peak)
    assert jf.cnt >= 2, f"never captured (cnt {jf.cnt})"
  except Exception as e:
    raise AssertionError(f"FUZZ_SEED={seed} (sharded_symbolic): {case!r}\n{type(e).__name__}: {e}") from e
  return case

@pytest.mark.parametrize("seed", range(6))
def test_fuzz_sharded_symbolic(seed):
  run_sharded_symbolic(seed)

# ***** replay and long runs *****
def test_fuzz_multi_replay_sharded():
  """FUZZ_SEED=n replays one sharded case (by default seed 0, so the test also runs in CI)."""
  run_sharded(int(os.environ.get("FUZZ_SEED", "0")))

def test_fuzz_multi_replay_symbolic():
  """FUZZ_SEED=n replays one symbolic case."""
  run_symbolic(int(os.environ.get("FUZZ_SEED", "0")))

def test_fuzz_multi_replay_sharded_symbolic():
  """FUZZ_SEED=n replays one sharded_symbolic case."""
  run_sharded_symbolic(int(os.environ.get("FUZZ_SEED", "0")))

FAMILIES = {"sharded": run_sharded, "symbolic": run_symbolic, "sharded_symbolic": run_sharded_symbolic}

def test_fuzz_multi_long():
  """New cases of every family in turn (FUZZ_FAMILY=sharded|symbolic|sharded_symbolic: one), a few seconds in CI, 600 s
  with FUZZ_LONG=1."""
  fam = os.environ.get("FUZZ_FAMILY", "")
  if fam not in ("", *FAMILIES): raise ValueError(f"FUZZ_FAMILY={fam!r}: {', '.join(FAMILIES)} or unset (all)")
  runs = list(FAMILIES.values())
  run = FAMILIES.get(fam) or (lambda s: runs[s % len(runs)](s))
  fuzz_for_a_while(run, f"{fam or 'sharded, symbolic and sharded_symbolic'} cases", 2)

# ***** failures the fuzzer found, kept as named regression tests *****
D2 = ("CPU:1", "CPU:2")

def _rng(*shape, seed=0) -> np.ndarray: return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def test_found_gradient_through_to():
  """FUZZ_SEED=0..11 (every program with a gather to one device): `to` made a new leaf, so no gradient reached what
  was before it (x.grad stayed None, silently). torch's `.to` is differentiable, so is tinygrad's COPY; now too."""
  n = _rng(3, 4)
  x = Tensor(n, requires_grad=True)
  (x.to("CPU:2") * 3).sum().backward()
  assert x.grad is not None and x.grad.device == "CPU"
  np.testing.assert_array_equal(x.grad.numpy(), np.full((3, 4), 3, np.float32))

def test_gradient_of_a_gradient_through_to():
  """The copy's backward is a copy back, differentiable in turn (create_graph): d/dx of d/dx sum(to(x)^3)."""
  x = Tensor([2.0, 3.0], requires_grad=True)
  y = x.to("CPU:1")
  (dx,) = (y * y * y).sum().gradient(x)
  assert dx.device == "CPU" and dx.tolist() == [12.0, 27.0]
  assert dx.sum().gradient(x)[0].tolist() == [12.0, 18.0]

@pytest.mark.parametrize("axis", [None, 0, 1])
def test_found_gradient_through_a_gather(axis):
  """The gradient of a sharded tensor gathered to one device comes back split as the tensor is, each shard on its
  own device."""
  n, g = _rng(4, 6), _rng(4, 6, seed=1)
  x = Tensor(n).shard(D2, axis)
  x.requires_grad = True
  (x.to("CPU:2") * Tensor(g, device="CPU:2")).sum().backward()
  assert x.grad.device == D2 and x.grad.lazydata.axis == axis
  np.testing.assert_array_equal(x.grad.numpy(), g)

def test_found_gradient_through_a_gather_of_one_shard():
  """After a shrink to one shard only that device holds the value: its gradient goes there, zeros elsewhere."""
  n, g = _rng(8, 2), _rng(4, 2, seed=1)
  x = Tensor(n).shard(D2, 0)
  x.requires_grad = True
  (x.shrink(((4, 8), None)).to("CPU:1") * Tensor(g, device="CPU:1")).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), np.concatenate([np.zeros((4, 2), np.float32), g]))

def test_found_gradient_through_shard():
  """`shard` also made a new leaf: a gradient stopped at it. Now it flows back to the one-device tensor."""
  n = _rng(4, 2)
  for axis in (None, 0):
    x = Tensor(n, requires_grad=True)
    (x.shard(D2, axis) * x.shard(D2, axis)).sum().backward()
    assert x.grad.device == "CPU"
    np.testing.assert_allclose(x.grad.numpy(), 2 * n, rtol=1e-6)

def test_found_gradient_split_on_another_axis():
  """FUZZ_SEED=17 (minimised): x split on axis 1, padded on axis 0, summed over axis 1 (an allreduce), then a matmul
  with an operand split on its K axis: the gradient came back split on axis 0, and the pad's backward (a shrink of axis
  0) was refused ("axis 0 is sharded as ...; it can only be shrunk to one shard") for a program the forward allowed.
  Every gradient is now split as the tensor it belongs to (MultiLazyBuffer.reshard)."""
  a, w = _rng(3, 4), _rng(2, 4, seed=1)
  x = Tensor(a).shard(D2, 1)
  x.requires_grad = True
  (Tensor(w).shard(D2, 1) @ x.pad(((0, 1), (0, 0))).sum(1)).sum().backward()
  assert x.grad.lazydata.axis == 1
  np.testing.assert_allclose(x.grad.numpy(), np.broadcast_to(w.sum(0)[:3, None], (3, 4)), rtol=1e-6)

def test_found_cat_along_the_sharded_axis_names_cat():
  """A cat along the split axis was refused as "pad ((0, 3),) of shape (8,): can't pad the sharded axis 0", an op
  the user never wrote; it names cat now, and a cat of two one-shard pieces (the pad puts each back) still works."""
  n = _rng(8, 2)
  x = Tensor(n).shard(D2, 0)
  with pytest.raises(RuntimeError, match=r"cat: shapes \[\(8, 2\), \(8, 2\)\] along dim 0, which is sharded over \('CPU:1', 'CPU:2'\)"):
    x.cat(x)
  np.testing.assert_array_equal(x.cat(x, dim=1).numpy(), np.concatenate([n, n], 1))
  np.testing.assert_array_equal(x.shrink(((0, 4), None)).cat(x.shrink(((4, 8), None))).numpy(), n)

def test_found_unit_axes_after_a_one_element_shard():
  """FUZZ_SEED=100281: a tensor of 3 split over 3 devices, shrunk to its last shard (one element), then a matmul
  (which reshapes (1,) to (1, 1)): refused as "reshape (1,) -> (1, 1): would move elements between the shards", though
  a unit axis moves nothing. The sharded axis now becomes the last axis with its leading product, not past the end."""
  n, w = _rng(3), _rng(1, 4, seed=1)
  D3 = ("CPU:1", "CPU:2", "CPU:3")
  x = Tensor(n).shard(D3, 0).shrink(((2, 3),))
  assert x.reshape(1, 1).lazydata.axis == 1
  np.testing.assert_allclose((x @ Tensor(w).shard(D3)).numpy(), n[2:] @ w, rtol=1e-6)
  np.testing.assert_array_equal(x.reshape(1, 1, 1).numpy(), n[2:].reshape(1, 1, 1))

@pytest.mark.parametrize("other_axis", [0, 1])
def test_found_one_shard_with_a_split_operand(other_axis):
  """FUZZ_SEED=100835, 101093, 101111, 101186, 101269, 101315 (a shrink to one shard, then an elementwise op, a
  broadcast or a matmul with another sharded tensor): the one device holding the value got the other operand's shard
  of a different shape ("ADD: shapes (4, 2) and (2, 2) differ"), as in tinygrad v0.9. The other operand is now
  gathered whole onto that device."""
  n, m = _rng(8, 2), _rng(4, 2, seed=1)
  p = Tensor(n).shard(D2, 0).shrink(((4, 8), None))
  y = Tensor(m).shard(D2, other_axis)
  got = p + y
  assert got.lazydata.real == [False, True]
  np.testing.assert_allclose(got.numpy(), n[4:] + m, rtol=1e-6)
  np.testing.assert_allclose((p * y).sum(0).numpy(), (n[4:] * m).sum(0), rtol=1e-5)
  np.testing.assert_allclose((p.T @ y).numpy(), n[4:].T @ m, rtol=1e-5, atol=1e-6)

def test_found_cat_of_one_shard_that_doesnt_fit_names_cat():
  """FUZZ_SEED=100876: a piece shrunk to one shard, cat with another along the sharded axis where the pad can't put it
  back around its shard: refused naming cat (was the pad's "can only be padded back to its whole size 8"). Both pieces
  on CPU:4 now make a value on CPU:4 (frontend/multi_cat.py); pieces on two devices out of order are still refused,
  naming the devices."""
  n = _rng(8)
  x = Tensor(n).shard(("CPU:1", "CPU:2", "CPU:3", "CPU:4"), 0)
  y = x.shrink(((6, 8),)).cat(x.shrink(((6, 8),)))
  assert y.lazydata.real == [False, False, False, True]
  np.testing.assert_array_equal(y.numpy(), np.concatenate([n[6:], n[6:]]))
  with pytest.raises(RuntimeError, match=r"cat: shapes \[\(2,\), \(2,\)\] along dim 0, which is sharded .*the pieces are \(2,\) on CPU:4, "
                                         r"\(2,\) on CPU:1"):
    x.shrink(((6, 8),)).cat(x.shrink(((0, 2),)))

def test_found_max_over_a_one_element_shard():
  """FUZZ_SEED=102950 (minimised): a tensor split over 2 devices on axis 0, shrunk to its one-row shard, a max over
  axis 1, gathered (`to`): the gradient came back split like the source, (1,) -> (1, 1) put the sharded label on the
  new unit axis, and the max's backward expand of it was refused ("can't expand the sharded axis 1") though torch
  computes it. Only one device holds a value shrunk to one shard, so its size-1 sharded axis expands there."""
  a = _rng(2, 3)
  x = Tensor(a).shard(D2, 0)
  x.requires_grad = True
  y = x.shrink(((1, 2), None)).max(1).to("CPU:1")
  (y * 3).sum().backward()
  want = np.zeros((2, 3), np.float32)
  want[1, a[1].argmax()] = 3
  np.testing.assert_array_equal(y.numpy(), a[1:].max(1))
  np.testing.assert_array_equal(x.grad.numpy(), want)
  # the same expand in the forward: (1,) -> (1, 1) labels the new unit axis as the sharded one, which then expands
  one = Tensor(a).shard(D2, 0).shrink(((0, 1), None)).sum(1).reshape(1, 1)
  assert one.lazydata.axis == 1 and one.lazydata.real == [True, False]
  np.testing.assert_array_equal(one.expand(1, 3).numpy(), np.full((1, 3), a[0].sum(), np.float32))

def test_found_matmul_of_a_split_batch_with_a_symbolic_length():
  """FUZZ_SEED=2, 3, 4 (sharded_symbolic, the family's first run): a batch split over the devices, a window x[:, :n]
  of a bound Variable n, then a matmul, which reshapes (4, n, 3) -> (4, n, 1, 3): refused, "would move elements between
  the shards of axis 0", because the reshape's check took `6n % 3n`, a UOp, as true. The unchanged tail after the
  sharded axis is now recognised as such; a reshape that would merge the sharded axis with a symbolic one (symbolic
  shard bounds) is refused naming it."""
  a, w = _rng(4, 8, 3), _rng(3, 5, seed=1)
  n = Variable("n", 1, 8).bind(5)
  x = Tensor(a).shard(D2, 0)[:, :n]
  np.testing.assert_allclose((x @ Tensor(w).shard(D2)).numpy(), a[:, :5] @ w, rtol=1e-5, atol=1e-6)
  assert x.reshape(4, n, 1, 3).lazydata.axis == 0
  with pytest.raises(RuntimeError, match=r"reshape \(4, n=5, 3\) -> \(MUL\(n=5, 4\), 3\): the sharded axis 0 would be merged with or "
                                         r"split by a symbolic"):
    x.reshape(n * 4, 3)

def test_a_symbolic_batch_cant_be_split():
  """A variable batch can't be the split axis (the shards' bounds would be symbolic; tinygrad refuses it too): a clear
  error naming shard, the axis and the shape. (A guard of the refusal, no regression: it held before.)"""
  b = Variable("b", 1, 8).bind(4)
  with pytest.raises(ValueError, match=r"shard: axis 0 of shape \(b=4, 3\) is symbolic \(b=4\); it can't be sharded"):
    Tensor(_rng(8, 3)).realize()[:b].shard(D2, 0)
