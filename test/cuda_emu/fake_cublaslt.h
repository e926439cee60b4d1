// test/cuda_emu/fake_cublaslt.h — cuBLASLt's matmul on the CPU, for the cases zerotrain uses.
//
// Written from cuBLASLt's documentation (the cuBLAS guide and the comments in cublasLt.h), not from
// ops/matmul.cuh, so that it checks our row-major / column-major derivation rather than repeat it:
//     D = alpha * op(A) @ op(B) + beta * C   [+ bias: a vector of m elements added to every column of D]
// Every matrix is column-major (CUBLASLT_ORDER_COL): element (i, j) of a (rows, cols) layout with
// leading dimension ld is at ptr[i + j*ld], ld >= rows. op(X) = X or X^T (CUBLASLT_MATMUL_DESC_TRANSA/B);
// the layouts describe the stored matrices, before op: op(A) is (m, k), op(B) (k, n), C and D (m, n).
// With beta = 0, C is not read. Alpha and beta are host floats (CUBLASLT_POINTER_MODE_HOST).
//
// Implemented, and nothing else (anything else is refused with CUBLAS_STATUS_NOT_SUPPORTED or, for a
// configuration the documentation calls invalid, CUBLAS_STATUS_INVALID_VALUE, with a line on stderr):
//   compute type CUBLAS_COMPUTE_32F, scale type CUDA_R_32F;
//   A, B types CUDA_R_16BF with C = D types CUDA_R_16BF or CUDA_R_32F, or everything CUDA_R_32F;
//   descriptor attributes TRANSA, TRANSB (N or T), EPILOGUE (DEFAULT or BIAS), BIAS_POINTER,
//   BIAS_DATA_TYPE (-1 or D's type: "bias vector elements are the same type as the elements of
//   output matrix (Dtype)");
//   preference attributes MAX_WORKSPACE_BYTES, REDUCTION_SCHEME_MASK, MIN_ALIGNMENT_{A,B,C,D}_BYTES;
//   one layout per matrix, no batches; in place (C == D with the same layout) or C and D apart.
// The heuristic returns one algorithm (no workspace) for any implemented problem; the algorithm
// remembers the problem and the alignments it was chosen for, and cublasLtMatmul refuses it for
// another problem or for less aligned pointers (cuBLASLt's kernels may assume both).
// One problem, two alignment keys: the real heuristic may pick a different algorithm (another
// summation order) for each alignment up to 256 bytes, so a program that asks for one problem under
// two alignments (A, B, C, D, bias) could give different bits depending on where its buffers lie
// (e.g. ZeRO-0 against ZeRO-3). The fake stops the run when that happens (emu::fail), unless a test
// that means it calls emu_lt::forget_alignment_keys() first.
// The arithmetic: FP32 products summed over k in FP32 as 8 interleaved partial sums (k mod 8) added
// in a fixed tree — deliberately not the CPU's order (cuBLASLt's is not either, and varies with the
// algorithm) — then alpha*sum, + beta*C (one fma), + bias, rounded once to D's type (nearest even).
//
// defines: cublasLt* (the subset), cudaDataType_t, CUDA_R_*, CUBLAS_*
#ifndef ZT_FAKE_CUBLASLT_H
#define ZT_FAKE_CUBLASLT_H

#include "cuda_emu.h"

// The types and the values of their constants are cuBLAS's (library_types.h, cublas_api.h, cublasLt.h).
typedef enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType_t;
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_ARCH_MISMATCH = 8, CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13, CUBLAS_STATUS_INTERNAL_ERROR = 14, CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_BIAS = 4 } cublasLtEpilogue_t;
typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4, CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
} cublasLtMatmulDescAttributes_t;
typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;
typedef enum {
    CUBLASLT_REDUCTION_SCHEME_NONE = 0, CUBLASLT_REDUCTION_SCHEME_INPLACE = 1,
    CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2, CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE = 4,
} cublasLtReductionScheme_t;

struct cublasLtContext { int live; };
struct EmuLtDesc { int compute, scale, transa, transb; uint32_t epilogue; const void* bias; int32_t bias_type; };
struct EmuLtLayout { int type; uint64_t rows, cols; int64_t ld; };
struct EmuLtPref { uint64_t max_ws; uint32_t schemes; uint32_t align[4]; }; // align: A, B, C, D
typedef cublasLtContext* cublasLtHandle_t;
typedef EmuLtDesc* cublasLtMatmulDesc_t;
typedef EmuLtLayout* cublasLtMatrixLayout_t;
typedef EmuLtPref* cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

