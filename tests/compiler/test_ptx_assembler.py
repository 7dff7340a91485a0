"""PTX -> cubin through nvJitLink and through ptxas, errors with the assembler's log, and the disk cache."""
import hashlib, io, os, shutil
import pytest
from elftools.elf.elffile import ELFFile
from compiler.assemble import ptx_assembler as pa

PTX = """.version 8.0
.target {target}
.address_size 64

.visible .entry add_one(
  .param .u64 out,
  .param .u64 inp,
  .param .u32 n
)
{{
  .reg .pred %p<2>;
  .reg .b32 %r<6>;
  .reg .f32 %f<3>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [out];
  ld.param.u64 %rd2, [inp];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.s32 %p1, %r5, %r1;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd3, %rd2;
  cvta.to.global.u64 %rd4, %rd1;
  mul.wide.s32 %rd5, %r5, 4;
  add.s64 %rd6, %rd3, %rd5;
  ld.global.f32 %f1, [%rd6];
  add.f32 %f2, %f1, {operand};
  add.s64 %rd7, %rd4, %rd5;
  st.global.f32 [%rd7], %f2;
DONE:
  ret;
}}
"""
def ptx(target="sm_80", operand="0f3F800000"): return PTX.format(target=target, operand=operand)

def available(kind):
  if kind == "ptxas": return shutil.which("ptxas") is not None
  try: return isinstance(pa.get_assembler("nvjitlink"), pa.NVJitLink)
  except pa.PTXAssembleError: return False

@pytest.fixture(params=["nvjitlink", "ptxas"])
def assembler(request, monkeypatch, tmp_path):
  if not available(request.param): pytest.skip(f"{request.param} is not installed on this machine")
  monkeypatch.setenv("PTX_ASSEMBLER", request.param)
  monkeypatch.setenv("HCQRT_CACHE", str(tmp_path))
  monkeypatch.delenv("CACHE", raising=False)
  return request.param

def elf_facts(cubin):
  elf = ELFFile(io.BytesIO(cubin))
  return elf["e_machine"], cubin[7], (elf["e_flags"] >> 8) & 0xff, {s.name for s in elf.iter_sections()}

@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90"])
def test_assemble_small_kernel(assembler, arch):
  asm = pa.get_assembler(assembler)
  assert asm.identity.startswith(assembler)
  cubin = pa.assemble_ptx(ptx(), arch)
  machine, osabi, sm, sections = elf_facts(cubin)
  assert machine in ("EM_CUDA", 190) and osabi == 0x41 and sm == int(arch[3:])
  assert ".text.add_one" in sections and ".nv.info.add_one" in sections
  assert pa.ptx_for_cubin(cubin) == ptx()

def test_both_assemblers_agree_on_kernel_layout(monkeypatch, tmp_path):
  monkeypatch.setenv("HCQRT_CACHE", str(tmp_path))
  if not (available("ptxas") and available("nvjitlink")): pytest.skip("needs both nvJitLink and ptxas")
  out = {}
  for kind in ("nvjitlink", "ptxas"):
    monkeypatch.setenv("PTX_ASSEMBLER", kind)
    out[kind] = elf_facts(pa.assemble_ptx(ptx(), "sm_90"))
  assert out["nvjitlink"][:3] == out["ptxas"][:3]
  assert {s for s in out["nvjitlink"][3] if s.startswith((".text", ".nv.info", ".nv.constant0"))} == \
         {s for s in out["ptxas"][3] if s.startswith((".text", ".nv.info", ".nv.constant0"))}

def test_syntax_error_carries_log_and_saved_ptx(assembler):
  bad = ptx(operand="%fbogus")
  with pytest.raises(pa.PTXAssembleError) as e:
    pa.assemble_ptx(bad, "sm_90")
  msg = str(e.value)
  assert "%fbogus" in msg and "line 29" in msg          # the assembler's own diagnostic
  assert "add.f32 %f2, %f1, %fbogus;" in msg            # the offending PTX line quoted
  path = msg.rsplit("PTX saved to ", 1)[1].strip()
  assert open(path).read() == bad and "add_one" in os.path.basename(path)
  os.unlink(path)

def test_target_newer_than_arch_is_an_error(assembler):
  with pytest.raises(pa.PTXAssembleError, match=r"(?s)for sm_80:.*\.target is higher") as e:
    pa.assemble_ptx(ptx(target="sm_90"), "sm_80")
  os.unlink(str(e.value).rsplit("PTX saved to ", 1)[1].strip())

def test_cache_hit_skips_assembler(assembler, monkeypatch, tmp_path):
  asm = pa.get_assembler(assembler)
  calls = []
  real = asm.assemble
  monkeypatch.setattr(asm, "assemble", lambda *a: (calls.append(a), real(*a))[1])
  first = pa.assemble_ptx(ptx(), "sm_90")
  assert len(calls) == 1
  files = list((tmp_path / "cubin").iterdir())
  assert [f.suffix for f in files] == [".cubin"] and files[0].read_bytes() == first   # no temp files left behind
  assert pa.assemble_ptx(ptx(), "sm_90") == first and len(calls) == 1
  # a different arch or different PTX is a different key
  pa.assemble_ptx(ptx(), "sm_89")
  pa.assemble_ptx(ptx(operand="0f40000000"), "sm_90")
  assert len(calls) == 3 and len(list((tmp_path / "cubin").iterdir())) == 3
  # CACHE=0 disables reads
  monkeypatch.setenv("CACHE", "0")
  assert pa.assemble_ptx(ptx(), "sm_90") == first and len(calls) == 4

