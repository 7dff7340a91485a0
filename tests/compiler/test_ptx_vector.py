"""Vector loads/stores in the PTX path: compiler/opt/gpu.py upcasts the innermost output loop into lanes, the renderer
emits ld/st.global.v2/v4 only where the alignment is proven and everything else lane by lane. Checked: the PTX text
(vectors where they are legal, none on odd sizes or offset views), the proof itself against brute force, the allocators'
alignment, every vector access's real alignment at run time, and PTXEMU results equal to the CPU backend."""
import itertools
import numpy as np
import pytest
from frontend import Tensor, dtypes
from frontend.engine import get_kernel
from compiler.pipeline import Launch
from compiler.render_ptx import render_ptx, vector_chunk, BUFFER_ALIGNMENT
from compiler.opt.gpu import optimize_gpu
from frontend.devices import target_of
from compiler.lower import lower, LoweredKernel
from compiler.uop import UOp, Ops, substitute, simplify
from compiler.assemble.ptx_assembler import assemble_ptx
from hcqrt.device import Device
from hcqrt.mock.ptx.memory import AddressSpace

rng = np.random.default_rng(44)
SIZES = [1, 7, 33, 1000, 1024]

@pytest.fixture(autouse=True)
def vector_accesses(monkeypatch):
  """Counts the interpreter's v2/v4 accesses and fails on one not aligned to its whole size (a GPU faults there; the
  interpreter itself only checks the element size)."""
  seen = {"n": 0}
  gather, scatter = AddressSpace.gather, AddressSpace.scatter
  def check(addrs, dt, vec, what):
    if vec > 1:
      seen["n"] += 1
      nb, a = np.dtype(dt).itemsize * vec, np.asarray(addrs, np.uint64)
      bad = a[a % np.uint64(nb) != 0]
      assert bad.size == 0, f"{what}: {nb}-byte vector access at misaligned address {int(bad[0]):#x}"
  def g(self, addrs, dt, vec=1, what="load"): check(addrs, dt, vec, what); return gather(self, addrs, dt, vec, what)
  def s(self, addrs, dt, values, vec=1, what="store"): check(addrs, dt, vec, what); return scatter(self, addrs, dt, values, vec, what)
  monkeypatch.setattr(AddressSpace, "gather", g)
  monkeypatch.setattr(AddressSpace, "scatter", s)
  return seen

def f32(*shape): return rng.uniform(-2, 2, shape).astype(np.float32)

def ptx_of(fn, *arrays) -> tuple[str, Launch]:
  """PTX and launch dims of the last kernel of fn on PTXEMU, compiled the way the engine does it (opts included)."""
  si = fn(*[Tensor(a, device="PTXEMU") for a in arrays]).schedule()[-1]
  ck = get_kernel(si, "PTXEMU")
  return ck.src, ck.launch

from tests.compiler.test_ptx_render import same   # noqa: E402 (after the helpers it needs); fn on PTXEMU equals fn on the CPU

# ***** the PTX text: vectors where the alignment is proven, scalars elsewhere *****
def test_elementwise_vectors_and_launch():
  src, launch = ptx_of(lambda a, b: (a * b + a).relu(), f32(64, 1024), f32(64, 1024))
  assert "ld.global.v4.f32" in src and "st.global.v4.f32" in src
  assert launch == Launch(global_size=(2, 64, 1), local_size=(128, 1, 1))   # 1024 columns / 4 lanes = 256 threads per row
  assert "ld.global.f32" not in src and "st.global.f32" not in src

@pytest.mark.parametrize("n", [2, 4, 12])
def test_whole_kernel_in_one_thread(n, vector_accesses):   # n <= 4: the loop disappears into the lanes of one thread
  src, launch = ptx_of(lambda a: a * 2 + 1, f32(n))
  assert launch.local_size == ((1, 1, 1) if n <= 4 else (3, 1, 1)) and f"ld.global.v{min(n, 4)}.f32" in src
  same(lambda a: a * 2 + 1, f32(n))
  assert vector_accesses["n"] > 0

@pytest.mark.parametrize("shape", [(3, 33), (7,), (5, 999)])
def test_odd_sizes_stay_scalar(shape):
  src, _ = ptx_of(lambda a: a * 2 + 1, f32(*shape))
  assert ".v2" not in src and ".v4" not in src and "ld.global.f32" in src

def test_two_lanes_when_four_do_not_divide():
  src, _ = ptx_of(lambda a: a * 2, f32(3, 1022))   # 1022 = 2 * 511: two lanes per thread, rows start at even elements
  assert "ld.global.v2.f32" in src and "st.global.v2.f32" in src and ".v4" not in src

