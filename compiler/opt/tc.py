"""Tensor-core opts for PTX devices: a half-precision matmul becomes warp-level `mma.sync` tiles (m16n8k16).

A kernel qualifies when its single STORE writes an elementwise function of one REDUCE(ADD) in float32 over one loop k of
MUL(x, y), x and y loads of float16 buffers (or both bfloat16), ungated, optionally cast to float32 (a.float() @ b.float()),
or the product taken in half and cast to float32 (what a.half() @ b.half() lowers to: tensor cores form that product
exactly, so the result is closer to the true one than the half product was); one load's index depends on output loop rm
(not rn), the other's on rn (not rm), and on other output loops (batch) only besides k. With M, N, K their sizes:
M % 16 == 0, N % 8 == 0, K % 16 == 0 (else the roles of the loads swap when that fits), on a device whose arch is sm_80
or newer. TC=0 in the environment turns it off; NOOPT=1 too (optimize_gpu returns before it).

The rewrite: one warp per 16x8 tile of the output. rm = tm*16 + row, rn = tn*8 + col, k = kr*16 + kk, where each lane's
rows, cols and kk come from the PTX ISA fragment layout (g = lane // 4, t = lane % 4; see hcqrt/mock/ptx/mma.py):
  A fragment (8 halves):  m = g + 8*((i >> 1) & 1),  k = 2t + (i & 1) + 8*(i >> 2)
  B fragment (4 halves):  k = 2t + (i & 1) + 8*(i >> 1),  n = g
  C/D (4 floats):         m = g + 8*(i >> 1),  n = 2t + (i & 1)
Each lane loads its fragment elements straight from global memory (two neighbours as one 2-wide load when their
indices are adjacent), WMMA(A fragment, B fragment, 0) is summed over kr (the linearizer accumulates it in place:
acc = WMMA(a, b, acc)), and the store runs four times, for each (row, col) of the lane's D elements, with the REDUCE
replaced by that element (in pairs: elements 0/1 and 2/3 are neighbours in a row). The output loops become
[..., tm, tn, lane]: the renderer puts lane (32) innermost on x, so every warp is one tile.

>>> from compiler.lazy import LazyBuffer
>>> from compiler.schedule import create_schedule
>>> from compiler.lower import lower
>>> from compiler.dtypes import dtypes
>>> from compiler.target import Target
>>> a = LazyBuffer.empty((32, 16), dtypes.float16, "PTXEMU"); a.buffer = object()
>>> b = LazyBuffer.empty((16, 64), dtypes.float16, "PTXEMU"); b.buffer = object()
>>> prod = a.reshape((32, 16, 1)).expand((32, 16, 64)).cast(dtypes.float32).alu(Ops.MUL, b.reshape((1, 16, 64)).expand((32, 16, 64)).cast(dtypes.float32))
>>> k = tensor_cores(lower(create_schedule([prod.r(Ops.ADD, (1,))])[0].ast), Target("NV", "ptx", arch="sm_80", gpu=True))
>>> k.applied_opts, [r.src[0].arg for r in k.global_ranges]
([('TC', 'm16n8k16', 32, 64, 16)], [2, 8, 32])
"""
from __future__ import annotations
import re
from compiler.dtypes import dtypes
from compiler.lower import LoweredKernel
from compiler.uop import UOp, Ops, substitute, simplify
from compiler.target import Target
from compiler import settings

TC_SHAPE, TC_M, TC_N, TC_K = "m16n8k16", 16, 8, 16
TC_DTYPES = (dtypes.float16, dtypes.bfloat16)   # mma.sync input types (the accumulator is float32)

def _arch_ok(arch) -> bool:
  m = re.fullmatch(r"sm_(\d+)a?", str(arch or ""))
  return m is not None and int(m.group(1)) >= 80

def _half_load(u: UOp) -> UOp | None:
  if u.op is Ops.CAST and u.dtype == dtypes.float32: u = u.src[0]
  return u if u.op is Ops.LOAD and len(u.src) == 2 and u.dtype in TC_DTYPES else None

def _operands(red: UOp) -> tuple[UOp, UOp] | None:
  """The two half-precision loads whose product the REDUCE sums, or None."""
  v = red.src[0]
  if v.op is Ops.CAST and v.dtype == dtypes.float32 and v.src[0].op is Ops.MUL and v.src[0].dtype in TC_DTYPES: v = v.src[0]
  if v.op is not Ops.MUL: return None
  x, y = (_half_load(s) for s in v.src)
  return (x, y) if x is not None and y is not None and x.dtype == y.dtype else None

def _ranges(u: UOp) -> set[UOp]: return {x for x in u.toposort() if x.op is Ops.RANGE}

