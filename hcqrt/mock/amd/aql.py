"""The mock CP's AQL packet processor: a KFD_IOC_QUEUE_TYPE_COMPUTE_AQL queue's ring of 64-byte HSA packets.

Rules, each from the sources (ROCR = ROCm/ROCR-Runtime@c7785a6, paths under runtime/hsa-runtime/):
- The doorbell carries the index of the last packet written (ROCR:core/runtime/amd_aql_queue.cpp:462-465,
  1559-1560) and the CP reads the ring only up to it: AQL MQDs use SLOT_BASED_WPTR with the wptr in packets
  (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_mqd_manager_v9.c:235-236, 300-304). Packets past the last doorbell
  index wait for the next doorbell, whatever their headers say.
- A slot whose header type is INVALID is not ready: the processor stops there and resumes at the next doorbell
  (ROCR:core/runtime/amd_aql_queue.cpp:131-135 fills every slot with INVALID before the queue exists; :1548-1556
  stores the header last "to prevent the slot from being read until it's fully written"). Up to the doorbell index
  it takes each slot as soon as its header is valid, without waiting (the harmful choice: a header stored before
  its body is taken with a half-written body).
- A consumed packet's header goes back to INVALID and read_dispatch_id (64-bit, the queue's read pointer) advances,
  which frees the slot for the producer (ROCR:core/runtime/amd_aql_queue.cpp:1498-1500: on gfx8 the runtime has to
  do in PM4 what the CP does for AQL packets, "advance the read index and invalidate the packet header").
- Barrier bit: the packet starts only when every earlier packet of the queue has completed (ROCR:inc/hsa.h:2880-2884);
  kernel dispatches without it may run together, newest first (as PM4 dispatches without a partial flush, cp.py).
- Kernel dispatch (ROCR:inc/hsa.h:2959-3065): dimensions 1..3 in `setup`, sizes > 0, unused dimensions 1, grid not
  smaller than the workgroup, reserved fields 0; kernel_object is the 64-byte kernel descriptor's address and the
  CP loads COMPUTE_PGM_RSRC1/2/3 and the user SGPRs it enables from it (LLVM AMDGPUUsage "Kernel Descriptor",
  "Initial Kernel Execution State"; ../shared/abi/amd_packets.json), LDS from group_segment_size.
- Acquire fence scope (header bits 9-10) agent or system: the CUs' vector L1s / GL0s (and gfx11's GL1s, which the
  same acquire needs for "different SAs", AMDGPUUsage GFX10-GFX11) are invalidated before the packet starts
  (ROCR:inc/hsa.h:2886-2894; AMDGPUUsage: "The scalar and vector caches are invalidated between kernel
  dispatches by CP"; gfx9/l1.py). INFERRED: scope NONE leaves the lines earlier dispatches filled. The sources tie
  the CP's invalidate to no header field (hsa.h:2850-2851 says only that with NONE "no fence is applied"), so the
  mock keeps the lines, the harmful reading; it also applies the acquire of BARRIER_AND/OR and PM4-IB packets.
- XCCs: an AQL queue's MQD copies split each dispatch over the node's XCCs with TG chunk size 1 (cp.aql_xcc_share).
  A dispatch's stores are visible only "in all the scopes specified by the release fence" (ROCR:inc/hsa.h,
  HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE, header bits 11-12): with scope NONE on a node of several XCCs they may stay
  dirty in one XCC's L2 after the packet completes. The mock's L2 model ends with the dispatch (gfx9/l2.py), so it
  refuses such a packet rather than hide the stale lines a later dispatch's other XCCs would read (audit x30 row 3).
- Vendor packets: AMD PM4-IB (format 1 in bits 16-31 of dword 0, dw_count_remain 10) runs its INDIRECT_BUFFER
  (ROCR:core/runtime/amd_aql_queue.cpp:1513-1543) once on every XCC, since each XCC's MQD copy reads the queue
  (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_mqd_manager_v9.c:680-723); PRED_EXEC limits a part to some XCCs; BARRIER_AND / BARRIER_OR wait until all / any non-zero
  dep_signal's amd_signal_t value is 0, handle 0 counting as met (ROCR:inc/hsa.h:3124-3159).
- Completion signal: an amd_signal_t handle (its address, ROCR:inc/amd_hsa_signal.h:61-78): value (+8) decremented
  at completion; when event_mailbox_ptr (+16) is set, event_id (+24) is written there and an interrupt raised with
  it, as the runtime's own engines do for interrupt signals (ROCR:core/runtime/amd_blit_sdma.cpp:469-478,
  core/runtime/interrupt_signal.cpp:104-116).
"""
from __future__ import annotations
import struct
from hcqrt.mock.amd import tables as T
from hcqrt.mock.amd.cp import Blocked, Dispatch, GPUError, Queue, aql_xcc_share
from hcqrt.mock.amd.memory import GPUFault

