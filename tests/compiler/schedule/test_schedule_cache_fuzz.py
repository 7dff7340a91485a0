"""Differential fuzzing of the schedule cache (compiler/schedule.py _GraphKey): random small programs of
elementwise/reduce/movement/matmul/cat/pad/assign/setitem ops over a few realized inputs, each run several times
with the same structure over other data, other constants and other aliasing of the inputs, checked against numpy and,
bit for bit, against scheduling from scratch (SCHEDULE_CACHE = False). Seeded, so every failure replays."""
import os
import numpy as np
import pytest
from frontend import Tensor
from compiler import schedule as S
from compiler.dtypes import dtypes
from compiler.lazy import LazyBuffer
from compiler.uop import Ops

N = 4   # every value is (N, N) float32: any op can read any value

pytestmark = pytest.mark.usefixtures("fresh_schedule_cache")

BIN = {"add": (lambda a, b: a + b, lambda a, b: a + b), "mul": (lambda a, b: a * b, lambda a, b: a * b),
       "sub": (lambda a, b: a - b, lambda a, b: a - b), "max": (lambda a, b: a.maximum(b), np.maximum),
       "where": (lambda a, b: (a < b).where(a, b * 0.5), lambda a, b: np.where(a < b, a, b * np.float32(0.5)))}
UN = {"relu": (lambda a: a.relu(), lambda a: np.maximum(a, 0)), "neg": (lambda a: -a, lambda a: -a),
      "tanh": (lambda a: a.tanh(), np.tanh),
      "t": (lambda a: a.permute(1, 0), lambda a: a.T), "flip0": (lambda a: a.flip(0), lambda a: a[::-1]),
      "flip1": (lambda a: a.flip(1), lambda a: a[:, ::-1]),
      "rev": (lambda a: a.reshape(N * N).flip(0).reshape(N, N), lambda a: a.reshape(-1)[::-1].reshape(N, N)),
      "shift": (lambda a: a.pad(((1, 0), (0, 0))).shrink(((0, N), None)), lambda a: np.pad(a, ((1, 0), (0, 0)))[:N]),
      "padval": (lambda a: a.shrink(((1, N), None)).pad(((0, 1), (0, 0)), value=2.0), lambda a: np.pad(a[1:], ((0, 1), (0, 0)), constant_values=2)),
      "sum1": (lambda a: a.sum(1, keepdim=True).expand(N, N), lambda a: np.broadcast_to(a.sum(1, keepdims=True), (N, N))),
      "max0": (lambda a: a.max(0, keepdim=True).expand(N, N), lambda a: np.broadcast_to(a.max(0, keepdims=True), (N, N))),
      "mean": (lambda a: a - a.mean(), lambda a: a - a.mean()),
      "cont": (lambda a: a.permute(1, 0).contiguous(), lambda a: a.T.copy()),
      "trunc": (lambda a: (a * 2).cast(dtypes.int32).cast(dtypes.float32), lambda a: (a * 2).astype(np.int32).astype(np.float32)),
      "sign": (lambda a: (a > 0).where(1.0, -1.0), lambda a: np.where(a > 0, 1, -1).astype(np.float32)),
      "isneg": (lambda a: (a < 0).cast(dtypes.float32) * 3, lambda a: (a < 0).astype(np.float32) * 3)}
# (a pure view of an input aliases its buffer, so a later assign shows through it, as in torch: the movements end in an
# elementwise op, making a value of their own, which numpy's copies model)
for _k in ("t", "flip0", "flip1", "rev", "shift", "padval"):
  _f, _g = UN[_k]
  UN[_k] = (lambda a, f=_f: f(a) + 0.5, lambda a, g=_g: g(a) + np.float32(0.5))
MM = (lambda a, b: (a @ b) * 0.25, lambda a, b: (a @ b) * np.float32(0.25))
CAT = (lambda a, b: a[:2].cat(b[2:], dim=0), lambda a, b: np.concatenate([a[:2], b[2:]], 0))

def gen(rng: np.random.Generator, n_in: int) -> list[tuple]:
  """A program: steps over a pool of values (inputs first); ('c', k) steps take constant k of the run."""
  prog, pool, alive = [], n_in, list(range(n_in))
  for _ in range(int(rng.integers(3, 9))):
    kind = rng.choice(["bin", "un", "un", "const", "mm", "cat", "assign", "setitem", "setcol", "realize", "drop", "rand"])
    i, j = int(rng.choice(alive)), int(rng.choice(alive))
    if kind == "drop":
      if i >= n_in: prog.append(("drop", i)); alive.remove(i)
      continue
    if kind == "bin": prog.append(("bin", str(rng.choice(list(BIN))), i, j))
    elif kind == "un": prog.append(("un", str(rng.choice(list(UN))), i))
    elif kind == "const": prog.append(("const", str(rng.choice(["add", "mul"])), i, len(prog)))
    elif kind in ("mm", "cat"): prog.append((kind, i, j))
    elif kind == "rand": prog.append(("rand", i, bool(rng.integers(2))))
    elif kind in ("assign", "setitem", "setcol"): prog.append((kind, int(rng.integers(n_in)), i)); continue
    else: prog.append((kind, i)); continue
    alive.append(pool)
    pool += 1
  return prog

