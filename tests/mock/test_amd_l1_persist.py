"""The gfx942 vector L1 / gfx1100 GL0 lines outlive the workgroup and the dispatch that filled them (gfx9/l1.py): a
later workgroup on the same CU, in the next batch or a later dispatch, reads them stale until the kernel's own
invalidate or the CP's (PM4 ACQUIRE_MEM TCL1_ACTION_ENA / GCR_CNTL.GLV_INV, an AQL acquire fence). Each test fails on
the mock whose L1s lived for one batch of workgroups."""
import ctypes, struct
import numpy as np
import pytest
from ioctl_defs.amd.pm4 import WRM_GE as GE, WRM_NE as NE
from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd
from hcqrt.mock.amd.gfx9 import Gfx9Waves
from hcqrt.mock.amd.gfx9.l1 import VectorL1
from hcqrt.mock.amd.rdna3 import FlatMemory, launch
from hcqrt.mock.amd.rdna3.launch import l1_slots
from hcqrt.mock.amd.rdna3.executor import Waves
from tests.rdna3_kernels import compile_ir, have_llvmlite, read_object

needs_llvm = pytest.mark.skipif(not have_llvmlite(), reason="llvmlite (pip install 'hcqrt[amd]') is not installed")
ARCHS = {"gfx942": (Gfx9Waves, 64), "gfx1100": (Waves, 32)}   # emulator, lanes of one wave (one wave per workgroup)

def test_vector_l1_frozen_lines():
  """VectorL1's rules past a dispatch's end: a frozen line keeps its bytes whatever memory gets next; the holder's own
  store writes through into it (the rest stays stale); a second dispatch's end freezes the newer bytes for the L1s
  that filled them then, while the older holder keeps its own; invalidate_all drops everything; a buffer of another
  size at the same address starts empty."""
  m = FlatMemory(); buf = np.zeros(256, np.uint8); m.map(0x1000, buf)
  l1 = VectorL1(m, lambda a, n, x: m.read(a, n), np.zeros_like)
  A = lambda v: np.array([v], np.uint64)
  def load(addr, h): return l1.load(A(addr), 4, np.array([h]), m.read(A(addr), 4))[0].tolist()
  def store(addr, val, h):
    d = np.full((1, 4), val, np.uint8); l1.before_write(A(addr), d, np.array([h])); m.write(A(addr), d)
  assert load(0x1000, 0) == [0] * 4
  l1.freeze(); buf[:16] = 9                   # the dispatch ends; the host (or SDMA) writes the line
  assert load(0x1000, 0) == [0] * 4 and load(0x1000, 1) == [9] * 4
  store(0x1004, 6, 0)                         # L1 0's own store: through into its frozen line
  assert load(0x1004, 0) == [6] * 4 and load(0x1000, 0) == [0] * 4 and load(0x1008, 0) == [0] * 4
  l1.freeze(); buf[:16] = 3                   # L1 1 filled 9s in the second dispatch; the host writes 3s
  assert load(0x1000, 1) == [9] * 4 and load(0x1000, 0) == [0] * 4 and load(0x1000, 2) == [3] * 4
  # the older frozen holder that never stored: L1 2 fills line 1 (0s), the dispatch ends, the host writes 9s, L1 3
  # fills them, the dispatch ends, the host writes 3s: L1 2 still reads its 0s (the second freeze gave it a copy of
  # its own before the image took the 9s), L1 3 its 9s, a fresh L1 the 3s
  assert load(0x1080, 2) == [0] * 4
  l1.freeze(); buf[128:144] = 9
  assert load(0x1080, 3) == [9] * 4
  l1.freeze(); buf[128:144] = 3
  assert load(0x1080, 2) == [0] * 4 and load(0x1080, 3) == [9] * 4 and load(0x1080, 4) == [3] * 4
  l1.invalidate_all()
  assert load(0x1000, 0) == [3] * 4 and load(0x1000, 1) == [3] * 4
  l1.freeze(); buf[:16] = 4
  m.unmap(0x1000); big = np.full(512, 8, np.uint8); m.map(0x1000, big)   # freed, and a larger buffer at its address
  assert load(0x1000, 0) == [8] * 4

def store_or_copy(branches: str, row: int | str, args: str = "", read_first: str = "") -> str:
  """The test kernels' shape: `branches` (IR ending the entry block and the blocks it jumps to, which end in
  `br label %done` or `br label %rd`) has some workgroups store into x[t]; the others, after `read_first`, copy x[t]
  to out[g * row + t]. `args`: parameters after %x and %out."""
  return f"""define amdgpu_kernel void @k(ptr addrspace(1) %x, ptr addrspace(1) %out{args}) {{
entry:
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %px = getelementptr i32, ptr addrspace(1) %x, i32 %t
{branches}
rd:
{read_first}  %v = load i32, ptr addrspace(1) %px
  %gb = mul i32 %g, {row}
  %i = add i32 %gb, %t
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %v, ptr addrspace(1) %po
  br label %done
done:
  ret void
}}"""

def one_store(g: int) -> str:
  """Workgroup g stores 5 into x[t]; the others go to %rd."""
  return f"""  %w = icmp eq i32 %g, {g}
  br i1 %w, label %st, label %rd
st:
  store i32 5, ptr addrspace(1) %px
  br label %done"""

# every workgroup but 3 reads x[t] into out[g * LANES + t]; workgroup 3 stores 5 into x[t]
BATCH = store_or_copy(one_store(3), "LANES", read_first="ACQUIRE\n")

@needs_llvm
@pytest.mark.parametrize("arch", list(ARCHS))
def test_lines_survive_into_the_next_batch_of_workgroups(arch):
  """Six workgroups in batches of two: workgroups 0, 2, 4 run on one CU, 1, 3, 5 on another. Workgroup 0 fills x's
  lines; workgroup 3 (the other CU) stores 5 there; workgroup 4, two batches later on workgroup 0's CU, still reads
  0 without an acquire, and 5 after the agent-scope acquire's invalidate (buffer_inv sc1 / buffer_gl0_inv).
  Workgroup 5 reads 5 either way (its CU's line took workgroup 3's store)."""
  cls, lanes = ARCHS[arch]
  def run(acquire: str) -> np.ndarray:
    src = BATCH.replace("ACQUIRE", acquire).replace("LANES", str(lanes))
    text, entry, _, kd = read_object(compile_ir(src, cpu=arch), "k")
    x, out = np.zeros(lanes, np.int32), np.full(6 * lanes, -1, np.int32)
    m = FlatMemory(); m.map(0x10000, x.view(np.uint8)); m.map(0x20000, out.view(np.uint8))
    m.map(0x40000, np.frombuffer(bytearray(struct.pack("<QQ", 0x10000, 0x20000)), np.uint8))
    launch(text, kd, m, 0x40000, (6,), (lanes,), entry=entry, waves_cls=cls, max_waves=2)
    assert (x == 5).all()
    return out.reshape(6, lanes)
  stale = run("")
  assert (stale[[0, 1, 2, 4]] == 0).all() and (stale[5] == 5).all(), stale[:, 0]
  fresh = run('  fence syncscope("agent") acquire\n')
  # (workgroup 2 invalidates in the batch where workgroup 3 stores: it may read 0 or 5, as on hardware)
  assert (fresh[[4, 5]] == 5).all() and (fresh[[0, 1]] == 0).all() and fresh[2, 0] in (0, 5), fresh[:, 0]

BCAST, FILL = """define amdgpu_kernel void @bcast(ptr addrspace(1) %x, ptr addrspace(1) %out) {
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %px = getelementptr i32, ptr addrspace(1) %x, i32 %t
  %v = load i32, ptr addrspace(1) %px
  %gb = mul i32 %g, LANES
  %i = add i32 %gb, %t
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %v, ptr addrspace(1) %po
  ret void
}""", """define amdgpu_kernel void @fill(ptr addrspace(1) %x, ptr addrspace(1) %unused) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %px = getelementptr i32, ptr addrspace(1) %x, i32 %t
  store i32 7, ptr addrspace(1) %px
  ret void
}"""

def device_with_bcast_and_fill(arch: str, lanes: int) -> tuple:
  """The mock AMD device (installed by the caller), BCAST and FILL loaded on it (one kernel per object: read_object
  takes one relocation), and their buffers: x (one wave of zeros) and out (two waves)."""
  from hcqrt.amd.device import AMDDevice, AMDProgram
  d = AMDDevice("AMD"); d.wait_timeout_s = 20.0
  progs = {}
  for name, src in (("bcast", BCAST), ("fill", FILL)):
    text, entry, _, kd = read_object(compile_ir(src.replace("LANES", str(lanes)), cpu=arch), name)
    progs[name] = AMDProgram(d, name, text, kd, [(0, 8), (8, 8)], entry=entry)
  x, out = d.allocator.alloc(4 * lanes), d.allocator.alloc(8 * lanes)
  d.allocator.copyin(x, memoryview(bytearray(4 * lanes)))
  return d, progs, x, out

def no_aql_acquire(monkeypatch) -> None:
  """AQL packets built with acquire fence scope NONE: the CP then drops no L1 / GL0 / GL1 line before them."""
  from ioctl_defs.amd import aql
  header = aql.header
  monkeypatch.setattr(aql, "header", lambda t, barrier=False, acquire=0, release=0: header(t, barrier, aql.FENCE_SCOPE_NONE, release))

