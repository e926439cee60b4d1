#!/usr/bin/env bash
# test/run_tests.sh — the whole suite (what `make test` runs after building the test binaries).
#   1. test/test_bf16 and test/test_fp32: every C test case, in both precisions
#   2. test/test_emu and test/test_emu_fp32: the GPU test program (test/test_gpu.cu: every CUDA op
#      against the CPU op, the model on -device cuda) run on the CPU emulator (test/cuda_emu/)
#   3. (dev/gpu_check.sh --emu, the GPU check's stages on the emulator, repeats test/test_emu's cases:
#      make test-long runs it: test/long_checks.sh, both parts and a --budget run)
#   4. the headers train_gpt.cu includes compile alone (one-way doors); make train's decisions
#      (stand-in compilers: rebuilt only on change, a CPU-only binary never swapped silently);
#      NCCL's probe (with and without MPI); the multi-GPU nvcc build to PTX, warnings as errors
#      (skipped, and said so, when nvcc is missing; make test-long builds every architecture and
#      the binaries carried to a GPU box: test/long_checks.sh)
#   5. the PyTorch fixtures regenerated and compared with the committed ones (skipped, and said
#      so, when python3-torch is missing; CI installs it); the same for the BPE fixture (tiktoken)
#      and the Hugging Face fixtures and the RoPE fixture (transformers, in $ZT_HF_PYTHON)
#   6. dev/plot.py draws a PNG of the expected size from two committed logs (skipped, and said so,
#      when python3-matplotlib is missing; CI installs it)
#   7. test/check_docs.py: every file, function, flag and link README.md and docs/*.md name exists
#   8. test/check_intrinsics.py: every SIMD intrinsic sits in a function with its target attribute
# Prints every case, then the ten slowest (wall seconds, and CPU seconds of the case and the
# processes it started), and ends with one line "N passed, N failed" over all of them.
set -u
cd "$(dirname "$0")/.."
passed=0; failed=0; skipped=0
times_file=$(mktemp) # one line per case: wall seconds, CPU seconds, name (for the ten slowest)
trap 'rm -f "$times_file" "$times_file".*' EXIT
# The script's own stages, timed like the binaries' cases: stage_start, then stage_end NAME.
cpu_now() { # user + sys seconds of this shell's finished children (times runs here, not in a subshell)
    times > "$times_file.cpu"
    awk 'END { s = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] } printf "%.2f", s }' "$times_file.cpu"
}
stage_start() { stage_t0=$(date +%s.%N); cpu_now > "$times_file.c0"; }
stage_end() {
    cpu_now > "$times_file.c1"
    echo "$(date +%s.%N) $stage_t0 $(cat "$times_file.c1") $(cat "$times_file.c0") $1" | awk '{ printf "%.1f %.1f %s\n", $1 - $2, $3 - $4, $5 }' >> "$times_file"
}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_rmaps_base_oversubscribe=1
# the binaries run several cases at once (test.h: ZT_TEST_JOBS), more threads than cores: OpenMP's
# threads wait without spinning, or a spinning one takes the core a neighbour's case needs
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

count() { # add the "N passed, N failed" of a test binary's output
    local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$1" | tail -n 1)
    if [ -z "$line" ]; then failed=$((failed + 1)); echo "FAIL $2 (no summary line: crashed?)"; return; fi
    passed=$((passed + $(echo "$line" | cut -d' ' -f1)))
    failed=$((failed + $(echo "$line" | cut -d' ' -f3)))
    skipped=$((skipped + $(grep -c '^SKIP ' "$1")))
}

for bin in test/test_bf16 test/test_fp32 test/test_emu test/test_emu_fp32; do
    echo "=== $bin"
    log=$(mktemp)
    # (the emulator's cases, one OpenMP thread each: its kernels run as fibers of one thread anyway,
    # and the workers fill the cores)
    case $bin in *emu*) OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$bin" ${TEST_FILTER:-} 2>&1 | tee "$log" ;;
                 *) "$bin" ${TEST_FILTER:-} 2>&1 | tee "$log" ;; esac
    count "$log" "$bin"
    sed -nE 's/^(PASS|FAIL) ([^ ]+) \(([0-9.]+) s, cpu ([0-9.]+) s\)$/\3 \4 \2/p' "$log" | \
        awk -v b="${bin#test/}" '{ print $1, $2, b ":" $3 }' >> "$times_file"
    rm -f "$log"
