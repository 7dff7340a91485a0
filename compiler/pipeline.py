"""The one way from a kernel to a binary for a target: `compile_kernel(ast_or_kernel, target, opts=...)`.

Stages, in order: lower (an AST; a LoweredKernel is taken as it is), optimize (the target's default heuristic, an explicit
list of Opts, or a search such as BEAM that picks the Opts), target rewrites (what the renderer can't say, e.g. float64
transcendentals in PTX, and float32 sin/cos/log2 there accurate to ulps rather than .approx's absolute bounds), the
registered rewrite hooks (compiler/kernel_api.py register_rewrite), peel (GPUs: reduction loops cut at their padding
borders), linearize, the launch plan (GPUs: compiler/gpudims.py), render, assemble. The engine, BEAM and export all
call it, so what BEAM times is byte for byte what the engine later runs.

Renderers and assemblers are found in `BACKENDS`, keyed by the target's renderer name: a new code generator (LLVM, AMD)
is one more entry there, not a new branch in the engine, BEAM or the opts.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.dtypes import dtypes
>>> from compiler.target import Target
>>> x = LazyBuffer.empty((4, 64), dtypes.float32, "CPU"); x.buffer = object()
>>> ck = compile_kernel(create_schedule([x.alu(Ops.ADD, x)])[0].ast, Target("CPU", "c", ncores=1, simd_bytes=32), name="add")
>>> ck.binary[:4], ck.applied_opts
(b'\\x7fELF', (('TILE', None, 1, 1, 8, 1),))
"""
from __future__ import annotations
import dataclasses, sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from collections.abc import Callable, Sequence
from compiler.lower import LoweredKernel, lower, identity_element
from compiler.linearize import linearize
from compiler.uop import UOp, Ops, ALU, substitute
from compiler.target import Target
from compiler.gpudims import GpuPlan, plan_launch
from compiler.launch import Launch
from compiler.opt.base import Opt, copy_kernel
from compiler.opt.heuristic import optimize, optimize_portable, apply_opts
from compiler.opt.peel import peel
from compiler.kernel_api import apply_rewrites
from compiler.fp8 import lower_fp8
from compiler import profile, vizdata
from compiler.settings import compile_workers, debug_level, noopt

# ***** the registry: how each renderer builds *****

def _cpu_threads(k: LoweredKernel, t: Target) -> int:
  """The launch's thread count on a CPU: the chunks its threaded loop is cut into (more than the cores: the cores
  claim them in turn), one per core, or 1 when no loop is threaded."""
  return (k.chunks or t.ncores) if k.threaded is not None else 1

def _render_c(k: LoweredKernel, t: Target, prog: list[UOp], plan: GpuPlan | None) -> tuple[str, Launch]:
  from compiler.render_c import render_c
  threads = _cpu_threads(k, t)
  return render_c(k, threads, prog), Launch(threads=threads)

def _render_c99(k: LoweredKernel, t: Target, prog: list[UOp], plan: GpuPlan | None) -> tuple[str, Launch]:
  from compiler.render_c import render_c
  return render_c(k, 1, prog, portable=True), Launch()

def _render_ptx(k: LoweredKernel, t: Target, prog: list[UOp], plan: GpuPlan | None) -> tuple[str, Launch]:
  from compiler.render_ptx import render_ptx
  return render_ptx(k, t.arch, prog, t.buffer_alignment, plan)   # launch: the grid and block of `plan`

def _render_llvm(k: LoweredKernel, t: Target, prog: list[UOp], plan: GpuPlan | None) -> tuple[str, Launch]:
  from compiler.render_llvm import render_llvm, HOST, AMDGPU   # the CPU (outer loop split across cores) or an AMD GPU (the grid)
  return render_llvm(k, AMDGPU if t.gpu else HOST, prog, 1 if t.gpu else _cpu_threads(k, t), plan)

def _assemble_llvm(src: str, name: str, t: Target) -> bytes:
  from compiler.assemble.llvm import compile_llvm
  return compile_llvm(src, name, t.arch or "native")

def _assemble_c(src: str, name: str, t: Target) -> bytes:
  from compiler.assemble.c_compiler import compile_c
  return compile_c(src, name, t.cc_flags or None)

def _assemble_host_llvm(src: str, name: str) -> bytes:
  from compiler.assemble.llvm import compile_llvm
  return compile_llvm(src, name)

def _assemble_host_c(src: str, name: str) -> bytes:
  from compiler.assemble.c_compiler import compile_c
  return compile_c(src, name)

def _assemble_ptx(src: str, name: str, t: Target) -> bytes:
  from compiler.assemble.ptx_assembler import assemble_ptx
  return assemble_ptx(src, t.arch)

