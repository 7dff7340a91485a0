"""The host-side shortcuts of eager execution give what the plain computation gives: the memo tables of view ops
(compiler/view.py), the incremental probe rounds and single-walk kernel naming of the scheduler (compiler/schedule.py),
a Python number as a constant at the other operand's shape (Tensor._broadcasted), the memoized broadcast tracker of a
constant, the one-view expand of a no-grad operand, the int fast path of broadcast shapes, the reader index of the
schedule's ordering, and Tensor.assign's read walk with the memo an optimizer step shares."""
import random
import numpy as np
import pytest
from frontend import Tensor
from compiler import view as V, schedule as S
from compiler.view import ShapeTracker, View
from compiler import memo
from compiler.uop import Ops, Variable

def plain_st(views, op, arg):
  """op applied without the memo table (the code path the table is filled from)."""
  st = ShapeTracker(views)
  if op == "reshape": return st._reshape(tuple(arg))
  return st._last(getattr(st.views[-1], op)(tuple(tuple(a) for a in arg) if op in ("shrink", "pad") else tuple(arg)))

MOVES = [("reshape", (6, 4)), ("reshape", (2, 12)), ("reshape", (24,)), ("permute", (1, 0)), ("expand", (4, 6)),
         ("shrink", ((1, 3), (0, 5))), ("pad", ((1, 0), (0, 2))), ("flip", (0,)), ("flip", (1,))]

@pytest.mark.parametrize("seed", range(6))
def test_movement_memo_matches_plain(seed):
  rnd = random.Random(seed)
  st = ShapeTracker.from_shape((4, 6))
  for _ in range(12):
    op, arg = rnd.choice(MOVES)
    if op == "expand": st, arg = st.reshape((4, 1, 6)) if st.size() == 24 else st, None
    if arg is None or (op != "expand" and op in ("reshape",) and np.prod(arg) != st.size()): continue
    if op in ("permute", "shrink", "pad", "flip") and len(st.shape) != 2: continue
    if op == "shrink" and any(hi > s for (_, hi), s in zip(arg, st.shape)): continue
    want = plain_st(st.views, op, arg)
    got = getattr(st, op)(arg)
    assert got == want and got.views == want.views
    assert getattr(st, op)(list(arg)) is got   # the memo answers the second time, for a list too
    st = got if got.size() <= 64 else ShapeTracker.from_shape((4, 6))

def test_memo_keeps_number_types_apart():
  # 1 == True == np.int64(1): a memo keyed on values alone would hand one caller's numbers to the other
  st = ShapeTracker.from_shape((4, 6))
  a, b = st.reshape((24, 1)), st.reshape((24, True))
  assert type(a.shape[1]) is int and type(b.shape[1]) is bool
  c = st.reshape((np.int64(24), 1))
  assert type(c.shape[0]) is np.int64 and type(st.reshape((24, 1)).shape[0]) is int
  assert ShapeTracker.from_shape((np.int64(3),)).shape[0].__class__ is np.int64
  assert ShapeTracker.from_shape((3,)).shape[0].__class__ is int
  for _ in range(2):
    assert type(V.strides_for_shape((2, 3))[0]) is int and type(V.strides_for_shape((np.int64(2), np.int64(3)))[0]) is np.int64
  assert V.strides_for_shape([2, 3]) == (3, 1)

def test_memo_distinguishes_equal_looking_inputs():
  # same shape, different strides/offset/mask: different answers
  base = ShapeTracker.from_shape((4, 6))
  p = base.permute((1, 0)).reshape((24,))           # needs a second view
  s = base.shrink(((0, 4), (1, 6))).pad(((0, 0), (1, 0)))   # masked, same shape as base
  assert s.shape == base.shape and s != base
  assert s.reshape((24,)) != base.reshape((24,))
  assert len(p.views) == 2 and base.reshape((24,)).views == (View.create((24,)),)
  # symbolic dims are UOps compared by identity: two Variables of one name and range are two keys
  n1, n2 = Variable("n", 1, 8).bind(3), Variable("n", 1, 8).bind(5)
  a, b = ShapeTracker.from_shape((n1, 4)), ShapeTracker.from_shape((n2, 4))
  assert a.shape[0] is n1 and b.shape[0] is n2
  assert a.reshape((n1, 2, 2)).shape[0] is n1 and b.reshape((n2, 2, 2)).shape[0] is n2

