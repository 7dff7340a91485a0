"""Attention-shaped products packed (compiler/pack_batch.py batched_plan): (B, H, T, D) @ (B, H, D, T) with two batch
dims merged into one (compiler/pack.py merge_leading_dims, keep=3), and a B read across its rows (q @ k.T: B's columns
D floats apart, a gather per vector in place) packed under the size floor by compiler/pack_strided.py's rule. Built for
each CPU target and run where the host can, they equal numpy exactly (small integers)."""
import numpy as np
import pytest
import compiler.pack as pack
import compiler.pack_batch as pack_batch
from compiler.lazy import LazyBuffer
from compiler.lower import lower
from compiler.opt.matmul import packed_matmul_tile
from compiler.schedule import create_schedule
from compiler.uop import Ops
from conftest import skip_unless_host_runs
from frontend import Tensor
from test_pack_avx2 import _empty, _run

pytestmark = [pytest.mark.usefixtures("on_cpu")]
rng = np.random.default_rng(2837)

def _attn(q: LazyBuffer, k: LazyBuffer, lanes: int, k_t: bool = True) -> list:
  """The packed schedule of q @ k.T (q: (*lead, M, D); k: (*lead, N, D)), or of q @ k with k (*lead, D, N)."""
  *lead, m, d = q.shape
  n = k.shape[-2] if k_t else k.shape[-1]
  nl, full = len(lead), (*lead, m, n, d)
  kv = k if k_t else k.permute((*range(nl), nl + 1, nl))
  out = q.reshape((*lead, m, 1, d)).expand(full).alu(Ops.MUL, kv.reshape((*lead, 1, n, d)).expand(full)).r(Ops.ADD, (nl + 2,))
  return pack.pack_matmuls(create_schedule([out]), lambda device: lanes)

def small_ints(*shape: int) -> np.ndarray: return rng.integers(-3, 4, shape).astype(np.float32)

@pytest.mark.parametrize("lead,m,n,d", [((2, 3), 37, 45, 13), ((2, 2, 2), 20, 33, 8), ((3, 2), 64, 48, 64)])
def test_two_batch_dims_b_transposed_packed_and_exact(cpu_target, monkeypatch, lead, m, n, d):
  monkeypatch.setattr(pack, "_plans", {})
  monkeypatch.setattr(pack_batch, "strided_b_packs", lambda m, n, k, stride: stride != 1)   # (odd shapes under the floor too)
  lanes = cpu_target.simd_bytes // 4
  q, k = _empty(*lead, m, d), _empty(*lead, n, d)
  items = _attn(q, k, lanes)
  nb = int(np.prod(lead))
  assert len(items) == 4 and items[2].ast.arg[0] == "packed_matmul", [si.name for si in items]
  mr = items[2].ast.arg[1]
  assert items[0].outputs[0].shape == (nb, -(-m // mr), d, mr)   # the batch dims merged into one
  kern = packed_matmul_tile(lower(items[2].ast, items[2].name), cpu_target)
  assert kern is not None and kern.global_ranges[0].src[0].arg == nb
  skip_unless_host_runs(cpu_target)
  qn, kn = small_ints(*q.shape), small_ints(*k.shape)
  want = np.einsum("...md,...nd->...mn", qn.astype(np.int64), kn.astype(np.int64))
  got = _run(items, {q: qn, k: kn}, cpu_target).reshape(want.shape)
  np.testing.assert_array_equal(got, want)

def test_which_attention_products_are_packed():
  """q @ k.T packs from 2^22 multiply-adds per product with M, N >= 64 (compiler/pack_strided.py); q @ k with k stored
  (D, T) (vectors along N are plain loads) and smaller products stay in place."""
  def n_items(lead, m, n, d, k_t=True): return len(_attn(_empty(*lead, m, d), _empty(*lead, n, d) if k_t else _empty(*lead, d, n), 16, k_t))
  pack._plans.clear()
  assert n_items((4, 8), 256, 256, 64) == 4 and n_items((8,), 256, 256, 64) == 4 and n_items((1, 4), 512, 512, 32) == 4
  assert n_items((2, 12), 128, 128, 64) == 1 and n_items((4, 8), 256, 256, 64, k_t=False) == 1

def test_attention_scores_through_the_frontend_are_exact():
  qn, kn = small_ints(2, 4, 256, 64), small_ints(2, 4, 256, 64)
  got = (Tensor(qn) @ Tensor(kn).transpose(-1, -2)).numpy()
  np.testing.assert_array_equal(got, np.einsum("bhmd,bhnd->bhmn", qn.astype(np.int64), kn.astype(np.int64)))

# ---- weight gradients x.T @ g (compiler/pack_strided.py transposed_a_packs): A read down its columns, a short K

def _at_b(m: int, k: int, n: int, lanes: int) -> tuple[LazyBuffer, LazyBuffer, list]:
  """The packed schedule of a.T @ b with a stored (K, M) and b (K, N)."""
  a, b = _empty(k, m), _empty(k, n)
  full = (m, n, k)
  out = a.permute((1, 0)).reshape((m, 1, k)).expand(full).alu(Ops.MUL, b.permute((1, 0)).reshape((1, n, k)).expand(full)).r(Ops.ADD, (2,))
  return a, b, pack.pack_matmuls(create_schedule([out]), lambda device: lanes)

def test_which_weight_gradients_are_packed():
  pack._plans.clear()
  def packed(m, k, n, lanes=16): return any(si.ast.arg and si.ast.arg[0] == "packed_matmul" for si in _at_b(m, k, n, lanes)[2])
  assert packed(784, 128, 1000) and packed(784, 128, 1000, 8) and packed(1024, 64, 1024)
  assert not packed(784, 32, 1000) and not packed(200, 128, 1000) and not packed(256, 128, 512)   # short K, few rows, < 2^25

@pytest.mark.parametrize("m,k,n", [(520, 128, 512), (512, 100, 700)])
def test_weight_gradient_packed_and_exact(cpu_target, m, k, n):
  pack._plans.clear()
  a, b, items = _at_b(m, k, n, cpu_target.simd_bytes // 4)
  assert any(si.ast.arg and si.ast.arg[0] == "packed_matmul" for si in items), [si.name for si in items]
  skip_unless_host_runs(cpu_target)
  an, bn = small_ints(k, m), small_ints(k, n)
  got = _run(items, {a: an, b: bn}, cpu_target).reshape(m, -1)[:, :n]
  np.testing.assert_array_equal(got, an.T.astype(np.int64) @ bn.astype(np.int64))
