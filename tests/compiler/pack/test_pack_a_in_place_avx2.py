"""A read in place on 8 lanes (AVX2, compiler/pack.py a_in_place): beside a B read in place, a small A with contiguous
rows is read where it is, so the product is one kernel. Its rows can't be padded (they would read past A's end), so
the tile's height need not divide M: compiler/opt/matmul.py cuts the row loop in units of gcd(M, MR) rows, MR/u units a
tile, and the units left over as one smaller tile inside each column block (512 rows: 85 tiles of 6 and one of 2).
Every such product equals float64 numpy (M one unit over the tile, odd M, a two-unit tail, K=1, prime K, one-vector-wide
N, an epilogue, a @ a, lead dims merged into rows, strided rows), no output lands past the output's end, and no load
reads past A's end (A placed against a page the process can't read). On 16 lanes the same products keep their plan."""
import os, pathlib, subprocess, sys
import numpy as np
import pytest
import compiler.pack as pack
from compiler.lower import lower
from compiler.opt.heuristic import optimize
from conftest import skip_unless_host_runs
from child_env import pythonpath
from test_pack_avx2 import _empty, _plan, _run

pytestmark = [pytest.mark.usefixtures("on_cpu")]
ROOT = pathlib.Path(__file__).resolve().parents[3]
rng = np.random.default_rng(39)
def rnd(*shape) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)

def test_512_cubed_is_one_kernel_with_a_two_row_tail(cpu_target):
  """512^3 on 8 lanes: one kernel reading A and B in their own slots, no padded rows (no room past the output), a 6 x 16
  tile over 510 rows and one 2-row tile (one loop chain: the tail) inside the threaded column blocks. On 16 lanes:
  one kernel too (an 8 x 32 tile divides 512), as before."""
  lanes = cpu_target.simd_bytes // 4
  a, b = _empty(512, 512), _empty(512, 512)
  items = _plan(a, b, lanes)
  assert len(items) == 1 and items[0].inputs == [a, b] and items[0].alloc_nbytes is None, [si.name for si in items]
  assert items[0].ast.arg[:3] == (("packed_matmul", 6, 16) if lanes == 8 else ("packed_matmul", 8, 32))
  k = optimize(lower(items[0].ast, items[0].name), cpu_target)
  if lanes == 16:
    assert not k.nests
    return
  assert [o[0] for o in k.applied_opts] == ["TILE", "SPLIT", "PAD", "UNROLL_TAIL", "UPCAST"], k.applied_opts
  assert k.applied_opts[0][2] == 2 and k.applied_opts[-1][2] == 3   # units of 2 rows, 3 a tile
  assert k.threaded is k.global_ranges[0] and k.depths == [1] and [r.src[0].arg for r in k.global_ranges] == [8, 85, 4]
  assert [r.src[0].arg for r in k.nests[0]] == [4]   # (the 2-row tail: one unit, unrolled into the jj loop's body)

def test_a_tail_without_column_blocks_is_still_split_across_the_cores(monkeypatch):
  """1000 x 256 x 1000 on 8 lanes: a 12 x 8 tile, 125 column tiles (no block of 2-4 divides them: jb = 1), so no
  other column tile reuses an A panel: A stays packed (A8_MIN_JB; in place measured slower). Let in place anyway
  (A8_MIN_JB = 1), 1000 = 83 x 12 + 4 rows: the column loop goes outside the row loop so the tail hangs inside it,
  and the cores split it (with the row loop outermost the tail would hang beside the split loop: no split at all)."""
  from compiler.target import Target
  from hcqrt.cpu.device import CPUDevice
  a, b = _empty(1000, 256), _empty(256, 1000)
  items = _plan(a, b, 8)
  assert len(items) == 2 and items[0].inputs == [a] and items[-1].ast.arg == ("packed_matmul", 12, 8, 1), [si.name for si in items]
  monkeypatch.setattr(pack, "A8_MIN_JB", 1)
  (si,) = _plan(a, b, 8)
  assert si.ast.arg == ("packed_matmul", 12, 8, 1)
  target = Target.from_report(CPUDevice(isa="x86-64-v3").target)
  k = optimize(lower(si.ast, si.name), target)
  assert [r.src[0].arg for r in k.global_ranges] == [125, 83] and not k.nests, k.applied_opts   # (the tail: unrolled in jt)
  assert target.ncores < 2 or k.threaded is k.global_ranges[0]

