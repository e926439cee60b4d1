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
// byte hash of logs, tests and -tokenize's record: here so that dataloader.h, which stands alone, has it);
// Xxh64, xxh64_init, xxh64_update, xxh64_digest (the fast hash of -log-hash's model state)
//
// May call: nothing but the C library.
#ifndef ZT_RNG_H
#define ZT_RNG_H

#include <stdint.h>
#include <string.h>
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

// XXH64 (Yann Collet's xxHash, 64-bit, the reference algorithm of xxhash.h written out; seed 0
// in our use): the hash of -log-hash's model state (log_hashes in train_gpt.cu), hundreds of MB to
// GB per run, where byte-wise FNV-1a's one multiply chain per byte runs at ~0.5 GB/s. XXH64 reads
// 8-byte words into four independent accumulators (32-byte stripes) the CPU overlaps: ~10x faster
// (dev/hash_speed.c, 512 MB and 1 GB on one core of an AMD EPYC: FNV-1a 0.46 GB/s, XXH64 4.3-4.8). Streaming: the digest of a byte sequence is the
// same however it is split into xxh64_update calls (log_hashes feeds it piece by piece), and equals
// XXH64(bytes, n, seed) of libxxhash (dev/hash_speed.c checks that where libxxhash.so.0 is
// installed). Words are read little-endian (memcpy): the hosts we build for (x86-64, aarch64) are.
typedef struct {
    uint64_t v[4];          // the four accumulators of the stripes seen so far
    uint64_t total;         // bytes fed so far
    unsigned char buf[32];  // the bytes of an unfinished stripe
    unsigned nbuf;          // how many of buf are filled (< 32 between calls)
} Xxh64;
#define XXH_P1 0x9E3779B185EBCA87ull
#define XXH_P2 0xC2B2AE3D27D4EB4Full
#define XXH_P3 0x165667B19E3779F9ull
#define XXH_P4 0x85EBCA77C2B2AE63ull
#define XXH_P5 0x27D4EB2F165667C5ull
static inline uint64_t xxh64_rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t xxh64_read64(const unsigned char* p) { uint64_t w; memcpy(&w, p, 8); return w; }
static inline uint64_t xxh64_round(uint64_t acc, uint64_t w) { return xxh64_rotl(acc + w * XXH_P2, 31) * XXH_P1; }
static inline void xxh64_init(Xxh64* s, uint64_t seed) {
    s->v[0] = seed + XXH_P1 + XXH_P2; s->v[1] = seed + XXH_P2; s->v[2] = seed; s->v[3] = seed - XXH_P1;
    s->total = 0; s->nbuf = 0;
}
// one 32-byte stripe: word k into accumulator k
static inline void xxh64_stripe(Xxh64* s, const unsigned char* p) {
    for (int k = 0; k < 4; k++) s->v[k] = xxh64_round(s->v[k], xxh64_read64(p + 8 * k));
}
static inline void xxh64_update(Xxh64* s, const void* data, size_t n) {
    const unsigned char* p = (const unsigned char*)data;
    s->total += n;
    if (s->nbuf) { // complete the stripe an earlier call left unfinished
        size_t take = 32 - s->nbuf < n ? 32 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += (unsigned)take; p += take; n -= take;
        if (s->nbuf < 32) return;
        xxh64_stripe(s, s->buf);
        s->nbuf = 0;
    }
    uint64_t v0 = s->v[0], v1 = s->v[1], v2 = s->v[2], v3 = s->v[3]; // (in registers: four chains at once)
    for (; n >= 32; p += 32, n -= 32) {
        v0 = xxh64_round(v0, xxh64_read64(p)); v1 = xxh64_round(v1, xxh64_read64(p + 8));
        v2 = xxh64_round(v2, xxh64_read64(p + 16)); v3 = xxh64_round(v3, xxh64_read64(p + 24));
    }
    s->v[0] = v0; s->v[1] = v1; s->v[2] = v2; s->v[3] = v3;
    memcpy(s->buf, p, n);
    s->nbuf = (unsigned)n;
}
// The hash of everything fed so far (the state is left as it was).
static inline uint64_t xxh64_digest(const Xxh64* s) {
    uint64_t h;
    if (s->total >= 32) {
        h = xxh64_rotl(s->v[0], 1) + xxh64_rotl(s->v[1], 7) + xxh64_rotl(s->v[2], 12) + xxh64_rotl(s->v[3], 18);
        for (int k = 0; k < 4; k++) h = (h ^ xxh64_round(0, s->v[k])) * XXH_P1 + XXH_P4;
    } else {
        h = s->v[2] + XXH_P5; // (v[2] is the seed until a stripe is done)
    }
    h += s->total;
    const unsigned char* p = s->buf;
    unsigned n = s->nbuf;
    for (; n >= 8; p += 8, n -= 8) h = xxh64_rotl(h ^ xxh64_round(0, xxh64_read64(p)), 27) * XXH_P1 + XXH_P4;
    if (n >= 4) {
        uint32_t w; memcpy(&w, p, 4);
        h = xxh64_rotl(h ^ (uint64_t)w * XXH_P1, 23) * XXH_P2 + XXH_P3;
        p += 4; n -= 4;
    }
    for (; n > 0; p++, n--) h = xxh64_rotl(h ^ *p * XXH_P5, 11) * XXH_P1;
    h ^= h >> 33; h *= XXH_P2; h ^= h >> 29; h *= XXH_P3; h ^= h >> 32;
    return h;
}

#endif // ZT_RNG_H
