"""The mock GPU's command processors: a PM4 executor for compute queues (the MEC) and an SDMA executor, both
driven by doorbell writes, reading their rings and indirect buffers from the process's GPUVM.

Harmful-but-legal behaviour: DISPATCH_DIRECTs not separated by a CS_PARTIAL_FLUSH / RELEASE_MEM are queued and
run together at the next such point, newest first (a missing barrier between dependent kernels shows); CP writes
to cached memory stay in the L2 until a write-back (memory.py), and an L2 invalidate without write-back loses them;
the per-CU vector L1s / GL0s and gfx11's per-SA GL1s keep what earlier dispatches filled until an ACQUIRE_MEM with
their invalidate bit (GLV_INV / GL1_INV, gfx9/l1.py), or a waited-on release that carries it; the PM4 read pointer
wraps at the ring size; only INT_SEL 2 interrupts; the queues run on the MockKFD's engine
thread, after the doorbell (kfd.py); an SDMA copy into memory another GPU maps (a peer's VRAM, a GTT bounce buffer)
lands only after every other queue, the other GPUs' included, had its turn (`Queue.lands_late`). Shader code runs through `EXECUTOR`, one
pluggable function (the RDNA3 emulator plugs in here); the mock decodes everything it needs from the packets
and registers itself (program address, RSRC1/2/3, user SGPRs, grid, wave size, scratch: COMPUTE_TMPRING_SIZE and
COMPUTE_DISPATCH_SCRATCH_BASE), never from the backend.
"""
from __future__ import annotations
import struct, time
from dataclasses import dataclass, field
from collections.abc import Callable
from hcqrt.mock.amd import tables as T
from hcqrt.mock.icache import stale_range
from hcqrt.mock.amd.memory import GPUVM, GPUFault
from hcqrt.mock.amd.rdna3.launch import USER_POISON, ScratchRing

class GPUError(RuntimeError):
  """A queue hit something the hardware would fault or hang on; the queue stops (like a KFD queue reset)."""

class Blocked(Exception):
  """A WAIT_REG_MEM / POLL_REGMEM whose condition does not hold yet: the queue stays at that packet."""

class Later(Exception):
  """A packet that takes effect only on the engine's next round: every other queue of the box runs first."""

@dataclass
class Dispatch:
  """One DISPATCH_DIRECT as the CP saw it. `grid` is in workgroups, `block` in work-items; `user_data` are the
  values of the first USER_SGPR SGPRs (COMPUTE_USER_DATA_*), loaded into s0.. of every wave."""
  arch: str
  program: int
  rsrc1: int
  rsrc2: int
  rsrc3: int
  user_data: list[int]
  grid: tuple[int, int, int]
  block: tuple[int, int, int]
  initiator: int
  queue: str = ""
  regs: dict[int, int] = field(default_factory=dict, repr=False)
  xcc_workgroups: tuple[int, ...] = ()   # workgroups each XCC of the node runs (index = logical XCC id)
  scratch: ScratchRing | None = None     # the scratch slots the CP set up (RSRC2.SCRATCH_EN), else None
  shader_arrays: int = 1                 # the GPU's shader arrays (KFD topology array_count): gfx11's GL1s

  @property
  def wave32(self) -> bool: return bool(self.initiator & T.DI_CS_W32_EN)
  @property
  def user_sgprs(self) -> int: return (self.rsrc2 >> 1) & 0x1F
  @property
  def lds_bytes(self) -> int: return ((self.rsrc2 >> 15) & 0x1FF) * 512
  @property
  def kernarg(self) -> int:
    """The 64-bit pointer in user SGPRs s[0:1] (where a kernel with only ENABLE_SGPR_KERNARG_SEGMENT_PTR finds it)."""
    return self.user_data[0] | (self.user_data[1] << 32) if len(self.user_data) >= 2 else 0

  def descriptor(self) -> bytes:
    """A 64-byte kernel descriptor rebuilt from the registers (code at offset 0 of `program`), for an executor
    whose API takes one: LDS size, RSRC1/2/3, and kernarg-pointer / wave32 properties as the registers imply."""
    props = (1 << 3 if self.user_sgprs >= 2 else 0) | (1 << 10 if self.wave32 else 0)
    return struct.pack("<III4xq20xIIIHH4x", self.lds_bytes, 0, 0, 0, self.rsrc3, self.rsrc1, self.rsrc2, props, 0)

# An executor gets the Dispatch and the GPUVM: `vm.read(d.program, n)` is the machine code (the mock never asks the
# backend what it loaded), `d.descriptor()` a 64-byte kernel descriptor, `d.kernarg` the argument pointer, `vm.flat_map()`
# the [(va, size, host address)] memory map, `d.grid` / `d.block` the sizes. A fault raises GPUFault.
def _no_executor(d: Dispatch, vm: GPUVM) -> None:
  raise GPUError(f"mock AMD: no machine-code executor installed, so the dispatch of the program at {d.program:#x} cannot run "
                 "(the RDNA3 emulator, hcqrt/mock/amd/rdna3, plugs in through hcqrt.mock.amd.cp.set_executor)")

def _default_executor() -> Callable[[Dispatch, GPUVM], None]:
  try: from hcqrt.mock.amd import rdna3_executor   # the merge point: an adapter module around the RDNA3 emulator
  except ImportError: return _no_executor
  return rdna3_executor.run   # type: ignore[attr-defined]

EXECUTOR: Callable[[Dispatch, GPUVM], None] | None = None

def set_executor(fn: Callable[[Dispatch, GPUVM], None] | None) -> Callable[[Dispatch, GPUVM], None] | None:
  """Install the function that runs a decoded dispatch's machine code (None: the default); returns the previous one."""
  global EXECUTOR
  prev, EXECUTOR = EXECUTOR, fn
  return prev

