"""Custom kernels from UOps and loops (run on the CPU, rendered for PTX), the structure checks that refuse broken
kernels with a message, check_program on linearized code, and the pre-render rewrite hook."""
import numpy as np
import pytest
from frontend import Tensor
import frontend.engine as engine
from frontend.buffer import Buffer
from frontend.devices import open_device, target_of
from compiler.dtypes import dtypes
from compiler.uop import UOp, Ops, UPat, PatternMatcher
from compiler.kernel_api import KernelBuilder, KernelStructureError, check_program, register_rewrite, unregister_rewrite
from compiler.linearize import linearize
from compiler.opt.base import Opt
from compiler.beam import build
from compiler.render_ptx import render_ptx

pytestmark = pytest.mark.usefixtures("on_cpu")   # C-path tests: CPU even under MOCKGPU=1 NV=1

DEV = open_device("CPU")

def run(k, arrays: list[np.ndarray], out_size: int, opts=()) -> np.ndarray:
  """Build k (with opts) for the CPU and run it on `arrays`; returns the output buffer."""
  b = build(k, tuple(opts), target_of("CPU"))
  bufs = [Buffer("CPU", out_size * 4)] + [Buffer("CPU", a.nbytes) for a in arrays]
  for buf, a in zip(bufs[1:], arrays): DEV.allocator.copyin(buf.raw, memoryview(a.reshape(-1).view(np.uint8)))
  DEV.program(b.name, b.binary)(*[x.raw for x in bufs], **b.launch.kwargs(), wait=True)
  out = np.empty(out_size, np.float32)
  DEV.allocator.copyout(memoryview(out.view(np.uint8)), bufs[0].raw)
  return out

def matvec(m: int, n: int):
  kb = KernelBuilder("matvec")
  y, a, x = kb.buffer(dtypes.float32, m, output=True), kb.buffer(dtypes.float32, m * n), kb.buffer(dtypes.float32, n)
  i, j = kb.range(m), kb.range(n, reduce=True)
  kb.store(y, i, kb.reduce(Ops.ADD, a.load(i * n + j) * x.load(j), j))
  return kb.kernel()

@pytest.mark.parametrize("opts", [(), (Opt("REDUCE_VECTOR", 0, 8), Opt("REDUCE_UNROLL", 0, 2)), (Opt("UPCAST", 0, 4), Opt("THREAD", 0))])
def test_custom_matvec_runs_and_takes_opts(opts):
  rng = np.random.default_rng(0)
  a, x = rng.standard_normal((12, 32)).astype(np.float32), rng.standard_normal(32).astype(np.float32)
  np.testing.assert_allclose(run(matvec(12, 32), [a, x], 12, opts), a @ x, rtol=1e-5, atol=1e-5)

def test_custom_kernel_with_gate_and_max_renders_for_ptx_too():
  kb = KernelBuilder("shifted_max")
  o, x = kb.buffer(dtypes.float32, 8, output=True), kb.buffer(dtypes.float32, 8 * 10)
  i, j = kb.range(8), kb.range(12, reduce=True)
  src = j + (-1)
  v = x.load(i * 10 + src, src.ge(0).logical_and(src.lt(10)))   # reads 0 outside the row (a padded window)
  kb.store(o, i, kb.reduce(Ops.MAX, v, j))
  k = kb.kernel()
  xs = np.random.default_rng(1).standard_normal(80).astype(np.float32)
  np.testing.assert_allclose(run(k, [xs], 8), np.maximum(xs.reshape(8, 10).max(1), 0))
  ptx, launch = render_ptx(k, "sm_90")
  assert ".entry shifted_max" in ptx and launch

def _err(build_fn, match: str):
  with pytest.raises(KernelStructureError, match=match): build_fn()

def test_range_never_closed():
  def f():
    kb = KernelBuilder("k"); o = kb.buffer(dtypes.float32, 4, output=True); x = kb.buffer(dtypes.float32, 16)
    i, j = kb.range(4), kb.range(4, reduce=True)
    kb.store(o, i, x.load(i * 4 + j)); kb.kernel()
  _err(f, r"reduction loop r1 \(size 4\) is never closed")

