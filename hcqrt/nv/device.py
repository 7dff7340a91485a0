"""The NVIDIA backend: RM + UVM ioctls, GPFIFO channels, QMD launches, semaphores and the copy engine.

Bring-up (all through hcqrt.syscalls): /dev/nvidiactl version query -> the driver branch's ABI; card info;
RM client, device, subdevice; the class list picks the architecture (GPFIFO/compute/copy classes, QMD
version); usermode page (doorbell); an externally owned vaspace registered with UVM; a GRAPHICS channel group
with a context share and two GPFIFO channels (compute, copy) that inherit the group's engine (RM refuses a
channel whose engine differs from its TSG's; grouped channels are never BOUND), each with an error notifier,
its engine object, then UVM_REGISTER_CHANNEL (RM schedules a channel of an externally owned vaspace only once
UVM bound it) and its work-submit token; then the group is scheduled. Memory is RM video (or system) memory
mapped for the GPU through UVM external ranges at the same address the CPU uses (reserved below 2**40 so
every class's semaphore/copy address fields hold it). System memory (signals, staging, notifiers) is
GPU-uncached: GPU caching of sysmem is not coherent with the CPU. Doorbells go through syscalls.mmio_write32.

  >>> from hcqrt.mock.nv import install_mock_nv
  >>> drv = install_mock_nv()
  >>> dev = NVDevice("NV"); dev.arch, dev.qmd_version
  ('sm_90', 'V04_00')
"""
from __future__ import annotations
import collections, contextlib, ctypes, errno, os, struct, threading, time, weakref
from dataclasses import dataclass
from typing import Any
from collections.abc import Sequence
from hcqrt import syscalls
from hcqrt.alloc_cache import CachingAllocator
from hcqrt.hcq import HWQueue, HCQDevice, HCQProgram, KernArgs, SignalPool, buf_addr, take_reached
from hcqrt.nv.cubin import load_cubin, relocate
from hcqrt.nv.qmd_build import launch_qmd, local_high_size, set_cbuf, set_cbuf_dims, set_dims, CB0_DIMS, INITIAL_STACK_POINTER, SPEC
from hcqrt.nv.rmclient import RMClient, NVError
from hcqrt.settings import env_int
from ioctl_defs.nv.abi import abi_for_version
from ioctl_defs.nv.classes import CLASSES as C, arch_from_classlist, class_name
from ioctl_defs.nv import flags as F
from ioctl_defs.nv.ioctl import NV_RM_API_VERSION_CMD_QUERY
from ioctl_defs.nv.methods import methods_for, method_header, gpfifo_entry, USERD_GP_GET, USERD_GP_PUT, \
  NVC361_NOTIFY_CHANNEL_PENDING, USERMODE_REGION_SIZE
from ioctl_defs.nv.qmd import QMD, QMD_SIZE
from ioctl_defs.nv.status import rc_error_name, NOTIFICATION_SIZE, NOTIFICATION_TYPE_ERROR, NOTIFICATION_TYPE__SIZE_1

RW = os.O_RDWR | os.O_CLOEXEC
PAGE, HUGE = 0x1000, 0x200000
VA_START = 0x10_0000_0000          # our allocations live in [64 GiB, 1 TiB): below 2**40 (Ampere SEM_ADDR_HI is 8 bits)
VA_END = 1 << 40
MAP_FIXED_NOREPLACE = 0x100000
SUBC_COMPUTE, SUBC_COPY = 1, 4     # subchannels we bind the engine objects to (host methods use 0)
GPFIFO_ENTRIES = 0x400
SHARED_WINDOW, LOCAL_WINDOW = 0xFE000000, 0xFF000000   # Ampere/Ada window bases (as open-source drivers use)
# Hopper and later: generic addresses into shared memory need a 4 GiB aligned window; these bases (the ones tinygrad
# uses on Blackwell) lie far above every allocation we make ([64 GiB, 1 TiB)).
SHARED_WINDOW_SM90, LOCAL_WINDOW_SM90 = 0x729400000000, 0x729300000000
PROGRAM_SLACK = 0x1000             # instruction prefetch reads past a program's end: keep 4 KiB mapped after every image

def _round_up(x: int, a: int) -> int: return (x + a - 1) // a * a

def sm_from_version(v: int) -> int:
  """NV2080_CTRL_GR_INFO_SM_VERSION (major << 8 | minor: 0x809 = 8.9, 0xa00 = 10.0, 0xc01 = 12.1; OGKM@580.142
  src/common/sdk/nvidia/inc/ctrl/ctrl2080/ctrl2080gr.h:280-317) -> the sm_XY number. Other encodings are refused.

  >>> sm_from_version(0x900), sm_from_version(0x809), sm_from_version(0xA00), sm_from_version(0xC01), sm_from_version(0xA04)
  (90, 89, 100, 121, 120)
  """
  # SM_VERSION_10_04 is the placeholder RM used for GB20x before "versions 12_*" (ctrl2080gr.h:323-329: "once 12_* is
  # tested and validated ... remove 10_04 support"); there is no sm_104 target, the chip is sm_120
  if v == 0xA04: return 120
  major, minor = v >> 8, v & 0xFF
  if not 1 <= major <= 0xFF or minor > 9:
    raise RuntimeError(f"NV: GR_GET_INFO SM_VERSION {v:#x} is not major << 8 | minor (e.g. 0x900 for sm_90); unknown GPU or driver")
  return major * 10 + minor

# host (channel) and engine methods: offsets are the same in every class we drive (checked against the tables)
_H = methods_for(C["HOPPER_CHANNEL_GPFIFO_A"])
_CP = methods_for(C["HOPPER_COMPUTE_A"])
_CE = methods_for(C["HOPPER_DMA_COPY_A"])
SEM_RELEASE = _H["SEM_EXECUTE"].data(OPERATION="RELEASE", RELEASE_WFI="EN", PAYLOAD_SIZE="64BIT")
SEM_RELEASE_TS = SEM_RELEASE | _H["SEM_EXECUTE"].value("RELEASE_TIMESTAMP", "EN")
# no ACQUIRE_SWITCH_TSG: our channels share one TSG, and switching it out on a failed acquire would also stop the
# channel that is to release the value
SEM_ACQUIRE = _H["SEM_EXECUTE"].data(OPERATION="ACQ_CIRC_GEQ", PAYLOAD_SIZE="64BIT")
DMA_COPY = _CE["LAUNCH_DMA"].data(DATA_TRANSFER_TYPE="NON_PIPELINED", FLUSH_ENABLE="TRUE", SRC_MEMORY_LAYOUT="PITCH",
                                  DST_MEMORY_LAYOUT="PITCH")
COPY_CHUNK = 1 << 30
CHANNEL_VA_BYTES = 64 << 20    # VA range given to UVM_REGISTER_CHANNEL for a channel's context buffers
UVM_CACHING_FORCE_UNCACHED = 1 # UvmGpuCachingType (uvm_types.h)

@dataclass
class NVBuffer:
  """Device memory: `nbytes` at GPU (and reserved CPU) address `va`; `host` is the CPU mapping or None."""
  va: int
  nbytes: int
  size: int           # bytes actually allocated (page rounded)
  handle: int
  host: int | None
  sysmem: bool = False
  freed: bool = False
  def view(self) -> memoryview:
    if self.host is None: raise RuntimeError(f"{self} has no CPU mapping")
    return memoryview((ctypes.c_char * self.nbytes).from_address(self.host)).cast("B")
  def __repr__(self) -> str: return f"<NVBuffer {self.nbytes} bytes at {self.va:#x}{' host' if self.host else ''}{' (freed)' if self.freed else ''}>"

