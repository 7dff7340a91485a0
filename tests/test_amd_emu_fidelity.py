"""Fidelity rows of the gfx942 emulator audit (/work/reviews/g30.md) that apply to both AMD emulators: each test fails
on the emulator as it was before the row was fixed (the hardware does something more harmful than the old model)."""
import struct
import numpy as np
import pytest
from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd
from hcqrt.amd.device import AMDDevice, AMDProgram
from hcqrt.mock.amd.rdna3 import FlatMemory, dispatch
from hcqrt.mock.amd.rdna3.launch import USER_POISON
from hcqrt.mock.amd.gfx9 import dispatch as gfx9_dispatch

# v_mov v2, vcc_lo; v_mov v3, m0; v_mov v4, s2; v_mov v5, v7; v_lshlrev v0, 4, v0; global_store v0, v[2:5], s[0:1];
# s_endpgm (llvm-mc-19 -mcpu=gfx942 / gfx1100 encodings; gfx1100 stores v[1:4] from the same moves one register down)
READ_UNSET = {
  "gfx942": [0x7E04026A, 0x7E06027C, 0x7E080202, 0x7E0A0307, 0x24000084, 0xDC7C8000, 0x00000200, 0xBF810000],
  "gfx1100": [0x7E02026A, 0x7E04027D, 0x7E060202, 0x7E080305, 0x30000084, 0xDC760000, 0x00000100, 0xBFB00000]}

@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_registers_the_descriptor_does_not_enable_start_as_garbage(arch):
  """g30 row 3: with only the kernarg pointer (USER_SGPR_COUNT 2) and TGID_X_EN clear, s2, VCC, M0 and the VGPRs past
  v0 are not initialised (AMDGPUUsage "Initial Kernel Execution State"): they read garbage, not 0."""
  out = np.zeros((64, 4), np.uint32)
  m = FlatMemory(); m.map(0x10000, out.view(np.uint8))
  code = struct.pack(f"<{len(READ_UNSET[arch])}I", *READ_UNSET[arch])
  run = gfx9_dispatch if arch == "gfx942" else lambda *a, **k: dispatch(*a, wave32=True, **k)
  run(m, code, 0, 2 << 1, [0x10000, 0], (2,), (32 if arch == "gfx1100" else 64,))
  lanes = 32 if arch == "gfx1100" else 64
  assert (out[:lanes] == USER_POISON).all()

def test_aql_pads_user_sgprs_with_garbage_not_zero(monkeypatch):
  """g30 row 3 on the AQL path: USER_SGPR_COUNT 4 with two enabled; the CP loads only those, s2/s3 hold garbage."""
  monkeypatch.delenv("AMD_AQL", raising=False)
  drv = install_mock_amd("gfx942")
  try:
    d = AMDDevice("AMD"); d.wait_timeout_s = 20.0
    desc = struct.pack("<III4xq20xIIIHH4x", 0, 0, 8, 0, 0, 0, 4 << 1, 1 << 3, 0)
    code = [0xC0060000, 0x00000000, 0xBF8CC07F] + READ_UNSET["gfx942"]   # s_load_dwordx2 s[0:1], s[0:1]; s_waitcnt lgkmcnt(0)
    p = AMDProgram(d, "k", struct.pack(f"<{len(code)}I", *code), desc, [(0, 8)])
    buf = d.allocator.alloc(64 * 16)
    p(buf, global_size=(1, 1, 1), local_size=(64, 1, 1), wait=True)
    out = np.zeros((64, 4), np.uint32); d.allocator.copyout(memoryview(out.view(np.uint8)), buf)
    assert (out[:, 2] == USER_POISON).all()   # s2: the padding
  finally: uninstall_mock_amd(drv)