@needs_llvm
@pytest.mark.parametrize("arch,use_aql", [("gfx942", "1"), ("gfx942", "0"), ("gfx1100", "0"), ("gfx1100", "1")])
@pytest.mark.parametrize("invalidate", [True, False])
def test_lines_survive_into_later_dispatches_until_the_cp_invalidates(arch, use_aql, invalidate, monkeypatch):
  """Through the mock KFD: `bcast` (two workgroups, each reads all of x) fills x's lines in two CUs; `fill` (one
  workgroup, on the first CU) stores 7s; `bcast` again; the host writes 9s; `bcast` again. With the backend's cache
  actions (PM4 ACQUIRE_MEM with TCL1_ACTION_ENA / GLV_INV, AQL packets with system acquire fences) every read sees
  the newest x. With the L1 invalidate taken out of them (the bit cleared, the acquire scope NONE), the second CU
  reads the zeros it filled in the first dispatch, and after the host's write both CUs read what they held."""
  from ioctl_defs.amd import pm4, sdma
  from hcqrt.amd import device as amd_device
  monkeypatch.setenv("AMD_AQL", use_aql)
  if not invalidate:
    monkeypatch.setattr(pm4, "COHER_TCL1_ACTION_ENA", 0); monkeypatch.setattr(pm4, "GCR_GLV_INV", 0)
    # (and the signals' releases and SDMA copies' GCR_REQs: a wait on their fence has seen their L1 invalidate run)
    monkeypatch.setattr(pm4, "EOP_TCL1_ACTION_EN", 0); monkeypatch.setattr(pm4, "RM_GCR_GLV_INV", 0)
    monkeypatch.setattr(amd_device, "_SDMA_GCR_BEFORE", amd_device._SDMA_GCR_BEFORE & ~sdma.GCR_GLV_INV)
    no_aql_acquire(monkeypatch)
  lanes = ARCHS[arch][1]
  drv = install_mock_amd(arch)
  try:
    d, progs, x, out = device_with_bcast_and_fill(arch, lanes)
    def bcast() -> np.ndarray:
      progs["bcast"](x, out, global_size=(2, 1, 1), local_size=(lanes, 1, 1), wait=True)
      got = np.zeros(2 * lanes, np.int32); d.allocator.copyout(memoryview(got.view(np.uint8)), out)
      return got.reshape(2, lanes)
    assert (bcast() == 0).all()
    progs["fill"](x, out, global_size=(1, 1, 1), local_size=(lanes, 1, 1), wait=True)
    second = bcast()
    d.allocator.copyin(x, memoryview(np.full(lanes, 9, np.int32).view(np.uint8)))
    third = bcast()
  finally: uninstall_mock_amd(drv)
  if invalidate: assert (second == 7).all() and (third == 9).all(), (second[:, 0], third[:, 0])
  else: assert (second[0] == 7).all() and (second[1] == 0).all() and (third[0] == 7).all() and (third[1] == 0).all(), (second[:, 0], third[:, 0])

def _release_run(arch: str, monkeypatch, ops: list[tuple], gl1_in_release: bool = True, events_wait: bool = False,
                 sdma_poll: bool = False, events_from: str | None = None, cp_latency_s: float = 0.0) -> np.ndarray:
  """Through the mock KFD (PM4) with every L1 / GL0 / GL1 invalidate of the backend taken out: `bcast` fills x's zeros
  into two CUs (SAs), `fill` stores 7s from the first; then one submission runs `ops` and a last `bcast`, whose two
  workgroups' first lanes come back. ops: ("release"[, value[, cache[, "eos"]]]) a RELEASE_MEM with the L1 invalidate
  (gfx9 EOP_TCL1_ACTION_EN, gfx11 GCR GLV_INV and, with `gl1_in_release`, GL1_INV; or `cache`) writing 1 (`value`) to
  a fence, at the end of pipe or ("eos") a CS_DONE end-of-shader event; ("write", value) a WRITE_DATA of `value` to
  the fence's low dword; ("wait", func, ref, on) a WAIT_REG_MEM on the fence or on another signal already at 1;
  ("interrupt",) a RELEASE_MEM with INT_SEL 2 signalling the host's event (("eos_interrupt",): the same at a CS_DONE
  end-of-shader event); ("acquire",) an ACQUIRE_MEM dropping every L1 / GL0 / GL1; ("bcast",), ("fill",), ("fill9",) launches (`fill9` stores 9s). With `sdma_poll` the compute queue
  then waits on a flag an SDMA queue writes after its POLL_REGMEM GE 1 on the fence passed. `events_from` submits
  `ops` without the timeline and signals the host's event from "compute" (a release with INT_SEL 2 after `ops`) or
  "sdma" (only an SDMA FENCE + TRAP after them), or two of "compute", "sdma" and "host" (AMDKFD_IOC_SET_EVENT) in
  the mock's run order, e.g. "compute_then_sdma", then WAIT_EVENTS as below. With `events_wait` the host then
  consumes its event with WAIT_EVENTS and submits the last `bcast` on its own. Every WAIT_EVENTS here runs after the
  engine settled and must find the event signalled: a stale result never comes from a wait that timed out.
  `cp_latency_s`: the mock CP starts that long after each doorbell (MockKFD.latency_s)."""
  from ioctl_defs.amd import pm4, sdma
  from hcqrt.amd import device as amd_device
  from hcqrt.amd.device import AMDDevice, AMDProgram
  monkeypatch.setenv("AMD_AQL", "0")
  gfx = 11 if arch == "gfx1100" else 9
  inv = (pm4.RM_GCR_GLV_INV | (pm4.RM_GCR_GL1_INV if gl1_in_release else 0)) if gfx == 11 else pm4.EOP_TCL1_ACTION_EN
  acq = pm4.acquire_mem(11, gcr_cntl=pm4.GCR_GLV_INV | pm4.GCR_GL1_INV) if gfx == 11 else pm4.acquire_mem(9, coher_cntl=pm4.COHER_TCL1_ACTION_ENA)
  for name in ("COHER_TCL1_ACTION_ENA", "GCR_GLV_INV", "GCR_GL1_INV", "EOP_TCL1_ACTION_EN", "RM_GCR_GLV_INV", "RM_GCR_GL1_INV"): monkeypatch.setattr(pm4, name, 0)
  monkeypatch.setattr(amd_device, "_SDMA_GCR_BEFORE", amd_device._SDMA_GCR_BEFORE & ~(sdma.GCR_GLV_INV | sdma.GCR_GL1_INV))
  lanes = ARCHS[arch][1]
  drv = install_mock_amd(arch)
  drv.latency_s = cp_latency_s
  try:
    d = AMDDevice("AMD"); d.wait_timeout_s = 20.0
    progs = {}
    for name, sym, src in (("bcast", "bcast", BCAST), ("fill", "fill", FILL), ("fill9", "fill", FILL.replace("store i32 7", "store i32 9"))):
      text, entry, _, kd = read_object(compile_ir(src.replace("LANES", str(lanes)), cpu=arch), sym)
      progs[name] = AMDProgram(d, sym, text, kd, [(0, 8), (8, 8)], entry=entry)
    x, out = d.allocator.alloc(4 * lanes), d.allocator.alloc(8 * lanes)
    d.allocator.copyin(x, memoryview(bytearray(4 * lanes)))
    progs["bcast"](x, out, global_size=(2, 1, 1), local_size=(lanes, 1, 1), wait=True)
    progs["fill"](x, out, global_size=(1, 1, 1), local_size=(lanes, 1, 1), wait=True)
    fence, other = d.new_signal(0, "l1 release"), d.new_signal(1, "signalled already")
    ev = d.abi.ffi.new("struct kfd_event_data[1]"); ev[0].event_id = d.event_id
    wait_events = lambda: d.ioctl("AMDKFD_IOC_WAIT_EVENTS", events_ptr=int(d.abi.ffi.cast("uintptr_t", ev)), num_events=1, wait_for_all=0, timeout=1)
    if events_from or events_wait:   # the launches above may have left the event signalled: reset it once the engine
      drv.settle(); d.ioctl("AMDKFD_IOC_RESET_EVENT", event_id=d.event_id)   # ran them all (a later interrupt of theirs would re-signal it)
    ev_rel = pm4.release_mem(d.event_slot, d.event_id, data_sel=pm4.DATA_SEL_32_BIT_LOW, int_sel=pm4.INT_SEL_SEND_INTERRUPT_AFTER_WRITE_CONFIRM,
                            ctxid=d.event_id)
    ev_eos = pm4.release_mem(d.event_slot, d.event_id, data_sel=pm4.DATA_SEL_32_BIT_LOW, int_sel=pm4.INT_SEL_SEND_INTERRUPT_AFTER_WRITE_CONFIRM,
                             ctxid=d.event_id, event_type=pm4.CS_DONE, event_index=pm4.EVENT_INDEX_SHADER_DONE)
    q = d.after_timeline(d.hw_compute_queue())
    for op in ops:
      if op[0] == "interrupt": q._emit(ev_rel)
      elif op[0] == "eos_interrupt": q._emit(ev_eos)
      elif op[0] == "release":
        eos = {"event_type": pm4.CS_DONE, "event_index": pm4.EVENT_INDEX_SHADER_DONE} if op[3:] == ("eos",) else {}
        q._emit(pm4.release_mem(fence.va, op[1] if len(op) > 1 else 1, cache=inv if len(op) < 3 else op[2], **eos))
      elif op[0] == "write": q._emit(pm4.write_data(fence.va, op[1]))
      elif op[0] == "wait": q._emit(pm4.wait_reg_mem((fence if op[3] == "fence" else other).va, op[2], function=op[1]))
      elif op[0] == "acquire": q._emit(acq)
      else: q.exec(progs[op[0]], progs[op[0]].fill_kernargs((x, out), ()), (1 if op[0].startswith("fill") else 2, 1, 1), (lanes, 1, 1))
    if sdma_poll:   # the compute queue waits on a flag an SDMA queue writes once its POLL_REGMEM saw the fence at 1
      flag = d.new_signal(0, "sdma saw the fence")
      q._emit(pm4.wait_reg_mem(flag.va, 1, function=GE))
    if events_from:   # the event's interrupt comes from this queue's own release, or only from an SDMA trap
      trap = sdma.fence(d.event_slot, d.event_id, gfx=gfx) + sdma.trap(d.event_id, gfx=gfx)
      if events_from == "sdma": q.submit(d)
      for who in events_from.split("_then_"):   # two sources: each run to its end before the other starts
        if who == "compute": q._emit(ev_rel); q.submit(d)
        elif who == "sdma": d.sdma.submit(trap)
        else: d.ioctl("AMDKFD_IOC_SET_EVENT", event_id=d.event_id)
        drv.settle()
    if events_wait or events_from:
      if not events_from: d.submit_timeline(q)
      drv.settle()   # every interrupt has been raised: the wait below consumes the event rather than sleeping out its timeout
      res = wait_events()
      assert res.wait_result == 0, f"WAIT_EVENTS timed out (wait_result {res.wait_result}): the event was never signalled"
      q = d.hw_compute_queue()
    q.exec(progs["bcast"], progs["bcast"].fill_kernargs((x, out), ()), (2, 1, 1), (lanes, 1, 1))
    d.submit_timeline(q)
    if sdma_poll: d.sdma.submit(sdma.poll_regmem(fence.va, 1, func=sdma.FUNC_GE, gfx=gfx) + sdma.fence(flag.va, 1, gfx=gfx))
    d.synchronize()
    got = np.zeros(2 * lanes, np.int32); d.allocator.copyout(memoryview(got.view(np.uint8)), out)
  finally: uninstall_mock_amd(drv)
  return got.reshape(2, lanes)[:, 0]


