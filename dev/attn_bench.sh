#!/usr/bin/env bash
# dev/attn_bench.sh — the attention microbenchmark: our kernels against PyTorch's SDPA on one GPU.
#
#   bash dev/attn_bench.sh              # B 16, NH 12, T 1024, HS 64 (GPT-2 small), then HS 128
#   bash dev/attn_bench.sh B NH T HS    # one shape
#
# Builds dev/attn_bench.cu with nvcc (no MPI, no NCCL, no BLAS; the GPU's own architecture), runs
# it, runs dev/attn_bench_torch.py (a python with torch: $ZT_TORCH_PYTHON, else python3) for each
# SDPA backend that takes the shape (flash, cuDNN), and prints both with the ratio ours / SDPA.
# FLOPs are the ideal causal FlashAttention counts for both (see the two programs). Meant to be
# called by dev/gpu_check.sh --perf; takes well under a minute. Exit code: non-zero when a program fails.
set -u
cd "$(dirname "$0")/.."
PY=${ZT_TORCH_PYTHON:-python3}
BIN=${ATTN_BENCH_BIN:-/tmp/zt_attn_bench}
nvcc -O3 -std=c++17 -x cu -arch=native -Xcompiler -fopenmp dev/attn_bench.cu -o "$BIN" -lcublasLt -lcublas -lgomp || exit 1
shapes=("16 12 1024 64" "8 12 1024 128")
[ $# -eq 4 ] && shapes=("$1 $2 $3 $4")
rc=0
for s in "${shapes[@]}"; do
    echo "== attention B NH T HS = $s (causal, BF16)"
    ours=$("$BIN" $s) || { echo "attn_bench failed"; rc=1; continue; }
    echo "$ours"
    theirs=$($PY dev/attn_bench_torch.py $s) || { echo "attn_bench_torch.py failed"; rc=1; continue; }
    echo "$theirs"
    # ours / SDPA per backend and direction
    echo "$theirs" | grep -v unavailable | while read -r name _ _ _ _ _ ftf _ btf; do
        oftf=$(echo "$ours" | awk '{print $7}'); obtf=$(echo "$ours" | awk '{print $9}')
        awk -v n="$name" -v a="$oftf" -v b="$ftf" -v c="$obtf" -v d="$btf" \
            'BEGIN { printf "ours / %s: forward %.2f, backward %.2f (the issue asks >= 0.5)\n", n, a / b, c / d }'
    done
done
exit $rc
