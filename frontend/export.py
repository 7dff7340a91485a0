"""Standalone C export: a model or function becomes plain C99 (`<name>.c`, `<name>.h`, `<name>.bin`) needing only libm.

`export_c(fn, *example_inputs)` runs `fn` once on the CPU device while recording the kernels it launches (the
model's weights are copied to the CPU for that run when they live elsewhere, and put back after), re-renders each
kernel as portable C99 (scalar loops, reductions with a few accumulators: see compiler/opt/heuristic.py optimize_portable), and
writes one C file whose entry point `void <name>(const float *in0, ..., float *out0, ...)` calls them in order.
Buffers are static: the weights, and one scratch arena per element type in which intermediate results share
memory when their lifetimes do not overlap (so the arena is about the peak live set, not the sum). The weights go
to `<name>.bin` (little-endian, 32-byte header with a layout hash and a CRC-32 that `<name>_init` checks), or into
the .c itself with `embed_weights=True`. The generated code keeps state in static buffers: one call at a time.

>>> import numpy as np
>>> from frontend import Tensor
>>> w = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
>>> ex = export_c(lambda x: (x @ w.T).relu(), Tensor.ones(1, 3), name="tiny")
>>> sorted(ex.files)
['tiny.bin', 'tiny.c', 'tiny.h']
>>> [l for l in ex.files["tiny.h"].decode().splitlines() if l.startswith(("int ", "void "))]
['int tiny_init(const void *weights, size_t size);', 'void tiny(const float *in0, float *out0);']

Command line (`module` may also be a path to a .py file; the callable is either the function/model, given its
input shapes with --input, or a zero-argument factory returning `(fn, example_input, ...)`):

  python -m frontend.export examples/export_digits.py:make_export --out build/
  python -m frontend.export mymodels:mlp --input 1,100 --out build/ --embed-weights
"""
from __future__ import annotations
import argparse, functools, importlib, importlib.util, pathlib, re, struct, sys, types, zlib
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable
import numpy as np
from compiler.dtypes import DType, dtypes, to_np
from compiler.pipeline import CompiledKernel, compile_kernel
from compiler.render_c import ctype, MATH_PRELUDE, _FAST, portable_c
from compiler.target import PORTABLE_C
from compiler.uop import UOp
from hcqrt.device import Device
from frontend import engine
from frontend.tensor import Tensor
from frontend.buffer import Buffer
from frontend.capture import capture, capturing
from frontend.jit import TinyJit

MAGIC, VERSION, HEADER_BYTES = b"HCQW", 1, 32
# init's return codes (the .h defines them as <NAME>_OK, <NAME>_ERR_...)
ERRORS = {"OK": 0, "ERR_SIZE": 1, "ERR_MAGIC": 2, "ERR_VERSION": 3, "ERR_LAYOUT": 4, "ERR_CHECKSUM": 5}

class ExportError(RuntimeError):
  """The function can't be exported as it is; the message says why."""

@dataclass
class Export:
  """What `export_c` made: `files` (file name -> bytes) plus a description of the program."""
  name: str
  files: dict[str, bytes]
  inputs: list[tuple[tuple[int, ...], DType]]
  outputs: list[tuple[tuple[int, ...], DType]]
  weights: list[tuple[str, tuple[int, ...], DType]]    # (where it came from, shape, dtype), in .bin order
  memory: dict[str, int] = field(default_factory=dict)  # weight_bytes, scratch_bytes, peak_live_bytes, unshared_bytes
  kernels: int = 0                                       # kernel launches per call
  def write(self, directory: str | pathlib.Path) -> list[pathlib.Path]:
    """Write the files into `directory` (created if needed); returns their paths."""
    d = pathlib.Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    for fname, data in self.files.items(): (d / fname).write_bytes(data)
    return [d / f for f in self.files]

# ***** finding the tensors a function uses (to run it on the CPU) *****

def _code_names(code: types.CodeType) -> set[str]:
  names = set(code.co_names)
  for c in code.co_consts:
    if isinstance(c, types.CodeType): names |= _code_names(c)
  return names