@needs_llvm
@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("wait,fresh", [(None, False), ((GE, 1, "fence"), True), ((GE, 0, "fence"), False),
                                        ((NE, 5, "fence"), False), ((GE, 1, "other"), False)],
                         ids=["no_wait", "ge1", "ge0", "ne5", "other_signal"])
def test_release_invalidate_lands_once_a_wait_saw_its_fence(arch, wait, fresh, monkeypatch):
  """A RELEASE_MEM with the L1 invalidate has certainly run once a WAIT_REG_MEM passed on its fence where the value
  before the release could not have passed (the flush sequence of radv / radeonsi, cp.py release_l1_invalidate): the
  dispatch after it, with no invalidate of its own, reads fresh data (7) on the second CU. Without the wait, with a
  wait the fence's old 0 already satisfies (GE 0, NE 5: review l1b row A) or a wait on another signal, the CP may
  run the dispatch before the end-of-pipe invalidate: that CU reads the zeros it filled, stale."""
  ops = [("release",)] + ([("wait", *wait)] if wait else [])
  got = _release_run(arch, monkeypatch, ops)
  assert got.tolist() == [7, 7 if fresh else 0], got

@needs_llvm
@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("ops,fresh", [([("release",), ("write", 2)], False), ([("release",), ("release", 2, 0)], True),
                                       ([("release",), ("release", 2, 0), ("write", 3)], False)],
                         ids=["write_data", "later_release", "later_release_then_write_data"])
def test_release_invalidate_needs_the_value_it_wrote(arch, ops, fresh, monkeypatch):
  """A RELEASE_MEM with the invalidate writes 1 over 0, then the queue changes the fence before a WAIT_REG_MEM GE 1
  passes. A WRITE_DATA (the ME writes it at once, not at end of pipe) of 2 or 3 passes the wait while the release's
  invalidate may still be pending: the second CU reads the stale 0 (review l1c row 1; it read 7). A later release of
  the same queue (no cache action) writing 2: it retires after the first, so the wait on its value proves both: 7."""
  got = _release_run(arch, monkeypatch, ops + [("wait", GE, 1, "fence")])
  assert got.tolist() == [7, 7 if fresh else 0], got

@needs_llvm
@pytest.mark.parametrize("arch", list(ARCHS))
def test_end_of_shader_release_proves_no_earlier_release(arch, monkeypatch):
  """The release with the invalidate (end of pipe) writes 1, then a CS_DONE end-of-shader release (event_index 6, no
  cache action) writes 2, and WAIT_REG_MEM GE 2 passes on it. An EOS event is signalled when the shaders end, so it
  may complete before the earlier end-of-pipe one: the wait proves nothing about that invalidate and the second CU
  reads the stale 0 (review l1c row 3; it read 7: the EOS release was put in the queue's end-of-pipe order). The same
  with an end-of-pipe second release: 7 (test_release_invalidate_needs_the_value_it_wrote)."""
  got = _release_run(arch, monkeypatch, [("release",), ("release", 2, 0, "eos"), ("wait", GE, 2, "fence")])
  assert got.tolist() == [7, 0], got

def test_release_mem_event_index_other_than_eop_or_plain_eos_is_refused():
  """A CS_DONE end-of-shader release (event_index 6) carrying a cache action on a compute queue (documented nowhere:
  cp.py release_mem): the mock CP stops the queue with an error naming the packet rather than guess what it does; so
  does an event_index that is neither 5 nor 6 (review l1c row 3), and index 6 with an event type other than CS_DONE /
  PS_DONE."""
  from types import SimpleNamespace
  from ioctl_defs.amd import pm4
  from hcqrt.mock.amd import tables as T
  from hcqrt.mock.amd.cp import GPUError, Queue
  from hcqrt.mock.amd.memory import GPUVM
  for arch, inv in (("gfx1100", pm4.RM_GCR_GLV_INV), ("gfx942", pm4.EOP_TCL1_ACTION_EN)):
    q = Queue(SimpleNamespace(queue_exception=lambda q, ec: None, queue_serials=iter([1])), 1, T.QUEUE_COMPUTE, GPUVM(), 0, 4096, 0, 0, arch)
    eos = pm4.release_mem(0x1000, 1, event_type=pm4.CS_DONE, event_index=pm4.EVENT_INDEX_SHADER_DONE, cache=inv)[1:]
    with pytest.raises(GPUError, match=r"RELEASE_MEM end-of-shader event \(event_type 0x2f, event_index 6\) with cache actions"):
      q.release_mem(eos)
    with pytest.raises(GPUError, match="RELEASE_MEM event_type 0x14 event_index 3 is not modelled"):
      q.release_mem(pm4.release_mem(0x1000, 1, event_index=3)[1:])
    # an end-of-pipe event type (CACHE_FLUSH_AND_INV_TS 0x14) at the end-of-shader index (review amd39 row 4c)
    with pytest.raises(GPUError, match="RELEASE_MEM event_type 0x14 event_index 6 is not modelled"):
      q.release_mem(pm4.release_mem(0x1000, 1, event_index=pm4.EVENT_INDEX_SHADER_DONE)[1:])

@needs_llvm
@pytest.mark.parametrize("arch", list(ARCHS))
def test_release_invalidate_lands_once_an_sdma_poll_saw_its_fence(arch, monkeypatch):
  """The release, then the compute queue waits on a flag; an SDMA queue polls the release's fence (POLL_REGMEM GE 1,
  which the old 0 fails) and then writes the flag. The SDMA poll saw the release complete, so its invalidate has run
  and the second CU reads 7 (review l1c row 4: a POLL_REGMEM that observes nothing leaves it stale, 0)."""
  got = _release_run(arch, monkeypatch, [("release",)], sdma_poll=True)
  assert got.tolist() == [7, 7], got

@needs_llvm
@pytest.mark.parametrize("gl1_in_release", [True, False])
def test_release_gl1_inv_drops_the_gl1s_once_waited(gl1_in_release, monkeypatch):
  """gfx1100: the waited release's GCR GL1_INV is the only GL1 invalidate left. With it the second SA's L0 (dropped by
  GLV_INV) refills 7 from memory; without it from its GL1, which still holds the zeros."""
  got = _release_run("gfx1100", monkeypatch, [("release",), ("wait", GE, 1, "fence")], gl1_in_release=gl1_in_release)
  assert got.tolist() == [7, 7 if gl1_in_release else 0], got

@needs_llvm
@pytest.mark.parametrize("arch", list(ARCHS))
def test_lines_filled_after_the_release_survive_its_wait(arch, monkeypatch):
  """The release's invalidate drops only the lines held at the release: an ACQUIRE_MEM after it drops them all, then
  `bcast` fills x's 7s again in both CUs and `fill9` stores 9s from the first (its own line takes them). The wait may
  come after the release's invalidate ran before those fills, so they stay: the last `bcast` reads 7 on the second
  CU. (Review l1b row C: a wait that drops every line, or the lines marked at the release past a later invalidate of
  everything, reads 9.)"""
  got = _release_run(arch, monkeypatch, [("release",), ("acquire",), ("bcast",), ("fill9",), ("wait", GE, 1, "fence")])
  assert got.tolist() == [9, 7], got

@needs_llvm
@pytest.mark.parametrize("arch", list(ARCHS))
def test_release_invalidate_lands_once_wait_events_consumed_a_later_interrupt(arch, monkeypatch):
  """The release (no interrupt of its own), then the submission's timeline release and the event release with INT_SEL
  2; the host consumes that event in WAIT_EVENTS and submits `bcast` with no wait on the fence: the queue's EOP
  events retire in order, so the release's invalidate has run and the second CU reads 7 (review l1b row B; it read
  the stale 0)."""
  got = _release_run(arch, monkeypatch, [("release",)], events_wait=True)
  assert got.tolist() == [7, 7], got

@needs_llvm
@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("events_from,fresh", [("compute", True), ("sdma", False), ("compute_then_sdma", False),
                                               ("sdma_then_compute", False), ("compute_then_host", False),
                                               ("host_then_compute", False)])
def test_wait_events_lands_only_what_its_interrupts_cover(arch, events_from, fresh, monkeypatch):
  """A WAIT_EVENTS proves a release only through an event every signal of which, since it was last consumed, came
  from interrupts of the release's own queue after it (kfd.py _wait_events): the compute queue's own INT_SEL 2
  release does (7); an SDMA trap alone says nothing of the compute queue's end-of-pipe events (0; review l1c row 4).
  Both on the one event, as the backend raises them (hcqrt/amd/device.py): with the SDMA trap first the release's
  interrupt finds the event signalled already and merges (0); with the compute release first, the trap may have come
  first on hardware and woken the host before the release completed (0; review l1c row 5, it read 7). The same with a
  host AMDKFD_IOC_SET_EVENT in place of the trap: after the release's interrupt (the host's signal may have come
  first, 0; review amd39 row 4a: it read 7 when SET_EVENT left the event's sources alone) or before it (0)."""
  got = _release_run(arch, monkeypatch, [("release",)], events_from=events_from)
  assert got.tolist() == [7, 7 if fresh else 0], got

@needs_llvm
@pytest.mark.parametrize("events_from", ["compute", "sdma"])
def test_release_run_wait_events_does_not_race_the_cp(events_from, monkeypatch):
  """_release_run's WAIT_EVENTS (1 ms timeout) with the mock CP starting 50 ms after each doorbell: it waits until
  the engine settled, so the compute queue's own interrupt still lands the release (7) and the SDMA trap's still
  signals the event (a wait that timed out fails the run rather than read as stale). Review amd39 row 1: the
  WAIT_EVENTS after a lone submission ran before the CP under load, timed out, and the release read stale."""
  got = _release_run("gfx1100", monkeypatch, [("release",)], events_from=events_from, cp_latency_s=0.05)
  assert got.tolist() == [7, 7 if events_from == "compute" else 0], got

@needs_llvm
@pytest.mark.parametrize("arch", list(ARCHS))
def test_wait_events_needs_an_interrupt_that_newly_signalled_after_the_release(arch, monkeypatch):
  """The compute queue signals the host's event (INT_SEL 2) before the release, then again after it, and the host
  consumes it once: the event was already signalled when the release's interrupt came, so the waiter may have woken
  on the first one, before the release ran: stale 0 (review l1c row 4: it read 7 when `interrupt` counted every event
  it hit, not only those it newly signalled)."""
  got = _release_run(arch, monkeypatch, [("interrupt",), ("release",)], events_from="compute")
  assert got.tolist() == [7, 0], got

@needs_llvm
@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("ops", [[("release",), ("interrupt",), ("eos_interrupt",)], [("release",), ("eos_interrupt",)]],
                         ids=["eop_then_eos", "eos"])
