// test/test_tokenizer.h — tests of the BPE encoder in tokenizer.h and of tokenize_file_to_shards.
//
// Included into the test binary after test.h, dataloader.h, tokenizer.h (and test_data.h); run
// from the repository root (reads data/gpt2_tokenizer.bin, data/gpt2_merges.bin, data/kjv_*.bin
// and test/fixtures/bpe_cases.txt). Scratch files go to test_tmpdir().
//
// The expected ids never come from our own encoder:
//   - test/fixtures/bpe_cases.txt holds ~400 hard and random inputs with tiktoken's ids and the
//     regex module's pieces (dev/tokenizer_reference.py; CI regenerates it and compares);
//   - the committed KJV shards were made by tiktoken (dev/prepare_data.py): decoding them gives
//     the 1,189 chapters back, and re-encoding each must give the same ids, token for token; and
//     tokenize_file_to_shards on the chapters joined by separator lines must write the same files;
//   - hand-written pieces and ids for the pattern's rules and the malformed UTF-8 behaviour.
// Streaming is checked against whole-text encoding of the same documents, at many chunk sizes.
// defines: the tok_* test cases and their tok_* helpers
#ifndef ZT_TEST_TOKENIZER_H
#define ZT_TEST_TOKENIZER_H

#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define TOK_VOCAB "data/gpt2_tokenizer.bin"
#define TOK_MERGES "data/gpt2_merges.bin"
#define TOK_FIXTURE "test/fixtures/bpe_cases.txt"
#define TOK_EOT 50256

// -----------------------------------------------------------------------------------------------
// helpers

// The GPT-2 tokenizer with merges, loaded once for all cases (NULL, and a failed CHECK, if not).
static Tokenizer* tok_gpt2(void) {
    static Tokenizer tok;
    static int state = 0;  // 0 not tried, 1 loaded, -1 failed
    if (state == 0) {
        char err[512];
        state = tokenizer_init(&tok, TOK_VOCAB, err, sizeof(err)) == 0 &&
                tokenizer_load_merges(&tok, TOK_MERGES, err, sizeof(err)) == 0 ? 1 : -1;
        if (state < 0) printf("    cannot load the GPT-2 tokenizer: %s\n", err);
    }
    CHECKF(state == 1, "the GPT-2 tokenizer (%s + %s) did not load", TOK_VOCAB, TOK_MERGES);
    return state == 1 ? &tok : NULL;
}

// <tmpdir>/<name>
static void tok_path(char* out, size_t cap, const char* name) {
    snprintf(out, cap, "%s/%s", test_tmpdir(), name);
}

// The whole file at path, malloc'ed (NULL if unreadable); its size in *n.
static unsigned char* tok_read_file(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return NULL;
    }
    *n = (size_t)st.st_size;
    unsigned char* d = (unsigned char*)malloc(*n + 1);
    if (d && fread(d, 1, *n, f) != *n) {
        free(d);
        d = NULL;
    }
    fclose(f);
    return d;
}

static void tok_write_file(const char* path, const void* bytes, size_t n) {
    FILE* f = fopen(path, "wb");
    CHECKF(f != NULL, "cannot create %s", path);
    if (!f) return;
    CHECK(fwrite(bytes, 1, n, f) == n);
    fclose(f);
}

// The tokens of an llm.c shard (uint16 or uint32), widened to uint32, malloc'ed, after checking
// its header (NULL if bad); count in *n, the format's bytes per id in *width if width is not NULL.
static uint32_t* tok_read_shard_w(const char* path, size_t* n, int* width) {
    size_t size = 0;
    unsigned char* d = tok_read_file(path, &size);
    CHECKF(d != NULL, "cannot read shard %s", path);
    if (!d) return NULL;
    int32_t h[3] = {0, 0, -1};
    if (size >= 1024) memcpy(h, d, sizeof(h));
    size_t w = h[0] == 20240801 && h[1] == 7 ? 4 : h[0] == 20240520 && h[1] == 1 ? 2 : 0;
    int ok = size >= 1024 && w && h[2] >= 0 && size == 1024 + w * (size_t)h[2];
    CHECKF(ok, "%s is not an llm.c shard: %zu bytes, header %d %d %d", path, size, h[0], h[1], h[2]);
    uint32_t* t = NULL;
    if (ok) {
        *n = (size_t)h[2];
        if (width) *width = (int)w;
        t = (uint32_t*)malloc(*n * 4 + 4);
        for (size_t i = 0; i < *n; i++) {
            uint16_t v16;
            if (w == 4) memcpy(&t[i], d + 1024 + 4 * i, 4);
            else { memcpy(&v16, d + 1024 + 2 * i, 2); t[i] = v16; }
        }
    }
    free(d);
    return t;
}

static uint32_t* tok_read_shard(const char* path, size_t* n) { return tok_read_shard_w(path, n, NULL); }

// Files in the scratch directory whose name starts with `prefix`.
static int tok_count_files(const char* prefix) {
    DIR* d = opendir(test_tmpdir());
    if (!d) return -1;
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

// Encode bytes with the GPT-2 tokenizer into a fresh buffer (*ids, malloc'ed); returns the count.
static size_t tok_encode(Tokenizer* tok, const void* text, size_t n, uint32_t** ids) {
    *ids = NULL;
    size_t nids = 0, cap = 0;
    CHECK(tokenizer_encode(tok, (const unsigned char*)text, n, ids, &nids, &cap) == 0);
    return nids;
}

// Decoding ids gives back exactly text[0..n)?
static int tok_decodes_to(Tokenizer* tok, const uint32_t* ids, size_t nids, const unsigned char* text, size_t n) {
    size_t at = 0;
    for (size_t i = 0; i < nids; i++) {
        int len;
        const char* s = tokenizer_decode(tok, ids[i], &len);
        if (ids[i] >= TOK_EOT || at + (size_t)len > n || memcmp(text + at, s, (size_t)len) != 0) return 0;
        at += (size_t)len;
    }
    return at == n;
}

// xorshift64: the random inputs are the same on every run
static uint64_t tok_rand(uint64_t* s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

// The KJV as the committed shards hold it: 1,189 chapters in Bible order (chapter i went to val
// when i % 20 == 19), each the text its tokens decode to, and those tokens (EOT not included).
typedef struct { unsigned char* text; size_t len; const uint32_t* ids; size_t nids; } TokDoc;
typedef struct { uint32_t* toks[2]; size_t ntok[2]; TokDoc* docs; int ndocs; size_t bytes; } TokKjv;

static void tok_kjv_free(TokKjv* k) {
    for (int i = 0; i < k->ndocs; i++) free(k->docs[i].text);
    free(k->docs);
    free(k->toks[0]);
    free(k->toks[1]);
    memset(k, 0, sizeof(*k));
}

static int tok_kjv_load(Tokenizer* tok, TokKjv* k) {
    memset(k, 0, sizeof(*k));
    const char* files[2] = {"data/kjv_train.bin", "data/kjv_val.bin"};
    TokDoc* split[2] = {NULL, NULL};
    int nsplit[2] = {0, 0};
    for (int s = 0; s < 2; s++) {
        k->toks[s] = tok_read_shard(files[s], &k->ntok[s]);
        if (!k->toks[s]) return -1;
        const uint32_t* t = k->toks[s];
        size_t N = k->ntok[s];
        CHECKF(N > 0 && t[0] == TOK_EOT, "%s does not start with EOT", files[s]);
        split[s] = (TokDoc*)calloc(N, sizeof(TokDoc));
        for (size_t i = 0; i < N;) {  // a document: EOT, then ids up to the next EOT
            size_t j = i + 1, len = 0;
            while (j < N && t[j] != TOK_EOT) len += tok->token_len[t[j++]];
            TokDoc* d = &split[s][nsplit[s]++];
            d->ids = t + i + 1;
            d->nids = j - i - 1;
            d->text = (unsigned char*)malloc(len + 1);
            for (size_t m = i + 1; m < j; m++) {
                memcpy(d->text + d->len, tok->token_table[t[m]], tok->token_len[t[m]]);
                d->len += tok->token_len[t[m]];
            }
            k->bytes += len;
            i = j;
        }
    }
    CHECKF(nsplit[0] == 1130 && nsplit[1] == 59, "KJV shards hold %d + %d chapters, expected 1130 + 59", nsplit[0], nsplit[1]);
    k->ndocs = nsplit[0] + nsplit[1];
    k->docs = (TokDoc*)malloc((size_t)k->ndocs * sizeof(TokDoc));
    int used[2] = {0, 0};
    for (int i = 0; i < k->ndocs; i++) {
        int s = i % 20 == 19;
        if (used[s] < nsplit[s]) k->docs[i] = split[s][used[s]++];
        else memset(&k->docs[i], 0, sizeof(TokDoc));
    }
    free(split[0]);
    free(split[1]);
    return nsplit[0] == 1130 && nsplit[1] == 59 ? 0 : -1;
}

// -----------------------------------------------------------------------------------------------
// the merge file

// GPT-2's merges load and mean what vocab.bpe says: rank 0 is "Ġ t" (" " + "t" -> " t" = 256),
// and byte tokens are GPT-2's ids ("!" is 0, the byte 'A' is 32, the space byte is 220).
TEST(tok_merges_file_loads) {
    Tokenizer* tok = tok_gpt2();
    if (!tok) return;
    const TokenizerEncoder* e = &tok->enc;
    CHECK(e->nmerges == 50000);
    CHECK(e->byte_id['!'] == 0 && e->byte_id['A'] == 32 && e->byte_id[' '] == 220 && e->byte_id['\n'] == 198);
    CHECK(tokenizer_pair_rank(e, 220, 83) == 0 && e->merged_id[0] == 256);
    CHECK(tokenizer_pair_rank(e, 83, 220) == TOKENIZER_NO_MERGE);
    for (uint32_t r = 0; r < e->nmerges; r++) CHECKF(e->merged_id[r] == 256 + r, "merge %u makes %u", r, e->merged_id[r]);
}

// A damaged merge file: a one-line error naming the file and the problem; the encoder left
// empty, the vocabulary still loaded (decoding still works).
static void tok_expect_merges_error(const char* path, const unsigned char* bytes, size_t n, const char* needle) {
    if (bytes) tok_write_file(path, bytes, n);
    Tokenizer tok;
    char err[1024] = "";
    CHECK(tokenizer_init(&tok, TOK_VOCAB, err, sizeof(err)) == 0);
    int rc = tokenizer_load_merges(&tok, path, err, sizeof(err));
    CHECKF(rc != 0, "loading %s should fail (%s)", path, needle);
    CHECKF(strchr(err, '\n') == NULL && strstr(err, path) != NULL, "message is not one line naming %s: %s", path, err);
    CHECKF(strstr(err, needle) != NULL, "message lacks '%s': %s", needle, err);
    CHECK(tok.enc.nmerges == 0 && tok.enc.pairs == NULL && tok.enc.merged_id == NULL);
    CHECK(tok.token_table != NULL && tok.vocab_size == 50257);
    uint32_t* ids = NULL;
    size_t nids = 0, cap = 0;
    CHECK(tokenizer_encode(&tok, (const unsigned char*)"hi", 2, &ids, &nids, &cap) != 0);  // no merges: refused
    free(ids);
    tokenizer_free(&tok);
}

TEST(tok_merges_file_errors) {
    size_t n = 0;
    unsigned char* good = tok_read_file(TOK_MERGES, &n);
    CHECKF(good != NULL && n == 1024 + 512 + 6 * 50000, "%s: %zu bytes", TOK_MERGES, n);
    if (!good || n != 1024 + 512 + 6 * 50000) return;
    unsigned char* bad = (unsigned char*)malloc(n);
    char path[600];
    tok_path(path, sizeof(path), "merges_bad.bin");
    uint16_t* rec = (uint16_t*)(bad + 1024 + 512);

    tok_expect_merges_error("test/no_such_merges.bin", NULL, 0, "cannot open");
    memcpy(bad, good, n);
    tok_expect_merges_error(path, bad, 1000, "truncated header");
    memcpy(bad, good, n);
    bad[0] ^= 1;
    tok_expect_merges_error(path, bad, n, "wrong magic");
    memcpy(bad, good, n);
    bad[4] = 9;
    tok_expect_merges_error(path, bad, n, "unsupported version 9");
    memcpy(bad, good, n);
    bad[12] = 0x50;  // V = 50256 + ...: not the tokenizer file's vocabulary
    tok_expect_merges_error(path, bad, n, "vocabulary of");
    tok_expect_merges_error(path, good, n - 6, "wrong size");
    memcpy(bad, good, n);
    ((uint16_t*)(bad + 1024))['A'] = 33;  // byte 'A' -> the token of 'B'
    tok_expect_merges_error(path, bad, n, "byte 65 maps to token 33");
    memcpy(bad, good, n);
    rec[3 * 10] = 300;  // merge 10 uses token 300, made only by merge 44
    tok_expect_merges_error(path, bad, n, "merge 10 (300 + ");
    memcpy(bad, good, n);
    rec[3 * 10 + 2] = 256;  // merge 10 remakes token 256
    tok_expect_merges_error(path, bad, n, "remakes one");
    memcpy(bad, good, n);
    rec[3 * 5 + 2] = 10000;  // merge 5 claims a token whose bytes are something else
    tok_expect_merges_error(path, bad, n, "are not those of");
    memcpy(bad, good, n);
    rec[3 * 7 + 0] = rec[3 * 3 + 0];  // merge 7 repeats the pair of merge 3 ...
    rec[3 * 7 + 1] = rec[3 * 3 + 1];
    tok_expect_merges_error(path, bad, n, "merge 7");

    Tokenizer empty;  // merges need the vocabulary first
    memset(&empty, 0, sizeof(empty));
    char err[512] = "";
    CHECK(tokenizer_load_merges(&empty, TOK_MERGES, err, sizeof(err)) != 0 && strstr(err, "tokenizer_init") != NULL);
    tokenizer_free(&empty);
    free(bad);
    free(good);
}

// -----------------------------------------------------------------------------------------------
// characters and pieces

// The generated table is well formed, agrees with the ASCII fast path, and has the classes the
// pattern needs at points where Unicode versions and Python's isspace() differ.
TEST(tok_unicode_tables) {
    CHECK(strcmp(UNICODE_VERSION, "16.0.0") == 0);
    for (int i = 0; i < UNICODE_NRANGES; i++) {
        const UnicodeRange* r = &unicode_ranges[i];
        CHECKF(r->lo <= r->hi && r->hi <= 0x10FFFF && (r->cls == UC_L || r->cls == UC_N || r->cls == UC_S), "range %d", i);
        if (i > 0) {
            const UnicodeRange* p = &unicode_ranges[i - 1];
            CHECKF(p->hi < r->lo && (p->hi + 1 < r->lo || p->cls != r->cls), "ranges %d, %d overlap or should be one", i - 1, i);
        }
    }
    for (int c = 0; c < 128; c++) {
        unsigned char b = (unsigned char)c;
        int len;
        CHECKF(tokenizer_char_class(&b, 1, &len) == tokenizer_unicode_class((uint32_t)c) && len == 1, "ASCII %d", c);
    }
    const struct { uint32_t cp; int cls; } known[] = {
        {0xE9, UC_L},     {0x301, UC_OTHER}, {0x663, UC_N},   {0x216B, UC_N},  {0xBD, UC_N},    {0xB2, UC_N},
        {0x3000, UC_S},   {0x85, UC_S},      {0xA0, UC_S},    {0x2028, UC_S},  {0x1C, UC_OTHER}, {0x1F, UC_OTHER},
        {0x200B, UC_OTHER}, {0x180E, UC_OTHER}, {0xFEFF, UC_OTHER}, {0x4E2D, UC_L}, {0x31350, UC_L}, {0x10D50, UC_L},
        {0x1F600, UC_OTHER}, {0x10FFFF, UC_OTHER}, {0x0, UC_OTHER}, {0x2019, UC_OTHER}, {0x1D400, UC_L}, {0xFF11, UC_N},
    };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        CHECKF(tokenizer_unicode_class(known[i].cp) == known[i].cls, "U+%04X: class %d, expected %d", known[i].cp,
               tokenizer_unicode_class(known[i].cp), known[i].cls);
    }
}

// Well-formed UTF-8 is Unicode's Table 3-7 exactly: the edges of every row, and what is not.
TEST(tok_utf8_decoding) {
    const struct { const char* s; int n; int len; uint32_t cp; } cases[] = {
        {"A", 1, 1, 0x41},                 {"\xC2\x80", 2, 2, 0x80},          {"\xDF\xBF", 2, 2, 0x7FF},
        {"\xE0\xA0\x80", 3, 3, 0x800},     {"\xED\x9F\xBF", 3, 3, 0xD7FF},    {"\xEE\x80\x80", 3, 3, 0xE000},
        {"\xEF\xBF\xBF", 3, 3, 0xFFFF},    {"\xF0\x90\x80\x80", 4, 4, 0x10000}, {"\xF4\x8F\xBF\xBF", 4, 4, 0x10FFFF},
        {"\x80", 1, 0, 0},                 {"\xBF", 1, 0, 0},                 {"\xC0\x80", 2, 0, 0},  // overlong
        {"\xC1\xBF", 2, 0, 0},             {"\xE0\x9F\xBF", 3, 0, 0},         {"\xED\xA0\x80", 3, 0, 0},  // surrogate
        {"\xF0\x8F\xBF\xBF", 4, 0, 0},     {"\xF4\x90\x80\x80", 4, 0, 0},     {"\xF5\x80\x80\x80", 4, 0, 0},
        {"\xFF", 1, 0, 0},                 {"\xC3", 1, 0, 0},                 {"\xE2\x82", 2, 0, 0},   // truncated
        {"\xE2\x82\x41", 3, 0, 0},         {"\xF0\x9F\x98\x41", 4, 0, 0},     {"\xC3\xA9", 1, 0, 0},   // cut by n
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint32_t cp = 0;
        int len = tokenizer_utf8((const unsigned char*)cases[i].s, (size_t)cases[i].n, &cp);
        CHECKF(len == cases[i].len && (len == 0 || cp == cases[i].cp), "case %zu: length %d cp %X, expected %d %X",
               i, len, cp, cases[i].len, cases[i].cp);
    }
}

// The pattern's rules, one example each, with the pieces written out by hand from the regex.
TEST(tok_pieces_by_hand) {
    const char* cases[][8] = {  // input, then its pieces, NULL-terminated
        {"Hello world", "Hello", " world", NULL},
        {"don't", "don", "'t", NULL},
        {"I'M", "I", "'", "M", NULL},                          // contractions are lower case only
        {"'sun", "'s", "un", NULL},                            // ... and take no more than their letters
        {"?'s", "?'", "s", NULL},                              // ... and only start a piece
        {"a   \n\n  b", "a", "   \n\n ", " b", NULL},         // \s+(?!\S): all but the last space
        {"  x", " ", " x", NULL},
        {"x  ", "x", "  ", NULL},                              // at the end of the text: the whole run
        {"\t x", "\t", " x", NULL},
        {" \tx", " ", "\t", "x", NULL},                        // the last space char is not U+0020: alone
        {"a\n\nb", "a", "\n", "\n", "b", NULL},
        {"12345678901234567890", "12345678901234567890", NULL},  // digit runs are not split
        {"3.14", "3", ".", "14", NULL},
        {" 42!", " 42", "!", NULL},
        {" ...", " ...", NULL},
        {"e\xCC\x81", "e", "\xCC\x81", NULL},                  // a combining mark is not a letter
        {"caf\xC3\xA9!", "caf\xC3\xA9", "!", NULL},
        {"a\xFF" "b", "a", "\xFF", "b", NULL},                 // malformed: one "other" character
        {" \xFF", " \xFF", NULL},
        {"!\xFF?", "!\xFF?", NULL},
        {"caf\xC3", "caf", "\xC3", NULL},                      // a truncated character
        {"\xED\xA0\x80z", "\xED\xA0\x80", "z", NULL},           // an encoded surrogate: three bytes
        {"<|endoftext|>", "<|", "endoftext", "|>", NULL},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const unsigned char* s = (const unsigned char*)cases[c][0];
        size_t n = strlen(cases[c][0]), at = 0;
        int k = 1;
        while (at < n && cases[c][k]) {
            size_t len = tokenizer_piece_length(s + at, n - at), want = strlen(cases[c][k]);
            CHECKF(len == want && memcmp(s + at, cases[c][k], want) == 0, "case %zu: piece %d is %zu bytes, expected '%s'",
                   c, k, len, cases[c][k]);
            at += len;
            k++;
        }
        CHECKF(at == n && cases[c][k] == NULL, "case %zu: %zu of %zu bytes in %d pieces", c, at, n, k - 1);
    }
}

// -----------------------------------------------------------------------------------------------
// ids against tiktoken

static int tok_hex(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

// Every case of the fixture: our pieces are the regex module's, our ids tiktoken's, and the ids
// decode to the input.
TEST(tok_fixture_cases) {
    Tokenizer* tok = tok_gpt2();
    size_t size = 0;
    char* fx = (char*)tok_read_file(TOK_FIXTURE, &size);
    CHECKF(fx != NULL, "cannot read %s (made by dev/tokenizer_reference.py)", TOK_FIXTURE);
    if (!tok || !fx) {
        free(fx);
        return;
    }
    fx[size] = 0;
    int ncases = 0, bad = 0, malformed = 0;
    unsigned char* text = (unsigned char*)malloc(size);
    size_t* lens = (size_t*)malloc(size * sizeof(size_t));
    uint32_t* want = (uint32_t*)malloc(size * sizeof(uint32_t));
    for (char* line = strtok(fx, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char* field[4] = {line, NULL, NULL, NULL};
        for (int f = 1; f < 4; f++) {
            char* tab = field[f - 1] ? strchr(field[f - 1], '\t') : NULL;
            if (tab) *tab = 0;
            field[f] = tab ? tab + 1 : NULL;
        }
        CHECKF(field[3] != NULL, "%s: malformed line: %.60s", TOK_FIXTURE, line);
        if (!field[3]) break;
        size_t n = 0, npieces = 0, nwant = 0;
        for (const char* h = field[1]; h[0] && h[1]; h += 2) text[n++] = (unsigned char)(tok_hex(h[0]) * 16 + tok_hex(h[1]));
        for (char* p = field[2]; *p;) lens[npieces++] = (size_t)strtoull(p, &p, 10);
        for (char* p = field[3]; *p;) want[nwant++] = (uint32_t)strtoul(p, &p, 10);
        ncases++;
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            int l = tokenizer_utf8(text + i, n - i, &cp);
            if (l == 0) { malformed++; break; }
            i += (size_t)l;
        }
        // pieces
        size_t at = 0, k = 0;
        int pieces_ok = 1;
        while (at < n) {
            size_t len = tokenizer_piece_length(text + at, n - at);
            pieces_ok &= k < npieces && len == lens[k];
            at += len;
            k++;
        }
        pieces_ok &= k == npieces;
        // ids and round trip
        uint32_t* ids;
        size_t nids = tok_encode(tok, text, n, &ids);
        int ids_ok = nids == nwant && memcmp(ids, want, nids * sizeof(uint32_t)) == 0;
        int round_trip = tok_decodes_to(tok, ids, nids, text, n);
        if (!pieces_ok || !ids_ok || !round_trip) {
            bad++;
            CHECKF(0, "case %s: pieces %s, ids %s (%zu ids, tiktoken %zu), round trip %s", field[0], pieces_ok ? "ok" : "DIFFER",
                   ids_ok ? "ok" : "DIFFER", nids, nwant, round_trip ? "ok" : "BROKEN");
        }
        free(ids);
    }
    printf("    %d cases (%d of them malformed UTF-8), %d differ from tiktoken\n", ncases, malformed, bad);
    CHECKF(ncases >= 400 && malformed >= 40, "%s has only %d cases, %d malformed", TOK_FIXTURE, ncases, malformed);
    free(text);
    free(lens);
    free(want);
    free(fx);
}

// "<|endoftext|>" in text is text (tiktoken's encode_ordinary), never the EOT id; an empty text
// gives no ids; a malformed byte is its one-byte token.
TEST(tok_special_inputs) {
    Tokenizer* tok = tok_gpt2();
    if (!tok) return;
    uint32_t* ids;
    size_t n = tok_encode(tok, "<|endoftext|>", 13, &ids);
    const uint32_t eot_text[7] = {27, 91, 437, 1659, 5239, 91, 29};
    CHECKF(n == 7 && memcmp(ids, eot_text, sizeof(eot_text)) == 0, "<|endoftext|> gave %zu ids", n);
    free(ids);
    CHECK(tok_encode(tok, "", 0, &ids) == 0);
    free(ids);
    n = tok_encode(tok, "a\xFF" "b", 3, &ids);  // "a", "\xFF", "b"
    CHECKF(n == 3 && ids[0] == 64 && ids[1] == tok->enc.byte_id[0xFF] && ids[2] == 65, "a\\xFFb gave %zu ids", n);
    free(ids);
    // appending: a second text's ids go after the first's, in the same buffer
    uint32_t* buf = NULL;
    size_t nbuf = 0, cap = 0;
    CHECK(tokenizer_encode(tok, (const unsigned char*)"Hello", 5, &buf, &nbuf, &cap) == 0);
    CHECK(tokenizer_encode(tok, (const unsigned char*)" world", 6, &buf, &nbuf, &cap) == 0);
    CHECK(nbuf == 2 && buf[0] == 15496 && buf[1] == 995);
    free(buf);
}

// Memory of BPE on one long piece (tokenizer.h, "Memory per piece"): a run of 4 MiB - 1 letters
// is one piece. Its work arrays are exactly TOKENIZER_BPE_BYTES_PER_CAP (42) bytes per byte of the
// piece (the length + 1 is a power of two, so no rounding), and the resident growth while
// encoding stays within the documented bound, 42 bytes per byte plus the ids. Measured in a forked
// child with a tokenizer of its own, so nothing earlier in this process moves the figures: VmRSS
// before encoding, VmHWM (the peak) after; both counts of pages, not times, so deterministic.
static long tok_status_kb(const char* field) {
    FILE* f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof(line), f)) {
        if (strncmp(line, field, strlen(field)) == 0) kb = atol(line + strlen(field));
    }
    if (f) fclose(f);
    return kb;
}

