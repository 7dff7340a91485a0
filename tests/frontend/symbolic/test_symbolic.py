"""Symbolic shapes: a dimension can be a bound Variable (tinygrad's `Variable(name, min, max).bind(value)`). Kernels are
compiled once for the whole range and take the value as an integer argument; TinyJit captures once and replays for
any value in range, patching that argument (CPU: the ExecItems; NV: the prebuilt graph). Checked against numpy/torch,
against eager execution, and by counting compiles."""
import importlib.util, pathlib
import numpy as np
import pytest
import torch
from frontend import Tensor, TinyJit, Variable, nn, optim
from frontend import engine
from frontend.jit import JitError
from frontend.nn.state import get_parameters
from compiler.uop import Ops

@pytest.fixture
def compiles(monkeypatch):
  """A list that receives the name of every kernel compiled during the test."""
  return count_compiles(monkeypatch)

def count_compiles(monkeypatch) -> list[str]:
  """Patch the engine's compile so the returned list receives every compiled kernel's name (for test_symbolic_views too)."""
  seen: list[str] = []
  real = engine.compile_kernel
  def counting(ast, target, opts=None, **kw):
    seen.append(kw.get("name", "kernel"))
    return real(ast, target, opts, **kw)
  monkeypatch.setattr(engine, "compile_kernel", counting)
  return seen

def rnd(*shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

# ***** Variable and bind *****

def test_variable_bind_and_range_errors():
  v = Variable("n", 1, 64)
  b = v.bind(17)
  assert b.unbind() == (v, 17) and v.bind(17) is b and b.expr == "n" and (v.vmin, v.vmax) == (1, 64)
  for bad in (0, 65, -3):
    with pytest.raises(ValueError, match=r"Variable 'n': value .* outside its range \[1, 64\]"): v.bind(bad)
  with pytest.raises(TypeError, match="int"): v.bind(2.0)
  with pytest.raises(ValueError, match="min <= max"): Variable("m", 5, 1)
  with pytest.raises(ValueError, match="identifier"): Variable("not a name", 1, 2)

def test_reshape_checks_the_bound_size():
  v = Variable("n", 1, 64)
  x = Tensor(rnd(17, 8))
  assert x.reshape(v.bind(17), 8).shape == (v.bind(17), 8)
  assert x.reshape(v.bind(17), -1).shape == (v.bind(17), 8)
  with pytest.raises(ValueError, match="reshape"): x.reshape(v.bind(16), 8)
  # a symbolic dim can't be folded into a constant (the value would be baked into the graph)
  with pytest.raises(ValueError, match="drops a symbolic dim"): x.reshape(v.bind(17), 8).reshape(17, 8)

# ***** eager ops over a symbolic dim: one kernel per op for every value *****

def _ops(x: Tensor, w: Tensor):
  return {"elementwise": (x * 2 + 1).exp2(), "sum_other": x.sum(1), "sum_sym": x.sum(0), "mean": x.mean(),
          "max_sym": x.max(0), "matmul": x @ w, "matmul_t": x.T @ x, "softmax_sym": x.T.softmax(-1)}

def _ref(a: np.ndarray, w: np.ndarray):
  t = torch.tensor(a)
  return {"elementwise": torch.exp2(t * 2 + 1), "sum_other": t.sum(1), "sum_sym": t.sum(0), "mean": t.mean(), "max_sym": t.max(0).values,
          "matmul": t @ torch.tensor(w), "matmul_t": t.T @ t, "softmax_sym": t.T.softmax(-1)}

def test_eager_ops_compile_once(compiles):
  v, w = Variable("n", 1, 64), rnd(8, 3, seed=1)
  wt = Tensor(w).realize()
  counts = []
  for n in (17, 64, 1, 5):
    a = rnd(n, 8, seed=n)
    x = Tensor(a).reshape(v.bind(n), 8).realize()
    got, ref = _ops(x, wt), _ref(a, w)
    for k in got:
      assert tuple(d if isinstance(d, int) else d.unbind()[1] for d in got[k].shape) == tuple(ref[k].shape), k
      np.testing.assert_allclose(got[k].numpy(), ref[k].numpy(), rtol=1e-5, atol=1e-5, err_msg=f"{k} at n={n}")
    counts.append(len(compiles))
  assert counts[0] > 0 and counts == [counts[0]] * 4   # nothing recompiled for another value

def test_kernel_takes_the_variable_as_an_argument():
  v = Variable("n", 1, 64)
  x = Tensor(rnd(5, 8)).reshape(v.bind(5), 8)
  (si,) = [s for s in (x * 2).sum(0).schedule() if s.kind == "kernel"]
  assert si.var_vals == {v: 5} and not any(u.op is Ops.BIND for u in si.ast.toposort())
  from compiler.pipeline import compile_kernel
  from compiler.target import Target
  for target in (Target("CPU", "c", ncores=1, simd_bytes=32), Target("CPU", "llvm", ncores=1, simd_bytes=32),
                 Target("PTXEMU", "ptx", arch="sm_90", gpu=True)):
    ck = compile_kernel(si.ast, target, name=si.name)
    assert ck.vars == (v,) and ck.binary, target
    assert "var_n" in ck.src, target   # the loop bound is the argument, not the bound value

# ***** TinyJit: capture once, replay for any value *****

class MLP:
  def __init__(self):
    self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 4)
  def __call__(self, x: Tensor) -> Tensor: return self.l2(self.l1(x).relu())