def run(prog: list[tuple], data: list[np.ndarray], slots: list[int], consts: list[float], device: str = "CPU",
        drop: bool = True) -> tuple[list, list]:
  """Run prog on the device and in numpy: input slot s is buffer slots[s] (two slots may share one); drop: let go of the
  values 'drop' steps name (the program holds other tensors: another live set, the same graph)."""
  with np.errstate(all="ignore"): return _run(prog, data, slots, consts, device, drop)

def _run(prog, data, slots, consts, device, drop):
  bufs_t = [Tensor(d, device=device).realize() for d in data]
  bufs_n = [d.copy() for d in data]
  pool: list = [("in", s) for s in range(len(slots))]
  held: list[Tensor] = []
  def get(i):
    p = pool[i]
    return (bufs_t[slots[p[1]]], bufs_n[slots[p[1]]]) if isinstance(p[0], str) else p
  for st in prog:
    if st[0] == "bin": (a, an), (b, bn) = get(st[2]), get(st[3]); f, g = BIN[st[1]]; pool.append((f(a, b), g(an, bn)))
    elif st[0] == "un": a, an = get(st[2]); f, g = UN[st[1]]; pool.append((f(a), g(an)))
    elif st[0] == "const":
      a, an = get(st[2]); c = consts[st[3]]
      pool.append((a + c, an + np.float32(c)) if st[1] == "add" else (a * c, an * np.float32(c)))
    elif st[0] in ("mm", "cat"): (a, an), (b, bn) = get(st[1]), get(st[2]); f, g = MM if st[0] == "mm" else CAT; pool.append((f(a, b), g(an, bn)))
    elif st[0] == "rand":
      # random bits the value doesn't depend on (rand < 1 always), held by the program or not: a lazy generated
      # value the schedule stores once when the program holds it (_Scheduler._held_generated)
      a, an = get(st[1]); r = Tensor.rand(N, N, device=device)
      if st[2]: held.append(r)
      pool.append(((r < 1.0).where(a, a * 0.5), an))
    elif st[0] == "assign":
      v, vn = get(st[2]); k = slots[st[1]]
      bufs_t[k].assign(v); bufs_n[k] = vn.astype(np.float32).copy()
    elif st[0] == "setitem":
      v, vn = get(st[2]); k = slots[st[1]]
      bufs_t[k][1:3] = v[1:3]
      bufs_n[k] = bufs_n[k].copy(); bufs_n[k][1:3] = vn[1:3]
    elif st[0] == "setcol":
      v, vn = get(st[2]); k = slots[st[1]]
      bufs_t[k][:, 1:3] = v[:, 0:2]
      bufs_n[k] = bufs_n[k].copy(); bufs_n[k][:, 1:3] = vn[:, 0:2]
    elif st[0] == "drop":
      if drop and not isinstance(pool[st[1]][0], str): pool[st[1]] = (None, pool[st[1]][1])   # (the numpy value stays: readers use it)
    else: get(st[1])[0].realize()
  outs = [o for i in range(len(pool)) if (o := get(i))[0] is not None]   # (a dropped value is left out) + list(zip(bufs_t, bufs_n))
  return [t.numpy() for t, _ in outs], [np.asarray(n, np.float32) for _, n in outs]

def check(prog, data, slots, consts, ctx, **kw):
  got, want = run(prog, data, slots, consts, **kw)
  for i, (g, w) in enumerate(zip(got, want)): np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"{ctx} value {i}")
  return got

@pytest.mark.parametrize("seed", range(int(os.environ.get("FUZZ_SEEDS", "8"))))   # (more seeds: FUZZ_SEEDS=500)
def test_schedule_cache_fuzz(seed):
  rng = np.random.default_rng(seed)
  for p in range(6):
    n_in = int(rng.integers(2, 4))
    prog = gen(rng, n_in)
    ctx = f"seed {seed} program {p}: {prog}"
    def data(): return [rng.standard_normal((N, N)).astype(np.float32) for _ in range(n_in)]
    consts = [float(rng.integers(-3, 4)) / 2 for _ in prog]
    check(prog, data(), list(range(n_in)), consts, ctx + " run 1")
    d2, slots2 = data(), [int(rng.integers(n_in)) for _ in range(n_in)]   # (other data, maybe aliased inputs)
    for slots in (list(range(n_in)), slots2):
      got = check(prog, d2, slots, consts, f"{ctx} slots {slots}")
      S.SCHEDULE_CACHE = False
      fresh, _ = run(prog, d2, slots, consts)
      S.SCHEDULE_CACHE = True
      for i, (g, f) in enumerate(zip(got, fresh)): np.testing.assert_array_equal(g, f, err_msg=f"{ctx} slots {slots} value {i}: cache vs fresh")
    check(prog, data(), list(range(n_in)), [float(rng.integers(-3, 4)) / 2 for _ in prog], ctx + " other consts")
    check(prog, data(), list(range(n_in)), consts, ctx + " CPU:1", device="CPU:1")
    check(prog, d2, slots2, consts, ctx + " holding every value", drop=False)
    # constants numpy and the device may disagree on (NaN, inf, -0.0, huge): the cache against scheduling from scratch
    odd = [float(rng.choice([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30, 3.0])) for _ in prog]
    for _ in range(2): got, _ = run(prog, d2, slots2, odd)
    S.SCHEDULE_CACHE = False
    fresh, _ = run(prog, d2, slots2, odd)
    S.SCHEDULE_CACHE = True
    for i, (g, f) in enumerate(zip(got, fresh)): np.testing.assert_array_equal(g, f, err_msg=f"{ctx} consts {odd} value {i}: cache vs fresh")
  assert S.cache_stats["hits"] > 0, S.cache_stats

