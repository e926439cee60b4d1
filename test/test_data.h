// test/test_data.h — tests of dataloader.h, tokenizer.h and the committed data files.
//
// Included into the single test binary after test.h, dataloader.h and tokenizer.h; run from the
// repository root (the committed files are read as data/...). Scratch files go to test_tmpdir().
//
// Synthetic shards hold tokens base, base+1, base+2, ..., so every sample is recognisable from
// its first token and every loaded row can be compared token by token with what it must be. The
// shuffled order is compared with the specification restated here (data_ref_perm), not with the
// loader's own code path.
// defines: the data_* test cases and their data_* helpers
#ifndef ZT_TEST_DATA_H
#define ZT_TEST_DATA_H

#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

// -----------------------------------------------------------------------------------------------
// helpers

#define DATA_MAX_SHARDS 8
#define DATA_VOCAB 65536  // synthetic tokens use the whole uint16 range

// A synthetic data set: shard i is named <dir>/<prefix>_<i>.bin and holds ntok[i] tokens
// base[i], base[i]+1, ... (bases 100 apart from the previous shard's last token).
typedef struct {
    int nshards;
    int64_t ntok[DATA_MAX_SHARDS];
    int base[DATA_MAX_SHARDS];
    char pattern[512];
} DataSet;

// path = <tmpdir>/<name>
static void data_path(char* out, size_t cap, const char* name) {
    int n = snprintf(out, cap, "%s/%s", test_tmpdir(), name);
    CHECKF(n >= 0 && (size_t)n < cap, "scratch path too long for %s", name);
}

// Write shards of the given sizes with write_token_shard; fills ds. Returns 0 on success.
static int data_make_set(DataSet* ds, const char* prefix, int nshards, const int64_t* ntok) {
    memset(ds, 0, sizeof(*ds));
    ds->nshards = nshards;
    int base = 1;
    for (int i = 0; i < nshards; i++) {
        ds->ntok[i] = ntok[i];
        ds->base[i] = base;
        base += (int)ntok[i] + 100;  // a gap: a row running into the next shard cannot look whole
        uint16_t* toks = (uint16_t*)malloc((size_t)ntok[i] * sizeof(uint16_t));
        for (int64_t t = 0; t < ntok[i]; t++) toks[t] = (uint16_t)(ds->base[i] + t);
        char path[600], name[128], err[512];
        snprintf(name, sizeof(name), "%s_%d.bin", prefix, i);
        data_path(path, sizeof(path), name);
        int rc = write_token_shard(path, toks, ntok[i], err, sizeof(err));
        free(toks);
        CHECKF(rc == 0, "write_token_shard: %s", err);
        if (rc != 0) return -1;
    }
    CHECK(base <= DATA_VOCAB);
    char name[128];
    snprintf(name, sizeof(name), "%s_*.bin", prefix);
    data_path(ds->pattern, sizeof(ds->pattern), name);
    return 0;
}

// Global sample id whose first token is `first`, given sample length T; -1 if none.
static int64_t data_sample_of(const DataSet* ds, int T, int first) {
    int64_t before = 0;
    for (int i = 0; i < ds->nshards; i++) {
        int64_t n = (ds->ntok[i] - 1) / T;
        int64_t off = first - ds->base[i];
        if (off >= 0 && off < n * T && off % T == 0) return before + off / T;
        before += n;
    }
    return -1;
}

// Check row b of the loaded unit is exactly a whole sample (T+1 consecutive tokens of one
// shard, starting at a sample boundary) and return its global id (-1 if not).
static int64_t data_row_sample(const DataSet* ds, const DataLoader* dl, int b) {
    int T = dl->T;
    const int* in = dl->inputs + b * T;
    const int* tg = dl->targets + b * T;
    int64_t id = data_sample_of(ds, T, in[0]);
    for (int t = 0; t < T; t++) {
        if (in[t] != in[0] + t || tg[t] != in[0] + t + 1) return -1;
    }
    return id;
}