def test_cache_keys_include_assembler_identity(assembler, monkeypatch, tmp_path):
  pa.assemble_ptx(ptx(), "sm_90")
  asm = pa.get_assembler(assembler)
  monkeypatch.setattr(asm, "identity", asm.identity + "-other-build")
  monkeypatch.setattr(asm, "assemble", lambda *a: (b"\x7fELF-fake", ""))
  assert pa.assemble_ptx(ptx(), "sm_90") == b"\x7fELF-fake"

def test_corrupt_cache_dir_does_not_break_assembly(assembler, monkeypatch, tmp_path):
  (tmp_path / "cubin").write_text("a file where the cache directory should be")
  assert pa.assemble_ptx(ptx(), "sm_90")[:4] == b"\x7fELF"

def test_bad_inputs():
  with pytest.raises(ValueError, match="arch"): pa.assemble_ptx(ptx(), "90")
  with pytest.raises(ValueError, match="PTX_ASSEMBLER"): pa.get_assembler("clang")

def test_nvjitlink_result_names():
  # enum order of nvJitLinkResult in nvJitLink.h
  assert pa.NVJITLINK_RESULTS[0] == "SUCCESS" and pa.NVJITLINK_RESULTS[4] == "ERROR_PTX_COMPILE"
  assert pa._result_name(4) == "NVJITLINK_ERROR_PTX_COMPILE" and pa._result_name(99) == "NVJITLINK_UNKNOWN_99"

def test_cache_dir_location(monkeypatch, tmp_path):
  monkeypatch.setenv("HCQRT_CACHE", str(tmp_path / "root"))
  assert pa.cache_dir() == tmp_path / "root" / "cubin"
  monkeypatch.delenv("HCQRT_CACHE")
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  assert pa.cache_dir() == tmp_path / "xdg" / "hcqrt" / "cubin"

class FakeAssembler:
  """Stands in for nvJitLink/ptxas where only the table of PTX by cubin is under test: a distinct 'cubin' per PTX."""
  identity = "fake 1.0"
  def assemble(self, ptx_text, arch): return b"\x7fELF" + hashlib.sha256(ptx_text.encode()).digest(), ""

def test_ptx_of_cubin_is_bounded_lru(monkeypatch, tmp_path):
  monkeypatch.setenv("HCQRT_CACHE", str(tmp_path))
  monkeypatch.setattr(pa, "get_assembler", lambda choice="": FakeAssembler())
  monkeypatch.setattr(pa, "PTX_OF_CUBIN_MAX", 3, raising=False)
  monkeypatch.setattr(pa, "_ptx_of_cubin", type(pa._ptx_of_cubin)())   # this test's own table
  texts = [ptx(operand=f"0f3F80000{i}") for i in range(6)]
  cubins = [pa.assemble_ptx(t, "sm_80") for t in texts[:5]]
  assert len(pa._ptx_of_cubin) == 3 and pa.ptx_for_cubin(cubins[0]) is None and pa.ptx_for_cubin(cubins[4]) == texts[4]
  assert pa.ptx_for_cubin(cubins[2]) == texts[2]   # looked up: now the most recently used
  pa.assemble_ptx(texts[5], "sm_80")
  assert pa.ptx_for_cubin(cubins[2]) == texts[2] and pa.ptx_for_cubin(cubins[3]) is None
  assert pa.assemble_ptx(texts[0], "sm_80") == cubins[0] and pa.ptx_for_cubin(cubins[0]) == texts[0]   # assembled again: known again

def test_ptxemu_names_a_cubin_whose_ptx_was_evicted(monkeypatch, tmp_path):
  if not (available("nvjitlink") or available("ptxas")): pytest.skip("needs nvJitLink or ptxas")
  from hcqrt.mock.ptxemu import PTXEmuDevice
  monkeypatch.setenv("HCQRT_CACHE", str(tmp_path))
  monkeypatch.setattr(pa, "PTX_OF_CUBIN_MAX", 1, raising=False)
  monkeypatch.setattr(pa, "_ptx_of_cubin", type(pa._ptx_of_cubin)())
  dev, cubin = PTXEmuDevice(), pa.assemble_ptx(ptx("sm_90"), "sm_90")
  dev.program("add_one", cubin)
  pa.assemble_ptx(ptx("sm_90", "0f40000000"), "sm_90")   # the table's one place goes to another cubin
  with pytest.raises(RuntimeError, match=f"add_one: no PTX known for cubin sha256 {hashlib.sha256(cubin).hexdigest()[:16]}.*PTX_OF_CUBIN_MAX"):
    dev.program("add_one", cubin)
