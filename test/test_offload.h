// test/test_offload.h — -offload cpu (offload.h): the optimizer state in host memory, AdamW on the
// host, bit-identical to the same run without offload; checkpoints independent of offload; the flag's
// refusals. Included by the CPU suite (test/test_main.cpp: the CPU device, MPI ranks) and by the GPU
// suite (test/test_gpu.cu: on the emulator the CUDA device, host and device memory kept apart, so a
// missing copy shows; its streams are synchronous, see offload.h for what it cannot check).
//
//   make test:       offload_bitwise samples the matrix z {1, 3} x R {1, 3} x GA {1, 3} (every value of
//                    each, 4 of the 8 cells; 2 in the FP32 build), each cell none / cpu / nvme; the
//                    emulator R = 1 at z 1 GA 3 (none / cpu / nvme) and z 3 GA 3 (none / cpu; FP32:
//                    z 1 only), and z 3 GA 1 (offload_emu_grad_copy_faults); the gradient copy's
//                    faults (offload_grad_copy_faults, offload_emu_grad_copy_faults)
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

// One run of the tiny model: R ranks, ZeRO stage z (< 0: auto), accumulation GA (B = 2), `steps` steps; fault: the
// value of ZT_FAULT ("" none). Fills the log and the hash line; returns the exit code.
static int off_run(const char* env, int R, int z, int GA, int steps, const char* offload, const char* dir, const char* extra,
                   ZtLog* lg, char* hash) {
    char flags[2048], zs[16];
    snprintf(zs, sizeof(zs), z < 0 ? "auto" : "%d", z); // z < 0: -z auto
    snprintf(flags, sizeof(flags), ZT_MODEL " -device " OFF_DEVICE " -b 2 -d %d -x %d -l 1e-3 -v 0 -s 0 -z %s -offload %s -o %s -log-hash 1 %s",
             2 * ZT_T * R * GA, steps, zs, offload, dir, extra);
    if (env[0]) setenv("ZT_FAULT", env, 1); // mpirun's ranks on this node inherit the environment
    int rc = zt_mpirun(R, flags, off_out, sizeof(off_out));
    if (env[0]) unsetenv("ZT_FAULT");
    if (hash) zt_hash_line(off_out, hash, 512);
    if (lg) zt_read_log(dir, lg);
    return rc;
}

// Each flag line refused with exit 2 and its message (one run of the tiny model each).
typedef struct { const char* flags; const char* want; } OffRefusal;
static void off_refusals(const OffRefusal* bad, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char cmd[8192];
        snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 %s --train -threads 1 -i %s -j %s " ZT_MODEL " -b 2 -x 1 -v 0 -s 0 %s",
                 g_test_self, zt_data(0), zt_data(1), bad[i].flags);
        int rc = test_run_cmd(cmd, off_out, sizeof(off_out));
        CHECKF(rc == 2 && strstr(off_out, bad[i].want), "%s: exit %d, expected 2 and \"%s\":\n%s", bad[i].flags, rc, bad[i].want, off_out);
    }
}

static int off_same_log(const ZtLog* a, const ZtLog* b) {
    return a->n == b->n && !memcmp(a->loss, b->loss, sizeof(a->loss)) && !memcmp(a->norm, b->norm, sizeof(a->norm));
}

// -offload nvme with its file under the scratch directory and a 64 KiB buffer: units of 1344
// elements, so every block but the tiny layers' shards streams in several units.
static const char* off_nvme_dir(void) { // (the offload files' directory, made)
    static char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/offload_files", test_tmpdir());
    mkdir(dir, 0755);
    return dir;
}
static const char* off_nvme(void) {
    static char flags[PATH_MAX + 64];
    snprintf(flags, sizeof(flags), "nvme -offload-dir %s -offload-buffer 64KiB", off_nvme_dir());
    return flags;
}

// One cell: the run without offload, with -offload cpu and (nvme 1) with -offload nvme; losses,
// norms and the hashes of the parameters, master, m and v must be identical.
static void off_cell_nvme(int z, int R, int GA, int nvme) {
    ZtLog ref, lg;
    char href[512] = "", h[512] = "", name[64];
    snprintf(name, sizeof(name), "off_none_z%d_R%d_GA%d", z, R, GA);
    int rc = off_run("", R, z, GA, 3, "none", zt_dir(name), "", &ref, href);
    CHECKF(rc == 0 && ref.n == 3, "z%d R%d GA%d without offload failed (%d):\n%s", z, R, GA, rc, off_out);
    snprintf(name, sizeof(name), "off_cpu_z%d_R%d_GA%d", z, R, GA);
    rc = off_run("", R, z, GA, 3, "cpu", zt_dir(name), "", &lg, h);
    CHECKF(rc == 0 && lg.n == 3, "z%d R%d GA%d -offload cpu failed (%d):\n%s", z, R, GA, rc, off_out);
    CHECKF(strstr(off_out, "offload cpu: master, m, v") != NULL, "no offload line in the output:\n%s", off_out);
    // the overflow check: a pass over the state on step 1 (maxima unknown), proved by the bound after
    CHECKF(strstr(off_out, "check was proved by its bound on 2 step(s) (nothing read) and read the state on 1 ") != NULL,
           "z%d R%d GA%d -offload cpu: the overflow check was not proved on steps 2 and 3:\n%s", z, R, GA, off_out);
    CHECKF(off_same_log(&lg, &ref), "z%d R%d GA%d: losses or norms differ with -offload cpu (step 3: %.9g vs %.9g)", z, R, GA,
           lg.loss[2], ref.loss[2]);
    CHECKF(href[0] && !strcmp(h, href), "z%d R%d GA%d: hashes differ with -offload cpu:\n  %s\n  %s", z, R, GA, h, href);
    if (nvme) {
        snprintf(name, sizeof(name), "off_nvme_z%d_R%d_GA%d", z, R, GA);
        rc = off_run("", R, z, GA, 3, off_nvme(), zt_dir(name), "", &lg, h);
        CHECKF(rc == 0 && lg.n == 3 && strstr(off_out, "offload nvme: "), "z%d R%d GA%d -offload nvme failed (%d):\n%s", z, R, GA, rc, off_out);
        CHECKF(strstr(off_out, "check was proved by its bound on 2 step(s) (nothing read) and read the state on 1 ") != NULL,
               "z%d R%d GA%d -offload nvme: the overflow check was not proved on steps 2 and 3:\n%s", z, R, GA, off_out);
        CHECKF(off_same_log(&lg, &ref), "z%d R%d GA%d: losses or norms differ with -offload nvme", z, R, GA);
        CHECKF(href[0] && !strcmp(h, href), "z%d R%d GA%d: hashes differ with -offload nvme:\n  %s\n  %s", z, R, GA, h, href);
    }
    if (!g_test_failed) printf("    " OFF_DEVICE " device z%d R%d GA%d: -offload cpu%s identical (%s)\n", z, R, GA, nvme ? " and nvme" : "", h);
}
static void off_cell(int z, int R, int GA) { off_cell_nvme(z, R, GA, 1); }