// perm_e as the design states it: Fisher-Yates over 0..S-1 keyed by rng_key(seed, "SHUFF", e).
static void data_ref_perm(uint64_t seed, int64_t e, int64_t S, int64_t* perm) {
    uint64_t key = rng_key(seed, 0x5348554646ull, (uint64_t)e);
    for (int64_t i = 0; i < S; i++) perm[i] = i;
    for (int64_t i = S - 1; i >= 1; i--) {
        int64_t j = (int64_t)(rng_u64(key, (uint64_t)i) % (uint64_t)(i + 1));
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static int data_cmp_i64(const void* a, const void* b) {
    int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
    return (x > y) - (x < y);
}

// Open file descriptors of this process (to prove a failed init closed everything).
static int data_open_fds(void) {
    DIR* d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

// Mappings of this process whose file name contains `s` (to prove a failed init unmapped).
static int data_mappings(const char* s) {
    FILE* f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof(line), f)) n += strstr(line, s) != NULL;
    fclose(f);
    return n;
}

// Write raw bytes to a file.
static void data_write_bytes(const char* path, const void* bytes, size_t n) {
    FILE* f = fopen(path, "wb");
    CHECKF(f != NULL, "cannot create %s", path);
    if (!f) return;
    CHECK(fwrite(bytes, 1, n, f) == n);
    fclose(f);
}

// A hand-made shard: header (magic, version, header_ntok) followed by file_ntok tokens 0, 1, ...
// with token `bad_index` (if >= 0) set to bad_value, plus `extra` stray bytes.
static void data_write_shard_raw(const char* path, int32_t magic, int32_t version, int32_t header_ntok,
                                 int64_t file_ntok, int64_t bad_index, uint16_t bad_value, int extra) {
    size_t n = 1024 + 2 * (size_t)file_ntok + (size_t)extra;
    unsigned char* buf = (unsigned char*)calloc(n, 1);
    int32_t header[3] = {magic, version, header_ntok};
    memcpy(buf, header, sizeof(header));
    uint16_t* toks = (uint16_t*)(buf + 1024);
    for (int64_t i = 0; i < file_ntok; i++) toks[i] = (uint16_t)(i % 100);
    if (bad_index >= 0) toks[bad_index] = bad_value;
    data_write_bytes(path, buf, n);
    free(buf);
}

// dataloader_init on `pattern` must fail, with a message containing `name` and every one of
// the NULL-terminated `needles`, leaving no descriptor open and nothing mapped.
static void data_expect_init_error(const char* pattern, int T, int vocab, const char* name, const char* const* needles) {
    int fds = data_open_fds();
    DataLoader dl;
    char err[1024] = "";
    int rc = dataloader_init(&dl, pattern, 2, T, vocab, 1, 42, err, sizeof(err));
    CHECKF(rc != 0, "init of %s should fail", pattern);
    if (rc == 0) {
        dataloader_free(&dl);
        return;
    }
    CHECKF(strchr(err, '\n') == NULL, "message is not one line: %s", err);
    CHECKF(strstr(err, name) != NULL, "message does not name %s: %s", name, err);
    for (int i = 0; needles[i]; i++) CHECKF(strstr(err, needles[i]) != NULL, "message lacks '%s': %s", needles[i], err);
    CHECKF(data_open_fds() == fds, "descriptors leaked: %d -> %d", fds, data_open_fds());
    CHECKF(data_mappings(test_tmpdir()) == 0, "shards left mapped after: %s", err);
    CHECK(dl.shards == NULL && dl.inputs == NULL && dl.perm == NULL);
}

// A hand-made tokenizer file: header (magic, version, V, eot) then `ntok` tokens given as
// NUL-free strings, token i of length lens[i] (lens[i] may be 0 to make a bad file).
static void data_write_tokenizer(const char* path, uint32_t magic, uint32_t version, uint32_t V, uint32_t eot,
                                 int ntok, const char* const* toks, const int* lens) {
    unsigned char buf[2048] = {0};
    uint32_t header[4] = {magic, version, V, eot};
    memcpy(buf, header, sizeof(header));
    size_t off = 1024;
    for (int i = 0; i < ntok; i++) {
        buf[off++] = (unsigned char)lens[i];
        memcpy(buf + off, toks[i], (size_t)lens[i]);
        off += (size_t)lens[i];
    }
    data_write_bytes(path, buf, off);
}

// tokenizer_init on `path` must fail with a one-line message naming the file and containing
// `needle`, with nothing left allocated.
static void data_expect_tokenizer_error(const char* path, const char* needle) {
    Tokenizer tok;
    char err[1024] = "";
    int rc = tokenizer_init(&tok, path, err, sizeof(err));
    CHECKF(rc != 0, "tokenizer_init of %s should fail", path);
    if (rc == 0) {
        tokenizer_free(&tok);
        return;
    }
    CHECKF(strchr(err, '\n') == NULL, "message is not one line: %s", err);
    CHECKF(strstr(err, path) != NULL, "message does not name %s: %s", path, err);
    CHECKF(strstr(err, needle) != NULL, "message lacks '%s': %s", needle, err);
    CHECK(tok.token_table == NULL && tok.token_len == NULL && tok.bytes == NULL);
}

// -----------------------------------------------------------------------------------------------
// dataloader

// write_token_shard then read it back: the file is byte for byte an llm.c shard, and every unit
// holds exactly the tokens written.
TEST(data_shard_round_trip) {
    const int64_t N = 1000;
    uint16_t toks[1000];
    for (int64_t i = 0; i < N; i++) toks[i] = (uint16_t)((i * 7919 + 13) % 50257);
    char path[600], err[512];
    data_path(path, sizeof(path), "roundtrip.bin");
    CHECKF(write_token_shard(path, toks, N, err, sizeof(err)) == 0, "%s", err);

    FILE* f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f) return;
    int32_t header[256];
    uint16_t back[1000];
    CHECK(fread(header, 4, 256, f) == 256);
    CHECK(fread(back, 2, 1000, f) == 1000);
    CHECK(fgetc(f) == EOF);
    fclose(f);
    CHECK(header[0] == 20240520 && header[1] == 1 && header[2] == N);
    CHECK(memcmp(back, toks, sizeof(toks)) == 0);

    const int B = 3, T = 16;
    DataLoader dl;
    CHECKF(dataloader_init(&dl, path, B, T, 50257, 0, 0, err, sizeof(err)) == 0, "%s", err);
    if (!dl.inputs) return;
    CHECK(dl.nshards == 1 && dl.total_samples == (N - 1) / T && dataloader_total_tokens(&dl) == N);
    for (int64_t u = 0; u < dl.total_samples / B; u++) {
        dataloader_load(&dl, u);
        for (int i = 0; i < B * T; i++) {
            CHECKF(dl.inputs[i] == toks[u * B * T + i] && dl.targets[i] == toks[u * B * T + i + 1], "unit %lld, %d", (long long)u, i);
        }
    }
    dataloader_free(&dl);
}

