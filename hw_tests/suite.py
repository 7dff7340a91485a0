"""The conformance checks. Each check is a function taking a Ctx and raising on failure; `run_suite` runs them,
prints a pass/fail table and returns the results (also written as JSON by __main__)."""
from __future__ import annotations
import ctypes, time
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable
import numpy as np
from hcqrt.interface import GraphCopy, GraphExec
from hcqrt.hcq import GraphReplay, SignalTimeout
from hw_tests import kernels as K
import itertools

class Skipped(Exception):
  """A check that cannot run here (e.g. a multi-device check on a box with one GPU): listed as SKIP, not a pass."""

@dataclass
class Ctx:
  dev: Any
  mocked: bool
  stress: int = 10_000
  peer: Any = None     # a second device of the same driver, for the multi-device checks (None: they are skipped)
  progs: dict[str, Any] = field(default_factory=dict)
  metrics: dict[str, float] = field(default_factory=dict)

  @property
  def kind(self) -> str:
    """"NV" or "AMD": which kernel sources (PTX or LLVM IR) and which device-specific checks apply."""
    return "AMD" if self.dev.name.upper().startswith("AMD") else "NV"

  def prog(self, name: str, *args: Any) -> Any:
    """Suite kernel `name` (args: its generator's parameters), built for this device: PTX through NVIDIA's assembler,
    or LLVM IR through llvmlite for AMD."""
    key = f"{name}{args}"
    if key not in self.progs:
      if self.kind == "AMD":
        from hw_tests import kernels_amd as KA
        self.progs[key] = self.dev.program(name, KA.compile_ir(KA.source(name, *args), self.dev.arch))
      else:
        from compiler.assemble.ptx_assembler import assemble_ptx
        self.progs[key] = self.dev.program(name, assemble_ptx(K.head(self.dev.arch) + K.source(name, *args), self.dev.arch))
    return self.progs[key]
  def up(self, arr: np.ndarray) -> Any:
    b = self.dev.allocator.alloc(arr.nbytes); self.dev.allocator.copyin(b, memoryview(arr.reshape(-1).view(np.uint8))); return b
  def down(self, b: Any, n: int, dt=np.float32) -> np.ndarray:
    out = np.zeros(n, dt); self.dev.allocator.copyout(memoryview(out.view(np.uint8)), b); return out

def expect(cond: bool, what: str) -> None:
  if not cond: raise AssertionError(what)

CHECKS: list[tuple[str, str, Callable[[Ctx], str | None], tuple[str, ...]]] = []
def check(group: str, devices: tuple[str, ...] = ("NV", "AMD")):
  """Register a check for the device kinds it applies to (others list it as n/a, counted neither way)."""
  def deco(fn):
    CHECKS.append((group, fn.__name__, fn, devices)); return fn
  return deco

# ---------------------------------------------------------------- properties
@check("properties")
def device_properties(c: Ctx):
  d = c.dev
  if c.kind == "AMD":
    p = d.properties()
    expect(d.arch in ("gfx1100", "gfx942") and p["cu_count"] > 0 and p["lds_bytes"] >= 65536, f"arch {d.arch}, properties {p}")
    expect(d.wave_size == (32 if d.arch == "gfx1100" else 64), f"wave size {d.wave_size} on {d.arch}")
    return f"{p['arch']} {p['family']} driver {p['driver']} {p['cu_count']} CUs wave{d.wave_size} LDS {p['lds_bytes'] >> 10} KiB"
  expect(d.renderer == "ptx" and d.arch.startswith("sm_"), f"renderer/arch {d.renderer}/{d.arch}")
  p = d.properties()
  expect(p["memory_bytes"] > 0 and p["sm_count"] > 0, f"memory {p['memory_bytes']}, SMs {p['sm_count']}")
  return f"{p['arch']} {p['compute']} QMD {p['qmd']} driver {p['driver']} {p['memory_bytes'] >> 30} GiB {p['sm_count']} SMs"

