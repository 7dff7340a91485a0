"""MERGE (compiler/opt/heuristic.py merge_rows, merge_reduce_rows): adjacent loops that every access walks as one become
one loop, so maps of 20x20, 24x24 or 6x6 floats take whole vectors where their rows take none (the elementwise and
BatchNorm kernels of a CNN step). Results equal the unoptimized kernel; loops that are not one walk are left alone."""
import numpy as np
import pytest
from frontend import Tensor
from conftest import host_runs
from frontend.devices import open_device
from frontend.beam_runner import beam_runner
from compiler.schedule import create_schedule
from compiler.lower import lower
from compiler.opt.apply import has_vectors
from compiler.opt.heuristic import optimize
from compiler.beam import build

pytestmark = pytest.mark.usefixtures("on_cpu")   # C-path tests: CPU even under MOCKGPU=1 NV=1

DEV = open_device("CPU")
rng = np.random.default_rng(28)

def rnd(*s) -> Tensor: return Tensor(rng.standard_normal(s).astype(np.float32)).realize()

def kernel_of(t: Tensor):
  return [si for si in create_schedule([t.lazydata]) if si.kind == "kernel"][-1]

def same_as_noopt(si, target) -> None:
  """The heuristic's kernel for `target` gives NOOPT's values (where this host runs the target's code)."""
  if not host_runs(target): return
  run = beam_runner(si, DEV)
  got, ref = run(build(lower(si.ast, si.name), None, target))[1][0], run(build(lower(si.ast, si.name), (), target))[1][0]
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)

def merges(k) -> list: return [o for o in k.applied_opts if o[0] == "MERGE"]

@pytest.mark.parametrize("shape", [(4, 8, 20, 20), (2, 6, 24, 24), (3, 16, 6, 6), (2, 8, 10, 10)])
def test_elementwise_maps_merge_into_whole_vectors(shape, cpu_target):
  """BatchNorm's normalize-and-relu over (N, C, H, W) with per-channel scale and shift: the map (and, where it is still
  no multiple of the vector, nothing more: the channel loop reads the broadcast) is one loop of whole vectors."""
  x, s, b = rnd(*shape), rnd(1, shape[1], 1, 1), rnd(1, shape[1], 1, 1)
  si = kernel_of((x * s + b).relu())
  k = optimize(lower(si.ast, si.name), cpu_target)
  lanes, hw = cpu_target.simd_bytes // 4, shape[2] * shape[3]
  if shape[3] % lanes and hw % lanes == 0:
    assert merges(k) and has_vectors(k), k.applied_opts
    assert [r.src[0].arg for r in k.global_ranges][-2] == shape[1]   # the channel loop stays: it reads s and b
  if hw % lanes: assert not merges(k), k.applied_opts                # (6x6 = 36 of 16, 10x10: no whole vectors)
  same_as_noopt(si, cpu_target)

def test_no_broadcast_merges_the_whole_tensor(cpu_target):
  x, y = rnd(3, 16, 6, 6), rnd(3, 16, 6, 6)
  si = kernel_of((x * y + 1.5).exp2())
  k = optimize(lower(si.ast, si.name), cpu_target)
  assert len(merges(k)) >= 2 and has_vectors(k), k.applied_opts
  same_as_noopt(si, cpu_target)

@pytest.mark.parametrize("view", ["shrunk", "transposed", "padded", "row_broadcast"])
def test_loops_that_are_not_one_walk_stay(view, cpu_target):
  """A slice (rows 24 apart, 20 used), a transposed read, a padded map (a border gate on the column) or a per-column
  broadcast: no single walk covers both loops (merged, every element would need a division), so they stay."""
  xn, bn = rng.standard_normal((2, 8, 20, 24)).astype(np.float32), rng.standard_normal((1, 1, 1, 20)).astype(np.float32)
  x, b = Tensor(xn).realize(), Tensor(bn).realize()
  t, want = {"shrunk": (lambda: x[:, :, :, 2:22] * 2, lambda: xn[:, :, :, 2:22] * 2),
             "transposed": (lambda: x[:, :, :, :20].permute(0, 1, 3, 2) * 2, lambda: xn[:, :, :, :20].transpose(0, 1, 3, 2) * 2),
             "padded": (lambda: x[:, :, :18, :18].pad(((0, 0), (0, 0), (1, 1), (1, 1))) * 2,
                        lambda: np.pad(xn[:, :, :18, :18], ((0, 0), (0, 0), (1, 1), (1, 1))) * 2),
             "row_broadcast": (lambda: x[:, :, :, :20] + b, lambda: xn[:, :, :, :20] + bn)}[view]
  si = kernel_of(t())
  k = optimize(lower(si.ast, si.name), cpu_target)
  assert not merges(k), k.applied_opts
  same_as_noopt(si, cpu_target)
  np.testing.assert_allclose(t().numpy(), want(), rtol=1e-6)

