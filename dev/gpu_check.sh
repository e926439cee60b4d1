#!/usr/bin/env bash
# dev/gpu_check.sh — the CUDA device checked on one GPU, in independent stages, split in two parts
# that each fit one command of the first GPU window (15 minutes of device time in all, start-up
# included, at most 10 minutes a command: each part is planned for at most 5 minutes, checked below).
# Each stage prints one line when it ends (PASS, FAIL or SKIP, its seconds against its estimate) and
# adds it to $OUT/summary.txt at once, and the logs are packed after every stage, so a part that is
# cut off still reports what it did. Nothing of this has run on a GPU yet: every H200 number below
# is an estimate.
#
#   bash dev/gpu_check.sh --part 1   on the GPU box: correctness at one rank, then speed (~4 min)
#   bash dev/gpu_check.sh --part 2   the rest, then compute-sanitizer (~3 min; ~5 with --torch)
#   bash dev/gpu_check.sh            both parts, one after the other (~7 min: one command, not the
#                                    first window's plan)
#   --budget S    skip the longest optional stages (column opt) until the estimates of what runs
#                 add up to at most S seconds; each shows as "SKIP ... over --budget"
#   --torch       + PyTorch's tokens/s on the same GPU (part 2's torch_perf, dev/bench_torch_gpu.py)
#   --plan        print the plan (stages, estimates, what --budget skips) and exit; runs nothing
#   --emu         on any machine, through the CPU emulation of CUDA (test/test_emu, test/test_emu_fp32:
#                 make test/test_emu test/test_emu_fp32): every stage that can run there, on tiny
#                 shapes and with fewer trainer runs (~6 s of CPU each: two per bitwise comparison);
#                 the stages that need a real GPU, GPU PyTorch or compute-sanitizer say SKIP; the
#                 seconds printed beside each stage's are still the H200's estimates. make test-long
#                 runs both parts and a --budget run (test/long_checks.sh).
#
# Output: $OUT (default /tmp/gpu_check_out; the GPU box sends back at most 8 files) gets exactly two
# files: summary.txt (the part, the plan, GPU, driver, NCCL, how the binaries were obtained, one
# PASS/FAIL/SKIP line per stage, tokens/s and TFLOP/s beside shared/GPU_EXPECTED.md's predictions)
# and gpu_check_logs.tar.gz (every stage's log and every trainer run's). Exit status 0 when no stage
# failed, 2 on bad arguments or when a part's estimates exceed its 300 s.
#
# Binaries (stage binaries): ./train_gpu, ./train_gpu_fp32, ./test/test_gpu and build/attn_bench,
# built here by `make gpu-binaries` (CUDA 13, sm_90, host code for x86-64-v3, libstdc++ static, no
# MPI, no NCCL) and carried to the box beside the working tree: nvcc does not run on the box. Only
# when ldd finds a library missing, -help fails or the CPU lacks x86-64-v3 are they built there
# (make gpu-binaries, ~3 min of nvcc on 16 cores: over the part's plan, said in the summary); where
# the box has only a versioned libcublasLt.so.13 (Python's nvidia-cublas wheel), the link goes
# through a folder of unversioned links (cublas_link_dir). cuBLASLt is found at run time in the
# toolkit or in that wheel (its lib/ folders are put on LD_LIBRARY_PATH).
#
# The stages, in the order they run. The script reads this table (lines '#|'): part (1, 2 or 1+2),
# estimate on an H200 in seconds, limit (seconds: `timeout` ends a hung stage), opt (o: --budget may
# skip it), what must hold. Each part adds SETUP_S = 5 s (the summary's header: nvidia-smi, one
# python3 importing torch for its versions) and must add up to <= PART_S = 300 s, --torch included.
#| part stage                 est limit opt what must hold
#| 1+2  binaries                5   300  -  ldd finds every library, -help runs, x86-64-v3 CPU (else built here, ~180 s)
#| 1    kernel_registers        2    60  o  no kernel of test_gpu uses local memory (cuobjdump -res-usage, each kernel with its own line)
#| 1    ops                    60   180  -  every CUDA op against the CPU op (test_gpu gpu_*), incl. B*T*Vp > 2^31 rows, T not a multiple of 32
#| 1    model_vs_pytorch       20    90  -  logits, loss, every gradient and 10 AdamW steps against the PyTorch fixture; packed = alone
#| 1    recompute_bitwise      12    60  -  -r 0..3: the same hashes of parameters, master, m, v
#| 1    zero_bitwise           12    60  -  -z 0..3 (poisoned, delayed collectives): the same hashes
#| 1    llama_family           58   180  -  llama3.2-1b's shape at 2 layers (tensor-core GQA): -r 0 / -r 3 / -z 3, -lora 4 -z 0 / -z 3, dropout, a 4-bit base (nf4): bitwise
#| 1    checkpoint_resume       8    60  -  4 steps = 2 steps, checkpoint, resume, 2 steps (bitwise)
#| 1    loss_falls_20_steps     8    60  o  d12, B 8, T 512, 20 steps: loss falls by > 1 (expected 10.9 -> 7-8)
#| 1    memory_vs_planner       1    10  o  device memory within 5% of the planner (loss_falls_20_steps's start-up)
#| 1    perf_d12               10    60  o  d12, B 16, T 1024: tokens/s and MFU beside GPU_EXPECTED.md
#| 1    attention_bench        25    90  o  build/attn_bench against SDPA (HS 64, 128): TFLOP/s beside GPU_EXPECTED.md
#| 1    perf_d48               20    90  o  d48, B 4, T 1024: tokens/s and MFU beside GPU_EXPECTED.md
#| 1    cudnn_attention        50   200  o  (train_gpu_cudnn, test/test_gpu_cudnn carried: docs/cudnn.md) gpu_attention_cudnn cases; d12 B 16 T 1024 10 steps -attn own / cudnn: losses within 0.02, tok/s side by side
#| 2    offload_bitwise        35   120  o  -offload cpu (-z 1, -z 3), nvme (-z 1, 1 MiB buffer), each host AdamW path: = -z 1 without; -offload-params cpu, nvme (+ -offload nvme), cpu + -offload cpu at GA 2: = -z 3 without
#| 2    grad_accumulation       8    60  o  GA 2 = GA 1 at the same global batch (losses within 1e-2); -z 3 = -z 0 at GA 2 (1e-3)
#| 2    fp32_build              6    60  o  ./train_gpu_fp32: loss falls, -z 0 / -z 3 bitwise
#| 2    val_and_sampling        5    60  o  validation losses finite; a sample printed
#| 2    sanitizer_memcheck     35   120  o  compute-sanitizer memcheck, 4 cases: no error (SKIP when the runtime refuses)
#| 2    sanitizer_racecheck    40   120  o  racecheck, 3 cases: no shared-memory hazard
#| 2    sanitizer_synccheck    25   120  o  synccheck, 3 cases: no barrier misuse
#| 2    torch_perf            120   200  o  (--torch) PyTorch tokens/s for d12 and d48 on the same GPU
#| 1+2  no_cublaslt_fallback    1    10  -  no trainer log of the part says "cuBLASLt has no algorithm" (each stage checks its own too)
# Sums (--plan prints them): part 1 234 + 5 = 239 s; part 2 160 + 5 = 165 s, 285 s with --torch.
#
# How the estimates were made (none measured):
#  - a process that starts CUDA costs ~1-2 s before its first kernel (process start, context on an
#    H200, cuBLASLt's handle, lazy module loading); a trainer run on SMALL (d6, B 4, T 250, 3 steps,
#    -log-hash 1) ~2.5 s all told, so a stage of four runs ~10-12 s;
#  - ops: the ~65 gpu_* cases in test_gpu's worker processes (8 at a time: ZT_TEST_JOBS), each with
#    its own context; their CPU references (host loops: no BLAS in the carried build) on the GPU_BIG
#    shapes dominate; 60 s is the earlier header's figure, never checked;
#  - llama_family: 3 test_gpu cases (~15 s) and 7 trainer runs of llama3.2-1b at 2 layers (~385M
#    parameters: 0.8 GB of BF16 parameters and 4.6 GB of master, m and v read back and hashed per
#    run): ~5 s each (start and init ~3 s, the reads ~1 s, XXH64 ~1 s; the byte-wise FNV-1a it
#    replaces hashed 0.46 GB/s against XXH64's 4.5 on one core here, dev/hash_speed.c: ~12 s a run,
#    ~75 s more for the stage; on SMALL's d6, 0.4 GB of state, ~0.8 s more a run);
#  - attention_bench: build/attn_bench is prebuilt (an nvcc build of the whole program on the box
#    took ~60-90 s); 2 shapes x (ours ~4 s: context, inputs drawn on the host, 2 x 23 launches;
#    SDPA ~7 s: python3 importing torch ~3-5 s, then each backend);
#  - perf_d48: d48 (1.5B parameters, ~25 GB of state allocated and initialised) ~8 s of start-up,
#    8 steps of ~110 ms, the process's end; perf_d12 the same at a tenth of the size;
#  - sanitizers: ~5-10 s for compute-sanitizer to start and instrument the modules test_gpu loads,
#    then its kernels ~10x slower under memcheck and synccheck, up to ~100x under racecheck (on
#    shapes whose kernels take milliseconds), the CPU references unchanged: ~8-12 s a case. Three or
#    four cases per tool (the old list ran all 12 under each tool: 36 processes, 4-9 minutes), each
#    chosen for what that tool finds:
SAN_MEMCHECK="gpu_attention_seg_deterministic gpu_attention_hs7 gpu_classifier_small gpu_lora_cols_ops"
#      (out-of-bounds accesses: both attention kernel sets with GQA and a segment table, head size 7
#      at T one past a tile, the fused classifier's padded vocabulary, LoRA's column ranges at odd sizes)
SAN_RACECHECK="gpu_attention_seg_deterministic gpu_layernorm_backward gpu_sumsq_many_segments"
#      (shared-memory hazards: the tensor-core attention's tiles, the block reductions of LayerNorm's
#      backward and of the gradient norm's segments)
SAN_SYNCCHECK="gpu_attention_gqa_deterministic gpu_rmsnorm_backward gpu_encoder_seg"
#      (barriers in divergent code: attention blocks that skip causal tiles, RMSNorm's reduction, the
#      encoder's chunk edges)
#  - torch_perf: two python3 runs of dev/bench_torch_gpu.py, torch.compile ~40 s each.
set -u
cd "$(dirname "$0")/.."
export ZT_VERBOSE=${ZT_VERBOSE:-1} # (the trainer's full start-up: memory table, every flag, which this script reads)
ROOT=$(pwd)
SCRIPT=$ROOT/dev/gpu_check.sh
SETUP_S=5
PART_S=${ZT_GPU_CHECK_PART_S:-300} # (a lower value makes the check below fire: test/long_checks.sh)
MODE=gpu; TORCH=0; PART=""; BUDGET=""; PLAN_ONLY=0
usage() { echo "usage: bash dev/gpu_check.sh [--part 1|2] [--budget SECONDS] [--torch] [--emu] [--plan]" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
    --emu) MODE=emu ;;
    --torch) TORCH=1 ;;
    --plan) PLAN_ONLY=1 ;;
    --part) [ $# -ge 2 ] && [[ "$2" =~ ^[12]$ ]] || usage; PART=$2; shift ;;
    --budget) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || usage; BUDGET=$2; shift ;;
    *) usage ;;
    esac
    shift
