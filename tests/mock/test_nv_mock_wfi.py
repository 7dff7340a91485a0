"""What the NV mock's waits-for-idle wait for, and when its cache invalidates act (hcqrt/mock/nv/gpfifo.py GRID_TIMING,
Channel.wait_engine_idle, Channel.execute; hcqrt/mock/nv/constcache.py), with hand-built pushbuffers: launches without
the backend's per-launch NO_WFI invalidate and WAIT_FOR_IDLE barrier, and the methods under test added by hand.
  - INVALIDATE_SHADER_CACHES waits for the grids before it, INVALIDATE_SHADER_CACHES_NO_WFI does not;
  - the host WFI and RELEASE_WFI wait for the engine the channel last sent methods to; a switch from GR to the copy
    subchannel waits for GR;
  - the QMD's INVALIDATE_SHADER_CONSTANT_CACHE acts at the launch method, not when the grid's CTAs start."""
import ctypes, time
import numpy as np
import pytest
from conftest import mock_nv_device
from compiler.assemble.ptx_assembler import assemble_ptx
from hw_tests import kernels as K
from hcqrt.nv import device as D
from hcqrt.nv.device import NVComputeQueue, SUBC_COMPUTE, SUBC_COPY, QMD_SIZE, _CP, _CE, _H
from ioctl_defs.nv.qmd import QMD

RELEASE_NO_WFI = _H["SEM_EXECUTE"].data(OPERATION="RELEASE", RELEASE_WFI="DIS", PAYLOAD_SIZE="64BIT")
RELEASE_WFI = _H["SEM_EXECUTE"].data(OPERATION="RELEASE", RELEASE_WFI="EN", PAYLOAD_SIZE="64BIT")

@pytest.fixture
def bare(monkeypatch):
  """Launches as the pushbuffer says and no more: no WAIT_FOR_IDLE before them, no INVALIDATE_SHADER_CACHES_NO_WFI,
  and (qmd_bit=False) no INVALIDATE_SHADER_CONSTANT_CACHE in their QMDs."""
  real_methods, real_qmd = D._launch_methods, D.launch_qmd
  monkeypatch.setattr(NVComputeQueue, "barrier", lambda self: None)
  monkeypatch.setattr(D, "_launch_methods", lambda v: ([], *real_methods(v)[1:]))
  def no_qmd_bit(): monkeypatch.setattr(D, "launch_qmd", lambda *a, **k: real_qmd(*a, **k).set("INVALIDATE_SHADER_CONSTANT_CACHE", 0))
  with mock_nv_device() as dev: yield dev, no_qmd_bit

def read_u32(dev, va: int) -> int:
  """A word of device memory as the mock GPU sees it now (no queue: a copyout would wait for held work)."""
  return int.from_bytes(next(iter(dev.drv.engine.channels.values())).vs.read(va, 4), "little")

def release(q: NVComputeQueue, signal, value: int, wfi: bool) -> NVComputeQueue:
  q.method(0, _H["SEM_ADDR_LO"].offset, signal.va & 0xFFFFFFFC, signal.va >> 32, value, 0, RELEASE_WFI if wfi else RELEASE_NO_WFI)
  return q

@pytest.mark.parametrize("form", ["INVALIDATE_SHADER_CACHES", "INVALIDATE_SHADER_CACHES_NO_WFI"])
def test_invalidate_waits_for_earlier_grids_unless_no_wfi(bare, form):
  """A grid reads v=11 from constant bank 0, then an invalidate with CONSTANT; the host then rewrites v to 22 at the same
  address and launches again with no invalidate at all. INVALIDATE_SHADER_CACHES waits for idle first: the first grid's
  line is dropped after it read it, so the relaunch reads 22. _NO_WFI does not wait: the first grid's CTAs run after it
  (at the release) and their line stays, so the relaunch runs on the stale 11. The old mock did not drain for either
  form: 11 for both."""
  nv, no_qmd_bit = bare
  no_qmd_bit()
  setv = nv.program("setv", assemble_ptx(K.head(nv.arch) + K.SETV, nv.arch))
  out = nv.allocator.alloc(4)
  args, s = setv.fill_kernargs([out], [11]), nv.new_signal(0)
  q = NVComputeQueue().exec(setv, args, (1, 1, 1), (1, 1, 1))
  q.method(SUBC_COMPUTE, _CP[form].offset, _CP[form].data(CONSTANT="TRUE"))
  q.signal(s, 1).submit(nv)
  s.wait(1, 10.0)
  assert read_u32(nv, out.va) == 11
  args.set_int(0, 22)                 # the first grid is done (RELEASE_WFI): the host reuses its parameter block
  NVComputeQueue().exec(setv, args, (1, 1, 1), (1, 1, 1)).signal(s, 2).submit(nv)
  s.wait(2, 10.0)
  assert read_u32(nv, out.va) == (22 if form == "INVALIDATE_SHADER_CACHES" else 11)