@pytest.mark.parametrize("shape", [(16, 8, 20, 20), (8, 4, 24, 24)])
def test_per_channel_sums_over_merged_maps(shape, cpu_target):
  """BatchNorm's per-channel sums over (N, H, W): the map as one loop of vectors (MERGE, REDUCE_VECTOR) with several
  independent accumulators; equal to a float64 oracle and to NOOPT."""
  xn = rng.standard_normal(shape).astype(np.float32)
  x = Tensor(xn).realize()
  si = kernel_of((x * x).sum(axis=(0, 2, 3)))
  k = optimize(lower(si.ast, si.name), cpu_target)
  lanes = cpu_target.simd_bytes // 4
  if shape[3] % lanes:
    assert merges(k) and any(o[0] == "REDUCE_VECTOR" for o in k.applied_opts), k.applied_opts
    vec = next(o for o in k.applied_opts if o[0] == "REDUCE_VECTOR")
    chains = vec[3] * max([o[2] for o in k.applied_opts if o[0] == "REDUCE_UNROLL"], default=1)
    assert chains >= 4, k.applied_opts
  same_as_noopt(si, cpu_target)
  np.testing.assert_allclose((x * x).sum(axis=(0, 2, 3)).numpy(), (xn.astype(np.float64) ** 2).sum((0, 2, 3)), rtol=1e-5)

