"""CPU-side cost of HCQ submission on the NV and AMD backends, measured on the mock drivers (µs of host time).

  launch      build a fresh compute queue (timeline wait, argument block, QMD, exec, signal) and submit it
  build only  the same queue built but not submitted
  graph/kern  replay of a prebuilt graph of N launches with two buffer pointers patched, divided by N (mock GPU
              running inline; and the host path alone with the GPU work deferred)
  jit/kern    TinyJit replay of N chained elementwise kernels (graph path), frontend included, divided by N

The mock runs kernels inside the doorbell write; that time ("on the GPU", the engine's busy_ns) is subtracted,
so the numbers are what the host pays. The graph path must cost under a tenth of building queues afresh and
at most 1 µs per kernel (host path alone), with its launches ordered (a WAIT_FOR_IDLE barrier between dependent kernels, built
into the prebuilt pushbuffer): the exit status is 1 when it does not.

AMD (mock KFD, gfx1100): the same launch / build-only / graph-replay numbers for a PM4 queue, with the kernel an LLVM
IR `add` compiled by llvmlite and run by the mock's RDNA3 emulator (its time, the mock's busy_ns, subtracted); the host
path alone swaps in a no-op executor. The graph must cost under a tenth of a launch per kernel and carry a
CS_PARTIAL_FLUSH between its launches. "eager launch + synchronize" is a launch whose wait sleeps in WAIT_EVENTS: the
end-of-pipe interrupt must wake it (no 10 ms WAIT_EVENTS timeouts). The mock's engine runs work on its own thread. Without llvmlite the AMD part is skipped with a note.

  python bench/hcq_bench.py [--device NV|AMD|all] [--kernels 50] [--reps 200] [--json]

Barrier cost (`--barrier-cost`, NV; `--real` opens the machine's GPU instead of the mock): GPU time per kernel of a
replayed graph of N independent one-thread kernels with the per-kernel WAIT_FOR_IDLE and without it (safe only because
they are independent), and of a chain of N dependent ones. The time is the difference of two GPU timestamps (semaphore
releases with RELEASE_TIMESTAMP) the graph writes before its first and after its last kernel, so the host's wait
(which sleeps in 0.2 ms steps) does not blur it; the difference of the first two is what one WAIT_FOR_IDLE boundary
costs on the GPU; the chain shows what a dependency costs. Host wall times are reported too. On the mock the numbers
are the emulator's, not a GPU's; the results are checked either way (every kernel ran once per replay).

  python bench/hcq_bench.py --barrier-cost [--real] [--kernels 200] [--reps 20] [--json]
"""
from __future__ import annotations
import argparse, json, os, statistics, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

PTX_ADD = """.version 8.0
.target sm_90
.address_size 64
.visible .entry add(.param .u64 out, .param .u64 a, .param .u64 b, .param .u32 n)
{
  .reg .pred %p<2>; .reg .b32 %r<6>; .reg .f32 %f<4>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [a]; ld.param.u64 %rd3, [b]; ld.param.u32 %r5, [n];
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;
  setp.ge.u32 %p1, %r4, %r5; @%p1 bra DONE;
  mul.wide.u32 %rd4, %r4, 4; add.s64 %rd5, %rd2, %rd4; add.s64 %rd6, %rd3, %rd4; add.s64 %rd7, %rd1, %rd4;
  ld.global.f32 %f1, [%rd5]; ld.global.f32 %f2, [%rd6]; add.f32 %f3, %f1, %f2; st.global.f32 [%rd7], %f3;
DONE:
  ret;
}"""

def host_us(dev, eng, fn, reps: int, per: int = 1) -> float:
  """Median over `reps` calls of host µs per call (wall time minus the mock engine's busy time), divided by `per`."""
  out = []
  for _ in range(reps):
    b0, t0 = eng.busy_ns, time.perf_counter_ns()
    fn()
    out.append((time.perf_counter_ns() - t0 - (eng.busy_ns - b0)) / 1e3 / per)
  dev.synchronize()
  return statistics.median(out)

