"""The mock GPU's front end: GPFIFO channels run on a doorbell, pushbuffers decoded into methods.

Doorbell: the client writes a channel's work-submit token to the usermode page (offset 0x90) through
hcqrt.syscalls.mmio_write32, the one register write the backend makes; MockNV.mmio_write32 calls
`ring(token)`. The engine then runs every channel with work (GPGet != GPPut in its USERD) until none can
progress: a semaphore acquire that is not yet satisfied parks its channel at that method, and parked
channels are retried on every later doorbell and by a poller thread (so a value the CPU writes later
also releases them, as on hardware). In latency mode (`engine.latency_s > 0`, for tests) a doorbell only queues
the work, and a thread runs it that much later, reading the ring and pushbuffers as they are by then; it takes up every
doorbell rung meanwhile too, in `latency_order` (default: the latest-rung channel first): nothing orders a GPU's
channels but semaphores, on different runlists or within one TSG (see the note above INTERLEAVE_SLICES). Held mode
(`with engine.held():`, for tests) is latency mode with no timer: doorbells queue until the test releases them.

Methods are decoded with the mock's own tables (classdefs.py, written from the class headers, never the
backend's ioctl_defs): host methods (SET_OBJECT, SEM_* with 32/64-bit payloads and timestamps, NOP, WFI,
MEM_OP_*, NON_STALL_INTERRUPT); copy engine (OFFSET_*, LINE_LENGTH_IN, LINE_COUNT, PITCH_*, SET_SEMAPHORE_*,
LAUNCH_DMA); compute engine (SEND_PCAS_A + SEND_SIGNALING_PCAS(2)_B launch the QMD at that address,
WAIT_FOR_IDLE, INVALIDATE_*, SET_SHADER_*, report semaphores).

Execution is adversarial where hardware is free: a launched grid is only *queued* on the compute engine.
Grids run when something orders them — WAIT_FOR_IDLE, INVALIDATE_SHADER_CACHES (not _NO_WFI), a copy-engine method
after compute ones (the subchannel switch), and the host WFI or a semaphore release with RELEASE_WFI when the
channel's last engine method went to the compute engine — or when the
channels run dry (latency mode: `latency_s` after that; held mode: at the next release(); see GRID_TIMING). Several
queued grids then run concurrently: their blocks interleave slice by slice, the newest launch's slice first, so a
kernel that reads its predecessor's output without a barrier reads stale memory, and a semaphore released without
RELEASE_WFI is seen before the grids finish. The front end also
runs later than the CPU expects: after a release in the middle of a segment it pauses and then fetches the rest of
the segment from memory again (RELEASE_STALL_S; inferred from the PBDMA manual, see there), so a CPU that rewrites a pushbuffer as soon as it sees a release
changes what still runs. Freeing a channel preempts a grid it is running (a kernel that never ends).

A launch reads and checks the QMD at the launch method (major version, QMD_TYPE, grid/block, constant bank 0, the
SM carve-out, the shared window alignment). The grid's first CTAs, when they run, fetch the code: the kernel found by
its code bytes (kernels.py) or, where the instruction cache still holds lines from that address, the kernel they came
from (fetch_code); the QMD is then checked against it (registers, shared memory, barriers, stack/local memory, the
code's prefetch slack). Each slice of CTAs reads its parameters and special registers from constant bank 0 as it is
then, through the constant cache (constcache.py: lines a grid read stay, stale, until an invalidate with CONSTANT),
and runs the PTX interpreter over the channel's GPU address space. Anything unknown or malformed raises GPUError naming
the channel, the pushbuffer address and the method, and the channel is left in an error state (later doorbells on it
raise the same error).
"""
from __future__ import annotations
import ctypes, math, random, re, struct, threading, time
from dataclasses import dataclass
from typing import Any
import numpy as np
from hcqrt.mock.held import Holdable
from hcqrt.mock.icache import stale_range
from hcqrt.mock.nv import classdefs as CD
from hcqrt.mock.nv.classdefs import class_name
from hcqrt.mock.nv.constcache import cached_read
from hcqrt.mock.ptx import AddressSpace
from hcqrt.mock.ptx.memory import MemoryFault
from hcqrt.mock.nv.kernels import INDEX, KnownKernel
from hcqrt.mock.nv.rm import NV2080_ENGINE_TYPE_GR0, NV2080_ENGINE_TYPE_COPY0

class GPUError(RuntimeError):
  """The mock GPU refused a command (the real one would raise an RC error / Xid on the channel)."""

# shared memory an SM can give one block (KiB; the largest carve-out MAX_SM_CONFIG_SHARED_MEM_SIZE may name)
SM_SHARED_KIB = {80: 164, 86: 100, 89: 100, 90: 228, 100: 228, 120: 100}
PREFETCH_SLACK = 0x1000      # instruction prefetch reads this far past a kernel's last instruction
# The PBDMA "fetches pushbuffer data from memory" as it goes (open-gpu-doc@c8607fe manuals/ampere/ga100/dev_pbdma.ref.txt:42-45);
# fetched-but-unprocessed data sits in a latency buffer, and prefetched data is discarded when the channel is switched
# out (:583-585, :3831-3834) -- which this TSG does on every failed acquire. The manual never says "refetch after a
# release": the model below is *inferred* from those lines, as their most harmful reading (nv22 R4). Nothing makes the
# PBDMA read a segment's later methods before an earlier semaphore release is visible to the CPU, so after a release
# in the middle of a segment the mock's front end pauses and then fetches the rest of the segment from memory again:
# a CPU that rewrites the pushbuffer once it sees the release changes what the GPU still has to run. The pause
# length is the mock's own choice (no source gives one); it only has to be long enough for a host to act.
RELEASE_STALL_S = 0.002
# Channels of one GPU on different runlists (the compute channel on GR's, the copy channel on a copy engine's: rm.py
# runlist_of) run independently: each runlist has its own scheduler, and a PBDMA "works on behalf of a single ESCHED
# (Engine Scheduler)" (open-gpu-doc@c8607fe manuals/ampere/ga100/dev_pbdma.ref.txt:42-45); nothing orders one channel's
# methods against another's but semaphores. hcqrt puts its compute and copy channels in one TSG (nv/device.py), and
# there too the order is undefined: a PBDMA switches "to the next pending channel on its runqueue within the same TSG"
# on a failed acquire (dev_pbdma.ref.txt:3738-3740) or, at the end of the runqueue, starts again or switches TSG
# (:3740-3743, 3811-3816), and GR and its copy engine run concurrently. So any order of due channels is a legal schedule,
# one runlist or two. Running them in doorbell (or creation) order would hide a missing semaphore wait between compute
# and copy work, so latency mode picks the order with `Engine.latency_order`: "latest" (the default: the later-rung
# channel first, so a copy that does not wait for the kernel reads its output before the kernel ran), "earliest" (the
# first-rung first, so a release on the compute channel that should follow a copy lands before the copy), or an int,
# a seed for a shuffle.
# GRID_TIMING: what a launch reads when. The QMD is read at the launch: SEND_SIGNALING_PCAS_B's INVALIDATE + SCHEDULE /
# SEND_SIGNALING_PCAS2_B's PCAS_ACTION_INVALIDATE_COPY_SCHEDULE (open-gpu-doc@c8607fe classes/compute/clc6c0.h:364-377,
# clcbc0.h:429-442) hand the QMD at SEND_PCAS_A's address to SKED, which holds it while the grid is active (invalidating
# an active QMD is a SKED error, manuals/ampere/ga100/pri_sked.ref.txt:167); Mesa NVK writes a QMD's grid size from the
# front end right before SEND_PCAS (mesa src/nouveau/vulkan/nvk_cmd_dispatch.c nvk_mme_dispatch_indirect), so it is not
# read before the method. (Inferred: that SKED never reads the QMD's memory again is not in the sources; it does not
# matter here, as no rewrite is allowed to be seen. The QMD keeps hardware working state while the grid runs: HW_ONLY_SKED_NEXT_QMD_POINTER, _DEPENDENCE_COUNTER
# and GRID_*_RESUME, where a preempted grid resumes (clcbc0qmd.h:337-345, 520-522; CTA_RASTER_*_RESUME
# clc6c0qmd.h:533-535); so a host may not touch a QMD before its grid is done: the mock refuses it, Channel.check_qmd.)
# Nothing copies the code or constant bank 0 at the launch: the QMD holds only their addresses (PROGRAM_ADDRESS,
# CONSTANT_BUFFER_ADDR), CTAs fetch instructions through the I$ and constant banks through the constant cache, on demand
# unless the QMD asks for a prefetch (CONSTANT_BUFFER_PREFETCH_POST, clc6c0qmd.h:695; V04_00 CONSTANT_BUFFER_PREFETCH
# NONE/PRE/POST and _INVALIDATE, clcbc0qmd.h:410-416), and a cache prefetch is no snapshot. Mesa nvc0 waits for idle
# (NV50_GRAPH_SERIALIZE, 0x110 = WAIT_FOR_IDLE) after every compute launch, before the next launch's UPLOAD_EXEC
# rewrites the driver constant buffer that grid reads (src/gallium/drivers/nouveau/nvc0/nve4_compute.c
# nve4_launch_grid, nve4_compute_upload_input). So the mock reads the code and constant bank 0 when a grid's CTAs run
# (Channel.start, Channel.run_grid), each slice of CTAs afresh: a write between the launch and the CTAs (the host's,
# another channel's) is seen, by some CTAs of a grid and not others.
# And the CTAs may run much later than the launch method: nothing but WAIT_FOR_IDLE, INVALIDATE_SHADER_CACHES (the
# form without _NO_WFI), a switch to the copy engine's subchannel (dev_ram.ref.txt:1012-1021, Channel.execute), a
# release with RELEASE_WFI or the host WFI (the last two only where the channel last sent
# methods to GR: they wait until "the engine to which the channel last sent methods is idle", dev_pbdma.ref.txt:3849-3857,
# 4572-4574, Channel.wait_engine_idle; RELEASE_WFI_DIS releases "without waiting for the engine to be idle") waits for a grid
# (REPORT_SEMAPHORE_EXECUTE drains too: an assumption, no source gives its ordering, and the lenient one; hcqrt does not
# use it), GR is shared with other TSGs' timeslices (dev_pbdma.ref.txt:3806-3825) and compute work is preempted mid-grid
# at a CTA boundary or an instruction ("COMPUTE_CTA ... COMPUTE_CILP: allow preempting the channel", OGKM
# src/common/sdk/nvidia/inc/ctrl/ctrl2080/ctrl2080gr.h NV2080_CTRL_CMD_GR_SET_CTXSW_PREEMPTION_MODE).
# In latency mode a grid nothing ordered runs `latency_s` after its channel ran dry; in held mode only at a release().
# (Synchronous mode keeps running them when the channels run dry, inside the doorbell.)
HELD = math.inf             # the due time of a held doorbell (GPFIFOEngine.hold): only release() makes it due
INTERLEAVE_SLICES = 4        # queued grids are cut into this many slices of blocks and run slice by slice
STACK_POINTER_CB0 = {"V03_00": 0x28, "V04_00": 0x28, "V05_00": 223 * 4}   # c[0] word an sm_XX kernel loads its stack pointer from

