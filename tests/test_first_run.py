"""`bash hw_tests/first_run.sh --mock` end to end (issue 22: the one command for a GPU machine), and the barrier-cost
measurement it runs (bench/hcq_bench.py --barrier-cost) on the mock."""
import importlib.util, json, os, subprocess, sys
from hcqrt import syscalls
from hcqrt.mock.nv import MockNV
from hcqrt.nv.device import NVDevice
from hw_tests import first_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def test_first_run_on_the_mock(tmp_path):
  env = dict(os.environ, OUT=str(tmp_path), PYTHON=sys.executable)
  p = subprocess.run(["bash", os.path.join(ROOT, "hw_tests", "first_run.sh"), "--mock", "--cap-scale", "0.4"], env=env,
                     capture_output=True, text=True, timeout=200)
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
  lines = p.stdout.strip().splitlines()
  assert lines[-1].startswith("first run: ") and " 0 failed" in lines[-1]          # the table comes last
  summary = json.loads((tmp_path / "summary.json").read_text())
  status = {s["step"]: s["status"] for s in summary["steps"]}
  assert list(status) == [s.name for s in first_run.STEPS]
  assert all(status[s] == "ok" for s in ("env", "probe", "conformance", "barrier", "fault")), status
  assert status["ops"] in ("ok", "capped") and status["train"] in ("ok", "capped")   # the mock's interpreter is slow: capped
  rep = json.loads((tmp_path / "hw_tests_report.json").read_text())
  assert rep["failed"] == 0 and rep["mock"]
  assert "reported after" in summary["facts"]["fault"] and summary["facts"]["recovery"].startswith("a later kernel ran 3 of 3")
  for s in first_run.STEPS: assert (tmp_path / f"{s.name}.txt").exists()

def test_a_failing_step_fails_the_run(tmp_path, monkeypatch, capsys):
  monkeypatch.setenv("OUT", str(tmp_path))
  monkeypatch.setattr(first_run, "commands", lambda step, mock, out: [f"{sys.executable} -c 'raise SystemExit(3)'"] if step == "probe" else ["true"])
  assert first_run.main(["--mock", "--skip", "train,ops"]) == 1
  out = capsys.readouterr().out
  assert "probe        FAIL" in out and out.strip().splitlines()[-1].startswith("first run: 4 ok, 1 failed")

def test_barrier_cost_measurement_on_the_mock():
  spec = importlib.util.spec_from_file_location("hcq_bench", os.path.join(ROOT, "bench", "hcq_bench.py"))
  bench = importlib.util.module_from_spec(spec); spec.loader.exec_module(bench)
  with syscalls.installed(MockNV()):
    r = bench.barrier_cost(NVDevice("NV"), kernels=8, reps=1)
  assert r["correct"] and r["kernels"] == 8
  assert {"indep_wfi_us", "indep_no_wfi_us", "chain_us", "wfi_cost_us"} <= set(r)
