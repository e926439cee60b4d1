// ops/nf4.cuh — bitsandbytes' NF4 with double quantization, as QLoRA uses it (bnb_4bit_quant_type
// nf4, bnb_4bit_use_double_quant, blocksize 64; the absmax quantized 8-bit blockwise, 256 per block,
// with the dynamic (signed) map, after subtracting their mean: the "offset"). The frozen base of a
// QLoRA run is stored this way; each projection dequantizes its weight before the matmul.
//
//   nf4_part(n):                   the layout of one part (one tensor, or the range a rank quantizes)
//   nf4_quantize(w, n, st):        st = NF4(w)                            w (n) f32 -> st (nf4_part(n).bytes)   [host, =]
//   op_nf4_dequant(out, st, n):    out[i] = rn(NF4[c_i] * absmax_b)       st -> out (n) floatX                   [=]
//   nf4_dequant_host(out, st, n):  the same in FP32, before rn            st -> out (n) f32                      [host, =]
//   with absmax_b = dyn[qabs_b] * nested[b / 256] + offset, b = i / 64, in FP32, each operation rounded
//   on its own (no FMA; kernels: __fmul_rn/__fadd_rn), as bitsandbytes dequantizes: dequantize_blockwise
//   of the absmax (code[q] * absmax), `absmax += offset`, then the 4-bit dequant (code[c] * absmax).
//
// Storage of one part (every section 16-byte aligned, padding zero):
//   [offset f32][pad 16][nested absmax f32 x nn][pad 16][absmax codes u8 x nb][pad 16][codes u8 x ceil(n/2)][pad 16]
// nb = ceil(n / 64) blocks of 64 weights (the last may be partial), nn = ceil(nb / 256) nested blocks.
// Codes: element 2i in the high nibble, 2i+1 in the low nibble of byte i (bitsandbytes' packing); for
// odd n the last byte's low nibble is 7 (bitsandbytes pads the scaled values with one 0.0 before
// bucketing; code 7 is 0.0), so the bytes equal bitsandbytes' bytes.
//
// The rules, ported from bitsandbytes 0.50.2 (what a CPU tensor runs; dev/nf4_reference.py is the
// same in numpy, test/test_nf4.h checks both and libbitsandbytes_cpu.so itself):
//  1. 4-bit (backends/default/ops.py quantize_4bit, torch code): a = max_i |w_i| over the block. A full
//     block scales by the reciprocal, v_i = w_i * (1.0f / max(a, 1e-38f)), and stores a; the partial
//     last block divides, v_i = w_i / a', and stores a' = max(a, 1e-38f) (torch's `clamp(min=1e-38)`
//     is applied to the stored value there only; 1e-38 rounds to the float 0x1.b38fb8p-127). v is
//     clamped to [-1, 1]; then c_i = torch.bucketize(v_i, mid) with mid[k] = (NF4[k] + NF4[k+1]) / 2
//     in FP32 (right=False): c = the number of midpoints strictly below v. A v exactly on a midpoint
//     (a tie) takes the LOWER code. This is threshold comparison against FP32-rounded midpoints, not
//     argmin |v - NF4[k]| with first-index ties: the two differ where the rounded midpoint is above
//     the exact one (v = NF4_MID[k] for k = 0, 1, 3, 4, 12, 14: argmin gives k + 1; tests have them). A block of zeros: a = 0, v = 0, every code 7 (0.0), absmax 0 (full block)
//     or 1e-38f (partial block); no NaN.
//  2. offset = the mean of the part's nb absmax: summed in double in index order, divided by nb in
//     double, rounded to float (bitsandbytes uses torch's `absmax.mean()`, whose FP32 cascade sum may
//     differ in the last bit; the nested codes below are then what bitsandbytes computes for OUR
//     offset). d_b = absmax_b - offset in FP32.
//  3. 8-bit (csrc/cpu_ops.cpp quantize_cpu_impl, as compiled in libbitsandbytes_cpu.so; dispatched for
//     the FP32 absmax by quantize_blockwise(absmax - offset, blocksize=256)): per nested block of 256,
//     A = max(0, max |d_b|) stored as the nested absmax; A == 0: every code 0 (dyn[0] * 0 = -0.0, so
//     the block's absmax dequantize to exactly the offset). Otherwise inv = 1.0f / A, v = clamp(d_b *
//     inv, -1, 1), k = (uint16)(int)fmaf((v + 1.0f) * 0.5f, 65535.0f, 0.5f) (the .so contracts that
//     line into one FMA: vfmadd213ss), code = LUT[k], LUT[k] = the number of dynamic-map midpoints
//     0.5f * (dyn[j] + dyn[j+1]) strictly below -1.0f + (2.0f * k) / 65535.0f. So the 8-bit rule is
//     "nearest code of v rounded to a 65536-point grid", ties to the lower code, not nearest code of v.
//
// Determinism: nf4_quantize's bits do not depend on the thread count (blocks are independent; the
// mean is one serial sum). CPU dequant: blocks in parallel, per block the absmax and its 16 products
// once, then look-ups; no division. CUDA: one thread per 4 code bytes (8 outputs, one 32-bit load,
// all in one 64-block), the tables in shared memory; st 4-byte aligned. NaN or Inf weights are not
// supported (bitsandbytes' result for them is not ported). The dynamic map bitsandbytes computes
// depends on torch's SIMD width (see NF4_DYN): a checkpoint's own map goes to the _map variants.
//
// defines: Nf4Part, nf4_part, NF4_CODE, NF4_DYN, NF4_MID, nf4_quantize (and its steps nf4_quantize_4bit,
//          nf4_offset_of, nf4_quantize_nested), nf4_block_absmax(_map), nf4_dequant_host(_map),
//          op_nf4_dequant(_map), nf4_dyn_lut
//
// May call: device.cuh.
#ifndef ZT_OPS_NF4_CUH
#define ZT_OPS_NF4_CUH

