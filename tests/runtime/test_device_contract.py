"""The declared device contract (hcqrt/interface.py): every backend implements it, NV and AMD share one HCQDevice base
for the HCQ half, and the JIT replays through the one `Device.graph` path."""
import inspect
from math import prod
import numpy as np
import pytest
from hcqrt import interface
from hcqrt.interface import GraphCopy
from hcqrt.hcq import HCQDevice, GraphReplay
from compiler.pipeline import Launch

_installed: list = []   # the mock drivers a test put in (removed again by that test only: the registry keeps its own)

def _devices():
  """Each backend class opened without hardware: the CPU, the emulators, NV and AMD on their mock drivers."""
  from hcqrt.cpu.device import CPUDevice
  from hcqrt.mock.ptxemu import PTXEmuDevice
  yield "CPU", lambda: CPUDevice()
  yield "PTXEMU", lambda: PTXEmuDevice()
  def nv():
    from hcqrt.mock.nv import install_mock_nv
    from hcqrt.nv.device import NVDevice
    _installed.append(install_mock_nv())
    return NVDevice("NV")
  yield "NV", nv
  def amd():
    pytest.importorskip("llvmlite")
    from hcqrt.mock.amd import install_mock_amd
    from hcqrt.amd.device import AMDDevice
    _installed.append(install_mock_amd())
    return AMDDevice("AMD")
  yield "AMD", amd

@pytest.mark.parametrize("name,make", list(_devices()), ids=[n for n, _ in _devices()])
def test_every_backend_implements_the_declared_device(name, make):
  from hcqrt import syscalls
  try:
    dev = make()
    assert isinstance(dev, interface.Device) and isinstance(dev.allocator, interface.Allocator), name
    assert {"device", "renderer", "arch"} <= set(dev.target)
    # one synchronize and one graph signature for every device
    assert "timeout_s" in inspect.signature(dev.synchronize).parameters
    assert "timestamps" in inspect.signature(dev.graph).parameters
    dev.synchronize(timeout_s=5.0)
  finally:
    while _installed: syscalls.uninstall(_installed.pop())   # (never uninstall() with no argument: that removes every mock)

def test_nv_and_amd_share_the_hcq_half():
  """The timeline, signals, graphs and the persistent scope live in HCQDevice only: NV and AMD keep their drivers."""
  from hcqrt.nv.device import NVDevice
  from hcqrt.amd.device import AMDDevice
  from hcqrt.cpu.hcq import CPUHCQDevice
  shared = ("after_timeline", "submit_timeline", "new_signal", "timing_signals", "graph", "persistent_scope", "_init_signals")
  for cls in (NVDevice, AMDDevice, CPUHCQDevice):
    assert issubclass(cls, HCQDevice)
    assert not [m for m in shared if m in vars(cls)], f"{cls.__name__} redefines {[m for m in shared if m in vars(cls)]}"
  # the hand-written "wait(tl, v - 1) ... signal(tl, v); v += 1" sequences are gone from the backends
  for mod in ("hcqrt/nv/device.py", "hcqrt/amd/device.py"):
    src = open(mod).read()
    assert "timeline_value += 1" not in src.replace("self.timeline_value += 1\n    self.synchronize()", ""), mod

def test_timeline_helpers_order_submissions():
  from hcqrt.cpu.hcq import CPUHCQDevice
  dev = CPUHCQDevice()
  s = dev.new_signal()
  v = dev.timeline_value
  q = dev.after_timeline(dev.hw_compute_queue()).signal(s, 7)
  assert q.cmds[0][0] == "wait" and q.cmds[0][1]["value"] == v - 1   # waits for everything submitted before it
  dev.submit_timeline(q)
  assert dev.timeline_value == v + 1 and q.cmds[-1][1]["value"] == v and dev.timeline_signal.value == v and s.value == 7
  assert isinstance(dev.graph([]), GraphReplay)

def test_graph_items_are_typed():
  """A graph item that is not GraphExec/GraphCopy/GraphTimestamp is refused by name (no positional tuples)."""
  from hcqrt.cpu.hcq import CPUHCQDevice
  from hcqrt.cpu.device import CPUDevice
  with pytest.raises(TypeError, match="graph item 0: .* is not a GraphExec"): GraphReplay(CPUHCQDevice(), [("exec", None, [], (), 1)])
  cpu = CPUDevice()
  a = cpu.allocator.alloc(4)
  assert cpu.graph([GraphCopy(a, a, 4)]) is None   # the CPU lists launches only: the JIT runs these one at a time
  with pytest.raises(ValueError, match="only kernel launches"):
    from hcqrt.cpu.device import CPULaunchList
    CPULaunchList([GraphCopy(a, a, 4)])

def test_launch_is_one_type_for_every_renderer():
  """Each backend's renderer (C, portable C, PTX, LLVM for the CPU and for an AMD GPU) reports a Launch: threads on the
  CPU, the grid and block of the launch plan on a GPU."""
  from compiler import pipeline
  from compiler.dtypes import dtypes
  from compiler.gpudims import plan_launch
  from compiler.lazy import LazyBuffer
  from compiler.linearize import linearize
  from compiler.lower import lower
  from compiler.schedule import create_schedule
  from compiler.target import AMD_TARGETS, PORTABLE_C, Target
  from compiler.uop import Ops
  x = LazyBuffer.empty((4096,), dtypes.float32, "CPU"); x.buffer = object()
  ast = create_schedule([x.alu(Ops.ADD, x)])[0].ast
  cpu = Target("CPU", "c", ncores=2, simd_bytes=32)
  for t in (cpu, PORTABLE_C, cpu.replace(renderer="llvm"), Target("NV", "ptx", arch="sm_90", warp_size=32, gpu=True), AMD_TARGETS["gfx1100"]):
    k = pipeline.BACKENDS[t.renderer].optimize(lower(ast, "E_4096"), t)
    prog = linearize(k)
    plan = plan_launch(k, t, prog) if t.gpu else None
    _, launch = pipeline.BACKENDS[t.renderer].render(k, t, prog, plan)
    assert type(launch) is Launch, (t.renderer, t.device, launch)
    if plan is not None: assert launch == plan.launch and launch.threads == 1 and prod(launch.global_size) > 1, launch
    else: assert launch.global_size == launch.local_size == (1, 1, 1) and launch.threads == (2 if k.threaded is not None else 1), launch
  assert Launch(threads=2).kwargs() == {"global_size": (1, 1, 1), "local_size": (1, 1, 1), "threads": 2}
  with pytest.raises(Exception): Launch().threads = 3   # noqa: B017 (frozen: a FrozenInstanceError)

def test_jit_without_a_device_graph_replays_one_by_one():
  """A device whose graph() is None (the PTX emulator) still replays the capture, launch by launch."""
  from frontend import Tensor, TinyJit
  w = Tensor(np.arange(8, dtype=np.float32), device="PTXEMU").realize()
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x * w + 1).sum()
  for i in range(4):
    assert f(Tensor(np.full(8, float(i), np.float32), device="PTXEMU").realize()).item() == float(i * 28 + 8)
  assert f.graph is None and f.graph_built
