"""frontend/distributed.py: data-parallel training over MPI, checked by launching real jobs with `mpiexec` (the MPICH
wheel of the `dist` extra in CI; Open MPI 4 or 5 with OPEN_MPI_ENV) on this machine: 2 and 4 ranks (4 is more ranks
than CI's 2 cores), over shared memory and over TCP on the loopback interface. The ranks run tests/dist/dp_train.py
and tests/dist/gpu_step.py and write what they computed to one file each, which the tests compare. Without mpi4py
these tests skip, naming the install command, unless HCQRT_REQUIRE_DIST=1 (CI sets it: .ci/run) makes that a
failure."""
import gc, os, pathlib, re, shutil, subprocess, sys, sysconfig, time, weakref
import numpy as np
import pytest
from frontend import Tensor, optim
from frontend import distributed as dist
from tests.child_env import device_env

ROOT = pathlib.Path(__file__).resolve().parents[3]
DP, GPU = ROOT / "tests" / "dist" / "dp_train.py", ROOT / "tests" / "dist" / "gpu_step.py"
# MPICH control variables (listed with their meaning by the wheel's `mpivars`): MPIR_CVAR_NOLOCAL=1 treats every rank
# as if on another node, so no shared memory; the ofi netmod with libfabric's tcp provider on `lo`; DEBUG_SUMMARY=1
# makes ch4:ofi print the provider it chose ("libfabric provider: tcp - 127.0.0.1/32"), which the test checks
TCP_ENV = {"MPIR_CVAR_NOLOCAL": "1", "MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo", "MPIR_CVAR_DEBUG_SUMMARY": "1"}
LAUNCHER_VARS = ("PMI_", "OMPI_", "PMIX_", "PRTE_", "SLURM_", "MPI_LOCAL", "HYDRA_", "MPIR_CVAR_", "FI_", "UCX_", "HCQRT_DIST_")

def _mpiexec() -> str | None:
  # pip puts the wheel's mpiexec next to the interpreter (a venv's bin, pyenv's versions/X/bin: not always on PATH)
  for d in (os.path.dirname(sys.executable), sysconfig.get_path("scripts")):
    if os.access(p := os.path.join(d, "mpiexec"), os.X_OK): return p
  return shutil.which("mpiexec")

def _launcher() -> str:
  """Which MPI's `mpiexec` this is: 'mpich' (Hydra), 'open mpi' (ORTE/PRRTE) or the first line of its --version."""
  try: out = subprocess.run([_mpiexec(), "--version"], capture_output=True, text=True, timeout=30).stdout
  except (OSError, subprocess.TimeoutExpired) as e: return f"unknown ({e})"
  if "HYDRA" in out: return "mpich"
  return "open mpi" if re.search(r"Open ?MPI|OpenRTE|PRRTE|PMIx Reference RunTime", out) else (out.splitlines() or ["unknown"])[0]

def _have_mpi() -> str | None:
  try: import mpi4py  # noqa: F401
  except ImportError: return "mpi4py is not installed"
  return None if _mpiexec() else "no mpiexec next to the interpreter or on PATH"

_why_not = _have_mpi()
needs_mpi = pytest.mark.skipif(_why_not is not None and os.environ.get("HCQRT_REQUIRE_DIST", "0") in ("", "0"),
                               reason=f"{_why_not}; install: {dist.INSTALL_HINT}")

# Open MPI's mpiexec refuses to start as root (GPU containers often run as root) unless both of these are set, and
# more ranks than cores unless oversubscription is allowed (the 4-rank tests on a small box). Open MPI 5 maps with
# PRRTE, which reads its own PRTE_MCA_ variables and ignores 4.x's OMPI_MCA_rmaps_base_oversubscribe (5.0.11 refused
# `-n 4` on 2 cores with it: "There are not enough slots available in the system"); 5's name for it is
# rmaps_default_mapping_policy=:oversubscribe (docs/mca.rst "MCA Parameter Changes Between Open MPI 4.x and newer
# releases", and its "Environment variables" section: PRRTE's prefix is PRTE_MCA_). Each version ignores the other's.
# Open MPI 4 also refuses any launch, even of ranks on this machine alone, where neither ssh nor rsh is on PATH (GPU
# containers often have neither): its rsh launcher looks its agent up when it opens and aborts if it is missing
# (orte/mca/plm/rsh/plm_rsh_component.c:329-336 in v4.1.x; open-mpi/ompi issue 12386). A program that exists, `false`,
# as the agent lets it start; ranks on this machine are forked by mpiexec itself, so the agent is never run (and a
# launch on another node would fail at once). Open MPI 5 passes the variable on to PRRTE as plm_ssh_agent
# (prrte src/mca/schizo/ompi/schizo_ompi.c check_prte_overlap), where a missing default agent only deselects ssh
# (5.0.11 started 2 ranks with no ssh on PATH, with and without the variable). MPICH's Hydra reads none of these.
# See the README's Open MPI note.
OPEN_MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_plm_rsh_agent": "false",
                "OMPI_MCA_rmaps_base_oversubscribe": "1", "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe"}
