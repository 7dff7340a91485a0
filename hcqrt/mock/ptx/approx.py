"""The error of PTX's `.approx` instructions (MUFU units on the hardware). For each result the mock picks a direction
(above or below the exact value) and returns the representable value farthest from the exact one in that direction
whose error is within the maximum the PTX ISA documents. So a kernel that relies on more accuracy than the ISA promises
(a missing refinement step, a missing range reduction) fails in the tests as it could on a real GPU. How far off a
result lands depends on the float grid in the chosen direction: under rcp's 1 ulp bound, for example, about half the
results are at most 0.5 ulp off.

Source of every number: NVIDIA, "Parallel Thread Execution ISA" (PTX ISA 9.x), the section named next to it.
The direction comes from the parity of the input's bits, so results are reproducible and both directions occur. Special inputs (+-0, +-inf, NaN) keep the exact results of each
section's table: only finite, nonzero inputs whose correctly rounded result is finite are perturbed.
Not modelled (the ISA gives no bound): rsqrt.approx.f64 without .ftz, "emulated in software" (9.7.3.16), stays exact.

>>> import numpy as np
>>> x = np.array([0.5, 1.5], np.float32)
>>> r = approximate("rcp", "f32", x); bool(np.all(np.abs(r.astype(np.float64) - 1 / x.astype(np.float64)) <= ulp(1 / x, np.float32)))
True
"""
from __future__ import annotations
import math
import numpy as np
from .numerics import F32, F64, UINT, SINT, bf16_to_f32, f32_to_bf16

PI, INF = math.pi, math.inf
# (op, element type) -> [(lo, hi, kind, amount)]: the first interval [lo, hi] holding the input gives the bound on
# |result - exact|. kind abs: amount; rel: amount * |exact|; ulp: amount ulps of the exact value; rn_ulp: amount
# representable steps away from the correctly rounded result. An input outside every interval has no guarantee.
_ALL = (-INF, INF)
_TRIG = [(-2 * PI, 2 * PI, "abs", 2 ** -20.5), (-100 * PI, 100 * PI, "abs", 2 ** -14.7)]
BOUNDS: dict[tuple[str, str], list[tuple[float, float, str, float]]] = {
  ("sin", "f32"): _TRIG,                                                # 9.7.3.18 sin: "maximum absolute error over input range"
  ("cos", "f32"): _TRIG,                                                # 9.7.3.19 cos: same table
  ("lg2", "f32"): [(0.5, 2.0, "abs", 2 ** -22), (*_ALL, "rel", 2 ** -22)],   # 9.7.3.20 lg2: abs on (0.5, 2), else relative
  ("ex2", "f32"): [(*_ALL, "rn_ulp", 2)],                               # 9.7.3.21 ex2: "2 ulp from correctly rounded result"
  ("ex2", "f16"): [(*_ALL, "rel", 2 ** -9.9)],                          # 9.7.4.10 half ex2: relative 2^-9.9 (.f16)
  ("ex2", "bf16"): [(*_ALL, "rel", 2 ** -7)],                           # 9.7.4.10 half ex2: relative 2^-7 (.bf16)
  ("tanh", "f32"): [(*_ALL, "rel", 2 ** -11)],                          # 9.7.3.22 tanh: relative 2^-11, entire range
  ("tanh", "f16"): [(*_ALL, "abs", 2 ** -10.987)],                      # 9.7.4.9 half tanh: absolute 2^-10.987 (.f16)
  ("tanh", "bf16"): [(*_ALL, "abs", 2 ** -8)],                          # 9.7.4.9 half tanh: absolute 2^-8 (.bf16)
  ("rsqrt", "f32"): [(*_ALL, "rel", 2 ** -22.9)],                       # 9.7.3.16 rsqrt: relative 2^-22.9
  ("sqrt", "f32"): [(*_ALL, "rel", 2 ** -23)],                          # 9.7.3.15 sqrt.approx: relative 2^-23
  ("rcp", "f32"): [(*_ALL, "ulp", 1)],                                  # 9.7.3.13 rcp.approx: "maximum ulp error is 1"
  ("div.full", "f32"): [(*_ALL, "ulp", 2)],                             # 9.7.3.8 div.full: 2 ulp over the full range
}
EXACT = {"sin": np.sin, "cos": np.cos, "lg2": np.log2, "ex2": np.exp2, "tanh": np.tanh, "sqrt": np.sqrt,
         "rsqrt": lambda x: 1 / np.sqrt(x), "rcp": lambda x: 1 / x}

