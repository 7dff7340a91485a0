"""safetensors written and read by frontend.nn.state: bit-exact round trips for every dtype, the on-disk layout,
files from another writer, and clear errors for broken files."""
import json, re, struct
import numpy as np
import pytest
from compiler.dtypes import dtypes
from frontend import Tensor, nn
from frontend.engine import from_host
from frontend.nn.state import safe_save, safe_load, safe_load_metadata, get_state_dict, load_state_dict

def _bits(t: Tensor) -> bytes:
  from frontend.nn.state import _tensor_bytes
  return _tensor_bytes(t)

def _sample_tensors():
  rng = np.random.default_rng(0)
  f32 = rng.standard_normal((3, 4)).astype(np.float32)
  f32.view(np.uint32)[0, 0] = 0x7FC12345   # a NaN with a payload must survive
  f16 = np.array([1.5, -0.0, np.inf, 6e-8], np.float16)
  bf16_bits = np.array([0x3F80, 0xBF00, 0x7F80, 0x7FC1, 0x0001], np.uint16)   # 1, -0.5, inf, nan, denormal
  return {
    "f32": Tensor(f32), "f16": Tensor(f16), "f64": Tensor(rng.standard_normal(5)),
    "bf16": Tensor(from_host(bf16_bits, dtypes.bfloat16, "CPU")),
    "i8": Tensor(np.array([-128, 0, 127], np.int8)), "u8": Tensor(np.arange(250, 256, dtype=np.uint8)),
    "i16": Tensor(np.array([-32768, 7], np.int16)), "u16": Tensor(np.array([65535, 1], np.uint16)),
    "i32": Tensor(np.array([[-2**31, 2**31 - 1]], np.int32)), "u32": Tensor(np.array([2**32 - 1], np.uint32)),
    "i64": Tensor(np.array([-2**63, 2**63 - 1, 5], np.int64)), "u64": Tensor(np.array([2**64 - 1], np.uint64)),
    "bool": Tensor(np.array([[True, False], [False, True]])),
    "scalar": Tensor(from_host(np.array(3.25, np.float32), dtypes.float32, "CPU")),
    "empty": Tensor.empty(0, 3),
    "view": Tensor(f32).permute(1, 0)[1:3],   # a non-contiguous view is saved as its logical contents
  }

def test_round_trip_bit_exact(tmp_path):
  ts = _sample_tensors()
  fn = tmp_path / "all.safetensors"
  safe_save(ts, fn)
  back = safe_load(fn)
  assert list(back) == list(ts)
  for k, t in ts.items():
    assert back[k].dtype == t.dtype and back[k].shape == t.shape, k
    assert _bits(back[k]) == _bits(t), k
  # and saving what we loaded gives the identical file
  safe_save(back, tmp_path / "again.safetensors")
  assert (tmp_path / "again.safetensors").read_bytes() == fn.read_bytes()

def test_layout(tmp_path):
  fn = tmp_path / "l.safetensors"
  safe_save({"a": Tensor(np.array([1.0, 2.0], np.float32)), "b": Tensor(np.array([[7]], np.int64))}, fn, metadata={"who": "test"})
  raw = fn.read_bytes()
  n = struct.unpack("<Q", raw[:8])[0]
  assert (8 + n) % 8 == 0
  h = json.loads(raw[8:8 + n])
  assert h == {"__metadata__": {"who": "test"}, "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
               "b": {"dtype": "I64", "shape": [1, 1], "data_offsets": [8, 16]}}
  body = raw[8 + n:]
  assert body == np.array([1.0, 2.0], "<f4").tobytes() + np.array([7], "<i8").tobytes()
  t, hl, header = safe_load_metadata(fn)
  assert hl == n and header["__metadata__"] == {"who": "test"} and t.shape == (len(raw),)

def _foreign_file(entries: dict, metadata=None) -> bytes:
  """A minimal independent writer: tensors stored in reverse order, no header padding."""
  header, body = {}, b""
  for k, (dt, arr) in reversed(list(entries.items())):
    b = np.ascontiguousarray(arr).tobytes()
    header[k] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [len(body), len(body) + len(b)]}
    body += b
  if metadata: header["__metadata__"] = metadata
  hj = json.dumps(header).encode()
  return struct.pack("<Q", len(hj)) + hj + body

def test_reads_other_writers(tmp_path):
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  data = _foreign_file({"x": ("F32", x), "y": ("U16", np.array([9, 8], np.uint16)), "z": ("BF16", np.array([0x4000], np.uint16))}, {"k": "v"})
  (tmp_path / "f.safetensors").write_bytes(data)
  for src in (tmp_path / "f.safetensors", str(tmp_path / "f.safetensors"), data):
    out = safe_load(src)
    assert out["x"].tolist() == x.tolist() and out["y"].tolist() == [9, 8] and out["y"].dtype == dtypes.uint16
    assert out["z"].dtype == dtypes.bfloat16 and _bits(out["z"]) == np.array([0x4000], "<u2").tobytes()

