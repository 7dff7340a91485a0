"""ioctl_defs.amd against the AMD fact tables (../shared/abi/amd_kfd.json, amd_packets.json, amd_codeobject.json,
and tests/abi_facts/amd_sdma.json): struct layouts through cffi, request numbers per KFD header version,
flags, packet layouts dword by dword, register offsets and descriptor bit fields."""
import json, re, struct
import pytest
from ioctl_defs.amd import aql, codeobject, kd, kfd, pm4, regs, sdma
from tests.abi_facts import HERE, load

KFD, PKT, CO = load("amd_kfd"), load("amd_packets"), load("amd_codeobject")
SDMA = json.loads((HERE / "amd_sdma.json").read_text())
HEADERS = {"linux_uapi_6.1_debian": (1, 11), "rocm_libhsakmt_2025_08": (1, 17), "tinygrad_extra_hip_gpu_driver": (1, 17)}
# the only member whose name differs between the compiled headers (same offset and size): we call it pad everywhere
FIELD_ALIASES = {("kfd_ioctl_set_memory_policy_args", "misc_process_flag"): "pad"}

def _fields(ffi, ctype):
  """{name: (offset, size)} of a cffi struct, nested named structs as dotted names, anonymous unions flattened."""
  out, t = {}, ffi.typeof(ctype) if isinstance(ctype, str) else ctype
  for name, f in t.fields:
    out[name] = (f.offset, ffi.sizeof(f.type))
    if f.type.kind == "struct":
      for sub, (o, s) in _fields(ffi, f.type).items(): out[f"{name}.{sub}"] = (f.offset + o, s)
  return out

# ---------------- KFD ----------------
def test_header_versions_are_what_the_abi_keys_on():
  for h, ver in HEADERS.items():
    v = KFD["headers_compiled"][h]["kfd_ioctl_version"]
    assert (v["major"], v["minor"]) == ver

@pytest.mark.parametrize("header", list(HEADERS))
def test_kfd_struct_layouts(header):
  abi = kfd.abi_for_version(*HEADERS[header])
  checked = 0
  for name, rec in KFD["compute_client_subset"]["records"].items():
    layout = rec.get("per_header_layouts", {}).get(header, rec["layout"]) if header in rec["defined_in"] else None
    if layout is None:   # absent from this header: absent from our declarations for that version, or unused by it
      if name == "kfd_hsa_signal_event_data":
        with pytest.raises(ValueError, match="unknown size"): abi.sizeof(name)
      continue
    assert abi.sizeof(name) == layout["size"], f"{header}: sizeof(struct {name})"
    ours = _fields(abi.ffi, f"struct {name}")
    for f in layout["fields"]:
      fname = FIELD_ALIASES.get((name, f["name"]), f["name"])
      assert fname in ours, f"{header}: struct {name} lacks {f['name']}"
      assert ours[fname] == (f["offset"], f["size"]), f"{header}: {name}.{f['name']}"
      checked += 1
  assert checked > 130

def test_create_queue_size_depends_on_version():
  for ver, size, req in [((1, 11), 88, 0xC0584B02), ((1, 16), 88, 0xC0584B02), ((1, 17), 96, 0xC0604B02), ((1, 22), 96, 0xC0604B02)]:
    abi = kfd.abi_for_version(*ver)
    assert abi.sizeof("kfd_ioctl_create_queue_args") == size and abi.request("AMDKFD_IOC_CREATE_QUEUE") == req
  diffs = {d["name"]: d["request_hex_per_header"] for d in KFD["request_number_differences_between_headers"]}
  for h, ver in HEADERS.items(): assert kfd.abi_for_version(*ver).request("AMDKFD_IOC_CREATE_QUEUE") == int(diffs["AMDKFD_IOC_CREATE_QUEUE"][h], 16)
  names = [n for n, _ in kfd.abi_for_version(1, 13).ffi.typeof("struct kfd_event_data").fields]
  assert "signal_event_data" not in names and "signal_event_data" in [n for n, _ in kfd.abi_for_version(1, 14).ffi.typeof("struct kfd_event_data").fields]

@pytest.mark.parametrize("header", list(HEADERS))
def test_kfd_request_numbers(header):
  abi = kfd.abi_for_version(*HEADERS[header])
  subset = KFD["compute_client_subset"]["ioctls"]
  assert {i["name"] for i in subset} == set(kfd.IOCTLS), "the table holds exactly the 28-ioctl compute subset"
  for i in subset:
    ph = i["per_header"][header]
    if ph is None:
      assert not abi.has(i["name"]), f"{i['name']} is not in {header}"
      with pytest.raises(kfd.UnsupportedKFDVersion): abi.request(i["name"])
      continue
    direction, nr, struct_name, _ = kfd.IOCTLS[i["name"]]
    assert abi.has(i["name"]) and (nr, direction) == (int(ph["nr_hex"], 16), ph["dir"]) and ph["arg"] == f"struct {struct_name}"
    assert abi.request(i["name"]) == int(ph["request_hex"], 16), i["name"]
    assert abi.sizeof(struct_name) == ph["size"]
  # and against the full per-header ioctl table (names, nr, the computed number)
  full = {x["name"]: x for x in KFD["kfd_headers"][header]["ioctls"]}
  for name in kfd.IOCTLS:
    if name in full: assert abi.request(name) == full[name]["request"]

def test_ioc_encoding_and_ranges():
  for h in HEADERS:
    enc = KFD["kfd_headers"][h]["ioctl_encoding_x86_64"]
    assert (kfd.IOC_NRSHIFT, kfd.IOC_TYPESHIFT, kfd.IOC_SIZESHIFT, kfd.IOC_DIRSHIFT) == (enc["_IOC_NRSHIFT"], enc["_IOC_TYPESHIFT"], enc["_IOC_SIZESHIFT"], enc["_IOC_DIRSHIFT"])
    assert (kfd.IOC_WRITE, kfd.IOC_READ, kfd.IOC_SIZEBITS, kfd.AMDKFD_IOCTL_BASE) == (enc["_IOC_WRITE"], enc["_IOC_READ"], enc["_IOC_SIZEBITS"], enc["AMDKFD_IOCTL_BASE"])
  assert kfd.AMDKFD_COMMAND_END_1_11 == KFD["kfd_headers"]["linux_uapi_6.1_debian"]["constants"]["command_ranges"]["AMDKFD_COMMAND_END"]
  assert kfd.AMDKFD_COMMAND_END_1_17 == KFD["kfd_headers"]["rocm_libhsakmt_2025_08"]["constants"]["command_ranges"]["AMDKFD_COMMAND_END"]
  assert kfd.ioc_decode(0xC0604B02) == (3, ord("K"), 2, 96)
  with pytest.raises(ValueError, match="14-bit"): kfd.ioc(3, 75, 1, 1 << 14)

def test_kfd_versions_refused():
  for bad in [(2, 0), (1, 10), (0, 99)]:
    with pytest.raises(kfd.UnsupportedKFDVersion, match="not supported"): kfd.abi_for_version(*bad)
  with pytest.raises(kfd.UnsupportedKFDVersion, match="RUNTIME_ENABLE needs KFD 1.13"): kfd.abi_for_version(1, 12).request("AMDKFD_IOC_RUNTIME_ENABLE")
  assert kfd.abi_for_version(1, 13).request("AMDKFD_IOC_RUNTIME_ENABLE") == 0xC0104B25   # "1.13 - Add debugger API"

