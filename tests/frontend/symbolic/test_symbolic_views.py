"""Symbolic shapes through views and indexing: slices with bound Variables (`x[:, :v]`, `x[v:v+2]`, `x[v]`),
shrink/pad/cat of symbolic sizes, `Tensor(v.bind(n))`, reductions and matmuls over them, eager and under TinyJit (one
capture for every value), and a GPT-2-style attention step over a KV cache that grows one position per call.
The behaviours of tinygrad's test_symbolic_ops.py / test_symbolic_jit.py, in our own tests, against float64 numpy."""
import numpy as np
import pytest
from frontend import Tensor, TinyJit, Variable, dtypes
from frontend import engine
from frontend.jit import JitError
from compiler.uop import UOp, Ops
from compiler.sint import sval
from tests.frontend.symbolic.test_symbolic import count_compiles

@pytest.fixture
def compiles(monkeypatch):
  """A list that receives the name of every kernel compiled during the test (which starts with no kernel loaded)."""
  monkeypatch.setattr(engine, "_kernel_cache", {})
  return count_compiles(monkeypatch)

def rnd(*shape, seed=0) -> np.ndarray: return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def val(shape) -> tuple[int, ...]:
  """A shape at its bound values."""
  return tuple(sval(d) for d in shape)

def kernels(jf: TinyJit) -> int: return sum(ei.kind == "kernel" for ei in jf.items)

# ***** the ops of tinygrad's symbolic tests: (function, inputs, slicing of the inputs per value, numpy reference) *****
# each case: f(*tensors) -> Tensor, the concrete inputs, how each input is sliced by the bound Variable(s), and the
# float64 reference of the sliced inputs. One Variable "i" in [1, 10] (two: "j" too) bound to several values.

A, B = rnd(3, 10, seed=1), rnd(3, 10, seed=2)
C, W = rnd(10, 3, seed=3), rnd(10, 5, seed=4)
Q, K, V = rnd(2, 1, 4, 8, seed=5), rnd(2, 10, 4, 8, seed=6), rnd(2, 10, 4, 8, seed=7)

def _sdpa_ref(q, k, v):
  q, k, v = (x.astype(np.float64).transpose(0, 2, 1, 3) for x in (q, k, v))
  s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
  e = np.exp(s - s.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True) @ v