namespace emu_lt {
__attribute__((format(printf, 2, 3))) static cublasStatus_t refuse(cublasStatus_t st, const char* fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "cuda_emu (fake cuBLASLt): ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " -> %s\n", st == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED" : "CUBLAS_STATUS_INVALID_VALUE");
    return st;
}
static size_t type_size(int t) { return t == CUDA_R_16BF ? 2 : 4; }
static const char* type_name(int t) { return t == CUDA_R_16BF ? "CUDA_R_16BF" : t == CUDA_R_32F ? "CUDA_R_32F" : "(other)"; }
static std::set<const void*> g_objects; // live handles, descriptors, layouts, preferences
template <class T> static T* make(T init) { T* p = new T(init); g_objects.insert(p); return p; }
static bool live(const void* p) { return p && g_objects.count(p); }
static const uint64_t kAlgoMagic = 0x66616b654c74ull; // "fakeLt"
// The alignments (A, B, C, D, bias) each problem (by fingerprint) was planned under.
struct AlignKey { uint32_t a[5]; bool operator!=(const AlignKey& o) const { return memcmp(a, o.a, sizeof(a)) != 0; } };
static std::map<uint64_t, AlignKey> g_align_keys;
static void forget_alignment_keys() { g_align_keys.clear(); }

// A problem's fingerprint: what an algorithm was chosen for.
static uint64_t fingerprint(const EmuLtDesc* d, const EmuLtLayout* const* l) {
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&](uint64_t v) { h = (h ^ v) * 0x100000001b3ull; };
    mix(d->compute); mix(d->scale); mix(d->transa); mix(d->transb); mix(d->epilogue); mix((uint64_t)d->bias_type);
    for (int i = 0; i < 4; i++) { mix(l[i]->type); mix(l[i]->rows); mix(l[i]->cols); mix((uint64_t)l[i]->ld); }
    return h;
}

// Is (desc, A, B, C, D) a problem this fake implements? Sets m, n, k.
static cublasStatus_t check_problem(const EmuLtDesc* d, const EmuLtLayout* A, const EmuLtLayout* B, const EmuLtLayout* C,
                                    const EmuLtLayout* D, uint64_t* m, uint64_t* n, uint64_t* k) {
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "compute type %d / scale type %d (implemented: CUBLAS_COMPUTE_32F, CUDA_R_32F)",
                      d->compute, d->scale);
    if (A->type != B->type || C->type != D->type)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "A is %s and B %s, C is %s and D %s", type_name(A->type), type_name(B->type),
                      type_name(C->type), type_name(D->type));
    bool types_ok = (A->type == CUDA_R_16BF && (D->type == CUDA_R_16BF || D->type == CUDA_R_32F)) ||
                    (A->type == CUDA_R_32F && D->type == CUDA_R_32F);
    if (!types_ok)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "A/B %s with C/D %s", type_name(A->type), type_name(D->type));
    *m = d->transa ? A->cols : A->rows;
    *k = d->transa ? A->rows : A->cols;
    uint64_t kb = d->transb ? B->cols : B->rows;
    *n = d->transb ? B->rows : B->cols;
    if (kb != *k)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "op(A) is (%llu, %llu) but op(B) is (%llu, %llu): inner dimensions differ",
                      (unsigned long long)*m, (unsigned long long)*k, (unsigned long long)kb, (unsigned long long)*n);
    if (D->rows != *m || D->cols != *n || C->rows != *m || C->cols != *n)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "op(A) op(B) is (%llu, %llu) but D is (%llu, %llu) and C (%llu, %llu)",
                      (unsigned long long)*m, (unsigned long long)*n, (unsigned long long)D->rows,
                      (unsigned long long)D->cols, (unsigned long long)C->rows, (unsigned long long)C->cols);
    const EmuLtLayout* all[4] = {A, B, C, D};
    const char* names = "ABCD";
    for (int i = 0; i < 4; i++)
        if (all[i]->ld < (int64_t)all[i]->rows || all[i]->ld < 1)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "matrix %c: ld %lld < rows %llu (column-major needs ld >= rows)", names[i],
                          (long long)all[i]->ld, (unsigned long long)all[i]->rows);
    if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && d->epilogue != CUBLASLT_EPILOGUE_BIAS)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue %u (implemented: DEFAULT, BIAS)", d->epilogue);
    if (d->epilogue == CUBLASLT_EPILOGUE_BIAS && d->bias_type != -1 && d->bias_type != D->type)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "bias type %s with D %s (the bias has D's type)", type_name(d->bias_type),
                      type_name(D->type));
    return CUBLAS_STATUS_SUCCESS;
}

