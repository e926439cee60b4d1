// test/test_tune.h — -tune: measured choice of the flags left at auto (-z, -r, -offload), on the CPU
// device at R = 2 (test/test_main.cpp); on the CUDA emulator (test/test_gpu.cu) the offload rows
// where only they fit and the communication-wait column (events around the compute stream's waits).
//
// No assertion on which candidate is fastest (the machine is shared: timings move). What must hold
// whatever the timings: the candidates are rows the planner says fit, every fitting row is measured
// when -tune-rows allows it, the choice is one of them; the run after tuning has the bits of a run
// started with the chosen flags (tuning ran on scratch state and the trainer was rebuilt) and
// allocates what the plan says for them; a resume reuses the checkpoint's recorded choice and
// measures nothing. -tune is the last flag of every command line here: Open MPI's mpirun reads the
// word after any "-tune" as its own parameter file (docs/tune.md).

// The candidates a run's tune table lists (-z, -r, -offload of each row) and the choice; returns the count.
static int tt_table(const char* out, int cand[][3], int cap, int* z, int* r, int* off) {
    int n = 0;
    *z = *r = *off = -1;
    for (const char* p = out; (p = strstr(p, "tune: |")); p++) {
        int a, b;
        char o[16];
        if (sscanf(p, "tune: | %d | %d | %15s |", &a, &b, o) == 3 && n < cap) { cand[n][0] = a; cand[n][1] = b; cand[n][2] = offload_parse(o); n++; }
    }
    const char* c = strstr(out, "tune: chose -z ");
    char o[16];
    if (c && sscanf(c, "tune: chose -z %d -r %d -offload %15[a-z]", z, r, o) == 3) *off = offload_parse(o);
    return n;
}

// The comm_waits and block_collectives of one tune.jsonl line, per rank (R = 2): every block
// collective started in the timed steps was waited for once, and its wait is in comm_wait_ms (on
// CUDA: timed by the events around the compute stream's wait). Returns 1 when they agree on both
// ranks and there were some.
static int tt_waits_match(const char* line, long long* waits, long long* colls) {
    const char* w = strstr(line, "\"comm_waits\": [");
    const char* c = strstr(line, "\"block_collectives\": [");
    long long w1 = -1, c1 = -2;
    *waits = *colls = -1;
    if (!w || !c || sscanf(w, "\"comm_waits\": [%lld, %lld]", waits, &w1) != 2 ||
        sscanf(c, "\"block_collectives\": [%lld, %lld]", colls, &c1) != 2) return 0;
    return *waits > 0 && *waits == *colls && w1 == c1;
}

// A -tune run (its output `out`, its directory dir_t) that measured n -offload cpu candidates, all
// -z >= 1: one is chosen (*z, *r), DONE_00000002 records it, and a run started with the choice (R
// ranks, `device` flags, in `given_dir`) has the same bits (hash_t: the tuned run's hashes). why:
// the line that must say why the candidates are offload rows, or NULL when it must not be there.
static void tt_check_cpu_choice(const char* out, int n_want, const char* why, const char* dir_t, int R, const char* device,
                                const char* given_dir, int* z, int* r, char* hash_t, size_t cap) {
    static char run_out[1 << 20];
    int cand[16][3], off;
    int n = tt_table(out, cand, 16, z, r, &off), ok = n == n_want, chosen = 0;
    for (int i = 0; i < n; i++) {
        ok = ok && cand[i][0] >= 1 && cand[i][2] == OFFLOAD_CPU;
        chosen += cand[i][0] == *z && cand[i][1] == *r;
    }
    int said = why ? strstr(out, why) != NULL : strstr(out, "tune: nothing fits without offload") == NULL;
    CHECKF(ok && chosen == 1 && off == OFFLOAD_CPU && said, "expected %d -offload cpu candidates (-z >= 1), one chosen%s%s:\n%s", n_want,
           why ? ", and " : "", why ? why : "", out);
    zt_hash_line(out, hash_t, cap);
    char path[PATH_MAX], want[128], flags[2048], hash_g[512];
    snprintf(path, sizeof(path), "%s/DONE_00000002", dir_t);
    char* done = zt_read_file(path);
    snprintf(want, sizeof(want), "\ntune -z %d -r %d -offload cpu\n", *z, *r);
    CHECKF(done && strstr(done, want), "DONE_00000002 lacks '%s':\n%s", want + 1, done ? done : "(none)");
    free(done);
    snprintf(flags, sizeof(flags), ZT_MODEL " %s -b 2 -x 2 -v 0 -s 0 -log-hash 1 -o %s -z %d -r %d -offload cpu", device, given_dir, *z, *r);
    int rc = zt_mpirun(R, flags, run_out, sizeof(run_out));
    zt_hash_line(run_out, hash_g, sizeof(hash_g));
    CHECKF(rc == 0 && hash_t[0] && !strcmp(hash_t, hash_g), "after -tune: '%s'\nstarted with -z %d -r %d -offload cpu: '%s'", hash_t, *z, *r, hash_g);
}

