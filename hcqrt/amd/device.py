"""The AMD backend: /dev/kfd ioctls, a PM4 compute queue (an AQL queue on multi-XCC GPUs, or with AMD_AQL=1: see
aql_queue.py) and an SDMA copy queue, with no ROCm userspace.

Bring-up (all through hcqrt.syscalls): open /dev/kfd, GET_VERSION picks the ioctl layouts; the sysfs topology
names the GPU node (gpu_id, gfx_target_version -> target, CUs, LDS, wave size, EOP/CWSR sizes, render minor);
open the render node and ACQUIRE_VM with it; RUNTIME_ENABLE (KFD >= 1.13). Memory: a VA range reserved
PROT_NONE in this process, BOs allocated at addresses in it (ALLOC_MEMORY_OF_GPU), mapped to the GPU
(MAP_MEMORY_TO_GPU, n_success checked) and, when the host needs them, mmapped through the render node at the
same address. Signals, rings and read/write pointers live in uncached GTT so the CPU and GPU agree without
flushes. A signal from the compute queue is RELEASE_MEM with the GL2 write-back (the kernel's stores must
reach memory before the host sees the value), then a second RELEASE_MEM that writes the event slot and raises
the interrupt (INT_SEL 2) that wakes WAIT_EVENTS; so `synchronize` sleeps in the kernel instead of spinning.
Queues run asynchronously to the host: memory goes back to KFD only once the timeline has passed its last use.
Kernels with a private segment (spills, stack arrays) get scratch, sized and programmed as ROCr does (scratch.py).
Errors wake the wait too: a VM fault through KFD's memory event, a queue exception (bad packet, wave trap) through
the error event and payload word that each compute queue's CWSR header names (host-mapped GTT, read by the kernel).

  >>> from hcqrt.mock.amd import install_mock_amd
  >>> drv = install_mock_amd()
  >>> dev = AMDDevice("AMD"); dev.gfx.name, dev.wave_size
  ('gfx1100', 32)
"""
from __future__ import annotations
import collections, contextlib, ctypes, errno, os, struct, threading, time, weakref
from dataclasses import dataclass
from typing import Any
from collections.abc import Sequence
from hcqrt import syscalls
from hcqrt.hcq import HWQueue, HCQDevice, HCQProgram, KernArgs, Signal, SignalPool, take_reached
from hcqrt.amd.targets import Target, target_for
from hcqrt.amd import codeobject
from hcqrt.amd.cwsr import fill_cwsr_headers, queue_sizes
from hcqrt.amd.va import VARange
from hcqrt.amd.aql_queue import AQLQueue, use_aql
from hcqrt.amd import scratch as SCR
from hcqrt.alloc_cache import CachingAllocator
from hcqrt.settings import env_int
from ioctl_defs.amd import kfd as K, pm4, sdma, regs, kd as KD, aql

RW = os.O_RDWR | os.O_CLOEXEC
PAGE = 0x1000
TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology/nodes"
MAP_NORESERVE = 0x4000
RING_BYTES = 1 << 16
EVENT_SLOT_BYTES = K.EVENT_PAGE_SIZE

class AMDError(RuntimeError):
  """A KFD ioctl failed; the message names the ioctl, the errno and the kernel's reason where the driver gave one."""
  def __init__(self, msg: str, errno_: int = 0):
    super().__init__(msg); self.errno = errno_

def _round_up(x: int, a: int) -> int: return (x + a - 1) // a * a

def read_topology() -> list[tuple[int, dict[str, int]]]:
  """(gpu_id, properties) of every GPU node of the KFD topology in node order (CPU nodes, gpu_id 0, are skipped).
  Node directories are numbers: sorted as such (node 10 after node 9, as MI300X boxes have). A node whose GPU
  the device cgroup denies answers EPERM (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_topology.c:435-452):
  skipped, as the thunk and tinygrad skip it."""
  out = []
  for n in sorted(syscalls.listdir(TOPOLOGY), key=lambda n: (not n.isdigit(), int(n) if n.isdigit() else 0, n)):
    try:
      gid = int(syscalls.read_text(f"{TOPOLOGY}/{n}/gpu_id").strip() or 0)
      if gid == 0: continue
      text = syscalls.read_text(f"{TOPOLOGY}/{n}/properties")
    except PermissionError: continue
    out.append((gid, {k: int(v) for k, v in (l.split() for l in text.splitlines() if l.strip())}))
  return out

# CRAT io link types (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_crat.h:243-259)
IOLINK_TYPES = {2: "pcie", 11: "xgmi"}

def read_links() -> dict[tuple[int, int], dict[str, int]]:
  """(from gpu_id, to gpu_id) -> the link's properties, for every direct GPU-to-GPU link of the KFD topology: the XGMI
  io_links of a hive (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_crat.c:2202-2246, kfd_fill_gpu_xgmi_link_to_gpu)
  and the PCIe p2p_links, which amdkfd lists X->Y only where X may reach Y's VRAM through Y's BAR
  (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_topology.c:1495-1619, kfd_add_peer_prop /
  amdgpu_device_is_peer_accessible). A link X->Y is what lets X's engines map Y's VRAM
  (MAP_MEMORY_TO_GPU, kfd_mem_attach: EINVAL otherwise). Nodes the device cgroup denies (EPERM) are skipped, and so
  are missing link directories (a node without links).

    >>> from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd
    >>> drv = install_mock_amd(gpus=2, p2p="pcie"); links = read_links(); uninstall_mock_amd(drv)
    >>> [(hex(a), hex(b), IOLINK_TYPES[p["type"]], p["weight"]) for (a, b), p in sorted(links.items())]
    [('0x2f4b', '0x2f4c', 'pcie', 40), ('0x2f4c', '0x2f4b', 'pcie', 40)]
  """
  gid: dict[int, int] = {}
  for n in syscalls.listdir(TOPOLOGY):
    if not n.isdigit(): continue
    with contextlib.suppress(PermissionError, FileNotFoundError): gid[int(n)] = int(syscalls.read_text(f"{TOPOLOGY}/{n}/gpu_id").strip() or 0)
  out: dict[tuple[int, int], dict[str, int]] = {}
  for n in sorted(gid):
    for d in ("io_links", "p2p_links"):
      try: names = syscalls.listdir(f"{TOPOLOGY}/{n}/{d}")
      except (FileNotFoundError, NotADirectoryError): continue
      for k in names:
        try: text = syscalls.read_text(f"{TOPOLOGY}/{n}/{d}/{k}/properties")
        except (PermissionError, FileNotFoundError): continue
        p = {a: int(v) for a, v in (l.split() for l in text.splitlines() if l.strip())}
        a, b = gid.get(p.get("node_from", -1), 0), gid.get(p.get("node_to", -1), 0)
        if a and b: out.setdefault((a, b), p)
  return out

GPU_CLOCK_NS = 10   # RELEASE_MEM's GPU clock counter (DATA_SEL 3) ticks at 100 MHz

class AMDSignal(Signal):
  """A Signal whose `timestamp` (written by the CP as GPU clock ticks) reads in ns like every HCQ signal's."""
  @property
  def timestamp(self) -> int: return self._words[3] * GPU_CLOCK_NS

class AMDSignalPool(SignalPool):
  signal_cls = AMDSignal

class AMDBuffer:
  """GPU memory: `va` for the GPU, `host` (the same address) when the CPU maps it too."""
  def __init__(self, va: int, size: int, nbytes: int, handle: int, host: int | None, kind: str):
    self.va, self.size, self.nbytes, self.handle, self.host, self.kind = va, size, nbytes, handle, host, kind
    self.freed = False
  def view(self) -> memoryview:
    assert self.host is not None, "buffer is not host-mapped"
    return memoryview((ctypes.c_char * self.nbytes).from_address(self.host)).cast("B")
  def __repr__(self) -> str: return f"<AMDBuffer {self.kind} {self.nbytes} bytes at {self.va:#x}>"

@dataclass
class _KFDProcess:
  """What the kernel keeps per KFD process (one per mm; every /dev/kfd fd of the process reaches it) until the process
  exits, whatever happens to the devices that set it up: the runtime enabled, the one event page. Kept here for the
  life of the process, as the thunk keeps its one fd and open count; a forked child is another process
  (libhsakmt/src/openclose.c: a child after fork must open KFD anew)."""
  pid: int
  kfd: int                               # the fd of the first device of the process: identifies the KFD process
  runtime_enabled: bool = False
  event_page: AMDBuffer | None = None    # registered with the first signal event (kfd_kmap_event_page)

_kfd_processes: list[_KFDProcess] = []
# held while a device looks up, enables or registers the process-wide state: two threads opening AMD:0 and AMD:1 at once
# must not both send RUNTIME_ENABLE (EBUSY) or both register an event page (the kernel's second "Event page is already
# set", linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_events.c:366-369)
_kfd_lock = threading.Lock()

def _kfd_process(kfd: int) -> _KFDProcess:
  """The KFD process `kfd` reaches (the same kernel object as an earlier device's fd, in this very process)."""
  pid = os.getpid()
  for p in _kfd_processes:
    if p.pid == pid and syscalls.same_file(p.kfd, kfd): return p
  _kfd_processes.append(p := _KFDProcess(pid, kfd))
  return p