ONE_VAR = {   # name: (f, inputs, slicer(inputs, i) -> sliced inputs, reference(sliced numpy inputs))
  "plus1": (lambda a: a + 1, (A,), lambda a, i: (a[:, :i],), lambda a: a + 1),
  "plus1_pad": (lambda a: (a + 1).pad((None, (0, 10 - a.shape[1]))), (A,), lambda a, i: (a[:, :i],),
                lambda a: np.pad(a + 1, ((0, 0), (0, 10 - a.shape[1])))),
  "add": (lambda a, b: a + b, (A, B), lambda a, b, i: (a[:, :i], b[:, :i]), lambda a, b: a + b),
  "matmul_inner": (lambda a, w: a @ w, (A, W), lambda a, w, i: (a[:, :i], w[:i]), lambda a, w: a @ w),
  "matmul_then_plain": (lambda a, w: ((a @ w).realize() * 2), (A, W), lambda a, w, i: (a[:, :i], w[:i]), lambda a, w: (a @ w) * 2),
  "sdpa": (lambda q, k, v: q.transpose(1, 2).scaled_dot_product_attention(k.transpose(1, 2), v.transpose(1, 2)),
           (Q, K, V), lambda q, k, v, i: (q, k[:, :i], v[:, :i]), _sdpa_ref),
  "cat_dim0": (lambda a, b: a.cat(b, dim=0), (C, C[:2] * 3), lambda a, b, i: (a[:i], b), lambda a, b: np.concatenate([a, b])),
  "cat_dim1": (lambda a, b: a.cat(b, dim=1), (A, A[:, :2] * 3), lambda a, b, i: (a[:, :i], b), lambda a, b: np.concatenate([a, b], 1)),
  "sum": (lambda a: a.sum(), (A[0],), lambda a, i: (a[:i],), lambda a: a.sum()),
  "mean": (lambda a: a.mean(), (C,), lambda a, i: (a[:i],), lambda a: a.mean()),
  "mean0": (lambda a: a.mean(0), (C,), lambda a, i: (a[:i],), lambda a: a.mean(0)),
  "mean1": (lambda a: a.mean(1), (C,), lambda a, i: (a[:i],), lambda a: a.mean(1)),
  "var": (lambda a: a.var(), (C,), lambda a, i: (a[:i],), lambda a: a.var(ddof=1)),
  "var0": (lambda a: a.var(0), (C,), lambda a, i: (a[:i],), lambda a: a.var(0, ddof=1)),
  "var1": (lambda a: a.var(1), (C,), lambda a, i: (a[:i],), lambda a: a.var(1, ddof=1)),
  "softmax_sym_axis": (lambda a: a.softmax(-1), (A,), lambda a, i: (a[:, :i],),
                       lambda a: np.exp(a - a.max(-1, keepdims=True)) / np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True)),
  # a window at a symbolic offset (shrink, and the same as a slice)
  "shrink_offset": (lambda a: a + 1, (rnd(7, 11, seed=8),), lambda a, i: (a.shrink(((3, 5), (i, i + 2))) if isinstance(a, Tensor) else a[3:5, i:i + 2],),
                    lambda a: a + 1),
  "slice_offset": (lambda a: a + 1, (rnd(7, 11, seed=8),), lambda a, i: (a[3:5, i:i + 2],), lambda a: a + 1),
  "slice_no_start": (lambda a: a * 2, (rnd(7, 11, seed=8),), lambda a, i: (a[3:5, :i:1],), lambda a: a * 2),
  "index_at_v": (lambda a: a * 2, (C,), lambda a, i: (a[i],), lambda a: a * 2),
}

TWO_VARS = {   # (f, inputs, slicer(inputs, i, j), reference)
  "matmul_outer_ij": (lambda a, b: a @ b + 1, (C, C.T.copy()), lambda a, b, i, j: (a[:i], b[:, :j]), lambda a, b: a @ b + 1),
  "matmul_outer_ji": (lambda a, b: a @ b + 1, (C, C.T.copy()), lambda a, b, i, j: (a[:j], b[:, :i]), lambda a, b: a @ b + 1),
  "cat_dim0": (lambda a, b: a.cat(b, dim=0), (C, C * 2), lambda a, b, i, j: (a[:i], b[:j]), lambda a, b: np.concatenate([a, b])),
  "cat_dim1": (lambda a, b: a.cat(b, dim=1), (A, B), lambda a, b, i, j: (a[:, :i], b[:, :j]), lambda a, b: np.concatenate([a, b], 1)),
  "mean": (lambda a: a.mean(), (rnd(10, 10, seed=9),), lambda a, i, j: (a[:i, :j],), lambda a: a.mean()),
  "mean0": (lambda a: a.mean(0), (rnd(10, 10, seed=9),), lambda a, i, j: (a[:i, :j],), lambda a: a.mean(0)),
  "var1": (lambda a: a.var(1), (rnd(10, 10, seed=9),), lambda a, i, j: (a[:i, :j],), lambda a: a.var(1, ddof=1)),
}

@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # (numpy's var of one sample: nan, as ours)
@pytest.mark.parametrize("mode", ["eager", "jit"])
@pytest.mark.parametrize("name", list(ONE_VAR))
def test_one_variable(name, mode, compiles):
  f, inputs, sl, ref = ONE_VAR[name]
  ts = [Tensor(x).realize() for x in inputs]
  jf = TinyJit(lambda *a: f(*a).realize()) if mode == "jit" else None
  v, counts = Variable("i", 1, 10) if name != "index_at_v" else Variable("i", 0, 9), []
  for i in (1, 4, 2, 9, 3):
    got = (jf or (lambda *a: f(*a).realize()))(*sl(*ts, v.bind(i)))
    want = ref(*[x.astype(np.float64) for x in sl(*inputs, i)])
    assert val(got.shape) == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5, err_msg=f"{name} at i={i}")
    counts.append(len(compiles))
  # one kernel set for every value: nothing compiled after the first value (jit: after the capture)
  assert counts[0] > 0 and counts[-1] == counts[1 if mode == "jit" else 0], counts
  if mode == "jit": assert jf.cnt == 2 and kernels(jf) >= 1

