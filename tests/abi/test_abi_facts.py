"""The copies of the ABI fact tables in tests/abi_facts equal the originals in ../shared/abi (when reachable);
the SDMA facts (no original there) carry their provenance."""
import gzip, json
import pytest
from tests.abi_facts import HERE, abi_dir, load

@pytest.mark.parametrize("name", ["nvidia_rm", "nvidia_cubin", "nvidia_methods", "amd_kfd", "amd_packets", "amd_codeobject"])
def test_copies_match_originals(name):
  copy = json.loads(gzip.decompress((HERE / f"{name}.json.gz").read_bytes()))
  assert copy.get("meta") or copy.get("_about"), "the copy has its provenance block"
  if (d := abi_dir()) is not None:
    assert copy == json.loads((d / f"{name}.json").read_text()), f"tests/abi_facts/{name}.json.gz is stale; recompress it from {d}"
  if abi_dir() is None: assert load(name) == copy

def test_sdma_facts_are_self_describing():
  facts = json.loads((HERE / "amd_sdma.json").read_text())
  assert facts["meta"]["what"] and facts["meta"]["format"]
  for key in ("sdma_v6_0_0_gfx11", "vega10_sdma_gfx9"):
    src = facts[key]["source"]
    assert len(src["commit"]) == 40 and src["path"].startswith("drivers/gpu/drm/amd/amdgpu/") and src["license"]
    assert {"COPY_LINEAR", "FENCE", "POLL_REGMEM", "TRAP", "NOP"} <= set(facts[key]["packets"])
