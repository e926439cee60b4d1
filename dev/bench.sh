#!/usr/bin/env bash
# dev/bench.sh — CPU-device benchmarks, printed side by side (what `make bench` runs).
#
#   Against PyTorch: tokens/s of one training step (forward, backward, AdamW) of the same model
#   in FP32 on the same number of threads: ./train_cpu_fp32 (plain loop, and OpenBLAS when built
#   with it) and ./train_cpu (BF16) beside dev/bench_torch.py, as ratios. Goal: >= 0.5x.
#   Against transformers: -e llama-tiny beside Hugging Face's own LlamaForCausalLM of that shape in
#   FP32, same threads (dev/bench_llama_hf.py, run by $ZT_HF_PYTHON or /tmp/zt-hf47). Goal: >= 1.3x.
#   The CPU GEMM those steps spend most of their time in: GFLOP/s of the LM head's products per
#   microkernel path against the FMA peak of the same threads (test/test_fp32 --bench-gemm).
#   ZeRO stages: tokens/s at -np 2 and -np 4 for each stage as a ratio to ZeRO-0 at the same R,
#   and the share of the step spent waiting in collectives (from log.jsonl's comm_wait_ms).
#   Offload: tokens/s with -offload none / cpu / nvme (-z 1, the model of 1.), as ratios to none;
#   parameter offload (3b.): -z 3 with -offload-params cpu / nvme (and nvme without its read-ahead) against resident;
#   the host AdamW -offload runs (test/test_bf16 --bench-adamw: every path this CPU has, ZT_SIMD's
#   scalar / avx2 / avx512) at 2^24 and 2^26 elements, in bytes moved per second against memcpy
#   moving as many bytes (goal >= 0.5x), and per element beside PyTorch's CPU AdamW (for-loop,
#   foreach, fused where the installed version has them; goal: PyTorch's fastest takes >= 3x ours).
#   -tokenize: MB/s of our C encoder (llm.c's GPT-2 file, and GPT-2 as a tokenizer.json) beside
#   tiktoken and Hugging Face tokenizers on the same KJV documents (dev/bench_tokenize.py), as ratios;
#   the encode phase's speed-up on all threads against one beside what the machine gives that many
#   one-thread runs at once (measured in the same run: the ceiling), and the whole command's.
#   The chunked classifier: peak memory (VmHWM) and step time of a V = 128,256 model at B*T = 16,384
#   tokens with the classifier in chunks (test/test_bf16 --train, the trainer) and in one chunk of all
#   rows (--train-unchunked: the head before ops/classifier.cuh chunked it), as ratios.
#   LoRA (dev/bench_lora.sh): peak memory per rank (VmHWM) and step time of -lora 8 against full
#   fine-tuning of the same model at R = 2, ZeRO-1 and ZeRO-3 (the base sharded and replicated), as ratios.
#   Packed fine-tuning (-doc-attention, docs/packing.md): tokens/s of -e tiny on prompt/completion
#   examples packed for T = 512 with each example isolated (-doc-attention 1) against one sequence
#   per sample (-doc-attention 0), as a ratio, beside the share of causal attention pairs that
#   isolation leaves (read from the masks' example starts).
#
# Numbers are medians over the steps after the first two (warm-up). Timings on a shared or
# oversubscribed machine are noisy: compare ratios within one run, not across machines.
# Usage: dev/bench.sh [train binary (default ./train_cpu)] [steps (default 10)]
set -euo pipefail
cd "$(dirname "$0")/.."
export ZT_VERBOSE=${ZT_VERBOSE:-1} # (the trainer's full start-up: memory table, every flag, which this script reads)
BIN=${1:-./train_cpu}
STEPS=${2:-10}
THREADS=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# median of a column of numbers on stdin
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# run R z -> prints "tok_s comm_share"
run() {
    local R=$1 z=$2 dir="$tmp/R$1_z$2"
    OMP_NUM_THREADS=1 mpirun -np "$R" --oversubscribe --mca mpi_yield_when_idle 1 "$BIN" $MODEL -threads 1 \
        -x "$STEPS" -z "$z" -o "$dir" > "$dir.out" 2>&1 || { echo "run R=$R z=$z failed:" >&2; tail -5 "$dir.out" >&2; exit 1; }
    local tok share
    tok=$(grep '"loss"' "$dir/log.jsonl" | awk -F'"tok_s": ' 'NR>2 {split($2,a,","); print a[1]}' | median)
    share=$(grep '"loss"' "$dir/log.jsonl" | awk -F'"ms": |"comm_wait_ms": ' 'NR>2 {split($2,a,","); split($3,b,","); print b[1]/a[1]}' | median)
    echo "$tok $share"
}

