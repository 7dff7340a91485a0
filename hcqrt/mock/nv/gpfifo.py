"""The mock GPU's front end: GPFIFO channels run on a doorbell, pushbuffers decoded into methods.

Doorbell: the client writes a channel's work-submit token to the usermode page (offset 0x90) through
hcqrt.syscalls.mmio_write32, the one register write the backend makes; MockNV.mmio_write32 calls
`ring(token)`. The engine then runs every channel with work (GPGet != GPPut in its USERD) until none can
progress: a semaphore acquire that is not yet satisfied parks its channel at that method, and parked
channels are retried on every later doorbell and by a poller thread (so a value the CPU writes later
also releases them, as on hardware).

Methods: host methods (SET_OBJECT, SEM_* with 32/64-bit payloads and timestamps, NOP, WFI, MEM_OP_*,
NON_STALL_INTERRUPT); copy engine (OFFSET_*, LINE_LENGTH_IN, LINE_COUNT, PITCH_*, SET_SEMAPHORE_*,
LAUNCH_DMA); compute engine (SEND_PCAS_A + SEND_SIGNALING_PCAS(2)_B launch the QMD at that address,
INVALIDATE_*, SET_SHADER_*, report semaphores). A launch decodes the QMD (version of the chip's compute
class), finds the kernel by its code bytes (kernels.py), reads its parameters from constant bank 0 at the
cubin's offset and runs the PTX interpreter over the channel's GPU address space. Anything unknown or
malformed raises GPUError naming the channel, the pushbuffer address and the method, and the channel is
left in an error state (later doorbells on it raise the same error).
"""
from __future__ import annotations
import ctypes, struct, threading, time
from typing import Any
import numpy as np
from ioctl_defs.nv.methods import methods_for, decode_method_header, decode_gpfifo_entry, USERD_GP_GET, USERD_GP_PUT, \
  SEC_OP_INC_METHOD, SEC_OP_NON_INC_METHOD, SEC_OP_IMMD_DATA_METHOD, SEC_OP_ONE_INC, SEC_OP_END_PB_SEGMENT, GP_ENTRY_SIZE
from ioctl_defs.nv.qmd import QMD, QMD_SIZE, QMD_MAJOR_MINOR
from ioctl_defs.nv.classes import class_name
from hcqrt.mock.ptx import AddressSpace
from hcqrt.mock.nv.kernels import INDEX

class GPUError(RuntimeError):
  """The mock GPU refused a command (the real one would raise an RC error / Xid on the channel)."""

# what the mock reads from each QMD version (its own reading of the layouts, independent of the backend's)
_QMD_READ = {
  "V03_00": dict(grid=("CTA_RASTER_WIDTH", "CTA_RASTER_HEIGHT", "CTA_RASTER_DEPTH"), prog=("PROGRAM_ADDRESS_LOWER", "PROGRAM_ADDRESS_UPPER", 0),
                 smem=("SHARED_MEMORY_SIZE", 0), cb=("CONSTANT_BUFFER_ADDR_LOWER", "CONSTANT_BUFFER_ADDR_UPPER", 0)),
  "V04_00": dict(grid=("GRID_WIDTH", "GRID_HEIGHT", "GRID_DEPTH"), prog=("PROGRAM_ADDRESS_LOWER", "PROGRAM_ADDRESS_UPPER", 0),
                 smem=("SHARED_MEMORY_SIZE", 0), cb=("CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6", "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6", 6)),
  "V05_00": dict(grid=("GRID_WIDTH", "GRID_HEIGHT", "GRID_DEPTH"), prog=("PROGRAM_ADDRESS_LOWER_SHIFTED4", "PROGRAM_ADDRESS_UPPER_SHIFTED4", 4),
                 smem=("SHARED_MEMORY_SIZE_SHIFTED7", 7), cb=("CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6", "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6", 6)),
}

def _names(cls: int) -> dict[int, str]:
  out = {m.offset: n for n, m in methods_for(cls).items()}
  if "LOAD_INLINE_QMD_DATA" in methods_for(cls):
    base = methods_for(cls)["LOAD_INLINE_QMD_DATA"].offset
    for i in range(1, 96): out[base + 4 * i] = "LOAD_INLINE_QMD_DATA"
  return out

class Blocked(Exception):
  """A semaphore acquire is not satisfied yet."""