def test_offset_views():
  src, _ = ptx_of(lambda a: a[:, 1:] * 2, f32(8, 1025))   # loads at 1025*i + 4*j + 1: never aligned
  assert "ld.global.v" not in src and "st.global.v4.f32" in src
  src, _ = ptx_of(lambda a: a[:, 2:] * 2, f32(8, 1026))   # loads at 1026*i + 4*j + 2: 8-byte aligned only
  assert "ld.global.v2.f32" in src and "ld.global.v4" not in src and "st.global.v4.f32" in src
  src, _ = ptx_of(lambda a: a.flip(1) + 1, f32(4, 1024))  # reversed lanes: index falls by one per lane
  assert "ld.global.v" not in src and "st.global.v4.f32" in src

def test_matmul_vector_columns():
  src, _ = ptx_of(lambda a, b: a @ b, f32(64, 32), f32(32, 64))
  assert "ld.global.v4.f32" in src and "st.global.v4.f32" in src   # 4 columns of B per load, A's value shared by the lanes

def test_buffer_alignment_is_respected():
  si = (Tensor(f32(16, 64), device="PTXEMU") + 1).schedule()[-1]
  k = optimize_gpu(lower(si.ast, si.name), target_of("PTXEMU"))
  for align, has in ((4, ()), (8, (".v2",)), (16, (".v4",)), (256, (".v4",))):
    src, _ = render_ptx(k, "sm_90", buffer_alignment=align)
    assert [v for v in (".v2", ".v4") if v in src] == list(has), align

