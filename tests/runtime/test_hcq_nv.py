"""The HCQ core and the NV backend, driven through the syscall seam against the NV mock (RM + UVM + GPFIFO
engine running kernels with the PTX interpreter). Kernels are hand-written PTX assembled by NVIDIA's
assembler; the frontend test at the end goes through the PTX renderer."""
import ctypes, re, struct, time
import numpy as np
import pytest
from hcqrt.interface import GraphCopy, GraphExec, GraphTimestamp
from hcqrt import syscalls
from hcqrt.hcq import GraphReplay, SignalTimeout
from hcqrt.mock.nv import MockNV, GPUError
from hcqrt.nv.device import NVDevice, NVComputeQueue, NVCopyQueue, SUBC_COMPUTE, _H
from hcqrt.nv.rmclient import NVError
from compiler.assemble.ptx_assembler import assemble_ptx
from tests.held_gpu import wait_until_idle
from ioctl_defs.nv import UnsupportedDriverVersion, CLASSES as C

pytestmark = pytest.mark.usefixtures("gc_walks_only_this_modules_objects")   # (its tests gc.collect() to run finalizers)

def ptx_add(target="sm_90", version="8.0"):
  """out[i] = a[i] + b[i] * k for i < n (k, n: u32 ints after the pointers): the conformance suite's kernel."""
  from hw_tests.kernels import ADD
  return f".version {version}\n.target {target}\n.address_size 64\n{ADD}"

@pytest.fixture(scope="module")
def nv():
  drv = MockNV()
  with syscalls.installed(drv):
    dev = NVDevice("NV")
    dev.drv = drv
    yield dev

@pytest.fixture(scope="module")
def add(nv): return nv.program("add", assemble_ptx(ptx_add(), "sm_90"))

def upload(dev, arr):
  b = dev.allocator.alloc(arr.nbytes); dev.allocator.copyin(b, memoryview(arr)); return b
def download(dev, b, n, dt=np.float32):
  out = np.zeros(n, dt); dev.allocator.copyout(memoryview(out), b); return out

# ---- bring-up ----
def test_bringup_hopper(nv):
  p = nv.properties()
  assert (p["arch"], p["qmd"], p["gpfifo"], p["compute"], p["copy"]) == ("sm_90", "V04_00", "HOPPER_CHANNEL_GPFIFO_A", "HOPPER_COMPUTE_A", "HOPPER_DMA_COPY_A")
  assert nv.renderer == "ptx" and nv.driver_version == "580.142" and nv.memory_bytes == 80 << 30 and nv.uuid == nv.drv.uuid
  chans = nv.drv.channels()
  assert len(chans) == 2 and all(c.data["enabled"] for c in chans)
  assert {c.cls for ch in chans for c in ch.children} == {C["HOPPER_COMPUTE_A"], C["HOPPER_DMA_COPY_A"]}
  assert nv.compute_ch.token != nv.copy_ch.token

@pytest.mark.parametrize("arch,sm,qmd,compute", [("ampere", 86, "V03_00", "AMPERE_COMPUTE_B"), ("ada", 89, "V03_00", "ADA_COMPUTE_A"),
                                                  ("blackwell", 100, "V05_00", "BLACKWELL_COMPUTE_A")])
def test_other_architectures_launch(arch, sm, qmd, compute):
  with syscalls.installed(MockNV(arch=arch)):
    dev = NVDevice("NV")
    assert (dev.arch, dev.qmd_version, dev.properties()["compute"]) == (f"sm_{sm}", qmd, compute)
    prog = dev.program("add", assemble_ptx(ptx_add(f"sm_{sm}", "8.7"), f"sm_{sm}"))
    x = np.arange(300, dtype=np.float32)
    a, o = upload(dev, x), dev.allocator.alloc(1200)
    prog(o, a, a, vals=(2, 300), global_size=(2, 1, 1), local_size=(256, 1, 1), wait=True)
    assert np.array_equal(download(dev, o, 300), 3 * x)

def test_unsupported_driver_and_errors():
  with syscalls.installed(MockNV(version="470.256.02", layout_version="580.142")):
    with pytest.raises(UnsupportedDriverVersion, match="470.256.02"): NVDevice("NV")
  with syscalls.installed(MockNV()):
    with pytest.raises(RuntimeError, match="reports 1 NVIDIA GPU"): NVDevice("NV:1")
    dev = NVDevice("NV")
    with pytest.raises(NVError, match="RM_ALLOC of ADA_COMPUTE_A .* NV_ERR_INVALID_CLASS") as e: dev.rm.alloc(dev.hdev, C["ADA_COMPUTE_A"])
    assert e.value.status_name == "NV_ERR_INVALID_CLASS"
    with pytest.raises(NVError, match="video memory.*NV_ERR_NO_MEMORY"): dev.gpu_alloc(200 << 30)
    with pytest.raises(RuntimeError, match="cubin is for sm_89"): dev.program("add", assemble_ptx(ptx_add("sm_89"), "sm_89"))