def find_tensors(obj: Any, path: str = "") -> list[tuple[str, Tensor]]:
  """Tensors reachable from a model or function: attributes, containers, closure cells and the globals its code
  names. Each comes with a readable path such as `fc.weight`."""
  out: list[tuple[str, Tensor]] = []
  seen: set[int] = set()
  def walk(x: Any, p: str, depth: int):
    if isinstance(x, Tensor):
      if id(x) not in seen: seen.add(id(x)); out.append((p, x))
      return
    if depth > 8 or id(x) in seen or x is None or isinstance(x, (type, types.ModuleType, str, bytes, int, float, complex, np.ndarray)): return
    seen.add(id(x))
    dot = p + "." if p else ""
    if isinstance(x, (list, tuple)):
      for i, v in enumerate(x): walk(v, f"{p}[{i}]", depth + 1)
    elif isinstance(x, dict):
      for k, v in x.items(): walk(v, f"{p}[{k!r}]", depth + 1)
    elif isinstance(x, functools.partial):
      walk(x.func, p, depth + 1); walk(x.args, p, depth + 1); walk(x.keywords, p, depth + 1)
    elif isinstance(x, types.MethodType): walk(x.__self__, p, depth + 1)
    elif isinstance(x, types.FunctionType):
      for n, cell in zip(x.__code__.co_freevars, x.__closure__ or ()):
        try: walk(cell.cell_contents, dot + n, depth + 1)
        except ValueError: pass   # a cell not filled yet
      for n in sorted(_code_names(x.__code__)):
        if n in x.__globals__: walk(x.__globals__[n], dot + n, depth + 1)
    elif isinstance(x, TinyJit): walk(x.fn, p, depth + 1)
    elif hasattr(x, "__dict__") and not callable(getattr(x, "__get__", None)):
      for k, v in vars(x).items(): walk(v, dot + k, depth + 1)
  walk(obj, path, 0)
  return out

def _unwrap_jit(fn: Callable) -> Callable:
  """The plain function behind a TinyJit (a replay launches its recording, which records nothing new)."""
  if isinstance(fn, TinyJit): return fn.fn
  if isinstance(fn, functools.partial) and isinstance(getattr(fn.func, "__self__", None), TinyJit):   # a jitted method
    return functools.partial(fn.func.__self__.fn, *fn.args, **fn.keywords)
  call = type(fn).__dict__.get("__call__") if not isinstance(fn, types.FunctionType) else None
  if isinstance(call, TinyJit): return functools.partial(call.fn, fn)   # a model whose __call__ is jitted
  return fn

def _flat_outputs(ret, where: str = "the return value") -> list[Tensor]:
  """The tensors of a return value (a tensor, or lists/tuples/dicts of them) in order. Anything else is refused: the
  C function has only tensor outputs, and dropping a value silently would export a different function."""
  if isinstance(ret, Tensor): return [ret]
  if isinstance(ret, (list, tuple)): return [t for i, x in enumerate(ret) for t in _flat_outputs(x, f"{where}[{i}]")]
  if isinstance(ret, dict): return [t for k, x in ret.items() for t in _flat_outputs(x, f"{where}[{k!r}]")]
  raise ExportError(f"export_c: {where} is not a Tensor but the {type(ret).__name__} {ret!r:.60}; an exported function returns "
                    "only tensors (a constant can be returned as Tensor(value))")

