// test/gpu_launch.h — several ranks on the emulated CUDA device launched WITHOUT MPI (included by
// test/test_gpu.cu after gpu_multirank.h): torchrun's variables, the TCP rendezvous of zero.h, the
// host collectives over its sockets, NCCL (the emulator's) for the blocks. Each case starts real
// processes on this machine: dev/launch.sh, or one process per rank with its own variables.
// In the emulator build with MPI only (its mpirun runs are the reference; test/test_emu_nompi, the
// same program built without MPI, is started as the ranks of the BF16 comparison).
#if defined(ZT_CUDA_EMU) && defined(USE_MPI) && defined(USE_NCCL)
#include <netinet/in.h>
#include <sys/socket.h>

// A TCP port free on 127.0.0.1 right now (the kernel picks it; the rendezvous binds it again).
static int nl_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr*)&a, sizeof(a)) != 0 || getsockname(fd, (struct sockaddr*)&a, &l) != 0) {
        if (fd >= 0) close(fd);
        return 29500 + (int)(getpid() % 20000);
    }
    close(fd);
    return ntohs(a.sin_port);
}

// The trainer launched without MPI: in make test-long test/test_emu_nompi beside this binary (make
// NO_MPI's program; test-long-binaries builds it), in make test this binary itself started without
// mpirun (the same launch path: torchrun's variables, the TCP rendezvous; the build without MPI is
// test-long's).
static const char* nl_nompi_binary(void) {
    if (!test_long()) return g_test_self;
    static char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s", g_test_self);
    char* slash = strrchr(path, '/');
    snprintf(slash ? slash + 1 : path, sizeof(path) - (slash ? (size_t)(slash + 1 - path) : 0), "test_emu_nompi");
    return path;
}

// One rank of R, started alone with torchrun's variables (no mpirun); its output goes to `log`.
// Returns its pid (sh execs the trainer).
static pid_t nl_spawn_rank(const char* bin, int R, int r, int port, const char* flags, const char* log) {
    char cmd[8192];
    snprintf(cmd, sizeof(cmd),
             ZT_CLEAN_ENV "OMP_NUM_THREADS=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=%d WORLD_SIZE=%d RANK=%d LOCAL_RANK=%d "
             "exec %s --train -threads 1 -i %s " ZT_MODEL " %s > %s 2>&1", port, R, r, r, bin, zt_data(0), flags, log);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) { execl("/bin/sh", "sh", "-c", cmd, (char*)NULL); _exit(127); }
    return child;
}

static const char* nl_log(int r) {
    static char path[8][PATH_MAX];
    snprintf(path[r], sizeof(path[r]), "%s/nompi_rank%d.log", test_tmpdir(), r);
    unlink(path[r]);
    return path[r];
}

// The first "error:" line of a log (for the report), or "(none)".
static void nl_error_line(const char* s, char* out, size_t cap) {
    const char* p = s ? strstr(s, "error: ") : NULL;
    while (p && p > s && p[-1] != '\n') p--;
    if (p) snprintf(out, cap, "%.*s", (int)strcspn(p, "\n"), p);
    else snprintf(out, cap, "(none)");
}

