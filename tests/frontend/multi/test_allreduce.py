"""Allreduce lowerings (issue 26 stage 3): naive, ring (reduce-scatter + all-gather, chunked) and all2all, picked by
size and device count as tinygrad picks them (`RING`, `ALL2ALL`), and `ALLREDUCE_CAST` keeping half on the wire.
Schedule shapes as tinygrad's test/unit/test_allreduce.py checks them; values against numpy and against each other.
Always on CPU:n devices (cheap, and there whatever the configuration's default device is).
"""
import numpy as np
import pytest
from frontend import Tensor, dtypes
from frontend.multi import RING_THRESHOLD, all_reduce, allreduce_kind

def devs(n: int) -> tuple[str, ...]: return tuple(f"CPU:{i + 1}" for i in range(n))

def rng(*shape, seed=0) -> np.ndarray: return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def copy_pairs(t: Tensor) -> list[tuple[str, str]]:
  return [(si.inputs[0].device, si.outputs[0].device) for si in t.schedule() if si.kind == "copy"]

def shard_values(t: Tensor) -> list[np.ndarray]:
  t.realize()
  return [Tensor(lb).numpy() for lb in t.lazydata.lbs]

@pytest.mark.parametrize("n", [3, 4])
def test_ring_schedule_is_a_ring(n, monkeypatch):
  monkeypatch.setenv("RING", "2")
  t = Tensor.empty(n, n * 100).shard(devs(n), axis=0).realize()
  pairs = copy_pairs(t.sum(0))
  assert len(pairs) == n * (n - 1) * 2                                   # N(N-1) reduce-scatter + N(N-1) all-gather
  assert set(pairs) == {(devs(n)[i], devs(n)[(i + 1) % n]) for i in range(n)}   # only between ring neighbours

@pytest.mark.parametrize("n", [2, 3, 4])
def test_naive_schedule_copies(n, monkeypatch):
  monkeypatch.setenv("RING", "0")
  t = Tensor.empty(n, n * 100).shard(devs(n), axis=0).realize()
  pairs = copy_pairs(t.sum(0))
  assert len(pairs) == n * (n - 1) and len(set(pairs)) == n * (n - 1)   # every device from every other, once

def test_all2all_schedule(monkeypatch):
  monkeypatch.setenv("ALL2ALL", "2")
  t = Tensor.empty(4, 400).shard(devs(4), axis=0).realize()
  assert len(copy_pairs(t.sum(0))) == 24   # 4*3 to the chunk owners, 4*3 back out

def test_choice_by_size_and_count(monkeypatch):
  for k in ("RING", "ALL2ALL"): monkeypatch.delenv(k, raising=False)
  assert allreduce_kind(2, 10 * RING_THRESHOLD) == "naive"   # two devices: the ring saves nothing
  assert allreduce_kind(3, RING_THRESHOLD - 1) == "naive" and allreduce_kind(3, RING_THRESHOLD) == "ring"
  monkeypatch.setenv("RING", "0")
  assert allreduce_kind(4, 10 * RING_THRESHOLD) == "naive"
  monkeypatch.setenv("RING", "2")
  assert allreduce_kind(2, 8) == "ring"
  monkeypatch.setenv("ALL2ALL", "1")
  assert allreduce_kind(4, 10 * RING_THRESHOLD) == "all2all" and allreduce_kind(2, 8) == "ring"
  monkeypatch.setenv("ALL2ALL", "x")
  with pytest.raises(ValueError, match="ALL2ALL='x'"): allreduce_kind(4, 8)

def test_default_picks_ring_for_a_big_reduce_on_three(monkeypatch):
  for k in ("RING", "ALL2ALL"): monkeypatch.delenv(k, raising=False)
  t = Tensor.empty(3, RING_THRESHOLD).shard(devs(3), axis=0).realize()
  pairs = copy_pairs(t.sum(0))
  assert len(pairs) == 12 and len(set(pairs)) == 3