done

# ---- the plan: the table above, each part's sum checked, the stages of this run, --budget's skips
# TABLE: "part name est limit opt" a line, in the order of the script's header
TABLE=$(sed -n 's/^#| //p' "$SCRIPT" | tail -n +2 | awk '{print $1, $2, $3, $4, $5}')
for p in 1 2; do
    s=$(echo "$TABLE" | awk -v p=$p 'index($1, p) {s += $3} END {print s + 0}')
    if [ $((s + SETUP_S)) -gt "$PART_S" ]; then
        echo "gpu_check.sh: part $p's stages estimate $s s + $SETUP_S s of setup = $((s + SETUP_S)) s, over the $PART_S s" \
             "a part may take (one command of the first GPU window): move a stage to the other part or shorten it" >&2
        exit 2
    fi
done
# this run's stages ("part name est limit opt", a line): both parts when --part is not given (part 1's
# then part 2's, the 1+2 stages in each but the binaries' once)
RUN=$(for p in ${PART:-1 2}; do echo "$TABLE" | awk -v p=$p -v both=$([ -z "$PART" ] && echo 1 || echo 0) \
      'index($1, p) && !(both && p == 2 && $2 == "binaries") {print p, $2, $3, $4, $5}'; done)
declare -A OVER # stage name -> 1: skipped by --budget
plan_s=$(echo "$RUN" | awk -v t=$TORCH '$2 != "torch_perf" || t {s += $3} END {print s + 0}')
parts_n=$(echo "${PART:-1 2}" | wc -w)
total=$((plan_s + SETUP_S * parts_n))
plan_line="plan: part ${PART:-1 and 2}, $(echo "$RUN" | wc -l) stages, estimated $total s on an H200 ($plan_s s of stages + $SETUP_S s of setup per part$([ "$TORCH" = 1 ] || echo ', torch_perf not asked'))"
skipped_s=""
if [ -n "$BUDGET" ]; then
    # the longest optional stage first (ties: the later one), until the rest fits
    while [ "$total" -gt "$BUDGET" ]; do
        pick=$(echo "$RUN" | awk -v t=$TORCH '$5 == "o" && ($2 != "torch_perf" || t) {print NR, $3, $2}' \
               | while read -r nr est name; do [ -z "${OVER[$name]:-}" ] && echo "$est $nr $name"; done | sort -k1,1nr -k2,2nr | head -n 1)
        [ -n "$pick" ] || break
        set -- $pick
        OVER[$3]=1; total=$((total - $1)); skipped_s="$skipped_s $3 ($1 s)"
    done