// R ranks launched by dev/launch.sh (no mpirun) give the same bits as the same run under mpirun:
// losses, norms, val losses, and the hashes of parameters, master weights, m and v, at ZeRO-3 with a
// checkpoint every step (its barriers, error flags and nonce go over the rendezvous). The BF16 build
// starts test/test_emu_nompi (make NO_MPI's program) as the ranks in make test-long, itself (a build
// with MPI, launched without it) in make test, R = 2; the FP32 build starts itself, R = 3; make
// test-long runs both R in both.
// Also: launch.sh passes the first failing rank's exit code on (a bad flag: 2).
TEST(nompi_launch_matches_mpirun) {
    static char out[1 << 20];
#ifdef ENABLE_FP32
    const char* bin = g_test_self;
#else
    const char* bin = nl_nompi_binary();
    if (access(bin, X_OK) != 0) { CHECKF(0, "%s is missing: make test-long-binaries builds it", bin); return; }
#endif
    for (int R = mr_long() ? 2 : MR_R_FIRST; R <= (mr_long() ? 3 : MR_R_FIRST); R++) {
        ZtLog ref, lg;
        char name[64], ref_hash[512], hash[512], flags[2048], cmd[8192];
        snprintf(name, sizeof(name), "nompi_mpirun_R%d", R);
        int rc = mr_run(R, "cuda", 3, name, "-n 1", &ref, ref_hash, out, sizeof(out));
        CHECKF(rc == 0 && ref.n == 2 && ref_hash[0], "R=%d under mpirun failed (%d):\n%s", R, rc, out);
        snprintf(name, sizeof(name), "nompi_launch_R%d", R);
        const char* dir = zt_dir(name);
        snprintf(flags, sizeof(flags), ZT_MODEL " -device cuda -b 3 -x 2 -l 1e-3 -v 2 -m 1 -s 0 -z 3 -o %s -log-hash 1 -n 1", dir);
        double t0 = test_now_s();
        snprintf(cmd, sizeof(cmd), ZT_CLEAN_ENV "OMP_NUM_THREADS=1 MASTER_PORT=%d timeout 120 dev/launch.sh %d %s --train -threads 1 -i %s -j %s %s",
                 nl_free_port(), R, bin, zt_data(0), zt_data(1), flags);
        rc = test_run_cmd(cmd, out, sizeof(out));
        zt_hash_line(out, hash, sizeof(hash));
        zt_read_log(dir, &lg);
        CHECKF(rc == 0 && lg.n == 2 && lg.nval == 2, "R=%d launched without MPI failed (%d):\n%s", R, rc, out);
        CHECKF(strstr(out, "torchrun, TCP rendezvous") != NULL, "R=%d: the run did not say it met over the rendezvous:\n%s", R, out);
        int same_log = !memcmp(lg.loss, ref.loss, sizeof(lg.loss)) && !memcmp(lg.norm, ref.norm, sizeof(lg.norm)) &&
                       !memcmp(lg.val, ref.val, sizeof(lg.val)) && lg.nval == ref.nval;
        CHECKF(same_log, "R=%d: losses, norms or val losses differ from mpirun's (loss %.9g vs %.9g)", R, lg.loss[1], ref.loss[1]);
        CHECKF(hash[0] && !strcmp(hash, ref_hash), "R=%d: hashes differ from mpirun's:\n  %s\n  %s", R, hash, ref_hash);
        if (same_log && hash[0] && !strcmp(hash, ref_hash))
            printf("    R=%d %s: identical to mpirun's run in %.1f s (%s)\n", R, strrchr(bin, '/') + 1, test_now_s() - t0, hash);
    }
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), ZT_CLEAN_ENV "MASTER_PORT=%d timeout 60 dev/launch.sh 2 %s --train -threads 1 -i %s " ZT_MODEL " -device cuda -no-such-flag 1",
             nl_free_port(), bin, zt_data(0));
    int rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 2 && strstr(out, "-no-such-flag"), "launch.sh with a bad flag: exit %d (want 2)\n%s", rc, out);
}

