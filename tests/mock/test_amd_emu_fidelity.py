"""Fidelity rows of the gfx942 emulator audit (/work/reviews/g30.md) that apply to both AMD emulators: each test fails
on the emulator as it was before the row was fixed (the hardware does something more harmful than the old model)."""
import ctypes, struct
import numpy as np
import pytest
from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd
from hcqrt.amd.aql_queue import AQLQueue
from hcqrt.amd.device import AMDDevice, AMDError, AMDProgram
from hcqrt.mock.amd.rdna3 import FlatMemory, dispatch
from hcqrt.mock.amd.rdna3.launch import USER_POISON
from hcqrt.mock.amd.gfx9 import Gfx9Waves, dispatch as gfx9_dispatch
from hcqrt.mock.amd.rdna3 import launch
from hcqrt.mock.amd.rdna3.executor import Waves
from tests.rdna3_kernels import compile_ir, have_llvmlite, read_object
from tests.runtime.test_amd_scratch import _run_stack
from ioctl_defs.amd import aql

# v_mov v2, vcc_lo; v_mov v3, m0; v_mov v4, s2; v_mov v5, v7; v_lshlrev v0, 4, v0; global_store v0, v[2:5], s[0:1];
# s_endpgm (llvm-mc-19 -mcpu=gfx942 / gfx1100 encodings; gfx1100 stores v[1:4] from the same moves one register down)
READ_UNSET = {
  "gfx942": [0x7E04026A, 0x7E06027C, 0x7E080202, 0x7E0A0307, 0x24000084, 0xDC7C8000, 0x00000200, 0xBF810000],
  "gfx1100": [0x7E02026A, 0x7E04027D, 0x7E060202, 0x7E080305, 0x30000084, 0xDC760000, 0x00000100, 0xBFB00000]}

@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_registers_the_descriptor_does_not_enable_start_as_garbage(arch):
  """g30 row 3: with only the kernarg pointer (USER_SGPR_COUNT 2) and TGID_X_EN clear, s2, VCC, M0 and the VGPRs past
  v0 are not initialised (AMDGPUUsage "Initial Kernel Execution State"): they read garbage, not 0."""
  out = np.zeros((64, 4), np.uint32)
  m = FlatMemory(); m.map(0x10000, out.view(np.uint8))
  code = struct.pack(f"<{len(READ_UNSET[arch])}I", *READ_UNSET[arch])
  run = gfx9_dispatch if arch == "gfx942" else lambda *a, **k: dispatch(*a, wave32=True, **k)
  run(m, code, 0, 2 << 1, [0x10000, 0], (2,), (32 if arch == "gfx1100" else 64,))
  lanes = 32 if arch == "gfx1100" else 64
  assert (out[:lanes] == USER_POISON).all()

# s_load_b64 s[4:5], s[0:1], 0x0; s_mov_b32 s6, null; v_mov_b32 v1, s6; v_mov_b32 v2, null; v_add_nc_u32 v3, null, 5;
# v_lshlrev_b32 v0, 4, v0; s_waitcnt lgkmcnt(0); global_store_b32 v0, v1/v2/v3, s[4:5] offset:0/4/8; s_endpgm
# (llvm-mc-19 -mcpu=gfx1100, /tmp/rev-s30-work/nul.s)
READ_NULL = bytes.fromhex("000104f4000000f87c0086be0602027e7c02047e030025d57c0a01008400003007fc89bf00006adc00010400"
                          "04006adc0002040008006adc000304000000b0bf")

def test_gfx11_null_sgpr_reads_zero_after_the_poison_fill():
  """s30 row 3: gfx11's `null` operand (s124) reads 0 as a plain scalar or vector source (RDNA3 ISA, "Scalar
  Operands": SGPR_NULL), though the other unset SGPRs start as garbage."""
  out = np.zeros((32, 4), np.uint32); ka = np.array([0x10000, 0], np.uint32)
  m = FlatMemory(); m.map(0x10000, out.view(np.uint8)); m.map(0x20000, ka.view(np.uint8))
  dispatch(m, READ_NULL, 0, 2 << 1, [0x20000, 0], (1,), (32,), wave32=True)
  assert (out[:, :3] == [0, 0, 5]).all()

def test_aql_pads_user_sgprs_with_garbage_not_zero(monkeypatch):
  """g30 row 3 on the AQL path: USER_SGPR_COUNT 4 with two enabled; the CP loads only those, s2/s3 hold garbage."""
  monkeypatch.delenv("AMD_AQL", raising=False)
  drv = install_mock_amd("gfx942")
  try:
    d = AMDDevice("AMD"); d.wait_timeout_s = 20.0
    desc = struct.pack("<III4xq20xIIIHH4x", 0, 0, 8, 0, 0, 0, 4 << 1, 1 << 3, 0)
    code = [0xC0060000, 0x00000000, 0xBF8CC07F] + READ_UNSET["gfx942"]   # s_load_dwordx2 s[0:1], s[0:1]; s_waitcnt lgkmcnt(0)
    p = AMDProgram(d, "k", struct.pack(f"<{len(code)}I", *code), desc, [(0, 8)])
    buf = d.allocator.alloc(64 * 16)
    p(buf, global_size=(1, 1, 1), local_size=(64, 1, 1), wait=True)
    out = np.zeros((64, 4), np.uint32); d.allocator.copyout(memoryview(out.view(np.uint8)), buf)
    assert (out[:, 2] == USER_POISON).all()   # s2: the padding
  finally: uninstall_mock_amd(drv)

# out[t] = in[127 - t] through LDS across one s_barrier: each wave reads what another wave wrote
REVERSE = """@sh = internal addrspace(3) global [128 x i32] undef, align 4
define amdgpu_kernel void @rev(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %inp) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %pi = getelementptr i32, ptr addrspace(1) %inp, i32 %t
  %x = load i32, ptr addrspace(1) %pi
  %ps = getelementptr [128 x i32], ptr addrspace(3) @sh, i32 0, i32 %t
  store i32 %x, ptr addrspace(3) %ps
RELEASE  call void @llvm.amdgcn.s.barrier()
ACQUIRE  %r = sub i32 127, %t
  %pr = getelementptr [128 x i32], ptr addrspace(3) @sh, i32 0, i32 %r
  %y = load i32, ptr addrspace(3) %pr
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %t
  store i32 %y, ptr addrspace(1) %po
  ret void
}"""

def _reversed_only_with_workgroup_fences(src: str, name: str, arch: str) -> None:
  """Run kernel `src` (its RELEASE/ACQUIRE slots empty, then holding workgroup fences) on one 128-lane workgroup that
  writes in[] reversed to out[]: wrong without the fences, right with them."""
  a = np.arange(128, dtype=np.int32) * 3 + 1
  fence = '  fence syncscope("workgroup") {}\n'
  got = []
  for rel, acq in (("", ""), (fence.format("release"), fence.format("acquire"))):
    text, entry, _, kd = read_object(compile_ir(src.replace("RELEASE", rel).replace("ACQUIRE", acq), cpu=arch,
                                                features="-real-true16" if arch == "gfx1100" else ""), name)
    out = np.zeros(128, np.int32); m = FlatMemory()
    m.map(0x10000, out.view(np.uint8)); m.map(0x20000, a.view(np.uint8))
    m.map(0x30000, np.frombuffer(bytearray(struct.pack("<QQ", 0x10000, 0x20000)), np.uint8))
    launch(text, kd, m, 0x30000, (1,), (128,), entry=entry, waves_cls=Gfx9Waves if arch == "gfx942" else Waves)
    got.append(out)
  assert not np.array_equal(got[0], a[::-1])
  np.testing.assert_array_equal(got[1], a[::-1])

