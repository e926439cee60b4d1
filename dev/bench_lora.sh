#!/usr/bin/env bash
# dev/bench_lora.sh — LoRA against full fine-tuning of the same model (section 7 of `make bench`;
# dev/bench.sh runs it, or run it alone): R = 2 ranks of the CPU device, ZeRO-1 and ZeRO-3, each
# rank one thread; per run the peak memory per rank (VmHWM, the largest rank's, from log.jsonl's
# "memory": "end" line: on the CPU device "device" memory is the process's RAM) and the median step
# time after the first two steps (rank 0's log), then LoRA / full fine-tuning as ratios measured in
# the same run. LoRA: -lora 8 on every target (the frozen base: parameters only; the adapters hold
# the gradients, master, m and v), the ZeRO-3 rows with the base sharded and replicated (-lora-base).
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
# lrun NAME FLAGS -> "vmhwm_MiB step_ms"
lrun() {
    local dir="$tmp/$1"
    OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe --mca mpi_yield_when_idle 1 $BIN $MODEL -threads 1 -x "$STEPS" -o "$dir" $2 \
        > "$dir.out" 2>&1 || { echo "run $1 ($2) failed:" >&2; tail -5 "$dir.out" >&2; exit 1; }
    local hwm ms
    hwm=$(grep '"memory": "end"' "$dir/log.jsonl" | grep -o '"vmhwm": [0-9]*' | awk '{v = $2 / 1048576; if (v > m) m = v} END {print m}')
    ms=$(grep '"loss"' "$dir/log.jsonl" | awk -F'"ms": ' 'NR>2 {split($2,a,","); print a[1]}' | median)
    echo "$hwm $ms"
}
echo "7. LoRA against full fine-tuning of the same model: $MODEL (GPT-2, V 50257), R = 2, one thread a rank,"
echo "   $STEPS steps (step time: the median after two); peak memory per rank: VmHWM, the larger rank's"
printf "   %-40s %12s %10s %16s %14s\n" "run" "VmHWM MiB" "step ms" "memory vs full" "time vs full"
for z in 1 3; do
    read -r fh fm < <(lrun "full_z$z" "-z $z")
    printf "   %-40s %12.1f %10.1f %16s %14s\n" "full fine-tuning, -z $z" "$fh" "$fm" "1.00x" "1.00x"
    bases="x"
    [ "$z" = 3 ] && bases="sharded replicated"
    for b in $bases; do
        extra=""; name="LoRA r 8, -z $z"
        [ "$b" != x ] && { extra="-lora-base $b"; name="LoRA r 8, -z $z -lora-base $b"; }
        read -r lh lm < <(lrun "lora_z${z}_$b" "-z $z -lora 8 $extra")
        awk -v n="$name" -v h="$lh" -v m="$lm" -v fh="$fh" -v fm="$fm" 'BEGIN {printf "   %-40s %12.1f %10.1f %15.2fx %13.2fx\n", n, h, m, h / fh, m / fm}'
    done
done