# the main job's step (examples/train_digits.py make_train_step): forward, loss, backward, update, the realized loss
_spec = importlib.util.spec_from_file_location("train_digits", pathlib.Path(__file__).parents[3] / "examples/train_digits.py")
_td = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(_td)
_train_step = _td.make_train_step

def _model(seed: int):
  Tensor.manual_seed(seed)
  m = MLP()
  return m, _train_step(m, optim.Adam(get_parameters(m), lr=1e-2))

def _batches(sizes, var):
  out = []
  for i, n in enumerate(sizes):
    x, y = rnd(n, 8, seed=100 + i), np.random.default_rng(200 + i).integers(0, 4, n).astype(np.int32)
    out.append((x, y, Tensor(x).reshape(var.bind(n), 8).realize(), Tensor(y).reshape(var.bind(n)).realize()))
  return out

def test_jit_train_step_batch_64_then_17():
  B = Variable("batch", 1, 64)
  sizes = [64, 64, 64, 17, 64, 17, 5, 33]
  m_jit, s_jit = _model(3)
  m_eager, s_eager = _model(3)
  m_plain, s_plain = _model(3)   # concrete shapes: a different set of kernels, the same math
  jit = TinyJit(s_jit)
  for i, (x, y, xb, yb) in enumerate(_batches(sizes, B)):
    lj = jit(xb, yb).item()
    le = s_eager(Tensor(x).reshape(B.bind(len(x)), 8).realize(), Tensor(y).reshape(B.bind(len(y))).realize()).item()
    lp = s_plain(Tensor(x).realize(), Tensor(y).realize()).item()
    assert lj == le, (i, len(x))                                   # the same kernels as eager: bit for bit
    np.testing.assert_allclose(lj, lp, rtol=1e-4, atol=1e-5)      # and the same as the concrete-shape step
  assert jit.cnt == 2
  for pj, pe, pp in zip(get_parameters(m_jit), get_parameters(m_eager), get_parameters(m_plain)):
    np.testing.assert_array_equal(pj.numpy(), pe.numpy())
    np.testing.assert_allclose(pj.numpy(), pp.numpy(), rtol=1e-4, atol=1e-5)

def test_jit_replays_compile_nothing(compiles):
  B = Variable("batch", 1, 64)
  _m, step = _model(4)
  jit = TinyJit(step)
  batches = _batches([64, 64, 17, 3, 64, 40], B)
  for _x, _y, xb, yb in batches[:2]: jit(xb, yb)   # eager run, capture
  before = len(compiles)
  assert before > 0
  for _x, _y, xb, yb in batches[2:]: jit(xb, yb).item()
  assert len(compiles) == before   # replays for 17, 3, 64, 40: no compile at all

def test_jit_rejects_a_non_symbolic_shape_change():
  B = Variable("batch", 1, 64)
  w = Tensor(rnd(8, 3)).realize()
  f = TinyJit(lambda x: (x @ w).realize())
  for n in (5, 6, 7): f(Tensor(rnd(n, 8)).reshape(B.bind(n), 8).realize())
  with pytest.raises(JitError, match="shape"): f(Tensor(rnd(4, 9)).reshape(B.bind(4), 9).realize())
  with pytest.raises(JitError, match="shape"): f(Tensor(rnd(4, 8)).realize())   # concrete where the capture had a Variable
  g = TinyJit(lambda x: (x @ w).realize())
  for _ in range(3): g(Tensor(rnd(4, 8)).realize())
  with pytest.raises(JitError, match="shape"): g(Tensor(rnd(5, 8)).realize())   # concrete capture: still an error

# ***** attention over a KV cache that grows 1..MAX *****

DIM, HEADS, MAX = 16, 2, 64
HD = DIM // HEADS