class AMDDevice(HCQDevice):
  """An AMD GPU driven through KFD. The device contract (hcqrt/interface.py Device) and the timeline, signals and graphs
  come from HCQDevice; this class is the driver: KFD bring-up, memory, PM4/AQL and SDMA queues, events, recovery."""
  renderer = "llvm"   # compiler/render_llvm.py + compiler/assemble/llvm.py (AMD_TARGETS in compiler/target.py)
  frees_after_gpu = True   # free_persistent defers until the GPU is past the graph (hcq._release_graph must not wait)

  def __init__(self, name: str = "AMD"):
    self.name = name
    self.index = int(name.split(":")[1]) if ":" in name else 0
    self._open()
    self._setup_memory()
    self.allocator = AMDAllocator(self)
    self._setup_queues()

  # ---- bring-up ----
  def _open(self) -> None:
    try: self.kfd = syscalls.open("/dev/kfd", RW)
    except FileNotFoundError: raise RuntimeError("AMD: /dev/kfd does not exist (no amdgpu driver with KFD loaded)") from None
    except PermissionError: raise RuntimeError("AMD: permission denied opening /dev/kfd (add yourself to the render group)") from None
    v = K.abi_for_version(1, 11).new("AMDKFD_IOC_GET_VERSION")
    self._raw_ioctl(K.abi_for_version(1, 11), "AMDKFD_IOC_GET_VERSION", v)
    self.kfd_version = (v.major_version, v.minor_version)
    with _kfd_lock: self.process = _kfd_process(self.kfd)
    self.abi = K.abi_for_version(*self.kfd_version)
    nodes = read_topology()
    if self.index >= len(nodes): raise RuntimeError(f"{self.name}: the KFD topology lists {len(nodes)} GPU node(s)")
    self.gpu_id, self.props = nodes[self.index]
    self.gpu_count = len(nodes)
    # the GPU-to-GPU links, read once: what each pair may map of the other (query_peer)
    self.links = read_links() if self.gpu_count > 1 else {}
    self.gfx: Target = target_for(self.props["gfx_target_version"])
    self.arch = self.gfx.name
    self.wave_size = self.props.get("wave_front_size", 64)
    self.cu_count = self.props["simd_count"] // max(1, self.props.get("simd_per_cu", 2))
    self.lds_bytes = self.props.get("lds_size_in_kb", 64) << 10
    self.drm = syscalls.open_render_node(self.props["drm_render_minor"])
    self.ioctl("AMDKFD_IOC_ACQUIRE_VM", drm_fd=self.drm, gpu_id=self.gpu_id)
    # RUNTIME_ENABLE exists from KFD 1.13 ("Add debugger API", linux@v6.12.117:include/uapi/linux/kfd_ioctl.h:41)
    if self.abi.has("AMDKFD_IOC_RUNTIME_ENABLE") and self.kfd_version >= (1, 13):
      # the runtime is per KFD process (one per mm, shared by every /dev/kfd fd): the first GPU of the process enables
      # it, and it stays enabled (EBUSY: linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c:2789-2790; EEXIST once a queue exists, :2792-2796)
      with _kfd_lock:
        if not self.process.runtime_enabled:
          self.ioctl("AMDKFD_IOC_RUNTIME_ENABLE", r_debug=0, mode_mask=K.RUNTIME_ENABLE_MODE_ENABLE_MASK)
          self.process.runtime_enabled = True

  def _raw_ioctl(self, abi: K.KFDABI, name: str, arg: Any) -> Any:
    try: syscalls.ioctl(self.kfd, abi.request(name), arg)
    except OSError as e:
      raise AMDError(f"{self.name}: {name} failed with {errno.errorcode.get(e.errno or 0, e.errno)} ({e.errno}): {e.strerror}", e.errno or 0) from None
    return arg

  def ioctl(self, name: str, **fields: Any) -> Any:
    """Issue one KFD ioctl with its argument struct's fields; returns the struct (raises AMDError naming ioctl and errno)."""
    return self._raw_ioctl(self.abi, name, self.abi.new(name, **fields))

  # ---- memory ----
  def _setup_memory(self) -> None:
    # the GPUVM aperture this process may allocate in (our VA reservation must lie inside it)
    n = self.ioctl("AMDKFD_IOC_GET_PROCESS_APERTURES_NEW", num_of_nodes=0).num_of_nodes
    aps = self.abi.ffi.new("struct kfd_process_device_apertures[]", max(n, 1))
    self.ioctl("AMDKFD_IOC_GET_PROCESS_APERTURES_NEW", kfd_process_device_apertures_ptr=int(self.abi.ffi.cast("uintptr_t", aps)), num_of_nodes=n)
    ap = next((aps[i] for i in range(n) if aps[i].gpu_id == self.gpu_id), None)
    if ap is None: raise AMDError(f"{self.name}: AMDKFD_IOC_GET_PROCESS_APERTURES_NEW lists no aperture for gpu_id {self.gpu_id:#x}")
    self.gpuvm = (ap.gpuvm_base, ap.gpuvm_limit)
    # one PROT_NONE, NORESERVE range (costs nothing) as large as everything this GPU can allocate: its VRAM and GTT
    # (system memory), handed out by a coalescing allocator
    vram = self.ioctl("AMDKFD_IOC_AVAILABLE_MEMORY", gpu_id=self.gpu_id).available if self.abi.has("AMDKFD_IOC_AVAILABLE_MEMORY") else 64 << 30
    self.va_size = _round_up(vram + os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") + (4 << 30), 2 << 20)
    self.va_base = syscalls.mmap(-1, self.va_size, 0, syscalls.MAP_PRIVATE | syscalls.MAP_ANONYMOUS | MAP_NORESERVE, 0)
    if not (self.gpuvm[0] <= self.va_base and self.va_base + self.va_size - 1 <= self.gpuvm[1]):
      raise AMDError(f"{self.name}: reserved VA {self.va_base:#x}+{self.va_size:#x} lies outside the GPUVM aperture {self.gpuvm[0]:#x}..{self.gpuvm[1]:#x}")
    self.va = VARange(self.va_base, self.va_size)
    # finalizers run on whatever thread drops the last reference (the mock GPU's engine thread, which holds the mock
    # KFD's lock, included) and may fire inside our own code through cyclic GC: they only append to `_freed_later`
    # (deque.append is atomic) and never take a lock or call an ioctl. The threads that allocate, free and synchronize
    # drain it in _reap under one plain lock over the VA free list, `_deferred` and gpu_free's check-then-free
    self._mem_lock = threading.Lock()
    self.buffers: dict[int, AMDBuffer] = {}
    self._freed_later: collections.deque[tuple[int, AMDBuffer]] = collections.deque()   # (timeline value, buffer)
    self._deferred: list[tuple[int, AMDBuffer]] = []   # (timeline value, buffer) to free once the GPU has passed it
    self._persistent_later: collections.deque[tuple[list, tuple]] = collections.deque()   # (blocks, ((signal, value), ...))
    self._peer_maps: dict[int, set[int]] = {}   # handle of a BO of this GPU -> the other GPUs it is mapped on (map_peer)

  def _take_va(self, size: int) -> int:
    try:
      with self._mem_lock: return self.va.take(size, 0x200000 if size >= 0x200000 else 0x10000 if size >= 0x10000 else PAGE)
    except MemoryError as e: raise MemoryError(f"{self.name}: {e}") from None

  def gpu_alloc(self, nbytes: int, kind: str = "vram", host: bool = False, executable: bool = False) -> AMDBuffer:
    """Allocate `nbytes`: kind "vram", "gtt" or "uncached" (GTT the GPU does not cache: signals, rings); `host` maps it here."""
    self._reap()
    size = _round_up(max(nbytes, 1), PAGE)
    fl = K.ALLOC_MEM_FLAGS_WRITABLE | K.ALLOC_MEM_FLAGS_NO_SUBSTITUTE | (K.ALLOC_MEM_FLAGS_EXECUTABLE if executable else 0)
    if kind == "vram": fl |= K.ALLOC_MEM_FLAGS_VRAM | (K.ALLOC_MEM_FLAGS_PUBLIC if host else 0)
    elif kind == "gtt": fl |= K.ALLOC_MEM_FLAGS_GTT
    elif kind == "uncached": fl |= K.ALLOC_MEM_FLAGS_GTT | K.ALLOC_MEM_FLAGS_UNCACHED | K.ALLOC_MEM_FLAGS_COHERENT
    else: raise ValueError(f"memory kind {kind!r} (vram, gtt or uncached)")
    va = self._take_va(size)
    try: a = self.ioctl("AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", va_addr=va, size=size, gpu_id=self.gpu_id, flags=fl)
    except AMDError as e:
      with self._mem_lock: self.va.give(va, size)
      if e.errno == errno.EINVAL and fl & K.ALLOC_MEM_FLAGS_PUBLIC:   # kfd_chardev.c:1112-1118: small BAR
        raise AMDError(f"{e}; host-visible VRAM needs the whole VRAM behind the PCI BAR: enable Resizable BAR (and Above 4G "
                       "Decoding) in the firmware setup", e.errno) from None
      raise
    buf, mapped = AMDBuffer(va, size, nbytes, a.handle, None, kind), False
    try:
      self._map(buf); mapped = True
      if host: buf.host = syscalls.mmap(self.drm, size, syscalls.PROT_READ | syscalls.PROT_WRITE, syscalls.MAP_SHARED | syscalls.MAP_FIXED, a.mmap_offset, va)
    except BaseException:
      # a mapped BO cannot be freed (EBUSY, kfd_chardev.c free path): unmap first, so the first error is the one raised
      with contextlib.suppress(AMDError):
        if mapped: self._map(buf, unmap=True)
        self.ioctl("AMDKFD_IOC_FREE_MEMORY_OF_GPU", handle=a.handle)
      with self._mem_lock: self.va.give(va, size)
      raise
    self.buffers[va] = buf
    return buf

  def _map(self, buf: AMDBuffer, unmap: bool = False, gpu_ids: Sequence[int] | None = None) -> None:
    """MAP (or UNMAP) `buf` on this GPU, or on the GPUs `gpu_ids` (one call; n_success must count them all)."""
    gl = list(gpu_ids) if gpu_ids is not None else [self.gpu_id]
    ids = self.abi.ffi.new(f"uint32_t[{len(gl)}]", gl)
    name = "AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU" if unmap else "AMDKFD_IOC_MAP_MEMORY_TO_GPU"
    r = self.ioctl(name, handle=buf.handle, device_ids_array_ptr=int(self.abi.ffi.cast("uintptr_t", ids)), n_devices=len(gl))
    if r.n_success != len(gl): raise AMDError(f"{self.name}: {name} succeeded on {r.n_success} of {len(gl)} GPUs")

  def gpu_free(self, buf: AMDBuffer) -> None:
    with self._mem_lock: self._gpu_free(buf)
  def _gpu_free(self, buf: AMDBuffer) -> None:
    if buf.freed: return
    # FREE needs every mapping gone, the peers' too (EBUSY otherwise): one UNMAP lists them all
    self._map(buf, unmap=True, gpu_ids=[self.gpu_id, *sorted(self._peer_maps.pop(buf.handle, ()))])
    self.ioctl("AMDKFD_IOC_FREE_MEMORY_OF_GPU", handle=buf.handle)
    buf.freed = True   # the BO is gone from the KFD: a second free must not UNMAP/FREE its handle again
    self.buffers.pop(buf.va, None)
    # give the range back to the reservation in one call: MAP_FIXED replaces the BO's mapping (mmap(2): the overlap is
    # unmapped within the call, linux@v6.12.117:mm/mmap.c:1389-1397, 1437, 1551-1552). A munmap first would leave a hole that
    # any other thread's mmap may take, and the re-reservation would then map over that thread's memory
    if buf.host is not None:
      try: syscalls.mmap(-1, buf.size, 0, syscalls.MAP_PRIVATE | syscalls.MAP_ANONYMOUS | MAP_NORESERVE | syscalls.MAP_FIXED, 0, buf.va)
      except OSError as e:
        # ENOMEM: more mappings than vm.max_map_count before anything moved (the BO's mapping stays, mm/mmap.c:325-326),
        # or a late allocation failure after the old VMAs were closed (a hole, mm/mmap.c:1593-1594 -> mm/vma.h:263-271).
        # Either way the range is not a reservation: it never goes back to the allocator, so no BO is MAP_FIXED over it
        raise AMDError(f"{self.name}: gpu_free of the host-mapped buffer at {buf.va:#x} ({buf.size:#x} bytes) could not "
                       f"re-reserve its range, which stays out of use: {e}", e.errno or 0) from e
    self.va.give(buf.va, buf.size)

  # ---- queues ----
  def _setup_queues(self) -> None:
    self.signal_mem = sig = self.gpu_alloc(0x10000, "uncached", host=True)   # (mapped into peers: map_peer_signals)
    assert sig.host is not None
    self._init_signals(AMDSignalPool(self, sig.host, sig.va, sig.size))
    # dGPU signal events: the event page is ours (uncached so the kernel reads what the CP wrote). The first signal
    # event registers it; its id is never 0, which the kernel reserves when the process opens /dev/kfd
    # (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_events.c:245-262), so gfx942's drop of end-of-pipe interrupts
    # with context id 0 (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_int_process_v9.c:331-336) never hits it
    # The page is the process's (kfd_kmap_event_page: a second one is EINVAL, "Event page is already set",
    # linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_events.c:366-369): a second GPU of the process maps the first one's page
    # (a GTT BO maps on every GPU of the process) and creates its events in it
    with _kfd_lock:   # (the page is published only once the kernel has it: another device's thread maps it then)
      if (page := self.process.event_page) is not None:
        self.event_page = page
        self._map(self.event_page)
        ev = self.ioctl("AMDKFD_IOC_CREATE_EVENT", event_type=K.EVENT_SIGNAL, auto_reset=1)
      else:
        self.event_page = self.gpu_alloc(EVENT_SLOT_BYTES, "uncached", host=True)
        ev = self.ioctl("AMDKFD_IOC_CREATE_EVENT", event_page_offset=self.event_page.handle, event_type=K.EVENT_SIGNAL, auto_reset=1)
        self.process.event_page = self.event_page
    self.event_id, self.event_slot = ev.event_id, self.event_page.va + 8 * ev.event_slot_index
    # a GPU VM fault stops the queue and fires memory events: waits watch one so a fault is an error, not a timeout
    self.fault_event = self.ioctl("AMDKFD_IOC_CREATE_EVENT", event_type=K.EVENT_MEMORY, auto_reset=1).event_id
    # a queue exception (bad packet, wave trap) with the runtime enabled: the kernel ORs KFD_EC_MASK(code) into the
    # word the queue's CWSR header names and sets the header's event (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/
    # kfd_process.c:2225-2236); waits watch that event too, so the error wakes the host at once
    err = self.ioctl("AMDKFD_IOC_CREATE_EVENT", event_type=K.EVENT_SIGNAL, auto_reset=1)
    self.error_event, self.error_slot = err.event_id, self.event_page.va + 8 * err.event_slot_index
    self.error_payload = self.gpu_alloc(PAGE, "uncached", host=True)
    self._wait_data = self.abi.ffi.new("struct kfd_event_data[3]")
    self.kernargs = _Ring(self.gpu_alloc(16 << 20, "gtt", host=True), self.synchronize)
    self.scratch: AMDBuffer | None = None   # the private-segment memory of every kernel (ensure_scratch)
    self.scratch_plan: SCR.ScratchPlan | None = None
    self.scratch_use: ScratchUse | None = None   # held by every PM4 launch record naming self.scratch (ensure_scratch)
    # multi-XCC nodes (gfx942) launch through an AQL queue, whose dispatches the CP spreads over every XCC (aql_queue.py)
    self.aql = use_aql(self.props)
    self.compute = self._compute_queue()
    self.sdma = KFDQueue(self, K.QUEUE_TYPE_SDMA, "sdma")
  def _compute_queue(self) -> KFDQueue | AQLQueue:
    if not self.aql: return KFDQueue(self, K.QUEUE_TYPE_COMPUTE, "compute")
    q = AQLQueue(self, "compute")
    if self.scratch is not None and self.scratch_plan is not None: q.set_scratch(self.scratch.va, self.scratch_plan)   # (a recovered queue)
    return q

  # ---- scratch ----
  def ensure_scratch(self, private_bytes: int) -> SCR.ScratchPlan:
    """Scratch for kernels of `private_bytes` per work-item (hcqrt/amd/scratch.py), grown when a bigger kernel comes.
    The device is drained first: an AQL queue's CP reads amd_queue_t's scratch fields at each dispatch (ROCr, too,
    changes them only with the queue stopped). The smaller buffer is freed once nothing refers to it: a recorded PM4
    stream (a graph) names it in its COMPUTE_DISPATCH_SCRATCH_BASE, so each PM4 launch record holds its ScratchUse and
    the buffer goes (after the GPU, free_after_gpu) when the last such record does; AQL packets name no scratch."""
    if self.scratch_plan is not None and self.scratch_plan.lane_bytes >= private_bytes: return self.scratch_plan
    p = SCR.plan(self.props, self.arch, self.wave_size, private_bytes)
    buf = self.gpu_alloc(p.size, "vram")
    self.synchronize()
    self.scratch, self.scratch_plan, self.scratch_use = buf, p, ScratchUse()
    # (a weak reference: the finalizer must not keep the device alive; once the device is gone its memory is too)
    weakref.finalize(self.scratch_use, _free_scratch, weakref.ref(self), buf).atexit = False
    if isinstance(self.compute, AQLQueue): self.compute.set_scratch(buf.va, p)
    return p

  # ---- memory outside the rings: prebuilt graph streams and their arguments ----
  def persistent(self, n: int, align: int) -> tuple[int, int]:
    """(host, va) of a block that stays until free_persistent (an open persistent_scope records it)."""
    buf = self.gpu_alloc(max(n, align), "uncached", host=True)
    self._note_persistent(buf)
    assert buf.host is not None
    return buf.host, buf.va
  def free_persistent(self, blocks: list, after: Sequence[tuple[Any, int]] = ()) -> None:
    """Free a graph's blocks once every (signal, value) of `after` is reached (its last replay's graph signal and
    timeline value, released from the ring after its IBs: AMDComputeQueue.bind); with none, once the timeline is past
    every submission so far. Only appends to a deque: a finalizer may call it on any thread (free_after_gpu)."""
    if not after:
      for b in blocks: self.free_after_gpu(b)
    else: self._persistent_later.append((list(blocks), tuple(after)))

  def free_after_gpu(self, buf: AMDBuffer) -> None:
    """Free `buf` once the timeline has passed every submission so far: the next allocation or synchronize that
    finds the timeline past it frees it. UNMAP takes the pages from the GPU without waiting for queued work
    (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c:1369-1452). It only appends to a deque (no lock, no
    ioctl), so finalizers may call it on any thread and inside any of our calls."""
    if not buf.freed: self._freed_later.append((self.timeline_value - 1, buf))
  def _reap(self) -> None:
    """Free the deferred buffers whose last submission the timeline has passed (never called from a finalizer)."""
    with self._mem_lock:
      while self._freed_later: self._deferred.append(self._freed_later.popleft())
      self._deferred += [(0, b) for blocks in take_reached(self._persistent_later) for b in blocks]
      if not self._deferred: return
      done = self.timeline_signal.value
      ready = [b for v, b in self._deferred if v <= done]
      self._deferred = [(v, b) for v, b in self._deferred if v > done]
      for b in ready: self._gpu_free(b)

  # ---- other GPUs of this process (hcq.py HCQDevice.transfer_to): P2P links, peer mappings, cross-device signals ----
  # One KFD process holds every GPU's VM and each BO has one VA on all of them, so a peer mapping is MAP_MEMORY_TO_GPU of
  # the owner's handle listing the peer's gpu_id, and the buffer's address is the same there. KFD has no per-pair enable:
  # the map itself is checked (kfd_mem_attach, linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/amdgpu_amdkfd_gpuvm.c:877-893:
  # VRAM only within an XGMI hive or to a peer that may reach the owner's large BAR, else EINVAL; GTT anywhere).
  peer_copies = True
  def query_peer(self, other: HCQDevice) -> str:
    """"ok: pcie" / "ok: xgmi" where the topology lists a link from this GPU to `other` (its SDMA may then write `other`'s
    VRAM), else "no-p2p: ..." (a peer VRAM map would be EINVAL) and copies bounce through GTT both GPUs map."""
    assert isinstance(other, AMDDevice)
    if (link := self.links.get((self.gpu_id, other.gpu_id))) is None: return "no-p2p: no KFD link (peer VRAM map: EINVAL)"
    return f"ok: {IOLINK_TYPES.get(t := link.get('type', 0), f'link type {t}')}"
  def enable_peer(self, other: HCQDevice) -> None:
    """(nothing to enable on KFD: each peer mapping is checked when it is made)"""
  def map_peer(self, other: HCQDevice, buf: AMDBuffer) -> int:
    """Map `other`'s buffer into this GPU's VM (once; MAP_MEMORY_TO_GPU with this gpu_id) and return its address here: the
    same VA. The owner unmaps it from every GPU before it frees it."""
    assert isinstance(other, AMDDevice)
    with other._mem_lock:
      mapped = other._peer_maps.setdefault(buf.handle, set())
      if self.gpu_id not in mapped:
        self._map(buf)
        mapped.add(self.gpu_id)
    return buf.va
  def map_peer_signals(self, other: HCQDevice) -> None:
    """`other`'s signal memory (uncached GTT: maps on any GPU of the process) mapped into this GPU, so its queues wait
    on `other`'s signals where they are."""
    assert isinstance(other, AMDDevice)
    self.map_peer(other, other.signal_mem)
  def bounce_buffers(self) -> list[AMDBuffer]:
    """Two BOUNCE_CHUNK slots of GTT for copies to a GPU this one has no link to: system memory, which every GPU of the
    process may map; uncached, since the two GPUs' caches do not snoop each other."""
    if (b := self.__dict__.get("_bounce")) is None: b = self._bounce = [self.gpu_alloc(self.BOUNCE_CHUNK, "uncached") for _ in range(2)]
    return b

  @property
  def target(self) -> dict:
    """What the compiler needs to know about this GPU (the fields of compiler/target.py Target)."""
    return {"device": self.name, "renderer": self.renderer, "arch": self.arch, "buffer_alignment": 16,
            "shared_memory": self.lds_bytes, "warp_size": self.wave_size, "gpu": True}
  def hw_compute_queue(self) -> AMDComputeQueue: return (AMDAQLComputeQueue if self.aql else AMDComputeQueue)(self.gfx)
  def hw_copy_queue(self) -> AMDCopyQueue: return AMDCopyQueue(self.gfx)
  def program(self, name: str, lib: bytes) -> AMDProgram: return AMDProgram.from_elf(self, name, lib)

  def wait_signal(self, sig: Signal, value: int, timeout_s: float | None = None) -> None:
    """Wait for `sig` >= value, sleeping in AMDKFD_IOC_WAIT_EVENTS between checks (the signal's release raises the event)."""
    timeout_s = self.wait_timeout_s if timeout_s is None else timeout_s
    deadline = time.perf_counter() + timeout_s
    ev = self._wait_data
    while not sig.reached(value):   # (a freed signal counts as reached: its slot may have a new owner)
      left = deadline - time.perf_counter()
      if left <= 0 and not sig.reached(value): raise sig.timed_out(value, timeout_s)
      self.abi.ffi.memmove(ev, bytes(3 * self.abi.sizeof("kfd_event_data")), 3 * self.abi.sizeof("kfd_event_data"))
      ev[0].event_id, ev[1].event_id, ev[2].event_id = self.event_id, self.fault_event, self.error_event
      self.ioctl("AMDKFD_IOC_WAIT_EVENTS", events_ptr=int(self.abi.ffi.cast("uintptr_t", ev)), num_events=3, wait_for_all=0,
                 timeout=max(1, min(10, int(left * 1000))))
      if (codes := self._take_queue_exceptions()):
        raise AMDError(f"{self.name}: a queue stopped on a GPU exception ({', '.join(codes)}) while waiting for {sig.name} to reach "
                       f"{value}; {self.recover()}", errno.EIO)
      m = ev[1].memory_exception_data
      # the kernel fires every memory event of the process and names the faulting GPU (linux@v6.12.117:drivers/gpu/drm/
      # amd/amdkfd/kfd_events.c:1213-1247): another GPU's fault is that GPU's to report, our queues run on
      if (m.failure.NotPresent or m.failure.ReadOnly or m.failure.NoExecute) and m.gpu_id == self.gpu_id:
        raise AMDError(f"{self.name}: GPU memory fault at {m.va:#x} (page {'not present' if m.failure.NotPresent else 'protection'}); "
                       f"the faulting queue is stopped while waiting for {sig.name} to reach {value}; {self.recover()}", errno.EFAULT)

  def raise_if_faulted(self) -> None:
    """If the kernel reported a queue exception into the CWSR header's payload word, recover and raise AMDError naming
    it: Signal.wait polls this, so a wait on any signal (not only through wait_signal) ends at a stopped queue."""
    if not self._recovering and (codes := self._take_queue_exceptions()):
      raise AMDError(f"{self.name}: a queue stopped on a GPU exception ({', '.join(codes)}); {self.recover()}", errno.EIO)

  def _take_queue_exceptions(self) -> list[str]:
    """The exception codes the kernel ORed into the error payload since the last look (cleared here), by name, and
    on an AQL queue the error bits the CP wrote into its queue_inactive_signal."""
    word = ctypes.c_uint64.from_address(self.error_payload.host)  # type: ignore[arg-type]
    bits, word.value = word.value, 0
    return [K.EXCEPTION_CODES.get(i + 1, f"exception code {i + 1}") for i in range(64) if bits >> i & 1] + self.compute.take_errors()

  def recover(self) -> str:
    """A queue stopped (a GPU fault, code the GPU could not run) or a wait timed out, so queued work may never
    finish and would block every later wait. Destroy both KFD queues (the kernel drops their work), create new
    ones, and write from the CPU every signal value the dropped work promised. Returns what happened, for the error."""
    # (no device name in what recover returns: every caller puts it first, "AMD: ..."; one name, once)
    if self._recovering: return "the device did not come back after its queues were recreated; reopen the process"
    self._recovering, done = True, self.timeline_signal.value
    try:
      for q in (self.compute, self.sdma): q.close()
      for sig in [self.timeline_signal, *self._signals]: sig.complete_promised()
      self.compute = self._compute_queue()
      self.sdma = KFDQueue(self, K.QUEUE_TYPE_SDMA, "sdma")
    finally: self._recovering = False
    return (f"the device recovered: its compute and SDMA queues were recreated, dropping the work queued after timeline value {done}; "
            "buffers that work would have written hold undefined data, the device is usable again")

  def synchronize(self, timeout_s: float | None = None) -> None:
    """Wait for all submitted work: SignalTimeout after the timeout, AMDError naming the address when a GPU memory
    fault (KFD's memory event) stopped a queue meanwhile."""
    self.wait_signal(self.timeline_signal, self.timeline_value - 1, timeout_s)
    self._reap()

  def properties(self) -> dict[str, Any]:
    return {"name": self.name, "product": f"AMD {self.arch}", "arch": self.arch, "family": "RDNA3" if self.gfx.gfx == 11 else "CDNA3",
            "driver": f"KFD {self.kfd_version[0]}.{self.kfd_version[1]}", "cu_count": self.cu_count, "wave_size": self.wave_size,
            "lds_bytes": self.lds_bytes, "gpu_id": self.gpu_id, "renderer": "LLVM AMDGPU (llvmlite)"}

  def __repr__(self) -> str: return f"<AMDDevice {self.name} {self.arch}>"

class _Ring:
  """A bump allocator over one host-mapped buffer; wraps after draining the device."""
  def __init__(self, buf: AMDBuffer, drain: Any): self.buf, self.off, self.drain = buf, 0, drain
  def alloc(self, n: int, align: int) -> tuple[int, int]:
    off = _round_up(self.off, align)
    if off + n > self.buf.size:
      if n > self.buf.size: raise MemoryError(f"ring of {self.buf.size} bytes cannot hold {n}")
      self.drain(); off = 0
    self.off = off + n
    assert self.buf.host is not None
    return self.buf.host + off, self.buf.va + off

class KFDQueue:
  """One KFD user-mode queue: ring, read/write pointers and (compute) EOP + CWSR buffers sized from the topology."""
  def __init__(self, dev: AMDDevice, qtype: int, name: str):
    self.dev, self.name, self.sdma = dev, name, qtype == K.QUEUE_TYPE_SDMA
    self.ring = dev.gpu_alloc(RING_BYTES, "uncached", host=True)
    self.ptrs = dev.gpu_alloc(PAGE, "uncached", host=True)
    self.rptr, self.wptr = ctypes.c_uint64.from_address(self.ptrs.host), ctypes.c_uint64.from_address(self.ptrs.host + 8)  # type: ignore[operator]
    extra: dict[str, int] = {}
    if not self.sdma:
      # sizes from sysfs (>= 6.12) or the kernel's formula (older kernels print none but still use what we pass);
      # the CWSR BO holds every XCC's save area plus the debugger's: exactly what kfd_queue.c requires
      sz = queue_sizes(dev.props)
      self.eop = dev.gpu_alloc(sz.eop, "vram")
      self.cwsr = dev.gpu_alloc(sz.bo_bytes, "gtt", host=True)   # CPU-visible: the kernel reads its headers
      fill_cwsr_headers(self.cwsr.host, sz, dev.error_payload.host, dev.error_event)
      extra = dict(eop_buffer_address=self.eop.va, eop_buffer_size=sz.eop, ctx_save_restore_address=self.cwsr.va,
                   ctx_save_restore_size=sz.cwsr, ctl_stack_size=sz.ctl_stack)
    q = dev.ioctl("AMDKFD_IOC_CREATE_QUEUE", ring_base_address=self.ring.va, ring_size=RING_BYTES, gpu_id=dev.gpu_id, queue_type=qtype,
                  queue_percentage=K.MAX_QUEUE_PERCENTAGE, queue_priority=7, write_pointer_address=self.ptrs.va + 8,
                  read_pointer_address=self.ptrs.va, **extra)
    self.queue_id = q.queue_id
    frame = q.doorbell_offset & ~(K.DOORBELL_PROCESS_FRAME_SIZE - 1)
    self.doorbell_page = syscalls.mmap(dev.kfd, K.DOORBELL_PROCESS_FRAME_SIZE, syscalls.PROT_READ | syscalls.PROT_WRITE, syscalls.MAP_SHARED, frame)
    self.doorbell = self.doorbell_page + (q.doorbell_offset & (K.DOORBELL_PROCESS_FRAME_SIZE - 1))
    self.put = 0   # PM4: dwords written; SDMA: bytes written

  def submit(self, dwords: list[int]) -> None:
    n = len(dwords)
    unit = 4 if self.sdma else 1   # SDMA pointers count bytes, PM4 pointers dwords
    ring_units = RING_BYTES if self.sdma else RING_BYTES // 4
    if n * unit > ring_units - unit: raise ValueError(f"{self.name}: {n} dwords do not fit the {RING_BYTES}-byte ring")
    deadline = time.perf_counter() + self.dev.wait_timeout_s
    # The PM4 read pointer is a dword offset that wraps at the ring size (ROCm/ROCR-Runtime@c7785a6:libhsakmt/tests/
    # kfdtest/src/PM4Queue.cpp:44-55), SDMA's a monotonic byte count: the fill level modulo the ring is right for
    # both. One unit stays free so a full ring never reads as empty (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/
    # kfd_kernel_queue.c:241-256 does the same).
    next_check = 0.0
    while (self.put - self.rptr.value) % ring_units + n * unit > ring_units - unit:   # wait for room (the CP advances rptr)
      if time.perf_counter() > deadline: raise TimeoutError(f"{self.dev.name}: {self.name} ring stays full (rptr {self.rptr.value}, put {self.put})")
      if time.perf_counter() >= next_check: self.dev.raise_if_faulted(); next_check = time.perf_counter() + 0.01   # a stopped queue never drains
      time.sleep(0.0001)
    assert self.ring.host is not None
    for i, d in enumerate(dwords):
      off = ((self.put // unit + i) * 4) % RING_BYTES if self.sdma else ((self.put + i) * 4) % RING_BYTES
      ctypes.c_uint32.from_address(self.ring.host + off).value = d
    self.put += n * unit
    self.wptr.value = self.put
    self.dev.pushes += 1   # (the CP may read up to the write pointer from now on)
    syscalls.mmio_write64(self.doorbell, self.put)

  def take_errors(self) -> list[str]:
    """A PM4 queue's CP reports errors only through KFD (the CWSR payload word): nothing of its own to read."""
    return []

  def close(self) -> None:
    """DESTROY_QUEUE (the kernel preempts it and drops its work; errors are ignored, the queue may be gone) and free its memory."""
    with contextlib.suppress(AMDError): self.dev.ioctl("AMDKFD_IOC_DESTROY_QUEUE", queue_id=self.queue_id)
    with contextlib.suppress(OSError): syscalls.munmap(self.doorbell_page, K.DOORBELL_PROCESS_FRAME_SIZE)
    for b in (self.ring, self.ptrs, *((self.eop, self.cwsr) if not self.sdma else ())):
      with contextlib.suppress(AMDError): self.dev.gpu_free(b)

class ScratchUse:
  """The references to one scratch buffer: the device's while it is current, and each PM4 launch record naming it."""

def _free_scratch(dev_ref: weakref.ref, buf: AMDBuffer) -> None:
  """A superseded scratch buffer (or a dropped program's code) no launch record refers to any more: free it once the
  GPU is past it."""
  if (dev := dev_ref()) is not None: dev.free_after_gpu(buf)

# ---- command builders ----
class AMDQueue(HWQueue):
  def __init__(self, target: Target):
    super().__init__()
    self.t, self.q = target, []
  def _emit(self, dws: list[int]) -> int:
    pos = len(self.q); self.q += dws; return pos
  def _put64(self, pos: int, v: int) -> None: self.q[pos], self.q[pos + 1] = v & 0xFFFFFFFF, v >> 32

def _wait_value(value: int) -> int:
  """A value a GPU wait can compare: WAIT_REG_MEM and SDMA POLL_REGMEM read 32 bits of the 64-bit signal (its low
  word), so waits are limited to values below 2**32 (4 billion timeline steps; signals themselves are 64-bit)."""
  if not 0 <= value < 1 << 32:
    raise ValueError(f"AMD: a GPU wait for signal value {value} (>= 2**32): WAIT_REG_MEM / POLL_REGMEM compare the low 32 bits only")
  return value

def _fill_hidden(prog: AMDProgram, args: KernArgs, g, l) -> None:
  """Write the implicit arguments a code object v5 kernel reads through its implicitarg pointer (what an AQL packet
  processor would supply): workgroup counts and sizes, no partial workgroups, no global offset; the rest zero."""
  vals = {"hidden_block_count_x": g[0], "hidden_block_count_y": g[1], "hidden_block_count_z": g[2], "hidden_group_size_x": l[0],
          "hidden_group_size_y": l[1], "hidden_group_size_z": l[2], "hidden_grid_dims": 3 if g[2] * l[2] > 1 else 2 if g[1] * l[1] > 1 else 1}
  for kind, (off, size) in prog.hidden.items():
    args.view[off:off + size] = int(vals.get(kind, 0)).to_bytes(size, "little")

class AMDComputeQueue(AMDQueue):
  """PM4 for the MEC: SET_SH_REG + DISPATCH_DIRECT launches, RELEASE_MEM signals, WAIT_REG_MEM waits."""
  def _cache_release(self) -> int:
    if self.t.gfx >= 10:
      return pm4.RM_GCR_GLM_WB | pm4.RM_GCR_GLM_INV | pm4.RM_GCR_GLV_INV | pm4.RM_GCR_GL1_INV | pm4.RM_GCR_GL2_WB | pm4.RM_GCR_GL2_INV | pm4.RM_GCR_SEQ
    return pm4.EOP_TC_WB_ACTION_EN | pm4.EOP_TC_ACTION_EN | pm4.EOP_TCL1_ACTION_EN
  def _wait(self, signal, value):
    pos = self._emit(pm4.wait_reg_mem(signal.va, _wait_value(value), function=pm4.WRM_GE))
    return {"pos": pos, "signal": signal, "kind": "wait"}
  def _signal(self, signal, value):
    pos = self._emit(pm4.release_mem(signal.va, value, cache=self._cache_release()))
    return {"pos": pos, "signal": signal, "kind": "signal"}
  def _timestamp(self, signal):
    return {"pos": self._emit(pm4.release_mem(signal.va + 24, 0, event_type=pm4.BOTTOM_OF_PIPE_TS, data_sel=pm4.DATA_SEL_GPU_CLOCK_COUNTER))}
  def _update_sem(self, rec, signal, value):
    p = rec["pos"]
    if rec["kind"] == "wait":
      if signal is not None: self._put64(p + 2, signal.va); rec["signal"] = signal
      if value is not None: self.q[p + 4] = _wait_value(value)
    else:
      if signal is not None: self._put64(p + 3, signal.va); rec["signal"] = signal
      if value is not None: self._put64(p + 5, value)
  def _exec(self, prog: AMDProgram, args: KernArgs, g, l):
    t = self.t
    def r(name: str) -> int: return regs.COMPUTE_REGS[t.name][name]
    # an L2 invalidate always goes with its write-back, or the previous kernel's dirty lines are lost: gfx11 GL2_WB
    # with GL2_INV (linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/gfx_v11_0.c:6565-6573), gfx9 TC_WB_ACTION with
    # TC_ACTION, the kernel's five CP_COHER_CNTL bits (linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/gfx_v9_4_3.c:3401-3417;
    # "WB must be set on GFX8+ when TC_ACTION is set", mesa@25.0.7:src/gallium/drivers/radeonsi/si_barrier.c:442-445)
    # gfx11: GL2 (shared by the whole GPU) and the I$ need it only before the first launch after a wait (data from the
    # host, the SDMA engine or new code may have arrived); later launches of the stream see the earlier ones' stores
    # in GL2 and invalidate only the per-CU/per-SE caches (tinygrad's per-dispatch ACQUIRE_MEM likewise leaves GL2 out)
    after_wait = next((k == "wait" for k, _ in reversed(self.cmds) if k in ("wait", "exec")), True)
    gcr = pm4.GCR_GLK_INV | pm4.GCR_GLV_INV | pm4.GCR_GL1_INV
    if after_wait: gcr |= pm4.GCR_GLI_INV_ALL | pm4.GCR_GL2_INV | pm4.GCR_GL2_WB
    coher = (pm4.COHER_SH_ICACHE_ACTION_ENA | pm4.COHER_SH_KCACHE_ACTION_ENA | pm4.COHER_TC_ACTION_ENA | pm4.COHER_TCL1_ACTION_ENA |
             pm4.COHER_TC_WB_ACTION_ENA)
    self._emit(pm4.acquire_mem(t.gfx, gcr_cntl=gcr) if t.gfx >= 10 else pm4.acquire_mem(t.gfx, coher_cntl=coher))
    rsrc1 = prog.kd.rsrc1 | ((1 << KD.RSRC1["PRIV"][0]) if t.cwsr_priv else 0)
    # a PM4 dispatch allocates the kernel's LDS from RSRC2.LDS_SIZE (512-byte granules); the descriptor leaves it to the CP
    rsrc2 = KD.put(prog.kd.rsrc2, KD.RSRC2, "GRANULATED_LDS_SIZE", (prog.kd.group_segment_fixed_size + 511) // 512)
    self._emit(pm4.set_sh_reg(r("PGM_LO"), (prog.code_va >> 8) & 0xFFFFFFFF, prog.code_va >> 40))
    self._emit(pm4.set_sh_reg(r("PGM_RSRC1"), rsrc1, rsrc2))
    self._emit(pm4.set_sh_reg(r("PGM_RSRC3"), prog.kd.rsrc3))
    # scratch (architected flat scratch, hcqrt/amd/scratch.py): the slots' size and count, and where they start
    sp, sbuf = (prog.device.scratch_plan, prog.device.scratch) if prog.kd.private_segment_fixed_size else (None, None)
    self._emit(pm4.set_sh_reg(r("TMPRING_SIZE"), sp.tmpring if sp is not None else 0))
    if sbuf is not None: self._emit(pm4.set_sh_reg(r("DISPATCH_SCRATCH_BASE_LO"), (sbuf.va >> 8) & 0xFFFFFFFF, sbuf.va >> 40))
    use = prog.device.scratch_use if sbuf is not None else None   # keeps sbuf while this record (a graph) lives
    self._emit(pm4.set_sh_reg(r("RESOURCE_LIMITS"), 0))
    user = [{"kernarg_lo": args.va & 0xFFFFFFFF, "kernarg_hi": args.va >> 32, "private_size": prog.kd.private_segment_fixed_size}.get(u, 0)
            for u in prog.user_data_layout] or [0]
    ka = self._emit(pm4.set_sh_reg(r("USER_DATA_0"), *user))
    self._emit(pm4.set_sh_reg(r("START_X"), 0, 0, 0))
    nt = self._emit(pm4.set_sh_reg(r("NUM_THREAD_X"), *l))
    dd = self._emit(pm4.dispatch_direct(*g, regs.dispatch_initiator(t.name, wave32=prog.kd.wave32)))
    # the next launch may read what this one wrote: wait for it to finish (launches would otherwise overlap)
    self._emit(pm4.event_write(pm4.CS_PARTIAL_FLUSH, pm4.EVENT_INDEX_CS_PARTIAL_FLUSH))
    _fill_hidden(prog, args, g, l)
    return {"ka": ka, "nt": nt, "dd": dd, "args": args, "prog": prog, "g": tuple(g), "l": tuple(l), "scratch": use}
  def _update_exec(self, rec, g, l):
    if g is not None: self.q[rec["dd"] + 1:rec["dd"] + 4] = list(g); rec["g"] = tuple(g)
    if l is not None: self.q[rec["nt"] + 2:rec["nt"] + 5] = list(l); rec["l"] = tuple(l)
    _fill_hidden(rec["prog"], rec["args"], rec["g"], rec["l"])
  _bound: tuple[int, int, int] | None = None
  def _stream(self, dev: AMDDevice) -> tuple[list[int], int]:
    """The stream, and where its trailing signals (with their event writes) start in it."""
    out, i, tail = [], 0, None
    for kind, rec in self.cmds:   # every signal is followed by the event write that wakes WAIT_EVENTS
      if kind == "signal":
        p = rec["pos"]
        out += self.q[i:p]
        if tail is None: tail = len(out)
        out += self.q[p:p + 8]
        # INT_SEL 2: interrupt once the write is confirmed, as the kernel's own fences do (linux@v6.12.117:drivers/gpu/
        # drm/amd/amdgpu/gfx_v11_0.c:5740-5741); 3 would write the slot with no interrupt and WAIT_EVENTS would sleep out
        # its timeout (mesa@25.0.7:src/amd/vulkan/radv_cs.c:37-40)
        out += pm4.release_mem(dev.event_slot, dev.event_id, data_sel=pm4.DATA_SEL_32_BIT_LOW, int_sel=pm4.INT_SEL_SEND_INTERRUPT_AFTER_WRITE_CONFIRM,
                               ctxid=dev.event_id, event_type=pm4.BOTTOM_OF_PIPE_TS)
        i = p + 8
      else: tail = None
    return out + self.q[i:], (tail if tail is not None and i == len(self.q) else len(out) + len(self.q) - i)
  def bind(self, dev: AMDDevice) -> None:
    """Keep the stream in GPU-visible memory for good (a graph): each submit rewrites the patched dwords there and
    puts one INDIRECT_BUFFER on the ring, followed on the ring by the stream's trailing signals. Those must not be in
    the IB: the CP goes on reading the IB after a release the host can see (a RELEASE_MEM "only inserts the event into
    the pipeline. It doesn't wait for anything": mesa src/gallium/drivers/radeonsi/si_cp_utils.c, comment on
    si_cp_release_mem_pws; the mock's CP stalls right after each release, mock/amd/kfd.py stall),
    so the graph's memory, freed once its graph signal is reached (hcq._release_graph), would be read after its
    free. From the ring they run only once the IB is done, and the ring is never freed."""
    n = self._stream(dev)[1]
    host, va = dev.persistent(max(n, 1) * 4, 256)
    self._bound = (host, va, n)
  def _submit(self, dev: AMDDevice) -> None:
    out, cut = self._stream(dev)
    if self._bound is None: return dev.compute.submit(out)
    host, va, n = self._bound
    if cut != n: raise RuntimeError(f"{self.name}: bound stream changed size ({n} -> {cut} dwords)")
    ctypes.memmove(host, struct.pack(f"<{n}I", *out[:n]), n * 4)
    dev.compute.submit((pm4.indirect_buffer(va, n) if n else []) + out[n:])

class AMDAQLComputeQueue(AMDComputeQueue):
  """The compute builder for an AQL queue: each launch is an hsa_kernel_dispatch_packet_t (the CP loads the registers
  from the kernel descriptor and splits the grid over the XCCs); waits, signals and timestamps stay PM4 (WAIT_REG_MEM,
  RELEASE_MEM), run from an indirect buffer through an AMD PM4-IB packet as ROCr's ExecutePM4 does
  (ROCm/ROCR-Runtime@c7785a6:runtime/hsa-runtime/core/runtime/amd_aql_queue.cpp:1513-1543). Not BARRIER_AND or
  completion signals: those wait for / decrement an amd_signal_t towards 0 (HSA signal semantics), while HCQ signals
  are 64-bit timelines that a queue sets to arbitrary larger values and waits on with >=.
  Every packet has the barrier bit (it starts only after all earlier packets completed, hsa.h hsa_packet_header_t
  HSA_PACKET_HEADER_BARRIER), so launches are ordered as on the PM4 queue, and system-scope acquire/release fences."""
  def _exec(self, prog: AMDProgram, args: KernArgs, g, l):
    _fill_hidden(prog, args, g, l)
    # The first launch after a wait drops the instruction caches (and the scalar ones) with an ACQUIRE_MEM in the PM4-IB
    # before it, which runs on every XCC: code may have been loaded where a dropped program was (AMDProgram), and
    # neither the packet's acquire fence nor the CP does it for us -- ROCr issues this ACQUIRE_MEM itself after
    # loading code (ROCm/ROCR-Runtime:src/core/runtime/amd_gpu_agent.cpp GpuAgent::InvalidateCodeCaches; the CP's
    # own "code cache invalidation" ended with gfx7/gfx8.0 microcode 420/685). Later launches of the stream run code
    # loaded before that wait, as on the PM4 path (AMDComputeQueue._exec's after_wait).
    if next((k == "wait" for k, _ in reversed(self.cmds) if k in ("wait", "exec")), True):
      self._emit(pm4.acquire_mem(self.t.gfx, gcr_cntl=pm4.GCR_GLI_INV_ALL | pm4.GCR_GLK_INV) if self.t.gfx >= 10 else
                 pm4.acquire_mem(self.t.gfx, coher_cntl=pm4.COHER_SH_ICACHE_ACTION_ENA | pm4.COHER_SH_KCACHE_ACTION_ENA))
    return {"pos": len(self.q), "args": args, "prog": prog, "g": tuple(g), "l": tuple(l)}
  def _update_exec(self, rec, g, l):
    if g is not None: rec["g"] = tuple(g)
    if l is not None: rec["l"] = tuple(l)
    _fill_hidden(rec["prog"], rec["args"], rec["g"], rec["l"])
  def _segments(self, dev: AMDDevice) -> list[tuple[str, Any]]:
    """The stream in order: ("pm4", dwords) runs between launches (each signal followed by its event write) and ("exec", rec)."""
    out: list[tuple[str, Any]] = []
    cur, i = [], 0
    # every XCC's MQD runs the queue, so the PM4 of a PM4-IB runs on all of them (linux@v6.12.117:drivers/gpu/drm/amd/
    # amdkfd/kfd_mqd_manager_v9.c:680-723): signals, their interrupts and timestamps run on XCC 0 only, as tinygrad
    # predicates them (tinygrad@a9069c1:tinygrad/runtime/ops_amd.py:372-392); waits stay on every XCC
    one_xcc = (lambda dws: pm4.pred_exec(1, dws)) if dev.props.get("num_xcc", 1) > 1 else (lambda dws: dws)
    for kind, rec in self.cmds:
      if kind == "exec":
        cur += self.q[i:rec["pos"]]; i = rec["pos"]
        if cur: out.append(("pm4", cur))
        out.append(("exec", rec)); cur = []
      elif kind in ("signal", "timestamp"):
        p = rec["pos"]
        ev = pm4.release_mem(dev.event_slot, dev.event_id, data_sel=pm4.DATA_SEL_32_BIT_LOW, int_sel=pm4.INT_SEL_SEND_INTERRUPT_AFTER_WRITE_CONFIRM,
                             ctxid=dev.event_id, event_type=pm4.BOTTOM_OF_PIPE_TS) if kind == "signal" else []
        cur += self.q[i:p] + one_xcc(self.q[p:p + 8] + ev)
        i = p + 8
    if cur + self.q[i:]: out.append(("pm4", cur + self.q[i:]))
    return out
  _ibs: list[tuple[int, int, int]] | None = None
  def bind(self, dev: AMDDevice) -> None:
    """(a graph) Keep each indirect buffer in memory of its own for good; a submit rewrites them and queues the packets."""
    # (the trailing PM4 segment, the stream's last signals, is not kept: it goes to the kernarg ring each submit, as
    # an unbound stream's do. The CP reads an IB on after a release the host sees (AMDComputeQueue.bind), and the
    # graph's memory goes once its graph signal, released in that segment, is reached: hcq._release_graph)
    segs = self._segments(dev)
    self._ibs = [(*dev.persistent(len(d) * 4, 256), len(d)) for k, d in segs[:-1 if segs[-1][0] == "pm4" else None] if k == "pm4"]
  def _packets(self, dev: AMDDevice) -> list[bytes]:
    segs, out = self._segments(dev), []
    ibs = iter(self._ibs) if self._ibs is not None else None
    if ibs is not None and sum(k == "pm4" for k, _ in segs) - (segs[-1][0] == "pm4") != len(self._ibs or []):
      raise RuntimeError(f"{self.name}: bound stream changed shape")
    for j, (kind, x) in enumerate(segs):
      if kind == "pm4":
        kept = ibs is not None and not (j == len(segs) - 1)
        host, va, n = next(ibs) if kept else (*dev.kernargs.alloc(len(x) * 4, 256), len(x))
        if n != len(x): raise RuntimeError(f"{self.name}: bound stream changed size ({n} -> {len(x)} dwords)")
        ctypes.memmove(host, struct.pack(f"<{n}I", *x), n * 4)
        out.append(aql.pm4_ib(pm4.indirect_buffer(va, n)))
      else:
        p, g, l = x["prog"], x["g"], x["l"]
        out.append(aql.kernel_dispatch(p.kd_va, x["args"].va, (g[0] * l[0], g[1] * l[1], g[2] * l[2]), l,
                                       group_segment_size=p.kd.group_segment_fixed_size, private_segment_size=p.kd.private_segment_fixed_size))
    return out
  def _submit(self, dev: AMDDevice) -> None: dev.compute.submit_packets(self._packets(dev))

_SDMA_GCR_AFTER = sdma.GCR_GL2_WB | sdma.GCR_GLK_WB
_SDMA_GCR_BEFORE = _SDMA_GCR_AFTER | sdma.GCR_GL2_INV | sdma.GCR_GL1_INV | sdma.GCR_GLV_INV | sdma.GCR_GLK_INV

class AMDCopyQueue(AMDQueue):
  """SDMA: COPY_LINEAR copies, FENCE signals (+ TRAP to wake WAIT_EVENTS), POLL_REGMEM waits."""
  def _copy(self, dst, src, nbytes):
    # SDMA 6 reads and writes through the GL2 (COPY_LINEAR carries cache-policy bits, sdma_v6_0_0_pkt_open.h), and a
    # peer's VRAM is mapped MTYPE_NC on gfx11 (linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/gmc_v11_0.c:464-470), so as
    # ROCr does for every SDMA command on gfx10-12 (ROCR@c7785a6:runtime/hsa-runtime/core/runtime/amd_blit_sdma.cpp:
    # 391-409, 1086-1104) the copy is bracketed: invalidate (and write back) before it so it reads what others wrote,
    # write back GL2/GLK after it so the peer, the host and the FENCE's waiters see the bytes in memory
    if self.t.gfx >= 11:
      self._emit(sdma.gcr_req(_SDMA_GCR_BEFORE, sub_op=sdma.SUBOP_USER_GCR))
      pos = self._emit(sdma.copy(dst, src, nbytes, gfx=self.t.gfx))
      self._emit(sdma.gcr_req(_SDMA_GCR_AFTER, sub_op=sdma.SUBOP_USER_GCR))
      return {"pos": pos, "n": nbytes}
    return {"pos": self._emit(sdma.copy(dst, src, nbytes, gfx=self.t.gfx)), "n": nbytes}
  def _update_copy(self, rec, dst, src):
    step, p = sdma.COPY_MAX_BYTES[self.t.gfx], rec["pos"]
    for k in range((rec["n"] + step - 1) // step):
      if src is not None: self._put64(p + 7 * k + 3, src + k * step)
      if dst is not None: self._put64(p + 7 * k + 5, dst + k * step)
  def _timestamp(self, signal):
    return {"pos": self._emit(sdma.timestamp(signal.va + 24))}
  def _wait(self, signal, value):
    return {"pos": self._emit(sdma.poll_regmem(signal.va, _wait_value(value), gfx=self.t.gfx)), "kind": "wait"}
  def _signal(self, signal, value):
    mt = 3 if self.t.gfx >= 11 else 0   # SDMA 6: write uncached so the host sees it
    pos = self._emit(sdma.fence(signal.va, value & 0xFFFFFFFF, gfx=self.t.gfx, mtype=mt) + sdma.fence(signal.va + 4, value >> 32, gfx=self.t.gfx, mtype=mt))
    return {"pos": pos, "kind": "signal"}
  def _update_sem(self, rec, signal, value):
    p = rec["pos"]
    if rec["kind"] == "wait":
      if signal is not None: self._put64(p + 1, signal.va)
      if value is not None: self.q[p + 3] = _wait_value(value)
    else:
      if signal is not None: self._put64(p + 1, signal.va); self._put64(p + 5, signal.va + 4)
      if value is not None: self.q[p + 3], self.q[p + 7] = value & 0xFFFFFFFF, value >> 32
  def _submit(self, dev: AMDDevice) -> None:
    out, i = [], 0
    mt = 3 if self.t.gfx >= 11 else 0
    for kind, rec in self.cmds:
      if kind == "signal":
        p = rec["pos"]
        out += self.q[i:p + 8] + sdma.fence(dev.event_slot, dev.event_id, gfx=self.t.gfx, mtype=mt) + sdma.trap(dev.event_id, gfx=self.t.gfx)
        i = p + 8
    out += self.q[i:]
    dev.sdma.submit(out)

# the user SGPRs a kernel descriptor enables, in the order the hardware loads them (AMDGPUUsage "Initial Kernel
# Execution State"), with their dword counts; a PM4 dispatch must put the kernarg pointer where the kernel looks for it
_USER_SGPRS = [("PRIVATE_SEGMENT_BUFFER", 4), ("DISPATCH_PTR", 2), ("QUEUE_PTR", 2), ("KERNARG_SEGMENT_PTR", 2), ("DISPATCH_ID", 2),
               ("FLAT_SCRATCH_INIT", 2), ("PRIVATE_SEGMENT_SIZE", 1)]

def user_sgpr_layout(name: str, kd: Any) -> list[str]:
  """One entry per user SGPR dword: "kernarg_lo"/"kernarg_hi" or "zero". Refuses what a PM4 dispatch cannot provide."""
  out: list[str] = []
  for field_name, n in _USER_SGPRS:
    if not kd.properties[f"ENABLE_SGPR_{field_name}"]: continue
    if field_name in ("PRIVATE_SEGMENT_BUFFER", "FLAT_SCRATCH_INIT"):   # architected flat scratch: "must be 0" (AMDGPUUsage)
      raise NotImplementedError(f"{name}: the kernel reads a scratch {field_name.lower()} (ENABLE_SGPR_{field_name}); gfx942 and gfx11 "
                                "have architected flat scratch, which takes scratch from FLAT_SCRATCH, not SGPRs")
    if field_name in ("DISPATCH_PTR", "QUEUE_PTR"):
      raise NotImplementedError(f"{name}: the kernel reads the AQL {field_name.lower()} (ENABLE_SGPR_{field_name}); this runtime dispatches "
                                "through PM4 without an AQL packet")
    out += {"KERNARG_SEGMENT_PTR": ["kernarg_lo", "kernarg_hi"], "PRIVATE_SEGMENT_SIZE": ["private_size"]}.get(field_name, ["zero"] * n)
  if kd.kernarg_preload & 0x7F:   # KERNARG_PRELOAD_SPEC_LENGTH
    raise NotImplementedError(f"{name}: kernarg preloading is not supported")
  if len(out) > kd.user_sgpr_count:
    raise ValueError(f"{name}: the descriptor enables {len(out)} user SGPRs but RSRC2.USER_SGPR_COUNT is {kd.user_sgpr_count}")
  return out

class AMDProgram(HCQProgram):
  """A kernel in GPU memory: `code_va` its first instruction, `kd` its decoded descriptor, `params` [(offset, size)]."""
  def __init__(self, dev: AMDDevice, name: str, code: bytes, descriptor: bytes, params: Sequence[tuple[int, int]], kernarg_size: int | None = None,
               entry: int = 0, kd_offset: int | None = None):
    """`code` is the loadable image (a code object's sections, the descriptor among them at byte `kd_offset`) with the
    first instruction at byte `entry` (256-byte aligned); it goes to executable GPU memory as it is."""
    super().__init__(dev, name)
    self.kd = KD.decode(descriptor, dev.arch)
    if self.kd.wave32 and not dev.gfx.wave32: raise ValueError(f"{name}: a wave32 kernel cannot run on {dev.arch}")
    if self.kd.properties["USES_DYNAMIC_STACK"]:
      raise NotImplementedError(f"{name}: the kernel's stack grows at run time (USES_DYNAMIC_STACK); only a fixed private segment is supported")
    if self.kd.private_segment_fixed_size: dev.ensure_scratch(self.kd.private_segment_fixed_size)   # spills, stack arrays
    if self.kd.group_segment_fixed_size > dev.lds_bytes:
      raise ValueError(f"{name}: {self.kd.group_segment_fixed_size} bytes of LDS exceed the {dev.lds_bytes} a workgroup has on {dev.arch}")
    if entry % 256: raise ValueError(f"{name}: code entry offset {entry:#x} is not 256-byte aligned (COMPUTE_PGM_LO holds address >> 8)")
    self.user_data_layout = user_sgpr_layout(name, self.kd)
    # The image goes to VRAM the CPU never maps, copied by the SDMA engine from the GTT staging buffer: CPU stores
    # through the BAR would sit in the HDP until flushed, which KFD user queues never do (linux@v6.12.117:drivers/gpu/
    # drm/amd/amdgpu/amdgpu_ib.c:234 flushes only for kernel-submitted IBs), and host-visible VRAM needs a large BAR
    # (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c:1112-1118). The new code reaches the shader through
    # the I$ invalidate of the first dispatch after a wait (ACQUIRE_MEM, gfx9 PM4 on every dispatch; AQL in the PM4-IB
    # before the dispatch, AMDAQLComputeQueue._exec): copyin ends in a
    # host synchronize, and a launch is always preceded by a wait on the timeline, so the next dispatch that can run
    # this program counts as after-a-wait.
    if kd_offset is None:   # no descriptor in the image: append one (64-byte aligned) whose entry offset points back at the code
      kd_offset = _round_up(len(code), 64)
      code = code + bytes(kd_offset - len(code)) + descriptor[:16] + struct.pack("<q", entry - kd_offset) + descriptor[24:64]
    self.image = dev.gpu_alloc(len(code) + 256, "vram", executable=True)   # +256: instruction prefetch past the end
    # freed when the program is dropped (frontend/engine.py evicts kernels from its cache; whoever still launches one
    # holds it) once the timeline has passed every launch of it (free_after_gpu: finalizer-safe); code loaded later
    # at this address reaches the shader through the I$ invalidate of a dispatch after a wait, as said above
    weakref.finalize(self, _free_scratch, weakref.ref(dev), self.image).atexit = False
    dev.allocator.copyin(self.image, memoryview(code))
    self.code_va = self.image.va + entry
    self.kd_va = self.image.va + kd_offset   # an AQL dispatch names the kernel by its descriptor's address (kernel_object)
    if self.code_va % 256: raise ValueError("program address must be 256-byte aligned (COMPUTE_PGM_LO holds address >> 8)")
    self.params = list(params)
    self.hidden: dict[str, tuple[int, int]] = {}   # code object v5 implicit arguments the launch fills (sizes, counts)
    self.kernarg_size = kernarg_size if kernarg_size is not None else max([o + s for o, s in self.params] + [self.kd.kernarg_size, 8])

  @classmethod
  def from_elf(cls, dev: AMDDevice, name: str, lib: bytes) -> AMDProgram:
    """Load kernel `name` of an HSA code object (LLVM's relocatable .o or a linked .hsaco): sections laid out and
    relocated (the descriptor's entry offset included), arguments from the NT_AMDGPU_METADATA note."""
    co = codeobject.read(lib, name)
    prog = cls(dev, name, co.image, co.descriptor, co.params, co.kernarg_size, entry=co.entry, kd_offset=co.kd_offset)
    prog.hidden = co.hidden
    return prog

  def fill_kernargs(self, bufs: Sequence[Any], vals: Sequence[int] = (), persistent: bool = False) -> KernArgs:
    # a graph's arguments must outlive the per-launch ring, which is recycled under it
    if len(bufs) + len(vals) != len(self.params):
      raise TypeError(f"{self.name}: takes {len(self.params)} arguments, got {len(bufs)} buffers and {len(vals)} values")
    host, va = (self.device.persistent if persistent else self.device.kernargs.alloc)(self.kernarg_size, 16)
    view = memoryview((ctypes.c_char * self.kernarg_size).from_address(host)).cast("B")
    ka = KernArgs(view, self.params, len(bufs), va)
    for i, b in enumerate(bufs): ka.set_buffer(i, b if isinstance(b, int) else b.va)
    for j, v in enumerate(vals): ka.set_int(j, v)
    return ka

class AMDAllocator(CachingAllocator):
  """Device buffers; host copies go through an uncached staging buffer and the SDMA queue.

  Freed memory is kept (hcqrt/alloc_cache.py; up to `cache_limit` bytes, env AMD_CACHE_BYTES) for the next allocation
  of the same size, as NV's allocator: reuse needs no wait, since every queue runs behind the timeline, after the
  work that last used the memory. Returning memory to KFD does wait: UNMAP takes the pages from the GPU at once,
  without waiting for queued work (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c:1369-1452), so the
  timeline must first pass every submission that may still use them."""
  STAGING = 2 << 20
  def __init__(self, dev: AMDDevice, cache_limit: int | None = None):
    super().__init__(env_int("AMD_CACHE_BYTES", 1 << 30) if cache_limit is None else cache_limit)
    self.dev = dev
    self.staging = dev.gpu_alloc(self.STAGING, "gtt", host=True)
  def _size(self, b: AMDBuffer) -> int: return b.size
  def _release(self, b: AMDBuffer) -> None: self.dev.free_after_gpu(b)
  def alloc(self, nbytes: int, host: bool = False) -> AMDBuffer:
    kind = "gtt" if host else "vram"
    if (b := self._take((_round_up(max(nbytes, 1), PAGE), kind))) is not None:
      return AMDBuffer(b.va, b.size, nbytes, b.handle, b.host, b.kind)
    try: return self.dev.gpu_alloc(nbytes, kind, host=host)
    except (AMDError, MemoryError):
      if not self.cached_bytes: raise
      self.flush()
      return self.dev.gpu_alloc(nbytes, kind, host=host)
  def free(self, buf: AMDBuffer) -> None:
    if buf.freed: raise RuntimeError(f"{self.dev.name}: double free of {buf}")
    if buf.size > self.cache_limit: return self._release(buf)
    buf.freed = True   # this record is dead; the memory lives on in a new one
    self.dev.buffers[buf.va] = kept = AMDBuffer(buf.va, buf.size, buf.size, buf.handle, buf.host, buf.kind)
    self._keep((buf.size, buf.kind), kept)
  def share_with_forks(self, buf: AMDBuffer, share: bool) -> None:
    """(as CPUAllocator's: device memory has nothing a fork would copy)"""
  def _copy(self, dst: int, src: int, n: int) -> None:
    d = self.dev
    d.submit_timeline(d.after_timeline(d.hw_copy_queue()).copy(dst, src, n))
    d.synchronize()
  def copyin(self, dst: AMDBuffer, src: memoryview) -> None:
    mv = memoryview(src).cast("B")
    if mv.nbytes > dst.nbytes: raise ValueError(f"{self.dev.name}: copyin of {mv.nbytes} bytes into {dst}")
    for off in range(0, mv.nbytes, self.STAGING):
      m = min(self.STAGING, mv.nbytes - off)
      self.staging.view()[:m] = mv[off:off + m]
      self._copy(dst.va + off, self.staging.va, m)
  def copyout(self, dst: memoryview, src: AMDBuffer) -> None:
    mv = memoryview(dst).cast("B")
    if mv.nbytes > src.nbytes: raise ValueError(f"{self.dev.name}: copyout of {mv.nbytes} bytes from {src}")
    for off in range(0, mv.nbytes, self.STAGING):
      m = min(self.STAGING, mv.nbytes - off)
      self._copy(self.staging.va, src.va + off, m)
      mv[off:off + m] = self.staging.view()[:m]
  def transfer(self, dst: AMDBuffer, src: AMDBuffer, nbytes: int) -> None: self._copy(dst.va, src.va, nbytes)