@pytest.mark.parametrize("header", list(HEADERS))
def test_kfd_constants(header):
  c = KFD["kfd_headers"][header]["constants"]
  flags = {k[len("KFD_IOC_ALLOC_MEM_FLAGS_"):]: v for k, v in c["alloc_mem_flags"].items()}
  if "CONTIGUOUS_BEST_EFFORT" in flags: flags["CONTIGUOUS"] = flags.pop("CONTIGUOUS_BEST_EFFORT")   # same bit, ROCm's name
  for name, v in flags.items(): assert kfd.ALLOC_MEM_FLAGS[name] == v, name
  hexes = {k[len("KFD_IOC_ALLOC_MEM_FLAGS_"):]: int(v, 16) for k, v in KFD["kfd_headers"][header]["alloc_mem_flags_hex"].items()}
  assert all(kfd.ALLOC_MEM_FLAGS.get(k, kfd.ALLOC_MEM_FLAGS.get("CONTIGUOUS")) == v for k, v in hexes.items())
  if header == "linux_uapi_6.1_debian": assert "EXT_COHERENT" not in flags and "CONTIGUOUS" not in flags
  ours_q = {"KFD_IOC_QUEUE_TYPE_COMPUTE": kfd.QUEUE_TYPE_COMPUTE, "KFD_IOC_QUEUE_TYPE_SDMA": kfd.QUEUE_TYPE_SDMA,
            "KFD_IOC_QUEUE_TYPE_COMPUTE_AQL": kfd.QUEUE_TYPE_COMPUTE_AQL, "KFD_IOC_QUEUE_TYPE_SDMA_XGMI": kfd.QUEUE_TYPE_SDMA_XGMI,
            "KFD_IOC_QUEUE_TYPE_SDMA_BY_ENG_ID": kfd.QUEUE_TYPE_SDMA_BY_ENG_ID}
  for k, v in c["queue_types"].items(): assert ours_q[k] == v
  ours_e = {"KFD_IOC_EVENT_SIGNAL": kfd.EVENT_SIGNAL, "KFD_IOC_EVENT_NODECHANGE": kfd.EVENT_NODECHANGE,
            "KFD_IOC_EVENT_DEVICESTATECHANGE": kfd.EVENT_DEVICESTATECHANGE, "KFD_IOC_EVENT_HW_EXCEPTION": kfd.EVENT_HW_EXCEPTION,
            "KFD_IOC_EVENT_SYSTEM_EVENT": kfd.EVENT_SYSTEM_EVENT, "KFD_IOC_EVENT_DEBUG_EVENT": kfd.EVENT_DEBUG_EVENT,
            "KFD_IOC_EVENT_PROFILE_EVENT": kfd.EVENT_PROFILE_EVENT, "KFD_IOC_EVENT_QUEUE_EVENT": kfd.EVENT_QUEUE_EVENT,
            "KFD_IOC_EVENT_MEMORY": kfd.EVENT_MEMORY}
  assert c["event_types"] == {k: ours_e[k] for k in c["event_types"]}
  assert c["wait_results"] == {"KFD_IOC_WAIT_RESULT_COMPLETE": kfd.WAIT_RESULT_COMPLETE, "KFD_IOC_WAIT_RESULT_TIMEOUT": kfd.WAIT_RESULT_TIMEOUT,
                               "KFD_IOC_WAIT_RESULT_FAIL": kfd.WAIT_RESULT_FAIL}
  assert c["cache_policies"] == {"KFD_IOC_CACHE_POLICY_COHERENT": kfd.CACHE_POLICY_COHERENT, "KFD_IOC_CACHE_POLICY_NONCOHERENT": kfd.CACHE_POLICY_NONCOHERENT}
  ours_l = {"KFD_MAX_QUEUE_PERCENTAGE": kfd.MAX_QUEUE_PERCENTAGE, "KFD_MAX_QUEUE_PRIORITY": kfd.MAX_QUEUE_PRIORITY, "KFD_MIN_QUEUE_RING_SIZE": kfd.MIN_QUEUE_RING_SIZE}
  assert c["queue_limits"] == {k: ours_l[k] for k in c["queue_limits"]}
  assert c["other"]["KFD_SIGNAL_EVENT_LIMIT"] == kfd.SIGNAL_EVENT_LIMIT
  if "runtime_enable" in c:
    assert all(c["runtime_enable"][k] == v for k, v in {"KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK": kfd.RUNTIME_ENABLE_MODE_ENABLE_MASK,
      "KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK": kfd.RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK,
      "KFD_RUNTIME_ENABLE_CAPS_SUPPORTS_CORE_DUMP_MASK": kfd.RUNTIME_ENABLE_CAPS_SUPPORTS_CORE_DUMP_MASK}.items() if k in c["runtime_enable"])
    assert "KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK" in c["runtime_enable"]

def test_kfd_kernel_conventions():
  notes = " ".join(n["fact"] for n in KFD["kernel_behaviour_notes"])
  m = re.search(r"KFD_MMAP_TYPE_SHIFT = (\d+), KFD_MMAP_GPU_ID_SHIFT = (\d+), KFD_GPU_ID_HASH_WIDTH = (\d+)", notes)
  assert tuple(map(int, m.groups())) == (kfd.MMAP_TYPE_SHIFT, kfd.MMAP_GPU_ID_SHIFT, kfd.GPU_ID_HASH_WIDTH)
  m = re.search(r"\(3 = doorbell, 2 = events, 1 = reserved mem, 0 = MMIO remap\)", notes)
  assert m and (kfd.MMAP_TYPE_DOORBELL, kfd.MMAP_TYPE_EVENTS, kfd.MMAP_TYPE_RESERVED_MEM, kfd.MMAP_TYPE_MMIO) == (3, 2, 1, 0)
  assert "length 0x2000" in notes and kfd.DOORBELL_PROCESS_FRAME_SIZE == 0x2000
  assert "(4096) slots * 8 bytes = 32 KiB" in notes and kfd.EVENT_PAGE_SIZE == 32 * 1024
  assert "(gpu_id << 32) + idr_handle" in notes and kfd.make_handle(0x1234, 5) == (0x1234 << 32) + 5
  assert kfd.mmap_offset(kfd.MMAP_TYPE_DOORBELL, 0xBEEF, 0x18) == (3 << 62) | (0xBEEF << 46) | 0x18
  with pytest.raises(ValueError): kfd.mmap_offset(kfd.MMAP_TYPE_DOORBELL, 1 << 16)
  assert any("KFD_MIN_QUEUE_RING_SIZE = 1024" in d for d in KFD["newer_upstream_not_compiled"]["compute_relevant_deltas_read_by_hand"])
  assert kfd.MIN_QUEUE_RING_SIZE == 1024
  for version, target in kfd.GFX_TARGET_VERSION.items():
    assert re.search(rf"\({target}[,)].* -> {version}\b", notes), (target, version)

def test_kfd_new_sets_fields():
  abi = kfd.abi_for_version(1, 17)
  p = abi.new("AMDKFD_IOC_CREATE_QUEUE", ring_size=4096, queue_type=kfd.QUEUE_TYPE_COMPUTE)
  raw = bytes(abi.ffi.buffer(p))
  assert len(raw) == 96 and struct.unpack_from("<II", raw, 32) == (4096, 0) and struct.unpack_from("<I", raw, 40) == (0,)

# ---------------- AQL ----------------
def test_aql_layouts():
  import cffi
  ffi = cffi.FFI(); ffi.cdef(aql.CDEF)
  for name in ["hsa_kernel_dispatch_packet_t", "hsa_barrier_and_packet_t", "hsa_barrier_or_packet_t", "hsa_amd_vendor_packet_header_t",
               "hsa_amd_barrier_value_packet_t", "amd_aql_pm4_ib_packet_t", "hsa_signal_t", "amd_signal_t"]:
    rec = PKT["aql"]["records"][name]
    assert ffi.sizeof(name) == rec["size"], name
    ours = _fields(ffi, name)
    for f in rec["fields"]: assert ours[f["name"]] == (f["offset"], f["size"]), f"{name}.{f['name']}"
  assert PKT["aql"]["records"]["amd_signal_t"]["align"] == aql.AMD_SIGNAL_ALIGN
  q = {f["name"]: f["offset"] for f in PKT["aql"]["records"]["amd_queue_t"]["fields"]}
  assert (q["write_dispatch_id"], q["read_dispatch_id"]) == (aql.AMD_QUEUE_WRITE_DISPATCH_ID_OFFSET, aql.AMD_QUEUE_READ_DISPATCH_ID_OFFSET)
  assert (q["max_cu_id"], q["max_wave_id"], q["read_dispatch_id_field_base_byte_offset"], q["queue_properties"], q["queue_inactive_signal"]) == \
    (aql.AMD_QUEUE_MAX_CU_ID_OFFSET, aql.AMD_QUEUE_MAX_WAVE_ID_OFFSET, aql.AMD_QUEUE_READ_DISPATCH_ID_FIELD_BASE_BYTE_OFFSET_OFFSET,
     aql.AMD_QUEUE_PROPERTIES_OFFSET, aql.AMD_QUEUE_INACTIVE_SIGNAL_OFFSET)
  assert PKT["aql"]["records"]["amd_queue_t"]["size"] == aql.AMD_QUEUE_BYTES
  assert PKT["aql"]["records"]["amd_queue_t"]["align"] == aql.AMD_QUEUE_ALIGN == PKT["aql"]["constants"]["AMD_QUEUE_ALIGN_BYTES"]

