"""The generic cross-device seam (hcqrt/interface.py copy_between, hcqrt/hcq.py HCQDevice.transfer_to) on the in-process
CPUHCQDevice: a peer push, the bounce through system memory in chunks, and the host fallback."""
import numpy as np
import pytest
from hcqrt.cpu.hcq import CPUHCQDevice
from hcqrt.interface import copy_between, can_transfer, peer_ok

def _pair(bounce: bool = False, chunk: int | None = None):
  a, b = CPUHCQDevice("CPU"), CPUHCQDevice("CPU:1")
  for d in (a, b):
    if bounce: d.query_peer = lambda other: "no-p2p: test"   # type: ignore[method-assign]
    if chunk: d.BOUNCE_CHUNK = chunk
  return a, b

def _fill(dev, data: bytes):
  buf = dev.allocator.alloc(len(data)); dev.allocator.copyin(buf, memoryview(data)); return buf

def _read(dev, buf, n: int) -> bytes:
  dev.synchronize(); out = bytearray(n); dev.allocator.copyout(memoryview(out), buf); return bytes(out)

@pytest.mark.parametrize("bounce", [False, True])
def test_transfer_copies_bytes(bounce):
  a, b = _pair(bounce, chunk=4096)
  data = np.random.default_rng(0).integers(0, 256, 3 * 4096 + 100, dtype=np.uint8).tobytes()   # several bounce chunks
  x, y = _fill(a, data), b.allocator.alloc(len(data))
  assert copy_between(b, y, a, x, len(data)) == "device"
  assert _read(b, y, len(data)) == data
  assert peer_ok(a.peer_status(b)) != bounce

def test_bounce_uses_the_slots_in_turn():
  a, b = _pair(True, chunk=4096)
  seen = []
  orig = b.map_peer
  b.map_peer = lambda other, buf: (seen.append(id(buf)), orig(other, buf))[1]   # type: ignore[method-assign]
  x, y = _fill(a, bytes(range(256)) * 64), b.allocator.alloc(4 * 4096)
  a.transfer_to(b, y, x, 4 * 4096)
  assert len(seen) == 4 and len(set(seen)) == 2 and seen[0] == seen[2] != seen[1]

def test_destination_waits_on_its_own_queue():
  # the destination's later work is ordered by a semaphore wait it submits itself (its timeline moves), no host wait
  a, b = _pair()
  x, y = _fill(a, b"abcd"), b.allocator.alloc(4)
  before = b.timeline_value
  a.transfer_to(b, y, x, 4)
  assert b.timeline_value == before + 1
  b.skip_cross_wait = True
  a.transfer_to(b, y, x, 4)
  assert b.timeline_value == before + 1

def test_other_backend_goes_through_the_host():
  from hcqrt.device import Device
  a = CPUHCQDevice("CPU")
  c = Device["CPU:1"]
  assert not can_transfer(a, c)
  with pytest.raises(TypeError, match="another backend"): a.transfer_to(c, None, None, 4)
  x, y = _fill(a, b"hcq!"), c.allocator.alloc(4)
  assert copy_between(c, y, a, x, 4) == "host" and _read(c, y, 4) == b"hcq!"

def test_a_copy_larger_than_its_buffers_is_refused():
  a, b = _pair()
  x, y = _fill(a, b"abcd"), b.allocator.alloc(2)
  with pytest.raises(ValueError, match="a copy of 4 bytes does not fit the 2-byte destination on CPU"): a.transfer_to(b, y, x, 4)
  with pytest.raises(ValueError, match="4-byte source on CPU"): a.transfer_to(b, b.allocator.alloc(8), x, 8)
