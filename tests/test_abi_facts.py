"""The copies of the ABI fact tables in tests/abi_facts equal the originals in ../shared/abi (when reachable)."""
import gzip, json
import pytest
from tests.abi_facts import HERE, abi_dir, load

@pytest.mark.parametrize("name", ["nvidia_rm", "nvidia_cubin", "nvidia_methods"])
def test_copies_match_originals(name):
  copy = json.loads(gzip.decompress((HERE / f"{name}.json.gz").read_bytes()))
  assert copy["meta"], "the copy has its provenance block"
  if (d := abi_dir()) is not None:
    assert copy == json.loads((d / f"{name}.json").read_text()), f"tests/abi_facts/{name}.json.gz is stale; recompress it from {d}"
  if abi_dir() is None: assert load(name) == copy