class Attention:
  """One attention block with a KV cache of MAX positions: each call appends one token's key/value at position T-1
  and attends over the first T (a bound Variable)."""
  def __init__(self, seed: int = 0):
    self.w = {k: Tensor(rnd(DIM, DIM, seed=seed + i) / 4).realize() for i, k in enumerate("qkvo")}
    self.cache_k = Tensor.zeros(MAX, DIM).contiguous().realize()
    self.cache_v = Tensor.zeros(MAX, DIM).contiguous().realize()
  def __call__(self, x: Tensor, T) -> Tensor:
    q, k, v = (x @ self.w[c] for c in "qkv")                              # (1, DIM)
    at = (Tensor.arange(MAX) == (T - 1)).reshape(MAX, 1)                   # the new token's row
    self.cache_k.assign(at.where(k, self.cache_k))
    self.cache_v.assign(at.where(v, self.cache_v))
    keys = self.cache_k.shrink(((0, T), None)).reshape(T, HEADS, HD).permute(1, 2, 0)     # (H, HD, T)
    vals = self.cache_v.shrink(((0, T), None)).reshape(T, HEADS, HD).permute(1, 0, 2)     # (H, T, HD)
    att = (q.reshape(HEADS, 1, HD) @ keys / HD ** 0.5).softmax(-1)                        # (H, 1, T): softmax over T
    return ((att @ vals).reshape(1, DIM) @ self.w["o"]).realize()

class AttentionShrinkAssign(Attention):
  """The same block with tinygrad's cache update: the new key/value written into `cache.shrink(((T-1, T), ...))`, a
  view at a symbolic offset (one kernel for every position)."""
  def __call__(self, x: Tensor, T) -> Tensor:
    q, k, v = (x @ self.w[c] for c in "qkv")
    self.cache_k.shrink(((T - 1, T), None)).assign(k)
    self.cache_v.shrink(((T - 1, T), None)).assign(v)
    keys = self.cache_k.shrink(((0, T), None)).reshape(T, HEADS, HD).permute(1, 2, 0)
    vals = self.cache_v.shrink(((0, T), None)).reshape(T, HEADS, HD).permute(1, 0, 2)
    att = (q.reshape(HEADS, 1, HD) @ keys / HD ** 0.5).softmax(-1)
    return ((att @ vals).reshape(1, DIM) @ self.w["o"]).realize()

def _attention_ref(xs: list[np.ndarray], w: dict) -> list[np.ndarray]:
  ks, vs, out = [], [], []
  W = {c: torch.tensor(x.numpy()) for c, x in w.items()}
  for x in xs:
    t = torch.tensor(x)
    q, k, v = t @ W["q"], t @ W["k"], t @ W["v"]
    ks.append(k); vs.append(v)
    K, V = torch.cat(ks).reshape(-1, HEADS, HD).permute(1, 2, 0), torch.cat(vs).reshape(-1, HEADS, HD).permute(1, 0, 2)
    att = (q.reshape(HEADS, 1, HD) @ K / HD ** 0.5).softmax(-1)
    out.append(((att @ V).reshape(1, DIM) @ W["o"]).numpy())
  return out

def _run_attention(steps: int, compiles: list, cls=Attention) -> None:
  T = Variable("T", 1, MAX)
  xs = [rnd(1, DIM, seed=500 + i) for i in range(steps)]
  jit_attn, eager_attn = cls(), cls()
  step = TinyJit(jit_attn.__call__)
  ref = _attention_ref(xs, jit_attn.w)
  per_call = []
  for i, x in enumerate(xs):
    before = len(compiles)
    got = step(Tensor(x).realize(), T.bind(i + 1)).numpy()
    per_call.append(len(compiles) - before)
    want = eager_attn(Tensor(x).realize(), T.bind(i + 1)).numpy()
    np.testing.assert_array_equal(got, want, err_msg=f"T={i + 1}")   # jit == eager, bit for bit
    np.testing.assert_allclose(got, ref[i], rtol=1e-4, atol=1e-5, err_msg=f"T={i + 1}")
  assert step.cnt == 2
  assert per_call[0] > 0 and sum(per_call[1:]) == 0, per_call   # every kernel compiled once, by the first call
  np.testing.assert_array_equal(jit_attn.cache_k.numpy(), eager_attn.cache_k.numpy())

def test_attention_kv_cache_grows_1_to_64(compiles):
  _run_attention(MAX, compiles)

def test_attention_kv_cache_shrink_assign_1_to_64(compiles):
  _run_attention(MAX, compiles, AttentionShrinkAssign)

