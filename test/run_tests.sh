#!/usr/bin/env bash
# test/run_tests.sh — the whole suite (what `make test` runs after building the test binaries).
#   1. test/test_bf16 and test/test_fp32: every C test case, in both precisions
#   2. test/test_emu and test/test_emu_fp32: the GPU test program (test/test_gpu.cu: every CUDA op
#      against the CPU op, the model on -device cuda) run on the CPU emulator (test/cuda_emu/)
#   3. the nvcc build with warnings as errors (skipped, and said so, when nvcc is missing)
#   4. the PyTorch fixtures regenerated and compared with the committed ones (skipped, and said
#      so, when python3-torch is missing; CI installs it)
#   5. dev/plot.py draws a PNG of the expected size from two committed logs (skipped, and said so,
#      when python3-matplotlib is missing; CI installs it)
# Prints every case and ends with one line "N passed, N failed" over all of them.
set -u
cd "$(dirname "$0")/.."
passed=0; failed=0; skipped=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_rmaps_base_oversubscribe=1

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
    "$bin" ${TEST_FILTER:-} 2>&1 | tee "$log"
    count "$log" "$bin"
    rm -f "$log"
done

echo "=== nvcc build (warnings are errors)"
if [ "${NVCC_CHECK:-no}" = yes ]; then
    if make -s nvcc-check; then echo "PASS nvcc_build"; passed=$((passed + 1))
    else echo "FAIL nvcc_build"; failed=$((failed + 1)); fi
else
    echo "SKIP nvcc_build: nvcc not found"; skipped=$((skipped + 1))
fi

echo "=== PyTorch fixtures regenerated and compared"
if /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
    if /usr/bin/python3 dev/reference.py --check test/fixtures; then
        echo "PASS fixtures_regenerate"; passed=$((passed + 1))
    else
        echo "FAIL fixtures_regenerate"; failed=$((failed + 1))
    fi
else
    echo "SKIP fixtures_regenerate: /usr/bin/python3 has no torch (apt-get install python3-torch)"; skipped=$((skipped + 1))
fi

echo "=== GPT-2 BPE fixture regenerated with tiktoken and compared"
TIKTOKEN_PY=${ZT_TIKTOKEN_PYTHON:-python3}
if "$TIKTOKEN_PY" -c 'import tiktoken, regex' 2>/dev/null; then
    if "$TIKTOKEN_PY" dev/tokenizer_reference.py --check test/fixtures/bpe_cases.txt; then
        echo "PASS bpe_fixture_regenerate"; passed=$((passed + 1))
    else
        echo "FAIL bpe_fixture_regenerate"; failed=$((failed + 1))
    fi
else
    echo "SKIP bpe_fixture_regenerate: $TIKTOKEN_PY has no tiktoken (pip install tiktoken==0.14.0; .ci/run makes a venv)"; skipped=$((skipped + 1))
fi

echo "=== dev/plot.py renders a PNG from a committed log (two runs overlaid)"
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

[ "$skipped" -gt 0 ] && echo "($skipped skipped: see SKIP lines above)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
