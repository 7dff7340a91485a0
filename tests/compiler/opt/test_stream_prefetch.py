"""Big streaming reductions prefetch ahead (compiler/opt/heuristic.py stream_prefetch): one hint per cache line of the
stream on AVX2 (two 32-byte loads a line) and AVX-512, into L2 (PREFETCHT1, sm39), none for a sum that fits in the
caches, none on a CPU whose PREFETCHT1 fills the L1 (AMD before Zen 4: hcqrt/cpu/isa.py l2_prefetch_hint); the C and
LLVM renderers emit the L2 hint; the sums stay exact on every target (sm37). The structure tests build for the host's
ISAs with an L2-only hint (`hinting`), whatever CPU runs them."""
import dataclasses, os, re, shutil, subprocess, tempfile
import numpy as np
from compiler.schedule import create_schedule
from compiler.lower import lower
from compiler.render_c import render_c
from compiler.linearize import linearize
from compiler.opt.heuristic import optimize, STREAM_MIN_WORK
from compiler.dtypes import dtypes
from compiler.target import Target
from compiler.lazy import LazyBuffer
from compiler.uop import Ops
from compiler.prefetch import prefetch_bytes, prefetch_level, prefetched, prefetch_into
from compiler.pipeline import compile_kernel
from compiler.opt.matmul import PREFETCH_AHEAD, LINE
from tests.compiler.pack.test_pack_avx2 import _run
from conftest import host_runs
from frontend import Tensor
import pytest

pytestmark = pytest.mark.usefixtures("on_cpu")   # C-path tests: CPU even under MOCKGPU=1 NV=1

N = STREAM_MIN_WORK   # the smallest reduction that prefetches

def small_ints(n: int) -> np.ndarray:
  """Floats 0..6: every partial sum of n <= 2^21 of them is an integer below 2^24, so any summation order is exact."""
  return (np.arange(n) % 7).astype(np.float32)

def sum_kernel(n: int):
  return next(si for si in create_schedule([Tensor(small_ints(n)).sum().lazydata]) if si.kind == "kernel")

def hinting(target: Target) -> Target:
  return target.replace(l2_prefetch=True)

