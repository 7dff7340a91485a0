"""Prepared launches (frontend/engine.py LAUNCH_CACHE): a graph of a structure realized before with plain kernels runs
its kernels again without being scheduled, packed or looked up. Every part of what chose those kernels keys or checks
the plan: a graph that differs in any of them (shape, dtype, view, device, aliasing, settings, target, packing
constants, a kernel cache emptied) gets its own schedule, and every answer equals numpy's."""
import numpy as np
import pytest
from compiler import pack
from compiler import schedule as S
from compiler.dtypes import dtypes
from frontend import Tensor, GlobalCounters, TinyJit, engine, devices

pytestmark = pytest.mark.usefixtures("fresh_schedule_cache", "on_cpu")   # CPU products (packing) also under NV=1

@pytest.fixture(autouse=True)
def counted(monkeypatch):
  monkeypatch.setattr(engine, "LAUNCH_CACHE", True)
  monkeypatch.setattr(engine, "launch_stats", {"hits": 0, "prepared": 0})

def rnd(*shape, seed=0, dtype=np.float32) -> np.ndarray: return np.random.default_rng(seed).standard_normal(shape).astype(dtype)

def mm(an: np.ndarray, bn: np.ndarray, device: str = "CPU", dtype=None) -> np.ndarray:
  return (Tensor(an, device=device, dtype=dtype).realize() @ Tensor(bn, device=device, dtype=dtype).realize()).numpy()

def close(got, want, k): np.testing.assert_allclose(got, want.astype(np.float64) if want.dtype == np.float32 else want, rtol=1e-4, atol=1e-4 * np.sqrt(k))

def test_repeated_product_runs_prepared(monkeypatch):
  """From the second realize of one structure on (the first schedules, then keeps its launches), no create_schedule, no
  pack_matmuls, no get_kernel runs; each realize reads its own inputs."""
  an, bn = rnd(32, 24), rnd(24, 16, seed=1)
  a, b = Tensor(an).realize(), Tensor(bn).realize()
  for _ in range(2): close((a @ b).numpy(), an @ bn, 24)
  calls = []
  def counting(name: str):
    real = getattr(engine, name)
    return lambda *a, **kw: calls.append(name) or real(*a, **kw)
  for name in ("create_schedule", "pack_matmuls", "get_kernel"): monkeypatch.setattr(engine, name, counting(name))
  for seed in range(3):
    xn = rnd(32, 24, seed=seed + 5)
    GlobalCounters.reset()
    close((Tensor(xn).realize() @ b).numpy(), xn @ bn, 24)
    assert GlobalCounters.kernel_count >= 1
  assert engine.launch_stats["hits"] >= 3 and calls == [], calls

def test_packed_product_prepared(monkeypatch):
  """A product whose operands are packed (scratch kernels between launches, not graph nodes) is prepared too and its
  result stays exact; its launches are the same each time."""
  monkeypatch.setattr(pack, "PACK_MIN", 8); monkeypatch.setattr(pack, "B_IN_PLACE", 0); monkeypatch.setattr(pack, "_plans", {})
  if engine.simd_lanes("CPU") < 8: pytest.skip("products are not packed here")
  counts = []
  for seed in range(4):
    an, bn = rnd(48, 40, seed=seed), rnd(40, 64, seed=seed + 9)
    GlobalCounters.reset()
    close(mm(an, bn), an @ bn, 40)
    counts.append(GlobalCounters.kernel_count)
  assert counts[0] >= 2 and len(set(counts)) == 1 and engine.launch_stats["hits"] >= 2, counts

# (what changes, product 1, product 2): product 2 differs in that part only, after product 1 was prepared
A, B = rnd(16, 12), rnd(12, 8, seed=1)
def _ab(**kw):
  def run(an=A, bn=B, device="CPU", dtype=None, tb=False, sh=False):
    a, b = Tensor(an, device=device, dtype=dtype).realize(), Tensor(bn.T.copy() if tb else bn, device=device, dtype=dtype).realize()
    if tb: b = b.T
    if sh: a = a[2:]
    return (a @ b).numpy()
  return lambda: run(**kw)