def taken_up(e, launches: int) -> None:
  deadline = time.perf_counter() + 10
  while not (e.idle() and e.launches >= launches):
    assert time.perf_counter() < deadline, "the mock's front end did not take the released work up"
    time.sleep(0.001)

def compute_channel_with_copy_object(nv):
  """The compute channel with a copy object too (it is a GR-runlist channel: GRCE is its copy engine), bound on
  subchannel 4 (a CE SetObject is not sent to the engine, dev_pbdma.ref.txt:3577-3579); a queue starting with it."""
  nv.rm.alloc(nv.chan_handles[0], nv.arch_info.copy)
  q = NVComputeQueue()
  q.method(SUBC_COPY, _H["SET_OBJECT"].offset, nv.arch_info.copy)
  return q

def zeroed_u32(nv):
  buf = nv.allocator.alloc(4)
  nv.allocator.copyin(buf, memoryview(np.zeros(1, np.uint32)))
  return buf

@pytest.mark.parametrize("wait", ["WFI", "RELEASE_WFI"])
def test_host_wfi_after_a_launch_waits_for_the_grid(bare, wait):
  """The compute channel launches a grid, then a host WFI (SCOPE ALL) and a release without RELEASE_WFI, or a release
  with RELEASE_WFI: both wait for "the engine to which the channel last sent methods" (dev_pbdma.ref.txt:3849-3853,
  4572-4589), GR here, so the grid has run when the release lands (held mode: otherwise its CTAs wait for the release)."""
  nv, _ = bare
  e = nv.drv.engine
  inc = nv.program("inc", assemble_ptx(K.head(nv.arch) + K.INC, nv.arch))
  out, s = zeroed_u32(nv), nv.new_signal(0)
  q = compute_channel_with_copy_object(nv).exec(inc, inc.fill_kernargs([out]), (1, 1, 1), (1, 1, 1))
  if wait == "WFI": q.method(0, _H["WFI"].offset, _H["WFI"].data(SCOPE="ALL"))
  release(q, s, 1, wfi=wait == "RELEASE_WFI")
  with e.held():
    q.submit(nv)
    e.release(keep_holding=True)
    taken_up(e, 1)                   # the pushbuffer ran to its end; only held grids are left
    assert s.value == 1 and read_u32(nv, out.va) == 1

def test_switch_to_the_copy_subchannel_waits_for_the_grids(bare):
  """On the GR runlist a method stream that switches from graphics/compute to the copy engine (subchannel 4) makes Host
  wait until GR has completed its methods and is idle before the copy method goes out (dev_ram.ref.txt:1012-1021). So
  a copy of a grid's output on the same channel, with no WFI anywhere, copies what the grid wrote, and a release without
  RELEASE_WFI after it lands after the grid. The nvm46 mock (and main's) ran the copy first: it copied 0."""
  nv, _ = bare
  e = nv.drv.engine
  inc = nv.program("inc", assemble_ptx(K.head(nv.arch) + K.INC, nv.arch))
  out, dst, s = zeroed_u32(nv), zeroed_u32(nv), nv.new_signal(0)
  q = compute_channel_with_copy_object(nv).exec(inc, inc.fill_kernargs([out]), (1, 1, 1), (1, 1, 1))
  q.method(SUBC_COPY, _CE["OFFSET_IN_UPPER"].offset, out.va >> 32, out.va & 0xFFFFFFFF, dst.va >> 32, dst.va & 0xFFFFFFFF)
  q.method(SUBC_COPY, _CE["LINE_LENGTH_IN"].offset, 4)
  q.method(SUBC_COPY, _CE["LAUNCH_DMA"].offset, D.DMA_COPY)
  release(q, s, 1, wfi=False)
  with e.held():
    q.submit(nv)
    e.release(keep_holding=True)
    taken_up(e, 1)
    assert s.value == 1 and (read_u32(nv, out.va), read_u32(nv, dst.va)) == (1, 1)

