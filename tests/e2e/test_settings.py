"""The environment settings: each package spells its settings in one module (compiler/settings.py, hcqrt/settings.py),
read at every call, so a changed environment (Context, a test's monkeypatch) takes effect at once."""
import pathlib, re
import pytest
from compiler import settings as cs

ROOT = pathlib.Path(__file__).resolve().parents[2]

def test_compiler_settings_are_read_at_each_call(monkeypatch):
  monkeypatch.setenv("NOOPT", "1"); monkeypatch.setenv("TC", "0"); monkeypatch.setenv("CACHE", "0"); monkeypatch.setenv("BEAM", "2")
  monkeypatch.setenv("CPU_CHUNKS", "1")
  assert cs.noopt() and not cs.tensor_cores() and not cs.disk_cache() and cs.opts_key() == ("1", "2", "0", "1") and cs.chunks_per_core(4) == 1
  monkeypatch.setenv("NOOPT", "0"); monkeypatch.delenv("TC"); monkeypatch.delenv("CACHE")
  assert not cs.noopt() and cs.tensor_cores() and cs.disk_cache()

@pytest.mark.parametrize("value,level", [("3", 3), ("", 0), ("x", 0), ("0", 0)])
def test_debug_level_reads_bad_values_as_zero(monkeypatch, value, level):
  from hcqrt import settings as hs
  monkeypatch.setenv("DEBUG", value)
  assert cs.debug_level() == hs.debug_level() == level

@pytest.mark.parametrize("value,on", [("1", True), ("2", True), ("0", False), ("", False), (None, False)])
def test_flags(monkeypatch, value, on):
  from hcqrt import settings as hs
  if value is None: monkeypatch.delenv("HCQRT_TEST_FLAG", raising=False)
  else: monkeypatch.setenv("HCQRT_TEST_FLAG", value)
  assert cs.flag("HCQRT_TEST_FLAG") == hs.flag("HCQRT_TEST_FLAG") == on

def test_numbers(monkeypatch):
  from hcqrt import settings as hs
  monkeypatch.setenv("HCQRT_TEST_NUM", "2.5")
  assert cs.env_float("HCQRT_TEST_NUM", 1.0) == 2.5
  monkeypatch.setenv("HCQRT_TEST_NUM", "many")
  assert cs.env_float("HCQRT_TEST_NUM", 1.0) == 1.0
  monkeypatch.setenv("HCQRT_TEST_NUM", "4096")
  assert hs.env_int("HCQRT_TEST_NUM", 7) == 4096
  monkeypatch.delenv("HCQRT_TEST_NUM")
  assert hs.env_int("HCQRT_TEST_NUM", 7) == 7

# the settings whose every read goes through a settings module (others, such as HCQRT_CC or a mock's knobs, are read
# where they are used: moving them would not make the code shorter)
SHARED = ("NOOPT", "TC", "CACHE", "DEBUG", "BEAM", "VIZ", "MOCKGPU")

def test_shared_settings_are_read_in_one_module_per_package():
  pat = re.compile(r"""(os\.environ\.get\(|os\.getenv\(|os\.environ\[)["'](""" + "|".join(SHARED) + r""")["']""")
  bad = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for d in ("compiler", "frontend", "hcqrt") for p in sorted((ROOT / d).rglob("*.py"))
         if p.name != "settings.py" and "mock" not in p.parts
         for i, line in enumerate(p.read_text().splitlines(), 1) if pat.search(line) and not line.lstrip().startswith(">>>")]
  assert not bad, "\n".join(bad)