#ifndef __CUDACC__ // the CPU suite (test/test_main.cpp); below, the CUDA one (test/test_gpu.cu: the emulator, or a GPU)
// The tune line a choice leaves in DONE markers, and the parse of a recorded choice.
TEST(tune_marker_and_choice_text) {
    char dir[PATH_MAX], path[PATH_MAX + 16];
    snprintf(dir, sizeof(dir), "%s/tune_marker", test_tmpdir());
    mkdir(dir, 0755);
    snprintf(path, sizeof(path), "%s/DONE_00000003", dir);
    Marker mk = {3, 0x1234, 2, -1, 0, "-z 2 -r 1 -offload cpu", ""}, back;
    CHECK(marker_write(path, &mk) == 0 && marker_read(path, &back) == 0 && back.step == 3 && !strcmp(back.tune, "-z 2 -r 1 -offload cpu"));
    char* text = zt_read_file(path);
    CHECKF(text && strstr(text, "\nmodel_crc32c 00000000\ntune -z 2 -r 1 -offload cpu\n"), "marker:\n%s", text ? text : "(none)");
    free(text);
    // a marker as older builds wrote it (no tune line) reads as "not tuned"; the other fields are unchanged
    Marker old = {3, 0x1234, 2, -1, 0, "", ""};
    CHECK(marker_write(path, &old) == 0 && marker_read(path, &back) == 0 && back.ranks == 2 && back.tune[0] == 0);
    text = zt_read_file(path);
    CHECKF(text && !strstr(text, "tune"), "an untuned marker has a tune line:\n%s", text ? text : "(none)");
    free(text);
    // a recorded choice: every flag's value; a record without -offload (before -offload was tuned) means none
    int v[TUNE_NDIMS];
    CHECK(tune_record_values("-z 2 -r 1 -offload cpu", v) == NULL && v[TD_zero_stage] == 2 && v[TD_recompute] == 1 && v[TD_offload] == OFFLOAD_CPU);
    CHECK(tune_record_values("-offload nvme -r 3 -z 0", v) == NULL && v[TD_zero_stage] == 0 && v[TD_recompute] == 3 && v[TD_offload] == OFFLOAD_NVME);
    CHECK(tune_record_values("-z 2 -r 1", v) == NULL && v[TD_offload] == OFFLOAD_NONE);
    CHECK(tune_record_values("-zz 1 -z 2 -r 0", v) == NULL && v[TD_zero_stage] == 2);
    const char* bad = tune_record_values("-z 7 -r 1", v);
    CHECK(bad && !strcmp(bad, "-z"));
    bad = tune_record_values("-z x -r 1", v);
    CHECK(bad && !strcmp(bad, "-z"));
    bad = tune_record_values("-r 1 -offload cpu", v);
    CHECK(bad && !strcmp(bad, "-z"));
    bad = tune_record_values("-z 1 -r 1 -offload disk", v);
    CHECK(bad && !strcmp(bad, "-offload"));
    bad = tune_record_values("-z 1 -r 1 -offload auto", v);
    CHECK(bad && !strcmp(bad, "-offload"));
    // and the text of a choice, the flags in the table's order
    Flags f;
    memset(&f, 0, sizeof(f));
    f.zero_stage = 3; f.recompute = 0;
    snprintf(f.offload, sizeof(f.offload), "nvme");
    char choice[128];
    tune_text(&f, choice, sizeof(choice));
    CHECKF(!strcmp(choice, "-z 3 -r 0 -offload nvme"), "tune_text: '%s'", choice);
}