@pytest.mark.skipif(not have_llvmlite(), reason="llvmlite (pip install 'hcqrt[amd]') is not installed")
@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_lds_writes_are_seen_across_a_barrier_only_after_the_writers_wait(arch):
  """g30 row 1: LLVM emits no lgkmcnt(0) before s_barrier on gfx942 or gfx11 (back-off barrier); only the workgroup
  release fence adds it. Without the fences a wave reads the other waves' LDS writes still in flight and gets stale
  data; with them (as compiler/render_llvm.py's barrier() emits them) the result is right."""
  _reversed_only_with_workgroup_fences(REVERSE, "rev", arch)

@pytest.mark.skipif(not have_llvmlite(), reason="llvmlite (pip install 'hcqrt[amd]') is not installed")
@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_a_missing_release_fence_is_not_hidden_by_the_acquire_wait_after_the_barrier(arch):
  """g30 row 1, its limit: with only the acquire fence, the writer's s_waitcnt lgkmcnt(0) comes after s_barrier. Run
  in step, every wave executed that wait before any read, so the reads saw the writes. A wave is free to fall behind
  after the barrier, so the mock resumes the waves with LDS writes in flight last: the readers get stale data. (The
  mutation: deleting the release fence from compiler/render_llvm.py's barrier().)"""
  a = np.arange(128, dtype=np.int32) * 3 + 1
  src = REVERSE.replace("RELEASE", "").replace("ACQUIRE", '  fence syncscope("workgroup") acquire\n')
  text, entry, _, kd = read_object(compile_ir(src, cpu=arch, features="-real-true16" if arch == "gfx1100" else ""), "rev")
  out = np.zeros(128, np.int32); m = FlatMemory()
  m.map(0x10000, out.view(np.uint8)); m.map(0x20000, a.view(np.uint8))
  m.map(0x30000, np.frombuffer(bytearray(struct.pack("<QQ", 0x10000, 0x20000)), np.uint8))
  launch(text, kd, m, 0x30000, (1,), (128,), entry=entry, waves_cls=Gfx9Waves if arch == "gfx942" else Waves)
  assert not np.array_equal(out, a[::-1])

def test_lgkmcnt_above_zero_lands_nothing_while_a_scalar_load_is_in_flight():
  """g30 row 5: ds_read; s_load; s_waitcnt lgkmcnt(1). SMEM returns out of order on the same counter, so the count
  of 1 may be the DS read's: v3 (read after lgkmcnt(1)) keeps its old value, v4 (after lgkmcnt(0)) has the LDS word."""
  words = [0x24020082, 0xD86C0000, 0x02000001, 0xC0020100, 0x00000000, 0xBF8CC17F, 0x7E060302, 0xBF8CC07F, 0x7E080302, 0x7E0A0204, 0xBF810000]
  mem = FlatMemory(); k = np.array([1234], np.uint32); mem.map(0x40000, k.view(np.uint8))
  w = Gfx9Waves(struct.pack(f"<{len(words)}I", *words), 1, 8, np.zeros(1, np.int64), 256, mem)
  w.set_exec(slice(None), np.array([2**64 - 1], np.uint64)); w.v[0] = np.arange(64, dtype=np.uint32); w.v[2] = 7
  w.lds[0] = np.arange(256, dtype=np.uint8)
  w.s[0], w.s[1] = 0x40000, 0
  w.run()
  assert (w.v[3, 0] == 7).all() and (w.v[4, 0] == w.lds[0].view(np.uint32)[:64]).all() and (w.v[5, 0] == 1234).all()

# "last block" reduction across workgroups: each workgroup stores its partial, releases it at agent scope, and counts
# itself in with an atomic; the one that counts last acquires and sums every partial (the CUDA threadFenceReduction
# pattern). 8 workgroups on 8 XCCs: a partial is visible to the last one only through its XCC's L2 write-back.
LAST_BLOCK_TAIL = """  %v = add i32 %g, 100
  %pp = getelementptr i32, ptr addrspace(1) %part, i32 %g
  store i32 %v, ptr addrspace(1) %pp
RELEASE  %old = atomicrmw add ptr addrspace(1) %cnt, i32 1 syncscope("agent") monotonic
  %last = icmp eq i32 %old, 7
  br i1 %last, label %acq, label %end
acq:
  fence syncscope("agent") acquire
  br label %sum
sum:
  %i = phi i32 [ 0, %acq ], [ %i1, %sum ]
  %s = phi i32 [ 0, %acq ], [ %s1, %sum ]
  %pi = getelementptr i32, ptr addrspace(1) %part, i32 %i
  %x = load i32, ptr addrspace(1) %pi
  %s1 = add i32 %s, %x
  %i1 = add i32 %i, 1
  %more = icmp ult i32 %i1, 8
  br i1 %more, label %sum, label %done
done:
  store i32 %s1, ptr addrspace(1) %out
  br label %end
end:
  ret void
}"""
LAST_BLOCK = """define amdgpu_kernel void @lastblock(ptr addrspace(1) %part, ptr addrspace(1) %cnt, ptr addrspace(1) %out) {
entry:
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %lead = icmp eq i32 %t, 0
  br i1 %lead, label %w, label %end
w:
""" + LAST_BLOCK_TAIL

@pytest.mark.skipif(not have_llvmlite(), reason="llvmlite (pip install 'hcqrt[amd]') is not installed")
def test_gfx942_stores_stay_in_their_xccs_l2_until_an_agent_scope_release():
  """g30 row 6: each MI300X XCC has its own L2 (AMDGPUUsage "Memory Model GFX942"). Without the agent-scope release
  fence (llc-19 emits `buffer_wbl2 sc1; s_waitcnt vmcnt(0)` for it) the partials of the workgroups on other XCCs are
  still dirty in their L2s when the last workgroup sums them; with it the sum is right. On one XCC (one L2) the
  missing fence does not show."""
  want = sum(100 + g for g in range(8))
  def run(release: str, num_xcc: int) -> int:
    src = LAST_BLOCK.replace("RELEASE", release)
    text, entry, _, kd = read_object(compile_ir(src, cpu="gfx942"), "lastblock")
    part, cnt, out = np.zeros(8, np.int32), np.zeros(1, np.int32), np.zeros(1, np.int32)
    m = FlatMemory()
    for va, arr in ((0x10000, part), (0x20000, cnt), (0x30000, out)): m.map(va, arr.view(np.uint8))
    m.map(0x40000, np.frombuffer(bytearray(struct.pack("<QQQ", 0x10000, 0x20000, 0x30000)), np.uint8))
    launch(text, kd, m, 0x40000, (8,), (64,), entry=entry, waves_cls=Gfx9Waves, num_xcc=num_xcc)
    assert (part == 100 + np.arange(8)).all() and cnt[0] == 8   # every store reaches memory by the end of the dispatch
    return int(out[0])
  fence = '  fence syncscope("agent") release\n'
  assert run(fence, 8) == want
  assert run("", 8) != want
  assert run("", 1) == want

