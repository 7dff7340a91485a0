"""Records what a small program sends to the NV or AMD mock driver: every ioctl (request and argument bytes), every mmap
(without the address it returned) and, at each doorbell, the command stream the GPU is told to fetch (NV: the GPFIFO
entries' pushbuffer dwords; AMD: the ring's new dwords, with the indirect buffers they name). tests/runtime/test_hcq_streams.py
compares a run against the recording in tests/streams/, made before a refactor of the HCQ layer: the backend's driver
traffic must stay byte-identical.

  python tests/stream_recorder.py NV|AMD [--aql] [--write]   # print (or write tests/streams/<name>.json)

Runs in its own process: NV places its memory from a fixed address upward, and the AMD reservation is given a fixed
hint here, so addresses repeat run to run. Host pointers inside ioctl arguments (cffi and ctypes buffers) differ run to
run: their qwords are written as "P". A host pointer is told by where it points, from /proc/self/maps: into the heap
or an anonymous mapping the kernel placed (where malloc and Python put buffers: above 0x5500_0000_0000 for a PIE
python, just past the binary for a non-PIE one such as Debian's), not into one the backend or mock placed at an
address of its own (the NV VA range, the AMD reservation: those repeat). WAIT_EVENTS is left out (how often the host
sleeps depends on the mock GPU thread's timing).
"""
from __future__ import annotations
import argparse, ctypes, json, os, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STREAMS = os.path.join(ROOT, "tests", "streams")
AMD_VA_HINT = 0x2000_0000_0000   # inside the mock KFD's GPUVM aperture, far from anything else this process maps
TIMING_DEPENDENT = ("AMDKFD_IOC_WAIT_EVENTS",)

def host_pointer(q: int, maps: str, placed: list[tuple[int, int]]) -> bool:
  """Whether `q` points into the heap, the stack or an anonymous mapping of `maps` (/proc/<pid>/maps text), outside
  the `placed` ranges (mapped by the backend or mock at an address they chose; the kernel may merge neighbours of
  those into one line of `maps`, so `placed` is checked by address, not by line).

  >>> maps = "00400000-00421000 r--p 00000000 08:01 12 /usr/bin/python3.12\\n0e160000-0e1a0000 rw-p 00000000 00:00 0 [heap]\\n" \\
  ...        "1000000000-1000400000 ---p 00000000 00:00 0 \\n"
  >>> [host_pointer(q, maps, [(0x10_0000_0000, 0x10_0020_0000)]) for q in (0x400000, 0x0e160270, 0x10_0010_0000, 0x10_0030_0000, 0)]
  [False, True, False, True, False]
  """
  if any(a <= q < b for a, b in placed): return False
  for line in maps.splitlines():
    f = line.split()
    if len(f) > 6 or (len(f) == 6 and f[5] not in ("[heap]", "[stack]")): continue   # a file's image, or [vdso] & co
    lo, hi = (int(x, 16) for x in f[0].split("-"))
    if lo <= q < hi: return True
  return False

def _arg_hex(buf, placed: list[tuple[int, int]]) -> str:
  """The argument's bytes as hex, each 8-byte aligned qword that is a host pointer replaced by 'P' (`placed`: the
  ranges mapped at an address the backend or mock chose, whose addresses are not host pointers)."""
  from hcqrt.syscalls import _address, _ffi
  addr, keep = _address(buf)
  if isinstance(buf, int) or buf is None: return f"int:{buf}"
  if isinstance(buf, _ffi.CData): n = _ffi.sizeof(buf)
  elif isinstance(buf, ctypes._SimpleCData | ctypes.Structure | ctypes.Array | ctypes.Union): n = ctypes.sizeof(buf)
  else: n = memoryview(buf).nbytes
  raw = ctypes.string_at(addr, n)
  del keep
  with open("/proc/self/maps") as f: maps = f.read()
  out = []
  for i in range(0, n - n % 8, 8):
    q = int.from_bytes(raw[i:i + 8], "little")
    out.append("P" if q and host_pointer(q, maps, placed) else raw[i:i + 8].hex())
  if n % 8: out.append(raw[n - n % 8:].hex())
  return ".".join(out)