def supported(op: str, t: str) -> bool: return (op, t) in BOUNDS

# *** representable neighbours: floats of one sign are ordered like their bit patterns ***
def _ordered(v: np.ndarray) -> np.ndarray:
  """Float bits -> signed integers in the floats' order (-0 and +0 both 0), so +-n steps n representable values."""
  b = v.view(UINT[v.dtype.itemsize]); sign = b.dtype.type(1) << b.dtype.type(8 * v.dtype.itemsize - 1)
  mag = (b & ~sign).astype(SINT[v.dtype.itemsize])
  return np.where((b & sign) != 0, -mag, mag)

def _from_ordered(o: np.ndarray, dt: np.dtype) -> np.ndarray:
  u = UINT[dt.itemsize]; sign = u.type(1) << u.type(8 * dt.itemsize - 1)
  return np.where(o < 0, (-o).astype(u) | sign, o.astype(u)).view(dt)

def _unit(t: str) -> int: return 1 << 16 if t == "bf16" else 1   # bf16 values live in f32 registers: one step = 2^16

def _quantize(x64: np.ndarray, t: str, wt: np.dtype) -> np.ndarray:
  """Round float64 values to the nearest value of PTX type t, held in working dtype wt."""
  return bf16_to_f32(f32_to_bf16(x64.astype(F32))) if t == "bf16" else x64.astype(wt)

def ulp(v, wt) -> np.ndarray:
  """Spacing of the floats of dtype wt at |v| (the step above |v|'s power of two; the smallest subnormal below)."""
  fi = np.finfo(wt); e = np.floor(np.log2(np.maximum(np.abs(np.asarray(v, F64)), float(fi.tiny))))
  return np.exp2(e - fi.nmant)

def _direction(x: np.ndarray) -> np.ndarray:
  """+1 or -1 per element: the parity of the input's bits."""
  b = x.view(UINT[x.dtype.itemsize]).astype(np.uint64)
  for s in (32, 16, 8, 4, 2, 1): b = b ^ (b >> np.uint64(s))
  return np.where((b & np.uint64(1)) != 0, 1.0, -1.0)

def _within(exact: np.ndarray, bound: np.ndarray, up: np.ndarray, t: str, wt: np.dtype) -> np.ndarray:
  """The representable value farthest from `exact` in direction `up` whose distance is at most `bound` (the
  correctly rounded value when no other one is that close)."""
  v = _quantize(exact + up * bound, t, wt)
  far = np.abs(v.astype(F64) - exact) > bound
  v = np.where(far, _from_ordered(_ordered(v) - np.sign(v.astype(F64) - exact).astype(np.int64) * _unit(t), wt), v)
  return np.where(np.abs(v.astype(F64) - exact) > bound, _quantize(exact, t, wt), v)