@pytest.mark.parametrize("kind", ["ring", "all2all"])
@pytest.mark.parametrize("n", [3, 4])
def test_values_and_bit_identical_shards(kind, n, monkeypatch):
  monkeypatch.setenv("RING" if kind == "ring" else "ALL2ALL", "2")
  x = rng(n * 2, 37)
  s = Tensor(x).shard(devs(n), 0).sum(0)
  got = shard_values(s)
  np.testing.assert_allclose(got[0], x.sum(0), rtol=1e-5, atol=1e-5)
  for g in got[1:]: np.testing.assert_array_equal(g, got[0])   # each chunk reduced once and copied: the same bits

@pytest.mark.parametrize("n", [3, 4])
@pytest.mark.parametrize("seed", range(3))
def test_fuzz_ring_vs_naive(n, seed, monkeypatch):
  r = np.random.default_rng(100 + seed)
  shape = tuple(int(v) for v in r.integers(1, 9, size=int(r.integers(1, 4))))
  axis = int(r.integers(0, len(shape) + 1))
  x = rng(n * int(r.integers(1, 4)), *shape, seed=seed)
  red = tuple(range(x.ndim)) if axis == 0 else (0, axis)   # all axes, or the sharded one and another
  out = {}
  for ring in ("0", "2"):
    monkeypatch.setenv("RING", ring)
    out[ring] = Tensor(x).shard(devs(n), 0).sum(red).numpy()
  np.testing.assert_allclose(out["2"], out["0"], rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(out["2"], x.sum(red), rtol=1e-5, atol=1e-5)

def test_ring_max_and_int(monkeypatch):
  monkeypatch.setenv("RING", "2")
  x = rng(6, 5)
  assert Tensor(x).shard(devs(3), 0).max().item() == x.max()
  i = np.arange(60, dtype=np.int32).reshape(6, 10)
  assert Tensor(i).shard(devs(3), 0).sum(0).tolist() == i.sum(0).tolist()

def test_ring_fewer_elements_than_devices(monkeypatch):
  monkeypatch.setenv("RING", "2")
  x = rng(4, 1)
  np.testing.assert_allclose(Tensor(x).shard(devs(4), 0).sum(0).numpy(), x.sum(0), rtol=1e-6)

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16])
def test_allreduce_cast_keeps_half_on_the_wire(dt, monkeypatch):
  monkeypatch.setenv("RING", "0")
  t = Tensor.empty(4, 4, dtype=dt).shard(devs(2), axis=0).realize()
  def wire(cast: str) -> set:
    monkeypatch.setenv("ALLREDUCE_CAST", cast)
    return {si.outputs[0].dtype for si in t.sum(0).schedule() if si.kind == "copy"}
  assert wire("0") == {dtypes.float32}   # the float32 partial sums travel
  assert wire("1") == {dt}               # narrowed before the copies

def test_allreduce_cast_values_and_no_op_for_float32(monkeypatch):
  monkeypatch.setenv("ALLREDUCE_CAST", "1")
  h = rng(8, 4).astype(np.float16)
  got = Tensor(h).shard(devs(2), 0).sum(0).numpy()
  assert got.dtype == np.float16
  np.testing.assert_allclose(got.astype(np.float32), h.astype(np.float32).sum(0), rtol=1e-2, atol=1e-2)
  f = Tensor.empty(4, 4).shard(devs(2), axis=0).realize()
  assert {si.outputs[0].dtype for si in f.sum(0).schedule() if si.kind == "copy"} == {dtypes.float32}

def test_all_reduce_direct_on_lazy_buffers(monkeypatch):
  monkeypatch.setenv("RING", "2")
  from compiler.uop import Ops
  parts = [Tensor(np.full(8, float(i + 1), np.float32), device=d).lazydata for i, d in enumerate(devs(3))]
  out = all_reduce(Ops.ADD, parts)
  assert [o.device for o in out] == list(devs(3))
  for o in out: assert Tensor(o).tolist() == [6.0] * 8
