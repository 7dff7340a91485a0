"""Independent kernels of one schedule are built together (compiler/pipeline.py compile_kernels, frontend/engine.py
prebuild): their C compiler processes run side by side, and what comes out is byte for byte the one-by-one build."""
import dataclasses, threading
import numpy as np
import pytest
from compiler.dtypes import dtypes
from compiler.lazy import LazyBuffer
from compiler.schedule import create_schedule
from compiler.target import Target
from compiler.uop import Ops
from compiler.pipeline import BACKENDS, compile_kernel, compile_kernels

T = Target("CPU", "c", ncores=2, simd_bytes=32, cc_flags=("-march=x86-64-v3",))

def _asts(c: float) -> list:
  x = LazyBuffer.empty((16, 64), dtypes.float32, "CPU"); x.buffer = object()
  exprs = [x.alu(Ops.ADD, x.const_like(c)), x.alu(Ops.MUL, x.const_like(c)).r(Ops.ADD, (1,)), x.alu(Ops.MAX, x.const_like(c)).r(Ops.MAX, (0,))]
  return [create_schedule([e])[0].ast for e in exprs]

def _spy_assemble(monkeypatch, fail: str | None = None) -> list[str]:
  """Record the thread each C assemble runs on; raise for the kernel named `fail`."""
  threads: list[str] = []
  be = BACKENDS["c"]
  def asm(src, name, t):
    threads.append(threading.current_thread().name)
    if name == fail: raise RuntimeError(f"assembler refused {name}")
    return be.assemble(src, name, t)
  monkeypatch.setitem(BACKENDS, "c", dataclasses.replace(be, assemble=asm))
  return threads

def test_compile_kernels_same_bytes_in_order_on_a_pool(monkeypatch):
  asts = _asts(3.25)
  want = [compile_kernel(a, T, name=f"k{i}") for i, a in enumerate(asts)]
  threads = _spy_assemble(monkeypatch)
  got = compile_kernels([(a, f"k{i}") for i, a in enumerate(asts)], T, workers=2)
  assert got == want                                     # sources, binaries, launch, opts: all of it, in job order
  assert len(threads) == 3 and all(t.startswith("assemble") for t in threads)   # on the pool, not one after another here

def test_compile_kernels_one_worker_or_in_process_assembler_stays_on_this_thread(monkeypatch):
  asts = _asts(4.5)
  threads = _spy_assemble(monkeypatch)
  compile_kernels([(a, f"k{i}") for i, a in enumerate(asts)], T, workers=1)
  assert threads == [threading.current_thread().name] * 3
  monkeypatch.setitem(BACKENDS, "c", dataclasses.replace(BACKENDS["c"], parallel_assemble=False))   # (as LLVM's is)
  threads.clear()
  compile_kernels([(a, f"k{i}") for i, a in enumerate(asts)], T, workers=2)
  assert threads == [threading.current_thread().name] * 3

def test_compile_kernels_failure_in_its_place(monkeypatch):
  asts = _asts(5.75)
  _spy_assemble(monkeypatch, fail="k1")
  got = compile_kernels([(a, f"k{i}") for i, a in enumerate(asts)], T, workers=2)
  assert isinstance(got[1], RuntimeError) and "k1" in str(got[1])
  assert [g.binary[:4] for g in (got[0], got[2])] == [b"\x7fELF"] * 2

@pytest.fixture
def fresh_workers(monkeypatch, on_cpu):
  monkeypatch.setenv("COMPILE_WORKERS", "2")
  monkeypatch.delenv("BEAM", raising=False)

def test_schedule_kernels_built_together_exact(monkeypatch, fresh_workers):
  from frontend import Tensor
  threads = _spy_assemble(monkeypatch)
  an = np.random.default_rng(0).random((64, 48), dtype=np.float32) / 8
  a = Tensor(an).realize()
  c = 1.0 + 0.0123   # a constant no other test uses: every kernel below is new to the in-process cache
  s, m = (a * c).sum(axis=1), (a - c).max(axis=0)
  out = (s.reshape(64, 1) + m.reshape(1, 48)).exp2()
  got = out.numpy()
  assert sum(t.startswith("assemble") for t in threads) >= 2   # one build of the schedule's new kernels, on the pool
  np.testing.assert_allclose(got, np.exp2((an * c).sum(1)[:, None] + (an - c).max(0)[None, :]), rtol=1e-5)

def test_schedule_compile_error_raised_where_the_kernel_runs(monkeypatch, fresh_workers):
  from frontend import Tensor
  a = Tensor(np.ones((8, 40), np.float32)).realize()
  c = 1.0 + 0.0456
  s = (a * c).sum(axis=1)
  out = s.reshape(8, 1) + (a + c)
  names = [si.name for si in out.schedule() if si.kind == "kernel"]
  _spy_assemble(monkeypatch, fail=names[-1])
  with pytest.raises(RuntimeError, match=f"assembler refused {names[-1]}"): out.realize()
  assert s.lazydata.base.realized   # the kernels before it ran, as in a one-by-one build
