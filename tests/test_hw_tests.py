"""The conformance suite against the NV mock: everything passes (H100 and Ada), the report is complete, and a
failing check shows up in the table, the JSON and the exit status."""
import json
from hw_tests.__main__ import main
from hw_tests import suite

def test_suite_passes_on_mock_h100(tmp_path, capsys):
  rc = main(["--device", "NV", "--mock", "--stress", "1000", "--json", str(tmp_path / "r.json")])
  out = capsys.readouterr().out
  rep = json.loads((tmp_path / "r.json").read_text())
  assert rc == 0, out
  assert out.strip().splitlines()[-1] == f"{len(suite.CHECKS)} passed, 0 failed"
  assert rep["failed"] == 0 and len(rep["results"]) == len(suite.CHECKS) and rep["device"]["qmd"] == "V04_00"
  assert {r["group"] for r in rep["results"]} == {"properties", "memory", "copies", "signals", "launches", "graph", "errors"}
  assert rep["metrics"]["graph_host_us_per_kernel"] < rep["metrics"]["launch_host_us"] / 10

def test_suite_on_mock_ada_launches(tmp_path, capsys):
  rc = main(["--mock", "--arch", "ada", "--only", "launches", "--stress", "100", "--json", str(tmp_path / "r.json")])
  rep = json.loads((tmp_path / "r.json").read_text())
  assert rc == 0 and rep["device"]["arch"] == "sm_89" and rep["passed"] == sum(g == "launches" for g, _, _ in suite.CHECKS) >= 6

def test_failure_is_reported(tmp_path, capsys, monkeypatch):
  def broken(c): raise AssertionError("deliberately broken")
  monkeypatch.setattr(suite, "CHECKS", suite.CHECKS + [("errors", "broken", broken)])
  rc = main(["--mock", "--only", "errors", "--json", str(tmp_path / "r.json")])
  out = capsys.readouterr().out
  assert rc == 1 and "FAIL  errors      broken" in out and "deliberately broken" in out and out.strip().endswith("1 passed, 1 failed")
  assert json.loads((tmp_path / "r.json").read_text())["failed"] == 1