def test_aql_enums_and_header():
  e = PKT["aql"]["enums"]
  assert e["hsa_packet_type_t"] == {"HSA_PACKET_TYPE_VENDOR_SPECIFIC": aql.PACKET_TYPE_VENDOR_SPECIFIC, "HSA_PACKET_TYPE_INVALID": aql.PACKET_TYPE_INVALID,
    "HSA_PACKET_TYPE_KERNEL_DISPATCH": aql.PACKET_TYPE_KERNEL_DISPATCH, "HSA_PACKET_TYPE_BARRIER_AND": aql.PACKET_TYPE_BARRIER_AND,
    "HSA_PACKET_TYPE_AGENT_DISPATCH": aql.PACKET_TYPE_AGENT_DISPATCH, "HSA_PACKET_TYPE_BARRIER_OR": aql.PACKET_TYPE_BARRIER_OR}
  h, w = e["hsa_packet_header_t"], e["hsa_packet_header_width_t"]
  assert (h["HSA_PACKET_HEADER_TYPE"], h["HSA_PACKET_HEADER_BARRIER"], h["HSA_PACKET_HEADER_ACQUIRE_FENCE_SCOPE"], h["HSA_PACKET_HEADER_RELEASE_FENCE_SCOPE"]) == \
         (aql.HEADER_TYPE_SHIFT, aql.HEADER_BARRIER_SHIFT, aql.HEADER_ACQUIRE_FENCE_SCOPE_SHIFT, aql.HEADER_RELEASE_FENCE_SCOPE_SHIFT)
  assert (w["HSA_PACKET_HEADER_WIDTH_TYPE"], w["HSA_PACKET_HEADER_WIDTH_BARRIER"], w["HSA_PACKET_HEADER_WIDTH_ACQUIRE_FENCE_SCOPE"]) == (8, 1, 2)
  assert e["hsa_fence_scope_t"] == {"HSA_FENCE_SCOPE_NONE": aql.FENCE_SCOPE_NONE, "HSA_FENCE_SCOPE_AGENT": aql.FENCE_SCOPE_AGENT, "HSA_FENCE_SCOPE_SYSTEM": aql.FENCE_SCOPE_SYSTEM}
  assert e["hsa_signal_condition_t"] == {"HSA_SIGNAL_CONDITION_EQ": aql.SIGNAL_CONDITION_EQ, "HSA_SIGNAL_CONDITION_NE": aql.SIGNAL_CONDITION_NE,
                                         "HSA_SIGNAL_CONDITION_LT": aql.SIGNAL_CONDITION_LT, "HSA_SIGNAL_CONDITION_GTE": aql.SIGNAL_CONDITION_GTE}
  assert e["hsa_kernel_dispatch_packet_setup_t"]["HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS"] == aql.SETUP_DIMENSIONS_SHIFT
  assert e["hsa_kernel_dispatch_packet_setup_width_t"]["HSA_KERNEL_DISPATCH_PACKET_SETUP_WIDTH_DIMENSIONS"] == aql.SETUP_DIMENSIONS_WIDTH
  assert e["hsa_amd_packet_type_t"]["HSA_AMD_PACKET_TYPE_BARRIER_VALUE"] == aql.AMD_PACKET_TYPE_BARRIER_VALUE
  assert e["amd_signal_kind_t"] == {"AMD_SIGNAL_KIND_INVALID": aql.AMD_SIGNAL_KIND_INVALID, "AMD_SIGNAL_KIND_USER": aql.AMD_SIGNAL_KIND_USER,
                                    "AMD_SIGNAL_KIND_DOORBELL": aql.AMD_SIGNAL_KIND_DOORBELL, "AMD_SIGNAL_KIND_LEGACY_DOORBELL": aql.AMD_SIGNAL_KIND_LEGACY_DOORBELL}
  c = PKT["aql"]["constants"]
  assert (c["AMD_AQL_PM4_IB_FORMAT"], c["AMD_AQL_PM4_IB_DW_COUNT_REMAIN"]) == (aql.AMD_AQL_PM4_IB_FORMAT, aql.AMD_AQL_PM4_IB_DW_COUNT_REMAIN)
  ex = PKT["aql"]["worked_examples_not_normative"]
  assert aql.header(aql.PACKET_TYPE_KERNEL_DISPATCH, True, aql.FENCE_SCOPE_SYSTEM, aql.FENCE_SCOPE_SYSTEM) == int(ex["kernel_dispatch_header_barrier_system_acquire_system_release"], 16)
  assert aql.header(aql.PACKET_TYPE_INVALID) == int(ex["invalid_packet_header"], 16)

def test_aql_builders_match_layout():
  import cffi
  ffi = cffi.FFI(); ffi.cdef(aql.CDEF)
  raw = aql.kernel_dispatch(0x7F00_0000_1040, 0x7F00_0000_2000, (256, 4, 1), (64, 2, 1), group_segment_size=1024, completion_signal=0x1234)
  buf = bytearray(raw)   # keep the bytes alive while the cast pointer is used
  p = ffi.cast("hsa_kernel_dispatch_packet_t *", ffi.from_buffer(buf))
  assert len(raw) == aql.PACKET_SIZE and p.header == 0x1502 and p.setup == 2 << aql.SETUP_DIMENSIONS_SHIFT
  assert (p.workgroup_size_x, p.workgroup_size_y, p.workgroup_size_z, p.grid_size_x, p.grid_size_y, p.grid_size_z) == (64, 2, 1, 256, 4, 1)
  assert (p.kernel_object, p.kernarg_address, p.group_segment_size, p.completion_signal.handle) == (0x7F00_0000_1040, 0x7F00_0000_2000, 1024, 0x1234)
  buf2 = bytearray(aql.barrier_and([7, 9], 3))
  b = ffi.cast("hsa_barrier_and_packet_t *", ffi.from_buffer(buf2))
  assert (b.header & 0xFF, [b.dep_signal[i].handle for i in range(5)], b.completion_signal.handle) == (aql.PACKET_TYPE_BARRIER_AND, [7, 9, 0, 0, 0], 3)
  assert aql.barrier_or([1])[0] == aql.PACKET_TYPE_BARRIER_OR
  with pytest.raises(ValueError, match="64-byte"): aql.kernel_dispatch(0x1010, 0, (1, 1, 1), (1, 1, 1))
  with pytest.raises(ValueError, match="at most 5"): aql.barrier_and([1] * 6)

# ---------------- PM4 ----------------
GFX = {"gfx10_gfx11_nvd_h": 11, "gfx9_soc15d_h": 9}

