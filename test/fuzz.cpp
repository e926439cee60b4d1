// test/fuzz.cpp — libFuzzer harnesses for every reader of outside data, in one binary that
// dispatches by harness name (ZT_FUZZ_HARNESS, or the first argument before libFuzzer's own):
//
//   test/fuzz model  [libFuzzer flags] [corpus]   an llm.c model file: model_file_open + fill
//   test/fuzz shard  ...                          a token shard: dataloader_init + every batch
//   test/fuzz state  ...                          a state file: old_state_open + fill, R = 1
//   test/fuzz tokenizer ...                       llm.c's tokenizer file: tokenizer_init + decode
//   test/fuzz bpe    ...                          the encoder: decode(encode(x)) == x, and the
//                                                 text encoded in two parts == encoded whole
//
// (Modes that start child processes — -merge, -fork, -jobs — need the name in ZT_FUZZ_HARNESS.)
// Built by `make test/fuzz` (clang, -fsanitize=fuzzer,address,undefined). `make test` replays the
// committed corpus (test/fuzz_corpus/<harness>/) and runs a fixed number of inputs from a fixed
// seed per harness (test/run_tests.sh); `make fuzz` runs each harness for FUZZ_SECONDS.
//
// The readers end the process on bad input (die, exit code 2): here die's abort hook jumps back
// to the harness instead, so a refused input is an ordinary outcome and only a crash, a sanitizer
// report or a broken oracle is a finding. Descriptors a refused input left open are closed.
#ifndef TESTING
#define TESTING
#endif
#include <setjmp.h>
#include "../train_gpt.cu" // defines: the trainer's readers (checkpoint.h, dataloader.h, tokenizer.h)

static jmp_buf g_fuzz_jmp;
static const char* g_fuzz_harness = NULL;
static char g_fuzz_path[256];

static void fuzz_abort_hook(int code) { longjmp(g_fuzz_jmp, code ? code : 1); }

// The descriptors open before any input (libFuzzer's own): a refused input may leave its file
// open (die jumped past the close); every other descriptor is closed after it.
static unsigned char g_fuzz_fds[256];
static void fuzz_note_fds(void) {
    for (int fd = 0; fd < 256; fd++) g_fuzz_fds[fd] = fcntl(fd, F_GETFD) != -1;
}
static void fuzz_close_new_fds(void) {
    for (int fd = 3; fd < 256; fd++)
        if (!g_fuzz_fds[fd] && fcntl(fd, F_GETFD) != -1) close(fd);
}

