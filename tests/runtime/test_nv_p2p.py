"""Issue 26 stage 2 on NVIDIA: P2P caps, peer access, copy-engine peer pushes, bounces and cross-device waits, on the NV
mock with two GPUs linked as MOCKGPU_P2P says (pcie, nvlink, none). Every mock behaviour tested here cites its source in
hcqrt/mock/nv (rm.py _ctrl_nv0000_ctrl_cmd_system_get_p2p_caps_v2, uvm.py enable/disable_peer_access, peer_enabled)."""
import errno
import numpy as np
import pytest
from hcqrt import syscalls
from hcqrt.hcq import HCQDevice
from hcqrt.interface import copy_between
from hcqrt.mock.nv import GPUError, MockNV
from hcqrt.nv.device import NVDevice
from hcqrt.nv.rmclient import NVError
from ioctl_defs.nv import flags as F
from ioctl_defs.nv.status import NV_STATUS
from compiler.assemble.ptx_assembler import assemble_ptx
from hw_tests import kernels as K
from tests.held_gpu import held_until_the_host_waits

V = F.VALUES

def open_pair(p2p: str):
  drv = syscalls.install(MockNV(count=2, p2p=p2p))
  return drv, NVDevice("NV"), NVDevice("NV:1")

@pytest.fixture
def pair(request):
  drv, d0, d1 = open_pair(getattr(request, "param", "pcie"))
  try: yield drv, d0, d1
  finally:
    for g in drv.gpus: g.engine.release()   # (a test that failed inside a hold leaves nothing queued)
    syscalls.uninstall(drv)

def up(dev, arr):
  b = dev.allocator.alloc(arr.nbytes); dev.allocator.copyin(b, memoryview(arr.reshape(-1).view(np.uint8))); return b
def down(dev, b, n, dt=np.float32):
  out = np.empty(n, dt); dev.allocator.copyout(memoryview(out.view(np.uint8)), b); return out
def caps(dev, ids, count=None):
  return dev.rm.control(dev.rm.root, "NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2", gpuIds=ids, gpuCount=len(ids) if count is None else count)
def bit(name): return F.drf(f"NV0000_CTRL_SYSTEM_GET_P2P_CAPS_{name}_SUPPORTED", 1)
def enable(d, a, b): return d.rm.uvm(d.uvmfd, "UVM_ENABLE_PEER_ACCESS", gpuUuidA={"uuid": list(a.uuid)}, gpuUuidB={"uuid": list(b.uuid)})
def logged(drv, what): return [e for e in drv.log if e[0] == what]

# ---------------------------------------------------------------- caps
@pytest.mark.parametrize("pair,want_caps,want_status,status", [
  ("pcie", ("READS", "WRITES", "PCI", "PROP"), ("PCI", "PROP"), "ok: pcie"),
  ("nvlink", ("READS", "WRITES", "NVLINK", "ATOMICS"), ("NVLINK", "ATOMICS"), "ok: nvlink"),
  ("none", (), (), "no-p2p: IOH_TOPOLOGY_NOT_SUPPORTED")], indirect=["pair"])
def test_p2p_caps_per_topology(pair, want_caps, want_status, status):
  _, d0, d1 = pair
  r = caps(d0, [d0.gpu_id, d1.gpu_id])
  assert r.p2pCaps == sum(bit(c) for c in want_caps)
  st = {k: r.p2pCapsStatus[V[f"NV0000_CTRL_P2P_CAPS_INDEX_{k}"]] for k in ("READ", "WRITE", "NVLINK", "ATOMICS", "PROP", "LOOPBACK", "PCI")}
  rw = "NV0000_P2P_CAPS_STATUS_" + ("IOH_TOPOLOGY_NOT_SUPPORTED" if status.startswith("no") else "OK")
  assert st["READ"] == st["WRITE"] == V[rw]
  for k in ("NVLINK", "ATOMICS", "PROP", "LOOPBACK", "PCI"):
    assert st[k] == V["NV0000_P2P_CAPS_STATUS_OK" if k in want_status else "NV0000_P2P_CAPS_STATUS_NOT_SUPPORTED"], k
  assert all(r.busPeerIds[i] == V["NV0000_CTRL_SYSTEM_GET_P2P_CAPS_INVALID_PEER"] for i in range(4))
  assert d0.peer_status(d1) == d1.peer_status(d0) == status

