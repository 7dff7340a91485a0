"""The first kernel of a big `x.sum()` (compiler/opt/heuristic.py stream_prefetch) built three ways, taking turns in one
process through the CPU runner: its stream hints stripped, hinted into L1 (PREFETCHT0) and into L2 (PREFETCHT1, the
default since sm39). Each launch is cut into the kernel's own chunks; a wrapper stamps every chunk's start and end
(TSC), so besides the launch's wall time each chunk's own time is reported. On a shared host the walls swing with the
other processes; the chunks' low percentiles are what compares (the host's load is printed). Times in ms.

  CPU_ISA=x86-64-v3 python bench/stream_prefetch_ab.py [--n 67108864] [--reps 40]
"""
from __future__ import annotations
import argparse, os, pathlib, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import numpy as np
from compiler.assemble.c_compiler import compile_c
from compiler.lazy import SPLIT_ROW_ALIGN
from compiler.linearize import linearize
from compiler.lower import lower
from compiler.opt.apply import copy_kernel
from compiler.opt.heuristic import optimize
from compiler.prefetch import prefetch_bytes, prefetch_into
from compiler.render_c import render_c
from compiler.schedule import create_schedule
from compiler.uop import Ops, substitute
from frontend import Tensor
from frontend.devices import open_device, target_of
from hcqrt.cpu.device import CPUProgram

# chunk `core` of the kernel, stamped: rec[3 * core ...] = TSC at start, at end, the CPU it ran on
WRAP = """
void stamped(float *restrict out, const float *restrict x, long long *restrict rec, int core) {
  unsigned cpu; long long t0 = __builtin_ia32_rdtscp(&cpu);
  NAME(out, x, core);
  long long t1 = __builtin_ia32_rdtscp(&cpu);
  rec[3 * core] = t0; rec[3 * core + 1] = t1; rec[3 * core + 2] = cpu & 0xfff;
}"""

def variants(n: int):
  """(name, C source, chunks) of the sum's first kernel: hints stripped, into L1, into L2; and the partial sums' count."""
  x = Tensor(np.zeros(n, np.float32))
  si = next(s for s in create_schedule([x.sum().lazydata]) if s.kind == "kernel")
  t = target_of("CPU").replace(l2_prefetch=True)   # (hinted whatever this CPU's default: the A/B builds all three)
  k = optimize(lower(si.ast), t)
  if not any(prefetch_bytes(u) for u in k.sink.toposort() if u.op is Ops.LOAD): sys.exit(f"{si.name}: no stream hints here (n too small?)")
  out = []
  for name, sink in (("no hint", substitute(k.sink, {u: u.replace(arg=None) for u in k.sink.toposort() if prefetch_bytes(u)})),
                     ("into L1", prefetch_into(k.sink, 1)), ("into L2", prefetch_into(k.sink, 2))):
    kc = copy_kernel(k); kc.sink = sink
    out.append((name, render_c(kc, kc.chunks, linearize(kc)) + WRAP.replace("NAME", kc.name), kc.chunks))
  return out, si.outputs[0].size

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--n", type=int, default=64 << 20)
  ap.add_argument("--reps", type=int, default=40)
  args = ap.parse_args()
  dev = open_device("CPU")
  flags = list(dev.cc_flags)
  tsc = CPUProgram("tsc", compile_c("void tsc(long long *o, int core) { o[0] = __builtin_ia32_rdtsc(); }", "tsc", flags))
  cell = dev.allocator.alloc(8)
  def read_tsc() -> int:
    tsc(cell); return int(np.frombuffer(cell.view(), np.int64)[0])
  t0, c0 = time.perf_counter(), read_tsc(); time.sleep(0.05)   # (the TSC's rate)
  per_ms = (read_tsc() - c0) / ((time.perf_counter() - t0) * 1e3)
  xn = np.random.default_rng(0).random(args.n, dtype=np.float32)
  x = Tensor(xn).realize(); x.sum().realize()   # (the runner installed)
  xb = x.lazydata.buffer.raw
  vs, d = variants(args.n)
  m = d * (args.n // d // SPLIT_ROW_ALIGN * SPLIT_ROW_ALIGN)   # (the elements the first kernel reads: compiler/lazy.py)
  want = float(xn[:m].astype(np.float64).sum())
  built = [(name, CPUProgram("stamped", compile_c(src, f"stamped_{i}", flags)), chunks) for i, (name, src, chunks) in enumerate(vs)]
  outb, rec = dev.allocator.alloc(4 * 65536), dev.allocator.alloc(8 * 3 * 4096)
  walls: dict[str, list[float]] = {b[0]: [] for b in built}
  chunks: dict[str, list[float]] = {b[0]: [] for b in built}
  for r in range(args.reps):
    for name, prog, nch in (built if r % 2 else built[::-1]):
      time.sleep(0.002)
      walls[name].append(prog(outb, xb, rec, threads=nch) * 1e3)
      st = np.frombuffer(rec.view(), np.int64)[:3 * nch].reshape(nch, 3)
      chunks[name] += ((st[:, 1] - st[:, 0]) / per_ms).tolist()
  got = float(np.frombuffer(outb.view(), np.float32)[:d].astype(np.float64).sum())
  print(f"sum of {args.n} floats, first kernel, CPU_ISA={os.environ.get('CPU_ISA', 'native')}, {built[0][2]} chunks, {args.reps} launches each, "
        f"load {os.getloadavg()[0]:.2f}; partial sums {'ok' if abs(got - want) <= 1e-4 * want else f'WRONG {got} vs {want}'}")
  for name in walls:
    w, c = np.array(walls[name]), np.array(chunks[name])
    print(f"  {name:8s} wall min {w.min():6.2f} median {np.median(w):6.2f} | chunk min {c.min():.3f} p10 {np.percentile(c, 10):.3f} "
          f"median {np.median(c):.3f}")

if __name__ == "__main__": main()
