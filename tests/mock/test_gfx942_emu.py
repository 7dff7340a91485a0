"""The gfx942 (MI300X, wave64) emulator: its opcode tables equal LLVM's disassembler, its decoder agrees with
llvm-objdump on every instruction of every test kernel, and the RDNA3 emulator's kernel tests pass on gfx942 code."""
import inspect
import shutil
import struct
import subprocess
import numpy as np
import pytest
import tests.mock.test_rdna3_emu as R
from hcqrt.mock.amd.gfx9 import Gfx9Waves, decode, optables
from hcqrt.mock.amd.gfx9.decoder import base_name
from hcqrt.mock.amd.gfx9.executor import sdwa_place, sdwa_select
from hcqrt.mock.amd.rdna3 import DecodeError, EmulatorError, FlatMemory, launch
from tests.rdna3_kernels import KERNELS, compile_ir, have_llvmlite, objdump_each, random_kernel, read_object
from tests.needs import need_llvm_objdump_19

needs_llvmlite = pytest.mark.skipif(not have_llvmlite(), reason="llvmlite (pip install 'hcqrt[amd]') is not installed")

def compile942(src: str) -> bytes: return compile_ir(src, cpu="gfx942", features="")

class Dev942(R.Dev):
  """The RDNA3 tests' address space, but kernels compiled for gfx942 and run with 64-lane GFX9 waves."""
  def run(self, name: str, args: list, grid, block, **kw):
    text, entry, _, kd = read_object(compile942(KERNELS[name]), name)
    ka = b""
    for a in args:
      if isinstance(a, np.ndarray): a = ("Q", self.put(a))
      fmt, v = a; ka += b"\0" * (-len(ka) % struct.calcsize(fmt)) + struct.pack("<" + fmt, v)
    return launch(text, kd, self.mem, self.put(np.frombuffer(bytearray(ka + b"\0" * 16), np.uint8)), grid, block, entry=entry,
                  waves_cls=Gfx9Waves, **kw)

# the RDNA3 kernel tests whose checks hold for any wave size (numerics against numpy), rerun on gfx942 code
SHARED = ["test_mul_i32", "test_ids2d", "test_reduce_lds_barrier", "test_divergence_if_else", "test_loop", "test_math",
          "test_half_and_int64_offset", "test_waves_batched_like_one", "test_integer_division_and_bit_ops", "test_f64_and_i64",
          "test_conversions_and_sin", "test_global_atomics_with_contention", "test_vector_loads_and_packed_halves",
          "test_3d_ids_and_uniform_branch", "test_lds_8_waves_barrier_and_b128", "test_random_expressions",
          "test_divergent_loop_with_break", "test_random_uniform_expressions", "test_flat_loads_through_pointers_in_memory",
          "test_fma_mix", "test_i64_add_sub_carry_borrow", "test_cls_and_16bit_min3_max3"]

@needs_llvmlite
@pytest.mark.parametrize("name", SHARED)
def test_rdna3_kernel_tests_pass_on_gfx942(name, monkeypatch):
  monkeypatch.setattr(R, "Dev", Dev942)
  fn = getattr(R, name); params = inspect.signature(fn).parameters
  kw = {k: v for k, v in {"features": "", "k": 7, "seed": 3, "flag": 1}.items() if k in params}
  fn(**kw)

