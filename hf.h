// hf.h — Hugging Face GPT-2 checkpoints (transformers' GPT2LMHeadModel) in and out.
//
// In:  a directory with config.json and model.safetensors (or model.safetensors.index.json and
//      its shards), or a model.safetensors file with config.json beside it. The config is read and
//      every architecture option we do not implement is refused by name; every tensor is found
//      (with or without the "transformer." prefix), its shape checked against the config and its
//      dtype (F32, F16, BF16) widened to FP32 as it is read. The result is a LogicalFill source
//      (zero.h): it fills the same logical ranges, in llm.c's order, as an llm.c model file does,
//      so ZeRO sharding, resume and export need nothing new.
// Out: config.json + model.safetensors with {"format": "pt"} metadata, the tied lm_head omitted
//      (transformers ties it back), in F32, BF16 or F16.
//
// The mapping (one table, HF_GPT2_TENSORS): transformers' GPT-2 uses Conv1D, whose weight is
// stored (in, out) — the transpose of llm.c's (out, in) — for c_attn, c_proj and c_fc. The buffers
// attn.bias (the causal mask) and attn.masked_bias of older checkpoints are not parameters and are
// skipped. lm_head.weight, when stored, must equal wte (we only train the tied head).
//
// Not supported (refused by name when the config asks for it): n_inner other than 4*n_embd,
// untied embeddings, cross-attention, scale_attn_weights false, scale_attn_by_inverse_layer_idx,
// activations other than gelu_new / gelu_pytorch_tanh, layer_norm_epsilon other than 1e-5, other
// architectures (model_type other than gpt2), pytorch_model.bin (pickle) files.
//
// This header knows nothing of the trainer's types: the caller describes llm.c's logical layout
// (HFLlmcTensor) and hands blocks of FP32 values to the writer.
//
// defines: HFConfig, HFCheckpoint, hf_is_checkpoint_path, hf_open, hf_bind, hf_fill, hf_close,
//          HFWriter, hf_writer_open, hf_writer_put, hf_writer_commit, hf_writer_abort
//
// May call: safetensors.h and the C library.
#ifndef ZT_HF_H
#define ZT_HF_H

#include <limits.h>
#include <dirent.h>
#include "safetensors.h" // defines: Json, json_parse, StFile, st_open, st_find, st_get, st_make_header

typedef struct { int L, C, NH, V, maxT; } HFConfig; // n_layer, n_embd, n_head, vocab_size, n_positions

// X(llm.c name, HF name without "transformer." ("%d": the layer), per layer, Conv1D (stored
//   transposed), HF dim 0, HF dim 1 (0: a 1-D tensor)) — in terms of HFConfig* c.
#define HF_GPT2_TENSORS(X)                                                      \
    X(wte,      "wte.weight",              0, 0, c->V,     c->C)                \
    X(wpe,      "wpe.weight",              0, 0, c->maxT,  c->C)                \
    X(ln1w,     "h.%d.ln_1.weight",        1, 0, c->C,     0)                   \
    X(ln1b,     "h.%d.ln_1.bias",          1, 0, c->C,     0)                   \
    X(qkvw,     "h.%d.attn.c_attn.weight", 1, 1, c->C,     3 * c->C)            \
    X(qkvb,     "h.%d.attn.c_attn.bias",   1, 0, 3 * c->C, 0)                   \
    X(attprojw, "h.%d.attn.c_proj.weight", 1, 1, c->C,     c->C)                \
    X(attprojb, "h.%d.attn.c_proj.bias",   1, 0, c->C,     0)                   \
    X(ln2w,     "h.%d.ln_2.weight",        1, 0, c->C,     0)                   \
    X(ln2b,     "h.%d.ln_2.bias",          1, 0, c->C,     0)                   \
    X(fcw,      "h.%d.mlp.c_fc.weight",    1, 1, c->C,     4 * c->C)            \
    X(fcb,      "h.%d.mlp.c_fc.bias",      1, 0, 4 * c->C, 0)                   \
    X(fcprojw,  "h.%d.mlp.c_proj.weight",  1, 1, 4 * c->C, c->C)                \
    X(fcprojb,  "h.%d.mlp.c_proj.bias",    1, 0, c->C,     0)                   \
    X(lnfw,     "ln_f.weight",             0, 0, c->C,     0)                   \
    X(lnfb,     "ln_f.bias",               0, 0, c->C,     0)

