"""LLVM IR kernels of the conformance suite for AMD GPUs (hand-written, the same computations as the PTX in
kernels.py), compiled in-process with llvmlite to an amdgcn code object for the device's gfx target.

Workgroup counts and sizes come from the code object v5 implicit arguments (llvm.amdgcn.implicitarg.ptr: block
counts at +0/+4/+8, group sizes at +12/+14/+16), which the runtime fills per launch."""
from __future__ import annotations

DECL = """
declare i32 @llvm.amdgcn.workgroup.id.x()
declare i32 @llvm.amdgcn.workgroup.id.y()
declare i32 @llvm.amdgcn.workgroup.id.z()
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workitem.id.y()
declare i32 @llvm.amdgcn.workitem.id.z()
declare void @llvm.amdgcn.s.barrier()
declare ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
"""

def _implicit(*fields: tuple[str, int, str]) -> str:
  """Load implicit arguments: (name, byte offset, i32|i16) -> %name as i32."""
  out = ["  %ia = call ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()"]
  for name, off, ty in fields:
    out.append(f"  %{name}.p = getelementptr i8, ptr addrspace(4) %ia, i64 {off}")
    if ty == "i32": out.append(f"  %{name} = load i32, ptr addrspace(4) %{name}.p, align 4")
    else: out += [f"  %{name}.h = load i16, ptr addrspace(4) %{name}.p, align 2", f"  %{name} = zext i16 %{name}.h to i32"]
  return "\n".join(out)

# out[g] = g for the linear global thread id of a 3-D grid of 3-D blocks
IDX3 = f"""define amdgpu_kernel void @idx3(ptr addrspace(1) noalias %out) {{
{_implicit(("nx", 0, "i32"), ("ny", 4, "i32"), ("bx", 12, "i16"), ("by", 14, "i16"), ("bz", 16, "i16"))}
  %gx = call i32 @llvm.amdgcn.workgroup.id.x()
  %gy = call i32 @llvm.amdgcn.workgroup.id.y()
  %gz = call i32 @llvm.amdgcn.workgroup.id.z()
  %tx = call i32 @llvm.amdgcn.workitem.id.x()
  %ty = call i32 @llvm.amdgcn.workitem.id.y()
  %tz = call i32 @llvm.amdgcn.workitem.id.z()
  %b0 = mul i32 %gz, %ny
  %b1 = add i32 %b0, %gy
  %b2 = mul i32 %b1, %nx
  %blk = add i32 %b2, %gx
  %s0 = mul i32 %bx, %by
  %bsz = mul i32 %s0, %bz
  %t0 = mul i32 %tz, %by
  %t1 = add i32 %t0, %ty
  %t2 = mul i32 %t1, %bx
  %tid = add i32 %t2, %tx
  %g0 = mul i32 %blk, %bsz
  %g = add i32 %g0, %tid
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %g
  store i32 %g, ptr addrspace(1) %p
  ret void
}}"""

# out[i] = a[i] + k * b[i] for i < n
ADD = f"""define amdgpu_kernel void @add(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b, i32 %k, i32 %n) {{
entry:
{_implicit(("bx", 12, "i16"))}
  %gx = call i32 @llvm.amdgcn.workgroup.id.x()
  %tx = call i32 @llvm.amdgcn.workitem.id.x()
  %i0 = mul i32 %gx, %bx
  %i = add i32 %i0, %tx
  %in = icmp ult i32 %i, %n
  br i1 %in, label %body, label %done
body:
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %pb = getelementptr float, ptr addrspace(1) %b, i32 %i
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %y = load float, ptr addrspace(1) %pb
  %kf = uitofp i32 %k to float
  %z = call float @llvm.fma.f32(float %y, float %kf, float %x)
  store float %z, ptr addrspace(1) %po
  br label %done
done:
  ret void
}}
declare float @llvm.fma.f32(float, float, float)"""

# out[0] += 1 (one thread): back-to-back launches must each see the previous one's store
INC = """define amdgpu_kernel void @inc(ptr addrspace(1) %out) {
  %x = load volatile i32, ptr addrspace(1) %out
  %y = add i32 %x, 1
  store volatile i32 %y, ptr addrspace(1) %out
  ret void
}"""

# out[blockbase + t] = in[blockbase + ntid-1-t] through LDS and a barrier
REV = f"""@sh = internal addrspace(3) global [1024 x float] undef, align 4
define amdgpu_kernel void @rev(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %inp) {{
{_implicit(("bx", 12, "i16"))}
  %gx = call i32 @llvm.amdgcn.workgroup.id.x()
  %tx = call i32 @llvm.amdgcn.workitem.id.x()
  %i0 = mul i32 %gx, %bx
  %i = add i32 %i0, %tx
  %pi = getelementptr float, ptr addrspace(1) %inp, i32 %i
  %x = load float, ptr addrspace(1) %pi
  %ps = getelementptr [1024 x float], ptr addrspace(3) @sh, i32 0, i32 %tx
  store float %x, ptr addrspace(3) %ps
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %r0 = sub i32 %bx, %tx
  %r = sub i32 %r0, 1
  %pr = getelementptr [1024 x float], ptr addrspace(3) @sh, i32 0, i32 %r
  %y = load float, ptr addrspace(3) %pr
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %y, ptr addrspace(1) %po
  ret void
}}"""

