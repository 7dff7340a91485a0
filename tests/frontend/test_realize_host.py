"""The host side of a realize (frontend/engine.py run_schedule, prebuild): what runs between two launches and what a
realize of kernels already built asks of the OS. Behaviour only, no timing (speed: bench/matmul_split.py)."""
import numpy as np
import pytest
from compiler import settings
from compiler.schedule import create_schedule
from frontend import Tensor, engine
from frontend import buffer as fbuffer

def _events(monkeypatch) -> list[str]:
  """Record, in order, each Buffer made, each kernel asked of the cache and each launch of run_schedule."""
  ev: list[str] = []
  init, get, run = fbuffer.Buffer.__init__, engine.get_kernel, engine.ExecItem.run
  def buf(self, *a, **k):
    ev.append("buffer"); init(self, *a, **k)
  def kern(si, *a, **k):
    ev.append("kernel"); return get(si, *a, **k)
  def launch(self, debug=None):
    ev.append("launch"); return run(self, debug)
  monkeypatch.setattr(fbuffer.Buffer, "__init__", buf)
  monkeypatch.setattr(engine, "get_kernel", kern)
  monkeypatch.setattr(engine.ExecItem, "run", launch)
  return ev

def test_launches_follow_each_other_with_no_host_work_between(monkeypatch, on_cpu):
  """Every output buffer and kernel of the schedule is ready before the first launch: a kernel leaves the host's caches
  cold, and the allocation and kernel lookup run after it cost several times as much (bench/matmul_split.py)."""
  rng = np.random.default_rng(0)
  an, bn, cn = (rng.standard_normal((48, 40), dtype=np.float32) for _ in range(3))
  a, b, c = (Tensor(x).realize() for x in (an, bn, cn))
  s = (a * b).sum(axis=1)                  # a reduction, then an elementwise kernel reading it: two kernels, one order
  out = s.reshape(48, 1) + c
  ev = _events(monkeypatch)
  got = out.numpy()
  launches = [i for i, e in enumerate(ev) if e == "launch"]
  assert len(launches) >= 2 and launches == list(range(launches[0], launches[0] + len(launches)))   # back to back
  assert ev[:launches[0]].count("kernel") == len(launches)
  np.testing.assert_allclose(got, (an * bn).sum(1)[:, None] + cn, rtol=1e-5, atol=1e-5)

def test_pending_assign_read_and_written_again_in_one_schedule(on_cpu):
  """An assign's result read by the next kernel and written again by a second assign (its buffer is made ready before
  the first assign has run): each kernel gets the buffer the item before it writes."""
  a = Tensor([1.0, 2.0]).realize()
  a.assign(a + 1)
  b = a.clone()
  a.assign(a * 10)
  a.realize()
  assert b.tolist() == [2.0, 3.0] and a.tolist() == [20.0, 30.0]

def test_launch_error_leaves_the_items_before_it_run(monkeypatch, on_cpu):
  """A launch that fails (here the second kernel's) raises; the kernel before it ran and its value is realized."""
  a = Tensor(np.ones((8, 40), np.float32)).realize()
  s = (a * 1.0625).sum(axis=1)
  out = s.reshape(8, 1) + (a + 1.0625)
  names = [si.name for si in out.schedule() if si.kind == "kernel"]
  run = engine.ExecItem.run
  def failing(self, debug=None):
    if self.kernel is not None and self.kernel.name == names[-1]: raise RuntimeError("launch refused")
    return run(self, debug)
  monkeypatch.setattr(engine.ExecItem, "run", failing)
  with pytest.raises(RuntimeError, match="launch refused"): out.realize()
  assert s.lazydata.base.realized and not out.lazydata.base.realized
  monkeypatch.setattr(engine.ExecItem, "run", run)
  np.testing.assert_allclose(out.numpy(), np.full((8, 40), 40 * 1.0625 + 2.0625, np.float32), rtol=1e-6)

def test_prebuild_of_built_kernels_asks_nothing_of_the_os(monkeypatch, on_cpu):
  """A schedule whose kernels are all in the cache builds nothing and never asks how many compile workers there may
  be (settings.compile_workers reads the process's CPU mask, a system call, at every realize of an eager step)."""
  x = Tensor([1.0, 2.0]).realize()
  (x + 23.75).realize(); (x * 23.75).realize()   # built and cached
  sched = create_schedule([(x + 23.75).lazydata, (x * 23.75).lazydata])
  def refuse() -> int: raise AssertionError("compile_workers asked with nothing to build")
  monkeypatch.setattr(settings, "compile_workers", refuse)
  assert engine.prebuild(sched, settings.opts_key(), 0) == 0