done


# (with TEST_FILTER, only when the filter names it)
wanted() { [ -z "${TEST_FILTER:-}" ] || [[ "$1" == *"$TEST_FILTER"* ]]; }

echo "=== no instruction set assumed at compile time: every intrinsic in a target-attributed function"
# (test/check_intrinsics.py over every source git knows of, after its self-test: planted intrinsics in a
# plain function, a macro or a TEST, and an #if on __SSE4_2__, must be caught; make portability compiles
# everything for x86-64 v1..v4 and aarch64)
stage_start
if ! wanted intrinsics_in_target_functions; then :
elif python3 test/check_intrinsics.py --self-test && python3 test/check_intrinsics.py; then echo "PASS intrinsics_in_target_functions"; passed=$((passed + 1))
else echo "FAIL intrinsics_in_target_functions"; failed=$((failed + 1)); fi
stage_end intrinsics_in_target_functions

echo "=== the rooms train_gpt.cu includes compile alone (one-way doors: none takes the trainer's types)"
# flags.h, acts.h, plan.h, startup.h, tune.h and run_record.h, each as the only include of a translation unit
# (g++ -fsyntax-only, no MPI or BLAS): a header that used Trainer, Model or anything else defined in
# train_gpt.cu, or relied on train_gpt.cu's include order, fails here. Then all of SOURCES' headers
# in one translation unit without train_gpt.cu (checkpoint.h, offload.h, ...: no reach back either).
headers_alone() {
    local h tmp rc=0; tmp=$(mktemp -d)
    for h in flags.h acts.h plan.h startup.h tune.h run_record.h; do
        printf '#include "%s"\nint main(void) { return 0; }\n' "$h" > "$tmp/alone.cpp"
        if g++ -x c++ -std=c++17 -fopenmp -Wall -Wextra -Werror -Wno-unused-function -I. -fsyntax-only "$tmp/alone.cpp" > "$tmp/log" 2>&1
        then echo "$h: compiles alone"; else echo "$h does not compile alone:"; head -n 5 "$tmp/log"; rc=1; fi
    done
    # every other header of SOURCES too, together without train_gpt.cu: none uses the trainer's types
    for h in $(make -s NO_MPI=1 NO_BLAS=1 print-SOURCES 2>/dev/null | tail -n 1); do
        [ "$h" = train_gpt.cu ] || printf '#include "%s"\n' "$h"; done > "$tmp/all.cpp"
    if g++ -x c++ -std=c++17 -fopenmp -Wall -Wextra -Werror -Wno-unused-function -I. -fsyntax-only "$tmp/all.cpp" > "$tmp/log" 2>&1
    then echo "every header of SOURCES: compiles without train_gpt.cu"; else echo "the headers of SOURCES without train_gpt.cu:"; head -n 5 "$tmp/log"; rc=1; fi
    rm -rf "$tmp"; return $rc
}
stage_start
if ! wanted headers_alone; then :
elif headers_alone; then echo "PASS headers_alone"; passed=$((passed + 1)); else echo "FAIL headers_alone"; failed=$((failed + 1)); fi
stage_end headers_alone