#ifndef ENABLE_FP32
// -offload cpu copies each block's gradient shard to the host as its last reduction completes
// (offload.h, THE STEP 0). Each fault below breaks that for block 2 at ZeRO-3, R = 1, GA = 3 (the
// tests run with -poison 1: the host copy is NaN at the start of every step) and must be seen:
//   offload-grad-skip:2    the copy never happens: the host reads NaN, the update is skipped -> the
//                          hashes and losses differ from the run without offload
//   offload-grad-early:2   the copy after the first micro-step's reduction, not the last: a
//                          partial sum -> the hashes differ
//   offload-grad-every:2   a copy after every micro-step's reduction: the same numbers (the
//                          last one wins), but the step's exactly-once check ends the run (exit 1)
//   offload-grad-nowait:2  the copy as soon as the reduction is issued: [CPU device] before the last
//                          micro-step's sum is added -> the hashes differ; [emulator] (GA = 1: the
//                          reduction is a copy there) the copy stream reads the shard the communication
//                          stream's copy may still be writing: the emulator stops the run ("cuda_emu")
// And the same runs without a fault are identical to the reference (the faults are the only change).
static void off_grad_fault(const char* fault, int GA, const ZtLog* ref, const char* href) {
    ZtLog lg;
    char h[512] = "", name[64];
    snprintf(name, sizeof(name), "offgrad_%.20s_GA%d", fault + 12, GA);
    for (char* c = name; *c; c++) if (*c == ':') *c = '_';
    int rc = off_run(fault, 1, 3, GA, 3, "cpu", zt_dir(name), "", &lg, h);
    int emu_nowait = 0;
#ifdef ZT_CUDA_EMU
    emu_nowait = strstr(fault, "nowait") != NULL;
#endif
    if (strstr(fault, "every")) {
        CHECKF(rc == 1 && strstr(off_out, "internal error: block 2's gradient shard went to the host 3 times this step"),
               "%s: exit %d, expected 1 and the exactly-once message:\n%s", fault, rc, off_out);
    } else if (emu_nowait) {
        CHECKF(rc != 0 && strstr(off_out, "cuda_emu") && strstr(off_out, "may not have finished writing"),
               "%s: exit %d, expected the emulator to stop an unordered copy:\n%s", fault, rc, off_out);
    } else {
        CHECKF(rc == 0 && h[0] && strcmp(h, href) != 0, "%s (GA %d): a broken gradient copy went unnoticed (exit %d):\n  %s\n  %s\n%s", fault, GA,
               rc, h, href, off_out);
        if (strstr(fault, "skip")) CHECKF(!off_same_log(&lg, ref), "%s: the same losses", fault);
    }
    if (!g_test_failed) printf("    %s at GA %d seen (exit %d)\n", fault, GA, rc);
}
static void off_grad_faults(int emu) {
    ZtLog ref, lg;
    char href[512] = "", h[512] = "", name[64];
    int GA = emu ? 1 : 3; // the emulator: GA 1, where the reduction it must wait for is a copy it tracks
    snprintf(name, sizeof(name), "offgrad_none_GA%d", GA); // without offload, and with it and no fault: identical
    int rc = off_run("", 1, 3, GA, 3, "none", zt_dir(name), "", &ref, href);
    CHECKF(rc == 0, "reference failed (%d):\n%s", rc, off_out);
    snprintf(name, sizeof(name), "offgrad_cpu_GA%d", GA);
    rc = off_run("", 1, 3, GA, 3, "cpu", zt_dir(name), "", &lg, h);
    CHECKF(rc == 0 && !strcmp(h, href) && off_same_log(&lg, &ref), "no fault, GA %d: differs (%d):\n  %s\n  %s\n%s", GA, rc, h, href, off_out);
    off_grad_fault("offload-grad-nowait:2", GA, &ref, href);
    if (emu) return; // (skip, early and every are host code, the same on both devices: the CPU suite runs them)
    off_grad_fault("offload-grad-skip:2", GA, &ref, href);
    off_grad_fault("offload-grad-early:2", GA, &ref, href);
    off_grad_fault("offload-grad-every:2", GA, &ref, href);
}
#endif // ENABLE_FP32

// -offload-params (offload.h: ZeRO-3's parameter shards in host memory or a file, copied up into the
// gather buffers block by block): bit-identical to the resident run. One case per path, each against
// its own resident reference (losses, norms, hashes of parameters, master, m, v after 3 steps):
//   GPT-2 tiny, R = 3, GA = 1: cpu and nvme (AdamW on the device: the update goes down, PARAM_PUT_DEV)
//   llama-tiny, R = 2, GA = 3, -offload cpu: params cpu (AdamW on the host: the update never goes up)
//   llama-tiny -lora 2 -lora-quant nf4, R = 1, GA = 3: params nvme with -offload nvme (the 4-bit base's
//   shards from the file, the adapters' gradient and update through the state file)
// And the comparison can fail: ZT_FAULT=offload-params-skip-down:2 (block 2's update never reaches the
// host shard) changes the hashes and the losses.
#define OFFP_LLAMA "-e llama-tiny -layers 3 -channels 28 -heads 4 -vocab 97 -max-seq 62 -t 16 -poison 1 -blas 0"
static void offp_case(const char* what, int R, int GA, const char* extra, const char* off, const char* params) {
    ZtLog ref, lg;
    char href[512] = "", h[512] = "", name[96], flags[1024];
    snprintf(name, sizeof(name), "offp_ref_%s", what);
    int rc = off_run("", R, 3, GA, 3, off, zt_dir(name), extra, &ref, href);
    CHECKF(rc == 0 && ref.n == 3, "%s: the resident run failed (%d):\n%s", what, rc, off_out);
    snprintf(name, sizeof(name), "offp_%s", what);
    snprintf(flags, sizeof(flags), "%s -offload-params %s", extra, params);
    rc = off_run("", R, 3, GA, 3, off, zt_dir(name), flags, &lg, h);
    CHECKF(rc == 0 && lg.n == 3 && strstr(off_out, "offload-params "), "%s: -offload-params %s failed (%d):\n%s", what, params, rc, off_out);
    CHECKF(off_same_log(&lg, &ref), "%s: losses or norms differ with -offload-params %s (step 3: %.9g vs %.9g)", what, params, lg.loss[2], ref.loss[2]);
    CHECKF(href[0] && !strcmp(h, href), "%s: hashes differ with -offload-params %s:\n  %s\n  %s", what, params, h, href);
    if (!g_test_failed) printf("    %s: -offload-params %.4s identical (%s)\n", what, params, h);
}
static const char* offp_nvme(void) { // -offload-params nvme's word and directory
    static char flags[PATH_MAX + 64];
    snprintf(flags, sizeof(flags), "nvme -offload-dir %s", off_nvme_dir());
    return flags;
}

