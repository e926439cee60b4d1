// test/test.h — a tiny test framework: TEST(name) registers a case, CHECK records a failure.
//
// The test binary runs every registered case (or those whose name contains argv[1]) and ends
// with the line "N passed, N failed" that CI reads. A case fails if any CHECK in it failed.
// `make test` runs the suite sized to stay short; `make test-long` (ZT_TEST_LONG=1) widens the matrices
// (test_long) and runs the cases a binary leaves to it (test_long_only: repetitions of what another
// binary of make test already runs). `BIN --long-only` runs just those cases.
// defines: TEST, CHECK, CHECKF, test_run_all, test_run_cmd, test_tmpdir, test_long, test_long_only
#ifndef ZT_TEST_H
#define ZT_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <time.h>
#include <sys/wait.h>
#include <sys/resource.h>

typedef void (*test_fn)(void);
typedef struct { const char* name; test_fn fn; } TestCase;

static TestCase g_tests[512];
static int g_ntests = 0;
static int g_test_failed = 0;      // failures recorded in the running case
static const char* g_test_skip = NULL; // set by TEST_SKIP: the running case could not run here
static const char* g_test_name = "";

static inline int test_register(const char* name, test_fn fn) {
    if (g_ntests >= (int)(sizeof(g_tests) / sizeof(g_tests[0]))) { fprintf(stderr, "too many tests\n"); exit(1); }
    g_tests[g_ntests].name = name;
    g_tests[g_ntests].fn = fn;
    return g_ntests++;
}

#define TEST(name)                                                          \
    static void test_##name(void);                                          \
    static int test_reg_##name = test_register(#name, test_##name);         \
    static void test_##name(void)

// CHECK(cond): on failure print the expression, file:line and keep going (the case fails).
#define CHECK(cond) CHECKF(cond, "%s", "")
// CHECKF(cond, fmt, ...): as CHECK, with a printf-style explanation.
#define CHECKF(cond, ...)                                                   \
    do {                                                                    \
        if (!(cond)) {                                                      \
            g_test_failed++;                                                \
            fprintf(stdout, "    CHECK FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stdout, __VA_ARGS__);                                   \
            fprintf(stdout, "\n");                                          \
            fflush(stdout);                                                 \
        }                                                                   \
    } while (0)

// TEST_SKIP(reason): the case cannot run on this machine (a missing optional tool); it is
// reported as SKIP with the reason and counted apart, never as passed.
#define TEST_SKIP(reason) do { g_test_skip = (reason); return; } while (0)

// Run a shell command, capture up to cap-1 bytes of its combined stdout+stderr into out
// (may be NULL), return its exit status (or -1 if it could not be run).
static inline int test_run_cmd(const char* cmd, char* out, size_t cap) {
    char full[8192];
    snprintf(full, sizeof(full), "(%s) 2>&1", cmd);
    FILE* p = popen(full, "r");
    if (!p) return -1;
    size_t n = 0;
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), p)) > 0) {
        if (out && n + 1 < cap) {
            size_t take = got < cap - 1 - n ? got : cap - 1 - n;
            memcpy(out + n, buf, take);
            n += take;
        }
    }
    if (out && cap) out[n] = 0;
    int st = pclose(p);
    if (st == -1) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// A forked child's end: wait for it, read what it wrote to `path` (its stderr) into msg, and return
// its exit code (128 + the signal when one ended it).
static inline int test_child_result(pid_t pid, const char* path, char* msg, size_t cap) {
    int status = 0;
    waitpid(pid, &status, 0);
    FILE* f = fopen(path, "r");
    size_t got = f ? fread(msg, 1, cap - 1, f) : 0;
    msg[got] = 0;
    if (f) fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// A fresh scratch directory for this test process (created once, under $TMPDIR or /tmp).
static int g_tmpdir_made = 0;
static inline const char* test_tmpdir(void) {
    static char dir[512] = {0};
    if (!dir[0]) {
        g_tmpdir_made = 1;
        const char* base = getenv("TMPDIR");
        snprintf(dir, sizeof(dir), "%s/zt_test_XXXXXX", base && base[0] ? base : "/tmp");
        if (!mkdtemp(dir)) { perror("mkdtemp"); exit(1); }
    }
    return dir;
}

// make test-long: ZT_TEST_LONG=1 widens the sampled matrices and runs the cases test_long_only names.
static inline int test_long(void) { const char* e = getenv("ZT_TEST_LONG"); return e && atoi(e) > 0; }

// Cases this binary runs only in make test-long (names starting with one of these prefixes, NULL
// ended): what it would repeat of a case another binary of make test runs (the FP32 build's process
// cases, the same in BF16). A filter given on the command line runs matching cases anyway.
static const char* const* g_long_only = NULL;
static inline void test_long_only(const char* const* prefixes) { g_long_only = prefixes; }
static inline int test_is_long_only(const char* name) {
    for (const char* const* p = g_long_only; p && *p; p++)
        if (!strncmp(name, *p, strlen(*p))) return 1;
    return 0;
}

static inline double test_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// CPU seconds (user + sys) used so far by this process (all its threads) and by the children it
// has waited for (their own waited-for children included: mpirun's ranks, a trainer's workers). The
// difference over a case is what the case costs on an idle machine's cores, whatever the load now.
static inline double test_cpu_s(void) {
    double s = 0;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        s += ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    if (getrusage(RUSAGE_CHILDREN, &ru) == 0)
        s += ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    return s;
}

// Run all cases whose name contains `filter` (NULL: all but the long-only ones outside make test-long;
// "--long-only": just those). Prints one line per case, with its wall seconds and its CPU seconds
// (test_cpu_s), and the final summary; returns 0 if everything passed.
static inline int test_run_all(const char* filter) {
    int passed = 0, failed = 0, skipped = 0, left = 0;
    int long_only = filter && !strcmp(filter, "--long-only");
    if (long_only) filter = NULL;
    for (int i = 0; i < g_ntests; i++) {
        if (filter && !strstr(g_tests[i].name, filter)) continue;
        if (long_only && !test_is_long_only(g_tests[i].name)) continue;
        if (!filter && !long_only && !test_long() && test_is_long_only(g_tests[i].name)) { left++; continue; }
        g_test_failed = 0;
        g_test_skip = NULL;
        g_test_name = g_tests[i].name;
        printf("RUN  %s\n", g_tests[i].name);
        fflush(stdout);
        double t0 = test_now_s(), c0 = test_cpu_s();
        g_tests[i].fn();
        double dt = test_now_s() - t0, dc = test_cpu_s() - c0;
        if (g_test_failed) { failed++; printf("FAIL %s (%.1f s, cpu %.1f s)\n", g_tests[i].name, dt, dc); }
        else if (g_test_skip) { skipped++; printf("SKIP %s: %s\n", g_tests[i].name, g_test_skip); }
        else { passed++; printf("PASS %s (%.1f s, cpu %.1f s)\n", g_tests[i].name, dt, dc); }
        fflush(stdout);
    }
    if (failed == 0 && g_tmpdir_made) { // keep the scratch files of a failed run for a look
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", test_tmpdir());
        if (system(cmd) != 0) printf("(could not remove %s)\n", test_tmpdir());
    } else if (g_tmpdir_made) {
        printf("scratch files kept in %s\n", test_tmpdir());
    }
    if (left) printf("(%d case(s) that repeat another binary's are left to make test-long: --long-only runs them)\n", left);
    if (skipped) printf("%d skipped (see SKIP lines)\n", skipped);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif // ZT_TEST_H
