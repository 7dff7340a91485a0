"""Data-parallel training across processes over MPI (mpi4py): `from frontend import distributed as dist`.

Launch one process per GPU (or several CPU processes) with `mpiexec -n N python train.py` or Slurm's `srun`;
`dist.init()` joins MPI.COMM_WORLD. Without a launcher the world is this one process: every collective returns at
once and mpi4py need not be installed. Collectives work in place on realized tensors: a CPU tensor's own memory is
handed to MPI (no copy); a GPU tensor is copied out by the device's copy engine into a host staging array, reduced
there, and copied back in. Why MPI and not a socket protocol of ours: ../shared/designs/multi-device.md section B.

Every collective is non-blocking MPI polled against a deadline (`timeout_s`, default $HCQRT_DIST_TIMEOUT or 600 s):
a rank that waits longer aborts the whole job with a message naming the collective, its byte count, the rank and
the time waited, instead of hanging forever. `init()` installs an excepthook that aborts the job, because an MPI
job whose rank died of an exception otherwise hangs in its peers' next collective (measured in the design doc, B.2).
`HCQRT_DIST_CHECK=N` compares a hash of the parameters across ranks every N `GradBucket.allreduce` calls and
raises naming the first rank whose parameters differ from rank 0's.

>>> from frontend import Tensor
>>> from frontend import distributed as dist
>>> dist.init(); dist.rank(), dist.world_size()     # no launcher here: a world of one
(0, 1)
>>> t = Tensor([1.0, 2.0]).realize()
>>> dist.allreduce([t], op="mean")[0].tolist()
[1.0, 2.0]
"""
from __future__ import annotations
import hashlib, os, sys, time, traceback
from typing import Any
from collections.abc import Sequence
import numpy as np
from compiler.dtypes import DType, dtypes, to_np
from compiler.memo import memo_put
from hcqrt.device import Device
from hcqrt.settings import flag
from frontend.tensor import Tensor

INSTALL_HINT = "pip install 'hcqrt[dist]'   (mpi4py and the MPICH wheel: pip install mpi4py mpich)"
# environment variables a launcher sets in every rank it starts: MPICH's hydra (PMI_*), Open MPI (OMPI_*, PMIX_*),
# Slurm's srun (SLURM_STEP_*: only inside a job step, so a plain `sbatch` shell is not mistaken for one). Open MPI 5's
# PRRTE launcher sets the same OMPI_COMM_WORLD_SIZE / OMPI_COMM_WORLD_LOCAL_RANK as 4.x's ORTE did (Open MPI 5.0 docs,
# tuning-apps/environment-var.rst "Environment variables set for MPI applications"; seen in 5.0.11's ranks), while
# PMIx hands rank and size to the library through PMIx_Get: PRRTE 5.0.11 exported PMIX_RANK but no PMIX_SIZE
_LAUNCHER_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS", "MPI_LOCALNRANKS")
_LOCAL_RANK_VARS = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "PMI_LOCAL_RANK", "LOCAL_RANK")

class DistributedError(RuntimeError):
  """A collective could not run (bad input, diverged ranks); the message names the collective and the tensors."""

class _State:
  comm: Any = None          # MPI.COMM_WORLD, None in a world of one
  MPI: Any = None           # the mpi4py.MPI module
  rank, size, local_rank = 0, 1, 0
  initialized = False
  checks = 0                # GradBucket.allreduce calls since init (for HCQRT_DIST_CHECK)

_S = _State()

def launched() -> bool:
  """True when an MPI launcher (mpiexec, mpirun, srun) started this process as one of several ranks.

  >>> launched() in (True, False)
  True
  """
  for v in _LAUNCHER_SIZE_VARS:
    try:
      if int(os.environ.get(v, "1")) > 1: return True
    except ValueError: pass
  return False

def _env_local_rank() -> int | None:
  for v in _LOCAL_RANK_VARS:
    if (s := os.environ.get(v)) is not None and s.strip().isdigit(): return int(s)
  return None

def _abort_hook(exc_type, exc, tb) -> None:
  # print this rank's traceback first (Abort's own message says nothing of the cause), then end every rank
  sys.stderr.write(f"rank {_S.rank}/{_S.size}: uncaught {exc_type.__name__}; aborting the MPI job\n")
  traceback.print_exception(exc_type, exc, tb, file=sys.stderr)
  _abort()

