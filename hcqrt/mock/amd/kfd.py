"""A fake /dev/kfd (+ the DRM render node and the sysfs topology) behind hcqrt.syscalls, as strict as amdkfd.

It serves one GPU node (gfx1100 by default, gfx942 with arch="gfx942") and checks what kfd_chardev.c and the
amdgpu VM code check, failing with the same errno: unknown ioctl numbers (EINVAL), unknown gpu_id (EINVAL),
memory ioctls before ACQUIRE_VM, zero sizes, misaligned or overlapping VAs, n_devices/n_success, freeing a
mapped BO (EBUSY) or the event page (EPERM), unmapping what is not mapped (EINVAL), queue percentage/priority,
ring size not a power of two, RUNTIME_ENABLE twice (EBUSY) or after a queue exists (EEXIST), host-visible VRAM
on a small BAR (EINVAL), an event page or (gfx11, MES) wptr outside GTT (EINVAL). On a 6.12 kernel (MOCKGPU_KFD,
topology.py) CREATE_QUEUE checks every queue buffer as kfd_queue_acquire_buffers does (EINVAL); on 6.1 only the
gfx11 MES write pointer (kfd_chardev.c of 6.1), and 6.1 has no gfx942 at all. A preemption (`preempt`) saves wave state into whatever CWSR area the queue named. The queues run on an
engine thread after the doorbell (asynchronously to the process); a COMPUTE_AQL queue runs HSA packets (aql.py);
WAIT_EVENTS sleeps until an interrupt (RELEASE_MEM
INT_SEL 2, SDMA TRAP; gfx942 drops context id 0) signals an event. A compute queue the CP stops for a reason
other than a VM fault raises a queue exception: with the runtime enabled the kernel reads the queue's CWSR header
at its CPU address and signals the header's error event (`queue_exception`); if that memory is not CPU-mapped,
nothing wakes the process and its wait times out, as on hardware. Stricter than the kernel in one place, on
purpose: an ioctl whose _IOC size matches no kfd_ioctl.h version's struct is refused with EINVAL (the kernel would
zero-fill or truncate it, hiding a client's layout bug).

  >>> drv = MockKFD(); drv.claims("/dev/kfd"), drv.claims("/sys/devices/virtual/kfd/kfd/topology/nodes/1/properties")
  (True, True)
"""
from __future__ import annotations
import ctypes, errno, itertools, mmap as _mmap, os, struct, threading, time, weakref
from collections.abc import Callable, Hashable, Iterable
from typing import Any, ClassVar
from hcqrt import syscalls
from hcqrt.mock.held import Holdable
from hcqrt.mock.amd import tables as T
from hcqrt.mock.amd.topology import GPU_ID, KFD_VERSION, RENDER_MINOR, TOPOLOGY, VRAM_BYTES, files, gpu_properties, kernel_from_env, link_matrix, node_sizes, small_bar_gpus
from hcqrt.mock.amd.memory import BO, GPUVM, GPUFault, PAGE, PoolRun, round_up
from hcqrt.mock.amd.cp import Queue, GPUError, land_pending
from hcqrt.mock.amd.aql import AQLQueue

ENOTSUPP = 524          # kernel-internal errno that set_queue_properties_from_user returns for an unknown queue type
DOORBELL_FRAME = 0x2000
GPUVM_BASE, GPUVM_LIMIT = 0x200000, (1 << 47) - 1
KFD_EVENT_LIMIT = 4096
KFD_MIN_QUEUE_RING_SIZE = 1024

def _err(e: int, msg: str) -> OSError: return OSError(e, msg)

def _unmapped(m: tuple[int, int, int], addr: int, length: int) -> list[tuple[int, int, int]]:
  """The parts of CPU mapping m = (address, length, BO offset) outside [addr, addr + length)."""
  at, n, off = m
  if at + n <= addr or addr + length <= at: return [m]
  return [(at, addr - at, off)] * (at < addr) + [(addr + length, at + n - addr - length, off + addr + length - at)] * (addr + length < at + n)

class KFDNode:
  """One GPU of the process (the kernel's kfd_process_device): its gpu_id, its render node, and the GPU VM that
  ACQUIRE_VM binds through that render node; BOs allocated on it count against its VRAM."""
  def __init__(self, gpu_id: int, node: int, render_minor: int):
    self.gpu_id, self.node, self.render_minor = gpu_id, node, render_minor
    self.render_path = f"/dev/dri/renderD{render_minor}"
    self.render_fds: set[int] = set()
    self.vm = GPUVM()
    self.vm_acquired: int | None = None      # the render fd ACQUIRE_VM bound (~fd once that fd closed: MockKFD.close)
    # ACQUIRE_VM through another GPU's render node: the kernel binds that file's VM without checking whose it is
    # (audit m26 row 4a: kfd_process.c:1704-1714 -> amdgpu_file_to_fpriv checks only f_op, amdgpu_drv.c:2987-2999).
    # MAP/ALLOC/CREATE_QUEUE then work on that VM, but its page tables belong to the other GPU: this GPU's engines
    # walk none of them, so every access they make faults (`engine_vm`, empty)
    self.foreign_vm = False
    self.vram_used = 0
    self._no_tables = GPUVM()
  @property
  def engine_vm(self) -> GPUVM: return self._no_tables if self.foreign_vm else self.vm

class KernelEventPage:
  """The signal page the kernel allocates for itself when the first signal event comes without one (no BO, no VA):
  KFD_SIGNAL_EVENT_LIMIT slots of backing store, of which only the first 256 are used (signal_mapped_size = 256*8,
  linux@026e14a:drivers/gpu/drm/amd/amdkfd/kfd_events.c allocate_event_notification_slot)."""
  handle = None
  mapped_size = T.KERNEL_EVENT_PAGE_SLOTS * 8
  def __init__(self) -> None:
    self.size = KFD_EVENT_LIMIT * 8
    self._buf = ctypes.create_string_buffer(self.size)
    self.host = ctypes.addressof(self._buf)