// Unshuffled, one shard: unit k is tokens [k*B*T, k*B*T + B*T + 1), as llm.c's loader reads
// batch k; after the last sample the stream starts again at sample 0.
TEST(data_unshuffled_matches_llmc) {
    const int B = 4, T = 32;
    const int64_t N = 5000;
    DataSet ds;
    if (data_make_set(&ds, "llmc", 1, &N) != 0) return;
    DataLoader dl;
    char err[512];
    CHECKF(dataloader_init(&dl, ds.pattern, B, T, DATA_VOCAB, 0, 7, err, sizeof(err)) == 0, "%s", err);
    if (!dl.inputs) return;
    int base = ds.base[0];
    for (int64_t k = 0; k * B * T + B * T + 1 <= N; k++) {
        dataloader_load(&dl, k);
        int bad = 0;
        for (int i = 0; i < B * T; i++) bad += dl.inputs[i] != base + k * B * T + i || dl.targets[i] != base + k * B * T + i + 1;
        CHECKF(bad == 0, "unit %lld differs from llm.c's batch in %d places", (long long)k, bad);
    }
    int64_t S = dl.total_samples;  // 156 samples: position S (unit 39, row 0) is sample 0 again
    CHECK(S == (N - 1) / T && S % B == 0);
    dataloader_load(&dl, S / B);
    CHECK(dl.inputs[0] == base && dl.targets[T - 1] == base + T);
    dataloader_free(&dl);
}

// Shuffled over three shards of different sizes (S = 21, not a multiple of B, so units straddle
// epoch boundaries): every row is a whole sample, each epoch holds every sample exactly once, in
// the order the specification gives, and epochs differ.
TEST(data_shuffle_epochs_are_permutations) {
    const int B = 4, T = 8;
    const int64_t ntok[3] = {7 * T + 1, 4 * T, 11 * T + 2};  // 7, 3 (not 4: a sample needs T+1) and 11 samples
    DataSet ds;
    if (data_make_set(&ds, "epochs", 3, ntok) != 0) return;
    DataLoader dl;
    char err[512];
    CHECKF(dataloader_init(&dl, ds.pattern, B, T, DATA_VOCAB, 1, 1234, err, sizeof(err)) == 0, "%s", err);
    if (!dl.inputs) return;
    const int64_t S = 21, E = 3;
    CHECK(dl.nshards == 3 && dl.total_samples == S);
    CHECK(dataloader_total_tokens(&dl) == ntok[0] + ntok[1] + ntok[2]);

    int64_t seen[3 * 21 + 4];  // sample at each position, for E epochs and the last unit's tail
    int64_t units = (E * S + B - 1) / B;
    for (int64_t u = 0; u < units; u++) {
        dataloader_load(&dl, u);
        for (int b = 0; b < B; b++) {
            seen[u * B + b] = data_row_sample(&ds, &dl, b);
            CHECKF(seen[u * B + b] >= 0, "unit %lld row %d is not a whole sample", (long long)u, b);
        }
    }
    int64_t ref[21];
    for (int64_t e = 0; e < E; e++) {
        int count[21] = {0};
        data_ref_perm(1234, e, S, ref);
        int identity = 1;
        for (int64_t k = 0; k < S; k++) {
            int64_t s = seen[e * S + k];
            if (s >= 0 && s < S) count[s]++;
            CHECKF(s == ref[k], "epoch %lld index %lld: sample %lld, specification says %lld", (long long)e, (long long)k,
                   (long long)s, (long long)ref[k]);
            identity &= s == k;
        }
        for (int64_t s = 0; s < S; s++) CHECKF(count[s] == 1, "epoch %lld: sample %lld seen %d times", (long long)e, (long long)s, count[s]);
        CHECKF(!identity, "epoch %lld is not shuffled", (long long)e);
    }
    CHECK(memcmp(seen, seen + S, S * sizeof(int64_t)) != 0);  // epoch 1 is not a replay of epoch 0
    dataloader_free(&dl);
}

