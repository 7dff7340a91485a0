"""`python -m hcqrt`: device listing on the mock per architecture, and the reasons (with fixes) when NV is unusable."""
import json, os, subprocess, sys
import pytest
from hcqrt import syscalls, probe
from hcqrt.device import BACKENDS, PROBE_FILES
from hcqrt.__main__ import main
from hcqrt.mock.nv import MockNV
from hcqrt.mock.nv.chips import CHIPS
from hcqrt.mock.nv.rm import RMError
from ioctl_defs.nv.classes import ARCHS, class_name

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def _run(*args, **env):
  """`python -m hcqrt *args` with only the device settings in `env` (none of the caller's: a GPU box runs the suite with NV=1)."""
  e = {k: v for k, v in os.environ.items() if k not in BACKENDS and not k.startswith("MOCKGPU")}
  r = subprocess.run([sys.executable, "-m", "hcqrt", *args], cwd=ROOT, env={**e, **env}, capture_output=True, text=True, timeout=60)
  assert r.returncode == 0, r.stderr
  return r.stdout

def test_cli_without_gpu_does_not_crash():
  out = _run()
  assert out.splitlines()[1].strip().startswith("CPU") and f"{len(os.sched_getaffinity(0))} cores" in out
  nv = [l for l in out.splitlines() if l.strip().startswith("NV")]
  assert nv, out
  # whatever this machine has, an NV line is either a device or a reason followed by what to do
  assert ("not usable:" in nv[0] and "what to do:" in out) or "classes:" in out
  assert "default device:" in out.splitlines()[-1]

def test_cli_mockgpu_shows_the_mock_h100():
  out = _run(MOCKGPU="1")
  assert "NVIDIA H100 80GB HBM3 (mock driver)" in out and "sm_90" in out and "driver 580.142" in out
  assert "GPFIFO HOPPER_CHANNEL_GPFIFO_A, compute HOPPER_COMPUTE_A, copy HOPPER_DMA_COPY_A; QMD V04_00" in out
  assert f"{CHIPS['hopper'].fb_size / (1 << 30):.1f} GiB" in out
  assert "AMD gfx1100 (mock KFD): RDNA3 gfx1100, 96 CUs, wave32, KFD 1.17" in out
  # without NV=1 / AMD=1 the default is the first GPU whose device file this host has (a real GPU box: NV), else the CPU
  host = next((name for name, path in PROBE_FILES if os.path.exists(path) and os.access(path, os.R_OK | os.W_OK)), None)
  assert f"2 GPU(s) usable; default device: {host}\n" in out if host else "2 GPU(s) usable; default device: CPU (NV=1 selects NV)" in out
  assert "default device: NV" in _run(MOCKGPU="1", NV="1")

def test_cli_mock_amd_target_and_renderer():
  out = _run(MOCKGPU="1", MOCKGPU_ARCH="gfx942")
  assert "AMD gfx942 (mock KFD): CDNA3 gfx942, 304 CUs, wave64" in out and "LLVM AMDGPU (llvmlite)" in out
  assert "NVIDIA H100 80GB HBM3 (mock driver)" in out   # the NV mock keeps its default chip

@pytest.mark.parametrize("arch", ["ampere", "ada", "hopper", "blackwell", "blackwell_b"])
def test_mock_arch_classes(arch, capsys):
  assert main(["--mock", arch]) == 0
  out = capsys.readouterr().out
  a = ARCHS[arch]
  assert CHIPS[arch].name in out and f"sm_{a.sm}" in out
  assert f"GPFIFO {class_name(a.gpfifo)}, compute {class_name(a.compute)}, copy {class_name(a.copy)}; QMD {a.qmd}" in out

def test_json_report(capsys):
  assert main(["--mock", "ada", "--json"]) == 0
  rep = json.loads(capsys.readouterr().out)
  nv = next(p for p in rep if p["backend"] == "NV")
  assert nv["usable"] and nv["props"]["qmd"] == "V03_00" and nv["props"]["memory_bytes"] == CHIPS["ada"].fb_size
  cpu = rep[0]
  assert cpu["backend"] == "CPU" and cpu["props"]["cores"] >= 1 and cpu["props"]["vector_bytes"] in (16, 32, 64)

def test_no_driver_loaded(tmp_path):
  reason, fix = probe._nv_files_problem(str(tmp_path), str(tmp_path / "proc_version"))
  assert "no " + str(tmp_path / "nvidiactl") in reason and "no NVIDIA kernel driver" in reason
  assert "modprobe" in fix and "MOCKGPU=1" in fix

def test_module_loaded_but_no_device_files(tmp_path):
  (tmp_path / "proc_version").write_text("NVRM version: 580.95.05\n")
  reason, fix = probe._nv_files_problem(str(tmp_path), str(tmp_path / "proc_version"))
  assert "loaded but its device files were not created" in reason and "nvidia-modprobe" in fix

def test_permission_denied(tmp_path, monkeypatch):
  for n in ("nvidiactl", "nvidia0", "nvidia-uvm"): (tmp_path / n).write_text("")
  assert probe._nv_files_problem(str(tmp_path)) is None
  # root passes every access check, so deny one file by name the way a non-member of its group would be denied
  monkeypatch.setattr(probe.os, "access", lambda p, m: not p.endswith("nvidia0"))
  reason, fix = probe._nv_files_problem(str(tmp_path))
  assert reason.startswith(f"permission denied on {tmp_path}/nvidia0") and "usermod -aG" in fix

def test_no_uvm(tmp_path):
  (tmp_path / "nvidiactl").write_text("")
  reason, fix = probe._nv_files_problem(str(tmp_path))
  assert "nvidia-uvm" in reason and "modprobe nvidia-uvm" in fix

@pytest.mark.parametrize("version", ["595.45.04", "550.54.14"])
def test_unsupported_driver_version(version):
  with syscalls.installed(MockNV(version=version, layout_version="580.142")):
    (p,) = probe.probe_nv(check_files=False)
  assert not p.usable and f"NVIDIA driver {version} is not supported" in p.reason and "580-series" in p.fix

def test_driver_refusal_names_the_status(monkeypatch):
  drv = MockNV()
  def lost(o, prm): raise RMError("NV_ERR_GPU_IS_LOST", "fell off the bus")
  monkeypatch.setattr(drv, "_ctrl_nv0080_ctrl_cmd_gpu_get_classlist_v2", lost)
  with syscalls.installed(drv):
    (p,) = probe.probe_nv(check_files=False)
  assert not p.usable and "NV_ERR_GPU_IS_LOST" in p.reason and "dmesg" in p.fix

def test_pre_ampere_gpu(monkeypatch):
  drv = MockNV()
  old = [c for c in drv.chip.classes if (c & 0xFF) != 0xC0 and c not in (ARCHS["hopper"].gpfifo, ARCHS["hopper"].copy)]
  monkeypatch.setattr(drv, "chip", type(drv.chip)(**{**drv.chip.__dict__, "classes": tuple(old) + (0xC3C0,)}))
  with syscalls.installed(drv):
    (p,) = probe.probe_nv(check_files=False)
  assert not p.usable and "no supported compute architecture" in p.reason and "older than Ampere" in p.fix
