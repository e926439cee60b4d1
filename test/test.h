// test/test.h — a tiny test framework: TEST(name) registers a case, CHECK records a failure.
//
// The test binary runs every registered case (or those whose name contains argv[1]) and ends
// with the line "N passed, N failed" that CI reads. A case fails if any CHECK in it failed.
// `make test` runs the suite sized to stay short; `make test-long` (ZT_TEST_LONG=1) widens the matrices
// (test_long) and runs the cases a binary leaves to it (test_long_only: repetitions of what another
// binary of make test already runs). `BIN --long-only` runs just those cases.
// The cases run in worker processes, up to `jobs` at a time (ZT_TEST_JOBS, default: twice the CPUs
// this process may use, at most 8): each worker is forked before any case runs and takes the next case
// when it is free, so the cores a single-threaded case leaves idle run the next one, and what a
// case caches for the next (a fixture built once per process) stays warm in its worker. A case's
// output goes to a file of its own, printed whole when it ends; a case that kills its worker fails
// (the output so far printed) and a fresh worker takes the next. Each worker has its own scratch
// directory (test_tmpdir).
// defines: TEST, CHECK, CHECKF, test_run_all, test_run_cmd, test_tmpdir, test_long, test_long_only, test_jobs
#ifndef ZT_TEST_H
#define ZT_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <time.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <sched.h>
#include <unistd.h>
#include <fcntl.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/select.h>
#include <sys/file.h>

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

// A fresh scratch directory for this process (created on first use, under $TMPDIR or /tmp; in a
// worker of test_run_all_jobs, inside the run's own directory: <run>/w<worker>).
static int g_tmpdir_made = 0;
static char g_tmpdir_run[512] = {0};    // test_run_all_jobs's directory (logs, and the workers' directories)
static char g_tmpdir_worker[600] = {0}; // this worker's scratch directory (set in the worker)
static inline const char* test_tmpdir(void) {
    static char dir[1024] = {0};
    if (!dir[0]) {
        g_tmpdir_made = 1;
        if (g_tmpdir_worker[0]) {
            snprintf(dir, sizeof(dir), "%s", g_tmpdir_worker);
            if (mkdir(dir, 0700) != 0 && errno != EEXIST) { perror(dir); exit(1); }
        } else {
            const char* base = getenv("TMPDIR");
            snprintf(dir, sizeof(dir), "%s/zt_test_XXXXXX", base && base[0] ? base : "/tmp");
            if (!mkdtemp(dir)) { perror("mkdtemp"); exit(1); }
        }
    }
    return dir;
}

