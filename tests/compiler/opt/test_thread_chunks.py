"""Big split CPU kernels cut into more chunks than cores (compiler/opt/heuristic.py thread_chunks), claimed in turn by
the runner's threads, of which it wakes at most one per other CPU (hcqrt/cpu/device.py hcqrt_set_workers, and the
LLVM IR runner's twin): every output is written once for loop counts the chunks don't divide, on 1-3 cores and both
ISAs, launched alone and in a launch list; and a launch of many chunks runs each exactly once on no more threads than
the cap allows."""
import dataclasses
import numpy as np
import pytest
import compiler.opt.heuristic as heuristic
from compiler.dtypes import dtypes
from compiler.lazy import LazyBuffer
from compiler.lower import lower
from compiler.opt.heuristic import optimize
from compiler.opt.base import Opt
from compiler.pipeline import compile_kernel
from compiler.schedule import create_schedule
from compiler.target import Target
from compiler.uop import Ops
from frontend.devices import open_device
from hcqrt.cpu.device import CPULaunchList
from hcqrt.interface import GraphExec
from tests.conftest import skip_unless_host_runs

def _realized(shape):
  x = LazyBuffer.empty(shape, dtypes.float32, "CPU"); x.buffer = object()
  return x

def _sums_ast(shape):
  (si,) = create_schedule([_realized(shape).r(Ops.ADD, (2,))])
  return si.ast

def _transpose_ast(shape):
  (si,) = create_schedule([_realized(shape).permute((0, 2, 3, 1)).contiguous()])
  return si.ast

def test_only_big_kernels_are_chunked():
  t = Target("CPU", "c", ncores=2, simd_bytes=64)
  small = optimize(lower(_sums_ast((13, 32, 1024))), t)   # 426k iterations: one chunk a core
  assert small.threaded is not None and small.chunks == 2
  big = optimize(lower(_sums_ast((64, 64, 1 << 14))), t)   # 67M: CHUNKS_PER_CORE a core
  assert big.threaded is not None and big.chunks == 2 * heuristic.CHUNKS_PER_CORE
  assert optimize(lower(_sums_ast((64, 64, 1 << 14))), dataclasses.replace(t, ncores=1)).threaded is None

def _compile(ast, target, ncores):
  return compile_kernel(ast, dataclasses.replace(target, ncores=ncores), name="k")

@pytest.mark.parametrize("ncores", [1, 2, 3])
@pytest.mark.parametrize("shape,make,ref", [
    ((13, 7, 2048), _sums_ast, lambda x: x.astype(np.float64).sum(2)),            # 13 rows in 8 or 12 chunks
    ((9, 16, 24, 20), _transpose_ast, lambda x: x.transpose(0, 2, 3, 1)),           # 9 images in 8 chunks
])
def test_chunked_kernels_write_every_output(cpu_target, monkeypatch, ncores, shape, make, ref):
  skip_unless_host_runs(cpu_target)
  monkeypatch.setattr(heuristic, "CHUNK_MIN_WORK", 0)   # (these small kernels cut as a big one would be)
  ck = _compile(make(shape), cpu_target, ncores)
  want_chunks = ncores * heuristic.CHUNKS_PER_CORE if ncores > 1 and shape[0] >= ncores * heuristic.CHUNKS_PER_CORE else ncores
  assert ck.threads == (want_chunks if ncores > 1 else 1), (ck.threads, ck.applied_opts)
  dev = open_device("CPU")
  x = np.random.default_rng(5).standard_normal(shape, dtype=np.float32)
  want = ref(x)
  inp = dev.allocator.alloc(x.nbytes); dev.allocator.copyin(inp, memoryview(x))
  outs = [dev.allocator.alloc(4 * want.size) for _ in range(2)]
  nan = np.full(want.size, np.nan, np.float32)
  for o in outs: dev.allocator.copyin(o, memoryview(nan))   # an unwritten output stays NaN
  prog = dev.program(ck.name, ck.binary)
  prog(outs[0], inp, threads=ck.threads)
  CPULaunchList([GraphExec(prog, [outs[1], inp], threads=ck.threads)] * 3).replay()   # the JIT's path, three times over
  for o in outs:
    got = np.empty(want.shape, np.float32); dev.allocator.copyout(memoryview(got), o)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("ncores", [2, 3])