def _abort() -> None:
  # the launcher reads the ranks' output pipes on its own schedule and kills every rank on Abort: give it a moment
  # to forward what this rank just wrote, or the message that says why the job died can be lost
  sys.stdout.flush(); sys.stderr.flush()
  time.sleep(0.25)
  _S.comm.Abort(1)

def _gpu_count(base: str) -> int:
  """GPUs of kind `base` this node's kernel drivers expose (the mocks model one)."""
  if flag("MOCKGPU"): return 1
  if base == "NV": return sum(1 for f in os.listdir("/dev") if f.startswith("nvidia") and f[6:].isdigit()) if os.path.isdir("/dev") else 0
  if base == "AMD":
    d = "/sys/class/kfd/kfd/topology/nodes"
    if not os.path.isdir(d): return 0
    def is_gpu(n: str) -> bool:
      try: return int(open(f"{d}/{n}/gpu_id").read().strip() or 0) != 0
      except (OSError, ValueError): return False
    return sum(map(is_gpu, os.listdir(d)))
  return 0

def init(seed: int | None = None) -> None:
  """Join the job: MPI.COMM_WORLD under a launcher, a world of one without. Installs the abort-on-exception hook,
  seeds Tensor's RNG the same on every rank (`seed`, else rank 0's current seed) and makes the default device the
  GPU at index local_rank (modulo the node's GPU count) when the default device is a GPU. Calling it again is a no-op.

  >>> init(); world_size()
  1
  """
  if _S.initialized: return
  if launched():
    try:
      import mpi4py
      mpi4py.rc.threads = False   # one thread talks to MPI; the default THREAD_MULTIPLE costs locks in every call
      from mpi4py import MPI
    except ImportError as e:
      raise RuntimeError(f"dist.init: this process was started by an MPI launcher but mpi4py cannot be imported ({e}); "
                         f"install it: {INSTALL_HINT}") from e
    _S.MPI, _S.comm = MPI, MPI.COMM_WORLD
    _S.rank, _S.size = _S.comm.Get_rank(), _S.comm.Get_size()
    sys.excepthook = _abort_hook
    lr = _env_local_rank()
    if lr is None:
      node = _S.comm.Split_type(MPI.COMM_TYPE_SHARED)
      lr = node.Get_rank(); node.Free()
    _S.local_rank = lr
  _S.initialized = True
  Device.DEFAULT = gpu_for_local_rank(Device.DEFAULT, _S.local_rank, _gpu_count(Device.DEFAULT.split(":")[0]))
  if _S.comm is None:   # a world of one: the RNG stream stays as it is unless a seed is asked for
    if seed is not None: Tensor.manual_seed(seed)
    return
  s = np.array([Tensor._seed if seed is None else seed], np.int64)
  _wait(_S.comm.Ibcast([s, _S.MPI.INT64_T], root=0), "seed broadcast", s.nbytes, None)
  Tensor.manual_seed(int(s[0]))

def gpu_for_local_rank(default: str, local_rank: int, gpus: int) -> str:
  """The device a rank uses: with a GPU default (no index given) on a node of several GPUs, the one at local_rank
  modulo their count; else the default unchanged.

  >>> gpu_for_local_rank("NV", 3, 2), gpu_for_local_rank("NV", 3, 1), gpu_for_local_rank("NV:1", 0, 8), gpu_for_local_rank("CPU", 1, 8)
  ('NV:1', 'NV', 'NV:1', 'CPU')
  """
  base = default.split(":")[0]
  return f"{base}:{local_rank % gpus}" if base in ("NV", "AMD") and ":" not in default and gpus > 1 else default

def _need_init() -> None:
  if not _S.initialized: init()

def rank() -> int:
  """This process's rank in the job (0 without a launcher).

  >>> rank()
  0
  """
  _need_init(); return _S.rank
def world_size() -> int:
  """The number of ranks in the job (1 without a launcher).

  >>> world_size()
  1
  """
  _need_init(); return _S.size
def local_rank() -> int:
  """This process's rank among the ranks on its node: picks its GPU.

  >>> local_rank()
  0
  """
  _need_init(); return _S.local_rank

