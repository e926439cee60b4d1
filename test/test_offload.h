// test/test_offload.h — -offload cpu (offload.h): the optimizer state in host memory, AdamW on the
// host, bit-identical to the same run without offload; checkpoints independent of offload; the flag's
// refusals. Included by the CPU suite (test/test_main.cpp: the CPU device, MPI ranks) and by the GPU
// suite (test/test_gpu.cu: on the emulator the CUDA device, host and device memory kept apart, so a
// missing copy shows; its streams are synchronous, see offload.h for what it cannot check).
//
//   make test:       offload_bitwise samples the matrix z {1, 3} x R {1, 3} x GA {1, 3} (every value of
//                    each, 4 of the 8 cells); the emulator R = 1, z 1 and z 3
//   make test-long:  ZT_TEST_LONG=1 runs all 8 cells (and R = 3 on the emulator)
#ifndef ZT_TEST_OFFLOAD_H
#define ZT_TEST_OFFLOAD_H
#include "zero_runs.h" // defines: ZT_MODEL, zt_mpirun, zt_dir, ZtLog, zt_read_log, zt_hash_line

#ifdef ZT_CUDA_EMU
#define OFF_DEVICE "cuda"
#else
#define OFF_DEVICE "cpu"
#endif
static int off_long(void) { const char* e = getenv("ZT_TEST_LONG"); return e && atoi(e) > 0; }
static char off_out[1 << 20];

// One run of the tiny model: R ranks, ZeRO stage z, accumulation GA (B = 2), `steps` steps; fault: the
// value of ZT_FAULT ("" none). Fills the log and the hash line; returns the exit code.
static int off_run(const char* env, int R, int z, int GA, int steps, const char* offload, const char* dir, const char* extra,
                   ZtLog* lg, char* hash) {
    char flags[2048];
    snprintf(flags, sizeof(flags), ZT_MODEL " -device " OFF_DEVICE " -b 2 -d %d -x %d -l 1e-3 -v 0 -s 0 -z %d -offload %s -o %s -log-hash 1 %s",
             2 * ZT_T * R * GA, steps, z, offload, dir, extra);
    if (env[0]) setenv("ZT_FAULT", env, 1); // mpirun's ranks on this node inherit the environment
    int rc = zt_mpirun(R, flags, off_out, sizeof(off_out));
    if (env[0]) unsetenv("ZT_FAULT");
    if (hash) zt_hash_line(off_out, hash, 512);
    if (lg) zt_read_log(dir, lg);
    return rc;
}

static int off_same_log(const ZtLog* a, const ZtLog* b) {
    return a->n == b->n && !memcmp(a->loss, b->loss, sizeof(a->loss)) && !memcmp(a->norm, b->norm, sizeof(a->norm));
}

// One cell: the run without offload and with -offload cpu; losses, norms and the hashes of the
// parameters, master, m and v must be identical.
static void off_cell(int z, int R, int GA) {
    ZtLog ref, lg;
    char href[512] = "", h[512] = "", name[64];
    snprintf(name, sizeof(name), "off_none_z%d_R%d_GA%d", z, R, GA);
    int rc = off_run("", R, z, GA, 3, "none", zt_dir(name), "", &ref, href);
    CHECKF(rc == 0 && ref.n == 3, "z%d R%d GA%d without offload failed (%d):\n%s", z, R, GA, rc, off_out);
    snprintf(name, sizeof(name), "off_cpu_z%d_R%d_GA%d", z, R, GA);
    rc = off_run("", R, z, GA, 3, "cpu", zt_dir(name), "", &lg, h);
    CHECKF(rc == 0 && lg.n == 3, "z%d R%d GA%d -offload cpu failed (%d):\n%s", z, R, GA, rc, off_out);
    CHECKF(strstr(off_out, "offload cpu: master, m, v") != NULL, "no offload line in the output:\n%s", off_out);
    CHECKF(off_same_log(&lg, &ref), "z%d R%d GA%d: losses or norms differ with -offload cpu (step 3: %.9g vs %.9g)", z, R, GA,
           lg.loss[2], ref.loss[2]);
    CHECKF(href[0] && !strcmp(h, href), "z%d R%d GA%d: hashes differ with -offload cpu:\n  %s\n  %s", z, R, GA, h, href);
    if (!g_test_failed) printf("    " OFF_DEVICE " device z%d R%d GA%d: -offload cpu identical (%s)\n", z, R, GA, h);
}

