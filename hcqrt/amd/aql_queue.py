"""A KFD AQL compute queue (KFD_IOC_QUEUE_TYPE_COMPUTE_AQL): the ring of 64-byte HSA packets the CP firmware reads.

Why: on a multi-XCC node (MI300X, gfx942: 8 XCCs in one KFD node) the kernel replicates a queue's MQD on every XCC;
an AQL queue's copies get COMPUTE_TG_CHUNK_SIZE 1 and each its own logical XCC id, so the XCCs share a dispatch's
workgroups, while a PM4 queue's copies get chunk size 0, logical id 0 and one pm4_target_xcc
(linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_mqd_manager_v9.c:680-723, init_mqd_v9_4_3): a PM4 dispatch runs on
one XCC. ROCr and tinygrad use AQL whenever num_xcc > 1 (tinygrad@a9069c1:tinygrad/runtime/ops_amd.py:1030).

The queue as ROCr creates it (ROCm/ROCR-Runtime@c7785a6:runtime/hsa-runtime/core/runtime/amd_aql_queue.cpp:131-150),
except for a 4 KiB EOP buffer, which libhsakmt passes only for PM4 queues (libhsakmt/src/queues.c:651-652) and the
kernel accepts either way (linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/kfd_queue.c:286-300): the RELEASE_MEMs in our
PM4-IBs need one (tinygrad@a9069c1:tinygrad/runtime/ops_amd.py:387).
every slot's header INVALID before CREATE_QUEUE; the read/write pointers are amd_queue_t's read_dispatch_id and
write_dispatch_id (64-bit packet indices, runtime/hsa-runtime/inc/amd_hsa_queue.h:75-88); a packet is stored body
first and its first dword (header + setup) last with a release store, then the doorbell gets the packet's index
(amd_aql_queue.cpp:1548-1560 and :462-465 for a doorbell with AQL semantics, gfx9+).

  >>> from ioctl_defs.amd import aql
  >>> aql.PACKET_SIZE, aql.AMD_QUEUE_WRITE_DISPATCH_ID_OFFSET, aql.AMD_QUEUE_READ_DISPATCH_ID_OFFSET
  (64, 56, 128)
"""
from __future__ import annotations
import contextlib, ctypes, os, struct, threading, time
from typing import Any
from hcqrt import syscalls
from hcqrt.amd.cwsr import fill_cwsr_headers, queue_sizes
from ioctl_defs.amd import aql, kfd as K

PAGE = 0x1000
RING_BYTES = 1 << 16   # 1024 packets
HSA_QUEUE_BASE_ADDRESS, HSA_QUEUE_SIZE = 8, 24   # hsa_queue_t fields (runtime/hsa-runtime/inc/hsa.h hsa_queue_t)

def use_aql(props: dict[str, int], env: str | None = None) -> bool:
  """AQL on multi-XCC nodes (a PM4 queue would use one XCC); `env` (default: env AMD_AQL) "1" / "0" forces it on / off.

  >>> use_aql({"num_xcc": 8}, ""), use_aql({"num_xcc": 1}, ""), use_aql({"num_xcc": 1}, "1"), use_aql({"num_xcc": 8}, "0")
  (True, False, True, False)
  """
  env = os.environ.get("AMD_AQL", "") if env is None else env
  return env == "1" if env in ("0", "1") else props.get("num_xcc", 1) > 1

