// test/test_ux.h — what a user sees at start-up and while a run goes: the settings table shows
// every value as resolved, one Psi everywhere, a line before the slow first evaluation, an ETA,
// and stdout that reaches a file line by line.
#include <ctype.h>
#include <signal.h>

// A run of the small ZeRO-test model on its small-vocabulary data, as ./train (no -threads: the
// settings table must show what 0 resolved to).
static int ux_run(const char* flags, char* out, size_t cap) {
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), ZT_CLEAN_ENV "OMP_NUM_THREADS=1 %s --train -i %s -j %s " ZT_MODEL " -b 2 %s", g_test_self, zt_data(0),
             zt_data(1), flags);
    return test_run_cmd(cmd, out, cap);
}

// The value column of a flag's row in the settings table, without the padding ("" if no row).
static void ux_table_value(const char* out, const char* flag, char* v, size_t cap) {
    char key[64];
    snprintf(key, sizeof(key), "| %-15s | ", flag);
    const char* p = strstr(out, key);
    v[0] = 0;
    if (!p) return;
    p += strlen(key);
    size_t n = strcspn(p, "\n");
    while (n > 0 && (p[n - 1] == '|' || p[n - 1] == ' ')) n--;
    if (n >= cap) n = cap - 1;
    memcpy(v, p, n);
    v[n] = 0;
}

// Whether a flag is at auto in a run: given as "auto" on the command line, or not given and auto by default.
static int ux_is_auto(const char* cmdline, const char* flag, const char* def) {
    char key[64];
    snprintf(key, sizeof(key), " %s ", flag);
    const char* p = strstr(cmdline, key);
    return p ? !strncmp(p + strlen(key), "auto ", 5) : !strcmp(def, "auto");
}

// V of a row reading "auto → V", or "auto (why) → V" (-device auto says why it took the CPU); else NULL.
static const char* ux_auto_value(const char* v) {
    if (strncmp(v, "auto ", 5)) return NULL;
    const char* arrow = strstr(v, "\u2192 ");
    if (!arrow || (arrow != v + 5 && v[5] != '(')) return NULL;
    return arrow + strlen("\u2192 ");
}

// Every flag of the flag table that is at auto (by default or given so: -z auto -r auto) reads
// "auto → V" with V what the run uses: never "auto" itself, never the internal "decide later"
// sentinel -1, no 0 for a rate; integers are counts (>= 0), rates positive. With unused_ok, a value
// nothing needed may say "unused: why" instead (the planner's inputs when nothing plans). Returns how many.
static int ux_check_autos(const char* out, const char* cmdline, int unused_ok) {
    char v[256];
    int autos = 0;
#define X(flag, field, type, def, run, help)                                                                                 \
    if (ux_is_auto(cmdline, flag, def)) {                                                                                \
        autos++;                                                                                                         \
        ux_table_value(out, flag, v, sizeof(v));                                                                         \
        const char* r = ux_auto_value(v); /* "auto → V", or "auto (why) → V" (-device) */                               \
        CHECKF(r && r[0] && strncmp(r, "auto", 4) && strncmp(r, "-1", 2), "%s: row reads '%s'", flag, v);               \
        if (r && unused_ok && !strncmp(r, "unused: ", 8)) r = NULL; /* said why nothing needed it */                    \
        if (r && type == F_FLOAT) CHECKF(atof(r) > 0, "%s: rate '%s' is not positive", flag, r);                        \
        if (r && type == F_INT) CHECKF(isdigit((unsigned char)r[0]), "%s: '%s' is not a count", flag, r);              \
    }
    FLAG_TABLE(X)
#undef X
    return autos;
}