@pytest.mark.skipif(not have_llvmlite(), reason="llvmlite (pip install 'hcqrt[amd]') is not installed")
def test_the_mock_kfd_deals_an_aql_dispatch_over_the_xccs_l2s(monkeypatch):
  """g30 row 6 through the mock KFD: an AQL queue deals the 8 workgroups over the MI300X's 8 XCCs (cp.aql_xcc_share),
  so the last-block sum without the agent-scope release reads partials still dirty in the other XCCs' L2s."""
  monkeypatch.delenv("AMD_AQL", raising=False)
  drv = install_mock_amd("gfx942")
  try:
    d = AMDDevice("AMD"); d.wait_timeout_s = 20.0
    sums = []
    for release in ('  fence syncscope("agent") release\n', ""):
      text, entry, _, kd = read_object(compile_ir(LAST_BLOCK.replace("RELEASE", release), cpu="gfx942"), "lastblock")
      p = AMDProgram(d, "lastblock", text, kd, [(0, 8), (8, 8), (16, 8)], entry=entry)
      part, cnt, out = (d.allocator.alloc(n) for n in (32, 4, 4))
      for b, n in ((part, 32), (cnt, 4), (out, 4)): d.allocator.copyin(b, memoryview(bytearray(n)))
      p(part, cnt, out, global_size=(8, 1, 1), local_size=(64, 1, 1), wait=True)
      got = np.zeros(1, np.int32); d.allocator.copyout(memoryview(got.view(np.uint8)), out); sums.append(int(got[0]))
    assert sums[0] == sum(100 + g for g in range(8)) and sums[1] != sums[0]
  finally: uninstall_mock_amd(drv)

def test_xcc_l2_keeps_dirty_bytes_per_xcc():
  """gfx9/l2.py's rules byte by byte: a byte store hides only that byte from other XCCs; an sc1 (agent-scope) store is
  seen at once; a write-back publishes only its own XCC's bytes; a second XCC storing the same bytes (a race) takes
  the first one's as written back."""
  from hcqrt.mock.amd.gfx9.l2 import XccL2
  m = FlatMemory(); buf = np.zeros(16, np.uint8); m.map(0x1000, buf); l2 = XccL2(m, 8)
  a = np.array([0x1000], np.uint64); x = lambda k: np.array([k])
  l2.write(np.array([0x1001], np.uint64), np.array([[5]], np.uint8), x(1))
  l2.write(np.array([0x1004], np.uint64), np.array([[1, 2, 3, 4]], np.uint8), x(2))
  assert l2.read(a, 8, x(0))[0].tolist() == [0] * 8
  assert l2.read(a, 8, x(1))[0].tolist() == [0, 5, 0, 0, 0, 0, 0, 0]
  l2.write(np.array([0x1008], np.uint64), np.array([[9, 9, 9, 9]], np.uint8), x(3), publish=True)
  assert l2.read(np.array([0x1008], np.uint64), 4, x(0))[0].tolist() == [9] * 4
  l2.writeback(x(2))
  assert l2.read(a, 8, x(0))[0].tolist() == [0, 0, 0, 0, 1, 2, 3, 4]
  l2.write(np.array([0x1001], np.uint64), np.array([[6]], np.uint8), x(4))   # XCC 1's 5 counts as written back
  assert [l2.read(np.array([0x1001], np.uint64), 1, x(k))[0, 0] for k in (0, 1, 4)] == [5, 5, 6]

def test_buffer_wbl2_writes_back_when_its_vmcnt_retires():
  """buffer_wbl2 sc1 is a vector memory op counted by vmcnt: the XCC's dirty lines are written back only when the
  wave's s_waitcnt retires it, so another XCC reading before that wait still sees the old value."""
  # global_store_dword v[0:1], v2, off; buffer_wbl2 sc1; s_waitcnt vmcnt(0); s_endpgm (llvm-mc-19 -mcpu=gfx942)
  words = [0xDC708000, 0x007F0200, 0xE0A08000, 0x00000000, 0xBF8C0F70, 0xBF810000]
  def run(wait: bool) -> tuple[int, int]:
    mem = FlatMemory(); buf = np.zeros(64, np.uint32); mem.map(0x40000, buf.view(np.uint8))
    run_words = words if wait else words[:4] + words[5:]
    code = struct.pack(f"<{len(run_words)}I", *run_words)
    w = Gfx9Waves(code, 1, 8, np.zeros(1, np.int64), 4, mem)
    from hcqrt.mock.amd.gfx9.l2 import XccL2
    w.l2, w.xcc = XccL2(mem, 2), np.array([1])
    w.set_exec(slice(None), np.array([2**64 - 1], np.uint64))
    w.v[0] = 0x40000 + 4 * np.arange(64, dtype=np.uint32); w.v[1] = 0; w.v[2] = 42
    w.run()
    return int(w.l2.read(np.array([0x40000], np.uint64), 4, np.array([0])).view(np.uint32)[0, 0]), int(buf[0])
  assert run(True) == (42, 42)
  assert run(False) == (0, 42)   # still dirty in XCC 1's L2: XCC 0 reads the written-back 0

# LAST_BLOCK with a leader that pre-reads every partial before it stores its own (the x30 row 2 probe): the
# clobbering store first keeps LLVM from turning the pre-read into scalar loads, which skip the vector L1
PRE_READ = """define amdgpu_kernel void @acq(ptr addrspace(1) %part, ptr addrspace(1) %cnt, ptr addrspace(1) %out, ptr addrspace(1) %pre) {
entry:
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %lead = icmp eq i32 %t, 0
  %q = getelementptr i32, ptr addrspace(1) %pre, i32 %g
  br i1 %lead, label %clob, label %end
clob:
  store i32 0, ptr addrspace(1) %q
  br label %peek
peek:
  %j = phi i32 [ 0, %clob ], [ %j1, %peek ]
  %p = phi i32 [ 0, %clob ], [ %p1, %peek ]
  %pj = getelementptr i32, ptr addrspace(1) %part, i32 %j
  %y = load i32, ptr addrspace(1) %pj
  %p1 = add i32 %p, %y
  %j1 = add i32 %j, 1
  %more0 = icmp ult i32 %j1, 8
  br i1 %more0, label %peek, label %w
w:
  store i32 %p1, ptr addrspace(1) %q
""" + LAST_BLOCK_TAIL.replace("RELEASE", '  fence syncscope("agent") release\n')