def _rewrite_float64(sink: UOp) -> UOp:
  from compiler.transcendental import rewrite_float64   # PTX has no double-precision exp2/log2/sin: spelled out in arithmetic
  return rewrite_float64(sink)

def _rewrite_float32_trig(sink: UOp) -> UOp:
  from compiler.transcendental import rewrite_float32_trig   # sin.approx/lg2.approx are absolute-accurate only: spelled out
  return rewrite_float32_trig(sink)

@dataclass(frozen=True)
class Backend:
  """One registry entry: the default opts, the target rewrites, whether reduction loops are peeled after the opts,
  the renderer (kernel, target, program, launch plan: None on CPUs) -> (source, launch arguments) and the assembler
  (source, name, target) -> binary; assemble_host (source, name) -> an object for this host, where the renderer's language
  also builds host code (the CPU device's native runner, hcqrt/cpu/device.py runner_source(): built by the same compiler
  as the kernels it runs)."""
  optimize: Callable[[LoweredKernel, Target], LoweredKernel]
  render: Callable[[LoweredKernel, Target, list[UOp], GpuPlan | None], tuple[str, Launch]]
  assemble: Callable[[str, str, Target], bytes]
  rewrites: tuple[Callable[[UOp], UOp], ...] = ()
  peel_reductions: bool = False   # GPUs: the output loops are the grid, so only reduction loops are cut
  assemble_host: Callable[[str, str], bytes] | None = None
  # the assembler runs as another process (the C compiler) and may be called from several threads at once, so that
  # compile_kernels overlaps them; llvmlite builds in this process on LLVM's global context, which is not thread-safe
  parallel_assemble: bool = False

BACKENDS: dict[str, Backend] = {
  "c": Backend(optimize, _render_c, _assemble_c, assemble_host=_assemble_host_c, parallel_assemble=True),
  "ptx": Backend(optimize, _render_ptx, _assemble_ptx, rewrites=(_rewrite_float64, _rewrite_float32_trig), peel_reductions=True),
  "llvm": Backend(optimize, _render_llvm, _assemble_llvm, assemble_host=_assemble_host_llvm),   # CPU_LLVM=1 and the AMD targets (compiler/target.py)
  "c99": Backend(lambda k, t: optimize_portable(k), _render_c99, _assemble_c, parallel_assemble=True),   # exported C (frontend/export.py)
}

def native_fp8(target: Target) -> bool:
  """Does `target` convert float32 <-> fp8 in one instruction? PTX from sm_89 on (cvt.rn.satfinite.e4m3x2.f32 and
  cvt.rn.f16x2.e4m3x2, PTX ISA 7.8 "requires sm_89 or higher"); elsewhere compiler/fp8.py spells the conversion out.
  (gfx942 has v_cvt_pk_fp8_f32, but for the FNUZ formats, bias 8/16 with NaN 0x80: not the OCP bytes stored here.)

  >>> native_fp8(Target("NV", "ptx", arch="sm_89", gpu=True)), native_fp8(Target("NV", "ptx", arch="sm_80", gpu=True))
  (True, False)
  """
  if target.renderer != "ptx" or not (target.arch or "").startswith("sm_"): return False
  return int("".join(ch for ch in target.arch[3:] if ch.isdigit())) >= 89

def backend(target: Target) -> Backend:
  """The registry entry for `target` (a clear error naming the device when there is none)."""
  if (be := BACKENDS.get(target.renderer)) is None:
    raise NotImplementedError(f"no renderer {target.renderer!r} for device {target.device} (known: {', '.join(BACKENDS)})")
  return be

# ***** the pipeline *****

@dataclass(frozen=True)
class CompiledKernel:
  """A built kernel: its source, binary and launch arguments, and what the opts did."""
  name: str
  src: str
  binary: bytes
  launch: Launch                  # how every launch runs (threads on the CPU, grid/block dims on GPUs)
  global_size: tuple[int, ...]    # the output loops left to the launch
  ops: int                        # estimated arithmetic operations per launch
  opts: tuple | None              # the explicit Opts it was built with (None: the default heuristic)
  applied_opts: tuple             # what was applied, step by step (kernel.applied_opts)
  buf_dtypes: tuple               # element dtype of each buffer argument, outputs first
  vars: tuple = ()                # the Variables (DEFINE_VAR) passed as int arguments after the buffers, in this order
  @property
  def threads(self) -> int: return self.launch.threads

# a search picks the opts of a lowered kernel for a target (BEAM: compiler/beam.py beam_search with a runner bound);
# None keeps the target's default opts
Search = Callable[[LoweredKernel, Target], Sequence[Opt] | None]
OptsArg = None | Sequence[Opt] | Search