def test_rows_no_vector_divides_take_narrower_vectors(cpu_target):
  """A permuted copy whose 24- or 20-wide rows no full vector divides and no merge joins (the channel loop sits between
  the map's rows): vectors of 8 or 4 lanes, the widest that divides the row; equal to numpy and to NOOPT."""
  for w in (24, 20):
    xn = rng.standard_normal((2, 8, w, w)).astype(np.float32)
    t = Tensor(xn).realize().permute(0, 2, 1, 3) * 1.0   # (n, y, c, x): x contiguous in both
    si = kernel_of(t)
    k = optimize(lower(si.ast, si.name), cpu_target)
    full = cpu_target.simd_bytes // 4
    assert has_vectors(k), k.applied_opts
    if w % full and w < 2 * full:   # (a row of two vectors or more is cut at their last multiple instead: PAD)
      lanes = max(v for v in (full, full // 2, full // 4) if v >= 4 and w % v == 0)
      assert [o[4] for o in k.applied_opts if o[0] == "TILE"] == [lanes], k.applied_opts
    same_as_noopt(si, cpu_target)
    np.testing.assert_allclose(t.numpy(), xn.transpose(0, 2, 1, 3), rtol=0)

@pytest.mark.parametrize("n, cin, cout, size, stride", [(2, 8, 16, 32, 2), (2, 16, 32, 8, 1), (3, 4, 8, 16, 1)])
def test_one_vector_rows_take_more_output_rows(n, cin, cout, size, stride, cpu_target):
  """A conv whose output row is one vector (16 columns of a stride-2 conv on AVX-512, an 8x8 map): the extra rows of the
  tile come from another output loop the weights (broadcast) don't move with, not from more output channels (one
  broadcast load per FMA); forward equal to NOOPT and to torch."""
  import torch
  xn, wn = rng.standard_normal((n, cin, size, size)).astype(np.float32), rng.standard_normal((cout, cin, 3, 3)).astype(np.float32)
  x, w = Tensor(xn).realize(), Tensor(wn).realize()
  si = kernel_of(x.conv2d(w, stride=stride, padding=1))
  k0 = lower(si.ast, si.name)
  k = optimize(k0, cpu_target)
  tile = next((o for o in k.applied_opts if o[0] == "TILE"), None)
  # (one vector per output row: the tile's vector loop the row; a stride-2 forward vectorized along its output channels
  # on a 16-lane host, frontend/nn_ops.py _conv_fwd_cout, has 16 lanes of channels instead)
  if tile is not None and tile[5] == 1 and tile[4] == size // stride and tile[3] == k0.global_ranges[-1].arg[0]:
    rows = {r.arg[0] for r in k0.global_ranges if r.src[0].arg == size // stride} - {tile[3]}   # the output rows y
    ups = [o for o in k.applied_opts if o[0] == "UPCAST"]
    assert ups and ups[-1][1] in rows, k.applied_opts   # not the output channels (the tile's own row loop: a new id)
  same_as_noopt(si, cpu_target)
  ref = torch.nn.functional.conv2d(torch.tensor(xn), torch.tensor(wn), stride=stride, padding=1).numpy()
  np.testing.assert_allclose(x.conv2d(w, stride=stride, padding=1).numpy(), ref, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("n", [4, 8, 16, 64])
def test_vector_kernels_round_bfloat16_by_bits(n):
  """A fused float -> bfloat16 -> float kernel whose loop takes vectors (any width that divides n): bfloat16 is stored as
  16-bit integers, so its lanes are cast one by one (a vector convert would turn 1.5 into the integer 1); equal to
  torch's bfloat16 rounding, and half beside it."""
  import torch
  vals = [1.5, -2.25, 3.0, 1000.0, 1.00390625, -0.0, 65504.0, 3.14159] * (n // 4)
  x = Tensor(np.array(vals[:n], np.float32))
  assert x.bfloat16().float().tolist() == torch.tensor(vals[:n]).bfloat16().float().tolist()
  assert x.half().float().tolist() == torch.tensor(vals[:n]).half().float().tolist()

def test_strided_conv_kernels_write_every_output_over_many_inputs():
  """The stride-2 conv of test_one_vector_rows_take_more_output_rows, built for AVX2, over 25 input draws: the
  heuristic's kernel (split across 2 cores) and NOOPT's (one core) each write every output (beam_runner fills outputs
  with NaN first). A stress test: when beam_runner keyed its programs by id() of the candidate, a freed candidate's id
  went to the next one, and NOOPT ran the 2-core code on one core in 2-4 draws of 25 (half its outputs unwritten).
  The two kernels are built once (a build is deterministic: the same AST and target give the same code; building them
  25 times was 9/10 of the test's time): each draw hands a fresh beam_runner fresh copies of them, the first freed
  after its run as each draw's build was, so the next one can take its id (a same-size object: likelier than before)."""
  import copy, torch
  from hcqrt.cpu.device import CPUDevice
  from compiler.target import Target
  global rng
  target, saved = Target.from_report(CPUDevice(isa="x86-64-v3").target), rng
  try:
    rng = np.random.default_rng(0)
    test_one_vector_rows_take_more_output_rows(2, 8, 16, 32, 2, target)   # draw 0: the tile's structure and the values
    if not host_runs(target): return
    si = kernel_of(Tensor(np.zeros((2, 8, 32, 32), np.float32)).conv2d(Tensor(np.zeros((16, 8, 3, 3), np.float32)), stride=2, padding=1))
    heuristic, noopt = (build(lower(si.ast, si.name), opts, target) for opts in (None, ()))
    for seed in range(25):
      run = beam_runner(si, DEV)
      got = run(copy.copy(heuristic))[1][0]
      np.testing.assert_allclose(got, run(copy.copy(noopt))[1][0], rtol=1e-5, atol=1e-4, err_msg=f"draw {seed}")
      rng = np.random.default_rng(seed)   # (the frontend's kernel of each draw, as before)
      xn, wn = rng.standard_normal((2, 8, 32, 32)).astype(np.float32), rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
      ref = torch.nn.functional.conv2d(torch.tensor(xn), torch.tensor(wn), stride=2, padding=1).numpy()
      np.testing.assert_allclose(Tensor(xn).conv2d(Tensor(wn), stride=2, padding=1).numpy(), ref, rtol=1e-4, atol=1e-4)
  finally: rng = saved