// The shuffled order is a function of (seed, unit) alone: loading units in another order, with
// a fresh loader, gives the same rows; another seed gives other rows.
TEST(data_shuffle_depends_only_on_seed_and_unit) {
    const int B = 4, T = 8;
    const int64_t ntok[3] = {7 * T + 1, 4 * T, 11 * T + 2};
    DataSet ds;
    if (data_make_set(&ds, "order", 3, ntok) != 0) return;
    DataLoader a, b, c;
    char err[512];
    CHECKF(dataloader_init(&a, ds.pattern, B, T, DATA_VOCAB, 1, 99, err, sizeof(err)) == 0, "%s", err);
    CHECKF(dataloader_init(&b, ds.pattern, B, T, DATA_VOCAB, 1, 99, err, sizeof(err)) == 0, "%s", err);
    CHECKF(dataloader_init(&c, ds.pattern, B, T, DATA_VOCAB, 1, 100, err, sizeof(err)) == 0, "%s", err);
    if (!a.inputs || !b.inputs || !c.inputs) return;
    // units 5 (positions 20..23) and 10 (40..43) straddle epochs 0/1 and 1/2 (S = 21)
    const int64_t units_a[] = {5, 1, 3, 17, 0, 10, 6};
    const int64_t units_b[] = {0, 1, 3, 5, 6, 10, 17};
    const int n = 7;
    int rows = B * T;
    int* saved = (int*)malloc((size_t)n * 2 * rows * sizeof(int));  // a's inputs, targets per unit of units_b
    for (int i = 0; i < n; i++) {
        dataloader_load(&a, units_a[i]);
        int slot = 0;
        while (units_b[slot] != units_a[i]) slot++;
        memcpy(saved + (2 * slot) * rows, a.inputs, rows * sizeof(int));
        memcpy(saved + (2 * slot + 1) * rows, a.targets, rows * sizeof(int));
    }
    int differs_from_other_seed = 0;
    for (int i = 0; i < n; i++) {
        dataloader_load(&b, units_b[i]);
        CHECKF(memcmp(saved + (2 * i) * rows, b.inputs, rows * sizeof(int)) == 0 &&
               memcmp(saved + (2 * i + 1) * rows, b.targets, rows * sizeof(int)) == 0,
               "unit %lld depends on the access order", (long long)units_b[i]);
        dataloader_load(&c, units_b[i]);
        differs_from_other_seed += memcmp(b.inputs, c.inputs, rows * sizeof(int)) != 0;
    }
    CHECKF(differs_from_other_seed >= n - 1, "seeds 99 and 100 agree on %d of %d units", n - differs_from_other_seed, n);
    free(saved);
    dataloader_free(&a);
    dataloader_free(&b);
    dataloader_free(&c);
}

