"""Default opts for convolution-like kernels: a reduction whose loads along an output loop are gated by comparisons of
that loop's index (the padding border). The border vectors keep their gates, the inner ones read without them, and the
row loop is peeled (compiler/peel.py) so its middle piece runs without comparisons."""
from __future__ import annotations
from compiler.lower import LoweredKernel
from compiler.opts import Opt, OptError, UPCAST_I, apply_opt, apply_opts, _loads, _stride

def conv_tile(k: LoweredKernel, w: int, device) -> LoweredKernel | None:
  """A convolution-like kernel (a reduction whose loads along the innermost output loop rj are gated by comparisons
  of rj: the padding border): rj as vectors narrower than the machine's (w/2 lanes), all of rj's vectors unrolled, so
  that the inner vectors read without gates (their lanes can't reach the border) and only the first and last compare;
  plus 4 rows of another output loop whose loads don't move with it (output channels), like the matmul tile."""
  if len(k.global_ranges) < 2 or not k.reduce_ranges(): return None
  from compiler.peel import peel_points
  rj = k.global_ranges[-1]
  n, j = rj.src[0].arg, len(k.global_ranges) - 1
  if not peel_points(k, rj): return None
  wv = next((x for x in (w // 2, w // 4) if x >= 4 and n % x == 0 and 3 <= n // x <= 4), None)
  if wv is None: return None
  loads = _loads(k)
  if not any(_stride(ld.src[1], rj) == 1 for ld in loads): return None
  rows = next((i for i, ri in enumerate(k.global_ranges[:-1]) if ri.src[0].arg % UPCAST_I == 0 and
               any(_stride(ld.src[1], rj) == 1 and _stride(ld.src[1], ri) == 0 for ld in loads)), None)
  opts = [Opt("VECTOR", j, wv), Opt("UPCAST", j, n // wv)] + ([Opt("UPCAST", rows, UPCAST_I)] if rows is not None else [])
  try: return apply_opts(k, opts, device)
  except OptError: return None

def peel_default(k: LoweredKernel, device) -> LoweredKernel:
  """Peel the innermost output loop (outside the threaded one) of a kernel with a reduction whose body compares that
  loop's index against constants (a padded convolution's rows): the middle piece runs without the comparisons."""
  if getattr(device, "renderer", "c") != "c" or not k.reduce_ranges() or getattr(k, "nests", None): return k
  from compiler.peel import peel_points
  for i in reversed(range(len(k.global_ranges))):
    g = k.global_ranges[i]
    if g is k.threaded: break
    if peel_points(k, g):
      try: return apply_opt(k, Opt("PEEL", i), device)
      except OptError: return k
  return k