def format_uops(sink: UOp) -> str:
  """The UOp graph under `sink`, one line per node in dependency order (what DEBUG=5/6 print)."""
  topo = sink.toposort()
  num = {u: i for i, u in enumerate(topo)}
  return "\n".join(f"  {num[u]:4d} {u.op.name:14s} {str(u.dtype) if u.dtype is not None else '':12s} "
                   f"{[num[s] for s in u.src]!s:20s} {u.arg!r}"[:200] for u in topo)

def _show_pass(name: str, kname: str, before: UOp, after: UOp) -> None:
  old, new = set(before.toposort()), set(after.toposort())
  print(f"*** {kname}: pass {name}: " + (f"{len(new - old)} UOps new, {len(old - new)} gone" if new != old else "no change"), file=sys.stderr)

def _pass(name: str, kname: str, sink: UOp, rw: Callable[[UOp], UOp], dbg: int) -> UOp:
  out = rw(sink)
  if dbg >= 6: _show_pass(name, kname, sink, out)
  return out

def disassemble(binary: bytes, target: Target) -> str:
  """Machine code of a built kernel (DEBUG=7): objdump for CPU objects, nvdisasm for cubins, llvm-objdump for AMD code
  objects; a one-line note naming the tool where it is not installed."""
  import shutil, subprocess, tempfile
  dev = target.device.split(":")[0]
  # (AMD: LLVM 19's objdump first; older ones, e.g. Debian 12's LLVM 14, don't decode gfx11)
  names = {"NV": ["nvdisasm"], "AMD": ["llvm-objdump-19", "llvm-objdump"]}.get(dev, ["objdump"])
  if (tool := next((n for n in names if shutil.which(n)), None)) is None: return f"(no disassembly: {names[0]} is not installed)"
  cmd = {"NV": [tool, "-c"], "AMD": [tool, "-d", f"--mcpu={target.arch}"]}.get(dev, [tool, "-d", "--no-show-raw-insn"])
  with tempfile.NamedTemporaryFile(suffix=".bin") as f:
    f.write(binary); f.flush()
    r = subprocess.run([*cmd, f.name], capture_output=True, text=True)
  return r.stdout if r.returncode == 0 else f"(no disassembly: {' '.join(cmd)} failed: {r.stderr.strip()[:200]})"

def estimate_ops(prog: list[UOp]) -> int:
  """Arithmetic operations of one launch of the linearized `prog` (vector ops count per lane; integer index math not)."""
  mult, stack, ops = 1, [], 0
  for u in prog:
    if u.op is Ops.RANGE: stack.append(mult); mult *= u.src[0].vmax   # (a symbolic loop: at its Variables' maxima)
    elif u.op is Ops.ENDRANGE: mult = stack.pop()
    elif u.op in ALU and u.dtype is not None and not (u.dtype.is_int and u.dtype.count == 1 and u.op in (Ops.ADD, Ops.MUL)): ops += mult * (u.dtype.count or 1)
  return ops

def optimize_kernel(k: LoweredKernel, target: Target, opts: OptsArg = None) -> tuple[LoweredKernel, tuple | None]:
  """Stage 2 alone: `k` optimized for `target` (a copy), and the explicit opts used (None for the heuristic)."""
  k = copy_kernel(k)
  # the opts split and unroll loops by their sizes: a loop of Variable size is never touched (compiled once for any value)
  if k.symbolic(): return _optimize_symbolic(k, target, opts), None
  if opts is None: return backend(target).optimize(k, target), None
  if callable(opts):
    opts = opts(k, target)
    if opts is None: return backend(target).optimize(k, target), None   # the search kept the default opts
  opts = tuple(opts)
  return apply_opts(k, opts, target), opts

def _bounded_reduce(k: LoweredKernel, r: UOp) -> None:
  """Reduction loop `r` of Variable size as a loop of the Variable's maximum whose extra iterations add the identity:
  every load that moves with it is gated (nothing past the tensor is read) and the reduced value is the identity there.
  The opts then see constant loops only. (In place on `k`.)"""
  n = r.src[0]
  rp = UOp(Ops.RANGE, r.dtype, (UOp.const(r.dtype, n.vmax),), r.arg)
  ok = rp.lt(n)
  memo: dict[UOp, UOp] = {}
  moves: set[UOp] = {rp}
  for u in k.sink.toposort():
    if u is r: memo[u] = rp; continue
    srcs = tuple(memo[s] for s in u.src)
    new = u if srcs == u.src else u.replace(src=srcs)
    if any(s in moves for s in new.src): moves.add(new)
    if new.op is Ops.LOAD and new.src[1] in moves:
      new = new.replace(src=(*new.src[:2], ok if len(new.src) == 2 else new.src[2].logical_and(ok)))
      moves.add(new)
    if new.op is Ops.REDUCE and rp in new.src[1:]:
      val = new.src[0]
      new = new.replace(src=(ok.where(val, UOp.const(val.dtype, identity_element(new.arg, val.dtype.scalar))), *new.src[1:]))
    memo[u] = new
  k.sink = memo[k.sink]