# ---------------------------------------------------------------- queues
class NVQueue(HWQueue):
  """Pushbuffer builder: `q` holds method headers and data dwords; records keep dword indices for patching."""
  def __init__(self):
    super().__init__()
    self.q: list[int] = []
    self._bound: tuple[int, int, memoryview] | None = None   # (host addr, va, u32 view) once bound to device memory
    self.idle = False   # True right after a release with RELEASE_WFI: the engine has drained, no barrier needed

  def method(self, subc: int, offset: int, *data: int) -> int:
    """Append a method with its data; returns the dword index of the first data word."""
    self.q.append(method_header(subc, offset, len(data)))
    self.q.extend(data)
    return len(self.q) - len(data)

  def _put(self, i: int, v: int) -> None:
    self.q[i] = v
    if self._bound is not None: self._bound[2][i] = v

  def _sem(self, addr: int, value: int, op: int) -> dict:
    i = self.method(0, _H["SEM_ADDR_LO"].offset, addr & 0xFFFFFFFC, addr >> 32, value & 0xFFFFFFFF, value >> 32, op)
    return {"i": i}
  def _wait(self, signal, value): return {**self._sem(signal.va, value, SEM_ACQUIRE), "signal": signal}
  def _signal(self, signal, value):   # value + when; RELEASE_WFI: written once every earlier launch has finished
    self.idle = True; return {**self._sem(signal.va, value, SEM_RELEASE_TS), "signal": signal}
  def _timestamp(self, signal):
    self.idle = True; return {**self._sem(signal.timestamp_va, 0, SEM_RELEASE_TS), "signal": signal}
  def _update_sem(self, rec, signal, value):
    i = rec["i"]
    if signal is not None:
      rec["signal"] = signal
      self._put(i, signal.va & 0xFFFFFFFC); self._put(i + 1, signal.va >> 32)
    if value is not None: self._put(i + 2, value & 0xFFFFFFFF); self._put(i + 3, value >> 32)

  def bind(self, dev: NVDevice) -> None:
    """Place the pushbuffer in device memory for good: resubmits then only push a GPFIFO entry, and updates
    write straight into that memory."""
    host, va = dev.persistent(len(self.q) * 4, 16)
    view = memoryview((ctypes.c_char * (len(self.q) * 4)).from_address(host)).cast("B").cast("I")
    view[:] = memoryview(struct.pack(f"<{len(self.q)}I", *self.q)).cast("I")
    self._bound = (host, va, view)

  def _submit(self, dev: NVDevice) -> None:
    if not self.q: return
    # a lost device's channels are the leaked ones, which may still fetch from the command ring: write nothing there
    if dev.lost: raise NVError(f"{dev.name}: submitting {self.name}: {dev.lost}")   # (lost names no device: once here)
    if self._bound is not None: va = self._bound[1]
    else: va = dev.cmdq_write(self.q)
    dev.channel_for(self).push(va, len(self.q))

class NVComputeQueue(NVQueue):
  """Launches are ordered: each waits for the grids before it (stream order; a graph's kernels depend on each other).

  The barrier is WAIT_FOR_IDLE on the compute subchannel before a launch (what Mesa NVK emits between dependent
  dispatches), unless the queue's previous command was a release with RELEASE_WFI (the engine is idle then). Chaining QMDs (DEPENDENT_QMD0 = SCHEDULE the next QMD when this
  one completes, as tinygrad does) would spare the front end that wait, but it makes every QMD point at its successor:
  a launch could no longer be patched or resubmitted on its own, a semaphore or copy between two launches breaks the
  chain, and the field sets differ per QMD version. WAIT_FOR_IDLE is one method with the same meaning on every class;
  its cost is the grid drain that the dependency requires anyway.
  """
  def barrier(self) -> None:
    """Wait until every grid launched before has finished (compute WAIT_FOR_IDLE)."""
    self.method(SUBC_COMPUTE, _CP["WAIT_FOR_IDLE"].offset, 0)

  def _exec(self, prog: NVProgram, args: KernArgs, g, l) -> dict:
    qmd_host, qmd_va = args.extra
    q = QMD(prog.qmd_version, data=prog.qmd_for(g, l))
    lo, hi, sh = prog.cb0_address
    q.set_address(lo, hi, args.va, sh, i=0)   # the only QMD field that differs between launches of one geometry
    set_cbuf_dims(args.view, prog.qmd_version, g, l)   # the code reads %ntid/%nctaid from c[0], the QMD only runs them
    ctypes.memmove(qmd_host, bytes(q.data), len(q.data))
    if not self.idle: self.barrier()
    self.idle = False
    inval, pcas_a, pcas_b = _launch_methods(prog.qmd_version)
    self.q += inval
    self.q.append(pcas_a); self.q.append(qmd_va >> 8)
    self.q += pcas_b
    return {"prog": prog, "args": args}
  def _update_exec(self, rec, g, l):
    qmd_host, _ = rec["args"].extra
    n = QMD_SIZE[rec["prog"].qmd_version]
    q = QMD(rec["prog"].qmd_version, data=ctypes.string_at(qmd_host, n))
    g, l = g or _qdims(q, "grid"), l or _qdims(q, "block")
    set_dims(q, g, l)
    set_cbuf_dims(rec["args"].view, rec["prog"].qmd_version, g, l)
    ctypes.memmove(qmd_host, bytes(q.data), n)

_LAUNCH_METHODS: dict[str, tuple[list[int], int, list[int]]] = {}

def _launch_methods(version: str) -> tuple[list[int], int, list[int]]:
  """The pushbuffer words of a launch, made once per QMD version: INVALIDATE_SHADER_CACHES_NO_WFI (header and data),
  SEND_PCAS_A's header (its data is the QMD's address >> 8), then SEND_SIGNALING_PCAS_B (V03_00) or
  SEND_SIGNALING_PCAS2_B (header and data)."""
  if (m := _LAUNCH_METHODS.get(version)) is None:
    inval = _CP["INVALIDATE_SHADER_CACHES_NO_WFI"]
    words = [method_header(SUBC_COMPUTE, inval.offset, 1), inval.data(INSTRUCTION="TRUE", GLOBAL_DATA="TRUE", CONSTANT="TRUE")]
    if version == "V03_00":
      b = _CP["SEND_SIGNALING_PCAS_B"]; bdata = b.data(INVALIDATE="TRUE", SCHEDULE="TRUE")
    else:
      b = _CP["SEND_SIGNALING_PCAS2_B"]; bdata = b.data(PCAS_ACTION="INVALIDATE_COPY_SCHEDULE")
    m = _LAUNCH_METHODS[version] = (words, method_header(SUBC_COMPUTE, _CP["SEND_PCAS_A"].offset, 1),
                                    [method_header(SUBC_COMPUTE, b.offset, 1), bdata])
  return m

def _qdims(q: QMD, which: str) -> tuple[int, int, int]:
  if which == "grid": return tuple(q.get(f) for f in SPEC[q.version]["grid"])   # type: ignore[return-value]
  return tuple(q.get(f"CTA_THREAD_DIMENSION{i}") for i in range(3))              # type: ignore[return-value]

class NVCopyQueue(NVQueue):
  def _copy(self, dst: int, src: int, nbytes: int) -> dict:
    chunks = []
    for off in range(0, nbytes, COPY_CHUNK):
      n = min(COPY_CHUNK, nbytes - off)
      i = self.method(SUBC_COPY, _CE["OFFSET_IN_UPPER"].offset, (src + off) >> 32, (src + off) & 0xFFFFFFFF, (dst + off) >> 32, (dst + off) & 0xFFFFFFFF)
      self.method(SUBC_COPY, _CE["LINE_LENGTH_IN"].offset, n)
      self.method(SUBC_COPY, _CE["LAUNCH_DMA"].offset, DMA_COPY)
      chunks.append((i, off))
    return {"chunks": chunks}
  def _update_copy(self, rec, dst, src):
    for i, off in rec["chunks"]:
      if src is not None: self._put(i, (src + off) >> 32); self._put(i + 1, (src + off) & 0xFFFFFFFF)
      if dst is not None: self._put(i + 2, (dst + off) >> 32); self._put(i + 3, (dst + off) & 0xFFFFFFFF)

# ---------------------------------------------------------------- channel
class GPFIFO:
  """One GPFIFO channel: its ring (host view), USERD GPPut/GPGet, and the work-submit token for the doorbell."""
  def __init__(self, dev: NVDevice, ring_host: int, ring_va: int, userd_host: int, token: int, name: str, notifier: NVBuffer | None = None):
    self.dev, self.ring_va, self.token, self.name, self.notifier = dev, ring_va, token, name, notifier
    self.ring = (ctypes.c_uint64 * GPFIFO_ENTRIES).from_address(ring_host)
    self.gpput = ctypes.c_uint32.from_address(userd_host + USERD_GP_PUT)
    self.gpget = ctypes.c_uint32.from_address(userd_host + USERD_GP_GET)
    self.put = 0

  def pending(self) -> int: return (self.put - self.gpget.value) % GPFIFO_ENTRIES

  def error(self) -> str | None:
    """What RM wrote into this channel's error notifier after an RC error (a fault), or None."""
    if self.notifier is None or self.notifier.host is None: return None
    _ns, info32, info16, status = struct.unpack_from("<QIHH", ctypes.string_at(self.notifier.host + NOTIFICATION_TYPE_ERROR * NOTIFICATION_SIZE, NOTIFICATION_SIZE))
    if status == 0 and info32 == 0: return None
    return f"{self.name} faulted: {rc_error_name(info32)} (Xid {info32}, info16 {info16:#x}, status {status:#x})"

  def push(self, va: int, ndwords: int) -> None:
    if self.pending() >= GPFIFO_ENTRIES - 1:
      deadline = time.perf_counter() + self.dev.wait_timeout_s
      next_check = 0.0
      while self.pending() >= GPFIFO_ENTRIES - 1:
        if (now := time.perf_counter()) > deadline: raise TimeoutError(f"{self.dev.name}: {self.name} GPFIFO ring stays full (GPGet {self.gpget.value}, put {self.put})")
        # a faulted channel never drains its ring: report RM's notifier now instead of after the whole timeout
        if now >= next_check: self.dev.raise_if_faulted(); next_check = now + 0.01
        time.sleep(0.0001)
    self.ring[self.put] = gpfifo_entry(va, ndwords)
    self.put = (self.put + 1) % GPFIFO_ENTRIES
    # QMD, constant buffer, pushbuffer and this entry are write-combined stores; the PBDMA reads USERD GPPut on its own
    # while the channel is loaded ("not immediately synchronized with NV_RAMUSERD_GP_PUT", open-gpu-doc@c8607fe
    # manuals/ampere/ga100/dev_pbdma.ref.txt:476-480), so they must be visible before GPPut is (syscalls.store_fence)
    syscalls.store_fence()
    self.gpput.value = self.put          # USERD is device memory: the GPU reads GPPut from here ...
    self.dev.pushes += 1                 # (the PBDMA may fetch the entry from now on, doorbell or not: dev_pbdma.ref.txt above)
    syscalls.store_fence()               # ... and GPPut before the doorbell (as UVM: uvm_volta_host.c:31-44 wmb())
    try: syscalls.mmio_write32(self.dev.doorbell, self.token)   # ... once the doorbell tells it which channel to look at
    except Exception as e:   # the channel went into an error state (a mock GPU reports it here): start over on new ones
      e.args = (f"{self.dev.name}: {e}; {self.dev.recover()}",)   # (the mock's error names its GPU's index, not the device)
      raise

