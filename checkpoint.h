// checkpoint.h — llm.c model files in and out, sharded training state, and the protocol that
// makes a checkpoint all-or-nothing. Everything here takes narrow arguments (the Zero state, the
// GPTConfig, a directory, a CkptMeta): it knows nothing of the trainer's types.
//
// FILES in the output directory (llm.c's names for the model):
//   model_%08d.bin        the model in llm.c's format, written by rank 0 (llm.c's header, untouched):
//                         header 256 int32 {20240326, version (3: FP32, 5: BF16), maxT, V, L, NH, C, Vp}
//                         then the parameters in llm.c's order (GPT2_TENSORS), unpadded
//   state_%08d_%05d.bin   one per rank, version 2:
//                           header   32 int64 (STATE_H_* below: step, AdamW count, seed, nonce, ...)
//                           pieces   npieces x {logical offset, length} int64: the rank's shard of the
//                                    parameters in the *logical* (llm.c) layout
//                           checksums nchunks x uint32: CRC32C of each 1 MiB chunk of the payload
//                           payload  master, m, v: FP32, piece after piece, one array after another
//                         The header's last field is the CRC32C of header + pieces + checksums. Any
//                         rank count or stage reads exactly the pieces it needs, from whichever
//                         files hold them, and verifies every chunk it touches.
//                         [LoRA] the trainable blocks only: the adapters' master, m, v; the header
//                         records the rank and targets; no model file (the base is -e's, named in
//                         DONE's run record with its bytes and CRC32C: ckpt_base_identity)
//   adapter_%08d/         [LoRA] the adapters at that step as a PEFT adapter (adapter_model.safetensors
//                         F32 + adapter_config.json: what -lora-export writes; PEFT loads it as is),
//                         written by rank 0 before DONE through CkptMeta's adapter hook; set aside,
//                         kept (-nk) and removed with its step. A resume reads the state files, not it.
//   DONE_%08d             written by rank 0 once every rank reported success: step, nonce, ranks,
//                         and the model file's size and CRC32C (llm.c's header has no room for it);
//                         a run that chose its flags with -tune adds a line "tune -z 2 -r 1" (the
//                         choice as flags), which a resume reuses (older readers ignore the line,
//                         and a marker without it reads as "not tuned": both directions compatible);
//                         then the run's record, "run KEY VALUE" lines (see Marker), likewise optional
//   LATEST                written after DONE: the step and nonce a resume follows
//
// THE PROTOCOL of one save (every rank calls ckpt_save):
//   1. rank 0 draws a nonce (64 random bits) and broadcasts it; it goes into every state file and
//      into DONE, and the model file's checksum into DONE: a file of another save cannot pass;
//   2. rank 0 removes DONE of this step (if a step is written twice), then a barrier: no rank
//      renames a file of the step while a marker still says the step is complete;
//   3. every file is written under a temporary name, fsynced, renamed, the directory fsynced;
//   4. an error count is summed over ranks; only if it is 0 does rank 0 write DONE, then LATEST;
//   5. -nk: the oldest complete checkpoints beyond N are removed (DONE first).
// (-save-model 0 or last: a checkpoint may have no model file; its DONE says model_bytes -1.)
// RESUME (ckpt_resume): rank 0 follows LATEST (not the largest step number: a roll-back's
// abandoned branch never wins); if LATEST's step is incomplete, the newest complete step before it.
// -resume-step N picks N. Loading only READS: every file is checked and nothing in the directory
// changes. Once the run is about to train (the trainer's commit_out_dir), ckpt_commit_resume moves
// every checkpoint file of a later step into a folder set_aside_<step>_<nonce>/ (said on stdout,
// never deleted) with the log.jsonl records after the step (ckpt_log_truncate), and LATEST names
// the step resumed, so the directory holds one history; a run that fails before, or trains no
// step (reading a checkpoint to export it), leaves the directory as it found it. A fresh run (no
// -y) that will write checkpoints moves an earlier run's checkpoints aside the same way, at the
// same point. The -e file is never moved or removed (same_file). DONE and LATEST also carry the
// run's record ("run" lines, see Marker): the trainer's flags that define the run. Rank 0 holds an
// flock on the directory for the whole run: two trainers cannot share one.
//
// May call: model.h (the tensor table) and zero.h (the Zero state, its gathers and the host
// communicator's broadcasts and sums).
#ifndef ZT_CHECKPOINT_H
#define ZT_CHECKPOINT_H
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "simd.h"  // defines: ZT_X86, ZT_TARGET_SSE42, crc32c_hw_supported (and includes <immintrin.h> on x86)
#include "model.h" // defines: GPTConfig, ModelDesc, model_describe
#include "fileio.h" // defines: zt_open_read, zt_strerror (regular files only)
#include "zero.h"  // defines: Zero, layout_pieces, zero_params, zero_fill_opt, comm_broadcast

#define MODEL_MAGIC 20240326
#define STATE_MAGIC 20261129 // zerotrain training state
#define STATE_VERSION 2
#define STATE_HEADER_INTS 32
#define CKPT_CHUNK (1 << 20) // bytes per CRC32C chunk of a state file's payload

// The state header's fields (int64 each).
enum {
    STATE_H_MAGIC, STATE_H_VERSION, STATE_H_R, STATE_H_RANK, STATE_H_STAGE, STATE_H_STEP, STATE_H_ADAM_T,
    STATE_H_SEED, STATE_H_NPIECES, STATE_H_LOGICAL, STATE_H_L, STATE_H_C, STATE_H_NH, STATE_H_V, STATE_H_VP,
    STATE_H_MAXT, STATE_H_STEP_TOKENS, STATE_H_TRAIN_TOKENS, STATE_H_NONCE, STATE_H_CHUNK, STATE_H_NCHUNKS,
    STATE_H_META_CRC, // CRC32C of header (this field 0) + pieces + checksums
    // the model family's fields (all 0 for GPT-2, as in files written before the Llama family):
    STATE_H_FAMILY, STATE_H_NKV, STATE_H_HD, STATE_H_F, STATE_H_BIASES /* tied | qkv_bias << 1 | mlp_bias << 2 */,
    STATE_H_ROPE_TYPE, STATE_H_FAMILY_HASH, // model_family_hash: every CFG_FAMILY field (norm_eps, rope_theta, rope_scaling too)
    // [LoRA] the adapters (0 without: files as before): the rank r and the targets' mask (the pieces
    // then cover the adapter block only; the frozen base is -e's, identified in DONE's run record)
    STATE_H_LORA_R, STATE_H_LORA_MASK,
};

// The state header's family fields of a config (0 for GPT-2: its files are as before).
static void state_family_fields(const GPTConfig* c, int64_t* h) {
    if (c->family == FAMILY_GPT2) return;
    h[STATE_H_FAMILY] = c->family; h[STATE_H_NKV] = c->NKV; h[STATE_H_HD] = c->HD; h[STATE_H_F] = c->F;
    h[STATE_H_BIASES] = c->tied | c->qkv_bias << 1 | c->mlp_bias << 2;
    h[STATE_H_ROPE_TYPE] = c->rope_type;
    h[STATE_H_FAMILY_HASH] = (int64_t)(model_family_hash(c) >> 1); // every CFG_FAMILY field (model.h)
}

// What the trainer hands a save, and what a resume hands back (from rank 0's state file).
typedef struct {
    int step;
    int64_t adam_t;          // AdamW updates applied
    int64_t seed;
    int64_t step_tokens;     // tokens per optimizer step
    int64_t train_tokens;    // tokens in the training shards
    int writer_R;            // resume: ranks that wrote the checkpoint
    char tune[128];          // -tune's choice as flags ("-z 2 -r 1"), "" when the run did not tune: kept in DONE
    const char* run;         // save: the run's record for DONE ("KEY VALUE" lines, see Marker), NULL: none
    // save, [LoRA]: writes the adapters as a PEFT adapter into the directory it is given (every rank
    // calls it, rank 0 writes; 0 on success on every rank but a failing rank 0): dir/adapter_<step>/,
    // part of the checkpoint (before DONE; set aside, kept and removed with its step). NULL: none.
    int (*adapter)(void* ctx, const char* dir);
    void* adapter_ctx;
} CkptMeta;

// ---- CRC32C (Castagnoli): SSE4.2's crc32 instruction where the build has it, else slicing-by-8.
static uint32_t g_crc32c_table[8][256];
static int g_crc32c_ready = 0;

static void crc32c_init(void) {
    if (g_crc32c_ready) return;
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        g_crc32c_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++) g_crc32c_table[t][i] = (g_crc32c_table[t - 1][i] >> 8) ^ g_crc32c_table[0][g_crc32c_table[t - 1][i] & 0xff];
    g_crc32c_ready = 1;
}

// Slicing-by-8 on the raw (inverted) register: the portable path, and the hardware path's tail.
static uint32_t crc32c_raw_sw(uint32_t c32, const unsigned char* p, size_t n) {
    crc32c_init();
    uint64_t c = c32;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c;
        c = g_crc32c_table[7][w & 0xff] ^ g_crc32c_table[6][(w >> 8) & 0xff] ^ g_crc32c_table[5][(w >> 16) & 0xff] ^
            g_crc32c_table[4][(w >> 24) & 0xff] ^ g_crc32c_table[3][(w >> 32) & 0xff] ^ g_crc32c_table[2][(w >> 40) & 0xff] ^
            g_crc32c_table[1][(w >> 48) & 0xff] ^ g_crc32c_table[0][w >> 56];
    }
    for (; n > 0; n--, p++) c = (c >> 8) ^ g_crc32c_table[0][(c ^ *p) & 0xff];
    return (uint32_t)c;
}

#ifdef ZT_X86
// SSE 4.2's crc32 instruction computes CRC-32C (this polynomial): 8 bytes a step. A function of its
// own with its target attribute, called only when the CPU has it (crc32c_hw_supported, at run time):
// a build for plain x86-64 keeps the fast path, and the bits are the portable loop's either way.
ZT_TARGET_SSE42 static uint32_t crc32c_raw_sse42(uint32_t c, const unsigned char* p, size_t n8) {
    uint64_t c64 = c;
    for (size_t i = 0; i < n8; i++) { uint64_t w; memcpy(&w, p + 8 * i, 8); c64 = _mm_crc32_u64(c64, w); }
    return (uint32_t)c64;
}
#endif

