"""pytest plugin for run.py: installs the tinygrad alias before collection and writes each test's outcome as JSON.

Loaded with `-p tests.tinygrad_compat.plugin`; the output file is the `TINYGRAD_COMPAT_OUT` environment variable.
"""
from __future__ import annotations
import json, os
from tests.tinygrad_compat import alias

_results: dict[str, dict[str, str]] = {}

def pytest_configure(config) -> None:
  """Install the alias first, so tinygrad's test modules (and test/helpers.py) import our objects."""
  alias.install()

def pytest_runtest_logreport(report) -> None:
  """Keep the first failing phase of each test (setup/call/teardown), or its pass/skip."""
  r = _results.get(report.nodeid)
  if r is not None and r["outcome"] != "passed": return
  if report.when == "call" or report.outcome != "passed":
    _results[report.nodeid] = {"outcome": report.outcome, "error": str(report.longrepr)[-2000:] if report.failed else ""}

def pytest_collectreport(report) -> None:
  """A file that fails to import counts as one failed entry, so it is visible in the table."""
  if report.failed: _results[report.nodeid or "<collect>"] = {"outcome": "failed", "error": str(report.longrepr)[-2000:]}

def pytest_sessionfinish(session, exitstatus) -> None:
  """Write the outcomes for run.py."""
  with open(os.environ["TINYGRAD_COMPAT_OUT"], "w") as f: json.dump(_results, f)
