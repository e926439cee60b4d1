#!/usr/bin/env bash
# dev/bench_lora.sh — LoRA against full fine-tuning of the same model (section 7 of `make bench`;
# dev/bench.sh runs it, or run it alone): R = 2 ranks of the CPU device, ZeRO-1 and ZeRO-3, each
# rank one thread; per run the peak memory per rank (VmHWM, the largest rank's, from log.jsonl's
# "memory": "end" line: on the CPU device "device" memory is the process's RAM) and the median step
# time after the first two steps (rank 0's log), then LoRA / full fine-tuning as ratios measured in
# the same run. LoRA: -lora 8 on every target (the frozen base: parameters only; the adapters hold
# the gradients, master, m and v), the ZeRO-3 rows with the base sharded and replicated (-lora-base).
# QLoRA: the same with -lora-quant nf4 (the layers' matrices in 4 bits: docs/qlora.md), its memory,
# step time and "params" bytes (the rank's parameters: log.jsonl's memory line) against LoRA on the BF16
# base, measured in the same run; then the same three on a Llama-family model whose layers outweigh its
# embeddings (the 4-bit matrices' share of the base is what QLoRA saves).
#
# Usage: dev/bench_lora.sh [train binary (default ./train_cpu)] [steps (default 10)]
set -euo pipefail
cd "$(dirname "$0")/.."
export ZT_VERBOSE=${ZT_VERBOSE:-1} # (the trainer's full start-up: memory table, every flag, which this script reads)
BIN=${1:-./train_cpu}
STEPS=${2:-10}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
MODEL="-e tiny -layers 4 -channels 256 -heads 4 -t 32 -b 2 -v 0 -s 0"
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
# lrun NAME FLAGS -> "vmhwm_MiB step_ms params_MiB"
lrun() {
    local dir="$tmp/$1"
    OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe --mca mpi_yield_when_idle 1 $BIN ${3:-$MODEL} -threads 1 -x "$STEPS" -o "$dir" $2 \
        > "$dir.out" 2>&1 || { echo "run $1 ($2) failed:" >&2; tail -5 "$dir.out" >&2; exit 1; }
    local hwm ms
    hwm=$(grep '"memory": "end"' "$dir/log.jsonl" | grep -o '"vmhwm": [0-9]*' | awk '{v = $2 / 1048576; if (v > m) m = v} END {print m}')
    ms=$(grep '"loss"' "$dir/log.jsonl" | awk -F'"ms": ' 'NR>2 {split($2,a,","); print a[1]}' | median)
    par=$(grep '"memory": "end"' "$dir/log.jsonl" | grep -o '"params": [0-9]*' | awk '{v = $2 / 1048576; if (v > m) m = v} END {print m}')
    echo "$hwm $ms $par"
}
echo "7. LoRA against full fine-tuning of the same model: $MODEL (GPT-2, V 50257), R = 2, one thread a rank,"
echo "   $STEPS steps (step time: the median after two); peak memory per rank: VmHWM, the larger rank's"
printf "   %-40s %12s %10s %16s %14s\n" "run" "VmHWM MiB" "step ms" "memory vs full" "time vs full"
for z in 1 3; do
    read -r fh fm _ < <(lrun "full_z$z" "-z $z")
    printf "   %-40s %12.1f %10.1f %16s %14s\n" "full fine-tuning, -z $z" "$fh" "$fm" "1.00x" "1.00x"
    bases="x"
    [ "$z" = 3 ] && bases="sharded replicated"
    for b in $bases; do
        extra=""; name="LoRA r 8, -z $z"
        [ "$b" != x ] && { extra="-lora-base $b"; name="LoRA r 8, -z $z -lora-base $b"; }
        read -r lh lm lp < <(lrun "lora_z${z}_$b" "-z $z -lora 8 $extra")
        awk -v n="$name" -v h="$lh" -v m="$lm" -v fh="$fh" -v fm="$fm" 'BEGIN {printf "   %-40s %12.1f %10.1f %15.2fx %13.2fx\n", n, h, m, h / fh, m / fm}'
        read -r qh qm qp < <(lrun "qlora_z${z}_$b" "-z $z -lora 8 -lora-quant nf4 $extra")
        awk -v n="QLoRA (nf4) ${name#LoRA }" -v h="$qh" -v m="$qm" -v fh="$fh" -v fm="$fm" -v lh="$lh" -v lm="$lm" -v p="$qp" -v lp="$lp" \
            'BEGIN {printf "   %-40s %12.1f %10.1f %15.2fx %13.2fx   vs LoRA: memory %.2fx, time %.2fx, params %.2fx\n", n, h, m, h / fh, m / fm, h / lh, m / lm, p / lp}'
    done
done
LMODEL="-e smollm2-135m -layers 16 -vocab 50257 -t 32 -b 2 -v 0 -s 0"
echo "   the Llama family, layers outweighing the embeddings: $LMODEL (16 of SmolLM2-135M's 30 layers, GPT-2's vocabulary for the data, tied), -z 3:"
read -r fh fm _ < <(lrun "lfull" "-z 3" "$LMODEL")
read -r lh lm lp < <(lrun "llora" "-z 3 -lora 8" "$LMODEL")
read -r qh qm qp < <(lrun "lqlora" "-z 3 -lora 8 -lora-quant nf4" "$LMODEL")
printf "   %-40s %12.1f %10.1f %16s %14s\n" "full fine-tuning" "$fh" "$fm" "1.00x" "1.00x"
awk -v h="$lh" -v m="$lm" -v fh="$fh" -v fm="$fm" 'BEGIN {printf "   %-40s %12.1f %10.1f %15.2fx %13.2fx\n", "LoRA r 8", h, m, h / fh, m / fm}'
awk -v h="$qh" -v m="$qm" -v fh="$fh" -v fm="$fm" -v lh="$lh" -v lm="$lm" -v p="$qp" -v lp="$lp" \
    'BEGIN {printf "   %-40s %12.1f %10.1f %15.2fx %13.2fx   vs LoRA: memory %.2fx, time %.2fx, params %.2fx\n", "QLoRA r 8 (nf4)", h, m, h / fh, m / fm, h / lh, m / lm, p / lp}' 
