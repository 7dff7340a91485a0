"""The RDNA3 (gfx1100) emulator: LLVM-compiled kernels run on it and match numpy; its decoder agrees with
llvm-objdump on every instruction of every test kernel."""
import struct
import numpy as np
import pytest
from hcqrt.mock.amd.rdna3 import decode, dispatch, launch, FlatMemory, KernelDescriptor, DecodeError, EmulatorError, MemoryFault
from hcqrt.mock.amd.rdna3.disasm import operands
from tests.rdna3_kernels import KERNELS, compile_ir, have_llvmlite, objdump_each, random_kernel, read_object
from tests.needs import need_llvm_objdump_19

needs_llvmlite = pytest.mark.skipif(not have_llvmlite(), reason="llvmlite (pip install 'hcqrt[amd]') is not installed")

# LLVM 22 compiles gfx11 16-bit values into register halves (real-true16) unless told not to; both must run
CODEGEN = pytest.mark.parametrize("features", ["-real-true16", ""], ids=["fake16", "true16"])

class Dev:
  """A tiny flat address space: numpy arrays mapped at fake GPU addresses, plus a kernarg buffer."""
  def __init__(self, features: str = "-real-true16"):
    self.mem, self.next, self.keep, self.features = FlatMemory(), 0x1_0000_0000, [], features
  def put(self, arr: np.ndarray) -> int:
    arr = np.ascontiguousarray(arr); addr = self.next; self.next += (arr.nbytes + 0xFFFF) & ~0xFFFF or 0x10000
    self.mem.map(addr, arr.view(np.uint8).reshape(-1)); self.keep.append(arr); return addr
  def run(self, name: str, args: list, grid, block, **kw):
    text, entry, _, kd = read_object(compile_ir(KERNELS[name], features=self.features), name)
    ka = b""
    for a in args:   # kernarg layout: each argument aligned to its size
      if isinstance(a, np.ndarray): a = ("Q", self.put(a))
      fmt, v = a; ka += b"\0" * (-len(ka) % struct.calcsize(fmt)) + struct.pack("<" + fmt, v)
    kbuf = np.frombuffer(bytearray(ka + b"\0" * 16), np.uint8)
    return launch(text, kd, self.mem, self.put(kbuf), grid, block, entry=entry, **kw)

