"""Register pressure: how many vector registers a linearized kernel keeps live at once, and a spill check.

The estimate is a linear scan over the program the renderer will print. A value is live from its definition to
its last use; a value defined outside a loop and used inside it stays live until that loop ends (every
iteration reads it), and an accumulator lives from its DEFINE_ACC to the read after its loops. Only values that
occupy vector registers count: floats (scalar floats live in the low lane of a vector register too) and vectors,
a vector wider than the machine's registers counting as several. Integer indices use the general registers and are
left out (the C compiler rematerializes them cheaply).

Budget (`register_budget`): the architectural vector registers of the target: 32 with AVX-512 (zmm0-31), 16 with
AVX2 (ymm0-15) or SSE. An opt whose kernel needs more than the budget (plus a few temporaries, `SLACK`) is
rejected by opts.check_pressure: past that point the C compiler spills accumulators to the stack inside the
innermost loop, and the kernel gets slower instead of faster. `MAX_LIVE` (64) is the hard cap the issue sets for
any target.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.lower import lower
>>> from compiler.linearize import linearize
>>> from compiler.dtypes import dtypes
>>> from compiler.uop import Ops
>>> x = LazyBuffer.empty((4, 8), dtypes.float32, "CPU"); x.buffer = object()
>>> max_live(linearize(lower(create_schedule([x.r(Ops.ADD, (1,))])[0].ast)), simd_bytes=32)
2
"""
from __future__ import annotations
import pathlib, re, subprocess, tempfile
from collections.abc import Sequence
from compiler.uop import UOp, Ops

MAX_LIVE = 64     # never more live vector values than this, whatever the target
SLACK = 0         # no headroom: a 16x2 AVX-512 matmul tile (36 live) measurably spills (gcc), so the budget is the register file

def register_budget(simd_bytes: int, vector_regs: int = 0) -> int:
  """Vector registers of the target: `vector_regs` when the device reports it (hcqrt/cpu/isa.py), else guessed from
  the widest vector of an x86-64 target: 32 for AVX-512, 16 for AVX2 or SSE."""
  return vector_regs if vector_regs > 0 else 32 if simd_bytes >= 64 else 16

