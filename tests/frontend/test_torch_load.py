"""torch_load (frontend.nn.state) on checkpoints written by torch itself: every dtype bit-exact, strided and shared
storages, both file formats, nested objects; pickles that hold anything but tensor records are refused unrun;
safe_load and torch_load map files instead of reading them into memory; load_state_dict reports every problem at once."""
import collections, os, pickle, tracemalloc, zipfile
import numpy as np
import pytest
import torch
from compiler.dtypes import dtypes
from frontend import Tensor, nn
from frontend.nn.state import get_state_dict, load_state_dict, safe_load, safe_save, torch_load

FORMATS = [pytest.param(True, id="zip"), pytest.param(False, id="legacy")]

def _save(obj, path, zip_format: bool = True):
  torch.save(obj, path, _use_new_zipfile_serialization=zip_format)
  return path

def _bits(t: Tensor) -> np.ndarray:
  from frontend.nn.state import _tensor_bytes
  return np.frombuffer(_tensor_bytes(t), np.uint8)

def _torch_bits(t: torch.Tensor) -> np.ndarray:
  t = t.contiguous().reshape(-1)
  return t.view(torch.uint8).numpy().reshape(-1) if t.numel() else np.empty(0, np.uint8)

TORCH_TO_OURS = {torch.float32: dtypes.float32, torch.float16: dtypes.float16, torch.bfloat16: dtypes.bfloat16,
                 torch.float64: dtypes.float64, torch.int64: dtypes.int64, torch.int32: dtypes.int32, torch.int16: dtypes.int16,
                 torch.int8: dtypes.int8, torch.uint8: dtypes.uint8, torch.bool: dtypes.bool, torch.uint16: dtypes.uint16,
                 torch.uint32: dtypes.uint32, torch.uint64: dtypes.uint64}

def _sample(dt: torch.dtype, shape=(3, 5)) -> torch.Tensor:
  g = torch.Generator().manual_seed(0)
  if dt.is_floating_point: return (torch.randn(shape, generator=g, dtype=torch.float64) * 100).to(dt)
  if dt == torch.bool: return torch.rand(shape, generator=g) > 0.5
  hi = 250 if dt == torch.uint8 else 30000   # (randint has no unsigned kernels beyond uint8; the bits are what count)
  return torch.randint(-hi if dt.is_signed else 0, hi, shape, generator=g, dtype=torch.int64).to(dt)

@pytest.mark.parametrize("zip_format", FORMATS)
def test_every_dtype_bit_exact(tmp_path, zip_format):
  sd = {str(dt): _sample(dt) for dt in TORCH_TO_OURS}
  sd["torch.float32 nan"] = torch.tensor([float("nan"), -0.0, float("inf"), 1e-45])
  sd["scalar"] = torch.tensor(2.5, dtype=torch.float64)
  sd["empty"] = torch.zeros(0, 4)
  back = torch_load(_save(sd, tmp_path / "all.pt", zip_format))
  assert list(back) == list(sd)
  for k, t in sd.items():
    assert back[k].dtype == TORCH_TO_OURS[t.dtype] and back[k].shape == tuple(t.shape), k
    np.testing.assert_array_equal(_bits(back[k]), _torch_bits(t), err_msg=k)

@pytest.mark.parametrize("zip_format", FORMATS)
def test_strided_and_shared_storages(tmp_path, zip_format):
  base = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)
  sd = collections.OrderedDict(
    transposed=base.permute(2, 0, 1), sliced=base[1:, ::2, 3:], row=base[2, 1], expanded=torch.arange(3.0)[:, None].expand(3, 4),
    col=base[:, :, 4], half_view=base.half()[0, 1:3], base=base)
  back = torch_load(_save(sd, tmp_path / "views.pt", zip_format))
  for k, t in sd.items():
    assert back[k].shape == tuple(t.shape), k
    np.testing.assert_array_equal(back[k].numpy(), t.numpy(), err_msg=k)
  # the views share one storage in the file (torch stores it once); ours are independent tensors
  with zipfile.ZipFile(tmp_path / "views.pt") if zip_format else open(os.devnull) as z:
    if zip_format: assert sum("/data/" in n for n in z.namelist()) == 3   # base, the expand's source, the half copy
  back["base"].assign(Tensor.zeros(3, 4, 5)).realize()
  np.testing.assert_array_equal(back["sliced"].numpy(), sd["sliced"].numpy())