#include <math.h>
#include <string.h>
#include "../device.cuh" // defines: floatX, rn, ceil_div, g_stream, g_device

#define NF4_BLOCK 64    // weights per absmax (bnb blocksize)
#define NF4_NESTED 256  // absmax per nested absmax (quantize_blockwise(..., blocksize=256))

typedef struct {
    int64_t n;        // weights in the part
    int64_t nb;       // 64-weight blocks: ceil(n / 64) (the last may be partial)
    int64_t nn;       // nested blocks of 256 absmax: ceil(nb / 256)
    int64_t o_offset, o_nested, o_qabs, o_codes; // byte offsets in the part's storage
    int64_t bytes;    // the part's storage bytes, a multiple of 16
} Nf4Part;

static inline int64_t nf4_align16(int64_t x) { return (x + 15) & ~(int64_t)15; }

static Nf4Part nf4_part(int64_t n) {
    Nf4Part P;
    P.n = n;
    P.nb = ceil_div(n, NF4_BLOCK);
    P.nn = ceil_div(P.nb, NF4_NESTED);
    P.o_offset = 0;
    P.o_nested = 16;
    P.o_qabs = nf4_align16(P.o_nested + 4 * P.nn);
    P.o_codes = nf4_align16(P.o_qabs + P.nb);
    P.bytes = nf4_align16(P.o_codes + (n + 1) / 2);
    return P;
}

// NF4's 16 values: bitsandbytes 0.50.2 functional.get_4bit_type("nf4") (and backends/utils.py
// _NF4_QUANT_TABLE), the decimals there rounded to float (they are printed float32 values:
// create_normal_map(offset=0.9677083, use_extra_value=True)), written exactly.
static const float NF4_CODE[16] = {
    -0x1p+0f, -0x1.647362p-1f, -0x1.0cd66p-1f, -0x1.94654p-2f, -0x1.23449ap-2f, -0x1.7a6a7ep-3f, -0x1.74f0e2p-4f, 0x0p+0f,
    0x1.45f5fep-4f, 0x1.4995c6p-3f, 0x1.f809bap-3f, 0x1.5a0674p-2f, 0x1.c3497p-2f, 0x1.200f56p-1f, 0x1.722766p-1f, 0x1p+0f,
};