#define UX_FLAGS "-x 20 -v 10 -s 0 -z auto -r auto"
TEST(ux_settings_table_resolved) {
    int rc = ux_run(UX_FLAGS, zt_out, sizeof(zt_out));
    CHECKF(rc == 0, "run failed:\n%s", zt_out);
    char v[256];
    int autos = ux_check_autos(zt_out, " " ZT_MODEL " -b 2 " UX_FLAGS " ", 0);
    CHECKF(autos == 21, "%d flags at auto, expected 21: -device -l -u -doc-attention -verbose -link-gbps -gpus-per-node -link-intra -link-inter -tflops -io-timeout -export-dtype -gpu -offload -pcie-gbps -disk-gbps -lora-base -attn -chat-prompt by default, -z -r given", autos);
    // the values themselves: 5% of 20 steps of warmup, the CPU device's defaults, the planner's inputs
    struct { const char* flag; const char* want; } exact[] = {
        {"-u", "auto \u2192 1"}, {"-device", "auto (this build has no CUDA) \u2192 cpu"}, {"-l", "auto \u2192 1e-3"}, {"-link-gbps", "auto \u2192 80 inside a node, 80 between nodes (-link-intra, -link-inter)"},
        {"-link-inter", "auto \u2192 80 Gbit/s (default: shared memory)"}, {"-gpus-per-node", "auto \u2192 1 (the launcher's ranks per node)"},
        {"-d", "-1 \u2192 32"}, {"-threads", "0 \u2192 1"}, {"-x", "20"}, {"-gpu", "auto \u2192 unused: cpu device"},
        {"-doc-attention", "auto \u2192 0"}, // (plain shards)
        {"-attn", "auto \u2192 own (cpu device)"},
    };
    for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++) {
        ux_table_value(zt_out, exact[i].flag, v, sizeof(v));
        CHECKF(!strcmp(v, exact[i].want), "%s: '%s', expected '%s'", exact[i].flag, v, exact[i].want);
    }
    ux_table_value(zt_out, "-z", v, sizeof(v));
    char want[64];
    const char* chosen = strstr(zt_out, "auto: -z ");
    CHECK(chosen != NULL);
    if (chosen) {
        snprintf(want, sizeof(want), "auto \u2192 %c", chosen[9]);
        CHECKF(!strcmp(v, want), "-z: '%s', the run chose -z %c", v, chosen[9]);
    }
    ux_table_value(zt_out, "-tflops", v, sizeof(v));
    CHECKF(strstr(v, "(measured)"), "-tflops: '%s'", v);
    // one Psi: the model line's count is the memory table's and the model-state line's
    const char* m = strstr(zt_out, "model: ");
    const char* pm = m ? strstr(m, "Psi = ") : NULL;
    const char* pt = strstr(zt_out, "(Psi = ");
    const char* ps = strstr(zt_out, "model state per rank");
    ps = ps ? strstr(ps, "Psi = ") : NULL;
    CHECKF(pm && pt && ps && atoll(pm + 6) == atoll(pt + 7) && atoll(pm + 6) == atoll(ps + 6) && atoll(pm + 6) > 0,
           "Psi differs between the model line, the memory table and the model state line:\n%s", zt_out);
    // a line before the first evaluation, and an ETA on every step line
    const char* ev = strstr(zt_out, "step     0 | evaluating the val loss");
    const char* vl = strstr(zt_out, "step     0 | val loss");
    CHECKF(ev && vl && ev < vl, "no line before the step-0 evaluation:\n%s", zt_out);
    int steps = 0, etas = 0;
    for (const char* p = strstr(zt_out, "\nstep "); p; p = strstr(p + 1, "\nstep "))
        if (strstr(p, " | loss ") && strstr(p, " | loss ") < strchr(p + 1, '\n')) {
            steps++;
            const char* e = strstr(p, " | eta ");
            if (e && e < strchr(p + 1, '\n')) etas++;
        }
    CHECKF(steps == 20 && etas == 20, "%d step lines, %d with an ETA", steps, etas);
    // -e, -b, -t and -poison at auto too (the model shrunk by overrides; -t auto is capped at -max-seq)
    char cmd[8192];
