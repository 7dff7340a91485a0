"""NV launches against the strict mock: ordering of dependent launches on a GPU model that overlaps unordered grids,
and the QMD / local-memory / window / prefetch / semaphore rules the mock checks as hardware would (issue 11,
defects 5-10). Each "refused" test puts the old behaviour back and shows the mock failing the channel."""
import contextlib, re, struct
import numpy as np
import pytest
from conftest import mock_nv_device
from hcqrt.interface import GraphExec
from hcqrt import syscalls
from hcqrt.hcq import GraphReplay
from hcqrt.mock.nv import MockNV, GPUError
from hcqrt.mock.nv import gpfifo as mock_gpfifo
from hcqrt.nv import device as D
from hcqrt.nv.device import NVDevice, NVComputeQueue, SUBC_COMPUTE, _CP, _H
from hcqrt.nv.rmclient import NVError
from hcqrt.nv.qmd_build import INITIAL_STACK_POINTER
from compiler.assemble.ptx_assembler import assemble_ptx
from ioctl_defs.nv.qmd import QMD
from hw_tests import kernels as K

@pytest.fixture
def nv():
  """A fresh mock H100 per test: a refused launch leaves its channel in an error state, as on hardware."""
  with mock_nv_device() as dev: yield dev

def prog(dev, name, src):
  return dev.program(name, assemble_ptx(K.head(dev.arch) + src, dev.arch))
def upload(dev, arr):
  b = dev.allocator.alloc(arr.nbytes); dev.allocator.copyin(b, memoryview(arr)); return b
def download(dev, b, n, dt=np.float32):
  out = np.zeros(n, dt); dev.allocator.copyout(memoryview(out), b); return out
@contextlib.contextmanager
def refused(dev, match: str):
  """The mock refuses a command: at the doorbell (GPUError), or, where the GPU got to it after the doorbell returned,
  as the fault the backend finds in the error notifier (NVError). Either way the mock recorded why (drv.faults)."""
  n = len(dev.drv.faults)
  with pytest.raises((GPUError, NVError)): yield
  assert len(dev.drv.faults) > n and re.search(match, dev.drv.faults[n]), dev.drv.faults[n:]

def no_barrier(monkeypatch):
  monkeypatch.setattr(NVComputeQueue, "barrier", lambda self: None)

