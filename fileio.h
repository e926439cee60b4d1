// fileio.h — files a user names, read and replaced safely.
//
// Reading: regular files only. A FIFO named where a file is expected (-e DIR/config.json, a shard,
// a tokenizer, an adapter) would block the run forever in open() or read(); a directory or a device
// reads as nonsense. zt_open_read opens without blocking, checks with fstat that it is a regular
// file, then reads as usual. (Streams read once from the start stay plain fopen on purpose: the
// -tokenize input and -prompt @FILE may be pipes.)
//
// Replacing an export (-export-hf, -lora-export) all or nothing: zt_commit_export (below).
//
// May call: the C library only (the bottom of the include tree, beside rng.h: safetensors.h and
// dataloader.h, which stand alone for the fuzzer, include it).
// defines: zt_open_read, zt_fopen_read, zt_strerror, ZT_ENOTREG, ZtCommitFile, zt_errf, zt_commit_export,
//          zt_export_leftovers
#ifndef ZT_FILEIO_H
#define ZT_FILEIO_H
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// errno of a path that exists but is no regular file (no C library code says exactly that).
#define ZT_ENOTREG 0x5A7

// strerror, knowing ZT_ENOTREG.
static inline const char* zt_strerror(int e) {
    return e == ZT_ENOTREG ? "not a regular file (a FIFO, socket or device)" : e == EISDIR ? "not a regular file: it is a directory" : strerror(e);
}

// open(path, O_RDONLY) of a regular file; -1 with errno set (EISDIR: a directory; ZT_ENOTREG: a
// FIFO, socket or device).
static inline int zt_open_read(const char* path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); // (a FIFO's open does not wait for a writer)
    if (fd < 0) return -1;
    struct stat st;
    int ok = fstat(fd, &st) == 0;
    if (!ok || !S_ISREG(st.st_mode)) {
        int e = !ok ? errno : S_ISDIR(st.st_mode) ? EISDIR : ZT_ENOTREG;
        close(fd);
        errno = e;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

// fopen(path, "rb") of a regular file; NULL with errno set (ZT_ENOTREG: something else).
static inline FILE* zt_fopen_read(const char* path) {
    int fd = zt_open_read(path);
    if (fd < 0) return NULL;
    FILE* f = fdopen(fd, "rb");
    if (!f) { int e = errno; close(fd); errno = e; }
    return f;
}

// ---- Replacing an export, all or nothing
//
// An export is a set of files in one directory with one key file that every loader reads first
// (config.json for -e and transformers, adapter_config.json for -lora-init and PEFT). The caller
// writes and fsyncs every new file under a temporary name; zt_commit_export then
//   1. moves the old key file aside (NAME.replaced.PID) and fsyncs the directory: from here until
//      step 3 the directory holds no key file, and every loader refuses it;
//   2. moves each old file of the set aside the same way and renames the new one to its name, and
//      moves aside the stale files of the other layout (a single file after shards, or shards of
//      another count), which loaders would otherwise read instead of, or mixed with, the new ones;
//   3. fsyncs the directory, renames the new key file in, fsyncs the directory again;
//   4. removes what it moved aside.
// A failure in 1-3 (a rename or fsync that fails: EIO, ENOSPC) undoes what was done, in reverse:
// the earlier export is whole again, and the temporary files are removed. A kill in 1-3 leaves a
// directory without its key file, which is refused, never a loadable mix; the next export into the
// directory removes the leftovers (zt_export_leftovers). Test hooks (ZT_FAULT, docs/reliability.md):
// eio-rename:SUBSTR fails the rename whose destination contains SUBSTR; crash:export-commit:K kills
// the process (SIGKILL) before the commit's K-th rename (1-based).

typedef struct { const char* tmp; const char* path; } ZtCommitFile; // a new file: its temporary and final names

static inline int zt_fault_rename(const char* to) { // ZT_FAULT=eio-rename:SUBSTR
    const char* f = getenv("ZT_FAULT");
    if (!f || strncmp(f, "eio-rename:", 11)) return 0;
    char want[256];
    snprintf(want, sizeof(want), "%.*s", (int)strcspn(f + 11, ":"), f + 11);
    if (!want[0] || !strstr(to, want)) return 0;
    errno = EIO;
    return 1;
}

static inline int zt_commit_rename(const char* from, const char* to, int* count) {
    const char* f = getenv("ZT_FAULT"); // ZT_FAULT=crash:export-commit:K
    if (f && !strncmp(f, "crash:export-commit:", 20) && atoi(f + 20) == ++*count) { fflush(stdout); fflush(stderr); raise(SIGKILL); }
    if (zt_fault_rename(to)) return -1;
    return rename(from, to);
}

static inline int zt_fsync_dir(const char* dir) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return -1;
    int rc = fsync(dfd);
    int e = errno;
    close(dfd);
    errno = e;
    return rc;
}