// The 256-entry dynamic map of the nested absmax: bitsandbytes 0.50.2 functional.create_dynamic_map(
// signed=True, max_exponent_bits=7, total_bits=8), its source run under Debian's torch 1.13 (CPU
// capability AVX2), written exactly. dyn[127] = 0, dyn[255] = 1, dyn[0] = -0.99296875 (there is no -1).
// NOTE: the map is computed at run time from torch.linspace, whose CPU kernel rounds differently with
// the SIMD width it dispatches to (dev/nf4_reference.py emulates it: equal to torch here with AVX2;
// with AVX-512's 16 lanes 28 entries move by 1 ulp, a prediction not run). A checkpoint saves the map
// it used as `nested_quant_map`: read it and pass it to the _map variants (or compare it with this one).
static const float NF4_DYN[256] = {
    -0x1.fc6666p-1f, -0x1.f53332p-1f, -0x1.eep-1f, -0x1.e6ccccp-1f, -0x1.df9998p-1f, -0x1.d86666p-1f, -0x1.d13334p-1f, -0x1.cap-1f,
    -0x1.c2ccccp-1f, -0x1.bb9998p-1f, -0x1.b46666p-1f, -0x1.ad3332p-1f, -0x1.a6p-1f, -0x1.9eccccp-1f, -0x1.979998p-1f, -0x1.906666p-1f,
    -0x1.893334p-1f, -0x1.82p-1f, -0x1.7acccep-1f, -0x1.73999ap-1f, -0x1.6c6668p-1f, -0x1.653334p-1f, -0x1.5ep-1f, -0x1.56cccep-1f,
    -0x1.4f999ap-1f, -0x1.486666p-1f, -0x1.413334p-1f, -0x1.3ap-1f, -0x1.32ccccp-1f, -0x1.2b999ap-1f, -0x1.246668p-1f, -0x1.1d3334p-1f,
    -0x1.16p-1f, -0x1.0eccccp-1f, -0x1.07999ap-1f, -0x1.006666p-1f, -0x1.f26668p-2f, -0x1.e4p-2f, -0x1.d59998p-2f, -0x1.c73334p-2f,
    -0x1.b8ccccp-2f, -0x1.aa6664p-2f, -0x1.9cp-2f, -0x1.8d9998p-2f, -0x1.7f3334p-2f, -0x1.70ccccp-2f, -0x1.626664p-2f, -0x1.54p-2f,
    -0x1.459998p-2f, -0x1.373334p-2f, -0x1.28ccccp-2f, -0x1.1a6668p-2f, -0x1.0cp-2f, -0x1.fb3334p-3f, -0x1.de6668p-3f, -0x1.c1999ap-3f,
    -0x1.a4ccccp-3f, -0x1.88p-3f, -0x1.6b3332p-3f, -0x1.4e6666p-3f, -0x1.31999ap-3f, -0x1.14ccccp-3f, -0x1.fp-4f, -0x1.b66668p-4f,
    -0x1.93d70ap-4f, -0x1.8851eap-4f, -0x1.7ccccep-4f, -0x1.7147aep-4f, -0x1.65c29p-4f, -0x1.5a3d7p-4f, -0x1.4eb85p-4f, -0x1.433334p-4f,
    -0x1.37ae14p-4f, -0x1.2c28f6p-4f, -0x1.20a3d6p-4f, -0x1.151ebap-4f, -0x1.09999ap-4f, -0x1.fc28f4p-5f, -0x1.e51ebap-5f, -0x1.ce147ap-5f,
    -0x1.b70a3ep-5f, -0x1.ap-5f, -0x1.88f5c2p-5f, -0x1.71eb86p-5f, -0x1.5ae146p-5f, -0x1.43d70ap-5f, -0x1.2ccccep-5f, -0x1.15c28ep-5f,
    -0x1.fd70a4p-6f, -0x1.cf5c26p-6f, -0x1.a147aep-6f, -0x1.733334p-6f, -0x1.451eb8p-6f, -0x1.170a3ep-6f, -0x1.d1eb86p-7f, -0x1.75c29p-7f,
    -0x1.3e76c8p-7f, -0x1.2c083p-7f, -0x1.19999ap-7f, -0x1.072b02p-7f, -0x1.e978d4p-8f, -0x1.c49ba6p-8f, -0x1.9fbe76p-8f, -0x1.7ae148p-8f,
    -0x1.56041ap-8f, -0x1.3126e8p-8f, -0x1.0c49bap-8f, -0x1.ced914p-9f, -0x1.851eb8p-9f, -0x1.3b645ap-9f, -0x1.e353f8p-10f, -0x1.4fdf3ap-10f,
    -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d5p-11f, -0x1.3dd982p-11f, -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f, -0x1.040bfep-17f, -0x1.b43528p-19f, -0x1.27476ep-21f, 0x0p+0f,
    0x1.27476ep-21f, 0x1.b43528p-19f, 0x1.040bfep-17f, 0x1.64840cp-16f, 0x1.6f0068p-15f, 0x1.15df66p-14f, 0x1.743e96p-14f, 0x1.47ae16p-13f,
    0x1.19ce0ap-12f, 0x1.8fc506p-12f, 0x1.02de02p-11f, 0x1.3dd982p-11f, 0x1.78d5p-11f, 0x1.b3d07cp-11f, 0x1.eecbfep-11f, 0x1.4fdf3ap-10f,
    0x1.e353f8p-10f, 0x1.3b645ap-9f, 0x1.851eb8p-9f, 0x1.ced914p-9f, 0x1.0c49bap-8f, 0x1.3126e8p-8f, 0x1.56041ap-8f, 0x1.7ae148p-8f,
    0x1.9fbe76p-8f, 0x1.c49ba6p-8f, 0x1.e978d4p-8f, 0x1.072b02p-7f, 0x1.19999ap-7f, 0x1.2c083p-7f, 0x1.3e76c8p-7f, 0x1.75c29p-7f,
    0x1.d1eb86p-7f, 0x1.170a3ep-6f, 0x1.451eb8p-6f, 0x1.733334p-6f, 0x1.a147aep-6f, 0x1.cf5c26p-6f, 0x1.fd70a4p-6f, 0x1.15c28ep-5f,
    0x1.2ccccep-5f, 0x1.43d70ap-5f, 0x1.5ae146p-5f, 0x1.71eb86p-5f, 0x1.88f5c2p-5f, 0x1.ap-5f, 0x1.b70a3ep-5f, 0x1.ce147ap-5f,
    0x1.e51ebap-5f, 0x1.fc28f4p-5f, 0x1.09999ap-4f, 0x1.151ebap-4f, 0x1.20a3d6p-4f, 0x1.2c28f6p-4f, 0x1.37ae14p-4f, 0x1.433334p-4f,
    0x1.4eb85p-4f, 0x1.5a3d7p-4f, 0x1.65c29p-4f, 0x1.7147aep-4f, 0x1.7ccccep-4f, 0x1.8851eap-4f, 0x1.93d70ap-4f, 0x1.b66668p-4f,
    0x1.fp-4f, 0x1.14ccccp-3f, 0x1.31999ap-3f, 0x1.4e6666p-3f, 0x1.6b3332p-3f, 0x1.88p-3f, 0x1.a4ccccp-3f, 0x1.c1999ap-3f,
    0x1.de6668p-3f, 0x1.fb3334p-3f, 0x1.0cp-2f, 0x1.1a6668p-2f, 0x1.28ccccp-2f, 0x1.373334p-2f, 0x1.459998p-2f, 0x1.54p-2f,
    0x1.626664p-2f, 0x1.70ccccp-2f, 0x1.7f3334p-2f, 0x1.8d9998p-2f, 0x1.9cp-2f, 0x1.aa6664p-2f, 0x1.b8ccccp-2f, 0x1.c73334p-2f,
    0x1.d59998p-2f, 0x1.e4p-2f, 0x1.f26668p-2f, 0x1.006666p-1f, 0x1.07999ap-1f, 0x1.0eccccp-1f, 0x1.16p-1f, 0x1.1d3334p-1f,
    0x1.246668p-1f, 0x1.2b999ap-1f, 0x1.32ccccp-1f, 0x1.3ap-1f, 0x1.413334p-1f, 0x1.486666p-1f, 0x1.4f999ap-1f, 0x1.56cccep-1f,
    0x1.5ep-1f, 0x1.653334p-1f, 0x1.6c6668p-1f, 0x1.73999ap-1f, 0x1.7acccep-1f, 0x1.82p-1f, 0x1.893334p-1f, 0x1.906666p-1f,
    0x1.979998p-1f, 0x1.9eccccp-1f, 0x1.a6p-1f, 0x1.ad3332p-1f, 0x1.b46666p-1f, 0x1.bb9998p-1f, 0x1.c2ccccp-1f, 0x1.cap-1f,
    0x1.d13334p-1f, 0x1.d86666p-1f, 0x1.df9998p-1f, 0x1.e6ccccp-1f, 0x1.eep-1f, 0x1.f53332p-1f, 0x1.fc6666p-1f, 0x1p+0f,
};