# ---------------------------------------------------------------- memory
@check("memory")
def alloc_sizes(c: Ctx):
  al, sizes = c.dev.allocator, [1, 3, 4096, 4097, 1 << 20, (2 << 20) + 1, 64 << 20, 1 << 30]
  for n in sizes:
    b = al.alloc(n)
    expect(b.nbytes == n and b.va % 256 == 0, f"alloc({n}) -> {b}")
    tail = np.arange(16, dtype=np.uint8) + (n & 0xFF)
    t = c.up(tail)
    off = max(0, n - 16)
    c.dev.hw_copy_queue().wait(c.dev.timeline_signal, c.dev.timeline_value - 1).copy(b.va + off, t.va, min(16, n)) \
      .signal(c.dev.timeline_signal, c.dev.timeline_value).submit(c.dev)
    c.dev.timeline_value += 1
    back = c.dev.allocator.alloc(16)
    c.dev.hw_copy_queue().wait(c.dev.timeline_signal, c.dev.timeline_value - 1).copy(back.va, b.va + off, min(16, n)) \
      .signal(c.dev.timeline_signal, c.dev.timeline_value).submit(c.dev)
    c.dev.timeline_value += 1
    expect(np.array_equal(c.down(back, min(16, n), np.uint8), tail[:min(16, n)]), f"last bytes of a {n}-byte buffer")
    for x in (b, t, back): al.free(x)
  return f"sizes {sizes[0]} B .. {sizes[-1] >> 30} GiB"

@check("memory")
def alloc_free_many(c: Ctx):
  bufs = [c.dev.allocator.alloc(4096 * (i + 1)) for i in range(64)]
  vas = sorted((b.va, b.va + b.nbytes) for b in bufs)
  expect(all(a[1] <= b[0] for a, b in itertools.pairwise(vas)), "overlapping allocations")
  for b in bufs: c.dev.allocator.free(b)

# ---------------------------------------------------------------- copies
@check("copies")
def host_device_odd_sizes(c: Ctx):
  rng = np.random.default_rng(1)
  for n in (1, 3, 17, 4095, 4097, 65539, (2 << 20) + 5, (5 << 20) - 3):
    x = rng.integers(0, 256, n, dtype=np.uint8)
    b = c.up(x)
    expect(np.array_equal(c.down(b, n, np.uint8), x), f"round trip of {n} bytes")
    c.dev.allocator.free(b)

@check("copies")
def device_device_odd_offsets(c: Ctx):
  rng = np.random.default_rng(2)
  x = rng.integers(0, 256, 10000, dtype=np.uint8)
  src, dst = c.up(x), c.up(np.zeros(10000, np.uint8))
  q, s = c.dev.hw_copy_queue(), c.dev.new_signal()
  for so, do, n in ((1, 3, 999), (17, 5000, 4097), (4096, 9000, 1000)): q.copy(dst.va + do, src.va + so, n)
  q.signal(s, 1).submit(c.dev); s.wait(1, 10)
  out, ref = c.down(dst, 10000, np.uint8), np.zeros(10000, np.uint8)
  for so, do, n in ((1, 3, 999), (17, 5000, 4097), (4096, 9000, 1000)): ref[do:do + n] = x[so:so + n]
  expect(np.array_equal(out, ref), "device-to-device copies at odd offsets")
  s.free()