@needs_llvmlite
def test_wave64_add_runs_64_lanes_per_wave():
  n = 64 * 5; rng = np.random.default_rng(0); a, b = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
  out = np.zeros(n, np.float32); st = Dev942().run("add_f32", [out, a, b], (n // 64,), (64,))
  np.testing.assert_array_equal(out, a + b)
  assert st.waves == n // 64   # one wave per 64 work-items (wave32 would need twice as many)

@needs_llvmlite
def test_a_wave32_launch_of_gfx942_code_is_refused():
  text, entry, _, kd = read_object(compile942(KERNELS["add_f32"]), "add_f32")
  with pytest.raises(EmulatorError, match="wave32"):
    launch(text, kd, FlatMemory(), 0, (1,), (64,), entry=entry)   # the RDNA3 (wave32) engine: the descriptor says wave64

# ---- decoder vs LLVM
@needs_llvmlite
def test_decoder_matches_llvm_objdump(tmp_path):
  need_llvm_objdump_19()
  total = 0
  srcs = {k: v for k, v in KERNELS.items() if k != "wave_ops"}   # wave_ops is wave32 IR (i32 ballots)
  srcs |= {name: ir for name, ir, _ in (random_kernel(s, uniform=u) for s in range(16) for u in (False, True))}
  objs = {name: compile942(src) for name, src in srcs.items()}
  for (name, obj), listed in zip(objs.items(), objdump_each(list(objs.values()), "gfx942", tmp_path)):
    text, entry, size, _ = read_object(obj, name)
    ref = [(a, m) for a, m, _ in listed if entry <= a < entry + size]   # (gfx9 pads with s_nop, not s_code_end)
    assert [(i.addr, i.name) for i in decode(text, entry, entry + size)] == ref, f"{name}: mnemonics disagree with llvm-objdump"
    total += len(ref)
  assert total > 300

MC_PROBES = {"SOP1": lambda op: [0xBE800000 | 4 << 16 | op << 8 | 2], "VOP1": lambda op: [0x7E000000 | op << 9 | 6 << 17 | 256],
             "SMEM": lambda op: [0xC0000000 | op << 18 | 1 << 17 | 4 << 6 | 2, 0],
             "GLOBAL": lambda op: [0xDC000000 | op << 18 | 2 << 14, 0x08000400]}

@pytest.mark.skipif(shutil.which("llvm-mc-19") is None, reason="llvm-mc-19 is not installed")
@pytest.mark.parametrize("enc", list(MC_PROBES))
def test_opcode_tables_equal_llvms_disassembler(enc):
  """Every table entry of these encodings is what llvm-mc-19 --disassemble -mcpu=gfx942 names that opcode."""
  table = getattr(optables, enc); words = [MC_PROBES[enc](op) for op in table]
  blob = " ".join(f"0x{b:02x}" for ws in words for w in ws for b in w.to_bytes(4, "little"))
  out = subprocess.run(["llvm-mc-19", "--disassemble", "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx942"], input=blob, capture_output=True,
                       text=True, check=True).stdout
  names = [ln.split()[0].replace("_e32", "") for ln in out.splitlines() if ln.strip() and not ln.strip().startswith(".")]
  assert names == list(table.values())

def test_refuses_unknown_encodings_by_name():
  with pytest.raises(DecodeError, match="MIMG encoding"): decode(bytes.fromhex("000000f0" "00000000"))
  with pytest.raises(DecodeError, match="unknown gfx942 SOPP opcode 127"): decode(struct.pack("<I", 0xBF800000 | (127 << 16)))
  with pytest.raises(DecodeError, match="buffer_load_dword .*no buffer resources"): decode(struct.pack("<II", 0xE0500000, 0))
  with pytest.raises(DecodeError, match="VOP3 at 0x0 is not valid"): decode(struct.pack("<II", 0xD1010000, 0xFF))   # no VOP3 literal

def test_gfx9_names_map_to_the_shared_operations():
  assert [base_name(n) for n in ("s_load_dwordx4", "global_store_short_d16_hi", "global_atomic_add", "v_addc_co_u32",
                                 "ds_write2st64_b32", "flat_load_sbyte")] == \
         ["s_load_b128", "global_store_d16_hi_b16", "global_atomic_add_u32", "v_add_co_ci_u32", "ds_store_2addr_stride64_b32",
          "flat_load_i8"]

def test_waitcnt_fields_gfx9_layout():
  # s_waitcnt lgkmcnt(0), vmcnt(0) lgkmcnt(0) and vmcnt(63) expcnt(7) lgkmcnt(15), as llvm-mc-19 decodes them for gfx942
  assert Gfx9Waves.waitcnt_fields(0xC07F) == (63, 0) and Gfx9Waves.waitcnt_fields(0x0070) == (0, 0)
  assert Gfx9Waves.waitcnt_fields(0xCF7F) == (63, 15)

def test_sdwa_select_and_place():
  x = np.array([0x8180FF7F], np.uint32)
  assert [int(sdwa_select(x, s, 0)[0]) for s in range(7)] == [0x7F, 0xFF, 0x80, 0x81, 0xFF7F, 0x8180, 0x8180FF7F]
  assert int(sdwa_select(x, 2, 1)[0]) == 0xFFFFFF80 and int(sdwa_select(x, 0, 1)[0]) == 0x7F
  old, r = np.array([0xAAAAAAAA], np.uint32), np.array([0x12348765], np.uint32)
  assert int(sdwa_place(r, old, 5, 0)[0]) == 0x87650000 and int(sdwa_place(r, old, 4, 2)[0]) == 0xAAAA8765
  assert int(sdwa_place(r, old, 4, 1)[0]) == 0xFFFF8765 and int(sdwa_place(r, old, 1, 0)[0]) == 0x6500

def _code(words: list[int]) -> bytes: return struct.pack(f"<{len(words) + 1}I", *words, 0xBF810000)   # ... s_endpgm

def _waves(code: bytes, vgprs: int = 8) -> Gfx9Waves:
  """One wave64 of `code`, every lane on, not yet run."""
  w = Gfx9Waves(code, 1, vgprs, np.zeros(1, np.int64), 4, FlatMemory())
  w.set_exec(slice(None), np.array([0xFFFFFFFFFFFFFFFF], np.uint64))
  return w

def _run_words(words: list[int], vgprs: int = 8, v1: np.ndarray | None = None) -> Gfx9Waves:
  w = _waves(_code(words), vgprs); w.v[0] = np.arange(64, dtype=np.uint32)
  if v1 is not None: w.v[1] = v1
  w.run(); return w

def test_16bit_ops_zero_the_high_half_on_gfx9():
  w = _run_words([0x7E040300 | 0, 0x4C040501], v1=np.full(64, 0xFFFF0003, np.uint32))   # v_mov_b32 v2, v0; v_add_u16 v2, v1, v2
  assert (w.v[2, 0] == (np.arange(64) + 3) & 0xFFFF).all()   # high half 0, not v2's or v1's

def test_wave64_compare_and_mbcnt_see_all_64_lanes():
  # v_cmp_lt_u32 vcc, 40, v0 (lanes 41..63); v_mbcnt_lo_u32_b32 v2, vcc_lo, 0; v_mbcnt_hi_u32_b32 v2, vcc_hi, v2
  w = _run_words([0x7D9200A8, 0xD28C0002, 0x0001006A, 0xD28D0002, 0x0002046B])
  vcc = int(w.s[106, 0]) | int(w.s[107, 0]) << 32
  assert vcc == sum(1 << k for k in range(41, 64))
  assert w.v[2, 0].tolist() == [max(0, k - 41) for k in range(64)]

def test_vmcnt_and_lgkmcnt_count_stores_on_gfx9():
  """load; store; s_waitcnt vmcnt(1) lands the load on gfx9, where stores count in vmcnt (and LDS writes in lgkmcnt):
  the emulator must not leave the load in flight (it did, reading the stale register, before stores were counted)."""
  buf = np.arange(64 * 2, dtype=np.uint32) * 7 + 1
  words = [0xDC508000, 0x047F0002,   # global_load_dword v4, v[2:3], off
           0xDC708100, 0x007F0502,   # global_store_dword v[2:3], v5, off offset:256
           0xBF8C0F71,               # s_waitcnt vmcnt(1)
           0x7E0C0304,               # v_mov_b32_e32 v6, v4
           0xD86C0100, 0x07000000,   # ds_read_b32 v7, v0 offset:256
           0xD81A0000, 0x00000500,   # ds_write_b32 v0, v5
           0xBF8CC17F,               # s_waitcnt lgkmcnt(1)
           0x7E100307, 0xBF810000]   # v_mov_b32_e32 v8, v7; s_endpgm
  mem = FlatMemory(); mem.map(0x10000, buf.view(np.uint8))
  w = Gfx9Waves(struct.pack(f"<{len(words)}I", *words), 1, 16, np.zeros(1, np.int64), 1024, mem)
  w.set_exec(slice(None), np.array([0xFFFFFFFFFFFFFFFF], np.uint64))
  w.v[0] = np.arange(64, dtype=np.uint32) * 4; w.v[2] = 0x10000 + np.arange(64, dtype=np.uint32) * 4; w.v[5] = 99
  w.lds[0, 256:512] = np.arange(64, dtype=np.uint32).view(np.uint8) + 0   # what ds_read finds
  w.run()
  assert w.v[6, 0].tolist() == (np.arange(64) * 7 + 1).tolist()
  assert w.v[8, 0].tolist() == list(range(64))

# ---- scratch (private segment)
STACK = """define amdgpu_kernel void @stack(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %idx) {
entry:
  %arr = alloca [32 x i32], align 4, addrspace(5)
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %b = mul i32 %g, 64
  %i = add i32 %b, %t
  br label %fill
fill:
  %k = phi i32 [ 0, %entry ], [ %k1, %fill ]
  %v = mul i32 %k, %i
  %v2 = add i32 %v, %k
  %p = getelementptr [32 x i32], ptr addrspace(5) %arr, i32 0, i32 %k
  store volatile i32 %v2, ptr addrspace(5) %p
  %k1 = add i32 %k, 1
  %c = icmp ult i32 %k1, 32
  br i1 %c, label %fill, label %done
done:
  %pi = getelementptr i32, ptr addrspace(1) %idx, i32 %i
  %j = load i32, ptr addrspace(1) %pi
  %jm = and i32 %j, %MASK
  %q = getelementptr [32 x i32], ptr addrspace(5) %arr, i32 0, i32 %jm
  %r = load volatile i32, ptr addrspace(5) %q
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %r, ptr addrspace(1) %po
  ret void
}"""

@needs_llvmlite
@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_a_kernel_with_a_stack_runs_on_its_private_segment(arch):
  """A runtime-indexed local array lives in scratch (the descriptor's private_segment_fixed_size); each lane has its
  own segment, and an index past it faults by name instead of reading a neighbour's."""
  from hcqrt.mock.amd.rdna3.executor import Waves
  cls, feat = (Gfx9Waves, "") if arch == "gfx942" else (Waves, "-real-true16")
  for mask, ok in (("31", True), ("1023", False)):
    text, entry, _, kd = read_object(compile_ir(STACK.replace("%MASK", mask), cpu=arch, features=feat), "stack")
    assert struct.unpack_from("<I", kd, 4)[0] >= 128   # the descriptor asks for a private segment
    n = 128; idx = np.random.default_rng(0).integers(0, 1000, n).astype(np.int32); out = np.zeros(n, np.int32)
    m = FlatMemory(); m.map(0x10000, out.view(np.uint8)); m.map(0x20000, idx.view(np.uint8))
    m.map(0x30000, np.frombuffer(bytearray(struct.pack("<QQ", 0x10000, 0x20000) + bytes(16)), np.uint8))
    if ok:
      launch(text, kd, m, 0x30000, (2,), (64,), entry=entry, waves_cls=cls)
      j = idx & 31; np.testing.assert_array_equal(out, j * np.arange(n) + j)
    else:
      with pytest.raises(R.MemoryFault, match="outside the lane's .*-byte private segment"):
        launch(text, kd, m, 0x30000, (2,), (64,), entry=entry, waves_cls=cls)

@needs_llvmlite
def test_decoder_matches_llvm_objdump_on_scratch(tmp_path):
  need_llvm_objdump_19()
  obj = compile942(STACK.replace("%MASK", "31")); text, entry, size, _ = read_object(obj, "stack")
  ref = [(a, m) for a, m, _ in objdump_each([obj], "gfx942", tmp_path)[0] if entry <= a < entry + size]
  assert [(i.addr, i.name) for i in decode(text, entry, entry + size)] == ref and any(m.startswith("scratch_") for _, m in ref)

def test_gfx9_cmpx_writes_exec_and_its_sgpr_destination():
  # v_cmpx_gt_u32_e32 vcc, 4, v0 (lanes 0-3); v_cmpx_gt_u32_e64 s[2:3], 8, v0 (of those, all: EXEC already 0-3)
  w = _run_words([0x7DB80084, 0xD0DC0002, 0x00020088])
  assert int(w.s[106, 0]) | int(w.s[107, 0]) << 32 == 0xF and int(w.get_exec(slice(None))[0]) == 0xF
  assert int(w.s[2, 0]) | int(w.s[3, 0]) << 32 == 0xF

def test_gfx9_sdwa_cmpx_writes_its_sgpr_destination_not_vcc():
  # audit g30 row 2: v_cmpx_gt_u32_sdwa s[4:5], v1, v0 (v1 = 10: lanes 0-9) writes s[4:5] and EXEC; VCC stays 0
  w = _run_words([0x7DB800F9, 0x06068401], v1=np.full(64, 10, np.uint32))
  assert int(w.s[4, 0]) | int(w.s[5, 0]) << 32 == 0x3FF and int(w.get_exec(slice(None))[0]) == 0x3FF
  assert int(w.s[106, 0]) == 0 and int(w.s[107, 0]) == 0

def test_v_ashrrev_i16_zeroes_the_high_half_on_gfx9():
  """gfx942 VOP2 44 / VOP3 300 (MI300 ISA: D0.i16 = S1.i16 >> S0[3:0]); gfx9 writes it zero-extended (ZERO_HI16)."""
  from tests.mock.test_rdna3_emu import ASHR16_SHIFT, ASHR16_VAL, ashr16_ref
  # llvm-mc-19 -mcpu=gfx942: v_ashrrev_i16_e32 v2, v0, v1; v_ashrrev_i16_e64 v3, v0, v1
  words = [0x58040300, 0xD12C0003, 0x00020300]
  code = _code(words)
  assert [i.name for i in decode(code)] == ["v_ashrrev_i16_e32", "v_ashrrev_i16_e64", "s_endpgm"]
  w = _waves(code)
  w.v[0] = 0xABCD0000 | np.tile(ASHR16_SHIFT, 2); w.v[1] = 0x5A5A0000 | np.tile(ASHR16_VAL, 2); w.v[2] = w.v[3] = 0x13570000
  w.run()
  want = [ashr16_ref(s, v) for s, v in zip(np.tile(ASHR16_SHIFT, 2).tolist(), np.tile(ASHR16_VAL, 2).tolist())]
  assert w.v[2, 0].tolist() == want and w.v[3, 0].tolist() == want

def test_v_subrev_u16_runs_and_zeroes_the_high_half_on_gfx9():
  """LLVM emits v_subrev_u16 for gfx942 index math (pad/cat of any dtype); its name reached the shared ALU unmapped."""
  # llvm-mc-19 -mcpu=gfx942: v_subrev_u16_e32 v2, v0, v1; v_subrev_u16_e64 v3, v0, v1
  words = [0x50040300, 0xD1280003, 0x00020300]
  code = _code(words)
  assert [i.name for i in decode(code)] == ["v_subrev_u16_e32", "v_subrev_u16_e64", "s_endpgm"]
  w = _waves(code)
  s0 = np.arange(64, dtype=np.uint32) * 1031; s1 = np.arange(64, dtype=np.uint32)[::-1] * 7 + 3
  w.v[0] = 0xABCD0000 | s0; w.v[1] = 0x5A5A0000 | s1; w.v[2] = w.v[3] = 0x13570000
  w.run()
  want = ((s1.astype(np.int64) - s0) & 0xFFFF).tolist()   # S1 - S0, wrapping in 16 bits; high half written as 0
  assert w.v[2, 0].tolist() == want and w.v[3, 0].tolist() == want

def test_v_dot4_integer_byte_dot_products_on_gfx9():
  """gfx942's VOP3P v_dot4_u32_u8 (41) and v_dot4_i32_i8 (40, both inputs signed): MI300 ISA pseudocode."""
  from tests.mock.test_rdna3_emu import DOT4_A, DOT4_B, DOT4_C, dot4_ref
  # llvm-mc-19 -mcpu=gfx942: v_dot4_u32_u8 v2, v0, v1, v3; v_dot4_i32_i8 v4, v0, v1, v3
  words = [0xD3A94002, 0x1C0E0300, 0xD3A84004, 0x1C0E0300]
  code = _code(words)
  assert [i.name for i in decode(code)] == ["v_dot4_u32_u8", "v_dot4_i32_i8", "s_endpgm"]
  w = _waves(code)
  w.v[0], w.v[1], w.v[3] = np.tile(DOT4_A, 2), np.tile(DOT4_B, 2), np.tile(DOT4_C, 2)
  w.run()
  abc = list(zip(np.tile(DOT4_A, 2).tolist(), np.tile(DOT4_B, 2).tolist(), np.tile(DOT4_C, 2).tolist()))
  assert w.v[2, 0].tolist() == [dot4_ref(a, b, c, False, False) for a, b, c in abc]
  assert w.v[4, 0].tolist() == [dot4_ref(a, b, c, True, True) for a, b, c in abc]

def test_v_dot4_i32_i8_neg_modifiers_refused_on_gfx9():
  """MI300 ISA V_DOT4_I32_I8 reads both inputs signed and defines no NEG; llvm-mc-19 still encodes neg_lo/neg_hi."""
  # llvm-mc-19 -mcpu=gfx942: v_dot4_i32_i8 v4, v0, v1, v3 neg_lo:[1,0,0]; ... neg_hi:[1,0,0]
  for words in ([0xD3A84004, 0x3C0E0300], [0xD3A84104, 0x1C0E0300]):
    code = _code(words)
    w = _waves(code)
    with pytest.raises(EmulatorError, match="v_dot4_i32_i8 at 0x0: op_sel .* modifiers the ISA does not define"): w.run()

def test_v_dot4c_i32_i8_accumulates_into_its_destination_on_gfx9():
  """An int8 matmul summed in int32 compiles on gfx942 to v_dot4c_i32_i8 (VOP2 57: signed bytes, D += dot), which
  stopped the queue with EC_QUEUE_WAVE_ILLEGAL_INSTRUCTION."""
  from tests.mock.test_rdna3_emu import DOT4_A, DOT4_B, DOT4_C, dot4_ref
  code = _code([0x72080300])   # llvm-mc-19 -mcpu=gfx942: v_dot4c_i32_i8 v4, v0, v1
  assert [i.name for i in decode(code)] == ["v_dot4c_i32_i8", "s_endpgm"]
  w = _waves(code)
  w.v[0], w.v[1], w.v[4] = np.tile(DOT4_A, 2), np.tile(DOT4_B, 2), np.tile(DOT4_C, 2)
  w.run()
  abc = zip(np.tile(DOT4_A, 2).tolist(), np.tile(DOT4_B, 2).tolist(), np.tile(DOT4_C, 2).tolist())
  assert w.v[4, 0].tolist() == [dot4_ref(a, b, c, True, True) for a, b, c in abc]
