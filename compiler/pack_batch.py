"""Packed batched products (`a @ b` with a (B, M, K) and b (B, K, N)): compiler/pack.py's packing with a batch dimension.

compiler/pack.py merges lead dimensions into the rows when every view allows it (x (B, T, C) @ W); a batch of different
right-hand matrices can't merge and used to stay unpacked: 4 x 1023^3 took 254 ms of CPU on the AVX-512 host of issue
28 against 4 x 16.4 ms for 1024^3. Here each operand is packed by one copy kernel for the whole batch,

  PA[b, it, k, l] = A[b, it*MR + l, k]    PB[b, jt, k, l] = B[b, k, jt*NR + l]   (zeros past M and N)

the product computes the (B, Mp, Np) tile grid into a scratch buffer (compiler/opt/matmul.py tiles it with the batch
loop outermost, split across the cores), and compiler/pack_pad.py's finish kernel reads scratch[:, :M, :N] (and applies
any epilogue). A batch is packed when one of its products would be on its own, and is 2^25 multiply-adds or has N
not a multiple of two vectors. On the AVX-512 host, CPU_ISA=native, process CPU ms old -> new, minimum of 5, taking
turns: 4 x 1023^3 282 -> 65, 4 x 1024^3 147 -> 73, 2 x 2048^3 1237 -> 228, 8 x 512^3 23.8 -> 19.8, 64 x 300^3 95 -> 46.
Attention's scores q @ k.T, (B, H, T, D) @ (B, H, D, T): the two batch dims merge into one where every view allows it
(compiler/pack.py merge_leading_dims, keep=3), and a B read across its rows (k.T: its columns D floats apart, every
vector a gather in place) is packed under the size floor by compiler/pack_strided.py's rule for one product. Same host,
load 4-5, process CPU ms old -> new, minimum of 7-11, taking turns: (4, 8, 256, 64) native 17.1 -> 6.0, x86-64-v3
9.8 -> 6.6-7.0; (1, 4, 512, 32) 8.5 -> 2.8, v3 4.5 -> 1.9; (16, 256, 64) v3 5.1 -> 2.9 ((8, 256, 64): within the noise).

>>> from compiler.lazy import LazyBuffer
>>> from compiler.dtypes import dtypes
>>> from compiler.schedule import create_schedule
>>> from compiler.pack import pack_matmuls
>>> a, b = (LazyBuffer.empty((4, 300, 300), dtypes.float32, "CPU") for _ in range(2))
>>> a.buffer = b.buffer = object()
>>> mm = a.reshape((4, 300, 1, 300)).expand((4, 300, 300, 300)).alu(Ops.MUL, b.permute((0, 2, 1)).reshape((4, 1, 300, 300)).expand((4, 300, 300, 300))).r(Ops.ADD, (3,))
>>> [si.name for si in pack_matmuls(create_schedule([mm]), lambda device: 16)]
['E_4_25_300_12', 'E_4_10_300_32', 'r_4_300_320_300', 'E_4_300_300_1']
"""
from __future__ import annotations
from compiler.dtypes import dtypes
from compiler.pack_pad import ScratchPlan, finish_kernel, padded_columns
from compiler.pack_strided import strided_b_packs
from compiler.uop import UOp, Ops
from compiler.view import ShapeTracker, View

def _batched_matmul(ast: UOp) -> tuple[UOp, UOp, UOp] | None:
  """(reduce, load of A, load of B) when the kernel is a product over (B, M, N, K): one REDUCE_AXIS ADD over axis 3 of
  MUL(LOAD, LOAD), A constant along N and B along M, float32 single views without masks."""
  reds = [u for u in ast.toposort() if u.op is Ops.REDUCE_AXIS]
  if len(reds) != 1 or reds[0].arg != (Ops.ADD, (3,)) or reds[0].dtype is not dtypes.float32: return None
  mul = reds[0].src[0]
  if mul.op is not Ops.MUL or any(s.op is not Ops.LOAD or s.dtype is not dtypes.float32 for s in mul.src): return None
  views = [st.views[0] if len((st := s.arg[1]).views) == 1 and st.views[0].mask is None else None for s in mul.src]
  if any(v is None or len(v.shape) != 4 for v in views): return None
  a = [s for s, v in zip(mul.src, views) if v.strides[2] == 0 and v.strides[1] != 0]
  b = [s for s, v in zip(mul.src, views) if v.strides[1] == 0 and v.strides[2] != 0]
  return (reds[0], a[0], b[0]) if len(a) == 1 and len(b) == 1 and a[0] is not b[0] else None

