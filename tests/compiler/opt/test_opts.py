"""Kernel opts: every optimized kernel equals the unoptimized one (hypothesis over shapes 1..64 with primes, strided
views, elementwise / reduce / matmul / conv), random legal Opt sequences equal the unoptimized kernel, illegal opts
raise OptError naming the problem, the register budget rejects oversized tiles, and no benchmark-shaped kernel of the
default heuristic spills vector registers."""
import os
import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st, HealthCheck
from frontend import Tensor
from frontend.devices import open_device, target_of
from frontend.beam_runner import beam_runner
from compiler.pack import pack_matmuls
from compiler.schedule import create_schedule
from compiler.lower import lower
from compiler.linearize import linearize
from compiler.render_c import render_c
from compiler.opt.base import Opt, OptError
from compiler.opt.apply import apply_opt, candidate_opts, check_pressure, has_vectors
from compiler.opt.heuristic import apply_opts, optimize
from compiler.beam import build
from compiler.opt.pressure import max_live, register_budget, vector_spills, MAX_LIVE, SLACK
from compiler.uop import Ops
from tests.needs import clangs, need_clang

DEV = open_device("CPU")
DI = target_of("CPU")
SIZES = st.sampled_from([1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 31, 32, 33, 37, 48, 61, 64])
rng = np.random.default_rng(7)

def rnd(*shape) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)

def both(fn, *arrays) -> tuple[np.ndarray, np.ndarray]:
  """fn on fresh Tensors of `arrays`, realized with the default opts and with NOOPT=1."""
  outs = []
  for noopt in ("0", "1"):
    old = os.environ.get("NOOPT")
    os.environ["NOOPT"] = noopt
    try: outs.append(fn(*[Tensor(a) for a in arrays]).numpy())
    finally:
      if old is None: del os.environ["NOOPT"]
      else: os.environ["NOOPT"] = old
  return outs[0], outs[1]

def close(a: np.ndarray, b: np.ndarray, k: int = 1) -> None:
  np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * np.sqrt(k) * max(1.0, float(np.abs(b).max(initial=0))))

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

@FAST
@given(SIZES, SIZES, st.sampled_from(["plain", "transposed", "strided", "broadcast"]))
def test_elementwise_opt_equals_noopt(m, n, view):
  a, b = rnd(m, n), rnd(n, m) if view == "transposed" else rnd(m, 2 * n) if view == "strided" else rnd(1, n) if view == "broadcast" else rnd(m, n)
  def f(x, y):
    y = y.permute(1, 0) if view == "transposed" else y[:, ::2] if view == "strided" else y.expand(m, n) if view == "broadcast" else y
    return (x * y + 1.5).relu().exp()
  close(*both(f, a, b))

@FAST
@given(SIZES, SIZES, st.sampled_from([0, 1]), st.sampled_from(["sum", "max", "transposed_sum"]))
def test_reduce_opt_equals_noopt(m, n, axis, kind):
  a = rnd(m, n)
  def f(x):
    if kind == "transposed_sum": x = x.permute(1, 0)
    return x.max(axis=axis) if kind == "max" else x.sum(axis=axis)
  close(*both(f, a), k=max(m, n))

@FAST
@given(SIZES, SIZES, SIZES, st.booleans())
def test_matmul_opt_equals_noopt(m, kk, n, transposed):
  a, b = rnd(m, kk), rnd(n, kk) if transposed else rnd(kk, n)
  close(*both(lambda x, y: x @ (y.permute(1, 0) if transposed else y), a, b), k=kk)

@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([1, 2, 3]), st.sampled_from([1, 2, 3, 5]), SIZES, SIZES, st.sampled_from([1, 4, 7, 8]), st.sampled_from([0, 1, 2]),
       st.sampled_from([1, 2]), st.sampled_from([1, 2]))
def test_conv_opt_equals_noopt(bs, cin, h, w, cout, pad, stride, dilation):
  k = 3 if min(h, w) + 2 * pad >= 2 * dilation + 1 else 1
  x, wt = rnd(bs, cin, h, w), rnd(cout, cin, k, k)
  close(*both(lambda a, b: a.conv2d(b, padding=pad, stride=stride, dilation=dilation), x, wt), k=cin * k * k)

