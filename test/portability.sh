#!/usr/bin/env bash
# test/portability.sh — make portability: no instruction set assumed at compile time, shown by compiling.
#
#   1. test/check_intrinsics.py: every SIMD intrinsic in the tree sits in a function with its target
#      attribute and nothing tests an instruction-set macro (its self-test: it catches planted ones);
#      make test runs the same check
#   2. every translation unit of the product and of the test binaries compiled (-O0, -c, warnings are
#      errors) for -march=x86-64, x86-64-v2, x86-64-v3 and x86-64-v4: ./train's (g++), the test
#      program's in BF16 and FP32, the emulated GPU test program's (with and without MPI), the fuzz
#      harnesses' (clang), and
#      with nvcc (when found) the host code of ./train's, the GPU test program's, the FP32 trainer's and
#      dev/attn_bench.cu's (nvcc -cuda once each, then g++ at each level: see below).
#      A target mismatch (an AVX-512 intrinsic inlined into a function built for less) shows at -O0
#      already: GCC inlines always_inline intrinsics at every level.
#   3. a cross build for aarch64 (aarch64-linux-gnu-g++, Debian's g++-aarch64-linux-gnu; the CPU device
#      without MPI or OpenBLAS, as make CXX_HOST=aarch64-linux-gnu-g++ builds it): ./train linked, the
#      test program compiled; then, where qemu-user is installed, that ./train runs 3 steps of the
#      default model (-x 3, at B = 2, T = 32: the LM head's 50,304 columns under emulation take ~55 s
#      a step at the default B x T of 8 x 64) under qemu-aarch64.
# Each part prints PASS, FAIL or SKIP (a compiler or qemu missing: said so, never PASS) and its seconds;
# the script ends with "N passed, N failed" and exits non-zero on a failure. PORT_JOBS compiles run at
# once (default: the number of cores). Logs: build/portability/.
set -u
cd "$(dirname "$0")/.."
OUT=build/portability
rm -rf "$OUT" && mkdir -p "$OUT"
JOBS=${PORT_JOBS:-$(nproc)}
LEVELS="x86-64 x86-64-v2 x86-64-v3 x86-64-v4"
passed=0; failed=0; skipped=0
t_start=$(date +%s.%N)
secs() { echo "$(date +%s.%N) $1" | awk '{ printf "%.0f", $1 - $2 }'; }
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }
skip() { echo "SKIP $1"; skipped=$((skipped + 1)); }
# a Makefile variable as this build (MARCH, CXX_HOST, ...) would have it: make print-VAR's last line
mkvar() { local var=$1; shift; make -s --no-print-directory "$@" "print-$var" 2>/dev/null | tail -n 1; }

echo "=== 1. intrinsics only inside target-attributed functions (test/check_intrinsics.py, and its self-test)"
t0=$(date +%s.%N)
if python3 test/check_intrinsics.py --self-test > "$OUT/intrinsics.log" 2>&1 && python3 test/check_intrinsics.py >> "$OUT/intrinsics.log" 2>&1; then
    pass "intrinsics_in_target_functions ($(tail -n 1 "$OUT/intrinsics.log")) ($(secs "$t0") s)"
else
    cat "$OUT/intrinsics.log"; fail "intrinsics_in_target_functions"
fi

