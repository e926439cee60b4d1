// tokenizer_json.h — a Hugging Face tokenizer.json read into a pipeline of steps, and the encoder
// that runs them: the reader (tokenizer_init_hf: model, normalizer, pre-tokenizer, decoder, added
// tokens, post-processor, tokenizer_config.json), NFC, Llama 3's and Qwen2's split patterns, the
// encoding of a text through the steps (added tokens, normalizer, pre-tokenizer, BPE) and the safe
// cuts that let -tokenize stream a long document. Two kinds of file, one encoder: byte-level BPE
// (GPT-2, Llama 3, Qwen2, SmolLM2) and SentencePiece-style BPE (Mistral, Llama 2, Gemma, Phi-3):
// the second is more steps (Prepend / Replace normalizers, Metaspace, pieces made of characters
// with byte_fallback), not a second encoder. The user's view: docs/tokenizers.md.
//
// A part of tokenizer.h, included by it after the BPE engine (it uses Tokenizer, TokenizerHF,
// tokenizer_bpe, tokenizer_encode_piece); including this file alone includes tokenizer.h first.
// defines: tokenizer_init_hf, tokenizer_is_hf, tokenizer_special_ids, tokenizer_strip_start, tokenizer_nfc,
//          tokenizer_hf_encode_pass, tokenizer_hf_encode_final, tokenizer_hf_encode_part, tokenizer_sp_parts,
//          tokenizer_hf_normalize, tokenizer_hf_metaspace, tokenizer_piece_length_cl100k, tokenizer_read_file,
//          tokenize_error
//
// May call: tokenizer.h (the BPE engine and its cache), unicode_tables.h, unicode_nfc.h,
// safetensors.h (the JSON parser) and the C library.
#include "tokenizer.h"  // defines: Tokenizer, TokenizerHF, tokenizer_encode_piece (this file is a part of it)
#ifndef ZT_TOKENIZER_JSON_H
#define ZT_TOKENIZER_JSON_H
// -----------------------------------------------------------------------------------------------
// Hugging Face tokenizer.json: byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM2) and
// SentencePiece-style BPE (Mistral 7B v0.1-v0.3, Mixtral, Llama 2, TinyLlama, Phi-3)
//
// -tokenizer PATH takes a tokenizer.json, or a directory holding one (and, optionally, its
// tokenizer_config.json), besides llm.c's file (tokenizer_is_hf tells them apart: a directory, or
// a file whose first non-blank byte is '{'). A file with a ByteLevel pre-tokenizer step is
// byte-level BPE; one with no pre-tokenizer or Metaspace alone is SentencePiece-style (h->sp).
// Encoding does what `tokenizers` 0.21 does:
//   1. added tokens: added_tokens' contents are found in the text, leftmost first, the longest of
//      those starting at one place first (tokenizers' Aho-Corasick, LeftmostLongest); each one
//      found is its id, and the text between them (a stretch) goes on alone. Special ones are
//      skipped when match_specials is 0 (tokenizers' encode_special_tokens = True, transformers'
//      split_special_tokens = True): -tokenize does that, as llm.c's data scripts do for Llama 3,
//      so a document that contains "<|end_of_text|>" is not cut by it. With a normalizer, tokens
//      marked "normalized" are looked for in the normalized text (step 2), the others before.
//   2. normalizer, on each stretch: its steps in order (a Sequence, or one): NFC (Qwen2: Unicode's
//      canonical decomposition, ordering and composition, tokenizer_nfc with unicode_nfc.h; text
//      below U+0300 is already NFC and is not copied); Prepend(s) (s before the stretch: Mistral's
//      and Llama 2's "▁" with legacy true); Replace(String a -> b) (every a, left to right: " " -> "▁").
//   3. pre-tokenizer. Byte-level: the steps in order, each cutting every piece the step before
//      made: Split(Regex, behavior Isolated, invert false) with one of the three patterns below,
//      recognised by its exact string and written in C; Digits (individual_digits: each \p{N}
//      character alone, else each run of them); and last ByteLevel (add_prefix_space false), which
//      with use_regex true first cuts with GPT-2's pattern. SentencePiece-style: none (the stretch
//      is one piece), or Metaspace (tokenizer_hf_metaspace: ' ' -> the replacement ▁, which goes
//      first by prepend_scheme "first" / "always" / "never"; split cuts before each ▁). The legacy
//      subtlety: transformers' converter writes Mistral's and Llama's models with legacy true as
//      Prepend + Replace (a ▁ before every stretch, after special tokens too: what sentencepiece
//      gives on plain text) and with legacy false as Metaspace "first" (a ▁ only at the text's
//      start, and none where the text starts with a space).
//   4. model: BPE with merges ranked in file order, ties to the left (tokenizers' merge_word),
//      starting from the piece's bytes (byte-level: ByteLevel's byte-to-unicode mapping is only a
//      spelling in the file) or from its characters (SentencePiece-style, tokenizer_sp_parts: a
//      character that is not a key of model.vocab is its <0xXX> tokens with byte_fallback, else
//      unk_token, a run of them one unk with fuse_unk); with ignore_merges, a piece whose
//      spelling is a key of model.vocab is that one token.
// The patterns (the strings as they are in the files; \p{L}, \p{N}, \s from unicode_tables.h):
//   GPT-2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Llama 3 (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2   the same with \p{N} in place of \p{N}{1,3}
// Decoding, per token (tok->token_table): byte-level, ByteLevel's (a token whose every character
// is in the byte-level alphabet is those bytes, any other, such as "<|im start|>", its UTF-8
// text); SentencePiece-style, the decoder's Replace ("▁" -> " ") or Metaspace and ByteFallback
// ("<0x0A>" is the byte 0x0A). Fuse is what printing tokens one after another does; Strip(" ", 1)
// and Metaspace's first-space drop apply to a whole text: h->strip_start (tokenizer_strip_start).
//
// Refused, each naming the file and the field (exit 2 in the trainer): malformed JSON; a model
// that is not BPE (Unigram, WordPiece, WordLevel); BPE with dropout, continuing_subword_prefix or
// end_of_word_suffix, byte_fallback with ByteLevel, a SentencePiece-style BPE with neither
// byte_fallback nor unk_token; a normalizer step but NFC, Prepend and Replace with a String
// pattern (NFKC, Lowercase, Precompiled, Strip, Replace with a Regex, ...); any pre-tokenizer step,
// pattern or behaviour but those above, Split or Digits without ByteLevel last, Metaspace with
// other steps; a decoder other than ByteLevel (byte-level) or Replace of one character,
// ByteFallback, Fuse, Strip(" ", start, stop 0), Metaspace (SentencePiece-style); a
// post-processor other than ByteLevel, TemplateProcessing and Sequence; truncation set; vocab or
// merge entries that are not strings or name tokens model.vocab lacks; a byte with no token;
// added tokens with single_word, with lstrip or rstrip matched in the normalized text (under a
// normalizer, "normalized" true), or that begin or end with whitespace beside a token with lstrip or
// rstrip; an added token whose id holds other text.
//
// The document token (tok->eot_token, written before each document by -tokenize): the special
// token the post-processor puts first (Llama 3's TemplateProcessing adds <|begin_of_text|>,
// Mistral's and Llama 2's <s>; llm.c's Llama 3 data starts each document with it too), else the
// added token "<|endoftext|>" (GPT-2, Qwen2, SmolLM2), else tokenizer_config.json's eos_token;
// without any of those, -tokenize refuses.
//
// Unicode versions: our tables are Unicode 16.0.0; tokenizers' regex (Oniguruma) and NFC
// (unicode-normalization) use their own, so characters assigned after Unicode 15 may differ.

// Format a one-line message into err (if given). Returns -1.
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

// Is `path` a Hugging Face tokenizer (a directory, or a file starting with '{')?
static inline int tokenizer_is_hf(const char* path) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    if (S_ISDIR(st.st_mode)) return 1;
    FILE* f = zt_fopen_read(path);
    if (!f) return 0;
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\t' || c == '\n' || c == '\r') {}
    fclose(f);
    return c == '{';
}

// GPT-2's byte-to-unicode alphabet: byte b is spelled as code point tokenizer_byte_char(b).
static inline uint32_t tokenizer_byte_char(int b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return (uint32_t)b;
    int n = 0;  // the others get 256, 257, ... in byte order
    for (int x = 0; x < b; x++)
        if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) n++;
    return 256u + (uint32_t)n;
}

// Byte b's spelling in UTF-8 (GPT-2's alphabet), 1 or 2 bytes: spell[b][0] = length. Filled on
// the first call, which tokenizer_init_hf makes before any encoding (so threads only read it).
static inline const unsigned char (*tokenizer_byte_spellings(void))[3] {
    static unsigned char spell[256][3];
    static int ready = 0;
    if (!ready) {
        for (int b = 0; b < 256; b++) {
            uint32_t cp = tokenizer_byte_char(b);
            if (cp < 0x80) { spell[b][0] = 1; spell[b][1] = (unsigned char)cp; }
            else { spell[b][0] = 2; spell[b][1] = (unsigned char)(0xC0 | cp >> 6); spell[b][2] = (unsigned char)(0x80 | (cp & 0x3F)); }
        }
        ready = 1;
    }
    return spell;
}