def _regs(u: UOp, simd_bytes: int) -> int:
  dt = u.dtype
  if dt is None or not dt.is_float: return 0
  return max(1, -(-dt.itemsize // max(simd_bytes, dt.scalar.itemsize)))

def live_values(prog: list[UOp], simd_bytes: int) -> list[int]:
  """Live vector registers after each instruction of `prog` (a linearize() result)."""
  pos = {u: i for i, u in enumerate(prog)}
  end = {u: i for i, u in enumerate(prog)}   # last position each value must survive to
  loop_of: list[UOp | None] = []             # innermost open loop at each position
  stack: list[UOp] = []
  close: dict[UOp, int] = {}
  for i, u in enumerate(prog):
    if u.op is Ops.RANGE: stack.append(u)
    loop_of.append(stack[-1] if stack else None)
    if u.op is Ops.ENDRANGE: close[stack.pop()] = i
  opened: dict[UOp, int] = {u: i for i, u in enumerate(prog) if u.op is Ops.RANGE}
  for i, u in enumerate(prog):
    for s in u.src:
      if s not in pos: continue
      e = i
      # used inside loops that opened after s was defined: s must survive until the outermost such loop ends
      for r, o in opened.items():
        if pos[s] < o < i and close.get(r, -1) >= i: e = max(e, close[r])
      end[s] = max(end[s], e)
    if u.op is Ops.ASSIGN:   # the accumulator lives until its final read (the REDUCE after the loops)
      acc = u.src[0]
      end[acc] = max(end[acc], end.get(u, i))
  for u in prog:
    if u.op is Ops.REDUCE and u.src and u.src[0] in pos:
      acc = u.src[0].src[0] if u.src[0].op is Ops.ASSIGN else None
      if acc is not None and acc in pos: end[acc] = max(end[acc], pos[u], end[u])
  # the update `acc op value` is computed into the accumulator's own register; constants are memory operands
  updates = {u.src[1] for u in prog if u.op is Ops.ASSIGN}
  delta = [0] * (len(prog) + 1)
  for u, i in pos.items():
    if u.op in (Ops.ASSIGN, Ops.REDUCE, Ops.CONST, Ops.DEFINE_GLOBAL) or u in updates: continue
    if (w := _regs(u, simd_bytes)):
      delta[i] += w
      delta[end[u] + 1] -= w
  out, cur = [], 0
  for i in range(len(prog)):
    cur += delta[i]
    out.append(cur)
  return out

def max_live(prog: list[UOp], simd_bytes: int) -> int:
  """The most vector registers live at any point of `prog`."""
  return max(live_values(prog, simd_bytes), default=0)

def stack_usage(src: str, name: str, target_flags: Sequence[str] | None = None) -> int:
  """Bytes of stack the C compiler gives function `name` of C source `src` (gcc/clang -fstack-usage) when compiled
  for `target_flags` (the CPU device's cc_flags; default this host): a kernel that spills registers gets a frame; one
  that does not reports only its return address (8 bytes on x86-64).

  >>> stack_usage("void f(float *a, int core) { a[0] = 1.0f; }", "f") <= 16
  True
  """
  from compiler.assemble.c_compiler import c_compiler   # same compiler and flags as the kernels are built with
  cc, flags = c_compiler(target_flags)
  with tempfile.TemporaryDirectory() as d:
    c = pathlib.Path(d) / "k.c"
    c.write_text(src)
    p = subprocess.run([cc, *flags, "-fstack-usage", str(c), "-o", str(pathlib.Path(d) / "k.o")], capture_output=True, text=True, cwd=d)
    if p.returncode != 0: raise RuntimeError(f"stack_usage: {cc} failed on {name}:\n{p.stderr[-2000:]}")
    su = next(pathlib.Path(d).glob("*.su"), None)
    if su is None: raise RuntimeError(f"stack_usage: {cc} wrote no .su file for {name}")
    for line in su.read_text().splitlines():
      m = re.match(r".*:(\w+)\s+(\d+)\s+\w+", line)
      if m and m.group(1) == name: return int(m.group(2))
  raise RuntimeError(f"stack_usage: function {name} not in the compiler's stack-usage report")

# a vector register moved to, from or combined with a stack slot: a spill, a reload, or a reload folded into an
# arithmetic instruction (AT&T syntax, as gcc and clang print it). Frames are addressed from %rsp; from %rbp only in
# a function that makes it the frame pointer (to realign the stack for 64-byte vectors) -- elsewhere %rbp may hold a
# buffer pointer. Our kernels have no stack arrays, so nothing but spills lives in the frame.
_SLOT = r"-?\d*\(%{reg}\)"
_SPILL = {reg: re.compile(rf"^\s*v?[a-z]\w*\s+.*(%[xyz]mm\d+.*{_SLOT.format(reg=reg)}|{_SLOT.format(reg=reg)}.*%[xyz]mm\d+)")
          for reg in ("rsp", "rbp")}
_FRAME_POINTER = re.compile(r"^\s*movq?\s+%rsp,\s*%rbp")

def count_spills(asm: str) -> int:
  """Instructions of assembly text `asm` that move a vector register to or from the stack.

  >>> count_spills("vmovaps %ymm3, 32(%rsp)\\nvaddps 32(%rsp), %ymm1, %ymm2\\nvmovups 64(%rbp), %ymm0\\nvmovups (%rdi), %ymm1")
  2
  """
  n, fp = 0, False
  for line in asm.splitlines():
    if _FRAME_POINTER.match(line): fp = True
    n += bool(_SPILL["rsp"].match(line) or (fp and _SPILL["rbp"].match(line)))
  return n

def vector_spills(src: str, name: str, target_flags: Sequence[str] | None = None) -> int:
  """How many instructions of `name`'s assembly move a vector register to or from the stack (spills, reloads and
  folded reloads): 0 for a kernel whose live values fit the registers. Compiled with the kernels' own compiler and
  flags (-S) for `target_flags` (the CPU device's cc_flags; default this host).

  >>> vector_spills("typedef float f8 __attribute__((vector_size(32))); void f(f8 *a, int core) { a[0] = a[1] + a[2]; }", "f")
  0
  """
  from compiler.assemble.c_compiler import c_compiler
  cc, flags = c_compiler(target_flags)
  with tempfile.TemporaryDirectory() as d:
    c, s = pathlib.Path(d) / "k.c", pathlib.Path(d) / "k.s"
    c.write_text(src)
    p = subprocess.run([cc, *[f for f in flags if f != "-c"], "-S", str(c), "-o", str(s)], capture_output=True, text=True, cwd=d)
    if p.returncode != 0: raise RuntimeError(f"vector_spills: {cc} failed on {name}:\n{p.stderr[-2000:]}")
    return count_spills(s.read_text())