// Extend crc (0 to start) with n bytes: crc32c(a + b) = crc32c_update(crc32c_update(0, a), b).
// hw = 0 forces the portable path (tests compare the two).
static uint32_t crc32c_update_hw(uint32_t crc, const void* buf, size_t n, int hw) {
    const unsigned char* p = (const unsigned char*)buf;
    uint32_t c = ~crc;
#ifdef ZT_X86
    if (hw && crc32c_hw_supported()) {
        size_t n8 = n / 8;
        c = crc32c_raw_sse42(c, p, n8);
        p += 8 * n8;
        n -= 8 * n8;
    }
#else
    (void)hw;
#endif
    return ~crc32c_raw_sw(c, p, n);
}
static uint32_t crc32c_update(uint32_t crc, const void* buf, size_t n) { return crc32c_update_hw(crc, buf, n, 1); }

// Fault injection for the tests (test/test_checkpoint.h), read from the environment:
//   ZT_FAULT=enospc:SUBSTR        creating a checkpoint file whose path contains SUBSTR fails as a
//                                 full disk would (ENOSPC), e.g. enospc:state_00000006_00001
//                                 (these five take an optional :stepS: only while saving step S)
//   ZT_FAULT=enospc-write:SUBSTR  the file is created, its first write fails with ENOSPC
//   ZT_FAULT=eio-fsync:SUBSTR     everything is written, its fsync fails with EIO
//   ZT_FAULT=eio-rename:SUBSTR    fsynced and closed, the rename to its final name fails with EIO
//   ZT_FAULT=slow:SUBSTR          creating such a file takes 3 s longer (slow storage): any file
//                                 written through ckpt_create (model, state, DONE, LATEST, -export)
//   ZT_FAULT=crash:POINT[:rankN][:stepS]  the process dies (SIGKILL) at a point of a save:
//                                 before-write (the temporary file is created, nothing written),
//                                 before-fsync, before-rename, before-done (rank 0, every file renamed)
//   ZT_FAULT=lr-spike:stepS[:rankN]       step S's AdamW (1-based, as logged) runs with the learning
//                                 rate FLT_MAX (train_step): finite, and its update overflows
// Without :rankN a fault applies on every rank, without :stepS at every step.

// ZT_FAULT names `kind` (then ':' or its end), and this rank and step unless it names others.
static int fault_at(const char* kind, int rank, int step) {
    const char* f = getenv("ZT_FAULT");
    size_t k = strlen(kind);
    if (!f || strncmp(f, kind, k) || (f[k] != 0 && f[k] != ':')) return 0;
    const char* r = strstr(f, ":rank");
    const char* s = strstr(f, ":step");
    if (r && atoi(r + 5) != rank) return 0;
    if (s && atoi(s + 5) != step) return 0;
    return 1;
}

static void ckpt_crash_point(const char* point, int rank, int step) {
    char kind[64];
    snprintf(kind, sizeof(kind), "crash:%s", point);
    if (!fault_at(kind, rank, step)) return;
    fflush(stdout);
    fflush(stderr);
    raise(SIGKILL);
}

static int g_ckpt_step = -1; // the step being saved (-1: none), for ZT_FAULT's crash points and :stepS
static int g_fault_slow_count = 0; // files ZT_FAULT=slow delayed (said on stdout; the tests count them)

// ZT_FAULT=kind:SUBSTR[:stepS] with SUBSTR in path (and S the step being saved): 1, with errno set
// as that failure would (and the delay of "slow"), else 0.
static int ckpt_fault(const char* kind, const char* path) {
    const char* f = getenv("ZT_FAULT");
    size_t k = strlen(kind);
    if (!f || strncmp(f, kind, k) || f[k] != ':') return 0;
    const char* sub = f + k + 1;
    char want[256];
    snprintf(want, sizeof(want), "%.*s", (int)strcspn(sub, ":"), sub);
    const char* st = strstr(sub, ":step");
    if (!strstr(path, want) || (st && atoi(st + 5) != g_ckpt_step)) return 0;
    if (!strncmp(kind, "enospc", 6)) errno = ENOSPC;
    if (!strncmp(kind, "eio", 3)) errno = EIO;
    if (!strcmp(kind, "slow")) {
        g_fault_slow_count++;
        printf("ZT_FAULT: creating %s 3 s late (slow storage)\n", path);
        sleep(3);
    }
    return 1;
}

// ---- Files: every write is whole, every read is whole, a file is published by rename.

static int g_fault_write_fd = -1;   // ZT_FAULT=enospc-write: the descriptor whose next write fails

// Create the temporary file `tmp` for `path` (flags: O_WRONLY or O_RDWR). -1 with errno on failure.
static int ckpt_create(const char* path, const char* tmp, int flags) {
    ckpt_fault("slow", path); // (sleeps when it applies)
    if (ckpt_fault("enospc", path)) return -1;
    int fd = open(tmp, flags | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0 && ckpt_fault("enospc-write", path)) g_fault_write_fd = fd;
    return fd;
}

// fsync, close, rename tmp to path, fsync the directory. Returns 0 on success; on failure tmp is
// removed and errno says why. fd is closed either way.
static int file_commit(int fd, const char* tmp, const char* path) {
    if (fd == g_fault_write_fd) g_fault_write_fd = -1;
    if (g_ckpt_step >= 0) ckpt_crash_point("before-fsync", g_rank, g_ckpt_step);
    if (ckpt_fault("eio-fsync", path) || fsync(fd) != 0) { int e = errno; close(fd); unlink(tmp); errno = e; return -1; }
    if (close(fd) != 0) { int e = errno; unlink(tmp); errno = e; return -1; }
    if (g_ckpt_step >= 0) ckpt_crash_point("before-rename", g_rank, g_ckpt_step);
    if (ckpt_fault("eio-rename", path) || rename(tmp, path) != 0) { int e = errno; unlink(tmp); errno = e; return -1; }
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    char* slash = strrchr(dir, '/');
    if (slash) *slash = 0; else snprintf(dir, sizeof(dir), ".");
    int dfd = open(dir, O_RDONLY);
    if (dfd >= 0) { fsync(dfd); close(dfd); }
    return 0;
}

// A write that failed before file_commit: close and remove the temporary file, keeping errno.
static void file_abandon(int fd, const char* tmp) {
    int e = errno;
    if (fd == g_fault_write_fd) g_fault_write_fd = -1;
    if (fd >= 0) { close(fd); unlink(tmp); }
    errno = e;
}

static void fsync_dir(const char* dir) {
    int dfd = open(dir, O_RDONLY);
    if (dfd >= 0) { fsync(dfd); close(dfd); }
}

static int pwrite_all(int fd, const void* buf, size_t n, off_t off) {
    if (fd == g_fault_write_fd) { g_fault_write_fd = -1; errno = ENOSPC; return -1; } // ZT_FAULT=enospc-write
    const char* p = (const char*)buf;
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, off);
        if (w <= 0) { if (w < 0 && errno == EINTR) continue; if (w == 0) errno = ENOSPC; return -1; }
        p += w; n -= (size_t)w; off += w;
    }
    return 0;
}

static int pread_all(int fd, void* buf, size_t n, off_t off) {
    char* p = (char*)buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, off);
        if (r <= 0) { if (r < 0 && errno == EINTR) continue; if (r == 0) errno = EIO; return -1; }
        p += r; n -= (size_t)r; off += r;
    }
    return 0;
}

// CRC32C and size of a whole file (-1 on error).
static int file_crc32c(const char* path, uint32_t* crc, int64_t* bytes) {
    int fd = zt_open_read(path);
    if (fd < 0) return -1;
    char* buf = (char*)malloc(CKPT_CHUNK);
    uint32_t c = 0;
    int64_t total = 0;
    for (;;) {
        ssize_t r = read(fd, buf, CKPT_CHUNK);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { free(buf); close(fd); return -1; }
        if (r == 0) break;
        c = crc32c_update(c, buf, (size_t)r);
        total += r;
    }
    free(buf);
    close(fd);
    *crc = c; *bytes = total;
    return 0;
}

// [LoRA] The base's identity: a checkpoint of a LoRA run holds the adapters' state, not the base
// again, so it records which base it was trained on and a resume checks it (run_record.h's
// "lora-base"). For a file (llm.c's model): "BYTES CRC32C"; for a Hugging Face directory: its
// config.json and *.safetensors in name order, "BYTES CRC32C" over their sizes and CRCs; for a
// descriptor (-e tiny: initialised from -seed, no file) "0 00000000" (the seed and shape are the
// run's recorded flags). Reads the whole base once (CRC32C at memory speed: seconds for GBs).
// Returns 0, or -1 with errno when a file cannot be read.
static int cmp_cstr(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }
static int ckpt_base_file(const char* name) { // the files of a Hugging Face directory the identity covers
    size_t k = strlen(name);
    return !strcmp(name, "config.json") || (k > 12 && !strcmp(name + k - 12, ".safetensors"));
}
// The bytes ckpt_base_identity will read (sizes only, no read): what the wait for it is sized on.
static int64_t ckpt_base_bytes(const char* model) {
    struct stat st;
    if (stat(model, &st) != 0) return 0; // a descriptor
    if (!S_ISDIR(st.st_mode)) return (int64_t)st.st_size;
    DIR* d = opendir(model);
    if (!d) return 0; // (ckpt_base_identity reports the error)
    int64_t bytes = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", model, e->d_name);
        if (ckpt_base_file(e->d_name) && stat(path, &st) == 0) bytes += (int64_t)st.st_size;
    }
    closedir(d);
    return bytes;
}
static int ckpt_base_identity(const char* model, char* out, size_t cap) {
    struct stat st;
    uint32_t crc = 0;
    int64_t bytes = 0;
    if (stat(model, &st) != 0) { snprintf(out, cap, "0 00000000"); return 0; } // a descriptor
    if (!S_ISDIR(st.st_mode)) {
        if (file_crc32c(model, &crc, &bytes) != 0) return -1;
        snprintf(out, cap, "%lld %08x", (long long)bytes, crc);
        return 0;
    }
    DIR* d = opendir(model);
    if (!d) return -1;
    char** names = NULL;
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        if (!ckpt_base_file(e->d_name)) continue;
        names = (char**)realloc(names, sizeof(char*) * (n + 1));
        if (!names || !(names[n++] = strdup(e->d_name))) die(1, "out of host memory (the file names of %s)", model);
    }
    closedir(d);
    qsort(names, n, sizeof(char*), cmp_cstr);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX];
        uint32_t c;
        int64_t b;
        snprintf(path, sizeof(path), "%s/%s", model, names[i]);
        if (rc == 0 && file_crc32c(path, &c, &b) != 0) rc = -1;
        if (rc == 0) { crc = crc32c_update(crc, names[i], strlen(names[i])); crc = crc32c_update(crc, &c, 4); bytes += b; }
        free(names[i]);
    }
    free(names);
    snprintf(out, cap, "%lld %08x", (long long)bytes, crc);
    return rc;
}