// Append the UTF-8 of code point cp to p; returns the bytes written (1..4).
static inline int tokenizer_put_utf8(unsigned char* p, uint32_t cp) {
    if (cp < 0x80) { p[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { p[0] = (unsigned char)(0xC0 | cp >> 6); p[1] = (unsigned char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        p[0] = (unsigned char)(0xE0 | cp >> 12); p[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F)); p[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    p[0] = (unsigned char)(0xF0 | cp >> 18); p[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    p[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F)); p[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

// The bytes a token spelled s[0..n) (UTF-8) stands for, into out (room for n bytes): each
// character's byte when all are in the byte-level alphabet, else s itself (ByteLevel's decoder).
// Returns the length.
static inline size_t tokenizer_unspell(const unsigned char* s, size_t n, unsigned char* out) {
    static int16_t back[324];  // code point -> byte, -1: not in the alphabet
    static int ready = 0;
    if (!ready) {
        for (int i = 0; i < 324; i++) back[i] = -1;
        for (int b = 0; b < 256; b++) back[tokenizer_byte_char(b)] = (int16_t)b;
        ready = 1;
    }
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = tokenizer_utf8(s + i, n - i, &cp);
        if (l == 0 || cp >= 324 || back[cp] < 0) {
            memcpy(out, s, n);
            return n;
        }
        out[o++] = (unsigned char)back[cp];
        i += (size_t)l;
    }
    return o;
}

static inline uint32_t tokenizer_hf_hash(const unsigned char* p, size_t n) {
    uint64_t h = tokenizer_hash(p, n);
    return (uint32_t)(h ^ (h >> 32));
}

// model.vocab's id for the key k[0..n) (spelled in the byte-level alphabet), or -1.
static inline int64_t tokenizer_hf_lookup(const TokenizerHF* h, const unsigned char* k, size_t n) {
    for (uint32_t i = tokenizer_hf_hash(k, n) & h->vhash_mask; h->vhash[i]; i = (i + 1) & h->vhash_mask) {
        uint32_t id = h->vhash[i] - 1;
        if (h->key_len[id] == n && memcmp(h->strs + h->key_at[id], k, n) == 0) return id;
    }
    return -1;
}

// Is the node a JSON string equal to s?
static inline int tokenizer_json_is(const Json* j, int node, const char* s) {
    return node >= 0 && j->nodes[node].type == JSON_STRING && strcmp(j->nodes[node].str, s) == 0;
}

// Member `key` of object obj: 1 if it is true, 0 if false, null or absent, -1 otherwise.
static inline int tokenizer_json_flag(const Json* j, int obj, const char* key) {
    int n = json_get(j, obj, key);
    if (n < 0 || j->nodes[n].type == JSON_NULL || j->nodes[n].type == JSON_FALSE) return 0;
    return j->nodes[n].type == JSON_TRUE ? 1 : -1;
}

static const char TOKENIZER_RE_GPT2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char TOKENIZER_RE_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char TOKENIZER_RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// One pre-tokenizer step (not a Sequence) into h->steps; *bytelevel_seen set by ByteLevel.
// Returns 0, or -1 with the message (what, naming the field) in err.
static inline int tokenizer_hf_step(TokenizerHF* h, const Json* j, int node, const char* where, int* bytelevel_seen,
                                    const char* path, char* err, size_t errlen) {
    int type = json_get(j, node, "type");
    if (j->nodes[node].type != JSON_OBJECT || type < 0 || j->nodes[type].type != JSON_STRING) {
        return tokenize_error(err, errlen, "tokenizer %s: %s is not an object with a \"type\"", path, where);
    }
    const char* t = j->nodes[type].str;
    if (*bytelevel_seen) {
        return tokenize_error(err, errlen, "tokenizer %s: %s (%s) comes after ByteLevel: not supported (ByteLevel must be the last step)",
                              path, where, t);
    }
    if (h->nsteps >= TOKENIZER_MAX_STEPS - 1) return tokenize_error(err, errlen, "tokenizer %s: %s: more than %d pre-tokenizer steps", path, where, TOKENIZER_MAX_STEPS - 1);
    if (!strcmp(t, "ByteLevel")) {
        if (tokenizer_json_flag(j, node, "add_prefix_space") != 0) {
            return tokenize_error(err, errlen, "tokenizer %s: %s.add_prefix_space is not false: not supported", path, where);
        }
        int use_regex = json_get(j, node, "use_regex");  // absent: true (tokenizers' default)
        int on = use_regex < 0 || j->nodes[use_regex].type == JSON_TRUE;
        if (use_regex >= 0 && j->nodes[use_regex].type != JSON_TRUE && j->nodes[use_regex].type != JSON_FALSE) {
            return tokenize_error(err, errlen, "tokenizer %s: %s.use_regex is not true or false", path, where);
        }
        if (on) h->steps[h->nsteps++] = TOKENIZER_STEP_GPT2;
        *bytelevel_seen = 1;
        return 0;
    }
    if (!strcmp(t, "Metaspace")) {  // SentencePiece-style: ' ' -> replacement, then prepend and split
        int rep = json_get(j, node, "replacement"), sch = json_get(j, node, "prepend_scheme"), ap = tokenizer_json_flag(j, node, "add_prefix_space");
        uint32_t cp;
        if (rep < 0 || j->nodes[rep].type != JSON_STRING || j->nodes[rep].len < 1 || j->nodes[rep].len > 4 ||
            tokenizer_utf8((const unsigned char*)j->nodes[rep].str, (size_t)j->nodes[rep].len, &cp) != j->nodes[rep].len)
            return tokenize_error(err, errlen, "tokenizer %s: %s.replacement is not one character", path, where);
        memcpy(h->meta, j->nodes[rep].str, (size_t)j->nodes[rep].len);
        h->meta_len = j->nodes[rep].len;
        // prepend_scheme (tokenizers >= 0.15); older files say add_prefix_space, which meant "always"
        if (sch < 0) h->prepend_scheme = ap == 1 ? TOKENIZER_PREPEND_ALWAYS : TOKENIZER_PREPEND_NEVER;
        else if (tokenizer_json_is(j, sch, "first")) h->prepend_scheme = TOKENIZER_PREPEND_FIRST;
        else if (tokenizer_json_is(j, sch, "always")) h->prepend_scheme = TOKENIZER_PREPEND_ALWAYS;
        else if (tokenizer_json_is(j, sch, "never")) h->prepend_scheme = TOKENIZER_PREPEND_NEVER;
        else return tokenize_error(err, errlen, "tokenizer %s: %s.prepend_scheme is not \"first\", \"always\" or \"never\"", path, where);
        int split = json_get(j, node, "split");  // absent: true (tokenizers' default)
        if (split >= 0 && j->nodes[split].type != JSON_TRUE && j->nodes[split].type != JSON_FALSE)
            return tokenize_error(err, errlen, "tokenizer %s: %s.split is not true or false", path, where);
        h->meta_split = split < 0 || j->nodes[split].type == JSON_TRUE;
        if (h->metaspace) return tokenize_error(err, errlen, "tokenizer %s: %s: a second Metaspace: not supported", path, where);
        h->metaspace = 1;
        return 0;
    }
    if (!strcmp(t, "Digits")) {
        int ind = tokenizer_json_flag(j, node, "individual_digits");
        if (ind < 0) return tokenize_error(err, errlen, "tokenizer %s: %s.individual_digits is not true or false", path, where);
        h->steps[h->nsteps++] = ind ? TOKENIZER_STEP_DIGITS : TOKENIZER_STEP_DIGIT_RUNS;
        return 0;
    }
    if (!strcmp(t, "Split")) {
        int pat = json_get(j, node, "pattern"), re = json_get(j, pat, "Regex");
        if (re < 0 || j->nodes[re].type != JSON_STRING) {
            return tokenize_error(err, errlen, "tokenizer %s: %s.pattern is not {\"Regex\": ...}: only the GPT-2, Llama 3 and Qwen2 "
                                  "regular expressions are supported", path, where);
        }
        const char* r = j->nodes[re].str;
        int step = !strcmp(r, TOKENIZER_RE_GPT2) ? TOKENIZER_STEP_GPT2 : !strcmp(r, TOKENIZER_RE_LLAMA3) ? TOKENIZER_STEP_LLAMA3
                 : !strcmp(r, TOKENIZER_RE_QWEN2) ? TOKENIZER_STEP_QWEN2 : -1;
        if (step < 0) {
            return tokenize_error(err, errlen, "tokenizer %s: %s.pattern.Regex \"%.200s\" is not one this reader knows (GPT-2's, "
                                  "Llama 3's, Qwen2's)", path, where, r);
        }
        if (!tokenizer_json_is(j, json_get(j, node, "behavior"), "Isolated") || tokenizer_json_flag(j, node, "invert") != 0) {
            return tokenize_error(err, errlen, "tokenizer %s: %s: only behavior \"Isolated\" with invert false is supported", path, where);
        }
        h->steps[h->nsteps++] = step;
        return 0;
    }
    return tokenize_error(err, errlen, "tokenizer %s: %s.type \"%s\" is not supported (known: Split, Digits, ByteLevel, Metaspace, Sequence)",
                          path, where, t);
}

// A JSON string of at most 15 bytes into out (NUL-terminated), its length in *len. 0, or -1 if not.
static inline int tokenizer_json_short(const Json* j, int node, char out[16], uint32_t* len) {
    if (node < 0 || j->nodes[node].type != JSON_STRING || j->nodes[node].len > 15) return -1;
    memcpy(out, j->nodes[node].str, (size_t)j->nodes[node].len + 1);
    *len = (uint32_t)j->nodes[node].len;
    return 0;
}

// The normalizer into h->norms: null, NFC, Prepend, Replace (a String pattern), or a Sequence of
// them. Returns 0, or -1 with the message in err.
static inline int tokenizer_hf_normalizer(TokenizerHF* h, const Json* j, int norm, const char* path, char* err, size_t errlen) {
    if (norm < 0 || j->nodes[norm].type == JSON_NULL) return 0;
    int one = norm, count = 1;
    if (tokenizer_json_is(j, json_get(j, norm, "type"), "Sequence")) {
        int list = json_get(j, norm, "normalizers");
        if (list < 0 || j->nodes[list].type != JSON_ARRAY) return tokenize_error(err, errlen, "tokenizer %s: normalizer.normalizers is not an array", path);
        one = j->nodes[list].first;
        count = j->nodes[list].count;
    }
    for (int k = 0; k < count; k++, one = j->nodes[one].next) {
        int t = json_get(j, one, "type");
        const char* ty = t >= 0 && j->nodes[t].type == JSON_STRING ? j->nodes[t].str : "?";
        if (h->nnorms >= TOKENIZER_MAX_STEPS) return tokenize_error(err, errlen, "tokenizer %s: more than %d normalizer steps", path, TOKENIZER_MAX_STEPS);
        TokenizerNorm* st = &h->norms[h->nnorms];
        memset(st, 0, sizeof(*st));
        if (!strcmp(ty, "NFC")) {
            st->kind = TOKENIZER_NORM_NFC;
            h->nfc = 1;
        } else if (!strcmp(ty, "Prepend")) {
            st->kind = TOKENIZER_NORM_PREPEND;
            if (tokenizer_json_short(j, json_get(j, one, "prepend"), st->a, &st->alen) != 0 || st->alen == 0)
                return tokenize_error(err, errlen, "tokenizer %s: normalizer Prepend: \"prepend\" is not a string of 1..15 bytes", path);
        } else if (!strcmp(ty, "Replace")) {
            st->kind = TOKENIZER_NORM_REPLACE;
            int pat = json_get(j, one, "pattern");
            if (tokenizer_json_short(j, json_get(j, pat, "String"), st->a, &st->alen) != 0 || st->alen == 0)
                return tokenize_error(err, errlen, "tokenizer %s: normalizer Replace: pattern is not {\"String\": 1..15 bytes} (a Regex pattern is "
                                      "not supported)", path);
            if (tokenizer_json_short(j, json_get(j, one, "content"), st->b, &st->blen) != 0)
                return tokenize_error(err, errlen, "tokenizer %s: normalizer Replace: \"content\" is not a string of up to 15 bytes", path);
        } else {
            return tokenize_error(err, errlen, "tokenizer %s: normalizer type \"%s\" is not supported (NFC, Prepend, Replace, Sequence)", path, ty);
        }
        h->nnorms++;
    }
    return 0;
}

// The decoder. Byte-level BPE: null or ByteLevel. SentencePiece-style: null, or Replace (a String
// of one character), ByteFallback, Fuse, Strip (stop 0), Metaspace, alone or in a Sequence. Read
// per token (tokenizer_sp_unspell: *rep_from -> *rep_to, <0xXX> -> the byte if *bytefallback);
// Strip and Metaspace's leading-space drop apply to a whole text (h->strip_start). Returns 0 / -1.
static inline int tokenizer_hf_decoder(TokenizerHF* h, const Json* j, int dec, char rep_from[16], char rep_to[16], uint32_t* rep_from_len,
                                       uint32_t* rep_to_len, int* bytefallback, const char* path, char* err, size_t errlen) {
    *rep_from_len = *rep_to_len = 0;
    *bytefallback = 0;
    if (dec < 0 || j->nodes[dec].type == JSON_NULL) return 0;
    int one = dec, count = 1;
    if (h->sp && tokenizer_json_is(j, json_get(j, dec, "type"), "Sequence")) {
        int list = json_get(j, dec, "decoders");
        if (list < 0 || j->nodes[list].type != JSON_ARRAY) return tokenize_error(err, errlen, "tokenizer %s: decoder.decoders is not an array", path);
        one = j->nodes[list].first;
        count = j->nodes[list].count;
    }
    for (int k = 0; k < count; k++, one = j->nodes[one].next) {
        int t = json_get(j, one, "type");
        const char* ty = t >= 0 && j->nodes[t].type == JSON_STRING ? j->nodes[t].str : "?";
        if (!h->sp) {
            if (strcmp(ty, "ByteLevel") != 0)
                return tokenize_error(err, errlen, "tokenizer %s: decoder type \"%s\" is not supported for a byte-level BPE (only ByteLevel)", path, ty);
            continue;
        }
        uint32_t cp;
        if (!strcmp(ty, "Fuse")) continue;  // joins the tokens' strings: what printing them one after another does
        if (!strcmp(ty, "ByteFallback")) *bytefallback = 1;
        else if (!strcmp(ty, "Replace")) {
            if (*rep_from_len) return tokenize_error(err, errlen, "tokenizer %s: decoder: a second Replace: not supported", path);
            if (tokenizer_json_short(j, json_get(j, json_get(j, one, "pattern"), "String"), rep_from, rep_from_len) != 0 || *rep_from_len == 0 ||
                tokenizer_utf8((const unsigned char*)rep_from, *rep_from_len, &cp) != (int)*rep_from_len ||
                tokenizer_json_short(j, json_get(j, one, "content"), rep_to, rep_to_len) != 0)
                return tokenize_error(err, errlen, "tokenizer %s: decoder Replace: only a String pattern of one character is supported", path);
        } else if (!strcmp(ty, "Strip")) {
            int c = json_get(j, one, "content"), st = json_get(j, one, "start"), sp = json_get(j, one, "stop");
            if (!tokenizer_json_is(j, c, " ") || st < 0 || !j->nodes[st].is_int || j->nodes[st].i < 0 || j->nodes[st].i > 16 ||
                (sp >= 0 && !(j->nodes[sp].is_int && j->nodes[sp].i == 0)))
                return tokenize_error(err, errlen, "tokenizer %s: decoder Strip: only content \" \", start 0..16, stop 0 are supported", path);
            h->strip_start = (int)j->nodes[st].i;
        } else if (!strcmp(ty, "Metaspace")) {  // the replacement back to ' '; the first token's leading one dropped
            int rep = json_get(j, one, "replacement"), sch = json_get(j, one, "prepend_scheme");
            if (*rep_from_len || tokenizer_json_short(j, rep, rep_from, rep_from_len) != 0 || *rep_from_len == 0 ||
                tokenizer_utf8((const unsigned char*)rep_from, *rep_from_len, &cp) != (int)*rep_from_len)
                return tokenize_error(err, errlen, "tokenizer %s: decoder Metaspace: replacement is not one character (or a second Replace)", path);
            memcpy(rep_to, " ", 2);
            *rep_to_len = 1;
            int prepends = sch >= 0 ? !tokenizer_json_is(j, sch, "never") : tokenizer_json_flag(j, one, "add_prefix_space") == 1;
            if (prepends) h->strip_start = 1;
        } else {
            return tokenize_error(err, errlen, "tokenizer %s: decoder type \"%s\" is not supported (Replace, ByteFallback, Fuse, Strip, Metaspace, "
                                  "Sequence)", path, ty);
        }
    }
    return 0;
}

// The bytes a SentencePiece-style token s[0..n) decodes to, into out (room for n bytes): "<0xXX>" is
// the byte XX when the decoder has ByteFallback; otherwise s with every rep_from made rep_to
// (▁ -> ' ': never longer). Returns the length.
static inline size_t tokenizer_sp_unspell(const unsigned char* s, size_t n, const char* rep_from, uint32_t rep_from_len, const char* rep_to,
                                          uint32_t rep_to_len, int bytefallback, unsigned char* out) {
    static const char hex[] = "0123456789ABCDEF";
    if (bytefallback && n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' && strchr(hex, s[3]) && strchr(hex, s[4]) && s[3] && s[4]) {
        out[0] = (unsigned char)((strchr(hex, s[3]) - hex) << 4 | (strchr(hex, s[4]) - hex));
        return 1;
    }
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (rep_from_len && rep_to_len <= rep_from_len && i + rep_from_len <= n && memcmp(s + i, rep_from, rep_from_len) == 0) {
            memcpy(out + o, rep_to, rep_to_len);
            o += rep_to_len;
            i += rep_from_len;
        } else out[o++] = s[i++];
    }
    return o;
}

// Read tokenizer_config.json's `key` (a string, or an object with "content") into out; 0 if absent.
static inline int tokenizer_config_token(const Json* j, const char* key, char* out, size_t cap) {
    int n = json_get(j, 0, key);
    if (n >= 0 && j->nodes[n].type == JSON_OBJECT) n = json_get(j, n, "content");
    if (n < 0 || j->nodes[n].type != JSON_STRING) return 0;
    snprintf(out, cap, "%s", j->nodes[n].str);
    return 1;
}

// Read a whole file into a malloc'ed buffer (*len bytes). Returns NULL with err set.
static inline char* tokenizer_read_file(const char* path, size_t* len, char* err, size_t errlen) {
    FILE* f = zt_fopen_read(path);
    if (!f) {
        tokenize_error(err, errlen, "tokenizer %s: cannot open: %s", path, zt_strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        tokenize_error(err, errlen, "tokenizer %s: not a readable regular file", path);
        return NULL;
    }
    char* text = (char*)malloc((size_t)st.st_size + 1);
    if (!text || fread(text, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        fclose(f);
        free(text);
        tokenize_error(err, errlen, "tokenizer %s: %s", path, text ? "read error" : "out of memory");
        return NULL;
    }
    fclose(f);
    *len = (size_t)st.st_size;
    return text;
}

static inline int tokenizer_added_cmp(const void* a, const void* b) {
    const TokenizerAdded *x = (const TokenizerAdded*)a, *y = (const TokenizerAdded*)b;
    unsigned char cx = (unsigned char)x->content[0], cy = (unsigned char)y->content[0];
    if (cx != cy) return cx < cy ? -1 : 1;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return 0;
}

// The id of the added token whose content is name, -1 if there is none.
static inline int tokenizer_added_id(const TokenizerHF* h, const char* name) {
    for (int b = 0; b < h->nadded; b++)
        if (!strcmp(h->added[b].content, name)) return (int)h->added[b].id;
    return -1;
}

// SentencePiece-style, at load: the <0xXX> tokens (fallback_id), what a one-byte piece is
// (byte_id: an ASCII character's own token, else its <0xXX>, else unk), and whether a streamed text
// may be cut before a space (sp_cut: see "Streaming" below). Returns 0, or -1 when a byte would
// have no token at all.
static inline int tokenizer_sp_bytes(TokenizerHF* h, TokenizerEncoder* e, uint32_t V) {
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        char name[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
        int64_t fb = h->byte_fallback ? tokenizer_hf_lookup(h, (const unsigned char*)name, 6) : -1;
        unsigned char c = (unsigned char)b;
        int64_t own = b < 0x80 ? tokenizer_hf_lookup(h, &c, 1) : -1;
        h->fallback_id[b] = fb >= 0 ? (uint32_t)fb : UINT32_MAX;
        int64_t id = own >= 0 ? own : fb >= 0 ? fb : h->unk_id;
        if (id < 0) return -1;
        e->byte_id[b] = (uint32_t)id;
    }
    // Where does the text's ' ' go? R: the Metaspace replacement, or a Replace(" " -> R) normalizer;
    // ' ' itself without them. A cut before a space after a non-space is safe when nothing else
    // can make an R and no model.vocab key holds R after another character (so no merge joins
    // what comes before the space to it).
    unsigned char R[16] = {' '};
    uint32_t rlen = 1;
    int ok = 1;
    for (int k = 0; k < h->nnorms; k++) {
        const TokenizerNorm* st = &h->norms[k];
        if (st->kind != TOKENIZER_NORM_REPLACE) continue;
        if (st->alen == 1 && st->a[0] == ' ' && rlen == 1 && R[0] == ' ' && st->blen > 0) { memcpy(R, st->b, st->blen); rlen = st->blen; }
        else ok = 0;
    }
    if (h->metaspace) {
        if (rlen == 1 && R[0] == ' ') { memcpy(R, h->meta, (size_t)h->meta_len); rlen = (uint32_t)h->meta_len; }
        else if (rlen != (uint32_t)h->meta_len || memcmp(R, h->meta, rlen) != 0) ok = 0;
    }
    for (uint32_t id = 0; ok && id < V; id++) {
        if (h->key_at[id] == UINT32_MAX) continue;
        const unsigned char* k = (const unsigned char*)h->strs + h->key_at[id];
        uint32_t kl = h->key_len[id];
        for (uint32_t i = 1; i + rlen <= kl && ok; i++) {
            if (memcmp(k + i, R, rlen) != 0) continue;
            if (!(i >= rlen && memcmp(k + i - rlen, R, rlen) == 0)) ok = 0;  // R after a character that is not R
        }
    }
    if (tokenizer_hf_lookup(h, R, rlen) < 0) ok = 0;  // R must be a key: an unknown R would fuse with an unknown character before it
    h->sp_cut = ok;
    memcpy(h->space_rep, R, rlen);
    h->space_rep_len = (int)rlen;
    return 0;
}

// Read a tokenizer.json (or the directory holding it) into tok: vocabulary, merges, pipeline.
// Returns 0, or -1 with a one-line message naming the file and the field, nothing left allocated.
static inline int tokenizer_init_hf(Tokenizer* tok, const char* path_in, char* err, size_t errlen) {
    memset(tok, 0, sizeof(*tok));
    tok->eot_token = -1;
    char path[4096], cfg_path[4096];
    struct stat st;
    int is_dir = stat(path_in, &st) == 0 && S_ISDIR(st.st_mode);
    snprintf(path, sizeof(path), is_dir ? "%s/tokenizer.json" : "%s", path_in);
    if (is_dir) snprintf(cfg_path, sizeof(cfg_path), "%s/tokenizer_config.json", path_in);
    else {  // a file: its directory's tokenizer_config.json, if there is one
        const char* slash = strrchr(path_in, '/');
        snprintf(cfg_path, sizeof(cfg_path), "%.*stokenizer_config.json", slash ? (int)(slash - path_in + 1) : 0, path_in);
    }
    size_t len = 0;
    char* text = tokenizer_read_file(path, &len, err, errlen);
    if (!text) return -1;
    Json j;
    char jerr[256];
    TokenizerHF* h = (TokenizerHF*)calloc(1, sizeof(TokenizerHF));
    tok->hf = h;
    if (!h) {
        free(text);
        return tokenizer_fail(tok, err, errlen, "tokenizer %s: out of memory", path);
    }
    h->bos_token = h->export_bos = h->export_eos = -1;
    h->match_specials = 1;
    h->src_json = strdup(path);
    h->src_config = strdup(cfg_path);
    if (!h->src_json || !h->src_config) {
        free(text);
        return tokenizer_fail(tok, err, errlen, "tokenizer %s: out of memory", path);
    }
    if (json_parse(&j, text, len, jerr, sizeof(jerr)) != 0) {
        json_free(&j);
        free(text);
        return tokenizer_fail(tok, err, errlen, "tokenizer %s: %s", path, jerr);
    }
    free(text);  // the parsed strings live in j
    unsigned char* catbuf = NULL;
#define HF_FAIL(...) do { tokenize_error(err, errlen, __VA_ARGS__); json_free(&j); free(catbuf); tokenizer_free(tok); return -1; } while (0)
    if (j.nodes[0].type != JSON_OBJECT) HF_FAIL("tokenizer %s: not a JSON object", path);
    // --- model: BPE (byte-level, or SentencePiece-style with byte_fallback / unk_token)
    int model = json_get(&j, 0, "model");
    if (model < 0 || j.nodes[model].type != JSON_OBJECT) HF_FAIL("tokenizer %s: no \"model\" object", path);
    int mtype = json_get(&j, model, "type");
    int vocab = json_get(&j, model, "vocab"), merges = json_get(&j, model, "merges");
    if (mtype < 0) HF_FAIL("tokenizer %s: model has no \"type\"", path);
    if (!tokenizer_json_is(&j, mtype, "BPE")) {
        HF_FAIL("tokenizer %s: model.type \"%s\" is not supported: only BPE, byte-level or SentencePiece-style (Unigram, WordPiece and "
                "WordLevel models are not supported)", path, j.nodes[mtype].type == JSON_STRING ? j.nodes[mtype].str : "?");
    }
    if (vocab < 0 || j.nodes[vocab].type != JSON_OBJECT) HF_FAIL("tokenizer %s: model.vocab is not an object", path);
    if (merges < 0 || j.nodes[merges].type != JSON_ARRAY) HF_FAIL("tokenizer %s: model.merges is not an array", path);
    const char* refused[] = {"dropout", "continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 3; k++) {
        int n = json_get(&j, model, refused[k]);
        if (n >= 0 && j.nodes[n].type != JSON_NULL && !(j.nodes[n].type == JSON_STRING && j.nodes[n].len == 0))
            HF_FAIL("tokenizer %s: model.%s is set: not supported", path, refused[k]);
    }
    int ig = tokenizer_json_flag(&j, model, "ignore_merges"), bf = tokenizer_json_flag(&j, model, "byte_fallback");
    int fu = tokenizer_json_flag(&j, model, "fuse_unk"), unk = json_get(&j, model, "unk_token");
    if (ig < 0 || bf < 0 || fu < 0) HF_FAIL("tokenizer %s: model.ignore_merges, byte_fallback or fuse_unk is not true or false", path);
    if (unk >= 0 && j.nodes[unk].type != JSON_NULL && j.nodes[unk].type != JSON_STRING) HF_FAIL("tokenizer %s: model.unk_token is not a string", path);
    h->ignore_merges = ig;
    h->byte_fallback = bf;
    h->fuse_unk = fu;
    h->unk_id = -1;
    // --- normalizer: NFC, Prepend, Replace, in a Sequence or alone
    if (tokenizer_hf_normalizer(h, &j, json_get(&j, 0, "normalizer"), path, err, errlen)) { json_free(&j); tokenizer_free(tok); return -1; }
    // --- pre-tokenizer: steps with ByteLevel last (byte-level BPE), or none / Metaspace alone (SentencePiece-style)
    int pre = json_get(&j, 0, "pre_tokenizer"), bl = 0;
    if (pre >= 0 && j.nodes[pre].type != JSON_NULL && tokenizer_json_is(&j, json_get(&j, pre, "type"), "Sequence")) {
        int list = json_get(&j, pre, "pretokenizers");
        if (list < 0 || j.nodes[list].type != JSON_ARRAY) HF_FAIL("tokenizer %s: pre_tokenizer.pretokenizers is not an array", path);
        int k = 0;
        for (int s = j.nodes[list].first; s >= 0; s = j.nodes[s].next, k++) {
            char where[64];
            snprintf(where, sizeof(where), "pre_tokenizer.pretokenizers[%d]", k);
            if (tokenizer_hf_step(h, &j, s, where, &bl, path, err, errlen)) { json_free(&j); tokenizer_free(tok); return -1; }
        }
    } else if (pre >= 0 && j.nodes[pre].type != JSON_NULL && tokenizer_hf_step(h, &j, pre, "pre_tokenizer", &bl, path, err, errlen)) {
        json_free(&j);
        tokenizer_free(tok);
        return -1;
    }
    if (h->metaspace && (bl || h->nsteps)) HF_FAIL("tokenizer %s: pre_tokenizer: Metaspace with other steps is not supported (Metaspace alone)", path);
    if (!bl && h->nsteps) HF_FAIL("tokenizer %s: pre_tokenizer has no ByteLevel step: not a byte-level BPE (nor SentencePiece-style: no "
                                  "pre-tokenizer, or Metaspace alone)", path);
    h->sp = !bl;
    if (!h->sp && bf) HF_FAIL("tokenizer %s: model.byte_fallback with a ByteLevel pre-tokenizer: not supported", path);
    if (h->sp && !bf && (unk < 0 || j.nodes[unk].type != JSON_STRING))
        HF_FAIL("tokenizer %s: SentencePiece-style BPE with neither model.byte_fallback nor model.unk_token: a character outside model.vocab "
                "would be dropped (not supported)", path);
    // --- decoder: ByteLevel (byte-level BPE); Replace, ByteFallback, Fuse, Strip, Metaspace (SentencePiece-style)
    char rep_from[16], rep_to[16];
    uint32_t rep_from_len, rep_to_len;
    int dec_bytes;
    if (tokenizer_hf_decoder(h, &j, json_get(&j, 0, "decoder"), rep_from, rep_to, &rep_from_len, &rep_to_len, &dec_bytes, path, err, errlen)) {
        json_free(&j);
        tokenizer_free(tok);
        return -1;
    }
    int trunc = json_get(&j, 0, "truncation");
    if (trunc >= 0 && j.nodes[trunc].type != JSON_NULL) HF_FAIL("tokenizer %s: truncation is set: not supported (it cuts documents)", path);

    // --- vocabulary: model.vocab, then added_tokens; V = the largest id + 1
    int added = json_get(&j, 0, "added_tokens");
    if (added >= 0 && j.nodes[added].type != JSON_ARRAY && j.nodes[added].type != JSON_NULL) HF_FAIL("tokenizer %s: added_tokens is not an array", path);
    int nadded = added >= 0 && j.nodes[added].type == JSON_ARRAY ? j.nodes[added].count : 0;
    int64_t V = 0;
    size_t strs_bytes = 1;
    for (int v = j.nodes[vocab].first; v >= 0; v = j.nodes[v].next) {
        const JsonNode* n = &j.nodes[v];
        if (n->type != JSON_NUMBER || !n->is_int || n->i < 0 || n->i >= TOKENIZER_MAX_VOCAB)
            HF_FAIL("tokenizer %s: model.vocab[\"%.100s\"] is not an id 0..%u", path, n->key, TOKENIZER_MAX_VOCAB - 1);
        if (n->i + 1 > V) V = n->i + 1;
        strs_bytes += strlen(n->key) + 1;
    }
    int ai = 0;
    for (int a = nadded ? j.nodes[added].first : -1; a >= 0; a = j.nodes[a].next, ai++) {
        int id = json_get(&j, a, "id"), c = json_get(&j, a, "content");
        if (id < 0 || !j.nodes[id].is_int || j.nodes[id].i < 0 || j.nodes[id].i >= TOKENIZER_MAX_VOCAB || c < 0 ||
            j.nodes[c].type != JSON_STRING || j.nodes[c].len == 0)
            HF_FAIL("tokenizer %s: added_tokens[%d] has no id 0..%u or no content", path, ai, TOKENIZER_MAX_VOCAB - 1);
        if (tokenizer_json_flag(&j, a, "single_word") != 0) HF_FAIL("tokenizer %s: added_tokens[%d].single_word is not false: not supported", path, ai);
        for (int k = 0; k < 2; k++)
            if (tokenizer_json_flag(&j, a, k ? "rstrip" : "lstrip") < 0) HF_FAIL("tokenizer %s: added_tokens[%d].%s is not true or false", path, ai, k ? "rstrip" : "lstrip");
        if (j.nodes[id].i + 1 > V) V = j.nodes[id].i + 1;
        strs_bytes += (size_t)j.nodes[c].len + 1;
    }
    if (V == 0) HF_FAIL("tokenizer %s: model.vocab is empty", path);
    tok->vocab_size = (uint32_t)V;
    tok->token_table = (char**)calloc((size_t)V, sizeof(char*));
    tok->token_len = (uint32_t*)calloc((size_t)V, sizeof(uint32_t));
    tok->bytes = (char*)malloc(strs_bytes);  // the decoded bytes, never longer than the spelling
    h->strs = (char*)malloc(strs_bytes);
    h->key_at = (uint32_t*)malloc((size_t)V * sizeof(uint32_t));
    h->key_len = (uint32_t*)calloc((size_t)V, sizeof(uint32_t));
    h->added = (TokenizerAdded*)calloc((size_t)nadded + 1, sizeof(TokenizerAdded));
    uint32_t cap = 1;
    while (cap < 2 * (uint32_t)V) cap <<= 1;
    h->vhash = (uint32_t*)calloc(cap, sizeof(uint32_t));
    h->vhash_mask = cap - 1;
    if (!tok->token_table || !tok->token_len || !tok->bytes || !h->strs || !h->key_at || !h->key_len || !h->added || !h->vhash)
        HF_FAIL("tokenizer %s: out of memory for %lld tokens", path, (long long)V);
    memset(h->key_at, 0xFF, (size_t)V * sizeof(uint32_t));
    size_t at = 0, bat = 0;
    for (int v = j.nodes[vocab].first; v >= 0; v = j.nodes[v].next) {
        const JsonNode* n = &j.nodes[v];
        uint32_t id = (uint32_t)n->i;
        size_t kl = strlen(n->key);
        if (h->key_at[id] != UINT32_MAX)
            HF_FAIL("tokenizer %s: model.vocab gives id %u to both \"%.100s\" and \"%.100s\"", path, id, h->strs + h->key_at[id], n->key);
        memcpy(h->strs + at, n->key, kl + 1);
        h->key_at[id] = (uint32_t)at;
        h->key_len[id] = (uint32_t)kl;
        at += kl + 1;
        uint32_t i = tokenizer_hf_hash((const unsigned char*)n->key, kl) & h->vhash_mask;
        while (h->vhash[i]) i = (i + 1) & h->vhash_mask;  // keys are distinct: the JSON parser refuses duplicates
        h->vhash[i] = id + 1;
        size_t bl2 = h->sp ? tokenizer_sp_unspell((const unsigned char*)n->key, kl, rep_from, rep_from_len, rep_to, rep_to_len, dec_bytes,
                                                  (unsigned char*)tok->bytes + bat)
                           : tokenizer_unspell((const unsigned char*)n->key, kl, (unsigned char*)tok->bytes + bat);
        tok->bytes[bat + bl2] = 0;
        tok->token_table[id] = tok->bytes + bat;
        tok->token_len[id] = (uint32_t)bl2;
        bat += bl2 + 1;
    }
    ai = 0;
    for (int a = nadded ? j.nodes[added].first : -1; a >= 0; a = j.nodes[a].next, ai++) {
        const JsonNode* c = &j.nodes[json_get(&j, a, "content")];
        uint32_t id = (uint32_t)j.nodes[json_get(&j, a, "id")].i;
        if (h->key_at[id] != UINT32_MAX && (h->key_len[id] != (uint32_t)c->len || memcmp(h->strs + h->key_at[id], c->str, (size_t)c->len) != 0))
            HF_FAIL("tokenizer %s: added_tokens[%d] (\"%.100s\") has id %u, which model.vocab gives to \"%.100s\"", path, ai, c->str, id,
                    h->strs + h->key_at[id]);
        int64_t in_vocab = tokenizer_hf_lookup(h, (const unsigned char*)c->str, (size_t)c->len);
        if (in_vocab >= 0 && (uint32_t)in_vocab != id)
            HF_FAIL("tokenizer %s: added_tokens[%d] (\"%.100s\") has id %u, model.vocab has it as %lld", path, ai, c->str, id, (long long)in_vocab);
        for (int b = 0; b < h->nadded; b++)
            if (h->added[b].id == id || (h->added[b].len == (uint32_t)c->len && !memcmp(h->added[b].content, c->str, (size_t)c->len)))
                HF_FAIL("tokenizer %s: added_tokens[%d] (\"%.100s\", id %u) repeats an earlier added token's id or content", path, ai, c->str, id);
        memcpy(h->strs + at, c->str, (size_t)c->len + 1);
        TokenizerAdded* t = &h->added[h->nadded++];
        t->id = id;
        t->len = (uint32_t)c->len;
        t->content = h->strs + at;
        at += (size_t)c->len + 1;
        t->special = tokenizer_json_flag(&j, a, "special") == 1;
        t->normalized = tokenizer_json_flag(&j, a, "normalized") == 1;
        t->lstrip = tokenizer_json_flag(&j, a, "lstrip") == 1;
        t->rstrip = tokenizer_json_flag(&j, a, "rstrip") == 1;
        if (!tok->token_table[id]) {
            size_t bl2 = h->sp ? tokenizer_sp_unspell((const unsigned char*)t->content, t->len, rep_from, rep_from_len, rep_to, rep_to_len,
                                                      dec_bytes, (unsigned char*)tok->bytes + bat)
                               : tokenizer_unspell((const unsigned char*)t->content, t->len, (unsigned char*)tok->bytes + bat);
            tok->bytes[bat + bl2] = 0;
            tok->token_table[id] = tok->bytes + bat;
            tok->token_len[id] = (uint32_t)bl2;
            bat += bl2 + 1;
        }
    }
    // lstrip / rstrip: the matches take the whitespace beside them (tokenizer_hf_added_at). As far
    // as it is tokenizers' too: in the raw text (a normalized token's strip acts on the normalized
    // text, not done here), and no added token that a stripped run could hold or touch
    int strips = 0;
    for (int k = 0; k < h->nadded; k++) strips |= h->added[k].lstrip || h->added[k].rstrip, h->any_lstrip |= h->added[k].lstrip;
    for (int k = 0; strips && k < h->nadded; k++) {
        const TokenizerAdded* t = &h->added[k];
        uint32_t cp;
        int l0 = tokenizer_utf8((const unsigned char*)t->content, t->len, &cp), ws0 = l0 > 0 && tokenizer_white_space(cp), wse = 0;
        size_t last = t->len - 1;
        while (last > 0 && ((unsigned char)t->content[last] & 0xC0) == 0x80) last--;
        if (tokenizer_utf8((const unsigned char*)t->content + last, t->len - last, &cp) > 0) wse = tokenizer_white_space(cp);
        if ((t->lstrip || t->rstrip) && t->normalized && h->nnorms)
            HF_FAIL("tokenizer %s: added token \"%.100s\" strips whitespace and is matched in the normalized text: not supported", path, t->content);
        if (ws0 || wse)
            HF_FAIL("tokenizer %s: added token \"%.100s\" begins or ends with whitespace beside tokens that strip it (lstrip/rstrip): not supported",
                    path, t->content);
    }
    // added tokens: sorted by first byte, longest first, for the matcher
    qsort(h->added, (size_t)h->nadded, sizeof(TokenizerAdded), tokenizer_added_cmp);
    for (int b = 0, k = 0; b <= 256; b++) {
        while (k < h->nadded && (unsigned char)h->added[k].content[0] < b) k++;
        h->added_first[b] = k;
    }
    // --- byte tokens and merges (ranks in file order; both the "a b" and the ["a", "b"] form)
    TokenizerEncoder* e = &tok->enc;
    (void)tokenizer_byte_spellings();  // filled here, single-threaded
    if (h->sp) {  // unk_token, the <0xXX> tokens, what a one-byte piece is, where a streamed text may be cut
        if (unk >= 0 && j.nodes[unk].type == JSON_STRING) {
            h->unk_id = tokenizer_hf_lookup(h, (const unsigned char*)j.nodes[unk].str, (size_t)j.nodes[unk].len);
            if (h->unk_id < 0) HF_FAIL("tokenizer %s: model.unk_token \"%.100s\" is not in model.vocab", path, j.nodes[unk].str);
        }
        if (tokenizer_sp_bytes(h, e, tok->vocab_size) != 0) HF_FAIL("tokenizer %s: model.byte_fallback is true but model.vocab lacks some of the 256 "
                                                     "<0xXX> tokens, and there is no unk_token", path);
    } else {
        for (int b = 0; b < 256; b++) {
            unsigned char sp[4];
            int l = tokenizer_put_utf8(sp, tokenizer_byte_char(b));
            int64_t id = tokenizer_hf_lookup(h, sp, (size_t)l);
            if (id < 0) HF_FAIL("tokenizer %s: model.vocab has no token for byte 0x%02X (\"%.*s\"): not a byte-level vocabulary", path, b, l, (const char*)sp);
            e->byte_id[b] = (uint32_t)id;
        }
    }
    uint32_t M = (uint32_t)j.nodes[merges].count;
    cap = 1;
    while (cap < 2 * M + 2) cap <<= 1;
    e->merged_id = (uint32_t*)malloc(((size_t)M + 1) * sizeof(uint32_t));
    e->pairs = (TokenizerPair*)calloc(cap, sizeof(TokenizerPair));
    e->pair_mask = cap - 1;
    unsigned char* cat = (unsigned char*)malloc(strs_bytes * 2 + 16);
    catbuf = cat;
    if (!e->merged_id || !e->pairs || !cat) HF_FAIL("tokenizer %s: out of memory for %u merges", path, M);
    uint32_t r = 0;
    for (int m = j.nodes[merges].first; m >= 0; m = j.nodes[m].next, r++) {
        const JsonNode* n = &j.nodes[m];
        const char *a, *b;
        size_t la, lb;
        if (n->type == JSON_STRING) {
            const char* sp = (const char*)memchr(n->str, ' ', (size_t)n->len);
            if (!sp || memchr(sp + 1, ' ', (size_t)(n->str + n->len - sp - 1)))
                HF_FAIL("tokenizer %s: model.merges[%u] \"%.100s\" is not two tokens separated by one space", path, r, n->str);
            a = n->str, la = (size_t)(sp - n->str), b = sp + 1, lb = (size_t)(n->str + n->len - sp - 1);
        } else if (n->type == JSON_ARRAY && n->count == 2 && j.nodes[n->first].type == JSON_STRING &&
                   j.nodes[j.nodes[n->first].next].type == JSON_STRING) {
            a = j.nodes[n->first].str, la = (size_t)j.nodes[n->first].len;
            b = j.nodes[j.nodes[n->first].next].str, lb = (size_t)j.nodes[j.nodes[n->first].next].len;
        } else HF_FAIL("tokenizer %s: model.merges[%u] is neither \"a b\" nor [\"a\", \"b\"]", path, r);
        memcpy(cat, a, la);
        memcpy(cat + la, b, lb);
        int64_t left = tokenizer_hf_lookup(h, (const unsigned char*)a, la), right = tokenizer_hf_lookup(h, (const unsigned char*)b, lb);
        int64_t merged = tokenizer_hf_lookup(h, cat, la + lb);
        if (left < 0 || right < 0 || merged < 0)
            HF_FAIL("tokenizer %s: model.merges[%u] (\"%.*s\" + \"%.*s\"): \"%.*s\" is not in model.vocab", path, r, (int)la, a, (int)lb, b,
                    left < 0 ? (int)la : right < 0 ? (int)lb : (int)(la + lb), left < 0 ? a : right < 0 ? b : (const char*)cat);
        uint64_t key = (uint64_t)left << 32 | (uint64_t)right;
        uint32_t slot = tokenizer_pair_slot(e, key);
        if (e->pairs[slot].rank_plus1 != 0)
            HF_FAIL("tokenizer %s: model.merges[%u] repeats the pair of model.merges[%u]", path, r, e->pairs[slot].rank_plus1 - 1);
        e->pairs[slot].key = key;
        e->pairs[slot].rank_plus1 = r + 1;
        e->merged_id[r] = (uint32_t)merged;
    }
    e->nmerges = M;
    // --- post-processor: what it puts first (the BOS), and nothing we do not know
    int post = json_get(&j, 0, "post_processor");
    if (post >= 0 && j.nodes[post].type != JSON_NULL) {
        int list = -1, one = post, count = 1;
        if (tokenizer_json_is(&j, json_get(&j, post, "type"), "Sequence")) {
            list = json_get(&j, post, "processors");
            if (list < 0 || j.nodes[list].type != JSON_ARRAY) HF_FAIL("tokenizer %s: post_processor.processors is not an array", path);
            one = j.nodes[list].first;
            count = j.nodes[list].count;
        }
        for (int k = 0; k < count; k++, one = j.nodes[one].next) {
            int t = json_get(&j, one, "type");
            if (tokenizer_json_is(&j, t, "ByteLevel")) continue;  // offsets only
            if (!tokenizer_json_is(&j, t, "TemplateProcessing")) {
                HF_FAIL("tokenizer %s: post_processor type \"%s\" is not supported (ByteLevel, TemplateProcessing, Sequence)", path,
                        t >= 0 && j.nodes[t].type == JSON_STRING ? j.nodes[t].str : "?");
            }
            int single = json_get(&j, one, "single"), first = single >= 0 && j.nodes[single].type == JSON_ARRAY ? j.nodes[single].first : -1;
            int sp = json_get(&j, first, "SpecialToken");
            int sid = json_get(&j, sp, "id");
            if (sid >= 0 && j.nodes[sid].type == JSON_STRING) {  // the name; its id is in added_tokens
                for (int b = 0; b < h->nadded; b++)
                    if (!strcmp(h->added[b].content, j.nodes[sid].str)) h->bos_token = (int)h->added[b].id;
                if (h->bos_token < 0) HF_FAIL("tokenizer %s: post_processor's SpecialToken \"%.100s\" is not an added token", path, j.nodes[sid].str);
            }
        }
    }
    json_free(&j);
    free(catbuf);
    catbuf = NULL;
#undef HF_FAIL
    // --- the document token: the post-processor's BOS, else "<|endoftext|>", else the config's eos_token
    tok->eot_token = h->bos_token >= 0 ? h->bos_token : tokenizer_added_id(h, "<|endoftext|>");
    if (stat(cfg_path, &st) == 0) {
        size_t clen;
        char* ctext = tokenizer_read_file(cfg_path, &clen, err, errlen);
        if (!ctext) {
            tokenizer_free(tok);
            return -1;
        }
        Json c;
        if (json_parse(&c, ctext, clen, jerr, sizeof(jerr)) != 0 || c.nodes[0].type != JSON_OBJECT) {
            json_free(&c);
            free(ctext);
            return tokenizer_fail(tok, err, errlen, "tokenizer config %s: %s", cfg_path, jerr[0] ? jerr : "not a JSON object");
        }
        char name[256];
        if (tokenizer_config_token(&c, "eos_token", name, sizeof(name))) h->export_eos = tokenizer_added_id(h, name);
        if (tokenizer_config_token(&c, "bos_token", name, sizeof(name))) h->export_bos = tokenizer_added_id(h, name);
        if (tok->eot_token < 0) tok->eot_token = h->export_eos;
        json_free(&c);
        free(ctext);
    }
    // what an export names when the config does not: the post-processor's BOS; Llama 3's
    // "<|end_of_text|>", else "<|endoftext|>" (GPT-2, Qwen2, SmolLM2), else (SentencePiece-style:
    // Mistral, Llama 2) "</s>" as the EOS
    if (h->export_bos < 0) h->export_bos = h->bos_token;
    if (h->export_eos < 0) h->export_eos = tokenizer_added_id(h, "<|end_of_text|>");
    if (h->export_eos < 0) h->export_eos = tokenizer_added_id(h, "<|endoftext|>");
    if (h->export_eos < 0 && h->sp) h->export_eos = tokenizer_added_id(h, "</s>");  // Mistral, Llama 2
    return 0;
}

// The BOS and EOS ids a model exported with tok names (config.json's bos_token_id and
// eos_token_id, tokenizer_config.json's bos_token and eos_token), -1 where none: for a
// tokenizer.json, its tokenizer_config.json's bos_token and eos_token, else the post-processor's
// BOS and the added token "<|end_of_text|>" or "<|endoftext|>"; for llm.c's file, EOT for both.
static inline void tokenizer_special_ids(const Tokenizer* tok, int* bos, int* eos) {
    *bos = tok->hf ? tok->hf->export_bos : tok->eot_token;
    *eos = tok->hf ? tok->hf->export_eos : tok->eot_token;
}

// How many leading spaces a decoded text drops (a SentencePiece-style decoder's Strip(" ", N), or
// Metaspace's): what the concatenated bytes of tokenizer_decode lose at the text's start to equal
// tokenizers' decode (the ▁ a Prepend normalizer or Metaspace put first). 0 otherwise.
static inline int tokenizer_strip_start(const Tokenizer* tok) { return tok->hf ? tok->hf->strip_start : 0; }

// -----------------------------------------------------------------------------------------------
// NFC (Unicode Standard Annex #15): decompose canonically, order combining marks by class, compose.

#define TOKENIZER_HANGUL_S 0xAC00u
#define TOKENIZER_HANGUL_L 0x1100u
#define TOKENIZER_HANGUL_V 0x1161u
#define TOKENIZER_HANGUL_T 0x11A7u
#define TOKENIZER_BAD_BYTE 0x110000u  // a byte that is not UTF-8: 0x110000 + byte, class 0, composes with nothing

static inline int tokenizer_ccc(uint32_t cp) {
    if (cp < 0x300 || cp >= TOKENIZER_BAD_BYTE) return 0;
    int lo = 0, hi = NFC_NCCC - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < nfc_ccc[mid].lo) hi = mid - 1;
        else if (cp > nfc_ccc[mid].hi) lo = mid + 1;
        else return nfc_ccc[mid].ccc;
    }
    return 0;
}

static inline uint32_t tokenizer_compose(uint32_t a, uint32_t b) {  // 0: none
    if (a >= TOKENIZER_HANGUL_L && a < TOKENIZER_HANGUL_L + 19 && b >= TOKENIZER_HANGUL_V && b < TOKENIZER_HANGUL_V + 21)
        return TOKENIZER_HANGUL_S + ((a - TOKENIZER_HANGUL_L) * 21 + (b - TOKENIZER_HANGUL_V)) * 28;
    if (a >= TOKENIZER_HANGUL_S && a < TOKENIZER_HANGUL_S + 11172 && (a - TOKENIZER_HANGUL_S) % 28 == 0 &&
        b > TOKENIZER_HANGUL_T && b < TOKENIZER_HANGUL_T + 28)
        return a + (b - TOKENIZER_HANGUL_T);
    int lo = 0, hi = NFC_NCOMP - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const NfcComp* c = &nfc_comp[mid];
        if (a < c->a || (a == c->a && b < c->b)) hi = mid - 1;
        else if (a > c->a || b > c->b) lo = mid + 1;
        else return c->c;
    }
    return 0;
}

// NFC of s[0..n) into h->norm (*out, *nout). Bytes that are not UTF-8 pass unchanged. Returns 0 / -1.
static inline int tokenizer_nfc(TokenizerHF* h, const unsigned char* s, size_t n, const unsigned char** out, size_t* nout) {
    size_t k = 0;
    for (; k < n && s[k] < 0xCC; k++) {}  // below U+0300 (lead bytes up to 0xCB): already NFC
    if (k == n) {
        *out = s;
        *nout = n;
        return 0;
    }
    if (tokenizer_grow((void**)&h->cps, &h->cps_cap, 4 * n + 4, sizeof(uint32_t)) != 0) return -1;
    size_t m = 0;
    for (size_t i = 0; i < n;) {  // decompose
        uint32_t cp;
        int l = tokenizer_utf8(s + i, n - i, &cp);
        if (l == 0) {
            h->cps[m++] = TOKENIZER_BAD_BYTE + s[i];
            i++;
            continue;
        }
        i += (size_t)l;
        if (cp >= TOKENIZER_HANGUL_S && cp < TOKENIZER_HANGUL_S + 11172) {
            uint32_t x = cp - TOKENIZER_HANGUL_S;
            h->cps[m++] = TOKENIZER_HANGUL_L + x / (21 * 28);
            h->cps[m++] = TOKENIZER_HANGUL_V + (x % (21 * 28)) / 28;
            if (x % 28) h->cps[m++] = TOKENIZER_HANGUL_T + x % 28;
            continue;
        }
        int lo = 0, hi = cp < 0xC0 ? -1 : NFC_NDECOMP - 1, found = -1;
        while (lo <= hi) {
            int mid = (lo + hi) / 2;
            if (cp < nfc_decomp[mid].cp) hi = mid - 1;
            else if (cp > nfc_decomp[mid].cp) lo = mid + 1;
            else { found = mid; break; }
        }
        if (found < 0) h->cps[m++] = cp;
        else for (int d = 0; d < nfc_decomp[found].len; d++) h->cps[m++] = nfc_decomp_pool[nfc_decomp[found].at + d];
    }
    for (size_t i = 1; i < m; i++) {  // canonical order: a stable insertion sort of each run of marks by class
        int c = tokenizer_ccc(h->cps[i]);
        if (c == 0) continue;
        uint32_t x = h->cps[i];
        size_t p = i;
        while (p > 0 && tokenizer_ccc(h->cps[p - 1]) > c) {
            h->cps[p] = h->cps[p - 1];
            p--;
        }
        h->cps[p] = x;
    }
    // compose in place: cp joins the last starter when nothing between them blocks it (the marks
    // between, in canonical order, all have a lower class than cp: the last one's is the highest)
    size_t w = 0, starter = 0;
    int have_starter = 0, last_class = 0;
    for (size_t i = 0; i < m; i++) {
        uint32_t cp = h->cps[i];
        int c = tokenizer_ccc(cp);
        if (have_starter && (w == starter + 1 || last_class < c)) {
            uint32_t comp = tokenizer_compose(h->cps[starter], cp);
            if (comp) {
                h->cps[starter] = comp;
                continue;
            }
        }
        if (c == 0) {
            starter = w;
            have_starter = 1;
        }
        last_class = c;
        h->cps[w++] = cp;
    }
    if (tokenizer_grow((void**)&h->norm, &h->norm_cap, 4 * w + 4, 1) != 0) return -1;
    size_t o = 0;
    for (size_t i = 0; i < w; i++) {
        uint32_t cp = h->cps[i];
        if (cp >= TOKENIZER_BAD_BYTE) h->norm[o++] = (unsigned char)(cp - TOKENIZER_BAD_BYTE);
        else o += (size_t)tokenizer_put_utf8(h->norm + o, cp);
    }
    *out = h->norm;
    *nout = o;
    return 0;
}

// -----------------------------------------------------------------------------------------------
// Llama 3's and Qwen2's split pattern (max_digits 3 and 1), alternatives in their order:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)      contractions, any case ("'S", "'Ll"; "'ſ": U+017F folds to s)
//   [^\r\n\p{L}\p{N}]?\p{L}+          a letter run, with one character before it that is not a
//                                     letter, number, CR or LF (" word", "(word", "\tword")
//   \p{N}{1,3}                        one to three numbers (Qwen2: one)
//    ?[^\s\p{L}\p{N}]+[\r\n]*         an optional space, a run of "other", then any CR and LF
//   \s*[\r\n]+                        a space run up to and with its last CR or LF
//   \s+(?!\S) | \s+                   as in GPT-2's
static inline size_t tokenizer_piece_length_cl100k(const unsigned char* s, size_t n, int max_digits) {
    if (s[0] == '\'' && n >= 2) {
        unsigned char a = s[1] | ((s[1] >= 'A' && s[1] <= 'Z') ? 0x20 : 0), b = n >= 3 ? (s[2] | ((s[2] >= 'A' && s[2] <= 'Z') ? 0x20 : 0)) : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
        if (n >= 3 && s[1] == 0xC5 && s[2] == 0xBF) return 3;  // 'ſ
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    int len0, len;
    int c0 = tokenizer_char_class(s, n, &len0);
    size_t i = 0;
    if (c0 != UC_L && c0 != UC_N && s[0] != '\r' && s[0] != '\n' && (size_t)len0 < n &&
        tokenizer_char_class(s + len0, n - (size_t)len0, &len) == UC_L) {
        c0 = UC_L;
        i = (size_t)len0;
    }
    if (c0 == UC_L) {
        while (i < n && tokenizer_char_class(s + i, n - i, &len) == UC_L) i += (size_t)len;
        return i;
    }
    if (c0 == UC_N) {
        for (int k = 0; k < max_digits && i < n && tokenizer_char_class(s + i, n - i, &len) == UC_N; k++) i += (size_t)len;
        return i;
    }
    if (s[0] == ' ' && n >= 2 && tokenizer_char_class(s + 1, n - 1, &len) == UC_OTHER) i = 1;
    if (i == 1 || c0 == UC_OTHER) {
        while (i < n && tokenizer_char_class(s + i, n - i, &len) == UC_OTHER) i += (size_t)len;
        while (i < n && (s[i] == '\r' || s[i] == '\n')) i++;
        return i;
    }
    size_t last = 0, nl_end = 0;  // a space run: its last character's start, the end of its last CR/LF
    while (i < n && tokenizer_char_class(s + i, n - i, &len) == UC_S) {
        last = i;
        if (s[i] == '\r' || s[i] == '\n') nl_end = i + 1;
        i += (size_t)len;
    }
    if (nl_end > 0) return nl_end;  // \s*[\r\n]+
    if (i == n) return n;
    return last > 0 ? last : i;
}

// -----------------------------------------------------------------------------------------------
// Encoding with a tokenizer.json

// Where a stretch (the text between added tokens) stands, for the steps that add a prefix:
#define TOKENIZER_AT_TEXT_START 1  // it starts the whole text (Metaspace "first")
#define TOKENIZER_CONTINUES 2      // it goes on from a part of the text encoded before (streaming): no Prepend, no Metaspace prepend

// SentencePiece-style BPE's first parts of piece p[0..n) (see tokenizer_bpe): each character whose
// UTF-8 is a key of model.vocab is one part; else, with byte_fallback, each of its bytes is its
// <0xXX> token; else it is unk_token (a run of such characters one unk with fuse_unk). A byte that
// is not UTF-8 is a character of its own (not in model.vocab). As tokenizers' BPE::merge_word.
static inline void tokenizer_sp_parts(const TokenizerHF* h, TokenizerEncoder* e, const unsigned char* p, uint32_t n) {
    uint32_t last = UINT32_MAX;  // the start of the part before
    int last_unk = 0;            // it is an unk that may take more characters (fuse_unk)
    for (uint32_t i = 0; i < n;) {
        uint32_t cp;
        int l = tokenizer_utf8(p + i, n - i, &cp);
        if (l == 0) l = 1;
        int64_t id = l == 1 && p[i] < 0x80 ? (int64_t)e->byte_id[p[i]] : tokenizer_hf_lookup(h, p + i, (size_t)l);
        int fallback = id < 0 && h->byte_fallback;
        for (int k = 0; fallback && k < l; k++) fallback = h->fallback_id[p[i + k]] != UINT32_MAX;
        if (id < 0 && !fallback && h->fuse_unk && last_unk) {  // one more character for the unk before
            e->next[last] = i + (uint32_t)l;
            i += (uint32_t)l;
            continue;
        }
        int parts = fallback ? l : 1;
        for (int k = 0; k < parts; k++) {
            uint32_t at = i + (uint32_t)k;
            e->part_id[at] = fallback ? h->fallback_id[p[at]] : id >= 0 ? (uint32_t)id : (uint32_t)h->unk_id;
            e->next[at] = fallback ? at + 1 : i + (uint32_t)l;
            e->prev[at] = last;  // (unused for the first part)
            last = at;
        }
        last_unk = id < 0 && !fallback;
        i += (uint32_t)l;
    }
}

// The ids of one piece (after every pre-tokenizer step): the whole piece if ignore_merges and
// model.vocab holds it, else BPE (cached).
static inline int tokenizer_hf_piece(Tokenizer* tok, const unsigned char* p, size_t n, uint32_t** out, size_t* nout, size_t* cap) {
    TokenizerHF* h = tok->hf;
    if (h->ignore_merges && n > 1) {
        const unsigned char* key = p;  // SentencePiece-style keys are the piece's own UTF-8
        size_t l = n;
        if (!h->sp) {
            if (tokenizer_grow((void**)&h->scratch, &h->scratch_cap, 2 * n + 1, 1) != 0) return -1;
            const unsigned char (*spell)[3] = tokenizer_byte_spellings();
            l = 0;
            for (size_t i = 0; i < n; i++) {
                memcpy(h->scratch + l, spell[p[i]] + 1, 2);
                l += spell[p[i]][0];
            }
            key = h->scratch;
        }
        int64_t id = tokenizer_hf_lookup(h, key, l);
        if (id >= 0) {
            uint32_t v = (uint32_t)id;
            return tokenizer_append(out, nout, cap, &v, 1);
        }
    }
    if (n >= UINT32_MAX) return -1;
    if (h->sp && h->sp_cut && !h->ignore_merges) {  // words: cut before each R after another character (no merge crosses there)
        const unsigned char* R = h->space_rep;
        size_t rl = (size_t)h->space_rep_len, from = 0;
        for (size_t i = 1; i + rl <= n; i++) {
            if (memcmp(p + i, R, rl) != 0) continue;
            if (!(i - from >= rl && memcmp(p + i - rl, R, rl) == 0)) {  // the character before is not R
                if (i > from && tokenizer_encode_piece(&tok->enc, h, p + from, i - from, out, nout, cap) != 0) return -1;
                from = i;
            }
            i += rl - 1;
        }
        return tokenizer_encode_piece(&tok->enc, h, p + from, n - from, out, nout, cap);
    }
    return tokenizer_encode_piece(&tok->enc, h->sp ? h : NULL, p, n, out, nout, cap);
}

// Metaspace (SentencePiece-style pre-tokenizer) on a stretch s[0..n): every ' ' becomes the
// replacement R; R goes first unless the stretch starts with one, when prepend_scheme is "always"
// (each stretch) or "first" (only a stretch at the text's start; flags: TOKENIZER_*); with split,
// the pieces start at each R (MergedWithNext), else the stretch is one piece. Then each piece's ids.
static inline int tokenizer_hf_metaspace(Tokenizer* tok, const unsigned char* s, size_t n, int flags, uint32_t** out, size_t* nout, size_t* cap) {
    TokenizerHF* h = tok->hf;
    size_t R = (size_t)h->meta_len, spaces = 0;
    for (size_t i = 0; i < n; i++) spaces += s[i] == ' ';
    if (tokenizer_grow((void**)&h->scratch, &h->scratch_cap, n + (spaces + 1) * R + 1, 1) != 0) return -1;
    unsigned char* t = h->scratch;
    size_t m = 0;
    int starts_r = n >= R ? memcmp(s, h->meta, R) == 0 : 0;
    if (n > 0 && s[0] == ' ') starts_r = 1;
    int prepend = h->prepend_scheme == TOKENIZER_PREPEND_ALWAYS ? !(flags & TOKENIZER_CONTINUES)
                : h->prepend_scheme == TOKENIZER_PREPEND_FIRST ? (flags & TOKENIZER_AT_TEXT_START) != 0 : 0;
    if (prepend && !starts_r) {
        memcpy(t, h->meta, R);
        m = R;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(t + m, h->meta, R);
            m += R;
        } else t[m++] = s[i];
    }
    if (!h->meta_split) return tokenizer_hf_piece(tok, t, m, out, nout, cap);
    size_t from = 0;
    for (size_t i = 1; i + R <= m; i++) {
        if (memcmp(t + i, h->meta, R) != 0) continue;
        if (tokenizer_hf_piece(tok, t + from, i - from, out, nout, cap) != 0) return -1;
        from = i;
        i += R - 1;
    }
    return m > from ? tokenizer_hf_piece(tok, t + from, m - from, out, nout, cap) : 0;
}

// Pre-tokenizer step `step` (and the ones after it) on s[0..n); SentencePiece-style: Metaspace or
// nothing (the stretch is one piece).
static inline int tokenizer_hf_pretok(Tokenizer* tok, int step, const unsigned char* s, size_t n, int flags, uint32_t** out, size_t* nout,
                                      size_t* cap) {
    TokenizerHF* h = tok->hf;
    if (n == 0) return 0;
    if (h->sp) return h->metaspace ? tokenizer_hf_metaspace(tok, s, n, flags, out, nout, cap) : tokenizer_hf_piece(tok, s, n, out, nout, cap);
    if (step == h->nsteps) return tokenizer_hf_piece(tok, s, n, out, nout, cap);
    int kind = h->steps[step];
    for (size_t i = 0; i < n;) {
        size_t len;
        if (kind == TOKENIZER_STEP_GPT2) len = tokenizer_piece_length(s + i, n - i);
        else if (kind == TOKENIZER_STEP_LLAMA3 || kind == TOKENIZER_STEP_QWEN2)
            len = tokenizer_piece_length_cl100k(s + i, n - i, kind == TOKENIZER_STEP_LLAMA3 ? 3 : 1);
        else {  // Digits: each \p{N} character alone (or each run of them), the text between as one piece
            int l;
            int num = tokenizer_char_class(s + i, n - i, &l) == UC_N;
            len = (size_t)l;
            if (!num || kind == TOKENIZER_STEP_DIGIT_RUNS)
                while (i + len < n && (tokenizer_char_class(s + i + len, n - i - len, &l) == UC_N) == num) len += (size_t)l;
        }
        if (tokenizer_hf_pretok(tok, step + 1, s + i, len, flags, out, nout, cap) != 0) return -1;
        i += len;
    }
    return 0;
}

// The normalizer's steps in order on a stretch s[0..n) (n >= 1; flags: TOKENIZER_*): NFC; Prepend
// (its string before the stretch, unless it continues one begun before); Replace (every occurrence
// of the pattern, left to right, not overlapping). The result in *out (s itself, or one of h's
// normalizer buffers, valid until the next call). Returns 0 / -1 (out of memory).
static inline int tokenizer_hf_normalize(TokenizerHF* h, const unsigned char* s, size_t n, int flags, const unsigned char** out, size_t* nout) {
    const unsigned char* cur = s;
    size_t cn = n;
    int which = 0;  // the buffer the next copying step writes: norm2, norm3, norm2, ...
    for (int k = 0; k < h->nnorms; k++) {
        const TokenizerNorm* st = &h->norms[k];
        if (st->kind == TOKENIZER_NORM_NFC) {
            if (tokenizer_nfc(h, cur, cn, &cur, &cn) != 0) return -1;
            continue;
        }
        size_t need = cn + st->alen + 1;  // Prepend; Replace: each match may grow by blen - alen
        if (st->kind == TOKENIZER_NORM_REPLACE && st->blen > st->alen) need = cn / st->alen * st->blen + cn + 1;
        unsigned char** buf = which ? &h->norm3 : &h->norm2;
        size_t* bcap = which ? &h->norm3_cap : &h->norm2_cap;
        if (tokenizer_grow((void**)buf, bcap, need, 1) != 0) return -1;
        unsigned char* o = *buf;
        size_t m = 0;
        if (st->kind == TOKENIZER_NORM_PREPEND) {
            if (flags & TOKENIZER_CONTINUES) continue;
            memcpy(o, st->a, st->alen);
            memcpy(o + st->alen, cur, cn);
            m = st->alen + cn;
        } else {
            for (size_t i = 0; i < cn;) {
                if (i + st->alen <= cn && memcmp(cur + i, st->a, st->alen) == 0) {
                    memcpy(o + m, st->b, st->blen);
                    m += st->blen;
                    i += st->alen;
                } else o[m++] = cur[i++];
            }
        }
        cur = o;
        cn = m;
        which ^= 1;
    }
    *out = cur;
    *nout = cn;
    return 0;
}

// The longest added token of this pass that starts at s[0..n): its length (0: none), id in *id,
// *strip its lstrip | rstrip << 1. pass 0: tokens matched in the raw text (all of them
// without a normalizer); pass 1: the normalized ones.
static inline size_t tokenizer_hf_added_at(const TokenizerHF* h, const unsigned char* s, size_t n, int pass, uint32_t* id, int* strip) {
    for (int k = h->added_first[s[0]]; k < h->added_first[s[0] + 1]; k++) {
        const TokenizerAdded* a = &h->added[k];
        if (a->len > n || (a->special && !h->match_specials)) continue;
        if (h->nnorms && a->normalized != pass) continue;
        if (memcmp(a->content, s, a->len) == 0) {
            *id = a->id;
            *strip = a->lstrip | a->rstrip << 1;
            return a->len;
        }
    }
    return 0;
}

// The whitespace (Unicode White_Space, what tokenizers' \s matches) that s[0..n) begins with / ends
// with, in bytes: what an rstrip / lstrip added token takes beside it. *open (tokenizer_ws_head, may
// be NULL): the run reaches the end of s, or stops at a character cut short there (it may go on).
static inline size_t tokenizer_ws_head(const unsigned char* s, size_t n, int* open) {
    size_t i = 0;
    uint32_t cp;
    for (int l; i < n && (l = tokenizer_utf8(s + i, n - i, &cp)) > 0 && tokenizer_white_space(cp);) i += (size_t)l;
    if (open) {
        size_t need = i == n ? 1 : s[i] >= 0xF0 ? 4 : s[i] >= 0xE0 ? 3 : s[i] >= 0xC0 ? 2 : 1;  // the next character's length (none in view: 1)
        *open = i + need > n;
    }
    return i;
}
static inline size_t tokenizer_ws_tail(const unsigned char* s, size_t n) {
    size_t j = n;
    uint32_t cp;
    while (j > 0) {
        size_t k = j - 1;
        while (k > 0 && (s[k] & 0xC0) == 0x80 && j - k < 4) k--;
        int l = tokenizer_utf8(s + k, j - k, &cp);
        if (l <= 0 || (size_t)l != j - k || !tokenizer_white_space(cp)) break;
        j = k;
    }
    return n - j;
}

static inline int tokenizer_hf_encode_pass(Tokenizer* tok, const unsigned char* s, size_t n, int pass, int flags, uint32_t** out, size_t* nout,
                                           size_t* cap);

// A stretch between added tokens: normalized (pass 0 with a normalizer), then on to the pre-tokenizer.
static inline int tokenizer_hf_stretch(Tokenizer* tok, const unsigned char* s, size_t n, int pass, int flags, uint32_t** out, size_t* nout,
                                       size_t* cap) {
    TokenizerHF* h = tok->hf;
    if (n == 0) return 0;
    if (pass == 0 && h->nnorms) {
        const unsigned char* t;
        size_t tn;
        if (tokenizer_hf_normalize(h, s, n, flags, &t, &tn) != 0) return -1;
        return tokenizer_hf_encode_pass(tok, t, tn, 1, flags, out, nout, cap);  // pass 1 does not normalize: the buffers stay put
    }
    return tokenizer_hf_pretok(tok, 0, s, n, flags, out, nout, cap);
}

// Encode s[0..n): added tokens found (pass 0: in the raw text; pass 1: the normalized ones in the
// normalized text), the stretches between them on through tokenizer_hf_stretch. flags
// (TOKENIZER_*) say where s starts; a stretch after an added token starts neither the text nor
// continues one.
static inline int tokenizer_hf_encode_pass(Tokenizer* tok, const unsigned char* s, size_t n, int pass, int flags, uint32_t** out, size_t* nout,
                                           size_t* cap) {
    const TokenizerHF* h = tok->hf;
    size_t from = 0;
    for (size_t i = 0; i < n;) {
        uint32_t id;
        int strip = 0;
        size_t l = h->nadded ? tokenizer_hf_added_at(h, s + i, n - i, pass, &id, &strip) : 0;
        if (l == 0) {
            i++;
            continue;
        }
        size_t end = i - (strip & 1 ? tokenizer_ws_tail(s + from, i - from) : 0);  // lstrip: the stretch loses its trailing whitespace
        if (tokenizer_hf_stretch(tok, s + from, end - from, pass, from ? 0 : flags, out, nout, cap) != 0 || tokenizer_append(out, nout, cap, &id, 1) != 0)
            return -1;
        i += l;
        if (strip & 2) i += tokenizer_ws_head(s + i, n - i, NULL);  // rstrip: the whitespace after it goes with it
        from = i;
    }
    return tokenizer_hf_stretch(tok, s + from, n - from, pass, from ? 0 : flags, out, nout, cap);
}

// Encode the whole of a text, or its last part (the state a streamed text left, then cleared).
static inline int tokenizer_hf_encode_final(Tokenizer* tok, const unsigned char* s, size_t n, uint32_t** out, size_t* nout, size_t* cap) {
    TokenizerHF* h = tok->hf;
    int flags = (h->mid_text ? 0 : TOKENIZER_AT_TEXT_START) | (h->mid_stretch ? TOKENIZER_CONTINUES : 0);
    h->mid_text = h->mid_stretch = 0;  // the next call starts a new text
    return tokenizer_hf_encode_pass(tok, s, n, 0, flags, out, nout, cap);
}

// -----------------------------------------------------------------------------------------------
// Streaming a tokenizer.json text: safe cuts
//
// A long text (a document larger than -tokenize's read buffer) is encoded in parts, cut where
// encoding the two sides apart gives exactly the ids of encoding them together. A cut at byte c is
// safe when all of these hold (tokenizer_hf_encode_part looks for the last such c in view):
//   1. added tokens: every place before c where an added token could start has been looked at with
//      the longest token's bytes all in view, and none covers c (the scan of
//      tokenizer_hf_encode_pass then finds the same tokens whether or not the text goes on after
//      c); with NFC and "normalized" added tokens, also no such token has a prefix that is a tail
//      of the normalized text before c. Right after an added token is always a safe cut.
//   2. pre-tokenizer: the character before c is a letter (\p{L}) and the one at c is not. Every
//      split pattern (GPT-2's, Llama 3's, Qwen2's) ends a piece there whatever follows: a letter
//      run ends at a non-letter, a contraction ends in a letter, and no alternative looks back past
//      the start of its piece. Digits cuts only between \p{N} and the rest (at c or not at all).
//   3. NFC: the character at c is a stable starter (canonical class 0, no canonical decomposition,
//      never the second of a composition: tokenizer_nfc_stable), so NFC(left + right) = NFC(left)
//      + NFC(right) (UAX #15), and the letter before c stays a letter (only Hangul V/T jamo compose
//      backwards, into syllables, which are letters).
// SentencePiece-style BPE (no split pattern: a whole stretch can be one piece) replaces 2. by 2'.
//   2'. the byte at c is ' ' and the character before it is neither ' ' nor R (the character a
//      space becomes: Metaspace's replacement, or a Replace(" " -> R) normalizer, else ' ' itself),
//      and at load (tokenizer_sp_bytes, h->sp_cut) no other normalizer step makes an R and no
//      model.vocab key holds an R after another character: then no merge joins the character
//      before c to the R that c becomes, so BPE on the two sides gives the ids of BPE on the whole.
//      The part after such a cut continues a stretch (h->mid_stretch: no Prepend, no Metaspace
//      prepend) of a text whose start was encoded (h->mid_text: no Metaspace "first"). Without
//      sp_cut there are only the cuts of 1., right after an added token (and a document is held
//      whole until one comes).
// Both characters must be complete, well-formed UTF-8 in view. Text with no such place (a run of
// letters only, or of spaces, digits or punctuation only, or bytes that are not UTF-8) is carried
// whole until one comes: memory grows with the longest such run, as BPE's work arrays do with the
// longest piece (tok_tokenize_hf_streamed: the same ids at any buffer size, and bounded memory).

// Can a cut go before code point cp without changing NFC? (3. above)
static inline int tokenizer_nfc_stable(uint32_t cp) {
    if (cp < NFC_STABLE_BELOW) return 1;
    if (tokenizer_ccc(cp) != 0 || (cp >= TOKENIZER_HANGUL_L && cp < 0x1200) || (cp >= TOKENIZER_HANGUL_S && cp < TOKENIZER_HANGUL_S + 11172))
        return 0;
    int lo = 0, hi = NFC_NDECOMP - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < nfc_decomp[mid].cp) hi = mid - 1;
        else if (cp > nfc_decomp[mid].cp) lo = mid + 1;
        else return 0;
    }
    for (int i = 0; i < NFC_NCOMP; i++)  // (sorted by the first of the pair: a plain search; only for non-letters after letters)
        if (nfc_comp[i].b == cp) return 0;
    return 1;
}

// The last c in (from, hi] with a letter before it and a non-letter at it (2. and 3. above), both
// complete in s[0..n) and the letter at or after from (the stretch's start); 0 if none.
static inline size_t tokenizer_hf_last_cut(const TokenizerHF* h, const unsigned char* s, size_t n, size_t from, size_t hi) {
    for (size_t c = hi; c > from; c--) {
        if (c >= n || (s[c] >= 0x80 && s[c] < 0xC2)) continue;
        uint32_t cp;
        int l = tokenizer_utf8(s + c, n - c, &cp);
        if (l == 0 || (cp < 0x80 ? tokenizer_char_class(s + c, 1, &l) : tokenizer_unicode_class(cp)) == UC_L) continue;
        if (h->nfc && !tokenizer_nfc_stable(cp)) continue;
        size_t k = 1;  // the character before c: its lead byte is the first byte back that is not 10xxxxxx
        while (k < 4 && c - k > from && s[c - k] >= 0x80 && s[c - k] < 0xC0) k++;
        uint32_t before;
        if (c - k < from || tokenizer_utf8(s + c - k, k, &before) != (int)k) continue;
        int len;
        if ((before < 0x80 ? tokenizer_char_class(s + c - k, 1, &len) : tokenizer_unicode_class(before)) == UC_L) return c;
    }
    return 0;
}

// 2'. above: the last c in (from, hi] with s[c] = ' ' after a character that is neither ' ' nor R; 0 if none.
static inline size_t tokenizer_hf_last_cut_sp(const TokenizerHF* h, const unsigned char* s, size_t n, size_t from, size_t hi) {
    if (!h->sp_cut) return 0;
    const unsigned char* R = h->metaspace ? h->meta : NULL;
    size_t rl = h->metaspace ? (size_t)h->meta_len : 0;
    for (int k = 0; k < h->nnorms && !R; k++)
        if (h->norms[k].kind == TOKENIZER_NORM_REPLACE) R = (const unsigned char*)h->norms[k].b, rl = h->norms[k].blen;
    for (size_t c = hi < n ? hi : n - 1; c > from; c--) {
        if (s[c] != ' ' || s[c - 1] == ' ') continue;
        if (R && c >= from + rl && memcmp(s + c - rl, R, rl) == 0) continue;
        return c;
    }
    return 0;
}

// Does an added token of this pass (active: see tokenizer_hf_added_at) begin with a tail of s[0..n)?
static inline int tokenizer_hf_tail_open(const TokenizerHF* h, const unsigned char* s, size_t n, int pass) {
    for (int a = 0; a < h->nadded; a++) {
        const TokenizerAdded* t = &h->added[a];
        if ((t->special && !h->match_specials) || (h->nnorms && t->normalized != pass)) continue;
        for (size_t k = 1; k < t->len && k <= n; k++)
            if (memcmp(s + n - k, t->content, k) == 0) return 1;
    }
    return 0;
}

// A part of a text that goes on after s[0..n): encode up to the last safe cut (see above), its
// length in *consumed (0: none in view; the caller reads more). Returns 0 / -1.
static inline int tokenizer_hf_encode_part(Tokenizer* tok, const unsigned char* s, size_t n, size_t* consumed, uint32_t** out, size_t* nout, size_t* cap) {
    TokenizerHF* h = tok->hf;
    size_t maxlen = 0;  // the longest added token matched in the raw text
    int pass1 = 0;      // any matched in the normalized text?
    for (int a = 0; a < h->nadded; a++) {
        const TokenizerAdded* t = &h->added[a];
        if (t->special && !h->match_specials) continue;
        if (h->nnorms && t->normalized) pass1 = 1;
        else if (t->len > maxlen) maxlen = t->len;
    }
    size_t from = 0, i = maxlen ? 0 : n;  // 1. the added-token scan as far as it is certain
    while (i < n && i + maxlen <= n) {
        uint32_t id;
        int strip = 0;
        size_t l = tokenizer_hf_added_at(h, s + i, n - i, 0, &id, &strip), w = 0;
        int open = 0;
        if (l && (strip & 2) && ((w = tokenizer_ws_head(s + i + l, n - i - l, &open)), open)) break; // its whitespace may go on past the view
        i += l ? l + w : 1;
        if (l) from = i;
    }
    int flags = (h->mid_text ? 0 : TOKENIZER_AT_TEXT_START) | (h->mid_stretch ? TOKENIZER_CONTINUES : 0);
    size_t hi = i < n ? i : n - 1;
    size_t c = h->sp ? tokenizer_hf_last_cut_sp(h, s, n, from, hi) : tokenizer_hf_last_cut(h, s, n, from, hi);
    while (c > from && h->any_lstrip && tokenizer_ws_tail(s + from, c - from) > 0)  // lstrip: no cut inside a whitespace run (2'. allows
        c = h->sp ? tokenizer_hf_last_cut_sp(h, s, n, from, c - 1) : tokenizer_hf_last_cut(h, s, n, from, c - 1);  // one after a tab)
    while (c > from && pass1) {  // normalized added tokens: none may start in the normalized tail
        const unsigned char* t;
        size_t tn;
        if (tokenizer_hf_normalize(h, s + from, c - from, from ? 0 : flags, &t, &tn) != 0) return -1;
        if (!tokenizer_hf_tail_open(h, t, tn, 1)) break;
        c = h->sp ? tokenizer_hf_last_cut_sp(h, s, n, from, c - 1) : tokenizer_hf_last_cut(h, s, n, from, c - 1);
    }
    if (c <= from) c = from;  // none in the open stretch: up to the last added token (0: nothing yet)
    *consumed = c;
    if (c == 0) return 0;
    int rc = tokenizer_hf_encode_pass(tok, s, c, 0, flags, out, nout, cap);
    h->mid_text = 1;           // what follows is not the text's start,
    h->mid_stretch = c > from; // and goes on with the stretch that c cut (unless c is right after an added token)
    return rc;
}

#endif // ZT_TOKENIZER_JSON_H
