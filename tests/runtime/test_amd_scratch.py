"""Scratch (private segment) end to end on AMD (issue 30): the backend sizes and programs it (hcqrt/amd/scratch.py,
COMPUTE_TMPRING_SIZE + COMPUTE_DISPATCH_SCRATCH_BASE on PM4, amd_queue_t on AQL); the mock CPs read exactly those and
put each wave's slot in GPU memory with the hardware's lane swizzle, so a runtime that sets up too little, or nothing,
gets the fault, the hang or the wrong result the hardware would give."""
import ctypes, dataclasses, gc, struct
import numpy as np
import pytest
from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd
from hcqrt.amd import scratch as SCR
from hcqrt.amd.aql_queue import AQLQueue
from hcqrt.amd.device import AMDDevice, AMDError, AMDProgram
from hcqrt.mock.amd.rdna3 import FlatMemory, launch
from hcqrt.mock.amd.rdna3.launch import POISON_WORD
from hcqrt.mock.amd.gfx9 import Gfx9Waves
from hcqrt.mock.amd.rdna3.executor import Waves
from hw_tests import kernels as K, kernels_amd as KA
from tests.rdna3_kernels import have_llvmlite, read_object

pytestmark = [pytest.mark.skipif(not have_llvmlite(), reason="llvmlite (pip install 'hcqrt[amd]') is not installed"),
              pytest.mark.usefixtures("gc_walks_only_this_modules_objects")]   # (its tests gc.collect() to run finalizers)

# a 32-int stack array written in a loop up to %lim and read at a run-time index: it lives in scratch
STACK = """define amdgpu_kernel void @stack(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %idx, i32 %lim) {
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
  %c = icmp ult i32 %k1, %lim
  br i1 %c, label %fill, label %done
done:
  %pi = getelementptr i32, ptr addrspace(1) %idx, i32 %i
  %j = load i32, ptr addrspace(1) %pi
  %jm = and i32 %j, 31
  %q = getelementptr [32 x i32], ptr addrspace(5) %arr, i32 0, i32 %jm
  %r = load volatile i32, ptr addrspace(5) %q
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %r, ptr addrspace(1) %po
  ret void
}"""

# (arch, KFD behaviour, AMD_AQL): gfx1100 on PM4 under both kernels' rules and on AQL; gfx942 on AQL (8 XCCs) and PM4
CONFIGS = [("gfx1100", "6.12", "0"), ("gfx1100", "6.1", "0"), ("gfx1100", "6.12", "1"), ("gfx942", "6.12", None), ("gfx942", "6.12", "0")]

@pytest.fixture
def device(request, monkeypatch):
  arch, kernel, aql_env = request.param
  if aql_env is None: monkeypatch.delenv("AMD_AQL", raising=False)
  else: monkeypatch.setenv("AMD_AQL", aql_env)
  drv = install_mock_amd(arch, kernel=kernel)
  d = AMDDevice("AMD"); d.drv = drv; d.wait_timeout_s = 20.0
  yield d
  uninstall_mock_amd(drv)