// A small text file (markers) written atomically. Returns 0 on success.
static int write_text_file(const char* path, const char* text) {
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    int fd = ckpt_create(path, tmp, O_WRONLY);
    if (fd < 0) return -1;
    if (pwrite_all(fd, text, strlen(text), 0) != 0) { file_abandon(fd, tmp); return -1; }
    return file_commit(fd, tmp, path);
}

// ---- The model in llm.c's format.

// Block b's values as FP32 in host[0, P[b]) on rank 0 (the block layout, padding included):
// the parameters (master = 0; [ZeRO-3] a gather) or the FP32 master weights (master = 1: each
// rank's shard broadcast in turn [ZeRO-1/2/3]; every rank has them all under ZeRO-0). Every rank
// must call it; host needs P[b] floats on every rank.
static void block_values(Zero* z, int b, int master, float* host) {
    int64_t P = z->lay.P[b];
    if (!master) {
        floatX* p = zero_params(z, b); // [ZeRO-3] a gather every rank takes part in
        if (z->r == 0) {
            floatX* tmp = (floatX*)malloc(P * sizeof(floatX));
            dev_to_host(tmp, p, P * sizeof(floatX));
            for (int64_t i = 0; i < P; i++) host[i] = ld(tmp[i]);
            free(tmp);
        }
        zero_release(z, b);
    } else if (z->stage == 0) {
        if (z->r == 0) zero_state_get(z, 0, zero_opt_off(z, b), host, P);
    } else { // [ZeRO-1/2/3] rank q holds [q*S, (q+1)*S) of the block ([HSDP] q < lay.R: group 0)
        int64_t S = z->lay.S[b];
        for (int q = 0; q < z->lay.R; q++) {
            if (q == z->r) zero_state_get(z, 0, zero_opt_off(z, b), host + q * S, S);
            if (q != 0) comm_broadcast(z->comm, host + q * S, S * (int64_t)sizeof(float), q);
        }
    }
}

// The model in llm.c's format: version 5 (BF16) from the parameters, or with fp32 = 1 version 3
// from the FP32 master weights (in the FP32 build the two are the same values). Every rank must
// call it (blocks are gathered); rank 0 writes. Returns 0 on success (other ranks return 0).
// crc/bytes (may be NULL): the written file's CRC32C and size, read back before the rename.
static int write_model_file(Zero* z, const GPTConfig* c, const char* path, int fp32, uint32_t* crc, int64_t* bytes) {
    int fd = -1, ok = 1, r0 = z->r == 0, werr = 0; // werr: errno of the first failure
    size_t es = fp32 ? 4 : 2;
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    if (r0) {
        fd = ckpt_create(path, tmp, O_RDWR);
        if (fd < 0) { werr = errno; fprintf(stderr, "error: cannot create %s: %s\n", tmp, strerror(errno)); ok = 0; }
        int header[256] = {0};
        header[0] = MODEL_MAGIC;
        header[1] = fp32 ? 3 : 5;
        header[2] = c->maxT; header[3] = c->V; header[4] = c->L; header[5] = c->NH; header[6] = c->C; header[7] = c->Vp;
        if (ok && pwrite_all(fd, header, sizeof(header), 0) != 0) { werr = errno; ok = 0; }
    }
    size_t maxP = 0;
    for (int b = 0; b < z->lay.nblocks; b++) maxP = (size_t)z->lay.P[b] > maxP ? (size_t)z->lay.P[b] : maxP;
    float* host = (float*)malloc(maxP * sizeof(float));
    bf16_t* half = r0 && !fp32 ? (bf16_t*)malloc(maxP * sizeof(bf16_t)) : NULL;
    for (int b = 0; b < z->lay.nblocks; b++) {
        block_values(z, b, fp32, host);
        if (r0 && ok) {
            if (half) for (int64_t i = 0; i < z->lay.P[b]; i++) half[i] = f32_to_bf16(host[i]);
            const char* src = half ? (const char*)half : (const char*)host;
            for (int k = 0; k < z->lay.ntensors[b] && ok; k++) {
                const BlockTensor* t = &z->lay.tensors[b][k];
                if (pwrite_all(fd, src + t->off * es, t->len * es, 1024 + t->logical * (off_t)es) != 0) { werr = errno; ok = 0; }
            }
        }
    }
    free(host);
    free(half);
    if (!r0) return 0;
    if (ok && (crc || bytes)) { // the file as written, read back in order (from the page cache)
        uint32_t cs = 0;
        int64_t n = 0;
        if (file_crc32c(tmp, &cs, &n) != 0) { werr = errno; ok = 0; }
        if (crc) *crc = cs;
        if (bytes) *bytes = n;
    }
    if (!ok) file_abandon(fd, tmp);
    else if (file_commit(fd, tmp, path) != 0) werr = errno, ok = 0; // (fd closed, tmp removed)
    if (!ok) {
        fprintf(stderr, "error: writing %s failed: %s. HINT: check free disk space and permissions\n", path, strerror(werr));
        return -1;
    }
    return 0;
}

// Reading an llm.c model file: check its header (exit 2 with the reason on anything wrong).
typedef struct { int fd; int version; size_t esize; const char* path; } ModelFile;

static void model_file_open(ModelFile* mf, const char* path, GPTConfig* c) {
    mf->path = path;
    mf->fd = zt_open_read(path);
    if (mf->fd < 0) die_user("-e %s: cannot open: %s", path, zt_strerror(errno));
    int h[256];
    if (pread_all(mf->fd, h, sizeof(h), 0) != 0) die_user("-e %s: truncated header (an llm.c model file starts with 1024 bytes)", path);
    if (h[0] != MODEL_MAGIC) die_user("-e %s: wrong magic %d (expected %d: an llm.c GPT-2 model file)", path, h[0], MODEL_MAGIC);
    if (h[1] != 3 && h[1] != 5) die_user("-e %s: unsupported version %d (expected 3: FP32 or 5: BF16)", path, h[1]);
    memset(c, 0, sizeof(*c)); // an llm.c file is a GPT-2 (FAMILY_GPT2)
    c->maxT = h[2]; c->V = h[3]; c->L = h[4]; c->NH = h[5]; c->C = h[6]; c->Vp = h[7];
    if (c->maxT < 1 || c->V < 1 || c->L < 1 || c->NH < 1 || c->C < 1 || c->Vp < c->V)
        die_user("-e %s: impossible sizes in the header (maxT %d, V %d, L %d, NH %d, C %d, Vp %d)", path, c->maxT, c->V, c->L, c->NH, c->C, c->Vp);
    mf->version = h[1];
    mf->esize = h[1] == 3 ? 4 : 2;
    struct stat st;
    if (fstat(mf->fd, &st) != 0) die_user("-e %s: cannot stat: %s", path, strerror(errno));
    // the parameter count in floating point first: the header's sizes are data, and C^2 * L can
    // overflow even 64 bits
    double approx = ((double)c->Vp + c->maxT) * c->C + (double)c->L * (12.0 * c->C * c->C + 13.0 * c->C) + 2.0 * c->C;
    if (approx * (double)mf->esize > (double)st.st_size + 1024.0)
        die_user("-e %s: file is %lld bytes but its header describes about %.3g parameters (maxT %d, V %d, L %d, NH %d, C %d, Vp %d): truncated or not an llm.c model",
                 path, (long long)st.st_size, approx, c->maxT, c->V, c->L, c->NH, c->C, c->Vp);
    ModelDesc d;
    model_describe(&d, c);
    off_t want = 1024 + (off_t)d.num_params * (off_t)mf->esize;
    if (st.st_size != want)
        die_user("-e %s: file is %lld bytes but its header describes %lld (%lld parameters of %d bytes): truncated or not an llm.c model",
                 path, (long long)st.st_size, (long long)want, (long long)d.num_params, (int)mf->esize);
}

// LogicalFill from a model file: FP32 (v3) or BF16 (v5) values, widened to FP32.
static void model_file_fill(void* ctx, float* dst, int64_t logical, int64_t len) {
    const ModelFile* mf = (const ModelFile*)ctx;
    void* buf = malloc(len * mf->esize);
    if (pread_all(mf->fd, buf, len * mf->esize, 1024 + logical * (off_t)mf->esize) != 0)
        die(1, "-e %s: read failed: %s", mf->path, strerror(errno));
    for (int64_t i = 0; i < len; i++)
        dst[i] = mf->esize == 4 ? ((float*)buf)[i] : bf16_to_f32(((bf16_t*)buf)[i]);
    free(buf);
}

// ---- The state files.

// The rank's shard pieces of every block (what its state file holds), and where each piece's
// values are in the optimizer arrays.
typedef struct { int64_t logical, len, opt_index; } StatePiece;

static int state_pieces(const Zero* z, StatePiece* out) {
    int n = 0;
    Piece pc[MAX_BLOCK_TENSORS];
    for (int b = 0; b < z->lay.nblocks; b++) {
        if (z->lay.frozen[b]) continue; // [LoRA] a frozen block has no master, m or v
        int64_t lo = z->lay.r * z->lay.S[b];
        int k = layout_pieces(&z->lay, b, lo, lo + z->lay.S[b], pc);
        for (int i = 0; i < k; i++) {
            out[n].logical = pc[i].logical;
            out[n].len = pc[i].len;
            out[n].opt_index = zero_opt_off(z, b) + (lo - zero_opt_lo(z, b)) + pc[i].local;
            n++;
        }
    }
    return n;
}

