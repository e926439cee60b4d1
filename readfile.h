// readfile.h — how every reader of a file a user names opens it: regular files only. A FIFO named
// where a file is expected (-e DIR/config.json, a shard, a tokenizer, an adapter) would block the
// run forever in open() or read(); a directory or a device reads as nonsense. zt_open_read opens
// without blocking, checks with fstat that it is a regular file, then reads as usual.
//
// May call: the C library only (the bottom of the include tree, beside rng.h: safetensors.h and
// dataloader.h, which stand alone for the fuzzer, include it).
// defines: zt_open_read, zt_fopen_read, zt_strerror, ZT_ENOTREG
#ifndef ZT_READFILE_H
#define ZT_READFILE_H
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// errno of a path that exists but is no regular file (no C library code says exactly that).
#define ZT_ENOTREG 0x5A7

// strerror, knowing ZT_ENOTREG.
static inline const char* zt_strerror(int e) {
    return e == ZT_ENOTREG ? "not a regular file (a directory, FIFO, socket or device)" : strerror(e);
}

// open(path, O_RDONLY) of a regular file; -1 with errno set (ZT_ENOTREG: something else).
static inline int zt_open_read(const char* path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); // (a FIFO's open does not wait for a writer)
    if (fd < 0) return -1;
    struct stat st;
    int ok = fstat(fd, &st) == 0;
    if (!ok || !S_ISREG(st.st_mode)) {
        int e = ok ? ZT_ENOTREG : errno;
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

#endif // ZT_READFILE_H
