// tokenizer.h — GPT-2's byte-level BPE in both directions: token id -> bytes (decode, for samples)
// and bytes -> token ids (encode, for making token shards in C, with no Python).
//
// Decoding needs only the vocabulary, llm.c's tokenizer file (data/gpt2_tokenizer.bin, written by
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
// Encoding also needs the merge list, data/gpt2_merges.bin (dev/make_merges.py; format at
// tokenizer_load_merges), and gives exactly the ids of tiktoken's GPT-2 `encode_ordinary`:
//   1. Pre-tokenization: the text is cut into pieces as GPT-2's split pattern does,
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      hand-written (tokenizer_piece_length), with the classes \p{L}, \p{N}, \s of Unicode 16.0.0
//      from unicode_tables.h (what tiktoken 0.14.0's regex uses; see dev/make_unicode_tables.py).
//   2. BPE per piece, on raw bytes (GPT-2's byte-to-unicode mapping is only a spelling in its
//      files): start from one-byte tokens, repeatedly join the adjacent pair whose merge has the
//      lowest rank (the leftmost on ties) until no pair has a merge (tokenizer_bpe: a heap,
//      O(n log n) in the piece length n, so a megabyte of spaces is no problem).
//   3. A cache from piece bytes to ids (pieces up to 64 bytes) skips step 2 for repeated words.
// "<|endoftext|>" in the text is plain text (tiktoken's encode_ordinary); the EOT id is only
// written by whoever separates documents (tokenize_file_to_shards).
//
// Malformed UTF-8: a byte that does not start a well-formed UTF-8 sequence (Unicode's Table 3-7:
// no overlong forms, no surrogates, nothing above U+10FFFF, no truncated sequence) is a character
// of its own, of class "other" (neither letter, number nor space), and is encoded through its
// one-byte token like any byte. This is what the pattern does on text decoded with Python's
// errors="surrogateescape" (each bad byte becomes a lone surrogate, which is "other"), and it is
// how dev/tokenizer_reference.py computes the expected ids for such input. Nothing is replaced or
// dropped, so decoding the ids of any byte string gives back exactly those bytes.
//
// Speed: the whole KJV (4.3 MB, 1.14 M tokens) encodes in about 0.05 s on one core, ~100 MB/s
// (test/test_tokenizer.h prints it). Encoding writes to the Tokenizer's cache and work arrays: one
// thread per Tokenizer. Limits: ids must fit uint16 (V <= 65536); a single piece must be under
// 4 GiB (a file that is one such run of spaces or punctuation is refused with "out of memory").
//
// Memory per piece, not capped: BPE works on a whole piece (a run the pattern keeps together:
// letters, digits, punctuation or spaces; a file that is 10 MB of "a" is one piece), and its work
// arrays take 42 bytes per byte of the longest piece so far, its length rounded up to a power of
// two (TOKENIZER_BPE_BYTES_PER_CAP: next and prev 4 + 4, part_id 2, up to 2n heap entries of 16).
// That is 42 to 84 bytes per byte of address space; what is touched (resident) is 10 bytes per
// byte plus 16 per heap entry in use: measured 26.6 bytes per byte for a 1 MB or 10 MB run of "a",
// "1" or "!" (10 MB: 260 MB resident, 705 MB allocated) and 12.1 for a run of spaces, at most 42
// in theory; the ids (2 bytes each) and the text come on top. The arrays only grow, and live until
// tokenizer_free. No cap: splitting a long piece would change ids (tiktoken has no such split),
// so text with megabyte runs needs memory to match (test/test_tokenizer.h: tok_bpe_memory_long_piece).
//
// Header-only, all functions static: include it in one translation unit. Compiles as C, as C++
// and under nvcc (host code only; the nvcc build of this file has not been tried).
// defines: Tokenizer, tokenizer_init, tokenizer_decode, tokenizer_print, tokenizer_free,
//          tokenizer_load_merges, tokenizer_encode, tokenizer_piece_length,
//          tokenize_file_to_shards, tokenize_file_to_shards_ex, TokenizeStats
//
// May call: dataloader.h (write_token_shard), unicode_tables.h and the C library.
#ifndef ZT_TOKENIZER_H
#define ZT_TOKENIZER_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataloader.h"      // defines: write_token_shard (atomic shard files)
#include "unicode_tables.h"  // defines: unicode_ranges, UC_L, UC_N, UC_S (generated)

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tokenizer.h reads little-endian files with plain loads: big-endian hosts are not supported"
#endif

#define TOKENIZER_MAGIC 20240328u
#define TOKENIZER_HEADER_BYTES 1024        // 256 uint32
#define TOKENIZER_MAX_VOCAB (1u << 24)     // a sanity bound on the header, far above any GPT vocabulary
#define TOKENIZER_UNKNOWN "<|?|>"          // what an id outside the vocabulary decodes to

// The encoder's state: the merge table, the piece cache and the BPE work arrays. All zero / NULL
// until tokenizer_load_merges; the cache and work arrays grow on first use.
typedef struct { uint32_t key, rank_plus1; } TokenizerPair;  // (left << 16 | right) -> rank + 1; 0: free
typedef struct { uint32_t rank, left, mid, end; } TokenizerMerge; // candidate: join [left,mid) + [mid,end)
typedef struct {
    uint64_t hash;        // FNV-1a of the piece, never 0 (0 marks a free slot)
    uint32_t bytes_at;    // the piece: cache_bytes[bytes_at .. bytes_at + len)
    uint32_t ids_at;      // its ids:   cache_ids[ids_at .. ids_at + nids)
    uint16_t len, nids;
} TokenizerCacheSlot;
typedef struct {
    uint32_t nmerges;             // M; 0: no merges loaded, cannot encode
    uint16_t byte_id[256];        // byte b -> id of its one-byte token
    uint16_t* merged_id;          // (M) rank -> the token that merge makes
    TokenizerPair* pairs;         // (pair_mask + 1) open addressing, (left, right) -> rank
    uint32_t pair_mask;
    TokenizerCacheSlot* cache;    // (TOKENIZER_CACHE_SLOTS) piece -> ids, NULL until first use
    uint32_t cache_used;
    unsigned char* cache_bytes;   // the cached pieces, back to back
    size_t cache_nbytes, cache_cap_bytes;
    uint16_t* cache_ids;          // their ids, back to back
    size_t cache_nids, cache_cap_ids;
    uint32_t* next;               // (work_cap) BPE parts: part at byte s is [s, next[s]); 0: absorbed
    uint32_t* prev;               // (work_cap) start of the part before the part at s
    uint16_t* part_id;            // (work_cap) token id of the part at s
    TokenizerMerge* heap;         // (2 * work_cap) candidate merges, min-heap on (rank, left)
    size_t work_cap;
} TokenizerEncoder;

