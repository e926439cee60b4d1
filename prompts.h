// prompts.h — prompt/completion fine-tuning data: `-tokenize data.jsonl` (TRL's prompt-completion
// format, one JSON object per line with string fields "prompt" and "completion") into llm.c token
// shards plus a loss mask beside each (PATH.mask, the format in dataloader.h).
//
// Packing, for the T given by -t (recorded in every mask file; training with another T is an error):
//   the stream is  EOT p1.. c1.. EOT p2.. c2.. EOT ...  where each example is its prompt's tokens,
//   its completion's tokens (encoded separately, as TRL does) and an EOT, preceded by the EOT that
//   ended the example before it (or the shard's first token). A *sample* is T+1 tokens starting at
//   a multiple of T (dataloader.h), so an example together with its leading EOT is placed inside
//   one sample: when it does not fit in what is left of the current sample, the rest is filled with
//   EOT padding and it starts in the next. No example crosses a sample boundary.
//   An example longer than T tokens loses the *start of its prompt* (left truncation, counted and
//   reported); one whose completion + EOT alone is longer than T is refused, naming its line.
// The mask: the completion's tokens and the EOT after them count (the model learns to stop);
// the prompt, the leading EOT and the padding do not. Examples packed into one sample attend to the
// examples before them in it (there is no attention mask): as in most packed fine-tuning, each
// starts after an EOT, which GPT-2 was trained to treat as a document boundary.
// Splits: example i goes to the val shards when val_every > 0 and i % val_every == val_every - 1.
// Shards: at most shard_tokens tokens (at least one sample), named as -tokenize names them.
// Errors (exit 2 in the caller): the line number and what is wrong (bad JSON, a missing field, a
// field that is not a string, invalid UTF-8, an example that cannot fit); every file this run
// wrote is removed again.
//
// -prompt's side (below tokenize_prompts_to_shards): prompt_file_read reads @FILE as a stream (a
// pipe, /dev/stdin, <(...) or a file: its size is never trusted), prompt_split cuts it into prompts
// (plain text: one per non-empty line; FILE.jsonl: one JSON string per line, so a prompt may hold
// newlines, e.g. "Q: ...\nA:"; a {"prompt": ...} object, the training format, also works), and
// sample_token is the sampling rule of -prompt and the samples (-temperature, -top-k, greedy).
//
// defines: PromptStats, tokenize_prompts_to_shards, PromptList, prompt_file_read, prompt_split,
//          prompt_list_free, sample_token
//
// May call: safetensors.h (the JSON parser), tokenizer.h and dataloader.h.
#ifndef ZT_PROMPTS_H
#define ZT_PROMPTS_H

#include <math.h>
#include <sys/stat.h>
#include "safetensors.h" // defines: Json, json_parse, json_get (the strict parser)
#include "tokenizer.h"   // defines: Tokenizer, tokenizer_encode, tokenize_shard_path
#include "dataloader.h"  // defines: write_token_shard, MASK_MAGIC

#define PROMPT_EOT 50256  // GPT-2's; a tokenizer.json brings its own document token (tok->eot_token)

typedef struct {
    int64_t examples[2], tokens[2], counted[2]; // [0] train, [1] val
    int64_t cut;                                // examples whose prompt was cut at the start
    int shards[2];
} PromptStats;

typedef struct {           // one split being packed
    const char* name;
    uint32_t* tok;
    uint32_t eot;          // the tokenizer's document token: separates and pads examples
    uint32_t V;            // its vocabulary size: uint16 shards up to 65,536, else uint32
    uint8_t* mask;
    int64_t n, cap;        // tokens in the current shard
    int64_t ws;            // start of the current sample (a multiple of T)
    int index;             // next shard number
} PromptSplit;

static int prompt_push(PromptSplit* s, uint32_t t, uint8_t m) {
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 4096;
        uint32_t* nt = (uint32_t*)realloc(s->tok, sizeof(uint32_t) * cap);
        if (!nt) return -1;
        s->tok = nt;
        uint8_t* nm = (uint8_t*)realloc(s->mask, cap);
        if (!nm) return -1;
        s->mask = nm;
        s->cap = cap;
    }
    s->tok[s->n] = t;
    s->mask[s->n] = m;
    s->n++;
    return 0;
}

// Write the mask of a shard atomically (temporary name, fsync, rename).
static int write_mask_file(const char* path, const uint8_t* mask, int64_t n, int T, char* err, size_t errlen) {
    char tmp[4400];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    FILE* f = fopen(tmp, "wb");
    if (!f) return st_err(err, errlen, "mask %s: cannot create: %s", tmp, strerror(errno));
    int32_t h[SHARD_HEADER_INTS] = {0};
    h[0] = MASK_MAGIC; h[1] = MASK_VERSION; h[2] = (int32_t)n; h[3] = T;
    int ok = fwrite(h, sizeof(h), 1, f) == 1 && fwrite(mask, 1, (size_t)n, f) == (size_t)n && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) { remove(tmp); return st_err(err, errlen, "mask %s: write failed: %s", path, strerror(errno)); }
    return 0;
}