fi
if [ -n "$BUDGET" ] && [ -n "$skipped_s" ]; then plan_line="$plan_line; --budget $BUDGET: skipped the longest optional stages:$skipped_s -> $total s"
elif [ -n "$BUDGET" ]; then plan_line="$plan_line; --budget $BUDGET: nothing skipped"; fi
[ -n "$BUDGET" ] && [ "$total" -gt "$BUDGET" ] && plan_line="$plan_line; still over: the other stages are not optional"
if [ "$PLAN_ONLY" = 1 ]; then
    echo "$plan_line"
    echo "$RUN" | while read -r p name est limit opt; do
        why=""; [ -n "${OVER[$name]:-}" ] && why="  SKIP: over --budget"
        [ "$name" = torch_perf ] && [ "$TORCH" = 0 ] && why="  SKIP: not asked for (--torch)"
        printf '  part %s  %-22s %4d s (limit %3d s)%s%s\n' "$p" "$name" "$est" "$limit" "$([ "$opt" = o ] && echo ', optional')" "$why"
    done
    exit 0
fi

OUT=${OUT:-/tmp/gpu_check_out}
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_logs.XXXXXX")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_work.XXXXXX")
mkdir -p "$OUT" || { echo "cannot create $OUT" >&2; exit 2; }
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
START=$(date +%s)
npass=0; nfail=0; nskip=0
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}

say() { echo "[gpu_check $(( $(date +%s) - START ))s] $*"; }
sum() { echo "$*" >> "$SUMMARY"; }
pack() { tar -czf "$OUT/gpu_check_logs.tar.gz" -C "$LOGS" . 2>/dev/null; }
FALLBACK_MSG="cuBLASLt has no algorithm"

# stage PART NAME EST LIMIT: run the shell function st_NAME in a child bash under `timeout` (a
# function cannot be handed to timeout directly: that is exit 127), its output to NAME.log, with
# STAGE=NAME in its environment (trainer runs log to $WORK/NAME.TAG.log: no stage reads or
# overwrites another's). Exit 0 is PASS, 77 is SKIP (the log's last line says why), anything else
# FAIL (124: timed out; 10 s after the SIGTERM, which the trainer answers by finishing its step,
# SIGKILL). --emu's limits are 5x, at least 600 s (the emulator on a shared machine: a hang, not a
# slow stage, is what they are for). A stage whose trainer logs say FALLBACK_MSG fails, naming them.
stage() {
    local part=$1 name=$2 expect=$3 limit=$4 t rc why verdict fb
    [ "$MODE" = emu ] && limit=$(( limit * 5 > 600 ? limit * 5 : 600 ))
    t=$(date +%s)
    if [ -n "${OVER[$name]:-}" ]; then
        echo "over --budget $BUDGET: the longest optional stages are skipped first" > "$LOGS/$name.log"; rc=77
    else
        STAGE=$name timeout -k 10 "$limit" bash -c "st_$name" < /dev/null > "$LOGS/$name.log" 2>&1
        rc=$?
    fi
    t=$(( $(date +%s) - t ))
    case $rc in
    0) verdict=PASS; why="" ;;
    77) verdict=SKIP; why=": $(tail -n 1 "$LOGS/$name.log")" ;;
    *) verdict=FAIL; why=" (exit $rc$([ $rc -eq 124 ] && echo ', timed out'))" ;;
    esac
    fb=$(grep -l "$FALLBACK_MSG" "$WORK/$name".*.log 2>/dev/null | xargs -r -n 1 basename | tr '\n' ' ')
    if [ -n "$fb" ] && [ $verdict != SKIP ]; then
        verdict=FAIL; why="$why (a GEMM fell back to the simple kernel: $fb)"
        echo "$FALLBACK_MSG in: $fb" >> "$LOGS/$name.log"
    fi
    case $verdict in PASS) npass=$((npass + 1)) ;; SKIP) nskip=$((nskip + 1)) ;; FAIL) nfail=$((nfail + 1)) ;; esac
    sum "$(printf '%-4s %-22s %4d s (H200 est. %3d s)%s' "$verdict" "$name" "$t" "$expect" "$why")"
    say "$name: $verdict ($t s, estimate $expect s)$why"
    if [ "$verdict" = FAIL ]; then tail -n 15 "$LOGS/$name.log" | sed 's/^/    /'; fi
    cp "$WORK/$name".*.log "$LOGS/" 2>/dev/null
    pack
    return 0
}
skip() { echo "$*"; exit 77; } # inside a stage function
# run_cases BIN CASE...: each test case by name; every run must report "N passed, 0 failed", N > 0
run_cases() {
    local bin=$1 c out rc=0
    shift
    for c in "$@"; do
        out=$("$bin" "$c" 2>&1); echo "$out"
        echo "$out" | grep -qE '^[1-9][0-9]* passed, 0 failed$' || { echo "case $c: failed or not found"; rc=1; }
    done
    return $rc
}
# trun TAG FLAGS...: the trainer ($TRAIN) on FLAGS, its output to $WORK/$STAGE.TAG.log
trun() { local tag=$1; shift; $TRAIN "$@" > "$WORK/$STAGE.$tag.log" 2>&1; }
export -f skip run_cases trun
export FALLBACK_MSG

# ---- the binaries, shapes and data of each mode
if [ "$MODE" = emu ]; then
    TRAIN="$ROOT/test/test_emu --train"
    TRAIN32="$ROOT/test/test_emu_fp32 --train"
    TESTGPU="$ROOT/test/test_emu"
    BINS="test/test_emu test/test_emu_fp32"
    # a tiny model on a generated stream of 256 token ids (learnable: a pattern with 10% noise)
    python3 - "$WORK" <<'EOF' || { echo "cannot write the emulator's token shards" >&2; exit 2; }
