"""Code objects end to end on the mock KFD: LLVM IR compiled with llvmlite for gfx1100, loaded by AMDProgram.from_elf
(sections laid out, R_AMDGPU_REL64 applied, arguments from the metadata note), launched through the PM4 queue and graph
replay, and executed by the mock's own RDNA3 emulator from the code in its GPU memory."""
import struct

import numpy as np
import pytest
from rdna3_kernels import KERNELS, compile_ir

from hcqrt.interface import GraphExec
from hcqrt.amd import codeobject
from hcqrt.amd.device import AMDDevice, AMDProgram
from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd
from ioctl_defs.amd import pm4

pytest.importorskip("llvmlite")

@pytest.fixture
def dev():
  drv = install_mock_amd("gfx1100")
  d = AMDDevice("AMD"); d.drv = drv
  yield d
  uninstall_mock_amd(drv)

def load(dev, name: str) -> AMDProgram: return dev.program(name, compile_ir(KERNELS[name]))

def put(dev, x: np.ndarray):
  b = dev.allocator.alloc(x.nbytes); dev.allocator.copyin(b, memoryview(x.tobytes())); return b

def get(dev, b, n: int, dt=np.float32) -> np.ndarray:
  out = bytearray(n * np.dtype(dt).itemsize); dev.allocator.copyout(memoryview(out), b)
  return np.frombuffer(out, dt)

def test_loader_relocates_the_descriptor_and_reads_the_arguments():
  obj = compile_ir(KERNELS["ids2d"])
  co = codeobject.read(obj, "ids2d")
  assert co.entry % 256 == 0 and co.kd_offset + struct.unpack_from("<q", co.image, co.kd_offset + 16)[0] == co.entry
  assert co.params == [(0, 8), (8, 4)] and co.kernarg_size == 12
  with pytest.raises(ValueError, match="no kernel descriptor nope.kd.*ids2d"): codeobject.read(obj, "nope")

def test_add_runs_from_the_code_object(dev):
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal(256).astype(np.float32), rng.standard_normal(256).astype(np.float32)
  prog = load(dev, "add_f32")
  ba, bb, bo = put(dev, a), put(dev, b), dev.allocator.alloc(1024)
  prog(bo, ba, bb, global_size=(4, 1, 1), local_size=(64, 1, 1), wait=True)
  np.testing.assert_array_equal(get(dev, bo, 256), a + b)
  d = dev.drv.queues[0].dispatches[-1]
  co = codeobject.read(compile_ir(KERNELS["add_f32"]), "add_f32")
  assert d.program == prog.code_va == prog.image.va + co.entry   # the mock runs the code it finds at COMPUTE_PGM_LO/HI
  assert bytes(dev.drv.vm.read(prog.image.va + co.kd_offset, 64)) == co.image[co.kd_offset:co.kd_offset + 64]   # relocated descriptor

def test_2d_grid_with_a_scalar_argument(dev):
  W, H = 24, 8   # blocks of 8x4, grid 3x2
  prog = load(dev, "ids2d")
  bo = dev.allocator.alloc(W * H * 4)
  prog(bo, global_size=(3, 2, 1), local_size=(8, 4, 1), vals=[W], wait=True)
  y, x = np.mgrid[0:H, 0:W]
  np.testing.assert_array_equal(get(dev, bo, W * H, np.int32).reshape(H, W), x * 1000 + y)

def test_lds_and_barrier_reduction(dev):
  a = np.random.default_rng(1).standard_normal(4 * 64).astype(np.float32)
  prog = load(dev, "reduce_lds")
  assert prog.kd.group_segment_fixed_size == 256
  ba, bo = put(dev, a), dev.allocator.alloc(16)
  prog(bo, ba, global_size=(4, 1, 1), local_size=(64, 1, 1), wait=True)
  np.testing.assert_allclose(get(dev, bo, 4), a.reshape(4, 64).sum(1), rtol=1e-5)

def _chain(dev, add):
  """t = a + b; u = t + b; out = u * a (mul_i32 semantics on ints) -- each kernel reads the previous one's output."""
  a = np.arange(256, dtype=np.float32); b = np.full(256, 2, np.float32)
  ba, bb, bt, bu = put(dev, a), put(dev, b), dev.allocator.alloc(1024), dev.allocator.alloc(1024)
  q = dev.hw_compute_queue().wait(dev.timeline_signal, dev.timeline_value - 1)
  for dst, src in ((bt, ba), (bu, bt)): q.exec(add, add.fill_kernargs([dst, src, bb]), (4, 1, 1), (64, 1, 1))
  q.signal(dev.timeline_signal, dev.timeline_value).submit(dev); dev.timeline_value += 1
  dev.synchronize()
  return get(dev, bu, 256), a + 2 * b

