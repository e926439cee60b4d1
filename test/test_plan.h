// test/test_plan.h — sizing before running: -plan and -z auto.
//
// The planner's per-tag bytes must equal what the program allocates (test_zero.h checks the
// allocations against zt_closed_form) and the same closed form written in the test; -z auto must
// pick the expected stage around each stage's memory need, agree on every rank, and never pick
// ZeRO-0 over ZeRO-1 with several ranks.

// The rows of a -plan run's plan.jsonl: bytes per tag for (stage, recompute), and the totals.
typedef struct {
    double bytes[4][4][TAG_COUNT]; double total[4][4]; int fits[4][4]; int rec_z, rec_r;
    long long coll_n[4][COLL_KINDS], coll_b[4][COLL_KINDS]; // collectives per step by stage (recompute 0)
} PlanOut;

// A deeper model for the -z auto cases: sharding must save more than ZeRO-2/3's buffers cost
// (L > 4 + P_io/P_layer at R = 2) for the stages' needs to fall in order.
#define TP_DEEP "-layers 8 -channels 64 -heads 4"

static int tp_plan(int R, const char* extra, PlanOut* po) {
    const char* dir = zt_dir("plan");
    char flags[2048];
    snprintf(flags, sizeof(flags), ZT_MODEL " -b 2 -v 0 -s 0 -plan -world %d -o %s %s", R, dir, extra);
    int rc = zt_mpirun(1, flags, zt_out, sizeof(zt_out));
    if (rc) { printf("    -plan failed (%d):\n%s\n", rc, zt_out); return rc; }
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/plan.jsonl", dir);
    char* s = zt_read_file(path);
    if (!s) return -1;
    memset(po, 0, sizeof(*po));
    po->rec_z = po->rec_r = -1;
    for (char* line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
        int z, r, off;
        if (sscanf(line, "{\"stage\": %d, \"recompute\": %d, \"offload\": %d", &z, &r, &off) != 3 || off) continue;
        for (int t = 0; t < TAG_COUNT; t++) {
            char key[64];
            snprintf(key, sizeof(key), "\"%s\": ", mem_tag_name[t]);
            po->bytes[z][r][t] = atof(strstr(line, key) + strlen(key));
        }
        po->total[z][r] = atof(strstr(line, "\"total\": ") + 9);
        po->fits[z][r] = atoi(strstr(line, "\"fits\": ") + 8);
        if (atoi(strstr(line, "\"recommended\": ") + 15)) { po->rec_z = z; po->rec_r = r; }
        for (int k = 0; k < COLL_KINDS && r == 0; k++) {
            char key[64];
            snprintf(key, sizeof(key), "\"%s\": [", coll_name[k]);
            const char* p = strstr(line, key);
            if (p) sscanf(p + strlen(key), "%lld, %lld", &po->coll_n[z][k], &po->coll_b[z][k]);
            else po->coll_n[z][k] = po->coll_b[z][k] = -1;
        }
    }
    free(s);
    return 0;
}

// The plan's bytes per tag, for every stage x recompute mode at R = 1, 2, 4, equal the closed form
// (and so what the program allocates: zero_memory_closed_form).
TEST(plan_bytes_equal_closed_form) {
    int Rs[3] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        PlanOut po;
        CHECK(tp_plan(Rs[i], "", &po) == 0);
        for (int z = 0; z <= 3; z++)
            for (int r = 0; r <= 3; r++) {
                double expect[TAG_COUNT];
                zt_closed_form(Rs[i], z, r, 2, expect);
                double total = 0;
                for (int t = 0; t < TAG_COUNT; t++) {
                    total += expect[t];
                    CHECKF(po.bytes[z][r][t] == expect[t], "R=%d z=%d r=%d %s: plan %.0f, closed form %.0f", Rs[i], z, r, mem_tag_name[t],
                           po.bytes[z][r][t], expect[t]);
                }
                CHECK(po.total[z][r] == total);
            }
    }
}

// The headroom every fitting row must leave below 20 GiB per rank: max(5%, 1 GiB) = 1 GiB.
#define TP_HEADROOM 1073741824.0