def _timeout(timeout_s: float | None) -> float:
  if timeout_s is not None: return float(timeout_s)
  try: return float(os.environ.get("HCQRT_DIST_TIMEOUT", "600"))
  except ValueError: raise ValueError(f"HCQRT_DIST_TIMEOUT={os.environ['HCQRT_DIST_TIMEOUT']!r} is not a number of seconds") from None

def _wait(req: Any, what: str, nbytes: int, timeout_s: float | None) -> None:
  """Poll a non-blocking MPI request until it completes; past the deadline, abort the job with a message.
  Sleeps between tests grow to 1 ms: more ranks than cores (CI) must leave the CPU to the rank being waited for."""
  deadline, start, nap = _timeout(timeout_s), time.monotonic(), 1e-5
  while not req.Test():
    waited = time.monotonic() - start
    if waited > deadline:
      sys.stderr.write(f"rank {_S.rank}/{_S.size}: collective {what} ({nbytes} bytes) timed out after {waited:.1f} s "
                       f"(deadline {deadline:g} s, HCQRT_DIST_TIMEOUT); another rank is stalled or dead; aborting the MPI job\n")
      _abort()
    time.sleep(nap); nap = min(nap * 2, 1e-3)

_MPI_TYPES = {dtypes.float32: "FLOAT", dtypes.float64: "DOUBLE", dtypes.int8: "INT8_T", dtypes.int16: "INT16_T", dtypes.int32: "INT32_T",
              dtypes.int64: "INT64_T", dtypes.uint8: "UINT8_T", dtypes.uint16: "UINT16_T", dtypes.uint32: "UINT32_T", dtypes.uint64: "UINT64_T"}

def _mpi_type(op: str, dtype: DType, shape: tuple) -> Any:
  if dtype not in _MPI_TYPES:
    raise DistributedError(f"{op}: dtype {dtype} of a tensor of shape {shape} has no MPI reduction type; supported: {', '.join(str(d) for d in _MPI_TYPES)}")
  return getattr(_S.MPI, _MPI_TYPES[dtype])

def _check_realized(op: str, tensors: Sequence[Tensor]) -> list[Tensor]:
  ts = list(tensors)
  for i, t in enumerate(ts):
    if not isinstance(t, Tensor): raise TypeError(f"{op}: item {i} is a {type(t).__name__}, not a Tensor")
    t.realize()   # (a pending in-place write lands first)
    lb = t.lazydata
    if lb.is_view or not lb.realized:
      raise DistributedError(f"{op}: tensor {i} of shape {t.shape} {t.dtype} is a view, not a buffer of its own; pass t.contiguous().realize()")
  return ts

def _run_on_buffer(t: Tensor, what: str, start: Any, timeout_s: float | None) -> None:
  """Run one collective on t's memory: `start(host_array)` returns the MPI request. CPU: the buffer itself; GPU:
  a host staging array filled and drained by the device's copy engine (allocator.copyout / copyin)."""
  lb, dt = t.lazydata, t.dtype
  n = int(np.prod(t.shape, dtype=np.int64)); nbytes = n * dt.itemsize
  if n == 0: return
  dev = Device[lb.device]
  if lb.device.split(":")[0] == "CPU":
    dev.synchronize()
    host = np.frombuffer(lb.buffer.raw.view(), np.uint8, count=nbytes).view(to_np(dt))   # the tensor's own memory
    _wait(start(host), what, nbytes, timeout_s)
    return
  host = np.empty(n, to_np(dt))   # staging: the copy engine fills it (copyout waits for the kernels that wrote t)
  dev.allocator.copyout(memoryview(host.view(np.uint8)), lb.buffer.raw)
  _wait(start(host), what, nbytes, timeout_s)
  dev.allocator.copyin(lb.buffer.raw, memoryview(host.view(np.uint8)))