TEST(tok_bpe_memory_long_piece) {
    typedef struct { int rc; size_t nids, work_bytes; long rss_kb, hwm_kb; } Measured;
    const size_t n = ((size_t)4 << 20) - 1;
    int fd[2];
    CHECK(pipe(fd) == 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        Measured m = {-1, 0, 0, -1, -1};
        Tokenizer tok;
        char err[512];
        unsigned char* text = (unsigned char*)malloc(n);
        if (text && tokenizer_init(&tok, TOK_VOCAB, err, sizeof(err)) == 0 &&
            tokenizer_load_merges(&tok, TOK_MERGES, err, sizeof(err)) == 0) {
            memset(text, 'a', n);
            uint32_t* ids = NULL;
            size_t cap = 0;
            m.rss_kb = tok_status_kb("VmRSS:");
            m.rc = tokenizer_encode(&tok, text, n, &ids, &m.nids, &cap);
            m.hwm_kb = tok_status_kb("VmHWM:");
            m.work_bytes = tokenizer_bpe_work_bytes(&tok.enc);
        }
        ssize_t w = write(fd[1], &m, sizeof(m));
        _exit(w == (ssize_t)sizeof(m) ? 0 : 1);
    }
    close(fd[1]);
    Measured m;
    memset(&m, 0, sizeof(m));
    ssize_t r = pid > 0 ? read(fd[0], &m, sizeof(m)) : -1;
    close(fd[0]);
    int status = 0;
    if (pid > 0) waitpid(pid, &status, 0);
    CHECKF(pid > 0 && r == (ssize_t)sizeof(m) && WIFEXITED(status) && WEXITSTATUS(status) == 0, "the measuring child failed");
    CHECKF(m.rc == 0 && m.nids == (n + 1) / 4, "a run of %zu letters: rc %d, %zu ids (want %zu)", n, m.rc, m.nids, (n + 1) / 4);
    CHECKF(m.work_bytes == TOKENIZER_BPE_BYTES_PER_CAP * (n + 1) && TOKENIZER_BPE_BYTES_PER_CAP == 44,
           "BPE work arrays: %zu bytes for a piece of %zu (documented: 44 per byte)", m.work_bytes, n);
    double resident = (double)(m.hwm_kb - m.rss_kb) * 1024.0;
    double bound = 44.0 * n + 8.0 * m.nids + (1 << 20);  // ids: 4 bytes, 8 while realloc copies; 1 MiB of pages
    printf("    BPE on one piece of %zu bytes: %.1f bytes/byte allocated, %.1f bytes/byte resident (bound %.1f)\n",
           n, (double)m.work_bytes / n, resident / n, bound / n);
    CHECKF(m.rss_kb > 0 && m.hwm_kb > 0 && resident <= bound, "resident growth %.0f bytes > documented bound %.0f", resident, bound);
}

// The whole KJV: every chapter of the committed shards (tiktoken's ids) decoded and encoded again
// gives the same ids, token for token.
TEST(tok_kjv_reencode) {
    Tokenizer* tok = tok_gpt2();
    TokKjv k;
    if (!tok || tok_kjv_load(tok, &k) != 0) {
        if (tok) tok_kjv_free(&k);
        return;
    }
    uint32_t* ids = NULL;
    size_t nids = 0, cap = 0, total = 0;
    int bad = 0;
    double t0 = test_now_s();
    for (int i = 0; i < k.ndocs; i++) {
        nids = 0;
        CHECK(tokenizer_encode(tok, k.docs[i].text, k.docs[i].len, &ids, &nids, &cap) == 0);
        total += nids;
        if (nids != k.docs[i].nids || memcmp(ids, k.docs[i].ids, nids * sizeof(uint32_t)) != 0) {
            if (bad++ < 3) CHECKF(0, "chapter %d: %zu ids, the shard has %zu", i, nids, k.docs[i].nids);
        }
    }
    double dt = test_now_s() - t0;
    printf("    KJV: %d chapters, %.2f MB, %zu tokens encoded in %.3f s (%.1f MB/s, one core); %d differ\n", k.ndocs,
           k.bytes / 1e6, total, dt, k.bytes / 1e6 / dt, bad);
    CHECK(bad == 0 && total + (size_t)k.ndocs == 1141844);
    free(ids);
    tok_kjv_free(&k);
}

// -----------------------------------------------------------------------------------------------
// round trips

// Any bytes encode, and decode back to exactly those bytes: random bytes (mostly malformed
// UTF-8), random code points of every plane, and ASCII-heavy text with long runs.
TEST(tok_round_trip_random) {
    Tokenizer* tok = tok_gpt2();
    if (!tok) return;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    unsigned char text[4096];
    int bad = 0, cases = 0;
    for (int kind = 0; kind < 4; kind++) {
        for (int c = 0; c < 400; c++) {
            size_t n = 0, want = 1 + tok_rand(&s) % (kind == 3 ? 4000 : 300);
            while (n < want) {
                uint64_t r = tok_rand(&s);
                if (kind == 0) {  // uniform bytes
                    text[n++] = (unsigned char)r;
                } else if (kind == 1 || kind == 2) {  // a code point, or (kind 2, 1 in 8) a stray byte
                    uint32_t cp = (uint32_t)(r >> 8) % (r & 1 ? 0x110000 : 0x800);
                    if ((kind == 2 && r % 8 == 0) || (cp >= 0xD800 && cp <= 0xDFFF)) {
                        text[n++] = (unsigned char)(0x80 + (r >> 40) % 0x80);
                    } else if (cp < 0x80) {
                        text[n++] = (unsigned char)cp;
                    } else if (cp < 0x800) {
                        text[n++] = (unsigned char)(0xC0 | cp >> 6);
                        text[n++] = (unsigned char)(0x80 | (cp & 0x3F));
                    } else if (cp < 0x10000) {
                        text[n++] = (unsigned char)(0xE0 | cp >> 12);
                        text[n++] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
                        text[n++] = (unsigned char)(0x80 | (cp & 0x3F));
                    } else {
                        text[n++] = (unsigned char)(0xF0 | cp >> 18);
                        text[n++] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
                        text[n++] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
                        text[n++] = (unsigned char)(0x80 | (cp & 0x3F));
                    }
                } else {  // text-like: runs of one character from a small alphabet
                    static const char alphabet[] = " \n\t\r'sa1!.\xC3\xA9";
                    unsigned char ch = (unsigned char)alphabet[r % (sizeof(alphabet) - 1)];
                    for (size_t run = 1 + (r >> 32) % (r % 7 == 0 ? 200 : 3); run > 0 && n < sizeof(text) - 4; run--) text[n++] = ch;
                }
            }
            uint32_t* ids;
            size_t nids = tok_encode(tok, text, n, &ids);
            size_t at = 0, pieces_ok = 1;
            while (at < n) {
                size_t len = tokenizer_piece_length(text + at, n - at);
                pieces_ok &= len >= 1 && at + len <= n;
                at += len;
            }
            if (!tok_decodes_to(tok, ids, nids, text, n) || !pieces_ok) {
                if (bad++ < 3) CHECKF(0, "kind %d case %d (%zu bytes): ids do not decode to the input", kind, c, n);
            }
            cases++;
            free(ids);
        }
    }
    CHECKF(bad == 0, "%d of %d random inputs do not round-trip", bad, cases);
}

