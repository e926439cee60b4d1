// test/test_nf4.h — ops/nf4.cuh: bitsandbytes' NF4 with double quantization. The layout, the round
// trip within NF4's error bound, determinism over thread counts, zeroed padding, partial blocks and
// partial nested blocks, blocks of zeros, the tie rule; then bit for bit against the numpy port of
// bitsandbytes' torch code (dev/nf4_reference.py) and against libbitsandbytes_cpu.so itself
// (dev/nf4_bnb_check.py, ctypes; SKIP without the wheel: $ZT_BNB_LIB, .ci/run downloads it).
// defines: tests nf4_*
#ifndef ZT_TEST_NF4_H
#define ZT_TEST_NF4_H

#include <omp.h>
#include <dirent.h>
#include <limits.h>
#include "../ops/nf4.cuh" // defines: nf4_part, nf4_quantize, op_nf4_dequant, nf4_dequant_host, NF4_CODE, NF4_DYN
#include "test.h"         // defines: TEST, CHECK, test_tmpdir

// Weights ~ N(0, sigma) with a few zero blocks, outliers and a partial tail: what a projection looks like.
static float* nf4t_weights(int64_t n, uint64_t seed, float sigma) {
    float* w = (float*)malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) w[i] = sigma * (float)rng_normal(rng_key(seed, 0x4E4634, 0), (uint64_t)i);
    if (n > 3 * 64) memset(w + 2 * 64, 0, 64 * sizeof(float));         // a full block of zeros
    if (n > 1000) w[777] = 40.0f * sigma, w[901] = -55.0f * sigma;     // outliers: their blocks' absmax
    return w;
}

// Every byte outside the sections is zero (and the odd tail's pad nibble is 7, bnb's bucket of 0.0).
static int nf4t_padding_ok(const unsigned char* st, int64_t n) {
    Nf4Part P = nf4_part(n);
    int bad = 0;
    for (int64_t i = 4; i < P.o_nested; i++) bad += st[i] != 0;
    for (int64_t i = P.o_nested + 4 * P.nn; i < P.o_qabs; i++) bad += st[i] != 0;
    for (int64_t i = P.o_qabs + P.nb; i < P.o_codes; i++) bad += st[i] != 0;
    for (int64_t i = P.o_codes + (n + 1) / 2; i < P.bytes; i++) bad += st[i] != 0;
    if (n % 2) bad += (st[P.o_codes + n / 2] & 15) != 7;
    return bad == 0;
}

TEST(nf4_layout) {
    Nf4Part P = nf4_part(100);
    CHECK(P.nb == 2 && P.nn == 1 && P.o_offset == 0 && P.o_nested == 16 && P.o_qabs == 32 && P.o_codes == 48);
    CHECK(P.bytes == 48 + 64);
    P = nf4_part(64 * 256 + 64);   // 257 blocks: a second, partial nested block of one absmax
    CHECK(P.nb == 257 && P.nn == 2 && P.o_qabs == 32 && P.o_codes == 32 + 272 && P.bytes == 32 + 272 + 8224);
    P = nf4_part(1);
    CHECK(P.nb == 1 && P.nn == 1 && P.bytes == 64);
    for (int64_t n = 0; n < 5000; n += 37) {
        P = nf4_part(n);
        CHECK(P.bytes % 16 == 0 && P.o_qabs % 16 == 0 && P.o_codes % 16 == 0 && P.bytes >= P.o_codes + (n + 1) / 2);
    }
}

