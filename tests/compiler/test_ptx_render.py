"""The PTX round trip: every op of the foundation list runs on PTXEMU (render_ptx -> NVIDIA's assembler for sm_90
-> our cubin loader -> the PTX interpreter) and must equal the CPU backend (C renderer) on odd sizes and views.
Also: the same kernels assemble for sm_80 and sm_89, launch geometry (guards, >3 output dims, huge y), and the
IEEE special values of the inline division/sqrt sequences."""
import numpy as np
import pytest
from compiler.launch import Launch
from frontend import Tensor, dtypes
from frontend.engine import _kernel_cache
from compiler.render_ptx import render_ptx, PTX_ISA
from compiler.assemble.ptx_assembler import assemble_ptx
from compiler.lower import lower
from hcqrt.nv.cubin import load_cubin
from ioctl_defs.nv.classes import ARCHS
from hcqrt.device import Device

rng = np.random.default_rng(4)
SIZES = [1, 7, 33, 1000]

def f32(*shape, lo=-2.0, hi=2.0): return rng.uniform(lo, hi, shape).astype(np.float32)
def ints(*shape, dt=np.int32, lo=-50, hi=50): return rng.integers(lo, hi, shape, endpoint=True).astype(dt)

def run(fn, arrays, device):
  prev = Device.DEFAULT
  Device.DEFAULT = device   # also where Python scalars and creation ops inside fn land
  try: return fn(*[Tensor(a, device=device) for a in arrays]).numpy()
  finally: Device.DEFAULT = prev

def same(fn, *arrays, rtol=2e-6, atol=1e-6, device="PTXEMU"):
  """fn on `device` (PTXEMU; test_amdemu passes AMDEMU) equals fn on CPU (floats up to rounding, ints and bools exactly,
  NaN where NaN)."""
  cpu, emu = run(fn, arrays, "CPU"), run(fn, arrays, device)
  assert cpu.dtype == emu.dtype and cpu.shape == emu.shape, (cpu.dtype, emu.dtype, cpu.shape, emu.shape)
  if cpu.dtype.kind == "f": np.testing.assert_allclose(emu.astype(np.float64), cpu.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
  else: np.testing.assert_array_equal(emu, cpu)

# ***** one parametrised pass over the foundation ops, each on sizes 1, 7, 33, 1000 *****
UNARY = {
  "neg": lambda x: -x, "exp": lambda x: x.exp(), "log": lambda x: x.abs().log(), "sin": lambda x: (x * 40).sin(),
  "sqrt": lambda x: x.abs().sqrt(), "recip": lambda x: x.reciprocal(), "relu": lambda x: x.relu(), "sigmoid": lambda x: x.sigmoid(),
  "tanh": lambda x: x.tanh(), "floor": lambda x: (x * 3).floor(), "trunc": lambda x: (x * 3).trunc(), "gelu": lambda x: x.gelu(),
  "to_int": lambda x: (x * 20).cast(dtypes.int32), "to_half": lambda x: x.half(), "to_double": lambda x: x.double() * 3,
  "to_bool": lambda x: (x * 2).trunc().bool(), "to_uint8": lambda x: (x * 50).cast(dtypes.uint8), "isnan": lambda x: (x.log()).isnan(),
}
BINARY = {
  "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
  "max": lambda a, b: a.maximum(b), "min": lambda a, b: a.minimum(b), "lt": lambda a, b: a < b, "eq": lambda a, b: a == b,
  "where": lambda a, b: (a > b).where(a, b * 2), "pow": lambda a, b: a.abs() ** b, "mulacc": lambda a, b: a * b + a,
}
BINARY_TOL: dict[str, dict] = {}
INT_BINARY = {
  "iadd": lambda a, b: a + b, "imul": lambda a, b: a * b, "idiv": lambda a, b: a // (b.abs() + 1), "imod": lambda a, b: a % (b.abs() + 1),
  "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b, "imax": lambda a, b: a.maximum(b),
  "shl": lambda a, b: a << 3, "shr": lambda a, b: a >> 2, "ilt": lambda a, b: a < b, "ifloat": lambda a, b: a.float() / 3,
}
REDUCE = {
  "sum": lambda x: x.sum(), "sum0": lambda x: x.sum(0), "max1": lambda x: x.max(1), "min": lambda x: x.min(0), "mean": lambda x: x.mean(1),
  "prod": lambda x: (x * 0.1 + 1).prod(1), "argmax": lambda x: x.argmax(1), "softmax": lambda x: x.softmax(1),
  "log_softmax": lambda x: x.log_softmax(0), "std": lambda x: x.std(1), "int_sum": lambda x: (x * 10).cast(dtypes.int32).sum(1),
  "any": lambda x: (x > 1.9).any(1), "cumsum": lambda x: x.cumsum(1),
}
MOVEMENT = {
  "permute": lambda x: x.permute(1, 0) + 1, "flip": lambda x: x.flip(0) * 2, "stride": lambda x: x[::2, ::-3] + 0,
  "pad": lambda x: x.pad(((1, 2), (0, 3))) - 1, "expand": lambda x: x[:, :1].expand(x.shape[0], 5) + x[:, :1],
  "cat": lambda x: x.cat(x * 2, dim=1), "repeat": lambda x: x.repeat(2, 1) + 0, "reshape": lambda x: x.permute(1, 0).reshape(-1) + 0,
  "shrink_view": lambda x: x.permute(1, 0)[1:, :].sum(0),
}

@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name, n): same(UNARY[name], f32(n, 3))

