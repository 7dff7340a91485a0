"""The first run on a GPU machine in one call (GPU.md, audits/nv.md section 5): environment facts, `python -m hcqrt`,
the conformance suite with its JSON report, the op tests on NV, the main job on NV, the WAIT_FOR_IDLE cost and the
fault-report check -- each step a subprocess with its own time cap (a hang or crash ends that step, not the run),
everything written under $OUT (or ./first_run_out), and a short table last. `--mock` runs it on the mock driver
(MOCKGPU=1, shorter caps). Exit status 1 when a step failed (a step that reached its cap is "capped", not failed).
A GPU step that reaches its cap is a hang, and GPU.md says to record it and stop: `nvidia-smi -q` and `dmesg | tail`
go to $OUT/hang.txt and the remaining GPU steps are skipped; a step whose processes outlive SIGKILL (stuck in the
driver) ends the run. The fault step raises an Xid on a shared GPU, so it runs only with `--with-fault`.

  python -m hw_tests --first-run [--mock] [--with-fault] [--cap-scale F] [--slow-cap S] [--skip STEP,...]   (or: bash hw_tests/first_run.sh ...)

  >>> [s.name for s in STEPS]
  ['env', 'probe', 'conformance', 'ops', 'train', 'barrier', 'fault']
"""
from __future__ import annotations
import argparse, json, os, re, shlex, subprocess, sys, time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = shlex.quote(sys.executable)

# environment facts (audits/nv.md section 5 item 1); each command may be missing or refused, which is itself a fact
ENV_COMMANDS = [
  "cat /proc/driver/nvidia/version", "ls -l /dev/nvidia*",
  "grep -E 'InitializeSystemMemoryAllocations|EnableGpuFirmware|RegistryDwords' /proc/driver/nvidia/params",
  "nvidia-smi -L", "nvidia-smi -q | grep -iE 'product name|persistence|MIG mode|Confidential|Addressing|BAR1|Total|Used|Free' | head -40",
  "nvidia-smi --query-gpu=driver_version,pci.bus_id,memory.total,clocks.max.sm --format=csv",
  "dmesg 2>&1 | grep -iE 'x86/PAT|nvidia-uvm|NVRM' | tail -20", "uname -a", "nproc", "free -g",
  f"{PY} -c 'import sys, numpy; print(sys.version); print(\"numpy\", numpy.__version__)'",
  f"{PY} -c 'from hcqrt.deps import missing; print(\"missing packages:\", missing() or \"none\")'",
  f"{PY} -c 'from compiler.assemble.ptx_assembler import get_assembler; print(\"PTX assembler:\", get_assembler().identity)'",
  "which ptxas nvdisasm nvcc 2>&1; ptxas --version 2>&1 | tail -1",
]

FAULT_PTX = """.visible .entry bad()
{
  .reg .b64 %rd<2>; .reg .b32 %r<2>;
  mov.u64 %rd1, 4096; mov.u32 %r1, 1; st.global.u32 [%rd1], %r1;
  ret;
}"""

@dataclass
class Step:
  name: str
  what: str
  cap_s: float        # on a real GPU
  mock_cap_s: float   # on the mock (the PTX interpreter is orders of magnitude slower than a GPU)
  gpu: bool = True    # opens the GPU: reaching the cap is a hang, which ends the GPU part of the run
  mock_slow: bool = False   # on the mock the interpreter often reaches the cap: there that is slowness, not a hang

# real caps add up to 575 s: with process start-up the whole run stays within 10 minutes (BUDGET_S guards the rest)
STEPS = [Step("env", "environment facts", 20, 20, gpu=False), Step("probe", "python -m hcqrt", 45, 30),
         Step("conformance", "python -m hw_tests --device NV", 150, 60), Step("ops", "op tests on NV (tests/frontend/test_ops.py)", 120, 20, mock_slow=True),
         Step("train", "main job on NV (examples/train_digits.py)", 150, 60, mock_slow=True),
         Step("barrier", "WAIT_FOR_IDLE cost (bench/hcq_bench.py)", 45, 30),
         Step("fault", "fault report and recovery (audits/nv.md 5.7)", 45, 30)]