import random, struct, sys
for name, n, seed in (("train.bin", 20000, 1), ("val.bin", 2000, 2)):
    r = random.Random(seed)
    toks = [(i * 7 + i // 13) % 200 if r.random() > 0.1 else r.randrange(256) for i in range(n)]
    with open(sys.argv[1] + "/" + name, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *toks))
EOF
    # (the emulator runs a 1024-thread block as 1024 fibers: B*T rows of the classifier cost most)
    SMALL="-device cuda -e tiny -layers 2 -channels 64 -heads 4 -vocab 256 -max-seq 32 -i $WORK/train.bin -j $WORK/val.bin -b 2 -t 20 -l 3e-3 -u 1"
    SB=2; ST=20                                    # SMALL's B and T (T not a multiple of the 32-key tile)
    STEPS=2                                        # steps of each bitwise run
    BIG20="$SMALL -x 8"                            # "20 steps" of a model that learns: 8 emulated steps
    OPS_CASES="gpu_attention_hs7 gpu_classifier_small gpu_classifier_rows_past_2pow31 gpu_layernorm_backward gpu_sumsq_many_segments gpu_round_params_bitwise gpu_matmul_plan_key_alignment gpu_lora_cols_ops gpu_lora_dropout gpu_nf4_dequant"
    MODEL_CASES="model_vs_pytorch"
else
    TRAIN="$ROOT/train_gpu"
    TRAIN32="$ROOT/train_gpu_fp32"
    TESTGPU="$ROOT/test/test_gpu"
    BINS="train_gpu train_gpu_fp32 test/test_gpu build/attn_bench"
    SMALL="-device cuda -e d6 -b 4 -t 250 -u 1"
    SB=4; ST=250
    STEPS=3
    BIG20="-device cuda -e d12 -b 8 -t 512 -x 20 -u 2"
    OPS_CASES="gpu_"
    MODEL_CASES="model_vs_pytorch model_adamw_trajectory_vs_pytorch packed_examples_equal_alone" # (also _tc: packed examples isolated)
fi
# the Llama family in training (RMSNorm, RoPE, SwiGLU, grouped-query attention: on a GPU at head size
# 64, the tensor-core kernels) and LoRA's kernels; the family's model cases (test_emu runs them in make test)
if [ "$MODE" = emu ]; then
    LLAMA="-device cuda -e llama-tiny-tied -layers 2 -vocab 256 -max-seq 32 -i $WORK/train.bin -j $WORK/val.bin -b 2 -t 20 -u 1"
    LLAMA_CASES=""
else
    LLAMA="-device cuda -e llama3.2-1b -layers 2 -b 4 -t 256 -u 1"
    LLAMA_CASES="llama_grads_vs_reference llama_recompute_modes_bitwise model_chunked_classifier_llama"
fi
export SUMMARY ROOT MODE TRAIN TRAIN32 TESTGPU SMALL SB ST STEPS BIG20 OPS_CASES MODEL_CASES LLAMA LLAMA_CASES WORK LOGS TORCH
export SAN_MEMCHECK SAN_RACECHECK SAN_SYNCCHECK BINS
export ZT_TORCH_PYTHON=${ZT_TORCH_PYTHON:-python3}

# cuBLASLt and NCCL from Python's nvidia-* wheels, when the toolkit's folders lack them
if [ "$MODE" = gpu ]; then
    for d in $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in sorted(os.listdir(p))))' 2>/dev/null); do
        [ -d "$d" ] && LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
    done
    export LD_LIBRARY_PATH
fi

# cublas_link_dir: for a build on the box (the fallback), LIBRARY_PATH gets a folder of unversioned
# links to cuBLAS(Lt) where only libcublasLt.so.13 is there (dev/cublas_link_dir.sh says which)
cublas_link_dir() { local d; d=$(bash "$ROOT/dev/cublas_link_dir.sh" "$WORK/lib") && export LIBRARY_PATH="$d${LIBRARY_PATH:+:$LIBRARY_PATH}"; }
export -f cublas_link_dir

# GPU_EXPECTED.md (the predictions the speed stages print beside their numbers): shared/ in the
# checkout, the shared/ beside it, or a copy carried as build/GPU_EXPECTED.md; else the lines below,
# copied from its version of 2026-12-02.
EXPECTED_MD=""
for f in "${ZT_GPU_EXPECTED:-}" "$ROOT/shared/GPU_EXPECTED.md" "$ROOT/../shared/GPU_EXPECTED.md" "$ROOT/build/GPU_EXPECTED.md"; do
    [ -n "$f" ] && [ -f "$f" ] && { EXPECTED_MD=$f; break; }
done
export EXPECTED_MD
# expected KEY: the "expect" cell of the row of GPU_EXPECTED.md whose first cell starts with KEY
expected() {
    local e=""
    [ -n "$EXPECTED_MD" ] && e=$(awk -F'|' -v k="$1" 'index($2, " " k) == 1 {gsub(/^ +| +$/, "", $3); print $3; exit}' "$EXPECTED_MD")
    if [ -z "$e" ]; then
        case $1 in # (GPU_EXPECTED.md of 2026-12-02)
        "attention forward") e="130–200 TFLOP/s (ceiling from shared-memory traffic ~440)" ;;
        "attention dQ") e="70–110 TFLOP/s" ;;
        "d12, B 16") e="~45 ms/step, ~365K tok/s (300–450K)" ;;
        "d48, B 4") e="MFU 33–38% (optimizer traffic ~19 ms of ~110 ms)" ;;
        *) e="?" ;;
        esac
    fi
    echo "$e"
}
export -f expected

# ---- the summary's header: the part, the plan, the machine
sum "gpu_check part ${PART:-1 and 2}$([ "$MODE" = emu ] && echo ' --emu')${BUDGET:+ --budget $BUDGET}$([ "$TORCH" = 1 ] && echo ' --torch')"
sum "$plan_line"
if [ "$MODE" = emu ]; then
    sum "emulator: the CUDA emulator on $(uname -m), $(nproc) cores (no GPU: GPU-only stages SKIP; the estimates are an H200's)"
else
    sum "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi not found')"
    sum "CUDA: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'nvcc not found'); torch and its NCCL: $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda, ".".join(map(str, torch.cuda.nccl.version())))' 2>/dev/null || echo 'not found') (not linked: one rank, no MPI)"
    sum "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
fi
if [ -n "$EXPECTED_MD" ]; then sum "expected numbers: $EXPECTED_MD"
else sum "expected numbers: no GPU_EXPECTED.md (shared/, ../shared/, build/): the copy in this script, of 2026-12-02"; fi
say "$(head -n 2 "$SUMMARY" | tr '\n' ' ')"