// The bytes of a checkpoint's files from the layout alone (the planner counts the checkpoints a run
// keeps with them; test/test_offload.h compares them with the files a run writes): rank q's state
// file as write_state_file lays it out (header, piece table, chunk checksums, payload: master, m, v
// of the logical elements of q's shard of every block; the same at every stage), and the model file
// as write_model_file does (llm.c's 1 KiB header, every logical parameter in floatX). The markers
// (DONE, LATEST: a few hundred bytes) are not counted.
static int64_t ckpt_state_file_bytes(const BlockLayout* lay, int q) {
    int64_t n = 0, total = 0;
    Piece pc[MAX_BLOCK_TENSORS];
    for (int b = 0; b < lay->nblocks; b++) {
        if (lay->frozen[b]) continue; // [LoRA] (no optimizer state)
        int k = layout_pieces(lay, b, q * lay->S[b], (q + 1) * lay->S[b], pc);
        for (int i = 0; i < k; i++) total += pc[i].len;
        n += k;
    }
    int64_t payload = 12 * total, nchunks = (payload + CKPT_CHUNK - 1) / CKPT_CHUNK;
    return 8 * STATE_HEADER_INTS + 16 * n + 4 * nchunks + payload;
}
static int64_t ckpt_model_file_bytes(const BlockLayout* lay) { return 1024 + lay->logical_total * (int64_t)sizeof(floatX); }

// The payload streamed through CRC32C, one chunk at a time (chunks span pieces and arrays).
typedef struct {
    int fd;
    off_t off;              // where the next payload byte goes
    uint32_t* crcs;         // (nchunks)
    int64_t chunk, fill;    // current chunk, bytes in it so far
    uint32_t crc;
} PayloadWriter;

static int payload_put(PayloadWriter* w, const void* buf, size_t n) {
    if (pwrite_all(w->fd, buf, n, w->off) != 0) return -1;
    w->off += n;
    const char* p = (const char*)buf;
    while (n > 0) {
        size_t take = (size_t)(CKPT_CHUNK - w->fill) < n ? (size_t)(CKPT_CHUNK - w->fill) : n;
        w->crc = crc32c_update(w->crc, p, take);
        w->fill += take; p += take; n -= take;
        if (w->fill == CKPT_CHUNK) { w->crcs[w->chunk++] = w->crc; w->crc = 0; w->fill = 0; }
    }
    return 0;
}

// This rank's state file. Returns 0 on success.
static int write_state_file(Zero* z, const GPTConfig* c, const CkptMeta* meta, uint64_t nonce, const char* path) {
    StatePiece* pcs = (StatePiece*)malloc(sizeof(StatePiece) * MAX_BLOCK_TENSORS * z->lay.nblocks);
    int n = state_pieces(z, pcs);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += pcs[i].len;
    int64_t payload = 12 * total, nchunks = (payload + CKPT_CHUNK - 1) / CKPT_CHUNK;
    int64_t h[STATE_HEADER_INTS] = {0};
    h[STATE_H_MAGIC] = STATE_MAGIC; h[STATE_H_VERSION] = STATE_VERSION; h[STATE_H_R] = z->lay.R; h[STATE_H_RANK] = z->lay.r; // (its shard)
    h[STATE_H_STAGE] = z->stage; h[STATE_H_STEP] = meta->step; h[STATE_H_ADAM_T] = meta->adam_t; h[STATE_H_SEED] = meta->seed;
    h[STATE_H_NPIECES] = n; h[STATE_H_LOGICAL] = z->lay.logical_total;
    h[STATE_H_L] = c->L; h[STATE_H_C] = c->C; h[STATE_H_NH] = c->NH; h[STATE_H_V] = c->V; h[STATE_H_VP] = c->Vp; h[STATE_H_MAXT] = c->maxT;
    state_family_fields(c, h);
    h[STATE_H_LORA_R] = c->lora_r; h[STATE_H_LORA_MASK] = c->lora_mask;
    h[STATE_H_STEP_TOKENS] = meta->step_tokens; h[STATE_H_TRAIN_TOKENS] = meta->train_tokens;
    h[STATE_H_NONCE] = (int64_t)nonce; h[STATE_H_CHUNK] = CKPT_CHUNK; h[STATE_H_NCHUNKS] = nchunks;
    int64_t* table = (int64_t*)malloc(sizeof(int64_t) * 2 * (n > 0 ? n : 1));
    for (int i = 0; i < n; i++) { table[2 * i] = pcs[i].logical; table[2 * i + 1] = pcs[i].len; }
    uint32_t* crcs = (uint32_t*)calloc(nchunks > 0 ? nchunks : 1, sizeof(uint32_t));
    off_t table_off = sizeof(h), crc_off = table_off + 16 * (off_t)n, data_off = crc_off + 4 * (off_t)nchunks;
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    int fd = ckpt_create(path, tmp, O_WRONLY);
    int werr = fd >= 0 ? 0 : errno; // errno of the first failure
    ckpt_crash_point("before-write", z->r, meta->step);
    int ok = fd >= 0;
    PayloadWriter w = {fd, data_off, crcs, 0, 0, 0};
    int64_t maxlen = 1;
    for (int i = 0; i < n; i++) maxlen = pcs[i].len > maxlen ? pcs[i].len : maxlen;
    float* host = (float*)malloc(sizeof(float) * maxlen); // one piece at a time
    for (int a = 0; a < 3 && ok; a++)
        for (int i = 0; i < n && ok; i++) {
            zero_state_get(z, a, pcs[i].opt_index, host, pcs[i].len);
            ok = payload_put(&w, host, sizeof(float) * pcs[i].len) == 0;
            if (!ok) werr = errno;
        }
    if (ok && w.fill > 0) crcs[w.chunk++] = w.crc;
    uint32_t meta_crc = crc32c_update(0, h, sizeof(h)); // with STATE_H_META_CRC = 0
    meta_crc = crc32c_update(meta_crc, table, 16 * (size_t)n);
    meta_crc = crc32c_update(meta_crc, crcs, 4 * (size_t)nchunks);
    h[STATE_H_META_CRC] = meta_crc;
    if (ok) ok = pwrite_all(fd, h, sizeof(h), 0) == 0 && pwrite_all(fd, table, 16 * (size_t)n, table_off) == 0 &&
                 pwrite_all(fd, crcs, 4 * (size_t)nchunks, crc_off) == 0;
    if (!ok && !werr) werr = errno;
    free(host); free(pcs); free(table); free(crcs);
    if (!ok) file_abandon(fd, tmp);
    else if (file_commit(fd, tmp, path) != 0) werr = errno, ok = 0; // (fd closed, tmp removed)
    if (!ok) {
        if (z->R > 1) fprintf(stderr, "[rank %d] ", z->r);
        fprintf(stderr, "error: writing %s failed: %s. HINT: check free disk space and permissions\n", path, strerror(werr));
        return -1;
    }
    return 0;
}

// ---- Markers: DONE_%08d and LATEST, small text files of "key value" lines.
// The run's record: the flags that define the run (and the data's shard-list hashes), one
// "run KEY VALUE" line each after the fixed lines, VALUE escaped (\\ and \n) so that one line holds
// it. The trainer decides what goes in (its flag table's RUN column); checkpoint.h only keeps the
// text. Readers that predate it stop at the fixed lines (and "tune"): compatible both ways.
#define CKPT_RUN_MAX 32768 // bytes of "KEY VALUE\n" lines at most
typedef struct {
    int step;
    uint64_t nonce;
    int ranks;
    int64_t model_bytes;    // -1: no model file in this checkpoint
    uint32_t model_crc;
    char tune[128];         // -tune's choice as flags, "" none (an optional line)
    char run[CKPT_RUN_MAX]; // the run's record, "KEY VALUE\n" lines (escaped values); "" none (an older checkpoint)
} Marker;

// Append "key value\n" to a run record (value escaped). -1 when it does not fit.
static inline int ckpt_run_add(char* run, size_t cap, const char* key, const char* value) {
    size_t n = strlen(run);
    int k = snprintf(run + n, cap > n ? cap - n : 0, "%s ", key);
    if (k < 0 || n + k >= cap) { run[n] = 0; return -1; }
    n += k;
    for (const char* v = value; *v; v++) {
        const char* e = *v == '\\' ? "\\\\" : *v == '\n' ? "\\n" : NULL;
        size_t w = e ? 2 : 1;
        if (n + w + 2 > cap) { run[0] = 0; return -1; }
        if (e) memcpy(run + n, e, 2); else run[n] = *v;
        n += w;
    }
    run[n++] = '\n';
    run[n] = 0;
    return 0;
}

// The value of `key` in a run record, unescaped into out. 1 when found, 0 when not.
static inline int ckpt_run_find(const char* run, const char* key, char* out, size_t cap) {
    size_t kl = strlen(key);
    for (const char* line = run; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, key, kl) || line[kl] != ' ') continue;
        size_t n = 0;
        for (const char* v = line + kl + 1; *v && *v != '\n' && n + 1 < cap; v++) {
            if (*v == '\\' && (v[1] == '\\' || v[1] == 'n')) { out[n++] = v[1] == 'n' ? '\n' : '\\'; v++; }
            else out[n++] = *v;
        }
        out[n] = 0;
        return 1;
    }
    return 0;
}

static int marker_write(const char* path, const Marker* mk) {
    size_t cap = 1024 + 2 * CKPT_RUN_MAX;
    char* text = (char*)malloc(cap);
    if (!text) { errno = ENOMEM; return -1; }
    int n = snprintf(text, cap, "zerotrain checkpoint\nstep %d\nnonce %016llx\nranks %d\nmodel_bytes %lld\nmodel_crc32c %08x\n",
                     mk->step, (unsigned long long)mk->nonce, mk->ranks, (long long)mk->model_bytes, mk->model_crc);
    if (mk->tune[0]) n += snprintf(text + n, cap - n, "tune %s\n", mk->tune);
    for (const char* line = mk->run; *line;) { // each record line as "run KEY VALUE"
        size_t len = strcspn(line, "\n");
        n += snprintf(text + n, cap - n, "run %.*s\n", (int)len, line);
        line += len + (line[len] == '\n');
    }
    int rc = write_text_file(path, text);
    free(text);
    return rc;
}

