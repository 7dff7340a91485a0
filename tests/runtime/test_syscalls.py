"""hcqrt.syscalls: real OS calls, error decoding, and routing to an installed fake driver."""
import ctypes, errno, os
import pytest
from typing import ClassVar
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

# ---- the reads and stores the AMD path needs ----
KFD_NODES = "/sys/devices/virtual/kfd/kfd/topology/nodes"

class FakeKFD(Recorder):
  """Claims the KFD topology, /dev/kfd and a render node; serves a two-node topology from a dict."""
  files: ClassVar[dict] = {f"{KFD_NODES}/0/gpu_id": "0\n", f"{KFD_NODES}/1/gpu_id": "4660\n",
           f"{KFD_NODES}/1/properties": "gfx_target_version 110000\ndrm_render_minor 128\n"}
  def claims(self, path): return path.startswith(("/sys/devices/virtual/kfd", "/dev/kfd", "/dev/dri/renderD"))
  def listdir(self, path):
    self.calls.append(("listdir", path))
    names = {p[len(path) + 1:].split("/")[0] for p in self.files if p.startswith(path + "/")}
    if not names: raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    return list(names)
  def read_text(self, path):
    self.calls.append(("read_text", path))
    if path not in self.files: raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    return self.files[path]
  def mmio_write64(self, addr, value): self.calls.append(("mmio_write64", addr, value))

def test_listdir_and_read_text_real(tmp_path):
  (tmp_path / "b").mkdir(); (tmp_path / "a").write_text("gfx_target_version 90402\n")
  assert syscalls.listdir(str(tmp_path)) == ["a", "b"]
  assert syscalls.read_text(str(tmp_path / "a")) == "gfx_target_version 90402\n"
  with pytest.raises(FileNotFoundError): syscalls.read_text(str(tmp_path / "missing"))
  with pytest.raises(FileNotFoundError): syscalls.listdir(str(tmp_path / "missing"))

def test_sysfs_and_render_node_routed_to_fake_driver():
  drv = FakeKFD()
  with syscalls.installed(drv):
    assert syscalls.listdir(KFD_NODES) == ["0", "1"]
    assert syscalls.read_text(f"{KFD_NODES}/1/gpu_id").strip() == "4660"
    assert "drm_render_minor 128" in syscalls.read_text(f"{KFD_NODES}/1/properties")
    with pytest.raises(FileNotFoundError): syscalls.read_text(f"{KFD_NODES}/2/gpu_id")   # the fake answers, not the OS
    fd = syscalls.open_render_node(128)
    assert syscalls.is_fake(fd) and ("open", "/dev/dri/renderD128") in drv.calls
    syscalls.close(fd)
    with pytest.raises(ValueError, match="128..191"): syscalls.open_render_node(0)
  assert [c[0] for c in drv.calls][:4] == ["listdir", "read_text", "read_text", "read_text"]
  with pytest.raises(FileNotFoundError): syscalls.listdir(KFD_NODES + "-hcqrt-test")   # uninstalled: the OS answers

def test_claiming_driver_without_sysfs_calls_fails_loudly():
  with syscalls.installed(Recorder()):   # claims /dev/fake* but has no listdir/read_text
    with pytest.raises(NotImplementedError, match="no listdir"): syscalls.listdir("/dev/fake0")
    with pytest.raises(NotImplementedError, match="no read_text"): syscalls.read_text("/dev/fake0")

def test_mmio_write64():
  b = (ctypes.c_uint64 * 2)()
  syscalls.mmio_write64(ctypes.addressof(b) + 8, 0xDEAD_BEEF_0000_0001)
  assert b[1] == 0xDEAD_BEEF_0000_0001 and b[0] == 0
  with pytest.raises(ValueError, match="8-byte aligned"): syscalls.mmio_write64(ctypes.addressof(b) + 4, 1)
  with pytest.raises(ValueError, match="64 bits"): syscalls.mmio_write64(ctypes.addressof(b), 1 << 64)
  drv = FakeKFD()
  with syscalls.installed(drv):   # a doorbell store into the fake driver's mapping reaches the driver, not memory
    fd = syscalls.open("/dev/kfd", os.O_RDWR)
    a = syscalls.mmap(fd, 0x2000, syscalls.PROT_READ | syscalls.PROT_WRITE, syscalls.MAP_SHARED, 3 << 62)
    syscalls.mmio_write64(a + 0x10, 42)
    assert drv.calls[-1] == ("mmio_write64", a + 0x10, 42) and ctypes.c_uint64.from_address(a + 0x10).value == 0
    syscalls.munmap(a, 0x2000); syscalls.close(fd)

def test_kfd_requests_named_in_errors():
  from ioctl_defs.amd import kfd
  req = kfd.abi_for_version(1, 17).request("AMDKFD_IOC_CREATE_QUEUE")
  assert syscalls.describe_request(req) == "AMDKFD_IOC_CREATE_QUEUE (0xc0604b02, size 96)"
  fd = syscalls.open("/dev/null", os.O_RDWR)
  with pytest.raises(OSError, match="AMDKFD_IOC_CREATE_QUEUE") as e: syscalls.ioctl(fd, req, bytearray(96))
  assert e.value.errno == errno.ENOTTY
  syscalls.close(fd)

