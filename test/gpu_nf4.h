// test/gpu_nf4.h — GPU-vs-CPU cases of the NF4 dequantization (ops/nf4.cuh; see test/test_gpu.cu for the
// helpers, test/gpu_misc.h for gm_bitwise, GM_UP, GM_DOWN).
//
// What the case expects: op_nf4_dequant's kernel bitwise equal to its CPU loop (the same FP32
// operations, absmax = rn(rn(dyn[q] * nested) + offset) and rn(NF4[c] * absmax), through _rn intrinsics
// on the device, no FMA contraction on either), on odd sizes (a partial last block, a partial last
// code word of the kernel's 8 outputs, a second nested block of one absmax), a part that starts 16
// bytes into a buffer of several parts, and with another nested code book (the _map variant). The
// FP32 build is the sharp one: a contracted absmax (an FMA) changes 1 ulp of FP32 values in ~1 block of
// 16, which BF16's rounding mostly hides (checked: test_emu_fp32 then reports ~3% of values differ).

#include "../ops/nf4.cuh" // defines: nf4_part, nf4_quantize, op_nf4_dequant(_map), NF4_DYN

TEST(gpu_nf4_dequant) {
    const int64_t sizes[] = {1, 7, 100, 64 * 256 + 64 + 3, GPU_BIG(64 * 4096 + 13, 64 * 300 + 7)};
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        int64_t n = sizes[si];
        Nf4Part P = nf4_part(n);
        float* w = (float*)malloc(sizeof(float) * n);
        for (int64_t i = 0; i < n; i++) w[i] = 0.02f * (float)rng_normal(rng_key(4242, si, 0), (uint64_t)i);
        if (n > 200) memset(w + 64, 0, 64 * sizeof(float)); // a block of zeros
        // two parts in one buffer: a 16-byte one first, as a layer's parts sit one after the other
        int64_t lead = nf4_part(1).bytes;
        unsigned char* st = (unsigned char*)calloc((size_t)(lead + P.bytes), 1);
        nf4_quantize(w, 1, st);
        nf4_quantize(w, n, st + lead);
        floatX *out_c = (floatX*)malloc(sizeof(floatX) * n), *out_g = (floatX*)malloc(sizeof(floatX) * n);
        ON_CPU(op_nf4_dequant(out_c, st + lead, n));
        unsigned char* dst = (unsigned char*)GM_UP(st, lead + P.bytes);
        floatX* dout = (floatX*)gpu_nans(sizeof(floatX) * n);
        ON_GPU(op_nf4_dequant(dout, dst + lead, n));
        GM_DOWN(out_g, dout, n);
        char what[96];
        snprintf(what, sizeof(what), "nf4 dequant n=%lld", (long long)n);
        gm_bitwise(what, out_g, out_c, n, sizeof(floatX));
        // another nested code book (a checkpoint's nested_quant_map): every entry 1 ulp up
        float dyn[256];
        for (int k = 0; k < 256; k++) dyn[k] = nextafterf(NF4_DYN[k], 2.0f);
        ON_CPU(op_nf4_dequant_map(out_c, st + lead, n, dyn));
        ON_GPU(op_nf4_dequant_map(dout, dst + lead, n, dyn));
        GM_DOWN(out_g, dout, n);
        snprintf(what, sizeof(what), "nf4 dequant (another map) n=%lld", (long long)n);
        gm_bitwise(what, out_g, out_c, n, sizeof(floatX));
        free(w); free(st); free(out_c); free(out_g);
        cudaCheck(cudaFree(dst)); cudaCheck(cudaFree(dout));
    }
}
