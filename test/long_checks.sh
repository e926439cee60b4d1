#!/usr/bin/env bash
# test/long_checks.sh — the checks make test-long adds to its binaries' cases (each prints PASS, FAIL
# or SKIP with its name; the script ends with "N passed, N failed"):
#   gpu_check_emu       dev/gpu_check.sh --emu: the GPU check's stages on the CUDA emulator, on tiny
#                       shapes: --part 1, --part 2, and --part 2 --budget 20 (its six longest optional
#                       stages say SKIP "over --budget", val_and_sampling runs). Every stage that can run without
#                       a GPU passes; the GPU-only ones must say SKIP; exactly two files (summary +
#                       tarball: the GPU box returns at most 8) land in $OUT. Then the plan's own check:
#                       each part's estimates within 300 s (--plan exits 0), and over a lower limit
#                       (ZT_GPU_CHECK_PART_S=200) the script refuses with exit 2. Its stages repeat what
#                       test/test_emu checks case by case; what this adds is the script's own plumbing,
#                       checked before device time is spent on it.
#   nvcc_build_full     make nvcc-check: the multi-GPU ./train as make train builds it (MPI, NCCL,
#                       sm_80, sm_90, PTX), warnings as errors (make test compiles it to PTX only)
#   gpu_binaries        the binaries carried to a GPU box (make gpu-binaries: nvcc, sm_90, no MPI,
#                       warnings as errors): what they link, AVX-512 only in its two paths
#   no_gpu_no_runtime   without NVIDIA device files ./train_gpu never starts the CUDA runtime
#   gpu_binaries_cudnn  make USE_CUDNN=1 gpu-binaries (cuDNN's attention, docs/cudnn.md), warnings as
#                       errors: cuDNN not linked, the runtime shared, -attn cudnn refused without a GPU
#                       (SKIP without the pinned nvidia-cudnn-frontend headers); the default ones relinked after
#   kernel_resources_current  nvcc's registers, shared memory and spills per kernel (ptxas of the
#                       carried binaries) = the emulator's committed snapshot (make kernel-resources)
# The nvcc ones say SKIP without nvcc (NVCC_CHECK=yes: make test-long found it).
set -u
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_rmaps_base_oversubscribe=1
passed=0; failed=0; skipped=0
result() { # NAME STATUS (0: passed)
    if [ "$2" -eq 0 ]; then echo "PASS $1"; passed=$((passed + 1)); else echo "FAIL $1"; failed=$((failed + 1)); fi
}
nvcc_or_skip() { # NAME: 0 when nvcc is here, else says SKIP
    [ "${NVCC_CHECK:-no}" = yes ] && return 0
    echo "SKIP $1: nvcc not found"; skipped=$((skipped + 1)); return 1
}