PACKET = 64
VENDOR, INVALID, KERNEL_DISPATCH, BARRIER_AND, AGENT_DISPATCH, BARRIER_OR = 0, 1, 2, 3, 4, 5
AMD_PM4_IB_FORMAT, PM4_IB_DW_COUNT_REMAIN = 1, 10
PM4_INDIRECT_BUFFER = 0x3F
_DISPATCH = struct.Struct("<HHHHHHIIIIIQQQQ")
# kernel_code_properties bits (AMDGPUUsage "Kernel Descriptor"): user SGPRs in load order, with their dword counts
_SGPRS = [(0, "PRIVATE_SEGMENT_BUFFER", 4), (1, "DISPATCH_PTR", 2), (2, "QUEUE_PTR", 2), (3, "KERNARG_SEGMENT_PTR", 2),
          (4, "DISPATCH_ID", 2), (5, "FLAT_SCRATCH_INIT", 2), (6, "PRIVATE_SEGMENT_SIZE", 1)]
KD_WAVE32 = 1 << 10
# amd_queue_t (ROCR:inc/amd_hsa_queue.h:75-98): read_dispatch_id and queue_inactive_signal offsets
AMD_QUEUE_READ_DISPATCH_ID_OFFSET, AMD_QUEUE_INACTIVE_SIGNAL_OFFSET = 128, 192
# its scratch fields: compute_tmpring_size, scratch_resource_descriptor[4], scratch_backing_memory_location (then
# _byte_size and scratch_wave64_lane_byte_size)
AMD_QUEUE_TMPRING_OFFSET, AMD_QUEUE_SCRATCH_SRD_OFFSET, AMD_QUEUE_SCRATCH_LOCATION_OFFSET = 140, 144, 160

