// dataloader.h — llm.c token shards in, micro-batches of (inputs, targets) out, in an order that
// depends only on the seed and the step, never on the number of ranks.
//
// Shard formats (llm.c's; written by dev/prepare_data.py, write_token_shard and write_token_shard32):
//   header   256 little-endian int32: [0] = magic, [1] = version, [2] = N tokens
//   tokens   N little-endian ids: uint16 when magic = 20240520 and version = 1 (GPT-2 sized
//            vocabularies), uint32 when magic = 20240801 and version = 7 (llm.c's format for
//            vocabularies over 65,536 ids: Llama 3, Qwen2). -tokenize writes uint32 exactly when the
//            tokenizer has more than 65,536 ids. Either format trains a model of any vocabulary
//            size V: the ids are checked against V when read, not against the format.
//
// The sample stream. A *sample* is T+1 consecutive tokens: shard i (of N_i tokens) holds
// n_i = floor((N_i - 1) / T) samples, sample j starting at token j*T, so neighbouring samples
// share one token (the last target of one is the first input of the next) exactly as llm.c's
// loader reads them. Samples are numbered across shards in sorted-filename order: S in total.
// Position p of the endless sample stream is epoch e = p / S, index k = p % S, and holds sample
// perm_e[k] when shuffling (a fresh Fisher-Yates permutation per epoch, drawn from the
// counter-based RNG keyed by (seed, "SHUFF", e)), or sample k when not.
//
// Units, steps and ranks. A micro-batch *unit* u is the B positions u*B .. u*B + B-1. The trainer
// loads unit u = (step*GA + micro)*R + rank, so one optimizer step covers positions
// step*G .. step*G + G-1 with G = GA*R*B the global batch: the same samples for any R (with GA*R*B
// held constant), the ranks' units disjoint. The loader itself knows nothing of ranks or steps,
// and holds no position: resuming at a step needs no loader state.
//
// With shuffle off and one shard, unit k is tokens [k*B*T, k*B*T + B*T + 1), llm.c's unshuffled
// order. (llm.c's own shuffled order is different: it permutes shards and samples per process.)
//
// Loss masks (prompt/completion fine-tuning, written by -tokenize of a .jsonl file): beside shard
// PATH an optional mask file PATH.mask (the suffix keeps it out of a "*.bin" glob):
//   header   256 little-endian int32: [0] = 20261201 (magic), [1] = version (1 or 2), [2] = N
//            tokens (the shard's), [3] = T the examples were packed for
//   mask     N uint8, one per token i:
//            bit 0 (MASK_COUNTS) = 1 when token i counts as a target (predicting it from the tokens
//                    before it enters the loss), 0 when not (prompt, padding);
//            bit 1 (MASK_STARTS, version 2 only) = 1 when an example starts at token i: token i is
//                    the token that opens it (the EOT/BOS before its prompt; a ChatML
//                    conversation's own first token), its first input.
//            Version 1 (written before example starts were recorded) holds 0 or 1: it carries no
//            boundaries. Version 2 holds 0..3; an example start on the shard's last token is
//            refused (no input follows it: nothing can start there).
// With masks, a masked target is loaded as -1 (the classifier's "does not count"); the T a mask was
// packed for must be the T of the run (packing keeps every example inside one sample of T+1
// tokens, which only holds for that T). Either every shard of a pattern has a mask or none, and
// the masks of a pattern are all version 1 or all version 2.
//
// Segments (-doc-attention 1, docs/packing.md): dataloader_segments turns on a table dl->seg,
// (B, T) int32, filled by every dataloader_load beside inputs: seg[b*T + t] = the index within row
// b of the first token of the example holding token t (so seg[b*T] = 0, non-decreasing, and an
// example starts at t exactly where seg[b*T + t] = t). Its starts come from the masks' bit 1 when
// they carry it (dl->has_starts), else from the document token (each input equal to `eot` opens
// the document after it; llm.c's plain shards). A sample's first token always starts a (possibly
// partial) example. The table is a function of the sample alone: the same for any R.
//
// Every shard is checked at init, each problem a one-line error naming the file: header, magic,
// version, file size against the header's count, at least T+1 tokens, and every token id below
// the vocabulary size (that scan reads all the data once, about a second per GB from page cache).
// A shard with fewer than T+1 tokens holds no sample and is skipped (dataloader_short_shards
// counts them; the trainer prints a note); only when no shard holds a sample is that an error.
// Every batch is read with pread from a descriptor kept open, and its token ids are checked
// again: a shard truncated or rewritten in place mid-run is an error naming it, never a SIGBUS
// or an out-of-range id reaching the model. Mask files are read the same way (never mapped):
// every batch's mask bytes by pread, each checked to be 0 or 1 again.
// Shards stay mmapped read-only for the loader's lifetime (the start-up scan; the tests read
// them); the shuffle keeps one permutation of
// S int64 (8 bytes per sample), recomputed when a unit reaches another epoch.
//
// Header-only, all functions static: include it in one translation unit. POSIX (glob, mmap);
// compiles as C, as C++ and under nvcc (host code only).
// defines: DataLoader, DataShard, dataloader_init, dataloader_load, dataloader_total_tokens,
//          dataloader_count_targets, dataloader_free, dataloader_segments, write_token_shard,
//          write_token_shard32, write_token_shard_width, dataloader_shard_token, MASK_MAGIC,
//          tokenize_shard_parts, tokenize_fault_after_shard, tokenize_file_hash, tokenize_record_read,
//          MASK_VERSION, MASK_COUNTS, MASK_STARTS
//
// May call: rng.h, fileio.h and the C library. Knows nothing of ranks, the model or the trainer.
#ifndef ZT_DATALOADER_H
#define ZT_DATALOADER_H

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rng.h" // defines: rng_key, rng_u64 (the per-epoch permutation)
#include "fileio.h" // defines: zt_open_read, zt_strerror (regular files only)

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "dataloader.h reads little-endian shards with plain loads: big-endian hosts are not supported"
#endif

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1                     // uint16 tokens
#define SHARD_MAGIC32 20240801
#define SHARD_VERSION32 7                   // uint32 tokens (llm.c's format for large vocabularies)
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)
#define DATALOADER_SHUFFLE_LABEL 0x5348554646ull // "SHUFF": the RNG stream label of the permutation