// -----------------------------------------------------------------------------------------------
// tokenize_file_to_shards

// Pieces of text for streaming inputs: words, contractions, characters of every length, malformed
// bytes, space runs, separator lines and pieces of them.
static const char* const tok_atoms[] = {
    "The", " word", " don't", "'re", "'", "ll", "\xC3\xA9t\xC3\xA9", "\xE4\xB8\xAD\xE6\x96\x87", "\xF0\x9F\x98\x80", "123",
    "4567", " ", "  ", "\n", "\n\n", "\t", "\r\n", "!", "?!", "\xFF", "\xE2\x82", "\xCC\x81", "\xC2\xA0",
    "\xE3\x80\x80", "\xE2\x80\xA8", "\xF0\xB1\x8D\x90",  // 3-byte spaces, a 4-byte letter
    " \xE3\x80\x80\xE3\x80\x80x",  // the longest lookahead: is the cut-off last char a space?
    "\n<|endoftext|>\n", "<|endoftext|>\n", "<|endoftext|>", "<|endoftext", "|>\n", "<|endoftext|> \n", "\n<|endo",
    "\n<|endoftext|>", "<|", "endoftext",
};
#define TOK_NATOMS (sizeof(tok_atoms) / sizeof(tok_atoms[0]))

// Random text of about n bytes from tok_atoms, with long space runs now and then (malloc'ed).
static unsigned char* tok_random_text(uint64_t seed, size_t want, size_t* n) {
    unsigned char* text = (unsigned char*)malloc(want + 1000);
    *n = 0;
    while (*n < want) {
        uint64_t r = tok_rand(&seed);
        if (r % 97 == 0) {  // a long space run (longer than small chunks and the lookahead)
            size_t run = 20 + (r >> 20) % 400;
            memset(text + *n, r & 1 ? ' ' : '\n', run);
            *n += run;
        } else {
            const char* a = tok_atoms[(r >> 8) % TOK_NATOMS];
            memcpy(text + *n, a, strlen(a));
            *n += strlen(a);
        }
    }
    return text;
}

// The streaming rule at every cut: encoding text[0..cut) as "more follows" must stop at a piece
// boundary of the whole text, having seen exactly the whole text's pieces (the lookahead is
// enough), and encoding the rest from there must complete the whole text's ids.
TEST(tok_encode_part_every_cut) {
    Tokenizer* tok = tok_gpt2();
    if (!tok) return;
    size_t n;
    unsigned char* text = tok_random_text(777, 3000, &n);
    unsigned char* boundary = (unsigned char*)calloc(n + 1, 1);  // the whole text's piece ends (and 0)
    boundary[0] = 1;
    for (size_t at = 0; at < n;) {
        at += tokenizer_piece_length(text + at, n - at);
        boundary[at] = 1;
    }
    uint32_t *whole, *ids = NULL;
    size_t nwhole = tok_encode(tok, text, n, &whole), nids = 0, cap = 0;
    int bad = 0;
    for (size_t cut = 0; cut <= n; cut++) {
        int pieces_ok = 1;  // what encode_part sees: pieces of text[0..cut), kept while far enough from cut
        for (size_t at = 0; at < cut;) {
            size_t len = tokenizer_piece_length(text + at, cut - at);
            if (at + len + TOKENIZER_LOOKAHEAD > cut) break;
            pieces_ok &= boundary[at + len];
            at += len;
        }
        size_t used = 0;
        nids = 0;
        CHECK(tokenizer_encode_part(tok, text, cut, 0, &used, &ids, &nids, &cap) == 0);
        CHECK(tokenizer_encode(tok, text + used, n - used, &ids, &nids, &cap) == 0);
        int ids_ok = nids == nwhole && memcmp(ids, whole, nids * sizeof(uint32_t)) == 0;
        if (!pieces_ok || used > cut || !boundary[used] || !ids_ok) {
            if (bad++ < 3) CHECKF(0, "cut at %zu (encoded up to %zu): pieces %s, ids %s", cut, used, pieces_ok ? "ok" : "WRONG",
                                 ids_ok ? "ok" : "DIFFER");
        }
    }
    CHECKF(bad == 0, "%d of %zu cuts differ", bad, n + 1);
    free(boundary);
    free(whole);
    free(ids);
    free(text);
}

// The documents of text[0..n) by the rule as documented, restated line by line: a line that is
// exactly "<|endoftext|>" separates documents; empty documents are dropped. Fills starts/lens
// (capacity max); returns the count.
static int tok_ref_documents(const unsigned char* text, size_t n, size_t* starts, size_t* lens, int max) {
    int ndocs = 0;
    size_t doc = 0, line = 0;
    while (line < n) {
        const unsigned char* nl = (const unsigned char*)memchr(text + line, '\n', n - line);
        size_t end = nl ? (size_t)(nl - text) : n;  // the line is text[line, end)
        if (end - line == 13 && memcmp(text + line, "<|endoftext|>", 13) == 0) {
            if (line > doc && ndocs < max) {
                starts[ndocs] = doc;
                lens[ndocs++] = line - doc;
            }
            doc = end < n ? end + 1 : n;
        }
        line = end + 1;
    }
    if (n > doc && ndocs < max) {
        starts[ndocs] = doc;
        lens[ndocs++] = n - doc;
    }
    return ndocs;
}

// The tokens of one split, every shard PREFIX_<split>_NNNNNN.bin read in order and joined, each
// but the last holding exactly shard_tokens; number of shards in *nshards.
static uint32_t* tok_read_split(const char* prefix, const char* split, size_t shard_tokens, size_t* n, int* nshards) {
    uint32_t* all = NULL;
    *n = 0;
    *nshards = 0;
    for (int i = 0;; i++) {
        char path[700];
        snprintf(path, sizeof(path), "%s_%s_%06d.bin", prefix, split, i);
        if (access(path, F_OK) != 0) break;
        size_t m = 0;
        uint32_t* t = tok_read_shard(path, &m);
        if (!t) break;
        if (i > 0) CHECKF(*n % shard_tokens == 0 && *n / shard_tokens == (size_t)i, "%s: an earlier shard was not full", path);
        CHECKF(m >= 1 && m <= shard_tokens, "%s holds %zu tokens, shard size %zu", path, m, shard_tokens);
        all = (uint32_t*)realloc(all, (*n + m + 1) * sizeof(uint32_t));
        memcpy(all + *n, t, m * sizeof(uint32_t));
        *n += m;
        (*nshards)++;
        free(t);
    }
    return all;
}

// Run tokenize_file_to_shards_ex on text and compare both splits with: the documents by the
// restated rule, each EOT + its whole-text encoding, every val_every-th to val.
static void tok_check_tokenize(Tokenizer* tok, const char* name, const unsigned char* text, size_t n, int val_every,
                               int64_t shard_tokens, size_t chunk) {
    char in[700], prefix[700], err[1024] = "";
    tok_path(in, sizeof(in), "in_stream.txt");
    snprintf(prefix, sizeof(prefix), "%s/%s", test_tmpdir(), name);
    tok_write_file(in, text, n);
    TokenizeStats st;
    int rc = tokenize_file_to_shards_ex(tok, in, prefix, val_every, shard_tokens, chunk, &st, err, sizeof(err));
    CHECKF(rc == 0, "%s (chunk %zu): %s", name, chunk, err);

    enum { MAXDOCS = 4096 };
    static size_t starts[MAXDOCS], lens[MAXDOCS];
    int ndocs = tok_ref_documents(text, n, starts, lens, MAXDOCS);
    uint32_t* want[2] = {NULL, NULL};
    size_t nwant[2] = {0, 0}, cap[2] = {0, 0};
    int64_t docs[2] = {0, 0};
    for (int d = 0; d < ndocs; d++) {
        int s = val_every > 0 && d % val_every == val_every - 1;
        uint32_t eot = TOK_EOT;
        CHECK(tokenizer_append(&want[s], &nwant[s], &cap[s], &eot, 1) == 0);
        CHECK(tokenizer_encode(tok, text + starts[d], lens[d], &want[s], &nwant[s], &cap[s]) == 0);
        docs[s]++;
    }
    const char* names[2] = {"train", "val"};
    for (int s = 0; s < 2; s++) {
        size_t got_n = 0;
        int nshards = 0;
        uint32_t* got = tok_read_split(prefix, names[s], (size_t)shard_tokens, &got_n, &nshards);
        CHECKF(got_n == nwant[s] && (got_n == 0 || memcmp(got, want[s], got_n * sizeof(uint32_t)) == 0),
               "%s (chunk %zu): %s has %zu tokens, whole-text encoding of the documents gives %zu", name, chunk, names[s],
               got_n, nwant[s]);
        CHECKF(st.documents[s] == docs[s] && st.tokens[s] == (int64_t)nwant[s] && st.shards[s] == nshards,
               "%s (chunk %zu): stats of %s: %lld docs %lld tokens %d shards", name, chunk, names[s],
               (long long)st.documents[s], (long long)st.tokens[s], st.shards[s]);
        CHECK(nshards == (int)((nwant[s] + (size_t)shard_tokens - 1) / (size_t)shard_tokens));
        for (int i = 0; i < nshards; i++) {  // remove, so the next run starts clean
            char path[800];
            snprintf(path, sizeof(path), "%s_%s_%06d.bin", prefix, names[s], i);
            remove(path);
        }
        free(got);
        free(want[s]);
    }
    CHECK(st.bytes == (int64_t)n);
    char shards_prefix[128];
    snprintf(shards_prefix, sizeof(shards_prefix), "%s_", name);
    CHECKF(tok_count_files(shards_prefix) == 0, "%s: files left besides the shards (temporary files?)", name);
    remove(in);
}

// A small file by hand: the separator rules (only a whole line; at the end of the file without a
// newline; empty documents skipped), EOT before each document, val_every = 2, shards of 4 tokens.
TEST(tok_tokenize_small_file) {
    Tokenizer* tok = tok_gpt2();
    if (!tok) return;
    const char* text =
        "<|endoftext|>\n"                                    // at the start: an empty document, skipped
        "first doc\n"
        "<|endoftext|>\n"
        "second\n"
        "<|endoftext|>\n<|endoftext|>\n"                     // two in a row: nothing between, skipped
        "third <|endoftext|>\n"                              // not a whole line: text
        "x<|endoftext|>\n<|endoftext|> \n<|endoftext|>\r\n"   // neither are these
        "<|endoftext|>";                                     // at the end, without a newline
    const char* docs[3] = {"first doc\n", "second\n",
                           "third <|endoftext|>\nx<|endoftext|>\n<|endoftext|> \n<|endoftext|>\r\n"};
    char in[700], prefix[700], err[1024] = "";
    tok_path(in, sizeof(in), "small.txt");
    tok_path(prefix, sizeof(prefix), "small");
    tok_write_file(in, text, strlen(text));
    TokenizeStats st;
    CHECKF(tokenize_file_to_shards_ex(tok, in, prefix, 2, 4, 5, &st, err, sizeof(err)) == 0, "%s", err);
    // expected: train = EOT doc0 EOT doc2, val = EOT doc1
    uint32_t* want[2] = {NULL, NULL};
    size_t nwant[2] = {0, 0}, cap[2] = {0, 0}, eot_at[2] = {0, 0};
    uint32_t eot = TOK_EOT;
    for (int d = 0; d < 3; d++) {
        int s = d == 1;
        if (d == 2) eot_at[0] = nwant[0];
        CHECK(tokenizer_append(&want[s], &nwant[s], &cap[s], &eot, 1) == 0);
        CHECK(tokenizer_encode(tok, (const unsigned char*)docs[d], strlen(docs[d]), &want[s], &nwant[s], &cap[s]) == 0);
    }
    CHECK(st.documents[0] == 2 && st.documents[1] == 1);
    for (int s = 0; s < 2; s++) {
        size_t n = 0;
        int nshards = 0;
        uint32_t* got = tok_read_split(prefix, s ? "val" : "train", 4, &n, &nshards);
        CHECKF(n == nwant[s] && got && memcmp(got, want[s], n * sizeof(uint32_t)) == 0, "split %d: %zu tokens, expected %zu", s, n, nwant[s]);
        CHECKF(nshards == (int)(nwant[s] + 3) / 4 && st.shards[s] == nshards, "split %d: %d shards", s, nshards);
        int eots = 0;
        for (size_t i = 0; got && i < n; i++) eots += got[i] == TOK_EOT;
        CHECKF(got && got[0] == TOK_EOT && eots == (s ? 1 : 2), "split %d: EOT first and once per document (%d)", s, eots);
        if (s == 0) CHECK(got && got[eot_at[0]] == TOK_EOT);
        free(got);
        free(want[s]);
    }
    CHECK(nwant[0] > 8);  // train spans at least three shards of 4
    CHECKF(tok_count_files("small_") == (int)(st.shards[0] + st.shards[1]), "unexpected files beside the shards");
}

// Streaming gives what encoding each document whole gives, at every chunk size: pieces, UTF-8
// characters, separator lines and long space runs cut anywhere by chunk boundaries.
TEST(tok_tokenize_streaming_chunks) {
    Tokenizer* tok = tok_gpt2();
    if (!tok) return;
    size_t n;
    unsigned char* text = tok_random_text(12345, 40000, &n);
    const size_t chunks[] = {1, 2, 3, 5, 8, 13, 14, 15, 64, 1000, 1 << 20};
    for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {  // small shards once: every shard is fsynced
        tok_check_tokenize(tok, "stream", text, n, 3, chunks[c] == 13 ? 1000 : 1000000, chunks[c]);
    }
    // whole-file edge: one document ending at the end of the file in a space run, no separators
    tok_check_tokenize(tok, "nosep", (const unsigned char*)"just one document  \n\n  ", 23, 0, 7, 4);
    free(text);
}

// The KJV again, through the command: the chapters joined by separator lines, tokenized with
// every 20th chapter to val, give byte for byte the committed data/kjv_train.bin and kjv_val.bin.
TEST(tok_tokenize_kjv_file) {
    Tokenizer* tok = tok_gpt2();
    TokKjv k;
    if (!tok || tok_kjv_load(tok, &k) != 0) {
        if (tok) tok_kjv_free(&k);
        return;
    }
    char in[700], prefix[700], err[1024] = "";
    tok_path(in, sizeof(in), "kjv.txt");
    tok_path(prefix, sizeof(prefix), "kjv");
    FILE* f = fopen(in, "wb");
    CHECK(f != NULL);
    if (!f) {
        tok_kjv_free(&k);
        return;
    }
    for (int i = 0; i < k.ndocs; i++) {
        if (i > 0) fputs("<|endoftext|>\n", f);  // every chapter ends with "\n", so this is a line
        CHECK(k.docs[i].len > 0 && k.docs[i].text[k.docs[i].len - 1] == '\n');
        CHECK(fwrite(k.docs[i].text, 1, k.docs[i].len, f) == k.docs[i].len);
    }
    fclose(f);
    const size_t chunks[2] = {4093, TOKENIZE_CHUNK_BYTES};
    for (int c = 0; c < 2; c++) {
        TokenizeStats st;
        double t0 = test_now_s();
        int rc = c == 1 ? tokenize_file_to_shards(tok, in, prefix, 20, 100000000, err, sizeof(err))
                        : tokenize_file_to_shards_ex(tok, in, prefix, 20, 100000000, chunks[c], &st, err, sizeof(err));
        double dt = test_now_s() - t0;
        CHECKF(rc == 0, "%s", err);
        if (c == 0) CHECK(st.documents[0] == 1130 && st.documents[1] == 59 && st.shards[0] == 1 && st.shards[1] == 1);
        const char* names[2] = {"train", "val"};
        for (int s = 0; s < 2; s++) {
            char ours[800], theirs[64];
            snprintf(ours, sizeof(ours), "%s_%s_000000.bin", prefix, names[s]);
            snprintf(theirs, sizeof(theirs), "data/kjv_%s.bin", names[s]);
            size_t na = 0, nb = 0;
            unsigned char* a = tok_read_file(ours, &na);
            unsigned char* b = tok_read_file(theirs, &nb);
            CHECKF(a && b && na == nb && memcmp(a, b, na) == 0, "chunk %zu: %s differs from %s", chunks[c], ours, theirs);
            free(a);
            free(b);
            remove(ours);
        }
        printf("    KJV file (%.2f MB) -> train + val shards, chunk %zu: %.3f s\n", k.bytes / 1e6, chunks[c], dt);
    }
    remove(in);
    tok_kjv_free(&k);
}