class Channel:
  """Execution state of one GPFIFO channel (the RM object holds the ring/USERD facts)."""
  def __init__(self, engine: "GPFIFOEngine", obj: Any):
    self.engine, self.obj, self.d = engine, obj, obj.data
    self.host_names = {m.offset: n for n, m in methods_for(obj.cls).items()}
    self.sem_execute = methods_for(obj.cls)["SEM_EXECUTE"]
    self.subc: dict[int, int] = {}                 # subchannel -> engine class bound by SET_OBJECT
    self.regs: dict[str, int] = {}                 # last value written per method name
    self.segment: list[tuple[int, int, int, int]] | None = None   # decoded (subc, offset, data, pb va) of the current entry
    self.pos = 0
    self.error: GPUError | None = None
    self.name = f"channel {obj.data['chid']} ({class_name(obj.cls)})"

  @property
  def vs(self): return self.d["vaspace"].data["va"]
  def u32(self, off: int) -> ctypes.c_uint32: return ctypes.c_uint32.from_address(self.d["userd"] + off)

  def fail(self, msg: str, va: int | None = None) -> GPUError:
    self.error = GPUError(f"mock GPU: {self.name}{f' pushbuffer {va:#x}' if va is not None else ''}: {msg}")
    self.engine.rm.channel_error(self.obj, msg)   # RC recovery fills the channel's error notifier
    return self.error

  # ---- front end ----
  def run(self) -> bool:
    """Process entries until the ring is empty or an acquire blocks. Returns True if anything advanced."""
    if self.error is not None: raise self.error
    if not (self.d.get("enabled") or self.d.get("scheduled")): return False
    progressed, n = False, self.d["entries"]
    while True:
      get, put = self.u32(USERD_GP_GET).value, self.u32(USERD_GP_PUT).value
      if put >= n: raise self.fail(f"GPPut {put} is outside the {n}-entry ring")
      if get == put and self.segment is None: return progressed
      if self.segment is None:
        entry = struct.unpack("<Q", self.read(self.d["ring_va"] + get * GP_ENTRY_SIZE, 8))[0]
        va, ndw, _ = decode_gpfifo_entry(entry)
        self.segment, self.pos = self.decode(va, ndw), 0
      try:
        while self.pos < len(self.segment):
          self.execute(*self.segment[self.pos]); self.pos += 1; progressed = True
      except Blocked: return progressed
      except GPUError: self.u32(USERD_GP_GET).value = put; self.segment = None; raise
      self.segment = None
      self.u32(USERD_GP_GET).value = (get + 1) % n
      progressed = True

  def read(self, va: int, n: int) -> bytes:
    try: return self.vs.read(va, n)
    except MemoryError as e: raise self.fail(str(e)) from None

  def decode(self, va: int, ndw: int) -> list[tuple[int, int, int, int]]:
    words = np.frombuffer(self.read(va, ndw * 4), np.uint32).tolist()
    out, i = [], 0
    while i < len(words):
      op, subc, off, count = decode_method_header(words[i])
      at = va + 4 * i
      if op == SEC_OP_IMMD_DATA_METHOD: out.append((subc, off, count, at)); i += 1; continue
      if op == SEC_OP_END_PB_SEGMENT: break
      if op not in (SEC_OP_INC_METHOD, SEC_OP_NON_INC_METHOD, SEC_OP_ONE_INC):
        raise self.fail(f"method header {words[i]:#010x} has unsupported SEC_OP {op}", at)
      if i + 1 + count > len(words): raise self.fail(f"method {off:#x} wants {count} data words, the segment has {len(words) - i - 1}", at)
      for j in range(count):
        step = j if op == SEC_OP_INC_METHOD else (0 if op == SEC_OP_NON_INC_METHOD else min(j, 1))
        out.append((subc, off + 4 * step, words[i + 1 + j], at))
      i += 1 + count
    return out

  # ---- methods ----
  def execute(self, subc: int, off: int, data: int, at: int) -> None:
    if off == 0:   # SET_OBJECT: bind an engine class to the subchannel
      cls = data & 0xFFFF
      engines = {c.cls for c in self.obj.children if c.kind in ("compute", "copy")}
      if cls not in engines: raise self.fail(f"SET_OBJECT {class_name(cls)} on subchannel {subc}: the channel's engine objects are {[class_name(c) for c in engines]}", at)
      self.subc[subc] = cls; return
    if off < 0x100:
      name = self.host_names.get(off)
      if name is None: raise self.fail(f"unknown host method {off:#x}", at)
      self.regs[name] = data
      if name == "SEM_EXECUTE": self.semaphore(data, at)
      elif name == "MEM_OP_D": self.vs.mem_op(data)   # L2 flush/invalidate of GPU-cached sysmem (vmem.py)
      return
    cls = self.subc.get(subc)
    if cls is None: raise self.fail(f"method {off:#x} on subchannel {subc}, which has no object (SET_OBJECT first)", at)
    name = self.engine.names(cls).get(off)
    if name is None: raise self.fail(f"method {off:#x} is not a {class_name(cls)} method", at)
    self.regs[name] = data
    if (cls & 0xFF) == 0xB5 and name == "LAUNCH_DMA": self.launch_dma(cls, data, at)
    elif (cls & 0xFF) == 0xC0:
      if name in ("SEND_SIGNALING_PCAS_B", "SEND_SIGNALING_PCAS2_B"): self.launch_qmd(cls, name, data, at)
      elif name == "REPORT_SEMAPHORE_EXECUTE": self.report_semaphore(cls, data, at)

  def semaphore(self, data: int, at: int) -> None:
    m = self.sem_execute
    addr = (self.regs.get("SEM_ADDR_HI", 0) << 32) | (self.regs.get("SEM_ADDR_LO", 0) & 0xFFFFFFFC)
    payload = (self.regs.get("SEM_PAYLOAD_HI", 0) << 32) | self.regs.get("SEM_PAYLOAD_LO", 0)
    wide = m.get("PAYLOAD_SIZE", data) == 1
    op = m.get("OPERATION", data)
    if op == 1:   # RELEASE
      if addr % (8 if wide else 4): raise self.fail(f"semaphore release address {addr:#x} is misaligned", at)
      self.write(addr, struct.pack("<Q", payload) if wide else struct.pack("<I", payload & 0xFFFFFFFF), at)
      if m.get("RELEASE_TIMESTAMP", data): self.write(addr + 8, struct.pack("<Q", time.perf_counter_ns()), at)
      return
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

  def launch_dma(self, cls: int, data: int, at: int) -> None:
    m = methods_for(cls)["LAUNCH_DMA"]
    r = self.regs
    if m.get("DATA_TRANSFER_TYPE", data) != 0:
      if m.get("SRC_MEMORY_LAYOUT", data) != 1 or m.get("DST_MEMORY_LAYOUT", data) != 1: raise self.fail("LAUNCH_DMA: only PITCH layouts are supported", at)
      if m.get("SRC_TYPE", data) or m.get("DST_TYPE", data): raise self.fail("LAUNCH_DMA: physical addresses are not supported", at)
      src = (r.get("OFFSET_IN_UPPER", 0) << 32) | r.get("OFFSET_IN_LOWER", 0)
      dst = (r.get("OFFSET_OUT_UPPER", 0) << 32) | r.get("OFFSET_OUT_LOWER", 0)
      n = r.get("LINE_LENGTH_IN", 0)
      lines = r.get("LINE_COUNT", 1) if m.get("MULTI_LINE_ENABLE", data) else 1
      for ln in range(lines):
        s, d = src + ln * r.get("PITCH_IN", 0), dst + ln * r.get("PITCH_OUT", 0)
        if n: self.write(d, self.read(s, n), at)
    sem = m.get("SEMAPHORE_TYPE", data)
    if sem:
      addr = (r.get("SET_SEMAPHORE_A", 0) << 32) | r.get("SET_SEMAPHORE_B", 0)
      payload = r.get("SET_SEMAPHORE_PAYLOAD", 0)
      self.write(addr, struct.pack("<I", payload), at)
      if sem == 2: self.write(addr + 8, struct.pack("<Q", time.perf_counter_ns()), at)

  def report_semaphore(self, cls: int, data: int, at: int) -> None:
    m = methods_for(cls)["REPORT_SEMAPHORE_EXECUTE"]
    if m.get("OPERATION", data) != 0: raise self.fail("REPORT_SEMAPHORE_EXECUTE: only RELEASE is supported by the mock", at)
    r = self.regs
    addr = (r.get("SET_REPORT_SEMAPHORE_ADDRESS_UPPER", 0) << 32) | r.get("SET_REPORT_SEMAPHORE_ADDRESS_LOWER", 0)
    payload = (r.get("SET_REPORT_SEMAPHORE_PAYLOAD_UPPER", 0) << 32) | r.get("SET_REPORT_SEMAPHORE_PAYLOAD_LOWER", 0)
    self.write(addr, struct.pack("<Q", payload) if m.get("PAYLOAD_SIZE64", data) else struct.pack("<I", payload & 0xFFFFFFFF), at)

  def launch_qmd(self, cls: int, name: str, data: int, at: int) -> None:
    if name == "SEND_SIGNALING_PCAS2_B":
      action = methods_for(cls)[name].get("PCAS_ACTION", data)
      if action not in (2, 3, 9): return   # only the scheduling actions launch
    elif not methods_for(cls)[name].get("SCHEDULE", data): return
    qva = self.regs.get("SEND_PCAS_A", 0) << 8
    version = self.engine.rm.chip.arch.qmd
    q = QMD(version, self.read(qva, QMD_SIZE[version]))
    major = QMD_MAJOR_MINOR[version][0]
    if q.get("QMD_MAJOR_VERSION") != major: raise self.fail(f"QMD at {qva:#x}: major version {q.get('QMD_MAJOR_VERSION')}, {class_name(cls)} reads {version}", at)
    spec = _QMD_READ[version]
    grid = tuple(q.get(f) for f in spec["grid"])
    block = tuple(q.get(f"CTA_THREAD_DIMENSION{i}") for i in range(3))
    if min(grid) < 1 or min(block) < 1 or block[0] * block[1] * block[2] > 1024:
      raise self.fail(f"QMD at {qva:#x}: bad launch shape grid {grid} block {block}", at)
    lo, hi, sh = spec["prog"]
    prog = (q.get(lo) | (q.get(hi) << 32)) << sh
    if not q.get("CONSTANT_BUFFER_VALID", i=0): raise self.fail(f"QMD at {qva:#x}: constant buffer 0 (kernel parameters) is not valid", at)
    lo, hi, sh = spec["cb"]
    cb0 = (q.get(lo, i=0) | (q.get(hi, i=0) << 32)) << sh
    cb0_size = q.get("CONSTANT_BUFFER_SIZE_SHIFTED4", i=0) << 4
    def code(n: int) -> bytes:
      try: return self.vs.read(prog, n)
      except MemoryError: return b""
    kk = INDEX.find(code)
    if kk is None: raise self.fail(f"QMD at {qva:#x}: no known kernel at program address {prog:#x} (code not from a cubin assembled in this process)", at)
    k = kk.facts
    if k.param_cbank_offset + k.param_size > cb0_size:
      raise self.fail(f"kernel {kk.name}: constant buffer 0 is {cb0_size} bytes, parameters need {k.param_cbank_offset + k.param_size}", at)
    params = self.read(cb0 + k.param_cbank_offset, k.param_size) if k.param_size else b""
    f, sh = spec["smem"]
    # what the QMD gives beyond the static shared memory (and sm_90's reserved 1 KiB) is dynamic shared memory
    static = k.shared_static or (0x400 if self.engine.rm.chip.arch.sm >= 90 else 0)
    dyn = max(0, (q.get(f) << sh) - static)
    mem = self.engine.address_space(self.vs)
    try:
      with self.vs.kernel_access(): INDEX.module(kk).launch(kk.name, mem, grid, block, params, dyn)
    except Exception as e: raise self.fail(f"kernel {kk.name} grid {grid} block {block} faulted: {e}", at) from None
    self.engine.launches += 1