def test_p2p_caps_refusals_and_loopback(pair):
  _, d0, d1 = pair
  for count in (0, 33):   # gpuCount 1..32
    with pytest.raises(NVError, match="NV_ERR_INVALID_ARGUMENT"): caps(d0, [d0.gpu_id, d1.gpu_id], count)
  with pytest.raises(NVError, match="NV_ERR_INVALID_ARGUMENT"): caps(d0, [d0.gpu_id, 0x300])   # no such GPU
  loop = caps(d0, [d0.gpu_id, d0.gpu_id])   # the same id twice: one GPU, loopback over its own PCIe path
  assert loop.p2pCaps & bit("LOOPBACK") and loop.p2pCapsStatus[V["NV0000_CTRL_P2P_CAPS_INDEX_LOOPBACK"]] == 0

def test_mockgpu_p2p_per_pair_and_bad_spec():
  drv = MockNV(count=3, p2p="0-1:nvlink,1-2:none")
  assert (drv.link(0, 1), drv.link(1, 2), drv.link(0, 2), drv.link(2, 2)) == ("nvlink", "none", "pcie", "pcie")
  with pytest.raises(ValueError, match="MOCKGPU_P2P"): MockNV(count=2, p2p="0-5:pcie")
  with pytest.raises(ValueError, match="MOCKGPU_P2P"): MockNV(count=2, p2p="fast")

# ---------------------------------------------------------------- peer access (UVM)
def test_pcie_enable_rules(pair):
  _drv, d0, d1 = pair
  with pytest.raises(NVError, match="NV_ERR_INVALID_DEVICE"): enable(d0, d0, d1)   # GPU 1 not registered in d0's VA space
  d0._register_peer_gpu(d1)
  with pytest.raises(NVError, match="NV_ERR_INVALID_DEVICE"): enable(d0, d0, d0)   # the same GPU
  enable(d0, d0, d1)
  with pytest.raises(NVError, match="NV_ERR_INVALID_DEVICE"): enable(d0, d1, d0)   # already enabled (either order)
  y = d1.allocator.alloc(4096)
  assert d0.map_peer(d1, y) == y.va
  # peer access is per VA space: d1's own VA space has not enabled it, so GPU 0's video memory does not map there
  x = d0.allocator.alloc(4096)
  with pytest.raises(NVError, match="NV_ERR_INVALID_DEVICE"): d1.map_peer(d0, x)
  d0.rm.uvm(d0.uvmfd, "UVM_DISABLE_PEER_ACCESS", gpuUuidA={"uuid": list(d0.uuid)}, gpuUuidB={"uuid": list(d1.uuid)})
  with pytest.raises(NVError, match="NV_ERR_INVALID_DEVICE"):   # disabled twice
    d0.rm.uvm(d0.uvmfd, "UVM_DISABLE_PEER_ACCESS", gpuUuidA={"uuid": list(d0.uuid)}, gpuUuidB={"uuid": list(d1.uuid)})

@pytest.mark.parametrize("pair", ["nvlink"], indirect=True)
def test_nvlink_is_enabled_at_registration_and_refuses_enable(pair):
  _drv, d0, d1 = pair
  y = d1.allocator.alloc(4096)
  d0._register_peer_gpu(d1)
  assert d0.map_peer(d1, y) == y.va   # no ENABLE needed: the NVLink pair is a peer once both GPUs are registered
  with pytest.raises(NVError, match="NV_ERR_INVALID_DEVICE"): enable(d0, d0, d1)

@pytest.mark.parametrize("pair", ["none"], indirect=True)
def test_no_link_refuses_enable_and_peer_video_memory(pair):
  _drv, d0, d1 = pair
  d0._register_peer_gpu(d1)
  with pytest.raises(NVError, match="NV_ERR_NOT_SUPPORTED"): enable(d0, d0, d1)
  with pytest.raises(NVError, match="NV_ERR_INVALID_DEVICE"): d0.map_peer(d1, d1.allocator.alloc(4096))   # a forced peer map
  d0.map_peer(d1, d1.sigbuf)   # system memory maps without peer access (its GPU is registered)

