// safetensors.h — the safetensors file format (Hugging Face), read and written, and the small
// JSON parser its header needs.
//
// A safetensors file is: u64 little-endian N, then N bytes of JSON, then the data:
//     {"__metadata__": {"format": "pt"},
//      "wte.weight": {"dtype": "F32", "shape": [50257, 768], "data_offsets": [0, 154389504]}, ...}
// data_offsets are [begin, end) byte offsets relative to the first byte after the header.
// (https://github.com/huggingface/safetensors, "Format").
//
// Why our own JSON parser: the header is data from outside, read before anything else, and it
// needs only objects, arrays, strings, integers and a few floats (config.json). A Debian C library
// (cJSON, jansson) would add a build dependency to a program that today needs only a compiler,
// and would still leave every check below to us (offsets, overlaps, duplicate keys, sizes). The
// parser is ~200 lines, strict (RFC 8259: no comments, no trailing commas, no NaN, valid UTF-8,
// duplicate keys refused), bounded (depth 64, input size capped by the caller), and tested case
// by case in test/test_hf.h.
//
// Everything here returns 0 on success and -1 with a message in err (naming the file and, for a
// tensor, its name); nothing exits, so the loader can be tested and fuzzed in-process.
//
// defines: Json, json_parse, json_get, json_free, StDtype, StTensor, StFile, st_open, st_find,
//          st_get, st_close, st_dtype_name, st_write_header, f16_to_f32, f32_to_f16
//
// May call: fileio.h (zt_open_read: regular files only) and the C library.
#ifndef ZT_SAFETENSORS_H
#define ZT_SAFETENSORS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include "fileio.h" // defines: zt_open_read, zt_fopen_read, zt_strerror (regular files only)

