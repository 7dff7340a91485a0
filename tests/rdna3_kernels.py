"""Hand-written LLVM IR test kernels for the RDNA3 emulator, and an in-process llvmlite -> gfx1100 compile."""
from __future__ import annotations
import importlib.util
import re
import struct
import subprocess

import numpy as np
from functools import cache

DECL = """
declare i32 @llvm.amdgcn.sffbh.i32(i32)
declare i16 @llvm.umax.i16(i16, i16)
declare i16 @llvm.smin.i16(i16, i16)
declare i32 @llvm.amdgcn.workgroup.id.x()
declare i32 @llvm.amdgcn.workgroup.id.y()
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workitem.id.y()
declare void @llvm.amdgcn.s.barrier()
declare float @llvm.fma.f32(float, float, float)
declare float @llvm.exp2.f32(float)
declare float @llvm.log2.f32(float)
declare float @llvm.sqrt.f32(float)
declare float @llvm.fabs.f32(float)
declare float @llvm.amdgcn.rsq.f32(float)
declare float @llvm.maxnum.f32(float, float)
"""
def gid(n=64): return f"""
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %lid = call i32 @llvm.amdgcn.workitem.id.x()
  %base = mul i32 %wg, {n}
  %i = add i32 %base, %lid
"""
KERNELS = {
"add_f32": f"""define amdgpu_kernel void @add_f32(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b) {{
{gid()}
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %pb = getelementptr float, ptr addrspace(1) %b, i32 %i
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %y = load float, ptr addrspace(1) %pb
  %z = fadd float %x, %y
  store float %z, ptr addrspace(1) %po
  ret void
}}""",
"mul_i32": f"""define amdgpu_kernel void @mul_i32(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b) {{
{gid()}
  %pa = getelementptr i32, ptr addrspace(1) %a, i32 %i
  %pb = getelementptr i32, ptr addrspace(1) %b, i32 %i
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  %x = load i32, ptr addrspace(1) %pa
  %y = load i32, ptr addrspace(1) %pb
  %z = mul i32 %x, %y
  %w = sub i32 %z, %x
  %s = ashr i32 %w, 3
  %v = xor i32 %s, %y
  store i32 %v, ptr addrspace(1) %po
  ret void
}}""",
"ids2d": """define amdgpu_kernel void @ids2d(ptr addrspace(1) noalias %out, i32 %W) {
  %gx = call i32 @llvm.amdgcn.workgroup.id.x()
  %gy = call i32 @llvm.amdgcn.workgroup.id.y()
  %tx = call i32 @llvm.amdgcn.workitem.id.x()
  %ty = call i32 @llvm.amdgcn.workitem.id.y()
  %bx = mul i32 %gx, 8
  %x = add i32 %bx, %tx
  %by = mul i32 %gy, 4
  %y = add i32 %by, %ty
  %row = mul i32 %y, %W
  %idx = add i32 %row, %x
  %v1 = mul i32 %x, 1000
  %v = add i32 %v1, %y
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %idx
  store i32 %v, ptr addrspace(1) %p
  ret void
}""",
"reduce_lds": """@lds = internal addrspace(3) global [64 x float] undef, align 4
define amdgpu_kernel void @reduce_lds(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a) {
entry:
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %lid = call i32 @llvm.amdgcn.workitem.id.x()
  %base = mul i32 %wg, 64
  %i = add i32 %base, %lid
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %pl = getelementptr [64 x float], ptr addrspace(3) @lds, i32 0, i32 %lid
  store float %x, ptr addrspace(3) %pl
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  br label %loop
loop:
  %s = phi i32 [32, %entry], [%s2, %next]
  %c = icmp ult i32 %lid, %s
  br i1 %c, label %body, label %next
body:
  %j = add i32 %lid, %s
  %pj = getelementptr [64 x float], ptr addrspace(3) @lds, i32 0, i32 %j
  %y = load float, ptr addrspace(3) %pj
  %me = load float, ptr addrspace(3) %pl
  %sum = fadd float %me, %y
  store float %sum, ptr addrspace(3) %pl
  br label %next
next:
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %s2 = lshr i32 %s, 1
  %done = icmp eq i32 %s2, 0
  br i1 %done, label %exit, label %loop
exit:
  %z = icmp eq i32 %lid, 0
  br i1 %z, label %wr, label %end
wr:
  %r = load float, ptr addrspace(3) @lds
  %po = getelementptr float, ptr addrspace(1) %out, i32 %wg
  store float %r, ptr addrspace(1) %po
  br label %end
end:
  ret void
}""",
"diverge": f"""define amdgpu_kernel void @diverge(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b) {{
entry:
{gid()}
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  %c = fcmp ogt float %x, 0.0
  br i1 %c, label %then, label %else
then:
  %pb = getelementptr float, ptr addrspace(1) %b, i32 %i
  %y = load float, ptr addrspace(1) %pb
  %t = fmul float %x, %y
  store float %t, ptr addrspace(1) %po
  br label %end
else:
  %odd = and i32 %i, 1
  %isodd = icmp eq i32 %odd, 1
  %e1 = fsub float 0.0, %x
  %e2 = fadd float %x, 3.5
  %e = select i1 %isodd, float %e1, float %e2
  store float %e, ptr addrspace(1) %po
  br label %end
end:
  ret void
}}""",
"loop": f"""define amdgpu_kernel void @loop(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, i32 %n) {{
entry:
{gid()}
  %start = mul i32 %i, %n
  br label %l
l:
  %k = phi i32 [0, %entry], [%k2, %l]
  %acc = phi float [0.0, %entry], [%acc2, %l]
  %idx = add i32 %start, %k
  %p = getelementptr float, ptr addrspace(1) %a, i32 %idx
  %v = load float, ptr addrspace(1) %p
  %m = call float @llvm.maxnum.f32(float %v, float 0.0)
  %acc2 = fadd float %acc, %m
  %k2 = add i32 %k, 1
  %c = icmp slt i32 %k2, %n
  br i1 %c, label %l, label %done
done:
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %acc2, ptr addrspace(1) %po
  ret void
}}""",
"math": f"""define amdgpu_kernel void @math(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b) {{
{gid()}
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %pb = getelementptr float, ptr addrspace(1) %b, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %y = load float, ptr addrspace(1) %pb
  %f = call float @llvm.fma.f32(float %x, float %y, float 1.0)
  %e = call float @llvm.exp2.f32(float %y)
  %ax = call float @llvm.fabs.f32(float %x)
  %s = call float @llvm.sqrt.f32(float %ax)
  %r = call float @llvm.amdgcn.rsq.f32(float %ax)
  %d = fdiv float %x, %y
  %l = call float @llvm.log2.f32(float %ax)
  %o0 = getelementptr float, ptr addrspace(1) %out, i32 %i
  %i1 = add i32 %i, 256
  %o1 = getelementptr float, ptr addrspace(1) %out, i32 %i1
  %i2 = add i32 %i, 512
  %o2 = getelementptr float, ptr addrspace(1) %out, i32 %i2
  %i3 = add i32 %i, 768
  %o3 = getelementptr float, ptr addrspace(1) %out, i32 %i3
  %i4 = add i32 %i, 1024
  %o4 = getelementptr float, ptr addrspace(1) %out, i32 %i4
  %i5 = add i32 %i, 1280
  %o5 = getelementptr float, ptr addrspace(1) %out, i32 %i5
  store float %f, ptr addrspace(1) %o0
  store float %e, ptr addrspace(1) %o1
  store float %s, ptr addrspace(1) %o2
  store float %r, ptr addrspace(1) %o3
  store float %d, ptr addrspace(1) %o4
  store float %l, ptr addrspace(1) %o5
  ret void
}}""",
"half_i64": f"""define amdgpu_kernel void @half_i64(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b, i64 %off) {{
{gid()}
  %i64 = zext i32 %i to i64
  %j = add i64 %i64, %off
  %pa = getelementptr half, ptr addrspace(1) %a, i64 %j
  %pb = getelementptr half, ptr addrspace(1) %b, i64 %i64
  %x = load half, ptr addrspace(1) %pa
  %y = load half, ptr addrspace(1) %pb
  %xf = fpext half %x to float
  %yf = fpext half %y to float
  %m = fmul float %xf, %yf
  %h = fptrunc float %m to half
  %h2 = fadd half %h, %y
  %po = getelementptr half, ptr addrspace(1) %out, i64 %i64
  store half %h2, ptr addrspace(1) %po
  ret void
}}""",
}

