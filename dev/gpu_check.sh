#!/usr/bin/env bash
# dev/gpu_check.sh — the CUDA device checked on one GPU, in independent stages that each print a
# line when they finish (a run that is cut off still reports what it did). Default: under 4 minutes.
#
#   bash dev/gpu_check.sh          # versions, every op against the CPU device, the model against
#                                  # PyTorch, 20 training steps, -r 0..3 and -z 0..3 bitwise,
#                                  # two processes hashing the same run
#   bash dev/gpu_check.sh --perf   # + tokens/s, MFU and peak memory for d12 and d48 at T = 1024,
#                                  # beside PyTorch on the same GPU (dev/bench_torch_gpu.py)
#
# Binaries: ./train_gpu and ./test/test_gpu when present and loadable (`make gpu-binaries` builds
# them ahead on a machine with nvcc: CUDA 13, sm_80/sm_90, no MPI, no OpenBLAS), else built here.
# NCCL and cuBLAS are found in the CUDA toolkit's folders or in Python's site-packages (nvidia-*).
# Logs go to $GPU_CHECK_LOGS (default /tmp/gpu_check), and to $OUT when it is set.
set -u
cd "$(dirname "$0")/.."
PERF=0
[ "${1:-}" = "--perf" ] && PERF=1
LOGS=${GPU_CHECK_LOGS:-/tmp/gpu_check}
mkdir -p "$LOGS"
START=$(date +%s)
npass=0; nfail=0

say() { echo "[gpu_check $(( $(date +%s) - START ))s] $*"; }

# stage NAME SECONDS CMD...: run CMD with a time limit; one line with the verdict; its log kept.
stage() {
    local name=$1 limit=$2 t rc
    shift 2
    t=$(date +%s)
    timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then npass=$((npass + 1)); say "$name: PASS ($(( $(date +%s) - t )) s)"
    else nfail=$((nfail + 1)); say "$name: FAIL (exit $rc$([ $rc -eq 124 ] && echo ', timed out'), $(( $(date +%s) - t )) s): see $LOGS/$name.log"; tail -n 15 "$LOGS/$name.log" | sed 's/^/    /'; fi
    [ -n "${OUT:-}" ] && cp "$LOGS/$name.log" "$OUT/" 2>/dev/null
    return $rc
}