// One optimizer step loads units u = (step*GA + g)*R + r for g < GA, r < R: with the global batch
// G = R*GA*B fixed, every R covers the same samples per step, and no two micro-batches of a step
// share a position (so within an epoch no sample repeats).
TEST(data_global_batch_independent_of_world_size) {
    const int T = 8, G = 8, steps = 7;  // 7 steps * 8 = 56 positions: 2+ epochs of S = 21
    const int64_t ntok[3] = {7 * T + 1, 4 * T, 11 * T + 2};
    DataSet ds;
    if (data_make_set(&ds, "ranks", 3, ntok) != 0) return;
    const int configs[][3] = {{1, 1, 8}, {1, 2, 4}, {2, 1, 4}, {2, 2, 2}, {4, 1, 2}, {4, 2, 1}};  // R, GA, B
    const int nconfigs = (int)(sizeof(configs) / sizeof(configs[0]));
    const int64_t S = 21;
    int64_t ref[7][8];
    for (int c = 0; c < nconfigs; c++) {
        int R = configs[c][0], GA = configs[c][1], B = configs[c][2];
        CHECK(R * GA * B == G);
        DataLoader dl;
        char err[512];
        CHECKF(dataloader_init(&dl, ds.pattern, B, T, DATA_VOCAB, 1, 5, err, sizeof(err)) == 0, "%s", err);
        if (!dl.inputs) return;
        for (int64_t step = 0; step < steps; step++) {
            int64_t got[8];
            int n = 0;
            for (int g = 0; g < GA; g++) {
                for (int r = 0; r < R; r++) {
                    dataloader_load(&dl, (step * GA + g) * R + r);
                    for (int b = 0; b < B; b++) got[n++] = data_row_sample(&ds, &dl, b);
                }
            }
            qsort(got, G, sizeof(int64_t), data_cmp_i64);
            if (c == 0) memcpy(ref[step], got, sizeof(got));
            CHECKF(memcmp(ref[step], got, sizeof(got)) == 0, "R=%d GA=%d B=%d: step %lld covers other samples than R=1",
                   R, GA, B, (long long)step);
            int within_epoch = (step * G) / S == (step * G + G - 1) / S;
            for (int i = 1; within_epoch && i < G; i++) {
                CHECKF(got[i] != got[i - 1], "R=%d GA=%d B=%d: step %lld loads sample %lld twice", R, GA, B,
                       (long long)step, (long long)got[i]);
            }
        }
        dataloader_free(&dl);
    }
}

// Every malformed input fails init with a one-line message naming the file and the problem,
// and leaves nothing open, mapped or allocated.
TEST(data_bad_shards) {
    char path[600], pattern[600], other[600];
    const int T = 8;

    data_path(pattern, sizeof(pattern), "nothing_here_*.bin");
    const char* const nomatch[] = {"no file matches", NULL};
    data_expect_init_error(pattern, T, DATA_VOCAB, pattern, nomatch);

    // cannot open: a dangling symbolic link matches the glob but does not open
    data_path(path, sizeof(path), "dangling_0.bin");
    data_path(pattern, sizeof(pattern), "dangling_*.bin");
    CHECK(symlink("/nonexistent/zt_shard.bin", path) == 0);
    const char* const cannot_open[] = {"cannot open", NULL};
    data_expect_init_error(pattern, T, DATA_VOCAB, path, cannot_open);

    data_path(path, sizeof(path), "adir_0.bin");
    CHECK(mkdir(path, 0755) == 0);
    const char* const not_regular[] = {"not a regular file", NULL};
    data_expect_init_error(path, T, DATA_VOCAB, path, not_regular);

    data_path(path, sizeof(path), "short.bin");
    data_write_bytes(path, "llm.c", 5);
    const char* const short_header[] = {"truncated header", NULL};
    data_expect_init_error(path, T, DATA_VOCAB, path, short_header);

    data_path(path, sizeof(path), "magic.bin");
    data_write_shard_raw(path, 20240328, 1, 100, 100, -1, 0, 0);  // a tokenizer's magic
    const char* const magic[] = {"wrong magic 20240328", "expected 20240520", "not an llm.c token shard", NULL};
    data_expect_init_error(path, T, DATA_VOCAB, path, magic);

    data_path(path, sizeof(path), "version.bin");
    data_write_shard_raw(path, 20240520, 2, 100, 100, -1, 0, 0);
    const char* const version[] = {"version 2", NULL};
    data_expect_init_error(path, T, DATA_VOCAB, path, version);

    data_path(path, sizeof(path), "truncated.bin");
    data_write_shard_raw(path, 20240520, 1, 100, 60, -1, 0, 1);
    const char* const truncated[] = {"truncated: header says 100 tokens but file holds 60", NULL};
    data_expect_init_error(path, T, DATA_VOCAB, path, truncated);

    data_path(path, sizeof(path), "long.bin");
    data_write_shard_raw(path, 20240520, 1, 100, 120, -1, 0, 0);
    const char* const too_long[] = {"header says 100 tokens but file holds 120", NULL};
    data_expect_init_error(path, T, DATA_VOCAB, path, too_long);

    data_path(path, sizeof(path), "few.bin");
    data_write_shard_raw(path, 20240520, 1, 8, 8, -1, 0, 0);
    const char* const few[] = {"too few tokens", "T = 8", NULL};
    data_expect_init_error(path, T, DATA_VOCAB, path, few);

    data_path(path, sizeof(path), "range.bin");
    data_write_shard_raw(path, 20240520, 1, 100, 100, 77, 50257, 0);
    const char* const range[] = {"token id 50257 at index 77 is out of range for vocabulary size 50257", NULL};
    data_expect_init_error(path, T, 50257, path, range);

    // a good shard before a bad one: the bad one is named, and the good one is unmapped again
    const int64_t ntok = 100;
    DataSet ds;
    if (data_make_set(&ds, "mixed", 1, &ntok) != 0) return;
    data_path(other, sizeof(other), "mixed_1.bin");
    data_write_shard_raw(other, 20240520, 1, 100, 99, -1, 0, 0);
    const char* const mixed[] = {"truncated", NULL};
    data_expect_init_error(ds.pattern, T, DATA_VOCAB, other, mixed);

    const char* const bad_args[] = {"bad arguments", NULL};
    data_expect_init_error(ds.pattern, 0, DATA_VOCAB, ds.pattern, bad_args);

    // writing into a directory that does not exist fails, naming the file
    char err[512] = "";
    uint16_t toks[4] = {1, 2, 3, 4};
    data_path(path, sizeof(path), "no_such_dir/x.bin");
    CHECK(write_token_shard(path, toks, 4, err, sizeof(err)) != 0);
    CHECKF(strstr(err, path) != NULL && strstr(err, "cannot create") != NULL, "%s", err);
}