KERNELS["add_1m"] = KERNELS["add_f32"].replace("@add_f32", "@add_1m").replace("mul i32 %wg, 64", "mul i32 %wg, 256")

def have_llvmlite() -> bool:
  return importlib.util.find_spec("llvmlite") is not None

@cache
def compile_ir(src: str, cpu: str = "gfx1100", features: str = "-real-true16") -> bytes:
  """LLVM IR text -> relocatable amdgcn ELF object, in-process (O3 pipeline first, as the issue requires)."""
  import llvmlite.binding as llvm
  llvm.initialize_all_targets(); llvm.initialize_all_asmprinters()
  tm = llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(cpu=cpu, features=features, opt=3)
  mod = llvm.parse_assembly(src + DECL); mod.verify()
  pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
  pb.getModulePassManager().run(mod, pb)
  return tm.emit_object(mod)

def _sections(obj: bytes) -> dict[str, tuple[int, int, int, int]]:
  """name -> (index, file offset, size, sh_link) of each section of a little-endian ELF64 object (the System V gABI's
  header and section-header layouts: e_shoff at 0x28, e_shnum at 0x3C, e_shstrndx at 0x3E; a 64-byte section header)."""
  assert obj[:5] == b"\x7fELF\x02" and obj[5] == 1, "not a little-endian ELF64 object"
  shoff, (shnum, shstrndx) = struct.unpack_from("<Q", obj, 0x28)[0], struct.unpack_from("<HH", obj, 0x3C)
  hdrs = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + 64 * k) for k in range(shnum)]
  names = hdrs[shstrndx][4]
  return {obj[names + h[0]:obj.index(b"\0", names + h[0])].decode(): (k, h[4], h[5], h[6]) for k, h in enumerate(hdrs)}

