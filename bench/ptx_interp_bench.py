"""Time the PTX interpreter on a 1024x1024 float32 elementwise kernel (issue 4 target: under 2 s).

Run: python bench/ptx_interp_bench.py   (prints the best of a few runs and checks the result)
"""
import struct, sys, time, pathlib
import numpy as np
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from hcqrt.mock.ptx import PTXModule, AddressSpace

# c[i] = a[i] * b[i] + a[i] (bounds-guarded), as a straightforward compiler emits it
PTX = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry E_1024_1024(.param .u64 out, .param .u64 in0, .param .u64 in1, .param .u32 n)
{
  .reg .pred %p<2>; .reg .b32 %r<6>; .reg .f32 %f<5>; .reg .b64 %rd<11>;
  ld.param.u64 %rd1, [out];
  ld.param.u64 %rd2, [in0];
  ld.param.u64 %rd3, [in1];
  ld.param.u32 %r2, [n];
  mov.u32 %r3, %ctaid.x;
  mov.u32 %r4, %ntid.x;
  mov.u32 %r5, %tid.x;
  mad.lo.s32 %r1, %r3, %r4, %r5;
  setp.ge.s32 %p1, %r1, %r2;
  @%p1 bra $END;
  cvta.to.global.u64 %rd4, %rd2;
  mul.wide.s32 %rd5, %r1, 4;
  add.s64 %rd6, %rd4, %rd5;
  cvta.to.global.u64 %rd7, %rd3;
  add.s64 %rd8, %rd7, %rd5;
  ld.global.f32 %f1, [%rd6];
  ld.global.f32 %f2, [%rd8];
  fma.rn.f32 %f3, %f1, %f2, %f1;
  cvta.to.global.u64 %rd9, %rd1;
  add.s64 %rd10, %rd9, %rd5;
  st.global.f32 [%rd10], %f3;
$END:
  ret;
}
"""

def main(runs: int = 3) -> float:
  n = 1024 * 1024
  rng = np.random.default_rng(0)
  a, b, c = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32), np.zeros(n, np.float32)
  mem = AddressSpace()
  for va, arr in ((0x1000_0000, c), (0x2000_0000, a), (0x3000_0000, b)): mem.map(va, arr.view(np.uint8))
  t0 = time.perf_counter(); mod = PTXModule(PTX); parse = time.perf_counter() - t0
  params = struct.pack("<QQQI", 0x1000_0000, 0x2000_0000, 0x3000_0000, n)
  best = float("inf")
  for _ in range(runs):
    c[:] = 0
    t0 = time.perf_counter()
    mod.launch("E_1024_1024", mem, (n // 256, 1, 1), (256, 1, 1), params)
    best = min(best, time.perf_counter() - t0)
  ref = (a.astype(np.float64) * b + a).astype(np.float32)
  assert np.array_equal(c, ref), "wrong result"
  print(f"ptx interpreter: 1024x1024 f32 elementwise (fma) kernel: {best:.3f} s best of {runs} (parse+decode {parse*1e3:.1f} ms)")
  return best

if __name__ == "__main__": main()