// Documents encoded in parallel (OpenMP, one worker per thread) give the same shards, byte for
// byte, as one thread: the KJV's 1,189 chapters (and some empty documents) at 1 and 2 threads,
// with llm.c's GPT-2 file and a 1 MiB chunk (every document in a batch: the stats must say so, two
// threads in the team) and a 4093-byte one (batches mixed with streamed documents), and with a
// tokenizer.json (the fuzz corpus's Llama 3 kind: every 4th chapter) and a 1 MiB chunk.
TEST(tok_tokenize_parallel_same) {
#ifndef _OPENMP
    TEST_SKIP("built without OpenMP: -tokenize runs on one thread");
#else
    Tokenizer* tok = tok_gpt2();
    TokKjv k;
    if (!tok || tok_kjv_load(tok, &k) != 0) {
        if (tok) tok_kjv_free(&k);
        return;
    }
    char ins[2][700], err[1024] = "";
    int ndocs[2] = {k.ndocs, 0};
    for (int kind = 0; kind < 2; kind++) {  // all chapters; every 4th for the (slower) tokenizer.json
        tok_path(ins[kind], sizeof(ins[kind]), kind ? "kjv_par4.txt" : "kjv_par.txt");
        FILE* f = fopen(ins[kind], "wb");
        CHECK(f != NULL);
        for (int i = 0; f && i < k.ndocs; i += kind ? 4 : 1) {
            if (i > 0) fputs(i % 7 ? "<|endoftext|>\n" : "<|endoftext|>\n<|endoftext|>\n", f);  // some empty documents too
            CHECK(fwrite(k.docs[i].text, 1, k.docs[i].len, f) == k.docs[i].len);
            if (kind) ndocs[1]++;
        }
        if (f) fclose(f);
    }
    tok_kjv_free(&k);
    Tokenizer hf;
    CHECKF(tokenizer_init(&hf, "test/fuzz_corpus/hfjson/llama3.json", err, sizeof(err)) == 0, "%s", err);
    int saved = omp_get_max_threads();
    const size_t chunks[2] = {TOKENIZE_CHUNK_BYTES, 4093};
    for (int kind = 0; kind < 2 && hf.hf; kind++) {
        Tokenizer* t = kind ? &hf : tok;
        for (int c = 0; c < 2 - kind; c++) {  // (the tokenizer.json at the 1 MiB chunk only: its path past the batch is the same)
            unsigned char* shard[2][2] = {{NULL, NULL}, {NULL, NULL}};
            size_t size[2][2] = {{0, 0}, {0, 0}};
            TokenizeStats st[2];
            for (int th = 0; th < 2; th++) {
                char prefix[700];
                snprintf(prefix, sizeof(prefix), "%s/par_%d", test_tmpdir(), th);
                omp_set_num_threads(th + 1);
                CHECKF(tokenize_file_to_shards_ex(t, ins[kind], prefix, 20, 300000, chunks[c], &st[th], err, sizeof(err)) == 0, "%s", err);
                for (int s = 0; s < 2; s++) {
                    char path[800];
                    snprintf(path, sizeof(path), "%s_%s_000000.bin", prefix, s ? "val" : "train");
                    shard[th][s] = tok_read_file(path, &size[th][s]);
                    remove(path);
                }
            }
            const char* name = kind ? "tokenizer.json (Llama 3 kind)" : "llm.c's GPT-2 file";
            for (int s = 0; s < 2; s++) {
                CHECKF(shard[0][s] && shard[1][s] && size[0][s] == size[1][s] && memcmp(shard[0][s], shard[1][s], size[0][s]) == 0,
                       "%s, chunk %zu: the %s shard differs between 1 and 2 threads", name, chunks[c], s ? "val" : "train");
                free(shard[0][s]);
                free(shard[1][s]);
            }
            int64_t docs = st[1].documents[0] + st[1].documents[1];
            CHECKF(docs == ndocs[kind] && st[0].batched == 0 && st[0].threads == 1 && st[1].threads == 2 &&
                   (c == 0 ? st[1].batched == docs : st[1].batched > 0 && st[1].batched < docs),
                   "%s, chunk %zu: %lld documents, %lld of them in parallel batches on %d threads (1 thread: %lld on %d)", name, chunks[c],
                   (long long)docs, (long long)st[1].batched, st[1].threads, (long long)st[0].batched, st[0].threads);
            printf("    %s, chunk %zu: the same shards at 1 and 2 threads; %lld of %lld documents encoded in parallel batches\n", name, chunks[c],
                   (long long)st[1].batched, (long long)docs);
        }
    }
    tokenizer_free(&hf);
    omp_set_num_threads(saved);
    remove(ins[0]);
    remove(ins[1]);
#endif
}

// Streaming a tokenizer.json text (tokenizer_hf_encode_part): at every cut of a random text,
// encoding text[0..cut) as "more follows" and then the rest gives the ids of the whole text, for
// each kind of the fuzz corpus (GPT-2, Llama 3, Qwen2 with NFC and a normalized added token,
// SmolLM2 with Digits), special tokens matched and not; and the carried part stays short (the
// text has a cut, a letter before a non-letter, every few atoms).
static const char* const tok_hf_atoms[] = {
    "The", " word", " don't", "'RE", "'S", "'\xC5\xBF", "ll", "\xC3\xA9t\xC3\xA9", "e\xCC\x81", "e\xCC\x81\xCC\xA3", "\xE1\x84\x80\xE1\x85\xA1",
    "\xEA\xB0\x80\xE1\x86\xA8", "\xE4\xB8\xAD\xE6\x96\x87", "\xE3\x80\x82", "\xF0\x9F\x98\x80", "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", "123", "4567",
    "\xD9\xA3\xD9\xA4", " ", "  ", "\n", "\n\n", "\t", "\r\n", "!", "?!", "(", "\xFF", "\xE2\x82", "\xCC\x81", "\xC2\xA0", "\xE2\x80\x8B",
    "\xE3\x80\x80", "<|endoftext|>", "<|begin_of_text|>", "<|im_start|>", "<think>", "<thi", "nk>", "<|begin_of", "_text|>", "<|",
    "\xE2\x89\xA0", "=\xCC\xB8", "a\xE0\xA4\xBE", "\xE0\xA4\x95\xE0\xA5\x8D",
};

TEST(tok_hf_encode_part_every_cut) {
    const char* kinds[4] = {"gpt2", "llama3", "qwen2", "smollm2"};
    uint64_t seed = 4242;
    size_t n = 0;
    unsigned char* text = (unsigned char*)malloc(1800);
    while (n < 1500) {
        uint64_t r = tok_rand(&seed);
        const char* a = tok_hf_atoms[(r >> 8) % (sizeof(tok_hf_atoms) / sizeof(tok_hf_atoms[0]))];
        memcpy(text + n, a, strlen(a));
        n += strlen(a);
    }
    for (int k = 0; k < 4; k++) {
        char path[200], err[1024];
        snprintf(path, sizeof(path), "test/fuzz_corpus/hfjson/%s.json", kinds[k]);
        Tokenizer tok;
        CHECKF(tokenizer_init(&tok, path, err, sizeof(err)) == 0, "%s", err);
        if (!tok.hf) continue;
        for (int m = 0; m < 2; m++) {
            tok.hf->match_specials = m;
            uint32_t *whole, *ids = NULL;
            size_t nwhole = tok_encode(&tok, text, n, &whole), nids = 0, cap = 0, carried = 0;
            int bad = 0;
            for (size_t cut = 0; cut <= n; cut++) {
                size_t used = 0;
                nids = 0;
                CHECK(tokenizer_encode_part(&tok, text, cut, 0, &used, &ids, &nids, &cap) == 0);
                CHECK(tokenizer_encode(&tok, text + used, n - used, &ids, &nids, &cap) == 0);
                if (used > cut || nids != nwhole || memcmp(ids, whole, nids * sizeof(uint32_t)) != 0) {
                    if (bad++ < 3) CHECKF(0, "%s (specials %s): cut at %zu (encoded up to %zu): ids differ from the whole text's", kinds[k],
                                         m ? "matched" : "as text", cut, used);
                }
                if (cut - used > carried) carried = cut - used;
            }
            CHECKF(bad == 0 && carried < 100, "%s: %d of %zu cuts differ; at most %zu bytes carried", kinds[k], bad, n + 1, carried);
            printf("    %s, special tokens %s: every cut of %zu bytes gives the whole text's %zu ids; at most %zu bytes carried\n", kinds[k], m ? "matched" : "as text", n, nwhole, carried);
            free(whole);
            free(ids);
        }
        tokenizer_free(&tok);
    }
    free(text);
}

// A document larger than -tokenize's buffer, through a tokenizer.json: the KJV's chapters joined
// by "\n" (one 4.3 MB document, no separator) through GPT-2 written as tokenizer.json, with a
// 4093-byte buffer, gives byte for byte the shard of llm.c's GPT-2 file (tiktoken's ids); and in a
// child, the same document four times over (17 MB) with a 1 MiB buffer, into one shard, raises the
// peak resident memory (VmHWM) by less than 12 MB (read whole, the text and its ids alone would
// take 35 MB; the shard is written as it fills, not held).
TEST(tok_tokenize_hf_streamed) {
    Tokenizer* g = tok_gpt2();
    TokKjv k;
    if (!g || tok_kjv_load(g, &k) != 0) {
        if (g) tok_kjv_free(&k);
        return;
    }
    char dir[700], in[700], big[700], pa[700], pb[700], err[1024] = "";
    tok_path(dir, sizeof(dir), "stream_gpt2_json");
    tok_path(in, sizeof(in), "stream_doc.txt");
    tok_path(big, sizeof(big), "stream_doc4.txt");
    tok_path(pa, sizeof(pa), "stream_ours");
    tok_path(pb, sizeof(pb), "stream_llmc");
    mkdir(dir, 0755);
    CHECKF(tokenizer_write_hf(g, dir, 1024, err, sizeof(err)) == 0, "%s", err);
    FILE* f = fopen(in, "wb");
    FILE* f4 = fopen(big, "wb");
    CHECK(f && f4);
    for (int r = 0; f && f4 && r < 4; r++)
        for (int i = 0; i < k.ndocs; i++) {
            if (r == 0) CHECK(fwrite(k.docs[i].text, 1, k.docs[i].len, f) == k.docs[i].len && fputc('\n', f) == '\n');
            CHECK(fwrite(k.docs[i].text, 1, k.docs[i].len, f4) == k.docs[i].len && fputc('\n', f4) == '\n');
        }
    if (f) fclose(f);
    if (f4) fclose(f4);
    tok_kjv_free(&k);
    Tokenizer h;
    CHECKF(tokenizer_init(&h, dir, err, sizeof(err)) == 0, "%s", err);
    if (!h.hf) return;
    TokenizeStats st;
    CHECKF(tokenize_file_to_shards_ex(&h, in, pa, 0, 100000000, 4093, &st, err, sizeof(err)) == 0, "%s", err);
    CHECK(st.documents[0] == 1 && st.bytes > 4000000);
    CHECKF(tokenize_file_to_shards(g, in, pb, 0, 100000000, err, sizeof(err)) == 0, "%s", err);
    char a[800], b[800];
    snprintf(a, sizeof(a), "%s_train_000000.bin", pa);
    snprintf(b, sizeof(b), "%s_train_000000.bin", pb);
    size_t na = 0, nb = 0;
    unsigned char* x = tok_read_file(a, &na);
    unsigned char* y = tok_read_file(b, &nb);
    CHECKF(x && y && na == nb && memcmp(x, y, na) == 0, "one %lld-byte document through tokenizer.json with a 4093-byte buffer: %zu shard bytes, "
           "llm.c's file %zu, %s", (long long)st.bytes, na, nb, x && y && na == nb ? "different ids" : "different lengths");
    printf("    one %.1f MB document, 4093-byte buffer: %lld ids, the same as llm.c's GPT-2 file + merges\n", st.bytes / 1e6, (long long)st.tokens[0]);
    free(x);
    free(y);
    remove(a);
    remove(b);
    // the peak memory, measured in a child (one thread: a single document is never in a batch)
    typedef struct { int rc; long rss_kb, hwm_kb; long long bytes, tokens; int shards; } Measured;
    int fd[2];
    CHECK(pipe(fd) == 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        Measured m = {-1, 0, 0, 0, 0, 0};
        TokenizeStats s4;
        char e2[512];
        m.rss_kb = tok_status_kb("VmRSS:");
        m.rc = tokenize_file_to_shards_ex(&h, big, pa, 0, 100000000, TOKENIZE_CHUNK_BYTES, &s4, e2, sizeof(e2));
        m.hwm_kb = tok_status_kb("VmHWM:");
        m.bytes = s4.bytes;
        m.tokens = s4.tokens[0];
        m.shards = s4.shards[0];
        ssize_t w = write(fd[1], &m, sizeof(m));
        _exit(w == (ssize_t)sizeof(m) ? 0 : 1);
    }
    close(fd[1]);
    Measured m;
    memset(&m, 0, sizeof(m));
    ssize_t r = pid > 0 ? read(fd[0], &m, sizeof(m)) : -1;
    close(fd[0]);
    int status = 0;
    if (pid > 0) waitpid(pid, &status, 0);
    CHECKF(pid > 0 && r == (ssize_t)sizeof(m) && WIFEXITED(status) && WEXITSTATUS(status) == 0 && m.rc == 0, "the measuring child failed");
    double grew = (m.hwm_kb - m.rss_kb) / 1024.0;
    printf("    one %.1f MB document (%lld ids, %d shard), 1 MiB buffer: VmHWM %.1f MB above VmRSS at the start\n", m.bytes / 1e6,
           m.tokens, m.shards, grew);
    CHECKF(m.bytes > 16000000 && m.shards == 1 && grew < 12.0, "peak memory grew by %.1f MB for a %lld-byte document (bound 12 MB)", grew, m.bytes);
    for (int i = 0; i < m.shards; i++) {
        snprintf(a, sizeof(a), "%s_train_%06d.bin", pa, i);
        remove(a);
    }
    remove(in);
    remove(big);
    tokenizer_free(&h);
}

// Every error: a one-line message naming the file or directory, nonzero return, and no file
// with the prefix left behind (not even a temporary one).
static void tok_expect_tokenize_error(Tokenizer* tok, const char* in, const char* prefix, const char* prefix_name, int val_every,
                                      int64_t shard_tokens, const char* names, const char* needle) {
    char err[1024] = "";
    int rc = tokenize_file_to_shards_ex(tok, in, prefix, val_every, shard_tokens, 7, NULL, err, sizeof(err));
    CHECKF(rc != 0, "tokenizing %s into %s should fail (%s)", in, prefix, needle);
    CHECKF(strchr(err, '\n') == NULL && strstr(err, names) != NULL, "message is not one line naming %s: %s", names, err);
    CHECKF(strstr(err, needle) != NULL, "message lacks '%s': %s", needle, err);
    CHECKF(tok_count_files(prefix_name) == 0, "files %s* left behind after: %s", prefix_name, err);
}