# Where the code reads PTX special registers and generic-address windows from: constant bank 0 (the bound cbuf's
# memory), not the QMD. The QMD's grid/block only decide which CTAs and threads run (%ctaid, %tid: S2R SR_CTAID /
# SR_TID). Evidence: ptxas 13.0 (CUDA 13.0, r13.0/compiler.36424714_0) of one probe kernel reading every register
# below, disassembled with nvdisasm 13.5.37 (PyPI nvidia-cuda-nvdisasm) -- the SASS lines are quoted per entry:
#   sm_80/sm_89 (QMD V03_00) and sm_90 (V04_00): %ntid.x/y/z `LDC R16, c[0x0][RZ]` / `c[0x0][0x4]` / `c[0x0][0x8]`,
#     %nctaid.x/y/z `LDC R19, c[0x0][0xc]` / `c[0x0][0x10]` / `c[0x0][0x14]`, %dynamic_smem_size `LDC R20, c[0x0][0x2c]`,
#     %nsmid `LDC R22, c[0x0][0x10c]`; stack pointer `LDC R1, c[0x0][0x28]`; cvta.local `ULDC UR4, c[0x0][0x20]` +
#     `c[0x0][0x24]`; parameters from c[0x0][0x160] (sm_8x) / c[0x0][0x210] (sm_90).
#   sm_100/sm_120 (V05_00): %ntid.x/y/z `LDC R16, c[0x0][0x360]` / `0x364` / `0x368`, %nctaid.x/y/z `LDC R19,
#     c[0x0][0x370]` / `0x374` / `0x378`, %nsmid `LDC R22, c[0x0][0x2d0]`; stack pointer `LDC R1, c[0x0][0x37c]`;
#     cvta.local `LDCU UR6, c[0x0][0x2f8]` + `0x2fc`; parameters from c[0x0][0x380]. %dynamic_smem_size is
#     `CS2R.32 R17, SR_CgaSize` + `LDC R17, c[0x0][R17+0x2ac]` (nv22 R3): a c[0] word indexed by a value no source
#     gives, which the backend never writes, so the GPU hands the kernel whatever is there. The mock cannot read the
#     right word and must not answer with the QMD's value (what the backend expects): such a launch is refused.
#   cvta.shared: sm_8x adds c[0x0][0x18] (`IMAD.MOV.U32 R4, RZ, RZ, c[0x0][0x18]` / `MOV R5, c[0x0][0x1c]`); sm_90+
#     takes the high word from `S2R R7, SR_SWINHI`, i.e. the window SET_SHADER_SHARED_MEMORY_WINDOW programmed.
def _cb0_specials(off_block: int, off_grid: int, extra: dict[str, int]) -> dict[str, int]:
  return {**{f"%ntid.{a}": off_block + 4 * i for i, a in enumerate("xyz")}, **{f"%nctaid.{a}": off_grid + 4 * i for i, a in enumerate("xyz")}, **extra}
CB0_SPECIALS = {"V03_00": _cb0_specials(0x0, 0xc, {"%dynamic_smem_size": 0x2c, "%nsmid": 0x10c}),
                "V04_00": _cb0_specials(0x0, 0xc, {"%dynamic_smem_size": 0x2c, "%nsmid": 0x10c}),
                "V05_00": _cb0_specials(0x360, 0x370, {"%nsmid": 0x2d0})}
LOCAL_WINDOW_CB0 = {"V03_00": 0x20, "V04_00": 0x20, "V05_00": 0x2f8}
SHARED_WINDOW_CB0 = {"V03_00": 0x18}   # later versions: the SET_SHADER_SHARED_MEMORY_WINDOW method (SR_SWINHI)

def _carveout_kib(v: int) -> int: return (v - 1) * 4   # SM config encoding: KiB / 4 + 1

class Blocked(Exception):
  """A semaphore acquire is not satisfied yet."""

@dataclass
class Grid:
  """A launched grid the compute engine has not finished yet. The QMD is read at the launch (Channel.launch_qmd); the
  code and constant bank 0 only when CTAs run (Channel.start, Channel.run_grid): see GRID_TIMING."""
  version: str
  qva: int                           # the QMD's address (named in errors)
  q: CD.QMDRead                      # the QMD as the launch read it
  prog: int                          # program address
  cb0: int                           # constant bank 0's address and size
  cb0_size: int
  grid: tuple[int, int, int]
  block: tuple[int, int, int]
  shared: int                        # the QMD's shared memory size
  win: int                           # SET_SHADER_SHARED_MEMORY_WINDOW at the launch
  regs: dict[str, int]               # the channel's method state at the launch (local memory for a kernel with a stack)
  at: int
  kk: KnownKernel | None = None      # the kernel the first CTAs fetched (None: no CTA has run)
  mem: AddressSpace | None = None
  dyn: int = 0                       # dynamic shared memory
  done: int = 0                      # blocks run so far
  epoch: int = 0                     # held mode: the engine's release count at the launch (a release runs older grids)
  qbytes: bytes = b""                # the QMD's bytes at the launch (check_qmd: nobody may rewrite them until the grid ends)