def _capture(fn: Callable, arrays: list[np.ndarray]) -> tuple[list[engine.ExecItem], list[Tensor], list[Tensor], dict[int, str]]:
  """Run fn on CPU copies of everything, recording each launch. Returns (launches, inputs, outputs, weight names)."""
  if capturing() is not None: raise ExportError("export_c can't run inside a TinyJit capture")
  found = find_tensors(fn)
  pending = [t for _, t in found if not t.lazydata.realized]
  if pending: pending[0].realize(*pending[1:])   # pending updates (an optimizer step) are the user's, not the model's
  swapped = [(t, t.lazydata) for _, t in found if t.device != "CPU"]
  prev_default, prev_train, prev_nograd = Device.DEFAULT, Tensor.training, Tensor.no_grad
  try:
    for t, lb in swapped: t.lazydata = Tensor(lb, requires_grad=False).to("CPU").realize().lazydata
    names = {id(t.lazydata.base.buffer): p for p, t in found if t.lazydata.realized}
    Device.DEFAULT, Tensor.training, Tensor.no_grad = "CPU", False, True
    inputs = [Tensor(a, device="CPU").realize() for a in arrays]
    before = [(p, t, t.lazydata) for p, t in found]
    def impure(kernel: str | None = None):
      # an update of the model's state (BatchNorm's running statistics in training mode, any assign): refused before
      # it runs, and dropped where it is still pending, so the live model is untouched
      changed = [p or "a tensor" for p, t, lb in before if t.lazydata is not lb]
      for _, t, lb in before: t.lazydata = lb
      what = ", ".join(([f"kernel {kernel} writes into an existing tensor"] if kernel else []) + changed)
      raise ExportError(f"export_c: the function updates state ({what}), e.g. BatchNorm in training mode (Tensor.train() "
                        "inside it) or an assign; an exported function must be pure. The model was left unchanged")
    with capture("export_c") as captured:
      captured.refuse_write = impure
      ret = fn(*inputs)
      # (an update that the outputs don't read is still pending: it would run later, on the live model)
      if any(t.lazydata is not lb for _, t, lb in before): impure()
      outs = _flat_outputs(ret)
      if not outs: raise ExportError(f"{getattr(fn, '__name__', 'fn')} returned no tensors (got {type(ret).__name__})")
      outs = [o.contiguous() for o in outs]
      outs[0].realize(*outs[1:])
  except RuntimeError as e:
    if "different devices" not in str(e): raise
    raise ExportError(f"export_c: {e}; a tensor the function uses was not found among its attributes, closure and globals "
                      "(found: " + (", ".join(p for p, _ in found) or "none") + "); keep the model in an attribute, closure or global") from e
  finally:
    for t, lb in swapped: t.lazydata = lb
    Device.DEFAULT, Tensor.training, Tensor.no_grad = prev_default, prev_train, prev_nograd
  return captured, inputs, outs, names

# ***** the program: steps over slots *****

@dataclass(eq=False)   # compared by identity: two scratch buffers may look alike
class _Buf:
  kind: str          # in | out | w | s (scratch)
  index: int
  nbytes: int
  dtype: DType
  def size(self) -> int: return self.nbytes // self.dtype.itemsize

@dataclass
class _Step:
  fn: str | None     # kernel function name; None: a copy of args[1] into args[0]
  args: list[_Buf]   # outputs first

def plan_arena(lifetimes: list[tuple[int, int, int]]) -> tuple[list[int], int, int]:
  """Offsets for buffers with (first step, last step, size): buffers alive at the same step never overlap.
  Returns (offsets, arena size, peak live size). First fit in order of birth, largest first among equals.

  >>> plan_arena([(0, 1, 10), (1, 2, 5), (2, 3, 10)])
  ([0, 10, 0], 15, 15)
  """
  order = sorted(range(len(lifetimes)), key=lambda i: (lifetimes[i][0], -lifetimes[i][2]))
  offsets, live = [0] * len(lifetimes), []   # live: (offset, size, last step)
  arena = 0
  for i in order:
    start, end, size = lifetimes[i]
    live = sorted((o, s, e) for o, s, e in live if e >= start)
    off = 0
    for o, s, _ in live:
      if off + size <= o: break
      off = max(off, o + s)
    offsets[i] = off
    live.append((off, size, end))
    arena = max(arena, off + size)
  steps = {t for s, e, _ in lifetimes for t in (s, e)}
  peak = max((sum(sz for s, e, sz in lifetimes if s <= t <= e) for t in steps), default=0)
  return offsets, arena, peak