TEST(tok_tokenize_errors) {
    Tokenizer* tok = tok_gpt2();
    if (!tok) return;
    char in[700], empty[700], seps[700], prefix[700], nodir[700], notdir[700], dir[700];
    tok_path(in, sizeof(in), "in_err.txt");
    tok_path(empty, sizeof(empty), "in_empty.txt");
    tok_path(seps, sizeof(seps), "in_seps.txt");
    tok_path(prefix, sizeof(prefix), "err");
    tok_path(nodir, sizeof(nodir), "no_such_dir/err");
    tok_path(notdir, sizeof(notdir), "in_err.txt/err");
    tok_path(dir, sizeof(dir), "dir_err");
    const char* text = "one\n<|endoftext|>\ntwo two two two two\n<|endoftext|>\nthree\n";
    tok_write_file(in, text, strlen(text));
    tok_write_file(empty, "", 0);
    tok_write_file(seps, "<|endoftext|>\n<|endoftext|>\n", 28);
    CHECK(mkdir(dir, 0755) == 0);

    tok_expect_tokenize_error(tok, "test/no_such_input.txt", prefix, "err_", 0, 100, "test/no_such_input.txt", "cannot open");
    tok_expect_tokenize_error(tok, empty, prefix, "err_", 0, 100, empty, "is empty");
    tok_expect_tokenize_error(tok, dir, prefix, "err_", 0, 100, dir, "is a directory");
    tok_expect_tokenize_error(tok, seps, prefix, "err_", 0, 100, seps, "no text");
    tok_expect_tokenize_error(tok, in, nodir, "no_such_dir", 0, 100, "no_such_dir", "No such file");
    tok_expect_tokenize_error(tok, in, notdir, "in_err.txt_", 0, 100, "in_err.txt", "not a directory");
    tok_expect_tokenize_error(tok, in, prefix, "err_", 0, 0, in, "shard_tokens = 0");
    tok_expect_tokenize_error(tok, in, prefix, "err_", -1, 100, in, "val_every = -1");
    char slash[800];
    snprintf(slash, sizeof(slash), "%s/", dir);
    tok_expect_tokenize_error(tok, in, slash, "dir_err_", 0, 100, slash, "must name files");
    if (geteuid() != 0) {  // root writes into a 0555 directory anyway: checked only as a user
        char ro[800];
        snprintf(ro, sizeof(ro), "%s/x", dir);
        CHECK(chmod(dir, 0555) == 0);
        tok_expect_tokenize_error(tok, in, ro, "dir_err_", 0, 100, dir, "not writable");
        CHECK(chmod(dir, 0755) == 0);
    }
    // a write that fails after shards were written: the val shard's name is taken by a directory;
    // the train shards written before it (3 tokens each) must be removed again
    char blocker[800];
    snprintf(blocker, sizeof(blocker), "%s_val_000000.bin", prefix);
    CHECK(mkdir(blocker, 0755) == 0);
    char err[1024] = "";
    int rc = tokenize_file_to_shards_ex(tok, in, prefix, 2, 3, 7, NULL, err, sizeof(err));
    CHECKF(rc != 0 && strstr(err, blocker) != NULL && strchr(err, '\n') == NULL, "expected a write error naming %s: %s", blocker, err);
    CHECKF(tok_count_files("err_train_") == 0, "train shards left behind after: %s", err);
    CHECKF(tok_count_files("err_val_") == 1, "besides the blocking directory, val files left behind");
    CHECK(rmdir(blocker) == 0);
    // no merges: refused before anything is read
    Tokenizer vocab_only;
    CHECK(tokenizer_init(&vocab_only, TOK_VOCAB, err, sizeof(err)) == 0);
    tok_expect_tokenize_error(&vocab_only, in, prefix, "err_", 0, 100, in, "no merges");
    tokenizer_free(&vocab_only);
    // and the same input succeeds when nothing is in the way
    CHECKF(tokenize_file_to_shards_ex(tok, in, prefix, 2, 3, 7, NULL, err, sizeof(err)) == 0, "%s", err);
    CHECK(tok_count_files("err_train_") >= 2 && tok_count_files("err_val_") >= 1);
}

// -----------------------------------------------------------------------------------------------
// Hugging Face tokenizer.json (tokenizer_init_hf): against `tokenizers` itself, and bad files

// The python with `tokenizers`: $ZT_TOKENIZERS_PYTHON, else $ZT_TIKTOKEN_PYTHON (.ci/run installs
// tokenizers==0.21.0 into that venv), else python3. NULL if none of them imports it.
static const char* tok_hf_python(void) {
    static char found[1024] = "";
    static int tried = 0;
    if (tried) return found[0] ? found : NULL;
    tried = 1;
    const char* cands[3] = {getenv("ZT_TOKENIZERS_PYTHON"), getenv("ZT_TIKTOKEN_PYTHON"), "python3"};
    for (int i = 0; i < 3; i++) {
        if (!cands[i] || !*cands[i]) continue;
        char cmd[1200];
        snprintf(cmd, sizeof(cmd), "%s -c 'import tokenizers' 2>/dev/null", cands[i]);
        if (test_run_cmd(cmd, NULL, 0) == 0) {
            snprintf(found, sizeof(found), "%s", cands[i]);
            return found;
        }
    }
    return NULL;
}

// A file of records (int32 n, then n items of `item` bytes; n = -1: none) read whole.
typedef struct { unsigned char* data; size_t size, at; } TokRecs;

static int tok_recs_next(TokRecs* r, size_t item, const unsigned char** p, int32_t* n) {
    if (r->at + 4 > r->size) return 0;
    memcpy(n, r->data + r->at, 4);
    r->at += 4;
    size_t bytes = *n > 0 ? (size_t)*n * item : 0;
    if (r->at + bytes > r->size) return 0;
    *p = r->data + r->at;
    r->at += bytes;
    return 1;
}

// The fixtures of dev/hf_tokenizer_fixtures.py, made once per run in the scratch directory (the
// KJV text written from the committed shards, chapters separated by "<|endoftext|>" lines).
// Returns the directory, or NULL (with *skip set when `tokenizers` is missing).
static const char* tok_hf_fixtures(int* skip) {
    static char dir[700] = "";
    static int state = 0;  // 0 not tried, 1 made, -1 failed
    *skip = 0;
    if (state == 1) return dir;
    if (state == -1) return NULL;
    state = -1;
    const char* py = tok_hf_python();
    if (!py) {
        *skip = 1;
        return NULL;
    }
    Tokenizer* tok = tok_gpt2();
    TokKjv k;
    if (!tok || tok_kjv_load(tok, &k) != 0) {
        if (tok) tok_kjv_free(&k);
        return NULL;
    }
    char kjv[700], cmd[3000], out[8192], done[800];
    tok_path(kjv, sizeof(kjv), "hf_kjv.txt");
    snprintf(dir, sizeof(dir), "%s/hf_fixtures", test_shared_dir()); // (made once for every worker of the run)
    snprintf(done, sizeof(done), "%s/DONE", dir);
    int lock = test_shared_lock("hf_fixtures");
    FILE* f = fopen(kjv, "wb");
    CHECK(f != NULL);
    if (!f) {
        tok_kjv_free(&k);
        if (lock >= 0) close(lock);
        return NULL;
    }
    for (int i = 0; i < k.ndocs; i++) {
        if (i > 0) fputs("<|endoftext|>\n", f);
        CHECK(fwrite(k.docs[i].text, 1, k.docs[i].len, f) == k.docs[i].len);
    }
    fclose(f);
    tok_kjv_free(&k);
    struct stat st;
    if (stat(done, &st) == 0) { // another worker made them
        if (lock >= 0) close(lock);
        state = 1;
        return dir;
    }
    snprintf(cmd, sizeof(cmd), "%s dev/hf_tokenizer_fixtures.py --kjv %s --out %s 2>&1", py, kjv, dir);
    double t0 = test_now_s();
    int rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 0, "dev/hf_tokenizer_fixtures.py failed:\n%s", out);
    if (rc == 0) { FILE* d = fopen(done, "w"); if (d) fclose(d); }
    if (lock >= 0) close(lock);
    if (rc != 0) return NULL;
    printf("    fixtures by tokenizers in %.1f s:\n%s", test_now_s() - t0, out);
    state = 1;
    return dir;
}

// One kind: the KJV through -tokenize (tokenize_file_to_shards, special tokens as text) against
// tokenizers' stream, then the hard cases (special tokens matched) and their round trip.
// Returns the number of ids compared.
static size_t tok_hf_check_kind(const char* dir, const char* kind, const char* expect_kind, int ignore_merges_off,
                                uint32_t want_V, int want_width) {
    char path[900], prefix[900], err[1024] = "";
    snprintf(path, sizeof(path), "%s/%s", dir, kind);
    Tokenizer tok;
    int rc = tokenizer_init(&tok, path, err, sizeof(err));
    CHECKF(rc == 0, "%s: %s", kind, err);
    if (rc != 0) return 0;
    CHECKF(tok.hf && tok.vocab_size == want_V && tok.eot_token >= 0, "%s: V = %u (want %u), document token %d", kind, tok.vocab_size, want_V,
           tok.eot_token);
    if (ignore_merges_off) {
        CHECK(tok.hf->ignore_merges == 1);
        tok.hf->ignore_merges = 0;
    }
    size_t compared = 0;
    // the KJV, as -tokenize writes it
    char kjv[700];
    tok_path(kjv, sizeof(kjv), "hf_kjv.txt");
    snprintf(prefix, sizeof(prefix), "%s/%s_shards", test_tmpdir(), expect_kind);
    double t0 = test_now_s();
    rc = tokenize_file_to_shards(&tok, kjv, prefix, 0, 100000000, err, sizeof(err));
    double dt = test_now_s() - t0;
    CHECKF(rc == 0, "%s: -tokenize: %s", kind, err);
    snprintf(path, sizeof(path), "%s_train_000000.bin", prefix);
    size_t ngot = 0, nwant = 0;
    int width = 0;
    uint32_t* got = rc == 0 ? tok_read_shard_w(path, &ngot, &width) : NULL;
    snprintf(path, sizeof(path), "%s/%s/kjv.ids", dir, expect_kind);
    uint32_t* want = (uint32_t*)tok_read_file(path, &nwant);
    nwant /= 4;
    if (got && want) {
        size_t i = 0;
        while (i < ngot && i < nwant && got[i] == want[i]) i++;
        CHECKF(ngot == nwant && i == ngot, "%s: KJV: %zu ids, tokenizers %zu; first difference at %zu (%u vs %u)", expect_kind, ngot, nwant, i,
               i < ngot ? got[i] : 0, i < nwant ? want[i] : 0);
        CHECKF(width == want_width, "%s: shard of %d-byte ids, want %d", kind, width, want_width);
        compared += ngot;
        printf("    %s: KJV %zu ids (%d-byte shard), %s tokenizers; -tokenize %.2f s (%.1f MB/s, all threads, loaded machine)\n", expect_kind, ngot,
               width, ngot == nwant && i == ngot ? "all equal to" : "DIFFERENT from", dt, 4.3 / dt);
    }
    snprintf(path, sizeof(path), "%s_train_000000.bin", prefix);
    remove(path);
    free(got);
    free(want);
    // the hard cases
    TokRecs cases = {NULL, 0, 0}, ids = {NULL, 0, 0}, norm = {NULL, 0, 0};
    snprintf(path, sizeof(path), "%s/hard.bin", dir);
    cases.data = tok_read_file(path, &cases.size);
    snprintf(path, sizeof(path), "%s/%s/hard.ids", dir, expect_kind);
    ids.data = tok_read_file(path, &ids.size);
    snprintf(path, sizeof(path), "%s/%s/hard.norm", dir, expect_kind);
    norm.data = tok_read_file(path, &norm.size);
    CHECK(cases.data && ids.data && norm.data);
    const unsigned char *c, *w, *nm;
    int32_t nc, nw, nn;
    int ncase = 0, bad = 0;
    while (cases.data && ids.data && norm.data && tok_recs_next(&cases, 1, &c, &nc) && tok_recs_next(&ids, 4, &w, &nw) &&
           tok_recs_next(&norm, 1, &nm, &nn)) {
        uint32_t* e = NULL;
        size_t ne = 0, cap = 0;
        CHECK(tokenizer_encode(&tok, c, (size_t)nc, &e, &ne, &cap) == 0);
        if (nw >= 0 && (ne != (size_t)nw || (ne && memcmp(e, w, ne * 4) != 0))) {
            bad++;
            printf("    %s: hard case %d (%.*s): %zu ids, tokenizers %d\n", expect_kind, ncase, nc > 60 ? 60 : nc, (const char*)c, ne, nw);
        }
        compared += nw > 0 ? (size_t)nw : 0;
        size_t at = 0;  // decoding gives back the (normalized) input
        int same = 1;
        for (size_t i = 0; i < ne && same; i++) {
            int len;
            const char* s = tokenizer_decode(&tok, e[i], &len);
            same = at + (size_t)len <= (size_t)nn && memcmp(nm + at, s, (size_t)len) == 0;
            at += (size_t)len;
        }
        CHECKF(same && at == (size_t)nn, "%s: hard case %d does not decode to its %s text", expect_kind, ncase, tok.hf->nfc ? "NFC" : "input");
        free(e);
        ncase++;
    }
    CHECKF(bad == 0 && ncase >= 30, "%s: %d of %d hard cases differ from tokenizers", expect_kind, bad, ncase);
    free(cases.data);
    free(ids.data);
    free(norm.data);
    tokenizer_free(&tok);
    return compared;
}

// Each kind's ids equal tokenizers' on the whole KJV (> 1 M ids each) and on every hard case;
// decoding gives back the input (NFC of it for qwen2); llama3 (V = 70,000) writes uint32 shards;
// and the same llama3 file without ignore_merges gives tokenizers' other ids, which differ.
TEST(tok_hf_vs_tokenizers) {
    int skip;
    const char* dir = tok_hf_fixtures(&skip);
    if (skip) TEST_SKIP("needs a python with tokenizers (ZT_TOKENIZERS_PYTHON or ZT_TIKTOKEN_PYTHON; .ci/run installs tokenizers==0.21.0)");
    if (!dir) return;
    size_t n = 0;
    n += tok_hf_check_kind(dir, "gpt2", "gpt2", 0, 6000, 2);
    n += tok_hf_check_kind(dir, "llama3", "llama3", 0, 70500, 4);
    n += tok_hf_check_kind(dir, "qwen2", "qwen2", 0, 6000, 2);
    n += tok_hf_check_kind(dir, "smollm2", "smollm2", 0, 6000, 2);
    n += tok_hf_check_kind(dir, "llama3", "llama3_noignore", 1, 70500, 4);
    // ignore_merges matters: the two llama3 streams differ
    char a[900], b[900];
    snprintf(a, sizeof(a), "%s/llama3/kjv.ids", dir);
    snprintf(b, sizeof(b), "%s/llama3_noignore/kjv.ids", dir);
    size_t na = 0, nb = 0;
    unsigned char* x = tok_read_file(a, &na);
    unsigned char* y = tok_read_file(b, &nb);
    CHECKF(x && y && (na != nb || memcmp(x, y, na) != 0), "llama3: ignore_merges on and off give the same KJV ids");
    printf("    %zu ids compared with tokenizers; llama3 KJV: %zu ids with ignore_merges, %zu without\n", n, na / 4, nb / 4);
    free(x);
    free(y);
}

// Llama 3's and Qwen2's split patterns one rule at a time: the pieces `tokenizers` 0.21 gives
// (Split(Regex, Isolated).pre_tokenize_str, run once by hand; "|" separates pieces).
TEST(tok_hf_pieces_by_hand) {
    static const struct { const char* text; const char* llama3; const char* qwen2; } cases[] = {
        {"I'M fine", "I|'M| fine", "I|'M| fine"},                       // contractions in any case
        {"they'LL", "they|'LL", "they|'LL"},
        {"don't'S", "don|'t|'S", "don|'t|'S"},
        {"1234567", "123|456|7", "1|2|3|4|5|6|7"},                      // \p{N}{1,3} against \p{N}
        {"12abc3", "12|abc|3", "1|2|abc|3"},
        {"  hello", " | hello", " | hello"},                            // a space before letters joins them
        {"\t\tword", "\t|\tword", "\t|\tword"},                         // so does a tab: [^\r\n\p{L}\p{N}]?
        {"(word) ", "(word|)| ", "(word|)| "},
        {"x!!\n\ny", "x|!!\n\n|y", "x|!!\n\n|y"},                         // punctuation takes the newlines after it
        {"a \n\n b", "a| \n\n| b", "a| \n\n| b"},                        // \s*[\r\n]+: up to the last newline
        {"foo\r\n\r\nbar", "foo|\r\n\r\n|bar", "foo|\r\n\r\n|bar"},
        {"a  b   c", "a| | b|  | c", "a| | b|  | c"},                    // \s+(?!\S): all but the last space
        {"   ", "   ", "   "},                                          // spaces at the end: one piece
        {"\xc3\xa9\xcc\x81x", "\xc3\xa9|\xcc\x81x", "\xc3\xa9|\xcc\x81x"},          // a combining mark is "other": x's prefix
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (int k = 0; k < 2; k++) {
            const unsigned char* t = (const unsigned char*)cases[i].text;
            size_t n = strlen(cases[i].text), at = 0;
            char got[256] = "";
            size_t g = 0;
            while (at < n && g + 8 < sizeof(got)) {
                size_t len = tokenizer_piece_length_cl100k(t + at, n - at, k ? 1 : 3);
                if (at) got[g++] = '|';
                memcpy(got + g, t + at, len);
                g += len;
                at += len;
            }
            got[g] = 0;
            const char* want = k ? cases[i].qwen2 : cases[i].llama3;
            CHECKF(!strcmp(got, want), "%s: \"%s\" cut as \"%s\", tokenizers: \"%s\"", k ? "Qwen2" : "Llama 3", cases[i].text, got, want);
        }
    }
}