class Channel:
  """Execution state of one GPFIFO channel (the RM object holds the ring/USERD facts)."""
  def __init__(self, engine: GPFIFOEngine, obj: Any):
    self.engine, self.obj, self.d = engine, obj, obj.data
    self.host = CD.table(obj.cls)
    self.subc: dict[int, int] = {}                 # subchannel -> engine class bound by SET_OBJECT
    self.regs: dict[str, int] = {}                 # last value written per method name
    self.segment: list[tuple[int, int, int, int]] | None = None   # decoded (subc, offset, data, pb va) of the current entry
    self.pos = 0
    self.error: GPUError | None = None
    self.queued: list[Grid] = []                   # launched grids not yet run (unordered with each other)
    self.seg_src = (0, 0)                          # (va, dwords) of the current entry's pushbuffer segment
    self.released = self.refetch = False           # a semaphore release just landed / the segment must be fetched again
    self.stall_until = 0.0
    # the GP_PUT the front end has taken up: a held doorbell's GP_PUT is not seen until release(), so while the engine
    # holds, run() stops there even where USERD's GP_PUT (the host writes it before it rings) is further on
    self.put_seen = self.u32(CD.USERD_GPGET).value
    self.fault_engine = NV2080_ENGINE_TYPE_GR0          # engine a fault is charged to (the notifier's info16)
    self.last_engine: str | None = None                 # "compute"/"copy": the engine the channel last sent methods to
    self.name = f"channel {obj.data['chid']} ({class_name(obj.cls)})"

  @property
  def vs(self): return self.d["vaspace"].data["va"]
  def u32(self, off: int) -> ctypes.c_uint32: return ctypes.c_uint32.from_address(self.d["userd"] + off)

  def fail(self, msg: str, va: int | None = None) -> GPUError:
    self.error = GPUError(f"mock GPU {self.engine.gpu}: {self.name}{f' pushbuffer {va:#x}' if va is not None else ''}: {msg}")
    # RC recovery fills the error notifiers; info16 names the engine that faulted (GR0 unless the copy engine did)
    self.engine.rm.channel_error(self.obj, self.error.args[0], self.fault_engine)
    return self.error

  # ---- front end ----
  def run(self) -> bool:
    """Process entries until the ring is empty or an acquire blocks. Returns True if anything advanced."""
    if self.error is not None: raise self.error
    if not (self.d.get("enabled") or self.d.get("scheduled")): return False
    progressed, n = False, self.d["entries"]
    while True:
      get, put = self.u32(CD.USERD_GPGET).value, self.u32(CD.USERD_GPPUT).value
      if self.engine.hold: put = self.put_seen   # (held mode: only the doorbells taken up, not what USERD says now)
      else: self.put_seen = put
      if put >= n: raise self.fail(f"GPPut {put} is outside the {n}-entry ring")
      if get == put and self.segment is None: return progressed
      if self.segment is None:
        entry = struct.unpack("<Q", self.read(self.d["ring_va"] + get * CD.GP_ENTRY_BYTES, 8))[0]
        va, ndw, _ = CD.decode_gp_entry(entry)
        self.seg_src = (va, ndw)
        self.segment, self.pos = self.decode(va, ndw), 0
      elif self.refetch:   # the rest of the segment comes from memory once the front end goes on, as it is then
        if (now := time.perf_counter()) < self.stall_until: return progressed
        self.engine.busy_ns += int((now - self.stall_until + RELEASE_STALL_S) * 1e9)   # GPU-side latency, not host time
        self.refetch = False
        self.segment = self.decode(*self.seg_src)
      try:
        while self.pos < len(self.segment):
          self.execute(*self.segment[self.pos]); self.pos += 1; progressed = True; self.engine.steps += 1   # (not a failed acquire)
          if self.released and self.pos < len(self.segment):
            # a release landed mid-segment: the front end goes on later, fetching what follows afresh (below)
            self.released, self.refetch, self.stall_until = False, True, time.perf_counter() + RELEASE_STALL_S
            return progressed
          self.released = False
      except Blocked: return progressed
      except GPUError: self.u32(CD.USERD_GPGET).value = put; self.segment = None; self.queued.clear(); raise
      self.segment = None
      self.u32(CD.USERD_GPGET).value = (get + 1) % n
      progressed = True

  def read(self, va: int, n: int) -> bytes:
    try: return self.vs.read(va, n)
    except MemoryError as e: raise self.fail(str(e)) from None

  def const_read(self, va: int, n: int) -> bytes:
    """What CTAs read from a constant bank: through the constant cache (constcache.py), stale where it holds lines."""
    return cached_read(self.vs.ccache, self.read, va, n)

  def decode(self, va: int, ndw: int) -> list[tuple[int, int, int, int]]:
    words = np.frombuffer(self.read(va, ndw * 4), np.uint32).tolist()
    out, i = [], 0
    while i < len(words):
      op, subc, off, count = CD.decode_header(words[i])
      at = va + 4 * i
      if op == CD.SEC_IMMD: out.append((subc, off, count, at)); i += 1; continue
      if op == CD.SEC_END_SEGMENT: break
      if op not in (CD.SEC_INC, CD.SEC_NON_INC, CD.SEC_ONE_INC):
        raise self.fail(f"method header {words[i]:#010x} has unsupported SEC_OP {op}", at)
      if i + 1 + count > len(words): raise self.fail(f"method {off:#x} wants {count} data words, the segment has {len(words) - i - 1}", at)
      for j in range(count):
        step = j if op == CD.SEC_INC else (0 if op == CD.SEC_NON_INC else min(j, 1))
        out.append((subc, off + 4 * step, words[i + 1 + j], at))
      i += 1 + count
    return out

  # ---- methods ----
  def execute(self, subc: int, off: int, data: int, at: int) -> None:
    if off == 0:   # SET_OBJECT: bind an engine class to the subchannel
      cls = data & 0xFFFF
      engines = {c.cls for c in self.obj.children if c.kind in ("compute", "copy")}
      if cls not in engines: raise self.fail(f"SET_OBJECT {class_name(cls)} on subchannel {subc}: the channel's engine objects are {[class_name(c) for c in engines]}", at)
      self.subc[subc] = cls
      # GR's SetObject goes to the engine; "a CE SetObject is otherwise a no-op and is not sent to the copy engine"
      # (open-gpu-doc@c8607fe manuals/ampere/ga100/dev_pbdma.ref.txt:3577-3579): it does not change last_engine
      if (cls & 0xFF) == 0xC0: self.last_engine = "compute"
      return
    if off < 0x100:
      name = self.host.name_at(off)
      if name is None: raise self.fail(f"unknown host method {off:#x}", at)
      self.regs[name] = data
      if name == "SEM_EXECUTE": self.semaphore(data, at)
      elif name == "WFI": self.wait_engine_idle()
      elif name == "MEM_OP_D": self.vs.mem_op(data)   # L2 flush/invalidate of GPU-cached sysmem (vmem.py)
      return
    cls = self.subc.get(subc)
    if cls is None: raise self.fail(f"method {off:#x} on subchannel {subc}, which has no object (SET_OBJECT first)", at)
    t = CD.table(cls)
    kind = "copy" if (cls & 0xFF) == 0xB5 else "compute"
    # A subchannel switch from GR to its copy engine (subchannel 4 on the GR runlist) makes Host wait until GR has
    # completed its methods and is idle (WFI), then flush sysmem, before it sends the copy method (open-gpu-doc@c8607fe
    # manuals/ampere/ga100/dev_ram.ref.txt:1012-1021): the channel's queued grids finish first. (The switch back makes
    # FE "perform a cache invalidate", :1024-1026, of caches it does not name: not modelled, the harmful reading. Host-only
    # methods and a CE SetObject do not switch: :1023, dev_pbdma.ref.txt:3577-3579.)
    if kind == "copy" and self.last_engine == "compute": self.drain()
    self.fault_engine = NV2080_ENGINE_TYPE_COPY0 if kind == "copy" else NV2080_ENGINE_TYPE_GR0
    self.last_engine = kind
    name = t.name_at(off)
    if name is None: raise self.fail(f"method {off:#x} is not a {class_name(cls)} method", at)
    self.regs[name] = data
    if (cls & 0xFF) == 0xB5 and name == "LAUNCH_DMA": self.launch_dma(t, data, at)
    elif (cls & 0xFF) == 0xC0:
      if name in ("SEND_SIGNALING_PCAS_B", "SEND_SIGNALING_PCAS2_B"): self.launch_qmd(cls, t, name, data, at)
      elif name == "WAIT_FOR_IDLE": self.drain()
      elif name in ("INVALIDATE_SHADER_CACHES", "INVALIDATE_SHADER_CACHES_NO_WFI"):
        # The form without _NO_WFI waits for idle first: the grids launched before it finish (their code and c[0] reads
        # happen) before the invalidate acts. The class headers give only the two methods (clc6c0.h:221 vs :555,
        # clcbc0.h:299 vs :695); Mesa NVK emits NVA0C0 INVALIDATE_SHADER_CACHES as its compute wait-for-idle
        # (src/nouveau/vulkan/nvk_cmd_buffer.c nvk_cmd_flush_wait_dep, for NVK_BARRIER_COMPUTE_WFI; its 2025 rework says
        # "This is also implicitly a WFI").
        # _NO_WFI does not wait: a grid still queued reads after it and refills the caches from memory as it is then.
        if name == "INVALIDATE_SHADER_CACHES": self.drain()
        # _CONSTANT (bit 12) drops the constant cache's lines, for grids whose CTAs read c[0] after it (constcache.py)
        if t.field(name, "CONSTANT", data): self.vs.ccache.clear()
        if not t.field(name, "INSTRUCTION", data): return
        # _INSTRUCTION (bit 0: open-gpu-doc@c8607fe classes/compute/clc6c0.h:222,556, clcbc0.h:300,696, clcec0.h:263,667)
        # drops the lines CTAs would fetch. CTAs fetch when they run (see GRID_TIMING), so a grid launched before a
        # _NO_WFI invalidate whose CTAs have not run yet fetches after it, from memory as it is then. Only this channel's
        # address space is dropped, not other contexts' (an assumption: the headers don't say whether the I$ is per GPU,
        # per context or per channel; per address space, filled by any channel of it, is the harmful scope)
        self.vs.icache.clear()
      elif name == "REPORT_SEMAPHORE_EXECUTE": self.drain(); self.report_semaphore(t, data, at)

  def semaphore(self, data: int, at: int) -> None:
    h = self.host
    addr = (h.field("SEM_ADDR_HI", "OFFSET", self.regs.get("SEM_ADDR_HI", 0)) << 32) | (self.regs.get("SEM_ADDR_LO", 0) & 0xFFFFFFFC)
    payload = (self.regs.get("SEM_PAYLOAD_HI", 0) << 32) | self.regs.get("SEM_PAYLOAD_LO", 0)
    wide = h.field("SEM_EXECUTE", "PAYLOAD_SIZE", data) == 1
    op = h.field("SEM_EXECUTE", "OPERATION", data)
    if op == CD.SEM_OP["RELEASE"]:
      # RELEASE_WFI: the release waits for the engine to go idle (wait_engine_idle); without it the value lands while
      # grids still run
      if h.field("SEM_EXECUTE", "RELEASE_WFI", data): self.wait_engine_idle()
      ts = h.field("SEM_EXECUTE", "RELEASE_TIMESTAMP", data)
      # a release with RELEASE_TIMESTAMP writes 16 bytes: the address must be 16-byte aligned (else the SEMAPHORE
      # interrupt), and the ns timestamp at +8 is written before the payload (open-gpu-doc@c8607fe
      # manuals/ampere/ga100/dev_pbdma.ref.txt:3633-3634, 3861-3873)
      if addr % (16 if ts else 8 if wide else 4): raise self.fail(f"semaphore release address {addr:#x} is misaligned{' for a timestamp' if ts else ''}", at)
      if ts: self.write(addr + 8, struct.pack("<Q", time.perf_counter_ns()), at)
      self.write(addr, struct.pack("<Q", payload) if wide else struct.pack("<I", payload & 0xFFFFFFFF), at)
      self.released = True
      return
    if h.field("SEM_EXECUTE", "ACQUIRE_SWITCH_TSG", data):
      # switching out the TSG on a failed acquire also switches out the group's other channels, which may be
      # the ones that release the value: the mock refuses the combination
      mates = [c for c in self.obj.parent.children if c.kind == "channel" and c is not self.obj] if self.obj.parent is not None else []
      if mates and self.obj.parent.kind == "group":
        raise self.fail(f"semaphore acquire with ACQUIRE_SWITCH_TSG=EN in a channel group with {len(mates)} other channel(s): "
                        "a failed acquire would switch out the channels that release it", at)
    cur = struct.unpack("<Q" if wide else "<I", self.read(addr, 8 if wide else 4))[0]
    if not wide: payload &= 0xFFFFFFFF
    bits = 64 if wide else 32
    if op == 0: ok = cur == payload
    elif op == 2: ok = cur >= payload                                       # ACQ_STRICT_GEQ
    elif op == 3: ok = ((cur - payload) & ((1 << bits) - 1)) < (1 << (bits - 1))   # ACQ_CIRC_GEQ (wrapping compare)
    elif op == 4: ok = (cur & payload) != 0
    elif op == 5: ok = (cur | payload) != (1 << bits) - 1 if payload else cur == 0
    else: raise self.fail(f"SEM_EXECUTE operation {op} is not supported by the mock", at)
    if not ok: raise Blocked()

  def write(self, va: int, data: bytes, at: int) -> None:
    try: self.vs.write(va, data)
    except MemoryError as e: raise self.fail(str(e), at) from None

  def launch_dma(self, t: CD.MethodTable, data: int, at: int) -> None:
    r = self.regs
    def f(fname: str) -> int: return t.field("LAUNCH_DMA", fname, data)
    if f("DATA_TRANSFER_TYPE") != 0:
      if f("SRC_MEMORY_LAYOUT") != 1 or f("DST_MEMORY_LAYOUT") != 1: raise self.fail("LAUNCH_DMA: only PITCH layouts are supported", at)
      if f("SRC_TYPE") or f("DST_TYPE"): raise self.fail("LAUNCH_DMA: physical addresses are not supported", at)
      src = (t.field("OFFSET_IN_UPPER", "UPPER", r.get("OFFSET_IN_UPPER", 0)) << 32) | r.get("OFFSET_IN_LOWER", 0)
      dst = (t.field("OFFSET_OUT_UPPER", "UPPER", r.get("OFFSET_OUT_UPPER", 0)) << 32) | r.get("OFFSET_OUT_LOWER", 0)
      n = r.get("LINE_LENGTH_IN", 0)
      lines = r.get("LINE_COUNT", 1) if f("MULTI_LINE_ENABLE") else 1
      for ln in range(lines):
        s, d = src + ln * r.get("PITCH_IN", 0), dst + ln * r.get("PITCH_OUT", 0)
        if n: self.write(d, self.read(s, n), at)
      self.engine.copies.append((dst, src, n * lines))   # (tests: which GPU's copy engine moved what, where)
    sem = f("SEMAPHORE_TYPE")
    if sem:
      addr = (t.field("SET_SEMAPHORE_A", "UPPER", r.get("SET_SEMAPHORE_A", 0)) << 32) | r.get("SET_SEMAPHORE_B", 0)
      self.write(addr, struct.pack("<I", r.get("SET_SEMAPHORE_PAYLOAD", 0)), at)
      if sem == 2: self.write(addr + 8, struct.pack("<Q", time.perf_counter_ns()), at)

  def report_semaphore(self, t: CD.MethodTable, data: int, at: int) -> None:
    if t.field("REPORT_SEMAPHORE_EXECUTE", "OPERATION", data) != 0: raise self.fail("REPORT_SEMAPHORE_EXECUTE: only RELEASE is supported by the mock", at)
    r = self.regs
    addr = (t.field("SET_REPORT_SEMAPHORE_ADDRESS_UPPER", "UPPER", r.get("SET_REPORT_SEMAPHORE_ADDRESS_UPPER", 0)) << 32) | r.get("SET_REPORT_SEMAPHORE_ADDRESS_LOWER", 0)
    payload = (r.get("SET_REPORT_SEMAPHORE_PAYLOAD_UPPER", 0) << 32) | r.get("SET_REPORT_SEMAPHORE_PAYLOAD_LOWER", 0)
    wide = t.field("REPORT_SEMAPHORE_EXECUTE", "PAYLOAD_SIZE64", data)
    self.write(addr, struct.pack("<Q", payload) if wide else struct.pack("<I", payload & 0xFFFFFFFF), at)

  # ---- compute launches ----
  def launch_qmd(self, cls: int, t: CD.MethodTable, name: str, data: int, at: int) -> None:
    if name == "SEND_SIGNALING_PCAS2_B":
      if t.field(name, "PCAS_ACTION", data) not in CD.PCAS_ACTION_SCHEDULES: return   # only the scheduling actions launch
    elif not t.field(name, "SCHEDULE", data): return
    version = CD.QMD_OF_CLASS[cls]
    qva = self.regs.get("SEND_PCAS_A", 0) << 8
    q = CD.qmd_read(version, raw := self.read(qva, CD.QMD_BYTES[version]))
    def bad(msg: str) -> GPUError: return self.fail(f"QMD at {qva:#x}: {msg}", at)
    if q.get("QMD_MAJOR_VERSION") != CD.QMD_MAJOR[version]: raise bad(f"major version {q.get('QMD_MAJOR_VERSION')}, {class_name(cls)} reads {version}")
    if version == "V03_00":
      if q.get("IS_QUEUE"): raise bad("IS_QUEUE=TRUE: a queue QMD, not a grid launch")
    elif q.get("QMD_TYPE") != CD.QMD_TYPE_GRID_CTA: raise bad(f"QMD_TYPE {q.get('QMD_TYPE')}, a grid launch of CTAs is GRID_CTA ({CD.QMD_TYPE_GRID_CTA})")
    rel = [q.get("RELEASE0_ENABLE"), q.get("RELEASE1_ENABLE")] if version == "V03_00" else [q.get("RELEASE_ENABLE", i) for i in range(3)]
    dep = q.get("DEPENDENT_QMD0_ENABLE") if version == "V03_00" else q.get("DEPENDENT_QMD_ENABLE", 0)
    if any(rel) or dep: raise bad("QMD release semaphores / dependent QMDs are not modelled by the mock")
    grid = (q.get("GRID_WIDTH"), q.get("GRID_HEIGHT"), q.get("GRID_DEPTH"))
    block = (q.get("CTA_THREAD_DIMENSION0"), q.get("CTA_THREAD_DIMENSION1"), q.get("CTA_THREAD_DIMENSION2"))
    if min(grid) < 1 or min(block) < 1 or block[0] * block[1] * block[2] > 1024: raise bad(f"bad launch shape grid {grid} block {block}")
    prog = q.address("PROGRAM_ADDRESS_LOWER_SHIFTED4", "PROGRAM_ADDRESS_UPPER_SHIFTED4", 4) if version == "V05_00" else \
           q.address("PROGRAM_ADDRESS_LOWER", "PROGRAM_ADDRESS_UPPER")
    if not q.get("CONSTANT_BUFFER_VALID", 0): raise bad("constant buffer 0 (kernel parameters) is not valid")
    cb0 = q.address("CONSTANT_BUFFER_ADDR_LOWER", "CONSTANT_BUFFER_ADDR_UPPER", 0, 0) if version == "V03_00" else \
          q.address("CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6", "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6", 6, 0)
    cb0_size = q.get("CONSTANT_BUFFER_SIZE_SHIFTED4", 0) << 4
    shared = q.get("SHARED_MEMORY_SIZE_SHIFTED7") << 7 if version == "V05_00" else q.get("SHARED_MEMORY_SIZE")
    self.check_sm_config(q, shared, bad)
    win = (t.field("SET_SHADER_SHARED_MEMORY_WINDOW_A", "BASE_ADDRESS_UPPER", self.regs.get("SET_SHADER_SHARED_MEMORY_WINDOW_A", 0)) << 32) | \
          self.regs.get("SET_SHADER_SHARED_MEMORY_WINDOW_B", 0)
    if self.engine.rm.chip.arch.sm >= 90 and (win == 0 or win % (1 << 32)):   # generic addresses into shared memory need a 4 GiB aligned window
      raise bad(f"shared memory window {win:#x} is not set to a 4 GiB aligned base")
    # The QMD's INVALIDATE_SHADER_CONSTANT_CACHE (clc6c0qmd.h:530 V03_00 bit 191, clcbc0qmd.h:447 V04_00 bit 607,
    # clcdc0qmd.h:169 V05_00 bit 477) drops the constant cache here, when SKED takes the QMD: no source gives its timing
    # (an assumption, the harmful one: constcache.py). Lines other grids' CTAs fill between this launch and this grid's
    # CTAs stay, stale once memory changes; and since the mock drains the newest launch first, no older grid's start
    # drops lines between this grid's slices either.
    if q.get("INVALIDATE_SHADER_CONSTANT_CACHE"): self.vs.ccache.clear()
    # Its INVALIDATE_INSTRUCTION_CACHE (clc6c0qmd.h:527 V03_00 bit 190, clcbc0qmd.h:444 V04_00 bit 606, clcdc0qmd.h:166
    # V05_00 bit 476) likewise: no source gives its timing, and the launch is the harmful one: code lines other grids'
    # CTAs fetch between this launch and this grid's CTAs stay, for later grids (a drop at the CTAs would refresh them)
    if q.get("INVALIDATE_INSTRUCTION_CACHE"): self.vs.icache.clear()
    # the code and constant bank 0 are not read here: the grid's CTAs read them when they run (see GRID_TIMING)
    self.queued.append(Grid(version, qva, q, prog, cb0, cb0_size, grid, block, shared, win, dict(self.regs), at, epoch=self.engine.epoch, qbytes=raw))
    self.engine.launches += 1

  def start(self, g: Grid) -> None:
    """The grid's first CTAs: they fetch the code (through the I$) and the launch facts are checked against it."""
    def bad(msg: str) -> GPUError: return self.fail(f"QMD at {g.qva:#x}: {msg}", g.at)
    q, version = g.q, g.version
    # (the QMD's INVALIDATE_INSTRUCTION_CACHE and INVALIDATE_SHADER_CONSTANT_CACHE acted earlier, at the launch:
    # launch_qmd, constcache.py; the backend does not lean on the first, its launches also send
    # INVALIDATE_SHADER_CACHES_NO_WFI _INSTRUCTION before the PCAS)
    kk = self.fetch_code(g.prog, g.cb0_size, bad)
    k, who = kk.facts, f"kernel {kk.name}"
    try: self.vs.translate(g.prog, len(kk.text) + PREFETCH_SLACK)
    except MemoryError: raise bad(f"{who}: fewer than {PREFETCH_SLACK:#x} mapped bytes follow its code at {g.prog:#x}+{len(kk.text):#x} "
                                  "(instruction prefetch would fault)") from None
    if k.param_offset + k.param_size > g.cb0_size: raise bad(f"{who}: constant buffer 0 is {g.cb0_size} bytes, parameters need {k.param_offset + k.param_size}")
    regs = q.get("REGISTER_COUNT")
    if regs < k.registers: raise bad(f"{who} uses {k.registers} registers per thread, the QMD gives {regs}")
    if q.get("BARRIER_COUNT") < k.barriers: raise bad(f"{who} uses {k.barriers} barriers, the QMD's BARRIER_COUNT is {q.get('BARRIER_COUNT')}")
    if g.shared < k.shared_static: raise bad(f"{who} has {k.shared_static} bytes of static shared memory, the QMD's SHARED_MEMORY_SIZE is {g.shared}")
    if k.stack: self.check_stack(q, version, k.stack, g.cb0, who, bad, g.regs)
    # what the QMD gives beyond the static shared memory (and sm_90's reserved 1 KiB) is dynamic shared memory
    static = k.shared_static or (0x400 if self.engine.rm.chip.arch.sm >= 90 else 0)
    g.kk, g.dyn, g.mem = kk, max(0, g.shared - static), self.engine.address_space(self.vs)

  def fetch_code(self, prog: int, cb0_size: int, bad) -> KnownKernel:
    """The kernel a launch at `prog` runs. The instruction caches keep the code earlier launches fetched, per program
    address, until an invalidate drops them (INVALIDATE_SHADER_CACHES(_NO_WFI) INSTRUCTION, the QMD's
    INVALIDATE_INSTRUCTION_CACHE): new code loaded where a freed program was runs the OLD program's instructions, as a
    stale I$ would (silently on hardware). Code at another address overlapping held lines with different bytes would
    run a mix of both, which the mock cannot interpret: refused, naming the addresses."""
    ic = self.vs.icache
    def code(n: int) -> bytes:
      try: return self.vs.read(prog, n)
      except MemoryError: return b""
    kk = INDEX.find(code, cb0_size)
    if (held := ic.get(prog)) is not None:   # every line of the held kernel is cached (harmful: none is refetched)
      return kk if kk is not None and kk.text == held.text else held
    if kk is None:
      from compiler.assemble.ptx_assembler import PTX_OF_CUBIN_MAX   # hcqrt/mock may read the compiler
      raise bad(f"no known kernel at program address {prog:#x} (code {code(16).hex()}...): not from a cubin assembled in "
                f"this process, or assembled before the last {PTX_OF_CUBIN_MAX} (PTX_OF_CUBIN_MAX) and not launched since")
    if (stale := stale_range(((va, h.text) for va, h in ic.items()), prog, kk.text)) is not None:
      va, a, b = stale
      raise bad(f"kernel {kk.name} runs stale instruction-cache lines: the code at {a:#x}..{b:#x} changed since a "
                f"launch fetched it (kernel {ic[va].name} at {va:#x}) and no INVALIDATE_SHADER_CACHES(_NO_WFI) INSTRUCTION or QMD "
                "INVALIDATE_INSTRUCTION_CACHE dropped the I$ since")
    ic[prog] = kk
    return kk

  def cb0_reads(self, version: str, kk: KnownKernel, cb0: int, cb0_size: int, win: int, bad) -> tuple[dict[str, int], tuple[int | None, int | None]]:
    """The special registers and windows the kernel's code loads from constant bank 0 (CB0_SPECIALS), read from the
    bound buffer now, through the constant cache (const_read: held lines are stale until an invalidate). A word past
    the buffer's size the kernel reads is a launch error; a word it does not read is left out."""
    def word(off: int, n: int, what: str) -> int:
      if off + n > cb0_size: raise bad(f"kernel {kk.name} reads {what} from c[0][{off:#x}], past constant buffer 0's {cb0_size} bytes")
      return int.from_bytes(self.const_read(cb0 + off, n), "little")
    used = set(re.findall(r"%(?:ntid|nctaid)\.[xyz]|%dynamic_smem_size|%nsmid", kk.ptx))
    if version == "V05_00" and "%dynamic_smem_size" in used:
      raise bad(f"kernel {kk.name} reads %dynamic_smem_size, which QMD V05_00 code loads from c[0][SR_CgaSize+0x2ac], "
                "a word the backend does not write (unknown index): pass the size as a kernel parameter")
    specials = {r: word(off, 4, r) for r, off in CB0_SPECIALS[version].items() if r in used}
    cvta = set(re.findall(r"cvta(?:\.to)?\.(shared|local)", kk.ptx)) | ({"shared", "local"} if re.search(r"\b(?:ld|st|atom|red)(?!\.(?:global|shared|local|param|const))\.", kk.ptx) else set())
    local = word(LOCAL_WINDOW_CB0[version], 8, "the local window") if "local" in cvta else None
    shared = (word(SHARED_WINDOW_CB0[version], 8, "the shared window") if version in SHARED_WINDOW_CB0 else win) if "shared" in cvta else None
    return specials, (shared, local)

  def check_sm_config(self, q: CD.QMDRead, shared: int, bad) -> None:
    lo, tgt, hi = (q.get(f"{f}_SM_CONFIG_SHARED_MEM_SIZE") for f in ("MIN", "TARGET", "MAX"))
    top = SM_SHARED_KIB.get(self.engine.rm.chip.arch.sm, 100)
    if not 1 <= lo <= tgt <= hi or _carveout_kib(hi) > top:
      raise bad(f"SM shared-memory config MIN {lo} <= TARGET {tgt} <= MAX {hi} (KiB/4+1, at most {top} KiB) does not hold")
    if _carveout_kib(tgt) * 1024 < shared: raise bad(f"SM config TARGET {_carveout_kib(tgt)} KiB is smaller than the block's {shared} bytes of shared memory")

  def check_stack(self, q: CD.QMDRead, version: str, stack: int, cb0: int, who: str, bad, regs: dict[str, int]) -> None:
    """A kernel with a stack: per-thread local memory in the QMD's HIGH size (where CUDA-built code has it), the
    stack pointer it loads from constant bank 0, and a local-memory buffer holding every TPC's slice."""
    v05 = version == "V05_00"
    high = q.get("SHADER_LOCAL_MEMORY_HIGH_SIZE_SHIFTED4" if v05 else "SHADER_LOCAL_MEMORY_HIGH_SIZE") << (4 if v05 else 0)
    low = q.get("SHADER_LOCAL_MEMORY_LOW_SIZE_SHIFTED4" if v05 else "SHADER_LOCAL_MEMORY_LOW_SIZE") << (4 if v05 else 0)
    if high < stack: raise bad(f"{who} needs {stack} bytes of stack per thread, the QMD's SHADER_LOCAL_MEMORY_HIGH_SIZE is {high} (LOW {low})")
    sp = struct.unpack("<I", self.const_read(cb0 + STACK_POINTER_CB0[version], 4))[0]
    if sp < stack or sp % 16: raise bad(f"{who}: initial stack pointer c[0][{STACK_POINTER_CB0[version]:#x}] = {sp:#x} (the kernel's first load) is unset or too small for {stack} bytes")
    r, c, t = regs, self.engine.rm.chip, CD.table(self.engine.rm.chip.arch.compute)
    base = (t.field("SET_SHADER_LOCAL_MEMORY_A", "ADDRESS_UPPER", r.get("SET_SHADER_LOCAL_MEMORY_A", 0)) << 32) | r.get("SET_SHADER_LOCAL_MEMORY_B", 0)
    per_tpc = (t.field("SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A", "SIZE_UPPER", r.get("SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A", 0)) << 32) | \
              r.get("SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B", 0)
    need_tpc = high * 32 * c.max_warps_per_sm * c.sm_per_tpc     # every thread a TPC can hold
    if base == 0 or per_tpc < need_tpc:
      raise bad(f"{who}: local memory {base:#x} with {per_tpc:#x} bytes per TPC; {high} bytes per thread need {need_tpc:#x} per TPC")
    tpcs = c.gpcs * c.tpc_per_gpc
    try: self.vs.translate(base, per_tpc * tpcs)
    except MemoryError: raise bad(f"{who}: {tpcs} TPC slices of {per_tpc:#x} bytes from {base:#x} run past the local-memory buffer "
                                  "(SET_SHADER_LOCAL_MEMORY_NON_THROTTLED takes bytes per TPC)") from None

  def wait_engine_idle(self) -> None:
    """The host WFI method and a release with RELEASE_WFI: Host waits "until the engine to which the channel last sent
    methods is idle" (open-gpu-doc@c8607fe manuals/ampere/ga100/dev_pbdma.ref.txt:3849-3853 RELEASE_WFI, :4572-4577
    WFI), whatever the method's subchannel; "if a WFI with ALL is specified and the channel last sent work to the GRCE,
    this will only guarantee that GRCE has no work in progress" (:4583-4589). So this channel's grids are waited for
    only when its last engine method went to the compute engine; after a copy-engine method (the mock's copies are done
    when their LAUNCH_DMA is) or before any engine method, queued grids go on -- though a channel has none then: the
    switch to the copy engine already waited for them (dev_ram.ref.txt:1012-1021, Channel.execute). Neither SCOPE (ALL:
    the context's work, CURRENT_VEID: its VEID's, :4578-4582) makes the mock wait for other channels' grids: narrower
    than ALL's "all work in the engine from the same context"; hcqrt's copy channel sends GR nothing."""
    if self.last_engine == "compute": self.drain()

  def drain(self, before: float = math.inf) -> None:
    """Run the queued grids (those launched before release `before`, held mode) to completion. Several at once run
    concurrently: slice by slice, newest launch first."""
    q = [g for g in self.queued if g.epoch < before]
    self.queued = [g for g in self.queued if g.epoch >= before]
    if not q: return
    self.engine.steps += 1
    slices = 1 if len(q) == 1 else INTERLEAVE_SLICES
    for s in range(slices):
      for g in reversed(q):
        n = g.grid[0] * g.grid[1] * g.grid[2]
        end = n * (s + 1) // slices
        if end > g.done: self.run_grid(g, g.done, end - g.done); g.done = end

  def preempted(self) -> str | None:
    """Freeing a channel (or its group) stops what it runs: freeing a TSG first frees each of its channels
    (OGKM@580.142 src/nvidia/src/kernel/gpu/fifo/kernel_channel_group_api.c, kchangrpapiDestruct_IMPL: "If channels
    still exist in this group, free them"), and a freed channel's context leaves the engine with it; a grid still
    running there (one that never ends) is dropped rather than finished."""
    o = self.obj
    while o is not None:
      if o.data.get("freed"): return "preempted: its channel was freed"
      o = o.parent
    return None

  def run_grid(self, g: Grid, first: int, count: int) -> None:
    """Run `count` CTAs of `g` from `first`. They read constant bank 0 (parameters, special registers, windows) as it
    is now, not as it was at the launch (see GRID_TIMING): a host or engine write in between is seen, unless the
    constant cache still holds the line (const_read)."""
    if self.preempted(): return   # its channel went away before these CTAs ran: nothing is left to run them
    self.check_qmd(g, f"CTA {first}")
    if g.kk is None: self.start(g)
    kk = g.kk
    assert kk is not None and g.mem is not None
    def bad(msg: str) -> GPUError: return self.fail(f"QMD at {g.qva:#x}: {msg}", g.at)
    params = self.const_read(g.cb0 + kk.facts.param_offset, kk.facts.param_size)
    specials, windows = self.cb0_reads(g.version, kk, g.cb0, g.cb0_size, g.win, bad)
    try:
      with self.vs.kernel_access(): INDEX.module(kk).launch(kk.name, g.mem, g.grid, g.block, params, g.dyn, blocks=(first, count),
                                                               specials=specials, windows=windows, abort=self.preempted)
    except Exception as e:
      self.queued.clear()
      if self.preempted(): return   # its channel went away mid-grid: dropped, not a fault (nobody is left to tell)
      # a global access outside every GPU mapping is an MMU fault (RM: Xid 31), anything else a GR exception (Xid 13)
      kind = "hit a GPU page fault" if isinstance(e, MemoryFault) and "outside every mapping" in str(e) else "faulted"
      raise self.fail(f"kernel {kk.name} grid {g.grid} block {g.block} {kind}: {e}", g.at) from None
    if first + count == g.grid[0] * g.grid[1] * g.grid[2]: self.check_qmd(g, "the grid's end")   # (its last CTAs ran)

  def check_qmd(self, g: Grid, when: str) -> None:
    """The QMD must hold the bytes the launch read until its grid ends: SKED holds an active QMD (GRID_TIMING) and the
    hardware keeps the grid's working state in it while the grid runs -- the HW_ONLY_* fields, HW_ONLY_SKED_NEXT_QMD_POINTER
    and HW_ONLY_DEPENDENCE_COUNTER among them (open-gpu-doc@c8607fe classes/compute/clcbc0qmd.h:337-345, :343-344), GRID_WIDTH/HEIGHT/DEPTH_RESUME,
    where a preempted grid goes on (clcbc0qmd.h:520-522; V03_00 CTA_RASTER_*_RESUME clc6c0qmd.h:533-535). A host or engine
    write between the launch and the grid's end is undefined (lost, or mixed with the hardware's state): refused, checked
    before each slice of CTAs and after the last, naming the QMD's address."""
    try: now = self.vs.read(g.qva, len(g.qbytes))
    except MemoryError: now = b""
    if now == g.qbytes: return
    self.queued.clear()
    diff = next((i for i, (a, b) in enumerate(zip(now, g.qbytes)) if a != b), None)
    what = f"its byte {diff:#x} changed" if diff is not None else "it was unmapped"
    raise self.fail(f"QMD at {g.qva:#x} was rewritten while its grid {g.grid} was pending ({what} between the launch and {when}): "
                    "the hardware keeps the grid's state in its QMD until the grid ends; wait for the grid before reusing it", g.at)