def read_object(obj: bytes, name: str) -> tuple[bytes, int, int, bytes]:
  """-> (.text bytes, kernel entry offset in .text, kernel size, 64-byte descriptor with entry offset unresolved).
  (Read with struct, not pyelftools: its parse cost ~20 ms an object, and the decoder tests read hundreds.)"""
  secs = _sections(obj)
  by_index = {v[0]: (n, v) for n, v in secs.items()}
  _, so, ss, link = secs[".symtab"]
  strtab = by_index[link][1][1]
  syms = {}
  for off in range(so, so + ss, 24):   # Elf64_Sym: st_name, st_info, st_other, st_shndx, st_value, st_size
    st_name, _, _, shndx, value, size = struct.unpack_from("<IBBHQQ", obj, off)
    syms[obj[strtab + st_name:obj.index(b"\0", strtab + st_name)].decode()] = (shndx, value, size)
  _, to, ts, _ = secs[".text"]
  text = obj[to:to + ts]
  kd_ndx, kd_value, _ = syms[name + ".kd"]
  ro_name, (_, ro, _, _) = by_index[kd_ndx]
  kd = obj[ro + kd_value:ro + kd_value + 64]
  # the one relocation: R_AMDGPU_REL64 (type 5) at kd+16 = kernel - kd; we pass the entry offset directly instead
  _, rel, rels, _ = secs.get(".rela" + ro_name, (0, 0, 0, 0))
  relocs = [struct.unpack_from("<QQq", obj, off) for off in range(rel, rel + rels, 24)]   # Elf64_Rela: r_offset, r_info, r_addend
  assert [(r[0] - kd_value, r[1] & 0xFFFFFFFF) for r in relocs] == [(16, 5)], relocs
  assert struct.unpack_from("<q", kd, 16)[0] == 0
  return text, syms[name][1], syms[name][2], kd

OBJDUMP_INST = re.compile(r"\t(\S+)\s*(.*?)\s*// ([0-9A-F]+):")   # "\tmnemonic operands  // ADDRESS: words"