def test_chunked_llvm_kernels_write_every_output(monkeypatch, ncores):
  """The LLVM IR renderer (CPU_LLVM=1) cuts the threaded loop the same way: 13 rows in 8 or 12 chunks."""
  monkeypatch.setattr(heuristic, "CHUNK_MIN_WORK", 0)
  t = Target("CPU", "llvm", arch="native", ncores=ncores, simd_bytes=open_device("CPU").simd_bytes)
  ck = _compile(_sums_ast((13, 7, 2048)), t, ncores)
  assert ck.threads == ncores * heuristic.CHUNKS_PER_CORE, ck.applied_opts
  dev = open_device("CPU")
  x = np.random.default_rng(6).standard_normal((13, 7, 2048), dtype=np.float32)
  inp, out = dev.allocator.alloc(x.nbytes), dev.allocator.alloc(4 * 13 * 7)
  dev.allocator.copyin(inp, memoryview(x)); dev.allocator.copyin(out, memoryview(np.full(13 * 7, np.nan, np.float32)))
  dev.program(ck.name, ck.binary)(out, inp, threads=ck.threads)
  got = np.empty((13, 7), np.float32); dev.allocator.copyout(memoryview(got), out)
  np.testing.assert_allclose(got, x.astype(np.float64).sum(2), rtol=1e-4, atol=1e-3)

# each call records its chunk's runs and the thread it ran on
WHO = r"""
long syscall(long number, ...);
void who(int *out, int core) { __atomic_fetch_add(&out[core], 1, __ATOMIC_SEQ_CST); out[64 + core] = (int)syscall(186); }
"""

@pytest.mark.parametrize("cap", [0, 1, 2])
def test_runner_claims_many_chunks_on_capped_threads(runner, cap):
  """A stress test: 500 launches of 24 chunks, the runner capped at `cap` workers: every chunk of every launch runs
  once, and on at most cap + 1 threads (the caller and the workers the cap allows)."""
  from compiler.assemble.c_compiler import compile_c
  import hcqrt.cpu.device as cpu_device
  from hcqrt.cpu.device import CPUProgram, CPUDevice
  cpu_device._runner.workers(cap)
  try:
    prog, dev, chunks, n = CPUProgram("who", compile_c(WHO, "who")), CPUDevice(), 24, 500
    buf = dev.allocator.alloc(4 * 128)
    CPULaunchList([GraphExec(prog, [buf], threads=chunks)] * n).replay()
    c = np.frombuffer(buf.view(), np.int32)
    assert c[:chunks].tolist() == [n] * chunks and not c[chunks:64].any(), c[:64]
    tids = set(c[64:64 + chunks].tolist())
    prog(buf, threads=chunks)   # one launch alone (hcqrt_run)
    assert c[:chunks].tolist() == [n + 1] * chunks
    assert len(tids | set(c[64:64 + chunks].tolist())) <= cap + 1, tids
  finally: cpu_device._runner.workers(cpu_device.RUNNER_WORKERS)

# each call counts its chunk's runs, for launches of more chunks than the runner has worker threads (256)
COUNT = r"""void count(int *out, int core) { __atomic_fetch_add(&out[core], 1, __ATOMIC_SEQ_CST); }"""