@pytest.mark.parametrize("pair", ["writes"], indirect=True)
def test_a_writes_only_pair_bounces_because_uvm_needs_reads_too(pair):
  """p2p_nv row 8: with P2P reads off (ForceP2P READ_DISABLE) RM sets WRITES without READS (client_resource.c:499-502:
  each from its own status), READ status DISABLED_BY_REGKEY. A push only writes into the peer, but UVM gives a pair
  peer access only with both bits (nv_gpu_ops.c:3026-3034), so ENABLE and a peer video-memory map are refused and
  hcqrt bounces, by RM's READ status, without trying ENABLE."""
  drv, d0, d1 = pair
  r = caps(d0, [d0.gpu_id, d1.gpu_id])
  assert r.p2pCaps == bit("WRITES") | bit("PCI") | bit("PROP")
  assert r.p2pCapsStatus[V["NV0000_CTRL_P2P_CAPS_INDEX_READ"]] == V["NV0000_P2P_CAPS_STATUS_DISABLED_BY_REGKEY"]
  assert r.p2pCapsStatus[V["NV0000_CTRL_P2P_CAPS_INDEX_WRITE"]] == V["NV0000_P2P_CAPS_STATUS_OK"]
  assert d0.peer_status(d1) == "no-p2p: DISABLED_BY_REGKEY"
  d0._register_peer_gpu(d1)
  with pytest.raises(NVError, match="NV_ERR_NOT_SUPPORTED"): enable(d0, d0, d1)
  with pytest.raises(NVError, match="NV_ERR_INVALID_DEVICE"): d0.map_peer(d1, d1.allocator.alloc(4096))
  enables = len(logged(drv, "UVM_ENABLE_PEER_ACCESS"))
  data = np.arange(N, dtype=np.uint8)
  x, y = up(d0, data), d1.allocator.alloc(N)
  assert copy_between(d1, y, d0, x, N) == "device"
  d1.synchronize()
  assert (down(d1, y, N, np.uint8) == data).all() and d0.peer_status(d1) == "no-p2p: DISABLED_BY_REGKEY"
  assert len(logged(drv, "UVM_ENABLE_PEER_ACCESS")) == enables   # (no ENABLE tried by hcqrt)

def test_one_call_maps_a_range_on_each_gpu_it_names(pair):
  """UVM keeps an external range's mappings per GPU: mapping it on GPU 1 leaves GPU 0's mapping (uvm_map_external.c:867
  unmaps overlaps on the mapping GPU only). Both GPUs in one VA space (d0's), the buffer mapped on both in one call."""
  drv, d0, d1 = pair
  d0._register_peer_gpu(d1)
  d0.rm.uvm(d0.uvmfd, "UVM_REGISTER_GPU_VASPACE", gpuUuid={"uuid": list(d1.uuid)}, rmCtrlFd=d1.ctl, hClient=d1.rm.root, hVaSpace=d1.hvaspace)
  b = d0.gpu_alloc(1 << 16, sysmem=True)   # (already mapped on GPU 0 by gpu_alloc)
  attrs = [{"gpuUuid": {"uuid": list(u)}, "gpuMappingType": 1, "gpuCachingType": 1} for u in (d0.uuid, d1.uuid)]
  d0.rm.uvm(d0.uvmfd, "UVM_MAP_EXTERNAL_ALLOCATION", base=b.va, length=b.size, rmCtrlFd=d0.ctl, hClient=d0.rm.root, hMemory=b.handle,
            gpuAttributesCount=2, perGpuAttributes=attrs)
  assert {(b.va, d0.uuid), (b.va, d1.uuid)} <= set(drv.files[d0.uvmfd].uvm.maps)
  d0.rm.uvm(d0.uvmfd, "UVM_UNMAP_EXTERNAL", base=b.va, length=b.size, gpuUuid={"uuid": list(d1.uuid)})
  assert (b.va, d0.uuid) in drv.files[d0.uvmfd].uvm.maps and (b.va, d1.uuid) not in drv.files[d0.uvmfd].uvm.maps

# ---------------------------------------------------------------- copies
N = 3 * (2 << 20) + 1000   # more than one bounce slot, not a multiple of anything

