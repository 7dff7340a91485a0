"""GPT-2 124M-shaped random weights (12 layers, width 768, 12 heads, vocab 50257, context 1024): tokens/s generating
128 tokens greedily after an 8-token prompt with the KV cache, on the CPU: ours (examples/gpt2.py) against torch eager
(the same architecture and cache, torch.no_grad) on the same machine, each in its own process, one after the other.

Ours runs the symbolic path (start_pos and the token bound Variables, one TinyJit capture for all positions) and, with
--concrete, the default concrete path (eager; each position's kernels compiled on first use). Each side generates
twice: the first run ("cold") includes our compiles and the JIT capture; the second ("warm") is the steady state.
Both sides must produce the same tokens (they get the same weights); the table says whether they did. Torch runs with
its default threads (all cores) and with one thread; CPU time (process time, all threads) is printed next to wall time:
on a machine shared with other jobs wall time mostly measures the scheduler, and OpenMP threads that spin while they
wait for a core inflate torch's CPU time, which the one-thread run avoids.

  python bench/gpt2_bench.py [--tokens 128] [--concrete] [--cores N] [--torch-threads 0,1] [--json]
"""
from __future__ import annotations
import argparse, json, os, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# the same weights in both children: GPT-2's Hugging Face layout (Conv1D weights (in, out)), seeded normals
WEIGHTS = r'''
import numpy as np
L, D, H, V, C = 12, 768, 12, 50257, 1024
def weights():
  rng = np.random.default_rng(0)
  n = lambda *s, scale=0.02: (rng.standard_normal(s, dtype=np.float32) * scale)
  sd = {"wte.weight": n(V, D), "wpe.weight": n(C, D, scale=0.01), "ln_f.weight": 1 + n(D, scale=0.1), "ln_f.bias": n(D)}
  for i in range(L):
    p = f"h.{i}."
    sd |= {p + "ln_1.weight": 1 + n(D, scale=0.1), p + "ln_1.bias": n(D), p + "ln_2.weight": 1 + n(D, scale=0.1), p + "ln_2.bias": n(D),
           p + "attn.c_attn.weight": n(D, 3 * D), p + "attn.c_attn.bias": n(3 * D), p + "attn.c_proj.weight": n(D, D), p + "attn.c_proj.bias": n(D),
           p + "mlp.c_fc.weight": n(D, 4 * D), p + "mlp.c_fc.bias": n(4 * D), p + "mlp.c_proj.weight": n(4 * D, D), p + "mlp.c_proj.bias": n(D)}
  return sd
PROMPT = [int(t) for t in np.random.default_rng(1).integers(0, V, 8)]
'''

OURS = r'''
import json, os, sys, time, importlib.util
if CORES: os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:CORES])   # (before the CPU device counts its cores)
sys.path.insert(0, ROOT)
from frontend import Tensor, GlobalCounters
from frontend.nn.state import load_state_dict
spec = importlib.util.spec_from_file_location("gpt2", ROOT + "/examples/gpt2.py"); g = importlib.util.module_from_spec(spec)
sys.modules["gpt2"] = g; spec.loader.exec_module(g)
st = time.perf_counter()
model = g.GPT2(g.Config(L, D, H, V, C))
load_state_dict(model, g.from_hf({k: Tensor(v) for k, v in weights().items()}))
out = {"load_s": time.perf_counter() - st}
for mode in MODES:
  gen = g.Generator(model, use_cache=True, jit=mode == "symbolic", symbolic=mode == "symbolic")
  for run in ("cold", "warm"):
    GlobalCounters.reset(); st, cpu = time.perf_counter(), time.process_time()
    toks = gen.generate(PROMPT, TOKENS)
    out[f"{mode}_{run}_s"], out[f"{mode}_{run}_cpu_s"] = time.perf_counter() - st, time.process_time() - cpu
  out[f"{mode}_tokens"] = toks
  out[f"{mode}_kernels_per_token"] = GlobalCounters.kernel_count / TOKENS
print(json.dumps(out))
'''