@pytest.mark.skipif(not have_llvmlite(), reason="llvmlite (pip install 'hcqrt[amd]') is not installed")
def test_a_missing_acquire_buffer_inv_reads_stale_vector_l1_lines():
  """x30 row 2: the gfx942 vector L1 is per CU and not coherent (AMDGPUUsage "Memory Model GFX942"), so the last
  workgroup, which read every partial before the others stored theirs, sees the new partials only after the agent
  acquire's `buffer_inv sc1` dropped its L1 lines. With llc's code the sum is right on 1 and 8 XCCs; the same code with
  the buffer_inv replaced by s_nops sums the stale zeros plus its own partial (its own store wrote through)."""
  from hcqrt.mock.amd.gfx9 import decode
  text, entry, _, kd = read_object(compile_ir(PRE_READ, cpu="gfx942"), "acq")
  inv = [x for x in decode(text, entry) if x.name == "buffer_inv"]
  assert len(inv) == 1 and inv[0].f["sc1"] == 1
  dropped = bytearray(text); dropped[inv[0].addr:inv[0].addr + 8] = struct.pack("<II", 0xBF800000, 0xBF800000)   # s_nop 0 x2
  def run(code: bytes, num_xcc: int) -> int:
    part, cnt, out, pre = np.zeros(8, np.int32), np.zeros(1, np.int32), np.zeros(1, np.int32), np.full(8, -1, np.int32)
    m = FlatMemory()
    for va, arr in ((0x10000, part), (0x20000, cnt), (0x30000, out), (0x50000, pre)): m.map(va, arr.view(np.uint8))
    m.map(0x40000, np.frombuffer(bytearray(struct.pack("<QQQQ", 0x10000, 0x20000, 0x30000, 0x50000)), np.uint8))
    launch(code, kd, m, 0x40000, (8,), (64,), entry=entry, waves_cls=Gfx9Waves, num_xcc=num_xcc)
    assert (pre == 0).all() and cnt[0] == 8   # the pre-reads ran before any partial was stored
    return int(out[0])
  want = sum(100 + g for g in range(8))
  for num_xcc in (1, 8):
    assert run(text, num_xcc) == want
    got = run(bytes(dropped), num_xcc)
    assert got != want and got - 100 in range(8), got

def test_vector_l1_rules():
  """gfx9/l1.py's rules one by one: a workgroup's held line stays as filled when another workgroup stores, another
  workgroup's atomic lands or another XCC writes its L2 back; the holder's own store writes through into it, its own
  atomic drops it; an sc1 load reads past it; buffer_inv drops it."""
  from hcqrt.mock.amd.gfx9.l1 import VectorL1
  from hcqrt.mock.amd.gfx9.l2 import XccL2
  m = FlatMemory(); buf = np.zeros(512, np.uint8); m.map(0x1000, buf)
  l2 = XccL2(m, 2); xcc_of = np.array([0, 1, 0])
  l1 = VectorL1(m, lambda a, n, x: l2.read(a, n, x), lambda wg: xcc_of[wg])
  A = lambda *v: np.array(v, np.uint64); W = lambda *v: np.array(v)
  def load(addr, wg): a = A(addr); return l1.load(a, 4, W(wg), l2.read(a, 4, xcc_of[W(wg)]))[0].tolist()
  def store(addr, val, wg):
    a, d = A(addr), np.full((1, 4), val, np.uint8); l1.before_write(a, d, W(wg)); l2.write(a, d, xcc_of[W(wg)])
  assert load(0x1000, 0) == [0] * 4 and load(0x1000, 2) == [0] * 4
  store(0x1004, 5, 2)                     # workgroup 2 (same XCC as 0) stores into the line 0 holds
  assert load(0x1004, 0) == [0] * 4 and load(0x1004, 2) == [5] * 4 and load(0x1004, 1) == [0] * 4
  store(0x1008, 6, 0)                     # 0's own store writes through into its stale line
  assert load(0x1008, 0) == [6] * 4 and load(0x1004, 0) == [0] * 4
  assert load(0x1080, 0) == [0] * 4       # the next 128-byte line: a line of its own
  def atomic(addr, val, wg): l1.before_write(A(addr), 4, W(wg)); m.write(A(addr), np.full((1, 4), val, np.uint8))
  atomic(0x1080, 7, 1)                    # another workgroup's atomic: 0's line stays stale
  assert load(0x1080, 0) == [0] * 4 and load(0x1080, 2) == [7] * 4
  atomic(0x1084, 8, 0)                    # 0's own atomic: its L1 drops the line; 2's copy (filled above) stays
  assert load(0x1080, 0) == [7] * 4 and load(0x1084, 0) == [8] * 4 and load(0x1084, 2) == [0] * 4
  assert load(0x1100, 0) == [0] * 4       # workgroup 0 on XCC 0 holds 0x1100; XCC 1 stores there and writes back
  store(0x1100, 9, 1); assert load(0x1100, 0) == [0] * 4
  l1.before_writeback(l2.owner, W(1)); l2.writeback(W(1))
  assert load(0x1100, 0) == [0] * 4 and load(0x1100, 2) == [9] * 4
  l1.invalidate(W(0))
  assert load(0x1004, 0) == [5] * 4 and load(0x1080, 0) == [7] * 4 and load(0x1100, 0) == [9] * 4

# global_load_dword v3, v[0:1], off; s_waitcnt vmcnt(0); s_cmp_eq_u32 s0, 1; s_cbranch_scc0 SKIP; global_atomic_add
# v[0:1], v2, off; SKIP: global_load_dword v4, v[0:1], off; s_waitcnt vmcnt(0); s_endpgm (llvm-mc-19 -mcpu=gfx942,
# /tmp/rev-hw-work/atom.s): both workgroups read the word, then workgroup 1 (s0 = 1) adds v2 to it, both reload
ATOM_RELOAD = [0xDC508000, 0x037F0000, 0xBF8C0F70, 0xBF068100, 0xBF840002, 0xDD088000, 0x007F0200, 0xDC508000, 0x047F0000,
               0xBF8C0F70, 0xBF810000]

def _two_workgroups(words: list[int], v2: int, num_xcc: int = 1) -> tuple[Gfx9Waves, np.ndarray]:
  """One wave in each of workgroups 0 and 1 (on XCCs 0 and 1 when `num_xcc` is 2) running `words` on one lane with
  v[0:1] = the address of a zeroed word, v2 = `v2` and s0 = the workgroup."""
  mem = FlatMemory(); buf = np.zeros(64, np.uint32); mem.map(0x40000, buf.view(np.uint8))
  w = Gfx9Waves(struct.pack(f"<{len(words)}I", *words), 2, 8, np.array([0, 1], np.int64), 4, mem)
  w.set_exec(slice(None), np.array([1, 1], np.uint64)); w.v[0] = 0x40000; w.v[1] = 0; w.v[2] = v2; w.s[0] = np.array([0, 1])
  if num_xcc > 1: w.l2, w.xcc = Gfx9Waves.xcc_l2(mem, num_xcc), np.array([0, 1])
  w.run()
  return w, buf

