"""The native CPU runners' claiming of core indices (hcqrt/cpu/device.py RUNNER_C claim_and_run, and its LLVM IR twin
in hcqrt/cpu/runner_llvm.py): the caller returns only after every core of a launch finished, and each core of each
launch runs exactly once with its own kernel and arguments, also when launches of two kernels alternate on more
threads than there are CPUs (a late worker that claimed from the previous launch would run the other kernel)."""
import numpy as np
import pytest
from compiler.assemble.c_compiler import compile_c
import hcqrt.cpu.device as cpu_device
from hcqrt.cpu.device import RUNNER_C, install_runner, CPUDevice, CPUProgram, CPULaunchList
from hcqrt.interface import GraphExec

@pytest.fixture(params=["c-runner", "llvm-runner"])
def runner(request):
  """The C or the LLVM IR runner installed for the test; the one before it put back after."""
  old = cpu_device._runner
  if request.param == "c-runner": install_runner(compile_c(RUNNER_C, "hcqrt_runner"))
  else:
    from compiler.assemble.llvm import compile_llvm
    from hcqrt.cpu.runner_llvm import RUNNER_LLVM
    install_runner(compile_llvm(RUNNER_LLVM, "hcqrt_runner"))
  yield request.param
  cpu_device._runner = old

# core 0 returns once every other core has started on another thread (bounded wait); the others finish 30 ms times
# their index later: a caller that returned after its own core would read their slots unwritten
SLOW = r"""
long syscall(long number, ...);
void E_slow(int *out, int n, int core) {
  if (core) {
    __atomic_fetch_add(&out[15], 1, __ATOMIC_SEQ_CST);
    long ts[2] = {0, 30000000L * core}; syscall(35, ts, 0);   /* nanosleep */
  } else for (long s = 0; __atomic_load_n(&out[15], __ATOMIC_SEQ_CST) < n - 1 && s < 1000000000L; s++) ;
  __atomic_store_n(&out[core], core + 1, __ATOMIC_RELEASE);
}"""

@pytest.mark.parametrize("threads", [2, 3])
def test_caller_waits_for_every_core(runner, threads):
  dev, prog = CPUDevice(), CPUProgram("E_slow", compile_c(SLOW, "E_slow"))
  for _ in range(4):
    b = dev.allocator.alloc(64)
    prog(b, vals=(threads,), threads=threads)
    got = np.frombuffer(b.view(), np.int32)[:threads].tolist()   # read at once
    assert got == list(range(1, threads + 1)), got

# each kernel counts, per core, its runs with its own tag and with the other kernel's
TWO = r"""
void A(int *cnt, int tag, int core) { __atomic_fetch_add(&cnt[core * 2 + (tag != 1)], 1, __ATOMIC_RELAXED); }
void B(int *cnt, int tag, int core) { __atomic_fetch_add(&cnt[64 + core * 2 + (tag != 2)], 1, __ATOMIC_RELAXED); }
"""

def test_alternating_launches_each_run_every_core_once(runner):
  """A stress test (it catches a claim word without the launch's epoch some of the time, not every time)."""
  obj = compile_c(TWO, "two")
  a, b = CPUProgram("A", obj), CPUProgram("B", obj)
  dev, threads, n, reps = CPUDevice(), 4, 500, 20
  cnt = dev.allocator.alloc(4 * 128)
  g = CPULaunchList([GraphExec(a if i % 2 == 0 else b, [cnt], (1 if i % 2 == 0 else 2,), threads=threads) for i in range(2 * n)])
  for _ in range(reps): g.replay()
  c = np.frombuffer(cnt.view(), np.int32)[:128].copy()
  ca, cb = c[:64].reshape(32, 2)[:threads], c[64:].reshape(32, 2)[:threads]
  assert (ca[:, 0] == n * reps).all() and (ca[:, 1] == 0).all(), ca.tolist()
  assert (cb[:, 0] == n * reps).all() and (cb[:, 1] == 0).all(), cb.tolist()
