// test/test_checkpoint.h — reliability (issue 10): the checkpoint protocol (checkpoint.h: CRC32C,
// one history under roll-backs and failed saves, files of another save or corrupted files refused,
// the directory lock, -save-model, -io-timeout, leftovers, crash points), exit codes, and input
// validated every time it is read. The process-level cases run this binary as the trainer on a
// very small model (a few seconds a run), in test_bf16 only.

// CRC32C: the standard check value, the hardware and portable paths agree, chaining works.
TEST(ckpt_crc32c) {
    CHECK(crc32c_update(0, "123456789", 9) == 0xE3069283u); // RFC 3720's check value
    CHECK(crc32c_update(0, "", 0) == 0);
    uint64_t key = rng_key(5, 0x435243, 0);
    char buf[4099];
    for (int i = 0; i < (int)sizeof(buf); i++) buf[i] = (char)(rng_u64(key, (uint64_t)i) & 0xff);
    for (int n = 0; n < (int)sizeof(buf); n += 37) {
        uint32_t hw = crc32c_update_hw(0, buf, n, 1), sw = crc32c_update_hw(0, buf, n, 0);
        CHECKF(hw == sw, "length %d: hardware %08x, portable %08x", n, hw, sw);
        uint32_t chained = crc32c_update(crc32c_update(0, buf, n / 3), buf + n / 3, n - n / 3);
        CHECKF(chained == hw, "length %d: chained %08x, whole %08x", n, chained, hw);
    }
    // the cost, for docs/reliability.md (printed, not checked): GB/s of each path over 64 MiB
    size_t big = (size_t)64 << 20;
    char* mem = (char*)malloc(big);
    for (size_t i = 0; i < big; i++) mem[i] = (char)(i * 131 + (i >> 13));
    double gbs[2];
    for (int hw = 1; hw >= 0; hw--) {
        double t0 = test_now_s();
        volatile uint32_t c = crc32c_update_hw(0, mem, big, hw);
        (void)c;
        gbs[hw] = big / (test_now_s() - t0) / 1e9;
    }
    printf("    CRC32C: %.2f GB/s (%s), %.2f GB/s (portable slicing-by-8)\n", gbs[1],
           crc32c_hw_supported() ? "SSE4.2 crc32 instruction, chosen at run time" : "no SSE4.2 crc32 on this CPU: portable path", gbs[0]);
    free(mem);
}

// The model's identity in a state header comes from GPTConfig's field list (model.h: GPTCONFIG_FIELDS,
// which also declares the struct, so no field exists without its role): every CFG_FAMILY field moves
// the hash, no other field does, and the hashes of checkpoints written when the hash read the
// struct's own bytes are unchanged (pinned: Llama-3.2-1B's and Qwen2.5-0.5B's family fields).
TEST(ckpt_model_identity_from_field_list) {
    GPTConfig a, q;
    memset(&a, 0, sizeof(a));
    a.L = 16; a.C = 2048; a.NH = 32; a.V = 128256; a.Vp = 128256; a.maxT = 131072;
    a.family = FAMILY_LLAMA; a.NKV = 8; a.HD = 64; a.F = 8192; a.tied = 1; a.norm_eps = 1e-5f; a.rope_type = ROPE_LLAMA3;
    a.rope_theta = 500000.0; a.rope_factor = 32.0; a.rope_low_freq = 1.0; a.rope_high_freq = 4.0; a.rope_orig_maxT = 8192;
    memset(&q, 0, sizeof(q));
    q.family = FAMILY_LLAMA; q.NKV = 2; q.HD = 64; q.F = 4864; q.tied = 1; q.qkv_bias = 1; q.norm_eps = 1e-6f;
    q.rope_type = ROPE_DEFAULT; q.rope_theta = 1000000.0;
    int64_t ha[STATE_HEADER_INTS] = {0}, hq[STATE_HEADER_INTS] = {0};
    state_family_fields(&a, ha);
    state_family_fields(&q, hq);
    CHECKF(ha[STATE_H_FAMILY_HASH] == 9063598793096408139ll, "Llama-3.2-1B: %lld (written before: 9063598793096408139)", (long long)ha[STATE_H_FAMILY_HASH]);
    CHECKF(hq[STATE_H_FAMILY_HASH] == 463453769866228635ll, "Qwen2.5-0.5B: %lld (written before: 463453769866228635)", (long long)hq[STATE_H_FAMILY_HASH]);
    uint64_t base = model_family_hash(&a);
    int family_fields = 0;
#define MOVE_ONE(type, name, role)                                                                    \
    {                                                                                                 \
        GPTConfig m = a;                                                                              \
        m.name = (type)(m.name + 1);                                                                  \
        int moved = model_family_hash(&m) != base;                                                    \
        CHECKF(moved == (role == CFG_FAMILY), "GPTConfig." #name " (role %d) %s the identity", role, moved ? "moves" : "does not move"); \
        family_fields += role == CFG_FAMILY;                                                          \
    }
    GPTCONFIG_FIELDS(MOVE_ONE)
#undef MOVE_ONE
    CHECKF(family_fields >= 14, "%d CFG_FAMILY fields (14 when this test was written)", family_fields);
}

// A shard rewritten in place or truncated while the trainer runs: the next batch that touches it
// is an error naming the shard (an out-of-range id never reaches the model; no SIGBUS).
TEST(data_changed_mid_run) {
    char path[PATH_MAX], err[512];
    snprintf(path, sizeof(path), "%s/ck_mid_run.bin", test_tmpdir());
    uint16_t toks[200];
    for (int i = 0; i < 200; i++) toks[i] = (uint16_t)(i * 7 % 1000);
    CHECK(write_token_shard(path, toks, 200, err, sizeof(err)) == 0);
    DataLoader dl;
    CHECKF(dataloader_init(&dl, path, 2, 8, 1000, 0, 0, err, sizeof(err)) == 0, "%s", err);
    if (!dl.inputs) return;
    CHECK(dataloader_load(&dl, 0) == 0 && dl.inputs[3] == toks[3]);
    int fd = open(path, O_WRONLY);
    uint16_t bad = 60000;
    CHECK(fd >= 0 && pwrite(fd, &bad, 2, SHARD_HEADER_BYTES + 2 * 3) == 2); // token 3, in place
    CHECK(dataloader_load(&dl, 0) == -1);
    CHECKF(strstr(dl.err, path) && strstr(dl.err, "token id 60000 at index 3 is out of range"), "%s", dl.err);
    CHECK(ftruncate(fd, SHARD_HEADER_BYTES + 2 * 40) == 0); // 40 of 200 tokens left
    close(fd);
    CHECK(dataloader_load(&dl, 10) == -1); // samples 20, 21: tokens 160..176
    CHECKF(strstr(dl.err, path) && strstr(dl.err, "shorter than at start-up"), "%s", dl.err);
    dataloader_free(&dl);
}

// A shard too short for one sample (what -tokenize writes last when little text is left) is
// skipped, not refused; only when no shard holds a sample is that an error.
TEST(data_short_shard_skipped) {
    char dir[PATH_MAX], path[PATH_MAX], pattern[PATH_MAX], err[512];
    snprintf(dir, sizeof(dir), "%s/ck_short", test_tmpdir());
    mkdir(dir, 0755);
    uint16_t toks[100];
    for (int i = 0; i < 100; i++) toks[i] = (uint16_t)i;
    snprintf(path, sizeof(path), "%s/s_000000.bin", dir);
    CHECK(write_token_shard(path, toks, 100, err, sizeof(err)) == 0);
    snprintf(path, sizeof(path), "%s/s_000001.bin", dir);
    CHECK(write_token_shard(path, toks, 3, err, sizeof(err)) == 0);
    snprintf(pattern, sizeof(pattern), "%s/s_*.bin", dir);
    DataLoader dl;
    CHECKF(dataloader_init(&dl, pattern, 1, 8, 1000, 1, 1, err, sizeof(err)) == 0, "%s", err);
    CHECK(dl.total_samples == 12 && dataloader_short_shards(&dl) == 1);
    for (int u = 0; u < 30 && dl.inputs; u++) CHECK(dataloader_load(&dl, u) == 0);
    dataloader_free(&dl);
    snprintf(pattern, sizeof(pattern), "%s/s_000001.bin", dir); // alone: nothing to train on
    CHECK(dataloader_init(&dl, pattern, 1, 8, 1000, 1, 1, err, sizeof(err)) == -1 && strstr(err, "too few tokens"));
}

// ---- The trainer as a process. Precision does not enter these cases, so they run once, in
// test_bf16 (test_fp32 skips them).
#ifndef ENABLE_FP32

#define CK_SMALL "-e tiny -layers 1 -channels 32 -heads 2 -b 2 -t 16 -v 0 -s 0 -blas 0"

static char ck_out[1 << 20];

// Run the trainer with extra environment (e.g. "ZT_FAULT=..."; "" for none).
static int ck_run(const char* env, const char* flags) {
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "%s OMP_NUM_THREADS=1 %s --train %s", env, g_test_self, flags);
    return test_run_cmd(cmd, ck_out, sizeof(ck_out));
}