def test_memo_tables_are_bounded(monkeypatch):
  monkeypatch.setattr(memo, "CACHE_MAX", 8)
  for name in ("_movement_cache", "_from_shape_cache", "_strides_cache"): monkeypatch.setattr(V, name, {})
  st = ShapeTracker.from_shape((64,))
  for i in range(1, 30):
    st.reshape((64 // (1 << (i % 7)), 1 << (i % 7))); ShapeTracker.from_shape((i, 3))
    assert len(V._movement_cache) <= 8 and len(V._from_shape_cache) <= 8 and len(V._strides_cache) <= 8
  assert ShapeTracker.from_shape((29, 3)) is ShapeTracker.from_shape((29, 3))   # (still a cache after clearing)

def test_hash_is_the_field_hash():
  v = View.create((4, 6), (6, 1), 2, ((0, 3), (1, 6)))
  assert hash(v) == hash((v.shape, v.strides, v.offset, v.mask))
  st = ShapeTracker((v,))
  assert hash(st) == hash((v,)) and {st: 1}[ShapeTracker((View.create((4, 6), (6, 1), 2, ((0, 3), (1, 6))),))] == 1

# *** scheduler: the incremental probe rounds mark what probing every root every round marks, in the same order ***

class PlainScheduler(S._Scheduler):
  def _probe_round(self, probed):
    for b in list(self.realize): self._probe(b, b, in_reduce=False, seen=set())

def random_graph(rnd: random.Random, n: int) -> list[Tensor]:
  rng = np.random.default_rng(rnd.randrange(1 << 30))
  pool = [Tensor(rng.standard_normal((4, 6)).astype(np.float32)).realize() for _ in range(3)]
  for _ in range(n):
    x, y = rnd.choice(pool), rnd.choice(pool)
    k = rnd.randrange(11)
    if k == 0: z = x + y
    elif k == 1: z = x * y.exp()
    elif k == 2: z = x - x.mean(1, keepdim=True)
    elif k == 3: z = x.sum(0, keepdim=True).expand(4, 6) * y
    elif k == 4: z = (x @ y.T) @ x
    elif k == 5: z = x.T.reshape(4, 6) + y
    elif k == 6: z = x.pad(((1, 0), (0, 0)))[:4] + x.max(1, keepdim=True)
    elif k == 7: z = x.softmax(1)
    elif k == 8: z = (x - x.max()).relu() / (y.sum() + 1)
    elif k == 9: z = x.contiguous() * 2
    else: z = x.reshape(24).sum().reshape(1, 1).expand(4, 6) + x.sum(1, keepdim=True)
    pool.append(z)
  return pool[3:]

@pytest.mark.parametrize("seed", range(40))
def test_probe_rounds_match_plain(seed):
  rnd = random.Random(seed)
  outs = random_graph(rnd, 10)
  lbs = [t.lazydata for t in rnd.sample(outs, 3)]
  fast, plain = S._Scheduler(lbs), PlainScheduler(lbs)
  assert list(fast.realize) == list(plain.realize)
  check_names(S.create_schedule(lbs))

def plain_name(ast) -> str:
  """kernel_name as it was: the first reduction of the toposort, no tables."""
  reds = [u for u in ast.toposort() if u.op is Ops.REDUCE_AXIS]
  if reds: return "r_" + "_".join(S._dim(s) for s in S.ast_shape(reds[0].src[0]))
  shape = ast.src[0].arg[1].shape
  return "E_" + "_".join(S._dim(s) for s in shape) if shape else "E_1"

def check_names(items):
  """The name and unbinding noted while building each kernel are those of walking its ast."""
  for si in items:
    if si.kind != "kernel": continue
    ast, vv = S.unbind_ast(si.ast)
    assert ast is si.ast and si.name == plain_name(si.ast) == S.kernel_name(si.ast)
    assert (si.var_vals or {}) == (vv or {})

def test_probe_rounds_match_plain_on_a_train_step():
  from frontend import nn, optim
  from frontend.nn.state import get_parameters
  Tensor.manual_seed(3)
  l1, l2 = nn.Conv2d(1, 4, 3, padding=1), nn.Linear(4 * 16, 5)
  opt = optim.Adam(get_parameters([l1, l2]), lr=1e-2)
  x, y = Tensor.randn(8, 1, 4, 4).realize(), Tensor([0, 1, 2, 3, 4, 0, 1, 2]).realize()
  with Tensor.train():
    loss = l2(l1(x).relu().flatten(1)).sparse_categorical_crossentropy(y)
    loss.backward()
    lbs = [t.lazydata for t in opt.schedule_step()]
  fast, plain = S._Scheduler(lbs), PlainScheduler(lbs)
  assert list(fast.realize) == list(plain.realize)
  # the single-walk name and unbinding are those of unbind_ast + kernel_name (fused updates included)
  items = S.create_schedule(lbs)
  assert any(si.assign_targets and len(si.assign_targets) > 1 for si in items)
  check_names(items)

def test_finish_unbinds_symbolic_asts():
  n = Variable("n", 1, 10).bind(4)
  x = Tensor.ones(4, 8).contiguous().realize().reshape(n, 8)
  items = (x * 2 + x.sum(1, keepdim=True)).schedule()
  for si in items:
    if si.kind == "kernel":
      assert si.var_vals and all(u.op is not Ops.BIND for u in si.ast.toposort())
  # the names are those of the unbound ast (a Variable names its dim)
  assert all(si.name == plain_name(si.ast) and "n" in si.name for si in items if si.kind == "kernel")

# *** a Python number as a constant at the tensor's shape ***

@pytest.mark.parametrize("shape", [(), (1,), (3, 1), (2, 3), (0, 3)])
def test_scalar_operand_is_the_same_constant_view(shape):
  x = Tensor.ones(*shape).contiguous().realize()
  a = x * 2.5
  want = Tensor(np.array(2.5, np.float32)).lazydata   # (just for the dtype)
  c = a.lazydata.srcs[1]
  assert c.base.op is Ops.CONST and c.base.arg == 2.5 and c.dtype == want.dtype and c.shape == x.shape
  if shape: assert c.st == ShapeTracker.from_shape(()).reshape((1,) * len(shape)).expand(shape)
  np.testing.assert_array_equal((2.5 - x).numpy(), np.full(shape, 1.5, np.float32))
  # promotion still goes the old way: an int tensor times a float is float
  assert (Tensor.ones(*shape, dtype="int32") * 0.5).dtype.name == "float"

# *** Tensor.assign's read check walks each base once: the same answer as the walk over every node ***

def reads_at_other_position_plain(value, target):
  from frontend.tensor import _pending_assign
  targets, bufs, t = set(), set(), target
  while True:
    targets.add(id(t))
    if t.buffer is not None: bufs.add(id(t.buffer))
    if not _pending_assign(t): break
    t = t.srcs[1].base
  seen, stack = set(), [value]
  while stack:
    lb = stack.pop()
    if id(lb) in seen: continue
    seen.add(id(lb))
    hit = id(lb.base) in targets or (lb.base.buffer is not None and id(lb.base.buffer) in bufs)
    if hit and lb.is_view and lb.st != ShapeTracker.from_shape(lb.base.shape): return True
    if hit: continue
    if lb.base.buffer is None and not _pending_assign(lb.base): stack.extend(lb.base.srcs)
  return False

@pytest.mark.parametrize("seed", range(30))
def test_reads_at_other_position_matches_plain(seed):
  from frontend.tensor import _reads_at_other_position
  rnd = random.Random(seed)
  rng = np.random.default_rng(seed)
  w = Tensor(rng.standard_normal((4, 6)).astype(np.float32)).realize()
  others = [Tensor(rng.standard_normal((4, 6)).astype(np.float32)).realize() for _ in range(2)]
  if rnd.random() < 0.5: w.assign(w * 2)   # a pending write the check follows
  reads = [lambda: w, lambda: w.flip(1), lambda: w.pad(((1, 0), (0, 0)))[:4], lambda: w.T.reshape(4, 6),
           lambda: w.reshape(24).reshape(4, 6), lambda: rnd.choice(others), lambda: w.sum(1, keepdim=True).expand(4, 6)]
  pool = [rnd.choice(reads)() for _ in range(3)]
  for _ in range(6):
    x, y = rnd.choice(pool), rnd.choice(pool + [rnd.choice(reads)()])
    pool.append(rnd.choice([lambda: x + y, lambda: x * y.exp(), lambda: x.relu() - y, lambda: x.flip(0) * y])())
  for v in pool:
    assert _reads_at_other_position(v.lazydata, w.lazydata.base) == reads_at_other_position_plain(v.lazydata, w.lazydata.base)

def test_pickle_drops_cached_values():
  # a symbolic dim is a UOp hashed by identity: a hash cached in this process must not travel to a BEAM worker
  import pickle, copy
  n = Variable("n", 1, 8).bind(3)
  st = ShapeTracker.from_shape((n, 4)).permute((1, 0))
  hash(st), st.sints(), st.reads_nothing, st.views[0].contiguous
  # (shape is views[-1].shape, set again from the views on load: no cached value)
  assert not set(copy.copy(st).__dict__) - {"views", "shape"}
  for x in (pickle.loads(pickle.dumps(st)), copy.deepcopy(st)):
    assert x.shape == x.views[-1].shape == st.shape
    # (the dicts first: comparing caches the hashes, in this process)
    assert not set(x.__dict__) - {"views", "shape"} and all(not set(v.__dict__) - {"shape", "strides", "offset", "mask"} for v in x.views)
    assert x == st
    assert hash(x) == hash(st)   # (in this process the UOps come back as the same interned objects)

@pytest.mark.parametrize("rg", [None, False])
@pytest.mark.parametrize("shapes", [((), (2, 3)), ((3,), (2, 3)), ((1, 3), (4, 3)), ((2, 1), (2, 5)), ((1,), (1, 1))])
def test_expand_without_grad_is_the_same_view(rg, shapes):
  src, dst = shapes
  t = Tensor(np.arange(int(np.prod(src)), dtype=np.float32).reshape(src), requires_grad=rg).realize()
  fast = t._expand_to(dst)
  ones = (1,) * (len(dst) - len(src)) + src
  slow = t.reshape(ones).expand(dst)
  assert fast.requires_grad is slow.requires_grad is rg and fast._ctx is None and fast.grad is None
  assert fast.lazydata.base is slow.lazydata.base and fast.lazydata.st == slow.lazydata.st
  np.testing.assert_array_equal(fast.numpy(), np.broadcast_to(t.numpy().reshape(ones), dst))
  # a tensor that needs a gradient still records the autograd nodes
  g = Tensor(np.ones(src, np.float32), requires_grad=True)
  e = g._expand_to(dst)
  if e is not g: assert e._ctx is not None

def test_expand_without_grad_still_refuses_bad_shapes():
  t = Tensor(np.ones((2, 3), np.float32)).realize()
  with pytest.raises(ValueError, match="expand"): t._expand_to((5, 6))
  with pytest.raises(ValueError, match="expand"): t._expand_to((3,))

# *** Tensor.assign's read walk: the memoized walk (shared by an optimizer step's assigns) answers as the plain walk ***

def plain_reads_at_other_position(value, target) -> bool:
  """The walk as it was: every call walks value's whole graph, no memo."""
  from frontend.tensor import _pending_assign
  targets, bufs, t = set(), set(), target
  while True:
    targets.add(t)
    if t.buffer is not None: bufs.add(id(t.buffer))
    if not _pending_assign(t): break
    t = t.srcs[1].base
  walked, stack = set(), [value]
  while stack:
    lb = stack.pop()
    b = lb._base or lb
    if b in targets or (b.buffer is not None and id(b.buffer) in bufs):
      if lb._base is not None and lb.st != ShapeTracker.from_shape(b.st.shape): return True
      continue
    if b.buffer is None and b.op is not Ops.ASSIGN and b not in walked:
      walked.add(b)
      stack.extend(b.srcs)
  return False

@pytest.mark.parametrize("seed", range(12))
def test_shared_read_walks_match_plain(seed):
  from frontend import tensor as T
  rnd = random.Random(seed)
  rng = np.random.default_rng(seed)
  bufs = [Tensor(rng.standard_normal((4, 4)).astype(np.float32)).realize() for _ in range(3)]
  alias = Tensor(bufs[0].lazydata)   # another tensor over the same lazy buffer
  views = [lambda t: t, lambda t: t.flip(0), lambda t: t.T, lambda t: t.pad(((1, 0), (0, 0)))[:4],
           lambda t: t.reshape(16).reshape(4, 4), lambda t: t.sum(1, keepdim=True).expand(4, 4)]
  with T.shared_read_walks():
    pool = list(bufs) + [alias]
    for step in range(25):
      k = rnd.randrange(4)
      if k == 0:   # a new lazy value over the pool, through some view
        a, b = rnd.choice(pool), rnd.choice(pool)
        pool.append(rnd.choice(views)(a) * 2 + rnd.choice(views)(b))
      elif k == 1:   # a pending assign into one of the buffers (later walks stop at it)
        t = rnd.choice(bufs)
        t.assign(rnd.choice(pool) + 1)
      else:   # ask: the memoized answer (the memo filled by earlier asks) is the plain one
        value, target = rnd.choice(pool).lazydata, rnd.choice(bufs).lazydata.base
        memo = T._read_walk_memo()
        assert T._reads_at_other_position(value, target) == plain_reads_at_other_position(value, target)
        assert memo is T._read_walk_memo()   # (nothing ran: the same memo)
      if step == 12:   # a run in between: the memo is emptied, answers still match
        Tensor.ones(2).contiguous().realize()
        assert T._read_walk_memo() == {}
  assert T._read_walks is None

def test_read_walk_sees_shifted_read_through_memo():
  # the first ask fills the memo for the shared value; a second target that value reads shifted must still say True
  from frontend import tensor as T
  a, b = Tensor.ones(4, 4).contiguous().realize(), Tensor.ones(4, 4).contiguous().realize()
  shared = a.flip(0) * 2 + b
  with T.shared_read_walks():
    assert T._reads_at_other_position((shared + 1).lazydata, b.lazydata.base) is False
    assert T._reads_at_other_position((shared * 3).lazydata, a.lazydata.base) is True
    assert len(T._read_walk_memo()) > 0
    # shared realized: a walk from u now stops at shared's buffer (read in place); the memo of before said True for u
    u = (shared + 1).lazydata
    assert T._reads_at_other_position(u, a.lazydata.base) is True
    shared.realize()
    assert T._reads_at_other_position(u, a.lazydata.base) is plain_reads_at_other_position(u, a.lazydata.base) is False

@pytest.mark.parametrize("seed", range(6))
def test_every_base_has_the_plain_tracker(seed):
  # the kernel builder and LazyBuffer.alu read a base's own tracker as from_shape(its shape): true of every base made
  outs = random_graph(random.Random(seed), 12)
  seen, stack = set(), [t.lazydata for t in outs]
  while stack:
    lb = stack.pop()
    b = lb.base
    if b in seen: continue
    seen.add(b)
    assert b.st == ShapeTracker.from_shape(b.shape) and b.st.contiguous
    stack.extend(b.srcs)
  assert len(seen) > 12

def test_const_broadcast_memo_matches_plain(monkeypatch):
  from compiler import lazy as L
  from compiler.dtypes import dtypes
  n = Variable("n", 1, 8).bind(3)
  for shape in [(4, 6), [4, 6], (1,), (0, 3), (np.int64(2), 3), (True, 3), (n, 4), (Variable("n", 1, 8).bind(5), 4)]:
    for _ in range(2):   # the second time from the table
      lb = L.LazyBuffer.const(1.5, dtypes.float32, shape, "CPU")
      base = L.LazyBuffer(lb.device, ShapeTracker.from_shape(()), dtypes.float32, Ops.CONST, arg=1.5)
      want = base._view(base.st.reshape((1,) * len(shape)).expand(tuple(shape)))
      assert lb.st == want.st and lb.st.views == want.st.views and lb.is_view and lb.base.op is Ops.CONST
      assert [type(s) for s in lb.shape] == [type(s) for s in tuple(shape)] and all(a is b or a == b for a, b in zip(lb.shape, shape))
  assert L.LazyBuffer.const(2, dtypes.int32, (), "CPU").shape == ()
  monkeypatch.setattr(memo, "CACHE_MAX", 4); monkeypatch.setattr(L, "_broadcast_cache", {})
  for i in range(1, 12):
    assert L._broadcast_st((i, 2)).shape == (i, 2) and len(L._broadcast_cache) <= 4

def plain_broadcast_shape(*shapes):
  n = max(len(s) for s in shapes)
  out = []
  for dims in zip(*[(1,) * (n - len(s)) + tuple(s) for s in shapes]):
    big = {d for d in dims if d != 1}
    if len(big) > 1: raise ValueError("can't be broadcast")
    out.append(big.pop() if big else (0 if 0 in dims else 1))
  return tuple(out)

def test_broadcast_shape_fast_path_matches_plain():
  from frontend.tensor import _broadcast_shape
  rnd = random.Random(0)
  for _ in range(2000):
    a = tuple(rnd.choice([0, 1, 1, 2, 3]) for _ in range(rnd.randrange(4)))
    b = tuple(rnd.choice([0, 1, 1, 2, 3]) for _ in range(rnd.randrange(4)))
    try: want = plain_broadcast_shape(a, b)
    except ValueError:
      with pytest.raises(ValueError, match="can't be broadcast"): _broadcast_shape(a, b, op="add")
      continue
    got = _broadcast_shape(a, b)
    assert got == want and all(type(g) is int for g in got)
  assert [type(d) for d in _broadcast_shape((np.int64(2), 1), (1, 3))] == [np.int64, int]   # (not ints: the general way)
  assert _broadcast_shape((True, 3), (1, 3)) == (1, 3)

def test_expand_to_one_view_matches_two_step():
  rng = np.random.default_rng(0)
  a = Tensor(rng.standard_normal((3, 4)).astype(np.float32)).realize()
  cases = [a, a.T, a[1:2], a.sum(0), a.pad(((0, 0), (5, 0)))[:, :2][0:1],   # (the last reads only padding)
           a.reshape(12)[3:7], a[:, 1:2]]
  for t in cases:
    for shape in [(2,) + t.shape, (5,) + tuple(1 if d == 1 else d for d in t.shape)]:
      want_shape = tuple(d if d != 1 else s for d, s in zip((1,) * (len(shape) - t.ndim) + t.shape, shape))
      if want_shape != shape: continue
      got = t.detach()._expand_to(shape).lazydata
      ones = (1,) * (len(shape) - t.ndim) + t.shape
      want = t.lazydata.reshape(ones).expand(shape)
      assert got.st == want.st and got.base.op is want.base.op and (got.base is want.base or got.base.op is Ops.CONST)
      np.testing.assert_array_equal(Tensor(got).numpy(), np.broadcast_to(t.numpy().reshape(ones), shape))

def plain_item_deps(unique, items):
  deps = {id(it): {id(items[i]) for i in it.inputs if i in items} for it in unique}
  for it in unique:
    for tgt in it.assign_targets or ():
      for it2 in unique:
        if it2 is not it and tgt in it2.inputs: deps[id(it)].add(id(it2))
      if tgt in items and items[tgt] is not it: deps[id(it)].add(id(items[tgt]))
  return deps

def test_item_deps_match_plain_scan(monkeypatch):
  # the reader index gives the deps the scan over every item gives, added in the same order (so the same set order,
  # hence the same execution order)
  from frontend import nn, optim
  from frontend.nn.state import get_parameters
  seen = []
  real = S._item_deps
  def both(unique, items):
    got, want = real(unique, items), plain_item_deps(unique, items)
    assert got == want and all(list(got[k]) == list(want[k]) for k in want)
    seen.append(sum(len(it.assign_targets or ()) for it in unique))
    return got
  monkeypatch.setattr(S, "_item_deps", both)
  Tensor.manual_seed(5)
  l1, l2 = nn.Conv2d(1, 4, 3, padding=1), nn.Linear(4 * 16, 5)
  opt = optim.Adam(get_parameters([l1, l2]), lr=1e-2)
  x, y = Tensor.randn(8, 1, 4, 4).realize(), Tensor([0, 1, 2, 3, 4, 0, 1, 2]).realize()
  for _ in range(2):
    with Tensor.train():
      opt.zero_grad(); l2(l1(x).relu().flatten(1)).sparse_categorical_crossentropy(y).backward(); opt.step()
  a = Tensor.ones(4, 4).contiguous().realize()
  r = a.flip(0) + 1   # read before the assign: runs first
  a.assign(a * 2); Tensor.realize(a, r)
  assert max(seen) > 4

def test_memo_tables_share_one_bounded_helper():
  """Every bounded memo table goes through compiler/memo.py memo_put: no hand-written `if len(c) >= N: c.clear()`
  copies (hcqrt/mock's decoder cache is the mock's own)."""
  import pathlib, re
  root = pathlib.Path(__file__).resolve().parents[3]
  bad = [f"{p.relative_to(root)}:{i}: {line.strip()}" for d in ("compiler", "frontend", "hcqrt") for p in sorted((root / d).rglob("*.py"))
         if "mock" not in p.parts and p != root / "compiler" / "memo.py"
         for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"if len\((\w+)\) >=? [\w.]+: \1\.clear\(\)", line)]
  assert not bad, "\n".join(bad)
  # (and memo_put is what bounds the schedule's tables too)
  import inspect
  assert all("memo_put(" in inspect.getsource(f) for f in (S._view_facts, S._kernel_name))

# *** the read walk's pre-check: no view of the target (nor of a lazy buffer over its buffer) ever made, no walk ***

def test_read_check_skips_walk_for_unviewed_target(monkeypatch):
  from frontend import tensor as T
  m = Tensor.zeros(4, 4).contiguous().realize()
  w = Tensor.ones(4, 4).contiguous().realize()
  g = (w.flip(0) * 2).T.relu().sum(0, keepdim=True).expand(4, 4)   # a graph with shifted reads, none of m
  def no_walk(*a): raise AssertionError("walked")
  monkeypatch.setattr(T, "_shifted_reads", no_walk)
  assert T._reads_at_other_position((m * 0.9 + g).lazydata, m.lazydata.base) is False
  monkeypatch.undo()
  assert plain_reads_at_other_position((m * 0.9 + g).lazydata, m.lazydata.base) is False
  m.assign(m * 0.9 + g).realize()
  np.testing.assert_allclose(m.numpy(), np.full((4, 4), 8.0, np.float32))

def test_read_check_sees_view_made_before_realize():
  # c is viewed while lazy; realized, its buffer keeps the mark; an assign makes a second lazy buffer over that buffer
  # (never viewed itself): a value reading the old view shifted still reads the target at another position
  from frontend import tensor as T
  a = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).realize()
  c = a + 1
  cv = c.flip(0)
  c.realize()
  c.assign(c * 2).realize()
  target = c.lazydata.base
  assert not target.viewed and cv.lazydata.base is not target and cv.lazydata.base.buffer is target.buffer
  value = (cv * 3).lazydata
  assert T._reads_at_other_position(value, target) is True and plain_reads_at_other_position(value, target) is True
  before = c.numpy()
  c.assign(cv * 3)
  np.testing.assert_array_equal(c.numpy(), before[::-1] * 3)

def test_read_check_sees_view_through_pending_assign():
  # the target's pending assign chain: a view of the earlier write's result, made while it is pending
  from frontend import tensor as T
  w = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).realize()
  w.assign(w + 1)
  shifted = w.flip(1)
  assert T._reads_at_other_position((shifted * 2).lazydata, w.lazydata.base) is True
  w.assign(shifted * 2)
  np.testing.assert_array_equal(w.numpy(), (np.arange(16, dtype=np.float32).reshape(4, 4) + 1)[:, ::-1] * 2)
