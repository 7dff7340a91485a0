"""The CPU backend behind the HCQ interfaces: an in-process queue (exec runs the kernel, signal stores the
value, copy is a memmove), so code written against HWQueue/Signal/GraphReplay also runs on the host.

The CPUDevice/CPUProgram call API the engine uses is unchanged; this wraps them.

  >>> import numpy as np
  >>> dev = CPUHCQDevice(); a, b = dev.allocator.alloc(8), dev.allocator.alloc(8)
  >>> dev.allocator.copyin(a, memoryview(b"abcdefgh")); s = dev.new_signal()
  >>> _ = dev.hw_copy_queue().copy(b.address, a.address, 8).signal(s, 1).submit(dev); s.wait(1)
  >>> bytes(b.view())
  b'abcdefgh'
"""
from __future__ import annotations
import ctypes, time
from typing import Any
from collections.abc import Sequence
import numpy as np
from hcqrt.cpu.device import CPUDevice, CPUProgram
from hcqrt.hcq import HWQueue, HCQDevice, HCQProgram, KernArgs, Signal, SignalPool, buf_addr

class _Ptr:
  """What CPUProgram reads from a buffer argument: its address."""
  __slots__ = ("address",)
  def __init__(self, address: int): self.address = address

class CPUQueue(HWQueue):
  """Commands are Python records run in order at submit; records are dicts, so patching edits them."""
  def _wait(self, signal, value): return {"signal": signal, "value": value}
  def _signal(self, signal, value): return {"signal": signal, "value": value}
  def _timestamp(self, signal): return {"signal": signal}
  def _exec(self, prog, args, g, l): return {"prog": prog, "args": args, "g": g, "l": l}
  def _copy(self, dst, src, nbytes): return {"dst": dst, "src": src, "n": nbytes}
  def _update_sem(self, rec, signal, value):
    if signal is not None: rec["signal"] = signal
    if value is not None: rec["value"] = value
  def _update_exec(self, rec, g, l):
    if g is not None: rec["g"] = g
    if l is not None: rec["l"] = l
  def _update_copy(self, rec, dst, src):
    if dst is not None: rec["dst"] = dst
    if src is not None: rec["src"] = src
  def _submit(self, device: CPUHCQDevice) -> None:
    for kind, r in self.cmds:
      if kind == "wait": r["signal"].wait(r["value"], device.wait_timeout_s)
      elif kind == "signal": r["signal"]._words[1] = time.perf_counter_ns(); r["signal"].value = r["value"]
      elif kind == "timestamp": r["signal"]._words[3] = time.perf_counter_ns()
      elif kind == "copy": ctypes.memmove(r["dst"], r["src"], r["n"])
      elif kind == "exec": r["prog"].run(r["args"], r["g"], r["l"])

class CPUHCQProgram(HCQProgram):
  """A CPU kernel with HCQ argument blocks: every argument is an 8-byte slot (pointers, then ints).
  The kernel runs on global_size[0] cores (its `core` argument); local_size is ignored."""
  def __init__(self, device: CPUHCQDevice, name: str, obj: bytes):
    super().__init__(device, name)
    self.prog = CPUProgram(name, obj)
  def fill_kernargs(self, bufs: Sequence[Any], vals: Sequence[int] = (), persistent: bool = False) -> KernArgs:
    mem = bytearray(8 * (len(bufs) + len(vals)))
    a = KernArgs(memoryview(mem), [(8 * i, 8) for i in range(len(bufs) + len(vals))], len(bufs))
    for i, b in enumerate(bufs): a.set_buffer(i, buf_addr(b))
    for j, v in enumerate(vals): a.set_int(j, v)
    return a
  def run(self, args: KernArgs, g, l) -> None:
    n = len(args.params)
    words = [args.get(i) for i in range(n)]
    vals = tuple(ctypes.c_int32(w & 0xFFFFFFFF).value for w in words[args.nbufs:])
    self.prog(*[_Ptr(w) for w in words[:args.nbufs]], vals=vals, threads=g[0], wait=False)

class CPUHCQDevice(HCQDevice, CPUDevice):
  """CPUDevice plus HCQDevice's timeline, signals and graphs (GraphReplay over in-process compute/copy queues)."""
  wait_timeout_s = 10.0
  submit_runs_inline = True   # CPUQueue._submit runs the commands in the caller: a wait on a later submission never ends
  def __init__(self, name: str = "CPU"):
    CPUDevice.__init__(self, name)
    self._sigmem = np.zeros(Signal.SIZE * 1024, np.uint8)
    base = self._sigmem.ctypes.data
    self._init_signals(SignalPool(self, base, base, self._sigmem.nbytes))
  def hw_compute_queue(self) -> CPUQueue: return CPUQueue()
  def hw_copy_queue(self) -> CPUQueue: return CPUQueue()
  def hcq_program(self, name: str, obj: bytes) -> CPUHCQProgram: return CPUHCQProgram(self, name, obj)
  def synchronize(self, timeout_s: float | None = None) -> None:
    self.timeline_signal.wait(self.timeline_value - 1, self.wait_timeout_s if timeout_s is None else timeout_s)
  # peers: every CPUHCQDevice lives in this process's memory, so another one's buffers and signals are at their own
  # addresses already (the reference for the peer seam; the GPU backends map them through their drivers)
  peer_copies = True
  def query_peer(self, other: HCQDevice) -> str: return "ok: shared host memory"
  def enable_peer(self, other: HCQDevice) -> None: pass
  def map_peer(self, other: HCQDevice, buf: Any) -> int: return buf_addr(buf)
  def map_peer_signals(self, other: HCQDevice) -> None: pass
  def bounce_buffers(self) -> list[Any]:
    if not hasattr(self, "_bounce"): self._bounce = [self.allocator.alloc(self.BOUNCE_CHUNK) for _ in range(2)]
    return self._bounce
  def __repr__(self) -> str: return f"<CPUHCQDevice {self.ncores} cores>"