@pytest.mark.parametrize("m,k,n,tail", [(512, 512, 512, 2), (508, 512, 512, 4), (257, 263, 256, 5), (512, 256, 264, 8), (1000, 256, 1024, 4),
                                        (300, 1, 256, 0), (14, 7, 64, 2), (13, 64, 72, 1), (96, 251, 256, 0)])
def test_a_in_place_with_a_tail_equals_numpy(cpu_target, monkeypatch, m, k, n, tail):
  """A tail of one unit of 2 rows (512), two units unrolled into one 4-row tile (508), 5 single rows (257, prime K),
  an 8-row tail of the one-vector 12 x 8 tile (264 columns), K=1, M of two tiles and a bit (14, 13; the size floor
  lowered), M a multiple of the tile (96, 300): one kernel on 8 lanes, equal to numpy on each target."""
  monkeypatch.setattr(pack, "PACK_MIN", 1)
  monkeypatch.setattr(pack, "_plans", {})
  lanes = cpu_target.simd_bytes // 4
  a, b = _empty(m, k), _empty(k, n)
  items = _plan(a, b, lanes)
  if lanes == 8:
    assert len(items) == 1 and items[0].inputs == [a, b] and items[0].alloc_nbytes is None, [si.name for si in items]
    mr = items[0].ast.arg[1]
    assert m % mr == tail, (m, mr)
  skip_unless_host_runs(cpu_target)
  an, bn = rnd(m, k), rnd(k, n)
  got = _run(items, {a: an, b: bn}, cpu_target).reshape(m, n)
  np.testing.assert_allclose(got, an.astype(np.float64) @ bn, rtol=1e-4, atol=1e-4 * np.sqrt(k) + 1e-5)

def test_a_in_place_with_an_epilogue_and_a_tail(cpu_target, monkeypatch):
  """A relu epilogue (rows can't be padded) and 260 rows (12 does not divide them: 21 tiles and an 8-row tail)."""
  monkeypatch.setattr(pack, "_plans", {})
  lanes = cpu_target.simd_bytes // 4
  a, b = _empty(260, 256), _empty(256, 264 if lanes == 8 else 272)
  items = _plan(a, b, lanes, epilogue=True)
  if lanes == 8: assert len(items) == 1 and items[0].ast.arg[1:3] == (12, 8), [si.name for si in items]
  skip_unless_host_runs(cpu_target)
  an, bn = rnd(*a.shape), rnd(*b.shape)
  got = _run(items, {a: an, b: bn}, cpu_target).reshape(a.shape[0], b.shape[1])
  np.testing.assert_allclose(got, np.maximum(an.astype(np.float64) @ bn, 0), rtol=1e-4, atol=1e-3)

def test_nothing_lands_past_the_output(cpu_target):
  """512^3 with the output buffer followed by a sentinel: the tail tile writes rows 510-511 and nothing after them."""
  from hcqrt.cpu.device import CPUDevice
  from compiler.pipeline import compile_kernel
  skip_unless_host_runs(cpu_target)
  lanes = cpu_target.simd_bytes // 4
  a, b = _empty(512, 512), _empty(512, 512)
  (si,) = _plan(a, b, lanes)
  an, bn = rnd(512, 512), rnd(512, 512)
  dev = CPUDevice(isa=cpu_target.arch)
  bufs = [dev.allocator.alloc(512 * 512 * 4 + 16384), dev.allocator.alloc(an.nbytes), dev.allocator.alloc(bn.nbytes)]
  dev.allocator.copyin(bufs[0], memoryview(np.full(512 * 512 + 4096, 7.0, np.float32)).cast("B"))
  for buf, arr in zip(bufs[1:], (an, bn)): dev.allocator.copyin(buf, memoryview(arr).cast("B"))
  ck = compile_kernel(si.ast, cpu_target, name=si.name)
  dev.program(ck.name, ck.binary)(*bufs, threads=ck.threads)
  out = np.empty(512 * 512 + 4096, np.float32)
  dev.allocator.copyout(memoryview(out).cast("B"), bufs[0])
  np.testing.assert_allclose(out[:512 * 512].reshape(512, 512), an.astype(np.float64) @ bn, rtol=1e-4, atol=1e-3)
  assert (out[512 * 512:] == 7.0).all()