static const char* ck_dir(const char* name) {
    static char dir[4][PATH_MAX];
    static int k = 0;
    char* d = dir[k++ % 4];
    snprintf(d, PATH_MAX, "%s/ck_%s", test_tmpdir(), name);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", d);
    test_run_cmd(cmd, NULL, 0);
    return d;
}

static int ck_exists(const char* dir, const char* name) {
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0;
}

// The whole content of a file (malloc'd) and its size.
static char* ck_slurp(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (!f) { *n = 0; return NULL; }
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char* s = (char*)malloc(*n + 1);
    *n = fread(s, 1, *n, f);
    fclose(f);
    return s;
}
static void ck_spit(const char* path, const char* s, size_t n) {
    FILE* f = fopen(path, "wb");
    if (f) { fwrite(s, 1, n, f); fclose(f); }
}

// One history. A roll-back (-resume-step) moves the later checkpoints aside and says so; with -nk
// it never deletes the new run's checkpoints, and a later -y 1 follows LATEST, not the abandoned
// branch's larger step. A save that fails after a roll-back leaves no marker vouching for files
// of two runs: the step resumed is the last complete one of this history.
// Two roll-backs to the same step (same folder name and nonce) set their files aside in two folders:
// the second never replaces what the first set aside (rename() would, in one folder).
TEST(ckpt_set_aside_twice_keeps_both) {
    char dir[PATH_MAX], sub[2][PATH_MAX], p[PATH_MAX + 64], line[64];
    snprintf(dir, sizeof(dir), "%s/aside_twice", test_tmpdir());
    CHECK(mkdir(dir, 0755) == 0);
    for (int round = 0; round < 2; round++) {
        snprintf(p, sizeof(p), "%s/DONE_00000006", dir);
        FILE* f = fopen(p, "w");
        CHECK(f);
        fprintf(f, "round %d\n", round);
        fclose(f);
        CHECK(ckpt_set_aside(dir, 4, 0x1234, "test", NULL, sub[round], PATH_MAX) == 1);
    }
    CHECKF(strcmp(sub[0], sub[1]) != 0, "both roll-backs set aside into %s", sub[0]);
    for (int round = 0; round < 2; round++) {
        snprintf(p, sizeof(p), "%s/DONE_00000006", sub[round]);
        FILE* f = fopen(p, "r");
        CHECKF(f && fgets(line, sizeof(line), f) && line[6] == '0' + round, "%s does not hold round %d's file", p, round);
        if (f) fclose(f);
    }
}

TEST(ckpt_rollback_one_history) {
    const char* dir = ck_dir("history");
    char flags[4096];
    snprintf(flags, sizeof(flags), CK_SMALL " -x 6 -n 2 -nk 2 -o %s", dir);
    int rc = ck_run("", flags);
    CHECKF(rc == 0, "first run failed (%d):\n%s", rc, ck_out);
    CHECK(ck_exists(dir, "DONE_00000004") && ck_exists(dir, "DONE_00000006") && !ck_exists(dir, "DONE_00000002"));
    // roll back to 4, train to 5 with a checkpoint every step, keeping 2
    snprintf(flags, sizeof(flags), CK_SMALL " -x 5 -n 1 -nk 2 -o %s -y 1 -resume-step 4", dir);
    rc = ck_run("", flags);
    CHECKF(rc == 0, "roll-back run failed (%d):\n%s", rc, ck_out);
    CHECKF(strstr(ck_out, "rolled back to step 4: moved") && strstr(ck_out, "(complete: 6)"), "the roll-back does not say what it did:\n%s", ck_out);
    CHECKF(ck_exists(dir, "DONE_00000004") && ck_exists(dir, "DONE_00000005"), "-nk removed the new run's checkpoints:\n%s", ck_out);
    CHECK(!ck_exists(dir, "DONE_00000006") && !ck_exists(dir, "model_00000006.bin"));
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof(cmd), "ls %s/set_aside_00000004_*/DONE_00000006", dir);
    CHECKF(test_run_cmd(cmd, NULL, 0) == 0, "the abandoned step 6 was not kept aside");
    snprintf(flags, sizeof(flags), CK_SMALL " -x 6 -n 0 -o %s -y 1", dir); // (-n 0: no checkpoint of its own; -y 1 would take -n 1 -nk 2 from the checkpoint)
    rc = ck_run("", flags);
    CHECKF(rc == 0 && strstr(ck_out, "resume: step 5 "), "-y 1 did not follow LATEST to step 5 (%d):\n%s", rc, ck_out);
    // a second roll-back to 4 whose step-5 save fails (a full disk on the state file)
    snprintf(flags, sizeof(flags), CK_SMALL " -x 5 -n 1 -o %s -y 1 -resume-step 4", dir);
    rc = ck_run("ZT_FAULT=enospc:state_00000005", flags);
    CHECKF(strstr(ck_out, "checkpoint at step 5 is incomplete"), "the injected fault did not fail the save (%d):\n%s", rc, ck_out);
    CHECKF(!ck_exists(dir, "DONE_00000005"), "a DONE marker vouches for a step whose files failed");
    snprintf(flags, sizeof(flags), CK_SMALL " -x 4 -o %s -y 1", dir);
    rc = ck_run("", flags);
    CHECKF(rc == 0 && strstr(ck_out, "resume: step 4 "), "-y 1 after the failed save did not resume step 4 (%d):\n%s", rc, ck_out);
}