def test_qmd_constant_invalidate_acts_at_the_launch(bare):
  """The QMD's INVALIDATE_SHADER_CONSTANT_CACHE drops the constant cache at the launch method (the harmful timing,
  constcache.py). Grid B (setv, v=11, QMD bit set) is launched, then grid A with no barrier; A's constant bank 0 is B's
  parameter block, and A increments B's v in memory (inc of the pointer both read as parameter 0). A, the newer launch,
  runs first: it reads the line (v=11) into the cache and stores 12. B then reads v through the cache: the line A
  filled after B's launch is held, so B stores the stale 11. The old mock dropped the cache when B's CTAs started,
  after A's fill: B read 12."""
  nv, _ = bare
  setv = nv.program("setv", assemble_ptx(K.head(nv.arch) + K.SETV, nv.arch))
  inc = nv.program("inc", assemble_ptx(K.head(nv.arch) + K.INC, nv.arch))
  assert setv.params[0] == inc.params[0]   # parameter 0 (the pointer) at the same c[0] offset in both
  b_args = setv.fill_kernargs([0], [11])
  v_va = b_args.va + setv.params[1][0]
  b_args.set_buffer(0, v_va)           # B stores v over its own v; A increments it
  a_args = inc.fill_kernargs([v_va])
  s = nv.new_signal(0)
  q = NVComputeQueue().exec(setv, b_args, (1, 1, 1), (1, 1, 1)).exec(inc, a_args, (1, 1, 1), (1, 1, 1))
  # A's QMD names B's parameter block as its constant bank 0 (patched before the submit: nothing has read it yet)
  qmd_host, _ = a_args.extra
  a_qmd = QMD(inc.qmd_version, data=ctypes.string_at(qmd_host, QMD_SIZE[inc.qmd_version]))
  lo, hi, sh = inc.cb0_address
  a_qmd.set_address(lo, hi, b_args.va, sh, i=0)
  ctypes.memmove(qmd_host, bytes(a_qmd.data), len(a_qmd.data))
  q.signal(s, 1).submit(nv)
  s.wait(1, 10.0)
  assert read_u32(nv, v_va) == 11

def test_qmd_instruction_invalidate_acts_at_the_launch(bare, monkeypatch):
  """The QMD's INVALIDATE_INSTRUCTION_CACHE drops the I$ at the launch method, as its constant-cache bit does (the
  harmful timing: gpfifo.py launch_qmd). Grid B (QMD bit set) is launched, then grid A (`inc`, +1, no bit) with no
  barrier; A, the newer launch, runs first and fetches its code into the I$, which B's start then leaves alone. A's
  program is freed and `inc` adding 7 is loaded at its address; launched with no invalidate at all, it runs the
  stale +1 code still cached there. The old mock dropped the I$ when B's CTAs started, after A's fetch: it ran +7."""
  import gc
  nv, _ = bare
  real_qmd, bit = D.launch_qmd, [1]
  monkeypatch.setattr(D, "launch_qmd", lambda *a, **k: real_qmd(*a, **k).set("INVALIDATE_INSTRUCTION_CACHE", bit[0]))
  setv = nv.program("setv", assemble_ptx(K.head(nv.arch) + K.SETV, nv.arch))
  bit[0] = 0                           # (every program made from here on has the bit clear)
  assert "add.u32 %r2, %r1, 1;" in K.INC
  old = nv.program("inc", assemble_ptx(K.head(nv.arch) + K.INC, nv.arch))
  out, other, s = zeroed_u32(nv), nv.allocator.alloc(4), nv.new_signal(0)
  NVComputeQueue().exec(setv, setv.fill_kernargs([other], [5]), (1, 1, 1), (1, 1, 1)) \
    .exec(old, old.fill_kernargs([out]), (1, 1, 1), (1, 1, 1)).signal(s, 1).submit(nv)
  s.wait(1, 10.0)
  assert read_u32(nv, out.va) == 1 and read_u32(nv, other.va) == 5
  nv.synchronize()
  va = old.lib.va
  del old; gc.collect()
  new = nv.program("inc", assemble_ptx(K.head(nv.arch) + K.INC.replace("add.u32 %r2, %r1, 1;", "add.u32 %r2, %r1, 7;"), nv.arch))
  assert new.lib.va == va              # (the point of the test: the freed code's address is reused)
  NVComputeQueue().exec(new, new.fill_kernargs([out]), (1, 1, 1), (1, 1, 1)).signal(s, 2).submit(nv)
  s.wait(2, 10.0)
  assert read_u32(nv, out.va) == 2     # the stale +1 ran again
