"""AMDEMU: the AMD compile path (LLVM IR for gfx1100 -> llvmlite -> code object -> our loader) run on the RDNA3
emulator with no driver. The foundation ops equal the CPU backend on odd sizes and views, forward and backward;
a TinyJit step replays; unsupported code is refused by name; and the decoder agrees with llvm-objdump on every
instruction of every kernel this file compiled."""
import numpy as np
import pytest
from frontend import Tensor, TinyJit, dtypes
from hcqrt.device import Device
from hcqrt.mock.amd.rdna3 import EmulatorError, decode
from hcqrt.mock.amd.rdna3.disasm import operands
from tests.rdna3_kernels import have_llvmlite, objdump_each, read_object
from tests.needs import need_llvm_objdump_19
from tests.compiler import test_ptx_render as P

pytestmark = pytest.mark.skipif(not have_llvmlite(), reason="llvmlite (pip install 'hcqrt[amd]') is not installed")
rng = np.random.default_rng(13)

def same(fn, *arrays, **tol):
  """fn on AMDEMU equals fn on the CPU (test_ptx_render's comparison)."""
  P.same(fn, *arrays, device="AMDEMU", **tol)

def test_device_reports_the_amd_target():
  dev = Device["AMDEMU"]
  assert dev.target == {"device": "AMDEMU", "renderer": "llvm", "arch": "gfx1100", "buffer_alignment": 16, "shared_memory": 65536,
                        "warp_size": 32, "gpu": True}
  assert Tensor([1.0, 2.0], device="amdemu").device == "AMDEMU"

# ***** the foundation ops of the PTX round trip, against the CPU, on sizes 1, 7, 33, 1000 *****
@pytest.mark.parametrize("n", P.SIZES)
@pytest.mark.parametrize("name", list(P.UNARY))
def test_unary(name, n):
  # float32 sin is the hardware's v_sin_f32, which takes revolutions: x/2pi rounded to float32 is off by up to |x|*2**-24
  same(P.UNARY[name], P.f32(n, 3), atol=1e-5 if name == "sin" else 1e-6)

@pytest.mark.parametrize("n", P.SIZES)
@pytest.mark.parametrize("name", list(P.BINARY))
def test_binary(name, n): same(P.BINARY[name], P.f32(3, n), P.f32(1, n) if n % 2 else P.f32(3, n))

@pytest.mark.parametrize("n", [1, 33])
@pytest.mark.parametrize("name", list(P.INT_BINARY))
def test_int_binary(name, n): same(P.INT_BINARY[name], P.ints(n, 2), P.ints(n, 2))

@pytest.mark.parametrize("n", P.SIZES)
@pytest.mark.parametrize("name", list(P.REDUCE))
def test_reduce(name, n): same(P.REDUCE[name], P.f32(5, n), rtol=2e-5, atol=1e-5 if name != "cumsum" else 1e-4)

@pytest.mark.parametrize("n", [7, 33])
@pytest.mark.parametrize("name", list(P.MOVEMENT))
def test_views(name, n): same(P.MOVEMENT[name], P.f32(n, 9))

def test_matmul_and_indexing():
  same(lambda a, b: a @ b, P.f32(33, 7), P.f32(7, 33), rtol=1e-5, atol=1e-5)
  same(lambda a, b: a.permute(1, 0) @ b[::2], P.f32(33, 7), P.f32(66, 5), rtol=1e-5, atol=1e-5)
  idx = rng.integers(0, 33, (7, 4)).astype(np.int32)
  same(lambda x, i: x.gather(1, i), P.f32(7, 33), idx)

@pytest.mark.parametrize("src", P.ALL, ids=lambda d: np.dtype(d).name)
def test_casts_from(src):
  x = P.sample(src)
  for dst in P.ALL:
    if np.dtype(src).kind == "f" and np.dtype(dst).kind in "iu" and dst != np.bool_:   # float -> int only where it fits
      info = np.iinfo(dst); same(lambda t: t.cast(dtypes.from_np(dst)), np.clip(x, max(info.min, -1e4), min(info.max, 1e4)).astype(src))
    else: same(lambda t: t.cast(dtypes.from_np(dst)), x)