def test_other_platforms_are_refused_by_name(monkeypatch):
  """Off Linux x86-64 the seam (and so the NV/AMD backends) and the CPU device refuse with the platform named, instead
  of failing later with an unrelated error (a missing mmap constant, an ELF loader's 'unsupported machine')."""
  import subprocess, sys
  # (without ctypes.macholib, as Debian and Ubuntu's python3 ship: ctypes.util imports it on darwin)
  code = "import sys; sys.platform = 'darwin'; sys.modules['ctypes.macholib'] = None\ntry: import hcqrt.syscalls\nexcept Exception as e: print(type(e).__name__, e)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
  assert out.startswith("UnsupportedPlatform hcqrt.syscalls (the NV and AMD backends) needs Linux; this is darwin"), out
  from hcqrt.host import UnsupportedPlatform
  from hcqrt.cpu.device import CPUDevice
  import platform
  monkeypatch.setattr(platform, "machine", lambda: "aarch64")
  with pytest.raises(UnsupportedPlatform, match="the CPU device needs Linux on x86-64; this is linux on aarch64"): CPUDevice()

def test_store_fence_is_a_machine_fence_where_the_cpu_has_one():
  import platform
  syscalls.store_fence()
  if platform.machine().lower() in ("x86_64", "amd64", "aarch64"): assert isinstance(syscalls._fence_fn, ctypes._CFuncPtr)
  if platform.machine().lower() in ("x86_64", "amd64"):   # a valid indirect-call target under IBT: starts with endbr64
    assert ctypes.string_at(ctypes.cast(syscalls._fence_fn, ctypes.c_void_p).value, 4) == bytes([0xF3, 0x0F, 0x1E, 0xFA])

def test_store_fence_falls_back_and_unmaps_when_the_page_cannot_be_executable(monkeypatch):
  """W^X / SELinux execmem / MDWE refuse PROT_EXEC: the lock fallback is used and the page is given back."""
  import platform
  if platform.machine().lower() not in ("x86_64", "amd64", "aarch64"): pytest.skip("no machine fence on this CPU")
  unmapped, real = [], syscalls._libc.munmap
  def spy(addr, n): unmapped.append(n); return real(addr, n)
  monkeypatch.setattr(syscalls._libc, "mprotect", lambda *a: -1)
  monkeypatch.setattr(syscalls._libc, "munmap", spy)
  fn = syscalls._make_fence()
  assert not isinstance(fn, ctypes._CFuncPtr) and unmapped == [4096]
  fn()

def test_nv_submit_fences_before_gpput_and_before_the_doorbell(monkeypatch):
  """Issue 22 N2: the GP entry (and everything before it) is fenced before GPPut is stored, GPPut before the doorbell."""
  from hcqrt.mock.nv import MockNV
  from hcqrt.nv.device import NVDevice
  with syscalls.installed(MockNV()):
    dev = NVDevice("NV")
    ch, seen, rings = dev.compute_ch, [], []
    monkeypatch.setattr(syscalls, "store_fence", lambda: seen.append((ch.ring[ch.put - 1], ch.gpput.value, len(rings))))
    real = syscalls.mmio_write32
    monkeypatch.setattr(syscalls, "mmio_write32", lambda a, v: (rings.append(v), real(a, v)))
    put0 = ch.put
    dev.hw_compute_queue().signal(dev.timeline_signal, dev.timeline_value).submit(dev)
    dev.timeline_value += 1
    dev.synchronize()
    entry = ch.ring[put0]
    assert seen[:2] == [(entry, put0, 0), (entry, put0 + 1, 0)] and rings == [ch.token]

class PageDriver(Recorder):
  """Maps real anonymous pages (so the kernel really splits them under a MAP_FIXED) and records what it is told."""
  def mmap(self, fd, length, prot, flags, offset, addr):
    self.calls.append(("mmap", fd, length, offset))
    return syscalls._libc.mmap(addr, length, 3, syscalls.MAP_PRIVATE | syscalls.MAP_ANONYMOUS, -1, 0)
  def munmap(self, addr, length): self.calls.append(("munmap", addr, length)); syscalls._libc.munmap(addr, length)
  def forget_mapping(self, addr, length): self.calls.append(("forget", addr, length))
  def mmio_write64(self, addr, value): self.calls.append(("mmio_write64", addr, value))

def test_map_fixed_over_part_of_a_fake_mapping_keeps_the_rest_routed():
  """A MAP_FIXED over the middle page of a device mapping unmaps only that page: the kernel splits the VMA and the
  head and tail stay the driver's (linux@v6.12.117:mm/vma.c:370-414 __split_vma: each part keeps its pgoff, and
  vm_ops->open, drm_gem_vm_open for a BO, takes a reference for it). Stores into the tail must still reach the driver, and unmapping the tail must still tell it."""
  P, drv = 4096, PageDriver()
  with syscalls.installed(drv):
    fd = syscalls.open("/dev/fake0", os.O_RDWR)
    a = syscalls.mmap(fd, 3 * P, syscalls.PROT_READ | syscalls.PROT_WRITE, syscalls.MAP_SHARED, 0)
    syscalls.mmap(-1, P, 0, syscalls.MAP_PRIVATE | syscalls.MAP_ANONYMOUS | syscalls.MAP_FIXED, 0, a + P)
    assert ("forget", a + P, P) in drv.calls
    syscalls.mmio_write64(a + 2 * P + 8, 7)
    assert ("mmio_write64", a + 2 * P + 8, 7) in drv.calls, "the tail of the split mapping is no longer routed"
    syscalls.munmap(a + P, P)                       # the anonymous page: no driver's
    syscalls.munmap(a + 2 * P, P)                   # the tail: the driver's, though no mapping of it starts there
    assert [c for c in drv.calls if c[0] == "forget"] == [("forget", a + P, P), ("forget", a + 2 * P, P)]
    syscalls.munmap(a, P)
    assert drv.calls[-1] == ("munmap", a, P) and all(r[2] is not drv for r in syscalls._fake_ranges)
    syscalls.close(fd)