# ---------------------------------------------------------------- signals
@check("signals")
def signal_ordering_across_queues(c: Ctx):
  d, n = c.dev, 4096
  add = c.prog("add")
  x = np.arange(n, dtype=np.float32)
  a, o, o2 = c.up(x), d.allocator.alloc(4 * n), d.allocator.alloc(4 * n)
  s = d.new_signal(name="order")
  copy = d.hw_copy_queue().wait(s, 1).copy(o2.va, o.va, 4 * n).signal(s, 2)
  comp = d.hw_compute_queue().exec(add, add.fill_kernargs([o, a, a], [1, n]), (n // 256, 1, 1), (256, 1, 1)).signal(s, 1)
  copy.submit(d); comp.submit(d)     # the copy is queued first but must wait for the kernel
  s.wait(2, 10)
  expect(np.array_equal(c.down(o2, n), 2 * x), "copy saw the kernel's result")
  s.free()

@check("signals")
def signal_64bit_and_timestamps(c: Ctx):
  d, s = c.dev, c.dev.new_signal(name="ts")
  v = (1 << 33) + 5
  d.hw_compute_queue().timestamp(s).signal(s, v).submit(d); s.wait(v, 10)
  t1 = s.timestamp
  d.hw_copy_queue().timestamp(s).submit(d)
  time.sleep(0.001)
  d.hw_copy_queue().signal(s, v + 1).submit(d); s.wait(v + 1, 10)
  expect(s.value == v + 1 and s.timestamp >= t1 > 0, f"value {s.value}, timestamps {t1} -> {s.timestamp}")
  s.free()

@check("signals")
def wait_timeout_is_clear(c: Ctx):
  s = c.dev.new_signal(name="never")
  t0 = time.perf_counter()
  try: s.wait(1, 0.05)
  except SignalTimeout as e:
    msg = str(e)
    expect("never" in msg and "last completed value is 0" in msg and c.dev.name in msg, msg)
    expect(time.perf_counter() - t0 < 1.0, "timeout took too long")
    s.free(); return
  raise AssertionError("no timeout")

# ---------------------------------------------------------------- launches
@check("launches")
def grid_and_block_shapes(c: Ctx):
  p = c.prog("idx3")
  for g, l in (((1, 1, 1), (1, 1, 1)), ((7, 1, 1), (33, 1, 1)), ((3, 5, 1), (8, 4, 1)), ((2, 3, 4), (4, 2, 8)), ((1, 1, 1), (1024, 1, 1)), ((300, 1, 1), (1, 1, 1))):
    n = int(np.prod(g) * np.prod(l))
    o = c.dev.allocator.alloc(4 * n)
    p(o, global_size=g, local_size=l, wait=True)
    expect(np.array_equal(c.down(o, n, np.uint32), np.arange(n, dtype=np.uint32)), f"grid {g} block {l}")
    c.dev.allocator.free(o)

@check("launches")
def many_arguments(c: Ctx):
  nin = 15
  p = c.prog("many", nin)
  xs = [np.full(64, j + 1, np.float32) for j in range(nin)]
  ins, o = [c.up(x) for x in xs], c.dev.allocator.alloc(256)
  p(o, *ins, vals=(1000,), global_size=(1, 1, 1), local_size=(64, 1, 1), wait=True)
  expect(np.all(c.down(o, 64) == 1000 + sum(range(1, nin + 1))), f"{nin + 2} arguments")
  return f"{nin + 1} pointers + 1 int"

@check("launches")
def shared_memory_and_barriers(c: Ctx):
  p = c.prog("rev")
  x = np.arange(4 * 256, dtype=np.float32)
  a, o = c.up(x), c.dev.allocator.alloc(x.nbytes)
  p(o, a, global_size=(4, 1, 1), local_size=(256, 1, 1), wait=True)
  expect(np.array_equal(c.down(o, x.size), x.reshape(4, 256)[:, ::-1].reshape(-1)), "block reversal through shared memory")

@check("launches")
def stack_and_spills(c: Ctx):
  p = c.prog("stack")
  n = 1000
  x = (np.arange(n, dtype=np.float32) % 13) - 6
  a, o = c.up(x), c.dev.allocator.alloc(4 * n)
  p(o, a, vals=(n,), global_size=(4, 1, 1), local_size=(256, 1, 1), wait=True)
  got = c.down(o, n)
  expect(np.allclose(got, K.stack_reference(x), rtol=1e-5, atol=1e-3), f"local array + spills: max error {np.abs(got - K.stack_reference(x)).max()}")
  return f"{p.kd.private_segment_fixed_size if c.kind == 'AMD' else p.kernel.local_bytes} bytes of stack per thread"

@check("launches")
def dependent_launches_in_one_queue(c: Ctx):
  # each kernel reads what the one before wrote, with nothing but the queue's own ordering between them
  d, n, k = c.dev, 2048, 6
  add = c.prog("add")
  x = np.arange(n, dtype=np.float32)
  bufs = [c.up(x)] + [d.allocator.alloc(4 * n) for _ in range(k)]
  q = d.hw_compute_queue().wait(d.timeline_signal, d.timeline_value - 1)
  for i in range(k): q.exec(add, add.fill_kernargs([bufs[i + 1], bufs[i], bufs[0]], [1, n]), (n // 256, 1, 1), (256, 1, 1))
  q.signal(d.timeline_signal, d.timeline_value).submit(d)
  d.timeline_value += 1
  d.synchronize()
  expect(np.array_equal(c.down(bufs[k], n), (k + 1) * x), f"chain of {k} dependent kernels")

@check("launches")
def back_to_back_launches(c: Ctx):
  p = c.prog("inc")
  o = c.up(np.zeros(1, np.uint32))
  t0 = time.perf_counter()
  for _ in range(c.stress): p(o, global_size=(1, 1, 1), local_size=(1, 1, 1))
  c.dev.synchronize()
  dt = time.perf_counter() - t0
  got = int(c.down(o, 1, np.uint32)[0])
  expect(got == c.stress, f"{got} of {c.stress} increments")
  c.metrics["back_to_back_us_per_launch"] = dt / c.stress * 1e6
  return f"{c.stress} launches, {dt / c.stress * 1e6:.0f} us each"

# ---------------------------------------------------------------- graph replay
@check("graph")
def graph_replay_patched(c: Ctx):
  d, n = c.dev, 512
  add = c.prog("add")
  x = np.arange(n, dtype=np.float32)
  b = [c.up(x), c.up(x)] + [d.allocator.alloc(4 * n) for _ in range(4)]
  g = GraphReplay(d, [GraphExec(add, [b[2], b[0], b[1]], [1, n], (2, 1, 1), (256, 1, 1)), GraphCopy(b[3], b[2], 4 * n),
                      GraphExec(add, [b[4], b[3], b[0]], [2, n], (2, 1, 1), (256, 1, 1))])
  g.replay(wait=True)
  expect(np.array_equal(c.down(b[4], n), 4 * x), "first replay")
  g.replay(bufs={(0, 1): b[4], (1, 0): b[5], (2, 1): b[5]}, vals={(2, 0): 3}, wait=True)   # b2 = 4x + x; b5 = b2; b4 = b5 + 3x
  expect(np.array_equal(c.down(b[4], n), 8 * x) and np.array_equal(c.down(b[5], n), 5 * x), "patched replay")

@check("graph")
def graph_replays_back_to_back(c: Ctx):
  # Replays with no host wait between them, each patched (new output, new k) while the GPU may still have the previous
  # one to fetch: the replay must wait before it rewrites the stream (issue 22, N3). A GPU runs late by itself; the
  # mocks are put in their latency mode (the doorbell only queues the work) so that they do too.
  d, n, reps = c.dev, 512, 4
  add = c.prog("add")
  x = np.arange(n, dtype=np.float32)
  a, one = c.up(x), c.up(np.ones(n, np.float32))
  outs = [(d.allocator.alloc(4 * n), d.allocator.alloc(4 * n)) for _ in range(reps)]
  g = GraphReplay(d, [GraphExec(add, [outs[0][0], a, one], [1, n], (2, 1, 1), (256, 1, 1)), GraphCopy(outs[0][1], outs[0][0], 4 * n)])
  eng = getattr(getattr(d, "drv", None), "engine", getattr(d, "drv", None))   # NV mock: its engine; AMD mock: the KFD's CP
  late = c.mocked and hasattr(eng, "latency_s")
  if late: eng.latency_s = 0.005
  try:
    for k, (o, o2) in enumerate(outs): g.replay(bufs={(0, 0): o, (1, 0): o2, (1, 1): o}, vals={(0, 0): k + 2})
    d.synchronize()
  finally:
    if late: eng.latency_s = 0.0
  for k, (o, o2) in enumerate(outs):
    expect(np.array_equal(c.down(o, n), x + k + 2) and np.array_equal(c.down(o2, n), x + k + 2), f"replay {k + 1} of {reps}")
  return f"{reps} replays" + (" (mock GPU 5 ms late)" if late else "")

@check("graph")
def graph_cost(c: Ctx):
  d, n, k = c.dev, 32, 50
  p = c.prog("add")
  bufs = [d.allocator.alloc(4 * n) for _ in range(3)]
  g = GraphReplay(d, [GraphExec(p, bufs, [1, n], (1, 1, 1), (n, 1, 1))] * k)
  g.replay(wait=True)
  eng = getattr(getattr(d, "drv", None), "engine", getattr(d, "drv", None))   # NV mock: its engine; AMD mock: the KFD's CP
  busy = (lambda: eng.busy_ns) if hasattr(eng, "busy_ns") else (lambda: 0)   # mock: exclude the emulated GPU's time
  def host_us(fn, reps):   # each call from an idle GPU until it is idle again, less the (mock) GPU's busy time, so the
    total = 0              # work of an asynchronous GPU is counted whole or not at all
    for _ in range(reps):
      d.synchronize()
      b0, t = busy(), time.perf_counter_ns()
      fn(); d.synchronize()
      total += time.perf_counter_ns() - t - (busy() - b0)
    return total / reps / 1e3
  launch1 = lambda: p(*bufs, vals=(1, n), global_size=(1, 1, 1), local_size=(n, 1, 1))
  # (a mock's GPU is an emulator, ~10 ms a kernel on the AMD one: a fifth of the repeats there, its numbers only report)
  reps = 2 if c.mocked else 10
  launch = host_us(launch1, 10 * reps)
  eager = host_us(lambda: [launch1() for _ in range(k)], reps) / k   # the graph's k kernels launched one by one
  graph = host_us(lambda: g.replay(), reps) / k
  # on hardware nothing reports the GPU's busy time: the numbers then include the kernels' run time and the interrupt
  # wake-up, so they go under other names than the mock's host-only cost
  mocked = hasattr(eng, "busy_ns")
  names = ("launch_host_us", "eager_host_us_per_kernel", "graph_host_us_per_kernel") if mocked else \
          ("launch_roundtrip_us", "eager_roundtrip_us_per_kernel", "graph_roundtrip_us_per_kernel")
  c.metrics.update(dict(zip(names, (launch, eager, graph))))
  # a speed target is for real hardware: on a mock the numbers are this host's Python time, which other load on the
  # host moves by 10x (bench/hcq_bench.py tracks them); there the check reports them and fails only on a broken replay.
  # The graph is held to the same kernels launched one by one (a replay that rebuilt its commands would cost as much),
  # not to one launch's round trip, whose wake-up the graph's kernels share
  if not mocked: expect(graph < eager / 2, f"graph {graph:.2f} us/kernel vs {eager:.2f} us/kernel launched one by one")
  what = "build+submit" if mocked else "submit+run+wake"
  return f"{what} {launch:.1f} us/launch, {eager:.2f} us/kernel one by one, graph {graph:.2f} us/kernel"

# ---------------------------------------------------------------- error paths
# ---------------------------------------------------------------- several devices (issue 26): P2P, bounce, waits
def _peer(c: Ctx) -> Any:
  if c.peer is None: raise Skipped("needs 2 devices")
  return c.peer

def _up_on(dev: Any, arr: np.ndarray) -> Any:
  b = dev.allocator.alloc(arr.nbytes); dev.allocator.copyin(b, memoryview(arr.reshape(-1).view(np.uint8))); return b
def _down_on(dev: Any, b: Any, n: int, dt=np.uint8) -> np.ndarray:
  out = np.zeros(n, dt); dev.allocator.copyout(memoryview(out.view(np.uint8)), b); return out

@check("multi")
def p2p_matrix(c: Ctx):
  p = _peer(c)
  ab, ba = c.dev.peer_status(p), p.peer_status(c.dev)
  for st in (ab, ba): expect(st.startswith(("ok: ", "no-p2p: ")), f"peer status {st!r} is 'ok: <link>' or 'no-p2p: <status>'")
  return f"{c.dev.name}->{p.name}: {ab}; {p.name}->{c.dev.name}: {ba}"

@check("multi")
def cross_device_signal_wait(c: Ctx):
  p = _peer(c)
  c.dev._link(p)
  for a, b in ((c.dev, p), (p, c.dev)):   # b's queue waits on a's semaphore, which a releases later
    gate, done = a.new_signal(0, "gate"), b.new_signal(0, "done")
    b.hw_compute_queue().wait(gate, 3).signal(done, 1).submit(b)
    time.sleep(0.01)
    expect(done.value == 0, f"{b.name} waited for {a.name}'s semaphore")
    a.hw_compute_queue().signal(gate, 3).submit(a)
    done.wait(1, 10)
    gate.free(); done.free()

@check("multi")
def peer_copy_correct_and_bandwidth(c: Ctx):
  # 32 MiB on hardware (a bandwidth); 8 MiB on a mock, still over gfx9's 4 MiB SDMA packet and over two 2 MiB bounce
  # slots (each used more than once), at a quarter of the emulated copy time
  p, n = _peer(c), ((8 if c.mocked else 32) << 20) + 4097
  x = np.random.default_rng(5).integers(0, 256, n, dtype=np.uint8)
  src, dst = c.up(x), p.allocator.alloc(n)
  c.dev.transfer_to(p, dst, src, n); p.synchronize()   # (links the pair, maps dst: not timed)
  t0 = time.perf_counter()
  c.dev.transfer_to(p, dst, src, n); p.synchronize()
  c.metrics["peer_copy_GBps"] = round(n / (time.perf_counter() - t0) / 1e9, 3)
  expect(np.array_equal(_down_on(p, dst, n), x), f"{n} bytes {c.dev.name} -> {p.name}")
  return f"{c.dev.peer_status(p)}, {c.metrics['peer_copy_GBps']} GB/s{' (mock: not a bandwidth)' if c.mocked else ''}"

@check("multi")
def bounce_copy_correct(c: Ctx):
  p, n = _peer(c), 3 * c.dev.BOUNCE_CHUNK + 333
  x = np.random.default_rng(6).integers(0, 256, n, dtype=np.uint8)
  src, dst = c.up(x), _up_on(p, np.zeros(n, np.uint8))
  c.dev._link(p)
  t0 = time.perf_counter()
  c.dev.bounce_to(p, dst, src, n); p.synchronize()   # the no-P2P path, even where P2P works
  c.metrics["bounce_copy_GBps"] = round(n / (time.perf_counter() - t0) / 1e9, 3)
  expect(np.array_equal(_down_on(p, dst, n), x), f"{n} bytes through the bounce slots")

@check("errors")
def error_paths(c: Ctx):
  d = c.dev
  add = c.prog("add")
  b = d.allocator.alloc(16)
  for fn, exc, what in ((lambda: add(b, b, global_size=(1, 1, 1)), TypeError, "wrong argument count"),
                        (lambda: d.allocator.copyin(b, memoryview(bytes(17))), ValueError, "copyin too large"),
                        (lambda: d.allocator.copyout(memoryview(bytearray(17)), b), ValueError, "copyout too large"),
                        (lambda: add(b, b, b, vals=(1, 1), global_size=(0, 1, 1)), ValueError, "empty grid")):
    try: fn()
    except exc: continue
    raise AssertionError(f"{what}: no {exc.__name__}")
  d.allocator.free(b)
  try: d.allocator.free(b)
  except RuntimeError: pass
  else: raise AssertionError("double free accepted")
  if c.mocked and c.kind == "AMD":   # the mock CP refuses a PM4 packet a compute queue does not execute (the queue stops)
    from hcqrt import syscalls
    from hcqrt.amd.device import AMDDevice, AMDError
    from hcqrt.mock.amd import MockKFD
    from ioctl_defs.amd import pm4
    with syscalls.installed(MockKFD(d.arch, kernel=getattr(getattr(d, "drv", None), "kernel", None))):
      d2 = AMDDevice("AMD")
      runtime = d2.kfd_version >= (1, 13)   # KFD reports queue exceptions through the CWSR header only to an enabled runtime
      bad = pm4.packet(pm4.COPY_DATA, 0, 0, 0, 0, 0)
      def submit_bad():
        if not d2.aql: return d2.compute.submit(bad)
        from ioctl_defs.amd import aql   # an AQL queue runs PM4 from an indirect buffer named by a PM4-IB packet
        host, va = d2.kernargs.alloc(4 * len(bad), 256)
        for i, w in enumerate(bad): ctypes.c_uint32.from_address(host + 4 * i).value = w
        d2.compute.submit_packets([aql.pm4_ib(pm4.indirect_buffer(va, len(bad)))])
      t0 = time.perf_counter()
      try: submit_bad(); d2.wait_signal(d2.timeline_signal, 1, 5 if runtime else 0.3)   # runs later: seen at the wait
      except AMDError as e: expect(runtime and "EC_QUEUE_PACKET_UNSUPPORTED" in str(e) and time.perf_counter() - t0 < 4, str(e))
      except SignalTimeout as e: expect(not runtime, f"no queue exception reached the host: {e}")
      else: raise AssertionError("unexecuted PM4 packet accepted")
  elif c.mocked:   # the mock GPU refuses a method the class does not have (hardware would raise an Xid)
    from hcqrt.mock.nv import MockNV, GPUError
    from hcqrt import syscalls
    from hcqrt.nv.device import NVDevice, NVComputeQueue, SUBC_COMPUTE
    with syscalls.installed(MockNV(arch=d.drv.chip.key)):
      d2 = NVDevice("NV")
      q = NVComputeQueue(); q.method(SUBC_COMPUTE, 0x1FF0, 0)
      try: q.submit(d2)
      except GPUError as e: expect("0x1ff0" in str(e), str(e))
      else: raise AssertionError("invalid method accepted")

def run_suite(c: Ctx, only: str | None = None, out=print) -> list[dict]:
  results = []
  for group, name, fn, devices in CHECKS:
    if only and only not in (group, name): continue
    if c.kind not in devices:
      out(f"n/a   {group:11s} {name:32s} {'':8s}  not applicable to {c.kind}"); continue
    t0 = time.perf_counter()
    skipped = False
    try: note, ok, err = fn(c), True, None
    except Skipped as e: note, ok, err, skipped = f"skipped: {e}", True, None, True
    except Exception as e: note, ok, err = None, False, f"{type(e).__name__}: {e}"
    r = {"group": group, "check": name, "passed": ok, "skipped": skipped, "seconds": round(time.perf_counter() - t0, 3), "note": note, "error": err}
    results.append(r)
    out(f"{'SKIP' if skipped else 'PASS' if ok else 'FAIL'}  {group:11s} {name:32s} {r['seconds']:7.2f}s  {note or err or ''}")
  return results