// uint32 shards (llm.c's magic 20240801, version 7): the same ids as a uint16 shard give the same
// batches, unit for unit, at R = 1 and R = 2; ids above 65,535 load with a large vocabulary; an id
// >= V is named with its file and index; uint16 shards train a vocabulary over 65,536.
TEST(data_uint32_shards) {
    const int T = 8, B = 2, N = 301;
    char p16[600], p32[600], pbig[600], err[512];
    uint16_t* t16 = (uint16_t*)malloc(N * sizeof(uint16_t));
    uint32_t* t32 = (uint32_t*)malloc(N * sizeof(uint32_t));
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        t16[i] = (uint16_t)(x >> 48);
        t32[i] = t16[i];
    }
    data_path(p16, sizeof(p16), "w16_0.bin");
    data_path(p32, sizeof(p32), "w32_0.bin");
    CHECKF(write_token_shard(p16, t16, N, err, sizeof(err)) == 0, "%s", err);
    CHECKF(write_token_shard32(p32, t32, N, err, sizeof(err)) == 0, "%s", err);
    int32_t h[3];
    FILE* f = fopen(p32, "rb");
    CHECK(f && fread(h, 4, 3, f) == 3);
    if (f) fclose(f);
    CHECKF(h[0] == 20240801 && h[1] == 7 && h[2] == N, "uint32 header %d %d %d", h[0], h[1], h[2]);
    struct stat st;
    CHECK(stat(p32, &st) == 0 && st.st_size == 1024 + 4 * N);
    // the same ids in either width, V over 65,536 for both (uint16 shards no longer refused)
    const int V = 151936;
    for (int R = 1; R <= 2; R++) {
        DataLoader a, b;
        CHECKF(dataloader_init(&a, p16, B, T, V, 1, 9, err, sizeof(err)) == 0, "%s", err);
        CHECKF(dataloader_init(&b, p32, B, T, V, 1, 9, err, sizeof(err)) == 0, "%s", err);
        if (!a.inputs || !b.inputs) return;
        CHECK(a.shards[0].width == 2 && b.shards[0].width == 4);
        for (int step = 0; step < 12; step++)
            for (int r = 0; r < R; r++) {
                int64_t unit = (int64_t)step * R + r;
                CHECK(dataloader_load(&a, unit) == 0 && dataloader_load(&b, unit) == 0);
                CHECKF(memcmp(a.inputs, b.inputs, sizeof(int) * B * T) == 0 && memcmp(a.targets, b.targets, sizeof(int) * B * T) == 0,
                       "R=%d unit %lld: uint16 and uint32 shards give different batches", R, (long long)unit);
            }
        dataloader_free(&a);
        dataloader_free(&b);
    }
    // ids above 65,535: loaded as they are; one at V is an error naming the file and the index
    for (int i = 0; i < N; i++) t32[i] = 65536u + (uint32_t)i * 300u;
    data_path(pbig, sizeof(pbig), "w32big.bin");
    CHECKF(write_token_shard32(pbig, t32, N, err, sizeof(err)) == 0, "%s", err);
    DataLoader c;
    CHECKF(dataloader_init(&c, pbig, 1, T, 65536 + 300 * N, 0, 1, err, sizeof(err)) == 0, "%s", err);
    if (c.inputs) {
        CHECK(dataloader_load(&c, 3) == 0);
        for (int t = 0; t < T; t++) CHECK(c.inputs[t] == (int)t32[3 * T + t] && c.targets[t] == (int)t32[3 * T + t + 1]);
        CHECK(dataloader_shard_token(&c.shards[0], 5) == t32[5]);
        dataloader_free(&c);
    }
    const char* const range[] = {"token id 155536 at index 300 is out of range for vocabulary size 155536", NULL};
    data_expect_init_error(pbig, T, 65536 + 300 * 300, pbig, range);
    // a uint32 header over a file of the wrong size; a uint32 magic with the uint16 version
    data_path(pbig, sizeof(pbig), "w32bad.bin");
    data_write_shard_raw(pbig, 20240801, 7, 100, 100, -1, 0, 0);  // 200 bytes of tokens: 50 uint32
    const char* const size32[] = {"truncated: header says 100 tokens but file holds 50 (uint32 ids)", NULL};
    data_expect_init_error(pbig, T, V, pbig, size32);
    data_write_shard_raw(pbig, 20240801, 1, 50, 100, -1, 0, 0);
    const char* const ver32[] = {"unsupported version 1 for magic 20240801", "expected 7", NULL};
    data_expect_init_error(pbig, T, V, pbig, ver32);
    free(t16);
    free(t32);
}

