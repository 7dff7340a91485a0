"""The cubin loader against ../shared/abi/nvidia_cubin.json and against cubins nvcc/ptxas build here."""
import io, re, struct, subprocess
from concurrent.futures import ThreadPoolExecutor
import pytest
from elftools.elf.elffile import ELFFile
from hcqrt.nv import cubin as cb

from tests.abi_facts import load as load_facts
from tests.needs import need_tool
ABI = load_facts("nvidia_cubin")

CUDA_SRC = r"""
__device__ float gscale = 2.5f;
__device__ float garr[16];
__device__ float *gptr = garr;
__constant__ float cvals[4] = {1, 2, 3, 4};
struct S { float x[5]; };
extern "C" __global__ void __launch_bounds__(128) k_smem(float *out, const float *in, int n, double d) {
  __shared__ float tile[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = in[i] * gscale + cvals[i & 3];
  __syncthreads();
  if (i < n) out[i] = tile[(threadIdx.x + 1) & 127] + (float)d + gptr[i & 15];
}
extern "C" __global__ void k_params(int *a, char c, S st, short s, long long q) {
  a[threadIdx.x] = c + s + (int)q + (int)st.x[threadIdx.x % 5];
}
extern "C" __global__ void k_local(float *a, int k) {
  float buf[256];
  #pragma unroll 1
  for (int j = 0; j < 256; j++) buf[(j * k) & 255] = a[j];
  a[threadIdx.x] = buf[(k + threadIdx.x) & 255];
}
extern "C" __global__ void k_noargs() {}
"""
# (ordinal, offset, size) from the C signatures: pointers 8, char 1, struct of 5 floats 20 (align 4), short 2
EXPECTED_PARAMS = {"k_smem": [(0, 0, 8), (1, 8, 8), (2, 16, 4), (3, 24, 8)],
                   "k_params": [(0, 0, 8), (1, 8, 1), (2, 12, 20), (3, 32, 2), (4, 40, 8)],
                   "k_local": [(0, 0, 8), (1, 8, 4)], "k_noargs": []}
ARCHS = ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]

def ptxas_info(log: str) -> dict[str, dict[str, int]]:
  """`ptxas -v` output -> {kernel: {registers, stack, smem}}."""
  out = {}
  for m in re.finditer(r"Compiling entry function '(\w+)'.*?Used (\d+) registers[^\n]*", log, re.S):
    block, smem = m.group(0), re.search(r"(\d+) bytes smem", m.group(0))
    stack = re.search(r"(\d+) bytes stack frame", block)
    out[m.group(1)] = {"registers": int(m.group(2)), "stack": int(stack.group(1)) if stack else 0,
                       "smem": int(smem.group(1)) if smem else 0}
  return out

@pytest.fixture(scope="module")
def built(tmp_path_factory):
  need_tool("nvcc")
  d = tmp_path_factory.mktemp("cubins")
  (d / "k.cu").write_text(CUDA_SRC)
  def build(arch):
    out = d / f"k_{arch}.cubin"
    p = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-Xptxas", "-v", "-o", str(out), str(d / "k.cu")],
                       capture_output=True, text=True, check=True)
    return arch, (out.read_bytes(), ptxas_info(p.stdout + p.stderr))
  with ThreadPoolExecutor(4) as ex: return dict(ex.map(build, ARCHS))

# ---- facts of the JSON ----

def test_codes_match_json():
  eiattr, rcuda = ABI["eiattr_codes"], ABI["relocation_codes"]
  names = [n for n in dir(cb) if n.startswith(("EIATTR_", "R_CUDA_"))]
  assert len(names) >= 20
  for n in names:
    table = eiattr if n.startswith("EIATTR_") else rcuda
    assert table[hex(getattr(cb, n))] == n, n
  assert ABI["elf"]["e_machine"] == f"EM_CUDA = {cb.EM_CUDA}"
  for arch, facts in ABI["elf"]["per_arch"].items():
    assert facts["e_ident_osabi"] == cb.ELFOSABI_CUDA_V2 and (int(facts["e_flags"], 16) >> 8) & 0xff == int(arch[3:])
  for num, fmt in ((cb.EIFMT_NVAL, "NVAL"), (cb.EIFMT_BVAL, "BVAL"), (cb.EIFMT_HVAL, "HVAL"), (cb.EIFMT_SVAL, "SVAL")):
    assert fmt in ABI["nvinfo_record_format"]["formats"][str(num)]
  assert f"0x{cb.RESERVED_SHARED_SM90:x}" in ABI["sections"][".nv.shared.<kernel>"]

def json_kernels():
  return [(k, v) for k, v in ABI["test_kernels"].items()]