@pytest.mark.parametrize("src", list(GFX))
def test_pm4_opcodes_and_header(src):
  ops = PKT["pm4"][src]["opcodes"]
  for name, op in pm4.OPCODES.items(): assert int(ops[f"PACKET3_{name}"], 16) == op, name
  for ex in PKT["pm4"][src]["PACKET3_examples"]:
    assert pm4.header(int(ex["op"], 16), ex["count"]) == int(ex["header"], 16)
    assert pm4.decode_header(int(ex["header"], 16)) == (3, ex["count"], int(ex["op"], 16))
  assert "bit 1 = shader type" in PKT["pm4"]["header_encoding"]["type3_header"] and pm4.header(pm4.NOP, 0, pm4.SHADER_TYPE_COMPUTE) == 0xC0001002
  c = {k: int(v, 16) for k, v in PKT["pm4"][src]["constants"].items()}
  assert (c["PACKET3_SET_SH_REG_START"], c["PACKET3_SET_SH_REG_END"], c["PACKET3_SET_UCONFIG_REG_START"], c["PACKET3_SET_UCONFIG_REG_END"]) == \
         (pm4.SET_SH_REG_START, pm4.SET_SH_REG_END, pm4.SET_UCONFIG_REG_START, pm4.SET_UCONFIG_REG_END)
  assert (c["CP_PACKET2"], c["WR_ONE_ADDR"], c["WR_CONFIRM"], c["INDIRECT_BUFFER_VALID"], c["PACKET_TYPE3"]) == \
         (pm4.CP_PACKET2, pm4.WR_ONE_ADDR, pm4.WR_CONFIRM, pm4.IB_VALID, pm4.PACKET_TYPE3)
  s = PKT["pm4"][src]["field_shifts_from_function_macros"]
  assert (s["WRITE_DATA_DST_SEL"], s["WRITE_DATA_CACHE_POLICY"], s["WRITE_DATA_ENGINE_SEL"]) == (pm4.WD_DST_SEL_SHIFT, pm4.WD_CACHE_POLICY_SHIFT, pm4.WD_ENGINE_SEL_SHIFT)
  assert (s["WAIT_REG_MEM_FUNCTION"], s["WAIT_REG_MEM_MEM_SPACE"], s["WAIT_REG_MEM_OPERATION"], s["WAIT_REG_MEM_ENGINE"]) == \
         (pm4.WRM_FUNCTION_SHIFT, pm4.WRM_MEM_SPACE_SHIFT, pm4.WRM_OPERATION_SHIFT, pm4.WRM_ENGINE_SHIFT)
  assert (s["INDIRECT_BUFFER_CACHE_POLICY"], 1 << s["INDIRECT_BUFFER_PRE_ENB"], 1 << s["INDIRECT_BUFFER_PRE_RESUME"]) == (pm4.IB_CACHE_POLICY_SHIFT, pm4.IB_PRE_ENB, pm4.IB_PRE_RESUME)
  assert (s["EVENT_TYPE"], s["EVENT_INDEX"]) == (pm4.RM_EVENT_TYPE_SHIFT, pm4.RM_EVENT_INDEX_SHIFT)
  if src == "gfx10_gfx11_nvd_h":
    assert (s["PACKET3_RELEASE_MEM_DATA_SEL"], s["PACKET3_RELEASE_MEM_INT_SEL"], s["PACKET3_RELEASE_MEM_DST_SEL"], s["PACKET3_RELEASE_MEM_CACHE_POLICY"]) == \
           (pm4.RM_DATA_SEL_SHIFT, pm4.RM_INT_SEL_SHIFT, pm4.RM_DST_SEL_SHIFT, pm4.RM_CACHE_POLICY_SHIFT)
    gcr = {"GLM_WB": pm4.RM_GCR_GLM_WB, "GLM_INV": pm4.RM_GCR_GLM_INV, "GLV_INV": pm4.RM_GCR_GLV_INV, "GL1_INV": pm4.RM_GCR_GL1_INV,
           "GL2_US": pm4.RM_GCR_GL2_US, "GL2_RANGE": pm4.RM_GCR_GL2_RANGE, "GL2_DISCARD": pm4.RM_GCR_GL2_DISCARD, "GL2_INV": pm4.RM_GCR_GL2_INV,
           "GL2_WB": pm4.RM_GCR_GL2_WB, "SEQ": pm4.RM_GCR_SEQ}
    for k, v in gcr.items(): assert c[f"PACKET3_RELEASE_MEM_GCR_{k}"] == v, k
    assert c["PACKET3_RELEASE_MEM_EXECUTE"] == pm4.RM_EXECUTE
    acq = {"GLI_INV": pm4.GCR_GLI_INV_SHIFT, "GL1_RANGE": pm4.GCR_GL1_RANGE_SHIFT, "GL2_RANGE": pm4.GCR_GL2_RANGE_SHIFT, "SEQ": pm4.GCR_SEQ_SHIFT}
    for k, v in acq.items(): assert s[f"PACKET3_ACQUIRE_MEM_GCR_CNTL_{k}"] == v, k
    bits = {"GLM_WB": pm4.GCR_GLM_WB, "GLM_INV": pm4.GCR_GLM_INV, "GLK_WB": pm4.GCR_GLK_WB, "GLK_INV": pm4.GCR_GLK_INV, "GLV_INV": pm4.GCR_GLV_INV,
            "GL1_INV": pm4.GCR_GL1_INV, "GL2_US": pm4.GCR_GL2_US, "GL2_DISCARD": pm4.GCR_GL2_DISCARD, "GL2_INV": pm4.GCR_GL2_INV, "GL2_WB": pm4.GCR_GL2_WB}
    for k, v in bits.items(): assert 1 << s[f"PACKET3_ACQUIRE_MEM_GCR_CNTL_{k}"] == v, k
  else:
    assert (s["DATA_SEL"], s["INT_SEL"], s["DST_SEL"]) == (pm4.RM_DATA_SEL_SHIFT, pm4.RM_INT_SEL_SHIFT, pm4.RM_DST_SEL_SHIFT)
    eop = {"EOP_TCL1_VOL_ACTION_EN": pm4.EOP_TCL1_VOL_ACTION_EN, "EOP_TC_VOL_ACTION_EN": pm4.EOP_TC_VOL_ACTION_EN, "EOP_TC_WB_ACTION_EN": pm4.EOP_TC_WB_ACTION_EN,
           "EOP_TCL1_ACTION_EN": pm4.EOP_TCL1_ACTION_EN, "EOP_TC_ACTION_EN": pm4.EOP_TC_ACTION_EN, "EOP_TC_NC_ACTION_EN": pm4.EOP_TC_NC_ACTION_EN,
           "EOP_TC_MD_ACTION_EN": pm4.EOP_TC_MD_ACTION_EN, "EOP_EXEC": pm4.EOP_EXEC}
    for k, v in eop.items(): assert c[k] == v, k
    coher = {"TC_NC": pm4.COHER_TC_NC_ACTION_ENA, "TC_WC": pm4.COHER_TC_WC_ACTION_ENA, "TC_INV_METADATA": pm4.COHER_TC_INV_METADATA_ACTION_ENA,
             "TCL1_VOL": pm4.COHER_TCL1_VOL_ACTION_ENA, "TC_WB": pm4.COHER_TC_WB_ACTION_ENA, "TCL1": pm4.COHER_TCL1_ACTION_ENA, "TC": pm4.COHER_TC_ACTION_ENA,
             "CB": pm4.COHER_CB_ACTION_ENA, "DB": pm4.COHER_DB_ACTION_ENA, "SH_KCACHE": pm4.COHER_SH_KCACHE_ACTION_ENA,
             "SH_KCACHE_VOL": pm4.COHER_SH_KCACHE_VOL_ACTION_ENA, "SH_ICACHE": pm4.COHER_SH_ICACHE_ACTION_ENA, "SH_KCACHE_WB": pm4.COHER_SH_KCACHE_WB_ACTION_ENA}
    for k, v in coher.items(): assert 1 << s[f"PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_{k}_ACTION_ENA"] == v, k