// -----------------------------------------------------------------------------------------------
// The loader

typedef struct {
    char* path;             // as matched by the glob
    void* map;              // the whole file, mmapped read-only (NULL: not mapped); batches use fd
    int fd;                 // open for the loader's lifetime (-1: none)
    size_t map_bytes;
    int width;              // bytes per token id: 2 (uint16 shard) or 4 (uint32 shard)
    const uint16_t* tokens; // (ntok) a uint16 shard's ids, just past the 1024-byte header; else NULL
    const uint32_t* tokens32; // (ntok) a uint32 shard's ids; else NULL (read either: dataloader_shard_token)
    int64_t ntok;           // N_i, from the header, checked against the file size
    int64_t nsamples;       // n_i = (N_i - 1) / T
    int64_t first_sample;   // global number of this shard's sample 0 (sum of n over earlier shards)
    int mask_fd;            // PATH.mask, open for the loader's lifetime (-1: no mask file); read with pread
    int mask_version;       // its version: 1 (no example starts) or 2 (bit 1: example starts); 0: no mask
    int64_t mask_counted;   // targets that count in this shard's samples (mask ones at 1 .. nsamples*T)
    uint64_t hash;          // fnv1a of the whole file, checked against -tokenize's record (PREFIX.shards) when there is one
    int64_t bytes;          // the file's size
} DataShard;

typedef struct {
    int B, T;               // unit = B samples of T+1 tokens
    int vocab_size;         // every token id is < vocab_size (checked at init)
    int shuffle;            // 1: perm_e order; 0: file order
    uint64_t seed;          // keys the permutations
    int nshards;
    DataShard* shards;      // (nshards) in sorted filename order
    int64_t total_samples;  // S = sum of n_i
    int64_t* perm;          // (S) perm_e of epoch perm_epoch (shuffle only, else NULL)
    int64_t perm_epoch;     // the epoch perm holds, -1: none yet
    int* inputs;            // (B, T) = sample tokens [0, T), written by dataloader_load
    int* targets;           // (B, T) = sample tokens [1, T+1), written by dataloader_load; -1 where masked
    uint32_t* sample_buf;   // (T+1) one sample as read from its shard, widened to uint32
    char err[1024];         // dataloader_load's error, when it returns -1
    int has_mask;           // every shard has a loss mask (PATH.mask)
    uint8_t* mask_buf;      // (T+1) one sample's mask as read from its file
    int64_t mask_counted;   // [masks] targets that count over all samples (0: nothing to learn from)
    int has_starts;         // [masks] every mask is version 2: the data records where examples start
    int* seg;               // (B, T) the segment table, written by dataloader_load; NULL: off (dataloader_segments)
    int seg_eot;            // [seg] without recorded starts: the document token that opens an example
    char note[600];         // a warning for the caller to print ("": none): -tokenize shards with gaps in their numbering
} DataLoader;

// -tokenize's shards are named PREFIX_train_000000.bin, PREFIX_val_000000.bin, ...; while a
// -tokenize writes them, PREFIX.tokenizing exists (written first, removed last: startup.h's
// run_tokenize), so shards of a run that did not finish (killed, or still running) are refused
// instead of training on part of the corpus. For a shard path of that form: its marker's path in
// out, its split and number; 0 when the name is not of that form.
static inline int tokenize_shard_parts(const char* path, char* marker, size_t cap, char* split, size_t scap, int* index) {
    size_t n = strlen(path);
    if (n < 12 || strcmp(path + n - 4, ".bin")) return 0;
    const char* u = path + n - 4; // the digits before ".bin": six or more (%06d)
    while (u > path && u[-1] >= '0' && u[-1] <= '9') u--;
    if (path + n - 4 - u < 6 || path + n - 4 - u > 9) return 0;
    if (u == path || u[-1] != '_') return 0;
    const char* sp = u - 1; // '_' before the digits; the split before it, then '_'
    const char* st = sp;
    while (st > path && st[-1] != '_' && st[-1] != '/') st--;
    int known = (sp - st == 5 && !strncmp(st, "train", 5)) || (sp - st == 3 && !strncmp(st, "val", 3));
    if (st == path || st[-1] != '_' || !known) return 0;
    snprintf(split, scap, "%.*s", (int)(sp - st), st);
    snprintf(marker, cap, "%.*s.tokenizing", (int)(st - 1 - path), path);
    *index = atoi(u);
    return 1;
}


// Unmap and free everything; safe on a zeroed, half-built or already freed loader.
static inline void dataloader_free(DataLoader* dl) {
    for (int i = 0; dl->shards && i < dl->nshards; i++) {
        if (dl->shards[i].map) munmap(dl->shards[i].map, dl->shards[i].map_bytes);
        if (dl->shards[i].fd >= 0) close(dl->shards[i].fd);
        if (dl->shards[i].mask_fd >= 0) close(dl->shards[i].mask_fd);
        free(dl->shards[i].path);
    }
    free(dl->shards);
    free(dl->perm);
    free(dl->inputs);
    free(dl->targets);
    free(dl->sample_buf);
    free(dl->mask_buf);
    free(dl->seg);
    memset(dl, 0, sizeof(*dl));
    dl->perm_epoch = -1;
}

