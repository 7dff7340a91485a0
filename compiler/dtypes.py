"""Scalar and vector data types shared by the compiler, the runtime and the frontend.

>>> from compiler.dtypes import dtypes
>>> dtypes.float32.itemsize, dtypes.float32.vec(8).count
(4, 8)
"""
from __future__ import annotations
from dataclasses import dataclass
import functools, math, struct
from compiler.memo import memo_put

@dataclass(frozen=True, eq=True)
class DType:
  """A scalar type (count == 1) or a vector of `count` scalars; `fmt` is the struct/numpy format char."""
  priority: int    # promotion order: higher wins among types of the same kind
  itemsize: int    # bytes of the whole (vector) type
  name: str
  fmt: str | None  # python struct / numpy char, None for vectors
  count: int = 1
  _scalar: DType | None = None

  def __post_init__(self):   # the hash, once: every UOp built is looked up by a key holding its dtype
    object.__setattr__(self, "_hash", hash((self.name, self.count, self.itemsize)))
  def __hash__(self) -> int: return self._hash
  # (the dataclass's field comparison after an identity check: the dtypes are nearly always the canonical objects, and
  # every op compares its operands' dtypes)
  def __eq__(self, other) -> bool:
    return self is other or (other.__class__ is DType and (self.priority, self.itemsize, self.name, self.fmt, self.count, self._scalar) ==
                             (other.priority, other.itemsize, other.name, other.fmt, other.count, other._scalar))
  @property
  def scalar(self) -> DType: return self._scalar if self._scalar is not None else self
  def vec(self, n: int) -> DType:
    assert self.count == 1, f"can't vectorize {self}"
    return self if n == 1 else _vec(self, n)
  @property
  def bitsize(self) -> int: return 8 * self.itemsize
  def __repr__(self) -> str: return f"dtypes.{self.name}"
  def __reduce__(self):   # unpickle to the canonical object, so `dt is dtypes.float32` holds in other processes
    return (_dtype_by_name, (self.scalar.name, self.count))
  # by name (unique per scalar type): `in` over a tuple of DTypes calls the dataclass __eq__ on every miss, and the
  # compiler's simplifier asks these tens of thousands of times per kernel
  # (cached: a dtype is frozen, and after the first read each is a plain attribute of the instance, no Python call;
  # not pickled, as __reduce__ gives the canonical object)
  @functools.cached_property
  def is_float(self) -> bool: return self.scalar.name in _FLOAT_NAMES
  @functools.cached_property
  def is_int(self) -> bool: return self.scalar.name in _INT_NAMES
  @functools.cached_property
  def is_unsigned(self) -> bool: return self.scalar.name in _UINT_NAMES
  @functools.cached_property
  def is_bool(self) -> bool: return self.scalar is dtypes.bool
  @property
  def min(self): return dtypes.min(self)
  @property
  def max(self): return dtypes.max(self)

@functools.lru_cache(None)
def _vec(dt: DType, n: int) -> DType:   # one object per vector type: the renderers ask for them per instruction
  return DType(dt.priority, dt.itemsize * n, f"{dt.name}{n}", None, n, dt)