#ifndef ZT_CUDA_EMU
TEST(offload_bitwise) {
    static const int cells[8][3] = {{1, 1, 3}, {3, 3, 1}, {1, 3, 3}, {3, 1, 3}, {1, 1, 1}, {3, 1, 1}, {1, 3, 1}, {3, 3, 3}};
    int n = off_long() ? 8 : 4;
    for (int i = 0; i < n; i++) off_cell(cells[i][0], cells[i][1], cells[i][2]);
}

// The comparison can fail: a block whose updated parameters never reach the device (a fault that
// skips the copy of block 2) changes the parameters' hash and the losses after it.
TEST(offload_missing_copy_detected) {
    ZtLog ref, lg;
    char href[512] = "", h[512] = "";
    int rc = off_run("", 1, 1, 1, 3, "none", zt_dir("offmiss_none"), "", &ref, href);
    CHECKF(rc == 0, "run failed (%d):\n%s", rc, off_out);
    rc = off_run("offload-skip-copy:2", 1, 1, 1, 3, "cpu", zt_dir("offmiss_cpu"), "", &lg, h);
    CHECKF(rc == 0, "run failed (%d):\n%s", rc, off_out);
    CHECKF(h[0] && strcmp(h, href) != 0 && !off_same_log(&lg, &ref), "a skipped copy went unnoticed:\n  %s\n  %s", h, href);
    printf("    skipped copy of block 2 seen: %s\n", h);
}

// -offload refused: with -z 0 (exit 2, saying why), with -z auto, an unknown value.
TEST(offload_flag_refusals) {
    static const struct { const char* flags; const char* want; } bad[] = {
        {"-z 0 -offload cpu", "-offload cpu needs -z 1, 2 or 3: under ZeRO-0 every rank holds the whole optimizer state"},
        {"-z auto -offload cpu", "needs a fixed -z 1, 2 or 3"},
        {"-z 1 -offload disk", "flag -offload: 'disk' is not none or cpu"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char cmd[8192];
        snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 %s --train -threads 1 -i %s -j %s " ZT_MODEL " -b 2 -x 1 -v 0 -s 0 %s",
                 g_test_self, zt_data(0), zt_data(1), bad[i].flags);
        int rc = test_run_cmd(cmd, off_out, sizeof(off_out));
        CHECKF(rc == 2 && strstr(off_out, bad[i].want), "%s: exit %d, expected 2 and \"%s\":\n%s", bad[i].flags, rc, bad[i].want, off_out);
    }
}

// Checkpoints stay offload-independent (the logical state files): a run with -offload cpu at R = 3,
// ZeRO-3, checkpoints at 3 and 6. Resumed from step 3 without offload at the same R (ZeRO-1): the same
// bits as the uninterrupted run (at GA = 1 the stages are bit-identical). Resumed at R = 1 (GA = 3,
// ZeRO-3) with and without offload: the same bits as each other. And back: the checkpoint that R = 1 run wrote at step 6 without offload, resumed with offload
// for 3 more steps, equals the same resume without it.
static void off_copy_ckpt(const char* from, const char* to, int drop_after) {
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof(cmd), "rm -rf %s && cp -r %s %s && rm -f %s/log.jsonl", to, from, to, to);
    test_run_cmd(cmd, NULL, 0);
    for (int s = drop_after + 1; s <= 12; s++) remove_checkpoint(to, s);
}

