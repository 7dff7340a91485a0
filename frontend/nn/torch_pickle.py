"""Read PyTorch checkpoints (torch.save of a state dict) without importing torch, and without running their pickle.

A .pt/.pth/.bin file is either a zip archive (torch >= 1.6): `<name>/data.pkl` (the pickled object) plus one entry
`<name>/data/<key>` of raw little-endian bytes per storage; or the legacy stream: pickles of a magic number, a
protocol version and system info, the object, the list of storage keys, then per key an int64 element count and the
bytes. In both, a tensor is pickled as a call `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`
(`_v3` adds a dtype, for dtypes without a legacy storage class) and a storage as a persistent id
('storage', <storage class>, key, location, numel). Facts from torch/serialization.py (`_save`, `_legacy_save`) and
torch/storage.py (`_dtype_to_storage_type_map`).

A pickle is a program: any global it names is called. `StateDictUnpickler` resolves only the globals a state dict
needs (the tensor rebuild functions, storage classes, dtypes, OrderedDict) to harmless stand-ins of our own, and
refuses every other global by name before anything runs.

>>> import io, pickle, collections
>>> StateDictUnpickler(io.BytesIO(pickle.dumps(collections.OrderedDict(a=1))), "x").load()
OrderedDict([('a', 1)])
"""
from __future__ import annotations
import _compat_pickle, collections, pickle, struct, zipfile
from dataclasses import dataclass
from typing import IO, Any
import numpy as np
from compiler.dtypes import DType, dtypes

# torch storage class name -> element dtype (torch/storage.py _dtype_to_storage_type_map; UntypedStorage holds bytes)
STORAGE_DTYPES: dict[str, DType] = {
  "DoubleStorage": dtypes.float64, "FloatStorage": dtypes.float32, "HalfStorage": dtypes.float16, "BFloat16Storage": dtypes.bfloat16,
  "LongStorage": dtypes.int64, "IntStorage": dtypes.int32, "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8,
  "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool, "UntypedStorage": dtypes.uint8}
# torch dtype attribute name -> ours (the `dtype` argument of _rebuild_tensor_v3)
TORCH_DTYPES: dict[str, DType] = {
  "float64": dtypes.float64, "double": dtypes.float64, "float32": dtypes.float32, "float": dtypes.float32,
  "float16": dtypes.float16, "half": dtypes.float16, "bfloat16": dtypes.bfloat16, "int64": dtypes.int64, "long": dtypes.int64,
  "int32": dtypes.int32, "int": dtypes.int32, "int16": dtypes.int16, "short": dtypes.int16, "int8": dtypes.int8,
  "uint8": dtypes.uint8, "uint16": dtypes.uint16, "uint32": dtypes.uint32, "uint64": dtypes.uint64, "bool": dtypes.bool}
LEGACY_MAGIC, LEGACY_PROTOCOL = 0x1950a86a20f9469cfc6c, 1001   # torch/serialization.py MAGIC_NUMBER, PROTOCOL_VERSION

@dataclass(frozen=True)
class StorageRef:
  """A storage named by the pickle: its bytes are looked up by key after unpickling."""
  key: str
  dtype: DType
  numel: int

@dataclass(frozen=True)
class TensorRecord:
  """What _rebuild_tensor_v2/v3 would build: `size` elements of `storage` at `offset` with `stride` (in elements)."""
  storage: StorageRef
  offset: int
  size: tuple[int, ...]
  stride: tuple[int, ...]
  dtype: DType

def _rebuild_tensor_v2(storage, offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None) -> TensorRecord:
  return _record(storage, offset, size, stride, None)
def _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, backward_hooks, dtype, metadata=None) -> TensorRecord:
  return _record(storage, offset, size, stride, dtype)
def _rebuild_parameter(data, requires_grad=False, backward_hooks=None, state=None) -> TensorRecord:
  if not isinstance(data, TensorRecord): raise pickle.UnpicklingError(f"a Parameter wraps a {type(data).__name__}, not a tensor")
  return data

def _record(storage, offset, size, stride, dtype) -> TensorRecord:
  # (a hand-made pickle may hand anything here: check the types before they become array strides)
  if not isinstance(storage, StorageRef): raise pickle.UnpicklingError(f"a tensor record's storage is a {type(storage).__name__}, not a storage")
  ints = lambda xs: isinstance(xs, tuple) and all(type(x) is int for x in xs)
  if type(offset) is not int or not ints(size) or not ints(stride) or len(size) != len(stride):
    raise pickle.UnpicklingError(f"a tensor record has offset {offset!r}, size {size!r}, stride {stride!r}: not integers of equal rank")
  if dtype is not None and not isinstance(dtype, DType): raise pickle.UnpicklingError(f"a tensor record's dtype is {dtype!r}")
  return TensorRecord(storage, offset, size, stride, dtype or storage.dtype)

