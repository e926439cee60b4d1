// test/zero_runs.h — running the trainer as R processes under mpirun on a tiny model, and reading
// back what the runs logged (losses, norms, collectives, memory, hashes). Shared by the CPU suite's
// ZeRO tests (test/test_zero.h) and the GPU suite's multi-rank cases (test/gpu_multirank.h).
// Needs g_test_self (test/test_model.h): the binary that mpirun starts as the trainer.
#ifndef ZT_TEST_ZERO_RUNS_H
#define ZT_TEST_ZERO_RUNS_H

// A tiny model: V = 97 (padded 128), L = 3 (so that a layer buffer is reused by another layer: with
// L = 2 each layer has a slot of its own), C = 28 (tensors padded to 32), NH = 4, max T = 62,
// T = 16. Its blocks are 673 and 1225 units of 8 elements: neither a multiple of 2, 3 or 4, so
// every R = 2..4 needs tail padding (zero_block_sizes_need_tail_padding).
#define ZT_V 97
#define ZT_L 3
#define ZT_C 28
#define ZT_NH 4
#define ZT_MAXT 62
#define ZT_T 16
#define ZT_MODEL "-e tiny -layers 3 -channels 28 -heads 4 -vocab 97 -max-seq 62 -t 16 -poison 1 -blas 0"

// Small-vocabulary shards made from the KJV tokens (mod V): structured text the tiny model learns.
static const char* zt_data(int val) {
    static char train[PATH_MAX], valp[PATH_MAX];
    if (!train[0]) {
        snprintf(train, sizeof(train), "%s/zt_train.bin", test_tmpdir());
        snprintf(valp, sizeof(valp), "%s/zt_val.bin", test_tmpdir());
        DataLoader dl;
        char err[512];
        if (dataloader_init(&dl, "data/kjv_train.bin", 1, 16, 50257, 0, 0, err, sizeof(err))) { printf("    %s\n", err); exit(1); }
        const uint16_t* src = dl.shards[0].tokens;
        int64_t n = 200000, nv = 20000;
        uint16_t* t = (uint16_t*)malloc(sizeof(uint16_t) * (n + nv));
        for (int64_t i = 0; i < n + nv; i++) t[i] = (uint16_t)(src[i] % ZT_V);
        if (write_token_shard(train, t, n, err, sizeof(err)) || write_token_shard(valp, t + n, nv, err, sizeof(err))) { printf("    %s\n", err); exit(1); }
        free(t);
        dataloader_free(&dl);
    }
    return val ? valp : train;
}

// This process may itself be an MPI singleton (the in-process tests start one): its Open MPI /
// PMIx variables must not leak into an mpirun we start, or that job believes it is part of ours.
#define ZT_CLEAN_ENV "for v in $(env | grep -oE '^(OMPI|PMIX|OPAL)_[A-Za-z0-9_]*'); do unset $v; done; "

// Run R ranks of this binary as the trainer; returns mpirun's exit code.
static int zt_mpirun(int R, const char* flags, char* out, size_t cap) {
    char cmd[8192];
    snprintf(cmd, sizeof(cmd),
             ZT_CLEAN_ENV "OMP_NUM_THREADS=1 mpirun -np %d --oversubscribe --allow-run-as-root --mca mpi_yield_when_idle 1 "
             "%s --train -threads 1 -i %s -j %s %s",
             R, g_test_self, zt_data(0), zt_data(1), flags);
    return test_run_cmd(cmd, out, cap);
}

// A fresh output directory for one run.
static const char* zt_dir(const char* name) {
    static char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/%s", test_tmpdir(), name);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    test_run_cmd(cmd, NULL, 0);
    return dir;
}

static char* zt_read_file(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* s = (char*)malloc(n + 1);
    s[fread(s, 1, n, f)] = 0;
    fclose(f);
    return s;
}

// Per-step values of a run's log.jsonl: loss and norm of step s (1-based) at index s-1.
typedef struct { int n; double loss[64], norm[64]; int64_t count[64][COLL_KINDS], bytes[64][COLL_KINDS]; double val[64]; int nval; } ZtLog;

static int zt_read_log(const char* dir, ZtLog* lg) {
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/log.jsonl", dir);
    char* s = zt_read_file(path);
    memset(lg, 0, sizeof(*lg));
    if (!s) return -1;
    for (char* line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
        int step;
        if (sscanf(line, "{\"step\": %d,", &step) == 1 && strstr(line, "\"loss\": ") && strstr(line, "\"norm\": ") && step >= 1 && step <= 64) {
            lg->loss[step - 1] = atof(strstr(line, "\"loss\": ") + 8);
            lg->norm[step - 1] = atof(strstr(line, "\"norm\": ") + 8);
            for (int k = 0; k < COLL_KINDS; k++) {
                char key[64];
                snprintf(key, sizeof(key), "\"%s\": [", coll_name[k]);
                char* p = strstr(line, key);
                if (p) sscanf(p + strlen(key), "%lld, %lld", (long long*)&lg->count[step - 1][k], (long long*)&lg->bytes[step - 1][k]);
            }
            if (step > lg->n) lg->n = step;
        } else if (sscanf(line, "{\"step\": %d,", &step) == 1 && strstr(line, "\"val_loss\": ") && lg->nval < 64) {
            lg->val[lg->nval++] = atof(strstr(line, "\"val_loss\": ") + 12);
        }
    }
    free(s);
    return 0;
}

// The memory record ("start" or "end") of a run: bytes per tag (and vmhwm) per rank.
static int zt_read_memory(const char* dir, const char* when, double mem[][TAG_COUNT + 1], int R) {
    char path[PATH_MAX], key[64];
    snprintf(path, sizeof(path), "%s/log.jsonl", dir);
    snprintf(key, sizeof(key), "{\"memory\": \"%s\"", when);
    char* s = zt_read_file(path);
    if (!s) return -1;
    char* line = strstr(s, key);
    int got = 0;
    for (int r = 0; line && r < R; r++) {
        line = strchr(line + 1, '{');
        if (!line) break;
        for (int t = 0; t <= TAG_COUNT; t++) {
            char k[64];
            snprintf(k, sizeof(k), "\"%s\": ", t < TAG_COUNT ? mem_tag_name[t] : "vmhwm");
            char* p = strstr(line, k);
            mem[r][t] = p ? atof(p + strlen(k)) : -1;
        }
        got++;
    }
    free(s);
    return got == R ? 0 : -1;
}

// The "hashes: ..." line a run printed with -log-hash 1 ("" when none).
static void zt_hash_line(const char* out, char* line, size_t cap) {
    const char* p = strstr(out, "hashes: ");
    line[0] = 0;
    if (!p) return;
    size_t n = strcspn(p, "\n");
    snprintf(line, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
}

#endif // ZT_TEST_ZERO_RUNS_H