def test_an_atomic_drops_its_own_workgroups_l1_line_not_the_others():
  """Audit hw row 1 (AMDGPUUsage "Memory Model GFX942": atomics bypass the L1, and the waves of a work-group need no
  cache action to see each other): after workgroup 1's atomic its own reload reads the new 7; workgroup 0, which
  filled the line before, still reads its stale 0 (it has run no buffer_inv)."""
  w, buf = _two_workgroups(ATOM_RELOAD, 7)
  assert int(buf[0]) == 7
  assert [int(w.v[r, 1, 0]) for r in (3, 4)] == [0, 7]   # the issuer: 0, then its own atomic's result
  assert [int(w.v[r, 0, 0]) for r in (3, 4)] == [0, 0]   # the other workgroup: stale

# s_cmp_eq_u32 s0, 1; s_cbranch_scc0 A; global_store_dword v[0:1], v2, off; A: global_load_dword v3, v[0:1], off;
# s_waitcnt vmcnt(0); s_cmp_eq_u32 s0, 1; s_cbranch_scc0 B; buffer_wbl2 sc1; s_waitcnt vmcnt(0); B: global_load_dword
# v4, v[0:1], off; s_waitcnt vmcnt(0); s_endpgm (llvm-mc-19 -mcpu=gfx942, /tmp/rev-hw-work/wb.s): workgroup 1 stores
# into its XCC's L2, both read, workgroup 1 writes its L2 back, both reload
WB_RELOAD = [0xBF068100, 0xBF840002, 0xDC708000, 0x007F0200, 0xDC508000, 0x037F0000, 0xBF8C0F70, 0xBF068100, 0xBF840003,
             0xE0A08000, 0x00000000, 0xBF8C0F70, 0xDC508000, 0x047F0000, 0xBF8C0F70, 0xBF810000]

def test_an_l2_write_back_from_another_xcc_leaves_a_filled_l1_line_stale():
  """Audit hw row 2, through the executor's write-back hook: workgroup 0 on XCC 0 filled its L1 line with 0 while
  workgroup 1's 5 sat in XCC 1's L2; after XCC 1's `buffer_wbl2 sc1` retires memory holds 5, but workgroup 0 has
  run no buffer_inv and still reads 0. Workgroup 1 reads its own 5 throughout."""
  w, buf = _two_workgroups(WB_RELOAD, 5, num_xcc=2)
  assert int(buf[0]) == 5   # written back
  assert [int(w.v[r, 0, 0]) for r in (3, 4)] == [0, 0]
  assert [int(w.v[r, 1, 0]) for r in (3, 4)] == [5, 5]

# workgroup-scope release/acquire around an atomicrmw (/tmp/rev-hw-work/wgatom.py): llc-19 emits global_atomic_add;
# s_or_b64; s_barrier; global_load_dword, with no wait and no buffer_inv, which is right only if the atomic leaves
# the CU's L1 coherent
WG_ATOMIC = """define amdgpu_kernel void @k(ptr addrspace(1) %x, ptr addrspace(1) %out) {
entry:
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %l = and i32 %t, 63
  %px = getelementptr i32, ptr addrspace(1) %x, i32 %l
  %v1 = load i32, ptr addrspace(1) %px
  %w0 = icmp ult i32 %t, 64
  br i1 %w0, label %at, label %j
at:
  %o = atomicrmw add ptr addrspace(1) %px, i32 7 syncscope("workgroup") monotonic
  br label %j
j:
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %v2 = load i32, ptr addrspace(1) %px
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %t
  %s = add i32 %v2, %v1
  store i32 %s, ptr addrspace(1) %po
  ret void
}"""

@pytest.mark.skipif(not have_llvmlite(), reason="llvmlite (pip install 'hcqrt[amd]') is not installed")
def test_a_workgroup_scope_acquire_sees_its_own_workgroups_atomic():
  """Audit hw row 1: wave 0 adds 7 with a workgroup-scope atomicrmw, both waves pass a workgroup release/acquire
  around s_barrier and reload: each lane reads 0 before and 7 after (the old mock gave both waves 0 after)."""
  from hcqrt.mock.amd.gfx9 import decode
  text, entry, _, kd = read_object(compile_ir(WG_ATOMIC, cpu="gfx942"), "k")
  names = [x.name for x in decode(text, entry)]
  assert "global_atomic_add" in names and "s_barrier" in names and "buffer_inv" not in names
  x, out = np.zeros(64, np.int32), np.full(128, -1, np.int32)
  m = FlatMemory(); m.map(0x10000, x.view(np.uint8)); m.map(0x20000, out.view(np.uint8))
  m.map(0x40000, np.frombuffer(bytearray(struct.pack("<QQ", 0x10000, 0x20000)), np.uint8))
  launch(text, kd, m, 0x40000, (1,), (128,), entry=entry, waves_cls=Gfx9Waves)
  assert (x == 7).all() and (out == 7).all(), out

# global_load_b32 v3, v[0:1], off; s_waitcnt vmcnt(0); s_barrier; s_cmp_eq_u32 s0, 1; s_cbranch_scc0 A;
# global_store_b32 v[0:1], v2, off; s_waitcnt_vscnt null, 0; A: s_barrier; global_load_b32 v4, v[0:1], off [glc];
# s_waitcnt vmcnt(0); buffer_gl0_inv; global_load_b32 v5, v[0:1], off; s_waitcnt vmcnt(0); s_endpgm (llvm-mc-19
# -mcpu=gfx1100; glc = bit 14): both waves of one workgroup fill the line, wave 1 stores, both reload, drop, reload
GL0_RELOAD = [0xDC520000, 0x037C0000, 0xBF8903F7, 0xBFBD0000, 0xBF068100, 0xBFA10003, 0xDC6A0000, 0x007C0200, 0xBC7C0000,
              0xBFBD0000, 0xDC520000, 0x047C0000, 0xBF8903F7, 0xE0AC0000, 0x00000000, 0xDC520000, 0x057C0000, 0xBF8903F7,
              0xBFB00000]

@pytest.mark.parametrize("wgp_mode,glc", [(True, False), (False, False), (True, True)])
def test_gfx1100_gl0_is_per_wave_in_wgp_mode_and_dropped_by_buffer_gl0_inv(wgp_mode, glc):
  """Audit hw row 6 (AMDGPUUsage "Memory Model GFX11"): one vector L0 per CU; in WGP mode a work-group's waves may run
  on both CUs of the WGP, so wave 0 of the work-group reads its stale line after wave 1's store until its
  `buffer_gl0_inv` (or reads past the L0 with glc); in CU mode the two share one L0, which wave 1's store writes
  through. Wave 1 sees its own store throughout."""
  words = list(GL0_RELOAD); words[10] |= glc << 14
  mem = FlatMemory(); buf = np.zeros(64, np.uint32); mem.map(0x40000, buf.view(np.uint8))
  w = Waves(struct.pack(f"<{len(words)}I", *words), 2, 8, np.array([0, 0], np.int64), 4, mem)
  w.set_gl0(wgp_mode)
  w.set_exec(slice(None), np.array([1, 1], np.uint32)); w.v[0] = 0x40000; w.v[1] = 0; w.v[2] = 5; w.s[0] = np.array([0, 1])
  w.run()
  assert int(buf[0]) == 5
  assert [int(w.v[r, 1, 0]) for r in (3, 4, 5)] == [0, 5, 5]
  assert [int(w.v[r, 0, 0]) for r in (3, 4, 5)] == [0, 0 if wgp_mode and not glc else 5, 5]