// dequant(quantize(w)) within the bound: |w - NF4[c] * absmax'| <= (half NF4's widest gap) * absmax
// + |absmax' - absmax|, and the absmax' within half the dynamic map's widest gap of the nested block's
// range (plus the 2^-16 grid). Same bits at 1 and 2 threads; the op = rn(the host FP32 values).
TEST(nf4_roundtrip) {
    const int64_t sizes[] = {100, 64 * 256 + 64, 64 * 300 + 7, 64, 2};
    float half_gap = 0.0f, dyn_half_gap = 0.0f;
    for (int k = 0; k < 15; k++) half_gap = fmaxf(half_gap, (NF4_CODE[k + 1] - NF4_CODE[k]) / 2);
    for (int k = 0; k < 255; k++) dyn_half_gap = fmaxf(dyn_half_gap, (NF4_DYN[k + 1] - NF4_DYN[k]) / 2);
    for (int s = 0; s < (int)(sizeof(sizes) / sizeof(sizes[0])); s++) {
        int64_t n = sizes[s];
        Nf4Part P = nf4_part(n);
        float* w = nf4t_weights(n, 1000 + s, 0.02f);
        unsigned char* st = (unsigned char*)malloc((size_t)P.bytes);
        unsigned char* st1 = (unsigned char*)malloc((size_t)P.bytes);
        memset(st, 0xAB, (size_t)P.bytes);
        int threads = omp_get_max_threads();
        omp_set_num_threads(1);
        nf4_quantize(w, n, st1);
        omp_set_num_threads(threads > 1 ? threads : 2);
        nf4_quantize(w, n, st);
        omp_set_num_threads(threads);
        CHECKF(memcmp(st, st1, (size_t)P.bytes) == 0, "n=%lld: the bits depend on the thread count", (long long)n);
        CHECKF(nf4t_padding_ok(st, n), "n=%lld: padding not zero", (long long)n);
        float* deq = (float*)malloc((size_t)n * sizeof(float));
        floatX* outx = (floatX*)malloc((size_t)n * sizeof(floatX));
        nf4_dequant_host(deq, st, n);
        op_nf4_dequant(outx, st, n);
        int bad = 0, bad_op = 0, bad_abs = 0;
        double se = 0, sw = 0;
        float offset;
        memcpy(&offset, st, 4);
        const float* nested = (const float*)(st + P.o_nested);
        for (int64_t b = 0; b < P.nb; b++) {
            int64_t i0 = b * 64, len = n - i0 < 64 ? n - i0 : 64;
            float a = 0;
            for (int64_t i = 0; i < len; i++) a = fmaxf(a, fabsf(w[i0 + i]));
            float am = nf4_block_absmax(st, &P, b);
            float am_err = fabsf(am - a);
            bad_abs += !(am_err <= dyn_half_gap * nested[b / 256] * 1.001f + nested[b / 256] * (2.0f / 65535) + 1e-7f * fabsf(offset));
            for (int64_t i = i0; i < i0 + len; i++) {
                float e = fabsf(deq[i] - w[i]);
                bad += !(e <= half_gap * a * 1.0001f + am_err + 1e-9f);
                floatX r = rn(deq[i]);
                bad_op += memcmp(&outx[i], &r, sizeof(floatX)) != 0;
                se += (double)e * e, sw += (double)w[i] * w[i];
            }
        }
        CHECKF(bad == 0, "n=%lld: %d values outside NF4's bound", (long long)n, bad);
        CHECKF(bad_abs == 0, "n=%lld: %d absmax outside the 8-bit bound", (long long)n, bad_abs);
        CHECKF(bad_op == 0, "n=%lld: %d op values != rn(host)", (long long)n, bad_op);
        if (n > 1000) CHECKF(sqrt(se / sw) < 0.12, "n=%lld: relative RMS error %.4f (NF4 on normal data: ~0.09)", (long long)n, sqrt(se / sw));
        printf("    n=%lld: %lld bytes (%.3f bits/weight), relative RMS error %.4f\n", (long long)n, (long long)P.bytes,
               8.0 * P.bytes / n, sqrt(se / (sw > 0 ? sw : 1)));
        free(w), free(st), free(st1), free(deq), free(outx);
    }
}