// 0 if the file is a complete marker.
static int marker_read(const char* path, Marker* mk) {
    memset(mk, 0, sizeof(*mk));
    FILE* f = fopen(path, "r");
    if (!f) return -1;
    size_t cap = 1024 + 2 * CKPT_RUN_MAX;
    char* text = (char*)malloc(cap);
    if (!text) { fclose(f); return -1; }
    size_t n = fread(text, 1, cap - 1, f);
    fclose(f);
    text[n] = 0;
    unsigned long long nonce = 0;
    long long bytes = 0;
    unsigned crc = 0;
    if (sscanf(text, "zerotrain checkpoint\nstep %d\nnonce %llx\nranks %d\nmodel_bytes %lld\nmodel_crc32c %x\n",
               &mk->step, &nonce, &mk->ranks, &bytes, &crc) != 5) {
        free(text);
        return -1;
    }
    mk->nonce = nonce; mk->model_bytes = bytes; mk->model_crc = crc;
    const char* t = strstr(text, "\ntune "); // optional: the -tune choice (markers without it: not tuned)
    if (t) snprintf(mk->tune, sizeof(mk->tune), "%.*s", (int)strcspn(t + 6, "\n"), t + 6);
    size_t rn = 0; // optional: the run's record
    for (const char* r = strstr(text, "\nrun "); r; r = strstr(r + 1, "\nrun ")) {
        size_t len = strcspn(r + 5, "\n");
        if (rn + len + 2 > sizeof(mk->run)) break;
        memcpy(mk->run + rn, r + 5, len);
        rn += len;
        mk->run[rn++] = '\n';
        mk->run[rn] = 0;
    }
    free(text);
    return mk->step >= 0 && mk->ranks >= 1 && mk->ranks <= ZT_MAX_RANKS ? 0 : -1;
}

// The step of a checkpoint file's name (model_, state_, DONE_), or -1.
static int ckpt_file_step(const char* name) {
    int s, r, len = 0;
    size_t n = strlen(name);
    if (sscanf(name, "DONE_%8d%n", &s, &len) == 1 && len == 13 && n == 13) return s;
    if (sscanf(name, "model_%8d.bin%n", &s, &len) == 1 && len == 18 && n == 18) return s;
    if (sscanf(name, "state_%8d_%5d.bin%n", &s, &r, &len) == 2 && len == 24 && n == 24) return s;
    if (sscanf(name, "adapter_%8d%n", &s, &len) == 1 && len == 16 && n == 16) return s; // [LoRA] a directory
    return -1;
}

// Remove a checkpoint's file, or its adapter directory with what is in it (one level: PEFT's two
// files and an interrupted write's temporary ones). 0 on success.
static int ckpt_remove(const char* path) {
    if (unlink(path) == 0) return 0;
    if (errno != EISDIR && errno != EPERM) return -1;
    DIR* d = opendir(path);
    if (!d) return -1;
    struct dirent* e;
    char sub[PATH_MAX + 256];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
            unlink(sub);
        }
    closedir(d);
    return rmdir(path);
}

// Steps with a DONE marker in dir, ascending (malloc'd, no cap). Returns the count.
static int list_done_steps(const char* dir, int** out) {
    *out = NULL;
    DIR* d = opendir(dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    struct dirent* e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "DONE_", 5) || ckpt_file_step(e->d_name) < 0) continue;
        if (n == cap) { cap = cap ? 2 * cap : 64; *out = (int*)realloc(*out, sizeof(int) * cap); }
        (*out)[n++] = ckpt_file_step(e->d_name);
    }
    closedir(d);
    for (int i = 1; i < n; i++) // insertion sort: the directory order is arbitrary, the list short
        for (int j = i; j > 0 && (*out)[j - 1] > (*out)[j]; j--) { int t = (*out)[j]; (*out)[j] = (*out)[j - 1]; (*out)[j - 1] = t; }
    return n;
}

// Remove every file of checkpoint `step` (DONE marker first, so a half-deleted one is never "complete").
static void remove_checkpoint(const char* dir, int step) {
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/DONE_%08d", dir, step);
    unlink(path);
    fsync_dir(dir);
    DIR* d = opendir(dir);
    if (!d) return;
    struct dirent* e;
    while ((e = readdir(d)))
        if (ckpt_file_step(e->d_name) == step) {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            ckpt_remove(path);
        }
    closedir(d);
}

// The same file (device and inode), for the path a run must not move or remove (its -e model).
static int same_file(const char* a, const char* b) {
    struct stat x, y;
    return a && b && a[0] && b[0] && stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

// A new folder dir/set_aside_<after>_<nonce>/ into sub — never one that exists: a second roll-back
// to the same step has the same name and nonce, and its renames would replace the files the first
// one set aside, so it gets dir/set_aside_<after>_<nonce>_2/ (and so on). Dies when none can be made.
static void ckpt_aside_dir(const char* dir, int after, uint64_t nonce, char* sub, size_t cap) {
    for (int k = 1;; k++) {
        int n = snprintf(sub, cap, "%s/set_aside_%08d_%016llx", dir, after < 0 ? 0 : after, (unsigned long long)nonce);
        if (k > 1 && n > 0 && (size_t)n < cap) snprintf(sub + n, cap - (size_t)n, "_%d", k);
        if (mkdir(sub, 0755) == 0) return;
        if (errno != EEXIST || k == 1000) die(1, "cannot create %s: %s", sub, strerror(errno));
    }
}

// Move every checkpoint file of a step above `after` (and LATEST when after < 0) into
// dir/set_aside_<after>_<nonce>/, except `keep` (this run's -e file, when it lies in dir: it is
// said and left where it is, and hard-linked into the folder beside the DONE set aside with it, so
// the set-aside checkpoint stays whole even when this run later saves a file of that name). Prints what it moved, with `why`. Returns the files moved; sub gets
// the folder's path when it moved any ("" otherwise).
static int ckpt_set_aside(const char* dir, int after, uint64_t nonce, const char* why, const char* keep, char* sub, size_t cap) {
    char from[PATH_MAX], to[PATH_MAX + 256];
    sub[0] = 0;
    DIR* d = opendir(dir);
    if (!d) return 0;
    int moved = 0, nsteps = 0, steps[8], kept = 0;
    struct dirent* e;
    while ((e = readdir(d))) {
        int s = ckpt_file_step(e->d_name);
        int latest = after < 0 && !strcmp(e->d_name, "LATEST");
        if (s <= after && !latest) continue;
        snprintf(from, sizeof(from), "%s/%s", dir, e->d_name);
        if (same_file(from, keep)) { kept = 1; continue; }
        if (!moved) ckpt_aside_dir(dir, after, nonce, sub, cap);
        snprintf(to, sizeof(to), "%s/%s", sub, e->d_name);
        if (!strncmp(e->d_name, "DONE_", 5) && rename(from, to) != 0) die(1, "cannot move %s to %s: %s", from, sub, strerror(errno));
        if (!strncmp(e->d_name, "DONE_", 5) && nsteps < 8) steps[nsteps++] = s;
        moved++;
    }
    closedir(d);
    if (kept) printf("checkpoints: %s is this run's -e model: left in place\n", keep);
    if (!moved) return 0;
    fsync_dir(dir); // markers first: a crash from here on leaves no marker for the moved steps
    d = opendir(dir);
    while (d && (e = readdir(d))) {
        int s = ckpt_file_step(e->d_name);
        if ((s < 0 || s <= after) && !(after < 0 && !strcmp(e->d_name, "LATEST"))) continue;
        snprintf(from, sizeof(from), "%s/%s", dir, e->d_name);
        snprintf(to, sizeof(to), "%s/%s", sub, e->d_name);
        if (same_file(from, keep)) {
            if (link(from, to) != 0) printf("checkpoints: could not link %s into %s (%s): it stays only where it is\n", from, sub, strerror(errno));
            continue;
        }
        if (rename(from, to) != 0) die(1, "cannot move %s to %s: %s", from, sub, strerror(errno));
    }
    if (d) closedir(d);
    fsync_dir(dir);
    fsync_dir(sub);
    printf("checkpoints: %s: moved %d file(s) of later steps (complete:", why, moved);
    for (int i = 0; i < nsteps; i++) printf(" %d", steps[i]);
    printf("%s%s) to %s (nothing deleted; remove it when it is no longer needed)\n", nsteps == 8 ? " ..." : "", nsteps ? "" : " none", sub);
    return moved;
}

// Rank 0, when the run commits to the directory (see ckpt_commit_resume): remove what a crash left
// behind — temporary files of checkpoint writes (NAME.tmp.PID) and files of steps that have no
// DONE marker (a save that never completed: nothing vouches for them, no resume can use them),
// except `keep` (this run's -e file). Says what it removed.
static void ckpt_clean_leftovers(const char* dir, const char* keep) {
    DIR* d = opendir(dir);
    if (!d) return;
    int* done;
    int ndone = list_done_steps(dir, &done), tmps = 0, orphans = 0;
    char path[PATH_MAX];
    struct dirent* e;
    while ((e = readdir(d))) {
        const char* name = e->d_name;
        const char* t = strstr(name, ".tmp.");
        char base[256];
        snprintf(base, sizeof(base), "%.*s", t ? (int)(t - name) : 0, name);
        int is_tmp = t && (ckpt_file_step(base) >= 0 || !strcmp(base, "LATEST"));
        int s = ckpt_file_step(name), orphan = s >= 0;
        for (int i = 0; i < ndone && orphan; i++) orphan = done[i] != s;
        if (!is_tmp && !orphan) continue;
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        if (same_file(path, keep)) { printf("checkpoints: %s has no DONE marker but is this run's -e model: kept\n", path); continue; }
        if (ckpt_remove(path) == 0) { tmps += is_tmp; orphans += orphan; }
    }
    closedir(d);
    free(done);
    if (tmps || orphans)
        printf("checkpoints: removed %d temporary file(s) and %d file(s) of incomplete checkpoints (no DONE marker) from %s\n", tmps, orphans, dir);
}

// Rank 0: log.jsonl keeps its records up to `step` (and the records without a step), so the steps
// trained again are not logged twice. The records it drops are appended to aside/log.jsonl first
// (fsynced), then the log is rewritten atomically: a crash between leaves a record in both places,
// never in neither. Dies on a write error (nothing changed then but the copy).
static void ckpt_log_truncate(const char* path, int step, const char* aside) {
    FILE* in = fopen(path, "r");
    if (!in) return;
    char tmp[PATH_MAX + 32], moved[PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    snprintf(moved, sizeof(moved), "%s/log.jsonl", aside);
    FILE* out = fopen(tmp, "w");
    if (!out) die(1, "cannot write %s: %s", tmp, strerror(errno));
    FILE* drop = NULL;
    size_t cap = 1 << 16;
    char* line = (char*)malloc(cap);
    int dropped = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, in)) > 0) {
        int s;
        int later = sscanf(line, "{\"step\": %d", &s) == 1 && s > step;
        if (later && !drop && !(drop = fopen(moved, "a"))) die(1, "cannot write %s: %s", moved, strerror(errno));
        if (fwrite(line, 1, (size_t)n, later ? drop : out) != (size_t)n) die(1, "writing %s failed: %s", later ? moved : tmp, strerror(errno));
        dropped += later;
    }
    free(line);
    fclose(in);
    if (drop && (fflush(drop) != 0 || fsync(fileno(drop)) != 0 || fclose(drop) != 0)) die(1, "writing %s failed: %s. HINT: check free disk space", moved, strerror(errno));
    if (fflush(out) != 0 || fsync(fileno(out)) != 0 || fclose(out) != 0 || rename(tmp, path) != 0)
        die(1, "rewriting %s failed: %s. HINT: check free disk space", path, strerror(errno));
    if (dropped) printf("resume: %d record(s) of log.jsonl after step %d moved to %s (those steps are trained again)\n", dropped, step, moved);
}