def test_store_outside_the_range_it_indexes():
  def f():
    kb = KernelBuilder("k"); o = kb.buffer(dtypes.float32, 16, output=True)
    i, j = kb.range(4), kb.range(4, reduce=True)
    kb.store(o, i * 4 + j, kb.reduce(Ops.ADD, UOp.const(dtypes.float32, 1.0) + j.cast(dtypes.float32), j)); kb.kernel()
  _err(f, "store to data0 is outside loop r1")

def test_store_that_every_iteration_overwrites():
  def f():
    kb = KernelBuilder("k"); o = kb.buffer(dtypes.float32, 4, output=True); x = kb.buffer(dtypes.float32, 4)
    i = kb.range(4)
    kb.store(o, 0, x.load(i)); kb.kernel()
  _err(f, "doesn't depend on output loop r0")

@pytest.mark.parametrize("case, match", [
  ("reduce_global", "reduce over output loop r0"), ("dtype", "storing int into data0 of float"),
  ("oob_store", r"store index of data0 spans 0\.\.4, outside its 4 elements"), ("oob_load", "load index of data1 spans"),
  ("store_input", "store to input buffer data1"), ("no_store", "no store"), ("late_output", "output buffer declared after input")])
def test_other_structure_errors(case, match):
  def f():
    kb = KernelBuilder("k")
    if case == "late_output": kb.buffer(dtypes.float32, 4); kb.buffer(dtypes.float32, 4, output=True)
    o, x = kb.buffer(dtypes.float32, 4, output=True), kb.buffer(dtypes.float32, 4)
    i = kb.range(5 if case == "oob_store" else 4)
    if case == "reduce_global": kb.store(o, 0, kb.reduce(Ops.ADD, x.load(i), i))
    elif case == "dtype": kb.store(o, i, i)
    elif case == "oob_store": kb.store(o, i, UOp.const(dtypes.float32, 1.0))
    elif case == "oob_load": kb.store(o, i, x.load(i + 1))
    elif case == "store_input": kb.store(x, i, UOp.const(dtypes.float32, 1.0))
    kb.kernel()
  _err(f, match)

def test_check_program_on_linearized_code():
  k = matvec(4, 8)
  prog = linearize(k)
  check_program(prog, "matvec")   # a well-formed program passes
  ends = [i for i, u in enumerate(prog) if u.op is Ops.ENDRANGE]
  with pytest.raises(KernelStructureError, match="never closed"): check_program(prog[:ends[-1]], "matvec")
  swapped = list(prog)
  swapped[ends[0]], swapped[ends[1]] = swapped[ends[1]], swapped[ends[0]]
  with pytest.raises(KernelStructureError, match="out of order"): check_program(swapped, "matvec")
  store = next(i for i, u in enumerate(prog) if u.op is Ops.STORE)
  moved = prog[:store] + prog[store + 1:] + [prog[store]]   # the store after its loop closed
  with pytest.raises(KernelStructureError, match="outside that loop|closed"): check_program(moved, "matvec")

def test_rewrite_hook_runs_before_rendering():
  seen = []
  def twice(x):
    seen.append(x)
    return x + x
  pm = PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("x"), UPat.const(2.0))), twice)])
  xs = np.arange(7, dtype=np.float32)
  renderer = target_of(Tensor(xs).device).renderer   # "c", or "llvm" under CPU_LLVM=1: the rule is for that one
  register_rewrite(pm, renderer)
  try:
    engine._kernel_cache.clear()
    # 7 floats: no vector width divides it and no tile applies, so on any ISA the kernel multiplies scalars by the
    # scalar constant the pattern matches (a vectorized kernel multiplies by a vector of 2.0s, which it does not)
    np.testing.assert_allclose((Tensor(xs) * 2.0).numpy(), xs * 2)
    assert seen   # the rule ran on the kernel the engine built
    src = [ck.src for ck in engine._kernel_cache.values()][-1]
    body = src.split("{", 1)[1]
    if renderer == "llvm": assert "fmul" not in body and "fadd" in body, body
    else: assert "*" not in body.replace("*restrict", "").replace("*)(", "")
  finally:
    unregister_rewrite(pm)
    engine._kernel_cache.clear()