def host_us_idle(dev, fn, reps: int, per: int = 1) -> float:
  """Median host µs per call of `fn` started on an idle GPU (the AMD mock runs work on its own engine thread, after
  the doorbell: the wait for earlier work is outside the timed region, and nothing is subtracted)."""
  out = []
  for _ in range(reps):
    dev.synchronize()
    t0 = time.perf_counter_ns(); fn(); out.append((time.perf_counter_ns() - t0) / 1e3 / per)
  dev.synchronize()
  return statistics.median(out)

def bench(kernels: int = 50, reps: int = 200, arch: str = "hopper") -> dict:
  from hcqrt import syscalls
  from hcqrt.mock.nv import MockNV
  from hcqrt.nv.device import NVDevice
  from hcqrt.hcq import GraphReplay
  from hcqrt.interface import GraphExec
  from compiler.assemble.ptx_assembler import assemble_ptx
  drv = syscalls.install(MockNV(arch=arch))
  try:
    dev = NVDevice("NV")
    eng = drv.engine
    prog = dev.program("add", assemble_ptx(PTX_ADD.replace("sm_90", dev.arch), dev.arch))
    n = 32
    bufs = [dev.allocator.alloc(4 * n) for _ in range(4)]
    launch = dict(global_size=(1, 1, 1), local_size=(n, 1, 1))
    res: dict = {"device": f"{dev.product_name} (mock, {dev.arch}, QMD {dev.qmd_version})", "kernels_per_graph": kernels}

    res["launch_us"] = host_us(dev, eng, lambda: prog(bufs[0], bufs[1], bufs[2], vals=(n,), **launch), reps)
    def build():
      a = prog.fill_kernargs([bufs[0], bufs[1], bufs[2]], (n,))
      dev.hw_compute_queue().wait(dev.timeline_signal, dev.timeline_value - 1).exec(prog, a, launch["global_size"], launch["local_size"]) \
         .signal(dev.timeline_signal, dev.timeline_value)
    res["build_only_us"] = host_us(dev, eng, build, reps)

    items = [GraphExec(prog, [bufs[(i + 2) % 4], bufs[i % 4], bufs[(i + 1) % 4]], [n], launch["global_size"], launch["local_size"])
             for i in range(kernels)]
    g = GraphReplay(dev, items)
    g.replay(); dev.synchronize()
    flip = [0]
    def replay():   # patch the first launch's inputs, alternating, as a JIT replay swaps its argument buffers
      flip[0] ^= 1
      g.replay(bufs={(0, 1): bufs[flip[0]], (0, 2): bufs[1 - flip[0]]})
    d0 = drv.doorbells
    res["graph_per_kernel_us"] = host_us(dev, eng, replay, max(reps // 4, 10), per=kernels)
    res["doorbells_per_replay"] = (drv.doorbells - d0) / max(reps // 4, 10)
    # Between two replays above, the mock has just emulated every kernel in this process, which evicts the host's
    # caches (a burst of numpy work before a replay makes the same host code ~10x slower). Next to a real GPU the
    # host does not run the kernels, so the host path is also timed alone: the mock only records the doorbells, each
    # replay takes the previous one as finished, and afterwards the recorded work is dropped as if the GPU had done it
    # (GPGet caught up, signals at their final values); the replay after that runs for real.
    eng.paused, times = True, []
    try:
      for _ in range(max(reps // 4, 10)):
        # (the previous replay as finished: its graph signal and the timeline value it releases, both of which a replay waits for)
        if g.submitted: g.sig.value, dev.timeline_signal.value = g.base + g.final, dev.timeline_value - 1
        t0 = time.perf_counter_ns(); replay(); times.append((time.perf_counter_ns() - t0) / 1e3 / kernels)
    finally:
      eng.pending_doorbells.clear(); eng.paused = False
      dev.compute_ch.gpget.value = dev.compute_ch.put
      g.sig.value, dev.timeline_signal.value = g.base + g.final, dev.timeline_value - 1
    g.replay(); dev.synchronize()
    res["graph_host_path_per_kernel_us"] = statistics.median(times)
    from ioctl_defs.nv.methods import method_header
    from hcqrt.nv.device import SUBC_COMPUTE, _CP
    res["barriers_per_graph"] = g.compute.q.count(method_header(SUBC_COMPUTE, _CP["WAIT_FOR_IDLE"].offset, 1))

    # the frontend: a jitted chain of elementwise kernels
    from hcqrt.device import Device
    from frontend import Tensor, TinyJit
    Device._opened["NV"] = dev
    k = min(kernels, 20)
    @TinyJit
    def chain(x: Tensor) -> Tensor:
      for _i in range(k): x = (x * 1.0001 + 0.5).contiguous()
      return x
    xs = [Tensor.rand(n, device="NV").realize() for _ in range(4)]
    for x in xs[:3]: chain(x)
    res["jit_kernels"] = len(chain.items)
    res["jit_per_kernel_us"] = host_us(dev, eng, lambda: chain(xs[3]), max(reps // 4, 10), per=len(chain.items))
    res["graph_vs_launch"] = res["graph_per_kernel_us"] / res["launch_us"]
    return res
  finally: syscalls.uninstall(drv)

def barrier_cost(dev, kernels: int = 200, reps: int = 20) -> dict:
  """GPU µs per kernel (best of `reps` replays, from GPU timestamps around the kernels) of: `indep_wfi_us` independent
  kernels with WAIT_FOR_IDLE between them, `indep_no_wfi_us` the same without it, `chain_us` a dependent chain;
  `wfi_cost_us` = the first minus the second. `*_host_us`: the same from the host's wall time per replay."""
  import numpy as np
  from hcqrt.hcq import GraphReplay
  from hcqrt.interface import GraphExec, GraphTimestamp
  from hcqrt.nv.device import NVComputeQueue
  from hw_tests import kernels as K
  from compiler.assemble.ptx_assembler import assemble_ptx
  inc = dev.program("inc", assemble_ptx(K.head(dev.arch) + K.INC, dev.arch))
  bufs = [dev.allocator.alloc(4) for _ in range(kernels)]
  for b in bufs: dev.allocator.copyin(b, memoryview(np.zeros(1, np.uint32)))
  def graph(items: list, wfi: bool = True) -> GraphReplay:
    orig = NVComputeQueue.barrier
    if not wfi: NVComputeQueue.barrier = lambda self: None   # recorded without barriers: fine for independent kernels only
    try: return GraphReplay(dev, items)
    finally: NVComputeQueue.barrier = orig
  t0, t1 = dev.new_signal(name="bench start"), dev.new_signal(name="bench end")
  def timed(items: list) -> list: return [GraphTimestamp(t0), *items, GraphTimestamp(t1)]
  def per_kernel_us(g: GraphReplay) -> tuple[float, float]:
    g.replay(wait=True)
    gpu, host = [], []
    for _ in range(reps):
      host.append(g.replay(wait=True) or 0.0)
      gpu.append((t1.timestamp - t0.timestamp) / 1e3)
    return min(gpu) / kernels, min(host) / kernels * 1e6
  indep = [GraphExec(inc, [b], [], (1, 1, 1), (1, 1, 1)) for b in bufs]
  res = {"kernels": kernels, "reps": reps, "device": repr(dev)}
  res["indep_wfi_us"], res["indep_wfi_host_us"] = per_kernel_us(graph(timed(indep)))
  res["indep_no_wfi_us"], res["indep_no_wfi_host_us"] = per_kernel_us(graph(timed(indep), wfi=False))
  res["chain_us"], res["chain_host_us"] = per_kernel_us(graph(timed([indep[0]] * kernels)))
  res["wfi_cost_us"] = res["indep_wfi_us"] - res["indep_no_wfi_us"]
  res["wfi_cost_host_us"] = res["indep_wfi_host_us"] - res["indep_no_wfi_host_us"]
  got = np.zeros(kernels, np.uint32)
  for i, b in enumerate(bufs):
    v = np.zeros(1, np.uint32); dev.allocator.copyout(memoryview(v), b); got[i] = v[0]
  runs = 2 * (reps + 1)   # two independent graphs, each replayed reps + 1 times; the chain adds kernels per replay to bufs[0]
  want = np.full(kernels, runs, np.uint32); want[0] += kernels * (reps + 1)
  res["correct"] = bool(np.array_equal(got, want))
  return res

def bench_amd(kernels: int = 50, reps: int = 200, arch: str = "gfx1100") -> dict:
  """The AMD backend's host cost on the mock KFD (see the module docstring)."""
  from hcqrt import syscalls
  from hcqrt.mock.amd import install_mock_amd, set_executor
  from hcqrt.amd.device import AMDDevice
  from hcqrt.interface import GraphExec
  from ioctl_defs.amd import pm4
  from hw_tests import kernels_amd as KA
  drv = install_mock_amd(arch)
  try:
    dev = AMDDevice("AMD")
    prog = dev.program("add", KA.compile_ir(KA.source("add"), dev.arch))
    n = 64
    bufs = [dev.allocator.alloc(4 * n) for _ in range(4)]
    launch = dict(global_size=(1, 1, 1), local_size=(n, 1, 1))
    res: dict = {"device": f"AMD {dev.arch} (mock KFD {dev.kfd_version[0]}.{dev.kfd_version[1]}, RDNA3 emulator)", "kernels_per_graph": kernels}
    res["launch_us"] = host_us_idle(dev, lambda: prog(bufs[0], bufs[1], bufs[2], vals=(1, n), **launch), reps)
    # an eager launch that waits: the host sleeps in WAIT_EVENTS until the end-of-pipe interrupt; a release that
    # raises none (or one the GPU drops) costs the whole 10 ms WAIT_EVENTS timeout per launch
    t0 = drv.missed_wakeups
    res["eager_sync_us"] = host_us(dev, drv, lambda: prog(bufs[0], bufs[1], bufs[2], vals=(1, n), wait=True, **launch), max(reps // 4, 10))
    res["missed_wakeups_per_sync"] = (drv.missed_wakeups - t0) / max(reps // 4, 10)
    def build():
      a = prog.fill_kernargs([bufs[0], bufs[1], bufs[2]], (1, n))
      dev.hw_compute_queue().wait(dev.timeline_signal, dev.timeline_value - 1).exec(prog, a, launch["global_size"], launch["local_size"]) \
         .signal(dev.timeline_signal, dev.timeline_value)
    res["build_only_us"] = host_us(dev, drv, build, reps)
    items = [GraphExec(prog, [bufs[(i + 2) % 4], bufs[i % 4], bufs[(i + 1) % 4]], [1, n], launch["global_size"], launch["local_size"])
             for i in range(kernels)]
    g = dev.graph(items)
    g.replay(); dev.synchronize()
    flip = [0]
    def replay():
      flip[0] ^= 1
      g.replay(bufs={(0, 1): bufs[flip[0]], (0, 2): bufs[1 - flip[0]]})
    res["graph_per_kernel_us"] = host_us_idle(dev, replay, max(reps // 4, 10), per=kernels)
    prev = set_executor(lambda d, vm: None)   # host path alone: the CP still parses every packet, no shader runs
    try: res["graph_host_path_per_kernel_us"] = host_us_idle(dev, replay, max(reps // 4, 10), per=kernels)
    finally: set_executor(prev)
    flush = pm4.event_write(pm4.CS_PARTIAL_FLUSH, pm4.EVENT_INDEX_CS_PARTIAL_FLUSH)
    q = g.compute.q
    res["barriers_per_graph"] = sum(q[i:i + len(flush)] == flush for i in range(len(q)))
    res["graph_vs_launch"] = res["graph_per_kernel_us"] / res["launch_us"]
    return res
  finally: syscalls.uninstall(drv)

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--kernels", type=int, default=None, help="launches in the replayed graph (50; --barrier-cost: 200)")
  ap.add_argument("--reps", type=int, default=None, help="repetitions (200; --barrier-cost: 20)")
  ap.add_argument("--arch", default="hopper", help="NV mock GPU: hopper, ada, ampere, blackwell, blackwell_b")
  ap.add_argument("--amd-arch", default="gfx1100", help="AMD mock GPU (only gfx1100 code is emulated)")
  ap.add_argument("--device", default="all", choices=["NV", "AMD", "all"])
  ap.add_argument("--json", action="store_true")
  ap.add_argument("--barrier-cost", action="store_true", help="NV: what the per-kernel WAIT_FOR_IDLE costs (see above)")
  ap.add_argument("--real", action="store_true", help="with --barrier-cost: the machine's GPU, not the mock")
  a = ap.parse_args()
  if a.barrier_cost: return barrier_main(a)
  a.kernels, a.reps = a.kernels or 50, a.reps or 200
  out: dict = {}
  if a.device in ("NV", "all"):
    r = bench(a.kernels, a.reps, a.arch)
    r["ok"] = r["graph_vs_launch"] < 0.1 and r["graph_host_path_per_kernel_us"] <= 1.0 and r["barriers_per_graph"] >= r["kernels_per_graph"] - 1
    out["NV"] = r
  if a.device in ("AMD", "all"):
    from hw_tests.kernels_amd import INSTALL, have_llvmlite
    if have_llvmlite():
      r = bench_amd(a.kernels, a.reps, a.amd_arch)
      r["ok"] = r["graph_vs_launch"] < 0.1 and r["barriers_per_graph"] >= r["kernels_per_graph"] - 1 and r["missed_wakeups_per_sync"] == 0
      out["AMD"] = r
    else: out["AMD"] = {"skipped": f"llvmlite missing: {INSTALL}", "ok": True}
  ok = all(r["ok"] for r in out.values())
  if a.json: print(json.dumps({**out, "ok": ok}, indent=1)); return 0 if ok else 1
  for name, r in out.items():
    if "skipped" in r: print(f"{name}: skipped ({r['skipped']})"); continue
    print(f"HCQ host cost on {r['device']}")
    print(f"  launch (build queue + submit)     {r['launch_us']:8.1f} µs")
    print(f"  build only (no submit)            {r['build_only_us']:8.1f} µs")
    if "eager_sync_us" in r:
      print(f"  eager launch + synchronize        {r['eager_sync_us']:8.1f} µs   ({r['missed_wakeups_per_sync']:.2f} 10 ms WAIT_EVENTS sleeps without interrupt per sync: must be 0)")
    print(f"  graph replay, per kernel          {r['graph_per_kernel_us']:8.2f} µs   ({r['kernels_per_graph']} kernels, {r['barriers_per_graph']} barriers)")
    print(f"  graph replay host path, per kernel{r['graph_host_path_per_kernel_us']:8.2f} µs   (host alone, no shader run{'; must be <= 1 µs' if name == 'NV' else ''})")
    if "jit_per_kernel_us" in r:
      print(f"  TinyJit replay, per kernel        {r['jit_per_kernel_us']:8.2f} µs   ({r['jit_kernels']} kernels, frontend included)")
    print(f"  graph / launch                    {r['graph_vs_launch']:8.3f}    (must be < 0.1: {'ok' if r['ok'] else 'FAILED'})")
  if len([r for r in out.values() if "launch_us" in r]) == 2:
    nv, amd = out["NV"], out["AMD"]
    print(f"{'per kernel, µs':34s}{'NV':>10s}{'AMD':>10s}")
    for k in ("launch_us", "build_only_us", "graph_per_kernel_us", "graph_host_path_per_kernel_us"):
      print(f"  {k:32s}{nv[k]:10.2f}{amd[k]:10.2f}")
  return 0 if ok else 1

def barrier_main(a) -> int:
  from hcqrt import syscalls
  from hcqrt.nv.device import NVDevice
  drv = None
  if not a.real:
    from hcqrt.mock.nv import MockNV
    drv = syscalls.install(MockNV(arch=a.arch))
  try:
    r = barrier_cost(NVDevice("NV"), a.kernels or 200, a.reps or 20)
  finally:
    if drv is not None: syscalls.uninstall(drv)
  r["mock"] = drv is not None
  if a.json: print(json.dumps(r, indent=1))
  else:
    print(f"WAIT_FOR_IDLE cost on {r['device']}{' (mock: emulator time, not a GPU)' if r['mock'] else ''}, {r['kernels']} kernels, best of {r['reps']}")
    print(f"  independent, WAIT_FOR_IDLE between  {r['indep_wfi_us']:9.2f} µs/kernel")
    print(f"  independent, no barrier             {r['indep_no_wfi_us']:9.2f} µs/kernel")
    print(f"  dependent chain                     {r['chain_us']:9.2f} µs/kernel")
    print(f"  one WAIT_FOR_IDLE boundary          {r['wfi_cost_us']:9.2f} µs   results {'correct' if r['correct'] else 'WRONG'}")
    print(f"  (GPU timestamps; host wall time: {r['indep_wfi_host_us']:.2f} / {r['indep_no_wfi_host_us']:.2f} / {r['chain_host_us']:.2f} µs/kernel)")
  return 0 if r["correct"] else 1

if __name__ == "__main__": sys.exit(main())
