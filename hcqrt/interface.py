"""The device contract: what the frontend (engine, JIT, BEAM) may ask of any device hcqrt opens, written down once.

Every backend (CPU, NV, AMD, the PTXEMU/AMDEMU emulators) implements `Device`; the frontend reaches devices only through
these members, so a new backend is this file's list, not a search through the engine for what it happens to call.
The protocols are structural (typing.Protocol, as hcqrt/syscalls.py FakeDriver): a backend does not inherit from
them. Graph items are dataclasses: a launch (`GraphExec`), a device-to-device copy (`GraphCopy`) or a GPU timestamp
(`GraphTimestamp`), the same for every device that replays graphs.

Copies between two devices go through `copy_between`: the source's own `transfer_to` (PeerDevice: a peer push, or a
bounce through system memory, ordered on both devices' queues) where it has one for that destination, else the host
(copyout, then copyin). `peer_status` names what a pair can do ("ok: ..." = a direct peer copy).

  >>> from hcqrt.device import Device as Devices
  >>> dev: Device = Devices["CPU"]
  >>> isinstance(dev, Device), isinstance(dev.allocator, Allocator)
  (True, True)
  >>> GraphExec(prog=None, bufs=[], threads=4)
  GraphExec(prog=None, bufs=[], vals=(), global_size=(1, 1, 1), local_size=(1, 1, 1), threads=4)
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable
from collections.abc import Sequence

@runtime_checkable
class Allocator(Protocol):
  """Device memory. Buffers are the backend's own objects (`raw`): the frontend only passes them back."""
  def alloc(self, nbytes: int) -> Any: ...
  def free(self, buf: Any) -> None: ...
  def copyin(self, dst: Any, src: memoryview) -> None:
    """Host -> device; complete (src reusable) when it returns."""
  def copyout(self, dst: memoryview, src: Any) -> None:
    """Device -> host, after every launch submitted before it (the data is there when it returns)."""
  def share_with_forks(self, buf: Any, share: bool) -> None:
    """BEAM forks compile workers while its timing buffers are live: host memory a fork would copy is excluded from it
    (device memory has nothing to exclude)."""

@runtime_checkable
class Program(Protocol):
  """A loaded kernel. One signature for every device, so a compiled kernel's launch dims pass unchanged: GPUs read
  `global_size`/`local_size` (blocks, threads per block), the CPU reads `threads` (cores); each ignores the others.
  `vals` are the kernel's integer arguments (symbolic sizes). Returns the kernel's seconds when `wait`, else None."""
  def __call__(self, *bufs: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] = (1, 1, 1), threads: int = 1,
               vals: Sequence[int] = (), wait: bool = False) -> float | None: ...

@dataclass
class GraphExec:
  """A launch in a graph: program, buffers (backend objects or addresses), integer arguments and launch dims."""
  prog: Any
  bufs: Sequence[Any]
  vals: Sequence[int] = ()
  global_size: Sequence[int] = (1, 1, 1)
  local_size: Sequence[int] = (1, 1, 1)
  threads: int = 1

@dataclass
class GraphCopy:
  """A device-to-device copy of `nbytes` in a graph (dst, src: buffers or device addresses)."""
  dst: Any
  src: Any
  nbytes: int

@dataclass
class GraphTimestamp:
  """The device's clock into `signal` once everything before it on the compute queue is done (HCQ graphs only)."""
  signal: Any

GraphItem = GraphExec | GraphCopy | GraphTimestamp

class Graph(Protocol):
  """Launches (and copies) bound once and replayed with one submission; a replay patches buffer pointers
  `{(item, arg): buf}` and ints `{(item, j): v}` in place."""
  completes_on_return: bool   # the launches have run when replay returns (CPU): timing them is free, DEBUG=2 may run them singly
  timestamps: bool            # kernel_times() gives each launch's start and end (profiling)
  clock: str                  # "gpu": kernel_times are GPU timestamps (placed from the replay's host start); "host": perf_counter ns
  def replay(self, bufs: dict[tuple[int, int], Any] | None = None, vals: dict[tuple[int, int], int] | None = None,
             wait: bool = False) -> float | None: ...
  def kernel_times(self) -> list[tuple[int, int, int]]:
    """(item, start ns, end ns) of each launch of the last replay (after it completed)."""
    ...

