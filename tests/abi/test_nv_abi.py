"""Every NVIDIA ABI fact in ioctl_defs.nv checked against /work/shared/abi/nvidia_*.json.

Each test iterates OUR tables and looks every fact up in the JSON (so nothing we define goes
unchecked), and where it makes sense also the other way round. Facts the JSON does not hold are
listed explicitly below as 'from headers, not in JSON'.
"""
import re
import pytest
from hypothesis import given, settings, strategies as st
from ioctl_defs.nv import abi as abimod, structs, ioctl, ctrl, classes, status, flags, methods, qmd

from tests.abi_facts import load as load_facts
RM = load_facts("nvidia_rm")
MT = load_facts("nvidia_methods")
JSTRUCTS = {k: v for g in RM["structs"].values() for k, v in g.items()}
# structs the JSON lacks, from ctrl2080gr.h (NV2080_CTRL_GR_GET_SM_TO_GPC_TPC_MAPPINGS_PARAMS: smId[240] of {gpcId, tpcId},
# smCount, grRouteInfo); the params size is also checked against the JSON's ctrl_cmds params_sizeof in test_ctrl
JSTRUCTS.update({
  "NV2080_CTRL_GR_SM_ID": {"sizeof": 8, "alignof": 4, "flat_offsets": {"gpcId": [0, 4], "tpcId": [4, 4]}},
  "NV2080_CTRL_GR_GET_SM_TO_GPC_TPC_MAPPINGS_PARAMS": {"sizeof": 1944, "alignof": 8, "flat_offsets": {
    "smId": [0, 1920], "smId[0].gpcId": [0, 4], "smId[0].tpcId": [4, 4], "smCount": [1920, 4], "grRouteInfo": [1928, 16],
    "grRouteInfo.flags": [1928, 4], "grRouteInfo.route": [1936, 8]}}})
# from headers, not in JSON (the JSON has its cmd and params_sizeof, 8348): OGKM@595.45.04
# src/common/sdk/nvidia/inc/ctrl/ctrl0000/ctrl0000system.h:1197-1206 (MAX_ATTACHED_GPUS 32, its square 1024, TABLE_SIZE 9)
JSTRUCTS["NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS"] = {"sizeof": 8348, "alignof": 4, "flat_offsets": {
  "gpuIds": [0, 128], "gpuCount": [128, 4], "p2pCaps": [132, 4], "p2pOptimalReadCEs": [136, 4], "p2pOptimalWriteCEs": [140, 4],
  "p2pCapsStatus": [144, 9], "busPeerIds": [156, 4096], "busEgmPeerIds": [4252, 4096]}}
OUR_STRUCTS = [name for name, _ in structs.STRUCTS]
# 535 facts from headers, not in the JSON's 535 differences: OGKM@535.288.01 ctrl0000system.h:1194-1202 ends the struct at
# busPeerIds (busEgmPeerIds came in 550.40.07), so it is 4252 bytes; RM refuses any other paramsSize (control.c:497-506)
FROM_HEADERS_535 = {"NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS": (4252, ["busEgmPeerIds"])}

# ---- facts from headers, not in JSON ----
# 570 layouts: compiled from open-gpu-kernel-modules tags 570.86.15 and 570.211.01 (identical) with gcc.
# name -> (sizeof, {path: new offset}, fields absent in 570). Structs not listed are identical to 580.
FROM_HEADERS_570 = {
  "NVOS46_PARAMETERS": (56, {"dmaOffset": 40, "status": 48}, ["flags2", "kindOverride"]),
  "NV_VASPACE_ALLOCATION_PARAMETERS": (48, {}, ["pasid"]),
  "NV0000_CTRL_GPU_GET_PROBED_IDS_PARAMS": (256, {}, ["gpuFlags"]),
  "NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS": (404, {}, []),
  "NV2080_CTRL_GPU_GET_INFO_V2_PARAMS": (524, {}, []),
  "NV2080_CTRL_FB_GET_INFO_V2_PARAMS": (460, {}, []),
  "NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS": (2, {}, ["bSkipEnable"]),
  "NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS": (2, {}, ["bSkipEnable"]),
}
# array members whose size changes with their bound (size follows from sizeof)
FROM_HEADERS_570_ARRAY_SIZES = {("NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS", "classList"): 400,
  ("NV2080_CTRL_GPU_GET_INFO_V2_PARAMS", "gpuInfoList"): 520, ("NV2080_CTRL_FB_GET_INFO_V2_PARAMS", "fbInfoList"): 456}