@pytest.mark.parametrize("pair", ["pcie", "nvlink"], indirect=True)
def test_peer_copy_is_one_push_by_the_source(pair):
  drv, d0, d1 = pair
  data = np.random.default_rng(1).integers(0, 256, N, dtype=np.uint8)
  x, y = up(d0, data), d1.allocator.alloc(N)
  d0.synchronize(); d1.synchronize()
  c0, c1 = len(drv.gpus[0].engine.copies), len(drv.gpus[1].engine.copies)
  assert copy_between(d1, y, d0, x, N) == "device"
  d1.synchronize()
  # ONE copy-engine operation on GPU 0 writing GPU 1's memory at its own VA; GPU 1's copy engine moved nothing
  assert drv.gpus[0].engine.copies[c0:] == [(y.va, x.va, N)] and len(drv.gpus[1].engine.copies) == c1
  assert (down(d1, y, N, np.uint8) == data).all()
  pcie = d0.peer_status(d1) == "ok: pcie"
  assert len(logged(drv, "UVM_ENABLE_PEER_ACCESS")) == (1 if pcie else 0)
  assert any(e["owner"] == 1 and e["gpu"] == 0 and e["kind"] == "vidmem" and e["va"] == y.va for _, e in logged(drv, "peer_map"))
  copy_between(d1, y, d0, x, N)   # the pair is linked once
  assert len(logged(drv, "UVM_ENABLE_PEER_ACCESS")) == (1 if pcie else 0)

@pytest.mark.parametrize("pair", ["none"], indirect=True)
def test_no_p2p_bounces_through_system_memory(pair):
  drv, d0, d1 = pair
  data = np.random.default_rng(2).integers(0, 256, N, dtype=np.uint8)
  x, y = up(d0, data), d1.allocator.alloc(N)
  c0, c1 = len(drv.gpus[0].engine.copies), len(drv.gpus[1].engine.copies)
  assert copy_between(d1, y, d0, x, N) == "device"
  d1.synchronize()
  assert (down(d1, y, N, np.uint8) == data).all()
  assert not logged(drv, "UVM_ENABLE_PEER_ACCESS")
  slots = {b.va for b in d0.bounce_buffers()}
  fills, drains = drv.gpus[0].engine.copies[c0:], drv.gpus[1].engine.copies[c1:c1 + 4]
  assert len(fills) == 4 and {d for d, _, _ in fills} == slots and {s for _, s, _ in drains} == slots   # 4 chunks, 2 slots
  assert {e["kind"] for _, e in logged(drv, "peer_map")} == {"sysmem"}

@pytest.mark.parametrize("pair", ["none"], indirect=True)
def test_bounce_slot_is_refilled_only_after_its_drain(pair):
  """GPU 1's copy engine drains late (held: tests/held_gpu.py): GPU 0 must not refill a slot before GPU 1 has drained it
  (the fill waits on GPU 1's semaphore), else chunk 3 would arrive in place of chunk 1."""
  drv, d0, d1 = pair
  data = np.random.default_rng(3).integers(0, 256, N, dtype=np.uint8)
  x, y = up(d0, data), d1.allocator.alloc(N)
  d0._link(d1); d0.synchronize(); d1.synchronize()
  with held_until_the_host_waits(drv, 1): d0.transfer_to(d1, y, x, N); d1.synchronize(); d0.synchronize()
  assert (down(d1, y, N, np.uint8) == data).all()

# ---------------------------------------------------------------- cross-device waits
def test_cross_device_semaphore_wait(pair):
  _drv, d0, d1 = pair
  d0._link(d1)
  gate, done = d0.new_signal(0), d1.new_signal(0)
  d1.hw_compute_queue().wait(gate, 5).signal(done, 1).submit(d1)   # GPU 1 waits on GPU 0's semaphore
  assert done.value == 0
  d0.hw_compute_queue().signal(gate, 5).submit(d0)
  done.wait(1, 5.0)
  # and the other way round
  gate2, done2 = d1.new_signal(0), d0.new_signal(0)
  d0.hw_compute_queue().wait(gate2, 1).signal(done2, 1).submit(d0)
  d1.hw_compute_queue().signal(gate2, 1).submit(d1)
  done2.wait(1, 5.0)

def test_a_signal_not_mapped_on_the_waiting_gpu_faults(pair):
  """A semaphore of GPU 0 that was never mapped into GPU 1's VA space: GPU 1's acquire faults (an MMU fault, RM's
  error notifier), it is not read through some shared memory by luck."""
  _, d0, d1 = pair
  gate = d0.new_signal(1)
  with pytest.raises((GPUError, NVError), match="is not mapped in this VA space"):   # (at the doorbell or at the wait)
    d1.submit_timeline(d1.after_timeline(d1.hw_compute_queue()).wait(gate, 1)); d1.synchronize(timeout_s=5.0)