class MockKFD(Holdable):
  """The fake KFD. `arch` "gfx1100" or "gfx942"; `kernel` "6.12" or "6.1" (default: MOCKGPU_KFD); `version` the
  (major, minor) GET_VERSION reports (default: that kernel's). `gpus` GPU nodes are listed (nodes 1..gpus), the
  mock serves the one of node `serve`; the nodes in `hidden` belong to GPUs the device cgroup denies. `small_bar`
  (default MOCKGPU_SMALL_BAR): the PCI BAR shows only part of VRAM (a board without Resizable BAR) on every GPU (True)
  or on the GPUs of an index set (a mixed box; see small_bar_gpus). `report_queue_errors` (tests only; no kernel
  does this): a queue stopped on something other than a VM fault also fails the process's next WAIT_EVENTS.
  `serve` None serves every GPU node, as one amdkfd serves the box: one KFD process shared by all /dev/kfd fds of the
  process (one per mm: kfd_process.c kfd_create_process looks the process up by current->mm), a VM per GPU
  (ACQUIRE_VM through that GPU's render node), BO handles (gpu_id << 32) | idr naming their GPU. Another GPU's VRAM
  maps only over XGMI or a large-BAR PCIe peer path (amdgpu_amdkfd_gpuvm.c kfd_mem_attach: "Prevent this BO from
  being mapped to a peer device unless it is in the same XGMI hive, or peer device has large BAR"): `p2p` (default
  MOCKGPU_P2P, else "pcie") names the link of each GPU pair, "pcie", "xgmi" or "none", or "i-j:kind,..." per pair
  (topology.link_matrix); the topology lists it as io_links/p2p_links. Peer VRAM maps over XGMI always and over PCIe
  when the owner's BAR is large (not `small_bar`), else EINVAL; GTT maps on any GPU of the process. `maps` logs every
  (handle, gpu_id) a MAP_MEMORY_TO_GPU mapped, so a test sees which peer got what. The process ends with `exit`."""
  alive: ClassVar[weakref.WeakSet[MockKFD]] = weakref.WeakSet()   # those not exited (tests/conftest.py exits a test's own)
  def __init__(self, arch: str = "gfx1100", version: tuple[int, int] | None = None, kernel: str | None = None, gpus: int = 1,
               serve: int | None = None, hidden: tuple[int, ...] = (), small_bar: bool | Iterable[int] | None = None, report_queue_errors: bool = False,
               p2p: str | dict[tuple[int, int], str] | None = None):
    self.kernel = kernel or kernel_from_env()
    # 6.1 knows no GC 9.4.3: the newest gfx9 in its device table is 9.4.2 Aldebaran
    # (linux@v6.1.192:drivers/gpu/drm/amd/amdkfd/kfd_device.c:137), so an MI300X gets no KFD node there
    if arch == "gfx942" and self.kernel == "6.1":
      raise ValueError("mock KFD: Linux 6.1 cannot drive gfx942 (MI300X, GC 9.4.3 arrived after 6.1); use MOCKGPU_KFD=6.12")
    self.report_queue_errors = report_queue_errors
    self.aql_errors_via_kfd = False   # an AQL packet error also reaches the CWSR payload word (firmware-dependent, aql.py)
    self.arch, self.version = arch, version or KFD_VERSION[self.kernel]
    # consecutive gpu_ids; the kernel's are a hash of the node's properties (kfd_topology.c kfd_generate_gpu_id), so
    # nothing may assume an order or a step between them (audit m26 row 6c)
    gpu_ids = [GPU_ID[arch] + i for i in range(gpus)]
    self.props, self.node_sizes = gpu_properties(arch, self.kernel), node_sizes(arch)
    self.nodes: dict[int, KFDNode] = {gpu_ids[n - 1]: KFDNode(gpu_ids[n - 1], n, RENDER_MINOR + n - 1)
                                      for n in (range(1, gpus + 1) if serve is None else (serve,))}
    self.links = link_matrix(os.environ.get("MOCKGPU_P2P", "pcie") if p2p is None else p2p, gpus, arch)
    self.gpu_index = {g: i for i, g in enumerate(gpu_ids)}
    small = small_bar_gpus(os.environ.get("MOCKGPU_SMALL_BAR", "0") if small_bar is None else small_bar, gpus)
    self.files = files(arch, self.kernel, gpu_ids, self.links, small)
    # a denied GPU's node answers gpu_id, properties and its links' properties with EPERM: iolink_show checks the GPU the
    # link belongs to (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_topology.c:279-280, iolink->gpu set :1182-1185)
    self.hidden = {f"{TOPOLOGY}/nodes/{n}/{f}" for n in hidden for f in ("gpu_id", "properties")} | \
                  {f for n in hidden for f in self.files if f.startswith((f"{TOPOLOGY}/nodes/{n}/io_links/", f"{TOPOLOGY}/nodes/{n}/p2p_links/"))}
    self.small_bar = small   # indices of the GPUs with a small BAR (empty: all large)
    self.kfd_fds: set[int] = set()
    self.runtime_enabled = False
    self.bos: dict[int, BO] = {}             # handle -> BO
    # pages of freed BOs that an L2 held dirty lines of, by domain (VRAM's gpu_id or 0), a list of the freed BOs' page
    # lists, most recent last: the next allocations of the domain take them, any part of them (_take_pages), at most
    # POOL_PAGES a domain (_trim_pool)
    self.freed_pages: dict[tuple[str, int], list[list[PoolRun]]] = {}   # (each a BO's runs: memfd, page, pages)
    self.freed_mapped: list[BO] = []         # freed BOs the process still maps on the CPU: alive until munmap (_release)
    self.next_idr = 1
    self.queues: dict[int, Queue] = {}
    self.queue_serials = itertools.count(1)   # Queue.serial: never reused, unlike the queue ids
    self.doorbells: dict[tuple[int, int], Queue] = {}    # (gpu_id, doorbell byte offset in its frame) -> queue
    self.doorbell_writes = 0                  # doorbell writes seen (tests and benchmarks count submissions)
    self.interrupts: list[int] = []           # context ids of the interrupts raised, in order (tests count them)
    self.doorbell_maps: list[tuple[int, int, int, int]] = []   # (address, length, offset in the frame, gpu_id) of what is mapped of doorbell frames
    self.event_page: BO | None = None
    # "Allocate event ID 0. It is used for a fast path to ignore bogus events": the process's first signal event is 1
    # (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_events.c:245-262; linux@v6.1.192:.../kfd_events.c:252-255)
    self.events: dict[int, dict[str, Any]] = {}
    self.reserved_event_ids = {0}
    self.lock = threading.RLock()
    self.work = threading.Condition(self.lock)   # doorbells wake the engine; the engine wakes WAIT_EVENTS
    self._engine: threading.Thread | None = None
    self._due: float | None = None           # when the engine runs the queues next (doorbell time + latency_s)
    self.latency_s = 0.0                     # how long after a doorbell the CP starts on the work (tests widen races)
    self._held: dict[int, tuple[Any, int]] = {}   # id(queue) -> (queue, its last held doorbell value)
    self.release_stall_s = 0.0               # how long the CP stalls after each RELEASE_MEM (tests widen races)
    self.busy_ns = 0
    self.wait_timeouts = 0                   # WAIT_EVENTS that slept out their timeout (no interrupt came)
    self.missed_wakeups = 0                  # ... of them, with a waited-for event slot written (the release raised no interrupt)
    self.calls: list[str] = []               # ioctl names in order (tests read them)
    self.sizes: list[int] = []               # and the _IOC size each came with
    self.maps: list[tuple[int, int]] = []    # (handle, gpu_id) of every mapping MAP_MEMORY_TO_GPU made, in order
    self.exited = False                       # the process has ended (`exit`): its fds answer EBADF
    MockKFD.alive.add(self)

  # the first served GPU's state under the names the one-GPU mock had (tests read them)
  @property
  def first(self) -> KFDNode: return next(iter(self.nodes.values()))
  @property
  def gpu_id(self) -> int: return self.first.gpu_id
  @property
  def vm(self) -> GPUVM: return self.first.vm
  @property
  def vm_acquired(self) -> int | None: return self.first.vm_acquired
  @property
  def vram_used(self) -> int: return sum(n.vram_used for n in self.nodes.values())
  @property
  def render_path(self) -> str: return self.first.render_path
  @property
  def render_fds(self) -> set[int]: return {fd for n in self.nodes.values() for fd in n.render_fds}
  def node_of(self, gpu_id: int) -> KFDNode:
    if (n := self.nodes.get(gpu_id)) is None: raise _err(errno.EINVAL, f"unknown gpu_id {gpu_id:#x} (the process has {', '.join(f'{g:#x}' for g in self.nodes)})")
    return n

  # ---- paths ----
  def claims(self, path: str) -> bool:
    return path == "/dev/kfd" or any(path == n.render_path for n in self.nodes.values()) or path.startswith(TOPOLOGY)
  def listdir(self, path: str) -> list[str]:
    p = path.rstrip("/") + "/"
    names = {f[len(p):].split("/")[0] for f in self.files if f.startswith(p)}
    if not names: raise FileNotFoundError(errno.ENOENT, f"mock KFD: no such directory {path}")
    return sorted(names)
  def read_text(self, path: str) -> str:
    if path not in self.files: raise FileNotFoundError(errno.ENOENT, f"mock KFD: no such file {path}")
    # a GPU the device cgroup denies: node_show returns -EPERM for gpu_id and properties
    # (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_topology.c:435-452)
    if path in self.hidden: raise PermissionError(errno.EPERM, f"mock KFD: {path}: the device cgroup denies this GPU")
    return self.files[path]

  def open(self, path: str, flags: int) -> int:
    fd = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)   # a real fd number nothing else will get
    if path == "/dev/kfd": self.kfd_fds.add(fd)
    else: next(n for n in self.nodes.values() if n.render_path == path).render_fds.add(fd)
    return fd
  def close(self, fd: int) -> None:
    """The process closes an fd. It frees nothing: /dev/kfd's release only drops the file's reference to the KFD process
    (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c:165-173), and the MMU notifier holds another until the
    process's mm goes (kfd_process.c:1531, 1579-1593; dropped at :1223-1226, 1265), so BOs, queues and VMs live on, and
    a new open finds the same process (kfd_process.c:866-867). A render node fd's close does not end its VM either:
    ACQUIRE_VM's PDD holds the file (kfd_chardev.c:1005) until the process's PDDs go (kfd_process.c:1066-1070). All of
    it goes at the process's end: `exit`."""
    self.kfd_fds.discard(fd)
    for n in self.nodes.values():
      n.render_fds.discard(fd)
      # the PDD keeps the closed file, which no new fd is: the kernel compares files, not numbers (kfd_chardev.c:996-997),
      # so a new render fd, even one given the same number, is EBUSY at ACQUIRE_VM and EACCES at mmap (`mmap`). A
      # negative number stands for the closed file: no fd ever equals it
      if n.vm_acquired == fd: n.vm_acquired = ~fd
    os.close(fd)

  def exit(self) -> None:
    """The process ends: its mm goes, so the MMU notifier drops the KFD process's last reference
    (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_process.c:1268-1298, 1265, 1223-1226) and kfd_process_wq_release
    (:1163-1203) destroys its queues (:1169-1170), unmaps every BO from every GPU and frees it (:1189, 986-1011), ends
    the VMs (:1192, 1066-1070) and the events (:1195). exit_mmap removes the process's mappings (mm/mmap.c:1916, 1925,
    1967), each dropping its GEM reference (mm/vma.c:329-334; drm_gem.c:1100-1106), so BOs freed while still mapped go too:
    all the process's memory is released, and with nobody left to own them, the pool's pages (a test's mock stands
    for one process). Here: every memfd closes and the mock's own mappings go. The client's mappings of BOs are the
    OS's, not the mock's: they keep their memfd alive and valid until munmap (memory.py Pages). The fds stay routed
    here and answer EBADF, and stay open: closed, their numbers could go to another mock's fds, and a stale call
    (a late finalizer of a device of this process) would reach that one."""
    with self.lock:
      if self.exited: return
      self.exited = True
      MockKFD.alive.discard(self)
      for q in self.queues.values(): q.destroyed = True
      self.queues, self.doorbells, self._held, self.events = {}, {}, {}, {}
      bos, self.bos, self.freed_mapped = [*self.bos.values(), *self.freed_mapped], {}, []
      for n in self.nodes.values():
        for b in bos:
          if n.gpu_id in b.gpu_mapped: n.vm.unmap(b)
        n.vm.discard(); n.vram_used = 0   # (the L2's lines of memory nobody has any more: no one can see them)
      for b in bos: b.close()
      for blk in (blk for pool in self.freed_pages.values() for blk in pool):
        for p, _, m in blk: p.put(m)
      self.freed_pages = {}
      self.work.notify_all()   # (the engine thread, with no queue left, ends when idle)

  # ---- ioctl ----
  def ioctl(self, fd: int, request: int, argp: int) -> int:
    d, typ, nr, size = (request >> 30) & 3, (request >> 8) & 0xFF, request & 0xFF, (request >> 16) & 0x3FFF
    if self.exited: raise _err(errno.EBADF, f"mock KFD: fd {fd} belongs to a process that has exited (MockKFD.exit)")
    if fd not in self.kfd_fds: raise _err(errno.ENOTTY, "not a /dev/kfd fd")
    if typ != ord("K"): raise _err(errno.ENOTTY, f"ioctl type {typ:#x} is not AMDKFD_IOCTL_BASE")
    # RUNTIME_ENABLE (0x25) arrived with 1.13, "Add debugger API" (linux@v6.12.117:include/uapi/linux/kfd_ioctl.h:41)
    end = T.COMMAND_END[(1, 11)] if self.version < (1, 13) else T.COMMAND_END[(1, 17)]
    if not 1 <= nr < end: raise _err(errno.EINVAL, f"ioctl nr {nr:#x} is outside [AMDKFD_COMMAND_START, AMDKFD_COMMAND_END) of KFD {self.version}")
    if nr not in T.IOCTLS: raise _err(errno.ENOSYS, f"mock KFD does not implement ioctl nr {nr:#x}")
    name, layout, sizes = T.IOCTLS[nr]
    if size not in sizes: raise _err(errno.EINVAL, f"AMDKFD_IOC_{name}: argument size {size} matches no kfd_ioctl.h layout ({'/'.join(map(str, sizes))})")
    raw = ctypes.string_at(argp, size) + bytes(layout.size - size)
    args = layout.unpack(raw)
    self.calls.append(name)
    self.sizes.append(size)
    with self.lock:
      # (again under the lock: a call that raced `exit` to it must not make a BO, a memfd, in the ended process)
      if self.exited: raise _err(errno.EBADF, f"mock KFD: fd {fd} belongs to a process that has exited (MockKFD.exit)")
      try: ret = getattr(self, f"_{name.lower()}")(args) or 0
      finally:
        if d & 2: ctypes.memmove(argp, layout.pack(args)[:size], size)   # the kernel copies back even on failure
    return ret

  def _pdd(self, gpu_id: int, need_vm: bool = True) -> KFDNode:
    """The process's device data of `gpu_id` (unknown: EINVAL); `need_vm`: bound to it as kfd_bind_process_to_device
    binds, which answers ENODEV while no ACQUIRE_VM gave it a VM (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/
    kfd_process.c:1770-1771; audit m26 row 4b)."""
    n = self.node_of(gpu_id)
    if need_vm and n.vm_acquired is None: raise _err(errno.ENODEV, f"no ACQUIRE_VM for gpu_id {gpu_id:#x} yet (the process has no VM on it)")
    return n

  def link(self, a: int, b: int) -> str:
    """The link between the GPUs of gpu_ids a and b: "pcie", "xgmi" or "none" (a == b: "self")."""
    if a == b: return "self"
    i, j = sorted((self.gpu_index[a], self.gpu_index[b]))
    return self.links[(i, j)]
  def peer_accessible(self, owner: int, gpu_id: int) -> bool:
    """May GPU `gpu_id` map VRAM of GPU `owner`? kfd_mem_attach (linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/
    amdgpu_amdkfd_gpuvm.c:877-893): the same XGMI hive, or amdgpu_device_is_peer_accessible(owner, gpu), which needs
    a PCIe P2P path and the owner's whole VRAM behind its BAR (linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/
    amdgpu_device.c:6341-6375)."""
    kind = self.link(owner, gpu_id)
    return kind in ("self", "xgmi") or (kind == "pcie" and self.gpu_index[owner] not in self.small_bar)

  def _get_version(self, a: dict) -> None: a["major_version"], a["minor_version"] = self.version

  def _acquire_vm(self, a: dict) -> None:
    """kfd_ioctl_acquire_vm (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c:977-1016): a GPU already bound
    accepts only the same file again (EBUSY); else the file's VM becomes the GPU's. Whose render node the file is goes
    unchecked (kfd_process.c:1704-1714; amdgpu_drv.c:2987-2999 checks only that it is an amdgpu file): a VM that is
    already a compute VM, bound to any GPU, is EINVAL (amdgpu_amdkfd_gpuvm.c:1556-1558); another GPU's fresh one binds,
    and this GPU's engines then fault on everything (KFDNode.foreign_vm). Stricter in one point: fds are compared
    by number, the kernel compares the struct file, so a dup'd fd of the same file passes there (audit m26 row 6d)."""
    n = self._pdd(a["gpu_id"], need_vm=False)
    # fget of a closed fd: EINVAL (kfd_chardev.c:996-999); a bound GPU is compared first, before the file is asked
    # whether it is amdgpu's (kfd_process.c:1703-1705), so any other open file there is EBUSY (audit p2p_amd row 5)
    try: os.fstat(a["drm_fd"])
    except OSError: raise _err(errno.EINVAL, f"drm_fd {a['drm_fd']} is not an open file") from None
    if n.vm_acquired is not None:
      if n.vm_acquired != a["drm_fd"]: raise _err(errno.EBUSY, "VM already acquired through another drm fd")
      return
    owner = next((m for m in self.nodes.values() if a["drm_fd"] in m.render_fds), None)
    if owner is None: raise _err(errno.EINVAL, f"drm_fd {a['drm_fd']} is not an open amdgpu render node")
    if any(m.vm_acquired == a["drm_fd"] for m in self.nodes.values()): raise _err(errno.EINVAL, f"drm_fd {a['drm_fd']}'s VM is already a compute VM")
    n.vm_acquired, n.foreign_vm = a["drm_fd"], owner is not n

  def _runtime_enable(self, a: dict) -> None:
    if a["mode_mask"] & 1:
      if self.runtime_enabled: raise _err(errno.EBUSY, "runtime already enabled")
      # linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c:2792-2796: not once the process has user queues
      if self.queues: raise _err(errno.EEXIST, "RUNTIME_ENABLE after a user queue was created")
      self.runtime_enabled = True
    else: self.runtime_enabled = False
    a["capabilities_mask"] = 0

  def _get_process_apertures_new(self, a: dict) -> None:
    # one aperture per GPU of the process (kfd_chardev.c kfd_ioctl_get_process_apertures_new walks p->pdds)
    if a["num_of_nodes"] == 0: a["num_of_nodes"] = len(self.nodes); return
    aps = [T.APERTURE.pack({"lds_base": 0x1000000000000, "lds_limit": 0x1000000000000 + 0xFFFFFFFF, "scratch_base": 0x2000000000000,
                            "scratch_limit": 0x2000000000000 + 0xFFFFFFFF, "gpuvm_base": GPUVM_BASE, "gpuvm_limit": GPUVM_LIMIT, "gpu_id": g})
           for g in list(self.nodes)[: a["num_of_nodes"]]]
    ctypes.memmove(a["kfd_process_device_apertures_ptr"], b"".join(aps), sum(map(len, aps)))
    a["num_of_nodes"] = len(aps)

  def _available_memory(self, a: dict) -> None:
    # no bind: a GPU without a VM answers too (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c:1038-1050)
    a["available"] = VRAM_BYTES[self.arch] - self._pdd(a["gpu_id"], need_vm=False).vram_used
  def _get_clock_counters(self, a: dict) -> None:
    t = time.perf_counter_ns()
    a.update(gpu_clock_counter=t // 10, cpu_clock_counter=t, system_clock_counter=t, system_clock_freq=1_000_000_000)
  def _set_xnack_mode(self, a: dict) -> None:
    if a["xnack_enabled"] > 0: raise _err(errno.EPERM, "XNACK cannot be enabled on this GPU")

  # ---- memory ----
  def _alloc_memory_of_gpu(self, a: dict) -> None:
    # the kernel's order (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c:1052-1123): size 0, the GPU, the
    # small-BAR rule, then the bind (ENODEV without ACQUIRE_VM). Overlapping VAs are not refused here: the VM finds
    # them when the BO is mapped (_map_memory_to_gpu)
    va, size, fl = a["va_addr"], a["size"], a["flags"]
    if size == 0: raise _err(errno.EINVAL, "size 0")
    node = self._pdd(a["gpu_id"], need_vm=False)
    # "Alloc host visible vram on small bar is not allowed" (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c:1112-1118)
    if self.gpu_index[node.gpu_id] in self.small_bar and fl & T.VRAM and fl & T.PUBLIC: raise _err(errno.EINVAL, "host-visible VRAM on a small BAR")
    node = self._pdd(a["gpu_id"])
    if not fl & (T.VRAM | T.GTT): raise _err(errno.EINVAL, f"flags {fl:#x}: no VRAM or GTT domain (USERPTR/DOORBELL/MMIO_REMAP are not modelled)")
    if va % PAGE: raise _err(errno.EINVAL, f"va_addr {va:#x} is not page aligned")
    if not GPUVM_BASE <= va or va + size > GPUVM_LIMIT: raise _err(errno.EINVAL, f"va_addr {va:#x}+{size:#x} is outside the GPUVM aperture")
    if fl & T.VRAM and node.vram_used + size > VRAM_BYTES[self.arch]: raise _err(errno.ENOMEM, "out of VRAM")
    handle = (node.gpu_id << 32) | self.next_idr
    # Pages freed BOs left with dirty L2 lines (_release) go to the next allocations of their domain as the kernel may
    # leave them: cleared when freed (_release), not again, so what an L2 wrote back since stays. VRAM: the
    # VRAM_CLEARED allocation skips blocks marked cleared (linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/amdgpu_ttm.c:
    # 2341-2344; amdgpu_amdkfd_gpuvm.c:1740-1741). GTT: KFD's is ttm_cached (alloc_flags 0, amdgpu_amdkfd_gpuvm.c:
    # 1751-1753; amdgpu_ttm.c:1150-1153), kept in a TTM pool only with use_dma_alloc (need_swiotlb, amdgpu_ttm.c:
    # 1893-1897; ttm_pool.c:287-292), whose pages are cleared when given back and taken as they are (ttm_pool.c:225-255);
    # otherwise the page allocator's __GFP_ZERO clears them at this ALLOC (ttm_pool.c:445-446), the kinder case.
    # Any size takes any freed pages of its domain, a part of one freed BO or several (_take_pages)
    given, taken = self._take_pages(self._pool_key(fl, node.gpu_id), round_up(size, PAGE) // PAGE)
    # No memory for the BO (the mock's memfd or mapping failed): amdgpu_gem_object_create failed, so the ioctl fails with
    # its ENOMEM before an IDR handle is made (linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/amdgpu_amdkfd_gpuvm.c:1817-1823,
    # amdkfd/kfd_chardev.c:1147-1156), and the freed pages stay free: they leave the pool only with the BO made (`taken`)
    try: bo = BO(handle, va, size, fl, given=given)
    except OSError as e: raise _err(errno.ENOMEM, f"out of memory for a {size:#x}-byte BO: {e}") from None
    taken()
    self.next_idr += 1
    bo.mmap_offset = (1 << 40) + (handle & 0xFFFFFFFF) * (1 << 24)   # type: ignore[attr-defined]
    self.bos[handle] = bo
    if fl & T.VRAM: node.vram_used += bo.size
    a["handle"], a["mmap_offset"] = handle, bo.mmap_offset   # type: ignore[attr-defined]

  def _bo(self, handle: int, missing: int = errno.ENOMEM) -> BO:
    """The BO of a handle: an unknown GPU id is EINVAL; an unknown IDR index is ENOMEM in map/unmap, EINVAL in free."""
    if handle >> 32 not in self.nodes: raise _err(errno.EINVAL, f"handle {handle:#x} names no GPU of this process")
    if (bo := self.bos.get(handle)) is None: raise _err(missing, f"handle {handle:#x} is not an allocation of this process")
    return bo

  def _free_memory_of_gpu(self, a: dict) -> None:
    if self.event_page is not None and a["handle"] == self.event_page.handle: raise _err(errno.EPERM, "freeing the signal event page is not allowed")
    bo = self._bo(a["handle"], errno.EINVAL)
    if bo.gpu_mapped: raise _err(errno.EBUSY, f"BO at {bo.va:#x} is still mapped to the GPU")
    del self.bos[a["handle"]]
    # The process's CPU mappings keep the BO alive: each VMA holds a GEM reference until munmap (linux@v6.12.117:
    # drivers/gpu/drm/drm_gem.c:1100-1106, ttm/ttm_bo_vm.c:360-366), so its memory is released only with the last one
    if bo.cpu_at: self.freed_mapped.append(bo)
    else: self._release(bo)

  def _release(self, bo: BO) -> None:
    """The BO's memory goes back to the allocator. FREE issues no cache operation (linux@v6.12.117:drivers/gpu/drm/amd/
    amdgpu/amdgpu_amdkfd_gpuvm.c:1911-2011), so the lines an L2 still holds dirty of it (memory.py GPUVM.unmap) stay.
    It is cleared now, around the L2: VRAM by SDMA (VRAM_WIPE_ON_RELEASE, amdgpu_object.c:1262-1279, then marked
    cleared); GTT pool pages by the CPU (ttm_pool.c:225-234; see _alloc_memory_of_gpu). Neither touches the L2's lines:
    the CPU's writes to memory not local to the GPU are not probed (AMDGPUUsage, memory model GFX90A/GFX942: probes
    invalidate local memory's lines), gfx942's SDMA is an MMHUB client outside the GC (amdgpu/sdma_v4_4_2.c:1406);
    gfx11's SDMA is a GFXHUB client (amdgpu/sdma_v6_0.c:1321) whose fill may go through the GL2 and overwrite them,
    undocumented: the harmful side for all. The next BOs of the domain get these pages, any part of them (_take_pages),
    and the L2's write-back lands on them, before or after that ALLOC. Only now is the VRAM given back to the KFD's
    limit (ENOMEM, AVAILABLE_MEMORY): amdgpu_amdkfd_release_notify unreserves it when the last GEM reference goes
    (linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/amdgpu_amdkfd_gpuvm.c:293-299, from amdgpu_object.c:1248-1249; the FREE
    path only drops its reference, amdgpu_amdkfd_gpuvm.c:2012-2016), not at a FREE the process's mappings outlive."""
    if bo.flags & T.VRAM: self.nodes[bo.handle >> 32].vram_used -= bo.size
    if not any(n.vm.holds(bo.frames) for n in self.nodes.values()): return bo.close()
    bo.clear()
    bo.drop_view()
    key = self._pool_key(bo.flags, bo.handle >> 32)
    # (its runs, not a tuple a page: no allocation of megabytes here, inside the process's munmap of the BO)
    self.freed_pages.setdefault(key, []).append([(p, i, n) for _, p, i, n in bo.frames.runs])
    self._trim_pool(key)

  # Pages a domain's pool keeps (_trim_pool): 32 MiB, all the L2 of the largest modelled GPU (gfx942 MI325X:
  # "32 (4 per XCD)" MiB, rocm.docs.amd.com/en/7.13.0-preview/reference/gpu-specs.html), so the last L2-full of freed
  # memory comes back whole, yet a process that allocates and frees for hours keeps at most that many pages (memfds)
  # a domain. It drops the oldest: the kernel gives back the most recent first (_take_pages), and the per-CPU lists,
  # once above pcp->high, hand their oldest pages to the buddy lists, where any allocation takes them
  # (linux@v6.12.117:mm/page_alloc.c:2710-2713, free_pcppages_bulk's list_last_entry :1254). (The TTM pool's shrinker
  # frees its most recent pages instead, ttm_pool.c:321-335, 248: not the harmful side.)
  POOL_PAGES = 8192

  def _take_pages(self, key: tuple[str, int], n: int) -> tuple[list[PoolRun], Callable[[], None]]:
    """Up to n freed pages of the domain for a new BO (the rest is new memory, BO), most recently freed first, a freed
    BO's pages partly if it is larger: the harmful and plausible choice, the pages an L2 is likeliest still to hold
    lines of. GTT, the page allocator: a free goes to the head of the per-CPU list and an allocation takes the head
    (linux@v6.12.117:mm/page_alloc.c:2689, 3092), a larger block is split keeping the lower half (expand, :1438-1458):
    the first pages. VRAM, the buddy allocator: a VRAM_CLEARED allocation (amdgpu_vram_mgr.c:512-513) takes blocks
    from the cleared tree first, where freed blocks are (wiped at release, _release) and never-used ones are not (init
    marks none cleared, drivers/gpu/buddy.c:307, 354; :741-767), and splits a larger one keeping the right half
    (:777-783): the last pages. Among freed blocks the buddy takes the highest offset of the smallest order that
    fits (rbtree_last_free_block), not modelled: the most recent here. Returns the runs in the BO's page order, and
    the call that takes them out of the pool (once the BO is made: a failed allocation keeps them there)."""
    pool, out, k, rest = self.freed_pages.get(key, []), [], 0, []
    vram = key[0] == "vram"
    while k < len(pool) and n:   # freed blocks, most recent first; a block's runs from its end (VRAM) or start (GTT)
      blk = pool[-1 - k]; k += 1
      got, rest = [], []
      for j, (p, i, m) in enumerate(reversed(blk) if vram else blk):
        t = min(n, m); n -= t
        got.append((p, i + m - t, t) if vram else (p, i, t))
        if not n:   # the last run it takes: what stays of the block
          rest = blk[:len(blk) - 1 - j] + [(p, i, m - t)] * (t < m) if vram else [(p, i + t, m - t)] * (t < m) + blk[j + 1:]
          break
      out += got[::-1] if vram else got
    def taken() -> None: pool[len(pool) - k:] = [rest] if rest else []
    return out, taken

  def _trim_pool(self, key: tuple[str, int]) -> None:
    """The pool keeps its POOL_PAGES most recently freed pages; older ones leave this process (the L2's lines of them
    with them: nothing here can see them) and their memfd closes with its last page (Pages.put)."""
    pool = self.freed_pages[key]
    excess = sum(m for blk in pool for _, _, m in blk) - self.POOL_PAGES
    while excess > 0:   # (a run at a time: a page at a time from the front of a list was quadratic)
      p, i, m = pool[0][0]
      k = min(excess, m); excess -= k
      if k == m: pool[0].pop(0)
      else: pool[0][0] = (p, i + k, m - k)
      if not pool[0]: pool.pop(0)
      for n in self.nodes.values(): n.vm.forget(p, i, k)
      p.put(k)

  @staticmethod
  def _pool_key(flags: int, gpu_id: int) -> tuple[str, int]:
    """Where freed memory may go again: VRAM to the same GPU's next VRAM BOs, GTT (system memory) to any GPU's GTT BOs."""
    return ("vram", gpu_id) if flags & T.VRAM else ("gtt", 0)

  def _device_ids(self, a: dict) -> list[int]:
    if a["n_devices"] == 0: raise _err(errno.EINVAL, "n_devices is 0")
    if a["n_success"] > a["n_devices"]: raise _err(errno.EINVAL, f"n_success {a['n_success']} > n_devices {a['n_devices']}")
    return list(struct.unpack(f"<{a['n_devices']}I", ctypes.string_at(a["device_ids_array_ptr"], 4 * a["n_devices"])))

  def _map_memory_to_gpu(self, a: dict) -> None:
    """kfd_ioctl_map_memory_to_gpu (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c:1250-1345): the owner is
    bound (ENODEV without a VM), the handle translated (ENOMEM), then each listed GPU from n_success on is looked up
    (EINVAL), bound (ENODEV) and mapped; n_success counts them, so a failure leaves the earlier ones mapped."""
    ids = self._device_ids(a)
    owner = a["handle"] >> 32
    if owner not in self.nodes: raise _err(errno.EINVAL, f"handle {a['handle']:#x} names no GPU of this process")
    self._pdd(owner)
    bo = self._bo(a["handle"])
    for i in range(a["n_success"], len(ids)):
      node = self._pdd(ids[i])
      # peer VRAM only over XGMI or a large-BAR PCIe path (kfd_mem_attach, amdgpu_amdkfd_gpuvm.c:877-893: EINVAL)
      if bo.flags & T.VRAM and not self.peer_accessible(owner, node.gpu_id):
        raise _err(errno.EINVAL, f"VRAM of gpu_id {owner:#x} mapped to gpu_id {node.gpu_id:#x}: no XGMI or PCIe peer path "
                                 f"(link {self.link(owner, node.gpu_id)}{', small BAR' if self.gpu_index[owner] in self.small_bar else ''})")
      if ids[i] not in bo.gpu_mapped:
        # the VA must be free in that GPU's VM: amdgpu_vm_bo_map refuses a range overlapping another mapping
        # (linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/amdgpu_vm.c:1742-1748, via map_bo_to_gpuvm,
        # amdgpu_amdkfd_gpuvm.c:1285-1299); BOs on two GPUs may share a VA (audit m26 row 6a)
        for b in node.vm.bos:
          if b.va < bo.end and bo.va < b.end: raise _err(errno.EINVAL, f"va range {bo.va:#x}..{bo.end:#x} overlaps the BO at {b.va:#x}..{b.end:#x} in gpu {node.gpu_id:#x}'s VM")
        bo.gpu_mapped.add(ids[i]); node.vm.map(bo)
        self.maps.append((a["handle"], ids[i]))
      a["n_success"] = i + 1

  def _unmap_memory_from_gpu(self, a: dict) -> None:
    ids = self._device_ids(a)
    bo = self._bo(a["handle"])
    for q in self.queues.values():
      if q.gpu_id in ids and any(bo.va <= x < bo.end for x in q.buffers): raise _err(errno.EBUSY, f"BO at {bo.va:#x} holds buffers of {q.name}")
    for i in range(a["n_success"], len(ids)):
      node = self._pdd(ids[i])
      if ids[i] not in bo.gpu_mapped: raise _err(errno.EINVAL, f"BO at {bo.va:#x} is not mapped to gpu {ids[i]:#x}")
      bo.gpu_mapped.discard(ids[i]); node.vm.unmap(bo)
      a["n_success"] = i + 1

  # ---- queues ----
  def _queue_buffer(self, vm: GPUVM, what: str, va: int, size: int) -> None:
    """kfd_queue_buffer_get (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_queue.c:197-217): the GPU page of `va`
    must be the first page of a GPU mapping and, unless `size` is under a page, the mapping exactly `size` bytes
    (compared in 4 KiB pages), else EINVAL."""
    bo = next((b for b in vm.bos if b.va >> 12 <= va >> 12 < b.end >> 12), None)
    if bo is None: raise _err(errno.EINVAL, f"{what} {va:#x}: no GPU mapping holds it")
    if va >> 12 != bo.va >> 12 or (size >> 12 and bo.size >> 12 != size >> 12):
      raise _err(errno.EINVAL, f"{what} {va:#x}: expected a mapping of {size:#x} bytes starting at its page, the BO is {bo.va:#x}+{bo.size:#x}")

  def _create_queue(self, a: dict) -> None:
    if a["queue_percentage"] & 0xFF > 100: raise _err(errno.EINVAL, f"queue_percentage {a['queue_percentage']} > 100")
    if a["queue_priority"] > 15: raise _err(errno.EINVAL, f"queue_priority {a['queue_priority']} > 15")
    for k in ("ring_base_address", "read_pointer_address", "write_pointer_address", "eop_buffer_address", "ctx_save_restore_address"):
      if a[k] >= 1 << 47: raise _err(errno.EFAULT, f"{k} {a[k]:#x} is not a user address")
    rs = a["ring_size"]
    if rs and rs & (rs - 1): raise _err(errno.EINVAL, f"ring_size {rs:#x} is not a power of two")
    # "Size lower. clamped to KFD_MIN_QUEUE_RING_SIZE" (1 KiB; set_queue_properties_from_user,
    # linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c:216-218, linux@v6.1.192:...:212-214), before
    # kfd_queue_acquire_buffers sees the size
    rs = a["ring_size"] = max(rs, KFD_MIN_QUEUE_RING_SIZE)
    qt = a["queue_type"]
    if qt not in (T.QUEUE_COMPUTE, T.QUEUE_SDMA, T.QUEUE_COMPUTE_AQL): raise _err(ENOTSUPP, f"queue_type {qt} is not supported")
    node = self._pdd(a["gpu_id"], need_vm=False)
    # a failed bind is ESRCH here (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c:338-342)
    if node.vm_acquired is None: raise _err(errno.ESRCH, "process is not bound to the GPU (no ACQUIRE_VM)")
    bufs = [a["ring_base_address"], a["read_pointer_address"], a["write_pointer_address"]]
    if qt != T.QUEUE_SDMA: bufs += [a["eop_buffer_address"], a["ctx_save_restore_address"]]
    if self.kernel != "6.1": self._acquire_buffers(node.vm, a, qt)
    # 6.1 has no kfd_queue_acquire_buffers: it copies the addresses and sizes into the MQD unchecked
    # (linux@v6.1.192:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c set_queue_properties_from_user); the CP finds out later.
    # It does check the MES (gfx11) write pointer (linux@v6.1.192:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c:345-376)
    elif self.arch == "gfx1100": self._mes_wptr_61(node.vm, a["write_pointer_address"])
    qid = next(i for i in range(1024) if i not in self.queues)
    if qt == T.QUEUE_COMPUTE_AQL:   # KFD_QUEUE_FORMAT_AQL (kfd_chardev.c set_queue_properties_from_user): the CP reads HSA packets
      q: Queue = AQLQueue(self, qid, node.engine_vm, a["ring_base_address"], rs, a["read_pointer_address"], a["write_pointer_address"], self.arch,
                          self.props["num_xcc"])
    else: q = Queue(self, qid, qt, node.engine_vm, a["ring_base_address"], rs, a["read_pointer_address"], a["write_pointer_address"], self.arch)
    q.buffers, q.gpu_id = bufs, node.gpu_id   # type: ignore[attr-defined]
    q.ctx_save = (a["ctx_save_restore_address"], a["ctx_save_restore_size"]) if qt != T.QUEUE_SDMA else None   # type: ignore[attr-defined]
    self.queues[qid] = q
    self.doorbells[(node.gpu_id, qid * 8)] = q
    a["queue_id"] = qid
    a["doorbell_offset"] = (T.MMAP_DOORBELL << 62) | (node.gpu_id << 46) | (qid * 8)

  def _mes_wptr_61(self, vm: GPUVM, wptr: int) -> None:
    """6.1's MES wptr rule (linux@v6.1.192:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c:345-376): the BO mapped at
    write_pointer_address is looked up ("Failed to lookup wptr bo"), must be at most a page ("Requested GART mapping
    for wptr bo larger than one page") and is then mapped into the GART, which a GTT BO only allows; else EINVAL."""
    bo = next((b for b in vm.bos if b.va <= wptr < b.end), None)
    if bo is None: raise _err(errno.EINVAL, f"write_pointer_address {wptr:#x}: no GPU mapping holds it (failed to lookup wptr bo)")
    if bo.size > PAGE: raise _err(errno.EINVAL, f"write_pointer_address {wptr:#x}: the wptr BO is {bo.size:#x} bytes, more than one page")
    if not bo.flags & T.GTT: raise _err(errno.EINVAL, f"write_pointer_address {wptr:#x}: MES needs the wptr in a GTT BO (GART-mapped)")

  def _acquire_buffers(self, vm: GPUVM, a: dict, qt: int) -> None:
    """kfd_queue_acquire_buffers (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_queue.c:233-345), called from
    kfd_ioctl_create_queue (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_chardev.c:362): wptr and rptr one page
    each, the ring exactly ring_size; compute queues also the EOP buffer (the node's size), ctl_stack_size equal to
    the node's, ctx_save_restore_size at least the node's cwsr_size (42ea9cf2f16b "Relax size checking") and the CWSR
    BO exactly ALIGN((ctx_save_restore_size + debug_memory_size) * NUM_XCC, 4 KiB) (kfd_queue.c:318-338)."""
    self._queue_buffer(vm, "write_pointer_address", a["write_pointer_address"], PAGE)
    self._queue_buffer(vm, "read_pointer_address", a["read_pointer_address"], PAGE)
    # MES (gfx11) reads the write pointer through the GART: the kernel pins the wptr BO there, which only a GTT BO
    # allows (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_process_queue_manager.c:277-293)
    if self.arch == "gfx1100" and not vm.find(a["write_pointer_address"]).flags & T.GTT:
      raise _err(errno.EINVAL, f"write_pointer_address {a['write_pointer_address']:#x}: MES needs the wptr in a GTT BO (GART-mapped)")
    self._queue_buffer(vm, "ring_base_address", a["ring_base_address"], a["ring_size"])
    if qt == T.QUEUE_SDMA: return
    n = self.node_sizes
    if a["eop_buffer_address"]:
      if a["eop_buffer_size"] != n["eop_buffer_size"]: raise _err(errno.EINVAL, f"eop_buffer_size {a['eop_buffer_size']:#x} != the node's {n['eop_buffer_size']:#x}")
      self._queue_buffer(vm, "eop_buffer_address", a["eop_buffer_address"], a["eop_buffer_size"])
    if a["ctl_stack_size"] != n["ctl_stack_size"]: raise _err(errno.EINVAL, f"ctl_stack_size {a['ctl_stack_size']:#x} != the node's {n['ctl_stack_size']:#x}")
    if a["ctx_save_restore_size"] < n["cwsr_size"]:
      raise _err(errno.EINVAL, f"ctx_save_restore_size {a['ctx_save_restore_size']:#x} < the node's cwsr_size {n['cwsr_size']:#x}")
    total = -(-(a["ctx_save_restore_size"] + n["debug_memory_size"]) * self.props["num_xcc"] // PAGE) * PAGE
    self._queue_buffer(vm, "ctx_save_restore_address", a["ctx_save_restore_address"], total)

  def preempt(self, qid: int | None = None) -> None:
    """Preempt compute queues with waves in flight (HWS oversubscription, eviction, suspend, a debugger): the CP saves
    each XCC's wave state into the queue's CWSR area, XCC i at base + i * ctx_save_restore_size
    (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_mqd_manager_v9.c:691-701; one XCC on gfx11,
    kfd_mqd_manager_v11.c:151-162). A full-occupancy save fills the node's cwsr_size (kfd_queue.c:450-490) however
    little the queue declared, so a too-small area is a GPU VM fault (the queue stops, memory events fire)."""
    with self.lock:
      for q in [self.queues[qid]] if qid is not None else list(self.queues.values()):
        if getattr(q, "ctx_save", None) is None or q.error is not None: continue
        base, size = q.ctx_save
        for xcc in range(self.props["num_xcc"]):
          at = base + xcc * size
          try: q.vm.find(at, self.node_sizes["cwsr_size"])
          except GPUFault as e:
            self.memory_fault(e.va, getattr(q, "gpu_id", None))
            raise q.fail(f"CWSR save of XCC {xcc} at {at:#x}+{self.node_sizes['cwsr_size']:#x} faulted: {e}", fault=True) from None

  def _destroy_queue(self, a: dict) -> None:
    if (q := self.queues.pop(a["queue_id"], None)) is None: raise _err(errno.EINVAL, f"no queue {a['queue_id']}")
    self.doorbells.pop((q.gpu_id, q.qid * 8), None)
    q.destroyed = True

  # ---- events ----
  def _create_event(self, a: dict) -> None:
    if a["event_page_offset"]:
      if self.event_page is not None: raise _err(errno.EINVAL, "the event page was given already")
      page = self._bo(a["event_page_offset"], errno.EINVAL)
      # the kernel maps the page into its own address space through the GART: a GTT BO only
      # (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_events.c:359-403 -> amdgpu_amdkfd_gpuvm.c:2297-2326)
      if not page.flags & T.GTT: raise _err(errno.EINVAL, "the event page must be a GTT BO (the kernel maps it through the GART)")
      self.event_page = page
      if self.event_page.size < KFD_EVENT_LIMIT * 8: raise _err(errno.EINVAL, "event page smaller than 4096 slots")
    if a["event_type"] == T.EVENT_MEMORY:   # a VM fault signals these, carrying the faulting address
      eid = next(i for i in range(T.FIRST_NONSIGNAL_EVENT_ID, 1 << 31) if i not in self.events)
      self.events[eid] = {"signaled": False, "auto_reset": bool(a["auto_reset"]), "memory": None}
      a.update(event_id=eid, event_trigger_data=eid, event_page_offset=0)   # kfd_event_create zeroes it for these
      return
    if a["event_type"] != T.EVENT_SIGNAL: raise _err(errno.EINVAL, f"mock KFD models signal and memory events only (type {a['event_type']})")
    if self.event_page is None:
      # no page given with the first signal event: the kernel allocates one of its own, mapped into no process
      # (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_events.c:101-106, allocate_event_notification_slot); its slots
      # are at addresses hcqrt cannot see, so what a CP writes to "the slot" in the client's page never wakes the wait,
      # and a later page given with event_page_offset is EINVAL (kfd_events.c:366-369)
      self.event_page = KernelEventPage()
    # create_signal_event (linux@026e14a:drivers/gpu/drm/amd/amdkfd/kfd_events.c): ENOSPC once signal_event_count, which
    # starts at 1 for the reserved id 0 (kfd_event_init_process), reaches signal_mapped_size / 8: the BO's size for a
    # page the runtime gave (kfd_event_page_set), 256 slots for the kernel's own
    mapped = getattr(self.event_page, "mapped_size", self.event_page.size)
    signal_events = 1 + sum(1 for e in self.events.values() if "memory" not in e)
    if signal_events >= mapped // 8:
      raise _err(errno.ENOSPC, f"CREATE_EVENT: the signal page's {mapped // 8} slots are all taken ({signal_events} signal events with id 0)")
    eid = next(i for i in range(mapped // 8) if i not in self.events and i not in self.reserved_event_ids)
    self.events[eid] = {"signaled": False, "auto_reset": bool(a["auto_reset"])}
    self._slot(eid, T.UNSIGNALED_EVENT_SLOT)
    # kfd_event_create: event_page_offset is KFD_MMAP_TYPE_EVENTS for a signal event (0 for any other)
    a.update(event_id=eid, event_slot_index=eid, event_trigger_data=eid, event_page_offset=T.MMAP_TYPE_EVENTS)

  def _slot(self, eid: int, v: int | None = None) -> int:
    assert self.event_page is not None
    c = ctypes.c_uint64.from_address(self.event_page.host + 8 * eid)   # what the kernel reads: memory, not the L2
    if v is not None: c.value = v
    return c.value

  def _ev(self, eid: int) -> dict:
    if eid not in self.events: raise _err(errno.EINVAL, f"no event {eid}")
    return self.events[eid]
  def _destroy_event(self, a: dict) -> None: self._ev(a["event_id"]); del self.events[a["event_id"]]
  def _set_event(self, a: dict) -> None: self._ev(a["event_id"]); self._signal(a["event_id"], None)
  def _reset_event(self, a: dict) -> None: self._ev(a["event_id"])["signaled"] = False

  def _signal(self, e: int, source: Hashable | None) -> bool:
    """Signal event `e` for `source`; True if it was not signalled yet. Sources: (serial, xcc), a queue's interrupt
    from XCC `xcc` ordered after that XCC's earlier end-of-pipe releases of the queue (a RELEASE_MEM end-of-pipe INT_SEL
    2, an AQL completion signal on a node of one XCC, an SDMA TRAP as XCC 0: cp.py Queue.interrupted; serial: cp.py
    Queue.serial, never reused, unlike KFD queue ids); (serial, "completion"), an AQL completion signal's interrupt on
    a node of several XCCs, raised by an XCC no source names (aql.py complete); (serial, "eos"), its end-of-shader
    RELEASE_MEM interrupt (cp.py release_mem); (serial, "error"), an AQL queue's error report through its
    queue_inactive_signal (aql.py _write_inactive_signal); None, what no queue's order covers: the host's SET_EVENT, a
    queue exception the kernel passes on through the CWSR header (queue_exception), a VM fault (memory_fault). The event
    keeps every source since it was last unsignalled ("by"): a WAIT_EVENTS that consumes it may have been woken by any
    one of them, so it lands a queue's releases on an XCC only when that queue's interrupt from that XCC is the one
    source (_wait_events)."""
    ev = self.events[e]
    new = not ev["signaled"]
    ev["signaled"], ev["by"] = True, {source} if new else ev.get("by", set()) | {source}
    return new

  def interrupt(self, ctxid: int, eop: bool = False, source: Hashable | None = None) -> list[int]:
    """A CP interrupt carrying an event id (RELEASE_MEM INT_SEL 2, an AQL signal's mailbox: `eop`) or an SDMA trap
    interrupt: signal the event it names if its slot was written, else every signal event whose slot was written, of
    ids below KFD_SIGNAL_EVENT_LIMIT only (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_events.c,
    kfd_signal_event_interrupt). On GC >= 9.4.1 (gfx942) the top half drops end-of-pipe interrupts whose context id is 0
    (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_int_process_v9.c:331-336). Returns the events it newly
    signalled: a WAIT_EVENTS that consumes one of them saw this interrupt (an event already signalled merges it, so
    its waiter may have seen only an earlier one: cp.py Queue.interrupted). `source`: who raised it (_signal)."""
    self.interrupts.append(ctxid)
    if eop and ctxid == 0 and self.arch == "gfx942": return []
    if self.event_page is None: return []
    # Only slots below KFD_SIGNAL_EVENT_LIMIT are ever read (kfd_events.c): the named one only if ctxid < 4096
    # (:165-166; the gfx9-gfx11 handlers pass 23 to 32 valid bits, so the single lookup of :171-176); the exhaustive
    # search, taken when that finds no event (:771-773), walks the event IDR in id order and stops at the first id >=
    # 4096 (:786-797), or with 63 or more signal events (the count includes the reserved id 0, :252-256) walks slots
    # 1..4095 (:798-806); either way it sets only signal events (event_can_be_gpu_signaled, :318-322). So a memory event
    # (id >= KFD_FIRST_NONSIGNAL_EVENT_ID, kfd_events.h:40) is never read, nor is a signal event whose id a page of more
    # than 4096 slots let reach 4096 or more (:122; kfd_event_page_set keeps the page's whole size, :337-356):
    # interrupts wake nobody on it
    hit = [ctxid] if ctxid < KFD_EVENT_LIMIT and ctxid in self.events and self._slot(ctxid) != T.UNSIGNALED_EVENT_SLOT else \
          [e for e in sorted(self.events) if e < KFD_EVENT_LIMIT and self._slot(e) != T.UNSIGNALED_EVENT_SLOT]
    new = [e for e in hit if self._signal(e, source)]
    for e in hit: self._slot(e, T.UNSIGNALED_EVENT_SLOT)
    return new

  def memory_fault(self, va: int, gpu_id: int | None = None) -> None:
    """A GPU VM fault on GPU `gpu_id` (default: the served one): every memory event of the process fires with the
    faulting address and that GPU's id (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_events.c:1213-1247,
    kfd_signal_vm_fault_event); the queue itself is stopped by the CP, the other GPUs' queues run on."""
    for e, ev in self.events.items():
      if "memory" in ev:
        self._signal(e, None)
        ev["memory"], ev["fault_gpu"] = va, self.gpu_id if gpu_id is None else gpu_id

  def user_read(self, addr: int, n: int) -> bytes | None:
    """What get_user/copy_from_user read at a CPU address of the process, or None (EFAULT) where the process has no
    CPU mapping (the mock sees only the BOs mapped through the render node)."""
    for b in self.bos.values():
      for at, length, off in b.cpu_at:
        if at <= addr and addr + n <= at + length: return ctypes.string_at(b.host + off + addr - at, n)
    return None
  def user_write(self, addr: int, data: bytes) -> bool:
    for b in self.bos.values():
      for at, length, off in b.cpu_at:
        if at <= addr and addr + len(data) <= at + length: ctypes.memmove(b.host + off + addr - at, data, len(data)); return True
    return False

  def queue_exception(self, q: Queue, ec: int) -> None:
    """A queue exception (CP bad opcode, a wave trap) with the runtime enabled: kfd_set_dbg_ev_from_interrupt passes
    it to kfd_send_exception_to_runtime (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_debug.c:219-235), whose work
    handler (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_process.c:2225-2236) get_user's err_payload_addr from
    the CWSR header at the queue's ctx_save_restore_address (a CPU address), ORs KFD_EC_MASK(ec) into the payload
    word, get_user's err_event_id and sets that event. Failed get_user's read 0 and their errors are ignored; event 0
    is the reserved one, so an unmapped or unfilled header wakes nobody (the process's wait times out)."""
    if not self.runtime_enabled or q.kind == T.QUEUE_SDMA or getattr(q, "ctx_save", None) is None: return
    hdr = self.user_read(q.ctx_save[0], T.CWSR_HEADER_BYTES)
    if hdr is None: return
    payload, ev = struct.unpack_from("<Q", hdr, T.CWSR_HEADER_ERR_PAYLOAD)[0], struct.unpack_from("<I", hdr, T.CWSR_HEADER_ERR_EVENT)[0]
    if (cur := self.user_read(payload, 8)) is not None: self.user_write(payload, struct.pack("<Q", struct.unpack("<Q", cur)[0] | 1 << (ec - 1)))
    if ev in self.events and "memory" not in self.events[ev]: self._signal(ev, None)
    self.work.notify_all()

  def _wait_events(self, a: dict) -> None:
    n = a["num_events"]
    if n > KFD_EVENT_LIMIT: raise _err(errno.EINVAL, f"num_events {n} > {KFD_EVENT_LIMIT}")
    raw = ctypes.string_at(a["events_ptr"], 48 * n)
    ids = [T.EVENT_DATA.unpack(raw[48 * i:48 * i + 48])["event_id"] for i in range(n)]
    for e in ids: self._ev(e)
    deadline = time.perf_counter() + a["timeout"] / 1000
    while True:   # the engine thread runs the queues; this only sleeps until an interrupt signals an event
      # the process ended meanwhile (`exit`, from another thread): its events are gone, and none of them completed.
      # A real process's waiter dies with it (exit_group kills it in the wait); here the call fails, never completes
      if self.exited: raise _err(errno.EBADF, "mock KFD: WAIT_EVENTS: the process exited during the wait (MockKFD.exit)")
      if self.report_queue_errors: self._raise_queue_error()
      done = [self.events[e]["signaled"] for e in ids if e in self.events]
      if (all(done) if a["wait_for_all"] else any(done)):
        # the interrupts behind the events it consumes have been raised: their queues' releases have completed, and so
        # have the L1 / GL1 invalidates they carried (cp.py land_pending). A release lands only through an event every
        # signal of which since it was last unsignalled came from its own queue's CP on its own XCC after it (p.events:
        # newly signalled by such an interrupt; "by": no other source since; another XCC's interrupt, or one of an XCC
        # no source names, may come first on hardware: review amd40b finding 1). Another source (the SDMA trap the
        # backend raises on the same event, hcqrt/amd/device.py; a host SET_EVENT) may have woken this waiter first,
        # before the release completed: the mock runs the engines in one order, hardware in any (review l1c row 5)
        seen = {e for e in ids if e in self.events and self.events[e]["signaled"]}
        def proven(p) -> bool: return any(self.events[e].get("by") == {(p.queue, p.xcc)} for e in p.events & seen)
        for n in self.nodes.values(): land_pending(n.vm, proven)
        for i, e in enumerate(ids):
          ev = self.events[e]
          if ev.get("memory") is not None and ev["signaled"]:   # copy the exception data back into the caller's record
            rec = T.MEMORY_EXCEPTION.pack({"NotPresent": 1, "va": ev["memory"], "gpu_id": ev.get("fault_gpu", self.gpu_id)})
            ctypes.memmove(a["events_ptr"] + 48 * i, rec, len(rec))
          if ev["auto_reset"] and ev["signaled"]: ev["signaled"] = False
        a["wait_result"] = 0; return
      if (left := deadline - time.perf_counter()) <= 0:
        self.wait_timeouts += 1
        # a slot the CP wrote with no interrupt to signal it: the wait slept out its timeout for nothing
        self.missed_wakeups += any(e in self.events and "memory" not in self.events[e] and self._slot(e) != T.UNSIGNALED_EVENT_SLOT for e in ids)
        a["wait_result"] = 1; return
      self.work.wait(left)

  def _raise_queue_error(self) -> None:
    """(tests: settle(), and WAIT_EVENTS with `report_queue_errors`) Raise, once, the error a queue stopped on that
    is not a VM fault. No kernel does this: the process learns of it only through `queue_exception`."""
    for q in self.queues.values():
      if q.error is not None and not q.reported:
        q.reported = True
        raise GPUError(q.error)

  # ---- mmap / doorbells ----
  def mmap(self, fd: int, length: int, prot: int, flags: int, offset: int, addr: int | None) -> int:
    with self.lock:
      if self.exited: raise _err(errno.EBADF, f"mock KFD: fd {fd} belongs to a process that has exited (MockKFD.exit)")
      if fd in self.render_fds:
        # a BO's mmap offset lives in its own GPU's DRM device: another GPU's render node does not know it
        node = next(n for n in self.nodes.values() if fd in n.render_fds)
        bo = next((b for b in self.bos.values() if getattr(b, "mmap_offset", None) == offset and b.handle >> 32 == node.gpu_id), None)
        if bo is None: raise _err(errno.EINVAL, f"render node mmap: offset {offset:#x} names no BO of gpu_id {node.gpu_id:#x}")
        # ALLOC allowed the BO's mmap offset to the PDD's file only (drm_vma_node_allow(..., drm_priv),
        # linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/amdgpu_amdkfd_gpuvm.c:1828); drm_gem_mmap refuses any other file
        # of the device: another render fd, or a new one after the acquired one closed (drm_gem.c:1185-1188)
        if fd != node.vm_acquired: raise _err(errno.EACCES, f"render node mmap: fd {fd} is not the file ACQUIRE_VM bound for gpu_id {node.gpu_id:#x} (the BO is allowed to that one only)")
        if bo.flags & T.VRAM and not bo.flags & T.PUBLIC: raise _err(errno.EPERM, f"BO at {bo.va:#x} is VRAM without PUBLIC (NO_CPU_ACCESS)")
        if length > bo.size: raise _err(errno.EINVAL, f"mmap of {length:#x} bytes of a {bo.size:#x}-byte BO")
        return bo.map_cpu(addr, length, prot)
      if fd not in self.kfd_fds: raise _err(errno.ENODEV, "mmap of an unknown fd")
      kind, gpu = offset >> 62, (offset >> 46) & 0xFFFF
      if kind != T.MMAP_DOORBELL: raise _err(errno.EINVAL, f"/dev/kfd mmap type {kind} is not modelled (dGPU event pages are user BOs)")
      if gpu not in self.nodes: raise _err(errno.EINVAL, f"doorbell mmap for unknown gpu_id {gpu:#x}")
      if length != DOORBELL_FRAME: raise _err(errno.EINVAL, f"doorbell mmap of {length:#x} bytes (the process frame is {DOORBELL_FRAME:#x})")
      a = syscalls.mmap(-1, length, _mmap.PROT_READ | _mmap.PROT_WRITE, _mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS | (syscalls.MAP_FIXED if addr else 0), 0, addr)
      self.doorbell_maps.append((a, length, 0, gpu))
      return a

  def munmap(self, addr: int, length: int) -> None:
    syscalls.munmap(addr, length)
    self.forget_mapping(addr, length)

  def forget_mapping(self, addr: int, length: int) -> None:
    """[addr, addr+length) is unmapped: by munmap, or replaced by a MAP_FIXED mmap (syscalls.mmap), which drops the
    GEM references of the VMAs it covers as a munmap does."""
    with self.lock:
      # the part of a doorbell frame left mapped still rings its doorbells: a partial unmap splits the VMA, each part
      # keeping its own pgoff and PTEs (linux@v6.12.117:mm/vma.c:370-414, __split_vma)
      self.doorbell_maps = [(*p, g) for a, n, o, g in self.doorbell_maps for p in _unmapped((a, n, o), addr, length)]
      # what stays mapped of each mapping: a munmap of part of one leaves the rest, whose VMA still holds the GEM
      # reference (split VMAs each take one, drm_gem_vm_open, linux@v6.12.117:drivers/gpu/drm/drm_gem.c:1100-1106)
      for b in [*self.bos.values(), *self.freed_mapped]: b.cpu_at = [p for m in b.cpu_at for p in _unmapped(m, addr, length)]
      gone = [b for b in self.freed_mapped if not b.cpu_at]
      self.freed_mapped = [b for b in self.freed_mapped if b.cpu_at]
      for b in gone: self._release(b)   # (the last mapping of a freed BO: its GEM reference goes, _free_memory_of_gpu)

  def mmio_write64(self, addr: int, value: int) -> None:
    base, gpu = next(((a - o, g) for a, n, o, g in self.doorbell_maps if a <= addr < a + n), (None, None))
    ctypes.c_uint64.from_address(addr).value = value
    if base is None: return
    with self.lock:
      q = self.doorbells.get((gpu, addr - base))   # each GPU's doorbell frame rings only its own queues
      if q is None: return   # a doorbell no queue owns: the hardware ignores it
      self.doorbell_writes += 1
      if self._hold: self._held[id(q)] = (q, value); return   # (held mode: the CP has not seen it yet)
      q.target = value
      self._kick()

  def mmio_write32(self, addr: int, value: int) -> None:
    raise GPUError(f"mock KFD: 32-bit store to {addr:#x}; SOC15+ doorbells are 64-bit")

  # ---- the GPU ----
  # The doorbell only tells the CP there is work: it runs later, on the engine thread, while the process goes on
  # (hardware queues run asynchronously to the host), so a buffer freed or rewritten while work is in flight, or a
  # missing wait, shows up as a VM fault or a wrong result. `latency_s` delays the start to widen such races.
  # Held mode is latency_s's extreme, chosen by the test: the CP sees the held doorbells only at release(). A queue
  # may wait arbitrarily long for the CP: the KFD unmaps a process's queues when it evicts the process (amdkfd
  # kfd_device_queue_manager.c evict_process_queues_cpsch) and maps them again only when its restore worker has run
  # (kfd_process.c restore_process_worker); and with more queues than the scheduler maps at once the runlist is
  # over-subscribed and chained, run in turns (kfd_packet_manager.c pm_calc_rlib_size, pm_create_runlist_ib; function
  # names: the line numbers at linux@v6.12.117 not checked). It holds every GPU of this process (one CP engine serves them).
  # A host wait on held work ends in the runtime's own timeout error (AMDDevice.wait_signal, wait_timeout_s).
  def release(self, keep_holding: bool = False) -> int:
    """The CP sees every held doorbell now (the engine runs them as after any doorbell); `keep_holding`: later doorbells
    are held again. Returns how many queues had one held."""
    with self.lock:
      self._hold, held, self._held = keep_holding, self._held, {}
      for q, value in held.values(): q.target = value
      if held: self._kick()
      return len(held)

  def _kick(self) -> None:
    due = time.perf_counter() + self.latency_s
    self._due = due if self._due is None else min(self._due, due)
    if self._engine is None or not self._engine.is_alive():
      self._engine = threading.Thread(target=self._run_engine, daemon=True, name="amdmock-cp")
      self._engine.start()
    self.work.notify_all()

  def _run_engine(self) -> None:
    with self.lock:
      idle_since, poll = time.perf_counter(), False
      while True:
        now = time.perf_counter()
        if self._due is not None and now < self._due: self.work.wait(self._due - now); continue
        if self._due is not None or poll:
          self._due, poll = None, False
          t0 = time.perf_counter_ns()
          try: self.run_all()
          finally: self.busy_ns += time.perf_counter_ns() - t0   # time "on the GPU", so benchmarks can take it out
          self.work.notify_all()   # interrupts were raised: wake WAIT_EVENTS and settle()
          idle_since = time.perf_counter()
          continue
        # parked on a WAIT_REG_MEM / POLL_REGMEM a host write may satisfy (the mock cannot see host stores): poll
        if self.blocked(): self.work.wait(0.0005); poll = True; continue
        if now - idle_since > 0.05: self._engine = None; return   # idle: the next doorbell starts a new engine thread
        self.work.wait(0.05)

  def stall(self) -> None:
    """The CP falls behind for `release_stall_s` (the host runs meanwhile and sees what was released so far)."""
    if self.release_stall_s > 0:
      self.work.notify_all()
      self.work.wait(self.release_stall_s)

  def run_all(self) -> None:
    """Run every queue until all are empty, blocked or stopped (errors stay on the queue, q.error)."""
    with self.lock:
      progressed = True
      while progressed:
        progressed = False
        for q in list(self.queues.values()):   # (a queue destroyed meanwhile, e.g. by a finalizer on this thread, is skipped)
          try: progressed |= q.run()
          except GPUError: pass

  def blocked(self) -> bool:
    return any(q.error is None and q._avail() > 0 for q in self.queues.values())

  def settle(self, timeout_s: float = 10.0) -> None:
    """(tests) Wait until the engine has run everything it can, then raise the error a queue stopped on, if any."""
    deadline = time.perf_counter() + timeout_s
    with self.lock:
      while self._due is not None:   # (the engine holds the lock while it runs: with it here, nothing is mid-run)
        if time.perf_counter() > deadline: raise TimeoutError("mock KFD: the engine did not settle")
        self.work.wait(0.01)
      self._raise_queue_error()