def flat(ffi, ctype, prefix="", base=0) -> dict[str, list[int]]:
  """Every member path of a cffi struct -> [offset, size], named like the JSON's flat_offsets."""
  out = {}
  for name, f in ctype.fields:
    path, t = f"{prefix}{name}", f.type
    out[path] = [base + f.offset, ffi.sizeof(t)]
    if t.kind in ("struct", "union"): out.update(flat(ffi, t, path + ".", base + f.offset))
    elif t.kind == "array" and t.item.kind == "struct": out.update(flat(ffi, t.item, path + "[0].", base + f.offset))
  return out

def our_flat(series, name):
  ffi = abimod._ffi(series)
  return ffi.sizeof(name), flat(ffi, ffi.typeof(name))

@pytest.mark.parametrize("name", OUR_STRUCTS)
def test_struct_layout_580(name):
  j = JSTRUCTS[name]
  size, fl = our_flat("580", name)
  assert size == j["sizeof"], f"{name} sizeof"
  assert abimod._ffi("580").alignof(name) == j["alignof"], f"{name} alignof"
  assert fl == j["flat_offsets"], f"{name}: member offsets/sizes differ from the JSON"

def _expected_535(name):
  """580 JSON layout with the recorded 535 differences undone."""
  j = JSTRUCTS[name]
  size, fl = j["sizeof"], {k: list(v) for k, v in j["flat_offsets"].items()}
  diff = RM["layout_differences_other_driver_versions"]["details"]["535.288.01"]["structs_that_differ (change shown as <other tag> -> 580.142)"]
  for change in diff.get(name, []):
    if m := re.fullmatch(r"sizeof (\d+) -> (\d+)", change): size = int(m.group(1))
    elif m := re.fullmatch(r"\+([\w.\[\]]+)@\d+", change):
      fl = {k: v for k, v in fl.items() if k != m.group(1) and not k.startswith(m.group(1) + ".") and not k.startswith(m.group(1) + "[")}
    elif m := re.fullmatch(r"([\w.\[\]]+): \[(\d+), (\d+)\] -> \[\d+, \d+\]", change): fl[m.group(1)] = [int(m.group(2)), int(m.group(3))]
    else: raise AssertionError(f"unhandled 535 diff entry for {name}: {change}")
  if name in FROM_HEADERS_535:
    size, absent = FROM_HEADERS_535[name]
    fl = {k: v for k, v in fl.items() if k not in absent}
  return size, fl

@pytest.mark.parametrize("name", OUR_STRUCTS)
def test_struct_layout_535(name):
  assert our_flat("535", name) == _expected_535(name)

@pytest.mark.parametrize("name", OUR_STRUCTS)
def test_struct_layout_570(name):
  size, fl = JSTRUCTS[name]["sizeof"], {k: list(v) for k, v in JSTRUCTS[name]["flat_offsets"].items()}
  if name in FROM_HEADERS_570:   # from headers, not in JSON
    size, moved, absent = FROM_HEADERS_570[name]
    fl = {k: v for k, v in fl.items() if k.split(".")[0].split("[")[0] not in absent}
    for k, off in moved.items(): fl[k][0] = off
    for (s, k), sz in FROM_HEADERS_570_ARRAY_SIZES.items():
      if s == name: fl[k][1] = sz
  assert our_flat("570", name) == (size, fl)

def test_580_point_releases_identical():
  d = RM["layout_differences_other_driver_versions"]["details"]["580.65.06"]
  assert all(not v for v in d.values()), "580.65.06 differs from 580.142: the 580 series would need splitting"

# ---- escapes and UVM commands ----
FD_KIND = {"ctl": "ctl", "device": "device", "ctl_or_device": "any"}

