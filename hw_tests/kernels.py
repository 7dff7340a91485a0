"""PTX kernels of the conformance suite (hand-written, assembled for the device's arch by NVIDIA's assembler)."""
from __future__ import annotations

def head(arch: str) -> str:
  """The module head for `arch`: the oldest PTX ISA that knows it, as the frontend's renderer emits (7.8 for sm_80..sm_90:
  nvJitLink 12.4, which PyTorch's CUDA 12 wheels bring, rejects `.version` 8.5 and later).

  >>> head("sm_90").splitlines()[0], head("sm_120").splitlines()[0]
  ('.version 7.8', '.version 8.7')
  """
  from compiler.render_ptx import PTX_ISA
  version = max(PTX_ISA.get(arch, "7.8"), "7.8", key=lambda v: tuple(map(int, v.split("."))))
  return f".version {version}\n.target {arch}\n.address_size 64\n"

# out[g] = g for the linear global thread id of a 3-D grid of 3-D blocks
IDX3 = """.visible .entry idx3(.param .u64 out)
{
  .reg .b32 %r<20>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ctaid.y; mov.u32 %r3, %ctaid.z;
  mov.u32 %r4, %nctaid.x; mov.u32 %r5, %nctaid.y;
  mov.u32 %r6, %tid.x; mov.u32 %r7, %tid.y; mov.u32 %r8, %tid.z;
  mov.u32 %r9, %ntid.x; mov.u32 %r10, %ntid.y; mov.u32 %r11, %ntid.z;
  mad.lo.u32 %r12, %r3, %r5, %r2; mad.lo.u32 %r12, %r12, %r4, %r1;
  mul.lo.u32 %r13, %r9, %r10; mul.lo.u32 %r13, %r13, %r11;
  mad.lo.u32 %r14, %r8, %r10, %r7; mad.lo.u32 %r14, %r14, %r9, %r6;
  mad.lo.u32 %r15, %r12, %r13, %r14;
  mul.wide.u32 %rd2, %r15, 4; add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r15;
  ret;
}"""

# out[i] = a[i] + k * b[i] for i < n
ADD = """.visible .entry add(.param .u64 out, .param .u64 a, .param .u64 b, .param .u32 k, .param .u32 n)
{
  .reg .pred %p<2>; .reg .b32 %r<8>; .reg .f32 %f<6>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [a]; ld.param.u64 %rd3, [b]; ld.param.u32 %r6, [k]; ld.param.u32 %r5, [n];
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;
  setp.ge.u32 %p1, %r4, %r5; @%p1 bra DONE;
  mul.wide.u32 %rd4, %r4, 4; add.s64 %rd5, %rd2, %rd4; add.s64 %rd6, %rd3, %rd4; add.s64 %rd7, %rd1, %rd4;
  ld.global.f32 %f1, [%rd5]; ld.global.f32 %f2, [%rd6]; cvt.rn.f32.u32 %f4, %r6; fma.rn.f32 %f3, %f2, %f4, %f1;
  st.global.f32 [%rd7], %f3;
DONE:
  ret;
}"""

# out[0] += 1 (one thread): back-to-back launches must each see the previous one's store
INC = """.visible .entry inc(.param .u64 out)
{
  .reg .b32 %r<3>; .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out]; ld.global.u32 %r1, [%rd1]; add.u32 %r2, %r1, 1; st.global.u32 [%rd1], %r2;
  ret;
}"""

# out[0] = v (one thread): the kernel's whole result is the parameter it read from constant bank 0
SETV = """.visible .entry setv(.param .u64 out, .param .u32 v)
{
  .reg .b32 %r<2>; .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out]; ld.param.u32 %r1, [v];
  st.global.u32 [%rd1], %r1;
  ret;
}"""

# out[blockbase + t] = in[blockbase + ntid-1-t] through shared memory and a barrier
REV = """.visible .entry rev(.param .u64 out, .param .u64 inp)
{
  .reg .b32 %r<10>; .reg .f32 %f<2>; .reg .b64 %rd<8>;
  .shared .align 4 .f32 sh[1024];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [inp];
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.u32 %r4, %r1, %r2, %r3;
  mul.wide.u32 %rd3, %r4, 4; add.s64 %rd4, %rd2, %rd3; ld.global.f32 %f1, [%rd4];
  mov.u32 %r5, sh; shl.b32 %r6, %r3, 2; add.u32 %r7, %r5, %r6; st.shared.f32 [%r7], %f1;
  bar.sync 0;
  sub.u32 %r8, %r2, %r3; sub.u32 %r8, %r8, 1; shl.b32 %r8, %r8, 2; add.u32 %r9, %r5, %r8; ld.shared.f32 %f1, [%r9];
  add.s64 %rd5, %rd1, %rd3; st.global.f32 [%rd5], %f1;
  ret;
}"""