// A peer that never arrives: ranks 0 and 1 of 3 are started, rank 2 never is. Within -comm-timeout
// (2 s) rank 0 ends naming rank 2, and rank 1 (connected, waiting) ends with rank 0's message, both
// with exit code 3. Then rank 1 alone: rank 0 never listens, and rank 1 says so within the timeout.
TEST(nompi_peer_never_arrives) {
#ifdef ENABLE_FP32
    if (!mr_long()) TEST_SKIP("runs in the BF16 emulator build (test/test_emu); make test-long runs it in both");
#endif
    const char* flags = "-device cuda -b 2 -x 2 -s 0 -v 0 -comm-timeout 2";
    int port = nl_free_port(), status[2] = {0, 0};
    char line[1024];
    const char *log0 = nl_log(0), *log1 = nl_log(1);
    double t0 = test_now_s();
    pid_t p0 = nl_spawn_rank(g_test_self, 3, 0, port, flags, log0);
    pid_t p1 = nl_spawn_rank(g_test_self, 3, 1, port, flags, log1);
    int done0 = mr_reap(p0, 30, &status[0]), done1 = mr_reap(p1, 30, &status[1]);
    double took = test_now_s() - t0;
    char *s0 = zt_read_file(log0), *s1 = zt_read_file(log1);
    CHECKF(done0 && done1 && took < 2 + 15, "the ranks did not end within 17 s (%.1f s)", took);
    CHECKF(WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 3, "rank 0: wait status 0x%x (want exit 3)", status[0]);
    CHECKF(WIFEXITED(status[1]) && WEXITSTATUS(status[1]) == 3, "rank 1: wait status 0x%x (want exit 3)", status[1]);
    CHECKF(s0 && strstr(s0, "[rank 0] error: rendezvous at 127.0.0.1:") && strstr(s0, "rank 2 never arrived within 2 s"),
           "rank 0 did not name the missing rank:\n%s", s0 ? s0 : "(no log)");
    CHECKF(s1 && strstr(s1, "[rank 1] error: rank 0 ended the run (exit code 3): ") && strstr(s1, "rank 2 never arrived"),
           "rank 1 did not pass rank 0's message on:\n%s", s1 ? s1 : "(no log)");
    nl_error_line(s1, line, sizeof(line));
    printf("    both ended in %.1f s; %.200s...\n", took, line);
    free(s0); free(s1);
    // rank 0 never comes
    t0 = test_now_s();
    log1 = nl_log(1);
    p1 = nl_spawn_rank(g_test_self, 2, 1, nl_free_port(), flags, log1);
    done1 = mr_reap(p1, 30, &status[1]);
    took = test_now_s() - t0;
    s1 = zt_read_file(log1);
    CHECKF(done1 && WIFEXITED(status[1]) && WEXITSTATUS(status[1]) == 3 && took < 2 + 15, "rank 1 alone: status 0x%x after %.1f s", status[1], took);
    CHECKF(s1 && strstr(s1, "rank 0 never listened there within 2 s") && strstr(s1, "Connection refused"),
           "rank 1 alone did not say rank 0 never came:\n%s", s1 ? s1 : "(no log)");
    nl_error_line(s1, line, sizeof(line));
    printf("    rank 1 alone ended in %.1f s: %.160s...\n", took, line);
    free(s1);
}

// Connect to 127.0.0.1:port, retrying for up to 20 s while nobody listens; -1 if never.
static int nl_connect(int port) {
    for (double t0 = test_now_s(); test_now_s() - t0 < 20; usleep(50000)) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a;
        memset(&a, 0, sizeof(a));
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons((uint16_t)port);
        if (connect(fd, (struct sockaddr*)&a, sizeof(a)) == 0) return fd;
        close(fd);
    }
    return -1;
}