cpu_model=$(grep -m1 -E '^(model name|Model|CPU part)' /proc/cpuinfo | cut -d: -f2 | xargs)
echo "zerotrain CPU benchmark — $(date -u +%Y-%m-%d), $(nproc) cores, ${cpu_model:-$(uname -m)}"
echo "SIMD path of the host loops (CPU GEMM, host AdamW): $(test/test_bf16 --simd) — docs/performance.md keeps a table per CPU class"
echo

# one process: median tokens/s of a binary with extra flags (and a model: default -e tiny)
single() {
    local dir="$tmp/single_$RANDOM"
    "$1" ${3:--e tiny} -b 8 -t 64 -v 0 -s 0 -x "$STEPS" -threads "$THREADS" -o "$dir" $2 > "$dir.out" 2>&1 || { tail -5 "$dir.out" >&2; exit 1; }
    grep '"loss"' "$dir/log.jsonl" | awk -F'"tok_s": ' 'NR>2 {split($2,a,","); print a[1]}' | median
}
echo "1. one process, $THREADS threads: the tiny model (L 4, C 128, NH 4, V 50257), B 8 x T 64, $STEPS steps"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    torch=$(/usr/bin/python3 dev/bench_torch.py --threads "$THREADS" --steps "$STEPS" -B 8 -T 64 | awk '{print $2}')
    torch_v=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')
else
    torch=""; echo "   (PyTorch not found for /usr/bin/python3: apt-get install python3-torch for the ratio)"
fi
printf "   %-44s %10s %12s\n" "run" "tokens/s" "vs PyTorch"
row() { awk -v n="$1" -v t="$2" -v p="$torch" 'BEGIN {if (p == "") printf "   %-44s %10.0f %12s\n", n, t, "-"; else printf "   %-44s %10.0f %11.2fx\n", n, t, t / p}'; }
[ -n "$torch" ] && row "PyTorch $torch_v FP32 (dev/bench_torch.py)" "$torch"
row "zerotrain FP32, plain loop (-blas 0)" "$(single ./train_cpu_fp32 "-blas 0")"
if ./train_cpu_fp32 -blas 1 -x 0 -v 0 -s 0 > /dev/null 2>&1; then
    row "zerotrain FP32, OpenBLAS (-blas 1)" "$(single ./train_cpu_fp32 "-blas 1")"
fi
row "zerotrain BF16, plain loop" "$(single ./train_cpu "-blas 0")"
echo
echo "1b. one process, $THREADS threads: llama-tiny (L 4, C 128, NH 4, NKV 2, head_dim 32, F 352, V 50257, untied), B 8 x T 64,"
echo "    $STEPS steps, beside transformers' own LlamaForCausalLM of that shape in FP32 (dev/bench_llama_hf.py; goal >= 1.3x)"
HPY=${ZT_HF_PYTHON:-}
[ -z "$HPY" ] && [ -x /tmp/zt-hf47/bin/python ] && HPY=/tmp/zt-hf47/bin/python
hf=""
if [ -n "$HPY" ] && "$HPY" -c 'import transformers, sys; from transformers import LlamaConfig; sys.exit(0 if "head_dim" in LlamaConfig().to_dict() else 1)' 2>/dev/null; then
    hf=$("$HPY" dev/bench_llama_hf.py --threads "$THREADS" --steps "$STEPS" -B 8 -T 64 2>/dev/null | awk '$1 == "hf_tok_s" {print $2}')
    hf_v=$("$HPY" -c 'import transformers, torch; print(transformers.__version__, "over torch", torch.__version__)')
else
    echo "   (no transformers >= 4.45 for \$ZT_HF_PYTHON (${HPY:-unset}): .ci/run's venv or /tmp/zt-hf47 gives the ratio)"