// Zeros: a full block of zeros keeps absmax 0 and codes 7, a partial one stores 1e-38f (torch's
// clamp); an all-zero tensor has offset 0, nested absmax 0, nested codes 0; no NaN anywhere.
TEST(nf4_zero_blocks) {
    int64_t n = 64 * 3 + 10;
    float* w = nf4t_weights(n, 7, 0.5f);
    memset(w + 64, 0, 64 * sizeof(float));
    memset(w + 192, 0, 10 * sizeof(float));
    Nf4Part P = nf4_part(n);
    unsigned char* st = (unsigned char*)malloc((size_t)P.bytes);
    nf4_quantize(w, n, st);
    const unsigned char* codes = st + P.o_codes;
    int bad = 0;
    for (int64_t i = 64; i < 128; i++) bad += ((codes[i / 2] >> (i % 2 ? 0 : 4)) & 15) != 7;
    for (int64_t i = 192; i < n; i++) bad += ((codes[i / 2] >> (i % 2 ? 0 : 4)) & 15) != 7;
    CHECKF(bad == 0, "%d zero weights not code 7", bad);
    float* deq = (float*)malloc((size_t)n * sizeof(float));
    nf4_dequant_host(deq, st, n);
    int nan = 0, nonzero = 0;
    for (int64_t i = 0; i < n; i++) nan += isnan(deq[i]) || isinf(deq[i]);
    for (int64_t i = 64; i < 128; i++) nonzero += deq[i] != 0.0f;
    for (int64_t i = 192; i < n; i++) nonzero += deq[i] != 0.0f;
    CHECK(nan == 0 && nonzero == 0);
    free(st), free(deq);
    // all zeros, a partial block alone
    for (int64_t m = 1; m <= 130; m += 129) {
        memset(w, 0, (size_t)m * sizeof(float));
        P = nf4_part(m);
        st = (unsigned char*)malloc((size_t)P.bytes);
        nf4_quantize(w, m, st);
        float offset, nested;
        memcpy(&offset, st, 4);
        memcpy(&nested, st + P.o_nested, 4);
        CHECKF(offset == (m % 64 ? (m > 64 ? (float)((0.0 + 0.0 + (double)1e-38f) / 3) : 1e-38f) : 0.0f), "m=%lld offset %a", (long long)m, offset);
        CHECK(nf4t_padding_ok(st, m));
        floatX out[130];
        op_nf4_dequant(out, st, m);
        nan = 0;
        for (int64_t i = 0; i < m; i++) nan += ld(out[i]) != 0.0f;
        CHECKF(nan == 0, "m=%lld: %d nonzero dequantized zeros", (long long)m, nan);
        free(st);
    }
    free(w);
}

// The 4-bit rule at its edges: with absmax 1 the scaled value is the weight itself. A value exactly
// on an FP32 midpoint takes the lower code; one ulp above, the upper; the extremes clamp.
TEST(nf4_tie_rule) {
    float w[64];
    for (int k = 0; k < 15; k++) {
        float mid = (NF4_CODE[k] + NF4_CODE[k + 1]) / 2;
        CHECKF(NF4_MID[k] == mid, "NF4_MID[%d] %a != (NF4_CODE[%d] + NF4_CODE[%d]) / 2 = %a", k, NF4_MID[k], k, k + 1, mid);
        for (int i = 0; i < 64; i++) w[i] = 0.0f;
        w[0] = 1.0f;
        w[1] = mid;
        w[2] = nextafterf(mid, 2.0f);
        w[3] = nextafterf(mid, -2.0f);
        Nf4Part P = nf4_part(64);
        unsigned char st[256];
        nf4_quantize(w, 64, st);
        const unsigned char* c = st + P.o_codes;
        CHECKF((c[0] & 15) == k, "midpoint %d (%a) -> code %d, bnb's bucketize gives the lower, %d", k, mid, c[0] & 15, k);
        CHECKF((c[1] >> 4) == k + 1 && (c[1] & 15) == k, "one ulp either side of midpoint %d", k);
        CHECK((c[0] >> 4) == 15);
    }
}

// ----------------------------------------------------------------------------
// Against bitsandbytes: the numpy port of its rules (dev/nf4_reference.py) and its compiled library
// (in the BF16 build only: quantization does not depend on floatX, and its .bf16 output is the one
// the FP32 build lacks; the Python start is the cost)
#ifndef ENABLE_FP32