// Close the current shard of split s: pad its last sample, write shard and mask, start a new one.
static int prompt_flush(PromptSplit* s, int T, const char* prefix, char (*written)[4200], int* nwritten, PromptStats* st, int which, char* err, size_t errlen) {
    if (s->n <= 1) return 0; // only the leading EOT: nothing to write
    while (s->n < s->ws + T + 1) if (prompt_push(s, s->eot, 0)) return st_err(err, errlen, "out of memory");
    char path[4096];
    tokenize_shard_path(path, sizeof(path), prefix, s->name, s->index++);
    char derr[1024];
    if (tokenize_write_ids(path, s->tok, (size_t)s->n, s->V, derr, sizeof(derr))) return st_err(err, errlen, "%s", derr);
    snprintf(written[(*nwritten)++], 4200, "%s", path);
    char mpath[4200];
    snprintf(mpath, sizeof(mpath), "%s.mask", path);
    if (write_mask_file(mpath, s->mask, s->n, T, err, errlen)) return -1;
    snprintf(written[(*nwritten)++], 4200, "%s", mpath);
    st->tokens[which] += s->n;
    st->shards[which]++;
    s->n = 0;
    s->ws = 0;
    return prompt_push(s, s->eot, 0); // every shard starts with the EOT before its first example
}