# ---- memory ----
@pytest.mark.parametrize("n", [1, 4097, (5 << 20) + 3])
def test_copy_roundtrip(nv, n):
  x = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
  b = upload(nv, x)
  assert np.array_equal(download(nv, b, n, np.uint8), x)
  c = nv.allocator.alloc(n)
  nv.allocator.transfer(c, b, n)
  assert np.array_equal(download(nv, c, n, np.uint8), x)
  for buf in (b, c): nv.allocator.free(buf)
  with pytest.raises(RuntimeError, match="double free"): nv.allocator.free(b)
  with pytest.raises(RuntimeError, match="copyin to"): nv.allocator.copyin(b, memoryview(x))
  # the allocator keeps freed memory for reuse; flushed, it is gone from the GPU's address space
  nv.allocator.flush()
  assert nv.drv.channels()[0].data["vaspace"].data["va"].overlaps(b.va, b.size) is False

def test_allocator_reuses_freed_memory_without_ioctls(nv, monkeypatch):
  al = nv.allocator
  a = al.alloc(5000)
  al.free(a)
  calls = []
  real = syscalls.ioctl
  monkeypatch.setattr(syscalls, "ioctl", lambda *args: calls.append(args[1]) or real(*args))
  b = al.alloc(6000)                        # same 8 KiB of pages: the freed memory, no RM/UVM call and no GPU wait
  assert b.va == a.va and b.nbytes == 6000 and not calls and al.cached_bytes == 0
  x = np.arange(1500, dtype=np.float32)
  al.copyin(b, memoryview(x)); assert np.array_equal(download(nv, b, 1500), x)
  c = al.alloc(3 << 20)                     # another size: fresh memory from the driver
  assert calls and c.va != b.va
  old_limit, al.cache_limit = al.cache_limit, 8192
  try:
    al.free(b); al.free(c)                  # c alone exceeds the limit: returned to the driver at once
    assert al.cached_bytes == 8192 and list(al.cache) == [(8192, False)]
  finally: al.cache_limit = old_limit
  al.flush(); assert al.cached_bytes == 0 and not al.cache

def test_host_mapped_and_sysmem(nv):
  b = nv.gpu_alloc(8192, host=True, sysmem=True)
  b.view()[:5] = b"hello"
  vs = nv.drv.channels()[0].data["vaspace"].data["va"]
  assert vs.read(b.va, 5) == b"hello" and b.host == b.va   # CPU and GPU use the same address
  nv.gpu_free(b)

# ---- launches ----
def test_launch_matches_numpy(nv, add):
  n = 1000
  x, y = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
  a, b, o = upload(nv, x), upload(nv, y), nv.allocator.alloc(4 * n)
  t = add(o, a, b, vals=(3, n), global_size=(4, 1, 1), local_size=(256, 1, 1), wait=True)
  assert t is not None and t >= 0
  np.testing.assert_allclose(download(nv, o, n), x + 3 * y, rtol=1e-6)
  k = add.kernel
  assert add.params[0][0] == k.param_cbank_offset == 0x210 and [s for _, s in add.params] == [8, 8, 8, 4, 4]

# ---- signals ----
def test_signals_and_timeout(nv):
  s = nv.new_signal(name="sigA")
  nv.hw_copy_queue().timestamp(s).signal(s, 5).submit(nv)   # the value last: the GPU may run what follows a release later
  s.wait(5, 1.0)
  assert s.value == 5 and s.timestamp > 0 and s.release_timestamp > 0
  big = (1 << 40) + 7   # 64-bit payloads survive
  nv.hw_compute_queue().signal(s, big).submit(nv)
  s.wait(big, 1.0)
  with pytest.raises(SignalTimeout, match=r"NV.*sigA.*reach 1099511627784.*last completed value is 1099511627783.*NVComputeQueue"):
    s.wait(big + 1, 0.05)
  s.free()