def export_c(fn: Callable, *example_inputs, name: str = "net", embed_weights: bool = False) -> Export:
  """Export `fn` (a function or model called on tensors, returning a tensor or a tuple/list of them) as C99.

  `example_inputs` (Tensors or numpy arrays, on any device) fix the input shapes and dtypes. Works before or
  after training, with or without TinyJit; the model may live on any device. Returns an `Export`.
  """
  if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name): raise ValueError(f"export_c: name {name!r} is not a C identifier")
  arrays = [x.numpy() if isinstance(x, Tensor) else np.asarray(x) for x in example_inputs]
  captured, inputs, outs, wnames = _capture(_unwrap_jit(fn), arrays)
  bufs: dict[int, _Buf] = {}
  for i, t in enumerate(inputs): bufs[id(t.lazydata.buffer)] = _Buf("in", i, t.nbytes(), t.dtype)
  input_dependent = set(bufs)
  kernels: dict[UOp, tuple[str, CompiledKernel]] = {}
  steps, weights, hoisted = [], [], []   # weights: (buffer, _Buf); hoisted: launches that don't depend on the inputs
  def weight(b: Buffer, dt: DType) -> _Buf:
    if id(b) not in bufs:
      bufs[id(b)] = wb = _Buf("w", len(weights), b.nbytes, dt)
      weights.append((b, wb))
    return bufs[id(b)]
  nscratch = 0
  for ei in captured:
    if ei.kind == "kernel":
      if not ei.fresh_out: raise ExportError(f"kernel {ei.kernel.name} writes into an existing tensor (an assign, e.g. BatchNorm running "
                                             "statistics in training mode); an exported function must not update state")
      if ei.kernel.compiled.vars: raise ExportError(f"kernel {ei.kernel.name} has symbolic sizes (Variables {', '.join(v.arg[0] for v in ei.kernel.compiled.vars)}); "
                                          "export needs concrete shapes")
      ast = ei.kernel.ast
      if ast not in kernels:   # portable C99 (compiler/opt/heuristic.py optimize_portable), rendered, not compiled here
        ck = compile_kernel(ast, PORTABLE_C, name=f"{name}_k{len(kernels)}_{ei.kernel.name}", assemble=False)
        kernels[ast] = (ck.name, ck)
      kname, ck = kernels[ast]
      dts = list(ck.buf_dtypes)
    else: kname, dts = None, [None, None]
    if not any(id(b) in input_dependent for b in ei.bufs[1:]):   # computed from weights alone: precompute it
      hoisted.append(ei)
      continue
    input_dependent.add(id(ei.bufs[0]))
    src = [bufs.get(id(b)) or weight(b, dt or dtypes.uint8) for b, dt in zip(ei.bufs[1:], dts[1:])]
    out = bufs[id(ei.bufs[0])] = _Buf("s", nscratch, ei.bufs[0].nbytes, dts[0] or src[0].dtype)
    nscratch += 1
    steps.append(_Step(kname, [out] + src))
  # outputs: the step that made one writes it straight into the caller's array; anything else is copied there
  out_bufs = []
  for j, t in enumerate(outs):
    b = t.lazydata.buffer
    ob = _Buf("out", j, t.nbytes(), t.dtype)
    src = bufs.get(id(b))
    if src is not None and src.kind == "s" and src.nbytes == ob.nbytes:   # (a packed product writes padding past the end)
      src.kind, src.index = "out", j
    else: steps.append(_Step(None, [ob, src or weight(b, t.dtype)]))
    out_bufs.append(ob)
  if not steps: raise ExportError("export_c: the function launched nothing and returned nothing to copy")
  # scratch arenas, one per element type (so no object is accessed through a pointer of another type)
  arenas: dict[DType, int] = {}
  memory = {"weight_bytes": sum(wb.nbytes for _, wb in weights), "scratch_bytes": 0, "peak_live_bytes": 0, "unshared_bytes": 0}
  scratch = [b for b in {id(b): b for st in steps for b in st.args}.values() if b.kind == "s"]
  for dt in {b.dtype for b in scratch}:
    these = [b for b in scratch if b.dtype == dt]
    life = [(min(i for i, st in enumerate(steps) if b in st.args), max(i for i, st in enumerate(steps) if b in st.args), b.size()) for b in these]
    offs, arena, peak = plan_arena(life)
    for b, o in zip(these, offs): b.index = o   # a scratch buffer's index is its offset in its arena
    arenas[dt] = arena
    memory["scratch_bytes"] += arena * dt.itemsize
    memory["peak_live_bytes"] += peak * dt.itemsize
    memory["unshared_bytes"] += sum(b.nbytes for b in these)
  # hoisted launches are recorded with their results: those become weights too
  wdata = []
  for b, wb in weights:
    arr = np.empty(b.nbytes, np.uint8)
    if b.nbytes: Device[b.device].allocator.copyout(memoryview(arr), b.raw)
    wdata.append(arr.view(to_np(wb.dtype)))
  winfo = [(wnames.get(id(b), "computed from weights"), (wb.size(),), wb.dtype) for b, wb in weights]
  prog = _Program(name, [(t.shape, t.dtype) for t in inputs], [(t.shape, t.dtype) for t in outs], steps, kernels, wdata, winfo, arenas)
  files = {f"{name}.h": prog.header().encode(), f"{name}.c": prog.source(embed_weights).encode()}
  if not embed_weights: files[f"{name}.bin"] = prog.weights_bin()
  return Export(name, files, prog.inputs, prog.outputs, [(n, tuple(a.shape), wb.dtype) for (n, _, _), a, (_, wb) in zip(winfo, wdata, weights)],
                memory, sum(1 for s in steps if s.fn is not None))