echo "=== make train: real dependencies, and the kind of build recorded"
# In a copy of the Makefile and the sources, with stand-in compilers (scripts that only create the
# file after -o): a second make train with nothing changed does nothing; a touched header rebuilds;
# a NO_CUDA=1 (g++) binary is replaced by the nvcc kind only with a message, and back; make -n
# shows a decision without changing it.
make_train_deps() {
    local tmp out f cc; tmp=$(mktemp -d)
    for f in Makefile $(make -s NO_MPI=1 NO_BLAS=1 print-SOURCES 2>/dev/null | tail -n 1); do
        mkdir -p "$tmp/$(dirname "$f")"; cp "$f" "$tmp/$f"; touch -d '1 hour ago' "$tmp/$f"
    done
    for cc in gxx nvcc; do # a stand-in compiler: touches the file after -o
        printf '#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -o ] && { touch "$2"; exit 0; }; shift; done; exit 1\n' > "$tmp/fake_$cc"
        chmod +x "$tmp/fake_$cc"
    done
    mk() { make -C "$tmp" --no-print-directory NO_MPI=1 NO_BLAS=1 NCCL_HOME=/nonexistent CXX_HOST="$tmp/fake_gxx" NVCC="$tmp/fake_nvcc" "$@" 2>&1; }
    fail() { echo "$1"; echo "$out"; rm -rf "$tmp"; return 1; }
    out=$(mk NO_CUDA=1 train)
    case "$out" in *"fake_gxx -x c++"*"-o train"*"built ./train with g++ (CPU device only)"*) ;; *) fail "make NO_CUDA=1 train did not build ./train with g++:"; return 1;; esac
    out=$(mk NO_CUDA=1 train)
    case "$out" in *"-o train"*) fail "a second make NO_CUDA=1 train rebuilt with nothing changed:"; return 1;; esac
    mk -q NO_CUDA=1 train >/dev/null || { fail "make -q NO_CUDA=1 train: out of date with nothing changed"; return 1; }
    echo "a second make NO_CUDA=1 train: nothing to do"
    touch -d '45 minutes ago' "$tmp/train"; touch -d '30 minutes ago' "$tmp/tune.h" # (whole seconds apart: any file system)
    out=$(mk NO_CUDA=1 train)
    case "$out" in *"fake_gxx -x c++"*"-o train"*) ;; *) fail "touching tune.h did not rebuild ./train:"; return 1;; esac
    echo "touching tune.h rebuilds ./train"
    out=$(mk -n train)
    case "$out" in *"was built as: g++ (CPU device only)"*"rebuilding it as:"*"nvcc (CPU and CUDA devices"*) ;; *) fail "make -n train after a NO_CUDA=1 build:"; return 1;; esac
    mk -q NO_CUDA=1 train >/dev/null || { fail "make -n train changed make's record"; return 1; }
    out=$(mk train)
    case "$out" in *"./train was built as: g++ (CPU device only)"*"rebuilding it as:     nvcc (CPU and CUDA devices"*"fake_nvcc "*"-o train"*"built ./train with nvcc"*) ;;
        *) fail "make train after make NO_CUDA=1 train did not say it replaces the CPU-only binary:"; return 1;; esac
    echo "make train after a NO_CUDA=1 build: rebuilds with nvcc, and says so"
    out=$(mk train)
    case "$out" in *"-o train"*) fail "a second make train rebuilt with nothing changed:"; return 1;; esac
    out=$(mk NO_CUDA=1 train)
    case "$out" in *"./train was built as: nvcc"*"rebuilding it as:     g++ (CPU device only)"*"-o train"*) ;;
        *) fail "make NO_CUDA=1 train after an nvcc build did not say so:"; return 1;; esac
    echo "make NO_CUDA=1 train after an nvcc build: rebuilds with g++, and says so"
    rm -rf "$tmp"
}
stage_start
if ! wanted make_train_deps; then :
elif make_train_deps; then echo "PASS make_train_deps"; passed=$((passed + 1)); else echo "FAIL make_train_deps"; failed=$((failed + 1)); fi
stage_end make_train_deps

echo "=== NCCL's probe (the binaries carried to a GPU box need it without MPI too)"
# NCCL's probe: the Python wheel (a namespace package holding lib/libnccl.so.2 only) is found when
# the toolkit has none, in a build with MPI and in one without (its ranks meet over the TCP
# rendezvous and still need NCCL). Needs no nvcc.
nccl_probe() {
    local tmp home libs nompi; tmp=$(mktemp -d)
    mkdir -p "$tmp/nvidia/nccl/include" "$tmp/nvidia/nccl/lib"
    touch "$tmp/nvidia/nccl/include/nccl.h" "$tmp/nvidia/nccl/lib/libnccl.so.2"
    for nompi in "" 1; do
        home=$(PYTHONPATH=$tmp NCCL_HOME= make -s NO_MPI=$nompi NCCL_SEARCH=/nonexistent print-NCCL_HOME 2>/dev/null | tail -n 1)
        libs=$(PYTHONPATH=$tmp NCCL_HOME= make -s NO_MPI=$nompi NCCL_SEARCH=/nonexistent print-CUDA_LIBS 2>/dev/null | tail -n 1)
        [ "$home" = "$tmp/nvidia/nccl" ] || { echo "NO_MPI=$nompi: wheel not found: NCCL_HOME='$home'"; rm -rf "$tmp"; return 1; }
        case "$libs" in *"-L$tmp/nvidia/nccl/lib/ -l:libnccl.so.2"*) ;; *) echo "NO_MPI=$nompi: link line: $libs"; rm -rf "$tmp"; return 1;; esac
        echo "NO_MPI=$nompi: wheel found at $home; links: $libs"
    done
    rm -rf "$tmp"
}
if ! wanted nccl_probe; then :
elif nccl_probe; then echo "PASS nccl_probe"; passed=$((passed + 1)); else echo "FAIL nccl_probe"; failed=$((failed + 1)); fi