def execute(d: Dispatch, vm: GPUVM) -> None:
  """Run the dispatch's machine code. Its loads read through the GPU L2, which holds the CP's own writes (WRITE_DATA
  to memory, a RELEASE_MEM without the write-back: memory.py write_cached): the CP is a client of that L2 (a
  WRITE_DATA's CACHE_POLICY is the L2's LRU / stream allocation and its dst_sel 2 names the GL2 itself:
  linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/nvd.h:88-102, soc15d.h:115-130), as are the CUs, so a dispatch
  after the write sees it whether or not the L2 was written back (GPUVM.l2_seen_by_shaders). The executor reads the
  BOs' bytes, which hold no L2. Mesa relies on this on GFX9-GFX11 and acts on the L2 only on GFX12, the one level
  with cp_sdma_ge_use_system_memory_scope (mesa@246051eb:src/amd/common/ac_gpu_info.c:1130):
  - radv's encode_nodes writes a header field with radv_update_buffer_cp (WRITE_DATA, dst_sel 5 "memory" on a
    compute queue: mesa@20be7296:src/amd/vulkan/meta/radv_meta_buffer.c:365-384) and then dispatches the encode
    shader, which atomically adds to that field, with no L2 action between
    (mesa@3acab3df:src/amd/vulkan/radv_acceleration_structure.c:1157-1181, bvh/encode.comp:146);
  - radeonsi: "Indirect buffers are read through L2 on GFX9-GFX11, but not other hw"
    (mesa@799a0a98:src/gallium/drivers/radeonsi/si_compute.c:1213-1221), and after writing bindless descriptors
    with WRITE_DATA (dst_sel 2, the L2 itself) it drops only the scalar L0s, invalidating the L2 only where cp_sdma_ge_use_system_memory_scope
    (mesa@2272db2a:src/gallium/drivers/radeonsi/si_descriptors.c:1887-1888, 1922-1927)."""
  check_icache(d, vm)
  with vm.l2_seen_by_shaders(): (EXECUTOR or _default_executor())(d, vm)

ICACHE_SPAN = 1 << 16   # bytes from a program's entry the model treats as its cached code (the rest of its BO, at most this)

def check_icache(d: Dispatch, vm: GPUVM) -> None:
  """The instruction caches hold the code an earlier dispatch fetched (until an ACQUIRE_MEM drops them: Queue.packet):
  a dispatch whose code bytes differ from what the caches hold for those addresses (new code loaded where a freed
  program was) would run the stale lines, on hardware silently; the mock refuses it, naming the address."""
  bo = vm.find(d.program)
  code = bytes(vm.read(d.program, min(bo.va + bo.size - d.program, ICACHE_SPAN)))
  if (stale := stale_range(vm.icache.items(), d.program, code)) is not None:
    raise GPUError(f"the program at {d.program:#x} runs stale instruction-cache lines: the code at {stale[1]:#x}..{stale[2]:#x} changed "
                   "since a dispatch fetched it and no ACQUIRE_MEM invalidated the I$ (gfx9 SH_ICACHE_ACTION_ENA, gfx10+ GLI_INV) since")
  vm.icache[d.program] = code

def pm4_xcc_share(workgroups: int, num_xcc: int) -> tuple[int, ...]:
  """Workgroups per XCC of a PM4 dispatch. On a multi-XCC node the kernel gives each XCC's copy of a PM4 queue's MQD
  COMPUTE_TG_CHUNK_SIZE 0, logical XCC id 0 and one pm4_target_xcc (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/
  kfd_mqd_manager_v9.c:680-723, init_mqd_v9_4_3): the dispatch is not split, the target XCC runs all of it and the
  other XCCs none (tinygrad's PM4 path had to program TG_CHUNK_SIZE / CURRENT_LOGIC_XCC_ID per XCC itself, commit
  5908b89f71). 1/num_xcc of the GPU: the mock records the share so a test can see it.

  >>> pm4_xcc_share(16, 8)
  (16, 0, 0, 0, 0, 0, 0, 0)
  """
  return (workgroups,) + (0,) * (max(1, num_xcc) - 1)