def test_big_sums_prefetch_into_l2_on_both_widths(cpu_target):
  cpu_target = hinting(cpu_target)
  lanes = cpu_target.simd_bytes // 4
  for n, want in ((N, True), (N // 8, False)):
    k = optimize(lower(sum_kernel(n).ast), cpu_target)
    loads = [u for u in k.sink.toposort() if u.op is Ops.LOAD and u.dtype.count == lanes]
    hinted = [u for u in loads if prefetch_bytes(u)]
    # one hint per 64-byte line: every other ymm load, every zmm load
    assert len(hinted) == (len(loads) * lanes * 4 // LINE if want else 0) and all(prefetch_bytes(u) == PREFETCH_AHEAD for u in hinted)
    assert all(prefetch_level(u) == 2 for u in hinted)
    src = render_c(k, 1, linearize(k))
    assert src.count(f") + {PREFETCH_AHEAD}), 0, 2);") == src.count("__builtin_prefetch(") == len(hinted)

def test_llvm_renders_the_l2_hint(cpu_target):
  si = sum_kernel(N)
  ir = compile_kernel(si.ast, hinting(cpu_target).replace(renderer="llvm"), name=si.name, assemble=False).src
  calls = re.findall(r"call void @llvm\.prefetch\.p0\(ptr %\w+, i32 0, i32 (\d), i32 1\)", ir)
  assert calls and set(calls) == {"2"}   # locality 2: PREFETCHT1

@pytest.mark.skipif(shutil.which("llvm-objdump-19") is None, reason="needs llvm-objdump-19 to read the object")
def test_the_object_prefetches_into_l2(cpu_target):
  si = sum_kernel(N)
  ck = compile_kernel(si.ast, hinting(cpu_target), name=si.name)
  with tempfile.NamedTemporaryFile(suffix=".o", delete=False) as f: f.write(ck.binary)
  try: asm = subprocess.run(["llvm-objdump-19", "-d", f.name], capture_output=True, text=True, check=True).stdout
  finally: os.unlink(f.name)
  assert "prefetcht1" in asm and "prefetcht0" not in asm and "prefetchnta" not in asm

def test_no_hint_where_prefetcht1_fills_l1(cpu_target):
  k = optimize(lower(sum_kernel(N).ast), cpu_target.replace(l2_prefetch=False))
  assert not any(prefetch_bytes(u) for u in k.sink.toposort() if u.op is Ops.LOAD)
  assert "__builtin_prefetch(" not in render_c(k, 1, linearize(k))

CPUINFO = "processor\t: 0\nvendor_id\t: {}\ncpu family\t: {}\nmodel\t\t: {}\nmodel name\t: x\n\nprocessor\t: 1\nvendor_id\t: Other\n"

@pytest.mark.parametrize("vendor,family,model,l2", [("AuthenticAMD", 25, 1, False), ("AuthenticAMD", 25, 0x21, False),
  ("AuthenticAMD", 25, 0x11, True), ("AuthenticAMD", 25, 0x61, True), ("AuthenticAMD", 23, 0x31, False),
  ("AuthenticAMD", 26, 0x02, True), ("GenuineIntel", 6, 0x8f, True), ("HygonGenuine", 24, 0, False), ("CentaurHauls", 7, 0x3b, True)])
def test_which_cpus_hint_into_l2(vendor, family, model, l2):
  from hcqrt.cpu.isa import _cpu_ident, cpuinfo_fields, l2_prefetch_hint
  ident = _cpu_ident(cpuinfo_fields(CPUINFO.format(vendor, family, model)))
  assert ident == (vendor, family, model) and l2_prefetch_hint(*ident) is l2

def test_the_host_reports_its_hint():
  from hcqrt.cpu.device import CPUDevice
  from hcqrt.cpu.isa import _cpu_ident, cpuinfo_fields, l2_prefetch_hint
  with open("/proc/cpuinfo") as f: want = l2_prefetch_hint(*_cpu_ident(cpuinfo_fields(f.read())))
  assert CPUDevice().target["l2_prefetch"] is want

def test_prefetch_levels():
  k = optimize(lower(sum_kernel(N // 8).ast), Target("CPU", "c", ncores=2, simd_bytes=32))
  ld = next(u for u in k.sink.toposort() if u.op is Ops.LOAD)
  assert [prefetch_level(x) for x in (ld, prefetched(ld, 64), prefetched(ld, 64, 2))] == [0, 1, 2]
  assert prefetch_into(k.sink, 2) is k.sink   # nothing hinted: nothing changed
  with pytest.raises(AssertionError, match="cache level 3"): prefetched(ld, 64, 3)

@pytest.mark.parametrize("renderer", ["c", "llvm"])
def test_sum_on_each_target_is_exact(cpu_target, renderer):
  if not host_runs(cpu_target): return   # (an AVX-512 target on an AVX2 host: its code can't run here)
  if renderer == "llvm": pytest.importorskip("llvmlite")
  x = LazyBuffer.empty((N,), dtypes.float32, "CPU"); x.buffer = object()
  xn = small_ints(N)
  got = _run(create_schedule([x.r(Ops.ADD, (0,))]), {x: xn}, dataclasses.replace(cpu_target, renderer=renderer))
  assert got.reshape(-1).tolist() == [float(xn.astype(np.int64).sum())]

def test_sum_through_the_frontend_is_exact():
  x = small_ints(N)
  assert Tensor(x).sum().item() == float(x.astype(np.int64).sum())
  assert Tensor(x).reshape(64, -1).sum(axis=1).numpy().tolist() == x.reshape(64, -1).astype(np.int64).sum(axis=1).tolist()