def test_pm4_event_types_and_release_mem_enums():
  for table in ("vgt_event_types_soc21_enum_h", "vgt_event_types_crosscheck_gfx9_tinygrad_autogen_soc_9_py"):
    v = PKT["pm4"][table]
    assert (v["CACHE_FLUSH_TS"], v["CS_PARTIAL_FLUSH"], v["CACHE_FLUSH_AND_INV_TS_EVENT"], v["CACHE_FLUSH_AND_INV_EVENT"], v["BOTTOM_OF_PIPE_TS"], v["CS_DONE"]) == \
           (pm4.CACHE_FLUSH_TS, pm4.CS_PARTIAL_FLUSH, pm4.CACHE_FLUSH_AND_INV_TS_EVENT, pm4.CACHE_FLUSH_AND_INV_EVENT, pm4.BOTTOM_OF_PIPE_TS, pm4.CS_DONE)
  e = PKT["pm4"]["kfd_pm4_headers_ai"]["enums"]
  assert (e["event_index__mec_release_mem__end_of_pipe"], e["event_index__mec_release_mem__shader_done"]) == (pm4.EVENT_INDEX_END_OF_PIPE, pm4.EVENT_INDEX_SHADER_DONE)
  assert (e["dst_sel__mec_release_mem__memory_controller"], e["dst_sel__mec_release_mem__tc_l2"]) == (pm4.DST_SEL_MEMORY_CONTROLLER, pm4.DST_SEL_TC_L2)
  assert [e[f"int_sel__mec_release_mem__{k}"] for k in ("none", "send_interrupt_only", "send_interrupt_after_write_confirm", "send_data_after_write_confirm")] == \
         [pm4.INT_SEL_NONE, pm4.INT_SEL_SEND_INTERRUPT_ONLY, pm4.INT_SEL_SEND_INTERRUPT_AFTER_WRITE_CONFIRM, pm4.INT_SEL_SEND_DATA_AFTER_WRITE_CONFIRM]
  assert [e[f"data_sel__mec_release_mem__{k}"] for k in ("none", "send_32_bit_low", "send_64_bit_data", "send_gpu_clock_counter", "send_cp_perfcounter_hi_lo")] == \
         [pm4.DATA_SEL_NONE, pm4.DATA_SEL_32_BIT_LOW, pm4.DATA_SEL_64_BIT_DATA, pm4.DATA_SEL_GPU_CLOCK_COUNTER, pm4.DATA_SEL_CP_PERFCOUNTER]
  # the bit positions of pm4_mec_release_mem's fields (clang layout) against our shifts
  bits = {f["name"]: (f["dword"], f["dword_bits"][0]) for f in PKT["pm4"]["kfd_pm4_headers_ai"]["pm4_mec_release_mem"]["fields"] if f.get("dword_bits")}
  assert bits["bitfields2.event_type"] == (1, pm4.RM_EVENT_TYPE_SHIFT) and bits["bitfields2.event_index"] == (1, pm4.RM_EVENT_INDEX_SHIFT)
  assert bits["bitfields2.cache_policy"] == (1, pm4.RM_CACHE_POLICY_SHIFT)
  assert bits["bitfields3.dst_sel"] == (2, pm4.RM_DST_SEL_SHIFT) and bits["bitfields3.int_sel"] == (2, pm4.RM_INT_SEL_SHIFT) and bits["bitfields3.data_sel"] == (2, pm4.RM_DATA_SEL_SHIFT)
  assert bits["bitfields2.tc_action_ena"] == (1, pm4.EOP_TC_ACTION_EN.bit_length() - 1) and bits["bitfields2.tc_wb_action_ena"] == (1, pm4.EOP_TC_WB_ACTION_EN.bit_length() - 1)

def test_pm4_packet_layouts():
  L = PKT["pm4"]["packet_layouts"]
  def count(pkt): return pm4.decode_header(pkt[0])[1]
  assert pm4.decode_header(pm4.nop(3)[0]) == (3, 2, int(L["NOP"]["opcode"], 16)) and len(pm4.nop(3)) == 4
  p = pm4.set_sh_reg(0x2E40, 1, 2, 3)
  assert pm4.decode_header(p[0])[2] == int(L["SET_SH_REG"]["opcode"], 16) and count(p) == 3 and p[1] == 0x240 and p[2:] == [1, 2, 3]
  assert pm4.set_uconfig_reg(0xC010, 5)[1:] == [0x10, 5]
  p = pm4.dispatch_direct(7, 8, 9, regs.dispatch_initiator("gfx1100", wave32=True))
  assert count(p) == L["DISPATCH_DIRECT"]["count"] and p[1:4] == [7, 8, 9] and p[4] & 1 and p[4] & (1 << 15)
  p = pm4.event_write(pm4.CS_PARTIAL_FLUSH, pm4.EVENT_INDEX_CS_PARTIAL_FLUSH)
  assert count(p) == L["EVENT_WRITE"]["count"] and p[1] == 0x407 and "0x00000407" in L["EVENT_WRITE"]["cs_partial_flush"]
  p = pm4.release_mem(0x1_2345_6788, 0xAABB_CCDD_EEFF_0011, cache=pm4.RM_GCR_GL2_WB | pm4.RM_GCR_SEQ, int_sel=pm4.INT_SEL_SEND_DATA_AFTER_WRITE_CONFIRM, ctxid=42)
  assert count(p) == L["RELEASE_MEM"]["count"] and len(p) == 8
  assert p[1] == pm4.CACHE_FLUSH_AND_INV_TS_EVENT | (5 << 8) | pm4.RM_GCR_GL2_WB | pm4.RM_GCR_SEQ
  assert p[2] == (2 << 29) | (3 << 24) and p[3:8] == [0x2345_6788, 1, 0xEEFF_0011, 0xAABB_CCDD, 42]
  p = pm4.acquire_mem(11, gcr_cntl=pm4.GCR_GL2_INV | pm4.GCR_GL2_WB | pm4.GCR_GLI_INV_ALL)
  assert count(p) == L["ACQUIRE_MEM_gfx10_gfx11"]["count"] and p[1:7] == [0, 0xFFFFFFFF, 0x00FFFFFF, 0, 0, 0x0A] and p[7] == (1 << 14) | (1 << 15) | 1
  assert "0, 0xffffffff, 0x00ffffff, 0, 0, 0x0000000A" in L["ACQUIRE_MEM_gfx10_gfx11"]["kernel_usage"]
  p = pm4.acquire_mem(9, coher_cntl=pm4.COHER_TC_ACTION_ENA)
  assert count(p) == L["ACQUIRE_MEM_gfx9"]["count"] and p[1:7] == [pm4.COHER_TC_ACTION_ENA, 0xFFFFFFFF, 0x00FFFFFF, 0, 0, 0x0A]
  with pytest.raises(ValueError, match="gfx9"): pm4.acquire_mem(9, gcr_cntl=1)
  with pytest.raises(ValueError, match="gfx10"): pm4.acquire_mem(11, coher_cntl=1)
  p = pm4.wait_reg_mem(0x1000_0004, 5, function=pm4.WRM_GE)
  assert count(p) == L["WAIT_REG_MEM"]["count"] and p[1] == 5 | (1 << 4) and p[2:] == [0x1000_0004, 0, 5, 0xFFFFFFFF, 4]
  assert re.search(r"0 always,1 <,2 <=,3 ==,4 !=,5 >=,6 >", L["WAIT_REG_MEM"]["body"][0])
  assert (pm4.WRM_ALWAYS, pm4.WRM_LT, pm4.WRM_LE, pm4.WRM_EQ, pm4.WRM_NE, pm4.WRM_GE, pm4.WRM_GT) == tuple(range(7))
  p = pm4.write_data(0x2000, 1, 2)
  assert L["WRITE_DATA"]["count"] == "2 + number of data dwords" and count(p) == 2 + 2
  assert p[1] == (5 << 8) | pm4.WR_CONFIRM and p[2:] == [0x2000, 0, 1, 2]
  assert "DST_SEL (11:8; 0 register, 5 memory async)" in L["WRITE_DATA"]["body"][0]
  assert int(L["PRED_EXEC"]["opcode"], 16) == pm4.PRED_EXEC   # no builder: the facts give count 1 but list one body dword
  p = pm4.indirect_buffer(0x7F00_1234_5670, 100, vmid=3)
  assert count(p) == L["INDIRECT_BUFFER"]["count"] and p[1:3] == [0x1234_5670, 0x7F00]
  fields = {m[0]: (int(m[2]) if m[2] else int(m[1]), int(m[1])) for m in re.findall(r"(\w+) (?:in dwords )?\((?:bits )?(\d+)(?::(\d+))?", L["INDIRECT_BUFFER"]["body"][2])}
  assert fields["IB_SIZE"] == (0, 19) and p[3] & ((1 << 20) - 1) == 100 and fields["CHAIN"][0].bit_length() <= 5
  assert 1 << fields["CHAIN"][0] == pm4.IB_CHAIN and 1 << fields["VALID"][0] == pm4.IB_VALID and fields["VMID"] == (pm4.IB_VMID_SHIFT, 27)
  assert 1 << fields["PRIV"][0] == pm4.IB_PRIV and (p[3] >> pm4.IB_VMID_SHIFT) & 0xF == 3 and p[3] & pm4.IB_VALID