# ***** rendering *****

def _le(a: np.ndarray) -> bytes: return a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()

def _literal(v, dt: DType) -> str:
  if dt.is_float:
    v = float(v)
    if v != v: return "NAN"
    if v in (float("inf"), float("-inf")): return "INFINITY" if v > 0 else "-INFINITY"
    return float.hex(v) + ("f" if dt is not dtypes.float64 else "")
  if dt.is_bool: return "1" if v else "0"
  iv, suffix = int(v), ("u" if dt.is_unsigned else "") + ("ll" if dt.itemsize == 8 else "")
  return f"({iv + 1}{suffix}-1)" if not dt.is_unsigned and iv == dtypes.min(dt) else f"{iv}{suffix}"   # -2^31 is not a literal

class _Program:
  def __init__(self, name, inputs, outputs, steps, kernels, wdata, winfo, arenas):
    self.name, self.inputs, self.outputs, self.steps, self.wdata, self.winfo, self.arenas = name, inputs, outputs, steps, wdata, winfo, arenas
    self.kernels = {kname: k for kname, k in kernels.values() if any(s.fn == kname for s in steps)}
    self.up = name.upper()
  def payload(self) -> bytes: return b"".join(_le(a) for a in self.wdata)
  def layout_hash(self) -> int: return zlib.crc32(";".join(f"{dt.name}:{a.size}" for a, (_, _, dt) in zip(self.wdata, self.winfo)).encode())
  def weights_bin(self) -> bytes:
    p = self.payload()
    return struct.pack("<4sIIIQII", MAGIC, VERSION, len(self.wdata), self.layout_hash(), len(p), zlib.crc32(p), 0) + p

  def signature(self) -> str:
    params = [f"const {ctype(dt)} *in{i}" for i, (_, dt) in enumerate(self.inputs)] + [f"{ctype(dt)} *out{j}" for j, (_, dt) in enumerate(self.outputs)]
    return f"void {self.name}({', '.join(params)})"
  def header(self) -> str:
    n, up = self.name, self.up
    dims = lambda s: "".join(f"[{d}]" for d in s) or "[1]"
    lines = [f"/* {n}.h: generated by hcqrt (python -m frontend.export). Plain C99; link with -lm. */", f"#ifndef {up}_H", f"#define {up}_H",
             "#include <stddef.h>", "#ifdef __cplusplus", 'extern "C" {', "#endif", ""]
    for i, (s, dt) in enumerate(self.inputs): lines.append(f"#define {up}_IN{i}_SIZE {int(np.prod(s))}   /* in{i}: {ctype(dt)}{dims(s)} */")
    for j, (s, dt) in enumerate(self.outputs): lines.append(f"#define {up}_OUT{j}_SIZE {int(np.prod(s))}   /* out{j}: {ctype(dt)}{dims(s)} */")
    lines += [f"#define {up}_{k} {v}" for k, v in ERRORS.items()]
    lines += ["", f"/* Load the weights (the contents of {n}.bin; they are copied, so the memory may be freed after). Returns {up}_OK,",
              "   or an error code when the size, magic, version, layout or CRC-32 is wrong (the weights are then left unchanged).",
              f"   With embedded weights it ignores its arguments and returns {up}_OK. */",
              f"int {n}_init(const void *weights, size_t size);",
              "/* Run the model: inputs and outputs are dense row-major arrays that must not overlap. Uses static buffers,",
              "   so one call at a time. */", self.signature() + ";", "", "#ifdef __cplusplus", "}", "#endif", f"#endif /* {up}_H */", ""]
    return "\n".join(lines)

  def _arg(self, b: _Buf) -> str:
    if b.kind == "in": return f"in{b.index}"
    if b.kind == "out": return f"out{b.index}"
    if b.kind == "w": return f"{self.name}_w{b.index}"
    return f"{self.name}_scratch_{b.dtype.name} + {b.index}"
  def source(self, embed: bool) -> str:
    n = self.name
    out = [f"/* {n}.c: generated by hcqrt (python -m frontend.export) from a traced function. Plain C99, needs only libm.",
           f"   {len(self.steps)} steps, {sum(a.nbytes for a in self.wdata)} bytes of weights, "
           f"{sum(sz * dt.itemsize for dt, sz in self.arenas.items())} bytes of scratch. */",
           "#include <math.h>", "#include <stdint.h>", "#include <string.h>", f'#include "{n}.h"', ""]
    # weights and scratch: static, sized at compile time
    for i, (a, (where, _, dt)) in enumerate(zip(self.wdata, self.winfo)):
      decl = f"{ctype(dt)} {n}_w{i}[{max(1, a.size)}]"
      if embed:
        vals = ", ".join(_literal(v, dt) for v in a.tolist()) or "0"
        out.append(f"static const {decl} = {{ /* {where} */\n  {vals}\n}};")
      else: out.append(f"static {decl};   /* {where} */")
    for dt, size in self.arenas.items(): out.append(f"static {ctype(dt)} {n}_scratch_{dt.name}[{max(1, size)}];   /* shared by intermediate results */")
    out.append("")
    # kernels
    srcs = {kname: ck.src for kname, ck in self.kernels.items()}
    for op, fname in _FAST.items():
      if any(fname + "(" in s for s in srcs.values()): out.append(portable_c(MATH_PRELUDE[op]))
    out += list(srcs.values())
    out += self._init(embed)
    out.append(self.signature() + " {")
    for st in self.steps:
      if st.fn is None: out.append(f"  memcpy({self._arg(st.args[0])}, {self._arg(st.args[1])}, {st.args[0].nbytes});")
      else: out.append(f"  {st.fn}({', '.join(self._arg(b) for b in st.args)});")
    out.append("}")
    return "\n".join(out) + "\n"

  def _init(self, embed: bool) -> list[str]:
    n, up = self.name, self.up
    if embed: return [f"int {n}_init(const void *weights, size_t size) {{", "  (void)weights; (void)size;", f"  return {up}_OK;", "}", ""]
    sizes = sorted({dt.itemsize for _, _, dt in self.winfo})
    lines = [f"static uint32_t {n}_u32(const unsigned char *p) {{",
             "  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);", "}",
             f"static uint32_t {n}_crc32(const unsigned char *p, size_t len) {{",
             "  uint32_t c = 0xFFFFFFFFu;", "  size_t i;", "  int b;",
             "  for (i = 0; i < len; i++) {", "    c ^= p[i];",
             "    for (b = 0; b < 8; b++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));", "  }", "  return c ^ 0xFFFFFFFFu;", "}"]
    # little-endian bytes -> native elements, whatever the host's byte order
    for sz in sizes:
      if sz == 1: continue
      ut = f"uint{8 * sz}_t"
      lines += [f"static void {n}_load{sz}(void *dst, const unsigned char *p, size_t count) {{", "  size_t i;", "  int b;",
                "  for (i = 0; i < count; i++) {", f"    {ut} u = 0;", f"    for (b = {sz - 1}; b >= 0; b--) u = ({ut})((u << 8) | p[{sz} * i + (size_t)b]);",
                f"    memcpy((unsigned char *)dst + {sz} * i, &u, {sz});", "  }", "}"]
    payload = sum(a.nbytes for a in self.wdata)
    lines += [f"int {n}_init(const void *weights, size_t size) {{", "  const unsigned char *p = (const unsigned char *)weights;",
              f"  if (p == NULL || size < {HEADER_BYTES}) return {up}_ERR_SIZE;",
              f'  if (memcmp(p, "{MAGIC.decode()}", 4) != 0) return {up}_ERR_MAGIC;',
              f"  if ({n}_u32(p + 4) != {VERSION}u) return {up}_ERR_VERSION;",
              f"  if ({n}_u32(p + 8) != {len(self.wdata)}u || {n}_u32(p + 12) != {self.layout_hash()}u) return {up}_ERR_LAYOUT;",
              f"  if ({n}_u32(p + 16) != {payload & 0xFFFFFFFF}u || {n}_u32(p + 20) != {payload >> 32}u || size != {HEADER_BYTES + payload}u) return {up}_ERR_SIZE;",
              f"  if ({n}_crc32(p + {HEADER_BYTES}, {payload}u) != {n}_u32(p + 24)) return {up}_ERR_CHECKSUM;",
              f"  p += {HEADER_BYTES};"]
    for i, (a, (_, _, dt)) in enumerate(zip(self.wdata, self.winfo)):
      if not a.size: continue
      lines.append(f"  memcpy({n}_w{i}, p, {a.nbytes}u);" if dt.itemsize == 1 else f"  {n}_load{dt.itemsize}({n}_w{i}, p, {a.size}u);")
      lines.append(f"  p += {a.nbytes}u;")
    lines += [f"  return {up}_OK;", "}", ""]
    return lines