TORCH = r'''
import json, math, time, torch
torch.set_grad_enabled(False)
if THREADS: torch.set_num_threads(THREADS)
w = {k: torch.from_numpy(v) for k, v in weights().items()}
Dh = D // H
caches = [torch.zeros(2, 1, H, C, Dh) for _ in range(L)]
def ln(x, p): return torch.nn.functional.layer_norm(x, (D,), w[p + ".weight"], w[p + ".bias"], 1e-5)
def forward(ids, start):
  T = len(ids)
  x = w["wte.weight"][torch.tensor(ids)] + w["wpe.weight"][start:start + T]
  for i in range(L):
    p = f"h.{i}."
    q, k, v = (torch.addmm(w[p + "attn.c_attn.bias"], ln(x, p + "ln_1"), w[p + "attn.c_attn.weight"])).split(D, -1)
    q, k, v = [t.view(T, H, Dh).transpose(0, 1).unsqueeze(0) for t in (q, k, v)]
    caches[i][0, :, :, start:start + T], caches[i][1, :, :, start:start + T] = k, v
    keys, vals = caches[i][0, :, :, :start + T], caches[i][1, :, :, :start + T]
    mask = None if T == 1 else torch.full((T, start + T), -math.inf).triu(start + 1)
    o = torch.nn.functional.scaled_dot_product_attention(q, keys, vals, attn_mask=mask)[0].transpose(0, 1).reshape(T, D)
    x = x + torch.addmm(w[p + "attn.c_proj.bias"], o, w[p + "attn.c_proj.weight"])
    hdn = torch.nn.functional.gelu(torch.addmm(w[p + "mlp.c_fc.bias"], ln(x, p + "ln_2"), w[p + "mlp.c_fc.weight"]), approximate="tanh")
    x = x + torch.addmm(w[p + "mlp.c_proj.bias"], hdn, w[p + "mlp.c_proj.weight"])
  return ln(x[-1:], "ln_f") @ w["wte.weight"].T
def generate():
  toks = list(PROMPT)
  toks.append(int(forward(toks, 0).argmax()))
  while len(toks) < len(PROMPT) + TOKENS: toks.append(int(forward(toks[-1:], len(toks) - 1).argmax()))
  return toks[len(PROMPT):]
out = {"torch_threads": torch.get_num_threads()}
for run in ("cold", "warm"):
  st, cpu = time.perf_counter(), time.process_time(); toks = generate()
  out[f"torch_{run}_s"], out[f"torch_{run}_cpu_s"] = time.perf_counter() - st, time.process_time() - cpu
out["torch_tokens"] = toks
print(json.dumps(out))
'''

def _child(code: str, env_extra: dict | None = None, **consts) -> dict:
  pre = f"ROOT = {ROOT!r}\n" + "".join(f"{k} = {v!r}\n" for k, v in consts.items()) + WEIGHTS
  env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", **(env_extra or {})}
  r = subprocess.run([sys.executable, "-c", pre + code], capture_output=True, text=True, env=env)
  if r.returncode: raise RuntimeError(f"bench child failed:\n{r.stderr[-3000:]}")
  return json.loads(r.stdout.strip().splitlines()[-1])

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--tokens", type=int, default=128)
  ap.add_argument("--concrete", action="store_true", help="also the concrete (eager, compile per position) path")
  ap.add_argument("--cores", type=int, default=0, help="ours on this many cores (0: all); 1 compares with torch on one thread")
  ap.add_argument("--torch-threads", default="0,1", help="torch runs, one per thread count (0: torch's default, all cores)")
  ap.add_argument("--json", action="store_true")
  args = ap.parse_args()
  modes = ["symbolic"] + (["concrete"] if args.concrete else [])
  ours = _child(OURS, {"OPENBLAS_NUM_THREADS": "1"}, TOKENS=args.tokens, MODES=modes, CORES=args.cores)
  runs = [_child(TORCH, {"OPENBLAS_NUM_THREADS": ""}, TOKENS=args.tokens, THREADS=int(t)) for t in args.torch_threads.split(",") if t]
  theirs = runs[0]
  res = {**ours, **{k.replace("torch_", f"torch@{r['torch_threads']}_", 1): v for r in runs for k, v in r.items()}, "tokens": args.tokens}
  if args.json: print(json.dumps(res)); return
  n = args.tokens
  print(f"GPT-2 124M shape, random weights, {n} tokens after an 8-token prompt, CPU, ours on {args.cores or 'all'} core(s) "
        f"(weights built + loaded in {ours['load_s']:.1f} s)")
  print(f"{'':24} {'cold s':>8} {'warm s':>8} {'warm tok/s':>11} {'warm CPU s':>11}  same tokens as torch")
  row = lambda name, p: f"{name:24} {res[p + '_cold_s']:8.2f} {res[p + '_warm_s']:8.2f} {n / res[p + '_warm_s']:11.2f} {res[p + '_warm_cpu_s']:11.2f}"
  for m in modes:
    print(row("ours " + m, m) + f"  {ours[m + '_tokens'] == theirs['torch_tokens']}  ({ours[m + '_kernels_per_token']:.0f} kernels/token)")
  for r in runs:
    t = r["torch_threads"]
    print(row(f"torch eager ({t} thread{'s' * (t > 1)})", f"torch@{t}") + f"  {r['torch_tokens'] == theirs['torch_tokens']}")
    print(f"  ours/torch@{t}, symbolic, warm: {r['torch_warm_s'] / ours['symbolic_warm_s']:.2f} in tokens/s, "
          f"{r['torch_warm_cpu_s'] / ours['symbolic_warm_cpu_s']:.2f} in CPU time")
  print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")

if __name__ == "__main__": main()