// Garbage on the port, both ways, each ending the rank within the timeout with exit code 3 and a
// message naming the peer: (1) rank 0 of 2 listens and an HTTP request arrives instead of rank 1;
// (2) the same with a header of the right magic but another protocol version (another build);
// (3) rank 1 of 2 connects to a port where another program (this test) answers with an SSH banner.
#define RDV_VERSION_NEXT 3 // RDV_VERSION + 1, as text for the message
#define ZT_STR2(x) #x
#define ZT_STR(x) ZT_STR2(x)
static_assert(RDV_VERSION_NEXT == RDV_VERSION + 1, "RDV_VERSION_NEXT follows zero.h's RDV_VERSION");
TEST(nompi_garbage_on_port) {
#ifdef ENABLE_FP32
    if (!mr_long()) TEST_SKIP("runs in the BF16 emulator build (test/test_emu); make test-long runs it in both");
#endif
    const char* flags = "-device cuda -b 2 -x 2 -s 0 -v 0 -comm-timeout 5";
    char line[1024];
    for (int k = 0; k < 2; k++) {
        int port = nl_free_port(), status = 0;
        const char* log = nl_log(0);
        double t0 = test_now_s();
        pid_t p = nl_spawn_rank(g_test_self, 2, 0, port, flags, log);
        int fd = nl_connect(port);
        CHECKF(fd >= 0, "rank 0 never listened on port %d", port);
        if (k == 0) {
            const char* http = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n";
            if (fd >= 0 && send(fd, http, strlen(http), MSG_NOSIGNAL) < 0) perror("send");
        } else {
            RdvHdr h = {RDV_MAGIC, RDV_VERSION + 1, RDV_HELLO, 1, 2, 0, 0};
            if (fd >= 0 && send(fd, &h, sizeof(h), MSG_NOSIGNAL) < 0) perror("send");
        }
        int done = mr_reap(p, 30, &status);
        double took = test_now_s() - t0;
        if (fd >= 0) close(fd);
        char* s = zt_read_file(log);
        CHECKF(done && WIFEXITED(status) && WEXITSTATUS(status) == 3 && took < 5 + 15, "(%d) rank 0: status 0x%x after %.1f s", k + 1, status, took);
        CHECKF(s && strstr(s, "a connection from 127.0.0.1 port ") && strstr(s, "sent garbage") &&
               strstr(s, k == 0 ? "magic 20544547" : "version " ZT_STR(RDV_VERSION_NEXT)), "(%d) rank 0 did not name the garbage:\n%s", k + 1, s ? s : "(no log)");
        nl_error_line(s, line, sizeof(line));
        printf("    (%d) %.220s...\n", k + 1, line);
        free(s);
    }
    // (3) another program answers on the port
    int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1, status = 0;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof(a);
    CHECK(bind(lfd, (struct sockaddr*)&a, sizeof(a)) == 0 && listen(lfd, 4) == 0 && getsockname(lfd, (struct sockaddr*)&a, &l) == 0);
    const char* log = nl_log(1);
    double t0 = test_now_s();
    pid_t p = nl_spawn_rank(g_test_self, 2, 1, ntohs(a.sin_port), flags, log);
    struct pollfd pf = {lfd, POLLIN, 0};
    int fd = poll(&pf, 1, 20000) == 1 ? accept(lfd, NULL, NULL) : -1;
    CHECKF(fd >= 0, "rank 1 never connected");
    const char* banner = "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n";
    if (fd >= 0 && send(fd, banner, strlen(banner), MSG_NOSIGNAL) < 0) perror("send");
    int done = mr_reap(p, 30, &status);
    double took = test_now_s() - t0;
    if (fd >= 0) close(fd);
    close(lfd);
    char* s = zt_read_file(log);
    CHECKF(done && WIFEXITED(status) && WEXITSTATUS(status) == 3 && took < 5 + 15, "(3) rank 1: status 0x%x after %.1f s", status, took);
    CHECKF(s && strstr(s, "[rank 1] error: rendezvous at 127.0.0.1:") && strstr(s, "rank 0 (127.0.0.1:") && strstr(s, "sent garbage"),
           "(3) rank 1 did not name the garbage:\n%s", s ? s : "(no log)");
    nl_error_line(s, line, sizeof(line));
    printf("    (3) %.220s...\n", line);
    free(s);
}

// How often `what` occurs in s.
static int tt_count_str(const char* s, const char* what) {
    int n = 0;
    for (const char* p = s; (p = strstr(p, what)); p++) n++;
    return n;
}