def objdump_each(objs: list[bytes], mcpu: str, tmp_path) -> list[list[tuple[int, str, str]]]:
  """(address, mnemonic, operands) of every instruction llvm-objdump-19 disassembles in each object of `objs`, in
  order, from ONE llvm-objdump process: a process an object cost ~0.2 s on a loaded CI host, hundreds a test. Its
  output has a "<path>:\tfile format ..." header per input file; each object's instructions are those after its own."""
  from tests.needs import need_llvm_objdump_19
  paths = []
  for i, obj in enumerate(objs):
    (p := tmp_path / f"k{i}.o").write_bytes(obj); paths.append(str(p))
  txt = subprocess.run([need_llvm_objdump_19(), "-d", f"--mcpu={mcpu}", *paths], capture_output=True, text=True, check=True).stdout
  found: dict[str, list[tuple[int, str, str]]] = {}
  cur: list | None = None
  for line in txt.splitlines():
    if (h := re.match(r"(.*):\s+file format ", line)):
      assert h.group(1) not in found, f"llvm-objdump named {h.group(1)} twice"
      cur = found[h.group(1)] = []
    elif (m := OBJDUMP_INST.match(line)):
      assert cur is not None, f"llvm-objdump printed an instruction before any file header: {line!r}"
      cur.append((int(m.group(3), 16), m.group(1), m.group(2)))
  assert sorted(found) == sorted(paths), f"llvm-objdump disassembled {sorted(found)}, not {sorted(paths)}"
  return [found[p] for p in paths]

# ---- a second round: integer division, f64, i64, conversions, atomics, vectors, packed halves, 3-D ids
def _ew(name: str, args: str, body: str) -> str:
  return f"""define amdgpu_kernel void @{name}({args}) {{
{gid()}
{body}
  ret void
}}"""
KERNELS["intdiv"] = _ew("intdiv", "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b", """
  %pa = getelementptr i32, ptr addrspace(1) %a, i32 %i
  %pb = getelementptr i32, ptr addrspace(1) %b, i32 %i
  %x = load i32, ptr addrspace(1) %pa
  %y = load i32, ptr addrspace(1) %pb
  %q = sdiv i32 %x, %y
  %r = urem i32 %x, %y
  %m = call i32 @llvm.smax.i32(i32 %q, i32 %r)
  %n = call i32 @llvm.umin.i32(i32 %m, i32 %x)
  %c = call i32 @llvm.ctpop.i32(i32 %x)
  %z = call i32 @llvm.ctlz.i32(i32 %y, i1 false)
  %s1 = add i32 %n, %c
  %s = mul i32 %s1, %z
  %o0 = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %q, ptr addrspace(1) %o0
  %i1 = add i32 %i, 256
  %o1 = getelementptr i32, ptr addrspace(1) %out, i32 %i1
  store i32 %r, ptr addrspace(1) %o1
  %i2 = add i32 %i, 512
  %o2 = getelementptr i32, ptr addrspace(1) %out, i32 %i2
  store i32 %s, ptr addrspace(1) %o2""")
KERNELS["f64_i64"] = _ew("f64_i64", "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b, ptr addrspace(1) noalias %c", """
  %pa = getelementptr double, ptr addrspace(1) %a, i32 %i
  %pb = getelementptr double, ptr addrspace(1) %b, i32 %i
  %pc = getelementptr i64, ptr addrspace(1) %c, i32 %i
  %x = load double, ptr addrspace(1) %pa
  %y = load double, ptr addrspace(1) %pb
  %k = load i64, ptr addrspace(1) %pc
  %f = call double @llvm.fma.f64(double %x, double %y, double 0.25)
  %d = fdiv double %f, %y
  %kk = mul i64 %k, 6364136223846793005
  %k2 = add i64 %kk, 1442695040888963407
  %k3 = lshr i64 %k2, 7
  %kf = uitofp i64 %k3 to double
  %r = fadd double %d, %kf
  %po = getelementptr double, ptr addrspace(1) %out, i32 %i
  store double %r, ptr addrspace(1) %po
  %pk = getelementptr i64, ptr addrspace(1) %c, i32 %i
  store i64 %k3, ptr addrspace(1) %pk""")