GUARD_CHILD = r"""
import ctypes, mmap, sys
import numpy as np
from compiler.pipeline import compile_kernel
from compiler.target import Target
from hcqrt.cpu.device import CPUDevice
sys.path.insert(0, sys.argv[1])   # tests/, for the helpers test_pack_avx2 imports
from tests.compiler.pack.test_pack_avx2 import _empty, _plan
m, k, n = (int(x) for x in sys.argv[2:5])
dev = CPUDevice(isa="x86-64-v3")
target = Target.from_report(dev.target)
a, b = _empty(m, k), _empty(k, n)
(si,) = _plan(a, b, 8)
ck = compile_kernel(si.ast, target, name=si.name)
# A ends where an unreadable page starts: a load of any float past A's end faults
page = mmap.PAGESIZE
nb = -(-m * k * 4 // page) * page
mem = mmap.mmap(-1, nb + page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
base = ctypes.addressof(ctypes.c_char.from_buffer(mem))
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
assert libc.mprotect(base + nb, page, 0) == 0, ctypes.get_errno()
an = np.frombuffer(mem, np.float32, m * k, nb - m * k * 4).reshape(m, k)
an[:] = np.random.default_rng(1).standard_normal((m, k))
bn = np.random.default_rng(2).standard_normal((k, n)).astype(np.float32)
out = np.zeros((m, n), np.float32)
fn = dev.program(ck.name, ck.binary)._fn(3, 0)
for core in range(ck.threads): fn(out.ctypes.data, an.ctypes.data, bn.ctypes.data, core)
np.testing.assert_allclose(out, an.astype(np.float64) @ bn, rtol=1e-4, atol=1e-3)
print("ok")
"""

@pytest.mark.parametrize("m,k,n", [(512, 512, 512), (257, 263, 256)])
def test_no_load_reads_past_a(m, k, n):
  """The product of 8 lanes run with A's last float right before a page the process can't read (a child Python: a read
  past A's end faults there), equal to numpy."""
  from hcqrt.cpu.isa import cpu_isa
  if not cpu_isa("x86-64-v3").runnable: pytest.skip("this host can't run x86-64-v3 kernels")
  env = dict(os.environ, PYTHONPATH=pythonpath(ROOT))
  code = "import compiler.pack as pack; pack.PACK_MIN = 1\n" + GUARD_CHILD
  r = subprocess.run([sys.executable, "-c", code, str(ROOT / "tests"), str(m), str(k), str(n)], env=env, cwd=ROOT,
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (f"exit {r.returncode} (-11: a load past A's end faulted)", r.stdout[-2000:], r.stderr[-2000:])

@pytest.mark.parametrize("m,k,n,loops", [(264, 1024, 1024, (16, 1024, 4, 16)), (264, 1024, 1032, (129, 1024, 8)),
                                         (100, 700, 1536, (24, 700, 4, 16))])
def test_b_copy_walks_four_column_tiles_a_row(cpu_target, m, k, n, loops):
  """A B too big to read in place, on 8 lanes: its copy's loops are (tiles/4, K, 4, NR), four neighbouring lines of a
  row of B a step (compiler/pack.py PACK_B_GROUP); 129 one-vector tiles (no group of 4 divides them) keep (tiles, K,
  NR). Each equals numpy (B in its own slot, and a @ a, A and B from one buffer)."""
  lanes = cpu_target.simd_bytes // 4
  a, b = _empty(m, k), _empty(k, n)
  items = _plan(a, b, lanes)
  if lanes == 8:
    bcopy = items[-2]
    assert bcopy.inputs == [b] and bcopy.ast.src[0].arg[1].shape == loops, [si.name for si in items]
  skip_unless_host_runs(cpu_target)
  an, bn = rnd(m, k), rnd(k, n)
  np.testing.assert_allclose(_run(items, {a: an, b: bn}, cpu_target).reshape(m, n), an.astype(np.float64) @ bn, rtol=1e-4, atol=2e-3)
  if m == 100: return
  sq = _empty(k, k)
  sqn = rnd(k, k)
  np.testing.assert_allclose(_run(_plan(sq, sq, lanes), {sq: sqn}, cpu_target).reshape(k, k), sqn.astype(np.float64) @ sqn, rtol=1e-4, atol=2e-3)