def test_pm4_refuses_bad_packets():
  with pytest.raises(ValueError, match="SH window"): pm4.set_sh_reg(0x2BFF, 0)
  with pytest.raises(ValueError, match="SH window"): pm4.set_sh_reg(0x2FFF, 0, 0)
  with pytest.raises(ValueError, match="14 bits"): pm4.header(pm4.NOP, 1 << 14)
  with pytest.raises(ValueError, match="aligned"): pm4.release_mem(0x1004, 0)
  with pytest.raises(ValueError, match="aligned"): pm4.wait_reg_mem(0x1002, 0)
  with pytest.raises(ValueError, match="20 bits"): pm4.indirect_buffer(0x1000, 1 << 20)
  with pytest.raises(ValueError, match="32 bits"): pm4.packet(pm4.NOP, 1 << 32)

# ---------------- registers ----------------
TARGETS = {"gfx1100": "gfx1100_gc_11_0_0", "gfx942": "gfx942_gc_9_4_3"}

@pytest.mark.parametrize("target", list(TARGETS))
def test_compute_register_offsets(target):
  R = PKT["registers"][TARGETS[target]]["registers"]
  base = int(PKT["registers"]["gc_segment0_base_dwords"][TARGETS[target]]["value"], 16)
  assert regs.GC_BASE[target] == base
  ours = regs.COMPUTE_REGS[target]
  for name, addr in ours.items():
    r = R[f"regCOMPUTE_{name}"]
    assert addr == int(r["abs_dword"], 16) == int(r["offset"], 16) + base, name
    assert regs.sh_offset(target, name) == int(r["set_sh_reg_offset"], 16) and pm4.set_sh_reg(addr, 0)[1] == regs.sh_offset(target, name)
  missing = {k[len("regCOMPUTE_"):] for k in R} - set(ours)
  assert all(m.startswith("DESTINATION_EN_SE") for m in missing), missing   # gfx11 aliases of STATIC_THREAD_MGMT_SE0..3
  for name, s in PKT["registers"]["compute_register_summary"].items():
    assert ours[name[len("regCOMPUTE_"):]] == int(s[TARGETS[target]], 16)

@pytest.mark.parametrize("target", list(TARGETS))
def test_register_fields(target):
  R = PKT["registers"][TARGETS[target]]["registers"]
  di = R["regCOMPUTE_DISPATCH_INITIATOR"]["fields"]
  for name, bit in [("compute_shader_en", regs.DI_COMPUTE_SHADER_EN), ("partial_tg_en", regs.DI_PARTIAL_TG_EN), ("force_start_at_000", regs.DI_FORCE_START_AT_000),
                    ("ordered_append_enbl", regs.DI_ORDERED_APPEND_ENBL), ("use_thread_dimensions", regs.DI_USE_THREAD_DIMENSIONS), ("order_mode", regs.DI_ORDER_MODE),
                    ("scalar_l1_inv_vol", regs.DI_SCALAR_L1_INV_VOL), ("vector_l1_inv_vol", regs.DI_VECTOR_L1_INV_VOL), ("restore", regs.DI_RESTORE)]:
    assert 1 << di[name][0] == bit, name
  if target == "gfx1100":
    assert 1 << di["cs_w32_en"][0] == regs.DI_CS_W32_EN and 1 << di["tunnel_enable"][0] == regs.DI_TUNNEL_ENABLE
    assert 1 << di["amp_shader_en"][0] == regs.DI_AMP_SHADER_EN and 1 << di["disable_disp_prempt_en"][0] == regs.DI_DISABLE_DISP_PREMPT_EN
  else: assert "cs_w32_en" not in di
  for reg, fields in regs.FIELDS[target].items():
    for fname, rng in fields.items(): assert tuple(R[f"regCOMPUTE_{reg}"]["fields"][fname.lower()]) == rng, f"{reg}.{fname}"
  with pytest.raises(ValueError, match="does not fit"): regs.set_field(target, "TMPRING_SIZE", "WAVES", 1 << 12)
  assert regs.dispatch_initiator(target) == (1 << di["compute_shader_en"][0]) | (1 << di["force_start_at_000"][0])
  if target == "gfx942":
    with pytest.raises(ValueError, match="wave32"): regs.dispatch_initiator(target, wave32=True)

# ---------------- kernel descriptor ----------------
def test_kernel_descriptor_layout():
  import cffi
  ffi = cffi.FFI(); ffi.cdef(kd.CDEF)
  for copy in ("rocm_loader_copy", "llvm14_installed"):
    rec = PKT["kernel_descriptor"][copy]["record"]
    assert ffi.sizeof("struct kernel_descriptor") == rec["size"] == kd.KD_SIZE
    ours = _fields(ffi, "struct kernel_descriptor")
    for f in rec["fields"]:
      if f["name"] == "reserved2": assert ours["kernarg_preload"][0] == f["offset"] and ours["kernarg_preload"][1] + ours["reserved3"][1] == f["size"]
      else: assert ours[f["name"]] == (f["offset"], f["size"]), f["name"]
    e = PKT["kernel_descriptor"][copy]["offset_enum"]
    assert (e["GROUP_SEGMENT_FIXED_SIZE_OFFSET"], e["PRIVATE_SEGMENT_FIXED_SIZE_OFFSET"], e["KERNARG_SIZE_OFFSET"], e["KERNEL_CODE_ENTRY_BYTE_OFFSET_OFFSET"],
            e["COMPUTE_PGM_RSRC3_OFFSET"], e["COMPUTE_PGM_RSRC1_OFFSET"], e["COMPUTE_PGM_RSRC2_OFFSET"], e["KERNEL_CODE_PROPERTIES_OFFSET"]) == \
           (kd.GROUP_SEGMENT_FIXED_SIZE_OFFSET, kd.PRIVATE_SEGMENT_FIXED_SIZE_OFFSET, kd.KERNARG_SIZE_OFFSET, kd.KERNEL_CODE_ENTRY_BYTE_OFFSET_OFFSET,
            kd.COMPUTE_PGM_RSRC3_OFFSET, kd.COMPUTE_PGM_RSRC1_OFFSET, kd.COMPUTE_PGM_RSRC2_OFFSET, kd.KERNEL_CODE_PROPERTIES_OFFSET)
  assert PKT["kernel_descriptor"]["newest_llvm_read_not_compiled"]["offset_enum"]["KERNARG_PRELOAD_OFFSET"] == kd.KERNARG_PRELOAD_OFFSET