@pytest.mark.parametrize("chunks", [256, 257, 1000, 0xffff])
def test_runner_takes_more_chunks_than_its_thread_limit(runner, chunks):
  """A launch's cores are chunks, not threads: a 64-core host cuts a big kernel into 256 or more (thread_chunks), and
  every one runs once, alone (hcqrt_run) and in a launch list; one past the claim word's 16-bit fields is refused."""
  from compiler.assemble.c_compiler import compile_c
  from hcqrt.cpu.device import CPUProgram, CPUDevice
  prog, dev = CPUProgram("count", compile_c(COUNT, "count")), CPUDevice()
  buf = dev.allocator.alloc(4 * (chunks + 16))
  prog(buf, threads=chunks)
  CPULaunchList([GraphExec(prog, [buf], threads=chunks)] * 2).replay()
  c = np.frombuffer(buf.view(), np.int32)
  assert c[:chunks].tolist() == [3] * chunks and not c[chunks:].any()
  if chunks == 0xffff:
    with pytest.raises(RuntimeError, match="bad arguments"): prog(buf, threads=chunks + 1)

# chunk 0 stalls (bounded) until every other chunk ran: the thread holding it stands for one the OS stopped mid-kernel
STALL = r"""
long syscall(long number, ...);
void stall(int *out, int chunks, int core) {
  if (core == 0) for (long s = 0; __atomic_load_n(&out[63], __ATOMIC_SEQ_CST) < chunks - 1 && s < 3000000000L; s++) ;
  out[64 + core] = (int)syscall(186);
  if (core) __atomic_fetch_add(&out[63], 1, __ATOMIC_SEQ_CST);
  else out[0] = __atomic_load_n(&out[63], __ATOMIC_SEQ_CST);
}"""

@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_stalled_thread_holds_up_one_chunk(runner):
  """While one thread is stuck in its chunk, the other runs every chunk left (one chunk a core would leave half)."""
  from compiler.assemble.c_compiler import compile_c
  from hcqrt.cpu.device import CPUProgram, CPUDevice
  prog, dev = CPUProgram("stall", compile_c(STALL, "stall")), CPUDevice()
  for _ in range(3):
    buf = dev.allocator.alloc(4 * 128)
    prog(buf, vals=(8,), threads=8)
    c = np.frombuffer(buf.view(), np.int32)
    # chunk 0 ended after the 7 others (not after its bounded wait ran out): its thread held up nothing else (a thread
    # may have run some before it took chunk 0, e.g. a worker that claimed from the back before the caller came)
    assert c[0] == 7 and c[63] == 7, c[:64]

def test_caller_takes_front_chunks_worker_back(runner):
  """On one worker, the caller's chunks are a prefix and the worker's the rest (two contiguous halves when neither
  stalls: each core keeps its half of the data, as with one chunk a core), in every one of 200 launches."""
  import threading
  from compiler.assemble.c_compiler import compile_c
  import hcqrt.cpu.device as cpu_device
  from hcqrt.cpu.device import CPUProgram, CPUDevice
  cpu_device._runner.workers(1)
  try:
    prog, dev, me = CPUProgram("who", compile_c(WHO, "who")), CPUDevice(), threading.get_native_id()
    buf = dev.allocator.alloc(4 * 128)
    for _ in range(200):
      prog(buf, threads=16)
      mine = [t == me for t in np.frombuffer(buf.view(), np.int32)[64:80].tolist()]
      k = mine.index(False) if False in mine else 16
      assert mine == [True] * k + [False] * (16 - k), mine
  finally: cpu_device._runner.workers(cpu_device.RUNNER_WORKERS)

@pytest.mark.parametrize("most", [1, 2, 3])
def test_python_pool_runs_many_chunks_on_at_most_its_threads(most):
  """Without a native runner: 24 chunks, each once, on at most `most` threads (every n-th chunk on each)."""
  from compiler.assemble.c_compiler import compile_c
  import hcqrt.cpu.device as cpu_device
  from hcqrt.cpu.device import CPUProgram, CPUDevice
  old, cpu_device._runner, cpu_device._pool.most = cpu_device._runner, None, most
  try:
    prog, dev = CPUProgram("who", compile_c(WHO, "who")), CPUDevice()
    buf = dev.allocator.alloc(4 * 128)
    for _ in range(5): prog(buf, threads=24)
    c = np.frombuffer(buf.view(), np.int32)
    assert c[:24].tolist() == [5] * 24 and len(set(c[64:88].tolist())) <= most, c[:88]
  finally: cpu_device._runner, cpu_device._pool.most = old, cpu_device._NCORES