enum {
#define X(name, hf, per_layer, conv1d, d0, d1) HF_##name,
    HF_GPT2_TENSORS(X)
#undef X
    HF_NT
};

typedef struct { const char* llmc; const char* hf; int per_layer, conv1d; int64_t d0, d1; } HFTensorRow;

static void hf_rows(const HFConfig* c, HFTensorRow* rows) {
    int k = 0;
#define X(name, hfname, pl, cv, dim0, dim1) rows[k++] = (HFTensorRow){#name, hfname, pl, cv, (int64_t)(dim0), (int64_t)(dim1)};
    HF_GPT2_TENSORS(X)
#undef X
}

static void hf_name(const HFTensorRow* r, int layer, char* out, size_t cap) { // cap >= 64: the names are short
    int n = r->per_layer ? snprintf(out, cap, r->hf, layer) : snprintf(out, cap, "%s", r->hf);
    if (n < 0 || (size_t)n >= cap) out[0] = 0;
}

// ----------------------------------------------------------------------------
// config.json

static int hf_read_file(const char* path, char** out, size_t* len, size_t cap, char* err, size_t errlen) {
    FILE* f = fopen(path, "rb");
    if (!f) return st_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    char* buf = (char*)malloc(cap + 1);
    size_t n = fread(buf, 1, cap + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); return st_err(err, errlen, "%s: read error", path); }
    if (n > cap) { free(buf); return st_err(err, errlen, "%s: larger than %zu bytes", path, cap); }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

// Read config.json: the dimensions (transformers' GPT2Config defaults where a key is absent) and a
// refusal, by name, of every option we do not implement.
static int hf_read_config(const char* path, HFConfig* c, char* err, size_t errlen) {
    char* text;
    size_t len;
    if (hf_read_file(path, &text, &len, 1 << 20, err, errlen)) return -1;
    Json j;
    char jerr[512];
    if (json_parse(&j, text, len, jerr, sizeof(jerr))) { json_free(&j); free(text); return st_err(err, errlen, "%s: %s", path, jerr); }
    int rc = -1;
    const JsonNode* N = j.nodes;
    int k;
    if (N[0].type != JSON_OBJECT) { st_err(err, errlen, "%s: not a JSON object", path); goto done; }
    {
        static const struct { const char* key; int def; } dims[] = {
            {"n_layer", 12}, {"n_embd", 768}, {"n_head", 12}, {"vocab_size", 50257}, {"n_positions", 1024}};
        int v[5];
        for (int d = 0; d < 5; d++) {
            k = json_get(&j, 0, dims[d].key);
            v[d] = dims[d].def;
            if (k >= 0) {
                if (N[k].type != JSON_NUMBER || !N[k].is_int || N[k].i < 1 || N[k].i > (1 << 24)) {
                    st_err(err, errlen, "%s: %s must be a positive integer", path, dims[d].key);
                    goto done;
                }
                v[d] = (int)N[k].i;
            }
        }
        c->L = v[0]; c->C = v[1]; c->NH = v[2]; c->V = v[3]; c->maxT = v[4];
    }
    if ((k = json_get(&j, 0, "model_type")) >= 0 && (N[k].type != JSON_STRING || strcmp(N[k].str, "gpt2"))) {
        st_err(err, errlen, "%s: model_type '%s' is not supported (only gpt2: GPT2LMHeadModel)", path, N[k].type == JSON_STRING ? N[k].str : "?");
        goto done;
    }
    if ((k = json_get(&j, 0, "n_inner")) >= 0 && N[k].type != JSON_NULL && !(N[k].type == JSON_NUMBER && N[k].is_int && N[k].i == 4ll * c->C)) {
        st_err(err, errlen, "%s: n_inner = %g is not supported (only null or 4*n_embd = %d)", path, N[k].num, 4 * c->C);
        goto done;
    }
    if ((k = json_get(&j, 0, "activation_function")) >= 0 &&
        (N[k].type != JSON_STRING || (strcmp(N[k].str, "gelu_new") && strcmp(N[k].str, "gelu_pytorch_tanh")))) {
        st_err(err, errlen, "%s: activation_function '%s' is not supported (only gelu_new or gelu_pytorch_tanh: GELU, tanh approximation)",
               path, N[k].type == JSON_STRING ? N[k].str : "?");
        goto done;
    }
    {   // booleans that must have GPT-2's value: (key, required value, what the other value means)
        static const struct { const char* key; int want; const char* what; } flags[] = {
            {"tie_word_embeddings", 1, "untied embeddings (a separate lm_head) are not supported"},
            {"add_cross_attention", 0, "cross-attention is not supported"},
            {"scale_attn_weights", 1, "attention without the 1/sqrt(head size) scale is not supported"},
            {"scale_attn_by_inverse_layer_idx", 0, "scaling attention by 1/layer index is not supported"},
        };
        for (size_t f = 0; f < sizeof(flags) / sizeof(flags[0]); f++) {
            k = json_get(&j, 0, flags[f].key);
            if (k < 0) continue;
            if (N[k].type != JSON_TRUE && N[k].type != JSON_FALSE) { st_err(err, errlen, "%s: %s must be true or false", path, flags[f].key); goto done; }
            if ((N[k].type == JSON_TRUE) != flags[f].want) {
                st_err(err, errlen, "%s: %s = %s: %s", path, flags[f].key, flags[f].want ? "false" : "true", flags[f].what);
                goto done;
            }
        }
    }
    if ((k = json_get(&j, 0, "layer_norm_epsilon")) >= 0 && (N[k].type != JSON_NUMBER || fabs(N[k].num - 1e-5) > 1e-12)) {
        st_err(err, errlen, "%s: layer_norm_epsilon = %g is not supported (only 1e-5, GPT-2's)", path, N[k].num);
        goto done;
    }
    rc = 0;
done:
    json_free(&j);
    free(text);
    return rc;
}

