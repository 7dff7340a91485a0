"""Time a 1024x1024 elementwise kernel through the whole PTXEMU device path (issue 4 target: under 2 s).

render_ptx -> assemble_ptx (sm_90) -> load_cubin -> PTX interpreter, launched the way the engine launches it.
Prints the compile time (render + assemble + load, cold or from the cubin cache) and the best launch time.

Run: python bench/ptx_roundtrip.py
"""
import sys, time, pathlib
import numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from frontend import Tensor
from frontend.engine import get_kernel, Buffer
from hcqrt.device import Device

def main(runs: int = 3) -> float:
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((1024, 1024), dtype=np.float32), rng.standard_normal((1024, 1024), dtype=np.float32)
  ta, tb = Tensor(a, device="PTXEMU"), Tensor(b, device="PTXEMU")
  out = (ta * tb + ta).relu()
  si = out.schedule()[-1]
  t0 = time.perf_counter(); ck = get_kernel(si, "PTXEMU"); compile_s = time.perf_counter() - t0
  buf = Buffer("PTXEMU", 1024 * 1024 * 4)
  best = float("inf")
  for _ in range(runs):
    t0 = time.perf_counter()
    ck.program(buf.raw, *[x.buffer.raw for x in si.inputs], **ck.launch.kwargs(), wait=True)
    best = min(best, time.perf_counter() - t0)
  res = np.empty((1024, 1024), np.float32)
  Device["PTXEMU"].allocator.copyout(memoryview(res).cast("B"), buf.raw)
  ref = np.maximum(a * b + a, 0)
  assert np.allclose(res, ref, rtol=1e-6, atol=1e-6), "wrong result"
  print(f"PTXEMU round trip: 1024x1024 f32 relu(a*b+a) kernel {ck.name} grid {ck.launch['global_size']} block {ck.launch['local_size']}: "
        f"{best:.3f} s best of {runs} (render+assemble+load {compile_s * 1e3:.0f} ms)")
  return best

if __name__ == "__main__": main()