@pytest.mark.parametrize("name", list(ioctl.ESCAPES))
def test_escape(name):
  nr, struct, fd = ioctl.ESCAPES[name]
  j = RM["escapes"][name]
  assert nr == j["nr"] and struct == j["param_type"] and fd == FD_KIND[j["fd"]]
  a = abimod.abi_for_version("580.142")
  if struct != "NvU32": assert a.sizeof(struct) == j["param_sizeof"]
  assert a.escape(name) == j["request_IOWR"]
  assert ioctl.iowr(ioctl.NV_IOCTL_MAGIC, nr, j["param_sizeof"]) == j["request_IOWR"]
  if "alt_param_type" in j:
    assert ioctl.NV_ESC_RM_ALLOC_ALT_STRUCT == j["alt_param_type"] and a.escape(name, alt=True) == j["alt_request_IOWR"]
  if "request_IOWR_for_N_entries" in j:
    assert a.escape(name, count=3) == ioctl.iowr(0x46, nr, 3 * j["param_sizeof"])

def test_escape_requests_535():
  """Escapes whose size differs in 535 get 535's request number."""
  a = abimod.abi_for_version("535.288.01")
  diffs = RM["layout_differences_other_driver_versions"]["details"]["535.288.01"]["escapes_that_differ [other, 580.142] as [nr, param_sizeof]"]
  checked = 0
  for name, (other, _) in diffs.items():
    if name in ioctl.ESCAPES and other:
      assert a.escape(name) == ioctl.iowr(0x46, other[0], other[1]); checked += 1
  assert checked == 2   # MAP_MEMORY_DMA and UNMAP_MEMORY_DMA

def test_ioctl_constants():
  enc = RM["ioctl_encoding"]["nvidia_devices"]
  assert ioctl.NV_IOCTL_MAGIC == enc["magic"] and ioctl.NV_IOCTL_BASE == enc["NV_IOCTL_BASE"]
  assert ioctl.NV_ABSOLUTE_MAX_IOCTL_SIZE == enc["NV_ABSOLUTE_MAX_IOCTL_SIZE"]
  c = RM["constants_by_header"]["nv-ioctl.h"]
  for n in ("NV_RM_API_VERSION_CMD_STRICT", "NV_RM_API_VERSION_CMD_RELAXED", "NV_RM_API_VERSION_CMD_QUERY",
            "NV_RM_API_VERSION_REPLY_UNRECOGNIZED", "NV_RM_API_VERSION_REPLY_RECOGNIZED", "NV_RM_API_VERSION_STRING_LENGTH"):
    assert getattr(ioctl, n) == c[n], n
  for name, (nr, _, _) in ioctl.ESCAPES.items():
    hdr = "nv_escape.h" if nr < 200 else "nv-ioctl-numbers.h"
    assert RM["constants_by_header"][hdr][name] == nr
  with pytest.raises(ValueError): ioctl.iowr(0x46, 1, 1 << 14)
  assert ioctl.ioc_decode(0xC020462B) == (3, 0x46, 0x2B, 32)

@pytest.mark.parametrize("name", list(ioctl.UVM_IOCTLS))
def test_uvm_ioctl(name):
  cmd, struct = ioctl.UVM_IOCTLS[name]
  j = RM["uvm_ioctls"].get(name) or RM["compute_client_subset"]["uvm_ioctls"][name]
  assert cmd == j["cmd"] and struct == j["params"]
  assert abimod.abi_for_version("580.142").uvm(name)[2] == j["params_sizeof"]

def test_uvm_535_sizes():
  d = RM["layout_differences_other_driver_versions"]["details"]["535.288.01"]["uvm_ioctls_that_differ [other, 580.142] as [cmd, params_sizeof]"]
  a = abimod.abi_for_version("535.288.01")
  assert a.uvm("UVM_MAP_EXTERNAL_ALLOCATION")[2] == d["UVM_MAP_EXTERNAL_ALLOCATION"][0][1]

def test_uvm_enums():
  e = RM["enums"]
  for ours, jname, prefix in ((ioctl.UVM_GPU_MAPPING_TYPE, "UvmGpuMappingType", "UvmGpuMappingType"),
                              (ioctl.UVM_GPU_CACHING_TYPE, "UvmGpuCachingType", "UvmGpuCachingType")):
    vals = e[jname]["values"]
    for k, v in ours.items(): assert vals[prefix + "".join(w.capitalize() for w in k.split("_"))] == v, k