# v_mov_b32 v2, 0x40000; v_mov_b32 v3, 0; global_load_b32 v4, v[2:3], off; s_waitcnt vmcnt(0); s_barrier;
# v_cmp_le_u32 vcc_lo, 32, v0; s_and_saveexec_b32 s10, vcc_lo; v_mov_b32 v5, 5; global_store_b32 v[2:3], v5, off;
# s_waitcnt_vscnt null, 0; s_mov_b32 exec_lo, s10; s_barrier; global_load_b32 v6, v[2:3], off; s_waitcnt vmcnt(0);
# out[tid] = v6 at 0x50000 (llvm-mc-19 -mcpu=gfx1100, /tmp/rev-hw-work/wgpbit.s): a 64-lane workgroup is two wave32s,
# both fill the line, wave 1 stores 5, both reload with no buffer_gl0_inv
GL0_WGP_BIT = [0x7E0402FF, 0x00040000, 0x7E060280, 0xDC520000, 0x047C0002, 0xBF8903F7, 0xBFBD0000, 0x7C9600A0, 0xBE8A206A,
               0x7E0A0285, 0xDC6A0000, 0x007C0502, 0xBC7C0000, 0xBEFE000A, 0xBFBD0000, 0xDC520000, 0x067C0002, 0xBF8903F7,
               0x300E0082, 0x4A0E0EFF, 0x00050000, 0x7E100280, 0xDC6A0000, 0x007C0607, 0xBFB00000]
# both workgroups load x (0x40000); workgroup 1 does global_atomic_add_u32 x += 7 (every lane: 224), then stores
# flag = 1 (0x40080); workgroup 0 spins on a glc load of the flag; both reload x with no invalidate and store it to
# out[256 * wg + tid] (llvm-mc-19 -mcpu=gfx1100, /tmp/rev-hw-work/atom11.s)
GL0_ATOMIC = [0x7E0402FF, 0x00040000, 0x7E060280, 0x7E1202FF, 0x00040080, 0x7E140280, 0xDC520000, 0x047C0002, 0xBF8903F7,
              0xBF068100, 0xBFA10008, 0x7E0A0287, 0xDCD60000, 0x007C0502, 0xBC7C0000, 0x7E0A0281, 0xDC6A0000, 0x007C0509,
              0xBFA00006, 0x7E140280, 0xDC524000, 0x0B7C0009, 0xBF8903F7, 0x7C941680, 0xBFA4FFFA, 0xDC520000, 0x067C0002,
              0xBF8903F7, 0x300E0082, 0x84018800, 0x4A0E0E01, 0x4A0E0EFF, 0x00050000, 0x7E100280, 0xDC6A0000, 0x007C0607,
              0xBFB00000]

def _gl0_dispatch(words: list[int], wgp_mode: bool, grid: int, block: int) -> tuple[np.ndarray, np.ndarray]:
  mem = FlatMemory(); x, out = np.zeros(64, np.uint32), np.full(256, 0xDEAD, np.uint32)
  mem.map(0x40000, x.view(np.uint8)); mem.map(0x50000, out.view(np.uint8))
  # RSRC1: 1 VGPR granule, WGP_MODE in bit 29 (COMPUTE_PGM_RSRC1, what the PM4 stream programs); RSRC2: the
  # workgroup id X in s0 (bit 7), no user SGPRs
  dispatch(mem, struct.pack(f"<{len(words)}I", *words), 1 | int(wgp_mode) << 29, 1 << 7, [], (grid,), (block,))
  return x, out

@pytest.mark.parametrize("wgp_mode", [True, False])
def test_the_launch_reads_wgp_mode_from_compute_pgm_rsrc1(wgp_mode):
  """Audit hwfix row 6: the GL0 placement follows COMPUTE_PGM_RSRC1.WGP_MODE as the dispatch programs it. In WGP mode
  wave 0 keeps its stale line after wave 1's store (no buffer_gl0_inv); in CU mode both share one L0 and see 5.
  A launch that ignored the bit would give both modes the same answer."""
  x, out = _gl0_dispatch(GL0_WGP_BIT, wgp_mode, 1, 64)
  assert int(x[0]) == 5
  assert set(out[32:64].tolist()) == {5}
  assert set(out[:32].tolist()) == ({0} if wgp_mode else {5})

@pytest.mark.parametrize("wgp_mode", [True, False])
def test_a_gfx11_atomic_leaves_another_workgroups_gl0_line_stale(wgp_mode):
  """Audit hwfix row 6: an atomic goes past the GL0 (AMDGPUUsage "Memory Model GFX11"); workgroup 1's atomic drops
  only its own line, so workgroup 0, which filled x before and waits on a glc flag, still reads its stale 0 without an
  acquire's buffer_gl0_inv, while the issuer reloads the new 224."""
  x, out = _gl0_dispatch(GL0_ATOMIC, wgp_mode, 2, 32)
  assert int(x[0]) == 224 and int(x[32]) == 1
  assert set(out[:32].tolist()) == {0} and set(out[64:96].tolist()) == {224}

@pytest.mark.skipif(not have_llvmlite(), reason="llvmlite (pip install 'hcqrt[amd]') is not installed")
def test_a_missing_gfx11_acquire_reads_stale_gl0_lines():
  """Audit hw row 6: PRE_READ on gfx1100. llc's agent acquire is `buffer_gl1_inv; buffer_gl0_inv`; with the
  buffer_gl0_inv replaced by s_nops the last workgroup sums the partials its GL0 filled before the others stored
  them (the old mock, which had no GL0, gave the right sum either way). GL1 is not modelled (rdna3 Waves.set_gl0)."""
  from hcqrt.mock.amd.rdna3.decoder import decode
  text, entry, _, kd = read_object(compile_ir(PRE_READ, cpu="gfx1100", features="-real-true16"), "acq")
  inv = [x for x in decode(text, entry) if x.name == "buffer_gl0_inv"]
  assert len(inv) == 1 and inv[0].size == 8
  dropped = bytearray(text); dropped[inv[0].addr:inv[0].addr + 8] = struct.pack("<II", 0xBF800000, 0xBF800000)   # s_nop 0 x2
  def run(code: bytes) -> int:
    part, cnt, out, pre = np.zeros(8, np.int32), np.zeros(1, np.int32), np.zeros(1, np.int32), np.full(8, -1, np.int32)
    m = FlatMemory()
    for va, arr in ((0x10000, part), (0x20000, cnt), (0x30000, out), (0x50000, pre)): m.map(va, arr.view(np.uint8))
    m.map(0x40000, np.frombuffer(bytearray(struct.pack("<QQQQ", 0x10000, 0x20000, 0x30000, 0x50000)), np.uint8))
    launch(code, kd, m, 0x40000, (8,), (32,), entry=entry, waves_cls=Waves)
    assert (pre == 0).all() and cnt[0] == 8   # the pre-reads ran before any partial was stored
    return int(out[0])
  want = sum(100 + g for g in range(8))
  assert run(text) == want
  got = run(bytes(dropped))
  assert got != want and got - 100 in range(8), got