static unsigned alignment_of(const void* p) {
    unsigned a = 256;
    while (a > 1 && (uintptr_t)p % a) a /= 2;
    return a;
}
static size_t extent_bytes(const EmuLtLayout* l) { // bytes a layout spans from its pointer
    if (l->rows == 0 || l->cols == 0) return 0;
    return ((l->cols - 1) * (uint64_t)l->ld + l->rows) * type_size(l->type);
}
static float load(const void* p, int type, uint64_t i) {
    if (type == CUDA_R_32F) return ((const float*)p)[i];
    uint32_t u = (uint32_t)((const uint16_t*)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static void store(void* p, int type, uint64_t i, float v) {
    if (type == CUDA_R_32F) { ((float*)p)[i] = v; return; }
    ((uint16_t*)p)[i] = __float2bfloat16(v).x;
}
} // namespace emu_lt

static const char* cublasLtGetStatusName(cublasStatus_t st) {
    switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "(unknown status)";
}

static cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
    *h = emu_lt::make(cublasLtContext{1});
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
    *d = emu_lt::make(EmuLtDesc{(int)compute, (int)scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, nullptr, -1});
    return CUBLAS_STATUS_SUCCESS;
}

// Each attribute has a documented type; a size that does not match it is INVALID_VALUE.
static cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                     const void* buf, size_t size) {
    using emu_lt::refuse;
    if (!emu_lt::live(d)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul descriptor %p is not live", (void*)d);
    switch ((int)attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
        if (size != sizeof(int32_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "TRANSA/B: %zu bytes, an int32_t expected", size);
        int32_t v;
        memcpy(&v, buf, 4);
        if (v != CUBLAS_OP_N && v != CUBLAS_OP_T) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "operation %d (implemented: N, T)", v);
        (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->transa : d->transb) = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (size != sizeof(uint32_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "EPILOGUE: %zu bytes, a uint32_t expected", size);
        memcpy(&d->epilogue, buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        if (size != sizeof(void*)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "BIAS_POINTER: %zu bytes, a pointer expected", size);
        memcpy(&d->bias, buf, sizeof(void*));
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        if (size != sizeof(int32_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "BIAS_DATA_TYPE: %zu bytes, an int32_t expected", size);
        memcpy(&d->bias_type, buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    }
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matmul descriptor attribute %d is not implemented", (int)attr);
}

static cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t type, uint64_t rows, uint64_t cols,
                                                 int64_t ld) {
    if (type != CUDA_R_32F && type != CUDA_R_16BF)
        return emu_lt::refuse(CUBLAS_STATUS_NOT_SUPPORTED, "layout type %d (implemented: CUDA_R_32F, CUDA_R_16BF)", (int)type);
    *l = emu_lt::make(EmuLtLayout{(int)type, rows, cols, ld});
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
    *p = emu_lt::make(EmuLtPref{0, 0x7, {256, 256, 256, 256}}); // documented defaults
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    if (!emu_lt::live(p)) return emu_lt::refuse(CUBLAS_STATUS_INVALID_VALUE, "preference %p is not live", (void*)p);
    emu_lt::g_objects.erase(p);
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
                                                           const void* buf, size_t size) {
    using emu_lt::refuse;
    if (!emu_lt::live(p)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "preference %p is not live", (void*)p);
    switch ((int)attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        if (size != sizeof(uint64_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "MAX_WORKSPACE_BYTES: %zu bytes, a uint64_t expected", size);
        memcpy(&p->max_ws, buf, 8);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
        if (size != sizeof(uint32_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "REDUCTION_SCHEME_MASK: %zu bytes, a uint32_t expected", size);
        memcpy(&p->schemes, buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
        if (size != sizeof(uint32_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "MIN_ALIGNMENT: %zu bytes, a uint32_t expected", size);
        memcpy(&p->align[(int)attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    }
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "preference attribute %d is not implemented", (int)attr);
}

// One algorithm for any implemented problem whose alignments are at least the element size; it
// needs no workspace and no split-K reduction (so any REDUCTION_SCHEME_MASK allows it: NONE).
static cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A,
                                                     cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                                     cublasLtMatmulPreference_t pref, int requested,
                                                     cublasLtMatmulHeuristicResult_t* results, int* found) {
    using emu_lt::refuse;
    *found = 0;
    if (!emu_lt::live(h)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "handle %p is not live", (void*)h);
    if (!emu_lt::live(d) || !emu_lt::live(A) || !emu_lt::live(B) || !emu_lt::live(C) || !emu_lt::live(D) || !emu_lt::live(pref))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "heuristic: a descriptor, layout or preference is not live");
    if (requested < 1) return refuse(CUBLAS_STATUS_INVALID_VALUE, "heuristic: %d algorithms requested", requested);
    uint64_t m, n, k;
    cublasStatus_t st = emu_lt::check_problem(d, A, B, C, D, &m, &n, &k);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    const EmuLtLayout* l[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if (pref->align[i] < emu_lt::type_size(l[i]->type) || (pref->align[i] & (pref->align[i] - 1)))
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "heuristic: minimum alignment %u bytes of matrix %c: no algorithm",
                          pref->align[i], "ABCD"[i]);
    memset(&results[0], 0, sizeof(results[0]));
    cublasLtMatmulAlgo_t& algo = results[0].algo;
    algo.data[0] = emu_lt::kAlgoMagic;
    algo.data[1] = emu_lt::fingerprint(d, l);
    for (int i = 0; i < 4; i++) algo.data[2 + i] = pref->align[i];
    // "routines that don't dereference [the bias pointer], like cublasLtMatmulAlgoGetHeuristic(), depend
    // on its value to determine expected pointer alignment"
    algo.data[6] = d->epilogue == CUBLASLT_EPILOGUE_BIAS ? emu_lt::alignment_of(d->bias) : 256;
    emu_lt::AlignKey key = {{pref->align[0], pref->align[1], pref->align[2], pref->align[3], (uint32_t)algo.data[6]}};
    auto seen = emu_lt::g_align_keys.find(algo.data[1]);
    if (seen == emu_lt::g_align_keys.end()) {
        emu_lt::g_align_keys[algo.data[1]] = key;
    } else if (seen->second != key) {
        const uint32_t* o = seen->second.a;
        emu::fail("fake cuBLASLt: one GEMM (m=%llu n=%llu k=%llu, op A/B=%c/%c) planned under two alignment keys: "
                  "A/B/C/D/bias %u/%u/%u/%u/%u bytes, then %u/%u/%u/%u/%u. cuBLASLt may choose another algorithm "
                  "(another summation order) for each, so the bits would depend on where buffers lie (e.g. the "
                  "ZeRO stage). HINT: key plans by min(alignment, 16) (ops/matmul.cuh: plan_alignment)",
                  (unsigned long long)m, (unsigned long long)n, (unsigned long long)k, d->transa ? 'T' : 'N',
                  d->transb ? 'T' : 'N', o[0], o[1], o[2], o[3], o[4], key.a[0], key.a[1], key.a[2], key.a[3], key.a[4]);
    }
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha_p, const void* A,
                                     cublasLtMatrixLayout_t Al, const void* B, cublasLtMatrixLayout_t Bl, const void* beta_p,
                                     const void* C, cublasLtMatrixLayout_t Cl, void* D, cublasLtMatrixLayout_t Dl,
                                     const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                     cudaStream_t stream) {
    using emu_lt::refuse;
    if (!emu_lt::live(h)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "handle %p is not live", (void*)h);
    if (!emu_lt::live(d) || !emu_lt::live(Al) || !emu_lt::live(Bl) || !emu_lt::live(Cl) || !emu_lt::live(Dl))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: a descriptor or layout is not live");
    if (!emu::stream_ok(stream, "cublasLtMatmul")) return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t m, n, k;
    cublasStatus_t st = emu_lt::check_problem(d, Al, Bl, Cl, Dl, &m, &n, &k);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    const EmuLtLayout* l[4] = {Al, Bl, Cl, Dl};
    if (!algo || algo->data[0] != emu_lt::kAlgoMagic)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: the algorithm does not come from cublasLtMatmulAlgoGetHeuristic");
    if (algo->data[1] != emu_lt::fingerprint(d, l))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: the algorithm was chosen for another problem (types, transposes, "
                      "epilogue, shapes or leading dimensions differ)");
    if (emu::is_device(alpha_p) || emu::is_device(beta_p))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: alpha and beta must be host pointers (pointer mode HOST)");
    float alpha, beta;
    memcpy(&alpha, alpha_p, 4);
    memcpy(&beta, beta_p, 4);
    // pointers: device memory covering each layout's extent, at least as aligned as the algorithm assumes
    const void* ptr[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++) {
        char what[16];
        snprintf(what, sizeof(what), "matrix %c", "ABCD"[i]);
        if (i == 2 && beta == 0.0f) continue; // C is not read
        if (!emu::device_range(ptr[i], emu_lt::extent_bytes(l[i]), "cublasLtMatmul", what)) return CUBLAS_STATUS_INVALID_VALUE;
        if (emu_lt::alignment_of(ptr[i]) < algo->data[2 + i])
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: matrix %c at %p is %u-byte aligned; its algorithm was chosen "
                          "for %llu", "ABCD"[i], ptr[i], emu_lt::alignment_of(ptr[i]), (unsigned long long)algo->data[2 + i]);
    }
    if (C == D) {
        if (Cl->type != Dl->type || Cl->rows != Dl->rows || Cl->cols != Dl->cols || Cl->ld != Dl->ld)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul in place (C == D) with different C and D layouts");
    } else if (beta != 0.0f && (const char*)C < (const char*)D + emu_lt::extent_bytes(Dl) &&
               (const char*)D < (const char*)C + emu_lt::extent_bytes(Cl)) {
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: C and D overlap without being the same matrix");
    }
    for (int i = 0; i < 2; i++)
        if ((const char*)ptr[i] < (const char*)D + emu_lt::extent_bytes(Dl) &&
            (const char*)D < (const char*)ptr[i] + emu_lt::extent_bytes(l[i]))
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: D overlaps %c", "AB"[i]);
    const bool bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS;
    int bias_type = d->bias_type == -1 ? Dl->type : d->bias_type;
    if (bias) {
        if (!d->bias) return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: EPILOGUE_BIAS without a BIAS_POINTER");
        if (!emu::device_range(d->bias, m * emu_lt::type_size(bias_type), "cublasLtMatmul", "bias")) return CUBLAS_STATUS_INVALID_VALUE;
        if (emu_lt::alignment_of(d->bias) < algo->data[6])
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul: the bias at %p is less aligned than when the algorithm was chosen",
                          d->bias);
    }
    if (workspace_bytes > 0 && !emu::device_range(workspace, workspace_bytes, "cublasLtMatmul", "workspace"))
        return CUBLAS_STATUS_INVALID_VALUE;

    for (int i = 0; i < 3; i++)
        if (i < 2 || beta != 0.0f) emu::stream_access(stream, ptr[i], false, "cublasLtMatmul");
    if (bias) emu::stream_access(stream, d->bias, false, "cublasLtMatmul");
    emu::stream_access(stream, D, true, "cublasLtMatmul");
    // an operation of its stream, checked across streams as a kernel is (its ranges are known: by range)
    emu::stream_tick(stream);
    for (int i = 0; i < 3; i++)
        if (i < 2 || beta != 0.0f) emu::cross_stream_check(stream, ptr[i], emu_lt::extent_bytes(l[i]), false, "cublasLtMatmul");
    if (bias) emu::cross_stream_check(stream, d->bias, m * emu_lt::type_size(bias_type), false, "cublasLtMatmul");
    if (emu::legacy(stream)) emu::cross_stream_check(stream, D, emu_lt::extent_bytes(l[3]), true, "cublasLtMatmul");
    else emu::cross_stream_write(stream, D, emu_lt::extent_bytes(l[3]), "cublasLtMatmul");
    // the product: op(A) as (m, k) rows and op(B)^T as (n, k) rows, FP32, then dot products
    emu::ProfScope prof("cublasLtMatmul (fake)");
    emu::DeviceMode dm;
    std::vector<float> a(m * k), b(n * k);
    for (uint64_t i = 0; i < m; i++)
        for (uint64_t kk = 0; kk < k; kk++)
            a[i * k + kk] = emu_lt::load(A, Al->type, d->transa ? kk + i * Al->ld : i + kk * Al->ld);
    for (uint64_t j = 0; j < n; j++)
        for (uint64_t kk = 0; kk < k; kk++)
            b[j * k + kk] = emu_lt::load(B, Bl->type, d->transb ? j + kk * Bl->ld : kk + j * Bl->ld);
    const float* ap = a.data();
    const float* bp = b.data();
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < (int64_t)n; j++) {
        for (uint64_t i = 0; i < m; i++) {
            const float* x = ap + i * k;
            const float* y = bp + j * k;
            float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            uint64_t kk = 0;
            for (; kk + 8 <= k; kk += 8)
                for (int u = 0; u < 8; u++) part[u] = fmaf(x[kk + u], y[kk + u], part[u]);
            for (int u = 0; kk < k; kk++, u++) part[u] = fmaf(x[kk], y[kk], part[u]);
            float sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
            float v = alpha * sum;
            uint64_t di = i + (uint64_t)j * Dl->ld;
            if (beta != 0.0f) v = fmaf(beta, emu_lt::load(C, Cl->type, i + (uint64_t)j * Cl->ld), v);
            if (bias) v += emu_lt::load(d->bias, bias_type, i);
            emu_lt::store(D, Dl->type, di, v);
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}

#endif // ZT_FAKE_CUBLASLT_H