echo "=== 2. every translation unit for x86-64, x86-64-v2, x86-64-v3, x86-64-v4 (-O0, compile only, -Werror)"
# One line per compile: "NAME|COMMAND|NEEDS" (NEEDS: a compile whose output this one reads). Flags come
# from the Makefile (make print-...), -march from MARCH; -O0, and the output is -c -o /dev/null.
# nvcc's translation units: nvcc -cuda once per unit (the front end, the device code as PTX for one
# virtual architecture, and the host code through cudafe++ into one preprocessed file), then that
# host code compiled by g++ at each level, as nvcc's last step would. The preprocessing is done once,
# at x86-64: no source tests an instruction-set macro (__AVX2__, __SSE4_2__, ...; check_intrinsics.py
# refuses one), so the host code is the same text at every level.
o0() { sed -E 's/(^| )-O[0-9s]( |$)/\1-O0\2/g; s/-DZT_KERNEL_RESOURCES=([^ ]+)/-DZT_KERNEL_RESOURCES=\x27"\1"\x27/'; }
NVCC=$(mkvar NVCC)
[ -n "$(mkvar NO_CUDA)" ] && NVCC=""
CLANGXX=$(mkvar CLANGXX)
make -s build/emu/.copied > "$OUT/emu_copy.log" 2>&1 || { cat "$OUT/emu_copy.log"; fail "emulator sources (build/emu)"; }
jobs_file=$OUT/jobs.txt
: > "$jobs_file"
logname() { echo "$OUT/$(echo "$1" | tr -c 'A-Za-z0-9_.\n-' '_').log"; }
if [ -n "$NVCC" ]; then
    host=$(mkvar HOST_FLAGS MARCH=x86-64 | o0)
    nv="$NVCC -cuda -O0 -std=c++17 -x cu -gencode arch=compute_90,code=compute_90 -Werror all-warnings -Xcompiler \"$host -Werror -Wno-format-truncation\""
    for tu in "train_gpt.cu|$(mkvar DEFS) $(mkvar NVCC_DEFS) $(mkvar MPI_CFLAGS)" "test/test_gpu.cu|$(mkvar GPU_DEFS)" \
              "test/train_gpu_fp32.cu|$(mkvar GPU_DEFS)" "dev/attn_bench.cu|"; do
        src=${tu%%|*}; ii="$OUT/$(basename "$src").ii"
        echo "nvcc -cuda $src|$nv ${tu#*|} $src -o $ii|" >> "$jobs_file"
    done
fi
for L in $LEVELS; do
    cxx=$(mkvar CXX_HOST MARCH=$L); host=$(mkvar HOST_FLAGS MARCH=$L | o0); defs=$(mkvar DEFS MARCH=$L); mpi=$(mkvar MPI_CFLAGS MARCH=$L)
    test_flags=$(mkvar TEST_FLAGS MARCH=$L | o0); emu_flags=$(mkvar EMU_FLAGS MARCH=$L | o0)
    nodefs=$(echo " $defs " | sed 's/ -DENABLE_FP32 / /g')
    echo "$L train_gpt.cu|$cxx -x c++ -std=c++17 $host -Werror $defs $mpi -c train_gpt.cu -o /dev/null|" >> "$jobs_file"
    echo "$L test_bf16|$cxx $test_flags $nodefs $mpi -c test/test_main.cpp -o /dev/null|" >> "$jobs_file"
    echo "$L test_fp32|$cxx $test_flags $nodefs -DENABLE_FP32 $mpi -c test/test_main.cpp -o /dev/null|" >> "$jobs_file"
    echo "$L test_emu|$cxx $emu_flags $nodefs $mpi -c build/emu/test/test_gpu.cu -o /dev/null|" >> "$jobs_file"
    echo "$L test_emu_nompi|$cxx $emu_flags $(mkvar NOMPI_DEFS MARCH=$L) $(mkvar BLAS_CFLAGS MARCH=$L) -c build/emu/test/test_gpu.cu -o /dev/null|" >> "$jobs_file"
    if [ -n "$CLANGXX" ]; then
        echo "$L fuzz (clang)|$CLANGXX $(mkvar FUZZ_FLAGS MARCH=$L | o0) -march=$L -c test/fuzz.cpp -o /dev/null|" >> "$jobs_file"
    fi
done
if [ -n "$NVCC" ]; then # (last in the list: their nvcc -cuda ran first)
    for L in $LEVELS; do
        host=$(mkvar HOST_FLAGS MARCH=$L | o0)
        for src in train_gpt.cu test/test_gpu.cu test/train_gpu_fp32.cu dev/attn_bench.cu; do
            ii="$OUT/$(basename "$src").ii"
            echo "$L $src (nvcc's host code)|$(mkvar CXX_HOST) -x c++-cpp-output -std=c++17 $host -Werror -Wno-format-truncation -c $ii -o /dev/null|nvcc -cuda $src" >> "$jobs_file"
        done
    done
