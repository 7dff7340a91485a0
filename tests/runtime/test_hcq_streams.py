"""The NV and AMD backends' driver traffic for a small program (eager launches, copies, a TinyJit graph replayed) is
byte-identical to the recording in tests/streams/ (made with tests/stream_recorder.py before the HCQ layer was
refactored into one HCQDevice base). A change that means to alter the traffic records again with `--write`."""
import json, os, subprocess, sys
import pytest
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # tests/, where stream_recorder.py lives
from stream_recorder import ROOT, path_of
from tests.child_env import device_env

def _record(device: str, aql: bool) -> list:
  # none of the caller's device choice (MOCKGPU_COUNT too) and settings: the recorder sets its own device and queue
  env = {k: v for k, v in device_env(ROOT, None).items() if k not in ("AMD_AQL", "DEBUG", "PROFILE", "BEAM")}
  r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "stream_recorder.py"), device] + (["--aql"] if aql else []),
                     capture_output=True, text=True, env=env, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  return json.loads(r.stdout)

@pytest.mark.parametrize("device,aql", [("NV", False), ("AMD", False), ("AMD", True)])
def test_driver_traffic_is_unchanged(device, aql):
  if device == "AMD": pytest.importorskip("llvmlite")
  want = json.load(open(path_of(device, aql)))
  got = _record(device, aql)
  kinds = {e[0] for e in got}
  assert "ioctl" in kinds and kinds & {"push", "ring", "aql"}, kinds   # the program did reach the driver and the GPU
  for i, (g, w) in enumerate(zip(got, want)):
    assert g == w, f"{device}{' AQL' if aql else ''}: event {i} differs:\n got  {str(g)[:600]}\n want {str(w)[:600]}"
  assert len(got) == len(want), f"{device}: {len(got)} events, the recording has {len(want)}"