@FAST
@given(SIZES, SIZES, st.sampled_from([0, 1, 3]), st.sampled_from(["flip", "shrink", "pad_sum"]))
@example(8, 1, 0, "pad_sum")   # a column of padding only: a vector reduction over a constant (once rendered `0.0f[6]`)
def test_views_opt_equals_noopt(m, n, p, kind):
  a = rnd(m, n)
  def f(x):
    if kind == "flip": return (x.flip(1) * 2 + x).exp()
    if kind == "shrink": return x[m // 3:, : max(1, n - p)].sum(axis=1)
    return x.pad(((p, 0), (1, p))).sum(axis=0) * 0.5
  close(*both(f, a), k=max(m, n))

# ***** explicit opt sequences on lowered kernels, run on random data through the engine's BEAM runner *****

def _kernel(kind: str, a: int, b: int):
  r = lambda *s: Tensor(np.zeros(s, np.float32)).realize()
  out = {"ew": lambda: (r(a, b) * r(a, b) + 1).exp(), "sum": lambda: r(a, b).sum(axis=1), "matmul": lambda: r(a, 16) @ r(16, b),
         "conv": lambda: r(2, 3, a, b).conv2d(r(8, 3, 3, 3), padding=1), "max": lambda: r(a, b).max(axis=0)}[kind]()
  return [si for si in create_schedule([out.lazydata]) if si.kind == "kernel"][-1]

@pytest.mark.usefixtures("on_cpu")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["ew", "sum", "matmul", "conv", "max"]), st.sampled_from([3, 4, 8, 12, 16, 32]), st.sampled_from([4, 5, 8, 16, 32]), st.data())
def test_random_opt_sequences_equal_unoptimized(kind, a, b, data):
  si = _kernel(kind, a, b)
  k0 = lower(si.ast, si.name)
  run = beam_runner(si, DEV)
  ref = run(build(k0, (), DI))[1][0]
  k, opts = k0, []
  for _ in range(data.draw(st.integers(1, 4))):
    cands = candidate_opts(k, DI)
    if not cands: break
    o = data.draw(st.sampled_from(cands))
    try: k = apply_opt(k, o, DI)
    except OptError: continue
    opts.append(o)
  b_ = build(k0, tuple(opts), DI)
  assert b_ is not None, opts
  got = run(b_)[1][0]
  np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())), err_msg=f"{kind} {a}x{b} opts {opts}")

def test_apply_opt_does_not_change_its_input():
  k = lower(_kernel("matmul", 16, 32).ast)
  before = (k.sink, list(k.global_ranges), list(k.applied_opts))
  apply_opts(k, [Opt("VECTOR", 1, 8), Opt("UPCAST", 0, 4)], DI)
  assert (k.sink, k.global_ranges, k.applied_opts) == before

@pytest.mark.parametrize("opt, msg", [
  (Opt("UPCAST", 0, 5), "does not divide"), (Opt("UPCAST", 7, 2), "axis out of range"), (Opt("VECTOR", 1, 32), "lanes"),
  (Opt("UNROLL", 3, 2), "axis out of range"), (Opt("SHUFFLE", 0, 2), "unknown opt kind"), (Opt("REDUCE_UNROLL", 0, 5), "does not divide"),
  (Opt("SWAP", 1, 1), "out of range"), (Opt("PAD", 0, 4), "needs a remainder")])
def test_illegal_opts_raise(opt, msg):
  k = lower(_kernel("matmul", 16, 32).ast, "mm")
  with pytest.raises(OptError, match=msg) as e: apply_opt(k, opt, DI)
  assert "mm" in str(e.value)

def test_second_vectorization_and_second_thread_split_are_illegal():
  t = DI.replace(ncores=max(2, DI.ncores))   # (a 1-core host refuses the first split already: tested below)
  k = apply_opts(lower(_kernel("matmul", 16, 32).ast), [Opt("VECTOR", 1, 8), Opt("THREAD", 0)], t)
  with pytest.raises(OptError, match="already vectorized"): apply_opt(k, Opt("VECTOR", 1, 4), t)
  with pytest.raises(OptError, match="already split"): apply_opt(k, Opt("THREAD", 0), t)
  with pytest.raises(OptError, match="one thread per kernel"): apply_opt(lower(_kernel("matmul", 16, 32).ast), Opt("THREAD", 0), DI.replace(ncores=1))

