#!/usr/bin/env bash
# Issue 28's acceptance rows in one command, for the session that draws an AVX-512 host: every row natively, then
# again with our kernels (and torch, bench/_common.py torch_isa_env) limited to AVX2 by CPU_ISA=x86-64-v3. An AVX2-only
# host runs the native pass only (it is the x86-64-v3 pass there). Each program's full output goes to
# OUTDIR/<isa>/, and the lines the closing note needs are printed at the end:
#   - bench/run.py: matmul N=512/1024/2048 ours/np, the 64M sum, the convs (their fwd+bwd TinyJit step with
#     nn.Conv2d layers never realized against realized: target <= 1.2x), 3 rounds, the libraries taking turns;
#   - bench/train_bench.py: the beautiful_mnist TinyJit step (all cores and one core) and the eager digits step
#     (target <= 2x torch eager);
#   - bench/sum_ab.py: the 64M sum, ours and torch asked in turn in one script (robust to a busy minute);
#   - bench/perf_fuzz.py: no heavy kernel under half of its stand-alone speed.
# Meaningful on a quiet machine only (no test run, no helper beside it): about 15 minutes a pass on 2 cores.
#   bench/acceptance.sh OUTDIR [--quick]     (--quick: small sizes and counts, to check the script itself)
set -u
out=${1:?usage: bench/acceptance.sh OUTDIR [--quick]}
quick=${2:-}
cd "$(dirname "$0")/.."
mkdir -p "$out"
isas=(native)
grep -qw avx512f /proc/cpuinfo && isas+=(x86-64-v3)
if [ "$quick" = --quick ]; then
  run_args=(--quick --only matmul,sum,convtrain --no-llvm --no-train --rounds 1 --wait-idle 0)
  train_args=(--steps 6 --mnist-steps 4 --mnist-rounds 1 --eager-runs 1 --beam-runs 0)
  sum_args=(--rounds 2 --n 1048576); fuzz_args=(--cases 2 --reps 2)
else
  run_args=(--only matmul,sum,conv,convtrain,convvar --no-llvm --no-train --rounds 3 --wait-idle 10)
  train_args=(--mnist-rounds 3 --mnist-one-core 3 --eager-runs 5 --beam-runs 0)
  sum_args=(--rounds 9); fuzz_args=(--cases 40)
fi
{ date; git log --oneline -1; uptime; } > "$out/when.txt"
for isa in "${isas[@]}"; do
  d=$out/$isa; mkdir -p "$d"
  isa_env=(); [ "$isa" = native ] || isa_env=(CPU_ISA="$isa")
  echo "== $isa: run.py, train_bench.py, sum_ab.py, perf_fuzz.py -> $d"
  env "${isa_env[@]}" python bench/run.py "${run_args[@]}" --json "$d/run.json" > "$d/run.txt" 2>&1 || echo "run.py failed: $d/run.txt"
  env "${isa_env[@]}" python bench/train_bench.py "${train_args[@]}" > "$d/train.txt" 2>&1 || echo "train_bench.py failed: $d/train.txt"
  env "${isa_env[@]}" python bench/sum_ab.py "${sum_args[@]}" > "$d/sum_ab.txt" 2>&1 || echo "sum_ab.py failed: $d/sum_ab.txt"
  env "${isa_env[@]}" python bench/perf_fuzz.py "${fuzz_args[@]}" --json "$d/perf_fuzz.json" > "$d/perf_fuzz.txt" 2>&1 \
    || echo "perf_fuzz.py failed: $d/perf_fuzz.txt"
done
{ date; uptime; } >> "$out/when.txt"
for isa in "${isas[@]}"; do
  d=$out/$isa
  echo; echo "===== $isa"
  grep -E "^(machine|ours:)|^(matmul|sum|conv)|nn.Conv2d|never realized|lazy" "$d/run.txt"
  grep -iE "mnist|eager|digits|ours/torch|torch/ours" "$d/train.txt" | tail -n 12
  tail -n 3 "$d/sum_ab.txt"
  grep -iE "worst|cliff|ratio" "$d/perf_fuzz.txt" | tail -n 12
done
