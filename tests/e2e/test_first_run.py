"""`bash hw_tests/first_run.sh --mock` end to end (issue 22: the one command for a GPU machine), and the barrier-cost
measurement it runs (bench/hcq_bench.py --barrier-cost) on the mock."""
import importlib.util, json, os, shutil, subprocess, sys
from hcqrt import syscalls
from hcqrt.mock.nv import MockNV
from hcqrt.nv.device import NVDevice
from hw_tests import first_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def test_first_run_on_the_mock(tmp_path):
  env = dict(os.environ, OUT=str(tmp_path), PYTHON=sys.executable)
  p = subprocess.run(["bash", os.path.join(ROOT, "hw_tests", "first_run.sh"), "--mock", "--with-fault", "--cap-scale", "0.4",
                      "--slow-cap", "2"], env=env,
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
  assert first_run.main(["--mock", "--with-fault", "--skip", "train,ops"]) == 1
  out = capsys.readouterr().out
  assert "probe        FAIL" in out and out.strip().splitlines()[-1].startswith("first run: 4 ok, 1 failed")

def test_fault_step_is_opt_in(tmp_path, monkeypatch, capsys):
  monkeypatch.setenv("OUT", str(tmp_path))
  ran = []
  monkeypatch.setattr(first_run, "commands", lambda step, mock, out: ran.append(step) or ["true"])
  assert first_run.main(["--mock"]) == 0
  assert "fault" not in ran and "opt-in: --with-fault" in capsys.readouterr().out

def test_a_hung_gpu_step_records_the_state_and_skips_the_other_gpu_steps(tmp_path, monkeypatch, capsys):
  monkeypatch.setenv("OUT", str(tmp_path))
  ran = []
  def cmds(step, mock, out):
    ran.append(step)
    return ["sleep 60"] if step == "conformance" else ["true"]
  monkeypatch.setattr(first_run, "commands", cmds)
  monkeypatch.setattr(first_run, "HANG_COMMANDS", ["echo nvidia-smi-q-here", "echo dmesg-here"])
  monkeypatch.setattr(first_run, "STEPS", [first_run.Step(s.name, s.what, 2, 2, s.gpu, s.mock_slow) for s in first_run.STEPS])
  assert first_run.main(["--mock", "--with-fault"]) == 0   # capped is not failed
  assert ran == ["env", "probe", "conformance"]
  hang = (tmp_path / "hang.txt").read_text()
  assert "conformance step was capped" in hang and "nvidia-smi-q-here" in hang and "dmesg-here" in hang
  steps = {s["step"]: s for s in json.loads((tmp_path / "summary.json").read_text())["steps"]}
  assert steps["conformance"]["status"] == "capped"
  assert all(steps[n]["status"] == "skipped" and "conformance step hung" in steps[n]["last"] for n in ("ops", "train", "barrier", "fault"))

def test_a_step_that_outlives_sigkill_stops_the_run(tmp_path, monkeypatch):
  """A child stuck in an uninterruptible driver call is never reaped: the run must not wait for it."""
  monkeypatch.setenv("OUT", str(tmp_path))
  monkeypatch.setattr(first_run, "commands", lambda step, mock, out: ["sleep 4"] if step == "probe" else ["true"])
  monkeypatch.setattr(first_run, "HANG_COMMANDS", ["true"])
  monkeypatch.setattr(first_run, "KILL_WAIT_S", 0.5)
  monkeypatch.setattr(first_run, "STEPS", [first_run.Step(s.name, s.what, 1, 1, s.gpu, s.mock_slow) for s in first_run.STEPS])
  killed = []
  def no_kill(pid, sig): killed.append(pid)   # as if SIGKILL could not end it (D state); the sleep ends on its own
  monkeypatch.setattr(first_run.os, "killpg", no_kill)
  assert first_run.main(["--mock"]) == 1
  assert len(killed) == 1
  steps = {s["step"]: s["status"] for s in json.loads((tmp_path / "summary.json").read_text())["steps"]}
  assert steps["probe"] == "stuck" and all(steps[n] == "skipped" for n in ("conformance", "ops", "train", "barrier", "fault"))

def test_barrier_cost_measurement_on_the_mock():
  spec = importlib.util.spec_from_file_location("hcq_bench", os.path.join(ROOT, "bench", "hcq_bench.py"))
  bench = importlib.util.module_from_spec(spec); spec.loader.exec_module(bench)
  with syscalls.installed(MockNV()):
    r = bench.barrier_cost(NVDevice("NV"), kernels=8, reps=1)
  assert r["correct"] and r["kernels"] == 8
  assert {"indep_wfi_us", "indep_no_wfi_us", "chain_us", "wfi_cost_us", "wfi_cost_host_us"} <= set(r)
  # GPU time comes from the graph's own timestamps: positive, and inside the host's submit-to-wait interval
  for k in ("indep_wfi", "indep_no_wfi", "chain"): assert 0 < r[f"{k}_us"] <= r[f"{k}_host_us"], (k, r)

def test_first_run_sh_reports_a_missing_pytest(tmp_path):
  """The ops step runs pytest: first_run.sh must count it (and its dependencies) among the wheels to install.
  The script runs from a copy in an empty folder: it looks for wheels in .whl/ beside it (a checkout carried to a GPU
  box has them, and the script would install them into its .site), and this test is about the message without them."""
  (tmp_path / "fake").mkdir()
  (tmp_path / "fake" / "pytest.py").write_text("raise ImportError('no pytest on this box')\n")
  (tmp_path / "repo" / "hw_tests").mkdir(parents=True)
  script = shutil.copy(os.path.join(ROOT, "hw_tests", "first_run.sh"), tmp_path / "repo" / "hw_tests")
  py = tmp_path / "py"   # (the project from ROOT: the copy is the script alone)
  py.write_text(f'#!/bin/sh\nPYTHONPATH={tmp_path / "fake"}:{ROOT}:$PYTHONPATH exec {sys.executable} "$@"\n'); py.chmod(0o755)
  env = dict(os.environ, OUT=str(tmp_path / "out"), PYTHON=str(py))
  p = subprocess.run(["bash", str(script), "--mock", "--skip", ",".join(s.name for s in first_run.STEPS)],
                     env=env, capture_output=True, text=True, timeout=60)
  assert not (tmp_path / "repo" / ".site").exists(), p.stdout
  first = p.stdout.splitlines()[0]
  assert first.startswith("first_run: missing") and " pytest " in first and "iniconfig" not in first, p.stdout + p.stderr