// Format a one-line error into err (if given). Returns -1.
__attribute__((format(printf, 3, 4)))
static inline int dataloader_error(char* err, size_t errlen, const char* fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

// -tokenize's record, written last (startup.h's tokenize_end): PREFIX.shards, a line per shard it
// wrote: "shard NAME TOKENS BYTES FNV1A" (NAME without its directory; FNV1A of the whole file, in
// hex), after "zerotrain tokenize record 1". The loader checks every shard of the prefix against it
// when it exists: another shard's bytes (replaced, truncated and re-headed, another run's) are
// refused, and a glob that matches fewer of the prefix's shards than the record lists is said.
#define TOKENIZE_RECORD_MAGIC "zerotrain tokenize record 1"
typedef struct { char name[256]; long long tokens, bytes; unsigned long long hash; } TokenizeRecordLine;

// The fnv1a of a whole file and its size (the writer's side of the record). 0, or -1 with errno.
static inline int tokenize_file_hash(const char* path, uint64_t* hash, int64_t* bytes) {
    int fd = zt_open_read(path);
    if (fd < 0) return -1;
    static unsigned char buf[1 << 16];
    uint64_t h = FNV_INIT;
    int64_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf, sizeof(buf));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { int e = errno; close(fd); errno = e; return -1; }
        if (r == 0) break;
        h = fnv1a(h, buf, (size_t)r);
        n += r;
    }
    close(fd);
    *hash = h;
    *bytes = n;
    return 0;
}

// Read a record (path): its lines into *out (malloc'd, *n of them). 0; 1 when there is none; -1
// with err when it is not one.
static inline int tokenize_record_read(const char* path, TokenizeRecordLine** out, int* n, char* err, size_t errlen) {
    *out = NULL;
    *n = 0;
    FILE* f = zt_fopen_read(path);
    if (!f) return errno == ENOENT ? 1 : dataloader_error(err, errlen, "%s: cannot open: %s", path, zt_strerror(errno));
    char line[512];
    int cap = 0, ok = fgets(line, sizeof(line), f) && !strncmp(line, TOKENIZE_RECORD_MAGIC, strlen(TOKENIZE_RECORD_MAGIC));
    while (ok && fgets(line, sizeof(line), f)) {
        if (!strcmp(line, "end\n")) { ok = 2; break; }
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            TokenizeRecordLine* g = (TokenizeRecordLine*)realloc(*out, sizeof(TokenizeRecordLine) * (size_t)cap);
            if (!g) { ok = 0; break; }
            *out = g;
        }
        TokenizeRecordLine* l = &(*out)[*n];
        if (sscanf(line, "shard %255s %lld %lld %llx", l->name, &l->tokens, &l->bytes, &l->hash) != 4) { ok = 0; break; }
        (*n)++;
    }
    fclose(f);
    if (ok != 2) {
        free(*out);
        *out = NULL;
        *n = 0;
        return dataloader_error(err, errlen, "%s: not a whole -tokenize record (\"%s\" first, a line per shard, \"end\" last). HINT: "
                                "tokenize again, or remove it", path, TOKENIZE_RECORD_MAGIC);
    }
    return 0;
}

#define MASK_MAGIC 20261201
#define MASK_VERSION 2   // what -tokenize writes; version 1 (no example starts) is still read
#define MASK_COUNTS 1    // bit 0 of a mask byte: the token counts as a target
#define MASK_STARTS 2    // bit 1 (version 2): an example starts at the token (it opens the example)

