"""The native CPU runners (C and LLVM IR, hcqrt/cpu/device.py RUNNER_C and hcqrt/cpu/runner_llvm.py) inside a launch
list, the JIT's replay: each multi-core launch pins the workers away from the CPU the caller runs on then, so a caller
moved onto a worker's CPU mid-list (the scheduler often wakes a caller that slept waiting for a worker on that worker's
CPU) does not run both halves of every later launch on one CPU. In a child process (it moves its own threads between
CPUs); needs two CPUs."""
import json, os, subprocess, sys, pathlib
import pytest
from tests.child_env import pythonpath

REPO = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")

PRELUDE = r"""
import json, os, sys
import numpy as np
from compiler.assemble.c_compiler import compile_c
from hcqrt.cpu.device import RUNNER_C, install_runner, CPUDevice, CPUProgram, CPULaunchList
from hcqrt.interface import GraphExec
if sys.argv[1] == "c-runner": install_runner(compile_c(RUNNER_C, "hcqrt_runner"))
else:
  from compiler.assemble.llvm import compile_llvm
  from hcqrt.cpu.runner_llvm import RUNNER_LLVM
  install_runner(compile_llvm(RUNNER_LLVM, "hcqrt_runner"))
KERNELS = r'''
long syscall(long number, ...);
/* which CPU each core's call ran on; the two cores wait for each other (bounded), so they run on two threads at once
   (the runner gives a core whose worker has not come yet to the caller) */
void where(int *out, int core) {
  __atomic_fetch_add(&out[8], 1, __ATOMIC_SEQ_CST);
  for (long spins = 0; __atomic_load_n(&out[8], __ATOMIC_SEQ_CST) < 2 && spins < 2000000000L; spins++) ;
  unsigned c = 0; syscall(309, &c, 0, 0); out[core] = (int)c;
}
/* move the calling thread (the runner's caller: this is a one-core launch) to CPU `cpu` */
void move(int *out, int cpu, int core) {
  unsigned long mask[16] = {0};
  mask[cpu / 64] |= 1UL << (cpu % 64);
  out[0] = (int)syscall(203, 0, sizeof(mask), mask);
}
/* the thread id each core's call ran on */
void who(int *out, int core) { out[core] = (int)syscall(186); }
'''
obj = compile_c(KERNELS, "runner_list_kernels")
where, move, who = (CPUProgram(n, obj) for n in ("where", "move", "who"))
dev, cpus = CPUDevice(), sorted(os.sched_getaffinity(0))
def ints(buf, n): return np.frombuffer(buf.view(), np.int32)[:n].tolist()
"""

MOVED = PRELUDE + r"""
os.sched_setaffinity(0, {cpus[0]})
warm, first, second, flag = (dev.allocator.alloc(64) for _ in range(4))   # (zero-filled)
where(warm, threads=2)   # the worker starts, pinned away from cpus[0]
worker_cpu = ints(warm, 2)[1]
g = CPULaunchList([GraphExec(where, [first], (), threads=2), GraphExec(move, [flag], (worker_cpu,)), GraphExec(where, [second], (), threads=2)])
g.replay()
print(json.dumps({"cpus": cpus, "worker_cpu": worker_cpu, "first": ints(first, 2), "second": ints(second, 2), "moved": ints(flag, 1)[0]}))
"""

LATE = r"""
import json, os, sys, threading
cpu = min(os.sched_getaffinity(0))
os.sched_setaffinity(0, {cpu})   # before the runner starts: one CPU, its worker unpinned on the same one
""" + PRELUDE + r"""
import hcqrt.cpu.device as cpu_device
cpu_device._runner.workers(1)   # (on one CPU the runner starts no worker by default: this test needs one, left unrun)
tid = threading.get_native_id()
ids, warm = dev.allocator.alloc(64), dev.allocator.alloc(64)
before = set(os.listdir("/proc/self/task"))
who(warm, threads=2)   # the worker starts
(worker,) = [int(t) for t in set(os.listdir("/proc/self/task")) - before]
# SCHED_IDLE: the worker runs only when its CPU has nothing else to run, i.e. never while the caller works or spins
os.sched_setscheduler(worker, os.SCHED_IDLE, os.sched_param(0))
runs = []   # SCHED_IDLE still gets a sliver of the CPU (weight 3 of 1024), so the worker may come now and then on a loaded
for _ in range(5):   # host: a launch it did not hold up is one where the caller ran both cores
  who(ids, threads=2)
  runs.append(ints(ids, 2))
  if runs[-1] == [tid, tid]: break
print(json.dumps({"caller": tid, "worker": worker, "runs": runs}))
"""

def _child(script: str, kind: str) -> dict:
  r = subprocess.run([sys.executable, "-c", script, kind], capture_output=True, text=True, cwd=REPO, timeout=120,
                     env={**os.environ, "PYTHONPATH": pythonpath(REPO)})
  assert r.returncode == 0, r.stderr
  return json.loads(r.stdout)

@pytest.mark.parametrize("kind", ["c-runner", "llvm-runner"])
def test_list_repins_workers_when_the_caller_moved(kind):
  """A one-core launch moves the caller onto the worker's CPU halfway through a list: the next two-core launch still
  runs its halves on two CPUs (the worker was pinned away again), not both on the caller's."""
  out = _child(MOVED, kind)
  assert out["moved"] == 0 and out["first"][0] != out["first"][1], out
  assert out["second"][0] == out["worker_cpu"], out   # (the caller now runs there)
  assert out["second"][1] != out["second"][0] and out["second"][1] in out["cpus"], out

@pytest.mark.parametrize("kind", ["c-runner", "llvm-runner"])
def test_caller_runs_the_cores_of_a_worker_that_does_not_come(kind):
  """A worker the OS does not run (SCHED_IDLE on the caller's one CPU: another process's thread would do the same) no
  longer holds a launch up until it runs: the caller takes its core (every core runs once, on some thread)."""
  out = _child(LATE, kind)
  caller, worker = out["caller"], out["worker"]
  assert all(r[0] == caller and r[1] in (caller, worker) for r in out["runs"]), out
  assert out["runs"][-1] == [caller, caller], out   # (waiting for the worker: it runs core 1 every time)

CAPPED = PRELUDE + r"""
import hcqrt.cpu.device as cpu_device
before = set(os.listdir("/proc/self/task"))
buf = dev.allocator.alloc(4 * 64)
for cap in (1, 2):
  cpu_device._runner.workers(cap)
  who(buf, threads=24)   # (hcqrt_run)
  CPULaunchList([GraphExec(who, [buf], threads=24)] * 3).replay()   # (hcqrt_run_list)
print(json.dumps({"new": len(set(os.listdir("/proc/self/task")) - before)}))
"""

@pytest.mark.parametrize("kind", ["c-runner", "llvm-runner"])
def test_worker_cap_bounds_the_threads_started(kind):
  """A launch of 24 chunks under a cap of 2 workers starts 2 worker threads, not one per chunk (the cap bounds the
  threads the runner creates as well as those it wakes): the process gains exactly 2 threads."""
  assert _child(CAPPED, kind)["new"] == 2