KERNELS["convert"] = _ew("convert", "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a", """
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %si = fptosi float %x to i32
  %ui = fptoui float %x to i32
  %sf = sitofp i32 %si to float
  %h = fptrunc float %x to half
  %hf = fpext half %h to float
  %u8 = trunc i32 %ui to i8
  %u8f = uitofp i8 %u8 to float
  %fl = call float @llvm.floor.f32(float %x)
  %tr = call float @llvm.trunc.f32(float %x)
  %mn = call float @llvm.minnum.f32(float %fl, float %hf)
  %t1 = fadd float %sf, %mn
  %t2 = fadd float %t1, %u8f
  %t3 = fmul float %t2, %tr
  %sn = call float @llvm.sin.f32(float %x)
  %t4 = fadd float %t3, %sn
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %t4, ptr addrspace(1) %po""")
KERNELS["atomics"] = _ew("atomics", "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %cnt, ptr addrspace(1) noalias %a", """
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %bin = and i32 %i, 3
  %pc = getelementptr i32, ptr addrspace(1) %cnt, i32 %bin
  %old = atomicrmw add ptr addrspace(1) %pc, i32 1 monotonic
  %po = getelementptr float, ptr addrspace(1) %out, i32 %bin
  %unused = atomicrmw fadd ptr addrspace(1) %po, float %x monotonic
  %big = icmp ugt i32 %old, 1000000
  br i1 %big, label %bad, label %ok
bad:
  store i32 0, ptr addrspace(1) %cnt
  br label %ok
ok:""")
KERNELS["vec4"] = _ew("vec4", "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %h", """
  %pa = getelementptr <4 x float>, ptr addrspace(1) %a, i32 %i
  %x = load <4 x float>, ptr addrspace(1) %pa, align 16
  %y = shufflevector <4 x float> %x, <4 x float> poison, <4 x i32> <i32 3, i32 2, i32 1, i32 0>
  %z = fmul <4 x float> %x, %y
  %po = getelementptr <4 x float>, ptr addrspace(1) %out, i32 %i
  store <4 x float> %z, ptr addrspace(1) %po, align 16
  %ph = getelementptr <2 x half>, ptr addrspace(1) %h, i32 %i
  %hv = load <2 x half>, ptr addrspace(1) %ph
  %hw = fadd <2 x half> %hv, <half 1.0, half 2.0>
  %hm = fmul <2 x half> %hw, %hv
  store <2 x half> %hm, ptr addrspace(1) %ph""")
KERNELS["ids3d"] = """define amdgpu_kernel void @ids3d(ptr addrspace(1) noalias %out, i32 %flag) {
entry:
  %gx = call i32 @llvm.amdgcn.workgroup.id.x()
  %gz = call i32 @llvm.amdgcn.workgroup.id.z()
  %tx = call i32 @llvm.amdgcn.workitem.id.x()
  %ty = call i32 @llvm.amdgcn.workitem.id.y()
  %tz = call i32 @llvm.amdgcn.workitem.id.z()
  %a = mul i32 %gz, 8
  %b = add i32 %a, %gx
  %c = mul i32 %b, 64
  %d1 = mul i32 %tz, 16
  %d2 = mul i32 %ty, 4
  %d3 = add i32 %d1, %d2
  %d = add i32 %d3, %tx
  %idx = add i32 %c, %d
  %u = icmp eq i32 %flag, 0
  br i1 %u, label %zero, label %nonzero
zero:
  %v0 = mul i32 %idx, 3
  br label %done
nonzero:
  %v1 = xor i32 %idx, %flag
  br label %done
done:
  %v = phi i32 [%v0, %zero], [%v1, %nonzero]
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %idx
  store i32 %v, ptr addrspace(1) %p
  ret void
}"""
KERNELS["lds_wide"] = """@tile = internal addrspace(3) global [256 x float] undef, align 16
define amdgpu_kernel void @lds_wide(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a) {
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %lid = call i32 @llvm.amdgcn.workitem.id.x()
  %base = mul i32 %wg, 256
  %i = add i32 %base, %lid
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %pl = getelementptr [256 x float], ptr addrspace(3) @tile, i32 0, i32 %lid
  store float %x, ptr addrspace(3) %pl
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %rev = sub i32 255, %lid
  %pr = getelementptr [256 x float], ptr addrspace(3) @tile, i32 0, i32 %rev
  %y = load float, ptr addrspace(3) %pr
  %q = and i32 %lid, 252
  %pq = getelementptr [256 x float], ptr addrspace(3) @tile, i32 0, i32 %q
  %v = load <4 x float>, ptr addrspace(3) %pq, align 16
  %e0 = extractelement <4 x float> %v, i32 0
  %e3 = extractelement <4 x float> %v, i32 3
  %s1 = fadd float %y, %e0
  %s = fadd float %s1, %e3
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %s, ptr addrspace(1) %po
  ret void
}"""
DECL += """
declare i32 @llvm.smax.i32(i32, i32)
declare i32 @llvm.umin.i32(i32, i32)
declare i32 @llvm.ctpop.i32(i32)
declare i32 @llvm.ctlz.i32(i32, i1)
declare double @llvm.fma.f64(double, double, double)
declare float @llvm.floor.f32(float)
declare float @llvm.trunc.f32(float)
declare float @llvm.minnum.f32(float, float)
declare float @llvm.sin.f32(float)
declare i32 @llvm.amdgcn.workgroup.id.z()
declare i32 @llvm.amdgcn.workitem.id.z()
"""

