"""The schedule cache of eager mode (compiler/schedule.py _GraphKey): a graph of a structure scheduled before gets the
same kernels bound to its own buffers. Every part of the key changes the answer when it changes; a cached schedule is
the one scheduling from scratch gives; an eager train step hits from its second step on and runs as many kernels each
step."""
import numpy as np
import pytest
from frontend import Tensor, GlobalCounters, nn, optim
from frontend.nn.state import get_parameters
from compiler import schedule as S
from compiler.dtypes import dtypes
from compiler.lazy import LazyBuffer
from compiler.uop import Variable

pytestmark = pytest.mark.usefixtures("fresh_schedule_cache")

def key_of(*ts: Tensor) -> tuple:
  return S._GraphKey([t.lazydata for t in ts], None).key

def twice(build):
  """build() realized twice (the second from the cache), and the second key."""
  for _ in range(2):
    t = build()
    k = key_of(t)
    out = t.numpy()
  return out, k

A = np.arange(16, dtype=np.float32).reshape(4, 4) - 5
B = np.linspace(-3, 3, 16, dtype=np.float32).reshape(4, 4)

# (what changes, graph 1, graph 2, numpy oracle of graph 2): graph 2 differs from graph 1 in that part of the key only
CASES = [
  ("op", lambda: Tensor(A) + Tensor(B), lambda: Tensor(A) * Tensor(B), A * B),
  ("const value", lambda: Tensor(A) + 1.0, lambda: Tensor(A) + 2.0, A + 2),
  ("dtype", lambda: Tensor(A) + 1.0, lambda: Tensor(A.astype(np.int32)) + 1, A.astype(np.int32) + 1),
  ("shape", lambda: Tensor(A) + 1.0, lambda: Tensor(A[:2]) + 1.0, A[:2] + 1),
  ("view", lambda: Tensor(A).permute(1, 0) + 1.0, lambda: Tensor(A).flip(0) + 1.0, A[::-1] + 1),
  ("reduce axes", lambda: Tensor(A).sum(0), lambda: Tensor(A).sum(1), A.sum(1)),
  ("source order", lambda: (lambda a: a - a.exp())(Tensor(A)), lambda: (lambda a: a.exp() - a)(Tensor(A)), np.exp(A) - A),
  ("sharing", lambda: (lambda a: a * a + 1.0)(Tensor(A) + 1.0), lambda: (Tensor(A) + 1.0) * (Tensor(A) + 1.0) + 1.0, (A + 1) ** 2 + 1),
]

@pytest.mark.parametrize("what,g1,g2,want", CASES, ids=[c[0] for c in CASES])
def test_each_key_part_changes_the_answer(what, g1, g2, want):
  _, k1 = twice(g1)
  got, k2 = twice(g2)
  assert k1 != k2
  np.testing.assert_allclose(got, want, rtol=1e-5)
  assert S.cache_stats["hits"] >= 2   # (each graph's second run came from the cache)

def test_other_buffers_same_structure():
  # the same graph over other buffers: a hit, with this graph's values
  outs = []
  for x in (A, B, A * 3):
    outs.append((Tensor(x) * 2 + Tensor(x).sum(1, keepdim=True)).numpy())
  assert S.cache_stats["hits"] == 2 and S.cache_stats["misses"] == 1
  for x, got in zip((A, B, A * 3), outs): np.testing.assert_allclose(got, x * 2 + x.sum(1, keepdims=True), rtol=1e-6)

def test_negative_zero_constant():
  # -0.0 == 0.0 and they hash alike: the key keeps the sign, as the kernel does
  one = Tensor([1.0]).realize()
  assert not np.signbit((one * 0.0).numpy()[0])
  assert np.signbit((one * -0.0).numpy()[0])
  assert not np.signbit((one * 0.0).numpy()[0])

def test_bound_variable_values():
  # a symbolic shrink: the same structure at another value of the Variable reads another window
  x = Tensor(np.arange(10, dtype=np.float32)).realize()
  for n in (3, 5, 3, 7):
    v = Variable("n", 1, 9).bind(n)
    got = (x.shrink(((0, v),)) + 1).sum().item()
    assert got == sum(range(n)) + n