def _run_stack(d, n: int = 256, lim: int = 32, prog=None):
  p = prog or d.program("stack", KA.compile_ir(STACK, d.arch))
  idx = np.random.default_rng(1).integers(0, 1000, n).astype(np.int32)
  bi, bo = d.allocator.alloc(4 * n), d.allocator.alloc(4 * n)
  d.allocator.copyin(bi, memoryview(idx.view(np.uint8)))
  p(bo, bi, vals=(lim,), global_size=(n // 64, 1, 1), local_size=(64, 1, 1), wait=True)
  out = np.zeros(n, np.int32); d.allocator.copyout(memoryview(out.view(np.uint8)), bo)
  return idx & 31, out, p

def _last_dispatch(d):
  return d.drv.queues[d.compute.queue_id].dispatches[-1]

@pytest.mark.parametrize("device", CONFIGS, indirect=True, ids=lambda c: "-".join(x or "aql" for x in c))
def test_a_stack_array_indexed_at_run_time_runs(device):
  j, out, p = _run_stack(device)
  assert p.kd.private_segment_fixed_size >= 128
  np.testing.assert_array_equal(out, j * np.arange(len(out)) + j)
  d = _last_dispatch(device)
  assert d.scratch is not None and d.scratch.bases[0] == device.scratch.va and d.scratch.wave_bytes >= 128 * device.wave_size

@pytest.mark.parametrize("device", CONFIGS, indirect=True, ids=lambda c: "-".join(x or "aql" for x in c))
def test_a_kernel_with_spills_runs(device):
  p = device.program("stack", KA.compile_ir(KA.stack(), device.arch))
  assert p.kd.private_segment_fixed_size > 256   # the 64-float array and the spills
  n = 1000
  x = ((np.arange(n) % 13) - 6).astype(np.float32)
  a, o = device.allocator.alloc(4 * n), device.allocator.alloc(4 * n)
  device.allocator.copyin(a, memoryview(x.view(np.uint8)))
  p(o, a, vals=(n,), global_size=(4, 1, 1), local_size=(256, 1, 1), wait=True)
  got = np.zeros(n, np.float32); device.allocator.copyout(memoryview(got.view(np.uint8)), o)
  np.testing.assert_allclose(got, K.stack_reference(x), rtol=1e-5, atol=1e-3)

def _gfx942(monkeypatch, aql_env=None):
  if aql_env is None: monkeypatch.delenv("AMD_AQL", raising=False)
  else: monkeypatch.setenv("AMD_AQL", aql_env)
  drv = install_mock_amd("gfx942")
  d = AMDDevice("AMD"); d.drv = drv; d.wait_timeout_s = 20.0
  return d

def test_gfx942_aql_gives_each_xcc_its_part_of_the_scratch(monkeypatch):
  d = _gfx942(monkeypatch)
  try:
    j, out, _ = _run_stack(d, 16 * 64)
    np.testing.assert_array_equal(out, j * np.arange(len(out)) + j)
    s, plan = _last_dispatch(d).scratch, d.scratch_plan
    assert s.bases == tuple(d.scratch.va + x * plan.size // 8 for x in range(8)) and s.slots == plan.waves
  finally: uninstall_mock_amd(d.drv)

@pytest.mark.parametrize("cpu_cores", [0, 24])
def test_the_scratch_descriptor_sets_atc_on_an_apu_node_as_rocr(monkeypatch, cpu_cores):
  """x30 row 7: ROCr sets the gfx9 scratch SRD's ATC__CI__VI (word 3 bit 24) when the agent is HSA_PROFILE_FULL, i.e.
  a node KFD lists CPU cores on (amd_gpu_agent.cpp:121-122; an MI300A), and leaves it 0 on a dGPU (MI300X); gfx11's word
  3 has no such bit."""
  import ctypes
  from ioctl_defs.amd import aql
  d = _gfx942(monkeypatch)
  try:
    d.props["cpu_cores_count"] = cpu_cores
    d.compute.set_scratch(0x7F0012345600, d.ensure_scratch(64))
    w3 = ctypes.c_uint32.from_address(d.compute.amd_queue.host + aql.AMD_QUEUE_SCRATCH_RESOURCE_DESCRIPTOR_OFFSET + 12).value
    assert w3 == aql.SRD_WORD3[9] | (1 << 24 if cpu_cores else 0)
    assert aql.scratch_srd(11, 0, 0, apu=True)[3] == aql.SRD_WORD3[11]
  finally: uninstall_mock_amd(d.drv)

@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
def test_a_pm4_dispatch_without_scratch_set_up_stops_the_queue(arch, monkeypatch):
  """The old backend (TMPRING_SIZE 0, no scratch base) on a kernel with SCRATCH_EN: no slot, the waves never start."""
  monkeypatch.setenv("AMD_AQL", "0")
  monkeypatch.setattr(AMDDevice, "ensure_scratch", lambda self, n: None)
  drv = install_mock_amd(arch)
  try:
    d = AMDDevice("AMD"); d.wait_timeout_s = 20.0; d.drv = drv
    q = drv.queues[d.compute.queue_id]
    with pytest.raises(AMDError, match="queue stopped"): _run_stack(d)
    assert "COMPUTE_TMPRING_SIZE 0x0" in q.error and "would hang" in q.error
  finally: uninstall_mock_amd(drv)

def test_an_aql_queue_without_scratch_reports_insufficient_scratch(monkeypatch):
  monkeypatch.setattr(AQLQueue, "set_scratch", lambda self, va, plan: None)
  d = _gfx942(monkeypatch)
  try:
    with pytest.raises(AMDError, match=r"insufficient scratch \(wave64\)"): _run_stack(d)
  finally: uninstall_mock_amd(d.drv)

@pytest.mark.parametrize("arch, aql_env", [("gfx1100", "0"), ("gfx942", None)])
def test_slots_smaller_than_the_kernel_needs_overlap(arch, aql_env, monkeypatch):
  """WAVESIZE one granule, less than a wave's segments: neighbouring waves' swizzled scratch overlaps, and the
  kernel computes garbage (nothing checks a lane's bounds in swizzle mode), as on hardware."""
  real = SCR.plan
  monkeypatch.setattr(SCR, "plan", lambda props, a, ws, n: dataclasses.replace(real(props, a, ws, n), wave_bytes=SCR.GRANULE[a]))
  if aql_env is None: monkeypatch.delenv("AMD_AQL", raising=False)
  else: monkeypatch.setenv("AMD_AQL", aql_env)
  drv = install_mock_amd(arch)
  try:
    d = AMDDevice("AMD"); d.wait_timeout_s = 20.0; d.drv = drv
    j, out, _ = _run_stack(d, 64 * 32)   # 4 waves on each of gfx942's 8 XCCs
    assert d.scratch_plan.wave_bytes == SCR.GRANULE[arch] and not np.array_equal(out, j * np.arange(len(out)) + j)
  finally: uninstall_mock_amd(drv)

@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
def test_uninitialised_scratch_is_garbage_not_zero(arch, monkeypatch):
  """Audit g30 row 4a: entries the kernel never wrote read back as what an earlier wave left (poison), both through
  the mock KFD and through the emulator's launch API."""
  monkeypatch.delenv("AMD_AQL", raising=False)
  drv = install_mock_amd(arch)
  try:
    d = AMDDevice("AMD"); d.wait_timeout_s = 20.0
    j, out, _ = _run_stack(d, lim=16)
  finally: uninstall_mock_amd(drv)
  i = np.arange(len(out))
  np.testing.assert_array_equal(out[j < 16], (j * i + j)[j < 16])
  assert (out[j >= 16].view(np.uint32) == POISON_WORD).all()
  text, entry, _, kd = read_object(KA.compile_ir(STACK, arch), "stack")
  n = 128; idx = np.arange(n, dtype=np.int32) % 32; res = np.zeros(n, np.int32)
  m = FlatMemory(); m.map(0x10000, res.view(np.uint8)); m.map(0x20000, idx.view(np.uint8))
  m.map(0x30000, np.frombuffer(bytearray(struct.pack("<QQI", 0x10000, 0x20000, 16) + bytes(12)), np.uint8))
  launch(text, kd, m, 0x30000, (2,), (64,), entry=entry, waves_cls=Gfx9Waves if arch == "gfx942" else Waves)
  assert (res[idx >= 16].view(np.uint32) == POISON_WORD).all() and (res[idx < 16] == (idx * np.arange(n) + idx)[idx < 16]).all()

@pytest.mark.parametrize("device", [CONFIGS[0], CONFIGS[3]], indirect=True, ids=["gfx1100-pm4", "gfx942-aql"])
def test_scratch_grows_for_a_bigger_kernel_and_the_smaller_still_runs(device):
  j, out, small = _run_stack(device)
  first = device.scratch_plan
  big = device.program("stack", KA.compile_ir(KA.stack(), device.arch))
  assert device.scratch_plan.lane_bytes >= big.kd.private_segment_fixed_size > first.lane_bytes and device.scratch.nbytes > first.size
  j, out, _ = _run_stack(device, prog=small)
  np.testing.assert_array_equal(out, j * np.arange(len(out)) + j)
  assert _last_dispatch(device).scratch.bases[0] == device.scratch.va

@pytest.mark.parametrize("prop, what", [(1 << 0, "private_segment_buffer"), (1 << 5, "flat_scratch_init"), (1 << 11, "USES_DYNAMIC_STACK")])
def test_descriptors_asking_for_what_architected_scratch_lacks_are_refused(prop, what, monkeypatch):
  monkeypatch.setenv("AMD_AQL", "0")
  drv = install_mock_amd("gfx1100")
  try:
    d = AMDDevice("AMD")
    desc = struct.pack("<III4xq20xIIIHH4x", 0, 64, 8, 0, 0, 0, (15 << 1) | 1, (1 << 3) | (1 << 10) | prop, 0)
    with pytest.raises(NotImplementedError, match=what): AMDProgram(d, "k", b"\x00\x00\xb0\xbf" * 16, desc, [(0, 8)])
  finally: uninstall_mock_amd(drv)

def test_a_pm4_dispatch_with_slots_but_no_scratch_base_faults(monkeypatch):
  """COMPUTE_TMPRING_SIZE set but COMPUTE_DISPATCH_SCRATCH_BASE never written: the waves' slots start at address 0,
  outside every BO, and the first scratch store is a GPU VM fault naming its address."""
  monkeypatch.setenv("AMD_AQL", "0")
  drv = install_mock_amd("gfx1100")
  try:
    d = AMDDevice("AMD"); d.wait_timeout_s = 20.0
    p = d.program("stack", KA.compile_ir(STACK, d.arch))
    d.scratch = None   # the stream gets the slots' size and count, not their base
    with pytest.raises(AMDError, match="GPU memory fault at 0x"): _run_stack(d, prog=p)
  finally: uninstall_mock_amd(drv)

def _amd_queue_scratch(d):
  h = d.compute.amd_queue.host
  return struct.unpack_from("<I4IQQI", ctypes.string_at(h + 140, 40))

@pytest.mark.parametrize("arch, word1, word3", [("gfx942", 1 << 31, 0x00EA4FAC), ("gfx1100", 1 << 30, 0x20814FAC)])
def test_aql_amd_queue_scratch_fields_are_the_ones_rocr_writes(arch, word1, word3, monkeypatch):
  """Audit s30 row 1: byte_size and the buffer resource's NUM_RECORDS are one XCC's part (ROCR@c7785a6:
  amd_aql_queue.cpp:1619-1626, 1882-1883); words 1 and 3 are InitScratchSRD's for gfx9 / gfx11 (:1586-1686), their
  values worked out by hand from registers.h's bit fields (SWIZZLE_ENABLE; DST_SEL XYZW, UINT/32 or 32_UINT,
  ELEMENT_SIZE 1 + INDEX_STRIDE 3 on gfx9, ADD_TID_ENABLE, OOB_SELECT 2 on gfx11)."""
  monkeypatch.setenv("AMD_AQL", "1")
  drv = install_mock_amd(arch)
  try:
    d = AMDDevice("AMD"); d.wait_timeout_s = 20.0
    j, out, _ = _run_stack(d)
    np.testing.assert_array_equal(out, j * np.arange(len(out)) + j)
    plan, va = d.scratch_plan, d.scratch.va
    tmpring, w0, w1, w2, w3, loc, size, lane64 = _amd_queue_scratch(d)
    per_xcc = plan.size // plan.num_xcc
    assert (tmpring, loc, size, lane64) == (plan.tmpring, va, per_xcc, plan.lane_bytes * d.wave_size // 64)
    assert (w0, w1, w2, w3) == (va & 0xFFFFFFFF, (va >> 32) | word1, per_xcc, word3)
    assert arch != "gfx942" or size * 8 == plan.size
  finally: uninstall_mock_amd(drv)

def _rocr_scratch_but(byte_size=None, records=None):
  """set_scratch as ROCr writes it, with byte_size / NUM_RECORDS replaced by a function of the plan."""
  real = AQLQueue.set_scratch
  def set_scratch(self, va, plan):
    real(self, va, plan)
    h = self.amd_queue.host
    if byte_size: ctypes.c_uint64.from_address(h + 168).value = byte_size(plan)
    if records: ctypes.c_uint32.from_address(h + 152).value = records(plan)
  return set_scratch

@pytest.mark.parametrize("byte_size, records, what", [
  (lambda p: p.size, lambda p: 0, "NUM_RECORDS 0 differs"),                       # the old backend: total size, no resource
  (lambda p: p.size, lambda p: p.size, "GPU memory fault"),                       # the total in both: XCCs 1-7 leave the buffer
  (lambda p: p.size // 64, lambda p: p.size // 64, "smaller than one XCC's scratch slots")])
def test_the_mock_aql_cp_faults_on_scratch_fields_rocr_would_not_write(byte_size, records, what, monkeypatch):
  """Audit s30 row 2: the mock spaces the XCCs by byte_size itself (one XCC's part, amd_aql_queue.cpp:1882-1883),
  stops the queue when that is smaller than WAVES x WAVESIZE (the XCCs' slots would overlap) or, on gfx9, when the
  buffer resource's NUM_RECORDS disagrees with it; a total in both puts XCCs 1-7 past the buffer (a VM fault)."""
  monkeypatch.setattr(AQLQueue, "set_scratch", _rocr_scratch_but(byte_size, records))
  d = _gfx942(monkeypatch)
  try:
    q = d.drv.queues[d.compute.queue_id]
    with pytest.raises(AMDError) as e: _run_stack(d, 16 * 64)
    assert what in f"{e.value} {q.error}"
  finally: uninstall_mock_amd(d.drv)

def test_gfx11_scratch_slots_count_per_shader_engine(monkeypatch):
  """Audit s30 row 5: on gfx11 WAVES counts slots per shader engine (amd_aql_queue.cpp:1800-1801) and a workgroup
  runs in one engine, so WAVES below the waves of a workgroup hangs even when WAVES x engines would hold it."""
  real = SCR.plan
  monkeypatch.setattr(SCR, "plan", lambda props, a, ws, n: dataclasses.replace(real(props, a, ws, n), waves=1))
  monkeypatch.setenv("AMD_AQL", "0")
  drv = install_mock_amd("gfx1100")
  try:
    d = AMDDevice("AMD"); d.wait_timeout_s = 20.0
    q = drv.queues[d.compute.queue_id]
    with pytest.raises(AMDError, match="queue stopped"): _run_stack(d)   # 64 work-items: 2 wave32 waves per group
    assert "WAVES 1 per shader engine" in q.error and "would hang" in q.error
  finally: uninstall_mock_amd(drv)

def test_gfx11_scratch_slots_of_each_engine_hold_whole_workgroups(monkeypatch):
  """WAVES 3 per engine with 2-wave workgroups: one workgroup per engine at a time, its two slots inside the
  engine's pool; the kernel's results are right."""
  real = SCR.plan
  monkeypatch.setattr(SCR, "plan", lambda props, a, ws, n: dataclasses.replace(real(props, a, ws, n), waves=3))
  monkeypatch.setenv("AMD_AQL", "0")
  drv = install_mock_amd("gfx1100")
  try:
    d = AMDDevice("AMD"); d.wait_timeout_s = 20.0; d.drv = drv
    j, out, _ = _run_stack(d, 64 * 16)
    np.testing.assert_array_equal(out, j * np.arange(len(out)) + j)
    s = _last_dispatch(d).scratch
    assert (s.slots, s.engines) == (3, 6)
  finally: uninstall_mock_amd(drv)

@pytest.mark.parametrize("device", [CONFIGS[0], CONFIGS[3]], indirect=True, ids=["gfx1100-pm4", "gfx942-aql"])
def test_a_superseded_scratch_buffer_is_freed_once_no_recorded_launch_names_it(device):
  """Audit s30 row 7: growing the scratch frees the smaller buffer once no launch record (a graph's queue) that names
  it in COMPUTE_DISPATCH_SCRATCH_BASE is left; a held record keeps it (AQL packets name none)."""
  j, out, small = _run_stack(device)
  first = device.scratch
  n = 256; bi, bo = device.allocator.alloc(4 * n), device.allocator.alloc(4 * n)
  held = device.hw_compute_queue().exec(small, small.fill_kernargs((bo, bi), (32,)), (n // 64, 1, 1), (64, 1, 1))
  device.program("stack", KA.compile_ir(KA.stack(), device.arch))   # grows the scratch
  assert device.scratch is not first
  gc.collect(); device.synchronize()
  assert first.freed == device.aql
  del held; gc.collect(); device.synchronize()
  assert first.freed and not device.scratch.freed
  j, out, _ = _run_stack(device, prog=small)
  np.testing.assert_array_equal(out, j * np.arange(len(out)) + j)
