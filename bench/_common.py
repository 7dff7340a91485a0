"""Shared by the benchmark's child processes (bench/_ours.py, bench/_oracle.py): the timer, the inputs, the sizes.

Every child builds the same inputs from the same seed, so ours, numpy and torch compute on identical data.
Only numpy is imported here: the numpy and torch children must not pull in our stack, and vice versa.

  >>> t = median_time(lambda: sum(range(1000)), min_reps=3, max_reps=5, budget_s=0.1)
  >>> t["reps"] >= 3 and t["median_s"] > 0
  True
"""
from __future__ import annotations
import json, os, statistics, sys, time, traceback
from collections.abc import Callable
import numpy as np

# the sizes of one run; run.py picks a set and hands it to every child as JSON
# conv: [batch, in channels, height, width, channels of conv 1, channels of conv 2]: two 3x3 convs, padding 1
# beam: matmul sizes searched with BEAM=2 (in a child of their own, with a private cache: the search is timed too)
FULL = {"matmul": [512, 1024, 2048], "ew": 16 * 1024 * 1024, "sum": 64 * 1024 * 1024, "softmax": [4096, 4096], "compile": 12,
        "conv": [32, 3, 32, 32, 32, 64], "beam": [1024, 2048], "convvar": [32, 64, 32]}
QUICK = {"matmul": [128, 256, 512], "ew": 1024 * 1024, "sum": 4 * 1024 * 1024, "softmax": [512, 512], "compile": 6,
         "conv": [4, 3, 16, 16, 8, 16], "beam": [256], "convvar": [4, 16, 16]}
# convtrain: the conv sizes, forward + backward (weight gradients, the input gradient of conv 2) as a TinyJit step
# convvar: [batch, channels, size]: one conv of each variant below (channels -> channels, size x size), forward alone and
# forward + backward (input and weight gradients) as a TinyJit step
BENCHES = ("matmul", "ew", "sum", "softmax", "compile", "conv", "convtrain", "convvar", "beam")