// A small valid tokenizer.json built here: the 256 byte tokens, "a b" -> "ab", "ab c" -> "abc",
// an added special token; `edit` replaces the first occurrence of from[i] with to[i].
static char* tok_hf_json(const char* const* from, const char* const* to, int nedit) {
    size_t cap = 1 << 16;
    char* s = (char*)malloc(cap);
    size_t n = 0;
    n += (size_t)snprintf(s + n, cap - n, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": "
                          "[{\"id\": 258, \"content\": \"<|endoftext|>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
                          "\"normalized\": false, \"special\": true}], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
                          "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}, \"post_processor\": null, "
                          "\"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
                          "\"ignore_merges\": false, \"vocab\": {");
    for (int b = 0; b < 256; b++) {
        unsigned char sp[4];
        int l = tokenizer_put_utf8(sp, tokenizer_byte_char(b));
        const char* esc = sp[0] == '"' ? "\\\"" : sp[0] == '\\' ? "\\\\" : NULL;
        n += (size_t)snprintf(s + n, cap - n, "\"%s%.*s\": %d, ", esc ? esc : "", esc ? 0 : l, (const char*)sp, b);
    }
    n += (size_t)snprintf(s + n, cap - n, "\"ab\": 256, \"abc\": 257}, \"merges\": [\"a b\", \"ab c\"]}}");
    for (int i = 0; i < nedit; i++) {
        char* at = strstr(s, from[i]);
        CHECKF(at != NULL, "edit '%s' not found", from[i]);
        if (!at) continue;
        size_t lf = strlen(from[i]), lt = strlen(to[i]);
        memmove(at + lt, at + lf, strlen(at + lf) + 1);
        memcpy(at, to[i], lt);
    }
    return s;
}

static void tok_hf_expect_error(const char* name, const char* from, const char* to, const char* needle) {
    char path[700], err[1024] = "";
    tok_path(path, sizeof(path), "bad_tokenizer.json");
    const char* f1[1] = {from};
    const char* t1[1] = {to};
    char* js = tok_hf_json(f1, t1, from ? 1 : 0);
    if (!strcmp(name, "truncated")) js[strlen(js) / 2] = 0;
    tok_write_file(path, js, strlen(js));
    free(js);
    Tokenizer tok;
    int rc = tokenizer_init(&tok, path, err, sizeof(err));
    CHECKF(rc != 0, "%s: a bad tokenizer.json loaded", name);
    CHECKF(strchr(err, '\n') == NULL && strstr(err, path) != NULL && strstr(err, needle) != NULL, "%s: message lacks the file or '%s': %s",
           name, needle, err);
    CHECK(tok.token_table == NULL && tok.hf == NULL && tok.enc.pairs == NULL);
    if (rc == 0) tokenizer_free(&tok);
}

// The small file loads and encodes by hand-checkable rules; every refusal names file and field.
TEST(tok_hf_reader) {
    char path[700], err[1024] = "";
    tok_path(path, sizeof(path), "small_tokenizer.json");
    char* js = tok_hf_json(NULL, NULL, 0);
    tok_write_file(path, js, strlen(js));
    free(js);
    Tokenizer tok;
    CHECKF(tokenizer_init(&tok, path, err, sizeof(err)) == 0, "%s", err);
    if (!tok.hf) return;
    CHECK(tok.vocab_size == 259 && tok.eot_token == 258 && tok.enc.nmerges == 2);
    uint32_t* ids = NULL;
    size_t n = tok_encode(&tok, "abc ab<|endoftext|>abcab", 24, &ids);
    const uint32_t want[] = {257, (uint32_t)tok.enc.byte_id[' '], 256, 258, 257, 256};  // " ab": Ġ, ab (no merge "Ġ a")
    CHECKF(n == 6 && memcmp(ids, want, sizeof(want)) == 0, "%zu ids: %u %u %u %u", n, n > 0 ? ids[0] : 0, n > 1 ? ids[1] : 0, n > 2 ? ids[2] : 0,
           n > 3 ? ids[3] : 0);
    free(ids);
    tok.hf->match_specials = 0;  // -tokenize's way: the special token is text
    n = tok_encode(&tok, "<|endoftext|>", 13, &ids);
    CHECK(n == 13 || n > 1);
    free(ids);
    tokenizer_free(&tok);
    // a directory holding tokenizer.json and tokenizer_config.json (eos_token names the document token)
    char d[700], p2[800];
    tok_path(d, sizeof(d), "hf_dir");
    mkdir(d, 0755);
    snprintf(p2, sizeof(p2), "%s/tokenizer.json", d);
    const char* f1[2] = {"\"content\": \"<|endoftext|>\"", "{\"type\": \"ByteLevel\"}"};
    const char* t1[2] = {"\"content\": \"<eos>\"", "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}"};
    js = tok_hf_json(f1, t1, 2);
    tok_write_file(p2, js, strlen(js));
    free(js);
    snprintf(p2, sizeof(p2), "%s/tokenizer_config.json", d);
    tok_write_file(p2, "{\"eos_token\": {\"content\": \"<eos>\"}}", 35);
    CHECKF(tokenizer_init(&tok, d, err, sizeof(err)) == 0, "%s", err);
    CHECK(tok.hf && tok.eot_token == 258);
    tokenizer_free(&tok);
    // -e DIR's tokenizer: taken while -tokenizer is at its default, never over an explicit one
    char buf[800];
    CHECK(!strcmp(tokenizer_for_model(TOKENIZER_DEFAULT_PATH, TOKENIZER_DEFAULT_PATH, d, buf, sizeof(buf)), d));
    CHECK(!strcmp(tokenizer_for_model("mine.json", TOKENIZER_DEFAULT_PATH, d, buf, sizeof(buf)), "mine.json"));
    CHECK(!strcmp(tokenizer_for_model(TOKENIZER_DEFAULT_PATH, TOKENIZER_DEFAULT_PATH, "d12", buf, sizeof(buf)), TOKENIZER_DEFAULT_PATH));

    // the fuzz corpus (test/fuzz_corpus/hfjson): one file of each kind, all loading
    const char* corpus[4] = {"gpt2", "llama3", "qwen2", "smollm2"};
    for (int k = 0; k < 4; k++) {
        char cp[200];
        snprintf(cp, sizeof(cp), "test/fuzz_corpus/hfjson/%s.json", corpus[k]);
        CHECKF(tokenizer_init(&tok, cp, err, sizeof(err)) == 0, "%s", err);
        if (!tok.hf) continue;
        const TokenizerHF* h = tok.hf;
        if (k == 0) CHECK(h->nsteps == 1 && h->steps[0] == TOKENIZER_STEP_GPT2 && !h->nfc && !h->ignore_merges);
        if (k == 1) CHECK(h->nsteps == 1 && h->steps[0] == TOKENIZER_STEP_LLAMA3 && h->ignore_merges && h->bos_token >= 0 && tok.eot_token == h->bos_token);
        if (k == 2) CHECK(h->nsteps == 1 && h->steps[0] == TOKENIZER_STEP_QWEN2 && h->nfc && h->nadded == 3);
        if (k == 3) CHECK(h->nsteps == 2 && h->steps[0] == TOKENIZER_STEP_DIGITS && h->steps[1] == TOKENIZER_STEP_GPT2);
        tokenizer_free(&tok);
    }

    tok_hf_expect_error("truncated", NULL, NULL, "JSON:");
    tok_hf_expect_error("unigram", "\"type\": \"BPE\"", "\"type\": \"Unigram\"", "model.type \"Unigram\" is not supported");
    tok_hf_expect_error("wordpiece", "\"type\": \"BPE\"", "\"type\": \"WordPiece\"", "model.type \"WordPiece\"");
    tok_hf_expect_error("nfkc", "\"normalizer\": null", "\"normalizer\": {\"type\": \"NFKC\"}", "normalizer type \"NFKC\"");
    tok_hf_expect_error("metaspace", "\"pre_tokenizer\": {\"type\": \"ByteLevel\"", "\"pre_tokenizer\": {\"type\": \"Metaspace\"",
                        "pre_tokenizer.replacement is not one character");
    tok_hf_expect_error("metaspace_bytelevel", "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}",
                        "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Metaspace\", \"replacement\": \"_\"}, {\"type\": \"ByteLevel\"}]}",
                        "Metaspace with other steps");
    tok_hf_expect_error("byte_fallback", "\"unk_token\": null", "\"unk_token\": null, \"byte_fallback\": true", "model.byte_fallback with a ByteLevel");
    tok_hf_expect_error("replace_regex", "\"normalizer\": null", "\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \" +\"}, \"content\": \" \"}",
                        "a Regex pattern is not supported");
    tok_hf_expect_error("sp_no_unk", "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}",
                        "\"pre_tokenizer\": null", "neither model.byte_fallback nor model.unk_token");
    tok_hf_expect_error("sp_decoder", "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}",
                        "\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"_\", \"prepend_scheme\": \"sometimes\"}",
                        "prepend_scheme is not");
    tok_hf_expect_error("pattern", "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}",
                        "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+\"}, "
                        "\"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}",
                        "pretokenizers[0].pattern.Regex \"\\s+\"");
    tok_hf_expect_error("after_bytelevel", "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}",
                        "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"}, {\"type\": \"Digits\"}]}",
                        "pre_tokenizer.pretokenizers[1] (Digits) comes after ByteLevel");
    tok_hf_expect_error("merge", "\"ab c\"", "\"ab zz\"", "model.merges[1]");
    tok_hf_expect_error("merge_form", "\"ab c\"", "\"ab  c\"", "model.merges[1]");
    tok_hf_expect_error("decoder", "\"decoder\": {\"type\": \"ByteLevel\"}", "\"decoder\": {\"type\": \"Metaspace\"}", "decoder type \"Metaspace\"");
    tok_hf_expect_error("lstrip", "\"lstrip\": false", "\"lstrip\": 1", "added_tokens[0].lstrip is not true or false");
    tok_hf_expect_error("single_word", "\"single_word\": false", "\"single_word\": true", "added_tokens[0].single_word");
    tok_hf_expect_error("dropout", "\"dropout\": null", "\"dropout\": 0.1", "model.dropout");
    tok_hf_expect_error("no_bytelevel", "\"pre_tokenizer\": {\"type\": \"ByteLevel\"", "\"pre_tokenizer\": {\"type\": \"Digits\"",
                        "no ByteLevel");
    tok_hf_expect_error("byte_missing", "\"a\": 97, ", "", "no token for byte 0x61");
    tok_hf_expect_error("post", "\"post_processor\": null", "\"post_processor\": {\"type\": \"BertProcessing\"}", "post_processor type \"BertProcessing\"");
    tok_hf_expect_error("vocab_id", "\"abc\": 257", "\"abc\": \"x\"", "model.vocab[\"abc\"]");
    tok_hf_expect_error("duplicate", "\"ab\": 256", "\"a\": 256", "duplicate key");  // a 258-key object: checked sorted
    tok_hf_expect_error("added_id", "\"id\": 258", "\"id\": 256", "model.vocab gives to \"ab\"");
}

// -export-hf's tokenizer files: GPT-2 (llm.c's file + merges) written as tokenizer.json, vocab.json,
// merges.txt and tokenizer_config.json; our reader encodes the KJV with it exactly as with llm.c's
// file, and transformers' AutoTokenizer ($ZT_HF_PYTHON, transformers 4.47.1) loads the directory
// and gives the same ids on the hard cases (GPT2TokenizerFast from tokenizer.json, and the slow
// GPT2Tokenizer from vocab.json + merges.txt).
TEST(tok_hf_export_gpt2) {
    Tokenizer* g = tok_gpt2();
    TokKjv k;
    if (!g || tok_kjv_load(g, &k) != 0) {
        if (g) tok_kjv_free(&k);
        return;
    }
    char dir[700], err[1024] = "";
    tok_path(dir, sizeof(dir), "gpt2_export");
    mkdir(dir, 0755);
    CHECKF(tokenizer_write_hf(g, dir, 1024, err, sizeof(err)) == 0, "%s", err);
    Tokenizer h;
    CHECKF(tokenizer_init(&h, dir, err, sizeof(err)) == 0, "%s", err);
    if (!h.hf) {
        tok_kjv_free(&k);
        return;
    }
    CHECK(h.vocab_size == 50257 && h.eot_token == 50256 && h.enc.nmerges == g->enc.nmerges);
    int bad = 0;
    size_t total = 0;
    h.hf->match_specials = 0;
    for (int i = 0; i < k.ndocs; i++) {
        uint32_t* ids = NULL;
        size_t n = tok_encode(&h, k.docs[i].text, k.docs[i].len, &ids);
        bad += n != k.docs[i].nids || memcmp(ids, k.docs[i].ids, n * 4) != 0;
        total += n;
        free(ids);
    }
    CHECKF(bad == 0, "%d KJV chapters encode differently through the exported tokenizer.json", bad);
    printf("    exported GPT-2 tokenizer.json read back: %zu KJV ids equal to llm.c's file + merges\n", total);
    tokenizer_free(&h);
    tok_kjv_free(&k);
    const char* py = getenv("ZT_HF_PYTHON");
    char probe[1200], cmd[3000], out[1 << 16];
    snprintf(probe, sizeof(probe), "%s -c 'import transformers' 2>/dev/null", py && *py ? py : "python3");
    if (test_run_cmd(probe, NULL, 0) != 0) TEST_SKIP("needs a python with transformers (ZT_HF_PYTHON; .ci/run makes a venv: transformers==4.47.1)");
    // the hard cases that are UTF-8, through both of transformers' GPT-2 tokenizers, against ours
    const char* script =
        "import ast, sys\n"
        "from transformers import AutoTokenizer\n"
        "d = sys.argv[1]\n"
        "fast = AutoTokenizer.from_pretrained(d)\n"
        "slow = AutoTokenizer.from_pretrained(d, use_fast=False)\n"
        "assert type(fast).__name__ == 'GPT2TokenizerFast' and type(slow).__name__ == 'GPT2Tokenizer', (type(fast), type(slow))\n"
        "for line in open('test/fixtures/hf_hard_cases.txt', encoding='utf-8'):\n"
        "    if not line.strip() or line.startswith('#'): continue\n"
        "    s = ast.literal_eval(line)\n"
        "    try: s.encode('utf-8')\n"
        "    except UnicodeEncodeError: continue\n"
        "    a, b = fast.encode(s), slow.encode(s)\n"
        "    print(' '.join(map(str, a)) if a == b else 'SLOW-FAST-DIFFER')\n";
    char spath[800];
    tok_path(spath, sizeof(spath), "export_check.py");
    tok_write_file(spath, script, strlen(script));
    snprintf(cmd, sizeof(cmd), "%s %s %s 2>&1", py && *py ? py : "python3", spath, dir);
    int rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 0, "AutoTokenizer on the export failed:\n%s", out);
    if (rc != 0) return;
    // ours on the same cases: the llm.c tokenizer, "<|endoftext|>" matched as transformers does
    Tokenizer h2;
    CHECKF(tokenizer_init(&h2, dir, err, sizeof(err)) == 0, "%s", err);
    FILE* f = fopen("test/fixtures/hf_hard_cases.txt", "r");
    char* line_out = out;
    int ncase = 0, differ = 0;
    char line[4096];
    while (f && h2.hf && fgets(line, sizeof(line), f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        // the case's bytes: Python decodes the literal; we take them from the fixtures' hard.bin when made,
        // else skip the comparison of this case (only the count is checked then)
        ncase++;
    }
    if (f) fclose(f);
    int skip;
    const char* fx = tok_hf_fixtures(&skip);
    if (fx && h2.hf) {  // hard.bin holds the cases' bytes
        char path[900];
        snprintf(path, sizeof(path), "%s/hard.bin", fx);
        TokRecs cases = {NULL, 0, 0};
        cases.data = tok_read_file(path, &cases.size);
        const unsigned char* c;
        int32_t nc;
        int i = 0;
        while (cases.data && tok_recs_next(&cases, 1, &c, &nc)) {
            int utf8 = 1;
            for (int32_t p = 0; p < nc;) {
                uint32_t cp;
                int l = tokenizer_utf8(c + p, (size_t)(nc - p), &cp);
                if (!l) { utf8 = 0; break; }
                p += l;
            }
            if (!utf8) continue;
            uint32_t* ids = NULL;
            size_t n = tok_encode(&h2, c, (size_t)nc, &ids);
            char mine[1 << 14];
            size_t m = 0;
            mine[0] = 0;
            for (size_t q = 0; q < n && m + 16 < sizeof(mine); q++) m += (size_t)snprintf(mine + m, sizeof(mine) - m, "%s%u", q ? " " : "", ids[q]);
            free(ids);
            char* nl = strchr(line_out, '\n');
            if (!nl) { differ++; break; }
            *nl = 0;
            if (strcmp(line_out, mine) != 0) {
                differ++;
                printf("    case %d: transformers %.80s\n             ours         %.80s\n", i, line_out, mine);
            }
            line_out = nl + 1;
            i++;
        }
        free(cases.data);
        CHECKF(differ == 0 && i > 20, "%d of %d hard cases differ between transformers and us on the exported GPT-2 tokenizer", differ, i);
        printf("    exported GPT-2 tokenizer: transformers' AutoTokenizer (fast and slow) = ours on %d hard cases\n", i);
    }
    tokenizer_free(&h2);
    CHECK(ncase > 20);
}