# Open MPI over TCP on `lo`, its counterpart of TCP_ENV: the ob1 point-to-point layer (not cm/ucx, which bring their
# own transports) with only the tcp and self BTLs (no shared memory: `vader` in 4.x, `sm` in 5.x) on `lo`. Verbosity 1
# of the btl framework makes ob1's bml print the BTL it picked for each peer ("mca: bml: Using tcp btl for send to
# [[job,1],rank] on node ...", ompi/mca/bml/r2/bml_r2.c mca_bml_r2_endpoint_add_btl), which the test counts
OPEN_MPI_TCP_ENV = {"OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "tcp,self", "OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_btl_base_verbose": "1"}

def _env(device: str = "CPU", **extra: str) -> dict:
  """The ranks' environment: none of a launcher's variables, `device` named (not the caller's, nor a probed GPU)."""
  return {k: v for k, v in device_env(ROOT, device).items() if not k.startswith(LAUNCHER_VARS)} | OPEN_MPI_ENV | extra

def _launch(n: int, script: pathlib.Path, *args: str, env: dict | None = None, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
  if _why_not: pytest.fail(f"HCQRT_REQUIRE_DIST=1 but {_why_not}; install: {dist.INSTALL_HINT}")
  st = time.monotonic()
  r = subprocess.run([_mpiexec(), "-n", str(n), sys.executable, str(script), *args], cwd=ROOT, env=env or _env(),
                     capture_output=True, text=True, timeout=timeout)
  return r, time.monotonic() - st

def _lines(out: pathlib.Path, n: int) -> str:
  files = sorted(out.glob("rank*.txt"))
  assert len(files) == n, f"{len(files)} of {n} ranks wrote their results"
  return "".join(f.read_text() for f in files)

@needs_mpi
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_data_parallel_equals_one_process(n, transport, tmp_path):
  mpi = _launcher() if not _why_not else "mpich"
  if transport == "tcp" and mpi not in ("mpich", "open mpi"): pytest.skip(f"no TCP-on-lo settings for this mpiexec: {mpi}")
  r, _ = _launch(n, DP, "--out", str(tmp_path), env=_env(**({} if transport == "shm" else TCP_ENV if mpi == "mpich" else OPEN_MPI_TCP_ENV)))
  assert r.returncode == 0, r.stdout + r.stderr
  if transport == "tcp" and mpi == "mpich": assert "libfabric provider: tcp - 127.0.0.1" in r.stdout + r.stderr, "the job did not run over TCP on lo"
  if transport == "tcp" and mpi == "open mpi":   # every rank reaches each of the n-1 others over tcp, none over shared memory
    picked = re.findall(r"mca: bml: Using (\w+) btl for send to \S+", r.stdout + r.stderr)
    assert picked.count("tcp") == n * (n - 1) and set(picked) <= {"tcp", "self"}, f"the job did not run over TCP: {picked}"
  text = _lines(tmp_path, n)
  assert sorted(int(rk) for rk, w in re.findall(r"rank (\d+) device CPU world (\d+)", text) if int(w) == n) == list(range(n))
  for variant in ("float", "exact"):
    digests = re.findall(rf"rank \d+ {variant} digest ([0-9a-f]{{64}})", text)
    assert len(digests) == n and len(set(digests)) == 1, f"{variant}: ranks differ: {digests}"   # bit-identical ranks
    diffs = [float(d) for d in re.findall(rf"rank \d+ {variant} maxdiff (\S+)", text)]
    assert len(diffs) == n
    if variant == "exact": assert diffs == [0.0] * n, f"exact variant: {diffs} elements differ from one process"
    else: assert max(diffs) <= 1.0, f"float variant: {max(diffs)} x (atol 1e-6 + rtol 1e-5) from one process"
    losses = [tuple(map(float, x)) for x in re.findall(rf"rank \d+ {variant} loss (\S+) (\S+)", text)]
    assert sum(b for _, b in losses) < sum(a for a, _ in losses), f"{variant}: the loss did not go down: {losses}"

@needs_mpi
def test_crashing_rank_ends_the_job(tmp_path):
  r, _ = _launch(2, DP, "--only", "float", "--fail-rank", "1", timeout=60)
  end = time.time()
  assert r.returncode != 0
  assert "rank 1/2: uncaught RuntimeError; aborting the MPI job" in r.stderr, r.stderr
  m = re.search(r"injected failure on rank 1 at step 2 at time (\d+\.\d+)", r.stderr)
  assert m, r.stderr
  assert end - float(m.group(1)) < 10, f"the job took {end - float(m.group(1)):.1f} s to end after rank 1 raised"

@needs_mpi
def test_stalled_rank_aborts_naming_the_collective():
  r, took = _launch(2, DP, "--only", "float", "--stall-rank", "1", env=_env(HCQRT_DIST_TIMEOUT="2"), timeout=60)
  assert r.returncode != 0 and took < 40, (took, r.stderr)   # rank 1 would sleep 60 s: the abort ended it
  assert re.search(r"rank 0/2: collective allreduce\(sum\) of the gradient bucket \(4 \S+ gradients on CPU\) \(848 bytes\) "
                   r"timed out after 2\.\d s", r.stderr), r.stderr

@needs_mpi
def test_param_check_names_the_diverged_rank():
  r, _ = _launch(2, DP, "--only", "float", "--diverge-rank", "1", env=_env(HCQRT_DIST_CHECK="1"), timeout=60)
  assert r.returncode != 0
  assert "HCQRT_DIST_CHECK: the parameters of rank 1 diverged from rank 0's" in r.stderr, r.stderr

@needs_mpi
def test_mock_gpu_ranks_stage_through_host(tmp_path):
  r, _ = _launch(2, GPU, str(tmp_path), env=_env("NV", MOCKGPU="1"))
  assert r.returncode == 0, r.stdout + r.stderr
  text = _lines(tmp_path, 2)
  assert "rank 0 gpu ok NV NVBuffer" in text and "rank 1 gpu ok NV NVBuffer" in text

@needs_mpi
def test_example_trains_data_parallel():
  r, _ = _launch(2, ROOT / "examples" / "train_digits_dp.py", "--steps", "6", "--global-batch", "32")
  assert r.returncode == 0, r.stdout + r.stderr
  m = re.search(r"world 2: 6 steps .* parameters identical on every rank \(sha256 ([0-9a-f]{16})", r.stdout)
  assert m, r.stdout

# ---- without a launcher: a world of one, and the errors (no mpi4py needed)

def test_world_of_one_is_plain_training(tmp_path):
  r = subprocess.run([sys.executable, str(DP), "--out", str(tmp_path)], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stderr
  text = _lines(tmp_path, 1)
  assert "rank 0 exact maxdiff 0\n" in text and "world 1" in text

def test_launcher_without_mpi4py_says_what_to_install():
  code = ("import sys\n"
          "class _Block:\n"
          "  def find_spec(self, name, path=None, target=None):\n"
          "    if name.split('.')[0] == 'mpi4py': raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
          "sys.meta_path.insert(0, _Block())\n"
          "from frontend import distributed as dist\n"
          "dist.init()\n")
  r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(PMI_SIZE="2", PMI_RANK="0"), capture_output=True, text=True, timeout=60)
  assert r.returncode != 0
  assert "started by an MPI launcher but mpi4py cannot be imported" in r.stderr and "pip install 'hcqrt[dist]'" in r.stderr

def test_launched_reads_the_launchers_variables(monkeypatch):
  for k in [k for k in os.environ if k.startswith(LAUNCHER_VARS)]: monkeypatch.delenv(k)
  assert not dist.launched()
  monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "1"); assert not dist.launched()   # one task: nothing to join
  monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4"); assert dist.launched()

def test_collectives_refuse_bad_input():
  dist.init()
  t = Tensor([[1.0, 2.0], [3.0, 4.0]]).realize()
  with pytest.raises(dist.DistributedError, match=r"allreduce\(sum\): tensor 0 of shape \(2, 1\) .* is a view"): dist.allreduce([t[:, :1]])
  with pytest.raises(ValueError, match="op must be 'sum', 'mean' or 'max', not 'min'"): dist.allreduce([t], op="min")
  with pytest.raises(dist.DistributedError, match=r"allreduce\(mean\): tensor 0 of shape \(2,\) has integer dtype"): dist.allreduce([Tensor([1, 2]).realize()], op="mean")
  with pytest.raises(TypeError, match="allreduce.*item 0 is a ndarray"): dist.allreduce([np.ones(2)])
  with pytest.raises(ValueError, match="broadcast: root 3 is not a rank of this job of 1"): dist.broadcast([t], root=3)
  w = Tensor([1.0], requires_grad=True)
  with pytest.raises(dist.DistributedError, match=r"GradBucket.pack: parameter 0 \(1,\) .* has no gradient"): dist.GradBucket([w]).pack()

def test_world_of_one_bucket_is_the_plain_gradient():
  dist.init()
  w, v = Tensor([1.0, 2.0], requires_grad=True), Tensor([[3.0]], requires_grad=True)
  opt = optim.SGD([w, v], lr=0.25)
  ((w * w).sum() + (v * 4).sum()).backward()
  dist.allreduce_grads([w, v])
  assert w.grad.tolist() == [2.0, 4.0] and v.grad.tolist() == [[4.0]]
  opt.step()
  assert w.tolist() == [0.5, 1.0] and v.tolist() == [[2.0]]

def test_buckets_of_dropped_models_do_not_pile_up(monkeypatch):
  """allreduce_grads keeps a GradBucket per parameter list, which holds the parameters: models made and dropped one
  after another in a long process must not all stay alive in that table."""
  monkeypatch.setattr(dist, "_buckets", {})
  dist.init()
  alive = []
  for i in range(3 * dist.BUCKETS_MAX):
    w = Tensor([float(i)], requires_grad=True)
    (w * 2).sum().backward()
    dist.allreduce_grads([w])
    assert w.grad.tolist() == [2.0]
    alive.append(weakref.ref(w))
    del w
  gc.collect()
  assert len(dist._buckets) <= dist.BUCKETS_MAX and sum(r() is not None for r in alive) <= dist.BUCKETS_MAX

# ---- the buffer paths and the deadline, on a stand-in for mpi4py's MPI (no launcher needed)

class _FakeRequest:
  def __init__(self, done_after: int, on_done=None): self.left, self.on_done = done_after, on_done
  def Test(self) -> bool:
    self.left -= 1
    if self.left <= 0 and self.on_done: self.on_done(); self.on_done = None
    return self.left <= 0

class _FakeComm:
  """Two ranks that hold the same data: a sum doubles the buffer. Records the address of every buffer it is given."""
  def __init__(self, done_after: int = 3): self.addresses, self.done_after, self.aborted = [], done_after, None
  def Iallreduce(self, sendbuf, recv, op):
    arr = recv[0]; self.addresses.append(arr.__array_interface__["data"][0])
    def reduce(): arr[...] = arr * 2 if op == "SUM" else arr
    return _FakeRequest(self.done_after, reduce)
  def Abort(self, code: int): self.aborted = code; raise SystemExit(code)

class _FakeMPI:
  IN_PLACE, SUM, MAX, FLOAT, INT32_T, BYTE = "IN_PLACE", "SUM", "MAX", "FLOAT", "INT32_T", "BYTE"

@pytest.fixture
def fake_world(monkeypatch):
  dist.init()
  comm = _FakeComm()
  monkeypatch.setattr(dist._S, "comm", comm); monkeypatch.setattr(dist._S, "MPI", _FakeMPI); monkeypatch.setattr(dist._S, "size", 2)
  return comm

def test_cpu_tensor_is_reduced_in_its_own_memory(fake_world):
  t = Tensor([1.0, 2.0, 3.0], device="CPU").realize()
  addr = t.lazydata.buffer.raw.address
  dist.allreduce([t], op="sum")
  assert fake_world.addresses == [addr], "MPI was handed a copy, not the tensor's buffer"
  assert t.tolist() == [2.0, 4.0, 6.0]
  dist.allreduce([t], op="mean")   # the sum, then 1/world in a kernel
  assert t.tolist() == [2.0, 4.0, 6.0] and fake_world.addresses[-1] == addr

def test_grad_bucket_is_one_collective_for_all_grads(fake_world):
  ps = [Tensor([1.0, 2.0], requires_grad=True), Tensor([[3.0], [4.0]], requires_grad=True), Tensor([5.0], requires_grad=True)]
  sum((p * p).sum() for p in ps).backward()
  b = dist.GradBucket(ps, op="mean")
  b.pack(); b.allreduce(); b.unpack()
  assert len(fake_world.addresses) == 1, f"{len(fake_world.addresses)} collectives for one bucket of one dtype"
  assert [p.grad.tolist() for p in ps] == [[2.0, 4.0], [[6.0], [8.0]], [10.0]]   # (2g + 2g) / 2

def test_collective_past_its_deadline_aborts_naming_it(fake_world, capsys):
  fake_world.done_after = 10 ** 9   # the other rank never arrives
  t = Tensor([1.0, 2.0]).realize()
  with pytest.raises(SystemExit): dist.allreduce([t], op="sum", timeout_s=0.05)
  assert fake_world.aborted == 1
  assert re.search(r"rank 0/2: collective allreduce\(sum\) of \(2,\) \S+ \(8 bytes\) timed out after 0\.\d s", capsys.readouterr().err)