echo "=== nvcc build of the multi-GPU ./train to PTX, through dev/attn_bench.cu (sm_80's; warnings are errors; make test-long: every architecture)"
stage_start
if [ "${NVCC_CHECK:-no}" = yes ]; then
    if make -s nvcc-check-ptx; then echo "PASS nvcc_build"; passed=$((passed + 1))
    else echo "FAIL nvcc_build"; failed=$((failed + 1)); fi
else
    echo "SKIP nvcc_build: nvcc not found"; skipped=$((skipped + 1))
fi
stage_end nvcc_build

echo "=== fuzz harnesses: the committed corpus, then a fixed number of seeded inputs each"
if [ -x test/fuzz ]; then
    for h in model:1000 shard:300 state:1000 tokenizer:300 bpe:3000 safetensors:1500 jsonl:1500 hfjson:1500 chat:1500 mask:1500 prompt:1500 record:1500 peft:1500 rdv:1500 chatcfg:1500 bnb:500; do
        name=${h%%:*}; runs=${h##*:}
        stage_start
        rm -rf build/fuzz_replay/$name && mkdir -p build/fuzz_replay/$name # new inputs go here, not into the corpus
        if ASAN_OPTIONS=detect_leaks=0 test/fuzz $name -runs=$runs -seed=1 -max_len=16384 \
               build/fuzz_replay/$name test/fuzz_corpus/$name > build/fuzz_replay/$name.log 2>&1; then
            echo "PASS fuzz_$name ($runs inputs, seed 1)"; passed=$((passed + 1))
        else
            echo "FAIL fuzz_$name: see build/fuzz_replay/$name.log"; grep -E 'ERROR|SUMMARY' build/fuzz_replay/$name.log | head -5
            failed=$((failed + 1))
        fi
        stage_end "fuzz_$name"
    done
else
    echo "SKIP fuzz: clang++ not found (apt-get install clang libclang-rt-14-dev)"; skipped=$((skipped + 1))
fi


echo "=== PyTorch fixtures regenerated and compared"
stage_start
if /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
    if /usr/bin/python3 dev/reference.py --check test/fixtures; then
        echo "PASS fixtures_regenerate"; passed=$((passed + 1))
    else
        echo "FAIL fixtures_regenerate"; failed=$((failed + 1))
    fi
else
    echo "SKIP fixtures_regenerate: /usr/bin/python3 has no torch (apt-get install python3-torch)"; skipped=$((skipped + 1))
fi
stage_end fixtures_regenerate

echo "=== GPT-2 BPE fixture regenerated with tiktoken and compared"
TIKTOKEN_PY=${ZT_TIKTOKEN_PYTHON:-python3}
stage_start
if "$TIKTOKEN_PY" -c 'import tiktoken, regex' 2>/dev/null; then
    if "$TIKTOKEN_PY" dev/tokenizer_reference.py --check test/fixtures/bpe_cases.txt; then
        echo "PASS bpe_fixture_regenerate"; passed=$((passed + 1))
    else
        echo "FAIL bpe_fixture_regenerate"; failed=$((failed + 1))
    fi
else
    echo "SKIP bpe_fixture_regenerate: $TIKTOKEN_PY has no tiktoken (pip install tiktoken==0.14.0; .ci/run makes a venv)"; skipped=$((skipped + 1))
fi
stage_end bpe_fixture_regenerate

echo "=== Unicode tables (unicode_tables.h, unicode_nfc.h) regenerated with unicodedata2 and compared"
UNI_PY=${ZT_TIKTOKEN_PYTHON:-python3}
stage_start
if "$UNI_PY" -c 'import unicodedata2, sys; sys.exit(unicodedata2.unidata_version != "16.0.0")' 2>/dev/null; then
    if "$UNI_PY" dev/make_unicode_tables.py --check; then
        echo "PASS unicode_tables_regenerate"; passed=$((passed + 1))
    else
        echo "FAIL unicode_tables_regenerate"; failed=$((failed + 1))
    fi
else
    echo "SKIP unicode_tables_regenerate: $UNI_PY has no unicodedata2 16.0.0 (pip install unicodedata2==16.0.0; .ci/run installs it)"; skipped=$((skipped + 1))
fi
stage_end unicode_tables_regenerate

echo "=== Hugging Face fixtures regenerated with transformers and compared"
HF_PY=${ZT_HF_PYTHON:-python3}
stage_start
# (4.47 or later: the Llama-family fixtures need head_dim and rope_type llama3, which 4.38 lacks)
if "$HF_PY" -c 'import transformers, safetensors, torch; assert tuple(map(int, transformers.__version__.split(".")[:2])) >= (4, 47)' 2>/dev/null; then
    if "$HF_PY" dev/hf_fixtures.py --check test/fixtures/hf; then
        echo "PASS hf_fixtures_regenerate"; passed=$((passed + 1))
    else
        echo "FAIL hf_fixtures_regenerate"; failed=$((failed + 1))
    fi
else
    echo "SKIP hf_fixtures_regenerate: $HF_PY has no transformers 4.47 or later (pip install transformers==4.47.1 safetensors==0.4.5 jinja2; .ci/run makes a venv)"; skipped=$((skipped + 1))
fi
stage_end hf_fixtures_regenerate

echo "=== RoPE fixture (test/fixtures/rope.bin) regenerated with transformers 4.47.1 and compared"
stage_start
if "$HF_PY" -c 'import transformers, torch, sys; sys.exit(transformers.__version__ != "4.47.1")' 2>/dev/null; then
    if "$HF_PY" dev/rope_fixture.py --check test/fixtures/rope.bin; then
        echo "PASS rope_fixture_regenerate"; passed=$((passed + 1))
    else
        echo "FAIL rope_fixture_regenerate"; failed=$((failed + 1))
    fi
else
    echo "SKIP rope_fixture_regenerate: $HF_PY has no transformers 4.47.1 (the llama3 rope_type; .ci/run makes a venv)"; skipped=$((skipped + 1))
fi
stage_end rope_fixture_regenerate

echo "=== dev/plot.py renders a PNG from a committed log (two runs overlaid)"
stage_start
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    png=$(mktemp --suffix=.png)
    # the PNG signature, then the IHDR chunk: length 13, "IHDR", width 640, height 480 (big-endian)
    want=89504e470d0a1a0a0000000d4948445200000280000001e0
    if /usr/bin/python3 dev/plot.py test/fixtures/plot_log_z0.jsonl:ZeRO-0 test/fixtures/plot_log_z3.jsonl:ZeRO-3 -o "$png" --size 640x480 \
        && [ "$(od -An -tx1 -N24 "$png" | tr -d ' \n')" = "$want" ] && [ "$(stat -c %s "$png")" -gt 20000 ] \
        && ! /usr/bin/python3 dev/plot.py test/run_tests.sh -o "$png.bad" 2>/dev/null && [ ! -e "$png.bad" ]; then
        echo "PASS plot_png"; passed=$((passed + 1))
    else
        echo "FAIL plot_png (not a 640x480 PNG of more than 20 kB, or a non-JSON log was accepted)"; failed=$((failed + 1))
    fi
    rm -f "$png" "$png.bad"
else
    echo "SKIP plot_png: /usr/bin/python3 has no matplotlib (apt-get install python3-matplotlib)"; skipped=$((skipped + 1))
fi

stage_end plot_png

echo "=== README.md and docs/*.md: every file, function, flag and link they name exists"
# (test/check_docs.py; the flags are test/test_bf16 --train -help's, the trainer's own table)
stage_start
if ! wanted docs_pointers; then :
elif /usr/bin/python3 test/check_docs.py --help-from test/test_bf16; then echo "PASS docs_pointers"; passed=$((passed + 1))
else echo "FAIL docs_pointers"; failed=$((failed + 1)); fi
stage_end docs_pointers

echo "=== the ten slowest cases: wall s, CPU s (user + sys, the processes it started included), name"
sort -k1,1 -g -r "$times_file" | head -n 10 | awk '{ printf "%7.1f %7.1f  %s\n", $1, $2, $3 }'
awk '{ w += $1; c += $2 } END { printf "all %d timed cases: %.0f s wall, %.0f s CPU\n", NR, w, c }' "$times_file"
[ "$skipped" -gt 0 ] && echo "($skipped skipped: see SKIP lines above)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