// -export-hf of a Llama-family model run with a Llama 3-style tokenizer.json, and with a Qwen2-style
// one (NFC): the fixtures of dev/hf_tokenizer_fixtures.py (llama3: Split + ByteLevel(use_regex
// false), ignore_merges, special added tokens, TemplateProcessing BOS, V = 70,500; qwen2: NFC, the
// merges in pair form), each given as tokenizer.json alone (no tokenizer_config.json beside it, as a
// user may bring one). The trainer (-e llama-tiny with the tokenizer's vocabulary, one step) writes
// tokenizer.json + tokenizer_config.json beside the weights; dev/hf_tokenizer_export_check.py
// (transformers 4.47.1, $ZT_HF_PYTHON) loads the directory with AutoTokenizer and
// AutoModelForCausalLM: its ids on the KJV (special tokens as text, as -tokenize; Llama 3 only, the
// KJV gives NFC nothing to do) equal our -tokenize of the KJV through the exported directory,
// its ids on the hard cases equal ours
// (the post-processor's BOS first), and config.json's bos/eos_token_id are the tokenizer's, as
// generation_config.json's are. Llama 3's model has one row fewer than the tokenizer's ids (its last
// id an added token, as Llama 3.2's <|image|>): the files are copied all the same, and said.
TEST(tok_hf_export_llama3) {
    const char* py = getenv("ZT_HF_PYTHON") && *getenv("ZT_HF_PYTHON") ? getenv("ZT_HF_PYTHON") : "python3";
    char probe[1200];
    snprintf(probe, sizeof(probe), "%s -c 'import transformers, torch, safetensors' 2>/dev/null", py);
    if (test_run_cmd(probe, NULL, 0) != 0) TEST_SKIP("needs a python with transformers (ZT_HF_PYTHON; .ci/run makes a venv: transformers==4.47.1)");
    int skip;
    const char* fx = tok_hf_fixtures(&skip);
    if (skip) TEST_SKIP("needs a python with tokenizers for the fixtures (ZT_TOKENIZERS_PYTHON or ZT_TIKTOKEN_PYTHON; .ci/run installs tokenizers==0.21.0)");
    if (!fx) return;
    char self[PATH_MAX];  // this binary, run as the trainer
    ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
    CHECK(sl > 0);
    if (sl <= 0) return;
    self[sl] = 0;
    // (Llama 3's model has one row fewer than its tokenizer has ids: the last, an added token, as Llama 3.2 ships <|image|>)
    static const struct { const char* kind; uint32_t V; const char* eos; } kinds[] = {{"llama3", 70499, "<|end_of_text|>"}, {"qwen2", 6000, "<|endoftext|>"}};
    char pycmd[8000], kjv[700], err[1024] = "";
    static char out[1 << 16];
    tok_path(kjv, sizeof(kjv), "hf_kjv.txt");
    snprintf(pycmd, sizeof(pycmd), "%s dev/hf_tokenizer_export_check.py test/fixtures/hf_hard_cases.txt", py);
    int exported[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        char src[700], dir[700], shard[700], cmd[6000], path[900];
        snprintf(src, sizeof(src), "%s/export_src_%s", test_tmpdir(), kinds[k].kind);
        snprintf(dir, sizeof(dir), "%s/export_%s", test_tmpdir(), kinds[k].kind);
        snprintf(shard, sizeof(shard), "%s/export_train_%s.bin", test_tmpdir(), kinds[k].kind);
        snprintf(cmd, sizeof(cmd), "rm -rf %s %s && mkdir -p %s && cp %s/%s/tokenizer.json %s/", src, dir, src, fx, kinds[k].kind, src);
        CHECK(test_run_cmd(cmd, NULL, 0) == 0);
        uint16_t toks[256];  // a training shard: KJV ids modulo the vocabulary
        FILE* f = fopen("data/kjv_val.bin", "rb");
        CHECK(f && fseek(f, 1024, SEEK_SET) == 0 && fread(toks, 2, 256, f) == 256);
        if (f) fclose(f);
        for (int i = 0; i < 256; i++) toks[i] = (uint16_t)(toks[i] % kinds[k].V);
        CHECK(write_token_shard(shard, toks, 256, err, sizeof(err)) == 0);
        snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=2 %s --train -device cpu -e llama-tiny -layers 1 -vocab %u -tokenizer %s/tokenizer.json -i %s -j '' "
                 "-b 1 -t 32 -x 1 -v 0 -s 0 -export-dtype bf16 -export-hf %s 2>&1", self, kinds[k].V, src, shard, dir);
        int rc = test_run_cmd(cmd, out, sizeof(out));
        CHECKF(rc == 0 && !strstr(out, "warning: -export-hf"), "%s: training and -export-hf failed or warned:\n%s", kinds[k].kind, out);
        if (rc != 0) continue;
        CHECKF(k == 1 || strstr(out, "id(s) from 70499 on are added tokens beyond the model's 70499 rows"), "%s: the id beyond the model not said:\n%s",
               kinds[k].kind, out);
        // the generated tokenizer_config.json names the tokenizer's own BOS and EOS
        snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
        size_t n = 0;
        char* cfg = (char*)tok_read_file(path, &n);
        CHECKF(cfg != NULL, "%s: no tokenizer_config.json written", kinds[k].kind);
        if (!cfg) continue;
        cfg[n] = 0;
        char want[300];
        snprintf(want, sizeof(want), "\"eos_token\": \"%s\"", kinds[k].eos);
        CHECKF(strstr(cfg, "\"tokenizer_class\": \"PreTrainedTokenizerFast\"") && strstr(cfg, want) &&
               strstr(cfg, k == 0 ? "\"bos_token\": \"<|begin_of_text|>\"" : "\"bos_token\": null"), "%s: tokenizer_config.json: %s", kinds[k].kind, cfg);
        free(cfg);
        snprintf(pycmd + strlen(pycmd), sizeof(pycmd) - strlen(pycmd), " %s %s/export_theirs_%s %s", dir, test_tmpdir(), kinds[k].kind, k == 0 ? kjv : "-");
        exported[k] = 1;
    }
    if (!exported[0] || !exported[1]) return;
    // transformers' ids, both directories in one python start
    strncat(pycmd, " 2>&1", sizeof(pycmd) - strlen(pycmd) - 1);
    double t0 = test_now_s();
    int rc = test_run_cmd(pycmd, out, sizeof(out));
    CHECKF(rc == 0, "dev/hf_tokenizer_export_check.py failed:\n%s", out);
    if (rc != 0) return;
    printf("    transformers (%.1f s):\n%s", test_now_s() - t0, out);
    for (int k = 0; k < 2; k++) {
        char dir[700], prefix[700], path[900];
        snprintf(dir, sizeof(dir), "%s/export_%s", test_tmpdir(), kinds[k].kind);
        snprintf(prefix, sizeof(prefix), "%s/export_ours_%s", test_tmpdir(), kinds[k].kind);
        // ours: the KJV through -tokenize with the exported directory as the tokenizer (Llama 3 only:
        // the KJV is ASCII, Qwen2's NFC has nothing to do there; its hard cases have)
        Tokenizer tok;
        CHECKF(tokenizer_init(&tok, dir, err, sizeof(err)) == 0, "%s: %s", kinds[k].kind, err);
        if (!tok.hf) continue;
        if (k == 0) {
            size_t ngot = 0, nwant = 0;
            CHECK(tokenize_file_to_shards(&tok, kjv, prefix, 0, 100000000, err, sizeof(err)) == 0);
            snprintf(path, sizeof(path), "%s_train_000000.bin", prefix);
            uint32_t* got = tok_read_shard(path, &ngot);
            remove(path);
            snprintf(path, sizeof(path), "%s/export_theirs_%s.kjv", test_tmpdir(), kinds[k].kind);
            uint32_t* theirs = (uint32_t*)tok_read_file(path, &nwant);
            nwant /= 4;
            size_t i = 0;
            while (got && theirs && i < ngot && i < nwant && got[i] == theirs[i]) i++;
            CHECKF(got && theirs && ngot == nwant && i == ngot && ngot > 1000000, "%s: KJV: ours %zu ids, transformers %zu; first difference at %zu",
                   kinds[k].kind, ngot, nwant, i);
            printf("    %s: KJV through -tokenize: %zu ids, transformers' the same\n", kinds[k].kind, ngot);
            free(got);
            free(theirs);
        }
        // the hard cases, special tokens matched, the post-processor's BOS first
        TokRecs cases = {NULL, 0, 0}, ids = {NULL, 0, 0};
        snprintf(path, sizeof(path), "%s/hard.bin", fx);
        cases.data = tok_read_file(path, &cases.size);
        snprintf(path, sizeof(path), "%s/export_theirs_%s.hard", test_tmpdir(), kinds[k].kind);
        ids.data = tok_read_file(path, &ids.size);
        const unsigned char *c, *w;
        int32_t nc, nw;
        int ncase = 0, bad = 0;
        while (cases.data && ids.data && tok_recs_next(&cases, 1, &c, &nc) && tok_recs_next(&ids, 4, &w, &nw)) {
            if (nw < 0) continue;  // not UTF-8: transformers cannot take it
            uint32_t* e = NULL;
            size_t ne = 0, cap = 0;
            uint32_t bos = (uint32_t)tok.hf->bos_token;
            if (tok.hf->bos_token >= 0) CHECK(tokenizer_append(&e, &ne, &cap, &bos, 1) == 0);
            CHECK(tokenizer_encode(&tok, c, (size_t)nc, &e, &ne, &cap) == 0);
            if (ne != (size_t)nw || memcmp(e, w, ne * 4) != 0) {
                bad++;
                printf("    %s: hard case %.*s: ours %zu ids, transformers %d\n", kinds[k].kind, nc > 60 ? 60 : nc, (const char*)c, ne, nw);
            }
            free(e);
            ncase++;
        }
        CHECKF(bad == 0 && ncase > 25, "%s: %d of %d hard cases differ between transformers and us", kinds[k].kind, bad, ncase);
        printf("    %s: AutoTokenizer on the export = ours on %s%d hard cases; AutoModelForCausalLM loads it\n", kinds[k].kind, k == 0 ? "the KJV and " : "",
               ncase);
        free(cases.data);
        free(ids.data);
        tokenizer_free(&tok);
    }
}

#endif // ZT_TEST_TOKENIZER_H

// -----------------------------------------------------------------------------------------------
// SentencePiece-style BPE in tokenizer.json (Mistral, Llama 2, Phi-3): the committed structural
// fixtures everywhere, Mistral's own models where sentencepiece and transformers are installed

// Each ids record of `ids` equals our encoding of the same record of `cases` (special tokens
// matched: match = 1; as text: 0). Returns the number of cases that differ; *n: cases, *nids: ids.
static int tok_sp_compare(Tokenizer* tok, const char* cases_path, const char* ids_path, int match, int quiet, int* n, size_t* nids) {
    TokRecs cases = {NULL, 0, 0}, ids = {NULL, 0, 0};
    cases.data = tok_read_file(cases_path, &cases.size);
    ids.data = tok_read_file(ids_path, &ids.size);
    CHECKF(cases.data && ids.data, "cannot read %s or %s", cases_path, ids_path);
    const unsigned char *c, *w;
    int32_t nc, nw;
    int bad = 0;
    *n = 0;
    tok->hf->match_specials = match;
    while (cases.data && ids.data && tok_recs_next(&cases, 1, &c, &nc) && tok_recs_next(&ids, 4, &w, &nw)) {
        uint32_t* e = NULL;
        size_t ne = 0, cap = 0;
        CHECK(tokenizer_encode(tok, c, (size_t)nc, &e, &ne, &cap) == 0);
        if (ne != (size_t)nw || (ne && memcmp(e, w, ne * 4) != 0)) {
            if (bad++ < 3 && !quiet) printf("    %s: case %d (%.*s): %zu ids, want %d\n", ids_path, *n, nc > 40 ? 40 : nc, (const char*)c, ne, nw);
        }
        *nids += (size_t)nw;
        free(e);
        (*n)++;
    }
    tok->hf->match_specials = 1;
    free(cases.data);
    free(ids.data);
    return bad;
}

// The five pipelines of dev/sp_structural_fixtures.py (legacy Prepend + Replace, Metaspace first /
// always with split / never, Replace alone), a tiny vocabulary with byte_fallback: each file is
// read as SentencePiece-style with its steps, and gives tokenizers 0.21's ids on every case
// (leading spaces, special tokens, CJK and emoji through <0xXX>, control bytes, ▁ in the text).
TEST(tok_sp_structural) {
    static const struct { const char* kind; int nnorms, metaspace, scheme, split; } kinds[] = {
        {"legacy", 2, 0, 0, 0}, {"first", 0, 1, TOKENIZER_PREPEND_FIRST, 0}, {"always_split", 0, 1, TOKENIZER_PREPEND_ALWAYS, 1},
        {"never", 0, 1, TOKENIZER_PREPEND_NEVER, 0}, {"replace_only", 1, 0, 0, 0}};
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        char path[300], ids[300], err[1024] = "";
        snprintf(path, sizeof(path), "test/fixtures/sp/%s/tokenizer.json", kinds[k].kind);
        snprintf(ids, sizeof(ids), "test/fixtures/sp/%s/cases.ids", kinds[k].kind);
        Tokenizer tok;
        CHECKF(tokenizer_init(&tok, path, err, sizeof(err)) == 0, "%s", err);
        if (!tok.hf) continue;
        const TokenizerHF* h = tok.hf;
        CHECKF(h->sp && h->byte_fallback && h->unk_id == 0 && h->fuse_unk && h->strip_start == 1 && h->nnorms == kinds[k].nnorms &&
               h->metaspace == kinds[k].metaspace && (!h->metaspace || (h->prepend_scheme == kinds[k].scheme && h->meta_split == kinds[k].split)),
               "%s: the steps read are not the file's", kinds[k].kind);
        int n = 0;
        size_t nids = 0;
        int bad = tok_sp_compare(&tok, "test/fixtures/sp/cases.bin", ids, 1, 0, &n, &nids);
        CHECKF(bad == 0 && n >= 10, "%s: %d of %d cases differ from tokenizers", kinds[k].kind, bad, n);
        // "<0xE6>" decodes to the byte (ByteFallback), "▁" to a space (Replace)
        int64_t fb = tokenizer_hf_lookup(h, (const unsigned char*)"<0xE6>", 6), me = tokenizer_hf_lookup(h, (const unsigned char*)"\xe2\x96\x81", 3);
        int l1 = 0, l2 = 0;
        const char* d1 = fb >= 0 ? tokenizer_decode(&tok, (uint32_t)fb, &l1) : "";
        const char* d2 = me >= 0 ? tokenizer_decode(&tok, (uint32_t)me, &l2) : "";
        CHECKF(l1 == 1 && (unsigned char)d1[0] == 0xE6 && l2 == 1 && d2[0] == ' ', "%s: <0xE6> and ▁ do not decode to their bytes", kinds[k].kind);
        printf("    %s: %d cases, %zu ids, all equal to tokenizers\n", kinds[k].kind, n, nids);
        tokenizer_free(&tok);
    }
}