def test_errors(tmp_path):
  with pytest.raises(ValueError, match="tensor 'x': dtype 'F8' is unknown"): safe_load(_foreign_file({"x": ("F8", np.zeros(2, np.uint8))}))
  good = _foreign_file({"x": ("F32", np.zeros(4, np.float32))})
  with pytest.raises(ValueError, match=r"<bytes>: tensor 'x': data_offsets \[0, 16\] are outside the 12 bytes of data"): safe_load(good[:-4])
  with pytest.raises(ValueError, match="header length"): safe_load(good[:20])
  with pytest.raises(ValueError, match="too short"): safe_load(b"\x01\x00")
  with pytest.raises(TypeError, match="metadata"): safe_save({}, tmp_path / "m", metadata={"a": 1})
  with pytest.raises(TypeError, match="not a Tensor"): safe_save({"a": np.zeros(2)}, tmp_path / "m")

def _with_header(header: dict, body: bytes) -> bytes:
  hj = json.dumps(header).encode()
  return struct.pack("<Q", len(hj)) + hj + body

@pytest.mark.parametrize("entry,match", [
  ({"dtype": "F32", "shape": [2]}, r"tensor 'w': data_offsets is missing \(the entry has \['dtype', 'shape'\]\)"),
  ({"shape": [2], "data_offsets": [0, 8]}, r"tensor 'w': dtype is missing"),
  ({"dtype": "F32", "data_offsets": [0, 8]}, r"tensor 'w': shape is missing"),
  ({"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}, r"tensor 'w': shape 2 is not a list of non-negative integers"),
  ({"dtype": "F32", "shape": [2, "a"], "data_offsets": [0, 8]}, r"tensor 'w': shape \[2, 'a'\] is not a list"),
  ({"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}, r"tensor 'w': shape \[-2\] is not a list of non-negative"),
  ({"dtype": "float32", "shape": [2], "data_offsets": [0, 8]}, r"tensor 'w': dtype 'float32' is unknown \(known: BOOL, U8"),
  ({"dtype": "F32", "shape": [2], "data_offsets": 8}, r"tensor 'w': data_offsets 8 is not a list of two integers"),
  ({"dtype": "F32", "shape": [2], "data_offsets": [0, 8.0]}, r"tensor 'w': data_offsets \[0, 8.0\] is not a list of two integers"),
  ({"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}, r"tensor 'w': data_offsets \[4, 12\] are outside the 8 bytes"),
  ({"dtype": "F32", "shape": [2], "data_offsets": [-4, 4]}, r"tensor 'w': data_offsets \[-4, 4\] are outside"),
  ({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}, r"tensor 'w': data_offsets \[0, 8\] hold 8 bytes, but F32 \[3\] needs 12"),
  ("F32", r"tensor 'w': the entry is a JSON str, not an object")])
def test_bad_header_fields_name_the_file_tensor_and_field(tmp_path, entry, match):
  fn = tmp_path / "bad.safetensors"
  fn.write_bytes(_with_header({"w": entry}, np.zeros(2, np.float32).tobytes()))
  with pytest.raises(ValueError, match=f"safetensors {re.escape(str(fn))}: " + match): safe_load(fn)
  with pytest.raises(ValueError, match=r"safetensors <bytes>: " + match): safe_load(fn.read_bytes())

def test_bad_header_shape_and_overlap(tmp_path):
  fn = tmp_path / "bad.safetensors"
  fn.write_bytes(_with_header([1, 2], b""))
  with pytest.raises(ValueError, match=re.escape(str(fn)) + r": the header is a JSON list, not an object"): safe_load(fn)
  both = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "I32", "shape": [2], "data_offsets": [4, 12]}}
  fn.write_bytes(_with_header(both, bytes(12)))
  with pytest.raises(ValueError, match=r"tensors 'a' \[0, 8\] and 'b' \[4, 12\] overlap in data_offsets"): safe_load(fn)
  # empty tensors at any offset share nothing
  ok = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [4, 4]}}
  fn.write_bytes(_with_header(ok, np.ones(2, np.float32).tobytes()))
  out = safe_load(fn)
  assert out["a"].tolist() == [1.0, 1.0] and out["e"].shape == (0, 3)

def test_model_checkpoint_round_trip(tmp_path):
  class M:
    def __init__(self): self.conv, self.bn, self.fc = nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Linear(4, 3)
  a, b = M(), M()
  with Tensor.train(): a.bn(Tensor.rand(2, 2, 3, 3)); a.bn.running_mean.realize(); a.bn.num_batches_tracked.realize()
  safe_save(get_state_dict(a), tmp_path / "m.safetensors")
  load_state_dict(b, safe_load(tmp_path / "m.safetensors"))
  for k, v in get_state_dict(a).items(): assert _bits(get_state_dict(b)[k]) == _bits(v), k
  assert b.bn.num_batches_tracked.item() == 1