def test_dependent_chain_needs_the_barrier(dev, monkeypatch):
  add = load(dev, "add_f32")
  got, want = _chain(dev, add)
  np.testing.assert_array_equal(got, want)
  # without the CS_PARTIAL_FLUSH between launches the CP may run them together; the mock runs the second first
  monkeypatch.setattr(pm4, "event_write", lambda *a, **k: [])
  if dev.aql:   # an AQL queue orders launches with the packet header's barrier bit instead: clear it
    from ioctl_defs.amd import aql
    dispatch = aql.kernel_dispatch
    no_barrier = aql.header(aql.PACKET_TYPE_KERNEL_DISPATCH, False, aql.FENCE_SCOPE_SYSTEM, aql.FENCE_SCOPE_SYSTEM)
    monkeypatch.setattr(aql, "kernel_dispatch", lambda *a, **k: dispatch(*a, **k, hdr=no_barrier))
  got, want = _chain(dev, add)
  assert not np.array_equal(got, want)

def test_graph_replay_with_patched_pointers(dev):
  rng = np.random.default_rng(2)
  a, b, c = (rng.standard_normal(256).astype(np.float32) for _ in range(3))
  add = load(dev, "add_f32")
  ba, bb, bc, bt, bo = put(dev, a), put(dev, b), put(dev, c), dev.allocator.alloc(1024), dev.allocator.alloc(1024)
  g = dev.graph([GraphExec(add, [bt, ba, bb], [], (4, 1, 1), (64, 1, 1)), GraphExec(add, [bo, bt, bc], [], (4, 1, 1), (64, 1, 1))])
  g.replay(); dev.synchronize()
  np.testing.assert_array_equal(get(dev, bo, 256), a + b + c)
  g.replay(bufs={(0, 1): bc}); dev.synchronize()   # t = c + b
  np.testing.assert_array_equal(get(dev, bo, 256), c + b + c)
  assert dev.drv.queues[0].ib_count >= 2   # replays went through INDIRECT_BUFFER

def test_out_of_bounds_store_is_a_named_fault(dev):
  prog = load(dev, "ids2d")
  bo = dev.allocator.alloc(64)
  bad = bo.va + (1 << 32)
  with pytest.raises(Exception, match="GPU memory fault at 0x"):   # the queue runs later: KFD's memory event at the wait
    prog(bad, global_size=(1, 1, 1), local_size=(8, 4, 1), vals=[8], wait=True)
  faults = [ev["memory"] for ev in dev.drv.events.values() if "memory" in ev]   # KFD's memory event carries the address
  assert faults and all(bad <= va < bad + 32 * 4 for va in faults), [hex(v) for v in faults]

@pytest.mark.parametrize("report", [False, True])
def test_gfx942_illegal_instruction_traps_clearly(report):
  # gfx942 code runs on the gfx9 emulator; an encoding it does not know (here MIMG) traps the wave, and as on hardware
  # the host learns of the stopped queue through the CWSR header's error event; the mock's own reason comes only with
  # its explicit test switch
  drv = install_mock_amd("gfx942", kernel="6.12", report_queue_errors=report)
  try:
    d = AMDDevice("AMD")
    desc = struct.pack("<III4xq20xIIIHH4x", 0, 0, 8, 0, 0, 0x60AF0041, 2 << 1 | 1 << 7, 1 << 3, 0)
    prog = AMDProgram(d, "k", b"\x00\x00\x00\xf0" * 16, desc, [(0, 8)])
    with pytest.raises(Exception, match="MIMG encoding .* not supported by the gfx942 emulator" if report else "EC_QUEUE_WAVE_ILLEGAL_INSTRUCTION"):
      prog(d.allocator.alloc(64), global_size=(1, 1, 1), local_size=(64, 1, 1), wait=True)
  finally: uninstall_mock_amd(drv)

def test_kernel_reading_the_aql_packet_is_refused_by_name(dev):
  ir = """declare ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
define amdgpu_kernel void @dp(ptr addrspace(1) %out) {
  %d = call ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
  %p = getelementptr i8, ptr addrspace(4) %d, i64 4
  %x = load i16, ptr addrspace(4) %p
  %y = zext i16 %x to i32
  store i32 %y, ptr addrspace(1) %out
  ret void
}"""
  with pytest.raises(NotImplementedError, match="dp: the kernel reads the AQL dispatch_ptr"): dev.program("dp", compile_ir(ir))

def test_implicit_arguments_carry_the_launch_shape(dev):
  from hw_tests import kernels_amd as KA
  prog = dev.program("idx3", KA.compile_ir(KA.source("idx3"), dev.arch))
  assert {"hidden_block_count_x", "hidden_group_size_x"} <= set(prog.hidden)
  g, l = (2, 3, 2), (4, 2, 4)
  n = int(np.prod(g) * np.prod(l))
  bo = dev.allocator.alloc(4 * n)
  prog(bo, global_size=g, local_size=l, wait=True)
  np.testing.assert_array_equal(get(dev, bo, n, np.uint32), np.arange(n, dtype=np.uint32))