class dtypes:
  """The dtype namespace: `dtypes.float32`, `dtypes.default_float`, `dtypes.min(dt)`..."""
  bool = DType(0, 1, "bool", "?")
  int8 = DType(1, 1, "char", "b")
  uint8 = DType(2, 1, "uchar", "B")
  int16 = DType(3, 2, "short", "h")
  uint16 = DType(4, 2, "ushort", "H")
  int32 = DType(5, 4, "int", "i")
  uint32 = DType(6, 4, "uint", "I")
  int64 = DType(7, 8, "long", "q")
  uint64 = DType(8, 8, "ulong", "Q")
  float16 = DType(9, 2, "half", "e")
  bfloat16 = DType(10, 2, "bfloat16", None)
  float32 = DType(11, 4, "float", "f")
  float64 = DType(12, 8, "double", "d")
  # OCP 8-bit floats (E4M3FN: no inf, NaN is S.1111.111; E5M2: IEEE-like). Storage and conversion only: a kernel
  # loads, stores and casts them (compiler/fp8.py: conversion instructions where the target has them, else integer
  # arithmetic on the bits); arithmetic on them is done in a wider float.
  # Priorities below float16's, above every int's, so promotion with any other float picks the other float.
  fp8e4m3 = DType(8, 1, "fp8e4m3", None)
  fp8e5m2 = DType(8, 1, "fp8e5m2", None)
  half, float, double = float16, float32, float64
  char, uchar, short, ushort, int, uint, long, ulong = int8, uint8, int16, uint16, int32, uint32, int64, uint64
  default_float: DType = float32
  default_int: DType = int32
  fp8s = (fp8e4m3, fp8e5m2)
  floats = fp8s + (float16, bfloat16, float32, float64)
  uints = (uint8, uint16, uint32, uint64)
  sints = (int8, int16, int32, int64)
  ints = uints + sints

  @staticmethod
  def fields() -> dict[str, DType]:
    """Every scalar dtype by each of its names (aliases included), as tinygrad's `dtypes.fields()`.

    >>> dtypes.fields()["uchar"] is dtypes.uint8, "default_float" in dtypes.fields()
    (True, False)
    """
    return {k: v for k, v in vars(dtypes).items() if isinstance(v, DType) and not k.startswith(("default", "_"))}
  @staticmethod
  def is_float(dt: DType) -> bool: return dt.is_float
  @staticmethod
  def is_int(dt: DType) -> bool: return dt.is_int
  @staticmethod
  def is_unsigned(dt: DType) -> bool: return dt.is_unsigned
  @staticmethod
  def min(dt: DType):
    if dt.is_int: return 0 if dt.is_unsigned else -2**(8*dt.itemsize-1)
    return False if dt is dtypes.bool else -math.inf
  @staticmethod
  def max(dt: DType):
    if dt.is_int: return 2**(8*dt.itemsize)-1 if dt.is_unsigned else 2**(8*dt.itemsize-1)-1
    return True if dt is dtypes.bool else math.inf
  @staticmethod
  def from_py(x) -> DType:
    """The dtype a Python value (or nested list of them) gets when turned into a tensor."""
    if isinstance(x, (list, tuple)): return max((dtypes.from_py(v) for v in x), key=lambda d: d.priority, default=dtypes.default_float)
    if isinstance(x, bool): return dtypes.bool
    if isinstance(x, int): return dtypes.default_int
    return dtypes.default_float
  @staticmethod
  def from_np(npdtype) -> DType:
    import numpy as np
    try: return _NP_TO_DT[np.dtype(npdtype)]
    except KeyError: raise TypeError(f"no dtype for numpy {np.dtype(npdtype)}") from None
  @staticmethod
  def as_const(x, dt: DType):
    """A Python value cast to what `dt` holds (wrapping ints, truncating floats to int)."""
    if dt.is_bool: return bool(x)
    if dt.is_int:
      if isinstance(x, float) and not math.isfinite(x): return 0
      v, bits = int(x), 8 * dt.scalar.itemsize
      v &= (1 << bits) - 1
      return v - (1 << bits) if not dt.is_unsigned and v >= (1 << (bits - 1)) else v
    if dt.scalar in dtypes.fp8s: return fp8_to_float(float_to_fp8(float(x), dt.scalar), dt.scalar)   # (the value the byte holds)
    return float(x)
  @staticmethod
  def rounded(x: float, dt: DType) -> float:
    """`x` rounded (to nearest even) to the precision and range of float dtype `dt`: the value a register of `dt`
    holds. Float constants are kept as Python floats (doubles) and only rounded when rendered, so a constant fold or a
    cast of a constant must round its operands first: float32(0.1) widened to float64 is 0.10000000149011612, not 0.1.

    >>> dtypes.rounded(0.1, dtypes.float32), dtypes.rounded(2049.0, dtypes.float16), dtypes.rounded(1e40, dtypes.float32)
    (0.10000000149011612, 2048.0, inf)
    """
    s, x = dt.scalar, float(x)
    if s is dtypes.float64 or not math.isfinite(x): return x
    if s in dtypes.fp8s: return fp8_to_float(float_to_fp8(x, s), s)
    if s is dtypes.bfloat16:   # as the renderers narrow: float32 first, then round-to-nearest-even on its bits
      b = struct.unpack("<I", struct.pack("<f", dtypes.rounded(x, dtypes.float32)))[0]
      return struct.unpack("<f", struct.pack("<I", (((b + 0x7fff + ((b >> 16) & 1)) >> 16) << 16) & 0xffffffff))[0]
    # struct rounds to nearest even and raises only when the rounded value overflows (CPython's PyFloat_Pack2/4)
    try: return struct.unpack(fmt := "<f" if s is dtypes.float32 else "<e", struct.pack(fmt, x))[0]
    except OverflowError: return math.copysign(math.inf, x)