// A new run (no -y) in a directory with an older run's checkpoints moves them aside: a later -y 1
// resumes the new run, never the old one's larger step.
TEST(ckpt_new_run_in_old_dir) {
    const char* dir = ck_dir("reuse");
    char flags[4096];
    snprintf(flags, sizeof(flags), CK_SMALL " -x 4 -n 4 -o %s", dir);
    int rc = ck_run("", flags);
    CHECKF(rc == 0, "old run failed (%d):\n%s", rc, ck_out);
    snprintf(flags, sizeof(flags), CK_SMALL " -x 2 -n 2 -seed 5 -o %s", dir);
    rc = ck_run("", flags);
    CHECKF(rc == 0 && strstr(ck_out, "a new run (no -y 1) in this directory: moved"), "new run (%d):\n%s", rc, ck_out);
    snprintf(flags, sizeof(flags), "test \"$(grep -c '\"loss\"' %s/set_aside_*/log.jsonl)\" = 4", dir); // the old run's log, whole
    CHECKF(test_run_cmd(flags, NULL, 0) == 0, "the old run's log.jsonl was not set aside whole:\n%s", ck_out);
    snprintf(flags, sizeof(flags), CK_SMALL " -x 4 -seed 5 -o %s -y 1", dir);
    rc = ck_run("", flags);
    CHECKF(rc == 0 && strstr(ck_out, "resume: step 2 "), "-y 1 did not resume the new run's step 2 (%d):\n%s", rc, ck_out);
}

// Files that do not belong to the checkpoint's save, or that changed on disk, are refused with
// exit 2 and a message naming the file: a state file or model file of another run (same step),
// one flipped payload byte, one flipped bit of the piece count.
TEST(ckpt_mixed_or_corrupt_refused) {
    const char* a = ck_dir("mix_a");
    const char* b = ck_dir("mix_b");
    char flags[4096];
    snprintf(flags, sizeof(flags), CK_SMALL " -x 2 -n 2 -o %s", a);
    CHECK(ck_run("", flags) == 0);
    snprintf(flags, sizeof(flags), CK_SMALL " -x 2 -n 2 -seed 9 -o %s", b);
    CHECK(ck_run("", flags) == 0);
    char sa[PATH_MAX], sb[PATH_MAX], ma[PATH_MAX], mb[PATH_MAX];
    snprintf(sa, sizeof(sa), "%s/state_00000002_00000.bin", a);
    snprintf(sb, sizeof(sb), "%s/state_00000002_00000.bin", b);
    snprintf(ma, sizeof(ma), "%s/model_00000002.bin", a);
    snprintf(mb, sizeof(mb), "%s/model_00000002.bin", b);
    size_t n_sa, n_sb, n_ma, n_mb;
    char *state_a = ck_slurp(sa, &n_sa), *state_b = ck_slurp(sb, &n_sb), *model_a = ck_slurp(ma, &n_ma), *model_b = ck_slurp(mb, &n_mb);
    CHECK(state_a && state_b && model_a && model_b && n_sa == n_sb && n_sa > 4096);
    if (!(state_a && state_b && model_a && model_b && n_sa == n_sb && n_sa > 4096)) return;
    snprintf(flags, sizeof(flags), CK_SMALL " -x 2 -o %s -y 1", a);
    struct { const char* what; const char* expect; } cases[] = {
        {"state file of another run", "belongs to another save"},
        {"model file of another run", "is not the file DONE_00000002 vouches for"},
        {"one payload byte flipped", "fail their CRC32C"},
        {"one bit of the piece count flipped", "the header or piece table fails its CRC32C"},
    };
    for (int i = 0; i < 4; i++) {
        char* s = (char*)malloc(n_sa);
        memcpy(s, state_a, n_sa);
        if (i == 0) ck_spit(sa, state_b, n_sb);
        if (i == 1) ck_spit(ma, model_b, n_mb);
        if (i == 2) { s[n_sa - 5000] ^= 0x10; ck_spit(sa, s, n_sa); }
        if (i == 3) { s[8 * STATE_H_NPIECES] ^= 0x08; ck_spit(sa, s, n_sa); } // one bit: 8 more pieces, read from the payload
        int rc = ck_run("", flags);
        CHECKF(rc == 2 && strstr(ck_out, cases[i].expect) && strstr(ck_out, i == 1 ? "model_00000002.bin" : "state_00000002_00000.bin"),
               "%s: exit %d, expected 2 and '%s':\n%s", cases[i].what, rc, cases[i].expect, ck_out);
        ck_spit(sa, state_a, n_sa);
        ck_spit(ma, model_a, n_ma);
        free(s);
    }
    int rc = ck_run("", flags); // restored: resumes
    CHECKF(rc == 0 && strstr(ck_out, "resume: step 2 "), "the restored checkpoint does not resume (%d):\n%s", rc, ck_out);
    free(state_a); free(state_b); free(model_a); free(model_b);
}

// Two trainers cannot share an output directory: the second stops at start-up (exit 2).
TEST(ckpt_dir_locked) {
    const char* dir = ck_dir("lock");
    mkdir(dir, 0755);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0); // this process plays the other trainer
    char flags[4096];
    snprintf(flags, sizeof(flags), CK_SMALL " -x 1 -o %s", dir);
    int rc = ck_run("", flags);
    CHECKF(rc == 2 && strstr(ck_out, "another trainer is using this directory") && strstr(ck_out, dir), "exit %d:\n%s", rc, ck_out);
    close(fd);
    rc = ck_run("", flags);
    CHECKF(rc == 0, "after the lock is released: exit %d:\n%s", rc, ck_out);
}