// -----------------------------------------------------------------------------------------------
// tokenizer

// GPT-2's vocabulary as written by dev/make_vocab.py: known ids decode to known bytes.
TEST(data_tokenizer_gpt2) {
    Tokenizer tok;
    char err[512];
    CHECKF(tokenizer_init(&tok, "data/gpt2_tokenizer.bin", err, sizeof(err)) == 0, "%s", err);
    if (!tok.token_table) return;
    CHECK(tok.vocab_size == 50257 && tok.eot_token == 50256);
    const struct { uint32_t id; const char* bytes; } known[] = {
        {464, "The"}, {50256, "<|endoftext|>"}, {220, " "}, {198, "\n"}, {628, "\n\n"}, {15496, "Hello"}, {995, " world"},
        {13746, "Gen"}, {0, "!"},
    };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        int len;
        const char* s = tokenizer_decode(&tok, known[i].id, &len);
        CHECKF(len == (int)strlen(known[i].bytes) && memcmp(s, known[i].bytes, len) == 0, "id %u decodes to '%.*s'",
               known[i].id, len, s);
    }
    int len;
    CHECK(tokenizer_decode(&tok, 188, &len)[0] == 0 && len == 1);  // the byte 0 is a token of its own
    CHECK(strcmp(tokenizer_decode(&tok, 50257, &len), "<|?|>") == 0 && len == 5);
    CHECK(strcmp(tokenizer_decode(&tok, 0xFFFFFFFFu, NULL), "<|?|>") == 0);
    for (uint32_t id = 0; id < tok.vocab_size; id++) CHECKF(tok.token_len[id] >= 1, "token %u", id);
    tokenizer_free(&tok);
    CHECK(tok.token_table == NULL);
    tokenizer_free(&tok);  // a second free is harmless
}

