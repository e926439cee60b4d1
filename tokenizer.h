// tokenizer.h — GPT-2's byte-level BPE vocabulary, decode side: token id -> the bytes it stands for.
//
// Used to print samples and to check data; encoding (text -> ids, for making shards in C) is not
// here yet. The vocabulary is llm.c's tokenizer file (data/gpt2_tokenizer.bin, written by
// dev/make_vocab.py from GPT-2's encoder.json):
//
//   header   256 little-endian uint32: [0] = 20240328 (magic), [1] = version (1 or 2),
//            [2] = vocab size V, [3] = id of <|endoftext|> (version 2 only; -1 for version 1)
//   tokens   for id = 0 .. V-1: one uint8 length n (1..255), then the token's n raw bytes
//            (GPT-2's bytes, not encoder.json's printable stand-ins; EOT is the text
//            "<|endoftext|>"); nothing after the last token
//
// A token is a piece of UTF-8, not always a whole character: "é" can be split over two tokens.
// So printing works byte by byte (tokenizer_print) and keeps every byte >= 0x80.
//
// Header-only, all functions static: include it in one translation unit. Compiles as C, as C++
// and under nvcc (host code only).
// defines: Tokenizer, tokenizer_init, tokenizer_decode, tokenizer_print, tokenizer_free
#ifndef ZT_TOKENIZER_H
#define ZT_TOKENIZER_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tokenizer.h reads little-endian files with plain loads: big-endian hosts are not supported"
#endif

#define TOKENIZER_MAGIC 20240328u
#define TOKENIZER_HEADER_BYTES 1024        // 256 uint32
#define TOKENIZER_MAX_VOCAB (1u << 24)     // a sanity bound on the header, far above any GPT vocabulary
#define TOKENIZER_UNKNOWN "<|?|>"          // what an id outside the vocabulary decodes to

typedef struct {
    uint32_t vocab_size;  // V
    int eot_token;        // id of <|endoftext|>, -1 when the file (version 1) does not say
    char** token_table;   // (V) id -> the token's bytes, NUL-terminated; a token may itself be
                          //     the byte 0, so always use token_len, never strlen
    uint8_t* token_len;   // (V) id -> number of bytes, 1..255
    char* bytes;          // every token's bytes followed by a NUL, back to back: the one
                          //     allocation token_table points into
} Tokenizer;

// Release everything tok holds; safe on a zeroed or already freed Tokenizer.
static inline void tokenizer_free(Tokenizer* tok) {
    free(tok->bytes);
    free(tok->token_table);
    free(tok->token_len);
    memset(tok, 0, sizeof(*tok));
    tok->eot_token = -1;
}

// Format a one-line error into err (if given) and release whatever tok holds. Returns -1.
__attribute__((format(printf, 4, 5)))
static inline int tokenizer_fail(Tokenizer* tok, char* err, size_t errlen, const char* fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    tokenizer_free(tok);
    return -1;
}