# ---- stage binaries: the carried binaries load and run, or are built here
st_binaries() {
    local b ok=1
    if [ "$MODE" = gpu ]; then
        for f in avx2 fma bmi2 movbe; do grep -qw "$f" /proc/cpuinfo || { echo "CPU lacks $f (x86-64-v3)"; ok=0; }; done
    fi
    for b in $BINS; do
        [ -x "$ROOT/$b" ] || { echo "$b: missing"; ok=0; continue; }
        ldd "$ROOT/$b" | tee /dev/stderr | grep -q "not found" && { echo "$b: a library is missing"; ok=0; }
    done
    if [ $ok = 1 ]; then
        if [ "$MODE" = emu ]; then $TRAIN -help > /dev/null && $TRAIN32 -help > /dev/null || ok=0
        else
            ./train_gpu -help > /dev/null && ./train_gpu_fp32 -help > /dev/null || ok=0
            ./build/attn_bench > /dev/null 2>&1; [ $? -eq 2 ] || { echo "build/attn_bench: does not run (its usage is exit 2)"; ok=0; }
        fi
        [ $ok = 1 ] && { echo "carried binaries: ldd and -help fine"; return 0; }
    fi
    [ "$MODE" = emu ] && { echo "build them: make test/test_emu test/test_emu_fp32"; return 1; }
    echo "building on this machine: make gpu-binaries (sm_90)"
    cublas_link_dir
    echo "LIBRARY_PATH=${LIBRARY_PATH:-}"
    make -C "$ROOT" -B -j "$(nproc)" gpu-binaries || return 1
    for b in $BINS; do ldd "$ROOT/$b" | grep -q "not found" && { echo "$b: a library is missing"; return 1; }; done
    ./train_gpu -help > /dev/null && echo "BUILT HERE"
}

# ---- registers: no spills (local memory) in any kernel; the tensor-core attention's registers.
# cuobjdump -res-usage prints each kernel as two lines, " Function NAME:" then its own
# "  REG:n STACK:n SHARED:n LOCAL:n ..." (sections of other architectures between them): res_pairs
# joins each Function line with the resource line after it.
res_pairs() { awk '/^ *Function [^ ]+:$/ {name = $2; sub(/:$/, "", name); next} name != "" && /REG:/ {$1 = $1; print name, $0; name = ""}'; }
# (cuobjdump 13's output for three kernels: what --emu checks res_pairs against)
res_sample() {
    printf '%s\n' "" "Fatbin elf code:" "================" "arch = sm_90" "" "Resource usage:" " Common:" "  GLOBAL:0" \
        " Function _Z6kern_cILi64EEvPf:" "  REG:48 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:536 TEXTURE:0 SURFACE:0 SAMPLER:0" \
        " Function _Z6kern_bPfi:" "  REG:10 STACK:0 SHARED:2048 LOCAL:0 CONSTANT[0]:540 TEXTURE:0 SURFACE:0 SAMPLER:0" \
        " Function _Z6kern_aPf:" "  REG:8 STACK:0 SHARED:0 LOCAL:8 CONSTANT[0]:536 TEXTURE:0 SURFACE:0 SAMPLER:0"
}
st_kernel_registers() {
    local pairs demangle=cat
    if [ "$MODE" = emu ]; then
        pairs=$(res_sample | res_pairs); echo "$pairs"
        [ "$(echo "$pairs" | awk '{print $1, $2, $4, $5}' | tr '\n' ';')" = \
          "_Z6kern_cILi64EEvPf REG:48 SHARED:0 LOCAL:0;_Z6kern_bPfi REG:10 SHARED:2048 LOCAL:0;_Z6kern_aPf REG:8 SHARED:0 LOCAL:8;" ] \
            || { echo "res_pairs: a kernel is not paired with its own resource line"; return 1; }
        run_cases "$TESTGPU" gpu_kernel_resources_no_spills; return
    fi
    command -v cuobjdump > /dev/null || skip "cuobjdump not found"
    command -v c++filt > /dev/null && demangle=c++filt
    cuobjdump -res-usage "$ROOT/test/test_gpu" > "$WORK/res.txt" 2>&1 || { cat "$WORK/res.txt"; return 1; }
    pairs=$(res_pairs < "$WORK/res.txt")
    [ -n "$pairs" ] || { echo "no kernel in cuobjdump's output:"; head -n 20 "$WORK/res.txt"; return 1; }
    echo "$(echo "$pairs" | wc -l) kernels; the tensor-core attention's:"
    echo "$pairs" | grep -E "attention_.*tc_kernel" | awk '{print $2, $3, $4, $5, $1}' | $demangle
    local spills; spills=$(echo "$pairs" | grep -E "LOCAL:[1-9]")
    if [ -n "$spills" ]; then echo "$spills" | $demangle; echo "the kernels above use local memory (spills)"; return 1; fi
    echo "no kernel of the $(echo "$pairs" | wc -l) uses local memory"
}

# ---- every op against the CPU op; the model against the PyTorch fixture
st_ops() { run_cases "$TESTGPU" $OPS_CASES; }
st_model_vs_pytorch() { run_cases "$TESTGPU" $MODEL_CASES; }