def test_end_of_shader_interrupt_keeps_wait_events_from_landing_a_release(arch, ops, monkeypatch):
  """The release with the invalidate, then (eop_then_eos) an INT_SEL 2 end-of-pipe release that newly signals the
  host's event, then a CS_DONE end-of-shader release with INT_SEL 2 on the same event, then the release's own queue
  signals it once more at the end of pipe and the host consumes it with WAIT_EVENTS. The end-of-shader event may
  complete before both end-of-pipe ones (cp.py release_mem) and wake the host first: the invalidate may still be
  pending, stale 0 (review amd39 row 2: the EOS interrupt counted as the queue's end-of-pipe source, 7). With the
  EOS interrupt the first to signal (eos) the later end-of-pipe one finds the event signalled: 0 too."""
  got = _release_run(arch, monkeypatch, ops, events_from="compute")
  assert got.tolist() == [7, 0], got

@needs_llvm
@pytest.mark.parametrize("host_signal", [False, True])
def test_aql_completion_interrupt_lands_a_release_through_wait_events(host_signal, monkeypatch):
  """gfx1100, AQL, every acquire scope NONE and every PM4 L0 / GL1 invalidate taken out: `bcast` fills x's zeros into
  two SAs, `fill` stores 7s. A PM4-IB's RELEASE_MEM with GLV_INV | GL1_INV (no interrupt of its own), then a barrier
  packet whose completion signal has the host's event in its mailbox: its completion interrupt comes from the same
  queue after the release, so once the host consumed the event with WAIT_EVENTS the release has completed and `bcast`
  reads 7 on the second SA. With a host AMDKFD_IOC_SET_EVENT on the event after that interrupt the waiter may have
  woken on the host's signal first: 0 (review amd39 row 4b: an AQL completion interrupt with no source read 0 both
  ways). (gfx942 is left out: which of its 8 XCCs' CPs raises a barrier packet's completion is documented nowhere.)"""
  from ioctl_defs.amd import aql, pm4, sdma
  from hcqrt.amd import device as amd_device
  monkeypatch.setenv("AMD_AQL", "1")
  inv = pm4.RM_GCR_GLV_INV | pm4.RM_GCR_GL1_INV
  for name in ("GCR_GLV_INV", "GCR_GL1_INV", "RM_GCR_GLV_INV", "RM_GCR_GL1_INV"): monkeypatch.setattr(pm4, name, 0)
  monkeypatch.setattr(amd_device, "_SDMA_GCR_BEFORE", amd_device._SDMA_GCR_BEFORE & ~(sdma.GCR_GLV_INV | sdma.GCR_GL1_INV))
  no_aql_acquire(monkeypatch)
  lanes = ARCHS["gfx1100"][1]
  drv = install_mock_amd("gfx1100")
  try:
    d, progs, x, out = device_with_bcast_and_fill("gfx1100", lanes)
    fence, sig = d.allocator.alloc(64), d.allocator.alloc(64)
    # amd_signal_t: kind USER, value 1, event mailbox = the host's event slot, event id
    d.allocator.copyin(sig, memoryview(bytearray(struct.pack("<qqQI36x", aql.AMD_SIGNAL_KIND_USER, 1, d.event_slot, d.event_id))))
    progs["bcast"](x, out, global_size=(2, 1, 1), local_size=(lanes, 1, 1), wait=True)
    progs["fill"](x, out, global_size=(1, 1, 1), local_size=(lanes, 1, 1), wait=True)
    drv.settle(); d.ioctl("AMDKFD_IOC_RESET_EVENT", event_id=d.event_id)   # the launches' own signals of the event
    ib = pm4.release_mem(fence.va, 1, cache=inv)
    host, va = d.kernargs.alloc(len(ib) * 4, 256); ctypes.memmove(host, struct.pack(f"<{len(ib)}I", *ib), len(ib) * 4)
    d.compute.submit_packets([aql.pm4_ib(pm4.indirect_buffer(va, len(ib))), aql.barrier_and([], completion_signal=sig.va)])
    drv.settle()
    if host_signal: d.ioctl("AMDKFD_IOC_SET_EVENT", event_id=d.event_id)
    ev = d.abi.ffi.new("struct kfd_event_data[1]"); ev[0].event_id = d.event_id
    res = d.ioctl("AMDKFD_IOC_WAIT_EVENTS", events_ptr=int(d.abi.ffi.cast("uintptr_t", ev)), num_events=1, wait_for_all=0, timeout=1)
    assert res.wait_result == 0, f"WAIT_EVENTS timed out (wait_result {res.wait_result}): the completion never signalled the event"
    q = d.hw_compute_queue(); q.exec(progs["bcast"], progs["bcast"].fill_kernargs((x, out), ()), (2, 1, 1), (lanes, 1, 1))
    d.compute.submit_packets(q._packets(d))
    d.submit_timeline(d.after_timeline(d.hw_compute_queue())); d.synchronize()
    got = np.zeros(2 * lanes, np.int32); d.allocator.copyout(memoryview(got.view(np.uint8)), out)
  finally: uninstall_mock_amd(drv)
  assert got.reshape(2, lanes)[:, 0].tolist() == [7, 0 if host_signal else 7], got.reshape(2, lanes)[:, 0]

@needs_llvm
@pytest.mark.parametrize("arch,mailbox", [("gfx942", "error_event"), ("gfx1100", "error_event"), ("gfx1100", "host_event")])
@pytest.mark.parametrize("barrier", [False, True], ids=["no_barrier", "barrier"])
def test_aql_queue_error_interrupt_keeps_wait_events_from_landing_a_release(arch, mailbox, barrier, monkeypatch):
  """AQL, every acquire scope NONE and every PM4 L1 / GL0 / GL1 invalidate taken out: `bcast` fills x's zeros into two
  CUs (SAs), `fill` stores 7s. A PM4-IB's RELEASE_MEM with the L1 invalidate (no interrupt of its own), then a kernel
  dispatch packet of 0 dimensions (with and without its barrier bit): the CP stops the queue there and reports the
  error through queue_inactive_signal, whose mailbox interrupt signals the backend's error event. The backend's wait
  consumes it in WAIT_EVENTS, raises AMDError and recreates its queues; `bcast` on the new queue reads the stale 0 on
  the second CU: the packet processor stopping at a bad packet has not waited for the earlier release's end-of-pipe
  event (aql.py _write_inactive_signal; review amd39b nit 3: the error interrupt counted as the queue's end-of-pipe
  source and landed the invalidate, 7). host_event: the inactive signal's mailbox is the host's event, which an
  INT_SEL 2 end-of-pipe release in the IB after the invalidating one newly signalled first: the error report merges
  into it and may have woken the waiter before that release completed, 0 too (it read 7 while the error interrupt
  had the queue's own source). (gfx942 runs the IB on each of its 8 XCCs and only XCC 0's event release newly
  signals the event, so there the host_event case reads 0 on any mock: left out.)"""
  first, _, _ = _aql_error_then_recover(arch, mailbox, barrier, monkeypatch)
  assert first == [7, 0], first

@needs_llvm
@pytest.mark.parametrize("arch,mailbox", [("gfx942", "error_event"), ("gfx1100", "error_event"), ("gfx1100", "host_event")])
def test_a_recreated_queue_with_a_reused_id_proves_none_of_the_destroyed_queues_releases(arch, mailbox, monkeypatch):
  """The run above, then `bcast` once more on the recreated queue. The KFD gave it the destroyed queue's id (the lowest
  free one: linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_process_queue_manager.c:61-81, :560), but its end-of-pipe
  events retire in order with its own releases only: its completion interrupt, which the backend's wait consumed, says
  nothing of the destroyed queue's release still pending, so the second CU still reads the stale 0 (the mock that
  keyed pending invalidates by queue id landed it there: 7; review amd40 finding 2). On gfx942 the stale lane sits
  on XCC 1 and the recreated queue's interrupts come from XCC 0 only, so that case guards the XCC rule
  (cp.py Queue.interrupted), not the serial; the gfx1100 cases guard the serial (review amd40b nit 2)."""
  first, second, (before, after) = _aql_error_then_recover(arch, mailbox, False, monkeypatch)
  assert after == before, f"the recreated queues did not reuse the ids ({before} -> {after}): the test shows nothing"
  assert (first, second) == ([7, 0], [7, 0]), (first, second)

def _aql_without_invalidates(arch: str, monkeypatch) -> int:
  """An AQL queue with every acquire scope NONE and every PM4 / SDMA L1 (GL0 / GL1) invalidate of the backend taken out;
  returns the RELEASE_MEM cache bits that invalidate them (gfx11 GLV_INV | GL1_INV, gfx9 EOP_TCL1_ACTION_EN)."""
  from ioctl_defs.amd import pm4, sdma
  from hcqrt.amd import device as amd_device
  monkeypatch.setenv("AMD_AQL", "1")
  inv = pm4.RM_GCR_GLV_INV | pm4.RM_GCR_GL1_INV if arch == "gfx1100" else pm4.EOP_TCL1_ACTION_EN
  for name in ("GCR_GLV_INV", "GCR_GL1_INV", "RM_GCR_GLV_INV", "RM_GCR_GL1_INV", "COHER_TCL1_ACTION_ENA", "EOP_TCL1_ACTION_EN"):
    monkeypatch.setattr(pm4, name, 0)
  monkeypatch.setattr(amd_device, "_SDMA_GCR_BEFORE", amd_device._SDMA_GCR_BEFORE & ~(sdma.GCR_GLV_INV | sdma.GCR_GL1_INV))
  no_aql_acquire(monkeypatch)
  return inv

