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

MATH_TEMPS = 4    # registers a vector exp2/log2/sin holds beside its input: x, the reduced argument, the polynomial, the exponent
_VMATH = (Ops.EXP2, Ops.LOG2, Ops.SIN)

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
  nopen = [0]   # nopen[j]: loops opened before position j (no loop opened between a definition and a use: no scan)
  for u in prog: nopen.append(nopen[-1] + (u.op is Ops.RANGE))
  for i, u in enumerate(prog):
    for s in u.src:
      if s not in pos: continue
      e = i
      if nopen[i] == nopen[pos[s] + 1]:
        if i > end[s]: end[s] = i
        continue
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
  # the update `acc op value` is computed into the accumulator's own register; constants are memory operands, and so is
  # a scalar load read only by broadcasts (vbroadcastss from memory: the scalar never sits in a register of its own)
  updates = {u.src[1] for u in prog if u.op is Ops.ASSIGN}
  users: dict[UOp, list[UOp]] = {}
  for u in prog:
    for s in u.src: users.setdefault(s, []).append(u)
  # and a product added into an accumulator is one FMA with it (both renderers let the compiler contract a*b + c)
  def folded(u: UOp) -> bool:
    us = users.get(u, [])
    if u.op is Ops.LOAD and u.dtype is not None and u.dtype.count == 1:
      return bool(us) and all(x.op is Ops.VECTORIZE and all(s is u for s in x.src) for x in us)
    return u.op is Ops.MUL and len(us) == 1 and us[0].op is Ops.ADD and us[0] in updates
  delta = [0] * (len(prog) + 1)
  counted: list[tuple[UOp, int]] = []
  for u, i in pos.items():
    if u.op in (Ops.ASSIGN, Ops.REDUCE, Ops.CONST, Ops.DEFINE_GLOBAL) or u in updates or folded(u): continue
    if (w := _regs(u, simd_bytes)):
      delta[i] += w
      delta[end[u] + 1] -= w
      counted.append((u, w))
  # a value live across an innermost loop that never reads it (a conv's bias, broadcast before the output loops and
  # added after the reduction) is parked on the stack around that loop by the compiler: one reload per outer iteration
  for r, o in opened.items():
    c = close.get(r, len(prog) - 1)
    if any(prog[j].op is Ops.RANGE for j in range(o + 1, c)): continue   # not an innermost loop
    idle = sum(w for u, w in counted if pos[u] < o and end[u] > c and not any(o < pos.get(x, -1) < c for x in users.get(u, [])))
    delta[o] -= idle
    delta[c + 1] += idle
  # a vector exp2/log2/sin expands to a polynomial whose temporaries occupy registers too, and the C compiler interleaves
  # the independent expansions of one loop body: an innermost loop holds MATH_TEMPS registers per expansion throughout
  # (what makes 4 accumulators of exp(x - max) spill on 16 registers and fit on 32). Their constants are not counted:
  # hoisted or not, they are read as memory operands.
  for r, o in opened.items():
    c = close.get(r, len(prog) - 1)
    if any(prog[j].op is Ops.RANGE for j in range(o + 1, c)): continue   # not an innermost loop
    extra = sum(MATH_TEMPS * _regs(u, simd_bytes) for u in prog[o + 1:c] if u.op in _VMATH and u.dtype is not None and u.dtype.count > 1)
    delta[o] += extra
    delta[c + 1] -= extra
  out, cur = [], 0
  for i in range(len(prog)):
    cur += delta[i]
    out.append(cur)
  return out

def max_live(prog: list[UOp], simd_bytes: int) -> int:
  """The most vector registers live at any point of an innermost loop of `prog` (anywhere when it has no loops): a
  spill there costs every iteration, while one in the code after a reduction loop (an epilogue building a vector
  from scalars) costs once per tile."""
  live, hot, stack = live_values(prog, simd_bytes), [], []
  for i, u in enumerate(prog):
    # (a loop opens inside the open ones; one of a single iteration, a 2x1 conv's column taps, is no loop: the one
    # around it stays innermost, as the C compiler sees it)
    if u.op is Ops.RANGE:
      one = u.src[0].op is Ops.CONST and u.src[0].arg == 1
      stack = (stack if one else [(o, False) for o, _ in stack]) + [(i, not one)]
    elif u.op is Ops.ENDRANGE and stack:
      o, innermost = stack.pop()
      if innermost: hot += live[o:i + 1]
  return max(hot or live, default=0)

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