# ---- control commands ----
@pytest.mark.parametrize("name", list(ctrl.CTRL))
def test_ctrl(name):
  cmd, struct = ctrl.CTRL[name]
  j = RM["ctrl_cmds"][name]
  assert cmd == j["cmd"] and struct == j["params"]
  assert abimod.abi_for_version("580.142").ctrl_size(name) == j["params_sizeof"]
  assert ctrl.ctrl_class(cmd) == int(j["decoded"]["class_or_interface"], 16)

def test_ctrl_535_sizes():
  d = RM["layout_differences_other_driver_versions"]["details"]["535.288.01"]["compute_client_ctrl_cmds_that_differ [other, 580.142] as [cmd, params_sizeof]"]
  a = abimod.abi_for_version("535.288.01")
  n = 0
  for name, (other, _) in d.items():
    if name in ctrl.CTRL: assert a.ctrl(name)[0] == other[0] and a.ctrl_size(name) == other[1], name; n += 1
  assert n >= 6

# ---- classes ----
@pytest.mark.parametrize("name", list(classes.CLASSES))
def test_class_id(name):
  assert classes.CLASSES[name] == RM["classes"][name]

@pytest.mark.parametrize("arch", list(classes.ARCHS))
def test_arch_classes_in_chip_table(arch):
  a = classes.ARCHS[arch]
  eng = RM["chip_class_lists"][a.chip]["engine_classes"]
  for cls in (a.gpfifo, a.compute, a.copy, a.usermode):
    assert eng[classes.class_name(cls)]["id"] == cls, f"{arch}: {classes.class_name(cls)} not in {a.chip}'s RM class table"
  qv = MT["summary"]["qmd_versions_by_class"]["which_version_a_class_consumes"]
  key = next(k for k in qv if classes.class_name(a.compute).split("_COMPUTE_")[0] in k)
  assert f"QMD {a.qmd} " in qv[key]

def test_arch_from_classlist():
  gh100 = [v["id"] for v in RM["chip_class_lists"]["GH100"]["engine_classes"].values()]
  assert classes.arch_from_classlist(gh100).name == "hopper"
  ad102 = [v["id"] for v in RM["chip_class_lists"]["AD102"]["engine_classes"].values()]
  assert classes.arch_from_classlist(ad102).name == "ada"
  with pytest.raises(RuntimeError, match="no supported compute architecture"): classes.arch_from_classlist([0xC6C0])

# ---- status codes ----
def test_status_codes_both_ways():
  js = {k: v["value"] for k, v in RM["nv_status_codes"].items()}
  assert status.NV_STATUS == js
  for k, v in js.items(): assert status.status_name(v) == k
  assert status.status_name(0x7FFF0000) == "NV_STATUS_0x7fff0000"

# ---- flag fields and constants ----
ALLCONST = {}
for _h, _v in RM["constants_by_header"].items():
  for _k, _x in _v.items(): ALLCONST.setdefault(_k, _x)

def test_flags():
  for k, (hi, lo) in flags.FIELDS.items(): assert ALLCONST[k] == [hi, lo], k
  for k, v in flags.VALUES.items(): assert ALLCONST[k] == v, k
  assert flags.drf("NVOS32_ATTR_LOCATION", "PCI") == 1 << 25
  with pytest.raises(ValueError): flags.drf("NVOS32_ATTR_LOCATION", 4)

# ---- methods ----
# Host-method headers for Hopper/Blackwell (NVC86F/NVC96F/NVCA6F) are abridged; methods/values they lack are
# taken from NVC56F (AMPERE_CHANNEL_GPFIFO_A). This test records exactly which facts come from NVC56F.
FROM_NVC56F = set()