// ---- Exit codes that tell the truth (docs/reliability.md "Exit codes").

// A failed checkpoint ends the run with exit code 1: at the end when a middle one failed (training
// goes on, the later checkpoint is written), at once when the final one failed.
TEST(exit_failed_checkpoint) {
    const char* dir = ck_dir("exit_ckpt");
    char flags[4096];
    snprintf(flags, sizeof(flags), CK_SMALL " -x 4 -n 2 -o %s", dir);
    int rc = ck_run("ZT_FAULT=enospc:state_00000002", flags);
    CHECKF(rc == 1 && strstr(ck_out, "1 checkpoint(s) failed") && ck_exists(dir, "DONE_00000004") && !ck_exists(dir, "DONE_00000002"),
           "a failed middle checkpoint: exit %d:\n%s", rc, ck_out);
    dir = ck_dir("exit_final");
    snprintf(flags, sizeof(flags), CK_SMALL " -x 2 -n 2 -o %s -log-hash 1", dir);
    rc = ck_run("ZT_FAULT=enospc:model_00000002", flags);
    CHECKF(rc == 1 && strstr(ck_out, "the final checkpoint (step 2) failed") && !strstr(ck_out, "hashes:"),
           "a failed final checkpoint: exit %d:\n%s", rc, ck_out);
}

// A log.jsonl that cannot be written (a full disk: /dev/full) ends the run with exit code 1.
TEST(exit_log_write_failed) {
    const char* dir = ck_dir("exit_log");
    mkdir(dir, 0755);
    char path[PATH_MAX], flags[4096];
    snprintf(path, sizeof(path), "%s/log.jsonl", dir);
    CHECK(symlink("/dev/full", path) == 0);
    snprintf(flags, sizeof(flags), CK_SMALL " -x 2 -o %s", dir);
    int rc = ck_run("", flags);
    CHECKF(rc == 1 && strstr(ck_out, "log.jsonl failed"), "exit %d:\n%s", rc, ck_out);
}

// A run that skips -max-skips consecutive steps (default 10) has diverged: exit code 4. A
// learning rate of 1e30 sends the weights to ~1e30 in one step; every later step is skipped.
TEST(exit_max_skips) {
    const char* dir = ck_dir("exit_skips");
    char flags[4096];
    snprintf(flags, sizeof(flags), CK_SMALL " -x 30 -l 1e30 -u 0 -k constant -o %s", dir);
    int rc = ck_run("", flags);
    CHECKF(rc == 4 && strstr(ck_out, "10 consecutive steps skipped") && strstr(ck_out, "step    11/30") && !strstr(ck_out, "step    12/30"),
           "default -max-skips: exit %d:\n%s", rc, ck_out);
    snprintf(flags, sizeof(flags), CK_SMALL " -x 30 -l 1e30 -u 0 -k constant -max-skips 2");
    rc = ck_run("", flags);
    CHECKF(rc == 4 && strstr(ck_out, "2 consecutive steps skipped"), "-max-skips 2: exit %d:\n%s", rc, ck_out);
}

// Non-finite numbers never reach the weights or a checkpoint: -l 1e39 (infinite as a float) is
// refused at start-up; a finite learning rate whose update overflows (3.4e38: every step's) is
// refused by the step itself, so the weights stay finite and unchanged, each step is skipped and
// -max-skips ends the run with exit code 4.
TEST(exit_nonfinite_refused) {
    const char* dir = ck_dir("exit_nan");
    char flags[4096];
    snprintf(flags, sizeof(flags), CK_SMALL " -x 2 -n 1 -l 1e39 -o %s", dir);
    int rc = ck_run("", flags);
    CHECKF(rc == 2 && strstr(ck_out, "flag -l: '1e39' is beyond a float's range"), "-l 1e39: exit %d:\n%s", rc, ck_out);
    CHECK(!ck_exists(dir, "DONE_00000001"));
    snprintf(flags, sizeof(flags), CK_SMALL " -x 4 -n 1 -u 0 -k constant -l 3.4e38 -max-skips 2 -o %s", dir);
    rc = ck_run("", flags);
    CHECKF(rc == 4 && strstr(ck_out, "step     1/4") && strstr(ck_out, "SKIPPED: non-finite update") &&
           strstr(ck_out, "2 consecutive steps skipped (non-finite gradient norm or update)") && !strstr(ck_out, "step     3/4"),
           "an overflowing update: exit %d:\n%s", rc, ck_out);
    CHECKF(ck_exists(dir, "DONE_00000001") && !strstr(ck_out, "non-finite value(s)"), "the unchanged, finite weights of step 1 were not saved:\n%s", ck_out);
}

// ---- A non-finite update never lands (adamw.cuh: op_adamw_check before the update, the flag
// summed over ranks). ZT_FAULT=lr-spike:step2[:rankN] runs step 2's AdamW with the learning rate
// FLT_MAX (finite; the norm is finite too) on one rank or all: its update overflows. The step is
// logged as skipped and said so, the run goes on (exit 0), and the checkpoints of steps 1 and 2 hold
// the same master, m and v on every rank, byte for byte past the header (whose step and nonce
// differ); step 2 counted no AdamW update (the checkpoint's count), steps 3 and 4 did.
static char* ck_state(const char* dir, int step, int rank, size_t* n) {
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", dir, step, rank);
    return ck_slurp(path, n);
}

static void ck_check_update_refused(const char* dir, int R, const char* what) {
    CHECKF(strstr(ck_out, "step     2/4") && strstr(strstr(ck_out, "step     2/4"), "SKIPPED: non-finite update (AdamW would overflow; weights unchanged)"),
           "%s: step 2 not logged as skipped:\n%s", what, ck_out);
    CHECKF(strstr(ck_out, "step     3/4") && !strstr(strstr(ck_out, "step     3/4"), "SKIPPED"), "%s: the run did not go on:\n%s", what, ck_out);
    for (int r = 0; r < R; r++) {
        size_t n1, n2, n4;
        char *s1 = ck_state(dir, 1, r, &n1), *s2 = ck_state(dir, 2, r, &n2), *s4 = ck_state(dir, 4, r, &n4);
        int ok = s1 && s2 && s4 && n1 == n2 && n1 > 8 * STATE_HEADER_INTS;
        CHECKF(ok, "%s: rank %d: checkpoint files missing", what, r);
        if (ok) {
            size_t h = 8 * STATE_HEADER_INTS;
            CHECKF(!memcmp(s1 + h, s2 + h, n1 - h), "%s: rank %d: step 2 changed the state (master, m or v)", what, r);
            int64_t t2 = ((int64_t*)s2)[STATE_H_ADAM_T], t4 = ((int64_t*)s4)[STATE_H_ADAM_T];
            CHECKF(t2 == 1 && t4 == 3, "%s: rank %d: AdamW updates counted at steps 2 and 4: %lld, %lld (expected 1, 3)", what, r, (long long)t2, (long long)t4);
        }
        free(s1); free(s2); free(s4);
    }
    char m1[PATH_MAX], m2[PATH_MAX];
    snprintf(m1, sizeof(m1), "%s/model_00000001.bin", dir);
    snprintf(m2, sizeof(m2), "%s/model_00000002.bin", dir);
    size_t a, b;
    char *x = ck_slurp(m1, &a), *y = ck_slurp(m2, &b);
    CHECKF(x && y && a == b && !memcmp(x, y, a), "%s: the parameters of steps 1 and 2 differ", what);
    free(x); free(y);
}

