"""Tensor cores: mma.sync in the PTX interpreter (fragment layouts of the PTX ISA, warp checks, parse errors) and the
compiler's tensor-core opt (compiler/opt/tc.py): which kernels get mma.sync, and their results against numpy and the
kernel without tensor cores, on PTXEMU (and once on NV through the mock driver)."""
import os
import numpy as np
import pytest
from frontend import Tensor, dtypes
from frontend.engine import get_kernel
from compiler.pipeline import Launch
from compiler.lower import lower
from compiler.opt.heuristic import optimize
from compiler.opt.tc import tensor_cores
from compiler.target import Target
from compiler.assemble.ptx_assembler import assemble_ptx
from hcqrt.device import Device
from hcqrt.mock.ptx import PTXModule, AddressSpace, PTXError

rng = np.random.default_rng(7)

# ***** the interpreter: fragments placed by the ISA's formulas (written out here, independently of mma.py) *****
# g = laneid >> 2, t = laneid % 4; element i of a lane's fragment (registers in order, low half of a register first)
def a_pos(lane, i): g, t = lane >> 2, lane & 3; return g + 8 * (i in (2, 3, 6, 7)), 2 * t + (i & 1) + 8 * (i >= 4)
def b_pos(lane, i): g, t = lane >> 2, lane & 3; return 2 * t + (i & 1) + 8 * (i >= 2), g
def c_pos(lane, i): g, t = lane >> 2, lane & 3; return g + 8 * (i >= 2), 2 * t + (i & 1)

VARIANTS = {   # name: (K, dtype, ab type, ctype)
  "m16n8k16.row.col.f32.f16.f16.f32": (16, "f32", "f16", "f32"),
  "m16n8k16.row.col.f32.bf16.bf16.f32": (16, "f32", "bf16", "f32"),
  "m16n8k16.row.col.f16.f16.f16.f16": (16, "f16", "f16", "f16"),
  "m16n8k8.row.col.f32.f16.f16.f32": (8, "f32", "f16", "f32"),
}

def build(variant: str, body: str = "") -> str:
  """A kernel that loads each thread's A/B/C registers (raw 32-bit words from thread-major arrays), runs `body` and one
  mma, and stores D the same way."""
  K, dt, abt, ct = VARIANTS[variant]
  na, nb, nc, nd = K // 4, K // 8, 4 if ct == "f32" else 2, 4 if dt == "f32" else 2
  mt = lambda t: "f32" if t == "f32" else "b32"   # f32 accumulators in .f32 registers, f16x2 pairs in .b32 ones
  ld = lambda n, t, p, base: "\n".join(f"  ld.global.{mt(t)} %{p}{j}, [%rd{base}+{4 * j}];" for j in range(n))
  regs = lambda p, n: "{" + ", ".join(f"%{p}{j}" for j in range(n)) + "}"
  stores = "\n".join(f"  st.global.{mt(dt)} [%rd11+{4 * j}], %d{j};" for j in range(nd))
  return f""".version 7.0
.target sm_80
.address_size 64
.visible .entry mma_test(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)
{{
  .reg .b32 %a<{na}>; .reg .b32 %b<{nb}>; .reg .{mt(ct)} %c<{nc}>; .reg .{mt(dt)} %d<{nd}>;
  .reg .b32 %r<4>; .reg .b64 %rd<16>; .reg .pred %p<2>;
  ld.param.u64 %rd0, [pa]; ld.param.u64 %rd1, [pb]; ld.param.u64 %rd2, [pc]; ld.param.u64 %rd3, [pd];
  mov.u32 %r0, %tid.x; mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mad.lo.s32 %r0, %r1, %r2, %r0;
  mul.wide.u32 %rd4, %r0, {4 * na}; add.s64 %rd5, %rd0, %rd4;
  mul.wide.u32 %rd6, %r0, {4 * nb}; add.s64 %rd7, %rd1, %rd6;
  mul.wide.u32 %rd8, %r0, {4 * nc}; add.s64 %rd9, %rd2, %rd8;
  mul.wide.u32 %rd10, %r0, {4 * nd}; add.s64 %rd11, %rd3, %rd10;
{ld(na, abt, "a", 5)}
{ld(nb, abt, "b", 7)}
{ld(nc, ct, "c", 9)}
{body}
  mma.sync.aligned.{variant} {regs("d", nd)}, {regs("a", na)}, {regs("b", nb)}, {regs("c", nc)};
{stores}
SKIP:
  ret;
}}"""