// -z auto around each stage's need plus the headroom (R = 2, -r 1, GA = 1): with room for ZeRO-1 it
// is chosen (never ZeRO-0, which needs more and sends more); a byte short of ZeRO-1's need plus the
// headroom, ZeRO-2; short of ZeRO-2's, ZeRO-3; short of ZeRO-3's, nothing fits and the run stops
// with what would be needed.
TEST(plan_z_auto_picks_by_memory) {
    PlanOut po;
    CHECK(tp_plan(2, TP_DEEP, &po) == 0);
    double need[4];
    for (int z = 0; z <= 3; z++) need[z] = po.total[z][1] + TP_HEADROOM;
    CHECKF(need[0] > need[1] && need[1] > need[2] && need[2] > need[3], "needs not decreasing: %.0f %.0f %.0f %.0f", need[0], need[1], need[2], need[3]);
    struct { double mem; int expect; } cases[] = {
        {need[0] + 1, 1}, {need[1], 1}, {need[1] - 1, 2}, {need[2], 2}, {need[2] - 1, 3}, {need[3], 3}, {need[3] - 1, -1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char* dir = zt_dir("auto");
        char flags[2048];
        snprintf(flags, sizeof(flags), ZT_MODEL " " TP_DEEP " -b 2 -x 1 -v 0 -s 0 -z auto -r 1 -gpu-mem %.0f -o %s", cases[i].mem, dir);
        int rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
        if (cases[i].expect < 0) {
            CHECKF(rc != 0 && strstr(zt_out, "nothing fits") && strstr(zt_out, "HINT"), "memory %.0f: expected a 'nothing fits' error:\n%s",
                   cases[i].mem, zt_out);
            continue;
        }
        char want[64];
        snprintf(want, sizeof(want), "auto: -z %d -r 1 chosen", cases[i].expect);
        CHECKF(rc == 0 && strstr(zt_out, want), "memory %.0f bytes: expected '%s':\n%s", cases[i].mem, want, zt_out);
        // both ranks allocated what the plan says for that stage
        double mem[4][TAG_COUNT + 1];
        if (zt_read_memory(dir, "start", mem, 2) == 0)
            for (int r = 0; r < 2; r++)
                for (int t = 0; t < TAG_COUNT; t++)
                    CHECKF(mem[r][t] == po.bytes[cases[i].expect][1][t], "rank %d %s: %.0f bytes, the plan for ZeRO-%d says %.0f", r,
                           mem_tag_name[t], mem[r][t], cases[i].expect, po.bytes[cases[i].expect][1][t]);
    }
    // at R = 1 with room, ZeRO-0 (every stage sends nothing; the lowest stage wins the tie)
    const char* dir = zt_dir("auto1");
    char flags[2048];
    snprintf(flags, sizeof(flags), ZT_MODEL " -b 2 -x 1 -v 0 -s 0 -z auto -r 1 -gpu-mem 2GiB -o %s", dir);
    CHECK(zt_mpirun(1, flags, zt_out, sizeof(zt_out)) == 0 && strstr(zt_out, "auto: -z 0 -r 1 chosen"));
}

// Ranks that see different memory still agree: rank 0 decides and broadcasts.
TEST(plan_z_auto_ranks_agree) {
    PlanOut po;
    CHECK(tp_plan(2, "", &po) == 0);
    const char* dir = zt_dir("auto_agree");
    char cmd[8192];
    // rank 0 has room for ZeRO-1, rank 1 only for ZeRO-3: both must run ZeRO-1
    snprintf(cmd, sizeof(cmd),
             ZT_CLEAN_ENV "OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np 1 -x ZT_DEVICE_MEM=%.0f %s --train -threads 1 -i %s "
             ZT_MODEL " -b 2 -x 1 -v 0 -s 0 -z auto -r 1 -o %s : -np 1 -x ZT_DEVICE_MEM=%.0f %s --train -threads 1 -i %s " ZT_MODEL
             " -b 2 -x 1 -v 0 -s 0 -z auto -r 1 -o %s",
             po.total[1][1] + TP_HEADROOM + 1, g_test_self, zt_data(0), dir, po.total[3][1] + TP_HEADROOM + 1, g_test_self, zt_data(0), dir);
    int rc = test_run_cmd(cmd, zt_out, sizeof(zt_out));
    CHECKF(rc == 0 && strstr(zt_out, "auto: -z 1 -r 1 chosen"), "expected ZeRO-1 on both ranks:\n%s", zt_out);
    double mem[4][TAG_COUNT + 1], expect[TAG_COUNT];
    zt_closed_form(2, 1, 1, 2, expect);
    CHECK(zt_read_memory(dir, "start", mem, 2) == 0);
    for (int r = 0; r < 2; r++) CHECKF(mem[r][TAG_MASTER] == expect[TAG_MASTER] && mem[r][TAG_GRADS] == expect[TAG_GRADS], "rank %d differs", r);
}

// The recommendation of -plan: with R > 1 and room for both, ZeRO-1 rather than ZeRO-0; bad input.
TEST(plan_recommendation_and_bad_input) {
    PlanOut po;
    CHECK(tp_plan(4, "-gpu-mem 2GiB", &po) == 0);
    CHECKF(po.rec_z == 1 && po.rec_r == 0, "recommended -z %d -r %d, expected -z 1 -r 0 (lowest stage and recompute at the same time)", po.rec_z, po.rec_r);
    CHECK(tp_plan(1, "-gpu-mem 2GiB", &po) == 0);
    CHECKF(po.rec_z == 0 && po.rec_r == 0, "R=1: recommended -z %d -r %d, expected -z 0 -r 0", po.rec_z, po.rec_r);
    // nothing fits: -plan says so and what would help
    CHECK(tp_plan(2, "-gpu-mem 64KiB", &po) == 0 && strstr(zt_out, "recommendation: none: nothing fits") && strstr(zt_out, "HINT"));
    // an unparseable size
    char flags[512];
    snprintf(flags, sizeof(flags), ZT_MODEL " -plan -gpu-mem 80XB");
    int rc = zt_mpirun(1, flags, zt_out, sizeof(zt_out));
    CHECKF(rc != 0 && strstr(zt_out, "flag -gpu-mem: '80XB' is not a memory size"), "bad -gpu-mem accepted:\n%s", zt_out);
    // -world only with -plan
    snprintf(flags, sizeof(flags), ZT_MODEL " -world 4 -x 1");
    rc = zt_mpirun(1, flags, zt_out, sizeof(zt_out));
    CHECKF(rc != 0 && strstr(zt_out, "needs -plan"), "-world without -plan accepted:\n%s", zt_out);
}

// MFU's denominator: the BF16 dense peak by GPU name; unknown GPUs give 0 (printed "n/a").
TEST(plan_gpu_peak_table) {
    struct { const char* name; double tflops; } cases[] = {
        {"NVIDIA H200", 989}, {"NVIDIA H200 NVL", 835}, {"NVIDIA H100 80GB HBM3", 989}, {"NVIDIA H100 PCIe", 756},
        {"NVIDIA H100 NVL", 835}, {"NVIDIA A100-SXM4-80GB", 312}, {"NVIDIA A100 80GB PCIe", 312}, {"Tesla T4", 0},
        {"NVIDIA GeForce RTX 4090", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        CHECKF(gpu_peak_tflops(cases[i].name) == cases[i].tflops, "%s: %g, expected %g", cases[i].name, gpu_peak_tflops(cases[i].name), cases[i].tflops);
}

// MFU counts FLOPs as llm.c does (gpt2_estimate_mfu: 6N + 6LCT, N = llm.c's num_parameters with the
// padded vocabulary), so the numbers compare with llm.c's: GPT-2 124M (d12) has N = 124,475,904.
TEST(mfu_llmc_flop_count) {
    GPTConfig c;
    CHECK(model_from_descriptor("d12", &c) == 0);
    c.Vp = 50304;
    double want = 6.0 * 124475904.0 + 6.0 * 12 * 768 * 1024;
    printf("    d12, T 1024: %.0f FLOP per token (llm.c: %.0f)\n", mfu_flops_per_token(&c, 1024), want);
    CHECK(mfu_flops_per_token(&c, 1024) == want);
    CHECK(plan_flops_per_token(&c, 1024, 1) > want); // the planner's PaLM count is the larger one
}

// The planner counts what the trainer computes: [LoRA] the frozen base's forward and input gradients
// (4 N: no weight gradient) and the adapters' forward, input and weight gradients (6 N_adapters), by
// closed form for an 8B-shaped Llama (Llama 3.1 8B's sizes, r 16 on q,k,v,o; the count is the
// same at any size); -r 3 one more forward of the layers and adapters; -r 1 and -r 2 the elementwise
// tensors they do not keep (3 times their bytes), priced at the GPU's memory bandwidth, so that on a
// GPU -r 0 < -r 1 < -r 2 < -r 3 in time.
TEST(plan_counts_lora_and_recompute) {
    GPTConfig c;
    memset(&c, 0, sizeof(c));
    c.L = 32; c.C = 4096; c.NH = 32; c.V = 128256; c.Vp = 128256; c.maxT = 8192;
    c.family = FAMILY_LLAMA; c.NKV = 8; c.HD = 128; c.F = 14336; c.norm_eps = 1e-5f; c.rope_type = ROPE_DEFAULT; c.rope_theta = 500000.0;
    double N, N_layers, T = 2048;
    flop_params(&c, &N, &N_layers);
    double full = plan_flops_per_token(&c, 2048, 0);
    CHECKF(full == 6 * N + 12.0 * 32 * 4096 * T, "full fine-tuning: %.0f FLOP per token, 6 N + 12 L ATT T %.0f", full, 6 * N + 12.0 * 32 * 4096 * T);
    GPTConfig lc = c;
    lc.lora_r = 16; lc.lora_alpha = 32; lc.lora_mask = 0xF; // q_proj k_proj v_proj o_proj (LORA_TARGETS' first four Llama rows)
    double Nad = 32.0 * 16 * ((4096 + 4096) + (4096 + 1024) * 2 + (4096 + 4096)); // r (in + rows) per module and layer
    LoraDesc lo;
    lora_describe(&lo, &lc);
    CHECKF((double)lo.num_params == Nad, "adapters %lld, closed form %.0f", (long long)lo.num_params, Nad);
    double lora = plan_flops_per_token(&lc, 2048, 0), want = 4 * N + 6 * Nad + 12.0 * 32 * 4096 * T;
    CHECKF(lora == want, "LoRA: %.0f FLOP per token, 4 N + 6 N_ad + 12 L ATT T %.0f", lora, want);
    double r3 = plan_flops_per_token(&lc, 2048, 3) - lora, want3 = 2 * (N_layers + Nad) + 4.0 * 32 * 4096 * T;
    CHECKF(fabs(r3 - want3) <= 1e-9 * want3, "LoRA -r 3 adds %.0f, the layers' and adapters' forward %.0f", r3, want3);
    double b1 = plan_recompute_bytes_per_token(&c, 1), b2 = plan_recompute_bytes_per_token(&c, 2);
    CHECKF(plan_recompute_bytes_per_token(&c, 0) == 0 && b1 == 3.0 * sizeof(floatX) * 14336 * 32 && b2 > b1,
           "elementwise recompute bytes per token: -r 1 %.0f (SwiGLU's output: %.0f), -r 2 %.0f", b1, 3.0 * sizeof(floatX) * 14336 * 32, b2);
    PlanEnv e;
    memset(&e, 0, sizeof(e));
    e.flops = 0.5 * 989e12; e.membw = 0.5 * 4.8e12; // an H200's, as plan_env assumes them
    double t[4];
    for (int r = 0; r < 4; r++) t[r] = plan_compute_s(&e, &lc, 2048, r);
    CHECKF(t[0] < t[1] && t[1] < t[2] && t[2] < t[3], "compute s per token by -r: %.4g %.4g %.4g %.4g", t[0], t[1], t[2], t[3]);
    printf("    8B, T 2048: full %.4g GFLOP per token, LoRA r 16 (q,k,v,o) %.4g (%.3f of it); on an H200 at half peak: %.4g %.4g %.4g %.4g us per token at -r 0..3\n",
           full / 1e9, lora / 1e9, lora / full, t[0] * 1e6, t[1] * 1e6, t[2] * 1e6, t[3] * 1e6);
}

// The plan's collectives per step, by kind and bytes, equal the schedule's closed form (which
// zero_comm_schedule checks against what the runs log), without and with accumulation.
TEST(plan_collectives_equal_closed_form) {
    const int R = 3;
    for (int GA = 1; GA <= 3; GA += 2) {
        PlanOut po;
        char extra[64];
        snprintf(extra, sizeof(extra), "-d %d", 2 * ZT_T * R * GA);
        CHECK(tp_plan(R, extra, &po) == 0);
        for (int z = 0; z <= 3; z++) {
            int64_t want_n[COLL_KINDS], want_b[COLL_KINDS];
            zt_comm_closed_form(R, z, GA, want_n, want_b);
            for (int k = 0; k < COLL_KINDS; k++)
                CHECKF(po.coll_n[z][k] == want_n[k] && po.coll_b[z][k] == want_b[k], "GA=%d z=%d %s: plan %lld, %lld; schedule %lld, %lld", GA, z,
                       coll_name[k], po.coll_n[z][k], po.coll_b[z][k], (long long)want_n[k], (long long)want_b[k]);
        }
    }
}

// The headroom rule: a row fits only when it leaves max(5% of the memory, 1 GiB) free. A row that
// fits the memory but not the headroom is "tight" and never recommended (-z auto follows the same
// rule: plan_z_auto_picks_by_memory). Planned, not run: a 300M-parameter model at R = 4, whose
// stages differ by more than the headroom.
#define TP_BIG "-layers 24 -channels 1024 -heads 16 -b 1 -tflops 0.02"
TEST(plan_headroom_rule) {
    PlanOut po;
    CHECK(tp_plan(4, TP_BIG, &po) == 0);
    // ZeRO-1 -r 0 with half a GiB spare (memory < 20 GiB: the 1 GiB floor) is tight
    double mem = po.total[1][0] + TP_HEADROOM / 2;
    char extra[256];
    snprintf(extra, sizeof(extra), TP_BIG " -gpu-mem %.0f", mem);
    CHECK(tp_plan(4, extra, &po) == 0);
    CHECKF(!po.fits[1][0] && strstr(zt_out, "| tight |") && strstr(zt_out, "headroom 1.00 GiB, max(5% of the memory, 1 GiB)"),
           "ZeRO-1 -r 0 leaves half a GiB, less than the headroom: not 'tight':\n%s", zt_out);
    CHECKF(po.rec_z >= 2 && po.total[po.rec_z][po.rec_r] + TP_HEADROOM <= mem && po.fits[po.rec_z][po.rec_r],
           "recommended -z %d -r %d: expected a row that leaves the headroom:\n%s", po.rec_z, po.rec_r, zt_out);
    for (int z = 0; z <= 3; z++)
        for (int r = 0; r <= 3; r++)
            CHECKF(po.fits[z][r] == (po.total[z][r] + TP_HEADROOM <= mem), "z=%d r=%d: fits %d, total %.0f of %.0f", z, r, po.fits[z][r], po.total[z][r], mem);
    // the 5% part: at 40 GiB the headroom is 2 GiB, printed and written beside every row of plan.jsonl
    CHECK(tp_plan(2, "-tflops 0.02 -gpu-mem 40GiB", &po) == 0);
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/plan/plan.jsonl", test_tmpdir());
    char* js = zt_read_file(path);
    CHECKF(strstr(zt_out, "headroom 2.00 GiB") && js && strstr(js, "\"headroom\": 2147483648"), "40 GiB: expected a 2 GiB headroom:\n%s", zt_out);
    free(js);
}

// Each byte cell carries its own unit, so a model of kilobytes reads on a machine of gigabytes.
TEST(plan_units_per_cell) {
    struct { double b; const char* s; } cases[] = {
        {0, "0 B"}, {1023, "1023 B"}, {1024, "1.00 KiB"}, {1536, "1.50 KiB"}, {10.0 * 1048576, "10.0 MiB"}, {1023.9 * 1048576, "1.00 GiB"},
        {20.84 * 1073741824.0, "20.8 GiB"}, {812 * 1024.0, "812 KiB"}, {-1.5 * 1073741824.0, "-1.50 GiB"}, {3.0 * 1099511627776.0, "3.00 TiB"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        CHECKF(!strcmp(fmt_bytes(cases[i].b).s, cases[i].s), "%.0f bytes: '%s', expected '%s'", cases[i].b, fmt_bytes(cases[i].b).s, cases[i].s);
    PlanOut po;
    CHECK(tp_plan(1, "-tflops 0.02 -gpu-mem 80GiB", &po) == 0);
    CHECKF(!strstr(zt_out, " 0.00 |"), "a cell reads 0.00:\n%s", zt_out);
    char want[64]; // the parameters' cell in its own unit (KiB here), though the memory is 80 GiB
    snprintf(want, sizeof(want), "| %9s |", fmt_bytes(po.bytes[0][0][TAG_PARAMS]).s);
    CHECKF(strstr(zt_out, want) && strstr(want, "KiB") && strstr(zt_out, "memory per rank 80.0 GiB"), "'%s' not in the table:\n%s", want, zt_out);
}

// One process of this binary as ./train, without mpirun (an MPI singleton: quicker to start).
static int tp_run(const char* flags) {
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), ZT_CLEAN_ENV "OMP_NUM_THREADS=1 %s --train %s", g_test_self, flags);
    return test_run_cmd(cmd, zt_out, sizeof(zt_out));
}

// -plan -device cuda on a machine without a GPU (this test binary has no CUDA at all): sizes from
// -gpu-mem, the rate from the -gpu's peak, for any -world; without -gpu-mem it says what to give.
TEST(plan_cuda_without_gpu) {
    char flags[512];
    snprintf(flags, sizeof(flags), "-plan -device cuda -gpu-mem 80GiB -gpu h100 -world 8");
    int rc = tp_run(flags);
    CHECKF(rc == 0 && strstr(zt_out, "cuda, GPU h100") && strstr(zt_out, "memory per rank 80.0 GiB (-gpu-mem)") &&
           strstr(zt_out, "compute 494 TFLOP/s") && strstr(zt_out, "x R 8 x") && strstr(zt_out, "recommendation: -z"),
           "-plan -device cuda without a GPU:\n%s", zt_out);
    snprintf(flags, sizeof(flags), "-plan -device cuda -gpu-mem 40GiB -gpu a100 -world 64 -e d24");
    rc = tp_run(flags);
    CHECKF(rc == 0 && strstr(zt_out, "156 TFLOP/s") && strstr(zt_out, "x R 64 x") && strstr(zt_out, "InfiniBand NDR"), "-world 64:\n%s", zt_out);
    snprintf(flags, sizeof(flags), "-plan -device cuda -world 8");
    rc = tp_run(flags);
    CHECKF(rc == 2 && strstr(zt_out, "-gpu-mem") && strstr(zt_out, "HINT"), "no -gpu-mem without a GPU: expected exit 2 and a hint:\n%s", zt_out);
    snprintf(flags, sizeof(flags), "-plan -device cuda -gpu-mem 16GiB -gpu v100");
    rc = tp_run(flags);
    CHECKF(rc == 2 && strstr(zt_out, "flag -gpu: 'v100'"), "unknown -gpu accepted:\n%s", zt_out);
    snprintf(flags, sizeof(flags), "-device cuda -gpu-mem 80GiB -x 1"); // training still needs a GPU
    rc = tp_run(flags);
    CHECKF(rc == 2, "-device cuda without a GPU trained?\n%s", zt_out);
}

// The planner's schedule is the hooks' own: zero_count_step walks them over a counting Comm (no
// data), and its counts and bytes equal the test's closed form for every stage, R = 1..4 and
// GA = 1..3 (the closed form the runs' logs are checked against: zero_comm_schedule). In process.
TEST(plan_schedule_counted_from_hooks) {
    GPTConfig c;
    memset(&c, 0, sizeof(c));
    c.L = ZT_L; c.C = ZT_C; c.NH = ZT_NH; c.V = ZT_V; c.Vp = 128; c.maxT = ZT_MAXT;
    ModelDesc d;
    model_describe(&d, &c);
    for (int R = 1; R <= 4; R++) {
        BlockLayout lay;
        model_layout(&d, &lay, R, 0);
        for (int z = 0; z <= 3; z++)
            for (int GA = 1; GA <= 3; GA++) {
                int64_t n[COLL_KINDS], b[COLL_KINDS], want_n[COLL_KINDS], want_b[COLL_KINDS];
                zero_count_step(&lay, z, GA, n, b, NULL);
                zt_comm_closed_form(R, z, GA, want_n, want_b);
                for (int k = 0; k < COLL_KINDS; k++)
                    CHECKF(n[k] == want_n[k] && b[k] == want_b[k], "R=%d z=%d GA=%d %s: counted %lld, %lld; closed form %lld, %lld", R, z, GA,
                           coll_name[k], (long long)n[k], (long long)b[k], (long long)want_n[k], (long long)want_b[k]);
            }
        layout_free(&lay);
    }
    // a hook that issued one more collective would be counted: the counting Comm is the real comm_start
    Comm cc;
    memset(&cc, 0, sizeof(cc));
    cc.R = 2; cc.count_only = 1;
    cc.grp[CG_PARAM].n = 2;
    CollOp op = {COLL_ALL_GATHER, 0, NULL, NULL, 8, 0, CG_PARAM, 0};
    comm_wait(&cc, comm_start(&cc, &op));
    CHECK(cc.count[COLL_ALL_GATHER] == 1 && cc.bytes[COLL_ALL_GATHER] == 16 * (int64_t)sizeof(floatX));
}