@pytest.mark.parametrize("pair", ["pcie", "none"], indirect=True)
@pytest.mark.parametrize("drop_wait", [False, True])
def test_missing_cross_device_wait_reads_stale_data(pair, drop_wait, monkeypatch):
  """GPU 0's copy engine lands its copy late (held: tests/held_gpu.py; its doorbell runs later, as the PBDMA may). With
  the destination's semaphore wait, GPU 1's kernel reads the copied values; with the wait dropped (the test hook) it
  reads what was there before (through a bounce: what the slot held before GPU 0 filled it)."""
  drv, d0, d1 = pair
  n = 1024
  new, old = np.arange(n, dtype=np.float32) + 1, np.full(n, -7.0, np.float32)
  x, y, out = up(d0, new), up(d1, old), d1.allocator.alloc(n * 4)
  add = d1.program("add", assemble_ptx(K.head(d1.arch) + K.ADD, d1.arch))
  d0._link(d1); d0.synchronize(); d1.synchronize()
  if drop_wait: monkeypatch.setattr(HCQDevice, "skip_cross_wait", True)
  with held_until_the_host_waits(drv, 0):
    d0.transfer_to(d1, y, x, n * 4)
    add(out, y, y, vals=(0, n), global_size=(n // 128, 1, 1), local_size=(128, 1, 1))   # out = y + 0 * y, on GPU 1
    d1.synchronize(); d0.synchronize()
  got = down(d1, out, n)
  if not drop_wait: assert (got == new).all()
  elif d0.peer_status(d1) == "ok: pcie": assert (got == old).all()   # the harmful result a missing wait must give
  else: assert not (got == new).any()   # bounce: GPU 1 drained the slot before GPU 0 filled it

# ---------------------------------------------------------------- lifetime, RM status codes
def test_freeing_peer_mapped_memory_unmaps_the_peers(pair):
  drv, d0, d1 = pair
  y = d1.gpu_alloc(1 << 16)
  d0._link(d1); d0.map_peer(d1, y)
  assert (d1.name, y.handle) in d0._peer_maps
  d1.gpu_free(y)
  assert (d1.name, y.handle) not in d0._peer_maps and (y.va, d0.uuid) not in drv.files[d0.uvmfd].uvm.maps
  with pytest.raises(RuntimeError, match="freed"): d0.map_peer(d1, y)

def test_rm_device_instance_and_card_info_statuses():
  from hcqrt.nv.rmclient import RMClient
  from ioctl_defs.nv.abi import abi_for_version
  from ioctl_defs.nv.classes import CLASSES as C
  with syscalls.installed(drv := MockNV(count=2)):
    a = abi_for_version(drv.version)
    rm = RMClient(ctl := syscalls.open("/dev/nvidiactl", 2), a)
    def dev(i): return rm.alloc(rm.root, C["NV01_DEVICE_0"], "NV0080_ALLOC_PARAMETERS", deviceId=i)[0]
    with pytest.raises(NVError, match="NV_ERR_INVALID_CLASS"): dev(2)        # no GPU at that instance
    with pytest.raises(NVError, match="NV_ERR_INVALID_ARGUMENT"): dev(32)    # past NV_MAX_DEVICES
    assert dev(1) != dev(1)                                                  # the same instance twice: accepted
    one = a.ffi.new("nv_ioctl_card_info_t[1]")
    with pytest.raises(OSError) as e: syscalls.ioctl(ctl, a.escape("NV_ESC_CARD_INFO", count=1), one)
    assert e.value.errno == errno.EINVAL

def test_python_m_hcqrt_prints_the_p2p_matrix(monkeypatch, capsys):
  from hcqrt.__main__ import main
  monkeypatch.setenv("MOCKGPU_COUNT", "3"); monkeypatch.setenv("MOCKGPU_P2P", "0-1:nvlink,1-2:none")
  assert main(["--mock", "hopper"]) == 0
  out = capsys.readouterr().out.splitlines()
  i = out.index("  NV P2P (copy from row into column):")
  rows = {ln.split()[0]: ln.split(None, 1)[1] for ln in out[i + 2:i + 5]}
  assert out[i + 1].split() == ["NV", "NV:1", "NV:2"]
  assert rows["NV"].split("  ")[0] == "-" and "ok: nvlink" in rows["NV"] and rows["NV"].rstrip().endswith("ok: pcie")
  assert "no-p2p: IOH_TOPOLOGY_NOT_SUPPORTED" in rows["NV:1"] and "no-p2p: IOH_TOPOLOGY_NOT_SUPPORTED" in rows["NV:2"]

@pytest.mark.parametrize("pair", ["pcie", "none"], indirect=True)
def test_frontend_copy_between_gpus_runs_on_the_gpus(pair, monkeypatch):
  """Tensor.to between two NV GPUs: the engine's copy ExecItem takes the device path (a push, or the bounce), not the host."""
  from hcqrt.device import Device
  from frontend import Tensor
  import frontend.engine as engine
  drv, d0, d1 = pair
  monkeypatch.setitem(Device._opened, "NV", d0); monkeypatch.setitem(Device._opened, "NV:1", d1)
  # (programs loaded on an earlier test's "NV:1" belong to that device: this one needs its own)
  monkeypatch.setattr(engine, "_kernel_cache", {}); monkeypatch.setattr(engine, "_loaded", {})
  paths = []
  real = engine.copy_between
  monkeypatch.setattr(engine, "copy_between", lambda *a: paths.append(real(*a)) or paths[-1])
  x = np.arange(4096, dtype=np.float32)
  c0 = len(drv.gpus[0].engine.copies)
  t = Tensor(x, device="NV").realize()
  y = (t.to("NV:1") * 2).numpy()
  assert paths == ["device"] and (y == 2 * x).all()
  assert any(n == x.nbytes for _, _, n in drv.gpus[0].engine.copies[c0:]) or d0.peer_status(d1).startswith("no-p2p")

# ---------------------------------------------------------------- BAR1 PCIe P2P, 535 layout (review p2p_nv rows 1, 2, 4)
def as_uvm_590(drv):
  """Switch the mock's UVM to the 590+ rules after bring-up (hcqrt's ABI table, abi_for_version, stops at 580, so no
  NVDevice opens a 590 driver; the UVM peer rules are what differ: uvm.py uvm_link)."""
  drv.version = "590.44.01"

def _bar1_caps_and_push(drv, d0, d1, seed):
  r = caps(d0, [d0.gpu_id, d1.gpu_id])
  assert r.p2pCaps == sum(bit(c) for c in ("READS", "WRITES", "PCI", "PCI_BAR1"))
  for k, ok in (("PCI", True), ("PCI_BAR1", True), ("PROP", False), ("NVLINK", False)):
    assert r.p2pCapsStatus[V[f"NV0000_CTRL_P2P_CAPS_INDEX_{k}"]] == V["NV0000_P2P_CAPS_STATUS_" + ("OK" if ok else "NOT_SUPPORTED")], k
  assert d0.peer_status(d1) == "ok: pcie-bar1"
  data = np.random.default_rng(seed).integers(0, 256, 1 << 16, dtype=np.uint8)
  x, y = up(d0, data), d1.allocator.alloc(data.nbytes)
  c0 = len(drv.gpus[0].engine.copies)
  assert copy_between(d1, y, d0, x, data.nbytes) == "device"
  d1.synchronize()
  assert (down(d1, y, data.nbytes, np.uint8) == data).all() and drv.gpus[0].engine.copies[c0:] == [(y.va, x.va, data.nbytes)]
  assert d0.peer_status(d1) == "ok: pcie-bar1"   # no bounce: the push itself

@pytest.mark.parametrize("pair", ["bar1"], indirect=True)
def test_bar1_pair_before_590_is_a_pcie_peer_that_needs_enable(pair):
  """RMPcieP2PType=BAR1 on 535/570/580: RM reports PCI and PCI_BAR1 (no PROP), but UVM before 590 sees a plain PCIe
  peer (uvm.py uvm_link), so hcqrt must call UVM_ENABLE_PEER_ACCESS or every push's mapping fails (review g26 row 1)."""
  drv, d0, d1 = pair
  _bar1_caps_and_push(drv, d0, d1, 4)
  assert len(logged(drv, "UVM_ENABLE_PEER_ACCESS")) == 1
  with pytest.raises(NVError, match="NV_ERR_INVALID_DEVICE"): enable(d0, d0, d1)   # already enabled
  d0.rm.uvm(d0.uvmfd, "UVM_DISABLE_PEER_ACCESS", gpuUuidA={"uuid": list(d0.uuid)}, gpuUuidB={"uuid": list(d1.uuid)})

@pytest.mark.parametrize("pair", ["bar1"], indirect=True)
def test_bar1_pair_on_590_is_a_peer_at_registration_and_pushes(pair):
  """UVM 590+: the BAR1 pair is enabled when both GPUs are registered and ENABLE/DISABLE are refused with
  NV_ERR_INVALID_DEVICE; hcqrt reads that refusal on a BAR1 pair as "enabled" and pushes."""
  drv, d0, d1 = pair
  as_uvm_590(drv)
  _bar1_caps_and_push(drv, d0, d1, 4)
  with pytest.raises(NVError, match="NV_ERR_INVALID_DEVICE"): enable(d0, d0, d1)
  with pytest.raises(NVError, match="NV_ERR_INVALID_DEVICE"):
    d0.rm.uvm(d0.uvmfd, "UVM_DISABLE_PEER_ACCESS", gpuUuidA={"uuid": list(d0.uuid)}, gpuUuidB={"uuid": list(d1.uuid)})

@pytest.mark.parametrize("pair", ["bar1"], indirect=True)
def test_a_refused_enable_makes_the_pair_bounce(pair, monkeypatch):
  """A pair the driver reports as P2P but whose ENABLE UVM refuses (here: a 590+ BAR1 pair taken for a mailbox one, as
  hcqrt did before it read PCI_BAR1): the copy must not raise; the pair becomes "no-p2p" and the bytes bounce."""
  drv, d0, d1 = pair
  as_uvm_590(drv)
  monkeypatch.setattr(NVDevice, "query_peer", lambda self, other: "ok: pcie")
  data = np.random.default_rng(5).integers(0, 256, N, dtype=np.uint8)
  x, y = up(d0, data), d1.allocator.alloc(N)
  assert copy_between(d1, y, d0, x, N) == "device"
  d1.synchronize()
  assert (down(d1, y, N, np.uint8) == data).all()
  assert d0.peer_status(d1).startswith("no-p2p:") and "NV_ERR_INVALID_DEVICE" in d0.peer_status(d1)
  assert len(logged(drv, "UVM_ENABLE_PEER_ACCESS")) == 1 and {e["kind"] for _, e in logged(drv, "peer_map")} == {"sysmem"}

def test_p2p_caps_on_535_uses_the_535_struct():
  """The 535 struct ends at busPeerIds (4252 bytes); RM refuses any other paramsSize with NV_ERR_INVALID_ARGUMENT
  (OGKM@535.288.01 control.c:497-506), so the 550+ size would make every pair silently bounce."""
  with syscalls.installed(drv := MockNV(count=2, version="535.288.01")):
    d0, d1 = NVDevice("NV"), NVDevice("NV:1")
    assert d0.rm.abi.ctrl_size("NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2") == 4252
    assert d0.peer_status(d1) == "ok: pcie"
    a = d0.rm.abi
    big = a.ffi.new("char[8348]")   # the 550+ size
    p = a.new("NVOS54_PARAMETERS", hClient=d0.rm.root, hObject=d0.rm.root, cmd=a.ctrl("NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2")[0],
              params=d0.rm.ptr(big), paramsSize=8348)
    syscalls.ioctl(d0.rm.ctl, a.escape("NV_ESC_RM_CONTROL"), p)
    assert p.status == NV_STATUS["NV_ERR_INVALID_ARGUMENT"] and drv.abi.series == "535"

# ---------------------------------------------------------------- one GPU's channels are not ordered (review row 3)
@pytest.mark.parametrize("pair", ["pcie", "none"], indirect=True)
def test_copy_waits_for_the_sources_earlier_kernel(pair):
  """RAW on the source GPU: GPU 0's kernel writes x, then x goes to GPU 1 (a push for pcie, a bounce fill for none). The
  copy engine's channel is not ordered after the compute channel; only the wait on GPU 0's timeline orders them."""
  drv, d0, d1 = pair
  n = 1024
  a, old = np.arange(n, dtype=np.float32) + 1, np.full(n, -7.0, np.float32)
  av, x, y = up(d0, a), up(d0, old), up(d1, np.zeros(n, np.float32))
  add = d0.program("add", assemble_ptx(K.head(d0.arch) + K.ADD, d0.arch))
  d0.transfer_to(d1, y, x, n * 4); d0.synchronize(); d1.synchronize()   # (links, maps and bounce slots made before: the
  with held_until_the_host_waits(drv, 0):                                  # timed copy is rung right after the kernel)
    add(x, av, av, vals=(0, n), global_size=(n // 128, 1, 1), local_size=(128, 1, 1))   # x = a + 0 * a on GPU 0, late
    d0.transfer_to(d1, y, x, n * 4)
    d1.synchronize(); d0.synchronize()
  assert (down(d1, y, n) == a).all()

@pytest.mark.parametrize("pair", ["pcie", "nvlink", "none"], indirect=True)
def test_copy_waits_for_the_destinations_earlier_kernel(pair):
  """WAR on the destination GPU: GPU 1 runs late (held: tests/held_gpu.py) a kernel that reads y; then GPU 0's push into
  y (P2P) or a bounce draining into y on GPU 1's copy engine (no P2P). Only the copy's wait on GPU 1's timeline keeps it
  from overwriting y before the kernel read it, so the kernel still reads the old y."""
  drv, d0, d1 = pair
  n = 1024
  new, old = np.arange(n, dtype=np.float32) + 1, np.full(n, -7.0, np.float32)
  x, y, out = up(d0, new), up(d1, old), d1.allocator.alloc(n * 4)
  add = d1.program("add", assemble_ptx(K.head(d1.arch) + K.ADD, d1.arch))
  tmp = d1.allocator.alloc(n * 4)
  d0.transfer_to(d1, tmp, x, n * 4); d0.synchronize(); d1.synchronize()   # (links, maps and bounce slots made before)
  with held_until_the_host_waits(drv, 1):
    add(out, y, y, vals=(0, n), global_size=(n // 128, 1, 1), local_size=(128, 1, 1))   # out = y on GPU 1, late
    d0.transfer_to(d1, y, x, n * 4)
    d1.synchronize(); d0.synchronize()
  assert (down(d1, out, n) == old).all() and (down(d1, y, n) == new).all()

# ---------------------------------------------------------------- UVM registration (review rows 5, 6)
def test_uvm_register_twice_and_unregister_drops_peer_state(pair):
  drv, d0, d1 = pair
  d0._register_peer_gpu(d1)
  with pytest.raises(NVError, match="NV_ERR_INVALID_DEVICE"):   # uvm_va_space.c:769-771
    d0.rm.uvm(d0.uvmfd, "UVM_REGISTER_GPU", gpu_uuid={"uuid": list(d1.uuid)}, rmCtrlFd=-1)
  enable(d0, d0, d1)
  y = d1.allocator.alloc(4096)
  d0.map_peer(d1, y)
  f = drv.files[d0.uvmfd].uvm
  assert (y.va, d0.uuid) in f.maps
  d0.rm.uvm(d0.uvmfd, "UVM_UNREGISTER_GPU", gpu_uuid={"uuid": list(d1.uuid)})
  # GPU 0's mapping of GPU 1's memory went with GPU 1 (uvm_va_range.c:1098-1121), and so did the peer pair
  assert (y.va, d0.uuid) not in f.maps and not any(d1.uuid in pr for pr in f.pcie_peers)
  d0.rm.uvm(d0.uvmfd, "UVM_REGISTER_GPU", gpu_uuid={"uuid": list(d1.uuid)}, rmCtrlFd=-1)
  with pytest.raises(NVError, match="NV_ERR_INVALID_DEVICE"):   # peer video memory needs ENABLE again
    d0.rm.uvm(d0.uvmfd, "UVM_MAP_EXTERNAL_ALLOCATION", base=y.va, length=y.size, rmCtrlFd=d1.ctl, hClient=d1.rm.root,
              hMemory=y.handle, gpuAttributesCount=1, perGpuAttributes=[{"gpuUuid": {"uuid": list(d0.uuid)}, "gpuMappingType": 1}])
  enable(d0, d0, d1)   # accepted: the old pair was dropped