@runtime_checkable
class PeerDevice(Protocol):
  """A device that copies into another device without the host (hcqrt/hcq.py HCQDevice). Optional: a device without
  these members, or with `peer_copies` False, gets copies through the host (`copy_between`)."""
  peer_copies: bool   # this backend implements the copies below (HCQDevice's backends opt in one by one)
  def peer_status(self, other: Any) -> str:
    """What a copy from this device into `other` can use: "ok: <link>" (a direct peer push), else "no-p2p: <why>"
    (the driver's status name, e.g. "no-p2p: IOH_TOPOLOGY_NOT_SUPPORTED"; copies then bounce through system memory).
    Asks the driver once per pair."""
    ...
  def transfer_to(self, dst_dev: Any, dst: Any, src: Any, nbytes: int) -> None:
    """Copy `nbytes` from this device's buffer `src` into `dst` on `dst_dev`, with no host wait: the copy runs after the
    work already submitted on both devices (the destination's included: it may still read `dst`), and the destination's
    later work runs after the copy (a semaphore wait on its own queue). Raises TypeError where `dst_dev` is of another
    driver (`copy_between` then goes through the host)."""
    ...

def peer_ok(status: str) -> bool:
  """Whether a `peer_status` allows a direct peer copy.

  >>> peer_ok("ok: pcie"), peer_ok("no-p2p: IOH_TOPOLOGY_NOT_SUPPORTED")
  (True, False)
  """
  return status.startswith("ok")

def can_transfer(src_dev: Any, dst_dev: Any) -> bool:
  """Whether `src_dev.transfer_to(dst_dev, ...)` exists for this pair: both devices of one driver that has it."""
  return isinstance(src_dev, PeerDevice) and getattr(src_dev, "peer_copies", False) and type(src_dev) is type(dst_dev)

def copy_between(dst_dev: Device, dst: Any, src_dev: Device, src: Any, nbytes: int) -> str:
  """Copy `nbytes` from `src` on `src_dev` into `dst` on `dst_dev`; returns the path taken: "device" (the source's
  transfer_to: a peer push or a bounce it orders on the devices' queues) or "host" (copyout, then copyin: complete on
  return).

  >>> from hcqrt.device import Device as Devices
  >>> a, b = Devices["CPU"], Devices["CPU:1"]
  >>> x, y = a.allocator.alloc(4), b.allocator.alloc(4); a.allocator.copyin(x, memoryview(b"abcd"))
  >>> copy_between(b, y, a, x, 4); out = bytearray(4); b.allocator.copyout(memoryview(out), y); bytes(out)
  'host'
  b'abcd'
  """
  if nbytes <= 0: return "host"
  if can_transfer(src_dev, dst_dev):
    src_dev.transfer_to(dst_dev, dst, src, nbytes)   # type: ignore[attr-defined]
    return "device"
  data = bytearray(nbytes)
  src_dev.allocator.copyout(memoryview(data), src)
  dst_dev.allocator.copyin(dst, memoryview(data))
  return "host"

@runtime_checkable
class Device(Protocol):
  """An opened device: what the frontend uses of it."""
  name: str
  allocator: Allocator
  @property
  def target(self) -> dict:
    """The compiler's view of the device (the fields of compiler/target.py Target): data, so the compiler never asks
    the device object anything."""
    ...
  def program(self, name: str, binary: bytes) -> Program:
    """Load kernel `name` from what the device's assembler produced (ELF object, cubin, code object)."""
    ...
  def synchronize(self, timeout_s: float | None = None) -> None:
    """Wait for all submitted work (raises on a device fault or after `timeout_s`; nothing to wait for on the CPU)."""
  def graph(self, items: Sequence[GraphItem], timestamps: bool = False) -> Graph | None:
    """The items as one replayable graph, or None where this device cannot replay them so (the JIT then runs them
    one at a time). `timestamps`: record each launch's times (profiling), where the device can."""
    ...