def _aql_error_then_recover(arch: str, mailbox: str, barrier: bool, monkeypatch) -> tuple[list[int], list[int], tuple[list[int], list[int]]]:
  """test_aql_queue_error_interrupt_keeps_wait_events_from_landing_a_release's run: what the second CU's lane 0 reads
  in the first and the second `bcast` after recovery, and the KFD queue ids before and after."""
  from ioctl_defs.amd import aql, pm4
  from hcqrt.amd.device import AMDError
  from hcqrt.mock.amd import GPUError
  inv = _aql_without_invalidates(arch, monkeypatch)
  lanes = ARCHS[arch][1]
  drv = install_mock_amd(arch)
  try:
    d, progs, x, out = device_with_bcast_and_fill(arch, lanes)
    fence = d.allocator.alloc(64)
    progs["bcast"](x, out, global_size=(2, 1, 1), local_size=(lanes, 1, 1), wait=True)
    progs["fill"](x, out, global_size=(1, 1, 1), local_size=(lanes, 1, 1), wait=True)
    ib = pm4.release_mem(fence.va, 1, cache=inv)
    event = d.error_event
    if mailbox == "host_event":   # the inactive signal (amd_signal_t after amd_queue_t) reports into the host's event
      drv.settle(); d.ioctl("AMDKFD_IOC_RESET_EVENT", event_id=d.event_id)   # the launches' own signals of it
      struct.pack_into("<QI", (ctypes.c_char * 12).from_address(d.compute.amd_queue.host + aql.AMD_QUEUE_BYTES + 16), 0, d.event_slot, d.event_id)
      ib += pm4.release_mem(d.event_slot, d.event_id, data_sel=pm4.DATA_SEL_32_BIT_LOW, int_sel=pm4.INT_SEL_SEND_INTERRUPT_AFTER_WRITE_CONFIRM,
                            ctxid=d.event_id)
      event = d.event_id
    host, va = d.kernargs.alloc(len(ib) * 4, 256); ctypes.memmove(host, struct.pack(f"<{len(ib)}I", *ib), len(ib) * 4)
    bad = struct.pack("<HH60x", aql.header(aql.PACKET_TYPE_KERNEL_DISPATCH, barrier, release=aql.FENCE_SCOPE_SYSTEM), 0)
    before = sorted(drv.queues)
    d.compute.submit_packets([aql.pm4_ib(pm4.indirect_buffer(va, len(ib))), bad])
    with pytest.raises(GPUError, match="0 dimensions"): drv.settle()
    assert drv.events[event]["signaled"], "the inactive signal's interrupt did not signal its event"
    with pytest.raises(AMDError, match="AQL invalid dimensions.*recovered"): d.wait_signal(d.new_signal(0), 1, 5.0)
    assert not drv.events[event]["signaled"], "the backend's wait did not consume the event"
    reads = []
    for _ in range(2):
      progs["bcast"](x, out, global_size=(2, 1, 1), local_size=(lanes, 1, 1), wait=True)
      got = np.zeros(2 * lanes, np.int32); d.allocator.copyout(memoryview(got.view(np.uint8)), out)
      reads.append(got.reshape(2, lanes)[:, 0].tolist())
    after = sorted(drv.queues)
  finally: uninstall_mock_amd(drv)
  return reads[0], reads[1], (before, after)

@needs_llvm
@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("barrier", [True, False])
def test_release_invalidate_lands_once_an_aql_barrier_saw_its_signal(arch, barrier, monkeypatch):
  """On an AQL queue, every acquire scope NONE and every PM4 L1 / GL0 / GL1 invalidate taken out: `bcast` fills x's
  zeros into two CUs (SAs), `fill` stores 7s. Then, raw: a PM4-IB whose RELEASE_MEM (gfx11 GLV_INV | GL1_INV, gfx9
  EOP_TCL1_ACTION_EN) writes 0 to an amd_signal_t's value (1 before), a BARRIER_AND on that signal, and `bcast`.
  gfx1100: the barrier waited for the value to reach 0 (HSA signals count down), which only the release wrote, so its
  invalidate has run: the second SA reads 7; without the barrier it reads the zeros (review l1b row B). gfx942 (8
  XCCs): each XCC's CP runs the IB and its own release, invalidating only its own L1s; XCC 1's barrier may pass on
  XCC 0's write of 0 while XCC 1's invalidate is pending, so the second workgroup (on XCC 1) reads 0 either way
  (review l1c row 2; it read 7)."""
  from ioctl_defs.amd import aql, pm4
  inv = _aql_without_invalidates(arch, monkeypatch)
  lanes = ARCHS[arch][1]
  drv = install_mock_amd(arch)
  try:
    d, progs, x, out = device_with_bcast_and_fill(arch, lanes)
    sig = d.allocator.alloc(64)
    d.allocator.copyin(sig, memoryview(bytearray(struct.pack("<qq48x", 0, 1))))   # amd_signal_t: kind, value 1
    progs["bcast"](x, out, global_size=(2, 1, 1), local_size=(lanes, 1, 1), wait=True)
    progs["fill"](x, out, global_size=(1, 1, 1), local_size=(lanes, 1, 1), wait=True)
    ib = pm4.release_mem(sig.va + 8, 0, cache=inv)
    host, va = d.kernargs.alloc(len(ib) * 4, 256); ctypes.memmove(host, struct.pack(f"<{len(ib)}I", *ib), len(ib) * 4)
    q = d.hw_compute_queue(); q.exec(progs["bcast"], progs["bcast"].fill_kernargs((x, out), ()), (2, 1, 1), (lanes, 1, 1))
    d.compute.submit_packets([aql.pm4_ib(pm4.indirect_buffer(va, len(ib)))] + ([aql.barrier_and([sig.va])] if barrier else []) + q._packets(d))
    d.submit_timeline(d.after_timeline(d.hw_compute_queue())); d.synchronize()
    got = np.zeros(2 * lanes, np.int32); d.allocator.copyout(memoryview(got.view(np.uint8)), out)
  finally: uninstall_mock_amd(drv)
  assert got.reshape(2, lanes)[:, 0].tolist() == [7, 7 if barrier and arch == "gfx1100" else 0], got.reshape(2, lanes)[:, 0]

def test_pending_invalidates_land_by_comparison_and_in_queue_order():
  """PendingInvalidate.proven_by compares the wait's function, reference and mask with the fence's value before and
  after the release (an HSA signal counts down: an AQL barrier's dependency met means the 64-bit value == 0), at the
  release's width; land_pending drops the proven release's lines and those of every earlier release of its queue."""
  from types import SimpleNamespace
  from hcqrt.mock.amd.cp import PendingInvalidate, land_pending
  eq0 = (8, 3, 0, (1 << 64) - 1)
  assert PendingInvalidate(0x108, 8, 1, 0, [], 1).proven_by(0x108, *eq0)
  assert not PendingInvalidate(0x108, 8, 0, 0, [], 1).proven_by(0x108, *eq0)         # already 0 before the release
  assert not PendingInvalidate(0x108, 8, 1 << 32, 0, [], 1).proven_by(0x108, 4, 3, 0, ~0)   # low dword was 0 before
  assert PendingInvalidate(0x108, 8, 1 << 32, 0, [], 1).proven_by(0x10C, 4, 3, 0, ~0)   # the high dword moved to 0
  assert PendingInvalidate(0x100, 8, 5, 6 + (1 << 32), [], 1).proven_by(0x100, 4, 5, 6, ~0)   # 64-bit release, its low dword
  assert not PendingInvalidate(0x100, 4, 0, 6, [], 1).proven_by(0x100, 4, 5, 6, 0x4)   # masked: 0 & 4 >= 6 fails, 6 & 4 too
  dropped: list[str] = []
  mk = lambda name, q, addr: PendingInvalidate(addr, 4, 0, 1, [(SimpleNamespace(drop_marked=dropped.append), name)], q)
  vm = SimpleNamespace(l1_pending=[mk("a", 1, 0x10), mk("b", 2, 0x20), mk("c", 1, 0x30), mk("d", 1, 0x40)])
  land_pending(vm, lambda p: p.proven_by(0x30, 4, 5, 1, ~0))
  assert dropped == ["a", "c"] and [p.addr for p in vm.l1_pending] == [0x20, 0x40]
  # the in-order landing is per (queue, XCC): XCC 1's copy of queue 1 stays when XCC 0's later one is proven
  dropped.clear()
  vm.l1_pending = [mk("a", 1, 0x10), mk("b", 1, 0x10), mk("c", 1, 0x30)]
  vm.l1_pending[1].xcc = 1
  land_pending(vm, lambda p: p.proven_by(0x30, 4, 5, 1, ~0))
  assert dropped == ["a", "c"] and [p.xcc for p in vm.l1_pending] == [1]

def test_release_in_a_per_xcc_ib_marks_its_xcc_and_unprovable_copies_do_not_pile_up():
  """Queue.release_l1_invalidate inside an AQL PM4-IB on 8 XCCs: each copy marks only its XCC's L1s (mark_xcc) and is
  filed under that XCC. A copy whose value equals the fence's old one (no wait can prove it) hands its marks to the
  next copy of its queue and XCC instead of staying (review l1c row 2: they piled up, one per XCC per release)."""
  from types import SimpleNamespace
  from hcqrt.mock.amd.cp import Queue
  cache = SimpleNamespace(held=True, mark=lambda: "all", mark_xcc=lambda x, nx: f"x{x}/{nx}", live=lambda m: True)
  q = SimpleNamespace(vm=SimpleNamespace(l1_pending=[]), qid=3, serial=3, num_xcc=8, ibs=[], _marks=Queue._marks)
  q.xcc = lambda: q.ibs[-1][3] if q.ibs else 0
  for rnd in range(3):
    for x in reversed(range(8)):
      q.ibs = [[0, 1, 0, x]]
      Queue.release_l1_invalidate(q, 0x100, 8, 1 if rnd == 0 and x == 7 else 0, 0, [cache])
  pend = q.vm.l1_pending
  assert len(pend) <= 9 and {p.xcc for p in pend} == set(range(8)), [(p.xcc, p.old, p.new) for p in pend]
  assert all(m == f"x{p.xcc}/8" for p in pend for _, m in p.marks) and all(p.queue == 3 for p in pend)
  assert sum(len(p.marks) for p in pend if p.xcc == 1) == 3   # XCC 1's three copies' marks are all still held