// Quantizes every DIR/case_*.f32 (float32 weights) into DIR/case_*.nf4 (the part's storage) and writes
// the FP32 dequantization as DIR/case_*.deq, the FP32 block absmax as .abs and, in the BF16 build,
// op_nf4_dequant's BF16 as .bf16.
// Returns the number of cases.
static int nf4t_quantize_dir(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    int cases = 0;
    struct dirent* e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "case_", 5) != 0 || len < 5 || strcmp(e->d_name + len - 4, ".f32") != 0) continue;
        char path[PATH_MAX], out[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE* f = fopen(path, "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        int64_t n = ftell(f) / 4;
        fseek(f, 0, SEEK_SET);
        float* w = (float*)malloc((size_t)(n > 0 ? n : 1) * 4);
        size_t got = fread(w, 4, (size_t)n, f);
        fclose(f);
        CHECK((int64_t)got == n);
        Nf4Part P = nf4_part(n);
        unsigned char* st = (unsigned char*)malloc((size_t)P.bytes);
        nf4_quantize(w, n, st);
        float* deq = (float*)malloc((size_t)(n > 0 ? n : 1) * 4);
        floatX* dx = (floatX*)malloc((size_t)(n > 0 ? n : 1) * sizeof(floatX));
        float* am = (float*)malloc((size_t)(P.nb > 0 ? P.nb : 1) * 4);
        nf4_dequant_host(deq, st, n);
        op_nf4_dequant(dx, st, n);
        for (int64_t b = 0; b < P.nb; b++) am[b] = nf4_block_absmax(st, &P, b);
        struct { const char* ext; const void* p; size_t bytes; } outs[] = {
            {".nf4", st, (size_t)P.bytes}, {".deq", deq, (size_t)n * 4}, {".abs", am, (size_t)P.nb * 4},
            {sizeof(floatX) == 2 ? ".bf16" : NULL, dx, (size_t)n * sizeof(floatX)}};
        for (int k = 0; k < 4; k++) {
            if (!outs[k].ext) continue;
            snprintf(out, sizeof(out), "%.*s%s", (int)(strlen(path) - 4), path, outs[k].ext);
            FILE* g = fopen(out, "wb");
            CHECK(g && fwrite(outs[k].p, 1, outs[k].bytes, g) == outs[k].bytes);
            if (g) fclose(g);
        }
        free(w), free(st), free(deq), free(dx), free(am);
        cases++;
    }
    closedir(d);
    return cases;
}

// Our storage, bit for bit, = the numpy port of bitsandbytes' torch and C++ rules, on random tensors,
// partial blocks and nested blocks, zeros, FP32 midpoints (ties) and the values that tell the real
// rules from their alternatives (argmin with first-index ties, bucketize right=True, w / a for a full
// block, nearest 8-bit code instead of the 65536-point grid: dev/nf4_reference.py --self-test shows
// each alternative gives other codes on them). Also the header's tables = bitsandbytes' maps.
TEST(nf4_vs_reference) {
    char cmd[2 * PATH_MAX], out[16384], dir[PATH_MAX];
    snprintf(cmd, sizeof(cmd), "%s -c 'import numpy'", tm_torch_python());
    if (test_run_cmd(cmd, NULL, 0) != 0) TEST_SKIP("needs a python with numpy ($ZT_TORCH_PYTHON or /usr/bin/python3)");
    snprintf(dir, sizeof(dir), "%s/nf4_ref", test_tmpdir());
    snprintf(cmd, sizeof(cmd), "rm -rf %s && %s dev/nf4_reference.py --self-test && %s dev/nf4_reference.py --tables ops/nf4.cuh"
             " && %s dev/nf4_reference.py --make-cases %s", dir, tm_torch_python(), tm_torch_python(), tm_torch_python(), dir);
    int rc = test_run_cmd(cmd, out, sizeof(out));
    printf("%s", out);
    CHECKF(rc == 0, "nf4_reference.py --self-test / --tables / --make-cases failed");
    if (rc != 0) return;
    int cases = nf4t_quantize_dir(dir);
    CHECK(cases >= 10);
    snprintf(cmd, sizeof(cmd), "%s dev/nf4_reference.py --check %s", tm_torch_python(), dir);
    rc = test_run_cmd(cmd, out, sizeof(out));
    printf("%s", out);
    CHECKF(rc == 0, "our NF4 storage differs from dev/nf4_reference.py's");
}

