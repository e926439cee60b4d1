// rng.h — counter-based random numbers: a value is a pure function of (key, counter).
//
// Every random draw in zerotrain is keyed by *what* it is for, never by how many draws came
// before it: parameter init is keyed by (seed, tensor, element index), the data permutation by
// (seed, epoch, position), sampling by (seed, step, token). So any rank can produce exactly the
// numbers it needs (its shard of the init, its micro-batch), the result never depends on the
// world size or on the thread count, and resuming needs no generator state beyond the step.
//
// The mixer is SplitMix64's finaliser (Steele, Lea, Flood: "Fast splittable pseudorandom number
// generators", OOPSLA 2014), applied to key and counter combined through a second mix so that
// nearby keys and nearby counters give unrelated streams. It passes BigCrush as a counter-mode
// generator, which is far more than init and shuffling need.
//
// defines: rng_mix64, rng_u64, rng_uniform (0,1], rng_normal (Box-Muller), rng_key; and fnv1a, FNV_INIT (the
// byte hash of logs, tests and -tokenize's record: here so that dataloader.h, which stands alone, has it)
//
// May call: nothing but the C library.
#ifndef ZT_RNG_H
#define ZT_RNG_H

#include <stdint.h>
#include <math.h>

#ifdef __CUDACC__
#define ZT_HD __host__ __device__
#else
#define ZT_HD
#endif

// SplitMix64 finaliser: a bijection on 64-bit values with full avalanche.
ZT_HD static inline uint64_t rng_mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Derive a stream key from a seed and up to two labels (e.g. tensor id and block, or epoch).
ZT_HD static inline uint64_t rng_key(uint64_t seed, uint64_t a, uint64_t b) {
    return rng_mix64(rng_mix64(rng_mix64(seed) ^ a) ^ (b * 0xD1B54A32D192ED03ull));
}

// The counter-th 64-bit value of stream `key`.
ZT_HD static inline uint64_t rng_u64(uint64_t key, uint64_t counter) {
    return rng_mix64(key ^ rng_mix64(counter));
}

// Uniform in (0, 1]: 53 random bits, never exactly 0 (safe for log).
ZT_HD static inline double rng_uniform(uint64_t key, uint64_t counter) {
    return ((double)(rng_u64(key, counter) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

// Standard normal for element `counter` of stream `key`, by Box-Muller on two uniforms drawn
// from counters 2*counter and 2*counter+1 (so each element owns its own pair).
ZT_HD static inline double rng_normal(uint64_t key, uint64_t counter) {
    double u1 = rng_uniform(key, 2 * counter);
    double u2 = rng_uniform(key, 2 * counter + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}

// FNV-1a over bytes: hashes of parameters, optimizer state and data in logs and tests, and of the
// shards -tokenize writes (dataloader.h: its record).
static inline uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
    const unsigned char* p = (const unsigned char*)data;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
    return h;
}
#define FNV_INIT 0xcbf29ce484222325ull

#endif // ZT_RNG_H