fi
lrow() { awk -v n="$1" -v t="$2" -v p="$hf" 'BEGIN {if (p == "") printf "   %-44s %10.0f %12s\n", n, t, "-"; else printf "   %-44s %10.0f %11.2fx\n", n, t, t / p}'; }
printf "   %-44s %10s %12s\n" "run" "tokens/s" "vs HF"
[ -n "$hf" ] && lrow "transformers $hf_v FP32" "$hf"
if ./train_cpu_fp32 -e llama-tiny -x 0 -v 0 -s 0 > "$tmp/llama_probe.out" 2>&1; then
    lrow "zerotrain FP32, plain loop (-blas 0)" "$(single ./train_cpu_fp32 "-blas 0" "-e llama-tiny")"
    if ./train_cpu_fp32 -blas 1 -x 0 -v 0 -s 0 > /dev/null 2>&1; then
        lrow "zerotrain FP32, OpenBLAS (-blas 1)" "$(single ./train_cpu_fp32 "-blas 1" "-e llama-tiny")"
    fi
    lrow "zerotrain BF16, plain loop" "$(single ./train_cpu "-blas 0" "-e llama-tiny")"
else
    echo "   SKIP: ./train_cpu_fp32 -e llama-tiny does not run: $(tail -1 "$tmp/llama_probe.out")"
fi
echo
echo "1c. the CPU GEMM of 1. and 1b. (ops/matmul.cuh's cpu_gemm, FP32 build), $THREADS threads: the LM head's three products"
echo "    and a block's fc on each microkernel path this CPU has (ZT_SIMD), beside the FMA peak (test/test_fp32 --bench-gemm)"
if [ -x test/test_fp32 ]; then test/test_fp32 --bench-gemm "$THREADS"; else echo "   SKIP: test/test_fp32 not built (make test/test_fp32)"; fi
echo
MODEL="-e tiny -b 4 -t 64 -v 0 -s 0"
echo "2. ZeRO stages: $MODEL, $STEPS steps, one thread per rank (ranks share $(nproc) cores)"
printf "   %-4s %-7s %12s %14s %16s\n" "R" "stage" "tokens/s" "vs ZeRO-0" "comm wait share"
for R in 2 4; do
    base=""
    for z in 0 1 2 3; do
        read -r tok share < <(run "$R" "$z")
        [ -z "$base" ] && base=$tok
        awk -v R="$R" -v z="$z" -v t="$tok" -v b="$base" -v s="$share" 'BEGIN {printf "   %-4s %-7s %12.0f %13.2fx %15.1f%%\n", R, "ZeRO-" z, t, t / b, s * 100}'
    done
done
echo
echo "3. optimizer offload (-z 1, one process, $THREADS threads, the model of 1.): step time against the state in memory"
echo "   (on the CPU device -offload cpu is the same RAM: the cost of the code path; nvme: a file under $tmp, 16 MiB of buffers)"
mkdir -p "$tmp/offload"
printf "   %-44s %10s %12s\n" "run" "tokens/s" "vs none"
base=""
for off in none cpu "nvme -offload-dir $tmp/offload -offload-buffer 16MiB"; do
    tok=$(single ./train_cpu "-blas 0 -z 1 -offload $off")
    [ -z "$base" ] && base=$tok
    awk -v n="-offload ${off%% *}" -v t="$tok" -v b="$base" 'BEGIN {printf "   %-44s %10.0f %11.2fx\n", n, t, t / b}'