# ---------------------------------------------------------------- programs
def _free_program(dev_ref: weakref.ref, lib: NVBuffer) -> None:
  # (a weak reference: the finalizer must not keep the device alive; once the device is gone its memory is too)
  if (dev := dev_ref()) is not None: dev.allocator.free_later(lib)

class NVProgram(HCQProgram):
  """A cubin kernel uploaded to GPU memory: the relocated image, a QMD template and constant bank 0's template.
  Arguments go in constant bank 0 at the offset the cubin declares (buffers as u64, then ints)."""
  def __init__(self, dev: NVDevice, name: str, cubin: bytes):
    super().__init__(dev, name)
    img = load_cubin(cubin)
    if name not in img.kernels: raise RuntimeError(f"kernel {name!r} not in its cubin (has: {', '.join(img.kernels) or 'none'})")
    if img.arch // 10 != dev.sm // 10 or img.arch > dev.sm:
      raise RuntimeError(f"kernel {name}: cubin is for sm_{img.arch}, the device is {dev.arch}")
    k = self.kernel = img.kernels[name]
    self.lib = dev.allocator.alloc(len(img.image) + PROGRAM_SLACK)
    # the code's memory goes back to the allocator when the program is dropped (frontend/engine.py evicts kernels from
    # its cache; whoever still launches one holds it), at the allocator's next safe point (free_later: the finalizer
    # runs inside whatever code a cyclic GC interrupted): reused, as any freed buffer, only by work behind the timeline,
    # after every launch of this program, and every launch invalidates the instruction cache (_launch_methods), so
    # code loaded later at this address never runs stale instructions
    weakref.finalize(self, _free_program, weakref.ref(dev), self.lib).atexit = False
    relocate(img, self.lib.va)
    dev.allocator.copyin(self.lib, memoryview(bytes(img.image)))
    self.qmd_version = dev.qmd_version
    self.params = [(k.param_cbank_offset + off, size) for _, off, size in k.params]
    off0, size0 = k.const_banks.get(0, (0, 0))
    self.cbuf0_size = _round_up(max(size0, k.param_cbank_offset + k.param_size, CB0_DIMS[dev.qmd_version][1] + 12), 64)
    cb = bytearray(self.cbuf0_size)
    cb[:size0] = img.image[off0:off0 + size0]
    # driver-owned words below the parameters: shared/local window bases and the initial stack pointer that every
    # kernel with a stack loads first (layout not in public headers; the places and values tinygrad writes; on an H200,
    # driver 580.159.04, hw_tests' stack_and_spills ran with 296 bytes of stack per thread: the V04_00 places hold)
    sw, lw = dev.windows()
    if dev.qmd_version != "V05_00": struct.pack_into("<QQQ", cb, 0x18, sw, lw, INITIAL_STACK_POINTER)
    else: struct.pack_into("<QQ", cb, 188 * 4, sw, lw); struct.pack_into("<I", cb, 223 * 4, INITIAL_STACK_POINTER)
    self.cbuf0 = bytes(cb)
    local = local_high_size(k.local_bytes)
    dev.ensure_local_memory(local)
    self.shared = k.shared_static   # dynamic shared memory: not used by our kernels yet
    cbufs = {i: (self.lib.va + off, size) for i, (off, size) in k.const_banks.items() if i != 0 and size}
    q = launch_qmd(dev.qmd_version, self.lib.va + k.text_offset, max(k.registers, 1), max(self.shared, 0x400 if dev.sm >= 90 else 0),
                   local, max(1, k.num_barriers), cbufs, sm=dev.sm)
    self.qmd_template = bytes(q.data)
    self._qmds: dict[tuple, bytes] = {}
    self._qmds_of: tuple | None = None   # the (template, bank 0 size) the memo was made from
    self.cb0_address = SPEC[dev.qmd_version]["cb"]   # (lower field, upper field, shift) of constant bank 0's address

  def qmd_for(self, grid: tuple[int, int, int], block: tuple[int, int, int]) -> bytes:
    """The QMD of a launch with this geometry, all but constant bank 0's address (it moves with each launch's
    arguments), made once per geometry: building it field by field cost about half the host time of a launch."""
    if (of := self._qmds_of) is None or of[0] is not self.qmd_template or of[1] != self.cbuf0_size:
      self._qmds, self._qmds_of = {}, (self.qmd_template, self.cbuf0_size)   # made, or the template patched (tests do)
    if (b := self._qmds.get((grid, block))) is None:
      q = QMD(self.qmd_version, data=self.qmd_template)
      set_cbuf(q, 0, 0, self.cbuf0_size)
      set_dims(q, grid, block)
      if len(self._qmds) >= 64: self._qmds.clear()   # launches with symbolic sizes: a bounded memo
      b = self._qmds[(grid, block)] = bytes(q.data)
    return b

  def fill_kernargs(self, bufs: Sequence[Any], vals: Sequence[int] = (), persistent: bool = False) -> KernArgs:
    if len(bufs) + len(vals) != len(self.params):
      raise TypeError(f"kernel {self.name} takes {len(self.params)} arguments, got {len(bufs)} buffers + {len(vals)} ints")
    qsize = QMD_SIZE[self.qmd_version]
    host, va = (self.device.persistent if persistent else self.device.kernargs)(self.cbuf0_size + _round_up(qsize, 256), 256)
    # layout: QMD first (SEND_PCAS wants 256-byte alignment), constant bank 0 after it (64-byte aligned)
    qhost, qva, chost, cva = host, va, host + _round_up(qsize, 256), va + _round_up(qsize, 256)
    ctypes.memmove(chost, self.cbuf0, self.cbuf0_size)
    a = KernArgs(memoryview((ctypes.c_char * self.cbuf0_size).from_address(chost)).cast("B"), self.params, len(bufs), cva, (qhost, qva))
    for i, b in enumerate(bufs): a.set_buffer(i, buf_addr(b))
    for j, v in enumerate(vals): a.set_int(j, v)
    return a

  def __repr__(self) -> str: return f"<NVProgram {self.name} at {self.lib.va + self.kernel.text_offset:#x}>"