def test_queue_waits_for_cpu_and_other_queue(nv, add):
  gate, done = nv.new_signal(name="gate"), nv.new_signal(name="done")
  x = np.ones(64, np.float32)
  a, o = upload(nv, x), nv.allocator.alloc(256)
  args = add.fill_kernargs([o, a, a], [1, 64])
  nv.hw_compute_queue().wait(gate, 2).exec(add, args, (1, 1, 1), (64, 1, 1)).signal(done, 1).submit(nv)
  time.sleep(0.02)
  assert done.value == 0   # parked on the acquire
  nv.hw_copy_queue().signal(gate, 1).submit(nv)
  time.sleep(0.02)
  assert done.value == 0   # 1 < 2: still parked
  gate.value = 2           # a CPU write: the GPU notices on its own (the mock's poller)
  done.wait(1, 2.0)
  assert np.array_equal(download(nv, o, 64), 2 * x)

# ---- patch and resubmit ----
def test_patch_and_resubmit(nv, add):
  n = 128
  x = np.arange(n, dtype=np.float32)
  a, o1, o2 = upload(nv, x), nv.allocator.alloc(4 * n), nv.allocator.alloc(4 * n)
  s = nv.new_signal()
  args = add.fill_kernargs([o1, a, a], [1, n], persistent=True)
  q = NVComputeQueue().exec(add, args, (1, 1, 1), (n // 2, 1, 1)).signal(s, 1)
  q.submit(nv); s.wait(1)
  assert np.array_equal(download(nv, o1, n)[: n // 2], 2 * x[: n // 2]) and not download(nv, o1, n)[n // 2:].any()
  args.set_buffer(0, o2.va); args.set_int(0, 4)          # argument pointer and int
  q.update_exec(0, global_size=(2, 1, 1)).update_signal(1, value=2)
  q.submit(nv); s.wait(2)
  assert np.array_equal(download(nv, o2, n), 5 * x)
  q.bind(nv)                                                 # prebuilt in GPU memory; updates patch it there
  q.update_signal(1, value=3).submit(nv); s.wait(3)
  with pytest.raises(IndexError, match="not a wait"): q.update_wait(1, value=1)
  c = NVCopyQueue().copy(o1.va, o2.va, 16).signal(s, 4)
  c.submit(nv); s.wait(4)
  c.update_copy(0, dst=o2.va, src=a.va).update_signal(1, value=5).submit(nv); s.wait(5)
  assert np.array_equal(download(nv, o2, n)[:4], x[:4])

# ---- graph replay ----
def test_graph_replay(nv, add):
  n = 256
  x = np.arange(n, dtype=np.float32)
  b = [upload(nv, x) for _ in range(2)] + [nv.allocator.alloc(4 * n) for _ in range(4)]
  items = [GraphExec(add, [b[2], b[0], b[1]], [1, n], (1, 1, 1), (n, 1, 1)),      # b2 = b0 + b1
           GraphCopy(b[3], b[2], 4 * n),                                          # b3 = b2
           GraphExec(add, [b[4], b[3], b[2]], [2, n], (1, 1, 1), (n, 1, 1)),      # b4 = b3 + 2 b2
           GraphExec(add, [b[5], b[4], b[0]], [1, n], (1, 1, 1), (n, 1, 1))]      # b5 = b4 + b0
  g = GraphReplay(nv, items)
  g.replay(wait=True)
  assert np.array_equal(download(nv, b[5], n), 7 * x)
  assert np.array_equal(download(nv, b[4], n), 6 * x)
  # patch: the first launch reads b5 instead of b0, and its int k becomes 3
  g.replay(bufs={(0, 1): b[5]}, vals={(0, 0): 3}, wait=True)
  np.testing.assert_array_equal(download(nv, b[2], n), 7 * x + 3 * x)
  np.testing.assert_array_equal(download(nv, b[5], n), 3 * 10 * x + x)
  doorbells = []
  orig = nv.drv.engine.ring
  nv.drv.engine.ring = lambda tok: (doorbells.append(tok), orig(tok))
  try: g.replay(wait=True)
  finally: nv.drv.engine.ring = orig
  assert sorted(doorbells) == sorted([nv.compute_ch.token, nv.copy_ch.token])   # one doorbell per engine used

def test_graph_memory_returns_when_the_graph_goes(nv, add):
  """A graph's argument blocks and pushbuffers live outside the launch rings; when the graph is collected they go back
  to the device once its last replay is done (listed free at the next synchronize or graph build), and the next graph
  of the same shape reuses them: re-capturing jitted functions does not grow GPU memory."""
  import gc
  n = 64
  x = np.arange(n, dtype=np.float32)
  a, o = upload(nv, x), nv.allocator.alloc(4 * n)
  items = [GraphExec(add, [o, a, a], [1, n], (1, 1, 1), (n, 1, 1))] * 3
  g = GraphReplay(nv, items)
  g.replay()
  arena = [(r.buf.va, r.off) for r in nv._arena]
  # (GPU past the replay: idle, not only the timeline reached; the graph signal is released after it, in a release stall)
  del g; gc.collect(); nv.synchronize(); wait_until_idle(nv.drv); nv.synchronize()
  freed = sorted(va for blocks in nv._persistent_free.values() for _, va in blocks)
  assert len(freed) >= 4   # three argument blocks and at least one pushbuffer
  for _ in range(3):
    g = GraphReplay(nv, items)
    g.replay(wait=True); wait_until_idle(nv.drv)   # (the next build reuses the blocks once the graph signal landed)
    np.testing.assert_array_equal(download(nv, o, n), 2 * x)
    del g; gc.collect()
  assert [(r.buf.va, r.off) for r in nv._arena] == arena   # nothing new was carved from the arena
  nfree = lambda: sum(len(b) for b in nv._persistent_free.values())
  nv.synchronize()   # (lists the last graph's blocks free: the GPU is past it)
  before = nfree()
  with pytest.raises(TypeError, match="is not a GraphExec"): GraphReplay(nv, items + [("bogus",)])
  assert nfree() == before   # a graph that failed to build gave back the blocks it had taken

def test_graph_replay_is_one_submission(nv, add, monkeypatch):
  """A replay of 20 kernels rings the doorbell once and pushes one GPFIFO entry, where 20 launches ring it 20 times
  (the host cost of a replay is timed in bench/hcq_bench.py, not here: timings flake on a loaded machine)."""
  n = 32
  bufs = [nv.allocator.alloc(4 * n) for _ in range(3)]
  g = GraphReplay(nv, [GraphExec(add, bufs, [1, n], (1, 1, 1), (n, 1, 1))] * 20)
  g.replay(wait=True)
  rings = []
  real = syscalls.mmio_write32
  monkeypatch.setattr(syscalls, "mmio_write32", lambda addr, v: (rings.append(v), real(addr, v))[1])
  for _ in range(20): add(*bufs, vals=(1, n), global_size=(1, 1, 1), local_size=(n, 1, 1))
  nv.synchronize()
  launches, rings[:] = len(rings), []
  g.replay(wait=True)
  assert launches >= 20 and len(rings) == 1, (launches, rings)

# ---- the mock refuses what hardware would ----
def test_invalid_methods_fail_loudly():
  with syscalls.installed(MockNV()):
    dev = NVDevice("NV")
    q = NVComputeQueue(); q.method(SUBC_COMPUTE, 0x1230, 1)
    with pytest.raises(GPUError, match="method 0x1230 is not a HOPPER_COMPUTE_A method.*recovered"): q.submit(dev)
    s = dev.new_signal()   # the device recreated its channels after the error (issue 16): later work runs
    NVComputeQueue().signal(s, 1).submit(dev); s.wait(1, 5.0)
    c = NVCopyQueue(); c.method(2, 0x300, 0)
    with pytest.raises(GPUError, match="subchannel 2, which has no object"): c.submit(dev)
  with syscalls.installed(MockNV()):
    dev = NVDevice("NV")
    c = NVCopyQueue(); c.method(0, _H["SET_OBJECT"].offset, C["HOPPER_COMPUTE_A"])
    with pytest.raises(GPUError, match="SET_OBJECT HOPPER_COMPUTE_A"): c.submit(dev)
  with syscalls.installed(MockNV()):
    dev = NVDevice("NV")
    with pytest.raises(GPUError, match="page fault"): dev.hw_copy_queue().copy(0x12340000, dev.timeline_signal.va, 8).submit(dev)
  with syscalls.installed(MockNV()):
    dev = NVDevice("NV")
    prog = dev.program("add", assemble_ptx(ptx_add(), "sm_90"))
    args = prog.fill_kernargs([0, 0, 0], [1, 1])
    struct.pack_into("<I", (ctypes.c_char * 384).from_address(args.extra[0]), 72, 0)   # zero the dword holding QMD_MAJOR_VERSION
    q = NVComputeQueue()
    q.method(SUBC_COMPUTE, 0x2B4, args.extra[1] >> 8); q.method(SUBC_COMPUTE, 0x2C0, 3)
    with pytest.raises(GPUError, match="QMD .* major version 0"): q.submit(dev)

# ---- the CPU backend behind the same interfaces ----
def test_cpu_hcq_graph(tmp_path):
  import subprocess
  from hcqrt.cpu.hcq import CPUHCQDevice
  (tmp_path / "k.c").write_text("void add(float *o, const float *a, const float *b, int k, int n, int core) { if (core) return; "
                                "for (int i = 0; i < n; i++) o[i] = a[i] + k * b[i]; }")
  subprocess.run(["cc", "-c", "-O2", "-fPIC", str(tmp_path / "k.c"), "-o", str(tmp_path / "k.o")], check=True)
  dev = CPUHCQDevice()
  prog = dev.hcq_program("add", (tmp_path / "k.o").read_bytes())
  x = np.arange(8, dtype=np.float32)
  b = [dev.allocator.alloc(32) for _ in range(4)]
  for i in (0, 1): dev.allocator.copyin(b[i], memoryview(x))
  g = GraphReplay(dev, [GraphExec(prog, [b[2], b[0], b[1]], [2, 8], (1,), (1,)), GraphCopy(b[3], b[2], 32)])
  g.replay(wait=True)
  assert np.frombuffer(b[3].view(), np.float32).tolist() == (3 * x).tolist()
  g.replay(vals={(0, 0): 5}, wait=True)
  assert np.frombuffer(b[3].view(), np.float32).tolist() == (6 * x).tolist()
  s = dev.new_signal(name="cpu-sig")
  with pytest.raises(SignalTimeout, match="cpu-sig"): s.wait(1, 0.01)

# ---- the frontend on NV ----
def test_frontend_on_nv_mock(nv, monkeypatch):
  from hcqrt.device import Device
  from frontend import Tensor
  # the registry's NV is our mock-backed device for this test only: the module's mock is uninstalled after it, and a
  # later test opening NV must get a device of its own
  if "NV" not in Device._opened: monkeypatch.setitem(Device._opened, "NV", nv)
  rng = np.random.default_rng(0)
  a, b = rng.random((5, 7), dtype=np.float32), rng.random((7, 3), dtype=np.float32)
  np.testing.assert_allclose((Tensor(a, device="NV") + 1).numpy(), a + 1, rtol=1e-6)
  np.testing.assert_allclose((Tensor(a, device="NV") * 2).sum(axis=1).numpy(), (2 * a).sum(1), rtol=1e-5)
  np.testing.assert_allclose((Tensor(a, device="NV") @ Tensor(b, device="NV")).relu().numpy(), np.maximum(a @ b, 0), rtol=1e-5)

def test_graph_timestamps_bracket_the_kernels(nv, add):
  """GraphTimestamp(signal) items: GPU clock releases on the compute queue, rewritten by every replay (bench timing)."""
  n = 64
  x = np.arange(n, dtype=np.float32)
  a, o = upload(nv, x), nv.allocator.alloc(4 * n)
  t0, t1 = nv.new_signal(name="t0"), nv.new_signal(name="t1")
  g = GraphReplay(nv, [GraphTimestamp(t0), GraphExec(add, [o, a, a], [1, n], (1, 1, 1), (n, 1, 1)), GraphTimestamp(t1)])
  g.replay(wait=True)
  first = (t0.timestamp, t1.timestamp)
  assert 0 < first[0] <= first[1]
  np.testing.assert_array_equal(download(nv, o, n), 2 * x)
  g.replay(wait=True)
  assert first[1] <= t0.timestamp <= t1.timestamp   # the second replay wrote new times

# a kernel no other test assembles (its constant is in its SASS), so the mock's index cannot have learned it before
PROBE = """.version 8.0\n.target sm_90\n.address_size 64
.visible .entry evict_probe(.param .u64 out)
{ .reg .b32 %r<2>; .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd1, %rd1; mov.u32 %r1, 0x5EED4501; st.global.u32 [%rd1], %r1; ret; }"""

def test_launch_of_a_cubin_whose_ptx_was_evicted_fails_by_name(monkeypatch):
  # the assembler keeps the PTX of its last PTX_OF_CUBIN_MAX cubins; the mock learns them at a launch: one assembled
  # and pushed out before its first launch can't be run, and the launch says why instead of running something else
  from compiler.assemble import ptx_assembler as pa
  monkeypatch.setattr(pa, "PTX_OF_CUBIN_MAX", 1, raising=False)
  monkeypatch.setattr(pa, "_ptx_of_cubin", type(pa._ptx_of_cubin)())
  with syscalls.installed(drv := MockNV()):
    dev = NVDevice("NV")
    prog = dev.program("evict_probe", assemble_ptx(PROBE, "sm_90"))
    assemble_ptx(ptx_add(), "sm_90")
    out = dev.allocator.alloc(64)
    with pytest.raises(NVError, match="Xid 13"): prog(out, global_size=(1, 1, 1), local_size=(1, 1, 1), wait=True)
    assert re.search(r"no known kernel at program address .*the last 1 \(PTX_OF_CUBIN_MAX\)", drv.faults[-1]), drv.faults[-1]