typedef struct {
    uint32_t vocab_size;  // V
    int eot_token;        // id of <|endoftext|>, -1 when the file (version 1) does not say
    char** token_table;   // (V) id -> the token's bytes, NUL-terminated; a token may itself be
                          //     the byte 0, so always use token_len, never strlen
    uint8_t* token_len;   // (V) id -> number of bytes, 1..255
    char* bytes;          // every token's bytes followed by a NUL, back to back: the one
                          //     allocation token_table points into
    TokenizerEncoder enc; // encoding: tokenizer_load_merges fills it
} Tokenizer;

// Release the encoder's tables (the vocabulary stays); safe when none are loaded.
static inline void tokenizer_free_encoder(Tokenizer* tok) {
    TokenizerEncoder* e = &tok->enc;
    free(e->merged_id);
    free(e->pairs);
    free(e->cache);
    free(e->cache_bytes);
    free(e->cache_ids);
    free(e->next);
    free(e->prev);
    free(e->part_id);
    free(e->heap);
    memset(e, 0, sizeof(*e));
}

// Release everything tok holds; safe on a zeroed or already freed Tokenizer.
static inline void tokenizer_free(Tokenizer* tok) {
    tokenizer_free_encoder(tok);
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

// -----------------------------------------------------------------------------------------------
// Encoding, step 1: characters and pre-tokenization
//
// The text is read as UTF-8, one character at a time: its byte length and its class (letter,
// number, space, other). tokenizer_piece_length then applies the split pattern's alternatives in
// their order at the start of the remaining text, as a backtracking regex engine would:
//   's 't 're 've 'm 'll 'd           contractions, ASCII apostrophe, lower case only ("I'M" is
//                                     "I", "'", "M"); only at the start of a piece
//    ?\p{L}+  ?\p{N}+  ?[^\s\p{L}\p{N}]+   an optional U+0020 space, then a run of one class
//   \s+(?!\S)                         a space run: all of it at the end of the text, else all
//                                     but its last character (which then starts the next piece:
//                                     " word" if it is U+0020, a piece of its own otherwise)
//   \s+                               a single space character before a non-space
// Numbers are not split into groups (GPT-2 keeps "12345678901234567890" as one piece).

// How far past a piece's end the bytes can still change that piece: at most 6 (a space run's last
// character, up to 3 bytes, and the up to 3 bytes that show whether the next one is a space too:
// "  \u3000\u3000x" cut inside the second U+3000 looks like a shorter run). 8 to be safe;
// test/test_tokenizer.h tries every cut of a text (and fails with 5).
#define TOKENIZER_LOOKAHEAD 8

// Length of the well-formed UTF-8 sequence starting s[0..n) (Unicode Table 3-7), with its code
// point in *cp; 0 when s[0] does not start one (then s[0] is a malformed byte: class "other").
static inline int tokenizer_utf8(const unsigned char* s, size_t n, uint32_t* cp) {
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1Fu; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0Fu; lo = c == 0xE0 ? 0xA0 : 0x80; hi = c == 0xED ? 0x9F : 0xBF; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07u; lo = c == 0xF0 ? 0x90 : 0x80; hi = c == 0xF4 ? 0x8F : 0xBF; }
    else return 0;  // 80..C1 (continuation bytes, overlong lead bytes) and F5..FF never start one
    if ((size_t)len > n || s[1] < lo || s[1] > hi) return 0;
    v = (v << 6) | (s[1] & 0x3Fu);
    for (int i = 2; i < len; i++) {
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    *cp = v;
    return len;
}

// Class of code point cp: UC_L, UC_N, UC_S or UC_OTHER (binary search of unicode_tables.h).
static inline int tokenizer_unicode_class(uint32_t cp) {
    int lo = 0, hi = UNICODE_NRANGES - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < unicode_ranges[mid].lo) hi = mid - 1;
        else if (cp > unicode_ranges[mid].hi) lo = mid + 1;
        else return unicode_ranges[mid].cls;
    }
    return UC_OTHER;
}

// Class of the character at s[0..n) (n >= 1), its length in bytes in *len. ASCII without the
// table; a malformed byte is one "other" character.
static inline int tokenizer_char_class(const unsigned char* s, size_t n, int* len) {
    unsigned char c = s[0];
    if (c < 0x80) {
        *len = 1;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return UC_L;
        if (c >= '0' && c <= '9') return UC_N;
        if (c == ' ' || (c >= '\t' && c <= '\r')) return UC_S;  // \t \n \v \f \r
        return UC_OTHER;
    }
    uint32_t cp;
    int l = tokenizer_utf8(s, n, &cp);
    *len = l ? l : 1;
    return l ? tokenizer_unicode_class(cp) : UC_OTHER;
}

