// dev/hash_speed.c — the hash of -log-hash's model state (log_hashes in train_gpt.cu): byte-wise
// FNV-1a against XXH64 (rng.h) on one CPU core, and XXH64 checked.
//
//   cc -O3 -march=x86-64-v3 dev/hash_speed.c -o /tmp/hash_speed -ldl && /tmp/hash_speed [MB]
//
// Prints each hash's GB/s over MB megabytes (default 512: a d12's master + m + v is ~1.5 GB, a 2-layer
// llama3.2-1b's state ~5 GB) of random floats. Checks: XXH64 fed in uneven pieces = XXH64 fed at
// once, and = XXH64(buf, n, 0) of the system's libxxhash.so.0 for lengths 0..100 and the whole buffer
// (that one is skipped with a note where the library is not installed). Exit 1 on a mismatch.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "../rng.h" // defines: fnv1a, FNV_INIT, Xxh64, xxh64_init, xxh64_update, xxh64_digest, rng_u64

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

int main(int argc, char** argv) {
    size_t mb = argc > 1 ? (size_t)atol(argv[1]) : 512, n = mb << 20;
    unsigned char* buf = (unsigned char*)malloc(n);
    if (!buf) { fprintf(stderr, "hash_speed: cannot allocate %zu MB\n", mb); return 2; }
    for (size_t i = 0; i < n / 8; i++) { uint64_t w = rng_u64(7, i); memcpy(buf + 8 * i, &w, 8); }
    int bad = 0;
    // the digest does not depend on how the stream is cut
    Xxh64 a, b;
    xxh64_init(&a, 0);
    xxh64_update(&a, buf, n);
    xxh64_init(&b, 0);
    for (size_t off = 0, k = 1; off < n; k = k * 7 % 1000003 + 1) {
        size_t len = k < n - off ? k : n - off;
        xxh64_update(&b, buf + off, len);
        off += len;
    }
    if (xxh64_digest(&a) != xxh64_digest(&b)) { printf("FAIL: XXH64 in pieces differs from XXH64 at once\n"); bad = 1; }
    // = the reference library, where installed
    void* lib = dlopen("libxxhash.so.0", RTLD_NOW);
    uint64_t (*ref)(const void*, size_t, uint64_t) = lib ? (uint64_t (*)(const void*, size_t, uint64_t))dlsym(lib, "XXH64") : NULL;
    if (ref) {
        for (size_t len = 0; len <= 100; len++) {
            Xxh64 s;
            xxh64_init(&s, 0);
            xxh64_update(&s, buf + 3, len);
            if (xxh64_digest(&s) != ref(buf + 3, len, 0)) { printf("FAIL: XXH64 of %zu bytes differs from libxxhash's\n", len); bad = 1; }
        }
        if (xxh64_digest(&a) != ref(buf, n, 0)) { printf("FAIL: XXH64 of %zu MB differs from libxxhash's\n", mb); bad = 1; }
        if (!bad) printf("XXH64 = libxxhash's XXH64 (lengths 0..100 and %zu MB), and the same fed in uneven pieces\n", mb);
    } else {
        printf("(libxxhash.so.0 not found: XXH64 not checked against the reference; pieces = at once: %s)\n", bad ? "no" : "yes");
    }
    double t0 = now();
    uint64_t hf = fnv1a(FNV_INIT, buf, n);
    double t1 = now();
    Xxh64 s;
    xxh64_init(&s, 0);
    xxh64_update(&s, buf, n);
    uint64_t hx = xxh64_digest(&s);
    double t2 = now();
    printf("%zu MB: FNV-1a (bytes) %.3f s = %.2f GB/s (%016llx); XXH64 %.3f s = %.2f GB/s (%016llx): %.1fx\n", mb, t1 - t0,
           n / (t1 - t0) / 1e9, (unsigned long long)hf, t2 - t1, n / (t2 - t1) / 1e9, (unsigned long long)hx, (t1 - t0) / (t2 - t1));
    free(buf);
    return bad;
}