def test_json_param_cbank_offsets_per_arch():
  observed = {a: int(v, 16) for a, v in ABI["kernel_params_in_cbank0"]["observed_offsets"].items()}
  assert observed == {"sm_86": 0x160, "sm_89": 0x160, "sm_90": 0x210, "sm_100": 0x380, "sm_120": 0x380}
  for key, k in json_kernels():
    for a in k["attrs"]:
      if a["attr"] == cb.EIATTR_PARAM_CBANK:
        off, size = cb.decode_param_cbank(bytes.fromhex(a["payload_hex"]))
        assert (off, size) == (a["decoded"]["param_offset"], a["decoded"]["param_bytes"]), key
        assert off == observed[k["arch"]], key
        assert k["const0_size"] == off + size, key   # bank 0 section = driver area + parameters

def test_json_kparam_info_decoding():
  seen = 0
  for key, k in json_kernels():
    for a in k["attrs"]:
      if a["attr"] == cb.EIATTR_KPARAM_INFO:
        d = a["decoded"]
        assert cb.decode_kparam_info(bytes.fromhex(a["payload_hex"])) == [(d["ordinal"], d["offset"], d["size_bits31_18"])], key
        seen += 1
  assert seen > 50

def encode_nvinfo(attrs) -> bytes:
  out = b""
  for a in attrs:
    if a["fmt"] == cb.EIFMT_SVAL:
      pay = bytes.fromhex(a["payload_hex"]); out += struct.pack("<BBH", a["fmt"], a["attr"], len(pay)) + pay
    else: out += struct.pack("<BBH", a["fmt"], a["attr"], a.get("value", 0))
  return out

def test_json_nvinfo_records_parse():
  for key, k in json_kernels():
    recs = cb.parse_nvinfo(encode_nvinfo(k["attrs"]))
    assert [(f, a) for f, a, _ in recs] == [(a["fmt"], a["attr"]) for a in k["attrs"]], key
    for (f, _, v), a in zip(recs, k["attrs"]):
      assert v == (bytes.fromhex(a["payload_hex"]) if f == cb.EIFMT_SVAL else a.get("value", 0)), key

def test_nvinfo_bad_records():
  with pytest.raises(cb.CubinError, match="format 7"): cb.parse_nvinfo(struct.pack("<BBH", 7, 0x2f, 0))
  with pytest.raises(cb.CubinError, match="overruns"): cb.parse_nvinfo(struct.pack("<BBH", 4, 0x2f, 8) + b"\0" * 4)

# ---- cubins built here ----

@pytest.mark.parametrize("arch", ARCHS)
def test_kernel_facts_match_ptxas(built, arch):
  data, info = built[arch]
  img = cb.load_cubin(data)
  sm = int(arch[3:])
  assert img.arch == sm and set(img.kernels) == set(EXPECTED_PARAMS)
  observed = ABI["kernel_params_in_cbank0"]["observed_offsets"]
  elf = ELFFile(io.BytesIO(data))
  for name, k in img.kernels.items():
    assert k.registers == info[name]["registers"], name
    assert k.local_bytes == info[name]["stack"], name
    assert k.shared_static - k.shared_reserved == info[name]["smem"], name
    assert k.params == EXPECTED_PARAMS[name], name
    assert k.param_size == max((o + s for _, o, s in k.params), default=0), name
    if arch in observed: assert k.param_cbank_offset == int(observed[arch], 16), name
    assert k.const_banks[0][1] == k.param_cbank_offset + k.param_size, name
    assert k.text_offset % 128 == 0
    assert bytes(img.image[k.text_offset:k.text_offset + k.text_size]) == elf.get_section_by_name(f".text.{name}").data()
  assert img.kernels["k_local"].local_bytes >= 1024           # float buf[256] lives in local memory
  assert img.kernels["k_smem"].max_threads == 128 and img.kernels["k_params"].max_threads is None
  assert img.kernels["k_smem"].num_barriers == 1
  smem = img.kernels["k_smem"]
  assert (smem.shared_static, smem.shared_reserved) == ((2048, 0x400) if sm >= 90 else (1024, 0))
  # module-wide banks: 3 = __constant__ data, 4 = table of global addresses
  off3, size3 = smem.const_banks[3]
  assert size3 == 16 and struct.unpack_from("<4f", img.image, off3) == (1, 2, 3, 4)
  assert smem.const_banks[4][1] == 24