# ---- 1. versions; NCCL and CUDA libraries
say "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi not found')"
say "nvcc: $(nvcc --version 2>/dev/null | tail -n 1 || echo 'not found')"
PY=${ZT_TORCH_PYTHON:-python3}
NCCL_PY=$($PY -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
if [ -z "${NCCL_HOME:-}" ] && [ -n "$NCCL_PY" ] && [ -f "$NCCL_PY/include/nccl.h" ]; then export NCCL_HOME=$NCCL_PY; fi
for d in "${NCCL_HOME:-}/lib" $($PY -c 'import nvidia, os; print(" ".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in os.listdir(p)))' 2>/dev/null); do
    [ -d "$d" ] && LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
export LD_LIBRARY_PATH
NCCL_H=$(ls "${NCCL_HOME:-/usr/local/cuda}/include/nccl.h" /usr/local/cuda/include/nccl.h 2>/dev/null | head -n 1)
say "NCCL: ${NCCL_HOME:-toolkit} $( [ -n "$NCCL_H" ] && grep -E 'define NCCL_(MAJOR|MINOR|PATCH)' "$NCCL_H" | awk '{printf "%s.", $3}')"

# ---- 2. binaries: carried ones if they load, else build here
usable() { [ -x "$1" ] && ldd "$1" 2>/dev/null | grep -q "not found" && return 1; [ -x "$1" ]; }
if usable ./train_gpu && usable ./test/test_gpu; then
    say "using the prebuilt ./train_gpu and ./test/test_gpu"
else
    stage build 600 make gpu-binaries || { say "cannot build: stopping"; exit 1; }
fi
export ZT_TORCH_PYTHON=$PY

# ---- 3. every CUDA op against the CPU device (forward and backward), AdamW bitwise
stage ops 240 ./test/test_gpu gpu_
grep -E "rel err|GPU:" "$LOGS/ops.log" | sed 's/^/    /'

# ---- 4. the whole model on the GPU against PyTorch (logits, loss, every gradient, 10 AdamW steps),
#         -r 0..3 bitwise, ZeRO-0..3 bitwise at one rank with poisoning and a comm delay, export
stage model 240 ./test/test_gpu model_
grep -E "logits|grad\.|worst" "$LOGS/model.log" | sed 's/^/    /'
stage recompute_bitwise 120 ./test/test_gpu recompute_modes_bitwise
stage zero_stages_bitwise 120 ./test/test_gpu zero_stages_one_rank_bitwise

# ---- 5. 20 training steps of GPT-2 124M on the built-in corpus
stage train20 240 ./train_gpu -device cuda -e d12 -b 8 -t 512 -x 20 -v 0 -s 0 -u 2
grep -E "^step +(1|20)/|device memory" "$LOGS/train20.log" | sed 's/^/    /'

# ---- 6. -r 0..3 and -z 0..3 on the GPU: the same bits (hashes of parameters, master, m, v)
SMALL="-device cuda -e d6 -b 4 -t 256 -x 3 -v 0 -s 0 -log-hash 1"
same_hashes() { # run the trainer with each flag set; all hash lines must be equal
    local first="" h
    for extra in "$@"; do
        h=$(./train_gpu $SMALL $extra 2>&1 | grep '^hashes:') || { echo "run '$extra' failed"; return 1; }
        echo "$extra: $h"
        [ -z "$first" ] && first=$h
        [ "$h" = "$first" ] || { echo "differs from the first"; return 1; }
    done
}
stage recompute_train 180 same_hashes "-r 0" "-r 1" "-r 2" "-r 3"
stage zero_train 180 same_hashes "-z 0 -poison 1 -comm-delay 5" "-z 1 -poison 1 -comm-delay 5" "-z 2 -poison 1 -comm-delay 5" "-z 3 -poison 1 -comm-delay 5"
# two separate processes, the same command: the same bits
stage two_processes 120 same_hashes "-z 3" "-z 3"

# ---- 7. what this version does not do yet
say "no_sync_in_step: NOT CHECKED — this version reads the loss and the gradient norm back synchronously once per step"

# ---- 8. --perf: throughput against PyTorch on the same GPU
if [ $PERF -eq 1 ]; then
    for cfg in "12 16" "48 4"; do
        set -- $cfg
        d=$1; b=$2
        stage "perf_d$d" 300 ./train_gpu -device cuda -e "d$d" -b "$b" -t 1024 -x 15 -v 0 -s 0 -u 2
        ours=$(grep -E '^step +1[0-5]/' "$LOGS/perf_d$d.log" | sed -E 's/.*\| ([0-9]+) tok\/s.*/\1/' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
        mfu=$(grep -E '^step +15/' "$LOGS/perf_d$d.log" | grep -oE 'mfu [0-9.]+%|mfu n/a')
        stage "torch_d$d" 300 $PY dev/bench_torch_gpu.py --depth "$d" -B "$b" -T 1024
        theirs=$(grep -oE 'tok_s [0-9]+' "$LOGS/torch_d$d.log" | awk '{print $2}')
        say "d$d B $b T 1024: zerotrain ${ours:-?} tok/s ($mfu), PyTorch ${theirs:-?} tok/s: ratio $(awk -v a="${ours:-0}" -v b="${theirs:-0}" 'BEGIN {print (b > 0 ? sprintf("%.2f", a / b) : "n/a")}')"
        grep -E "device memory" "$LOGS/perf_d$d.log" | sed 's/^/    /'
        grep -E "torch_gpu" "$LOGS/torch_d$d.log" | sed 's/^/    /'
    done
fi

say "done: $npass stages passed, $nfail failed"
[ $nfail -eq 0 ]