// The shard's loss mask PATH.mask, if there is one: opened (kept open: batches read it with pread,
// like the tokens) and checked whole once (header, N, T, size, every value 0 or 1), counting the
// targets that count. Version 1: bytes 0 or 1; version 2: 0..3, no start on the last token.
static inline int dataloader_open_mask(DataShard* sh, int T, char* err, size_t errlen) {
    char mpath[4096];
    if (snprintf(mpath, sizeof(mpath), "%s.mask", sh->path) >= (int)sizeof(mpath)) return dataloader_error(err, errlen, "shard %s: path too long", sh->path);
    int fd = zt_open_read(mpath);
    if (fd < 0) {
        if (errno == ENOENT) return 0; // no mask: every target counts
        return dataloader_error(err, errlen, "mask %s: cannot open: %s", mpath, zt_strerror(errno));
    }
    sh->mask_fd = fd; // (dataloader_free closes it)
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size != SHARD_HEADER_BYTES + sh->ntok)
        return dataloader_error(err, errlen, "mask %s: %lld bytes, expected %lld (header + one byte per token of %s)", mpath,
                                (long long)st.st_size, (long long)(SHARD_HEADER_BYTES + sh->ntok), sh->path);
    int32_t h[4];
    if (pread(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h)) return dataloader_error(err, errlen, "mask %s: cannot read its header: %s", mpath, strerror(errno));
    if (h[0] != MASK_MAGIC || h[1] < 1 || h[1] > MASK_VERSION)
        return dataloader_error(err, errlen, "mask %s: wrong magic/version %d/%d (expected %d and version 1 or %d)", mpath, h[0], h[1], MASK_MAGIC, MASK_VERSION);
    sh->mask_version = h[1];
    uint8_t top = h[1] == 1 ? MASK_COUNTS : MASK_COUNTS | MASK_STARTS; // the largest valid byte
    if (h[2] != sh->ntok) return dataloader_error(err, errlen, "mask %s: counts %d tokens, its shard %lld", mpath, h[2], (long long)sh->ntok);
    if (h[3] != T)
        return dataloader_error(err, errlen, "mask %s: the examples were packed for T = %d, this run has T = %d. HINT: train with -t %d, "
                                "or tokenize again with -t %d", mpath, h[3], T, h[3], T);
    uint8_t buf[1 << 16];
    for (int64_t i = 0; i < sh->ntok;) { // the start-up scan, a chunk at a time
        ssize_t r = pread(fd, buf, (size_t)(sh->ntok - i < (int64_t)sizeof(buf) ? sh->ntok - i : (int64_t)sizeof(buf)), SHARD_HEADER_BYTES + i);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return dataloader_error(err, errlen, "mask %s: cannot read byte %lld: %s", mpath, (long long)i, r < 0 ? strerror(errno) : "end of file");
        for (ssize_t k = 0; k < r; k++) {
            if (buf[k] > top) return dataloader_error(err, errlen, "mask %s: value %u at index %lld is not %s", mpath, buf[k], (long long)(i + k),
                                                     top == 1 ? "0 or 1 (a version-1 mask records no example starts)" : "0..3 (bit 0: counts, bit 1: an example starts)");
            if ((buf[k] & MASK_STARTS) && i + k == sh->ntok - 1)
                return dataloader_error(err, errlen, "mask %s: an example starts at index %lld, the shard's last token: no input follows it, "
                                        "so no example can start there", mpath, (long long)(i + k));
            if (i + k >= 1 && i + k <= sh->nsamples * T) sh->mask_counted += buf[k] & MASK_COUNTS; // a target of some sample
        }
        i += r;
    }
    return 0;
}