@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("mode", ["eager", "jit"])
@pytest.mark.parametrize("name", list(TWO_VARS))
def test_two_variables(name, mode, compiles):
  f, inputs, sl, ref = TWO_VARS[name]
  ts = [Tensor(x).realize() for x in inputs]
  jf = TinyJit(lambda *a: f(*a).realize()) if mode == "jit" else None
  vi, vj = Variable("i", 1, 10), Variable("j", 1, 10)
  for n, (i, j) in enumerate([(2, 3), (4, 2), (3, 3), (10, 1), (1, 10)]):
    got = (jf or (lambda *a: f(*a).realize()))(*sl(*ts, vi.bind(i), vj.bind(j)))
    want = ref(*[x.astype(np.float64) for x in sl(*inputs, i, j)])
    assert val(got.shape) == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5, err_msg=f"{name} at i={i} j={j}")
    if n == 1: before = len(compiles)
  assert len(compiles) == before   # every later (i, j) reuses the kernels
  if mode == "jit": assert jf.cnt == 2

def test_result_sliced_back_to_concrete():
  """tinygrad's `f(a[:, :vi])[:3, :i]`: a concrete slice of a symbolic result is concrete again (its buffer is
  allocated for the Variable's maximum)."""
  a = Tensor(A).realize()
  for i in (1, 5, 10):
    y = (a[:, :Variable("i", 1, 10).bind(i)] + 1).realize()
    z = y[:3, :i]
    assert z.shape == (3, i) and y.lazydata.base.buffer.nbytes >= 3 * 10 * 4
    np.testing.assert_allclose(z.numpy(), A[:, :i] + 1, rtol=1e-6)
    np.testing.assert_allclose(y[:, -1:].numpy(), A[:, i - 1:i] + 1, rtol=1e-6)   # from the end of a symbolic dim

def test_expand_and_slice_of_symbolic_shapes():
  for i in (1, 3, 10):
    vi = Variable("i", 1, 10).bind(i)
    a = Tensor(1.0).unsqueeze(0).pad((0, 1)).unsqueeze(0)
    np.testing.assert_array_equal(a.expand(vi, 2)[:i, :2].numpy(), np.tile([[1.0, 0.0]], (i, 1)))
    o = Tensor.ones(vi, 11).contiguous()
    assert val(o[:, 1:2].shape) == (i, 1)
    np.testing.assert_array_equal(o[:, 1:2].numpy(), np.ones((i, 1)))
    np.testing.assert_array_equal(Tensor.arange(12).reshape(3, 4)[:, vi - 1 if i <= 4 else 0].numpy(),
                                  np.arange(12).reshape(3, 4)[:, i - 1 if i <= 4 else 0])

def test_reshapes_of_a_symbolic_window():
  """A KV cache's window `cache[:, :sp+1]` reshaped the ways attention does: heads merged or split, through a permute,
  with -1 inferred from the symbolic element count."""
  c = Tensor(np.arange(64 * 16, dtype=np.float32).reshape(1, 64, 2, 8)).realize()
  cn, sp = c.numpy(), Variable("sp", 0, 63)
  for p in (0, 5, 63):
    b, w = sp.bind(p), cn[:, :p + 1]
    x = c[:, :b + 1]
    cases = [(x.reshape(1, b + 1, 16), w.reshape(1, p + 1, 16)),        # (a loop bound sp+1 inside an unoptimized kernel)
             (x.reshape((b + 1) * 2, 8), w.reshape(-1, 8)), (x.reshape(1, b + 1, 2, 2, 4), w.reshape(1, p + 1, 2, 2, 4)),
             (x.permute(0, 2, 1, 3).reshape(2, (b + 1) * 8), w.transpose(0, 2, 1, 3).reshape(2, -1)),
             (x.reshape(1, -1, 16), w.reshape(1, -1, 16)), (x.reshape(-1, 8), w.reshape(-1, 8))]
    for got, want in cases:
      assert val(got.shape) == want.shape
      np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(RuntimeError, match="infer the -1"): x.reshape(-1, 32)   # 16*(sp+1) isn't a multiple of 32 for every sp