// Our 8-bit rule alone (nf4_quantize_nested with offset 0 = quantize_blockwise) on DIR/sweep8.f32:
// codes to sweep8.q8, the nested absmax to sweep8.a8.
static int nf4t_sweep8(const char* dir) {
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/sweep8.f32", dir);
    FILE* f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    int64_t n = ftell(f) / 4;
    fseek(f, 0, SEEK_SET);
    float* x = (float*)malloc((size_t)n * 4);
    int ok = (int64_t)fread(x, 4, (size_t)n, f) == n;
    fclose(f);
    unsigned char* q = (unsigned char*)malloc((size_t)n);
    float* nested = (float*)malloc((size_t)ceil_div(n, 256) * 4);
    nf4_quantize_nested(x, n, 0.0f, q, nested);
    snprintf(path, sizeof(path), "%s/sweep8.q8", dir);
    FILE* g = fopen(path, "wb");
    ok = ok && g && fwrite(q, 1, (size_t)n, g) == (size_t)n;
    if (g) fclose(g);
    snprintf(path, sizeof(path), "%s/sweep8.a8", dir);
    g = fopen(path, "wb");
    ok = ok && g && fwrite(nested, 4, (size_t)ceil_div(n, 256), g) == (size_t)ceil_div(n, 256);
    if (g) fclose(g);
    free(x), free(q), free(nested);
    return ok;
}

// Against libbitsandbytes_cpu.so itself ($ZT_BNB_LIB; dev/nf4_bnb_check.py through ctypes): its 8-bit
// dequant of our absmax codes + our offset = our block absmax, its NF4 dequant of our codes = our FP32
// (and BF16) values, its blockwise quantization of (absmax - offset) = our absmax codes and nested
// absmax, bit for bit, on the cases of nf4_vs_reference; and its 8-bit quantizer = ours on every float
// within 64 ulps of each code change of its table. SKIP (never PASS) without the library.
TEST(nf4_vs_bitsandbytes) {
    const char* lib = getenv("ZT_BNB_LIB");
    if (!lib || !*lib) TEST_SKIP("needs $ZT_BNB_LIB: libbitsandbytes_cpu.so of the bitsandbytes 0.50.2 wheel (.ci/run downloads it)");
    if (access(lib, R_OK) != 0) TEST_SKIP("$ZT_BNB_LIB is not a readable file");
    char cmd[3 * PATH_MAX], out[16384], dir[PATH_MAX];
    snprintf(cmd, sizeof(cmd), "%s -c 'import numpy, ctypes; ctypes.CDLL(\"%s\")'", tm_torch_python(), lib);
    if (test_run_cmd(cmd, out, sizeof(out)) != 0) { printf("%s", out); TEST_SKIP("$ZT_BNB_LIB does not load (or no python with numpy)"); }
    snprintf(dir, sizeof(dir), "%s/nf4_bnb", test_tmpdir());
    snprintf(cmd, sizeof(cmd), "rm -rf %s && %s dev/nf4_reference.py --make-cases %s && %s dev/nf4_bnb_check.py %s --make-sweep %s",
             dir, tm_torch_python(), dir, tm_torch_python(), lib, dir);
    int rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 0, "making the cases failed: %s", out);
    if (rc != 0) return;
    CHECK(nf4t_quantize_dir(dir) >= 10);
    CHECK(nf4t_sweep8(dir));
    snprintf(cmd, sizeof(cmd), "%s dev/nf4_bnb_check.py %s --check %s", tm_torch_python(), lib, dir);
    rc = test_run_cmd(cmd, out, sizeof(out));
    printf("%s", out);
    CHECKF(rc == 0, "libbitsandbytes_cpu.so disagrees with ops/nf4.cuh");
}
#endif // !ENABLE_FP32

#endif // ZT_TEST_NF4_H