BUDGET_S = 585.0
KILL_WAIT_S = 10.0   # after SIGKILL: a process in an uninterruptible driver call (D state) is never reaped
HANG_COMMANDS = ["nvidia-smi -q", "dmesg 2>&1 | tail -50"]   # GPU.md: after a hang record any pending Xid, then stop

def _kill(p: subprocess.Popen) -> bool:
  """SIGKILL `p`'s process group; True when it was reaped within KILL_WAIT_S."""
  os.killpg(p.pid, 9)
  try: p.wait(timeout=KILL_WAIT_S); return True
  except subprocess.TimeoutExpired: return False

def run(cmd: str, out_path: str, cap_s: float, env: dict) -> tuple[str, float, str]:
  """Run `cmd` (shell) with stdout+stderr into `out_path`; returns (status ok|FAIL|capped|stuck, seconds, last output
  line): "stuck" when it reached its cap and SIGKILL did not end it."""
  t0 = time.perf_counter()
  with open(out_path, "ab") as f:
    f.write(f"$ {cmd}\n".encode()); f.flush()
    p = subprocess.Popen(cmd, shell=True, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try: rc, status = p.wait(timeout=max(1.0, cap_s)), None
    except subprocess.TimeoutExpired:
      rc, status = (-9, "capped") if _kill(p) else (None, "stuck")
    f.write(f"\n[exit {rc} after {time.perf_counter() - t0:.1f} s]\n".encode())
  with open(out_path, "rb") as f: tail = [ln for ln in f.read().decode(errors="replace").replace("\r", "\n").splitlines() if ln.strip()]
  last = next((ln for ln in reversed(tail) if not ln.startswith("[exit") and not ln.startswith("$ ")), "")
  return status or ("ok" if rc == 0 else "FAIL"), time.perf_counter() - t0, last.strip()[:150]

def fault_check(mock: bool) -> int:
  """Launch a kernel that stores to an unmapped address; print how long the report took and what it said, then check a
  second launch on the same device works (recovery). Exit 0 when the fault was reported as one and the device recovered."""
  import numpy as np
  from hcqrt import syscalls
  from hcqrt.nv.device import NVDevice
  from compiler.assemble.ptx_assembler import assemble_ptx
  from hw_tests import kernels as K
  drv = None
  if mock:
    from hcqrt.mock.nv import MockNV
    drv = syscalls.install(MockNV(arch=os.environ.get("MOCKGPU_ARCH", "hopper")))
  try:
    d = NVDevice("NV")
    d.wait_timeout_s = 30.0
    bad = d.program("bad", assemble_ptx(K.head(d.arch) + FAULT_PTX, d.arch))
    t = time.perf_counter()
    try:
      bad(global_size=(1, 1, 1), local_size=(1, 1, 1), wait=True)
      print("fault: NOT reported (the store to 0x1000 went through or was dropped silently)"); reported = False
    except Exception as e:
      print(f"fault: reported after {time.perf_counter() - t:.3f} s: {type(e).__name__}: {e}")
      reported = "faulted" in str(e) or "fault" in str(e).lower()
    inc = d.program("inc", assemble_ptx(K.head(d.arch) + K.INC, d.arch))
    buf = d.allocator.alloc(4)
    d.allocator.copyin(buf, memoryview(np.zeros(1, np.uint32)))
    for _ in range(3): inc(buf, global_size=(1, 1, 1), local_size=(1, 1, 1))
    d.synchronize()
    got = np.zeros(1, np.uint32); d.allocator.copyout(memoryview(got), buf)
    print(f"recovery: a later kernel ran {got[0]} of 3 times")
    return 0 if reported and got[0] == 3 else 1
  finally:
    if drv is not None: syscalls.uninstall(drv)

def commands(step: str, mock: bool, out: str) -> list[str]:
  m = " --mock" if mock else ""
  if step == "env": return ENV_COMMANDS
  if step == "probe": return [f"{PY} -m hcqrt"]
  if step == "conformance":
    return [f"{PY} -m hw_tests --device NV{m} --json {shlex.quote(os.path.join(out, 'hw_tests_report.json'))}" + (" --stress 500" if mock else "")]
  if step == "ops": return [f"{PY} -m pytest -q -x -p no:cacheprovider tests/frontend/test_ops.py"]
  if step == "train": return [f"{PY} examples/train_digits.py --device NV --steps {2 if mock else 300}"]
  if step == "barrier": return [f"{PY} bench/hcq_bench.py --barrier-cost" + (" --kernels 30 --reps 2" if mock else " --real --kernels 200 --reps 20")]
  if step == "fault": return [f"{PY} -m hw_tests.first_run --fault-check" + m]
  raise ValueError(f"first run: unknown step {step!r} ({', '.join(s.name for s in STEPS)})")

def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(prog="python -m hw_tests --first-run", description=__doc__.splitlines()[0])
  ap.add_argument("--mock", action="store_true", help="run against the mock driver (MOCKGPU=1), with shorter caps")
  ap.add_argument("--cap-scale", type=float, default=1.0, help="multiply every step's time cap (CI uses < 1)")
  ap.add_argument("--slow-cap", type=float, default=None, help="with --mock: cap the steps the mock's interpreter is too slow "
                  "to finish (ops, train: capped, not failed, either way) at this many seconds (the test of this script)")
  ap.add_argument("--skip", default="", help="comma-separated steps to leave out")
  ap.add_argument("--with-fault", action="store_true", help="run the fault step (it raises an Xid 31 on the GPU, which fleet "
                  "health agents log; RC confines it to our channel group)")
  ap.add_argument("--fault-check", action="store_true", help=argparse.SUPPRESS)   # the fault step's own process
  a = ap.parse_args(argv)
  if a.fault_check: return fault_check(a.mock)
  out = os.environ.get("OUT") or os.path.join(os.getcwd(), "first_run_out")
  os.makedirs(out, exist_ok=True)
  env = dict(os.environ, PYTHONUNBUFFERED="1", NV="1", DEVICE="NV")
  env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(ROOT, ".site"), ROOT, os.environ.get("PYTHONPATH", "")) if p)
  if a.mock: env.update(MOCKGPU="1", MOCKGPU_ARCH=os.environ.get("MOCKGPU_ARCH", "hopper"))
  skip = {s for s in a.skip.split(",") if s}
  if bad := skip - {s.name for s in STEPS}: ap.error(f"--skip: unknown step(s) {', '.join(sorted(bad))}")
  print(f"first run ({'mock' if a.mock else 'real GPU'}), output in {out}", flush=True)
  rows, t_all, hung, stuck = [], time.perf_counter(), "", False
  for s in STEPS:
    if s.name in skip: rows.append((s, "skipped", 0.0, "")); continue
    if s.name == "fault" and not a.with_fault: rows.append((s, "skipped", 0.0, "opt-in: --with-fault")); continue
    if stuck or (hung and s.gpu): rows.append((s, "skipped", 0.0, f"after the {hung} step hung")); continue
    cap = min((s.mock_cap_s if a.mock else s.cap_s) * a.cap_scale, BUDGET_S - (time.perf_counter() - t_all))
    if a.mock and s.mock_slow and a.slow_cap is not None: cap = min(cap, a.slow_cap)
    path = os.path.join(out, f"{s.name}.txt")
    open(path, "w").close()
    status, secs, last = "ok", 0.0, ""
    cmds = commands(s.name, a.mock, out)
    deadline = time.perf_counter() + cap
    for cmd in cmds:   # env: many small commands, each tolerated to fail; others: one command
      left = deadline - time.perf_counter()
      if left <= 0: status = "capped"; break
      st, dt, ln = run(cmd, path, min(left, 10.0) if s.name == "env" else left, env)
      secs += dt; last = ln or last
      if s.name != "env" and st != "ok": status = st
      if st == "stuck": status = "stuck"; break
    print(f"  {s.name:12s} {status:7s} {secs:6.1f} s  {last}", flush=True)
    rows.append((s, status, secs, last))
    if status == "stuck" or (status == "capped" and s.gpu and not (a.mock and s.mock_slow)):
      hung, stuck = s.name, stuck or status == "stuck"
      hang = os.path.join(out, "hang.txt")
      with open(hang, "w") as f: f.write(f"the {s.name} step was {status} after {secs:.1f} s\n")
      for cmd in HANG_COMMANDS: run(cmd, hang, 20.0, env)
      print(f"  the {s.name} step {'is stuck in the driver: stopping' if stuck else 'hung: skipping the other GPU steps'}; "
            f"nvidia-smi -q and dmesg in {hang}", flush=True)
  facts = _facts(out)
  summary = {"mock": a.mock, "seconds": time.perf_counter() - t_all, "facts": facts,
             "steps": [{"step": s.name, "what": s.what, "status": st, "seconds": round(dt, 1), "last": ln} for s, st, dt, ln in rows]}
  with open(os.path.join(out, "summary.json"), "w") as f: json.dump(summary, f, indent=1)
  print(f"\n{'step':12s} {'status':8s} {'s':>6s}  result")
  for s, st, dt, ln in rows: print(f"{s.name:12s} {st:8s} {dt:6.1f}  {ln[:100]}")
  for k, v in facts.items(): print(f"  {k}: {v}")
  print(f"first run: {sum(st == 'ok' for _, st, _, _ in rows)} ok, {sum(st == 'FAIL' for _, st, _, _ in rows)} failed, "
        f"{sum(st == 'capped' for _, st, _, _ in rows)} capped, {sum(st == 'stuck' for _, st, _, _ in rows)} stuck, "
        f"{time.perf_counter() - t_all:.0f} s; files in {out}")
  return 1 if any(st in ("FAIL", "stuck") for _, st, _, _ in rows) else 0

