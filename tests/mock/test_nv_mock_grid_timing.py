"""When the NV mock's compute engine reads what a launch names (hcqrt/mock/nv/gpfifo.py GRID_TIMING): the QMD at the
launch method, the code and constant bank 0 only when the grid's CTAs run, and the CTAs may run long after the launch
(held mode: at the next release) unless WAIT_FOR_IDLE or a release with RELEASE_WFI orders them."""
import ctypes, time
import numpy as np
import pytest
from conftest import mock_nv_device
from compiler.assemble.ptx_assembler import assemble_ptx
from hw_tests import kernels as K
from ioctl_defs.nv.qmd import QMD
from hcqrt.nv.device import QMD_SIZE

def upload(dev, arr):
  b = dev.allocator.alloc(arr.nbytes); dev.allocator.copyin(b, memoryview(arr)); return b
def download(dev, b, n, dt=np.float32):
  out = np.empty(n, dt); dev.allocator.copyout(memoryview(out), b); return out

def taken_up(e, launches: int) -> None:
  """Wait until the front end has processed the released doorbells (idle: only held work is left) and `launches`
  launches in all."""
  deadline = time.perf_counter() + 10
  while not (e.idle() and e.launches >= launches):
    assert time.perf_counter() < deadline, "the mock's front end did not take the released work up"
    time.sleep(0.001)

@pytest.fixture
def nv():
  with mock_nv_device() as dev: yield dev

def test_ctas_read_constant_bank_0_when_they_run(nv):
  """Arguments rewritten after the launch method but before the CTAs run are what the CTAs read (no copy of constant
  bank 0 at the launch). A release with RELEASE_WFI still waits for the held grid. The old mock read the parameters at
  the launch method and ran the grid as its channel ran dry."""
  e, n = nv.drv.engine, 1024
  add = nv.program("add", assemble_ptx(K.head(nv.arch) + K.ADD, nv.arch))
  x = np.arange(n, dtype=np.float32)
  a, b, o = upload(nv, x), upload(nv, np.ones(n, np.float32)), upload(nv, np.zeros(n, np.float32))
  args = add.fill_kernargs([o, a, b], [1, n])
  s = nv.new_signal(0)
  with e.held():
    nv.hw_compute_queue().exec(add, args, (4, 1, 1), (256, 1, 1)).submit(nv)
    e.release(keep_holding=True)
    taken_up(e, 1)                     # the launch method ran: the grid is queued, its CTAs held
    assert any(c.queued for c in e.channels.values())
    args.set_int(0, 5)                 # o = a + 5 b, written after the launch
    nv.hw_compute_queue().signal(s, 1).submit(nv)   # RELEASE_WFI: the held grid runs before the release lands
    e.release(keep_holding=True)
    s.wait(1, 10.0)
  np.testing.assert_array_equal(download(nv, o, n), x + 5)

def test_a_grid_nothing_orders_runs_only_when_released(nv):
  """Held mode: a launch with nothing after it that waits for it leaves its CTAs held, and idle() counts them as held
  work; release() runs them. The old mock ran them as soon as the channel ran dry."""
  e = nv.drv.engine
  inc = nv.program("inc", assemble_ptx(K.head(nv.arch) + K.INC, nv.arch))
  out = upload(nv, np.array([5], np.uint32))
  with e.held():
    nv.hw_compute_queue().exec(inc, inc.fill_kernargs([out]), (1, 1, 1), (1, 1, 1)).submit(nv)
    e.release(keep_holding=True)
    taken_up(e, 1)
    assert download_now(nv, out) == 5   # not run: the CTAs are held
  deadline = time.perf_counter() + 10
  while download_now(nv, out) == 5 and time.perf_counter() < deadline: time.sleep(0.001)
  assert download_now(nv, out) == 6

def download_now(dev, b) -> int:
  """Read a 4-byte word of device memory the way the mock GPU sees it now (no queue: a copyout would wait for the GPU)."""
  c = next(iter(dev.drv.engine.channels.values()))
  return int.from_bytes(c.vs.read(b.va, 4), "little")

def test_ctas_fetch_code_another_engine_wrote_after_the_launch(nv):
  """The code at the program address is fetched when the CTAs run: the copy engine overwriting it after the launch
  method (another channel, nothing ordering it against the grid) changes what runs. The old mock looked the kernel up
  at the launch method."""
  from tests.runtime.test_program_code_reuse import _nv_kernels
  e = nv.drv.engine
  inc1, inc7 = _nv_kernels(nv.arch)
  old, new = nv.program("inc", inc1), nv.program("inc", inc7)
  assert old.lib.size == new.lib.size
  out = upload(nv, np.array([0], np.uint32))
  with e.held():
    nv.hw_compute_queue().exec(old, old.fill_kernargs([out]), (1, 1, 1), (1, 1, 1)).submit(nv)
    e.release(keep_holding=True)
    taken_up(e, 1)                                       # launched; no CTA has fetched the code yet
    nv.hw_copy_queue().copy(old.lib.va, new.lib.va, old.lib.size).submit(nv)   # `inc` +7 over `inc` +1
    e.release()                                          # the copy, then the held CTAs
    deadline = time.perf_counter() + 10
    while download_now(nv, out) == 0 and time.perf_counter() < deadline: time.sleep(0.001)
  assert download_now(nv, out) == 7

