// tokenizer.h — BPE in both directions: token id -> bytes (decode, for samples) and bytes -> token
// ids (encode, for making token shards in C, with no Python). Two sources: llm.c's GPT-2 tokenizer
// file + merge file (described first, below), and a Hugging Face tokenizer.json, byte-level (GPT-2,
// Llama 3, Qwen2 with NFC, SmolLM2) or SentencePiece-style (Mistral, Llama 2, Phi-3) BPE
// (tokenizer_json.h; the user's view in docs/tokenizers.md). Ids are uint32; -tokenize writes
// uint16 shards up to 65,536 ids, uint32 ones above, and encodes documents in parallel (OpenMP)
// with the output order unchanged.
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
// thread per Tokenizer. Ids are uint32 (any vocabulary); a single piece must be under
// 4 GiB (a file that is one such run of spaces or punctuation is refused with "out of memory").
//
// Memory per piece, not capped: BPE works on a whole piece (a run the pattern keeps together:
// letters, digits, punctuation or spaces; a file that is 10 MB of "a" is one piece), and its work
// arrays take 44 bytes per byte of the longest piece so far, its length rounded up to a power of
// two (TOKENIZER_BPE_BYTES_PER_CAP: next, prev and part_id 4 each, up to 2n heap entries of 16).
// That is 44 to 88 bytes per byte of address space; what is touched (resident) is 12 bytes per
// byte plus 16 per heap entry in use: measured 29.4 bytes per byte for a 4 MB run of "a" (it was
// 26.6 with uint16 ids), at most 44 in theory; the ids (4 bytes each) and the text come on top.
// The arrays only grow, and live until tokenizer_free. No cap: splitting a long piece would change
// ids (tiktoken has no such split), so text with megabyte runs needs memory to match
// (test/test_tokenizer.h: tok_bpe_memory_long_piece).
//
// The tokenizer.json reader and the pipeline it runs (normalizers, pre-tokenizers, byte-level and
// SentencePiece-style BPE, the safe cuts of a streamed text) are in tokenizer_json.h, which this
// file includes after its BPE engine.
//
// Header-only, all functions static: include it in one translation unit. Compiles as C, as C++
// and under nvcc (host code only; the nvcc build of this file has not been tried).
// defines: Tokenizer, tokenizer_init, tokenizer_decode, tokenizer_print, tokenizer_free,
//          tokenizer_load_merges, tokenizer_encode, tokenizer_piece_length,
//          tokenize_file_to_shards, tokenize_file_to_shards_ex, TokenizeStats,
//          TokenizerHF, tokenizer_write_hf, tokenizer_for_model, tokenize_write_ids,
//          tokenizer_export_files, TOKENIZER_DEFAULT_PATH (and, through tokenizer_json.h,
//          tokenizer_init_hf, tokenizer_nfc)
//
// May call: tokenizer_json.h, dataloader.h (write_token_shard, write_token_shard32),
// unicode_tables.h, unicode_nfc.h, safetensors.h (the JSON parser) and the C library.
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
#include "unicode_nfc.h"     // defines: nfc_ccc, nfc_decomp, nfc_decomp_pool, nfc_comp (generated)
#include "safetensors.h"     // defines: Json, json_parse, json_get, json_free (the strict parser)

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tokenizer.h reads little-endian files with plain loads: big-endian hosts are not supported"
#endif

#define TOKENIZER_MAGIC 20240328u
#define TOKENIZER_HEADER_BYTES 1024        // 256 uint32
#define TOKENIZER_MAX_VOCAB (1u << 24)     // a sanity bound on the header, far above any GPT vocabulary
#define TOKENIZER_UNKNOWN "<|?|>"          // what an id outside the vocabulary decodes to
#define TOKENIZER_DEFAULT_PATH "data/gpt2_tokenizer.bin"  // -tokenizer's default in flags.h (GPT-2, llm.c's file)

// The encoder's state: the merge table, the piece cache and the BPE work arrays. All zero / NULL
// until tokenizer_load_merges; the cache and work arrays grow on first use.
typedef struct { uint64_t key; uint32_t rank_plus1; } TokenizerPair;  // (left << 32 | right) -> rank + 1; 0: free
typedef struct { uint32_t rank, left, mid, end; } TokenizerMerge; // candidate: join [left,mid) + [mid,end)
typedef struct {
    uint64_t hash;        // FNV-1a of the piece, never 0 (0 marks a free slot)
    uint32_t bytes_at;    // the piece: cache_bytes[bytes_at .. bytes_at + len)
    uint32_t ids_at;      // its ids:   cache_ids[ids_at .. ids_at + nids)
    uint16_t len, nids;
} TokenizerCacheSlot;
typedef struct {
    uint32_t nmerges;             // M; 0: no merges loaded, cannot encode
    uint32_t byte_id[256];        // byte b -> id of its one-byte token
    uint32_t* merged_id;          // (M) rank -> the token that merge makes
    TokenizerPair* pairs;         // (pair_mask + 1) open addressing, (left, right) -> rank
    uint32_t pair_mask;
    TokenizerCacheSlot* cache;    // (TOKENIZER_CACHE_SLOTS) piece -> ids, NULL until first use
    uint32_t cache_used;
    unsigned char* cache_bytes;   // the cached pieces, back to back
    size_t cache_nbytes, cache_cap_bytes;
    uint32_t* cache_ids;          // their ids, back to back
    size_t cache_nids, cache_cap_ids;
    uint32_t* next;               // (work_cap) BPE parts: part at byte s is [s, next[s]); 0: absorbed
    uint32_t* prev;               // (work_cap) start of the part before the part at s
    uint32_t* part_id;            // (work_cap) token id of the part at s
    TokenizerMerge* heap;         // (2 * work_cap) candidate merges, min-heap on (rank, left)
    size_t work_cap;
} TokenizerEncoder;