// Only the job joins (zero.h's rendezvous): (1) without a job token, an ABORT frame sent before
// HELLO (exit code 4 asked, its text with terminal escapes) ends rank 0 as garbage with exit code 3,
// not 4, and a warning said the rendezvous is unauthenticated; (2) with ZT_JOB_TOKEN, rank 0 listens
// on MASTER_ADDR (127.0.0.1) only, refuses a forged ABORT and an impostor's HELLO (each said) and
// goes on waiting; a rank that presents the token joins, and its ABORT (code 77, escapes in its
// text) ends rank 0 with a capped code (3) and the text escaped.
TEST(nompi_rendezvous_refuses_strangers) {
#ifdef ENABLE_FP32
    if (!mr_long()) TEST_SKIP("runs in the BF16 emulator build (test/test_emu); make test-long runs it in both");
#endif
    const char* flags = "-device cuda -b 2 -x 2 -s 0 -v 0 -comm-timeout 5";
    const char* evil = "\x1b[31mdiverged\x1b[0m";
    for (int tok = 0; tok < 2; tok++) {
        int port = nl_free_port(), status = 0;
        const char* log = nl_log(0);
        if (tok) setenv("ZT_JOB_TOKEN", "rendezvous-test-secret", 1);
        pid_t p = nl_spawn_rank(g_test_self, 2, 0, port, flags, log);
        char src[32];
        uint64_t token = rdv_job_token(src, sizeof(src)); // (what the rank computes from the same variable)
        unsetenv("ZT_JOB_TOKEN");
        int fd = nl_connect(port);
        CHECKF(fd >= 0, "rank 0 never listened on port %d", port);
        if (tok) { // listening on 127.0.0.1 only: /proc/net/tcp's local address 0100007F, state 0A (LISTEN)
            char want[64], cmd[256];
            snprintf(want, sizeof(want), "0100007F:%04X", port);
            snprintf(cmd, sizeof(cmd), "grep -c ' %s 00000000:0000 0A' /proc/net/tcp", want);
            CHECKF(test_run_cmd(cmd, NULL, 0) == 0, "rank 0 does not listen on %s only", want);
        }
        RdvHdr h = {RDV_MAGIC, RDV_VERSION, RDV_ABORT, 1, 2, 4, (int64_t)strlen(evil)}; // a forged ABORT, before any HELLO
        if (fd >= 0 && (send(fd, &h, sizeof(h), MSG_NOSIGNAL) < 0 || send(fd, evil, strlen(evil), MSG_NOSIGNAL) < 0)) perror("send");
        if (tok) {
            int f2 = nl_connect(port); // an impostor: HELLO as rank 1 without the token
            RdvHdr hi = {RDV_MAGIC, RDV_VERSION, RDV_HELLO, 1, 2, 12345, 0};
            if (f2 >= 0 && send(f2, &hi, sizeof(hi), MSG_NOSIGNAL) < 0) perror("send");
            usleep(300000);
            int f3 = nl_connect(port); // the job's rank 1: its token, WELCOME, then an ABORT with a code no rank ends with
            hi.seq = (int64_t)token;
            RdvHdr w;
            memset(&w, 0, sizeof(w));
            struct pollfd pf = {f3, POLLIN, 0};
            int welcomed = f3 >= 0 && send(f3, &hi, sizeof(hi), MSG_NOSIGNAL) == (ssize_t)sizeof(hi) && poll(&pf, 1, 10000) == 1 &&
                           recv(f3, &w, sizeof(w), MSG_WAITALL) == (ssize_t)sizeof(w) && w.kind == RDV_WELCOME;
            CHECKF(welcomed, "the rank with the job's token was not welcomed (kind %u)", w.kind);
            RdvHdr ab = {RDV_MAGIC, RDV_VERSION, RDV_ABORT, 1, 2, 77, (int64_t)strlen(evil)};
            if (f3 >= 0 && (send(f3, &ab, sizeof(ab), MSG_NOSIGNAL) < 0 || send(f3, evil, strlen(evil), MSG_NOSIGNAL) < 0)) perror("send");
            int done = mr_reap(p, 30, &status);
            if (f2 >= 0) close(f2);
            if (f3 >= 0) close(f3);
            char* s = zt_read_file(log);
            CHECKF(done && WIFEXITED(status) && WEXITSTATUS(status) == 3, "(2) rank 0: status 0x%x, expected exit code 3 (77 capped)", status);
            CHECKF(s && tt_count_str(s, "refused a connection from 127.0.0.1 port ") == 2 && strstr(s, "(an ABORT: ignored)") &&
                   strstr(s, "its HELLO (as rank 1) lacks this job's token") && strstr(s, "rank 1 ended the run (exit code 3): \\x1b[31mdiverged") &&
                   !strchr(s, '\x1b') && !strstr(s, "unauthenticated"), "(2) rank 0's log:\n%s", s ? s : "(no log)");
            free(s);
        } else {
            int done = mr_reap(p, 30, &status);
            char* s = zt_read_file(log);
            CHECKF(done && WIFEXITED(status) && WEXITSTATUS(status) == 3, "(1) rank 0: status 0x%x, expected exit code 3 (not the frame's 4)", status);
            CHECKF(s && strstr(s, "sent an ABORT frame before saying which rank it is") && strstr(s, "is unauthenticated") && !strchr(s, '\x1b') &&
                   !strstr(s, "diverged"), "(1) rank 0's log:\n%s", s ? s : "(no log)");
            free(s);
        }
        if (fd >= 0) close(fd);
    }
}

