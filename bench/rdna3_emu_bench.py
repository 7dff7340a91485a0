"""AMD emulator speed: wave-instructions per second on a 1024x1024 float32 elementwise add, for both ISAs.

The kernel is hand-written LLVM IR compiled in-process by llvmlite (needs the `amd` extra) for gfx1100 (run on
hcqrt/mock/amd/rdna3, wave32) and for gfx942 (run on hcqrt/mock/amd/gfx9, wave64), each checked against numpy.

  python bench/rdna3_emu_bench.py [--n 1048576] [--reps 3] [--max-waves 8192] [--arch gfx1100 gfx942] [--xcc 8]

--xcc deals gfx942's workgroups over that many XCCs, each with its own L2 (gfx9/l2.py), as an AQL queue on an MI300X
does; 1 runs without the L2 model.
"""
from __future__ import annotations
import argparse, pathlib, struct, sys, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import numpy as np
from hcqrt.mock.amd.rdna3 import FlatMemory, launch
from hcqrt.mock.amd.rdna3.executor import Waves
from hcqrt.mock.amd.gfx9 import Gfx9Waves
from tests.rdna3_kernels import KERNELS, compile_ir, read_object

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--n", type=int, default=1024 * 1024); ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--max-waves", type=int, default=8192); ap.add_argument("--arch", nargs="+", default=["gfx1100", "gfx942"])
  ap.add_argument("--xcc", type=int, default=8)
  args = ap.parse_args()
  for arch in args.arch: run(arch, args)

ISAS = {"gfx1100": ("-real-true16", Waves), "gfx942": ("", Gfx9Waves)}

def run(arch: str, args) -> None:
  features, waves_cls = ISAS[arch]
  t0 = time.perf_counter(); obj = compile_ir(KERNELS["add_1m"], cpu=arch, features=features); t_compile = time.perf_counter() - t0
  text, entry, _, kd = read_object(obj, "add_1m")
  rng = np.random.default_rng(0); a, b = rng.standard_normal(args.n, np.float32), rng.standard_normal(args.n, np.float32)
  out = np.zeros(args.n, np.float32); ka = np.frombuffer(bytearray(struct.pack("<QQQ", 0x1000_0000, 0x2000_0000, 0x3000_0000)), np.uint8)
  mem = FlatMemory()
  for addr, arr in [(0x1000_0000, out), (0x2000_0000, a), (0x3000_0000, b), (0x4000_0000, ka)]: mem.map(addr, arr.view(np.uint8))
  times = []
  for _ in range(args.reps):
    out[:] = 0; t0 = time.perf_counter()
    st = launch(text, kd, mem, 0x4000_0000, (args.n // 256,), (256,), entry=entry, max_waves=args.max_waves, waves_cls=waves_cls,
                num_xcc=args.xcc if arch == "gfx942" else 1)
    times.append(time.perf_counter() - t0)
  np.testing.assert_array_equal(out, a + b)
  t = sorted(times)[len(times) // 2]
  print(f"{arch} emulator{f' ({args.xcc} XCCs)' if arch == 'gfx942' else ''}: {args.n} float adds, {st.waves} waves, {st.wave_insts} wave-instructions "
        f"({st.wave_insts // st.waves} per wave); compile {t_compile * 1e3:.1f} ms")
  print(f"median {t * 1e3:.1f} ms over {args.reps} runs -> {st.wave_insts / t / 1e6:.2f} M wave-instructions/s "
        f"({st.wave_insts * waves_cls.LANES / t / 1e6:.1f} M lane-instructions/s, {args.n / t / 1e6:.1f} M elements/s)")

if __name__ == "__main__":
  main()