ALL_DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
              dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64, dtypes.fp8e4m3, dtypes.fp8e5m2]
DTYPES_BY_NAME = {d.name: d for d in ALL_DTYPES} | {"float32": dtypes.float32, "float16": dtypes.float16,
  "float64": dtypes.float64, "int32": dtypes.int32, "int64": dtypes.int64, "uint8": dtypes.uint8, "int8": dtypes.int8,
  "int16": dtypes.int16, "uint16": dtypes.uint16, "uint32": dtypes.uint32, "uint64": dtypes.uint64, "bfloat16": dtypes.bfloat16}

_FLOAT_NAMES, _INT_NAMES, _UINT_NAMES = (frozenset(d.name for d in ds) for ds in (dtypes.floats, dtypes.ints, dtypes.uints))

def _dtype_by_name(name: str, count: int) -> DType:
  dt = next(d for d in ALL_DTYPES + [dtypes.bfloat16] if d.name == name)
  return dt.vec(count) if count > 1 else dt

def _np_map():
  import numpy as np
  # keyed by np.dtype, which compares equal across aliases ('q' is int64 even where its scalar type is longlong)
  return {np.dtype(k): v for k, v in {np.bool_: dtypes.bool, np.int8: dtypes.int8, np.uint8: dtypes.uint8, np.int16: dtypes.int16,
          np.uint16: dtypes.uint16, np.int32: dtypes.int32, np.uint32: dtypes.uint32, np.int64: dtypes.int64,
          np.uint64: dtypes.uint64, np.float16: dtypes.float16, np.float32: dtypes.float32, np.float64: dtypes.float64}.items()}
_NP_TO_DT = _np_map()

def to_np(dt: DType):
  """The numpy dtype with the same bytes as `dt`."""
  import numpy as np
  if dt.scalar is dtypes.bfloat16: raise TypeError("bfloat16 has no numpy dtype")
  if dt.scalar in dtypes.fp8s: return np.dtype(np.uint8)   # the bytes (numpy has no fp8)
  return np.dtype(dt.scalar.fmt)

# Promotion as in tinygrad/torch: bool < ints < floats; within a kind the wider (higher priority) wins, and
# mixing signed and unsigned of the same width goes to the next wider signed type.
def least_upper_dtype(*ds: DType) -> DType:
  """The dtype both (all) of `ds` promote to.

  >>> least_upper_dtype(dtypes.int8, dtypes.uint8), least_upper_dtype(dtypes.int32, dtypes.float16)
  (dtypes.short, dtypes.half)
  """
  # (a pure function of a few dtypes, asked for every sum and every mixed-dtype op: memoized, bounded like compiler/memo.py's tables)
  if (r := _lub_cache.get(ds)) is None: r = memo_put(_lub_cache, ds, _least_upper_dtype(ds))
  return r
_lub_cache: dict[tuple, DType] = {}

def _least_upper_dtype(ds: tuple[DType, ...]) -> DType:
  ds = tuple(d.scalar for d in ds)
  floats = [d for d in ds if d.is_float]
  if len(set(floats) - set(dtypes.fp8s)) == 0 and len(set(floats)) == 2: return dtypes.float16   # e4m3 with e5m2
  if floats: return max(floats, key=lambda d: d.priority)
  ints = [d for d in ds if d.is_int]
  if not ints: return dtypes.bool
  s, u = [d for d in ints if not d.is_unsigned], [d for d in ints if d.is_unsigned]
  if not s: return max(u, key=lambda d: d.priority)
  if not u: return max(s, key=lambda d: d.priority)
  smax, umax = max(s, key=lambda d: d.itemsize), max(u, key=lambda d: d.itemsize)
  if smax.itemsize > umax.itemsize: return smax
  return {1: dtypes.int16, 2: dtypes.int32, 4: dtypes.int64}.get(umax.itemsize, dtypes.float32)