@needs_llvmlite
@pytest.mark.parametrize("n", [64, 64 * 37])
def test_add_f32(n):
  rng = np.random.default_rng(0); a, b = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
  out = np.zeros(n, np.float32); d = Dev()
  st = d.run("add_f32", [out, a, b], (n // 64,), (64,))
  np.testing.assert_array_equal(out, a + b)
  assert st.waves == n // 32 and st.wave_insts >= st.waves * 15

@needs_llvmlite
@CODEGEN
def test_mul_i32(features):
  rng = np.random.default_rng(1); n = 256
  a, b = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32), rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
  out = np.zeros(n, np.int32); Dev(features).run("mul_i32", [out, a, b], (n // 64,), (64,))
  with np.errstate(over="ignore"): ref = (((a * b) - a) >> 3) ^ b
  np.testing.assert_array_equal(out, ref)

@needs_llvmlite
@CODEGEN
def test_ids2d(features):
  W, H = 24, 12; out = np.full(W * H, -1, np.int32)
  Dev(features).run("ids2d", [out, ("i", W)], (W // 8, H // 4), (8, 4))
  y, x = np.mgrid[0:H, 0:W]
  np.testing.assert_array_equal(out.reshape(H, W), x * 1000 + y)

@needs_llvmlite
@CODEGEN
def test_reduce_lds_barrier(features):
  rng = np.random.default_rng(2); a = rng.integers(-50, 50, 64 * 5).astype(np.float32)
  out = np.zeros(5, np.float32); Dev(features).run("reduce_lds", [out, a], (5,), (64,))
  np.testing.assert_array_equal(out, a.reshape(5, 64).sum(1))

@needs_llvmlite
@CODEGEN
def test_divergence_if_else(features):
  rng = np.random.default_rng(3); n = 128
  a, b = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
  a[:32] = np.abs(a[:32]); a[32:64] = -np.abs(a[32:64])   # whole waves on one side, and mixed waves
  out = np.zeros(n, np.float32); Dev(features).run("diverge", [out, a, b], (n // 64,), (64,))
  i = np.arange(n)
  np.testing.assert_array_equal(out, np.where(a > 0, a * b, np.where(i % 2 == 1, -a, a + np.float32(3.5))))

@needs_llvmlite
@CODEGEN
@pytest.mark.parametrize("k", [1, 7])
def test_loop(k, features):
  rng = np.random.default_rng(4); n = 128; a = rng.standard_normal(n * k, np.float32)
  out = np.zeros(n, np.float32); Dev(features).run("loop", [out, a, ("i", k)], (n // 64,), (64,))
  ref = np.zeros(n, np.float32)
  for j in range(k): ref += np.maximum(a.reshape(n, k)[:, j], 0)
  np.testing.assert_array_equal(out, ref)

@needs_llvmlite
@CODEGEN
def test_math(features):
  rng = np.random.default_rng(5); n = 256
  a = rng.standard_normal(n).astype(np.float32) * 10; b = rng.standard_normal(n).astype(np.float32) * 4
  a[:4] = [0.0, 1e-40, 3e38, -1e-30]; b[:4] = [1.0, 2.0, 0.5, 1e-3]
  out = np.zeros(6 * n, np.float32); Dev(features).run("math", [out, a, b], (n // 64,), (64,))
  o = out.reshape(6, n); ax = np.abs(a).astype(np.float64)
  np.testing.assert_allclose(o[0], np.float32(a.astype(np.float64) * b + 1), rtol=1e-6)
  np.testing.assert_allclose(o[1], np.exp2(b.astype(np.float64)), rtol=1e-6)
  np.testing.assert_allclose(o[2], np.sqrt(ax), rtol=1e-6)
  with np.errstate(divide="ignore"):
    np.testing.assert_allclose(o[3], 1 / np.sqrt(ax), rtol=1e-6)
    np.testing.assert_allclose(o[4], a / b, rtol=1e-6)
    np.testing.assert_allclose(o[5], np.log2(ax), rtol=1e-6, atol=1e-6)

@needs_llvmlite
@CODEGEN
def test_half_and_int64_offset(features):
  rng = np.random.default_rng(6); n = 128; off = 3
  a = rng.standard_normal(n + off).astype(np.float16); b = rng.standard_normal(n).astype(np.float16)
  out = np.zeros(n, np.float16); Dev(features).run("half_i64", [out, a, b, ("q", off)], (n // 64,), (64,))
  ref = ((a[off:].astype(np.float32) * b.astype(np.float32)).astype(np.float16) + b)
  np.testing.assert_array_equal(out, ref)

@needs_llvmlite
def test_waves_batched_like_one():
  """Splitting the grid into several wave batches gives the same answer as one batch."""
  rng = np.random.default_rng(7); n = 64 * 12; a = rng.standard_normal(n, np.float32)
  o1, o2 = np.zeros(n, np.float32), np.zeros(n, np.float32)
  Dev().run("reduce_lds", [o1[:12], a], (12,), (64,)); Dev().run("reduce_lds", [o2[:12], a], (12,), (64,), max_waves=2)
  np.testing.assert_array_equal(o1, o2)

@needs_llvmlite
@CODEGEN
def test_out_of_bounds_access_faults(features):
  n = 128; a, b, out = np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(64, np.float32)
  with pytest.raises(MemoryFault, match="global_store_b32 at 0x.*outside every mapped buffer"):
    Dev(features).run("add_f32", [out, a, b], (2,), (64,))

def test_refuses_unknown_encodings_by_name():
  with pytest.raises(DecodeError, match="MIMG encoding"): decode(bytes.fromhex("000000f0" "00000000"))
  with pytest.raises(DecodeError, match="MUBUF encoding"): decode(bytes.fromhex("000050e000000080"))          # buffer_load_b32
  with pytest.raises(DecodeError, match="v_mov_b32: SDWA/DPP"): decode(bytes.fromhex("fa02007e01b100ff"))    # v_mov_b32_dpp
  with pytest.raises(DecodeError, match="unknown SOPP opcode 127"): decode(struct.pack("<I", 0xBF800000 | (127 << 16)))
  assert decode(struct.pack("<II", 0xDC510000, 0x7C0100))[0].name == "scratch_load_b32"   # scratch runs (architected)
  with pytest.raises(DecodeError, match="scratch atomics"): decode(struct.pack("<II", 0xDC000000 | 53 << 18 | 1 << 16, 0x7C0100))

def test_decoded_but_unimplemented_op_is_named():
  kd = bytearray(64); struct.pack_into("<II", kd, 48, 0, 1 << 7); struct.pack_into("<H", kd, 56, 1 << 10)
  code = bytes.fromhex("00000cd601050e04" "0000b0bf")   # v_cubeid_f32 v0, v1, v2, v3; s_endpgm
  assert [i.name for i in decode(code)] == ["v_cubeid_f32", "s_endpgm"]
  with pytest.raises(EmulatorError, match="v_cubeid_f32 at 0x0: VALU op not implemented"): launch(code, bytes(kd), {}, 0, (1,), (32,))

def test_descriptor_fields_and_refusals():
  kd = bytearray(64); struct.pack_into("<III", kd, 48, 0x2, (15 << 1) | (1 << 7), 0)
  struct.pack_into("<H", kd, 56, (1 << 3))   # kernarg ptr, but wave64
  k = KernelDescriptor.from_bytes(bytes(kd))
  assert (k.user_sgpr_count, k.workgroup_id_enable, k.wave32, k.vgprs) == (15, (True, False, False), False, 12)
  with pytest.raises(EmulatorError, match="wave64"): launch(b"\0\0\xb0\xbf", k, FlatMemory(), 0, (1,), (32,))
  with pytest.raises(ValueError, match="64 bytes"): KernelDescriptor.from_bytes(b"\0" * 63)

# ---- decoder vs LLVM's own disassembler
@needs_llvmlite
def test_decoder_matches_llvm_objdump(tmp_path):
  need_llvm_objdump_19()
  total = 0
  srcs = dict(KERNELS) | {name: ir for name, ir, _ in (random_kernel(s, uniform=u) for s in range(16) for u in (False, True))}
  objs = {name: compile_ir(src) for name, src in srcs.items()}
  for (name, obj), listed in zip(objs.items(), objdump_each(list(objs.values()), "gfx1100", tmp_path)):
    text, entry, size, _ = read_object(obj, name)
    insts, ref = decode(text, entry, entry + size), [r for r in listed if r[1] != "s_code_end"]
    assert [(i.addr, i.name) for i in insts] == [(a, m) for a, m, _ in ref], f"{name}: mnemonics disagree with llvm-objdump"
    for i, (_, m, ops) in zip(insts, ref):   # operands too: registers, widths, literals, modifiers, offsets
      assert operands(i) == ops, f"{name} 0x{i.addr:x} {m}: ours {operands(i)!r}, llvm-objdump {ops!r}"
    total += len(ref)
  assert total > 300
  print(f"decoder agrees with llvm-objdump on all {total} instructions (mnemonic and operands)")

# ---- second round of kernels
@needs_llvmlite
@CODEGEN
def test_integer_division_and_bit_ops(features):
  rng = np.random.default_rng(8); n = 256
  x = rng.integers(-10**6, 10**6, n).astype(np.int32); y = rng.integers(1, 5000, n).astype(np.int32) * rng.choice([-1, 1], n).astype(np.int32)
  x[:3] = [0, -2**31, 2**31 - 1]; y[:3] = [7, 3, -1]
  out = np.zeros(3 * n, np.int32); Dev(features).run("intdiv", [out, x, y], (n // 64,), (64,))
  q = (np.abs(x.astype(np.int64)) // np.abs(y)) * np.sign(x.astype(np.int64)) * np.sign(y); q = q.astype(np.int32)
  r = (x.view(np.uint32) % y.view(np.uint32)).view(np.int32)
  m = np.maximum(q, r).view(np.uint32); nn = np.minimum(m, x.view(np.uint32))
  pop = np.array([bin(v).count("1") for v in x.view(np.uint32)], np.uint32)
  clz = np.array([32 - int(v).bit_length() for v in y.view(np.uint32)], np.uint32)
  np.testing.assert_array_equal(out[:n], q); np.testing.assert_array_equal(out[n:2 * n], r)
  np.testing.assert_array_equal(out[2 * n:].view(np.uint32), (nn + pop) * clz)

@needs_llvmlite
@CODEGEN
def test_f64_and_i64(features):
  rng = np.random.default_rng(9); n = 128
  a, b = rng.standard_normal(n), rng.standard_normal(n) + 3; k = rng.integers(0, 2**63, n, dtype=np.uint64)
  out = np.zeros(n); c = k.copy(); Dev(features).run("f64_i64", [out, a, b, c], (n // 64,), (64,))
  with np.errstate(over="ignore"): k3 = (k * np.uint64(6364136223846793005) + np.uint64(1442695040888963407)) >> np.uint64(7)
  np.testing.assert_array_equal(c, k3)
  np.testing.assert_allclose(out, (a * b + 0.25) / b + k3.astype(np.float64), rtol=1e-15)

@needs_llvmlite
@CODEGEN
def test_conversions_and_sin(features):
  rng = np.random.default_rng(10); n = 128; x = (rng.random(n) * 300).astype(np.float32)
  out = np.zeros(n, np.float32); Dev(features).run("convert", [out, x], (n // 64,), (64,))
  si = np.trunc(x).astype(np.int32); hf = x.astype(np.float16).astype(np.float32)
  ref = ((si.astype(np.float32) + np.fmin(np.floor(x), hf)) + (si & 255).astype(np.float32)) * np.trunc(x) + np.sin(x)
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-3)

@needs_llvmlite
@CODEGEN
def test_global_atomics_with_contention(features):
  rng = np.random.default_rng(11); n = 64 * 6; x = rng.integers(-8, 8, n).astype(np.float32)
  out, cnt = np.zeros(4, np.float32), np.zeros(4, np.int32)
  Dev(features).run("atomics", [out, cnt, x], (n // 64,), (64,))
  np.testing.assert_array_equal(cnt, [n // 4] * 4)
  np.testing.assert_array_equal(out, x.reshape(-1, 4).sum(0))

@needs_llvmlite
@CODEGEN
def test_vector_loads_and_packed_halves(features):
  rng = np.random.default_rng(12); n = 128
  a = rng.standard_normal((n, 4)).astype(np.float32); h = rng.standard_normal((n, 2)).astype(np.float16); h0 = h.copy()
  out = np.zeros((n, 4), np.float32); Dev(features).run("vec4", [out, a, h], (n // 64,), (64,))
  np.testing.assert_array_equal(out, a * a[:, ::-1])
  np.testing.assert_array_equal(h, (h0 + np.array([1, 2], np.float16)) * h0)

@needs_llvmlite
@CODEGEN
@pytest.mark.parametrize("flag", [0, 5])
def test_3d_ids_and_uniform_branch(flag, features):
  out = np.full(64 * 16, -1, np.int32); Dev(features).run("ids3d", [out, ("i", flag)], (8, 1, 2), (4, 4, 4))
  idx = np.arange(64 * 16)
  np.testing.assert_array_equal(out, idx * 3 if flag == 0 else idx ^ flag)

@needs_llvmlite
@CODEGEN
def test_lds_8_waves_barrier_and_b128(features):
  rng = np.random.default_rng(13); n = 256 * 3; a = rng.integers(-100, 100, n).astype(np.float32)
  out = np.zeros(n, np.float32); Dev(features).run("lds_wide", [out, a], (3,), (256,))
  t = a.reshape(3, 256); lid = np.arange(256); q = lid & 252
  np.testing.assert_array_equal(out.reshape(3, 256), t[:, 255 - lid] + t[:, q] + t[:, q + 3])

@needs_llvmlite
@pytest.mark.parametrize("which", ["vmcnt(0)", "lgkmcnt(0)"])
def test_missing_waitcnt_reads_stale_registers(which):
  """Loads land at s_waitcnt: the same kernel with its wait patched into s_nop computes garbage or faults."""
  text, entry, size, kd = read_object(compile_ir(KERNELS["add_f32"]), "add_f32")
  from hcqrt.mock.amd.rdna3.disasm import operands as ops
  waits = [i for i in decode(text, entry, entry + size) if i.name == "s_waitcnt" and ops(i) == which]
  assert len(waits) == 1
  patched = bytearray(text); struct.pack_into("<I", patched, waits[0].addr, 0xBF800000)   # s_nop 0
  n = 64; rng = np.random.default_rng(14); a, b = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
  for code, ok in [(bytes(text), True), (bytes(patched), False)]:
    d = Dev(); out = np.zeros(n, np.float32)
    args = struct.pack("<QQQ", d.put(out), d.put(a), d.put(b)); ka = d.put(np.frombuffer(bytearray(args), np.uint8))
    if ok:
      launch(code, kd, d.mem, ka, (1,), (64,), entry=entry); np.testing.assert_array_equal(out, a + b)
    elif which == "lgkmcnt(0)":
      with pytest.raises(MemoryFault): launch(code, kd, d.mem, ka, (1,), (64,), entry=entry)   # pointers still 0
    else:
      launch(code, kd, d.mem, ka, (1,), (64,), entry=entry); assert not np.array_equal(out, a + b)


@needs_llvmlite
@pytest.mark.parametrize("seed", range(int(__import__("os").environ.get("RDNA3_SEEDS", "16"))))
def test_random_expressions(seed):
  """Random float/int expression trees (compare+select, min/max, shifts, abs): exact agreement with numpy."""
  name, ir, fn = random_kernel(seed)
  KERNELS[name] = ir
  rng = np.random.default_rng(100 + seed); n = 128
  if seed % 2 == 0: a, b, c = (rng.standard_normal(n).astype(np.float32) * 4 for _ in range(3)); out = np.zeros(n, np.float32)
  else: a, b, c = (rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32) for _ in range(3)); out = np.zeros(n, np.int32)
  a[:8] = 0   # exact zeros exercise min/max/compare edge cases
  Dev(["-real-true16", ""][seed % 4 // 2]).run(name, [out, a, b, c], (n // 64,), (64,))
  with np.errstate(all="ignore"): ref = np.broadcast_to(fn(a, b, c), (n,)).astype(out.dtype)
  np.testing.assert_array_equal(out, ref)

@needs_llvmlite
@CODEGEN
def test_divergent_loop_with_break(features):
  """Per-lane trip counts and an early exit: lanes leave the loop at different iterations (exec-mask loop)."""
  rng = np.random.default_rng(16); n = 128; cnt = rng.integers(-3, 40, n).astype(np.int32)
  out = np.zeros(n, np.int32); Dev(features).run("varloop", [out, cnt], (n // 64,), (64,))
  ref = []
  for c in cnt:
    if c <= 0: ref.append(-1); continue
    acc = 0
    for k in range(c):
      acc += k * k
      if acc > 5000: break
    ref.append(acc)
  np.testing.assert_array_equal(out, ref)

# hand-assembled (llvm-mc-19 for gfx1100): kernarg pointer in s[4:5] after a 4-SGPR private segment buffer,
# workgroup id x in s6 = s[USER_SGPR_COUNT]; out[wg * 32 + t] = kernarg[0] + 100 * wg + t
USER6 = bytes.fromhex("020300f4000000f8020204f4080000f807fc89bf06ff0d96640000000c0d0c810c00024a8200003006870d840d00004a00006adc000108000000b0bf")

def test_user_sgpr_layout_follows_descriptor():
  assert [i.name for i in decode(USER6)][:3] == ["s_load_b32", "s_load_b64", "s_waitcnt"]
  kd = bytearray(64); struct.pack_into("<II", kd, 48, 0x2, (6 << 1) | (1 << 7))
  struct.pack_into("<H", kd, 56, (1 << 0) | (1 << 3) | (1 << 10))   # private segment buffer + kernarg ptr, wave32
  out = np.zeros(96, np.int32); args = np.frombuffer(bytearray(struct.pack("<IIQ", 7000, 0, 0x5000_0000)), np.uint8)
  st = launch(USER6, bytes(kd), {0x4000_0000: args, 0x5000_0000: out.view(np.uint8)}, 0x4000_0000, (3,), (32,))
  np.testing.assert_array_equal(out, 7000 + 100 * (np.arange(96) // 32) + np.arange(96) % 32)
  assert (st.waves, st.wave_insts) == (3, 33)
  struct.pack_into("<II", kd, 48, 0x2, (1 << 1) | (1 << 7))      # USER_SGPR_COUNT too small for what is enabled
  with pytest.raises(EmulatorError, match="USER_SGPR_COUNT"): launch(USER6, bytes(kd), {}, 0, (1,), (32,))

@needs_llvmlite
@CODEGEN
def test_wave_intrinsics_and_lds_atomics(features):
  """ballot (compare into an SGPR mask) + popcount, readfirstlane, mbcnt, ds_bpermute, LDS atomic add."""
  rng = np.random.default_rng(17); n = 64 * 4; x = rng.integers(0, 1000, n).astype(np.int32)
  out, gen = np.zeros(2048, np.int32), np.zeros(n, np.int32)
  Dev(features).run("wave_ops", [out, x, gen], (n // 64,), (64,))
  i = np.arange(n); lane = i % 32; wave0 = i - lane; b = x & 7
  hist = np.stack([np.bincount(b[g * 64:(g + 1) * 64], minlength=8) for g in range(n // 64)])
  np.testing.assert_array_equal(gen, hist[i // 64, b])
  pop = np.array([np.count_nonzero(b[w:w + 32]) for w in wave0])
  np.testing.assert_array_equal(out[:n], pop + x[wave0] + lane * 1000)
  np.testing.assert_array_equal(out[1024:1024 + n], x[wave0 + (lane + 1) % 32])

@needs_llvmlite
@pytest.mark.parametrize("seed", range(int(__import__("os").environ.get("RDNA3_SEEDS", "12"))))
def test_random_uniform_expressions(seed):
  """The same generator over i32 kernel arguments: LLVM keeps it on the scalar ALU (SOP1/SOP2/SOPC/SOPK)."""
  name, ir, fn = random_kernel(seed, uniform=True)
  KERNELS[name] = ir
  rng = np.random.default_rng(200 + seed); a, b, c = (int(v) for v in rng.integers(-2**31, 2**31, 3))
  if seed % 3 == 0: a = 0
  out = np.zeros(64, np.int32); Dev().run(name, [out, ("i", a), ("i", b), ("i", c)], (1,), (64,))
  with np.errstate(all="ignore"): ref = np.asarray(fn(*(np.int32(v) for v in (a, b, c)))).astype(np.int32)
  np.testing.assert_array_equal(out, np.full(64, ref))

def test_dispatch_from_pm4_registers():
  """The PM4 view: code fetched from GPU memory at COMPUTE_PGM, user SGPRs from COMPUTE_USER_DATA_*."""
  out = np.zeros(64, np.int32); args = np.frombuffer(bytearray(struct.pack("<IIQ", 5, 0, 0x5000_0000)), np.uint8)
  code = np.frombuffer(bytearray(USER6 + b"\0" * 64), np.uint8)
  mem = {0x4000_0000: args, 0x5000_0000: out.view(np.uint8), 0x7000_0000: code}
  rsrc2 = (6 << 1) | (1 << 7) | (1 << 15)   # 6 user SGPRs, workgroup id x, LDS_SIZE = 1 granule
  st = dispatch(mem, 0x7000_0000, 0x2, rsrc2, [0, 0, 0, 0, 0x4000_0000, 0], (2,), (32,))
  np.testing.assert_array_equal(out, 5 + 100 * (np.arange(64) // 32) + np.arange(64) % 32)
  assert st.waves == 2
  with pytest.raises(EmulatorError, match="wave64"): dispatch(mem, 0x7000_0000, 0x2, rsrc2, [0] * 6, (1,), (32,), wave32=False)
  with pytest.raises(MemoryFault, match="0xbad0bad0"): dispatch(mem, 0x7000_0000, 0x2, rsrc2, [0] * 5, (1,), (32,))   # s5 unset
  with pytest.raises(MemoryFault, match="instruction fetch"): dispatch(mem, 0x6000_0000, 0x2, rsrc2, [0] * 6, (1,), (32,))

@needs_llvmlite
@CODEGEN
def test_flat_loads_through_pointers_in_memory(features):
  """Generic (flat) pointers read from a buffer: flat_load/flat_store, each lane picks one of two buffers."""
  n = 128; rng = np.random.default_rng(18); a, b = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
  a0, b0 = a.copy(), b.copy(); d = Dev(features); out = np.zeros(n, np.float32)
  ptrs = np.array([d.put(a), d.put(b)], np.uint64)
  d.run("flat_indirect", [out, ptrs], (n // 64,), (64,))
  odd = np.arange(n) % 2 == 1
  np.testing.assert_array_equal(out, np.where(odd, b0, a0))
  np.testing.assert_array_equal(a, np.where(odd, a0, 2 * a0)); np.testing.assert_array_equal(b, np.where(odd, 2 * b0, b0))

@needs_llvmlite
@CODEGEN
def test_fma_mix(features):
  """fpext'd halves feeding fma become v_fma_mix_f32 / v_fma_mixlo_f16 (per-source f16/f32 and half select)."""
  rng = np.random.default_rng(19); n = 128
  h = rng.standard_normal((n, 2)).astype(np.float16); f = rng.standard_normal(n).astype(np.float32)
  out = np.zeros(n, np.float16); Dev(features).run("mix", [out, h, f], (n // 64,), (64,))
  e0, e1 = h[:, 0].astype(np.float64), h[:, 1].astype(np.float64)
  r = (e0 * e1 + f).astype(np.float32)
  np.testing.assert_array_equal(out, (e1 * f - r).astype(np.float16))

@needs_llvmlite
@CODEGEN
def test_i64_add_sub_carry_borrow(features):
  """A borrow out of the low half must reach the high half exactly (a float64 intermediate once set bit 63 instead)."""
  rng = np.random.default_rng(20); n = 128
  a = rng.integers(-50, 50, n).astype(np.int64); b = rng.integers(-50, 50, n).astype(np.int64)
  a[:4], b[:4] = [0, -1, 2**62, -2**63], [1, 2**32, -(2**62), 1]
  out = np.zeros(2 * n, np.int64); Dev(features).run("i64_carry", [out, a, b], (n // 64,), (64,))
  with np.errstate(over="ignore"): np.testing.assert_array_equal(out[:n], a - b); np.testing.assert_array_equal(out[n:], a + b)

def _cls_ref(x: np.ndarray) -> np.ndarray:
  u = x.view(np.uint32) ^ (x >> 31).view(np.uint32)
  return np.array([-1 if v == 0 else 32 - int(v).bit_length() for v in u], np.int32)

@needs_llvmlite
@CODEGEN
def test_cls_and_16bit_min3_max3(features):
  """v_cls_i32 / s_cls_i32 (leading sign bits) and v_max3_u16 / v_min3_i16, as LLVM emits them for int64 and int8 ops."""
  rng = np.random.default_rng(21); n = 128
  x = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32); x[:6] = [0, -1, 1, -2, 2**30, -2**31]
  k = -5
  out = np.zeros(3 * n, np.int32); d = Dev(features)
  text, *_ = read_object(compile_ir(KERNELS["cls_minmax16"], features=features), "cls_minmax16")
  names = {i.name for i in decode(text, 0, len(text))}
  assert {"v_cls_i32_e32", "s_cls_i32"} <= names and any(n.startswith("v_max3_u16") for n in names), names
  d.run("cls_minmax16", [out, x, ("i", k)], (n // 64,), (64,))
  np.testing.assert_array_equal(out[:n], _cls_ref(x) + _cls_ref(np.array([k], np.int32))[0])
  h = np.stack([x & 0xFFFF, (x >> 8) & 0xFFFF, (x >> 16) & 0xFFFF]).astype(np.uint16)
  np.testing.assert_array_equal(out[n:2 * n], h.max(0).astype(np.int32))
  np.testing.assert_array_equal(out[2 * n:], h.view(np.int16).min(0).astype(np.int32))

def test_vopd_halves_read_before_either_writes():
  """A dual move that swaps two VGPRs: each half reads its source before the other half writes (a plain move's
  result once aliased its source register, so the swap copied one value into both)."""
  from hcqrt.mock.amd.rdna3.executor import Waves, EXEC
  code = bytes.fromhex("010110ca" "00010000" "0000b0bf")   # llvm-mc-19: v_dual_mov_b32 v0, v1 :: v_dual_mov_b32 v1, v0; s_endpgm
  assert [i.name for i in decode(code)] == ["v_dual_mov_b32", "s_endpgm"]
  w = Waves(code, 2, 8, np.zeros(2, np.int64), 0, FlatMemory())
  w.s[EXEC] = 0xFFFFFFFF; w.v[0], w.v[1] = 1, 2
  w.run()
  assert (w.v[0] == 2).all() and (w.v[1] == 1).all()

def test_sendmsg_other_than_dealloc_vgprs_is_refused():
  kd = bytearray(64); struct.pack_into("<II", kd, 48, 0, 1 << 7); struct.pack_into("<H", kd, 56, 1 << 10)
  ok = bytes.fromhex("0300b6bf" "0000b0bf")   # llvm-mc-19: s_sendmsg sendmsg(MSG_DEALLOC_VGPRS); s_endpgm
  launch(ok, bytes(kd), {}, 0, (1,), (32,))
  bad = bytes.fromhex("0100b6bf" "0000b0bf")  # s_sendmsg sendmsg(MSG_INTERRUPT)
  with pytest.raises(EmulatorError, match="s_sendmsg at 0x0: message 0x1 is not emulated"): launch(bad, bytes(kd), {}, 0, (1,), (32,))

def test_getpc_reads_the_code_address():
  """s_getpc_b64 gives the GPU address of the next instruction (code reads its .rodata PC-relative), whether the code
  is fetched from memory (a PM4 dispatch) or given as bytes mapped at code_va."""
  # llvm-mc-19: s_getpc_b64 s[2:3]; v_mov_b32 v1, s2; v_mov_b32 v2, s3; global_store_b64 v0, v[1:2], s[0:1]; s_endpgm
  prog = bytes.fromhex("004782be" "0202027e" "0302047e" "00006edc00010000" "0000b0bf")
  out = np.zeros(1, np.uint64); code = np.frombuffer(bytearray(prog + b"\0" * 64), np.uint8)
  mem = {0x5000_0000: out.view(np.uint8), 0x7000_0100: code}
  dispatch(mem, 0x7000_0100, 0, 2 << 1, [0x5000_0000, 0], (1,), (1,))
  assert out[0] == 0x7000_0104
  dispatch(mem, b"\0" * 256 + prog, 0, 2 << 1, [0x5000_0000, 0], (1,), (1,), entry=256, code_va=0x9000_0000)
  assert out[0] == 0x9000_0104

def test_code_in_memory_is_decoded_once_and_again_where_rewritten(monkeypatch):
  """A program fetched from memory and dispatched again is not decoded again (launch keeps the decodes by address);
  an instruction whose bytes were rewritten since is: the new code runs, never the old decode."""
  from hcqrt.mock.amd.rdna3.executor import Waves
  real, pcs = Waves.decode_one, []
  monkeypatch.setattr(Waves, "decode_one", staticmethod(lambda c, p: pcs.append(p) or real(c, p)))
  # llvm-mc-19: s_getpc_b64 s[2:3]; v_mov_b32 v1, s2; v_mov_b32 v2, s3; global_store_b64 v0, v[1:2], s[0:1]; s_endpgm
  prog = bytes.fromhex("004782be" "0202027e" "0302047e" "00006edc00010000" "0000b0bf")
  out = np.zeros(1, np.uint64); code = np.frombuffer(bytearray(prog + b"\0" * 64), np.uint8)
  mem = FlatMemory.from_dict({0x5000_0000: out.view(np.uint8), 0x1_7123_0100: code})
  run = lambda: dispatch(mem, 0x1_7123_0100, 0, 2 << 1, [0x5000_0000, 0], (1,), (1,))
  run(); assert out[0] == 0x1_7123_0104 and pcs == [0, 4, 8, 12, 20]
  run(); assert out[0] == 0x1_7123_0104 and len(pcs) == 5
  code[4:8] = np.frombuffer(bytes.fromhex("0302027e"), np.uint8)   # v_mov_b32 v1, s3: the address's high word twice
  run(); assert out[0] == 0x1_0000_0001 and pcs[5:] == [4]

def test_fp_mode_switches_other_than_the_emulated_mode_are_refused():
  kd = bytearray(64); struct.pack_into("<II", kd, 48, 0, 1 << 7); struct.pack_into("<H", kd, 56, 1 << 10)
  launch(bytes.fromhex("000091bf" "0f0092bf" "0000b0bf"), bytes(kd), {}, 0, (1,), (32,))   # s_round_mode 0x0; s_denorm_mode 15
  with pytest.raises(EmulatorError, match="s_denorm_mode at 0x0: mode 0x0 is not emulated"):   # flush denormals
    launch(bytes.fromhex("000092bf" "0000b0bf"), bytes(kd), {}, 0, (1,), (32,))

# per lane: S0 (shift; only bits [3:0] of its 16-bit half count), S1 (value), and the junk the other halves hold
ASHR16_SHIFT = np.array([0, 1, 4, 15, 16, 20, 31, 0xFFFF, 0x7, 0x10F, 3, 8] * 3)[:32].astype(np.uint32)
ASHR16_VAL = np.array([0x8000, 0x7FFF, 0xFFFF, 0x8001, 0x1234, 0xF00D, 0x0001, 0xC000, 0x8765, 0x4000, 0xFFFE, 0x9ABC] * 3)[:32].astype(np.uint32)

def ashr16_ref(shift: int, val: int) -> int:
  """RDNA3 ISA V_ASHRREV_I16: D0.i16 = S1.i16 >> S0[3:0], as 16 raw bits."""
  v = val & 0xFFFF; v = v - 0x10000 if v & 0x8000 else v
  return (v >> (shift & 15)) & 0xFFFF

def test_v_ashrrev_i16_shifts_the_low_half_by_four_bits_and_keeps_the_high_half():
  """`(a.pad(...) + 1).pad(...)` compiles its index math to v_ashrrev_i16 (VOP3 826), which the emulator lacked."""
  from hcqrt.mock.amd.rdna3.executor import Waves, EXEC
  # llvm-mc-19 -mcpu=gfx1100: v_ashrrev_i16 v2, v0, v1; v_ashrrev_i16 v3, 20, v1; s_endpgm
  code = bytes.fromhex("02003ad700030200" "03003ad794020200" "0000b0bf")
  assert [i.name for i in decode(code)] == ["v_ashrrev_i16", "v_ashrrev_i16", "s_endpgm"]
  w = Waves(code, 1, 8, np.zeros(1, np.int64), 0, FlatMemory()); w.s[EXEC] = 0xFFFFFFFF
  w.v[0] = 0xABCD0000 | ASHR16_SHIFT; w.v[1] = 0x5A5A0000 | ASHR16_VAL; w.v[2] = 0x13570000; w.v[3] = 0x24680000
  w.run()
  want = [ashr16_ref(s, v) for s, v in zip(ASHR16_SHIFT.tolist(), ASHR16_VAL.tolist())]
  assert (w.v[2, 0] & 0xFFFF).tolist() == want and (w.v[2, 0] >> 16 == 0x1357).all()   # gfx10+: high half kept
  assert (w.v[3, 0] & 0xFFFF).tolist() == [ashr16_ref(20, v) for v in ASHR16_VAL.tolist()] and (w.v[3, 0] >> 16 == 0x2468).all()

def test_v_ashrrev_i16_op_sel_reads_and_writes_the_high_halves():
  """VOP3 OPSEL [14:11] (RDNA3 ISA VOP3 format; LLVM 22's true16 code sets it): [0]/[1] read S0/S1 from the high
  halves, [3] writes the result to the destination's high half and keeps its low half."""
  from hcqrt.mock.amd.rdna3.executor import Waves, EXEC
  code = bytes.fromhex("02583ad700030200" "0000b0bf")   # the first word above with op_sel [1,1,0,1] (bits 11, 12, 14)
  i = decode(code)[0]; assert i.name == "v_ashrrev_i16" and i.f["opsel"] == 0b1011
  w = Waves(code, 1, 8, np.zeros(1, np.int64), 0, FlatMemory()); w.s[EXEC] = 0xFFFFFFFF
  w.v[0] = (ASHR16_SHIFT << 16) | 0x0003; w.v[1] = (ASHR16_VAL << 16) | 0x0042; w.v[2] = 0x0000BEEF
  w.run()
  want = [ashr16_ref(s, v) for s, v in zip(ASHR16_SHIFT.tolist(), ASHR16_VAL.tolist())]
  assert (w.v[2, 0] >> 16).tolist() == want and (w.v[2, 0] & 0xFFFF == 0xBEEF).all()

def dot4_ref(a: int, b: int, c: int, sa: bool, sb: bool) -> int:
  """c + sum a.byte[k] * b.byte[k], bytes sign-extended where asked, as 32 raw bits (the ISA's V_DOT4 pseudocode)."""
  def byte(x, k, s): v = (x >> 8 * k) & 0xFF; return v - 256 if s and v >= 128 else v
  return (c + sum(byte(a, k, sa) * byte(b, k, sb) for k in range(4))) & 0xFFFFFFFF

DOT4_A = np.array([0x00000000, 0xFFFFFFFF, 0x80807F7F, 0x01020304, 0xFF00FF01, 0x7F80FF00, 0x12345678, 0xDEADBEEF] * 4, np.uint32)
DOT4_B = np.array([0xFFFFFFFF, 0xFFFFFFFF, 0x7F80807F, 0x04030201, 0x80808080, 0x01FF7F80, 0x9ABCDEF0, 0x0BADF00D] * 4, np.uint32)
DOT4_C = np.array([0, 0xFFFFFFFF, 5, 0x80000000, 0x7FFFFFFF, 123456, 0xFFFFFF00, 1] * 4, np.uint32)

def test_v_dot4_integer_byte_dot_products():
  """An int8/uint8 matmul compiles its inner sum to v_dot4_u32_u8 (VOP3P 23), which the decoder did not know. The iu8
  form's NEG[0]/NEG[1] (neg_lo) make src0/src1 signed; the sum wraps in 32 bits; the clamp form is refused by name."""
  from hcqrt.mock.amd.rdna3.executor import Waves, EXEC
  # llvm-mc-19 -mcpu=gfx1100: v_dot4_u32_u8 v2, v0, v1, v3; v_dot4_i32_iu8 v4, v0, v1, v3 neg_lo:[1,0,0];
  # v_dot4_i32_iu8 v5, v0, v1, v3 neg_lo:[1,1,0]; v_dot4_i32_iu8 v6, v0, v1, v3; s_endpgm
  code = bytes.fromhex("024017cc00030e1c" "044016cc00030e3c" "054016cc00030e7c" "064016cc00030e1c" "0000b0bf")
  assert [i.name for i in decode(code)] == ["v_dot4_u32_u8", "v_dot4_i32_iu8", "v_dot4_i32_iu8", "v_dot4_i32_iu8", "s_endpgm"]
  w = Waves(code, 1, 8, np.zeros(1, np.int64), 0, FlatMemory()); w.s[EXEC] = 0xFFFFFFFF
  w.v[0], w.v[1], w.v[3] = DOT4_A, DOT4_B, DOT4_C
  w.run()
  abc = list(zip(DOT4_A.tolist(), DOT4_B.tolist(), DOT4_C.tolist()))
  for reg, sa, sb in ((2, False, False), (4, True, False), (5, True, True), (6, False, False)):
    assert w.v[reg, 0].tolist() == [dot4_ref(a, b, c, sa, sb) for a, b, c in abc], (reg, sa, sb)
  clamp = bytes.fromhex("02c017cc00030e1c" "0000b0bf")   # v_dot4_u32_u8 v2, v0, v1, v3 clamp
  w = Waves(clamp, 1, 8, np.zeros(1, np.int64), 0, FlatMemory()); w.s[EXEC] = 0xFFFFFFFF
  with pytest.raises(EmulatorError, match="v_dot4_u32_u8 at 0x0: the saturating .clamp. form"): w.run()

def test_v_dot4_iu8_src1_signed_alone_and_undefined_modifiers_refused():
  """NEG[1] alone makes only src1 signed (RDNA3 ISA V_DOT4_I32_IU8; LLVM's sdot4 pattern sets NEG on src0 and src1).
  OPSEL, NEG_HI, NEG[2] and NEG on the u8 form have no meaning in the ISA guide, yet llvm-mc-19 encodes them: refused."""
  from hcqrt.mock.amd.rdna3.executor import Waves, EXEC
  # llvm-mc-19 -mcpu=gfx1100: v_dot4_i32_iu8 v4, v0, v1, v3 neg_lo:[0,1,0]
  w = Waves(bytes.fromhex("044016cc00030e5c" "0000b0bf"), 1, 8, np.zeros(1, np.int64), 0, FlatMemory()); w.s[EXEC] = 0xFFFFFFFF
  w.v[0], w.v[1], w.v[3] = DOT4_A, DOT4_B, DOT4_C
  w.run()
  assert w.v[4, 0].tolist() == [dot4_ref(a, b, c, False, True) for a, b, c in zip(DOT4_A.tolist(), DOT4_B.tolist(), DOT4_C.tolist())]
  # ... neg_lo:[0,0,1]; neg_hi:[1,0,0]; op_sel:[1,0,0]; v_dot4_u32_u8 ... neg_lo:[1,0,0]
  for word in ("044016cc00030e9c", "044116cc00030e1c", "044816cc00030e1c", "044017cc00030e3c"):
    w = Waves(bytes.fromhex(word + "0000b0bf"), 1, 8, np.zeros(1, np.int64), 0, FlatMemory()); w.s[EXEC] = 0xFFFFFFFF
    with pytest.raises(EmulatorError, match="at 0x0: op_sel .* modifiers the ISA does not define"): w.run()

def test_flat_memory_from_arrays_maps_like_map_and_forgets_on_unmap():
  """FlatMemory.from_arrays (the mock CP's per-dispatch map) maps every buffer as map() does and refuses overlaps; a
  lookup remembered for one address array is forgotten when the map changes: the same array then faults by address."""
  a, b = np.arange(16, dtype=np.uint8), np.zeros(8, np.uint8)
  m = FlatMemory.from_arrays([(0x2000, b), (0x1000, a)])
  assert m.bases == [0x1000, 0x2000]
  addrs = np.array([0x1004, 0x1008], np.uint64)
  assert m.read(addrs, 4).tolist() == [[4, 5, 6, 7], [8, 9, 10, 11]]
  m.unmap(0x1000)
  with pytest.raises(MemoryFault, match="0x1004"): m.read(addrs, 4)
  with pytest.raises(ValueError, match="overlaps"): FlatMemory.from_arrays([(0x1000, a), (0x100c, b)])

def test_code_reloaded_at_the_same_address_runs_the_new_bytes_past_the_first_dword():
  """Another code object loaded where a freed one was (a new buffer at the same VA), its first instruction's first
  dword the same: the decodes kept by address are reused only where every byte of that instruction is unchanged, so
  a changed literal (the second dword of the same instruction) and a changed later instruction both run as loaded."""
  # llvm-mc-19: v_mov_b32 v1, 0x11111111; v_mov_b32 v2, 0; global_store_b64 v0, v[1:2], s[0:1]; s_endpgm
  prog = lambda lit, v2: bytes.fromhex("ff02027e" + lit + v2 + "02047e" "00006edc00010000" "0000b0bf")
  out = np.zeros(1, np.uint64)
  def run(code: bytes) -> int:
    mem = FlatMemory.from_dict({0x5000_0000: out.view(np.uint8), 0x1_7123_0100: np.frombuffer(bytearray(code + b"\0" * 64), np.uint8)})
    dispatch(mem, 0x1_7123_0100, 0, 2 << 1, [0x5000_0000, 0], (1,), (1,)); return int(out[0])
  assert run(prog("11111111", "80")) == 0x11111111
  assert run(prog("22222222", "80")) == 0x22222222   # v_mov_b32 v1, 0x22222222: only the literal differs
  assert run(prog("22222222", "81")) == 0x1_22222222   # v_mov_b32 v2, 1: a later instruction differs

def test_valu_writes_only_the_lanes_exec_enables_when_an_exec_pattern_comes_back():
  """EXEC masks are unpacked once per pattern (Waves.exec_lanes): a VALU write under a partial EXEC changes only its
  lanes, a second pattern gets its own lanes, and the first pattern, met again, is still its own lanes (2 waves)."""
  # llvm-mc-19: s_mov_b32 exec_lo, 5; v_mov_b32 v1, 7; s_mov_b32 exec_lo, 10; v_mov_b32 v1, 9; s_mov_b32 exec_lo, 5;
  # v_add_nc_u32 v1, 1, v1; s_mov_b32 exec_lo, -1; v_lshlrev_b32 v3, 2, v0; global_store_b32 v3, v1, s[0:1]; s_endpgm
  prog = bytes.fromhex("8500febe" "8702027e" "8a00febe" "8902027e" "8500febe" "8102024a" "c100febe" "82000630"
                       "00006adc03010000" "0000b0bf")
  out = np.zeros(64, np.uint32)
  dispatch({0x5000_0000: out.view(np.uint8)}, prog, 0, 2 << 1, [0x5000_0000, 0], (1,), (64,))
  want = np.full(32, 0xBAD0BAD0, np.uint32); want[[0, 2]] = 8; want[[1, 3]] = 9   # (VGPRs past v0 start as poison)
  assert out.tolist() == np.tile(want, 2).tolist()
