"""TinyJit replays read the index checks they captured (issue 16): a bad index on the 3rd or a later call raises the
same error as eager mode, naming the op, instead of giving a wrong number. On the CPU and on the NV mock (graph)."""
import os
import numpy as np
import pytest
from frontend import Tensor, TinyJit, nn

def _cases(device):
  emb = nn.Embedding(5, 3)
  if device != emb.weight.device: emb.weight = emb.weight.to(device).realize()
  x = Tensor(np.arange(10, dtype=np.float32).reshape(5, 2), device=device).realize()
  return {
    "Embedding": (lambda i: emb(i).sum(), [[0, 1], [2, 4]], [3, 7]),
    "gather": (lambda i: x.gather(0, i.reshape(2, 1)).sum(), [[0, 1], [2, 4]], [5, 1]),
    "x[tensor]": (lambda i: x[i].sum(), [[0, 1], [4, 2]], [1, 9]),
    "sparse_categorical_crossentropy": (lambda i: x[:2].sparse_categorical_crossentropy(i), [[0, 1], [1, 0]], [1, 2]),
  }

def _run(device):
  for what, (fn, good, bad) in _cases(device).items():
    f = TinyJit(fn)
    for idx in good + good:   # eager run, capture, replays
      expect = fn(Tensor(idx, device=device).realize()).numpy()
      np.testing.assert_allclose(f(Tensor(idx, device=device).realize()).numpy(), expect, rtol=1e-6, err_msg=what)
    if device == "NV": assert f.graph, "the NV replay is one graph"
    with pytest.raises((IndexError, RuntimeError)) as eager: fn(Tensor(bad, device=device).realize()).numpy()
    with pytest.raises(eager.type) as replay: f(Tensor(bad, device=device).realize())
    assert "TinyJit replay" in str(replay.value) and str(eager.value).split(":")[0] in str(replay.value), (what, replay.value)
    # the replay after a failed one is right again
    np.testing.assert_allclose(f(Tensor(good[0], device=device).realize()).numpy(), fn(Tensor(good[0], device=device).realize()).numpy(), rtol=1e-6)

def test_replay_raises_on_bad_index_cpu(): _run("CPU")

def test_replay_raises_on_bad_index_nv_graph():
  old = os.environ.get("MOCKGPU")
  os.environ["MOCKGPU"] = "1"
  try:
    from hcqrt.device import Device
    Device["NV"]
  finally:
    if old is None: del os.environ["MOCKGPU"]
    else: os.environ["MOCKGPU"] = old
  _run("NV")

def test_no_checks_no_readback():
  w = Tensor([1.0, 2.0]).realize()
  @TinyJit
  def f(x): return (x * w).sum()
  for i in range(3): f(Tensor([float(i), 1.0]).realize())
  assert f.checks == []