// ----------------------------------------------------------------------------
// Host: quantization

// The 8-bit quantizer's table (bnb build_quantize_lut): LUT[k] = dynamic-map code nearest the grid point
// -1 + 2k/65535, ties (a midpoint equal to the grid point) to the lower code. Built once (thread-safe:
// a C++ function-local static).
typedef struct { unsigned char code[65536]; } Nf4DynLut;
static Nf4DynLut nf4_build_dyn_lut(void) {
    Nf4DynLut L;
    float mid[255];
    for (int j = 0; j < 255; j++) mid[j] = 0.5f * (NF4_DYN[j] + NF4_DYN[j + 1]);
    int j = 0;
    for (int k = 0; k < 65536; k++) {
        float val = -1.0f + (2.0f * (float)k) / 65535.0f;
        while (j < 255 && mid[j] < val) j++;
        L.code[k] = (unsigned char)j;
    }
    return L;
}
static const Nf4DynLut* nf4_dyn_lut(void) {
    static const Nf4DynLut lut = nf4_build_dyn_lut();
    return &lut;
}

// One value's 8-bit code (rule 3): v already clamped, A > 0's reciprocal applied.
static inline unsigned char nf4_dyn_code(const Nf4DynLut* L, float v) {
    v = v < -1.0f ? -1.0f : (v > 1.0f ? 1.0f : v);
    int k = (int)fmaf((v + 1.0f) * 0.5f, 65535.0f, 0.5f);
    return L->code[(uint16_t)k];
}