# torch at the ISA ours is compiled for: CPU_ISA (hcqrt/cpu/isa.py) narrower than the host's vectors gets torch as it
# runs on such a host. ATEN_CPU_CAPABILITY moves only ATen's own kernels; oneDNN (its convolutions, matmuls) picks its ISA
# itself and needs ONEDNN_MAX_CPU_ISA too (bench/README.md "Issue 28 convs"). Both are read when torch is imported: they go
# into the torch child's environment. (name torch's ISA goes by, its environment) per CPU_ISA level
TORCH_AT_ISA = {"x86-64-v3": ("AVX2", {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}),
                "x86-64-v2": ("SSE4.1", {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"}),
                "x86-64": ("SSE4.1", {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"})}
_VECTOR_BYTES = {"x86-64-v4": 64, "x86-64-v3": 32, "x86-64-v2": 16, "x86-64": 16}
# numpy's OpenBLAS at the same ISA (its DYNAMIC_ARCH kernel names): what it runs on a host of that level
BLAS_AT_ISA = {"AVX2": {"OPENBLAS_CORETYPE": "Haswell"}, "SSE4.1": {"OPENBLAS_CORETYPE": "Nehalem"}}

def torch_isa_env(cpu_isa: str | None = None, host_flags: frozenset[str] | None = None) -> tuple[str, dict[str, str]]:
  """(torch's ISA in words, the environment that puts torch there) for a run of ours at `cpu_isa` (None: $CPU_ISA).

  Empty environment where ours targets the host's own vectors (native, or a level as wide as the host's): torch then runs
  natively too. `host_flags`: the host's CPU flags (None: /proc/cpuinfo).

  >>> torch_isa_env("x86-64-v3", frozenset({"avx2", "avx512f"}))
  ('AVX2', {'ATEN_CPU_CAPABILITY': 'avx2', 'ONEDNN_MAX_CPU_ISA': 'AVX2'})
  >>> torch_isa_env("x86-64-v3", frozenset({"avx2"})), torch_isa_env("native", frozenset({"avx2", "avx512f"}))
  (('native', {}), ('native', {}))
  """
  isa = (os.environ.get("CPU_ISA", "") if cpu_isa is None else cpu_isa).strip() or "native"
  if isa not in TORCH_AT_ISA: return "native", {}
  if host_flags is None:
    try:
      with open("/proc/cpuinfo") as f: host_flags = frozenset(next((l for l in f if l.startswith("flags")), ":").split(":", 1)[1].split())
    except OSError: host_flags = frozenset()
  host = 64 if "avx512f" in host_flags else 32 if "avx2" in host_flags else 16
  return TORCH_AT_ISA[isa] if _VECTOR_BYTES[isa] < host else ("native", {})

def median_time(fn: Callable[[], object], setup: Callable[[], object] | None = None, warmup: int = 1,
                min_reps: int = 3, max_reps: int = 20, budget_s: float = 2.0) -> dict:
  """Median wall time of `fn(setup())`-style runs: `setup` (untimed) builds what `fn` consumes.

  Runs `warmup` untimed calls (the first call of ours compiles), then at least `min_reps` timed calls and
  more until `budget_s` of timed work has passed or `max_reps` is reached.
  """
  call = (lambda: fn(setup())) if setup is not None else fn
  for _ in range(warmup): call()
  times: list[float] = []
  while len(times) < min_reps or (sum(times) < budget_s and len(times) < max_reps):
    arg = setup() if setup is not None else None
    t0 = time.perf_counter()
    fn(arg) if setup is not None else fn()
    times.append(time.perf_counter() - t0)
  return {"median_s": statistics.median(times), "min_s": min(times), "reps": len(times)}

def rng() -> np.random.Generator: return np.random.default_rng(1234)

def matmul_inputs(n: int) -> tuple[np.ndarray, np.ndarray]:
  r = rng()
  return r.standard_normal((n, n), dtype=np.float32), r.standard_normal((n, n), dtype=np.float32)

def ew_inputs(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  r = rng()
  return tuple(r.standard_normal(n, dtype=np.float32) for _ in range(3))  # type: ignore[return-value]

def sum_input(n: int) -> np.ndarray: return rng().random(n, dtype=np.float32)

def conv_inputs(spec: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Input (N, C, H, W) and the two 3x3 weights of the conv benchmark."""
  n, c, h, w, c1, c2 = spec
  r = rng()
  return (r.standard_normal((n, c, h, w), dtype=np.float32), r.standard_normal((c1, c, 3, 3), dtype=np.float32) / 3,
          r.standard_normal((c2, c1, 3, 3), dtype=np.float32) / 3)

def conv_flops(spec: list[int]) -> int:
  n, c, h, w, c1, c2 = spec
  return 2 * n * h * w * 9 * (c * c1 + c1 * c2)

def conv_train_flops(spec: list[int]) -> int:
  """Forward (both convs) + weight gradients (both) + input gradient of conv 2 (the input needs none): each costs
  as much as that conv's forward."""
  n, c, h, w, c1, c2 = spec
  f1, f2 = 2 * n * h * w * 9 * c * c1, 2 * n * h * w * 9 * c1 * c2
  return 2 * f1 + 3 * f2

def conv_variants(spec: list[int]) -> dict[str, tuple[tuple[int, ...], dict]]:
  """name -> (weight shape, conv2d keyword arguments) of the conv variants (issue 17: none may fall off a cliff)."""
  _n, c, _h = spec
  return {"dense": ((c, c, 3, 3), {"padding": 1}), "dw": ((c, 1, 3, 3), {"padding": 1, "groups": c}),
          "g4": ((c, c // 4, 3, 3), {"padding": 1, "groups": 4}), "1x1": ((c, c, 1, 1), {}),
          "s2": ((c, c, 3, 3), {"padding": 1, "stride": 2}), "d2": ((c, c, 3, 3), {"padding": 2, "dilation": 2})}

def convvar_inputs(spec: list[int], name: str) -> tuple[np.ndarray, np.ndarray]:
  n, c, h = spec
  r = rng()
  return r.standard_normal((n, c, h, h), dtype=np.float32), r.standard_normal(conv_variants(spec)[name][0], dtype=np.float32) / 4

def convvar_flops(spec: list[int], name: str) -> int:
  """The forward's multiply-adds x 2 (forward + backward: 3x, the input and the weight gradient each cost a forward)."""
  n, _c, h = spec
  (co, ci, kh, kw), kwargs = conv_variants(spec)[name]
  o = (h + 2 * kwargs.get("padding", 0) - kwargs.get("dilation", 1) * (kh - 1) - 1) // kwargs.get("stride", 1) + 1
  return 2 * n * co * o * o * ci * kh * kw

def softmax_input(rows: int, cols: int) -> np.ndarray: return rng().standard_normal((rows, cols), dtype=np.float32) * 4

def run_all(spec: dict, only: list[str], benches: dict[str, Callable[[dict], list[dict]]]) -> list[dict]:
  """Run the selected benchmarks; a failing one becomes a row with "error" instead of killing the others."""
  rows: list[dict] = []
  for name in only:
    if name not in benches: continue
    try: rows += benches[name](spec)
    except Exception as e:
      traceback.print_exc(file=sys.stderr)
      rows.append({"bench": name, "key": name, "error": f"{type(e).__name__}: {e}"[:300]})
  return rows

def emit(result: dict) -> None:
  # the parent reads the last stdout line as JSON; everything else a child says goes to stderr
  sys.stdout.write(json.dumps(result) + "\n")
  sys.stdout.flush()