def test_tensor_of_a_bound_variable():
  v = Variable("n", 1, 64)
  t = Tensor(v.bind(17))
  assert t.shape == () and t.dtype == dtypes.int32 and t.item() == 17
  assert Tensor(v.bind(5) * 2 + 1, dtype=dtypes.float32).item() == 11.0
  np.testing.assert_array_equal((Tensor([1.0, 2.0]) * Tensor(v.bind(3))).numpy(), [3.0, 6.0])
  with pytest.raises(TypeError, match="bound Variables"): Tensor(v)   # no value to hold
  # under TinyJit: the value is patched into the replay (one capture for all of them)
  w = Tensor([1.0, 2.0]).realize()
  f = TinyJit(lambda x, n: (x * w + Tensor(n)).realize())
  for i in range(1, 9): np.testing.assert_array_equal(f(Tensor([1.0, 1.0]).realize(), v.bind(i)).numpy(), [1.0 + i, 2.0 + i])
  assert f.cnt == 2

@pytest.mark.parametrize("target", ["c", "llvm", "ptx", "amd"])
def test_kernel_of_a_symbolic_slice_takes_the_variable(target):
  """`cache[:start_pos+1]` builds one kernel whose loop bound reads the Variable's argument, on every renderer: C and
  LLVM for the CPU, PTX for NV, LLVM IR for AMD gfx1100 (the code object assembled too)."""
  from compiler.pipeline import compile_kernel
  from compiler.target import Target
  t = {"c": Target("CPU", "c", ncores=1, simd_bytes=32), "llvm": Target("CPU", "llvm", ncores=1, simd_bytes=32),
       "ptx": Target("NV", "ptx", arch="sm_90", gpu=True, warp_size=32), "amd": Target("AMD", "llvm", arch="gfx1100", gpu=True, warp_size=32)}[target]
  v = Variable("start_pos", 0, 63)
  c = Tensor.zeros(64, 8).contiguous().realize()
  (si,) = [s for s in (c[:v.bind(5) + 1] * 2).sum(0).schedule() if s.kind == "kernel"]
  assert si.var_vals == {v: 5}
  ck = compile_kernel(si.ast, t, name=si.name)
  assert ck.vars == (v,) and ck.binary and "var_start_pos" in ck.src and "6" not in si.name   # (no value baked in)

def test_symbolic_slices_refused_clearly():
  a, v = Tensor(A), Variable("i", 1, 10)
  with pytest.raises(IndexError, match="step 1"): a[:, :v.bind(4):2]
  with pytest.raises(IndexError, match="not a range within the size 10"): a[:, v.bind(8):v.bind(8) + 3]
  with pytest.raises(IndexError, match="out of bounds"): a[:, :v.bind(4)][:, 5]
  with pytest.raises(TypeError, match="bound Variables"): a[:, :v]   # an unbound Variable: no value to check
  with pytest.raises(ValueError, match="reshape"): Tensor(rnd(30)).reshape(3, v.bind(4))   # 30 elements aren't 3*i
  with pytest.raises(ValueError, match="symbolic amount"): a[:, :v.bind(3)].pad((None, (0, 5 - a[:, :v.bind(3)].shape[1])))