def test_nested_checkpoint_and_parameters(tmp_path):
  lin = torch.nn.Linear(3, 2)
  ck = {"model": lin.state_dict(), "epoch": 7, "names": ["a", "b"], "params": list(lin.parameters()), "sizes": lin.weight.shape}
  back = torch_load(_save(ck, tmp_path / "ck.pth"))
  assert back["epoch"] == 7 and back["names"] == ["a", "b"] and back["sizes"] == (2, 3)
  assert isinstance(back["model"], collections.OrderedDict) and list(back["model"]) == ["weight", "bias"]
  np.testing.assert_array_equal(back["params"][0].numpy(), lin.weight.detach().numpy())
  ours = nn.Linear(3, 2)
  load_state_dict(ours, back["model"])
  x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
  np.testing.assert_allclose(ours(Tensor(x)).numpy(), lin(torch.tensor(x)).detach().numpy(), rtol=1e-6, atol=1e-6)

class _Evil:
  def __reduce__(self): return (os.system, (f"touch {self.marker}",))

class _EvalEvil:
  def __reduce__(self): return (eval, (f"__import__('pathlib').Path({self.marker!r}).touch()",))

@pytest.mark.parametrize("zip_format", FORMATS)
@pytest.mark.parametrize("evil_cls,name", [(_Evil, os.system.__module__ + ".system"), (_EvalEvil, "builtins.eval")])
def test_malicious_pickle_refused_unrun(tmp_path, zip_format, evil_cls, name):
  evil = evil_cls()
  evil.marker = str(tmp_path / "pwned")
  fn = _save({"w": torch.ones(2), "payload": evil}, tmp_path / "evil.pt", zip_format)
  assert not os.path.exists(evil.marker)
  with pytest.raises(pickle.UnpicklingError, match=f"evil.pt: the pickle calls for the global {name}, which is not part of a state dict"):
    torch_load(fn)
  assert not os.path.exists(evil.marker), "the pickle's payload ran"

def test_whole_module_refused(tmp_path):
  fn = _save(torch.nn.Linear(2, 2), tmp_path / "module.pt")
  with pytest.raises(pickle.UnpicklingError, match=r"global torch\.nn\.modules\.linear\.Linear"): torch_load(fn)

class _Storage: pass
class _Record:
  def __init__(self, *args): self.args = args
  def __reduce__(self): return (torch._utils._rebuild_tensor_v2, (_Storage(), *self.args, False, collections.OrderedDict()))
class _Pickler(pickle.Pickler):
  def persistent_id(self, obj): return ("storage", torch.FloatStorage, "0", "cpu", 4) if isinstance(obj, _Storage) else None

def _hand_made(path, *record_args):
  """A zip checkpoint whose pickle calls the allowed rebuild function with arguments of our choosing, over 4 floats."""
  import io
  buf = io.BytesIO()
  _Pickler(buf, protocol=2).dump({"w": _Record(*record_args)})
  with zipfile.ZipFile(path, "w") as z:
    z.writestr("ck/data.pkl", buf.getvalue())
    z.writestr("ck/data/0", np.arange(4, dtype="<f4").tobytes())
  return path

@pytest.mark.parametrize("args,msg", [((0, (8,), (1,)), r"tensor 'w' \(offset 0, size \(8,\), stride \(1,\)\) reads element 7 of a storage of 4"),
                                      ((3, (2,), (1,)), "reads element 4 of a storage of 4"),
                                      ((0, (2, 2), (1,)), "not integers of equal rank"), ((0, ("x",), (1,)), "not integers"),
                                      ((-1, (2,), (1,)), "negative offset")])
def test_hand_made_tensor_record_checked(tmp_path, args, msg):
  """A pickle may call the allowed rebuild function with anything: records that read outside their storage or carry
  bad sizes are clear errors, not out-of-bounds reads."""
  with pytest.raises((ValueError, pickle.UnpicklingError), match=msg): torch_load(_hand_made(tmp_path / "bad.pt", *args))
  np.testing.assert_array_equal(torch_load(_hand_made(tmp_path / "ok.pt", 1, (2, 2), (1, 1)))["w"].numpy(), [[1, 2], [2, 3]])