class AQLQueue(Queue):
  """An AQL queue: ring of `ring_size` bytes of packets; `rptr_va`/`wptr_va` are amd_queue_t's read/write_dispatch_id."""
  def __init__(self, kfd, qid: int, vm, ring_va: int, ring_size: int, rptr_va: int, wptr_va: int, arch: str, num_xcc: int):
    super().__init__(kfd, qid, T.QUEUE_COMPUTE_AQL, vm, ring_va, ring_size, rptr_va, wptr_va, arch)
    self.slots, self.num_xcc, self.read_id = ring_size // PACKET, num_xcc, 0
    self.target = -1   # the last doorbell value: the index of the last packet the CP may read (none rung yet)
    self.completions: list[tuple[Dispatch, int]] = []   # dispatches in flight with their completion signals
    self.name = f"AQL queue {qid}"

  def _slot(self) -> int: return self.ring_va + (self.read_id % self.slots) * PACKET
  def _avail(self) -> int:
    if self.ibs: return self.ibs[-1][1] - self.ibs[-1][2]
    return int(self.vm.read32(self._slot()) & 0xFF != INVALID)

  def run(self) -> bool:
    if self.error is not None or self.destroyed: return False
    progressed = False
    try:
      while True:
        if self.ibs:   # the PM4 indirect buffer of the current PM4-IB packet
          while self.ibs: self._advance(self.step_pm4()); progressed = True
          self.drain(); self._retire(); continue
        if self.read_id > self.target: break   # past the last rung packet index: wait for the next doorbell
        pkt = bytes(self.vm.read(self._slot(), PACKET))
        if pkt[0] == INVALID: break   # not ready: stop here until the next doorbell
        self.packet(pkt); progressed = True
      self.drain()
    except Blocked: pass
    except GPUFault as e:
      self.kfd.memory_fault(e.va, getattr(self, "gpu_id", None))
      raise self.fail(str(e), fault=True) from None
    return progressed

  def _retire(self, completion: int = 0) -> None:
    """The packet at read_dispatch_id is done with its slot: header INVALID, read_dispatch_id + 1."""
    slot = self._slot()
    self.vm.write(slot, struct.pack("<H", INVALID))
    self.read_id += 1
    if not self.destroyed: self.vm.write(self.rptr_va, struct.pack("<Q", self.read_id))
    if completion: self.complete(completion)

  def drain(self) -> None:
    done, self.completions = self.completions, []
    super().drain()
    for _d, sig in done:
      if sig: self.complete(sig)

  def complete(self, handle: int) -> None:
    """Decrement the amd_signal_t's value; write its event id to its mailbox and interrupt when it has one."""
    if handle % 8: raise self.fail(f"completion signal {handle:#x} is not an 8-byte aligned amd_signal_t address")
    v = struct.unpack("<q", bytes(self.vm.read(handle + 8, 8)))[0]
    self.vm.write(handle + 8, struct.pack("<q", v - 1))
    mailbox, event_id = struct.unpack("<QI", bytes(self.vm.read(handle + 16, 12)))
    if mailbox:
      self.vm.write(mailbox, struct.pack("<I", event_id))
      # INFERRED, the harmful reading: every XCC's CP runs the packet (a PM4-IB; a dispatch's share), and which of them
      # raises its completion interrupt, after which of their releases, no source shows (the nearest fact: XCC 0's MQD
      # is the "Master XCC", the one that updates the read pointer, linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/
      # kfd_mqd_manager_v9.c:709-714): on a node of several XCCs it proves no XCC's releases (cp.py Queue.interrupted),
      # and as a source of its own, (serial, "completion"), it keeps an XCC's interrupt on the same event from proving
      # them either (a waiter may have woken on it first; kfd.py _wait_events, review amd40b finding 1)
      one = self.num_xcc == 1
      self.interrupted(self.kfd.interrupt(event_id, eop=True, source=(self.serial, 0) if one else (self.serial, "completion")), 0 if one else None)

  def packet(self, pkt: bytes) -> None:
    hdr = pkt[0] | pkt[1] << 8
    typ, barrier, completion = hdr & 0xFF, hdr >> 8 & 1, struct.unpack_from("<Q", pkt, 56)[0]
    if barrier: self.drain()   # every earlier packet completes first
    # An acquire fence at agent or system scope (header bits 9-10) makes "any subsequent global segment ... loads by
    # any unit of execution that belongs to a dispatch that has not yet entered the active phase" see what was released
    # at that scope (ROCR:inc/hsa.h:2886-2894); the per-CU vector L1s / GL0s are not coherent (AMDGPUUsage "Memory
    # Model GFX942" / "GFX11"), so the CP invalidates them before the packet starts. Scope NONE: "no fence is applied.
    # The packet relies on external fences" (:2850-2851): the lines earlier dispatches filled stay (gfx9/l1.py).
    # INFERRED (no source says what NONE does to the L1s; keeping them is the harmful choice): see the module docstring.
    if hdr >> 9 & 3: self.invalidate_vector_l1()
    if typ == KERNEL_DISPATCH:
      if self.num_xcc > 1 and not hdr >> 11 & 3:
        raise self.fail(f"kernel dispatch (header {hdr:#06x}) with release fence scope NONE on a node of {self.num_xcc} XCCs: its stores "
                        f"may stay dirty in one XCC's L2 past the packet, which the mock does not model (release at agent scope or wider)")
      self.dispatch_packet(pkt, completion)
      self._retire()
    elif typ in (BARRIER_AND, BARRIER_OR):
      deps = [h for h in struct.unpack_from("<5Q", pkt, 8) if h]
      zero = [struct.unpack("<q", bytes(self.vm.read(h + 8, 8)))[0] == 0 for h in deps]
      if deps and not (all(zero) if typ == BARRIER_AND else any(zero)): raise Blocked
      # a met dependency is a wait that passed on the signal's 64-bit value == 0 (signals count down): it lands the
      # pending invalidates of a release that brought that value to 0 (cp.py land_pending)
      for h, z in zip(deps, zero):
        if z: self.observe_fence(h + 8, 8, 3, 0, (1 << 64) - 1)
      self.drain(); self._retire(completion)
    elif typ == VENDOR:
      fmt = pkt[2] | pkt[3] << 8
      if fmt != AMD_PM4_IB_FORMAT: raise self.fail(f"vendor-specific AQL packet format {fmt} is not modelled (only PM4-IB, 1)", cp_bits=0x100, ec=23)
      ib = struct.unpack_from("<4I", pkt, 4)
      if struct.unpack_from("<I", pkt, 20)[0] != PM4_IB_DW_COUNT_REMAIN: raise self.fail("PM4-IB packet with dw_count_remain != 10", cp_bits=0x100, ec=23)
      if ib[0] >> 30 != 3 or (ib[0] >> 8) & 0xFF != PM4_INDIRECT_BUFFER or not ib[3] & (1 << 23):
        raise self.fail(f"PM4-IB packet does not carry a valid INDIRECT_BUFFER ({[hex(x) for x in ib]})", cp_bits=0x100, ec=23)
      addr, ndw = ib[1] | ((ib[2] & 0xFFFF) << 32), ib[3] & 0xFFFFF
      if addr % 4 or ndw == 0: raise self.fail(f"PM4-IB packet: IB at {addr:#x} of {ndw} dwords")
      self.vm.find(addr, 4 * ndw)
      # every XCC's MQD copy reads this queue (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_mqd_manager_v9.c:680-723),
      # so each runs the IB: once per XCC, XCC 0 first (the top of the stack), unpredicated packets 8 times on gfx942
      for x in reversed(range(self.num_xcc)): self.ibs.append([addr, ndw, 0, x])
      self.ib_count += 1
      if completion: raise self.fail("completion signals on PM4-IB packets are not modelled")
    else: raise self.fail(f"AQL packet type {typ} (header {hdr:#06x}) is not modelled (kernel dispatch, barrier-and/or, AMD PM4-IB)",
                          cp_bits=0x20, ec=T.EC_QUEUE_PACKET_UNSUPPORTED)

  def dispatch_packet(self, pkt: bytes, completion: int) -> None:
    (_, setup, wx, wy, wz, res0, gx, gy, gz, private, group, kobj, kernarg, res2, _) = _DISPATCH.unpack(pkt)
    dims, wg, grid = setup & 3, (wx, wy, wz), (gx, gy, gz)
    if not 1 <= dims <= 3: raise self.fail(f"kernel dispatch with {dims} dimensions (setup {setup:#x})", cp_bits=0x2, ec=16)
    if res0 or res2 or setup >> 2: raise self.fail("kernel dispatch with non-zero reserved fields", cp_bits=0x20, ec=19)
    for i in range(3):
      if wg[i] < 1 or grid[i] < 1 or (i >= dims and (wg[i] != 1 or grid[i] != 1)) or grid[i] < wg[i]:
        raise self.fail(f"kernel dispatch of {dims} dimension(s): grid {grid} workgroup {wg} breaks hsa.h's size rules", cp_bits=0x2, ec=16)
      if grid[i] % wg[i]: raise self.fail(f"kernel dispatch grid {grid} with partial workgroups ({wg}) is not modelled")
    if kobj % 64: raise self.fail(f"kernel_object {kobj:#x} is not a 64-byte aligned kernel descriptor", cp_bits=0x8, ec=18)
    kd = bytes(self.vm.read(kobj, 64))
    entry, r3, r1, r2, props = struct.unpack_from("<q20xIIIH", kd, 16)
    prog = kobj + entry
    if not self.vm.find(prog).flags & T.EXECUTABLE: raise self.fail(f"the program at {prog:#x} lies in memory not allocated EXECUTABLE")
    init = T.DI_COMPUTE_SHADER_EN | (T.DI_CS_W32_EN if props & KD_WAVE32 else 0)
    scratch = self.scratch_for(private, wg, bool(props & KD_WAVE32)) if r2 & 1 else None
    user: list[int] = []
    for bit, name, _n in _SGPRS:
      if not props >> bit & 1: continue
      if name == "PRIVATE_SEGMENT_BUFFER":   # the queue's scratch buffer resource, as ROCr built it (amd_queue_t)
        user += list(struct.unpack("<4I", bytes(self.vm.read(self.rptr_va - AMD_QUEUE_READ_DISPATCH_ID_OFFSET + AMD_QUEUE_SCRATCH_SRD_OFFSET, 16))))
      elif name == "DISPATCH_PTR": user += [self._slot() & 0xFFFFFFFF, self._slot() >> 32]
      elif name == "KERNARG_SEGMENT_PTR": user += [kernarg & 0xFFFFFFFF, kernarg >> 32]
      elif name == "DISPATCH_ID": user += [self.read_id & 0xFFFFFFFF, self.read_id >> 32]
      else: raise self.fail(f"the kernel descriptor enables {name}, which the mock does not model")
    nuser = (r2 >> 1) & 0x1F
    user = user[:nuser]   # SGPRs past the enabled ones are not loaded: the wave starts with garbage there (launch.dispatch)
    if group > 65536: raise self.fail(f"group_segment_size {group} exceeds the 64 KiB of LDS a workgroup has", cp_bits=0x4, ec=17)
    r2 = (r2 & ~(0x1FF << 15)) | (((group + 511) // 512) << 15)   # the CP programs LDS_SIZE from the packet
    if init & T.DI_CS_W32_EN and self.gfx < 10: raise self.fail("a wave32 kernel descriptor on gfx9: there is no wave32")
    groups = tuple(grid[i] // wg[i] for i in range(3))
    d = Dispatch(self.arch, prog, r1, r2, r3, user, groups, wg, init, self.name)   # type: ignore[arg-type]
    d.xcc_workgroups = aql_xcc_share(groups[0] * groups[1] * groups[2], self.num_xcc)
    d.shader_arrays = self.kfd.props.get("array_count", 1)
    d.scratch = scratch
    self.dispatches.append(d); self.pending.append(d); self.completions.append((d, completion))

  def scratch_for(self, private: int, wg: tuple[int, int, int], wave32: bool):
    """The scratch of a dispatch with RSRC2.SCRATCH_EN, from what ROCr keeps in amd_queue_t (ROCR:inc/amd_hsa_queue.h:
    75-98; filled by ROCR:core/runtime/amd_aql_queue.cpp:1843-1894): compute_tmpring_size (+140), the scratch buffer
    resource (+144), the backing memory's location (+160) and size (+168), which is the size of one XCC's part ("report
    size per XCC", :1882-1883), so XCC x's part starts x * byte_size in, and scratch_wave64_lane_byte_size (+176). A
    packet asking for more private_segment_size per work-item than the queue holds, or a queue without scratch, stops
    the queue with the CP's "insufficient scratch" bit (0x1 wave64, 0x400 wave32) in queue_inactive_signal, which ROCr
    answers by growing the scratch (:1167-1168, 925-). A byte_size smaller than one XCC's slots (WAVES x WAVESIZE)
    lets the XCCs' slots overlap or run past the buffer (silent corruption or a VM fault): the mock stops the queue.
    The resource's NUM_RECORDS is one XCC's size too, on gfx9 and gfx11 alike (InitScratchSRD fills words 0-3 for both,
    :1586-1686; :1619-1626); on gfx11 its word 3 must also have FORMAT 32_UINT (0x14), ADD_TID_ENABLE and OOB_SELECT 2,
    which the swizzled per-lane scratch addressing depends on (ROCR core/inc/registers.h:169-320, the gfx11 SQ_BUF_RSRC_WORD3 fields). Which of the two the closed CP firmware
    spaces the XCCs by no source shows, so the mock stops the queue unless they agree, as ROCr writes them (tinygrad,
    tinygrad@a9069c1:tinygrad/runtime/ops_amd.py:1132-1137, sets the same NUM_RECORDS and leaves byte_size 0, which
    the mock refuses: nothing shows the firmware ignores byte_size)."""
    q = self.rptr_va - AMD_QUEUE_READ_DISPATCH_ID_OFFSET
    tmpring = self.vm.read32(q + AMD_QUEUE_TMPRING_OFFSET)
    loc, size, lane64 = struct.unpack("<QQI", bytes(self.vm.read(q + AMD_QUEUE_SCRATCH_LOCATION_OFFSET, 20)))
    if not loc or not tmpring or private * (32 if wave32 else 64) > lane64 * 64:
      raise self.fail(f"the dispatch needs {private} bytes of scratch per work-item; the queue has {lane64} per wave64 lane at {loc:#x} "
                      f"(compute_tmpring_size {tmpring:#x})", cp_bits=0x400 if wave32 else 0x1, ec=22)
    ring = self.scratch_ring(tmpring, loc, self.num_xcc, wg, wave32, size)
    need = ring.slots * ring.engines * ring.wave_bytes
    if size < need:
      raise self.fail(f"amd_queue_t.scratch_backing_memory_byte_size {size} is smaller than one XCC's scratch slots "
                      f"(compute_tmpring_size {tmpring:#x}: {need} bytes): the XCCs' slots overlap or leave the buffer")
    records, word3 = self.vm.read32(q + AMD_QUEUE_SCRATCH_SRD_OFFSET + 8), self.vm.read32(q + AMD_QUEUE_SCRATCH_SRD_OFFSET + 12)
    if self.gfx >= 11 and (word3 >> 12 & 0x3F, word3 >> 23 & 1, word3 >> 28 & 3) != (0x14, 1, 2):
      raise self.fail(f"amd_queue_t.scratch_resource_descriptor word 3 {word3:#x} is not a swizzled scratch resource (FORMAT "
                      f"{word3 >> 12 & 0x3F:#x}, ADD_TID_ENABLE {word3 >> 23 & 1}, OOB_SELECT {word3 >> 28 & 3}; ROCr "
                      f"amd_aql_queue.cpp:1586-1686 writes 0x14, 1, 2)")
    if records != size:
      raise self.fail(f"amd_queue_t.scratch_resource_descriptor NUM_RECORDS {records} differs from scratch_backing_memory_byte_size "
                      f"{size}: both are one XCC's part of the scratch (ROCr amd_aql_queue.cpp:1619-1626, 1882-1883)")
    return ring

  def fail(self, msg: str, fault: bool = False, ec: int = T.EC_QUEUE_PACKET_UNSUPPORTED, cp_bits: int = 0) -> GPUError:
    """Stop the queue. A packet the AQL packet processor rejects (`cp_bits`) is reported on the CP's own channel: its
    error bits ORed into amd_queue_t.queue_inactive_signal's value and that signal's event raised, which is where ROCr
    looks for them (ROCR:core/runtime/amd_aql_queue.cpp:1167-1206 decodes them; :255-270 installs the signal with an
    event). Whether the MEC also raises a CP bad-opcode interrupt with a packet exception code that reaches the CWSR
    payload word (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_int_process_v9.c:432-437) depends on the firmware,
    which no source shows: the mock does it only when `kfd.aql_errors_via_kfd` is set (the harmful default: a runtime
    that reads only the KFD channel waits out its timeout)."""
    self.completions.clear()
    if not cp_bits or fault: return super().fail(msg, fault, ec)
    self._write_inactive_signal(cp_bits)
    if self.kfd.aql_errors_via_kfd: return super().fail(msg, False, ec)
    self.error, self.reported = f"{self.name}: {msg}", False   # (not reported: settle() still raises it, for tests)
    self.pending.clear()
    return GPUError(self.error)

  def _write_inactive_signal(self, bits: int) -> None:
    """OR the error `bits` into queue_inactive_signal's value; when it has a mailbox, write its event id there and
    raise the interrupt. ROCr makes it an interrupt signal on its queue event (ROCR:core/runtime/amd_aql_queue.cpp:
    248-262); the KFD sets whatever event a CP interrupt's id names, not knowing what raised it
    (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_int_process_v11.c:330-331, kfd_int_process_v9.c:373-374,
    kfd_events.c:751-). The report comes from the packet processor stopped at the bad packet, still the one at
    read_dispatch_id (ROCr reads it there to size the scratch it lacked, amd_aql_queue.cpp:963, 1025-1027, and
    restarts the queue at it by storing 0 into the signal, :1063-1064), not from the end of the pipe: only the
    barrier bit makes a packet wait for earlier ones to complete (ROCR:inc/hsa.h:2879-2882), and a PM4-IB's
    RELEASE_MEM only puts its end-of-pipe event into the pipeline (cp.py release_l1_invalidate). INFERRED, the harmful
    reading (no source says whether a PM4-IB packet completes before its end-of-pipe events retire): not even a
    barrier packet's report waits for them. So the interrupt proves none of the queue's earlier end-of-pipe releases:
    it is not fed to `interrupted`, and has a source of its own, (serial, "error"), so a WAIT_EVENTS consuming an event
    it also signalled lands none of them (its waiter may have woken on it; kfd.py _wait_events; review amd39b nit 3).
    INFERRED: it comes as an end-of-pipe-source interrupt, the one CP source the KFD signals events by id from, so
    on gfx942 a context id of 0 is dropped (`eop`)."""
    base = self.rptr_va - AMD_QUEUE_READ_DISPATCH_ID_OFFSET   # amd_queue_t (the CP knows it from the MQD's rptr address)
    handle = struct.unpack("<Q", bytes(self.vm.read(base + AMD_QUEUE_INACTIVE_SIGNAL_OFFSET, 8)))[0]
    if not handle: return   # no signal installed: the error has nowhere to go (the process's waits time out)
    v = struct.unpack("<q", bytes(self.vm.read(handle + 8, 8)))[0]
    self.vm.write(handle + 8, struct.pack("<q", v | bits))
    mailbox, event_id = struct.unpack("<QI", bytes(self.vm.read(handle + 16, 12)))
    if mailbox:
      self.vm.write(mailbox, struct.pack("<I", event_id))
      self.kfd.interrupt(event_id, eop=True, source=(self.serial, "error"))
