#!/usr/bin/env bash
# dev/perf_gpu.sh — ./train beside PyTorch on one GPU: tokens/s, MFU and peak memory, one markdown
# table, at most 6 minutes wall (dev/gpu_check.sh --perf calls it; it runs alone too).
#
#   bash dev/perf_gpu.sh             # on a GPU machine, with ./train_gpu (make gpu-binaries)
#   bash dev/perf_gpu.sh --dry-run   # anywhere: the planner's pick of d48's B and the table from
#                                    # sample lines, nothing on a GPU (make test runs this)
#
# The runs, in this order (T = 1024, BF16, one GPU, the KJV shards for ./train, random tokens for
# PyTorch: token values do not change a dense model's speed):
#   0. `test/test_gpu --bench`: each memory-bound kernel on its 16-byte and its element path, time
#      and bandwidth against docs/cuda.md's predictions (test/gpu_bench.h), ~20 s;
#   1. d12 B 16: ./train, then dev/bench_torch_gpu.py with torch.compile;
#   2. d48 at the planner's B: the largest B in 16, 8, 4, 2, 1 for which `./train -plan` on this GPU
#      recommends a (-z, -r) row, run with that row; PyTorch with torch.compile if d12 B 16's first
#      step (compilation) took under 90 s, else eager + SDPA (the table says which);
#   3. d12 B 64, as 1.
# Each run has a time limit, cut to what is left of the 6 minutes, so the script ends in time; a
# run cut off or failed shows as such in the table, and its log is kept ($PERF_LOGS, and $OUT).
#
# Numbers: tokens/s is the median over the steps after the first 3 (./train's step lines: 12 steps
# at d12, 8 at d48, whose start-up alone is ~1.5 min of host initialisation today; PyTorch's own
# median after its warm-up steps). MFU is computed here, the same way for both programs, with llm.c's formula:
#   6 N + 6 L C T FLOPs per token (N: parameters, the padded vocabulary 50304 included), over the
#   GPU's BF16 dense peak (989 TFLOP/s for an H100 or H200 SXM; vendor datasheets).
# (./train's own "mfu" counts 6 N + 12 L C T, the PaLM count, ~7% higher at d12.) Peak memory:
# ./train's device memory in use beyond the CUDA context (every buffer is allocated at start-up;
# a step allocates nothing), PyTorch's torch.cuda.max_memory_allocated; neither counts the context.
#
# Environment: ZT_TRAIN (the trainer command, default ./train_gpu), ZT_TEST_GPU (default ./test/test_gpu),
# ZT_TORCH_PYTHON (default python3),
# PERF_BUDGET_S (default 360), PERF_LOGS (default /tmp/perf_gpu).
set -u
cd "$(dirname "$0")/.."
export ZT_VERBOSE=${ZT_VERBOSE:-1} # (the trainer's full start-up: memory table, every flag, which this script reads)
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
TRAIN=${ZT_TRAIN:-./train_gpu}
TEST_GPU=${ZT_TEST_GPU:-./test/test_gpu}
PY=${ZT_TORCH_PYTHON:-python3}
BUDGET=${PERF_BUDGET_S:-360}
LOGS=${PERF_LOGS:-/tmp/perf_gpu}
PEAK_TFLOPS=${PERF_PEAK_TFLOPS:-989}
STEPS=12 # ./train steps per d12 run (d48: 8); the median is over the steps after the third
mkdir -p "$LOGS"
START=$(date +%s)
say() { echo "[perf_gpu $(( $(date +%s) - START ))s] $*"; }

# llm.c's FLOPs per token for GPT-2 dN (llm.c's widths): 6 N + 6 L C T, N with Vp = 50304, maxT = 1024.
flops_per_token() { # depth T
    awk -v d="$1" -v T="$2" 'BEGIN {
        C = (d == 6 ? 384 : d == 12 ? 768 : d == 24 ? 1024 : d == 36 ? 1280 : d == 48 ? 1600 : 0); L = d;
        N = 50304 * C + 1024 * C + L * (12 * C * C + 13 * C) + 2 * C;
        printf "%.0f", 6 * N + 6 * L * C * T }'
}
mfu() { # tok_s depth: percent with one decimal, or n/a
    local f; f=$(flops_per_token "$2" 1024)
    awk -v t="${1:-}" -v f="$f" -v p="$PEAK_TFLOPS" 'BEGIN { if (t + 0 > 0) printf "%.1f%%", 100 * t * f / (p * 1e12); else printf "n/a" }'
}

# run NAME SECONDS CMD...: CMD under min(SECONDS, what is left of the budget); its log kept.
# Sets RC (124: cut off by the time limit).
run() {
    local name=$1 limit=$2 left t
    shift 2
    left=$(( BUDGET - ($(date +%s) - START) ))
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$DRY" -eq 1 ]; then say "would run $name (limit ${limit}s): $*"; RC=0; return; fi
    if [ "$limit" -le 5 ]; then say "$name: skipped, the 6-minute budget is spent"; RC=125; return; fi
    t=$(date +%s)
    timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
    RC=$?
    say "$name: exit $RC$([ $RC -eq 124 ] && echo ' (time limit)') in $(( $(date +%s) - t )) s"
    [ -n "${OUT:-}" ] && cp "$LOGS/$name.log" "$OUT/" 2>/dev/null
}

# From a ./train log: median tok/s over the step lines after the first 3, and the device memory (MiB).
ours_tok_s() { grep -E '^step +[0-9]+/' "$1" 2>/dev/null | awk -F'|' '{ split($1, s, /[ \/]+/); if (s[2] > 3) for (i = 1; i <= NF; i++) if ($i ~ /tok\/s/) { v = $i; gsub(/[^0-9.]/, "", v); print v } }' | sort -n | awk '{a[NR] = $1} END { if (NR) print a[int((NR + 1) / 2)] }'; }
ours_mib() { grep -oE 'device memory: [0-9.]+ MiB' "$1" 2>/dev/null | grep -oE '[0-9.]+' | head -n 1; }
torch_field() { grep -oE "$2 [0-9.]+" "$1" 2>/dev/null | tail -n 1 | awk '{print $2}'; }