// A Hugging Face tokenizer.json's pipeline (NULL in a Tokenizer read from llm.c's file): see
// "Hugging Face tokenizer.json" below for what each field means and what is accepted.
typedef struct {
    uint32_t id, len;     // the added token's id and its content's length in bytes
    const char* content;  // its content (raw text, matched in the input as it is)
    int special;          // "special": skipped when match_specials is 0
    int normalized;       // "normalized": matched in the normalized text (only differs with NFC)
    int lstrip, rstrip;   // the whitespace before / after a match is the token's too (removed from the text)
} TokenizerAdded;
enum { TOKENIZER_STEP_GPT2, TOKENIZER_STEP_LLAMA3, TOKENIZER_STEP_QWEN2, TOKENIZER_STEP_DIGITS, TOKENIZER_STEP_DIGIT_RUNS };
#define TOKENIZER_MAX_STEPS 8
// A normalizer step (tokenizer_json.h: tokenizer_hf_normalize): NFC, Prepend(a) (a before a
// stretch that is not empty), Replace(a -> b) (every a, left to right, a plain string).
enum { TOKENIZER_NORM_NFC, TOKENIZER_NORM_PREPEND, TOKENIZER_NORM_REPLACE };
typedef struct { int kind; char a[16], b[16]; uint32_t alen, blen; } TokenizerNorm;  // a, b: up to 15 bytes, NUL-terminated
enum { TOKENIZER_PREPEND_NEVER, TOKENIZER_PREPEND_FIRST, TOKENIZER_PREPEND_ALWAYS };
typedef struct {
    int nfc;                      // NFC is one of the normalizer's steps
    int nnorms;                   // normalizer steps, in order (0: no normalizer)
    TokenizerNorm norms[TOKENIZER_MAX_STEPS];
    int nsteps;                   // pre-tokenizer steps before ByteLevel, in order
    int steps[TOKENIZER_MAX_STEPS];
    // SentencePiece-style BPE (no ByteLevel: pieces are UTF-8 characters, spaces spelled as ▁)
    int sp;                       // 1: this kind; 0: byte-level BPE
    int metaspace;                // a Metaspace pre-tokenizer: ' ' -> meta, prepend, split
    unsigned char meta[4];        //     its replacement character (UTF-8, meta_len bytes: ▁ is E2 96 81)
    int meta_len;
    int prepend_scheme;           //     TOKENIZER_PREPEND_*: meta before the first stretch / every one / none
    int meta_split;               //     split: each piece starts at a meta (MergedWithNext)
    int byte_fallback;            // model.byte_fallback: a character not in model.vocab is its <0xXX> tokens
    uint32_t fallback_id[256];    //     byte -> id of "<0xXX>", UINT32_MAX: none
    int64_t unk_id;               // model.unk_token's id, -1: none (then byte_fallback covers every character: a file with neither is refused)
    int fuse_unk;                 // model.fuse_unk: a run of unknown characters is one unk
    int strip_start;              // decoder Strip(' ', start N) / Metaspace: leading spaces a decoded text drops
    int sp_cut;                   // no merge joins a character to an R after it (R: what ' ' becomes): a streamed text
                                  //     may be cut before a space (tokenizer_hf_last_cut_sp), a piece before each
                                  //     R that follows another character (tokenizer_hf_piece: cached words)
    unsigned char space_rep[16];  //     R (UTF-8, space_rep_len bytes)
    int space_rep_len;
    int mid_text, mid_stretch;    // streaming state: the text given continues one whose start was encoded
                                  //     (no Metaspace "first"), inside a stretch (no Prepend, no Metaspace prepend)
    int ignore_merges;            // model.ignore_merges: a piece in model.vocab is one token
    int any_lstrip;               // an added token takes the whitespace before it (lstrip): streamed cuts avoid such runs
    int match_specials;           // 1: special added tokens in the text are matched (tokenizers'
                                  //    default); 0: they are plain text (-tokenize; see below)
    int bos_token;                // the post-processor's leading special token (Llama 3's
                                  //    <|begin_of_text|>), -1 when it adds none
    int export_bos, export_eos;   // the BOS and EOS an export names (tokenizer_special_ids), -1: none
    TokenizerAdded* added;        // (nadded) sorted by first byte, then longest first
    int nadded;
    int added_first[257];         // added[added_first[b] .. added_first[b+1]) start with byte b
    char* strs;                   // model.vocab's keys and the added contents, back to back
    uint32_t* key_at;             // (V) id -> offset of its model.vocab key in strs, UINT32_MAX: none
    uint32_t* key_len;            // (V) its length
    uint32_t* vhash;              // (vhash_mask + 1) model.vocab key -> id + 1; 0: free
    uint32_t vhash_mask;
    unsigned char* scratch;       // a piece spelled in the byte-level alphabet (ignore_merges); SP: Metaspace's output
    size_t scratch_cap;
    uint32_t* cps;                // NFC work: code points
    size_t cps_cap;
    unsigned char* norm;          // NFC output
    size_t norm_cap;
    unsigned char* norm2;         // the other normalizer / Metaspace buffers (a step reads one, writes the next)
    size_t norm2_cap;
    unsigned char* norm3;
    size_t norm3_cap;
    char* src_json;               // the file read, and its tokenizer_config.json (may not exist):
    char* src_config;             //     -export-hf copies them beside the model
} TokenizerHF;