@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary(name, n): same(BINARY[name], f32(3, n), f32(1, n) if n % 2 else f32(3, n), **BINARY_TOL.get(name, {}))

@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", list(INT_BINARY))
def test_int_binary(name, n): same(INT_BINARY[name], ints(n, 2), ints(n, 2))

@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", list(REDUCE))
def test_reduce(name, n):   # the CPU sums in vector lanes (another order): allow for f32 rounding of long sums
  same(REDUCE[name], f32(5, n), rtol=2e-5, atol=1e-5 if name != "cumsum" else 1e-4)

@pytest.mark.parametrize("n", [7, 33])
@pytest.mark.parametrize("name", list(MOVEMENT))
def test_movement(name, n): same(MOVEMENT[name], f32(n, 9))

@pytest.mark.parametrize("shapes", [((7, 33), (33, 5)), ((1, 1000), (1000, 1)), ((33, 7), (7, 33))])
def test_matmul(shapes): same(lambda a, b: a @ b, f32(*shapes[0]), f32(*shapes[1]), rtol=1e-5, atol=1e-5)

def test_matmul_transposed_view(): same(lambda a, b: a.permute(1, 0) @ b[::2], f32(33, 7), f32(66, 5), rtol=1e-5, atol=1e-5)

def test_indexing():
  idx = rng.integers(0, 33, (7, 4)).astype(np.int32)
  same(lambda x, i: x.gather(1, i), f32(7, 33), idx)
  same(lambda x, i: x[i[:, 0]], f32(33, 5), idx)   # tensor index (one-hot reduce)
  same(lambda i: i.one_hot(33).sum(0), idx[:, 0])

# ***** dtypes: every dtype of the foundation list through loads, stores, arithmetic and casts *****
ALL = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.float16, np.float32, np.float64]

def sample(dt, n=33):
  if dt == np.bool_: return rng.random(n) < 0.5
  if np.dtype(dt).kind in "iu":
    info = np.iinfo(dt); lo, hi = max(info.min, -(1 << 40)), min(info.max, 1 << 40)
    return np.concatenate([rng.integers(lo, hi, n - 4, endpoint=True).astype(dt), np.array([info.min, info.max, 0, 1], dt)])
  return np.concatenate([rng.uniform(-300, 300, n - 4), [0.0, -0.0, 2.5, -3.5]]).astype(dt)

@pytest.mark.parametrize("src", ALL, ids=lambda d: np.dtype(d).name)
def test_casts_from(src):
  x = sample(src)
  for dst in ALL:
    if np.dtype(src).kind == "f" and np.dtype(dst).kind in "iu" and dst != np.bool_:
      # float -> int is only defined (in C) when the value fits: keep inputs in range of the destination
      info = np.iinfo(dst); x2 = np.clip(x, max(info.min, -1e4), min(info.max, 1e4)).astype(src)
      same(lambda t: t.cast(dtypes.from_np(dst)), x2)
    else: same(lambda t: t.cast(dtypes.from_np(dst)), x)