class _StorageClass:
  """Stands in for a torch storage class in a persistent id."""
  def __init__(self, name: str): self.name, self.dtype = name, STORAGE_DTYPES[name]

_FUNCTIONS = {("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2, ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
              ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
              ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
              ("collections", "OrderedDict"): collections.OrderedDict, ("torch", "Size"): tuple}

class StateDictUnpickler(pickle.Unpickler):
  """An unpickler that builds TensorRecords and refuses any global a state dict doesn't hold, naming it."""
  def __init__(self, f: IO[bytes], where: str):
    super().__init__(f)
    self.where, self.storages = where, {}
  def find_class(self, module: str, name: str):
    if (module, name) in _FUNCTIONS: return _FUNCTIONS[(module, name)]
    if module in ("torch", "torch.storage", "torch.cuda") and name in STORAGE_DTYPES: return _StorageClass(name)
    if module == "torch" and name in TORCH_DTYPES: return TORCH_DTYPES[name]
    module = _compat_pickle.IMPORT_MAPPING.get(module, module)   # (as Python 3 names it: protocol 2 says __builtin__)
    raise pickle.UnpicklingError(f"torch_load {self.where}: the pickle calls for the global {module}.{name}, which is not part "
                                 "of a state dict of tensors; refusing to load it (nothing was run)")
  def persistent_load(self, pid: Any) -> StorageRef:
    if not (isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] == "storage" and isinstance(pid[1], _StorageClass)):
      raise pickle.UnpicklingError(f"torch_load {self.where}: unknown persistent id {pid!r:.200} (only tensor storages are read)")
    if len(pid) == 6 and pid[5] is not None: raise pickle.UnpicklingError(f"torch_load {self.where}: storage views (legacy format) are not supported")
    _, cls, key, _location, numel = pid[:5]
    if type(numel) is not int or numel < 0: raise pickle.UnpicklingError(f"torch_load {self.where}: storage {key!r} has {numel!r} elements")
    ref = self.storages.setdefault(str(key), StorageRef(str(key), cls.dtype, numel))
    if ref.dtype != cls.dtype: raise pickle.UnpicklingError(f"torch_load {self.where}: storage {key!r} is read as {ref.dtype} and {cls.dtype}")
    return ref