typedef struct {
    uint32_t vocab_size;  // V
    int eot_token;        // id of <|endoftext|>, -1 when the file (version 1) does not say; for a
                          //     tokenizer.json: the document token (see tokenizer_init_hf)
    char** token_table;   // (V) id -> the token's bytes, NUL-terminated; a token may itself be
                          //     the byte 0, so always use token_len, never strlen
    uint32_t* token_len;  // (V) id -> number of bytes (1..255 in llm.c's file)
    char* bytes;          // every token's bytes followed by a NUL, back to back: the one
                          //     allocation token_table points into
    TokenizerEncoder enc; // encoding: tokenizer_load_merges fills it (tokenizer_init_hf for a tokenizer.json)
    TokenizerHF* hf;      // a tokenizer.json's pipeline; NULL for llm.c's file
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
    if (tok->hf) {
        TokenizerHF* h = tok->hf;
        free(h->added);
        free(h->strs);
        free(h->key_at);
        free(h->key_len);
        free(h->vhash);
        free(h->scratch);
        free(h->cps);
        free(h->norm);
        free(h->norm2);
        free(h->norm3);
        free(h->src_json);
        free(h->src_config);
        free(h);
    }
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
static inline int tokenizer_init_hf(Tokenizer* tok, const char* path, char* err, size_t errlen);
static inline int tokenizer_is_hf(const char* path);

static inline int tokenizer_init(Tokenizer* tok, const char* path, char* err, size_t errlen) {
    if (tokenizer_is_hf(path)) return tokenizer_init_hf(tok, path, err, errlen);
    memset(tok, 0, sizeof(*tok));
    tok->eot_token = -1;

    // --- the whole file into memory (GPT-2's is 372 kB)
    FILE* f = zt_fopen_read(path);
    if (!f) {
        return tokenizer_fail(tok, err, errlen, "tokenizer %s: cannot open: %s "
                              "(HINT: GPT-2's is made by `python3 dev/make_vocab.py`)", path, zt_strerror(errno));
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
    tok->token_len = (uint32_t*)malloc(V * sizeof(uint32_t));
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
    if (!tok->token_table || id >= tok->vocab_size || !tok->token_table[id]) {
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

// Is cp whitespace (Unicode White_Space: \s of tokenizers' regexes, Rust's char::is_whitespace)?
static inline int tokenizer_white_space(uint32_t cp) { return tokenizer_unicode_class(cp) == UC_S; }

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
static inline uint32_t tokenizer_pair_slot(const TokenizerEncoder* e, uint64_t key) {
    uint32_t i = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 40) & e->pair_mask;
    while (e->pairs[i].rank_plus1 != 0 && e->pairs[i].key != key) i = (i + 1) & e->pair_mask;
    return i;
}

// Rank of the merge joining tokens left and right, TOKENIZER_NO_MERGE if there is none.
static inline uint32_t tokenizer_pair_rank(const TokenizerEncoder* e, uint32_t left, uint32_t right) {
    const TokenizerPair* p = &e->pairs[tokenizer_pair_slot(e, (uint64_t)left << 32 | right)];
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
    if (tok->hf) return 0;  // a tokenizer.json brings its merges (tokenizer_init_hf loaded them)
    tokenizer_free_encoder(tok);
    if (!tok->token_table) {
        return tokenizer_merges_fail(tok, err, errlen, "merges %s: load the vocabulary (tokenizer_init) first: "
                                     "the merges are checked against it", path);
    }
    FILE* f = zt_fopen_read(path);
    if (!f) {
        return tokenizer_merges_fail(tok, err, errlen, "merges %s: cannot open: %s (HINT: GPT-2's is made by "
                                     "`python3 dev/make_merges.py`)", path, zt_strerror(errno));
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
    e->merged_id = (uint32_t*)malloc(M * sizeof(uint32_t));
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
        uint32_t slot = tokenizer_pair_slot(e, (uint64_t)left << 32 | right);
        if (e->pairs[slot].rank_plus1 != 0) {
            MERGES_FAIL("merges %s: merge %u repeats the pair %u + %u of merge %u", path, r, left, right, e->pairs[slot].rank_plus1 - 1);
        }
        e->pairs[slot].key = (uint64_t)left << 32 | right;
        e->pairs[slot].rank_plus1 = r + 1;
        e->merged_id[r] = merged;
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
static inline int tokenizer_append(uint32_t** out, size_t* nout, size_t* cap, const uint32_t* ids, size_t n) {
    if (tokenizer_grow((void**)out, cap, *nout + n, sizeof(uint32_t)) != 0) return -1;
    memcpy(*out + *nout, ids, n * sizeof(uint32_t));
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
#define TOKENIZER_BPE_BYTES_PER_CAP (3 * sizeof(uint32_t) + 2 * sizeof(TokenizerMerge))

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
    uint32_t* part_id = (uint32_t*)realloc(e->part_id, c * sizeof(uint32_t));
    if (part_id) e->part_id = part_id;
    TokenizerMerge* heap = (TokenizerMerge*)realloc(e->heap, 2 * c * sizeof(TokenizerMerge));
    if (heap) e->heap = heap;
    if (!next || !prev || !part_id || !heap) return -1;
    e->work_cap = c;
    return 0;
}

// SentencePiece-style BPE starts from characters, not bytes: tokenizer_json.h fills the first parts
// (next, prev, part_id at each part's start) of piece p[0..n) from model.vocab, byte_fallback and unk.
static inline void tokenizer_sp_parts(const TokenizerHF* h, TokenizerEncoder* e, const unsigned char* p, uint32_t n);

// BPE of one piece p[0..n) (n >= 1): append its ids. The first parts are its bytes (byte-level
// BPE; sp NULL) or its characters (SentencePiece-style: tokenizer_sp_parts). Returns 0 / -1 (out
// of memory).
static inline int tokenizer_bpe(TokenizerEncoder* e, const TokenizerHF* sp, const unsigned char* p, uint32_t n, uint32_t** out, size_t* nout,
                                size_t* cap) {
    // The heap never holds more than 2n - 2 candidates: n - 1 first, then each merge pops one
    // (itself) and pushes at most two, and there are at most n - 1 merges.
    if (tokenizer_bpe_reserve(e, (size_t)n + 1) != 0) return -1;
    if (sp) tokenizer_sp_parts(sp, e, p, n);
    else {
        for (uint32_t i = 0; i < n; i++) {
            e->part_id[i] = e->byte_id[p[i]];
            e->next[i] = i + 1;
            e->prev[i] = i - 1;  // unused for i = 0
        }
    }
    size_t nheap = 0;
    for (uint32_t i = 0; i < n && e->next[i] < n; i = e->next[i]) tokenizer_heap_push(e, &nheap, i, e->next[i], e->next[e->next[i]]);
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

// Append the ids of piece p[0..n) (n >= 1): from the cache, or by BPE (then cached). sp: NULL, or
// the SentencePiece-style pipeline whose characters start the BPE (tokenizer_bpe).
static inline int tokenizer_encode_piece(TokenizerEncoder* e, const TokenizerHF* sp, const unsigned char* p, size_t n, uint32_t** out,
                                         size_t* nout, size_t* cap) {
    if (n == 1) return tokenizer_append(out, nout, cap, &e->byte_id[p[0]], 1);  // (an SP byte_id: the character's id)
    if (n > TOKENIZER_CACHE_MAX_PIECE) {
        if (n >= UINT32_MAX) return -1;  // the BPE work arrays index bytes with uint32
        return tokenizer_bpe(e, sp, p, (uint32_t)n, out, nout, cap);
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
    if (tokenizer_bpe(e, sp, p, (uint32_t)n, out, nout, cap) != 0) return -1;
    size_t nids = *nout - first;
    if (e->cache_used >= TOKENIZER_CACHE_SLOTS / 4 * 3) {  // full: start again, empty
        memset(e->cache, 0, TOKENIZER_CACHE_SLOTS * sizeof(TokenizerCacheSlot));
        e->cache_used = 0;
        e->cache_nbytes = e->cache_nids = 0;
        i = (uint32_t)h & (TOKENIZER_CACHE_SLOTS - 1);
    }
    if (tokenizer_grow((void**)&e->cache_bytes, &e->cache_cap_bytes, e->cache_nbytes + n, 1) != 0 ||
        tokenizer_grow((void**)&e->cache_ids, &e->cache_cap_ids, e->cache_nids + nids, sizeof(uint32_t)) != 0) return -1;
    TokenizerCacheSlot* s = &e->cache[i];
    s->hash = h;
    s->bytes_at = (uint32_t)e->cache_nbytes;
    s->ids_at = (uint32_t)e->cache_nids;
    s->len = (uint16_t)n;
    s->nids = (uint16_t)nids;
    memcpy(e->cache_bytes + e->cache_nbytes, p, n);
    memcpy(e->cache_ids + e->cache_nids, *out + first, nids * sizeof(uint32_t));
    e->cache_nbytes += n;
    e->cache_nids += nids;
    e->cache_used++;
    return 0;
}

// -----------------------------------------------------------------------------------------------
// Hugging Face tokenizer.json: the reader and the pipeline it runs are in their own file
#include "tokenizer_json.h" // defines: tokenizer_init_hf, tokenizer_hf_encode_final, tokenizer_hf_encode_part, tokenizer_nfc, tokenize_error

// Encode the pieces of text[0..n). final = 1: the text ends at n, everything is encoded.
// final = 0: more text follows n; only what no later byte can change is encoded, and *consumed
// says how many bytes that was, so the caller carries the rest over: with llm.c's file, the
// pieces that end at least TOKENIZER_LOOKAHEAD bytes before n; with a tokenizer.json, up to the
// last safe cut (above). Appends to (*out, *nout, *cap). Returns 0, or -1 if the merges are not
// loaded or memory ran out.
static inline int tokenizer_encode_part(Tokenizer* tok, const unsigned char* text, size_t n, int final, size_t* consumed,
                                        uint32_t** out, size_t* nout, size_t* cap) {
    *consumed = 0;
    if (tok->hf) {
        if (!final) return n ? tokenizer_hf_encode_part(tok, text, n, consumed, out, nout, cap) : 0;
        *consumed = n;
        return tokenizer_hf_encode_final(tok, text, n, out, nout, cap);
    }
    if (tok->enc.nmerges == 0) return -1;
    size_t i = 0;
    while (i < n) {
        size_t len = tokenizer_piece_length(text + i, n - i);
        if (!final && i + len + TOKENIZER_LOOKAHEAD > n) break;
        if (tokenizer_encode_piece(&tok->enc, NULL, text + i, len, out, nout, cap) != 0) return -1;
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
static inline int tokenizer_encode(Tokenizer* tok, const unsigned char* text, size_t n, uint32_t** out, size_t* nout, size_t* cap) {
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
// unfinished piece (llm.c's file: the last TOKENIZER_LOOKAHEAD bytes; a tokenizer.json: what
// follows the last safe cut, see "Streaming a tokenizer.json text") and a separator that may be
// starting are carried over to the next chunk, so a piece or a separator across a chunk boundary
// is handled as if the file were read whole. Memory: the chunk, the longest piece (a
// tokenizer.json: the longest stretch without a safe cut), TOKENIZE_WRITE_IDS ids per split (a
// shard is written as it fills: tokenize_emit).
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
    int64_t batched;       // documents encoded in parallel batches (the others were streamed)
    int threads;           // the most threads that encoded a batch together (1: none did)
} TokenizeStats;

#define TOKENIZE_WRITE_IDS ((size_t)1 << 16)  // ids gathered before they go to the open shard file

typedef struct {           // one split's output
    const char* name;      // "train" or "val"
    uint32_t* toks;        // ids not yet in the shard file, at most TOKENIZE_WRITE_IDS
    size_t n, cap;
    int shards;            // shard files finished (renamed to their names) so far
    FILE* f;               // the shard being written, under its temporary name tmp; NULL: none open
    char tmp[4200];
    int64_t in_shard;      // ids in that shard so far (in the file and in toks)
    void* narrow;          // (TOKENIZE_WRITE_IDS) uint16 or uint32 ids as the file holds them
} TokenizeSplit;

static inline void tokenize_shard_path(char* path, size_t cap, const char* prefix, const char* split, int index) {
    snprintf(path, cap, "%s_%s_%06d.bin", prefix, split, index);
}

// Write n ids as a shard for a vocabulary of V ids: uint16 (llm.c's 20240520 format) when V <=
// 65,536, else uint32 (20240801, version 7). Returns 0 / -1 with the message in err.
static inline int tokenize_write_ids(const char* path, const uint32_t* ids, size_t n, uint32_t V, char* err, size_t errlen) {
    if (V > 65536) return write_token_shard32(path, ids, (int64_t)n, err, errlen);
    uint16_t* narrow = (uint16_t*)malloc(n * sizeof(uint16_t) + 2);
    if (!narrow) return tokenize_error(err, errlen, "shard %s: out of memory for %zu tokens", path, n);
    for (size_t i = 0; i < n; i++) narrow[i] = (uint16_t)ids[i];  // every id < V <= 65536
    int rc = write_token_shard(path, narrow, (int64_t)n, err, errlen);
    free(narrow);
    return rc;
}

// Shards are written as they fill, not held whole: the split's ids go to its open shard file
// (created under a temporary name with a header that counts no ids yet) TOKENIZE_WRITE_IDS at a
// time; when the shard holds shard_tokens ids, or at the end, the header gets its count and the
// file is flushed, fsynced and renamed to its name (the protocol of write_token_shard: no reader
// ever sees a half-written shard). Memory per split: TOKENIZE_WRITE_IDS ids, not a shard.

// Write the split's gathered ids into its open shard file (opening it first). Returns 0 / -1.
static inline int tokenize_write_block(TokenizeSplit* s, const char* prefix, uint32_t V, char* err, size_t errlen) {
    int width = V > 65536 ? 4 : 2;
    char path[4096];
    tokenize_shard_path(path, sizeof(path), prefix, s->name, s->shards);
    if (!s->f) {
        snprintf(s->tmp, sizeof(s->tmp), "%s.tmp.%ld", path, (long)getpid());
        s->f = fopen(s->tmp, "wb");
        if (!s->f) return tokenize_error(err, errlen, "shard %s: cannot create %s: %s", path, s->tmp, strerror(errno));
        int32_t header[SHARD_HEADER_INTS] = {0};  // the count comes at the end (tokenize_close_shard)
        if (fwrite(header, sizeof(header), 1, s->f) != 1) return tokenize_error(err, errlen, "shard %s: cannot write %s: %s", path, s->tmp, strerror(errno));
    }
    if (!s->narrow && !(s->narrow = malloc(TOKENIZE_WRITE_IDS * 4))) return tokenize_error(err, errlen, "shard %s: out of memory", path);
    const void* out = s->toks;
    if (width == 2) {
        uint16_t* nw = (uint16_t*)s->narrow;
        for (size_t i = 0; i < s->n; i++) nw[i] = (uint16_t)s->toks[i];  // every id < V <= 65536
        out = nw;
    }
    if (s->n > 0 && fwrite(out, (size_t)width, s->n, s->f) != s->n) return tokenize_error(err, errlen, "shard %s: cannot write %s: %s", path, s->tmp, strerror(errno));
    s->n = 0;
    return 0;
}

// Finish the split's open shard: its last ids, the count in its header, flush, fsync, rename.
static inline int tokenize_close_shard(TokenizeSplit* s, const char* prefix, uint32_t V, char* err, size_t errlen) {
    if (tokenize_write_block(s, prefix, V, err, errlen) != 0) return -1;
    char path[4096];
    tokenize_shard_path(path, sizeof(path), prefix, s->name, s->shards);
    int32_t head[3] = {V > 65536 ? SHARD_MAGIC32 : SHARD_MAGIC, V > 65536 ? SHARD_VERSION32 : SHARD_VERSION, (int32_t)s->in_shard};
    int ok = fseek(s->f, 0, SEEK_SET) == 0 && fwrite(head, sizeof(head), 1, s->f) == 1 && fflush(s->f) == 0 && fsync(fileno(s->f)) == 0;
    int e = errno;
    if (fclose(s->f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    s->f = NULL;
    if (!ok || rename(s->tmp, path) != 0) {
        if (ok) e = errno;
        remove(s->tmp);
        return tokenize_error(err, errlen, "shard %s: cannot write %s: %s", path, s->tmp, strerror(e));
    }
    s->shards++;
    s->in_shard = 0;
    tokenize_fault_after_shard();
    return 0;
}

// Append ids to the split, finishing a shard each time one fills up. Returns 0 / -1.
static inline int tokenize_emit(TokenizeSplit* s, const uint32_t* ids, size_t n, size_t shard_tokens, const char* prefix,
                                uint32_t V, char* err, size_t errlen) {
    if (!s->toks && !(s->toks = (uint32_t*)malloc(TOKENIZE_WRITE_IDS * sizeof(uint32_t))))
        return tokenize_error(err, errlen, "tokenize %s: out of memory", prefix);
    while (n > 0) {
        size_t take = TOKENIZE_WRITE_IDS - s->n;
        if ((size_t)s->in_shard + take > shard_tokens) take = shard_tokens - (size_t)s->in_shard;
        if (take > n) take = n;
        memcpy(s->toks + s->n, ids, take * sizeof(uint32_t));
        s->n += take;
        s->in_shard += (int64_t)take;
        ids += take;
        n -= take;
        if ((size_t)s->in_shard == shard_tokens) {
            if (tokenize_close_shard(s, prefix, V, err, errlen) != 0) return -1;
        } else if (s->n == TOKENIZE_WRITE_IDS && tokenize_write_block(s, prefix, V, err, errlen) != 0) return -1;
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

// Parallel encoding: the input is read a chunk per thread at a time; while no document is open,
// the complete documents waiting in the buffer (up to TOKENIZE_BATCH_DOCS) are encoded at once,
// one per thread (OpenMP, dynamic schedule), each thread with its own
// copy of the encoder's work state (TokenizerWorker: the piece cache, BPE arrays, NFC buffers; the
// vocabulary and merges are shared, read-only), then written in file order: the shards are the
// same bytes as with one thread. A batch's ids go into the shards (tokenize_emit_batch) on one
// thread while the others encode the next batch; before anything else is written (a streamed
// document, the last shards) the batch still pending goes out first. A document longer than
// what the buffer holds goes the streamed way (one thread, memory bounded as above). Without
// OpenMP, or with one thread, everything is
// streamed.
#define TOKENIZE_BATCH_DOCS 4096
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct { Tokenizer t; TokenizerHF h; } TokenizerWorker;

static inline void tokenizer_worker_init(TokenizerWorker* w, const Tokenizer* src) {
    memset(w, 0, sizeof(*w));
    w->t = *src;
    TokenizerEncoder* e = &w->t.enc;  // shared: byte_id, merged_id, pairs; own: the rest
    e->cache = NULL;
    e->cache_used = 0;
    e->cache_bytes = NULL;
    e->cache_nbytes = e->cache_cap_bytes = 0;
    e->cache_ids = NULL;
    e->cache_nids = e->cache_cap_ids = 0;
    e->next = e->prev = e->part_id = NULL;
    e->heap = NULL;
    e->work_cap = 0;
    if (src->hf) {
        w->h = *src->hf;
        w->h.scratch = NULL;
        w->h.scratch_cap = 0;
        w->h.cps = NULL;
        w->h.cps_cap = 0;
        w->h.norm = NULL;
        w->h.norm_cap = 0;
        w->h.norm2 = w->h.norm3 = NULL;
        w->h.norm2_cap = w->h.norm3_cap = 0;
        w->t.hf = &w->h;
    }
}

static inline void tokenizer_worker_free(TokenizerWorker* w) {
    TokenizerEncoder* e = &w->t.enc;
    free(e->cache);
    free(e->cache_bytes);
    free(e->cache_ids);
    free(e->next);
    free(e->prev);
    free(e->part_id);
    free(e->heap);
    if (w->t.hf) {
        free(w->h.scratch);
        free(w->h.cps);
        free(w->h.norm);
        free(w->h.norm2);
        free(w->h.norm3);
    }
    memset(w, 0, sizeof(*w));
}

typedef struct {
    size_t start, len, next;  // the document is b[start, start + len); the next one starts at next
    uint32_t* ids;            // its ids (grown as needed, kept across batches)
    size_t nids, cap;
    int rc;
} TokenizeDoc;

// A batch's documents, in order, into the splits (EOT, then the ids; an empty document skipped):
// document *ndocs goes to val when val_every says so. Returns 0, or -1 with the message in err.
static inline int tokenize_emit_batch(const TokenizeDoc* docs, int nd, TokenizeSplit* split, int val_every, int64_t* ndocs, TokenizeStats* stats,
                                      uint32_t eot, int64_t shard_tokens, const char* out_prefix, uint32_t V, const char* in_path,
                                      char* err, size_t errlen) {
    for (int d = 0; d < nd; d++) {
        if (docs[d].rc != 0) return tokenize_error(err, errlen, "tokenize: input %s: out of memory while encoding", in_path);
        if (docs[d].len == 0) continue;
        int which = val_every > 0 && *ndocs % val_every == val_every - 1;
        (*ndocs)++;
        stats->documents[which]++;
        stats->batched++;
        stats->tokens[which] += (int64_t)docs[d].nids + 1;
        if (tokenize_emit(&split[which], &eot, 1, (size_t)shard_tokens, out_prefix, V, err, errlen) != 0 ||
            tokenize_emit(&split[which], docs[d].ids, docs[d].nids, (size_t)shard_tokens, out_prefix, V, err, errlen) != 0) return -1;
    }
    return 0;
}

// The complete documents at the start of b[0..n) (line_start: is b[0] at a line start), at most
// max of them: their extents in docs. Returns how many.
static inline int tokenize_find_docs(const unsigned char* b, size_t n, int line_start, int eof, TokenizeDoc* docs, int max) {
    size_t pos = 0;
    int nd = 0;
    while (nd < max && pos < n) {
        size_t sep, seplen;
        if (tokenize_find_separator(b + pos, n - pos, line_start, eof, &sep, &seplen)) {
            docs[nd].start = pos;
            docs[nd].len = sep;
            docs[nd].next = pos + sep + seplen;
        } else if (eof) {
            docs[nd].start = pos;
            docs[nd].len = n - pos;
            docs[nd].next = n;
        } else break;
        pos = docs[nd++].next;
        line_start = b[pos - 1] == '\n';
    }
    return nd;
}

// The output prefix and arguments checked, and the output directory: before anything is read or
// written. Returns 0, or -1 with the message in err.
static inline int tokenize_check_output(const Tokenizer* tok, const char* in_path, const char* out_prefix, int val_every,
                                        int64_t shard_tokens, size_t chunk_bytes, char* err, size_t errlen) {
    if (tok->hf && tok->eot_token < 0) {
        return tokenize_error(err, errlen, "tokenize %s: the tokenizer has no document token: its post-processor adds no BOS, it has "
                              "no added token \"<|endoftext|>\" and no tokenizer_config.json eos_token", in_path);
    }
    if (!tok->hf && (tok->enc.nmerges == 0 || tok->eot_token < 0)) {
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
    return 0;
}

// One pass of tokenize_file_to_shards_ex over its input: the stream (buf[at..len) is input not yet
// encoded, starting inside the current document), the two splits' shards, and the parallel batches.
typedef struct {
    Tokenizer* tok;
    const char* in_path;
    const char* out_prefix;
    int val_every;
    int64_t shard_tokens;
    TokenizeStats* stats;
    char* err;
    size_t errlen;
    FILE* f;
    TokenizeSplit split[2];
    unsigned char* buf;
    size_t at, len, bufcap, read_bytes;
    uint32_t* ids;           // one pass's ids, then handed to the document's split
    size_t nids, idscap;
    uint32_t eot, V;
    int match_specials;      // the tokenizer's own setting, restored at the end
    int eof, line_start, in_doc, which, look_again;
    int64_t ndocs;
    int nworkers;
    TokenizerWorker* workers;
    TokenizeDoc* batch[2];   // (TOKENIZE_BATCH_DOCS) each: the batch being encoded and the one before it
    int cur, pending;        // batch[cur] is filled next; pending: documents of batch[1 - cur] not yet emitted
} TokenizeRun;

static inline void tokenize_run_init(TokenizeRun* r, Tokenizer* tok, FILE* f, const char* in_path, const char* out_prefix, int val_every,
                                     int64_t shard_tokens, size_t chunk_bytes, TokenizeStats* stats, char* err, size_t errlen) {
    memset(r, 0, sizeof(*r));
    r->tok = tok; r->f = f; r->in_path = in_path; r->out_prefix = out_prefix; r->val_every = val_every;
    r->shard_tokens = shard_tokens; r->stats = stats; r->err = err; r->errlen = errlen;
    r->split[0].name = "train";
    r->split[1].name = "val";
    r->eot = (uint32_t)tok->eot_token;
    r->V = tok->vocab_size;
    r->match_specials = tok->hf ? tok->hf->match_specials : 0;
    if (tok->hf) tok->hf->match_specials = 0;  // special tokens in documents are text (llm.c's split_special_tokens)
    r->line_start = 1;
    r->nworkers = 1;
#ifdef _OPENMP
    r->nworkers = omp_get_max_threads();
#endif
    r->read_bytes = chunk_bytes;
    if (r->nworkers > 1) {
        r->read_bytes = chunk_bytes * (size_t)r->nworkers;  // a chunk per thread: documents up to about a chunk still come in batches
        r->workers = (TokenizerWorker*)calloc((size_t)r->nworkers, sizeof(TokenizerWorker));
        r->batch[0] = (TokenizeDoc*)calloc(TOKENIZE_BATCH_DOCS, sizeof(TokenizeDoc));
        r->batch[1] = (TokenizeDoc*)calloc(TOKENIZE_BATCH_DOCS, sizeof(TokenizeDoc));
        if (!r->workers || !r->batch[0] || !r->batch[1]) r->nworkers = 1;  // streamed then: slower, not wrong
        for (int w = 0; r->nworkers > 1 && w < r->nworkers; w++) tokenizer_worker_init(&r->workers[w], tok);
    }
}

// Read a chunk (a bigger one while a long piece is carried). Returns 0 or -1 (err).
static inline int tokenize_read(TokenizeRun* r) {
    if (r->at > 0) memmove(r->buf, r->buf + r->at, r->len - r->at);
    r->len -= r->at;
    r->at = 0;
    size_t want = r->read_bytes > r->len ? r->read_bytes : r->len;
    if (tokenizer_grow((void**)&r->buf, &r->bufcap, r->len + want, 1) != 0)
        return tokenize_error(r->err, r->errlen, "tokenize: input %s: out of memory for %zu bytes", r->in_path, r->len + want);
    size_t got = fread(r->buf + r->len, 1, want, r->f);
    if (got < want && ferror(r->f)) return tokenize_error(r->err, r->errlen, "tokenize: input %s: read error: %s", r->in_path, strerror(errno));
    r->eof = got < want;
    r->len += got;
    r->stats->bytes += (int64_t)got;
    return 0;
}

// The complete documents in buf, encoded as a batch in parallel while the batch before is emitted.
// Returns 1 when it took a batch (*done: the input is used up), 0 when buf holds fewer than two
// complete documents (the streamed path goes on), -1 on an error (err).
static inline int tokenize_batch(TokenizeRun* r, int* done) {
    unsigned char* b = r->buf + r->at;
    TokenizeDoc* docs = r->batch[r->cur];
    int nd = tokenize_find_docs(b, r->len - r->at, r->line_start, r->eof, docs, TOKENIZE_BATCH_DOCS);
    if (nd < 2) return 0;
    int team = 1, emit_rc = 0;
    #pragma omp parallel num_threads(r->nworkers)
    {
        // one thread emits the batch before (copies its ids into the shards, writes the shards that
        // fill) while the others start on this one: the output's order is the file's, and the
        // copying and writing overlap the encoding
        #pragma omp single nowait
        {
            if (r->pending) emit_rc = tokenize_emit_batch(r->batch[1 - r->cur], r->pending, r->split, r->val_every, &r->ndocs, r->stats, r->eot,
                                                          r->shard_tokens, r->out_prefix, r->V, r->in_path, r->err, r->errlen);
        }
        #pragma omp for schedule(dynamic, 1)
        for (int d = 0; d < nd; d++) {
            int w = 0;
#ifdef _OPENMP
            w = omp_get_thread_num();
            if (d == 0) team = omp_get_num_threads();
#endif
            // the ids grow in locals: docs[d] shares cache lines with the documents other threads
            // encode, and writing its count at every piece would bounce them
            uint32_t* ids_d = docs[d].ids;
            size_t used, nids_d = 0, cap_d = docs[d].cap;
            int rc_d = docs[d].len ? tokenizer_encode_part(&r->workers[w].t, b + docs[d].start, docs[d].len, 1, &used, &ids_d, &nids_d, &cap_d) : 0;
            docs[d].ids = ids_d;
            docs[d].nids = nids_d;
            docs[d].cap = cap_d;
            docs[d].rc = rc_d;
        }
    }
    if (team > r->stats->threads) r->stats->threads = team;
    if (emit_rc != 0) return -1;
    r->pending = nd;
    r->cur = 1 - r->cur;
    r->at += docs[nd - 1].next;
    r->line_start = r->buf[r->at - 1] == '\n';
    r->look_again = 0;  // buf holds no complete document now: read on
    *done = r->eof && r->at == r->len;
    return 1;
}

// One streamed piece: the batch before goes out first, then the current document up to its end (a
// separator line, or the end of the input), else up to before any line at the end of buf that may
// still turn into a separator. Returns 0 (*done: the input is used up) or -1 (err).
static inline int tokenize_piece(TokenizeRun* r, int* done) {
    if (r->pending) {  // (what follows comes after it in the file)
        if (tokenize_emit_batch(r->batch[1 - r->cur], r->pending, r->split, r->val_every, &r->ndocs, r->stats, r->eot, r->shard_tokens,
                                r->out_prefix, r->V, r->in_path, r->err, r->errlen) != 0) return -1;
        r->pending = 0;
    }
    unsigned char* b = r->buf + r->at;
    size_t n = r->len - r->at, sep = 0, seplen = 0;
    int found = tokenize_find_separator(b, n, r->line_start, r->eof, &sep, &seplen);
    int doc_ends = found || r->eof, rc = 0;
    size_t limit = found ? sep : r->eof ? n : tokenize_text_limit(b, n, r->line_start);
    r->nids = 0;
    if (limit > 0 && !r->in_doc) {  // the document's first byte: EOT, and choose its split
        r->which = r->val_every > 0 && r->ndocs % r->val_every == r->val_every - 1;
        r->in_doc = 1;
        r->ndocs++;
        r->stats->documents[r->which]++;
        rc = tokenizer_append(&r->ids, &r->nids, &r->idscap, &r->eot, 1);
    }
    size_t used = 0;
    if (rc == 0) rc = tokenizer_encode_part(r->tok, b, limit, doc_ends, &used, &r->ids, &r->nids, &r->idscap);
    if (rc != 0) return tokenize_error(r->err, r->errlen, "tokenize: input %s: out of memory while encoding", r->in_path);
    r->stats->tokens[r->which] += (int64_t)r->nids;
    if (tokenize_emit(&r->split[r->which], r->ids, r->nids, (size_t)r->shard_tokens, r->out_prefix, r->V, r->err, r->errlen) != 0) return -1;
    if (doc_ends) {
        r->in_doc = 0;
        used = found ? sep + seplen : n;
    }
    if (used > 0) r->line_start = b[used - 1] == '\n';
    r->at += used;
    r->look_again = found;  // more separators may wait in buf: look before reading
    *done = r->eof && !found;
    return 0;
}

// The end of a pass: the last batch and the last, partial shards out; everything freed; on an error
// (rc != 0) every shard this run wrote removed. Returns rc, or -1 when the end itself failed.
static inline int tokenize_finish(TokenizeRun* r, int rc) {
    if (rc == 0 && r->pending) rc = tokenize_emit_batch(r->batch[1 - r->cur], r->pending, r->split, r->val_every, &r->ndocs, r->stats, r->eot,
                                                        r->shard_tokens, r->out_prefix, r->V, r->in_path, r->err, r->errlen);
    fclose(r->f);
    free(r->buf);
    free(r->ids);
    for (int w = 0; r->workers && r->nworkers > 1 && w < r->nworkers; w++) tokenizer_worker_free(&r->workers[w]);
    free(r->workers);
    for (int k = 0; k < 2; k++) {
        for (int d = 0; r->batch[k] && d < TOKENIZE_BATCH_DOCS; d++) free(r->batch[k][d].ids);
        free(r->batch[k]);
    }
    if (r->tok->hf) r->tok->hf->match_specials = r->match_specials;
    if (rc == 0 && r->stats->bytes == 0) rc = tokenize_error(r->err, r->errlen, "tokenize: input %s is empty", r->in_path);
    if (rc == 0 && r->ndocs == 0) {
        rc = tokenize_error(r->err, r->errlen, "tokenize: input %s has no text, only \"%s\" separator lines", r->in_path, TOKENIZE_SEPARATOR);
    }
    for (int s = 0; s < 2 && rc == 0; s++) {  // the last, partial shards
        if (r->split[s].in_shard > 0 && tokenize_close_shard(&r->split[s], r->out_prefix, r->V, r->err, r->errlen) != 0) rc = -1;
    }
    for (int s = 0; s < 2; s++) {
        if (rc != 0) {  // leave nothing behind: remove the shards this run wrote
            for (int i = 0; i < r->split[s].shards; i++) {
                char path[4096];
                tokenize_shard_path(path, sizeof(path), r->out_prefix, r->split[s].name, i);
                remove(path);
            }
        }
        if (r->split[s].f) {  // a shard left open by an error: its temporary file goes too
            fclose(r->split[s].f);
            remove(r->split[s].tmp);
        }
        r->stats->shards[s] = rc == 0 ? r->split[s].shards : 0;
        free(r->split[s].toks);
        free(r->split[s].narrow);
    }
    return rc;
}

// tokenize_file_to_shards with the chunk size given (tests use tiny ones) and, if stats is not
// NULL, counts of what was read and written: the output checked, the input opened, then read and
// encoded — batches of complete documents in parallel, a document longer than the buffer streamed
// in pieces — and the pass finished.
static inline int tokenize_file_to_shards_ex(Tokenizer* tok, const char* in_path, const char* out_prefix, int val_every,
                                             int64_t shard_tokens, size_t chunk_bytes, TokenizeStats* stats,
                                             char* err, size_t errlen) {
    TokenizeStats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof(*stats));
    stats->threads = 1;
    if (tokenize_check_output(tok, in_path, out_prefix, val_every, shard_tokens, chunk_bytes, err, errlen) != 0) return -1;
    struct stat st;
    FILE* f = fopen(in_path, "rb"); // (a stream: a pipe or FIFO is read as given, on purpose: -tokenize /dev/stdin)
    if (!f) return tokenize_error(err, errlen, "tokenize: input %s: cannot open: %s", in_path, strerror(errno));
    if (fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
        fclose(f);
        return tokenize_error(err, errlen, "tokenize: input %s: cannot read: %s", in_path, S_ISDIR(st.st_mode) ? "is a directory" : strerror(errno));
    }
    TokenizeRun r;
    tokenize_run_init(&r, tok, f, in_path, out_prefix, val_every, shard_tokens, chunk_bytes, stats, err, errlen);
    int rc = 0, done = 0;
    while (rc == 0 && !done) {
        if (!r.eof && !r.look_again && (rc = tokenize_read(&r)) != 0) break;
        if (!r.in_doc && r.nworkers > 1) {  // complete documents in buf: a batch, in parallel
            int took = tokenize_batch(&r, &done);
            if (took < 0) rc = -1;
            if (took) continue;
        }
        rc = tokenize_piece(&r, &done);
    }
    return tokenize_finish(&r, rc);
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

// -----------------------------------------------------------------------------------------------
// Writing the tokenizer beside an exported model (-export-hf), so that transformers'
// AutoTokenizer.from_pretrained(DIR) loads it:
//   read from a tokenizer.json: that file and its tokenizer_config.json (and special_tokens_map.json,
//     chat_template.jinja where the source has them), copied byte for byte (the pipeline is theirs,
//     we change nothing); ids beyond the model's rows are copied too when each is an added token
//     (Llama 3.2's <|image|> is id 128,256 of a 128,256-row model: its own files are so); without a
//     tokenizer_config.json beside it, one
//     is written (PreTrainedTokenizerFast, the BOS and EOS of tokenizer_special_ids,
//     model_max_length = max_T), else transformers would pick the class from config.json's
//     model_type (LlamaTokenizerFast adds its own "<s>" as a new token);
//   read from llm.c's file + merges (GPT-2): tokenizer.json (byte-level BPE as GPT-2's own:
//     ByteLevel pre-tokenizer and decoder, the vocabulary spelled in GPT-2's byte-to-unicode
//     alphabet, merges in rank order, "<|endoftext|>" as a special added token), vocab.json and
//     merges.txt (the slow GPT2Tokenizer's files), and tokenizer_config.json (GPT2Tokenizer, BOS =
//     EOS = UNK = "<|endoftext|>", model_max_length = max_T).
// Each file is written under a temporary name, fsynced and renamed: none is ever half-written.

// Write len bytes to dir/name atomically. Returns 0, or -1 with the message in err.
static inline int tokenizer_put_file(const char* dir, const char* name, const char* bytes, size_t len, char* err, size_t errlen) {
    char path[4200], tmp[4300];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    FILE* f = fopen(tmp, "wb");
    if (!f) return tokenize_error(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
    int ok = fwrite(bytes, 1, len, f) == len && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return tokenize_error(err, errlen, "%s: cannot write: %s", path, strerror(e));
    }
    return 0;
}

// A growing text buffer for the JSON writers.
typedef struct { char* s; size_t n, cap; int oom; } TokenizerText;

__attribute__((format(printf, 2, 3)))
static inline void tokenizer_text(TokenizerText* t, const char* fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = t->oom ? 0 : vsnprintf(t->s ? t->s + t->n : NULL, t->s ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (t->oom || k < 0) { t->oom = 1; return; }
        if (t->s && t->n + (size_t)k < t->cap) { t->n += (size_t)k; return; }
        if (tokenizer_grow((void**)&t->s, &t->cap, t->n + (size_t)k + 1 + 4096, 1) != 0) { t->oom = 1; return; }
    }
}

// s[0..n) (UTF-8) as a JSON string, quotes included.
static inline void tokenizer_json_string(TokenizerText* t, const char* s, size_t n) {
    tokenizer_text(t, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') tokenizer_text(t, "\\%c", c);
        else if (c < 0x20) tokenizer_text(t, "\\u%04x", c);
        else tokenizer_text(t, "%c", c);
    }
    tokenizer_text(t, "\"");
}

// Token id's spelling in the byte-level alphabet, JSON-escaped, into out (room for 8 per byte + 1).
static inline void tokenizer_spell_json(const Tokenizer* tok, uint32_t id, char* out) {
    size_t o = 0;
    for (uint32_t i = 0; i < tok->token_len[id]; i++) {
        unsigned char b = (unsigned char)tok->token_table[id][i];
        if (b == '"' || b == '\\') { out[o++] = '\\'; out[o++] = (char)b; continue; }
        o += (size_t)tokenizer_put_utf8((unsigned char*)out + o, tokenizer_byte_char(b));
    }
    out[o] = 0;
}

// Copy file `from` into dir/name. Returns 0 / -1.
static inline int tokenizer_copy_file(const char* from, const char* dir, const char* name, char* err, size_t errlen) {
    size_t len;
    char* text = tokenizer_read_file(from, &len, err, errlen);
    if (!text) return -1;
    int rc = tokenizer_put_file(dir, name, text, len, err, errlen);
    free(text);
    return rc;
}

// Write tok's files into the existing directory dir (see above); max_T is the model's context.
// Returns 0, or -1 with a one-line message naming the file.
static inline int tokenizer_write_hf(const Tokenizer* tok, const char* dir, int max_T, char* err, size_t errlen) {
    if (tok->hf) {
        if (tokenizer_copy_file(tok->hf->src_json, dir, "tokenizer.json", err, errlen) != 0) return -1;
        struct stat st;
        const char* src = tok->hf->src_config;
        const char* slash = src ? strrchr(src, '/') : NULL;
        static const char* const beside[2] = {"special_tokens_map.json", "chat_template.jinja"};
        for (int k = 0; src && k < 2; k++) {  // the files beside tokenizer_config.json that AutoTokenizer also reads
            char from[4200];
            snprintf(from, sizeof(from), "%.*s%s", slash ? (int)(slash - src + 1) : 0, src, beside[k]);
            if (stat(from, &st) == 0) { if (tokenizer_copy_file(from, dir, beside[k], err, errlen) != 0) return -1; }
            else {  // not the source's: an earlier export's copy would be read in its place (chat_template.jinja first)
                char old[4200];
                snprintf(old, sizeof(old), "%s/%s", dir, beside[k]);
                if (unlink(old) != 0 && errno != ENOENT) return tokenize_error(err, errlen, "%s: cannot remove an earlier export's copy: %s", old, strerror(errno));
            }
        }
        if (src && stat(src, &st) == 0) return tokenizer_copy_file(src, dir, "tokenizer_config.json", err, errlen);
        // no tokenizer_config.json: without one, AutoTokenizer takes the class from config.json's
        // model_type (LlamaTokenizerFast for a Llama), which adds its own "<s>" BOS as a new token;
        // PreTrainedTokenizerFast runs tokenizer.json as it is (its post-processor adds the BOS)
        TokenizerText cfg = {NULL, 0, 0, 0};
        int ids[2];
        tokenizer_special_ids(tok, &ids[0], &ids[1]);
        tokenizer_text(&cfg, "{\"tokenizer_class\": \"PreTrainedTokenizerFast\"");
        const char* keys[2] = {"bos_token", "eos_token"};
        for (int k = 0; k < 2; k++) {
            tokenizer_text(&cfg, ", \"%s\": ", keys[k]);
            if (ids[k] < 0) tokenizer_text(&cfg, "null");
            for (int a = 0; ids[k] >= 0 && a < tok->hf->nadded; a++)
                if ((int)tok->hf->added[a].id == ids[k]) tokenizer_json_string(&cfg, tok->hf->added[a].content, tok->hf->added[a].len);
        }
        tokenizer_text(&cfg, ", \"model_max_length\": %d, \"clean_up_tokenization_spaces\": false}\n", max_T);
        int rc = cfg.oom ? tokenize_error(err, errlen, "tokenizer: out of memory writing tokenizer_config.json")
                         : tokenizer_put_file(dir, "tokenizer_config.json", cfg.s, cfg.n, err, errlen);
        free(cfg.s);
        return rc;
    }
    const TokenizerEncoder* e = &tok->enc;
    if (!tok->token_table || e->nmerges == 0 || tok->eot_token < 0)
        return tokenize_error(err, errlen, "tokenizer: the vocabulary, its merges and the EOT id are needed to write tokenizer.json");
    uint64_t* by_rank = (uint64_t*)calloc(e->nmerges, sizeof(uint64_t));  // rank -> (left << 32 | right)
    char* a = (char*)malloc(8 * 256 + 1);
    char* b = (char*)malloc(8 * 256 + 1);
    TokenizerText js = {NULL, 0, 0, 0}, vocab = {NULL, 0, 0, 0}, merges = {NULL, 0, 0, 0}, cfg = {NULL, 0, 0, 0};
    int rc = -1;
    if (!by_rank || !a || !b) {
        tokenize_error(err, errlen, "tokenizer: out of memory");
        goto done;
    }
    for (uint32_t i = 0; i <= e->pair_mask; i++)
        if (e->pairs[i].rank_plus1) by_rank[e->pairs[i].rank_plus1 - 1] = e->pairs[i].key;
    tokenizer_text(&js, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": [{\"id\": %d, \"content\": "
                   "\"<|endoftext|>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": true, \"special\": true}], "
                   "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
                   "\"use_regex\": true}, \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, "
                   "\"use_regex\": true}, \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
                   "\"use_regex\": true}, \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": \"\", "
                   "\"end_of_word_suffix\": \"\", \"fuse_unk\": false, \"byte_fallback\": false, \"vocab\": {", tok->eot_token);
    tokenizer_text(&vocab, "{");
    for (uint32_t id = 0; id < tok->vocab_size; id++) {
        if (tok->token_len[id] > 256) {
            tokenize_error(err, errlen, "tokenizer: token %u is %u bytes, more than this writer spells", id, tok->token_len[id]);
            goto done;
        }
        tokenizer_spell_json(tok, id, a);
        if ((int)id == tok->eot_token) snprintf(a, 8 * 256 + 1, "<|endoftext|>");
        tokenizer_text(&js, "%s\"%s\": %u", id ? ", " : "", a, id);
        tokenizer_text(&vocab, "%s\"%s\": %u", id ? ", " : "", a, id);
    }
    tokenizer_text(&js, "}, \"merges\": [");
    tokenizer_text(&merges, "#version: 0.2\n");
    for (uint32_t r = 0; r < e->nmerges; r++) {
        tokenizer_spell_json(tok, (uint32_t)(by_rank[r] >> 32), a);
        tokenizer_spell_json(tok, (uint32_t)by_rank[r], b);
        tokenizer_text(&js, "%s\"%s %s\"", r ? ", " : "", a, b);
        // merges.txt is plain text: undo the JSON escapes (only \" and \\ occur)
        for (char* s = a; *s; s++) if (*s == '\\') memmove(s, s + 1, strlen(s));
        for (char* s = b; *s; s++) if (*s == '\\') memmove(s, s + 1, strlen(s));
        tokenizer_text(&merges, "%s %s\n", a, b);
    }
    tokenizer_text(&js, "]}}\n");
    tokenizer_text(&vocab, "}\n");
    tokenizer_text(&cfg, "{\"tokenizer_class\": \"GPT2Tokenizer\", \"add_prefix_space\": false, \"bos_token\": \"<|endoftext|>\", "
                   "\"eos_token\": \"<|endoftext|>\", \"unk_token\": \"<|endoftext|>\", \"model_max_length\": %d, "
                   "\"clean_up_tokenization_spaces\": false}\n", max_T);
    if (js.oom || vocab.oom || merges.oom || cfg.oom) {
        tokenize_error(err, errlen, "tokenizer: out of memory writing tokenizer.json");
        goto done;
    }
    if (tokenizer_put_file(dir, "tokenizer.json", js.s, js.n, err, errlen) || tokenizer_put_file(dir, "vocab.json", vocab.s, vocab.n, err, errlen) ||
        tokenizer_put_file(dir, "merges.txt", merges.s, merges.n, err, errlen) ||
        tokenizer_put_file(dir, "tokenizer_config.json", cfg.s, cfg.n, err, errlen)) goto done;
    rc = 0;
done:
    free(by_rank);
    free(a);
    free(b);
    free(js.s);
    free(vocab.s);
    free(merges.s);
    free(cfg.s);
    return rc;
}

// Load the tokenizer at tokenizer_path (+ merges_path for llm.c's file) and write its files into
// dir for a model of model_V ids whose context is max_T (-export-hf). note (notelen bytes): "" or
// what a reader should know (added tokens beyond the model's rows). Returns 0, or -1 with the
// message: unreadable tokenizer, more ids than the model has (other than added tokens of a
// tokenizer.json), a write that fails.
static inline int tokenizer_export_files(const char* tokenizer_path, const char* merges_path, const char* dir, int model_V, int max_T,
                                         char* note, size_t notelen, char* err, size_t errlen) {
    Tokenizer t;
    note[0] = 0;
    if (tokenizer_init(&t, tokenizer_path, err, errlen) != 0) return -1;
    int rc = tokenizer_load_merges(&t, merges_path, err, errlen);
    uint32_t beyond = 0;  // ids >= model_V: each an added token of a tokenizer.json, or refused
    for (uint32_t id = (uint32_t)model_V; rc == 0 && id < t.vocab_size; id++) {
        int added = 0;
        for (int a = 0; t.hf && a < t.hf->nadded && !added; a++) added = t.hf->added[a].id == id;
        if (!added || t.hf->key_at[id] != UINT32_MAX)
            rc = tokenize_error(err, errlen, "tokenizer %s has %u ids, more than the model's vocabulary of %d (id %u is %s)", tokenizer_path,
                                t.vocab_size, model_V, id, !t.hf ? "one of llm.c's file" : t.hf->key_at[id] != UINT32_MAX ? "in its model.vocab" : "not an added token");
        beyond++;
    }
    if (rc == 0 && beyond)
        snprintf(note, notelen, "the tokenizer's %u id(s) from %d on are added tokens beyond the model's %d rows, copied as they are (as Llama 3.2's own "
                 "files have <|image|>): text holding them cannot be fed to the model", beyond, model_V, model_V);
    if (rc == 0) rc = tokenizer_write_hf(&t, dir, max_T, err, errlen);
    tokenizer_free(&t);
    return rc;
}

// The tokenizer for samples and -prompt: the -tokenizer flag's, except that when the flag is left
// at its default and the model (-e) is a directory holding tokenizer.json, that directory's.
static inline const char* tokenizer_for_model(const char* flag, const char* flag_default, const char* model, char* buf, size_t cap) {
    struct stat st;
    if (strcmp(flag, flag_default) != 0 || !model || stat(model, &st) != 0 || !S_ISDIR(st.st_mode)) return flag;
    snprintf(buf, cap, "%s/tokenizer.json", model);
    if (stat(buf, &st) != 0) return flag;
    snprintf(buf, cap, "%s", model);
    return buf;
}

#endif // ZT_TOKENIZER_H