@pytest.mark.parametrize("dt", [d for d in ALL if d != np.bool_], ids=lambda d: np.dtype(d).name)
def test_dtype_arith(dt):
  a, b = sample(dt), sample(dt)
  rtol = 2e-3 if dt == np.float16 else 1e-6
  same(lambda x, y: x + y, a, b, rtol=rtol); same(lambda x, y: x * y, a, b, rtol=rtol)
  same(lambda x, y: x.maximum(y), a, b); same(lambda x, y: x < y, a, b); same(lambda x, y: (x == y).where(x, y), a, b)
  same(lambda x: x.sum(), a, rtol=rtol, atol=1e-3)
  if np.dtype(dt).kind in "iu":
    b = np.where(b == 0, 3, b).astype(dt)
    if np.dtype(dt).kind == "i": b = np.where(b == -1, 3, b).astype(dt)   # min // -1 overflows (undefined in C)
    same(lambda x, y: x // y, a, b); same(lambda x, y: x % y, a, b); same(lambda x, y: x ^ y, a, b)
  else: same(lambda x, y: x / y, a, b, rtol=rtol); same(lambda x: x.abs().sqrt(), a, rtol=rtol); same(lambda x: (x / 100).exp(), a, rtol=max(rtol, 1e-6))

def test_bool_ops():
  a, b = sample(np.bool_), sample(np.bool_)
  for fn in (lambda x, y: x & y, lambda x, y: x | y, lambda x, y: x ^ y, lambda x, y: x < y, lambda x, y: x != y,
             lambda x, y: x.logical_not(), lambda x, y: x.where(y, x.logical_not()), lambda x, y: x.maximum(y), lambda x, y: x.sum()):
    same(fn, a, b)

def test_bitcast():
  same(lambda x: x.bitcast(dtypes.int32), f32(33)); same(lambda x: x.bitcast(dtypes.float32), ints(33, lo=0, hi=1 << 30))
  same(lambda x: x.bitcast(dtypes.int16), f32(33).astype(np.float16)); same(lambda x: x.bitcast(dtypes.float16), ints(33, dt=np.uint16, lo=0, hi=30000))

# ***** numerics of the inline sequences: IEEE special values, exactness, large-argument sin *****
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 3.0, 1e-30, 1e30, 3e38, -3e38, 1e-40, np.inf, -np.inf, np.nan, 6.0, 7.0, 0.1], np.float32)

@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_special_values(dt):
  a = SPECIAL.astype(dt)
  b = np.roll(a, 5)
  for fn in (lambda x, y: x / y, lambda x, y: x.reciprocal(), lambda x, y: x.sqrt(), lambda x, y: x.maximum(y), lambda x, y: x < y,
             lambda x, y: x != y, lambda x, y: (x / y).floor(), lambda x, y: x.cast(dtypes.bool)):
    same(fn, a, b, rtol=0, atol=0)   # division, reciprocal and sqrt are correctly rounded: bit-equal to the CPU
  same(lambda x: x.exp2(), a, rtol=1e-6); same(lambda x: x.log2(), a, rtol=1e-6)

def test_sin_large_arguments():
  x = np.concatenate([np.linspace(-1e4, 1e4, 999), [np.inf, -np.inf, np.nan]]).astype(np.float32)
  same(lambda t: t.sin(), x, rtol=1e-4, atol=2e-6)