@pytest.mark.parametrize("cls", list(methods.METHODS))
def test_methods(cls):
  header, table = methods.METHODS[cls]
  km = MT["key_methods"][header]
  for mname, m in table.items():
    src = km.get(mname)
    if src is None:
      assert header in ("NVC86F", "NVC96F", "NVCA6F"), f"{header}.{mname} not in JSON"
      FROM_NVC56F.add((header, mname)); src = MT["key_methods"]["NVC56F"][mname]
    off = src["offset"]
    if isinstance(off, dict): assert m.offset == off["values"]["0"] and methods.LOAD_INLINE_QMD_DATA_STRIDE == off["stride"]
    else: assert m.offset == off, f"{header}.{mname} offset"
    for fname, f in m.fields.items():
      jf = src["fields"].get(fname) or MT["key_methods"]["NVC56F"][mname]["fields"][fname]
      assert [f.hi, f.lo] == jf["bits"], f"{header}.{mname}.{fname} bits"
      vals = dict(MT["key_methods"]["NVC56F"][mname]["fields"][fname].get("values", {})) if header in ("NVC86F", "NVC96F", "NVCA6F") else {}
      vals.update(jf.get("values", {}))
      for vname, v in f.values.items(): assert vals[vname] == v, f"{header}.{mname}.{fname}_{vname}"
  # compute/copy: a method of the family's base table is in this class's table exactly when its header defines it
  base = {"C0": "NVCBC0", "B5": "NVC8B5"}.get(header[-2:])
  if base:
    for mname in methods.METHODS[int(base[2:], 16)][1]:
      assert (mname in table) == (mname in km), f"{header}: presence of {mname}"

def test_method_offsets_across_classes():
  for group in ("compute", "copy", "channel"):
    for mname, per in MT["method_offsets_across_classes"][group].items():
      for header, off in per.items():
        cls = int(header[2:], 16)
        if off is None or cls not in methods.METHODS or mname not in methods.methods_for(cls): continue
        want = off["values"]["0"] if isinstance(off, dict) else int(off, 16)
        assert methods.methods_for(cls)[mname].offset == want, (header, mname)

def test_method_header_and_gpfifo_and_userd():
  s = MT["summary"]
  mh = s["method_header"]
  assert list(methods.METHOD_ADDRESS) == mh["DMA_METHOD_ADDRESS"] and list(methods.METHOD_SUBCHANNEL) == mh["DMA_METHOD_SUBCHANNEL"]
  assert list(methods.METHOD_COUNT) == mh["DMA_METHOD_COUNT"] and list(methods.SEC_OP) == mh["DMA_SEC_OP"]
  for n in ("INC_METHOD", "NON_INC_METHOD", "IMMD_DATA_METHOD", "ONE_INC", "END_PB_SEGMENT"):
    assert getattr(methods, f"SEC_OP_{n}") == mh[f"DMA_SEC_OP_{n}"]
  assert methods.NUMBER_OF_SUBCHANNELS == mh["NUMBER_OF_SUBCHANNELS"]
  g = s["gpfifo_entry"]
  assert methods.GP_ENTRY_SIZE == g["size_bytes"]
  assert list(methods.GP_ENTRY0_GET) == g["entry0_dword_bits"]["GET"] and list(methods.GP_ENTRY0_FETCH) == g["entry0_dword_bits"]["FETCH"]
  for n in ("GET_HI", "LEVEL", "LENGTH", "SYNC"): assert list(getattr(methods, f"GP_ENTRY1_{n}")) == g["entry1_dword_bits"][n]
  for n in ("LEVEL_MAIN", "LEVEL_SUBROUTINE", "SYNC_PROCEED", "SYNC_WAIT"): assert getattr(methods, f"GP_ENTRY1_{n}") == g["entry1_values"][n]
  u = s["userd"]
  assert methods.USERD_GP_GET == u["GPGet_offset"] and methods.USERD_GP_PUT == u["GPPut_offset"]
  for lay in u["layouts"].values(): assert lay["sizeof"] == methods.USERD_SIZE and lay["offsets"]["GPPut"] == methods.USERD_GP_PUT
  assert methods.NVC361_NOTIFY_CHANNEL_PENDING == s["doorbell"]["NVC361_NOTIFY_CHANNEL_PENDING"]
  # encoders agree with the documented formulas
  e = methods.gpfifo_entry(0x12_3456_7890, 100, sync=True)
  assert methods.decode_gpfifo_entry(e) == (0x12_3456_7890, 100, True)
  assert e & 0xFFFFFFFF == 0x34567890 and (e >> 32) & 0xFF == 0x12 and (e >> 42) & 0x1FFFFF == 100 and e >> 63 == 1
  h = methods.method_header(3, 0x300, 5, methods.SEC_OP_NON_INC_METHOD)
  assert methods.decode_method_header(h) == (3, 3, 0x300, 5)
  with pytest.raises(ValueError): methods.method_header(0, 0x301, 1)