done
echo
echo "3b. parameter offload (-z 3, one process, $THREADS threads, llama-tiny of 1b.): step time with the parameter (and gradient)"
echo "   shards off the device against the same optimizer offload without it (on the CPU device cpu is the same RAM: the path's"
echo "   cost; nvme: files under $tmp), and nvme without the parameters' read-ahead (ZT_FAULT=offload-params-no-ahead:0)"
printf "   %-44s %10s %12s\n" "run" "tokens/s" "vs ref"
nv="-offload nvme -offload-dir $tmp/offload -offload-buffer 16MiB"
for run in "ref|-offload cpu|-z 3 -offload cpu" "|+ -offload-params cpu|-z 3 -offload cpu -offload-params cpu" \
           "ref|-offload nvme|-z 3 $nv" "|+ -offload-params nvme|-z 3 $nv -offload-params nvme" \
           "|+ -offload-params nvme, no read-ahead|-z 3 $nv -offload-params nvme"; do
    kind=${run%%|*}; rest=${run#*|}; name=${rest%%|*}; flags=${rest#*|}
    fault=""; [ "${name#*no read-ahead}" != "$name" ] && fault="offload-params-no-ahead:0"
    tok=$(ZT_FAULT=$fault single ./train_cpu "-blas 0 $flags" "-e llama-tiny")
    [ "$kind" = ref ] && base=$tok
    awk -v n="$name" -v t="$tok" -v b="$base" 'BEGIN {printf "   %-44s %10.0f %11.2fx\n", n, t, t / b}'
done
echo
echo "4. the host AdamW of -offload (adamw.cuh's host pass, each path this CPU has), $THREADS threads: bytes of state moved"
echo "   per second against memcpy moving as many bytes (goal >= 0.5x), and time per element against PyTorch's CPU AdamW"
echo "   (FP32 parameters; ours stores BF16 parameters beside the FP32 master; goal: PyTorch's fastest takes >= 3x ours)"
torch_ok=0
/usr/bin/python3 -c 'import torch' 2>/dev/null && torch_ok=1
for N in $((1 << 24)) $((1 << 26)); do
    echo "   $N elements:"
    test/test_bf16 --bench-adamw "$N" "$THREADS" > "$tmp/adamw.out"
    grep -v '^fastest' "$tmp/adamw.out"
    read -r _ path ours < <(grep '^fastest' "$tmp/adamw.out")
    if [ "$torch_ok" = 1 ]; then
        printf "   %-44s %9s %10s %12s\n" "optimizer" "ns/elem" "GB/s" "time vs ours"
        /usr/bin/python3 dev/bench_adamw_torch.py --elements "$N" --threads "$THREADS" > "$tmp/torch.out"
        awk -v o="$ours" -v p="$path" '
            $1 == "torch_adamw" {printf "   %-44s %9.2f %10.2f %11.2fx\n", "PyTorch " v " AdamW (" $2 ")", $3, $4, $3 / o; if (best == "" || $3 < best) best = $3}
            $1 == "torch_adamw_missing" {w = $2; $1 = ""; $2 = ""; sub(/^ +/, ""); print "   (PyTorch AdamW (" w "): " $0 ")"}
            END {if (best != "") printf "   PyTorch'"'"'s fastest CPU AdamW takes %.2fx the time of ours (%s update + maxima, %.2f ns/elem)\n", best / o, p, o}' \
            v="$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')" "$tmp/torch.out"
    fi
done
echo
echo "5. -tokenize throughput (GPT-2, the KJV four times over, 17 MB): ours in C against tiktoken and Hugging Face tokenizers"
echo "   on the same documents; ours encodes documents in parallel (OpenMP): 1 thread and all $THREADS"
TPY=${ZT_TIKTOKEN_PYTHON:-python3}
if "$TPY" -c 'import tiktoken, tokenizers' 2>/dev/null; then
    "$TPY" dev/bench_tokenize.py prepare "$tmp/tok"
    # ours: best of 3 by the encode phase's own time (the "in X s" -tokenize prints: reading, encoding,
    # writing and fsyncing the shards, not the process's start-up: MPI_Init and the shared libraries,
    # ~0.3 s here). Prints "encode-MB/s whole-command-MB/s encode-seconds CPU-seconds (user + sys)".
    ours() {
        local in=$1 best="" line="" TIMEFORMAT='%R %U %S'
        shift
        local n
        n=$(stat -c %s "$in")
        for _ in 1 2 3; do
            local t e
            t=$( { time ./train_cpu -tokenize "$in" "$@" -o "$tmp/tok/out_$$" > "$tmp/tok/ours.out"; } 2>&1 | tail -1)
            e=$(grep -o ') in [0-9.]* s' "$tmp/tok/ours.out" | grep -o '[0-9.]*')
            read -r w u s <<< "$t"
            if [ -z "$best" ] || awk -v a="$e" -v b="$best" 'BEGIN {exit !(a < b)}'; then
                best=$e; line=$(awk -v n="$n" -v e="$e" -v w="$w" -v u="$u" -v s="$s" 'BEGIN {printf "%.2f %.2f %.2f %.3f", n / e / 1e6, n / w / 1e6, e, u + s}')
            fi
        done
        echo "$line"
    }
    echo "   load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $THREADS cores (a busy machine muddies the thread ratio)"
    read -r o1 w1 e1 c1 <<< "$(OMP_NUM_THREADS=1 ours "$tmp/tok/kjv.txt")"
    read -r o2 w2 e2 c2 <<< "$(OMP_NUM_THREADS=1 ours "$tmp/tok/kjv.txt" -tokenizer "$tmp/tok/gpt2")"
    read -r oN wN eN cN <<< "$(ours "$tmp/tok/kjv.txt")"
    read -r o2N w2N e2N c2N <<< "$(ours "$tmp/tok/kjv.txt" -tokenizer "$tmp/tok/gpt2")"
    # the thread speed-up on the KJV 16 times over (69 MB: the printed seconds' 2 decimals are ~2 %),
    # beside what the machine gives $THREADS independent one-thread runs at once right now (their
    # throughput against one run alone): the ceiling for any parallel speed-up at this moment
    for _ in 1 2 3 4; do cat "$tmp/tok/kjv.txt"; done > "$tmp/tok/kjv16.txt"
    read -r b1 bw1 be1 bc1 <<< "$(OMP_NUM_THREADS=1 ours "$tmp/tok/kjv16.txt")"
    read -r bN bwN beN bcN <<< "$(ours "$tmp/tok/kjv16.txt")"
    cap_e=0
    for k in $(seq "$THREADS"); do
        OMP_NUM_THREADS=1 ./train_cpu -tokenize "$tmp/tok/kjv16.txt" -o "$tmp/tok/cap$k" > "$tmp/tok/cap$k.out" &
    done
    wait
    for k in $(seq "$THREADS"); do
        cap_e=$(awk -v a="$cap_e" -v b="$(grep -o ') in [0-9.]* s' "$tmp/tok/cap$k.out" | grep -o '[0-9.]*')" 'BEGIN {print (b > a ? b : a)}')
    done
    rm -f "$tmp"/tok/cap* "$tmp"/tok/out_$$*
    echo "   load average after ours: $(cut -d' ' -f1-3 /proc/loadavg)"
    ./train_cpu -tokenize "$tmp/tok/kjv.txt" -o "$tmp/tok/out" | grep -o '[0-9]* of [0-9]* documents encoded in parallel batches on [0-9]* thread(s)' | sed 's/^/   /'
    awk -v a="$be1" -v b="$beN" -v t="$THREADS" -v c="$cap_e" -v ca="$bc1" -v cb="$bcN" 'BEGIN {
        printf "   parallel speed-up of the encode phase (69 MB, llm.c file), %d threads against 1: %.2fx (%.2f s -> %.2f s); CPU seconds %.2fx (%.2f s / %.2f s: spin-waiting included)\n", t, a / b, a, b, cb / ca, cb, ca
        printf "   the machine now: %d one-thread runs at once each took %.2f s against %.2f s alone: %.2fx the throughput, the ceiling for the line above\n", t, c, a, t * a / c }'
    awk -v a="$w1" -v b="$wN" -v c="$w2" -v d="$w2N" -v e="$o1" -v f="$oN" -v g="$o2" -v h="$o2N" -v t="$THREADS" 'BEGIN {
        printf "   17 MB, %d threads against 1: encode phase llm.c file %.2fx, tokenizer.json %.2fx; whole command (start-up included) %.2fx, %.2fx\n", t, f / e, h / g, b / a, d / c }'
    echo "   MB/s below: ours from the encode phase's time (whole command, start-up included: $w1 MB/s at 1 thread); the Pythons' from their encode calls"
    printf "   %-52s %8s %14s\n" "encoder" "MB/s" "ours (1 thr) vs"
    for row in "ours, llm.c file + merges (1 thread):$o1" "ours, GPT-2 tokenizer.json (1 thread):$o2" \
               "ours, llm.c file + merges ($THREADS threads):$oN" "ours, GPT-2 tokenizer.json ($THREADS threads):$o2N" \
               "tiktoken 0.14 encode_ordinary (1 thread):$("$TPY" dev/bench_tokenize.py time "$tmp/tok" tiktoken1)" \
               "tokenizers 0.21 encode_batch (1 thread):$("$TPY" dev/bench_tokenize.py time "$tmp/tok" tokenizers1)" \
               "tokenizers 0.21 encode_batch ($THREADS threads):$("$TPY" dev/bench_tokenize.py time "$tmp/tok" tokenizersN)"; do
        awk -v n="${row%%:*}" -v m="${row##*:}" -v o="$o1" 'BEGIN {printf "   %-52s %8.2f %13.2fx\n", n, m, o / m}'
    done
    # SentencePiece-style BPE (docs/tokenizers.md): Mistral's own models as transformers' converter
    # writes them (dev/sp_tokenizer_fixtures.py, $ZT_SP_PYTHON), the same 17 MB of documents
    echo "   SentencePiece-style (Mistral's models through transformers' converter), the same 17 MB:"
    if [ -n "${ZT_SP_PYTHON:-}" ] && "$ZT_SP_PYTHON" dev/sp_tokenizer_fixtures.py --kjv "$tmp/tok/kjv.txt" --out "$tmp/sp" --kjv-kinds none > /dev/null 2>&1; then
        for kind in v1_legacy v3; do
            read -r s1 _ _ _ <<< "$(OMP_NUM_THREADS=1 ours "$tmp/tok/kjv.txt" -tokenizer "$tmp/sp/$kind")"
            read -r sN _ _ _ <<< "$(ours "$tmp/tok/kjv.txt" -tokenizer "$tmp/sp/$kind")"
            t1=$("$TPY" dev/bench_tokenize.py time "$tmp/tok" tokenizers1 "$tmp/sp/$kind/tokenizer.json")
            tN=$("$TPY" dev/bench_tokenize.py time "$tmp/tok" tokenizersN "$tmp/sp/$kind/tokenizer.json")
            awk -v k="$kind" -v a="$s1" -v b="$sN" -v c="$t1" -v d="$tN" -v t="$THREADS" 'BEGIN {
                printf "   Mistral %-10s ours %7.2f MB/s (1 thread) %7.2f (%d); tokenizers 0.21 %6.2f (1) %6.2f (%d): ours (1 thr) %.2fx tokenizers (1), %.2fx (%d)\n", k, a, b, t, c, d, t, a / c, a / d, t }'
        done
    else
        echo "   SKIP: needs ZT_SP_PYTHON (sentencepiece, transformers 4.47.1, mistral-common: .ci/run makes /tmp/zt-sp)"
    fi