def _stored_span(path: str, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> int:
  """Where an uncompressed zip entry's bytes start in the file: after its local header (30 bytes + name + extra; the
  extra field is where torch pads for alignment, so the central directory's copy can't be trusted for its length)."""
  with open(path, "rb") as f:
    f.seek(info.header_offset)
    hdr = f.read(30)
  if len(hdr) != 30 or hdr[:4] != b"PK\x03\x04": raise ValueError(f"torch_load {path}: bad local header for {info.filename}")
  name_len, extra_len = struct.unpack("<HH", hdr[26:30])
  return info.header_offset + 30 + name_len + extra_len

def _read_zip(path: str) -> tuple[Any, dict[str, StorageRef], dict[str, np.ndarray]]:
  with zipfile.ZipFile(path) as zf:
    pkls = [n for n in zf.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pkls) != 1: raise ValueError(f"torch_load {path}: a zip file but not a torch checkpoint (no single <name>/data.pkl; entries {zf.namelist()[:8]})")
    prefix = pkls[0][:-len("data.pkl")]
    if prefix + "byteorder" in zf.namelist() and zf.read(prefix + "byteorder") != b"little":
      raise ValueError(f"torch_load {path}: byteorder {zf.read(prefix + 'byteorder')!r} (only little-endian checkpoints are read)")
    up = StateDictUnpickler(zf.open(pkls[0]), path)
    obj = up.load()
    data: dict[str, np.ndarray] = {}
    for key in up.storages:
      try: info = zf.getinfo(f"{prefix}data/{key}")
      except KeyError: raise ValueError(f"torch_load {path}: storage {key!r} has no entry {prefix}data/{key}") from None
      if info.compress_type == zipfile.ZIP_STORED:   # torch writes stored entries: map them, copy nothing
        data[key] = np.memmap(path, np.uint8, "r", offset=_stored_span(path, zf, info), shape=(info.file_size,)) if info.file_size else np.empty(0, np.uint8)
      else: data[key] = np.frombuffer(zf.read(info), np.uint8)
  return obj, up.storages, data

def _read_legacy(path: str) -> tuple[Any, dict[str, StorageRef], dict[str, np.ndarray]]:
  with open(path, "rb") as f:
    def head(what: str):
      try: return StateDictUnpickler(f, path).load()
      except (pickle.UnpicklingError, EOFError) as e:
        raise ValueError(f"torch_load {path}: neither a zip checkpoint nor the legacy torch format ({what}: {e})") from None
    if head("magic number") != LEGACY_MAGIC: raise ValueError(f"torch_load {path}: neither a zip checkpoint nor the legacy torch format")
    if (proto := head("protocol")) != LEGACY_PROTOCOL: raise ValueError(f"torch_load {path}: legacy protocol {proto!r}, expected {LEGACY_PROTOCOL}")
    if not (isinstance(info := head("system info"), dict) and info.get("little_endian")): raise ValueError(f"torch_load {path}: a big-endian checkpoint")
    up = StateDictUnpickler(f, path)
    obj, keys = up.load(), StateDictUnpickler(f, path).load()
    data: dict[str, np.ndarray] = {}
    for key in keys:
      numel = struct.unpack("<q", f.read(8))[0]
      ref = up.storages.get(str(key))
      if ref is None or numel != ref.numel: raise ValueError(f"torch_load {path}: storage {key!r} holds {numel} elements, the pickle says {ref}")
      start, nbytes = f.tell(), numel * ref.dtype.itemsize
      data[str(key)] = np.memmap(path, np.uint8, "r", offset=start, shape=(nbytes,)) if nbytes else np.empty(0, np.uint8)
      f.seek(start + nbytes)
  return obj, up.storages, data

def read_checkpoint(path: str) -> tuple[Any, dict[str, np.ndarray]]:
  """(the unpickled object with TensorRecords for tensors, {storage key: its bytes, memory-mapped where stored}).

  >>> import io, os, tempfile, zipfile, pickle
  >>> fn = os.path.join(tempfile.mkdtemp(), "bad.pt")
  >>> with zipfile.ZipFile(fn, "w") as z: z.writestr("bad/data.pkl", pickle.dumps(print))
  >>> read_checkpoint(fn)
  Traceback (most recent call last):
  _pickle.UnpicklingError: torch_load ...bad.pt: the pickle calls for the global builtins.print, which is not part of a state dict of tensors; refusing to load it (nothing was run)
  """
  obj, refs, data = (_read_zip if zipfile.is_zipfile(path) else _read_legacy)(path)
  for key, ref in refs.items():
    if key not in data: raise ValueError(f"torch_load {path}: storage {key!r} is missing")
    if len(data[key]) != ref.numel * ref.dtype.itemsize:
      raise ValueError(f"torch_load {path}: storage {key!r} has {len(data[key])} bytes, but {ref.numel} x {ref.dtype} need {ref.numel * ref.dtype.itemsize}")
  return obj, data

def np_bits(dt: DType) -> np.dtype:
  """The numpy dtype holding dt's raw little-endian bits (bf16 as uint16: numpy has no bf16)."""
  return np.dtype("<u2") if dt is dtypes.bfloat16 else np.dtype(dt.fmt).newbyteorder("<")

def record_array(rec: TensorRecord, data: dict[str, np.ndarray], name: str, where: str) -> np.ndarray:
  """The record's elements as a (possibly strided) view of its storage's bytes: nothing is copied here."""
  raw, nb = data[rec.storage.key], np_bits(rec.dtype)
  if len(raw) % nb.itemsize: raise ValueError(f"torch_load {where}: tensor {name!r}: storage of {len(raw)} bytes is not a whole number of {rec.dtype}")
  elems = raw.view(nb) if len(raw) else np.empty(0, nb)
  if 0 in rec.size: return np.empty(rec.size, nb)
  if rec.offset < 0 or any(s < 0 for s in rec.stride): raise ValueError(f"torch_load {where}: tensor {name!r}: negative offset or stride {rec}")
  last = rec.offset + sum((n - 1) * s for n, s in zip(rec.size, rec.stride))
  if last >= len(elems):
    raise ValueError(f"torch_load {where}: tensor {name!r} (offset {rec.offset}, size {rec.size}, stride {rec.stride}) reads element {last} "
                     f"of a storage of {len(elems)} {rec.dtype}")
  return np.lib.stride_tricks.as_strided(elems[rec.offset:], rec.size, tuple(s * nb.itemsize for s in rec.stride), writeable=False)