@pytest.mark.parametrize("bits,drops", [((0, 0), False), ((1, 0), True), ((0, 1), True), ((1, 1), True)])
def test_buffer_inv_scope_bits_and_sc1_loads(bits, drops):
  """buffer_inv drops the workgroup's L1 lines at workgroup scope and wider (sc0 or sc1), not at wavefront scope; a
  global_load with sc1 (agent scope) reads past the L1. The workgroup read the line earlier; another workgroup has
  stored into it since."""
  # global_load_dword v3, v[0:1], off; s_waitcnt vmcnt(0); buffer_inv [sc0] [sc1]; global_load_dword v4, v[0:1], off
  # [sc1]; s_waitcnt vmcnt(0); s_endpgm (llvm-mc-19 -mcpu=gfx942: buffer_inv sc0 = bit 14, sc1 = bit 15; a global
  # load's sc1 = bit 25)
  def run(sc1_load: bool) -> tuple[int, int]:
    words = [0xDC508000, 0x037F0000, 0xBF8C0F70, 0xE0A40000 | bits[0] << 14 | bits[1] << 15, 0,
             0xDC508000 | sc1_load << 25, 0x047F0000, 0xBF8C0F70, 0xBF810000]
    mem = FlatMemory(); buf = np.zeros(64, np.uint32); mem.map(0x40000, buf.view(np.uint8))
    w = Gfx9Waves(struct.pack(f"<{len(words)}I", *words), 1, 8, np.zeros(1, np.int64), 4, mem)
    w.set_exec(slice(None), np.array([1], np.uint64)); w.v[0] = 0x40000; w.v[1] = 0
    a = np.array([0x40000], np.uint64)
    w.l1.load(a, 4, np.array([0]), mem.read(a, 4))                                       # the earlier read: 0
    w.l1.before_write(a, np.full((1, 4), 0x11, np.uint8), np.array([1])); buf[0] = 0x11111111   # workgroup 1's store
    w.run()
    return int(w.v[3, 0, 0]), int(w.v[4, 0, 0])
  assert run(False) == (0, 0x11111111 if drops else 0)
  assert run(True) == (0, 0x11111111)

# s_load_b64 s[4:5], s[0:1], 0x0; s_mov_b64 s[6:7], null; s_mov_b32 s6, s7; then READ_NULL's stores (llvm-mc-19
# -mcpu=gfx1100, /tmp/rev-x30-work/nul64.s)
READ_NULL64 = bytes.fromhex("000104f4000000f87c0186be070086be0602027e7c02047e030025d57c0a01008400003007fc89bf00006adc"
                            "0001040004006adc0002040008006adc000304000000b0bf")

def test_gfx11_null_sgpr_reads_zero_as_a_64_bit_source():
  """x30 row 5: a 64-bit `null` source is 0 in both halves (RDNA3 ISA "Scalar Operands": SGPR_NULL), not s124 and the
  M0 garbage after it. The old mock read s125 (M0 = USER_POISON) into s7."""
  out = np.zeros((32, 4), np.uint32); ka = np.array([0x10000, 0], np.uint32)
  m = FlatMemory(); m.map(0x10000, out.view(np.uint8)); m.map(0x20000, ka.view(np.uint8))
  dispatch(m, READ_NULL64, 0, 2 << 1, [0x20000, 0], (1,), (32,), wave32=True)
  assert (out[:, :3] == [0, 0, 5]).all()

# out[t] = sh[127 - t] after every lane t added in[t] to its zeroed slot sh[t] with an LDS atomic, across one s_barrier
LDS_ATOMIC = """@sh = internal addrspace(3) global [128 x i32] undef, align 4
define amdgpu_kernel void @k(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %inp) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %pi = getelementptr i32, ptr addrspace(1) %inp, i32 %t
  %x = load i32, ptr addrspace(1) %pi
  %ps = getelementptr [128 x i32], ptr addrspace(3) @sh, i32 0, i32 %t
  store i32 0, ptr addrspace(3) %ps
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %o = atomicrmw add ptr addrspace(3) %ps, i32 %x syncscope("workgroup") monotonic
RELEASE  call void @llvm.amdgcn.s.barrier()
ACQUIRE  %r = sub i32 127, %t
  %pr = getelementptr [128 x i32], ptr addrspace(3) @sh, i32 0, i32 %r
  %y = load i32, ptr addrspace(3) %pr
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %t
  store i32 %y, ptr addrspace(1) %po
  ret void
}"""

@pytest.mark.skipif(not have_llvmlite(), reason="llvmlite (pip install 'hcqrt[amd]') is not installed")
@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_lds_atomics_are_in_flight_across_a_barrier_until_the_writers_wait(arch):
  """x30 row 1: an LDS atomic counts in lgkmcnt like a store, and LLVM 19 emits `ds_add_u32; s_barrier; ds_read` with
  no wait between them unless the workgroup release fence adds one. Without the fences the other waves read the
  slots before the atomics land (stale 0s); with them every lane is right. The old mock applied the atomic at issue
  and did not hold its wave at the barrier, so it gave 128/128 without the fences."""
  _reversed_only_with_workgroup_fences(LDS_ATOMIC, "k", arch)

# every lane t adds in[t] to LDS word t & 3 (a divergent address, so LLVM's atomic optimizer leaves it a per-lane
# ds_add_rtn) and stores the value it got back; then lanes 0-3 store the totals
LDS_ATOMIC_RTN = """@sh = internal addrspace(3) global [4 x i32] undef, align 4
define amdgpu_kernel void @k(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %inp) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %pi = getelementptr i32, ptr addrspace(1) %inp, i32 %t
  %x = load i32, ptr addrspace(1) %pi
  %k = and i32 %t, 3
  %pk = getelementptr [4 x i32], ptr addrspace(3) @sh, i32 0, i32 %k
  %z = icmp ult i32 %t, 4
  br i1 %z, label %init, label %go
init:
  store i32 0, ptr addrspace(3) %pk
  br label %go
go:
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %o = atomicrmw add ptr addrspace(3) %pk, i32 %x syncscope("workgroup") monotonic
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %t
  store i32 %o, ptr addrspace(1) %po
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  br i1 %z, label %tot, label %end
tot:
  %s = load i32, ptr addrspace(3) %pk
  %t4 = add i32 %t, 128
  %pt = getelementptr i32, ptr addrspace(1) %out, i32 %t4
  store i32 %s, ptr addrspace(1) %pt
  br label %end
end:
  ret void
}"""