else
    echo "   SKIP: $TPY has neither tiktoken nor tokenizers (.ci/run installs both into \$ZT_TIKTOKEN_PYTHON's venv)"
fi
echo
echo "6. the chunked classifier (ops/classifier.cuh, docs/classifier.md): a V = 128,256 model (L 1, C 16, NH 2) at"
echo "   B 16 x T 1024 = 16,384 tokens, one process, $THREADS threads, 2 steps (the second timed): the classifier in chunks"
echo "   of 2048 rows (test/test_bf16 --train: the trainer) against all 16,384 rows in one chunk (--train-unchunked: before)"
CLS_BLAS=0
test/test_bf16 --train -blas 1 -x 0 -v 0 -s 0 > /dev/null 2>&1 && CLS_BLAS=1
cls() { # mode -> "VmHWM_MiB step2_ms logits_MiB"
    local dir="$tmp/cls$1"
    test/test_bf16 "$1" -e tiny -layers 1 -channels 16 -heads 2 -vocab 128256 -max-seq 1024 -t 1024 -b 16 -x 2 -v 0 -s 0 \
        -blas "$CLS_BLAS" -threads "$THREADS" -o "$dir" > "$dir.out" 2>&1 || { echo "$1 failed:" >&2; tail -5 "$dir.out" >&2; exit 1; }
    local end hwm ms lg
    end=$(grep '"memory": "end"' "$dir/log.jsonl")
    hwm=$(echo "$end" | grep -o '"vmhwm": [0-9]*' | awk '{print $2 / 1048576}')
    lg=$(echo "$end" | grep -o '"logits": [0-9]*' | awk '{print $2 / 1048576}')
    ms=$(grep '"step": 2,' "$dir/log.jsonl" | grep -o '"ms": [0-9.]*' | awk '{print $2}')
    echo "$hwm $ms $lg"
}
read -r h0 t0 l0 < <(cls --train-unchunked)
read -r h1 t1 l1 < <(cls --train)
printf "   %-44s %12s %12s %12s\n" "classifier" "logits MiB" "VmHWM MiB" "step ms"
printf "   %-44s %12.0f %12.0f %12.0f\n" "one chunk of 16,384 rows (before)" "$l0" "$h0" "$t0"
printf "   %-44s %12.0f %12.0f %12.0f\n" "chunks of 2048 rows (after)" "$l1" "$h1" "$t1"
awk -v a="$h0" -v b="$h1" -v x="$t0" -v y="$t1" 'BEGIN {printf "   after / before: peak memory %.2fx (%.0f MiB less), step time %.2fx\n", b / a, a - b, y / x}'
echo
bash dev/bench_lora.sh "$BIN" "$STEPS"
echo
echo "8. packed fine-tuning (docs/packing.md): -e tiny -max-seq 512, B 4 x T 512, one process, $THREADS threads, $STEPS steps, on 4000"
echo "   prompt/completion examples of an SFT-like length mix (words per prompt log-normal, median 30, 4..300; per"
echo "   completion median 60, 2..300: Alpaca/Dolly-like), tokenized and packed by -tokenize: isolated against not"
/usr/bin/python3 - "$tmp/sft.jsonl" <<'PY'
import json, math, random, sys
rng = random.Random(25)
words = "the of and to in a is that for it as with was on be by at this are from or an which have not but they his had".split()
def text(median, lo, hi):
    n = min(hi, max(lo, int(round(math.exp(rng.gauss(math.log(median), 0.9))))))
    return " ".join(rng.choice(words) for _ in range(n))
