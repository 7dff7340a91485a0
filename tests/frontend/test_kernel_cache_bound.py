"""The engine's kernel cache is bounded (frontend/engine.py _cache_put, KERNEL_CACHE_MAX): a process meeting ever new
shapes keeps at most that many kernels, an evicted kernel is built again when it comes back, a TinyJit graph keeps the
kernels it holds running after the cache let go of them, and an evicted kernel nothing holds frees its program's
memory (CPU: its mapped image; NV, AMD: its code in GPU memory). On the default device (also MOCKGPU=1 NV=1 / AMD=1)."""
import gc
import numpy as np
import pytest
from frontend import Tensor, TinyJit, Device, engine

pytestmark = pytest.mark.usefixtures("gc_walks_only_this_modules_objects")   # (its tests gc.collect() to run finalizers)

BOUND = 6

@pytest.fixture(autouse=True)
def small_cache(monkeypatch, fresh_schedule_cache):
  monkeypatch.setenv("KERNEL_CACHE_MAX", str(BOUND))
  monkeypatch.setattr(engine, "_kernel_cache", {})
  monkeypatch.setattr(engine, "_loaded", {})

def affine(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """(x * 3 + 1 over n values: the result, what it should be): one new kernel per n."""
  xn = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
  return (Tensor(xn) * 3 + 1).numpy(), xn * 3 + 1

def built_by(fn) -> list:
  """The kernels that entered the cache while fn ran."""
  before = {id(k) for k in engine._kernel_cache.values()}
  fn()
  return [k for k in engine._kernel_cache.values() if id(k) not in before]

def cached(kernels: list) -> list: return [k for k in kernels if any(k is c for c in engine._kernel_cache.values())]

def program_memory(prog) -> object:
  """What tells whether a program's memory is still held, without holding the program: `alive(probe)` reads it."""
  if hasattr(prog, "image") and hasattr(prog.image, "_unmap"): return prog.image._unmap   # CPU: the image's unmap finalizer
  if hasattr(prog, "lib"): return prog.lib        # NV: the code's buffer
  if hasattr(prog, "image"): return prog.image    # AMD: the code's buffer
  pytest.skip(f"{type(prog).__name__} holds no memory of its own (an emulator's program)")

def alive(probe) -> bool: return probe.alive if hasattr(probe, "alive") else not probe.freed

def settle() -> None:
  gc.collect()
  dev = Device[Device.DEFAULT]
  if hasattr(dev, "synchronize"): dev.synchronize()   # (AMD frees a program's code once its timeline is past it)

def test_many_shapes_keep_the_cache_at_its_bound():
  for n in range(3, 3 + 4 * BOUND):
    np.testing.assert_allclose(*affine(n), rtol=1e-6)
    assert len(engine._kernel_cache) <= BOUND

def test_evicted_kernel_is_built_again_and_right():
  first = built_by(lambda: np.testing.assert_allclose(*affine(5), rtol=1e-6))
  np.testing.assert_allclose(*affine(5, seed=1), rtol=1e-6)   # (again: now through the graph's prepared launches)
  assert first and cached(first) == first
  for n in range(40, 40 + 2 * BOUND): affine(n)
  assert not cached(first)   # evicted
  # (the graph's prepared launches still hold the evicted kernel: they must find it gone, not run it blindly)
  again = built_by(lambda: np.testing.assert_allclose(*affine(5, seed=2), rtol=1e-6))
  assert len(again) == len(first) and not any(a is f for a in again for f in first)

def test_recently_used_kernel_stays():
  """LRU, not first-in-first-out: a kernel run at every step (from the second run on through prepared launches, which
  never ask get_kernel) is never evicted, however many new ones come."""
  hot = built_by(lambda: affine(7))
  assert hot
  for i, n in enumerate(range(60, 60 + 3 * BOUND)):
    np.testing.assert_allclose(*affine(7, seed=i), rtol=1e-6)
    affine(n)
    assert len(engine._kernel_cache) <= BOUND and cached(hot) == hot

def test_jit_replays_after_its_kernels_were_evicted():
  f = TinyJit(lambda x: ((x * 2).exp() + x).realize())
  rng = np.random.default_rng(0)
  def step():
    xn = rng.standard_normal(33).astype(np.float32)
    np.testing.assert_allclose(f(Tensor(xn).realize()).numpy(), np.exp(xn * 2) + xn, rtol=1e-5)
  held = built_by(lambda: [step() for _ in range(3)])   # capture, then replays
  assert held
  probes = [program_memory(k.program) for k in held]
  for n in range(80, 80 + 2 * BOUND): affine(n)
  assert not cached(held)   # evicted from the cache ...
  del held
  settle()
  assert all(alive(p) for p in probes)   # ... but the graph holds them: their programs stay loaded
  for _ in range(2): step()

def test_evicted_programs_free_their_memory():
  """Count the programs still holding memory (not RSS): past the bound, only the cached ones."""
  probes = []
  for n in range(100, 100 + 4 * BOUND):
    probes += [program_memory(k.program) for k in built_by(lambda n=n: affine(n))]
  assert len(probes) >= 4 * BOUND
  settle()
  assert sum(alive(p) for p in probes) <= BOUND

def test_packing_plans_keep_to_the_bound(on_cpu, monkeypatch):
  """compiler/pack.py keeps a plan (or its None) per kernel AST it was asked about: bounded like the kernels."""
  from compiler import pack
  monkeypatch.setattr(pack, "_plans", {})
  for n in range(130, 130 + 3 * BOUND):
    a = Tensor(np.ones((n, 3), np.float32)) @ Tensor(np.ones((3, 2), np.float32))   # (asked for a product's plan)
    np.testing.assert_allclose((a + 1).numpy(), np.full((n, 2), 4.0), rtol=1e-6)
    assert len(pack._plans) <= BOUND

def test_loads_on_another_device_go_with_their_kernel():
  """A kernel built for CPU and loaded again on CPU:1 (one target: engine._loaded): evicting the kernel drops that load
  too, and frees its program."""
  probes = []
  for n in range(160, 160 + 4 * BOUND):
    xn = np.arange(n, dtype=np.float32)
    np.testing.assert_allclose((Tensor(xn, device="CPU") * 3 + 1).numpy(), xn * 3 + 1, rtol=1e-6)
    before = {id(k) for k in engine._loaded.values()}
    np.testing.assert_allclose((Tensor(xn, device="CPU:1") * 3 + 1).numpy(), xn * 3 + 1, rtol=1e-6)
    probes += [program_memory(k.program) for k in engine._loaded.values() if id(k) not in before]
    assert len(engine._kernel_cache) <= BOUND and len(engine._loaded) <= BOUND
  assert len(probes) == 4 * BOUND
  gc.collect()
  assert sum(alive(p) for p in probes) <= BOUND
