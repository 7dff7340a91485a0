"""The compiler's caches change speed, never results: the interning table, simplify's per-node results, strides kept on
index nodes, the program linearize keeps on a sink (see also bench/render_check.py, which compares whole kernels)."""
import pathlib, subprocess, sys
import numpy as np
from child_env import device_env
from compiler.dtypes import dtypes
from compiler.uop import UOp, Ops, simplify, graph_rewrite, symbolic

i32 = dtypes.int32
ROOT = pathlib.Path(__file__).resolve().parents[2]

def _rng(i: int, n: int) -> UOp: return UOp(Ops.RANGE, i32, (UOp.const(i32, n),), (i, "global"))

_INTERNING_CHECK = """
import compiler.uop as uop
from compiler.dtypes import dtypes
from compiler.uop import UOp
i32 = dtypes.int32
keep = [UOp.const(i32, 7_000_000 + i) for i in range(100)]
for i in range(3 * uop._sweep_at): UOp.const(i32, 9_000_000 + i)   # temporaries, dropped at once
assert len(uop._interned) <= uop._sweep_at, (len(uop._interned), uop._sweep_at)
assert all(UOp.const(i32, 7_000_000 + i) is keep[i] for i in range(100))
print("ok")
"""

def test_interning_table_bounded_and_live_nodes_kept():
  # in a fresh interpreter: a sweep comes after 3x as many temporaries as the nodes alive at the last one, so in a
  # pytest worker holding every kernel its earlier files built (millions of nodes) this took 128 s instead of 1
  out = subprocess.run([sys.executable, "-c", _INTERNING_CHECK], env=device_env(ROOT, "CPU"), capture_output=True, text=True, timeout=120)
  assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
  # the key still tells -0.0 from 0.0
  a, b = UOp.const(dtypes.float32, -0.0), UOp.const(dtypes.float32, 0.0)
  assert a is not b and str(a.arg) == "-0.0"

def test_one_sweep_frees_a_dead_graph_whatever_its_depth():
  # a dead node's key holds its sources: walked oldest first, a chain of 200 nodes lost one node a sweep
  import compiler.uop as uop
  x = UOp(Ops.DEFINE_VAR, i32, (), ("sweep_test_leaf", 0, 9))
  for i in range(200): x = UOp(Ops.ADD, i32, (x, UOp.const(i32, 12_345_000 + i)))
  chain = lambda: [k for k in uop._interned if k[0] is Ops.ADD and k[2] and k[2][1].op is Ops.CONST and 12_345_000 <= k[2][1].arg < 12_345_200]
  assert len(chain()) == 200
  del x
  uop._sweep()
  assert chain() == [] and not [k for k in uop._interned if k[3] == ("sweep_test_leaf", 0, 9)]

def _exprs() -> list[UOp]:
  rng = np.random.default_rng(0)
  rs = [_rng(i, n) for i, n in enumerate((4, 16, 64, 3))]
  out = []
  for _ in range(60):
    e = UOp.const(i32, int(rng.integers(0, 9)))
    for _ in range(int(rng.integers(2, 6))):
      r, k = rs[int(rng.integers(0, 4))], int(rng.integers(1, 9))
      op = [Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD][int(rng.integers(0, 4))]
      # raw nodes (no smart constructors): what simplify gets after a substitution
      e = UOp(op, i32, (e, UOp.const(i32, k))) if op in (Ops.IDIV, Ops.MOD) else UOp(op, i32, (e, UOp(Ops.MUL, i32, (r, UOp.const(i32, k)))))
    out.append(e)
  return out

def test_simplify_cache_matches_uncached_rewrite():
  exprs = _exprs()
  want = [graph_rewrite(e, symbolic) for e in exprs]   # no cache
  assert [simplify(e) for e in exprs] == want           # fills the per-node cache
  assert [simplify(e) for e in reversed(exprs)] == want[::-1]   # served from it, in another order
  assert all(simplify(w) is w for w in want)            # results are fixed points

def test_linearize_cache_gives_a_fresh_copy():
  from compiler.lazy import LazyBuffer
  from compiler.schedule import create_schedule
  from compiler.lower import lower
  from compiler.linearize import linearize, _linearize
  x = LazyBuffer.empty((8, 64), dtypes.float32, "CPU"); x.buffer = object()
  k = lower(create_schedule([x.r(Ops.ADD, (1,))])[0].ast)
  p1 = linearize(k)
  p1.append(None)   # a caller may change its list: the kept program stays as it was
  p2 = linearize(k)
  assert p2 == _linearize(k) and None not in p2
  k.global_ranges = list(reversed(k.global_ranges)) + [_rng(99, 2)]   # other loops: not the kept program
  assert linearize(k) == _linearize(k)

def test_lane_stride_per_width():
  from compiler.vectorize import _Vectorizer
  r = _rng(0, 64)
  for w in (4, 8, 16):
    lane = UOp(Ops.LANE, i32, (), w)
    idx = UOp(Ops.ADD, i32, (UOp(Ops.MUL, i32, (r, UOp.const(i32, 64))), lane))
    sidx = UOp(Ops.ADD, i32, (r, UOp(Ops.MUL, i32, (lane, UOp.const(i32, 3)))))
    v = _Vectorizer(lane)
    assert (v.stride(idx), v.stride(sidx)) == (1, 3)
    assert (v.stride(idx), v.stride(sidx)) == (1, 3)   # from the cache kept on the nodes
    assert _Vectorizer(lane).stride(UOp(Ops.MOD, i32, (idx, UOp.const(i32, 2)))) is None