# *** targeted: what the key must tell apart, scheduled from the cache after its look-alike, against from scratch ***
def _bufs(alias: bool) -> tuple[LazyBuffer, LazyBuffer]:
  """Two realized (4, 4) bases: over two device buffers, or both over one."""
  one, two = object(), object()
  return (LazyBuffer.from_buffer(one, (N, N), dtypes.float32, "CPU"),
          LazyBuffer.from_buffer(one if alias else two, (N, N), dtypes.float32, "CPU"))

def _plain(items) -> list:
  return [(si.ast, si.kind, [id(b) for b in si.outputs], [id(b) for b in si.inputs],
           None if si.assign_targets is None else [id(b) for b in si.assign_targets]) for si in items]

def _cached_vs_fresh(make) -> None:
  for alias in (False, True, False):
    S.create_schedule(make(not alias))   # (the look-alike first: the cache holds its schedule)
    outs = make(alias)
    hits = S.cache_stats["hits"]
    cached = S.create_schedule(outs)
    S.SCHEDULE_CACHE = False
    fresh = S.create_schedule(outs)
    S.SCHEDULE_CACHE = True
    assert _plain(cached) == _plain(fresh), f"alias={alias}"
    assert S.cache_stats["hits"] >= hits

def _two_updates(alias: bool) -> list[LazyBuffer]:
  # an optimizer's step: two elementwise updates of one shape fuse into one kernel, unless they write one buffer
  x, y = _bufs(alias)
  two = LazyBuffer.const(2.0, dtypes.float32, (N, N), "CPU")
  return [x.assign(x.alu(Ops.MUL, two)), y.assign(y.alu(Ops.ADD, two))]

def _update_reading_other(alias: bool) -> list[LazyBuffer]:
  # two fused updates, one reading the other's target transposed: fine over two buffers, a race over one
  x, y = _bufs(alias)
  w = LazyBuffer.from_buffer(object(), (N, N), dtypes.float32, "CPU")
  return [x.assign(x.alu(Ops.ADD, y.permute((1, 0)))), w.assign(w.alu(Ops.MUL, w))]

@pytest.mark.parametrize("make", [_two_updates, _update_reading_other], ids=["two_updates", "update_reading_other"])
def test_aliased_buffers_schedule_as_fresh(make):
  _cached_vs_fresh(make)

def test_jit_train_step_with_eager_reader():
  # a TinyJit step (captured from a cached eager schedule) beside an eager lazy reader of a weight it updates: the
  # same numbers with the cache as without, and the reader keeps the weight's value from before the step
  from frontend import TinyJit, nn, optim
  from frontend.nn.state import get_parameters
  def go(cache: bool) -> list:
    S.SCHEDULE_CACHE = cache
    Tensor.manual_seed(1)
    l1, l2 = nn.Linear(4, 8), nn.Linear(8, 3)
    ps = get_parameters([l1, l2])
    opt = optim.SGD(ps, lr=0.1, momentum=0.9)
    @TinyJit
    def step(x, y):
      with Tensor.train():
        opt.zero_grad(); out = l2(l1(x).relu()); loss = ((out - y) ** 2).mean(); loss.backward(); opt.step()
        return loss.realize(), out.realize()
    rng, res = np.random.default_rng(0), []
    for _ in range(5):
      x, y = Tensor(rng.standard_normal((5, 4)).astype(np.float32)), Tensor(rng.standard_normal((5, 3)).astype(np.float32))
      before, w_old = l1.weight.numpy(), l1.weight * 1.0
      loss, out = step(x, y)
      np.testing.assert_array_equal(w_old.numpy(), before)
      res += [loss.numpy(), out.numpy()]
    return res + [p.numpy() for p in ps]
  cached = go(True)
  assert S.cache_stats["hits"] > 0
  for a, b in zip(cached, go(False)): np.testing.assert_array_equal(a, b)
