"""The packed product (8 lanes, AVX2, and 16, AVX-512) is cut into chunks that the cores claim in turn
(compiler/opt/heuristic.py optimize, thread_chunks), as other big kernels are. Every chunked product
writes each output once: column-block counts the chunks don't divide, 2 and 3 cores, N of one or two vectors a tile,
rows padded to the tile, K=1, prime K, a @ a, B transposed, a batch of products (its batch loop chunked), through the
C and the LLVM IR renderers; each equals float64 numpy."""
import dataclasses
import numpy as np
import pytest
import compiler.opt.heuristic as heuristic
import compiler.pack as pack
from compiler.lower import lower
from compiler.opt.heuristic import optimize
from compiler.pipeline import compile_kernel
from conftest import skip_unless_host_runs
from test_pack_avx2 import _empty, _plan, _run
from test_pack_batch import _bmm

pytestmark = [pytest.mark.usefixtures("on_cpu")]
rng = np.random.default_rng(38)

def _chunks_wanted(lanes: int, ncores: int, blocks: int) -> int:
  """The launch's threads: CHUNKS_PER_CORE a core where the split loop has that many iterations, else one a core."""
  c = ncores * heuristic.CHUNKS_PER_CORE
  return c if blocks >= c else ncores

def _blocks(si, target) -> int:
  """Iterations of the loop the packed product `si` splits across the cores (its column blocks, or its batch)."""
  k = optimize(lower(si.ast, si.name), target)
  assert k.threaded is not None, k.applied_opts
  return k.threaded.src[0].arg

def test_big_products_are_chunked(cpu_target):
  """1024^3 at its real size (no thresholds lowered): 16 column blocks on 8 lanes, 8 on 16, split in 8 chunks."""
  lanes = cpu_target.simd_bytes // 4
  items = _plan(_empty(1024, 1024), _empty(1024, 1024), lanes)
  k = optimize(lower(items[-1].ast, items[-1].name), dataclasses.replace(cpu_target, ncores=2))
  assert k.threaded is k.global_ranges[0], k.applied_opts
  assert (k.chunks or 2) == 2 * heuristic.CHUNKS_PER_CORE, (k.chunks, k.threaded)
  assert optimize(lower(items[-1].ast, items[-1].name), dataclasses.replace(cpu_target, ncores=1)).threaded is None

@pytest.mark.parametrize("renderer", ["c", "llvm"])
@pytest.mark.parametrize("ncores", [2, 3])
@pytest.mark.parametrize("m,k,n,how", [
    (300, 257, 352, ""),      # 6 x 16 tile, rows padded 300 -> 306, prime K; 22 column tiles in 11 blocks of 2
    (264, 1, 352, ""),        # K=1 (no reduction loop left: the generic opts, chunked as any big kernel)
    (200, 64, 360, ""),       # N an odd number of vectors: the 12 x 8 tile; 45 column tiles in 15 blocks of 3
    (352, 352, 352, "a@a"),   # the same buffer as both operands
    (300, 100, 352, "b.T"),   # B read transposed (packed from its columns)
])
def test_chunked_products_equal_numpy(cpu_target, monkeypatch, renderer, ncores, m, k, n, how):
  monkeypatch.setattr(pack, "PACK_MIN", 1)
  monkeypatch.setattr(pack, "_plans", {})
  monkeypatch.setattr(heuristic, "CHUNK_MIN_WORK", 0)   # (small products cut as big ones are)
  target = dataclasses.replace(cpu_target, ncores=ncores, renderer=renderer)
  lanes = target.simd_bytes // 4
  a = _empty(m, k)
  b = a.permute((1, 0)) if how == "a@a" else _empty(n, k).permute((1, 0)) if how == "b.T" else _empty(k, n)
  items = _plan(a, b, lanes)
  # (16 lanes: N=360 is no whole number of tiles, the product then goes through compiler/pack_pad.py's scratch)
  prod = next(si for si in items if si.ast.arg and si.ast.arg[0] == "packed_matmul")
  ck = compile_kernel(prod.ast, target, name=prod.name)
  if k > 1: assert ck.threads == _chunks_wanted(lanes, ncores, _blocks(prod, target)), (ck.threads, ck.applied_opts)
  skip_unless_host_runs(target)
  an = rng.standard_normal((m, k)).astype(np.float32)
  bsrc = b.base   # (b.T: the (N, K) buffer itself)
  arrays = {a: an} if how == "a@a" else {a: an, bsrc: (bn := rng.standard_normal(bsrc.shape).astype(np.float32))}
  want = an.astype(np.float64) @ (an.T if how == "a@a" else bn.T if how == "b.T" else bn)
  np.testing.assert_allclose(_run(items, arrays, target).reshape(m, n), want, rtol=1e-4, atol=1e-4 * np.sqrt(k))

@pytest.mark.parametrize("ncores", [2, 3])
def test_chunked_batch_of_products_equals_numpy(cpu_target, monkeypatch, ncores):
  """9 products of different B matrices: the batch loop is the split one, 9 batches in 8 chunks (2 cores) or 3 (3
  cores: 12 chunks would leave some empty)."""
  monkeypatch.setattr(pack, "PACK_MIN", 1)
  monkeypatch.setattr(pack, "_plans", {})
  monkeypatch.setattr(heuristic, "CHUNK_MIN_WORK", 0)
  target = dataclasses.replace(cpu_target, ncores=ncores)
  lanes = target.simd_bytes // 4
  a, b = _empty(9, 37, 13), _empty(9, 13, 21)   # (N=21: whole tiles only after padding, so packed however small)
  items = _bmm(a, b, lanes)
  prod = next(si for si in items if si.ast.arg and si.ast.arg[0] == "packed_matmul")
  ck = compile_kernel(prod.ast, target, name=prod.name)
  assert _blocks(prod, target) == 9 and ck.threads == _chunks_wanted(lanes, ncores, 9), (ck.threads, ck.applied_opts)
  skip_unless_host_runs(target)
  an, bn = rng.standard_normal(a.shape).astype(np.float32), rng.standard_normal(b.shape).astype(np.float32)
  np.testing.assert_allclose(_run(items, {a: an, b: bn}, target).reshape(9, 37, 21), an.astype(np.float64) @ bn, rtol=1e-4, atol=1e-3)
