// simd.h — which explicit-SIMD path the host loops take: scalar, AVX2 + FMA or AVX-512F, chosen
// once per process at run time (cpuid), or forced by ZT_SIMD=scalar|avx2|avx512.
//
// Two host loops have such paths: the host AdamW (adamw.cuh; what -offload runs, and the CPU device's
// AdamW) and the CPU device's GEMM microkernel (ops/matmul.cuh). Every path of each gives the scalar
// loop's bits (each documents how), so the choice changes speed only; the tests force each path.
// The binaries stay portable: only the avx2 / avx512 functions are compiled for their instruction
// sets (ZT_TARGET_AVX2 / ZT_TARGET_AVX512: per-function target attributes) and are called only when
// simd_supported says the CPU (and the OS's saving of the registers) has them, so the x86-64-v3
// GPU-box binaries run on a CPU without AVX-512 and pick avx2. Other architectures: scalar only.
// Nothing assumes an instruction set at compile time: every intrinsic in the tree sits in a function
// with its target attribute (test/check_intrinsics.py checks; make portability compiles everything
// for x86-64 v1..v4 and aarch64), whatever -march the build uses (make MARCH=..., docs/build.md).
//
// defines: SIMD_SCALAR, SIMD_AVX2, SIMD_AVX512, SIMD_COUNT, simd_names, simd_supported, simd_level,
//          g_simd, ZT_X86, ZT_TARGET_AVX2, ZT_TARGET_AVX512, ZT_TARGET_SSE42, crc32c_hw_supported
//          (and includes <immintrin.h> on x86)
//
// May call: device.cuh (die_user).
#ifndef ZT_SIMD_H
#define ZT_SIMD_H

#include <stdlib.h>
#include <string.h>
#include "device.cuh" // defines: die_user

enum { SIMD_SCALAR, SIMD_AVX2, SIMD_AVX512, SIMD_COUNT };
static const char* const simd_names[SIMD_COUNT] = {"scalar", "avx2", "avx512"};

#if defined(__x86_64__) || defined(__i386__)
#define ZT_X86 1
#endif

// ZT_FAULT=simd-lacks:avx512 (or avx2): the tests' stand-in for a CPU without that path.
static int simd_supported(int level) {
    const char* f = getenv("ZT_FAULT");
    if (f && !strncmp(f, "simd-lacks:", 11) && !strcmp(f + 11, simd_names[level])) return 0;
#ifdef ZT_X86
    if (level == SIMD_AVX2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (level == SIMD_AVX512) return __builtin_cpu_supports("avx512f");
#endif
    return level == SIMD_SCALAR;
}

// The path, decided once for the process; start-up calls it so that a bad ZT_SIMD stops the run
// before anything is written.
static int g_simd = -1;
static int simd_level(void) {
    if (g_simd >= 0) return g_simd;
    int best = SIMD_SCALAR;
    for (int k = SIMD_SCALAR; k < SIMD_COUNT; k++)
        if (simd_supported(k)) best = k;
    const char* e = getenv("ZT_SIMD");
    if (e && *e) {
        int k = -1;
        for (int i = 0; i < SIMD_COUNT; i++)
            if (!strcmp(e, simd_names[i])) k = i;
        if (k < 0) die_user("ZT_SIMD=%s: not scalar, avx2 or avx512 (the host AdamW's and the CPU matmul's path; unset, this CPU's widest: %s)", e, simd_names[best]);
        if (!simd_supported(k))
            die_user("ZT_SIMD=%s: this CPU does not have %s. HINT: unset ZT_SIMD (this CPU's widest path is %s), or ZT_SIMD=scalar", e,
                     k == SIMD_AVX512 ? "AVX-512F" : "AVX2 and FMA", simd_names[best]);
        best = k;
    }
    return g_simd = best;
}

#ifdef ZT_X86
// (nvcc hands GCC's intrinsics headers to the host compiler outside their system-header status: their
// _mm*_undefined_* self-initialise, which g++'s -W(maybe-)uninitialized flag at -O2 and under nvcc.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#define ZT_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define ZT_TARGET_AVX512 __attribute__((target("avx512f")))
#define ZT_TARGET_SSE42 __attribute__((target("sse4.2")))
#endif

// Whether the CRC32C of checkpoint files may use SSE 4.2's crc32 instruction (checkpoint.h; the same
// bits as the portable loop, which test ckpt_crc32c compares).
static inline int crc32c_hw_supported(void) { // (inline: unused where no path has it)
#ifdef ZT_X86
    static int have = -1; // (a race between threads writes the same value)
    if (have < 0) have = __builtin_cpu_supports("sse4.2");
    return have;
#else
    return 0;
#endif
}

#endif // ZT_SIMD_H