# ***** command line *****

def _load_object(spec: str) -> Any:
  if ":" not in spec: raise SystemExit(f"expected module:callable (or path/to/file.py:callable), got {spec!r}")
  mod_name, _, attr = spec.rpartition(":")
  if mod_name.endswith(".py"):
    path = pathlib.Path(mod_name).resolve()
    s = importlib.util.spec_from_file_location(path.stem, path)
    if s is None: raise SystemExit(f"can't load {path}")
    mod = importlib.util.module_from_spec(s)
    sys.modules[path.stem] = mod
    s.loader.exec_module(mod)
  else: mod = importlib.import_module(mod_name)
  obj = mod
  for a in attr.split("."): obj = getattr(obj, a)
  return obj

def main(argv: list[str] | None = None) -> Export:
  ap = argparse.ArgumentParser(prog="python -m frontend.export", description="Export a model or function as standalone C99.")
  ap.add_argument("target", help="module:callable or path/to/file.py:callable")
  ap.add_argument("--out", required=True, help="output directory")
  ap.add_argument("--name", default="net", help="C name of the model (default net)")
  ap.add_argument("--input", action="append", default=[], metavar="SHAPE[:DTYPE]",
                  help="an input's shape such as 1,100 (float32 unless :dtype); without it the target is called as a factory")
  ap.add_argument("--embed-weights", action="store_true", help="put the weights in the .c (no .bin)")
  args = ap.parse_args(argv)
  obj = _load_object(args.target)
  if args.input:
    ins = []
    for spec in args.input:
      shape, _, dt = spec.partition(":")
      ins.append(np.zeros(tuple(int(d) for d in shape.split(",") if d), dtype=dt or "float32"))
    fn = obj
  else:
    made = obj()
    if not isinstance(made, tuple) or len(made) < 2: raise SystemExit(f"{args.target}() must return (fn, example_input, ...) when no --input is given")
    fn, ins = made[0], list(made[1:])
  ex = export_c(fn, *ins, name=args.name, embed_weights=args.embed_weights)
  paths = ex.write(args.out)
  m = ex.memory
  print(f"wrote {', '.join(str(p) for p in paths)}: {ex.kernels} kernels, {m['weight_bytes']} bytes of weights, "
        f"{m['scratch_bytes']} bytes of scratch (peak live {m['peak_live_bytes']}, {m['unshared_bytes']} without sharing)")
  return ex

if __name__ == "__main__":
  main()
