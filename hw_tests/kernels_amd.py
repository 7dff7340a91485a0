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

SOURCES = {"idx3": lambda: IDX3, "add": lambda: ADD, "inc": lambda: INC, "rev": lambda: REV, "many": many}

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