def record(device: str, aql: bool = False) -> list:
  """The log of the program below on the `device` mock (AMD: `aql` launches through an AQL queue)."""
  os.environ["MOCKGPU"], os.environ[device] = "1", "1"
  if device == "AMD": os.environ["AMD_AQL"] = "1" if aql else "0"
  sys.path.insert(0, ROOT)
  from hcqrt import syscalls
  from hcqrt.device import Device
  log: list = []
  placed: list[tuple[int, int]] = []   # mappings made at an address the backend or mock asked for
  real = {k: getattr(syscalls, k) for k in ("ioctl", "mmap", "munmap")}

  def ioctl(fd, request, buf):
    name = syscalls.describe_request(request)
    if not name.startswith(TIMING_DEPENDENT): log.append(["ioctl", name, _arg_hex(buf, placed)])
    return real["ioctl"](fd, request, buf)
  def mmap(fd, length, prot, flags, offset, addr=None):
    reservation = device == "AMD" and fd == -1 and addr is None and length > 1 << 32   # (its size follows the host's RAM)
    a = real["mmap"](fd, length, prot, flags, offset, AMD_VA_HINT if reservation else addr)
    if reservation or addr is not None: placed.append((a, a + length))
    log.append(["mmap", fd >= 0 and syscalls.is_fake(fd), "reservation" if reservation else length, prot, flags, offset,
                addr if addr is None or addr < 1 << 47 else "P"])
    return a
  def munmap(addr, length):
    log.append(["munmap", addr if addr < 1 << 47 else "P", length]); return real["munmap"](addr, length)
  def dwords(va: int, n: int) -> list[int]: return list((ctypes.c_uint32 * n).from_address(va))
  def ibs(dev, words: list[int]) -> None:   # the indirect buffers a PM4 stream names (graph streams live there)
    from ioctl_defs.amd import pm4
    hdr = pm4.indirect_buffer(0x1000, 1)[0]
    for j, w in enumerate(words[:-3]):
      if w == hdr and words[j + 3] & 0xFFFFF:
        va, n = words[j + 1] | (words[j + 2] & 0xFFFF) << 32, words[j + 3] & 0xFFFFF
        if any(b.host is not None and b.va <= va < b.va + b.size for b in dev.buffers.values()): log.append(["ib", va, dwords(va, n)])
  if device == "NV":
    from hcqrt.nv.device import GPFIFO
    push = GPFIFO.push
    def nv_push(self, va, ndwords):
      log.append(["push", self.name, va, dwords(va, ndwords)]); return push(self, va, ndwords)
    GPFIFO.push = nv_push
  else:
    from hcqrt.amd.device import KFDQueue
    from hcqrt.amd.aql_queue import AQLQueue
    submit, submit_packets = KFDQueue.submit, AQLQueue.submit_packets
    def kfd_submit(self, words):
      log.append(["ring", self.name, list(words)]); ibs(self.dev, list(words)); return submit(self, words)
    def aql_submit(self, packets):
      words = [int.from_bytes(p[i:i + 4], "little") for p in packets for i in range(0, len(p), 4)]
      log.append(["aql", self.name, words]); ibs(self.dev, words); return submit_packets(self, packets)
    KFDQueue.submit, AQLQueue.submit_packets = kfd_submit, aql_submit
  syscalls.ioctl, syscalls.mmap, syscalls.munmap = ioctl, mmap, munmap

  import numpy as np
  from frontend import Tensor, TinyJit
  a = Tensor(np.arange(64, dtype=np.float32)).realize()
  b = Tensor(np.ones(64, dtype=np.float32)).realize()
  assert ((a + b) * 2).numpy().tolist() == ((np.arange(64) + 1) * 2).tolist()
  @TinyJit
  def step(x: Tensor) -> Tensor: return (x * a + 1).sum()
  for i in range(4): assert step(Tensor(np.full(64, float(i), np.float32)).realize()).item() == float(i * np.arange(64).sum() + 64)
  Device[device].synchronize()
  return log

def path_of(device: str, aql: bool = False) -> str: return os.path.join(STREAMS, f"{device.lower()}{'_aql' if aql else ''}.json")

if __name__ == "__main__":
  p = argparse.ArgumentParser()
  p.add_argument("device", choices=("NV", "AMD"))
  p.add_argument("--aql", action="store_true", help="AMD: launch through an AQL queue (AMD_AQL=1)")
  p.add_argument("--write", action="store_true")
  o = p.parse_args()
  text = json.dumps(record(o.device, o.aql), separators=(",", ":"))
  if o.write:
    os.makedirs(STREAMS, exist_ok=True)
    with open(path_of(o.device, o.aql), "w") as f: f.write(text)
  else: print(text)