TEST(update_nonfinite_skipped) {
    const char* dir = ck_dir("update_spike");
    char flags[4096], cmd[8192];
    snprintf(flags, sizeof(flags), CK_SMALL " -x 4 -n 1 -o %s", dir);
    int rc = ck_run("ZT_FAULT=lr-spike:step2", flags);
    CHECKF(rc == 0, "R = 1: exit %d:\n%s", rc, ck_out);
    ck_check_update_refused(dir, 1, "R = 1");
    // the check proved by its bound (op_adamw_bound) on steps 3 and 4 (the maxima step 1's update
    // left; step 2 changed nothing); read on step 1 (maxima unknown at the start) and step 2 (lr FLT_MAX)
    CHECKF(strstr(ck_out, "the overflow check was proved by its bound on 2 step(s) (nothing read) and read the state on 2 "),
           "R = 1: the overflow check's proof count is not 2 proved, 2 read:\n%s", ck_out);
    // -offload cpu: the check runs on the host's copy of the state (offload_adamw_check)
    dir = ck_dir("update_spike_offload");
    snprintf(flags, sizeof(flags), CK_SMALL " -z 1 -offload cpu -x 4 -n 1 -o %s", dir);
    rc = ck_run("ZT_FAULT=lr-spike:step2", flags);
    CHECKF(rc == 0, "R = 1, -offload cpu: exit %d:\n%s", rc, ck_out);
    ck_check_update_refused(dir, 1, "R = 1, -offload cpu");
#ifdef USE_MPI
    // two ranks, ZeRO-2 (each rank updates its own shard): only rank 1's update overflows, both skip
    dir = ck_dir("update_spike_R2");
    snprintf(cmd, sizeof(cmd),
             "for v in $(env | grep -oE '^(OMPI|PMIX|OPAL)_[A-Za-z0-9_]*'); do unset $v; done; OMP_NUM_THREADS=1 ZT_FAULT=lr-spike:step2:rank1 "
             "mpirun -np 2 --oversubscribe --allow-run-as-root --mca mpi_yield_when_idle 1 -x ZT_FAULT %s --train -threads 1 " CK_SMALL " -z 2 -x 4 -n 1 -o %s",
             g_test_self, dir);
    rc = test_run_cmd(cmd, ck_out, sizeof(ck_out));
    CHECKF(rc == 0 && strstr(ck_out, "[rank 1] ZT_FAULT") && !strstr(ck_out, "[rank 0] ZT_FAULT"), "R = 2: exit %d:\n%s", rc, ck_out);
    ck_check_update_refused(dir, 2, "R = 2, ZeRO-2, rank 1's update");
#else
    (void)cmd;
#endif
}

// ---- Validate what is read, every time it is read.