CASES = [
  ("shape", _ab(), _ab(an=rnd(20, 12)), rnd(20, 12) @ B),
  ("dtype", _ab(), _ab(dtype=dtypes.float64), A.astype(np.float64) @ B.astype(np.float64)),
  ("strides", _ab(), _ab(tb=True), A @ B),
  ("view", _ab(), _ab(sh=True), A[2:] @ B),
  ("device", _ab(), _ab(device="CPU:1"), A @ B),
]

@pytest.mark.parametrize("what,g1,g2,want", CASES, ids=[c[0] for c in CASES])
def test_each_key_part_gets_its_own_schedule(what, g1, g2, want):
  for _ in range(3): close(g1(), A @ B, 12)
  hits = engine.launch_stats["hits"]
  assert hits >= 1
  for _ in range(3): close(g2(), want, 12)

def test_a_at_a_and_output_reused_as_input():
  """a @ a (one buffer read twice: another key than a @ b) after a @ b was prepared, and the other way round; a
  result used as the next product's input (its buffer a graph node like any realized one)."""
  an, bn = rnd(16, 16), rnd(16, 16, seed=1)
  a, b = Tensor(an).realize(), Tensor(bn).realize()
  for _ in range(3): close((a @ b).numpy(), an @ bn, 16)
  for _ in range(3): close((a @ a).numpy(), an @ an, 16)
  for _ in range(2): close((b @ a).numpy(), bn @ an, 16)
  c, want = a, an.astype(np.float64)
  for _ in range(4):
    c = (c @ b).realize() * 0.25
    want = want @ bn * 0.25
  close(c.numpy(), want.astype(np.float32), 16)
  assert engine.launch_stats["hits"] >= 6

def test_assign_into_a_prepared_output_takes_the_schedule():
  """An in-place write of a product into a buffer of the same structure's output: assigns are never prepared."""
  an, bn = rnd(8, 8), rnd(8, 8, seed=1)
  a, b = Tensor(an).realize(), Tensor(bn).realize()
  for _ in range(3): c = (a @ b).realize()
  hits, want = engine.launch_stats["hits"], an.astype(np.float64) @ bn
  for _ in range(3):
    c.assign(c @ b).realize()
    want = want @ bn
    close(c.numpy(), want, 8)
  assert engine.launch_stats["hits"] == hits

def test_freed_inputs_and_no_buffer_kept_alive():
  """The plan holds numbers, not buffers: inputs freed after it was made are freed, and new inputs are read."""
  import gc, weakref
  bn = rnd(16, 16, seed=1)
  b = Tensor(bn).realize()
  refs = []
  for seed in range(4):
    an = rnd(16, 16, seed=seed + 3)
    a = Tensor(an).realize()
    refs.append(weakref.ref(a.lazydata.buffer))
    c = a @ b
    close(c.numpy(), an @ bn, 16)
    del a, c
  gc.collect()
  assert engine.launch_stats["hits"] >= 2 and all(r() is None for r in refs)

def test_settings_in_the_key(monkeypatch):
  """NOOPT (a kernel setting) and BEAM key the plan: a prepared plan of other settings is never run; BEAM's search is
  asked for (here a stand-in returning the default opts)."""
  an, bn = rnd(16, 16), rnd(16, 16, seed=1)
  a, b = Tensor(an).realize(), Tensor(bn).realize()
  for _ in range(3): close((a @ b).numpy(), an @ bn, 16)
  kerns = []
  real = engine.ExecItem.run
  monkeypatch.setattr(engine.ExecItem, "run", lambda self, debug=None: kerns.append(self.kernel) or real(self, debug))
  close((a @ b).numpy(), an @ bn, 16)
  monkeypatch.setenv("NOOPT", "1")
  for _ in range(3): close((a @ b).numpy(), an @ bn, 16)
  assert kerns[0].compiled.applied_opts and not kerns[-1].compiled.applied_opts and engine.launch_stats["hits"] >= 2
  monkeypatch.delenv("NOOPT")
  searched = []
  monkeypatch.setattr(engine, "beam_search_for", lambda si, dev, width: searched.append(width))
  monkeypatch.setenv("BEAM", "2")
  for _ in range(3): close((a @ b).numpy(), an @ bn, 16)
  assert searched == [2]