def _facts(out: str) -> dict:
  """A few numbers pulled out of the step outputs for the table (whatever is there)."""
  facts: dict = {}
  try:
    rep = json.load(open(os.path.join(out, "hw_tests_report.json")))
    facts["conformance"] = f"{rep['passed']} passed, {rep['failed']} failed on {rep['device'].get('product')} {rep['device'].get('arch')}"
    b2b = rep.get("metrics", {}).get("back_to_back_us_per_launch")
    if b2b is not None: facts["back_to_back_us_per_launch"] = round(b2b, 2)
  except (OSError, ValueError, KeyError): pass
  def grep(step: str, pat: str) -> str | None:
    try: m = re.findall(pat, open(os.path.join(out, f"{step}.txt"), errors="replace").read())
    except OSError: return None
    return m[-1] if m else None
  facts["train_accuracy"] = grep("train", r"test accuracy: ([0-9.]+)")
  facts["train_ms_per_step"] = grep("train", r"ms per step: ([0-9.]+)")
  facts["ops"] = grep("ops", r"\n=*\s*([0-9]+ (?:passed|failed)[^\n=]*)")
  facts["barrier"] = grep("barrier", r"independent, WAIT_FOR_IDLE between\s+([0-9.]+) µs") and \
    " / ".join(grep("barrier", p) or "?" for p in (r"between\s+([-0-9.]+) µs", r"no barrier\s+([-0-9.]+) µs", r"chain\s+([-0-9.]+) µs")) + \
    " µs per kernel (independent with WAIT_FOR_IDLE / without / dependent chain)"
  facts["fault"] = grep("fault", r"fault: ([^\n]{0,120})")
  facts["recovery"] = grep("fault", r"recovery: ([^\n]*)")
  return {k: v for k, v in facts.items() if v is not None}

if __name__ == "__main__":
  sys.exit(main())
