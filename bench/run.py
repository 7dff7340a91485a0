"""hcqrt CPU benchmark: ours vs numpy vs torch, each timed in its own process, printed as one table.

  python bench/run.py                  # full sizes, ~2-3 minutes
  python bench/run.py --quick          # small sizes, a smoke run (~30 s)
  python bench/run.py --only matmul,sum

Benchmarks: float32 matmul (N=512/1024/2048, GFLOP/s), exp(relu(a*b+c)) over 16M floats (GB/s counting 3
reads + 1 write), sum of 64M floats, softmax over the rows of 4096x4096, cold compile time per kernel, two 3x3
convolutions (32x3x32x32 -> 32 -> 64 channels, padding 1, GFLOP/s; torch only), the conv variants (depthwise, groups=4,
1x1, stride 2, dilation 2 next to the dense 3x3; 32x64x32x32, forward and forward+backward), and matmul N=1024/2048 with BEAM=2
(search time and the cache-hit second run in the notes).
This process runs no numpy/torch/our work itself (it imports neither torch nor our stack): it starts one child per library
(bench/_ours.py, bench/_oracle.py), reads one JSON line from each, and writes everything to
bench/results.json. See bench/README.md for what exactly is timed.
"""
from __future__ import annotations
import argparse, importlib.util, json, os, pathlib, platform, resource, shutil, subprocess, sys, tempfile, time
HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _common import FULL, QUICK, BENCHES, BLAS_AT_ISA, torch_isa_env, conv_flops, conv_train_flops, convvar_flops  # noqa: E402 (after the sys.path entry); numpy is imported there, but no BLAS call is made here

def fma_flop_per_cycle(simd: str) -> int:
  """Peak float32 FLOP per cycle per core, assuming two FMA units (true of Intel server cores since Skylake-SP):
  AVX-512 64 (2 x 16 lanes x 2), AVX2+FMA 32 (2 x 8 x 2; the figure issue 7 uses), else SSE 8."""
  return 64 if "avx512f" in simd.split() else 32 if "fma" in simd.split() else 8

def peak_isa(simd: str) -> str:
  """The vector ISA the peak figure assumes, in words (what fma_flop_per_cycle counted)."""
  f = simd.split()
  return ("AVX-512: 2 FMA units x 16 float32 lanes x 2" if "avx512f" in f else "AVX2+FMA: 2 FMA units x 8 float32 lanes x 2"
          if "fma" in f else "SSE: no FMA, 4 lanes x (add + mul)")

# --- the machine ---

def cpu_info() -> dict:
  """CPU model, cores usable by this process, SIMD flags, memory, load."""
  info: dict = {"machine": platform.machine(), "cores": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count()}
  try:
    txt = pathlib.Path("/proc/cpuinfo").read_text()
    for line in txt.splitlines():
      k, _, v = line.partition(":")
      if k.strip() == "model name": info.setdefault("model", v.strip())
      if k.strip() == "flags": info.setdefault("simd", " ".join(f for f in ("avx2", "fma", "avx512f") if f in v.split()))
  except OSError: pass
  try: info["mem_gb"] = round(int(pathlib.Path("/proc/meminfo").read_text().split()[1]) / 2**20, 1)
  except (OSError, ValueError, IndexError): pass
  try: info["loadavg_1m"] = float(pathlib.Path("/proc/loadavg").read_text().split()[0])
  except (OSError, ValueError): pass
  info["python"] = platform.python_version()
  return info