def perturb(op: str, t: str, x: np.ndarray, exact: np.ndarray, wt: np.dtype, ok: np.ndarray | None = None) -> np.ndarray:
  """Results of `op.approx.t` for inputs x (working dtype wt) given the exact results (float64): off by the bound
  where `ok` (default: finite nonzero x) and the rounded result is finite; the rest keeps the exact special values."""
  x64, up = x.astype(F64), _direction(x)
  with np.errstate(all="ignore"): r = _quantize(exact, t, wt)   # the correctly rounded result
  if ok is None: ok = np.isfinite(x64) & (x64 != 0)
  ok = ok & np.isfinite(r)   # an overflowing result stays infinite
  if (op, t) == ("tanh", "f32"): ok = ok & (np.abs(x64) >= np.finfo(F32).tiny)   # 9.7.3.22: subnormal inputs pass through
  done = ~ok
  with np.errstate(all="ignore"):
    for lo, hi, kind, amount in BOUNDS[(op, t)]:
      sel = ok & ~done & (x64 >= lo) & (x64 <= hi)
      if not sel.any(): continue
      if kind == "rn_ulp":
        o, n, top = _ordered(r), (up * amount).astype(np.int64) * _unit(t), _ordered(np.array(np.finfo(wt).max, wt))
        v = _from_ordered(np.where(o >= 0, np.clip(o + n, 0, top), np.clip(o + n, -top, 0)), wt)   # stays finite, keeps its sign
      else:
        bound = {"abs": lambda: np.full_like(exact, amount), "rel": lambda: amount * np.abs(exact),
                 "ulp": lambda: amount * ulp(exact, wt)}[kind]()
        v = _within(exact, bound, up, t, wt)
      r, done = np.where(sel, v, r), done | sel
    # 9.7.3.18/19: "Outside of the range [-100pi .. +100pi] ... no defined error guarantees": the mock returns the
    # negated value (still in [-1, 1]), so a kernel that skips the range reduction gets a visibly wrong sign
    r = np.where(done, r, -r)
  return r.astype(wt)

def approximate(op: str, t: str, x, wt: np.dtype | None = None) -> np.ndarray:
  """op.approx on x of PTX element type t (f32, f16, bf16 held as f32): the exact result perturbed by the bound."""
  x = np.asarray(x); wt = np.dtype(wt or x.dtype)
  with np.errstate(all="ignore"): exact = EXACT[op](x.astype(F64))
  return perturb(op, t, x, exact, wt)

def upper_word_f64(op: str, x) -> np.ndarray:
  """rcp.approx.ftz.f64 (9.7.3.14) and rsqrt.approx.ftz.f64 (9.7.3.17): the ISA's semantics use only a[63:32] (the
  low 32 bits of the input are ignored), subnormal inputs flush to +-0, the result's low 32 bits are zero and NaN is
  0x7fffffff00000000. The ISA gives these no accuracy at all ("a fast, gross approximation"): that the result is one
  of the two 1.11.20 neighbours of the exact value for the upper word (per element, either one) is the mock's
  assumption, not the ISA's."""
  x = np.asarray(x, F64); hi_mask = np.uint64(0xFFFFFFFF00000000)
  tmp = (x.view(np.uint64) & hi_mask).view(F64)
  tmp = np.where(np.abs(tmp) < np.finfo(F64).tiny, np.copysign(0.0, tmp), tmp)
  with np.errstate(all="ignore"): exact = 1 / tmp if op == "rcp" else 1 / np.sqrt(tmp)
  b = exact.view(np.uint64); low = (b & ~hi_mask) != 0
  away = low & (_direction(tmp) > 0) & np.isfinite(exact)   # from the bits it reads: the low word changes nothing
  r = ((b & hi_mask) + np.where(away, np.uint64(1 << 32), np.uint64(0))).view(F64)
  r = np.where(np.abs(r) < np.finfo(F64).tiny, np.copysign(0.0, r), r)   # "Subnormal ... results are flushed"
  return np.where(np.isnan(r), np.uint64(0x7FFFFFFF00000000).view(F64), r)

def divide(a, b, full: bool) -> np.ndarray:
  """div.approx.f32 / div.full.f32 (9.7.3.8): 2 ulp from a/b; div.approx with 2^126 < |b| < 2^128 returns NaN when a
  is infinite, else a sign-preserving zero."""
  a, b = np.asarray(a, F32), np.asarray(b, F32)
  a64, b64 = a.astype(F64), b.astype(F64)
  with np.errstate(all="ignore"): exact = a64 / b64
  ok = np.isfinite(a64) & np.isfinite(b64) & (a64 != 0) & (b64 != 0)
  r = perturb("div.full", "f32", a, exact, F32, ok)
  if full: return r
  big = np.isfinite(b64) & (np.abs(b64) > 2.0 ** 126)
  return np.where(big, np.where(np.isinf(a64), np.float32(np.nan), np.copysign(np.float32(0), exact)), r).astype(F32)