def test_register_budget_rejects_oversized_tiles(cpu_target):
  """64 rows x 2 vectors of accumulators can't live in the registers: the pressure check refuses the upcast."""
  t = cpu_target
  k = apply_opt(lower(_kernel("matmul", 64, 32).ast), Opt("VECTOR", 1, t.simd_bytes // 4), t)
  budget = min(MAX_LIVE, register_budget(t.simd_bytes, t.vector_registers) + SLACK)
  assert budget == t.vector_registers == (32 if t.simd_bytes == 64 else 16)
  with pytest.raises(OptError, match="register budget"):
    apply_opts(k, [Opt("UPCAST", 1, 2), Opt("UPCAST", 0, 32)], t)
  ok = apply_opts(k, [Opt("UPCAST", 0, 4)], t)   # a 4-row tile fits
  assert max_live(linearize(ok), t.simd_bytes) <= budget

def test_upcast_of_a_whole_axis_removes_the_loop():
  k = apply_opt(lower(_kernel("sum", 4, 32).ast), Opt("UPCAST", 0, 4), DI)
  assert k.global_ranges == [] and len(k.sink.src) == 4

def test_unroll_of_a_whole_reduction_removes_the_loop():
  k = apply_opt(lower(_kernel("sum", 4, 8).ast), Opt("UNROLL", 0, 8), DI)
  assert k.reduce_ranges() == [] and not any(u.op is Ops.REDUCE for u in k.sink.toposort())

BENCH_KERNELS = {
  "matmul": lambda r: r(512, 512) @ r(512, 512), "conv": lambda r: r(4, 32, 32, 32).conv2d(r(64, 32, 3, 3), padding=1),
  "conv_in": lambda r: r(4, 3, 32, 32).conv2d(r(32, 3, 3, 3), padding=1), "sum": lambda r: r(1 << 20).sum(),
  "softmax": lambda r: r(64, 4096).softmax(-1), "ew": lambda r: (r(1 << 16) * r(1 << 16) + r(1 << 16)).relu().exp()}

@pytest.mark.parametrize("name", list(BENCH_KERNELS))
def test_benchmark_kernels_fit_registers_and_do_not_spill(name, cpu_target_cores):
  """The default opts keep every benchmark-shaped kernel within the target's register budget, and the C compiler
  agrees: no vector register is spilled to or reloaded from the stack inside a loop of the assembly (compiled for the
  target with the kernels' compiler, clang or gcc: HCQRT_CC), on this host's cores and on a GPU box's 16 or 64."""
  t = cpu_target_cores
  r = lambda *s: Tensor(np.zeros(s, np.float32)).realize()
  sis = [si for si in pack_matmuls(create_schedule([BENCH_KERNELS[name](r).lazydata]), lambda d: t.simd_bytes // 4) if si.kind == "kernel"]
  for si in sis:
    k = optimize(lower(si.ast, si.name), t)
    assert max_live(linearize(k), t.simd_bytes) <= min(MAX_LIVE, register_budget(t.simd_bytes, t.vector_registers) + SLACK), k.name
    check_pressure(k, t)
    assert vector_spills(render_c(k, 2 if k.threaded is not None else 1), k.name, t.cc_flags) == 0, k.name

def test_softmax_sum_keeps_registers_with_every_installed_clang(cpu_target, monkeypatch):
  """The softmax's exp-sum (4 chains of 16-lane exp2 on AVX-512, 2 of 8 lanes on AVX2) without spills with each clang
  installed, not only the one the backend picks: clang 16 (a GPU box's host) lacked one of the 32 registers while the
  16-lane exp2 kept an infinity for its x >= 128 select, which the overflow of its 2^64 * 2^64 already gives."""
  r = lambda *s: Tensor(np.zeros(s, np.float32)).realize()
  sis = [si for si in pack_matmuls(create_schedule([BENCH_KERNELS["softmax"](r).lazydata]), lambda d: cpu_target.simd_bytes // 4) if si.kind == "kernel"]
  sums = [k for k in (optimize(lower(si.ast, si.name), cpu_target) for si in sis) if k.name == "r_64_4096"]
  assert sums and any(u.op is Ops.EXP2 for k in sums for u in k.sink.toposort()), [si.name for si in sis]
  if not clangs(): need_clang()
  for cc in clangs():
    monkeypatch.setenv("HCQRT_CC", cc)
    for k in sums: assert vector_spills(render_c(k, 2 if k.threaded is not None else 1), k.name, cpu_target.cc_flags) == 0, (cc, k.applied_opts)

def test_default_conv_kernel_is_tiled_and_reads_without_gates(cpu_target):
  """conv2d(padding=1) copies the padded input first, so the conv kernel reads it with no border check: the default
  opts give it the register tile (vectors along the output row) and nothing in it compares or gates a load."""
  r = lambda *s: Tensor(np.zeros(s, np.float32)).realize()
  sis = [si for si in create_schedule([r(2, 8, 32, 32).conv2d(r(16, 8, 3, 3), padding=1).lazydata]) if si.kind == "kernel"]
  assert len(sis) == 2
  k = optimize(lower(sis[-1].ast, sis[-1].name), cpu_target)
  assert [o[0] for o in k.applied_opts][:1] == ["TILE"] and has_vectors(k), k.applied_opts
  uops = k.sink.toposort()
  assert k.reduce_ranges() and not [u for u in uops if u.op in (Ops.CMPLT, Ops.CMPNE, Ops.WHERE) or (u.op is Ops.LOAD and len(u.src) > 2)]

def test_linearizer_sinks_loads_and_hoists_stores():
  """4 unrolled outputs of a*b: each store follows its own two loads directly (load, load, mul, store, ...), so no
  more than the values of one output are live at a time."""
  r = lambda *s: Tensor(np.zeros(s, np.float32)).realize()
  si = [si for si in create_schedule([(r(8, 16) * r(8, 16)).lazydata]) if si.kind == "kernel"][-1]
  k = apply_opt(lower(si.ast, si.name), Opt("UPCAST", 0, 4), DI)
  body = [u.op for u in linearize(k) if u.op is Ops.STORE or (u.op in (Ops.LOAD, Ops.MUL) and u.dtype.is_float)]
  assert body == [Ops.LOAD, Ops.LOAD, Ops.MUL, Ops.STORE] * 4
  assert max_live(linearize(k), DI.simd_bytes) <= 3

def test_linearizer_computes_an_epilogue_after_the_reduction_loop():
  """(c > 0) * (a @ b), the shape of a conv's input gradient through a relu: c's values are read only after the
  product's loop, so they are loaded after it (not before it, live in registers all through it)."""
  r = lambda *s: Tensor(np.zeros(s, np.float32)).realize()
  a, b, c = r(8, 16), r(16, 8), r(8, 8)
  si = [si for si in create_schedule([((c > 0) * (a @ b)).lazydata]) if si.kind == "kernel"][-1]
  prog = linearize(lower(si.ast, si.name))
  red = next(u for u in prog if u.op is Ops.RANGE and u.arg[1] == "reduce")
  start, end = prog.index(red), next(i for i, u in enumerate(prog) if u.op is Ops.ENDRANGE and u.src[0] is red)
  outside = [i for i, u in enumerate(prog) if u.op is Ops.LOAD and not start < i < end]
  assert outside and all(i > end for i in outside), (start, end, outside)

def test_reduction_over_outer_loops_gets_output_vectors(cpu_target):
  """A sum over the batch of (batch, 9, 64) partial sums: the contiguous output loop as vectors, the reduction inside
  (no scalar adds), and the same values as NOOPT."""
  r = lambda *s: Tensor(np.zeros(s, np.float32)).realize()
  si = [si for si in create_schedule([r(32, 9, 64).sum(axis=0).lazydata]) if si.kind == "kernel"][-1]
  k = optimize(lower(si.ast, si.name), cpu_target)
  assert k.applied_opts and k.applied_opts[0][0] == "TILE" and has_vectors(k) and k.reduce_ranges(), k.applied_opts
  x = rnd(32, 9, 64)
  close(*both(lambda t: t.sum(axis=0), x), k=32)

def test_short_row_and_double_sums_get_independent_accumulators(cpu_target):
  """Sums over (batch, 20, 20) per channel, BatchNorm's: a row of 20 floats holds too few vectors for several
  accumulators, so the next loop out gives them (REDUCE_UNROLL); two such sums in one kernel (no single vector
  reduction) each get interleaved scalar accumulators. Both equal NOOPT."""
  x, y = rnd(16, 8, 20, 20), rnd(16, 8, 20, 20)
  one = lambda a: a.sum(axis=(0, 2, 3))
  two = lambda a, b: a.sum(axis=(0, 2, 3)) + b.sum(axis=(0, 2, 3))
  for fn, arrs in ((one, (x,)), (two, (x, y))):
    si = [si for si in create_schedule([fn(*[Tensor(a) for a in arrs]).lazydata]) if si.kind == "kernel"][-1]
    k = optimize(lower(si.ast, si.name), cpu_target)
    assert [o for o in k.applied_opts if o[0] == "REDUCE_UNROLL"], (si.name, k.applied_opts)
    close(*both(fn, *arrs), k=16 * 400)

def test_sums_over_a_short_odd_map_take_accumulators_from_the_batch(cpu_target):
  """Sums over (batch, 6, 6) per channel (BatchNorm after a 3x3 conv over 8x8): no loop of the map divides into
  accumulators, so the batch loop gives them (REDUCE_UNROLL on it, once per kernel, one or two sums); equal to a
  float64 oracle and to NOOPT."""
  x, y = rnd(16, 8, 6, 6), rnd(16, 8, 6, 6)
  one = lambda a: a.sum(axis=(0, 2, 3))
  two = lambda a, b: a.sum(axis=(0, 2, 3)) + (a * b).sum(axis=(0, 2, 3))
  for fn, arrs, nsums, ref in ((one, (x,), 1, x.astype(np.float64).sum((0, 2, 3))),
                               (two, (x, y), 2, x.astype(np.float64).sum((0, 2, 3)) + (x.astype(np.float64) * y).sum((0, 2, 3)))):
    si = [si for si in create_schedule([fn(*[Tensor(a) for a in arrs]).lazydata]) if si.kind == "kernel"][-1]
    k0 = lower(si.ast, si.name)
    size = {u.arg[0]: u.src[0].arg for u in k0.sink.toposort() if u.op is Ops.RANGE}
    k = optimize(k0, cpu_target)
    unrolls = [o for o in k.applied_opts if o[0] == "REDUCE_UNROLL"]
    assert len(unrolls) == nsums and all(size[o[1]] == 16 and o[2] == 4 for o in unrolls), (si.name, k.applied_opts)
    ours, noopt = both(fn, *arrs)
    close(ours, noopt, k=16 * 36)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-4)

@pytest.mark.parametrize("cin, h, w, cout, pad", [(3, 6, 16, 16, 1), (4, 5, 32, 64, 1), (5, 4, 24, 12, 0), (2, 6, 20, 32, 0),
                                                  (8, 3, 24, 40, 2)])
def test_twelve_accumulator_conv_tiles_equal_noopt(cin, h, w, cout, pad):
  """The conv tiles with 12 accumulators (6 x 2 with the channels cut at a multiple of 6 and the remainder as 2 x 2,
  4 x 3 on 24-wide rows, 4 rows of overlapping vectors on 20-wide ones): forward and both gradients equal NOOPT."""
  x, wt = rnd(2, cin, h + 4, w + 4 - 2 * pad), rnd(cout, cin, 5, 5)
  def step(a, b):
    a, b = a.requires_grad_(), b.requires_grad_()
    out = a.conv2d(b, padding=pad).relu()
    (out * out).sum().backward()
    return out.flatten().cat(a.grad.flatten(), b.grad.flatten())
  close(*both(step, x, wt), k=cin * 25 * 2 * (h + 4) * (w + 4))