def test_buffer_aliasing_is_keyed():
  # two lazy bases over one device buffer, or over two: different graphs to the scheduler (an assign's written set)
  a = Tensor(A).realize()
  lb = a.lazydata
  alias = LazyBuffer.from_buffer(lb.buffer, lb.shape, lb.dtype, lb.device)
  other = Tensor(B).realize().lazydata
  k_same = S._GraphKey([lb.alu(S.Ops.ADD, alias)], None).key
  k_other = S._GraphKey([lb.alu(S.Ops.ADD, other)], None).key
  assert k_same != k_other

def test_forced_realize_is_keyed():
  def build(force):
    x = Tensor(A) + 1.0
    if force: x = x.contiguous()   # (a lazy base: contiguous() marks it, the graph's nodes are the same)
    return x.exp() + x
  assert key_of(build(False)) != key_of(build(True))
  for force in (False, True, False, True):
    np.testing.assert_allclose(build(force).numpy(), np.exp(A + 1) + A + 1, rtol=1e-5)

def test_tuning_constants_are_keyed(monkeypatch):
  k1 = key_of(Tensor(A).exp() + 1.0)
  monkeypatch.setattr(S, "COSTLY_OPS", S.COSTLY_OPS + 1)
  assert key_of(Tensor(A).exp() + 1.0) != k1

def test_stale_reader_keeps_old_value_from_cache():
  # a lazy reader of a buffer an assign overwrites is computed before the assign, hit or miss
  for i in range(3):
    a = Tensor(np.full(4, float(i), np.float32)).realize()
    c = a * 2
    a.assign(a + 1).realize()
    assert c.tolist() == [2.0 * i] * 4 and a.tolist() == [i + 1.0] * 4
  assert S.cache_stats["hits"] >= 1

def test_cached_schedule_is_the_fresh_one():
  # the same graph scheduled from scratch and from the cache: the same kernels over the same buffers, in the same order
  def graph():
    x = Tensor(A).realize()
    return ((x @ x.T).relu().sum(1) + x.max(1)).exp()
  graph().schedule()   # (fills the cache)
  t = graph()
  cached = t.schedule()
  assert S.cache_stats["hits"] == 1
  S.SCHEDULE_CACHE = False
  fresh = t.schedule()
  assert [(si.ast, si.name, si.kind) for si in cached] == [(si.ast, si.name, si.kind) for si in fresh]
  assert all(a.outputs == b.outputs and a.inputs == b.inputs for a, b in zip(cached, fresh))

class Net:
  def __init__(self):
    self.c1, self.fc = nn.Conv2d(1, 4, 3, padding=1), nn.Linear(4 * 4 * 4, 10)
  def __call__(self, x): return self.fc(self.c1(x).relu().max_pool2d(2).flatten(1))

def train(steps: int, cache: bool) -> tuple[list, list, list]:
  S.SCHEDULE_CACHE = cache
  Tensor.manual_seed(0)
  model = Net()
  opt = optim.Adam(get_parameters(model), lr=1e-2)
  rng = np.random.default_rng(0)
  losses, kernels = [], []
  for _ in range(steps):
    x, y = Tensor(rng.standard_normal((8, 1, 8, 8)).astype(np.float32)), Tensor(rng.integers(0, 10, 8).astype(np.int32))
    GlobalCounters.reset()
    with Tensor.train():
      opt.zero_grad(); loss = model(x).sparse_categorical_crossentropy(y); loss.backward(); opt.step()
    kernels.append(GlobalCounters.kernel_count)
    losses.append(loss.item())
  return losses, kernels, [p.numpy() for p in get_parameters(model)]

def test_train_step_hits_from_step_two():
  losses, kernels, params = train(5, cache=True)
  hits, misses = S.cache_stats["hits"], S.cache_stats["misses"]
  assert hits >= 4 and kernels[1:] == [kernels[1]] * 4, (S.cache_stats, kernels)
  _, _, _ = train(2, cache=True)
  assert S.cache_stats["misses"] == misses   # (a new model of the same structure: hits only)
  want_losses, want_kernels, want_params = train(5, cache=False)
  assert losses == want_losses and kernels == want_kernels   # the same kernels: bit-identical
  for p, q in zip(params, want_params): np.testing.assert_array_equal(p, q)