@pytest.mark.parametrize("dt", [d for d in P.ALL if d != np.bool_], ids=lambda d: np.dtype(d).name)
def test_dtype_arith(dt):
  a, b = P.sample(dt), P.sample(dt)
  rtol = 2e-3 if dt == np.float16 else 1e-6
  same(lambda x, y: x * y + x, a, b, rtol=rtol); same(lambda x, y: x.maximum(y), a, b); same(lambda x, y: x < y, a, b)
  same(lambda x: x.sum(), a, rtol=rtol, atol=1e-3)
  if np.dtype(dt).kind in "iu":
    b = np.where((b == 0) | (b == -1), 3, b).astype(dt)   # no division by zero, no min // -1 (undefined in C)
    same(lambda x, y: x // y, a, b); same(lambda x, y: x % y, a, b)
  else: same(lambda x, y: x / y, a, b, rtol=rtol); same(lambda x: x.abs().sqrt(), a, rtol=rtol)

# ***** backward: gradients equal the CPU's *****
GRADS = {"mul_sum": lambda a, b: (a * b).sum(), "softmax": lambda a, b: (a.softmax(1) * b).sum(),
         "matmul_relu": lambda a, b: (a @ b.permute(1, 0)).relu().mean(), "view": lambda a, b: (a[::2].flip(0).exp() * b[1::2]).sum()}

@pytest.mark.parametrize("name", list(GRADS))
@pytest.mark.parametrize("n", [7, 33])
def test_backward(name, n):
  a, b = P.f32(6, n), P.f32(6, n)
  def grads(device):
    x, y = Tensor(a, device=device, requires_grad=True), Tensor(b, device=device, requires_grad=True)
    GRADS[name](x, y).backward()
    return x.grad.numpy(), y.grad.numpy()
  for g_cpu, g_emu in zip(grads("CPU"), grads("AMDEMU")): np.testing.assert_allclose(g_emu, g_cpu, rtol=1e-5, atol=1e-6)

# ***** a TinyJit step: captured once, replayed with new inputs *****
def test_jit_step():
  w = Tensor(P.f32(8, 4), device="AMDEMU")
  @TinyJit
  def step(x: Tensor) -> Tensor: return (x @ w).relu().sum(1).realize()
  for k in range(4):
    x = P.f32(5, 8) + k
    np.testing.assert_allclose(step(Tensor(x, device="AMDEMU")).numpy(), np.maximum(x @ w.numpy(), 0).sum(1), rtol=1e-5, atol=1e-5)
  assert step.cnt >= 2

def test_constants_read_pc_relative():
  """A constant table lands in .rodata and the code finds it through s_getpc_b64 and R_AMDGPU_REL32_LO/HI
  relocations: the image is mapped in device memory at the address the PC reports."""
  from compiler.assemble.llvm import compile_llvm
  table = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.5]
  ir = f"""@tbl = internal addrspace(4) constant [8 x float] [{", ".join(f"float {v}" for v in table)}]
declare i32 @llvm.amdgcn.workitem.id.x()
define amdgpu_kernel void @k(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %idx) {{
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %pi = getelementptr i32, ptr addrspace(1) %idx, i32 %t
  %i = load i32, ptr addrspace(1) %pi
  %pt = getelementptr [8 x float], ptr addrspace(4) @tbl, i32 0, i32 %i
  %v = load float, ptr addrspace(4) %pt
  %po = getelementptr float, ptr addrspace(1) %out, i32 %t
  store float %v, ptr addrspace(1) %po
  ret void
}}"""
  dev = Device["AMDEMU"]
  out, idx = dev.allocator.alloc(32), dev.allocator.alloc(32)
  ix = np.array([7, 0, 3, 2, 1, 6, 5, 4], np.int32); dev.allocator.copyin(idx, memoryview(ix))
  dev.program("k", compile_llvm(ir, "k", "gfx1100"))(out, idx, local_size=(8, 1, 1))
  o = np.zeros(8, np.float32); dev.allocator.copyout(memoryview(o), out)
  np.testing.assert_array_equal(o, np.array(table, np.float32)[ix])

# ***** refusals by name *****
def _ir(body: str, decls: str = "") -> str:
  return decls + "define amdgpu_kernel void @k(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a) {\n" + body + "\n  ret void\n}"

def test_unimplemented_instruction_is_named():
  from compiler.assemble.llvm import compile_llvm
  ir = _ir("""  %x = load float, ptr addrspace(1) %a
  %c = call float @llvm.amdgcn.cubeid(float %x, float %x, float %x)
  store float %c, ptr addrspace(1) %out""", "declare float @llvm.amdgcn.cubeid(float, float, float)\n")
  dev = Device["AMDEMU"]
  out, a = dev.allocator.alloc(4), dev.allocator.alloc(4)
  prog = dev.program("k", compile_llvm(ir, "k", "gfx1100"))
  with pytest.raises(EmulatorError, match="v_cubeid_f32 at 0x[0-9a-f]+: VALU op not implemented"): prog(out, a, local_size=(1, 1, 1))

def test_wave64_code_is_refused_by_name():
  from compiler.assemble.llvm import compile_llvm
  lib = compile_llvm(_ir("  store float 1.0, ptr addrspace(1) %out"), "k", "gfx942")
  with pytest.raises(RuntimeError, match="k is not a wave32 kernel"): Device["AMDEMU"].program("k", lib)

def test_wrong_argument_count_names_the_kernel():
  from compiler.assemble.llvm import compile_llvm
  dev = Device["AMDEMU"]
  prog = dev.program("k", compile_llvm(_ir("  store float 1.0, ptr addrspace(1) %out"), "k", "gfx1100"))
  with pytest.raises(TypeError, match="kernel k takes 2 arguments, got 1 buffers"): prog(dev.allocator.alloc(4))

# ***** the decoder agrees with llvm-objdump on the kernels the frontend built here (runs last: it reads the cache) *****
def test_zz_decoder_matches_llvm_objdump_on_frontend_kernels(tmp_path):
  need_llvm_objdump_19()
  from frontend.engine import _kernel_cache
  libs = {(k.compiled.name, k.compiled.binary) for key, k in list(_kernel_cache.items()) if key[1].device == "AMDEMU"}
  if len(libs) < 20: pytest.skip("run with the rest of this file: it checks the kernels the other tests compiled")
  total, libs = 0, sorted(libs)
  for (name, lib), listed in zip(libs, objdump_each([lib for _, lib in libs], "gfx1100", tmp_path)):   # (one llvm-objdump)
    text, entry, size, _ = read_object(lib, name)
    ref = [r for r in listed if r[1] != "s_code_end"]
    insts = decode(text, entry, entry + size)
    assert [(i.addr, i.name) for i in insts] == [(a, m) for a, m, _ in ref], f"{name}: mnemonics disagree with llvm-objdump"
    for i, (_, m, ops) in zip(insts, ref):   # operands too: registers, widths, literals, modifiers, offsets
      assert operands(i) == ops, f"{name} 0x{i.addr:x} {m}: ours {operands(i)!r}, llvm-objdump {ops!r}"
    total += len(ref)
  print(f"decoder agrees with llvm-objdump on all {total} instructions of {len(libs)} frontend kernels")