def test_debug3_explains_every_time(monkeypatch, capfd):
  an, bn = rnd(8, 8), rnd(8, 8, seed=1)
  a, b = Tensor(an).realize(), Tensor(bn).realize()
  for _ in range(3): (a @ b).realize()
  capfd.readouterr()
  monkeypatch.setenv("DEBUG", "3")
  close((a @ b).numpy(), an @ bn, 8)
  assert "r_8_8_8" in capfd.readouterr().err

def test_caches_emptied_or_changed_are_not_bypassed(monkeypatch):
  """The kernel cache emptied (the kernel is built again), the packing constants changed (another schedule: A packed
  or not), the device's Target replaced: the plan made before is not run."""
  if engine.simd_lanes("CPU") < 8: pytest.skip("products are not packed here")
  monkeypatch.setattr(pack, "PACK_MIN", 8); monkeypatch.setattr(pack, "_plans", {})
  an, bn = rnd(48, 40), rnd(40, 64, seed=1)
  a, b = Tensor(an).realize(), Tensor(bn).realize()
  def count() -> int:
    GlobalCounters.reset()
    close((a @ b).numpy(), an @ bn, 40)
    return GlobalCounters.kernel_count
  first = [count() for _ in range(3)]
  monkeypatch.setattr(engine, "_kernel_cache", {})
  assert count() == first[0] and len(engine._kernel_cache) == first[0]
  monkeypatch.setattr(pack, "B_IN_PLACE", 0); monkeypatch.setattr(pack, "A_IN_PLACE", 0)
  assert count() == first[0] + 1 + (first[0] == 1)   # (B packed, and A unless it was already)
  monkeypatch.setattr(pack, "B_IN_PLACE", pack.L2_PANEL); monkeypatch.setattr(pack, "A_IN_PLACE", pack.L2_PANEL)
  t = devices.target_of("CPU")
  monkeypatch.setitem(devices._targets, "CPU", t.replace(simd_bytes=0))   # (no vectors: nothing packed)
  assert count() == 1

def test_jit_capture_and_index_checks_take_the_schedule():
  """A TinyJit capture records its launches (never prepared), and a graph guarded by an index check runs the check
  each time: a bad index raises after the same structure ran prepared-eligible several times."""
  an, bn = rnd(8, 8), rnd(8, 8, seed=1)
  a, b = Tensor(an).realize(), Tensor(bn).realize()
  for _ in range(3): (a @ b).realize()
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x @ b).realize()
  for seed in range(4):
    xn = rnd(8, 8, seed=seed + 2)
    close(f(Tensor(xn).realize()).numpy(), xn @ bn, 8)
  x = Tensor(an).realize()
  for i in (1, 3, 5):
    close((x[Tensor([i, 0])] @ b).numpy(), an[[i, 0]] @ bn, 8)
  with pytest.raises(IndexError): (x[Tensor([9, 0])] @ b).numpy()

def test_off_equals_on(monkeypatch):
  """LAUNCH_CACHE off schedules every time, with the same answers (what bench/realize_host.py --ab compares)."""
  an, bn = rnd(24, 24), rnd(24, 24, seed=1)
  a, b = Tensor(an).realize(), Tensor(bn).realize()
  on = [(a @ b).relu().numpy() for _ in range(3)]
  monkeypatch.setattr(engine, "LAUNCH_CACHE", False)
  hits, sched_hits = engine.launch_stats["hits"], S.cache_stats["hits"]
  off = [(a @ b).relu().numpy() for _ in range(3)]
  assert engine.launch_stats["hits"] == hits and hits >= 2 and S.cache_stats["hits"] == sched_hits + 3
  for x, y in zip(on, off): np.testing.assert_array_equal(x, y)