def test_jit_symbolic_shape_mismatch():
  add = TinyJit(lambda a, b: (a + b).realize())
  a, b = Tensor(A).realize(), Tensor(B).realize()
  for i in range(1, 5): add(a[:, :Variable("i", 1, 10).bind(i)], b[:, :Variable("i", 1, 10).bind(i)])
  vi = Variable("i", 1, 10).bind(7)
  with pytest.raises(JitError, match="shape"): add(Tensor(rnd(3, 7))[:, :vi], Tensor(rnd(4, 7))[:, :vi])

def test_value_outside_the_range_is_refused_before_launch():
  """A value past the Variable's range would make its kernels read and write outside buffers sized for the range:
  refused naming the kernel (eager) or the TinyJit replay, the Variable, its range and the value."""
  v = Variable("n", 1, 8)
  forged = UOp(Ops.BIND, dtypes.int32, (v, UOp.const(dtypes.int32, 12)))   # what .bind refuses to make
  with pytest.raises(ValueError, match=r"Variable 'n': value 12 is outside its range \[1, 8\]"): v.bind(12)
  x = Tensor.ones(16).contiguous().realize()
  with pytest.raises(ValueError, match=r"kernel r_\w*: Variable 'n' = 12 is outside its range \[1, 8\]"): x[:forged].sum().realize()
  out = Tensor.zeros(8).contiguous().realize()
  f = TinyJit(lambda a: out[:a.shape[0]].assign(a * 2).realize())
  for i in (3, 5, 8): f(x[:v.bind(i)])
  with pytest.raises(ValueError, match=r"TinyJit .* replay: Variable 'n' = 12 is outside its range \[1, 8\]"): f(x[:forged])
  np.testing.assert_array_equal(out.numpy(), [2.0] * 8)   # nothing was written

def test_jit_replay_checks_the_captured_windows():
  """A window at a symbolic offset inside the jitted function was checked at the capture's value; a replay whose value
  puts it past the dim (it would read the next row) is refused, naming it, and nothing runs."""
  a = Tensor(rnd(7, 11, seed=8)).realize()
  n = Variable("n", 0, 10)
  f = TinyJit(lambda x, p: (x[3:5, p:p + 2] + 1).realize())
  for i in (0, 4, 9, 2): np.testing.assert_allclose(f(a, n.bind(i)).numpy(), a.numpy()[3:5, i:i + 2] + 1, rtol=1e-6)
  with pytest.raises(ValueError, match=r"replay: the captured shrink .* is out of range at n=10"): f(a, n.bind(10))
  with pytest.raises(IndexError, match="not a range within the size 11"): a[3:5, n.bind(10):n.bind(10) + 2]   # eager: the same

def test_random_over_a_symbolic_shape_is_the_concrete_stream():
  v = Variable("n", 1, 100)
  for n in (7, 100):
    Tensor.manual_seed(5); got = Tensor.rand(v.bind(n), 3).numpy()
    Tensor.manual_seed(5); want = Tensor.rand(n, 3).numpy()
    np.testing.assert_array_equal(got, want)
  Tensor.manual_seed(6)
  with Tensor.train():
    d = Tensor.ones(100, 4).contiguous()[:v.bind(60)].dropout(0.5).numpy()
  assert d.shape == (60, 4) and set(np.unique(d)) == {0.0, 2.0} and 0.35 < (d == 0).mean() < 0.65

# ***** a GPT-2 attention step with a KV cache under TinyJit *****

Bt, D, H, MAXC = 1, 16, 2, 64
HD = D // H