def test_not_a_checkpoint(tmp_path):
  (tmp_path / "junk.bin").write_bytes(b"hello world, not a pickle")
  with pytest.raises(ValueError, match="junk.bin: neither a zip checkpoint nor the legacy torch format"): torch_load(tmp_path / "junk.bin")
  with zipfile.ZipFile(tmp_path / "z.pt", "w") as z: z.writestr("readme.txt", "hi")
  with pytest.raises(ValueError, match="not a torch checkpoint"): torch_load(tmp_path / "z.pt")

def _peak_traced(fn) -> int:
  tracemalloc.start()
  try:
    fn()
    return tracemalloc.get_traced_memory()[1]
  finally: tracemalloc.stop()

def test_files_are_mapped_not_read(tmp_path):
  """A 32 MB checkpoint loads with well under 32 MB of Python/numpy heap at its peak: the file is memory-mapped and
  each tensor copied from the mapping into its device buffer (device memory is not on the traced heap)."""
  big = torch.randn(8, 1024, 1024)
  st, pt = tmp_path / "big.safetensors", _save({"big": big}, tmp_path / "big.pt")
  safe_save({"big": Tensor(big.numpy())}, st)
  for load in (lambda: safe_load(st), lambda: torch_load(pt)):
    peak = _peak_traced(load)
    assert peak < 4 << 20, f"loading traced {peak >> 20} MB of heap for a 32 MB file"
  np.testing.assert_array_equal(safe_load(st)["big"].numpy(), big.numpy())
  np.testing.assert_array_equal(torch_load(pt)["big"].numpy(), big.numpy())

def test_load_state_dict_reports_everything_and_changes_nothing():
  class Net:
    def __init__(self): self.a, self.b, self.c = nn.Linear(2, 3), nn.Linear(3, 3), nn.LayerNorm(3)
  net = Net()
  before = {k: v.numpy().copy() for k, v in get_state_dict(net).items()}
  sd = {k: Tensor.ones(*v.shape) for k, v in get_state_dict(net).items()}
  del sd["a.bias"], sd["c.weight"]
  sd["a.weight"], sd["b.bias"], sd["extra.w"] = Tensor.ones(3, 3), Tensor.ones(4), Tensor.ones(1)
  with pytest.raises(RuntimeError) as e: load_state_dict(net, sd)
  msg = str(e.value)
  assert msg.startswith("load_state_dict: 5 problems: ")
  for part in ("missing keys ['a.bias', 'c.weight']", "unexpected keys ['extra.w']", "a.weight: checkpoint (3, 3) vs model (3, 2)",
               "b.bias: checkpoint (4,) vs model (3,)"):
    assert part in msg, (part, msg)
  for k, v in get_state_dict(net).items(): np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)
  # not strict: missing/unexpected are returned, but a shape mismatch is still an error
  with pytest.raises(RuntimeError, match=r"load_state_dict: 2 problems: shape mismatch for a.weight.*; b.bias"): load_state_dict(net, sd, strict=False)
  for k, v in get_state_dict(net).items(): np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)
  # a value that can't become a tensor fails before any write
  good = {k: Tensor.ones(*v.shape) for k, v in get_state_dict(net).items()}
  good["c.bias"] = np.array([object(), object(), object()])
  with pytest.raises(TypeError, match="unsupported numpy dtype object"): load_state_dict(net, good)
  for k, v in get_state_dict(net).items(): np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)

def test_loaded_view_becomes_a_dense_parameter():
  """A checkpoint value that is a view (Hugging Face's Conv1D weights are loaded transposed) becomes a dense buffer of
  its own in a fresh (unrealized) model, not a strided view that every later kernel would read through."""
  lin = nn.Linear(3, 2)
  w = Tensor(np.arange(6, dtype=np.float32).reshape(3, 2)).realize()
  load_state_dict(lin, {"weight": w.T, "bias": Tensor([1.0, 2.0])})
  assert lin.weight.lazydata.realized and not lin.weight.lazydata.is_view
  np.testing.assert_array_equal(lin.weight.numpy(), [[0, 2, 4], [1, 3, 5]])