// The whole job; returns 0, or -1 with err naming the file and line (and every written file removed).
static int tokenize_prompts_to_shards(Tokenizer* tok, const char* in_path, const char* prefix, int T, int val_every,
                                      int64_t shard_tokens, PromptStats* st, char* err, size_t errlen) {
    memset(st, 0, sizeof(*st));
    if (T < 2) return st_err(err, errlen, "-t %d: packing needs T >= 2", T);
    if (shard_tokens < T + 1) shard_tokens = T + 1;
    FILE* in = fopen(in_path, "rb");
    if (!in) return st_err(err, errlen, "%s: cannot open: %s", in_path, strerror(errno));
    PromptSplit sp[2];
    memset(sp, 0, sizeof(sp));
    sp[0].name = "train";
    sp[1].name = "val";
    for (int k = 0; k < 2; k++) {
        sp[k].eot = tok->eot_token >= 0 ? (uint32_t)tok->eot_token : PROMPT_EOT;
        sp[k].V = tok->vocab_size;
    }
    int max_files = 64;
    char (*written)[4200] = (char (*)[4200])malloc(sizeof(*written) * max_files);
    int nwritten = 0, rc = 0;
    char* line = NULL;
    size_t lcap = 0;
    ssize_t len;
    int64_t lineno = 0, example = 0;
    uint32_t* ids = NULL;
    size_t nids = 0, icap = 0;
    for (int k = 0; k < 2; k++) prompt_push(&sp[k], sp[k].eot, 0);
    while (rc == 0 && (len = getline(&line, &lcap, in)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue; // blank lines are allowed between records
        Json j;
        char jerr[256];
        if (json_parse(&j, line, (size_t)len, jerr, sizeof(jerr))) { rc = st_err(err, errlen, "%s:%lld: %s", in_path, (long long)lineno, jerr); json_free(&j); break; }
        int fp = json_get(&j, 0, "prompt"), fc = json_get(&j, 0, "completion");
        if (j.nodes[0].type != JSON_OBJECT) rc = st_err(err, errlen, "%s:%lld: not a JSON object", in_path, (long long)lineno);
        else if (fp < 0 || fc < 0) rc = st_err(err, errlen, "%s:%lld: no \"%s\" field (each line needs string fields \"prompt\" and \"completion\")", in_path, (long long)lineno, fp < 0 ? "prompt" : "completion");
        else if (j.nodes[fp].type != JSON_STRING || j.nodes[fc].type != JSON_STRING)
            rc = st_err(err, errlen, "%s:%lld: \"%s\" is not a string (conversational lists are not supported)", in_path, (long long)lineno, j.nodes[fp].type != JSON_STRING ? "prompt" : "completion");
        if (rc) { json_free(&j); break; }
        nids = 0;
        if (tokenizer_encode(tok, (const unsigned char*)j.nodes[fp].str, (size_t)j.nodes[fp].len, &ids, &nids, &icap)) rc = st_err(err, errlen, "tokenizer: out of memory");
        size_t np = nids;
        if (!rc && tokenizer_encode(tok, (const unsigned char*)j.nodes[fc].str, (size_t)j.nodes[fc].len, &ids, &nids, &icap)) rc = st_err(err, errlen, "tokenizer: out of memory");
        json_free(&j);
        if (rc) break;
        int64_t nc = (int64_t)(nids - np), skip = 0;
        if (nc + 1 > T) { rc = st_err(err, errlen, "%s:%lld: the completion is %lld tokens: with its EOT longer than T = %d. HINT: a larger -t", in_path, (long long)lineno, (long long)nc, T); break; }
        if ((int64_t)nids + 1 > T) { skip = (int64_t)nids + 1 - T; st->cut++; } // cut the prompt's start
        int64_t n = (int64_t)nids - skip + 1;                                  // tokens placed, EOT included
        int which = val_every > 0 && example % val_every == val_every - 1;
        example++;
        PromptSplit* s = &sp[which];
        if (s->n + n - 1 > s->ws + T) { // does not fit in this sample: pad it, move to the next
            while (s->n < s->ws + T + 1) if (prompt_push(s, s->eot, 0)) { rc = st_err(err, errlen, "out of memory"); break; }
            if (rc) break;
            if (s->ws + 2 * T + 1 > shard_tokens) { // a next sample would overflow the shard: close it
                if (nwritten + 2 > max_files) { max_files *= 2; written = (char (*)[4200])realloc(written, sizeof(*written) * max_files); }
                if (prompt_flush(s, T, prefix, written, &nwritten, st, which, err, errlen)) { rc = -1; break; }
            } else {
                s->ws += T; // the next sample starts at this one's last token
            }
        }
        for (int64_t i = skip; i < (int64_t)nids && !rc; i++) rc = prompt_push(s, ids[i], i >= (int64_t)np);
        if (!rc) rc = prompt_push(s, s->eot, 1);
        if (rc) { rc = st_err(err, errlen, "out of memory"); break; }
        st->examples[which]++;
        st->counted[which] += nc + 1;
    }
    if (rc == 0 && ferror(in)) rc = st_err(err, errlen, "%s: read error", in_path);
    if (rc == 0 && example == 0) rc = st_err(err, errlen, "%s: no examples", in_path);
    for (int k = 0; k < 2 && rc == 0; k++) {
        if (nwritten + 2 > max_files) { max_files *= 2; written = (char (*)[4200])realloc(written, sizeof(*written) * max_files); }
        if (prompt_flush(&sp[k], T, prefix, written, &nwritten, st, k, err, errlen)) rc = -1;
    }
    if (rc) for (int i = 0; i < nwritten; i++) remove(written[i]); // nothing half-done survives
    fclose(in);
    free(line);
    free(ids);
    free(written);
    for (int k = 0; k < 2; k++) { free(sp[k].tok); free(sp[k].mask); }
    return rc;
}

// ---- -prompt

#define PROMPT_FILE_MAX ((size_t)64 << 20) // bytes of a prompt file at most

// The whole of `path` (a file, a pipe, /dev/stdin, a <(...) descriptor) into a malloc'd,
// NUL-terminated *out. Reads until end of file, never trusting a size from stat or ftell (a pipe
// has none, a directory has a nonsense one). 0, or -1 with a message naming the path.
static int prompt_file_read(const char* path, char** out, size_t* len, char* err, size_t errlen) {
    *out = NULL;
    *len = 0;
    struct stat st;
    if (stat(path, &st) != 0) return st_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return st_err(err, errlen, "%s: is a directory (a prompt file holds one prompt per line, or one JSON string per line in a .jsonl)", path);
    FILE* f = fopen(path, "rb");
    if (!f) return st_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char* buf = (char*)malloc(cap);
    for (;;) {
        if (!buf) { fclose(f); return st_err(err, errlen, "%s: out of memory", path); }
        if (n + 1 == cap) {
            if (cap >= PROMPT_FILE_MAX) { free(buf); fclose(f); return st_err(err, errlen, "%s: longer than %zu MiB: not a prompt file?", path, PROMPT_FILE_MAX >> 20); }
            char* nb = (char*)realloc(buf, cap * 2);
            if (!nb) free(buf);
            buf = nb;
            cap *= 2;
            continue;
        }
        size_t r = fread(buf + n, 1, cap - 1 - n, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f), e = errno;
    fclose(f);
    if (bad) { free(buf); return st_err(err, errlen, "%s: read failed: %s", path, strerror(e)); }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

typedef struct { int n; char** text; size_t* len; } PromptList; // each prompt's bytes (NUL-terminated too)

static int prompt_list_add(PromptList* pl, const char* s, size_t n) {
    char** t = (char**)realloc(pl->text, sizeof(char*) * (pl->n + 1));
    if (!t) return -1;
    pl->text = t;
    size_t* l = (size_t*)realloc(pl->len, sizeof(size_t) * (pl->n + 1));
    if (!l) return -1;
    pl->len = l;
    char* c = (char*)malloc(n + 1);
    if (!c) return -1;
    memcpy(c, s, n);
    c[n] = 0;
    pl->text[pl->n] = c;
    pl->len[pl->n++] = n;
    return 0;
}

static void prompt_list_free(PromptList* pl) {
    for (int i = 0; i < pl->n; i++) free(pl->text[i]);
    free(pl->text);
    free(pl->len);
    memset(pl, 0, sizeof(*pl));
}

// The prompts in text[0, len): jsonl = 0, one per non-empty line (a trailing \r dropped); jsonl = 1,
// each non-blank line one JSON string (or an object with a string "prompt"). `name` is for messages
// (FILE:LINE). 0, or -1 with err.
static int prompt_split(const char* name, const char* text, size_t len, int jsonl, PromptList* pl, char* err, size_t errlen) {
    memset(pl, 0, sizeof(*pl));
    long long lineno = 0;
    for (size_t at = 0; at < len;) {
        const char* line = text + at;
        const char* nl = (const char*)memchr(line, '\n', len - at);
        size_t n = nl ? (size_t)(nl - line) : len - at;
        at += n + (nl ? 1 : 0);
        lineno++;
        if (n && line[n - 1] == '\r') n--;
        size_t blank = 0;
        while (blank < n && (line[blank] == ' ' || line[blank] == '\t')) blank++;
        if (blank == n) continue;
        if (!jsonl) {
            if (prompt_list_add(pl, line, n)) { prompt_list_free(pl); return st_err(err, errlen, "%s: out of memory", name); }
            continue;
        }
        Json j;
        char jerr[256];
        if (json_parse(&j, line, n, jerr, sizeof(jerr))) {
            json_free(&j);
            prompt_list_free(pl);
            return st_err(err, errlen, "%s:%lld: %s (a .jsonl prompt file holds one JSON string per line, e.g. \"Q: ...\\nA:\")", name, lineno, jerr);
        }
        int node = j.nodes[0].type == JSON_STRING ? 0 : json_get(&j, 0, "prompt");
        if (node < 0 || j.nodes[node].type != JSON_STRING) {
            json_free(&j);
            prompt_list_free(pl);
            return st_err(err, errlen, "%s:%lld: not a JSON string (nor an object with a string \"prompt\")", name, lineno);
        }
        int rc = j.nodes[node].len == 0 ? 0 : prompt_list_add(pl, j.nodes[node].str, (size_t)j.nodes[node].len);
        json_free(&j);
        if (rc) { prompt_list_free(pl); return st_err(err, errlen, "%s: out of memory", name); }
    }
    return 0;
}

// The k-th largest of x[0, n) (k = 1: the largest). Reorders x. Quickselect (Hoare), middle pivot.
static float kth_largest(float* x, int n, int k) {
    int lo = 0, hi = n - 1, want = k - 1; // position want in descending order
    while (lo < hi) {
        float pivot = x[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (x[i] > pivot) i++;
            while (x[j] < pivot) j--;
            if (i <= j) { float t = x[i]; x[i] = x[j]; x[j] = t; i++; j--; }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return x[want];
    }
    return x[want];
}

// The next token from logits[0, V): temperature 0 is greedy (the largest logit, the lowest index
// on a tie); otherwise softmax(logits / temperature) over the top_k largest logits (0: all; ties at
// the k-th value kept in index order until k), sampled by the inverse CDF in index order at u in
// [0, 1). scratch: V floats, keep: V bytes (the caller's, allocated once).
static int sample_token(const float* logits, int V, float temperature, int top_k, double u, float* scratch, unsigned char* keep) {
    int best = 0;
    for (int j = 1; j < V; j++) if (logits[j] > logits[best]) best = j;
    if (temperature == 0.0f) return best;
    memset(keep, 1, (size_t)V);
    if (top_k > 0 && top_k < V) {
        memcpy(scratch, logits, sizeof(float) * (size_t)V);
        float thr = kth_largest(scratch, V, top_k);
        int above = 0;
        for (int j = 0; j < V; j++) above += logits[j] > thr;
        int ties = top_k - above; // how many of the values equal to thr are kept, lowest index first
        for (int j = 0; j < V; j++) keep[j] = logits[j] > thr || (logits[j] == thr && ties-- > 0);
    }
    double maxv = logits[best], sum = 0.0;
    for (int j = 0; j < V; j++) if (keep[j]) sum += exp(((double)logits[j] - maxv) / temperature);
    double target = u * sum, cdf = 0.0; // the first token whose cumulative weight passes u * sum
    int last = best;
    for (int j = 0; j < V; j++) {
        if (!keep[j]) continue;
        last = j;
        cdf += exp(((double)logits[j] - maxv) / temperature);
        if (target < cdf) return j;
    }
    return last;
}

#endif // ZT_PROMPTS_H