// torch's bucketize bounds: NF4_MID[k] = (NF4_CODE[k] + NF4_CODE[k+1]) / 2 in FP32, written out (test
// nf4_tie_rule checks each against that expression).
static const float NF4_MID[15] = {
    -0x1.b239bp-1f, -0x1.38a4ep-1f, -0x1.d709p-2f, -0x1.5bd4ecp-2f, -0x1.e079d8p-3f, -0x1.1a7178p-3f, -0x1.74f0e2p-5f, 0x1.45f5fep-5f,
    0x1.ec90c4p-4f, 0x1.a0cfcp-3f, 0x1.2b05a8p-2f, 0x1.8ea7f2p-2f, 0x1.00da08p-1f, 0x1.491b5ep-1f, 0x1.b913b4p-1f,
};

// One value's 4-bit code (rule 1): the number of FP32 midpoints strictly below v (ties: lower code).
// (The clamp to [-1, 1] bnb applies first changes no code: it is left out.)
static inline unsigned char nf4_code_of(float v) {
    int c = 0;
    for (int k = 0; k < 15; k++) c += NF4_MID[k] < v;
    return (unsigned char)c;
}

// Rule 1: the 4-bit codes and the FP32 absmax of w (n), codes (ceil(n/2) bytes, packed), absmax
// (ceil(n/64)). The last block is partial when n % 64 (bnb: the tensor's tail), so a range of a larger
// tensor must start on a block and be whole blocks unless it ends the tensor.
static void nf4_quantize_4bit(const float* w, int64_t n, unsigned char* codes, float* absmax) {
    int64_t nb = ceil_div(n, NF4_BLOCK);
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nb; b++) {
        int64_t i0 = b * NF4_BLOCK, len = n - i0 < NF4_BLOCK ? n - i0 : NF4_BLOCK;
        float a = 0.0f;
        for (int64_t i = 0; i < len; i++) a = fmaxf(a, fabsf(w[i0 + i]));
        float aclamp = fmaxf(a, 1e-38f);
        unsigned char c[NF4_BLOCK];
        if (len == NF4_BLOCK) {                 // full block: times the reciprocal, store a
            float inv = 1.0f / aclamp;
            for (int64_t i = 0; i < len; i++) c[i] = nf4_code_of(w[i0 + i] * inv);
            absmax[b] = a;
        } else {                                // the partial last block: divide, store the clamped a
            for (int64_t i = 0; i < len; i++) c[i] = nf4_code_of(w[i0 + i] / aclamp);
            c[len] = 7;                          // bnb's pad value 0.0 (only read when len is odd)
            absmax[b] = aclamp;
        }
        for (int64_t i = 0; i < len; i += 2) codes[(i0 + i) / 2] = (unsigned char)(c[i] << 4 | c[i + 1]);
    }
}