def sum_acc_dtype(dt: DType) -> DType:
  """The accumulator dtype a sum over `dt` uses (small ints and bool widen, as in torch)."""
  if dt.is_unsigned: return least_upper_dtype(dt, dtypes.uint32)
  if dt.is_int or dt.is_bool: return least_upper_dtype(dt, dtypes.int32)
  return least_upper_dtype(dt, dtypes.float32)

# OCP FP8 formats: (exponent bits, mantissa bits, bias). E4M3FN spends its top exponent on normal numbers (max 448) and
# has only NaN (S.1111.111); E5M2 has inf and NaNs like IEEE half (max 57344). Source: OCP "8-bit Floating Point
# Specification (OFP8)" rev 1.0, section 5.
FP8_FORMAT = {"fp8e4m3": (4, 3, 7), "fp8e5m2": (5, 2, 15)}

def fp8_to_float(x: int, dtype: DType) -> float:
  """The value of fp8 byte `x` of `dtype` (fp8e4m3 or fp8e5m2).

  >>> fp8_to_float(0x38, dtypes.fp8e4m3), fp8_to_float(0x7e, dtypes.fp8e4m3), fp8_to_float(0x7c, dtypes.fp8e5m2)
  (1.0, 448.0, inf)
  """
  e, m, bias = FP8_FORMAT[dtype.name]
  sign, exp, man = -1.0 if x & 0x80 else 1.0, (x >> m) & ((1 << e) - 1), x & ((1 << m) - 1)
  if dtype is dtypes.fp8e4m3 and exp == 15 and man == 7: return math.nan
  if dtype is dtypes.fp8e5m2 and exp == 31: return sign * math.inf if man == 0 else math.nan
  if exp == 0: return sign * man * 2.0 ** (1 - bias - m)
  return sign * (1 + man / (1 << m)) * 2.0 ** (exp - bias)

def float_to_fp8(x: float, dtype: DType) -> int:
  """The fp8 byte of `dtype` nearest to `x` (ties to even), as torch rounds (c10/util/Float8_e4m3fn.h, Float8_e5m2.h):
  e4m3 has no inf, so finite values past 448 and +-inf saturate to +-448; e5m2 overflows to +-inf (from 61440, the
  halfway point past its largest finite 57344); NaN is sign|0x7f in both. (compiler/fp8.py does the same in kernels.)

  >>> float_to_fp8(1.0, dtypes.fp8e4m3), float_to_fp8(1000.0, dtypes.fp8e4m3), float_to_fp8(-math.inf, dtypes.fp8e5m2)
  (56, 126, 252)
  >>> float_to_fp8(math.inf, dtypes.fp8e4m3), float_to_fp8(61440.0, dtypes.fp8e5m2), float_to_fp8(-math.nan, dtypes.fp8e5m2)
  (126, 124, 255)
  """
  _, m, bias = FP8_FORMAT[dtype.name]
  sign = 0x80 if math.copysign(1.0, x) < 0 else 0
  if math.isnan(x): return sign | 0x7f
  sat = 0x7e if dtype is dtypes.fp8e4m3 else 0x7c   # where a large value ends: 448, or inf
  a = abs(x)
  if math.isinf(a): return sign | sat
  # the exponent of a's binade (subnormals share the smallest normal exponent), then a in units of the last place
  exp = max(math.frexp(a)[1] - 1, 1 - bias) if a > 0 else 1 - bias
  q = round(a / 2.0 ** (exp - m))   # Python's round: ties to even
  bits = q if exp == 1 - bias and q < (1 << m) else ((exp + bias) << m) + (q - (1 << m))
  return sign | min(bits, sat)

DTYPES_DICT = dtypes.fields()