def test_assign_through_a_view_writes_the_base():
  c = Tensor.zeros(6, 2).contiguous().realize()
  c.shrink(((1, 3), None)).assign(Tensor([[1.0, 2.0], [3.0, 4.0]]))
  c.T.shrink((None, (4, 5))).assign(Tensor([[9.0], [8.0]]))
  want = np.zeros((6, 2), np.float32); want[1:3] = [[1, 2], [3, 4]]; want[4] = [9, 8]
  np.testing.assert_array_equal(c.numpy(), want)
  d = Tensor.zeros(4).contiguous().realize()
  d.assign(Tensor.ones(4))                      # pending write into the whole buffer: runs first
  d.shrink(((1, 2),)).assign(Tensor([5.0]))
  np.testing.assert_array_equal(d.numpy(), [1, 5, 1, 1])
  t = torch.zeros(6, 2); t[1:3] = torch.tensor([[1.0, 2.0], [3.0, 4.0]]); t.T[:, 4:5] = torch.tensor([[9.0], [8.0]])
  np.testing.assert_array_equal(c.numpy(), t.numpy())

def test_attention_kv_cache_ptxemu(compiles, monkeypatch):
  from frontend import Device
  monkeypatch.setattr(Device, "DEFAULT", "PTXEMU")
  _run_attention(6, compiles)
  _run_attention(4, compiles, AttentionShrinkAssign)

@pytest.mark.parametrize("dev", ["NV", "AMD"])
def test_jit_graph_replay_on_hcq_mock(dev, compiles, monkeypatch):
  """The HCQ graph (NV: PTX, AMD: LLVM IR for gfx1100, both on their mock drivers): one GraphReplay captured at one
  value, its Variable arguments patched in place for the others."""
  from frontend import Device
  from hcqrt.hcq import GraphReplay
  monkeypatch.setenv("MOCKGPU", "1")
  Device[dev]   # opened through the mock driver (a no-op when it is open already)
  monkeypatch.setattr(Device, "DEFAULT", dev)
  B = Variable("batch", 1, 64)
  w = Tensor(rnd(8, 3, seed=9)).realize()
  f = TinyJit(lambda x: ((x @ w).relu().softmax(0) * 2 + x.mean()).realize())
  for i, n in enumerate((64, 17, 64, 3, 17, 40)):
    a = rnd(n, 8, seed=n)
    got = f(Tensor(a).reshape(B.bind(n), 8).realize()).numpy()
    h = np.maximum(a @ w.numpy(), 0)
    e = np.exp(h - h.max(0))
    np.testing.assert_allclose(got, e / e.sum(0) * 2 + a.mean(), rtol=1e-5, atol=1e-5)
    if i == 1: n_compiled = len(compiles)
  assert isinstance(f.graph, GraphReplay) and len(compiles) == n_compiled

def test_export_refuses_symbolic_kernels():
  from frontend.export import export_c, ExportError
  v = Variable("n", 1, 8)
  with pytest.raises(ExportError, match="symbolic sizes"):
    export_c(lambda x: (x.reshape(v.bind(4), 2) * 2).sum(0), np.zeros(8, np.float32))

def test_more_ops_over_a_symbolic_axis():
  v = Variable("n", 1, 16)
  for n in (1, 3, 16):
    a = rnd(n, 4, seed=n)
    x, t = Tensor(a).reshape(v.bind(n), 4), torch.tensor(a)
    b = v.bind(n)
    np.testing.assert_allclose(Tensor.arange(b).numpy(), np.arange(n))
    np.testing.assert_array_equal(x.argmax(0).numpy(), t.argmax(0).numpy())
    if n > 1: np.testing.assert_allclose(x.var(0).numpy(), t.var(0).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.log_softmax(0).numpy(), t.log_softmax(0).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.flip(0).numpy(), t.flip(0).numpy())
    np.testing.assert_allclose(x.pad(((1, 0), (0, 1))).numpy(), np.pad(a, ((1, 0), (0, 1))))
    np.testing.assert_allclose((Tensor.ones(b, 4) + x).numpy(), a + 1)
    np.testing.assert_allclose(x.flatten().numpy(), a.reshape(-1))
    # a window at a symbolic offset (a view whose offset is an expression of the Variable)
    big = np.arange(40, dtype=np.float32).reshape(20, 2)
    np.testing.assert_allclose(Tensor(big).shrink(((b, b + 2), None)).numpy(), big[n:n + 2])
    np.testing.assert_allclose(x.cat(x, dim=0).numpy(), np.concatenate([a, a]))
  # a pad whose sign depends on the Variable's value (a pad for some, a crop for others): refused clearly, never guessed
  with pytest.raises(ValueError, match=r"pad: .* symbolic amount must be >= 0"): x.pad(((0, 8 - b), None))