// Rule 2: the mean of absmax (nb), one serial double sum in index order, rounded to float.
static float nf4_offset_of(const float* absmax, int64_t nb) {
    double sum = 0.0;
    for (int64_t b = 0; b < nb; b++) sum += absmax[b];
    return nb > 0 ? (float)(sum / (double)nb) : 0.0f;
}

// Rule 3: bnb's FP32 quantize_blockwise (blocksize 256, NF4_DYN) of absmax[b] - offset: qabs (nb
// codes), nested (ceil(nb / 256) FP32 absmax). With offset 0 it is quantize_blockwise of absmax itself.
static void nf4_quantize_nested(const float* absmax, int64_t nb, float offset, unsigned char* qabs, float* nested) {
    const Nf4DynLut* L = nf4_dyn_lut();
    int64_t nn = ceil_div(nb, NF4_NESTED);
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < nn; g++) {
        int64_t b0 = g * NF4_NESTED, len = nb - b0 < NF4_NESTED ? nb - b0 : NF4_NESTED;
        float A = 0.0f;
        for (int64_t k = 0; k < len; k++) A = fmaxf(A, fabsf(absmax[b0 + k] - offset));
        nested[g] = A;
        if (A == 0.0f) {                        // bnb: every code 0
            memset(qabs + b0, 0, (size_t)len);
            continue;
        }
        float inv = 1.0f / A;
        for (int64_t k = 0; k < len; k++) qabs[b0 + k] = nf4_dyn_code(L, (absmax[b0 + k] - offset) * inv);
    }
}

// st = NF4(w): writes nf4_part(n).bytes bytes (padding zeroed). w (n) FP32; a BF16/F16 checkpoint's
// values convert exactly (bitsandbytes quantizes A.float()).
static void nf4_quantize(const float* w, int64_t n, unsigned char* st) {
    Nf4Part P = nf4_part(n);
    memset(st, 0, (size_t)P.bytes);
    float* absmax = (float*)malloc((size_t)(P.nb > 0 ? P.nb : 1) * sizeof(float));
    if (!absmax) { fprintf(stderr, "nf4_quantize: out of memory (%lld blocks)\n", (long long)P.nb); exit(1); }
    nf4_quantize_4bit(w, n, st + P.o_codes, absmax);
    float offset = nf4_offset_of(absmax, P.nb);
    memcpy(st + P.o_offset, &offset, sizeof(float));
    nf4_quantize_nested(absmax, P.nb, offset, st + P.o_qabs, (float*)(st + P.o_nested));
    free(absmax);
}

// ----------------------------------------------------------------------------
// Dequantization: host reference, CPU op, CUDA kernel

// Block b's FP32 absmax: dequantize_blockwise (dyn[q] * nested), then `absmax += offset`. dyn: the
// nested code book (NULL: NF4_DYN; a checkpoint's nested_quant_map may differ, see the note above).
static inline float nf4_block_absmax_map(const unsigned char* st, const Nf4Part* P, int64_t b, const float* dyn) {
    float offset;
    memcpy(&offset, st + P->o_offset, sizeof(float));
    const float* nested = (const float*)(st + P->o_nested);
    float t = (dyn ? dyn : NF4_DYN)[st[P->o_qabs + b]] * nested[b / NF4_NESTED];
    return t + offset;
}
static inline float nf4_block_absmax(const unsigned char* st, const Nf4Part* P, int64_t b) { return nf4_block_absmax_map(st, P, b, NULL); }