// Read the tokenizer file at `path` into tok. Returns 0, or -1 with a one-line message in err
// naming the file and the problem, and nothing left allocated.
static inline int tokenizer_init(Tokenizer* tok, const char* path, char* err, size_t errlen) {
    memset(tok, 0, sizeof(*tok));
    tok->eot_token = -1;

    // --- the whole file into memory (GPT-2's is 372 kB)
    FILE* f = fopen(path, "rb");
    if (!f) {
        return tokenizer_fail(tok, err, errlen, "tokenizer %s: cannot open: %s "
                              "(HINT: GPT-2's is made by `python3 dev/make_vocab.py`)", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return tokenizer_fail(tok, err, errlen, "tokenizer %s: not a readable regular file", path);
    }
    size_t size = (size_t)st.st_size;
    if (size < TOKENIZER_HEADER_BYTES) {
        fclose(f);
        return tokenizer_fail(tok, err, errlen, "tokenizer %s: truncated header: the file is %zu bytes, the header alone is %d",
                              path, size, TOKENIZER_HEADER_BYTES);
    }
    uint32_t header[TOKENIZER_HEADER_BYTES / 4];
    size_t body_bytes = size - TOKENIZER_HEADER_BYTES;
    tok->bytes = (char*)malloc(body_bytes + 1);  // +1: never malloc(0)
    if (!tok->bytes) {
        fclose(f);
        return tokenizer_fail(tok, err, errlen, "tokenizer %s: out of memory for %zu bytes", path, body_bytes);
    }
    int read_ok = fread(header, 1, sizeof(header), f) == sizeof(header) &&
                  fread(tok->bytes, 1, body_bytes, f) == body_bytes;
    fclose(f);
    if (!read_ok) return tokenizer_fail(tok, err, errlen, "tokenizer %s: read error", path);

    // --- header
    if (header[0] != TOKENIZER_MAGIC) {
        return tokenizer_fail(tok, err, errlen, "tokenizer %s: wrong magic %u (expected %u): not an llm.c GPT-2 tokenizer file",
                              path, header[0], TOKENIZER_MAGIC);
    }
    uint32_t version = header[1], V = header[2];
    if (version != 1 && version != 2) {
        return tokenizer_fail(tok, err, errlen, "tokenizer %s: unsupported version %u (this reader knows 1 and 2)", path, version);
    }
    if (V == 0 || V > TOKENIZER_MAX_VOCAB) {
        return tokenizer_fail(tok, err, errlen, "tokenizer %s: implausible vocabulary size %u in the header", path, V);
    }
    if (version == 2) {
        if (header[3] >= V) {
            return tokenizer_fail(tok, err, errlen, "tokenizer %s: EOT id %u is outside the vocabulary of %u tokens", path, header[3], V);
        }
        tok->eot_token = (int)header[3];
    }
    tok->vocab_size = V;

    // --- token table. In the file each token is <n><n bytes>; in memory we want <n bytes><NUL>,
    // the same size, so each token's bytes move one place left over its length byte, in place.
    tok->token_table = (char**)malloc(V * sizeof(char*));
    tok->token_len = (uint8_t*)malloc(V);
    if (!tok->token_table || !tok->token_len) {
        return tokenizer_fail(tok, err, errlen, "tokenizer %s: out of memory for %u tokens", path, V);
    }
    size_t off = 0;
    for (uint32_t id = 0; id < V; id++) {
        if (off >= body_bytes) {
            return tokenizer_fail(tok, err, errlen, "tokenizer %s: truncated token table: the file ends before token %u of %u",
                                  path, id, V);
        }
        uint8_t n = (uint8_t)tok->bytes[off];
        if (n == 0) return tokenizer_fail(tok, err, errlen, "tokenizer %s: token %u has zero length", path, id);
        if (off + 1 + n > body_bytes) {
            return tokenizer_fail(tok, err, errlen, "tokenizer %s: truncated token table: token %u of %u needs %u bytes, the file has %zu",
                                  path, id, V, n, body_bytes - off - 1);
        }
        memmove(tok->bytes + off, tok->bytes + off + 1, n);
        tok->bytes[off + n] = '\0';
        tok->token_table[id] = tok->bytes + off;
        tok->token_len[id] = n;
        off += 1 + (size_t)n;
    }
    if (off != body_bytes) {
        return tokenizer_fail(tok, err, errlen, "tokenizer %s: %zu unexpected bytes after the last of %u tokens",
                              path, body_bytes - off, V);
    }
    return 0;
}

// The bytes of token `id` (count in *len if len is not NULL). Ids outside the vocabulary give
// TOKENIZER_UNKNOWN, so a corrupt sample prints as such instead of crashing.
static inline const char* tokenizer_decode(const Tokenizer* tok, uint32_t id, int* len) {
    if (!tok->token_table || id >= tok->vocab_size) {
        if (len) *len = (int)strlen(TOKENIZER_UNKNOWN);
        return TOKENIZER_UNKNOWN;
    }
    if (len) *len = tok->token_len[id];
    return tok->token_table[id];
}

// Print token `id` to f as llm.c's safe_printf does: raw bytes, but a byte-level vocabulary has
// tokens for every control byte (backspace, escape, ...) that would garble a terminal, so those
// are skipped. Kept: printable ASCII, whitespace (\t \n \v \f \r, as C's isspace) and every byte
// >= 0x80 (parts of UTF-8 characters, possibly split across tokens). Unlike isprint(), this does
// not depend on the locale.
static inline void tokenizer_print(const Tokenizer* tok, uint32_t id, FILE* f) {
    int len;
    const char* s = tokenizer_decode(tok, id, &len);
    for (int i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        int printable_ascii = c >= 0x20 && c < 0x7f;
        int whitespace = c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
        if (printable_ascii || whitespace || c >= 0x80) fputc(c, f);
    }
}

#endif // ZT_TOKENIZER_H