class GPFIFOEngine(Holdable):
  """All channels of one GPU of a MockNV; `ring(token)` is its doorbell. Each GPU's engine runs only its own channels."""
  def __init__(self, rm: Any, gpu: int = 0):
    self.rm, self.gpu = rm, gpu
    self.channels: dict[int, Channel] = {}
    self._spaces: dict[int, tuple[list, AddressSpace]] = {}
    self.lock = threading.RLock()
    self._poller: threading.Thread | None = None
    self.launches = 0
    self.copies: list[tuple[int, int, int]] = []   # (dst va, src va, bytes) of every copy this GPU's copy engine ran
    self.busy_ns = 0        # time spent "on the GPU" (inside doorbells), so hosts can measure their own cost apart
    self.paused = False     # benchmarks: doorbells are only recorded, to time the host path alone
    self.pending_doorbells: list[int] = []
    # Latency mode (tests widen host/GPU races with it): a doorbell only queues the work, and the front end starts on
    # it `latency_s` later on its own thread. Host (the PBDMA) processes GP entries asynchronously to the CPU: GP_GET
    # names "the next PB segment to begin being processed" and moves once an entry has *begun* processing, so the
    # segment it names is still read afterwards (open-gpu-doc@c8607fe manuals/ampere/ga100/dev_pbdma.ref.txt:402-413),
    # and the PBDMA takes up USERD's GP_PUT by itself, later ("not immediately synchronized with NV_RAMUSERD_GP_PUT",
    # :476-480). Only a semaphore release the host waits for says that a pushbuffer, QMD or cbuf has been read. The
    # delayed run reads GPPut, the GP entries, pushbuffers, QMDs and cbufs as they are *then* (the harmful reading):
    # a host that rewrites them before that release changes what runs. 0 (the default): run at the doorbell.
    self.latency_s = 0.0
    self.latency_order: str | int = "latest"     # which due channel runs first (the note above INTERLEAVE_SLICES)
    self._rng: tuple[int, random.Random] | None = None   # (seed, generator) of a shuffled latency_order
    # Held mode: latency mode's extreme, chosen by the test. A channel's work may start arbitrarily late relative to the
    # CPU: its TSG waits behind the other TSGs' timeslices on a shared runlist (dev_pbdma.ref.txt:3806-3825, with
    # :3738-3743 cited above), and the PBDMA may go on with an older GP_PUT than the host wrote ("not immediately",
    # :477-480: Channel.put_seen). So a GPU that takes a doorbell up only when the test says (`release()`) is a legal
    # one; the test picks the point a race needs instead of hoping a timer outlasts the host's next step under load.
    # While `hold` is on (hcqrt/mock/held.py) a doorbell is queued as in latency mode (due HELD); release() makes every
    # held one due at once, taken up by the latency_order rules below. A host wait on held work is not special:
    # Signal.wait and synchronize() always have a timeout (hcqrt/hcq.py DEFAULT_TIMEOUT_S, HCQDevice.wait_timeout_s), so
    # it ends in their SignalTimeout naming the signal and value. The runtime then recovers on new channels, whose
    # doorbells are held too: release in a `finally` (held() does).
    self._queued: list[tuple[float, int, int]] = []   # (due time or HELD, work-submit token, its GP_PUT) of doorbells not yet acted on
    # (tests) methods completed (a failed acquire is not) and grid batches run so far: tests/held_gpu.py reads it before and after it asks every GPU
    # idle(), one GPU after the other, so that a GPU another one unblocked meanwhile is not taken for idle
    self.steps = 0
    self._taking = 0        # batches of doorbells the front end's thread took from _queued and has not finished yet
    self._cv = threading.Condition(threading.Lock())   # not self.lock: a doorbell never waits for the GPU
    # when the front end's thread runs the grids nothing ordered (latency and held mode, see GRID_TIMING): `latency_s`
    # after their channels ran dry, or at a release() (held); inf: not due
    self._grids_due = math.inf
    self.epoch = 0   # release() calls so far: a release runs the grids held before it, not those launched after it (Grid.epoch)
    self._runner: threading.Thread | None = None

  def channel(self, obj: Any) -> Channel:
    key = id(obj)
    if key not in self.channels or self.channels[key].obj is not obj: self.channels[key] = Channel(self, obj)
    return self.channels[key]

  def address_space(self, vs: Any) -> AddressSpace:
    """The interpreter's view of a GPU VA space (rebuilt when its mappings change)."""
    maps = vs.mappings()
    cached = self._spaces.get(id(vs))
    if cached is not None and cached[0] == maps: return cached[1]
    mem = AddressSpace()
    for va, size, host in maps: mem.map(va, np.frombuffer((ctypes.c_char * size).from_address(host), np.uint8))
    self._spaces[id(vs)] = (maps, mem)
    return mem

  def release(self, keep_holding: bool = False) -> int:
    """Make every held doorbell due now (they run on the front end's thread, in latency_order); `keep_holding`: later
    doorbells are held again. Returns how many were held."""
    with self._cv:
      self._hold = keep_holding
      now, n = time.perf_counter(), sum(d == HELD for d, _, _ in self._queued)
      self._queued = [(now if d == HELD else d, t, p) for d, t, p in self._queued]
      self._grids_due, self.epoch = now, self.epoch + 1   # (the grids held so far too: their CTAs run now)
      self._wake()
    return n

  def idle(self) -> bool:
    """(tests) Whether this GPU can do nothing more by itself now: no doorbell due or being taken up (held ones aside),
    no grid queued (but held ones), and each channel empty, in error, or parked on an acquire that still fails (tried
    here, as the poller does). A channel waiting out RELEASE_STALL_S before its refetch is not idle."""
    with self._cv:
      if self._taking or any(d != HELD for d, _, _ in self._queued) or self._grids_due != math.inf: return False
    with self.lock:
      now = time.perf_counter()
      for c in list(self.channels.values()):
        if c.error is not None: continue
        if (c.queued and not self.hold) or (c.refetch and c.stall_until > now): return False
        if c.segment is not None:
          try:
            if c.run(): return False
          except GPUError: return False   # (kept on the channel, as the poller keeps it)
      return True

  def ring(self, token: int) -> None:
    if self.paused: self.pending_doorbells.append(token); return
    # (a doorbell rung while late work is still queued joins it, so the queue's order rules hold for it too)
    if self.latency_s > 0 or self.hold or self._queued: self._queue(token); return
    with self.lock:
      t0 = time.perf_counter_ns()
      try:
        try: obj = self.rm.channel_by_token(token, self.gpu)
        except KeyError: raise GPUError(f"mock GPU {self.gpu}: doorbell with unknown work-submit token {token}") from None
        self.channel(obj)
        self.run_all(obj)
      finally: self.busy_ns += time.perf_counter_ns() - t0

  def _queue(self, token: int) -> None:
    # the doorbell's own checks happen now (an unknown token, a channel already in error); the work runs later
    try: obj = self.rm.channel_by_token(token, self.gpu)
    except KeyError: raise GPUError(f"mock GPU {self.gpu}: doorbell with unknown work-submit token {token}") from None
    if (c := self.channels.get(id(obj))) is not None and c.obj is obj and c.error is not None: raise c.error
    with self._cv:
      # (with the GP_PUT this doorbell announces: the host wrote it to USERD before it rang)
      put = ctypes.c_uint32.from_address(obj.data["userd"] + CD.USERD_GPPUT).value
      self._queued.append((HELD if self.hold else time.perf_counter() + self.latency_s, token, put))
      self._wake()

  def _wake(self) -> None:
    """(with _cv held) Start the front end's thread if it is not running, and tell it there is work."""
    if self._runner is None or not self._runner.is_alive():
      self._runner = threading.Thread(target=self._run_late, daemon=True, name="nvmock-pbdma")
      self._runner.start()
    self._cv.notify()

  @property
  def grids_late(self) -> bool:
    """Whether grids nothing ordered run later than their channels running dry (see GRID_TIMING)."""
    return self.hold or self.latency_s > 0

  def settle_grids(self, rung: Any = None) -> bool:
    """The channels ran dry: run the grids still queued now (synchronous mode; True if any ran), or leave them to the
    front end's thread, `latency_s` later (latency mode) or at the next release() (held mode)."""
    if not self.grids_late: return self.finish_grids(rung)
    if not self.hold and any(c.queued and c.error is None for c in self.channels.values()):
      with self._cv:
        self._grids_due = min(self._grids_due, time.perf_counter() + self.latency_s)
        self._wake()
    return False

  def _in_order(self, tokens: list[int]) -> list[int]:
    """Due doorbells (rung order) in the order the front end takes them up: `latency_order`."""
    if self.latency_order == "latest": return tokens[::-1]
    if self.latency_order == "earliest": return tokens
    if isinstance(self.latency_order, int):   # one generator per seed, so a run's successive batches differ
      if self._rng is None or self._rng[0] != self.latency_order: self._rng = (self.latency_order, random.Random(self.latency_order))
      self._rng[1].shuffle(tokens); return tokens
    raise ValueError(f"mock GPU {self.gpu}: latency_order {self.latency_order!r}; expected 'latest', 'earliest' or an int seed")

  def _run_late(self) -> None:
    """The front end's thread in latency (or held) mode: acts on each doorbell once it is due; leaves after a quiet while."""
    while True:
      with self._cv:
        while (first := min(min((d for d, _, _ in self._queued), default=HELD), self._grids_due)) > time.perf_counter():
          if not self._cv.wait(min(first - time.perf_counter(), 1.0)) and not self._queued and self._grids_due == math.inf:
            self._runner = None; return
        if grids := self._grids_due <= time.perf_counter(): self._grids_due = math.inf
        before = self.epoch if self.hold else math.inf   # (held: grids launched after the release stay held)
        # every doorbell rung so far (and not held) is taken up now, in latency_order (see the note above
        # INTERLEAVE_SLICES): the front end is late for the first, and nothing makes the GPU's other channels wait behind it
        puts = {t: p for d, t, p in self._queued if d != HELD}   # (rung order: a channel's last doorbell's GP_PUT wins)
        tokens = self._in_order([t for d, t, _ in self._queued if d != HELD])
        self._queued = [(d, t, p) for d, t, p in self._queued if d == HELD]
        self._taking += 1
        # any order but "latest": the first channel runs alone and the others' doorbells are taken up latency_s later
        # (the PBDMA takes up GP_PUT "not immediately", dev_pbdma.ref.txt:476-480, and GR and the copy engine run
        # concurrently), so work one channel releases early is seen by the other GPU before this GPU's other channel ran
        alone = self.latency_order != "latest"
        if alone:
          later = time.perf_counter() + self.latency_s
          self._queued += [(later, t, puts[t]) for t in dict.fromkeys(tokens[1:])]; tokens = tokens[:1]
      with self.lock:
        t0 = time.perf_counter_ns()
        try:
          for token in dict.fromkeys(tokens):
            try: obj = self.rm.channel_by_token(token, self.gpu)
            except KeyError: continue   # the channel was freed meanwhile: nothing is left to run
            self.channel(obj).put_seen = puts[token]   # the front end takes this doorbell's GP_PUT up now
            try: self.run_all(obj, alone=alone, late=True)
            except GPUError: pass   # kept on the channel (its notifier is written); its next doorbell raises it
          # the grids that were due: their CTAs run now (a fault is kept on its channel, as above)
          if grids: self.finish_grids(before=before)
        finally:
          self.busy_ns += time.perf_counter_ns() - t0
          with self._cv: self._taking -= 1

  def run_all(self, rung: Any = None, alone: bool = False, late: bool = False) -> None:
    """Run channels until none progresses; an errored channel raises only when its own doorbell rang. `alone`: only
    `rung` (latency mode, an order other than "latest"). `late`: a doorbell the front end takes up late."""
    with self.lock:
      live = {id(o): o for o in self.rm.channels(self.gpu)}
      # latency mode: the channel whose doorbell is acted on runs first, ahead of channels created (or rung) before it
      if late and rung is not None and id(rung) in live: live = {id(rung): rung, **live}
      for k in [k for k in self.channels if k not in live]: del self.channels[k]
      if alone and rung is not None and id(rung) in live: live = {id(rung): rung}
      progressed = True
      while progressed:
        progressed = False
        for obj in live.values():
          c = self.channel(obj)
          if c.error is None or obj is rung: progressed |= c.run()
        # nothing can advance: the grids still queued finish (concurrently) before the next look at the rings, or later
        if not progressed: progressed = self.settle_grids(rung)
      if self.blocked() and (self._poller is None or not self._poller.is_alive()):
        self._poller = threading.Thread(target=self._poll, daemon=True, name="nvmock-gpfifo")
        self._poller.start()

  def finish_grids(self, rung: Any = None, before: float = math.inf) -> bool:
    """Drain every channel's queued grids (launched before release `before`); True if any ran. A fault raises only on
    the channel whose doorbell rang."""
    ran = False
    for c in list(self.channels.values()):
      if not any(g.epoch < before for g in c.queued) or c.error is not None: continue
      ran = True
      try: c.drain(before)
      except GPUError:
        if c.obj is rung: raise
    return ran

  def blocked(self) -> bool:
    return any(c.segment is not None and c.error is None for c in self.channels.values())

  def _poll(self) -> None:
    # a parked acquire may be satisfied by a CPU write the mock cannot see: retry while anything is parked
    while True:
      time.sleep(0.0005)
      with self.lock:
        if not self.blocked(): return
        t0 = time.perf_counter_ns()
        try:
          for c in list(self.channels.values()):
            if c.segment is not None and c.error is None: c.run()
          self.settle_grids()
        except GPUError: pass   # kept on the channel; the next doorbell raises it
        finally: self.busy_ns += time.perf_counter_ns() - t0