// Map and check one shard; sh->path is set. On error sh->map may be left mapped: the caller's
// dataloader_free unmaps it.
static inline int dataloader_open_shard(DataShard* sh, int T, int vocab_size, char* err, size_t errlen) {
    const char* path = sh->path;
    int fd = zt_open_read(path);
    if (fd < 0) return dataloader_error(err, errlen, "shard %s: cannot open: %s", path, zt_strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return dataloader_error(err, errlen, "shard %s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return dataloader_error(err, errlen, "shard %s: cannot read: not a regular file", path);
    }
    int64_t size = (int64_t)st.st_size;
    if (size < SHARD_HEADER_BYTES) {
        close(fd);
        return dataloader_error(err, errlen, "shard %s: truncated header: the file is %lld bytes, the header alone is %d",
                                path, (long long)size, SHARD_HEADER_BYTES);
    }
    void* map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    sh->fd = fd;  // kept: batches are read with pread (dataloader_load)
    if (map == MAP_FAILED) return dataloader_error(err, errlen, "shard %s: cannot mmap: %s", path, strerror(map_errno));
    sh->map = map;
    sh->map_bytes = (size_t)size;

    int32_t header[3];  // magic, version, N; the rest of the 256 is unused
    memcpy(header, map, sizeof(header));
    if (header[0] != SHARD_MAGIC && header[0] != SHARD_MAGIC32) {
        return dataloader_error(err, errlen, "shard %s: wrong magic %d (expected %d for uint16 or %d for uint32 ids): "
                                "not an llm.c token shard", path, header[0], SHARD_MAGIC, SHARD_MAGIC32);
    }
    int wide = header[0] == SHARD_MAGIC32;
    if (header[1] != (wide ? SHARD_VERSION32 : SHARD_VERSION)) {
        return dataloader_error(err, errlen, "shard %s: unsupported version %d for magic %d (expected %d: %s ids)",
                                path, header[1], header[0], wide ? SHARD_VERSION32 : SHARD_VERSION, wide ? "uint32" : "uint16");
    }
    int w = wide ? 4 : 2;
    int64_t N = header[2];
    int64_t held = (size - SHARD_HEADER_BYTES) / w;  // whole tokens the file holds
    if (N < 0 || size != SHARD_HEADER_BYTES + w * N) {
        return dataloader_error(err, errlen, "shard %s: %s: header says %lld tokens but file holds %lld%s (%s ids)",
                                path, N > held ? "truncated" : "wrong size", (long long)N, (long long)held,
                                (size - SHARD_HEADER_BYTES) % w ? " and a partial one" : "", wide ? "uint32" : "uint16");
    }
    sh->ntok = N;
    sh->width = w;
    const char* data = (const char*)map + SHARD_HEADER_BYTES;
    if (wide) sh->tokens32 = (const uint32_t*)data;
    else sh->tokens = (const uint16_t*)data;
    sh->nsamples = N < (int64_t)T + 1 ? 0 : (N - 1) / T; // too short: skipped (dataloader_init)
    sh->bytes = (int64_t)size;
    sh->hash = fnv1a(FNV_INIT, map, (size_t)size);
    for (int64_t i = 0; i < N; i++) {
        uint32_t id = wide ? sh->tokens32[i] : sh->tokens[i];
        if (id >= (uint32_t)vocab_size) {
            return dataloader_error(err, errlen, "shard %s: token id %u at index %lld is out of range for vocabulary size %d",
                                    path, (unsigned)id, (long long)i, vocab_size);
        }
    }
    return dataloader_open_mask(sh, T, err, errlen);
}

// Open every shard matching `pattern` (glob(3), sorted) for units of B samples of T+1 tokens.
// Returns 0, or -1 with a one-line message in err naming the file (or the pattern) and the
// problem, and nothing left allocated or mapped.
static inline int dataloader_init(DataLoader* dl, const char* pattern, int B, int T, int vocab_size,
                                  int shuffle, uint64_t seed, char* err, size_t errlen) {
    memset(dl, 0, sizeof(*dl));
    dl->perm_epoch = -1;
    if (!pattern) return dataloader_error(err, errlen, "dataloader: no shard pattern given");
    if (B < 1 || T < 1 || vocab_size < 1) {
        return dataloader_error(err, errlen, "dataloader %s: bad arguments B = %d, T = %d, vocab size = %d "
                                "(need B, T, V >= 1)", pattern, B, T, vocab_size);
    }
    dl->B = B;
    dl->T = T;
    dl->vocab_size = vocab_size;
    dl->shuffle = shuffle;
    dl->seed = seed;

    // --- the files: glob sorts its matches
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc != 0) {
        globfree(&g);
        return dataloader_error(err, errlen, rc == GLOB_NOMATCH ? "dataloader: no file matches the pattern '%s'"
                                : "dataloader: cannot search for '%s' (glob failed)", pattern);
    }
    dl->shards = (DataShard*)calloc(g.gl_pathc, sizeof(DataShard));
    if (!dl->shards) {
        globfree(&g);
        return dataloader_error(err, errlen, "dataloader %s: out of memory", pattern);
    }
    dl->nshards = (int)g.gl_pathc;
    for (int i = 0; i < dl->nshards; i++) dl->shards[i].fd = dl->shards[i].mask_fd = -1;
    for (int i = 0; i < dl->nshards; i++) {
        dl->shards[i].path = strdup(g.gl_pathv[i]);
        if (!dl->shards[i].path) {
            globfree(&g);
            dataloader_free(dl);
            return dataloader_error(err, errlen, "dataloader %s: out of memory", pattern);
        }
    }
    globfree(&g);

    // --- -tokenize's shards: none of a run that did not finish; a gap in a prefix's numbering said.
    // (glob sorts: a prefix and split's shards are neighbours, in number order; one pass)
    char prev_marker[4200] = "", prev_split[8] = "";
    int prev_idx = -1;
    for (int i = 0; i < dl->nshards; i++) {
        char marker[4200], split[8];
        int idx;
        if (!tokenize_shard_parts(dl->shards[i].path, marker, sizeof(marker), split, sizeof(split), &idx)) { prev_marker[0] = 0; continue; }
        int same = !strcmp(marker, prev_marker) && !strcmp(split, prev_split);
        if (!same) {
            struct stat mst;
            if (stat(marker, &mst) == 0) {
                int rc2 = dataloader_error(err, errlen, "shard %s: %s exists: a -tokenize into that prefix did not finish (killed, or still "
                                           "running), so its shards are part of the corpus only. HINT: run the -tokenize again (it replaces "
                                           "them), or remove %s if you know they are whole", dl->shards[i].path, marker, marker);
                dataloader_free(dl);
                return rc2;
            }
        } else if (idx != prev_idx + 1 && !dl->note[0]) // (numbers may start anywhere: llm.c's FineWeb train shards start at 1)
            snprintf(dl->note, sizeof(dl->note), "'%s' matched %s shards of %.*s numbered %06d and then %06d: %d missing between them "
                     "(deleted, or not copied?)", pattern, split, (int)(strlen(marker) - 11), marker, prev_idx, idx, idx - prev_idx - 1);
        snprintf(prev_marker, sizeof(prev_marker), "%s", marker);
        snprintf(prev_split, sizeof(prev_split), "%s", split);
        prev_idx = idx;
    }

    // --- check every shard, then number the samples across shards
    for (int i = 0; i < dl->nshards; i++) {
        if (dataloader_open_shard(&dl->shards[i], T, vocab_size, err, errlen) != 0) {
            dataloader_free(dl);
            return -1;
        }
        dl->shards[i].first_sample = dl->total_samples;
        dl->total_samples += dl->shards[i].nsamples;
        if (dl->shards[i].mask_fd >= 0) dl->has_mask = 1;
        dl->mask_counted += dl->shards[i].mask_counted;
    }

    // --- -tokenize's record, where the prefix has one: every shard as written, and how many it lists
    for (int i = 0; i < dl->nshards; i++) {
        char marker[4200], split[8], rpath[4200], m2[4200], s2[8];
        int idx, n = 0, matched = 0, listed = 0;
        if (!tokenize_shard_parts(dl->shards[i].path, marker, sizeof(marker), split, sizeof(split), &idx)) continue;
        if (i > 0 && tokenize_shard_parts(dl->shards[i - 1].path, m2, sizeof(m2), s2, sizeof(s2), &idx) && !strcmp(m2, marker) && !strcmp(s2, split))
            continue; // (the group's first shard checks the group)
        snprintf(rpath, sizeof(rpath), "%.*s.shards", (int)(strlen(marker) - 11), marker);
        TokenizeRecordLine* rec = NULL;
        int rc = tokenize_record_read(rpath, &rec, &n, err, errlen);
        if (rc < 0) { dataloader_free(dl); return -1; }
        if (rc == 1) continue; // no record: a -tokenize before it, or shards named so by hand
        char want[300];
        snprintf(want, sizeof(want), "_%s_", split);
        for (int q = 0; q < n; q++) listed += strstr(rec[q].name, want) != NULL;
        for (int k = i; k < dl->nshards; k++) {
            const DataShard* sh = &dl->shards[k];
            if (!tokenize_shard_parts(sh->path, m2, sizeof(m2), s2, sizeof(s2), &idx) || strcmp(m2, marker) || strcmp(s2, split)) break;
            const char* base = strrchr(sh->path, '/');
            base = base ? base + 1 : sh->path;
            const TokenizeRecordLine* l = NULL;
            for (int q = 0; q < n && !l; q++) if (!strcmp(rec[q].name, base)) l = &rec[q];
            if (!l || l->tokens != sh->ntok || l->bytes != sh->bytes || l->hash != sh->hash) {
                int rc2 = l ? dataloader_error(err, errlen, "shard %s: not the file -tokenize wrote (%s: %lld tokens, %lld bytes, fnv1a %016llx; now "
                                               "%lld tokens, %lld bytes, fnv1a %016llx): replaced or changed since. HINT: tokenize again",
                                               sh->path, rpath, l->tokens, l->bytes, l->hash, (long long)sh->ntok, (long long)sh->bytes,
                                               (unsigned long long)sh->hash)
                            : dataloader_error(err, errlen, "shard %s: not in %s, the record of the -tokenize that wrote this prefix's shards "
                                               "(another run's?). HINT: tokenize again, or remove it", sh->path, rpath);
                free(rec);
                dataloader_free(dl);
                return rc2;
            }
            matched++;
        }
        if (matched < listed && !dl->note[0])
            snprintf(dl->note, sizeof(dl->note), "'%.200s' matched %d of the %d %s shards %.300s lists (a subset on purpose?)", pattern, matched, listed, split, rpath);
        free(rec);
    }
    if (dl->total_samples == 0) { // every shard too short: name the first
        const DataShard* sh = &dl->shards[0];
        dataloader_error(err, errlen, "shard %s: too few tokens: %lld, sequence length T = %d needs at least T+1 = %d%s",
                         sh->path, (long long)sh->ntok, T, T + 1, dl->nshards > 1 ? " (and no other shard has enough)" : "");
        dataloader_free(dl);
        return -1;
    }
    for (int i = 0; dl->has_mask && i < dl->nshards; i++) {
        char e[1024] = "";
        if (dl->shards[i].mask_fd < 0)
            snprintf(e, sizeof(e), "shard %s: no loss mask (%s.mask) while other shards of '%s' have one", dl->shards[i].path, dl->shards[i].path, pattern);
        else if (dl->shards[i].mask_version != dl->shards[0].mask_version)
            snprintf(e, sizeof(e), "mask %s.mask: version %d while %s.mask is version %d: every mask of '%s' must record example starts (2) "
                     "or none (1). HINT: -tokenize the data again", dl->shards[i].path, dl->shards[i].mask_version, dl->shards[0].path,
                     dl->shards[0].mask_version, pattern);
        if (e[0]) {
            dataloader_free(dl);
            return dataloader_error(err, errlen, "%s", e);
        }
    }
    dl->has_starts = dl->has_mask && dl->shards[0].mask_version >= 2;

    // --- buffers: everything dataloader_load touches is allocated here
    size_t BT = (size_t)B * (size_t)T;
    dl->inputs = (int*)malloc(BT * sizeof(int));
    dl->targets = (int*)malloc(BT * sizeof(int));
    dl->sample_buf = (uint32_t*)malloc(((size_t)T + 1) * sizeof(uint32_t));
    dl->mask_buf = (uint8_t*)malloc((size_t)T + 1);
    if (shuffle) dl->perm = (int64_t*)malloc((size_t)dl->total_samples * sizeof(int64_t));
    if (!dl->inputs || !dl->targets || !dl->sample_buf || !dl->mask_buf || (shuffle && !dl->perm)) {
        dataloader_free(dl);
        return dataloader_error(err, errlen, "dataloader %s: out of memory for the batch or the permutation", pattern);
    }
    return 0;
}