// The set_aside_* folders in dir and their bytes (they are never removed by the trainer: a
// roll-back's abandoned branch or an older run may still be wanted). Said at start-up.
static void ckpt_note_set_asides(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return;
    int n = 0;
    double bytes = 0.0;
    struct dirent* e;
    char path[PATH_MAX * 2];
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "set_aside_", 10)) continue;
        n++;
        char sub[PATH_MAX];
        snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
        DIR* s = opendir(sub);
        struct dirent* f;
        while (s && (f = readdir(s))) {
            struct stat st;
            snprintf(path, sizeof(path), "%s/%s", sub, f->d_name);
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) bytes += (double)st.st_size;
        }
        if (s) closedir(s);
    }
    closedir(d);
    if (n) printf("note: %s holds %d set_aside_* folder(s), %.1f MiB (the trainer never deletes them: rm -r them when they are no longer needed)\n",
                  dir, n, bytes / 1048576.0);
}

// 64 random bits (never 0), drawn by the caller alone.
static uint64_t ckpt_nonce_local(void) {
    uint64_t nonce = 0;
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd < 0 || pread_all(fd, &nonce, sizeof(nonce), 0) != 0) { // not seekable: read
        if (fd >= 0 && read(fd, &nonce, sizeof(nonce)) != (ssize_t)sizeof(nonce)) nonce = 0;
    }
    if (fd >= 0) close(fd);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    nonce ^= ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);
    return nonce ? nonce : 1;
}

// Rank 0 draws 64 random bits, every rank gets them.
static uint64_t ckpt_nonce(Comm* comm) {
    uint64_t nonce = comm->r == 0 ? ckpt_nonce_local() : 0;
    comm_broadcast(comm, &nonce, sizeof(nonce), 0);
    return nonce;
}

// Rank 0 holds an exclusive flock on the output directory until the process ends.
static void ckpt_lock_dir(const char* dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) die_user("-o %s: cannot open the directory: %s", dir, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK)
            die_user("-o %s: another trainer is using this directory (it holds its lock). HINT: wait for it to end, or use another -o", dir);
        die_user("-o %s: cannot lock the directory: %s", dir, strerror(errno));
    }
    // fd stays open: the lock lives as long as this process
}

// Non-finite values in this rank's master weights (0 when all are finite). One pass, no collective.
// [HSDP] group 0's ranks count each shard once (the other groups hold the same values).
static int64_t master_nonfinite(Zero* z) {
    if (z->lay.sh.hsdp && z->lay.sh.g > 0) return 0;
    const int64_t chunk = 1 << 20;
    float* host = (float*)malloc(sizeof(float) * chunk);
    int64_t bad = 0;
    for (int64_t i = 0; i < z->opt_total; i += chunk) {
        int64_t n = z->opt_total - i < chunk ? z->opt_total - i : chunk;
        zero_state_get(z, 0, i, host, n);
        for (int64_t j = 0; j < n; j++) bad += !isfinite(host[j]);
    }
    free(host);
    return bad;
}

// Non-finite master values over every rank (a collective; the same on every rank).
static double master_nonfinite_all(Zero* z) {
    double bad = (double)master_nonfinite(z);
    comm_sum_doubles(z->comm, &bad, 1);
    return bad;
}

#define CKPT_FAILED (-1)    // a file could not be written: no DONE, the previous checkpoint stays
#define CKPT_NONFINITE (-2) // the master weights hold NaN or infinity: nothing written

// A checkpoint of the current step: every rank takes part. Returns 0 on every rank when the
// checkpoint is complete (DONE and LATEST written), CKPT_FAILED or CKPT_NONFINITE on every rank
// otherwise.
// with_model: write the llm.c model file too (-save-model); keep: -nk.
static int ckpt_save(Zero* z, const GPTConfig* c, const char* dir, const CkptMeta* meta, int with_model, int keep) {
    Comm* comm = z->comm;
    char path[PATH_MAX];
    uint64_t nonce = ckpt_nonce(comm);
    double err = 0.0, check[2] = {0.0, (double)master_nonfinite(z)}; // {errors, non-finite values}
    if (z->r == 0) { // a step written a second time: no marker may vouch for it while files change
        snprintf(path, sizeof(path), "%s/DONE_%08d", dir, meta->step);
        if (unlink(path) == 0) fsync_dir(dir);
        else if (errno != ENOENT) { fprintf(stderr, "error: cannot remove %s: %s\n", path, strerror(errno)); check[0] += 1.0; }
    }
    comm_sum_doubles(comm, check, 2); // the barrier: no rank renames before the old marker is gone
    if (check[1] != 0.0) {
        printf0("error: step %d: the master weights hold %.0f non-finite value(s): no checkpoint written (the previous one stays)\n", meta->step, check[1]);
        return CKPT_NONFINITE;
    }
    if (check[0] != 0.0) return CKPT_FAILED;
    Marker* mk = (Marker*)calloc(1, sizeof(Marker)); // (32 KiB: not on the stack)
    mk->step = meta->step; mk->nonce = nonce; mk->ranks = z->lay.R; mk->model_bytes = -1; // (one state file per shard)
    snprintf(mk->tune, sizeof(mk->tune), "%s", meta->tune);
    snprintf(mk->run, sizeof(mk->run), "%s", meta->run ? meta->run : "");
    g_ckpt_step = meta->step;
    snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, meta->step);
    if (with_model && write_model_file(z, c, path, sizeof(floatX) == 4, &mk->model_crc, &mk->model_bytes) != 0) err += 1.0;
    snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", dir, meta->step, z->lay.r);
    if ((!z->lay.sh.hsdp || z->lay.sh.g == 0) && write_state_file(z, c, meta, nonce, path) != 0) err += 1.0; // ([HSDP] group 0: each shard once)
    snprintf(path, sizeof(path), "%s/adapter_%08d", dir, meta->step); // [LoRA] the adapters as PEFT's files
    if (meta->adapter && meta->adapter(meta->adapter_ctx, path) != 0) err += 1.0;
    comm_sum_doubles(comm, &err, 1); // every rank learns whether all files are safe
    int ok = err == 0.0;
    if (!ok) printf0("checkpoint at step %d is incomplete (%d file(s) failed): no DONE marker; the previous one stays\n", meta->step, (int)err);
    if (ok && z->r == 0) {
        ckpt_crash_point("before-done", z->r, meta->step);
        snprintf(path, sizeof(path), "%s/DONE_%08d", dir, meta->step);
        if (marker_write(path, mk) != 0) { fprintf(stderr, "error: writing %s failed: %s\n", path, strerror(errno)); ok = 0; }
        snprintf(path, sizeof(path), "%s/LATEST", dir);
        if (ok && marker_write(path, mk) != 0) { fprintf(stderr, "error: writing %s failed: %s\n", path, strerror(errno)); ok = 0; }
        if (ok) printf("checkpoint: step %d written to %s\n", meta->step, dir);
        if (ok && keep > 0) { // the newest `keep` complete checkpoints up to this one (the history resume follows)
            int* steps;
            int n = list_done_steps(dir, &steps), older = 0;
            for (int i = 0; i < n; i++) older += steps[i] <= meta->step;
            for (int i = 0; i < n && older > keep; i++)
                if (steps[i] < meta->step) { remove_checkpoint(dir, steps[i]); older--; }
            free(steps);
        }
    }
    g_ckpt_step = -1;
    free(mk);
    comm_broadcast(comm, &ok, sizeof(ok), 0);
    return ok ? 0 : CKPT_FAILED;
}

// Resuming: the old state files of a step, their piece tables sorted by logical offset.
typedef struct { int64_t logical, len; int file; int64_t index; } OldPiece; // index: element in its file's arrays
typedef struct {
    int nfiles;
    int* fd;
    int64_t* total;      // elements per array in each file
    int64_t* data_off;   // byte offset of the payload in each file
    int64_t* size;       // payload bytes of each file
    uint32_t** crcs;     // each file's chunk checksums
    char** paths;
    OldPiece* pieces;
    int npieces;
    int which;           // 0 master, 1 m, 2 v: what state_fill reads
    int step;
    char* chunk;         // one verified chunk, cached: (chunk_file, chunk_index)
    int chunk_file;
    int64_t chunk_index;
    int64_t bytes_read;  // payload bytes read and verified
    int64_t* file_read;  // of them, from each file
} OldState;

static int cmp_oldpiece(const void* a, const void* b) {
    int64_t x = ((const OldPiece*)a)->logical, y = ((const OldPiece*)b)->logical;
    return x < y ? -1 : x > y;
}

