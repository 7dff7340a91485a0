"""Where the ABI fact tables are: $HCQRT_ABI_DIR, ../shared/abi beside the repository, or the copies here."""
import gzip, json, os, pathlib

HERE = pathlib.Path(__file__).resolve().parent
SHARED = HERE.parents[2] / "shared" / "abi"

def abi_dir() -> pathlib.Path | None:
  """The directory of the original JSON files, when it is reachable from here."""
  d = pathlib.Path(os.environ["HCQRT_ABI_DIR"]) if os.environ.get("HCQRT_ABI_DIR") else SHARED
  return d if (d / "nvidia_rm.json").exists() else None

def load(name: str) -> dict:
  """The fact table `name` (e.g. "nvidia_rm"), from the originals or the copies here."""
  if (d := abi_dir()) is not None: return json.loads((d / f"{name}.json").read_text())
  return json.loads(gzip.decompress((HERE / f"{name}.json.gz").read_bytes()))