#ifndef ZT_CUDA_EMU
TEST(offload_params_bitwise) {
    offp_case("gpt2_R3_cpu", 3, 1, "", "none", "cpu");
    offp_case("gpt2_R3_nvme", 3, 1, "", "none", offp_nvme());
    offp_case("llama_R2_GA3_offload", 2, 3, OFFP_LLAMA, "cpu", "cpu");
#ifndef ENABLE_FP32
    char nv[PATH_MAX + 128];
    snprintf(nv, sizeof(nv), "%s -offload-buffer 64KiB", off_nvme());
    offp_case("qlora_R1_GA3_nvme", 1, 3, OFFP_LLAMA " -lora 2 -lora-quant nf4", nv, offp_nvme()); // (the gradient in the file: read, added, written)
    if (off_long()) {
        offp_case("gpt2_R2_GA3_nvme_offload_nvme", 2, 3, "", nv, offp_nvme());
        offp_case("llama_R3_lora_cpu", 3, 1, OFFP_LLAMA " -lora 2", "none", "cpu");
        offp_case("llama_R1_GA3_nvme", 1, 3, OFFP_LLAMA, "none", offp_nvme());
    }
    ZtLog ref, lg; // the comparison can fail
    char href[512] = "", h[512] = "";
    int rc = off_run("", 1, 3, 1, 3, "none", zt_dir("offp_fault_ref"), "", &ref, href);
    CHECKF(rc == 0, "reference failed (%d):\n%s", rc, off_out);
    rc = off_run("offload-params-skip-down:2", 1, 3, 1, 3, "none", zt_dir("offp_fault"), "-offload-params cpu", &lg, h);
    CHECKF(rc == 0 && h[0] && strcmp(h, href) != 0 && !off_same_log(&lg, &ref), "a skipped copy down went unnoticed (%d):\n  %s\n  %s\n%s", rc,
           h, href, off_out);
    if (!g_test_failed) printf("    offload-params-skip-down:2 seen: %s\n", h);
#endif
}

// -z auto with -offload-params cpu given chooses among the parameter rows (ZeRO-3, the state on the host),
// and the run allocates what its row says.
TEST(offload_params_z_auto_given) {
    int rc = off_run("", 1, -1, 1, 2, "auto", zt_dir("offp_auto"), "-offload-params cpu", NULL, NULL);
    CHECKF(rc == 0 && strstr(off_out, "auto: -z 3 -r 1 -offload cpu -offload-params cpu chosen"), "expected a parameter row chosen (%d):\n%s", rc,
           off_out);
}

// -offload-params refused, exit 2 naming the flag: below -z 3 or with -z auto, an unknown value, nvme
// without -offload-dir, a replicated LoRA base (nothing sharded to offload).
TEST(offload_params_refusals) {
    static const OffRefusal bad[] = {
        {"-z 2 -offload-params cpu", "flag -offload-params cpu needs -z 3 (or -z auto)"},
        {"-z 3 -offload-params gpu", "flag -offload-params: 'gpu' is not none, cpu or nvme"},
        {"-z auto -offload none -offload-params cpu", "flag -offload-params cpu with -offload none: -z auto, -r auto and -tune choose"},
        {"-z 3 -offload-params nvme", "flag -offload-params nvme needs -offload-dir DIR"},
        {"-z 3 -offload-params cpu -offload-dir /tmp", "flag -offload-dir is for -offload nvme or -offload-params nvme"},
        {"-z 3 -offload-params nvme -offload-dir /nonexistent/dir", "-offload-dir /nonexistent/dir: cannot create /nonexistent/dir/zt_params_"},
        {"-z 3 -lora 2 -lora-base replicated -offload-params cpu", "with -lora-base replicated every device holds the whole frozen base"},
    };
    off_refusals(bad, sizeof(bad) / sizeof(bad[0]));
}
#endif

#ifndef ZT_CUDA_EMU
// (The FP32 build runs 2 cells: the offload path does not depend on the storage type beyond the
// staging's element size; the cases after this one only in the BF16 build, the one users run.)
TEST(offload_bitwise) {
    static const int cells[8][3] = {{1, 1, 3}, {3, 3, 1}, {1, 3, 3}, {3, 1, 3}, {1, 1, 1}, {3, 1, 1}, {1, 3, 1}, {3, 3, 3}};
#ifdef ENABLE_FP32
    int n = off_long() ? 8 : 2;
#else
    int n = off_long() ? 8 : 4;
#endif
    for (int i = 0; i < n; i++) off_cell(cells[i][0], cells[i][1], cells[i][2]);
}

// Every host AdamW path (adamw.cuh: ZT_SIMD=scalar|avx2|avx512, those this CPU has) gives -offload cpu
// the bits of the run without offload, whose AdamW is the scalar loop (ZT_SIMD=scalar): losses, norms
// and the hashes of parameters, master, m and v after 3 steps (step 1 runs the check's pass, steps 2
// and 3 the update with maxima); and the run without offload on the widest path too.
static void off_simd_run(const char* simd, const char* offload, ZtLog* lg, char* h) {
    char name[64];
    snprintf(name, sizeof(name), "offsimd_%s_%s", offload, simd);
    setenv("ZT_SIMD", simd, 1); // mpirun's ranks inherit the environment
    int rc = off_run("", 1, 1, 1, 3, offload, zt_dir(name), "", lg, h);
    unsetenv("ZT_SIMD");
    CHECKF(rc == 0 && lg->n == 3, "ZT_SIMD=%s -offload %s failed (%d):\n%s", simd, offload, rc, off_out);
    if (strcmp(offload, "none"))
        CHECKF(strstr(off_out, "host AdamW: ") && strstr(off_out, simd), "ZT_SIMD=%s: the path is not the one forced:\n%s", simd, off_out);
}
TEST(offload_simd_bitwise) {
    ZtLog ref, lg;
    char href[512] = "", h[512] = "";
    off_simd_run("scalar", "none", &ref, href);
    int widest = SIMD_SCALAR;
    for (int k = SIMD_SCALAR; k < SIMD_COUNT; k++) {
        if (!simd_supported(k)) { printf("    %s: not on this CPU, skipped\n", simd_names[k]); continue; }
        widest = k;
        off_simd_run(simd_names[k], "cpu", &lg, h);
        CHECKF(off_same_log(&lg, &ref) && href[0] && !strcmp(h, href), "ZT_SIMD=%s -offload cpu differs from the scalar run without offload:\n  %s\n  %s",
               simd_names[k], h, href);
        if (!g_test_failed) printf("    ZT_SIMD=%s -offload cpu: identical (%s)\n", simd_names[k], h);
    }
    off_simd_run(simd_names[widest], "none", &lg, h);
    CHECKF(off_same_log(&lg, &ref) && !strcmp(h, href), "ZT_SIMD=%s without offload differs from scalar", simd_names[widest]);
}


#ifndef ENABLE_FP32
TEST(offload_grad_copy_faults) { off_grad_faults(0); }

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