// Open every state file of `step`, check each against the marker and the model, read their piece
// tables (every count bounded by the file's size, the header's own checksum verified).
static void old_state_open(OldState* os, Zero* z, const GPTConfig* c, const char* dir, const Marker* mk, CkptMeta* meta) {
    memset(os, 0, sizeof(*os));
    os->step = mk->step;
    os->nfiles = mk->ranks;
    int R_old = mk->ranks, step = mk->step;
    os->fd = (int*)calloc(R_old, sizeof(int));
    os->total = (int64_t*)calloc(R_old, sizeof(int64_t));
    os->data_off = (int64_t*)calloc(R_old, sizeof(int64_t));
    os->size = (int64_t*)calloc(R_old, sizeof(int64_t));
    os->crcs = (uint32_t**)calloc(R_old, sizeof(uint32_t*));
    os->paths = (char**)calloc(R_old, sizeof(char*));
    os->file_read = (int64_t*)calloc(R_old, sizeof(int64_t));
    os->chunk = (char*)malloc(CKPT_CHUNK);
    os->chunk_file = -1;
    int64_t logical_total = z->lay.logical_total;
    for (int f = 0; f < R_old; f++) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", dir, step, f);
        os->paths[f] = strdup(path);
        int fd = zt_open_read(path);
        if (fd < 0) die_user("resume: cannot open %s: %s (DONE_%08d says step %d is complete with %d state files). HINT: -resume-step an older checkpoint", path, zt_strerror(errno), step, step, R_old);
        struct stat st;
        if (fstat(fd, &st) != 0) die_user("resume: %s: cannot stat: %s", path, strerror(errno));
        int64_t h[STATE_HEADER_INTS];
        if (pread_all(fd, h, sizeof(h), 0) != 0) die_user("resume: %s: truncated header", path);
        if (h[STATE_H_MAGIC] != STATE_MAGIC) die_user("resume: %s: not a zerotrain state file (magic %lld, expected %d)", path, (long long)h[0], STATE_MAGIC);
        if (h[STATE_H_VERSION] != STATE_VERSION)
            die_user("resume: %s: state file version %lld, this build reads version %d (written by another zerotrain version). HINT: resume with the build that wrote it", path, (long long)h[1], STATE_VERSION);
        if (h[STATE_H_NONCE] != (int64_t)mk->nonce)
            die_user("resume: %s belongs to another save (nonce %016llx) than DONE_%08d (nonce %016llx): the checkpoint mixes two runs. HINT: -resume-step an older checkpoint",
                     path, (unsigned long long)h[STATE_H_NONCE], step, (unsigned long long)mk->nonce);
        if (h[STATE_H_R] != R_old || h[STATE_H_RANK] != f || h[STATE_H_STEP] != step)
            die_user("resume: %s: header says rank %lld of %lld at step %lld, expected rank %d of %d at step %d", path, (long long)h[STATE_H_RANK], (long long)h[STATE_H_R], (long long)h[STATE_H_STEP], f, R_old, step);
        int64_t n = h[STATE_H_NPIECES], nchunks = h[STATE_H_NCHUNKS];
        if (n < 0 || n > (st.st_size - (int64_t)sizeof(h)) / 16 || h[STATE_H_CHUNK] != CKPT_CHUNK || nchunks < 0 || nchunks > (st.st_size - (int64_t)sizeof(h) - 16 * n) / 4)
            die_user("resume: %s: corrupt header (%lld pieces, %lld chunks of %lld bytes in a %lld-byte file)", path, (long long)n, (long long)nchunks, (long long)h[STATE_H_CHUNK], (long long)st.st_size);
        int64_t* table = (int64_t*)malloc(16 * (size_t)(n > 0 ? n : 1));
        os->crcs[f] = (uint32_t*)malloc(4 * (size_t)(nchunks > 0 ? nchunks : 1));
        if (pread_all(fd, table, 16 * (size_t)n, sizeof(h)) != 0 || pread_all(fd, os->crcs[f], 4 * (size_t)nchunks, sizeof(h) + 16 * n) != 0)
            die_user("resume: %s: truncated piece table", path);
        uint32_t want = (uint32_t)h[STATE_H_META_CRC];
        h[STATE_H_META_CRC] = 0;
        uint32_t got = crc32c_update(crc32c_update(crc32c_update(0, h, sizeof(h)), table, 16 * (size_t)n), os->crcs[f], 4 * (size_t)nchunks);
        if (got != want) die_user("resume: %s: the header or piece table fails its CRC32C (%08x, recorded %08x): the file is corrupt. HINT: -resume-step an older checkpoint", path, got, want);
        if (h[STATE_H_L] != c->L || h[STATE_H_C] != c->C || h[STATE_H_NH] != c->NH || h[STATE_H_V] != c->V || h[STATE_H_VP] != c->Vp || h[STATE_H_MAXT] != c->maxT)
            die_user("resume: %s: the checkpoint's model (L %lld, C %lld, NH %lld, V %lld, maxT %lld) differs from this run's (L %d, C %d, NH %d, V %d, maxT %d). HINT: resume with the same -e and model flags", path,
                     (long long)h[STATE_H_L], (long long)h[STATE_H_C], (long long)h[STATE_H_NH], (long long)h[STATE_H_V], (long long)h[STATE_H_MAXT], c->L, c->C, c->NH, c->V, c->maxT);
        int64_t fam[STATE_HEADER_INTS] = {0};
        state_family_fields(c, fam);
        if (memcmp(h + STATE_H_FAMILY, fam + STATE_H_FAMILY, sizeof(int64_t) * (STATE_H_FAMILY_HASH + 1 - STATE_H_FAMILY)))
            die_user("resume: %s: the checkpoint's model family or shape (%s, NKV %lld, head size %lld, MLP size %lld, tied/qkv/mlp biases %lld, rope type %lld, "
                     "family fields hash %llx) differs from this run's (%s, NKV %lld, head size %lld, MLP size %lld, %lld, rope type %lld, %llx: eps, rope_theta "
                     "and rope_scaling included). HINT: resume with the same -e and model flags", path,
                     h[STATE_H_FAMILY] == FAMILY_LLAMA ? "llama" : h[STATE_H_FAMILY] == FAMILY_GPT2 ? "gpt2" : "unknown family", (long long)h[STATE_H_NKV],
                     (long long)h[STATE_H_HD], (long long)h[STATE_H_F], (long long)h[STATE_H_BIASES], (long long)h[STATE_H_ROPE_TYPE], (unsigned long long)h[STATE_H_FAMILY_HASH],
                     c->family == FAMILY_LLAMA ? "llama" : "gpt2", (long long)fam[STATE_H_NKV], (long long)fam[STATE_H_HD], (long long)fam[STATE_H_F],
                     (long long)fam[STATE_H_BIASES], (long long)fam[STATE_H_ROPE_TYPE], (unsigned long long)fam[STATE_H_FAMILY_HASH]);
        if (h[STATE_H_LORA_R] != c->lora_r || h[STATE_H_LORA_MASK] != (int64_t)c->lora_mask)
            die_user("resume: %s holds the state of %s, and this run trains %s (-lora %d, targets mask %x). HINT: resume with the checkpoint's -lora and "
                     "-lora-targets, or start a new run (-e)", path, h[STATE_H_LORA_R] ? "LoRA adapters" : "every parameter (full fine-tuning)",
                     c->lora_r ? "LoRA adapters" : "every parameter", c->lora_r, c->lora_mask);
        if (f == 0) {
            meta->step = step; meta->adam_t = h[STATE_H_ADAM_T]; meta->seed = h[STATE_H_SEED];
            meta->step_tokens = h[STATE_H_STEP_TOKENS]; meta->train_tokens = h[STATE_H_TRAIN_TOKENS]; meta->writer_R = R_old;
        }
        os->fd[f] = fd;
        os->pieces = (OldPiece*)realloc(os->pieces, sizeof(OldPiece) * (os->npieces + n + 1));
        int64_t idx = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t lg = table[2 * i], len = table[2 * i + 1];
            if (lg < 0 || len < 0 || lg > logical_total || len > logical_total - lg || idx > logical_total - len)
                die_user("resume: %s: piece %lld (offset %lld, length %lld) is outside the model's %lld parameters", path, (long long)i, (long long)lg, (long long)len, (long long)logical_total);
            OldPiece* p = &os->pieces[os->npieces++];
            p->logical = lg; p->len = len; p->file = f; p->index = idx;
            idx += len;
        }
        free(table);
        os->total[f] = idx;
        os->data_off[f] = sizeof(h) + 16 * n + 4 * nchunks;
        os->size[f] = 12 * idx;
        if (nchunks != (os->size[f] + CKPT_CHUNK - 1) / CKPT_CHUNK || st.st_size != os->data_off[f] + os->size[f])
            die_user("resume: %s: %lld bytes, expected %lld (%lld chunk checksums for %lld payload bytes): truncated or corrupt", path, (long long)st.st_size,
                     (long long)(os->data_off[f] + os->size[f]), (long long)nchunks, (long long)os->size[f]);
    }
    qsort(os->pieces, os->npieces, sizeof(OldPiece), cmp_oldpiece);
    // the pieces must tile the trainable logical ranges exactly: every parameter's without LoRA,
    // the adapters' with it ([LoRA] a frozen block has no state; its logical ranges are skipped)
    int nt = 0;
    for (int b = 0; b < z->lay.nblocks; b++) nt += z->lay.frozen[b] ? 0 : z->lay.ntensors[b];
    OldPiece* want = (OldPiece*)calloc((size_t)nt + 1, sizeof(OldPiece));
    int64_t need = 0;
    nt = 0;
    for (int b = 0; b < z->lay.nblocks; b++)
        for (int k = 0; !z->lay.frozen[b] && k < z->lay.ntensors[b]; k++) {
            want[nt].logical = z->lay.tensors[b][k].logical; want[nt].len = z->lay.tensors[b][k].len;
            need += want[nt++].len;
        }
    qsort(want, nt, sizeof(OldPiece), cmp_oldpiece);
    int nm = 0; // adjacent ranges merged (a piece may span tensors)
    for (int k = 0; k < nt; k++) {
        if (nm && want[nm - 1].logical + want[nm - 1].len == want[k].logical) want[nm - 1].len += want[k].len;
        else want[nm++] = want[k];
    }
    nt = nm;
    int64_t covered = 0, at = nt ? want[0].logical : 0; // `at`: the next logical element the pieces must start at
    for (int i = 0, w = 0; i < os->npieces; i++) {
        while (w < nt && at >= want[w].logical + want[w].len) { w++; if (w < nt) at = want[w].logical; } // the next trainable range
        if (w >= nt || os->pieces[i].logical != at || os->pieces[i].len > want[w].logical + want[w].len - at)
            die_user("resume: the state files of step %d do not cover the trainable parameters (gap or overlap at %lld)", step, (long long)at);
        covered += os->pieces[i].len;
        at += os->pieces[i].len;
    }
    free(want);
    if (covered != need) die_user("resume: the state files of step %d hold %lld parameters, the model trains %lld", step, (long long)covered, (long long)need);
}

