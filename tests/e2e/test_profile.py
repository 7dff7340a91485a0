"""PROFILE: the Chrome trace of a TinyJit training step has one "X" event per kernel launch, named as the kernel, on
the device's track, with the JIT replays' kernels inside their replay span; on the CPU and the NV and AMD mocks."""
import itertools, json, os, subprocess, sys
import pytest
import compiler.profile as prof
from tests.child_env import device_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def _base_env() -> dict:
  """This process's environment without its device choice (the suite may run under MOCKGPU=1 NV=1), PYTHONPATH kept:
  each run names its own device."""
  return device_env(ROOT, None)

def _run_step(tmp_path, env: dict, model: str) -> tuple[dict, dict]:
  path = tmp_path / "trace.json"
  r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "profile_step.py"), model], cwd=ROOT, capture_output=True, text=True,
                     env={**_base_env(), "PROFILE": str(path), **env}, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  assert f"written to {path}" in r.stderr
  return json.loads(r.stdout.strip().splitlines()[-1]), json.loads(path.read_text())

def _check_schema(trace: dict) -> list[dict]:
  evs = trace["traceEvents"]
  for e in evs:
    assert e["ph"] in ("X", "M") and isinstance(e["name"], str) and isinstance(e["pid"], int) and isinstance(e["tid"], int)
    if e["ph"] == "X": assert isinstance(e["ts"], float | int) and e["dur"] >= 0 and isinstance(e["args"], dict) and e["cat"]
  return [e for e in evs if e["ph"] == "X"]

@pytest.mark.parametrize("env,model,device", [({"CPU": "1"}, "digits", "CPU"),
                                              ({"MOCKGPU": "1", "NV": "1"}, "tiny", "NV"),
                                              ({"MOCKGPU": "1", "AMD": "1"}, "tiny", "AMD")])
def test_jit_step_trace(tmp_path, env, model, device):
  info, trace = _run_step(tmp_path, env, model)
  xs = _check_schema(trace)
  tracks = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
  kernels = [e for e in xs if e["cat"] == "kernel"]
  assert len(kernels) == info["kernel_count"] > 0   # one event per launch, eager and replayed
  assert {tracks[e["pid"]] for e in kernels} == {device}
  for e in kernels: assert e["args"]["flops"] >= 0 and e["args"]["bytes"] > 0 and "global_size" in e["args"]
  replays = [e for e in xs if e["cat"] == "jit"]
  assert len(replays) == 2   # calls 3 and 4 of the step replay the capture
  for r in replays:
    inside = sorted((e for e in kernels if r["ts"] - 1 <= e["ts"] <= r["ts"] + r["dur"] + 1), key=lambda e: e["ts"])
    assert [e["name"] for e in inside] == info["jit_kernels"]
  if device != "CPU": assert all(e["args"].get("clock") == "gpu" for e in kernels if e["tid"] == 1)
  names = {e["name"].split(" ")[0] for e in xs}
  assert {"schedule", "compile", "lower", "render", "assemble"} <= names
  copies = [e for e in xs if e["cat"] == "copy"]
  assert len(copies) >= 8 and all(tracks[e["pid"]] == device and e["args"]["bytes"] > 0 for e in copies)   # the batches in

def test_off_records_nothing():
  from frontend import Tensor
  was = prof.ENABLED
  prof.disable(); prof.clear()
  try:
    (Tensor([1.0, 2.0]) * 3).realize()
    assert prof.trace()["traceEvents"] == []
    prof.enable()
    (Tensor([1.0, 2.0]) * 4).realize()
    assert any(e["ph"] == "X" and e["cat"] == "kernel" for e in prof.trace()["traceEvents"])
  finally:
    prof.ENABLED = was; prof.clear()

def test_cpu_launch_list_times_each_launch(on_cpu):
  """The CPU's launch list under PROFILE: the native runner's clock readings bracket each launch, in order, inside the
  replay's span (the LLVM IR runner has no timed entry: then the launches run one at a time, also one event each).
  Pinned to the CPU (on_cpu), so that it runs, not skips, under MOCKGPU=1 NV=1 too."""
  from frontend import Tensor, TinyJit
  was = prof.ENABLED
  prof.enable(); prof.clear()
  try:
    @TinyJit
    def chain(x):
      for _ in range(5): x = (x * 2 + 1).contiguous()
      return x
    x = Tensor([1.0, 2.0, 3.0]).realize()
    for _ in range(4): out = chain(x)
    assert out.tolist() == [63.0, 95.0, 127.0]
    evs = [e for e in prof.trace()["traceEvents"] if e["ph"] == "X"]
    spans = [e for e in evs if e["cat"] == "jit"]
    assert len(spans) == 2
    for sp in spans:
      inner = sorted((e for e in evs if e["cat"] == "kernel" and sp["ts"] <= e["ts"] <= sp["ts"] + sp["dur"]), key=lambda e: e["ts"])
      assert len(inner) == 5 and all(e["dur"] > 0 for e in inner)
      assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-3 for a, b in itertools.pairwise(inner))   # one after another
      assert inner[-1]["ts"] + inner[-1]["dur"] <= sp["ts"] + sp["dur"]
  finally:
    prof.ENABLED = was; prof.clear()

def test_profile_1_names_its_file(tmp_path):
  """PROFILE=1: the trace goes to a file in the temp directory, named on stderr at exit."""
  code = "from frontend import Tensor; print((Tensor([1.0, 2.0]) + 1).tolist())"
  r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                     env={**_base_env(), "CPU": "1", "PROFILE": "1", "TMPDIR": str(tmp_path)})
  assert r.returncode == 0 and r.stdout.strip() == "[2.0, 3.0]", r.stderr
  path = r.stderr.split("written to ")[1].split(" ")[0]
  assert os.path.dirname(path) == str(tmp_path)
  names = [e["name"] for e in _check_schema(json.load(open(path))) if e["cat"] == "kernel"]
  assert len(names) == 1 and names[0].startswith("E_2")