def _optimize_symbolic(k: LoweredKernel, target: Target, opts: OptsArg) -> LoweredKernel:
  """A kernel with loops of Variable size, for the default opts (explicit opts: it runs as lowered):
  - a reduction loop of Variable size runs to the Variable's maximum, its extra iterations gated off (_bounded_reduce);
  - on a CPU, the outermost output loop of Variable size (a symbolic batch) is hidden from the opts as an opaque index
    in [0, max) (a value that doesn't change inside the other loops, which is what it is per iteration) and wraps the
    optimized kernel again afterwards. Other output loops of Variable size (and any on a GPU, whose opts map output
    loops to the grid) leave the kernel unoptimized."""
  if opts is not None or noopt(): return k
  for r in k.reduce_ranges():
    if r.src[0].op is not Ops.CONST: _bounded_reduce(k, r)
  sym = [r for r in k.global_ranges if r.src[0].op is not Ops.CONST]
  if not sym: return backend(target).optimize(k, target)
  if target.gpu or len(sym) != 1 or sym[0] is not k.global_ranges[0]: return k
  r = sym[0]
  idx = UOp(Ops.DEFINE_VAR, r.dtype, (), (f"__loop{r.arg[0]}", 0, r.src[0].vmax - 1))
  k.next_range = 1 + max(u.arg[0] for u in [*k.sink.toposort(), *k.global_ranges] if u.op is Ops.RANGE)   # (no reuse of r's number)
  k.sink, k.global_ranges = substitute(k.sink, {r: idx}), k.global_ranges[1:]
  k = backend(target).optimize(k, target)
  k.sink, k.global_ranges = substitute(k.sink, {idx: r}), [r, *k.global_ranges]
  if k.depths: k.depths = [d + 1 for d in k.depths]   # loop chains hang one output loop deeper
  return k

def compile_kernel(ast_or_kernel: UOp | LoweredKernel, target: Target, opts: OptsArg = None, *, name: str = "kernel",
                   assemble: bool = True) -> CompiledKernel:
  """Build a kernel for `target`. `opts`: None for the target's default opts, a sequence of Opts (compiler/opt/apply.py,
  DEFAULT included), or a search `(kernel, target) -> opts` (BEAM; None keeps the default opts). `name` names a kernel lowered from an AST.
  `assemble=False` stops after rendering (binary b""). Raises OptError for an illegal opt, NotImplementedError for a
  target no registry entry builds, and the assembler's error (CompileError...) for a kernel it rejects."""
  be = backend(target)
  marks = [profile.now_us()] if profile.ENABLED else None   # host spans of the stages (PROFILE)
  k = lower(ast_or_kernel, name) if isinstance(ast_or_kernel, UOp) else ast_or_kernel
  if (sink := lower_fp8(k.sink, native_fp8(target))) is not k.sink: k = copy_kernel(k); k.sink = sink   # (before the opts vectorize)
  dbg = debug_level()
  rec = vizdata.KernelRecord(k.name, target.device) if vizdata.ENABLED else None
  if rec is not None: rec.stage("lowered", k.sink)
  if dbg >= 5: print(f"*** {k.name}: UOps before optimization\n{format_uops(k.sink)}", file=sys.stderr)
  if marks is not None: marks.append(profile.now_us())
  k, used = optimize_kernel(k, target, opts)
  if dbg >= 5: print(f"*** {k.name}: opts applied {list(k.applied_opts)}\n*** {k.name}: UOps after optimization\n{format_uops(k.sink)}", file=sys.stderr)
  if rec is not None: rec.stage(f"optimized: {', '.join(map(str, k.applied_opts)) or 'no opts'}", k.sink)
  for rw in be.rewrites:
    k.sink = _pass(getattr(rw, "__name__", "target rewrite"), k.name, k.sink, rw, dbg)
    if rec is not None: rec.stage(f"target rewrite {getattr(rw, '__name__', '')}", k.sink)
  before = k.sink
  k = apply_rewrites(k, target.renderer)   # the documented pre-render hook (compiler/kernel_api.py register_rewrite)
  if dbg >= 6: _show_pass("registered rewrites", k.name, before, k.sink)
  if rec is not None and k.sink is not before: rec.stage("registered rewrites", k.sink)
  if be.peel_reductions and not noopt() and not k.symbolic():
    before = k.sink
    k = peel(k, output_loops=False)
    if dbg >= 6: _show_pass("peel", k.name, before, k.sink)
    if rec is not None: rec.stage("peel (reduction loops cut at padding borders)", k.sink)
  prog = linearize(k)
  plan = plan_launch(k, target, prog) if target.gpu else None   # GPUs: the output loops are the grid (compiler/gpudims.py)
  if marks is not None: marks.append(profile.now_us())
  src, launch = be.render(k, target, prog, plan)
  if dbg >= 4: print(src, file=sys.stderr)
  if marks is not None: marks.append(profile.now_us())
  binary = be.assemble(src, k.name, target) if assemble else b""
  if dbg >= 7 or rec is not None:
    asm = disassemble(binary, target) if assemble else ""
    if dbg >= 7: print(asm, file=sys.stderr)
    if rec is not None: rec.done(list(k.applied_opts), src, asm)
  if marks is not None:
    marks.append(profile.now_us())
    for stage, a, b in zip(("lower", "optimize+linearize", "render", "assemble"), marks, marks[1:]):
      profile.add(f"{stage} {k.name}", "host", a, b - a, "compile", {"target": target.device}, tid=1)
  return CompiledKernel(k.name, src, binary, launch, tuple(r.src[0].arg if r.src[0].op is Ops.CONST else r.src[0].vmax for r in k.global_ranges),
                        estimate_ops(prog), used, tuple(k.applied_opts), tuple(k.buf_dtypes), tuple(k.vars()))

