"""Model state: walk a model for its tensors, load a state dict into it, and read/write safetensors files.

safetensors layout: an 8-byte little-endian header length N, N bytes of JSON
({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}), then the raw
little-endian data; offsets are relative to the end of the header.

>>> import tempfile, os
>>> from frontend import Tensor
>>> fn = os.path.join(tempfile.mkdtemp(), "m.safetensors")
>>> safe_save({"w": Tensor([[1.0, 2.0]])}, fn)
>>> safe_load(fn)["w"].tolist()
[[1.0, 2.0]]
"""
from __future__ import annotations
import itertools, json, os, struct
from collections import OrderedDict
from typing import Any
import numpy as np
from compiler.dtypes import DType, dtypes, to_np
from frontend.tensor import Tensor

# ***** walking models *****
def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
  """Every tensor reachable from obj through attributes, lists/tuples and dicts, keyed by dotted path.

  >>> from frontend import nn
  >>> list(get_state_dict([nn.LayerNorm(2)]))
  ['0.weight', '0.bias']
  """
  out: dict[str, Tensor] = {}
  def walk(o, p: str, seen: set):
    if isinstance(o, tensor_type):
      out[p.rstrip(".")] = o
      return
    if id(o) in seen: return
    if isinstance(o, (dict, OrderedDict)): items = [(str(k), v) for k, v in o.items()]
    elif hasattr(o, "_asdict"): items = list(o._asdict().items())
    elif isinstance(o, (list, tuple)): items = [(str(i), v) for i, v in enumerate(o)]
    elif hasattr(o, "__dict__") and not isinstance(o, type): items = list(vars(o).items())
    else: return
    seen = seen | {id(o)}
    for k, v in items: walk(v, f"{p}{k}.", seen)
  walk(obj, prefix, set())
  return out

def get_parameters(obj: Any) -> list[Tensor]:
  """The distinct tensors of obj (shared tensors once), in state-dict order.

  >>> from frontend import nn
  >>> len(get_parameters(nn.Linear(2, 3)))
  2
  """
  seen: dict[int, Tensor] = {}
  for t in get_state_dict(obj).values(): seen.setdefault(id(t), t)
  return list(seen.values())

def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = False,
                    consume: bool = False, realize: bool = True) -> tuple[list[str], list[str]]:
  """Copy state_dict's tensors into model's (cast to their dtype, moved to their device), in one realize.

  Everything is checked before anything is written: one RuntimeError lists all missing and unexpected keys (when
  strict) and every shape mismatch, and leaves the model untouched. Returns (missing_keys, unexpected_keys).

  >>> from frontend import Tensor, nn
  >>> a, b = nn.Linear(2, 2), nn.Linear(2, 2)
  >>> _ = load_state_dict(b, get_state_dict(a))
  >>> (a.weight == b.weight).all().item()
  True
  >>> load_state_dict(b, {"weight": Tensor.zeros(3, 2), "extra": Tensor([1])})
  Traceback (most recent call last):
  RuntimeError: load_state_dict: 3 problems: missing keys ['bias']; unexpected keys ['extra']; shape mismatch for weight: checkpoint (3, 2) vs model (2, 2)
  """
  model_sd = get_state_dict(model)
  missing = [k for k in model_sd if k not in state_dict]
  unexpected = [k for k in state_dict if k not in model_sd]
  shape = lambda v: tuple(v.shape) if isinstance(v, Tensor) else np.shape(v)
  bad = [f"{k}: checkpoint {shape(state_dict[k])} vs model {t.shape}" for k, t in model_sd.items() if k in state_dict and shape(state_dict[k]) != t.shape]
  problems = ([f"missing keys {missing}"] if strict and missing else []) + ([f"unexpected keys {unexpected}"] if strict and unexpected else []) + \
             (["shape mismatch for " + "; ".join(bad)] if bad else [])
  if problems:
    n = (len(missing) + len(unexpected)) * strict + len(bad)
    raise RuntimeError(f"load_state_dict: {n} problem{'s' * (n != 1)}: " + "; ".join(problems))
  # every value converted before the first write: a value that can't become a tensor fails with the model unchanged
  first = lambda d: d[0] if isinstance(d, tuple) else d   # (a sharded parameter's value is split after conversion)
  values = {k: (v if isinstance(v, Tensor) else Tensor(np.asarray(v), device=first(model_sd[k].device))) for k, v in state_dict.items() if k in model_sd}
  loaded = []
  for k, t in model_sd.items():
    if k not in values: continue
    v = values[k]
    # (a sharded parameter gets the value split the same way; tinygrad's load_state_dict does the same)
    v = (v.shard(t.device, t.lazydata.axis) if isinstance(t.device, tuple) and not isinstance(v.device, tuple) else v.to(t.device)).cast(t.dtype)
    if verbose: print(f"load_state_dict: {k} {t.shape} {t.dtype}")
    # into the existing storage when there is one (anything that holds the tensor, a JIT or an optimizer, keeps
    # seeing it); an unrealized tensor takes the new value as a dense buffer of its own: a view (a transposed checkpoint
    # weight) kept as the parameter would make every kernel that reads it read it strided, step after step
    if t.lazydata.realized and not t.lazydata.is_view: t.assign(v.contiguous() if v.lazydata is t.lazydata else v)
    else: t.replace(v.contiguous())
    loaded.append(t)
    if consume: del state_dict[k]
  if realize and loaded: Tensor.realize(*loaded)
  return missing, unexpected