def test_kernel_descriptor_bit_fields():
  bf = PKT["kernel_descriptor"]["rocm_loader_copy"]["bit_fields"]
  def table(group, prefix): return {k[len(prefix):]: (v["shift"], v["width"]) for k, v in bf[group].items() if "RESERVED" not in k and k.startswith(prefix)}
  assert kd.RSRC1 == table("COMPUTE_PGM_RSRC1", "COMPUTE_PGM_RSRC1_")
  assert kd.RSRC2 == table("COMPUTE_PGM_RSRC2", "COMPUTE_PGM_RSRC2_")
  assert kd.RSRC3_GFX10_PLUS == table("COMPUTE_PGM_RSRC3", "COMPUTE_PGM_RSRC3_GFX10_PLUS_")
  assert kd.RSRC3_GFX90A == table("COMPUTE_PGM_RSRC3", "COMPUTE_PGM_RSRC3_GFX90A_")
  assert kd.KERNEL_CODE_PROPERTY == table("KERNEL_CODE_PROPERTY", "KERNEL_CODE_PROPERTY_")
  newest = PKT["kernel_descriptor"]["newest_llvm_read_not_compiled"]
  assert {k: tuple(v) for k, v in newest["compute_pgm_rsrc3_gfx11"].items()} == kd.RSRC3_GFX10_PLUS
  assert {k: tuple(v) for k, v in newest["compute_pgm_rsrc3_gfx90a_gfx942"].items()} == kd.RSRC3_GFX90A
  # descriptor fields land where the COMPUTE_PGM_RSRC registers have them (the CP copies the words verbatim)
  for target in TARGETS:
    R = PKT["registers"][TARGETS[target]]["registers"]
    assert tuple(R["regCOMPUTE_PGM_RSRC2"]["fields"]["user_sgpr"]) == (kd.RSRC2["USER_SGPR_COUNT"][0], sum(kd.RSRC2["USER_SGPR_COUNT"]) - 1)
    assert tuple(R["regCOMPUTE_PGM_RSRC2"]["fields"]["lds_size"]) == (kd.RSRC2["GRANULATED_LDS_SIZE"][0], sum(kd.RSRC2["GRANULATED_LDS_SIZE"]) - 1)
    assert R["regCOMPUTE_PGM_RSRC1"]["fields"]["priv"][0] == kd.RSRC1["PRIV"][0]

def test_kernel_descriptor_decoder_on_real_objects():
  seen = 0
  for name, obj in CO["inspected_objects"].items():
    target = codeobject.target_of_e_flags(int(obj["e_flags"], 16))
    if target is None: continue
    for d in obj["kernel_descriptors"]:
      raw = struct.pack("<III4xq20xIIIHH4x", d["group_segment_fixed_size"], d["private_segment_fixed_size"], d["kernarg_size"],
                        d["kernel_code_entry_byte_offset"], int(d["compute_pgm_rsrc3"], 16), int(d["compute_pgm_rsrc1"], 16),
                        int(d["compute_pgm_rsrc2"], 16), int(d["kernel_code_properties"], 16), int(d["kernarg_preload"], 16))
      k = kd.decode(raw, target)
      assert kd.encode(k) == raw and k.kernarg_size == d["kernarg_size"]
      for f, v in d["rsrc2_fields"].items(): assert k.rsrc2_fields[f] == v, (name, f)
      for f, v in d["rsrc1_fields"].items():
        assert k.rsrc1_fields[{"ENABLE_DX10_CLAMP/WG_RR_EN(bit21)": "ENABLE_DX10_CLAMP", "ENABLE_IEEE_MODE(bit23)": "ENABLE_IEEE_MODE",
                               "WGP_MODE(bit29)": "WGP_MODE", "MEM_ORDERED(bit30)": "MEM_ORDERED"}.get(f, f)] == v, (name, f)
      for f, v in d["kernel_code_properties_bits"].items(): assert k.properties[f] == v, (name, f)
      assert k.wave32 == (target == "gfx1100" and bool(d["kernel_code_properties_bits"]["ENABLE_WAVEFRONT_SIZE32"]))
      seen += 1
  assert seen >= 8
  with pytest.raises(ValueError, match="wave32"): kd.decode(bytes(56) + (1 << 10).to_bytes(2, "little") + bytes(6), "gfx942")
  with pytest.raises(ValueError, match="64 bytes"): kd.decode(bytes(10), "gfx1100")

# ---------------- code object ----------------
def test_codeobject_constants():
  e = CO["elf_header_facts"]
  assert e["EM_AMDGPU"] == codeobject.EM_AMDGPU
  assert e["EI_OSABI"] == {"ELFOSABI_AMDGPU_HSA": codeobject.ELFOSABI_AMDGPU_HSA, "ELFOSABI_AMDGPU_PAL": codeobject.ELFOSABI_AMDGPU_PAL,
                           "ELFOSABI_AMDGPU_MESA3D": codeobject.ELFOSABI_AMDGPU_MESA3D}
  assert {v: int(k.rsplit("_V", 1)[1]) for k, v in e["EI_ABIVERSION"].items()} == codeobject.CODE_OBJECT_VERSION
  m = e["EF_AMDGPU_MACH_targets_of_interest"]
  assert (int(m["EF_AMDGPU_MACH_AMDGCN_GFX1100"], 16), int(m["EF_AMDGPU_MACH_AMDGCN_GFX942"], 16)) == (codeobject.EF_AMDGPU_MACH_AMDGCN_GFX1100, codeobject.EF_AMDGPU_MACH_AMDGCN_GFX942)
  f = {k: int(v, 16) for k, v in e["e_flags_masks"].items()}
  assert f["EF_AMDGPU_MACH"] == codeobject.EF_AMDGPU_MACH and f["EF_AMDGPU_GENERIC_VERSION"] == codeobject.EF_AMDGPU_GENERIC_VERSION
  for k in ("XNACK_V4", "XNACK_ANY_V4", "XNACK_OFF_V4", "XNACK_ON_V4", "SRAMECC_V4", "SRAMECC_ANY_V4", "SRAMECC_OFF_V4", "SRAMECC_ON_V4"):
    assert f[f"EF_AMDGPU_FEATURE_{k}"] == getattr(codeobject, f"EF_AMDGPU_FEATURE_{k}"), k
  assert CO["notes_facts"]["NT_AMDGPU_METADATA"] == codeobject.NT_AMDGPU_METADATA
  for obj in CO["inspected_objects"].values():   # every object compiled for our targets is recognised, no other is
    mach = obj["e_flags_decoded"]["mach_name"][0] if obj["e_flags_decoded"]["mach_name"] else ""
    assert (codeobject.target_of_e_flags(int(obj["e_flags"], 16)) is not None) == mach.endswith(("GFX1100", "GFX942"))

# ---------------- SDMA ----------------
def _field(pkt, spec):
  dw, shift, mask = spec
  return (pkt[dw] >> shift) & int(mask, 16)