def compile_kernels(jobs: Sequence[tuple[UOp | LoweredKernel, str]], target: Target, opts: OptsArg = None,
                    workers: int | None = None) -> list[CompiledKernel | Exception]:
  """Several independent kernels (AST or lowered kernel, name) built for `target` as compile_kernel builds each, with
  their assemblers running side by side: the front end (lower .. render) runs here, one kernel after another, so every
  source is what compile_kernel renders; then, where the backend's assembler is another process (the C compiler:
  Backend.parallel_assemble), up to `workers` (default COMPILE_WORKERS: the usable cores) of them run at once on a
  thread pool. Results come back in the order of `jobs`, byte for byte compile_kernel's; a job that fails gives the
  exception it raised in its place (the caller raises it where a one-by-one build would have).

  >>> from compiler.lazy import LazyBuffer
  >>> from compiler.schedule import create_schedule
  >>> from compiler.dtypes import dtypes
  >>> x = LazyBuffer.empty((4, 64), dtypes.float32, "CPU"); x.buffer = object()
  >>> t = Target("CPU", "c", ncores=1, simd_bytes=32)
  >>> asts = [create_schedule([x.alu(op, x)])[0].ast for op in (Ops.ADD, Ops.MUL)]
  >>> built = compile_kernels([(a, f"k{i}") for i, a in enumerate(asts)], t, workers=2)
  >>> [ck.binary == compile_kernel(a, t, name=f"k{i}").binary for i, (a, ck) in enumerate(zip(asts, built))]
  [True, True]
  """
  fronts: list[CompiledKernel | Exception] = []
  for ast, name in jobs:
    try: fronts.append(compile_kernel(ast, target, opts, name=name, assemble=False))
    except Exception as e: fronts.append(e)   # (handed back in its place)
  return assemble_kernels(fronts, target, workers)

def assemble_kernels(fronts: Sequence[CompiledKernel | Exception], target: Target, workers: int | None = None) -> list[CompiledKernel | Exception]:
  """The second half of compile_kernels: kernels rendered by compile_kernel(..., assemble=False) with their binaries,
  the assemblers side by side where the backend allows (an exception in `fronts` stays in its place, as does one an
  assembler raises)."""
  be = backend(target)
  def build(ck: CompiledKernel | Exception) -> CompiledKernel | Exception:
    if isinstance(ck, Exception): return ck
    try: return dataclasses.replace(ck, binary=be.assemble(ck.src, ck.name, target))
    except Exception as e: return e
  n = sum(not isinstance(ck, Exception) for ck in fronts)
  workers = compile_workers() if workers is None else workers
  if not be.parallel_assemble or workers <= 1 or n < 2: return [build(ck) for ck in fronts]
  with ThreadPoolExecutor(min(workers, n), thread_name_prefix="assemble") as pool: return list(pool.map(build, fronts))