// Make dl->perm hold perm_e: Fisher-Yates over 0..S-1, where step i swaps position i with
// j = rng_u64(key, i) % (i+1), key = rng_key(seed, "SHUFF", e). Each draw is a pure function of
// (seed, e, i), so any process computes the same permutation. (The modulo's bias is below
// S / 2^64: nothing.)
static inline void dataloader_shuffle_epoch(DataLoader* dl, int64_t e) {
    if (dl->perm_epoch == e) return;
    int64_t S = dl->total_samples;
    uint64_t key = rng_key(dl->seed, DATALOADER_SHUFFLE_LABEL, (uint64_t)e);
    for (int64_t i = 0; i < S; i++) dl->perm[i] = i;
    for (int64_t i = S - 1; i >= 1; i--) {
        int64_t j = (int64_t)(rng_u64(key, (uint64_t)i) % (uint64_t)(i + 1));
        int64_t tmp = dl->perm[i];
        dl->perm[i] = dl->perm[j];
        dl->perm[j] = tmp;
    }
    dl->perm_epoch = e;
}

// The shard holding global sample `sample` (0 <= sample < S): binary search. Shards without
// samples share first_sample with the next one; the last match is the one that holds it.
static inline const DataShard* dataloader_sample_shard(const DataLoader* dl, int64_t sample) {
    int lo = 0, hi = dl->nshards - 1;  // find the last shard with first_sample <= sample
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (dl->shards[mid].first_sample <= sample) lo = mid;
        else hi = mid - 1;
    }
    return &dl->shards[lo];
}