// -offload refused: with -z 0 (exit 2, saying why), an unknown value; a negative -pcie-gbps.
TEST(offload_flag_refusals) {
    static const OffRefusal bad[] = {
        {"-z 0 -offload cpu", "-offload cpu needs -z 1, 2 or 3: under ZeRO-0 every rank holds the whole optimizer state"},
        {"-z 1 -offload disk", "flag -offload: 'disk' is not none, cpu, nvme or auto"},
        {"-z 1 -pcie-gbps -5", "-pcie-gbps / -disk-gbps must be positive"},
        {"-z 1 -disk-gbps -5", "-pcie-gbps / -disk-gbps must be positive"},
        {"-z 1 -offload-dir /tmp", "-offload-dir is for -offload nvme or -offload-params nvme (or -offload auto with -z auto / -r auto)"},
        {"-z 1 -offload nvme", "-offload nvme needs -offload-dir DIR"},
        {"-z 1 -offload cpu -offload-dir /tmp", "-offload-dir is for -offload nvme"},
        {"-z 1 -offload nvme -offload-dir /nonexistent/dir", "-offload-dir /nonexistent/dir: cannot create /nonexistent/dir/zt_offload_"},
        {"-z 1 -offload nvme -offload-dir /tmp -offload-buffer 1KiB", "-offload-buffer: 1024 bytes hold no unit of work"},
    };
    off_refusals(bad, sizeof(bad) / sizeof(bad[0]));
}