// ----------------------------------------------------------------------------
// Reading a checkpoint.

typedef struct { const char* name; int64_t logical, n; int per_layer; } HFLlmcTensor; // llm.c's layout, from the caller

typedef struct {
    HFConfig cfg;
    char config_path[PATH_MAX + 64];
    StFile* files;
    int nfiles;
    const StTensor** src; // (HF_NT * L): the tensor of row k, layer l (io rows use l = 0)
    int* src_file;        // (HF_NT * L)
    HFTensorRow rows[HF_NT];
    // bound to llm.c's logical layout by hf_bind
    HFLlmcTensor llmc[HF_NT];
    int Vp;
} HFCheckpoint;

static int hf_has_suffix(const char* s, const char* suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

// Is -e's value a Hugging Face checkpoint (a directory, a .safetensors file or an index)?
static int hf_is_checkpoint_path(const char* path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return 1;
    return hf_has_suffix(path, ".safetensors") || hf_has_suffix(path, ".safetensors.index.json");
}

static int hf_exists(const char* path) { struct stat st; return stat(path, &st) == 0; }

static void hf_close(HFCheckpoint* ck) {
    for (int i = 0; i < ck->nfiles; i++) st_close(&ck->files[i]);
    free(ck->files);
    free(ck->src);
    free(ck->src_file);
    memset(ck, 0, sizeof(*ck));
}

// The shards an index names (distinct, in order of first appearance), checked to be plain file
// names in the index's directory. Fills files[] (opened) and returns the index JSON in *idx.
static int hf_open_index(HFCheckpoint* ck, const char* dir, const char* index_path, Json* idx, char** idx_text, char* err, size_t errlen) {
    size_t len;
    if (hf_read_file(index_path, idx_text, &len, 64 << 20, err, errlen)) return -1;
    char jerr[512];
    if (json_parse(idx, *idx_text, len, jerr, sizeof(jerr))) return st_err(err, errlen, "%s: %s", index_path, jerr);
    int wm = json_get(idx, 0, "weight_map");
    if (wm < 0 || idx->nodes[wm].type != JSON_OBJECT) return st_err(err, errlen, "%s: no weight_map object", index_path);
    ck->files = (StFile*)calloc((size_t)idx->nodes[wm].count + 1, sizeof(StFile));
    const char** names = (const char**)calloc((size_t)idx->nodes[wm].count + 1, sizeof(char*));
    int rc = 0;
    for (int ch = idx->nodes[wm].first; ch >= 0 && rc == 0; ch = idx->nodes[ch].next) {
        const JsonNode* nd = &idx->nodes[ch];
        if (nd->type != JSON_STRING || strchr(nd->str, '/') || !nd->str[0] || !strcmp(nd->str, ".."))
            { rc = st_err(err, errlen, "%s: tensor %s: shard must be a file name in the same directory", index_path, nd->key); break; }
        int seen = 0;
        for (int i = 0; i < ck->nfiles; i++) if (!strcmp(names[i], nd->str)) seen = 1;
        if (seen) continue;
        char p[2 * PATH_MAX];
        snprintf(p, sizeof(p), "%s/%.*s", dir, PATH_MAX - 1, nd->str);
        names[ck->nfiles] = nd->str;
        if (st_open(&ck->files[ck->nfiles++], p, err, errlen)) rc = -1;
    }
    // every tensor the index names is in the shard it names, and every shard tensor is named
    for (int ch = idx->nodes[wm].first; ch >= 0 && rc == 0; ch = idx->nodes[ch].next) {
        const JsonNode* nd = &idx->nodes[ch];
        for (int i = 0; i < ck->nfiles; i++)
            if (!strcmp(names[i], nd->str) && !st_find(&ck->files[i], nd->key))
                rc = st_err(err, errlen, "%s: tensor %s: the index places it in %s, which does not hold it", index_path, nd->key, nd->str);
    }
    for (int i = 0; i < ck->nfiles && rc == 0; i++)
        for (int t = 0; t < ck->files[i].n && rc == 0; t++) {
            int k = json_get(idx, wm, ck->files[i].t[t].name);
            if (k < 0 || strcmp(idx->nodes[k].str, names[i]))
                rc = st_err(err, errlen, "%s: tensor %s: not listed in the index %s under this file", ck->files[i].path, ck->files[i].t[t].name, index_path);
        }
    free(names);
    return rc;
}

// Open a checkpoint (see the top of this file for what `path` may be), read its config and find
// and check every tensor. Returns 0, or -1 with err naming the file and tensor.
static int hf_open(HFCheckpoint* ck, const char* path, char* err, size_t errlen) {
    memset(ck, 0, sizeof(*ck));
    char dir[PATH_MAX], single[PATH_MAX + 64] = "", index[PATH_MAX + 64] = "";
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof(dir), "%s", path);
        snprintf(single, sizeof(single), "%s/model.safetensors", dir);
        snprintf(index, sizeof(index), "%s/model.safetensors.index.json", dir);
        if (hf_exists(single)) index[0] = 0;
        else if (hf_exists(index)) single[0] = 0;
        else {
            char bin[PATH_MAX + 64];
            snprintf(bin, sizeof(bin), "%s/pytorch_model.bin", dir);
            if (hf_exists(bin))
                return st_err(err, errlen, "%s holds pytorch_model.bin (a pickle) but no model.safetensors: not supported. HINT: convert it with "
                              "transformers: GPT2LMHeadModel.from_pretrained(dir).save_pretrained(dir, safe_serialization=True)", dir);
            return st_err(err, errlen, "%s: no model.safetensors or model.safetensors.index.json in this directory", dir);
        }
    } else {
        if (stat(path, &st) != 0) return st_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        snprintf(dir, sizeof(dir), "%s", path);
        char* slash = strrchr(dir, '/');
        if (slash) *slash = 0; else snprintf(dir, sizeof(dir), ".");
        if (hf_has_suffix(path, ".index.json")) snprintf(index, sizeof(index), "%s", path);
        else snprintf(single, sizeof(single), "%s", path);
    }
    snprintf(ck->config_path, sizeof(ck->config_path), "%s/config.json", dir);
    if (!hf_exists(ck->config_path))
        return st_err(err, errlen, "%s: no config.json beside the weights (it gives n_head and the architecture). HINT: download it with the model", dir);
    if (hf_read_config(ck->config_path, &ck->cfg, err, errlen)) return -1;
    Json idx;
    memset(&idx, 0, sizeof(idx));
    char* idx_text = NULL;
    int rc = 0;
    if (single[0]) {
        ck->files = (StFile*)calloc(1, sizeof(StFile));
        ck->nfiles = 1;
        rc = st_open(&ck->files[0], single, err, errlen);
    } else {
        rc = hf_open_index(ck, dir, index, &idx, &idx_text, err, errlen);
    }
    json_free(&idx);
    free(idx_text);
    if (rc) return -1;
    // find every tensor: with or without the prefix, once
    const HFConfig* c = &ck->cfg;
    hf_rows(c, ck->rows);
    ck->src = (const StTensor**)calloc((size_t)HF_NT * c->L, sizeof(StTensor*));
    ck->src_file = (int*)calloc((size_t)HF_NT * c->L, sizeof(int));
    const StTensor* lm_head = NULL;
    int lm_head_file = 0;
    for (int fi = 0; fi < ck->nfiles; fi++) {
        const StFile* f = &ck->files[fi];
        for (int t = 0; t < f->n; t++) {
            const char* name = f->t[t].name;
            const char* bare = !strncmp(name, "transformer.", 12) ? name + 12 : name;
            if (!strcmp(name, "lm_head.weight")) { lm_head = &f->t[t]; lm_head_file = fi; continue; }
            int layer = -1, pos = 0;
            char rest[160];
            if (sscanf(bare, "h.%d.%150s%n", &layer, rest, &pos) == 2 && (!strcmp(rest, "attn.bias") || !strcmp(rest, "attn.masked_bias")))
                continue; // the causal-mask buffers: not parameters
            int found = 0;
            for (int k = 0; k < HF_NT && !found; k++) {
                const HFTensorRow* r = &ck->rows[k];
                for (int l = 0; l < (r->per_layer ? c->L : 1) && !found; l++) {
                    char want[160];
                    hf_name(r, l, want, sizeof(want));
                    if (strcmp(bare, want)) continue;
                    found = 1;
                    int slot = k * c->L + l;
                    if (ck->src[slot])
                        return st_err(err, errlen, "%s: tensor %s: stored twice (with and without the transformer. prefix?)", f->path, name);
                    const StTensor* s = &f->t[t];
                    int want_ndim = r->d1 ? 2 : 1;
                    if (s->ndim != want_ndim || s->shape[0] != r->d0 || (r->d1 && s->shape[1] != r->d1)) {
                        char shp[96] = "";
                        for (int d = 0; d < s->ndim; d++) snprintf(shp + strlen(shp), sizeof(shp) - strlen(shp), d ? ", %lld" : "%lld", (long long)s->shape[d]);
                        if (r->d1) return st_err(err, errlen, "%s: tensor %s: shape (%s), but %s says (%lld, %lld)", f->path, name, shp, ck->config_path, (long long)r->d0, (long long)r->d1);
                        return st_err(err, errlen, "%s: tensor %s: shape (%s), but %s says (%lld)", f->path, name, shp, ck->config_path, (long long)r->d0);
                    }
                    if (s->dtype == ST_OTHER)
                        return st_err(err, errlen, "%s: tensor %s: dtype %s is not supported (F32, F16, BF16)", f->path, name, s->dtype_name);
                    ck->src[slot] = s;
                    ck->src_file[slot] = fi;
                }
            }
            if (!found)
                return st_err(err, errlen, "%s: tensor %s is not part of a GPT-2 with %s's config (n_layer %d): another architecture?",
                              f->path, name, ck->config_path, c->L);
        }
    }
    for (int k = 0; k < HF_NT; k++)
        for (int l = 0; l < (ck->rows[k].per_layer ? c->L : 1); l++)
            if (!ck->src[k * c->L + l]) {
                char want[160];
                hf_name(&ck->rows[k], l, want, sizeof(want));
                return st_err(err, errlen, "%s: tensor %s (or transformer.%s) is missing", ck->nfiles == 1 ? ck->files[0].path : index, want, want);
            }
    if (lm_head) { // tied: it must hold wte's values
        const StTensor* wte = ck->src[HF_wte * c->L];
        const StFile* wf = &ck->files[ck->src_file[HF_wte * c->L]];
        const StFile* lf = &ck->files[lm_head_file];
        if (lm_head->ndim != 2 || lm_head->shape[0] != wte->shape[0] || lm_head->shape[1] != wte->shape[1] || lm_head->dtype == ST_OTHER)
            return st_err(err, errlen, "%s: tensor lm_head.weight: shape or dtype differs from wte: an untied head is not supported", lf->path);
        for (int64_t i = 0; i < wte->numel; i++)
            if (st_get(lf, lm_head, i) != st_get(wf, wte, i))
                return st_err(err, errlen, "%s: tensor lm_head.weight differs from wte.weight (element %lld): an untied head is not supported",
                              lf->path, (long long)i);
    }
    return 0;
}