ROWS=()
# row LABEL DEPTH B OURS_LOG OURS_RC TORCH_LOG TORCH_RC TORCH_MODE
row() {
    local ot om tt tm ratio
    ot=$(ours_tok_s "$4"); om=$(ours_mib "$4")
    tt=$(torch_field "$6" tok_s); tm=$(torch_field "$6" peak_mib)
    [ "$5" -ne 0 ] && [ -z "$ot" ] && ot="fail (exit $5)"
    [ "$7" -ne 0 ] && [ -z "$tt" ] && tt="fail (exit $7)"
    ratio=$(awk -v a="$ot" -v b="$tt" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else printf "-" }')
    ROWS+=("| $1 | $3 | ${ot:--} | $(mfu "$ot" "$2") | ${om:--} | ${tt:--} | $(mfu "$tt" "$2") | ${tm:--} | $8 | $ratio |")
}

if [ "$DRY" -eq 1 ]; then say "dry run: nothing runs on a GPU; trainer for -plan: $TRAIN"; fi
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
say "GPU: ${GPU:-none found}; budget ${BUDGET}s; MFU: 6N + 6LCT per token at ${PEAK_TFLOPS} TFLOP/s"
COMMON="-device cuda -t 1024 -u 2 -v 0 -s 0"

# ---- the kernels alone
run kernels 60 $TEST_GPU --bench

# ---- d12 at B = 16 (then d48, then d12 at B = 64: the order of importance, should time run short)
d12_pair() { # B
    run "ours_d12_b$1" 90 $TRAIN $COMMON -x $STEPS -e d12 -b $1; ORC=$RC
    run "torch_d12_b$1" 150 $PY dev/bench_torch_gpu.py --depth 12 -B $1 -T 1024 --steps 10 --warmup 3; TRC=$RC
    row "d12" 12 $1 "$LOGS/ours_d12_b$1.log" $ORC "$LOGS/torch_d12_b$1.log" $TRC "torch.compile"
}
d12_pair 16
COMPILE_S=$(torch_field "$LOGS/torch_d12_b16.log" first_step_s)

# ---- d48 at the planner's B (its recommended -z, -r)
B48=""; ZR=""
for b in 16 8 4 2 1; do
    where="-device cuda" # this GPU's free memory
    [ "$DRY" -eq 1 ] && where="-device cpu -gpu-mem 139GiB" # the dry run: an H200's usable memory
    rec=$($TRAIN -plan $where -e d48 -t 1024 -b $b 2>&1 | grep -E '^recommendation: -z' | head -n 1)
    if [ -n "$rec" ]; then B48=$b; ZR=$(echo "$rec" | grep -oE '\-z [0-9] -r [0-9]'); break; fi
done
if [ -z "$B48" ]; then
    say "d48: the planner recommends nothing at B = 16..1 on this GPU: no d48 row"
    ROWS+=("| d48 | - | planner: nothing fits | | | | | | | |")
else
    say "d48: the planner's B = $B48 ($ZR)"
    mode="torch.compile"; nc=""
    if ! awk -v c="${COMPILE_S:-999}" 'BEGIN { exit !(c < 90) }'; then mode="eager + SDPA (d12 compile ${COMPILE_S:-unknown} s)"; nc="--no-compile"; fi
    run "ours_d48" 150 $TRAIN $COMMON -x 8 -e d48 -b $B48 $ZR; ORC=$RC
    run "torch_d48" 150 $PY dev/bench_torch_gpu.py --depth 48 -B $B48 -T 1024 --steps 6 --warmup 2 $nc; TRC=$RC
    row "d48 ($ZR)" 48 $B48 "$LOGS/ours_d48.log" $ORC "$LOGS/torch_d48.log" $TRC "$mode"
fi
d12_pair 64

if [ "$DRY" -eq 1 ]; then # the table from sample lines, as the real logs print them
    printf 'device memory: 2345.6 MiB in use beyond the context and communicator, the planner says 2300.0 MiB (within 5%% or 256 MiB)\n' > "$LOGS/sample_ours.log"
    for s in 1 2 3 4 5 6 7; do printf 'step %5d/7 | loss 9.0 | lr 1e-4 | norm 1.0 | 40.0 ms | %d tok/s | mfu 40.0%%\n' $s $((400000 + s * 1000)) >> "$LOGS/sample_ours.log"; done
    echo "torch_gpu model d12 B 16 T 1024 tok_s 380000 mfu 0.350 peak_mib 9876 first_step_s 55.0 (sample)" > "$LOGS/sample_torch.log"
    ROWS=()
    row "d12 (sample lines)" 12 16 "$LOGS/sample_ours.log" 0 "$LOGS/sample_torch.log" 0 "torch.compile"
fi

echo
grep -E '^(memory-bound|  bench )' "$LOGS/kernels.log" 2>/dev/null
echo
echo "$(date -u +%Y-%m-%d), ${GPU:-no GPU}, T = 1024, BF16; MFU = llm.c's 6N + 6LCT per token over ${PEAK_TFLOPS} TFLOP/s BF16 dense"
echo
echo "| model | B | zerotrain tok/s | MFU | peak MiB | PyTorch tok/s | MFU | peak MiB | PyTorch mode | ratio |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for r in "${ROWS[@]}"; do echo "$r"; done
say "done in $(( $(date +%s) - START )) s"