def to_bits(vals: np.ndarray, t: str) -> np.ndarray:
  """(..., n) values of type t -> (..., n/2 or n) uint32 register words (two halves per word, element 2j low)."""
  if t == "f32": return np.ascontiguousarray(vals, np.float32).view(np.uint32)
  if t == "f16": return np.ascontiguousarray(vals.astype(np.float16)).view(np.uint32)
  f = np.ascontiguousarray(vals, np.float32).view(np.uint32)   # bf16: the top half of a float32 (values exact in bf16)
  return np.ascontiguousarray((f >> 16).astype(np.uint16)).view(np.uint32)

def from_bits(words: np.ndarray, t: str) -> np.ndarray:
  return words.view(np.float32) if t == "f32" else words.view(np.float16).astype(np.float32)

def run_mma(variant: str, A: np.ndarray, B: np.ndarray, C: np.ndarray, block: int = 32, body: str = "") -> np.ndarray:
  """D (warps, 16, 8) from A (warps, 16, K), B (warps, K, 8), C (warps, 16, 8): one warp per matrix set."""
  K, dt, abt, ct = VARIANTS[variant]
  W = A.shape[0]
  fa, fb, fc = np.zeros((W, 32, K // 2), np.float32), np.zeros((W, 32, K // 4), np.float32), np.zeros((W, 32, 4), np.float32)
  for lane in range(32):
    for i in range(K // 2): fa[:, lane, i] = A[(slice(None), *a_pos(lane, i))]
    for i in range(K // 4): fb[:, lane, i] = B[(slice(None), *b_pos(lane, i))]
    for i in range(4): fc[:, lane, i] = C[(slice(None), *c_pos(lane, i))]
  arrs = [to_bits(fa, abt), to_bits(fb, abt), to_bits(fc, ct), np.zeros((W, 32, 4 if dt == "f32" else 2), np.uint32)]
  mem, vas = AddressSpace(), [0x100000 * (j + 1) for j in range(4)]
  for va, arr in zip(vas, arrs): mem.map(va, arr.reshape(-1).view(np.uint8))
  PTXModule(build(variant, body)).launch("mma_test", mem, (W * 32 // block, 1, 1), (block, 1, 1), b"".join(v.to_bytes(8, "little") for v in vas))
  dvals, D = from_bits(arrs[3], dt), np.full((W, 16, 8), np.nan, np.float32)
  for lane in range(32):
    for i in range(4): D[(slice(None), *c_pos(lane, i))] = dvals[:, lane, i]
  return D

@pytest.mark.parametrize("variant", list(VARIANTS))
def test_mma_random_integers(variant):   # every element of every fragment matters; small ints keep it exact in f32
  K = VARIANTS[variant][0]
  W = 4   # two blocks of two warps: each warp multiplies its own matrices
  A, B = rng.integers(-8, 9, (W, 16, K)).astype(np.float32), rng.integers(-8, 9, (W, K, 8)).astype(np.float32)
  C = rng.integers(-64, 65, (W, 16, 8)).astype(np.float32)
  np.testing.assert_array_equal(run_mma(variant, A, B, C, block=64), A @ B + C)

def test_mma_layout_by_selection():   # A = arange picked out column by column: D[m, n] names the A element it came from
  A = np.arange(256, dtype=np.float32).reshape(1, 16, 16)
  for half in (0, 8):
    B = np.zeros((1, 16, 8), np.float32); B[0, np.arange(8) + half, np.arange(8)] = 1   # D = A[:, half:half+8]
    np.testing.assert_array_equal(run_mma("m16n8k16.row.col.f32.f16.f16.f32", A, B, np.zeros((1, 16, 8), np.float32))[0], A[0, :, half:half + 8])
  Bs = np.arange(128, dtype=np.float32).reshape(1, 16, 8)   # identity rows of A pick B's rows: D = B[0:16 selected]
  for half in (0, 8):
    Ai = np.zeros((1, 16, 16), np.float32); Ai[0, np.arange(8), np.arange(8) + half] = 1; Ai[0, np.arange(8) + 8, np.arange(8) + half] = 1
    D = run_mma("m16n8k16.row.col.f32.f16.f16.f32", Ai, Bs, np.zeros((1, 16, 8), np.float32))[0]
    np.testing.assert_array_equal(D, np.concatenate([Bs[0, half:half + 8]] * 2))
  Cs = np.arange(128, dtype=np.float32).reshape(1, 16, 8) - 64   # A = 0: D is C, element for element
  np.testing.assert_array_equal(run_mma("m16n8k16.row.col.f32.f16.f16.f32", np.zeros((1, 16, 16), np.float32), np.zeros((1, 16, 8), np.float32), Cs), Cs)

def test_mma_float_accuracy():   # f16 products are exact in f32 and summed in f32: matches a float64 reference closely
  A, B = rng.uniform(-4, 4, (2, 16, 16)).astype(np.float16), rng.uniform(-4, 4, (2, 16, 8)).astype(np.float16)
  C = rng.uniform(-4, 4, (2, 16, 8)).astype(np.float32)
  D = run_mma("m16n8k16.row.col.f32.f16.f16.f32", A.astype(np.float32), B.astype(np.float32), C)
  np.testing.assert_allclose(D, A.astype(np.float64) @ B.astype(np.float64) + C, rtol=1e-5, atol=1e-5)

def test_mma_ptx_assembles():   # the hand-built kernel is real PTX: NVIDIA's assembler takes it
  assert assemble_ptx(build("m16n8k16.row.col.f32.f16.f16.f32"), "sm_80")[:4] == b"\x7fELF"

def test_mma_partial_warp():   # 48 threads per block: the second warp has 16 lanes
  A, B, C = np.zeros((3, 16, 16), np.float32), np.zeros((3, 16, 8), np.float32), np.zeros((3, 16, 8), np.float32)
  with pytest.raises(PTXError, match=r"line \d+: mma\.sync.*a warp of 16 threads.*all 32 lanes"):
    run_mma("m16n8k16.row.col.f32.f16.f16.f32", A[:3], B, C, block=48)

def test_mma_diverged_lanes():   # lanes 0-15 branch past the mma: the other half cannot run it alone
  skip = "  mov.u32 %r3, %laneid;\n  setp.lt.u32 %p1, %r3, 16;\n  @%p1 bra SKIP;"
  z = lambda *s: np.zeros(s, np.float32)
  with pytest.raises(PTXError, match=r"executed by 16 of the 32 lanes of warp 0.*diverged or exited"):
    run_mma("m16n8k16.row.col.f32.f16.f16.f32", z(1, 16, 16), z(1, 16, 8), z(1, 16, 8), body=skip)

@pytest.mark.parametrize("bad, msg", [
  ("{%d0, %d1, %d2}, {%a0, %a1, %a2, %a3}, {%b0, %b1}, {%c0, %c1, %c2, %c3}", "operand D needs 4 registers, got 3"),
  ("{%d0, %d1, %d2, %d3}, {%a0, %a1, %a2}, {%b0, %b1}, {%c0, %c1, %c2, %c3}", "operand A needs 4 registers, got 3"),
  ("{%d0, %d1, %d2, %d3}, {%a0, %a1, %a2, %a3}, {%b0}, {%c0, %c1, %c2, %c3}", "operand B needs 2 registers, got 1"),
  ("{%d0, %d1, %d2, %d3}, {%a0, %a1, %a2, %a3}, %b0, {%c0, %c1, %c2, %c3}", "operand B must be a vector"),
  ("{%d0, %d1, %d2, %d3}, {%a0, %a1, %a2, %a3}, {%b0, %b1}", "takes 4 operands"),
])
def test_mma_register_counts(bad, msg):   # a parse error naming the instruction, before anything runs
  src = build("m16n8k16.row.col.f32.f16.f16.f32")
  line = next(l for l in src.splitlines() if "mma.sync" in l)
  src = src.replace(line, "  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 " + bad + ";")
  with pytest.raises(PTXError, match=r"line \d+: mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32.*" + msg):
    PTXModule(src)

@pytest.mark.parametrize("variant", ["m16n8k16.row.row.f32.f16.f16.f32", "m16n8k32.row.col.f32.f16.f16.f32", "m16n8k16.row.col.f16.bf16.bf16.f32"])
def test_mma_unsupported_variant(variant):
  src = build("m16n8k16.row.col.f32.f16.f16.f32").replace("m16n8k16.row.col.f32.f16.f16.f32", variant)
  with pytest.raises(PTXError, match="mma.sync.aligned." + variant.replace(".", r"\.")):
    PTXModule(src)

# ***** the compiler: which kernels get tensor cores *****
def kernel(fn, *arrays, device="PTXEMU"):
  si = fn(*[Tensor(a, device=device) for a in arrays]).schedule()[-1]
  return si, get_kernel(si, device)

def h(*shape): return rng.uniform(-1, 1, shape).astype(np.float16)
def f32(*shape): return rng.uniform(-1, 1, shape).astype(np.float32)

MMA = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"

def test_tc_ptx_for_half_matmul():
  _, ck = kernel(lambda a, b: a @ b, h(32, 48), h(48, 64))
  assert MMA in ck.src and ck.src.count("mma.sync") == 1   # one mma per k-step, in the loop over k / 16
  assert ck.launch == Launch(global_size=(1, 2, 2), local_size=(32, 4, 1))   # x = the 32 lanes of a warp, y = tiles along N
  assert "ld.global.v2.b16" in ck.src   # A's neighbouring k elements arrive as one 2-wide load

@pytest.mark.parametrize("fn, arrays", [
  (lambda a, b: a @ b, [f32(32, 32), f32(32, 32)]),                        # float32 inputs: tensor cores would round them
  (lambda a, b: a.float() @ b, [h(32, 32), f32(32, 32)]),                  # one float32 operand
  (lambda a, b: a @ b, [h(24, 16), h(16, 24)]),                            # neither M nor N a multiple of 16
  (lambda a, b: a @ b, [h(32, 24), h(24, 32)]),                            # K not a multiple of 16
  (lambda a, b: (a.float() * b.float()).sum(1), [h(32, 32), h(32, 32)]),   # a product of two rows: no matmul
  (lambda a, b: a + b, [h(32, 32), h(32, 32)]),                            # elementwise
  (lambda a, b: a.cast(dtypes.int32) @ b.cast(dtypes.int32), [h(32, 32), h(32, 32)]),   # integer matmul
])
def test_tc_ineligible(fn, arrays):
  _, ck = kernel(fn, *arrays)
  assert "mma.sync" not in ck.src

def Arch(arch) -> Target: return Target("PTXEMU", "ptx", arch=arch or "", gpu=True)

def lowered_matmul(M=32, N=16, K=32):
  si = (Tensor(h(M, K), device="PTXEMU") @ Tensor(h(K, N), device="PTXEMU")).schedule()[-1]
  return lower(si.ast, si.name)

def test_tc_needs_sm80_and_obeys_tc0(monkeypatch):
  assert tensor_cores(lowered_matmul(), Arch("sm_75")) is None and tensor_cores(lowered_matmul(), Arch(None)) is None
  assert tensor_cores(lowered_matmul(), Arch("sm_80")).applied_opts == [("TC", "m16n8k16", 32, 16, 32)]
  assert optimize(lowered_matmul(), Arch("sm_90a")).applied_opts[0][0] == "TC"
  monkeypatch.setenv("TC", "0")
  assert tensor_cores(lowered_matmul(), Arch("sm_90")) is None
  assert all(o[0] != "TC" for o in optimize(lowered_matmul(), Arch("sm_90")).applied_opts)   # the usual GPU opts instead

# ***** results on PTXEMU: against numpy, and against the same kernel without tensor cores *****
def run(fn, arrays, device="PTXEMU"):
  return fn(*[Tensor(a, device=device) for a in arrays]).numpy()

CASES = [   # (name, fn, shapes)
  ("16x16x16", lambda a, b: a @ b, [(16, 16), (16, 16)]),
  ("32x64x48", lambda a, b: a @ b, [(32, 48), (48, 64)]),
  ("64x8x32", lambda a, b: a @ b, [(64, 32), (32, 8)]),
  ("8x32x16 rows on N", lambda a, b: a @ b, [(8, 16), (16, 32)]),      # M = 8: the loads swap roles, A is b's columns
  ("batched", lambda a, b: a @ b, [(3, 16, 32), (3, 32, 8)]),
  ("b transposed", lambda a, b: a @ b.T, [(16, 32), (24, 32)]),         # B's k neighbours are adjacent: 2-wide loads
  ("f32 inputs cast", lambda a, b: a.float() @ b.float(), [(32, 16), (16, 16)]),
  ("epilogue", lambda a, b, c: ((a.float() @ b.float()) + c).relu(), [(16, 32), (32, 16), (16,)]),
]

@pytest.mark.parametrize("name, fn, shapes", CASES, ids=[c[0] for c in CASES])
def test_tc_results(name, fn, shapes, monkeypatch):
  arrays = [h(*s) if len(s) > 1 else f32(*s) for s in shapes]
  assert "mma.sync" in kernel(fn, *arrays)[1].src, name
  got = run(fn, arrays)
  tol = 2e-3 if got.dtype == np.float16 else 1e-5   # half outputs are rounded to 11 bits; float ones only sum in f32
  np.testing.assert_allclose(got.astype(np.float64), _numpy_ref(name, [a.astype(np.float64) for a in arrays]), rtol=tol, atol=tol)
  monkeypatch.setenv("TC", "0")   # the same kernel, no tensor cores (TC is part of the engine's kernel cache key)
  assert "mma.sync" not in kernel(fn, *arrays)[1].src
  np.testing.assert_allclose(got.astype(np.float64), run(fn, arrays).astype(np.float64), rtol=tol, atol=tol)

def _numpy_ref(name: str, a: list) -> np.ndarray:
  if name == "b transposed": return a[0] @ a[1].T
  if name == "epilogue": return np.maximum(a[0] @ a[1] + a[2], 0)
  return a[0] @ a[1]

def test_tc_on_nv_mock():   # NV through the mock driver runs the same interpreter behind a real driver ABI
  old = os.environ.get("MOCKGPU")
  os.environ["MOCKGPU"] = "1"
  try: Device["NV"]
  finally:
    if old is None: del os.environ["MOCKGPU"]
    else: os.environ["MOCKGPU"] = old
  a, b = h(32, 16), h(16, 24)
  _, ck = kernel(lambda x, y: x.float() @ y.float(), a, b, device="NV")
  assert MMA in ck.src
  np.testing.assert_allclose(run(lambda x, y: x.float() @ y.float(), [a, b], device="NV"), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)