# ---------------------------------------------------------------- ordering (defect 5)
def chain(dev, k=3, n=1024):
  """k dependent launches in ONE queue: b[i+1] = b[i] + b[0]; intermediates start as -1000 so a stale read shows."""
  add = prog(dev, "add", K.ADD)
  x = np.arange(n, dtype=np.float32)
  bufs = [upload(dev, x)] + [upload(dev, np.full(n, -1000, np.float32)) for _ in range(k)]
  q = dev.hw_compute_queue().wait(dev.timeline_signal, dev.timeline_value - 1)
  for i in range(k): q.exec(add, add.fill_kernargs([bufs[i + 1], bufs[i], bufs[0]], [1, n]), (n // 256, 1, 1), (256, 1, 1))
  q.signal(dev.timeline_signal, dev.timeline_value).submit(dev)
  dev.timeline_value += 1
  dev.synchronize()
  return download(dev, bufs[k], n), (k + 1) * x

def test_dependent_launches_are_ordered(nv):
  got, want = chain(nv)
  assert np.array_equal(got, want)

def test_launches_of_changing_geometry_each_run_as_asked(nv):
  """A program's QMD is kept per launch geometry (NVProgram.qmd_for) with only constant bank 0's address set per launch:
  geometries taking turns, and more of them than the memo keeps, each launch with its own arguments, all run as asked.
  A QMD of another geometry leaves elements unwritten or writes them twice; a stale bank address reads another
  launch's k."""
  add, n = prog(nv, "add", K.ADD), 300
  a, b = np.arange(n, dtype=np.float32), np.full(n, 0.5, np.float32)
  ba, bb = upload(nv, a), upload(nv, b)
  blocks = [256, 64, 256, 32, 64] + list(range(1, 71))
  outs = [upload(nv, np.full(n, -1000, np.float32)) for _ in blocks]
  for k, (blk, out) in enumerate(zip(blocks, outs)):
    add(out, ba, bb, global_size=(-(-n // blk), 1, 1), local_size=(blk, 1, 1), vals=(k, n))
  nv.synchronize()
  for k, (blk, out) in enumerate(zip(blocks, outs)):
    assert np.array_equal(download(nv, out, n), a + b * k), f"launch {k} with blocks of {blk}"

@pytest.mark.parametrize("arch", [None, "ampere", "blackwell"])   # V04_00 (the default mock, hopper), V03_00, V05_00
def test_geometries_sharing_a_block_or_a_grid_each_run_as_asked(arch):
  """Geometries that share a block but not a grid, or a grid and block.x but not block.y/z, in turns, on each QMD
  version: each launch runs exactly its own threads (a memo keyed on part of the geometry fails here)."""
  with mock_nv_device(arch) as nv:
    p = nv.program("idx3", assemble_ptx(K.head(nv.arch) + K.IDX3, nv.arch))
    geos = [((4, 1, 1), (32, 1, 1)), ((1, 1, 1), (32, 1, 1)), ((2, 3, 1), (32, 1, 1)), ((2, 3, 1), (32, 2, 1)),
            ((2, 3, 1), (32, 1, 2)), ((4, 1, 1), (32, 1, 1)), ((1, 1, 1), (32, 1, 1)), ((2, 3, 1), (32, 2, 1))]
    outs = []
    for g, l in geos:
      o = nv.allocator.alloc(4096 * 4); nv.allocator.copyin(o, memoryview(np.full(4096, 0xFFFFFFFF, np.uint32))); outs.append(o)
      p(o, global_size=g, local_size=l)
    nv.synchronize()
    for (g, l), o in zip(geos, outs):
      r = np.zeros(4096, np.uint32); nv.allocator.copyout(memoryview(r), o)
      n = int(np.prod(g) * np.prod(l))
      assert np.array_equal(r[:n], np.arange(n)) and (r[n:] == 0xFFFFFFFF).all(), (g, l)

def test_without_the_barrier_the_mock_overlaps_launches(nv, monkeypatch):
  no_barrier(monkeypatch)
  got, want = chain(nv)
  assert not np.array_equal(got, want)          # the consumer ran (partly) before its producer
  assert (got < 0).any()                         # ... and read the -1000 the producer had not overwritten yet

def test_barrier_is_wait_for_idle_between_launches(nv):
  add = prog(nv, "add", K.ADD)
  b = nv.allocator.alloc(64)
  q = nv.hw_compute_queue()
  q.exec(add, add.fill_kernargs([b, b, b], [1, 16]), (1, 1, 1), (16, 1, 1)).exec(add, add.fill_kernargs([b, b, b], [1, 16]), (1, 1, 1), (16, 1, 1))
  hdr = D.method_header(SUBC_COMPUTE, _CP["WAIT_FOR_IDLE"].offset, 1)
  assert q.q.count(hdr) == 2                     # before each launch (the queue cannot know what ran before it) ...
  q2 = nv.hw_compute_queue().signal(nv.timeline_signal, 0).exec(add, add.fill_kernargs([b, b, b], [1, 16]), (1, 1, 1), (16, 1, 1))
  assert q2.q.count(hdr) == 0                    # ... except right after a RELEASE_WFI release, which drained the engine

def graph(dev, n=512):
  add = prog(dev, "add", K.ADD)
  x = np.arange(n, dtype=np.float32)
  b = [upload(dev, x)] + [upload(dev, np.full(n, -1000, np.float32)) for _ in range(4)]
  g = GraphReplay(dev, [GraphExec(add, [b[i + 1], b[i], b[0]], [1, n], (n // 128, 1, 1), (128, 1, 1)) for i in range(4)])
  g.replay(wait=True)
  return download(dev, b[4], n), 5 * x

def test_graph_replay_orders_its_kernels(nv):
  got, want = graph(nv)
  assert np.array_equal(got, want)

def test_graph_replay_without_barrier_is_wrong(nv, monkeypatch):
  no_barrier(monkeypatch)
  got, want = graph(nv)
  assert not np.array_equal(got, want)

def test_release_without_wfi_is_seen_before_the_grid_finishes(nv, monkeypatch):
  # a signal released without RELEASE_WFI lets the copy engine copy the kernel's output before the kernel ran
  monkeypatch.setattr(D, "SEM_RELEASE_TS", _H["SEM_EXECUTE"].data(OPERATION="RELEASE", PAYLOAD_SIZE="64BIT"))
  n, add = 1024, prog(nv, "add", K.ADD)
  x = np.arange(n, dtype=np.float32)
  a, o, o2 = upload(nv, x), upload(nv, np.zeros(n, np.float32)), upload(nv, np.zeros(n, np.float32))
  s = nv.new_signal()
  nv.hw_copy_queue().wait(s, 1).copy(o2.va, o.va, 4 * n).signal(s, 2).submit(nv)     # parks on its acquire
  nv.hw_compute_queue().exec(add, add.fill_kernargs([o, a, a], [1, n]), (4, 1, 1), (256, 1, 1)).signal(s, 1).submit(nv)
  s.wait(2, 10)
  assert np.array_equal(download(nv, o, n), 2 * x) and not np.array_equal(download(nv, o2, n), 2 * x)

# ---------------------------------------------------------------- QMD as hardware reads it (defects 6, 7, 8, 9)
def test_qmd_fields_programmed(nv):
  p = prog(nv, "stack", K.stack())
  q = QMD(nv.qmd_version, data=p.qmd_template)
  assert q.get("QMD_TYPE") == 2                                  # GRID_CTA
  assert q.get("SHADER_LOCAL_MEMORY_HIGH_SIZE") >= p.kernel.local_bytes and q.get("SHADER_LOCAL_MEMORY_LOW_SIZE") == 0
  assert struct.unpack_from("<Q", p.cbuf0, 0x28)[0] == INITIAL_STACK_POINTER
  sw, lw = nv.windows()
  assert sw % (1 << 32) == 0 and struct.unpack_from("<QQ", p.cbuf0, 0x18) == (sw, lw)
  assert p.lib.size - p.kernel.text_offset - p.kernel.text_size >= 0x1000

def run_add(dev, p=None):
  p = p or prog(dev, "add", K.ADD)
  x = np.arange(256, dtype=np.float32)
  a, o = upload(dev, x), dev.allocator.alloc(1024)
  p(o, a, a, vals=(1, 256), global_size=(1, 1, 1), local_size=(256, 1, 1), wait=True)
  return download(dev, o, 256), 2 * x

def patch_qmd(p, **fields):
  q = QMD(p.qmd_version, data=p.qmd_template)
  for k, v in fields.items(): q.set(k, v)
  p.qmd_template = bytes(q.data)

def test_refuses_queue_type_qmd(nv):
  p = prog(nv, "add", K.ADD)
  patch_qmd(p, QMD_TYPE=0)                                       # the old QMD_TYPE (QUEUE)
  with refused(nv, "QMD_TYPE 0"): run_add(nv, p)

def test_refuses_too_few_registers(nv):
  p = prog(nv, "add", K.ADD)
  patch_qmd(p, REGISTER_COUNT=4)
  with refused(nv, "registers per thread"): run_add(nv, p)

def test_refuses_shared_and_barriers_the_kernel_lacks(nv):
  rev = prog(nv, "rev", K.REV)
  x = np.arange(256, dtype=np.float32)
  a, o = upload(nv, x), nv.allocator.alloc(1024)
  patch_qmd(rev, BARRIER_COUNT=0)
  with refused(nv, "BARRIER_COUNT"): rev(o, a, global_size=(1, 1, 1), local_size=(256, 1, 1), wait=True)

def test_refuses_shared_size_below_static(nv):
  rev = prog(nv, "rev", K.REV)
  x = np.arange(256, dtype=np.float32)
  a, o = upload(nv, x), nv.allocator.alloc(1024)
  patch_qmd(rev, SHARED_MEMORY_SIZE=0x400)
  with refused(nv, "static shared memory"): rev(o, a, global_size=(1, 1, 1), local_size=(256, 1, 1), wait=True)

def test_refuses_bad_sm_config(nv):
  p = prog(nv, "add", K.ADD)
  patch_qmd(p, MIN_SM_CONFIG_SHARED_MEM_SIZE=0x3A, TARGET_SM_CONFIG_SHARED_MEM_SIZE=0x3A, MAX_SM_CONFIG_SHARED_MEM_SIZE=0x1A)
  with refused(nv, "SM shared-memory config"): run_add(nv, p)

def run_stack(dev, p):
  n = 300
  x = (np.arange(n, dtype=np.float32) % 7) - 3
  a, o = upload(dev, x), dev.allocator.alloc(4 * n)
  p(o, a, vals=(n,), global_size=(2, 1, 1), local_size=(256, 1, 1), wait=True)
  return download(dev, o, n), K.stack_reference(x)

def test_stack_kernel_runs(nv):
  p = prog(nv, "stack", K.stack())
  assert p.kernel.local_bytes > 256                              # the local array + spills
  got, want = run_stack(nv, p)
  assert np.allclose(got, want, rtol=1e-5, atol=1e-3)

def test_refuses_stack_in_low_local_memory(nv):
  p = prog(nv, "stack", K.stack())
  q = QMD(p.qmd_version, data=p.qmd_template)
  patch_qmd(p, SHADER_LOCAL_MEMORY_LOW_SIZE=q.get("SHADER_LOCAL_MEMORY_HIGH_SIZE"), SHADER_LOCAL_MEMORY_HIGH_SIZE=0)   # the old programming
  with refused(nv, "SHADER_LOCAL_MEMORY_HIGH_SIZE is 0"): run_stack(nv, p)

def test_refuses_unset_stack_pointer(nv):
  p = prog(nv, "stack", K.stack())
  cb = bytearray(p.cbuf0); struct.pack_into("<Q", cb, 0x28, 0); p.cbuf0 = bytes(cb)   # c[0][0x28] never written
  with refused(nv, r"stack pointer c\[0\]\[0x28\]"): run_stack(nv, p)

def test_refuses_local_memory_total_as_per_tpc(nv):
  p = prog(nv, "stack", K.stack())
  size = nv.local_mem.size                                       # the old value: the whole buffer, not bytes per TPC
  q = NVComputeQueue().wait(nv.timeline_signal, nv.timeline_value - 1)
  q.method(SUBC_COMPUTE, _CP["SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A"].offset, size >> 32, size & 0xFFFFFFFF, 0xFF)
  q.signal(nv.timeline_signal, nv.timeline_value).submit(nv); nv.timeline_value += 1
  with refused(nv, "bytes per TPC"): run_stack(nv, p)

def test_refuses_unaligned_shared_window(nv):
  q = NVComputeQueue()
  q.method(SUBC_COMPUTE, _CP["SET_SHADER_SHARED_MEMORY_WINDOW_A"].offset, 0, 0xFE000000)   # the old window base
  q.signal(nv.timeline_signal, nv.timeline_value).submit(nv); nv.timeline_value += 1
  with refused(nv, "4 GiB aligned"): run_add(nv)

def test_refuses_short_prefetch_slack(nv, monkeypatch):
  monkeypatch.setattr(D, "PROGRAM_SLACK", 0x100)                # the old 0x100 bytes after the image
  p = prog(nv, "add", K.ADD)
  assert p.lib.size - p.kernel.text_offset - p.kernel.text_size < 0x1000
  with refused(nv, "instruction prefetch"): run_add(nv, p)

# ---------------------------------------------------------------- semaphores (defect 10)
def test_acquire_without_switch_tsg(nv):
  assert not _H["SEM_EXECUTE"].get("ACQUIRE_SWITCH_TSG", D.SEM_ACQUIRE)
  got, want = run_add(nv)
  assert np.array_equal(got, want)

def test_refuses_switch_tsg_between_channels_of_one_group(nv, monkeypatch):
  monkeypatch.setattr(D, "SEM_ACQUIRE", D.SEM_ACQUIRE | _H["SEM_EXECUTE"].value("ACQUIRE_SWITCH_TSG", "EN"))   # the old acquire
  with refused(nv, "ACQUIRE_SWITCH_TSG"): run_add(nv)

@pytest.mark.parametrize("arch", ["ampere", "ada", "blackwell"])
def test_other_archs_stack_and_order(arch, monkeypatch):
  with syscalls.installed(MockNV(arch=arch)):
    dev = NVDevice("NV")
    got, want = run_stack(dev, prog(dev, "stack", K.stack()))
    assert np.allclose(got, want, rtol=1e-5, atol=1e-3)
    got, want = chain(dev)
    assert np.array_equal(got, want)
    no_barrier(monkeypatch)
    got, want = chain(dev)
    assert not np.array_equal(got, want)

def test_mock_knows_the_slices():
  assert mock_gpfifo.INTERLEAVE_SLICES > 1 and mock_gpfifo.PREFETCH_SLACK == 0x1000

# ---------------------------------------------------------------- the mock's kernel lookup
DEAD_LOAD = """.visible .entry dead_load(.param .u64 out, .param .u64 x)
{
  .reg .b32 %r<4>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [x];
  ld.global.u32 %r1, [%rd2]; and.b32 %r2, %r1, 0; st.global.u32 [%rd1], %r2;
  ret;
}"""
STORE_ZERO = """.visible .entry store_zero(.param .u64 out)
{
  .reg .b32 %r<2>; .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out]; mov.u32 %r1, 0; st.global.u32 [%rd1], %r1;
  ret;
}"""

def test_same_machine_code_from_two_ptx_kernels_runs_as_the_gpu_would(nv):
  """ptxas drops the unused load of `x & 0`, so both kernels are the same machine code, and the GPU runs a launch of
  store_zero with its one parameter fine. The mock must not interpret dead_load's PTX for it (it would load through
  the parameter the launch never set and fault)."""
  from hcqrt.mock.nv.kernels import cubin_facts
  texts = [code for src in (DEAD_LOAD, STORE_ZERO) for code, _ in cubin_facts(assemble_ptx(K.head(nv.arch) + src, nv.arch)).values()]
  assert texts[0] == texts[1], "ptxas kept the dead load: the two kernels no longer share machine code"
  prog(nv, "dead_load", DEAD_LOAD)   # known to the mock first
  zero = prog(nv, "store_zero", STORE_ZERO)
  out = upload(nv, np.full(4, 7, np.uint32))
  q = nv.hw_compute_queue().wait(nv.timeline_signal, nv.timeline_value - 1)
  q.exec(zero, zero.fill_kernargs([out], []), (1, 1, 1), (1, 1, 1)).signal(nv.timeline_signal, nv.timeline_value).submit(nv)
  nv.timeline_value += 1
  nv.synchronize()
  assert download(nv, out, 4, np.uint32).tolist() == [0, 7, 7, 7]

def test_timestamp_release_needs_16_byte_alignment(nv):
  """RELEASE_TIMESTAMP writes 16 bytes, so an address that is not 16-byte aligned is an error (dev_pbdma.ref.txt:3861-3868)."""
  s = nv.new_signal()
  q = nv.hw_compute_queue()
  q._sem(s.va + 8, 1, D.SEM_RELEASE_TS)
  with pytest.raises((GPUError, NVError), match="misaligned for a timestamp"): q.submit(nv)

def test_timestamp_is_written_before_the_payload(nv, monkeypatch):
  """dev_pbdma.ref.txt:3869-3871: the timestamp lands first, so a host that sees the payload reads a current time."""
  s, order = nv.new_signal(), []
  real = mock_gpfifo.Channel.write
  def spy(self, addr, data, *a):
    if s.va <= addr < s.va + 16: order.append(addr - s.va)
    return real(self, addr, data, *a)
  monkeypatch.setattr(mock_gpfifo.Channel, "write", spy)
  nv.hw_compute_queue().signal(s, 5).submit(nv)
  s.wait(5, 10)
  assert order == [8, 0] and s.release_timestamp > 0