# Spills in AT&T assembly (as gcc and clang print it): a vector register stored to a stack slot, and every instruction
# reading a vector from that slot (a reload, or one folded into arithmetic). Frames are addressed from %rsp; from %rbp
# only in a function that makes it the frame pointer (to realign the stack) -- elsewhere %rbp may hold a buffer pointer.
# What costs time is a value stored and reloaded inside an innermost loop (accumulators and temporaries that did not fit:
# a store-load round trip on every iteration). Slots written only outside the innermost loops hold loop invariants (the
# constants of exp2's polynomial, a row's broadcast maximum) that the compiler hoisted and parked on the stack: the loop
# reads them as memory operands, just as it would read the constant pool or the row from its buffer. Those are not
# counted, nor (in loop-free code) slots that only ever receive constants.
_VREG = re.compile(r"%[xyz]mm\d+")
_INSN = re.compile(r"^\s*([a-z]\w*)\s+(.*?)\s*(#.*)?$")
_LABEL = re.compile(r"^([.\w]+):")
_FRAME_POINTER = re.compile(r"^\s*movq?\s+%rsp,\s*%rbp")
_ZERO = ("xorps", "pxor", "vxorps", "vxorpd", "vpxor", "vpxord", "vpxorq", "xorl", "xorq")

def _key(operand: str) -> str:   # xmm3/ymm3/zmm3 are one register
  return re.sub(r"^%[xyz]mm", "%vmm", operand)

def count_spills(asm: str) -> int:
  """Instructions of assembly text `asm` that store a vector to the stack or read one back, for the slots that matter
  (see above).

  >>> count_spills("vmovaps %ymm3, 32(%rsp)\\nvaddps 32(%rsp), %ymm1, %ymm2\\nvmovups 64(%rbp), %ymm0\\nvmovups (%rdi), %ymm1")
  2
  >>> count_spills("vbroadcastss .LC0(%rip), %ymm4\\nvmovups %ymm4, -32(%rsp)\\n.L2:\\nvmulps -32(%rsp), %ymm0, %ymm0\\njne .L2")
  0
  """
  insns, labels, fp = [], {}, False
  for line in asm.splitlines():
    if _FRAME_POINTER.match(line): fp = True
    if (m := _LABEL.match(line)): labels[m.group(1)] = len(insns)
    elif (m := _INSN.match(line)): insns.append((m.group(1), [o.strip() for o in re.split(r",\s*(?![^()]*\))", m.group(2))]))
  loops = [(labels[ops[0]], i) for i, (op, ops) in enumerate(insns) if op.startswith("j") and labels.get(ops[0], i) < i]
  inner = [(a, b) for a, b in loops if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in loops)]
  slot_re = re.compile(r"-?\d*\(%(rsp|rbp)\)" if fp else r"-?\d*\(%rsp\)")
  const: dict[str, bool] = {}                                   # register -> holds a constant
  hot: set[str] = set()                                         # slots that matter
  uses: list[str] = []
  for i, (op, ops) in enumerate(insns):
    slot = next((o for o in ops if slot_re.fullmatch(o)), None)
    if slot is not None and any(_VREG.fullmatch(o) for o in ops):
      uses.append(slot)
      if op.startswith(("vmov", "mov")) and _VREG.fullmatch(ops[0]) and ops[-1] == slot:   # a store
        if any(a <= i <= b for a, b in inner) or (not loops and not const.get(_key(ops[0]), False)): hot.add(slot)
        continue
    if len(ops) >= 2 and re.fullmatch(r"%\w+", ops[-1]):      # AT&T: the destination is the last operand
      srcs = ops[:-1] + ([ops[-1]] if op.startswith(("vfm", "vfnm")) else [])   # (FMA also reads its destination)
      zeroed = op in _ZERO and len({_key(o) for o in ops}) == 1   # x ^ x
      const[_key(ops[-1])] = zeroed or all(o.startswith("$") or o.endswith("(%rip)") or const.get(_key(o), False) for o in srcs)
  return sum(1 for slot in uses if slot in hot)

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