class KVAttention:
  """One GPT-2 attention step (the layout of tinygrad's examples/gpt2.py): the token at `start_pos` (a bound
  Variable) gets its position embedding (`wpe[start_pos]`), its key and value are written into the cache at that
  symbolic offset, and it attends over `cache[:, :, :start_pos+1]`."""
  def __init__(self, w: dict[str, np.ndarray]):
    self.w = {k: Tensor(x).realize() for k, x in w.items()}
    self.cache_kv = Tensor.zeros(2, Bt, MAXC, H, HD).contiguous().realize()
  def __call__(self, x: Tensor, start_pos) -> Tensor:
    x = x + self.w["wpe"][start_pos] + Tensor(start_pos).float() * 0.01
    xqkv = x @ self.w["c_attn"] + self.w["c_attn_b"]                                      # (B, 1, 3D)
    xq, xk, xv = [xqkv[:, :, i * D:(i + 1) * D].reshape(Bt, 1, H, HD) for i in range(3)]
    self.cache_kv[:, :, start_pos:start_pos + 1].assign(Tensor.stack(xk, xv)).realize()
    keys, values = self.cache_kv[0, :, :start_pos + 1], self.cache_kv[1, :, :start_pos + 1]   # (B, T, H, HD)
    att = xq.transpose(1, 2).scaled_dot_product_attention(keys.transpose(1, 2), values.transpose(1, 2))
    return (att.transpose(1, 2).reshape(Bt, 1, D) @ self.w["c_proj"]).realize()

class KVAttentionCat(KVAttention):
  """The same step written as tinygrad's gpt2 writes it: the position embedding read through a symbolic shrink of an
  `arange`, the cached keys/values `cache.shrink((0, start_pos))` concatenated with this token's, and the first
  position (the prompt) run with a plain int outside the jit (`if start_pos > 0` is decided by the Variable's range)."""
  first = 1   # the Variable's minimum: position 0 is the prompt
  def __init__(self, w: dict[str, np.ndarray]):
    super().__init__(w)
    self.allpos = Tensor.arange(MAXC).reshape(1, -1).realize()
  def __call__(self, x: Tensor, start_pos) -> Tensor:
    pos = self.allpos.shrink((None, (start_pos, start_pos + 1)))                            # (1, 1) int positions
    pe = (pos.reshape(1, 1, 1) == Tensor.arange(MAXC).reshape(1, 1, MAXC)).float() @ self.w["wpe"]   # (one-hot @ wpe)
    x = x + pe + Tensor(start_pos).float() * 0.01
    xqkv = x @ self.w["c_attn"] + self.w["c_attn_b"]
    xq, xk, xv = [xqkv.shrink((None, None, (i * D, (i + 1) * D))).reshape(None, None, H, HD) for i in range(3)]
    self.cache_kv.shrink((None, None, (start_pos, start_pos + 1), None, None)).assign(Tensor.stack(xk, xv)).realize()
    if start_pos > 0:
      keys = self.cache_kv[0].shrink((None, (0, start_pos), None, None)).cat(xk, dim=1)
      values = self.cache_kv[1].shrink((None, (0, start_pos), None, None)).cat(xv, dim=1)
    else: keys, values = xk, xv
    att = xq.transpose(1, 2).scaled_dot_product_attention(keys.transpose(1, 2), values.transpose(1, 2))
    return (att.transpose(1, 2).reshape(Bt, 1, D) @ self.w["c_proj"]).realize()

def _weights(seed: int) -> dict[str, np.ndarray]:
  return {"wpe": rnd(MAXC, D, seed=seed) / 4, "c_attn": rnd(D, 3 * D, seed=seed + 1) / 4, "c_attn_b": rnd(3 * D, seed=seed + 2) / 4,
          "c_proj": rnd(D, D, seed=seed + 3) / 4}

def _reference(w: dict, xs: list[np.ndarray]) -> list[np.ndarray]:
  """The same steps in float64 numpy."""
  w = {k: x.astype(np.float64) for k, x in w.items()}
  ks, vs, out = [], [], []
  for p, x in enumerate(xs):
    x = x.astype(np.float64) + w["wpe"][p] + p * 0.01
    qkv = x @ w["c_attn"] + w["c_attn_b"]
    q, k, v = (qkv[:, :, i * D:(i + 1) * D].reshape(Bt, H, HD) for i in range(3))
    ks.append(k); vs.append(v)
    K, V = np.stack(ks, 2), np.stack(vs, 2)                                               # (B, H, T, HD)
    s = np.einsum("bhd,bhtd->bht", q, K) / np.sqrt(HD)
    e = np.exp(s - s.max(-1, keepdims=True))
    att = np.einsum("bht,bhtd->bhd", e / e.sum(-1, keepdims=True), V)
    out.append(att.reshape(Bt, 1, D) @ w["c_proj"])
  return out