#define UX_FLAGS2 "-layers 1 -channels 32 -heads 2 -vocab 97 -max-seq 62 -x 1 -v 0 -s 0"
    snprintf(cmd, sizeof(cmd), ZT_CLEAN_ENV "OMP_NUM_THREADS=1 %s --train -i %s " UX_FLAGS2, g_test_self, zt_data(0));
    rc = test_run_cmd(cmd, zt_out, sizeof(zt_out));
    CHECKF(rc == 0, "run failed:\n%s", zt_out);
    autos = ux_check_autos(zt_out, " -i x " UX_FLAGS2 " ", 1);
    CHECKF(autos == 23, "%d flags at auto, expected 23: -device -e -b -t -l -u -poison -doc-attention -verbose -link-gbps -gpus-per-node -link-intra -link-inter -tflops -io-timeout -export-dtype -gpu -offload -pcie-gbps -disk-gbps -lora-base -attn -chat-prompt", autos);
    struct { const char* flag; const char* want; } exact2[] = {
        {"-e", "auto \u2192 tiny"}, {"-b", "auto \u2192 8"}, {"-t", "auto \u2192 62"}, {"-poison", "auto \u2192 0"},
    };
    for (size_t i = 0; i < sizeof(exact2) / sizeof(exact2[0]); i++) {
        ux_table_value(zt_out, exact2[i].flag, v, sizeof(v));
        CHECKF(!strcmp(v, exact2[i].want), "%s: '%s', expected '%s'", exact2[i].flag, v, exact2[i].want);
    }
    // nothing plans a run with -z and -r given: the planner's rate and link say so, not 0
    rc = ux_run("-x 1 -v 0 -s 0 -z 1 -r 1", zt_out, sizeof(zt_out));
    CHECK(rc == 0);
    ux_table_value(zt_out, "-tflops", v, sizeof(v));
    CHECKF(!strncmp(v, "auto \u2192 unused", strlen("auto \u2192 unused")), "-tflops without planning: '%s'", v);
    ux_table_value(zt_out, "-u", v, sizeof(v));
    CHECKF(!strcmp(v, "auto \u2192 0"), "-u at -x 1: '%s'", v);
}

// Redirected to a file, stdout is line-buffered: the first step line is in the file, whole, while
// the run is still going (a block-buffered stdout holds it, or writes 4 KiB pieces that end
// mid-line). The run is started in the background, watched for up to 120 s, then stopped.
TEST(ux_stdout_line_buffered) {
    char path[PATH_MAX], cmd[8192], pidtxt[64];
    snprintf(path, sizeof(path), "%s/ux_stdout.txt", test_tmpdir());
    snprintf(cmd, sizeof(cmd), ZT_CLEAN_ENV "OMP_NUM_THREADS=1 %s --train -i %s -j %s " ZT_MODEL " -b 2 -x 1000000 -v 0 -s 0 > %s 2>&1 & echo $!",
             g_test_self, zt_data(0), zt_data(1), path);
    CHECK(test_run_cmd(cmd, pidtxt, sizeof(pidtxt)) == 0);
    pid_t pid = (pid_t)atol(pidtxt);
    CHECKF(pid > 1, "no pid: '%s'", pidtxt);
    if (pid <= 1) return;
    int seen = 0, alive = 0, whole = 0;
    for (double t0 = test_now_s(); test_now_s() - t0 < 120.0 && !seen;) {
        usleep(50000);
        char* s = zt_read_file(path);
        const char* p = s ? strstr(s, "step     1/") : NULL;
        if (p) {
            seen = 1;
            alive = kill(pid, 0) == 0;
            whole = s[strlen(s) - 1] == '\n'; // what the file holds ends with a whole line
        }
        free(s);
    }
    kill(pid, SIGTERM);
    for (int i = 0; i < 100 && kill(pid, 0) == 0; i++) usleep(50000);
    if (kill(pid, 0) == 0) kill(pid, SIGKILL);
    CHECKF(seen && alive && whole, "first step line in the file: %s, run still going: %s, file ends with a whole line: %s", seen ? "yes" : "no",
           alive ? "yes" : "no", whole ? "yes" : "no");
}