# ***** safetensors *****
_ST_DTYPES: dict[str, DType] = {"BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "U16": dtypes.uint16, "I16": dtypes.int16,
                                "U32": dtypes.uint32, "I32": dtypes.int32, "U64": dtypes.uint64, "I64": dtypes.int64,
                                "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64}
_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}

def _np_bits(dt: DType):
  """The numpy dtype holding dt's raw little-endian bits (bf16 as uint16: numpy has no bf16)."""
  return np.dtype("<u2") if dt is dtypes.bfloat16 else np.dtype(to_np(dt)).newbyteorder("<")

def _tensor_bytes(t: Tensor) -> bytes:
  from frontend.engine import to_host
  if t.numel() == 0: return b""
  if isinstance(t.device, tuple): t = t.to(t.device[0])   # a sharded tensor: its shards gathered on one device
  c = t.contiguous() if t.lazydata.is_view or not t.lazydata.realized else t
  c.realize()
  return to_host(c.lazydata, _np_bits(t.dtype)).tobytes()

def safe_save(tensors: dict[str, Tensor], fn: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
  """Write tensors (and optional string metadata) to a safetensors file, bit-exactly.

  >>> import tempfile, os
  >>> from frontend import Tensor
  >>> fn = os.path.join(tempfile.mkdtemp(), "x.safetensors")
  >>> safe_save({"a": Tensor([1, 2])}, fn, metadata={"format": "pt"})
  >>> safe_load_metadata(fn)[2]["__metadata__"]
  {'format': 'pt'}
  """
  header: dict[str, Any] = {}
  if metadata is not None:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()): raise TypeError("safe_save: metadata must map str to str")
    header["__metadata__"] = dict(metadata)
  blobs, off = [], 0
  for k, t in tensors.items():
    if not isinstance(t, Tensor): raise TypeError(f"safe_save: {k!r} is a {type(t).__name__}, not a Tensor")
    if t.dtype not in _ST_NAMES: raise ValueError(f"safe_save: {k!r} has dtype {t.dtype}, which safetensors can't store")
    raw = _tensor_bytes(t)
    header[k] = {"dtype": _ST_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
    blobs.append(raw)
    off += len(raw)
  hj = json.dumps(header, separators=(",", ":")).encode()
  hj += b" " * (-len(hj) % 8)  # the data starts 8-byte aligned, as other writers do
  with open(fn, "wb") as f:
    f.write(struct.pack("<Q", len(hj)) + hj)
    for b in blobs: f.write(b)

def _name(fn) -> str: return "<bytes>" if isinstance(fn, (bytes, bytearray, memoryview)) else str(fn)

def _read(fn) -> tuple[np.ndarray, int, dict]:
  """(the file's bytes, header length, header): a path is memory-mapped, never read whole into memory."""
  where = f"safetensors {_name(fn)}"
  if isinstance(fn, (bytes, bytearray, memoryview)): data = np.frombuffer(fn, np.uint8)
  else: data = np.memmap(fn, np.uint8, "r") if os.path.getsize(fn) else np.empty(0, np.uint8)   # (mmap refuses empty files)
  if len(data) < 8: raise ValueError(f"{where}: {len(data)} bytes is too short for a header")
  n = struct.unpack("<Q", data[:8].tobytes())[0]
  if 8 + n > len(data): raise ValueError(f"{where}: header length {n} runs past the end of the {len(data)}-byte file")
  try: header = json.loads(data[8:8 + n].tobytes())
  except (json.JSONDecodeError, UnicodeDecodeError) as e: raise ValueError(f"{where}: bad JSON header: {e}") from None
  if not isinstance(header, dict): raise ValueError(f"{where}: the header is a JSON {type(header).__name__}, not an object")
  return data, n, header

def _entry(where: str, k: str, info: Any, body_len: int) -> tuple[DType, tuple[int, ...], int, int]:
  """(dtype, shape, begin, end) of one header entry, each field checked: a bad one is named with the file and tensor."""
  def bad(field: str, why: str): return ValueError(f"{where}: tensor {k!r}: {field} {why}")
  if not isinstance(info, dict): raise ValueError(f"{where}: tensor {k!r}: the entry is a JSON {type(info).__name__}, not an object")
  for field in ("dtype", "shape", "data_offsets"):
    if field not in info: raise bad(field, f"is missing (the entry has {sorted(info)})")
  if info["dtype"] not in _ST_DTYPES: raise bad("dtype", f"{info['dtype']!r} is unknown (known: {', '.join(_ST_DTYPES)})")
  dt, shape, offs = _ST_DTYPES[info["dtype"]], info["shape"], info["data_offsets"]
  if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
    raise bad("shape", f"{shape!r} is not a list of non-negative integers")
  if not isinstance(offs, list) or len(offs) != 2 or not all(type(o) is int for o in offs):
    raise bad("data_offsets", f"{offs!r} is not a list of two integers [begin, end]")
  b, e = offs
  size = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
  if not 0 <= b <= e <= body_len:
    raise bad("data_offsets", f"[{b}, {e}] are outside the {body_len} bytes of data after the header (a short or truncated file?)")
  if e - b != size: raise bad("data_offsets", f"[{b}, {e}] hold {e - b} bytes, but {info['dtype']} {shape} needs {size}")
  return dt, tuple(shape), b, e

def safe_load_metadata(fn: str | os.PathLike | bytes) -> tuple[Tensor, int, dict]:
  """(the file as a uint8 Tensor, header length, the parsed JSON header including '__metadata__')."""
  data, n, header = _read(fn)
  return Tensor(np.asarray(data)), n, header

def safe_load(fn: str | os.PathLike | bytes, device: str | None = None) -> dict[str, Tensor]:
  """The tensors of a safetensors file (a path or its bytes), with the exact stored bits. A path is memory-mapped:
  each tensor goes from the mapped file straight into its device buffer, so a multi-GB file is never copied into RAM.

  >>> import tempfile, os
  >>> from frontend import Tensor
  >>> fn = os.path.join(tempfile.mkdtemp(), "y.safetensors")
  >>> safe_save({"b": Tensor([True, False])}, fn)
  >>> safe_load(fn)["b"].tolist()
  [True, False]
  """
  from frontend.engine import from_host
  from hcqrt.device import Device
  data, n, header = _read(fn)
  body, dev, out, where = data[8 + n:], Device.canonicalize(device), {}, f"safetensors {_name(fn)}"
  entries = {k: _entry(where, k, info, len(body)) for k, info in header.items() if k != "__metadata__"}
  # two tensors sharing bytes would alias in the file but not once loaded: a damaged or hand-made header
  spans = sorted((b, e, k) for k, (_, _, b, e) in entries.items() if e > b)
  for (b0, e0, k0), (b1, e1, k1) in itertools.pairwise(spans):
    if b1 < e0: raise ValueError(f"{where}: tensors {k0!r} [{b0}, {e0}] and {k1!r} [{b1}, {e1}] overlap in data_offsets")
  for k, (dt, shape, b, e) in entries.items():
    if b == e: out[k] = Tensor.empty(*shape, dtype=dt, device=dev)
    else:   # straight from the mapped file into the device buffer with the target dtype: no kernel, no host copy
      arr = body[b:e].view(_np_bits(dt)).reshape(shape)
      out[k] = Tensor(from_host(arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("=")), dt, dev))
  return out