def test_alignment_proof_against_brute_force():
  """vector_chunk claims c lanes only if every value the index takes is a multiple of c."""
  r0 = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 5),), (0, "global"))
  r1 = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 6),), (1, "global"))
  r2 = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 3),), (2, "reduce"))
  claimed = 0
  for a, b, c, off in itertools.product((1, 2, 4, 6, 8), (2, 4, 12), (0, 1, 4), (0, 1, 2, 3, 4)):
    idx = r0 * a + r1 * b + r2 * c + off
    for exprs in (idx, (idx // 2) * 4, (r1 * b + off) % 8):
      ch = vector_chunk(exprs, dtypes.float32, 4)
      vals = {simplify(substitute(exprs, {r0: UOp.const(dtypes.int32, i), r1: UOp.const(dtypes.int32, j), r2: UOp.const(dtypes.int32, k)})).arg
              for i in range(5) for j in range(6) for k in range(3)}
      assert all(v % ch == 0 for v in vals), (exprs, ch)
      claimed += ch > 1
  assert claimed > 50   # the proof is not vacuous: many of these indices are aligned and found so

def test_allocators_align_buffers():
  ptx = Device["PTXEMU"].allocator
  bufs = [ptx.alloc(n) for n in (0, 1, 3, 17, 1000, 4097)]
  assert all(b.va % BUFFER_ALIGNMENT == 0 for b in bufs)
  for b in bufs: ptx.free(b)
  from hcqrt import syscalls
  from hcqrt.mock.nv import MockNV
  from hcqrt.nv.device import NVDevice
  with syscalls.installed(MockNV()):
    nv = NVDevice("NV")
    bufs = [nv.allocator.alloc(n) for n in (1, 3, 4097, 3 << 20)]
    assert all(b.va % BUFFER_ALIGNMENT == 0 for b in bufs)

# ***** every dtype through vector loads and stores (hand-built copy kernels, launched on PTXEMU) *****
COPY_DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.float16, np.int32, np.uint32, np.float32, np.int64, np.float64]

def copy_kernel(dt, n: int, off: int, gated: bool) -> LoweredKernel:
  """out[4j..4j+3] = in[4j+off..4j+off+3] as one 4-lane LOAD and STORE (gated: rows j >= n/8 read zeros)."""
  ro = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n // 4),), (0, "global"))
  out, inp = UOp(Ops.DEFINE_GLOBAL, dt, (), 0), UOp(Ops.DEFINE_GLOBAL, dt, (), 1)
  gate = (ro.lt(n // 8),) if gated else ()
  ld = UOp(Ops.LOAD, dt.vec(4), (inp, ro * 4 + off) + gate)
  return LoweredKernel(f"copy_{dt.name}_{off}_{int(gated)}", UOp(Ops.SINK, None, (UOp(Ops.STORE, None, (out, ro * 4, ld)),)), [dt, dt], [ro])

@pytest.mark.parametrize("npdt", COPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_vector_copy_every_dtype(npdt, vector_accesses):
  dt, n, dev = dtypes.from_np(npdt), 64, Device["PTXEMU"]
  x = (rng.random(n + 4) < 0.5) if npdt == np.bool_ else rng.integers(-100, 100, n + 4).astype(npdt)
  width = min(4, 16 // dt.itemsize)
  for off, gated in ((0, False), (0, True), (width, False), (1, False)):
    src, dims = render_ptx(copy_kernel(dt, n, off, gated), "sm_90")
    mt = {1: "8", 2: "16", 4: "32", 8: "64"}[dt.itemsize]
    if off % width == 0: assert f"ld.global.v{width}." in src and f"st.global.v{width}." in src and mt in src
    else: assert "ld.global.v" not in src and f"st.global.v{width}." in src
    name = src.split(".entry ")[1].split("(")[0]
    prog = dev.program(name, assemble_ptx(src, "sm_90"))
    bi, bo = dev.allocator.alloc(x.nbytes), dev.allocator.alloc(n * x.itemsize)
    dev.allocator.copyin(bi, memoryview(np.ascontiguousarray(x).view(np.uint8)))
    before = vector_accesses["n"]
    prog(bo, bi, **dims.kwargs())
    out = np.empty(n, npdt)
    dev.allocator.copyout(memoryview(out.view(np.uint8)), bo)
    want = x[off:off + n].copy()
    if gated: want[n // 2:] = 0
    np.testing.assert_array_equal(out, want)
    assert vector_accesses["n"] > before   # at least the stores were vectors
    dev.allocator.free(bi); dev.allocator.free(bo)

# ***** results equal the CPU backend, on odd and vector-friendly sizes and views *****
ELEMENTWISE = {
  "fma_relu": lambda a, b: (a * b + a).relu(), "exp_log": lambda a, b: (a.exp() + b.abs()).log(),
  "where": lambda a, b: (a > b).where(a, b * 2), "div_sqrt": lambda a, b: a / (b.abs().sqrt() + 1),
  "half": lambda a, b: (a.half() * b.half()).float(), "double": lambda a, b: a.double() * b.double() + 1,
  "broadcast": lambda a, b: a * b[:1], "int": lambda a, b: (a * 10).cast(dtypes.int32) + (b * 10).cast(dtypes.int32),
}
REDUCE = {
  "sum0": lambda a: a.sum(0), "max0": lambda a: a.max(0), "sum1": lambda a: a.sum(1), "mean0_sub": lambda a: a - a.mean(0),
  "softmax1": lambda a: a.softmax(1), "softmax0": lambda a: a.softmax(0), "argmax0": lambda a: a.argmax(0),
}
VIEWS = {
  "slice1": lambda a: a[:, 1:] * 2, "slice2": lambda a: a[:, 2:] + a[:, :-2], "flip": lambda a: a.flip(1) + 1,
  "stride": lambda a: a[:, ::2] + 0, "pad": lambda a: a.pad(((0, 0), (1, 3))) - 1, "permute": lambda a: a.permute(1, 0) * 3,
  "expand": lambda a: a[:1].expand(4, a.shape[1]) + a[:4],
}

@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_equals_cpu(name, n, vector_accesses):
  same(ELEMENTWISE[name], f32(3, n), f32(3, n), rtol=2e-3 if name == "half" else 2e-6)
  if name == "fma_relu": assert (vector_accesses["n"] > 0) == (n % 2 == 0)   # vectors exactly when the lanes divide n

@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", list(REDUCE))
def test_reduce_equals_cpu(name, n): same(REDUCE[name], f32(5, n), rtol=2e-5, atol=1e-5)

@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", list(VIEWS))
def test_views_equal_cpu(name, n): same(VIEWS[name], f32(4, n + 2))

@pytest.mark.parametrize("n", SIZES)
def test_matmul_equals_cpu(n, vector_accesses):
  # few outputs: grouped reduction, 4 lanes each; n-term sums in another order than the CPU differ by ~n*eps*|terms|
  same(lambda a, b: a @ b, f32(4, n), f32(n, 8), rtol=1e-5, atol=1e-4)
  same(lambda a, b: a @ b, f32(n, 6), f32(6, 12), rtol=1e-5, atol=1e-5)  # one thread per 4 outputs
  assert vector_accesses["n"] > 0
  same(lambda a, b: a.permute(1, 0) @ b[::2], f32(9, n), f32(18, 4), rtol=1e-5, atol=1e-5)