// The default start-up (-verbose 0, ZT_VERBOSE unset) is a short block a person reads: at most 25
// lines before the first step, with the rows of the flags given (a flag left at its default has
// none), the device line naming the stage, recompute, offload and LoRA, one Psi named once, memory
// per rank against what the device has, and how the step time is known; log.jsonl's settings record
// holds every flag as given and resolved. A resume names the flags the checkpoint supplied that
// differ from their defaults in one line. -verbose 1 gives every flag's row (and, in a run that
// trains, the memory table by tag that the zero_ and offload_ cases read).
TEST(ux_startup_short) {
    char dir[PATH_MAX], cmd[8192];
    snprintf(dir, sizeof(dir), "%s/ux_short", test_tmpdir());
    for (int pass = 0; pass < 3; pass++) { // 0: a fresh LoRA run, 1: its resume, 2: -verbose 1
        snprintf(cmd, sizeof(cmd), ZT_CLEAN_ENV "ZT_VERBOSE= OMP_NUM_THREADS=1 %s --train -threads 1 -i %s -j %s %s", g_test_self, zt_data(0), zt_data(1),
                 "");
        size_t n = strlen(cmd);
        if (pass == 0) snprintf(cmd + n, sizeof(cmd) - n, "-e llama-tiny -layers 2 -vocab 97 -b 2 -t 16 -x 2 -v 0 -s 0 -lora 4 -z 1 -n 2 -o %s", dir);
        else if (pass == 1) snprintf(cmd + n, sizeof(cmd) - n, "-o %s -y 1 -x 3", dir);
        else snprintf(cmd + n, sizeof(cmd) - n, "-o %s -y 1 -x 3 -verbose 1", dir);
        int rc = test_run_cmd(cmd, zt_out, sizeof(zt_out));
        CHECKF(rc == 0, "pass %d: exit %d\n%s", pass, rc, zt_out);
        if (rc) return;
        const char* first = strstr(zt_out, "\nstep "); // the first step line (or evaluation) ends the start-up
        if (pass == 2) first = strstr(zt_out, "resume: reading step");
        int lines = 0;
        for (const char* p = zt_out; first && p < first; p++) lines += *p == '\n';
        int psi = 0;
        for (const char* p = zt_out; first && (p = strstr(p, "Psi")) && p < first; p++) psi++;
        if (pass == 2) {
            CHECKF(strstr(zt_out, "| -beta1          | (from checkpoint) \u2192 0.9") && strstr(zt_out, "| -channels       | (from checkpoint) \u2192 0"),
                   "-verbose 1: not every flag's row:\n%s", zt_out);
            continue;
        }
        CHECKF(first && lines <= 25, "pass %d: %d lines before the first step (at most 25):\n%s", pass, lines, zt_out);
        CHECKF(!strstr(zt_out, "| -beta1 ") && !strstr(zt_out, "(MiB) by tag") && strstr(zt_out, "-verbose 1 prints every row"),
               "pass %d: a row of a flag at its default, or the memory table by tag:\n%s", pass, zt_out);
        CHECKF(psi == 1 && !strstr(zt_out, "Psi'"), "pass %d: Psi named %d times before the first step (once wanted), or Psi' shown:\n%s", pass, psi, zt_out);
        CHECKF(strstr(zt_out, "| ZeRO-1 | recompute -r ") && strstr(zt_out, "| offload none | LoRA r 4") && strstr(zt_out, "memory per rank: ") &&
               strstr(zt_out, " available per rank (params ") && strstr(zt_out, "time: the first step measures it"),
               "pass %d: the device line, the memory line or the time line:\n%s", pass, zt_out);
        if (pass == 0)
            CHECKF(strstr(zt_out, "| -lora           | 4 ") && strstr(zt_out, "(given flags beyond the first rows and "), "the given flags' rows (12 of them):\n%s", zt_out);
        else
            CHECKF(strstr(zt_out, "from the checkpoint (") && strstr(zt_out, " -lora 4") && strstr(zt_out, " -z 1") && strstr(zt_out, "| -y              | 1 "),
                   "the resume's rows (given, and from the checkpoint):\n%s", zt_out);
        printf("    %s: %d lines before the first step\n", pass ? "resume" : "fresh LoRA run", lines);
    }
    snprintf(cmd, sizeof(cmd), "%s/log.jsonl", dir);
    char* log = zt_read_file(cmd);
    CHECKF(log && strstr(log, "{\"settings\": {\"-device\": [") && strstr(log, "\"-beta1\": [\"0.9\", \"0.9\"]") && strstr(log, "\"-lora\": [\"4\", \"4\"]"),
           "log.jsonl holds no settings record with every flag:\n%.2000s", log ? log : "(none)");
    free(log);
}