# ---- random elementwise expressions: IR text and the numpy model of the same expression
FBIN = {"fadd": np.add, "fsub": np.subtract, "fmul": np.multiply}
FCALL = {"minnum": np.fmin, "maxnum": np.fmax}
IBIN = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}
ICALL = {"smin": np.minimum, "smax": np.maximum}
FCMP = {"olt": np.less, "ogt": np.greater, "oge": np.greater_equal, "une": np.not_equal}

def random_kernel(seed: int, depth: int = 5, uniform: bool = False) -> tuple[str, str, object]:
  """-> (kernel name, IR, fn(a, b, c) -> numpy result). Floats for even seeds, ints for odd ones; `uniform`
  takes a, b, c as i32 kernel arguments, so the expression runs on the scalar ALU."""
  rng = np.random.default_rng(seed); isf = seed % 2 == 0 and not uniform; ty = "float" if isf else "i32"
  lines, cnt = [], [0]
  def new(expr: str) -> str:
    cnt[0] += 1; lines.append(f"  %t{cnt[0]} = {expr}"); return f"%t{cnt[0]}"
  def gen(d: int):
    if d == 0 or rng.random() < 0.2:
      k = int(rng.integers(0, 4))
      if k < 3: return f"%{'abc'[k]}", (lambda k: lambda a, b, c: (a, b, c)[k])(k)
      v = float(np.float32(rng.choice([0.5, -2.0, 3.25, 1e-3]))) if isf else int(rng.integers(-100, 100))
      return (f"0x{np.float64(v).view(np.uint64):X}" if isf else str(v)), (lambda v: lambda a, b, c: (np.float32(v) if isf else np.int32(v)))(v)
    x, fx = gen(d - 1); y, fy = gen(d - 1); r = rng.random()
    if isf:
      if r < 0.5:
        op = str(rng.choice(list(FBIN))); f = FBIN[op]
        return new(f"{op} float {x}, {y}"), lambda a, b, c: f(fx(a, b, c), fy(a, b, c))
      if r < 0.7:
        op = str(rng.choice(list(FCALL))); f = FCALL[op]
        return new(f"call float @llvm.{op}.f32(float {x}, float {y})"), lambda a, b, c: f(fx(a, b, c), fy(a, b, c))
      if r < 0.8: return new(f"call float @llvm.fabs.f32(float {x})"), lambda a, b, c: np.abs(fx(a, b, c))
      z, fz = gen(d - 1); cc = str(rng.choice(list(FCMP))); f = FCMP[cc]
      cnd = new(f"fcmp {cc} float {x}, {y}")
      return new(f"select i1 {cnd}, float {z}, float {x}"), lambda a, b, c: np.where(f(fx(a, b, c), fy(a, b, c)), fz(a, b, c), fx(a, b, c))
    if r < 0.55:
      op = str(rng.choice(list(IBIN))); f = IBIN[op]
      return new(f"{op} i32 {x}, {y}"), lambda a, b, c: f(fx(a, b, c), fy(a, b, c)).astype(np.int32)
    if r < 0.7:
      op = str(rng.choice(list(ICALL))); f = ICALL[op]
      return new(f"call i32 @llvm.{op}.i32(i32 {x}, i32 {y})"), lambda a, b, c: f(fx(a, b, c), fy(a, b, c))
    if r < 0.85:
      sh = int(rng.integers(0, 32)); op = str(rng.choice(["shl", "lshr", "ashr"]))
      f = {"shl": lambda v: (v.astype(np.uint32) << np.uint32(sh)).view(np.int32), "lshr": lambda v: (v.astype(np.uint32) >> np.uint32(sh)).view(np.int32),
           "ashr": lambda v: v >> np.int32(sh)}[op]
      return new(f"{op} i32 {x}, {sh}"), lambda a, b, c: f(np.asarray(fx(a, b, c), np.int32))
    cnd = new(f"icmp slt i32 {x}, {y}")
    return new(f"select i1 {cnd}, i32 {y}, i32 {x}"), lambda a, b, c: np.where(fx(a, b, c) < fy(a, b, c), fy(a, b, c), fx(a, b, c))
  res, fn = gen(depth)
  name = f"rand{'u' if uniform else ''}{seed}"
  loads = "\n".join(f"  %p{v} = getelementptr {ty}, ptr addrspace(1) %{v}in, i32 %i\n  %{v} = load {ty}, ptr addrspace(1) %p{v}" for v in "abc")
  params = "i32 %a, i32 %b, i32 %c" if uniform else "ptr addrspace(1) noalias %ain, ptr addrspace(1) noalias %bin, ptr addrspace(1) noalias %cin"
  if uniform: loads = ""
  ir = f"""define amdgpu_kernel void @{name}(ptr addrspace(1) noalias %out, {params}) {{
{gid()}
{loads}
{chr(10).join(lines)}
  %po = getelementptr {ty}, ptr addrspace(1) %out, i32 %i
  store {ty} {res}, ptr addrspace(1) %po
  ret void
}}
declare i32 @llvm.smin.i32(i32, i32)
"""
  return name, ir, fn