def many(nin: int) -> str:
  """out[i] = sum_j in_j[i] + k: 1 + nin pointer arguments and one int."""
  params = ", ".join([".param .u64 out"] + [f".param .u64 in{j}" for j in range(nin)] + [".param .u32 k"])
  body = ["ld.param.u64 %rd1, [out];", "ld.param.u32 %r1, [k];", "cvt.rn.f32.u32 %f1, %r1;", "mov.u32 %r2, %tid.x;", "mul.wide.u32 %rd2, %r2, 4;"]
  for j in range(nin):
    body += [f"ld.param.u64 %rd3, [in{j}];", "add.s64 %rd3, %rd3, %rd2;", "ld.global.f32 %f2, [%rd3];", "add.f32 %f1, %f1, %f2;"]
  body += ["add.s64 %rd1, %rd1, %rd2;", "st.global.f32 [%rd1], %f1;", "ret;"]
  return f".visible .entry many({params})\n{{\n  .reg .b32 %r<4>; .reg .f32 %f<4>; .reg .b64 %rd<4>;\n  " + "\n  ".join(body) + "\n}"

def stack(keep: int = 20) -> str:
  """A kernel with a stack: a 64-float local array indexed at run time, and `keep` values loaded before two loops and
  used after them, which `.maxnreg 24` forces ptxas to spill (sm_90: 296-byte frame, 40 bytes of spills).
  For i < n: out[i] = sum_j in[(i+j)%n]*(j+1) (j < 64) + sum_k in[(i+3k)%n]*(k+1) (k < keep)."""
  pre = [f"add.u32 %r10, %r5, {3 * k}; rem.u32 %r10, %r10, %r1; mul.wide.u32 %rd10, %r10, 4; add.s64 %rd10, %rd2, %rd10; "
         f"ld.global.f32 %w{k}, [%rd10];" for k in range(keep)]
  post = [f"cvt.rn.f32.u32 %f5, {k + 1}; fma.rn.f32 %f3, %w{k}, %f5, %f3;" for k in range(keep)]
  return f""".visible .entry stack(.param .u64 out, .param .u64 inp, .param .u32 n)
.maxnreg 24
{{
  .local .align 4 .b8 arr[256];
  .reg .pred %p<4>; .reg .b32 %r<12>; .reg .f32 %f<8>; .reg .b64 %rd<12>; .reg .f32 %w<{keep}>;
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [inp]; ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x; mad.lo.u32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1; @%p1 bra DONE;
  {chr(10).join('  ' + x for x in pre).strip()}
  mov.u64 %rd3, arr; mov.u32 %r6, 0;
FILL:
  add.u32 %r7, %r5, %r6; rem.u32 %r7, %r7, %r1;
  mul.wide.u32 %rd4, %r7, 4; add.s64 %rd5, %rd2, %rd4; ld.global.f32 %f1, [%rd5];
  add.u32 %r8, %r6, 1; cvt.rn.f32.u32 %f2, %r8; mul.f32 %f1, %f1, %f2;
  mul.wide.u32 %rd6, %r6, 4; add.s64 %rd7, %rd3, %rd6; st.local.f32 [%rd7], %f1;
  add.u32 %r6, %r6, 1; setp.lt.u32 %p2, %r6, 64; @%p2 bra FILL;
  mov.f32 %f3, 0f00000000; mov.u32 %r6, 0;
SUM:
  mad.lo.u32 %r9, %r6, 7, %r5; and.b32 %r9, %r9, 63;
  mul.wide.u32 %rd6, %r9, 4; add.s64 %rd7, %rd3, %rd6; ld.local.f32 %f4, [%rd7]; add.f32 %f3, %f3, %f4;
  add.u32 %r6, %r6, 1; setp.lt.u32 %p2, %r6, 64; @%p2 bra SUM;
  {chr(10).join('  ' + x for x in post).strip()}
  mul.wide.u32 %rd8, %r5, 4; add.s64 %rd9, %rd1, %rd8; st.global.f32 [%rd9], %f3;
DONE:
  ret;
}}"""

def stack_reference(x, keep: int = 20):
  """numpy oracle of `stack` (float64)."""
  import numpy as np
  n, i = len(x), np.arange(len(x))
  x = x.astype(np.float64)
  return sum(x[(i + j) % n] * (j + 1) for j in range(64)) + sum(x[(i + 3 * k) % n] * (k + 1) for k in range(keep))

SOURCES = {"idx3": lambda: IDX3, "add": lambda: ADD, "inc": lambda: INC, "rev": lambda: REV, "many": many, "stack": stack}

def source(name: str, *args) -> str:
  """The PTX of suite kernel `name` (without the .version/.target head)."""
  return SOURCES[name](*args)