def cpu_busy_s() -> float | None:
  """CPU-seconds all cores have spent busy since boot (from /proc/stat), None where unavailable."""
  try:
    vals = [int(x) for x in pathlib.Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(vals[:8]) - vals[3] - vals[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait; guest is in user
  except (OSError, ValueError, IndexError): return None

def wait_idle(budget_s: float, limit: float = 0.15) -> float:
  """Sleep until other processes use under `limit` of the cores, for at most `budget_s`; returns the time waited."""
  t0 = time.perf_counter()
  while time.perf_counter() - t0 < budget_s:
    if (b := busy_fraction(0.5)) is None or b < limit: break
  return time.perf_counter() - t0

def busy_fraction(seconds: float = 0.5) -> float | None:
  """Fraction of all cores busy over `seconds` while this process sleeps: other work that will skew timings."""
  b0 = cpu_busy_s(); time.sleep(seconds); b1 = cpu_busy_s()
  return None if b0 is None or b1 is None else (b1 - b0) / seconds / (os.cpu_count() or 1)

CLOCK_C = r"""
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(void) {
  long n = 20000000, x = 3, y = 1; double best = 0;
  for (int k = 0; k < 5; k++) {
    double t0 = now();
    /* thread CPU time, so that being preempted by other jobs does not lower the figure.
       a chain of dependent imuls (3-cycle latency on x86 cores for a decade). Not `add reg, imm`: Golden
       Cove folds immediate adds at rename and runs such a chain faster than one per cycle. */
    for (long i = 0; i < n; i++) __asm__ volatile("imul %1, %0\n\timul %1, %0\n\timul %1, %0\n\timul %1, %0" : "+r"(x) : "r"(y));
    double ghz = 12.0 * n / (now() - t0) / 1e9;
    if (ghz > best) best = ghz;
  }
  printf("%f\n", best);
  return x == 0;
}
"""

def measure_clock_ghz() -> float | None:
  """Core clock from a dependent-add loop (x86-64 with a C compiler only); None when it cannot be measured."""
  cc = shutil.which(os.environ.get("HCQRT_CC", "")) or shutil.which("clang") or shutil.which("gcc")
  if platform.machine() not in ("x86_64", "AMD64") or cc is None: return None
  with tempfile.TemporaryDirectory() as d:
    src, exe = os.path.join(d, "clock.c"), os.path.join(d, "clock")
    pathlib.Path(src).write_text(CLOCK_C)
    try:
      subprocess.run([cc, "-O1", src, "-o", exe], check=True, capture_output=True, timeout=60)
      return float(subprocess.run([exe], check=True, capture_output=True, text=True, timeout=60).stdout)
    except (subprocess.SubprocessError, ValueError, OSError): return None

FMA_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
/* R names the vector registers (zmm: 16 float32 lanes, ymm: 8). 12 independent accumulators R0..R11: an FMA's result
   is ready 4 cycles later on current x86 cores and two issue per cycle, so 8 chains keep both units busy; 12 leave
   margin and, with the two factors R12 and R13, fit AVX2's 16 registers. All zeros: no denormal slow path. The loop is
   one asm block, so the compiler can neither drop the FMAs nor move the chains to memory. */
#define F(i) "vfmadd231ps %%" R "13, %%" R "12, %%" R #i "\n\t"
#define Z(i) "vxorps %%" R #i ", %%" R #i ", %%" R #i "\n\t"
static double rate[64];
static void *run(void *arg) {
  long id = (long)arg, n = 4000000;
  for (int r = 0; r < 5; r++) {
    double t0 = now();
    long i = n;
    __asm__ volatile(Z(0) Z(1) Z(2) Z(3) Z(4) Z(5) Z(6) Z(7) Z(8) Z(9) Z(10) Z(11) Z(12) Z(13)
                     "1:\n\t" F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11) "dec %0\n\tjnz 1b\n\t"
                     : "+r"(i) : : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                       "xmm11", "xmm12", "xmm13", "cc");
    /* thread CPU time: time this thread was preempted by other jobs does not lower the figure */
    double g = 2.0 * W * 12 * n / (now() - t0) / 1e9;
    if (g > rate[id]) rate[id] = g;
  }
  return 0;
}
int main(int argc, char **argv) {
  int nt = atoi(argv[1]); pthread_t t[64]; double sum = 0;
  if (nt < 1 || nt > 64) return 1;
  for (long i = 0; i < nt; i++) pthread_create(&t[i], 0, run, (void *)i);
  for (int i = 0; i < nt; i++) { pthread_join(t[i], 0); sum += rate[i]; }
  printf("%f\n", sum);
  return 0;
}
"""

def measure_fma_peak(simd: str, cores: int) -> float | None:
  """Achieved float32 GFLOP/s of independent FMA chains on all `cores` at once (zmm with AVX-512, ymm with AVX2+FMA):
  the FMA peak as this machine runs it, at whatever clock it holds with every core busy on wide FMAs (which may be
  below the clock measure_clock_ghz sees with scalar work). None without an x86 C compiler or FMA."""
  f = simd.split()
  w = 16 if "avx512f" in f else 8 if "fma" in f else 0
  cc = shutil.which(os.environ.get("HCQRT_CC", "")) or shutil.which("clang") or shutil.which("gcc")
  if not w or platform.machine() not in ("x86_64", "AMD64") or cc is None: return None
  with tempfile.TemporaryDirectory() as d:
    src, exe = os.path.join(d, "fma.c"), os.path.join(d, "fma")
    pathlib.Path(src).write_text(FMA_C)
    try:
      subprocess.run([cc, "-O2", f"-DW={w}", f"-DR=\"{'zmm' if w == 16 else 'ymm'}\"", "-mavx512f" if w == 16 else "-mavx2", "-mfma", "-pthread", src, "-o", exe],
                     check=True, capture_output=True, timeout=60)
      return float(subprocess.run([exe, str(cores)], check=True, capture_output=True, text=True, timeout=120).stdout)
    except (subprocess.SubprocessError, ValueError, OSError): return None

# --- the children ---

# set on some hosts to pin OpenBLAS to one kernel (OPENBLAS_CORETYPE=Haswell runs its AVX2 kernel on an AVX-512 CPU at
# about half the speed) or blocking: the numpy and torch children run without them, so "ours/np" is against the kernel
# OpenBLAS picks for this CPU (their results name it)
BLAS_PINS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

def run_child(cmd: list[str], env_extra: dict[str, str], timeout: float, verbose: bool, drop: tuple[str, ...] = ()) -> dict:
  """Run one benchmark child (its environment less the variables in `drop`); its last stdout line is its JSON result.
  Failures become {"error": ...}."""
  env = {k: v for k, v in os.environ.items() if k not in drop} | env_extra | \
        {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
  t0, b0, r0 = time.perf_counter(), cpu_busy_s(), resource.getrusage(resource.RUSAGE_CHILDREN)
  try:
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
  except subprocess.TimeoutExpired:
    return {"error": f"timed out after {timeout:.0f} s: {' '.join(cmd[1:])}"}
  if verbose and p.stderr.strip(): print(p.stderr.rstrip(), file=sys.stderr)
  lines = p.stdout.strip().splitlines()
  try: res = json.loads(lines[-1])
  except (IndexError, json.JSONDecodeError):
    return {"error": f"exit {p.returncode}: {' '.join(cmd[1:])}\n{p.stderr.strip()[-2000:]}"}
  res["wall_s"] = wall = time.perf_counter() - t0
  r1, b1 = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_busy_s()
  if b0 is not None and b1 is not None:
    # CPU time burnt meanwhile by anything but this child (and its threads): other jobs sharing the cores
    mine = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    res["foreign_load"] = max(0.0, (b1 - b0) - mine) / wall / (os.cpu_count() or 1)
  return res

# --- the table ---

def rate(row: dict, t: float) -> tuple[str, float | None]:
  """(unit, throughput) of a benchmark row timed at `t` seconds."""
  try: return _rate(row, t)
  except (KeyError, IndexError, TypeError): return "", None

def _rate(row: dict, t: float) -> tuple[str, float | None]:
  b = row.get("bench")
  if b == "matmul": return "GFLOP/s", 2 * row["n"] ** 3 / t / 1e9
  if b == "ew": return "GB/s", 16 * row["n"] / t / 1e9   # 3 float32 inputs read + 1 written
  if b == "sum": return "GB/s", 4 * row["n"] / t / 1e9
  if b == "softmax": return "GB/s", 8 * row["shape"][0] * row["shape"][1] / t / 1e9  # read once + write once
  if b == "conv": return "GFLOP/s", conv_flops(row["shape"]) / t / 1e9
  if b == "convtrain": return "GFLOP/s", conv_train_flops(row["shape"]) / t / 1e9
  if b == "convvar": return "GFLOP/s", convvar_flops(row["shape"], row["variant"]) * (3 if row.get("train") else 1) / t / 1e9
  return "", None

def label(row: dict) -> str:
  try: return _label(row)
  except (KeyError, IndexError, TypeError): return row.get("key", "?")  # an errored row carries no sizes

def _label(row: dict) -> str:
  k = row["key"]
  if k.startswith("matmul:"): return f"matmul f32 N={row['n']}"
  if k == "beam:conv": return "  conv2d BEAM=2"
  if k.startswith("beam:"): return f"matmul f32 N={row['n']} BEAM=2"
  if k == "conv": return "conv2d {}x{}x{}x{}>{}>{}".format(*row["shape"])
  if k == "convtrain": return "  fwd+bwd, TinyJit step"
  if k == "convtrain:nn_lazy": return "  nn.Conv2d, never realized"
  if k == "convtrain:nn_realized": return "  nn.Conv2d, realized"
  if k.startswith("convvar:"):
    names = {"dense": "3x3", "dw": "dw 3x3", "g4": "g4 3x3", "1x1": "1x1", "s2": "s2 3x3", "d2": "d2 3x3"}   # (bench/README.md)
    return "  fwd+bwd" if row.get("train") else "conv {} {}x{}x{s}x{s}".format(names.get(row["variant"], row["variant"]), *row["shape"][:2], s=row["shape"][2])
  if k == "ew": return f"exp(relu(a*b+c)) {_n(row['n'])}"
  if k == "ew:torch.compile": return "  torch.compile"
  if k == "sum": return f"sum f32 {_n(row['n'])}"
  if k == "softmax": return f"softmax {row['shape'][0]}x{row['shape'][1]} rows"
  if k == "compile": return "cold compile /kernel"
  return k

def _n(n: int) -> str: return f"{n // 2**20}M" if n % 2**20 == 0 else f"{n // 1024}K" if n % 1024 == 0 else str(n)

def fmt(x: float | None, w: int, p: int = 1, suffix: str = "") -> str: return ("-" if x is None else f"{x:.{p}f}{suffix}").rjust(w)

def table(results: dict[str, dict], peak: float | None, fpc: int = 0, isa: str = "", measured: float | None = None,
          measured_isa: float | None = None) -> list[str]:
  ours, npy, tor = (results.get(k, {}) for k in ("ours", "numpy", "torch"))
  by = lambda res: {r["key"]: r for r in res.get("rows", [])}
  o, n, t = by(ours), by(npy), by(tor)
  keys = list(dict.fromkeys([*o, *n, *t]))
  keys = [k for k in keys if k != "ew:torch.compile"]
  if "ew:torch.compile" in t: keys.insert(keys.index("ew") + 1 if "ew" in keys else len(keys), "ew:torch.compile")
  head = (f"{'benchmark':26s} {'ours ms':>9s} {'numpy ms':>9s} {'torch ms':>9s}  {'unit':7s} {'ours':>7s} {'numpy':>7s} "
          f"{'torch':>7s} {'ours/np':>8s} {'ours/tch':>8s} {'kern':>4s}  check")
  lines = [head, "-" * len(head)]
  for k in keys:
    src = o.get(k) or (o.get("ew") if k == "ew:torch.compile" else None)
    rk = "conv" if k == "beam:conv" else k.replace("beam:", "matmul:")   # BEAM rows compare with the same product / conv of numpy / torch
    ref = n.get(rk) or t.get(rk) or src or {}
    ms = lambda r: r["median_s"] * 1e3 if r and "median_s" in r else None
    to, tn, tt = ms(src), ms(n.get(rk)), ms(t.get(rk))
    unit, ro = rate(ref, to / 1e3) if to else (rate(ref, 1)[0], None)
    rn, rt = (rate(ref, x / 1e3)[1] if x else None for x in (tn, tt))
    if k == "compile": unit, ro = "", None
    speed = lambda other: other / to if other and to else None  # >1: ours faster; matmul: fraction of their GFLOP/s
    check = ""
    if k != "ew:torch.compile" and src:
      if "error" in src: check = "ERROR: " + src["error"].splitlines()[0][:60]
      elif src.get("ok") is False: check = f"WRONG (rel err {src.get('rel_err', float('nan')):.2g})"
      elif src.get("ok"): check = "ok"
    for name, r in (("numpy", n.get(rk)), ("torch", t.get(rk))):
      if r and "error" in r: check += f" {name} error: {r['error'].splitlines()[0][:50]}"
    kern = str(src.get("kernels", "")) if src and k not in ("ew:torch.compile",) else ""
    lines.append(f"{label(src if src and src.get('key') == k and 'error' not in src else ref if ref.get('key') == k else {**ref, 'key': k}):26s} {fmt(to, 9, 2)} {fmt(tn, 9, 2)} {fmt(tt, 9, 2)}  "
                 f"{unit:7s} {fmt(ro, 7)} {fmt(rn, 7)} {fmt(rt, 7)} {fmt(speed(tn), 8, 2, 'x')} {fmt(speed(tt), 8, 2, 'x')} {kern:>4s}  {check}".rstrip())
  notes = ["ours/np, ours/tch: their time / our time (>1 = ours faster; for matmul, the fraction of their GFLOP/s)."]
  if "compile" in o and "error" not in o["compile"]:
    c = o["compile"]
    part = lambda x: f"{x * 1e3:.1f}" if x is not None else "?"
    notes.append(f"cold compile: median {part(c['median_s'])} ms per kernel over {c['builds']} kernels (C compiler {part(c.get('cc_median_s'))} ms, "
                 f"ELF load {part(c.get('load_median_s'))} ms, lower/opt/render {part(c.get('front_median_s'))} ms; "
                 f"slowest {part(c.get('max_s'))} ms: {c.get('slowest', '?')}).")
  if "median_s" in o.get("convtrain:nn_lazy", {}) and "median_s" in o.get("convtrain:nn_realized", {}):
    lz, rz = o["convtrain:nn_lazy"], o["convtrain:nn_realized"]
    notes.append(f"nn.Conv2d step, parameters never realized / realized by hand: {lz['median_s'] / rz['median_s']:.2f}x "
                 f"(target <= 1.2x; the two steps take turns in one process), kernels {lz.get('kernels')} / {rz.get('kernels')}.")
  beams = [r for kk, r in o.items() if kk.startswith("beam:") and "search_s" in r]
  if beams: notes.append("BEAM=2 search (first call, compiles + timings): " + ", ".join(
    f"{'conv2d' if 'n' not in r else 'N=' + str(r['n'])} {r['search_s']:.1f} s, second run {r['second_run_s'] * 1e3:.0f} ms with {r['second_run_cc_calls']} C compiles" for r in beams))
  if "ew:torch.compile" in t and "compile_s" in t["ew:torch.compile"]:
    notes.append(f"torch.compile: first call (trace + Inductor build) {t['ew:torch.compile']['compile_s']:.1f} s, not in the table.")
  if peak or measured:
    mm = [(k, r) for k, r in o.items() if k.startswith(("matmul:", "beam:")) and k != "beam:conv" and "median_s" in r]
    # the share is judged against the measured peak where there is one (the clock a core holds running wide FMAs on
    # every core can be below the one the scalar clock loop sees), else against the nominal one
    judge = measured or peak
    fr = lambda r, res: f"{rate(r, res['median_s'])[1] / judge * 100:.0f}%"
    if mm: notes.append((f"FMA peak, nominal {peak:.0f} GFLOP/s ({fpc} FLOP/cycle/core{f' = {isa}' if isa else ''}, x clock x cores)" if peak else "FMA peak")
                        + (f", measured {measured:.0f} GFLOP/s (independent FMA chains on all cores at once)" if measured else "")
                        + f"; ours compiled for CPU_ISA={os.environ.get('CPU_ISA', 'native')}{_isa_ceiling(peak, fpc, measured_isa)}. "
                        f"Matmul share of the {'measured' if measured else 'nominal'} peak (target >= 85% on AVX-512): " + ", ".join(
      f"N={r['n']}{' BEAM' if k.startswith('beam:') else ''} ours {fr(r, r)}" + (f" numpy {fr(r, n[k])}" if k in n and "median_s" in n[k] else "") for k, r in mm))
  return lines + [""] + notes

def _isa_ceiling(peak: float | None, fpc: int, measured: float | None = None) -> str:
  """A CPU_ISA level narrower than the host's vectors (x86-64-v3 on an AVX-512 host): the peak ours can reach there
  (`measured`: that ISA's FMA loop measured on this host)."""
  isa = os.environ.get("CPU_ISA", "native")
  lanes = {"x86-64-v3": 32, "x86-64-v2": 8, "x86-64": 8}.get(isa)
  if not lanes or fpc <= lanes: return ""
  return ", whose own FMA peak is " + " / ".join(x for x in (f"{peak * lanes / fpc:.0f} nominal" if peak else "", f"{measured:.0f} measured" if measured else "") if x) + " GFLOP/s"

LLVM_BENCHES = ("matmul", "softmax", "conv", "ew", "sum")

def _torch_isa_words(res: dict, isa: str) -> str:
  """How the torch child ran: its ATen capability and, where capped, oneDNN's ISA (bench/_common.py torch_isa_env)."""
  info = res.get("info", {})
  return (f"as on an {isa} host: ATen {info.get('isa', '?')}, oneDNN up to {info.get('onednn_max_isa') or '?'}, the ISA ours is compiled for"
          if isa != "native" else f"native ISA, ATen {info.get('isa', '?')}")

def native_torch_table(results: dict[str, dict], isa: str) -> list[str]:
  """torch at the host's own ISA next to torch capped at ours' (the table's torch column): a reference, same run."""
  by = lambda res: {r["key"]: r for r in res.get("rows", [])}
  o, t, tn = by(results.get("ours", {})), by(results.get("torch", {})), by(results.get("torch_native", {}))
  head = f"{'torch native (reference)':26s} {'ours ms':>9s} {f'tch {isa}':>9s} {'tch nat':>9s} {'ours/nat':>8s}"
  lines = [head, "-" * len(head)]
  ms = lambda r: r["median_s"] * 1e3 if r and "median_s" in r else None
  for k, r in tn.items():
    a, b, c = ms(o.get(k)), ms(t.get(k)), ms(r)
    lines.append(f"{label(r) if 'error' not in r else k:26s} {fmt(a, 9, 2)} {fmt(b, 9, 2)} {fmt(c, 9, 2)} {fmt(c / a if a and c else None, 8, 2, 'x')}")
  info = results["torch_native"].get("info", {})
  return lines + [f"(torch native: ATen {info.get('isa', '?')}, oneDNN unrestricted; the main table's torch column runs at {isa}, as ours; "
                  "ours/nat: torch native's time / ours, >1 = ours faster)"]

def llvm_table(results: dict[str, dict]) -> list[str]:
  """The C path and the LLVM path (CPU_LLVM=1) of our CPU backend side by side: kernel time and cold compile."""
  by = lambda res: {r["key"]: r for r in res.get("rows", [])}
  c, ll = by(results.get("ours", {})), by(results.get("ours_llvm", {}))
  head = f"{'C vs LLVM (CPU)':26s} {'C ms':>9s} {'LLVM ms':>9s}  {'unit':7s} {'C':>7s} {'LLVM':>7s} {'LLVM/C':>7s}  check"
  lines = [head, "-" * len(head)]
  ms = lambda r: r["median_s"] * 1e3 if r and "median_s" in r else None
  for k in [k for k in ll if k in c or k == "compile"]:
    a, b = c.get(k), ll[k]
    ta, tb = ms(a), ms(b)
    unit, ra = rate(b, ta / 1e3) if ta and k != "compile" else ("", None)
    rb = rate(b, tb / 1e3)[1] if tb and k != "compile" else None
    check = ("ERROR: " + b["error"].splitlines()[0][:60]) if "error" in b else "ok" if b.get("ok") else "WRONG" if b.get("ok") is False else ""
    lines.append(f"{label(b) if 'error' not in b else k:26s} {fmt(ta, 9, 2)} {fmt(tb, 9, 2)}  {unit:7s} {fmt(ra, 7)} {fmt(rb, 7)} "
                 f"{fmt(ta / tb if ta and tb else None, 7, 2, 'x')}  {check}".rstrip())
  if (cb := ll.get("compile")) and "median_s" in cb:
    part = lambda x: f"{x * 1e3:.1f}" if x is not None else "?"
    lines += ["", f"LLVM cold compile: median {part(cb['median_s'])} ms per kernel over {cb['builds']} kernels (LLVM in-process "
              f"{part(cb.get('cc_median_s'))} ms, of it parse+O3 passes {part(cb.get('llvm_passes_median_s'))} ms, the rest codegen; "
              f"ELF load {part(cb.get('load_median_s'))} ms, lower/opt/render {part(cb.get('front_median_s'))} ms; "
              f"slowest {part(cb.get('max_s'))} ms: {cb.get('slowest', '?')}). LLVM/C: C time / LLVM time (>1 = LLVM faster).",
              f"LLVM build CPU time (this thread: all of it, no compiler process; a loaded host inflates wall time, not this): "
              f"median {part(cb.get('cpu_median_s'))} ms."]
  return lines

# --- main ---

TIMING_CHILDREN = ("numpy", "ours", "ours_llvm", "torch", "torch_native")

def fastest_rounds(old: dict, new: dict) -> dict:
  """One library's results over two rounds: per row (by key) the round with the lower median, each round's median kept in
  `round_medians_s`; a failed round keeps the other's rows; the foreign load is the worse round's.

  >>> a = {"rows": [{"key": "m", "median_s": 2.0}], "foreign_load": 0.1}
  >>> b = fastest_rounds(a, {"rows": [{"key": "m", "median_s": 1.5}], "foreign_load": 0.0})
  >>> b["rows"][0]["median_s"], b["rows"][0]["round_medians_s"], b["foreign_load"]
  (1.5, [2.0, 1.5], 0.1)
  >>> fastest_rounds(b, {"error": "boom"})["rows"][0]["median_s"]
  1.5
  """
  if "error" in new or not new.get("rows"): return old
  if "error" in old or not old.get("rows"): return new
  rounds = lambda r: r.get("round_medians_s", [r["median_s"]] if "median_s" in r else [])
  by_key, rows = {r.get("key"): r for r in old["rows"]}, []
  for r in new["rows"]:
    o = by_key.pop(r.get("key"), None)
    if o is None: rows.append(r); continue
    best = r if "median_s" in r and ("median_s" not in o or r["median_s"] < o["median_s"]) else o
    rows.append(best | {"round_medians_s": rounds(o) + rounds(r)})
  rows += by_key.values()
  return old | {"rows": rows, "foreign_load": max(old.get("foreign_load", 0), new.get("foreign_load", 0)),
                "wall_s": old.get("wall_s", 0) + new.get("wall_s", 0)}

def main() -> int:
  p = argparse.ArgumentParser(description="hcqrt CPU benchmark: ours vs numpy vs torch")
  p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
  p.add_argument("--only", default=",".join(BENCHES), help=f"comma list of {','.join(BENCHES)}")
  p.add_argument("--json", default=str(HERE / "results.json"), help="where to write all results ('' to skip)")
  p.add_argument("--no-torch", action="store_true", help="skip torch even if it is installed")
  p.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile of the elementwise chain (~20 s cold)")
  p.add_argument("--wait-idle", type=float, default=60, metavar="S",
                 help="before each child, wait while other processes keep the cores busy; at most S seconds in all (default 60)")
  p.add_argument("--no-train", action="store_true", help="skip the digits train-step comparison (bench/train_bench.py)")
  p.add_argument("--no-llvm", action="store_true", help="skip the LLVM CPU path (CPU_LLVM=1) run next to the C path")
  p.add_argument("--rounds", type=int, default=1, metavar="R",
                 help="run the timing children R times, the libraries taking turns; each row keeps its fastest round's median")
  p.add_argument("-v", "--verbose", action="store_true", help="show the children's stderr (e.g. with DEBUG=2)")
  args = p.parse_args()
  if args.rounds < 1: p.error(f"--rounds must be >= 1, got {args.rounds}")
  only = [b.strip() for b in args.only.split(",") if b.strip()]
  if bad := [b for b in only if b not in BENCHES]: p.error(f"unknown benchmark(s) {bad}; choose from {list(BENCHES)}")
  spec = QUICK if args.quick else FULL
  py, started = sys.executable, time.perf_counter()

  info = cpu_info()
  busy = busy_fraction()
  ghz = measure_clock_ghz() if "matmul" in only else None
  fpc = fma_flop_per_cycle(info.get("simd", ""))
  peak = ghz * fpc * info["cores"] if ghz else None
  measured = measure_fma_peak(info.get("simd", ""), info["cores"]) if "matmul" in only else None
  # under CPU_ISA=x86-64-v3 on an AVX-512 host ours can only use ymm FMAs: their own measured ceiling
  narrow = os.environ.get("CPU_ISA") == "x86-64-v3" and fpc > 32
  measured_isa = measure_fma_peak("avx2 fma", info["cores"]) if "matmul" in only and narrow else None
  print(f"machine: {info.get('model', '?')}, {info['cores']} cores ({info.get('simd', '')}), {info.get('mem_gb', '?')} GB, "
        f"python {info['python']}" + (f", clock {ghz:.2f} GHz" if ghz else "") + (f", FMA peak measured {measured:.0f} GFLOP/s" if measured else ""))
  if busy is not None and busy > 0.15:
    print(f"warning: the machine is {busy * 100:.0f}% busy before the run (load {info.get('loadavg_1m')}); timings will be noisy")
  sys.stdout.flush()

  results: dict[str, dict] = {}
  cache_dir = tempfile.mkdtemp(prefix="hcqrt-bench-cache-")
  beam_dir = tempfile.mkdtemp(prefix="hcqrt-bench-beam-")
  mk = lambda lib, extra=(): [py, str(HERE / ("_ours.py" if lib == "ours" else "_oracle.py")), *(["--lib", lib] if lib != "ours" else []),
                              "--spec", json.dumps(spec), *extra]
  # ours must not share the cores with a BLAS pool: its numpy only builds inputs and references
  quiet_blas = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
  # ours narrower than the host (CPU_ISA=x86-64-v3 on AVX-512): numpy's OpenBLAS and torch run as on such a host
  torch_isa, torch_env = torch_isa_env()
  jobs = [("numpy", mk("numpy", ["--only", ",".join(only)]), BLAS_AT_ISA.get(torch_isa, {})),
          ("ours", mk("ours", ["--only", ",".join(b for b in only if b not in ("compile", "beam"))]), quiet_blas)]
  if "beam" in only:
    # BEAM=2 with a fresh private cache: the search really runs (and is timed), then a second build must hit the cache
    jobs.append(("ours_beam", mk("ours", ["--only", "beam"]), quiet_blas | {"BEAM": "2", "HCQRT_CACHE": beam_dir}))
  if "compile" in only:
    # CACHE=0: never read compiled objects from disk; a private cache dir keeps the bench's one-off kernels out of the user's
    jobs.append(("ours_compile", mk("ours", ["--only", "compile"]), quiet_blas | {"CACHE": "0", "HCQRT_CACHE": cache_dir}))
  if not args.no_llvm and importlib.util.find_spec("llvmlite") is not None:
    # the same kernels built by LLVM in-process (CPU_LLVM=1): kernel speed, and cold compile with no process spawn
    speed = [b for b in only if b in LLVM_BENCHES]
    if speed: jobs.append(("ours_llvm", mk("ours", ["--only", ",".join(speed)]), quiet_blas | {"CPU_LLVM": "1"}))
    if "compile" in only:
      jobs.append(("ours_llvm_compile", mk("ours", ["--only", "compile"]), quiet_blas | {"CACHE": "0", "HCQRT_CACHE": cache_dir, "CPU_LLVM": "1"}))
  has_torch = not args.no_torch and importlib.util.find_spec("torch") is not None
  if has_torch:
    jobs.append(("torch", mk("torch", ["--only", ",".join(only)] + ([] if args.no_torch_compile else ["--compile"])), torch_env))
    # ours targets narrower vectors than the host's: the torch column runs at that ISA too; its native run is a reference
    ref = [b for b in only if b in ("matmul", "conv", "convtrain", "convvar")]
    if torch_env and ref: jobs.append(("torch_native", mk("torch", ["--only", ",".join(ref)]), {}))
  wait_budget = args.wait_idle
  # the timing children again, in turns (numpy, ours, torch, numpy, ...): a minute of foreign load then slows one round
  # of every library instead of one library's only run; the cold-compile and BEAM children run once
  jobs += [job for _ in range(args.rounds - 1) for job in jobs if job[0] in TIMING_CHILDREN]
  try:
    for name, cmd, env in jobs:
      if name == "ours" and all(b in ("compile", "beam") for b in only): continue
      if wait_budget > 0 and (busy_fraction(0.2) or 0) >= 0.15:
        print(f"  waiting for the cores to go idle (up to {wait_budget:.0f} s) ...", file=sys.stderr, flush=True)
        wait_budget -= wait_idle(wait_budget)
      print(f"  running {name} ...", end="", file=sys.stderr, flush=True)
      r = run_child(cmd, env, timeout=600, verbose=args.verbose, drop=BLAS_PINS if name.startswith(("numpy", "torch")) else ())
      results[name] = fastest_rounds(results[name], r) if name in results else r
      print(f" {r.get('wall_s', 0):.0f} s" + (f", other processes used {r['foreign_load'] * 100:.0f}% of the cores meanwhile"
            if r.get("foreign_load", 0) > 0.05 else ""), file=sys.stderr, flush=True)
      if "error" in r: print(f"  {name} failed: {r['error']}", file=sys.stderr)
  finally:
    shutil.rmtree(cache_dir, ignore_errors=True)
    shutil.rmtree(beam_dir, ignore_errors=True)
  for child, bench, into in (("ours_compile", "compile", "ours"), ("ours_beam", "beam", "ours"), ("ours_llvm_compile", "compile", "ours_llvm")):
    if child not in results: continue   # one "ours" (and one "ours_llvm") column: fold these children's rows in
    oc = results.pop(child)
    results.setdefault(into, {"rows": []}).setdefault("rows", []).extend(oc.get("rows", []) or [{"bench": bench, "key": bench, "error": oc.get("error", "?")}])

  print(f"ours: {results.get('ours', {}).get('info', {}).get('device', '?')} via {results.get('ours', {}).get('info', {}).get('cc', '?')}; "
        f"numpy {results.get('numpy', {}).get('info', {}).get('version', '?')} ({results.get('numpy', {}).get('info', {}).get('blas', '?')}; "
        f"runs the {results.get('numpy', {}).get('info', {}).get('blas_kernel', '?')}"
        + (f", with {', '.join(k for k in BLAS_PINS if k in os.environ)} unset" if any(k in os.environ for k in BLAS_PINS) else "")
        + (f", as on an {torch_isa} host: {' '.join(f'{k}={v}' for k, v in BLAS_AT_ISA[torch_isa].items())}" if torch_isa in BLAS_AT_ISA else "") + ")"
        + (f"; torch {results['torch'].get('info', {}).get('version', '?')} ({_torch_isa_words(results['torch'], torch_isa)})" if "torch" in results else
           "; torch: skipped" if args.no_torch else "; torch: not installed"))
  print()
  for line in table(results, peak, fpc, peak_isa(info.get("simd", "")), measured, measured_isa): print(line)
  if args.rounds > 1:
    print(f"{args.rounds} rounds, the libraries taking turns; each row is its fastest round's median (every round's median in the json)")
  if "torch_native" in results:
    print()
    for line in native_torch_table(results, torch_isa): print(line)
  if "ours_llvm" in results:
    print()
    for line in llvm_table(results): print(line)
  for k, r in results.items():
    if "error" in r: print(f"error: the {k} child failed: {r['error'].splitlines()[0][:200]} (run with -v for its stderr)")
  noisy = [f"{k} {r['foreign_load'] * 100:.0f}%" for k, r in results.items() if r.get("foreign_load", 0) > 0.05]
  if noisy: print("warning: other processes shared the cores during these runs (share of all cores): " + ", ".join(noisy))
  total = time.perf_counter() - started
  if not args.no_train and not args.quick:
    # the digits train step (issue 3): ours eager and TinyJit, then torch in its own process right after ours
    print()
    tb = subprocess.run([py, str(HERE / "train_bench.py")] + (["--no-torch"] if args.no_torch else []), capture_output=True, text=True)
    print(tb.stdout.rstrip() if tb.returncode == 0 else f"train bench failed: {tb.stderr.strip().splitlines()[-1:]}")
  print(f"\ntotal bench time {total:.0f} s" + (f"; results in {args.json}" if args.json else ""))
  if args.json:
    out = {"machine": info | {"clock_ghz": ghz, "flop_per_cycle_core": fpc, "fma_peak_gflops": peak,
                               "fma_peak_measured_gflops": measured, "fma_peak_measured_isa_gflops": measured_isa, "busy_before": busy}, "spec": spec, "only": only,
           "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "total_s": total, "results": results}
    pathlib.Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
  return 0 if all("error" not in r for r in results.values()) else 1

if __name__ == "__main__": sys.exit(main())