KERNELS["varloop"] = f"""define amdgpu_kernel void @varloop(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %cnt) {{
entry:
{gid()}
  %pc = getelementptr i32, ptr addrspace(1) %cnt, i32 %i
  %n = load i32, ptr addrspace(1) %pc
  %z = icmp sgt i32 %n, 0
  br i1 %z, label %l, label %done
l:
  %k = phi i32 [0, %entry], [%k2, %cont]
  %acc = phi i32 [0, %entry], [%acc2, %cont]
  %sq = mul i32 %k, %k
  %acc2 = add i32 %acc, %sq
  %k2 = add i32 %k, 1
  %big = icmp sgt i32 %acc2, 5000
  br i1 %big, label %done, label %cont
cont:
  %c = icmp slt i32 %k2, %n
  br i1 %c, label %l, label %done
done:
  %r = phi i32 [-1, %entry], [%acc2, %l], [%acc2, %cont]
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %r, ptr addrspace(1) %po
  ret void
}}"""

KERNELS["wave_ops"] = """@hist = internal addrspace(3) global [8 x i32] undef, align 4
define amdgpu_kernel void @wave_ops(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, ptr %gen) {
entry:
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %lid = call i32 @llvm.amdgcn.workitem.id.x()
  %base = mul i32 %wg, 64
  %i = add i32 %base, %lid
  %lt8 = icmp ult i32 %lid, 8
  br i1 %lt8, label %zero, label %go
zero:
  %pz = getelementptr [8 x i32], ptr addrspace(3) @hist, i32 0, i32 %lid
  store i32 0, ptr addrspace(3) %pz
  br label %go
go:
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %pa = getelementptr i32, ptr addrspace(1) %a, i32 %i
  %x = load i32, ptr addrspace(1) %pa
  %bin = and i32 %x, 7
  %ph = getelementptr [8 x i32], ptr addrspace(3) @hist, i32 0, i32 %bin
  %old = atomicrmw add ptr addrspace(3) %ph, i32 1 monotonic
  %odd = icmp ne i32 %bin, 0
  %ballot = call i32 @llvm.amdgcn.ballot.i32(i1 %odd)
  %pop = call i32 @llvm.ctpop.i32(i32 %ballot)
  %first = call i32 @llvm.amdgcn.readfirstlane.i32(i32 %x)
  %mb = call i32 @llvm.amdgcn.mbcnt.lo(i32 -1, i32 0)
  %nb = add i32 %lid, 1
  %nb4 = shl i32 %nb, 2
  %nbm = and i32 %nb4, 124
  %perm = call i32 @llvm.amdgcn.ds.bpermute(i32 %nbm, i32 %x)
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %lt8b = icmp ult i32 %lid, 8
  %hv = load i32, ptr addrspace(3) %ph
  %pg = getelementptr i32, ptr %gen, i32 %i
  store i32 %hv, ptr %pg
  %s1 = add i32 %pop, %first
  %s2 = mul i32 %mb, 1000
  %s3 = add i32 %s1, %s2
  %o0 = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %s3, ptr addrspace(1) %o0
  %i1 = add i32 %i, 1024
  %o1 = getelementptr i32, ptr addrspace(1) %out, i32 %i1
  store i32 %perm, ptr addrspace(1) %o1
  ret void
}
declare i32 @llvm.amdgcn.ballot.i32(i1)
declare i32 @llvm.amdgcn.readfirstlane.i32(i32)
declare i32 @llvm.amdgcn.mbcnt.lo(i32, i32)
declare i32 @llvm.amdgcn.ds.bpermute(i32, i32)"""