@pytest.mark.parametrize("cache", [True, False], ids=["constant-cache", "cache-bypassed"])
def test_each_slice_of_ctas_reads_constant_bank_0_afresh(nv, monkeypatch, cache):
  """Two grids with no barrier between them run concurrently (INTERLEAVE_SLICES, the newest launch's slice first). When
  one writes the other's argument in constant bank 0, the other's later CTAs read c[0] again, not a snapshot of the
  grid (cache-bypassed: every read goes to memory, so slice i sees inc's first i increments). Through the constant
  cache they see the line add's first slice fetched: both launches' QMD INVALIDATE_SHADER_CONSTANT_CACHE acted at the
  launch methods (hcqrt/mock/nv/constcache.py), so nothing drops it between the slices. The old mock read a grid's
  parameters once, at its launch method."""
  from hcqrt.mock.nv.gpfifo import INTERLEAVE_SLICES, Channel
  from hcqrt.nv.device import NVComputeQueue
  monkeypatch.setattr(NVComputeQueue, "barrier", lambda self: None)   # (the second launch does not wait for the first)
  if not cache: monkeypatch.setattr(Channel, "const_read", Channel.read)
  n, blocks = 1024, INTERLEAVE_SLICES
  add = nv.program("add", assemble_ptx(K.head(nv.arch) + K.ADD, nv.arch))
  inc = nv.program("inc", assemble_ptx(K.head(nv.arch) + K.INC, nv.arch))
  x = np.arange(n, dtype=np.float32)
  a, b, o = upload(nv, x), upload(nv, np.ones(n, np.float32)), upload(nv, np.zeros(n, np.float32))
  args = add.fill_kernargs([o, a, b], [1, n])
  k_va = args.va + add.params[3][0]   # where `add` reads k: parameter 3 in constant bank 0
  s = nv.new_signal(0)
  # `inc` (one thread per block: k += 1 per block), then `add` (o = a + k b), unordered: add's slice i runs before inc's
  nv.hw_compute_queue().exec(inc, inc.fill_kernargs([k_va]), (blocks, 1, 1), (1, 1, 1)) \
    .exec(add, args, (blocks, 1, 1), (n // blocks, 1, 1)).signal(s, 1).submit(nv)
  s.wait(1, 10.0)
  got = download(nv, o, n).reshape(blocks, -1) - x.reshape(blocks, -1)
  assert got[:, 0].tolist() == (list(range(1, blocks + 1)) if not cache else [1] * blocks)
  assert (got == got[:, :1]).all()

def held_launch(nv, prog, args, grid, block):
  """Launch `prog` in held mode and return once the launch method ran (the grid queued, no CTA run)."""
  e = nv.drv.engine
  nv.hw_compute_queue().exec(prog, args, grid, block).submit(nv)
  e.release(keep_holding=True)
  taken_up(e, e.launches + 1)

def test_a_qmd_rewritten_while_its_grid_is_pending_is_refused(nv):
  """The hardware keeps a grid's working state in its QMD until the grid ends (HW_ONLY_* fields, GRID_*_RESUME:
  hcqrt/mock/nv/gpfifo.py Channel.check_qmd): the host rewriting the QMD after the launch method, before the CTAs ran,
  faults the channel naming the QMD. The old mock ran the grid the launch read, silently."""
  e, n = nv.drv.engine, 1024
  add = nv.program("add", assemble_ptx(K.head(nv.arch) + K.ADD, nv.arch))
  a, b, o = upload(nv, np.arange(n, dtype=np.float32)), upload(nv, np.ones(n, np.float32)), upload(nv, np.zeros(n, np.float32))
  args = add.fill_kernargs([o, a, b], [1, n])
  qmd_host, qmd_va = args.extra
  with e.held():
    held_launch(nv, add, args, (4, 1, 1), (256, 1, 1))
    q = QMD(add.qmd_version, data=ctypes.string_at(qmd_host, QMD_SIZE[add.qmd_version]))
    q.set("GRID_WIDTH", 1)             # a rewrite while the grid is pending (a host "patching" a queued launch)
    ctypes.memmove(qmd_host, bytes(q.data), len(q.data))
    e.release(keep_holding=True)     # the held CTAs run now
    taken_up(e, e.launches)
  assert f"QMD at {qmd_va:#x} was rewritten while its grid (4, 1, 1) was pending" in nv.drv.faults[-1]

def test_a_grid_writing_its_own_qmd_is_refused(nv):
  """A write by an engine counts too: a kernel that stores into its own QMD while it runs (its output pointer is the
  QMD's address) faults the channel when the grid ends. The old mock let it pass."""
  from hcqrt.mock.nv.gpfifo import GPUError
  inc = nv.program("inc", assemble_ptx(K.head(nv.arch) + K.INC, nv.arch))
  args = inc.fill_kernargs([0])
  _, qmd_va = args.extra
  args.set_buffer(0, qmd_va)           # out[0] += 1 lands on the QMD's first word
  with pytest.raises(GPUError, match=f"QMD at {qmd_va:#x} was rewritten while its grid .* and the grid's end"):
    nv.hw_compute_queue().exec(inc, args, (1, 1, 1), (1, 1, 1)).submit(nv)   # (synchronous mode: the grid runs in the doorbell)
