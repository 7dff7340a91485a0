"""A dropped program's code memory is reused for the next program (hcqrt/amd/device.py AMDProgram, hcqrt/nv/device.py
NVProgram free it when dropped: frontend/engine.py's bounded kernel cache). The GPU's instruction cache may still hold
the old program's lines at that address, so the first launch of the new one must come after an I$ invalidate: the mock
AMD CP keeps the lines (hcqrt/mock/amd/cp.py execute) and refuses to run code that changed under them."""
import gc, struct
import pytest
from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd, set_executor
from hcqrt.amd.device import AMDDevice, AMDProgram

@pytest.fixture(params=[("gfx942", None), ("gfx1100", "1"), ("gfx1100", None)], ids=["gfx942-aql", "gfx1100-aql", "gfx1100-pm4"])
def dev(request, monkeypatch):
  arch, aql_env = request.param
  if aql_env is None: monkeypatch.delenv("AMD_AQL", raising=False)
  else: monkeypatch.setenv("AMD_AQL", aql_env)
  drv = install_mock_amd(arch)
  d = AMDDevice("AMD"); d.drv = drv; d.wait_timeout_s = 5.0
  yield d
  uninstall_mock_amd(drv)

def _program(dev, fill: bytes) -> AMDProgram:
  props = (1 << 3) | ((1 << 10) if dev.gfx.wave32 else 0)   # kernarg pointer in s[0:1]
  desc = struct.pack("<III4xq20xIIIHH4x", 0, 0, 8, 0, 0, 0, 2 << 1, props, 0)
  return AMDProgram(dev, "k", fill * 16, desc, [(0, 8)])

def test_new_code_at_a_freed_programs_address_runs_after_an_icache_invalidate(dev):
  ran = []
  def executor(d, vm): ran.append(bytes(vm.read(d.program, 8)))   # (stands in for the machine code: records what ran)
  prev = set_executor(executor)
  try:
    buf = dev.allocator.alloc(64)
    old = _program(dev, b"\x00\x00\x81\xbf")   # s_endpgm
    old(buf, global_size=(1, 1, 1), local_size=(dev.wave_size, 1, 1), wait=True)
    va = old.image.va
    del old; gc.collect()   # dropped (as an evicted kernel): its code is freed once the timeline has passed it
    dev.synchronize()
    new = _program(dev, b"\x00\x00\x80\xbf")   # s_nop 0 ...: other code, same size
    assert new.image.va == va   # (the point of the test: the freed code's address is reused)
    new(buf, global_size=(1, 1, 1), local_size=(dev.wave_size, 1, 1), wait=True)
  finally: set_executor(prev)
  assert ran == [b"\x00\x00\x81\xbf" * 2, b"\x00\x00\x80\xbf" * 2]