def test_cache_is_bounded(monkeypatch):
  monkeypatch.setattr(S, "SCHEDULE_CACHE_MAX", 3)
  for i in range(8): (Tensor(np.zeros(i + 1, np.float32)) + 1).realize()
  assert 1 <= len(S._schedule_cache) <= 3
  # and by the bases its keys hold
  monkeypatch.setattr(S, "SCHEDULE_CACHE_MAX", 100)
  monkeypatch.setattr(S, "SCHEDULE_CACHE_NODES", 40)
  for i in range(8): (Tensor(np.zeros(i + 1, np.float32)).exp() * 2 + 1).realize()
  assert 1 <= len(S._schedule_cache) and sum(len(k[0]) for k in S._schedule_cache) <= 40
  assert np.allclose((Tensor(np.zeros(3, np.float32)).exp() * 2 + 1).numpy(), 3)

def test_lazy_buffer_kinds_in_key():
  # a const of another dtype is a different graph (its value is cast in the kernel)
  k1 = S._GraphKey([LazyBuffer.const(1, dtypes.int32, (4,), "CPU").alu(S.Ops.ADD, LazyBuffer.const(2, dtypes.int32, (4,), "CPU"))], None).key
  k2 = S._GraphKey([LazyBuffer.const(1.0, dtypes.float32, (4,), "CPU").alu(S.Ops.ADD, LazyBuffer.const(2.0, dtypes.float32, (4,), "CPU"))], None).key
  assert k1 != k2

def test_live_tensors_listed_and_swept():
  # the program's tensors, by weak reference in the order made: dead ones leave the list (bounded however many die)
  from frontend import tensor as T
  keep = [Tensor([float(i)]) + 1 for i in range(3)]
  for _ in range(5000): Tensor([1.0]) + 1   # (dead at once)
  assert len(T._live) <= 2 * max(1024, 2 * len(keep) + 64)
  held = T.live_lazydata()
  assert all(any(lb is t.lazydata for lb in held) for t in keep)
  del keep
  import gc; gc.collect()
  assert len(T.live_lazydata()) <= len(held) - 3

MOVES = [("reshape", lambda t: t.reshape(2, 8)), ("expand", lambda t: t.reshape(4, 1, 4).expand(4, 3, 4)), ("permute", lambda t: t.permute(1, 0)),
         ("flip", lambda t: t.flip(0)), ("shrink", lambda t: t.shrink(((1, 3), None))), ("pad", lambda t: t.pad(((1, 0), (0, 2)))),
         ("contiguous", lambda t: t.permute(1, 0).contiguous())]

@pytest.mark.parametrize("name,move", MOVES, ids=[m[0] for m in MOVES])
@pytest.mark.parametrize("rg,no_grad", [(None, False), (False, False), (True, True), (True, False)])
def test_movement_without_autograd_node(name, move, rg, no_grad):
  # a movement op records an autograd node only when a gradient can flow: else the same view, the same requires_grad
  t = Tensor(A, requires_grad=rg)
  prev, Tensor.no_grad = Tensor.no_grad, no_grad
  try: out = move(t)
  finally: Tensor.no_grad = prev
  want = move(Tensor(A))
  assert out.requires_grad == rg and out.shape == want.shape and out.lazydata.st == want.lazydata.st
  assert (out._ctx is not None) == (rg is True and not no_grad)
  np.testing.assert_array_equal(out.numpy(), want.numpy())
  if out._ctx is not None:
    out.sum().backward()
    want_grad = np.full_like(A, 3) if name == "expand" else np.pad(np.ones((2, 4), np.float32), ((1, 1), (0, 0))) if name == "shrink" else np.ones_like(A)
    np.testing.assert_array_equal(t.grad.numpy(), want_grad)

def test_adam_without_weight_decay_keeps_infinite_weight():
  # weight_decay 0 adds nothing (torch): 0 * inf would make the weight NaN
  torch = pytest.importorskip("torch")
  w = Tensor([float("inf"), 1.0], requires_grad=True)
  opt = optim.Adam([w], lr=0.1)
  (w * Tensor([1.0, 2.0])).sum().backward(); opt.step()
  tw = torch.tensor([float("inf"), 1.0], requires_grad=True)
  topt = torch.optim.Adam([tw], lr=0.1)
  (tw * torch.tensor([1.0, 2.0])).sum().backward(); topt.step()
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-6)

def test_detach_shares_the_lazy_buffer():
  t = Tensor(A, requires_grad=True) * 2
  d = t.detach()
  assert d.lazydata is t.lazydata and d.requires_grad is False and d._ctx is None and d.grad is None