// ZT_SIMD: a path this CPU lacks (ZT_FAULT=simd-lacks:P stands in for such a CPU), or another word, ends the
// run with exit 2 and says why.
TEST(offload_simd_env) {
    char cmd[4096], out[8192];
    static const struct { const char* value; const char* lacks; const char* want; } bad[] = {
        {"avx1024", "", "ZT_SIMD=avx1024: not scalar, avx2 or avx512"},
        {"avx512", "avx512", "ZT_SIMD=avx512: this CPU does not have AVX-512F. HINT: unset ZT_SIMD (this CPU's widest path is avx2)"},
        {"avx2", "avx2", "ZT_SIMD=avx2: this CPU does not have AVX2 and FMA"},
    };
    for (int i = 0; i < 3; i++) {
        if (i == 1 && !simd_supported(SIMD_AVX2)) continue; // (the hint names avx2)
        snprintf(cmd, sizeof(cmd), "ZT_FAULT=simd-lacks:%s ZT_SIMD=%s OMP_NUM_THREADS=1 %s --train -threads 1 -i %s -j %s " ZT_MODEL " -b 2 -x 1 -v 0 -s 0",
                 bad[i].lacks, bad[i].value, g_test_self, zt_data(0), zt_data(1));
        int rc = test_run_cmd(cmd, out, sizeof(out));
        CHECKF(rc == 2 && strstr(out, bad[i].want), "ZT_SIMD=%s: exit %d, expected 2 and \"%s\":\n%s", bad[i].value, rc, bad[i].want, out);
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

// kill -9 in the middle of a step's parameter update with the parameters (and the state) on NVMe
// (ZT_FAULT=crash:params-write:step5: after the first block's write of step 5, the file half updated;
// checkpoints every 3 steps): resumed with -y 1 from step 3, with the parameters on NVMe again and
// resident, both give the uninterrupted run's bits at step 6 (the file is rebuilt from master at load).
TEST(offload_params_kill_resume) {
    ZtLog ref, lg;
    char href[512] = "", h[512] = "", flags[1024], P[PATH_MAX];
    snprintf(flags, sizeof(flags), "-n 3 -offload-params %s", offp_nvme());
    int rc = off_run("", 1, 3, 1, 6, off_nvme(), zt_dir("offp_kill_ref"), flags, &ref, href);
    CHECKF(rc == 0 && ref.n == 6, "the uninterrupted run failed (%d):\n%s", rc, off_out);
    snprintf(P, sizeof(P), "%s", zt_dir("offp_kill"));
    rc = off_run("crash:params-write:step5", 1, 3, 1, 6, off_nvme(), P, flags, NULL, NULL);
    CHECKF(rc != 0 && strstr(off_out, "step     4/6") && !strstr(off_out, "step     5/6"), "expected the kill in step 5 (exit %d):\n%s", rc, off_out);
    for (int k = 0; k < 2; k++) {
        char d[PATH_MAX], extra[1024];
        snprintf(d, sizeof(d), "%s", zt_dir(k ? "offp_kill_res" : "offp_kill_nvme"));
        off_copy_ckpt(P, d, 3);
        snprintf(extra, sizeof(extra), "-n 3 -y 1 -offload-params %s", k ? "none" : offp_nvme());
        rc = off_run("", 1, 3, 1, 6, k ? "none" : off_nvme(), d, extra, &lg, h);
        CHECKF(rc == 0 && strstr(off_out, "resum"), "the resume (%s) failed (%d):\n%s", k ? "resident" : "nvme", rc, off_out);
        CHECKF(h[0] && !strcmp(h, href) && lg.loss[lg.n - 1] == ref.loss[5], "the resume (%s) differs:\n  %s\n  %s", k ? "resident" : "nvme", h, href);
    }
    if (!g_test_failed) printf("    killed in step 5's update; resumed from step 3 with the parameters on NVMe and resident: identical (%s)\n", h);
}
// A -plan run's plan.jsonl: total (device bytes), host_bytes and the per-tag bytes of row (z, r, offload).
typedef struct { double total[4][4][3], host[4][4][3], disk[4][4][3], pcie[4][4][3], bytes[4][4][3][TAG_COUNT]; } OffPlan;
static int off_plan(const char* extra, OffPlan* po, char* out, size_t cap) {
    const char* dir = zt_dir("offplan");
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 %s --train -threads 1 -i %s " ZT_MODEL " -b 2 -v 0 -s 0 -plan -world 2 -tflops 1 -o %s %s",
             g_test_self, zt_data(0), dir, extra);
    int rc = test_run_cmd(cmd, out, cap);
    if (rc) return rc;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/plan.jsonl", dir);
    char* s = zt_read_file(path);
    if (!s) return -1;
    memset(po, 0, sizeof(*po));
    for (char* line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
        int z, r, off;
        if (sscanf(line, "{\"stage\": %d, \"recompute\": %d, \"offload\": %d", &z, &r, &off) != 3) continue;
        po->total[z][r][off] = atof(strstr(line, "\"total\": ") + 9);
        po->host[z][r][off] = atof(strstr(line, "\"host_bytes\": ") + 14);
        po->disk[z][r][off] = atof(strstr(line, "\"disk_per_node\": ") + 17);
        po->pcie[z][r][off] = atof(strstr(line, "\"pcie_bytes\": ") + 14);
        for (int t = 0; t < TAG_COUNT; t++) {
            char key[64];
            snprintf(key, sizeof(key), "\"%s\": ", mem_tag_name[t]);
            po->bytes[z][r][off][t] = atof(strstr(line, key) + strlen(key));
        }
    }
    free(s);
    return 0;
}

// -plan answers the three questions with a parameter-offload row that fits, recommended because
// nothing else does: a 70B full fine-tune on 8 x 80 GB (2 TiB of host memory), an 8B full fine-tune on
// one 24 GB GPU (256 GiB), Answer.AI's 70B QLoRA on two 24 GB GPUs. And in plan.jsonl the rows carry
// what the run allocates: no parameter or gradient shard on the device, the host bytes of the closed form.
TEST(offload_params_plan) {
    static const struct { const char* flags; const char* want; } q[] = {
        {"-e llama3-70b -world 8 -gpu h100 -gpu-mem 80GiB -device cuda -host-mem 2TiB",
         "recommendation: -z 3 -r 3 -offload cpu -offload-params cpu: nothing fits without parameter offload"},
        {"-e llama3-8b -world 1 -gpu l40s -gpu-mem 24GiB -device cuda -host-mem 256GiB",
         "recommendation: -z 3 -r 3 -offload cpu -offload-params cpu: nothing fits without parameter offload"},
        {"-e llama3-70b -lora 16 -lora-quant nf4 -world 2 -tflops 71 -gpu-mem 24GiB -device cuda -host-mem 256GiB -b 1 -t 2048",
         "recommendation: -z 3 -r 3 -offload cpu -offload-params cpu -lora-base sharded: nothing fits without parameter offload"},
    };
    for (int i = 0; i < 3; i++) {
        char cmd[4096];
        snprintf(cmd, sizeof(cmd), "ZT_PLAN_ADAMW_NS=1 OMP_NUM_THREADS=1 %s --train -threads 1 -plan %s", g_test_self, q[i].flags);
        int rc = test_run_cmd(cmd, off_out, sizeof(off_out));
        CHECKF(rc == 0 && strstr(off_out, q[i].want), "-plan %s: exit %d, expected \"%s\":\n%s", q[i].flags, rc, q[i].want, off_out);
        if (!g_test_failed) printf("    -plan %.40s...: a parameter-offload row recommended\n", q[i].flags);
    }
    OffPlan po; // (plan.jsonl's rows keyed {"stage": ... skip the parameter rows, which start {"offload_params": ...)
    int rc = off_plan("-offload-params cpu", &po, off_out, sizeof(off_out));
    CHECKF(rc == 0, "-plan failed (%d):\n%s", rc, off_out);
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/offplan/plan.jsonl", test_tmpdir());
    char* s = zt_read_file(path);
    int rows = 0;
    for (char* line = s ? strtok(s, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        int pk, z, r, off;
        if (sscanf(line, "{\"offload_params\": %d, \"prefetch_s\": %*f, \"exposed_s\": %*f, \"stage\": %d, \"recompute\": %d, \"offload\": %d",
                   &pk, &z, &r, &off) != 4) continue;
        rows++;
        CHECKF(z == 3 && pk >= 1 && off >= 1, "a parameter row at z %d, params %d, state %d", z, pk, off);
        CHECKF(atof(strstr(line, "\"params\": ") + 10) == 0 && atof(strstr(line, "\"grads\": ") + 9) == 0,
               "a parameter row holds a parameter or gradient shard on the device: %s", line);
        CHECKF(atof(strstr(line, "\"host_bytes\": ") + 14) > po.host[3][r][off], "the row's host bytes do not exceed the state-only row's: %s", line);
    }
    free(s);
    CHECKF(rows == 12, "plan.jsonl: %d parameter rows, 12 expected (O, M, N x -r 0..3)", rows);
}

// The planner's offload rows: the device holds every tag but master, m, v (the same bytes as the
// stage's row without offload); the host holds 12 bytes per element of the shard plus the pinned
// staging (cpu: the FP32 copy of the whole gradient shard and two floatX buffers of the largest block
// shard; nvme: two FP32 and two floatX buffers of a unit), written here from the block sizes
// (zt_blocks); host<->device bytes per step: the gradient shard down once (cpu) or twice (nvme: the
// check's and the update's copies), the parameters up once. That the allocation equals the plan, tag by tag and on the host, every offloaded
// run checks as it starts (trainer_setup); here one run at R = 2 per stage and the memory record.
// -z auto (planned for the CUDA device: on the CPU device the host is the device memory, so offload
// never makes anything fit): with the memory the smallest row without offload needs plus the headroom,
// no offload; a byte less, -offload cpu; then not with -offload none, nor when the host is too small.
TEST(offload_plan_rows) {
    static char out[1 << 20];
    OffPlan po;
    CHECKF(off_plan("", &po, out, sizeof(out)) == 0, "-plan failed:\n%s", out);
    int64_t Pio, Pl, logical;
    zt_blocks(2, &Pio, &Pl, &logical);
    double shard = (Pio + ZT_L * Pl) / 2.0, maxS = (Pio > Pl ? Pio : Pl) / 2.0;
    double host = 12.0 * shard + 4.0 * shard + 2.0 * sizeof(floatX) * maxS;
    double host_nvme = (36.0 + 2.0 * (4 + sizeof(floatX))) * maxS; // 256 MiB holds a whole block shard here: unit = maxS
    for (int z = 1; z <= 3; z++)
        for (int r = 0; r <= 3; r++) {
            CHECKF(po.host[z][r][1] == host && po.host[z][r][0] == 0, "z%d r%d: host bytes %.0f, closed form %.0f", z, r, po.host[z][r][1], host);
            CHECKF(po.pcie[z][r][1] == (4.0 + sizeof(floatX)) * shard && po.pcie[z][r][2] == (4.0 + sizeof(floatX)) * shard && po.pcie[z][r][0] == 0,
                   "z%d r%d: pcie bytes cpu %.0f nvme %.0f, shard %.0f", z, r, po.pcie[z][r][1], po.pcie[z][r][2], shard);
            CHECKF(po.host[z][r][2] == host_nvme && po.disk[z][r][2] == 2 * 12.0 * shard && po.disk[z][r][1] == 0,
                   "z%d r%d nvme: host %.0f (closed form %.0f), disk per node %.0f (%.0f)", z, r, po.host[z][r][2], host_nvme, po.disk[z][r][2],
                   2 * 12.0 * shard);
            for (int t = 0; t < TAG_COUNT; t++)
                CHECKF(po.bytes[z][r][2][t] == po.bytes[z][r][1][t], "z%d r%d %s: nvme row %.0f, cpu row %.0f", z, r, mem_tag_name[t],
                       po.bytes[z][r][2][t], po.bytes[z][r][1][t]);
            double opt = 0;
            for (int t = 0; t < TAG_COUNT; t++) {
                int state = t == TAG_MASTER || t == TAG_ADAM_M || t == TAG_ADAM_V;
                if (state) opt += po.bytes[z][r][0][t];
                CHECKF(po.bytes[z][r][1][t] == (state ? 0 : po.bytes[z][r][0][t]), "z%d r%d %s: offload row %.0f", z, r, mem_tag_name[t],
                       po.bytes[z][r][1][t]);
            }
            CHECKF(po.total[z][r][1] == po.total[z][r][0] - opt, "z%d r%d: offload total %.0f", z, r, po.total[z][r][1]);
        }
    for (int z = 1; z <= 3; z += 2) { // the allocation: the memory record of a run against the plan's row
        char name[64];
        snprintf(name, sizeof(name), "offplan_run_z%d", z);
        const char* dir = zt_dir(name);
        int rc = off_run("", 2, z, 1, 1, "cpu", dir, "", NULL, NULL);
        CHECKF(rc == 0, "z%d R2 -offload cpu failed (%d):\n%s", z, rc, off_out);
        double mem[2][TAG_COUNT + 1];
        CHECK(zt_read_memory(dir, "start", mem, 2) == 0);
        for (int q = 0; q < 2; q++)
            for (int t = 0; t < TAG_COUNT; t++)
                CHECKF(mem[q][t] == po.bytes[z][1][1][t], "z%d rank %d %s: %.0f allocated, the plan says %.0f", z, q, mem_tag_name[t], mem[q][t],
                       po.bytes[z][1][1][t]);
    }
    // -z auto on the CUDA device (planned: -plan allocates nothing)
    OffPlan pc;
    CHECKF(off_plan("-device cuda -gpu h100 -gpu-mem 2GiB", &pc, out, sizeof(out)) == 0, "-plan -device cuda failed:\n%s", out);
    double need = 1e300;
    for (int z = 1; z <= 3; z++)
        for (int r = 0; r <= 3; r++) need = fmin(need, pc.total[z][r][0]);
    need += 1073741824.0; // the headroom at these sizes: 1 GiB
    struct { double mem; const char* extra; const char* want; } cases[] = {
        {need, "", "-offload cpu: nothing fits without offload"},                    // (must NOT appear)
        {need - 1, "", "-offload cpu: nothing fits without offload"},
        {need - 1, "-offload none", "recommendation: none: nothing fits"},
        {need - 1, "-offload cpu", "-offload cpu: nothing fits without offload"},
    };
    for (int i = 0; i < 4; i++) {
        char extra[256];
        snprintf(extra, sizeof(extra), "-device cuda -gpu h100 -gpu-mem %.0f %s", cases[i].mem, cases[i].extra);
        CHECKF(off_plan(extra, &pc, out, sizeof(out)) == 0, "-plan %s failed:\n%s", extra, out);
        int has = strstr(out, cases[i].want) != NULL;
        CHECKF(i == 0 ? !has && strstr(out, "recommendation: -z") : has, "-plan %s: %s '%s':\n%s", extra, i == 0 ? "unexpected" : "expected",
               cases[i].want, out);
    }
    setenv("ZT_HOST_MEM", "64MiB", 1); // the host too small for the offloaded state: nothing fits, or nvme with -offload-dir
    char extra[256];
    snprintf(extra, sizeof(extra), "-device cuda -gpu h100 -gpu-mem %.0f", need - 1);
    CHECKF(off_plan(extra, &pc, out, sizeof(out)) == 0 && strstr(out, "recommendation: none"), "host too small:\n%s", out);
    // host memory between what nvme and cpu need per node (2 ranks) above the host headroom (1 GiB):
    // cpu does not fit, nvme does when -offload-dir says where
    char hm[64];
    snprintf(hm, sizeof(hm), "%.0f", 1073741824.0 + host + host_nvme);
    setenv("ZT_HOST_MEM", hm, 1);
    snprintf(extra, sizeof(extra), "-device cuda -gpu h100 -gpu-mem %.0f", need - 1);
    CHECKF(off_plan(extra, &pc, out, sizeof(out)) == 0 && strstr(out, "recommendation: none"), "cpu does not fit, no -offload-dir:\n%s", out);
    snprintf(extra, sizeof(extra), "-device cuda -gpu h100 -gpu-mem %.0f -offload-dir /tmp", need - 1);
    CHECKF(off_plan(extra, &pc, out, sizeof(out)) == 0 && strstr(out, "-offload nvme: nothing fits without offload"),
           "cpu does not fit, -offload-dir given: expected nvme:\n%s", out);
    unsetenv("ZT_HOST_MEM");
    if (!g_test_failed) printf("    offload rows = closed form = allocation; -z auto offloads at %.0f bytes, not at %.0f\n", need - 1, need);
}

// The planner's disk per node counts the checkpoints kept. A run at R = 2 (ZeRO-1) with -x 5 -n 2
// -nk 2 writes checkpoints at steps 2, 4 and 5 and keeps the newest 2: the files of one of them
// (model_*.bin + both ranks' state_*.bin, by stat) equal the closed form (checkpoint.h:
// ckpt_model_file_bytes, ckpt_state_file_bytes, from the layout alone); -plan with the same flags
// (-world 2: both ranks on one node) counts 3 of them at the peak (-nk 2 writes the next before it
// removes the oldest) in every row, on top of the nvme rows' offload files; -save-model last: one
// model file; -nk 0: all 3; -n 0: none; -x -1 with -nk 0: not counted, and says so.
TEST(offload_plan_counts_checkpoints) {
    static char out[1 << 20];
    const char* dir = zt_dir("offplan_ckpt_run");
    int rc = off_run("", 2, 1, 1, 5, "none", dir, "-n 2 -nk 2", NULL, NULL);
    CHECKF(rc == 0, "run failed (%d):\n%s", rc, off_out);
    double files = 0;
    const char* names[3] = {"model_00000005.bin", "state_00000005_00000.bin", "state_00000005_00001.bin"};
    for (int i = 0; i < 3; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        struct stat st;
        CHECKF(stat(path, &st) == 0, "%s: missing", path);
        files += (double)st.st_size;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/model_00000002.bin", dir);
    CHECKF(access(path, F_OK) != 0, "-nk 2: step 2's checkpoint is still there");
    GPTConfig c = gpt2_config(ZT_L, ZT_C, ZT_NH, ZT_V, 128, ZT_MAXT);
    ModelDesc d;
    model_describe(&d, &c);
    BlockLayout lay;
    model_layout(&d, &lay, 2, 0);
    double model = (double)ckpt_model_file_bytes(&lay), one = model + (double)(ckpt_state_file_bytes(&lay, 0) + ckpt_state_file_bytes(&lay, 1));
    int64_t Pio, Pl, logical;
    zt_blocks(2, &Pio, &Pl, &logical);
    double shard = (Pio + ZT_L * Pl) / 2.0;
    layout_free(&lay);
    CHECKF(files == one && model == 1024.0 + sizeof(floatX) * (double)logical, "one checkpoint: %.0f bytes written, closed form %.0f (model %.0f)",
           files, one, model);
    static const struct { const char* flags; double count, models; } cases[] = {
        {"-x 5 -n 2 -nk 2", 3, 3}, {"-x 5 -n 2 -nk 2 -save-model last", 3, 1}, {"-x 5 -n 2", 3, 3}, {"-x 9 -n 2 -nk 1", 2, 2},
        {"-x 5 -n 0", 0, 0}, {"-x -1 -n 2", 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        OffPlan po;
        char extra[256];
        snprintf(extra, sizeof(extra), "%s -offload-dir /tmp", cases[i].flags);
        CHECKF(off_plan(extra, &po, out, sizeof(out)) == 0, "-plan %s failed:\n%s", extra, out);
        double ckpt = cases[i].count * (one - model) + cases[i].models * model;
        for (int z = 0; z <= 3; z++)
            for (int r = 0; r <= 3; r++)
                for (int k = z ? 0 : 0; k < (z ? 3 : 1); k++) {
                    double want = ckpt + (k == 2 ? 2 * 12.0 * shard : 0.0);
                    CHECKF(po.disk[z][r][k] == want, "-plan %s: z%d r%d offload %d: disk per node %.0f, closed form %.0f", cases[i].flags, z, r, k,
                           po.disk[z][r][k], want);
                }
        if (strstr(cases[i].flags, "-x -1"))
            CHECKF(strstr(out, "disk/node: checkpoints not counted: -x -1"), "-plan %s: no word on the checkpoints:\n%s", cases[i].flags, out);
        else if (cases[i].count > 0)
            CHECKF(strstr(out, "checkpoints on disk at once"), "-plan %s: no checkpoint line:\n%s", cases[i].flags, out);
    }
    if (!g_test_failed) printf("    one checkpoint at R 2 = %.0f bytes = closed form; -plan counts the kept ones at the peak\n", one);
}

// -export from the FP32 master weights (block_values reads them wherever they live) and a
// -save-model checkpoint give the same bytes with -offload none, cpu and nvme.
TEST(offload_export_same_bytes) {
    char f[3][PATH_MAX];
    const char* offs[3] = {"none", "cpu", off_nvme()};
    for (int i = 0; i < 3; i++) {
        char name[64], extra[PATH_MAX + 64];
        snprintf(name, sizeof(name), "offexp_%d", i);
        const char* dir = zt_dir(name);
        snprintf(f[i], sizeof(f[i]), "%s.bin", dir);
        snprintf(extra, sizeof(extra), "-export %s -export-dtype fp32", f[i]);
        int rc = off_run("", 2, 3, 1, 2, offs[i], dir, extra, NULL, NULL);
        CHECKF(rc == 0, "-offload %s -export failed (%d):\n%s", offs[i], rc, off_out);
    }
    char cmd[3 * PATH_MAX + 64];
    snprintf(cmd, sizeof(cmd), "cmp %s %s && cmp %s %s", f[0], f[1], f[0], f[2]);
    CHECKF(test_run_cmd(cmd, off_out, sizeof(off_out)) == 0, "exported files differ:\n%s", off_out);
}

// -offload nvme keeps the process's memory bounded: on a ~11.5 M parameter model whose optimizer state
// (138 MB) is 8x -offload-buffer (16 MiB), the peak (VmHWM) stays within the bytes of every device
// tag (the planner's non-optimizer bytes: params, grads, activations, logits, workspace) plus the
// offload buffers plus 64 MiB of slack for the process itself (MPI, the binary, the data loader;
// measured ~30 MiB), while the same run without offload holds at least those tags plus the state.
TEST(offload_nvme_memory_bounded) {
    const char* model = "-e tiny -layers 6 -channels 384 -heads 6 -vocab 2048 -max-seq 64 -t 16 -b 1 -x 1 -v 0 -s 0 -z 1";
    double peak[2] = {0, 0}, tags[2] = {0, 0}, host = 0;
    for (int i = 0; i < 2; i++) {
        char flags[2048], dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", zt_dir(i ? "offmem_nvme" : "offmem_none"));
        snprintf(flags, sizeof(flags), "%s -offload %s -o %s", model,
                 i ? "nvme -offload-dir /tmp -offload-buffer 16MiB" : "none", dir);
        int rc = zt_mpirun(1, flags, off_out, sizeof(off_out));
        CHECKF(rc == 0, "run failed (%d):\n%s", rc, off_out);
        double mem[1][TAG_COUNT + 1];
        CHECK(zt_read_memory(dir, "end", mem, 1) == 0);
        for (int t = 0; t < TAG_COUNT; t++) tags[i] += mem[0][t];
        peak[i] = mem[0][TAG_COUNT];
        if (i) {
            const char* p = strstr(off_out, "streamed through, ");
            CHECK(p != NULL);
            host = p ? atof(p + 18) * 1048576.0 : 0; // "16.0 MiB of host memory per rank"
        }
    }
    double state = tags[0] - tags[1], slack = 64.0 * 1048576.0;
    CHECKF(state >= 4 * 16.0 * 1048576.0, "the optimizer state (%.0f bytes) is not 4x the buffer", state);
    CHECKF(host == 16.0 * 1048576.0, "host memory of the offload: %.0f bytes", host);
    CHECKF(peak[1] <= tags[1] + host + slack, "nvme: VmHWM %.1f MiB > tags %.1f + buffers %.1f + slack 64 MiB", peak[1] / 1048576.0,
           tags[1] / 1048576.0, host / 1048576.0);
    CHECKF(peak[0] >= tags[1] + state, "none: VmHWM %.1f MiB < tags %.1f + state %.1f MiB", peak[0] / 1048576.0, tags[1] / 1048576.0,
           state / 1048576.0);
    printf("    VmHWM: nvme %.1f MiB (bound %.1f = tags %.1f + buffers %.1f + 64 slack), none %.1f MiB (state %.1f MiB)\n",
           peak[1] / 1048576.0, (tags[1] + host + slack) / 1048576.0, tags[1] / 1048576.0, host / 1048576.0, peak[0] / 1048576.0,
           state / 1048576.0);
}

// Disk failures under -offload nvme: a full disk (ENOSPC, injected) while step 3 writes its first
// unit, and an I/O error (EIO, injected) reading step 3's second unit, each end the run with exit 1 and
// a message naming the file; the checkpoint of step 2 is intact: -y 1 continues from it
// bit-identically to an uninterrupted run (4 steps, checkpoints every 2). With the default buffer
// every block is one unit: 4 units a step on this model.
TEST(offload_nvme_faults) {
    ZtLog ref, lg;
    char href[512] = "", h[512] = "";
    char nv[PATH_MAX];
    snprintf(nv, sizeof(nv), "nvme -offload-dir %s/offload_files", test_tmpdir());
    off_nvme(); // (creates the directory)
    int rc = off_run("", 1, 1, 1, 4, "none", zt_dir("offf_ref"), "-n 2", &ref, href);
    CHECKF(rc == 0 && ref.n == 4, "reference failed (%d):\n%s", rc, off_out);
    static const struct { const char* fault; const char* want; } faults[] = {
        {"offload-enospc:9", "No space left on device"}, {"offload-eio:10", "Input/output error"},
    };
    for (int i = 0; i < 2; i++) {
        char name[64];
        snprintf(name, sizeof(name), "offf_%d", i);
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", zt_dir(name));
        rc = off_run(faults[i].fault, 1, 1, 1, 4, nv, dir, "-n 2", NULL, NULL);
        CHECKF(rc == 1 && strstr(off_out, "-offload nvme: ") && strstr(off_out, "/zt_offload_") && strstr(off_out, faults[i].want),
               "%s: exit %d, expected 1 and a message naming the file with '%s':\n%s", faults[i].fault, rc, faults[i].want, off_out);
        CHECKF(strstr(off_out, "step     3/4") == NULL, "%s: step 3 was logged as done:\n%s", faults[i].fault, off_out);
        rc = off_run("", 1, 1, 1, 4, nv, dir, "-n 2 -y 1", &lg, h);
        CHECKF(rc == 0 && strstr(off_out, "resum"), "%s: resume failed (%d):\n%s", faults[i].fault, rc, off_out);
        CHECKF(!strcmp(h, href) && lg.loss[3] == ref.loss[3], "%s: the resumed run differs:\n  %s\n  %s", faults[i].fault, h, href);
    }
    if (!g_test_failed) printf("    ENOSPC and EIO end the run naming the file; -y 1 continues bit-identically (%s)\n", h);
}
#endif // ENABLE_FP32
#else
// The emulated CUDA device: copies on their own stream, host and device memory apart.
TEST(offload_emu_bitwise) {
#ifndef ENABLE_FP32
    off_cell_nvme(3, 1, 3, 0);
    if (off_long()) off_cell(1, 1, 3); // (make test: ZeRO-1 with -offload cpu and nvme on the CPU device; the emulated nvme path in offload_params_emu)
#else
    off_cell(1, 1, 3);
#endif
    if (off_long()) { off_cell(3, 1, 3); off_cell(1, 3, 3); off_cell(3, 3, 1); }
}

// -offload-params on the emulated device (host and device memory apart, the copies up on the
// communication stream): cpu with AdamW on the device and with -offload cpu, nvme; bit-identical. And
// a copy up that does not wait for the compute stream (offload-params-nowait) is stopped.
TEST(offload_params_emu) {
    offp_case("emu_cpu", 1, 1, "", "none", "cpu");
#ifndef ENABLE_FP32
    offp_case("emu_cpu_offload", 1, 3, OFFP_LLAMA, "cpu", "cpu"); // (the gradient on the host: GA 3 adds through the ring)
    if (off_long()) offp_case("emu_nvme", 1, 1, "", "none", offp_nvme()); // (make test: nvme by emu_nvme_both_GA3, the parameters' and the state's)
    char nv[PATH_MAX + 128];
    snprintf(nv, sizeof(nv), "%s -offload-buffer 64KiB", off_nvme());
    offp_case("emu_nvme_both_GA3", 1, 3, "", nv, offp_nvme()); // (the gradient in the state file; its norm in the kernels' order)
    if (off_long()) offp_case("emu_R3_nvme", 3, 1, "", "none", offp_nvme());
    int rc = off_run("offload-params-nowait:2", 1, 3, 1, 2, "none", zt_dir("offp_emu_nowait"), "-offload-params cpu", NULL, NULL);
    CHECKF(rc != 0 && strstr(off_out, "cuda_emu") && strstr(off_out, "no event orders the two streams"), "offload-params-nowait:2: exit %d, expected the emulator to stop an unordered copy:\n%s", rc, off_out);
    if (!g_test_failed) printf("    offload-params-nowait:2 stopped by the emulator (exit %d)\n", rc);
    rc = off_run("offload-grad-reuse-nowait:1", 1, 3, 1, 2, "cpu", zt_dir("offp_emu_reuse"), "-offload-params cpu", NULL, NULL);
    CHECKF(rc != 0 && strstr(off_out, "cuda_emu") && strstr(off_out, "no event orders the two streams"), "offload-grad-reuse-nowait:1: exit %d, expected the emulator to stop the buffer's early zeroing:\n%s", rc, off_out);
    if (!g_test_failed) printf("    offload-grad-reuse-nowait:1 stopped by the emulator (exit %d)\n", rc);
#endif
}

#ifndef ENABLE_FP32
// -z auto on the (emulated) CUDA device with less memory than any row without parameter offload needs
// and more than the -offload cpu -offload-params cpu row's: it chooses that row, says why, and the run
// allocates what the row says (trainer_build_model checks every tag and the host bytes).
TEST(offload_params_emu_z_auto) {
    PlanRow row;
    GPTConfig c = gpt2_config(ZT_L, ZT_C, ZT_NH, ZT_V, 128, ZT_MAXT);
    double need = 1e300;
    for (int z = 0; z <= 3; z++)
        for (int k = OFFLOAD_NONE; k <= OFFLOAD_CPU; k++) { // (-r 1, the default, fixed; nvme needs -offload-dir)
            if (z == 0 && k) continue;
            plan_config(&c, 2, ZT_T, groups_flat(1), 1, z, 1, (Offload)k, 0, OFFLOAD_NONE, &row);
            need = fmin(need, (double)row.total);
        }
    plan_config(&c, 2, ZT_T, groups_flat(1), 1, 3, 1, OFFLOAD_CPU, 0, OFFLOAD_CPU, &row);
    CHECKF((double)row.total < need, "the parameter row needs %zu bytes, no less than the others' %.0f", row.total, need);
    char extra[256];
    snprintf(extra, sizeof(extra), "-gpu-mem %.0f", need + 1073741824.0 - 1);
    int rc = off_run("", 1, -1, 1, 2, "auto", zt_dir("offp_emu_auto"), extra, NULL, NULL);
    CHECKF(rc == 0 && strstr(off_out, "auto: -z 3 -r 1 -offload cpu -offload-params cpu chosen: nothing fits without parameter offload"),
           "expected the parameter-offload row chosen (%d):\n%s", rc, off_out);
    CHECKF(strstr(off_out, "offload-params cpu: each rank's BF16 parameter shard"), "the run did not offload the parameters:\n%s", off_out);
}

TEST(offload_emu_grad_copy_faults) { off_grad_faults(1); }

// -z auto on the (emulated) CUDA device with a byte less than the smallest row without offload
// needs: it chooses -offload cpu, says so, and the run allocates what that row says (trainer_setup
// checks every tag and the host bytes).
TEST(offload_emu_z_auto) {
    PlanRow best;
    memset(&best, 0, sizeof(best));
    GPTConfig c = gpt2_config(ZT_L, ZT_C, ZT_NH, ZT_V, 128, ZT_MAXT);
    double need = 1e300;
    for (int z = 0; z <= 3; z++) { // (-r 1 is the default, fixed: only -z is chosen)
        plan_config(&c, 2, ZT_T, groups_flat(1), 1, z, 1, OFFLOAD_NONE, 0, OFFLOAD_NONE, &best);
        need = fmin(need, (double)best.total);
    }
    need += 1073741824.0;
    char extra[256];
    snprintf(extra, sizeof(extra), "-gpu-mem %.0f", need - 1);
    int rc = off_run("", 1, -1, 1, 2, "auto", zt_dir("off_emu_auto"), extra, NULL, NULL);
    CHECKF(rc == 0 && strstr(off_out, "-offload cpu chosen: nothing fits without offload"), "expected -offload cpu chosen (%d):\n%s", rc, off_out);
    snprintf(extra, sizeof(extra), "-gpu-mem %.0f", need);
    rc = off_run("", 1, -1, 1, 2, "auto", zt_dir("off_emu_auto2"), extra, NULL, NULL);
    CHECKF(rc == 0 && strstr(off_out, "chosen") && !strstr(off_out, "-offload cpu chosen"), "expected no offload (%d):\n%s", rc, off_out);
}
#endif
#endif

#endif // ZT_TEST_OFFLOAD_H