def test_l1_slots_sit_on_their_workgroups_xcc():
  """Every batch's slot map keeps each workgroup on an L1 of its own XCC (slot % nx == gid % nx), the slots of a batch
  are distinct, and the k-th workgroup of an XCC in every batch gets that XCC's k-th slot."""
  for nx in (1, 2, 3, 8):
    for g0 in range(9):
      for n in range(1, 12):
        gids = np.arange(g0, g0 + n); s = l1_slots(gids, nx)
        assert (s % nx == gids % nx).all() and len(set(s.tolist())) == n, (nx, g0, n, s)
        for x in range(nx): assert (s[gids % nx == x] // nx).tolist() == list(range(int((gids % nx == x).sum())))

XCC = store_or_copy(one_store(1), 64)

@needs_llvm
def test_l1s_of_several_xccs_read_through_their_own_xcc():
  """gfx942, six workgroups on two XCCs (workgroup g on XCC g % 2) in batches of three: workgroup 1 (XCC 1) stores 5
  into x, the others copy x out. Whatever the interleaving, workgroup 3 (XCC 1, second batch) reads 5 (its XCC's L2
  holds the store and no XCC-1 L1 held an older line of x), and workgroup 4 (XCC 0) reads 0 (XCC 1 has not written
  back, and XCC 0's L1 filled 0s). An L1 placed on the wrong XCC reads the other XCC's view. (Review l1 row 5.)"""
  text, entry, _, kd = read_object(compile_ir(XCC, cpu="gfx942"), "k")
  x, out = np.zeros(64, np.int32), np.full(6 * 64, -1, np.int32)
  m = FlatMemory(); m.map(0x10000, x.view(np.uint8)); m.map(0x20000, out.view(np.uint8))
  m.map(0x40000, np.frombuffer(bytearray(struct.pack("<QQ", 0x10000, 0x20000)), np.uint8))
  launch(text, kd, m, 0x40000, (6,), (64,), entry=entry, waves_cls=Gfx9Waves, max_waves=3, num_xcc=2)
  o = out.reshape(6, 64)
  assert (o[3] == 5).all() and (o[4] == 0).all() and (o[[0, 2]] == 0).all(), o[:, 0]

# workgroup 1 stores 5 into x[t] and then raises a flag (an agent-scope atomic: past the L1s, no release, so x stays
# dirty in its XCC's L2); the others wait for the flag, then copy x[t] to out[g * 64 + t]
FLAGGED = store_or_copy("""  %w = icmp eq i32 %g, 1
  br i1 %w, label %st, label %spin
st:
  store i32 5, ptr addrspace(1) %px
  store atomic i32 1, ptr addrspace(1) %flag syncscope("agent") monotonic, align 4
  br label %done
spin:
  %f = load atomic i32, ptr addrspace(1) %flag syncscope("agent") monotonic, align 4
  %z = icmp eq i32 %f, 0
  br i1 %z, label %spin, label %rd""", 64, args=", ptr addrspace(1) %flag")

@needs_llvm
def test_freeze_keeps_what_each_xccs_l1_saw():
  """gfx942 on two XCCs: workgroup 1 (XCC 1) stores 5 into x, dirty in XCC 1's L2, and raises a flag; workgroup 0
  (XCC 0) waits for it, then reads x through its XCC (0s) and fills its L1. The dispatch's end writes XCC 1's bytes
  back; the L1 keeps what it filled, so a second dispatch with no invalidate reads 0 on that CU. Freezing the line
  from memory would hand the L1 XCC 1's 5s. (Review l1 row 6.)"""
  text, entry, _, kd = read_object(compile_ir(FLAGGED, cpu="gfx942"), "k")
  x, out, flag = np.zeros(64, np.int32), np.full(2 * 64, -1, np.int32), np.zeros(64, np.int32)
  m = FlatMemory(); m.map(0x10000, x.view(np.uint8)); m.map(0x20000, out.view(np.uint8)); m.map(0x30000, flag.view(np.uint8))
  m.map(0x40000, np.frombuffer(bytearray(struct.pack("<QQQ", 0x10000, 0x20000, 0x30000)), np.uint8))
  l1 = VectorL1(m, lambda a, n, _: m.read(a, n), np.zeros_like)
  launch(text, kd, m, 0x40000, (2,), (64,), entry=entry, waves_cls=Gfx9Waves, num_xcc=2, l1=l1)
  assert (x == 5).all() and (out[:64] == 0).all(), out[0]
  out[:] = -1
  launch(text, kd, m, 0x40000, (1,), (64,), entry=entry, waves_cls=Gfx9Waves, l1=l1)
  assert (out[:64] == 0).all(), out[0]

def test_cp_invalidate_in_a_per_xcc_ib_drops_that_xccs_l1s():
  """An ACQUIRE_MEM inside an AQL PM4-IB runs on each XCC's CP in turn (aql.py): it drops the L1s of its own XCC (slot
  % num_xcc) and keeps the others', stale; on the ring (or a queue of one XCC) it drops them all. (Review l1 row 7.)"""
  from types import SimpleNamespace
  from hcqrt.mock.amd.cp import Queue
  m = FlatMemory(); buf = np.zeros(256, np.uint8); m.map(0x1000, buf)
  def filled() -> VectorL1:
    l1 = VectorL1(m, lambda a, n, _: m.read(a, n), lambda h: h % 2)
    for h in range(4): l1.load(np.array([0x1000], np.uint64), 4, np.array([h]), m.read(np.array([0x1000], np.uint64), 4))
    return l1
  def held(l1: VectorL1) -> list[int]: return np.flatnonzero(l1.held[0x1000].any(1)).tolist() if 0x1000 in l1.held else []
  for ibs, nx, want in (([[0, 8, 0, 1]], 2, [0, 2]), ([[0, 8, 0, 0]], 2, [1, 3]), ([], 2, []), ([[0, 8, 0, 1]], 1, [])):
    q = SimpleNamespace(vm=SimpleNamespace(vector_l1=filled(), gl1=None), ibs=ibs, num_xcc=nx)
    q.xcc = lambda q=q: Queue.xcc(q)
    Queue.invalidate_vector_l1(q)
    assert held(q.vm.vector_l1) == want, (ibs, nx, held(q.vm.vector_l1))

@needs_llvm
@pytest.mark.parametrize("use_aql,gl1_inv", [("0", True), ("0", False), ("1", False)])
def test_gl1_lines_survive_until_gl1_inv(use_aql, gl1_inv, monkeypatch):
  """gfx1100 through the mock KFD (PM4), one submission of three launches: `bcast`'s two workgroups sit on two shader
  arrays (slot % array_count), so each SA's GL1 fills x's zeros; `fill` stores 7s from the first SA; `bcast` again.
  The backend's ACQUIRE_MEM before each launch drops the GL0s (GLV_INV) and, with GCR_GL1_INV, the GL1s: the second
  SA reads 7. Without GL1_INV in it, the second SA's L0 refills from its GL1, which still holds the zeros
  (AMDGPUUsage GFX10-GFX11: work-groups on different SAs "access different L1s"). On an AQL queue, with GL1_INV
  taken out of every PM4 ACQUIRE_MEM, the packets' system-scope acquire drops the GL1s (aql.py): the second SA reads
  7 (review l1b row C: an acquire that dropped only the GL0s reads 0)."""
  from ioctl_defs.amd import pm4
  monkeypatch.setenv("AMD_AQL", use_aql)
  if not gl1_inv: monkeypatch.setattr(pm4, "GCR_GL1_INV", 0)
  lanes = ARCHS["gfx1100"][1]
  drv = install_mock_amd("gfx1100")
  try:
    d, progs, x, out1 = device_with_bcast_and_fill("gfx1100", lanes)
    out2 = d.allocator.alloc(8 * lanes)
    b, f = progs["bcast"], progs["fill"]
    q = d.after_timeline(d.hw_compute_queue())
    q.exec(b, b.fill_kernargs((x, out1), ()), (2, 1, 1), (lanes, 1, 1))
    q.exec(f, f.fill_kernargs((x, out1), ()), (1, 1, 1), (lanes, 1, 1))
    q.exec(b, b.fill_kernargs((x, out2), ()), (2, 1, 1), (lanes, 1, 1))
    d.submit_timeline(q); d.synchronize()
    first, second = np.zeros(2 * lanes, np.int32), np.zeros(2 * lanes, np.int32)
    d.allocator.copyout(memoryview(first.view(np.uint8)), out1); d.allocator.copyout(memoryview(second.view(np.uint8)), out2)
  finally: uninstall_mock_amd(drv)
  first, second = first.reshape(2, lanes), second.reshape(2, lanes)
  want = 7 if gl1_inv or use_aql == "1" else 0
  assert (first == 0).all() and (second[0] == 7).all() and (second[1] == want).all(), (first[:, 0], second[:, 0])

@needs_llvm
@pytest.mark.parametrize("acquire,want", [("", 0), ('  fence syncscope("workgroup") acquire\n', 0),
                                          ('  fence syncscope("agent") acquire\n', 5)])
def test_gl1_is_dropped_by_buffer_gl1_inv(acquire, want):
  """gfx1100 with GL1s on two shader arrays, six workgroups in batches of two (slot k on SA k % 2): workgroup 0 fills
  x's zeros into SA 0's GL1 and its L0; workgroup 3 (SA 1) stores 5. Workgroup 4, on workgroup 0's CU, reads 0 with
  no acquire (its L0), still 0 after a workgroup-scope acquire (WGP mode, llc's default: `buffer_gl0_inv` alone; the
  L0 refills from SA 0's GL1), and 5 after the agent-scope acquire (buffer_gl0_inv and buffer_gl1_inv)."""
  text, entry, _, kd = read_object(compile_ir(BATCH.replace("ACQUIRE", acquire).replace("LANES", "32"), cpu="gfx1100"), "k")
  x, out = np.zeros(32, np.int32), np.full(6 * 32, -1, np.int32)
  m = FlatMemory(); m.map(0x10000, x.view(np.uint8)); m.map(0x20000, out.view(np.uint8))
  m.map(0x40000, np.frombuffer(bytearray(struct.pack("<QQ", 0x10000, 0x20000)), np.uint8))
  mk = lambda: VectorL1(m, lambda a, n, _: m.read(a, n), np.zeros_like)
  launch(text, kd, m, 0x40000, (6,), (32,), entry=entry, max_waves=2, l1=mk(), gl1=mk(), shader_arrays=2)
  o = out.reshape(6, 32)
  assert (x == 5).all() and (o[0] == 0).all() and (o[4] == want).all(), o[:, 0]

def test_l0_line_filled_from_a_stale_gl1_keeps_its_bytes_past_the_dispatch():
  """An L0 line filled through its SA's stale GL1 line holds the GL1's bytes, not memory's: the dispatch's end keeps
  them (keep_stale_under before freeze), so after a GL1-only invalidate the L0 still reads what it filled."""
  m = FlatMemory(); buf = np.zeros(256, np.uint8); m.map(0x1000, buf)
  a = np.array([0x1000], np.uint64)
  gl1 = VectorL1(m, lambda ad, n, _: m.read(ad, n), np.zeros_like)
  gl0 = VectorL1(m, lambda ad, n, sa: gl1.load(ad, n, sa, m.read(ad, n), fill=False), lambda h: np.asarray(h) % 2)
  def load(l0: int) -> list[int]:
    return gl0.load(a, 4, np.array([l0]), gl1.load(a, 4, np.array([l0 % 2]), m.read(a, 4)))[0].tolist()
  assert load(0) == [0] * 4 and gl0.invalidate(np.array([0])) is None   # SA 0's GL1 holds the zeros; L0 0 dropped
  d = np.full((1, 4), 5, np.uint8)
  gl0.before_write(a, d, np.array([1])); gl1.before_write(a, d, np.array([1])); m.write(a, d)   # L0 1 (SA 1) stores 5s
  assert load(0) == [0] * 4 and load(1) == [5] * 4   # L0 0 refills from SA 0's stale GL1
  gl0.keep_stale_under(lambda h, ad: gl1.stale(gl0.wg_xcc(h), ad)); gl1.freeze(); gl0.freeze()
  gl1.invalidate_all()   # a GL1_INV without GLV_INV
  assert load(0) == [0] * 4 and load(2) == [5] * 4

def _gl1_launch(src: str, mem: FlatMemory, grid: int, gl0: VectorL1, gl1: VectorL1) -> None:
  text, entry, _, kd = read_object(compile_ir(src, cpu="gfx1100"), "k")
  launch(text, kd, mem, 0x40000, (grid,), (32,), entry=entry, max_waves=2, l1=gl0, gl1=gl1, shader_arrays=2)

def _gl1_mem(nwg: int) -> tuple[FlatMemory, np.ndarray, np.ndarray, VectorL1, VectorL1]:
  x, out = np.zeros(32, np.int32), np.full(nwg * 32, -1, np.int32)
  m = FlatMemory(); m.map(0x10000, x.view(np.uint8)); m.map(0x20000, out.view(np.uint8))
  m.map(0x40000, np.frombuffer(bytearray(struct.pack("<QQ", 0x10000, 0x20000)), np.uint8))
  mk = lambda: VectorL1(m, lambda a, n, _: m.read(a, n), np.zeros_like)
  return m, x, out, mk(), mk()

@needs_llvm
def test_glc_load_reads_past_a_stale_gl1():
  """gfx1100, BATCH with every read an agent-scope monotonic atomic load (glc: past the GL0 and the GL1, AMDGPUUsage
  GFX11; such a load fills neither): workgroup 0 (SA 0) reads x's zeros, workgroup 3 (SA 1) stores 5, workgroup 4
  (SA 0, no acquire) reads 5. A glc load that went through the GL1 would fill SA 0's line with the zeros and read 0
  there (review l1b row C)."""
  src = BATCH.replace("%v = load i32, ptr addrspace(1) %px", '%v = load atomic i32, ptr addrspace(1) %px syncscope("agent") monotonic, align 4')
  m, x, out, gl0, gl1 = _gl1_mem(6)
  _gl1_launch(src.replace("ACQUIRE", "").replace("LANES", "32"), m, 6, gl0, gl1)
  o = out.reshape(6, 32)
  assert (x == 5).all() and (o[0] == 0).all() and (o[4] == 5).all(), o[:, 0]

@needs_llvm
@pytest.mark.parametrize("gl1_inv", [False, True])
def test_gl1_lines_keep_their_bytes_past_a_host_write_between_launches(gl1_inv):
  """gfx1100: `bcast`'s two workgroups fill x's zeros into both SAs' GL1s and their L0s; the host writes 9s into x;
  the L0s are dropped (a GLV_INV without GL1_INV) and `bcast` runs again: each L0 refills from its SA's GL1, which
  kept the zeros past the dispatch's end (freeze), so both read 0; with the GL1s dropped too they read 9. (Review
  l1b row C: a GL1 that was not frozen read the host's 9s.)"""
  m, x, out, gl0, gl1 = _gl1_mem(2)
  src = BCAST.replace("@bcast", "@k").replace("LANES", "32")
  _gl1_launch(src, m, 2, gl0, gl1)
  assert (out == 0).all()
  x[:] = 9; gl0.invalidate_all()
  if gl1_inv: gl1.invalidate_all()
  _gl1_launch(src, m, 2, gl0, gl1)
  assert (out == (9 if gl1_inv else 0)).all(), out.reshape(2, 32)[:, 0]

# gfx1100, ten workgroups in batches of two (even ones on slot 0 / SA 0, odd ones on slot 1 / SA 1): 3 stores 5, 7
# stores 6, 4 drops its L0 first (workgroup-scope acquire: buffer_gl0_inv), the others copy x[t] to out[g * 32 + t]
STALE_L0 = store_or_copy("""  switch i32 %g, label %rd [ i32 3, label %st5
                             i32 7, label %st6
                             i32 4, label %acq ]
st5:
  store i32 5, ptr addrspace(1) %px
  br label %done
st6:
  store i32 6, ptr addrspace(1) %px
  br label %done
acq:
  fence syncscope("workgroup") acquire
  br label %rd""", 32)

@needs_llvm
def test_l0_line_filled_through_a_stale_gl1_keeps_the_gl1_bytes():
  """STALE_L0: workgroup 0 fills SA 0's GL1 and slot 0's L0 with x's zeros; 3 (SA 1) stores 5; 4 drops slot 0's L0
  and refills it from SA 0's GL1 (zeros, memory holds 5). When 7 (SA 1) stores 6, slot 0's line is copied before it
  changes: through the GL1, so workgroup 8 (slot 0) still reads 0. A copy taken from memory reads 5 (review l1b row
  C)."""
  m, x, out, gl0, gl1 = _gl1_mem(10)
  _gl1_launch(STALE_L0, m, 10, gl0, gl1)
  o = out.reshape(10, 32)
  assert (x == 6).all() and (o[[0, 4, 6, 8]] == 0).all() and (o[5] == 5).all(), o[:, 0]

@needs_llvm
def test_launch_keeps_an_l0_line_filled_through_a_stale_gl1_past_its_end():
  """BATCH with a workgroup-scope acquire on gfx1100: workgroup 4 refills slot 0's L0 from SA 0's stale GL1 (zeros;
  memory holds workgroup 3's 5s) and nothing copies that line before the dispatch ends. The launch keeps it as seen
  (keep_stale_under before freeze), so after the GL1s alone are dropped a second launch's workgroup 0 (slot 0) reads
  0 from its L0. Freezing it from memory reads 5 (review l1b row C: the launch never called keep_stale_under)."""
  m, x, out, gl0, gl1 = _gl1_mem(6)
  _gl1_launch(BATCH.replace("ACQUIRE", '  fence syncscope("workgroup") acquire\n').replace("LANES", "32"), m, 6, gl0, gl1)
  assert (x == 5).all() and (out.reshape(6, 32)[4] == 0).all(), out.reshape(6, 32)[:, 0]
  gl1.invalidate_all()   # a GL1_INV without GLV_INV
  out[:] = -1
  _gl1_launch(BCAST.replace("@bcast", "@k").replace("LANES", "32"), m, 1, gl0, gl1)
  assert (out[:32] == 0).all(), out[0]

@needs_llvm
@pytest.mark.parametrize("sdma_inv", [True, False])
def test_sdma_gcr_invalidate_lands_once_a_wait_saw_its_fence(sdma_inv, monkeypatch):
  """gfx1100: with every compute-queue L0/GL1 invalidate taken out, the only one left is the SDMA GCR_REQ (GLV_INV |
  GL1_INV) before a copy. The compute queue's next launch waits on the timeline value the SDMA queue's FENCE wrote
  after it, so the invalidate has run: the second SA reads the 7s `fill` stored. Without it in the GCR_REQ the second
  SA reads the zeros its caches filled in the first launch (cp.py release_l1_invalidate)."""
  from ioctl_defs.amd import pm4, sdma
  from hcqrt.amd import device as amd_device
  monkeypatch.setenv("AMD_AQL", "0")
  for name in ("GCR_GLV_INV", "GCR_GL1_INV", "RM_GCR_GLV_INV", "RM_GCR_GL1_INV"): monkeypatch.setattr(pm4, name, 0)
  if not sdma_inv: monkeypatch.setattr(amd_device, "_SDMA_GCR_BEFORE", amd_device._SDMA_GCR_BEFORE & ~(sdma.GCR_GLV_INV | sdma.GCR_GL1_INV))
  lanes = ARCHS["gfx1100"][1]
  drv = install_mock_amd("gfx1100")
  try:
    d, progs, x, out = device_with_bcast_and_fill("gfx1100", lanes)
    other = d.allocator.alloc(4 * lanes)
    progs["bcast"](x, out, global_size=(2, 1, 1), local_size=(lanes, 1, 1), wait=True)
    progs["fill"](x, out, global_size=(1, 1, 1), local_size=(lanes, 1, 1), wait=True)
    d.allocator.copyin(other, memoryview(bytearray(4 * lanes)))   # an SDMA copy: GCR_REQ, COPY, FENCE
    progs["bcast"](x, out, global_size=(2, 1, 1), local_size=(lanes, 1, 1), wait=True)
    got = np.zeros(2 * lanes, np.int32); d.allocator.copyout(memoryview(got.view(np.uint8)), out)
  finally: uninstall_mock_amd(drv)
  got = got.reshape(2, lanes)
  assert (got[0] == 7).all() and (got[1] == (7 if sdma_inv else 0)).all(), got[:, 0]

@needs_llvm
@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("l2,want", [("keep", 7), ("wb_inv", 7), ("inv", 0)])
def test_cp_write_data_reaches_a_later_dispatch(arch, l2, want, monkeypatch):
  """The CP writes x with WRITE_DATA (dst_sel 5, memory); an ACQUIRE_MEM drops every L1 / GL0 / GL1 and does to the
  L2 what `l2` says; `bcast` copies x out. The CP's write sits in the L2 (memory.py write_cached), which the shaders
  read through: both CUs read 7 with the L2 kept or written back and invalidated. (It read the zeros under the L2 on
  gfx1100, whose per-launch acquire carries no GL2_WB, and on gfx942 with the backend's TC_WB taken out: the
  emulator saw memory without the L2's dirty dwords, cp.execute.) An L2 invalidate without the write-back loses
  the dirty dword (the mock's worst case, cp.py ACQUIRE_MEM): 0."""
  from ioctl_defs.amd import pm4
  monkeypatch.setenv("AMD_AQL", "0")
  gfx = 11 if arch == "gfx1100" else 9
  l2_bits = {"keep": (0, 0), "wb_inv": (pm4.GCR_GL2_INV | pm4.GCR_GL2_WB, pm4.COHER_TC_ACTION_ENA | pm4.COHER_TC_WB_ACTION_ENA),
             "inv": (pm4.GCR_GL2_INV, pm4.COHER_TC_ACTION_ENA)}[l2]
  acq = (pm4.acquire_mem(11, gcr_cntl=pm4.GCR_GLV_INV | pm4.GCR_GL1_INV | l2_bits[0]) if gfx == 11 else
         pm4.acquire_mem(9, coher_cntl=pm4.COHER_TCL1_ACTION_ENA | l2_bits[1]))
  for name in ("COHER_TC_ACTION_ENA", "COHER_TC_WB_ACTION_ENA", "GCR_GL2_INV", "GCR_GL2_WB"): monkeypatch.setattr(pm4, name, 0)
  lanes = ARCHS[arch][1]
  drv = install_mock_amd(arch)
  try:
    d, progs, x, out = device_with_bcast_and_fill(arch, lanes)
    progs["bcast"](x, out, global_size=(2, 1, 1), local_size=(lanes, 1, 1), wait=True)
    q = d.after_timeline(d.hw_compute_queue())
    q._emit(pm4.write_data(x.va, *[7] * lanes)); q._emit(acq)
    q.exec(progs["bcast"], progs["bcast"].fill_kernargs((x, out), ()), (2, 1, 1), (lanes, 1, 1))
    d.submit_timeline(q); d.synchronize()
    got = np.zeros(2 * lanes, np.int32); d.allocator.copyout(memoryview(got.view(np.uint8)), out)
  finally: uninstall_mock_amd(drv)
  assert got.reshape(2, lanes)[:, 0].tolist() == [want, want], got.reshape(2, lanes)[:, 0]

def test_dispatch_view_of_cp_l2_writes_and_its_stores():
  """GPUVM.l2_seen_by_shaders: the dispatch reads a BO holding the CP's dirty dwords from a copy with them in, while
  the host's view keeps memory's bytes; afterwards a dirty dword the dispatch stored one byte into reaches memory
  whole (its other bytes the CP's) and is no longer dirty, one it did not touch stays dirty over the old bytes, and
  a store elsewhere in the BO reaches memory."""
  import ctypes
  from hcqrt.mock.amd.memory import BO, GPUVM
  vm = GPUVM(); bo = BO(1, 0x10000, 4096, 0); vm.map(bo)
  vm.write_cached(0x10000, b"ABCDEFGH")
  with vm.l2_seen_by_shaders():
    (va, _, view), = vm.flat_map()
    assert va == 0x10000 and ctypes.string_at(view, 8) == b"ABCDEFGH" and ctypes.string_at(bo.host, 8) == bytes(8)
    ctypes.memmove(view + 1, b"x", 1); ctypes.memmove(view + 100, b"yz", 2)   # the dispatch's stores
  assert ctypes.string_at(bo.host, 8) == b"AxCD\0\0\0\0" and ctypes.string_at(bo.host + 100, 2) == b"yz"
  assert sorted(vm.dirty) == [0x10004] and bytes(vm.read(0x10000, 8)) == b"AxCDEFGH"
  assert vm.flat_map()[0][2] == bo.host   # the copy is gone with the dispatch

def test_dispatch_view_refuses_an_l2_write_outside_every_bo():
  """GPUVM.l2_seen_by_shaders with a dirty L2 dword below, between or past the mapped BOs (unmap moves a BO's to `held`, so only
  a mock bug leaves one): a clear error naming the address, not a copy written outside the BO (review amd39 row 6)."""
  from hcqrt.mock.amd.memory import BO, GPUVM, DirtyL2
  vm = GPUVM(); vm.map(BO(1, 0x10000, 4096, 0)); vm.map(BO(2, 0x20000, 4096, 0))
  for a in (0x8000, 0x11000, 0x21000):
    vm.dirty = DirtyL2(); vm.dirty.put(a, b"abcd")
    with pytest.raises(RuntimeError, match=f"L2 holds a CP write at {a:#x} that lies in no BO"):
      with vm.l2_seen_by_shaders(): pass

def _xcc_interrupt_run(monkeypatch, xccs: int | None, completion: bool) -> tuple[list[int], list[int]]:
  """gfx942 AQL, every acquire scope NONE and every PM4 L1 invalidate taken out: `bcast` fills x's zeros into the L1s
  of XCC 0 and 1 (its two workgroups), then an SDMA copy from the host writes 7s to x past both. A PM4-IB releases
  with EOP_TCL1_ACTION_EN on each of the 8 XCCs (no interrupt); unless `xccs` is None a second one raises an INT_SEL 2
  release of the host's event on the XCCs of mask `xccs` (PRED_EXEC; 0xFF: unpredicated, every XCC); with
  `completion` a barrier follows whose completion signal's mailbox is the host's event. WAIT_EVENTS consumes the
  event, then `bcast` runs again. Returns the XCCs whose invalidates are still pending after the wait, and what
  `bcast`'s two workgroups (XCC 0, XCC 1) read."""
  from ioctl_defs.amd import aql, pm4, sdma
  from hcqrt.amd import device as amd_device
  monkeypatch.setenv("AMD_AQL", "1")
  inv = pm4.EOP_TCL1_ACTION_EN
  for name in ("GCR_GLV_INV", "GCR_GL1_INV", "RM_GCR_GLV_INV", "RM_GCR_GL1_INV", "COHER_TCL1_ACTION_ENA", "EOP_TCL1_ACTION_EN"):
    monkeypatch.setattr(pm4, name, 0)
  monkeypatch.setattr(amd_device, "_SDMA_GCR_BEFORE", amd_device._SDMA_GCR_BEFORE & ~(sdma.GCR_GLV_INV | sdma.GCR_GL1_INV))
  no_aql_acquire(monkeypatch)
  lanes = ARCHS["gfx942"][1]
  drv = install_mock_amd("gfx942")
  try:
    d, progs, x, out = device_with_bcast_and_fill("gfx942", lanes)
    fence = d.allocator.alloc(64)
    progs["bcast"](x, out, global_size=(2, 1, 1), local_size=(lanes, 1, 1), wait=True)
    d.allocator.copyin(x, memoryview(np.full(lanes, 7, np.int32).view(np.uint8)))
    drv.settle(); d.ioctl("AMDKFD_IOC_RESET_EVENT", event_id=d.event_id)   # the launches' own signals of the event
    ibs = [pm4.release_mem(fence.va, 1, cache=inv)]
    if xccs is not None:
      rel = pm4.release_mem(d.event_slot, d.event_id, data_sel=pm4.DATA_SEL_32_BIT_LOW, int_sel=pm4.INT_SEL_SEND_INTERRUPT_AFTER_WRITE_CONFIRM,
                            ctxid=d.event_id)
      ibs.append(rel if xccs == 0xFF else pm4.pred_exec(xccs, rel))
    packets = []
    for ib in ibs:
      host, va = d.kernargs.alloc(len(ib) * 4, 256); ctypes.memmove(host, struct.pack(f"<{len(ib)}I", *ib), len(ib) * 4)
      packets.append(aql.pm4_ib(pm4.indirect_buffer(va, len(ib))))
    if completion:   # amd_signal_t: kind USER, value 1, event mailbox = the host's event slot, event id
      sig = d.allocator.alloc(64)
      d.allocator.copyin(sig, memoryview(bytearray(struct.pack("<qqQI36x", aql.AMD_SIGNAL_KIND_USER, 1, d.event_slot, d.event_id))))
      packets.append(aql.barrier_and([], completion_signal=sig.va))
    d.compute.submit_packets(packets)
    drv.settle()
    assert sorted(p.xcc for p in drv.vm.l1_pending if p.marks) == list(range(8)), "each XCC's release did not file its invalidate"
    ev = d.abi.ffi.new("struct kfd_event_data[1]"); ev[0].event_id = d.event_id
    res = d.ioctl("AMDKFD_IOC_WAIT_EVENTS", events_ptr=int(d.abi.ffi.cast("uintptr_t", ev)), num_events=1, wait_for_all=0, timeout=100)
    assert res.wait_result == 0, f"WAIT_EVENTS timed out (wait_result {res.wait_result}): the release raised no interrupt"
    pending = sorted(p.xcc for p in drv.vm.l1_pending if p.marks)
    q = d.hw_compute_queue(); q.exec(progs["bcast"], progs["bcast"].fill_kernargs((x, out), ()), (2, 1, 1), (lanes, 1, 1))
    d.compute.submit_packets(q._packets(d))
    d.submit_timeline(d.after_timeline(d.hw_compute_queue())); d.synchronize()
    got = np.zeros(2 * lanes, np.int32); d.allocator.copyout(memoryview(got.view(np.uint8)), out)
  finally: uninstall_mock_amd(drv)
  return pending, got.reshape(2, lanes)[:, 0].tolist()

@needs_llvm
@pytest.mark.parametrize("interrupter", ["xcc0", "xcc1", "aql_completion"])
def test_an_interrupt_from_one_xcc_lands_only_that_xccs_release(interrupter, monkeypatch):
  """_xcc_interrupt_run: the INT_SEL 2 release runs on one XCC only (PRED_EXEC), and WAIT_EVENTS consumes it. Each
  XCC's CP retires in order only its own releases (cp.py, above release_l1_invalidate): that interrupt proves its own
  XCC's invalidate, not the other's, so `bcast` reads 7 on the interrupting XCC and the stale 0 on the other. The old
  mock landed every XCC's: [7, 7]. aql_completion: no release interrupt, a barrier's completion signal instead; which
  XCC's CP raises that interrupt no source shows (aql.py complete), so it proves no XCC's invalidate: [0, 0]."""
  xcc = {"xcc0": 0, "xcc1": 1}.get(interrupter)
  pending, got = _xcc_interrupt_run(monkeypatch, None if xcc is None else 1 << xcc, completion=xcc is None)
  assert pending == [x for x in range(8) if x != xcc], f"not just the interrupting XCC's invalidate landed: {pending}"
  assert got == {0: [7, 0], 1: [0, 7], None: [0, 0]}[xcc], got

@needs_llvm
@pytest.mark.parametrize("interrupter", ["all_xcc", "xcc0_then_completion"])
def test_wait_events_woken_by_another_xccs_interrupt_lands_no_release(interrupter, monkeypatch):
  """_xcc_interrupt_run, where a second interrupt of the same queue signals the event too (review amd40b finding 1).
  all_xcc: the release runs unpredicated, so all 8 XCCs raise it; XCC 0's comes first in the mock's one engine order,
  but on hardware XCC 1's may wake the waiter before XCC 0's end-of-pipe invalidate retires. xcc0_then_completion:
  XCC 0's interrupt, then a barrier's completion interrupt on the same event, which no source orders after XCC 0's
  release (aql.py complete). Either way the waiter may have woken on an interrupt that proves nothing of XCC 0's
  invalidate, so none lands: [0, 0] (the mock whose sources named only the queue landed XCC 0's: [7, 0]; XCC 0's
  interrupt alone still reads [7, 0], the test above)."""
  pending, got = _xcc_interrupt_run(monkeypatch, 0xFF if interrupter == "all_xcc" else 1, completion=interrupter == "xcc0_then_completion")
  assert (pending, got) == (list(range(8)), [0, 0]), (pending, got)