def aql_xcc_share(workgroups: int, num_xcc: int) -> tuple[int, ...]:
  """Workgroups per logical XCC of an AQL dispatch: the AQL queue's MQD copies get COMPUTE_TG_CHUNK_SIZE 1 and logical
  ids 0..num_xcc-1 (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_mqd_manager_v9.c:677, 680-723). INFERRED, not in
  the sources: workgroup i runs on logical XCC i % num_xcc (chunks of one workgroup dealt round robin).

  >>> aql_xcc_share(10, 8)
  (2, 2, 1, 1, 1, 1, 1, 1)
  """
  n = max(1, num_xcc)
  return tuple(workgroups // n + (x < workgroups % n) for x in range(n))

def _cmp(func: int, v: int, ref: int) -> bool:
  return [True, v < ref, v <= ref, v == ref, v != ref, v >= ref, v > ref, False][func & 7]

@dataclass
class PendingInvalidate:
  """A release's L1 / GL1 invalidate not yet seen complete (Queue.release_l1_invalidate): the fence it writes (`width`
  bytes at `addr`, `old` before it, `new` after), the caches' marks, the queue that issued it (its EOP events retire in
  order; its Queue.serial, not its KFD id, which a later queue may reuse) and the KFD events a later interrupt of that
  queue newly signalled (a WAIT_EVENTS that consumes one saw it)."""
  addr: int
  width: int
  old: int
  new: int
  marks: list
  queue: int   # Queue.serial
  events: set[int] = field(default_factory=set)
  xcc: int = 0   # the XCC whose CP ran it (an AQL PM4-IB runs once per XCC; each XCC retires its own events in order)

  def window(self, v: int, addr: int, n: int, mask: int) -> int:
    """The bits of fence value `v` a wait comparing the `n` bytes at `addr` under `mask` sees."""
    return (v >> 8 * (addr - self.addr)) & ((1 << 8 * n) - 1) & mask

  def proven_by(self, addr: int, n: int, func: int, ref: int, mask: int) -> bool:
    """Does a wait that passed comparing (`func`, `ref`, `mask`) the `n` bytes at `addr` prove this release wrote its
    fence? Only if the fence's value before the release could not have passed it and the release's value could.

    >>> p = PendingInvalidate(0x100, 4, 0, 1, [], 1)
    >>> p.proven_by(0x100, 4, 5, 1, ~0), p.proven_by(0x100, 4, 5, 0, ~0), p.proven_by(0x104, 4, 5, 1, ~0)
    (True, False, False)
    """
    if not (self.addr <= addr and addr + n <= self.addr + self.width): return False
    return not _cmp(func, self.window(self.old, addr, n, mask), ref) and _cmp(func, self.window(self.new, addr, n, mask), ref)

def land_pending(vm: GPUVM, proven: Callable[[PendingInvalidate], bool]) -> None:
  """Drop the lines of the pending invalidates `proven` says have run, and of every earlier one of the same queue: the
  CP retires a queue's end-of-pipe events in order, which the kernel relies on when one fence value read signals every
  earlier fence of the ring (amdgpu_fence_process signals each slot from the last seen sequence number up to the one
  the ring's fence now holds: linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/amdgpu_fence.c:255-298). An SDMA queue runs
  its packets in order too (Queue.step_sdma).
  That source shows end-of-pipe events (EOP, event_index 5) after EOP only: an end-of-shader release (EOS, event_index
  6), which may complete before an earlier EOP, is never filed here (Queue.release_mem; review l1c row 3)."""
  if not vm.l1_pending: return
  last: dict[tuple[int, int], int] = {}
  for i, p in enumerate(vm.l1_pending):
    if proven(p): last[p.queue, p.xcc] = i
  if not last: return
  keep = []
  for i, p in enumerate(vm.l1_pending):
    if i <= last.get((p.queue, p.xcc), -1):
      for c, mark in p.marks: c.drop_marked(mark)
    else: keep.append(p)
  vm.l1_pending = keep

class Queue:
  """A user-mode queue the mock KFD created: ring, rptr/wptr in the client's memory, doorbell value as the target."""
  def __init__(self, kfd, qid: int, kind: int, vm: GPUVM, ring_va: int, ring_size: int, rptr_va: int, wptr_va: int, arch: str):
    self.kfd, self.qid, self.kind, self.vm, self.arch = kfd, qid, kind, vm, arch
    # What the mock's ordering state (PendingInvalidate.queue, interrupt sources) knows the queue by. Not the KFD queue
    # id: the kernel hands the lowest free one to the next queue at once (find_first_zero_bit,
    # linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_process_queue_manager.c:61-81; freed by pqm_destroy_queue, :560),
    # and a new queue's interrupts retire in order with its own releases only, not with a destroyed queue's end-of-pipe
    # events still in flight (nothing orders those; review amd40 finding 2)
    self.serial = next(kfd.queue_serials)
    self.gfx = 11 if arch == "gfx1100" else 9
    self.ring_va, self.ring_size, self.rptr_va, self.wptr_va = ring_va, ring_size, rptr_va, wptr_va
    self.pos = 0          # PM4: dwords consumed; SDMA: bytes consumed (both monotonic)
    self.target = 0       # the last doorbell value
    self.ibs: list[list[int]] = []   # PM4 indirect buffers being executed: [va, ndwords, pos]
    self.regs: dict[int, int] = {}
    self.pending: list[Dispatch] = []
    self.dispatches: list[Dispatch] = []   # every dispatch decoded (tests read them)
    self.error: str | None = None
    self.reported = False   # the process was told of `error`
    self.destroyed = False  # DESTROY_QUEUE took it (its memory may be gone)
    self.ib_count = 0
    self.name = f"{'SDMA' if kind == T.QUEUE_SDMA else 'compute'} queue {qid}"
    self.gpu_id = 0           # the GPU it runs on (the KFD sets it)
    self._held = False        # the copy at the queue's head was held back one engine round (lands_late)
    self.late_copies = 0      # copies held so (tests count them)
    self.copies: list[tuple[int, int, int]] = []   # (dst, src, bytes) of every SDMA COPY it ran, in order (tests read them)
    self.gcrs: list[int] = []   # GCR_CONTROL of every SDMA GCR_REQ it ran, in order (tests read them)
    self.gcr_l1: list | None = None   # an SDMA GCR_REQ's GL0 / GL1 invalidates waiting for the queue's next FENCE (_marks)

  @property
  def sdma(self) -> bool: return self.kind == T.QUEUE_SDMA
  @property
  def rptr(self) -> int:
    """What the engine reports at the read-pointer address. PM4: a 32-bit dword offset that wraps at the ring size
    ("On PM4 queues Rptr is always 32-bit in dword units and wraps at queue size",
    ROCm/ROCR-Runtime@c7785a6:libhsakmt/tests/kfdtest/src/PM4Queue.cpp:44-55; the kernel's own PM4 queue reads it
    so, linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_kernel_queue.c:241-256). SDMA: a monotonic byte count
    (ROCR-Runtime@c7785a6:libhsakmt/tests/kfdtest/src/SDMAQueue.cpp:45-62)."""
    return self.pos if self.sdma else self.pos % (self.ring_size // 4)

  def fail(self, msg: str, fault: bool = False, ec: int = T.EC_QUEUE_PACKET_UNSUPPORTED) -> GPUError:
    """Stop the queue. A VM fault reaches the process through its memory events (`fault`); any other error is a
    queue exception `ec` (a packet the CP rejects raises the CP bad-opcode interrupt with its packet error code,
    linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_int_process_v11.c:332-339; a wave that cannot go on traps,
    :360-365), which the kernel hands to the runtime through the CWSR header (MockKFD.queue_exception)."""
    self.error, self.reported = f"{self.name}: {msg}", fault
    self.pending.clear()
    if not fault: self.kfd.queue_exception(self, ec)
    return GPUError(self.error)

  def _dw(self, i: int) -> int:
    """Dword i of the current stream (the innermost IB, or the ring)."""
    if self.ibs: return self.vm.read32(self.ibs[-1][0] + 4 * i)
    off = ((self.pos + i) * 4 if not self.sdma else self.pos + 4 * i) % self.ring_size
    return self.vm.read32(self.ring_va + off)

  def _avail(self) -> int:
    """Dwords left in the current stream."""
    if self.ibs: return self.ibs[-1][1] - self.ibs[-1][2]
    return (self.target - self.pos) if not self.sdma else (self.target - self.pos) // 4

  def xcc(self) -> int:
    """The XCC running the current IB (an AQL queue's PM4-IB runs once per XCC, aql.py); 0 on the ring."""
    return self.ibs[-1][3] if self.ibs and len(self.ibs[-1]) > 3 else 0

  def _advance(self, n: int) -> None:
    if self.ibs:
      self.ibs[-1][2] += n; self.ibs[-1][0] += 4 * n
      if self.ibs[-1][2] >= self.ibs[-1][1]: self.ibs.pop()
    else: self.pos += n * (1 if not self.sdma else 4)

  def run(self) -> bool:
    """Execute packets until the stream is empty or blocked; True if any progressed."""
    if self.error is not None or self.destroyed: return False
    progressed = False
    try:
      while self._avail() > 0:
        n = self.step_sdma() if self.sdma else self.step_pm4()
        self._advance(n); progressed = True
      if not self.sdma: self.drain()   # nothing else queued behind them: the dispatches complete
    except Blocked: pass
    except Later: progressed = True   # the engine comes round again, after the other queues
    except GPUFault as e:
      self.kfd.memory_fault(e.va, getattr(self, "gpu_id", None))
      raise self.fail(str(e), fault=True) from None
    finally:
      if not self.destroyed: self.vm.write(self.rptr_va, struct.pack("<Q" if self.sdma else "<I", self.rptr))   # PM4: a 32-bit store
    return progressed

  # ---- PM4 ----
  def drain(self) -> None:
    q, self.pending = self.pending, []
    for d in reversed(q):   # launched together, they may finish in any order: newest first
      try: execute(d, self.vm)
      except GPUFault as e:
        self.kfd.memory_fault(e.va, getattr(self, "gpu_id", None))
        raise self.fail(f"dispatch of the program at {d.program:#x} faulted: {e}", fault=True) from None
      except GPUError as e: raise self.fail(str(e), ec=T.EC_QUEUE_WAVE_ILLEGAL_INSTRUCTION) from None   # code the executor cannot run: the wave traps

  # A release's L1 invalidate (RELEASE_MEM gfx9 EOP_TCL1_ACTION_EN / gfx11 GCR GLV_INV; SDMA GCR_REQ GLV_INV) runs at
  # the end of the pipe, and the CP goes on with the packets after it without waiting ("This call only inserts the
  # event into the pipeline. It doesn't wait for anything": mesa src/gallium/drivers/radeonsi/si_cp_utils.c, comment on
  # si_cp_release_mem_pws), so a later dispatch may fill and read lines before it lands: nothing is dropped then. The
  # fence write comes after the cache actions ("signal after the work ... which optionally includes flushing caches
  # using gcr_cntl after the completion of the work", same comment), and drivers rely on it: radv emits the release
  # with GLV_INV / GL1_INV, then a WAIT_REG_MEM on its fence value, and leaves those invalidates out of its ACQUIRE_MEM
  # (mesa@25.0.7:src/amd/vulkan/radv_cs.c, gfx10_cs_emit_cache_flush; radeonsi si_cp_release_mem + si_cp_wait_mem). So a
  # WAIT_REG_MEM of this VM that passed on the fence's address where the value before the release could not have
  # passed it (a wait that the old value satisfies, GE 0 or NE x, may pass before the end-of-pipe event) drops the
  # lines held at the release (VectorL1.mark); lines filled after the release stay (they may have come after the
  # invalidate). So do a KFD WAIT_EVENTS that consumed the interrupt of this or a later release of the queue, and an AQL
  # barrier whose dependency signal the release's value met (land_pending).
  # A release in an AQL PM4-IB on several XCCs runs once per XCC (aql.py), each copy on that XCC's CP: it invalidates
  # only that XCC's L1s, and retires in order only with that XCC's own releases, so another XCC's write of the same
  # fence proves nothing about it (review l1c row 2; the acquire side is invalidate_vector_l1).
  # A release with no invalidate still tells a wait which release of its queue wrote the value it read (observe_fence),
  # so while a pending one of its queue and XCC waits on the same fence, it is kept too, without marks.
  # A copy no wait can prove (the value it wrote equals the one before it) lands only with a later one of its queue and
  # XCC or through WAIT_EVENTS: the next such entry takes its marks over, so they do not pile up (harmful side kept).
  def release_l1_invalidate(self, addr: int, width: int, old: int, value: int, caches: list) -> None:
    """A release with an invalidate of `caches` (VectorL1s: the GL0s / L1s, gfx11's GL1s) wrote `value` over `old`
    (`width` bytes) to fence `addr`: the invalidate is pending until seen complete."""
    xcc, nx = self.xcc(), getattr(self, "num_xcc", 1)
    marks = self._marks(caches, xcc if self.ibs and nx > 1 else None, nx)
    mine = [p for p in self.vm.l1_pending if p.queue == self.serial and p.xcc == xcc]
    if not marks and not any(p.addr == addr for p in mine): return
    if mine and (prev := mine[-1]).old == prev.new and not prev.events:
      self.vm.l1_pending.remove(prev); marks = [m for m in prev.marks if m[0].live(m[1])] + marks
    elif mine and not mine[-1].marks and mine[-1].addr == addr and not marks: self.vm.l1_pending.remove(mine[-1])
    self.vm.l1_pending.append(PendingInvalidate(addr, width, old, value, marks, self.serial, xcc=xcc))

  def interrupted(self, events: list[int], xcc: int | None) -> None:
    """This queue's CP on XCC `xcc` raised an interrupt that newly signalled `events` and comes after its earlier
    releases there (an end-of-pipe RELEASE_MEM's, an AQL completion signal's, an SDMA TRAP's; not an end-of-shader
    one, release_mem, nor an AQL queue-error report, aql.py _write_inactive_signal): once a WAIT_EVENTS consumes one
    that no other source signalled since (kfd.py _wait_events), every earlier release of the queue on that XCC has
    completed (in order, land_pending). Only that XCC's: each XCC's CP retires in order only its own releases (the
    rule above release_l1_invalidate), so XCC 0's interrupt says nothing of XCC 1's invalidate (review amd40 finding
    4). `xcc` None: which XCC raised it is not known (aql.py complete on a node of several XCCs): it proves none."""
    if xcc is None: return
    for p in self.vm.l1_pending:
      if p.queue == self.serial and p.xcc == xcc: p.events.update(events)

  @staticmethod
  def _marks(caches: list, xcc: int | None = None, nx: int = 1) -> list:
    return [(c, c.mark() if xcc is None else c.mark_xcc(xcc, nx)) for c in caches if c is not None and c.held]

  def observe_fence(self, addr: int, n: int, func: int, ref: int, mask: int) -> None:
    """A wait of this VM passed comparing (`func`, `ref`, `mask`) the `n` bytes at `addr`: the pending invalidates it
    proves complete land (PendingInvalidate.proven_by). The value it read must be one this release or a later one of
    its queue and XCC wrote: a fence another writer (WRITE_DATA, SDMA, the host, another queue) changed in between may
    pass the wait while the invalidate is still pending (the CP does not wait for the end-of-pipe event, see above;
    review l1c row 1). NOT modelled, writes of the release's own value by another writer (the mock matches the value
    read, not who wrote it: such a write counts as the release's, a possible missed stale read):
    - a host write of that same value;
    - an end-of-shader release (EOS, never filed: release_mem) writing that same value to the same fence, which may
      complete before the pending end-of-pipe one (review amd39 row 3). Our backend emits no EOS release."""
    if not (pend := self.vm.l1_pending): return
    read = int.from_bytes(self.vm.read(addr, n), "little")
    def wrote_read(i: int, p: PendingInvalidate) -> bool:
      return any(q.queue == p.queue and q.xcc == p.xcc and q.addr == p.addr and q.width == p.width
                 and q.window(q.new, addr, n, mask) == read & mask for q in pend[i:])
    ok = {id(p) for i, p in enumerate(pend) if p.proven_by(addr, n, func, ref, mask) and wrote_read(i, p)}
    land_pending(self.vm, lambda p: id(p) in ok)

  def invalidate_vector_l1(self, l0: bool = True, gl1: bool = True) -> None:
    """Every CU's vector L1 / GL0 (`l0`) and every gfx11 GL1 (`gl1`) drops its lines (a cache action of the CP:
    ACQUIRE_MEM, an AQL acquire fence). Inside an AQL PM4-IB, which each XCC's CP runs for itself (aql.py), only that
    XCC's CUs drop theirs."""
    if gl1 and self.vm.gl1 is not None: self.vm.gl1.invalidate_all()
    if not l0 or (l1 := self.vm.vector_l1) is None: return
    nx = getattr(self, "num_xcc", 1)
    if self.ibs and nx > 1: l1.invalidate_xcc(self.xcc(), nx)
    else: l1.invalidate_all()

  def step_pm4(self) -> int:
    hdr = self._dw(0)
    typ = hdr >> 30
    if typ == 2: return 1
    if typ != 3: raise self.fail(f"PM4 packet type {typ} (header {hdr:#010x}) is not supported on a compute queue")
    count, op = (hdr >> 16) & 0x3FFF, (hdr >> 8) & 0xFF
    n = count + 2
    if n > self._avail(): raise self.fail(f"PM4 {T.PM4_OPCODES.get(op, hex(op))} of {n} dwords runs past the submitted stream")
    body = [self._dw(i) for i in range(1, n)]
    name = T.PM4_OPCODES.get(op)
    if name == "NOP": return n
    if name == "PRED_EXEC":
      # the next (dw1 & 0x3FFF) dwords run only on the XCCs of mask dw1[31:24] (../shared/abi/amd_packets.json PRED_EXEC;
      # tinygrad@a9069c1:tinygrad/runtime/ops_amd.py:72-77); "doesn't work in rings, only in IBs" (ops_amd.py:409):
      # on a ring the mock refuses it rather than guess
      if not self.ibs: raise self.fail("PRED_EXEC on the ring: it works only inside an indirect buffer")
      skip = body[0] & 0x3FFF
      if n + skip > self._avail(): raise self.fail(f"PRED_EXEC predicates {skip} dwords past the end of its indirect buffer")
      return n if (body[0] >> 24) >> self.xcc() & 1 else n + skip
    if name == "SET_SH_REG":
      for i, v in enumerate(body[1:]): self.regs[T.SH_REG_BASE + (body[0] & 0xFFFF) + i] = v
    elif name == "ACQUIRE_MEM":
      # An L2 invalidate without the write-back drops the dirty lines. gfx9: documented, "WB must be set on GFX8+ when
      # TC_ACTION is set" (mesa@25.0.7:src/gallium/drivers/radeonsi/si_barrier.c:442-445; the kernel pairs them,
      # linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/gfx_v9_4_3.c:3401-3417). gfx11: NOT documented, an assumed worst
      # case: the kernel only shows GL2_INV always paired with GL2_WB (linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/
      # gfx_v11_0.c:6565-6573), and GCR_CNTL has a separate GL2_DISCARD bit (linux@v6.12.117:drivers/gpu/drm/amd/
      # amdgpu/nvd.h:297), so GL2_INV alone may well keep dirty lines; the mock does the harmful thing
      gcr = body[6] if len(body) >= 7 else 0
      if self.gfx >= 10: wb, inv, l1_inv = gcr & T.ACQ_WRITEBACK_GFX11, gcr & T.ACQ_GL2_INV_GFX11, gcr & T.ACQ_GLV_INV_GFX11
      else: wb, inv, l1_inv = body[0] & T.COHER_TC_WB_ACTION, body[0] & T.COHER_TC_ACTION, body[0] & T.COHER_TCL1_ACTION
      gl1_inv = self.gfx >= 10 and gcr & T.ACQ_GL1_INV_GFX11
      if wb: self.vm.writeback()
      elif inv: self.vm.discard()
      # The per-CU vector caches: gfx9 CP_COHER_CNTL.TCL1_ACTION_ENA invalidates the vector L1 (TCP), gfx10+
      # GCR_CNTL.GLV_INV the GL0 (the kernel's per-IB mem sync sets them: linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/
      # gfx_v9_4_3.c:3401-3417, gfx_v11_0.c:6565-6573). Nothing else the CP runs drops their lines (gfx9/l1.py): they
      # hold what earlier dispatches filled, so a dispatch after an ACQUIRE_MEM without the bit reads them stale. The
      # invalidate acts when the CP reaches the packet; dispatches queued before it (no CS_PARTIAL_FLUSH between)
      # run later (drain) and fill lines it no longer drops, as dispatches still running past it would.
      # gfx9 CP_COHER_CNTL.TCL1_VOL_ACTION_ENA (bit 15, soc15d.h) invalidates only the L1's lines of volatile (GLC/sc
      # "volatile") accesses; the model does not tell those apart, so it drops nothing (the lines stay: harmful).
      # gfx11 GCR_CNTL.GL1_INV (bit 9) drops the shader arrays' GL1s (rdna3 Waves.set_gl0), independently of GLV_INV.
      if l1_inv or gl1_inv: self.invalidate_vector_l1(bool(l1_inv), bool(gl1_inv))
      # The instruction caches (SQC I$) keep the code lines earlier dispatches fetched until an ACQUIRE_MEM drops them:
      # ROCr issues one itself after loading code (ROCm/ROCR-Runtime:src/core/runtime/amd_gpu_agent.cpp
      # GpuAgent::InvalidateCodeCaches, ACQUIRE_MEM with SH_ICACHE_ACTION_ENA on gfx9, GLI_INV on gfx10+: "Microcode is
      # handling code cache invalidation" only on gfx7/gfx8.0 microcode older than 420/685), so neither a PM4 dispatch
      # nor an AQL acquire fence drops them. GLI_INV other than "all" (a range) drops nothing here: the harmful reading.
      if (gcr & T.ACQ_GLI_INV_MASK_GFX11) == T.ACQ_GLI_INV_ALL_GFX11 if self.gfx >= 10 else body[0] & T.COHER_SH_ICACHE_ACTION:
        self.vm.icache.clear()
    elif name == "EVENT_WRITE":
      if body[0] & 0x3F == T.EVENT_CS_PARTIAL_FLUSH: self.drain()
    elif name == "DISPATCH_DIRECT": self.dispatch(body)
    elif name == "RELEASE_MEM": self.release_mem(body)
    elif name == "WAIT_REG_MEM":
      func, space = body[0] & 7, (body[0] >> 4) & 3
      if space != 1: raise self.fail("WAIT_REG_MEM on a register is not modelled")
      addr = body[1] | (body[2] << 32)
      if addr % 4: raise self.fail(f"WAIT_REG_MEM address {addr:#x} is not dword aligned")
      if not _cmp(func, self.vm.read32(addr) & body[4], body[3]): raise Blocked
      self.observe_fence(addr, 4, func, body[3], body[4])
    elif name == "WRITE_DATA":
      dst = (body[0] >> 8) & 0xF
      if dst == T.WD_DST_MEMORY: self.vm.write_cached(body[1] | (body[2] << 32), struct.pack(f"<{len(body) - 3}I", *body[3:]))
      elif dst == T.WD_DST_REGISTER:
        for i, v in enumerate(body[3:]): self.regs[body[1] + i] = v
      else: raise self.fail(f"WRITE_DATA dst_sel {dst} is not modelled")
    elif name == "INDIRECT_BUFFER":
      addr, ndw = body[0] | ((body[1] & 0xFFFF) << 32), body[2] & 0xFFFFF
      if addr % 4: raise self.fail(f"INDIRECT_BUFFER at {addr:#x} is not dword aligned")
      if not body[2] & (1 << 23): raise self.fail("INDIRECT_BUFFER without the VALID bit")
      self.vm.find(addr, 4 * ndw)
      xcc = self.xcc()   # a nested IB runs on the XCC that fetched it
      if body[2] & (1 << 20) and self.ibs: self.ibs.pop()   # chained: replaces the current IB
      else: self._advance(n)
      self.ibs.append([addr, ndw, 0, xcc])
      self.ib_count += 1
      return 0
    else: raise self.fail(f"PM4 opcode {op:#x} ({name or 'unknown'}) is not executed by the mock CP")
    return n

  def dispatch(self, body: list[int]) -> None:
    r, C = self.regs, T.COMPUTE
    init = body[3]
    if not init & T.DI_COMPUTE_SHADER_EN: raise self.fail("DISPATCH_DIRECT without COMPUTE_SHADER_EN in the initiator")
    if init & T.DI_CS_W32_EN and self.gfx < 10: raise self.fail("CS_W32_EN on gfx9: there is no wave32")
    prog = (r.get(C["PGM_LO"], 0) | (r.get(C["PGM_HI"], 0) << 32)) << 8
    if prog == 0: raise self.fail("DISPATCH_DIRECT with COMPUTE_PGM_LO/HI never set")
    bo = self.vm.find(prog)
    if not bo.flags & T.EXECUTABLE: raise self.fail(f"the program at {prog:#x} lies in memory not allocated EXECUTABLE")
    rsrc2 = r.get(C["PGM_RSRC2"], 0)
    nuser = (rsrc2 >> 1) & 0x1F
    grid = (body[0], body[1], body[2])
    block = tuple(r.get(C[f"NUM_THREAD_{a}"], 0) & 0xFFFF for a in "XYZ")   # NUM_THREAD_FULL is bits 15:0
    if min(grid) < 1 or min(block) < 1: raise self.fail(f"DISPATCH_DIRECT grid {grid} / COMPUTE_NUM_THREAD {block}: every dimension must be >= 1")
    if ((rsrc2 >> 15) & 0x1FF) * 512 > 65536: raise self.fail(f"COMPUTE_PGM_RSRC2.LDS_SIZE asks for {((rsrc2 >> 15) & 0x1FF) * 512} bytes; a workgroup has 64 KiB")
    scratch = self.scratch_ring(r.get(C["TMPRING_SIZE"], 0), (r.get(C["DISPATCH_SCRATCH_BASE_LO"], 0) | r.get(C["DISPATCH_SCRATCH_BASE_HI"], 0) << 32) << 8,
                                1, block, bool(init & T.DI_CS_W32_EN)) if rsrc2 & 1 else None
    # (a COMPUTE_USER_DATA register no SET_SH_REG of this queue wrote holds garbage, not 0: USER_POISON)
    d = Dispatch(self.arch, prog, r.get(C["PGM_RSRC1"], 0), rsrc2, r.get(T.PGM_RSRC3[self.arch], 0),
                 [r.get(C["USER_DATA_0"] + i, USER_POISON) for i in range(nuser)], grid, block, init, self.name, dict(r))  # type: ignore[arg-type]
    d.xcc_workgroups = pm4_xcc_share(grid[0] * grid[1] * grid[2], self.kfd.props.get("num_xcc", 1))
    d.shader_arrays = self.kfd.props.get("array_count", 1)
    d.scratch = scratch
    self.dispatches.append(d); self.pending.append(d)

  def scratch_ring(self, tmpring: int, base: int, num_xcc: int, block: tuple[int, ...], wave32: bool, span: int = 0) -> ScratchRing:
    """The scratch a dispatch with RSRC2.SCRATCH_EN gets: wave slots of COMPUTE_TMPRING_SIZE.WAVESIZE granules, WAVES
    of them per XCC, and on gfx11 per shader engine (ROCR-Runtime@c7785a6:runtime/hsa-runtime/core/runtime/
    amd_aql_queue.cpp:1800-1801, "number of waves per engine"), XCC x's at `base` + x * `span`. Architected flat
    scratch (gfx942, gfx11): the SPI puts the wave's slot in FLAT_SCRATCH, so the kernel needs no SGPR for it. With no
    slot (WAVES or WAVESIZE 0), or fewer slots than a workgroup has waves (a workgroup runs in one shader engine, so
    on gfx11 one engine's WAVES must hold it), the waves can never start: the dispatch hangs, which the mock reports
    as a stopped queue naming the register."""
    waves, wavesize = tmpring & 0xFFF, (tmpring >> 12) & ((1 << T.TMPRING_WAVESIZE_BITS[self.gfx]) - 1)
    engines = self.kfd.props.get("array_count", 1) // max(1, self.kfd.props.get("simd_arrays_per_engine", 1)) if self.gfx >= 11 else 1
    wpg = -(-block[0] * block[1] * block[2] // (32 if wave32 else 64))
    if waves < wpg or wavesize == 0:
      raise self.fail(f"scratch enabled (RSRC2.SCRATCH_EN) with COMPUTE_TMPRING_SIZE {tmpring:#x} (WAVES {waves}"
                      f"{' per shader engine' if self.gfx >= 11 else ''}, WAVESIZE {wavesize}): "
                      f"a workgroup of {wpg} waves never gets its scratch slots, the dispatch would hang")
    return ScratchRing(tuple(base + x * span for x in range(num_xcc)), wavesize * T.SCRATCH_GRANULE[self.gfx], waves, max(1, engines))

  def release_mem(self, body: list[int]) -> None:
    self.drain()   # end of pipe (or, for EOS, of the shaders): every earlier dispatch has completed
    event, index = body[0] & 0x3F, (body[0] >> 8) & 0xF
    # An end-of-shader event (EVENT_INDEX 6 "shader_done", CS_DONE / PS_DONE) "signaled when those shaders finish",
    # while *_TS (end-of-pipe) events are "always signaled at the end of the pipeline" (mesa@044bafb:src/amd/common/
    # ac_cmdbuf.c, the comment on ac_emit_cp_release_mem_pws). Nothing documents that it waits for an earlier
    # end-of-pipe release's cache actions, so the mock takes it as possibly completing first (the harmful side): it is
    # kept out of the in-order landing (land_pending) and proves nothing of other releases. Mesa gives an EOS release
    # cache actions only through that function, which asserts a gfx11+ graphics queue; what they do on a compute queue
    # is documented nowhere, so such a packet is refused rather than given a meaning. Review l1c row 3.
    if index not in (T.RM_EOP, T.RM_EOS) or (index == T.RM_EOS and event not in T.EOS_EVENTS):
      raise self.fail(f"RELEASE_MEM event_type {event:#x} event_index {index} is not modelled (5: end of pipe; 6: end of "
                      "shader, CS_DONE 0x2f / PS_DONE 0x30)")
    eos = index == T.RM_EOS
    if eos and body[0] & T.RM_CACHE_ACTIONS:
      raise self.fail(f"RELEASE_MEM end-of-shader event (event_type {event:#x}, event_index 6) with cache actions "
                      f"{body[0] & T.RM_CACHE_ACTIONS:#x} on a compute queue is not modelled (cache actions go with end-of-pipe events)")
    wb = bool(body[0] & T.RM_WRITEBACK[self.gfx])
    if wb: self.vm.writeback()
    data_sel, int_sel = (body[1] >> 29) & 7, (body[1] >> 24) & 7
    addr = body[2] | (body[3] << 32)
    if data_sel in (1, 2, 3):
      if addr % (4 if data_sel == 1 else 8): raise self.fail(f"RELEASE_MEM address {addr:#x} misaligned for data_sel {data_sel}")
      v = (body[4] | (body[5] << 32)) if data_sel == 2 else body[4] if data_sel == 1 else time.perf_counter_ns() // 10
      # after a write-back the release reaches memory; without one it may sit in the L2 like the kernel's stores
      width = 4 if data_sel == 1 else 8
      old = int.from_bytes(self.vm.read(addr, width), "little")
      (self.vm.write if wb else self.vm.write_cached)(addr, struct.pack("<Q" if data_sel != 1 else "<I", v))
      if data_sel != 3 and not eos:
        self.release_l1_invalidate(addr, width, old, v, [self.vm.vector_l1 if body[0] & T.RM_L1_INV[self.gfx] else None,
                                             self.vm.gl1 if self.gfx >= 10 and body[0] & T.RM_GL1_INV_GFX11 else None])
    elif data_sel != 0: raise self.fail(f"RELEASE_MEM data_sel {data_sel} is not modelled")
    # INT_SEL (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_pm4_headers_ai.h:487-493): 2 = interrupt after the
    # write is confirmed (what the kernel asks for, linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/gfx_v11_0.c:5740-5741);
    # 3 = write the data after confirmation and raise no interrupt ("don't send an interrupt",
    # mesa@25.0.7:src/amd/vulkan/radv_cs.c:37-40); 0 none. The rest (interrupt only, ctxid compares) are not modelled.
    if int_sel == 2:
      # An EOS interrupt says nothing of the queue's earlier end-of-pipe releases and may be raised before them (see
      # above): it proves none of them, and as a source of its own it also keeps the queue's later EOP interrupts
      # on the same event from proving them (a waiter may have woken on it first; kfd.py _wait_events, review amd39 row 2)
      new = self.kfd.interrupt(body[6], eop=True, source=(self.serial, "eos") if eos else (self.serial, self.xcc()))
      if not eos: self.interrupted(new, self.xcc())
    elif int_sel not in (0, 3): raise self.fail(f"RELEASE_MEM INT_SEL {int_sel} is not modelled")
    self.kfd.stall()   # the CP may fall behind right after a release the host can see (tests widen this gap)

  # ---- SDMA ----
  def lands_late(self, dst: int, n: int) -> bool:
    """Whether the copy at the head of the queue, into `dst`, waits for the engine's next round (True once per copy).
    A copy into memory another GPU maps too (a peer's VRAM over PCIe/XGMI, a GTT bounce buffer) is seen by that GPU's
    engines whenever it lands: two GPUs' queues run independently, and nothing orders this engine's writes before
    their reads but a semaphore they wait on (each GPU node has its own device queue manager and hardware scheduler,
    linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_priv.h:274,301; PCIe writes are posted, done after the packet that
    issued them is). The mock takes the harmful order: every other queue runs before such a copy lands, so a
    reader on the other GPU that skipped its wait reads the old bytes. Later packets of this queue (its FENCE) still
    come after the copy, as SDMA runs its packets in order."""
    if self._held: self._held = False; return False
    if not self.vm.find(dst, n).gpu_mapped - {self.gpu_id}: return False
    self._held = True; self.late_copies += 1
    return True

  def step_sdma(self) -> int:
    hdr = self._dw(0)
    op, sub = hdr & 0xFF, (hdr >> 8) & 0xFF
    name = T.SDMA_OPCODES.get(op)
    def need(n: int) -> list[int]:
      if n > self._avail(): raise self.fail(f"SDMA {name} of {n} dwords runs past the submitted stream")
      return [self._dw(i) for i in range(n)]
    if name == "NOP": return 1 + ((hdr >> 16) & 0x3FFF)
    if name == "COPY" and sub == 0:
      b = need(7)
      n = (b[1] & T.SDMA_COPY_COUNT_MASK[self.gfx]) + 1
      src, dst = b[3] | (b[4] << 32), b[5] | (b[6] << 32)
      if self.lands_late(dst, n): raise Later
      # SDMA 6 is a GL2 client: COPY_LINEAR has cache-policy/CPV fields (linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/
      # sdma_v6_0_0_pkt_open.h:135,167,179) and the kernel's own SDMA6 ring syncs GL2 with GCR_REQ (sdma_v6_0.c:
      # 296-310), and a peer's or local VRAM BO is mapped cached (MTYPE_NC, gmc_v11_0.c:464-470, 528-531). So the
      # written bytes may sit in this GPU's L2 until a GL2 write-back (GCR_REQ GL2_WB); the mock keeps them there (the
      # harmful case). UNCACHED BOs (signals, GTT bounce slots) are written around it (memory.py write_cached).
      # SDMA 4 (gfx9) copies are not modelled through the L2.
      (self.vm.write_cached if self.gfx >= 11 else self.vm.write)(dst, bytes(self.vm.read(src, n)))
      self.copies.append((dst, src, n))
      return 7
    if name == "FENCE":
      b = need(4)
      addr = b[1] | (b[2] << 32)
      if addr % 4: raise self.fail(f"SDMA FENCE address {addr:#x} is not dword aligned")
      uncached = self.gfx < 11 or (hdr >> 16) & 7 == 3   # SDMA 6: MTYPE 3 (UC) writes around the L2
      old = self.vm.read32(addr)
      (self.vm.write if uncached else self.vm.write_cached)(addr, struct.pack("<I", b[3]))
      if self.gcr_l1 is not None: self.vm.l1_pending.append(PendingInvalidate(addr, 4, old, b[3], self.gcr_l1, self.serial)); self.gcr_l1 = None
      return 4
    if name == "POLL_REGMEM":
      b = need(6)
      if not hdr >> 31: raise self.fail("POLL_REGMEM on a register is not modelled")
      if not _cmp((hdr >> 28) & 7, self.vm.read32(b[1] | (b[2] << 32)) & b[4], b[3]): raise Blocked
      self.observe_fence(b[1] | (b[2] << 32), 4, (hdr >> 28) & 7, b[3], b[4])
      return 6
    if name == "TRAP":
      b = need(2); self.interrupted(self.kfd.interrupt(b[1] & 0x0FFFFFFF, source=(self.serial, 0)), 0); return 2
    if name == "TIMESTAMP" and sub == 2:
      b = need(3)
      if b[1] % 8: raise self.fail(f"SDMA GET_GLOBAL_TIMESTAMP address {b[1] | (b[2] << 32):#x} is not 8-byte aligned")
      self.vm.write(b[1] | (b[2] << 32), struct.pack("<Q", time.perf_counter_ns() // 10)); return 3
    if name == "GCR_REQ" and self.gfx >= 11:
      b = need(5)
      # a user-mode queue's GCR_REQ is sub_op SDMA_SUBOP_USER_GCR = 1 (ROCR@c7785a6:runtime/hsa-runtime/core/inc/
      # sdma_registers.h:66, set by BuildGCRCommand, amd_blit_sdma.cpp:1095); sub_op 0 is the form the kernel writes on
      # its own privileged ring (linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/sdma_v6_0.c:303, header with the op only;
      # sdma_v6_0_0_pkt_open.h:42 defines the op and no user sub_op). What the firmware does with that form from a user
      # queue is documented nowhere, so the mock refuses it instead of assuming the cache action happens (audit fin, M4)
      if sub != T.SDMA_SUBOP_USER_GCR:
        raise self.fail(f"SDMA GCR_REQ sub_op {sub}: a user-mode queue issues SDMA_SUBOP_USER_GCR ({T.SDMA_SUBOP_USER_GCR}), "
                        "as ROCr's BuildGCRCommand does; sub_op 0 is the kernel ring's form")
      ctl = (b[2] >> 16) | ((b[3] & 7) << 16)   # GCR_CONTROL, split over dwords 2 and 3 (sdma_v6_0_0_pkt_open.h GCR_REQ)
      self.gcrs.append(ctl)
      if ctl & (1 << 15): self.vm.writeback()   # GCR_CONTROL_GL2_WB (bit 15) writes the dirty L2 lines back
      # GLV_INV: another engine's invalidate of the GL0s, unordered with the compute queue's dispatches; like a
      # RELEASE_MEM's (release_l1_invalidate) it drops the lines held now once a wait has seen the FENCE this queue
      # writes after it (the SDMA engine runs its packets in order: ROCr puts the GCR_REQ before the copies it guards,
      # ROCR@c7785a6:runtime/hsa-runtime/core/runtime/amd_blit_sdma.cpp:1089-1109, and signals with a FENCE after them)
      marks = self._marks([self.vm.vector_l1 if ctl & T.SDMA_GCR_GLV_INV else None, self.vm.gl1 if ctl & T.SDMA_GCR_GL1_INV else None])
      if marks: self.gcr_l1 = marks
      return 5
    raise self.fail(f"SDMA opcode {op} sub_op {sub} ({name or 'unknown'}) is not executed by the mock SDMA engine")