// out[i] = NF4[c_i] * absmax_b in FP32 (what bitsandbytes' FP32 dequant gives). out (n). Per block the 16
// possible products are formed once (the same roundings), then each byte is two look-ups.
static void nf4_dequant_host_map(float* out, const unsigned char* st, int64_t n, const float* dyn) {
    Nf4Part P = nf4_part(n);
    const unsigned char* codes = st + P.o_codes;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < P.nb; b++) {
        float am = nf4_block_absmax_map(st, &P, b, dyn), v[16];
        for (int k = 0; k < 16; k++) v[k] = NF4_CODE[k] * am;
        int64_t i0 = b * NF4_BLOCK, len = n - i0 < NF4_BLOCK ? n - i0 : NF4_BLOCK;
        const unsigned char* c = codes + i0 / 2;
        float* o = out + i0;
        for (int64_t i = 0; i < len / 2; i++) o[2 * i] = v[c[i] >> 4], o[2 * i + 1] = v[c[i] & 15];
        if (len % 2) o[len - 1] = v[c[len / 2] >> 4];
    }
}
static inline void nf4_dequant_host(float* out, const unsigned char* st, int64_t n) { nf4_dequant_host_map(out, st, n, NULL); }

#ifdef __CUDACC__
typedef struct { float code[16]; float dyn[256]; } Nf4Tables; // passed by value, copied to shared memory

// Thread j: code bytes 4j..4j+3 = outputs 8j..8j+7, all in block 8j / 64. The 32-bit load stays inside
// the storage (the codes section is 16-aligned and padded to 16); st must be 4-byte aligned.
__global__ static void nf4_dequant_kernel(floatX* out, const unsigned char* st, Nf4Part P, Nf4Tables t) {
    __shared__ float s_code[16];
    __shared__ float s_dyn[256];
    for (int k = threadIdx.x; k < 256; k += blockDim.x) s_dyn[k] = t.dyn[k];
    if (threadIdx.x < 16) s_code[threadIdx.x] = t.code[threadIdx.x];
    __syncthreads(); // the tables are written before any thread of the block reads them
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t i0 = 8 * j;
    if (i0 >= P.n) return;
    int64_t b = i0 / NF4_BLOCK;
    float offset = *(const float*)(st + P.o_offset);
    float nested = ((const float*)(st + P.o_nested))[b / NF4_NESTED];
    float am = __fadd_rn(__fmul_rn(s_dyn[st[P.o_qabs + b]], nested), offset);
    uint32_t word = *(const uint32_t*)(st + P.o_codes + 4 * j);
    int64_t len = P.n - i0 < 8 ? P.n - i0 : 8;
    for (int k = 0; k < len; k++) {
        unsigned int byte = (word >> (8 * (k / 2))) & 255u;
        unsigned int c = (k % 2 == 0) ? byte >> 4 : byte & 15u;
        out[i0 + k] = rn(__fmul_rn(s_code[c], am));
    }
}
#endif

// out = rn(dequant(st)): out (n) floatX, st on the device; dyn (host memory, 256 floats) the nested
// code book, NULL for NF4_DYN.
static void op_nf4_dequant_map(floatX* out, const unsigned char* st, int64_t n, const float* dyn) {
    Nf4Part P = nf4_part(n);
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        Nf4Tables t;
        memcpy(t.code, NF4_CODE, sizeof(t.code));
        memcpy(t.dyn, dyn ? dyn : NF4_DYN, sizeof(t.dyn));
        if (n > 0) nf4_dequant_kernel<<<(unsigned)ceil_div(ceil_div(n, 8), 256), 256, 0, g_stream>>>(out, st, P, t);
        cudaCheck(cudaGetLastError());
        return;
    }
#endif
    const unsigned char* codes = st + P.o_codes;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < P.nb; b++) {
        float am = nf4_block_absmax_map(st, &P, b, dyn);
        floatX v[16];                            // rn(NF4[k] * am): the block's 16 possible outputs
        for (int k = 0; k < 16; k++) v[k] = rn(NF4_CODE[k] * am);
        int64_t i0 = b * NF4_BLOCK, len = n - i0 < NF4_BLOCK ? n - i0 : NF4_BLOCK;
        const unsigned char* c = codes + i0 / 2;
        floatX* o = out + i0;
        for (int64_t i = 0; i < len / 2; i++) o[2 * i] = v[c[i] >> 4], o[2 * i + 1] = v[c[i] & 15];
        if (len % 2) o[len - 1] = v[c[len / 2] >> 4];
    }
}
static inline void op_nf4_dequant(floatX* out, const unsigned char* st, int64_t n) { op_nf4_dequant_map(out, st, n, NULL); }

#endif // ZT_OPS_NF4_CUH