def many(nin: int) -> str:
  """out[i] = sum_j in_j[i] + k: 1 + nin pointer arguments and one int."""
  params = ", ".join(["ptr addrspace(1) noalias %out"] + [f"ptr addrspace(1) noalias %in{j}" for j in range(nin)] + ["i32 %k"])
  body = ["%tx = call i32 @llvm.amdgcn.workitem.id.x()", "%acc0 = uitofp i32 %k to float"]
  for j in range(nin):
    body += [f"%p{j} = getelementptr float, ptr addrspace(1) %in{j}, i32 %tx", f"%x{j} = load float, ptr addrspace(1) %p{j}",
             f"%acc{j + 1} = fadd float %acc{j}, %x{j}"]
  body += ["%po = getelementptr float, ptr addrspace(1) %out, i32 %tx", f"store float %acc{nin}, ptr addrspace(1) %po", "ret void"]
  return f"define amdgpu_kernel void @many({params}) {{\n  " + "\n  ".join(body) + "\n}"

def stack(keep: int = 20) -> str:
  """kernels.stack in LLVM IR: a 64-float stack array indexed at run time (it lives in scratch) and `keep` values
  loaded before two loops and used after them, which a 12-VGPR budget ("amdgpu-num-vgpr") makes LLVM spill to scratch
  (LLVM 22: about 100 VGPR spills, a 600-byte private segment on gfx1100 and gfx942). Same result as kernels.stack:
  for i < n, out[i] = sum_j in[(i+j)%n]*(j+1) (j < 64) + sum_k in[(i+3k)%n]*(k+1) (k < keep)."""
  pre = []
  for k in range(keep):
    pre += [f"  %pa{k} = add i32 %i, {3 * k}", f"  %pm{k} = urem i32 %pa{k}, %n", f"  %pp{k} = getelementptr float, ptr addrspace(1) %inp, i32 %pm{k}",
            f"  %w{k} = load volatile float, ptr addrspace(1) %pp{k}"]
  post, acc = [], "%tot"
  for k in range(keep):
    post.append(f"  %q{k} = call float @llvm.fma.f32(float %w{k}, float {float(k + 1)!r}, float {acc})"); acc = f"%q{k}"
  pre_s, post_s = "\n".join(pre), "\n".join(post)
  return f"""define amdgpu_kernel void @stack(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %inp, i32 %n) #0 {{
entry:
  %arr = alloca [64 x float], align 4, addrspace(5)
  %ia = call ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
  %bxp = getelementptr i8, ptr addrspace(4) %ia, i64 12
  %bxh = load i16, ptr addrspace(4) %bxp, align 2
  %bx = zext i16 %bxh to i32
  %gx = call i32 @llvm.amdgcn.workgroup.id.x()
  %tx = call i32 @llvm.amdgcn.workitem.id.x()
  %i0 = mul i32 %gx, %bx
  %i = add i32 %i0, %tx
  %in = icmp ult i32 %i, %n
  br i1 %in, label %body, label %done
body:
{pre_s}
  br label %fill
fill:
  %j = phi i32 [ 0, %body ], [ %j1, %fill ]
  %fa = add i32 %i, %j
  %fm = urem i32 %fa, %n
  %fp = getelementptr float, ptr addrspace(1) %inp, i32 %fm
  %fx = load float, ptr addrspace(1) %fp
  %j1 = add i32 %j, 1
  %jf = uitofp i32 %j1 to float
  %fv = fmul float %fx, %jf
  %ap = getelementptr [64 x float], ptr addrspace(5) %arr, i32 0, i32 %j
  store volatile float %fv, ptr addrspace(5) %ap
  %fc = icmp ult i32 %j1, 64
  br i1 %fc, label %fill, label %sum
sum:
  %k = phi i32 [ 0, %fill ], [ %k1, %sum ]
  %s = phi float [ 0.0, %fill ], [ %s1, %sum ]
  %k7 = mul i32 %k, 7
  %ki = add i32 %k7, %i
  %km = and i32 %ki, 63
  %sp = getelementptr [64 x float], ptr addrspace(5) %arr, i32 0, i32 %km
  %sx = load volatile float, ptr addrspace(5) %sp
  %s1 = fadd float %s, %sx
  %k1 = add i32 %k, 1
  %kc = icmp ult i32 %k1, 64
  br i1 %kc, label %sum, label %post
post:
  %tot = fadd float %s1, 0.0
{post_s}
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float {acc}, ptr addrspace(1) %po
  br label %done
done:
  ret void
}}
declare float @llvm.fma.f32(float, float, float)
attributes #0 = {{ "amdgpu-num-vgpr"="12" }}"""

SOURCES = {"idx3": lambda: IDX3, "add": lambda: ADD, "inc": lambda: INC, "rev": lambda: REV, "many": many, "stack": stack}

def have_llvmlite() -> bool:
  import importlib.util
  return importlib.util.find_spec("llvmlite") is not None

INSTALL = "pip install llvmlite   (the AMD kernels of hw_tests are LLVM IR compiled in-process)"

def compile_ir(src: str, arch: str) -> bytes:
  """LLVM IR -> relocatable amdgcn ELF object for `arch` (gfx1100: wave32; gfx942: wave64), through the compiler's
  in-process llvmlite assembler (cached on disk)."""
  if not have_llvmlite(): raise ImportError(f"hw_tests on AMD needs llvmlite: {INSTALL}")
  from compiler.assemble.llvm import compile_llvm
  return compile_llvm(src + DECL, "hw_tests", arch)

def source(name: str, *args) -> str:
  if name not in SOURCES: raise KeyError(f"hw_tests: kernel {name!r} has no AMD (LLVM IR) version")
  return SOURCES[name](*args)