# same_hashes TAG "FLAGS" "FLAGS" ...: the trainer on SMALL + each flag set, STEPS steps; every hash
# line equal. Run i's log is $WORK/$STAGE.TAG_i.log. (--emu: the first and the last flag sets only,
# ~6 s of CPU a run: the script's plumbing, not the matrix, which test/test_emu's cases cover)
same_hashes() {
    local tag=$1 first="" h extra i=0
    shift
    if [ "$MODE" = emu ] && [ $# -gt 2 ]; then set -- "$1" "${@: -1}"; fi
    for extra in "$@"; do
        i=$((i + 1))
        h=$($TRAIN $SMALL -x $STEPS -v 0 -s 0 -log-hash 1 $extra 2>&1 | tee "$WORK/$STAGE.${tag}_$i.log" | grep '^hashes:') \
            || { echo "run '$extra' failed:"; tail -n 20 "$WORK/$STAGE.${tag}_$i.log"; return 1; }
        echo "$extra: $h"
        [ -z "$first" ] && first=$h
        [ "$h" = "$first" ] || { echo "differs from the first"; return 1; }
    done
}
export -f same_hashes
st_recompute_bitwise() { same_hashes r "-r 0" "-r 1" "-r 2" "-r 3"; }
st_zero_bitwise() { same_hashes z "-z 0 -poison 1 -comm-delay 5" "-z 1 -poison 1 -comm-delay 5" "-z 2 -poison 1 -comm-delay 5" "-z 3 -poison 1 -comm-delay 5"; }

# the Llama family: -r 0 = -r 3 = -z 3 (poisoned) bitwise, then LoRA (-lora 4) -z 0 = -z 3 bitwise, and
# with -lora-dropout (the mask's kernel; -r 3: made again in the recompute), and on a 4-bit base (QLoRA)
st_llama_family() {
    if [ -n "$LLAMA_CASES" ]; then run_cases "$TESTGPU" $LLAMA_CASES || return 1; fi
    # (--emu: the dropout pair only, which runs every LoRA kernel too, -z 0 against -z 3 -r 3: the stage's seconds)
    if [ "$MODE" != emu ]; then
        SMALL="$LLAMA" same_hashes llama "-r 0 -z 0" "-r 3 -z 0" "-r 1 -z 3 -poison 1" || return 1
        SMALL="$LLAMA" same_hashes lora "-z 0 -lora 4" "-z 3 -lora 4 -poison 1" || return 1
    fi
    SMALL="$LLAMA" same_hashes dropout "-z 0 -lora 4 -lora-dropout 0.1" "-z 3 -r 3 -lora 4 -lora-dropout 0.1 -poison 1" || return 1
    # QLoRA: the 4-bit base (the dequant kernel before each layer's forward and backward; ZeRO-3 gathers 4-bit bytes)
    SMALL="$LLAMA" same_hashes qlora "-z 0 -lora 4 -lora-quant nf4" "-z 3 -r 3 -lora 4 -lora-quant nf4 -poison 1"
}

# ---- checkpoint and resume: 2H steps with checkpoints at H and 2H; resumed from H, the same bits at
# 2H (H = 2; --emu: 1)
st_checkpoint_resume() {
    local d=$WORK/ckpt h1 h2 H=2
    [ "$MODE" = emu ] && H=1
    rm -rf "$d"
    trun straight $SMALL -x $((2 * H)) -v 0 -s 0 -o "$d" -n $H -log-hash 1 || { cat "$WORK/$STAGE.straight.log"; return 1; }
    h1=$(grep '^hashes:' "$WORK/$STAGE.straight.log")
    ls "$d"
    trun resumed $SMALL -x $((2 * H)) -v 0 -s 0 -o "$d" -y 1 -resume-step $H -log-hash 1 || { cat "$WORK/$STAGE.resumed.log"; return 1; }
    h2=$(grep '^hashes:' "$WORK/$STAGE.resumed.log")
    grep -iE "resum" "$WORK/$STAGE.resumed.log" | head -n 3
    echo "straight: $h1"; echo "resumed:  $h2"
    [ -n "$h1" ] && [ "$h1" = "$h2" ]
}

# step_losses LOG: the loss of every step, one a line
step_losses() { grep -E '^step +[0-9]+/' "$1" | grep -v 'val loss' | sed -E 's/.*\| loss ([0-9.naif-]+) .*/\1/'; }
# close A B TOL: two lists of losses, the same length, each pair within TOL relative
close() { python3 -c "import sys; a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]; sys.exit(not (a and len(a) == len(b) and all(abs(x - y) <= float(sys.argv[3]) * abs(y) for x, y in zip(a, b))))" "$@"; }
export -f step_losses close

# ---- 20 steps of a real model: the loss falls; device memory against the planner
st_loss_falls_20_steps() {
    trun run $BIG20 -v 0 -s 0; local rc=$? log=$WORK/$STAGE.run.log
    grep -E '^step +[0-9]+/|device memory|MFU' "$log"
    [ $rc -eq 0 ] || { tail -n 20 "$log"; return 1; }
    local l; l=$(step_losses "$log" | tr '\n' ' ')
    if [ "$MODE" = emu ]; then # the tiny model: falls at all
        python3 -c "import sys; a=[float(x) for x in sys.argv[1].split()]; sys.exit(not (len(a) == 8 and a[-1] < a[0] - 0.05))" "$l"
    else # d12: ~10.9 -> 7-8 (GPU_EXPECTED.md)
        python3 -c "import sys; a=[float(x) for x in sys.argv[1].split()]; sys.exit(not (len(a) == 20 and a[-1] < a[0] - 1.0))" "$l"
    fi || { echo "the loss did not fall enough: $l"; return 1; }
}
st_memory_vs_planner() {
    local log=$WORK/loss_falls_20_steps.run.log
    grep -q "^PASS loss_falls_20_steps" "$SUMMARY" || skip "reads loss_falls_20_steps's run, which did not pass or did not run"
    grep -E 'device memory' "$log" || { echo "no device memory line"; return 1; }
    grep -q 'within 5%' "$log"
}

# ---- throughput: d12 and d48 at T = 1024 (median tokens/s of the steps after the first two, MFU),
# beside GPU_EXPECTED.md (which counts MFU as 6N + 12LCT: the trainer prints llm.c's 6N + 6LCT,
# ~7% (d12) and ~5% (d48) lower)
st_perf() {
    local d=$1 b=$2 x=$3 key=$4
    [ "$MODE" = emu ] && skip "needs a GPU (throughput; GPU_EXPECTED.md: $(expected "$key"))"
    trun run -device cuda -e "d$d" -b "$b" -t 1024 -x "$x" -v 0 -s 0 -u 2; local rc=$? log=$WORK/$STAGE.run.log
    grep -E '^step|MFU|device memory|error' "$log"
    [ $rc -eq 0 ] || { tail -n 20 "$log"; return 1; }
    local tok ms mfu
    tok=$(grep -E '^step +[0-9]+/' "$log" | tail -n +3 | sed -E 's/.*\| ([0-9]+) tok\/s.*/\1/' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    ms=$(grep -E '^step +[0-9]+/' "$log" | tail -n +3 | sed -E 's/.*\| ([0-9.]+) ms \|.*/\1/' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    mfu=$(grep -E '^step +[0-9]+/' "$log" | tail -n 1 | grep -oE 'mfu [0-9.]+%|mfu n/a')
    echo "RESULT d$d B $b T 1024: ${ms:-?} ms/step, $tok tok/s, $mfu (llm.c's 6N + 6LCT) | GPU_EXPECTED.md: $(expected "$key")"
    [ -n "$tok" ]
}
export -f st_perf
st_perf_d12() { st_perf 12 16 12 "d12, B 16"; }
st_perf_d48() { st_perf 48 4 8 "d48, B 4"; }

# ---- the tensor-core attention against PyTorch's SDPA: build/attn_bench (prebuilt; dev/attn_bench.sh
# builds it on the box only when it does not run), its TFLOP/s beside GPU_EXPECTED.md's
st_attention_bench() {
    [ "$MODE" = emu ] && skip "needs a GPU (throughput; GPU_EXPECTED.md: forward $(expected "attention forward"))"
    ATTN_BENCH_BIN=$ROOT/build/attn_bench bash "$ROOT/dev/attn_bench.sh" | tee "$WORK/$STAGE.bench.log"
    local rc=${PIPESTATUS[0]}
    # "== attention B NH T HS = 16 12 1024 64 (causal, BF16)" then "ours fwd_ms X bwd_ms Y fwd_tflops A bwd_tflops B kernels K"
    awk '/^== attention/ {shape = $8 " " $9 " " $10 " " $11} /^ours fwd_ms/ {print shape, $7, $9, $11}' "$WORK/$STAGE.bench.log" |
    while read -r b nh t hs ftf btf kern; do
        echo "RESULT attention B $b NH $nh T $t HS $hs ($kern): forward $ftf TFLOP/s, backward $btf | GPU_EXPECTED.md: forward $(expected "attention forward"); dQ / dK·dV $(expected "attention dQ")"
    done
    return "$rc"
}

# ---- no GEMM of the trainer runs (GPT-2 and Llama shapes) fell back to the simple kernel: each stage
# checks its own logs (stage()); this counts them for the part. (The op cases plan odd and misaligned
# shapes on purpose, where cuBLASLt may have no algorithm: not counted.)
st_no_cublaslt_fallback() {
    local logs; logs=$(ls "$WORK"/*.*.log 2>/dev/null)
    [ -n "$logs" ] || skip "no trainer ran in this part"
    grep -l "$FALLBACK_MSG" $logs && return 1
    echo "no fallback in $(echo "$logs" | wc -l) trainer logs"
}

# ---- -offload (the host AdamW, the copies on their own stream, each block's gradient copied as its
# reduction completes, nvme streaming through a small buffer): the same hashes as without offload.
# Then -offload cpu with each host AdamW path this CPU has forced (adamw.cuh, ZT_SIMD; on the GPU
# box: scalar, avx2 and avx512 when its CPU has AVX-512F; --emu: scalar only, test_bf16 covers this
# CPU): the hashes of the run without offload. Then -offload-params (the parameter shards copied up on
# the communication stream behind the compute stream's event; the update down; with -offload the gradient
# down every micro-step: the host's ring at GA 2, the state file with nvme): the hashes of -z 3 without.
st_offload_bitwise() {
    mkdir -p "$WORK/offload"
    same_hashes off "-z 1 -poison 1" "-z 1 -poison 1 -offload cpu" "-z 3 -poison 1 -offload cpu" \
        "-z 1 -poison 1 -offload nvme -offload-dir $WORK/offload -offload-buffer 1MiB" || return 1
    local ref p h paths=scalar
    ref=$(grep '^hashes:' "$WORK/$STAGE.off_1.log")
    if [ "$MODE" = gpu ]; then
        paths="scalar avx2"
        grep -qw avx512f /proc/cpuinfo && paths="$paths avx512"
    fi
    for p in $paths; do
        h=$(ZT_SIMD=$p $TRAIN $SMALL -x $STEPS -v 0 -s 0 -log-hash 1 -z 1 -poison 1 -offload cpu 2>&1 | tee "$WORK/$STAGE.simd_$p.log" | grep '^hashes:') \
            || { echo "ZT_SIMD=$p -offload cpu failed:"; tail -n 20 "$WORK/$STAGE.simd_$p.log"; return 1; }
        echo "ZT_SIMD=$p -z 1 -poison 1 -offload cpu: $h"
        [ "$h" = "$ref" ] || { echo "differs from -z 1 without offload"; return 1; }
    done
    local nv="-offload-dir $WORK/offload -offload-buffer 1MiB" ga2="-b $((SB / 2)) -d $((SB * ST))"
    same_hashes par "-z 3 -poison 1" "-z 3 -poison 1 -offload-params cpu" "-z 3 -poison 1 -offload-params nvme $nv" \
        "-z 3 -poison 1 -offload nvme -offload-params nvme $nv" || return 1
    same_hashes parga "-z 3 -poison 1 $ga2" "-z 3 -poison 1 $ga2 -offload cpu -offload-params cpu"
}

# ---- gradient accumulation: GA 2 at B/2 against GA 1 at B (the same global batch), then -z 3 at GA 2
# against -z 0. Not bitwise: with GA > 1 ZeRO-0 adds each micro-step's gradient into one buffer
# inside the ops, ZeRO-2/3 reduce each micro-step's and add the sums (tensors with two
# contributions per micro-step, wte, associate differently); at GA = 1 they are bitwise (zero_bitwise).
st_grad_accumulation() {
    local half=$((SB / 2)) g1 g2 z3
    trun ga1 $SMALL -x $STEPS -v 0 -s 0 || { cat "$WORK/$STAGE.ga1.log"; return 1; }
    trun ga2 $SMALL -x $STEPS -v 0 -s 0 -b $half -d $((SB * ST)) -z 0 || { cat "$WORK/$STAGE.ga2.log"; return 1; }
    trun ga2z3 $SMALL -x $STEPS -v 0 -s 0 -b $half -d $((SB * ST)) -z 3 || { cat "$WORK/$STAGE.ga2z3.log"; return 1; }
    grep -q "GA 2" "$WORK/$STAGE.ga2.log" || { echo "the second run is not GA 2:"; grep batch "$WORK/$STAGE.ga2.log"; return 1; }
    g1=$(step_losses "$WORK/$STAGE.ga1.log" | tr '\n' ' '); g2=$(step_losses "$WORK/$STAGE.ga2.log" | tr '\n' ' '); z3=$(step_losses "$WORK/$STAGE.ga2z3.log" | tr '\n' ' ')
    echo "GA 1 -z 0 losses: $g1"; echo "GA 2 -z 0 losses: $g2"; echo "GA 2 -z 3 losses: $z3"
    close "$g2" "$g1" 1e-2 || { echo "GA 2 differs from GA 1 by more than 1e-2"; return 1; }
    close "$z3" "$g2" 1e-3 || { echo "GA 2: -z 3 differs from -z 0 by more than 1e-3"; return 1; }
}

# ---- the FP32 build: learns, and -z 0 / -z 3 give the same bits
st_fp32_build() {
    TRAIN=$TRAIN32
    STEPS=4
    same_hashes fp32 "-z 0" "-z 3" || return 1
    grep -m1 -iE "fp32|precision" "$WORK/$STAGE.fp32_1.log"
    local l; l=$(step_losses "$WORK/$STAGE.fp32_1.log" | tr '\n' ' '); echo "losses: $l"
    python3 -c "import sys; a=[float(x) for x in sys.argv[1].split()]; sys.exit(not (len(a) == 4 and a[-1] < a[0]))" "$l" \
        || { echo "loss did not fall"; return 1; }
}

# ---- validation and sampling
st_val_and_sampling() {
    local log=$WORK/$STAGE.run.log
    trun run $SMALL -x 2 -v 1 -m 2 -s 2 -g 8 || { cat "$log"; return 1; }
    grep -E 'val loss|sample at' "$log"
    local n; n=$(grep -cE 'val loss [0-9]+\.[0-9]+$' "$log")
    [ "$n" -ge 3 ] || { echo "expected 3 finite val losses, found $n"; return 1; }
    awk '/^sample at step 2:/ {f = 1; next} f == 1 && /^---$/ {f = 2; next} f == 2 && /^---$/ {exit} f == 2 {n += length($0) + 1}
         END {exit !(n > 1)}' "$log" || { echo "no sample text"; return 1; }
}

# ---- compute-sanitizer on a few small op cases each (SKIP when missing or when the runtime refuses the device)
st_sanitizer() {
    local tool=$1 c out rc=0
    shift
    [ "$MODE" = emu ] && skip "needs a GPU (compute-sanitizer)"
    command -v compute-sanitizer > /dev/null || skip "compute-sanitizer not found"
    for c in "$@"; do
        out=$(compute-sanitizer --tool "$tool" --error-exitcode 9 "$TESTGPU" "$c" 2>&1)
        rc=$?
        echo "$out"
        if echo "$out" | grep -qiE "device not supported|error 999|unknown error|not supported on this"; then
            skip "compute-sanitizer $tool: the runtime refuses the device"
        fi
        [ $rc -eq 0 ] || { echo "compute-sanitizer $tool $c: exit $rc"; return 1; }
    done
}
export -f st_sanitizer
st_sanitizer_memcheck() { st_sanitizer memcheck $SAN_MEMCHECK; }
st_sanitizer_racecheck() { st_sanitizer racecheck $SAN_RACECHECK; }
st_sanitizer_synccheck() { st_sanitizer synccheck $SAN_SYNCCHECK; }

# ---- cuDNN's fused attention (-attn cudnn: ops/attention_cudnn.cuh) against ours, with the binaries of a
# USE_CUDNN=1 build carried as train_gpu_cudnn and test/test_gpu_cudnn (docs/cudnn.md says how) and
# libcudnn.so.9 where dlopen finds it: the system's, else the box's pip wheel (nvidia-cudnn-cu13, its
# lib/ put on LD_LIBRARY_PATH here). Step 10's losses within 0.02 (the same math, other roundings).
st_cudnn_attention() {
    [ "$MODE" = emu ] && skip "needs a GPU (the emulator has no cuDNN)"
    local trainc=$ROOT/train_gpu_cudnn testc=$ROOT/test/test_gpu_cudnn
    [ -x "$trainc" ] && [ -x "$testc" ] || skip "train_gpu_cudnn and test/test_gpu_cudnn not carried (docs/cudnn.md: make USE_CUDNN=1 gpu-binaries, copied)"
    local lib; lib=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(os.path.dirname(nvidia.cudnn.__file__), 'lib'))" 2>/dev/null)
    [ -n "$lib" ] && [ -d "$lib" ] && export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && echo "cuDNN from $lib"
    run_cases "$testc" gpu_attention_cudnn || return 1
    local a l tok loss_own="" loss_cudnn="" tok_own="" tok_cudnn=""
    for a in own cudnn; do
        "$trainc" -device cuda -e d12 -b 16 -t 1024 -x 10 -v 0 -s 0 -u 2 -attn "$a" > "$WORK/$STAGE.$a.log" 2>&1 || { tail -n 20 "$WORK/$STAGE.$a.log"; return 1; }
        l=$(grep -E '^step +10/' "$WORK/$STAGE.$a.log" | sed -E 's/.*loss ([0-9.]+).*/\1/')
        tok=$(grep -E '^step +[0-9]+/' "$WORK/$STAGE.$a.log" | tail -n +3 | sed -E 's/.*\| ([0-9]+) tok\/s.*/\1/' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
        echo "-attn $a: step 10 loss $l, $tok tok/s"
        if [ "$a" = own ]; then loss_own=$l; tok_own=$tok; else loss_cudnn=$l; tok_cudnn=$tok; fi
    done
    echo "RESULT d12 B 16 T 1024: -attn cudnn $tok_cudnn tok/s, ours $tok_own ($(python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}x')" "$tok_cudnn" "$tok_own"))"
    python3 -c "import sys; sys.exit(abs(float(sys.argv[1]) - float(sys.argv[2])) > 0.02)" "$loss_cudnn" "$loss_own" \
        || { echo "step 10's loss: cudnn $loss_cudnn, ours $loss_own: more than 0.02 apart"; return 1; }
}

st_torch_perf() {
    [ "$MODE" = emu ] && skip "needs a GPU and GPU PyTorch"
    [ "$TORCH" = 1 ] || skip "not asked for (--torch)"
    python3 "$ROOT/dev/bench_torch_gpu.py" --depth 12 -B 16 -T 1024 && python3 "$ROOT/dev/bench_torch_gpu.py" --depth 48 -B 4 -T 1024
}
export -f res_pairs res_sample $(declare -F | awk '{print $3}' | grep '^st_')

# ---- the run: each stage of the plan in order; the binaries' stage stops the run when it fails
while read -r part name est limit opt; do
    stage "$part" "$name" "$est" "$limit"
    case $name in
    binaries)
        grep -q "BUILT HERE" "$LOGS/binaries.log" && sum "note: the carried binaries did not load or run here; built on the box (make gpu-binaries, sm_90): over the plan"
        grep -q "^PASS binaries" "$SUMMARY" || { say "no usable binaries: stopping"; sum "stopped: no usable binaries"; pack; rm -rf "$WORK" "$LOGS"; exit 1; } ;;
    perf_d12|perf_d48|attention_bench|cudnn_attention) grep -h '^RESULT' "$LOGS/$name.log" 2>/dev/null | sed 's/^RESULT /throughput: /' >> "$SUMMARY" ;;
    torch_perf) grep -h 'tok_s' "$LOGS/torch_perf.log" 2>/dev/null | sed 's/^/pytorch: /' >> "$SUMMARY" ;;
    esac
done <<< "$RUN"

sum "done: $npass passed, $nfail failed, $nskip skipped in $(( $(date +%s) - START )) s (estimated $total s on an H200)"
pack
say "done: $npass passed, $nfail failed, $nskip skipped; $SUMMARY and $OUT/gpu_check_logs.tar.gz"
cat "$SUMMARY"
rm -rf "$WORK" "$LOGS"
[ $nfail -eq 0 ]