// Bind to llm.c's logical layout: for every llm.c tensor the caller's (name, logical offset, elements
// per layer). Checks that the two tables describe the same tensors with the same sizes.
static int hf_bind(HFCheckpoint* ck, const HFLlmcTensor* t, int n, int Vp, char* err, size_t errlen) {
    if (n != HF_NT) return st_err(err, errlen, "internal error: %d llm.c tensors, the Hugging Face table has %d", n, HF_NT);
    ck->Vp = Vp;
    for (int k = 0; k < HF_NT; k++) {
        const HFTensorRow* r = &ck->rows[k];
        if (strcmp(t[k].name, r->llmc) || t[k].per_layer != r->per_layer)
            return st_err(err, errlen, "internal error: llm.c tensor %d is %s, the Hugging Face table says %s", k, t[k].name, r->llmc);
        int64_t want = (k == HF_wte ? (int64_t)Vp : r->d0) * (r->d1 ? r->d1 : 1);
        if (t[k].n != want) return st_err(err, errlen, "internal error: %s has %lld elements, expected %lld", r->llmc, (long long)t[k].n, (long long)want);
        ck->llmc[k] = t[k];
    }
    return 0;
}

// LogicalFill (zero.h): dst[i] = logical parameter (logical + i), i < len, widened to FP32.
static void hf_fill(void* ctx, float* dst, int64_t logical, int64_t len) {
    const HFCheckpoint* ck = (const HFCheckpoint*)ctx;
    const HFConfig* c = &ck->cfg;
    for (int64_t i = 0; i < len;) {
        int64_t li = logical + i;
        int k = HF_NT - 1; // the llm.c tensor holding li (in logical order)
        while (ck->llmc[k].logical > li) k--;
        const HFLlmcTensor* t = &ck->llmc[k];
        const HFTensorRow* r = &ck->rows[k];
        int64_t within = li - t->logical;
        int l = (int)(within / t->n);
        int64_t e = within % t->n;
        int64_t run = t->n - e < len - i ? t->n - e : len - i;
        const StTensor* s = ck->src[k * c->L + (r->per_layer ? l : 0)];
        const StFile* f = &ck->files[ck->src_file[k * c->L + (r->per_layer ? l : 0)]];
        for (int64_t j = 0; j < run; j++) {
            int64_t x = e + j; // llm.c element within this layer's tensor
            float v;
            if (k == HF_wte && x >= s->numel) v = 0.0f;   // padded vocabulary rows Vp > V
            else if (r->conv1d) {                         // llm.c (out, in) from Conv1D (in, out) = (d0, d1)
                int64_t o = x / r->d0, in = x % r->d0;
                v = st_get(f, s, in * r->d1 + o);
            } else v = st_get(f, s, x);
            dst[i + j] = v;
        }
        i += run;
    }
}

