"""The PM4 ring on the mock: the CP reports a read pointer that wraps at the ring size, as real CPs do, and the
backend keeps launching through many wraps."""
import struct
import pytest
from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd
from hcqrt.amd.device import AMDDevice, AMDProgram, RING_BYTES

S_ENDPGM = b"\x00\x00\xb0\xbf"   # RDNA3 s_endpgm (SOPP opcode 48)

@pytest.fixture
def dev():
  drv = install_mock_amd("gfx1100", kernel="6.12")
  d = AMDDevice("AMD"); d.drv = drv
  d.wait_timeout_s = 5.0   # a ring that stays full fails in seconds, not 30
  yield d
  uninstall_mock_amd(drv)

def _endpgm(d):
  desc = struct.pack("<III4xq20xIIIHH4x", 0, 0, 8, 0, 0, 0x60AF0041, 2 << 1 | 1 << 7, (1 << 3) | (1 << 10), 0)
  return AMDProgram(d, "endpgm", S_ENDPGM * 16, desc, [(0, 8)])

# A launch is 85 PM4 dwords (13 wraps of the 16384-dword ring in 2500) or 3 AQL packets (7 wraps of 1024): enough for
# the "more than five" below in both modes (5000 launches made 26 and 14 wraps in twice the time, proving no more).
LAUNCHES = 2500

def test_2500_eager_launches_wrap_the_ring_many_times(dev):
  prog, buf = _endpgm(dev), dev.allocator.alloc(64)
  for _ in range(LAUNCHES): prog(buf, global_size=(1, 1, 1), local_size=(32, 1, 1), wait=True)   # each through the ring, emulated
  q = dev.drv.queues[dev.compute.queue_id]
  assert len(q.dispatches) == LAUNCHES and q.error is None
  if dev.aql:   # AMD_AQL=1: 64-byte packets; read_dispatch_id is a 64-bit packet index that never wraps
    assert dev.compute.put > 5 * dev.compute.slots and dev.compute.read_id.value == dev.compute.put
  else:
    assert dev.compute.put > 5 * RING_BYTES // 4                     # the ring wrapped more than five times
    assert dev.compute.rptr.value == dev.compute.put % (RING_BYTES // 4)   # and the CP reports the wrapped offset
  assert dev.timeline_signal.value == dev.timeline_value - 1