# ---------------------------------------------------------------- allocator
class NVAllocator(CachingAllocator):
  """GPU memory (video memory, GPU-only) plus host<->device copies through the copy engine and staging buffers.

  Freed memory is kept (hcqrt/alloc_cache.py; up to `cache_limit` bytes, env NV_CACHE_BYTES) and handed to the next
  allocation of the same rounded size: a fresh allocation costs four RM/UVM ioctls and an mmap, and returning memory to
  the driver has to wait for the GPU to go idle. Reuse needs no wait: every queue of the device runs after the work
  submitted before it (the timeline signal orders them), so a kernel that writes the reused memory runs after the last
  one that read it. When an allocation fails, the cache is returned to the driver and the allocation tried once more.

  Frees come from finalizers (a Buffer's: frontend/buffer.py; a dropped program's code: _free_program), which run at any
  bytecode, inside any of our calls (cyclic GC) and on any thread, the GPU's own included (a mock GPU's front end runs
  Python; a synchronize there would wait for itself): so a free never waits, for `_lock` or for the GPU, and makes no
  ioctl. It marks the record dead (a second free raises at once, deferred or not) and queues it on `_dropped`
  (deque.append is atomic, takes no lock); whoever then finds the allocator free, with no call under way on its thread
  (`_busy`: a finalizer inside our own call must not re-enter the cache mid-update), moves `_dropped` into the cache:
  bookkeeping only. What the cache lets go goes back to RM/UVM, which waits for the GPU (gpu_free synchronizes first),
  so `_release` only queues it on `_evicted`, and only callers that may wait give it back: alloc, flush and the
  device's synchronize (reap(wait=True)). Threads: one at a time inside (`_lock`).
  """
  STAGING = 2 << 20
  def __init__(self, dev: NVDevice, cache_limit: int | None = None):
    super().__init__(env_int("NV_CACHE_BYTES", 1 << 30) if cache_limit is None else cache_limit)
    self.dev = dev
    self._dropped: collections.deque[NVBuffer] = collections.deque()   # freed (record marked), not yet in the cache
    self._evicted: collections.deque[NVBuffer] = collections.deque()   # let go by the cache, not yet given to RM/UVM
    self._busy = 0   # allocator calls under way (by the thread holding _lock): reap waits for them
    self._lock = threading.RLock()   # (reentrant: a finalizer inside our own call takes it, then finds _busy and defers)

  def _size(self, b: NVBuffer) -> int: return b.size
  def _release(self, b: NVBuffer) -> None: self._evicted.append(b)   # (given back by the next caller that may wait)

  def free(self, buf: NVBuffer) -> None:
    """Free `buf`: into the cache now if no other call is under way, else at the next one. Never waits (see above)."""
    self.free_later(buf)
    self.reap(wait=False)
  def free_later(self, buf: NVBuffer) -> None:
    """Free `buf` at the next safe point (reap). Finalizer-safe: no lock, no ioctl; a double free raises here."""
    # check and claim in one step (dict.setdefault is atomic under the GIL): two threads freeing one record at once
    # must not both pass a check-then-set, which would cache the memory twice, for two owners
    if buf.freed or buf.__dict__.setdefault("_claimed", tok := object()) is not tok:
      raise RuntimeError(f"{self.dev.name}: double free of {buf!r}")
    buf.freed = True   # this record is dead (a later use raises); the memory lives on in a new one
    self._dropped.append(buf)
  def reap(self, wait: bool = True, timeout_s: float | None = None) -> None:
    """Put freed buffers into the cache and, if the caller may wait for the GPU (`wait`, up to `timeout_s` per wait),
    give what the cache let go back to RM/UVM; unless another thread is inside or an allocator call is under way (it
    reaps when it next runs)."""
    if not (self._dropped or (wait and self._evicted)) or not self._lock.acquire(blocking=False): return
    try:
      if self._busy: return
      with self._inside(): self._drain(wait, timeout_s)
    finally: self._lock.release()
  def _drain(self, wait: bool, timeout_s: float | None = None) -> None:
    while self._dropped:
      b = self._dropped.popleft()
      self._keep((b.size, b.host is not None), NVBuffer(b.va, b.size, b.size, b.handle, b.host, b.sysmem))
    while wait and self._evicted:
      b = self._evicted.popleft()
      try: self.dev.gpu_free(b, timeout_s)   # (synchronizes: the GPU may still use it)
      except BaseException:   # a fault or timeout in its synchronize: kept for the next caller, not lost (leaked)
        if not b.freed: self._evicted.appendleft(b)
        raise
  @contextlib.contextmanager
  def _inside(self):
    self._busy += 1
    try: yield
    finally: self._busy -= 1

  def alloc(self, nbytes: int, host: bool = False) -> NVBuffer:
    # a lost device (recover could not free its channel group) may still have channels writing cached memory
    if self.dev.lost: raise NVError(f"{self.dev.name}: alloc of {nbytes} bytes: {self.dev.lost}")
    with self._lock:
      self.reap()
      with self._inside(): return self._alloc(nbytes, host)
  def _alloc(self, nbytes: int, host: bool) -> NVBuffer:
    if not isinstance(nbytes, int) or nbytes < 0: raise ValueError(f"NVAllocator.alloc: bad size {nbytes!r}")
    n = max(nbytes, 1)
    if (b := self._take((_round_up(n, HUGE if n >= HUGE else PAGE), host))) is not None:
      return NVBuffer(b.va, nbytes, b.size, b.handle, b.host, b.sysmem)
    try: return self.dev.gpu_alloc(n, host=host, nbytes=nbytes)
    except NVError:
      # frees deferred during this call (a finalizer a GC ran inside it, another thread's free) hold memory too
      if not (self._dropped or self._evicted or self.cached_bytes): raise
      self.flush()
      return self.dev.gpu_alloc(n, host=host, nbytes=nbytes)

  def flush(self) -> None:
    # an allocator call like the others (another thread's free, a finalizer's, waits for the next one)
    with self._lock, self._inside():
      self._drain(wait=False)   # deferred frees go back too
      super().flush()
      self._drain(wait=True)

  def _xfer(self, n: int, fill: Any, drain: Any, dst_va: Any, src_va: Any) -> None:
    dev = self.dev
    for off in range(0, n, self.STAGING):
      m = min(self.STAGING, n - off)
      st = dev.staging[(off // self.STAGING) % 2]
      if fill: fill(st, off, m)
      dev.submit_timeline(dev.after_timeline(dev.hw_copy_queue()).copy(dst_va(st, off), src_va(st, off), m))
      if drain: dev.synchronize(); drain(st, off, m)
    dev.synchronize()

  def copyin(self, dst: NVBuffer, src: memoryview) -> None:
    """Copy all of `src` into the start of `dst` (staged through host-mapped memory and the copy engine)."""
    mv = memoryview(src).cast("B")
    if mv.nbytes > dst.nbytes: raise ValueError(f"copyin: {mv.nbytes} bytes do not fit in {dst!r}")
    if dst.freed: raise RuntimeError(f"copyin to {dst!r}")
    def fill(st, off, m):
      self.dev.synchronize()   # the staging buffer may still feed an earlier copy
      ctypes.memmove(st.host, (ctypes.c_char * m).from_buffer_copy(mv[off:off + m]) if mv.readonly else (ctypes.c_char * m).from_buffer(mv[off:off + m]), m)
    self._xfer(mv.nbytes, fill, None, lambda st, off: dst.va + off, lambda st, off: st.va)

  def copyout(self, dst: memoryview, src: NVBuffer) -> None:
    """Fill all of `dst` from the start of `src`."""
    mv = memoryview(dst).cast("B")
    if mv.nbytes > src.nbytes: raise ValueError(f"copyout: {mv.nbytes} bytes wanted from {src!r}")
    if mv.readonly and mv.nbytes: raise ValueError("copyout destination is read-only")
    def drain(st, off, m): mv[off:off + m] = ctypes.string_at(st.host, m)
    self._xfer(mv.nbytes, None, drain, lambda st, off: st.va, lambda st, off: src.va + off)

  def transfer(self, dst: NVBuffer, src: NVBuffer, nbytes: int) -> None:
    """Device-to-device copy on the copy engine."""
    dev = self.dev
    dev.submit_timeline(dev.after_timeline(dev.hw_copy_queue()).copy(dst.va, src.va, nbytes))

# ---------------------------------------------------------------- device
class _Ring:
  """Bump allocation in one host-mapped buffer; wrapping around first runs `drain` (wait until the GPU is done)."""
  def __init__(self, buf: NVBuffer, drain: Any): self.buf, self.off, self.drain = buf, 0, drain
  def alloc(self, n: int, align: int) -> tuple[int, int]:
    off = _round_up(self.off, align)
    if off + n > self.buf.size:
      if n > self.buf.size: raise MemoryError(f"{n} bytes do not fit a {self.buf.size}-byte ring")
      self.drain(); off = 0
    self.off = off + n
    return self.buf.host + off, self.buf.va + off   # type: ignore[operator]

class NVDevice(HCQDevice):
  """An NVIDIA GPU driven through its kernel driver. `name` "NV" or "NV:<n>" (the n-th GPU). The device contract
  (hcqrt/interface.py Device) and the timeline, signals and graphs come from HCQDevice; this class is the driver:
  RM/UVM bring-up, memory, GPFIFO channels, error notifiers and recovery. renderer "ptx", arch "sm_90"."""
  renderer = "ptx"
  frees_after_gpu = True   # free_persistent defers until the GPU is past the graph (hcq._release_graph must not wait)
  lost: str | None = None  # why the device cannot be used again (recover, when RM would not free the channel group)

  def __init__(self, name: str = "NV"):
    self.name = name
    self.index = int(name.split(":")[1]) if ":" in name else 0
    self._va_next = VA_START
    self._open()
    self.allocator = NVAllocator(self)
    self._setup_memory_and_channels()

  # ---- bring-up ----
  def _open(self) -> None:
    try: self.ctl = syscalls.open("/dev/nvidiactl", RW)
    except FileNotFoundError: raise RuntimeError("NV: /dev/nvidiactl does not exist (no NVIDIA kernel driver loaded)") from None
    except PermissionError: raise RuntimeError("NV: permission denied opening /dev/nvidiactl (add yourself to the video group)") from None
    boot = abi_for_version("580.0")   # nv_ioctl_rm_api_version_t has the same layout in every branch
    v = boot.new("nv_ioctl_rm_api_version_t", cmd=NV_RM_API_VERSION_CMD_QUERY)
    syscalls.ioctl(self.ctl, boot.escape("NV_ESC_CHECK_VERSION_STR"), v)
    self.driver_version = boot.ffi.string(v.versionString).decode()
    self.abi = abi_for_version(self.driver_version)     # UnsupportedDriverVersion names the version
    cards = self.abi.ffi.new("nv_ioctl_card_info_t[64]")
    syscalls.ioctl(self.ctl, self.abi.escape("NV_ESC_CARD_INFO", count=64), cards)
    valid = [cards[i] for i in range(64) if cards[i].valid]
    self.card_count = len(valid)
    if self.index >= len(valid): raise RuntimeError(f"{self.name}: the driver reports {len(valid)} NVIDIA GPU(s)")
    card = valid[self.index]
    self.gpu_id, self.minor = card.gpu_id, card.minor_number
    self.devfd = self._dev_fd()
    self.rm = rm = RMClient(self.ctl, self.abi)
    info = rm.control(rm.root, "NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2", gpuId=self.gpu_id)
    self.hdev = rm.alloc(rm.root, C["NV01_DEVICE_0"], "NV0080_ALLOC_PARAMETERS", deviceId=info.deviceInstance, hClientShare=rm.root,
                         vaMode=F.VALUES["NV_DEVICE_ALLOCATION_VAMODE_MULTIPLE_VASPACES"])[0]
    self.hsub = rm.alloc(self.hdev, C["NV20_SUBDEVICE_0"], "NV2080_ALLOC_PARAMETERS")[0]
    cl = rm.control(self.hdev, "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2")
    self.classes = [cl.classList[i] for i in range(cl.numClasses)]
    self.arch_info = arch_from_classlist(self.classes)
    self.qmd_version = self.arch_info.qmd
    gr = self.abi.ffi.new("NV2080_CTRL_GR_INFO[1]")
    gr[0].index = F.VALUES["NV2080_CTRL_GR_INFO_INDEX_SM_VERSION"]
    rm.control(self.hsub, "NV2080_CTRL_CMD_GR_GET_INFO", grInfoListSize=1, grInfoList=rm.ptr(gr))
    self.sm = sm_from_version(gr[0].data)
    self.arch = f"sm_{self.sm}"
    # the SMs this part enables (RM lists each one), not the die's LITTER GPC x TPC x SM product (GH100: 144; an H100 SXM enables 132)
    self.sm_count = rm.control(self.hsub, "NV2080_CTRL_CMD_GR_GET_SM_TO_GPC_TPC_MAPPINGS").smCount
    fb = rm.control(self.hsub, "NV2080_CTRL_CMD_FB_GET_INFO_V2", fbInfoListSize=1, fbInfoList=[{"index": F.VALUES["NV2080_CTRL_FB_INFO_INDEX_RAM_SIZE"]}])
    self.memory_bytes = fb.fbInfoList[0].data << 10
    gid = rm.control(self.hsub, "NV2080_CTRL_CMD_GPU_GET_GID_INFO", flags=F.VALUES["NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY"], length=16)
    self.uuid = bytes(self.abi.ffi.buffer(gid.data, 16))
    nm = rm.control(self.hsub, "NV2080_CTRL_CMD_GPU_GET_NAME_STRING", gpuNameStringFlags=F.VALUES["NV2080_CTRL_GPU_GET_NAME_STRING_FLAGS_TYPE_ASCII"])
    self.product_name = self.abi.ffi.string(nm.gpuNameString.ascii).decode(errors="replace")
    self.husermode = rm.alloc(self.hsub, self.arch_info.usermode)[0]
    self.usermode = rm.map_to_cpu(self._dev_fd, self.hsub, self.husermode, USERMODE_REGION_SIZE, 0, system=False)
    self.doorbell = self.usermode + NVC361_NOTIFY_CHANNEL_PENDING
    self.hvaspace = rm.alloc(self.hdev, C["FERMI_VASPACE_A"], "NV_VASPACE_ALLOCATION_PARAMETERS", vaBase=PAGE, vaSize=(1 << 49) - PAGE,
                             flags=F.VALUES["NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING"] | F.VALUES["NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED"])[0]
    self.uvmfd = syscalls.open("/dev/nvidia-uvm", RW)
    self.uvmfd2 = syscalls.open("/dev/nvidia-uvm", RW)
    rm.uvm(self.uvmfd, "UVM_INITIALIZE")
    rm.uvm(self.uvmfd2, "UVM_MM_INITIALIZE", accept=("NV_WARN_NOTHING_TO_DO",), uvmFd=self.uvmfd)   # "no mm needed" is fine
    rm.uvm(self.uvmfd, "UVM_REGISTER_GPU", gpu_uuid=[{"uuid": list(self.uuid)}][0], rmCtrlFd=-1)
    rm.uvm(self.uvmfd, "UVM_REGISTER_GPU_VASPACE", gpuUuid={"uuid": list(self.uuid)}, rmCtrlFd=self.ctl, hClient=rm.root, hVaSpace=self.hvaspace)

  def _dev_fd(self) -> int:
    fd = syscalls.open(f"/dev/nvidia{self.minor}", RW)
    syscalls.ioctl(fd, self.abi.escape("NV_ESC_REGISTER_FD"), self.abi.new("nv_ioctl_register_fd_t", ctl_fd=self.ctl))
    return fd

  def _setup_memory_and_channels(self) -> None:
    self.gpfifo_mem = self.gpu_alloc(HUGE, host=True)
    self.cmdq = _Ring(self.gpu_alloc(4 << 20, host=True), self._drain_channels)
    self.kernargs_ring = _Ring(self.gpu_alloc(16 << 20, host=True), self.synchronize)
    self._arena: list[_Ring] = []
    self._persistent_free: dict[tuple[int, int], list[tuple[int, int]]] = {}   # (n, align) -> free (host, va) blocks
    # freed blocks the GPU may still read: (blocks, ((signal, value), ...)) listed free once every value is reached
    self._persistent_later: collections.deque[tuple[list, tuple]] = collections.deque()
    self.sigbuf = sigbuf = self.gpu_alloc(0x10000, host=True, sysmem=True)
    assert sigbuf.host is not None
    self._init_signals(SignalPool(self, sigbuf.host, sigbuf.va, sigbuf.size))
    self._peer_gpus: set[bytes] = set()                 # other GPUs registered in this device's UVM VA space
    self._peer_maps: dict[tuple[str, int], NVBuffer] = {}   # (owner device, RM handle) -> what is mapped here
    self._mapped_by: dict[int, list[NVDevice]] = {}     # RM handle of our memory -> devices that mapped it
    self._bounce: list[NVBuffer] = []
    self.staging = [self.gpu_alloc(NVAllocator.STAGING, host=True, sysmem=True) for _ in range(2)]
    self.local_bytes, self.local_mem = 0, None
    self._open_channels(0)

  def _open_channels(self, slot: int) -> None:
    """The channel group, its compute and copy channels (rings and USERD at `slot`, 0 or 2, of gpfifo_mem: recreated
    channels do not share memory with the ones just freed), and their engine objects bound."""
    rm, a = self.rm, self.arch_info
    self.chan_slot, self.chan_handles, self._chan_memory = slot, [], []
    self.hgroup = rm.alloc(self.hdev, C["KEPLER_CHANNEL_GROUP_A"], "NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS",
                           engineType=F.VALUES["NV2080_ENGINE_TYPE_GRAPHICS"])[0]
    self.hctx = rm.alloc(self.hgroup, C["FERMI_CONTEXT_SHARE_A"], "NV_CTXSHARE_ALLOCATION_PARAMETERS", hVASpace=self.hvaspace,
                         flags=F.VALUES["NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC"])[0]
    # both channels inherit the group's GRAPHICS engine (engineType 0): the copy engine object still works on a GR-runlist
    # channel, and RM refuses a channel whose engine type differs from its TSG's
    self.compute_ch = self._channel(slot, a.compute, "compute")
    self.copy_ch = self._channel(slot + 1, a.copy, "copy")
    rm.control(self.hgroup, "NVA06C_CTRL_CMD_GPFIFO_SCHEDULE", bEnable=1)
    # bind the engine objects to their subchannels; point the compute engine at its shared/local windows
    sw, lw = self.windows()
    q = NVComputeQueue()
    q.method(SUBC_COMPUTE, _H["SET_OBJECT"].offset, a.compute)
    q.method(SUBC_COMPUTE, _CP["SET_SHADER_LOCAL_MEMORY_WINDOW_A"].offset, lw >> 32, lw & 0xFFFFFFFF)
    q.method(SUBC_COMPUTE, _CP["SET_SHADER_SHARED_MEMORY_WINDOW_A"].offset, sw >> 32, sw & 0xFFFFFFFF)
    q.signal(self.timeline_signal, self.timeline_value).submit(self)
    c = NVCopyQueue()
    c.method(SUBC_COPY, _H["SET_OBJECT"].offset, a.copy)
    c.signal(self.timeline_signal, self.timeline_value).submit(self)
    self.timeline_value += 1
    self.synchronize()

  def recover(self) -> str:
    """A wait timed out or a channel refused its work, so queued work may never finish (a hung launch, a channel in
    error) and would block every later wait. Free the channel group (RM preempts its channels and drops their work), open new channels, and write
    from the CPU every signal value the dropped work promised. Returns the device's state, for the error message.

    If RM will not free the group, its channels may still run that work and write the buffers it names: nothing may
    then pass for done. The promised values are not written (a wait would pass over work that may still run, and a
    gpu_free or a cache reuse would hand its memory to a new owner), no new channels are opened (their first release
    would move the timeline past those values), and the device is `lost`: every later wait, submit, synchronize and
    alloc raises NVError naming the device and that it did not come back."""
    if self.lost: return self.lost
    # (no device name in what recover returns: every caller puts it first, "NV: ..."; one name, once)
    if self._recovering: return "the device did not come back after its channels were recreated; reopen the process"
    faults = "".join(f"{e}; " for e in self.channel_errors())   # what RM wrote in the error notifiers, before they go
    self._recovering, done = True, self.timeline_signal.value
    try:
      kept = []   # why memory the old channels may still use was not given back
      unregistered = []
      for h in self.chan_handles:   # UVM drops its hold on the channels before RM frees them (and may reuse the handles)
        try:
          self.rm.uvm(self.uvmfd, "UVM_UNREGISTER_CHANNEL", gpuUuid={"uuid": list(self.uuid)}, hClient=self.rm.root, hChannel=h)
          unregistered.append(True)
        except NVError as e: unregistered.append(False); kept.append(f"UVM_UNREGISTER_CHANNEL of {h:#x} failed ({e})")
      try: self.rm.free(self.hdev, self.hgroup); group_freed = True
      except NVError as e: group_freed = False; kept.append(f"freeing the channel group failed ({e})")
      # RM hands GSP the notifier's physical address at channel alloc and takes no reference on it (OGKM@580.142
      # src/nvidia/src/kernel/gpu/fifo/kernel_channel.c:549-567, 2016-2080): while the channels may live, freeing it
      # lets a later RC write into pages back in the kernel's pool, and UVM may still map context buffers in ctx_va
      if group_freed:   # the old channels' notifiers go away: nothing may read them again (even if reopening fails below)
        for ch in (self.compute_ch, self.copy_ch): ch.notifier = None
      for (notifier, ctx_va), unreg in zip(self._chan_memory, unregistered):   # the old channels' notifiers and context VA ranges
        if group_freed:
          with contextlib.suppress(NVError, OSError): self._release_memory(notifier)
        if group_freed and unreg: syscalls.munmap(ctx_va, CHANNEL_VA_BYTES)
      if kept:
        what = "the old channels' error notifiers and context VA ranges are" if not group_freed else "its context VA range is"
        faults += f"{'; '.join(kept)}: {what} kept (leaked) since the GPU may still use them; "
      if not group_freed:
        self.lost = ("the device did not come back: RM would not free its channel group, whose channels may still run "
                     f"the work queued after timeline value {done} and write its buffers; waits for that work fail rather "
                     "than pass, and the device takes no new work; reopen the process")
        return f"{faults}{self.lost}"
      for sig in [self.timeline_signal, *self._signals]: sig.complete_promised()
      self._open_channels(2 - self.chan_slot)
      if self.local_bytes: per, self.local_bytes = self.local_bytes, 0; self.ensure_local_memory(per)
    finally: self._recovering = False
    return (f"{faults}the device recovered: its channels were recreated, dropping the work queued after timeline value {done}; "
            "buffers that work would have written hold undefined data, the device is usable again")

  def _channel(self, i: int, engine_cls: int, name: str) -> GPFIFO:
    rm, off = self.rm, i * 0x80000
    ring_off, userd_off = off, off + GPFIFO_ENTRIES * 8
    ctypes.memset(self.gpfifo_mem.host + userd_off, 0, 512)   # GPGet/GPPut start at entry 0
    # RM writes RC errors (and the work-submit token) into this notifier; uncached sysmem so the CPU sees them
    notifier = self.gpu_alloc(NOTIFICATION_SIZE * NOTIFICATION_TYPE__SIZE_1, host=True, sysmem=True)
    # zero it: RM clears new sysmem only while NVreg_InitializeSystemMemoryAllocations=1 (OGKM@580.142
    # src/nvidia/arch/nvalloc/unix/src/os.c:1013-1021), and stale bytes here would read as a fault
    assert notifier.host is not None
    ctypes.memset(notifier.host, 0, NOTIFICATION_SIZE * NOTIFICATION_TYPE__SIZE_1)
    h = rm.alloc(self.hgroup, self.arch_info.gpfifo, "NV_CHANNEL_ALLOC_PARAMS", hObjectError=notifier.handle, hObjectBuffer=self.gpfifo_mem.handle,
                 gpFifoOffset=self.gpfifo_mem.va + ring_off, gpFifoEntries=GPFIFO_ENTRIES, hContextShare=self.hctx,
                 hUserdMemory=[self.gpfifo_mem.handle], userdOffset=[userd_off], engineType=0)[0]
    rm.alloc(h, engine_cls)
    self.chan_handles.append(h)
    # UVM maps and binds the channel's context buffers inside a VA range we reserve (after the engine object exists)
    ctx_va = self._reserve_va(CHANNEL_VA_BYTES, HUGE)
    self._chan_memory.append((notifier, ctx_va))   # given back when recover() replaces the channels
    rm.uvm(self.uvmfd, "UVM_REGISTER_CHANNEL", gpuUuid={"uuid": list(self.uuid)}, rmCtrlFd=self.ctl, hClient=rm.root, hChannel=h,
           base=ctx_va, length=CHANNEL_VA_BYTES)
    tok = rm.control(h, "NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN").workSubmitToken
    assert self.gpfifo_mem.host is not None
    return GPFIFO(self, self.gpfifo_mem.host + ring_off, self.gpfifo_mem.va + ring_off, self.gpfifo_mem.host + userd_off, tok,
                  f"{name} channel", notifier)

  # ---- memory ----
  def _reserve_va(self, size: int, align: int) -> int:
    """CPU address space for [va, va+size) below 2**40, held PROT_NONE until mapped."""
    while True:
      va = _round_up(self._va_next, align)
      if va + size > VA_END: raise MemoryError(f"{self.name}: GPU virtual address space below 2**40 is exhausted")
      try:
        got = syscalls.mmap(-1, size, syscalls.PROT_READ * 0, syscalls.MAP_PRIVATE | syscalls.MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, 0, va)
      except OSError as e:
        if e.errno != errno.EEXIST: raise
        self._va_next = va + align; continue
      if got != va:   # an old kernel ignoring MAP_FIXED_NOREPLACE placed it elsewhere
        syscalls.munmap(got, size); self._va_next = va + align; continue
      self._va_next = va + size
      return va

  def gpu_alloc(self, size: int, host: bool = False, sysmem: bool = False, nbytes: int | None = None) -> NVBuffer:
    """RM memory of `size` bytes (video memory unless `sysmem`), GPU-mapped at an address the CPU reserves too;
    `host` also maps it for the CPU at that address."""
    rm = self.rm
    huge = not sysmem and size >= HUGE
    align = HUGE if huge else PAGE
    size = _round_up(size, align)
    va = self._reserve_va(size, align)
    try:
      if sysmem:
        h, _ = rm.alloc(self.hdev, C["NV01_MEMORY_SYSTEM"], "NV_MEMORY_ALLOCATION_PARAMS", owner=rm.root, type=13, size=size, limit=size - 1,
                        attr=F.drf("NVOS32_ATTR_LOCATION", "PCI") | F.drf("NVOS32_ATTR_COHERENCY", "CACHED") | F.drf("NVOS32_ATTR_PHYSICALITY", "NONCONTIGUOUS"),
                        flags=F.VALUES["NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED"], attr2=F.drf("NVOS32_ATTR2_GPU_CACHEABLE", "NO"))   # see module doc
      else:
        h, _p = rm.alloc(self.hdev, C["NV01_MEMORY_LOCAL_USER"], "NV_MEMORY_ALLOCATION_PARAMS", owner=rm.root, size=size, limit=size - 1,
                        alignment=align, format=6,
                        attr=F.drf("NVOS32_ATTR_PHYSICALITY", "ALLOW_NONCONTIGUOUS") | F.drf("NVOS32_ATTR_PAGE_SIZE", "HUGE" if huge else "4KB"),
                        attr2=F.drf("NVOS32_ATTR2_GPU_CACHEABLE", "YES") | (F.drf("NVOS32_ATTR2_PAGE_SIZE_HUGE", "2MB") if huge else 0),
                        flags=F.VALUES["NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE"] | F.VALUES["NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED"] |
                              F.VALUES["NVOS32_ALLOC_FLAGS_PERSISTENT_VIDMEM"])
    except NVError as e:
      syscalls.munmap(va, size)
      raise NVError(f"{self.name}: allocating {size:#x} bytes of {'system' if sysmem else 'video'} memory failed: {e}", e.status) from None
    hostaddr = rm.map_to_cpu(self._dev_fd, self.hdev, h, size, va, system=sysmem) if host else None
    rm.uvm(self.uvmfd, "UVM_CREATE_EXTERNAL_RANGE", base=va, length=size)
    attrs = {"gpuUuid": {"uuid": list(self.uuid)}, "gpuMappingType": 1,   # READ_WRITE_ATOMIC
             "gpuCachingType": UVM_CACHING_FORCE_UNCACHED if sysmem else 0}
    rm.uvm(self.uvmfd, "UVM_MAP_EXTERNAL_ALLOCATION", base=va, length=size, rmCtrlFd=self.ctl, hClient=rm.root, hMemory=h,
           gpuAttributesCount=1, perGpuAttributes=[attrs])
    return NVBuffer(va, size if nbytes is None else nbytes, size, h, hostaddr, sysmem)

  def gpu_free(self, buf: NVBuffer, timeout_s: float | None = None) -> None:
    """Give `buf` back to RM/UVM once the GPU is idle (each wait up to `timeout_s`, default the device's)."""
    if buf.freed: raise RuntimeError(f"double free of {buf!r}")
    self.synchronize(timeout_s)   # the GPU may still use it
    self._release_memory(buf, timeout_s)

  def _release_memory(self, buf: NVBuffer, timeout_s: float | None = None) -> None:
    buf.freed = True
    for peer in self._mapped_by.pop(buf.handle, []):   # other GPUs' mappings of it go first (UVM holds a dup of the memory)
      if peer._peer_maps.pop((self.name, buf.handle), None) is not None:
        peer.synchronize(timeout_s)
        peer.rm.uvm(peer.uvmfd, "UVM_FREE", base=buf.va, length=buf.size)
    self.rm.uvm(self.uvmfd, "UVM_FREE", base=buf.va, length=buf.size)
    self.rm.free(self.hdev, buf.handle)
    syscalls.munmap(buf.va, buf.size)

  def windows(self) -> tuple[int, int]:
    """(shared, local) memory window bases the compute engine and constant bank 0 are given."""
    return (SHARED_WINDOW_SM90, LOCAL_WINDOW_SM90) if self.sm >= 90 else (SHARED_WINDOW, LOCAL_WINDOW)

  def _local_geometry(self) -> tuple[int, int]:
    """(TPCs, threads one TPC can hold): full-die (LITTER) unit counts, since the GPU picks a local-memory slice by
    TPC id and ids run over the whole die."""
    if not hasattr(self, "_tpc_geometry"):
      gr = self.abi.ffi.new("NV2080_CTRL_GR_INFO[4]")
      for i, k in enumerate(("LITTER_NUM_GPCS", "LITTER_NUM_TPC_PER_GPC", "LITTER_NUM_SM_PER_TPC", "MAX_WARPS_PER_SM")):
        gr[i].index = F.VALUES[f"NV2080_CTRL_GR_INFO_INDEX_{k}"]
      self.rm.control(self.hsub, "NV2080_CTRL_CMD_GR_GET_INFO", grInfoListSize=4, grInfoList=self.rm.ptr(gr))
      self._tpc_geometry = (gr[0].data * gr[1].data, gr[2].data * gr[3].data * 32)
    return self._tpc_geometry

  def ensure_local_memory(self, per_thread: int) -> None:
    """Shader local memory (stack/spills) for `per_thread` bytes (the QMD's HIGH size) in every thread the GPU can hold.

    The GPU gives each TPC a slice of SET_SHADER_LOCAL_MEMORY_NON_THROTTLED bytes (bytes per TPC, not the total) at
    base + TPC id * slice; the buffer holds one slice per TPC."""
    if per_thread <= self.local_bytes: return
    per_thread = _round_up(per_thread, 0x10)
    tpcs, threads_per_tpc = self._local_geometry()
    per_tpc = _round_up(_round_up(per_thread * 32, 0x200) * (threads_per_tpc // 32), 0x8000)   # warps in 512-byte units
    size = _round_up(per_tpc * tpcs, HUGE)
    self.synchronize()
    if self.local_mem is not None: self.gpu_free(self.local_mem)
    self.local_mem, self.local_bytes = self.gpu_alloc(size), per_thread
    q = NVComputeQueue()
    va = self.local_mem.va
    q.method(SUBC_COMPUTE, _CP["SET_SHADER_LOCAL_MEMORY_A"].offset, va >> 32, va & 0xFFFFFFFF)
    q.method(SUBC_COMPUTE, _CP["SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A"].offset, per_tpc >> 32, per_tpc & 0xFFFFFFFF, 0xFF)
    self.submit_timeline(q)

  def kernargs(self, n: int, align: int) -> tuple[int, int]: return self.kernargs_ring.alloc(n, align)
  def persistent(self, n: int, align: int) -> tuple[int, int]:
    """Memory outside the per-launch rings (prebuilt queues and their arguments): it stays until free_persistent.
    Blocks freed before are reused first (same size and alignment) once the GPU is past their last use; an open
    persistent_scope records the block."""
    if self._persistent_later: self._reap_persistent()
    if (free := self._persistent_free.get((n, align))): blk = free.pop()
    else:
      r = next((r for r in self._arena if _round_up(r.off, align) + n <= r.buf.size), None)
      if r is None: self._arena.append(r := _Ring(self.gpu_alloc(max(HUGE, _round_up(n, HUGE)), host=True), lambda: None))
      blk = r.alloc(n, align)
    self._note_persistent((n, align) + blk)   # (n, align, host, va): what free_persistent gives back
    return blk

  def free_persistent(self, blocks: list[tuple[int, int, int, int]], after: Sequence[tuple[Any, int]] = ()) -> None:
    """Give back persistent blocks once every (signal, value) of `after` is reached (a graph's end: the GPU read them
    until its last replay's graph signal, released last in that replay's pushbuffer, and the timeline value before it).
    Never waits and takes no lock: a graph's finalizer calls it on any thread (the mock GPU's own included). With
    nothing to wait for (a graph that was never submitted) they are free at once; else `_reap_persistent`, at the next
    persistent() or synchronize(), moves them to the free lists once the GPU is past."""
    if not after:
      for n, align, host, va in blocks: self._persistent_free.setdefault((n, align), []).append((host, va))
    else: self._persistent_later.append((list(blocks), tuple(after)))   # (deque.append: atomic, no lock)
  def _reap_persistent(self) -> None:
    """Blocks whose graph the GPU is past go to the free lists (bookkeeping only: no wait, no ioctl). Every condition of
    an entry is read before its blocks are listed; a graph signal freed since counts as reached (Signal.reached)."""
    for blocks in take_reached(self._persistent_later): self.free_persistent(blocks)

  def cmdq_write(self, q: list[int]) -> int:
    host, va = self.cmdq.alloc(len(q) * 4, 16)
    ctypes.memmove(host, struct.pack(f"<{len(q)}I", *q), len(q) * 4)
    return va

  def _drain_channels(self) -> None:
    deadline = time.perf_counter() + self.wait_timeout_s
    for ch in (self.compute_ch, self.copy_ch):
      while ch.pending():
        if time.perf_counter() > deadline: raise TimeoutError(f"{self.name}: {ch.name} did not drain its GPFIFO (GPGet {ch.gpget.value}, put {ch.put})")
        time.sleep(0.0001)

  # ---- other NV GPUs of this process: peer pushes, bounces, cross-device waits (hcq.py HCQDevice.transfer_to) ----
  # Each device keeps its own UVM VA space (fd); a peer's GPU is registered in it when first needed. UVM maps memory on
  # a GPU only where the owning GPU is registered in that VA space, system memory included (OGKM@595.45.04
  # kernel-open/nvidia-uvm/uvm_map_external.c:648-652), and peer access is a property of the VA space
  # (uvm_va_space.c:1994-2024). Our allocations have one VA in the whole process (_reserve_va), so a peer maps a
  # buffer at the address its owner uses, and a semaphore is waited on at the address its signal carries.
  peer_copies = True
  def query_peer(self, other: HCQDevice) -> str:
    """NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2 for this GPU and `other`: "ok: nvlink", "ok: pcie-bar1" or "ok: pcie" where
    peer reads and writes are supported, else "no-p2p: " and the READ/WRITE status name (e.g. IOH_TOPOLOGY_NOT_SUPPORTED).
    A BAR1 pair (RMPcieP2PType=BAR1) is reported as PCI too, with PCI_BAR1 set (OGKM@595.45.04
    src/nvidia/src/kernel/rmapi/client_resource.c:496-512), and needs UVM_ENABLE_PEER_ACCESS before 590 (enable_peer).
    A push only writes into the peer, but RM's WRITES alone (reads off, e.g. by the ForceP2P regkey: client_resource.c
    :499-502 sets each bit from its own status) is not enough: hcqrt maps the peer's memory through UVM, and UVM gives
    a pair peer access only with READS and WRITES both (OGKM@595.45.04 src/nvidia/src/kernel/rmapi/nv_gpu_ops.c
    :3026-3034 getSystemP2PCaps, "Bug 1768805"; OGKM@580.142 :3022-3030; a writes-only pair is UVM_LINK_TYPE_NONE), so
    such a pair bounces (audit p2p_nv row 8)."""
    assert isinstance(other, NVDevice)
    try: r = self.rm.control(self.rm.root, "NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2", gpuIds=[self.gpu_id, other.gpu_id], gpuCount=2)
    except NVError as e: return f"no-p2p: {e.status_name}"
    V, caps = F.VALUES, r.p2pCaps
    def has(bit: str) -> bool: return F.field_get(f"NV0000_CTRL_SYSTEM_GET_P2P_CAPS_{bit}_SUPPORTED", caps) == 1
    st = [r.p2pCapsStatus[V[f"NV0000_CTRL_P2P_CAPS_INDEX_{k}"]] for k in ("READ", "WRITE")]
    if has("READS") and has("WRITES") and st == [V["NV0000_P2P_CAPS_STATUS_OK"]] * 2:
      if has("NVLINK"): return "ok: nvlink"
      if has("PCI_BAR1"): return "ok: pcie-bar1"
      if has("PCI"): return "ok: pcie"
    bad = next((v for v in st if v != V["NV0000_P2P_CAPS_STATUS_OK"]), V["NV0000_P2P_CAPS_STATUS_NOT_SUPPORTED"])
    name = next((k[len("NV0000_P2P_CAPS_STATUS_"):] for k, v in V.items() if k.startswith("NV0000_P2P_CAPS_STATUS_") and v == bad), f"status {bad}")
    return f"no-p2p: {name}"

  def _register_peer_gpu(self, other: NVDevice) -> None:
    """`other`'s GPU registered in this device's UVM VA space, once (an NVLink pair is enabled by this registration:
    uvm_va_space.c:98-118 register_gpu_peers)."""
    if other.uuid in self._peer_gpus: return
    self.rm.uvm(self.uvmfd, "UVM_REGISTER_GPU", gpu_uuid={"uuid": list(other.uuid)}, rmCtrlFd=-1)
    self._peer_gpus.add(other.uuid)

  def enable_peer(self, other: HCQDevice) -> None:
    """Peer access to `other` in this VA space. An NVLink pair is enabled by registration (uvm_va_space.c:108-111).
    Every PCI pair calls UVM_ENABLE_PEER_ACCESS: UVM before 590 has no BAR1 peer type and reports a BAR1 pair as
    UVM_LINK_TYPE_PCIE (OGKM@580.142 nv_gpu_ops.c:3259), which "need[s] to be explicitly enabled" (580.142
    uvm_gpu.c:2606). From 590 UVM enables a BAR1 pair at registration and refuses ENABLE for it with
    NV_ERR_INVALID_DEVICE (595.45.04 uvm_gpu.c:3143-3146: link type != UVM_GPU_LINK_PCIE), which on a BAR1 pair we
    registered just now can only mean "already enabled" (so no driver-version guess is needed)."""
    assert isinstance(other, NVDevice)
    self._register_peer_gpu(other)
    if (st := self.peer_status(other)) not in ("ok: pcie", "ok: pcie-bar1"): return
    try: self.rm.uvm(self.uvmfd, "UVM_ENABLE_PEER_ACCESS", gpuUuidA={"uuid": list(self.uuid)}, gpuUuidB={"uuid": list(other.uuid)})
    except NVError as e:
      if not (st == "ok: pcie-bar1" and e.status_name == "NV_ERR_INVALID_DEVICE"): raise

  def map_peer(self, other: HCQDevice, buf: Any) -> int:
    """`other`'s buffer mapped on this GPU (once per allocation) at its own address: an external range in this VA space
    and UVM_MAP_EXTERNAL_ALLOCATION of the owner's memory handle, through the owner's RM client (UVM dups it)."""
    assert isinstance(other, NVDevice) and isinstance(buf, NVBuffer)
    if buf.freed: raise RuntimeError(f"{self.name}: mapping {buf!r} of {other.name}, which was freed")
    if (other.name, buf.handle) in self._peer_maps: return buf.va
    self._register_peer_gpu(other)
    self.rm.uvm(self.uvmfd, "UVM_CREATE_EXTERNAL_RANGE", base=buf.va, length=buf.size)
    attrs = {"gpuUuid": {"uuid": list(self.uuid)}, "gpuMappingType": 1, "gpuCachingType": UVM_CACHING_FORCE_UNCACHED if buf.sysmem else 0}
    try:
      self.rm.uvm(self.uvmfd, "UVM_MAP_EXTERNAL_ALLOCATION", base=buf.va, length=buf.size, rmCtrlFd=other.ctl, hClient=other.rm.root,
                  hMemory=buf.handle, gpuAttributesCount=1, perGpuAttributes=[attrs])
    except NVError as e:
      with contextlib.suppress(NVError): self.rm.uvm(self.uvmfd, "UVM_FREE", base=buf.va, length=buf.size)
      raise NVError(f"{self.name}: mapping {other.name}'s {'system' if buf.sysmem else 'video'} memory at {buf.va:#x} "
                    f"({self.peer_status(other)}): {e}", e.status) from None
    self._peer_maps[(other.name, buf.handle)] = buf
    other._mapped_by.setdefault(buf.handle, []).append(self)
    return buf.va

  def map_peer_signals(self, other: HCQDevice) -> None:
    """`other`'s signal page (system memory, GPU-uncached) mapped here: this GPU's queues then wait on its semaphores."""
    assert isinstance(other, NVDevice)
    self.map_peer(other, other.sigbuf)

  def bounce_buffers(self) -> list[Any]:
    """Two BOUNCE_CHUNK slots of GPU-uncached system memory (a peer maps them whatever the link: they are not video memory)."""
    if not self._bounce: self._bounce = [self.gpu_alloc(self.BOUNCE_CHUNK, sysmem=True) for _ in range(2)]
    return self._bounce

  # ---- HCQ device interface ----
  def channel_for(self, q: NVQueue) -> GPFIFO: return self.copy_ch if isinstance(q, NVCopyQueue) else self.compute_ch
  def hw_compute_queue(self) -> NVComputeQueue: return NVComputeQueue()
  def hw_copy_queue(self) -> NVCopyQueue: return NVCopyQueue()
  def program(self, name: str, cubin: bytes) -> NVProgram: return NVProgram(self, name, cubin)

  @property
  def target(self) -> dict:
    """What the compiler needs to know about this GPU (the fields of compiler/target.py Target). Buffers are page
    aligned, but 16 bytes (one v4 access) is all the PTX renderer needs to prove its widest vector access."""
    return {"device": self.name, "renderer": self.renderer, "arch": self.arch, "buffer_alignment": 16,
            "shared_memory": 48 << 10, "warp_size": 32, "gpu": True}
  def channel_errors(self) -> list[str]:
    """RC errors RM reported in the channels' error notifiers (a channel that faulted stops; its signals never come)."""
    return [e for ch in (self.compute_ch, self.copy_ch) if (e := ch.error()) is not None]

  def raise_if_faulted(self) -> None:
    """If RM reported a fault in an error notifier, recover and raise NVError naming it (Signal.wait polls this); on a
    lost device every wait ends here: what it waits for was promised by channels that may never run it."""
    if self.lost: raise NVError(f"{self.name}: {self.lost}")
    if not self._recovering and self.channel_errors(): raise NVError(f"{self.name}: {self.recover()}")

  def synchronize(self, timeout_s: float | None = None) -> None:
    """Wait for all submitted work; a faulted channel is reported by name (from its error notifier) instead of a timeout.
    Also a safe point for the allocator (NVAllocator.reap): freed buffers go into its cache, and what the cache let go
    back to RM/UVM (that waits for the GPU, each wait up to `timeout_s` too: a caller of synchronize may wait, a free
    may not); and for freed graphs' memory the GPU is past (_reap_persistent)."""
    if self.lost: raise NVError(f"{self.name}: {self.lost}")
    timeout_s = self.wait_timeout_s if timeout_s is None else timeout_s
    self.allocator.reap(timeout_s=timeout_s)
    if self.timeline_signal.value < self.timeline_value - 1:
      if self.channel_errors(): raise NVError(f"{self.name}: {self.recover()}")   # names the fault, then starts over
      try: self.timeline_signal.wait(self.timeline_value - 1, timeout_s)
      except TimeoutError as e:
        if self.channel_errors(): raise NVError(f"{self.name}: {self.recover()}") from e
        raise
    if self._persistent_later:   # (a dropped graph's last release follows the timeline's: its memory comes back now)
      self.wait_own_frees(self._persistent_later, timeout_s)
      self._reap_persistent()

  def properties(self) -> dict[str, Any]:
    return {"name": self.name, "product": self.product_name, "arch": self.arch, "family": self.arch_info.name, "driver": self.driver_version, "gpfifo": class_name(self.arch_info.gpfifo),
            "compute": class_name(self.arch_info.compute), "copy": class_name(self.arch_info.copy), "qmd": self.qmd_version,
            "sm_count": self.sm_count, "memory_bytes": self.memory_bytes, "uuid": self.uuid.hex()}

  def __repr__(self) -> str: return f"<NVDevice {self.name} {self.arch} {class_name(self.arch_info.compute)}>"