// A directory every worker of the run shares (<run>/shared; outside the workers, test_tmpdir()): for
// what one case builds once for all (a fixture made by a slow external program), under
// test_shared_lock so that one worker builds it while the others wait.
static inline const char* test_shared_dir(void) {
    static char dir[700] = {0};
    if (!dir[0]) {
        if (!g_tmpdir_run[0]) snprintf(dir, sizeof(dir), "%s", test_tmpdir());
        else {
            snprintf(dir, sizeof(dir), "%s/shared", g_tmpdir_run);
            if (mkdir(dir, 0700) != 0 && errno != EEXIST) { perror(dir); exit(1); }
        }
    }
    return dir;
}
// An exclusive lock on <shared dir>/<name>.lock (flock; released by closing the returned fd).
static inline int test_shared_lock(const char* name) {
    char path[800];
    snprintf(path, sizeof(path), "%s/%s.lock", test_shared_dir(), name);
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    if (fd >= 0) while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {}
    return fd;
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

// How many cases run at once: ZT_TEST_JOBS, else twice the CPUs this process may run on (at most 8):
// many cases wait (a timeout, a rank that must not answer, another process's start), and a waiting
// case leaves its core to another.
static inline int test_jobs(void) {
    const char* e = getenv("ZT_TEST_JOBS");
    if (e && *e) return atoi(e) > 0 ? atoi(e) : 1;
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    n = 2 * (n < 1 ? 1 : n);
    return n > 8 ? 8 : n;
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

// One case in this process: its line (PASS with wall and CPU seconds, FAIL, SKIP: reason) printed;
// returns 0 (passed), TEST_EXIT_FAILED or TEST_EXIT_SKIPPED.
enum { TEST_EXIT_FAILED = 86, TEST_EXIT_SKIPPED = 87 };
static int test_one(int i) {
    g_test_failed = 0;
    g_test_skip = NULL;
    g_test_name = g_tests[i].name;
    double t0 = test_now_s(), c0 = test_cpu_s();
    g_tests[i].fn();
    double dt = test_now_s() - t0, dc = test_cpu_s() - c0;
    int rc = g_test_failed ? TEST_EXIT_FAILED : g_test_skip ? TEST_EXIT_SKIPPED : 0;
    if (rc == TEST_EXIT_FAILED) printf("FAIL %s (%.1f s, cpu %.1f s)\n", g_tests[i].name, dt, dc);
    else if (rc == TEST_EXIT_SKIPPED) printf("SKIP %s: %s\n", g_tests[i].name, g_test_skip);
    else printf("PASS %s (%.1f s, cpu %.1f s)\n", g_tests[i].name, dt, dc);
    fflush(stdout);
    return rc;
}

// The case log's path: <run>/<name>.log.
static void test_log_path(int i, char* out, size_t cap) { snprintf(out, cap, "%s/%s.log", g_tmpdir_run, g_tests[i].name); }

// A worker (forked): reads case indices from `in` (-1: done), runs each with its stdout and stderr
// in the case's log, writes the index and the result to `out`. Removes its scratch directory at the
// end unless a case failed.
static void test_worker(int k, int in, int out) {
    snprintf(g_tmpdir_worker, sizeof(g_tmpdir_worker), "%s/w%d", g_tmpdir_run, k);
    setvbuf(stdout, NULL, _IOLBF, 0); // (a case's lines and its processes' output in the order they happen)
    int any_failed = 0, i;
    while (read(in, &i, sizeof(i)) == (ssize_t)sizeof(i) && i >= 0) {
        char log[700];
        test_log_path(i, log, sizeof(log));
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(TEST_EXIT_FAILED);
        close(fd);
        printf("RUN  %s\n", g_tests[i].name);
        fflush(stdout);
        int res[2] = {i, test_one(i)};
        fflush(stderr);
        any_failed |= res[1] == TEST_EXIT_FAILED;
        if (write(out, res, sizeof(res)) != (ssize_t)sizeof(res)) _exit(TEST_EXIT_FAILED);
    }
    if (g_tmpdir_made && !any_failed) {
        char cmd[1200];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", test_tmpdir());
        if (system(cmd) != 0) { /* (left for the run's own removal) */ }
    }
    _exit(0);
}

typedef struct { pid_t pid; int to, from; int i; } TestWorker; // i: the running case (-1: idle)

// Start worker slot k of all[0..n) as worker number `number` (its scratch directory's). The child
// closes the parent's ends of the other workers' pipes, so that only the parent holds them.
static void test_worker_start(TestWorker* all, int n, int k, int number) {
    TestWorker* w = &all[k];
    int a[2], b[2];
    if (pipe(a) != 0 || pipe(b) != 0) { perror("pipe"); exit(1); }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(1); }
    if (pid == 0) {
        close(a[1]);
        close(b[0]);
        for (int j = 0; j < n; j++)
            if (j != k && all[j].pid > 0) { close(all[j].to); close(all[j].from); }
        test_worker(number, a[0], b[1]);
    }
    close(a[0]);
    close(b[1]);
    w->pid = pid; w->to = a[1]; w->from = b[0]; w->i = -1;
}

// Run all cases whose name contains `filter` (NULL: all but the long-only ones outside make test-long;
// "--long-only": just those), test_jobs() workers at a time (see the top). Prints each case's output
// when it ends, with its wall seconds and its CPU seconds (the case's in its worker, and every
// process it waited for), then the summary; returns 0 if everything passed. jobs_max caps the
// workers (1: the GPU test program on a real GPU, where a CUDA context cannot cross a fork: the cases
// run in the program itself, one after another).
static inline int test_run_all_jobs(const char* filter, int jobs_max) {
    int passed = 0, failed = 0, skipped = 0, left = 0;
    int long_only = filter && !strcmp(filter, "--long-only");
    if (long_only) filter = NULL;
    int* todo = (int*)malloc(sizeof(int) * (g_ntests + 1));
    int ntodo = 0;
    for (int i = 0; i < g_ntests; i++) {
        if (filter && !strstr(g_tests[i].name, filter)) continue;
        if (long_only && !test_is_long_only(g_tests[i].name)) continue;
        if (!filter && !long_only && !test_long() && test_is_long_only(g_tests[i].name)) { left++; continue; }
        todo[ntodo++] = i;
    }
    int jobs = test_jobs();
    if (jobs_max > 0 && jobs > jobs_max) jobs = jobs_max;
    if (jobs > ntodo) jobs = ntodo > 0 ? ntodo : 1;
    if (jobs_max == 1) { // in this process, one after another
        for (int k = 0; k < ntodo; k++) {
            printf("RUN  %s\n", g_tests[todo[k]].name);
            fflush(stdout);
            int rc = test_one(todo[k]);
            passed += rc == 0; failed += rc == TEST_EXIT_FAILED; skipped += rc == TEST_EXIT_SKIPPED;
        }
        if (g_tmpdir_made && failed == 0) {
            char cmd[1200];
            snprintf(cmd, sizeof(cmd), "rm -rf '%s'", test_tmpdir());
            if (system(cmd) != 0) printf("(could not remove %s)\n", test_tmpdir());
        } else if (g_tmpdir_made) printf("scratch files kept in %s\n", test_tmpdir());
    } else {
        const char* base = getenv("TMPDIR");
        snprintf(g_tmpdir_run, sizeof(g_tmpdir_run), "%s/zt_test_XXXXXX", base && base[0] ? base : "/tmp");
        if (!mkdtemp(g_tmpdir_run)) { perror("mkdtemp"); exit(1); }
        printf("%d case(s), %d worker process(es) (ZT_TEST_JOBS), scratch and logs under %s\n", ntodo, jobs, g_tmpdir_run);
        TestWorker* w = (TestWorker*)calloc((size_t)jobs, sizeof(TestWorker));
        for (int k = 0; k < jobs; k++) test_worker_start(w, jobs, k, k);
        double* t0 = (double*)calloc((size_t)g_ntests + 1, sizeof(double));
        int nstarted = 0, nbusy = 0, nworkers_made = jobs;
        while (nstarted < ntodo || nbusy > 0) {
            for (int k = 0; k < jobs && nstarted < ntodo; k++) { // hand the next cases to the idle workers
                if (w[k].i >= 0) continue;
                int i = todo[nstarted++];
                if (write(w[k].to, &i, sizeof(i)) != (ssize_t)sizeof(i)) { perror("write to a test worker"); exit(1); }
                w[k].i = i;
                t0[i] = test_now_s();
                nbusy++;
            }
            // wait for a result (or a worker's end)
            fd_set rd;
            FD_ZERO(&rd);
            int top = -1;
            for (int k = 0; k < jobs; k++)
                if (w[k].i >= 0) { FD_SET(w[k].from, &rd); if (w[k].from > top) top = w[k].from; }
            if (top < 0) break;
            if (select(top + 1, &rd, NULL, NULL, NULL) < 0) { if (errno == EINTR) continue; perror("select"); exit(1); }
            for (int k = 0; k < jobs; k++) {
                if (w[k].i < 0 || !FD_ISSET(w[k].from, &rd)) continue;
                int res[2], i = w[k].i, code;
                ssize_t got = read(w[k].from, res, sizeof(res));
                char log[700];
                test_log_path(i, log, sizeof(log));
                FILE* lf = fopen(log, "r");
                char buf[8192];
                size_t n;
                while (lf && (n = fread(buf, 1, sizeof(buf), lf)) > 0) fwrite(buf, 1, n, stdout);
                if (lf) fclose(lf);
                if (got == (ssize_t)sizeof(res) && res[0] == i) {
                    code = res[1];
                    if (code != TEST_EXIT_FAILED) unlink(log);
                } else { // the worker ended inside the case: a crash, a signal, an exit from the case's code
                    int st = 0;
                    waitpid(w[k].pid, &st, 0);
                    printf("FAIL %s (%.1f s) (its worker process %s %d inside the case: output above; its log %s)\n", g_tests[i].name,
                           test_now_s() - t0[i], WIFSIGNALED(st) ? "was killed by signal" : "exited with",
                           WIFSIGNALED(st) ? WTERMSIG(st) : WIFEXITED(st) ? WEXITSTATUS(st) : -1, log);
                    close(w[k].to);
                    close(w[k].from);
                    code = TEST_EXIT_FAILED;
                    w[k].pid = 0;
                    test_worker_start(w, jobs, k, nworkers_made++); // a fresh one for what is left
                }
                passed += code == 0; failed += code == TEST_EXIT_FAILED; skipped += code == TEST_EXIT_SKIPPED;
                w[k].i = -1;
                nbusy--;
                fflush(stdout);
            }
        }
        for (int k = 0; k < jobs; k++) { // done: each worker ends (and removes its directory unless a case failed)
            int stop = -1;
            if (write(w[k].to, &stop, sizeof(stop)) != (ssize_t)sizeof(stop)) { /* (it ended already) */ }
            close(w[k].to);
            close(w[k].from);
            waitpid(w[k].pid, NULL, 0);
        }
        free(w);
        free(t0);
        if (failed == 0) {
            char cmd[1200];
            snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmpdir_run);
            if (system(cmd) != 0) printf("(could not remove %s)\n", g_tmpdir_run);
        } else {
            printf("scratch files (w<worker>/) and the failed cases' logs kept in %s\n", g_tmpdir_run);
        }
    }
    free(todo);
    if (left) printf("(%d case(s) that repeat another binary's are left to make test-long: --long-only runs them)\n", left);
    if (skipped) printf("%d skipped (see SKIP lines)\n", skipped);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
static inline int test_run_all(const char* filter) { return test_run_all_jobs(filter, 0); }

#endif // ZT_TEST_H