@pytest.mark.parametrize("gfx,key", [(11, "sdma_v6_0_0_gfx11"), (9, "vega10_sdma_gfx9")])
def test_sdma_packets(gfx, key):
  S = SDMA[key]
  op = S["opcodes"]
  assert (op["SDMA_OP_NOP"], op["SDMA_OP_COPY"], op["SDMA_OP_FENCE"], op["SDMA_OP_TRAP"], op["SDMA_OP_POLL_REGMEM"], op["SDMA_OP_ATOMIC"], op["SDMA_OP_TIMESTAMP"]) == \
         (sdma.OP_NOP, sdma.OP_COPY, sdma.OP_FENCE, sdma.OP_TRAP, sdma.OP_POLL_REGMEM, sdma.OP_ATOMIC, sdma.OP_TIMESTAMP)
  assert op["SDMA_OP_DUMMY_TRAP"] == sdma.OP_DUMMY_TRAP[gfx] and S["subops"]["SDMA_SUBOP_COPY_LINEAR"] == sdma.SUBOP_COPY_LINEAR
  assert S["subops"]["SDMA_SUBOP_TIMESTAMP_GET_GLOBAL"] == sdma.SUBOP_TIMESTAMP_GET_GLOBAL
  t = sdma.timestamp(0x1_0000_0008)
  assert (t[0] & 0xFF, (t[0] >> 8) & 0xFF, t[1], t[2]) == (op["SDMA_OP_TIMESTAMP"], sdma.SUBOP_TIMESTAMP_GET_GLOBAL, 8, 1)
  P = S["packets"]
  c = sdma.copy_linear(0x7F00_DEAD_BEE0, 0x1_2345_6780, 4096, gfx=gfx)
  F = P["COPY_LINEAR"]["fields"]
  assert len(c) == P["COPY_LINEAR"]["dwords"] and _field(c, F["HEADER.op"]) == op["SDMA_OP_COPY"] and _field(c, F["HEADER.sub_op"]) == 0
  assert _field(c, F["COUNT.count"]) == 4095 and c[F["PARAMETER.dst_sw"][0]] == 0
  assert (_field(c, F["SRC_ADDR_LO"]), _field(c, F["SRC_ADDR_HI"]), _field(c, F["DST_ADDR_LO"]), _field(c, F["DST_ADDR_HI"])) == (0x2345_6780, 1, 0xDEAD_BEE0, 0x7F00)
  assert sdma.COPY_COUNT_MASK[gfx] == int(F["COUNT.count"][2], 16) and sdma.COPY_MAX_BYTES[gfx] == sdma.COPY_COUNT_MASK[gfx] + 1
  with pytest.raises(ValueError): sdma.copy_linear(0, 0, sdma.COPY_MAX_BYTES[gfx] + 1, gfx=gfx)
  big = sdma.copy(0x1000, 0x2000, sdma.COPY_MAX_BYTES[gfx] + 10, gfx=gfx)
  assert len(big) == 14 and big[1] == sdma.COPY_MAX_BYTES[gfx] - 1 and big[8] == 9 and big[10] == 0x2000 + sdma.COPY_MAX_BYTES[gfx]
  f = sdma.fence(0x1_0000_0010, 0xCAFE, gfx=gfx)
  F = P["FENCE"]["fields"]
  assert len(f) == P["FENCE"]["dwords"] and _field(f, F["HEADER.op"]) == op["SDMA_OP_FENCE"]
  assert (_field(f, F["ADDR_LO"]), _field(f, F["ADDR_HI"]), _field(f, F["DATA"])) == (0x10, 1, 0xCAFE)
  if gfx == 11: assert _field(sdma.fence(0x10, 1, gfx=11, mtype=3), F["HEADER.mtype"]) == 3 and sdma.FENCE_MTYPE_SHIFT == F["HEADER.mtype"][1]
  else:
    with pytest.raises(ValueError, match="SDMA 6"): sdma.fence(0x10, 1, gfx=9, mtype=3)
  p = sdma.poll_regmem(0x2_0000_0040, 7, 0xFF, func=sdma.FUNC_EQ, interval=10, retry=0xFFF, gfx=gfx)
  F = P["POLL_REGMEM"]["fields"]
  assert len(p) == P["POLL_REGMEM"]["dwords"] and _field(p, F["HEADER.op"]) == op["SDMA_OP_POLL_REGMEM"]
  assert (_field(p, F["HEADER.func"]), _field(p, F["HEADER.mem_poll"]), _field(p, F["HEADER.hdp_flush"])) == (3, 1, 0)
  assert (_field(p, F["ADDR_LO"]), _field(p, F["ADDR_HI"]), _field(p, F["VALUE"]), _field(p, F["MASK"])) == (0x40, 2, 7, 0xFF)
  assert (_field(p, F["DW5.interval"]), _field(p, F["DW5.retry_count"])) == (10, 0xFFF)
  assert (sdma.POLL_FUNC_SHIFT, sdma.POLL_MEM_POLL_SHIFT, sdma.POLL_HDP_FLUSH_SHIFT) == (F["HEADER.func"][1], F["HEADER.mem_poll"][1], F["HEADER.hdp_flush"][1])
  t = sdma.trap(0x1234567, gfx=gfx)
  F = P["TRAP"]["fields"]
  assert len(t) == P["TRAP"]["dwords"] and _field(t, F["HEADER.op"]) == op["SDMA_OP_TRAP"] and _field(t, F["INT_CONTEXT.int_context"]) == 0x1234567
  with pytest.raises(ValueError, match="28 bits"): sdma.trap(1 << 28, gfx=gfx)
  n = sdma.nop(5)
  F = P["NOP"]["fields"]
  assert len(n) == 5 and _field(n, F["HEADER.op"]) == op["SDMA_OP_NOP"] and _field(n, F["HEADER.count"]) == 4 and sdma.nop(1) == [0]

def test_sdma_gcr_req():
  S = SDMA["sdma_v6_0_0_gfx11"]
  assert S["opcodes"]["SDMA_OP_GCR_REQ"] == sdma.OP_GCR_REQ
  g = S["gcr_bits"]
  for name, ours in [("GL2_WB", sdma.GCR_GL2_WB), ("GL2_INV", sdma.GCR_GL2_INV), ("GL2_DISCARD", sdma.GCR_GL2_DISCARD), ("GL2_US", sdma.GCR_GL2_US),
                     ("GL1_INV", sdma.GCR_GL1_INV), ("GLV_INV", sdma.GCR_GLV_INV), ("GLK_INV", sdma.GCR_GLK_INV), ("GLK_WB", sdma.GCR_GLK_WB),
                     ("GLM_INV", sdma.GCR_GLM_INV), ("GLM_WB", sdma.GCR_GLM_WB), ("RANGE_IS_PA", sdma.GCR_RANGE_IS_PA)]:
    assert 1 << g[f"SDMA_GCR_{name}"][0] == ours, name
  assert (g["SDMA_GCR_SEQ"][0], g["SDMA_GCR_GL2_RANGE"][0], g["SDMA_GCR_GL1_RANGE"][0], g["SDMA_GCR_GLI_INV"][0]) == \
         (sdma.GCR_SEQ_SHIFT, sdma.GCR_GL2_RANGE_SHIFT, sdma.GCR_GL1_RANGE_SHIFT, sdma.GCR_GLI_INV_SHIFT)
  ctl = sdma.GCR_GL2_WB | sdma.GCR_GL2_INV | (1 << sdma.GCR_SEQ_SHIFT) | sdma.GCR_GLV_INV
  base, limit = 0x7F12_3456_7880, 0x7F12_3456_FF80
  p = sdma.gcr_req(ctl, base, limit, vmid=5)
  F = S["packets"]["GCR_REQ"]["fields"]
  assert len(p) == S["packets"]["GCR_REQ"]["dwords"] and _field(p, F["HEADER.op"]) == sdma.OP_GCR_REQ
  assert (_field(p, F["PAYLOAD1.base_va_31_7"]) << 7 | _field(p, F["PAYLOAD2.base_va_47_32"]) << 32) == base
  assert (_field(p, F["PAYLOAD3.limit_va_31_7"]) << 7 | _field(p, F["PAYLOAD4.limit_va_47_32"]) << 32) == limit
  assert _field(p, F["PAYLOAD2.gcr_control_15_0"]) | _field(p, F["PAYLOAD3.gcr_control_18_16"]) << 16 == ctl and _field(p, F["PAYLOAD4.vmid"]) == 5
  # the whole-cache form ROCr and the kernel write: BASE_VA and LIMIT_VA 0 (amd_blit_sdma.cpp:1093, sdma_v6_0.c:304-310)
  p = sdma.gcr_req(sdma.GCR_GL2_WB | sdma.GCR_GLK_WB, sub_op=sdma.SUBOP_USER_GCR)
  assert _field(p, F["HEADER.sub_op"]) == 1 and p[1] == 0 and p[2] & 0xFFFF == 0 and p[3] >> 7 == 0 and p[4] & 0xFFFF == 0

def test_sdma_facts_have_provenance():
  for key in ("sdma_v6_0_0_gfx11", "vega10_sdma_gfx9"):
    src = SDMA[key]["source"]
    assert re.fullmatch(r"[0-9a-f]{40}", src["commit"]) and src["path"].endswith("_pkt_open.h") and src["repo"] == "torvalds/linux"
