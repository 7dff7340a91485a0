"""Layers whose parameters were never realized by the user (issue 28): their random initialisation is a kernel of its
own, run once, at the first schedule that reads them; no conv or matmul kernel recomputes it, eager or in a TinyJit,
and the results are bit for bit those of the same model with realized parameters."""
import numpy as np
from frontend import Tensor, TinyJit, nn
from frontend.jit import capture
from frontend.nn.state import get_parameters
from compiler.lazy import LazyBuffer
from compiler.schedule import create_schedule
from compiler.uop import Ops

def _model(realized: bool):
  Tensor.manual_seed(3)
  layers = [nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1), nn.Linear(8 * 6 * 6, 10)]
  ps = get_parameters(layers)
  for p in ps: p.requires_grad = True
  if realized: Tensor.realize(*ps)
  x = Tensor(np.random.default_rng(0).standard_normal((4, 3, 6, 6), dtype=np.float32)).realize()
  def step():
    for p in ps: p.grad = None
    h = layers[1](layers[0](x).relu()).relu()
    loss = layers[2](h.flatten(1)).square().mean()
    loss.backward()
    return [loss.realize()] + [p.grad.realize() for p in ps]
  return ps, step

def _draws_random(ast) -> bool:
  """Does the kernel hash random bits (Tensor.rand's counter-based hash: xor-shift rounds)?"""
  return any(u.op is Ops.XOR for u in ast.toposort())

def _kernels(fn) -> list:
  """The ASTs of the kernels fn() launches."""
  with capture("test") as items: out = fn()
  return [ei.kernel.ast for ei in items if ei.kind == "kernel"], out

def test_lazy_params_eager_init_is_own_kernel_run_once():
  ps, step = _model(realized=False)
  assert not any(p.lazydata.realized for p in ps)
  asts, _ = _kernels(step)
  reducing = [a for a in asts if any(u.op is Ops.REDUCE_AXIS for u in a.toposort())]
  assert reducing and not any(_draws_random(a) for a in reducing), "a conv/matmul kernel recomputes the initialisation"
  # one elementwise kernel per parameter draws it, and each parameter now holds its values
  assert sum(_draws_random(a) for a in asts) == len(ps)
  assert all(p.lazydata.realized for p in ps)
  asts, _ = _kernels(step)
  assert not any(_draws_random(a) for a in asts), "the initialisation ran again in the second step"

def test_lazy_params_same_results_as_realized():
  for jit in (False, True):
    outs = []
    for realized in (False, True):
      ps, step = _model(realized)
      run = TinyJit(step) if jit else step
      outs.append([[t.numpy() for t in run()] for _ in range(4)] + [[p.numpy() for p in ps]])
    for a, b in zip(*outs):
      for x, y in zip(a, b): np.testing.assert_array_equal(x, y)

def test_lazy_params_tinyjit_replays_no_init():
  ps, step = _model(realized=False)
  jit = TinyJit(step)
  for _ in range(3): jit()
  asts = [ei.kernel.ast for ei in jit.items if ei.kind == "kernel"]
  assert asts and not any(_draws_random(a) for a in asts), "the TinyJit replays the initialisation every step"
  assert all(p.lazydata.realized for p in ps)

def test_costly_broadcast_value_is_stored_once():
  # an expensive expression without any randomness (transcendentals) broadcast over the rows: its own kernel, computed
  # once per element, not once per row; a cheap one (a square) stays inlined
  x = LazyBuffer.empty((4, 8), Tensor([1.0]).dtype, "CPU"); x.buffer = object()
  b = LazyBuffer.empty((8,), x.dtype, "CPU"); b.buffer = object()
  costly = b.alu(Ops.EXP2).alu(Ops.LOG2).alu(Ops.SIN)
  for val, n in ((costly, 2), (b.alu(Ops.MUL, b), 1)):
    sched = create_schedule([x.alu(Ops.ADD, val.reshape((1, 8)).expand((4, 8)))])
    assert len(sched) == n and sum(any(u.op is Ops.SIN for u in si.ast.toposort()) for si in sched) == (n == 2)

def test_costly_value_read_by_two_kernels_is_stored_once():
  x = LazyBuffer.empty((8, 16), Tensor([1.0]).dtype, "CPU"); x.buffer = object()
  v = x.alu(Ops.EXP2).alu(Ops.SIN).alu(Ops.LOG2)
  s1, s2 = v.r(Ops.ADD, (1,)), v.r(Ops.MAX, (0,))
  sched = create_schedule([s1, s2])
  assert len(sched) == 3 and sum(any(u.op is Ops.SIN for u in si.ast.toposort()) for si in sched) == 1
  # cheap: recomputed by each reader, no kernel of its own
  w = x.alu(Ops.MUL, x)
  assert len(create_schedule([w.r(Ops.ADD, (1,)), w.r(Ops.MAX, (0,))])) == 2
