"""The native CPU runners (C and LLVM IR, hcqrt/cpu/device.py RUNNER_C and hcqrt/cpu/runner_llvm.py) inside a launch
list, the JIT's replay: each multi-core launch pins the workers away from the CPU the caller runs on then, so a caller
moved onto a worker's CPU mid-list (the scheduler often wakes a caller that slept waiting for a worker on that worker's
CPU) does not run both halves of every later launch on one CPU. In a child process (it moves its own threads between
CPUs); needs two CPUs."""
import json, os, subprocess, sys, pathlib
import pytest
from tests.child_env import pythonpath

REPO = pathlib.Path(__file__).resolve().parents[1]
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
/* which CPU each core's call ran on */
void where(int *out, int core) { unsigned c = 0; syscall(309, &c, 0, 0); out[core] = (int)c; }
/* move the calling thread (the runner's caller: this is a one-core launch) to CPU `cpu` */
void move(int *out, int cpu, int core) {
  unsigned long mask[16] = {0};
  mask[cpu / 64] |= 1UL << (cpu % 64);
  out[0] = (int)syscall(203, 0, sizeof(mask), mask);
}
'''
obj = compile_c(KERNELS, "runner_list_kernels")
where, move = (CPUProgram(n, obj) for n in ("where", "move"))
dev, cpus = CPUDevice(), sorted(os.sched_getaffinity(0))
def ints(buf, n): return np.frombuffer(buf.view(), np.int32)[:n].tolist()
"""

MOVED = PRELUDE + r"""
os.sched_setaffinity(0, {cpus[0]})
first, second, flag = dev.allocator.alloc(64), dev.allocator.alloc(64), dev.allocator.alloc(64)
where(first, threads=2)   # the worker starts, pinned away from cpus[0]
worker_cpu = ints(first, 2)[1]
g = CPULaunchList([GraphExec(where, [first], (), threads=2), GraphExec(move, [flag], (worker_cpu,)), GraphExec(where, [second], (), threads=2)])
g.replay()
print(json.dumps({"cpus": cpus, "worker_cpu": worker_cpu, "first": ints(first, 2), "second": ints(second, 2), "moved": ints(flag, 1)[0]}))
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
