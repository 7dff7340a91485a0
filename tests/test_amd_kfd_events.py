"""The mock KFD's signal-event page when the first signal event brings none (review final.md row 2): the kernel then
allocates a page of its own (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_events.c:101-106) instead of failing, so
a runtime that forgets the page degrades as on hardware: its slots are in memory it cannot see, its waits never wake,
and a page given later is refused."""
import ctypes, errno, os
import pytest
from hcqrt import syscalls
from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd
from hcqrt.mock.amd.kfd import KernelEventPage
from ioctl_defs.amd import kfd as K
from tests.test_amd_mock_kfd import ABI17, GTT_UC, VA, acquire, alloc, call, refused

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