# ***** PyTorch checkpoints *****
def torch_load(fn: str | os.PathLike, device: str | None = None) -> Any:
  """The object of a torch.save file (.pt/.pth/.bin; zip or legacy format) with its tensors as ours: usually a dict of
  name -> Tensor. torch is not imported and the pickle runs no code: only state-dict records are accepted (anything
  else raises pickle.UnpicklingError naming the global, see torch_pickle). Storages are memory-mapped; each tensor,
  strided views included, is copied from the mapped file straight to `device`.

  >>> import tempfile, os, torch
  >>> fn = os.path.join(tempfile.mkdtemp(), "m.pt")
  >>> torch.save({"w": torch.arange(6.0).reshape(2, 3).t()}, fn)
  >>> torch_load(fn)["w"].tolist()
  [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
  """
  from frontend.engine import from_host
  from frontend.nn.torch_pickle import TensorRecord, read_checkpoint, record_array
  from hcqrt.device import Device
  obj, data = read_checkpoint(str(fn))
  dev = Device.canonicalize(device)
  def build(o: Any, name: str) -> Any:
    if isinstance(o, TensorRecord):
      arr = record_array(o, data, name, str(fn))
      if arr.size == 0: return Tensor.empty(*arr.shape, dtype=o.dtype, device=dev)
      return Tensor(from_host(arr if arr.flags.c_contiguous else arr.copy(), o.dtype, dev))   # (a host copy only for a strided view)
    if isinstance(o, dict): return type(o)((k, build(v, f"{name}.{k}" if name else str(k))) for k, v in o.items())
    if isinstance(o, (list, tuple)): return type(o)(build(v, f"{name}.{i}") for i, v in enumerate(o))
    return o
  return build(obj, "")

__all__ = ["get_parameters", "get_state_dict", "load_state_dict", "safe_load", "safe_load_metadata", "safe_save", "torch_load"]