@pytest.fixture(params=["c-runner", "llvm-runner"])
def runner(request):
  """The C or the LLVM IR runner installed for the test; the one before it put back after."""
  import hcqrt.cpu.device as cpu_device
  from compiler.assemble.c_compiler import compile_c
  old = cpu_device._runner
  if request.param == "c-runner": cpu_device.install_runner(compile_c(cpu_device.RUNNER_C, "hcqrt_runner"))
  else:
    from compiler.assemble.llvm import compile_llvm
    from hcqrt.cpu.runner_llvm import RUNNER_LLVM
    cpu_device.install_runner(compile_llvm(RUNNER_LLVM, "hcqrt_runner"))
  yield request.param
  cpu_device._runner = old

def _padded_conv(shape, wshape):
  """The AST of a 3x3 conv of a padded view (read in place: the gates the peel cuts away) and its input buffers' shapes."""
  from frontend import Tensor
  x, w = _realized(shape), _realized(wshape)
  si = [si for si in create_schedule([Tensor(x).pad((1, 1, 1, 1)).conv2d(Tensor(w)).lazydata]) if si.kind == "kernel"][-1]
  return si.ast, [b.shape for b in si.inputs]

@pytest.mark.parametrize("renderer", ["c", "llvm"])
@pytest.mark.parametrize("ncores", [3, 16])
def test_peeled_threaded_loop_writes_every_output(renderer, ncores):
  """The threaded loop peeled (a batch of 1: the cores split the 12 output rows, which the peel cuts at 1 and 11): each
  chunk runs its part of every piece, 3 chunks of 4 rows (the first and last cut by a piece's edge) or 16 chunks (4 of
  them empty), in C and in LLVM IR; every output written once and equal to the unthreaded, unpeeled kernel's."""
  if renderer == "llvm": pytest.importorskip("llvmlite")
  dev = open_device("CPU")
  t = Target("CPU", renderer, arch="native", ncores=ncores, simd_bytes=dev.simd_bytes)
  shape, wshape = (1, 3, 12, 16), (8, 3, 3, 3)
  ast, in_shapes = _padded_conv(shape, wshape)
  assert sorted(in_shapes) == sorted([shape, wshape]), in_shapes
  k = lower(ast, "k")
  rows = next(i for i, g in enumerate(k.global_ranges) if g.src[0].arg == 12)
  ck = compile_kernel(ast, t, (Opt("THREAD", rows), Opt("PEEL", rows)), name="k")
  assert ck.threads == ncores and ("PEEL", k.global_ranges[rows].arg[0], (1, 11)) in ck.applied_opts, (ck.threads, ck.applied_opts)
  assert ("_lo < 0" in ck.src) if renderer == "c" else ("select i1" in ck.src), ck.src[:2000]
  ref = compile_kernel(ast, dataclasses.replace(t, ncores=1), (), name="k")
  assert ref.threads == 1
  rng = np.random.default_rng(8)
  xs = [rng.standard_normal(s, dtype=np.float32) for s in in_shapes]
  got = []
  for c in (ck, ref):
    bufs = [dev.allocator.alloc(4 * 8 * 12 * 16)] + [dev.allocator.alloc(a.nbytes) for a in xs]
    for b, a in zip(bufs, [np.full(8 * 12 * 16, np.nan, np.float32), *xs]): dev.allocator.copyin(b, memoryview(a))
    dev.program(c.name, c.binary)(*bufs, threads=c.threads)
    out = np.empty(8 * 12 * 16, np.float32); dev.allocator.copyout(memoryview(out), bufs[0]); got.append(out)
  assert not np.isnan(got[0]).any()
  np.testing.assert_allclose(got[0], got[1], rtol=1e-5, atol=1e-5)