__attribute__((format(printf, 3, 4))) static int st_err(char* err, size_t errlen, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

// ----------------------------------------------------------------------------
// JSON: parsed into a flat array of nodes; children are linked lists of node indices.

typedef enum { JSON_NULL, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;
#define JSON_MAX_DEPTH 64

typedef struct {
    JsonType type;
    const char* key;   // for a member of an object: its key (decoded, NUL-terminated); else NULL
    int first, next;   // first child / next sibling (-1: none)
    int count;         // children of an array or object
    double num;        // JSON_NUMBER
    int is_int;        // JSON_NUMBER written as an integer that fits int64 (no fraction, no exponent)
    int64_t i;         // its value when is_int
    const char* str;   // JSON_STRING: decoded, NUL-terminated (may contain \u0000 as a NUL: see len)
    int64_t len;       // JSON_STRING: decoded length in bytes
} JsonNode;

typedef struct {
    JsonNode* nodes;
    int n, cap;
    char* strs;        // every decoded string, back to back (never longer than the input)
    size_t slen;
    // parser state
    const char* start;
    const char* p;
    const char* end;
    char* err;
    size_t errlen;
} Json;

static int json_fail(Json* j, const char* what) {
    return st_err(j->err, j->errlen, "JSON: %s at byte %lld", what, (long long)(j->p - j->start));
}

static void json_ws(Json* j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int json_node(Json* j, JsonType t) {
    if (j->n == j->cap) {
        int cap = j->cap ? 2 * j->cap : 64;
        JsonNode* nn = (JsonNode*)realloc(j->nodes, sizeof(JsonNode) * cap);
        if (!nn) return -1;
        j->nodes = nn;
        j->cap = cap;
    }
    JsonNode* n = &j->nodes[j->n];
    memset(n, 0, sizeof(*n));
    n->type = t;
    n->first = n->next = -1;
    return j->n++;
}

static int json_hex4(const char* s, unsigned* out) {
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

// Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid (overlong, surrogate, > U+10FFFF).
static int utf8_valid_len(const unsigned char* s, const unsigned char* end) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (n == 0 || c > 0xF4 || s + n > end) return 0;
    for (int k = 1; k < n; k++) if ((s[k] & 0xC0) != 0x80) return 0;
    unsigned cp = n == 2 ? (c & 0x1F) << 6 | (s[1] & 0x3F)
                : n == 3 ? (c & 0x0F) << 12 | (s[1] & 0x3F) << 6 | (s[2] & 0x3F)
                         : (c & 0x07) << 18 | (s[1] & 0x3F) << 12 | (s[2] & 0x3F) << 6 | (s[3] & 0x3F);
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return 0; // overlong
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
    return n;
}

// A string at j->p (the opening quote); its decoded bytes go to the string arena.
static int json_string(Json* j, const char** out, int64_t* outlen) {
    j->p++; // "
    char* dst = j->strs + j->slen;
    char* w = dst;
    while (1) {
        if (j->p >= j->end) return json_fail(j, "unterminated string");
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') { j->p++; break; }
        if (c < 0x20) return json_fail(j, "control character in a string");
        if (c == '\\') {
            if (j->p + 1 >= j->end) return json_fail(j, "unterminated escape");
            char e = j->p[1];
            j->p += 2;
            switch (e) {
            case '"': *w++ = '"'; break;
            case '\\': *w++ = '\\'; break;
            case '/': *w++ = '/'; break;
            case 'b': *w++ = '\b'; break;
            case 'f': *w++ = '\f'; break;
            case 'n': *w++ = '\n'; break;
            case 'r': *w++ = '\r'; break;
            case 't': *w++ = '\t'; break;
            case 'u': {
                unsigned cp;
                if (j->end - j->p < 4 || json_hex4(j->p, &cp)) return json_fail(j, "bad \\u escape");
                j->p += 4;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return json_fail(j, "lone low surrogate in \\u escape");
                if (cp >= 0xD800 && cp <= 0xDBFF) { // a high surrogate must be followed by a low one
                    unsigned lo;
                    if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || json_hex4(j->p + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                        return json_fail(j, "lone high surrogate in \\u escape");
                    j->p += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                // UTF-8: at most 4 bytes, and the escape was at least 6, so the arena cannot overflow
                if (cp < 0x80) *w++ = (char)cp;
                else if (cp < 0x800) { *w++ = (char)(0xC0 | cp >> 6); *w++ = (char)(0x80 | (cp & 0x3F)); }
                else if (cp < 0x10000) { *w++ = (char)(0xE0 | cp >> 12); *w++ = (char)(0x80 | (cp >> 6 & 0x3F)); *w++ = (char)(0x80 | (cp & 0x3F)); }
                else { *w++ = (char)(0xF0 | cp >> 18); *w++ = (char)(0x80 | (cp >> 12 & 0x3F)); *w++ = (char)(0x80 | (cp >> 6 & 0x3F)); *w++ = (char)(0x80 | (cp & 0x3F)); }
                break;
            }
            default: j->p -= 2; return json_fail(j, "unknown escape");
            }
            continue;
        }
        int n = utf8_valid_len((const unsigned char*)j->p, (const unsigned char*)j->end);
        if (n == 0) return json_fail(j, "invalid UTF-8 in a string");
        memcpy(w, j->p, n);
        w += n;
        j->p += n;
    }
    *w++ = 0;
    *out = dst;
    *outlen = (int64_t)(w - dst - 1);
    j->slen += (size_t)(w - dst);
    return 0;
}

static int json_number(Json* j, int node) {
    const char* s = j->p;
    const char* q = s;
    if (q < j->end && *q == '-') q++;
    if (q >= j->end || *q < '0' || *q > '9') return json_fail(j, "bad number");
    if (*q == '0') q++;
    else while (q < j->end && *q >= '0' && *q <= '9') q++;
    int is_int = 1;
    if (q < j->end && *q == '.') {
        is_int = 0; q++;
        if (q >= j->end || *q < '0' || *q > '9') return json_fail(j, "bad number (digits after '.')");
        while (q < j->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < j->end && (*q == 'e' || *q == 'E')) {
        is_int = 0; q++;
        if (q < j->end && (*q == '+' || *q == '-')) q++;
        if (q >= j->end || *q < '0' || *q > '9') return json_fail(j, "bad number (exponent)");
        while (q < j->end && *q >= '0' && *q <= '9') q++;
    }
    char buf[64];
    size_t n = (size_t)(q - s);
    if (n >= sizeof(buf)) return json_fail(j, "number too long");
    memcpy(buf, s, n);
    buf[n] = 0;
    JsonNode* nd = &j->nodes[node];
    nd->num = strtod(buf, NULL);
    if (is_int) { // exact int64, or not an integer for our purposes
        int neg = buf[0] == '-';
        uint64_t v = 0;
        for (const char* d = buf + neg; *d; d++) {
            if (v > (UINT64_MAX - 9) / 10) { is_int = 0; break; }
            v = v * 10 + (uint64_t)(*d - '0');
        }
        if (is_int && v > (uint64_t)INT64_MAX) is_int = 0;
        if (is_int) nd->i = neg ? -(int64_t)v : (int64_t)v;
    }
    nd->is_int = is_int;
    j->p = q;
    return 0;
}

static int json_value(Json* j, int depth);

// Keys of an object are checked for duplicates as they come while it has fewer than JSON_DUP_SCAN
// members; beyond that (a tokenizer.json's vocab: 150,000 keys) all at once, sorted: O(n log n).
#define JSON_DUP_SCAN 64

static int json_key_cmp(const void* a, const void* b) { return strcmp(*(const char* const*)a, *(const char* const*)b); }

static int json_sorted_dups(Json* j, int node) {
    int n = j->nodes[node].count, k = 0;
    const char** keys = (const char**)malloc(sizeof(char*) * (size_t)n);
    if (!keys) return json_fail(j, "out of memory");
    for (int ch = j->nodes[node].first; ch >= 0; ch = j->nodes[ch].next) keys[k++] = j->nodes[ch].key;
    qsort(keys, (size_t)n, sizeof(char*), json_key_cmp);
    for (int i = 1; i < n; i++)
        if (!strcmp(keys[i - 1], keys[i])) {
            free(keys);
            return json_fail(j, "duplicate key");
        }
    free(keys);
    return 0;
}

// A value at j->p; returns its node index or -1.
static int json_value(Json* j, int depth) {
    if (depth > JSON_MAX_DEPTH) return json_fail(j, "nesting deeper than 64");
    json_ws(j);
    if (j->p >= j->end) return json_fail(j, "unexpected end of input");
    char c = *j->p;
    int node;
    if (c == '{' || c == '[') {
        int obj = c == '{';
        node = json_node(j, obj ? JSON_OBJECT : JSON_ARRAY);
        if (node < 0) return json_fail(j, "out of memory");
        j->p++;
        json_ws(j);
        int last = -1;
        if (j->p < j->end && *j->p == (obj ? '}' : ']')) { j->p++; return node; }
        while (1) {
            const char* key = NULL;
            int64_t klen = 0;
            if (obj) {
                json_ws(j);
                if (j->p >= j->end || *j->p != '"') return json_fail(j, "expected a string key");
                if (json_string(j, &key, &klen)) return -1;
                if ((int64_t)strlen(key) != klen) return json_fail(j, "NUL character in a key");
                if (j->nodes[node].count < JSON_DUP_SCAN) // small objects: compare now; big ones: sorted at '}'
                    for (int ch = j->nodes[node].first; ch >= 0; ch = j->nodes[ch].next)
                        if (!strcmp(j->nodes[ch].key, key)) return json_fail(j, "duplicate key");
                json_ws(j);
                if (j->p >= j->end || *j->p != ':') return json_fail(j, "expected ':'");
                j->p++;
            }
            int ch = json_value(j, depth + 1);
            if (ch < 0) return -1;
            j->nodes[ch].key = key;
            if (last < 0) j->nodes[node].first = ch; else j->nodes[last].next = ch;
            last = ch;
            j->nodes[node].count++;
            json_ws(j);
            if (j->p >= j->end) return json_fail(j, "unexpected end of input");
            if (*j->p == ',') { j->p++; continue; }
            if (*j->p == (obj ? '}' : ']')) {
                if (obj && j->nodes[node].count > JSON_DUP_SCAN && json_sorted_dups(j, node)) return -1;
                j->p++;
                return node;
            }
            return json_fail(j, obj ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    if (c == '"') {
        node = json_node(j, JSON_STRING);
        if (node < 0) return json_fail(j, "out of memory");
        const char* s;
        int64_t len;
        if (json_string(j, &s, &len)) return -1;
        j->nodes[node].str = s;
        j->nodes[node].len = len;
        return node;
    }
    static const struct { const char* word; JsonType t; } words[] = {{"null", JSON_NULL}, {"true", JSON_TRUE}, {"false", JSON_FALSE}};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(words[k].word);
        if ((size_t)(j->end - j->p) >= n && !memcmp(j->p, words[k].word, n)) {
            j->p += n;
            node = json_node(j, words[k].t);
            return node < 0 ? json_fail(j, "out of memory") : node;
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        node = json_node(j, JSON_NUMBER);
        if (node < 0) return json_fail(j, "out of memory");
        return json_number(j, node) ? -1 : node;
    }
    return json_fail(j, "unexpected character");
}

// Parse text[0, len) as one JSON value (node 0 is the root). Returns 0, or -1 with err set.
static int json_parse(Json* j, const char* text, size_t len, char* err, size_t errlen) {
    memset(j, 0, sizeof(*j));
    j->p = j->start = text;
    j->end = text + len;
    j->err = err;
    j->errlen = errlen;
    j->strs = (char*)malloc(len + 1);
    if (!j->strs) return st_err(err, errlen, "JSON: out of memory for %zu bytes", len);
    if (json_value(j, 0) < 0) return -1;
    json_ws(j);
    if (j->p != j->end) return json_fail(j, "trailing characters after the value");
    return 0;
}

static void json_free(Json* j) {
    free(j->nodes);
    free(j->strs);
    memset(j, 0, sizeof(*j));
}

// The member `key` of object node obj, or -1.
static int json_get(const Json* j, int obj, const char* key) {
    if (obj < 0 || j->nodes[obj].type != JSON_OBJECT) return -1;
    for (int ch = j->nodes[obj].first; ch >= 0; ch = j->nodes[ch].next)
        if (!strcmp(j->nodes[ch].key, key)) return ch;
    return -1;
}

// ----------------------------------------------------------------------------
// Half-precision conversions (IEEE binary16), round to nearest even.

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF, u;
    if (exp == 0x1F) u = sign | 0x7F800000u | (man << 13);              // inf, NaN
    else if (exp != 0) u = sign | ((exp + 112) << 23) | (man << 13);     // normal: rebias 15 -> 127
    else if (man == 0) u = sign;                                         // zero
    else {                                                               // subnormal: man * 2^-24
        float f = (float)man * (1.0f / 16777216.0f);
        memcpy(&u, &f, 4);
        u |= sign;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00);               // NaN
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00);              // rounds past 65504: inf
    if (a < 0x38800000u) {                                               // below 2^-14: subnormal or 0
        float af;
        memcpy(&af, &a, 4);
        float scaled = af * 16777216.0f;                                 // in units of 2^-24, exact
        uint32_t m = (uint32_t)scaled;
        float rem = scaled - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t r = a + 0xFFFu + ((a >> 13) & 1u);                          // nearest even at bit 13
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

// ----------------------------------------------------------------------------
// Reading a safetensors file: the header parsed and validated, the data mapped read-only.

typedef enum { ST_F32, ST_F16, ST_BF16, ST_OTHER } StDtype;
#define ST_MAX_DIMS 8
#define ST_MAX_HEADER (100ll << 20) // 100 MB: the limit the safetensors library itself sets

// The dtypes of the format and their sizes; we compute with the first three.
static const struct { const char* name; int size; StDtype dt; } st_dtypes[] = {
    {"F32", 4, ST_F32}, {"F16", 2, ST_F16}, {"BF16", 2, ST_BF16},
    {"F64", 8, ST_OTHER}, {"I64", 8, ST_OTHER}, {"U64", 8, ST_OTHER}, {"I32", 4, ST_OTHER}, {"U32", 4, ST_OTHER},
    {"I16", 2, ST_OTHER}, {"U16", 2, ST_OTHER}, {"I8", 1, ST_OTHER}, {"U8", 1, ST_OTHER}, {"BOOL", 1, ST_OTHER},
    {"F8_E4M3", 1, ST_OTHER}, {"F8_E5M2", 1, ST_OTHER},
};
static const char* st_dtype_name(StDtype dt) { return dt == ST_F32 ? "F32" : dt == ST_F16 ? "F16" : dt == ST_BF16 ? "BF16" : "other"; }

typedef struct {
    const char* name;       // points into the file's JSON
    char dtype_name[12];
    StDtype dtype;
    int esize;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    int64_t begin, end;     // bytes, relative to the data section
} StTensor;

typedef struct {
    char path[4096];
    int fd;
    const unsigned char* map; // the whole file (read-only), or NULL for an empty data section
    int64_t file_size, data_start;
    Json json;
    StTensor* t;
    int n;
} StFile;

static int cmp_st_begin(const void* a, const void* b) {
    const StTensor* x = *(const StTensor* const*)a;
    const StTensor* y = *(const StTensor* const*)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end < y->end ? -1 : x->end > y->end);
}

static void st_close(StFile* f) {
    if (f->map) munmap((void*)f->map, (size_t)f->file_size);
    if (f->fd >= 0) close(f->fd);
    json_free(&f->json);
    free(f->t);
    memset(f, 0, sizeof(*f));
    f->fd = -1;
}

// Open and validate: header length within the file and <= 100 MB, a JSON object of tensors each
// with a known dtype, a shape of non-negative dims, data_offsets [begin, end] with
// end - begin = numel * dtype size, end inside the file, no two tensors overlapping.
static int st_open(StFile* f, const char* path, char* err, size_t errlen) {
    memset(f, 0, sizeof(*f));
    f->fd = -1;
    snprintf(f->path, sizeof(f->path), "%s", path);
    f->fd = zt_open_read(path);
    if (f->fd < 0) return st_err(err, errlen, "%s: cannot open: %s", path, zt_strerror(errno));
    struct stat st;
    if (fstat(f->fd, &st) != 0) return st_err(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
    f->file_size = st.st_size;
    unsigned char len8[8];
    if (f->file_size < 8 || pread(f->fd, len8, 8, 0) != 8)
        return st_err(err, errlen, "%s: %lld bytes, too short for a safetensors file (8-byte header length first)", path, (long long)f->file_size);
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = hlen << 8 | len8[k];
    if (hlen > (uint64_t)(f->file_size - 8))
        return st_err(err, errlen, "%s: header length %llu is larger than the file (%lld bytes): truncated or not safetensors",
                      path, (unsigned long long)hlen, (long long)f->file_size);
    if ((int64_t)hlen > ST_MAX_HEADER) return st_err(err, errlen, "%s: header length %llu is above the 100 MB limit", path, (unsigned long long)hlen);
    f->data_start = 8 + (int64_t)hlen;
    f->map = (const unsigned char*)mmap(NULL, (size_t)f->file_size, PROT_READ, MAP_PRIVATE, f->fd, 0);
    if (f->map == MAP_FAILED) { f->map = NULL; return st_err(err, errlen, "%s: cannot map: %s", path, strerror(errno)); }
    char jerr[512];
    if (json_parse(&f->json, (const char*)f->map + 8, (size_t)hlen, jerr, sizeof(jerr)))
        return st_err(err, errlen, "%s: header: %s", path, jerr);
    const Json* j = &f->json;
    if (j->nodes[0].type != JSON_OBJECT) return st_err(err, errlen, "%s: header is not a JSON object", path);
    f->t = (StTensor*)calloc((size_t)j->nodes[0].count + 1, sizeof(StTensor));
    int64_t data_size = f->file_size - f->data_start;
    for (int ch = j->nodes[0].first; ch >= 0; ch = j->nodes[ch].next) {
        const JsonNode* nd = &j->nodes[ch];
        if (!strcmp(nd->key, "__metadata__")) {
            if (nd->type != JSON_OBJECT) return st_err(err, errlen, "%s: __metadata__ is not an object", path);
            for (int m = nd->first; m >= 0; m = j->nodes[m].next)
                if (j->nodes[m].type != JSON_STRING) return st_err(err, errlen, "%s: __metadata__ value '%s' is not a string", path, j->nodes[m].key);
            continue;
        }
        StTensor* t = &f->t[f->n];
        t->name = nd->key;
        if (nd->type != JSON_OBJECT) return st_err(err, errlen, "%s: tensor %s: not an object", path, t->name);
        int dt = json_get(j, ch, "dtype"), sh = json_get(j, ch, "shape"), of = json_get(j, ch, "data_offsets");
        if (dt < 0 || j->nodes[dt].type != JSON_STRING) return st_err(err, errlen, "%s: tensor %s: no dtype string", path, t->name);
        if (sh < 0 || j->nodes[sh].type != JSON_ARRAY) return st_err(err, errlen, "%s: tensor %s: no shape array", path, t->name);
        if (of < 0 || j->nodes[of].type != JSON_ARRAY || j->nodes[of].count != 2) return st_err(err, errlen, "%s: tensor %s: data_offsets is not [begin, end]", path, t->name);
        if (nd->count != 3) return st_err(err, errlen, "%s: tensor %s: unexpected fields (only dtype, shape, data_offsets)", path, t->name);
        int known = -1;
        for (size_t k = 0; k < sizeof(st_dtypes) / sizeof(st_dtypes[0]); k++)
            if (!strcmp(j->nodes[dt].str, st_dtypes[k].name)) known = (int)k;
        if (known < 0) return st_err(err, errlen, "%s: tensor %s: unknown dtype '%.16s'", path, t->name, j->nodes[dt].str);
        snprintf(t->dtype_name, sizeof(t->dtype_name), "%s", st_dtypes[known].name);
        t->dtype = st_dtypes[known].dt;
        t->esize = st_dtypes[known].size;
        if (j->nodes[sh].count > ST_MAX_DIMS) return st_err(err, errlen, "%s: tensor %s: more than %d dimensions", path, t->name, ST_MAX_DIMS);
        t->numel = 1;
        for (int d = j->nodes[sh].first; d >= 0; d = j->nodes[d].next) {
            const JsonNode* dn = &j->nodes[d];
            if (dn->type != JSON_NUMBER || !dn->is_int || dn->i < 0 || dn->i > (1ll << 40))
                return st_err(err, errlen, "%s: tensor %s: shape entry is not a non-negative integer", path, t->name);
            t->shape[t->ndim++] = dn->i;
            if (t->numel > (1ll << 48) / (dn->i ? dn->i : 1)) return st_err(err, errlen, "%s: tensor %s: too many elements", path, t->name);
            t->numel *= dn->i;
        }
        const JsonNode* b = &j->nodes[j->nodes[of].first];
        const JsonNode* e = &j->nodes[b->next];
        if (b->type != JSON_NUMBER || !b->is_int || e->type != JSON_NUMBER || !e->is_int || b->i < 0 || e->i < b->i)
            return st_err(err, errlen, "%s: tensor %s: data_offsets must be integers 0 <= begin <= end", path, t->name);
        t->begin = b->i;
        t->end = e->i;
        if (t->end - t->begin != t->numel * t->esize)
            return st_err(err, errlen, "%s: tensor %s: data_offsets [%lld, %lld] hold %lld bytes, but shape and dtype %s need %lld",
                          path, t->name, (long long)t->begin, (long long)t->end, (long long)(t->end - t->begin), t->dtype_name, (long long)(t->numel * t->esize));
        if (t->end > data_size)
            return st_err(err, errlen, "%s: tensor %s: data_offsets end %lld is past the end of the data (%lld bytes): truncated file?",
                          path, t->name, (long long)t->end, (long long)data_size);
        f->n++;
    }
    // no overlaps: sorted by begin, each starts at or after the previous one's end
    const StTensor** order = (const StTensor**)malloc(sizeof(StTensor*) * (f->n + 1));
    for (int k = 0; k < f->n; k++) order[k] = &f->t[k];
    qsort(order, f->n, sizeof(StTensor*), cmp_st_begin);
    for (int k = 1; k < f->n; k++)
        if (order[k]->begin < order[k - 1]->end && order[k]->end > order[k]->begin) {
            int rc = st_err(err, errlen, "%s: tensors %s and %s overlap (bytes [%lld, %lld) and [%lld, %lld))", path, order[k - 1]->name,
                            order[k]->name, (long long)order[k - 1]->begin, (long long)order[k - 1]->end, (long long)order[k]->begin, (long long)order[k]->end);
            free(order);
            return rc;
        }
    free(order);
    return 0;
}

static const StTensor* st_find(const StFile* f, const char* name) {
    for (int k = 0; k < f->n; k++) if (!strcmp(f->t[k].name, name)) return &f->t[k];
    return NULL;
}

// Element i of tensor t (F32, F16 or BF16) as a float.
static inline float st_get(const StFile* f, const StTensor* t, int64_t i) {
    const unsigned char* p = f->map + f->data_start + t->begin + i * t->esize;
    uint32_t u;
    switch (t->dtype) {
    case ST_F32: { float v; memcpy(&v, p, 4); return v; }
    case ST_F16: { uint16_t h; memcpy(&h, p, 2); return f16_to_f32(h); }
    default: { uint16_t h; memcpy(&h, p, 2); u = (uint32_t)h << 16; float v; memcpy(&v, &u, 4); return v; }
    }
}

// ----------------------------------------------------------------------------
// Writing: the header of n tensors (in the order given, back to back), padded with spaces to a
// multiple of 8 bytes as the reference implementation does. The caller writes each tensor's
// bytes at data_start + offsets[k].

typedef struct { char name[128]; StDtype dtype; int ndim; int64_t shape[2]; } StSpec;

static int st_esize(StDtype dt) { return dt == ST_F32 ? 4 : 2; }

// Returns the header bytes (malloc'd, length *hlen including the 8-byte length) and each
// tensor's data offset; the metadata object is written as {"format": "pt"}.
static char* st_make_header(const StSpec* s, int n, int64_t* offsets, int64_t* hlen_out) {
    size_t cap = 256 + (size_t)n * 256, len = 8;
    char* h = (char*)malloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
        int64_t numel = 1;
        for (int d = 0; d < s[k].ndim; d++) numel *= s[k].shape[d];
        int64_t bytes = numel * st_esize(s[k].dtype);
        offsets[k] = off;
        len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", s[k].name, st_dtype_name(s[k].dtype));
        for (int d = 0; d < s[k].ndim; d++) len += (size_t)snprintf(h + len, cap - len, d ? ",%lld" : "%lld", (long long)s[k].shape[d]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + bytes));
        off += bytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while ((len - 8) % 8) h[len++] = ' ';
    uint64_t hl = len - 8;
    for (int k = 0; k < 8; k++) h[k] = (char)(hl >> (8 * k) & 0xFF);
    *hlen_out = (int64_t)len;
    return h;
}

#endif // ZT_SAFETENSORS_H