KERNELS["flat_indirect"] = _ew("flat_indirect", "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %ptrs", """
  %sel = and i32 %i, 1
  %pp = getelementptr ptr, ptr addrspace(1) %ptrs, i32 %sel
  %p = load ptr, ptr addrspace(1) %pp
  %px = getelementptr float, ptr %p, i32 %i
  %x = load float, ptr %px
  %y = fmul float %x, 2.0
  store float %y, ptr %px
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %x, ptr addrspace(1) %po""")

KERNELS["mix"] = _ew("mix", "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %h, ptr addrspace(1) noalias %f", """
  %ph = getelementptr <2 x half>, ptr addrspace(1) %h, i32 %i
  %hv = load <2 x half>, ptr addrspace(1) %ph
  %h0 = extractelement <2 x half> %hv, i32 0
  %h1 = extractelement <2 x half> %hv, i32 1
  %pf = getelementptr float, ptr addrspace(1) %f, i32 %i
  %x = load float, ptr addrspace(1) %pf
  %e0 = fpext half %h0 to float
  %e1 = fpext half %h1 to float
  %r = call float @llvm.fma.f32(float %e0, float %e1, float %x)
  %nr = fneg float %r
  %r2 = call float @llvm.fma.f32(float %e1, float %x, float %nr)
  %t = fptrunc float %r2 to half
  %po = getelementptr half, ptr addrspace(1) %out, i32 %i
  store half %t, ptr addrspace(1) %po""")

# 64-bit add/sub with carries and borrows across the halves (v_sub_co_u32 + v_sub_co_ci_u32, v_add_co_ci_u32)
KERNELS["i64_carry"] = _ew("i64_carry", "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b", """
  %pa = getelementptr i64, ptr addrspace(1) %a, i32 %i
  %pb = getelementptr i64, ptr addrspace(1) %b, i32 %i
  %x = load i64, ptr addrspace(1) %pa
  %y = load i64, ptr addrspace(1) %pb
  %d = sub i64 %x, %y
  %s = add i64 %x, %y
  %o0 = getelementptr i64, ptr addrspace(1) %out, i32 %i
  store i64 %d, ptr addrspace(1) %o0
  %i1 = add i32 %i, 128
  %o1 = getelementptr i64, ptr addrspace(1) %out, i32 %i1
  store i64 %s, ptr addrspace(1) %o1""")

# count-leading-sign-bits (v_cls_i32 per lane, s_cls_i32 on a uniform argument) and 16-bit 3-input min/max
KERNELS["cls_minmax16"] = _ew("cls_minmax16", "ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %a, i32 %k", """
  %pa = getelementptr i32, ptr addrspace(1) %a, i32 %i
  %x = load i32, ptr addrspace(1) %pa
  %c = call i32 @llvm.amdgcn.sffbh.i32(i32 %x)
  %ck = call i32 @llvm.amdgcn.sffbh.i32(i32 %k)
  %cs = add i32 %c, %ck
  %h0 = trunc i32 %x to i16
  %x8 = lshr i32 %x, 8
  %h1 = trunc i32 %x8 to i16
  %x16 = lshr i32 %x, 16
  %h2 = trunc i32 %x16 to i16
  %u01 = call i16 @llvm.umax.i16(i16 %h0, i16 %h1)
  %u = call i16 @llvm.umax.i16(i16 %u01, i16 %h2)
  %s01 = call i16 @llvm.smin.i16(i16 %h0, i16 %h1)
  %s = call i16 @llvm.smin.i16(i16 %s01, i16 %h2)
  %uz = zext i16 %u to i32
  %sz = sext i16 %s to i32
  %o0 = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %cs, ptr addrspace(1) %o0
  %i1 = add i32 %i, 128
  %o1 = getelementptr i32, ptr addrspace(1) %out, i32 %i1
  store i32 %uz, ptr addrspace(1) %o1
  %i2 = add i32 %i, 256
  %o2 = getelementptr i32, ptr addrspace(1) %out, i32 %i2
  store i32 %sz, ptr addrspace(1) %o2""")