@pytest.mark.skipif(not have_llvmlite(), reason="llvmlite (pip install 'hcqrt[amd]') is not installed")
@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_lds_atomic_returns_serialise_lanes_on_one_address(arch):
  """x30 row 1, the return values: lanes hitting one LDS word are serialised (the LDS performs them one by one), so
  each word's 32 returned old values are distinct prefix sums of its addends and the word ends as their total. (The
  old mock read every lane's old value before applying any: all 32 got the same one.)"""
  a = np.arange(128, dtype=np.int32) * 3 + 1
  text, entry, _, kd = read_object(compile_ir(LDS_ATOMIC_RTN, cpu=arch, features="-real-true16" if arch == "gfx1100" else ""), "k")
  out = np.zeros(132, np.int32); m = FlatMemory()
  m.map(0x10000, out.view(np.uint8)); m.map(0x20000, a.view(np.uint8))
  m.map(0x30000, np.frombuffer(bytearray(struct.pack("<QQ", 0x10000, 0x20000)), np.uint8))
  launch(text, kd, m, 0x30000, (1,), (128,), entry=entry, waves_cls=Gfx9Waves if arch == "gfx942" else Waves)
  for k in range(4):
    old, add = out[k:128:4], a[k:128:4]
    assert out[128 + k] == add.sum()
    order = np.argsort(old, kind="stable")   # the serialised order: each lane's old value is the sum of those before
    np.testing.assert_array_equal(old[order], np.concatenate([[0], np.cumsum(add[order])[:-1]]))

@pytest.mark.skipif(not have_llvmlite(), reason="llvmlite (pip install 'hcqrt[amd]') is not installed")
@pytest.mark.parametrize("word, value, what", [(2, 0, "NUM_RECORDS 0 differs"), (3, 0x00EA4FAC, "not a swizzled scratch resource")])
def test_gfx11_aql_cp_checks_the_scratch_resource_descriptor(word, value, what, monkeypatch):
  """x30 row 4: ROCr's InitScratchSRD fills the gfx11 scratch resource too (amd_aql_queue.cpp:1586-1686): NUM_RECORDS
  one XCC's part, word 3 FORMAT 0x14 / ADD_TID_ENABLE / OOB_SELECT 2. A regression writing zeros, or gfx9's word 3,
  stops the queue. The old mock checked NUM_RECORDS only on gfx9 and word 3 never, so both ran."""
  real = AQLQueue.set_scratch
  def set_scratch(self, va, plan):
    real(self, va, plan); ctypes.c_uint32.from_address(self.amd_queue.host + 144 + 4 * word).value = value
  monkeypatch.setattr(AQLQueue, "set_scratch", set_scratch)
  monkeypatch.setenv("AMD_AQL", "1")
  drv = install_mock_amd("gfx1100")
  try:
    d = AMDDevice("AMD"); d.wait_timeout_s = 20.0
    q = drv.queues[d.compute.queue_id]   # before the recovery replaces it
    with pytest.raises(AMDError) as e: _run_stack(d)
    assert what in f"{e.value} {q.error}"
  finally: uninstall_mock_amd(drv)

@pytest.mark.skipif(not have_llvmlite(), reason="llvmlite (pip install 'hcqrt[amd]') is not installed")
def test_aql_kernel_dispatch_with_release_scope_none_is_refused_on_several_xccs(monkeypatch):
  """x30 row 3: a packet's stores are visible only in the scopes of its release fence (hsa.h
  HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE); with NONE on 8 XCCs they may stay in one XCC's L2, which the mock's
  per-dispatch L2 model cannot carry to the next packet, so the packet is refused. The old mock ran it."""
  real = aql.kernel_dispatch
  no_release = aql.header(aql.PACKET_TYPE_KERNEL_DISPATCH, True, aql.FENCE_SCOPE_SYSTEM, aql.FENCE_SCOPE_NONE)
  monkeypatch.setattr(aql, "kernel_dispatch", lambda *a, **k: real(*a, **{**k, "hdr": no_release}))
  monkeypatch.setenv("AMD_AQL", "1")
  drv = install_mock_amd("gfx942")
  try:
    d = AMDDevice("AMD"); d.wait_timeout_s = 20.0
    q = drv.queues[d.compute.queue_id]
    with pytest.raises(AMDError): _run_stack(d)
    assert "release fence scope NONE on a node of 8 XCCs" in q.error
  finally: uninstall_mock_amd(drv)

# wave 0 stores to LDS and passes s_barrier with the store in flight (no fence: held by the mock), then sets a flag; the
# other wave spins on the flag after the barrier (LLVM 19 puts the spin loop before the flag store in the code)
SPIN_ON_HELD = """@sh = internal addrspace(3) global [128 x i32] undef, align 4
@flag = internal addrspace(3) global i32 undef, align 4
define amdgpu_kernel void @k(ptr addrspace(1) noalias %out) {
entry:
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %ps = getelementptr [128 x i32], ptr addrspace(3) @sh, i32 0, i32 %t
  store i32 %t, ptr addrspace(3) %ps
  %w0 = icmp eq i32 %t, 0
  br i1 %w0, label %clear, label %bar
clear:
  store volatile i32 0, ptr addrspace(3) @flag
  br label %bar
bar:
  call void @llvm.amdgcn.s.barrier()
  %first = icmp ult i32 %t, WAVE
  br i1 %first, label %setflag, label %spin
setflag:
  store volatile i32 1, ptr addrspace(3) @flag
  br label %done
spin:
  %f = load volatile i32, ptr addrspace(3) @flag
  %z = icmp eq i32 %f, 0
  br i1 %z, label %spin, label %done
done:
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %t
  store i32 1, ptr addrspace(1) %po
  ret void
}"""

@pytest.mark.skipif(not have_llvmlite(), reason="llvmlite (pip install 'hcqrt[amd]') is not installed")
@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_a_wave_held_after_a_barrier_is_only_delayed(arch, monkeypatch):
  """x30 row 6: the barrier hold kept wave 0 back until the other wave blocked, but that wave spins on a flag wave 0
  sets after the barrier, so the old mock never finished; on hardware the held wave is only delayed. The mock now
  lets a held wave rejoin after HOLD_STEPS, and gives a ready wave that has not issued for FAIR_STEPS a burst (the
  spin loop sits below the flag store, so lowest-PC-first alone would starve wave 0 again)."""
  monkeypatch.setattr(Waves.run, "__defaults__", (300_000,))   # (the old mock fails at this bound instead of 50M steps)
  # (the same rules with a tenth of the bounds: the spin takes ~10x fewer emulated steps, 1 s instead of 20-30 in the suite)
  monkeypatch.setattr(Waves, "HOLD_STEPS", Waves.HOLD_STEPS // 10); monkeypatch.setattr(Waves, "FAIR_STEPS", Waves.FAIR_STEPS // 10)
  wave = 64 if arch == "gfx942" else 32
  text, entry, _, kd = read_object(compile_ir(SPIN_ON_HELD.replace("WAVE", str(wave)), cpu=arch, features="-real-true16" if arch == "gfx1100" else ""), "k")
  out = np.zeros(2 * wave, np.int32); m = FlatMemory(); m.map(0x10000, out.view(np.uint8))
  m.map(0x30000, np.frombuffer(bytearray(struct.pack("<Q", 0x10000)), np.uint8))
  launch(text, kd, m, 0x30000, (1,), (2 * wave,), entry=entry, waves_cls=Gfx9Waves if arch == "gfx942" else Waves)
  assert (out == 1).all()
