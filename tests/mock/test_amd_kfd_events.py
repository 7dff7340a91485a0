"""The mock KFD's signal-event page when the first signal event brings none (review final.md row 2): the kernel then
allocates a page of its own (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_events.c:101-106) instead of failing, so
a runtime that forgets the page degrades as on hardware: its slots are in memory it cannot see, its waits never wake,
and a page given later is refused."""
import ctypes, errno, os, pathlib, subprocess, sys
import pytest
from hcqrt import syscalls
from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd
from hcqrt.mock.amd.kfd import KernelEventPage
from ioctl_defs.amd import kfd as K
from tests.child_env import pythonpath
from tests.mock.test_amd_mock_kfd import ABI17, GTT_UC, VA, acquire, alloc, call, refused

REPO = pathlib.Path(__file__).resolve().parents[2]

@pytest.fixture
def kfd_driver():
  drv = install_mock_amd(kernel="6.12")
  fd = syscalls.open("/dev/kfd", os.O_RDWR)
  yield drv, fd
  syscalls.close(fd); uninstall_mock_amd(drv)

def test_a_first_signal_event_without_a_page_gets_the_kernels_own(kfd_driver):
  drv, fd = kfd_driver
  acquire(drv, fd)
  ev = call(fd, "AMDKFD_IOC_CREATE_EVENT", event_type=K.EVENT_SIGNAL, auto_reset=1)   # the old mock: EINVAL "no event page"
  assert isinstance(drv.event_page, KernelEventPage) and drv.event_page.handle is None
  page = alloc(fd, drv, VA, 0x8000, GTT_UC)
  refused(errno.EINVAL, call, fd, "AMDKFD_IOC_CREATE_EVENT", event_page_offset=page.handle, event_type=K.EVENT_SIGNAL, auto_reset=1)
  # a CP writes the event id into "the slot" of the page the runtime thinks it has; the kernel's slot stays unsignaled
  ctypes.c_uint64.from_address(drv._bo(page.handle, errno.EINVAL).host + 8 * ev.event_slot_index).value = ev.event_id
  drv.interrupt(ev.event_id, eop=True)
  evd = ABI17.new("kfd_event_data", event_id=ev.event_id)
  w = call(fd, "AMDKFD_IOC_WAIT_EVENTS", events_ptr=int(ABI17.ffi.cast("uintptr_t", evd)), num_events=1, wait_for_all=1, timeout=5)
  assert w.wait_result == K.WAIT_RESULT_TIMEOUT

def test_the_kernels_own_page_holds_256_signal_events_and_reports_the_events_mmap_type(kfd_driver):
  """s30 row 6: a page the kernel allocated has signal_mapped_size 256*8 ("Oldest user mode expects 256 event slots");
  with the reserved id 0 counted, events 1..255 fit and the next is ENOSPC (create_signal_event). Each signal event's
  event_page_offset is KFD_MMAP_TYPE_EVENTS (kfd_event_create); a destroyed event frees its slot."""
  drv, fd = kfd_driver
  acquire(drv, fd)
  evs = [call(fd, "AMDKFD_IOC_CREATE_EVENT", event_type=K.EVENT_SIGNAL, auto_reset=1) for _ in range(255)]
  assert sorted(e.event_id for e in evs) == list(range(1, 256))
  assert {e.event_page_offset for e in evs} == {K.MMAP_TYPE_EVENTS << K.MMAP_TYPE_SHIFT}
  refused(errno.ENOSPC, call, fd, "AMDKFD_IOC_CREATE_EVENT", event_type=K.EVENT_SIGNAL, auto_reset=1)
  call(fd, "AMDKFD_IOC_DESTROY_EVENT", event_id=evs[7].event_id)
  assert call(fd, "AMDKFD_IOC_CREATE_EVENT", event_type=K.EVENT_SIGNAL, auto_reset=1).event_id == evs[7].event_id

# The kernel's event search reads signal slots below KFD_SIGNAL_EVENT_LIMIT only (linux@v6.12.117:drivers/gpu/drm/amd/
# amdkfd/kfd_events.c:165-166, 786-806; hcqrt/mock/amd/kfd.py interrupt). In a child: the old mock read a memory
# event's "slot" 8 GiB past the page, which killed the process (review amd40 finding 3).
SCAN_CHILD = r"""
import ctypes, sys
from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd
from hcqrt.amd.device import AMDDevice
drv = install_mock_amd("gfx1100")
try:
  d = AMDDevice()
  mem = [e for e, v in drv.events.items() if "memory" in v]
  assert mem == [d.fault_event], drv.events
  def write_slot(): ctypes.c_uint64.from_address(drv.event_page.host + 8 * d.event_id).value = d.event_id   # as a CP release does
  write_slot()
  print("ctxid0", drv.interrupt(0, eop=True), drv.events[d.fault_event]["signaled"], flush=True)
  drv.events[d.event_id]["signaled"] = False; write_slot()
  print("ctxid_mem", drv.interrupt(d.fault_event, eop=True), drv.events[d.fault_event]["signaled"], flush=True)
finally: uninstall_mock_amd(drv)
"""

def test_an_interrupt_without_a_named_event_searches_only_signal_slots_below_the_limit():
  """The review's probe: gfx1100 (which keeps context id 0, unlike gfx942) with the backend's memory event
  (fault_event). A CP end-of-pipe interrupt of context id 0 names no event: the kernel searches the signal slots,
  finds the backend's written one and sets that event, and never reads the memory event, whose id 0x40000000 lies
  past the 4096 slots. Nor does an interrupt whose context id is the memory event's own id: the single lookup refuses
  ids >= 4096 and the search that follows finds the same written slot."""
  r = subprocess.run([sys.executable, "-c", SCAN_CHILD], capture_output=True, text=True, timeout=120, cwd=REPO,
                     env={**os.environ, "PYTHONPATH": pythonpath(REPO)})
  assert r.returncode == 0, f"the child died (rc {r.returncode}):\n{r.stdout}\n{r.stderr[-3000:]}"
  lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if line.startswith("ctxid"))
  assert lines == {"ctxid0": "[1] False", "ctxid_mem": "[1] False"}, r.stdout

def test_signal_events_of_id_4096_and_up_are_never_set_by_an_interrupt(kfd_driver):
  """A user event page of 8192 slots: kfd_event_page_set keeps its whole size as signal_mapped_size and CREATE_EVENT
  gives ids up to it (kfd_events.c:122, 337-356), but every interrupt path reads slots below 4096 only: an interrupt
  naming event 4096 with its slot written sets nothing, and neither does the search an unnamed one starts (the old
  mock set it both ways). Event 4095, in range, is set."""
  drv, fd = kfd_driver
  acquire(drv, fd)
  page = alloc(fd, drv, VA, 0x10000, GTT_UC)
  ids = [call(fd, "AMDKFD_IOC_CREATE_EVENT", event_page_offset=page.handle if i == 0 else 0, event_type=K.EVENT_SIGNAL, auto_reset=1).event_id
         for i in range(4096)]
  assert ids[-2:] == [4095, 4096]
  slot = lambda e: ctypes.c_uint64.from_address(drv._bo(page.handle, errno.EINVAL).host + 8 * e)
  slot(4096).value = 4096
  assert drv.interrupt(4096, eop=True) == [] and not drv.events[4096]["signaled"]
  assert drv.interrupt(0, eop=True) == [] and not drv.events[4096]["signaled"]
  assert slot(4096).value == 4096   # never acknowledged either: the kernel does not read it
  slot(4095).value = 4095
  assert drv.interrupt(0, eop=True) == [4095] and drv.events[4095]["signaled"]