fi
[ -n "$CLANGXX" ] || skip "fuzz harnesses: clang++ not found (apt-get install clang libclang-rt-14-dev)"
[ -n "$NVCC" ] || skip "nvcc translation units: nvcc not found"
t0=$(date +%s.%N)
n=0
while IFS= read -r line; do
    n=$((n + 1))
    name=${line%%|*}; rest=${line#*|}; cmd=${rest%|*}; need=${rest##*|}
    log=$(logname "$name")
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    (
        s=$(date +%s.%N)
        if [ -n "$need" ]; then
            while [ ! -e "$(logname "$need").rc" ]; do sleep 0.2; done
            grep -q '^ok' "$(logname "$need").rc" || { echo "not compiled: $need failed" > "$log"; echo "failed 0 s" > "$log.rc"; exit; }
        fi
        if eval "$cmd" > "$log" 2>&1; then echo "ok $(secs "$s") s" > "$log.rc"; else echo "failed $(secs "$s") s" > "$log.rc"; fi
    ) &
done < "$jobs_file"
wait
while IFS= read -r line; do
    name=${line%%|*}; rest=${line#*|}
    log=$(logname "$name")
    res=$(cat "$log.rc" 2>/dev/null || echo "failed ? s")
    if [ "${res%% *}" = ok ]; then pass "compile $name (${res#* })"
    else fail "compile $name: ${rest%|*}"; head -n 20 "$log"; fi
done < "$jobs_file"
rm -f "$OUT"/*.ii
echo "($n compiles in $(secs "$t0") s with $JOBS at once)"

echo "=== 3. aarch64: a cross build (aarch64-linux-gnu-g++), and a short run under qemu-aarch64"
XCXX=${PORT_AARCH64_CXX:-aarch64-linux-gnu-g++}
if command -v "$XCXX" > /dev/null; then
    t0=$(date +%s.%N)
    mkdir -p "$OUT/aarch64"
    xm="CXX_HOST=$XCXX"
    xhost=$(mkvar HOST_FLAGS $xm); xdefs=$(mkvar DEFS $xm); xtest=$(mkvar TEST_FLAGS $xm | o0)
    echo "flags: $xhost $xdefs (make $xm: $(make -s --no-print-directory $xm print-CROSS 2>/dev/null | head -n 1))"
    ( $XCXX -x c++ -std=c++17 $xhost -Werror $xdefs train_gpt.cu -o "$OUT/aarch64/train" > "$OUT/aarch64_train.log" 2>&1; echo $? > "$OUT/aarch64_train.rc" ) &
    ( $XCXX $xtest $xdefs -c test/test_main.cpp -o /dev/null > "$OUT/aarch64_test.log" 2>&1; echo $? > "$OUT/aarch64_test.rc" ) &
    wait
    # (an ELF for aarch64: e_machine, bytes 18-19, is 183 = 0xb7; od is coreutils', unlike file(1))
    if [ "$(cat "$OUT/aarch64_train.rc")" = 0 ] && [ "$(od -An -tx1 -j18 -N2 "$OUT/aarch64/train" | tr -d ' \n')" = b700 ]; then
        pass "aarch64 ./train built ($XCXX, $(secs "$t0") s with the test program beside it)"
    else fail "aarch64 ./train"; head -n 20 "$OUT/aarch64_train.log"; fi
    if [ "$(cat "$OUT/aarch64_test.rc")" = 0 ]; then pass "aarch64 test program compiled (-O0)"
    else fail "aarch64 test program"; head -n 20 "$OUT/aarch64_test.log"; fi
    if [ ! -x "$OUT/aarch64/train" ]; then :
    elif command -v qemu-aarch64 > /dev/null; then
        t0=$(date +%s.%N)
        sysroot=/usr/$(basename "$XCXX" -g++)
        if QEMU_LD_PREFIX=$sysroot OMP_NUM_THREADS=2 timeout 600 qemu-aarch64 "$OUT/aarch64/train" -device cpu -x 3 -b 2 -t 32 -v 0 -s 0 \
               > "$OUT/aarch64_run.log" 2>&1 \
           && grep -qE '^step +3/3 \| loss [0-9]' "$OUT/aarch64_run.log"; then
            pass "aarch64 ./train -x 3 under qemu-aarch64 ($(secs "$t0") s: $(grep -m1 -E '^step +3/3' "$OUT/aarch64_run.log" | cut -c1-60))"
        else fail "aarch64 ./train -x 3 under qemu-aarch64"; tail -n 20 "$OUT/aarch64_run.log"; fi
    else
        skip "aarch64 run: qemu-aarch64 not found (apt-get install qemu-user)"
    fi
else
    skip "aarch64: $XCXX not found (apt-get install g++-aarch64-linux-gnu)"
fi

echo "make portability: $(secs "$t_start") s"
[ "$skipped" -gt 0 ] && echo "($skipped skipped: see SKIP lines above)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