with open(sys.argv[1], "w") as f:
    for i in range(4000):
        f.write(json.dumps({"prompt": "Q: " + text(30, 4, 300) + "\nA:", "completion": " " + text(60, 2, 300)}) + "\n")
PY
"$BIN" -e tiny -max-seq 512 -tokenize "$tmp/sft.jsonl" -t 512 -val-every 0 -o "$tmp/sft" > "$tmp/sft_tok.out" 2>&1 || { tail -5 "$tmp/sft_tok.out" >&2; exit 1; }
pairs=$(/usr/bin/python3 - "$tmp/sft_train_000000.bin.mask" 512 <<'PY'
import sys, numpy as np
T, kept, full, n_ex, n_samples = int(sys.argv[2]), 0, 0, 0, 0
starts = (np.fromfile(sys.argv[1], dtype=np.uint8, offset=1024) & 2) != 0
for j in range((starts.size - 1) // T):       # sample j: tokens j*T .. j*T + T-1 are its inputs
    s = np.flatnonzero(starts[j * T:j * T + T]).tolist()
    n_ex += len(s)
    n_samples += 1
    s = ([0] if not s or s[0] != 0 else []) + s + [T]
    kept += sum((b - a) * (b - a + 1) // 2 for a, b in zip(s, s[1:]))  # query t sees keys seg[t]..t
    full += T * (T + 1) // 2
print(f"{kept / full:.3f} {n_ex / n_samples:.1f}")
PY
)
read -r share per_sample <<< "$pairs"
iso0=$(single "$BIN" "-i $tmp/sft_train_000000.bin -t 512 -b 4 -blas 0 -doc-attention 0" "-e tiny -max-seq 512")
iso1=$(single "$BIN" "-i $tmp/sft_train_000000.bin -t 512 -b 4 -blas 0 -doc-attention 1" "-e tiny -max-seq 512")
printf "   %-44s %10s %12s\n" "run" "tokens/s" "ratio"
printf "   %-44s %10.0f %12s\n" "one sequence per sample (-doc-attention 0)" "$iso0" "1.00x"
printf "   %-44s %10.0f %11.2fx\n" "examples isolated (-doc-attention 1)" "$iso1" "$(awk -v a="$iso1" -v b="$iso0" 'BEGIN {print a / b}')"
echo "   $per_sample examples per sample; isolation keeps $share of the causal attention pairs"