# emu_part "ARGS" "PASS STAGES" "SKIP STAGES" "BUDGET STAGES": dev/gpu_check.sh --emu ARGS; each stage
# named must show its verdict (BUDGET: SKIP "over --budget"), and no other stage may show
emu_part() {
    local args=$1 pass=$2 skip=$3 over=$4 out rc n st line want why
    out=$(mktemp -d)
    OUT=$out bash dev/gpu_check.sh --emu $args > "$out.log" 2>&1; rc=$?
    echo "--- dev/gpu_check.sh --emu $args:"
    cat "$out/summary.txt" 2>/dev/null
    n=$(ls -A "$out" | wc -l)
    [ $rc -eq 0 ] || { echo "gpu_check.sh --emu $args exited $rc"; tail -n 30 "$out.log"; rm -rf "$out" "$out.log"; return 1; }
    [ "$n" -eq 2 ] && [ -f "$out/summary.txt" ] && tar -tzf "$out/gpu_check_logs.tar.gz" | grep -q binaries.log \
        || { echo "expected summary.txt and gpu_check_logs.tar.gz in OUT, found $n files"; rm -rf "$out" "$out.log"; return 1; }
    for want in PASS SKIP BUDGET; do
        case $want in PASS) set -- $pass ;; SKIP) set -- $skip ;; BUDGET) set -- $over ;; esac
        for st in "$@"; do
            line=$(grep -E "^(PASS|FAIL|SKIP) +$st " "$out/summary.txt")
            why=${want/BUDGET/SKIP}
            [ "${line%% *}" = "$why" ] && { [ $want != BUDGET ] || [[ "$line" == *"over --budget"* ]]; } \
                || { echo "stage $st: expected $want, got '${line:-no line}'"; rm -rf "$out" "$out.log"; return 1; }
        done
    done
    n=$(grep -cE "^(PASS|FAIL|SKIP) " "$out/summary.txt")
    [ "$n" -eq $(echo $pass $skip $over | wc -w) ] || { echo "$n stage lines, expected $(echo $pass $skip $over | wc -w)"; rm -rf "$out" "$out.log"; return 1; }
    rm -rf "$out" "$out.log"
}
gpu_check_emu() {
    local out p
    emu_part "--part 1" "binaries kernel_registers ops model_vs_pytorch recompute_bitwise zero_bitwise llama_family checkpoint_resume
                        loss_falls_20_steps memory_vs_planner no_cublaslt_fallback" "perf_d12 attention_bench perf_d48 cudnn_attention" "" || return 1
    emu_part "--part 2" "binaries offload_bitwise grad_accumulation fp32_build val_and_sampling no_cublaslt_fallback" \
                        "sanitizer_memcheck sanitizer_racecheck sanitizer_synccheck torch_perf" "" || return 1
    emu_part "--part 2 --budget 20" "binaries val_and_sampling no_cublaslt_fallback" "torch_perf" \
                        "offload_bitwise grad_accumulation fp32_build sanitizer_memcheck sanitizer_racecheck sanitizer_synccheck" || return 1
    echo "--- the plan: each part's estimates within 300 s, and the check that enforces it"
    for p in "--part 1" "--part 2 --torch"; do
        out=$(bash dev/gpu_check.sh --plan $p) || { echo "--plan $p: $out"; return 1; }
        echo "${out%%$'\n'*}"
    done
    out=$(ZT_GPU_CHECK_PART_S=200 bash dev/gpu_check.sh --emu --plan 2>&1) && { echo "a part over 200 s was not refused: $out"; return 1; }
    echo "$out" | grep -q "over the 200 s" || { echo "the refusal does not say why: $out"; return 1; }
    echo "ZT_GPU_CHECK_PART_S=200: refused ($out)"
}

echo "=== dev/gpu_check.sh --emu: the GPU check's stages on the CUDA emulator"
gpu_check_emu; result gpu_check_emu $?

echo "=== the multi-GPU nvcc build, every architecture (warnings are errors)"
if nvcc_or_skip nvcc_build_full; then make -s nvcc-check; result nvcc_build_full $?; fi

echo "=== the binaries carried to the GPU box: make gpu-binaries (nvcc, sm_90, no MPI, warnings are errors)"
# The carried binaries: built as make gpu-binaries builds them, then what they link checked.
gpu_binaries() {
    local t0 b needed; t0=$(date +%s)
    make -s gpu-binaries >/dev/null || return 1
    echo "gpu-binaries: $(( $(date +%s) - t0 )) s (nothing to do when up to date)"
    for b in train_gpu train_gpu_fp32 test/test_gpu build/attn_bench; do
        needed=$(readelf -d "$b" | grep NEEDED | grep -oE '\[[^]]+\]' | tr -d '[]' | tr '\n' ' ')
        echo "$b needs: $needed"
        case " $needed" in *" libnccl"*|*" libmpi"*|*" libstdc++"*|*" libgcc_s"*|*" libopenblas"*)
            echo "$b: links what the GPU box lacks or what must be static"; return 1;; esac
    done
    # AVX-512 only inside the two AVX-512 paths (simd.h): the host AdamW's (adamw.cuh) and the CPU
    # GEMM's microkernel (ops/matmul.cuh), functions of their own with target("avx512f"), called only
    # when the CPU says it has AVX-512; anywhere else it is not portable
    local zmm fn; zmm=$(objdump -d --no-show-raw-insn train_gpu | awk '/^[0-9a-f]+ <.*>:$/ {fn=$2} /%zmm/ && fn !~ /adamw_range_avx512|gemm_kernel_avx512/ {print fn}' | sort -u)
    if [ -n "$zmm" ]; then echo "train_gpu has AVX-512 code outside adamw_range_avx512 and gemm_kernel_avx512: not portable: $zmm"; return 1; fi
    for fn in adamw_range_avx512 gemm_kernel_avx512; do
        objdump -d --no-show-raw-insn train_gpu | grep -q "$fn.*>:\$" || { echo "train_gpu: $fn not found (the check above would pass vacuously)"; return 1; }
    done
}
if nvcc_or_skip gpu_binaries; then gpu_binaries; result gpu_binaries $?; fi