// Flag values and model files beyond what the program can address are refused at start-up
// (exit 2, the flag or file named), not a crash: -g 2147483647 (int overflow in sampling), a
// huge -layers, and an llm.c header whose size computation overflowed 32 bits (3 * C) so that a
// 1,040-byte file passed the size check.
TEST(cli_bounds_refused) {
    char path[PATH_MAX], flags[4096];
    snprintf(path, sizeof(path), "%s/ck_overflow.bin", test_tmpdir());
    int hdr[260] = {20240326, 5, 429496716, 2, 1, 42949673, 858993460, 2147483647};
    FILE* f = fopen(path, "wb");
    CHECK(f && fwrite(hdr, 1, 1040, f) == 1040);
    if (f) fclose(f);
    struct { const char* flags; const char* expect; } cases[] = {
        {CK_SMALL " -x 1 -s 1 -g 2147483647", "flag -g: 2147483647 tokens to generate"},
        {CK_SMALL " -x 1 -layers 2000000000", "flag -layers 2000000000 is above 4096"},
        {CK_SMALL " -x 1 -channels 32768 -heads 256 -layers 4000", "parameters (L 4000, C 32768) is above"},
        {CK_SMALL " -x 1 -b 100000 -t 256", "flags -b x -t"},
        {"-x 0 -e OVERFLOW", "file is 1040 bytes but its header describes about"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(flags, sizeof(flags), "%s", cases[i].flags);
        char* p = strstr(flags, "OVERFLOW");
        if (p) snprintf(p, sizeof(flags) - (p - flags), "%s", path);
        int rc = ck_run("", flags);
        CHECKF(rc == 2 && strstr(ck_out, cases[i].expect), "'%s': exit %d, expected 2 and '%s':\n%s", flags, rc, cases[i].expect, ck_out);
    }
}

// -help under mpirun: every rank ends cleanly, exit code 0 (it was 1, with Open MPI's
// abnormal-termination banner, because the ranks exited without MPI_Finalize).
TEST(cli_mpirun_help) {
#ifndef USE_MPI
    TEST_SKIP("built without MPI");
#else
    char cmd[8192];
    snprintf(cmd, sizeof(cmd),
             "for v in $(env | grep -oE '^(OMPI|PMIX|OPAL)_[A-Za-z0-9_]*'); do unset $v; done; "
             "mpirun -np 2 --oversubscribe --allow-run-as-root %s --train -help", g_test_self);
    int rc = test_run_cmd(cmd, ck_out, sizeof(ck_out));
    CHECKF(rc == 0 && strstr(ck_out, "usage: ./train"), "exit %d:\n%s", rc, ck_out);
#endif
}

// Ranks that read different shards under the same flags (the same relative -i in two working
// directories) stop at start-up, exit 2, instead of training on different data.
TEST(cli_ranks_different_data) {
#ifndef USE_MPI
    TEST_SKIP("built without MPI");
#else
    char a[PATH_MAX], b[PATH_MAX], path[PATH_MAX], err[512], cmd[8192];
    snprintf(a, sizeof(a), "%s/ck_data_a", test_tmpdir());
    snprintf(b, sizeof(b), "%s/ck_data_b", test_tmpdir());
    mkdir(a, 0755);
    mkdir(b, 0755);
    uint16_t toks[400];
    for (int i = 0; i < 400; i++) toks[i] = (uint16_t)(i % 500);
    snprintf(path, sizeof(path), "%s/train.bin", a);
    CHECK(write_token_shard(path, toks, 400, err, sizeof(err)) == 0);
    snprintf(path, sizeof(path), "%s/train.bin", b);
    CHECK(write_token_shard(path, toks, 300, err, sizeof(err)) == 0);
    const char* flags = CK_SMALL " -threads 1 -x 1 -i train.bin -j \"\"";
    snprintf(cmd, sizeof(cmd),
             "for v in $(env | grep -oE '^(OMPI|PMIX|OPAL)_[A-Za-z0-9_]*'); do unset $v; done; OMP_NUM_THREADS=1 "
             "mpirun --oversubscribe --allow-run-as-root -np 1 -wdir %s %s --train %s : -np 1 -wdir %s %s --train %s",
             a, g_test_self, flags, b, g_test_self, flags);
    int rc = test_run_cmd(cmd, ck_out, sizeof(ck_out));
    CHECKF(rc == 2 && strstr(ck_out, "rank 1 reads different shards (-i / -j"), "exit %d:\n%s", rc, ck_out);
#endif
}

// -save-model last: only the final checkpoint carries the llm.c model file; the others resume
// from their state files alone. -save-model 0: none does.
TEST(ckpt_save_model_flag) {
    const char* dir = ck_dir("save_model");
    char flags[4096];
    snprintf(flags, sizeof(flags), CK_SMALL " -x 4 -n 2 -save-model last -o %s", dir);
    int rc = ck_run("", flags);
    CHECKF(rc == 0 && !ck_exists(dir, "model_00000002.bin") && ck_exists(dir, "model_00000004.bin") && ck_exists(dir, "DONE_00000002"),
           "-save-model last (%d):\n%s", rc, ck_out);
    snprintf(flags, sizeof(flags), CK_SMALL " -x 4 -o %s -y 1 -resume-step 2", dir);
    rc = ck_run("", flags);
    CHECKF(rc == 0 && strstr(ck_out, "resume: step 2 "), "resume without a model file (%d):\n%s", rc, ck_out);
    dir = ck_dir("save_model0");
    snprintf(flags, sizeof(flags), CK_SMALL " -x 2 -n 2 -save-model 0 -o %s", dir);
    rc = ck_run("", flags);
    CHECKF(rc == 0 && !ck_exists(dir, "model_00000002.bin") && ck_exists(dir, "DONE_00000002"), "-save-model 0 (%d):\n%s", rc, ck_out);
    snprintf(flags, sizeof(flags), CK_SMALL " -x 2 -save-model sometimes");
    rc = ck_run("", flags);
    CHECKF(rc == 2 && strstr(ck_out, "flag -save-model: 'sometimes'"), "bad value (%d):\n%s", rc, ck_out);
}

// Slow storage: rank 0 takes 3 s longer to write the model file (ZT_FAULT=slow) while rank 1
// waits in a collective. With -comm-timeout 1 the run still succeeds (that wait uses
// -io-timeout, auto: at least 10 minutes); with -io-timeout 1 it ends with exit code 3 and a
// message naming -io-timeout and the step being saved.
TEST(ckpt_io_timeout) {
#ifndef USE_MPI
    TEST_SKIP("built without MPI");
#else
    const char* dir = ck_dir("io_timeout");
    char cmd[8192];
    const char* launch = "for v in $(env | grep -oE '^(OMPI|PMIX|OPAL)_[A-Za-z0-9_]*'); do unset $v; done; "
                         "ZT_FAULT=slow:model_00000002 OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe --allow-run-as-root --mca mpi_yield_when_idle 1";
    snprintf(cmd, sizeof(cmd), "%s %s --train " CK_SMALL " -threads 1 -x 2 -n 2 -comm-timeout 1 -o %s", launch, g_test_self, dir);
    int rc = test_run_cmd(cmd, ck_out, sizeof(ck_out));
    CHECKF(rc == 0 && strstr(ck_out, "checkpoint: step 2 written"), "slow storage ended the run (%d):\n%s", rc, ck_out);
    dir = ck_dir("io_timeout1");
    snprintf(cmd, sizeof(cmd), "%s %s --train " CK_SMALL " -threads 1 -x 2 -n 2 -io-timeout 1 -o %s", launch, g_test_self, dir);
    rc = test_run_cmd(cmd, ck_out, sizeof(ck_out));
    CHECKF(rc == 3 && strstr(ck_out, "raise -io-timeout") && strstr(ck_out, "at step 2 "), "-io-timeout 1 (%d):\n%s", rc, ck_out);
#endif
}

// Slow storage under the evaluation: rank 1 takes 3 s longer to read its val batch
// (ZT_FAULT=slow-read:kjv_val, rank 1 only) while rank 0 waits in the evaluation's scalar sum. With
// -comm-timeout 1 the run still succeeds (that wait uses -io-timeout, auto: at least 10 minutes);
// with -io-timeout 1 it ends with exit code 3 and a message naming -io-timeout.
TEST(eval_io_timeout) {
#ifndef USE_MPI
    TEST_SKIP("built without MPI");
#else
    char cmd[8192];
    const char* flags = "-e tiny -layers 1 -channels 32 -heads 2 -b 2 -t 16 -s 0 -blas 0 -threads 1 -x 0 -v 1 -m 1";
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof(cmd),
                 "for v in $(env | grep -oE '^(OMPI|PMIX|OPAL)_[A-Za-z0-9_]*'); do unset $v; done; OMP_NUM_THREADS=1 "
                 "mpirun --oversubscribe --allow-run-as-root --mca mpi_yield_when_idle 1 -np 1 %s --train %s %s : "
                 "-np 1 env ZT_FAULT=slow-read:kjv_val %s --train %s %s",
                 g_test_self, flags, k ? "-io-timeout 1" : "-comm-timeout 1", g_test_self, flags, k ? "-io-timeout 1" : "-comm-timeout 1");
        int rc = test_run_cmd(cmd, ck_out, sizeof(ck_out));
        if (k == 0) CHECKF(rc == 0 && strstr(ck_out, "val loss"), "a slow val read ended the run under -comm-timeout 1 (%d):\n%s", rc, ck_out);
        else CHECKF(rc == 3 && strstr(ck_out, "raise -io-timeout"), "-io-timeout 1 (%d):\n%s", rc, ck_out);
    }