// Bytes [off, off + n) of file f's payload, through verified chunks.
static void old_state_read(OldState* os, int f, int64_t off, char* dst, int64_t n) {
    while (n > 0) {
        int64_t ci = off / CKPT_CHUNK, lo = ci * CKPT_CHUNK;
        int64_t clen = os->size[f] - lo < CKPT_CHUNK ? os->size[f] - lo : CKPT_CHUNK;
        if (os->chunk_file != f || os->chunk_index != ci) {
            if (pread_all(os->fd[f], os->chunk, clen, os->data_off[f] + lo) != 0) die(1, "resume: reading %s failed: %s", os->paths[f], strerror(errno));
            uint32_t got = crc32c_update(0, os->chunk, clen);
            if (got != os->crcs[f][ci])
                die_user("resume: %s: payload bytes %lld..%lld fail their CRC32C (%08x, recorded %08x): the file is corrupt. HINT: -resume-step an older checkpoint",
                         os->paths[f], (long long)lo, (long long)(lo + clen), got, os->crcs[f][ci]);
            os->chunk_file = f; os->chunk_index = ci;
            os->bytes_read += clen;
            os->file_read[f] += clen;
        }
        int64_t take = lo + clen - off < n ? lo + clen - off : n;
        memcpy(dst, os->chunk + (off - lo), take);
        dst += take; off += take; n -= take;
    }
}

// LogicalFill from the old state files: reads exactly the chunks that overlap the range.
static void old_state_fill(void* ctx, float* dst, int64_t logical, int64_t len) {
    OldState* os = (OldState*)ctx;
    int lo = 0, hi = os->npieces - 1; // the last piece starting at or before `logical`
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (os->pieces[mid].logical <= logical) lo = mid; else hi = mid - 1;
    }
    for (int i = lo; len > 0; i++) {
        const OldPiece* p = &os->pieces[i];
        int64_t skip = logical - p->logical;
        int64_t take = p->len - skip < len ? p->len - skip : len;
        int64_t off = 4 * ((int64_t)os->which * os->total[p->file] + p->index + skip);
        old_state_read(os, p->file, off, (char*)dst, 4 * take);
        dst += take; logical += take; len -= take;
    }
}

static void old_state_close(OldState* os) {
    for (int f = 0; f < os->nfiles; f++) { close(os->fd[f]); free(os->crcs[f]); free(os->paths[f]); }
    free(os->fd); free(os->total); free(os->data_off); free(os->size); free(os->crcs); free(os->paths);
    free(os->pieces); free(os->chunk); free(os->file_read);
}

// Rank 0: which checkpoint to resume (-1: none). Follows LATEST; resume_step > 0 picks that step.
static int ckpt_choose(const char* dir, int resume_step, Marker* mk, int quiet) {
    char path[PATH_MAX];
    Marker latest;
    snprintf(path, sizeof(path), "%s/LATEST", dir);
    int has_latest = marker_read(path, &latest) == 0;
    int* steps;
    int n = list_done_steps(dir, &steps), chosen = -1;
    if (resume_step > 0) {
        snprintf(path, sizeof(path), "%s/DONE_%08d", dir, resume_step);
        if (marker_read(path, mk) != 0 || mk->step != resume_step)
            die_user("-resume-step %d: no complete checkpoint (DONE_%08d) of that step in %s", resume_step, resume_step, dir);
        chosen = resume_step;
    } else {
        int limit = has_latest ? latest.step : INT_MAX;
        for (int i = n - 1; i >= 0 && chosen < 0; i--) {
            if (steps[i] > limit) continue; // after LATEST: not part of the history a resume follows
            snprintf(path, sizeof(path), "%s/DONE_%08d", dir, steps[i]);
            if (marker_read(path, mk) != 0 || mk->step != steps[i]) {
                if (!quiet) printf("resume: %s is not a complete marker: skipped\n", path);
                continue;
            }
            if (has_latest && steps[i] == latest.step && mk->nonce != latest.nonce) continue; // a save whose LATEST never came
            chosen = steps[i];
        }
        if (has_latest && chosen != latest.step && !quiet)
            printf("resume: LATEST names step %d, which is not complete: taking the newest complete checkpoint before it%s\n", latest.step, chosen < 0 ? " (there is none)" : "");
        if (!has_latest && chosen >= 0 && !quiet) printf("resume: no LATEST file in %s: taking the newest complete checkpoint\n", dir);
    }
    free(steps);
    return chosen;
}

// Rank 0, before anything is allocated: the step a resume will take (-1: none) and its marker
// (the -tune choice, the run's record). Reads the markers only (quietly: ckpt_resume says what it
// chose, and checks every file, when it loads).
static int ckpt_peek(const char* dir, int resume_step, Marker* mk) {
    memset(mk, 0, sizeof(*mk));
    return ckpt_choose(dir, resume_step, mk, 1);
}
static int ckpt_peek_tune(const char* dir, int resume_step, char* tune, size_t cap) {
    Marker* mk = (Marker*)malloc(sizeof(Marker));
    if (!mk) die(1, "out of host memory (%zu bytes for a checkpoint marker)", sizeof(Marker));
    int step = ckpt_peek(dir, resume_step, mk);
    snprintf(tune, cap, "%s", step >= 0 ? mk->tune : "");
    free(mk);
    return step;
}

// Load the checkpoint LATEST names (or -resume-step's): rank 0 chooses, every rank follows. It
// READS only: every file is checked (the model file's size and CRC32C against DONE, each state
// file's header, piece table and every payload chunk it reads: together the ranks read them all)
// and nothing in dir changes — the roll-back's writes are ckpt_commit_resume's, once the run is
// about to train (a run that reads a checkpoint to export it, or fails before its first step,
// leaves the directory as it found it). Says which files each rank read and how many MiB.
// Returns 1 with meta and mk (the marker: the commit needs it) filled when one was loaded, 0 when
// there is none.
static int ckpt_resume(Zero* z, const GPTConfig* c, const char* dir, int resume_step, CkptMeta* meta, Marker* mk) {
    memset(mk, 0, sizeof(*mk));
    int step = -1;
    int64_t model_read = 0;
    if (z->r == 0) {
        step = ckpt_choose(dir, resume_step, mk, 0);
        if (step >= 0 && mk->model_bytes >= 0) { // the model file is the one this save wrote
            char path[PATH_MAX];
            uint32_t crc;
            snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, step);
            if (file_crc32c(path, &crc, &model_read) != 0) die_user("resume: cannot read %s: %s (DONE_%08d lists it)", path, zt_strerror(errno), step);
            if (model_read != mk->model_bytes || crc != mk->model_crc)
                die_user("resume: %s (%lld bytes, CRC32C %08x) is not the file DONE_%08d vouches for (%lld bytes, %08x): corrupt or from another run. HINT: -resume-step an older checkpoint",
                         path, (long long)model_read, crc, step, (long long)mk->model_bytes, mk->model_crc);
        }
    }
    comm_broadcast(z->comm, &step, sizeof(step), 0);
    if (step < 0) { printf0("resume: no complete checkpoint in %s, starting from step 0\n", dir); return 0; }
    comm_broadcast(z->comm, mk, sizeof(*mk), 0);
    OldState os;
    old_state_open(&os, z, c, dir, mk, meta);
    snprintf(meta->tune, sizeof(meta->tune), "%s", mk->tune);
    for (int a = 0; a < 3; a++) {
        os.which = a;
        zero_fill_opt(z, a, old_state_fill, &os);
    }
    // what each rank read: its state files' verified bytes (and rank 0 the model file for its CRC32C)
    uint64_t* col = (uint64_t*)malloc(sizeof(uint64_t) * z->R);
    uint64_t* all = (uint64_t*)malloc(sizeof(uint64_t) * z->R * (os.nfiles + 1));
    for (int f = 0; f <= os.nfiles; f++) {
        comm_allgather_u64(z->comm, f < os.nfiles ? (uint64_t)os.file_read[f] : (uint64_t)model_read, col);
        for (int q = 0; q < z->R; q++) all[q * (os.nfiles + 1) + f] = col[q];
    }
    for (int q = 0; q < z->R && z->r == 0; q++) {
        const uint64_t* row = all + q * (os.nfiles + 1);
        double total = 0.0;
        int files = 0;
        for (int f = 0; f <= os.nfiles; f++) { total += (double)row[f]; files += row[f] > 0; }
        printf("resume: rank %d read %.2f MiB from %d file(s):", q, total / 1048576.0, files);
        for (int f = 0, shown = 0; f <= os.nfiles; f++) {
            if (!row[f]) continue;
            if (shown++ == 8) { printf(" ..."); break; }
            if (f < os.nfiles) printf(" state_%08d_%05d.bin %.2f MiB", step, f, row[f] / 1048576.0);
            else printf(" model_%08d.bin %.2f MiB (its CRC32C)", step, row[f] / 1048576.0);
        }
        printf("\n");
    }
    free(col);
    free(all);
    old_state_close(&os);
    zero_params_from_master(z);
    return 1;
}

// Rank 0, when a resumed run is about to train its first step (everything was loaded and checked):
// one history from here on — every checkpoint file of a later step goes into
// set_aside_<step>_<nonce>/ (said), LATEST names the step resumed, and log.jsonl's records after it
// move into that folder too (ckpt_log_truncate). keep: this run's -e file (never moved).
static void ckpt_commit_resume(const char* dir, const Marker* mk, int rolled_back, const char* keep) {
    char why[128], sub[PATH_MAX], path[PATH_MAX];
    if (rolled_back) snprintf(why, sizeof(why), "rolled back to step %d", mk->step);
    else snprintf(why, sizeof(why), "resuming step %d", mk->step);
    ckpt_set_aside(dir, mk->step, mk->nonce, why, keep, sub, sizeof(sub));
    snprintf(path, sizeof(path), "%s/LATEST", dir);
    Marker* latest = (Marker*)malloc(sizeof(Marker));
    if (!latest) die(1, "out of host memory (%zu bytes for a checkpoint marker)", sizeof(Marker));
    if (marker_read(path, latest) != 0 || latest->step != mk->step || latest->nonce != mk->nonce)
        if (marker_write(path, mk) != 0) die(1, "resume: writing %s failed: %s", path, strerror(errno));
    free(latest);
    snprintf(path, sizeof(path), "%s/log.jsonl", dir);
    FILE* lf = fopen(path, "r");
    int later = 0; // does the log hold records after the step? (then they need a folder to go to)
    if (lf) {
        char* line = NULL;
        size_t cap = 0;
        int s;
        while (!later && getline(&line, &cap, lf) > 0)
            later = sscanf(line, "{\"step\": %d", &s) == 1 && s > mk->step;
        free(line);
        fclose(lf);
    }
    if (!later) return;
    if (!sub[0]) ckpt_aside_dir(dir, mk->step, mk->nonce, sub, sizeof(sub));
    ckpt_log_truncate(path, mk->step, sub);
}

#endif // ZT_CHECKPOINT_H