// A rank that dies (SIGKILL) in the middle of a run without mpirun (no launcher to end the others:
// our own machinery must): R = 3, -comm-timeout 3, rank 1 killed after step 2. Ranks 0 and 2 end
// with exit code 3 within the timeout and a message: the NCCL watchdog's (a collective that did not
// complete), NCCL's remote error (the communicator aborted by another rank's watchdog), a closed
// rendezvous connection, or rank 0's message passed on; rank 0's names rank 1 (its rendezvous
// connection closed: rdv_gone).
TEST(nompi_rank_killed) {
#ifdef ENABLE_FP32
    if (!mr_long()) TEST_SKIP("runs in the BF16 emulator build (test/test_emu); make test-long runs it in both");
#endif
    const char* flags = "-device cuda -b 2 -x 100000 -v 0 -s 0 -z 3 -comm-timeout 3";
    int port = nl_free_port(), status[3] = {0, 0, 0}, done[3] = {0, 0, 0};
    const char* logs[3];
    pid_t p[3];
    for (int r = 0; r < 3; r++) logs[r] = nl_log(r);
    for (int r = 0; r < 3; r++) p[r] = nl_spawn_rank(g_test_self, 3, r, port, flags, logs[r]);
    int trained = 0;
    for (double t0 = test_now_s(); test_now_s() - t0 < 90 && !trained; usleep(100000)) {
        char* s = zt_read_file(logs[0]);
        trained = s && strstr(s, "step     2/");
        free(s);
    }
    CHECKF(trained, "rank 0 never trained 2 steps");
    double t_kill = test_now_s();
    kill(p[1], SIGKILL);
    for (int r = 0; r < 3; r++) done[r] = mr_reap(p[r], 60, &status[r]);
    double took = test_now_s() - t_kill;
    CHECKF(WIFSIGNALED(status[1]) && WTERMSIG(status[1]) == SIGKILL, "rank 1 was not killed: 0x%x", status[1]);
    CHECKF(done[0] && done[2] && took < 3 + 15, "the survivors did not end within 18 s of the kill (%.1f s)", took);
    for (int r = 0; r < 3; r += 2) {
        char* s = zt_read_file(logs[r]);
        char line[1024];
        nl_error_line(s, line, sizeof(line));
        CHECKF(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 3, "rank %d: wait status 0x%x (want exit 3)\n%s", r, status[r], s ? s : "");
        CHECKF(strstr(line, "did not complete within 3 s") || strstr(line, "NCCL error") || strstr(line, "closed its connection") ||
               strstr(line, "ended the run") || strstr(line, "the connection to rank"), // (a write to rank 0 after it ended: Broken pipe)
               "rank %d: no message naming what failed: %s", r, line);
        // rank 0 sees every rank's connection: its message names the dead rank
        // (rank 2 may have ended by then too, after its own watchdog: "ranks 1, 2"; or the per-step
        // host collective of the stop flag may see rank 1's socket close first: "rank 1 closed its connection")
        CHECKF(r != 0 || strstr(line, "ended: rank 1") || strstr(line, "ended: ranks 1,") || strstr(line, "rank 1 ended") ||
               strstr(line, "ranks 1, 2 ended") || strstr(line, "rank 1 closed its connection"), "rank 0 did not name rank 1: %s", line);
        printf("    rank %d ended %.1f s after the kill: %.200s...\n", r, took, line);
        free(s);
    }
}