def tensor_cores(k: LoweredKernel, device: Target) -> LoweredKernel | None:
  """k rewritten into mma.sync tiles (in place, and returned) when it qualifies (see the module doc), else None."""
  if not settings.tensor_cores() or not _arch_ok(device.arch): return None
  if len(k.sink.src) != 1 or k.sink.src[0].op is not Ops.STORE: return None
  reds = [u for u in k.sink.toposort() if u.op is Ops.REDUCE]
  if len(reds) != 1: return None
  red = reds[0]
  if red.arg is not Ops.ADD or red.dtype != dtypes.float32 or len(red.src) != 2 or red.src[1].op is not Ops.RANGE: return None
  if (ops := _operands(red)) is None: return None
  rk, gset = red.src[1], set(k.global_ranges)
  deps = [_ranges(ld.src[1]) for ld in ops]
  if any(rk not in d or d - gset - {rk} for d in deps): return None   # indices use output loops and k only
  own = [(d - e) & gset for d, e in zip(deps, deps[::-1])]
  if any(len(o) != 1 for o in own): return None
  (p,), (q,) = own
  size = lambda r: r.src[0].arg
  if size(rk) % TC_K: return None
  for (la, rm), (lb, rn) in (((ops[0], p), (ops[1], q)), ((ops[1], q), (ops[0], p))):
    if size(rm) % TC_M == 0 and size(rn) % TC_N == 0: return apply_tensor_cores(k, red, la, lb, rm, rn)
  return None

def _load_at(ld: UOp, subs: dict[UOp, UOp]) -> UOp:
  return ld.replace(src=(ld.src[0], simplify(substitute(ld.src[1], subs))))

def _fragment(loads: list[UOp]) -> UOp:
  """VECTORIZE of a lane's fragment elements; neighbours (2j, 2j+1) at adjacent indices load as one 2-wide LOAD."""
  items: list[UOp] = []
  for x, y in zip(loads[0::2], loads[1::2]):
    if (d := simplify(y.src[1] - x.src[1])).op is Ops.CONST and d.arg == 1:
      v = UOp(Ops.LOAD, x.dtype.vec(2), x.src)
      items += [UOp(Ops.GEP, x.dtype, (v,), 0), UOp(Ops.GEP, x.dtype, (v,), 1)]
    else: items += [x, y]
  return UOp(Ops.VECTORIZE, loads[0].dtype.vec(len(items)), tuple(items))

def apply_tensor_cores(k: LoweredKernel, red: UOp, la: UOp, lb: UOp, rm: UOp, rn: UOp) -> LoweredKernel:
  """The tile rewrite of the module doc: la is the A operand (rows on rm), lb the B operand (columns on rn)."""
  rk = red.src[1]
  M, N, K = rm.src[0].arg, rn.src[0].arg, rk.src[0].arg
  lane = k.new_range(32, "global")
  tm, tn = (k.new_range(n // t, "global") if n > t else None for n, t in ((M, TC_M), (N, TC_N)))
  kr = k.new_range(K // TC_K, "reduce") if K > TC_K else None
  zero = UOp.const(dtypes.int32, 0)
  m0, n0, k0 = (r * t if r is not None else zero for r, t in ((tm, TC_M), (tn, TC_N), (kr, TC_K)))
  g, t = lane // 4, lane % 4
  a = _fragment([_load_at(la, {rm: m0 + g + 8 * ((i >> 1) & 1), rk: k0 + t * 2 + (i & 1) + 8 * (i >> 2)}) for i in range(8)])
  b = _fragment([_load_at(lb, {rk: k0 + t * 2 + (i & 1) + 8 * (i >> 1), rn: n0 + g}) for i in range(4)])
  acc_dt = dtypes.float32.vec(4)
  mma = UOp(Ops.WMMA, acc_dt, (a, b, UOp.const(acc_dt, 0.0)), (TC_SHAPE, la.dtype.name, "float"))
  d = UOp(Ops.REDUCE, acc_dt, (mma, kr), Ops.ADD) if kr is not None else mma
  store = k.sink.src[0]
  buf, idx, val = store.src
  stores = []
  for i in (0, 2):   # D elements i and i+1: neighbours in one row of the tile
    outs = []
    for j in (i, i + 1):
      pos = {rm: m0 + g + 8 * (j >> 1), rn: n0 + t * 2 + (j & 1)}
      outs.append((simplify(substitute(idx, pos)), simplify(substitute(val, pos | {red: UOp(Ops.GEP, dtypes.float32, (d,), j)}))))
    (i0, v0), (i1, v1) = outs
    if (s := simplify(i1 - i0)).op is Ops.CONST and s.arg == 1:
      stores.append(UOp(Ops.STORE, None, (buf, i0, UOp(Ops.VECTORIZE, v0.dtype.vec(2), (v0, v1)))))
    else: stores += [UOp(Ops.STORE, None, (buf, i0, v0)), UOp(Ops.STORE, None, (buf, i1, v1))]
  k.sink = UOp(Ops.SINK, None, tuple(stores), k.sink.arg)
  k.global_ranges = [x for x in (tm if r is rm else tn if r is rn else r for r in k.global_ranges) if x is not None] + [lane]
  k.applied_opts.append(("TC", TC_SHAPE, M, N, K))
  return k