def allreduce(tensors: Sequence[Tensor], op: str = "sum", timeout_s: float | None = None) -> list[Tensor]:
  """Reduce each realized tensor in place across all ranks (op: sum, mean or max); returns them. One collective per
  tensor: for many gradients use GradBucket or allreduce_grads (one per dtype). `mean` is the sum scaled by 1/world
  in a kernel.

  >>> t = Tensor([3, 1]).realize()
  >>> allreduce([t], op="max")[0].tolist()
  [3, 1]
  """
  if op not in ("sum", "mean", "max"): raise ValueError(f"allreduce: op must be 'sum', 'mean' or 'max', not {op!r}")
  ts = _check_realized(f"allreduce({op})", tensors)
  if op == "mean":
    for i, t in enumerate(ts):
      if not t.dtype.is_float: raise DistributedError(f"allreduce(mean): tensor {i} of shape {t.shape} has integer dtype {t.dtype}; use op='sum'")
  _need_init()
  if _S.comm is None: return ts
  for t in ts:
    mt, mop = _mpi_type(f"allreduce({op})", t.dtype, t.shape), _S.MPI.MAX if op == "max" else _S.MPI.SUM
    _run_on_buffer(t, f"allreduce({op}) of {t.shape} {t.dtype}", lambda h, mt=mt, mop=mop: _S.comm.Iallreduce(_S.MPI.IN_PLACE, [h, mt], mop), timeout_s)
  if op == "mean": Tensor.realize(*[t.assign(t * (1.0 / _S.size)) for t in ts])
  return ts

def broadcast(tensors: Sequence[Tensor], root: int = 0, timeout_s: float | None = None) -> list[Tensor]:
  """Overwrite each realized tensor in place with rank `root`'s (initial weights); returns them.

  >>> broadcast([Tensor([1.5]).realize()])[0].tolist()
  [1.5]
  """
  ts = _check_realized("broadcast", tensors)
  _need_init()
  if not 0 <= root < _S.size: raise ValueError(f"broadcast: root {root} is not a rank of this job of {_S.size}")
  if _S.comm is None: return ts
  for t in ts:
    _run_on_buffer(t, f"broadcast(root={root}) of {t.shape} {t.dtype}", lambda h: _S.comm.Ibcast([h.view(np.uint8), _S.MPI.BYTE], root=root), timeout_s)
  return ts

def barrier(timeout_s: float | None = None) -> None:
  """Wait until every rank reaches this point (with the collectives' deadline).

  >>> barrier()
  """
  _need_init()
  if _S.comm is not None: _wait(_S.comm.Ibarrier(), "barrier", 0, timeout_s)

def shutdown() -> None:
  """Leave the job: a last barrier, the default excepthook back. MPI itself finalizes at exit (mpi4py's atexit).

  >>> shutdown()
  """
  if _S.comm is not None:
    barrier()
    sys.excepthook = sys.__excepthook__
  _S.comm, _S.initialized = None, False

def params_digest(params: Sequence[Tensor]) -> bytes:
  """A hash of the parameters' bytes (read to the host: a debug check, not for every step).

  >>> len(params_digest([Tensor([1.0])]))
  32
  """
  h = hashlib.sha256()
  for p in params: h.update(p.numpy().tobytes())
  return h.digest()

def check_params(params: Sequence[Tensor]) -> None:
  """Raise DistributedError naming the first rank whose parameters differ from rank 0's (every rank raises).

  >>> check_params([Tensor([1.0])])
  """
  _need_init()
  if _S.comm is None: return
  mine = np.frombuffer(params_digest(params), np.uint8)
  every = np.empty((_S.size, mine.size), np.uint8)
  _wait(_S.comm.Iallgather([mine, _S.MPI.BYTE], [every, _S.MPI.BYTE]), "check_params allgather", every.nbytes, None)
  bad = [r for r in range(_S.size) if not np.array_equal(every[r], every[0])]
  if bad:
    raise DistributedError(f"HCQRT_DIST_CHECK: the parameters of rank {bad[0]} diverged from rank 0's "
                           f"(ranks that differ: {bad}; {len(params)} parameters)")