def test_int64_division():
  a = np.array([7, -7, 7, -7, 2**62 + 12345, -(2**63), 2**63 - 1, 0, 5], np.int64)
  b = np.array([2, 2, -2, -2, 987654321, 3, -1000000007, 9, 5], np.int64)
  same(lambda x, y: x // y, a, b); same(lambda x, y: x % y, a, b)
  same(lambda x, y: x // y, a.view(np.uint64), b.view(np.uint64)); same(lambda x, y: x % y, a.view(np.uint64), b.view(np.uint64))

def test_small_int_wraparound():
  for dt in (np.int8, np.uint8, np.int16, np.uint16):
    info = np.iinfo(dt); a = np.array([info.max, info.min, info.max // 2 + 7, 3], dt)
    same(lambda x: (x + x) // 3, a); same(lambda x: (x * 3 + 1).cast(dtypes.int32), a); same(lambda x: -x, a)

# ***** launch geometry *****
def _kernel(t: Tensor):
  si = t.schedule()[-1]
  return lower(si.ast, si.name)

def test_geometry_guard_and_dims():
  k = _kernel(Tensor(f32(1000)) * 2)
  _, dims = render_ptx(k, "sm_90")
  assert dims == Launch(global_size=(8, 1, 1), local_size=(128, 1, 1))   # 1000 = 7*128 + 104: guarded last block
  k = _kernel(Tensor(f32(7, 5)).permute(1, 0) + 1)
  src, dims = render_ptx(k, "sm_90")
  assert dims == Launch(global_size=(1, 1, 1), local_size=(7, 5, 1)) and "bra $Lexit" not in src

def test_many_dims_and_huge_y():
  same(lambda x: x.permute(4, 2, 0, 3, 1) * 2, f32(3, 5, 2, 7, 4))      # 5 output loops: z merges three
  same(lambda x: x.permute(3, 1, 0, 2).sum(3), f32(3, 5, 7, 4))
  x = f32(70000, 3)
  k = _kernel(Tensor(x).permute(1, 0) + 1)
  _, dims = render_ptx(k, "sm_90")
  assert dims.global_size[1] <= 65535 and dims.global_size[2] <= 65535
  same(lambda t: t.permute(1, 0) + 1, x)

# ***** every kernel rendered above also assembles and loads for the other archs *****
def test_other_archs_assemble():
  seen = 0
  for key, ck in list(_kernel_cache.items()):
    if key[1].device != "PTXEMU": continue   # key: (ast, target, opts settings...)
    for arch in ("sm_80", "sm_89"):
      src = ck.src.replace(".target sm_90", f".target {arch}").replace(f".version {PTX_ISA['sm_90']}", f".version {PTX_ISA[arch]}")
      img = load_cubin(assemble_ptx(src, arch))
      assert ck.name in img.kernels and img.arch == int(arch[3:])
    seen += 1
  assert seen >= 1 or pytest.fail("no PTXEMU kernels were compiled before this test")
  k = _kernel((Tensor(f32(33, 7)).exp() / 3).sum(1))
  for arch in ("sm_80", "sm_89", "sm_90"):
    src, _ = render_ptx(k, arch)
    assert f".target {arch}" in src and k.name in load_cubin(assemble_ptx(src, arch)).kernels

# ***** grouped reductions: few outputs, long loops -> a block of lanes per output, combined in shared memory *****
@pytest.mark.parametrize("dt", [np.float32, np.float16, np.float64, np.int32, np.int64, np.uint8])
def test_grouped_reduction(dt):
  x = sample(dt, 3 * 700).reshape(3, 700)
  if np.dtype(dt).kind == "f": x = (x / 300).astype(dt)
  rtol = 2e-2 if dt == np.float16 else 2e-5
  same(lambda t: t.sum(1), x, rtol=rtol, atol=1e-3); same(lambda t: t.max(1), x); same(lambda t: t.min(0), x)
  same(lambda t: t.sum(), x, rtol=rtol, atol=1e-3)

def test_grouped_geometry_and_full_sum():
  k = _kernel(Tensor(f32(5, 1000)).sum(1))
  src, dims = render_ptx(k, "sm_90")
  assert dims == Launch(global_size=(5, 1, 1), local_size=(128, 1, 1)) and "bar.sync" in src and ".shared" in src
  k = _kernel(Tensor(f32(5000, 40)).sum(1))   # many outputs, short loops: one thread per output
  src, dims = render_ptx(k, "sm_90")
  assert "bar.sync" not in src and dims.local_size[0] == 128
  same(lambda t: t.sum(), f32(1000, 1000), rtol=2e-5)
  same(lambda t: (t - t.mean(1, keepdim=True)).square().mean(1), f32(3, 1000), rtol=2e-5)   # two grouped reduces in a row

@pytest.mark.parametrize("arch", sorted({f"sm_{a.sm}" for a in ARCHS.values()}))
def test_every_nv_arch_renders_and_assembles(arch):
  """Each GPU the NV backend (and its mock) knows gets kernels: render_ptx knows its PTX ISA and the assembler takes it
  (Blackwell's sm_100/sm_120 were refused, so tensor ops failed on MOCKGPU_ARCH=blackwell)."""
  from compiler.schedule import create_schedule
  x = Tensor(np.arange(8, dtype=np.float32)).realize()
  si = next(s for s in create_schedule([(x * 3 + 1).lazydata]) if s.kind == "kernel")
  src, _ = render_ptx(lower(si.ast, si.name), arch)
  assert f".target {arch}" in src and f".version {PTX_ISA[arch]}" in src
  assert load_cubin(assemble_ptx(src, arch)).kernels