TEST(offload_checkpoint_resume) {
    ZtLog lg, ref;
    char hp[512] = "", h[512] = "", h2[512] = "";
    char P[PATH_MAX];
    snprintf(P, sizeof(P), "%s", zt_dir("offck_P"));
    // P: R = 3, ZeRO-3, -offload cpu, 6 steps, checkpoints at 3 and 6
    int rc = off_run("", 3, 3, 1, 6, "cpu", P, "-n 3", &ref, hp);
    CHECKF(rc == 0 && ref.n == 6, "the offloaded run failed (%d):\n%s", rc, off_out);
    // offload -> none, same R, another stage: bit-exact
    const char* d = zt_dir("offck_3none");
    off_copy_ckpt(P, d, 3);
    rc = off_run("", 3, 1, 1, 6, "none", d, "-n 3 -y 1", &lg, h);
    CHECKF(rc == 0 && strstr(off_out, "resum"), "resume without offload failed (%d):\n%s", rc, off_out);
    CHECKF(!strcmp(h, hp), "offload -> none at R = 3 differs:\n  %s\n  %s", h, hp);
    CHECKF(lg.loss[5] == ref.loss[5] && lg.norm[5] == ref.norm[5], "step 6 differs: loss %.9g vs %.9g", lg.loss[5], ref.loss[5]);
    // R = 3 -> R = 1, with and without offload: the same bits
    d = zt_dir("offck_1cpu");
    off_copy_ckpt(P, d, 3);
    rc = off_run("", 1, 3, 3, 6, "cpu", d, "-n 3 -y 1", &lg, h);
    CHECKF(rc == 0, "resume at R = 1 with offload failed (%d):\n%s", rc, off_out);
    char d1[PATH_MAX];
    snprintf(d1, sizeof(d1), "%s", zt_dir("offck_1none"));
    off_copy_ckpt(P, d1, 3);
    rc = off_run("", 1, 3, 3, 6, "none", d1, "-n 3 -y 1", &ref, h2); // (the same stage: with GA = 3 stages differ in bits)
    CHECKF(rc == 0, "resume at R = 1 without offload failed (%d):\n%s", rc, off_out);
    CHECKF(h[0] && !strcmp(h, h2) && off_same_log(&lg, &ref), "R = 1 resumes differ with and without offload:\n  %s\n  %s", h, h2);
    // and back: d1's checkpoint at 6, written without offload, resumed with and without it for 3 more steps
    char e1[PATH_MAX], e2[PATH_MAX];
    snprintf(e1, sizeof(e1), "%s", zt_dir("offck_back_cpu"));
    off_copy_ckpt(d1, e1, 6);
    rc = off_run("", 1, 3, 3, 9, "cpu", e1, "-y 1", &lg, h);
    CHECKF(rc == 0, "resume with offload from a checkpoint without failed (%d):\n%s", rc, off_out);
    snprintf(e2, sizeof(e2), "%s", zt_dir("offck_back_none"));
    off_copy_ckpt(d1, e2, 6);
    rc = off_run("", 1, 3, 3, 9, "none", e2, "-y 1", &ref, h2);
    CHECKF(rc == 0, "resume without offload failed (%d):\n%s", rc, off_out);
    CHECKF(h[0] && !strcmp(h, h2) && off_same_log(&lg, &ref), "none -> cpu differs from none -> none:\n  %s\n  %s", h, h2);
    if (!g_test_failed) printf("    offload -> none (R 3), R 3 -> 1 with and without, none -> offload: identical (%s)\n", h);
}
#else
// The emulated CUDA device: copies on their own stream, host and device memory apart.
TEST(offload_emu_bitwise) {
    off_cell(1, 1, 1);
    off_cell(3, 1, 3);
    if (off_long()) { off_cell(1, 3, 3); off_cell(3, 3, 1); }
}
#endif

#endif // ZT_TEST_OFFLOAD_H