// Read the T+1 tokens of global sample `sample` into dl->sample_buf with pread, and check them
// again: the file may have been truncated or rewritten since start-up. Returns 0 or -1 (dl->err).
static inline int dataloader_read_sample(DataLoader* dl, int64_t sample) {
    const DataShard* sh = dataloader_sample_shard(dl, sample);
    int64_t first = (sample - sh->first_sample) * dl->T; // index of its first token in the shard
    size_t want = ((size_t)dl->T + 1) * (size_t)sh->width, got = 0;
    off_t off = SHARD_HEADER_BYTES + sh->width * (off_t)first;
    while (got < want) {
        ssize_t r = pread(sh->fd, (char*)dl->sample_buf + got, want - got, off + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return dataloader_error(dl->err, sizeof(dl->err), "shard %s: cannot read tokens %lld..%lld: %s (the file changed since start-up?)",
                                    sh->path, (long long)first, (long long)(first + dl->T), r < 0 ? strerror(errno) : "the file is shorter than at start-up");
        got += (size_t)r;
    }
    if (sh->width == 2) { // widen uint16 ids in place, from the end (each uint32 lands at or past its source)
        for (int t = dl->T; t >= 0; t--) {
            uint16_t v;
            memcpy(&v, (const char*)dl->sample_buf + 2 * (size_t)t, sizeof(v));
            dl->sample_buf[t] = v;
        }
    }
    for (int t = 0; t <= dl->T; t++)
        if (dl->sample_buf[t] >= (uint32_t)dl->vocab_size)
            return dataloader_error(dl->err, sizeof(dl->err), "shard %s: token id %u at index %lld is out of range for vocabulary size %d (the file changed since start-up)",
                                    sh->path, (unsigned)dl->sample_buf[t], (long long)(first + t), dl->vocab_size);
    return 0;
}

// The loss mask of global sample `sample` (its T+1 bytes) into dl->mask_buf with pread, checked
// again as the tokens are (a mask truncated or rewritten mid-run is an error naming it, never a
// SIGBUS or a value other than 0/1 in the loss). *m = NULL when its shard has none. 0, or -1 (dl->err).
static inline int dataloader_read_mask(DataLoader* dl, int64_t sample, const uint8_t** m) {
    const DataShard* sh = dataloader_sample_shard(dl, sample);
    *m = NULL;
    if (sh->mask_fd < 0) return 0;
    int64_t first = (sample - sh->first_sample) * dl->T;
    size_t want = (size_t)dl->T + 1, got = 0;
    while (got < want) {
        ssize_t r = pread(sh->mask_fd, dl->mask_buf + got, want - got, SHARD_HEADER_BYTES + (off_t)first + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return dataloader_error(dl->err, sizeof(dl->err), "mask %s.mask: cannot read bytes %lld..%lld: %s (the file changed since start-up?)",
                                    sh->path, (long long)first, (long long)(first + dl->T), r < 0 ? strerror(errno) : "the file is shorter than at start-up");
        got += (size_t)r;
    }
    uint8_t top = sh->mask_version == 1 ? MASK_COUNTS : MASK_COUNTS | MASK_STARTS;
    for (int t = 0; t <= dl->T; t++)
        if (dl->mask_buf[t] > top)
            return dataloader_error(dl->err, sizeof(dl->err), "mask %s.mask: value %u at index %lld is not %s (the file changed since start-up)",
                                    sh->path, dl->mask_buf[t], (long long)(first + t), top == 1 ? "0 or 1" : "0..3");
    *m = dl->mask_buf;
    return 0;
}

// The sample at stream position p (its epoch's permutation when shuffling).
static inline int64_t dataloader_position_sample(DataLoader* dl, int64_t p) {
    int64_t S = dl->total_samples;
    int64_t e = p / S, k = p % S;
    if (!dl->shuffle) return k;
    dataloader_shuffle_epoch(dl, e);
    return dl->perm[k];
}

// Targets that count in unit `unit` (B*T without masks). Reads no more than the masks: every rank
// can count the whole global batch itself before its first backward. -1 on a read error (dl->err).
static inline int64_t dataloader_count_targets(DataLoader* dl, int64_t unit) {
    int B = dl->B, T = dl->T;
    if (!dl->has_mask) return (int64_t)B * T;
    int64_t n = 0;
    for (int b = 0; b < B; b++) {
        const uint8_t* m;
        if (dataloader_read_mask(dl, dataloader_position_sample(dl, unit * B + b), &m) != 0) return -1;
        for (int t = 1; t <= T; t++) n += m[t] & MASK_COUNTS;
    }
    return n;
}

// ZT_FAULT=slow-read:SUBSTR (tests): a batch whose first sample is in a shard whose path contains
// SUBSTR takes 3 s longer to load (slow storage).
static inline void dataloader_fault_slow(const DataShard* sh) {
    const char* f = getenv("ZT_FAULT");
    if (f && !strncmp(f, "slow-read:", 10) && f[10] && strstr(sh->path, f + 10)) sleep(3);
}

// Turn the segment table on (once, before the first dataloader_load; allocates it): starts from the
// masks' bit 1 when every mask records them, else at each input equal to `eot` (-1 there: refused,
// as is an eot outside the vocabulary). 0, or -1 with err.
static inline int dataloader_segments(DataLoader* dl, int eot, char* err, size_t errlen) {
    if (!dl->has_starts && (eot < 0 || eot >= dl->vocab_size))
        return dataloader_error(err, errlen, "shard %s: its data records no example starts (%s), and no document token %s opens one",
                                dl->shards[0].path, dl->has_mask ? "version-1 loss masks" : "no loss masks",
                                eot < 0 ? "is known" : "inside the vocabulary");
    dl->seg_eot = eot;
    if (!dl->seg) dl->seg = (int*)malloc(sizeof(int) * (size_t)dl->B * (size_t)dl->T);
    if (!dl->seg) return dataloader_error(err, errlen, "dataloader: out of memory for the segment table");
    return 0;
}

// Fill dl->inputs and dl->targets, (B, T) each, with unit `unit`: positions unit*B + b,
// b = 0..B-1, of the sample stream, and dl->seg when it is on. A unit may straddle epochs; each
// position uses its own. Returns 0, or -1 with a one-line message in dl->err naming the shard.
static inline int dataloader_load(DataLoader* dl, int64_t unit) {
    if (unit < 0) return dataloader_error(dl->err, sizeof(dl->err), "dataloader: unit %lld is negative", (long long)unit);
    int B = dl->B, T = dl->T;
    for (int b = 0; b < B; b++) {
        int64_t sample = dataloader_position_sample(dl, unit * B + b);
        if (b == 0) dataloader_fault_slow(dataloader_sample_shard(dl, sample));
        if (dataloader_read_sample(dl, sample) != 0) return -1;
        const uint32_t* tok = dl->sample_buf;
        const uint8_t* m;
        if (dataloader_read_mask(dl, sample, &m) != 0) return -1;
        for (int t = 0; t < T; t++) {
            dl->inputs[b * T + t] = (int)tok[t];
            dl->targets[b * T + t] = !m || (m[t + 1] & MASK_COUNTS) ? (int)tok[t + 1] : -1; // -1: masked (does not count)
        }
        if (!dl->seg) continue;
        int* seg = dl->seg + (size_t)b * T; // [seg] the first token of each token's example
        for (int t = 0; t < T; t++) {
            int starts = t == 0 || (dl->has_starts ? (m[t] & MASK_STARTS) != 0 : tok[t] == (uint32_t)dl->seg_eot);
            seg[t] = starts ? t : seg[t - 1];
        }
    }
    return 0;
}

// Shards too short to hold one sample (skipped).
static inline int dataloader_short_shards(const DataLoader* dl) {
    int n = 0;
    for (int i = 0; i < dl->nshards; i++) n += dl->shards[i].nsamples == 0;
    return n;
}

// Tokens in all shards together (the headers' counts), including the few at shard ends that no
// sample covers.
static inline int64_t dataloader_total_tokens(const DataLoader* dl) {
    int64_t n = 0;
    for (int i = 0; i < dl->nshards; i++) n += dl->shards[i].ntok;
    return n;
}

// -----------------------------------------------------------------------------------------------
// Writing shards

// Token id i of a shard (either width).
static inline uint32_t dataloader_shard_token(const DataShard* sh, int64_t i) {
    return sh->width == 4 ? sh->tokens32[i] : sh->tokens[i];
}

// Write n ids of `width` bytes each (2: uint16 format, 4: uint32 format) as an llm.c shard,
// atomically: into path.tmp.<pid>, flushed and fsynced, then renamed over path, so a reader never
// sees a half-written file. Returns 0, or -1 with a one-line message in err naming the file (the
// temporary file is removed).
// ZT_FAULT=crash:tokenize-shard:K (tests): the process dies (SIGKILL) once its K-th shard has its
// name, as a kill in the middle of a -tokenize would leave it.
static inline void tokenize_fault_after_shard(void) {
    static int done = 0;
    const char* f = getenv("ZT_FAULT");
    if (f && !strncmp(f, "crash:tokenize-shard:", 21) && atoi(f + 21) == ++done) { fflush(stdout); kill(getpid(), SIGKILL); }
}

static inline int write_token_shard_width(const char* path, const void* toks, int64_t n, int width, char* err, size_t errlen) {
    if (n < 0 || n > INT32_MAX) {
        return dataloader_error(err, errlen, "shard %s: cannot write %lld tokens: the header counts in int32", path, (long long)n);
    }
    if (width != 2 && width != 4) return dataloader_error(err, errlen, "shard %s: token width %d is neither 2 nor 4 bytes", path, width);
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof(tmp)) {
        return dataloader_error(err, errlen, "shard %s: path too long", path);
    }
    FILE* f = fopen(tmp, "wb");
    if (!f) return dataloader_error(err, errlen, "shard %s: cannot create %s: %s", path, tmp, strerror(errno));
    int32_t header[SHARD_HEADER_INTS] = {0};
    header[0] = width == 4 ? SHARD_MAGIC32 : SHARD_MAGIC;
    header[1] = width == 4 ? SHARD_VERSION32 : SHARD_VERSION;
    header[2] = (int32_t)n;
    int ok = fwrite(header, sizeof(header), 1, f) == 1 &&
             (n == 0 || fwrite(toks, (size_t)width, (size_t)n, f) == (size_t)n) &&
             fflush(f) == 0 && fsync(fileno(f)) == 0;
    int write_errno = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        write_errno = errno;
    }
    if (!ok) {
        remove(tmp);
        return dataloader_error(err, errlen, "shard %s: cannot write %s: %s", path, tmp, strerror(write_errno));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return dataloader_error(err, errlen, "shard %s: cannot rename %s to it: %s", path, tmp, strerror(e));
    }
    return 0;
}

// n uint16 ids as a uint16 shard (magic 20240520, version 1).
static inline int write_token_shard(const char* path, const uint16_t* toks, int64_t n, char* err, size_t errlen) {
    return write_token_shard_width(path, toks, n, 2, err, errlen);
}

// n uint32 ids as a uint32 shard (magic 20240801, version 7).
static inline int write_token_shard32(const char* path, const uint32_t* toks, int64_t n, char* err, size_t errlen) {
    return write_token_shard_width(path, toks, n, 4, err, errlen);
}

#endif // ZT_DATALOADER_H
