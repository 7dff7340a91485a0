"""The NV mock's own class tables (hcqrt/mock/nv/classdefs.py) against the facts extracted from the real headers
(../shared/abi/nvidia_methods.json, or its copy in tests/abi_facts where the checkout has no ../shared, as on a GPU
box: tests/abi/test_abi_facts.py keeps the two equal): every method offset, field range and QMD bit the mock decodes. The
mock must not share the backend's ioctl_defs, so a wrong number there cannot pass both sides."""
import ast, pathlib
import pytest
from hcqrt.mock.nv import classdefs as CD
from tests.abi_facts import load

@pytest.fixture(scope="module")
def facts():
  return load("nvidia_methods")

HEADER = {cls: f"NV{cls:04X}" for cls in CD.CLASS_NAMES}

@pytest.mark.parametrize("cls", sorted(CD.CLASS_NAMES))
def test_methods_match_headers(facts, cls):
  hdr = facts["classes_full"][HEADER[cls]]
  assert hdr["class_ids"][CD.CLASS_NAMES[cls]] == cls
  methods = hdr["methods"]
  t = CD.table(cls)
  for name, (off, fields) in t.methods.items():
    m = methods.get(name)
    if m is None:   # Hopper/Blackwell host headers are abridged: those methods are read from NVC56F (same offsets)
      assert (cls & 0xFF) == 0x6F and cls != 0xC56F, f"{HEADER[cls]} has no {name}"
      m = facts["classes_full"]["NVC56F"]["methods"][name]
    hoff = m["offset"]["values"]["0"] if isinstance(m["offset"], dict) else m["offset"]   # indexed: NAME(0)
    if isinstance(m["offset"], dict): assert m["offset"]["stride"] == 4 and t.name_at(off + 4 * 7) == name
    assert hoff == off, f"{HEADER[cls]}_{name}: mock {off:#x}, header {hoff:#x}"
    for f, bits in fields.items():
      hf = m["fields"].get(f) or facts["classes_full"]["NVC56F"]["methods"][name]["fields"][f]
      assert tuple(hf["bits"]) == bits, f"{HEADER[cls]}_{name}_{f}: mock {bits}, header {hf['bits']}"

def test_missing_methods_really_missing(facts):
  for cls, names in {**CD.COMPUTE_MISSING, **CD.COPY_MISSING}.items():
    for n in names: assert n not in facts["classes_full"][HEADER[cls]]["methods"]

def test_sem_op_values(facts):
  vals = facts["classes_full"]["NVC56F"]["methods"]["SEM_EXECUTE"]["fields"]["OPERATION"]["values"]
  assert {k: vals[k] for k in CD.SEM_OP} == CD.SEM_OP
  pcas = facts["classes_full"]["NVCBC0"]["methods"]["SEND_SIGNALING_PCAS2_B"]["fields"]["PCAS_ACTION"]["values"]
  assert {pcas["SCHEDULE"], pcas["INVALIDATE_COPY_SCHEDULE"], pcas["PREFETCH_SCHEDULE"]} == CD.PCAS_ACTION_SCHEDULES

QMD_HEADERS = {"V03_00": ["NVC6C0_QMDV03_00", "NVC7C0_QMDV03_00", "NVC9C0_QMDV03_00"], "V04_00": ["NVCBC0_QMDV04_00"],
               "V05_00": ["NVCDC0_QMDV05_00", "NVCEC0_QMDV05_00"]}

@pytest.mark.parametrize("version", sorted(CD.QMD))
def test_qmd_fields_match_headers(facts, version):
  for h in QMD_HEADERS[version]:
    hf = facts["qmd_full"][h]["fields"]
    for name, spec in CD.QMD[version].items():
      hname = CD.V03_HEADER_NAMES.get(name, name) if version == "V03_00" else name
      f = hf[hname]
      if len(spec) == 3:
        hi, lo, stride = spec
        assert f["stride_bits"] == stride and tuple(f["values"]["0"]) == (hi, lo), f"{h}_{hname}: mock {spec}, header {f}"
      else: assert tuple(f) == spec, f"{h}_{hname}: mock {spec}, header {f}"
  if version != "V03_00":
    assert facts["qmd_full"][QMD_HEADERS[version][0]]["values"]["QMD_TYPE"]["GRID_CTA"] == CD.QMD_TYPE_GRID_CTA
  assert facts["summary"]["qmd_versions_by_class"]["bytes_spanned_by_defined_fields (highest defined bit + 1, /8; not an official size)"][QMD_HEADERS[version][0]] == CD.QMD_BYTES[version]

def test_gpfifo_header_userd(facts):
  s = facts["summary"]
  assert s["userd"]["GPGet_offset"] == CD.USERD_GPGET and s["userd"]["GPPut_offset"] == CD.USERD_GPPUT
  mh = s["method_header"]
  assert (mh["DMA_SEC_OP_INC_METHOD"], mh["DMA_SEC_OP_NON_INC_METHOD"], mh["DMA_SEC_OP_IMMD_DATA_METHOD"], mh["DMA_SEC_OP_ONE_INC"],
          mh["DMA_SEC_OP_END_PB_SEGMENT"]) == (CD.SEC_INC, CD.SEC_NON_INC, CD.SEC_IMMD, CD.SEC_ONE_INC, CD.SEC_END_SEGMENT)
  # a header built from the header's field ranges decodes to its parts
  w = (CD.SEC_INC << mh["DMA_SEC_OP"][1]) | (3 << mh["DMA_METHOD_COUNT"][1]) | (5 << mh["DMA_METHOD_SUBCHANNEL"][1]) | (0x2B4 >> 2)
  assert CD.decode_header(w) == (CD.SEC_INC, 5, 0x2B4, 3)
  g = s["gpfifo_entry"]
  e = (0x12345678 & ~3) | (0xAB << 32) | (17 << (32 + g["entry1_dword_bits"]["LENGTH"][1])) | (1 << (32 + g["entry1_dword_bits"]["SYNC"][1]))
  assert CD.decode_gp_entry(e) == (0xAB12345678, 17, True)

def test_mock_does_not_import_backend_tables():
  root = pathlib.Path(CD.__file__).parent
  for f in ("gpfifo.py", "kernels.py", "classdefs.py"):
    tree = ast.parse((root / f).read_text())
    mods = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] + [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in mods if m and (m.startswith(("ioctl_defs", "hcqrt.nv")))], f"{f} imports {mods}"
