"""Software prefetch in the packed matmul (compiler/opt/matmul.py prefetch_streams, compiler/prefetch.py): in the
product's reduction loop, the first load of each cache line a step reads (the packed A row's first value, each 64-byte
line of the packed B row) also prefetches PREFETCH_AHEAD bytes on; the C and LLVM renderers emit it; prefetches past
the end of the packed buffers are harmless, so products of odd shapes stay equal to numpy on both CPU paths."""
import re
import numpy as np
import pytest
from compiler.lower import lower
from compiler.linearize import linearize
from compiler.opt.heuristic import optimize
from compiler.opt.matmul import PREFETCH_AHEAD, LINE, prefetch_streams
import compiler.pack as pack
from compiler.pack import pack_matmuls
from compiler.pipeline import compile_kernel
from compiler.prefetch import prefetch_bytes, prefetched
from compiler.render_c import render_c
from compiler.schedule import create_schedule
from compiler.target import Target
from compiler.uop import Ops
from frontend import Tensor, devices

pytestmark = [pytest.mark.usefixtures("on_cpu")]
rng = np.random.default_rng(28)
def rnd(*shape) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)

def _product(m: int, k: int, n: int, target: Target):
  a, b = Tensor(rnd(m, k)), Tensor(rnd(k, n))
  si = pack_matmuls(create_schedule([(a @ b).lazydata]), lambda d: target.simd_bytes // 4)[-1]
  assert si.ast.arg[0] == "packed_matmul", "the product was not packed"
  return si, optimize(lower(si.ast, si.name), target)

def test_one_prefetch_per_line_of_each_stream(cpu_target, monkeypatch):
  monkeypatch.setattr(pack, "A_IN_PLACE", 0)   # (A packed on 16 lanes too: test_rows_of_a_read_in_place_are_not_prefetched)
  si, k = _product(512, 256, 512, cpu_target)
  _, mr, nr, _ = si.ast.arg
  lanes = cpu_target.simd_bytes // 4
  loads = [u for u in k.sink.toposort() if u.op is Ops.LOAD]
  pa = [u for u in loads if u.dtype.count == 1]       # the tile's MR broadcast values of packed A
  pb = [u for u in loads if u.dtype.count == lanes]   # its NR // lanes vectors of packed B
  assert len(pa) == mr and len(pb) == nr // lanes
  # A: MR floats a step, one prefetch (the row's first value); B: one per 64-byte line of the NR floats
  assert [prefetch_bytes(u) for u in pa].count(PREFETCH_AHEAD) == 1 and sum(map(prefetch_bytes, pa)) == PREFETCH_AHEAD
  assert sum(prefetch_bytes(u) == PREFETCH_AHEAD for u in pb) == nr * 4 // LINE
  src = render_c(k, 2, linearize(k))
  loop = src[src.index("< 256; r"):]   # the reduction loop on: every prefetch is in its body, before the loads
  assert src.count("__builtin_prefetch(") == loop.count("__builtin_prefetch(") == 1 + nr * 4 // LINE
  assert loop.index("__builtin_prefetch(") < loop.index("data1[") and f") + {PREFETCH_AHEAD}));" in loop

def test_prefetch_only_in_packed_products(cpu_target):
  a = Tensor(rnd(64, 64))
  k = optimize(lower(create_schedule([(a @ a).lazydata])[0].ast), cpu_target)
  assert not any(prefetch_bytes(u) for u in k.sink.toposort() if u.op is Ops.LOAD)   # (too small to pack)
  assert prefetch_streams(k.sink, []) is k.sink   # no reduction loop: nothing to prefetch

def test_prefetched_load_errors():
  _, k = _product(256, 256, 256, Target("CPU", "c", ncores=2, simd_bytes=64))
  ld = next(u for u in k.sink.toposort() if u.op is Ops.LOAD)
  with pytest.raises(AssertionError, match="positive distance"): prefetched(ld, 0)
  with pytest.raises(AssertionError, match="needs a LOAD"): prefetched(k.sink, 64)

def test_llvm_renders_the_prefetch(monkeypatch):
  monkeypatch.setattr(pack, "A_IN_PLACE", 0)
  t = Target("CPU", "llvm", arch="native", ncores=2, simd_bytes=64)
  si, _ = _product(256, 256, 256, t)
  ck = compile_kernel(si.ast, t, name=si.name, assemble=False)
  ir = ck.src
  calls = re.findall(r"call void @llvm\.prefetch\.p0\(ptr (%\w+), i32 0, i32 3, i32 1\)", ir)
  assert len(calls) == 1 + 32 * 4 // LINE   # 12x32 tile: A's row, B's two lines
  for c in calls: assert re.search(rf"{c} = getelementptr i8, ptr %\w+, i64 {PREFETCH_AHEAD}\b", ir)   # (not inbounds)

@pytest.mark.parametrize("llvm", [False, True])
@pytest.mark.parametrize("m,k,n", [(256, 256, 256), (301, 263, 272), (257, 1, 256), (260, 257, 512)])
def test_prefetching_products_equal_numpy(monkeypatch, llvm, m, k, n):
  # K=1, K prime, M not a multiple of the tile: the last steps prefetch past the ends of PA and PB
  if llvm:
    pytest.importorskip("llvmlite")
    monkeypatch.setenv("CPU_LLVM", "1"); monkeypatch.delitem(devices._targets, "CPU", raising=False)
  try:
    an, bn = rnd(m, k), rnd(k, n)
    out = (Tensor(an) @ Tensor(bn)).numpy()
    np.testing.assert_allclose(out, an.astype(np.float64) @ bn, rtol=1e-4, atol=1e-3)
  finally:
    if llvm: devices._targets.pop("CPU", None)

def test_batched_and_transposed_products_equal_numpy():
  a, b = rnd(2, 300, 256), rnd(2, 512, 256)
  out = (Tensor(a) @ Tensor(b).transpose(-1, -2)).numpy()   # a batch of two products, B read transposed
  np.testing.assert_allclose(out, a.astype(np.float64) @ b.transpose(0, 2, 1), rtol=1e-4, atol=1e-3)
  x, w = rnd(3, 100, 256), rnd(256, 256)
  out = (Tensor(x) @ Tensor(w)).numpy()   # lead dims merged into rows: one packed product of 300 rows
  np.testing.assert_allclose(out, x.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)

def test_rows_of_a_read_in_place_are_not_prefetched(cpu_target):
  """A 512 x 256 A beside a small B is read in place (compiler/pack.py a_in_place): the tile's rows are separate streams
  K floats apart, each advancing one float a step, so its A loads get no hint (one each step would ask for every line
  16 times, and PREFETCH_AHEAD bytes on lies in another row); B's rows still get one per line. On 8 lanes the 6-row
  tile leaves 2 rows (512 = 85 x 6 + 2, 256 = 42 x 6 + 4): a second tile in its own reduction loop, hinted alike."""
  si, k = _product(512, 256, 512, cpu_target)
  _, mr, nr, _ = si.ast.arg
  lanes = cpu_target.simd_bytes // 4
  loops = 1 + (512 % mr > 0)   # (the tail tile's reduction loop reads B too)
  loads = [u for u in k.sink.toposort() if u.op is Ops.LOAD]
  pa, pb = [u for u in loads if u.dtype.count == 1], [u for u in loads if u.dtype.count == lanes]
  assert len(pa) == mr + 512 % mr and len(pb) == loops * nr // lanes
  assert sum(map(prefetch_bytes, pa)) == 0
  assert sum(prefetch_bytes(u) == PREFETCH_AHEAD for u in pb) == loops * nr * 4 // LINE
  t = Target("CPU", "llvm", arch="native", ncores=2, simd_bytes=cpu_target.simd_bytes)
  si, _ = _product(256, 256, 256, t)
  ir = compile_kernel(si.ast, t, name=si.name, assemble=False).src
  mr = si.ast.arg[1]
  assert len(re.findall(r"call void @llvm\.prefetch\.p0\(", ir)) == (1 + (256 % mr > 0)) * nr * 4 // LINE