// ----------------------------------------------------------------------------
// Writing a checkpoint: hf_writer_open (header of every tensor), hf_writer_put for each llm.c
// tensor of each layer, hf_writer_commit (fsync, rename model.safetensors, then config.json).
// Everything goes to temporary names first; on any error nothing is left behind.

typedef struct {
    HFConfig cfg;
    StDtype dtype;
    char dir[PATH_MAX], tmp[PATH_MAX + 64], path[PATH_MAX + 32];
    int fd;
    HFTensorRow rows[HF_NT];
    int64_t data_start;
    int64_t* off;     // (HF_NT * L) byte offset of each tensor in the data section
    char* done;       // (HF_NT * L)
} HFWriter;

static int hf_writer_open(HFWriter* w, const char* dir, const HFConfig* c, StDtype dtype, char* err, size_t errlen) {
    memset(w, 0, sizeof(*w));
    w->fd = -1;
    w->cfg = *c;
    w->dtype = dtype;
    snprintf(w->dir, sizeof(w->dir), "%s", dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return st_err(err, errlen, "%s: cannot create the directory: %s", dir, strerror(errno));
    hf_rows(c, w->rows);
    StSpec* spec = (StSpec*)calloc((size_t)HF_NT * c->L, sizeof(StSpec));
    int* slot_of = (int*)calloc((size_t)HF_NT * c->L, sizeof(int));
    int n = 0;
    // order: wte, wpe, h.0.*, h.1.*, ..., ln_f.* (transformers' own order)
    for (int pass = 0; pass < 3; pass++)
        for (int l = 0; l < (pass == 1 ? c->L : 1); l++)
            for (int k = 0; k < HF_NT; k++) {
                const HFTensorRow* r = &w->rows[k];
                int in_pass = r->per_layer ? 1 : (k == HF_lnfw || k == HF_lnfb) ? 2 : 0;
                if (in_pass != pass) continue;
                hf_name(r, l, spec[n].name, sizeof(spec[n].name));
                spec[n].dtype = dtype;
                spec[n].ndim = r->d1 ? 2 : 1;
                spec[n].shape[0] = r->d0;
                spec[n].shape[1] = r->d1;
                slot_of[n] = k * c->L + l;
                n++;
            }
    int64_t* offs = (int64_t*)calloc((size_t)n, sizeof(int64_t));
    int64_t hlen;
    char* header = st_make_header(spec, n, offs, &hlen);
    w->off = (int64_t*)calloc((size_t)HF_NT * c->L, sizeof(int64_t));
    w->done = (char*)calloc((size_t)HF_NT * c->L, 1);
    for (int s = 0; s < n; s++) w->off[slot_of[s]] = offs[s];
    for (int s = 0; s < HF_NT * c->L; s++) { // slots that do not exist (io rows, l > 0) count as done
        int k = s / c->L, l = s % c->L;
        if (!w->rows[k].per_layer && l > 0) w->done[s] = 1;
    }
    w->data_start = hlen;
    snprintf(w->path, sizeof(w->path), "%s/model.safetensors", dir);
    snprintf(w->tmp, sizeof(w->tmp), "%s.tmp.%d", w->path, (int)getpid());
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int rc = 0;
    if (w->fd < 0) rc = st_err(err, errlen, "%s: cannot create: %s", w->tmp, strerror(errno));
    else if (pwrite(w->fd, header, (size_t)hlen, 0) != hlen) rc = st_err(err, errlen, "%s: write failed: %s", w->tmp, strerror(errno));
    free(header); free(offs); free(spec); free(slot_of);
    return rc;
}

static void hf_writer_abort(HFWriter* w) {
    if (w->fd >= 0) { close(w->fd); unlink(w->tmp); }
    free(w->off);
    free(w->done);
    memset(w, 0, sizeof(*w));
    w->fd = -1;
}

static inline uint16_t hf_bf16_round(float f) { // nearest even, NaN kept (as device.cuh's f32_to_bf16)
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// Tensor `llmc` (an llm.c name) of `layer` (0 for io tensors): v holds it in llm.c's shape (wte
// with its Vp rows: only the first V are written).
static int hf_writer_put(HFWriter* w, const char* llmc, int layer, const float* v, char* err, size_t errlen) {
    int k = 0;
    while (k < HF_NT && strcmp(w->rows[k].llmc, llmc)) k++;
    if (k == HF_NT) return st_err(err, errlen, "internal error: no Hugging Face tensor for %s", llmc);
    const HFTensorRow* r = &w->rows[k];
    int64_t numel = r->d0 * (r->d1 ? r->d1 : 1);
    int es = st_esize(w->dtype);
    unsigned char* buf = (unsigned char*)malloc((size_t)(numel * es));
    for (int64_t x = 0; x < numel; x++) { // x: the HF element; Conv1D (in, out) from llm.c (out, in)
        float val = r->conv1d ? v[(x % r->d1) * r->d0 + x / r->d1] : v[x];
        if (w->dtype == ST_F32) memcpy(buf + 4 * x, &val, 4);
        else { uint16_t h = w->dtype == ST_F16 ? f32_to_f16(val) : hf_bf16_round(val); memcpy(buf + 2 * x, &h, 2); }
    }
    int slot = k * w->cfg.L + (r->per_layer ? layer : 0);
    off_t at = (off_t)(w->data_start + w->off[slot]);
    const unsigned char* p = buf;
    size_t left = (size_t)(numel * es);
    int rc = 0;
    while (left > 0) {
        ssize_t n = pwrite(w->fd, p, left, at);
        if (n <= 0) { if (n < 0 && errno == EINTR) continue; rc = st_err(err, errlen, "%s: write failed: %s", w->tmp, strerror(errno)); break; }
        p += n; left -= (size_t)n; at += n;
    }
    free(buf);
    if (rc == 0) w->done[slot] = 1;
    return rc;
}

static int hf_commit_fd(int fd, const char* tmp, const char* path, char* err, size_t errlen) {
    if (fsync(fd) != 0 || close(fd) != 0) { unlink(tmp); return st_err(err, errlen, "%s: fsync/close failed: %s", tmp, strerror(errno)); }
    if (rename(tmp, path) != 0) { unlink(tmp); return st_err(err, errlen, "%s: rename failed: %s", path, strerror(errno)); }
    return 0;
}

// The config transformers needs for GPT2LMHeadModel (GPT-2's defaults for what we do not train).
static int hf_writer_commit(HFWriter* w, char* err, size_t errlen) {
    const HFConfig* c = &w->cfg;
    for (int s = 0; s < HF_NT * c->L; s++)
        if (!w->done[s]) { int rc = st_err(err, errlen, "internal error: tensor %s of layer %d never written", w->rows[s / c->L].llmc, s % c->L); hf_writer_abort(w); return rc; }
    char cfg[2048], cpath[PATH_MAX + 32], ctmp[PATH_MAX + 64];
    char tokens[96] = "";
    if (c->V > 50256) snprintf(tokens, sizeof(tokens), "  \"bos_token_id\": 50256,\n  \"eos_token_id\": 50256,\n");
    int n = snprintf(cfg, sizeof(cfg),
        "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n  \"vocab_size\": %d,\n  \"n_positions\": %d,\n"
        "  \"n_ctx\": %d,\n  \"n_embd\": %d,\n  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n"
        "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n  \"initializer_range\": 0.02,\n"
        "  \"resid_pdrop\": 0.1,\n  \"embd_pdrop\": 0.1,\n  \"attn_pdrop\": 0.1,\n  \"scale_attn_weights\": true,\n"
        "  \"tie_word_embeddings\": true,\n  \"use_cache\": true,\n%s  \"torch_dtype\": \"%s\"\n}\n",
        c->V, c->maxT, c->maxT, c->C, c->L, c->NH, tokens,
        w->dtype == ST_F32 ? "float32" : w->dtype == ST_F16 ? "float16" : "bfloat16");
    snprintf(cpath, sizeof(cpath), "%s/config.json", w->dir);
    snprintf(ctmp, sizeof(ctmp), "%s.tmp.%d", cpath, (int)getpid());
    int cfd = open(ctmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (cfd < 0 || write(cfd, cfg, (size_t)n) != n) {
        int rc = st_err(err, errlen, "%s: cannot write: %s", ctmp, strerror(errno));
        if (cfd >= 0) { close(cfd); unlink(ctmp); }
        hf_writer_abort(w);
        return rc;
    }
    int fd = w->fd;
    w->fd = -1;
    int rc = hf_commit_fd(fd, w->tmp, w->path, err, errlen);
    if (rc == 0) rc = hf_commit_fd(cfd, ctmp, cpath, err, errlen);
    else { close(cfd); unlink(ctmp); }
    if (rc == 0) { int dfd = open(w->dir, O_RDONLY); if (dfd >= 0) { fsync(dfd); close(dfd); } }
    hf_writer_abort(w); // frees (fd is already closed)
    return rc;
}

#endif // ZT_HF_H