// The candidates are the planner's fastest -tune-rows rows that fit (the same memory, headroom and
// fixed rates, so its estimates are deterministic), in its order; the choice is one of them that also
// fits as measured (the larger of the tagged peak and the process's VmHWM growth, plus the headroom);
// tune.jsonl holds the same rows, one chosen; explicit flags are kept. The memory splits the rows:
// 0.5 MiB above ZeRO-2 -r 1's need, so every -r 0 row (~0.9 MiB more activations) does not fit.
#define TT_SHAPE TP_DEEP " -b 8 -t 31 -tflops 0.01 -link-gbps 80"
TEST(tune_chooses_among_rows_that_fit) {
    PlanOut po;
    CHECK(tp_plan(2, TT_SHAPE, &po) == 0);
    double mem = po.total[2][1] + TP_HEADROOM + 0.5 * 1048576;
    char extra[256];
    snprintf(extra, sizeof(extra), TT_SHAPE " -gpu-mem %.0f", mem);
    CHECK(tp_plan(2, extra, &po) == 0);
    // the planner's rows that fit, fastest first (ties: table order); ZeRO-0 never with R > 1
    int order[16][2], nfit = 0, misfits = 0;
    double est[16];
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/plan/plan.jsonl", test_tmpdir());
    char* pj = zt_read_file(path);
    for (char* line = pj ? strtok(pj, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        int z, r, off;
        if (sscanf(line, "{\"stage\": %d, \"recompute\": %d, \"offload\": %d", &z, &r, &off) != 3 || off || z == 0) continue;
        if (!po.fits[z][r]) { misfits++; continue; }
        double e = atof(strstr(line, "\"step_s\": ") + 10);
        int at = nfit++;
        while (at > 0 && est[at - 1] > e) { est[at] = est[at - 1]; order[at][0] = order[at - 1][0]; order[at][1] = order[at - 1][1]; at--; }
        est[at] = e; order[at][0] = z; order[at][1] = r;
    }
    free(pj);
    CHECKF(nfit >= 6 && misfits >= 3, "the memory should split the rows: %d fit, %d do not", nfit, misfits);
    const char* dir = zt_dir("tune_fit");
    char flags[2048];
    snprintf(flags, sizeof(flags), ZT_MODEL " " TT_SHAPE " -x 1 -v 0 -s 0 -gpu-mem %.0f -o %s -tune-rows 4 -tune-steps 1 -tune", mem, dir);
    int rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
    CHECKF(rc == 0, "-tune run failed (%d):\n%s", rc, zt_out);
    int cand[16][3], z, r, off;
    int n = tt_table(zt_out, cand, 16, &z, &r, &off);
    CHECKF(n == 4, "%d candidates measured, expected -tune-rows 4:\n%s", n, zt_out);
    int chosen_listed = 0;
    for (int i = 0; i < n; i++) {
        CHECKF(po.fits[cand[i][0]][cand[i][1]] && cand[i][0] == order[i][0] && cand[i][1] == order[i][1] && cand[i][2] == OFFLOAD_NONE,
               "candidate %d: -z %d -r %d, the planner's %d-th fastest that fits is -z %d -r %d", i, cand[i][0], cand[i][1], i + 1, order[i][0], order[i][1]);
        chosen_listed += cand[i][0] == z && cand[i][1] == r;
    }
    CHECKF(chosen_listed == 1 && po.fits[z][r] && off == OFFLOAD_NONE, "chose -z %d -r %d: not one fitting candidate:\n%s", z, r, zt_out);
    char want[64];
    snprintf(want, sizeof(want), "| ZeRO-%d | recompute -r %d", z, r);
    CHECKF(strstr(zt_out, want), "the run does not use the choice ('%s'):\n%s", want, zt_out);
    snprintf(path, sizeof(path), "%s/tune.jsonl", dir);
    char* js = zt_read_file(path);
    int rows = 0, chosen = 0;
    for (char* line = js ? strtok(js, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        int a = 0, b = 0;
        rows++;
        CHECK(sscanf(line, "{\"stage\": %d, \"recompute\": %d", &a, &b) == 2 && po.fits[a][b]);
        CHECK(strstr(line, "\"tagged_peak\": [") && strstr(line, "\"process_peak\": [") && strstr(line, "\"comm_wait_ms\": ") && !strstr(line, "null"));
        long long waits, colls;
        CHECKF(tt_waits_match(line, &waits, &colls), "-z %d -r %d: %lld waits for %lld collectives:\n%s", a, b, waits, colls, line);
        const char* fp = strstr(line, "\"footprint\": ");
        const char* ft = strstr(line, "\"fits\": ");
        double foot = fp ? atof(fp + strlen("\"footprint\": ")) : 0;
        int fits = ft ? atoi(ft + strlen("\"fits\": ")) : -1;
        CHECKF(fits == (foot + TP_HEADROOM <= mem) && foot >= po.total[a][b], "-z %d -r %d: measured fit %d, footprint %.0f, planned %.0f", a, b,
               fits, foot, po.total[a][b]);
        if (strstr(line, "\"chosen\": 1")) { chosen++; CHECK(a == z && b == r && fits == 1); }
    }
    free(js);
    CHECKF(rows == n && chosen == 1, "tune.jsonl: %d rows, %d chosen; %d candidates", rows, chosen, n);
    // explicit flags are kept: -z 3 given, only -r is measured (ZeRO-3's fastest rows that fit)
    snprintf(flags, sizeof(flags), ZT_MODEL " " TT_SHAPE " -x 1 -v 0 -s 0 -gpu-mem %.0f -z 3 -tune-rows 2 -tune-steps 1 -tune", mem);
    rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
    n = tt_table(zt_out, cand, 16, &z, &r, &off);
    int all3 = n == 2;
    for (int i = 0; i < n; i++) all3 = all3 && cand[i][0] == 3 && po.fits[3][cand[i][1]];
    CHECKF(rc == 0 && all3 && z == 3, "-z 3 -tune: expected two fitting -r rows of ZeRO-3 only:\n%s", zt_out);
}

// The run after tuning has the bits of a run started with the chosen flags (the tuning steps ran on
// scratch state: were the trainer not rebuilt, its weights would have moved 2 x 3 steps), allocates
// what the closed form says for them, and records the choice in its checkpoints; a resume with -tune
// reuses that choice, says so and measures nothing, also with another memory; an explicit flag wins;
// a resume without -tune keeps its own flags and says what the record holds.
TEST(tune_run_bitwise_and_resume_reuses) {
    const char* dir = zt_dir("tune_run");
    char dir_t[PATH_MAX], flags[2048], hash_t[512], hash_g[512];
    snprintf(dir_t, sizeof(dir_t), "%s", dir);
    snprintf(flags, sizeof(flags), ZT_MODEL " -b 2 -x 4 -v 0 -s 0 -n 2 -log-hash 1 -gpu-mem 4GiB -o %s -tune-rows 3 -tune-steps 2 -tune", dir_t);
    int rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
    CHECKF(rc == 0, "-tune run failed (%d):\n%s", rc, zt_out);
    int cand[16][3], z, r, off;
    int n = tt_table(zt_out, cand, 16, &z, &r, &off);
    CHECKF(n == 3 && z >= 1 && r >= 0 && off == OFFLOAD_NONE, "expected 3 candidates and a choice without offload:\n%s", zt_out);
    zt_hash_line(zt_out, hash_t, sizeof(hash_t));
    ZtLog lt, lg;
    CHECK(zt_read_log(dir_t, &lt) == 0 && lt.n == 4);
    double mem[4][TAG_COUNT + 1], expect[TAG_COUNT];
    zt_closed_form(2, z, r, 2, expect);
    CHECK(zt_read_memory(dir_t, "start", mem, 2) == 0);
    for (int k = 0; k < 2; k++)
        for (int t = 0; t < TAG_COUNT; t++)
            CHECKF(mem[k][t] == expect[t], "rank %d %s: %.0f bytes, -z %d -r %d needs %.0f", k, mem_tag_name[t], mem[k][t], z, r, expect[t]);
    char path[PATH_MAX], want[64];
    snprintf(path, sizeof(path), "%s/DONE_00000004", dir_t);
    char* done = zt_read_file(path);
    snprintf(want, sizeof(want), "\ntune -z %d -r %d -offload none\n", z, r);
    CHECKF(done && strstr(done, want), "DONE_00000004 lacks '%s':\n%s", want + 1, done ? done : "(none)");
    free(done);
    // the same run started with the chosen flags
    const char* dir2 = zt_dir("tune_given");
    snprintf(flags, sizeof(flags), ZT_MODEL " -b 2 -x 4 -v 0 -s 0 -log-hash 1 -o %s -z %d -r %d", dir2, z, r);
    rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
    zt_hash_line(zt_out, hash_g, sizeof(hash_g));
    CHECKF(rc == 0 && hash_t[0] && !strcmp(hash_t, hash_g), "after -tune: '%s'\nstarted with -z %d -r %d: '%s'", hash_t, z, r, hash_g);
    CHECK(zt_read_log(dir2, &lg) == 0 && lg.n == 4);
    for (int s = 0; s < 4; s++) CHECKF(lt.loss[s] == lg.loss[s] && lt.norm[s] == lg.norm[s], "step %d: loss %.9g vs %.9g", s + 1, lt.loss[s], lg.loss[s]);
    // resume from step 2 with -tune and another memory: the recorded choice, no measuring, the same bits
    snprintf(flags, sizeof(flags), ZT_MODEL " -b 2 -x 4 -v 0 -s 0 -log-hash 1 -gpu-mem 3GiB -o %s -y 1 -resume-step 2 -tune-steps 1 -tune", dir_t);
    rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
    char said[160], hash_y[512];
    snprintf(said, sizeof(said), "tune: resuming step 2, whose checkpoint records -tune's choice -z %d -r %d -offload none: reused, not tuned again", z, r);
    zt_hash_line(zt_out, hash_y, sizeof(hash_y));
    CHECKF(rc == 0 && strstr(zt_out, said) && !strstr(zt_out, "tune: measuring") && !strcmp(hash_y, hash_t),
           "resume with -tune: expected '%s', no measuring, hashes %s:\n%s", said, hash_t, zt_out);
    snprintf(want, sizeof(want), "| ZeRO-%d | recompute -r %d", z, r);
    CHECKF(strstr(zt_out, want), "the resumed run does not use the recorded choice ('%s')", want);
    // without -tune a resume runs the stage the run ran (-z, -r, -offload are recorded: taken when not
    // given), the same bits; given flags win, and the run says what the record holds
    snprintf(flags, sizeof(flags), ZT_MODEL " -b 2 -x 4 -v 0 -s 0 -log-hash 1 -o %s -y 1 -resume-step 2", dir_t);
    rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
    zt_hash_line(zt_out, hash_y, sizeof(hash_y));
    snprintf(want, sizeof(want), "| ZeRO-%d | recompute -r %d", z, r);
    CHECKF(rc == 0 && strstr(zt_out, want) && !strstr(zt_out, "note: the checkpoint records -tune's choice") && !strcmp(hash_y, hash_t),
           "resume without -tune: expected '%s' (the recorded stage), hashes %s:\n%s", want, hash_t, zt_out);
    snprintf(flags, sizeof(flags), ZT_MODEL " -b 2 -x 4 -v 0 -s 0 -o %s -y 1 -resume-step 2 -z 0 -r 1", dir_t);
    rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
    snprintf(said, sizeof(said), "note: the checkpoint records -tune's choice -z %d -r %d -offload none; this run has -z 0 -r 1 -offload none", z, r);
    CHECKF(rc == 0 && strstr(zt_out, said) && strstr(zt_out, "| ZeRO-0 |"), "resume with -z 0 -r 1: expected '%s':\n%s", said, zt_out);
    // an explicit flag wins over the record, and the run says so
    snprintf(flags, sizeof(flags), ZT_MODEL " -b 2 -x 4 -v 0 -s 0 -o %s -y 1 -resume-step 2 -z 3 -tune", dir_t);
    rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
    CHECKF(rc == 0 && strstr(zt_out, "tune: -z 3 given: kept") && strstr(zt_out, "| ZeRO-3 |") && !strstr(zt_out, "tune: measuring"),
           "resume with -z 3 -tune:\n%s", zt_out);
}

// How often `what` occurs in out.
static int tt_count(const char* out, const char* what) {
    int n = 0;
    for (const char* p = out; (p = strstr(p, what)); p++) n++;
    return n;
}

// [offload] The plan's rows with their place of the optimizer state: fit, total and host bytes by
// (stage, recompute, offload). Returns 0 when -plan ran.
typedef struct { int fits[4][4][3]; double total[4][4][3], host[4][4][3]; } TtPlan;
static int tt_plan(const char* extra, TtPlan* tp) {
    PlanOut po;
    memset(tp, 0, sizeof(*tp));
    if (tp_plan(2, extra, &po)) return -1;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/plan/plan.jsonl", test_tmpdir());
    char* pj = zt_read_file(path);
    for (char* line = pj ? strtok(pj, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        int z, r, o;
        if (sscanf(line, "{\"stage\": %d, \"recompute\": %d, \"offload\": %d", &z, &r, &o) != 3) continue;
        tp->fits[z][r][o] = atoi(strstr(line, "\"fits\": ") + 8);
        tp->total[z][r][o] = atof(strstr(line, "\"total\": ") + 9);
        tp->host[z][r][o] = atof(strstr(line, "\"host_bytes\": ") + 14);
    }
    int ok = pj != NULL;
    free(pj);
    return ok ? 0 : -1;
}

// -offload at auto is tuned by the planner's order: with a byte less than the smallest row without
// offload needs (plus the headroom), on the CPU device (where the host is the same memory, so no
// -offload cpu row fits either: it needs the state and its staging) only -offload nvme rows fit
// with -offload-dir. -tune measures those, says why, chooses one; the run has the bits of one
// started with the choice; DONE records "-offload nvme"; a resume with -tune reuses it.
TEST(tune_offload_rows_when_nothing_else_fits) {
    char odir[PATH_MAX], shape[PATH_MAX + 256], extra[PATH_MAX + 512], flags[4096];
    snprintf(odir, sizeof(odir), "%s/tune_offload_files", test_tmpdir());
    mkdir(odir, 0755);
    snprintf(shape, sizeof(shape), TT_SHAPE " -offload-dir %s -offload-buffer 512KiB", odir);
    TtPlan tp;
    CHECK(tt_plan(shape, &tp) == 0);
    double need = 1e300;
    for (int z = 0; z <= 3; z++)
        for (int r = 0; r <= 3; r++) need = fmin(need, tp.total[z][r][OFFLOAD_NONE]);
    double mem = need + TP_HEADROOM - 1;
    snprintf(extra, sizeof(extra), "%s -gpu-mem %.0f", shape, mem);
    CHECK(tt_plan(extra, &tp) == 0);
    int nfit[3] = {0, 0, 0};
    for (int z = 0; z <= 3; z++)
        for (int r = 0; r <= 3; r++)
            for (int o = 0; o < 3; o++) nfit[o] += tp.fits[z][r][o];
    CHECKF(nfit[OFFLOAD_NONE] == 0 && nfit[OFFLOAD_CPU] == 0 && nfit[OFFLOAD_NVME] >= 2, "the memory should leave only nvme rows: %d / %d / %d fit",
           nfit[0], nfit[1], nfit[2]);
    const char* dir = zt_dir("tune_offload");
    char dir_t[PATH_MAX];
    snprintf(dir_t, sizeof(dir_t), "%s", dir);
    snprintf(flags, sizeof(flags), ZT_MODEL " %s -x 2 -v 0 -s 0 -n 1 -log-hash 1 -o %s -tune-rows 2 -tune-steps 1 -tune", extra, dir_t);
    int rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
    CHECKF(rc == 0, "-tune run failed (%d):\n%s", rc, zt_out);
    int cand[16][3], z, r, off;
    int n = tt_table(zt_out, cand, 16, &z, &r, &off);
    int ok = n == 2, chosen = 0;
    for (int i = 0; i < n; i++) {
        ok = ok && cand[i][2] == OFFLOAD_NVME && tp.fits[cand[i][0]][cand[i][1]][OFFLOAD_NVME];
        chosen += cand[i][0] == z && cand[i][1] == r && cand[i][2] == off;
    }
    CHECKF(ok && chosen == 1 && off == OFFLOAD_NVME, "expected fitting nvme candidates only, one chosen:\n%s", zt_out);
    CHECKF(strstr(zt_out, "tune: nothing fits without offload nor with the state in host memory: the candidates are -offload nvme rows"),
           "no line says why the candidates offload:\n%s", zt_out);
    CHECKF(tt_count(zt_out, "offload nvme: master, m, v in a file") == n + 1, "every candidate and the run build with -offload nvme:\n%s", zt_out);
    char path[PATH_MAX], want[128];
    snprintf(path, sizeof(path), "%s/DONE_00000002", dir_t);
    char* done = zt_read_file(path);
    snprintf(want, sizeof(want), "\ntune -z %d -r %d -offload nvme\n", z, r);
    CHECKF(done && strstr(done, want), "DONE_00000002 lacks '%s':\n%s", want + 1, done ? done : "(none)");
    free(done);
    snprintf(path, sizeof(path), "%s/tune.jsonl", dir_t);
    char* js = zt_read_file(path);
    int rows = 0;
    for (char* line = js ? strtok(js, "\n") : NULL; line; line = strtok(NULL, "\n")) rows += strstr(line, "\"offload\": 2, ") != NULL;
    free(js);
    CHECKF(rows == n, "tune.jsonl: %d rows with offload 2 (nvme), %d candidates", rows, n);
    char hash_t[512], hash_g[512], hash_y[512];
    zt_hash_line(zt_out, hash_t, sizeof(hash_t));
    ZtLog lt, lg;
    CHECK(zt_read_log(dir_t, &lt) == 0 && lt.n == 2);
    // the same run started with the chosen flags
    const char* dir2 = zt_dir("tune_offload_given");
    snprintf(flags, sizeof(flags), ZT_MODEL " " TT_SHAPE " -x 2 -v 0 -s 0 -log-hash 1 -o %s -z %d -r %d -offload nvme -offload-dir %s -offload-buffer 512KiB",
             dir2, z, r, odir);
    rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
    zt_hash_line(zt_out, hash_g, sizeof(hash_g));
    CHECKF(rc == 0 && hash_t[0] && !strcmp(hash_t, hash_g), "after -tune: '%s'\nstarted with -z %d -r %d -offload nvme: '%s'\n%s", hash_t, z, r, hash_g, zt_out);
    CHECK(zt_read_log(dir2, &lg) == 0 && lg.n == 2);
    for (int s = 0; s < 2; s++) CHECKF(lt.loss[s] == lg.loss[s] && lt.norm[s] == lg.norm[s], "step %d: loss %.9g vs %.9g", s + 1, lt.loss[s], lg.loss[s]);
    // a resume with -tune reuses the recorded choice, offload included: no measuring, the same bits
    snprintf(flags, sizeof(flags), ZT_MODEL " %s -x 2 -v 0 -s 0 -log-hash 1 -o %s -y 1 -resume-step 1 -tune", extra, dir_t);
    rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
    char said[192];
    snprintf(said, sizeof(said), "tune: resuming step 1, whose checkpoint records -tune's choice -z %d -r %d -offload nvme: reused", z, r);
    zt_hash_line(zt_out, hash_y, sizeof(hash_y));
    CHECKF(rc == 0 && strstr(zt_out, said) && !strstr(zt_out, "tune: measuring") && strstr(zt_out, "offload nvme: ") && !strcmp(hash_y, hash_t),
           "resume with -tune: expected '%s', -offload nvme, no measuring, hashes %s:\n%s", said, hash_t, zt_out);
}

// -tune -offload cpu: -offload is kept, -z and -r are measured among the -offload cpu rows (never
// -z 0, which refuses offload); the run has the bits of one started with the choice; DONE records
// "-offload cpu". A record as builds before -offload was tuned wrote it ("-z Z -r R") means -offload
// none: a resume with -tune reuses it (offload does not change the bits), and with -offload cpu
// given keeps cpu and says so.
// -tune with -offload-params cpu given: the candidates are its rows (ZeRO-3, the state on the host too),
// each built with the parameters in host memory; the run then equals the chosen flags given.
TEST(tune_offload_params_given) {
    const char* dir = zt_dir("tune_params");
    char dir_t[PATH_MAX], flags[2048], hash_t[512], hash_g[512];
    snprintf(dir_t, sizeof(dir_t), "%s", dir);
    snprintf(flags, sizeof(flags), ZT_MODEL " -b 2 -x 2 -v 0 -s 0 -n 1 -log-hash 1 -o %s -offload-params cpu -tune-rows 2 -tune-steps 1 -tune", dir_t);
    int rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
    CHECKF(rc == 0 && strstr(zt_out, "tune: -offload-params cpu given: the candidates are its rows"), "-tune -offload-params cpu failed (%d):\n%s", rc, zt_out);
    int cand[16][3], z = -1, r = -1, off = -1;
    int n = tt_table(zt_out, cand, 16, &z, &r, &off);
    CHECKF(n == 2 && z == 3 && off == OFFLOAD_CPU, "expected 2 candidates at -z 3 -offload cpu, chose -z %d -offload %d (%d):\n%s", z, off, n, zt_out);
    CHECKF(tt_count(zt_out, "offload-params cpu: each rank's") == 2 + 1, "every candidate and the run build with the parameters on the host:\n%s", zt_out);
    zt_hash_line(zt_out, hash_t, sizeof(hash_t));
    snprintf(flags, sizeof(flags), ZT_MODEL " -b 2 -x 2 -v 0 -s 0 -log-hash 1 -o %s -z 3 -r %d -offload cpu -offload-params cpu", zt_dir("tune_params_given"), r);
    rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
    zt_hash_line(zt_out, hash_g, sizeof(hash_g));
    CHECKF(rc == 0 && hash_t[0] && !strcmp(hash_t, hash_g), "after -tune: '%s'\ngiven -z 3 -r %d: '%s'", hash_t, r, hash_g);
}

TEST(tune_offload_cpu_given) {
    const char* dir = zt_dir("tune_cpu");
    char dir_t[PATH_MAX], flags[2048], hash_t[512], hash_y[512];
    snprintf(dir_t, sizeof(dir_t), "%s", dir);
    snprintf(flags, sizeof(flags), ZT_MODEL " -b 2 -x 2 -v 0 -s 0 -n 1 -log-hash 1 -gpu-mem 4GiB -o %s -offload cpu -tune-rows 3 -tune-steps 1 -tune", dir_t);
    int rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
    CHECKF(rc == 0, "-tune -offload cpu failed (%d):\n%s", rc, zt_out);
    int z, r;
    CHECKF(tt_count(zt_out, "offload cpu: master, m, v") == 3 + 1, "every candidate and the run build with -offload cpu:\n%s", zt_out);
    tt_check_cpu_choice(zt_out, 3, NULL, dir_t, 2, "", zt_dir("tune_cpu_given"), &z, &r, hash_t, sizeof(hash_t));
    char path[PATH_MAX];
    // step 1's record as an older build wrote it: without -offload
    Marker mk;
    snprintf(path, sizeof(path), "%s/DONE_00000001", dir_t);
    CHECK(marker_read(path, &mk) == 0);
    snprintf(mk.tune, sizeof(mk.tune), "-z %d -r %d", z, r);
    CHECK(marker_write(path, &mk) == 0);
    snprintf(flags, sizeof(flags), ZT_MODEL " -b 2 -x 2 -v 0 -s 0 -log-hash 1 -o %s -y 1 -resume-step 1 -tune", dir_t);
    rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
    char said[192];
    snprintf(said, sizeof(said), "whose checkpoint records -tune's choice -z %d -r %d: reused, not tuned again (running -z %d -r %d -offload none)", z, r, z, r);
    zt_hash_line(zt_out, hash_y, sizeof(hash_y));
    CHECKF(rc == 0 && strstr(zt_out, said) && !strstr(zt_out, "offload cpu: ") && !strcmp(hash_y, hash_t),
           "resume of an old record: expected '%s', no offload, hashes %s:\n%s", said, hash_t, zt_out);
    snprintf(flags, sizeof(flags), ZT_MODEL " -b 2 -x 2 -v 0 -s 0 -log-hash 1 -o %s -y 1 -resume-step 1 -offload cpu -tune", dir_t);
    rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
    zt_hash_line(zt_out, hash_y, sizeof(hash_y));
    CHECKF(rc == 0 && strstr(zt_out, "tune: -offload cpu given: kept (the checkpoint's choice was -offload none)") && strstr(zt_out, "offload cpu: ") &&
           !strcmp(hash_y, hash_t), "resume with -offload cpu -tune:\n%s", zt_out);
}
#else
// [CUDA] The communication-wait column on the (emulated) CUDA device, R = 2 through the emulator's
// NCCL: every candidate's comm wait is a number (events recorded on the compute stream around each
// cudaStreamWaitEvent on a collective, summed after the steps), and every block collective of the
// timed steps was timed: comm_waits equals block_collectives on each rank. What the emulator cannot
// show is a real stall: its work runs when it is issued (a collective at its issue, once both ranks
// reach it), so the time between the two events is the host's between the two records, not the
// stream's wait. Real stall times need a GPU.
TEST(tune_emu_comm_wait_column) {
    static char out[1 << 20];
    const char* dir = zt_dir("tune_emu");
    char dir_t[PATH_MAX], flags[2048];
    snprintf(dir_t, sizeof(dir_t), "%s", dir);
    snprintf(flags, sizeof(flags), ZT_MODEL " -device cuda -b 2 -x 1 -v 0 -s 0 -gpu-mem 4GiB -tflops 1 -o %s -offload none "
             "-tune-rows 2 -tune-steps 1 -tune", dir_t);
    int rc = zt_mpirun(2, flags, out, sizeof(out));
    CHECKF(rc == 0, "-tune on the CUDA device failed (%d):\n%s", rc, out);
    int rows = 0;
    for (const char* p = out; (p = strstr(p, "tune: |")); p++) {
        int z, r;
        char off[16], cell[32] = "";
        double est, est_tok, tok, ms;
        if (sscanf(p, "tune: | %d | %d | %15s | %lf | %lf | %lf | %lf | %31[^|]|", &z, &r, off, &est, &est_tok, &tok, &ms, cell) != 8) continue;
        char* end;
        double w = strtod(cell, &end);
        rows++;
        CHECKF(end != cell && w >= 0 && !strstr(cell, "n/a"), "-z %d -r %d: comm wait cell '%s' is not a time", z, r, cell);
    }
    CHECKF(rows == 2, "%d measured rows, expected 2:\n%s", rows, out);
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/tune.jsonl", dir_t);
    char* js = zt_read_file(path);
    int lines = 0;
    for (char* line = js ? strtok(js, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        long long waits, colls;
        const char* cw = strstr(line, "\"comm_wait_ms\": ");
        lines++;
        CHECKF(cw && atof(cw + strlen("\"comm_wait_ms\": ")) >= 0 && strncmp(cw + strlen("\"comm_wait_ms\": "), "null", 4), "comm_wait_ms not a time:\n%s", line);
        CHECKF(tt_waits_match(line, &waits, &colls), "%lld timed waits for %lld block collectives:\n%s", waits, colls, line);
        if (!g_test_failed && lines == 1) printf("    %lld block collectives timed in 1 step; comm wait %.*s ms/step\n", colls, (int)strcspn(cw + 16, ","), cw + 16);
    }
    free(js);
    CHECKF(lines == 2, "tune.jsonl: %d lines", lines);
}

#ifndef ENABLE_FP32
// [CUDA] -tune where only -offload cpu rows fit: on the (emulated) CUDA device the host memory is
// apart, so a byte less than the smallest row without offload needs (plus the headroom) leaves the
// -offload cpu rows (R = 1). -tune measures those, says why, chooses one; the run has the bits of one
// started with the choice; DONE records "-offload cpu"; a resume with -tune reuses it.
TEST(tune_emu_offload_cpu_when_nothing_else_fits) {
    static char out[1 << 20];
    GPTConfig c = gpt2_config(ZT_L, ZT_C, ZT_NH, ZT_V, 128, ZT_MAXT);
    double need = 1e300;
    PlanRow row;
    for (int z = 0; z <= 3; z++)
        for (int r = 0; r <= 3; r++) {
            plan_config(&c, 2, ZT_T, groups_flat(1), 1, z, r, OFFLOAD_NONE, 0, OFFLOAD_NONE, &row);
            need = fmin(need, (double)row.total);
        }
    need += 1073741824.0; // the headroom: max(5%, 1 GiB)
    const char* dir = zt_dir("tune_emu_cpu");
    char dir_t[PATH_MAX], flags[2048], hash_t[512], hash_y[512];
    snprintf(dir_t, sizeof(dir_t), "%s", dir);
    snprintf(flags, sizeof(flags), ZT_MODEL " -device cuda -b 2 -x 2 -v 0 -s 0 -n 1 -log-hash 1 -gpu-mem %.0f -tflops 1 -o %s -tune-rows 2 "
             "-tune-steps 1 -tune", need - 1, dir_t);
    int rc = zt_mpirun(1, flags, out, sizeof(out));
    CHECKF(rc == 0, "-tune failed (%d):\n%s", rc, out);
    int z, r;
    tt_check_cpu_choice(out, 2, "tune: nothing fits without offload: the candidates are -offload cpu rows", dir_t, 1, "-device cuda",
                        zt_dir("tune_emu_cpu_given"), &z, &r, hash_t, sizeof(hash_t));
    snprintf(flags, sizeof(flags), ZT_MODEL " -device cuda -b 2 -x 2 -v 0 -s 0 -log-hash 1 -gpu-mem %.0f -o %s -y 1 -resume-step 1 -tune", need - 1, dir_t);
    rc = zt_mpirun(1, flags, out, sizeof(out));
    char said[192];
    snprintf(said, sizeof(said), "tune: resuming step 1, whose checkpoint records -tune's choice -z %d -r %d -offload cpu: reused", z, r);
    zt_hash_line(out, hash_y, sizeof(hash_y));
    CHECKF(rc == 0 && strstr(out, said) && !strstr(out, "tune: measuring") && !strcmp(hash_y, hash_t),
           "resume with -tune: expected '%s', no measuring, hashes %s:\n%s", said, hash_t, out);
}
#endif

// [CUDA] The timed waits in one process (R = 1, the compute stream waiting on the communication
// stream): more waits than the ring of events holds (COMM_WAIT_EVENTS), so the host sums the older
// half on the way; afterwards every wait is summed once (waits), the time is a sum of event pairs
// (> 0: here the host's time between each pair's records), nothing is left pending; without
// time_waits nothing is timed. And the emulator's cudaEventElapsedTime refuses, as a GPU does, an
// event never recorded or created with cudaEventDisableTiming.
TEST(tune_emu_timed_waits_ring) {
    Comm c;
    memset(&c, 0, sizeof(c));
    c.R = 1;
    Launch L;
    memset(&L, 0, sizeof(L));
    comm_init_device(&c, &L, 10);
    int64_t n = 64;
    floatX* full = (floatX*)gpu_zeros(n * sizeof(floatX));
    floatX* shard = (floatX*)gpu_zeros(n * sizeof(floatX));
    CollOp op = {COLL_ALL_GATHER, 0, full, shard, n, 0, CG_PARAM, 0};
    for (int i = 0; i < 10; i++) comm_wait(&c, comm_start(&c, &op)); // not timed: the host never waits, nothing to count
    comm_collect_waits(&c);
    CHECKF(c.waits == 0 && c.wait_s == 0.0 && c.wait_pending == 0, "untimed: %lld waits, %g s", (long long)c.waits, c.wait_s);
    comm_reset_stats(&c);
    c.time_waits = 1;
    int total = COMM_WAIT_EVENTS + COMM_WAIT_EVENTS / 2 + 7;
    for (int i = 0; i < total; i++) comm_wait(&c, comm_start(&c, &op));
    CHECKF(c.waits >= COMM_WAIT_EVENTS / 2 && c.waits % (COMM_WAIT_EVENTS / 2) == 0 && c.wait_pending <= COMM_WAIT_EVENTS &&
           c.waits + c.wait_pending == total, "before collecting: %lld summed (older halves of the ring), %d pending", (long long)c.waits, c.wait_pending);
    comm_collect_waits(&c);
    c.time_waits = 0;
#ifdef ZT_CUDA_EMU
    CHECKF(c.wait_s > 0.0, "%d timed waits sum to %g s: the pairs' times are not summed", total, c.wait_s); // (a GPU may time ~0 per pair)
#endif
    CHECKF(c.waits == total && c.wait_pending == 0 && c.wait_s >= 0.0, "%lld of %d waits summed, %d pending, %g s",
           (long long)c.waits, total, c.wait_pending, c.wait_s);
    cudaEvent_t plain, untimed;
    cudaCheck(cudaEventCreateWithFlags(&plain, cudaEventDefault));
    cudaCheck(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, plain, c.wait_ev[0][1]) == cudaErrorInvalidResourceHandle); // never recorded
    cudaCheck(cudaEventRecord(plain, g_stream));
    cudaCheck(cudaEventRecord(untimed, g_stream));
    CHECK(cudaEventElapsedTime(&ms, plain, untimed) == cudaErrorInvalidResourceHandle);
    CHECK(cudaEventElapsedTime(&ms, c.wait_ev[0][0], plain) == cudaSuccess && ms >= 0.0f);
    cudaGetLastError();
    cudaCheck(cudaEventDestroy(plain));
    cudaCheck(cudaEventDestroy(untimed));
    cudaCheck(cudaFree(full));
    cudaCheck(cudaFree(shard));
    comm_free(&c);
}
#endif
