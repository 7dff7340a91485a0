"""The conformance suite against the NV mock (H100 and Ada) and the AMD mock (gfx1100, kernels from LLVM IR run by
the mock's RDNA3 emulator): everything that applies passes, the report is complete, and a failing check shows up in
the table, the JSON and the exit status."""
import json, os
import pytest
from hw_tests.__main__ import main
from hw_tests import suite

MULTI = sum(g == "multi" for g, *_ in suite.CHECKS)   # the multi-device checks: skipped with one GPU

@pytest.fixture(autouse=True)
def _mock_box_from_the_test_only(monkeypatch):
  """The mock box each test describes (one GPU, H100 unless --arch says otherwise), whatever MOCKGPU_COUNT / _P2P /
  _ARCH ... the suite runs under (.ci runs data-parallel tests with MOCKGPU_COUNT=2): a test that wants two GPUs sets
  them itself."""
  for k in [k for k in os.environ if k.startswith("MOCKGPU_")]: monkeypatch.delenv(k)

def test_suite_passes_on_mock_h100(tmp_path, capsys):
  rc = main(["--device", "NV", "--mock", "--stress", "1000", "--json", str(tmp_path / "r.json")])
  out = capsys.readouterr().out
  rep = json.loads((tmp_path / "r.json").read_text())
  assert rc == 0, out
  assert out.strip().splitlines()[-1] == f"{len(suite.CHECKS) - MULTI} passed, 0 failed, {MULTI} skipped"
  assert rep["failed"] == 0 and len(rep["results"]) == len(suite.CHECKS) and rep["device"]["qmd"] == "V04_00"
  assert {r["group"] for r in rep["results"]} == {"properties", "memory", "copies", "signals", "launches", "graph", "multi", "errors"}
  assert MULTI >= 4 and all(r["skipped"] and r["note"] == "skipped: needs 2 devices" for r in rep["results"] if r["group"] == "multi")
  assert {"launch_host_us", "eager_host_us_per_kernel", "graph_host_us_per_kernel"} <= set(rep["metrics"])   # (speed: bench/hcq_bench.py, not a test)

def test_suite_on_mock_ada_launches(tmp_path, capsys):
  rc = main(["--mock", "--arch", "ada", "--only", "launches", "--stress", "100", "--json", str(tmp_path / "r.json")])
  rep = json.loads((tmp_path / "r.json").read_text())
  assert rc == 0 and rep["device"]["arch"] == "sm_89" and rep["passed"] == sum(g == "launches" for g, *_ in suite.CHECKS) >= 6

def test_multi_device_checks_pass_on_two_mock_gpus(tmp_path, capsys, monkeypatch):
  for p2p in ("pcie", "nvlink", "none"):
    monkeypatch.setenv("MOCKGPU_COUNT", "2"); monkeypatch.setenv("MOCKGPU_P2P", p2p)
    rc = main(["--mock", "--only", "multi", "--json", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rc == 0 and out.strip().endswith(f"{MULTI} passed, 0 failed"), out
    assert ("no-p2p: IOH_TOPOLOGY_NOT_SUPPORTED" if p2p == "none" else f"ok: {p2p}") in out
    assert {"peer_copy_GBps", "bounce_copy_GBps"} <= set(rep["metrics"])

def test_failure_is_reported(tmp_path, capsys, monkeypatch):
  def broken(c): raise AssertionError("deliberately broken")
  monkeypatch.setattr(suite, "CHECKS", suite.CHECKS + [("errors", "broken", broken, ("NV", "AMD"))])
  rc = main(["--mock", "--only", "errors", "--json", str(tmp_path / "r.json")])
  out = capsys.readouterr().out
  assert rc == 1 and "FAIL  errors      broken" in out and "deliberately broken" in out and out.strip().endswith("1 passed, 1 failed")
  assert json.loads((tmp_path / "r.json").read_text())["failed"] == 1

def test_suite_passes_on_mock_amd(tmp_path, capsys):
  rc = main(["--device", "AMD", "--mock", "--stress", "50", "--json", str(tmp_path / "r.json")])
  out = capsys.readouterr().out
  rep = json.loads((tmp_path / "r.json").read_text())
  amd = [c for c in suite.CHECKS if "AMD" in c[3]]
  assert rc == 0, out
  assert out.strip().splitlines()[-1] == f"{len(amd) - MULTI} passed, 0 failed, {MULTI} skipped" and len(amd) == len(suite.CHECKS)
  assert "PASS  launches    stack_and_spills" in out and "bytes of stack per thread" in out   # scratch runs on AMD (issue 30)
  assert rep["device"]["arch"] == "gfx1100" and rep["failed"] == 0 and len(rep["results"]) == len(amd)
  assert {"launch_host_us", "graph_host_us_per_kernel", "back_to_back_us_per_launch"} <= set(rep["metrics"])   # speed: bench/hcq_bench.py

def test_amd_without_llvmlite_says_what_to_install(monkeypatch, capsys):
  from hw_tests import kernels_amd
  monkeypatch.setattr(kernels_amd, "have_llvmlite", lambda: False)
  assert main(["--device", "AMD", "--mock"]) == 2
  assert "pip install llvmlite" in capsys.readouterr().out

def test_hw_tests_ships_in_the_wheel():
  """`pip install .` then `python -m hw_tests` works from any directory (README): the packages pyproject.toml ships
  are every top-level package of the repository but the tests, and none of them imports a folder that is not shipped
  (tests/, bench/, examples/)."""
  import fnmatch, pathlib, re
  root = pathlib.Path(__file__).resolve().parents[2]
  include = re.findall(r'"([^"]+)"', re.search(r"\[tool\.setuptools\.packages\.find\]\s*include\s*=\s*\[([^\]]*)\]", (root / "pyproject.toml").read_text()).group(1))
  packages = {p.parent.name for p in root.glob("*/__init__.py")} - {"tests"}
  shipped = {p for p in packages if any(fnmatch.fnmatch(p, pat) for pat in include)}
  assert shipped == packages and "hw_tests" in shipped, (include, packages)
  unshipped = {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")} - shipped
  bad = [(str(f.relative_to(root)), m) for pkg in shipped for f in (root / pkg).rglob("*.py")
         for m in re.findall(r"^\s*(?:from|import) (\w+)", f.read_text(), re.MULTILINE) if m in unshipped]
  assert not bad, bad