#endif
}

// After a crash: temporary files and the files of a step without DONE are removed at start-up
// (and said so); a resumed run's log.jsonl has each step once (the steps trained again replace
// the old records instead of being appended twice).
TEST(ckpt_leftovers_and_log) {
    const char* dir = ck_dir("leftovers");
    char flags[4096], path[PATH_MAX];
    snprintf(flags, sizeof(flags), CK_SMALL " -x 4 -n 2 -o %s", dir);
    int rc = ck_run("", flags);
    CHECKF(rc == 0, "first run (%d):\n%s", rc, ck_out);
    snprintf(path, sizeof(path), "%s/DONE_00000004", dir);
    CHECK(unlink(path) == 0); // as if the run died before DONE
    snprintf(path, sizeof(path), "%s/state_00000004_00001.bin.tmp.999", dir);
    FILE* f = fopen(path, "w");
    if (f) { fputs("half", f); fclose(f); }
    snprintf(flags, sizeof(flags), CK_SMALL " -x 4 -n 2 -o %s -y 1", dir);
    rc = ck_run("", flags);
    CHECKF(rc == 0 && strstr(ck_out, "removed 1 temporary file(s) and 2 file(s) of incomplete checkpoints") && strstr(ck_out, "resume: step 2 "),
           "resume after a crash (%d):\n%s", rc, ck_out);
    CHECK(!ck_exists(dir, "state_00000004_00001.bin.tmp.999") && ck_exists(dir, "DONE_00000004"));
    snprintf(path, sizeof(path), "%s/log.jsonl", dir);
    f = fopen(path, "r");
    int count[5] = {0};
    char line[8192];
    while (f && fgets(line, sizeof(line), f)) {
        int s;
        if (sscanf(line, "{\"step\": %d,", &s) == 1 && strstr(line, "\"loss\"") && s >= 1 && s <= 4) count[s]++;
    }
    if (f) fclose(f);
    CHECKF(count[1] == 1 && count[2] == 1 && count[3] == 1 && count[4] == 1, "log.jsonl records per step 1..4: %d %d %d %d",
           count[1], count[2], count[3], count[4]);
}

// ---- Faults at fixed points of a save (ZT_FAULT=crash:POINT:stepS, SIGKILL), deterministic:
// each run dies while saving step 4, a new process resumes (from step 2: no DONE for step 4) and
// ends bitwise where the uninterrupted run ends, with no temporary file left behind.
static int ck_tmp_files(const char* dir) {
    char cmd[PATH_MAX + 64], out[64];
    snprintf(cmd, sizeof(cmd), "ls %s | grep -c '\\.tmp\\.'", dir);
    test_run_cmd(cmd, out, sizeof(out));
    return atoi(out);
}

static void ck_crash_and_resume(const char* launch, const char* fault, const char* ref_hash, const char* name) {
    const char* dir = ck_dir(name);
    char cmd[8192], hash[512];
    snprintf(cmd, sizeof(cmd), "export ZT_FAULT=%s; %s " CK_SMALL " -x 4 -n 2 -o %s", fault, launch, dir);
    int rc = test_run_cmd(cmd, ck_out, sizeof(ck_out));
    CHECKF(rc != 0 && strstr(ck_out, "checkpoint: step 2 written") && !strstr(ck_out, "checkpoint: step 4 written"),
           "%s: the fault did not end the run at step 4 (exit %d):\n%s", fault, rc, ck_out);
    snprintf(cmd, sizeof(cmd), "export ZT_FAULT=; %s " CK_SMALL " -x 4 -n 2 -o %s -y 1 -log-hash 1", launch, dir);
    rc = test_run_cmd(cmd, ck_out, sizeof(ck_out));
    cli_hash_line(ck_out, hash, sizeof(hash));
    CHECKF(rc == 0 && strstr(ck_out, "resume: step 2 "), "%s: resume (exit %d):\n%s", fault, rc, ck_out);
    CHECKF(hash[0] && !strcmp(hash, ref_hash), "%s: not bitwise the uninterrupted run:\n  %s\n  %s", fault, ref_hash, hash);
    CHECKF(ck_tmp_files(dir) == 0 && ck_exists(dir, "DONE_00000004"), "%s: temporary files left, or step 4 not saved", fault);
}

TEST(ckpt_crash_points) {
    char launch[1024], ref[512], cmd[8192];
    snprintf(launch, sizeof(launch), "OMP_NUM_THREADS=1 %s --train", g_test_self);
    snprintf(cmd, sizeof(cmd), "%s " CK_SMALL " -x 4 -log-hash 1", launch);
    int rc = test_run_cmd(cmd, ck_out, sizeof(ck_out));
    cli_hash_line(ck_out, ref, sizeof(ref));
    CHECKF(rc == 0 && ref[0], "reference run (%d):\n%s", rc, ck_out);
    const char* faults[] = {"crash:before-write:step4", "crash:before-fsync:step4", "crash:before-rename:step4", "crash:before-done:step4"};
    for (int i = 0; i < 4; i++) {
        char name[32];
        snprintf(name, sizeof(name), "crash%d", i);
        ck_crash_and_resume(launch, faults[i], ref, name);
    }
#ifdef USE_MPI
    // two ranks: rank 1 dies between its temporary file and its rename, rank 0 has renamed its files
    snprintf(launch, sizeof(launch),
             "for v in $(env | grep -oE '^(OMPI|PMIX|OPAL)_[A-Za-z0-9_]*'); do unset $v; done; OMP_NUM_THREADS=1 "
             "mpirun -np 2 --oversubscribe --allow-run-as-root --mca mpi_yield_when_idle 1 -x ZT_FAULT %s --train -threads 1", g_test_self);
    snprintf(cmd, sizeof(cmd), "export ZT_FAULT=; %s " CK_SMALL " -x 4 -log-hash 1", launch);
    rc = test_run_cmd(cmd, ck_out, sizeof(ck_out));
    cli_hash_line(ck_out, ref, sizeof(ref));
    CHECKF(rc == 0 && ref[0], "reference run at R = 2 (%d):\n%s", rc, ck_out);
    ck_crash_and_resume(launch, "crash:before-rename:rank1:step4", ref, "crash_rank1");
#endif
}