def run_kv_attention(steps: int, compiles: list, cls=KVAttention) -> None:
  first = getattr(cls, "first", 0)
  start_pos = Variable("start_pos", first, MAXC - 1)
  w, xs = _weights(20), [rnd(Bt, 1, D, seed=700 + i) for i in range(steps)]
  jit_attn, eager_attn = cls(w), cls(w)
  step = TinyJit(jit_attn.__call__)
  ref = _reference(w, xs)
  per_call = []
  for p, x in enumerate(xs):
    if p < first:   # the prompt: concrete shapes, not jitted
      for m in (jit_attn, eager_attn): np.testing.assert_allclose(m(Tensor(x).realize(), p).numpy(), ref[p], rtol=1e-4, atol=1e-5)
      continue
    before = len(compiles)
    got = step(Tensor(x).realize(), start_pos.bind(p)).numpy()
    per_call.append(len(compiles) - before)
    want = eager_attn(Tensor(x).realize(), start_pos.bind(p)).numpy()
    np.testing.assert_array_equal(got, want, err_msg=f"start_pos={p}")   # jit == eager, bit for bit
    np.testing.assert_allclose(got, ref[p], rtol=1e-4, atol=1e-5, err_msg=f"start_pos={p}")
  assert step.cnt == 2 and per_call[0] > 0 and sum(per_call[1:]) == 0, per_call   # one capture, compiled once
  np.testing.assert_array_equal(jit_attn.cache_kv.numpy(), eager_attn.cache_kv.numpy())
  # past the cache: the bind is refused, and a forged value never reaches the kernels (the cache is unchanged)
  with pytest.raises(ValueError, match="start_pos"): start_pos.bind(MAXC)
  cache = jit_attn.cache_kv.numpy()
  forged = UOp(Ops.BIND, dtypes.int32, (start_pos, UOp.const(dtypes.int32, MAXC)))
  with pytest.raises(ValueError, match=rf"Variable 'start_pos' = {MAXC} is outside its range \[{first}, {MAXC - 1}\]"): step(Tensor(xs[0]).realize(), forged)
  np.testing.assert_array_equal(jit_attn.cache_kv.numpy(), cache)

@pytest.mark.parametrize("cls", [KVAttention, KVAttentionCat])
def test_kv_attention_64_steps(cls, compiles):
  """64 steps on the default device (under `MOCKGPU=1 NV=1` / `MOCKGPU=1 AMD=1`: on the mock GPU)."""
  run_kv_attention(MAXC, compiles, cls)

@pytest.mark.parametrize("dev", ["NV", "AMD", "PTXEMU"])
def test_kv_attention_on_gpu_backends(dev, compiles, monkeypatch):
  """A few steps through the GPU code paths (PTX on the NV mock and the PTX emulator, LLVM IR for gfx1100 on the AMD
  mock): the kernels take start_pos as an argument there too, and the HCQ graph patches it per replay."""
  from frontend import Device
  if dev != "PTXEMU":
    monkeypatch.setenv("MOCKGPU", "1")
    Device[dev]   # opened through the mock driver (a no-op when it is open already)
  monkeypatch.setattr(Device, "DEFAULT", dev)
  run_kv_attention(5, compiles)
  run_kv_attention(4, compiles, KVAttentionCat)

def test_readme_symbolic_example_runs():
  import pathlib, re
  readme = (pathlib.Path(__file__).parents[3] / "README.md").read_text()
  code = re.search(r"## Symbolic shapes.*?```python\n(.*?)```", readme, re.S).group(1)
  env: dict = {}
  exec(code, env)
  assert env["step"].cnt == 2 and len(env["outs"]) == 64 and val(env["outs"][9].shape) == (10, 1)
  np.testing.assert_allclose(env["outs"][9].numpy().sum(), 1.0, rtol=1e-5)