// Length in bytes of the piece that starts text s[0..n) (n >= 1), the text ending at n.
static inline size_t tokenizer_piece_length(const unsigned char* s, size_t n) {
    // 's 't 're 've 'm 'll 'd
    if (s[0] == '\'' && n >= 2) {
        unsigned char a = s[1], b = n >= 3 ? s[2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    int len;
    int cls = tokenizer_char_class(s, n, &len);
    size_t i = 0;
    if (s[0] == ' ' && n >= 2) {  // " ?": a space joins the run that follows it, if not a space run
        int c1 = tokenizer_char_class(s + 1, n - 1, &len);
        if (c1 != UC_S) {
            cls = c1;
            i = 1;
        }
    }
    if (cls != UC_S) {  //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+
        while (i < n && tokenizer_char_class(s + i, n - i, &len) == cls) i += (size_t)len;
        return i;
    }
    size_t last = 0;  // start of the space run's last character
    while (i < n && tokenizer_char_class(s + i, n - i, &len) == UC_S) {
        last = i;
        i += (size_t)len;
    }
    if (i == n) return n;         // \s+(?!\S) at the end of the text: the whole run
    return last > 0 ? last : i;   // \s+(?!\S): all but the last character; \s+: a single one
}

// -----------------------------------------------------------------------------------------------
// Encoding, step 2: the merge table and BPE
//
// The merge table is a hash table from a pair of adjacent token ids to the rank of the merge
// that joins them (GPT-2's rank r makes token 256 + r; the file says which token, we don't
// assume it). BPE keeps a piece as a linked list of parts, each a token, and a min-heap of the
// possible merges of neighbouring parts ordered by (rank, position): the lowest rank first, the
// leftmost on ties, as GPT-2's encoder.py and tiktoken do. A merge changes two parts, so heap
// entries naming them are stale: an entry records both parts' extents and is skipped when they
// no longer hold (a part's token is fixed by its extent).
//
// Pairs, not concatenations: tiktoken looks a pair's rank up by the bytes of the two tokens
// joined (any split of a token counts), GPT-2 by the pair itself (only the split vocab.bpe lists).
// On GPT-2's vocabulary the two gave the same ids on every word of the KJV and on 500,000 random
// pieces we tried; the fixture tests include random pieces as well.

#define TOKENIZER_MERGES_MAGIC 20261130u
#define TOKENIZER_MERGES_VERSION 1u
#define TOKENIZER_MERGES_HEADER_BYTES 1024   // 256 uint32
#define TOKENIZER_NO_MERGE UINT32_MAX

// Format a one-line error into err (if given) and release the encoder's tables. Returns -1.
__attribute__((format(printf, 4, 5)))
static inline int tokenizer_merges_fail(Tokenizer* tok, char* err, size_t errlen, const char* fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    tokenizer_free_encoder(tok);
    return -1;
}

// Slot of pair (left, right) in the table: where it is, or the free slot where it would go.
static inline uint32_t tokenizer_pair_slot(const TokenizerEncoder* e, uint32_t key) {
    uint32_t i = (uint32_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> 32) & e->pair_mask;
    while (e->pairs[i].rank_plus1 != 0 && e->pairs[i].key != key) i = (i + 1) & e->pair_mask;
    return i;
}

// Rank of the merge joining tokens left and right, TOKENIZER_NO_MERGE if there is none.
static inline uint32_t tokenizer_pair_rank(const TokenizerEncoder* e, uint32_t left, uint32_t right) {
    const TokenizerPair* p = &e->pairs[tokenizer_pair_slot(e, left << 16 | right)];
    return p->rank_plus1 ? p->rank_plus1 - 1 : TOKENIZER_NO_MERGE;
}

// Read the merge file at `path` (written by dev/make_merges.py) into tok, whose vocabulary
// (tokenizer_init) must be loaded: every merge is checked against it. Format, little-endian:
//   header      256 uint32: [0] = 20261130 (magic), [1] = 1 (version), [2] = M merges,
//               [3] = V, the vocabulary size the ids refer to (must equal the tokenizer file's)
//   byte_to_id  256 uint16: id of the one-byte token of byte b (GPT-2's are not in byte order)
//   merges      M x {uint16 left, right, merged}, rank order: merge r joins left+right into merged
// Checked: sizes, magic, version, V; byte_to_id[b] is a one-byte token holding b; each merge joins
// tokens that already exist (byte tokens or earlier merges) into a new token whose bytes are
// left's followed by right's; no pair twice. Returns 0, or -1 with a one-line message in err
// naming the file, and the encoder left empty (the vocabulary stays loaded).
static inline int tokenizer_load_merges(Tokenizer* tok, const char* path, char* err, size_t errlen) {
    tokenizer_free_encoder(tok);
    if (!tok->token_table) {
        return tokenizer_merges_fail(tok, err, errlen, "merges %s: load the vocabulary (tokenizer_init) first: "
                                     "the merges are checked against it", path);
    }
    FILE* f = fopen(path, "rb");
    if (!f) {
        return tokenizer_merges_fail(tok, err, errlen, "merges %s: cannot open: %s (HINT: GPT-2's is made by "
                                     "`python3 dev/make_merges.py`)", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return tokenizer_merges_fail(tok, err, errlen, "merges %s: not a readable regular file", path);
    }
    size_t size = (size_t)st.st_size;
    unsigned char* file = (unsigned char*)malloc(size + 1);
    if (!file) {
        fclose(f);
        return tokenizer_merges_fail(tok, err, errlen, "merges %s: out of memory for %zu bytes", path, size);
    }
    int read_ok = fread(file, 1, size, f) == size;
    fclose(f);
    if (!read_ok) {
        free(file);
        return tokenizer_merges_fail(tok, err, errlen, "merges %s: read error", path);
    }
#define MERGES_FAIL(...) do { free(file); return tokenizer_merges_fail(tok, err, errlen, __VA_ARGS__); } while (0)
    // --- header and size
    if (size < TOKENIZER_MERGES_HEADER_BYTES + 512) {
        MERGES_FAIL("merges %s: truncated header: the file is %zu bytes, the header and byte table alone are %d",
                    path, size, TOKENIZER_MERGES_HEADER_BYTES + 512);
    }
    uint32_t header[4];
    memcpy(header, file, sizeof(header));
    if (header[0] != TOKENIZER_MERGES_MAGIC) {
        MERGES_FAIL("merges %s: wrong magic %u (expected %u): not a merges file from dev/make_merges.py",
                    path, header[0], TOKENIZER_MERGES_MAGIC);
    }
    if (header[1] != TOKENIZER_MERGES_VERSION) {
        MERGES_FAIL("merges %s: unsupported version %u (this reader knows %u)", path, header[1], TOKENIZER_MERGES_VERSION);
    }
    uint32_t M = header[2], V = header[3];
    if (V != tok->vocab_size || V > 65536) {
        MERGES_FAIL("merges %s: made for a vocabulary of %u tokens, the tokenizer file has %u (and ids must fit uint16)",
                    path, V, tok->vocab_size);
    }
    if (M == 0 || M >= V || size != TOKENIZER_MERGES_HEADER_BYTES + 512 + 6 * (size_t)M) {
        MERGES_FAIL("merges %s: %s: the header says %u merges, which needs %zu bytes, the file is %zu",
                    path, M == 0 || M >= V ? "implausible merge count" : "wrong size", M,
                    TOKENIZER_MERGES_HEADER_BYTES + 512 + 6 * (size_t)M, size);
    }
    const uint16_t* byte_to_id = (const uint16_t*)(file + TOKENIZER_MERGES_HEADER_BYTES);
    const uint16_t* rec = byte_to_id + 256;  // (M, 3)

    // --- tables: merged ids by rank; the pair hash at most half full
    TokenizerEncoder* e = &tok->enc;
    uint32_t cap = 1;
    while (cap < 2 * M) cap <<= 1;
    unsigned char* exists = (unsigned char*)calloc(V, 1);  // token made by a byte or an earlier merge
    e->merged_id = (uint16_t*)malloc(M * sizeof(uint16_t));
    e->pairs = (TokenizerPair*)calloc(cap, sizeof(TokenizerPair));
    e->pair_mask = cap - 1;
    if (!exists || !e->merged_id || !e->pairs) {
        free(exists);
        MERGES_FAIL("merges %s: out of memory for %u merges", path, M);
    }
#undef MERGES_FAIL
#define MERGES_FAIL(...) do { free(file); free(exists); return tokenizer_merges_fail(tok, err, errlen, __VA_ARGS__); } while (0)
    for (int b = 0; b < 256; b++) {
        uint16_t id = byte_to_id[b];
        if (id >= V || tok->token_len[id] != 1 || (unsigned char)tok->token_table[id][0] != b || exists[id]) {
            MERGES_FAIL("merges %s: byte %d maps to token %u, which is not the vocabulary's one-byte token for it", path, b, id);
        }
        e->byte_id[b] = id;
        exists[id] = 1;
    }
    for (uint32_t r = 0; r < M; r++) {
        uint32_t left = rec[3 * r], right = rec[3 * r + 1], merged = rec[3 * r + 2];
        if (left >= V || right >= V || merged >= V || !exists[left] || !exists[right] || exists[merged]) {
            MERGES_FAIL("merges %s: merge %u (%u + %u -> %u) uses a token no earlier merge made, or remakes one",
                        path, r, left, right, merged);
        }
        size_t nl = tok->token_len[left], nr = tok->token_len[right];
        if (tok->token_len[merged] != nl + nr || memcmp(tok->token_table[merged], tok->token_table[left], nl) != 0 ||
            memcmp(tok->token_table[merged] + nl, tok->token_table[right], nr) != 0) {
            MERGES_FAIL("merges %s: merge %u (%u + %u -> %u): the vocabulary's bytes of %u are not those of %u then %u",
                        path, r, left, right, merged, merged, left, right);
        }
        uint32_t slot = tokenizer_pair_slot(e, left << 16 | right);
        if (e->pairs[slot].rank_plus1 != 0) {
            MERGES_FAIL("merges %s: merge %u repeats the pair %u + %u of merge %u", path, r, left, right, e->pairs[slot].rank_plus1 - 1);
        }
        e->pairs[slot].key = left << 16 | right;
        e->pairs[slot].rank_plus1 = r + 1;
        e->merged_id[r] = (uint16_t)merged;
        exists[merged] = 1;
    }
#undef MERGES_FAIL
    free(exists);
    free(file);
    e->nmerges = M;
    return 0;
}

// Grow *p (of *cap elements of `elem` bytes) to hold at least `need`, doubling. Returns 0 / -1.
static inline int tokenizer_grow(void** p, size_t* cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void* q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

// Append n ids to the growable buffer (*out, *nout, *cap). Returns 0 / -1 (out of memory).
static inline int tokenizer_append(uint16_t** out, size_t* nout, size_t* cap, const uint16_t* ids, size_t n) {
    if (tokenizer_grow((void**)out, cap, *nout + n, sizeof(uint16_t)) != 0) return -1;
    memcpy(*out + *nout, ids, n * sizeof(uint16_t));
    *nout += n;
    return 0;
}

// Push the candidate merge of parts [left, mid) and [mid, end) if their pair has a merge.
static inline void tokenizer_heap_push(TokenizerEncoder* e, size_t* nheap, uint32_t left, uint32_t mid, uint32_t end) {
    uint32_t rank = tokenizer_pair_rank(e, e->part_id[left], e->part_id[mid]);
    if (rank == TOKENIZER_NO_MERGE) return;
    TokenizerMerge m = {rank, left, mid, end};
    size_t i = (*nheap)++;
    while (i > 0) {  // sift up: (rank, left) smaller goes first
        size_t up = (i - 1) / 2;
        const TokenizerMerge* u = &e->heap[up];
        if (u->rank < m.rank || (u->rank == m.rank && u->left < m.left)) break;
        e->heap[i] = *u;
        i = up;
    }
    e->heap[i] = m;
}

static inline TokenizerMerge tokenizer_heap_pop(TokenizerEncoder* e, size_t* nheap) {
    TokenizerMerge top = e->heap[0], m = e->heap[--*nheap];
    size_t n = *nheap, i = 0;
    for (;;) {  // sift the last element down from the root
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && (e->heap[c + 1].rank < e->heap[c].rank ||
                          (e->heap[c + 1].rank == e->heap[c].rank && e->heap[c + 1].left < e->heap[c].left))) c++;
        if (m.rank < e->heap[c].rank || (m.rank == e->heap[c].rank && m.left < e->heap[c].left)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n > 0) e->heap[i] = m;
    return top;
}

// The BPE work arrays' bytes per unit of work_cap: next, prev (uint32), part_id (uint16) and two
// heap entries (TokenizerMerge, 16 bytes). See "Memory" at the top of this file.
#define TOKENIZER_BPE_BYTES_PER_CAP (2 * sizeof(uint32_t) + sizeof(uint16_t) + 2 * sizeof(TokenizerMerge))

static inline size_t tokenizer_bpe_work_bytes(const TokenizerEncoder* e) { return e->work_cap * TOKENIZER_BPE_BYTES_PER_CAP; }

// Make the BPE work arrays hold pieces of n bytes (capacity: n rounded up to a power of two, at
// least 64; they only grow). Returns 0 / -1 (out of memory).
static inline int tokenizer_bpe_reserve(TokenizerEncoder* e, size_t n) {
    if (n <= e->work_cap) return 0;
    size_t c = 64;
    while (c < n) c *= 2;
    uint32_t* next = (uint32_t*)realloc(e->next, c * sizeof(uint32_t));
    if (next) e->next = next;
    uint32_t* prev = (uint32_t*)realloc(e->prev, c * sizeof(uint32_t));
    if (prev) e->prev = prev;
    uint16_t* part_id = (uint16_t*)realloc(e->part_id, c * sizeof(uint16_t));
    if (part_id) e->part_id = part_id;
    TokenizerMerge* heap = (TokenizerMerge*)realloc(e->heap, 2 * c * sizeof(TokenizerMerge));
    if (heap) e->heap = heap;
    if (!next || !prev || !part_id || !heap) return -1;
    e->work_cap = c;
    return 0;
}

// BPE of one piece p[0..n) (n >= 1): append its ids. Returns 0 / -1 (out of memory).
static inline int tokenizer_bpe(TokenizerEncoder* e, const unsigned char* p, uint32_t n, uint16_t** out, size_t* nout, size_t* cap) {
    // The heap never holds more than 2n - 2 candidates: n - 1 first, then each merge pops one
    // (itself) and pushes at most two, and there are at most n - 1 merges.
    if (tokenizer_bpe_reserve(e, (size_t)n + 1) != 0) return -1;
    for (uint32_t i = 0; i < n; i++) {
        e->part_id[i] = e->byte_id[p[i]];
        e->next[i] = i + 1;
        e->prev[i] = i - 1;  // unused for i = 0
    }
    size_t nheap = 0;
    for (uint32_t i = 0; i + 1 < n; i++) tokenizer_heap_push(e, &nheap, i, i + 1, i + 2);
    while (nheap > 0) {
        TokenizerMerge m = tokenizer_heap_pop(e, &nheap);
        if (e->next[m.left] != m.mid || e->next[m.mid] != m.end) continue;  // stale: a part changed since
        e->part_id[m.left] = e->merged_id[m.rank];  // the left part absorbs the right one
        e->next[m.left] = m.end;
        e->next[m.mid] = 0;
        if (m.end < n) e->prev[m.end] = m.left;
        if (m.left > 0) tokenizer_heap_push(e, &nheap, e->prev[m.left], m.left, m.end);
        if (m.end < n) tokenizer_heap_push(e, &nheap, m.left, m.end, e->next[m.end]);
    }
    for (uint32_t s = 0; s < n; s = e->next[s]) {
        if (tokenizer_append(out, nout, cap, &e->part_id[s], 1) != 0) return -1;
    }
    return 0;
}

// -----------------------------------------------------------------------------------------------
// Encoding, step 3: the piece cache, and the whole text
//
// Natural text repeats its words, so a piece's ids are remembered: a hash table of
// TOKENIZER_CACHE_SLOTS slots, keyed by the piece's bytes (pieces of up to
// TOKENIZER_CACHE_MAX_PIECE bytes), emptied whenever it is 3/4 full (so its memory stays bounded:
// at most ~13 MB of pieces and ids, 6 MB of slots).

#define TOKENIZER_CACHE_SLOTS (1u << 18)
#define TOKENIZER_CACHE_MAX_PIECE 64

static inline uint64_t tokenizer_hash(const unsigned char* p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h ? h : 1;
}

// Append the ids of piece p[0..n) (n >= 1): from the cache, or by BPE (then cached).
static inline int tokenizer_encode_piece(TokenizerEncoder* e, const unsigned char* p, size_t n, uint16_t** out, size_t* nout, size_t* cap) {
    if (n == 1) return tokenizer_append(out, nout, cap, &e->byte_id[p[0]], 1);
    if (n > TOKENIZER_CACHE_MAX_PIECE) {
        if (n >= UINT32_MAX) return -1;  // the BPE work arrays index bytes with uint32
        return tokenizer_bpe(e, p, (uint32_t)n, out, nout, cap);
    }
    if (!e->cache) {
        e->cache = (TokenizerCacheSlot*)calloc(TOKENIZER_CACHE_SLOTS, sizeof(TokenizerCacheSlot));
        if (!e->cache) return -1;
    }
    uint64_t h = tokenizer_hash(p, n);
    uint32_t i = (uint32_t)h & (TOKENIZER_CACHE_SLOTS - 1);
    for (; e->cache[i].hash != 0; i = (i + 1) & (TOKENIZER_CACHE_SLOTS - 1)) {
        const TokenizerCacheSlot* s = &e->cache[i];
        if (s->hash == h && s->len == n && memcmp(e->cache_bytes + s->bytes_at, p, n) == 0) {
            return tokenizer_append(out, nout, cap, e->cache_ids + s->ids_at, s->nids);
        }
    }
    size_t first = *nout;
    if (tokenizer_bpe(e, p, (uint32_t)n, out, nout, cap) != 0) return -1;
    size_t nids = *nout - first;
    if (e->cache_used >= TOKENIZER_CACHE_SLOTS / 4 * 3) {  // full: start again, empty
        memset(e->cache, 0, TOKENIZER_CACHE_SLOTS * sizeof(TokenizerCacheSlot));
        e->cache_used = 0;
        e->cache_nbytes = e->cache_nids = 0;
        i = (uint32_t)h & (TOKENIZER_CACHE_SLOTS - 1);
    }
    if (tokenizer_grow((void**)&e->cache_bytes, &e->cache_cap_bytes, e->cache_nbytes + n, 1) != 0 ||
        tokenizer_grow((void**)&e->cache_ids, &e->cache_cap_ids, e->cache_nids + nids, sizeof(uint16_t)) != 0) return -1;
    TokenizerCacheSlot* s = &e->cache[i];
    s->hash = h;
    s->bytes_at = (uint32_t)e->cache_nbytes;
    s->ids_at = (uint32_t)e->cache_nids;
    s->len = (uint16_t)n;
    s->nids = (uint16_t)nids;
    memcpy(e->cache_bytes + e->cache_nbytes, p, n);
    memcpy(e->cache_ids + e->cache_nids, *out + first, nids * sizeof(uint16_t));
    e->cache_nbytes += n;
    e->cache_nids += nids;
    e->cache_used++;
    return 0;
}

// Encode the pieces of text[0..n). final = 1: the text ends at n, everything is encoded.
// final = 0: more text follows n; only the pieces that end at least TOKENIZER_LOOKAHEAD bytes
// before n are encoded (no byte past that can change them), and *consumed says how many bytes
// that was, so the caller carries the rest over. Appends to (*out, *nout, *cap). Returns 0, or -1 if the merges are not loaded or
// memory ran out.
static inline int tokenizer_encode_part(Tokenizer* tok, const unsigned char* text, size_t n, int final, size_t* consumed,
                                        uint16_t** out, size_t* nout, size_t* cap) {
    *consumed = 0;
    if (tok->enc.nmerges == 0) return -1;
    size_t i = 0;
    while (i < n) {
        size_t len = tokenizer_piece_length(text + i, n - i);
        if (!final && i + len + TOKENIZER_LOOKAHEAD > n) break;
        if (tokenizer_encode_piece(&tok->enc, text + i, len, out, nout, cap) != 0) return -1;
        i += len;
    }
    *consumed = i;
    return 0;
}

// Append the GPT-2 ids of text[0..n) (one whole text: its end is the end of the pattern's input)
// to the growable buffer *out of *cap ids, *nout of them in use (*out may start NULL with
// *nout = *cap = 0; it is realloc'ed as needed, the caller frees it). Any bytes are accepted
// (malformed UTF-8: see the top of this file). Returns 0, or -1 if tokenizer_load_merges has not
// succeeded or memory ran out (some ids may have been appended).
static inline int tokenizer_encode(Tokenizer* tok, const unsigned char* text, size_t n, uint16_t** out, size_t* nout, size_t* cap) {
    size_t consumed;
    return tokenizer_encode_part(tok, text, n, 1, &consumed, out, nout, cap);
}

// -----------------------------------------------------------------------------------------------
// Tokenizing a text file into llm.c token shards (./train -tokenize)
//
// Documents: a line that is exactly "<|endoftext|>" (at the start of the file or after a "\n",
// followed by "\n" or the end of the file; "\r\n" does not count) separates documents and is not
// part of either (the "\n" that ends the line before it stays with the document before it).
// Without such lines the whole file is one document. A document of zero bytes
// (two separator lines in a row, or one at the start or end) is skipped. Each document is encoded
// on its own (its end is the end of the pattern's input) and its ids are preceded by EOT, as in
// llm.c's data scripts and dev/prepare_data.py.
//
// Splits: document i (0-based, skipped empty ones not counted) goes to val when val_every > 0 and
// i % val_every == val_every - 1, else to train. Each split's tokens fill shards of shard_tokens
// tokens in order (documents may straddle shards; the last shard is partial), written as
// PREFIX_train_000000.bin, PREFIX_train_000001.bin, ... and PREFIX_val_000000.bin, ... (llm.c's
// naming) by write_token_shard: a temporary name, fsync, rename, so no partial shard ever appears
// under a final name. A split that gets no document writes no file.
//
// Streaming: the input is read in chunks of chunk_bytes; the bytes that might still belong to an
// unfinished piece (the last TOKENIZER_LOOKAHEAD bytes, and a separator that may be starting) are
// carried over to the next chunk, so a piece or a separator across a chunk boundary is handled as
// if the file were read whole. Memory: the chunk, the longest piece, one shard per split.
//
// Errors (a one-line message naming the file; nonzero return; every shard this run had written is
// removed again): unreadable input, empty input, input with no text but separators, missing or
// unwritable output directory, a write that fails. Shards of an earlier run with the same prefix
// are replaced where the numbers coincide and left alone beyond: use a fresh prefix.

#define TOKENIZE_CHUNK_BYTES ((size_t)1 << 20)
#define TOKENIZE_SEPARATOR "<|endoftext|>"
#define TOKENIZE_SEPARATOR_LEN 13

typedef struct {
    int64_t bytes;         // input bytes read
    int64_t documents[2];  // [0] train, [1] val
    int64_t tokens[2];     // tokens written, EOTs included
    int shards[2];         // shard files written
} TokenizeStats;

typedef struct {           // one split's output
    const char* name;      // "train" or "val"
    uint16_t* toks;        // the shard being filled, at most shard_tokens
    size_t n, cap;
    int shards;            // shard files written so far
} TokenizeSplit;

__attribute__((format(printf, 3, 4)))
static inline int tokenize_error(char* err, size_t errlen, const char* fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static inline void tokenize_shard_path(char* path, size_t cap, const char* prefix, const char* split, int index) {
    snprintf(path, cap, "%s_%s_%06d.bin", prefix, split, index);
}

// Write the split's buffered tokens as its next shard. Returns 0 / -1 with the message in err.
static inline int tokenize_flush(TokenizeSplit* s, const char* prefix, char* err, size_t errlen) {
    char path[4096];
    tokenize_shard_path(path, sizeof(path), prefix, s->name, s->shards);
    if (write_token_shard(path, s->toks, (int64_t)s->n, err, errlen) != 0) return -1;
    s->shards++;
    s->n = 0;
    return 0;
}

// Append ids to the split, writing a shard each time one fills up. Returns 0 / -1.
static inline int tokenize_emit(TokenizeSplit* s, const uint16_t* ids, size_t n, size_t shard_tokens, const char* prefix,
                                char* err, size_t errlen) {
    while (n > 0) {
        size_t take = shard_tokens - s->n < n ? shard_tokens - s->n : n;
        if (tokenizer_grow((void**)&s->toks, &s->cap, s->n + take, sizeof(uint16_t)) != 0) {
            return tokenize_error(err, errlen, "tokenize %s: out of memory for a shard of %zu tokens", prefix, shard_tokens);
        }
        memcpy(s->toks + s->n, ids, take * sizeof(uint16_t));
        s->n += take;
        ids += take;
        n -= take;
        if (s->n == shard_tokens && tokenize_flush(s, prefix, err, errlen) != 0) return -1;
    }
    return 0;
}

// Is there a line start at p of buf? (p = 0: the caller knows, line_start)
static inline int tokenize_line_start(const unsigned char* buf, size_t p, int line_start) {
    return p == 0 ? line_start : buf[p - 1] == '\n';
}

// The first complete separator line in buf[0..len): its start in *at and length (with its "\n",
// or without one at the end of the input) in *seplen. Returns 1 if found, else 0.
static inline int tokenize_find_separator(const unsigned char* buf, size_t len, int line_start, int eof, size_t* at, size_t* seplen) {
    for (size_t p = 0; p + TOKENIZE_SEPARATOR_LEN <= len; p++) {
        if (!tokenize_line_start(buf, p, line_start) || memcmp(buf + p, TOKENIZE_SEPARATOR, TOKENIZE_SEPARATOR_LEN) != 0) {
            const void* nl = memchr(buf + p, '\n', len - p);  // jump to the next line start
            if (!nl) return 0;
            p = (size_t)((const unsigned char*)nl - buf);
            continue;
        }
        size_t end = p + TOKENIZE_SEPARATOR_LEN;
        if (end < len && buf[end] == '\n') {
            *at = p;
            *seplen = TOKENIZE_SEPARATOR_LEN + 1;
            return 1;
        }
        if (end == len && eof) {
            *at = p;
            *seplen = TOKENIZE_SEPARATOR_LEN;
            return 1;
        }
    }
    return 0;
}

// Where the document might end in buf[0..len) when more input follows: the start of a line at the
// end of buf that could still become a separator line, else len. Bytes before it are document.
static inline size_t tokenize_text_limit(const unsigned char* buf, size_t len, int line_start) {
    size_t p = len > TOKENIZE_SEPARATOR_LEN ? len - TOKENIZE_SEPARATOR_LEN : 0;
    for (; p < len; p++) {
        if (tokenize_line_start(buf, p, line_start) && memcmp(buf + p, TOKENIZE_SEPARATOR, len - p) == 0) return p;
    }
    return len;
}

// tokenize_file_to_shards with the chunk size given (tests use tiny ones) and, if stats is not
// NULL, counts of what was read and written.
static inline int tokenize_file_to_shards_ex(Tokenizer* tok, const char* in_path, const char* out_prefix, int val_every,
                                             int64_t shard_tokens, size_t chunk_bytes, TokenizeStats* stats,
                                             char* err, size_t errlen) {
    TokenizeStats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof(*stats));
    // --- arguments, then the output directory, then the input: fail before writing anything
    if (tok->enc.nmerges == 0 || tok->eot_token < 0) {
        return tokenize_error(err, errlen, "tokenize %s: the tokenizer has no %s (HINT: tokenizer_init with a version-2 "
                              "file, then tokenizer_load_merges)", in_path, tok->enc.nmerges == 0 ? "merges" : "EOT id");
    }
    size_t plen = strlen(out_prefix);
    if (plen == 0 || out_prefix[plen - 1] == '/' || plen > 4000) {
        return tokenize_error(err, errlen, "tokenize: output prefix '%s' must name files, e.g. DIR/name "
                              "(giving DIR/name_train_000000.bin)", out_prefix);
    }
    if (val_every < 0 || shard_tokens < 1 || shard_tokens > INT32_MAX || chunk_bytes < 1) {
        return tokenize_error(err, errlen, "tokenize %s: bad arguments: val_every = %d (>= 0), shard_tokens = %lld "
                              "(1..%d), chunk = %zu (>= 1)", in_path, val_every, (long long)shard_tokens, INT32_MAX, chunk_bytes);
    }
    char dir[4096];
    const char* slash = strrchr(out_prefix, '/');
    if (slash) snprintf(dir, sizeof(dir), "%.*s", slash == out_prefix ? 1 : (int)(slash - out_prefix), out_prefix);
    else snprintf(dir, sizeof(dir), ".");
    struct stat st;
    if (stat(dir, &st) != 0) {
        return tokenize_error(err, errlen, "tokenize: output directory %s (of prefix %s): %s", dir, out_prefix, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
        return tokenize_error(err, errlen, "tokenize: output directory %s (of prefix %s) is not a directory", dir, out_prefix);
    }
    if (access(dir, W_OK | X_OK) != 0) {
        return tokenize_error(err, errlen, "tokenize: output directory %s (of prefix %s) is not writable: %s", dir, out_prefix,
                              strerror(errno));
    }
    FILE* f = fopen(in_path, "rb");
    if (!f) return tokenize_error(err, errlen, "tokenize: input %s: cannot open: %s", in_path, strerror(errno));
    if (fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
        fclose(f);
        return tokenize_error(err, errlen, "tokenize: input %s: cannot read: %s", in_path, S_ISDIR(st.st_mode) ? "is a directory" : strerror(errno));
    }

    // --- the stream: buf[at..len) is input not yet encoded, starting inside the current document
    TokenizeSplit split[2] = {{"train", NULL, 0, 0, 0}, {"val", NULL, 0, 0, 0}};
    unsigned char* buf = NULL;
    size_t at = 0, len = 0, bufcap = 0;
    uint16_t* ids = NULL;    // one pass's ids, then handed to the document's split
    size_t nids = 0, idscap = 0;
    uint16_t eot = (uint16_t)tok->eot_token;
    int eof = 0, line_start = 1, in_doc = 0, which = 0, rc = 0, look_again = 0;
    int64_t ndocs = 0;
    while (rc == 0) {
        if (!eof && !look_again) {  // read a chunk (a bigger one while a long piece is carried)
            if (at > 0) memmove(buf, buf + at, len - at);
            len -= at;
            at = 0;
            size_t want = chunk_bytes > len ? chunk_bytes : len;
            if (tokenizer_grow((void**)&buf, &bufcap, len + want, 1) != 0) {
                rc = tokenize_error(err, errlen, "tokenize: input %s: out of memory for %zu bytes", in_path, len + want);
                break;
            }
            size_t got = fread(buf + len, 1, want, f);
            if (got < want && ferror(f)) {
                rc = tokenize_error(err, errlen, "tokenize: input %s: read error: %s", in_path, strerror(errno));
                break;
            }
            eof = got < want;
            len += got;
            stats->bytes += (int64_t)got;
        }
        // where this pass stops: the document's end (a separator line, or the end of the input),
        // else before any line at the end of buf that may still turn into a separator
        unsigned char* b = buf + at;
        size_t n = len - at, sep = 0, seplen = 0;
        int found = tokenize_find_separator(b, n, line_start, eof, &sep, &seplen);
        int doc_ends = found || eof;
        size_t limit = found ? sep : eof ? n : tokenize_text_limit(b, n, line_start);
        nids = 0;
        if (limit > 0 && !in_doc) {  // the document's first byte: EOT, and choose its split
            which = val_every > 0 && ndocs % val_every == val_every - 1;
            in_doc = 1;
            ndocs++;
            stats->documents[which]++;
            rc = tokenizer_append(&ids, &nids, &idscap, &eot, 1);
        }
        size_t used = 0;
        if (rc == 0) rc = tokenizer_encode_part(tok, b, limit, doc_ends, &used, &ids, &nids, &idscap);
        if (rc != 0) {
            rc = tokenize_error(err, errlen, "tokenize: input %s: out of memory while encoding", in_path);
            break;
        }
        stats->tokens[which] += (int64_t)nids;
        if (tokenize_emit(&split[which], ids, nids, (size_t)shard_tokens, out_prefix, err, errlen) != 0) {
            rc = -1;
            break;
        }
        if (doc_ends) {
            in_doc = 0;
            used = found ? sep + seplen : n;
        }
        if (used > 0) line_start = b[used - 1] == '\n';
        at += used;
        look_again = found;  // more separators may wait in buf: look before reading
        if (eof && !found) break;
    }
    fclose(f);
    free(buf);
    free(ids);
    if (rc == 0 && stats->bytes == 0) rc = tokenize_error(err, errlen, "tokenize: input %s is empty", in_path);
    if (rc == 0 && ndocs == 0) {
        rc = tokenize_error(err, errlen, "tokenize: input %s has no text, only \"%s\" separator lines", in_path, TOKENIZE_SEPARATOR);
    }
    for (int s = 0; s < 2 && rc == 0; s++) {  // the last, partial shards
        if (split[s].n > 0 && tokenize_flush(&split[s], out_prefix, err, errlen) != 0) rc = -1;
    }
    for (int s = 0; s < 2; s++) {
        if (rc != 0) {  // leave nothing behind: remove the shards this run wrote
            for (int i = 0; i < split[s].shards; i++) {
                char path[4096];
                tokenize_shard_path(path, sizeof(path), out_prefix, split[s].name, i);
                remove(path);
            }
        }
        stats->shards[s] = rc == 0 ? split[s].shards : 0;
        free(split[s].toks);
    }
    return rc;
}

// Tokenize the text file in_path into llm.c shards PREFIX_{train,val}_NNNNNN.bin (see above):
// documents separated by "<|endoftext|>" lines, EOT before each, every val_every-th document to
// val (0: none), at most shard_tokens tokens per shard. Needs tokenizer_init (a version-2 file,
// for the EOT id) and tokenizer_load_merges. Returns 0, or -1 with a one-line message in err and
// no shard left behind.
static inline int tokenize_file_to_shards(Tokenizer* tok, const char* in_path, const char* out_prefix, int val_every,
                                          int64_t shard_tokens, char* err, size_t errlen) {
    return tokenize_file_to_shards_ex(tok, in_path, out_prefix, val_every, shard_tokens, TOKENIZE_CHUNK_BYTES, NULL, err, errlen);
}

#endif // ZT_TOKENIZER_H