# ---- QMD ----
QMD_SRC = {"V03_00": "NVC9C0_QMDV03_00", "V04_00": "NVCBC0_QMDV04_00", "V05_00": "NVCDC0_QMDV05_00"}

@pytest.mark.parametrize("version", list(qmd.QMD_FIELDS))
def test_qmd_fields(version):
  key, full = MT["qmd_key_fields"][QMD_SRC[version]], MT["qmd_full"][QMD_SRC[version]]
  for name, f in qmd.QMD_FIELDS[version].items():
    if name in key:
      jb, jvals = key[name]["bits"], key[name].get("values", {})
    else:   # not among the key fields: look it up in the full table
      jb, jvals = full["fields"][name], full["values"].get(name, {})
    if isinstance(jb, dict):
      assert f.stride == jb["stride_bits"], name
      for i, bits in jb["values"].items(): assert list(f.bits(int(i))) == bits, f"{name}({i})"
    else:
      assert f.stride == 0 and [f.hi, f.lo] == jb, name
    for vname, v in f.values: assert jvals[vname] == v, f"{name}_{vname}"
  assert qmd.QMD_SIZE[version] == MT["summary"]["qmd_versions_by_class"]["bytes_spanned_by_defined_fields (highest defined bit + 1, /8; not an official size)"][QMD_SRC[version]]

@pytest.mark.parametrize("version", list(qmd.QMD_FIELDS))
def test_qmd_all_key_fields_present(version):
  assert set(MT["qmd_key_fields"][QMD_SRC[version]]) <= set(qmd.QMD_FIELDS[version])

@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(qmd.QMD_FIELDS)), st.data())
def test_qmd_pack_roundtrip(version, data):
  names = sorted(qmd.QMD_FIELDS[version])
  q, ref = qmd.QMD(version), {}
  for _ in range(8):
    n = data.draw(st.sampled_from(names))
    f = qmd.QMD_FIELDS[version][n]
    i = data.draw(st.integers(0, 1)) if f.stride else None
    hi, lo = f.bits(i or 0)
    v = data.draw(st.integers(0, (1 << (hi - lo + 1)) - 1))
    q.set(n, v, i)
    for k in [k for k in ref if not (k[2] < lo or k[3] > hi)]: del ref[k]   # overlapping fields get overwritten
    ref[(n, i, hi, lo)] = v
  for (n, i, _, _), v in ref.items(): assert q.get(n, i) == v
  assert len(q.data) == qmd.QMD_SIZE[version]

def test_qmd_errors_and_bytes():
  q = qmd.QMD("V04_00")
  assert q.get("QMD_MAJOR_VERSION") == 4 and q.data[583 // 8] >> (580 % 8) == 4
  with pytest.raises(ValueError, match="does not fit"): q.set("GRID_HEIGHT", 1 << 16)
  with pytest.raises(KeyError): q.set("CTA_RASTER_WIDTH", 1)
  with pytest.raises(ValueError, match="indexed"): q.set("CONSTANT_BUFFER_VALID", 1)
  with pytest.raises(ValueError): qmd.QMD("V09_00")
  q.set_address("CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6", "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6", 0x7F_FFFF_FFC0, shift=6, i=2)
  assert q.get_address("CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6", "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6", shift=6, i=2) == 0x7F_FFFF_FFC0

# ---- version selection ----
def test_abi_for_version():
  for v, s in (("580.65.06", "580"), ("580.142", "580"), ("570.211.01", "570"), ("535.288.01", "535"), (" 580.95.05\n", "580")):
    assert abimod.abi_for_version(v).series == s
  for bad in ("575.64", "595.45.04", "470.1.1"):
    with pytest.raises(abimod.UnsupportedDriverVersion, match="not supported"): abimod.abi_for_version(bad)
  with pytest.raises(abimod.UnsupportedDriverVersion, match="not an NVIDIA driver version"): abimod.abi_for_version("banana")
  a = abimod.abi_for_version("580.142")
  p = a.new("NVOS21_PARAMETERS", hClass=0x41, paramsSize=4)
  assert p.hClass == 0x41 and p.status == 0
  assert "NV_ESC_RM_ALLOC" in a.describe_request(a.escape("NV_ESC_RM_ALLOC")) and a.describe_request(0x30000001) == "UVM_INITIALIZE"