echo "=== no GPU, no GPU messages: without NVIDIA device files ./train_gpu never starts the CUDA runtime"
# ./train_gpu (nvcc, the CUDA runtime linked in) on a machine without /dev/nvidia*: -tokenize, -plan,
# a -device auto run and a refused -device cuda never start the CUDA runtime, print no driver hint,
# and the start-up's device line says why the CPU was taken (-verbose 1: the settings' -device row). The probe: LD_DEBUG=libs lists each
# search of the dynamic loader for libcuda.so.1. cuBLASLt's library constructor makes one in every
# nvcc-built binary before main (-help, which ends in flags_parse, shows that baseline); the runtime's
# first call makes another: each case must show the baseline's count, and the control, test/test_gpu
# (cudaGetDeviceCount first thing), more. (Skipped on a machine with a GPU.)
no_gpu_no_runtime() {
    local tmp rc base n; tmp=$(mktemp -d)
    run_ld() { # the program's output (stdout, then stderr less the loader's lines) in out; n: the searches
        LD_DEBUG=libs "$@" > "$tmp/out" 2> "$tmp/ld"; rc=$?
        n=$(grep -c 'find library=libcuda' "$tmp/ld"); grep -vE '^ *[0-9]+:' "$tmp/ld" >> "$tmp/out"
    }
    bad() { echo "$1"; tail -n 15 "$tmp/out"; rm -rf "$tmp"; return 1; }
    run_ld ./train_gpu -help
    base=$n
    [ "$rc" = 0 ] || { bad "./train_gpu -help: exit $rc"; return 1; }
    run_ld test/test_gpu gpu_none
    [ "$n" -gt "$base" ] || { bad "control: test/test_gpu's cudaGetDeviceCount made $n searches for libcuda.so.1, -help $base: the probe sees nothing"; return 1; }
    echo "searches for libcuda.so.1: -help $base (cuBLASLt's constructor), test/test_gpu's cudaGetDeviceCount $n (the runtime started)"
    printf 'In the beginning God created the heaven and the earth.\n' > "$tmp/in.txt"
    local -a cases=(
        "-tokenize $tmp/in.txt -o $tmp/tok|0"
        "-plan -b 2 -t 32 -v 0 -s 0 -o $tmp/plan|0"
        "-x 1 -b 2 -t 32 -v 0 -s 0 -threads 1|0"
        "-device cuda -x 1|2"
    )
    local c flags want
    for c in "${cases[@]}"; do
        flags=${c%|*}; want=${c##*|}
        run_ld ./train_gpu $flags
        [ "$rc" = "$want" ] || { bad "./train_gpu $flags: exit $rc, expected $want"; return 1; }
        [ "$n" = "$base" ] || { bad "./train_gpu $flags started the CUDA runtime ($n searches for libcuda.so.1, -help $base)"; return 1; }
        grep -qi 'driver' "$tmp/out" && { bad "./train_gpu $flags speaks of a driver"; return 1; }
        echo "./train_gpu $flags: exit $rc, the runtime not started, no driver message"
    done
    grep -q 'no NVIDIA GPU on this machine' "$tmp/out" || { bad "-device cuda: the refusal does not say there is no NVIDIA GPU"; return 1; }
    run_ld ./train_gpu -x 1 -b 2 -t 32 -v 0 -s 0 -threads 1
    grep -qE '^device cpu \(auto: no NVIDIA GPU here\) \|' "$tmp/out" || { bad "the device line does not say 'device cpu (auto: no NVIDIA GPU here)'"; return 1; }
    echo "start-up: $(grep -E '^device cpu' "$tmp/out" | cut -c1-60)..."
    run_ld ./train_gpu -x 1 -b 2 -t 32 -v 0 -s 0 -threads 1 -verbose 1
    grep -qE '^\| -device +\| auto \(no NVIDIA GPU here\) → cpu' "$tmp/out" || { bad "-verbose 1: the settings' -device row does not say 'auto (no NVIDIA GPU here) → cpu'"; return 1; }
    echo "settings (-verbose 1): $(grep -E '^\| -device ' "$tmp/out")"
    rm -rf "$tmp"
}
if [ -e /dev/nvidiactl ] || [ -e /dev/nvidia0 ] || [ -e /dev/dxg ]; then
    echo "SKIP no_gpu_no_runtime: this machine has NVIDIA device files"; skipped=$((skipped + 1))
elif [ "${NVCC_CHECK:-no}" = yes ]; then
    if no_gpu_no_runtime; then echo "PASS no_gpu_no_runtime"; passed=$((passed + 1))
    else echo "FAIL no_gpu_no_runtime"; failed=$((failed + 1)); fi
else
    echo "SKIP no_gpu_no_runtime: nvcc not found (no ./train_gpu)"; skipped=$((skipped + 1))
fi

echo "=== the emulator's kernel resources (committed snapshot) = nvcc's table of the carried binaries"
kernel_resources_current() {
    make -s build/gpu/kernel_resources.h || return 1
    if cmp -s build/gpu/kernel_resources.h test/cuda_emu/kernel_resources_sm90.h; then
        echo "test/cuda_emu/kernel_resources_sm90.h = nvcc's table ($(grep -c '^EMU_KERNEL_RESOURCES(' build/gpu/kernel_resources.h) kernels)"
    else
        diff build/gpu/kernel_resources.h test/cuda_emu/kernel_resources_sm90.h | head -n 20
        echo "the snapshot differs from nvcc's table: run make kernel-resources and commit test/cuda_emu/kernel_resources_sm90.h"
        return 1
    fi
}
if nvcc_or_skip kernel_resources_current; then kernel_resources_current; result kernel_resources_current $?; fi

echo "=== cuDNN attention: make USE_CUDNN=1 gpu-binaries (warnings are errors), then the default binaries again"
# docs/cudnn.md: the binaries built with cuDNN's fused attention (cudnn-frontend's headers from the
# pinned PyPI package, .ci/run installs it into /tmp/zt-cudnn), timed; cuDNN not linked (dlopen'd at
# run time); without a GPU, -attn cudnn exits 2 naming the CPU device and -attn auto trains with our
# kernels. Then make gpu-binaries relinks the default ones (their objects are kept in build/gpu/).
gpu_binaries_cudnn() {
    local t0 b needed tmp rc; t0=$(date +%s)
    make -s USE_CUDNN=1 gpu-binaries >/dev/null || return 1
    echo "USE_CUDNN=1 gpu-binaries: $(( $(date +%s) - t0 )) s (nothing to do when up to date)"
    for b in train_gpu test/test_gpu; do
        needed=$(readelf -d "$b" | grep NEEDED | grep -oE '\[[^]]+\]' | tr -d '[]' | tr '\n' ' ')
        echo "$b needs: $needed"
        case " $needed" in *" libcudnn"*) echo "$b links cuDNN: it must load it at run time (dlopen)"; return 1;; esac
        case " $needed" in *" libcudart.so.13"*) ;; *) echo "$b: the CUDA runtime is not shared (-cudart shared)"; return 1;; esac
    done
    if [ ! -e /dev/nvidiactl ] && [ ! -e /dev/nvidia0 ] && [ ! -e /dev/dxg ]; then
        tmp=$(mktemp -d)
        ./train_gpu -attn cudnn -x 1 -b 2 -t 32 -v 0 -s 0 -threads 1 > "$tmp/out" 2>&1; rc=$?
        [ "$rc" = 2 ] && grep -q 'flag -attn cudnn: cuDNN runs on the CUDA device only' "$tmp/out" \
            || { echo "./train_gpu -attn cudnn without a GPU: exit $rc"; tail -n 5 "$tmp/out"; rm -rf "$tmp"; return 1; }
        ./train_gpu -x 1 -b 2 -t 32 -v 0 -s 0 -threads 1 > "$tmp/out" 2>&1; rc=$?
        [ "$rc" = 0 ] || { echo "./train_gpu (-attn auto) without a GPU: exit $rc"; tail -n 5 "$tmp/out"; rm -rf "$tmp"; return 1; }
        echo "without a GPU: -attn cudnn refused (exit 2), -attn auto trained with our kernels"
        rm -rf "$tmp"
    fi
    make -s gpu-binaries >/dev/null || { echo "make gpu-binaries (relinking the default binaries) failed"; return 1; }
}
if nvcc_or_skip gpu_binaries_cudnn; then
    if /tmp/zt-cudnn/bin/python dev/cudnn_frontend_include.py > /dev/null 2>&1 || python3 dev/cudnn_frontend_include.py > /dev/null 2>&1 \
       || [ -n "${CUDNN_FRONTEND_INCLUDE:-}" ]; then
        gpu_binaries_cudnn; result gpu_binaries_cudnn $?
    else
        echo "SKIP gpu_binaries_cudnn: cudnn-frontend's headers not installed (pip install --no-deps nvidia-cudnn-frontend==1.32.0 into /tmp/zt-cudnn)"
        skipped=$((skipped + 1))
    fi
fi

[ "$skipped" -gt 0 ] && echo "($skipped skipped: see SKIP lines above)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