@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90", "sm_120"])   # SHT_REL (sm_8x) and SHT_RELA (sm_90+)
def test_relocations(built, arch):
  data, _ = built[arch]
  base = 0x7f12_3400_0000
  img = cb.load_cubin(data, base)
  sym = {n: img.symbols[n][0] for n in ("gscale", "garr", "gptr")}
  assert {r.type for r in img.relocs} == {cb.R_CUDA_64, cb.R_CUDA_G64}
  off4, _size4 = img.kernels["k_smem"].const_banks[4]
  table = set(struct.unpack_from("<3Q", img.image, off4))
  assert table == {base + o for o in sym.values()}                        # R_CUDA_64 into constant bank 4
  assert struct.unpack_from("<Q", img.image, sym["gptr"])[0] == base + sym["garr"]   # R_CUDA_G64 in .nv.global.init
  assert struct.unpack_from("<f", img.image, sym["gscale"])[0] == 2.5
  # relocating to a new base gives exactly what loading at that base gives
  other = 0x2_0000_0000
  cb.relocate(img, other)
  assert img.image == cb.load_cubin(data, other).image and img.base_va == other
  # and only the relocated words differ from an image at base 0
  zero = cb.load_cubin(data).image
  diff = {i // 8 * 8 for i in range(len(zero)) if zero[i] != img.image[i]}
  assert diff <= {r.offset for r in img.relocs} and len(diff) == 4
  with pytest.raises(cb.CubinError, match="aligned"): cb.relocate(img, base + 4)

@pytest.mark.parametrize("assembler", ["nvjitlink", "ptxas"])
def test_ptx_launch_bounds_via_assembler(monkeypatch, tmp_path, assembler):
  from compiler.assemble.ptx_assembler import assemble_ptx
  monkeypatch.setenv("HCQRT_CACHE", str(tmp_path))
  monkeypatch.setenv("PTX_ASSEMBLER", assembler)
  ptx = """.version 8.0
.target sm_90
.address_size 64
.visible .entry kreq(.param .u64 p) .reqntid 64, 2, 1
{ .reg .b64 %rd<3>; .reg .b32 %r<2>; ld.param.u64 %rd1, [p]; cvta.to.global.u64 %rd2, %rd1;
  mov.u32 %r1, %tid.x; st.global.u32 [%rd2], %r1; ret; }
.visible .entry kmax(.param .u64 p, .param .f32 x) .maxntid 256, 1, 1
{ .reg .b64 %rd<3>; .reg .f32 %f<2>; ld.param.u64 %rd1, [p]; ld.param.f32 %f1, [x]; cvta.to.global.u64 %rd2, %rd1;
  st.global.f32 [%rd2], %f1; ret; }
"""
  img = cb.load_cubin(assemble_ptx(ptx, "sm_90"))
  kreq, kmax = img.kernels["kreq"], img.kernels["kmax"]
  assert kreq.reqntid == (64, 2, 1) and kmax.max_threads == 256 and kmax.reqntid is None
  assert kreq.params == [(0, 0, 8)] and kmax.params == [(0, 0, 8), (1, 8, 4)]
  assert kreq.param_cbank_offset == kmax.param_cbank_offset == 0x210
  assert kreq.registers > 0 and kreq.text_offset != kmax.text_offset

# ---- errors ----

def _section_file_offset(data: bytes, name: str) -> int:
  return ELFFile(io.BytesIO(data)).get_section_by_name(name)["sh_offset"]

def test_bad_elf_headers(built):
  data, _ = built["sm_90"]
  with pytest.raises(cb.CubinError, match="not an ELF"): cb.load_cubin(b"PTX" + data[3:])
  bad = bytearray(data); struct.pack_into("<H", bad, 18, 62)   # e_machine = EM_X86_64
  with pytest.raises(cb.CubinError, match="EM_CUDA"): cb.load_cubin(bytes(bad))
  bad = bytearray(data); bad[7] = 0x99
  with pytest.raises(cb.CubinError, match="OSABI 0x99"): cb.load_cubin(bytes(bad))

def test_older_abi_takes_sm_from_low_byte(built):
  # EI_OSABI 0x33 / ABI version 7 cubins (older toolkits) keep the SM number in e_flags bits 7:0
  data = bytearray(built["sm_90"][0])
  data[7], data[8] = cb.ELFOSABI_CUDA_V1, 7
  struct.pack_into("<I", data, 0x30, 0x5a)   # e_flags: SM 90 in bits 7:0, bits 15:8 zero
  assert cb.load_cubin(bytes(data)).arch == 90

def test_unknown_relocation_type_is_named(built):
  data = bytearray(built["sm_90"][0])
  off = _section_file_offset(bytes(data), ".rela.nv.constant4")
  struct.pack_into("<I", data, off + 8, 0x37)     # r_info low half = type: R_CUDA_ABS32_32, not handled
  with pytest.raises(cb.CubinError, match=r"relocation type 0x37 in \.rela\.nv\.constant4"): cb.load_cubin(bytes(data))

def test_relocation_against_undefined_symbol(built):
  data = bytearray(built["sm_89"][0])
  elf = ELFFile(io.BytesIO(bytes(data)))
  symtab = elf.get_section_by_name(".symtab")
  idx = next(i for i, s in enumerate(symtab.iter_symbols()) if s.name == "garr")
  struct.pack_into("<H", data, symtab["sh_offset"] + idx * 24 + 6, 0)   # st_shndx = SHN_UNDEF
  with pytest.raises(cb.CubinError, match="undefined symbol 'garr'"): cb.load_cubin(bytes(data))