class AQLQueue:
  """One KFD AQL queue: the packet ring, amd_queue_t (its dispatch ids), EOP and CWSR buffers, the doorbell."""
  sdma = False
  def __init__(self, dev: Any, name: str, ring_bytes: int = RING_BYTES):
    self.dev, self.name = dev, name
    self.ring = dev.gpu_alloc(ring_bytes, "uncached", host=True)
    self.slots = ring_bytes // aql.PACKET_SIZE
    for i in range(self.slots): ctypes.c_uint16.from_address(self.ring.host + i * aql.PACKET_SIZE).value = aql.PACKET_TYPE_INVALID
    self.amd_queue = dev.gpu_alloc(PAGE, "uncached", host=True)   # amd_queue_t (64-byte aligned: a page is)
    h = self.amd_queue.host
    ctypes.c_uint64.from_address(h + HSA_QUEUE_BASE_ADDRESS).value = self.ring.va
    ctypes.c_uint32.from_address(h + HSA_QUEUE_SIZE).value = self.slots
    # the fields ROCr fills before CREATE_QUEUE (ROCR@c7785a6:amd_aql_queue.cpp:159-176; tinygrad@a9069c1:ops_amd.py:
    # 1086-1088 fills the same): where read_dispatch_id lies in amd_queue_t (the CP is given only its address,
    # kfd_mqd_manager_v9.c:258-259), 64-bit pointers, the last CU and wave ids (NumFComputeCores is KFD's simd_count)
    p = dev.props
    ctypes.c_uint32.from_address(h + aql.AMD_QUEUE_READ_DISPATCH_ID_FIELD_BASE_BYTE_OFFSET_OFFSET).value = aql.AMD_QUEUE_READ_DISPATCH_ID_OFFSET
    ctypes.c_uint32.from_address(h + aql.AMD_QUEUE_PROPERTIES_OFFSET).value = aql.AMD_QUEUE_PROPERTIES_IS_PTR64
    ctypes.c_uint32.from_address(h + aql.AMD_QUEUE_MAX_CU_ID_OFFSET).value = p["simd_count"] // p["simd_per_cu"] - 1
    ctypes.c_uint32.from_address(h + aql.AMD_QUEUE_MAX_WAVE_ID_OFFSET).value = p["max_waves_per_simd"] * p["simd_per_cu"] - 1
    # queue_inactive_signal: ROCr always installs one (amd_aql_queue.cpp:255-270); the CP reports AQL errors through it
    # (the runtime decodes its value, :1126-1213). Ours is a USER amd_signal_t right after amd_queue_t in the same page
    # whose mailbox is the error event's slot, so such a report wakes a wait instead of writing through handle 0
    sig = aql.AMD_QUEUE_BYTES
    struct.pack_into("<qqQI", (ctypes.c_char * PAGE).from_address(h), sig, aql.AMD_SIGNAL_KIND_USER, 0, dev.error_slot, dev.error_event)
    ctypes.c_uint64.from_address(h + aql.AMD_QUEUE_INACTIVE_SIGNAL_OFFSET).value = self.amd_queue.va + sig
    self.write_id = ctypes.c_uint64.from_address(h + aql.AMD_QUEUE_WRITE_DISPATCH_ID_OFFSET)
    self.read_id = ctypes.c_uint64.from_address(h + aql.AMD_QUEUE_READ_DISPATCH_ID_OFFSET)
    self.sizes = sz = queue_sizes(dev.props)
    self.eop = dev.gpu_alloc(sz.eop, "vram")
    self.cwsr = dev.gpu_alloc(sz.bo_bytes, "gtt", host=True)   # CPU-visible: the kernel reads its headers (cwsr.py)
    fill_cwsr_headers(self.cwsr.host, sz, dev.error_payload.host, dev.error_event)
    q = dev.ioctl("AMDKFD_IOC_CREATE_QUEUE", ring_base_address=self.ring.va, ring_size=ring_bytes, gpu_id=dev.gpu_id,
                  queue_type=K.QUEUE_TYPE_COMPUTE_AQL, queue_percentage=K.MAX_QUEUE_PERCENTAGE, queue_priority=7,
                  write_pointer_address=self.amd_queue.va + aql.AMD_QUEUE_WRITE_DISPATCH_ID_OFFSET,
                  read_pointer_address=self.amd_queue.va + aql.AMD_QUEUE_READ_DISPATCH_ID_OFFSET,
                  eop_buffer_address=self.eop.va, eop_buffer_size=sz.eop, ctx_save_restore_address=self.cwsr.va,
                  ctx_save_restore_size=sz.cwsr, ctl_stack_size=sz.ctl_stack)
    self.queue_id = q.queue_id
    frame = q.doorbell_offset & ~(K.DOORBELL_PROCESS_FRAME_SIZE - 1)
    self.doorbell_page = syscalls.mmap(dev.kfd, K.DOORBELL_PROCESS_FRAME_SIZE, syscalls.PROT_READ | syscalls.PROT_WRITE, syscalls.MAP_SHARED, frame)
    self.doorbell = self.doorbell_page + (q.doorbell_offset & (K.DOORBELL_PROCESS_FRAME_SIZE - 1))
    self.put = 0   # packets written: the next write_dispatch_id
    self.closed, self._closed_bits, self._errors_lock = False, 0, threading.Lock()

  def submit_packets(self, packets: list[bytes]) -> None:
    """Store each 64-byte packet into its slot, body first and dword 0 last, then publish write_dispatch_id and ring
    the doorbell with the last packet's index. When the ring is full, what is already stored is published first: the
    CP reads only up to the doorbell/wptr (SLOT_BASED_WPTR, linux@v6.12.117:drivers/gpu/drm/amd/amdkfd/
    kfd_mqd_manager_v9.c:300-304), so a batch larger than the free slots would otherwise wait on itself (ROCr too
    publishes each packet before it waits for the next slot, ROCR@c7785a6:amd_aql_queue.cpp:1443-1447, 1559-1560)."""
    if not packets: return
    for p in packets:
      if len(p) != aql.PACKET_SIZE: raise ValueError(f"{self.name}: an AQL packet is {aql.PACKET_SIZE} bytes, got {len(p)}")
    next_check = 0.0
    for i, p in enumerate(packets):
      if self.put - self.read_id.value >= self.slots:   # the slot is free once the CP's read_dispatch_id passed it
        self._publish()
        # a no-progress timeout: the deadline moves whenever read_dispatch_id does, so a long graph whose GPU work
        # outlasts wait_timeout_s is never cut in half (ROCr waits for a slot with no deadline at all,
        # ROCR@c7785a6:amd_aql_queue.cpp:1443-1447); only a CP that stops reading ends the wait
        seen, deadline = self.read_id.value, time.perf_counter() + self.dev.wait_timeout_s
        while self.put - (rd := self.read_id.value) >= self.slots:
          if rd != seen: seen, deadline = rd, time.perf_counter() + self.dev.wait_timeout_s
          if time.perf_counter() > deadline:   # every stored packet is published (put == write_dispatch_id): no roll back
            raise TimeoutError(f"{self.dev.name}: {self.name} AQL ring stays full, no packet read for {self.dev.wait_timeout_s:g} s "
                               f"(read_dispatch_id {rd}, "
                               f"write {self.put}); {i} of {len(packets)} packets of this submit were queued")
          if time.perf_counter() >= next_check: self.dev.raise_if_faulted(); next_check = time.perf_counter() + 0.01   # a stopped queue never drains
          time.sleep(0.0001)
      slot = self.ring.host + (self.put % self.slots) * aql.PACKET_SIZE
      ctypes.memmove(slot + 4, p[4:], aql.PACKET_SIZE - 4)
      # the header last: the CP may take the slot as soon as it stops reading INVALID. An aligned 32-bit store after
      # the body is a release store on x86-64 (stores are not reordered with older stores), and the ring is KFD GTT,
      # which is CPU write-back, not write-combined (linux@v6.12.117:drivers/gpu/drm/amd/amdgpu/amdgpu_amdkfd_gpuvm.c:
      # 1751-1781 sets no CPU_GTT_USWC); ROCr adds an sfence only for a WC (VRAM) ring (amd_aql_queue.cpp:1552-1555).
      # A weakly ordered host would need a store barrier here.
      ctypes.c_uint32.from_address(slot).value = int.from_bytes(p[:4], "little")
      self.put += 1
      self.dev.pushes += 1   # (the CP may take this packet now: HCQDevice.pushes)
    self._publish()

  def set_scratch(self, va: int, plan: Any) -> None:
    """Publish the device's scratch (hcqrt/amd/scratch.py ScratchPlan at `va`) in amd_queue_t, where the CP firmware
    reads it for each dispatch with SCRATCH_EN, exactly as ROCr's InitScratchSRD fills it (ROCR@c7785a6:
    amd_aql_queue.cpp:1843-1894): the scratch buffer resource (NUM_RECORDS one XCC's part, :1619-1626), the backing
    memory's location and the size of one XCC's part ("report size per XCC", :1882-1883; the CP spaces the XCCs by
    it), COMPUTE_TMPRING_SIZE and the bytes a work-item may use, in wave64 lanes (:1889-1890). Called with the queue
    idle."""
    h, per_xcc = self.amd_queue.host, plan.size // plan.num_xcc
    # an APU node (KFD lists CPU cores on it: ROCr's HSA_PROFILE_FULL, amd_gpu_agent.cpp:121-122) sets the gfx9 ATC bit
    srd = aql.scratch_srd(int(plan.arch[3:-2]), va, per_xcc, apu=self.dev.props.get("cpu_cores_count", 0) > 0)
    for i, w in enumerate(srd): ctypes.c_uint32.from_address(h + aql.AMD_QUEUE_SCRATCH_RESOURCE_DESCRIPTOR_OFFSET + 4 * i).value = w
    ctypes.c_uint64.from_address(h + aql.AMD_QUEUE_SCRATCH_BACKING_MEMORY_LOCATION_OFFSET).value = va
    ctypes.c_uint64.from_address(h + aql.AMD_QUEUE_SCRATCH_BACKING_MEMORY_BYTE_SIZE_OFFSET).value = per_xcc
    ctypes.c_uint32.from_address(h + aql.AMD_QUEUE_SCRATCH_WAVE64_LANE_BYTE_SIZE_OFFSET).value = plan.wave64_lane_bytes
    ctypes.c_uint32.from_address(h + aql.AMD_QUEUE_COMPUTE_TMPRING_SIZE_OFFSET).value = plan.tmpring

  def take_errors(self) -> list[str]:
    """The error bits the CP wrote into queue_inactive_signal's value (cleared here, as ROCr stores 0 after handling
    them, ROCR@c7785a6:amd_aql_queue.cpp:1213), by name. The CP's own channel for AQL packet errors; whether the MEC
    also raises a bad-opcode interrupt that reaches the CWSR payload word depends on the firmware, so a wait reads both.
    After close() the page is gone: what it held then is kept and reported once (under the lock, so a wait on another
    thread never reads the page while close() frees it)."""
    with self._errors_lock:
      bits, self._closed_bits = (self._closed_bits, 0) if self.closed else (self._read_error_bits(), 0)
    return aql.queue_error_names(bits) if bits else []

  def _read_error_bits(self) -> int:
    value = ctypes.c_int64.from_address(self.amd_queue.host + aql.AMD_QUEUE_BYTES + 8)
    bits, value.value = value.value & (1 << 64) - 1, 0
    return bits

  def _publish(self) -> None:
    """write_dispatch_id = put, then the doorbell with the last stored packet's index (when there is a new one)."""
    if self.write_id.value == self.put: return
    self.write_id.value = self.put
    try: syscalls.mmio_write64(self.doorbell, self.put - 1)
    except Exception as e:   # the queue stopped on this work (a mock GPU reports it at the doorbell): start over on new queues
      e.args = (f"{self.dev.name}: {e}; {self.dev.recover()}",)   # (the mock's error need not name the device)
      raise

  def close(self) -> None:
    """DESTROY_QUEUE (errors ignored: the queue may be gone) and free its memory."""
    with self._errors_lock:
      if self.closed: return
      self._closed_bits, self.closed = self._read_error_bits(), True
    with contextlib.suppress(Exception): self.dev.ioctl("AMDKFD_IOC_DESTROY_QUEUE", queue_id=self.queue_id)
    with contextlib.suppress(OSError): syscalls.munmap(self.doorbell_page, K.DOORBELL_PROCESS_FRAME_SIZE)
    for b in (self.ring, self.amd_queue, self.eop, self.cwsr):
      with contextlib.suppress(Exception): self.dev.gpu_free(b)