// ---- Wall-clock kills: the trainer (a checkpoint every step, -n 1) gets SIGKILL 0, 50 and 200 ms
// after its first "checkpoint: step" line, wherever it then is (training, writing a state file,
// between DONE and LATEST, removing old checkpoints for -nk). Whatever moment the kill lands, -y 1
// resumes the step LATEST names (its DONE is there: the protocol writes LATEST after DONE), leaves
// no temporary file and ends bitwise where the uninterrupted run ends. (If the run finished before
// the kill, the resume starts at its last step and must still give the same hashes.)
#define CK_WALLCLOCK CK_SMALL " -x 12 -n 1 -nk 2 -save-model 0"

// Start `self --train flags` with stdout and stderr into out_path; the pid is the trainer's own.
static pid_t ck_spawn(const char* flags, const char* out_path) {
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "exec %s --train %s > %s 2>&1", g_test_self, flags, out_path);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("OMP_NUM_THREADS", "1", 1);
        unsetenv("ZT_FAULT");
        execl("/bin/sh", "sh", "-c", cmd, (char*)NULL);
        _exit(127);
    }
    return pid;
}

// The step a marker file (DONE_* or LATEST) names, or -1.
static int ck_marker_step(const char* dir, const char* name) {
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    size_t n;
    char* s = ck_slurp(path, &n);
    const char* p = s ? strstr(s, "\nstep ") : NULL;
    int step = p ? atoi(p + 6) : -1;
    free(s);
    return step;
}

TEST(ckpt_wallclock_kills) {
    char cmd[8192], ref[512], hash[512], flags[4096], out_path[PATH_MAX], name[64];
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 %s --train " CK_SMALL " -x 12 -log-hash 1", g_test_self);
    int rc = test_run_cmd(cmd, ck_out, sizeof(ck_out));
    cli_hash_line(ck_out, ref, sizeof(ref));
    CHECKF(rc == 0 && ref[0], "reference run (%d):\n%s", rc, ck_out);
    const int delays_ms[3] = {0, 50, 200};
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof(name), "wallclock%d", k);
        const char* dir = ck_dir(name);
        snprintf(out_path, sizeof(out_path), "%s/ck_wallclock%d.out", test_tmpdir(), k);
        snprintf(flags, sizeof(flags), CK_WALLCLOCK " -o %s", dir);
        pid_t pid = ck_spawn(flags, out_path);
        CHECK(pid > 0);
        if (pid <= 0) return;
        int status = 0, exited = 0, seen = 0;
        for (int t = 0; t < 30000 && !seen && !exited; t++) { // poll every 1 ms, at most 30 s
            size_t n;
            char* s = ck_slurp(out_path, &n);
            seen = s && strstr(s, "checkpoint: step ");
            free(s);
            if (!seen) {
                exited = waitpid(pid, &status, WNOHANG) == pid;
                usleep(1000);
            }
        }
        if (!exited) {
            usleep(1000 * delays_ms[k]);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
        size_t n;
        char* s = ck_slurp(out_path, &n);
        CHECKF(seen, "kill %d: no checkpoint line before the run ended (status %d):\n%s", k, status, s ? s : "");
        free(s);
        int latest = ck_marker_step(dir, "LATEST");
        char done[32];
        snprintf(done, sizeof(done), "DONE_%08d", latest);
        CHECKF(latest >= 1 && ck_marker_step(dir, done) == latest, "kill %d at +%d ms: LATEST (step %d) has no DONE", k, delays_ms[k], latest);
        snprintf(flags, sizeof(flags), CK_WALLCLOCK " -o %s -y 1 -log-hash 1", dir);
        rc = ck_run("", flags);
        cli_hash_line(ck_out, hash, sizeof(hash));
        char want[64];
        snprintf(want, sizeof(want), "resume: step %d ", latest);
        printf("    kill at +%d ms (%s): resumed from step %d\n", delays_ms[k], WIFSIGNALED(status) ? "killed" : "had ended", latest);
        CHECKF(rc == 0 && strstr(ck_out, want), "kill %d at +%d ms: resume (exit %d, want \"%s\"):\n%s", k, delays_ms[k], rc, want, ck_out);
        CHECKF(hash[0] && !strcmp(hash, ref), "kill %d at +%d ms: not bitwise the uninterrupted run:\n  %s\n  %s", k, delays_ms[k], ref, hash);
        CHECKF(ck_tmp_files(dir) == 0 && ck_exists(dir, "DONE_00000012"), "kill %d: temporary files left, or step 12 not saved", k);
    }
}

// A checkpoint write that fails past open(): a full disk at the first write, EIO from fsync, EIO
// from the rename, for a state file, the model file, DONE and LATEST (ZT_FAULT, at the final save of
// step 4). The run ends with exit code 1 and a message naming the file; no temporary file is left;
// the previous checkpoint (step 2) stays intact: -y 1 resumes it (every chunk's CRC32C verified).
TEST(ckpt_write_faults) {
    struct { const char* fault; const char* file; const char* why; } cases[] = {
        {"enospc-write:state_00000004", "state_00000004_00000.bin", "No space left on device"},
        {"eio-fsync:model_00000004", "model_00000004.bin", "Input/output error"},
        {"eio-rename:state_00000004", "state_00000004_00000.bin", "Input/output error"},
        {"enospc-write:DONE_00000004", "DONE_00000004", "No space left on device"},
        {"eio-rename:LATEST:step4", "LATEST", "Input/output error"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char name[32], env[128], flags[4096];
        snprintf(name, sizeof(name), "wfault%d", (int)i);
        const char* dir = ck_dir(name);
        snprintf(env, sizeof(env), "ZT_FAULT=%s", cases[i].fault);
        snprintf(flags, sizeof(flags), CK_SMALL " -x 4 -n 2 -o %s", dir);
        int rc = ck_run(env, flags);
        char want[256];
        snprintf(want, sizeof(want), "%s failed: %s", cases[i].file, cases[i].why);
        CHECKF(rc == 1 && strstr(ck_out, want) && strstr(ck_out, "the final checkpoint (step 4) failed") && strstr(ck_out, "checkpoint: step 2 written"),
               "%s: exit %d, expected 1 and '%s':\n%s", cases[i].fault, rc, want, ck_out);
        CHECKF(ck_tmp_files(dir) == 0, "%s: temporary files left", cases[i].fault);
        CHECKF(ck_marker_step(dir, "LATEST") == 2, "%s: LATEST names step %d, not the previous checkpoint 2", cases[i].fault, ck_marker_step(dir, "LATEST"));
        snprintf(flags, sizeof(flags), CK_SMALL " -x 4 -o %s -y 1", dir);
        rc = ck_run("", flags);
        CHECKF(rc == 0 && strstr(ck_out, "resume: step 2 "), "%s: the previous checkpoint does not resume (%d):\n%s", cases[i].fault, rc, ck_out);
    }
}

#endif // ENABLE_FP32