// Added tokens that take the whitespace beside them (lstrip / rstrip: Phi-3's <|end|>, <|user|>,
// <|assistant|> are rstrip), in dev/sp_structural_fixtures.py's strip kind (the legacy pipeline plus
// such tokens, special and not): tokenizers 0.21's ids on 20 cases (Unicode whitespace, U+001C which
// is not, runs before and after, tokens back to back) with special tokens matched and as text
// (-tokenize's); the cases as one document through -tokenize's streaming at chunks of 5..64 bytes, and
// from a view cut at every byte, equal its whole encoding (a cut never splits a token from the
// whitespace it takes). A token that strips
// and is matched in the normalized text is refused, naming it.
TEST(tok_sp_added_strip) {
    Tokenizer tok;
    char err[1024] = "";
    CHECKF(tokenizer_init(&tok, "test/fixtures/sp/strip/tokenizer.json", err, sizeof(err)) == 0, "%s", err);
    if (!tok.hf) return;
    int nstrip = 0;
    for (int a = 0; a < tok.hf->nadded; a++) nstrip += tok.hf->added[a].lstrip + tok.hf->added[a].rstrip;
    CHECKF(nstrip == 8, "%d lstrip/rstrip flags read, the file has 8", nstrip);
    for (int match = 1; match >= 0; match--) {
        int n = 0;
        size_t nids = 0;
        int bad = tok_sp_compare(&tok, "test/fixtures/sp/strip_cases.bin", match ? "test/fixtures/sp/strip/cases.ids" : "test/fixtures/sp/strip/cases_text.ids",
                                 match, 0, &n, &nids);
        CHECKF(bad == 0 && n == 20, "special tokens %s: %d of %d cases differ from tokenizers", match ? "matched" : "as text", bad, n);
    }
    // streamed as -tokenize streams a document: every chunk size gives the whole text's ids
    TokRecs cases = {NULL, 0, 0};
    cases.data = tok_read_file("test/fixtures/sp/strip_cases.bin", &cases.size);
    char in[700], prefix[700], path[800];
    tok_path(in, sizeof(in), "strip_doc.txt");
    tok_path(prefix, sizeof(prefix), "strip_doc");
    FILE* f = fopen(in, "wb");
    const unsigned char* c;
    int32_t nc;
    size_t doc_len = 0;
    char* doc = (char*)malloc(cases.size + 64);
    while (cases.data && doc && tok_recs_next(&cases, 1, &c, &nc)) { memcpy(doc + doc_len, c, (size_t)nc); doc_len += (size_t)nc; doc[doc_len++] = '\n'; }
    CHECK(f && doc && fwrite(doc, 1, doc_len, f) == doc_len);
    if (f) fclose(f);
    uint32_t* want = NULL;
    size_t nwant = 0, wcap = 0;
    uint32_t D = (uint32_t)tok.eot_token;
    CHECK(tokenizer_append(&want, &nwant, &wcap, &D, 1) == 0);
    tok.hf->match_specials = 0;  // (-tokenize reads special tokens as text)
    CHECK(tokenizer_encode(&tok, (const unsigned char*)doc, doc_len, &want, &nwant, &wcap) == 0);
    tok.hf->match_specials = 1;
    const size_t chunks[] = {5, 6, 7, 9, 13, 16, 23, 64};
    int bad = 0;
    for (size_t k = 0; k < sizeof(chunks) / sizeof(chunks[0]); k++) {
        TokenizeStats st;
        CHECKF(tokenize_file_to_shards_ex(&tok, in, prefix, 0, 100000000, chunks[k], &st, err, sizeof(err)) == 0, "chunk %zu: %s", chunks[k], err);
        snprintf(path, sizeof(path), "%s_train_000000.bin", prefix);
        size_t ngot = 0;
        uint32_t* got = tok_read_shard(path, &ngot);
        if (!got || ngot != nwant || memcmp(got, want, ngot * 4) != 0) {
            size_t at = 0;
            while (got && at < ngot && at < nwant && got[at] == want[at]) at++;
            if (bad++ < 2) {
                printf("    chunk %zu: %zu ids, whole text %zu; first difference at id %zu, after:", chunks[k], ngot, nwant, at);
                for (size_t q = at > 4 ? at - 4 : 0; q < at + 3 && q < nwant; q++) { int l; const char* t = tokenizer_decode(&tok, want[q], &l); printf(" [%.*s]", l, t); }
                printf("\n      streamed:");
                for (size_t q = at > 4 ? at - 4 : 0; got && q < at + 3 && q < ngot; q++) { int l; const char* t = tokenizer_decode(&tok, got[q], &l); printf(" [%.*s]", l, t); }
                printf("\n");
            }
        }
        free(got);
        remove(path);
    }
    CHECKF(bad == 0, "%d chunk sizes give other ids than the whole text", bad);
    // and the document cut at every byte: the part up to the cut the streaming takes, then the rest
    tok.hf->match_specials = 0;
    int bad_cut = 0;
    for (size_t v = 1; v < doc_len; v++) {
        uint32_t* o = NULL;
        size_t no = 0, oc = 0, used = 0;
        CHECK(tokenizer_hf_encode_part(&tok, (const unsigned char*)doc, v, &used, &o, &no, &oc) == 0 &&
              tokenizer_hf_encode_final(&tok, (const unsigned char*)doc + used, doc_len - used, &o, &no, &oc) == 0);
        bad_cut += no + 1 != nwant || memcmp(o, want + 1, no * 4) != 0;
        free(o);
    }
    tok.hf->match_specials = 1;
    CHECKF(bad_cut == 0, "%d of %zu views of the document give other ids than the whole", bad_cut, doc_len - 1);
    free(want);
    free(doc);
    free(cases.data);
    tokenizer_free(&tok);
    // refused: stripping a token matched in the normalized text (under a normalizer)
    size_t jl = 0;
    char* js = (char*)tok_read_file("test/fixtures/sp/strip/tokenizer.json", &jl);
    char* m = js ? strstr(js, "\"content\":\"<sep>\"") : NULL;
    char* nz = m ? strstr(m, "\"normalized\":false") : NULL;
    CHECK(nz != NULL);
    if (nz) {
        memcpy(nz + 13, "true ", 5);  // "normalized":true (one byte of space left where "false" was)
        char bad_path[700];
        tok_path(bad_path, sizeof(bad_path), "strip_normalized.json");
        tok_write_file(bad_path, (const unsigned char*)js, jl);
        Tokenizer t2;
        CHECKF(tokenizer_init(&t2, bad_path, err, sizeof(err)) != 0 && strstr(err, "<sep>") && strstr(err, "normalized"), "accepted, or: %s", err);
    }
    free(js);
    if (!g_test_failed) printf("    20 cases (special tokens matched and as text) equal to tokenizers; streamed at 8 chunk sizes and from every cut = whole; a normalized strip refused\n");
}

// The python with sentencepiece, transformers and mistral-common: $ZT_SP_PYTHON (.ci/run makes
// /tmp/zt-sp), else NULL.
static const char* tok_sp_python(void) {
    const char* py = getenv("ZT_SP_PYTHON");
    if (!py || !*py) return NULL;
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "%s -c 'import sentencepiece, transformers, mistral_common' 2>/dev/null", py);
    return test_run_cmd(cmd, NULL, 0) == 0 ? py : NULL;
}

// Mistral's own SentencePiece models (mistral-common's tokenizer.model.v1, Mistral 7B v0.3's v3)
// through transformers 4.47.1's converter with legacy true and false (dev/sp_tokenizer_fixtures.py):
// for v1 legacy and v3 not legacy, -tokenize of every sixth KJV chapter (199 documents) equals
// tokenizers' ids, whole and streamed through a 4,093-byte buffer (the whole KJV, all four kinds:
// docs/tokenizers.md, measured once); for all four, every hard case (43 fixed, 1,000 random) equals tokenizers (special
// tokens matched and as text) and decodes to tokenizers' decode, and every cut of a text gives the
// whole text's ids; against sentencepiece itself: legacy true equals it everywhere, legacy false
// differs where a text starts with a space (counted, printed).
TEST(tok_sp_vs_mistral) {
    const char* py = tok_sp_python();
    if (!py) TEST_SKIP("needs ZT_SP_PYTHON: a python with sentencepiece==0.2.0, transformers==4.47.1, protobuf, mistral-common (.ci/run makes /tmp/zt-sp)");
    Tokenizer* g = tok_gpt2();
    TokKjv k;
    if (!g || tok_kjv_load(g, &k) != 0) {
        if (g) tok_kjv_free(&k);
        return;
    }
    char kjv[700], dir[700], cmd[3000], out[8192], path[900], prefix[900], err[1024] = "";
    tok_path(kjv, sizeof(kjv), "sp_kjv.txt");
    tok_path(dir, sizeof(dir), "sp_fixtures");
    FILE* f = fopen(kjv, "wb");
    CHECK(f != NULL);
    for (int i = 0; f && i < k.ndocs; i += 6) {  // every sixth chapter (0.7 MB): the whole KJV is over this test's share of the time budget
        if (i > 0) fputs("<|endoftext|>\n", f);
        CHECK(fwrite(k.docs[i].text, 1, k.docs[i].len, f) == k.docs[i].len);
    }
    if (f) fclose(f);
    tok_kjv_free(&k);
    snprintf(cmd, sizeof(cmd), "RAYON_NUM_THREADS=1 %s dev/sp_tokenizer_fixtures.py --kjv %s --out %s 2>&1", py, kjv, dir);  // (one thread: make test's workers are busy)
    double t0 = test_now_s();
    int rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 0, "dev/sp_tokenizer_fixtures.py failed:\n%s", out);
    if (rc != 0) return;
    printf("    fixtures by transformers' converter, tokenizers and sentencepiece in %.1f s:\n%s", test_now_s() - t0, out);
    const char* kinds[4] = {"v1_legacy", "v1", "v3_legacy", "v3"};
    for (int q = 0; q < 4; q++) {
        snprintf(path, sizeof(path), "%s/%s", dir, kinds[q]);
        Tokenizer tok;
        CHECKF(tokenizer_init(&tok, path, err, sizeof(err)) == 0, "%s: %s", kinds[q], err);
        if (!tok.hf) continue;
        int legacy = strstr(kinds[q], "legacy") != NULL;
        CHECKF(tok.hf->sp && tok.hf->sp_cut && tok.eot_token == 1 && tok.vocab_size == (q < 2 ? 32000u : 32768u) &&
               (legacy ? tok.hf->nnorms == 2 && !tok.hf->metaspace : !tok.hf->nnorms && tok.hf->metaspace && tok.hf->prepend_scheme == TOKENIZER_PREPEND_FIRST),
               "%s: not read as the converter wrote it", kinds[q]);
        // the KJV, as -tokenize writes it (whole chapters, then streamed through a 4,093-byte buffer)
        snprintf(path, sizeof(path), "%s/%s/kjv.ids", dir, kinds[q]);
        size_t nwant = 0, nspm = 0;
        struct stat kst;
        uint32_t* want = stat(path, &kst) == 0 ? (uint32_t*)tok_read_file(path, &nwant) : NULL;  // (--kjv-kinds: v1_legacy, v3)
        CHECK(want || (q != 0 && q != 3));
        snprintf(path, sizeof(path), "%s/%s/kjv.spm.ids", dir, kinds[q]);
        uint32_t* spmids = want ? (uint32_t*)tok_read_file(path, &nspm) : NULL;
        nwant /= 4, nspm /= 4;
        for (int streamed = 0; streamed < 2 && want; streamed++) {
            snprintf(prefix, sizeof(prefix), "%s/sp_%s_%d", test_tmpdir(), kinds[q], streamed);
            TokenizeStats st;
            rc = tokenize_file_to_shards_ex(&tok, kjv, prefix, 0, 100000000, streamed ? 4093 : TOKENIZE_CHUNK_BYTES, &st, err, sizeof(err));
            CHECKF(rc == 0, "%s: -tokenize: %s", kinds[q], err);
            snprintf(path, sizeof(path), "%s_train_000000.bin", prefix);
            size_t ngot = 0;
            uint32_t* got = rc == 0 ? tok_read_shard(path, &ngot) : NULL;
            size_t i = 0;
            while (got && i < ngot && i < nwant && got[i] == want[i]) i++;
            CHECKF(got && ngot == nwant && i == ngot, "%s%s: KJV: %zu ids, tokenizers %zu; first difference at %zu", kinds[q], streamed ? " (streamed)" : "",
                   ngot, nwant, i);
            if (!streamed) {
                size_t same = 0;  // sentencepiece's stream: the same length? the same ids?
                for (size_t j = 0; j < nwant && j < nspm; j++) same += want[j] == spmids[j];
                CHECKF(!legacy || (nspm == nwant && same == nwant), "%s: KJV: tokenizers and sentencepiece differ", kinds[q]);
                printf("    %s: KJV %zu ids, all equal to tokenizers (whole and streamed); sentencepiece: %zu ids, %zu in place equal\n", kinds[q], ngot,
                       nspm, same);
            }
            remove(path);
            free(got);
        }
        free(want);
        free(spmids);
        // the hard cases: tokenizers (specials matched, and as text), sentencepiece, decoding
        char cases[900], ids[900];
        snprintf(cases, sizeof(cases), "%s/hard.bin", dir);
        int n = 0;
        size_t nids = 0;
        snprintf(ids, sizeof(ids), "%s/%s/hard.ids", dir, kinds[q]);
        CHECKF(tok_sp_compare(&tok, cases, ids, 1, 0, &n, &nids) == 0, "%s: hard cases (special tokens matched) differ from tokenizers", kinds[q]);
        snprintf(ids, sizeof(ids), "%s/%s/hard.plain.ids", dir, kinds[q]);
        CHECKF(tok_sp_compare(&tok, cases, ids, 0, 0, &n, &nids) == 0, "%s: hard cases (special tokens as text) differ from tokenizers", kinds[q]);
        snprintf(ids, sizeof(ids), "%s/%s/hard.spm.ids", dir, kinds[q]);
        int spm_bad = tok_sp_compare(&tok, cases, ids, 0, !legacy, &n, &nids);  // (legacy false: the leading-space cases differ)
        CHECKF(!legacy || spm_bad == 0, "%s: %d hard cases differ from sentencepiece", kinds[q], spm_bad);
        CHECKF(n >= 1000, "%s: %d hard cases, want the 43 fixed and 1,000 random ones", kinds[q], n);
        TokRecs c = {NULL, 0, 0}, d = {NULL, 0, 0};
        c.data = tok_read_file(cases, &c.size);
        snprintf(path, sizeof(path), "%s/%s/hard.dec", dir, kinds[q]);
        d.data = tok_read_file(path, &d.size);
        const unsigned char *cp, *dp;
        int32_t nc, nd;
        int dec_bad = 0;
        tok.hf->match_specials = 0;
        while (c.data && d.data && tok_recs_next(&c, 1, &cp, &nc) && tok_recs_next(&d, 1, &dp, &nd)) {
            uint32_t* e = NULL;
            size_t ne = tok_encode(&tok, cp, (size_t)nc, &e), at = 0;
            int same = 1, strip = tokenizer_strip_start(&tok);
            for (size_t i = 0; i < ne && same; i++) {  // the tokens' bytes, less the leading spaces the decoder strips
                int len;
                const char* s = tokenizer_decode(&tok, e[i], &len);
                for (; strip > 0 && len > 0 && s[0] == ' '; strip--) s++, len--;
                strip = 0;
                same = at + (size_t)len <= (size_t)nd && memcmp(dp + at, s, (size_t)len) == 0;
                at += (size_t)len;
            }
            dec_bad += !(same && at == (size_t)nd);
            free(e);
        }
        tok.hf->match_specials = 1;
        CHECKF(dec_bad == 0, "%s: %d hard cases do not decode to tokenizers' decode", kinds[q], dec_bad);
        free(c.data);
        free(d.data);
        printf("    %s: %d hard cases (%zu ids in three streams) equal to tokenizers, decoded alike; sentencepiece differs on %d\n", kinds[q], n,
               nids, spm_bad);
        // every cut of a text with leading spaces, special tokens and byte fallback gives the whole text's ids
        static const char text[] = "  In the beginning <s>God</s>created [INST] the heaven [/INST]  and the earth.\n 漢字 😀 \x01  And the "
                                   "earth was without form,   and void; ▁and darkness was upon the face of the deep.  ";
        size_t tn = sizeof(text) - 1;
        for (int m = 0; m < 2; m++) {
            tok.hf->match_specials = m;
            uint32_t *whole, *e = NULL;
            size_t nwhole = tok_encode(&tok, text, tn, &whole), ne = 0, cap = 0;
            int bad = 0;
            for (size_t cut = 0; cut <= tn; cut++) {
                size_t used = 0;
                ne = 0;
                CHECK(tokenizer_encode_part(&tok, (const unsigned char*)text, cut, 0, &used, &e, &ne, &cap) == 0);
                CHECK(tokenizer_encode(&tok, (const unsigned char*)text + used, tn - used, &e, &ne, &cap) == 0);
                bad += used > cut || ne != nwhole || memcmp(e, whole, ne * 4) != 0;
            }
            CHECKF(bad == 0, "%s (specials %s): %d of %zu cuts give other ids than the whole text", kinds[q], m ? "matched" : "as text", bad, tn + 1);
            free(whole);
            free(e);
        }
        tok.hf->match_specials = 1;
        tokenizer_free(&tok);
    }
}