def _pack(ld: UOp, rows: bool, tiles: int, t: int) -> UOp:
  """The copy kernel PX[b, tt, kk, l] = X[b, tt*t + l, kk] (rows: X = A) or X[b, kk, tt*t + l] (B), zero past the end."""
  v: View = ld.arg[1].views[0]
  nb, m, n, k = v.shape
  size, s_mn = (m, v.strides[1]) if rows else (n, v.strides[2])
  st = ShapeTracker((View.create((nb, size, k), (v.strides[0], s_mn, v.strides[3]), v.offset),)).pad(((0, 0), (0, tiles * t - size), (0, 0)))
  st = st.reshape((nb, tiles, t, k)).permute((0, 1, 3, 2))
  return UOp(Ops.SINK, None, (UOp(Ops.STORE, None, (UOp(Ops.LOAD, dtypes.float32, (), (1, st)),), (0, ShapeTracker.from_shape((nb, tiles, k, t)))),))

def _packed_load(slot: int, nb: int, tiles: int, k: int, t: int, rows: bool, shape: tuple[int, int, int, int]) -> UOp:
  """How the product (B, Mp, Np, K) reads the packed PX (B, tiles, k, t) at (b, i, j, kk)."""
  st = ShapeTracker.from_shape((nb, tiles, k, t)).permute((0, 1, 3, 2)).reshape((nb, tiles * t, k))
  st = st.reshape((nb, shape[1], 1, k)) if rows else st.reshape((nb, 1, shape[2], k))
  return UOp(Ops.LOAD, dtypes.float32, (), (slot, st.expand(shape)))

def batched_plan(ast: UOp, lanes: int, packs_alone) -> ScratchPlan | None:
  """The packed form of the batched product `ast` (None: leave it as it is); `packs_alone(m, n, k)` says whether one
  product of the batch would be packed on its own."""
  from compiler.pack import L2_PANEL, tile_shape, merge_leading_dims   # (compiler/pack.py imports this module)
  if (mm := _batched_matmul(ast)) is None:
    # two or more batch dims (attention's (B, H, T, D) @ (B, H, D, T)) that merge into one in every view
    if (flat := merge_leading_dims(ast, keep=3)) is None or flat is ast or (mm := _batched_matmul(flat)) is None: return None
    ast = flat
  red, la, lb = mm
  nb, m, n, k = la.arg[1].shape
  # B read across its rows (q @ k.T: B's columns K floats apart): in place every vector of B is a gather, whatever the
  # size (compiler/pack_strided.py's rule for one product)
  gathers = strided_b_packs(m, n, k, lb.arg[1].views[0].strides[2])
  # (16 x 256^3 packed was 12% slower than in place on the AVX-512 host, 64 x 300^3 2x faster: N not whole tiles)
  if nb < 2 or not (gathers or packs_alone(m, n, k)) or (not gathers and m * n * k < 1 << 25 and n % (2 * lanes) == 0) or \
     (tile := tile_shape(lanes, m, (np_ := padded_columns(n, lanes)), True)) is None: return None
  mr, nr = tile
  mt, nt = -(-m // mr), np_ // nr
  jb = max(1, min(4, L2_PANEL // (k * nr * 4), nt // 2))
  while nt % jb: jb -= 1
  mp, full = mt * mr, (nb, mt * mr, np_, k)
  packs = ((_pack(la, True, mt, mr), (nb, mt, k, mr), la.arg[0]), (_pack(lb, False, nt, nr), (nb, nt, k, nr), lb.arg[0]))
  mul = UOp(Ops.MUL, dtypes.float32, (_packed_load(1, nb, mt, k, mr, True, full), _packed_load(2, nb, nt, k, nr, False, full)))
  product = UOp(Ops.SINK, None, (UOp(Ops.STORE, None, (UOp(Ops.REDUCE_AXIS, red.dtype, (mul,), red.arg),), (0, ShapeTracker.from_shape((nb, mp, np_, 1)))),),
                ("packed_matmul", mr, nr, jb))
  valid = ShapeTracker.from_shape((nb, mp, np_, 1)).shrink(((0, nb), (0, m), (0, n), (0, 1)))   # the finish reads [:, :M, :N]
  return ScratchPlan(packs, product, *finish_kernel(ast, red, valid), (nb, mp, np_))