// What interrupted exports left in dir, set right before a new export (names starting with one of
// the export's prefixes, of a process that no longer runs; nothing else of the directory is
// touched): NAME.tmp.PID removed; and when the key file is missing but KEY.replaced.PID exists (a
// commit killed between its steps 1 and 3), the earlier export restored first: each NAME.replaced.PID
// renamed back over NAME (the new file there, if any, removed), the key file last. Otherwise
// NAME.replaced.PID is what a finished commit did not get to remove: removed. Returns the number of
// files removed or restored; *restored (may be NULL) says whether the earlier export came back.
static inline int zt_export_leftovers(const char* dir, const char* const* prefixes, int nprefixes, const char* key, int* restored) {
    int n = 0, cut = 0;
    if (restored) *restored = 0;
    char kpath[4096 + 64];
    snprintf(kpath, sizeof(kpath), "%s/%s", dir, key ? key : "");
    struct stat kst;
    int key_missing = key && lstat(kpath, &kst) != 0;
    for (int pass = 0; pass < 3; pass++) { // 0: *.tmp.*, and is there a cut commit?  1: the others back  2: the key back (or garbage out)
        DIR* d = opendir(dir);
        if (!d) return n;
        struct dirent* e;
        while ((e = readdir(d))) {
            const char* t = strstr(e->d_name, ".tmp.");
            const char* r = strstr(e->d_name, ".replaced.");
            const char* pid_text = r ? r + 10 : t ? t + 5 : NULL;
            if (!pid_text || !*pid_text || strspn(pid_text, "0123456789") != strlen(pid_text)) continue;
            int ours = 0;
            for (int q = 0; q < nprefixes; q++) ours |= !strncmp(e->d_name, prefixes[q], strlen(prefixes[q]));
            if (!ours) continue;
            long pid = atol(pid_text);
            if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; // (a live writer's)
            char p[4096 + 260], name[4096 + 260];
            snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
            if (!r) { if (pass == 0 && unlink(p) == 0) n++; continue; }
            int is_key = key && (size_t)(r - e->d_name) == strlen(key) && !strncmp(e->d_name, key, strlen(key));
            if (pass == 0) { cut |= is_key && key_missing; continue; }
            if (!cut) { if (pass == 2 && unlink(p) == 0) n++; continue; } // a finished commit's leftover
            if (is_key != (pass == 2)) continue; // the key file last
            snprintf(name, sizeof(name), "%s/%.*s", dir, (int)(r - e->d_name), e->d_name);
            unlink(name); // (the new file the cut commit put there, if any)
            if (rename(p, name) == 0) n++;
            if (is_key && restored) *restored = 1;
        }
        closedir(d);
        if (pass == 1 && cut) zt_fsync_dir(dir); // every other file back on disk before the key file
    }
    if (cut) zt_fsync_dir(dir);
    return n;
}

