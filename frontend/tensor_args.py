"""How the Tensor's methods read their arguments: a shape given as varargs or as one sequence (`argfix`, `shape_arg`),
an int or a tuple per dim (`make_tuple`), and a dtype given as a DType, a name or a numpy dtype (`_to_dtype`, which
raises `UnknownDTypeError`). Shared by frontend/tensor.py and its mixins; imports no frontend module.

>>> argfix(2, 3), argfix((2, 3)), make_tuple(3, 2)
((2, 3), (2, 3), (3, 3))
>>> _to_dtype("int32"), _to_dtype(None)
(dtypes.int, None)
"""
from __future__ import annotations
from compiler.dtypes import DType, dtypes, DTYPES_BY_NAME

def argfix(*x):
  """The arguments as one tuple, whether given as varargs or as a single tuple or list.

  >>> argfix(1, 2), argfix([1, 2]), argfix()
  ((1, 2), (1, 2), ())
  """
  if x and x[0].__class__ in (tuple, list):
    if len(x) != 1: raise ValueError(f"bad arg {x}")
    return tuple(x[0])
  return x

def shape_arg(*shape, op: str) -> tuple:
  """argfix(*shape), refusing a negative size by name (torch and tinygrad: ValueError).

  >>> shape_arg([2, 3], op="zeros")
  (2, 3)
  """
  shape = argfix(*shape)
  if any(isinstance(s, int) and s < 0 for s in shape): raise ValueError(f"{op}: negative dimension in shape {shape}")
  return shape

def make_tuple(x, n: int) -> tuple:
  """An int repeated n times, or a sequence as a tuple.

  >>> make_tuple(2, 3), make_tuple([1, 2], 2)
  ((2, 2, 2), (1, 2))
  """
  return (x,) * n if isinstance(x, int) else tuple(x)

class UnknownDTypeError(TypeError, AttributeError):
  """An unknown dtype name or object. Both a TypeError (torch: a bad dtype argument) and an AttributeError (tinygrad
  looks a name up on `dtypes`), as numpy's AxisError is both a ValueError and an IndexError: either `except` works."""

def _to_dtype(d, op: str = "dtype") -> DType:
  """d as a DType (None stays None): a DType, one of DTYPES_BY_NAME's names, or a numpy dtype. op names the caller
  in the error."""
  if d is None or isinstance(d, DType): return d
  if isinstance(d, str) and d in DTYPES_BY_NAME: return DTYPES_BY_NAME[d]
  if not isinstance(d, str):
    try: return dtypes.from_np(d)
    except TypeError: pass
  raise UnknownDTypeError(f"{op}: unknown dtype {d!r}; use a DType (dtypes.float32), a numpy dtype or one of the names "
                  f"{', '.join(sorted(DTYPES_BY_NAME))}")