// Malformed tokenizer files fail with a message naming the file and the problem; version 1
// files load without an EOT id; printing skips control bytes and keeps UTF-8 and whitespace.
TEST(data_tokenizer_files) {
    char path[600];
    const char* const toks[] = {"a", "\x01" "b\x1b" "c\x7f", "\xc3", "\xa9\t\n", "<|endoftext|>"};
    const int lens[] = {1, 5, 1, 3, 13};

    data_path(path, sizeof(path), "tok_missing.bin");
    data_expect_tokenizer_error(path, "cannot open");

    data_path(path, sizeof(path), "tok_short.bin");
    data_write_bytes(path, "\x40\xd7\x34\x01", 4);
    data_expect_tokenizer_error(path, "truncated header");

    data_path(path, sizeof(path), "tok_magic.bin");
    data_write_tokenizer(path, 20240520, 2, 5, 4, 5, toks, lens);  // a shard's magic
    data_expect_tokenizer_error(path, "wrong magic 20240520 (expected 20240328): not an llm.c GPT-2 tokenizer file");

    data_path(path, sizeof(path), "tok_version.bin");
    data_write_tokenizer(path, 20240328, 3, 5, 4, 5, toks, lens);
    data_expect_tokenizer_error(path, "unsupported version 3");

    data_path(path, sizeof(path), "tok_table.bin");
    data_write_tokenizer(path, 20240328, 2, 6, 4, 5, toks, lens);  // says 6 tokens, holds 5
    data_expect_tokenizer_error(path, "truncated token table");

    data_path(path, sizeof(path), "tok_cut.bin");
    data_write_tokenizer(path, 20240328, 2, 5, 4, 5, toks, lens);
    CHECK(truncate(path, 1024 + 2 + 6 + 2 + 4 + 5) == 0);  // cut inside the last token
    data_expect_tokenizer_error(path, "truncated token table");

    data_path(path, sizeof(path), "tok_long.bin");
    data_write_tokenizer(path, 20240328, 2, 4, 3, 5, toks, lens);  // says 4 tokens, holds 5
    data_expect_tokenizer_error(path, "14 unexpected bytes after the last of 4 tokens");

    data_path(path, sizeof(path), "tok_zero.bin");
    const int zero_lens[] = {1, 0, 1, 3, 13};
    data_write_tokenizer(path, 20240328, 2, 5, 4, 5, toks, zero_lens);
    data_expect_tokenizer_error(path, "token 1 has zero length");

    // the first 2000 bytes of the real file: header fine, table cut short
    FILE* f = fopen("data/gpt2_tokenizer.bin", "rb");
    CHECK(f != NULL);
    if (f) {
        char head[2000];
        CHECK(fread(head, 1, sizeof(head), f) == sizeof(head));
        fclose(f);
        data_path(path, sizeof(path), "tok_gpt2_cut.bin");
        data_write_bytes(path, head, sizeof(head));
        data_expect_tokenizer_error(path, "truncated token table");
    }

    // version 1: no EOT in the header
    Tokenizer tok;
    char err[512];
    data_path(path, sizeof(path), "tok_v1.bin");
    data_write_tokenizer(path, 20240328, 1, 5, 1234, 5, toks, lens);
    CHECKF(tokenizer_init(&tok, path, err, sizeof(err)) == 0, "%s", err);
    if (!tok.token_table) return;
    CHECK(tok.vocab_size == 5 && tok.eot_token == -1);

    // print: "\x01b\x1bc\x7f" -> "bc"; the two halves of "é" and the whitespace pass through
    char out_path[600];
    data_path(out_path, sizeof(out_path), "tok_print.txt");
    FILE* out = fopen(out_path, "wb");
    CHECK(out != NULL);
    if (!out) {
        tokenizer_free(&tok);
        return;
    }
    for (uint32_t id = 0; id < 6; id++) tokenizer_print(&tok, id, out);  // 5 is out of range
    fclose(out);
    char printed[64] = {0};
    out = fopen(out_path, "rb");
    size_t n = out ? fread(printed, 1, sizeof(printed) - 1, out) : 0;
    if (out) fclose(out);
    const char* want = "abc\xc3\xa9\t\n<|endoftext|><|?|>";
    CHECKF(n == strlen(want) && memcmp(printed, want, n) == 0, "printed '%s'", printed);
    tokenizer_free(&tok);
}

// -----------------------------------------------------------------------------------------------
// the committed data

// data/kjv_*.bin (dev/prepare_data.py) load with GPT-2's vocabulary, hold the token counts the
// script printed, one EOT per chapter, and decode to the Bible's first words.
TEST(data_kjv_shards) {
    const struct { const char* path; int64_t ntok; int64_t chapters; const char* start; } shards[] = {
        {"data/kjv_train.bin", 1085553, 1130,
         "<|endoftext|>Genesis 1\n\n  1 In the beginning God created the heaven and the earth.\n "},
        {"data/kjv_val.bin", 56291, 59,
         "<|endoftext|>Genesis 20\n\n  1 And Abraham journeyed from thence toward the south country, and dwell"},
    };
    Tokenizer tok;
    char err[512];
    CHECKF(tokenizer_init(&tok, "data/gpt2_tokenizer.bin", err, sizeof(err)) == 0, "%s", err);
    if (!tok.token_table) return;
    for (int i = 0; i < 2; i++) {
        DataLoader dl;
        CHECKF(dataloader_init(&dl, shards[i].path, 1, 20, 50257, 0, 0, err, sizeof(err)) == 0, "%s", err);
        if (!dl.inputs) continue;
        CHECKF(dataloader_total_tokens(&dl) == shards[i].ntok, "%s: %lld tokens", shards[i].path,
               (long long)dataloader_total_tokens(&dl));
        int64_t eots = 0;
        for (int64_t t = 0; t < dl.shards[0].ntok; t++) eots += dl.shards[0].tokens[t] == 50256;
        CHECKF(eots == shards[i].chapters, "%s: %lld documents", shards[i].path, (long long)eots);

        dataloader_load(&dl, 0);
        char text[512] = {0};
        int n = 0;
        for (int t = 0; t < 20; t++) {
            int len;
            const char* s = tokenizer_decode(&tok, (uint32_t)dl.inputs[t], &len);
            if (n + len >= (int)sizeof(text)) break;
            memcpy(text + n, s, len);
            n += len;
        }
        CHECKF(strcmp(text, shards[i].start) == 0, "%s starts '%s'", shards[i].path, text);
        dataloader_free(&dl);
    }
    tokenizer_free(&tok);
}

#endif // ZT_TEST_DATA_H
