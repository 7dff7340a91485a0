"""BEAM search: finds a correct kernel, caches it on disk (the second search builds and times nothing, and the engine
then runs no C compiler), never returns a candidate whose output differs from the heuristic kernel's, keeps the
heuristic for kernels too fast to search, and stays within its bounds (candidates per round, rounds, time budget)."""
import json
import numpy as np
import pytest
from frontend import Tensor
import frontend.engine as engine
from frontend.devices import open_device, target_of
from frontend.beam_runner import beam_runner
from compiler.schedule import create_schedule
from compiler.lower import lower
from compiler import beam
from compiler.beam import beam_search, cache_key, cache_path

DEV = open_device("CPU")
DI = target_of("CPU")

@pytest.fixture(autouse=True)
def on_cpu():
  """These tests time C candidates on the CPU: keep every tensor there, also under MOCKGPU=1 NV=1."""
  from frontend import Device
  old, Device.DEFAULT = Device.DEFAULT, "CPU"
  yield
  Device.DEFAULT = old

@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv("HCQRT_CACHE", str(tmp_path))
  return tmp_path

def mm_kernel(n: int = 32):
  a, b = (Tensor(np.zeros((n, n), np.float32)).realize() for _ in range(2))
  return [si for si in create_schedule([(a @ b).lazydata]) if si.kind == "kernel"][-1]

def test_beam_search_caches_its_winner(cache):
  si = mm_kernel()
  run = beam_runner(si, DEV)
  st: dict = {}
  k = beam_search(lower(si.ast, si.name), DI, run, 2, stats=st, max_depth=2, min_s=0, budget_s=1e9)
  assert not st["cache_hit"] and st["built"] > 4 and st["timed"] > 4
  entry = json.loads(cache_path(cache_key(lower(si.ast, si.name), DI, 2)).read_text())
  assert entry["opts"] == (None if st["best_opts"] is None else [o.to_json() for o in st["best_opts"]])
  def no_run(b): raise AssertionError("the second search must not time anything")
  st2: dict = {}
  k2 = beam_search(lower(si.ast, si.name), DI, no_run, 2, stats=st2)
  assert st2["cache_hit"] and st2["built"] == 0 and st2["best_opts"] == st["best_opts"]
  assert k2 == k

def test_wrong_candidates_are_never_chosen(cache):
  """Every candidate but the heuristic's kernel returns wrong outputs and looks 100x faster: none may win (nor be
  expanded), the heuristic is kept."""
  si = mm_kernel()
  real = beam_runner(si, DEV)
  def run(b):
    t, out = real(b)
    if b.opts is not None: return t / 100, [out[0] + 1.0]
    return t, out
  st: dict = {}
  assert beam_search(lower(si.ast, si.name), DI, run, 2, stats=st, max_depth=2, min_s=0, budget_s=1e9) is None
  assert st["wrong"] > 0 and st["best_opts"] is None and st["rounds"] <= 1

def test_stale_cache_entry_is_searched_again(cache):
  si = mm_kernel(16)
  k = lower(si.ast, si.name)
  p = cache_path(cache_key(k, DI, 1))
  p.parent.mkdir(parents=True)
  p.write_text(json.dumps({"opts": [["UPCAST", 0, 5]]}))   # not legal on a 16x16 kernel
  st: dict = {}
  beam_search(k, DI, beam_runner(si, DEV), 1, stats=st, max_depth=1, min_s=0)
  assert not st["cache_hit"] and st["built"] > 0

def test_cache_key_depends_on_kernel_and_device():
  k1, k2 = lower(mm_kernel(16).ast), lower(mm_kernel(32).ast)
  assert cache_key(k1, DI, 2) == cache_key(lower(mm_kernel(16).ast), DI, 2)
  assert len({cache_key(k1, DI, 2), cache_key(k2, DI, 2), cache_key(k1, DI, 3),
              cache_key(k1, DI.replace(simd_bytes=DI.simd_bytes // 2), 2)}) == 4

def test_engine_beam_second_run_compiles_and_searches_nothing(cache, monkeypatch):
  monkeypatch.setenv("BEAM", "1")
  monkeypatch.setattr(beam, "MAX_DEPTH", 2)
  x = np.random.default_rng(3).standard_normal((24, 40)).astype(np.float32)
  y = np.random.default_rng(4).standard_normal((40, 16)).astype(np.float32)
  engine._kernel_cache.clear()   # a kernel another test built under BEAM=1 would skip this run's search
  np.testing.assert_allclose((Tensor(x) @ Tensor(y)).numpy(), x @ y, rtol=1e-4, atol=1e-4)
  assert list((cache / "beam").glob("*.json"))
  engine._kernel_cache.clear()
  def fail(*a, **kw): raise AssertionError("nothing may be built on the second run")
  monkeypatch.setattr(beam, "build", fail)
  import compiler.assemble.c_compiler as cc
  monkeypatch.setattr(cc.subprocess, "run", fail)   # the objects come from the disk cache
  np.testing.assert_allclose((Tensor(x) @ Tensor(y)).numpy(), x @ y, rtol=1e-4, atol=1e-4)

def test_fast_kernels_keep_the_heuristic_and_cache_that(cache):
  """A kernel the heuristic runs faster than min_s is not searched: one build (the heuristic's), result None (the
  pipeline then applies the default opts), and the cache remembers it: the next search runs nothing."""
  si = mm_kernel(16)
  st: dict = {}
  assert beam_search(lower(si.ast, si.name), DI, beam_runner(si, DEV), 2, stats=st, min_s=10.0) is None
  assert st["skipped"] and st["built"] == 1 and st["best_opts"] is None
  assert json.loads(cache_path(cache_key(lower(si.ast, si.name), DI, 2)).read_text())["opts"] is None
  def no_run(b): raise AssertionError("a cached 'keep the heuristic' must not time anything")
  st2: dict = {}
  assert beam_search(lower(si.ast, si.name), DI, no_run, 2, stats=st2, min_s=10.0) is None
  assert st2["cache_hit"] and st2["built"] == 0

def test_search_is_bounded(cache):
  """At most max_candidates compiled per round, at most max_depth rounds; with no time budget only the baseline and
  the seeds are built and nothing after them is timed."""
  si = mm_kernel(32)
  st: dict = {}
  beam_search(lower(si.ast, si.name), DI, beam_runner(si, DEV), 2, stats=st, max_depth=2, min_s=0, budget_s=1e9, max_candidates=3)
  assert 1 <= st["rounds"] <= 2 and st["built"] <= 1 + 2 + 3 * st["rounds"] and st["timed"] <= st["built"]
  assert st["offered"] > st["built"]   # more candidates than the cap: the cap did bound the compiles
  st2: dict = {}
  beam_search(lower(si.ast, si.name), DI, beam_runner(si, DEV), 2, stats=st2, use_cache=False, min_s=0, budget_s=0.0)
  assert st2["rounds"] == 0 and st2["timed"] == 1 and st2["built"] <= 3   # the baseline timed; the seeds past the budget

def test_interleave_lets_kinds_take_turns():
  from compiler.opt.base import Opt
  seqs = [(0, (Opt("UPCAST", 0, a),)) for a in (2, 4, 8)] + [(0, (Opt("UNROLL", 0, 2),)), (1, (Opt("SWAP", 0, 1),))]
  kinds = [s[-1].kind.value for s in beam.interleave(seqs)]
  assert kinds[:3] == ["UPCAST", "UNROLL", "SWAP"] and kinds[3:] == ["UPCAST", "UPCAST"]