class GradBucket:
  """The gradients of `params` packed into one flat buffer per dtype, so a step is one collective per dtype.

  Works inside TinyJit: `pack()` writes the gradients into the flat buffers in place (a replay writes them again),
  `allreduce()` runs between two jitted functions, `unpack()` points each `.grad` at its slice of the reduced buffer
  (scaled by 1/world for op='mean': the scale fuses into the optimizer's kernel).

  >>> from frontend import optim
  >>> w = Tensor([1.0, 2.0], requires_grad=True); opt = optim.SGD([w], lr=0.5)
  >>> bucket = GradBucket([w])
  >>> _ = (w * w).sum().backward(); bucket.pack(); bucket.allreduce(); bucket.unpack(); opt.step()
  >>> w.tolist()
  [0.0, 0.0]
  """
  def __init__(self, params: Sequence[Tensor], op: str = "mean"):
    if op not in ("sum", "mean"): raise ValueError(f"GradBucket: op must be 'sum' or 'mean', not {op!r}")
    self.params, self.op = list(params), op
    if not self.params: raise ValueError("GradBucket: no parameters")
    self.groups: dict[tuple[str, DType], list[int]] = {}
    for i, p in enumerate(self.params): self.groups.setdefault((p.device, p.dtype), []).append(i)
    self.flat = {k: Tensor.zeros(sum(self.params[i].numel() for i in ix), dtype=k[1], device=k[0]).contiguous().realize()
                 for k, ix in self.groups.items()}
  def pack(self) -> None:
    """Copy every parameter's .grad into the flat buffers (kernels; in place)."""
    for k, ix in self.groups.items():
      for i in ix:
        p = self.params[i]
        if p.grad is None: raise DistributedError(f"GradBucket.pack: parameter {i} {p.shape} {p.dtype} has no gradient; call .backward() first")
      self.flat[k].assign(Tensor.cat(*[self.params[i].grad.reshape(-1) for i in ix]) if len(ix) > 1 else self.params[ix[0]].grad.reshape(-1))
    Tensor.realize(*self.flat.values())
  def allreduce(self, timeout_s: float | None = None) -> None:
    """Sum the flat buffers across ranks in place: one collective per dtype (and the parameter check if asked)."""
    _need_init()
    _S.checks += 1
    if (every := _check_every()) and _S.checks % every == 0: check_params(self.params)
    if _S.comm is None: return
    for (dev, dt), t in self.flat.items():
      mt = _mpi_type("GradBucket.allreduce", dt, t.shape)
      _run_on_buffer(t, f"allreduce(sum) of the gradient bucket ({len(self.groups[(dev, dt)])} {dt} gradients on {dev})",
                     lambda h, mt=mt: _S.comm.Iallreduce(_S.MPI.IN_PLACE, [h, mt], _S.MPI.SUM), timeout_s)
  def unpack(self) -> None:
    """Point each .grad at its slice of the reduced flat buffer (lazy: it fuses into what reads it, the optimizer)."""
    scale = 1.0 / world_size() if self.op == "mean" else 1.0
    for k, ix in self.groups.items():
      off = 0
      for i in ix:
        p = self.params[i]; n = p.numel()
        g = self.flat[k][off:off + n].reshape(p.shape)
        p.grad = g * scale if scale != 1.0 else g
        off += n

def _check_every() -> int:
  v = os.environ.get("HCQRT_DIST_CHECK", "0")
  try: return max(int(v), 0)
  except ValueError: raise ValueError(f"HCQRT_DIST_CHECK={v!r}: expected a number of steps (1: every step)") from None

# a GradBucket per parameter list, which it holds (with their flat buffers): bounded, so that models made and dropped
# in a long process are not kept alive here (a full table is emptied: compiler/memo.py; a training loop uses one list)
_buckets: dict[tuple, GradBucket] = {}
BUCKETS_MAX = 16
def allreduce_grads(params: Sequence[Tensor], op: str = "mean", timeout_s: float | None = None) -> None:
  """Reduce every parameter's .grad across ranks (op: mean or sum) with one collective per dtype, outside TinyJit:
  pack, allreduce, unpack of a GradBucket kept per parameter list. Inside a jitted train step use GradBucket.

  >>> w = Tensor([2.0], requires_grad=True); _ = (w * 3).sum().backward()
  >>> allreduce_grads([w]); w.grad.tolist()
  [3.0]
  """
  key = (tuple(id(p) for p in params), op)
  if (b := _buckets.get(key)) is None or any(x is not y for x, y in zip(b.params, params)): b = memo_put(_buckets, key, GradBucket(params, op), BUCKETS_MAX)
  b.pack(); b.allreduce(timeout_s); b.unpack()
