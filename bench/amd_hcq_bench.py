"""CPU-side cost of HCQ submission on the AMD backend, measured on the mock KFD (µs of host time per kernel).

  launch      build a fresh PM4 compute queue (timeline wait, kernargs, SET_SH_REGs, DISPATCH_DIRECT, barrier,
              RELEASE_MEMs) and submit it
  graph/kern  replay of a prebuilt graph of N launches (one INDIRECT_BUFFER) with one pointer patched, divided by N

The mock runs its command processor inside the doorbell write; that time (MockKFD.busy_ns) is subtracted. Kernels
run through a no-op executor (the RDNA3 emulator is not plugged in here), so this is the host path only.

  python bench/amd_hcq_bench.py [--kernels 50] [--reps 200] [--arch gfx1100]
"""
from __future__ import annotations
import argparse, os, statistics, struct, sys, time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def main() -> int:
  ap = argparse.ArgumentParser()
  ap.add_argument("--kernels", type=int, default=50)
  ap.add_argument("--reps", type=int, default=200)
  ap.add_argument("--arch", default="gfx1100")
  a = ap.parse_args()
  from hcqrt.mock.amd import install_mock_amd, set_executor
  from hcqrt.amd.device import AMDDevice, AMDProgram
  drv = install_mock_amd(a.arch)
  set_executor(lambda d, vm: None)
  dev = AMDDevice("AMD")
  props = (1 << 3) | ((1 << 10) if dev.gfx.wave32 else 0)
  desc = struct.pack("<III4xq20xIIIHH4x", 0, 0, 24, 0, 0, 0, 2 << 1 | 1 << 7, props, 0)
  prog = AMDProgram(dev, "k", b"\x00\x00\x80\xbf" * 16, desc, [(0, 8), (8, 8), (16, 8)])
  bufs = [dev.allocator.alloc(4096) for _ in range(3)]

  def host_us(fn, reps: int, per: int = 1) -> float:
    out = []
    for _ in range(reps):
      b0, t0 = drv.busy_ns, time.perf_counter_ns()
      fn()
      out.append((time.perf_counter_ns() - t0 - (drv.busy_ns - b0)) / 1e3 / per)
    return statistics.median(out)

  launch = host_us(lambda: prog(*bufs, global_size=(4, 1, 1), local_size=(dev.wave_size, 1, 1)), a.reps)
  dev.synchronize()
  g = dev.graph([("exec", prog, bufs, [], (4, 1, 1), (dev.wave_size, 1, 1)) for _ in range(a.kernels)])
  g.replay(); dev.synchronize()
  graph = host_us(lambda: (g.replay(bufs={(0, 0): bufs[1]}), dev.synchronize()), a.reps // 4 or 1, a.kernels)
  print(f"AMD mock ({dev.arch}): launch {launch:.1f} µs/kernel, graph replay {graph:.2f} µs/kernel ({a.kernels} kernels)")
  return 0

if __name__ == "__main__": sys.exit(main())