static void fuzz_write(const uint8_t* data, size_t size) {
    FILE* f = fopen(g_fuzz_path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
}

// A small model for the state harness: L 1, C 8, V 10 (its logical parameter count is fixed).
static void fuzz_state(const uint8_t* data, size_t size) {
    static int ready = 0;
    static Zero z;
    static Comm comm;
    static GPTConfig c = {1, 8, 2, 10, 16, 4};
    if (!ready) {
        ModelDesc d;
        BlockLayout lay;
        model_describe(&d, &c);
        model_layout(&d, &lay, 1, 0);
        memset(&comm, 0, sizeof(comm));
        comm.R = 1;
        zero_init(&z, &lay, 1, &comm, 0);
        ready = 1;
    }
    char dir[300], path[400];
    snprintf(dir, sizeof(dir), "%s.d", g_fuzz_path);
    mkdir(dir, 0755);
    snprintf(path, sizeof(path), "%s/state_00000001_00000.bin", dir);
    FILE* f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    Marker mk = {1, 0, 1, -1, 0};
    if (size >= 8 * (STATE_H_NONCE + 1)) memcpy(&mk.nonce, data + 8 * STATE_H_NONCE, 8); // so the nonce check passes
    CkptMeta meta;
    OldState os;
    memset(&os, 0, sizeof(os));
    old_state_open(&os, &z, &c, dir, &mk, &meta);
    float* arrays[3] = {z.master, z.m, z.v};
    for (int a = 0; a < 3; a++) {
        os.which = a;
        zero_fill_opt(&z, arrays[a], old_state_fill, &os);
    }
    old_state_close(&os);
}

static void fuzz_model(const uint8_t* data, size_t size) {
    fuzz_write(data, size);
    ModelFile mf;
    GPTConfig c;
    model_file_open(&mf, g_fuzz_path, &c);
    ModelDesc d;
    model_describe(&d, &c);
    float* buf = (float*)malloc(sizeof(float) * (size_t)d.num_params);
    model_file_fill(&mf, buf, 0, d.num_params);
    free(buf);
    close(mf.fd);
}

static void fuzz_shard(const uint8_t* data, size_t size) {
    fuzz_write(data, size);
    DataLoader dl;
    char err[1024];
    if (dataloader_init(&dl, g_fuzz_path, 2, 4, 50257, 1, 7, err, sizeof(err)) != 0) return;
    for (int64_t u = 0; u < dl.total_samples / 2 + 2; u++)
        if (dataloader_load(&dl, u) != 0) abort(); // the file did not change: every batch loads
    dataloader_free(&dl);
}

static void fuzz_tokenizer(const uint8_t* data, size_t size) {
    fuzz_write(data, size);
    Tokenizer tok;
    char err[1024];
    if (tokenizer_init(&tok, g_fuzz_path, err, sizeof(err)) != 0) return;
    FILE* null = fopen("/dev/null", "w");
    for (uint32_t id = 0; id < tok.vocab_size + 2; id++) tokenizer_print(&tok, id, null);
    fclose(null);
    tokenizer_free(&tok);
}

static void fuzz_bpe(const uint8_t* data, size_t size) {
    static Tokenizer tok;
    static int ready = 0;
    char err[1024];
    if (!ready) {
        if (tokenizer_init(&tok, "data/gpt2_tokenizer.bin", err, sizeof(err)) || tokenizer_load_merges(&tok, "data/gpt2_merges.bin", err, sizeof(err))) {
            fprintf(stderr, "fuzz bpe: %s (run from the repository root)\n", err);
            exit(1);
        }
        ready = 1;
    }
    uint16_t* whole = NULL;
    size_t nwhole = 0, cap = 0;
    if (tokenizer_encode(&tok, data, size, &whole, &nwhole, &cap) != 0) abort();
    // round trip: the ids decode to exactly the bytes
    size_t at = 0;
    for (size_t i = 0; i < nwhole; i++) {
        int len;
        const char* s = tokenizer_decode(&tok, whole[i], &len);
        if (!s || at + (size_t)len > size || memcmp(s, data + at, (size_t)len)) abort();
        at += (size_t)len;
    }
    if (at != size) abort();
    // streamed: the text in two parts (split at the first byte's value) gives the same ids
    size_t split = size ? data[0] % (size + 1) : 0, consumed = 0;
    uint16_t* parts = NULL;
    size_t nparts = 0, pcap = 0;
    if (tokenizer_encode_part(&tok, data, split, 0, &consumed, &parts, &nparts, &pcap) != 0) abort();
    if (consumed > split) abort();
    size_t rest = 0;
    if (tokenizer_encode_part(&tok, data + consumed, size - consumed, 1, &rest, &parts, &nparts, &pcap) != 0) abort();
    if (nparts != nwhole || (nwhole && memcmp(parts, whole, nwhole * sizeof(uint16_t)))) abort();
    free(whole);
    free(parts);
}

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
    g_fuzz_harness = getenv("ZT_FUZZ_HARNESS");
    if (!g_fuzz_harness && *argc > 1 && (*argv)[1][0] != '-') { // the harness name, then libFuzzer's arguments
        g_fuzz_harness = (*argv)[1];
        for (int i = 1; i < *argc - 1; i++) (*argv)[i] = (*argv)[i + 1];
        (*argc)--;
    }
    if (!g_fuzz_harness || (strcmp(g_fuzz_harness, "model") && strcmp(g_fuzz_harness, "shard") && strcmp(g_fuzz_harness, "state") &&
                            strcmp(g_fuzz_harness, "tokenizer") && strcmp(g_fuzz_harness, "bpe"))) {
        fprintf(stderr, "usage: test/fuzz model|shard|state|tokenizer|bpe [libFuzzer flags] [corpus dirs]\n");
        exit(2);
    }
    const char* base = getenv("TMPDIR");
    snprintf(g_fuzz_path, sizeof(g_fuzz_path), "%s/zt_fuzz_%s_%d.bin", base && base[0] ? base : "/tmp", g_fuzz_harness, (int)getpid());
    g_abort_hook = fuzz_abort_hook;
    fuzz_note_fds();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (setjmp(g_fuzz_jmp) == 0) {
        switch (g_fuzz_harness[0]) {
        case 'm': fuzz_model(data, size); break;
        case 's': if (g_fuzz_harness[1] == 'h') fuzz_shard(data, size); else fuzz_state(data, size); break;
        case 't': fuzz_tokenizer(data, size); break;
        case 'b': fuzz_bpe(data, size); break;
        }
    } else {
        fuzz_close_new_fds(); // refused (die): what it left open
    }
    return 0;
}
