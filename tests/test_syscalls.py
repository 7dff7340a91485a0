"""hcqrt.syscalls: real OS calls, error decoding, and routing to an installed fake driver."""
import ctypes, errno, os
import pytest
from hcqrt import syscalls

def test_real_calls():
  fd = syscalls.open("/dev/null", os.O_RDWR)
  with pytest.raises(OSError) as e: syscalls.ioctl(fd, 0xC020462B, bytearray(32))   # /dev/null has no ioctls
  assert e.value.errno == errno.ENOTTY and "NV_ESC_RM_ALLOC" in str(e.value) and "/dev/null" in str(e.value)
  syscalls.close(fd)
  a = syscalls.mmap(-1, 8192, syscalls.PROT_READ | syscalls.PROT_WRITE, syscalls.MAP_PRIVATE | syscalls.MAP_ANONYMOUS, 0)
  ctypes.c_uint64.from_address(a).value = 42
  assert ctypes.c_uint64.from_address(a).value == 42
  syscalls.munmap(a, 8192)
  with pytest.raises(OSError, match="mmap of"): syscalls.mmap(-1, 0, syscalls.PROT_READ, syscalls.MAP_PRIVATE | syscalls.MAP_ANONYMOUS, 0)
  with pytest.raises(FileNotFoundError): syscalls.open("/dev/hcqrt-does-not-exist", os.O_RDWR)

class Recorder:
  """A fake driver that records calls and echoes the ioctl argument bytes."""
  def __init__(self): self.calls, self.mem = [], {}
  def claims(self, path): return path.startswith("/dev/fake")
  def open(self, path, flags):
    fd = os.open(os.devnull, os.O_RDONLY); self.calls.append(("open", path)); return fd
  def ioctl(self, fd, request, argp):
    self.calls.append(("ioctl", fd, request))
    if request == 1: raise OSError(errno.EINVAL, "bad request")
    ctypes.c_uint32.from_address(argp).value += 1
    return 0
  def mmap(self, fd, length, prot, flags, offset, addr):
    buf = ctypes.create_string_buffer(length); self.mem[ctypes.addressof(buf)] = buf
    self.calls.append(("mmap", fd, length, offset)); return ctypes.addressof(buf)
  def munmap(self, addr, length): self.calls.append(("munmap", addr)); del self.mem[addr]
  def close(self, fd): self.calls.append(("close", fd)); os.close(fd)

def test_routing_to_fake_driver():
  import cffi
  ffi = cffi.FFI()
  drv = Recorder()
  with syscalls.installed(drv):
    fd = syscalls.open("/dev/fake0", os.O_RDWR)
    assert syscalls.is_fake(fd)
    ba, cd, ct = bytearray(4), ffi.new("uint32_t *"), ctypes.c_uint32(0)
    for buf in (ba, cd, ct): assert syscalls.ioctl(fd, 0xC0044601, buf) == 0   # every buffer kind reaches the driver in place
    assert ba == b"\x01\x00\x00\x00" and cd[0] == 1 and ct.value == 1
    syscalls.ioctl(fd, 0xC0044601, ctypes.addressof(ct)); assert ct.value == 2   # a raw address works too
    with pytest.raises(OSError) as e: syscalls.ioctl(fd, 1, bytearray(4))
    assert e.value.errno == errno.EINVAL and "/dev/fake0" in str(e.value) and "bad request" in str(e.value)
    a = syscalls.mmap(fd, 4096, syscalls.PROT_READ, syscalls.MAP_SHARED, 0)
    syscalls.munmap(a, 4096)
    other = syscalls.open("/dev/null", os.O_RDONLY)     # unclaimed paths still go to the OS
    assert not syscalls.is_fake(other)
    syscalls.close(other)
  syscalls.ioctl(fd, 0xC0044601, bytearray(4))             # an fd opened through the driver stays routed to it
  syscalls.close(fd)
  kinds = [c[0] for c in drv.calls]
  assert kinds == ["open", "ioctl", "ioctl", "ioctl", "ioctl", "ioctl", "mmap", "munmap", "ioctl", "close"]
  with pytest.raises(FileNotFoundError): syscalls.open("/dev/fake0", os.O_RDWR)   # uninstalled: the OS answers

def test_readonly_buffer_rejected():
  fd = syscalls.open("/dev/null", os.O_RDWR)
  with pytest.raises(TypeError, match="writable"): syscalls.ioctl(fd, 0, b"abcd")
  syscalls.close(fd)