// A message into err (vsnprintf: cut at errlen, as any message is; the compiler's truncation warning
// is for fixed formats it can size, and paths here are as long as the caller's).
__attribute__((format(printf, 3, 4))) static void zt_errf(char* err, size_t errlen, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

// Steps 1-4 above. files[n - 1] is the key file; stale (may be NULL) lists paths to move aside when
// they exist. 0, or -1 with err set (the earlier export whole again, the temporary files removed).
static inline int zt_commit_export(const char* dir, const ZtCommitFile* files, int n, const char* const* stale, int nstale,
                                   char* err, size_t errlen) {
    int total = n + nstale, done = 0, count = 0, fail = 0;
    char (*aside)[4096 + 64] = (char(*)[4096 + 64])calloc((size_t)total, sizeof(*aside)); // "": nothing was there
    char* in = (char*)calloc((size_t)total, 1);          // 1: the new file was renamed in
    if (!aside || !in) { free(aside); free(in); zt_errf(err, errlen, "out of host memory"); return -1; }
    // the order of the moves: the key file aside first, then each file of the set, then the stale
    // ones; the key file's new version comes in last
    for (int s = 0; s < total && !fail; s++) {
        int k = s == 0 ? n - 1 : s < n ? s - 1 : s; // slot: key, files 0..n-2, stale
        const char* path = k < n ? files[k].path : stale[k - n];
        struct stat st;
        if (lstat(path, &st) == 0) {
            snprintf(aside[k], sizeof(aside[k]), "%s.replaced.%d", path, (int)getpid());
            if (zt_commit_rename(path, aside[k], &count) != 0) {
                zt_errf(err, errlen, "moving %s aside failed: %s", path, strerror(errno));
                aside[k][0] = 0;
                fail = 1;
                break;
            }
        } else if (errno != ENOENT) {
            zt_errf(err, errlen, "%s: %s", path, strerror(errno));
            fail = 1;
            break;
        }
        done = s + 1;
        if (s == 0 && zt_fsync_dir(dir) != 0) { zt_errf(err, errlen, "fsync of %s failed: %s", dir, strerror(errno)); fail = 1; break; }
        if (k < n - 1) { // a file of the set: the new one in
            if (zt_commit_rename(files[k].tmp, files[k].path, &count) != 0) {
                zt_errf(err, errlen, "renaming %s to %s failed: %s", files[k].tmp, files[k].path, strerror(errno));
                fail = 1;
                break;
            }
            in[k] = 1;
        }
    }
    if (!fail && zt_fsync_dir(dir) != 0) { zt_errf(err, errlen, "fsync of %s failed: %s", dir, strerror(errno)); fail = 1; }
    if (!fail) {
        if (zt_commit_rename(files[n - 1].tmp, files[n - 1].path, &count) != 0) {
            zt_errf(err, errlen, "renaming %s to %s failed: %s", files[n - 1].tmp, files[n - 1].path, strerror(errno));
            fail = 1;
        } else {
            in[n - 1] = 1;
            if (zt_fsync_dir(dir) != 0) { zt_errf(err, errlen, "fsync of %s failed: %s", dir, strerror(errno)); fail = 1; }
        }
    }
    if (fail) { // undo, in reverse: the new files out, the old ones back, the key file last, and only
                // when everything else came back (else the directory stays without it: refused, not mixed)
        int undone = 1;
        for (int s = done; s >= 1; s--) {
            if (s >= total) continue;
            int k = s < n ? s - 1 : s;
            const char* path = k < n ? files[k].path : stale[k - n];
            if (k < n && in[k] && unlink(path) != 0 && errno != ENOENT) undone = 0;
            if (aside[k][0] && rename(aside[k], path) != 0) undone = 0;
            else aside[k][0] = 0;
        }
        if (zt_fsync_dir(dir) != 0) undone = 0;
        int key = n - 1;
        if (undone) {
            if (in[key] && unlink(files[key].path) != 0 && errno != ENOENT) undone = 0;
            if (undone && aside[key][0] && rename(aside[key], files[key].path) != 0) undone = 0;
            else if (undone) aside[key][0] = 0;
        }
        zt_fsync_dir(dir);
        if (!undone) {
            size_t l = strlen(err);
            zt_errf(err + l, errlen > l ? errlen - l : 0, "; undoing it failed too: the directory is left without %s (refused by "
                     "every loader; the earlier export's files are the *.replaced.%d files)", files[key].path, (int)getpid());
            for (int k = 0; k < total; k++) aside[k][0] = 0; // (kept: they are all that is left of it)
        }
    }
    for (int k = 0; k < n; k++) if (!in[k]) unlink(files[k].tmp);
    if (!fail) for (int k = 0; k < total; k++) if (aside[k][0]) unlink(aside[k]);
    free(aside);
    free(in);
    return fail ? -1 : 0;
}

#endif // ZT_FILEIO_H