// The CPU device without MPI at R > 1: its ZeRO collectives are MPI's, so every rank refuses with
// exit code 2 and says what to do (after meeting over the rendezvous: the message is the same on all).
// Run as under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True) while this test holds
// MASTER_PORT as torchrun's agent would: the ranks must meet on MASTER_PORT + 1 (else rank 0 could
// not listen: exit code 3).
TEST(nompi_cpu_device_refused) {
#ifdef ENABLE_FP32
    if (!mr_long()) TEST_SKIP("runs in the BF16 emulator build (test/test_emu); make test-long runs it in both");
#endif
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t l = sizeof(a);
    CHECK(bind(lfd, (struct sockaddr*)&a, sizeof(a)) == 0 && listen(lfd, 4) == 0 && getsockname(lfd, (struct sockaddr*)&a, &l) == 0);
    char cmd[4096], out[1 << 16];
    snprintf(cmd, sizeof(cmd), ZT_CLEAN_ENV "TORCHELASTIC_USE_AGENT_STORE=True MASTER_PORT=%d timeout 60 dev/launch.sh 2 %s --train -threads 1 -i %s "
             ZT_MODEL " -device cpu -x 2", ntohs(a.sin_port), g_test_self, zt_data(0));
    int rc = test_run_cmd(cmd, out, sizeof(out));
    close(lfd);
    CHECKF(rc == 2 && strstr(out, "[rank 0] error: -device cpu with 2 ranks needs MPI") && strstr(out, "[rank 1] error: -device cpu with 2 ranks needs MPI"),
           "exit %d (want 2 and the message from both ranks):\n%s", rc, out);
    printf("    %.*s\n", (int)strcspn(out, "\n"), out);
}

// The emulator's check of NCCL's non-blocking rule (test/cuda_emu/fake_nccl.h): two collectives on a
// non-blocking communicator with no poll of ncclCommGetAsyncError between them stop the run; with
// nccl_settle between them (what zero.h's ncclIssue does for every call), they run. One rank, in a
// child process (the emulator aborts).
static int nl_in_progress_child(int settle, char* msg, size_t cap) {
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/in_progress_%d.err", test_tmpdir(), settle);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(path, "w", stderr)) _exit(99);
        Comm c;
        memset(&c, 0, sizeof(c));
        c.R = 1; c.timeout_s = 10;
        ncclUniqueId id;
        ncclCheck(ncclGetUniqueId(&id));
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        nccl_settle(&c, ncclCommInitRankConfig(&c.nccl, 1, id, 0, &config), "ncclCommInitRank", 10);
        float *shard = (float*)gpu_zeros(64 * 4), *full = (float*)gpu_zeros(64 * 4);
        ncclResult_t r = ncclAllGather(shard, full, 64, ncclFloat, c.nccl, g_stream);
        if (r != ncclInProgress) { fprintf(stderr, "first call answered %d, not ncclInProgress\n", (int)r); _exit(98); }
        if (settle) nccl_settle(&c, r, "ncclAllGather", 10);
        r = ncclAllGather(shard, full, 64, ncclFloat, c.nccl, g_stream);
        nccl_settle(&c, r, "ncclAllGather", 10);
        nccl_settle(&c, ncclCommFinalize(c.nccl), "ncclCommFinalize", 10);
        ncclCommDestroy(c.nccl);
        fflush(stderr);
        _exit(0);
    }
    return test_child_result(pid, path, msg, cap);
}

TEST(nompi_emu_nccl_in_progress_checked) {
    char msg[4096];
    int rc = nl_in_progress_child(1, msg, sizeof(msg));
    CHECKF(rc == 0, "two collectives settled one after the other failed (%d):\n%s", rc, msg);
    rc = nl_in_progress_child(0, msg, sizeof(msg));
    CHECKF(rc != 0 && strstr(msg, "ncclAllGather on rank 0 while ncclAllGather is still in progress"),
           "a collective issued before the previous one settled ran (%d):\n%s", rc, msg);
    printf("    %s", msg);
}

#endif // ZT_CUDA_EMU && USE_MPI && USE_NCCL