class GPFIFOEngine:
  """All channels of one MockNV; `ring(token)` is the doorbell."""
  def __init__(self, rm: Any):
    self.rm = rm
    self.channels: dict[int, Channel] = {}
    self._names: dict[int, dict[int, str]] = {}
    self._spaces: dict[int, tuple[list, AddressSpace]] = {}
    self.lock = threading.RLock()
    self._poller: threading.Thread | None = None
    self.launches = 0
    self.busy_ns = 0        # time spent "on the GPU" (inside doorbells), so hosts can measure their own cost apart

  def names(self, cls: int) -> dict[int, str]:
    if cls not in self._names: self._names[cls] = _names(cls)
    return self._names[cls]

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

  def ring(self, token: int) -> None:
    with self.lock:
      t0 = time.perf_counter_ns()
      try:
        try: obj = self.rm.channel_by_token(token)
        except KeyError: raise GPUError(f"mock GPU: doorbell with unknown work-submit token {token}") from None
        self.channel(obj)
        self.run_all(obj)
      finally: self.busy_ns += time.perf_counter_ns() - t0

  def run_all(self, rung: Any = None) -> None:
    """Run channels until none progresses; an errored channel raises only when its own doorbell rang."""
    with self.lock:
      live = {id(o): o for o in self.rm.channels()}
      for k in [k for k in self.channels if k not in live]: del self.channels[k]
      progressed = True
      while progressed:
        progressed = False
        for obj in live.values():
          c = self.channel(obj)
          if c.error is None or obj is rung: progressed |= c.run()
      if self.blocked() and (self._poller is None or not self._poller.is_alive()):
        self._poller = threading.Thread(target=self._poll, daemon=True, name="nvmock-gpfifo")
        self._poller.start()

  def blocked(self) -> bool:
    return any(c.segment is not None and c.error is None for c in self.channels.values())

  def _poll(self) -> None:
    # a parked acquire may be satisfied by a CPU write the mock cannot see: retry while anything is parked
    while True:
      time.sleep(0.0005)
      with self.lock:
        if not self.blocked(): return
        try:
          for c in list(self.channels.values()):
            if c.segment is not None and c.error is None: c.run()
        except GPUError: pass   # kept on the channel; the next doorbell raises it
